// rnn.c — the fused LSTM and GRU cells PyTorch's RNN modules call on every
// device but the CPU (aten/src/ATen/native/RNN.cpp: LSTMCell and GRUCell
// take _thnn_fused_{lstm,gru}_cell when the input is not on the CPU), with
// their backward. PyTorch implements them for CUDA only, so without these
// rules nn.LSTM / nn.GRU on "tpu" failed (the CPU fallback has no kernel).
//
// The gates arrive as two [B, G*H] matmul results (input and hidden) with
// optional [G*H] biases; the formulas, the gate order and the workspace the
// backward reads are those of PyTorch's CUDA kernels (RNN.cu), computed in
// the opmath dtype and rounded once:
//   LSTM (G = 4: i, f, g, o): i, f, o = sigmoid; g = tanh;
//     cy = f * cx + i * g, hy = o * tanh(cy); workspace [i, f, g, o] (activated).
//   GRU (G = 3: r, z, n): r, z = sigmoid(in + hid); n = tanh(in_n + r * hid_n);
//     hy = n + z * (hx - n); workspace [r, z, n, hx, hid_n] ([B, 5H]).
// Leaves out: gates that are not 2-d (PyTorch's checks refuse them too).
#include <inttypes.h>

#include "lower/lower.h"

// --- helpers ------------------------------------------------------------------------------

// Gate k (of width h) of a [B, G*H] value.
static tt_hv gate(tt_lower_ctx *c, tt_hv x, int64_t k, int64_t h) {
  tt_hlo_type t = tt_lower_type(c, x);
  int64_t start[2] = {0, k * h}, limit[2] = {t.dims[0], (k + 1) * h}, step[2] = {1, 1};
  return tt_hlo_slice(tt_lower_hlo(c), x, start, limit, step);
}

// Tensor argument i in the opmath dtype `m`.
static tt_hv operand(tt_lower_ctx *c, int i, tt_dtype m) {
  return tt_lower_convert(c, tt_lower_tensor(c, i), m);
}

// input_gates + hidden_gates and, when given, both biases (broadcast over
// the batch); *hid gets hidden_gates (+ hidden_bias) alone, for GRU's n gate.
static tt_hv sum_gates(tt_lower_ctx *c, tt_dtype m, tt_hv *in, tt_hv *hid) {
  *in = operand(c, 0, m);
  *hid = operand(c, 1, m);
  if (!tt_lower_is_none(c, 3)) {
    tt_hlo_type t = tt_lower_type(c, *in);
    int64_t bdim = 1;
    tt_hlo *b = tt_lower_hlo(c);
    *in = tt_lower_bin(c, TT_HLO_ADD, *in,
                       tt_hlo_broadcast_in_dim(b, operand(c, 3, m), 2, t.dims, &bdim));
    *hid = tt_lower_bin(c, TT_HLO_ADD, *hid,
                        tt_hlo_broadcast_in_dim(b, operand(c, 4, m), 2, t.dims, &bdim));
  }
  return tt_lower_bin(c, TT_HLO_ADD, *in, *hid);
}

static tt_hv sigmoid(tt_lower_ctx *c, tt_hv x) {
  return tt_hlo_unary(tt_lower_hlo(c), TT_HLO_LOGISTIC, x);
}

static tt_hv tanh_(tt_lower_ctx *c, tt_hv x) { return tt_hlo_unary(tt_lower_hlo(c), TT_HLO_TANH, x); }

static tt_hv mul(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_MUL, x, y); }
static tt_hv sub(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_SUB, x, y); }
static tt_hv add(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_ADD, x, y); }
// 1 - x
static tt_hv one_minus(tt_lower_ctx *c, tt_hv x) { return sub(c, tt_lower_splat_like(c, x, 1), x); }

// PyTorch's rnn_cell_checkSizes: 2-d gates of equal shape [B, g*H], 1-d
// biases of g*H elements, a 2-d previous state (arg 2) of B*H elements.
static tt_status check_cell(tt_lower_ctx *c, int g, int64_t *h) {
  tt_hlo_type ig = tt_lower_tensor_type(c, 0, -1), hg = tt_lower_tensor_type(c, 1, -1);
  tt_hlo_type prev = tt_lower_tensor_type(c, 2, -1);
  if (ig.rank != 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%d != 2", ig.rank);
  if (hg.rank != 2 || hg.dims[0] != ig.dims[0] || hg.dims[1] != ig.dims[1])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input_gates and hidden_gates differ in shape");
  if (!tt_lower_is_none(c, 3)) {
    tt_hlo_type b1 = tt_lower_tensor_type(c, 3, -1);
    if (b1.rank != 1 || b1.dims[0] != ig.dims[1] || tt_lower_is_none(c, 4))
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input_bias must be 1-d with %" PRId64
                           " elements, like hidden_bias", ig.dims[1]);
    tt_hlo_type b2 = tt_lower_tensor_type(c, 4, -1);
    if (b2.rank != 1 || b2.dims[0] != b1.dims[0])
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input_bias and hidden_bias differ in shape");
  }
  if (ig.dims[1] % g || prev.rank != 2 || prev.dims[0] != ig.dims[0] ||
      prev.dims[1] != ig.dims[1] / g)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "the previous state must be [%" PRId64
                         ", %" PRId64 "] for gates of [%" PRId64 ", %" PRId64 "]", ig.dims[0],
                         ig.dims[1] / g, ig.dims[0], ig.dims[1]);
  if (!tt_dtype_is_float(ig.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "fused rnn cell of %s", tt_dtype_name(ig.dtype));
  *h = ig.dims[1] / g;
  return NULL;
}

// --- LSTM ------------------------------------------------------------------------------------

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?,
// hidden_bias?) -> (hy, cy, workspace)
static tt_status lower_lstm_cell(tt_lower_ctx *c) {
  int64_t h;
  TT_RETURN_IF_ERROR(check_cell(c, 4, &h));
  tt_dtype d = tt_lower_tensor_type(c, 0, -1).dtype, m = tt_opmath(d);
  tt_hv in, hid;
  tt_hv gates = sum_gates(c, m, &in, &hid);
  tt_hv i = sigmoid(c, gate(c, gates, 0, h)), f = sigmoid(c, gate(c, gates, 1, h));
  tt_hv g = tanh_(c, gate(c, gates, 2, h)), o = sigmoid(c, gate(c, gates, 3, h));
  tt_hv cy = add(c, mul(c, f, operand(c, 2, m)), mul(c, i, g));
  tt_hv hy = mul(c, o, tanh_(c, cy));
  tt_hv parts[4] = {i, f, g, o};
  tt_lower_result(c, tt_lower_convert(c, hy, d));
  tt_lower_result(c, tt_lower_convert(c, cy, d));
  tt_lower_result(c, tt_lower_convert(c, tt_hlo_concatenate(tt_lower_hlo(c), parts, 4, 1), d));
  return NULL;
}

// grad_gates summed over the batch: the biases' gradient.
static tt_hv batch_sum(tt_lower_ctx *c, tt_hv x) {
  bool mask[2] = {true, false};
  return tt_lower_reduce(c, x, mask, false, TT_HLO_REDUCE_ADD);
}

// _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace,
// has_bias) -> (grad_gates, grad_cx, grad_bias); a missing gradient is zero.
static tt_status lower_lstm_cell_backward(tt_lower_ctx *c) {
  tt_hlo_type cxt = tt_lower_tensor_type(c, 2, -1), wt = tt_lower_tensor_type(c, 4, -1);
  tt_hlo_type cyt = tt_lower_tensor_type(c, 3, -1);
  if (cxt.rank != 2 || wt.rank != 2 || wt.dims[0] != cxt.dims[0] || wt.dims[1] != 4 * cxt.dims[1] ||
      cyt.rank != 2 || cyt.dims[0] != cxt.dims[0] || cyt.dims[1] != cxt.dims[1])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "lstm cell backward: cx, cy [B, H] and "
                         "workspace [B, 4H] expected");
  if (!tt_dtype_is_float(cxt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "fused lstm cell of %s", tt_dtype_name(cxt.dtype));
  tt_dtype d = cxt.dtype, m = tt_opmath(d);
  int64_t h = cxt.dims[1];
  tt_hv cx = operand(c, 2, m), cy = operand(c, 3, m), ws = operand(c, 4, m);
  tt_hv zero = tt_lower_splat_like(c, cx, 0);
  tt_hv go = tt_lower_is_none(c, 0) ? zero : operand(c, 0, m);
  tt_hv goc = tt_lower_is_none(c, 1) ? zero : operand(c, 1, m);
  tt_hv i = gate(c, ws, 0, h), f = gate(c, ws, 1, h), g = gate(c, ws, 2, h), o = gate(c, ws, 3, h);
  tt_hv t = tanh_(c, cy);
  tt_hv gcx = add(c, mul(c, mul(c, go, o), one_minus(c, mul(c, t, t))), goc);
  tt_hv gi = mul(c, mul(c, mul(c, gcx, g), one_minus(c, i)), i);
  tt_hv gf = mul(c, mul(c, mul(c, gcx, cx), one_minus(c, f)), f);
  tt_hv gg = mul(c, mul(c, gcx, i), one_minus(c, mul(c, g, g)));
  tt_hv gog = mul(c, mul(c, mul(c, go, t), one_minus(c, o)), o);
  tt_hv parts[4] = {gi, gf, gg, gog};
  tt_hv grad_gates = tt_lower_convert(c, tt_hlo_concatenate(tt_lower_hlo(c), parts, 4, 1), d);
  tt_lower_result(c, grad_gates);
  tt_lower_result(c, tt_lower_convert(c, mul(c, gcx, f), d));
  // The bias gradient sums the rounded gates, as the CUDA kernel's caller does.
  tt_lower_result(c, tt_lower_convert(c, batch_sum(c, tt_lower_convert(c, grad_gates, m)), d));
  return NULL;
}

// --- GRU ---------------------------------------------------------------------------------------

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?,
// hidden_bias?) -> (hy, workspace)
static tt_status lower_gru_cell(tt_lower_ctx *c) {
  int64_t h;
  TT_RETURN_IF_ERROR(check_cell(c, 3, &h));
  tt_dtype d = tt_lower_tensor_type(c, 0, -1).dtype, m = tt_opmath(d);
  tt_hv in, hid;
  tt_hv sum = sum_gates(c, m, &in, &hid);
  tt_hv r = sigmoid(c, gate(c, sum, 0, h)), z = sigmoid(c, gate(c, sum, 1, h));
  tt_hv hn = gate(c, hid, 2, h);
  tt_hv n = tanh_(c, add(c, gate(c, in, 2, h), mul(c, r, hn)));
  tt_hv hx = operand(c, 2, m);
  tt_hv hy = add(c, n, mul(c, z, sub(c, hx, n)));
  tt_hv parts[5] = {r, z, n, hx, hn};
  tt_lower_result(c, tt_lower_convert(c, hy, d));
  tt_lower_result(c, tt_lower_convert(c, tt_hlo_concatenate(tt_lower_hlo(c), parts, 5, 1), d));
  return NULL;
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias) ->
// (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias,
// grad_hidden_bias)
static tt_status lower_gru_cell_backward(tt_lower_ctx *c) {
  tt_hlo_type gt = tt_lower_tensor_type(c, 0, -1), wt = tt_lower_tensor_type(c, 1, -1);
  if (gt.rank != 2 || wt.rank != 2 || wt.dims[0] != gt.dims[0] || wt.dims[1] != 5 * gt.dims[1])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "gru cell backward: grad_hy [B, H] and "
                         "workspace [B, 5H] expected");
  if (!tt_dtype_is_float(gt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "fused gru cell of %s", tt_dtype_name(gt.dtype));
  tt_dtype d = gt.dtype, m = tt_opmath(d);
  int64_t h = gt.dims[1];
  tt_hv go = operand(c, 0, m), ws = operand(c, 1, m);
  tt_hv r = gate(c, ws, 0, h), z = gate(c, ws, 1, h), n = gate(c, ws, 2, h);
  tt_hv hx = gate(c, ws, 3, h), hn = gate(c, ws, 4, h);
  tt_hv gz = mul(c, mul(c, mul(c, go, sub(c, hx, n)), one_minus(c, z)), z);
  tt_hv ghx = mul(c, go, z);
  tt_hv gn = mul(c, mul(c, go, one_minus(c, z)), one_minus(c, mul(c, n, n)));
  tt_hv ghn = mul(c, gn, r);
  tt_hv gr = mul(c, mul(c, mul(c, gn, hn), one_minus(c, r)), r);
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv in_parts[3] = {gr, gz, gn}, hid_parts[3] = {gr, gz, ghn};
  tt_hv gin = tt_lower_convert(c, tt_hlo_concatenate(b, in_parts, 3, 1), d);
  tt_hv ghid = tt_lower_convert(c, tt_hlo_concatenate(b, hid_parts, 3, 1), d);
  tt_lower_result(c, gin);
  tt_lower_result(c, ghid);
  tt_lower_result(c, tt_lower_convert(c, ghx, d));
  tt_lower_result(c, tt_lower_convert(c, batch_sum(c, tt_lower_convert(c, gin, m)), d));
  tt_lower_result(c, tt_lower_convert(c, batch_sum(c, tt_lower_convert(c, ghid, m)), d));
  return NULL;
}

// --- table -----------------------------------------------------------------------------------

static const tt_rule kRules[] = {
    {"aten::_thnn_fused_lstm_cell", lower_lstm_cell, 0},
    {"aten::_thnn_fused_lstm_cell_backward_impl", lower_lstm_cell_backward, 0},
    {"aten::_thnn_fused_gru_cell", lower_gru_cell, 0},
    {"aten::_thnn_fused_gru_cell_backward", lower_gru_cell_backward, 0},
};

const tt_rule_table tt_rules_rnn = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
