// misc.c — ops no other family covers: trace, renorm, _logcumsumexp,
// channel_shuffle, index_fill (Scalar / Tensor value), index_add (alpha),
// _pdist_forward, multi_margin_loss, multilabel_margin_loss_forward,
// rrelu_with_noise (eval: the mean slope; training: uniform slopes that are
// also written to `noise`) and _embedding_bag_forward_only (sum, mean, max).
//
// _logcumsumexp is exact rather than fast: every output position reduces its
// whole prefix against its own running max ([*, n, n] values), so large
// values never overflow and small ones never underflow to -inf.
// _pdist_forward finds the row pair (i, j) of each output from its position
// with integer arithmetic, then gathers both rows.
//
// Leaves out: _logcumsumexp along dims whose square overflows the element
// budget, multi_margin_loss with p other than 1 and 2 (PyTorch refuses),
// bounds checks of indices and targets (XLA clamps where PyTorch raises),
// triangular_solve / linalg_solve_triangular (they need a loop).
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "lower/lower.h"

static const int64_t kOnes[TT_MAX_RANK] = {1, 1, 1, 1, 1, 1, 1, 1};

// --- shared pieces ----------------------------------------------------------------------

static tt_hv k(tt_lower_ctx *c, tt_hv like, double v) { return tt_lower_splat_like(c, like, v); }

// The value of Scalar argument i (rules with TT_RULE_SCALARS_IN_SIGNATURE).
static double scalar_value(const tt_lower_ctx *c, int i, double dflt) {
  const tt_value *v = tt_lower_arg(c, i);
  if (v->kind == TT_VALUE_INT) return (double)v->u.i;
  if (v->kind != TT_VALUE_SCALAR) return dflt;
  return tt_dtype_is_float(v->u.scalar.dtype) ? v->u.scalar.f : (double)v->u.scalar.i;
}

// p-norm of v over the dims in mask (p = 0, 1, 2, inf or other).
static tt_hv pnorm(tt_lower_ctx *c, tt_hv v, const bool *mask, bool keepdim, double p) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv a = tt_hlo_unary(b, TT_HLO_ABS, v);
  if (p == 0)
    return tt_lower_reduce(c, tt_hlo_convert(b, tt_hlo_compare(b, TT_HLO_NE, a, k(c, a, 0)),
                                             tt_lower_type(c, a).dtype),
                           mask, keepdim, TT_HLO_REDUCE_ADD);
  if (isinf(p))
    return tt_lower_reduce(c, a, mask, keepdim, p > 0 ? TT_HLO_REDUCE_MAX : TT_HLO_REDUCE_MIN);
  if (p == 1) return tt_lower_reduce(c, a, mask, keepdim, TT_HLO_REDUCE_ADD);
  if (p == 2)
    return tt_hlo_unary(b, TT_HLO_SQRT, tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_MUL, a, a),
                                                        mask, keepdim, TT_HLO_REDUCE_ADD));
  tt_hv s = tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_POW, a, k(c, a, p)), mask, keepdim,
                            TT_HLO_REDUCE_ADD);
  return tt_lower_bin(c, TT_HLO_POW, s, k(c, s, 1.0 / p));
}

// --- trace, channel_shuffle -------------------------------------------------------------

// trace(self [n, m]): the sum of the diagonal; integers sum to int64.
static tt_status lower_trace(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  char s[96];
  if (t.rank != 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a matrix, got %s",
                         tt_shape_str(&t, s, sizeof s));
  tt_dtype out = tt_dtype_is_float(t.dtype) ? t.dtype : TT_I64;
  if (!tt_dtype_is_float(t.dtype) && !tt_dtype_is_int(t.dtype) && t.dtype != TT_BOOL)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "trace of %s", tt_dtype_name(t.dtype));
  tt_dtype acc = tt_dtype_is_float(t.dtype) ? tt_opmath(t.dtype) : TT_I64;
  tt_hv x = tt_hlo_convert(b, tt_lower_tensor(c, 0), acc);
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 2, t.dims);
  tt_hv diag = tt_hlo_compare(b, TT_HLO_EQ, tt_hlo_iota(b, &it, 0), tt_hlo_iota(b, &it, 1));
  bool all[TT_MAX_RANK] = {true, true};
  tt_hv sum = tt_lower_reduce(c, tt_hlo_select(b, diag, x, k(c, x, 0)), all, false,
                              TT_HLO_REDUCE_ADD);
  tt_lower_result(c, tt_hlo_convert(b, sum, out));
  return NULL;
}

// channel_shuffle(self [N, C, *], groups): [N, g, C/g, *] -> [N, C/g, g, *].
static tt_status lower_channel_shuffle(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  int64_t g = tt_lower_int(c, 1);
  char s[96];
  if (t.rank < 3 || t.rank + 1 > TT_MAX_RANK || g <= 0 || t.dims[1] % g != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input %s (rank >= 3) with %" PRId64 " groups "
                         "that divide its channels", tt_shape_str(&t, s, sizeof s), g);
  int64_t d[TT_MAX_RANK], perm[TT_MAX_RANK];
  int r = t.rank + 1;
  d[0] = t.dims[0];
  d[1] = g;
  d[2] = t.dims[1] / g;
  for (int i = 2; i < t.rank; i++) d[i + 1] = t.dims[i];
  for (int i = 0; i < r; i++) perm[i] = i;
  perm[1] = 2;
  perm[2] = 1;
  tt_hv x = tt_hlo_transpose(b, tt_hlo_reshape(b, tt_lower_tensor(c, 0), r, d), perm);
  tt_lower_result(c, tt_hlo_reshape(b, x, t.rank, t.dims));
  return NULL;
}

// --- renorm, _logcumsumexp ----------------------------------------------------------------

// renorm(self, p, dim, maxnorm): each slice along dim whose p-norm (over the
// other dims) exceeds maxnorm is scaled by maxnorm / (norm + 1e-7).
static tt_status lower_renorm(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  if (!tt_dtype_is_float(t.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "renorm of %s", tt_dtype_name(t.dtype));
  double p = scalar_value(c, 1, 2);
  if (p < 0) return tt_lower_fail(c, TT_INVALID_ARGUMENT, "non-positive-norm not supported");
  int64_t dim;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 2), t.rank ? t.rank : 1, &dim));
  tt_dtype acc = tt_opmath(t.dtype);
  tt_hv x = tt_hlo_convert(b, tt_lower_tensor(c, 0), acc);
  if (t.rank == 0) {
    tt_lower_result(c, tt_hlo_convert(b, x, t.dtype));  // PyTorch leaves it
    return NULL;
  }
  bool mask[TT_MAX_RANK];
  for (int d = 0; d < t.rank; d++) mask[d] = d != dim;
  tt_hv norm = pnorm(c, x, mask, true, p);
  tt_hv maxnorm = tt_lower_broadcast_to(c, tt_lower_scalar(c, 3, acc), t.rank,
                                        tt_lower_type(c, norm).dims);
  tt_hv scale = tt_lower_bin(c, TT_HLO_DIV, maxnorm, tt_lower_bin(c, TT_HLO_ADD, norm, k(c, norm, 1e-7)));
  tt_hv f = tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_GT, norm, maxnorm), scale, k(c, norm, 1));
  if (acc != t.dtype) f = tt_hlo_convert(b, tt_hlo_convert(b, f, t.dtype), acc);
  tt_hv out = tt_lower_bin(c, TT_HLO_MUL, x, tt_lower_expand_like(c, f, x));
  tt_lower_result(c, tt_hlo_convert(b, out, t.dtype));
  return NULL;
}

enum { kLcseBudget = 1 << 26 };  // elements of the [*, n, n] intermediate

// _logcumsumexp(self, dim): out[i] = m[i] + log(sum_{j <= i} exp(x[j] - m[i]))
// with m[i] the running max (0 where it isn't finite, so infinities pass).
static tt_status lower_logcumsumexp(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  if (!tt_dtype_is_float(t.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "logcumsumexp of %s", tt_dtype_name(t.dtype));
  int64_t dim;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 1), t.rank ? t.rank : 1, &dim));
  tt_hv x = tt_lower_tensor(c, 0);
  int64_t n = t.rank ? t.dims[dim] : 1;
  if (t.rank == 0 || tt_hlo_numel(&t) == 0 || n == 1) {
    tt_lower_result(c, x);
    return NULL;
  }
  if (t.rank + 1 > TT_MAX_RANK || (double)tt_hlo_numel(&t) * (double)n > kLcseBudget)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "logcumsumexp over %" PRId64 " elements", n);
  tt_dtype acc = tt_opmath(t.dtype);
  x = tt_hlo_convert(b, x, acc);
  tt_hlo_window w = tt_hlo_window_identity(t.rank);
  w.dims[dim] = n;
  w.pad_lo[dim] = n - 1;
  tt_hv m = tt_hlo_reduce_window(b, x, tt_lower_reduce_init(c, acc, TT_HLO_REDUCE_MAX), &w,
                                 TT_HLO_REDUCE_MAX);
  m = tt_hlo_select(b, tt_hlo_unary(b, TT_HLO_IS_FINITE, m), m, k(c, m, 0));
  // Dims of x with a new dim after `dim`: xj [.., 1 (i), n (j), ..], mi [.., n (i), 1, ..].
  int r = t.rank + 1;
  int64_t dj[TT_MAX_RANK], di[TT_MAX_RANK], full[TT_MAX_RANK];
  for (int d = 0, e = 0; d < r; d++) {
    int64_t size = d == dim + 1 ? 1 : t.dims[e++];
    di[d] = size;
    full[d] = d == dim + 1 ? n : size;
  }
  memcpy(dj, full, sizeof dj);
  dj[dim] = 1;
  tt_hv xj = tt_lower_broadcast_to(c, tt_hlo_reshape(b, x, r, dj), r, full);
  tt_hv mi = tt_lower_broadcast_to(c, tt_hlo_reshape(b, m, r, di), r, full);
  tt_hlo_type it = tt_hlo_make_type(TT_I64, r, full);
  tt_hv keep = tt_hlo_compare(b, TT_HLO_LE, tt_hlo_iota(b, &it, dim + 1), tt_hlo_iota(b, &it, dim));
  tt_hv e = tt_hlo_unary(b, TT_HLO_EXP, tt_lower_bin(c, TT_HLO_SUB, xj, mi));
  bool mask[TT_MAX_RANK] = {false};
  mask[dim + 1] = true;
  tt_hv s = tt_lower_reduce(c, tt_hlo_select(b, keep, e, k(c, e, 0)), mask, false, TT_HLO_REDUCE_ADD);
  tt_hv out = tt_lower_bin(c, TT_HLO_ADD, tt_hlo_unary(b, TT_HLO_LOG, s), m);
  tt_lower_result(c, tt_hlo_convert(b, out, t.dtype));
  return NULL;
}

// --- index_fill, index_add ----------------------------------------------------------------

// self as a rank >= 1 value, the wrapped dim and the 1-D index of
// index_fill / index_add: (self, dim, index, ...).
static tt_status index_prepare(tt_lower_ctx *c, tt_hv *x, int64_t *dim, tt_hv *index) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1), it = tt_lower_tensor_type(c, 2, -1);
  char s[96];
  if (!tt_dtype_is_int(it.dtype) || it.rank > 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "index must be a 0-d or 1-d integer tensor, "
                         "got %s %s", tt_dtype_name(it.dtype), tt_shape_str(&it, s, sizeof s));
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 1), xt.rank ? xt.rank : 1, dim));
  *x = tt_lower_tensor(c, 0);
  *index = tt_lower_tensor(c, 2);
  if (xt.rank == 0) *x = tt_hlo_reshape(b, *x, 1, kOnes);
  if (it.rank == 0) *index = tt_hlo_reshape(b, *index, 1, kOnes);
  return NULL;
}

// index_fill(self, dim, index, value): the slices of self at index along
// dim become value (a Scalar or a 0-d tensor).
static tt_status lower_index_fill(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  tt_hv x, index;
  int64_t dim;
  TT_RETURN_IF_ERROR(index_prepare(c, &x, &dim, &index));
  const tt_value *v = tt_lower_arg(c, 3);
  if (v->kind == TT_VALUE_TENSOR && v->u.tensor.ndim != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "only supports a 0-dimensional value tensor, "
                         "but got tensor with %d dimension(s)", (int)v->u.tensor.ndim);
  tt_hlo_type rt = tt_lower_type(c, x), st = rt;
  st.dims[dim] = tt_lower_type(c, index).dims[0];
  tt_hv val = tt_lower_broadcast_to(c, tt_lower_operand(c, 3, xt.dtype), st.rank, st.dims);
  tt_lower_check_index(c, index, rt.dims[dim], true, TT_OUT_OF_RANGE,
                       "index {} is out of bounds for dimension {} with size {}", dim,
                       rt.dims[dim]);
  tt_hv out = tt_lower_scatter_at(c, x, tt_lower_dim_coords(c, &st, index, dim, rt.dims[dim]), val, -1);
  tt_lower_result(c, tt_hlo_reshape(b, out, xt.rank, xt.dims));
  return NULL;
}

// index_add(self, dim, index, source, *, alpha): self slices at index along
// dim plus alpha times the source slices (repeated indices accumulate).
static tt_status lower_index_add(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1), st = tt_lower_tensor_type(c, 3, -1);
  if (st.dtype != xt.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "index_add_(): self (%s) and source (%s) must "
                         "have the same scalar type", tt_dtype_torch_name(xt.dtype),
                         tt_dtype_torch_name(st.dtype));
  tt_hv x, index;
  int64_t dim;
  TT_RETURN_IF_ERROR(index_prepare(c, &x, &dim, &index));
  tt_hlo_type rt = tt_lower_type(c, x);
  tt_hv src = tt_lower_tensor(c, 3);
  if (st.rank == 0) {
    src = tt_hlo_reshape(b, src, 1, kOnes);
    st = tt_lower_type(c, src);
  }
  int64_t n = tt_lower_type(c, index).dims[0];
  char s1[96], s2[96];
  bool ok = st.rank == rt.rank && st.dims[dim] == n;
  for (int d = 0; ok && d < st.rank; d++) ok = d == dim || st.dims[d] == rt.dims[d];
  if (!ok)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "source %s doesn't match self %s with %" PRId64
                         " indices along dim %" PRId64, tt_shape_str(&st, s1, sizeof s1),
                         tt_shape_str(&xt, s2, sizeof s2), n, dim);
  tt_lower_check_index(c, index, rt.dims[dim], false, TT_INVALID_ARGUMENT,
                       "index {} is out of bounds for dimension {} with size {}", dim,
                       rt.dims[dim]);
  tt_dtype acc = tt_opmath(xt.dtype);
  src = tt_hlo_convert(b, src, acc);
  if (!tt_lower_is_none(c, 4))
    src = tt_lower_bin(c, TT_HLO_MUL, src,
                       tt_lower_broadcast_to(c, tt_lower_scalar(c, 4, acc), st.rank, st.dims));
  // Where ATen's CPU kernel adds one slice at a time (1-d self, a middle
  // dim) a 16-bit sum is rounded at each step; along the first or last dim
  // of a matrix it goes through scatter_add's float accumulator (alpha 1,
  // the common case), rounded once.
  bool stepwise = rt.rank <= 1 || (dim != 0 && dim != rt.rank - 1);
  if (stepwise) acc = xt.dtype;
  src = tt_hlo_convert(b, src, acc);
  tt_hv out = tt_lower_scatter_at(c, tt_hlo_convert(b, x, acc),
                                  tt_lower_dim_coords(c, &st, index, dim, rt.dims[dim]),
                                  src, TT_HLO_REDUCE_ADD);
  tt_lower_result(c, tt_hlo_convert(b, tt_hlo_reshape(b, out, xt.rank, xt.dims), xt.dtype));
  return NULL;
}

// --- _pdist_forward -------------------------------------------------------------------------

// _pdist_forward(self [N, M], p): the p-norm distance of rows i < j, ordered
// by i then j. Row i's pairs start at s(i) = i N - i (i + 1) / 2; output k
// belongs to the last i with s(i) <= k, and j = k - s(i) + i + 1.
static tt_status lower_pdist(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  char s[96];
  if (t.rank != 2 || !tt_dtype_is_float(t.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a 2-D floating input, got %s %s",
                         tt_dtype_name(t.dtype), tt_shape_str(&t, s, sizeof s));
  double p = scalar_value(c, 1, 2);
  if (p < 0) return tt_lower_fail(c, TT_INVALID_ARGUMENT, "p must be >= 0, got %g", p);
  int64_t n = t.dims[0], m = t.dims[1], np = n * (n - 1) / 2;
  tt_hlo_type ot = tt_hlo_make_type(t.dtype, 1, &np);
  if (np == 0) {
    tt_lower_result(c, tt_hlo_splat(b, &ot, 0));
    return NULL;
  }
  int64_t kn[2] = {np, n};
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 2, kn);
  tt_hv kk = tt_hlo_iota(b, &it, 0), r = tt_hlo_iota(b, &it, 1);
  // s(r) = r N - r (r + 1) / 2
  tt_hv sr = tt_lower_bin(c, TT_HLO_SUB, tt_lower_bin(c, TT_HLO_MUL, r, k(c, r, (double)n)),
                          tt_lower_bin(c, TT_HLO_DIV, tt_lower_bin(c, TT_HLO_MUL, r,
                                       tt_lower_bin(c, TT_HLO_ADD, r, k(c, r, 1))), k(c, r, 2)));
  bool last[TT_MAX_RANK] = {false, true};
  tt_hv le = tt_hlo_convert(b, tt_hlo_compare(b, TT_HLO_LE, sr, kk), TT_I64);
  tt_hv i = tt_lower_reduce(c, le, last, false, TT_HLO_REDUCE_ADD);
  i = tt_lower_bin(c, TT_HLO_SUB, i, k(c, i, 1));
  tt_hlo_type vt = tt_hlo_make_type(TT_I64, 1, &np);
  tt_hv kv = tt_hlo_iota(b, &vt, 0);
  tt_hv si = tt_lower_bin(c, TT_HLO_SUB, tt_lower_bin(c, TT_HLO_MUL, i, k(c, i, (double)n)),
                          tt_lower_bin(c, TT_HLO_DIV, tt_lower_bin(c, TT_HLO_MUL, i,
                                       tt_lower_bin(c, TT_HLO_ADD, i, k(c, i, 1))), k(c, i, 2)));
  tt_hv j = tt_lower_bin(c, TT_HLO_ADD, tt_lower_bin(c, TT_HLO_SUB, kv, si),
                         tt_lower_bin(c, TT_HLO_ADD, i, k(c, i, 1)));
  tt_hv x = tt_hlo_convert(b, tt_lower_tensor(c, 0), tt_opmath(t.dtype));
  static const int64_t kOffset[1] = {1}, kZero[1] = {0};
  tt_hlo_gather_dims gd = {.offset_dims = kOffset, .n_offset_dims = 1,
                           .collapsed_slice_dims = kZero, .n_collapsed = 1,
                           .start_index_map = kZero, .n_start_index_map = 1,
                           .index_vector_dim = 1};
  int64_t sizes[2] = {1, m}, col[2] = {np, 1};
  tt_hv xi = tt_hlo_gather(b, x, tt_hlo_reshape(b, i, 2, col), &gd, sizes, NULL);
  tt_hv xj = tt_hlo_gather(b, x, tt_hlo_reshape(b, j, 2, col), &gd, sizes, NULL);
  tt_hv d = pnorm(c, tt_lower_bin(c, TT_HLO_SUB, xi, xj), last, false, p);
  tt_lower_result(c, tt_hlo_convert(b, d, t.dtype));
  return NULL;
}

// --- multi_margin_loss, multilabel_margin_loss_forward --------------------------------------

enum { kNone = 0, kMean = 1, kSum = 2 };

// Per-sample losses l [N] reduced by `red`; `rank0` gives a 0-d result
// for reduction none (a 1-D input with a 0-d target).
static void finish_loss(tt_lower_ctx *c, tt_hv l, int64_t red, bool rank0, tt_dtype d) {
  tt_hlo *b = tt_lower_hlo(c);
  bool all[TT_MAX_RANK] = {true};
  int64_t n = tt_lower_type(c, l).dims[0];
  if (red != kNone) {
    l = tt_lower_reduce(c, l, all, false, TT_HLO_REDUCE_ADD);
    if (red == kMean && n > 0) l = tt_lower_bin(c, TT_HLO_DIV, l, k(c, l, (double)n));
    // an empty batch's mean is 0 on PyTorch's CPU, not 0/0
  } else if (rank0) {
    l = tt_hlo_reshape(b, l, 0, NULL);
  }
  tt_lower_result(c, tt_hlo_convert(b, l, d));
}

// Input as [N, C] in opmath (0-D / 1-D input is one sample) and target as [N] or
// [N, C] (`per_class`) i64.
static tt_status margin_args(tt_lower_ctx *c, bool per_class, tt_hv *x, tt_hv *y,
                             int64_t *red, int red_arg) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1), yt = tt_lower_tensor_type(c, 1, -1);
  *red = tt_lower_int(c, red_arg);
  char s1[96], s2[96];
  if (!tt_dtype_is_float(t.dtype) || t.rank > 2 || !tt_dtype_is_int(yt.dtype) ||
      *red < kNone || *red > kSum)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a 0-D, 1-D or 2-D floating input and an "
                         "integer target, got %s %s and %s %s", tt_dtype_name(t.dtype),
                         tt_shape_str(&t, s1, sizeof s1), tt_dtype_name(yt.dtype),
                         tt_shape_str(&yt, s2, sizeof s2));
  int64_t nc[2] = {t.rank == 2 ? t.dims[0] : 1, t.rank ? t.dims[t.rank - 1] : 1};
  if (t.rank > 0 && nc[1] == 0)  // PyTorch's shape checks, in its order and words
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected non-empty vector or matrix with "
                         "optional 0-dim batch size, but got: %s", tt_shape_str(&t, s1, sizeof s1));
  bool ok = per_class ? (t.rank <= 1 ? yt.rank <= 1 && tt_hlo_numel(&yt) == nc[1]
                                     : yt.rank == 2 && yt.dims[0] == nc[0] && yt.dims[1] == nc[1])
                      : yt.rank <= 1 && tt_hlo_numel(&yt) == nc[0];
  if (!ok && per_class)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "inconsistent target size: %s for input of "
                         "size: %s", tt_shape_str(&yt, s1, sizeof s1),
                         tt_shape_str(&t, s2, sizeof s2));
  if (!ok)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "multi_margin_loss: target tensor should be "
                         "1-D with size equal to the number of input samples (batch size). "
                         "Expected target size [%" PRId64 "], but got %s. Input has shape %s.",
                         nc[0], tt_shape_str(&yt, s1, sizeof s1), tt_shape_str(&t, s2, sizeof s2));
  *x = tt_hlo_reshape(b, tt_hlo_convert(b, tt_lower_tensor(c, 0), tt_opmath(t.dtype)), 2, nc);
  *y = tt_hlo_reshape(b, tt_hlo_convert(b, tt_lower_tensor(c, 1), TT_I64), per_class ? 2 : 1, nc);
  return NULL;
}

// multi_margin_loss(self, target, p, margin, weight?, reduction): per sample
// sum_{i != y} w[y] max(0, margin - x[y] + x[i])^p / C, p in {1, 2}.
static tt_status lower_multi_margin(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  double p = scalar_value(c, 2, 1);
  if (p != 1 && p != 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "only p == 1 and p == 2 supported, got %g", p);
  tt_hv x, y;
  int64_t red;
  TT_RETURN_IF_ERROR(margin_args(c, false, &x, &y, &red, 5));
  tt_hlo_type xt = tt_lower_type(c, x);
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 2, xt.dims);
  int64_t bd0 = 0;
  tt_hv onehot = tt_hlo_compare(b, TT_HLO_EQ, tt_hlo_iota(b, &it, 1),
                                tt_hlo_broadcast_in_dim(b, y, 2, xt.dims, &bd0));
  bool cls[TT_MAX_RANK] = {false, true};
  tt_hv zero = k(c, x, 0);
  tt_hv xy = tt_lower_reduce(c, tt_hlo_select(b, onehot, x, zero), cls, true, TT_HLO_REDUCE_ADD);
  tt_hv z = tt_lower_bin(c, TT_HLO_ADD, tt_lower_bin(c, TT_HLO_SUB,
                         tt_lower_broadcast_to(c, tt_lower_scalar(c, 3, xt.dtype), 2, xt.dims),
                         tt_lower_expand_like(c, xy, x)), x);
  tt_hv h = tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_GT, z, zero), z, zero);
  if (p == 2) h = tt_lower_bin(c, TT_HLO_MUL, h, h);
  if (!tt_lower_is_none(c, 4)) {
    tt_hlo_type wt = tt_lower_tensor_type(c, 4, -1);
    char s1[96];
    if (wt.rank != 1)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "weight must be one-dimensional");
    if (wt.dims[0] != xt.dims[1])
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "inconsistent weight size, expected %lld "
                           "but got %s", (long long)xt.dims[1], tt_shape_str(&wt, s1, sizeof s1));
    tt_hv w = tt_hlo_convert(b, tt_lower_tensor(c, 4), xt.dtype);
    int64_t bd1 = 1;
    w = tt_hlo_broadcast_in_dim(b, w, 2, xt.dims, &bd1);
    tt_hv wy = tt_lower_reduce(c, tt_hlo_select(b, onehot, w, zero), cls, true, TT_HLO_REDUCE_ADD);
    h = tt_lower_bin(c, TT_HLO_MUL, h, tt_lower_expand_like(c, wy, x));
  }
  h = tt_hlo_select(b, onehot, zero, h);
  tt_hv l = tt_lower_reduce(c, h, cls, false, TT_HLO_REDUCE_ADD);
  l = tt_lower_bin(c, TT_HLO_DIV, l, k(c, l, (double)xt.dims[1]));
  finish_loss(c, l, red, tt_lower_tensor_type(c, 1, -1).rank == 0,
              tt_lower_tensor_type(c, 0, -1).dtype);
  return NULL;
}

// multilabel_margin_loss_forward(self, target, reduction) -> (output,
// is_target): each sample's labels are target's entries before the first
// -1; the loss sums max(0, 1 - (x[y] - x[j])) over labels y and non-label
// classes j, divided by C.
static tt_status lower_multilabel_margin(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv x, y;
  int64_t red;
  TT_RETURN_IF_ERROR(margin_args(c, true, &x, &y, &red, 2));
  tt_hlo_type xt = tt_lower_type(c, x), t = tt_lower_tensor_type(c, 0, -1);
  int64_t n = xt.dims[0], cc = xt.dims[1];
  // valid[n, k]: no -1 at or before k (a prefix max of y < 0).
  tt_hv neg = tt_hlo_convert(b, tt_hlo_compare(b, TT_HLO_LT, y, k(c, y, 0)), TT_I64);
  tt_hlo_window w = tt_hlo_window_identity(2);
  w.dims[1] = cc;
  w.pad_lo[1] = cc - 1;
  tt_hv seen = tt_hlo_reduce_window(b, neg, tt_hlo_const_i(b, TT_I64, 0), &w, TT_HLO_REDUCE_MAX);
  tt_hv valid = tt_hlo_compare(b, TT_HLO_EQ, seen, k(c, seen, 0));
  // hit[n, k, j]: label k of sample n is class j (and valid).
  int64_t d3[3] = {n, cc, cc}, bnk[2] = {0, 1}, bnj[2] = {0, 2};
  tt_hlo_type i3 = tt_hlo_make_type(TT_I64, 3, d3);
  tt_hv hit = tt_hlo_compare(b, TT_HLO_EQ, tt_hlo_broadcast_in_dim(b, y, 3, d3, bnk),
                             tt_hlo_iota(b, &i3, 2));
  hit = tt_lower_bin(c, TT_HLO_AND, hit, tt_hlo_broadcast_in_dim(b, valid, 3, d3, bnk));
  bool over_k[TT_MAX_RANK] = {false, true, false}, over_j[TT_MAX_RANK] = {false, false, true};
  tt_hv is_t = tt_lower_reduce(c, hit, over_k, false, TT_HLO_REDUCE_OR);  // [n, j]
  tt_hv x3 = tt_hlo_broadcast_in_dim(b, x, 3, d3, bnj);
  tt_hv zero3 = k(c, x3, 0);
  tt_hv xk = tt_lower_reduce(c, tt_hlo_select(b, hit, x3, zero3), over_j, false,
                             TT_HLO_REDUCE_ADD);  // x[y_k], [n, k]
  tt_hv z = tt_lower_bin(c, TT_HLO_ADD, tt_lower_bin(c, TT_HLO_SUB, k(c, x3, 1),
                         tt_hlo_broadcast_in_dim(b, xk, 3, d3, bnk)), x3);
  tt_hv keep = tt_lower_bin(c, TT_HLO_AND, tt_hlo_broadcast_in_dim(b, valid, 3, d3, bnk),
                            tt_hlo_unary(b, TT_HLO_NOT, tt_hlo_broadcast_in_dim(b, is_t, 3, d3, bnj)));
  keep = tt_lower_bin(c, TT_HLO_AND, keep, tt_hlo_compare(b, TT_HLO_GT, z, zero3));
  bool kj[TT_MAX_RANK] = {false, true, true};
  tt_hv l = tt_lower_reduce(c, tt_hlo_select(b, keep, z, zero3), kj, false, TT_HLO_REDUCE_ADD);
  l = tt_lower_bin(c, TT_HLO_DIV, l, k(c, l, (double)cc));
  finish_loss(c, l, red, t.rank <= 1, t.dtype);
  tt_lower_result(c, tt_hlo_reshape(b, tt_hlo_convert(b, is_t, t.dtype), t.rank, t.dims));
  return NULL;
}

// --- rrelu_with_noise ---------------------------------------------------------------------

// Uniform [0, 1) f32 numbers shaped t (23 random mantissa bits under the
// exponent of 1.0 give [1, 2), minus 1).
static tt_hv uniform01(tt_lower_ctx *c, int gen_arg, const tt_hlo_type *t) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type ut = tt_hlo_make_type(TT_U32, t->rank, t->dims);
  tt_hv state = tt_lower_rng_state(c, gen_arg, (uint64_t)tt_hlo_numel(&ut));
  tt_hv u = tt_hlo_rng_bits(b, state, &ut);
  tt_hv m = tt_lower_bin(c, TT_HLO_OR, tt_lower_bin(c, TT_HLO_SHR_L, u, k(c, u, 9)),
                         tt_hlo_splat_i(b, &ut, 0x3F800000));
  tt_hv f = tt_hlo_bitcast(b, m, TT_F32);
  return tt_lower_bin(c, TT_HLO_SUB, f, k(c, f, 1));
}

// rrelu_with_noise(self, noise, lower, upper, training, generator): negative
// inputs scale by (lower + upper) / 2, or in training by a uniform slope in
// [lower, upper) that is also written to noise (1 for the others).
static tt_status lower_rrelu(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  if (!tt_dtype_is_float(t.dtype) || t.dtype == TT_F64)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "rrelu of %s", tt_dtype_name(t.dtype));
  tt_dtype acc = tt_opmath(t.dtype);
  tt_hv x = tt_hlo_convert(b, tt_lower_tensor(c, 0), acc);
  tt_hv lo = tt_lower_broadcast_to(c, tt_lower_is_none(c, 2) ? tt_hlo_const(b, acc, 0.125)
                                       : tt_lower_scalar(c, 2, acc), t.rank, t.dims);
  tt_hv hi = tt_lower_broadcast_to(c, tt_lower_is_none(c, 3) ? tt_hlo_const(b, acc, 1.0 / 3)
                                       : tt_lower_scalar(c, 3, acc), t.rank, t.dims);
  bool training = !tt_lower_is_none(c, 4) && tt_lower_bool(c, 4);
  tt_hv pos = tt_hlo_compare(b, TT_HLO_GE, x, k(c, x, 0));
  tt_hv slope;
  if (training) {
    tt_hv u = uniform01(c, 5, &t);
    slope = tt_lower_bin(c, TT_HLO_ADD, lo, tt_lower_bin(c, TT_HLO_MUL, u,
                                                          tt_lower_bin(c, TT_HLO_SUB, hi, lo)));
    slope = tt_hlo_select(b, pos, k(c, x, 1), slope);
    tt_lower_write_arg(c, 1, slope);
  } else {
    slope = tt_lower_bin(c, TT_HLO_DIV, tt_lower_bin(c, TT_HLO_ADD, lo, hi), k(c, x, 2));
    slope = tt_hlo_select(b, pos, k(c, x, 1), slope);
  }
  tt_lower_result(c, tt_hlo_convert(b, tt_lower_bin(c, TT_HLO_MUL, x, slope), t.dtype));
  return NULL;
}

// --- _embedding_bag_forward_only ----------------------------------------------------------

enum { kBagSum = 0, kBagMean = 1, kBagMax = 2 };

// _embedding_bag_forward_only(weight [V, D], indices [L], offsets [B'],
// scale_grad_by_freq, mode, sparse, per_sample_weights?, include_last_offset,
// padding_idx) -> (output [B, D], offset2bag [L], bag_size [B], max_indices
// [B, D] for max, else [B]); also _embedding_bag, the same op when the
// weight needs a gradient (its backward: torchtpu/_embedding_bag.py). Bag b holds
// indices offsets[b] <= i < offsets[b + 1] (or L), less padding_idx; a mask
// [B, L] sums (a dot), averages or maxes their rows, and an empty bag gives
// zeros.
static tt_status lower_embedding_bag(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type wt = tt_lower_tensor_type(c, 0, -1), it = tt_lower_tensor_type(c, 1, -1),
              ot = tt_lower_tensor_type(c, 2, -1);
  int64_t mode = tt_lower_int(c, 4), pad = tt_lower_is_none(c, 8) ? -1 : tt_lower_int(c, 8);
  bool last = !tt_lower_is_none(c, 7) && tt_lower_bool(c, 7);
  char s1[96], s2[96];
  // PyTorch's checks and texts first
  if (it.rank != 1 && it.rank != 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input has to be a 1D or 2D Tensor, but got "
                         "Tensor of dimension %d", it.rank);
  if (ot.rank != 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "offsets has to be a 1D Tensor, but got Tensor "
                         "of dimension %d", ot.rank);
  if (wt.rank != 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "weight has to be a 2D Tensor, but got Tensor "
                         "of dimension %d", wt.rank);
  tt_dtype pd = tt_lower_is_none(c, 6) ? wt.dtype : tt_lower_tensor_type(c, 6, -1).dtype;
  if (pd != wt.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected scalar type %s but found %s",
                         tt_dtype_torch_name(wt.dtype), tt_dtype_torch_name(pd));
  if (it.rank != 1 || !tt_dtype_is_float(wt.dtype) ||
      mode < kBagSum || mode > kBagMax || ot.dims[0] < (last ? 1 : 0))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected 2-D weight, 1-D indices %s and "
                         "offsets %s, mode 0..2 (got %" PRId64 ")", tt_shape_str(&it, s1, sizeof s1),
                         tt_shape_str(&ot, s2, sizeof s2), mode);
  int64_t L = it.dims[0], nb = ot.dims[0] - (last ? 1 : 0), D = wt.dims[1];
  tt_dtype acc = tt_opmath(wt.dtype);
  tt_hv idx = tt_hlo_convert(b, tt_lower_tensor(c, 1), TT_I64);
  tt_hv off = tt_hlo_convert(b, tt_lower_tensor(c, 2), TT_I64);
  // The gather below clamps: an index out of range would read another row.
  tt_lower_check_index(c, idx, wt.dims[0], false, TT_INVALID_ARGUMENT,
                       "embedding_bag: Expected idx >= 0 && idx < num_embeddings but found "
                       "idx to be {}", 0, 0);
  // ends: offsets[1:] then L (without include_last_offset)
  int64_t one = 1, zero = 0, noff = ot.dims[0];
  tt_hv tail = tt_hlo_slice(b, off, &one, &noff, kOnes);
  tt_hlo_type lt = tt_hlo_make_type(TT_I64, 1, &one);
  tt_hv ends_parts[2] = {tail, tt_hlo_splat_i(b, &lt, L)};
  tt_hv ends = last ? tail : tt_hlo_concatenate(b, ends_parts, 2, 0);
  tt_hv starts = tt_hlo_slice(b, off, &zero, &nb, kOnes);
  int64_t bl[2] = {nb, L}, d0 = 0, d1 = 1;
  tt_hlo_type blt = tt_hlo_make_type(TT_I64, 2, bl);
  tt_hv pos = tt_hlo_iota(b, &blt, 1);
  tt_hv member = tt_lower_bin(c, TT_HLO_AND,
                              tt_hlo_compare(b, TT_HLO_LE, tt_hlo_broadcast_in_dim(b, starts, 2, bl, &d0), pos),
                              tt_hlo_compare(b, TT_HLO_LT, pos, tt_hlo_broadcast_in_dim(b, ends, 2, bl, &d0)));
  tt_hv bidx = tt_hlo_broadcast_in_dim(b, idx, 2, bl, &d1);
  if (pad >= 0)
    member = tt_lower_bin(c, TT_HLO_AND, member, tt_hlo_compare(b, TT_HLO_NE, bidx, k(c, bidx, (double)pad)));
  static const int64_t kOffset[1] = {1}, kZero[1] = {0};
  tt_hlo_gather_dims gd = {.offset_dims = kOffset, .n_offset_dims = 1,
                           .collapsed_slice_dims = kZero, .n_collapsed = 1,
                           .start_index_map = kZero, .n_start_index_map = 1,
                           .index_vector_dim = 1};
  int64_t sizes[2] = {1, D}, col[2] = {L, 1};
  tt_hv rows = tt_hlo_gather(b, tt_hlo_convert(b, tt_lower_tensor(c, 0), acc),
                             tt_hlo_reshape(b, idx, 2, col), &gd, sizes, NULL);  // [L, D]
  bool over_l[TT_MAX_RANK] = {false, true, false};
  tt_hv cnt = tt_lower_reduce(c, tt_hlo_convert(b, member, TT_I64), over_l, false, TT_HLO_REDUCE_ADD);
  tt_hv out, maxi;
  int64_t bd[2] = {nb, D};
  tt_hlo_type bdt = tt_hlo_make_type(TT_I64, 2, bd);
  if (mode == kBagMax) {
    int64_t bld[3] = {nb, L, D}, m01[2] = {0, 1}, m12[2] = {1, 2};
    tt_hv r3 = tt_hlo_broadcast_in_dim(b, rows, 3, bld, m12);
    tt_hv m3 = tt_hlo_broadcast_in_dim(b, member, 3, bld, m01);
    tt_hv low = tt_lower_broadcast_to(c, tt_lower_reduce_init(c, acc, TT_HLO_REDUCE_MAX), 3, bld);
    tt_hv i3 = tt_hlo_broadcast_in_dim(b, idx, 3, bld, &d1);
    tt_hv v;
    tt_hlo_argreduce(b, tt_hlo_select(b, m3, r3, low), 1, true, TT_I64, &v, &maxi);
    // the position of the max, as a row index
    maxi = tt_lower_reduce(c, tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_EQ,
                                tt_hlo_iota(b, &(tt_hlo_type){TT_I64, 3, {nb, L, D}}, 1),
                                tt_hlo_broadcast_in_dim(b, maxi, 3, bld, (int64_t[]){0, 2})),
                                i3, k(c, i3, 0)), over_l, false, TT_HLO_REDUCE_ADD);
    tt_hv empty = tt_hlo_compare(b, TT_HLO_EQ, tt_hlo_broadcast_in_dim(b, cnt, 2, bd, &d0),
                                 tt_hlo_splat_i(b, &bdt, 0));
    out = tt_hlo_select(b, empty, k(c, v, 0), v);
    maxi = tt_hlo_select(b, empty, tt_hlo_splat_i(b, &bdt, -1), maxi);
  } else {
    tt_hv e = rows;
    if (!tt_lower_is_none(c, 6)) {
      tt_hv psw = tt_hlo_convert(b, tt_lower_tensor(c, 6), acc);
      int64_t ld[2] = {L, D};
      e = tt_lower_bin(c, TT_HLO_MUL, e, tt_hlo_broadcast_in_dim(b, psw, 2, ld, &d0));
      // PyTorch's 16-bit kernels round each weighted row to the weight's dtype
      if (acc != wt.dtype) e = tt_hlo_convert(b, tt_hlo_convert(b, e, wt.dtype), acc);
    }
    tt_hv mf = tt_hlo_convert(b, member, acc);
    out = tt_hlo_dot_general(b, mf, e, NULL, NULL, 0, &d1, &d0, 1, acc);
    if (mode == kBagMean) {
      tt_hv cf = tt_hlo_broadcast_in_dim(b, tt_hlo_convert(b, cnt, acc), 2, bd, &d0);
      out = tt_lower_bin(c, TT_HLO_DIV, out, tt_lower_bin(c, TT_HLO_MAX, cf, k(c, cf, 1)));
    }
    // as PyTorch's: [B], zeros for sum, the bag sizes for mean
    maxi = mode == kBagMean ? cnt : tt_hlo_splat_i(b, &(tt_hlo_type){TT_I64, 1, {nb}}, 0);
  }
  // offset2bag: the last bag whose start is <= i
  tt_hv o2b = tt_lower_reduce(c, tt_hlo_convert(b, tt_hlo_compare(b, TT_HLO_LE,
                              tt_hlo_broadcast_in_dim(b, starts, 2, bl, &d0), pos), TT_I64),
                              (bool[TT_MAX_RANK]){true, false}, false, TT_HLO_REDUCE_ADD);
  o2b = tt_lower_bin(c, TT_HLO_SUB, o2b, k(c, o2b, 1));
  // The index results are int32 when indices and offsets both are (as PyTorch).
  tt_dtype id = it.dtype == TT_I32 && ot.dtype == TT_I32 ? TT_I32 : TT_I64;
  tt_lower_result(c, tt_hlo_convert(b, out, wt.dtype));
  tt_lower_result(c, tt_hlo_convert(b, o2b, id));
  tt_lower_result(c, tt_hlo_convert(b, cnt, id));
  tt_lower_result(c, tt_hlo_convert(b, maxi, id));
  return NULL;
}

// --- the table --------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
static const tt_rule kRules[] = {
    R("trace", lower_trace), R("trace.out", lower_trace),
    R("channel_shuffle", lower_channel_shuffle), R("channel_shuffle.out", lower_channel_shuffle),
    {"aten::renorm", lower_renorm, TT_RULE_SCALARS_IN_SIGNATURE},
    {"aten::renorm_", lower_renorm, TT_RULE_SCALARS_IN_SIGNATURE},
    {"aten::renorm.out", lower_renorm, TT_RULE_SCALARS_IN_SIGNATURE},
    R("_logcumsumexp", lower_logcumsumexp), R("_logcumsumexp.out", lower_logcumsumexp),
    R("index_fill.int_Scalar", lower_index_fill), R("index_fill_.int_Scalar", lower_index_fill),
    R("index_fill.int_Tensor", lower_index_fill), R("index_fill_.int_Tensor", lower_index_fill),
    R("index_fill.int_Scalar_out", lower_index_fill),
    R("index_fill.int_Tensor_out", lower_index_fill),
    R("index_add", lower_index_add), R("index_add_", lower_index_add),
    R("index_add.out", lower_index_add),
    {"aten::_pdist_forward", lower_pdist, TT_RULE_SCALARS_IN_SIGNATURE},
    {"aten::multi_margin_loss", lower_multi_margin, TT_RULE_SCALARS_IN_SIGNATURE},
    {"aten::multi_margin_loss.out", lower_multi_margin, TT_RULE_SCALARS_IN_SIGNATURE},
    R("multilabel_margin_loss_forward", lower_multilabel_margin),
    R("multilabel_margin_loss_forward.output", lower_multilabel_margin),
    R("rrelu_with_noise", lower_rrelu), R("rrelu_with_noise_", lower_rrelu),
    R("rrelu_with_noise.out", lower_rrelu),
    R("_embedding_bag_forward_only", lower_embedding_bag), R("_embedding_bag", lower_embedding_bag),
};
#undef R

const tt_rule_table tt_rules_misc = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
