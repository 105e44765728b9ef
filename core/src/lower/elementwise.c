// elementwise.c — ATen's pointwise ops: arithmetic (add/sub/mul/div with
// rounding modes, remainder, fmod, pow), unary math, activations and their
// backward ops, comparisons, logical and bitwise ops, clamp, where, and the
// filling ops (copy_, fill_, zero_, masked_fill).
//
// Every rule follows PyTorch's TensorIterator semantics: the result dtype is
// result_type() over the inputs (ints promote to the default float dtype for
// float math); inputs are converted to its "opmath" dtype (float32 for the
// 16-bit floats, as PyTorch's kernels compute) and broadcast; the result is
// rounded back once. In-place / out= variants share the functional rule (the
// context converts and writes).
//
// Leaves out: complex numbers; integer division by zero raising (XLA returns
// -1 where PyTorch's CPU kernel raises); ops that PyTorch decomposes before
// they reach a backend (square, softplus, ...).
#include <math.h>
#include <string.h>

#include "lower/lower.h"

// --- helpers ----------------------------------------------------------------------------

static tt_hv bin(tt_lower_ctx *c, tt_hlo_binop op, tt_hv x, tt_hv y) {
  return tt_hlo_binary(tt_lower_hlo(c), op, x, y);
}

static tt_hv un(tt_lower_ctx *c, tt_hlo_unop op, tt_hv x) {
  return tt_hlo_unary(tt_lower_hlo(c), op, x);
}

static tt_hv cmp(tt_lower_ctx *c, tt_hlo_cmp op, tt_hv x, tt_hv y) {
  return tt_hlo_compare(tt_lower_hlo(c), op, x, y);
}

static tt_hv sel(tt_lower_ctx *c, tt_hv p, tt_hv x, tt_hv y) {
  return tt_hlo_select(tt_lower_hlo(c), p, x, y);
}

static tt_hv k(tt_lower_ctx *c, tt_hv like, double v) {
  return tt_lower_splat_like(c, like, v);
}

static tt_dtype type_of(tt_lower_ctx *c, tt_hv v) {
  const tt_hlo_type *t = tt_hlo_type_of(tt_lower_hlo(c), v);
  return t ? t->dtype : TT_F32;
}

// Scalar argument i converted to v's dtype and broadcast to v's shape.
static tt_hv scalar_like(tt_lower_ctx *c, int i, tt_hv v) {
  const tt_hlo_type *t = tt_hlo_type_of(tt_lower_hlo(c), v);
  if (!t) return TT_HV_INVALID;
  tt_hlo_type tt = *t;
  return tt_lower_broadcast_to(c, tt_lower_operand(c, i, tt.dtype), tt.rank, tt.dims);
}

// result_type over args idx, failing where PyTorch refuses to promote.
static tt_status promoted(tt_lower_ctx *c, const int *idx, int n, tt_dtype *out) {
  *out = tt_lower_result_type(c, idx, n);
  if (*out == TT_DTYPE_NONE)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                         "promotion between these dtypes is not supported");
  return NULL;
}

// The dtype PyTorch's kernels compute dtype d in.
static tt_dtype opmath(tt_dtype d) {
  return (d == TT_F16 || d == TT_BF16) ? TT_F32 : d;
}

// Declares v, rounded to the result dtype rt, as the result.
static tt_status out(tt_lower_ctx *c, tt_hv v, tt_dtype rt) {
  tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), v, rt));
  return NULL;
}

// Args 0 and 1 promoted to the result dtype *rt (a float one when
// `to_float`), read in its opmath dtype and broadcast.
static tt_status two(tt_lower_ctx *c, bool to_float, tt_dtype *rt, tt_hv *v) {
  static const int idx[2] = {0, 1};
  TT_RETURN_IF_ERROR(promoted(c, idx, 2, rt));
  if (to_float) *rt = tt_lower_float_dtype(c, *rt);
  return tt_lower_operands(c, idx, 2, opmath(*rt), v);
}

// The string argument i, or `dflt` when it is None.
static const char *str_arg(const tt_lower_ctx *c, int i, const char *dflt) {
  const tt_value *v = tt_lower_arg(c, i);
  return v->kind == TT_VALUE_STRING ? v->u.str : dflt;
}

// trunc(q) for floats: StableHLO has floor and ceil but no trunc.
static tt_hv trunc_float(tt_lower_ctx *c, tt_hv q) {
  tt_hv neg = cmp(c, TT_HLO_LT, q, k(c, q, 0));
  return sel(c, neg, un(c, TT_HLO_CEIL, q), un(c, TT_HLO_FLOOR, q));
}

// --- add, sub, rsub, mul ------------------------------------------------------------------

// self op alpha*other (or other op alpha*self when `reverse`, for rsub).
static tt_status add_like(tt_lower_ctx *c, tt_hlo_binop op, bool reverse) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  if (rt == TT_BOOL && op == TT_HLO_SUB)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                         "Subtraction, the `-` operator, with two bool tensors is not "
                         "supported. Use the `^` or `logical_xor()` operator instead.");
  const tt_value *alpha = tt_lower_arg(c, 2);
  if (alpha->kind == TT_VALUE_SCALAR && !tt_dtype_is_float(rt) &&
      tt_dtype_is_float(alpha->u.scalar.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "For integral input tensors, "
                         "argument alpha must not be a floating point number.");
  tt_hv x = v[reverse ? 1 : 0], y = v[reverse ? 0 : 1];
  if (!tt_lower_is_none(c, 2)) y = bin(c, TT_HLO_MUL, y, scalar_like(c, 2, y));
  return out(c, bin(c, op, x, y), rt);
}

static tt_status lower_add(tt_lower_ctx *c) { return add_like(c, TT_HLO_ADD, false); }
static tt_status lower_sub(tt_lower_ctx *c) { return add_like(c, TT_HLO_SUB, false); }
static tt_status lower_rsub(tt_lower_ctx *c) { return add_like(c, TT_HLO_SUB, true); }

static tt_status lower_mul(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  // bool * bool is logical and; StableHLO's multiply on i1 is exactly that.
  return out(c, bin(c, TT_HLO_MUL, v[0], v[1]), rt);
}

// --- div, remainder, fmod, pow ---------------------------------------------------------------

// Floor division of floats the way PyTorch's div_floor_floating does it
// (through fmod, so 1 // 0.1 is 9 like Python, not 10).
static tt_hv floor_div_float(tt_lower_ctx *c, tt_hv a, tt_hv b) {
  tt_hv q = bin(c, TT_HLO_DIV, a, b);
  tt_hv mod = bin(c, TT_HLO_REM, a, b);
  tt_hv div = bin(c, TT_HLO_DIV, bin(c, TT_HLO_SUB, a, mod), b);
  tt_hv off_sign = bin(c, TT_HLO_XOR, cmp(c, TT_HLO_LT, b, k(c, b, 0)),
                       cmp(c, TT_HLO_LT, mod, k(c, mod, 0)));
  tt_hv fix = bin(c, TT_HLO_AND, cmp(c, TT_HLO_NE, mod, k(c, mod, 0)), off_sign);
  div = sel(c, fix, bin(c, TT_HLO_SUB, div, k(c, div, 1)), div);
  tt_hv fl = un(c, TT_HLO_FLOOR, div);
  tt_hv up = cmp(c, TT_HLO_GT, bin(c, TT_HLO_SUB, div, fl), k(c, div, 0.5));
  fl = sel(c, up, bin(c, TT_HLO_ADD, fl, k(c, fl, 1)), fl);
  tt_hv signed_zero = bin(c, TT_HLO_MUL, k(c, q, 0), q);  // copysign(0, a/b)
  tt_hv r = sel(c, cmp(c, TT_HLO_NE, div, k(c, div, 0)), fl, signed_zero);
  return sel(c, cmp(c, TT_HLO_EQ, b, k(c, b, 0)), q, r);
}

// Floor division of integers: C truncates, so step down when the remainder
// and the divisor differ in sign.
static tt_hv floor_div_int(tt_lower_ctx *c, tt_hv a, tt_hv b) {
  tt_hv q = bin(c, TT_HLO_DIV, a, b);
  tt_hv r = bin(c, TT_HLO_REM, a, b);
  tt_hv off_sign = bin(c, TT_HLO_XOR, cmp(c, TT_HLO_LT, r, k(c, r, 0)),
                       cmp(c, TT_HLO_LT, b, k(c, b, 0)));
  tt_hv fix = bin(c, TT_HLO_AND, cmp(c, TT_HLO_NE, r, k(c, r, 0)), off_sign);
  return sel(c, fix, bin(c, TT_HLO_SUB, q, k(c, q, 1)), q);
}

// div with rounding_mode None ("true"), "trunc" or "floor" (argument 2).
static tt_status lower_div(tt_lower_ctx *c) {
  const char *mode = str_arg(c, 2, NULL);
  if (mode && strcmp(mode, "trunc") != 0 && strcmp(mode, "floor") != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "div expected rounding_mode to be "
                         "one of None, 'trunc', or 'floor' but found '%s'", mode);
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, mode == NULL, &rt, v));
  if (rt == TT_BOOL) {  // bool // bool divides as integers
    rt = TT_I64;
    v[0] = tt_hlo_convert(tt_lower_hlo(c), v[0], rt);
    v[1] = tt_hlo_convert(tt_lower_hlo(c), v[1], rt);
  }
  tt_hv r;
  if (!mode) {
    r = bin(c, TT_HLO_DIV, v[0], v[1]);
  } else if (mode[0] == 't') {
    r = bin(c, TT_HLO_DIV, v[0], v[1]);
    if (tt_dtype_is_float(rt)) r = trunc_float(c, r);
  } else {
    r = tt_dtype_is_float(rt) ? floor_div_float(c, v[0], v[1]) : floor_div_int(c, v[0], v[1]);
  }
  return out(c, r, rt);
}

// Python's %: the result takes the divisor's sign.
static tt_status lower_remainder(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  if (rt == TT_BOOL) return tt_lower_fail(c, TT_UNIMPLEMENTED, "bool remainder");
  tt_hv r = bin(c, TT_HLO_REM, v[0], v[1]);
  tt_hv off_sign = bin(c, TT_HLO_XOR, cmp(c, TT_HLO_LT, r, k(c, r, 0)),
                       cmp(c, TT_HLO_LT, v[1], k(c, v[1], 0)));
  tt_hv fix = bin(c, TT_HLO_AND, cmp(c, TT_HLO_NE, r, k(c, r, 0)), off_sign);
  return out(c, sel(c, fix, bin(c, TT_HLO_ADD, r, v[1]), r), rt);
}

// C's fmod: the result takes the dividend's sign, which is StableHLO's rem.
static tt_status lower_fmod(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  if (rt == TT_BOOL) return tt_lower_fail(c, TT_UNIMPLEMENTED, "bool fmod");
  return out(c, bin(c, TT_HLO_REM, v[0], v[1]), rt);
}

static tt_status lower_pow(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  if (rt == TT_BOOL) return tt_lower_fail(c, TT_UNIMPLEMENTED, "bool pow");
  return out(c, bin(c, TT_HLO_POW, v[0], v[1]), rt);
}

// --- unary math ---------------------------------------------------------------------------------

// x (argument 0) in the opmath dtype of float math; *rt gets the float
// result dtype.
static tt_hv float_input(tt_lower_ctx *c, tt_dtype *rt) {
  tt_hv x = tt_lower_tensor(c, 0);
  *rt = tt_lower_float_dtype(c, tt_lower_tensor_type(c, 0, -1).dtype);
  return tt_hlo_convert(tt_lower_hlo(c), x, opmath(*rt));
}

static tt_status float_unary(tt_lower_ctx *c, tt_hlo_unop op) {
  tt_dtype rt;
  tt_hv x = float_input(c, &rt);
  return out(c, un(c, op, x), rt);
}

static tt_status lower_exp(tt_lower_ctx *c) { return float_unary(c, TT_HLO_EXP); }
static tt_status lower_expm1(tt_lower_ctx *c) { return float_unary(c, TT_HLO_EXPM1); }
static tt_status lower_log(tt_lower_ctx *c) { return float_unary(c, TT_HLO_LOG); }
static tt_status lower_log1p(tt_lower_ctx *c) { return float_unary(c, TT_HLO_LOG1P); }
static tt_status lower_sqrt(tt_lower_ctx *c) { return float_unary(c, TT_HLO_SQRT); }
static tt_status lower_rsqrt(tt_lower_ctx *c) { return float_unary(c, TT_HLO_RSQRT); }
static tt_status lower_sin(tt_lower_ctx *c) { return float_unary(c, TT_HLO_SIN); }
static tt_status lower_cos(tt_lower_ctx *c) { return float_unary(c, TT_HLO_COS); }
static tt_status lower_tan(tt_lower_ctx *c) { return float_unary(c, TT_HLO_TAN); }
static tt_status lower_tanh(tt_lower_ctx *c) { return float_unary(c, TT_HLO_TANH); }
static tt_status lower_sigmoid(tt_lower_ctx *c) { return float_unary(c, TT_HLO_LOGISTIC); }

static tt_status lower_erf(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = float_input(c, &rt);
  return out(c, tt_hlo_erf(tt_lower_hlo(c), x), rt);
}

static tt_status lower_reciprocal(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = float_input(c, &rt);
  return out(c, bin(c, TT_HLO_DIV, k(c, x, 1), x), rt);
}

static tt_status lower_neg(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  if (type_of(c, x) == TT_BOOL)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Negation, the `-` operator, on a "
                         "bool tensor is not supported. If you are trying to invert "
                         "a mask, use the `~` or `logical_not()` operator instead.");
  tt_lower_result(c, un(c, TT_HLO_NEG, x));
  return NULL;
}

static bool is_unsigned(tt_dtype d) { return d == TT_U8 || d >= TT_U16; }

static tt_status lower_abs(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_dtype d = type_of(c, x);
  if (d == TT_BOOL) return tt_lower_fail(c, TT_UNIMPLEMENTED, "abs of bool");
  tt_lower_result(c, is_unsigned(d) ? x : un(c, TT_HLO_ABS, x));
  return NULL;
}

static tt_status lower_sign(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_dtype d = type_of(c, x);
  if (d == TT_BOOL || is_unsigned(d)) {  // 0 or 1 already, or 0/1 by x != 0
    tt_hv nz = tt_hlo_convert(tt_lower_hlo(c), x, TT_BOOL);
    tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), nz, d));
    return NULL;
  }
  tt_lower_result(c, un(c, TT_HLO_SIGN, x));
  return NULL;
}

// floor / ceil / round leave integers as they are.
static tt_status rounding(tt_lower_ctx *c, tt_hlo_unop op) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_lower_result(c, tt_dtype_is_float(type_of(c, x)) ? un(c, op, x) : x);
  return NULL;
}

static tt_status lower_floor(tt_lower_ctx *c) { return rounding(c, TT_HLO_FLOOR); }
static tt_status lower_ceil(tt_lower_ctx *c) { return rounding(c, TT_HLO_CEIL); }
static tt_status lower_round(tt_lower_ctx *c) { return rounding(c, TT_HLO_ROUND_EVEN); }

// round(x, decimals): scale by 10^|decimals| the way PyTorch does (dividing
// for negative decimals, so 10^d stays exact).
static tt_status lower_round_decimals(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  int64_t dec = tt_lower_int(c, 1);
  tt_dtype rt = type_of(c, x);
  if (!tt_dtype_is_float(rt) || dec == 0) return rounding(c, TT_HLO_ROUND_EVEN);
  x = tt_hlo_convert(tt_lower_hlo(c), x, opmath(rt));
  tt_hv p = k(c, x, pow(10.0, (double)(dec < 0 ? -dec : dec)));
  tt_hlo_binop in = dec > 0 ? TT_HLO_MUL : TT_HLO_DIV, back = dec > 0 ? TT_HLO_DIV : TT_HLO_MUL;
  return out(c, bin(c, back, un(c, TT_HLO_ROUND_EVEN, bin(c, in, x, p)), p), rt);
}

// --- activations ----------------------------------------------------------------------------------

static tt_status lower_relu(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  if (type_of(c, x) == TT_BOOL) return tt_lower_fail(c, TT_UNIMPLEMENTED, "relu of bool");
  // max(x, 0) propagates NaN like PyTorch's relu.
  tt_lower_result(c, bin(c, TT_HLO_MAX, x, k(c, x, 0)));
  return NULL;
}

static tt_status lower_silu(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = float_input(c, &rt);
  return out(c, bin(c, TT_HLO_MUL, x, un(c, TT_HLO_LOGISTIC, x)), rt);
}

static const double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
static const double kSqrtHalf = 0.70710678118654752440;     // 1/sqrt(2)
static const double kGeluKappa = 0.044715;

// approximate="tanh" gelu's inner tanh(sqrt(2/pi) * (x + 0.044715 x^3)).
static tt_hv gelu_tanh_inner(tt_lower_ctx *c, tt_hv x) {
  tt_hv x3 = bin(c, TT_HLO_MUL, bin(c, TT_HLO_MUL, x, x), x);
  tt_hv in = bin(c, TT_HLO_ADD, x, bin(c, TT_HLO_MUL, k(c, x, kGeluKappa), x3));
  return un(c, TT_HLO_TANH, bin(c, TT_HLO_MUL, k(c, x, kSqrt2OverPi), in));
}

static tt_status gelu_mode(const tt_lower_ctx *c, int i, bool *tanh_mode) {
  const char *mode = str_arg(c, i, "none");
  *tanh_mode = strcmp(mode, "tanh") == 0;
  if (!*tanh_mode && strcmp(mode, "none") != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "approximate argument must be "
                         "either none or tanh, got '%s'", mode);
  return NULL;
}

// gelu(x) = x * Phi(x): with erf, or with the tanh approximation.
static tt_status lower_gelu(tt_lower_ctx *c) {
  bool tanh_mode;
  TT_RETURN_IF_ERROR(gelu_mode(c, 1, &tanh_mode));
  tt_dtype rt;
  tt_hv x = float_input(c, &rt);
  tt_hv t = tanh_mode ? gelu_tanh_inner(c, x)
                      : tt_hlo_erf(tt_lower_hlo(c), bin(c, TT_HLO_MUL, x, k(c, x, kSqrtHalf)));
  tt_hv half_x = bin(c, TT_HLO_MUL, x, k(c, x, 0.5));
  return out(c, bin(c, TT_HLO_MUL, half_x, bin(c, TT_HLO_ADD, k(c, x, 1), t)), rt);
}

// --- backward ops -----------------------------------------------------------------------------

// grad (arg 0) and the saved tensor (arg 1), promoted together.
static tt_status grad_and(tt_lower_ctx *c, tt_dtype *rt, tt_hv *g, tt_hv *y) {
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, rt, v));
  *g = v[0];
  *y = v[1];
  return NULL;
}

// grad where self > threshold, else 0 (NaN self passes the gradient).
static tt_status lower_threshold_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, x;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &x));
  tt_hv below = cmp(c, TT_HLO_LE, x, scalar_like(c, 2, x));
  return out(c, sel(c, below, k(c, g, 0), g), rt);
}

// grad * y * (1 - y), y = sigmoid(x).
static tt_status lower_sigmoid_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, y;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &y));
  tt_hv d = bin(c, TT_HLO_MUL, bin(c, TT_HLO_SUB, k(c, y, 1), y), y);
  return out(c, bin(c, TT_HLO_MUL, g, d), rt);
}

// grad * (1 - y^2), y = tanh(x).
static tt_status lower_tanh_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, y;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &y));
  tt_hv d = bin(c, TT_HLO_SUB, k(c, y, 1), bin(c, TT_HLO_MUL, y, y));
  return out(c, bin(c, TT_HLO_MUL, g, d), rt);
}

// grad * s * (1 + x (1 - s)), s = sigmoid(x).
static tt_status lower_silu_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, x;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &x));
  tt_hv s = un(c, TT_HLO_LOGISTIC, x);
  tt_hv inner = bin(c, TT_HLO_ADD, k(c, x, 1),
                    bin(c, TT_HLO_MUL, x, bin(c, TT_HLO_SUB, k(c, s, 1), s)));
  return out(c, bin(c, TT_HLO_MUL, g, bin(c, TT_HLO_MUL, s, inner)), rt);
}

// d/dx of the tanh-approximated gelu, as PyTorch's GeluBackward computes it.
static tt_hv gelu_tanh_grad(tt_lower_ctx *c, tt_hv x) {
  tt_hv t = gelu_tanh_inner(c, x);
  tt_hv x2 = bin(c, TT_HLO_MUL, x, x);
  tt_hv left = bin(c, TT_HLO_MUL, k(c, x, 0.5), x);
  tt_hv left_d = bin(c, TT_HLO_MUL, k(c, x, 0.5), bin(c, TT_HLO_ADD, k(c, t, 1), t));
  tt_hv sech2 = bin(c, TT_HLO_SUB, k(c, t, 1), bin(c, TT_HLO_MUL, t, t));
  tt_hv inner_d = bin(c, TT_HLO_MUL, k(c, x, kSqrt2OverPi),
                      bin(c, TT_HLO_ADD, k(c, x, 1), bin(c, TT_HLO_MUL, k(c, x, 3 * kGeluKappa), x2)));
  tt_hv right_d = bin(c, TT_HLO_MUL, bin(c, TT_HLO_MUL, left, sech2), inner_d);
  return bin(c, TT_HLO_ADD, left_d, right_d);
}

// d/dx of x * Phi(x) = Phi(x) + x * phi(x).
static tt_hv gelu_erf_grad(tt_lower_ctx *c, tt_hv x) {
  static const double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)
  tt_hv cdf = bin(c, TT_HLO_MUL, k(c, x, 0.5),
                  bin(c, TT_HLO_ADD, k(c, x, 1),
                      tt_hlo_erf(tt_lower_hlo(c), bin(c, TT_HLO_MUL, x, k(c, x, kSqrtHalf)))));
  tt_hv e = un(c, TT_HLO_EXP, bin(c, TT_HLO_MUL, k(c, x, -0.5), bin(c, TT_HLO_MUL, x, x)));
  tt_hv pdf = bin(c, TT_HLO_MUL, k(c, x, kInvSqrt2Pi), e);
  return bin(c, TT_HLO_ADD, cdf, bin(c, TT_HLO_MUL, x, pdf));
}

static tt_status lower_gelu_backward(tt_lower_ctx *c) {
  bool tanh_mode;
  TT_RETURN_IF_ERROR(gelu_mode(c, 2, &tanh_mode));
  tt_dtype rt;
  tt_hv g, x;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &x));
  tt_hv d = tanh_mode ? gelu_tanh_grad(c, x) : gelu_erf_grad(c, x);
  return out(c, bin(c, TT_HLO_MUL, g, d), rt);
}

// --- comparisons, min/max, clamp, where -------------------------------------------------------

static tt_status compare(tt_lower_ctx *c, tt_hlo_cmp op) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  tt_lower_result(c, cmp(c, op, v[0], v[1]));
  return NULL;
}

static tt_status lower_eq(tt_lower_ctx *c) { return compare(c, TT_HLO_EQ); }
static tt_status lower_ne(tt_lower_ctx *c) { return compare(c, TT_HLO_NE); }
static tt_status lower_lt(tt_lower_ctx *c) { return compare(c, TT_HLO_LT); }
static tt_status lower_le(tt_lower_ctx *c) { return compare(c, TT_HLO_LE); }
static tt_status lower_gt(tt_lower_ctx *c) { return compare(c, TT_HLO_GT); }
static tt_status lower_ge(tt_lower_ctx *c) { return compare(c, TT_HLO_GE); }

static tt_status minmax(tt_lower_ctx *c, tt_hlo_binop op) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  return out(c, bin(c, op, v[0], v[1]), rt);  // NaN-propagating, like PyTorch
}

static tt_status lower_maximum(tt_lower_ctx *c) { return minmax(c, TT_HLO_MAX); }
static tt_status lower_minimum(tt_lower_ctx *c) { return minmax(c, TT_HLO_MIN); }

// min(max(x, lo), hi) with optional bounds lo_arg / hi_arg (-1: absent).
static tt_status clamp_args(tt_lower_ctx *c, int lo_arg, int hi_arg) {
  bool has_lo = lo_arg >= 0 && !tt_lower_is_none(c, lo_arg);
  bool has_hi = hi_arg >= 0 && !tt_lower_is_none(c, hi_arg);
  if (!has_lo && !has_hi)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                         "At least one of 'min' or 'max' must not be None");
  int idx[3] = {0}, n = 1;
  if (has_lo) idx[n++] = lo_arg;
  if (has_hi) idx[n++] = hi_arg;
  tt_dtype rt;
  tt_hv v[3];
  TT_RETURN_IF_ERROR(promoted(c, idx, n, &rt));
  TT_RETURN_IF_ERROR(tt_lower_operands(c, idx, n, rt, v));
  tt_hv x = v[0];
  if (has_lo) x = bin(c, TT_HLO_MAX, x, v[1]);
  if (has_hi) x = bin(c, TT_HLO_MIN, x, v[n - 1]);
  return out(c, x, rt);
}

static tt_status lower_clamp(tt_lower_ctx *c) { return clamp_args(c, 1, 2); }
static tt_status lower_clamp_min(tt_lower_ctx *c) { return clamp_args(c, 1, -1); }
static tt_status lower_clamp_max(tt_lower_ctx *c) { return clamp_args(c, -1, 1); }

// where(condition, self, other): self and other (tensors or Scalars) promote.
static tt_status lower_where(tt_lower_ctx *c) {
  static const int idx[2] = {1, 2};
  tt_dtype rt;
  TT_RETURN_IF_ERROR(promoted(c, idx, 2, &rt));
  tt_hv v[3] = {tt_lower_operand(c, 0, TT_BOOL), tt_lower_operand(c, 1, rt),
                tt_lower_operand(c, 2, rt)};
  TT_RETURN_IF_ERROR(tt_lower_broadcast(c, v, 3));
  tt_lower_result(c, sel(c, v[0], v[1], v[2]));
  return NULL;
}

// --- logical and bitwise --------------------------------------------------------------------------

static tt_status lower_logical_not(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_lower_result(c, un(c, TT_HLO_NOT, tt_hlo_convert(tt_lower_hlo(c), x, TT_BOOL)));
  return NULL;
}

static tt_status logical(tt_lower_ctx *c, tt_hlo_binop op) {
  static const int idx[2] = {0, 1};
  tt_hv v[2];
  TT_RETURN_IF_ERROR(tt_lower_operands(c, idx, 2, TT_BOOL, v));  // x != 0
  tt_lower_result(c, bin(c, op, v[0], v[1]));
  return NULL;
}

static tt_status lower_logical_and(tt_lower_ctx *c) { return logical(c, TT_HLO_AND); }
static tt_status lower_logical_or(tt_lower_ctx *c) { return logical(c, TT_HLO_OR); }
static tt_status lower_logical_xor(tt_lower_ctx *c) { return logical(c, TT_HLO_XOR); }

static tt_status lower_bitwise_not(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  if (tt_dtype_is_float(type_of(c, x)))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "bitwise_not is not implemented "
                         "for floating-point tensors");
  tt_lower_result(c, un(c, TT_HLO_NOT, x));
  return NULL;
}

static tt_status bitwise(tt_lower_ctx *c, tt_hlo_binop op) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  if (tt_dtype_is_float(rt))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "bitwise ops are not implemented "
                         "for floating-point tensors");
  tt_lower_result(c, bin(c, op, v[0], v[1]));
  return NULL;
}

static tt_status lower_bitwise_and(tt_lower_ctx *c) { return bitwise(c, TT_HLO_AND); }
static tt_status lower_bitwise_or(tt_lower_ctx *c) { return bitwise(c, TT_HLO_OR); }
static tt_status lower_bitwise_xor(tt_lower_ctx *c) { return bitwise(c, TT_HLO_XOR); }

static tt_status lower_isnan(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_lower_result(c, tt_dtype_is_float(type_of(c, x)) ? cmp(c, TT_HLO_NE, x, x)
                                                      : tt_hlo_convert(tt_lower_hlo(c), k(c, x, 0), TT_BOOL));
  return NULL;
}

// --- copy and fill ---------------------------------------------------------------------------------

// The type results of filling ops take: the destination's (in-place), or
// self's (the functional forms copy, fill, zero).
static tt_hlo_type target_type(const tt_lower_ctx *c) {
  tt_hlo_type t;
  if (!tt_lower_dest_type(c, 0, &t)) t = tt_lower_tensor_type(c, 0, -1);
  return t;
}

// copy_(self, src): src converted to self's dtype (any cast) and broadcast.
static tt_status lower_copy(tt_lower_ctx *c) {
  tt_hlo_type t = target_type(c);
  tt_lower_allow_any_cast(c);
  tt_hv src = tt_hlo_convert(tt_lower_hlo(c), tt_lower_tensor(c, 1), t.dtype);
  tt_lower_result(c, tt_lower_broadcast_to(c, src, t.rank, t.dims));
  return NULL;
}

// A self-shaped splat of value argument i (a Scalar or a 0-d tensor).
static tt_status fill_from(tt_lower_ctx *c, int i) {
  const tt_value *v = tt_lower_arg(c, i);
  if (v->kind == TT_VALUE_TENSOR && v->u.tensor.ndim != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "fill_ only supports 0-dimension "
                         "value tensor but got tensor with %d dimensions.",
                         (int)v->u.tensor.ndim);
  tt_hlo_type t = target_type(c);
  tt_lower_allow_any_cast(c);
  tt_lower_result(c, tt_lower_broadcast_to(c, tt_lower_scalar(c, i, t.dtype), t.rank, t.dims));
  return NULL;
}

static tt_status lower_fill(tt_lower_ctx *c) { return fill_from(c, 1); }

static tt_status lower_zero(tt_lower_ctx *c) {
  tt_hlo_type t = target_type(c);
  tt_lower_result(c, tt_hlo_splat(tt_lower_hlo(c), &t, 0));
  return NULL;
}

// masked_fill(self, mask, value): value where mask, self elsewhere; self and
// mask broadcast (the in-place form needs the result to keep self's shape).
static tt_status lower_masked_fill(tt_lower_ctx *c) {
  const tt_value *m = tt_lower_arg(c, 1), *val = tt_lower_arg(c, 2);
  if (m->kind == TT_VALUE_TENSOR && m->u.tensor.dtype != TT_BOOL)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "masked_fill_ only supports boolean "
                         "masks, but got mask with dtype %s", tt_dtype_name(m->u.tensor.dtype));
  if (val->kind == TT_VALUE_TENSOR && val->u.tensor.ndim != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "masked_fill_ only supports a 0-dimensional "
                         "value tensor, but got tensor with %d dimension(s).", (int)val->u.tensor.ndim);
  tt_hv v[2] = {tt_lower_tensor(c, 0), tt_lower_tensor(c, 1)};
  TT_RETURN_IF_ERROR(tt_lower_broadcast(c, v, 2));
  tt_lower_result(c, sel(c, v[1], scalar_like(c, 2, v[0]), v[0]));
  return NULL;
}

// --- the table ---------------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
static const tt_rule kRules[] = {
    R("add.Tensor", lower_add), R("add_.Tensor", lower_add), R("add.out", lower_add),
    R("add.Scalar", lower_add), R("add_.Scalar", lower_add), R("add.Scalar_out", lower_add),
    R("sub.Tensor", lower_sub), R("sub_.Tensor", lower_sub), R("sub.out", lower_sub),
    R("sub.Scalar", lower_sub), R("sub_.Scalar", lower_sub), R("sub.Scalar_out", lower_sub),
    R("rsub.Tensor", lower_rsub), R("rsub.Scalar", lower_rsub),
    R("rsub.Tensor_out", lower_rsub), R("rsub.Scalar_out", lower_rsub),
    R("mul.Tensor", lower_mul), R("mul_.Tensor", lower_mul), R("mul.out", lower_mul),
    R("mul.Scalar", lower_mul), R("mul_.Scalar", lower_mul), R("mul.Scalar_out", lower_mul),
    R("div.Tensor", lower_div), R("div_.Tensor", lower_div), R("div.out", lower_div),
    R("div.Scalar", lower_div), R("div_.Scalar", lower_div), R("div.Scalar_out", lower_div),
    R("div.Tensor_mode", lower_div), R("div_.Tensor_mode", lower_div),
    R("div.out_mode", lower_div), R("div.Scalar_mode", lower_div),
    R("div_.Scalar_mode", lower_div), R("div.Scalar_mode_out", lower_div),
    R("remainder.Tensor", lower_remainder), R("remainder_.Tensor", lower_remainder),
    R("remainder.Tensor_out", lower_remainder), R("remainder.Scalar", lower_remainder),
    R("remainder_.Scalar", lower_remainder), R("remainder.Scalar_out", lower_remainder),
    R("remainder.Scalar_Tensor", lower_remainder),
    R("fmod.Tensor", lower_fmod), R("fmod_.Tensor", lower_fmod), R("fmod.Tensor_out", lower_fmod),
    R("fmod.Scalar", lower_fmod), R("fmod_.Scalar", lower_fmod), R("fmod.Scalar_out", lower_fmod),
    R("pow.Tensor_Tensor", lower_pow), R("pow_.Tensor", lower_pow),
    R("pow.Tensor_Tensor_out", lower_pow), R("pow.Tensor_Scalar", lower_pow),
    R("pow_.Scalar", lower_pow), R("pow.Tensor_Scalar_out", lower_pow),
    R("pow.Scalar", lower_pow), R("pow.Scalar_out", lower_pow),
    R("neg", lower_neg), R("neg_", lower_neg), R("neg.out", lower_neg),
    R("abs", lower_abs), R("abs_", lower_abs), R("abs.out", lower_abs),
    R("exp", lower_exp), R("exp_", lower_exp), R("exp.out", lower_exp),
    R("expm1", lower_expm1), R("expm1_", lower_expm1), R("expm1.out", lower_expm1),
    R("log", lower_log), R("log_", lower_log), R("log.out", lower_log),
    R("log1p", lower_log1p), R("log1p_", lower_log1p), R("log1p.out", lower_log1p),
    R("sqrt", lower_sqrt), R("sqrt_", lower_sqrt), R("sqrt.out", lower_sqrt),
    R("rsqrt", lower_rsqrt), R("rsqrt_", lower_rsqrt), R("rsqrt.out", lower_rsqrt),
    R("sin", lower_sin), R("sin_", lower_sin), R("sin.out", lower_sin),
    R("cos", lower_cos), R("cos_", lower_cos), R("cos.out", lower_cos),
    R("tan", lower_tan), R("tan_", lower_tan), R("tan.out", lower_tan),
    R("tanh", lower_tanh), R("tanh_", lower_tanh), R("tanh.out", lower_tanh),
    R("erf", lower_erf), R("erf_", lower_erf), R("erf.out", lower_erf),
    R("sigmoid", lower_sigmoid), R("sigmoid_", lower_sigmoid), R("sigmoid.out", lower_sigmoid),
    R("reciprocal", lower_reciprocal), R("reciprocal_", lower_reciprocal),
    R("reciprocal.out", lower_reciprocal),
    R("sign", lower_sign), R("sign_", lower_sign), R("sign.out", lower_sign),
    R("floor", lower_floor), R("floor_", lower_floor), R("floor.out", lower_floor),
    R("ceil", lower_ceil), R("ceil_", lower_ceil), R("ceil.out", lower_ceil),
    R("round", lower_round), R("round_", lower_round), R("round.out", lower_round),
    R("round.decimals", lower_round_decimals), R("round_.decimals", lower_round_decimals),
    R("round.decimals_out", lower_round_decimals),
    R("relu", lower_relu), R("relu_", lower_relu), R("relu.out", lower_relu),
    R("gelu", lower_gelu), R("gelu_", lower_gelu), R("gelu.out", lower_gelu),
    R("silu", lower_silu), R("silu_", lower_silu), R("silu.out", lower_silu),
    R("threshold_backward", lower_threshold_backward),
    R("threshold_backward.grad_input", lower_threshold_backward),
    R("sigmoid_backward", lower_sigmoid_backward),
    R("sigmoid_backward.grad_input", lower_sigmoid_backward),
    R("tanh_backward", lower_tanh_backward), R("tanh_backward.grad_input", lower_tanh_backward),
    R("gelu_backward", lower_gelu_backward), R("gelu_backward.grad_input", lower_gelu_backward),
    R("silu_backward", lower_silu_backward), R("silu_backward.grad_input", lower_silu_backward),
    R("eq.Tensor", lower_eq), R("eq_.Tensor", lower_eq), R("eq.Tensor_out", lower_eq),
    R("eq.Scalar", lower_eq), R("eq_.Scalar", lower_eq), R("eq.Scalar_out", lower_eq),
    R("ne.Tensor", lower_ne), R("ne_.Tensor", lower_ne), R("ne.Tensor_out", lower_ne),
    R("ne.Scalar", lower_ne), R("ne_.Scalar", lower_ne), R("ne.Scalar_out", lower_ne),
    R("lt.Tensor", lower_lt), R("lt_.Tensor", lower_lt), R("lt.Tensor_out", lower_lt),
    R("lt.Scalar", lower_lt), R("lt_.Scalar", lower_lt), R("lt.Scalar_out", lower_lt),
    R("le.Tensor", lower_le), R("le_.Tensor", lower_le), R("le.Tensor_out", lower_le),
    R("le.Scalar", lower_le), R("le_.Scalar", lower_le), R("le.Scalar_out", lower_le),
    R("gt.Tensor", lower_gt), R("gt_.Tensor", lower_gt), R("gt.Tensor_out", lower_gt),
    R("gt.Scalar", lower_gt), R("gt_.Scalar", lower_gt), R("gt.Scalar_out", lower_gt),
    R("ge.Tensor", lower_ge), R("ge_.Tensor", lower_ge), R("ge.Tensor_out", lower_ge),
    R("ge.Scalar", lower_ge), R("ge_.Scalar", lower_ge), R("ge.Scalar_out", lower_ge),
    R("maximum", lower_maximum), R("maximum.out", lower_maximum),
    R("minimum", lower_minimum), R("minimum.out", lower_minimum),
    R("clamp", lower_clamp), R("clamp_", lower_clamp), R("clamp.out", lower_clamp),
    R("clamp.Tensor", lower_clamp), R("clamp_.Tensor", lower_clamp),
    R("clamp.Tensor_out", lower_clamp),
    R("clamp_min", lower_clamp_min), R("clamp_min_", lower_clamp_min),
    R("clamp_min.out", lower_clamp_min), R("clamp_min.Tensor", lower_clamp_min),
    R("clamp_min_.Tensor", lower_clamp_min), R("clamp_min.Tensor_out", lower_clamp_min),
    R("clamp_max", lower_clamp_max), R("clamp_max_", lower_clamp_max),
    R("clamp_max.out", lower_clamp_max), R("clamp_max.Tensor", lower_clamp_max),
    R("clamp_max_.Tensor", lower_clamp_max), R("clamp_max.Tensor_out", lower_clamp_max),
    R("where.self", lower_where), R("where.self_out", lower_where),
    R("where.ScalarSelf", lower_where), R("where.ScalarOther", lower_where),
    R("where.Scalar", lower_where),
    R("logical_not", lower_logical_not), R("logical_not_", lower_logical_not),
    R("logical_not.out", lower_logical_not),
    R("logical_and", lower_logical_and), R("logical_and_", lower_logical_and),
    R("logical_and.out", lower_logical_and),
    R("logical_or", lower_logical_or), R("logical_or_", lower_logical_or),
    R("logical_or.out", lower_logical_or),
    R("logical_xor", lower_logical_xor), R("logical_xor_", lower_logical_xor),
    R("logical_xor.out", lower_logical_xor),
    R("bitwise_not", lower_bitwise_not), R("bitwise_not_", lower_bitwise_not),
    R("bitwise_not.out", lower_bitwise_not),
    R("bitwise_and.Tensor", lower_bitwise_and), R("bitwise_and_.Tensor", lower_bitwise_and),
    R("bitwise_and.Tensor_out", lower_bitwise_and), R("bitwise_and.Scalar", lower_bitwise_and),
    R("bitwise_or.Tensor", lower_bitwise_or), R("bitwise_or_.Tensor", lower_bitwise_or),
    R("bitwise_or.Tensor_out", lower_bitwise_or), R("bitwise_or.Scalar", lower_bitwise_or),
    R("bitwise_xor.Tensor", lower_bitwise_xor), R("bitwise_xor_.Tensor", lower_bitwise_xor),
    R("bitwise_xor.Tensor_out", lower_bitwise_xor), R("bitwise_xor.Scalar", lower_bitwise_xor),
    R("isnan", lower_isnan),
    R("copy_", lower_copy), R("copy", lower_copy),
    R("fill_.Scalar", lower_fill), R("fill_.Tensor", lower_fill),
    R("fill.Scalar", lower_fill), R("fill.Tensor", lower_fill),
    R("zero_", lower_zero), R("zero", lower_zero),
    R("masked_fill_.Scalar", lower_masked_fill), R("masked_fill_.Tensor", lower_masked_fill),
    R("masked_fill.Scalar", lower_masked_fill), R("masked_fill.Tensor", lower_masked_fill),
    R("masked_fill.Scalar_out", lower_masked_fill),
    R("masked_fill.Tensor_out", lower_masked_fill),
};
#undef R

const tt_rule_table tt_rules_elementwise = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
