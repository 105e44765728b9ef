// norm_sync.c — the per-channel statistics kernels nn.SyncBatchNorm calls
// (torch/nn/modules/_functions.py): batch_norm_stats, batch_norm_gather_-
// stats_with_counts, batch_norm_elemt, batch_norm_backward_reduce and
// batch_norm_backward_elemt. PyTorch implements them for CUDA only (its
// SyncBatchNorm accepts the PrivateUse1 device), so without these rules a
// SyncBatchNorm model on "tpu" failed in distributed training.
//
// Channels are dim 1 of an [N, C, *] input; statistics are [C] in the opmath
// dtype (float32 for 16-bit inputs), as CUDA's accumulate type. The gathered
// statistics of the ranks (mean, invstd: [W, C], counts: [W]) are merged in
// closed form: N = sum n_j, mean = sum n_j m_j / N, and the summed squared
// deviations sum n_j (v_j + (m_j - mean)^2) with v_j = 1 / invstd_j^2 - eps
// (CUDA merges them one rank at a time, Welford's way: the same values up to
// rounding). The running statistics are updated in place as CUDA does (the
// op's schema does not mark them written): momentum towards the mean and
// the unbiased variance.
#include <inttypes.h>

#include "lower/lower.h"

// --- helpers ------------------------------------------------------------------------------

// The input x (argument i) checked to be a floating [N, C, *] tensor.
static tt_status input_type(tt_lower_ctx *c, int i, tt_hlo_type *out) {
  *out = tt_lower_tensor_type(c, i, -1);
  if (out->rank < 2 || !tt_dtype_is_float(out->dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a floating input with at least 2 dims, "
                         "got %dD %s", (int)out->rank, tt_dtype_name(out->dtype));
  return NULL;
}

// Every dim but the channels'.
static void all_but_channels(int rank, bool *mask) {
  for (int d = 0; d < rank; d++) mask[d] = d != 1;
}

// [C] vector argument i in dtype `acc` (checked to hold C elements), or a
// splat of `dflt` when it is None.
static tt_status channel_vec(tt_lower_ctx *c, int i, int64_t ch, tt_dtype acc, double dflt,
                             const char *name, tt_hv *out) {
  tt_hlo *b = tt_lower_hlo(c);
  if (tt_lower_is_none(c, i)) {
    tt_hlo_type t = tt_hlo_make_type(acc, 1, &ch);
    *out = tt_hlo_splat(b, &t, dflt);
    return NULL;
  }
  tt_hlo_type t = tt_lower_tensor_type(c, i, -1);
  if (tt_hlo_numel(&t) != ch)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s should contain %" PRId64 " elements not %" PRId64,
                         name, ch, tt_hlo_numel(&t));
  *out = tt_hlo_reshape(b, tt_lower_convert(c, tt_lower_tensor(c, i), acc), 1, &ch);
  return NULL;
}

// A [C] value broadcast along dim 1 of `like`.
static tt_hv along_channels(tt_lower_ctx *c, tt_hv v, tt_hv like) {
  tt_hlo_type t = tt_lower_type(c, like);
  int64_t one = 1;
  return tt_hlo_broadcast_in_dim(tt_lower_hlo(c), v, t.rank, t.dims, &one);
}

// Sum of v over every dim but the channels', as [C].
static tt_hv channel_sum(tt_lower_ctx *c, tt_hv v) {
  bool mask[TT_MAX_RANK] = {false};
  all_but_channels(tt_lower_type(c, v).rank, mask);
  return tt_lower_reduce(c, v, mask, false, TT_HLO_REDUCE_ADD);
}

static tt_hv mul(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_MUL, x, y); }
static tt_hv sub(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_SUB, x, y); }
static tt_hv add(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_ADD, x, y); }
static tt_hv dvd(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_DIV, x, y); }

// 1 / sqrt(var + eps) with eps the Scalar argument `eps_arg`.
static tt_hv invstd_of(tt_lower_ctx *c, tt_hv var, int eps_arg, tt_dtype acc) {
  tt_hlo_type t = tt_lower_type(c, var);
  tt_hv eps = tt_lower_broadcast_to(c, tt_lower_scalar(c, eps_arg, acc), t.rank, t.dims);
  return tt_hlo_unary(tt_lower_hlo(c), TT_HLO_RSQRT, add(c, var, eps));
}

// --- forward ------------------------------------------------------------------------------

// batch_norm_stats(input, eps) -> (mean, invstd), biased variance.
static tt_status lower_batch_norm_stats(tt_lower_ctx *c) {
  tt_hlo_type xt;
  TT_RETURN_IF_ERROR(input_type(c, 0, &xt));
  tt_dtype acc = tt_opmath(xt.dtype);
  double n = (double)(tt_hlo_numel(&xt) / (xt.dims[1] ? xt.dims[1] : 1));
  tt_hv x = tt_lower_convert(c, tt_lower_tensor(c, 0), acc);
  tt_hv sum = channel_sum(c, x);
  tt_hv mean = dvd(c, sum, tt_lower_splat_like(c, sum, n));
  tt_hv d = sub(c, x, along_channels(c, mean, x));
  tt_hv var = dvd(c, channel_sum(c, mul(c, d, d)), tt_lower_splat_like(c, mean, n));
  tt_lower_result(c, mean);
  tt_lower_result(c, invstd_of(c, var, 1, acc));
  return NULL;
}

// batch_norm_gather_stats_with_counts(input, mean [W, C], invstd [W, C],
// running_mean?, running_var?, momentum, eps, counts [W]) -> (mean, invstd)
static tt_status lower_batch_norm_gather_stats(tt_lower_ctx *c) {
  tt_hlo_type mt = tt_lower_tensor_type(c, 1, -1), it = tt_lower_tensor_type(c, 2, -1);
  tt_hlo_type nt = tt_lower_tensor_type(c, 7, -1);
  if (mt.rank != 2 || it.rank != 2 || it.dims[0] != mt.dims[0] || it.dims[1] != mt.dims[1] ||
      tt_hlo_numel(&nt) != mt.dims[0] || !tt_dtype_is_float(mt.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "batch_norm_gather_stats_with_counts: mean and "
                         "invstd [world, C] and counts [world] expected");
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype acc = tt_opmath(mt.dtype);
  int64_t w = mt.dims[0], ch = mt.dims[1];
  tt_hv m = tt_lower_convert(c, tt_lower_tensor(c, 1), acc);
  tt_hv inv = tt_lower_convert(c, tt_lower_tensor(c, 2), acc);
  int64_t zero = 0;
  tt_hv counts = tt_hlo_broadcast_in_dim(
      b, tt_hlo_reshape(b, tt_lower_convert(c, tt_lower_tensor(c, 7), acc), 1, &w), 2, mt.dims, &zero);
  bool over_ranks[2] = {true, false};
  tt_hv total = tt_lower_reduce(c, counts, over_ranks, false, TT_HLO_REDUCE_ADD);  // [C]
  tt_hv mean = dvd(c, tt_lower_reduce(c, mul(c, counts, m), over_ranks, false, TT_HLO_REDUCE_ADD),
                   total);
  tt_hv eps = tt_lower_broadcast_to(c, tt_lower_scalar(c, 6, acc), 2, mt.dims);
  tt_hv var_j = sub(c, dvd(c, tt_lower_splat_like(c, inv, 1), mul(c, inv, inv)), eps);
  int64_t one = 1;
  tt_hv dm = sub(c, m, tt_hlo_broadcast_in_dim(b, mean, 2, mt.dims, &one));
  tt_hv m2 = tt_lower_reduce(c, mul(c, counts, add(c, var_j, mul(c, dm, dm))), over_ranks, false,
                             TT_HLO_REDUCE_ADD);
  tt_hv invstd = invstd_of(c, dvd(c, m2, total), 6, acc);
  if (!tt_lower_is_none(c, 3) && !tt_lower_is_none(c, 4)) {
    tt_hv rm, rv;
    TT_RETURN_IF_ERROR(channel_vec(c, 3, ch, acc, 0, "running_mean", &rm));
    TT_RETURN_IF_ERROR(channel_vec(c, 4, ch, acc, 1, "running_var", &rv));
    tt_hv mom = tt_lower_broadcast_to(c, tt_lower_scalar(c, 5, acc), 1, &ch);
    tt_hv keep = sub(c, tt_lower_splat_like(c, mom, 1), mom);
    tt_hv unbiased = dvd(c, m2, sub(c, total, tt_lower_splat_like(c, total, 1)));
    tt_lower_write_arg(c, 3, add(c, mul(c, keep, rm), mul(c, mom, mean)));
    tt_lower_write_arg(c, 4, add(c, mul(c, keep, rv), mul(c, mom, unbiased)));
  }
  tt_lower_result(c, tt_lower_convert(c, mean, mt.dtype));
  tt_lower_result(c, tt_lower_convert(c, invstd, mt.dtype));
  return NULL;
}

// batch_norm_elemt(input, weight?, bias?, mean, invstd, eps):
// (x - mean) * invstd * weight + bias
static tt_status lower_batch_norm_elemt(tt_lower_ctx *c) {
  tt_hlo_type xt;
  TT_RETURN_IF_ERROR(input_type(c, 0, &xt));
  tt_dtype acc = tt_opmath(xt.dtype);
  int64_t ch = xt.dims[1];
  tt_hv w, bias, mean, invstd;
  TT_RETURN_IF_ERROR(channel_vec(c, 1, ch, acc, 1, "weight", &w));
  TT_RETURN_IF_ERROR(channel_vec(c, 2, ch, acc, 0, "bias", &bias));
  TT_RETURN_IF_ERROR(channel_vec(c, 3, ch, acc, 0, "mean", &mean));
  TT_RETURN_IF_ERROR(channel_vec(c, 4, ch, acc, 1, "invstd", &invstd));
  tt_hv x = tt_lower_convert(c, tt_lower_tensor(c, 0), acc);
  tt_hv y = add(c, mul(c, sub(c, x, along_channels(c, mean, x)), along_channels(c, mul(c, invstd, w), x)),
                along_channels(c, bias, x));
  tt_lower_result(c, tt_lower_convert(c, y, xt.dtype));
  return NULL;
}

// --- backward -----------------------------------------------------------------------------

// batch_norm_backward_reduce(grad_out, input, mean, invstd, weight?, input_g,
// weight_g, bias_g) -> (sum_dy, sum_dy_xmu, grad_weight, grad_bias); every
// result is computed (the caller uses the ones its flags ask for).
static tt_status lower_batch_norm_backward_reduce(tt_lower_ctx *c) {
  tt_hlo_type xt;
  TT_RETURN_IF_ERROR(input_type(c, 1, &xt));
  tt_dtype acc = tt_opmath(xt.dtype);
  int64_t ch = xt.dims[1];
  tt_hv mean, invstd;
  TT_RETURN_IF_ERROR(channel_vec(c, 2, ch, acc, 0, "mean", &mean));
  TT_RETURN_IF_ERROR(channel_vec(c, 3, ch, acc, 1, "invstd", &invstd));
  tt_hv dy = tt_lower_convert(c, tt_lower_tensor(c, 0), acc);
  tt_hv x = tt_lower_convert(c, tt_lower_tensor(c, 1), acc);
  tt_hv sum_dy = channel_sum(c, dy);
  tt_hv sum_dy_xmu = channel_sum(c, mul(c, dy, sub(c, x, along_channels(c, mean, x))));
  tt_dtype wd = tt_lower_is_none(c, 4) ? xt.dtype : tt_lower_tensor_type(c, 4, -1).dtype;
  tt_lower_result(c, sum_dy);
  tt_lower_result(c, sum_dy_xmu);
  tt_lower_result(c, tt_lower_convert(c, mul(c, sum_dy_xmu, invstd), wd));
  tt_lower_result(c, tt_lower_convert(c, sum_dy, wd));
  return NULL;
}

// batch_norm_backward_elemt(grad_out, input, mean, invstd, weight?, sum_dy,
// sum_dy_xmu, count [W]): (dy - sum_dy / N - (x - mean) * invstd^2 *
// sum_dy_xmu / N) * invstd * weight, N = sum(count).
static tt_status lower_batch_norm_backward_elemt(tt_lower_ctx *c) {
  tt_hlo_type xt;
  TT_RETURN_IF_ERROR(input_type(c, 1, &xt));
  tt_dtype acc = tt_opmath(xt.dtype);
  int64_t ch = xt.dims[1];
  tt_hv mean, invstd, w, sum_dy, sum_dy_xmu;
  TT_RETURN_IF_ERROR(channel_vec(c, 2, ch, acc, 0, "mean", &mean));
  TT_RETURN_IF_ERROR(channel_vec(c, 3, ch, acc, 1, "invstd", &invstd));
  TT_RETURN_IF_ERROR(channel_vec(c, 4, ch, acc, 1, "weight", &w));
  TT_RETURN_IF_ERROR(channel_vec(c, 5, ch, acc, 0, "sum_dy", &sum_dy));
  TT_RETURN_IF_ERROR(channel_vec(c, 6, ch, acc, 0, "sum_dy_xmu", &sum_dy_xmu));
  bool all[TT_MAX_RANK] = {true, true, true, true, true, true, true, true};
  tt_hv total = tt_lower_reduce(c, tt_lower_convert(c, tt_lower_tensor(c, 7), acc), all, false,
                                TT_HLO_REDUCE_ADD);  // the count of every rank's [W] or [W, 1]
  tt_hv n = tt_lower_broadcast_to(c, total, 1, &ch);
  tt_hv mean_dy = dvd(c, sum_dy, n);
  tt_hv proj = mul(c, dvd(c, sum_dy_xmu, n), mul(c, invstd, invstd));
  tt_hv dy = tt_lower_convert(c, tt_lower_tensor(c, 0), acc);
  tt_hv x = tt_lower_convert(c, tt_lower_tensor(c, 1), acc);
  tt_hv xmu = sub(c, x, along_channels(c, mean, x));
  tt_hv g = sub(c, sub(c, dy, along_channels(c, mean_dy, x)), mul(c, xmu, along_channels(c, proj, x)));
  tt_hv gx = mul(c, g, along_channels(c, mul(c, invstd, w), x));
  tt_lower_result(c, tt_lower_convert(c, gx, xt.dtype));
  return NULL;
}

// --- table -----------------------------------------------------------------------------------

static const tt_rule kRules[] = {
    {"aten::batch_norm_stats", lower_batch_norm_stats, 0},
    {"aten::batch_norm_gather_stats_with_counts", lower_batch_norm_gather_stats, 0},
    {"aten::batch_norm_elemt", lower_batch_norm_elemt, 0},
    {"aten::batch_norm_backward_reduce", lower_batch_norm_backward_reduce, 0},
    {"aten::batch_norm_backward_elemt", lower_batch_norm_backward_elemt, 0},
};

const tt_rule_table tt_rules_norm_sync = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
