// conv.c — convolutions and pooling: convolution_overrideable and its
// backward (1-3 spatial dims, groups, stride, padding, dilation, transposed
// with output_padding), max_pool2d_with_indices and its backward, avg_pool2d
// and its backward, _adaptive_avg_pool2d and its backward.
//
// Convolution backward is two more convolutions: grad_input is the
// transposed convolution of grad_output (and vice versa for a transposed
// forward), grad_weight a convolution of the input with grad_output whose
// batch and feature dims trade places (batch_group_count = groups). Adaptive
// average pooling is two small matmuls with constant pooling matrices, which
// covers uneven windows and gives the backward as the transposed products.
//
// Leaves out: adaptive max pooling, 1-d/3-d pooling ops, pooling over
// integer tensors with count_include_pad corner cases, channels-last hints.
#include <inttypes.h>
#include <string.h>

#include "lower/lower.h"

// int[] argument i as n values: a single value repeats, [] (or None) gives
// `dflt` (NULL: zeros). False when the length is neither 1 nor n.
static bool ints_arg(const tt_lower_ctx *c, int i, int n, const int64_t *dflt, int64_t *out) {
  const tt_value *v = tt_lower_arg(c, i);
  int m = v->kind == TT_VALUE_INTS ? v->u.ints.n : 0;
  if (v->kind == TT_VALUE_INT) {
    for (int k = 0; k < n; k++) out[k] = v->u.i;
    return true;
  }
  for (int k = 0; k < n; k++) {
    if (m == 0) out[k] = dflt ? dflt[k] : 0;
    else if (m == 1) out[k] = v->u.ints.data[0];
    else if (m == n) out[k] = v->u.ints.data[k];
    else return false;
  }
  return true;
}

// --- convolution ------------------------------------------------------------------------

typedef struct conv_args {
  int ns;  // spatial dims
  int64_t stride[3], pad[3], dil[3], outpad[3], groups;
  bool transposed;
} conv_args;

// Reads stride, padding, dilation, transposed, output_padding, groups from
// argument `first` on (the shared tail of both schemas).
static tt_status read_conv_args(tt_lower_ctx *c, int first, int rank, conv_args *a) {
  a->ns = rank - 2;
  static const int64_t ones[3] = {1, 1, 1};
  if (a->ns < 1 || a->ns > 3)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "convolution of a %dD input", rank);
  if (!ints_arg(c, first, a->ns, ones, a->stride) || !ints_arg(c, first + 1, a->ns, NULL, a->pad) ||
      !ints_arg(c, first + 2, a->ns, ones, a->dil) || !ints_arg(c, first + 4, a->ns, NULL, a->outpad))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "stride, padding, dilation and "
                         "output_padding need %d values each", a->ns);
  a->transposed = tt_lower_bool(c, first + 3);
  a->groups = tt_lower_int(c, first + 5);
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "stride", a->stride, a->ns));
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "padding", a->pad, a->ns));
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "dilation", a->dil, a->ns));
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "output_padding", a->outpad, a->ns));
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "groups", &a->groups, 1));
  for (int i = 0; i < a->ns; i++)
    if (a->stride[i] < 1 || a->dil[i] < 1 || a->pad[i] < 0)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "non-positive stride or dilation, or "
                           "negative padding");
  if (a->groups < 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "non-positive groups is not supported");
  return NULL;
}

// The NC<spatial> layout on all three operands.
static tt_hlo_conv_dims nchw_dims(int ns) {
  tt_hlo_conv_dims d;
  memset(&d, 0, sizeof d);
  d.nspatial = ns;
  d.in_batch = d.k_out = d.out_batch = 0;
  d.in_feature = d.k_in = d.out_feature = 1;
  for (int i = 0; i < ns; i++) {
    d.in_spatial[i] = d.k_spatial[i] = d.out_spatial[i] = 2 + i;
    d.stride[i] = d.lhs_dilation[i] = d.rhs_dilation[i] = 1;
  }
  d.feature_groups = d.batch_groups = 1;
  return d;
}

// x [N, C, *] with weight [O, C/g, *k]: the ordinary convolution.
static tt_hv conv_forward(tt_lower_ctx *c, tt_hv x, tt_hv w, const conv_args *a) {
  tt_hlo_conv_dims d = nchw_dims(a->ns);
  for (int i = 0; i < a->ns; i++) {
    d.stride[i] = a->stride[i];
    d.pad_lo[i] = d.pad_hi[i] = a->pad[i];
    d.rhs_dilation[i] = a->dil[i];
  }
  d.feature_groups = a->groups;
  return tt_hlo_convolution(tt_lower_hlo(c), x, w, &d);
}

// x [N, C, *] with a transposed weight [C, O/g, *k]: the gradient of the
// ordinary convolution, i.e. a convolution of the stride-dilated input with
// the flipped, in/out-swapped kernel.
static tt_hv conv_transposed(tt_lower_ctx *c, tt_hv x, tt_hv w, const conv_args *a,
                             const int64_t *outpad) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type wt = tt_lower_type(c, w);
  int64_t g = a->groups, cin = wt.dims[0], cog = wt.dims[1];
  int64_t split[TT_MAX_RANK] = {g, cin / g, cog}, perm[TT_MAX_RANK] = {0, 2, 1};
  for (int i = 0; i < a->ns; i++) {
    split[3 + i] = wt.dims[2 + i];
    perm[3 + i] = 3 + i;
  }
  tt_hv ww = tt_hlo_transpose(b, tt_hlo_reshape(b, w, 3 + a->ns, split), perm);
  int64_t merged[TT_MAX_RANK] = {g * cog, cin / g}, flip[3];
  for (int i = 0; i < a->ns; i++) {
    merged[2 + i] = wt.dims[2 + i];
    flip[i] = 2 + i;
  }
  ww = tt_hlo_reverse(b, tt_hlo_reshape(b, ww, 2 + a->ns, merged), flip, a->ns);
  tt_hlo_conv_dims d = nchw_dims(a->ns);
  for (int i = 0; i < a->ns; i++) {
    int64_t ext = a->dil[i] * (wt.dims[2 + i] - 1);
    d.lhs_dilation[i] = a->stride[i];
    d.rhs_dilation[i] = a->dil[i];
    d.pad_lo[i] = ext - a->pad[i];
    d.pad_hi[i] = ext - a->pad[i] + outpad[i];
  }
  d.feature_groups = g;
  return tt_hlo_convolution(b, x, ww, &d);
}

// The weight gradient of x [N, C, *] convolved into dy [N, O, *out]:
// [O, C/g, *k] with kernel sizes k.
static tt_hv conv_weight_grad(tt_lower_ctx *c, tt_hv x, tt_hv dy, const conv_args *a,
                              const int64_t *k) {
  tt_hlo_type xt = tt_lower_type(c, x), yt = tt_lower_type(c, dy);
  tt_hlo_conv_dims d = nchw_dims(a->ns);
  d.in_batch = 1;  // input channels play the batch
  d.in_feature = 0;
  d.k_out = 1;
  d.k_in = 0;
  d.out_batch = 1;
  d.out_feature = 0;
  for (int i = 0; i < a->ns; i++) {
    d.stride[i] = a->dil[i];
    d.rhs_dilation[i] = a->stride[i];
    d.pad_lo[i] = a->pad[i];
    d.pad_hi[i] = (k[i] - 1) * a->dil[i] + (yt.dims[2 + i] - 1) * a->stride[i] + 1 -
                  xt.dims[2 + i] - a->pad[i];
  }
  d.batch_groups = a->groups;
  return tt_hlo_convolution(tt_lower_hlo(c), x, dy, &d);
}

// `forward`: integer tensors are fine too (PyTorch's CPU convolves them with
// wrapping integer arithmetic, as stablehlo.convolution does); they have no
// gradient, so the backward takes floating dtypes only.
static tt_status check_conv(tt_lower_ctx *c, const tt_hlo_type *xt, const tt_hlo_type *wt,
                            const conv_args *a, bool forward) {
  char s1[96], s2[96];
  int64_t cin = a->transposed ? wt->dims[0] : wt->dims[1] * a->groups;
  bool bad = wt->rank != xt->rank || xt->dims[1] != cin ||
             (a->transposed ? wt->dims[0] % a->groups : wt->dims[0] % a->groups);
  if (bad)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input %s and weight %s don't fit "
                         "(groups=%" PRId64 "%s)", tt_shape_str(xt, s1, sizeof s1),
                         tt_shape_str(wt, s2, sizeof s2), a->groups,
                         a->transposed ? ", transposed" : "");
  bool ok_dtype = tt_dtype_is_float(xt->dtype) || (forward && tt_dtype_is_int(xt->dtype));
  if (!ok_dtype || xt->dtype != wt->dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input (%s) and weight (%s) must be the "
                         "same floating%s dtype", tt_dtype_name(xt->dtype),
                         tt_dtype_name(wt->dtype), forward ? " or integer" : "");
  return NULL;
}

// convolution_overrideable(input, weight, bias?, stride, padding, dilation,
//                          transposed, output_padding, groups)
static tt_status lower_convolution(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1), wt = tt_lower_tensor_type(c, 1, -1);
  conv_args a;
  TT_RETURN_IF_ERROR(read_conv_args(c, 3, xt.rank, &a));
  TT_RETURN_IF_ERROR(check_conv(c, &xt, &wt, &a, true));
  tt_hv x = tt_lower_tensor(c, 0), w = tt_lower_tensor(c, 1);
  tt_hv y = a.transposed ? conv_transposed(c, x, w, &a, a.outpad) : conv_forward(c, x, w, &a);
  if (!tt_lower_is_none(c, 2)) {
    tt_hlo_type yt = tt_lower_type(c, y);
    int64_t one = 1;
    tt_hv bias = tt_hlo_convert(tt_lower_hlo(c), tt_lower_tensor(c, 2), yt.dtype);
    y = tt_hlo_binary(tt_lower_hlo(c), TT_HLO_ADD, y,
                      tt_hlo_broadcast_in_dim(tt_lower_hlo(c), bias, yt.rank, yt.dims, &one));
  }
  tt_lower_result(c, y);
  return NULL;
}

// convolution_backward_overrideable(grad_output, input, weight, stride,
//   padding, dilation, transposed, output_padding, groups, output_mask)
//   -> (grad_input, grad_weight, grad_bias); all three are always computed.
static tt_status lower_convolution_backward(tt_lower_ctx *c) {
  tt_hlo_type gt = tt_lower_tensor_type(c, 0, -1), xt = tt_lower_tensor_type(c, 1, -1),
              wt = tt_lower_tensor_type(c, 2, -1);
  conv_args a;
  TT_RETURN_IF_ERROR(read_conv_args(c, 3, xt.rank, &a));
  TT_RETURN_IF_ERROR(check_conv(c, &xt, &wt, &a, false));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv g = tt_lower_tensor(c, 0), x = tt_lower_tensor(c, 1), w = tt_lower_tensor(c, 2);
  int64_t k[3];
  for (int i = 0; i < a.ns; i++) k[i] = wt.dims[2 + i];
  tt_hv gx, gw;
  if (!a.transposed) {
    int64_t outpad[3];
    for (int i = 0; i < a.ns; i++)
      outpad[i] = xt.dims[2 + i] - ((gt.dims[2 + i] - 1) * a.stride[i] - 2 * a.pad[i] +
                                    a.dil[i] * (k[i] - 1) + 1);
    gx = conv_transposed(c, g, w, &a, outpad);
    gw = conv_weight_grad(c, x, g, &a, k);
  } else {
    gx = conv_forward(c, g, w, &a);
    gw = conv_weight_grad(c, g, x, &a, k);
  }
  // Rounding differences aside, shapes must match exactly.
  tt_hlo_type gxt = tt_lower_type(c, gx);
  if (!tt_hlo_status(b) && !tt_hlo_same_type(&gxt, &xt)) {
    char s1[96], s2[96];
    return tt_lower_fail(c, TT_INTERNAL, "grad_input %s for input %s",
                         tt_shape_str(&gxt, s1, sizeof s1), tt_shape_str(&xt, s2, sizeof s2));
  }
  bool mask[TT_MAX_RANK] = {true, false, true, true, true, true, true, true};
  tt_hv gb = tt_lower_reduce(c, tt_hlo_convert(b, g, tt_opmath(gt.dtype)), mask, false,
                             TT_HLO_REDUCE_ADD);
  tt_lower_result(c, gx);
  tt_lower_result(c, gw);
  tt_lower_result(c, tt_hlo_convert(b, gb, gt.dtype));
  return NULL;
}

// --- pooling: shared ----------------------------------------------------------------------

typedef struct pool_args {
  int64_t k[2], s[2], p[2], d[2];
  bool ceil;
  int64_t in[2], out[2], extra[2];  // extra: padding past the end for ceil_mode
} pool_args;

// PyTorch's pooling_output_shape. The division rounds toward -inf, as
// PyTorch's div_rtn does: a kernel larger than the padded input gives a
// negative numerator and an output size <= 0, refused by the caller (C's
// truncating division would give 1).
static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  int64_t q = num / s;
  if (num % s != 0 && num < 0) q--;
  int64_t o = q + 1;
  if (ceil && (o - 1) * s >= in + p) o--;
  return o;
}

// Reads kernel (arg k), stride (k+1), padding (k+2) and, when dil >= 0,
// dilation; ceil_mode at arg `ceil_arg`; for an input of type xt.
static tt_status read_pool(tt_lower_ctx *c, const tt_hlo_type *xt, int k, int dil,
                           int ceil_arg, pool_args *a) {
  static const int64_t ones[2] = {1, 1};
  if (xt->rank != 3 && xt->rank != 4)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a 3D or 4D input, got %dD",
                         (int)xt->rank);
  if (!ints_arg(c, k, 2, NULL, a->k) || !ints_arg(c, k + 1, 2, a->k, a->s) ||
      !ints_arg(c, k + 2, 2, NULL, a->p) || !ints_arg(c, dil, 2, ones, a->d))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "kernel_size, stride, padding and "
                         "dilation must have one or two values");
  if (dil < 0) a->d[0] = a->d[1] = 1;
  a->ceil = tt_lower_bool(c, ceil_arg);
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "kernel_size", a->k, 2));
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "stride", a->s, 2));
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "padding", a->p, 2));
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "dilation", a->d, 2));
  TT_RETURN_IF_ERROR(tt_lower_check_pool(c, 2, a->k, a->s, a->p, a->d));
  TT_RETURN_IF_ERROR(tt_lower_check_pool_input(c, xt, 2, NULL));
  for (int i = 0; i < 2; i++) {
    a->in[i] = xt->dims[xt->rank - 2 + i];
    a->out[i] = pool_out(a->in[i], a->k[i], a->s[i], a->p[i], a->d[i], a->ceil);
    if (a->out[i] < 1) {
      int64_t out[2];
      for (int j = 0; j < 2; j++)
        out[j] = pool_out(xt->dims[xt->rank - 2 + j], a->k[j], a->s[j], a->p[j], a->d[j], a->ceil);
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Given input size: (%" PRId64 "x%" PRId64
                           "x%" PRId64 "). Calculated output size: (%" PRId64 "x%" PRId64
                           "x%" PRId64 "). Output size is too small (kernel %" PRId64 "x%"
                           PRId64 ", padding %" PRId64 "x%" PRId64 ")",
                           xt->dims[xt->rank - 3], xt->dims[xt->rank - 2], xt->dims[xt->rank - 1],
                           xt->dims[xt->rank - 3], out[0], out[1], a->k[0], a->k[1], a->p[0], a->p[1]);
    }
    a->extra[i] = (a->out[i] - 1) * a->s[i] + a->d[i] * (a->k[i] - 1) + 1 - a->in[i] - 2 * a->p[i];
    if (a->extra[i] < 0) a->extra[i] = 0;
  }
  return NULL;
}

static tt_hlo_window pool_window(const pool_args *a, int rank) {
  tt_hlo_window w = tt_hlo_window_identity(rank);
  for (int i = 0; i < 2; i++) {
    int r = rank - 2 + i;
    w.dims[r] = a->k[i];
    w.strides[r] = a->s[i];
    w.pad_lo[r] = a->p[i];
    w.pad_hi[r] = a->p[i] + a->extra[i];
    w.window_dilation[r] = a->d[i];
  }
  return w;
}

// --- max_pool2d_with_indices ----------------------------------------------------------------

// (self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices)
static tt_status lower_max_pool2d(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  pool_args a;
  TT_RETURN_IF_ERROR(read_pool(c, &xt, 1, 4, 5, &a));
  tt_hlo *b = tt_lower_hlo(c);
  int64_t plane = a.in[0] * a.in[1];
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 1, &plane);
  tt_hv idx = tt_hlo_reshape(b, tt_hlo_iota(b, &it, 0), 2, a.in);
  int64_t bd[2] = {xt.rank - 2, xt.rank - 1};
  idx = tt_hlo_broadcast_in_dim(b, idx, xt.rank, xt.dims, bd);
  tt_hlo_window w = pool_window(&a, xt.rank);
  tt_hv vals, ids;
  tt_hlo_argreduce_window(b, tt_lower_tensor(c, 0), idx, &w, true, &vals, &ids);
  tt_lower_result(c, vals);
  tt_lower_result(c, ids);
  return NULL;
}

// (grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
//  indices): each gradient goes to the input position its index names.
static tt_status lower_max_pool2d_backward(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 1, -1), gt = tt_lower_tensor_type(c, 0, -1);
  tt_hlo *b = tt_lower_hlo(c);
  if (xt.rank < 2 || gt.rank != xt.rank)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grad_output and self ranks differ");
  int64_t planes = 1, plane = xt.dims[xt.rank - 2] * xt.dims[xt.rank - 1];
  int64_t oplane = gt.dims[gt.rank - 2] * gt.dims[gt.rank - 1];
  for (int i = 0; i < xt.rank - 2; i++) planes *= xt.dims[i];
  tt_dtype acc = tt_opmath(xt.dtype);
  int64_t pd[2] = {planes, oplane}, n = planes * oplane, total = planes * plane;
  tt_hv idx = tt_hlo_reshape(b, tt_hlo_convert(b, tt_lower_tensor(c, 7), TT_I64), 2, pd);
  tt_hlo_type pt = tt_hlo_make_type(TT_I64, 2, pd);
  tt_hv base = tt_hlo_binary(b, TT_HLO_MUL, tt_hlo_iota(b, &pt, 0), tt_hlo_splat_i(b, &pt, plane));
  int64_t col[2] = {n, 1};
  tt_hv flat_idx = tt_hlo_reshape(b, tt_hlo_binary(b, TT_HLO_ADD, base, idx), 2, col);
  tt_hv upd = tt_hlo_reshape(b, tt_hlo_convert(b, tt_lower_tensor(c, 0), acc), 1, &n);
  tt_hlo_type zt = tt_hlo_make_type(acc, 1, &total);
  static const int64_t zero = 0;
  tt_hlo_scatter_dims sd = {.inserted_window_dims = &zero, .n_inserted = 1,
                            .scatter_dims_to_operand_dims = &zero, .n_scatter_to_operand = 1,
                            .index_vector_dim = 1};
  tt_hv gx = tt_hlo_scatter(b, tt_hlo_splat(b, &zt, 0), flat_idx, upd, &sd, TT_HLO_REDUCE_ADD);
  gx = tt_hlo_reshape(b, gx, xt.rank, xt.dims);
  tt_lower_result(c, tt_hlo_convert(b, gx, xt.dtype));
  return NULL;
}

// --- avg_pool2d -----------------------------------------------------------------------------

// The divisor of each output position [OH, OW] (opmath dtype).
static tt_hv avg_divisor(tt_lower_ctx *c, const pool_args *a, bool include_pad, int div_arg,
                         tt_dtype acc) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type ot = tt_hlo_make_type(acc, 2, a->out);
  if (!tt_lower_is_none(c, div_arg)) {
    int64_t dv = tt_lower_int(c, div_arg);
    return tt_hlo_splat(b, &ot, (double)dv);
  }
  tt_hlo_type one_t = tt_hlo_make_type(acc, 2, a->in);
  tt_hv ones = tt_hlo_splat(b, &one_t, 1);
  tt_hlo_window w = pool_window(a, 2);
  if (include_pad) {  // the padding counts, the ceil_mode overhang doesn't
    static const int64_t none[2] = {0, 0};
    ones = tt_hlo_pad(b, ones, tt_hlo_const(b, acc, 1), a->p, a->p, none);
    w.pad_lo[0] = w.pad_lo[1] = 0;
    w.pad_hi[0] = a->extra[0];
    w.pad_hi[1] = a->extra[1];
  }
  return tt_hlo_reduce_window(b, ones, tt_hlo_const(b, acc, 0), &w, TT_HLO_REDUCE_ADD);
}

// (self, kernel_size, stride, padding, ceil_mode, count_include_pad,
//  divisor_override)
static tt_status lower_avg_pool2d(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  pool_args a;
  TT_RETURN_IF_ERROR(read_pool(c, &xt, 1, -1, 4, &a));
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype acc = tt_opmath(xt.dtype);
  if (!tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "avg_pool2d of %s", tt_dtype_name(xt.dtype));
  tt_hlo_window w = pool_window(&a, xt.rank);
  tt_hv s = tt_hlo_reduce_window(b, tt_hlo_convert(b, tt_lower_tensor(c, 0), acc),
                                 tt_hlo_const(b, acc, 0), &w, TT_HLO_REDUCE_ADD);
  tt_hlo_type st = tt_lower_type(c, s);
  int64_t bd[2] = {st.rank - 2, st.rank - 1};
  tt_hv div = tt_hlo_broadcast_in_dim(b, avg_divisor(c, &a, tt_lower_bool(c, 5), 6, acc),
                                      st.rank, st.dims, bd);
  tt_lower_result(c, tt_hlo_convert(b, tt_hlo_binary(b, TT_HLO_DIV, s, div), xt.dtype));
  return NULL;
}

// (grad_output, self, kernel_size, stride, padding, ceil_mode,
//  count_include_pad, divisor_override): every input position sums g/div
// over the windows covering it — a stride-dilated window sum.
static tt_status lower_avg_pool2d_backward(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 1, -1);
  pool_args a;
  TT_RETURN_IF_ERROR(read_pool(c, &xt, 2, -1, 5, &a));
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype acc = tt_opmath(xt.dtype);
  tt_hv g = tt_hlo_convert(b, tt_lower_tensor(c, 0), acc);
  tt_hlo_type gt = tt_lower_type(c, g);
  if (gt.rank != xt.rank)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grad_output is %dD but self is %dD",
                         (int)gt.rank, (int)xt.rank);
  int64_t bd[2] = {gt.rank - 2, gt.rank - 1};
  tt_hv div = tt_hlo_broadcast_in_dim(b, avg_divisor(c, &a, tt_lower_bool(c, 6), 7, acc),
                                      gt.rank, gt.dims, bd);
  g = tt_hlo_binary(b, TT_HLO_DIV, g, div);
  tt_hlo_window w = tt_hlo_window_identity(gt.rank);
  int64_t start[TT_MAX_RANK] = {0}, limit[TT_MAX_RANK], step[TT_MAX_RANK];
  for (int r = 0; r < xt.rank; r++) {
    limit[r] = xt.dims[r];
    step[r] = 1;
  }
  for (int i = 0; i < 2; i++) {
    int r = gt.rank - 2 + i;
    w.dims[r] = a.k[i];
    w.base_dilation[r] = a.s[i];
    w.pad_lo[r] = a.k[i] - 1 - a.p[i];
    int64_t hi = a.in[i] + a.k[i] - 1 - ((a.out[i] - 1) * a.s[i] + 1) - w.pad_lo[r];
    w.pad_hi[r] = hi > 0 ? hi : 0;
  }
  tt_hv gx = tt_hlo_reduce_window(b, g, tt_hlo_const(b, acc, 0), &w, TT_HLO_REDUCE_ADD);
  gx = tt_hlo_slice(b, gx, start, limit, step);
  tt_lower_result(c, tt_hlo_convert(b, gx, xt.dtype));
  return NULL;
}

// --- adaptive average pooling -----------------------------------------------------------------

// x [P, A, B] contracted with m0 [., A] over A and m1 [., B] over B; `dim`
// says which dim of the matrices is contracted (1 forward, 0 backward).
static tt_hv two_matmuls(tt_lower_ctx *c, tt_hv x, tt_hv m0, tt_hv m1, int64_t dim) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_type(c, x);
  static const int64_t one = 1;
  tt_hv y = tt_hlo_dot_general(b, x, m0, NULL, NULL, 0, &one, &dim, 1, xt.dtype);  // [P, B, A']
  return tt_hlo_dot_general(b, y, m1, NULL, NULL, 0, &one, &dim, 1, xt.dtype);     // [P, A', B']
}

static tt_status adaptive(tt_lower_ctx *c, bool backward) {
  int xi = backward ? 1 : 0;
  tt_hlo_type xt = tt_lower_tensor_type(c, xi, -1);
  if (xt.rank != 3 && xt.rank != 4)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a 3D or 4D input, got %dD",
                         (int)xt.rank);
  if (!tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "adaptive pooling of %s", tt_dtype_name(xt.dtype));
  int64_t out[2];
  if (backward) {
    tt_hlo_type gt = tt_lower_tensor_type(c, 0, -1);
    if (gt.rank != xt.rank)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grad_output is %dD but self is %dD",
                           (int)gt.rank, (int)xt.rank);
    for (int r = 0; r < xt.rank - 2; r++)
      if (gt.dims[r] != xt.dims[r])
        return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grad_output dim %d is %" PRId64
                             " but self's is %" PRId64, r, gt.dims[r], xt.dims[r]);
    TT_RETURN_IF_ERROR(tt_lower_check_nonempty(c, &gt, 1, "adaptive_avg_pool2d_backward",
                                               "grad_output"));
    out[0] = gt.dims[gt.rank - 2];
    out[1] = gt.dims[gt.rank - 1];
  } else {
    TT_RETURN_IF_ERROR(tt_lower_check_nonempty(c, &xt, xt.rank - 2, "adaptive_avg_pool2d", "input"));
    if (!ints_arg(c, 1, 2, NULL, out) || out[0] < 0 || out[1] < 0)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "adaptive_avg_pool2d: output_size must be 2 "
                           "sizes greater than or equal to 0");
  }
  tt_hlo *b = tt_lower_hlo(c);
  if (out[0] == 0 || out[1] == 0) {  // an empty output, as PyTorch gives
    tt_hlo_type rt = xt;
    rt.dims[rt.rank - 2] = out[0];
    rt.dims[rt.rank - 1] = out[1];
    tt_lower_result(c, tt_hlo_splat(b, &rt, 0));
    return NULL;
  }
  tt_dtype acc = tt_opmath(xt.dtype);
  int64_t in[2] = {xt.dims[xt.rank - 2], xt.dims[xt.rank - 1]}, planes = 1;
  for (int i = 0; i < xt.rank - 2; i++) planes *= xt.dims[i];
  tt_hv mh = tt_lower_adaptive_avg_matrix(c, out[0], in[0], acc), mw = tt_lower_adaptive_avg_matrix(c, out[1], in[1], acc);
  tt_hv v = tt_hlo_convert(b, tt_lower_tensor(c, 0), acc);
  int64_t from[3] = {planes, backward ? out[0] : in[0], backward ? out[1] : in[1]};
  v = two_matmuls(c, tt_hlo_reshape(b, v, 3, from), mh, mw, backward ? 0 : 1);
  tt_hlo_type rt = xt;
  if (!backward) {
    rt.dims[rt.rank - 2] = out[0];
    rt.dims[rt.rank - 1] = out[1];
  }
  tt_lower_result(c, tt_hlo_convert(b, tt_hlo_reshape(b, v, rt.rank, rt.dims), xt.dtype));
  return NULL;
}

static tt_status lower_adaptive_avg_pool2d(tt_lower_ctx *c) { return adaptive(c, false); }
static tt_status lower_adaptive_avg_pool2d_backward(tt_lower_ctx *c) { return adaptive(c, true); }

// --- the table -------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
#define RC(name, fn) {"aten::" name, fn, TT_RULE_REPLACES_COMPOSITE}
static const tt_rule kRules[] = {
    RC("convolution_overrideable", lower_convolution),
    RC("convolution_backward_overrideable", lower_convolution_backward),
    R("max_pool2d_with_indices", lower_max_pool2d),
    R("max_pool2d_with_indices.out", lower_max_pool2d),
    R("max_pool2d_with_indices_backward", lower_max_pool2d_backward),
    R("max_pool2d_with_indices_backward.grad_input", lower_max_pool2d_backward),
    R("avg_pool2d", lower_avg_pool2d), R("avg_pool2d.out", lower_avg_pool2d),
    R("avg_pool2d_backward", lower_avg_pool2d_backward),
    R("avg_pool2d_backward.grad_input", lower_avg_pool2d_backward),
    R("_adaptive_avg_pool2d", lower_adaptive_avg_pool2d),
    R("_adaptive_avg_pool2d.out", lower_adaptive_avg_pool2d),
    R("_adaptive_avg_pool2d_backward", lower_adaptive_avg_pool2d_backward),
    R("_adaptive_avg_pool2d_backward.out", lower_adaptive_avg_pool2d_backward),
};
#undef R
#undef RC

const tt_rule_table tt_rules_conv = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
