// index.c — data-indexed ops: gather, scatter (src / value, add / multiply),
// scatter_add, scatter_reduce (sum, prod, mean, amax, amin, include_self),
// advanced indexing (index.Tensor with Tensor?[] lists, None entries and
// broadcasting index tensors) and index_put (accumulate or overwrite),
// sort (stable, descending), topk, and cumsum / cumprod.
//
// gather/scatter address every element with full coordinates (iotas for the
// other dims). Advanced indexing moves the indexed dims to the front, does
// one gather/scatter with the broadcast index tuple, and moves the result
// dims where PyTorch puts them (in place of adjacent indexed dims, else
// first). Negative indices wrap.
//
// Leaves out: boolean/uint8 index tensors (but index_put with one bool mask
// and values of a known shape: a select) and nonzero / masked_select /
// unique (their result sizes depend on the data: they run on the CPU, which
// syncs; nonzero_static, whose size is given, is in select.c), integer
// scatter_reduce "mean", repeat_interleave. Index values are checked on the
// device (tt_lower_check_index), raising at the next synchronisation.
#include <stdio.h>
#include <inttypes.h>
#include <string.h>

#include "lower/lower.h"

static const int64_t kIota[TT_MAX_RANK] = {0, 1, 2, 3, 4, 5, 6, 7};
static const int64_t kOnes[TT_MAX_RANK] = {1, 1, 1, 1, 1, 1, 1, 1};

// idx (integer) as i64 with negative values wrapped by `size`.
static tt_hv wrap_index(tt_lower_ctx *c, tt_hv idx, int64_t size) {
  tt_hlo *b = tt_lower_hlo(c);
  idx = tt_hlo_convert(b, idx, TT_I64);
  tt_hv neg = tt_hlo_compare(b, TT_HLO_LT, idx, tt_lower_splat_like(c, idx, 0));
  return tt_hlo_select(b, neg, tt_hlo_binary(b, TT_HLO_ADD, idx, tt_lower_splat_like(c, idx, (double)size)), idx);
}

// Full coordinates [*index.shape, rank] for gather/scatter along `dim`.
static tt_hv coords(tt_lower_ctx *c, tt_hv index, int64_t dim, int64_t size) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type it = tt_lower_type(c, index);
  int r = it.rank;
  int64_t cd[TT_MAX_RANK + 1];
  memcpy(cd, it.dims, sizeof(int64_t) * (size_t)r);
  cd[r] = 1;
  tt_hv parts[TT_MAX_RANK];
  tt_hlo_type i64 = tt_hlo_make_type(TT_I64, r, it.dims);
  tt_lower_check_index(c, index, size, false, TT_INVALID_ARGUMENT,
                       "index {} is out of bounds for dimension {} with size {}", dim, size);
  for (int d = 0; d < r; d++) {
    tt_hv v = d == dim ? wrap_index(c, index, size) : tt_hlo_iota(b, &i64, d);
    parts[d] = tt_hlo_reshape(b, v, r + 1, cd);
  }
  return tt_hlo_concatenate(b, parts, r, r);
}

// PyTorch's ensure_nonempty_dim / ensure_nonempty_size: a 0-d tensor counts as [1].
static int nonempty_rank(const tt_hlo_type *t) { return t->rank ? t->rank : 1; }
static int64_t nonempty_size(const tt_hlo_type *t, int d) { return t->rank ? t->dims[d] : 1; }

// PyTorch's gather/scatter checks, in its order and with its texts
// (scatter_gather_dtype_check, gather_shape_check, scatter_shape_check): an
// empty index skips all but the src dtype check. st: src's type, NULL when
// there is no src tensor.
static tt_status check_index(tt_lower_ctx *c, const tt_hlo_type *xt, const tt_hlo_type *it,
                             const tt_hlo_type *st, int64_t dim, bool gather) {
  char s1[96], s2[96], s3[96];
  const char *fn = gather ? "gather" : "scatter";
  bool empty = tt_hlo_numel(it) == 0;
  if (!empty && it->dtype != TT_I64 && it->dtype != TT_I32)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s(): Expected dtype int32/int64 for index", fn);
  if (st && st->dtype != xt->dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s(): Expected self.dtype to be equal to "
                         "src.dtype", fn);
  if (empty) return NULL;
  int r = nonempty_rank(xt);
  if (r != nonempty_rank(it))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Index tensor must have the same number of "
                         "dimensions as %s tensor", gather ? "input" : "self");
  bool wrong = false;
  for (int d = 0; d < r && !wrong; d++) {
    wrong = d != dim && nonempty_size(it, d) > nonempty_size(xt, d);
    if (gather && wrong)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Size does not match at dimension %d expected "
                           "index %s to be no larger than self %s apart from dimension %" PRId64,
                           d, tt_shape_str(it, s1, sizeof s1), tt_shape_str(xt, s2, sizeof s2), dim);
  }
  for (int d = 0; st && !wrong && d < r; d++) {
    if (st->rank > 0 && d >= st->rank)  // src.size(d) past src's dims: PyTorch's IndexError
      return tt_lower_fail(c, TT_OUT_OF_RANGE, "Dimension out of range (expected to be in range "
                           "of [%d, %d], but got %d)", -st->rank, st->rank - 1, d);
    wrong = nonempty_size(it, d) > nonempty_size(st, d);
  }
  if (wrong)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected index %s to be no larger than self %s "
                         "apart from dimension %" PRId64 "%s%s", tt_shape_str(it, s1, sizeof s1),
                         tt_shape_str(xt, s2, sizeof s2), dim,
                         st ? " and to be no larger size than src " : "",
                         st ? tt_shape_str(st, s3, sizeof s3) : "");
  if (st && nonempty_rank(st) != nonempty_rank(it))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Index tensor must have the same number of "
                         "dimensions as src tensor");
  return NULL;
}

// self (rank >= 1 view of arg 0), wrapped dim (arg 1), index (arg 2), after
// the checks above (src: arg 3 when it is a tensor and src_arg is set).
// *empty: the index has no elements (the op reads and writes nothing).
static tt_status gs_prepare(tt_lower_ctx *c, bool gather, tt_hv *x, int64_t *dim, tt_hv *index,
                            bool *empty) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1), it = tt_lower_tensor_type(c, 2, -1), st;
  const tt_value *sv = gather ? NULL : tt_lower_arg(c, 3);
  bool has_src = sv && sv->kind == TT_VALUE_TENSOR && sv->u.tensor.storage;
  if (has_src) st = tt_lower_tensor_type(c, 3, -1);
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 1), xt.rank, dim));
  TT_RETURN_IF_ERROR(check_index(c, &xt, &it, has_src ? &st : NULL, *dim, gather));
  *empty = tt_hlo_numel(&it) == 0;
  *x = tt_lower_tensor(c, 0);
  *index = tt_lower_tensor(c, 2);
  if (xt.rank == 0) *x = tt_hlo_reshape(b, *x, 1, kOnes);
  if (it.rank == 0) *index = tt_hlo_reshape(b, *index, 1, kOnes);
  return NULL;
}

// --- gather -------------------------------------------------------------------------------

// gather(self, dim, index, *, sparse_grad)
static tt_status lower_gather(tt_lower_ctx *c) {
  tt_hv x, index;
  int64_t dim;
  bool empty;
  TT_RETURN_IF_ERROR(gs_prepare(c, true, &x, &dim, &index, &empty));
  tt_hlo_type xt = tt_lower_type(c, x), it = tt_lower_tensor_type(c, 2, -1);
  if (empty) {  // PyTorch skips its shape checks: the result is index's (empty) shape
    tt_hlo_type rt = tt_hlo_make_type(xt.dtype, it.rank, it.dims);
    tt_lower_result(c, tt_hlo_splat(tt_lower_hlo(c), &rt, 0));
    return NULL;
  }
  int r = xt.rank;
  tt_hlo_gather_dims gd = {.collapsed_slice_dims = kIota, .n_collapsed = r,
                           .start_index_map = kIota, .n_start_index_map = r,
                           .index_vector_dim = r};
  tt_hv out = tt_hlo_gather(tt_lower_hlo(c), x, coords(c, index, dim, xt.dims[dim]), &gd, kOnes, NULL);
  tt_lower_result(c, tt_hlo_reshape(tt_lower_hlo(c), out, it.rank, it.dims));
  return NULL;
}

// --- scatter ------------------------------------------------------------------------------

// Updates of index's shape: src (arg 3) sliced to it, or the Scalar value.
static tt_status updates(tt_lower_ctx *c, tt_hv index, tt_dtype d, tt_hv *out) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type it = tt_lower_type(c, index);
  const tt_value *v = tt_lower_arg(c, 3);
  if (v->kind == TT_VALUE_TENSOR && v->u.tensor.storage && v->u.tensor.ndim > 0) {
    tt_hv src = tt_hlo_convert(b, tt_lower_tensor(c, 3), d);
    tt_hlo_type st = tt_lower_type(c, src);
    if (st.rank != it.rank) {
      char s1[96], s2[96];
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "src %s and index %s ranks differ",
                           tt_shape_str(&st, s1, sizeof s1), tt_shape_str(&it, s2, sizeof s2));
    }
    int64_t zero[TT_MAX_RANK] = {0};
    *out = tt_hlo_slice(b, src, zero, it.dims, kOnes);
    return NULL;
  }
  *out = tt_lower_broadcast_to(c, tt_lower_operand(c, 3, d), it.rank, it.dims);
  return NULL;
}

static tt_status reduce_kind(tt_lower_ctx *c, const char *s, int *kind, bool *mean) {
  *mean = false;
  if (!strcmp(s, "add") || !strcmp(s, "sum")) *kind = TT_HLO_REDUCE_ADD;
  else if (!strcmp(s, "multiply") || !strcmp(s, "prod")) *kind = TT_HLO_REDUCE_MUL;
  else if (!strcmp(s, "amax")) *kind = TT_HLO_REDUCE_MAX;
  else if (!strcmp(s, "amin")) *kind = TT_HLO_REDUCE_MIN;
  else if (!strcmp(s, "mean")) { *kind = TT_HLO_REDUCE_ADD; *mean = true; }
  else return tt_lower_fail(c, TT_INVALID_ARGUMENT, "reduce argument must be one of sum, prod, "
                            "mean, amax, amin (or add, multiply), got '%s'", s);
  return NULL;
}

// scatter.src / .value / .reduce / .value_reduce, scatter_add, scatter_reduce.two:
// (self, dim, index, src|value[, reduce[, include_self]]).
static tt_status scatter_like(tt_lower_ctx *c, int kind, int reduce_arg, bool with_self_arg) {
  tt_hv x, index;
  int64_t dim;
  bool empty;
  TT_RETURN_IF_ERROR(gs_prepare(c, false, &x, &dim, &index, &empty));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1), rt = tt_lower_type(c, x);
  bool mean = false, include_self = true;
  const tt_value *rv = tt_lower_arg(c, reduce_arg);
  if (reduce_arg >= 0 && rv->kind == TT_VALUE_STRING)
    TT_RETURN_IF_ERROR(reduce_kind(c, rv->u.str, &kind, &mean));
  if (empty) {  // nothing scattered: self unchanged
    tt_lower_result(c, tt_lower_tensor(c, 0));
    return NULL;
  }
  if (with_self_arg) include_self = tt_lower_is_none(c, 5) || tt_lower_bool(c, 5);
  if (mean && !tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "integer scatter_reduce mean");
  tt_dtype acc = kind == -1 ? xt.dtype : tt_opmath(xt.dtype);
  tt_hv upd = TT_HV_INVALID;
  TT_RETURN_IF_ERROR(updates(c, index, acc, &upd));
  tt_hv crd = coords(c, index, dim, rt.dims[dim]);
  tt_hv base = tt_hlo_convert(b, x, acc);
  if (!include_self) {  // touched positions start from the identity
    tt_hv init = tt_lower_broadcast_to(c, tt_lower_reduce_init(c, acc, (tt_hlo_reduce_kind)kind),
                                       tt_lower_type(c, upd).rank, tt_lower_type(c, upd).dims);
    base = tt_lower_scatter_at(c, base, crd, init, -1);
  }
  tt_hv out = tt_lower_scatter_at(c, base, crd, upd, kind);
  if (mean) {
    tt_hv cnt0 = tt_lower_splat_like(c, base, include_self ? 1 : 0);
    tt_hv cnt = tt_lower_scatter_at(c, cnt0, crd, tt_lower_splat_like(c, upd, 1), TT_HLO_REDUCE_ADD);
    cnt = tt_hlo_binary(b, TT_HLO_MAX, cnt, tt_lower_splat_like(c, cnt, 1));
    out = tt_hlo_binary(b, TT_HLO_DIV, out, cnt);
  }
  tt_lower_result(c, tt_hlo_convert(b, tt_hlo_reshape(b, out, xt.rank, xt.dims), xt.dtype));
  return NULL;
}

static tt_status lower_scatter(tt_lower_ctx *c) { return scatter_like(c, -1, 4, false); }
static tt_status lower_scatter_add(tt_lower_ctx *c) { return scatter_like(c, TT_HLO_REDUCE_ADD, -1, false); }
static tt_status lower_scatter_reduce(tt_lower_ctx *c) { return scatter_like(c, -1, 4, true); }

// --- advanced indexing --------------------------------------------------------------------

typedef struct adv {
  int k;                       // indexed dims
  int64_t perm[TT_MAX_RANK];   // indexed dims first, then the rest
  int nb;                      // rank of the broadcast index shape
  int64_t bshape[TT_MAX_RANK];
  int nrest;
  int64_t rest[TT_MAX_RANK];   // sizes of the other dims, in order
  int front;                   // where the index dims go in the result
  tt_hv idx;                   // [*bshape, k] i64
} adv;

// PyTorch's IndexError (and text) for index tensors whose shapes don't broadcast.
static tt_status index_shape_mismatch(tt_lower_ctx *c, const tt_hv *iv, int k) {
  char shapes[512] = "", one[96];
  size_t n = 0;
  for (int i = 0; i < k && n < sizeof shapes; i++) {
    tt_hlo_type t = tt_lower_type(c, iv[i]);
    n += (size_t)snprintf(shapes + n, sizeof shapes - n, "%s%s", i ? ", " : "",
                          tt_shape_str(&t, one, sizeof one));
  }
  return tt_lower_fail(c, TT_OUT_OF_RANGE, "shape mismatch: indexing tensors could not be "
                       "broadcast together with shapes %s", shapes);
}

// Reads the Tensor?[] argument 1 against self type xt.
static tt_status adv_prepare(tt_lower_ctx *c, const tt_hlo_type *xt, adv *a) {
  tt_hlo *b = tt_lower_hlo(c);
  const tt_value *lv = tt_lower_arg(c, 1);
  int n = lv->kind == TT_VALUE_LIST ? lv->u.list.n : 0;
  if (n > xt->rank)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "too many indices for tensor of dimension %d "
                         "(got %d)", (int)xt->rank, n);
  tt_hv iv[TT_MAX_RANK];
  int dims[TT_MAX_RANK];
  a->k = 0;
  for (int j = 0; j < n; j++) {
    const tt_value *it = &lv->u.list.items[j];
    if (it->kind != TT_VALUE_TENSOR || !it->u.tensor.storage) continue;
    tt_dtype d = it->u.tensor.dtype;
    if (d == TT_BOOL || d == TT_U8)
      return tt_lower_fail(c, TT_UNIMPLEMENTED, "boolean mask indices have data-dependent "
                           "shapes (run on the CPU, which syncs)");
    if (!tt_dtype_is_int(d))
      return tt_lower_fail(c, TT_OUT_OF_RANGE, "tensors used as indices must be long, "
                           "int, byte or bool tensors, got %s", tt_dtype_name(d));
    dims[a->k] = j;
    tt_hv ij = tt_lower_list_tensor(c, 1, j);
    tt_hlo_type jt = tt_lower_type(c, ij);
    if (xt->dims[j] == 0 && tt_hlo_numel(&jt) > 0)  // known now: no index fits
      return tt_lower_fail(c, TT_OUT_OF_RANGE, "index is out of bounds for dimension with "
                           "size 0");
    tt_lower_check_index(c, ij, xt->dims[j], true, TT_OUT_OF_RANGE,
                         "index {} is out of bounds for dimension {} with size {}", j,
                         xt->dims[j]);
    iv[a->k++] = wrap_index(c, ij, xt->dims[j]);
  }
  if (a->k == 0) return tt_lower_fail(c, TT_UNIMPLEMENTED, "no index tensors");
  if (!tt_lower_broadcastable(c, iv, a->k)) return index_shape_mismatch(c, iv, a->k);
  TT_RETURN_IF_ERROR(tt_lower_broadcast(c, iv, a->k));
  tt_hlo_type bt = tt_lower_type(c, iv[0]);
  a->nb = bt.rank;
  memcpy(a->bshape, bt.dims, sizeof bt.dims);
  if (a->nb + xt->rank - a->k > TT_MAX_RANK)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "result rank above %d", TT_MAX_RANK);
  bool indexed[TT_MAX_RANK] = {false}, adjacent = true;
  for (int i = 0; i < a->k; i++) {
    a->perm[i] = dims[i];
    indexed[dims[i]] = true;
    if (i > 0 && dims[i] != dims[i - 1] + 1) adjacent = false;
  }
  a->nrest = 0;
  for (int d = 0; d < xt->rank; d++) {
    if (indexed[d]) continue;
    a->perm[a->k + a->nrest] = d;
    a->rest[a->nrest++] = xt->dims[d];
  }
  a->front = adjacent ? dims[0] : 0;
  int64_t cd[TT_MAX_RANK + 1];
  memcpy(cd, bt.dims, sizeof(int64_t) * (size_t)a->nb);
  cd[a->nb] = 1;
  for (int i = 0; i < a->k; i++) iv[i] = tt_hlo_reshape(b, iv[i], a->nb + 1, cd);
  a->idx = a->nb + 1 > 0 ? tt_hlo_concatenate(b, iv, a->k, a->nb) : TT_HV_INVALID;
  return NULL;
}

// The permutation taking [*B, *rest] to PyTorch's result layout, which puts
// the B dims at `front` among the rest dims.
static void result_perm(const adv *a, int64_t *perm) {
  int r = 0;
  for (int i = 0; i < a->front; i++) perm[r++] = a->nb + i;
  for (int i = 0; i < a->nb; i++) perm[r++] = i;
  for (int i = a->front; i < a->nrest; i++) perm[r++] = a->nb + i;
}

static void window(const adv *a, int64_t *upd_dims, int64_t *sizes) {
  for (int i = 0; i < a->k; i++) sizes[i] = 1;
  for (int i = 0; i < a->nrest; i++) {
    sizes[a->k + i] = a->rest[i];
    upd_dims[i] = a->nb + i;
  }
}

// index.Tensor(self, Tensor?[] indices)
static tt_status lower_index(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  adv a;
  TT_RETURN_IF_ERROR(adv_prepare(c, &xt, &a));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv x = tt_hlo_transpose(b, tt_lower_tensor(c, 0), a.perm);
  int64_t offs[TT_MAX_RANK], sizes[TT_MAX_RANK], perm[TT_MAX_RANK];
  window(&a, offs, sizes);
  tt_hlo_gather_dims gd = {.offset_dims = offs, .n_offset_dims = a.nrest,
                           .collapsed_slice_dims = kIota, .n_collapsed = a.k,
                           .start_index_map = kIota, .n_start_index_map = a.k,
                           .index_vector_dim = a.nb};
  tt_hv out = tt_hlo_gather(b, x, a.idx, &gd, sizes, NULL);
  result_perm(&a, perm);
  tt_lower_result(c, tt_hlo_transpose(b, out, perm));
  return NULL;
}

// The one bool mask of an index_put's Tensor?[] (None entries aside): its
// list position (= the first dim it covers); -1 when there is none, or other
// index tensors too.
static int single_mask(const tt_lower_ctx *c) {
  const tt_value *lv = tt_lower_arg(c, 1);
  int n = lv->kind == TT_VALUE_LIST ? lv->u.list.n : 0, j = -1;
  for (int i = 0; i < n; i++) {
    const tt_value *it = &lv->u.list.items[i];
    if (it->kind != TT_VALUE_TENSOR || !it->u.tensor.storage) continue;
    if (j >= 0 || it->u.tensor.dtype != TT_BOOL) return -1;
    j = i;
  }
  return j;
}

// x[mask] = v where v does not depend on how many elements the mask selects
// (v broadcasts with size 1 where the selected elements go: a scalar, or a
// row for every selected row): a select, no data-dependent shape (Rprop's
// `grad[sign.eq(etaminus)] = 0`, users' `x[x < 0] = 0`). *done stays false
// for any other form (data-dependent values, a mask of another shape: the
// general path, or the CPU with PyTorch's own errors).
static tt_status mask_put(tt_lower_ctx *c, const tt_hlo_type *xt, bool *done) {
  *done = false;
  int j = single_mask(c);
  if (j < 0) return NULL;
  tt_hlo_type mt = tt_lower_tensor_type(c, 1, j), vt = tt_lower_tensor_type(c, 2, -1);
  if (vt.dtype != xt->dtype || mt.rank == 0 || j + mt.rank > xt->rank) return NULL;
  for (int d = 0; d < mt.rank; d++)
    if (mt.dims[d] != xt->dims[j + d]) return NULL;
  // The indexed shape [*x[:j], K, *x[j+m:]] and values right-aligned to it.
  int rr = xt->rank - mt.rank + 1;
  if (vt.rank > rr) return NULL;
  int64_t vdims[TT_MAX_RANK], mdims[TT_MAX_RANK];
  for (int d = 0; d < xt->rank; d++) {
    bool in_mask = d >= j && d < j + mt.rank;
    int p = d < j ? d : in_mask ? j : d - mt.rank + 1;  // the indexed shape's dim
    int i = p - (rr - vt.rank);                        // the values' dim
    int64_t want = in_mask ? 1 : xt->dims[d];
    vdims[d] = i >= 0 ? vt.dims[i] : 1;
    if (vdims[d] != 1 && vdims[d] != want) return NULL;
    mdims[d] = in_mask ? mt.dims[d - j] : 1;
  }
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hv v = tt_hlo_reshape(b, tt_lower_tensor(c, 2), xt->rank, vdims);
  v = tt_lower_broadcast_to(c, v, xt->rank, xt->dims);
  tt_hv m = tt_hlo_reshape(b, tt_lower_list_tensor(c, 1, j), xt->rank, mdims);
  m = tt_lower_broadcast_to(c, m, xt->rank, xt->dims);
  if (tt_lower_bool(c, 3)) v = tt_lower_bin(c, TT_HLO_ADD, x, v);  // each element once
  tt_lower_result(c, tt_hlo_select(b, m, v, x));
  *done = true;
  return NULL;
}

// index_put(self, indices, values, accumulate) and _index_put_impl_ (same,
// plus unsafe): values broadcast to the indexed shape.
static tt_status lower_index_put(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  bool done;
  TT_RETURN_IF_ERROR(mask_put(c, &xt, &done));
  if (done) return NULL;
  adv a;
  TT_RETURN_IF_ERROR(adv_prepare(c, &xt, &a));
  tt_hlo *b = tt_lower_hlo(c);
  bool acc = tt_lower_bool(c, 3);
  int64_t perm[TT_MAX_RANK], inv[TT_MAX_RANK], rshape[TT_MAX_RANK], xinv[TT_MAX_RANK];
  result_perm(&a, perm);
  int rr = a.nb + a.nrest;
  int64_t natural[TT_MAX_RANK];  // [*B, *rest]
  memcpy(natural, a.bshape, sizeof(int64_t) * (size_t)a.nb);
  memcpy(natural + a.nb, a.rest, sizeof(int64_t) * (size_t)a.nrest);
  for (int i = 0; i < rr; i++) {
    rshape[i] = natural[perm[i]];
    inv[perm[i]] = i;
  }
  tt_hlo_type vt = tt_lower_tensor_type(c, 2, -1);
  // PyTorch's checks, in its order: the values broadcast to the indexing
  // result's shape, then their dtype.
  bool fits = vt.rank <= rr;
  for (int i = 0; fits && i < vt.rank; i++) {
    int64_t have = vt.dims[vt.rank - 1 - i], want = rshape[rr - 1 - i];
    fits = have == want || have == 1;
  }
  if (!fits) {
    char s[96], r[96];
    tt_hlo_type res = tt_hlo_make_type(xt.dtype, rr, rshape);
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "shape mismatch: value tensor of shape %s "
                         "cannot be broadcast to indexing result of shape %s",
                         tt_shape_str(&vt, s, sizeof s), tt_shape_str(&res, r, sizeof r));
  }
  if (vt.dtype != xt.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Index put requires the source and destination "
                         "dtypes match, got %s for the destination and %s for the source.",
                         tt_dtype_torch_name(xt.dtype), tt_dtype_torch_name(vt.dtype));
  tt_hv v = tt_hlo_convert(b, tt_lower_tensor(c, 2), xt.dtype);
  v = tt_lower_broadcast_to(c, v, rr, rshape);
  v = tt_hlo_transpose(b, v, inv);
  tt_hv x = tt_hlo_transpose(b, tt_lower_tensor(c, 0), a.perm);
  int64_t upd[TT_MAX_RANK], sizes[TT_MAX_RANK];
  window(&a, upd, sizes);
  tt_hlo_scatter_dims sd = {.update_window_dims = upd, .n_update_window = a.nrest,
                            .inserted_window_dims = kIota, .n_inserted = a.k,
                            .scatter_dims_to_operand_dims = kIota, .n_scatter_to_operand = a.k,
                            .index_vector_dim = a.nb};
  tt_hv out = tt_hlo_scatter(b, x, a.idx, v, &sd, acc ? TT_HLO_REDUCE_ADD : -1);
  for (int i = 0; i < xt.rank; i++) xinv[a.perm[i]] = i;
  tt_lower_result(c, tt_hlo_transpose(b, out, xinv));
  return NULL;
}

// --- sort, topk -----------------------------------------------------------------------------

static tt_status sort_impl(tt_lower_ctx *c, int64_t dim_in, bool descending, int64_t k) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type xt = tt_lower_type(c, x);
  int64_t dim;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, dim_in, xt.rank, &dim));
  if (xt.rank == 0) {
    tt_lower_result(c, x);
    tt_lower_result(c, tt_hlo_const_i(b, TT_I64, 0));
    return NULL;
  }
  if (k > xt.dims[dim] || k < 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "selected index k out of range (k=%" PRId64
                         ", size %" PRId64 ")", k, xt.dims[dim]);
  tt_hv sx = xt.dtype == TT_BOOL ? tt_hlo_convert(b, x, TT_U8) : x;
  tt_hlo_type it = xt;
  it.dtype = TT_I64;
  tt_hv vals, idx;
  tt_hlo_sort(b, sx, tt_hlo_iota(b, &it, dim), dim, descending, &vals, &idx);
  vals = tt_hlo_convert(b, vals, xt.dtype);
  if (k != xt.dims[dim]) {
    int64_t start[TT_MAX_RANK] = {0}, lim[TT_MAX_RANK];
    memcpy(lim, xt.dims, sizeof lim);
    lim[dim] = k;
    vals = tt_hlo_slice(b, vals, start, lim, kOnes);
    idx = tt_hlo_slice(b, idx, start, lim, kOnes);
  }
  tt_lower_result(c, vals);
  tt_lower_result(c, idx);
  return NULL;
}

static int64_t size_along(tt_lower_ctx *c, int64_t dim) {
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  if (t.rank == 0) return 1;
  int64_t w = dim < 0 ? dim + t.rank : dim;
  return (w >= 0 && w < t.rank) ? t.dims[w] : 0;
}

// sort(self, dim, descending)
static tt_status lower_sort(tt_lower_ctx *c) {
  int64_t dim = tt_lower_int(c, 1);
  return sort_impl(c, dim, tt_lower_bool(c, 2), size_along(c, dim));
}

// sort.stable(self, *, stable?, dim, descending): always stable.
static tt_status lower_sort_stable(tt_lower_ctx *c) {
  int64_t dim = tt_lower_int(c, 2);
  return sort_impl(c, dim, tt_lower_bool(c, 3), size_along(c, dim));
}

// topk(self, k, dim, largest, sorted): always sorted.
static tt_status lower_topk(tt_lower_ctx *c) {
  return sort_impl(c, tt_lower_int(c, 2), tt_lower_bool(c, 3), tt_lower_int(c, 1));
}

// --- cumsum, cumprod ------------------------------------------------------------------------

// (self, dim, *, dtype?): a window over the whole prefix.
static tt_status cumulative(tt_lower_ctx *c, tt_hlo_reduce_kind kind) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type xt = tt_lower_type(c, x);
  int64_t dim;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 1), xt.rank, &dim));
  const tt_value *dv = tt_lower_arg(c, 2);
  tt_hlo_type dest;
  tt_dtype rt = dv->kind == TT_VALUE_DTYPE && dv->u.dtype != TT_DTYPE_NONE ? dv->u.dtype
                : tt_lower_dest_type(c, 0, &dest) ? dest.dtype
                : tt_dtype_is_float(xt.dtype) || tt_dtype_is_complex(xt.dtype) ? xt.dtype : TT_I64;
  if (xt.rank == 0 || tt_hlo_numel(&xt) == 0) {
    tt_lower_result(c, tt_hlo_convert(b, x, rt));
    return NULL;
  }
  tt_dtype acc = tt_opmath(rt);
  x = tt_hlo_convert(b, tt_hlo_convert(b, x, rt), acc);
  tt_hlo_window w = tt_hlo_window_identity(xt.rank);
  w.dims[dim] = xt.dims[dim];
  w.pad_lo[dim] = xt.dims[dim] - 1;
  tt_hv r = tt_hlo_reduce_window(b, x, tt_lower_reduce_init(c, acc, kind), &w, kind);
  tt_lower_result(c, tt_hlo_convert(b, r, rt));
  return NULL;
}

static tt_status lower_cumsum(tt_lower_ctx *c) { return cumulative(c, TT_HLO_REDUCE_ADD); }
static tt_status lower_cumprod(tt_lower_ctx *c) { return cumulative(c, TT_HLO_REDUCE_MUL); }

// --- the table -------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
#define RC(name, fn) {"aten::" name, fn, TT_RULE_COMPLEX}  // complex-capable
static const tt_rule kRules[] = {
    RC("gather", lower_gather), RC("gather.out", lower_gather),
    RC("scatter.src", lower_scatter), RC("scatter.value", lower_scatter),
    R("scatter.reduce", lower_scatter), R("scatter.value_reduce", lower_scatter),
    RC("scatter_.src", lower_scatter), RC("scatter_.value", lower_scatter),
    R("scatter_.reduce", lower_scatter), R("scatter_.value_reduce", lower_scatter),
    RC("scatter.src_out", lower_scatter), RC("scatter.value_out", lower_scatter),
    R("scatter.reduce_out", lower_scatter), R("scatter.value_reduce_out", lower_scatter),
    RC("scatter_add", lower_scatter_add), RC("scatter_add_", lower_scatter_add),
    RC("scatter_add.out", lower_scatter_add),
    R("scatter_reduce.two", lower_scatter_reduce), R("scatter_reduce_.two", lower_scatter_reduce),
    R("scatter_reduce.two_out", lower_scatter_reduce),
    RC("index.Tensor", lower_index), RC("index.Tensor_out", lower_index),
    RC("index_put", lower_index_put), RC("index_put_", lower_index_put),
    RC("_index_put_impl_", lower_index_put),
    R("sort", lower_sort), R("sort.values", lower_sort),
    R("sort.stable", lower_sort_stable), R("sort.values_stable", lower_sort_stable),
    R("topk", lower_topk), R("topk.values", lower_topk),
    RC("cumsum", lower_cumsum), RC("cumsum_", lower_cumsum), RC("cumsum.out", lower_cumsum),
    RC("cumprod", lower_cumprod), RC("cumprod_", lower_cumprod), RC("cumprod.out", lower_cumprod),
};
#undef R
#undef RC

const tt_rule_table tt_rules_index = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
