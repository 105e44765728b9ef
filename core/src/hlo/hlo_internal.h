// hlo_internal.h — what the builder's files (hlo.c, hlo_ops.c, hlo_index.c)
// share: the builder struct, the text buffer, value naming and op emission.
// Nothing outside core/src/hlo/ includes this.
#ifndef TT_HLO_HLO_INTERNAL_H
#define TT_HLO_HLO_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "hlo/hlo.h"

// A growable NUL-terminated string. On allocation failure `oom` is set and
// later appends do nothing; the builder turns that into its status.
typedef struct tt_hlo_buf {
  char *p;
  size_t len, cap;
  bool oom;
} tt_hlo_buf;

void tt_hlo_buf_printf(tt_hlo_buf *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tt_hlo_buf_free(tt_hlo_buf *s);

// One SSA value: its type and its textual name "%<base>" or "%<base>#<idx>"
// (results of multi-result ops share a base).
typedef struct tt_hlo_value {
  tt_hlo_type type;
  int32_t base;
  int32_t idx;  // -1 for a single-result op or a parameter
} tt_hlo_value;

struct tt_hlo {
  tt_hlo_value *vals;
  int32_t nvals, cap_vals;
  int32_t *params;  // value ids of @main's parameters, in order
  int32_t nparams, cap_params;
  int32_t next_name;  // next free SSA name number
  tt_hlo_buf body;    // op lines of @main
  tt_hlo_buf text;    // the finished module
  int indent;         // spaces before each op line (regions nest deeper)
  tt_status status;   // first error, owned
  tt_hlo_buf funcs;   // module-level functions beside @main (hlo_func.c)
  uint64_t *func_keys;  // keys of the function groups in `funcs`
  int32_t nfunc_keys, cap_func_keys;
};

// Records a TT_INTERNAL error (a rule used the builder wrongly).
void tt_hlo_failf(tt_hlo *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

// True when every value in vs is valid; records nothing (invalid operands
// come from an earlier, already-recorded failure) unless an id is out of
// range while the builder has no error yet.
bool tt_hlo_ok(tt_hlo *b, const tt_hv *vs, int n);

// Appends "tensor<2x3xf32>" to s.
void tt_hlo_put_type(tt_hlo_buf *s, const tt_hlo_type *t);
// Appends the value's SSA name.
void tt_hlo_put_name(tt_hlo *b, tt_hlo_buf *s, tt_hv v);
// Appends "array<i64: 1, 2>".
void tt_hlo_put_i64s(tt_hlo_buf *s, const int64_t *xs, int n);
// Appends "[1, 2]".
void tt_hlo_put_list(tt_hlo_buf *s, const int64_t *xs, int n);

// Allocates `n` values of the given types sharing one SSA name (n > 1 gives
// "%7#0", "%7#1"). Returns the first id; TT_HV_INVALID on allocation failure.
tt_hv tt_hlo_new_values(tt_hlo *b, const tt_hlo_type *types, int n);

// Emits `%r = "<name>"(operands) <attrs> : (operand types) -> result type`
// and returns the result. `attrs` is NULL or the full "{...}" text.
tt_hv tt_hlo_emit(tt_hlo *b, const char *name, const tt_hv *operands, int n,
                  const char *attrs, const tt_hlo_type *result);

// Starts an op line: indentation plus "%r = " for results [first, first+n)
// (nothing when n == 0). The caller appends the rest.
void tt_hlo_begin_line(tt_hlo *b, tt_hv first, int n);
// Appends the operand types of an op line: " : (t0, t1) -> ".
void tt_hlo_put_types(tt_hlo *b, tt_hlo_buf *s, const tt_hv *vs, int n);

// Regions (reduce, scatter, argreduce bodies) are written inline, in the
// middle of their op's line: region_begin writes " ({" and a block header
// "^bb0(%a: tensor<f32>, ...)" with `n` 0-d arguments of the given dtypes
// (their ids go to out_args), then ops are emitted with the ordinary builder
// calls, and region_end writes "stablehlo.return" of `results` and "})".
void tt_hlo_region_begin(tt_hlo *b, const tt_dtype *dtypes, int n,
                         tt_hv *out_args);
void tt_hlo_region_end(tt_hlo *b, const tt_hv *results, int n);

// A region combining two groups of n arguments elementwise with `kind`
// (a tt_hlo_reduce_kind), or returning the second group when kind < 0
// (scatter's overwrite).
void tt_hlo_combiner_region(tt_hlo *b, const tt_dtype *dtypes, int n,
                            int kind);

const char *tt_hlo_elem_name(tt_dtype d);  // "f32", NULL when unknown

// The argmax/argmin combiner over (value, index) pairs of dtypes vd, id: the
// better value wins (NaN is the max and the min, like PyTorch), ties go to
// the smaller index. Shared by reduce and reduce_window.
void tt_hlo_argreduce_region(tt_hlo *b, tt_dtype vd, tt_dtype id, bool is_max);

#endif
