// common.c — helpers shared by the lowering rules: PyTorch's type promotion
// (result_type, promote_types, can_cast), numpy broadcasting, dim wrapping,
// shape strings for messages, and small value builders used by several
// families (zeros, scalar splats, keepdim reshapes).
//
// Complex dtypes promote as in PyTorch (complex64 with float64 is
// complex128); complex32 (ComplexHalf) is left out.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/lower.h"

// --- dtypes ---------------------------------------------------------------------------

bool tt_dtype_is_float(tt_dtype d) {
  return d == TT_F16 || d == TT_BF16 || d == TT_F32 || d == TT_F64;
}

bool tt_dtype_is_int(tt_dtype d) {
  return d == TT_U8 || d == TT_I8 || d == TT_I16 || d == TT_I32 || d == TT_I64 ||
         d == TT_U16 || d == TT_U32 || d == TT_U64;
}

// torch.promote_types over bool..float64 (enum order), from PyTorch's table.
#define B TT_BOOL
#define U8 TT_U8
#define I8 TT_I8
#define I16 TT_I16
#define I32 TT_I32
#define I64 TT_I64
#define H TT_F16
#define BF TT_BF16
#define F TT_F32
#define D TT_F64
static const tt_dtype kPromote[10][10] = {
    /* bool */ {B, U8, I8, I16, I32, I64, H, BF, F, D},
    /* u8   */ {U8, U8, I16, I16, I32, I64, H, BF, F, D},
    /* i8   */ {I8, I16, I8, I16, I32, I64, H, BF, F, D},
    /* i16  */ {I16, I16, I16, I16, I32, I64, H, BF, F, D},
    /* i32  */ {I32, I32, I32, I32, I32, I64, H, BF, F, D},
    /* i64  */ {I64, I64, I64, I64, I64, I64, H, BF, F, D},
    /* f16  */ {H, H, H, H, H, H, H, F, F, D},
    /* bf16 */ {BF, BF, BF, BF, BF, BF, F, BF, F, D},
    /* f32  */ {F, F, F, F, F, F, F, F, F, D},
    /* f64  */ {D, D, D, D, D, D, D, D, D, D},
};
#undef B
#undef U8
#undef I8
#undef I16
#undef I32
#undef I64
#undef H
#undef BF
#undef F
#undef D

tt_dtype tt_promote_types(tt_dtype a, tt_dtype b) {
  if (a == TT_DTYPE_NONE) return b;
  if (b == TT_DTYPE_NONE || a == b) return a;
  if (tt_dtype_is_complex(a) || tt_dtype_is_complex(b)) {
    bool wide = a == TT_C128 || b == TT_C128 || a == TT_F64 || b == TT_F64;
    return wide ? TT_C128 : TT_C64;
  }
  // uint16/32/64 promote only with themselves and with floats, as in PyTorch.
  bool wide_a = a >= TT_U16, wide_b = b >= TT_U16;
  if (wide_a || wide_b) {
    if (wide_a && tt_dtype_is_float(b)) return b;
    if (wide_b && tt_dtype_is_float(a)) return a;
    return TT_DTYPE_NONE;
  }
  return kPromote[a][b];
}

// 0 bool, 1 integer, 2 floating, 3 complex: the categories of type promotion.
static int category(tt_dtype d) {
  return d == TT_BOOL ? 0 : tt_dtype_is_complex(d) ? 3 : tt_dtype_is_float(d) ? 2 : 1;
}

bool tt_can_cast(tt_dtype from, tt_dtype to) {
  return category(from) <= category(to);
}

// --- result_type ------------------------------------------------------------------------

// PyTorch's combine_categories: the higher-priority class wins unless the
// lower one is of a higher category (bool < int < float).
static tt_dtype combine(tt_dtype higher, tt_dtype lower) {
  if (higher == TT_DTYPE_NONE) return lower;
  if (tt_dtype_is_complex(higher)) return higher;
  if (tt_dtype_is_complex(lower)) {  // a float keeps its width (toComplexType)
    if (higher == TT_F64) return TT_C128;
    if (higher == TT_F32) return TT_C64;
    if (higher == TT_BF16) return TT_C64;  // as PyTorch's toComplexType
    if (tt_dtype_is_float(higher)) return TT_DTYPE_NONE;  // complex32: not here
    return lower;
  }
  if (lower == TT_DTYPE_NONE || tt_dtype_is_float(higher)) return higher;
  if (higher == TT_BOOL || tt_dtype_is_float(lower)) return tt_promote_types(higher, lower);
  return higher;
}

tt_dtype tt_lower_result_type(const tt_lower_ctx *c, const int *idx, int n) {
  tt_dtype dim = TT_DTYPE_NONE, zero = TT_DTYPE_NONE, wrapped = TT_DTYPE_NONE;
  for (int k = 0; k < n; k++) {
    const tt_value *v = tt_lower_arg(c, idx[k]);
    if (v->kind == TT_VALUE_TENSOR && v->u.tensor.storage) {
      tt_dtype *slot = v->u.tensor.ndim > 0 ? &dim : &zero;
      *slot = tt_promote_types(*slot, v->u.tensor.dtype);
    } else if (v->kind == TT_VALUE_SCALAR) {
      tt_dtype d = v->u.scalar.dtype;
      if (!v->u.scalar.wrapped) {
        zero = tt_promote_types(zero, d);
        continue;
      }
      // A Python float takes the default dtype; ints stay int64.
      if (tt_dtype_is_float(d)) d = tt_lower_default_dtype(c);
      if (tt_dtype_is_complex(d))  // a Python complex: the default complex dtype
        d = tt_lower_default_dtype(c) == TT_F64 ? TT_C128 : TT_C64;
      wrapped = tt_promote_types(wrapped, d);
    } else if (v->kind == TT_VALUE_INT) {
      wrapped = tt_promote_types(wrapped, TT_I64);
    } else if (v->kind == TT_VALUE_BOOL) {
      wrapped = tt_promote_types(wrapped, TT_BOOL);
    }
  }
  return combine(dim, combine(zero, wrapped));
}

// --- shapes ------------------------------------------------------------------------------

const char *tt_shape_str(const tt_hlo_type *t, char *buf, size_t cap) {
  size_t n = 0;
  if (cap == 0) return buf;
  buf[0] = '\0';
  n += (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < t->rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? ", " : "", t->dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

// The broadcast shape of a and b into out; false (with the offending dim in
// *bad) when they don't broadcast.
static bool broadcast_shape(const tt_hlo_type *a, const tt_hlo_type *b,
                            tt_hlo_type *out, int *bad) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      *bad = i;
      return false;
    }
    out->dims[i] = da == 1 ? db : da;
  }
  return true;
}

tt_hv tt_lower_broadcast_to(tt_lower_ctx *c, tt_hv v, int rank,
                            const int64_t *dims) {
  tt_hlo *b = tt_lower_hlo(c);
  const tt_hlo_type *t = tt_hlo_type_of(b, v);
  if (!t) return TT_HV_INVALID;
  tt_hlo_type want = tt_hlo_make_type(t->dtype, rank, dims);
  if (tt_hlo_same_type(t, &want)) return v;
  int64_t bdims[TT_MAX_RANK];
  bool ok = t->rank <= rank;
  for (int i = 0; ok && i < t->rank; i++) {
    bdims[i] = rank - t->rank + i;
    ok = t->dims[i] == 1 || t->dims[i] == dims[bdims[i]];
  }
  if (!ok) {
    char s1[96], s2[96];
    tt_hlo_fail(b, tt_lower_fail(c, TT_INVALID_ARGUMENT,
                                 "can't broadcast shape %s to %s",
                                 tt_shape_str(t, s1, sizeof s1),
                                 tt_shape_str(&want, s2, sizeof s2)));
    return TT_HV_INVALID;
  }
  return tt_hlo_broadcast_in_dim(b, v, rank, dims, bdims);
}

// Folds the n values' shapes into their common shape *shape. Returns -1 when
// they broadcast, -2 when a value is invalid (the builder holds the error),
// else the index of the first value that doesn't fit: *shape is then the
// common shape before it, *rank the joint rank and *bad the offending dim.
static int fold_shapes(tt_hlo *b, const tt_hv *vals, int n, tt_hlo_type *shape,
                       int *rank, int *bad) {
  *shape = tt_hlo_make_type(TT_F32, 0, NULL);
  for (int i = 0; i < n; i++) {
    const tt_hlo_type *t = tt_hlo_type_of(b, vals[i]);
    if (!t) return -2;
    tt_hlo_type next = *shape;
    if (!broadcast_shape(shape, t, &next, bad)) {
      *rank = next.rank;
      return i;
    }
    *shape = next;
  }
  return -1;
}

bool tt_lower_broadcastable(tt_lower_ctx *c, const tt_hv *vals, int n) {
  tt_hlo_type shape;
  int rank, bad;
  return fold_shapes(tt_lower_hlo(c), vals, n, &shape, &rank, &bad) < 0;
}

tt_status tt_lower_broadcast(tt_lower_ctx *c, tt_hv *vals, int n) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type shape;
  int r = 0, bad = 0, i = fold_shapes(b, vals, n, &shape, &r, &bad);
  if (i == -2) return NULL;  // the builder holds the error
  if (i >= 0) {
    const tt_hlo_type *t = tt_hlo_type_of(b, vals[i]);
    char s1[96], s2[96];
    // dims of a and b at output dimension `bad`
    int64_t da = shape.dims[bad - (r - shape.rank)], db = t->dims[bad - (r - t->rank)];
    return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                         "The size of tensor a (%lld) must match the size of "
                         "tensor b (%lld) at non-singleton dimension %d "
                         "(shapes %s and %s don't broadcast)",
                         (long long)da, (long long)db, bad,
                         tt_shape_str(&shape, s1, sizeof s1),
                         tt_shape_str(t, s2, sizeof s2));
  }
  for (int i = 0; i < n; i++)
    vals[i] = tt_lower_broadcast_to(c, vals[i], shape.rank, shape.dims);
  return NULL;
}

tt_status tt_lower_dim(const tt_lower_ctx *c, int64_t dim, int rank,
                       int64_t *out) {
  int64_t r = rank > 0 ? rank : 1;  // a 0-d tensor accepts dims 0 and -1
  if (dim < -r || dim >= r)
    return tt_lower_fail(c, TT_OUT_OF_RANGE,
                         "Dimension out of range (expected to be in range of "
                         "[%" PRId64 ", %" PRId64 "], but got %" PRId64 ")",
                         -r, r - 1, dim);
  *out = dim < 0 ? dim + r : dim;
  return NULL;
}

// --- operands ------------------------------------------------------------------------------

tt_dtype tt_lower_float_dtype(const tt_lower_ctx *c, tt_dtype d) {
  return tt_dtype_is_float(d) || tt_dtype_is_complex(d) ? d : tt_lower_default_dtype(c);
}

tt_hv tt_lower_conj(tt_lower_ctx *c, tt_hv x) {
  tt_hlo *b = tt_lower_hlo(c);
  const tt_hlo_type *t = tt_hlo_type_of(b, x);
  if (!t || !tt_dtype_is_complex(t->dtype)) return x;
  return tt_hlo_complex(b, tt_hlo_real(b, x),
                        tt_hlo_unary(b, TT_HLO_NEG, tt_hlo_imag(b, x)));
}

tt_hv tt_lower_operand(tt_lower_ctx *c, int i, tt_dtype d) {
  const tt_value *v = tt_lower_arg(c, i);
  if (v->kind == TT_VALUE_TENSOR && v->u.tensor.storage)
    return tt_hlo_convert(tt_lower_hlo(c), tt_lower_tensor(c, i), d);
  return tt_lower_scalar(c, i, d);
}

tt_status tt_lower_operands(tt_lower_ctx *c, const int *idx, int n, tt_dtype d,
                            tt_hv *out) {
  for (int k = 0; k < n; k++) out[k] = tt_lower_operand(c, idx[k], d);
  return tt_lower_broadcast(c, out, n);
}

tt_hv tt_lower_splat_like(tt_lower_ctx *c, tt_hv v, double x) {
  const tt_hlo_type *t = tt_hlo_type_of(tt_lower_hlo(c), v);
  if (!t) return TT_HV_INVALID;
  tt_hlo_type copy = *t;
  return tt_hlo_splat(tt_lower_hlo(c), &copy, x);
}

// --- reductions ------------------------------------------------------------------------------

tt_status tt_lower_dim_mask(const tt_lower_ctx *c, int i, int rank,
                            bool empty_is_all, bool *mask) {
  const tt_value *v = tt_lower_arg(c, i);
  for (int d = 0; d < TT_MAX_RANK; d++) mask[d] = false;
  bool all = v->kind == TT_VALUE_NONE ||
             (v->kind == TT_VALUE_INTS && v->u.ints.n == 0 && empty_is_all);
  if (all) {
    for (int d = 0; d < rank; d++) mask[d] = true;
    return NULL;
  }
  int n = v->kind == TT_VALUE_INTS ? v->u.ints.n : 1;
  for (int k = 0; k < n; k++) {
    int64_t dim = v->kind == TT_VALUE_INTS ? v->u.ints.data[k] : tt_lower_int(c, i);
    int64_t w = 0;
    TT_RETURN_IF_ERROR(tt_lower_dim(c, dim, rank, &w));
    if (rank == 0) continue;  // a 0-d tensor "reduces" dim 0 to itself
    if (mask[w])
      return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                           "dim %" PRId64 " appears multiple times in the list of dims", w);
    mask[w] = true;
  }
  return NULL;
}

tt_status tt_lower_check_window(tt_lower_ctx *c, const char *what, const int64_t *v, int n) {
  const int64_t big = INT64_C(1) << 31;
  for (int i = 0; i < n; i++)
    if (v[i] > big || v[i] < -big)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s %" PRId64 " is too large (at most 2^31)",
                           what, v[i]);
  return NULL;
}

// "<p>T: v <p>H: v <p>W: v" (the T only for 3 dims), PyTorch's spelling of
// a pooling parameter's values in its messages.
static const char *pool_values(char *buf, size_t cap, const char *p, int ns, const int64_t *v) {
  static const char *const kAxes[] = {"T", "H", "W"};
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < ns && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s%s: %" PRId64, i ? " " : "", p,
                          kAxes[3 - ns + i], v[i]);
  return buf;
}

tt_status tt_lower_check_pool(tt_lower_ctx *c, int ns, const int64_t *k, const int64_t *s,
                              const int64_t *p, const int64_t *d) {
  char m[160];
  for (int i = 0; i < ns; i++) {
    if (s[i] == 0) return tt_lower_fail(c, TT_INVALID_ARGUMENT, "stride should not be zero");
    if (p[i] < 0)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "pad must be non-negative, but got pad: %" PRId64,
                           p[i]);
    if (p[i] > ((k[i] - 1) * d[i] + 1) / 2)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "pad should be at most half of effective "
                           "kernel size, but got pad=%" PRId64 ", kernel_size=%" PRId64
                           " and dilation=%" PRId64, p[i], k[i], d[i]);
  }
  for (int i = 0; i < ns; i++) {
    if (k[i] < 1)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "kernel size should be greater than zero, "
                           "but got %s", pool_values(m, sizeof m, "k", ns, k));
    if (s[i] < 1)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "stride should be greater than zero, but "
                           "got %s", pool_values(m, sizeof m, "d", ns, s));
    if (d[i] < 1)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "dilation should be greater than zero, but "
                           "got %s", pool_values(m, sizeof m, "dilation", ns, d));
    if (2 * p[i] > k[i]) {
      char kv[80];
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "pad should be smaller than or equal to half "
                           "of kernel size, but got %s, %s", pool_values(kv, sizeof kv, "k", ns, k),
                           pool_values(m, sizeof m, "pad", ns, p));
    }
  }
  return NULL;
}

tt_status tt_lower_check_pool_input(tt_lower_ctx *c, const tt_hlo_type *x, int ns, const char *fn) {
  char sh[160];
  bool batched = x->rank == ns + 2;
  for (int i = batched ? 1 : 0; i < x->rank; i++) {
    if (x->dims[i] != 0) continue;
    if (ns == 2)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected 3D or 4D (batch mode) tensor with "
                           "optional 0 dim batch size for input, but got:%s",
                           tt_shape_str(x, sh, sizeof sh));
    // PyTorch prints the empty dim's length (0), not its index.
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%.*s(): Expected input's non-batch dimensions "
                         "to have positive length, but input has a shape of %s and non-batch "
                         "dimension 0 has length zero!", (int)strcspn(fn, "."), fn,
                         tt_shape_str(x, sh, sizeof sh));
  }
  return NULL;
}

tt_status tt_lower_check_nonempty(tt_lower_ctx *c, const tt_hlo_type *t, int first,
                                  const char *fn, const char *what) {
  char sh[160];
  for (int i = first; i < t->rank; i++)
    if (t->dims[i] == 0)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%.*s(): Expected %s to have non-zero size "
                           "for non-batch dimensions, but %s has sizes %s with dimension %d "
                           "being empty", (int)strcspn(fn, "."), fn, what, what,
                           tt_shape_str(t, sh, sizeof sh), i);
  return NULL;
}

bool tt_call_number(const tt_op_call *call, int i, double *out) {
  if (i < 0 || i >= call->nargs) return false;
  const tt_value *v = &call->args[i];
  switch (v->kind) {
    case TT_VALUE_SCALAR:
      *out = tt_dtype_is_float(v->u.scalar.dtype) || tt_dtype_is_complex(v->u.scalar.dtype)
                 ? v->u.scalar.f : (double)v->u.scalar.i;
      return true;
    case TT_VALUE_INT: *out = (double)v->u.i; return true;
    default: return false;
  }
}

tt_status tt_call_check_range(const tt_op_call *call, int i, double lo, bool lo_open, double hi,
                              bool hi_open, const char *fmt) {
  double v;
  if (!tt_call_number(call, i, &v)) return NULL;
  bool inside = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  return inside ? NULL : tt_make_status(TT_INVALID_ARGUMENT, fmt, v);
}

tt_hv tt_lower_reduce_init(tt_lower_ctx *c, tt_dtype d, tt_hlo_reduce_kind kind) {
  tt_hlo *b = tt_lower_hlo(c);
  bool fl = tt_dtype_is_float(d);
  int bits = (int)tt_dtype_size(d) * 8;
  bool uns = d == TT_U8 || d == TT_U16 || d == TT_U32 || d == TT_U64;
  if (bits > 64) bits = 64;  // complex128: no order, max/min never asked
  int64_t hi = d == TT_BOOL ? 1 : uns ? (bits == 64 ? -1 : (INT64_C(1) << bits) - 1)
                                      : (bits == 64 ? INT64_MAX : (INT64_C(1) << (bits - 1)) - 1);
  int64_t lo = (d == TT_BOOL || uns) ? 0 : -hi - 1;
  switch (kind) {
    case TT_HLO_REDUCE_ADD: return tt_hlo_const_i(b, d, 0);
    case TT_HLO_REDUCE_MUL: return tt_hlo_const_i(b, d, 1);
    case TT_HLO_REDUCE_MAX: return fl ? tt_hlo_const(b, d, -INFINITY) : tt_hlo_const_i(b, d, lo);
    case TT_HLO_REDUCE_MIN: return fl ? tt_hlo_const(b, d, INFINITY) : tt_hlo_const_i(b, d, hi);
    case TT_HLO_REDUCE_AND: return tt_hlo_const_i(b, d, 1);
    case TT_HLO_REDUCE_OR:
    case TT_HLO_REDUCE_XOR: return tt_hlo_const_i(b, d, 0);
  }
  return TT_HV_INVALID;
}

tt_hv tt_lower_reduce(tt_lower_ctx *c, tt_hv v, const bool *mask, bool keepdim,
                      tt_hlo_reduce_kind kind) {
  tt_hlo *b = tt_lower_hlo(c);
  const tt_hlo_type *tp = tt_hlo_type_of(b, v);
  if (!tp) return TT_HV_INVALID;
  tt_hlo_type t = *tp;
  int64_t dims[TT_MAX_RANK], kept[TT_MAX_RANK];
  int n = 0;
  for (int d = 0; d < t.rank; d++) {
    if (mask[d]) dims[n++] = d;
    kept[d] = mask[d] ? 1 : t.dims[d];
  }
  tt_hv r = tt_hlo_reduce(b, v, tt_lower_reduce_init(c, t.dtype, kind), dims, n, kind);
  if (tt_dtype_is_float(t.dtype) && (kind == TT_HLO_REDUCE_MAX || kind == TT_HLO_REDUCE_MIN)) {
    // XLA's CPU reductions drop NaNs in max/min; PyTorch propagates them.
    tt_hv isnan = tt_hlo_compare(b, TT_HLO_NE, v, v);
    tt_hv any = tt_hlo_reduce(b, isnan, tt_lower_reduce_init(c, TT_BOOL, TT_HLO_REDUCE_OR), dims,
                              n, TT_HLO_REDUCE_OR);
    r = tt_hlo_select(b, any, tt_lower_splat_like(c, r, NAN), r);
  }
  return keepdim ? tt_hlo_reshape(b, r, t.rank, kept) : r;
}

// --- shorthands ----------------------------------------------------------------------------

tt_dtype tt_opmath(tt_dtype d) {
  return (d == TT_F16 || d == TT_BF16) ? TT_F32 : d;
}

tt_hlo_type tt_lower_type(tt_lower_ctx *c, tt_hv v) {
  const tt_hlo_type *t = tt_hlo_type_of(tt_lower_hlo(c), v);
  return t ? *t : tt_hlo_make_type(TT_F32, 0, NULL);
}

tt_hv tt_lower_prod_err(tt_lower_ctx *c, tt_hv x, tt_hv y, tt_hv p) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv hl[2][2], v[2] = {x, y};
  for (int k = 0; k < 2; k++) {  // Veltkamp's split into 26-bit halves
    tt_hv t = tt_hlo_binary(b, TT_HLO_MUL, v[k], tt_lower_splat_like(c, v[k], 134217729.0));
    hl[k][0] = tt_hlo_binary(b, TT_HLO_SUB, t, tt_hlo_binary(b, TT_HLO_SUB, t, v[k]));
    hl[k][1] = tt_hlo_binary(b, TT_HLO_SUB, v[k], hl[k][0]);
  }
  tt_hv e = tt_hlo_binary(b, TT_HLO_SUB, tt_hlo_binary(b, TT_HLO_MUL, hl[0][0], hl[1][0]), p);
  e = tt_hlo_binary(b, TT_HLO_ADD, e, tt_hlo_binary(b, TT_HLO_MUL, hl[0][0], hl[1][1]));
  e = tt_hlo_binary(b, TT_HLO_ADD, e, tt_hlo_binary(b, TT_HLO_MUL, hl[0][1], hl[1][0]));
  return tt_hlo_binary(b, TT_HLO_ADD, e, tt_hlo_binary(b, TT_HLO_MUL, hl[0][1], hl[1][1]));
}

tt_hv tt_lower_rounded16(tt_lower_ctx *c, tt_hv v) {
  const tt_hlo_type *t = tt_hlo_type_of(tt_lower_hlo(c), v);
  bool half = t && (t->dtype == TT_F16 || t->dtype == TT_BF16);
  return half ? tt_hlo_barrier(tt_lower_hlo(c), v) : v;
}

tt_hv tt_lower_bin(tt_lower_ctx *c, tt_hlo_binop op, tt_hv x, tt_hv y) {
  return tt_hlo_binary(tt_lower_hlo(c), op, x, y);
}

tt_hv tt_lower_convert(tt_lower_ctx *c, tt_hv v, tt_dtype d) {
  return tt_hlo_convert(tt_lower_hlo(c), v, d);
}

tt_hv tt_lower_expand_like(tt_lower_ctx *c, tt_hv v, tt_hv like) {
  tt_hlo_type t = tt_lower_type(c, like);
  return tt_lower_broadcast_to(c, v, t.rank, t.dims);
}

// --- indexing pieces ---------------------------------------------------------------------

static const int64_t kAllDims[TT_MAX_RANK] = {0, 1, 2, 3, 4, 5, 6, 7};

tt_hv tt_lower_wrap_index(tt_lower_ctx *c, tt_hv idx, int64_t size) {
  tt_hlo *b = tt_lower_hlo(c);
  idx = tt_hlo_convert(b, idx, TT_I64);
  tt_hv neg = tt_hlo_compare(b, TT_HLO_LT, idx, tt_lower_splat_like(c, idx, 0));
  return tt_hlo_select(b, neg, tt_lower_bin(c, TT_HLO_ADD, idx,
                                            tt_lower_splat_like(c, idx, (double)size)), idx);
}

void tt_lower_check_index(tt_lower_ctx *c, tt_hv idx, int64_t size, bool negatives,
                          tt_code code, const char *msg, int64_t arg0, int64_t arg1) {
  tt_hlo *b = tt_lower_hlo(c);
  idx = tt_hlo_convert(b, idx, TT_I64);
  tt_hv low = tt_hlo_compare(b, TT_HLO_LT, idx, tt_lower_splat_like(c, idx, negatives ? -(double)size : 0));
  tt_hv high = tt_hlo_compare(b, TT_HLO_GE, idx, tt_lower_splat_like(c, idx, (double)size));
  tt_lower_check(c, tt_hlo_binary(b, TT_HLO_OR, low, high), idx, code, msg, arg0, arg1);
}

static tt_hv scatter_raw(tt_lower_ctx *c, tt_hv x, tt_hv crd, tt_hv upd, int kind) {
  int r = tt_lower_type(c, x).rank;
  tt_hlo_scatter_dims sd = {.inserted_window_dims = kAllDims, .n_inserted = r,
                            .scatter_dims_to_operand_dims = kAllDims,
                            .n_scatter_to_operand = r, .index_vector_dim = r};
  return tt_hlo_scatter(tt_lower_hlo(c), x, crd, upd, &sd, kind);
}

// 1 where v is NaN, else 0, in v's type.
static tt_hv nan_marks(tt_lower_ctx *c, tt_hv v) {
  tt_hlo *b = tt_lower_hlo(c);
  return tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_NE, v, v), tt_lower_splat_like(c, v, 1),
                       tt_lower_splat_like(c, v, 0));
}

tt_hv tt_lower_scatter_at(tt_lower_ctx *c, tt_hv x, tt_hv crd, tt_hv upd, int kind) {
  tt_hv out = scatter_raw(c, x, crd, upd, kind);
  if ((kind != TT_HLO_REDUCE_MAX && kind != TT_HLO_REDUCE_MIN) ||
      !tt_dtype_is_float(tt_lower_type(c, x).dtype))
    return out;
  // A max/min with a NaN taking part is NaN in PyTorch's kernels; XLA CPU's
  // scatter combiner drops it (maximum(0, NaN) in a scatter region gave 0).
  // A second scatter of 0/1 NaN marks finds those positions.
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv any = scatter_raw(c, nan_marks(c, x), crd, nan_marks(c, upd), TT_HLO_REDUCE_MAX);
  return tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_GT, any, tt_lower_splat_like(c, any, 0)),
                       tt_lower_splat_like(c, out, NAN), out);
}

tt_hv tt_lower_dim_coords(tt_lower_ctx *c, const tt_hlo_type *st, tt_hv index,
                          int64_t dim, int64_t size) {
  tt_hlo *b = tt_lower_hlo(c);
  int r = st->rank;
  int64_t cd[TT_MAX_RANK + 1];
  memcpy(cd, st->dims, sizeof(int64_t) * (size_t)r);
  cd[r] = 1;
  tt_hlo_type i64 = tt_hlo_make_type(TT_I64, r, st->dims);
  tt_hv parts[TT_MAX_RANK];
  for (int d = 0; d < r; d++) {
    tt_hv v = d == dim ? tt_hlo_broadcast_in_dim(b, tt_lower_wrap_index(c, index, size), r,
                                                 st->dims, &dim)
                       : tt_hlo_iota(b, &i64, d);
    parts[d] = tt_hlo_reshape(b, v, r + 1, cd);
  }
  return tt_hlo_concatenate(b, parts, r, r);
}

// --- pooling pieces ------------------------------------------------------------------------

tt_hv tt_lower_adaptive_avg_matrix(tt_lower_ctx *c, int64_t out, int64_t in,
                                   tt_dtype acc) {
  tt_hlo *b = tt_lower_hlo(c);
  int64_t d[2] = {out, in};
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 2, d);
  tt_hv o = tt_hlo_iota(b, &it, 0), h = tt_hlo_iota(b, &it, 1);
  tt_hv n_in = tt_hlo_splat_i(b, &it, in), n_out = tt_hlo_splat_i(b, &it, out);
  tt_hv start = tt_hlo_binary(b, TT_HLO_DIV, tt_hlo_binary(b, TT_HLO_MUL, o, n_in), n_out);
  tt_hv o1 = tt_hlo_binary(b, TT_HLO_ADD, o, tt_hlo_splat_i(b, &it, 1));
  tt_hv end = tt_hlo_binary(b, TT_HLO_DIV,
                            tt_hlo_binary(b, TT_HLO_ADD, tt_hlo_binary(b, TT_HLO_MUL, o1, n_in),
                                          tt_hlo_binary(b, TT_HLO_SUB, n_out, tt_hlo_splat_i(b, &it, 1))),
                            n_out);
  tt_hv in_win = tt_hlo_binary(b, TT_HLO_AND, tt_hlo_compare(b, TT_HLO_GE, h, start),
                               tt_hlo_compare(b, TT_HLO_LT, h, end));
  tt_hv len = tt_hlo_convert(b, tt_hlo_binary(b, TT_HLO_SUB, end, start), acc);
  tt_hlo_type ft = tt_hlo_make_type(acc, 2, d);
  tt_hv one = tt_hlo_splat(b, &ft, 1), zero = tt_hlo_splat(b, &ft, 0);
  return tt_hlo_binary(b, TT_HLO_DIV, tt_hlo_select(b, in_win, one, zero), len);
}
