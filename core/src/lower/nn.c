// nn.c — loss functions: nll_loss_forward/backward (class weights,
// ignore_index, reductions none/mean/sum) and mse_loss with its backward.
//
// Reductions are PyTorch's enum: 0 none, 1 mean, 2 sum. 16-bit floats
// compute in float32 and round once.
//
// Leaves out: the range check of class targets (an out-of-range target that
// is not ignore_index reads a clamped class where PyTorch raises);
// nll_loss2d (PyTorch reaches it only for 4-D inputs; it is not lowered).
#include <inttypes.h>

#include "lower/lower.h"

enum { kNone = 0, kMean = 1, kSum = 2 };

static tt_hv sum_all(tt_lower_ctx *c, tt_hv v) {
  bool all[TT_MAX_RANK] = {true, true, true, true, true, true, true, true};
  return tt_lower_reduce(c, v, all, false, TT_HLO_REDUCE_ADD);
}

static tt_status check_reduction(const tt_lower_ctx *c, int64_t r) {
  if (r < kNone || r > kSum)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%" PRId64 " is not a valid value for "
                         "reduction", r);
  return NULL;
}

// --- nll_loss ---------------------------------------------------------------------------------

// The pieces both directions need, for input [N, C] (a [C] input is N = 1).
typedef struct nll_parts {
  int64_t n, classes;
  tt_dtype dt;  // input dtype
  tt_hv mask;   // [N] bool: target != ignore_index
  tt_hv safe;   // [N] i64: target, 0 where ignored (a valid gather index)
  tt_hv w;      // [N] opmath: weight[target] (1 without weights), 0 where ignored
} nll_parts;

// ATen's nll_loss checks and texts: a 1D or 2D input; a 0D target only for
// a 1D input (no batch), else a 1D target with one entry per batch row (a 1D
// input is a batch of one); Long or Byte targets.
static tt_status nll_check_shapes(const tt_lower_ctx *c, const tt_hlo_type *xt,
                                  const tt_hlo_type *tt) {
  if (xt->rank < 1 || xt->rank > 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input tensor should be 1D or 2D");
  if (tt->rank > 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                         "0D or 1D target tensor expected, multi-target not supported");
  if (!(xt->rank == 1 && tt->rank == 0)) {
    if (tt->rank == 0)
      return tt_lower_fail(c, TT_OUT_OF_RANGE, "Dimension specified as 0 but tensor has no "
                           "dimensions");
    char s1[160], s2[160];
    if (tt->dims[0] != (xt->rank == 2 ? xt->dims[0] : 1))
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "size mismatch (got input: %s, target: %s)",
                           tt_shape_str(xt, s1, sizeof s1), tt_shape_str(tt, s2, sizeof s2));
  }
  if (tt->dtype != TT_I64 && tt->dtype != TT_U8)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected target dtype to be Long or Byte, "
                         "but got %s", tt_dtype_torch_name(tt->dtype));
  return NULL;
}

// Checks shapes and builds the parts from self (arg `x`), target (x+1),
// weight (x+2) and ignore_index (x+4).
static tt_status nll_prepare(tt_lower_ctx *c, int x, nll_parts *p) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_tensor_type(c, x, -1), tt = tt_lower_tensor_type(c, x + 1, -1);
  TT_RETURN_IF_ERROR(nll_check_shapes(c, &xt, &tt));
  p->n = xt.rank == 2 ? xt.dims[0] : 1;
  p->classes = xt.dims[xt.rank - 1];
  p->dt = xt.dtype;
  tt_hv t = tt_hlo_convert(b, tt_hlo_reshape(b, tt_lower_tensor(c, x + 1), 1, &p->n), TT_I64);
  p->mask = tt_hlo_compare(b, TT_HLO_NE, t, tt_lower_splat_like(c, t, (double)tt_lower_int(c, x + 4)));
  p->safe = tt_hlo_select(b, p->mask, t, tt_lower_splat_like(c, t, 0));
  tt_hv out = tt_hlo_binary(b, TT_HLO_OR,
                            tt_hlo_compare(b, TT_HLO_LT, t, tt_lower_splat_like(c, t, 0)),
                            tt_hlo_compare(b, TT_HLO_GE, t,
                                           tt_lower_splat_like(c, t, (double)p->classes)));
  tt_lower_check(c, tt_hlo_binary(b, TT_HLO_AND, p->mask, out), t, TT_OUT_OF_RANGE,
                 "Target {} is out of bounds.", 0, 0);
  tt_dtype acc = tt_opmath(p->dt);
  tt_hlo_type wt = tt_hlo_make_type(acc, 1, &p->n);
  tt_hv w = tt_hlo_splat(b, &wt, 1);
  if (!tt_lower_is_none(c, x + 2)) {
    tt_hlo_type wtt = tt_lower_tensor_type(c, x + 2, -1);
    if (wtt.rank != 1 || wtt.dims[0] != p->classes)  // PyTorch's text
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "weight tensor should be defined either for "
                           "all %" PRId64 " classes or no classes but got weight tensor of %dD "
                           "with %" PRId64 " elements", p->classes, (int)wtt.rank,
                           tt_hlo_numel(&wtt));
    tt_hv weight = tt_hlo_convert(b, tt_lower_tensor(c, x + 2), acc);
    int64_t col[2] = {p->n, 1}, one = 1, zero = 0;
    tt_hlo_gather_dims gd = {.collapsed_slice_dims = &zero, .n_collapsed = 1,
                             .start_index_map = &zero, .n_start_index_map = 1,
                             .index_vector_dim = 1};
    w = tt_hlo_gather(b, weight, tt_hlo_reshape(b, p->safe, 2, col), &gd, &one, NULL);
  }
  p->w = tt_hlo_select(b, p->mask, w, tt_lower_splat_like(c, w, 0));
  return NULL;
}

// x[n, safe[n]] for x [N, C]: a gather with index pairs (n, safe[n]).
static tt_hv pick(tt_lower_ctx *c, tt_hv x, const nll_parts *p) {
  tt_hlo *b = tt_lower_hlo(c);
  int64_t col[2] = {p->n, 1};
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 2, col);
  tt_hv pair[2] = {tt_hlo_iota(b, &it, 0), tt_hlo_reshape(b, p->safe, 2, col)};
  tt_hv idx = tt_hlo_concatenate(b, pair, 2, 1);
  static const int64_t both[2] = {0, 1}, ones[2] = {1, 1};
  tt_hlo_gather_dims gd = {.collapsed_slice_dims = both, .n_collapsed = 2,
                           .start_index_map = both, .n_start_index_map = 2,
                           .index_vector_dim = 1};
  return tt_hlo_gather(b, x, idx, &gd, ones, NULL);
}

// nll_loss_forward(self, target, weight?, reduction, ignore_index)
//   -> (output, total_weight)
static tt_status lower_nll_loss_forward(tt_lower_ctx *c) {
  int64_t red = tt_lower_int(c, 3);
  TT_RETURN_IF_ERROR(check_reduction(c, red));
  nll_parts p;
  TT_RETURN_IF_ERROR(nll_prepare(c, 0, &p));
  tt_hlo *b = tt_lower_hlo(c);
  int64_t xd[2] = {p.n, p.classes};
  tt_hv x = tt_hlo_convert(b, tt_hlo_reshape(b, tt_lower_tensor(c, 0), 2, xd), tt_opmath(p.dt));
  tt_hv loss = tt_hlo_unary(b, TT_HLO_NEG, tt_lower_bin(c, TT_HLO_MUL, pick(c, x, &p), p.w));
  tt_hv total = sum_all(c, p.w), out;
  if (red == kNone && tt_lower_tensor_type(c, 0, -1).rank == 2) {
    out = loss;  // [N]; total_weight is 0, as ATen leaves it
    total = tt_hlo_const(b, tt_opmath(p.dt), 0);
  } else {  // a 1D input gives a 0-d loss and its weight, whatever the reduction
    out = sum_all(c, loss);
    if (red == kMean) out = tt_lower_bin(c, TT_HLO_DIV, out, total);
  }
  tt_lower_result(c, tt_hlo_convert(b, out, p.dt));
  tt_lower_result(c, tt_hlo_convert(b, total, p.dt));
  return NULL;
}

// nll_loss_backward(grad_output, self, target, weight?, reduction,
//                   ignore_index, total_weight) -> grad_input
static tt_status lower_nll_loss_backward(tt_lower_ctx *c) {
  int64_t red = tt_lower_int(c, 4);
  TT_RETURN_IF_ERROR(check_reduction(c, red));
  nll_parts p;
  TT_RETURN_IF_ERROR(nll_prepare(c, 1, &p));
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype acc = tt_opmath(p.dt);
  tt_hv g = tt_hlo_convert(b, tt_lower_tensor(c, 0), acc);
  g = red == kNone ? tt_hlo_reshape(b, g, 1, &p.n)
                   : tt_lower_broadcast_to(c, tt_hlo_reshape(b, g, 0, NULL), 1, &p.n);
  tt_hv scale = tt_hlo_unary(b, TT_HLO_NEG, tt_lower_bin(c, TT_HLO_MUL, p.w, g));
  if (red == kMean) {
    tt_hv tw = tt_hlo_convert(b, tt_hlo_reshape(b, tt_lower_tensor(c, 6), 0, NULL), acc);
    scale = tt_lower_bin(c, TT_HLO_DIV, scale, tt_lower_broadcast_to(c, tw, 1, &p.n));
  }
  int64_t xd[2] = {p.n, p.classes}, col[2] = {p.n, 1};
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 2, xd);
  tt_hv hit = tt_hlo_compare(b, TT_HLO_EQ, tt_hlo_iota(b, &it, 1),
                             tt_lower_broadcast_to(c, tt_hlo_reshape(b, p.safe, 2, col), 2, xd));
  tt_hv sc = tt_lower_broadcast_to(c, tt_hlo_reshape(b, scale, 2, col), 2, xd);
  tt_hv grad = tt_hlo_select(b, hit, sc, tt_lower_splat_like(c, sc, 0));
  tt_hlo_type xt = tt_lower_tensor_type(c, 1, -1);
  tt_lower_result(c, tt_hlo_convert(b, tt_hlo_reshape(b, grad, xt.rank, xt.dims), p.dt));
  return NULL;
}

// --- mse_loss ---------------------------------------------------------------------------------

// self - target, promoted and broadcast, in opmath; *rt gets the result dtype.
static tt_status diff(tt_lower_ctx *c, int x, tt_dtype *rt, tt_hv *d) {
  int idx[2] = {x, x + 1};
  *rt = tt_lower_result_type(c, idx, 2);
  if (!tt_dtype_is_float(*rt))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "mse_loss of %s is not supported",
                         tt_dtype_name(*rt));
  tt_hv v[2];
  TT_RETURN_IF_ERROR(tt_lower_operands(c, idx, 2, tt_opmath(*rt), v));
  *d = tt_lower_bin(c, TT_HLO_SUB, v[0], v[1]);
  return NULL;
}

// The reduction argument i (mean when omitted).
static tt_status reduction_arg(const tt_lower_ctx *c, int i, int64_t *out) {
  *out = tt_lower_is_none(c, i) ? kMean : tt_lower_int(c, i);
  return check_reduction(c, *out);
}

// mse_loss(self, target, reduction=mean)
static tt_status lower_mse_loss(tt_lower_ctx *c) {
  int64_t red;
  TT_RETURN_IF_ERROR(reduction_arg(c, 2, &red));
  tt_dtype rt;
  tt_hv d;
  TT_RETURN_IF_ERROR(diff(c, 0, &rt, &d));
  tt_hv sq = tt_lower_bin(c, TT_HLO_MUL, d, d);
  if (red != kNone) {
    const tt_hlo_type *t = tt_hlo_type_of(tt_lower_hlo(c), sq);
    double n = t ? (double)tt_hlo_numel(t) : 1;
    sq = sum_all(c, sq);
    if (red == kMean) sq = tt_lower_bin(c, TT_HLO_DIV, sq, tt_lower_splat_like(c, sq, n));
  }
  tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), sq, rt));
  return NULL;
}

// mse_loss_backward(grad_output, self, target, reduction):
//   2 (self - target) grad [/ N for mean]
static tt_status lower_mse_loss_backward(tt_lower_ctx *c) {
  int64_t red;
  TT_RETURN_IF_ERROR(reduction_arg(c, 3, &red));
  tt_dtype rt;
  tt_hv d;
  TT_RETURN_IF_ERROR(diff(c, 1, &rt, &d));
  const tt_hlo_type *tp = tt_hlo_type_of(tt_lower_hlo(c), d);
  if (!tp) return NULL;
  tt_hlo_type t = *tp;
  tt_hv g = tt_hlo_convert(tt_lower_hlo(c), tt_lower_tensor(c, 0), t.dtype);
  g = tt_lower_broadcast_to(c, g, t.rank, t.dims);
  double scale = red == kMean ? 2.0 / (double)(tt_hlo_numel(&t) ? tt_hlo_numel(&t) : 1) : 2.0;
  tt_hv r = tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_MUL, d, g), tt_lower_splat_like(c, d, scale));
  tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), r, rt));
  return NULL;
}

// --- the table ---------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
static const tt_rule kRules[] = {
    R("nll_loss_forward", lower_nll_loss_forward),
    R("nll_loss_forward.output", lower_nll_loss_forward),
    R("nll_loss_backward", lower_nll_loss_backward),
    R("nll_loss_backward.grad_input", lower_nll_loss_backward),
    R("mse_loss", lower_mse_loss), R("mse_loss.out", lower_mse_loss),
    R("mse_loss_backward", lower_mse_loss_backward),
    R("mse_loss_backward.grad_input", lower_mse_loss_backward),
};
#undef R

const tt_rule_table tt_rules_nn = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
