// lower.h — how an ATen op becomes StableHLO.
//
// A rule is one small function that reads the op's arguments through a
// lowering context and emits the op's results with the HLO builder. The same
// rules serve eager execution, fused eager and torch.compile. Rules never see
// storages, views or PJRT: the context hands them each input tensor already
// materialised as a value of its logical shape, each Scalar as a runtime
// parameter (so scalar values never force a recompile), and takes their
// results; writing results into in-place / out= destinations (through views)
// is the context's job.
//
// A rule may be registered under several ATen names: "aten::add.Tensor",
// "aten::add_.Tensor" and "aten::add.out" share one rule because out= and
// self arguments come after (or are) the inputs the rule reads.
//
// Errors: a rule returns a status. User errors use tt_lower_fail (which
// prefixes the op name) with the shapes/dtypes involved; TT_UNIMPLEMENTED
// means "this variant is not lowered", and the op then runs through the CPU
// fallback. Builder errors are sticky (see hlo.h); the context checks them
// after the rule returns.
#ifndef TT_LOWER_LOWER_H
#define TT_LOWER_LOWER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "hlo/hlo.h"
#include "torchtpu_types.h"

typedef struct tt_lower_ctx tt_lower_ctx;
typedef tt_status (*tt_lower_fn)(tt_lower_ctx *ctx);

enum {
  // The values of Scalar arguments shape the program (e.g. arange's length):
  // they become part of the op's signature instead of runtime parameters.
  TT_RULE_SCALARS_IN_SIGNATURE = 1u << 0,
  // The rule replaces PyTorch's CompositeExplicitAutograd kernel of the op
  // (which would otherwise run for "tpu" and never reach the core): the shim
  // registers such ops for the device (e.g. _foreach_*, convolution_overrideable).
  TT_RULE_REPLACES_COMPOSITE = 1u << 1,
  // The rule handles complex tensors. A call of any other rule with a
  // complex tensor, dtype or Scalar is TT_UNIMPLEMENTED (the shim runs it on
  // the CPU): rules written for real dtypes would give wrong numbers.
  TT_RULE_COMPLEX = 1u << 2,
  // The rule's result depends on its inputs' strides, not only their values
  // (the LU _linalg_det returns factors A^T when A is contiguous): the
  // runtime never swaps a strided input for a dense copy (runtime/spill.h).
  TT_RULE_READS_LAYOUT = 1u << 3,
};

// Checks of an op's argument values that PyTorch makes on every call (a
// sampler's parameters: uniform_'s from <= to, normal_'s std >= 0). Scalars
// are runtime arguments — one program serves every value — so the runtime
// runs these on each call, before it looks the program up. NULL: the call
// is fine.
typedef tt_status (*tt_check_fn)(const tt_op_call *call);

typedef struct tt_rule {
  const char *name;  // full ATen name: "aten::add.Tensor"
  tt_lower_fn fn;
  uint32_t flags;
} tt_rule;

// A family's argument checks, by rule name (lower/table.c attaches them).
typedef struct tt_rule_check {
  const char *name;
  tt_check_fn check;
} tt_rule_check;
typedef struct tt_rule_checks {
  const tt_rule_check *items;
  int n;
} tt_rule_checks;

// The program variant a call's argument values select, for the few rules
// that specialise on a runtime value PyTorch's own kernels special-case
// (pow's exponent 2 is x * x, not a powf call per element): a small number,
// 0 for the general program, appended to the op's signature; the rule's
// lowering derives the same variant from its arguments.
typedef int64_t (*tt_variant_fn)(const tt_op_call *call);

// A family's variant functions, by rule name (lower/table.c attaches them).
typedef struct tt_rule_variant {
  const char *name;
  tt_variant_fn variant;
} tt_rule_variant;
typedef struct tt_rule_variants {
  const tt_rule_variant *items;
  int n;
} tt_rule_variants;

// The value of a call's Scalar, float or int argument i as a double; false
// when it is absent or None (for tt_check_fn).
bool tt_call_number(const tt_op_call *call, int i, double *out);
// A sampler's parameter check (for tt_check_fn): the call's number argument
// i must lie in [lo, hi], with the ends excluded where lo_open / hi_open
// (NaN never lies in it); else TT_INVALID_ARGUMENT with `fmt` formatting the
// value (one %g). NULL when it holds or the argument is absent.
tt_status tt_call_check_range(const tt_op_call *call, int i, double lo, bool lo_open, double hi,
                              bool hi_open, const char *fmt);

// --- the rule table (lower/table.c) ------------------------------------------

// Every family file exports its table; table.c joins them.
typedef struct tt_rule_table {
  const tt_rule *rules;
  int n;
} tt_rule_table;

const tt_rule *tt_rule_get(int32_t op);  // NULL when out of range
tt_check_fn tt_rule_check_get(int32_t op);   // NULL when the op has none
tt_variant_fn tt_rule_variant_get(int32_t op);  // NULL when the op has none

// Registers an extra rule at run time (tests, custom kernels). Returns its id;
// a name that already exists is replaced (its id kept).
int32_t tt_rule_register(const char *name, tt_lower_fn fn, uint32_t flags);

// --- reading arguments -------------------------------------------------------

const char *tt_lower_op_name(const tt_lower_ctx *c);  // "add.Tensor"
// The length of the op name without its overload ("max" of "max.dim"): PyTorch's
// messages name the function, as in "%.*s(): ...".
int tt_lower_op_base_len(const tt_lower_ctx *c);
const char *tt_lower_rule_name(const tt_lower_ctx *c);  // "aten::add.Tensor"
tt_hlo *tt_lower_hlo(tt_lower_ctx *c);
int tt_lower_nargs(const tt_lower_ctx *c);
// Raw argument (borrowed); structural values are read from it directly.
// Out-of-range `i` yields a static TT_VALUE_NONE.
const tt_value *tt_lower_arg(const tt_lower_ctx *c, int i);
bool tt_lower_is_none(const tt_lower_ctx *c, int i);
int64_t tt_lower_int(const tt_lower_ctx *c, int i);   // INT (or BOOL) arg
bool tt_lower_bool(const tt_lower_ctx *c, int i);
tt_dtype tt_lower_default_dtype(const tt_lower_ctx *c);
bool tt_lower_supports_f64(const tt_lower_ctx *c);  // the device has 64-bit floats
// The FFI target of the CPU attention kernels, NULL when they are not
// registered (tt_lower_options.attention_ffi_target).
const char *tt_lower_attention_ffi_target(const tt_lower_ctx *c);

// Input tensor i as a value of its logical shape and dtype. Emitted once on
// first request (later calls return the same value).
tt_hv tt_lower_tensor(tt_lower_ctx *c, int i);
// Item j of a tensor-list argument i.
tt_hv tt_lower_list_tensor(tt_lower_ctx *c, int i, int j);
// The logical type of tensor argument i (or list item j, with j >= 0) without
// emitting anything.
tt_hlo_type tt_lower_tensor_type(const tt_lower_ctx *c, int i, int j);

// The runtime value of argument i as a 0-d value of dtype d. Works for
// TT_VALUE_SCALAR (a runtime parameter) and for 0-d tensors; for an INT/BOOL
// argument it emits a constant.
tt_hv tt_lower_scalar(tt_lower_ctx *c, int i, tt_dtype d);

// Item j of a Scalar[] / float[] argument i as a 0-d runtime value of dtype d
// (like tt_lower_scalar: values never recompile).
tt_hv tt_lower_list_scalar(tt_lower_ctx *c, int i, int j, tt_dtype d);

// Random state for a rule that draws `count` numbers: a ui64[2] runtime value
// (seed, offset) from the generator in argument `gen_arg` (or the device's
// default generator when that argument is None or -1). Each call of the op
// advances the generator's offset by `count`.
tt_hv tt_lower_rng_state(tt_lower_ctx *c, int gen_arg, uint64_t count);

// --- results ------------------------------------------------------------------------

// Declares the next result. Its destination (fresh tensor, or in-place/out=
// argument) was fixed by the caller; the context converts and writes it.
void tt_lower_result(tt_lower_ctx *c, tt_hv v);
// The type of the destination of result r, when it is an argument (in-place
// or out=); returns false for a fresh result.
bool tt_lower_dest_type(const tt_lower_ctx *c, int r, tt_hlo_type *out);
// Writes v (converted to the argument's dtype; same shape) into tensor
// argument i, for ops that update an argument their schema doesn't mark as
// written (native_batch_norm's running stats). Ignored when only inferring.
void tt_lower_write_arg(tt_lower_ctx *c, int i, tt_hv v);
// Allows results to be converted to any destination dtype (copy_ semantics);
// by default only PyTorch's can_cast conversions are allowed.
void tt_lower_allow_any_cast(tt_lower_ctx *c);

// A device-side check (program.h's tt_check): where bool `bad` (any shape)
// holds, PyTorch would raise `code` with `msg` (a string literal; "{}" is
// replaced by an offending value taken from integer `val`, bad's shape, or
// TT_HV_INVALID, then by arg0, arg1). The program computes it as an extra
// output; the runtime raises at the next synchronisation. Does nothing when
// checks are off or only inferring.
void tt_lower_check(tt_lower_ctx *c, tt_hv bad, tt_hv val, tt_code code,
                    const char *msg, int64_t arg0, int64_t arg1);

// Formats an error followed by the op name and the rule's file:line,
//   tt_lower_fail(c, TT_INVALID_ARGUMENT, "shapes %s and %s don't broadcast")
// gives "shapes [2] and [3] don't broadcast (in aten::add.Tensor) [common.c:12]":
// a message that mirrors one of PyTorch's checks starts with PyTorch's text
// (its tests match it with a regex anchored at the start).
#define tt_lower_fail(c, code, ...) \
  tt_lower_fail_at((c), (code), __FILE__, __LINE__, __VA_ARGS__)
tt_status tt_lower_fail_at(const tt_lower_ctx *c, tt_code code, const char *file,
                           int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

// --- helpers shared by rules (lower/common.c) ---------------------------------

// Shorthands every family uses.
tt_dtype tt_opmath(tt_dtype d);  // the dtype PyTorch's kernels compute d in
tt_hlo_type tt_lower_type(tt_lower_ctx *c, tt_hv v);  // f32 scalar if invalid
tt_hv tt_lower_bin(tt_lower_ctx *c, tt_hlo_binop op, tt_hv x, tt_hv y);
tt_hv tt_lower_convert(tt_lower_ctx *c, tt_hv v, tt_dtype d);
// v (like's shape reduced with keepdim) broadcast back to like's shape.
tt_hv tt_lower_expand_like(tt_lower_ctx *c, tt_hv v, tt_hv like);

// Indexing pieces shared by index.c, select.c, misc.c.
// idx (integer) as i64 with negative values wrapped by `size`.
tt_hv tt_lower_wrap_index(tt_lower_ctx *c, tt_hv idx, int64_t size);
// Device-side check that integer idx lies in [0, size), or [-size, size)
// when `negatives` wrap (PyTorch's advanced indexing, take); msg and args as
// tt_lower_check's ("{}" first takes the offending index).
void tt_lower_check_index(tt_lower_ctx *c, tt_hv idx, int64_t size, bool negatives,
                          tt_code code, const char *msg, int64_t arg0, int64_t arg1);
// Scatter of updates at full coordinates crd ([*upd.shape, rank]) into x;
// kind is a combiner (TT_HLO_REDUCE_*) or -1 to overwrite; a float max/min
// gives NaN where a NaN takes part, as PyTorch (XLA CPU's combiner drops it).
tt_hv tt_lower_scatter_at(tt_lower_ctx *c, tt_hv x, tt_hv crd, tt_hv upd, int kind);
// Coordinates [*st.dims, rank] of every element of a source of type st whose
// position along `dim` is index[i] (1-D, wrapped by `size`).
tt_hv tt_lower_dim_coords(tt_lower_ctx *c, const tt_hlo_type *st, tt_hv index,
                          int64_t dim, int64_t size);

// Adaptive average pooling along one dim as a matrix (conv.c 2-d, spatial.c
// 3-d): [out, in], row o averages input positions
// [floor(o*in/out), ceil((o+1)*in/out)), in dtype acc.
tt_hv tt_lower_adaptive_avg_matrix(tt_lower_ctx *c, int64_t out, int64_t in,
                                   tt_dtype acc);

// "[2, 3]" into buf (returns buf) for messages.
const char *tt_shape_str(const tt_hlo_type *t, char *buf, size_t cap);

// PyTorch's result_type over arguments `idx` (tensors and scalars), with its
// priority of dimensioned tensors > 0-d tensors > wrapped numbers and the
// categories bool < integer < floating.
tt_dtype tt_lower_result_type(const tt_lower_ctx *c, const int *idx, int n);
bool tt_dtype_is_float(tt_dtype d);  // false for complex (tt_dtype_is_complex)
bool tt_dtype_is_int(tt_dtype d);  // integral, not bool
bool tt_can_cast(tt_dtype from, tt_dtype to);  // torch.can_cast

// Broadcasts values in place to their common shape (numpy rules); the error
// names the op and both shapes.
tt_status tt_lower_broadcast(tt_lower_ctx *c, tt_hv *vals, int n);
// True when the n values' shapes broadcast together (nothing is emitted).
bool tt_lower_broadcastable(tt_lower_ctx *c, const tt_hv *vals, int n);
// Broadcasts v to the given shape.
tt_hv tt_lower_broadcast_to(tt_lower_ctx *c, tt_hv v, int rank,
                            const int64_t *dims);
// Wraps a negative dim and checks range; error names the op.
tt_status tt_lower_dim(const tt_lower_ctx *c, int64_t dim, int rank,
                       int64_t *out);

// --- more helpers shared by rules (lower/common.c) -----------------------------

// torch.promote_types; TT_DTYPE_NONE where PyTorch refuses (uint16/32/64
// with other integer types). TT_DTYPE_NONE operands are skipped.
tt_dtype tt_promote_types(tt_dtype a, tt_dtype b);

// Argument i as a value of dtype d: a tensor keeps its shape, a Scalar (or
// int/bool, or 0-d tensor passed as a Scalar) is 0-d.
tt_hv tt_lower_operand(tt_lower_ctx *c, int i, tt_dtype d);

// Arguments idx[0..n) as values of dtype d, broadcast to their common shape.
tt_status tt_lower_operands(tt_lower_ctx *c, const int *idx, int n, tt_dtype d,
                            tt_hv *out);

// The dtype floating-point math on dtype d happens in: d itself when it is
// floating or complex, else the default dtype (PyTorch's int -> float promotion).
tt_dtype tt_lower_float_dtype(const tt_lower_ctx *c, tt_dtype d);

// The complex conjugate of x (x itself when it is real).
tt_hv tt_lower_conj(tt_lower_ctx *c, tt_hv x);

// A constant of v's type (shape and dtype) with every element x.
tt_hv tt_lower_splat_like(tt_lower_ctx *c, tt_hv v, double x);

// The rounding error of the float64 product p = x * y (x * y == p + err
// exactly, where nothing overflows): Dekker's product with Veltkamp's split.
// XLA has no FMA op; exact float64 steps (linspace, hypot) are built on it.
tt_hv tt_lower_prod_err(tt_lower_ctx *c, tt_hv x, tt_hv y, tt_hv p);

// |z| of a complex z as PyTorch's CPU abs (glibc's hypot/hypotf), bit for
// bit (elementwise.c).
tt_hv tt_lower_complex_abs(tt_lower_ctx *c, tt_hv z);

// The sign bit of a float (set for -0.0 and negative NaNs), as i1.
tt_hv tt_lower_sign_bit(tt_lower_ctx *c, tt_hv x);

// Complex a ** e as PyTorch's CPU (glibc's cpow: cexp(e * clog(a)) with C's
// complex product), zeros, infinities, overflow and NaNs included (cpow.c).
tt_hv tt_lower_complex_pow(tt_lower_ctx *c, tt_hv a, tt_hv e);

// `v` itself, held at its 16-bit type (float16, bfloat16) by an optimization
// barrier: XLA's CPU backend computes 16-bit arithmetic in float32 and drops
// a round trip through the 16-bit type between two ops, where c10's Half and
// BFloat16 round every op (linspace's product, uniform_'s compare with `to`).
// Other dtypes: `v` unchanged.
tt_hv tt_lower_rounded16(tt_lower_ctx *c, tt_hv v);

// The dims named by int[] (or int) argument i, wrapped and checked, as a
// mask over `rank` dims. None, or [] when `empty_is_all`, selects all dims.
tt_status tt_lower_dim_mask(const tt_lower_ctx *c, int i, int rank,
                            bool empty_is_all, bool *mask);

// Reduces v over the dims in `mask` with `kind` (starting from
// tt_lower_reduce_init), keeping them as size 1 when keepdim.
tt_hv tt_lower_reduce(tt_lower_ctx *c, tt_hv v, const bool *mask, bool keepdim,
                      tt_hlo_reduce_kind kind);

// The identity of a reduction for dtype d as a 0-d value (0 for add, 1 for
// mul, -inf / lowest for max, +inf / highest for min, true/false for and/or).
tt_hv tt_lower_reduce_init(tt_lower_ctx *c, tt_dtype d, tt_hlo_reduce_kind kind);

// Refuses window parameters (kernel, stride, padding, dilation, groups) past
// 2^31 in magnitude, naming `what`: the output-size arithmetic of pooling
// and convolution would overflow int64 with them. NULL when all fit.
tt_status tt_lower_check_window(tt_lower_ctx *c, const char *what, const int64_t *v, int n);

// PyTorch's checks of a pooling window over ns (2 or 3) spatial dims, with
// its texts (pooling_output_shape, pool{2,3}d_shape_check): stride not
// zero, padding non-negative and at most half the (effective) kernel,
// kernel, stride and dilation positive. NULL when all hold.
tt_status tt_lower_check_pool(tt_lower_ctx *c, int ns, const int64_t *k, const int64_t *s,
                              const int64_t *p, const int64_t *d);

// PyTorch's refusal of empty non-batch dims of a pooling input x (rank
// ns + 1 or ns + 2; the batch dim may be empty): pool2d_shape_check's and
// pool3d_shape_check's texts, `fn` naming the op in the latter.
tt_status tt_lower_check_pool_input(tt_lower_ctx *c, const tt_hlo_type *x, int ns, const char *fn);

// The adaptive pooling ops' refusal of an empty dim of t from dim `first`
// on: "fn(): Expected <what> to have non-zero size for non-batch dimensions,
// but <what> has sizes [..] with dimension d being empty".
tt_status tt_lower_check_nonempty(tt_lower_ctx *c, const tt_hlo_type *t, int first,
                                  const char *fn, const char *what);

// --- family tables (one per lower/<family>.c; joined by lower/table.c) -------

extern const tt_rule_table tt_rules_elementwise;
// Families with argument checks export them too.
extern const tt_rule_checks tt_checks_elementwise;
extern const tt_rule_variants tt_variants_elementwise;
extern const tt_rule_checks tt_checks_random;
extern const tt_rule_checks tt_checks_select;
extern const tt_rule_table tt_rules_reduction;
extern const tt_rule_table tt_rules_linalg;
extern const tt_rule_table tt_rules_shape;
extern const tt_rule_table tt_rules_nn;
extern const tt_rule_table tt_rules_random;
extern const tt_rule_table tt_rules_factory;
extern const tt_rule_table tt_rules_conv;
extern const tt_rule_table tt_rules_norm;
extern const tt_rule_table tt_rules_index;
extern const tt_rule_table tt_rules_loss;
extern const tt_rule_table tt_rules_foreach;
extern const tt_rule_table tt_rules_amp;
extern const tt_rule_table tt_rules_weight_norm;
extern const tt_rule_table tt_rules_grid_sample;
extern const tt_rule_table tt_rules_attention;
extern const tt_rule_table tt_rules_dropout;
extern const tt_rule_table tt_rules_special;
extern const tt_rule_table tt_rules_spatial;
extern const tt_rule_table tt_rules_select;
extern const tt_rule_table tt_rules_misc;
extern const tt_rule_table tt_rules_fft;
extern const tt_rule_table tt_rules_linalg_lu;
extern const tt_rule_table tt_rules_linalg_qr;
extern const tt_rule_table tt_rules_rnn;
extern const tt_rule_table tt_rules_norm_sync;
extern const tt_rule_table tt_rules_transformer;

// Checks the joined built-in tables: every name is "aten::..." and unique,
// and every rule has a function. The error lists each offender.
tt_status tt_rule_table_check(void);

// --- user kernels (lower/kernel.c) ------------------------------------------------
//
// The public tt_kernel_* calls (torchtpu.h) land here: a kernel is a rule
// registered under its schema name, with one exported module per signature.
// For a call of a kernel op: exports the variant its signature needs when
// the kernel has none yet (the exporter runs Python: call this before taking
// any lock the exporter's side may need, e.g. the runtime's). NULL for
// other ops.
tt_status tt_lower_kernel_prepare(const tt_op_call *call);
tt_status tt_lower_kernel_register(const char *name, tt_kernel_export_fn export_fn,
                                   void *export_ctx, int32_t *out_op);
// A C kernel: its rule emits a typed-FFI custom call to `target` naming it.
tt_status tt_lower_kernel_register_ffi(const char *name, const char *target,
                                       tt_kernel_export_fn export_fn, void *export_ctx,
                                       int32_t *out_op);
tt_status tt_lower_kernel_add_variant(const char *name, const char *signature,
                                      const char *module_text, int32_t nres,
                                      const int32_t *res_dtypes,
                                      const int32_t *res_ranks,
                                      const int64_t *res_dims);
int32_t tt_lower_kernel_num_variants(const char *name);  // -1: no such kernel

#endif
