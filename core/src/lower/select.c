// select.c — selection, indexing and sampling ops that index.c and random.c
// leave out: index_reduce (prod, mean, amax, amin, include_self),
// index_copy, take, put_ (accumulate), masked_scatter_, nonzero_static, order statistics
// from a stable sort (kthvalue, median, nanmedian), cummax / cummin,
// linalg_cross, _cdist_forward, and the samplers cauchy_, exponential_,
// geometric_, log_normal_ and normal with tensor mean / std.
//
// Order statistics sort along the dim (NaN largest) with an iota payload and
// pick one position per row: a mask on the sorted dim, reduced with max.
// Samplers draw THREE_FRY bits keyed by the generator's (seed, offset) and
// transform uniform [0, 1) numbers (inverse CDFs, Box–Muller).
//
// Also mode, segment_reduce (lengths / offsets over any axis), embedding_renorm_,
// multinomial (inverse CDF with replacement, Gumbel top-k without) and histc.
//
// mode counts equal pairs within each row (rows up to 2^26 pairs in all).
//
// Leaves out: mode of NaN data (NaNs never compare equal), integer kthvalue (tied indices follow
// the CPU's quickselect), integer index_reduce "mean", segment_reduce's
// `indices`, 16-bit segment_reduce and 16-bit float histc (the CPU rounds every step),
// bounds checks of indices (XLA clamps where PyTorch raises).
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "lower/lower.h"

static const int64_t kIota[TT_MAX_RANK] = {0, 1, 2, 3, 4, 5, 6, 7};
static const int64_t kOnes[TT_MAX_RANK] = {1, 1, 1, 1, 1, 1, 1, 1};

// --- shared pieces ----------------------------------------------------------------------

// (self, dim, index, source) of index_copy / index_reduce, as rank >= 1
// values; index is 1-D with one entry per source slice along dim.
typedef struct index_args {
  tt_hlo_type xt;   // self as given
  tt_hv x, src, crd;
  int64_t dim;
} index_args;

static tt_status index_prepare(tt_lower_ctx *c, index_args *a) {
  tt_hlo *b = tt_lower_hlo(c);
  a->xt = tt_lower_tensor_type(c, 0, -1);
  tt_hlo_type it = tt_lower_tensor_type(c, 2, -1), st = tt_lower_tensor_type(c, 3, -1);
  char s1[96], s2[96];
  const char *xn = tt_dtype_torch_name(a->xt.dtype), *sn = tt_dtype_torch_name(st.dtype);
  if (st.dtype != a->xt.dtype && strstr(tt_lower_op_name(c), "index_copy"))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "index_copy_(): self and source expected to "
                         "have the same dtype, but got (self) %s and (source) %s", xn, sn);
  if (st.dtype != a->xt.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "index_reduce_(): self (%s) and source (%s) "
                         "must have the same scalar type", xn, sn);
  if (!tt_dtype_is_int(it.dtype) || it.rank > 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "index must be a 0-d or 1-d integer tensor, "
                         "got %s %s", tt_dtype_name(it.dtype), tt_shape_str(&it, s1, sizeof s1));
  int xr = a->xt.rank ? a->xt.rank : 1;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 1), xr, &a->dim));
  a->x = tt_lower_tensor(c, 0);
  a->src = tt_lower_tensor(c, 3);
  tt_hv index = tt_lower_tensor(c, 2);
  if (a->xt.rank == 0) a->x = tt_hlo_reshape(b, a->x, 1, kOnes);
  if (st.rank == 0) {
    a->src = tt_hlo_reshape(b, a->src, 1, kOnes);
    st = tt_lower_type(c, a->src);
  }
  if (it.rank == 0) index = tt_hlo_reshape(b, index, 1, kOnes);
  int64_t n = it.rank ? it.dims[0] : 1;
  if (st.rank != xr || st.dims[a->dim] != n)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "source %s doesn't match self %s with %" PRId64
                         " indices along dim %" PRId64, tt_shape_str(&st, s1, sizeof s1),
                         tt_shape_str(&a->xt, s2, sizeof s2), n, a->dim);
  int64_t size = tt_lower_type(c, a->x).dims[a->dim];
  if (strstr(tt_lower_op_name(c), "index_copy"))
    tt_lower_check_index(c, index, size, false, TT_OUT_OF_RANGE, "index_copy_(): index {} is "
                         "out of bounds for dimension {} with size {}", a->dim, size);
  else
    tt_lower_check_index(c, index, size, false, TT_OUT_OF_RANGE, "index out of range in self",
                         0, 0);
  a->crd = tt_lower_dim_coords(c, &st, index, a->dim, size);
  return NULL;
}

// --- index_copy, index_reduce -----------------------------------------------------------

// index_copy(self, dim, index, source): source slices overwrite self's.
static tt_status lower_index_copy(tt_lower_ctx *c) {
  index_args a;
  TT_RETURN_IF_ERROR(index_prepare(c, &a));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv out = tt_lower_scatter_at(c, a.x, a.crd, tt_hlo_convert(b, a.src, a.xt.dtype), -1);
  tt_lower_result(c, tt_hlo_reshape(b, out, a.xt.rank, a.xt.dims));
  return NULL;
}

// index_reduce(self, dim, index, source, reduce, *, include_self): prod,
// mean, amax or amin of the source slices landing on each self slice.
static tt_status lower_index_reduce(tt_lower_ctx *c) {
  index_args a;
  TT_RETURN_IF_ERROR(index_prepare(c, &a));
  tt_hlo *b = tt_lower_hlo(c);
  const tt_value *rv = tt_lower_arg(c, 4);
  const char *s = rv->kind == TT_VALUE_STRING ? rv->u.str : "";
  bool mean = !strcmp(s, "mean");
  tt_hlo_reduce_kind kind;
  if (!strcmp(s, "prod")) kind = TT_HLO_REDUCE_MUL;
  else if (!strcmp(s, "amax")) kind = TT_HLO_REDUCE_MAX;
  else if (!strcmp(s, "amin")) kind = TT_HLO_REDUCE_MIN;
  else if (mean) kind = TT_HLO_REDUCE_ADD;
  else return tt_lower_fail(c, TT_INVALID_ARGUMENT, "reduce argument must be one of prod, "
                            "mean, amax, amin, got '%s'", s);
  if (mean && !tt_dtype_is_float(a.xt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "integer index_reduce mean");
  bool include_self = tt_lower_is_none(c, 5) || tt_lower_bool(c, 5);
  // In self's dtype, as ATen's CPU and CUDA kernels do (a 16-bit sum is
  // rounded at each step, not once at the end).
  tt_dtype acc = a.xt.dtype;
  tt_hv base = tt_hlo_convert(b, a.x, acc), upd = tt_hlo_convert(b, a.src, acc);
  tt_hlo_type ut = tt_lower_type(c, upd);
  if (!include_self)  // touched positions start from the identity
    base = tt_lower_scatter_at(c, base, a.crd,
                        tt_lower_broadcast_to(c, tt_lower_reduce_init(c, acc, kind), ut.rank,
                                              ut.dims), -1);
  tt_hv out = tt_lower_scatter_at(c, base, a.crd, upd, kind);
  if (mean) {
    tt_hv cnt0 = tt_lower_splat_like(c, base, include_self ? 1 : 0);
    tt_hv cnt = tt_lower_scatter_at(c, cnt0, a.crd, tt_lower_splat_like(c, upd, 1), TT_HLO_REDUCE_ADD);
    cnt = tt_lower_bin(c, TT_HLO_MAX, cnt, tt_lower_splat_like(c, cnt, 1));
    out = tt_lower_bin(c, TT_HLO_DIV, out, cnt);
  }
  tt_lower_result(c, tt_hlo_convert(b, tt_hlo_reshape(b, out, a.xt.rank, a.xt.dims),
                                    a.xt.dtype));
  return NULL;
}

// --- take, put_, masked_scatter_ -----------------------------------------------------------

static tt_hv flat(tt_lower_ctx *c, tt_hv x) {
  tt_hlo_type t = tt_lower_type(c, x);
  int64_t n = tt_hlo_numel(&t);
  return tt_hlo_reshape(tt_lower_hlo(c), x, 1, &n);
}

// Inclusive prefix sum of an i64 value along its last dim (a window over
// each prefix).
static tt_hv prefix_sum(tt_lower_ctx *c, tt_hv v) {
  tt_hlo_type t = tt_lower_type(c, v);
  if (t.rank < 1) return v;  // a scalar is its own prefix sum
  int last = t.rank - 1;
  tt_hlo_window w = tt_hlo_window_identity(t.rank);
  w.dims[last] = t.dims[last];
  w.pad_lo[last] = t.dims[last] - 1;
  tt_hlo *b = tt_lower_hlo(c);
  return tt_hlo_reduce_window(b, v, tt_hlo_const_i(b, TT_I64, 0), &w, TT_HLO_REDUCE_ADD);
}

// take(self, index): self flattened, gathered at index (any shape).
static tt_status lower_take(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1), it = tt_lower_tensor_type(c, 1, -1);
  if (!tt_dtype_is_int(it.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "index must be an integer tensor, got %s",
                         tt_dtype_name(it.dtype));
  int64_t n = tt_hlo_numel(&xt);
  if (n == 0 && tt_hlo_numel(&it) > 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "cannot take from an empty tensor");
  if (tt_hlo_numel(&it) == 0) {  // nothing to gather (self may be empty too)
    tt_hlo_type rt = tt_hlo_make_type(xt.dtype, it.rank, it.dims);
    tt_lower_result(c, tt_hlo_splat(b, &rt, 0));
    return NULL;
  }
  int64_t cd[TT_MAX_RANK + 1];
  memcpy(cd, it.dims, sizeof(int64_t) * (size_t)it.rank);
  cd[it.rank] = 1;
  tt_lower_check_index(c, tt_lower_tensor(c, 1), n, true, TT_OUT_OF_RANGE,
                       "out of range: tried to access index {} on a tensor of {} elements.",
                       n, 0);
  tt_hv idx = tt_hlo_reshape(b, tt_lower_wrap_index(c, tt_lower_tensor(c, 1), n), it.rank + 1, cd);
  tt_hlo_gather_dims gd = {.collapsed_slice_dims = kIota, .n_collapsed = 1,
                           .start_index_map = kIota, .n_start_index_map = 1,
                           .index_vector_dim = it.rank};
  tt_lower_result(c, tt_hlo_gather(b, flat(c, tt_lower_tensor(c, 0)), idx, &gd, kOnes, NULL));
  return NULL;
}

// put_(self, index, source, accumulate): source (as many elements as index)
// written, or added, at the flat positions index.
static tt_status lower_put(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1), it = tt_lower_tensor_type(c, 1, -1);
  tt_hlo_type st = tt_lower_tensor_type(c, 2, -1);
  int64_t k = tt_hlo_numel(&it), two[2] = {k, 1};
  if (st.dtype != xt.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "put_(): self and source expected to have the "
                         "same dtype, but got self.dtype = %s and source.dtype = %s",
                         tt_dtype_torch_name(xt.dtype), tt_dtype_torch_name(st.dtype));
  if (!tt_dtype_is_int(it.dtype) || tt_hlo_numel(&st) != k)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected an integer index and a source "
                         "with as many elements (%" PRId64 " vs %" PRId64 ")", k,
                         tt_hlo_numel(&st));
  if (k == 0) {
    tt_lower_result(c, tt_lower_tensor(c, 0));
    return NULL;
  }
  bool acc = !tt_lower_is_none(c, 3) && tt_lower_bool(c, 3);
  tt_lower_check_index(c, tt_lower_tensor(c, 1), tt_hlo_numel(&xt), true, TT_OUT_OF_RANGE,
                       "out of range: tried to access index {} on a tensor of {} elements.",
                       tt_hlo_numel(&xt), 0);
  tt_hv idx = tt_hlo_reshape(b, tt_lower_wrap_index(c, flat(c, tt_lower_tensor(c, 1)),
                                           tt_hlo_numel(&xt)), 2, two);
  tt_hv src = tt_hlo_convert(b, flat(c, tt_lower_tensor(c, 2)), xt.dtype);
  tt_hv out = tt_lower_scatter_at(c, flat(c, tt_lower_tensor(c, 0)), idx, src,
                           acc ? TT_HLO_REDUCE_ADD : -1);
  tt_lower_result(c, tt_hlo_reshape(b, out, xt.rank, xt.dims));
  return NULL;
}

// masked_scatter_(self, mask, source): the i-th true position of mask (in
// row-major order, broadcast to self) takes source's i-th element.
static tt_status lower_masked_scatter(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1), st = tt_lower_tensor_type(c, 2, -1);
  if (st.dtype != xt.dtype)  // sic: PyTorch's text has no space after "got"
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "masked_scatter: expected self and source to "
                         "have same dtypes but got%s and %s", tt_dtype_torch_name(xt.dtype),
                         tt_dtype_torch_name(st.dtype));
  tt_dtype md = tt_lower_tensor_type(c, 1, -1).dtype;
  if (md != TT_BOOL)  // the CPU warns of uint8 masks, then refuses them too
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "masked_scatter_ only supports boolean masks, "
                         "but got mask with dtype %s", tt_dtype_torch_name(md));
  int64_t n = tt_hlo_numel(&xt), s = tt_hlo_numel(&st);
  if (n == 0) {
    tt_lower_result(c, tt_lower_tensor(c, 0));
    return NULL;
  }
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hv m = tt_hlo_convert(b, tt_lower_tensor(c, 1), TT_BOOL);
  m = flat(c, tt_lower_broadcast_to(c, m, xt.rank, xt.dims));
  tt_hv pos = prefix_sum(c, tt_hlo_convert(b, m, TT_I64));
  // A true position past source's last element: PyTorch's CPU check, here
  // on the device (CUDA checks it in its kernel too).
  tt_lower_check(c, tt_lower_bin(c, TT_HLO_AND, m, tt_hlo_compare(b, TT_HLO_GT, pos,
                                                                  tt_lower_splat_like(c, pos, s))),
                 TT_HV_INVALID, TT_INVALID_ARGUMENT,
                 "Number of elements of source < number of ones in mask", 0, 0);
  if (s == 0) {
    tt_lower_result(c, x);
    return NULL;
  }
  pos = tt_hlo_clamp(b, tt_hlo_const_i(b, TT_I64, 0),
                     tt_lower_bin(c, TT_HLO_SUB, pos, tt_lower_splat_like(c, pos, 1)),
                     tt_hlo_const_i(b, TT_I64, s - 1));
  int64_t two[2] = {n, 1};
  tt_hlo_gather_dims gd = {.collapsed_slice_dims = kIota, .n_collapsed = 1,
                           .start_index_map = kIota, .n_start_index_map = 1,
                           .index_vector_dim = 1};
  tt_hv src = tt_hlo_convert(b, flat(c, tt_lower_tensor(c, 2)), xt.dtype);
  tt_hv g = tt_hlo_gather(b, src, tt_hlo_reshape(b, pos, 2, two), &gd, kOnes, NULL);
  tt_hv out = tt_hlo_select(b, m, g, flat(c, x));
  tt_lower_result(c, tt_hlo_reshape(b, out, xt.rank, xt.dims));
  return NULL;
}

// --- nonzero_static ---------------------------------------------------------------------------

// nonzero_static(self, *, size, fill_value=-1): the coordinates of self's
// first `size` nonzero elements in row-major order as int64 [size, ndim],
// rows past the count filled with fill_value. Sort-based compaction: each
// element's key is its flat index if nonzero, else numel, so one ascending
// sort puts the nonzero positions first, in order (n log n on XLA's CPU; a
// prefix-sum window would be n^2).
static tt_status lower_nonzero_static(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  int64_t size = tt_lower_int(c, 1), n = tt_hlo_numel(&xt);
  if (size < 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "nonzero_static: 'size' must be an "
                         "non-negative integer");
  int r = xt.rank;
  int64_t od[2] = {size, r};
  tt_hlo_type ot = tt_hlo_make_type(TT_I64, 2, od);
  tt_hv fill = tt_lower_is_none(c, 2) ? tt_hlo_const_i(b, TT_I64, -1)
                                      : tt_lower_scalar(c, 2, TT_I64);
  tt_hv fills = tt_lower_broadcast_to(c, fill, 2, od);
  if (size == 0 || r == 0 || n == 0) {  // no coordinates to compute
    tt_lower_result(c, r == 0 || size == 0 ? tt_hlo_splat_i(b, &ot, 0) : fills);
    return NULL;
  }
  tt_hv x = flat(c, tt_lower_tensor(c, 0));
  tt_hv nz = tt_hlo_compare(b, TT_HLO_NE, x, tt_lower_splat_like(c, x, 0));
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 1, &n);
  tt_hv pos = tt_hlo_iota(b, &it, 0), sorted;
  tt_hv key = tt_hlo_select(b, nz, pos, tt_hlo_splat_i(b, &it, n));
  tt_hlo_sort(b, key, TT_HV_INVALID, 0, false, &sorted, NULL);
  int64_t zero = 0, one = 1, keep = size < n ? size : n, hi = size - keep;
  if (keep < n) sorted = tt_hlo_slice(b, sorted, &zero, &keep, &one);
  if (hi > 0) sorted = tt_hlo_pad(b, sorted, tt_hlo_const_i(b, TT_I64, n), &zero, &hi, &zero);
  // Unravel the flat indices, last dim fastest.
  int64_t col[2] = {size, 1};
  tt_hv parts[TT_MAX_RANK];
  int64_t stride = 1;
  for (int d = r - 1; d >= 0; d--) {
    tt_hv q = tt_lower_bin(c, TT_HLO_DIV, sorted, tt_lower_splat_like(c, sorted, (double)stride));
    tt_hv v = tt_lower_bin(c, TT_HLO_REM, q, tt_lower_splat_like(c, q, (double)xt.dims[d]));
    parts[d] = tt_hlo_reshape(b, v, 2, col);
    stride *= xt.dims[d];
  }
  tt_hv crd = r == 1 ? parts[0] : tt_hlo_concatenate(b, parts, r, 1);
  tt_hv valid = tt_hlo_compare(b, TT_HLO_LT, sorted, tt_lower_splat_like(c, sorted, (double)n));
  int64_t d0 = 0;
  valid = tt_hlo_broadcast_in_dim(b, valid, 2, od, &d0);
  tt_lower_result(c, tt_hlo_select(b, valid, crd, fills));
  return NULL;
}

// --- kthvalue, median, nanmedian ------------------------------------------------------------

enum pick_kind { PICK_KTH, PICK_MEDIAN, PICK_NANMEDIAN };

// The value and index at sorted position k of each row along dim, where k
// comes from `kind` (and kth, 0-based, for PICK_KTH).
static tt_status order_stat(tt_lower_ctx *c, int64_t dim_in, bool keepdim, enum pick_kind kind,
                            int64_t kth, bool values_only) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type xt = tt_lower_type(c, x);
  int64_t dim = 0;
  if (values_only) {
    x = flat(c, x);
  } else {
    TT_RETURN_IF_ERROR(tt_lower_dim(c, dim_in, xt.rank ? xt.rank : 1, &dim));
    if (xt.rank == 0) x = tt_hlo_reshape(b, x, 1, kOnes);
  }
  tt_hlo_type t = tt_lower_type(c, x);
  int64_t n = t.dims[dim];
  // PyTorch's texts: nanmedian's say "median()", as its CPU kernel's do
  const char *fn = kind == PICK_KTH ? "kthvalue" : "median";
  if (n == 0 && values_only && tt_dtype_is_float(t.dtype)) {  // median() of nothing: NaN
    tt_lower_result(c, tt_hlo_const(b, t.dtype, NAN));
    return NULL;
  }
  if (n == 0)
    return tt_lower_fail(c, TT_OUT_OF_RANGE, "%s(): Expected reduction dim %" PRId64
                         " to have non-zero size.", fn, dim);
  if (kind == PICK_KTH && (kth < 0 || kth >= n))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "kthvalue(): selected number k out of range "
                         "for dimension %" PRId64, dim);
  tt_hv sx = t.dtype == TT_BOOL ? tt_hlo_convert(b, x, TT_U8) : x;
  tt_hlo_type it = t;
  it.dtype = TT_I64;
  tt_hv vals, idx;
  tt_hlo_sort(b, sx, tt_hlo_iota(b, &it, dim), dim, false, &vals, &idx);
  bool mask[TT_MAX_RANK] = {false};
  mask[dim] = true;
  tt_hv k;  // per row, keepdim shape
  if (kind == PICK_KTH) {
    tt_hlo_type kt = it;
    kt.dims[dim] = 1;
    k = tt_hlo_splat_i(b, &kt, kth);
  } else {
    tt_hv nan = tt_hlo_convert(b, tt_hlo_compare(b, TT_HLO_NE, x, x), TT_I64);
    tt_hv nans = tt_lower_reduce(c, nan, mask, true, TT_HLO_REDUCE_ADD);
    tt_hv valid = tt_lower_bin(c, TT_HLO_SUB, tt_lower_splat_like(c, nans, (double)n), nans);
    tt_hv two = tt_lower_splat_like(c, nans, 2);
    if (kind == PICK_NANMEDIAN) {  // (valid - 1) / 2 truncates to 0 when all NaN
      k = tt_lower_bin(c, TT_HLO_DIV, tt_lower_bin(c, TT_HLO_SUB, valid,
                                                  tt_lower_splat_like(c, nans, 1)), two);
    } else {  // the first NaN when there is one
      tt_hv any = tt_hlo_compare(b, TT_HLO_GT, nans, tt_lower_splat_like(c, nans, 0));
      k = tt_hlo_select(b, any, valid, tt_lower_splat_like(c, nans, (double)((n - 1) / 2)));
    }
  }
  tt_hv at = tt_hlo_compare(b, TT_HLO_EQ, tt_hlo_iota(b, &it, dim), tt_lower_expand_like(c, k, idx));
  tt_hv fill = tt_lower_broadcast_to(c, tt_lower_reduce_init(c, tt_lower_type(c, vals).dtype,
                                                             TT_HLO_REDUCE_MAX), t.rank, t.dims);
  tt_hv v = tt_lower_reduce(c, tt_hlo_select(b, at, vals, fill), mask, keepdim, TT_HLO_REDUCE_MAX);
  tt_hv i = tt_lower_reduce(c, tt_hlo_select(b, at, idx, tt_lower_splat_like(c, idx, -1)), mask,
                            keepdim, TT_HLO_REDUCE_MAX);
  v = tt_hlo_convert(b, v, t.dtype);
  if (values_only || xt.rank == 0) {
    v = tt_hlo_reshape(b, v, 0, NULL);
    i = tt_hlo_reshape(b, i, 0, NULL);
  }
  tt_lower_result(c, v);
  if (!values_only) tt_lower_result(c, i);
  return NULL;
}

// kthvalue(self, k, dim=-1, keepdim=False): k is 1-based. The CPU's
// quickselect picks some index among ties, which ties in integer data
// expose: those run on the CPU.
static tt_status lower_kthvalue(tt_lower_ctx *c) {
  tt_dtype d = tt_lower_tensor_type(c, 0, -1).dtype;
  if (!tt_dtype_is_float(d))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "kthvalue of %s (tied indices follow the CPU's "
                         "quickselect)", tt_dtype_name(d));
  int64_t k = tt_lower_int(c, 1);
  if (k < 1 || k > INT64_MAX / 2) k = 0;  // order_stat refuses kth -1, with PyTorch's text
  return order_stat(c, tt_lower_int(c, 2), tt_lower_bool(c, 3), PICK_KTH, k - 1, false);
}
// median.dim(self, dim, keepdim): the lower median; NaN when a NaN is present.
static tt_status lower_median_dim(tt_lower_ctx *c) {
  return order_stat(c, tt_lower_int(c, 1), tt_lower_bool(c, 2), PICK_MEDIAN, 0, false);
}
static tt_status lower_nanmedian_dim(tt_lower_ctx *c) {
  return order_stat(c, tt_lower_int(c, 1), tt_lower_bool(c, 2), PICK_NANMEDIAN, 0, false);
}
// median(self) / nanmedian(self): over all elements, the value only.
static tt_status lower_median(tt_lower_ctx *c) {
  return order_stat(c, 0, false, PICK_MEDIAN, 0, true);
}
static tt_status lower_nanmedian(tt_lower_ctx *c) {
  return order_stat(c, 0, false, PICK_NANMEDIAN, 0, true);
}

// mode(self, dim=-1, keepdim=False): the most frequent value of each row
// (the smallest among equally frequent ones) and the last index holding it,
// like the CPU. Counts compare every pair of a row ([*shape, n]), so rows
// are capped at kModePairs pairs in all. The CPU's index among ties is the
// last only for rows its sort handles stably (up to 16): longer rows of
// integers, bool or 16-bit floats, where ties are the rule, run on the CPU.
enum { kModePairs = 1 << 26, kModeStableRow = 16 };

static tt_status lower_mode(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type xt = tt_lower_type(c, x), dest;
  // mode.values takes outputs of exactly self's dtype and int64, as PyTorch.
  for (int r = 0; r < 2; r++) {
    tt_dtype want = r == 0 ? xt.dtype : TT_I64;
    if (tt_lower_dest_type(c, r, &dest) && dest.dtype != want)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected scalar type '%s' but got '%s' "
                           "for %s output", tt_dtype_torch_name(want),
                           tt_dtype_torch_name(dest.dtype), r == 0 ? "values" : "indices");
  }
  int64_t dim;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 1), xt.rank ? xt.rank : 1, &dim));
  bool keepdim = tt_lower_bool(c, 2);
  if (xt.rank == 0) x = tt_hlo_reshape(b, x, 1, kOnes);
  tt_hlo_type t = tt_lower_type(c, x);
  int64_t n = t.dims[dim];
  if (n == 0 || t.rank + 1 > TT_MAX_RANK || tt_hlo_numel(&t) * n > kModePairs)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "mode over %" PRId64 " elements of dim %" PRId64,
                         n, dim);
  if (n > kModeStableRow && t.dtype != TT_F32 && t.dtype != TT_F64)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "mode of %s rows over %d elements (the index "
                         "among ties follows the CPU's unstable sort)", tt_dtype_name(t.dtype),
                         kModeStableRow);
  int r = t.rank;
  int64_t full[TT_MAX_RANK], bj[TT_MAX_RANK], bk[TT_MAX_RANK];
  for (int d = 0; d < r; d++) {
    full[d] = t.dims[d];
    bj[d] = d;
    bk[d] = d == dim ? r : d;
  }
  full[r] = n;
  tt_hv eq = tt_hlo_compare(b, TT_HLO_EQ, tt_hlo_broadcast_in_dim(b, x, r + 1, full, bj),
                            tt_hlo_broadcast_in_dim(b, x, r + 1, full, bk));
  bool last[TT_MAX_RANK] = {false}, along[TT_MAX_RANK] = {false};
  last[r] = true;
  along[dim] = true;
  tt_hv cnt = tt_lower_reduce(c, tt_hlo_convert(b, eq, TT_I64), last, false, TT_HLO_REDUCE_ADD);
  tt_hv top = tt_lower_expand_like(c, tt_lower_reduce(c, cnt, along, true, TT_HLO_REDUCE_MAX), cnt);
  tt_hv sx = t.dtype == TT_BOOL ? tt_hlo_convert(b, x, TT_U8) : x;
  tt_hv hi = tt_lower_expand_like(c, tt_lower_reduce_init(c, tt_lower_type(c, sx).dtype,
                                                          TT_HLO_REDUCE_MIN), sx);
  tt_hv v = tt_lower_reduce(c, tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_EQ, cnt, top), sx, hi),
                            along, true, TT_HLO_REDUCE_MIN);
  tt_hlo_type it = t;
  it.dtype = TT_I64;
  tt_hv iota = tt_hlo_iota(b, &it, dim);
  tt_hv at = tt_hlo_compare(b, TT_HLO_EQ, sx, tt_lower_expand_like(c, v, sx));
  tt_hv i = tt_lower_reduce(c, tt_hlo_select(b, at, iota, tt_lower_splat_like(c, iota, -1)),
                            along, true, TT_HLO_REDUCE_MAX);
  tt_hlo_type vt = tt_lower_type(c, v);
  int64_t od[TT_MAX_RANK];
  int orank = 0;
  for (int d = 0; d < xt.rank; d++)
    if (keepdim || d != dim) od[orank++] = vt.dims[d];
  tt_lower_result(c, tt_hlo_reshape(b, tt_hlo_convert(b, v, t.dtype), orank, od));
  tt_lower_result(c, tt_hlo_reshape(b, i, orank, od));
  return NULL;
}

// --- cummax, cummin -----------------------------------------------------------------------

// _cummax_helper(self, values, indices, dim): a window over each prefix.
// PyTorch keeps the last of tied extremes: the payload is -i - 2, so the
// builder's "smaller payload wins ties" picks the largest i, and padding
// (payload -1) never wins a tie.
static tt_status cumulative_arg(tt_lower_ctx *c, bool is_max) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type xt = tt_lower_type(c, x);
  int64_t dim;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 3), xt.rank ? xt.rank : 1, &dim));
  tt_hlo_type it = xt;
  it.dtype = TT_I64;
  if (xt.rank == 0 || tt_hlo_numel(&xt) == 0) {
    tt_lower_result(c, x);
    tt_lower_result(c, tt_hlo_splat_i(b, &it, 0));
    return NULL;
  }
  tt_hv sx = xt.dtype == TT_BOOL ? tt_hlo_convert(b, x, TT_U8) : x;
  tt_hv pay = tt_hlo_iota(b, &it, dim);
  pay = tt_lower_bin(c, TT_HLO_SUB, tt_lower_splat_like(c, pay, -2), pay);
  tt_hlo_window w = tt_hlo_window_identity(xt.rank);
  w.dims[dim] = xt.dims[dim];
  w.pad_lo[dim] = xt.dims[dim] - 1;
  tt_hv v, i;
  tt_hlo_argreduce_window(b, sx, pay, &w, is_max, &v, &i);
  i = tt_lower_bin(c, TT_HLO_SUB, tt_lower_splat_like(c, i, -2), i);
  tt_lower_result(c, tt_hlo_convert(b, v, xt.dtype));
  tt_lower_result(c, i);
  return NULL;
}

static tt_status lower_cummax(tt_lower_ctx *c) { return cumulative_arg(c, true); }
static tt_status lower_cummin(tt_lower_ctx *c) { return cumulative_arg(c, false); }

// --- linalg_cross, _cdist_forward -------------------------------------------------------------

// Component j (0..2) of x along dim.
static tt_hv comp(tt_lower_ctx *c, tt_hv x, int64_t dim, int64_t j) {
  tt_hlo_type t = tt_lower_type(c, x);
  int64_t lo[TT_MAX_RANK] = {0}, hi[TT_MAX_RANK];
  memcpy(hi, t.dims, sizeof hi);
  lo[dim] = j;
  hi[dim] = j + 1;
  return tt_hlo_slice(tt_lower_hlo(c), x, lo, hi, kOnes);
}

// linalg_cross(self, other, *, dim=-1): operands broadcast; dim has size 3.
static tt_status lower_linalg_cross(tt_lower_ctx *c) {
  static const int kArgs[2] = {0, 1};
  tt_dtype d = tt_lower_result_type(c, kArgs, 2);
  tt_hv v[2];
  TT_RETURN_IF_ERROR(tt_lower_operands(c, kArgs, 2, d, v));
  tt_hlo_type t = tt_lower_type(c, v[0]);
  int64_t dim;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 2), t.rank, &dim));
  if (t.dims[dim] != 3)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "dimension %" PRId64 " does not have size 3 "
                         "(got %" PRId64 ")", dim, t.dims[dim]);
  tt_hv parts[3];
  for (int j = 0; j < 3; j++) {
    int p = (j + 1) % 3, q = (j + 2) % 3;
    parts[j] = tt_lower_bin(c, TT_HLO_SUB,
                            tt_lower_bin(c, TT_HLO_MUL, comp(c, v[0], dim, p), comp(c, v[1], dim, q)),
                            tt_lower_bin(c, TT_HLO_MUL, comp(c, v[0], dim, q), comp(c, v[1], dim, p)));
  }
  tt_lower_result(c, tt_hlo_concatenate(tt_lower_hlo(c), parts, 3, dim));
  return NULL;
}

// _cdist_forward(x1 [*, P, M], x2 [*, R, M], p, compute_mode) -> [*, P, R]:
// the p-norm of every difference. p shapes the program (0, 1, 2, inf and
// the rest differ), so scalars are part of the signature.
static tt_status lower_cdist(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t1 = tt_lower_tensor_type(c, 0, -1), t2 = tt_lower_tensor_type(c, 1, -1);
  char s1[96], s2[96];
  if (t1.rank < 2 || t2.rank < 2 || t1.dims[t1.rank - 1] != t2.dims[t2.rank - 1] ||
      t1.rank + 1 > TT_MAX_RANK || t2.rank + 1 > TT_MAX_RANK)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "x1 %s and x2 %s need rank >= 2 and the same "
                         "last dim", tt_shape_str(&t1, s1, sizeof s1),
                         tt_shape_str(&t2, s2, sizeof s2));
  const tt_value *pv = tt_lower_arg(c, 2);
  double p = pv->u.scalar.dtype == TT_F64 || tt_dtype_is_float(pv->u.scalar.dtype)
                 ? pv->u.scalar.f : (double)pv->u.scalar.i;
  if (p < 0) return tt_lower_fail(c, TT_INVALID_ARGUMENT, "p must be >= 0, got %g", p);
  int64_t d1[TT_MAX_RANK], d2[TT_MAX_RANK];
  int r1 = t1.rank + 1, r2 = t2.rank + 1;
  memcpy(d1, t1.dims, sizeof(int64_t) * (size_t)(t1.rank - 1));
  d1[t1.rank - 1] = 1;
  d1[t1.rank] = t1.dims[t1.rank - 1];
  memcpy(d2, t2.dims, sizeof(int64_t) * (size_t)t2.rank);
  d2[t2.rank] = t2.dims[t2.rank - 1];
  d2[t2.rank - 1] = t2.dims[t2.rank - 2];
  d2[t2.rank - 2] = 1;
  // x1 [*, P, 1, M] - x2 [*, 1, R, M]
  tt_hv v[2] = {tt_hlo_reshape(b, tt_lower_tensor(c, 0), r1, d1),
                tt_hlo_reshape(b, tt_lower_tensor(c, 1), r2, d2)};
  tt_dtype acc = tt_opmath(t1.dtype);
  v[0] = tt_hlo_convert(b, v[0], acc);
  v[1] = tt_hlo_convert(b, v[1], acc);
  TT_RETURN_IF_ERROR(tt_lower_broadcast(c, v, 2));
  tt_hv diff = tt_hlo_unary(b, TT_HLO_ABS, tt_lower_bin(c, TT_HLO_SUB, v[0], v[1]));
  int r = tt_lower_type(c, diff).rank;
  bool mask[TT_MAX_RANK] = {false};
  mask[r - 1] = true;
  tt_hv out;
  if (p == 0) {
    tt_hv nz = tt_hlo_compare(b, TT_HLO_NE, diff, tt_lower_splat_like(c, diff, 0));
    out = tt_lower_reduce(c, tt_hlo_convert(b, nz, acc), mask, false, TT_HLO_REDUCE_ADD);
  } else if (isinf(p)) {
    out = tt_lower_reduce(c, diff, mask, false, TT_HLO_REDUCE_MAX);
  } else if (p == 1) {
    out = tt_lower_reduce(c, diff, mask, false, TT_HLO_REDUCE_ADD);
  } else if (p == 2) {
    out = tt_hlo_unary(b, TT_HLO_SQRT, tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_MUL, diff, diff),
                                                       mask, false, TT_HLO_REDUCE_ADD));
  } else {
    tt_hv s = tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_POW, diff, tt_lower_splat_like(c, diff, p)),
                              mask, false, TT_HLO_REDUCE_ADD);
    out = tt_lower_bin(c, TT_HLO_POW, s, tt_lower_splat_like(c, s, 1.0 / p));
  }
  tt_lower_result(c, tt_hlo_convert(b, out, t1.dtype));
  return NULL;
}

// --- segment_reduce, embedding_renorm_ ---------------------------------------------------

// Without `unsafe`, ATen's checks on the segments' lengths (device-side,
// raised at the next synchronisation; the CPU reads them to the host).
static void segment_checks(tt_lower_ctx *c, tt_hv start, tt_hv end, int64_t axis, int64_t len) {
  tt_hv n = tt_lower_bin(c, TT_HLO_SUB, end, start);
  tt_lower_check(c, tt_hlo_compare(tt_lower_hlo(c), TT_HLO_LT, n, tt_lower_splat_like(c, n, 0)),
                 TT_HV_INVALID, TT_INVALID_ARGUMENT, "lengths contains negative value!", 0, 0);
  bool last[TT_MAX_RANK] = {false};
  last[axis] = true;
  tt_hv total = tt_lower_reduce(c, n, last, false, TT_HLO_REDUCE_ADD);
  tt_lower_check(c, tt_hlo_compare(tt_lower_hlo(c), TT_HLO_NE, total,
                                   tt_lower_splat_like(c, total, (double)len)),
                 TT_HV_INVALID, TT_INVALID_ARGUMENT, "segment_reduce(): Expected all rows of lengths "
                 "along axis to sum to data.size(lengths.dim()-1) when !unsafe.", 0, 0);
}

// segment_reduce(data, reduce, *, lengths, indices, offsets, axis, unsafe,
// initial): lengths [*B, S] (offsets [*B, S + 1]) cut data's dim `axis`
// (B = the dims before it) into S segments. A mask [*B, S, L] selects each
// segment's elements, which reduce from `initial` (or the identity); mean
// divides by the length, and an empty segment gives initial.
static tt_status lower_segment_reduce(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type dt = tt_lower_tensor_type(c, 0, -1);
  const tt_value *rv = tt_lower_arg(c, 1);
  const char *s = rv->kind == TT_VALUE_STRING ? rv->u.str : "";
  bool mean = !strcmp(s, "mean");
  tt_hlo_reduce_kind kind;
  if (!strcmp(s, "sum") || mean) kind = TT_HLO_REDUCE_ADD;
  else if (!strcmp(s, "prod")) kind = TT_HLO_REDUCE_MUL;
  else if (!strcmp(s, "max") || !strcmp(s, "amax")) kind = TT_HLO_REDUCE_MAX;
  else if (!strcmp(s, "min") || !strcmp(s, "amin")) kind = TT_HLO_REDUCE_MIN;
  else return tt_lower_fail(c, TT_INVALID_ARGUMENT, "reduce argument must be either sum, prod, "
                            "mean, amax or amin, got %s", s);
  bool by_len = !tt_lower_is_none(c, 2);
  int sarg = by_len ? 2 : 4;
  tt_hlo_type lt = tt_lower_tensor_type(c, sarg, -1);
  int64_t axis;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 5), dt.rank, &axis));
  bool ok = !tt_lower_is_none(c, sarg) && lt.rank == axis + 1 && dt.rank + 1 <= TT_MAX_RANK;
  for (int d = 0; ok && d < axis; d++) ok = lt.dims[d] == dt.dims[d];
  if (!ok || (dt.dtype != TT_F32 && dt.dtype != TT_F64))  // 16-bit: the CPU rounds each step
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "segment_reduce needs float32/64 data and lengths "
                         "or offsets of shape [*data.shape[:axis], S]");
  int64_t last = lt.dims[axis], nseg = by_len ? last : last - 1, len = dt.dims[axis];
  if (nseg < 1) return tt_lower_fail(c, TT_UNIMPLEMENTED, "no segments");
  tt_hv sv = tt_hlo_convert(b, tt_lower_tensor(c, sarg), TT_I64), start, end;
  if (by_len) {
    end = prefix_sum(c, sv);
    start = tt_lower_bin(c, TT_HLO_SUB, end, sv);
  } else {
    int64_t lo[TT_MAX_RANK] = {0}, hi[TT_MAX_RANK];
    memcpy(hi, lt.dims, sizeof hi);
    hi[axis] = nseg;
    start = tt_hlo_slice(b, sv, lo, hi, kOnes);
    lo[axis] = 1;
    hi[axis] = nseg + 1;
    end = tt_hlo_slice(b, sv, lo, hi, kOnes);
  }
  if (!tt_lower_bool(c, 6)) segment_checks(c, start, end, axis, len);
  // [*B, S, L] mask; the data [*B, L, *rest] broadcast to [*B, S, L, *rest].
  int64_t sl[TT_MAX_RANK], full[TT_MAX_RANK], bd[TT_MAX_RANK];
  int r = dt.rank + 1, rm = (int)axis + 2;
  for (int d = 0; d < axis; d++) sl[d] = full[d] = dt.dims[d];
  sl[axis] = full[axis] = nseg;
  sl[axis + 1] = len;
  for (int d = 0; d < dt.rank; d++) {
    bd[d] = d < axis ? d : d + 1;
    full[d + 1] = d >= axis ? dt.dims[d] : full[d + 1];
  }
  tt_hlo_type it = tt_hlo_make_type(TT_I64, rm, sl);
  tt_hv pos = tt_hlo_iota(b, &it, axis + 1);
  tt_hv in = tt_lower_bin(c, TT_HLO_AND,
      tt_hlo_compare(b, TT_HLO_GE, pos, tt_hlo_broadcast_in_dim(b, start, rm, sl, kIota)),
      tt_hlo_compare(b, TT_HLO_LT, pos, tt_hlo_broadcast_in_dim(b, end, rm, sl, kIota)));
  tt_dtype acc = tt_opmath(dt.dtype);
  tt_hv x = tt_hlo_broadcast_in_dim(b, tt_hlo_convert(b, tt_lower_tensor(c, 0), acc), r, full, bd);
  tt_hv m = tt_hlo_broadcast_in_dim(b, in, r, full, kIota);
  tt_hv ident = tt_lower_broadcast_to(c, tt_lower_reduce_init(c, acc, kind), r, full);
  bool mask[TT_MAX_RANK] = {false};
  mask[axis + 1] = true;
  tt_hv res = tt_lower_reduce(c, tt_hlo_select(b, m, x, ident), mask, false, kind);
  tt_hlo_type rt = tt_lower_type(c, res);
  tt_hv init = tt_lower_is_none(c, 7) ? tt_lower_reduce_init(c, acc, kind)
                                      : tt_lower_scalar(c, 7, acc);
  init = tt_lower_broadcast_to(c, init, rt.rank, rt.dims);
  tt_hlo_binop op = kind == TT_HLO_REDUCE_ADD ? TT_HLO_ADD : kind == TT_HLO_REDUCE_MUL
                    ? TT_HLO_MUL : kind == TT_HLO_REDUCE_MAX ? TT_HLO_MAX : TT_HLO_MIN;
  tt_hv nan_res = tt_hlo_compare(b, TT_HLO_NE, res, res);  // XLA's max/min drop NaN
  res = tt_hlo_select(b, nan_res, res, tt_lower_bin(c, op, res, init));
  if (mean) {
    tt_hv n = tt_hlo_convert(b, tt_lower_bin(c, TT_HLO_SUB, end, start), acc);
    n = tt_hlo_broadcast_in_dim(b, n, rt.rank, rt.dims, kIota);
    // an empty segment gives `initial`, or 0 / 0 (NaN) without one, as on the CPU
    tt_hv empty = tt_hlo_compare(b, TT_HLO_EQ, n, tt_lower_splat_like(c, n, 0));
    tt_hv q = tt_lower_bin(c, TT_HLO_DIV, res, n);
    res = tt_lower_is_none(c, 7) ? q : tt_hlo_select(b, empty, init, q);
  }
  tt_lower_result(c, tt_hlo_convert(b, res, dt.dtype));
  return NULL;
}

// embedding_renorm_(self [V, D], indices, max_norm, norm_type): rows named
// by indices whose norm exceeds max_norm scale to max_norm / (norm + 1e-7).
static tt_status lower_embedding_renorm(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type wt = tt_lower_tensor_type(c, 0, -1), it = tt_lower_tensor_type(c, 1, -1);
  if (wt.rank != 2 || !tt_dtype_is_int(it.dtype) || !tt_dtype_is_float(wt.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a 2-d float weight and integer "
                         "indices, got %s weight of rank %d", tt_dtype_name(wt.dtype),
                         (int)wt.rank);
  tt_hlo_type vt = tt_hlo_make_type(TT_BOOL, 1, wt.dims);
  tt_hv touched = tt_hlo_splat(b, &vt, 0);
  int64_t k = tt_hlo_numel(&it), two[2] = {k, 1};
  if (k > 0) {
    tt_hv idx = tt_hlo_reshape(b, tt_lower_wrap_index(c, flat(c, tt_lower_tensor(c, 1)), wt.dims[0]), 2, two);
    tt_hlo_type ut = tt_hlo_make_type(TT_BOOL, 1, &k);
    touched = tt_lower_scatter_at(c, touched, idx, tt_hlo_splat(b, &ut, 1), -1);
  }
  tt_dtype acc = tt_opmath(wt.dtype);
  tt_hv w = tt_hlo_convert(b, tt_lower_tensor(c, 0), acc);
  tt_hv p = tt_lower_broadcast_to(c, tt_lower_scalar(c, 3, acc), 2, wt.dims);
  bool mask[TT_MAX_RANK] = {false, true};
  tt_hv norm = tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_POW, tt_hlo_unary(b, TT_HLO_ABS, w), p),
                               mask, true, TT_HLO_REDUCE_ADD);
  tt_hlo_type nt = tt_lower_type(c, norm);
  norm = tt_lower_bin(c, TT_HLO_POW, norm, tt_lower_bin(c, TT_HLO_DIV, tt_lower_splat_like(c, norm, 1),
                      tt_lower_broadcast_to(c, tt_lower_scalar(c, 3, acc), nt.rank, nt.dims)));
  tt_hv maxn = tt_lower_broadcast_to(c, tt_lower_scalar(c, 2, acc), nt.rank, nt.dims);
  tt_hv scale = tt_lower_bin(c, TT_HLO_DIV, maxn,
                             tt_lower_bin(c, TT_HLO_ADD, norm, tt_lower_splat_like(c, norm, 1e-7)));
  tt_hv big = tt_lower_bin(c, TT_HLO_AND, tt_hlo_compare(b, TT_HLO_GT, norm, maxn),
                           tt_hlo_reshape(b, touched, 2, nt.dims));
  scale = tt_hlo_select(b, big, scale, tt_lower_splat_like(c, scale, 1));
  w = tt_lower_bin(c, TT_HLO_MUL, w, tt_lower_expand_like(c, scale, w));
  tt_lower_result(c, tt_hlo_convert(b, w, wt.dtype));
  return NULL;
}

// --- samplers ---------------------------------------------------------------------------------

// Uniform [0, 1) in f32 (23 random mantissa bits) or f64 (52), shaped dims:
// the top mantissa-many bits under the exponent of 1.0 give [1, 2), minus 1.
static tt_hv uniform01(tt_lower_ctx *c, int gen_arg, tt_dtype d, int rank, const int64_t *dims) {
  tt_hlo *b = tt_lower_hlo(c);
  bool wide = d == TT_F64;
  tt_hlo_type ut = tt_hlo_make_type(wide ? TT_U64 : TT_U32, rank, dims);
  tt_hv state = tt_lower_rng_state(c, gen_arg, (uint64_t)tt_hlo_numel(&ut));
  tt_hv u = tt_hlo_rng_bits(b, state, &ut);
  tt_hv one_bits = tt_hlo_splat_i(b, &ut, wide ? INT64_C(0x3FF0000000000000) : 0x3F800000);
  tt_hv m = tt_lower_bin(c, TT_HLO_OR, tt_lower_bin(c, TT_HLO_SHR_L, u,
                                                    tt_lower_splat_like(c, u, wide ? 12 : 9)),
                         one_bits);
  tt_hv f = tt_hlo_bitcast(b, m, wide ? TT_F64 : TT_F32);
  return tt_lower_bin(c, TT_HLO_SUB, f, tt_lower_splat_like(c, f, 1));
}

// Standard normal numbers (Box–Muller on two uniform draws per element).
static tt_hv normal01(tt_lower_ctx *c, int gen_arg, tt_dtype d, int rank, const int64_t *dims) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_hlo_make_type(d, rank, dims);
  int64_t n = tt_hlo_numel(&t), two[2] = {2, n};
  tt_hv u = uniform01(c, gen_arg, d, 2, two);
  int64_t s0[2] = {0, 0}, s1[2] = {1, 0}, l0[2] = {1, n}, l1[2] = {2, n}, st[2] = {1, 1};
  tt_hv u1 = tt_hlo_reshape(b, tt_hlo_slice(b, u, s0, l0, st), rank, dims);
  tt_hv u2 = tt_hlo_reshape(b, tt_hlo_slice(b, u, s1, l1, st), rank, dims);
  tt_hv lg = tt_hlo_unary(b, TT_HLO_LOG, tt_lower_bin(c, TT_HLO_SUB, tt_lower_splat_like(c, u1, 1), u1));
  tt_hv r = tt_hlo_unary(b, TT_HLO_SQRT, tt_lower_bin(c, TT_HLO_MUL, tt_lower_splat_like(c, u1, -2), lg));
  tt_hv ang = tt_lower_bin(c, TT_HLO_MUL, tt_lower_splat_like(c, u2, 6.28318530717958647692), u2);
  return tt_lower_bin(c, TT_HLO_MUL, r, tt_hlo_unary(b, TT_HLO_COS, ang));
}

// The tensor the sampler fills: the destination (in-place) or self.
static tt_hlo_type target_type(const tt_lower_ctx *c) {
  tt_hlo_type t;
  if (!tt_lower_dest_type(c, 0, &t)) t = tt_lower_tensor_type(c, 0, -1);
  return t;
}

static tt_dtype sample_dtype(tt_dtype d) { return d == TT_F64 ? TT_F64 : TT_F32; }

// Float argument i (default `dflt` when None) as a 0-d value broadcast to t.
static tt_hv param(tt_lower_ctx *c, int i, double dflt, tt_dtype d, const tt_hlo_type *t) {
  tt_hv v = tt_lower_is_none(c, i) ? tt_hlo_const(tt_lower_hlo(c), d, dflt)
                                   : tt_lower_scalar(c, i, d);
  return tt_lower_broadcast_to(c, v, t->rank, t->dims);
}

static tt_status need_float(const tt_lower_ctx *c, tt_dtype d) {
  if (tt_dtype_is_float(d)) return NULL;
  return tt_lower_fail(c, TT_UNIMPLEMENTED, "sampling a %s tensor", tt_dtype_name(d));
}

// cauchy_(self, median=0, sigma=1, *, generator): median + sigma tan(pi (u - 1/2)).
static tt_status lower_cauchy(tt_lower_ctx *c) {
  tt_hlo_type t = target_type(c);
  TT_RETURN_IF_ERROR(need_float(c, t.dtype));
  tt_dtype sd = sample_dtype(t.dtype);
  tt_hv u = uniform01(c, 3, sd, t.rank, t.dims);
  tt_hv a = tt_lower_bin(c, TT_HLO_MUL, tt_lower_splat_like(c, u, M_PI),
                         tt_lower_bin(c, TT_HLO_SUB, u, tt_lower_splat_like(c, u, 0.5)));
  tt_hv r = tt_lower_bin(c, TT_HLO_ADD, param(c, 1, 0, sd, &t),
                         tt_lower_bin(c, TT_HLO_MUL, param(c, 2, 1, sd, &t),
                                      tt_hlo_unary(tt_lower_hlo(c), TT_HLO_TAN, a)));
  tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), r, t.dtype));
  return NULL;
}

// exponential_(self, lambd=1, *, generator): -log(1 - u) / lambd.
static tt_status lower_exponential(tt_lower_ctx *c) {
  tt_hlo_type t = target_type(c);
  TT_RETURN_IF_ERROR(need_float(c, t.dtype));
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype sd = sample_dtype(t.dtype);
  tt_hv u = uniform01(c, 2, sd, t.rank, t.dims);
  tt_hv e = tt_hlo_unary(b, TT_HLO_NEG, tt_hlo_unary(b, TT_HLO_LOG1P, tt_hlo_unary(b, TT_HLO_NEG, u)));
  tt_lower_result(c, tt_hlo_convert(b, tt_lower_bin(c, TT_HLO_DIV, e, param(c, 1, 1, sd, &t)),
                                    t.dtype));
  return NULL;
}

// geometric_(self, p, *, generator): trials to the first success,
// ceil(log(1 - u) / log(1 - p)), at least 1.
static tt_status lower_geometric(tt_lower_ctx *c) {
  tt_hlo_type t = target_type(c);
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype sd = sample_dtype(t.dtype);
  tt_hv u = uniform01(c, 2, sd, t.rank, t.dims);
  tt_hv num = tt_hlo_unary(b, TT_HLO_LOG1P, tt_hlo_unary(b, TT_HLO_NEG, u));
  tt_hv den = tt_hlo_unary(b, TT_HLO_LOG1P, tt_hlo_unary(b, TT_HLO_NEG, param(c, 1, 0.5, sd, &t)));
  tt_hv g = tt_hlo_unary(b, TT_HLO_CEIL, tt_lower_bin(c, TT_HLO_DIV, num, den));
  g = tt_lower_bin(c, TT_HLO_MAX, g, tt_lower_splat_like(c, g, 1));
  tt_lower_result(c, tt_hlo_convert(b, g, t.dtype));
  return NULL;
}

// log_normal_(self, mean=1, std=2, *, generator): exp(mean + std z).
static tt_status lower_log_normal(tt_lower_ctx *c) {
  tt_hlo_type t = target_type(c);
  TT_RETURN_IF_ERROR(need_float(c, t.dtype));
  tt_dtype sd = sample_dtype(t.dtype);
  tt_hv z = normal01(c, 3, sd, t.rank, t.dims);
  z = tt_lower_bin(c, TT_HLO_ADD, param(c, 1, 1, sd, &t),
                   tt_lower_bin(c, TT_HLO_MUL, param(c, 2, 2, sd, &t), z));
  tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), tt_hlo_unary(tt_lower_hlo(c), TT_HLO_EXP, z),
                                    t.dtype));
  return NULL;
}

// normal.Tensor_float / float_Tensor / Tensor_Tensor(mean, std, *, generator):
// mean + std z over the broadcast shape, in the tensors' float dtype.
static tt_status lower_normal_tensor(tt_lower_ctx *c) {
  static const int kArgs[2] = {0, 1};
  tt_hlo_type dest;
  tt_dtype d = tt_lower_result_type(c, kArgs, 2);
  if (tt_lower_dest_type(c, 0, &dest)) d = dest.dtype;
  TT_RETURN_IF_ERROR(need_float(c, d));
  tt_dtype sd = sample_dtype(d);
  tt_hv v[2];
  TT_RETURN_IF_ERROR(tt_lower_operands(c, kArgs, 2, sd, v));
  if (tt_lower_arg(c, 1)->kind == TT_VALUE_TENSOR)  // float std: check_normal_std
    tt_lower_check(c, tt_hlo_compare(tt_lower_hlo(c), TT_HLO_LT, v[1], tt_lower_splat_like(c, v[1], 0)),
                   TT_HV_INVALID, TT_INVALID_ARGUMENT,
                   "normal expects all elements of std >= 0.0", 0, 0);
  tt_hlo_type t = tt_lower_type(c, v[0]);
  tt_hv z = normal01(c, 2, sd, t.rank, t.dims);
  z = tt_lower_bin(c, TT_HLO_ADD, v[0], tt_lower_bin(c, TT_HLO_MUL, v[1], z));
  tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), z, d));
  return NULL;
}

// The samplers' parameter checks, PyTorch's texts (each call: the values are
// runtime arguments).
static tt_status check_cauchy(const tt_op_call *call) {
  return tt_call_check_range(call, 2, 0, true, INFINITY, false,
                             "cauchy_ expects sigma > 0.0, but found sigma=%g");
}
static tt_status check_exponential(const tt_op_call *call) {
  return tt_call_check_range(call, 1, 0, true, INFINITY, false,
                             "exponential_ expects lambda > 0.0, but found lambda=%g");
}
static tt_status check_log_normal(const tt_op_call *call) {
  return tt_call_check_range(call, 2, 0, true, INFINITY, false,
                             "log_normal_ expects std > 0.0, but found std=%g");
}
static tt_status check_geometric(const tt_op_call *call) {
  return tt_call_check_range(call, 1, 0, true, 1, true,
                             "geometric_ expects p to be in (0, 1), but got p=%g");
}
// normal.Tensor_float(mean, std): a float std (a tensor std is checked on
// the device, in the lowering).
static tt_status check_normal_std(const tt_op_call *call) {
  return tt_call_check_range(call, 1, 0, false, INFINITY, false,
                             "normal expects std >= 0.0, but found std %g");
}

// multinomial(self [C] or [R, C], num_samples, replacement, *, generator):
// with replacement by inverse CDF (the count of prefix sums <= u * total),
// without by Gumbel top-k (the largest log p - log(-log u)).
static tt_status lower_multinomial(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type pt = tt_lower_tensor_type(c, 0, -1);
  int64_t n = tt_lower_int(c, 1);
  bool repl = !tt_lower_is_none(c, 2) && tt_lower_bool(c, 2);
  if (pt.rank < 1 || pt.rank > 2 || !tt_dtype_is_float(pt.dtype) || n <= 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "prob_dist must be a 1 or 2 dim float tensor "
                         "and num_samples positive (got rank %d, %" PRId64 " samples)",
                         (int)pt.rank, n);
  int64_t ncat = pt.dims[pt.rank - 1], rows = pt.rank == 2 ? pt.dims[0] : 1;
  if (!repl && n > ncat)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "cannot sample n_sample > prob_dist.size(-1) "
                         "samples without replacement (%" PRId64 " > %" PRId64 ")", n, ncat);
  tt_dtype sd = sample_dtype(pt.dtype);
  int64_t pd[2] = {rows, ncat}, od[2] = {rows, n}, out_dims[2] = {pt.rank == 2 ? rows : n, n};
  tt_hv p = tt_hlo_reshape(b, tt_hlo_convert(b, tt_lower_tensor(c, 0), sd), 2, pd);
  tt_hv idx;
  if (repl) {
    tt_hlo_window w = tt_hlo_window_identity(2);
    w.dims[1] = ncat;
    w.pad_lo[1] = ncat - 1;
    tt_hv cdf = tt_hlo_reduce_window(b, p, tt_hlo_const(b, sd, 0), &w, TT_HLO_REDUCE_ADD);
    int64_t lo[2] = {0, ncat - 1}, hi[2] = {rows, ncat}, keep0[1] = {0};
    int64_t r1[1] = {rows};
    tt_hv total = tt_hlo_reshape(b, tt_hlo_slice(b, cdf, lo, hi, kOnes), 1, r1);
    tt_hv u = uniform01(c, 3, sd, 2, od);
    u = tt_lower_bin(c, TT_HLO_MUL, u, tt_hlo_broadcast_in_dim(b, total, 2, od, keep0));
    int64_t d3[3] = {rows, n, ncat}, bu[2] = {0, 1}, bc[2] = {0, 2};
    tt_hv le = tt_hlo_compare(b, TT_HLO_LE, tt_hlo_broadcast_in_dim(b, cdf, 3, d3, bc),
                              tt_hlo_broadcast_in_dim(b, u, 3, d3, bu));
    bool mask[TT_MAX_RANK] = {false, false, true};
    idx = tt_lower_reduce(c, tt_hlo_convert(b, le, TT_I64), mask, false, TT_HLO_REDUCE_ADD);
    idx = tt_hlo_clamp(b, tt_hlo_const_i(b, TT_I64, 0), idx, tt_hlo_const_i(b, TT_I64, ncat - 1));
  } else {
    tt_hv u = uniform01(c, 3, sd, 2, pd);
    tt_hv g = tt_hlo_unary(b, TT_HLO_NEG, tt_hlo_unary(b, TT_HLO_LOG,
                           tt_hlo_unary(b, TT_HLO_NEG, tt_hlo_unary(b, TT_HLO_LOG, u))));
    tt_hv key = tt_lower_bin(c, TT_HLO_ADD, tt_hlo_unary(b, TT_HLO_LOG, p), g);
    tt_hlo_type it = tt_hlo_make_type(TT_I64, 2, pd);
    tt_hv vals;
    tt_hlo_sort(b, key, tt_hlo_iota(b, &it, 1), 1, true, &vals, &idx);
    int64_t lo[2] = {0, 0};
    idx = tt_hlo_slice(b, idx, lo, od, kOnes);
  }
  tt_lower_result(c, tt_hlo_reshape(b, idx, pt.rank, out_dims));
  return NULL;
}

// histc(self, bins, min, max): counts in `bins` equal bins over [min, max]
// (the data's range when min == max, widened by 1 each side if still
// equal); max falls in the last bin, values outside are dropped. Integer
// inputs follow CUDA (the CPU has no integer histc): min and max truncate
// to the input's dtype, the bin is (x - min) * bins / (max - min) in int64
// arithmetic, and the counts have the input's dtype.
static tt_status lower_histc(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  int64_t bins = tt_lower_is_none(c, 1) ? 100 : tt_lower_int(c, 1);
  bool integral = tt_dtype_is_int(xt.dtype);
  if (bins <= 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.histogram(): bins must be > 0, but "
                         "got %" PRId64 " for dimension 0", bins);
  if (!integral && !tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "histc of %s (PyTorch takes floating inputs, "
                         "and integer ones on CUDA)", tt_dtype_name(xt.dtype));
  if (!integral && xt.dtype != TT_F32 && xt.dtype != TT_F64)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "histc of %s (the CPU rounds each step of the bin "
                         "position)", tt_dtype_name(xt.dtype));
  int64_t n = tt_hlo_numel(&xt);
  tt_dtype d = integral ? TT_I64 : xt.dtype;  // the arithmetic's dtype
  tt_hlo_type ht = tt_hlo_make_type(xt.dtype, 1, &bins);
  if (n == 0) {
    tt_lower_result(c, tt_hlo_splat(b, &ht, 0));
    return NULL;
  }
  tt_hv x = flat(c, tt_lower_tensor(c, 0));
  if (integral) x = tt_hlo_convert(b, x, d);
  tt_hv lo = tt_lower_is_none(c, 2) ? tt_hlo_const(b, d, 0) : tt_lower_scalar(c, 2, xt.dtype);
  tt_hv hi = tt_lower_is_none(c, 3) ? tt_hlo_const(b, d, 0) : tt_lower_scalar(c, 3, xt.dtype);
  if (integral) {
    lo = tt_hlo_convert(b, lo, d);
    hi = tt_hlo_convert(b, hi, d);
  }
  bool all[1] = {true};
  tt_hv same = tt_hlo_compare(b, TT_HLO_EQ, lo, hi);
  lo = tt_hlo_select(b, same, tt_lower_reduce(c, x, all, false, TT_HLO_REDUCE_MIN), lo);
  hi = tt_hlo_select(b, same, tt_lower_reduce(c, x, all, false, TT_HLO_REDUCE_MAX), hi);
  same = tt_hlo_compare(b, TT_HLO_EQ, lo, hi);
  lo = tt_hlo_select(b, same, tt_lower_bin(c, TT_HLO_SUB, lo, tt_hlo_const(b, d, 1)), lo);
  hi = tt_hlo_select(b, same, tt_lower_bin(c, TT_HLO_ADD, hi, tt_hlo_const(b, d, 1)), hi);
  if (!integral) {  // PyTorch refuses an infinite or NaN range; its values stay on the device
    tt_hv fin = tt_lower_bin(c, TT_HLO_AND, tt_hlo_unary(b, TT_HLO_IS_FINITE, lo),
                             tt_hlo_unary(b, TT_HLO_IS_FINITE, hi));
    tt_lower_check(c, tt_hlo_unary(b, TT_HLO_NOT, fin), TT_HV_INVALID, TT_INVALID_ARGUMENT,
                   "torch.histc: range of [min, max] is not finite", 0, 0);
  }
  tt_hv lob = tt_lower_expand_like(c, lo, x), hib = tt_lower_expand_like(c, hi, x);
  tt_hv pos = tt_lower_bin(c, TT_HLO_DIV, tt_lower_bin(c, TT_HLO_MUL,
                           tt_lower_bin(c, TT_HLO_SUB, x, lob), tt_lower_splat_like(c, x, (double)bins)),
                           tt_lower_bin(c, TT_HLO_SUB, hib, lob));
  // Integer division truncates, which is floor for the values kept (x >= min).
  tt_hv bin = integral ? pos : tt_hlo_convert(b, tt_hlo_unary(b, TT_HLO_FLOOR, pos), TT_I64);
  bin = tt_hlo_clamp(b, tt_hlo_const_i(b, TT_I64, 0), bin, tt_hlo_const_i(b, TT_I64, bins - 1));
  tt_hv inside = tt_lower_bin(c, TT_HLO_AND, tt_hlo_compare(b, TT_HLO_GE, x, lob),
                              tt_hlo_compare(b, TT_HLO_LE, x, hib));
  tt_hv w = tt_hlo_convert(b, inside, xt.dtype);
  int64_t two[2] = {n, 1};
  tt_hv out = tt_lower_scatter_at(c, tt_hlo_splat(b, &ht, 0), tt_hlo_reshape(b, bin, 2, two), w,
                           TT_HLO_REDUCE_ADD);
  tt_lower_result(c, out);
  return NULL;
}

// --- the table --------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
static const tt_rule kRules[] = {
    R("index_copy", lower_index_copy), R("index_copy_", lower_index_copy),
    R("index_copy.out", lower_index_copy),
    R("index_reduce", lower_index_reduce), R("index_reduce_", lower_index_reduce),
    R("index_reduce.out", lower_index_reduce),
    R("take", lower_take), R("take.out", lower_take),
    R("put_", lower_put), R("put", lower_put),
    R("masked_scatter_", lower_masked_scatter), R("masked_scatter", lower_masked_scatter),
    R("nonzero_static", lower_nonzero_static), R("nonzero_static.out", lower_nonzero_static),
    R("kthvalue", lower_kthvalue), R("kthvalue.values", lower_kthvalue),
    R("median", lower_median), R("median.dim", lower_median_dim),
    R("median.dim_values", lower_median_dim),
    R("nanmedian", lower_nanmedian), R("nanmedian.dim", lower_nanmedian_dim),
    R("nanmedian.dim_values", lower_nanmedian_dim),
    R("segment_reduce", lower_segment_reduce), R("embedding_renorm_", lower_embedding_renorm),
    R("multinomial", lower_multinomial), R("multinomial.out", lower_multinomial),
    R("histc", lower_histc), R("histc.out", lower_histc),
    R("mode", lower_mode),
    // mode.values is CompositeExplicitAutograd and refuses devices other than
    // CPU, CUDA and XPU before it calls mode: take it over.
    {"aten::mode.values", lower_mode, TT_RULE_REPLACES_COMPOSITE},
    R("_cummax_helper", lower_cummax), R("_cummin_helper", lower_cummin),
    R("linalg_cross", lower_linalg_cross), R("linalg_cross.out", lower_linalg_cross),
    {"aten::_cdist_forward", lower_cdist, TT_RULE_SCALARS_IN_SIGNATURE},
    R("cauchy_", lower_cauchy), R("cauchy", lower_cauchy),
    R("exponential_", lower_exponential), R("exponential", lower_exponential),
    R("geometric_", lower_geometric), R("geometric", lower_geometric),
    R("log_normal_", lower_log_normal), R("log_normal", lower_log_normal),
    R("normal.Tensor_float", lower_normal_tensor), R("normal.float_Tensor", lower_normal_tensor),
    R("normal.Tensor_Tensor", lower_normal_tensor),
    R("normal.Tensor_float_out", lower_normal_tensor),
    R("normal.float_Tensor_out", lower_normal_tensor),
    R("normal.Tensor_Tensor_out", lower_normal_tensor),
};
#undef R

const tt_rule_table tt_rules_select = {kRules, (int)(sizeof kRules / sizeof kRules[0])};

static const tt_rule_check kChecks[] = {
    {"aten::cauchy_", check_cauchy},
    {"aten::cauchy", check_cauchy},
    {"aten::exponential_", check_exponential},
    {"aten::exponential", check_exponential},
    {"aten::geometric_", check_geometric},
    {"aten::geometric", check_geometric},
    {"aten::log_normal_", check_log_normal},
    {"aten::log_normal", check_log_normal},
    {"aten::normal.Tensor_float", check_normal_std},
    {"aten::normal.Tensor_float_out", check_normal_std},
};
const tt_rule_checks tt_checks_select = {kChecks, (int)(sizeof kChecks / sizeof kChecks[0])};
