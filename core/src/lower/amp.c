// amp.c — the two ops torch.amp.GradScaler runs every step, so that a
// mixed-precision loop stays on the device (without rules they ran on the
// CPU, copying every gradient to the host and back each step).
//
//   _amp_foreach_non_finite_check_and_unscale_(Tensor(a!)[] grads,
//       Tensor(b!) found_inf, Tensor inv_scale)
//   _amp_update_scale_(Tensor(a!) scale, Tensor(b!) growth_tracker,
//       Tensor found_inf, float growth_factor, float backoff_factor,
//       int growth_interval) -> Tensor(a!)
//
// Both follow PyTorch's CPU kernels: the grads are multiplied by inv_scale in
// their opmath type, found_inf becomes 1.0 when any grad holds an inf or NaN
// (it is never reset to 0 here), and the scale backs off on found_inf, grows
// after growth_interval clean steps when the grown scale is finite.
#include "lower/lower.h"

// Argument i must be a 1-element tensor of dtype d (PyTorch's checks' text).
static tt_status one_element(tt_lower_ctx *c, int i, const char *name, tt_dtype d) {
  tt_hlo_type t = tt_lower_tensor_type(c, i, -1);
  if (tt_hlo_numel(&t) != 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s must be a 1-element tensor.", name);
  if (t.dtype != d)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s must be a%s %s tensor.", name,
                         d == TT_I32 ? "n" : "", d == TT_I32 ? "int" : "float");
  return NULL;
}

// A 1-element argument as a 0-d value of dtype d.
static tt_hv scalar_of(tt_lower_ctx *c, int i, tt_dtype d) {
  tt_hlo *b = tt_lower_hlo(c);
  return tt_hlo_convert(b, tt_hlo_reshape(b, tt_lower_tensor(c, i), 0, NULL), d);
}

// grads, found_inf, inv_scale: results are the grads, then found_inf.
static tt_status unscale(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  TT_RETURN_IF_ERROR(one_element(c, 2, "inv_scale", TT_F32));
  TT_RETURN_IF_ERROR(one_element(c, 1, "found_inf", TT_F32));
  const tt_value *grads = tt_lower_arg(c, 0);
  int n = grads->kind == TT_VALUE_LIST ? grads->u.list.n : 0;
  for (int j = 0; j < n; j++) {
    tt_dtype d = tt_lower_tensor_type(c, 0, j).dtype;
    if (!tt_dtype_is_float(d))
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "scaled_grads must be floating point "
                           "tensors, got %s at index %d", tt_dtype_name(d), j);
  }
  tt_hv inv = scalar_of(c, 2, TT_F32);
  tt_hv found = tt_hlo_const(b, TT_BOOL, 0);
  for (int j = 0; j < n; j++) {
    tt_hv g = tt_lower_list_tensor(c, 0, j);
    tt_hlo_type t = tt_lower_tensor_type(c, 0, j);
    tt_dtype d = tt_opmath(t.dtype);
    tt_hv gd = tt_hlo_convert(b, g, d);
    tt_hv bad = tt_hlo_unary(b, TT_HLO_NOT, tt_hlo_unary(b, TT_HLO_IS_FINITE, gd));
    if (t.rank > 0) {
      int64_t dims[TT_MAX_RANK];
      for (int k = 0; k < t.rank; k++) dims[k] = k;
      bad = tt_hlo_reduce(b, bad, tt_hlo_const(b, TT_BOOL, 0), dims, t.rank, TT_HLO_REDUCE_OR);
    }
    found = tt_lower_bin(c, TT_HLO_OR, found, bad);
    tt_hv s = tt_lower_expand_like(c, tt_hlo_convert(b, inv, d), gd);
    tt_lower_result(c, tt_hlo_convert(b, tt_lower_bin(c, TT_HLO_MUL, gd, s), t.dtype));
  }
  tt_hv old = scalar_of(c, 1, TT_F32);
  tt_hv now = tt_hlo_select(b, found, tt_hlo_const(b, TT_F32, 1), old);
  tt_hlo_type ft = tt_lower_tensor_type(c, 1, -1);
  tt_lower_result(c, tt_hlo_reshape(b, now, ft.rank, ft.dims));
  return NULL;
}

// scale, growth_tracker, found_inf, growth_factor, backoff_factor,
// growth_interval: the result is the new scale; growth_tracker is written.
static tt_status update_scale(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  TT_RETURN_IF_ERROR(one_element(c, 0, "current_scale", TT_F32));
  TT_RETURN_IF_ERROR(one_element(c, 1, "growth_tracker", TT_I32));
  TT_RETURN_IF_ERROR(one_element(c, 2, "found_inf", TT_F32));
  // The CPU kernel multiplies in double, then rounds to float.
  tt_dtype wide = tt_lower_supports_f64(c) ? TT_F64 : TT_F32;
  tt_hv scale = scalar_of(c, 0, wide);
  tt_hv tracker = scalar_of(c, 1, TT_I32);
  tt_hv found = tt_hlo_compare(b, TT_HLO_NE, scalar_of(c, 2, TT_F32), tt_hlo_const(b, TT_F32, 0));
  tt_hv backed = tt_hlo_convert(b, tt_lower_bin(c, TT_HLO_MUL, scale, tt_lower_scalar(c, 4, wide)), TT_F32);
  tt_hv grown = tt_hlo_convert(b, tt_lower_bin(c, TT_HLO_MUL, scale, tt_lower_scalar(c, 3, wide)), TT_F32);
  tt_hv scale32 = tt_hlo_convert(b, scale, TT_F32);
  tt_hv successful = tt_lower_bin(c, TT_HLO_ADD, tracker, tt_hlo_const(b, TT_I32, 1));
  tt_hv interval = tt_hlo_const_i(b, TT_I32, tt_lower_int(c, 5));
  tt_hv grow = tt_hlo_compare(b, TT_HLO_EQ, successful, interval);
  tt_hv clean = tt_hlo_select(b, grow, tt_hlo_select(b, tt_hlo_unary(b, TT_HLO_IS_FINITE, grown),
                                                     grown, scale32), scale32);
  tt_hv zero = tt_hlo_const(b, TT_I32, 0);
  tt_hv new_scale = tt_hlo_select(b, found, backed, clean);
  tt_hv new_tracker = tt_hlo_select(b, found, zero, tt_hlo_select(b, grow, zero, successful));
  tt_hlo_type st = tt_lower_tensor_type(c, 0, -1), gt = tt_lower_tensor_type(c, 1, -1);
  tt_lower_result(c, tt_hlo_reshape(b, new_scale, st.rank, st.dims));
  tt_lower_write_arg(c, 1, tt_hlo_reshape(b, new_tracker, gt.rank, gt.dims));
  return NULL;
}

static const tt_rule kRules[] = {
    {"aten::_amp_foreach_non_finite_check_and_unscale_", unscale, 0},
    {"aten::_amp_update_scale_", update_scale, 0},
};

const tt_rule_table tt_rules_amp = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
