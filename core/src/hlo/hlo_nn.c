// hlo_nn.c — the builder's windowed and ordering ops: stablehlo.convolution
// (general dimension numbers, groups, dilations, negative padding),
// stablehlo.reduce_window (one operand with a combiner, or value/index
// pairs for max pooling with indices) and stablehlo.sort (stable, with an
// optional payload such as the indices).
//
// Leaves out: select_and_scatter (pool backward ops scatter through their
// indices instead), precision configs on convolution (f32 stays f32 on CPU;
// TPUs may want HIGHEST here too), sort with more than one payload.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hlo/hlo_internal.h"

static const tt_hlo_type *ty(tt_hlo *b, tt_hv v) { return &b->vals[v].type; }

static bool is_float(tt_dtype d) {
  return d == TT_F16 || d == TT_BF16 || d == TT_F32 || d == TT_F64;
}

// --- convolution ------------------------------------------------------------------------

// Writes "[b, f, 0, 1]"-style labels of one operand's dims.
static void put_conv_labels(tt_hlo_buf *s, int rank, int64_t first, char c1,
                            int64_t second, char c2, const int64_t *spatial, int ns) {
  tt_hlo_buf_printf(s, "[");
  for (int p = 0; p < rank; p++) {
    tt_hlo_buf_printf(s, "%s", p ? ", " : "");
    if (p == first) {
      tt_hlo_buf_printf(s, "%c", c1);
      continue;
    }
    if (p == second) {
      tt_hlo_buf_printf(s, "%c", c2);
      continue;
    }
    for (int i = 0; i < ns; i++)
      if (spatial[i] == p) tt_hlo_buf_printf(s, "%d", i);
  }
  tt_hlo_buf_printf(s, "]");
}

static void put_pairs(tt_hlo_buf *s, const int64_t *lo, const int64_t *hi, int n) {
  tt_hlo_buf_printf(s, "dense<");
  if (n == 0) tt_hlo_buf_printf(s, "0");  // an empty 0x2 literal
  else tt_hlo_buf_printf(s, "[");
  for (int i = 0; i < n; i++)
    tt_hlo_buf_printf(s, "%s[%" PRId64 ", %" PRId64 "]", i ? ", " : "", lo[i], hi[i]);
  if (n) tt_hlo_buf_printf(s, "]");
  tt_hlo_buf_printf(s, "> : tensor<%dx2xi64>", n);
}

// Result type of a convolution; false when the numbers don't fit.
static bool conv_type(const tt_hlo_type *xt, const tt_hlo_type *wt,
                      const tt_hlo_conv_dims *d, tt_hlo_type *t) {
  int ns = d->nspatial, r = xt->rank;
  if (ns < 0 || r != ns + 2 || wt->rank != r || d->feature_groups < 1 ||
      d->batch_groups < 1)
    return false;
  int64_t groups_in = xt->dims[d->in_feature];
  if (groups_in % d->feature_groups || wt->dims[d->k_in] * d->feature_groups != groups_in ||
      xt->dims[d->in_batch] % d->batch_groups || wt->dims[d->k_out] % d->batch_groups ||
      wt->dims[d->k_out] % d->feature_groups)
    return false;
  *t = tt_hlo_make_type(xt->dtype, r, NULL);
  t->dims[d->out_batch] = xt->dims[d->in_batch] / d->batch_groups;
  t->dims[d->out_feature] = wt->dims[d->k_out];
  for (int i = 0; i < ns; i++) {
    int64_t in = xt->dims[d->in_spatial[i]], k = wt->dims[d->k_spatial[i]];
    if (d->stride[i] < 1 || d->lhs_dilation[i] < 1 || d->rhs_dilation[i] < 1) return false;
    int64_t padded = (in > 0 ? (in - 1) * d->lhs_dilation[i] + 1 : 0) + d->pad_lo[i] + d->pad_hi[i];
    int64_t dk = k > 0 ? (k - 1) * d->rhs_dilation[i] + 1 : 0;
    t->dims[d->out_spatial[i]] = padded < dk ? 0 : (padded - dk) / d->stride[i] + 1;
  }
  return true;
}

tt_hv tt_hlo_convolution(tt_hlo *b, tt_hv x, tt_hv w, const tt_hlo_conv_dims *d) {
  tt_hv xs[2] = {x, w};
  if (!tt_hlo_ok(b, xs, 2)) return TT_HV_INVALID;
  tt_hlo_type t;
  if (ty(b, x)->dtype != ty(b, w)->dtype || !conv_type(ty(b, x), ty(b, w), d, &t)) {
    tt_hlo_failf(b, "convolution: operands of rank %d and %d don't fit the dimension "
                 "numbers (%d spatial dims, %" PRId64 " feature groups)",
                 (int)ty(b, x)->rank, (int)ty(b, w)->rank, d->nspatial, d->feature_groups);
    return TT_HV_INVALID;
  }
  int ns = d->nspatial, r = ns + 2;
  tt_hlo_buf a = {0};
  tt_hlo_buf_printf(&a, "{batch_group_count = %" PRId64 " : i64, dimension_numbers = "
                    "#stablehlo.conv<", d->batch_groups);
  put_conv_labels(&a, r, d->in_batch, 'b', d->in_feature, 'f', d->in_spatial, ns);
  tt_hlo_buf_printf(&a, "x");
  put_conv_labels(&a, r, d->k_out, 'o', d->k_in, 'i', d->k_spatial, ns);
  tt_hlo_buf_printf(&a, "->");
  put_conv_labels(&a, r, d->out_batch, 'b', d->out_feature, 'f', d->out_spatial, ns);
  tt_hlo_buf_printf(&a, ">, feature_group_count = %" PRId64 " : i64, lhs_dilation = ",
                    d->feature_groups);
  tt_hlo_put_i64s(&a, d->lhs_dilation, ns);
  tt_hlo_buf_printf(&a, ", padding = ");
  put_pairs(&a, d->pad_lo, d->pad_hi, ns);
  tt_hlo_buf_printf(&a, ", rhs_dilation = ");
  tt_hlo_put_i64s(&a, d->rhs_dilation, ns);
  tt_hlo_buf_printf(&a, ", window_strides = ");
  tt_hlo_put_i64s(&a, d->stride, ns);
  if (is_float(t.dtype))
    tt_hlo_buf_printf(&a, ", precision_config = [#stablehlo<precision HIGHEST>, "
                          "#stablehlo<precision HIGHEST>]");
  tt_hlo_buf_printf(&a, "}");
  tt_hv res = tt_hlo_emit(b, "stablehlo.convolution", xs, 2, a.p, &t);
  tt_hlo_buf_free(&a);
  return res;
}

// --- reduce_window ----------------------------------------------------------------------

tt_hlo_window tt_hlo_window_identity(int rank) {
  tt_hlo_window w;
  memset(&w, 0, sizeof w);
  for (int i = 0; i < rank && i < TT_MAX_RANK; i++)
    w.dims[i] = w.strides[i] = w.base_dilation[i] = w.window_dilation[i] = 1;
  return w;
}

static bool window_type(const tt_hlo_type *xt, const tt_hlo_window *w, tt_hlo_type *t) {
  *t = *xt;
  for (int i = 0; i < xt->rank; i++) {
    if (w->dims[i] < 1 || w->strides[i] < 1 || w->base_dilation[i] < 1 ||
        w->window_dilation[i] < 1)
      return false;
    int64_t in = xt->dims[i];
    int64_t padded = (in > 0 ? (in - 1) * w->base_dilation[i] + 1 : 0) + w->pad_lo[i] + w->pad_hi[i];
    int64_t dk = (w->dims[i] - 1) * w->window_dilation[i] + 1;
    t->dims[i] = padded < dk ? 0 : (padded - dk) / w->strides[i] + 1;
  }
  return true;
}

static void put_window_attrs(tt_hlo_buf *s, const tt_hlo_window *w, int rank) {
  tt_hlo_buf_printf(s, " {base_dilations = ");
  tt_hlo_put_i64s(s, w->base_dilation, rank);
  tt_hlo_buf_printf(s, ", padding = ");
  put_pairs(s, w->pad_lo, w->pad_hi, rank);
  tt_hlo_buf_printf(s, ", window_dilations = ");
  tt_hlo_put_i64s(s, w->window_dilation, rank);
  tt_hlo_buf_printf(s, ", window_dimensions = ");
  tt_hlo_put_i64s(s, w->dims, rank);
  tt_hlo_buf_printf(s, ", window_strides = ");
  tt_hlo_put_i64s(s, w->strides, rank);
  tt_hlo_buf_printf(s, "}");
}

// Emits reduce_window over operands xs[0..n) with inits xs[n..2n); `region`
// writes the body. Returns the first of n results.
static tt_hv reduce_window(tt_hlo *b, const tt_hv *xs, int n, const tt_hlo_window *w,
                           int kind, bool is_max) {
  if (!tt_hlo_ok(b, xs, 2 * n)) return TT_HV_INVALID;
  tt_hlo_type rt[2];
  const tt_hlo_type *xt = ty(b, xs[0]);
  bool ok = window_type(xt, w, &rt[0]);
  for (int i = 0; ok && i < n; i++) {
    tt_hlo_type u = *ty(b, xs[i]);
    u.dtype = xt->dtype;
    ok = tt_hlo_same_type(&u, xt) && ty(b, xs[n + i])->rank == 0 &&
         ty(b, xs[n + i])->dtype == ty(b, xs[i])->dtype;
    rt[i] = rt[0];
    rt[i].dtype = ty(b, xs[i])->dtype;
  }
  if (!ok) {
    tt_hlo_failf(b, "reduce_window: bad window or operands for rank %d", (int)xt->rank);
    return TT_HV_INVALID;
  }
  tt_hv r = tt_hlo_new_values(b, rt, n);
  if (r == TT_HV_INVALID) return r;
  tt_hlo_begin_line(b, r, n);
  tt_hlo_buf_printf(&b->body, "\"stablehlo.reduce_window\"(");
  for (int i = 0; i < 2 * n; i++) {
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_name(b, &b->body, xs[i]);
  }
  tt_hlo_buf_printf(&b->body, ")");
  if (n == 1) {
    tt_dtype d = rt[0].dtype;
    tt_hlo_combiner_region(b, &d, 1, kind);
  } else {
    tt_hlo_argreduce_region(b, rt[0].dtype, rt[1].dtype, is_max);
  }
  put_window_attrs(&b->body, w, xt->rank);
  tt_hlo_put_types(b, &b->body, xs, 2 * n);
  tt_hlo_buf_printf(&b->body, n > 1 ? "(" : "");
  for (int i = 0; i < n; i++) {
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_type(&b->body, &rt[i]);
  }
  tt_hlo_buf_printf(&b->body, n > 1 ? ")\n" : "\n");
  return r;
}

tt_hv tt_hlo_reduce_window(tt_hlo *b, tt_hv x, tt_hv init,
                           const tt_hlo_window *w, tt_hlo_reduce_kind kind) {
  tt_hv xs[2] = {x, init};
  if (kind < TT_HLO_REDUCE_ADD || kind > TT_HLO_REDUCE_OR) {
    tt_hlo_failf(b, "reduce_window: bad kind %d", (int)kind);
    return TT_HV_INVALID;
  }
  return reduce_window(b, xs, 1, w, (int)kind, false);
}

void tt_hlo_argreduce_window(tt_hlo *b, tt_hv x, tt_hv idx,
                             const tt_hlo_window *w, bool is_max,
                             tt_hv *out_values, tt_hv *out_idx) {
  *out_values = *out_idx = TT_HV_INVALID;
  tt_hv xi[2] = {x, idx};
  if (!tt_hlo_ok(b, xi, 2)) return;
  tt_dtype vd = ty(b, x)->dtype, id = ty(b, idx)->dtype;
  tt_hv init;
  if (is_float(vd)) {
    init = tt_hlo_const(b, vd, is_max ? -INFINITY : INFINITY);
  } else {
    int bits = (int)tt_dtype_size(vd) * 8;
    bool uns = vd == TT_BOOL || vd == TT_U8 || vd == TT_U16 || vd == TT_U32 || vd == TT_U64;
    int64_t hi = bits == 64 ? INT64_MAX : (INT64_C(1) << (bits - 1)) - 1;
    init = uns ? tt_hlo_const_i(b, vd, is_max ? 0 : -1)
               : tt_hlo_const_i(b, vd, is_max ? -hi - 1 : hi);
  }
  tt_hv xs[4] = {x, idx, init, tt_hlo_const_i(b, id, -1)};
  tt_hv r = reduce_window(b, xs, 2, w, 0, is_max);
  if (r == TT_HV_INVALID) return;
  *out_values = r;
  *out_idx = r + 1;
}

// --- sort ----------------------------------------------------------------------------------

// lhs comes before rhs: a < b (a > b descending), NaN counting as largest.
static void sort_region(tt_hlo *b, tt_dtype vd, const tt_dtype *payload, bool descending) {
  tt_dtype dts[4] = {vd, vd, TT_I64, TT_I64};
  int n = 2;
  if (payload) {
    dts[2] = dts[3] = *payload;
    n = 4;
  }
  tt_hv a[4];
  tt_hlo_region_begin(b, dts, n, a);
  tt_hv lhs = a[0], rhs = a[1];
  if (descending) {
    lhs = a[1];
    rhs = a[0];
  }
  tt_hv before = tt_hlo_compare(b, TT_HLO_LT, lhs, rhs);
  if (is_float(vd)) {
    tt_hv lhs_num = tt_hlo_compare(b, TT_HLO_EQ, lhs, lhs);
    tt_hv rhs_nan = tt_hlo_compare(b, TT_HLO_NE, rhs, rhs);
    before = tt_hlo_binary(b, TT_HLO_OR, before, tt_hlo_binary(b, TT_HLO_AND, lhs_num, rhs_nan));
  }
  tt_hlo_region_end(b, &before, 1);
}

void tt_hlo_sort(tt_hlo *b, tt_hv x, tt_hv payload, int64_t dim,
                 bool descending, tt_hv *out_values, tt_hv *out_payload) {
  *out_values = TT_HV_INVALID;
  if (out_payload) *out_payload = TT_HV_INVALID;
  bool has_payload = payload != TT_HV_INVALID;
  tt_hv xs[2] = {x, payload};
  int n = has_payload ? 2 : 1;
  if (!tt_hlo_ok(b, xs, n)) return;
  tt_hlo_type t[2] = {*ty(b, x), *ty(b, x)};
  bool ok = dim >= 0 && dim < t[0].rank && t[0].dtype != TT_BOOL;
  if (has_payload) {
    t[1] = *ty(b, payload);
    tt_hlo_type u = t[1];
    u.dtype = t[0].dtype;
    ok = ok && tt_hlo_same_type(&u, &t[0]);
  }
  if (!ok) {
    tt_hlo_failf(b, "sort: dim %" PRId64 " of rank %d, or payload shape differs",
                 dim, (int)t[0].rank);
    return;
  }
  tt_hv r = tt_hlo_new_values(b, t, n);
  if (r == TT_HV_INVALID) return;
  tt_hlo_begin_line(b, r, n);
  tt_hlo_buf_printf(&b->body, "\"stablehlo.sort\"(");
  for (int i = 0; i < n; i++) {
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_name(b, &b->body, xs[i]);
  }
  tt_hlo_buf_printf(&b->body, ")");
  sort_region(b, t[0].dtype, has_payload ? &t[1].dtype : NULL, descending);
  tt_hlo_buf_printf(&b->body, " {dimension = %" PRId64 " : i64, is_stable = true}", dim);
  tt_hlo_put_types(b, &b->body, xs, n);
  tt_hlo_buf_printf(&b->body, n > 1 ? "(" : "");
  for (int i = 0; i < n; i++) {
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_type(&b->body, &t[i]);
  }
  tt_hlo_buf_printf(&b->body, n > 1 ? ")\n" : "\n");
  *out_values = r;
  if (has_payload && out_payload) *out_payload = r + 1;
}
