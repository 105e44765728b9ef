// factory.c — ops that make tensors from scalars: arange.start_out,
// linspace.out, logspace.out, eye.out.
//
// arange's Scalar arguments decide the result's length, so its rule is
// flagged TT_RULE_SCALARS_IN_SIGNATURE: the values are known while lowering
// (and become part of the op's signature). The result dtype is the out
// tensor's; when its shape differs the context asks the caller to resize.
//
// Leaves out: full/zeros/ones (PyTorch builds them from
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

// A Scalar argument as an int64, exactly: floats truncated (the caller has
// checked that they lie within int64).
static int64_t scalar_i(const tt_value *v) {
  if (v->kind == TT_VALUE_SCALAR)
    return tt_dtype_is_float(v->u.scalar.dtype) ? (int64_t)v->u.scalar.f : v->u.scalar.i;
  if (v->kind == TT_VALUE_INT) return v->u.i;
  return v->kind == TT_VALUE_BOOL ? (int64_t)v->u.b : 0;
}

// PyTorch's count for int64 results, in int64 arithmetic (a double loses
// bounds past 2^53): (end - start + step - sign(step)) / step.
static tt_status arange_length_i64(const tt_lower_ctx *c, int64_t start, int64_t end,
                                   int64_t step, int64_t *out) {
  int64_t sgn = (step > 0) - (step < 0), span;
  if (__builtin_sub_overflow(end, start, &span) || __builtin_add_overflow(span, step - sgn, &span))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "invalid size, possible overflow? "
                         "(%" PRId64 " to %" PRId64 " step %" PRId64 ")", start, end, step);
  *out = span / step;
  return NULL;
}

// The element count PyTorch computes for all but int64 results:
// ceil((end - start) / step) in double, and the checks of the bounds.
static tt_status arange_length(const tt_lower_ctx *c, tt_dtype d, double start,
                               double end, double step, int64_t *out) {
  if (step == 0) return tt_lower_fail(c, TT_INVALID_ARGUMENT, "step must be nonzero");
  if (!isfinite(start) || !isfinite(end) || isnan(step))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "unsupported range: %g -> %g", start, end);
  if (!((step > 0 && end >= start) || (step < 0 && end <= start)))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "upper bound and larger bound "
                         "inconsistent with step sign");
  // Integer bounds go through int64 (PyTorch's arithmetic): past its range
  // the conversion is undefined, so refuse first.
  const double lim = 9.2233720368547758e18;
  if (!tt_dtype_is_float(d) && (fabs(start) >= lim || fabs(end) >= lim || fabs(step) >= lim))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "unsupported range: %g -> %g step %g "
                         "(beyond int64)", start, end, step);
  if (!tt_dtype_is_float(d) && (int64_t)step == 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "step must be nonzero");
  double n = ceil((end - start) / step);
  if (n < 0 || n > 9.0e15)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "invalid size, possible overflow? "
                         "(%g elements)", n);
  *out = (int64_t)n;
  return NULL;
}

// Declares the 1-D points v as the result. PyTorch's arange/linspace/logspace
// resize out= only when its element count differs; an out of the right count
// but another shape (a 2-D view, say) gets the points in its row-major order.
static void result_points(tt_lower_ctx *c, tt_hv v) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type dest, vt = tt_lower_type(c, v);
  if (tt_lower_dest_type(c, 0, &dest) && dest.rank != 1 &&
      tt_hlo_numel(&dest) == tt_hlo_numel(&vt))
    v = tt_hlo_reshape(b, v, dest.rank, dest.dims);
  tt_lower_result(c, v);
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
  // The count comes from the bounds as given (int64 results: truncated, in
  // int64); integer results take the truncated start and step.
  int64_t n;
  TT_RETURN_IF_ERROR(arange_length(c, d, start, end, step, &n));
  bool fl = tt_dtype_is_float(d);
  int64_t istart = 0, istep = 0;  // integer results: the exact bounds
  if (!fl) {
    istart = scalar_i(a);
    istep = s->kind == TT_VALUE_NONE ? 1 : scalar_i(s);
    if (d == TT_I64) TT_RETURN_IF_ERROR(arange_length_i64(c, istart, scalar_i(e), istep, &n));
  }
  tt_hlo *b = tt_lower_hlo(c);
  // start + i * step in double, as PyTorch's CPU kernel (then rounded)
  tt_dtype acc = !fl ? TT_I64 : d == TT_F64 || tt_lower_supports_f64(c) ? TT_F64 : TT_F32;
  tt_hlo_type it = tt_hlo_make_type(acc, 1, &n);
  tt_hv i = n > 0 ? tt_hlo_iota(b, &it, 0) : tt_hlo_splat(b, &it, 0);
  // Integer bounds go in as int64 so large values stay exact.
  tt_hv st = fl ? tt_hlo_splat(b, &it, step) : tt_hlo_splat_i(b, &it, istep);
  tt_hv s0 = fl ? tt_hlo_splat(b, &it, start) : tt_hlo_splat_i(b, &it, istart);
  tt_hv v = tt_hlo_binary(b, TT_HLO_ADD, tt_hlo_binary(b, TT_HLO_MUL, i, st), s0);
  result_points(c, tt_hlo_convert(b, v, d));
  return NULL;
}

// --- exact float64 arithmetic for linspace -----------------------------------------------
//
// float64 has no wider type to round once in: PyTorch's CPU kernel takes its
// step as a correctly rounded quotient and its points as one FMA each (the
// compiler contracts start + step * i), while XLA divides by a constant
// through its rounded reciprocal and rounds the product and the sum apart.
// Error-free transformations (Dekker's product, Knuth's sum) recover both;
// where a term overflows, the plainly rounded value stands.

static tt_hv f64_bin(tt_hlo *b, tt_hlo_binop op, tt_hv x, tt_hv y) {
  return tt_hlo_binary(b, op, x, y);
}

// v + fix where fix is finite, else v.
static tt_hv corrected(tt_lower_ctx *c, tt_hv v, tt_hv fix) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv ok = tt_hlo_unary(b, TT_HLO_IS_FINITE, fix);
  return tt_hlo_select(b, ok, f64_bin(b, TT_HLO_ADD, v, fix), v);
}

// round(x * y + z), once.
static tt_hv fma_f64(tt_lower_ctx *c, tt_hv x, tt_hv y, tt_hv z) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv p = f64_bin(b, TT_HLO_MUL, x, y), e = tt_lower_prod_err(c, x, y, p);
  tt_hv s = f64_bin(b, TT_HLO_ADD, p, z), bb = f64_bin(b, TT_HLO_SUB, s, p);
  tt_hv es = f64_bin(b, TT_HLO_ADD, f64_bin(b, TT_HLO_SUB, p, f64_bin(b, TT_HLO_SUB, s, bb)),
                     f64_bin(b, TT_HLO_SUB, z, bb));
  return corrected(c, s, f64_bin(b, TT_HLO_ADD, es, e));
}

// round(x / d) for a divisor XLA may turn into a reciprocal's product: one
// Newton step on the exact residual.
static tt_hv div_f64(tt_lower_ctx *c, tt_hv x, tt_hv d) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv q = f64_bin(b, TT_HLO_DIV, x, d), p = f64_bin(b, TT_HLO_MUL, q, d);
  tt_hv r = f64_bin(b, TT_HLO_SUB, f64_bin(b, TT_HLO_SUB, x, p), tt_lower_prod_err(c, q, d, p));
  return corrected(c, q, f64_bin(b, TT_HLO_DIV, r, d));
}

// --- linspace, logspace ------------------------------------------------------------------------

// The destination's dtype (out=), else the default dtype.
static tt_dtype out_dtype(const tt_lower_ctx *c) {
  tt_hlo_type dest;
  return tt_lower_dest_type(c, 0, &dest) ? dest.dtype : tt_lower_default_dtype(c);
}

// `steps` points from start to end the way PyTorch's CPU kernels walk them:
// the first half forward from start, the second half back from end (so both
// ends are exact). The bounds are rounded to the result's dtype (integer
// results: int64) and end - start is taken there; the step and the points are
// then computed in `arith`. c10's Half and BFloat16 round every operation, so
// a 16-bit `arith` rounds where the CPU's scalar_t arithmetic does.
static tt_status spaced(tt_lower_ctx *c, tt_dtype d, tt_dtype arith, tt_hv *out) {
  int64_t n = tt_lower_int(c, 2);
  if (n < 0) return tt_lower_fail(c, TT_INVALID_ARGUMENT, "number of steps must be non-negative");
  tt_hlo *b = tt_lower_hlo(c);
  bool fl = tt_dtype_is_float(d);
  // Scalars reach a 16-bit dtype through float (c10's conversion from double).
  tt_dtype bound = !fl ? TT_I64 : d == TT_F64 ? TT_F64 : TT_F32, rd = fl ? d : TT_I64;
  if (n <= 1) {  // the CPU fills with the start as given (logspace: in double)
    tt_hv v = tt_lower_scalar(c, 0, tt_dtype_is_float(arith) && arith != TT_F64 ? TT_F32 : arith);
    *out = tt_lower_broadcast_to(c, tt_hlo_convert(b, v, arith), 1, &n);
    return NULL;
  }
  tt_hv start = tt_hlo_convert(b, tt_lower_scalar(c, 0, bound), rd);
  tt_hv end = tt_hlo_convert(b, tt_lower_scalar(c, 1, bound), rd);
  if (!fl) {  // the bounds in the result's own integer type (uint8 wraps -10 to 246)
    start = tt_hlo_convert(b, tt_hlo_convert(b, start, d), rd);
    end = tt_hlo_convert(b, tt_hlo_convert(b, end, d), rd);
  }
  // Indices count in float32 or double and are rounded to arith where used.
  tt_dtype ix = arith == TT_F64 ? TT_F64 : TT_F32;
  tt_hlo_type t = tt_hlo_make_type(ix, 1, &n);
  tt_hv i = tt_hlo_iota(b, &t, 0);
  // XLA divides by a constant as a multiplication by its rounded reciprocal,
  // an ulp off PyTorch's quotient at times (and many in half precision): the
  // step is divided in double where there is one, then rounded to arith.
  tt_dtype wide = arith == TT_F64 || tt_lower_supports_f64(c) ? TT_F64 : TT_F32;
  // Integer bounds subtract in double, as the CPU's step_t does (int64's
  // end - start overflows for a span past 2^63).
  tt_hv diff = fl ? tt_hlo_convert(b, tt_hlo_binary(b, TT_HLO_SUB, end, start), arith)
                  : tt_hlo_binary(b, TT_HLO_SUB, tt_hlo_convert(b, end, arith),
                                  tt_hlo_convert(b, start, arith));
  tt_hv span = tt_hlo_convert(b, tt_lower_rounded16(c, diff), wide);
  tt_hv den = tt_hlo_convert(b, tt_hlo_const(b, arith, (double)(n - 1)), wide);  // arith's n - 1
  tt_hv step = wide == TT_F64 ? div_f64(c, span, den) : tt_hlo_binary(b, TT_HLO_DIV, span, den);
  // start + step * i: the CPU's vectorized builds fuse it into one FMA for
  // float32 (one rounding), which double arithmetic reproduces; c10's 16-bit
  // types round the product on their own.
  tt_dtype mac = arith == TT_F32 ? wide : arith;
  step = tt_lower_broadcast_to(c, tt_hlo_convert(b, tt_hlo_convert(b, step, arith), mac), 1, &n);
  start = tt_lower_broadcast_to(c, tt_hlo_convert(b, start, mac), 1, &n);
  end = tt_lower_broadcast_to(c, tt_hlo_convert(b, end, mac), 1, &n);
  tt_hv back_i = tt_hlo_binary(b, TT_HLO_SUB, tt_hlo_splat(b, &t, (double)(n - 1)), i);
  tt_hv fi = tt_hlo_convert(b, tt_hlo_convert(b, i, arith), mac);
  tt_hv bi = tt_hlo_convert(b, tt_hlo_convert(b, back_i, arith), mac);
  tt_hv fwd, bwd;
  if (arith == TT_F64) {  // the CPU's FMAs, rounded once (float32 gets them from double)
    fwd = fma_f64(c, step, fi, start);
    bwd = fma_f64(c, tt_hlo_unary(b, TT_HLO_NEG, step), bi, end);
  } else {
    tt_hv sf = tt_lower_rounded16(c, tt_hlo_binary(b, TT_HLO_MUL, step, fi));
    tt_hv sb = tt_lower_rounded16(c, tt_hlo_binary(b, TT_HLO_MUL, step, bi));
    fwd = tt_hlo_binary(b, TT_HLO_ADD, start, sf);
    bwd = tt_hlo_binary(b, TT_HLO_SUB, end, sb);
  }
  tt_hv first = tt_hlo_compare(b, TT_HLO_LT, i, tt_hlo_splat(b, &t, (double)(n / 2)));
  *out = tt_hlo_convert(b, tt_hlo_select(b, first, fwd, bwd), arith);
  return NULL;
}

// linspace.out(start, end, steps, *, out): floats step in their own dtype
// (float32 where float64 is missing), integers in double.
static tt_status lower_linspace(tt_lower_ctx *c) {
  tt_dtype d = out_dtype(c);
  tt_dtype arith = !tt_dtype_is_float(d) || d == TT_F64 ? TT_F64 : d;
  tt_hlo *b = tt_lower_hlo(c);
  int64_t n = tt_lower_int(c, 2);
  if (!tt_dtype_is_float(d) && (n == 0 || n == 1)) {  // start itself, not through double
    tt_hv s = tt_hlo_convert(b, tt_lower_scalar(c, 0, TT_I64), d);
    result_points(c, tt_lower_broadcast_to(c, s, 1, &n));
    return NULL;
  }
  tt_hv v;
  TT_RETURN_IF_ERROR(spaced(c, d, arith, &v));
  if (!tt_dtype_is_float(d) && !tt_lower_supports_f64(c)) {
    // Without exact double arithmetic (spaced()'s error-free steps need
    // float64), a point that is whole in PyTorch's double arithmetic can land
    // just below it; snap those before truncating.
    tt_hv r = tt_hlo_unary(b, TT_HLO_ROUND_EVEN, v);
    tt_hv dist = tt_hlo_unary(b, TT_HLO_ABS, tt_hlo_binary(b, TT_HLO_SUB, v, r));
    tt_hv near = tt_hlo_compare(b, TT_HLO_LT, dist, tt_lower_splat_like(c, v, 1e-9));
    v = tt_hlo_select(b, near, r, v);
  }
  result_points(c, tt_hlo_convert(b, v, d));
  return NULL;
}

// logspace.out(start, end, steps, base, *, out): base ** linspace, where the
// CPU takes the step, the exponents and the power in double for every real
// dtype (float32 here without float64), then stores through float.
static tt_status lower_logspace(tt_lower_ctx *c) {
  tt_dtype d = out_dtype(c);
  tt_dtype pw = tt_lower_supports_f64(c) || d == TT_F64 ? TT_F64 : TT_F32;
  tt_hv v;
  TT_RETURN_IF_ERROR(spaced(c, d, pw, &v));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv base = tt_lower_is_none(c, 3) ? tt_hlo_const(b, pw, 10) : tt_lower_scalar(c, 3, pw);
  const tt_hlo_type *t = tt_hlo_type_of(b, v);
  if (!t) return NULL;
  tt_hv p = tt_hlo_binary(b, TT_HLO_POW, tt_lower_broadcast_to(c, base, 1, t->dims), v);
  if (tt_dtype_is_float(d) && d != TT_F64) p = tt_hlo_convert(b, p, TT_F32);
  result_points(c, tt_hlo_convert(b, p, d));
  return NULL;
}

// --- eye ------------------------------------------------------------------------------------------

// eye.out(n, *, out) / eye.m_out(n, m, *, out): ones on the diagonal.
static tt_status lower_eye(tt_lower_ctx *c) {
  int64_t dims[2] = {tt_lower_int(c, 0), tt_lower_int(c, 1)};
  if (tt_lower_arg(c, 1)->kind != TT_VALUE_INT) dims[1] = dims[0];
  for (int k = 0; k < 2; k++)
    if (dims[k] < 0)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%c must be greater or equal to 0, got %"
                           PRId64, "nm"[k], dims[k]);
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 2, dims);
  tt_hv diag = tt_hlo_compare(b, TT_HLO_EQ, tt_hlo_iota(b, &it, 0), tt_hlo_iota(b, &it, 1));
  tt_lower_result(c, tt_hlo_convert(b, diag, out_dtype(c)));
  return NULL;
}

static const tt_rule kRules[] = {
    {"aten::arange.start_out", lower_arange_start_out, TT_RULE_SCALARS_IN_SIGNATURE},
    {"aten::linspace.out", lower_linspace, 0},
    {"aten::logspace.out", lower_logspace, 0},
    {"aten::eye.out", lower_eye, 0},
    {"aten::eye.m_out", lower_eye, 0},
};

const tt_rule_table tt_rules_factory = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
