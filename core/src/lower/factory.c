// factory.c — ops that make tensors from scalars: arange.start_out.
//
// arange's Scalar arguments decide the result's length, so its rule is
// flagged TT_RULE_SCALARS_IN_SIGNATURE: the values are known while lowering
// (and become part of the op's signature). The result dtype is the out
// tensor's; when its shape differs the context asks the caller to resize.
//
// Leaves out: linspace, logspace, full/zeros/ones (PyTorch builds them from
// empty + fill_, which the shim and elementwise.c handle).
#include <inttypes.h>
#include <math.h>

#include "lower/lower.h"

static bool scalar_is_float(const tt_value *v) {
  return v->kind == TT_VALUE_SCALAR && tt_dtype_is_float(v->u.scalar.dtype);
}

// A Scalar argument as a double (ints and bools exactly up to 2^53).
static double scalar_f(const tt_value *v) {
  if (v->kind == TT_VALUE_SCALAR)
    return tt_dtype_is_float(v->u.scalar.dtype) ? v->u.scalar.f : (double)v->u.scalar.i;
  if (v->kind == TT_VALUE_INT) return (double)v->u.i;
  return v->kind == TT_VALUE_BOOL ? (double)v->u.b : 0;
}

// The element count PyTorch computes: ceil((end - start) / step), in int64
// arithmetic for integer results and double otherwise.
static tt_status arange_length(const tt_lower_ctx *c, tt_dtype d, double start,
                               double end, double step, int64_t *out) {
  if (step == 0) return tt_lower_fail(c, TT_INVALID_ARGUMENT, "step must be nonzero");
  if (!isfinite(start) || !isfinite(end))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "unsupported range: %g -> %g", start, end);
  if (!((step > 0 && end >= start) || (step < 0 && end <= start)))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "upper bound and larger bound "
                         "inconsistent with step sign");
  double n = tt_dtype_is_float(d) ? ceil((end - start) / step)
                                  : ceil((double)((int64_t)end - (int64_t)start) / (double)(int64_t)step);
  if (n < 0 || n > 9.0e15)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "invalid size, possible overflow? "
                         "(%g elements)", n);
  *out = (int64_t)n;
  return NULL;
}

// arange.start_out(start, end, step=1, *, out): start + i * step.
static tt_status lower_arange_start_out(tt_lower_ctx *c) {
  const tt_value *a = tt_lower_arg(c, 0), *e = tt_lower_arg(c, 1), *s = tt_lower_arg(c, 2);
  tt_hlo_type dest;
  tt_dtype d;
  if (tt_lower_dest_type(c, 0, &dest)) {
    d = dest.dtype;
  } else {
    bool fl = scalar_is_float(a) || scalar_is_float(e) || scalar_is_float(s);
    d = fl ? tt_lower_default_dtype(c) : TT_I64;
  }
  double start = scalar_f(a), end = scalar_f(e), step = s->kind == TT_VALUE_NONE ? 1 : scalar_f(s);
  if (!tt_dtype_is_float(d)) {  // integer results use the truncated bounds
    start = trunc(start);
    end = trunc(end);
    step = trunc(step);
  }
  int64_t n;
  TT_RETURN_IF_ERROR(arange_length(c, d, start, end, step, &n));
  tt_hlo *b = tt_lower_hlo(c);
  bool fl = tt_dtype_is_float(d);
  tt_dtype acc = fl ? (d == TT_F64 ? TT_F64 : TT_F32) : TT_I64;
  tt_hlo_type it = tt_hlo_make_type(acc, 1, &n);
  tt_hv i = n > 0 ? tt_hlo_iota(b, &it, 0) : tt_hlo_splat(b, &it, 0);
  // Integer bounds go in as int64 so large values stay exact.
  tt_hv st = fl ? tt_hlo_splat(b, &it, step) : tt_hlo_splat_i(b, &it, (int64_t)step);
  tt_hv s0 = fl ? tt_hlo_splat(b, &it, start) : tt_hlo_splat_i(b, &it, (int64_t)start);
  tt_hv v = tt_hlo_binary(b, TT_HLO_ADD, tt_hlo_binary(b, TT_HLO_MUL, i, st), s0);
  tt_lower_result(c, tt_hlo_convert(b, v, d));
  return NULL;
}

static const tt_rule kRules[] = {
    {"aten::arange.start_out", lower_arange_start_out, TT_RULE_SCALARS_IN_SIGNATURE},
};

const tt_rule_table tt_rules_factory = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
