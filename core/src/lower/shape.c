// shape.c — ops that move elements without arithmetic: cat, index_select,
// constant_pad_nd, flip, roll, repeat, tril/triu, and embedding_dense_backward
// (a scatter-add of gradient rows).
//
// Views (view, permute, expand, slice, ...) are not here: the shim keeps them
// as strided views and the lowering context reads them.
//
// Leaves out: index_select's bounds check (XLA clamps out-of-range indices
// where PyTorch raises), cat's legacy skipping of 1-D empty tensors beyond
// the simple [0] case.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "lower/lower.h"

// The int[] argument i (NULL/0 for None).
static const int64_t *ints_arg(const tt_lower_ctx *c, int i, int *n) {
  const tt_value *v = tt_lower_arg(c, i);
  if (v->kind != TT_VALUE_INTS) {
    *n = 0;
    return NULL;
  }
  *n = v->u.ints.n;
  return v->u.ints.data;
}

// --- cat -------------------------------------------------------------------------------------

// True for the legacy [0]-shaped tensors cat skips.
static bool skipped(const tt_hlo_type *t) { return t->rank == 1 && t->dims[0] == 0; }

// Checks every kept tensor matches `ref` except in dim; *out_dtype gets the
// promoted dtype.
static tt_status cat_check(tt_lower_ctx *c, int n, const tt_hlo_type *ref, int64_t dim,
                           tt_dtype *out_dtype) {
  *out_dtype = TT_DTYPE_NONE;
  for (int j = 0; j < n; j++) {
    tt_hlo_type t = tt_lower_tensor_type(c, 0, j);
    *out_dtype = tt_promote_types(*out_dtype, t.dtype);  // skipped ones count too
    if (skipped(&t)) continue;
    if (t.rank != ref->rank)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Tensors must have same number of "
                           "dimensions: got %d and %d", (int)ref->rank, (int)t.rank);
    for (int d = 0; d < t.rank; d++)
      if (d != dim && t.dims[d] != ref->dims[d])
        return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Sizes of tensors must match except "
                             "in dimension %d. Expected size %" PRId64 " but got size %"
                             PRId64 " for tensor number %d in the list.", (int)dim,
                             ref->dims[d], t.dims[d], j);
  }
  return NULL;
}

// cat(Tensor[] tensors, int dim)
static tt_status lower_cat(tt_lower_ctx *c) {
  const tt_value *list = tt_lower_arg(c, 0);
  int n = list->kind == TT_VALUE_LIST ? list->u.list.n : 0;
  if (n <= 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a non-empty list of Tensors");
  int first = 0;
  tt_hlo_type ref = tt_lower_tensor_type(c, 0, 0);
  for (; first < n; first++) {
    ref = tt_lower_tensor_type(c, 0, first);
    if (!skipped(&ref)) break;
  }
  if (first == n) {  // all empty: the result is the promoted empty tensor
    tt_dtype d = TT_DTYPE_NONE;
    for (int j = 0; j < n; j++) d = tt_promote_types(d, tt_lower_tensor_type(c, 0, j).dtype);
    tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), tt_lower_list_tensor(c, 0, 0), d));
    return NULL;
  }
  if (ref.rank == 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "zero-dimensional tensor (at position "
                         "%d) cannot be concatenated", first);
  int64_t dim;
  tt_dtype d;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 1), ref.rank, &dim));
  TT_RETURN_IF_ERROR(cat_check(c, n, &ref, dim, &d));
  tt_hv *parts = malloc((size_t)n * sizeof *parts);
  if (!parts) return tt_make_status(TT_RESOURCE_EXHAUSTED, "cat: out of memory");
  int np = 0;
  for (int j = first; j < n; j++) {
    tt_hlo_type t = tt_lower_tensor_type(c, 0, j);
    if (!skipped(&t))
      parts[np++] = tt_hlo_convert(tt_lower_hlo(c), tt_lower_list_tensor(c, 0, j), d);
  }
  tt_hv acc = tt_hlo_concatenate(tt_lower_hlo(c), parts, np, dim);
  free(parts);
  tt_lower_result(c, acc);
  return NULL;
}

// --- index_select ------------------------------------------------------------------------------

// Rows of x along `dim` at 1-D integer indices `idx` (a gather whose batch dim
// lands at `dim`).
static tt_hv take(tt_lower_ctx *c, tt_hv x, int64_t dim, tt_hv idx) {
  tt_hlo_type xt = tt_lower_type(c, x), it = tt_lower_type(c, idx);
  int64_t n = it.rank ? it.dims[0] : 1, col[2] = {n, 1};
  tt_hv i2 = tt_hlo_reshape(tt_lower_hlo(c), idx, 2, col);
  int64_t offs[TT_MAX_RANK], sizes[TT_MAX_RANK];
  int no = 0;
  for (int d = 0; d < xt.rank; d++) {
    sizes[d] = d == dim ? 1 : xt.dims[d];
    if (d != dim) offs[no++] = d;
  }
  tt_hlo_gather_dims gd = {.offset_dims = offs, .n_offset_dims = no,
                           .collapsed_slice_dims = &dim, .n_collapsed = 1,
                           .start_index_map = &dim, .n_start_index_map = 1,
                           .index_vector_dim = 1};
  return tt_hlo_gather(tt_lower_hlo(c), x, i2, &gd, sizes, NULL);
}

// index_select(self, dim, index)
static tt_status lower_index_select(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1), it = tt_lower_tensor_type(c, 2, -1);
  if (it.rank > 1 || !tt_dtype_is_int(it.dtype))
    return tt_lower_fail(c, TT_OUT_OF_RANGE, "index_select(): Index is supposed to be "
                         "a vector of integers, got %dD %s", (int)it.rank, tt_dtype_name(it.dtype));
  int64_t dim;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 1), xt.rank, &dim));
  tt_hv x = tt_lower_tensor(c, 0), idx = tt_lower_tensor(c, 2);
  tt_lower_check_index(c, idx, xt.rank ? xt.dims[dim] : 1, false, TT_OUT_OF_RANGE,
                       "index out of range in self", 0, 0);
  if (xt.rank == 0) {  // a 0-d self takes index [0] only, and stays 0-d
    tt_lower_result(c, x);
    return NULL;
  }
  tt_hv r = take(c, x, dim, idx);
  if (it.rank == 0) {  // a 0-d index keeps the dim with size 1
    xt.dims[dim] = 1;
    r = tt_hlo_reshape(tt_lower_hlo(c), r, xt.rank, xt.dims);
  }
  tt_lower_result(c, r);
  return NULL;
}

// --- tril, triu ---------------------------------------------------------------------------------

// tril / triu(self, diagonal): keeps elements with col - row <= diagonal
// (tril) or >= diagonal (triu) in the last two dims, zeros the rest.
static tt_status tri(tt_lower_ctx *c, bool lower) {
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  if (t.rank < 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s: input tensor must have at least 2 "
                         "dimensions", lower ? "tril" : "triu");
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type it = tt_hlo_make_type(TT_I64, t.rank, t.dims);
  tt_hv diff = tt_hlo_binary(b, TT_HLO_SUB, tt_hlo_iota(b, &it, t.rank - 1),
                             tt_hlo_iota(b, &it, t.rank - 2));
  int64_t k = tt_lower_is_none(c, 1) ? 0 : tt_lower_int(c, 1);
  tt_hv keep = tt_hlo_compare(b, lower ? TT_HLO_LE : TT_HLO_GE, diff, tt_hlo_splat_i(b, &it, k));
  tt_hv x = tt_lower_tensor(c, 0);
  tt_lower_result(c, tt_hlo_select(b, keep, x, tt_hlo_splat(b, &t, 0)));
  return NULL;
}

static tt_status lower_tril(tt_lower_ctx *c) { return tri(c, true); }
static tt_status lower_triu(tt_lower_ctx *c) { return tri(c, false); }

// --- embedding_dense_backward ------------------------------------------------------------------------

// Scatter-adds `rows` [n, D] into zeros [num, D] at `idx` [n] (i64).
static tt_hv scatter_rows(tt_lower_ctx *c, tt_hv rows, tt_hv idx, int64_t num) {
  tt_hlo_type rt = tt_lower_type(c, rows);
  int64_t dims[2] = {num, rt.rank > 1 ? rt.dims[1] : 1}, col[2] = {rt.dims[0], 1};
  tt_hlo_type zt = tt_hlo_make_type(rt.dtype, rt.rank, dims);
  tt_hv zeros = tt_hlo_splat(tt_lower_hlo(c), &zt, 0);
  static const int64_t zero = 0, one = 1;
  tt_hlo_scatter_dims sd = {.update_window_dims = &one, .n_update_window = rt.rank > 1,
                            .inserted_window_dims = &zero, .n_inserted = 1,
                            .scatter_dims_to_operand_dims = &zero, .n_scatter_to_operand = 1,
                            .index_vector_dim = 1};
  tt_hv i2 = tt_hlo_reshape(tt_lower_hlo(c), idx, 2, col);
  return tt_hlo_scatter(tt_lower_hlo(c), zeros, i2, rows, &sd, TT_HLO_REDUCE_ADD);
}

// embedding_dense_backward(grad_output [..., D], indices [...], num_weights,
// padding_idx, scale_grad_by_freq) -> [num_weights, D]
static tt_status lower_embedding_backward(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type gt = tt_lower_tensor_type(c, 0, -1), it = tt_lower_tensor_type(c, 1, -1);
  int64_t num = tt_lower_int(c, 2), pad = tt_lower_int(c, 3);
  int64_t n = tt_hlo_numel(&it), d = gt.rank ? gt.dims[gt.rank - 1] : 1;
  if (n * d != tt_hlo_numel(&gt) || num < 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grad_output doesn't match indices");
  int64_t gd[2] = {n, d};
  tt_dtype acc = (gt.dtype == TT_F16 || gt.dtype == TT_BF16) ? TT_F32 : gt.dtype;
  tt_hv g = tt_hlo_convert(b, tt_hlo_reshape(b, tt_lower_tensor(c, 0), 2, gd), acc);
  tt_hv idx = tt_hlo_convert(b, tt_hlo_reshape(b, tt_lower_tensor(c, 1), 1, &n), TT_I64);
  // Rows at padding_idx contribute nothing.
  tt_hv keep = tt_hlo_compare(b, TT_HLO_NE, idx, tt_lower_splat_like(c, idx, (double)pad));
  keep = tt_lower_broadcast_to(c, tt_hlo_reshape(b, keep, 2, (int64_t[]){n, 1}), 2, gd);
  g = tt_hlo_select(b, keep, g, tt_lower_splat_like(c, g, 0));
  if (tt_lower_bool(c, 4)) {  // scale_grad_by_freq: divide by each index's count
    tt_hlo_type ot = tt_hlo_make_type(acc, 2, (int64_t[]){n, 1});
    tt_hv counts = scatter_rows(c, tt_hlo_splat(b, &ot, 1), idx, num);
    tt_hv per_row = take(c, tt_hlo_reshape(b, counts, 1, &num), 0, idx);
    per_row = tt_lower_broadcast_to(c, tt_hlo_reshape(b, per_row, 2, (int64_t[]){n, 1}), 2, gd);
    g = tt_hlo_binary(b, TT_HLO_DIV, g, per_row);
  }
  tt_lower_result(c, tt_hlo_convert(b, scatter_rows(c, g, idx, num), gt.dtype));
  return NULL;
}

// --- constant_pad_nd, flip, roll, repeat ---------------------------------------------------------------

// constant_pad_nd(self, pad, value=0): pad pairs start at the last dim;
// negative pads crop.
static tt_status lower_constant_pad_nd(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  int np;
  const int64_t *pad = ints_arg(c, 1, &np);
  if (np % 2 != 0 || np / 2 > t.rank)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Length of pad must be even but instead "
                         "it equals %d (and at most twice the rank %d)", np, (int)t.rank);
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "pad", pad, np));
  int64_t lo[TT_MAX_RANK] = {0}, hi[TT_MAX_RANK] = {0}, in[TT_MAX_RANK] = {0};
  for (int k = 0; k < np / 2; k++) {
    int d = t.rank - 1 - k;
    lo[d] = pad[2 * k];
    hi[d] = pad[2 * k + 1];
    if (t.dims[d] + lo[d] + hi[d] < 0)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "The input size %" PRId64 ", plus negative "
                           "padding %" PRId64 " and %" PRId64 " resulted in a negative output "
                           "size", t.dims[d], lo[d], hi[d]);
  }
  tt_hv v = tt_lower_is_none(c, 2) ? tt_hlo_const(tt_lower_hlo(c), t.dtype, 0)
                                   : tt_lower_scalar(c, 2, t.dtype);
  tt_lower_result(c, tt_hlo_pad(tt_lower_hlo(c), x, v, lo, hi, in));
  return NULL;
}

// flip(self, dims)
static tt_status lower_flip(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, 1, t.rank, false, mask));
  int64_t dims[TT_MAX_RANK];
  int n = 0;
  for (int d = 0; d < t.rank; d++)
    if (mask[d]) dims[n++] = d;
  tt_lower_result(c, tt_hlo_reverse(tt_lower_hlo(c), x, dims, n));
  return NULL;
}

// x rolled by `shift` along dim: concat(x[n-s:], x[:n-s]).
static tt_hv roll_dim(tt_lower_ctx *c, tt_hv x, int64_t dim, int64_t shift) {
  tt_hlo_type t = tt_lower_type(c, x);
  int64_t n = t.dims[dim];
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  int64_t start[TT_MAX_RANK] = {0}, limit[TT_MAX_RANK], stride[TT_MAX_RANK];
  for (int d = 0; d < t.rank; d++) {
    limit[d] = t.dims[d];
    stride[d] = 1;
  }
  start[dim] = n - s;
  tt_hv tail = tt_hlo_slice(tt_lower_hlo(c), x, start, limit, stride);
  start[dim] = 0;
  limit[dim] = n - s;
  tt_hv head = tt_hlo_slice(tt_lower_hlo(c), x, start, limit, stride);
  tt_hv parts[2] = {tail, head};
  return tt_hlo_concatenate(tt_lower_hlo(c), parts, 2, dim);
}

// roll(self, shifts, dims=[]): no dims rolls the flattened tensor.
static tt_status lower_roll(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  int ns, nd;
  const int64_t *shifts = ints_arg(c, 1, &ns), *dims = ints_arg(c, 2, &nd);
  if (ns == 0) return tt_lower_fail(c, TT_INVALID_ARGUMENT, "`shifts` required");
  if (nd == 0) {
    if (ns != 1)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "shifts and dimensions must align. "
                           "shifts: %d, dims:0", ns);
    int64_t n = tt_hlo_numel(&t);
    tt_hv flat = roll_dim(c, tt_hlo_reshape(tt_lower_hlo(c), x, 1, &n), 0, shifts[0]);
    tt_lower_result(c, tt_hlo_reshape(tt_lower_hlo(c), flat, t.rank, t.dims));
    return NULL;
  }
  if (ns != nd)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "shifts and dimensions must align. "
                         "shifts: %d, dims:%d", ns, nd);
  for (int k = 0; k < nd; k++) {
    int64_t d;
    TT_RETURN_IF_ERROR(tt_lower_dim(c, dims[k], t.rank, &d));
    x = roll_dim(c, x, d, shifts[k]);
  }
  tt_lower_result(c, x);
  return NULL;
}

// repeat(self, repeats): broadcast x (padded with leading 1-dims) into
// interleaved [r0, d0, r1, d1, ...], then merge each pair.
static tt_status lower_repeat(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  int nr;
  const int64_t *reps = ints_arg(c, 1, &nr);
  if (nr < t.rank)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Number of dimensions of repeat dims can "
                         "not be smaller than number of dimensions of tensor");
  if (2 * nr > TT_MAX_RANK)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "repeat over %d dims", nr);
  int64_t padded[TT_MAX_RANK], wide[TT_MAX_RANK], bdims[TT_MAX_RANK], outd[TT_MAX_RANK];
  for (int i = 0; i < nr; i++) {
    padded[i] = i < nr - t.rank ? 1 : t.dims[i - (nr - t.rank)];
    if (reps[i] < 0)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "negative repeat %" PRId64, reps[i]);
    wide[2 * i] = reps[i];
    wide[2 * i + 1] = padded[i];
    bdims[i] = 2 * i + 1;
    outd[i] = reps[i] * padded[i];
  }
  tt_hlo *b = tt_lower_hlo(c);
  x = tt_hlo_reshape(b, x, nr, padded);
  x = tt_hlo_broadcast_in_dim(b, x, 2 * nr, wide, bdims);
  tt_lower_result(c, tt_hlo_reshape(b, x, nr, outd));
  return NULL;
}

// --- slice_scatter, select_scatter ---------------------------------------------------------

// self with positions start, start+step, ... (n of them) along dim replaced by
// src (already converted, shaped like that slice): src is padded into place
// (interior padding spaces it by step) and selected where the slice lies.
static tt_status scatter_slice(tt_lower_ctx *c, tt_hv self, tt_hv src, int64_t dim,
                               int64_t start, int64_t step, int64_t n) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_type(c, self);
  if (n <= 0) {
    tt_lower_result(c, self);
    return NULL;
  }
  int64_t lo[TT_MAX_RANK] = {0}, hi[TT_MAX_RANK] = {0}, in[TT_MAX_RANK] = {0};
  int64_t last = start + (n - 1) * step;  // index of the last written element
  lo[dim] = start;
  hi[dim] = t.dims[dim] - 1 - last;
  in[dim] = step - 1;
  tt_hv placed = tt_hlo_pad(b, src, tt_hlo_const(b, t.dtype, 0), lo, hi, in);
  tt_hlo_type it = tt_hlo_make_type(TT_I64, t.rank, t.dims);
  tt_hv i = tt_hlo_iota(b, &it, dim);
  tt_hv from = tt_hlo_binary(b, TT_HLO_SUB, i, tt_hlo_splat_i(b, &it, start));
  tt_hv in_range = tt_hlo_binary(
      b, TT_HLO_AND, tt_hlo_compare(b, TT_HLO_GE, from, tt_hlo_splat_i(b, &it, 0)),
      tt_hlo_compare(b, TT_HLO_LE, i, tt_hlo_splat_i(b, &it, last)));
  tt_hv on_step = tt_hlo_compare(
      b, TT_HLO_EQ, tt_hlo_binary(b, TT_HLO_REM, from, tt_hlo_splat_i(b, &it, step)),
      tt_hlo_splat_i(b, &it, 0));
  tt_hv mask = tt_hlo_binary(b, TT_HLO_AND, in_range, on_step);
  tt_lower_result(c, tt_hlo_select(b, mask, placed, self));
  return NULL;
}

// slice_scatter(self, src, dim=0, start=None, end=None, step=1)
static tt_status lower_slice_scatter(tt_lower_ctx *c) {
  tt_hv self = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, self);
  int64_t dim, step = tt_lower_is_none(c, 5) ? 1 : tt_lower_int(c, 5);
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 2), t.rank, &dim));
  if (step < 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "slice step must be positive, got %lld",
                         (long long)step);
  int64_t size = t.dims[dim];
  int64_t start = tt_lower_is_none(c, 3) ? 0 : tt_lower_int(c, 3);
  int64_t end = tt_lower_is_none(c, 4) ? size : tt_lower_int(c, 4);
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = start < 0 ? 0 : (start > size ? size : start);
  end = end < start ? start : (end > size ? size : end);
  // ceil((end - start) / step) without forming end - start + step, which
  // overflows for a huge step.
  int64_t n = end > start ? (end - start - 1) / step + 1 : 0;
  tt_hv src = tt_lower_convert(c, tt_lower_tensor(c, 1), t.dtype);
  tt_hlo_type st = tt_lower_type(c, src);
  tt_hlo_type want = t;
  want.dims[dim] = n;
  char a[96], b2[96];
  for (int k = 0; k < t.rank; k++)
    if (st.rank != t.rank || st.dims[k] != want.dims[k])
      return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                           "expected src to have a size equal to the slice of self: "
                           "src %s, slice %s", tt_shape_str(&st, a, sizeof a),
                           tt_shape_str(&want, b2, sizeof b2));
  return scatter_slice(c, self, src, dim, start, step, n);
}

// select_scatter(self, src, dim, index)
static tt_status lower_select_scatter(tt_lower_ctx *c) {
  tt_hv self = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, self);
  int64_t dim, index = tt_lower_int(c, 3);
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 2), t.rank, &dim));
  if (index < -t.dims[dim] || index >= t.dims[dim])
    return tt_lower_fail(c, TT_OUT_OF_RANGE, "index %lld is out of bounds for dimension "
                         "%lld with size %lld", (long long)index, (long long)dim,
                         (long long)t.dims[dim]);
  if (index < 0) index += t.dims[dim];
  tt_hv src = tt_lower_convert(c, tt_lower_tensor(c, 1), t.dtype);
  tt_hlo_type st = tt_lower_type(c, src), want = t;
  want.dims[dim] = 1;
  int64_t expect = tt_hlo_numel(&want);
  char a[96];
  if (st.rank != t.rank - 1 || tt_hlo_numel(&st) != expect)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "src %s doesn't match the selected slice",
                         tt_shape_str(&st, a, sizeof a));
  src = tt_hlo_reshape(tt_lower_hlo(c), src, want.rank, want.dims);
  return scatter_slice(c, self, src, dim, index, 1, 1);
}

// --- the table ------------------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
#define RC(name, fn) {"aten::" name, fn, TT_RULE_COMPLEX}  // complex-capable
static const tt_rule kRules[] = {
    RC("cat", lower_cat), RC("cat.out", lower_cat),
    RC("index_select", lower_index_select), RC("index_select.out", lower_index_select),
    RC("tril", lower_tril), RC("tril_", lower_tril), RC("tril.out", lower_tril),
    RC("triu", lower_triu), RC("triu_", lower_triu), RC("triu.out", lower_triu),
    R("embedding_dense_backward", lower_embedding_backward),
    R("embedding_dense_backward.out", lower_embedding_backward),
    RC("constant_pad_nd", lower_constant_pad_nd), RC("constant_pad_nd.out", lower_constant_pad_nd),
    RC("flip", lower_flip), RC("flip.out", lower_flip),
    RC("roll", lower_roll), RC("roll.out", lower_roll),
    RC("repeat", lower_repeat), RC("repeat.out", lower_repeat),
    RC("slice_scatter", lower_slice_scatter), RC("slice_scatter.out", lower_slice_scatter),
    RC("select_scatter", lower_select_scatter), RC("select_scatter.out", lower_select_scatter),
};
#undef R
#undef RC

const tt_rule_table tt_rules_shape = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
