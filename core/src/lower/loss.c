// loss.c — pointwise losses with their backward ops: binary_cross_entropy
// (optional weight; log clamped at -100 like PyTorch), smooth_l1_loss (beta)
// and huber_loss (delta). Reductions are PyTorch's enum: 0 none, 1 mean,
// 2 sum. 16-bit floats compute in float32 and round once.
//
// binary_cross_entropy_with_logits is CompositeExplicitAutograd in PyTorch:
// it decomposes into elementwise ops that run on the device already.
//
// Leaves out: nll_loss2d, the range check of BCE inputs (values outside
// [0, 1] give NaN where PyTorch raises).
#include <inttypes.h>

#include "lower/lower.h"

enum { kNone = 0, kMean = 1, kSum = 2 };

static tt_hv k(tt_lower_ctx *c, tt_hv like, double v) { return tt_lower_splat_like(c, like, v); }

static tt_status reduction(const tt_lower_ctx *c, int i, int64_t *r) {
  *r = tt_lower_is_none(c, i) ? kMean : tt_lower_int(c, i);
  if (*r < kNone || *r > kSum)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%" PRId64 " is not a valid value for "
                         "reduction", *r);
  return NULL;
}

// Args x, x+1 (self, target) promoted, broadcast, in opmath; *rt the result dtype.
static tt_status pair(tt_lower_ctx *c, int x, tt_dtype *rt, tt_hv *v) {
  int idx[2] = {x, x + 1};
  *rt = tt_lower_result_type(c, idx, 2);
  if (!tt_dtype_is_float(*rt))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected floating inputs, got %s",
                         tt_dtype_name(*rt));
  tt_hlo_type a = tt_lower_tensor_type(c, x, -1), b = tt_lower_tensor_type(c, x + 1, -1);
  bool bce = tt_lower_op_name(c)[0] == 'b';  // BCE doesn't broadcast
  if (bce && (a.rank != b.rank || tt_hlo_numel(&a) != tt_hlo_numel(&b))) {
    char s1[96], s2[96];
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Using a target size (%s) that is different "
                         "to the input size (%s)", tt_shape_str(&b, s1, sizeof s1),
                         tt_shape_str(&a, s2, sizeof s2));
  }
  return tt_lower_operands(c, idx, 2, tt_opmath(*rt), v);
}

// Reduces per-element losses l and declares the result.
static tt_status finish(tt_lower_ctx *c, tt_hv l, int64_t red, tt_dtype rt) {
  if (red != kNone) {
    const tt_hlo_type *t = tt_hlo_type_of(tt_lower_hlo(c), l);
    double n = t ? (double)tt_hlo_numel(t) : 1;
    bool all[TT_MAX_RANK] = {true, true, true, true, true, true, true, true};
    l = tt_lower_reduce(c, l, all, false, TT_HLO_REDUCE_ADD);
    if (red == kMean) l = tt_lower_bin(c, TT_HLO_DIV, l, k(c, l, n));
  }
  tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), l, rt));
  return NULL;
}

// The incoming gradient (arg 0) over the shape of `like`, divided by N for mean.
static tt_hv grad_in(tt_lower_ctx *c, tt_hv like, int64_t red) {
  tt_hlo *b = tt_lower_hlo(c);
  const tt_hlo_type *tp = tt_hlo_type_of(b, like);
  if (!tp) return TT_HV_INVALID;
  tt_hlo_type t = *tp;
  tt_hv g = tt_hlo_convert(b, tt_lower_tensor(c, 0), t.dtype);
  if (red != kNone) g = tt_hlo_reshape(b, g, 0, NULL);
  g = tt_lower_broadcast_to(c, g, t.rank, t.dims);
  if (red == kMean) g = tt_lower_bin(c, TT_HLO_DIV, g, k(c, g, (double)(tt_hlo_numel(&t) ? tt_hlo_numel(&t) : 1)));
  return g;
}

// Optional weight at argument i, over like's shape.
static tt_hv weighted(tt_lower_ctx *c, int i, tt_hv v) {
  if (tt_lower_is_none(c, i)) return v;
  const tt_hlo_type *tp = tt_hlo_type_of(tt_lower_hlo(c), v);
  if (!tp) return TT_HV_INVALID;
  tt_hlo_type t = *tp;
  tt_hv w = tt_hlo_convert(tt_lower_hlo(c), tt_lower_tensor(c, i), t.dtype);
  return tt_lower_bin(c, TT_HLO_MUL, v, tt_lower_broadcast_to(c, w, t.rank, t.dims));
}

// --- binary_cross_entropy ---------------------------------------------------------------------

// max(log(v), -100)
static tt_hv clamped_log(tt_lower_ctx *c, tt_hv v) {
  return tt_lower_bin(c, TT_HLO_MAX, tt_hlo_unary(tt_lower_hlo(c), TT_HLO_LOG, v), k(c, v, -100));
}

// (self, target, weight?, reduction): -(t log x + (1 - t) log(1 - x))
static tt_status lower_bce(tt_lower_ctx *c) {
  int64_t red;
  TT_RETURN_IF_ERROR(reduction(c, 3, &red));
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(pair(c, 0, &rt, v));
  tt_hv x = v[0], t = v[1], one = k(c, x, 1);
  tt_hv l = tt_lower_bin(c, TT_HLO_ADD, tt_lower_bin(c, TT_HLO_MUL, t, clamped_log(c, x)),
                tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_SUB, one, t), clamped_log(c, tt_lower_bin(c, TT_HLO_SUB, one, x))));
  l = weighted(c, 2, tt_hlo_unary(tt_lower_hlo(c), TT_HLO_NEG, l));
  return finish(c, l, red, rt);
}

// (grad_output, self, target, weight?, reduction):
//   g (x - t) / max((1 - x) x, 1e-12)
static tt_status lower_bce_backward(tt_lower_ctx *c) {
  int64_t red;
  TT_RETURN_IF_ERROR(reduction(c, 4, &red));
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(pair(c, 1, &rt, v));
  tt_hv x = v[0], t = v[1];
  tt_hv den = tt_lower_bin(c, TT_HLO_MAX, tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_SUB, k(c, x, 1), x), x), k(c, x, 1e-12));
  tt_hv gx = tt_lower_bin(c, TT_HLO_MUL, grad_in(c, x, red), tt_lower_bin(c, TT_HLO_DIV, tt_lower_bin(c, TT_HLO_SUB, x, t), den));
  tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), weighted(c, 3, gx), rt));
  return NULL;
}

// --- smooth_l1, huber ---------------------------------------------------------------------------

// Per-element loss of d = x - t with threshold b (arg `bi`):
//   smooth_l1: |d| < b ? 0.5 d^2 / b : |d| - 0.5 b
//   huber:     |d| < b ? 0.5 d^2     : b (|d| - 0.5 b)
static tt_status l1_like(tt_lower_ctx *c, bool huber) {
  int64_t red;
  TT_RETURN_IF_ERROR(reduction(c, 2, &red));
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(pair(c, 0, &rt, v));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv d = tt_lower_bin(c, TT_HLO_SUB, v[0], v[1]), ad = tt_hlo_unary(b, TT_HLO_ABS, d);
  const tt_hlo_type *tp = tt_hlo_type_of(b, d);
  if (!tp) return NULL;
  tt_hlo_type ty = *tp;
  tt_hv beta = tt_lower_broadcast_to(c, tt_lower_scalar(c, 3, ty.dtype), ty.rank, ty.dims);
  tt_hv sq = tt_lower_bin(c, TT_HLO_MUL, k(c, d, 0.5), tt_lower_bin(c, TT_HLO_MUL, d, d));
  tt_hv lin = tt_lower_bin(c, TT_HLO_SUB, ad, tt_lower_bin(c, TT_HLO_MUL, k(c, d, 0.5), beta));
  if (huber) lin = tt_lower_bin(c, TT_HLO_MUL, beta, lin);
  else sq = tt_lower_bin(c, TT_HLO_DIV, sq, beta);
  tt_hv l = tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_LT, ad, beta), sq, lin);
  if (!huber) {  // beta == 0 is plain L1
    tt_hv zero = tt_hlo_compare(b, TT_HLO_EQ, beta, k(c, beta, 0));
    l = tt_hlo_select(b, zero, ad, l);
  }
  return finish(c, l, red, rt);
}

// (grad_output, self, target, reduction, beta):
//   smooth_l1: |d| < b ? d / b : sign(d);  huber: |d| < b ? d : b sign(d)
static tt_status l1_like_backward(tt_lower_ctx *c, bool huber) {
  int64_t red;
  TT_RETURN_IF_ERROR(reduction(c, 3, &red));
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(pair(c, 1, &rt, v));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv d = tt_lower_bin(c, TT_HLO_SUB, v[0], v[1]), ad = tt_hlo_unary(b, TT_HLO_ABS, d);
  const tt_hlo_type *tp = tt_hlo_type_of(b, d);
  if (!tp) return NULL;
  tt_hlo_type ty = *tp;
  tt_hv beta = tt_lower_broadcast_to(c, tt_lower_scalar(c, 4, ty.dtype), ty.rank, ty.dims);
  tt_hv sg = tt_hlo_unary(b, TT_HLO_SIGN, d);
  tt_hv in = huber ? d : tt_lower_bin(c, TT_HLO_DIV, d, beta);
  tt_hv out = huber ? tt_lower_bin(c, TT_HLO_MUL, beta, sg) : sg;
  tt_hv r = tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_LT, ad, beta), in, out);
  tt_lower_result(c, tt_hlo_convert(b, tt_lower_bin(c, TT_HLO_MUL, grad_in(c, d, red), r), rt));
  return NULL;
}

static tt_status lower_smooth_l1(tt_lower_ctx *c) { return l1_like(c, false); }
static tt_status lower_huber(tt_lower_ctx *c) { return l1_like(c, true); }
static tt_status lower_smooth_l1_backward(tt_lower_ctx *c) { return l1_like_backward(c, false); }
static tt_status lower_huber_backward(tt_lower_ctx *c) { return l1_like_backward(c, true); }

// --- the table -------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
static const tt_rule kRules[] = {
    R("binary_cross_entropy", lower_bce), R("binary_cross_entropy.out", lower_bce),
    R("binary_cross_entropy_backward", lower_bce_backward),
    R("binary_cross_entropy_backward.grad_input", lower_bce_backward),
    R("smooth_l1_loss", lower_smooth_l1), R("smooth_l1_loss.out", lower_smooth_l1),
    R("smooth_l1_loss_backward", lower_smooth_l1_backward),
    R("smooth_l1_loss_backward.grad_input", lower_smooth_l1_backward),
    R("huber_loss", lower_huber), R("huber_loss.out", lower_huber),
    R("huber_loss_backward", lower_huber_backward),
    R("huber_loss_backward.out", lower_huber_backward),
};
#undef R

const tt_rule_table tt_rules_loss = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
