// cpow.c — complex a ** e as PyTorch's CPU computes it.
//
// ATen's complex pow is std::pow, which libstdc++ hands to glibc's cpow:
// cexp(e * clog(a)), the product in C's complex arithmetic (Annex G's
// __muldc3, which recovers infinities from a NaN + iNaN product). XLA's own
// complex power multiplied |a|^re(e) by e^(-im(e) arg a), which is inf * 0 =
// NaN wherever the result overflows or underflows: (-1.1e4-2.9e3i) **
// (-7.7e3+1.4e4i) is -0 - 0i on the CPU and was NaN + iNaN here.
//
// Each step follows glibc's special cases (clog's and cexp's), so zeros,
// infinities and NaNs in either operand come out as on the CPU.
#include <float.h>
#include <math.h>

#include "lower/lower.h"

typedef struct {
  tt_hv re, im;
} cx;

static tt_hv bin(tt_lower_ctx *c, tt_hlo_binop op, tt_hv x, tt_hv y) {
  return tt_lower_bin(c, op, x, y);
}

static tt_hv sel(tt_lower_ctx *c, tt_hv p, tt_hv x, tt_hv y) {
  return tt_hlo_select(tt_lower_hlo(c), p, x, y);
}

static tt_hv k(tt_lower_ctx *c, tt_hv like, double v) {
  return tt_lower_splat_like(c, like, v);
}

static tt_hv is_nan(tt_lower_ctx *c, tt_hv x) {
  return tt_hlo_compare(tt_lower_hlo(c), TT_HLO_NE, x, x);
}

static tt_hv is_inf(tt_lower_ctx *c, tt_hv x) {
  tt_hv a = tt_hlo_unary(tt_lower_hlo(c), TT_HLO_ABS, x);
  return tt_hlo_compare(tt_lower_hlo(c), TT_HLO_EQ, a, k(c, x, INFINITY));
}

static tt_hv or_(tt_lower_ctx *c, tt_hv p, tt_hv q) { return bin(c, TT_HLO_OR, p, q); }

// |m| with s's sign bit.
static tt_hv copysign_(tt_lower_ctx *c, tt_hv m, tt_hv s) {
  tt_hv a = tt_hlo_unary(tt_lower_hlo(c), TT_HLO_ABS, m);
  return sel(c, tt_lower_sign_bit(c, s), tt_hlo_unary(tt_lower_hlo(c), TT_HLO_NEG, a), a);
}

// __muldc3's recovery, for one operand (x, y) beside the other (u, v):
// an infinite part becomes +-1, the rest +-0; the other's NaNs become +-0.
static void box_infinities(tt_lower_ctx *c, tt_hv *x, tt_hv *y, tt_hv *u, tt_hv *v,
                           tt_hv *recalc) {
  tt_hv any = or_(c, is_inf(c, *x), is_inf(c, *y));
  tt_hv one = k(c, *x, 1), zero = k(c, *x, 0);
  tt_hv bx = copysign_(c, sel(c, is_inf(c, *x), one, zero), *x);
  tt_hv by = copysign_(c, sel(c, is_inf(c, *y), one, zero), *y);
  tt_hv bu = sel(c, is_nan(c, *u), copysign_(c, zero, *u), *u);
  tt_hv bv = sel(c, is_nan(c, *v), copysign_(c, zero, *v), *v);
  *x = sel(c, any, bx, *x);
  *y = sel(c, any, by, *y);
  *u = sel(c, any, bu, *u);
  *v = sel(c, any, bv, *v);
  *recalc = or_(c, *recalc, any);
}

// (a + ib)(c + id) in C's complex arithmetic (libgcc's __muldc3).
static cx mul(tt_lower_ctx *c, cx p, cx q) {
  tt_hv a = p.re, b = p.im, cc = q.re, d = q.im;
  tt_hv ac = bin(c, TT_HLO_MUL, a, cc), bd = bin(c, TT_HLO_MUL, b, d);
  tt_hv ad = bin(c, TT_HLO_MUL, a, d), bc = bin(c, TT_HLO_MUL, b, cc);
  cx r = {bin(c, TT_HLO_SUB, ac, bd), bin(c, TT_HLO_ADD, ad, bc)};
  tt_hv both_nan = bin(c, TT_HLO_AND, is_nan(c, r.re), is_nan(c, r.im));
  tt_hv recalc = tt_hlo_compare(tt_lower_hlo(c), TT_HLO_NE, k(c, a, 0), k(c, a, 0));  // false
  box_infinities(c, &a, &b, &cc, &d, &recalc);
  box_infinities(c, &cc, &d, &a, &b, &recalc);
  // No infinite operand but an infinite partial product (overflow): NaN
  // parts become +-0 and the product is recomputed.
  tt_hv over = or_(c, or_(c, is_inf(c, ac), is_inf(c, bd)), or_(c, is_inf(c, ad), is_inf(c, bc)));
  over = bin(c, TT_HLO_AND, over, tt_hlo_unary(tt_lower_hlo(c), TT_HLO_NOT, recalc));
  tt_hv *parts[4] = {&a, &b, &cc, &d};
  for (int i = 0; i < 4; i++) {
    tt_hv z = copysign_(c, k(c, *parts[i], 0), *parts[i]);
    *parts[i] = sel(c, bin(c, TT_HLO_AND, over, is_nan(c, *parts[i])), z, *parts[i]);
  }
  recalc = bin(c, TT_HLO_AND, both_nan, or_(c, recalc, over));
  tt_hv inf = k(c, a, INFINITY);
  tt_hv re = bin(c, TT_HLO_MUL, inf, bin(c, TT_HLO_SUB, bin(c, TT_HLO_MUL, a, cc),
                                          bin(c, TT_HLO_MUL, b, d)));
  tt_hv im = bin(c, TT_HLO_MUL, inf, bin(c, TT_HLO_ADD, bin(c, TT_HLO_MUL, a, d),
                                          bin(c, TT_HLO_MUL, b, cc)));
  return (cx){sel(c, recalc, re, r.re), sel(c, recalc, im, r.im)};
}

// x + y and its rounding error (Knuth's two-sum).
static tt_hv two_sum_err(tt_lower_ctx *c, tt_hv x, tt_hv y, tt_hv s) {
  tt_hv yy = bin(c, TT_HLO_SUB, s, x), xx = bin(c, TT_HLO_SUB, s, yy);
  return bin(c, TT_HLO_ADD, bin(c, TT_HLO_SUB, x, xx), bin(c, TT_HLO_SUB, y, yy));
}

// log|z| as glibc's clog takes it: near |z| = 1, log1p(x^2 + y^2 - 1) / 2
// with x^2 + y^2 - 1 summed from exact squares (log(hypot) would give 0 for
// 1 + 1e-30i, where glibc gives 5e-61, and e ** 1e300 of it is inf, not 1);
// elsewhere log of PyTorch's abs. complex64's parts work in float64.
static tt_hv log_abs(tt_lower_ctx *c, tt_hv z) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv re = tt_hlo_real(b, z);
  tt_dtype part = tt_hlo_type_of(b, re)->dtype;
  tt_hv x = tt_hlo_unary(b, TT_HLO_ABS, tt_hlo_convert(b, re, TT_F64));
  tt_hv y = tt_hlo_unary(b, TT_HLO_ABS, tt_hlo_convert(b, tt_hlo_imag(b, z), TT_F64));
  tt_hv hi = bin(c, TT_HLO_MAX, x, y), lo = bin(c, TT_HLO_MIN, x, y);
  tt_hv ph = bin(c, TT_HLO_MUL, hi, hi), pl = bin(c, TT_HLO_MUL, lo, lo);
  tt_hv s1 = bin(c, TT_HLO_SUB, ph, k(c, ph, 1));  // exact for ph in [0.5, 2]
  tt_hv s = bin(c, TT_HLO_ADD, s1, pl);
  tt_hv err = two_sum_err(c, s1, pl, s);
  err = bin(c, TT_HLO_ADD, err, bin(c, TT_HLO_ADD, tt_lower_prod_err(c, hi, hi, ph),
                                    tt_lower_prod_err(c, lo, lo, pl)));
  tt_hv d = bin(c, TT_HLO_ADD, s, err);  // x^2 + y^2 - 1
  // (XLA's max and min may drop a NaN operand: NaN parts go the far way.)
  tt_hv near1 = bin(c, TT_HLO_AND, tt_hlo_compare(b, TT_HLO_GE, d, k(c, d, -0.5)),
                    tt_hlo_compare(b, TT_HLO_LE, d, k(c, d, 1.0)));
  near1 = bin(c, TT_HLO_AND, near1,
              tt_hlo_unary(b, TT_HLO_NOT, or_(c, is_nan(c, x), is_nan(c, y))));
  tt_hv l1 = bin(c, TT_HLO_MUL, tt_hlo_unary(b, TT_HLO_LOG1P, d), k(c, d, 0.5));
  tt_hv mag = tt_lower_complex_abs(c, z);
  tt_hv far = tt_hlo_unary(b, TT_HLO_LOG, tt_hlo_convert(b, mag, TT_F64));
  return tt_hlo_convert(b, sel(c, near1, l1, far), part);
}

// glibc's clog: (log|z|, atan2(im, re)); a zero gives -inf, an infinite
// part +inf (through PyTorch's abs).
static cx clog_(tt_lower_ctx *c, tt_hv z) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv re = tt_hlo_real(b, z), im = tt_hlo_imag(b, z);
  return (cx){log_abs(c, z), bin(c, TT_HLO_ATAN2, im, re)};
}

// glibc's cexp: exp(x) (cos y + i sin y), exp(x) taken in factors of
// exp(T), T = (max_exp - 1) ln 2, while x > T, so that a finite result is
// not lost to an intermediate inf; past 3T it is MAX * (cos y, sin y).
// y == 0 gives sin = y, cos = 1 exactly; the non-finite cases as glibc.
static cx cexp_(tt_lower_ctx *c, cx t) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv x = t.re, y = t.im;
  bool f64 = tt_hlo_type_of(b, x)->dtype == TT_F64;
  double T = f64 ? (DBL_MAX_EXP - 1) * M_LN2 : (FLT_MAX_EXP - 1) * M_LN2;
  tt_hv zero = k(c, x, 0), one = k(c, x, 1);
  tt_hv y0 = tt_hlo_compare(b, TT_HLO_EQ, y, zero);
  tt_hv sn = sel(c, y0, y, tt_hlo_unary(b, TT_HLO_SIN, y));
  tt_hv cs = sel(c, y0, one, tt_hlo_unary(b, TT_HLO_COS, y));
  tt_hv expT = k(c, x, f64 ? exp(T) : (double)expf((float)T));
  for (int i = 0; i < 2; i++) {
    tt_hv big = tt_hlo_compare(b, TT_HLO_GT, x, k(c, x, T));
    x = sel(c, big, bin(c, TT_HLO_SUB, x, k(c, x, T)), x);
    sn = sel(c, big, bin(c, TT_HLO_MUL, sn, expT), sn);
    cs = sel(c, big, bin(c, TT_HLO_MUL, cs, expT), cs);
  }
  tt_hv over = tt_hlo_compare(b, TT_HLO_GT, x, k(c, x, T));
  tt_hv e = sel(c, over, k(c, x, f64 ? DBL_MAX : FLT_MAX), tt_hlo_unary(b, TT_HLO_EXP, x));
  cx r = {bin(c, TT_HLO_MUL, e, cs), bin(c, TT_HLO_MUL, e, sn)};
  // Non-finite real part x (t.re): +inf, -inf or NaN.
  tt_hv nan = k(c, x, NAN), inf = k(c, x, INFINITY);
  tt_hv y_fin = tt_hlo_unary(b, TT_HLO_IS_FINITE, y);
  tt_hv neg = tt_lower_sign_bit(c, t.re);
  tt_hv v = sel(c, neg, zero, inf);  // exp(+-inf)
  cx xinf = {sel(c, y0, v, copysign_(c, v, cs)), sel(c, y0, y, copysign_(c, v, sn))};
  xinf.re = sel(c, y_fin, xinf.re, sel(c, neg, zero, inf));
  xinf.im = sel(c, y_fin, xinf.im, sel(c, neg, copysign_(c, zero, y), bin(c, TT_HLO_SUB, y, y)));
  cx xnan = {nan, sel(c, y0, y, nan)};
  tt_hv x_inf = is_inf(c, t.re), x_nan = is_nan(c, t.re);
  r.re = sel(c, y_fin, r.re, nan);  // finite x, y inf or NaN
  r.im = sel(c, y_fin, r.im, nan);
  r.re = sel(c, x_inf, xinf.re, sel(c, x_nan, xnan.re, r.re));
  r.im = sel(c, x_inf, xinf.im, sel(c, x_nan, xnan.im, r.im));
  return r;
}

tt_hv tt_lower_complex_pow(tt_lower_ctx *c, tt_hv a, tt_hv e) {
  tt_hlo *b = tt_lower_hlo(c);
  cx l = clog_(c, a);
  cx t = mul(c, (cx){tt_hlo_real(b, e), tt_hlo_imag(b, e)}, l);
  cx r = cexp_(c, t);
  return tt_hlo_complex(b, r.re, r.im);
}
