// norm.c — normalisation layers: native_batch_norm (training, with the
// running statistics updated in place, and eval) and its backward, the
// _native_batch_norm_legit variants, native_layer_norm and native_group_norm
// with their backward ops.
//
// Statistics are computed two-pass in the opmath dtype (float32 for 16-bit
// floats); the variance is biased for normalising and unbiased (n / (n-1))
// for the running variance, as PyTorch does. native_batch_norm's schema
// doesn't mark running_mean/var as written, yet PyTorch updates them: the
// rule writes them with tt_lower_write_arg.
//
// _batch_norm_with_update (the training form export and torch.compile
// trace) is native_batch_norm in training with the stats updated, plus an
// empty reserve; _batch_norm_no_update is its evaluation twin. Their
// backward, batch_norm_backward, is native_batch_norm_backward with a
// trailing (unused) reserve.
//
// Leaves out: cudnn/miopen variants, channels-last layouts (views are
// materialised in logical order anyway).
#include <inttypes.h>
#include <math.h>

#include "lower/lower.h"

// The dtype of saved statistics (mean, rstd): PyTorch's CPU kernels keep
// the input's dtype, except for a 16-bit input with a float32 weight
// ("mixed type"), where they are float32.
static tt_dtype stats_dtype(const tt_lower_ctx *c, tt_dtype x, int weight_arg) {
  if (x != TT_F16 && x != TT_BF16) return x;
  if (tt_lower_is_none(c, weight_arg)) return x;
  return tt_lower_tensor_type(c, weight_arg, -1).dtype == TT_F32 ? TT_F32 : x;
}

// A per-channel [C] value broadcast along dim 1 of `like`.
static tt_hv per_channel(tt_lower_ctx *c, tt_hv v, tt_hv like) {
  tt_hlo_type t = tt_lower_type(c, like);
  int64_t one = 1;
  return tt_hlo_broadcast_in_dim(tt_lower_hlo(c), v, t.rank, t.dims, &one);
}

// Optional tensor argument i as opmath [n], or a splat of `dflt`.
static tt_hv opt_vec(tt_lower_ctx *c, int i, int64_t n, tt_dtype acc, double dflt) {
  if (!tt_lower_is_none(c, i))
    return tt_hlo_reshape(tt_lower_hlo(c), tt_lower_convert(c, tt_lower_tensor(c, i), acc), 1, &n);
  tt_hlo_type t = tt_hlo_make_type(acc, 1, &n);
  return tt_hlo_splat(tt_lower_hlo(c), &t, dflt);
}

static tt_hv mean_over(tt_lower_ctx *c, tt_hv v, const bool *mask, double n) {
  tt_hv s = tt_lower_reduce(c, v, mask, true, TT_HLO_REDUCE_ADD);
  return tt_lower_bin(c, TT_HLO_DIV, s, tt_lower_splat_like(c, s, n));
}

static tt_hv rsqrt_eps(tt_lower_ctx *c, tt_hv var, int eps_arg, tt_dtype acc) {
  tt_hlo_type t = tt_lower_type(c, var);
  tt_hv eps = tt_lower_broadcast_to(c, tt_lower_scalar(c, eps_arg, acc), t.rank, t.dims);
  return tt_hlo_unary(tt_lower_hlo(c), TT_HLO_RSQRT, tt_lower_bin(c, TT_HLO_ADD, var, eps));
}

// --- batch norm -------------------------------------------------------------------------

typedef struct bn_args {
  int x, w, b, rm, rv;  // argument indices (-1: absent)
  bool training;
  int momentum, eps;
} bn_args;

// Per-channel arguments args[0..n) (-1 or None: absent) hold C elements:
// the first `flat` of them in any shape (read flat), the rest as [C] (the
// statistics, written back or read per channel). PyTorch's text.
static tt_status check_vecs(tt_lower_ctx *c, int64_t ch, const int *args,
                            const char *const *names, int flat, int n) {
  for (int k = 0; k < n; k++) {
    if (args[k] < 0 || tt_lower_is_none(c, args[k])) continue;
    tt_hlo_type vt = tt_lower_tensor_type(c, args[k], -1);
    if (k < flat ? tt_hlo_numel(&vt) != ch : (vt.rank != 1 || vt.dims[0] != ch))
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s should contain %" PRId64 " elements not %" PRId64,
                           names[k], ch, tt_hlo_numel(&vt));
  }
  return NULL;
}

// Normalises over every dim but 1; returns (out, save_mean, save_invstd)
// and, in training with running stats, updates them.
static tt_status batch_norm(tt_lower_ctx *c, const bn_args *a) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, a->x, -1);
  if (xt.rank < 2 || !tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a floating input with at least "
                         "2 dims, got %dD %s", (int)xt.rank, tt_dtype_name(xt.dtype));
  int64_t ch = xt.dims[1], n = tt_hlo_numel(&xt) / (ch ? ch : 1);
  tt_dtype acc = tt_opmath(xt.dtype);
  bool mask[TT_MAX_RANK] = {false};
  for (int d = 0; d < xt.rank; d++) mask[d] = d != 1;
  // weight, bias and the running statistics are [C] (PyTorch: "running_mean
  // should contain C elements not N").
  const int vecs[4] = {a->w, a->b, a->rm, a->rv};
  static const char *const kVecNames[4] = {"weight", "bias", "running_mean", "running_var"};
  TT_RETURN_IF_ERROR(check_vecs(c, ch, vecs, kVecNames, 2, 4));
  bool has_stats = a->rm >= 0 && !tt_lower_is_none(c, a->rm) && !tt_lower_is_none(c, a->rv);
  if (!a->training && !has_stats)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "running_mean and running_var must be "
                         "defined in evaluation mode");
  tt_hv x = tt_lower_convert(c, tt_lower_tensor(c, a->x), acc);
  tt_hv mean, invstd, save_mean, save_invstd;
  if (a->training) {
    tt_hv m = mean_over(c, x, mask, (double)n);  // keepdim
    tt_hv d = tt_lower_bin(c, TT_HLO_SUB, x, tt_lower_expand_like(c, m, x));
    tt_hv var = mean_over(c, tt_lower_bin(c, TT_HLO_MUL, d, d), mask, (double)n);
    mean = tt_hlo_reshape(b, m, 1, &ch);
    tt_hv var1 = tt_hlo_reshape(b, var, 1, &ch);
    invstd = rsqrt_eps(c, var1, a->eps, acc);
    save_mean = mean;
    save_invstd = invstd;
    if (has_stats) {
      tt_hv mom = tt_lower_broadcast_to(c, tt_lower_scalar(c, a->momentum, acc), 1, &ch);
      tt_hv keep = tt_lower_bin(c, TT_HLO_SUB, tt_lower_splat_like(c, mom, 1), mom);
      tt_hv rm = tt_lower_convert(c, tt_lower_tensor(c, a->rm), acc), rv = tt_lower_convert(c, tt_lower_tensor(c, a->rv), acc);
      tt_hv unbiased = tt_lower_bin(c, TT_HLO_MUL, var1,
                           tt_lower_splat_like(c, var1, n > 1 ? (double)n / (double)(n - 1) : INFINITY));
      tt_lower_write_arg(c, a->rm, tt_lower_bin(c, TT_HLO_ADD, tt_lower_bin(c, TT_HLO_MUL, keep, rm),
                                       tt_lower_bin(c, TT_HLO_MUL, mom, mean)));
      tt_lower_write_arg(c, a->rv, tt_lower_bin(c, TT_HLO_ADD, tt_lower_bin(c, TT_HLO_MUL, keep, rv),
                                       tt_lower_bin(c, TT_HLO_MUL, mom, unbiased)));
    }
  } else {
    mean = tt_lower_convert(c, tt_lower_tensor(c, a->rm), acc);
    invstd = rsqrt_eps(c, tt_lower_convert(c, tt_lower_tensor(c, a->rv), acc), a->eps, acc);
    int64_t zero = 0;
    tt_hlo_type et = tt_hlo_make_type(acc, 1, &zero);
    save_mean = save_invstd = tt_hlo_splat(b, &et, 0);
  }
  tt_hv scale = tt_lower_bin(c, TT_HLO_MUL, invstd, opt_vec(c, a->w, ch, acc, 1));
  tt_hv y = tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_SUB, x, per_channel(c, mean, x)), per_channel(c, scale, x));
  y = tt_lower_bin(c, TT_HLO_ADD, y, per_channel(c, opt_vec(c, a->b, ch, acc, 0), x));
  tt_lower_result(c, tt_lower_convert(c, y, xt.dtype));
  tt_dtype sd = stats_dtype(c, xt.dtype, a->w);
  tt_lower_result(c, tt_lower_convert(c, save_mean, sd));
  tt_lower_result(c, tt_lower_convert(c, save_invstd, sd));
  return NULL;
}

// native_batch_norm(input, weight?, bias?, running_mean?, running_var?,
//                   training, momentum, eps)
static tt_status lower_native_batch_norm(tt_lower_ctx *c) {
  bn_args a = {0, 1, 2, 3, 4, tt_lower_bool(c, 5), 6, 7};
  return batch_norm(c, &a);
}

// _native_batch_norm_legit(input, weight?, bias?, running_mean!, running_var!,
//                          training, momentum, eps)
static tt_status lower_bn_legit(tt_lower_ctx *c) { return lower_native_batch_norm(c); }

// _native_batch_norm_legit.no_stats(input, weight?, bias?, training, momentum, eps)
static tt_status lower_bn_legit_no_stats(tt_lower_ctx *c) {
  bn_args a = {0, 1, 2, -1, -1, tt_lower_bool(c, 3), 4, 5};
  return batch_norm(c, &a);
}

// _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean,
//                                      running_var, momentum, eps)
static tt_status lower_bn_legit_no_training(tt_lower_ctx *c) {
  bn_args a = {0, 1, 2, 3, 4, false, 5, 6};
  return batch_norm(c, &a);
}

// _batch_norm_with_update(input, weight?, bias?, running_mean!, running_var!,
//                         momentum, eps) -> (out, save_mean, save_invstd, reserve)
// reserve is an empty uint8 tensor, as PyTorch's CPU kernel returns (only
// cuDNN fills it).
static tt_status bn_with_reserve(tt_lower_ctx *c, const bn_args *a) {
  TT_RETURN_IF_ERROR(batch_norm(c, a));
  int64_t zero = 0;
  tt_hlo_type rt = tt_hlo_make_type(TT_U8, 1, &zero);
  tt_lower_result(c, tt_hlo_splat(tt_lower_hlo(c), &rt, 0));
  return NULL;
}

static tt_status lower_bn_with_update(tt_lower_ctx *c) {
  bn_args a = {0, 1, 2, 3, 4, true, 5, 6};
  return bn_with_reserve(c, &a);
}

// _batch_norm_no_update(input, weight?, bias?, running_mean?, running_var?,
//                       momentum, eps): evaluation with the running stats,
// empty saves and reserve. PyTorch's composite kernel calls the CPU kernel
// directly (it fails for any other device), so the rule replaces it.
static tt_status lower_bn_no_update(tt_lower_ctx *c) {
  bn_args a = {0, 1, 2, 3, 4, false, 5, 6};
  return bn_with_reserve(c, &a);
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?,
//   running_var?, save_mean?, save_invstd?, train, eps, output_mask)
// also batch_norm_backward(..., update, eps, output_mask, reserve): the same
// arguments with `update` for `train` and a trailing reserve it ignores.
static tt_status lower_native_batch_norm_backward(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 1, -1);
  if (xt.rank < 2 || !tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a floating input with at least "
                         "2 dims");
  bool train = tt_lower_bool(c, 7);
  int mi = train ? 5 : 3, vi = train ? 6 : 4;
  if (tt_lower_is_none(c, mi) || tt_lower_is_none(c, vi))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s statistics are missing",
                         train ? "saved" : "running");
  int64_t ch = xt.dims[1], n = tt_hlo_numel(&xt) / (ch ? ch : 1);
  const int vecs[3] = {2, mi, vi};
  const char *const names[3] = {"weight", train ? "save_mean" : "running_mean",
                                train ? "save_invstd" : "running_var"};
  TT_RETURN_IF_ERROR(check_vecs(c, ch, vecs, names, 1, 3));
  tt_dtype acc = tt_opmath(xt.dtype);
  bool mask[TT_MAX_RANK] = {false};
  for (int d = 0; d < xt.rank; d++) mask[d] = d != 1;
  tt_hv g = tt_lower_convert(c, tt_lower_tensor(c, 0), acc), x = tt_lower_convert(c, tt_lower_tensor(c, 1), acc);
  tt_hv mean = tt_lower_convert(c, tt_lower_tensor(c, mi), acc);
  tt_hv invstd = train ? tt_lower_convert(c, tt_lower_tensor(c, vi), acc)
                       : rsqrt_eps(c, tt_lower_convert(c, tt_lower_tensor(c, vi), acc), 8, acc);
  tt_hv w = opt_vec(c, 2, ch, acc, 1);
  tt_hv xhat = tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_SUB, x, per_channel(c, mean, x)),
                   per_channel(c, invstd, x));
  tt_hv gb = tt_lower_reduce(c, g, mask, false, TT_HLO_REDUCE_ADD);
  tt_hv gw = tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_MUL, g, xhat), mask, false, TT_HLO_REDUCE_ADD);
  tt_hv scale = per_channel(c, tt_lower_bin(c, TT_HLO_MUL, w, invstd), x), gx;
  if (train) {
    tt_hv inv_n = tt_lower_splat_like(c, gb, 1.0 / (double)(n ? n : 1));
    tt_hv mg = per_channel(c, tt_lower_bin(c, TT_HLO_MUL, gb, inv_n), x);
    tt_hv mgx = per_channel(c, tt_lower_bin(c, TT_HLO_MUL, gw, inv_n), x);
    gx = tt_lower_bin(c, TT_HLO_SUB, tt_lower_bin(c, TT_HLO_SUB, g, mg), tt_lower_bin(c, TT_HLO_MUL, xhat, mgx));
    gx = tt_lower_bin(c, TT_HLO_MUL, gx, scale);
  } else {
    gx = tt_lower_bin(c, TT_HLO_MUL, g, scale);
  }
  tt_dtype wd = tt_lower_is_none(c, 2) ? xt.dtype : tt_lower_tensor_type(c, 2, -1).dtype;
  tt_lower_result(c, tt_lower_convert(c, gx, xt.dtype));
  tt_lower_result(c, tt_lower_convert(c, gw, wd));
  tt_lower_result(c, tt_lower_convert(c, gb, wd));
  return NULL;
}

// --- layer norm -----------------------------------------------------------------------------

// The first normalised dim of input type xt for normalized_shape arg i.
static tt_status layer_axis(tt_lower_ctx *c, const tt_hlo_type *xt, int i, int *axis) {
  const tt_value *v = tt_lower_arg(c, i);
  int k = v->kind == TT_VALUE_INTS ? v->u.ints.n : 0;
  bool ok = k >= 1 && k <= xt->rank;
  for (int j = 0; ok && j < k; j++) ok = v->u.ints.data[j] == xt->dims[xt->rank - k + j];
  if (!ok) {
    char s[96];
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "normalized_shape of %d dims doesn't match "
                         "the trailing dims of input %s", k, tt_shape_str(xt, s, sizeof s));
  }
  *axis = xt->rank - k;
  return NULL;
}

// A [trailing dims] affine parameter broadcast over x.
static tt_hv trailing(tt_lower_ctx *c, tt_hv v, tt_hv like, int axis) {
  tt_hlo_type t = tt_lower_type(c, like);
  int64_t bd[TT_MAX_RANK];
  for (int d = axis; d < t.rank; d++) bd[d - axis] = d;
  return tt_hlo_broadcast_in_dim(tt_lower_hlo(c), v, t.rank, t.dims, bd);
}

static tt_hv opt_affine(tt_lower_ctx *c, int i, tt_hv like, int axis, tt_dtype acc, double dflt) {
  if (tt_lower_is_none(c, i)) return tt_lower_splat_like(c, like, dflt);
  return trailing(c, tt_lower_convert(c, tt_lower_tensor(c, i), acc), like, axis);
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps)
//   -> (out, mean, rstd); mean/rstd keep the normalised dims as size 1.
static tt_status lower_native_layer_norm(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  int axis;
  TT_RETURN_IF_ERROR(layer_axis(c, &xt, 1, &axis));
  if (!tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a floating input, got %s",
                         tt_dtype_name(xt.dtype));
  tt_dtype acc = tt_opmath(xt.dtype);
  bool mask[TT_MAX_RANK] = {false};
  double n = 1;
  for (int d = axis; d < xt.rank; d++) {
    mask[d] = true;
    n *= (double)xt.dims[d];
  }
  tt_hv x = tt_lower_convert(c, tt_lower_tensor(c, 0), acc);
  tt_hv m = mean_over(c, x, mask, n);
  tt_hv d = tt_lower_bin(c, TT_HLO_SUB, x, tt_lower_expand_like(c, m, x));
  tt_hv rstd = rsqrt_eps(c, mean_over(c, tt_lower_bin(c, TT_HLO_MUL, d, d), mask, n), 4, acc);
  tt_hv y = tt_lower_bin(c, TT_HLO_MUL, d, tt_lower_expand_like(c, rstd, x));
  y = tt_lower_bin(c, TT_HLO_MUL, y, opt_affine(c, 2, x, axis, acc, 1));
  y = tt_lower_bin(c, TT_HLO_ADD, y, opt_affine(c, 3, x, axis, acc, 0));
  tt_lower_result(c, tt_lower_convert(c, y, xt.dtype));
  tt_dtype sd = stats_dtype(c, xt.dtype, 2);
  tt_lower_result(c, tt_lower_convert(c, m, sd));
  tt_lower_result(c, tt_lower_convert(c, rstd, sd));
  return NULL;
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
//                            weight?, bias?, output_mask)
static tt_status lower_native_layer_norm_backward(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 1, -1);
  int axis;
  TT_RETURN_IF_ERROR(layer_axis(c, &xt, 2, &axis));
  tt_dtype acc = tt_opmath(xt.dtype);
  bool inner[TT_MAX_RANK] = {false}, outer[TT_MAX_RANK] = {false};
  double n = 1;
  for (int d = 0; d < xt.rank; d++) {
    inner[d] = d >= axis;
    outer[d] = d < axis;
    if (inner[d]) n *= (double)xt.dims[d];
  }
  tt_hv g = tt_lower_convert(c, tt_lower_tensor(c, 0), acc), x = tt_lower_convert(c, tt_lower_tensor(c, 1), acc);
  tt_hv mean = tt_lower_expand_like(c, tt_lower_convert(c, tt_lower_tensor(c, 3), acc), x);
  tt_hv rstd = tt_lower_expand_like(c, tt_lower_convert(c, tt_lower_tensor(c, 4), acc), x);
  tt_hv xhat = tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_SUB, x, mean), rstd);
  tt_hv gy = tt_lower_bin(c, TT_HLO_MUL, g, opt_affine(c, 5, x, axis, acc, 1));
  tt_hv a = tt_lower_expand_like(c, mean_over(c, gy, inner, n), x);
  tt_hv bterm = tt_lower_expand_like(c, mean_over(c, tt_lower_bin(c, TT_HLO_MUL, gy, xhat), inner, n), x);
  tt_hv gx = tt_lower_bin(c, TT_HLO_MUL, rstd,
                 tt_lower_bin(c, TT_HLO_SUB, tt_lower_bin(c, TT_HLO_SUB, gy, a), tt_lower_bin(c, TT_HLO_MUL, xhat, bterm)));
  tt_hv gw = tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_MUL, g, xhat), outer, false, TT_HLO_REDUCE_ADD);
  tt_hv gb = tt_lower_reduce(c, g, outer, false, TT_HLO_REDUCE_ADD);
  tt_dtype wd = tt_lower_is_none(c, 5) ? xt.dtype : tt_lower_tensor_type(c, 5, -1).dtype;
  tt_lower_result(c, tt_lower_convert(c, gx, xt.dtype));
  tt_lower_result(c, tt_lower_convert(c, gw, wd));
  tt_lower_result(c, tt_lower_convert(c, gb, wd));
  return NULL;
}

// --- group norm -----------------------------------------------------------------------------

typedef struct gn_shape {
  int64_t n, ch, hw, groups, per;  // per: channels per group
} gn_shape;

static tt_status gn_read(tt_lower_ctx *c, int x, int first, gn_shape *s) {
  tt_hlo_type xt = tt_lower_tensor_type(c, x, -1);
  s->n = tt_lower_int(c, first);
  s->ch = tt_lower_int(c, first + 1);
  s->hw = tt_lower_int(c, first + 2);
  s->groups = tt_lower_int(c, first + 3);
  int64_t nc = 0, total = 0;
  bool fits = s->n >= 0 && s->ch >= 0 && s->hw >= 0 && !__builtin_mul_overflow(s->n, s->ch, &nc) &&
              !__builtin_mul_overflow(nc, s->hw, &total) && total == tt_hlo_numel(&xt);
  if (s->groups < 1 || s->ch % s->groups || !fits || !tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input of %" PRId64 " elements (%s) doesn't "
                         "fit N=%" PRId64 ", C=%" PRId64 ", HxW=%" PRId64 " in %" PRId64 " groups",
                         tt_hlo_numel(&xt), tt_dtype_name(xt.dtype), s->n, s->ch, s->hw, s->groups);
  s->per = s->ch / s->groups;
  return NULL;
}

// A [C] vector as [N, G, per*hw] broadcast.
static tt_hv gn_channel(tt_lower_ctx *c, tt_hv v, const gn_shape *s) {
  tt_hlo *b = tt_lower_hlo(c);
  int64_t d3[3] = {s->n, s->ch, s->hw}, g3[3] = {s->n, s->groups, s->per * s->hw};
  int64_t one = 1;
  return tt_hlo_reshape(b, tt_hlo_broadcast_in_dim(b, v, 3, d3, &one), 3, g3);
}

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps)
//   -> (out, mean [N, G], rstd [N, G])
static tt_status lower_native_group_norm(tt_lower_ctx *c) {
  gn_shape s;
  TT_RETURN_IF_ERROR(gn_read(c, 0, 3, &s));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  tt_dtype acc = tt_opmath(xt.dtype);
  int64_t g3[3] = {s.n, s.groups, s.per * s.hw}, ng[2] = {s.n, s.groups};
  tt_hv x = tt_hlo_reshape(b, tt_lower_convert(c, tt_lower_tensor(c, 0), acc), 3, g3);
  bool mask[TT_MAX_RANK] = {false, false, true};
  double cnt = (double)(s.per * s.hw);
  tt_hv m = mean_over(c, x, mask, cnt);
  tt_hv d = tt_lower_bin(c, TT_HLO_SUB, x, tt_lower_expand_like(c, m, x));
  tt_hv rstd = rsqrt_eps(c, mean_over(c, tt_lower_bin(c, TT_HLO_MUL, d, d), mask, cnt), 7, acc);
  tt_hv y = tt_lower_bin(c, TT_HLO_MUL, d, tt_lower_expand_like(c, rstd, x));
  y = tt_lower_bin(c, TT_HLO_MUL, y, gn_channel(c, opt_vec(c, 1, s.ch, acc, 1), &s));
  y = tt_lower_bin(c, TT_HLO_ADD, y, gn_channel(c, opt_vec(c, 2, s.ch, acc, 0), &s));
  tt_lower_result(c, tt_lower_convert(c, tt_hlo_reshape(b, y, xt.rank, xt.dims), xt.dtype));
  tt_lower_result(c, tt_lower_convert(c, tt_hlo_reshape(b, m, 2, ng), xt.dtype));
  tt_lower_result(c, tt_lower_convert(c, tt_hlo_reshape(b, rstd, 2, ng), xt.dtype));
  return NULL;
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C,
//                            HxW, group, output_mask)
static tt_status lower_native_group_norm_backward(tt_lower_ctx *c) {
  gn_shape s;
  TT_RETURN_IF_ERROR(gn_read(c, 1, 5, &s));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, 1, -1);
  tt_dtype acc = tt_opmath(xt.dtype);
  int64_t g3[3] = {s.n, s.groups, s.per * s.hw}, ng1[3] = {s.n, s.groups, 1};
  int64_t d3[3] = {s.n, s.ch, s.hw};
  tt_hv g = tt_hlo_reshape(b, tt_lower_convert(c, tt_lower_tensor(c, 0), acc), 3, g3);
  tt_hv x = tt_hlo_reshape(b, tt_lower_convert(c, tt_lower_tensor(c, 1), acc), 3, g3);
  tt_hv mean = tt_lower_expand_like(c, tt_hlo_reshape(b, tt_lower_convert(c, tt_lower_tensor(c, 2), acc), 3, ng1), x);
  tt_hv rstd = tt_lower_expand_like(c, tt_hlo_reshape(b, tt_lower_convert(c, tt_lower_tensor(c, 3), acc), 3, ng1), x);
  tt_hv xhat = tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_SUB, x, mean), rstd);
  tt_hv gy = tt_lower_bin(c, TT_HLO_MUL, g, gn_channel(c, opt_vec(c, 4, s.ch, acc, 1), &s));
  bool inner[TT_MAX_RANK] = {false, false, true};
  double cnt = (double)(s.per * s.hw);
  tt_hv a = tt_lower_expand_like(c, mean_over(c, gy, inner, cnt), x);
  tt_hv bt = tt_lower_expand_like(c, mean_over(c, tt_lower_bin(c, TT_HLO_MUL, gy, xhat), inner, cnt), x);
  tt_hv gx = tt_lower_bin(c, TT_HLO_MUL, rstd,
                 tt_lower_bin(c, TT_HLO_SUB, tt_lower_bin(c, TT_HLO_SUB, gy, a), tt_lower_bin(c, TT_HLO_MUL, xhat, bt)));
  bool nhw[TT_MAX_RANK] = {true, false, true};
  tt_hv gw = tt_lower_reduce(c, tt_hlo_reshape(b, tt_lower_bin(c, TT_HLO_MUL, g, xhat), 3, d3), nhw,
                             false, TT_HLO_REDUCE_ADD);
  tt_hv gb = tt_lower_reduce(c, tt_hlo_reshape(b, g, 3, d3), nhw, false, TT_HLO_REDUCE_ADD);
  tt_dtype wd = tt_lower_is_none(c, 4) ? xt.dtype : tt_lower_tensor_type(c, 4, -1).dtype;
  tt_lower_result(c, tt_lower_convert(c, tt_hlo_reshape(b, gx, xt.rank, xt.dims), xt.dtype));
  tt_lower_result(c, tt_lower_convert(c, gw, wd));
  tt_lower_result(c, tt_lower_convert(c, gb, wd));
  return NULL;
}

// --- the table -------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
#define RC(name, fn) {"aten::" name, fn, TT_RULE_REPLACES_COMPOSITE}
static const tt_rule kRules[] = {
    R("native_batch_norm", lower_native_batch_norm),
    R("native_batch_norm_backward", lower_native_batch_norm_backward),
    R("_batch_norm_with_update", lower_bn_with_update),
    R("_batch_norm_with_update.out", lower_bn_with_update),
    R("batch_norm_backward", lower_native_batch_norm_backward),
    RC("_batch_norm_no_update", lower_bn_no_update),
    R("_batch_norm_no_update.out", lower_bn_no_update),
    R("_native_batch_norm_legit", lower_bn_legit),
    R("_native_batch_norm_legit.no_stats", lower_bn_legit_no_stats),
    R("_native_batch_norm_legit_no_training", lower_bn_legit_no_training),
    RC("native_layer_norm", lower_native_layer_norm),
    R("native_layer_norm_backward", lower_native_layer_norm_backward),
    RC("native_group_norm", lower_native_group_norm),
    R("native_group_norm_backward", lower_native_group_norm_backward),
};
#undef R
#undef RC

const tt_rule_table tt_rules_norm = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
