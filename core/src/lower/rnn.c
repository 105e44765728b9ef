// rnn.c — the fused RNN cell kernels ATen calls for a non-CPU device:
// _thnn_fused_lstm_cell / _thnn_fused_gru_cell and their backwards.
//
// at::lstm_cell / at::gru_cell (nn.LSTMCell, nn.GRUCell, and every time step
// of nn.LSTM / nn.GRU) compute the two gate matmuls with ordinary ops, then
// hand the gates to these ops on CUDA, XPU and PrivateUse1 devices; PyTorch
// has only CUDA kernels for them (the CPU path never calls them), so without
// these rules LSTM and GRU do not run on "tpu" at all.
//
// Gates are [B, k*H] (k = 4 for LSTM: input, forget, cell, output; k = 3 for
// GRU: reset, update, new), biases [k*H]. The workspace layouts are CUDA's,
// so each backward reads what its forward stored: LSTM [B, 4H] = the gates
// after their activations; GRU [B, 5H] = reset, update, new gates, the new
// gate's hidden part (with its bias), hx. 16-bit floats compute in float32.
//
// Leaves out: CUDA's undefined bias gradients when has_bias is false (the
// column sums are returned anyway; autograd drops them, as the cell had no
// bias inputs).
#include <inttypes.h>

#include "lower/lower.h"

// --- pieces ---------------------------------------------------------------------------------

// Columns [j*h, (j+1)*h) of a [B, n] value.
static tt_hv chunk(tt_lower_ctx *c, tt_hv x, int64_t h, int64_t j) {
  const tt_hlo_type *t = tt_hlo_type_of(tt_lower_hlo(c), x);
  if (!t) return x;  // the builder holds the error
  int64_t start[2] = {0, j * h}, limit[2] = {t->dims[0], (j + 1) * h}, stride[2] = {1, 1};
  return tt_hlo_slice(tt_lower_hlo(c), x, start, limit, stride);
}

// Tensor argument i in dtype acc; chunk j of it when it is a [k*H] bias
// (broadcast to [B, H]); 0 when the bias is None.
static tt_hv bias_chunk(tt_lower_ctx *c, int i, int64_t b, int64_t h, int64_t j, tt_dtype acc) {
  tt_hlo *hb = tt_lower_hlo(c);
  int64_t dims[2] = {b, h};
  if (tt_lower_is_none(c, i)) {
    tt_hlo_type t = tt_hlo_make_type(acc, 2, dims);
    return tt_hlo_splat(hb, &t, 0);
  }
  tt_hv v = tt_lower_convert(c, tt_lower_tensor(c, i), acc);
  int64_t start = j * h, limit = (j + 1) * h, stride = 1;
  v = tt_hlo_slice(hb, v, &start, &limit, &stride);
  return tt_lower_broadcast_to(c, v, 2, dims);
}

static tt_hv add(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_ADD, x, y); }
static tt_hv sub(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_SUB, x, y); }
static tt_hv mul(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_MUL, x, y); }
static tt_hv sigmoid(tt_lower_ctx *c, tt_hv x) { return tt_hlo_unary(tt_lower_hlo(c), TT_HLO_LOGISTIC, x); }
static tt_hv tanh_(tt_lower_ctx *c, tt_hv x) { return tt_hlo_unary(tt_lower_hlo(c), TT_HLO_TANH, x); }

// s * (1 - s): the derivative of the sigmoid whose value is s.
static tt_hv dsigmoid(tt_lower_ctx *c, tt_hv s) {
  return mul(c, s, sub(c, tt_lower_splat_like(c, s, 1), s));
}

// 1 - t^2: the derivative of the tanh whose value is t.
static tt_hv dtanh(tt_lower_ctx *c, tt_hv t) {
  return sub(c, tt_lower_splat_like(c, t, 1), mul(c, t, t));
}

// Column sums of a [B, n] value: the bias gradient.
static tt_hv col_sum(tt_lower_ctx *c, tt_hv x) {
  bool rows[TT_MAX_RANK] = {true};
  return tt_lower_reduce(c, x, rows, false, TT_HLO_REDUCE_ADD);
}

// CUDA's checkSizes: gates (args 0, 1) 2-D of the same size [B, k*H], biases
// (args 3, 4, when given) 1-D of k*H elements, the previous state (arg 2)
// [B, H]. Sets *b and *h.
static tt_status check_cell(tt_lower_ctx *c, int64_t k, int64_t *b, int64_t *h) {
  char s1[96], s2[96];
  tt_hlo_type ig = tt_lower_tensor_type(c, 0, -1), hg = tt_lower_tensor_type(c, 1, -1);
  tt_hlo_type prev = tt_lower_tensor_type(c, 2, -1);
  if (ig.rank != 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected 2-dimensional tensor, but got "
                         "%d-dimensional tensor for argument #1 'input_gates'", (int)ig.rank);
  if (hg.rank != 2 || hg.dims[0] != ig.dims[0] || hg.dims[1] != ig.dims[1])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected tensor for argument #1 'input_gates' "
                         "to have same size as tensor for argument #2 'hidden_gates'; but %s "
                         "does not equal %s", tt_shape_str(&ig, s1, sizeof s1),
                         tt_shape_str(&hg, s2, sizeof s2));
  if (ig.dims[1] % k != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "gates of %" PRId64 " columns are not %" PRId64
                         " gates", ig.dims[1], k);
  for (int i = 3; i <= 4; i++) {
    if (tt_lower_is_none(c, i)) continue;
    tt_hlo_type bt = tt_lower_tensor_type(c, i, -1);
    if (bt.rank != 1 || bt.dims[0] != ig.dims[1])
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected tensor for argument #%d to have "
                           "%" PRId64 " elements; but its size is %s", i + 1, ig.dims[1],
                           tt_shape_str(&bt, s1, sizeof s1));
  }
  *b = ig.dims[0];
  *h = ig.dims[1] / k;
  if (prev.rank != 2 || prev.dims[0] != *b || prev.dims[1] != *h)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected tensor for argument #3 to have size "
                         "[%" PRId64 ", %" PRId64 "]; but its size is %s", *b, *h,
                         tt_shape_str(&prev, s1, sizeof s1));
  return NULL;
}

// Gate j before its activation: input + hidden gates + both biases.
static tt_hv gate_sum(tt_lower_ctx *c, tt_hv ig, tt_hv hg, int64_t b, int64_t h, int64_t j,
                      tt_dtype acc) {
  tt_hv s = add(c, chunk(c, ig, h, j), chunk(c, hg, h, j));
  return add(c, s, add(c, bias_chunk(c, 3, b, h, j, acc), bias_chunk(c, 4, b, h, j, acc)));
}

// --- LSTM -----------------------------------------------------------------------------------

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?)
//   -> (hy, cy, workspace)
static tt_status lower_lstm_cell(tt_lower_ctx *c) {
  int64_t b, h;
  TT_RETURN_IF_ERROR(check_cell(c, 4, &b, &h));
  tt_dtype d = tt_lower_tensor_type(c, 0, -1).dtype, acc = tt_opmath(d);
  tt_hv ig = tt_lower_convert(c, tt_lower_tensor(c, 0), acc);
  tt_hv hg = tt_lower_convert(c, tt_lower_tensor(c, 1), acc);
  tt_hv cx = tt_lower_convert(c, tt_lower_tensor(c, 2), acc);
  tt_hv in = sigmoid(c, gate_sum(c, ig, hg, b, h, 0, acc));
  tt_hv forget = sigmoid(c, gate_sum(c, ig, hg, b, h, 1, acc));
  tt_hv cell = tanh_(c, gate_sum(c, ig, hg, b, h, 2, acc));
  tt_hv out = sigmoid(c, gate_sum(c, ig, hg, b, h, 3, acc));
  tt_hv cy = add(c, mul(c, forget, cx), mul(c, in, cell));
  tt_hv hy = mul(c, out, tanh_(c, cy));
  tt_hv gates[4] = {in, forget, cell, out};
  tt_lower_result(c, tt_lower_convert(c, hy, d));
  tt_lower_result(c, tt_lower_convert(c, cy, d));
  tt_lower_result(c, tt_lower_convert(c, tt_hlo_concatenate(tt_lower_hlo(c), gates, 4, 1), d));
  return NULL;
}

// _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//   -> (grad_gates, grad_cx, grad_bias)
static tt_status lower_lstm_cell_backward(tt_lower_ctx *c) {
  tt_hlo_type wt = tt_lower_tensor_type(c, 4, -1), ct = tt_lower_tensor_type(c, 2, -1);
  if (wt.rank != 2 || ct.rank != 2 || wt.dims[1] != 4 * ct.dims[1] || wt.dims[0] != ct.dims[0])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "workspace of %" PRId64 " x %" PRId64
                         " does not hold the 4 gates of a %" PRId64 " x %" PRId64 " cell state",
                         wt.rank > 0 ? wt.dims[0] : 0, wt.rank > 1 ? wt.dims[1] : 0,
                         ct.rank > 0 ? ct.dims[0] : 0, ct.rank > 1 ? ct.dims[1] : 0);
  int64_t h = ct.dims[1];
  tt_dtype d = wt.dtype, acc = tt_opmath(d);
  tt_hv ws = tt_lower_convert(c, tt_lower_tensor(c, 4), acc);
  tt_hv cx = tt_lower_convert(c, tt_lower_tensor(c, 2), acc);
  tt_hv cy = tt_lower_convert(c, tt_lower_tensor(c, 3), acc);
  tt_hv in = chunk(c, ws, h, 0), forget = chunk(c, ws, h, 1);
  tt_hv cell = chunk(c, ws, h, 2), out = chunk(c, ws, h, 3);
  tt_hv tanh_cy = tanh_(c, cy);
  tt_hv zero = tt_lower_splat_like(c, cy, 0);  // an undefined grad (both may be: zeros out)
  tt_hv ghy = tt_lower_is_none(c, 0) ? zero : tt_lower_convert(c, tt_lower_tensor(c, 0), acc);
  tt_hv gcy = tt_lower_is_none(c, 1) ? zero : tt_lower_convert(c, tt_lower_tensor(c, 1), acc);
  // d loss / d cy through hy = out * tanh(cy), plus the direct gradient.
  tt_hv gc = add(c, mul(c, mul(c, ghy, out), dtanh(c, tanh_cy)), gcy);
  tt_hv grads[4] = {
      mul(c, mul(c, gc, cell), dsigmoid(c, in)),
      mul(c, mul(c, gc, cx), dsigmoid(c, forget)),
      mul(c, mul(c, gc, in), dtanh(c, cell)),
      mul(c, mul(c, ghy, tanh_cy), dsigmoid(c, out)),
  };
  tt_hv gg = tt_hlo_concatenate(tt_lower_hlo(c), grads, 4, 1);
  tt_lower_result(c, tt_lower_convert(c, gg, d));
  tt_lower_result(c, tt_lower_convert(c, mul(c, gc, forget), d));
  tt_lower_result(c, tt_lower_convert(c, col_sum(c, gg), d));
  return NULL;
}

// --- GRU ------------------------------------------------------------------------------------

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?)
//   -> (hy, workspace)
static tt_status lower_gru_cell(tt_lower_ctx *c) {
  int64_t b, h;
  TT_RETURN_IF_ERROR(check_cell(c, 3, &b, &h));
  tt_dtype d = tt_lower_tensor_type(c, 0, -1).dtype, acc = tt_opmath(d);
  tt_hv ig = tt_lower_convert(c, tt_lower_tensor(c, 0), acc);
  tt_hv hg = tt_lower_convert(c, tt_lower_tensor(c, 1), acc);
  tt_hv hx = tt_lower_convert(c, tt_lower_tensor(c, 2), acc);
  tt_hv reset = sigmoid(c, gate_sum(c, ig, hg, b, h, 0, acc));
  tt_hv update = sigmoid(c, gate_sum(c, ig, hg, b, h, 1, acc));
  // The new gate's hidden part is scaled by the reset gate, its bias included.
  tt_hv hn = add(c, chunk(c, hg, h, 2), bias_chunk(c, 4, b, h, 2, acc));
  tt_hv in = add(c, chunk(c, ig, h, 2), bias_chunk(c, 3, b, h, 2, acc));
  tt_hv fresh = tanh_(c, add(c, in, mul(c, reset, hn)));
  tt_hv hy = add(c, fresh, mul(c, update, sub(c, hx, fresh)));
  tt_hv ws[5] = {reset, update, fresh, hn, hx};
  tt_lower_result(c, tt_lower_convert(c, hy, d));
  tt_lower_result(c, tt_lower_convert(c, tt_hlo_concatenate(tt_lower_hlo(c), ws, 5, 1), d));
  return NULL;
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//   -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)
static tt_status lower_gru_cell_backward(tt_lower_ctx *c) {
  tt_hlo_type gt = tt_lower_tensor_type(c, 0, -1), wt = tt_lower_tensor_type(c, 1, -1);
  if (gt.rank != 2 || wt.rank != 2 || wt.dims[0] != gt.dims[0] || wt.dims[1] != 5 * gt.dims[1])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "workspace of %" PRId64 " x %" PRId64
                         " does not hold the state of a %" PRId64 " x %" PRId64 " GRU cell",
                         wt.rank > 0 ? wt.dims[0] : 0, wt.rank > 1 ? wt.dims[1] : 0,
                         gt.rank > 0 ? gt.dims[0] : 0, gt.rank > 1 ? gt.dims[1] : 0);
  int64_t h = gt.dims[1];
  tt_dtype d = gt.dtype, acc = tt_opmath(d);
  tt_hv g = tt_lower_convert(c, tt_lower_tensor(c, 0), acc);
  tt_hv ws = tt_lower_convert(c, tt_lower_tensor(c, 1), acc);
  tt_hv reset = chunk(c, ws, h, 0), update = chunk(c, ws, h, 1), fresh = chunk(c, ws, h, 2);
  tt_hv hn = chunk(c, ws, h, 3), hx = chunk(c, ws, h, 4);
  tt_hv one = tt_lower_splat_like(c, g, 1);
  tt_hv gu = mul(c, mul(c, g, sub(c, hx, fresh)), dsigmoid(c, update));
  tt_hv gn = mul(c, mul(c, g, sub(c, one, update)), dtanh(c, fresh));
  tt_hv gr = mul(c, mul(c, gn, hn), dsigmoid(c, reset));
  tt_hv gi[3] = {gr, gu, gn}, gh[3] = {gr, gu, mul(c, gn, reset)};
  tt_hv gin = tt_hlo_concatenate(tt_lower_hlo(c), gi, 3, 1);
  tt_hv ghid = tt_hlo_concatenate(tt_lower_hlo(c), gh, 3, 1);
  tt_lower_result(c, tt_lower_convert(c, gin, d));
  tt_lower_result(c, tt_lower_convert(c, ghid, d));
  tt_lower_result(c, tt_lower_convert(c, mul(c, g, update), d));
  tt_lower_result(c, tt_lower_convert(c, col_sum(c, gin), d));
  tt_lower_result(c, tt_lower_convert(c, col_sum(c, ghid), d));
  return NULL;
}

// --- the table ------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
static const tt_rule kRules[] = {
    R("_thnn_fused_lstm_cell", lower_lstm_cell),
    R("_thnn_fused_lstm_cell.out", lower_lstm_cell),
    R("_thnn_fused_lstm_cell_backward_impl", lower_lstm_cell_backward),
    R("_thnn_fused_lstm_cell_backward_impl.out", lower_lstm_cell_backward),
    R("_thnn_fused_gru_cell", lower_gru_cell),
    R("_thnn_fused_gru_cell.out", lower_gru_cell),
    R("_thnn_fused_gru_cell_backward", lower_gru_cell_backward),
    R("_thnn_fused_gru_cell_backward.out", lower_gru_cell_backward),
};
#undef R

const tt_rule_table tt_rules_rnn = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
