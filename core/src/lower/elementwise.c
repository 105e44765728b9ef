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
// Complex: the rules marked RC in the table take complex64/complex128 (XLA's
// ops accept them; comparisons other than eq/ne, rounding, min/max and the
// activations have no complex meaning, and PyTorch refuses them too).
//
// Leaves out: integer division by zero raising (XLA returns
// -1 where PyTorch's CPU kernel raises); ops that PyTorch decomposes before
// they reach a backend (square, ...); erfc, the gamma family and special
// functions.
#include <math.h>
#include <string.h>

#include "lower/lower.h"

// --- helpers ----------------------------------------------------------------------------

// max / min (op) that propagate NaN like PyTorch: XLA's CPU backend does not
// on vectorised arrays.
static tt_hv nmax(tt_lower_ctx *c, tt_hlo_binop op, tt_hv x, tt_hv y) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv r = tt_hlo_binary(b, op, x, y);
  const tt_hlo_type *t = tt_hlo_type_of(b, r);
  if (!t || !tt_dtype_is_float(t->dtype)) return r;
  r = tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_NE, y, y), y, r);
  return tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_NE, x, x), x, r);
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
  return tt_lower_operands(c, idx, 2, tt_opmath(*rt), v);
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

// Is tensor or Scalar argument i bool.
static bool arg_is_bool(const tt_lower_ctx *c, int i) {
  const tt_value *v = tt_lower_arg(c, i);
  return (v->kind == TT_VALUE_TENSOR && v->u.tensor.dtype == TT_BOOL) ||
         (v->kind == TT_VALUE_SCALAR && v->u.scalar.dtype == TT_BOOL);
}

// PyTorch's sub_check: no bool operand, whatever the other (bool - 1 too).
static tt_status sub_check(tt_lower_ctx *c) {
  bool b0 = arg_is_bool(c, 0), b1 = arg_is_bool(c, 1);
  if (b0 && b1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                         "Subtraction, the `-` operator, with two bool tensors is not "
                         "supported. Use the `^` or `logical_xor()` operator instead.");
  if (b0 || b1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                         "Subtraction, the `-` operator, with a bool tensor is not "
                         "supported. If you are trying to invert a mask, use the `~` or "
                         "`logical_not()` operator instead.");
  return NULL;
}

// ATen's alpha_check, in its order, for a result of dtype rt.
static tt_status alpha_check(tt_lower_ctx *c, tt_dtype rt) {
  const tt_value *alpha = tt_lower_arg(c, 2);
  if (alpha->kind != TT_VALUE_SCALAR) return NULL;
  const tt_dtype ad = alpha->u.scalar.dtype;
  const bool inexact_alpha = tt_dtype_is_float(ad) || tt_dtype_is_complex(ad);
  if (ad == TT_BOOL && rt != TT_BOOL)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Boolean alpha only supported for Boolean "
                         "results.");
  if (!tt_dtype_is_float(rt) && !tt_dtype_is_complex(rt) && inexact_alpha)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "For integral input tensors, "
                         "argument alpha must not be a floating point number.");
  if (!tt_dtype_is_complex(rt) && tt_dtype_is_complex(ad))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "For non-complex input tensors, "
                         "argument alpha must not be a complex number.");
  return NULL;
}

// self op alpha*other (or other op alpha*self when `reverse`, for rsub).
static tt_status add_like(tt_lower_ctx *c, tt_hlo_binop op, bool reverse) {
  tt_dtype rt;
  tt_hv v[2];
  if (op == TT_HLO_SUB) TT_RETURN_IF_ERROR(sub_check(c));
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  TT_RETURN_IF_ERROR(alpha_check(c, rt));
  tt_hv x = v[reverse ? 1 : 0], y = v[reverse ? 0 : 1];
  if (!tt_lower_is_none(c, 2)) y = tt_lower_bin(c, TT_HLO_MUL, y, scalar_like(c, 2, y));
  return out(c, tt_lower_bin(c, op, x, y), rt);
}

static tt_status lower_add(tt_lower_ctx *c) { return add_like(c, TT_HLO_ADD, false); }
static tt_status lower_sub(tt_lower_ctx *c) { return add_like(c, TT_HLO_SUB, false); }
static tt_status lower_rsub(tt_lower_ctx *c) { return add_like(c, TT_HLO_SUB, true); }

static tt_status lower_mul(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  // bool * bool is logical and; StableHLO's multiply on i1 is exactly that.
  return out(c, tt_lower_bin(c, TT_HLO_MUL, v[0], v[1]), rt);
}

// --- div, remainder, fmod, pow ---------------------------------------------------------------

// x rounded to dtype r and back (r: TT_DTYPE_NONE leaves x as it is).
static tt_hv round_to(tt_lower_ctx *c, tt_hv x, tt_dtype r) {
  if (r == TT_DTYPE_NONE) return x;
  tt_hlo *b = tt_lower_hlo(c);
  return tt_hlo_convert(b, tt_hlo_convert(b, x, r), type_of(c, x));
}

// Floor division of floats the way PyTorch's div_floor_floating does it
// (through fmod, so 1 // 0.1 is 9 like Python, not 10). r: the dtype each
// step is rounded to (PyTorch's Vectorized<Half/BFloat16> path), or none.
static tt_hv floor_div_float(tt_lower_ctx *c, tt_hv a, tt_hv b, tt_dtype r) {
  tt_hv q = round_to(c, tt_lower_bin(c, TT_HLO_DIV, a, b), r);
  tt_hv mod = round_to(c, tt_lower_bin(c, TT_HLO_REM, a, b), r);
  tt_hv div = round_to(c, tt_lower_bin(c, TT_HLO_SUB, a, mod), r);
  div = round_to(c, tt_lower_bin(c, TT_HLO_DIV, div, b), r);
  tt_hv off_sign = tt_lower_bin(c, TT_HLO_XOR, cmp(c, TT_HLO_LT, b, k(c, b, 0)),
                       cmp(c, TT_HLO_LT, mod, k(c, mod, 0)));
  tt_hv fix = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_NE, mod, k(c, mod, 0)), off_sign);
  div = sel(c, fix, round_to(c, tt_lower_bin(c, TT_HLO_SUB, div, k(c, div, 1)), r), div);
  tt_hv fl = round_to(c, un(c, TT_HLO_FLOOR, div), r);
  tt_hv up = cmp(c, TT_HLO_GT, round_to(c, tt_lower_bin(c, TT_HLO_SUB, div, fl), r), k(c, div, 0.5));
  fl = sel(c, up, round_to(c, tt_lower_bin(c, TT_HLO_ADD, fl, k(c, fl, 1)), r), fl);
  tt_hv signed_zero = tt_lower_bin(c, TT_HLO_MUL, k(c, q, 0), q);  // copysign(0, a/b)
  tt_hv res = sel(c, cmp(c, TT_HLO_NE, div, k(c, div, 0)), fl, signed_zero);
  return sel(c, cmp(c, TT_HLO_EQ, b, k(c, b, 0)), q, res);
}

// Floor division of integers: C truncates, so step down when the remainder
// and the divisor differ in sign.
static tt_hv floor_div_int(tt_lower_ctx *c, tt_hv a, tt_hv b) {
  tt_hv q = tt_lower_bin(c, TT_HLO_DIV, a, b);
  tt_hv r = tt_lower_bin(c, TT_HLO_REM, a, b);
  tt_hv off_sign = tt_lower_bin(c, TT_HLO_XOR, cmp(c, TT_HLO_LT, r, k(c, r, 0)),
                       cmp(c, TT_HLO_LT, b, k(c, b, 0)));
  tt_hv fix = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_NE, r, k(c, r, 0)), off_sign);
  return sel(c, fix, tt_lower_bin(c, TT_HLO_SUB, q, k(c, q, 1)), q);
}

// Integer division by zero raises on PyTorch's CPU; here the divisor lives
// on the device (a tensor, or a Scalar's runtime value): a device-side check.
static void check_int_divisor(tt_lower_ctx *c, tt_dtype rt, tt_hv d) {
  if (tt_dtype_is_int(rt))
    tt_lower_check(c, cmp(c, TT_HLO_EQ, d, k(c, d, 0)), TT_HV_INVALID, TT_INVALID_ARGUMENT,
                   "ZeroDivisionError", 0, 0);
}

// Whether the divisor (argument 1) takes more than one value over the result:
// a tensor with a dim of size > 1 and stride != 0 (not TensorIterator's
// is_scalar operand). PyTorch's CPU kernels for 16-bit floats divide a
// varying divisor in 16-bit steps: trunc rounds the quotient first, floor
// rounds every step; a Scalar or one-value divisor divides in float.
static bool divisor_varies(const tt_lower_ctx *c) {
  const tt_value *v = tt_lower_arg(c, 1);
  if (v->kind != TT_VALUE_TENSOR) return false;
  for (int d = 0; d < v->u.tensor.ndim; d++)
    if (v->u.tensor.sizes[d] != 1 && v->u.tensor.strides[d] != 0) return true;
  return false;
}

// A divisor that XLA's simplifier cannot turn into a multiplication by its
// reciprocal (it does so for x / broadcast(y), off by an ulp from PyTorch's
// x / y, and wrong after trunc: 49.0 / 49 gave 0.9999999999999999).
static tt_hv exact_divisor(tt_lower_ctx *c, tt_hv y) {
  tt_dtype d = type_of(c, y);
  return tt_dtype_is_float(d) || tt_dtype_is_complex(d) ? tt_hlo_barrier(tt_lower_hlo(c), y) : y;
}

// div with rounding_mode None ("true"), "trunc" or "floor" (argument 2).
static tt_status div_mode(tt_lower_ctx *c, const char *mode) {
  if (mode && strcmp(mode, "trunc") != 0 && strcmp(mode, "floor") != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "div expected rounding_mode to be "
                         "one of None, 'trunc', or 'floor' but found '%s'", mode);
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, mode == NULL, &rt, v));
  if (mode && tt_dtype_is_complex(rt))  // PyTorch has no complex floor/trunc: its error
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "div with rounding_mode on complex");
  if (rt == TT_BOOL) {  // bool // bool divides as integers
    rt = TT_I64;
    v[0] = tt_hlo_convert(tt_lower_hlo(c), v[0], rt);
    v[1] = tt_hlo_convert(tt_lower_hlo(c), v[1], rt);
  }
  tt_hv r;
  if (mode) check_int_divisor(c, rt, v[1]);
  v[1] = exact_divisor(c, v[1]);
  tt_dtype steps = (rt == TT_F16 || rt == TT_BF16) && divisor_varies(c) ? rt : TT_DTYPE_NONE;
  if (!mode) {
    r = tt_lower_bin(c, TT_HLO_DIV, v[0], v[1]);
  } else if (mode[0] == 't') {
    r = tt_lower_bin(c, TT_HLO_DIV, v[0], v[1]);
    if (tt_dtype_is_float(rt)) r = trunc_float(c, round_to(c, r, steps));
  } else {
    r = tt_dtype_is_float(rt) ? floor_div_float(c, v[0], v[1], steps)
                              : floor_div_int(c, v[0], v[1]);
  }
  return out(c, r, rt);
}

static tt_status lower_div(tt_lower_ctx *c) { return div_mode(c, str_arg(c, 2, NULL)); }

// Python's %: the result takes the divisor's sign.
static tt_status lower_remainder(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  if (rt == TT_BOOL) return tt_lower_fail(c, TT_UNIMPLEMENTED, "bool remainder");
  check_int_divisor(c, rt, v[1]);
  tt_hv r = tt_lower_bin(c, TT_HLO_REM, v[0], v[1]);
  tt_hv off_sign = tt_lower_bin(c, TT_HLO_XOR, cmp(c, TT_HLO_LT, r, k(c, r, 0)),
                       cmp(c, TT_HLO_LT, v[1], k(c, v[1], 0)));
  tt_hv fix = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_NE, r, k(c, r, 0)), off_sign);
  return out(c, sel(c, fix, tt_lower_bin(c, TT_HLO_ADD, r, v[1]), r), rt);
}

// C's fmod: the result takes the dividend's sign, which is StableHLO's rem.
static tt_status lower_fmod(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  if (rt == TT_BOOL) return tt_lower_fail(c, TT_UNIMPLEMENTED, "bool fmod");
  check_int_divisor(c, rt, v[1]);
  return out(c, tt_lower_bin(c, TT_HLO_REM, v[0], v[1]), rt);
}

// The exponents PyTorch's CPU kernels special-case for a float tensor to a
// real Scalar power, computed as they do: a general powf per element costs
// far more (RMSNorm's x.pow(2) was 6% of a compiled llama step) and rounds
// differently. pow_Tensor_Scalar_out: 0 fills ones, 1 copies (every dtype);
// pow_tensor_scalar_kernel: 0.5, -0.5, -1 are sqrt, 1 / sqrt, 1 / x for
// float, double and bfloat16 (one rounding), and 2, 3, -2 are x * x,
// x * x * x, 1 / (x * x) for float and double, and for bfloat16 in its own
// arithmetic (each step rounded); half takes the general pow. The exponent
// stays a runtime argument; its class is the program's variant
// (tt_variant_fn).
enum { POW_GENERAL, POW_0, POW_1, POW_2, POW_3, POW_HALF, POW_NEG_HALF, POW_NEG_1, POW_NEG_2 };

static int64_t pow_class(const tt_value *self, const tt_value *e) {
  static const double kExp[] = {0, 0, 1, 2, 3, 0.5, -0.5, -1, -2};
  if (self->kind != TT_VALUE_TENSOR || !tt_dtype_is_float(self->u.tensor.dtype) ||
      e->kind != TT_VALUE_SCALAR || tt_dtype_is_complex(e->u.scalar.dtype))
    return POW_GENERAL;
  bool is_float = tt_dtype_is_float(e->u.scalar.dtype);
  double v = is_float ? e->u.scalar.f : (double)e->u.scalar.i;
  int64_t cls = POW_GENERAL;
  for (int k = POW_0; k <= POW_NEG_2 && cls == POW_GENERAL; k++)
    if (v == kExp[k]) cls = k;
  if (self->u.tensor.dtype == TT_F16 && cls != POW_0 && cls != POW_1) return POW_GENERAL;
  return cls;
}

// v rounded to the 16-bit result dtype rt and back (bfloat16 arithmetic's
// rounding of each step); v itself for wider dtypes.
static tt_hv round_step(tt_lower_ctx *c, tt_hv v, tt_dtype rt) {
  if (tt_opmath(rt) == rt) return v;
  tt_hlo *b = tt_lower_hlo(c);
  return tt_hlo_convert(b, tt_hlo_convert(b, v, rt), tt_opmath(rt));
}

static int64_t pow_variant(const tt_op_call *call) {
  return call->nargs < 2 ? POW_GENERAL : pow_class(&call->args[0], &call->args[1]);
}

// Integer a ** e as PyTorch's powi: squaring over every bit of e, wrapping
// in the dtype (XLA's integer power differs for large exponents: uint8
// 3 ** 254 gave 0, PyTorch 57); a negative e gives 1 for a base of 1, -1 or
// 1 for -1 (odd or even e), else 0.
static tt_hv int_pow(tt_lower_ctx *c, tt_hv a, tt_hv e) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_type(c, a);
  int bits = (int)tt_dtype_size(t.dtype) * 8;
  tt_hv one = tt_hlo_splat_i(b, &t, 1), zero = tt_hlo_splat_i(b, &t, 0);
  tt_hv r = one, base = a;
  for (int i = 0; i < bits; i++) {
    if (i > 0) base = tt_lower_bin(c, TT_HLO_MUL, base, base);
    tt_hv bit = tt_lower_bin(c, TT_HLO_AND, tt_lower_bin(c, TT_HLO_SHR_L, e, tt_hlo_splat_i(b, &t, i)), one);
    r = sel(c, cmp(c, TT_HLO_NE, bit, zero), tt_lower_bin(c, TT_HLO_MUL, r, base), r);
  }
  tt_hv odd = cmp(c, TT_HLO_NE, tt_lower_bin(c, TT_HLO_AND, e, one), zero);
  tt_hv m1 = tt_hlo_splat_i(b, &t, -1);
  tt_hv neg = sel(c, cmp(c, TT_HLO_EQ, a, one), one,
                  sel(c, cmp(c, TT_HLO_EQ, a, m1), sel(c, odd, m1, one), zero));
  return sel(c, cmp(c, TT_HLO_LT, e, zero), neg, r);
}

static tt_status lower_pow(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  if (rt == TT_BOOL) return tt_lower_fail(c, TT_UNIMPLEMENTED, "bool pow");
  if (tt_dtype_is_int(rt)) return out(c, int_pow(c, v[0], v[1]), rt);
  tt_hv x = v[0], r;
  switch (pow_class(tt_lower_arg(c, 0), tt_lower_arg(c, 1))) {
    case POW_0: r = k(c, x, 1); break;
    case POW_1: r = x; break;
    case POW_2: r = tt_lower_bin(c, TT_HLO_MUL, x, x); break;
    case POW_3:
      r = tt_lower_bin(c, TT_HLO_MUL, round_step(c, tt_lower_bin(c, TT_HLO_MUL, x, x), rt), x);
      break;
    case POW_HALF: r = un(c, TT_HLO_SQRT, x); break;
    case POW_NEG_HALF: r = tt_lower_bin(c, TT_HLO_DIV, k(c, x, 1), un(c, TT_HLO_SQRT, x)); break;
    case POW_NEG_1: r = tt_lower_bin(c, TT_HLO_DIV, k(c, x, 1), x); break;
    case POW_NEG_2:
      r = tt_lower_bin(c, TT_HLO_DIV, k(c, x, 1), round_step(c, tt_lower_bin(c, TT_HLO_MUL, x, x), rt));
      break;
    default:
      r = tt_dtype_is_complex(rt) ? tt_lower_complex_pow(c, x, v[1])
                                  : tt_lower_bin(c, TT_HLO_POW, x, v[1]);
      break;
  }
  return out(c, r, rt);
}

// --- unary math ---------------------------------------------------------------------------------

// x (argument 0) in the opmath dtype of float math; *rt gets the float
// result dtype.
static tt_hv float_input(tt_lower_ctx *c, tt_dtype *rt) {
  tt_hv x = tt_lower_tensor(c, 0);
  *rt = tt_lower_float_dtype(c, tt_lower_tensor_type(c, 0, -1).dtype);
  return tt_hlo_convert(tt_lower_hlo(c), x, tt_opmath(*rt));
}

// C99 Annex G's special values (std::complex, which PyTorch's CPU kernels
// use) where XLA's complex exp / log / sqrt differ; r is XLA's op(z).
static tt_hv complex_special(tt_lower_ctx *c, tt_hlo_unop op, tt_hv z, tt_hv r) {
  if (!tt_dtype_is_complex(type_of(c, z))) return r;
  if (op != TT_HLO_EXP && op != TT_HLO_LOG && op != TT_HLO_SQRT) return r;
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv re = tt_hlo_real(b, z), im = tt_hlo_imag(b, z), rr = tt_hlo_real(b, r), ri = tt_hlo_imag(b, r);
  tt_hv inf = k(c, re, INFINITY), nan = k(c, re, NAN), zero = k(c, re, 0);
  tt_hv re_nan = cmp(c, TT_HLO_NE, re, re), im_nan = cmp(c, TT_HLO_NE, im, im);
  tt_hv re_pinf = cmp(c, TT_HLO_EQ, re, inf), re_ninf = cmp(c, TT_HLO_EQ, re, k(c, re, -INFINITY));
  tt_hv im_inf = cmp(c, TT_HLO_EQ, un(c, TT_HLO_ABS, im), inf);
  if (op == TT_HLO_EXP) {  // e^(+inf + i(inf|NaN)) = inf + iNaN; e^(-inf + i(inf|NaN)) = 0
    tt_hv odd = tt_lower_bin(c, TT_HLO_OR, im_inf, im_nan);
    tt_hv hi = tt_lower_bin(c, TT_HLO_AND, re_pinf, odd), lo = tt_lower_bin(c, TT_HLO_AND, re_ninf, odd);
    rr = sel(c, hi, inf, sel(c, lo, zero, rr));
    ri = sel(c, hi, nan, sel(c, lo, zero, ri));
  } else if (op == TT_HLO_LOG) {  // a NaN part: NaN + iNaN, or inf + iNaN when the other is infinite
    tt_hv any_nan = tt_lower_bin(c, TT_HLO_OR, re_nan, im_nan);
    tt_hv any_inf = tt_lower_bin(c, TT_HLO_OR, tt_lower_bin(c, TT_HLO_OR, re_pinf, re_ninf), im_inf);
    rr = sel(c, any_nan, sel(c, any_inf, inf, nan), rr);
    ri = sel(c, any_nan, nan, ri);
  } else {  // sqrt(x + i inf) = inf + i inf; a NaN imaginary part: inf + iNaN (x = inf),
            // NaN + i inf (x = -inf), else NaN + iNaN
    rr = sel(c, im_inf, inf, sel(c, im_nan, sel(c, re_pinf, inf, nan), rr));
    ri = sel(c, im_inf, im, sel(c, im_nan, sel(c, re_ninf, inf, nan), ri));
  }
  return tt_hlo_complex(b, rr, ri);
}

static tt_hv cun(tt_lower_ctx *c, tt_hlo_unop op, tt_hv x) {
  return complex_special(c, op, x, un(c, op, x));
}

static tt_status float_unary(tt_lower_ctx *c, tt_hlo_unop op) {
  tt_dtype rt;
  tt_hv x = float_input(c, &rt);
  return out(c, cun(c, op, x), rt);
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
// sigmoid: logistic for reals; 1 / (1 + e^-z) for complex z (PyTorch's formula).
static tt_status lower_sigmoid(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = float_input(c, &rt);
  if (!tt_dtype_is_complex(rt)) return out(c, un(c, TT_HLO_LOGISTIC, x), rt);
  tt_hv e = un(c, TT_HLO_EXP, un(c, TT_HLO_NEG, x));
  return out(c, tt_lower_bin(c, TT_HLO_DIV, k(c, x, 1), tt_lower_bin(c, TT_HLO_ADD, k(c, x, 1), e)), rt);
}

static tt_status lower_erf(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = float_input(c, &rt);
  return out(c, tt_hlo_erf(tt_lower_hlo(c), x), rt);
}

static tt_status lower_reciprocal(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = float_input(c, &rt);
  return out(c, tt_lower_bin(c, TT_HLO_DIV, k(c, x, 1), x), rt);
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

static bool is_unsigned(tt_dtype d) {
  return d == TT_U8 || d == TT_U16 || d == TT_U32 || d == TT_U64;  // not complex, after them
}

// sqrt(x^2 + y^2) of finite float64 x, y >= 0, correctly rounded (glibc's
// hypot, which PyTorch's CPU abs of complex128 is): the sum of squares as a
// double-double (Dekker's products, Knuth's sum), its sqrt and one Newton
// step on the exact residual; scaled by 2^-600 / 2^600 where the squares
// would overflow or lose bits to underflow.
static tt_hv hypot_f64(tt_lower_ctx *c, tt_hv x, tt_hv y) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv big = tt_lower_bin(c, TT_HLO_MAX, x, y);
  tt_hv huge = cmp(c, TT_HLO_GT, big, k(c, big, 0x1p500));
  tt_hv tiny = cmp(c, TT_HLO_LT, big, k(c, big, 0x1p-500));
  tt_hv in = sel(c, huge, k(c, big, 0x1p-600), sel(c, tiny, k(c, big, 0x1p600), k(c, big, 1)));
  tt_hv back = sel(c, huge, k(c, big, 0x1p600), sel(c, tiny, k(c, big, 0x1p-600), k(c, big, 1)));
  x = tt_lower_bin(c, TT_HLO_MUL, x, in);
  y = tt_lower_bin(c, TT_HLO_MUL, y, in);
  tt_hv px = tt_lower_bin(c, TT_HLO_MUL, x, x), py = tt_lower_bin(c, TT_HLO_MUL, y, y);
  tt_hv s = tt_lower_bin(c, TT_HLO_ADD, px, py), bb = tt_lower_bin(c, TT_HLO_SUB, s, px);
  tt_hv lo = tt_lower_bin(c, TT_HLO_ADD,
                          tt_lower_bin(c, TT_HLO_SUB, px, tt_lower_bin(c, TT_HLO_SUB, s, bb)),
                          tt_lower_bin(c, TT_HLO_SUB, py, bb));
  lo = tt_lower_bin(c, TT_HLO_ADD, lo, tt_lower_prod_err(c, x, x, px));
  lo = tt_lower_bin(c, TT_HLO_ADD, lo, tt_lower_prod_err(c, y, y, py));
  tt_hv r = un(c, TT_HLO_SQRT, s), rr = tt_lower_bin(c, TT_HLO_MUL, r, r);
  tt_hv res = tt_lower_bin(c, TT_HLO_SUB, tt_lower_bin(c, TT_HLO_SUB, s, rr),
                           tt_lower_prod_err(c, r, r, rr));
  res = tt_lower_bin(c, TT_HLO_ADD, res, lo);
  tt_hv fix = tt_lower_bin(c, TT_HLO_DIV, res, tt_lower_bin(c, TT_HLO_ADD, r, r));
  tt_hv ok = tt_hlo_unary(b, TT_HLO_IS_FINITE, fix);  // 0 / 0 where r is 0
  r = sel(c, ok, tt_lower_bin(c, TT_HLO_ADD, r, fix), r);
  return tt_lower_bin(c, TT_HLO_MUL, r, back);
}

// |z| of a complex z as PyTorch's CPU abs (std::abs: glibc's hypotf/hypot).
// complex64 in float64: each square exact, one rounded sum, sqrt, one
// rounding to float, as hypotf does; complex128 through hypot_f64. XLA's
// own abs was an ulp off for a third of random values. hypot's rules on top:
// an infinite part wins, then NaN (XLA's abs of 1 + iNaN is sqrt(2)).
tt_hv tt_lower_complex_abs(tt_lower_ctx *c, tt_hv z) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv re = un(c, TT_HLO_ABS, tt_hlo_real(b, z)), im = un(c, TT_HLO_ABS, tt_hlo_imag(b, z));
  tt_dtype part = type_of(c, re);
  tt_hv x = tt_hlo_convert(b, re, TT_F64), y = tt_hlo_convert(b, im, TT_F64);
  tt_hv r;
  if (part == TT_F64) {
    r = hypot_f64(c, x, y);
  } else {
    tt_hv s = tt_lower_bin(c, TT_HLO_ADD, tt_lower_bin(c, TT_HLO_MUL, x, x),
                           tt_lower_bin(c, TT_HLO_MUL, y, y));
    r = tt_hlo_convert(b, un(c, TT_HLO_SQRT, s), part);
  }
  tt_hv inf = tt_lower_bin(c, TT_HLO_OR, cmp(c, TT_HLO_EQ, re, k(c, re, INFINITY)),
                           cmp(c, TT_HLO_EQ, im, k(c, im, INFINITY)));
  tt_hv nan = tt_lower_bin(c, TT_HLO_OR, cmp(c, TT_HLO_NE, re, re), cmp(c, TT_HLO_NE, im, im));
  return sel(c, inf, k(c, r, INFINITY), sel(c, nan, k(c, r, NAN), r));
}

static tt_status lower_abs(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_dtype d = type_of(c, x);
  if (d == TT_BOOL) return tt_lower_fail(c, TT_UNIMPLEMENTED, "abs of bool");
  tt_hv r;
  if (tt_dtype_is_complex(d)) r = tt_lower_complex_abs(c, x);
  else r = is_unsigned(d) ? x : un(c, TT_HLO_ABS, x);
  tt_lower_result(c, r);
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
  if (tt_dtype_is_float(d)) {  // (0 < x) - (x < 0), as ATen's kernels: NaN and -0 give 0
    tt_hlo *b = tt_lower_hlo(c);
    tt_hv pos = tt_hlo_convert(b, cmp(c, TT_HLO_GT, x, k(c, x, 0)), d);
    tt_hv neg = tt_hlo_convert(b, cmp(c, TT_HLO_LT, x, k(c, x, 0)), d);
    tt_lower_result(c, tt_lower_bin(c, TT_HLO_SUB, pos, neg));
    return NULL;
  }
  tt_lower_result(c, un(c, TT_HLO_SIGN, x));
  return NULL;
}

// sgn: sign for reals; z / |z| for complex z (0 at 0).
static tt_status lower_sgn(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  if (!tt_dtype_is_complex(type_of(c, x))) return lower_sign(c);
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv a = un(c, TT_HLO_ABS, x);
  tt_hv zero = cmp(c, TT_HLO_EQ, a, k(c, a, 0));
  tt_hv az = tt_hlo_convert(b, a, type_of(c, x));
  tt_lower_result(c, sel(c, zero, k(c, x, 0), tt_lower_bin(c, TT_HLO_DIV, x, az)));
  return NULL;
}

// conj_physical: the conjugate, computed (x itself for real x).
static tt_status lower_conj_physical(tt_lower_ctx *c) {
  tt_lower_result(c, tt_lower_conj(c, tt_lower_tensor(c, 0)));
  return NULL;
}

// complex/polar take out= only of the exact complex dtype of parts a.
static tt_status check_complex_out(tt_lower_ctx *c, tt_dtype a) {
  tt_hlo_type dest;
  tt_dtype want = a == TT_F64 ? TT_C128 : TT_C64;
  if (tt_lower_dest_type(c, 0, &dest) && dest.dtype != want)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected object of scalar type %s but got "
                         "scalar type %s for argument 'out'", tt_dtype_torch_name(want),
                         tt_dtype_torch_name(dest.dtype));
  return NULL;
}

// complex(real, imag): two float32 or two float64 tensors (PyTorch
// requires the same dtype), broadcast.
static tt_status lower_complex(tt_lower_ctx *c) {
  tt_dtype a = tt_lower_tensor_type(c, 0, -1).dtype, d = tt_lower_tensor_type(c, 1, -1).dtype;
  if (a != d)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected object of scalar type %s but got "
                         "scalar type %s for second argument", tt_dtype_torch_name(a),
                         tt_dtype_torch_name(d));
  if (a != TT_F32 && a != TT_F64)  // half: complex32, which the core has not
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "complex of %s parts", tt_dtype_name(a));
  TT_RETURN_IF_ERROR(check_complex_out(c, a));
  tt_hv v[2] = {tt_lower_tensor(c, 0), tt_lower_tensor(c, 1)};
  TT_RETURN_IF_ERROR(tt_lower_broadcast(c, v, 2));
  tt_lower_result(c, tt_hlo_complex(tt_lower_hlo(c), v[0], v[1]));
  return NULL;
}

// polar(abs, angle) = abs (cos angle + i sin angle).
static tt_status lower_polar(tt_lower_ctx *c) {
  tt_dtype a = tt_lower_tensor_type(c, 0, -1).dtype, d = tt_lower_tensor_type(c, 1, -1).dtype;
  if (a != d)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected object of scalar type %s but got "
                         "scalar type %s for second argument", tt_dtype_torch_name(a),
                         tt_dtype_torch_name(d));
  if (a != TT_F32 && a != TT_F64)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "polar of %s parts", tt_dtype_name(a));
  TT_RETURN_IF_ERROR(check_complex_out(c, a));
  tt_hv v[2] = {tt_lower_tensor(c, 0), tt_lower_tensor(c, 1)};
  TT_RETURN_IF_ERROR(tt_lower_broadcast(c, v, 2));
  tt_hv re = tt_lower_bin(c, TT_HLO_MUL, v[0], un(c, TT_HLO_COS, v[1]));
  tt_hv im = tt_lower_bin(c, TT_HLO_MUL, v[0], un(c, TT_HLO_SIN, v[1]));
  tt_lower_result(c, tt_hlo_complex(tt_lower_hlo(c), re, im));
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
  x = tt_hlo_convert(tt_lower_hlo(c), x, tt_opmath(rt));
  double mag = dec < 0 ? -(double)dec : (double)dec;  // no overflow at INT64_MIN
  tt_hv p = k(c, x, pow(10.0, mag));
  tt_hlo_binop in = dec > 0 ? TT_HLO_MUL : TT_HLO_DIV, back = dec > 0 ? TT_HLO_DIV : TT_HLO_MUL;
  return out(c, tt_lower_bin(c, back, un(c, TT_HLO_ROUND_EVEN, tt_lower_bin(c, in, x, p)), p), rt);
}

// --- activations ----------------------------------------------------------------------------------

static tt_status lower_relu(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  if (type_of(c, x) == TT_BOOL) return tt_lower_fail(c, TT_UNIMPLEMENTED, "relu of bool");
  // max(x, 0) propagates NaN like PyTorch's relu.
  tt_lower_result(c, nmax(c, TT_HLO_MAX, x, k(c, x, 0)));
  return NULL;
}

static tt_status lower_silu(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = float_input(c, &rt);
  return out(c, tt_lower_bin(c, TT_HLO_MUL, x, un(c, TT_HLO_LOGISTIC, x)), rt);
}

static const double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
static const double kSqrtHalf = 0.70710678118654752440;     // 1/sqrt(2)
static const double kGeluKappa = 0.044715;

// approximate="tanh" gelu's inner tanh(sqrt(2/pi) * (x + 0.044715 x^3)).
static tt_hv gelu_tanh_inner(tt_lower_ctx *c, tt_hv x) {
  tt_hv x3 = tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_MUL, x, x), x);
  tt_hv in = tt_lower_bin(c, TT_HLO_ADD, x, tt_lower_bin(c, TT_HLO_MUL, k(c, x, kGeluKappa), x3));
  return un(c, TT_HLO_TANH, tt_lower_bin(c, TT_HLO_MUL, k(c, x, kSqrt2OverPi), in));
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
                      : tt_hlo_erf(tt_lower_hlo(c), tt_lower_bin(c, TT_HLO_MUL, x, k(c, x, kSqrtHalf)));
  tt_hv half_x = tt_lower_bin(c, TT_HLO_MUL, x, k(c, x, 0.5));
  return out(c, tt_lower_bin(c, TT_HLO_MUL, half_x, tt_lower_bin(c, TT_HLO_ADD, k(c, x, 1), t)), rt);
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
  tt_hv d = tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_SUB, k(c, y, 1), y), y);
  return out(c, tt_lower_bin(c, TT_HLO_MUL, g, tt_lower_conj(c, d)), rt);  // conj: PyTorch's complex rule
}

// grad * (1 - y^2), y = tanh(x).
static tt_status lower_tanh_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, y;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &y));
  tt_hv d = tt_lower_bin(c, TT_HLO_SUB, k(c, y, 1), tt_lower_bin(c, TT_HLO_MUL, y, y));
  return out(c, tt_lower_bin(c, TT_HLO_MUL, g, tt_lower_conj(c, d)), rt);  // conj: PyTorch's complex rule
}

// grad * s * (1 + x (1 - s)), s = sigmoid(x).
static tt_status lower_silu_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, x;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &x));
  tt_hv s = un(c, TT_HLO_LOGISTIC, x);
  tt_hv inner = tt_lower_bin(c, TT_HLO_ADD, k(c, x, 1),
                    tt_lower_bin(c, TT_HLO_MUL, x, tt_lower_bin(c, TT_HLO_SUB, k(c, s, 1), s)));
  return out(c, tt_lower_bin(c, TT_HLO_MUL, g, tt_lower_bin(c, TT_HLO_MUL, s, inner)), rt);
}

// d/dx of the tanh-approximated gelu, as PyTorch's GeluBackward computes it.
static tt_hv gelu_tanh_grad(tt_lower_ctx *c, tt_hv x) {
  tt_hv t = gelu_tanh_inner(c, x);
  tt_hv x2 = tt_lower_bin(c, TT_HLO_MUL, x, x);
  tt_hv left = tt_lower_bin(c, TT_HLO_MUL, k(c, x, 0.5), x);
  tt_hv left_d = tt_lower_bin(c, TT_HLO_MUL, k(c, x, 0.5), tt_lower_bin(c, TT_HLO_ADD, k(c, t, 1), t));
  tt_hv sech2 = tt_lower_bin(c, TT_HLO_SUB, k(c, t, 1), tt_lower_bin(c, TT_HLO_MUL, t, t));
  tt_hv inner_d = tt_lower_bin(c, TT_HLO_MUL, k(c, x, kSqrt2OverPi),
                      tt_lower_bin(c, TT_HLO_ADD, k(c, x, 1), tt_lower_bin(c, TT_HLO_MUL, k(c, x, 3 * kGeluKappa), x2)));
  tt_hv right_d = tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_MUL, left, sech2), inner_d);
  return tt_lower_bin(c, TT_HLO_ADD, left_d, right_d);
}

// d/dx of x * Phi(x) = Phi(x) + x * phi(x).
static tt_hv gelu_erf_grad(tt_lower_ctx *c, tt_hv x) {
  static const double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)
  tt_hv cdf = tt_lower_bin(c, TT_HLO_MUL, k(c, x, 0.5),
                  tt_lower_bin(c, TT_HLO_ADD, k(c, x, 1),
                      tt_hlo_erf(tt_lower_hlo(c), tt_lower_bin(c, TT_HLO_MUL, x, k(c, x, kSqrtHalf)))));
  tt_hv e = un(c, TT_HLO_EXP, tt_lower_bin(c, TT_HLO_MUL, k(c, x, -0.5), tt_lower_bin(c, TT_HLO_MUL, x, x)));
  tt_hv pdf = tt_lower_bin(c, TT_HLO_MUL, k(c, x, kInvSqrt2Pi), e);
  return tt_lower_bin(c, TT_HLO_ADD, cdf, tt_lower_bin(c, TT_HLO_MUL, x, pdf));
}

static tt_status lower_gelu_backward(tt_lower_ctx *c) {
  bool tanh_mode;
  TT_RETURN_IF_ERROR(gelu_mode(c, 2, &tanh_mode));
  tt_dtype rt;
  tt_hv g, x;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &x));
  tt_hv d = tanh_mode ? gelu_tanh_grad(c, x) : gelu_erf_grad(c, x);
  return out(c, tt_lower_bin(c, TT_HLO_MUL, g, d), rt);
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
  return out(c, nmax(c, op, v[0], v[1]), rt);  // NaN-propagating, like PyTorch
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
  if (has_lo) x = nmax(c, TT_HLO_MAX, x, v[1]);
  if (has_hi) x = nmax(c, TT_HLO_MIN, x, v[n - 1]);
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
  tt_lower_result(c, tt_lower_bin(c, op, v[0], v[1]));
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
  tt_lower_result(c, tt_lower_bin(c, op, v[0], v[1]));
  return NULL;
}

static tt_status lower_bitwise_and(tt_lower_ctx *c) { return bitwise(c, TT_HLO_AND); }
static tt_status lower_bitwise_or(tt_lower_ctx *c) { return bitwise(c, TT_HLO_OR); }
static tt_status lower_bitwise_xor(tt_lower_ctx *c) { return bitwise(c, TT_HLO_XOR); }

// (x != x holds for a complex x with a NaN part: XLA compares both parts.)
static tt_status lower_isnan(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_dtype d = type_of(c, x);
  tt_lower_result(c, tt_dtype_is_float(d) || tt_dtype_is_complex(d) ? cmp(c, TT_HLO_NE, x, x)
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
// Float to integer as PyTorch's CPU kernels convert (C casts as compiled for
// x86-64, which NumPy shares): through int32 for the narrower types, whose
// bits then wrap, or int64; values outside that range, and NaN, give its
// minimum. StableHLO's convert saturates instead, so 3e38 would become 127
// in int8 where the CPU gives 0.
static tt_hv float_to_int_like_cpu(tt_lower_ctx *c, tt_hv x, tt_dtype to) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype via = to == TT_I64 ? TT_I64 : TT_I32;
  double lim = via == TT_I64 ? 9223372036854775808.0 : 2147483648.0;
  tt_hv in = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_GE, x, k(c, x, -lim)),
                          cmp(c, TT_HLO_LT, x, k(c, x, lim)));  // false for NaN too
  tt_hv v = tt_hlo_convert(b, x, via);
  tt_hlo_type vt = tt_lower_type(c, v);
  v = sel(c, in, v, tt_hlo_splat_i(b, &vt, via == TT_I64 ? INT64_MIN : INT32_MIN));
  return tt_hlo_convert(b, v, to);
}

static tt_status lower_copy(tt_lower_ctx *c) {
  tt_hlo_type t = target_type(c);
  const tt_value *from = tt_lower_arg(c, 1);
  if (from->kind == TT_VALUE_TENSOR && tt_dtype_is_complex(from->u.tensor.dtype) &&
      !tt_dtype_is_complex(t.dtype))  // on the CPU, so PyTorch warns as it does there
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "copy_: complex to %s drops the "
                         "imaginary part", tt_dtype_name(t.dtype));
  tt_lower_allow_any_cast(c);
  tt_hv src = tt_lower_tensor(c, 1);
  bool narrow_int = t.dtype == TT_U8 || t.dtype == TT_I8 || t.dtype == TT_I16 ||
                    t.dtype == TT_I32 || t.dtype == TT_I64;
  if (from->kind == TT_VALUE_TENSOR && tt_dtype_is_float(from->u.tensor.dtype) && narrow_int)
    src = float_to_int_like_cpu(c, src, t.dtype);
  else
    src = tt_hlo_convert(tt_lower_hlo(c), src, t.dtype);
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
                         "masks, but got mask with dtype %s", tt_dtype_cpp_name(m->u.tensor.dtype));
  if (val->kind == TT_VALUE_TENSOR && val->u.tensor.ndim != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "masked_fill_ only supports a 0-dimensional "
                         "value tensor, but got tensor with %d dimension(s).", (int)val->u.tensor.ndim);
  tt_hv v[2] = {tt_lower_tensor(c, 0), tt_lower_tensor(c, 1)};
  // A complex value tensor into a real self: the CPU reads the value and
  // refuses a non-zero imaginary part; here the device checks it (raised at
  // the next synchronisation) rather than dropping it silently.
  if (val->kind == TT_VALUE_TENSOR && tt_dtype_is_complex(val->u.tensor.dtype) &&
      !tt_dtype_is_complex(tt_lower_tensor_type(c, 0, -1).dtype)) {
    tt_hv im = tt_hlo_imag(tt_lower_hlo(c), tt_lower_tensor(c, 2));
    tt_lower_check(c, cmp(c, TT_HLO_NE, im, k(c, im, 0)), TT_HV_INVALID, TT_INVALID_ARGUMENT,
                   "masked_fill: value cannot be converted to the type of self without overflow "
                   "(a complex value with a non-zero imaginary part)", 0, 0);
  }
  TT_RETURN_IF_ERROR(tt_lower_broadcast(c, v, 2));
  tt_lower_result(c, sel(c, v[1], scalar_like(c, 2, v[0]), v[0]));
  return NULL;
}

// --- more unary math ------------------------------------------------------------------------------
//
// StableHLO has no inverse or hyperbolic trig ops: they are built from
// atan2, log1p and expm1 in forms that stay accurate near 0.

static tt_hv sqrt_(tt_lower_ctx *c, tt_hv x) { return un(c, TT_HLO_SQRT, x); }
static tt_hv add_(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_ADD, x, y); }
static tt_hv sub_(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_SUB, x, y); }
static tt_hv mul_(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_MUL, x, y); }
static tt_hv div_(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_DIV, x, y); }

typedef tt_hv (*math_fn)(tt_lower_ctx *c, tt_hv x);

static tt_status float_math(tt_lower_ctx *c, math_fn f) {
  tt_dtype rt;
  tt_hv x = float_input(c, &rt);
  return out(c, f(c, x), rt);
}

// sqrt(1 - x^2) as sqrt((1 - x)(1 + x)), exact near |x| = 1.
static tt_hv one_minus_sq(tt_lower_ctx *c, tt_hv x) {
  return sqrt_(c, mul_(c, sub_(c, k(c, x, 1), x), add_(c, k(c, x, 1), x)));
}

static tt_hv f_asin(tt_lower_ctx *c, tt_hv x) { return tt_lower_bin(c, TT_HLO_ATAN2, x, one_minus_sq(c, x)); }
static tt_hv f_acos(tt_lower_ctx *c, tt_hv x) { return tt_lower_bin(c, TT_HLO_ATAN2, one_minus_sq(c, x), x); }
// atan(x) = 2 atan2(x, 1 + sqrt(1 + x^2)) (+-pi/2 where x^2 overflows). Not
// atan2(x, 1): XLA's CPU backend miscomputes atan2 with a constant operand
// on vectorised (>= 16 element) arrays.
static tt_hv f_atan(tt_lower_ctx *c, tt_hv x) {
  tt_hv den = add_(c, k(c, x, 1), sqrt_(c, add_(c, k(c, x, 1), mul_(c, x, x))));
  tt_hv r = mul_(c, tt_lower_bin(c, TT_HLO_ATAN2, x, den), k(c, x, 2));
  tt_hv big = cmp(c, TT_HLO_GT, un(c, TT_HLO_ABS, x), k(c, x, 1e18));
  return sel(c, big, mul_(c, un(c, TT_HLO_SIGN, x), k(c, x, M_PI_2)), r);
}

static tt_hv f_sinh(tt_lower_ctx *c, tt_hv x) {  // (expm1(x) - expm1(-x)) / 2
  tt_hv d = sub_(c, un(c, TT_HLO_EXPM1, x), un(c, TT_HLO_EXPM1, un(c, TT_HLO_NEG, x)));
  return mul_(c, d, k(c, x, 0.5));
}

static tt_hv f_cosh(tt_lower_ctx *c, tt_hv x) {  // e^|x| / 2 + e^-|x| / 2
  tt_hv a = un(c, TT_HLO_ABS, x);
  tt_hv e = un(c, TT_HLO_EXP, sub_(c, a, k(c, a, M_LN2)));  // e^|x| / 2 without overflow
  return add_(c, e, div_(c, k(c, e, 0.25), e));
}

// asinh(x) = sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2))); log(2|x|) when
// x^2 would overflow.
static tt_hv f_asinh(tt_lower_ctx *c, tt_hv x) {
  tt_hv a = un(c, TT_HLO_ABS, x);
  tt_hv a2 = mul_(c, a, a);
  tt_hv small = un(c, TT_HLO_LOG1P, add_(c, a, div_(c, a2, add_(c, k(c, a, 1),
                                                               sqrt_(c, add_(c, k(c, a, 1), a2))))));
  tt_hv big = add_(c, un(c, TT_HLO_LOG, a), k(c, a, M_LN2));
  tt_hv r = sel(c, cmp(c, TT_HLO_GT, a, k(c, a, 1e18)), big, small);
  return sel(c, cmp(c, TT_HLO_LT, x, k(c, x, 0)), un(c, TT_HLO_NEG, r), r);
}

// acosh(x) = log1p((x - 1) + sqrt((x - 1)(x + 1))); log(2x) for huge x.
static tt_hv f_acosh(tt_lower_ctx *c, tt_hv x) {
  tt_hv xm1 = sub_(c, x, k(c, x, 1));
  tt_hv small = un(c, TT_HLO_LOG1P, add_(c, xm1, sqrt_(c, mul_(c, xm1, add_(c, x, k(c, x, 1))))));
  tt_hv big = add_(c, un(c, TT_HLO_LOG, x), k(c, x, M_LN2));
  return sel(c, cmp(c, TT_HLO_GT, x, k(c, x, 1e18)), big, small);
}

// atanh(x) = log1p(2x / (1 - x)) / 2.
static tt_hv f_atanh(tt_lower_ctx *c, tt_hv x) {
  tt_hv q = div_(c, mul_(c, x, k(c, x, 2)), sub_(c, k(c, x, 1), x));
  return mul_(c, un(c, TT_HLO_LOG1P, q), k(c, x, 0.5));
}

// z op s for a real constant s: a complex z by parts, as std::log10 divides
// by log(10) (a complex division by s + 0i makes inf * 0: NaN parts).
static tt_hv by_real(tt_lower_ctx *c, tt_hlo_binop op, tt_hv z, double s) {
  if (!tt_dtype_is_complex(type_of(c, z))) return tt_lower_bin(c, op, z, k(c, z, s));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv re = tt_hlo_real(b, z), im = tt_hlo_imag(b, z);
  return tt_hlo_complex(b, tt_lower_bin(c, op, re, k(c, re, s)), tt_lower_bin(c, op, im, k(c, im, s)));
}

static tt_hv f_log2(tt_lower_ctx *c, tt_hv x) { return by_real(c, TT_HLO_DIV, cun(c, TT_HLO_LOG, x), M_LN2); }
static tt_hv f_log10(tt_lower_ctx *c, tt_hv x) { return by_real(c, TT_HLO_DIV, cun(c, TT_HLO_LOG, x), M_LN10); }
static tt_hv f_exp2(tt_lower_ctx *c, tt_hv x) {
  if (tt_dtype_is_complex(type_of(c, x))) return cun(c, TT_HLO_EXP, by_real(c, TT_HLO_MUL, x, M_LN2));
  return tt_lower_bin(c, TT_HLO_POW, k(c, x, 2), x);
}

// sinc(x) = sin(pi x) / (pi x), 1 at 0.
static tt_hv f_sinc(tt_lower_ctx *c, tt_hv x) {
  tt_hv px = mul_(c, x, k(c, x, M_PI));
  return sel(c, cmp(c, TT_HLO_EQ, x, k(c, x, 0)), k(c, x, 1), div_(c, un(c, TT_HLO_SIN, px), px));
}

static tt_status lower_asin(tt_lower_ctx *c) { return float_math(c, f_asin); }
static tt_status lower_acos(tt_lower_ctx *c) { return float_math(c, f_acos); }
static tt_status lower_atan(tt_lower_ctx *c) { return float_math(c, f_atan); }
static tt_status lower_sinh(tt_lower_ctx *c) { return float_math(c, f_sinh); }
static tt_status lower_cosh(tt_lower_ctx *c) { return float_math(c, f_cosh); }
static tt_status lower_asinh(tt_lower_ctx *c) { return float_math(c, f_asinh); }
static tt_status lower_acosh(tt_lower_ctx *c) { return float_math(c, f_acosh); }
static tt_status lower_atanh(tt_lower_ctx *c) { return float_math(c, f_atanh); }
static tt_status lower_log2(tt_lower_ctx *c) { return float_math(c, f_log2); }
static tt_status lower_log10(tt_lower_ctx *c) { return float_math(c, f_log10); }
static tt_status lower_exp2(tt_lower_ctx *c) { return float_math(c, f_exp2); }
static tt_status lower_sinc(tt_lower_ctx *c) { return float_math(c, f_sinc); }

// logit(self, eps?): log(z / (1 - z)), z = x clamped to [eps, 1 - eps].
static tt_status lower_logit(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = float_input(c, &rt);
  if (!tt_lower_is_none(c, 1)) {
    tt_hv lo = scalar_like(c, 1, x);
    tt_hv hi = sub_(c, k(c, x, 1), lo);
    x = sel(c, cmp(c, TT_HLO_LT, x, lo), lo, sel(c, cmp(c, TT_HLO_GT, x, hi), hi, x));
  }
  return out(c, un(c, TT_HLO_LOG, div_(c, x, sub_(c, k(c, x, 1), x))), rt);
}

// trunc / frac: integers are already whole.
static tt_status lower_trunc(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_lower_result(c, tt_dtype_is_float(type_of(c, x)) ? trunc_float(c, x) : x);
  return NULL;
}

static tt_status lower_frac(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  if (!tt_dtype_is_float(type_of(c, x)))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "frac is only implemented for floating "
                         "point tensors, got %s", tt_dtype_name(type_of(c, x)));
  tt_lower_result(c, sub_(c, x, trunc_float(c, x)));
  return NULL;
}

// --- float classification ----------------------------------------------------------------------

tt_hv tt_lower_sign_bit(tt_lower_ctx *c, tt_hv x) {
  tt_dtype d = type_of(c, x);
  tt_dtype bits = d == TT_F64 ? TT_I64 : d == TT_F32 ? TT_I32 : TT_I16;
  tt_hv i = tt_hlo_bitcast(tt_lower_hlo(c), x, bits);
  return cmp(c, TT_HLO_LT, i, k(c, i, 0));
}

// isinf / isposinf / isneginf (sign 0 / +1 / -1); integers never are.
static tt_status inf_test(tt_lower_ctx *c, int sign) {
  tt_hv x = tt_lower_tensor(c, 0);
  if (tt_dtype_is_complex(type_of(c, x))) {  // isinf only: either part infinite
    tt_hlo *b = tt_lower_hlo(c);
    tt_hv re = un(c, TT_HLO_ABS, tt_hlo_real(b, x)), im = un(c, TT_HLO_ABS, tt_hlo_imag(b, x));
    tt_lower_result(c, tt_lower_bin(c, TT_HLO_OR, cmp(c, TT_HLO_EQ, re, k(c, re, INFINITY)),
                                    cmp(c, TT_HLO_EQ, im, k(c, im, INFINITY))));
    return NULL;
  }
  if (!tt_dtype_is_float(type_of(c, x))) {
    tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), k(c, x, 0), TT_BOOL));
    return NULL;
  }
  tt_hv v = sign ? x : un(c, TT_HLO_ABS, x);
  tt_lower_result(c, cmp(c, TT_HLO_EQ, v, k(c, v, sign < 0 ? -INFINITY : INFINITY)));
  return NULL;
}

static tt_status lower_isinf(tt_lower_ctx *c) { return inf_test(c, 0); }
static tt_status lower_isposinf(tt_lower_ctx *c) { return inf_test(c, 1); }
static tt_status lower_isneginf(tt_lower_ctx *c) { return inf_test(c, -1); }

static tt_status lower_isfinite(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  if (tt_dtype_is_complex(type_of(c, x))) {  // both parts finite
    tt_hlo *b = tt_lower_hlo(c);
    tt_lower_result(c, tt_lower_bin(c, TT_HLO_AND, un(c, TT_HLO_IS_FINITE, tt_hlo_real(b, x)),
                                    un(c, TT_HLO_IS_FINITE, tt_hlo_imag(b, x))));
    return NULL;
  }
  tt_lower_result(c, tt_dtype_is_float(type_of(c, x))
                         ? un(c, TT_HLO_IS_FINITE, x)
                         : tt_hlo_convert(tt_lower_hlo(c), k(c, x, 1), TT_BOOL));
  return NULL;
}

static tt_status lower_signbit(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_dtype d = type_of(c, x);
  if (tt_dtype_is_float(d)) tt_lower_result(c, tt_lower_sign_bit(c, x));
  else if (d == TT_BOOL || is_unsigned(d)) tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), k(c, x, 0), TT_BOOL));
  else tt_lower_result(c, cmp(c, TT_HLO_LT, x, k(c, x, 0)));
  return NULL;
}

// nan_to_num(self, nan?, posinf?, neginf?): defaults 0 and the dtype's
// largest / lowest finite values.
static tt_status lower_nan_to_num(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_dtype d = type_of(c, x);
  if (!tt_dtype_is_float(d)) {
    tt_lower_result(c, x);
    return NULL;
  }
  double lowest, big;
  tt_dtype_bounds(d, &lowest, &big);
  tt_hv nan = tt_lower_is_none(c, 1) ? k(c, x, 0) : scalar_like(c, 1, x);
  tt_hv pos = tt_lower_is_none(c, 2) ? k(c, x, big) : scalar_like(c, 2, x);
  tt_hv neg = tt_lower_is_none(c, 3) ? k(c, x, lowest) : scalar_like(c, 3, x);
  tt_hv r = sel(c, cmp(c, TT_HLO_NE, x, x), nan, x);
  r = sel(c, cmp(c, TT_HLO_EQ, x, k(c, x, INFINITY)), pos, r);
  r = sel(c, cmp(c, TT_HLO_EQ, x, k(c, x, -INFINITY)), neg, r);
  tt_lower_result(c, r);
  return NULL;
}

// --- more binary math ----------------------------------------------------------------------------

static tt_status lower_atan2(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, true, &rt, v));
  return out(c, tt_lower_bin(c, TT_HLO_ATAN2, v[0], v[1]), rt);
}

// |a| with b's sign bit.
static tt_status lower_copysign(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, true, &rt, v));
  tt_hv a = un(c, TT_HLO_ABS, v[0]);
  return out(c, sel(c, tt_lower_sign_bit(c, v[1]), un(c, TT_HLO_NEG, a), a), rt);
}

// fmax / fmin: like maximum / minimum, but a NaN loses to a number.
static tt_status fminmax(tt_lower_ctx *c, tt_hlo_binop op) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  tt_hv r = tt_lower_bin(c, op, v[0], v[1]);
  if (tt_dtype_is_float(rt)) {
    r = sel(c, cmp(c, TT_HLO_NE, v[1], v[1]), v[0], r);
    r = sel(c, cmp(c, TT_HLO_NE, v[0], v[0]), v[1], r);
  }
  return out(c, r, rt);
}

static tt_status lower_fmax(tt_lower_ctx *c) { return fminmax(c, TT_HLO_MAX); }
static tt_status lower_fmin(tt_lower_ctx *c) { return fminmax(c, TT_HLO_MIN); }

// logaddexp(a, b) = max + log1p(exp(-|a - b|)) (base 2 for logaddexp2);
// equal infinities give themselves.
static tt_status logaddexp_like(tt_lower_ctx *c, bool base2) {
  static const int idx[2] = {0, 1};
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(promoted(c, idx, 2, &rt));
  // Not a float op in TensorIterator's sense: integer operands keep their
  // type, which PyTorch's kernels refuse.
  if (tt_dtype_is_int(rt) || rt == TT_BOOL)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "\"%s\" not implemented for '%s'",
                         base2 ? "logaddexp2" : "logaddexp", tt_dtype_torch_name(rt));
  TT_RETURN_IF_ERROR(two(c, true, &rt, v));
  tt_hv m = nmax(c, TT_HLO_MAX, v[0], v[1]);
  tt_hv d = un(c, TT_HLO_NEG, un(c, TT_HLO_ABS, sub_(c, v[0], v[1])));
  tt_hv r;
  if (base2)
    r = add_(c, m, div_(c, un(c, TT_HLO_LOG1P, tt_lower_bin(c, TT_HLO_POW, k(c, d, 2), d)), k(c, d, M_LN2)));
  else
    r = add_(c, m, un(c, TT_HLO_LOG1P, un(c, TT_HLO_EXP, d)));
  tt_hv same_inf = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_EQ, v[0], v[1]),
                       cmp(c, TT_HLO_EQ, un(c, TT_HLO_ABS, v[0]), k(c, v[0], INFINITY)));
  return out(c, sel(c, same_inf, v[0], r), rt);
}

static tt_status lower_logaddexp(tt_lower_ctx *c) { return logaddexp_like(c, false); }
static tt_status lower_logaddexp2(tt_lower_ctx *c) { return logaddexp_like(c, true); }

// hypot(a, b) = m sqrt(1 + (n/m)^2), m = max(|a|, |b|), n = min: no
// overflow; 0 when both are 0, inf when either is.
static tt_status lower_hypot(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, true, &rt, v));
  tt_hv a = un(c, TT_HLO_ABS, v[0]), b = un(c, TT_HLO_ABS, v[1]);
  tt_hv m = nmax(c, TT_HLO_MAX, a, b), n = nmax(c, TT_HLO_MIN, a, b);
  tt_hv q = div_(c, n, m);
  tt_hv r = mul_(c, m, sqrt_(c, add_(c, k(c, q, 1), mul_(c, q, q))));
  r = sel(c, cmp(c, TT_HLO_EQ, m, k(c, m, 0)), k(c, m, 0), r);
  tt_hv inf = tt_lower_bin(c, TT_HLO_OR, cmp(c, TT_HLO_EQ, a, k(c, a, INFINITY)),
                  cmp(c, TT_HLO_EQ, b, k(c, b, INFINITY)));
  return out(c, sel(c, inf, k(c, m, INFINITY), r), rt);
}

// xlogy(x, y) = x log(y) (or x log1p(y)), 0 where x == 0 unless y is NaN.
static tt_status xlogy_like(tt_lower_ctx *c, tt_hlo_unop lg) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, true, &rt, v));
  tt_hv r = mul_(c, v[0], un(c, lg, v[1]));
  r = sel(c, cmp(c, TT_HLO_EQ, v[0], k(c, v[0], 0)), k(c, r, 0), r);
  return out(c, sel(c, cmp(c, TT_HLO_NE, v[1], v[1]), v[1], r), rt);
}

static tt_status lower_xlogy(tt_lower_ctx *c) { return xlogy_like(c, TT_HLO_LOG); }
static tt_status lower_xlog1py(tt_lower_ctx *c) { return xlogy_like(c, TT_HLO_LOG1P); }

// heaviside(x, values): values where x == 0, else x > 0.
static tt_status lower_heaviside(tt_lower_ctx *c) {
  if (tt_lower_tensor_type(c, 0, -1).dtype != tt_lower_tensor_type(c, 1, -1).dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "heaviside is not yet implemented for "
                         "tensors with different dtypes");
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  tt_hv pos = tt_hlo_convert(tt_lower_hlo(c), cmp(c, TT_HLO_GT, v[0], k(c, v[0], 0)), type_of(c, v[0]));
  return out(c, sel(c, cmp(c, TT_HLO_EQ, v[0], k(c, v[0], 0)), v[1], pos), rt);
}

// bitwise_left_shift / bitwise_right_shift (arithmetic for signed types):
// StableHLO's shifts already give 0 / the sign for counts >= the width.
static tt_status shift(tt_lower_ctx *c, bool left) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(two(c, false, &rt, v));
  if (tt_dtype_is_float(rt) || rt == TT_BOOL)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "bitwise shifts are not implemented for %s",
                         tt_dtype_name(rt));
  tt_hlo_binop op = left ? TT_HLO_SHL : is_unsigned(rt) ? TT_HLO_SHR_L : TT_HLO_SHR_A;
  return out(c, tt_lower_bin(c, op, v[0], v[1]), rt);
}

static tt_status lower_shl(tt_lower_ctx *c) { return shift(c, true); }
static tt_status lower_shr(tt_lower_ctx *c) { return shift(c, false); }

// lerp(self, end, weight): PyTorch's two-sided formula, exact at both ends.
static tt_status lower_lerp(tt_lower_ctx *c) {
  static const int idx[3] = {0, 1, 2};
  tt_dtype d = tt_lower_tensor_type(c, 0, -1).dtype;
  if (tt_lower_tensor_type(c, 1, -1).dtype != d)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected dtype %s for `end` but got dtype %s",
                         tt_dtype_name(d), tt_dtype_name(tt_lower_tensor_type(c, 1, -1).dtype));
  tt_hv v[3];
  TT_RETURN_IF_ERROR(tt_lower_operands(c, idx, 3, tt_opmath(d), v));
  tt_hv w = v[2], diff = sub_(c, v[1], v[0]);
  tt_hv lo = add_(c, v[0], mul_(c, w, diff));
  tt_hv hi = sub_(c, v[1], mul_(c, diff, sub_(c, k(c, w, 1), w)));
  return out(c, sel(c, cmp(c, TT_HLO_LT, un(c, TT_HLO_ABS, w), k(c, w, 0.5)), lo, hi), d);
}

// addcmul / addcdiv(self, tensor1, tensor2, *, value): self + value * t1 op t2.
static tt_status addc(tt_lower_ctx *c, tt_hlo_binop op) {
  static const int idx[3] = {0, 1, 2};
  tt_dtype rt;
  TT_RETURN_IF_ERROR(promoted(c, idx, 3, &rt));
  if (op == TT_HLO_DIV && !tt_dtype_is_float(rt) && !tt_dtype_is_complex(rt))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Integer division with addcdiv is no longer "
                         "supported, and in a future release addcdiv will perform a true "
                         "division of tensor1 and tensor2.");
  tt_hv v[3];
  TT_RETURN_IF_ERROR(tt_lower_operands(c, idx, 3, tt_opmath(rt), v));
  tt_hv t = tt_lower_bin(c, op, v[1], op == TT_HLO_DIV ? exact_divisor(c, v[2]) : v[2]);
  if (!tt_lower_is_none(c, 3)) t = mul_(c, scalar_like(c, 3, t), t);
  return out(c, add_(c, v[0], t), rt);
}

static tt_status lower_addcmul(tt_lower_ctx *c) { return addc(c, TT_HLO_MUL); }
static tt_status lower_addcdiv(tt_lower_ctx *c) { return addc(c, TT_HLO_DIV); }

static tt_status lower_floor_divide(tt_lower_ctx *c) { return div_mode(c, "floor"); }

// --- more activations and their backward ops -----------------------------------------------------

// x converted to its float opmath dtype, with the result dtype in *rt:
// activations keep self's dtype.
static tt_hv act_input(tt_lower_ctx *c, int i, tt_dtype *rt) {
  tt_hv x = tt_lower_tensor(c, i);
  *rt = tt_lower_tensor_type(c, i, -1).dtype;
  return tt_hlo_convert(tt_lower_hlo(c), x, tt_opmath(*rt));
}

static tt_status lower_hardtanh(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = act_input(c, 0, &rt);
  tt_hv lo = tt_lower_is_none(c, 1) ? k(c, x, -1) : scalar_like(c, 1, x);
  tt_hv hi = tt_lower_is_none(c, 2) ? k(c, x, 1) : scalar_like(c, 2, x);
  return out(c, nmax(c, TT_HLO_MIN, nmax(c, TT_HLO_MAX, x, lo), hi), rt);
}

// hardtanh_backward(grad, self, min, max): grad strictly inside (min, max).
static tt_status lower_hardtanh_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, x;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &x));
  tt_hv out_of = tt_lower_bin(c, TT_HLO_OR, cmp(c, TT_HLO_LE, x, scalar_like(c, 2, x)),
                     cmp(c, TT_HLO_GE, x, scalar_like(c, 3, x)));
  return out(c, sel(c, out_of, k(c, g, 0), g), rt);
}

static tt_hv relu6_of(tt_lower_ctx *c, tt_hv x3) {  // min(max(x3, 0), 6)
  return nmax(c, TT_HLO_MIN, nmax(c, TT_HLO_MAX, x3, k(c, x3, 0)), k(c, x3, 6));
}

static tt_status lower_hardsigmoid(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = act_input(c, 0, &rt);
  return out(c, div_(c, relu6_of(c, add_(c, x, k(c, x, 3))), k(c, x, 6)), rt);
}

static tt_status lower_hardswish(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = act_input(c, 0, &rt);
  return out(c, div_(c, mul_(c, x, relu6_of(c, add_(c, x, k(c, x, 3)))), k(c, x, 6)), rt);
}

// grad / 6 where -3 < x < 3.
static tt_status lower_hardsigmoid_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, x;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &x));
  tt_hv in = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_GT, x, k(c, x, -3)), cmp(c, TT_HLO_LT, x, k(c, x, 3)));
  return out(c, sel(c, in, div_(c, g, k(c, g, 6)), k(c, g, 0)), rt);
}

// 0 below -3, grad (x / 3 + 0.5) up to 3, grad above.
static tt_status lower_hardswish_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, x;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &x));
  tt_hv mid = mul_(c, g, add_(c, div_(c, x, k(c, x, 3)), k(c, x, 0.5)));
  tt_hv r = sel(c, cmp(c, TT_HLO_LE, x, k(c, x, 3)), mid, g);
  return out(c, sel(c, cmp(c, TT_HLO_LT, x, k(c, x, -3)), k(c, g, 0), r), rt);
}

// leaky_relu(self, negative_slope=0.01).
static tt_status lower_leaky_relu(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = act_input(c, 0, &rt);
  tt_hv s = tt_lower_is_none(c, 1) ? k(c, x, 0.01) : scalar_like(c, 1, x);
  return out(c, sel(c, cmp(c, TT_HLO_GT, x, k(c, x, 0)), x, mul_(c, x, s)), rt);
}

// leaky_relu_backward(grad, self, negative_slope, self_is_result).
static tt_status lower_leaky_relu_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, x;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &x));
  return out(c, sel(c, cmp(c, TT_HLO_GT, x, k(c, x, 0)), g, mul_(c, g, scalar_like(c, 2, g))), rt);
}

// elu(self, alpha, scale, input_scale): x scale for x > 0, else
// alpha scale expm1(x input_scale).
static tt_status lower_elu(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = act_input(c, 0, &rt);
  tt_hv alpha = tt_lower_is_none(c, 1) ? k(c, x, 1) : scalar_like(c, 1, x);
  tt_hv scale = tt_lower_is_none(c, 2) ? k(c, x, 1) : scalar_like(c, 2, x);
  tt_hv iscale = tt_lower_is_none(c, 3) ? k(c, x, 1) : scalar_like(c, 3, x);
  tt_hv neg = mul_(c, mul_(c, alpha, scale), un(c, TT_HLO_EXPM1, mul_(c, x, iscale)));
  return out(c, sel(c, cmp(c, TT_HLO_GT, x, k(c, x, 0)), mul_(c, x, scale), neg), rt);
}

// elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result).
static tt_status lower_elu_backward(tt_lower_ctx *c) {
  static const int idx[2] = {0, 5};
  tt_dtype rt;
  TT_RETURN_IF_ERROR(promoted(c, idx, 2, &rt));
  tt_hv v[2];
  TT_RETURN_IF_ERROR(tt_lower_operands(c, idx, 2, tt_opmath(rt), v));
  tt_hv g = v[0], y = v[1];
  tt_hv alpha = scalar_like(c, 1, y), scale = scalar_like(c, 2, y), iscale = scalar_like(c, 3, y);
  tt_hv neg;
  if (tt_lower_bool(c, 4))  // y is the result: d = iscale (y + alpha scale)
    neg = mul_(c, mul_(c, g, iscale), add_(c, y, mul_(c, alpha, scale)));
  else
    neg = mul_(c, mul_(c, mul_(c, g, iscale), mul_(c, alpha, scale)),
               un(c, TT_HLO_EXP, mul_(c, y, iscale)));
  return out(c, sel(c, cmp(c, TT_HLO_LE, y, k(c, y, 0)), neg, mul_(c, g, scale)), rt);
}

// softplus(self, beta, threshold): log1p(exp(x beta)) / beta, x past the
// threshold.
static tt_status lower_softplus(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = act_input(c, 0, &rt);
  tt_hv beta = scalar_like(c, 1, x), th = scalar_like(c, 2, x);
  tt_hv xb = mul_(c, x, beta);
  tt_hv sp = div_(c, un(c, TT_HLO_LOG1P, un(c, TT_HLO_EXP, xb)), beta);
  return out(c, sel(c, cmp(c, TT_HLO_GT, xb, th), x, sp), rt);
}

// softplus_backward(grad, self, beta, threshold): grad z / (z + 1), z = e^(x beta).
static tt_status lower_softplus_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, x;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &x));
  tt_hv xb = mul_(c, x, scalar_like(c, 2, x));
  tt_hv z = un(c, TT_HLO_EXP, xb);
  tt_hv d = mul_(c, g, div_(c, z, add_(c, z, k(c, z, 1))));
  return out(c, sel(c, cmp(c, TT_HLO_GT, xb, scalar_like(c, 3, x)), g, d), rt);
}

// mish(x) = x tanh(softplus(x)).
static tt_hv softplus1(tt_lower_ctx *c, tt_hv x) {
  tt_hv sp = un(c, TT_HLO_LOG1P, un(c, TT_HLO_EXP, x));
  return sel(c, cmp(c, TT_HLO_GT, x, k(c, x, 20)), x, sp);
}

static tt_status lower_mish(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = act_input(c, 0, &rt);
  return out(c, mul_(c, x, un(c, TT_HLO_TANH, softplus1(c, x))), rt);
}

// mish_backward(grad, self): grad (t + x sigmoid(x) (1 - t^2)), t = tanh(softplus(x)).
static tt_status lower_mish_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, x;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &x));
  tt_hv t = un(c, TT_HLO_TANH, un(c, TT_HLO_LOG1P, un(c, TT_HLO_EXP, x)));
  tt_hv s = un(c, TT_HLO_LOGISTIC, x);
  tt_hv d = add_(c, t, mul_(c, mul_(c, x, s), sub_(c, k(c, t, 1), mul_(c, t, t))));
  return out(c, mul_(c, g, d), rt);
}

// threshold(self, threshold, value): value where x <= threshold.
static tt_status lower_threshold(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  if (type_of(c, x) == TT_BOOL) return tt_lower_fail(c, TT_UNIMPLEMENTED, "threshold of bool");
  tt_lower_result(c, sel(c, cmp(c, TT_HLO_LE, x, scalar_like(c, 1, x)), scalar_like(c, 2, x), x));
  return NULL;
}

// softshrink(x, lambd): x -+ lambd outside [-lambd, lambd], else 0 (NaN stays).
static tt_status lower_softshrink(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = act_input(c, 0, &rt);
  tt_hv l = tt_lower_is_none(c, 1) ? k(c, x, 0.5) : scalar_like(c, 1, x);
  tt_hv r = sel(c, cmp(c, TT_HLO_LT, x, un(c, TT_HLO_NEG, l)), add_(c, x, l), mul_(c, x, k(c, x, 0)));
  return out(c, sel(c, cmp(c, TT_HLO_GT, x, l), sub_(c, x, l), r), rt);
}

// hardshrink(x, lambd): 0 inside [-lambd, lambd], x elsewhere.
static tt_status lower_hardshrink(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = act_input(c, 0, &rt);
  tt_hv l = tt_lower_is_none(c, 1) ? k(c, x, 0.5) : scalar_like(c, 1, x);
  tt_hv in = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_GE, x, un(c, TT_HLO_NEG, l)), cmp(c, TT_HLO_LE, x, l));
  return out(c, sel(c, in, k(c, x, 0), x), rt);
}

// log_sigmoid_forward(self) -> (output, buffer): min(x, 0) - log1p(e^-|x|),
// and the buffer e^-|x| PyTorch's CPU kernel saves.
static tt_status lower_log_sigmoid_forward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = act_input(c, 0, &rt);
  tt_hv z = un(c, TT_HLO_EXP, un(c, TT_HLO_NEG, un(c, TT_HLO_ABS, x)));
  tt_hv r = sub_(c, nmax(c, TT_HLO_MIN, x, k(c, x, 0)), un(c, TT_HLO_LOG1P, z));
  TT_RETURN_IF_ERROR(out(c, r, rt));
  return out(c, z, rt);
}

// log_sigmoid_backward(grad, self, buffer): grad (m - s z / (1 + z)),
// z = e^-|x|, m = 1 and s = 1 for x < 0, m = 0 and s = -1 otherwise.
static tt_status lower_log_sigmoid_backward(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv g, x;
  TT_RETURN_IF_ERROR(grad_and(c, &rt, &g, &x));
  tt_hv z = un(c, TT_HLO_EXP, un(c, TT_HLO_NEG, un(c, TT_HLO_ABS, x)));
  tt_hv q = div_(c, z, add_(c, k(c, z, 1), z));
  tt_hv neg = cmp(c, TT_HLO_LT, x, k(c, x, 0));
  return out(c, mul_(c, g, sel(c, neg, sub_(c, k(c, q, 1), q), q)), rt);
}

// --- the table ---------------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
#define RC(name, fn) {"aten::" name, fn, TT_RULE_COMPLEX}  // complex-capable
// The functional, in-place and out= forms of one op.
#define U(name, fn) R(name, fn), R(name "_", fn), R(name ".out", fn)
#define UC(name, fn) RC(name, fn), RC(name "_", fn), RC(name ".out", fn)
static const tt_rule kRules[] = {
    RC("add.Tensor", lower_add), RC("add_.Tensor", lower_add), RC("add.out", lower_add),
    RC("add.Scalar", lower_add), RC("add_.Scalar", lower_add), RC("add.Scalar_out", lower_add),
    RC("sub.Tensor", lower_sub), RC("sub_.Tensor", lower_sub), RC("sub.out", lower_sub),
    RC("sub.Scalar", lower_sub), RC("sub_.Scalar", lower_sub), RC("sub.Scalar_out", lower_sub),
    RC("rsub.Tensor", lower_rsub), RC("rsub.Scalar", lower_rsub),
    RC("rsub.Tensor_out", lower_rsub), RC("rsub.Scalar_out", lower_rsub),
    RC("mul.Tensor", lower_mul), RC("mul_.Tensor", lower_mul), RC("mul.out", lower_mul),
    RC("mul.Scalar", lower_mul), RC("mul_.Scalar", lower_mul), RC("mul.Scalar_out", lower_mul),
    RC("div.Tensor", lower_div), RC("div_.Tensor", lower_div), RC("div.out", lower_div),
    RC("div.Scalar", lower_div), RC("div_.Scalar", lower_div), RC("div.Scalar_out", lower_div),
    RC("div.Tensor_mode", lower_div), RC("div_.Tensor_mode", lower_div),
    RC("div.out_mode", lower_div), RC("div.Scalar_mode", lower_div),
    RC("div_.Scalar_mode", lower_div), RC("div.Scalar_mode_out", lower_div),
    R("remainder.Tensor", lower_remainder), R("remainder_.Tensor", lower_remainder),
    R("remainder.Tensor_out", lower_remainder), R("remainder.Scalar", lower_remainder),
    R("remainder_.Scalar", lower_remainder), R("remainder.Scalar_out", lower_remainder),
    R("remainder.Scalar_Tensor", lower_remainder),
    R("fmod.Tensor", lower_fmod), R("fmod_.Tensor", lower_fmod), R("fmod.Tensor_out", lower_fmod),
    R("fmod.Scalar", lower_fmod), R("fmod_.Scalar", lower_fmod), R("fmod.Scalar_out", lower_fmod),
    RC("pow.Tensor_Tensor", lower_pow), RC("pow_.Tensor", lower_pow),
    RC("pow.Tensor_Tensor_out", lower_pow), RC("pow.Tensor_Scalar", lower_pow),
    RC("pow_.Scalar", lower_pow), RC("pow.Tensor_Scalar_out", lower_pow),
    RC("pow.Scalar", lower_pow), RC("pow.Scalar_out", lower_pow),
    RC("neg", lower_neg), RC("neg_", lower_neg), RC("neg.out", lower_neg),
    RC("abs", lower_abs), R("abs_", lower_abs), RC("abs.out", lower_abs),
    RC("exp", lower_exp), RC("exp_", lower_exp), RC("exp.out", lower_exp),
    RC("expm1", lower_expm1), RC("expm1_", lower_expm1), RC("expm1.out", lower_expm1),
    RC("log", lower_log), RC("log_", lower_log), RC("log.out", lower_log),
    RC("log1p", lower_log1p), RC("log1p_", lower_log1p), RC("log1p.out", lower_log1p),
    RC("sqrt", lower_sqrt), RC("sqrt_", lower_sqrt), RC("sqrt.out", lower_sqrt),
    RC("rsqrt", lower_rsqrt), RC("rsqrt_", lower_rsqrt), RC("rsqrt.out", lower_rsqrt),
    RC("sin", lower_sin), RC("sin_", lower_sin), RC("sin.out", lower_sin),
    RC("cos", lower_cos), RC("cos_", lower_cos), RC("cos.out", lower_cos),
    RC("tan", lower_tan), RC("tan_", lower_tan), RC("tan.out", lower_tan),
    RC("tanh", lower_tanh), RC("tanh_", lower_tanh), RC("tanh.out", lower_tanh),
    R("erf", lower_erf), R("erf_", lower_erf), R("erf.out", lower_erf),
    RC("sigmoid", lower_sigmoid), RC("sigmoid_", lower_sigmoid), RC("sigmoid.out", lower_sigmoid),
    RC("reciprocal", lower_reciprocal), RC("reciprocal_", lower_reciprocal),
    RC("reciprocal.out", lower_reciprocal),
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
    RC("sigmoid_backward", lower_sigmoid_backward),
    RC("sigmoid_backward.grad_input", lower_sigmoid_backward),
    RC("tanh_backward", lower_tanh_backward), RC("tanh_backward.grad_input", lower_tanh_backward),
    R("gelu_backward", lower_gelu_backward), R("gelu_backward.grad_input", lower_gelu_backward),
    R("silu_backward", lower_silu_backward), R("silu_backward.grad_input", lower_silu_backward),
    RC("eq.Tensor", lower_eq), RC("eq_.Tensor", lower_eq), RC("eq.Tensor_out", lower_eq),
    RC("eq.Scalar", lower_eq), RC("eq_.Scalar", lower_eq), RC("eq.Scalar_out", lower_eq),
    RC("ne.Tensor", lower_ne), RC("ne_.Tensor", lower_ne), RC("ne.Tensor_out", lower_ne),
    RC("ne.Scalar", lower_ne), RC("ne_.Scalar", lower_ne), RC("ne.Scalar_out", lower_ne),
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
    RC("where.self", lower_where), RC("where.self_out", lower_where),
    RC("where.ScalarSelf", lower_where), RC("where.ScalarOther", lower_where),
    RC("where.Scalar", lower_where),
    RC("logical_not", lower_logical_not), RC("logical_not_", lower_logical_not),
    RC("logical_not.out", lower_logical_not),
    RC("logical_and", lower_logical_and), RC("logical_and_", lower_logical_and),
    RC("logical_and.out", lower_logical_and),
    RC("logical_or", lower_logical_or), RC("logical_or_", lower_logical_or),
    RC("logical_or.out", lower_logical_or),
    RC("logical_xor", lower_logical_xor), RC("logical_xor_", lower_logical_xor),
    RC("logical_xor.out", lower_logical_xor),
    R("bitwise_not", lower_bitwise_not), R("bitwise_not_", lower_bitwise_not),
    R("bitwise_not.out", lower_bitwise_not),
    R("bitwise_and.Tensor", lower_bitwise_and), R("bitwise_and_.Tensor", lower_bitwise_and),
    R("bitwise_and.Tensor_out", lower_bitwise_and), R("bitwise_and.Scalar", lower_bitwise_and),
    R("bitwise_or.Tensor", lower_bitwise_or), R("bitwise_or_.Tensor", lower_bitwise_or),
    R("bitwise_or.Tensor_out", lower_bitwise_or), R("bitwise_or.Scalar", lower_bitwise_or),
    R("bitwise_xor.Tensor", lower_bitwise_xor), R("bitwise_xor_.Tensor", lower_bitwise_xor),
    R("bitwise_xor.Tensor_out", lower_bitwise_xor), R("bitwise_xor.Scalar", lower_bitwise_xor),
    RC("isnan", lower_isnan),
    U("asin", lower_asin), U("acos", lower_acos), U("atan", lower_atan),
    U("sinh", lower_sinh), U("cosh", lower_cosh), U("asinh", lower_asinh),
    U("acosh", lower_acosh), U("atanh", lower_atanh),
    UC("log2", lower_log2), UC("log10", lower_log10), UC("exp2", lower_exp2), U("sinc", lower_sinc),
    U("logit", lower_logit), U("trunc", lower_trunc), U("fix", lower_trunc), U("frac", lower_frac),
    U("nan_to_num", lower_nan_to_num), UC("sgn", lower_sgn), U("atan2", lower_atan2),
    U("arctan2", lower_atan2),
    RC("isinf", lower_isinf), R("isinf.out", lower_isinf), R("isposinf", lower_isposinf), R("isposinf.out", lower_isposinf),
    R("isneginf", lower_isneginf), R("isneginf.out", lower_isneginf),
    RC("isfinite", lower_isfinite), R("signbit", lower_signbit), R("signbit.out", lower_signbit),
    R("copysign.Tensor", lower_copysign), R("copysign_.Tensor", lower_copysign),
    R("copysign.out", lower_copysign), R("copysign.Scalar", lower_copysign),
    R("copysign_.Scalar", lower_copysign), R("copysign.Scalar_out", lower_copysign),
    R("fmax", lower_fmax), R("fmax.out", lower_fmax), R("fmin", lower_fmin), R("fmin.out", lower_fmin),
    U("logaddexp", lower_logaddexp), U("logaddexp2", lower_logaddexp2), U("hypot", lower_hypot),
    R("xlogy.Tensor", lower_xlogy), R("xlogy_.Tensor", lower_xlogy), R("xlogy.OutTensor", lower_xlogy),
    R("xlogy.Scalar_Other", lower_xlogy), R("xlogy_.Scalar_Other", lower_xlogy),
    R("xlogy.OutScalar_Other", lower_xlogy), R("xlogy.Scalar_Self", lower_xlogy),
    R("xlogy.OutScalar_Self", lower_xlogy),
    R("special_xlog1py", lower_xlog1py), R("special_xlog1py.out", lower_xlog1py),
    R("special_xlog1py.other_scalar", lower_xlog1py), R("special_xlog1py.self_scalar", lower_xlog1py),
    R("special_xlog1py.other_scalar_out", lower_xlog1py),
    R("special_xlog1py.self_scalar_out", lower_xlog1py),
    U("heaviside", lower_heaviside),
    R("floor_divide", lower_floor_divide), R("floor_divide_.Tensor", lower_floor_divide),
    R("floor_divide.out", lower_floor_divide), R("floor_divide.Scalar", lower_floor_divide),
    R("floor_divide_.Scalar", lower_floor_divide), R("floor_divide.Scalar_out", lower_floor_divide),
    R("bitwise_left_shift.Tensor", lower_shl), R("bitwise_left_shift_.Tensor", lower_shl),
    R("bitwise_left_shift.Tensor_out", lower_shl), R("bitwise_left_shift.Tensor_Scalar", lower_shl),
    R("bitwise_left_shift_.Tensor_Scalar", lower_shl),
    R("bitwise_left_shift.Tensor_Scalar_out", lower_shl),
    R("bitwise_left_shift.Scalar_Tensor", lower_shl),
    R("bitwise_left_shift.Scalar_Tensor_out", lower_shl),
    R("bitwise_right_shift.Tensor", lower_shr), R("bitwise_right_shift_.Tensor", lower_shr),
    R("bitwise_right_shift.Tensor_out", lower_shr), R("bitwise_right_shift.Tensor_Scalar", lower_shr),
    R("bitwise_right_shift_.Tensor_Scalar", lower_shr),
    R("bitwise_right_shift.Tensor_Scalar_out", lower_shr),
    R("bitwise_right_shift.Scalar_Tensor", lower_shr),
    R("bitwise_right_shift.Scalar_Tensor_out", lower_shr),
    R("__lshift__.Tensor", lower_shl), R("__lshift__.Scalar", lower_shl),
    R("__ilshift__.Tensor", lower_shl), R("__ilshift__.Scalar", lower_shl),
    R("__rshift__.Tensor", lower_shr), R("__rshift__.Scalar", lower_shr),
    R("__irshift__.Tensor", lower_shr), R("__irshift__.Scalar", lower_shr),
    R("lerp.Scalar", lower_lerp), R("lerp_.Scalar", lower_lerp), R("lerp.Scalar_out", lower_lerp),
    R("lerp.Tensor", lower_lerp), R("lerp_.Tensor", lower_lerp), R("lerp.Tensor_out", lower_lerp),
    UC("addcmul", lower_addcmul), UC("addcdiv", lower_addcdiv),
    U("hardtanh", lower_hardtanh), R("hardtanh_backward", lower_hardtanh_backward),
    R("hardtanh_backward.grad_input", lower_hardtanh_backward),
    U("hardsigmoid", lower_hardsigmoid), R("hardsigmoid_backward", lower_hardsigmoid_backward),
    R("hardsigmoid_backward.grad_input", lower_hardsigmoid_backward),
    U("hardswish", lower_hardswish), R("hardswish_backward", lower_hardswish_backward),
    R("hardswish_backward.out", lower_hardswish_backward),
    U("leaky_relu", lower_leaky_relu), R("leaky_relu_backward", lower_leaky_relu_backward),
    R("leaky_relu_backward.grad_input", lower_leaky_relu_backward),
    U("elu", lower_elu), R("elu_backward", lower_elu_backward),
    R("elu_backward.grad_input", lower_elu_backward),
    R("softplus", lower_softplus), R("softplus.out", lower_softplus),
    R("softplus_backward", lower_softplus_backward),
    R("softplus_backward.grad_input", lower_softplus_backward),
    U("mish", lower_mish), R("mish_backward", lower_mish_backward),
    U("threshold", lower_threshold),
    R("softshrink", lower_softshrink), R("softshrink.out", lower_softshrink),
    R("hardshrink", lower_hardshrink), R("hardshrink.out", lower_hardshrink),
    R("log_sigmoid_forward", lower_log_sigmoid_forward),
    R("log_sigmoid_forward.output", lower_log_sigmoid_forward),
    R("log_sigmoid_backward", lower_log_sigmoid_backward),
    R("log_sigmoid_backward.grad_input", lower_log_sigmoid_backward),
    RC("copy_", lower_copy), RC("copy", lower_copy),
    RC("fill_.Scalar", lower_fill), RC("fill_.Tensor", lower_fill),
    RC("fill.Scalar", lower_fill), RC("fill.Tensor", lower_fill),
    RC("zero_", lower_zero), RC("zero", lower_zero),
    RC("conj_physical", lower_conj_physical), RC("conj_physical.out", lower_conj_physical),
    RC("_conj_physical", lower_conj_physical), RC("conj_physical_", lower_conj_physical),
    RC("complex", lower_complex), RC("complex.out", lower_complex),
    RC("polar", lower_polar), RC("polar.out", lower_polar),
    RC("masked_fill_.Scalar", lower_masked_fill), RC("masked_fill_.Tensor", lower_masked_fill),
    RC("masked_fill.Scalar", lower_masked_fill), RC("masked_fill.Tensor", lower_masked_fill),
    RC("masked_fill.Scalar_out", lower_masked_fill),
    RC("masked_fill.Tensor_out", lower_masked_fill),
};
#undef R
#undef RC
#undef U
#undef UC

const tt_rule_table tt_rules_elementwise = {kRules, (int)(sizeof kRules / sizeof kRules[0])};

// pow.Tensor_Scalar / pow_.Scalar(self, exponent): PyTorch refuses an
// integer tensor to a negative integer power (each call: the exponent is a
// runtime argument). A tensor exponent is not checked, as in PyTorch.
static tt_status check_pow_scalar(const tt_op_call *call) {
  if (call->nargs < 2 || call->args[0].kind != TT_VALUE_TENSOR ||
      call->args[1].kind != TT_VALUE_SCALAR)
    return NULL;
  tt_dtype self = call->args[0].u.tensor.dtype;
  const tt_scalar *e = &call->args[1].u.scalar;
  bool int_self = !tt_dtype_is_float(self) && !tt_dtype_is_complex(self);
  bool int_exp = !tt_dtype_is_float(e->dtype) && !tt_dtype_is_complex(e->dtype);
  if (int_self && int_exp && e->i < 0)
    return tt_make_status(TT_INVALID_ARGUMENT, "Integers to negative integer powers are not allowed.");
  return NULL;
}

static double scalar_value(const tt_scalar *s) {
  return tt_dtype_is_float(s->dtype) || tt_dtype_is_complex(s->dtype) ? s->f : (double)s->i;
}

// softshrink(self, lambd): ATen's range check on lambd (a runtime argument).
static tt_status check_softshrink(const tt_op_call *call) {
  if (call->nargs < 2 || call->args[0].kind != TT_VALUE_TENSOR ||
      call->args[1].kind != TT_VALUE_SCALAR)
    return NULL;
  tt_dtype dt = call->args[0].u.tensor.dtype;
  double l = scalar_value(&call->args[1].u.scalar), lo, hi;
  tt_dtype_bounds(dt, &lo, &hi);
  if (!(l >= 0 && l <= hi))
    return tt_make_status(TT_INVALID_ARGUMENT, "lambda must be in range [0, %g] for input dtype "
                          "%s, but found %g", hi, tt_dtype_torch_name(dt), l);
  return NULL;
}

// The backward of an in-place activation run with a negative slope cannot
// recover its input from the result: ATen refuses it (arguments: the slope
// at `slope`, the "is result" flag at `flag`).
static tt_status check_inplace_slope(const tt_op_call *call, int slope, int flag,
                                     const char *what, const char *tail) {
  if (call->nargs <= flag || call->args[slope].kind != TT_VALUE_SCALAR ||
      call->args[flag].kind != TT_VALUE_BOOL || !call->args[flag].u.b)
    return NULL;
  if (scalar_value(&call->args[slope].u.scalar) >= 0) return NULL;
  return tt_make_status(TT_INVALID_ARGUMENT, "In-place %s backward calculation is triggered "
                        "with a negative slope which is not supported. This is caused by "
                        "calling in-place forward function with a negative slope, please call "
                        "out-of-place version instead.%s", what, tail);
}

// elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result)
static tt_status check_elu_backward(const tt_op_call *call) {
  return check_inplace_slope(call, 1, 4, "elu", "");
}

// leaky_relu_backward(grad, self, negative_slope, self_is_result)
static tt_status check_leaky_relu_backward(const tt_op_call *call) {
  return check_inplace_slope(call, 2, 3, "leakyReLu",
                             " File an issue at https://github.com/pytorch/pytorch if you do "
                             "require supporting in-place leakRelu backward calculation with "
                             "negative slope");
}

static const tt_rule_check kChecks[] = {
    {"aten::softshrink", check_softshrink},
    {"aten::softshrink.out", check_softshrink},
    {"aten::elu_backward", check_elu_backward},
    {"aten::elu_backward.grad_input", check_elu_backward},
    {"aten::leaky_relu_backward", check_leaky_relu_backward},
    {"aten::leaky_relu_backward.grad_input", check_leaky_relu_backward},
    {"aten::pow.Tensor_Scalar", check_pow_scalar},
    {"aten::pow_.Scalar", check_pow_scalar},
    {"aten::pow.Tensor_Scalar_out", check_pow_scalar},
};
const tt_rule_checks tt_checks_elementwise = {kChecks, (int)(sizeof kChecks / sizeof kChecks[0])};

static const tt_rule_variant kVariants[] = {
    {"aten::pow.Tensor_Scalar", pow_variant},
    {"aten::pow_.Scalar", pow_variant},
    {"aten::pow.Tensor_Scalar_out", pow_variant},
};
const tt_rule_variants tt_variants_elementwise = {kVariants,
                                                  (int)(sizeof kVariants / sizeof kVariants[0])};
