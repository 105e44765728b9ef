// hlo.h — a builder that emits one StableHLO module as MLIR text.
//
// A program is one public function @main. Values are SSA ids (tt_hv) whose
// types (dtype + static shape) the builder tracks, so every emitted op carries
// explicit types and rules can ask a value's type. Ops are emitted in MLIR's
// generic form ("stablehlo.add"(...) : (types) -> type), which is uniform for
// ops with and without regions.
//
// Errors are sticky: the first failing call records a status (code + message)
// and returns TT_HV_INVALID; later calls with invalid operands return
// TT_HV_INVALID without overwriting it. Rules therefore chain calls and check
// tt_hlo_status once. Type errors here are bugs in a rule (TT_INTERNAL); user
// errors (shapes that don't broadcast) are caught by rules with better
// messages before they reach the builder.
#ifndef TT_HLO_HLO_H
#define TT_HLO_HLO_H

#include <stddef.h>
#include <stdint.h>

#include "torchtpu_types.h"

typedef int32_t tt_hv;
#define TT_HV_INVALID (-1)

typedef struct tt_hlo_type {
  tt_dtype dtype;
  int32_t rank;
  int64_t dims[TT_MAX_RANK];
} tt_hlo_type;

typedef struct tt_hlo tt_hlo;

tt_status tt_hlo_create(tt_hlo **out);
void tt_hlo_destroy(tt_hlo *b);
// Clears the program (keeps allocated memory) so the builder can be reused.
void tt_hlo_reset(tt_hlo *b);

// The first error, or NULL. Borrowed: stays owned by the builder until reset.
tt_status tt_hlo_status(const tt_hlo *b);
// Takes ownership of the first error (the builder forgets it).
tt_status tt_hlo_take_status(tt_hlo *b);
// Records `s` as the builder's error if none is recorded yet (else frees s).
void tt_hlo_fail(tt_hlo *b, tt_status s);

// Type of a value (NULL for TT_HV_INVALID). Borrowed until reset.
const tt_hlo_type *tt_hlo_type_of(const tt_hlo *b, tt_hv v);
int64_t tt_hlo_numel(const tt_hlo_type *t);
// `dims` may be NULL (all zero), e.g. for rank 0.
tt_hlo_type tt_hlo_make_type(tt_dtype d, int rank, const int64_t *dims);
bool tt_hlo_same_type(const tt_hlo_type *x, const tt_hlo_type *y);

// A point in the builder to return to: a caller that records many ops into
// one builder (fused eager) rewinds an op that failed half-way, so that its
// values, parameters, text and error vanish.
typedef struct tt_hlo_mark {
  int32_t nvals, nparams, next_name;
  size_t body_len;
  int indent;
} tt_hlo_mark;

tt_hlo_mark tt_hlo_get_mark(const tt_hlo *b);
// Drops everything emitted after `m` and the builder's error, if any.
void tt_hlo_rewind(tt_hlo *b, const tt_hlo_mark *m);
// Bytes of op text emitted so far (the size of the finished module, roughly).
size_t tt_hlo_body_bytes(const tt_hlo *b);
// Makes `dst` a copy of `src` as it was at mark `m` (all of it when m is
// NULL), so a recorded graph can be taken up again where it left off.
tt_status tt_hlo_copy_to_mark(tt_hlo *dst, const tt_hlo *src, const tt_hlo_mark *m);

// --- function signature ------------------------------------------------------

// Appends a parameter of @main and returns its value.
tt_hv tt_hlo_param(tt_hlo *b, const tt_hlo_type *t);
// Finishes the module returning `results`; the text stays valid until reset.
tt_status tt_hlo_finish(tt_hlo *b, const tt_hv *results, int n,
                        const char **out_text, size_t *out_len);
// tt_hlo_finish, and parameter i may share its buffer with result
// param_alias[i] (>= 0; -1: none): XLA may then write that result into the
// parameter's buffer when the caller donates it (tf.aliasing_output). Each
// result at most once, with the parameter's type.
tt_status tt_hlo_finish_aliased(tt_hlo *b, const tt_hv *results, int n,
                                const int32_t *param_alias, const char **out_text,
                                size_t *out_len);

// --- constants -----------------------------------------------------------------

// A tensor of type `t` with every element `v` (converted to t->dtype).
tt_hv tt_hlo_splat(tt_hlo *b, const tt_hlo_type *t, double v);
tt_hv tt_hlo_splat_i(tt_hlo *b, const tt_hlo_type *t, int64_t v);
// A complex splat (re, im); for a real type, tt_hlo_splat(re).
tt_hv tt_hlo_splat_c(tt_hlo *b, const tt_hlo_type *t, double re, double im);
// 0-d constants.
tt_hv tt_hlo_const(tt_hlo *b, tt_dtype d, double v);
tt_hv tt_hlo_const_i(tt_hlo *b, tt_dtype d, int64_t v);

// --- elementwise -----------------------------------------------------------------

typedef enum tt_hlo_unop {
  TT_HLO_ABS, TT_HLO_NEG, TT_HLO_EXP, TT_HLO_EXPM1, TT_HLO_LOG, TT_HLO_LOG1P,
  TT_HLO_SQRT, TT_HLO_RSQRT, TT_HLO_TANH, TT_HLO_LOGISTIC, TT_HLO_SIN,
  TT_HLO_COS, TT_HLO_TAN, TT_HLO_FLOOR, TT_HLO_CEIL, TT_HLO_ROUND_EVEN,
  TT_HLO_SIGN, TT_HLO_NOT, TT_HLO_IS_FINITE, TT_HLO_CBRT, TT_HLO_POPCNT,
  TT_HLO_UNOP_COUNT,
} tt_hlo_unop;

typedef enum tt_hlo_binop {
  TT_HLO_ADD, TT_HLO_SUB, TT_HLO_MUL, TT_HLO_DIV, TT_HLO_REM, TT_HLO_POW,
  TT_HLO_MAX, TT_HLO_MIN, TT_HLO_AND, TT_HLO_OR, TT_HLO_XOR, TT_HLO_ATAN2,
  TT_HLO_SHL, TT_HLO_SHR_A, TT_HLO_SHR_L,
  TT_HLO_BINOP_COUNT,
} tt_hlo_binop;

typedef enum tt_hlo_cmp {
  TT_HLO_EQ, TT_HLO_NE, TT_HLO_LT, TT_HLO_LE, TT_HLO_GT, TT_HLO_GE,
} tt_hlo_cmp;

// Operands must have identical types (rules broadcast and convert first).
tt_hv tt_hlo_unary(tt_hlo *b, tt_hlo_unop op, tt_hv x);
tt_hv tt_hlo_binary(tt_hlo *b, tt_hlo_binop op, tt_hv x, tt_hv y);
// erf of a float value (chlo.erf: StableHLO has no erf; the PJRT plugins
// legalise CHLO when they parse the module).
tt_hv tt_hlo_erf(tt_hlo *b, tt_hv x);
// x unchanged, through stablehlo.optimization_barrier: XLA's simplifier does
// not see through it (x / broadcast(y) would become x * broadcast(1 / y)).
tt_hv tt_hlo_barrier(tt_hlo *b, tt_hv x);
// Result is bool of the same shape; the comparison type follows the dtype.
tt_hv tt_hlo_compare(tt_hlo *b, tt_hlo_cmp cmp, tt_hv x, tt_hv y);
tt_hv tt_hlo_select(tt_hlo *b, tt_hv pred, tt_hv on_true, tt_hv on_false);
tt_hv tt_hlo_clamp(tt_hlo *b, tt_hv lo, tt_hv x, tt_hv hi);
tt_hv tt_hlo_convert(tt_hlo *b, tt_hv x, tt_dtype d);  // no-op when same
// Complex parts: real/imag of complex<fN> are fN; complex(re, im) of two
// same-typed f32/f64 values. (XLA has no bitcast to or from complex.)
tt_hv tt_hlo_real(tt_hlo *b, tt_hv x);
tt_hv tt_hlo_imag(tt_hlo *b, tt_hv x);
tt_hv tt_hlo_complex(tt_hlo *b, tt_hv re, tt_hv im);
// Reinterprets bits; element sizes must match.
tt_hv tt_hlo_bitcast(tt_hlo *b, tt_hv x, tt_dtype d);
// bitcast_convert to `t` when element widths differ: x's shape plus a
// trailing dim of the ratio when narrowing, minus it when widening (same
// bytes, StableHLO's rule).
tt_hv tt_hlo_bitcast_to(tt_hlo *b, tt_hv x, const tt_hlo_type *t);

// --- shapes ----------------------------------------------------------------------

tt_hv tt_hlo_reshape(tt_hlo *b, tt_hv x, int rank, const int64_t *dims);
// Broadcasts x to `rank`/`dims`; operand dim i maps to result dim bdims[i].
tt_hv tt_hlo_broadcast_in_dim(tt_hlo *b, tt_hv x, int rank,
                              const int64_t *dims, const int64_t *bdims);
tt_hv tt_hlo_transpose(tt_hlo *b, tt_hv x, const int64_t *perm);
// stablehlo.fft over x's trailing n (1..3) dims, whose lengths are `len`:
// FFT / IFFT (complex -> complex; IFFT divides by the product of `len`),
// RFFT (f32/f64 -> complex, trailing dim len/2+1), IRFFT (complex with
// trailing dim len/2+1 -> real of length len; divides like IFFT).
typedef enum { TT_HLO_FFT, TT_HLO_IFFT, TT_HLO_RFFT, TT_HLO_IRFFT } tt_hlo_fft_type;
tt_hv tt_hlo_fft(tt_hlo *b, tt_hv x, tt_hlo_fft_type type, const int64_t *len, int n);
tt_hv tt_hlo_slice(tt_hlo *b, tt_hv x, const int64_t *start,
                   const int64_t *limit, const int64_t *stride);
// Start indices are 0-d integer values, one per dim.
tt_hv tt_hlo_dynamic_slice(tt_hlo *b, tt_hv x, const tt_hv *starts,
                           const int64_t *sizes);
tt_hv tt_hlo_dynamic_update_slice(tt_hlo *b, tt_hv x, tt_hv update,
                                  const tt_hv *starts);
tt_hv tt_hlo_concatenate(tt_hlo *b, const tt_hv *xs, int n, int64_t dim);
tt_hv tt_hlo_pad(tt_hlo *b, tt_hv x, tt_hv pad_value, const int64_t *lo,
                 const int64_t *hi, const int64_t *interior);
tt_hv tt_hlo_reverse(tt_hlo *b, tt_hv x, const int64_t *dims, int n);
tt_hv tt_hlo_iota(tt_hlo *b, const tt_hlo_type *t, int64_t dim);

// --- linear algebra ----------------------------------------------------------------

tt_hv tt_hlo_dot_general(tt_hlo *b, tt_hv x, tt_hv y,
                         const int64_t *batch_x, const int64_t *batch_y,
                         int nbatch, const int64_t *contract_x,
                         const int64_t *contract_y, int ncontract,
                         tt_dtype out_dtype);

// --- triangular solves (hlo_linalg_lu.c) -------------------------------------------------

typedef enum { TT_HLO_NO_TRANSPOSE, TT_HLO_TRANSPOSE, TT_HLO_ADJOINT } tt_hlo_transpose_op;
// stablehlo.triangular_solve: X with op(A) X = B (left_side) or X op(A) = B,
// A [*, n, n] triangular (only the `lower` or upper triangle is read; its
// diagonal taken as ones when unit_diagonal), B [*, n, k] (left) or [*, k, n]
// with the same batch dims and dtype. Returns X, of B's type.
tt_hv tt_hlo_triangular_solve(tt_hlo *b, tt_hv a, tt_hv rhs, bool left_side, bool lower,
                              bool unit_diagonal, tt_hlo_transpose_op transpose);

// --- reductions ----------------------------------------------------------------------

typedef enum tt_hlo_reduce_kind {
  TT_HLO_REDUCE_ADD, TT_HLO_REDUCE_MUL, TT_HLO_REDUCE_MAX, TT_HLO_REDUCE_MIN,
  TT_HLO_REDUCE_AND, TT_HLO_REDUCE_OR,
  TT_HLO_REDUCE_XOR,  // reduce only (scatter, windows and collectives refuse it)
} tt_hlo_reduce_kind;

// Reduces `dims` of x with `init` (0-d, x's dtype); reduced dims are removed.
tt_hv tt_hlo_reduce(tt_hlo *b, tt_hv x, tt_hv init, const int64_t *dims,
                    int ndims, tt_hlo_reduce_kind kind);
// Index of the max (or min) along `dim`, first occurrence wins, NaN counts as
// the max like PyTorch. Writes both the values and the indices (idx_dtype).
void tt_hlo_argreduce(tt_hlo *b, tt_hv x, int64_t dim, bool is_max,
                      tt_dtype idx_dtype, tt_hv *out_values, tt_hv *out_idx);

// --- indexing --------------------------------------------------------------------------

// Generic stablehlo.gather / scatter. `update_kind` for scatter: the
// combiner (TT_HLO_REDUCE_ADD etc.), or -1 to overwrite.
typedef struct tt_hlo_gather_dims {
  const int64_t *offset_dims; int n_offset_dims;
  const int64_t *collapsed_slice_dims; int n_collapsed;
  const int64_t *start_index_map; int n_start_index_map;
  const int64_t *operand_batching_dims; int n_operand_batching;
  const int64_t *start_indices_batching_dims; int n_indices_batching;
  int64_t index_vector_dim;
} tt_hlo_gather_dims;
// The gather's result type is computed from the dimension numbers;
// `out_type`, when not NULL, is checked against it.
tt_hv tt_hlo_gather(tt_hlo *b, tt_hv x, tt_hv indices,
                    const tt_hlo_gather_dims *dims,
                    const int64_t *slice_sizes, const tt_hlo_type *out_type);

typedef struct tt_hlo_scatter_dims {
  const int64_t *update_window_dims; int n_update_window;
  const int64_t *inserted_window_dims; int n_inserted;
  const int64_t *input_batching_dims; int n_input_batching;
  const int64_t *scatter_indices_batching_dims; int n_indices_batching;
  const int64_t *scatter_dims_to_operand_dims; int n_scatter_to_operand;
  int64_t index_vector_dim;
} tt_hlo_scatter_dims;
tt_hv tt_hlo_scatter(tt_hlo *b, tt_hv x, tt_hv indices, tt_hv updates,
                     const tt_hlo_scatter_dims *dims, int update_kind);

// --- random ----------------------------------------------------------------------------

// stablehlo.rng_bit_generator (THREE_FRY) from a ui64[2] state (key,
// counter): returns random bits of type `t` (TT_U32 or TT_U64).
tt_hv tt_hlo_rng_bits(tt_hlo *b, tt_hv state, const tt_hlo_type *t);

// --- convolution, windows, sort (hlo_nn.c) ---------------------------------------------

// stablehlo.convolution. Each operand names which of its dims is batch /
// feature / spatial i; the result type is computed (x's dtype; x and w must
// share it). Padding may be negative (it crops).
typedef struct tt_hlo_conv_dims {
  int nspatial;
  int64_t in_batch, in_feature, in_spatial[TT_MAX_RANK];
  int64_t k_out, k_in, k_spatial[TT_MAX_RANK];
  int64_t out_batch, out_feature, out_spatial[TT_MAX_RANK];
  int64_t stride[TT_MAX_RANK], pad_lo[TT_MAX_RANK], pad_hi[TT_MAX_RANK];
  int64_t lhs_dilation[TT_MAX_RANK], rhs_dilation[TT_MAX_RANK];
  int64_t feature_groups, batch_groups;
} tt_hlo_conv_dims;
tt_hv tt_hlo_convolution(tt_hlo *b, tt_hv x, tt_hv w, const tt_hlo_conv_dims *d);

// A window over every dim of the operand (size 1, stride 1, no padding and
// dilation 1 leave a dim alone).
typedef struct tt_hlo_window {
  int64_t dims[TT_MAX_RANK], strides[TT_MAX_RANK];
  int64_t pad_lo[TT_MAX_RANK], pad_hi[TT_MAX_RANK];
  int64_t base_dilation[TT_MAX_RANK], window_dilation[TT_MAX_RANK];
} tt_hlo_window;
// An identity window for rank `rank` (then set what differs).
tt_hlo_window tt_hlo_window_identity(int rank);
// stablehlo.reduce_window with init (0-d, x's dtype); padding reads init.
tt_hv tt_hlo_reduce_window(tt_hlo *b, tt_hv x, tt_hv init,
                           const tt_hlo_window *w, tt_hlo_reduce_kind kind);
// The max (or min) of each window with the `idx` value at its position
// (ties: smaller index): padding reads (-inf or lowest, -1).
void tt_hlo_argreduce_window(tt_hlo *b, tt_hv x, tt_hv idx,
                             const tt_hlo_window *w, bool is_max,
                             tt_hv *out_values, tt_hv *out_idx);

// Stable sort of x along `dim`, carrying `payload` (same shape, any dtype;
// may be TT_HV_INVALID). NaN sorts as the largest value, like PyTorch.
void tt_hlo_sort(tt_hlo *b, tt_hv x, tt_hv payload, int64_t dim,
                 bool descending, tt_hv *out_values, tt_hv *out_payload);

// --- CHLO elementwise (hlo_ops.c) -------------------------------------------------------

// A float-only CHLO op the PJRT plugins legalise when they parse the module
// ("chlo.lgamma", "chlo.digamma", "chlo.erf_inv", "chlo.erfc",
// "chlo.bessel_i1e"); the result has x's type.
tt_hv tt_hlo_chlo_unary(tt_hlo *b, const char *name, tt_hv x);
// The same for two operands of identical float type ("chlo.polygamma",
// "chlo.next_after", "chlo.zeta").
tt_hv tt_hlo_chlo_binary(tt_hlo *b, const char *name, tt_hv x, tt_hv y);


// --- while loops (hlo_ops.c) -------------------------------------------------------------

// stablehlo.while over `n` carried values (any types), in three calls:
//   r = tt_hlo_while_begin(b, init, n, args);   // args: the condition's view
//   ... pred = a tensor<i1> computed from args ...
//   tt_hlo_while_body(b, pred, n, r, args);     // args: the body's view
//   ... next[i] computed from args ...
//   tt_hlo_while_end(b, init, next, n, r);
// Results are r, r+1, ..., r+n-1 (the carried values after the last step).
// Region values must not be used outside their region; values from above may
// be read inside (the regions are not isolated).
tt_hv tt_hlo_while_begin(tt_hlo *b, const tt_hv *init, int n, tt_hv *out_args);
void tt_hlo_while_body(tt_hlo *b, tt_hv pred, int n, tt_hv r, tt_hv *out_args);
void tt_hlo_while_end(tt_hlo *b, const tt_hv *init, const tt_hv *next, int n,
                      tt_hv r);

// --- functions beside @main (hlo_func.c) ------------------------------------------------

// Prepares an exported module (jax.export's text, without locations) for
// splicing: its functions, every symbol prefixed with `prefix` and every
// function private, as module-level text (owned by the caller: free), and
// the name of its renamed @main (owned: free).
tt_status tt_hlo_import_functions(const char *text, const char *prefix,
                                  char **out_funcs, char **out_entry);
// Adds module-level function text beside @main, once per `key` (later calls
// with a key already added do nothing). Kept until reset (not rewound).
void tt_hlo_add_functions(tt_hlo *b, uint64_t key, const char *text);
// "func.call" of @callee on operands, with `nres` results of `types`; returns
// the first result (the others follow it: r, r+1, ...).
tt_hv tt_hlo_call(tt_hlo *b, const char *callee, const tt_hv *operands, int n,
                  const tt_hlo_type *types, int nres);
// A typed-FFI "stablehlo.custom_call" (api_version 4) to `target` with the
// attribute dictionary entries `attrs` ("tt_kernel = \"ns::f\""), row-major
// layouts, and `nres` results of `types`; returns the first result.
tt_hv tt_hlo_ffi_call(tt_hlo *b, const char *target, const char *attrs,
                      const tt_hv *operands, int n, const tt_hlo_type *types,
                      int nres);

// --- collectives (hlo_collective.c) ------------------------------------------------------
//
// Ops of a replicated program (num_replicas = n, one replica per device, see
// pjrt.h's tt_pjrt_compile_options_replicated) over ONE replica group holding
// every replica 0..n-1. all_reduce, all_gather and reduce_scatter name
// their `channel` (> 0, unique within the program) with
// use_global_device_ids, so their replica_groups hold global device ids
// (StableHLO's "flattened ids" mode; with one partition these are the
// replica ids). all_to_all and collective_permute have no
// use_global_device_ids, and a channel would make their groups partition
// ids: they take `channel` but emit none (cross-replica mode). Integer and
// float dtypes; `kind` is ADD, MUL, MAX or MIN (XLA's CPU backend rejects
// AND/OR regions in collectives).

// stablehlo.all_reduce: every replica gets the reduction of all replicas' x.
tt_hv tt_hlo_all_reduce(tt_hlo *b, tt_hv x, tt_hlo_reduce_kind kind, int n,
                        int64_t channel);
// stablehlo.all_gather: the replicas' x concatenated along `dim` (size * n).
tt_hv tt_hlo_all_gather(tt_hlo *b, tt_hv x, int64_t dim, int n, int64_t channel);
// stablehlo.reduce_scatter: replica i gets block i (along `dim`, size / n) of
// the reduction of all replicas' x; x's dim must divide by n.
tt_hv tt_hlo_reduce_scatter(tt_hlo *b, tt_hv x, int64_t dim,
                            tt_hlo_reduce_kind kind, int n, int64_t channel);
// stablehlo.all_to_all: x split in n blocks along `split_dim`; replica i gets
// every replica's block i, concatenated along `concat_dim`.
tt_hv tt_hlo_all_to_all(tt_hlo *b, tt_hv x, int64_t split_dim,
                        int64_t concat_dim, int n, int64_t channel);
// stablehlo.collective_permute: replica pairs[k][1] gets pairs[k][0]'s x;
// a replica that no pair targets gets zeros. Sources and targets unique.
tt_hv tt_hlo_collective_permute(tt_hlo *b, tt_hv x, const int64_t (*pairs)[2],
                                int npairs, int64_t channel);
// stablehlo.replica_id: this replica's index (tensor<ui32>).
tt_hv tt_hlo_replica_id(tt_hlo *b);

#endif
