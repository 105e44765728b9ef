// dropout.c — native_dropout (the fused kernel nn.Dropout / F.dropout reach
// on the device in training mode) and native_dropout_backward.
//
// The keep mask is bernoulli(1 - p) drawn with stablehlo.rng_bit_generator
// from the device's default generator (native_dropout takes no generator),
// keyed by its (seed, offset), so the same seed gives the same mask and each
// call advances the offset. p is a runtime argument: changing it never
// recompiles. Kept elements are scaled by 1 / (1 - p) (0 when p == 1), like
// PyTorch; the mask is bool, as PyTorch's.
//
// Leaves out: a user generator (the op has none), dropout variants PyTorch
// decomposes before they reach a backend (alpha/feature dropout).
#include "lower/lower.h"

// 1 / keep_p, or 0 when keep_p (1 - p, a 0-d float32) is 0, as PyTorch scales.
static tt_hv keep_scale(tt_lower_ctx *c, tt_hv keep_p) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv zero = tt_hlo_const(b, TT_F32, 0), one = tt_hlo_const(b, TT_F32, 1);
  tt_hv nonzero = tt_hlo_compare(b, TT_HLO_NE, keep_p, zero);
  return tt_hlo_select(b, nonzero, tt_lower_bin(c, TT_HLO_DIV, one, keep_p), zero);
}

// native_dropout(input, p, train?) -> (output, mask). train None means True;
// train False returns (input, all-true mask).
static tt_status lower_native_dropout(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  if (!tt_dtype_is_float(t.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "dropout of a %s tensor", tt_dtype_name(t.dtype));
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type mt = tt_hlo_make_type(TT_BOOL, t.rank, t.dims);
  if (!tt_lower_is_none(c, 2) && !tt_lower_bool(c, 2)) {
    tt_lower_result(c, x);
    tt_lower_result(c, tt_hlo_splat_i(b, &mt, 1));
    return NULL;
  }
  // U[0, 1) from the top 24 of 32 random bits (exact in float32); keep where
  // U < 1 - p, i.e. with probability 1 - p.
  tt_hlo_type ut = tt_hlo_make_type(TT_U32, t.rank, t.dims);
  tt_hv bits = tt_hlo_rng_bits(b, tt_lower_rng_state(c, -1, (uint64_t)tt_hlo_numel(&t)), &ut);
  bits = tt_lower_bin(c, TT_HLO_SHR_L, bits, tt_hlo_splat_i(b, &ut, 8));
  tt_hv u = tt_lower_bin(c, TT_HLO_MUL, tt_hlo_convert(b, bits, TT_F32),
                tt_lower_splat_like(c, tt_hlo_convert(b, bits, TT_F32), 1.0 / 16777216.0));
  tt_hv keep_p = tt_lower_bin(c, TT_HLO_SUB, tt_hlo_const(b, TT_F32, 1), tt_lower_scalar(c, 1, TT_F32));
  tt_hv keep = tt_hlo_compare(b, TT_HLO_LT, u, tt_lower_broadcast_to(c, keep_p, t.rank, t.dims));
  tt_dtype acc = tt_opmath(t.dtype);
  tt_hv scale = tt_hlo_convert(b, keep_scale(c, keep_p), acc);
  tt_hv xs = tt_lower_bin(c, TT_HLO_MUL, tt_hlo_convert(b, x, acc), tt_lower_broadcast_to(c, scale, t.rank, t.dims));
  tt_hv y = tt_hlo_select(b, keep, xs, tt_lower_splat_like(c, xs, 0));
  tt_lower_result(c, tt_hlo_convert(b, y, t.dtype));
  tt_lower_result(c, keep);
  return NULL;
}

// native_dropout_backward(grad_output, mask, scale) = grad * mask * scale.
static tt_status lower_native_dropout_backward(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  if (!tt_dtype_is_float(t.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "dropout backward of a %s tensor",
                         tt_dtype_name(t.dtype));
  tt_dtype acc = tt_opmath(t.dtype);
  tt_hv g = tt_hlo_convert(b, tt_lower_tensor(c, 0), acc);
  tt_hv m = tt_hlo_convert(b, tt_lower_tensor(c, 1), acc);
  tt_hv gm[2] = {g, m};
  TT_RETURN_IF_ERROR(tt_lower_broadcast(c, gm, 2));
  const tt_hlo_type *rt = tt_hlo_type_of(b, gm[0]);
  if (!rt) return NULL;  // the builder holds the error
  tt_hv s = tt_lower_broadcast_to(c, tt_lower_scalar(c, 2, acc), rt->rank, rt->dims);
  tt_lower_result(c, tt_hlo_convert(b, tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_MUL, gm[0], gm[1]), s), t.dtype));
  return NULL;
}

// --- the table --------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
static const tt_rule kRules[] = {
    R("native_dropout", lower_native_dropout),
    R("native_dropout.out", lower_native_dropout),
    R("native_dropout_backward", lower_native_dropout_backward),
    R("native_dropout_backward.out", lower_native_dropout_backward),
};
#undef R

const tt_rule_table tt_rules_dropout = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
