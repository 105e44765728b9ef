// special.c — special functions and a few misc pointwise / reduction ops:
// the gamma family (lgamma, digamma, polygamma), erfc / erfinv and the normal
// distribution (ndtri, log_ndtr), modified Bessel functions (i0, i0e, i1,
// i1e), float bit ops (nextafter, frexp), angle of real tensors, equal,
// aminmax, isin and bucketize / searchsorted (histc lives in select.c);
// the orthogonal polynomials (Chebyshev, Hermite, Laguerre, Legendre: a
// stablehlo.while runs the recurrence), zeta, entr, erfcx, Bessel K0 / K1
// (and scaled), J0 / J1, Y0 / Y1, spherical j0 and Airy Ai.
//
// Also igamma / igammac. Functions CHLO provides (lgamma, digamma,
// polygamma, zeta, erf_inv, erfc, bessel_i1e, next_after) are emitted as CHLO
// ops, which the PJRT plugins legalise, with fixes where PyTorch's values
// differ (poles, negative x). The others are built here from elementary ops
// in the input's opmath dtype and rounded once, like elementwise.c.
//
// Leaves out: complex numbers; igamma / igammac's asymptotic series for
// large a (see there); checking that searchsorted's sorter is a permutation
// (its indices are checked on the device, as in range); polygamma(n >= 2) below x = -32 (see hurwitz_zeta);
// float64 J0 / J1 (they fall back to the CPU).
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lower/lower.h"

// --- helpers ------------------------------------------------------------------------------

static tt_hv k(tt_lower_ctx *c, tt_hv like, double v) { return tt_lower_splat_like(c, like, v); }
static tt_hv add_(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_ADD, x, y); }
static tt_hv sub_(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_SUB, x, y); }
static tt_hv mul_(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_MUL, x, y); }
static tt_hv div_(tt_lower_ctx *c, tt_hv x, tt_hv y) { return tt_lower_bin(c, TT_HLO_DIV, x, y); }
static tt_hv un(tt_lower_ctx *c, tt_hlo_unop op, tt_hv x) { return tt_hlo_unary(tt_lower_hlo(c), op, x); }
static tt_hv cmp(tt_lower_ctx *c, tt_hlo_cmp op, tt_hv x, tt_hv y) {
  return tt_hlo_compare(tt_lower_hlo(c), op, x, y);
}
static tt_hv sel(tt_lower_ctx *c, tt_hv p, tt_hv x, tt_hv y) {
  return tt_hlo_select(tt_lower_hlo(c), p, x, y);
}
static tt_hv chlo(tt_lower_ctx *c, const char *name, tt_hv x) {
  return tt_hlo_chlo_unary(tt_lower_hlo(c), name, x);
}

// Tensor argument i in the opmath dtype of float math; *rt gets the float
// result dtype (ints promote to the default dtype).
static tt_hv float_arg(tt_lower_ctx *c, int i, tt_dtype *rt) {
  tt_hv x = tt_lower_tensor(c, i);
  *rt = tt_lower_float_dtype(c, tt_lower_tensor_type(c, i, -1).dtype);
  return tt_lower_convert(c, x, tt_opmath(*rt));
}

typedef tt_hv (*math_fn)(tt_lower_ctx *c, tt_hv x);

// Result = f(argument 0), computed in opmath and rounded to the result dtype.
static tt_status float_math(tt_lower_ctx *c, math_fn f) {
  tt_dtype rt;
  tt_hv x = float_arg(c, 0, &rt);
  tt_lower_result(c, tt_lower_convert(c, f(c, x), rt));
  return NULL;
}

// Horner evaluation of sum coef[i] t^i (coef from the constant term up).
static tt_hv poly(tt_lower_ctx *c, tt_hv t, const double *coef, int n) {
  tt_hv r = k(c, t, coef[n - 1]);
  for (int i = n - 2; i >= 0; i--) r = add_(c, mul_(c, r, t), k(c, t, coef[i]));
  return r;
}

// --- gamma family -----------------------------------------------------------------------------

static tt_hv f_lgamma(tt_lower_ctx *c, tt_hv x) { return chlo(c, "chlo.lgamma", x); }

// digamma has a pole at 0: PyTorch returns copysign(inf, -x) there, which
// is -1/x (CHLO gives NaN).
static tt_hv f_digamma(tt_lower_ctx *c, tt_hv x) {
  tt_hv r = chlo(c, "chlo.digamma", x);
  return sel(c, cmp(c, TT_HLO_EQ, x, k(c, x, 0)), div_(c, k(c, x, -1), x), r);
}

static tt_status lower_lgamma(tt_lower_ctx *c) { return float_math(c, f_lgamma); }
static tt_status lower_digamma(tt_lower_ctx *c) { return float_math(c, f_digamma); }

// trigamma with PyTorch's reflection below 1/2: pi^2 / sin^2(pi x) - psi1(1 - x)
// (chlo.polygamma is inaccurate for negative x).
static tt_hv f_trigamma(tt_lower_ctx *c, tt_hv x) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv neg = cmp(c, TT_HLO_LT, x, k(c, x, 0.5));
  tt_hv xr = sel(c, neg, sub_(c, k(c, x, 1), x), x);
  tt_hv p = tt_hlo_chlo_binary(b, "chlo.polygamma", k(c, x, 1), xr);
  tt_hv s = un(c, TT_HLO_SIN, mul_(c, x, k(c, x, M_PI)));
  tt_hv refl = sub_(c, div_(c, k(c, x, M_PI * M_PI), mul_(c, s, s)), p);
  tt_hv r = sel(c, neg, refl, p);
  return sel(c, cmp(c, TT_HLO_EQ, x, k(c, x, INFINITY)), k(c, x, 0), r);
}

// t^e for a small integer e >= 1 (by squaring).
static tt_hv ipow(tt_lower_ctx *c, tt_hv t, int64_t e) {
  tt_hv r = TT_HV_INVALID;
  while (e > 0) {
    if (e & 1) r = r == TT_HV_INVALID ? t : mul_(c, r, t);
    e >>= 1;
    if (e > 0) t = mul_(c, t, t);
  }
  return r;
}

// Hurwitz zeta(s, q) for integer s >= 2. chlo.zeta is wrong for q < 0, so
// there the first kShift terms are summed here: zeta(s, q) =
// sum_{j<kShift} (q + j)^-s + zeta(s, q + kShift) (exact for q > -kShift).
// At the poles q = 0, -1, -2, ... it is inf, as PyTorch's zeta.
static tt_hv hurwitz_zeta(tt_lower_ctx *c, int64_t s, tt_hv q) {
  enum { kShift = 32 };
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv neg = cmp(c, TT_HLO_LT, q, k(c, q, 0));
  tt_hv qs = sel(c, neg, add_(c, q, k(c, q, kShift)), q);
  tt_hv z = tt_hlo_chlo_binary(b, "chlo.zeta", k(c, q, (double)s), qs);
  tt_hv head = k(c, q, 0);
  for (int j = 0; j < kShift; j++) {
    tt_hv t = div_(c, k(c, q, 1), add_(c, q, k(c, q, j)));
    head = add_(c, head, ipow(c, t, s));
  }
  z = sel(c, neg, add_(c, z, head), z);
  tt_hv pole = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_LE, q, k(c, q, 0)),
                            cmp(c, TT_HLO_EQ, q, un(c, TT_HLO_FLOOR, q)));
  return sel(c, pole, k(c, q, INFINITY), z);
}

// psi_n(x) = (-1)^(n+1) n! zeta(n + 1, x) for n >= 2, as PyTorch computes it.
static tt_hv f_polygamma_n(tt_lower_ctx *c, int64_t n, tt_hv x) {
  double fact = 1;  // n! overflows double past n = 170: stop there, not at n
  for (int64_t i = 2; i <= n && isfinite(fact); i++) fact *= (double)i;
  return mul_(c, hurwitz_zeta(c, n + 1, x), k(c, x, n % 2 ? fact : -fact));
}

// polygamma(n, x): digamma, trigamma, then the zeta form. `n_arg` / `x_arg`
// differ between polygamma(int n, Tensor self) and polygamma_(self, n).
static tt_status polygamma_args(tt_lower_ctx *c, int n_arg, int x_arg) {
  int64_t n = tt_lower_int(c, n_arg);
  if (n < 0) return tt_lower_fail(c, TT_INVALID_ARGUMENT, "polygamma(n, x) does not "
                                  "support negative n.");
  if (n > (int64_t)1 << 40)  // zeta(n + 1, x) of an int64 n + 1; ipow's loop is log n
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "polygamma(n, x): n = %" PRId64
                         " is too large", n);
  tt_dtype rt;
  tt_hv x = float_arg(c, x_arg, &rt);
  tt_hv r = n == 0 ? f_digamma(c, x) : n == 1 ? f_trigamma(c, x) : f_polygamma_n(c, n, x);
  tt_lower_result(c, tt_lower_convert(c, r, rt));
  return NULL;
}

static tt_status lower_polygamma(tt_lower_ctx *c) { return polygamma_args(c, 0, 1); }
static tt_status lower_polygamma_(tt_lower_ctx *c) { return polygamma_args(c, 1, 0); }

// --- erfc, erfinv, the normal distribution ------------------------------------------------------

static tt_hv f_erfc(tt_lower_ctx *c, tt_hv x) { return chlo(c, "chlo.erfc", x); }
static tt_hv f_erfinv(tt_lower_ctx *c, tt_hv x) { return chlo(c, "chlo.erf_inv", x); }

// log(ndtr(x)): log1p(-erfc(x/sqrt2)/2) above -1, log(erfc(-x/sqrt2)/2)
// down to -10, and the asymptotic series of the Mills ratio below (where
// erfc underflows): -x^2/2 - log(-x) - log(2pi)/2 + log(1 - 1/x^2 + 3/x^4 ...).
static tt_hv f_log_ndtr(tt_lower_ctx *c, tt_hv x) {
  tt_hv z = mul_(c, x, k(c, x, M_SQRT1_2));
  tt_hv hi = un(c, TT_HLO_LOG1P, mul_(c, f_erfc(c, z), k(c, x, -0.5)));
  tt_hv mid = un(c, TT_HLO_LOG, mul_(c, f_erfc(c, un(c, TT_HLO_NEG, z)), k(c, x, 0.5)));
  tt_hv lim = k(c, x, -10);
  tt_hv xs = sel(c, cmp(c, TT_HLO_LT, x, lim), x, lim);  // keeps the unused branch finite
  tt_hv t = div_(c, k(c, xs, 1), mul_(c, xs, xs));
  static const double kMills[] = {1, -1, 3, -15, 105, -945, 10395};
  tt_hv s = poly(c, t, kMills, (int)(sizeof kMills / sizeof kMills[0]));
  tt_hv lo = sub_(c, mul_(c, mul_(c, xs, xs), k(c, xs, -0.5)), un(c, TT_HLO_LOG, un(c, TT_HLO_NEG, xs)));
  lo = add_(c, sub_(c, lo, k(c, xs, 0.5 * log(2 * M_PI))), un(c, TT_HLO_LOG, s));
  tt_hv r = sel(c, cmp(c, TT_HLO_GT, x, k(c, x, -1)), hi, mid);
  return sel(c, cmp(c, TT_HLO_LT, x, lim), lo, r);
}

// ndtri(p) = sqrt(2) erfinv(2p - 1), except in the lower tail (p < 0.05)
// where 2p - 1 rounds away p's digits: there a rational guess (Abramowitz &
// Stegun 26.2.23, error < 5e-4) refined by Newton steps on log ndtr(x) = log p.
static tt_hv f_ndtri(tt_lower_ctx *c, tt_hv p) {
  tt_hv y = sub_(c, mul_(c, p, k(c, p, 2)), k(c, p, 1));
  tt_hv mid = mul_(c, f_erfinv(c, y), k(c, p, M_SQRT2));
  tt_hv tail = cmp(c, TT_HLO_LT, p, k(c, p, 0.05));
  tt_hv pt = sel(c, tail, p, k(c, p, 0.05));  // keeps the unused branch finite
  tt_hv lp = un(c, TT_HLO_LOG, pt);
  tt_hv t = un(c, TT_HLO_SQRT, mul_(c, lp, k(c, lp, -2)));
  static const double kNum[] = {2.515517, 0.802853, 0.010328};
  static const double kDen[] = {1, 1.432788, 0.189269, 0.001308};
  tt_hv x = sub_(c, div_(c, poly(c, t, kNum, 3), poly(c, t, kDen, 4)), t);
  for (int i = 0; i < 3; i++) {
    tt_hv ln = f_log_ndtr(c, x);
    tt_hv log_pdf = sub_(c, mul_(c, mul_(c, x, x), k(c, x, -0.5)), k(c, x, 0.5 * log(2 * M_PI)));
    tt_hv ratio = un(c, TT_HLO_EXP, sub_(c, ln, log_pdf));  // ndtr(x) / pdf(x)
    x = sub_(c, x, mul_(c, sub_(c, ln, lp), ratio));
  }
  tt_hv r = sel(c, tail, x, mid);
  return sel(c, cmp(c, TT_HLO_EQ, p, k(c, p, 0)), k(c, p, -INFINITY), r);
}

static tt_status lower_erfc(tt_lower_ctx *c) { return float_math(c, f_erfc); }
static tt_status lower_erfinv(tt_lower_ctx *c) { return float_math(c, f_erfinv); }
static tt_status lower_ndtri(tt_lower_ctx *c) { return float_math(c, f_ndtri); }
static tt_status lower_log_ndtr(tt_lower_ctx *c) { return float_math(c, f_log_ndtr); }

// --- modified Bessel functions -------------------------------------------------------------------

// i0e(x) = e^-|x| I0(x). Below |x| = 15 the series I0 = sum (x^2/4)^k / k!^2
// (positive terms: no cancellation); above, the
// asymptotic expansion sqrt(1/(2 pi |x|)) sum ((2k-1)!!)^2 / (k! (8|x|)^k),
// whose first 12 terms reach 1e-12 at 15. NaN passes through.
static tt_hv f_i0e(tt_lower_ctx *c, tt_hv x) {
  tt_hv a = un(c, TT_HLO_ABS, x);
  const double kSplit = 15.0;
  // Series in y = x^2/4 with coefficients 1/k!^2 while they are normal
  // floats (k <= 18; the terms left out are below 1e-7 of the sum).
  double coef[19];
  double f = 1;
  for (int i = 0; i < 19; i++) {
    if (i) f *= i;
    coef[i] = 1.0 / (f * f);
  }
  tt_hv as = sel(c, cmp(c, TT_HLO_LT, a, k(c, a, kSplit)), a, k(c, a, kSplit));
  tt_hv y = mul_(c, mul_(c, as, as), k(c, as, 0.25));
  tt_hv small = mul_(c, poly(c, y, coef, 19), un(c, TT_HLO_EXP, un(c, TT_HLO_NEG, as)));
  // Asymptotic series in u = 1/|x| (|x| >= 15): term k = ((2k-1)!!)^2 / (k! 8^k).
  double acoef[12];
  double t = 1;
  acoef[0] = 1;
  for (int i = 1; i < 12; i++) {
    t *= (2.0 * i - 1) * (2.0 * i - 1) / (8.0 * i);
    acoef[i] = t;
  }
  tt_hv al = sel(c, cmp(c, TT_HLO_GT, a, k(c, a, kSplit)), a, k(c, a, kSplit));
  tt_hv u = div_(c, k(c, al, 1), al);
  tt_hv big = mul_(c, poly(c, u, acoef, 12), un(c, TT_HLO_RSQRT, mul_(c, al, k(c, al, 2 * M_PI))));
  tt_hv r = sel(c, cmp(c, TT_HLO_LT, a, k(c, a, kSplit)), small, big);
  return sel(c, cmp(c, TT_HLO_NE, x, x), x, r);
}

// i0(x) = i0e(x) e^|x| (NaN at +-inf, like PyTorch's CPU kernel).
static tt_hv f_i0(tt_lower_ctx *c, tt_hv x) {
  return mul_(c, f_i0e(c, x), un(c, TT_HLO_EXP, un(c, TT_HLO_ABS, x)));
}

static tt_hv f_i1e(tt_lower_ctx *c, tt_hv x) { return chlo(c, "chlo.bessel_i1e", x); }

static tt_hv f_i1(tt_lower_ctx *c, tt_hv x) {
  return mul_(c, f_i1e(c, x), un(c, TT_HLO_EXP, un(c, TT_HLO_ABS, x)));
}

static tt_status lower_i0(tt_lower_ctx *c) { return float_math(c, f_i0); }
static tt_status lower_i0e(tt_lower_ctx *c) { return float_math(c, f_i0e); }
static tt_status lower_i1(tt_lower_ctx *c) { return float_math(c, f_i1); }
static tt_status lower_i1e(tt_lower_ctx *c) { return float_math(c, f_i1e); }

// --- igamma, igammac ---------------------------------------------------------------------------
//
// The regularised incomplete gamma functions P(a, x) and Q(a, x) = 1 - P,
// with PyTorch's choice of method: the series of P where x <= 1.1 or x < a,
// else the continued fraction of Q (Lentz's method), each with a fixed number
// of steps that reaches float precision for a, x up to ~100. Leaves out
// PyTorch's asymptotic series for a > 20 with x close to a.

enum { kIgamSeriesSteps = 64, kIgamFractionSteps = 40 };

// sum_{n>=0} x^n / (a (a+1) ... (a+n)), so that P = x^a e^-x / Gamma(a) * sum.
static tt_hv igam_series(tt_lower_ctx *c, tt_hv a, tt_hv x) {
  tt_hv term = div_(c, k(c, a, 1), a), sum = term, an = a;
  for (int n = 1; n < kIgamSeriesSteps; n++) {
    an = add_(c, an, k(c, an, 1));
    term = div_(c, mul_(c, term, x), an);
    sum = add_(c, sum, term);
  }
  return sum;
}

// The continued fraction 1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - ...)),
// so that Q = x^a e^-x / Gamma(a) * fraction; valid (fast) for x > a.
static tt_hv igamc_fraction(tt_lower_ctx *c, tt_hv a, tt_hv x) {
  const double kTiny = 1e-30;
  tt_hv bb = add_(c, sub_(c, x, a), k(c, x, 1));
  tt_hv cc = k(c, x, 1 / kTiny), d = div_(c, k(c, x, 1), bb), h = d;
  for (int i = 1; i < kIgamFractionSteps; i++) {
    tt_hv an = mul_(c, k(c, a, -(double)i), sub_(c, k(c, a, (double)i), a));
    bb = add_(c, bb, k(c, bb, 2));
    d = add_(c, mul_(c, an, d), bb);
    d = sel(c, cmp(c, TT_HLO_LT, un(c, TT_HLO_ABS, d), k(c, d, kTiny)), k(c, d, kTiny), d);
    cc = add_(c, bb, div_(c, an, cc));
    cc = sel(c, cmp(c, TT_HLO_LT, un(c, TT_HLO_ABS, cc), k(c, cc, kTiny)), k(c, cc, kTiny), cc);
    d = div_(c, k(c, d, 1), d);
    h = mul_(c, h, mul_(c, d, cc));
  }
  return h;
}

// P (upper = false) or Q of (self = a, other = x), with PyTorch's values at
// the domain's edges.
static tt_status igamma_like(tt_lower_ctx *c, bool upper) {
  static const int idx[2] = {0, 1};
  tt_dtype rt = tt_lower_result_type(c, idx, 2);
  if (rt == TT_DTYPE_NONE)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "promotion between these dtypes is not "
                         "supported");
  rt = tt_lower_float_dtype(c, rt);
  tt_hv v[2];
  TT_RETURN_IF_ERROR(tt_lower_operands(c, idx, 2, tt_opmath(rt), v));
  tt_hv a = v[0], x = v[1];
  tt_hv lp = sub_(c, sub_(c, mul_(c, a, un(c, TT_HLO_LOG, x)), x), f_lgamma(c, a));
  tt_hv pre = un(c, TT_HLO_EXP, lp);
  tt_hv frac = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_GT, x, k(c, x, 1.1)),
                            cmp(c, TT_HLO_GE, x, a));
  tt_hv p = mul_(c, pre, igam_series(c, a, x));
  tt_hv q = mul_(c, pre, igamc_fraction(c, a, x));
  tt_hv one = k(c, x, 1), zero = k(c, x, 0), nan = k(c, x, NAN);
  tt_hv r = upper ? sel(c, frac, q, sub_(c, one, p)) : sel(c, frac, sub_(c, one, q), p);
  tt_hv lo = upper ? one : zero, hi = upper ? zero : one;  // P = 0 and P = 1
  tt_hv x_inf = cmp(c, TT_HLO_EQ, x, k(c, x, INFINITY));
  tt_hv a_inf = cmp(c, TT_HLO_EQ, a, k(c, a, INFINITY));
  r = sel(c, x_inf, hi, r);
  r = sel(c, a_inf, sel(c, x_inf, nan, lo), r);
  r = sel(c, cmp(c, TT_HLO_EQ, x, zero), lo, r);
  tt_hv a0 = cmp(c, TT_HLO_EQ, a, zero);
  r = sel(c, a0, sel(c, cmp(c, TT_HLO_GT, x, zero), hi, nan), r);
  tt_hv bad = tt_lower_bin(c, TT_HLO_OR, cmp(c, TT_HLO_LT, x, zero), cmp(c, TT_HLO_LT, a, zero));
  tt_lower_result(c, tt_lower_convert(c, sel(c, bad, nan, r), rt));
  return NULL;
}

static tt_status lower_igamma(tt_lower_ctx *c) { return igamma_like(c, false); }
static tt_status lower_igammac(tt_lower_ctx *c) { return igamma_like(c, true); }

// --- nextafter, frexp, angle -------------------------------------------------------------------

// Arguments 0 and 1 promoted to their result dtype (not opmath: these ops
// work on the bits of that dtype) and broadcast.
static tt_status promoted_pair(tt_lower_ctx *c, tt_dtype *rt, tt_hv *v) {
  static const int idx[2] = {0, 1};
  *rt = tt_lower_result_type(c, idx, 2);
  if (*rt == TT_DTYPE_NONE)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "promotion between these dtypes is not "
                         "supported");
  return tt_lower_operands(c, idx, 2, *rt, v);
}

static tt_status lower_nextafter(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(promoted_pair(c, &rt, v));
  if (!tt_dtype_is_float(rt))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "nextafter of %s", tt_dtype_name(rt));
  tt_lower_result(c, tt_hlo_chlo_binary(tt_lower_hlo(c), "chlo.next_after", v[0], v[1]));
  return NULL;
}

// A constant of v's type holding the integer x (exact for 64-bit masks).
static tt_hv ki(tt_lower_ctx *c, tt_hv v, int64_t x) {
  tt_hlo_type t = tt_lower_type(c, v);
  return tt_hlo_splat_i(tt_lower_hlo(c), &t, x);
}

// frexp(x) = (m, e) with x = m 2^e, 0.5 <= |m| < 1, from the bits: the
// exponent field becomes bias - 1 (2^-1) in m. Everything is read from the
// bits because XLA's CPU backend flushes subnormals to zero in float math: a
// subnormal's mantissa field, converted to a float, is a normal number
// 2^(bias - 1 + mant) times as large. 0, inf and NaN give (x, 0).
static tt_status lower_frexp(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_dtype d = tt_lower_tensor_type(c, 0, -1).dtype;
  int ebits, mbits;
  tt_dtype it;
  switch (d) {
    case TT_F64: ebits = 11, mbits = 52, it = TT_I64; break;
    case TT_F32: ebits = 8, mbits = 23, it = TT_I32; break;
    case TT_BF16: ebits = 8, mbits = 7, it = TT_I16; break;
    case TT_F16: ebits = 5, mbits = 10, it = TT_I16; break;
    default:
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.frexp() only supports "
                           "floating-point dtypes");
  }
  tt_hlo *b = tt_lower_hlo(c);
  int nbits = it == TT_I64 ? 64 : it == TT_I32 ? 32 : 16;
  int64_t emask = ((int64_t)1 << ebits) - 1, bias = emask >> 1;
  int64_t sign_bit = (int64_t)(UINT64_MAX << (nbits - 1));  // as a signed value
  int64_t mant = (int64_t)((UINT64_C(1) << mbits) - 1);
  tt_hv bits = tt_hlo_bitcast(b, x, it);
  tt_hv sign = tt_lower_bin(c, TT_HLO_AND, bits, ki(c, bits, sign_bit));
  tt_hv ab = tt_lower_bin(c, TT_HLO_AND, bits, ki(c, bits, ~sign_bit));
  tt_hv field0 = tt_lower_bin(c, TT_HLO_SHR_L, ab, ki(c, ab, mbits));
  tt_hv sub = cmp(c, TT_HLO_EQ, field0, ki(c, field0, 0));
  tt_hv special = tt_lower_bin(c, TT_HLO_OR, cmp(c, TT_HLO_EQ, ab, ki(c, ab, 0)),
                               cmp(c, TT_HLO_EQ, field0, ki(c, field0, emask)));
  tt_hv xs = sel(c, sub, tt_lower_convert(c, ab, d), tt_hlo_bitcast(b, ab, d));
  tt_hv bits2 = tt_hlo_bitcast(b, xs, it);
  tt_hv field = tt_lower_bin(c, TT_HLO_SHR_L, bits2, ki(c, bits2, mbits));
  tt_hv e = tt_lower_convert(c, sub_(c, field, ki(c, field, bias - 1)), TT_I32);
  e = sel(c, sub, add_(c, e, ki(c, e, 1 - bias - mbits)), e);
  tt_hv mb = tt_lower_bin(c, TT_HLO_AND, bits2, ki(c, bits2, mant));
  mb = tt_lower_bin(c, TT_HLO_OR, mb, ki(c, mb, (bias - 1) << mbits));
  tt_hv m = tt_hlo_bitcast(b, tt_lower_bin(c, TT_HLO_OR, mb, sign), d);
  tt_lower_result(c, sel(c, special, x, m));
  tt_lower_result(c, sel(c, special, ki(c, e, 0), e));
  return NULL;
}

// angle of a real tensor: pi where x < 0, else 0; NaN stays NaN. Of a
// complex one: atan2(imag, real), in the real dtype.
static tt_status lower_angle(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = float_arg(c, 0, &rt);
  if (tt_dtype_is_complex(rt)) {
    tt_hlo *b = tt_lower_hlo(c);
    tt_hv r = tt_lower_bin(c, TT_HLO_ATAN2, tt_hlo_imag(b, x), tt_hlo_real(b, x));
    tt_lower_result(c, tt_lower_convert(c, r, tt_dtype_to_real(rt)));
    return NULL;
  }
  tt_hv r = sel(c, cmp(c, TT_HLO_LT, x, k(c, x, 0)), k(c, x, M_PI), k(c, x, 0));
  tt_lower_result(c, tt_lower_convert(c, sel(c, cmp(c, TT_HLO_NE, x, x), x, r), rt));
  return NULL;
}

// --- equal, aminmax ------------------------------------------------------------------------------

// equal(self, other) -> bool: same shape and every element equal (NaN never
// is). The bool comes back as a 0-d result.
static tt_status lower_equal(tt_lower_ctx *c) {
  tt_hlo_type a = tt_lower_tensor_type(c, 0, -1), o = tt_lower_tensor_type(c, 1, -1);
  a.dtype = o.dtype;
  if (!tt_hlo_same_type(&a, &o)) {
    tt_lower_result(c, tt_hlo_const_i(tt_lower_hlo(c), TT_BOOL, 0));
    return NULL;
  }
  tt_dtype rt;
  tt_hv v[2];
  TT_RETURN_IF_ERROR(promoted_pair(c, &rt, v));
  bool mask[TT_MAX_RANK];
  for (int d = 0; d < a.rank; d++) mask[d] = true;
  tt_lower_result(c, tt_lower_reduce(c, cmp(c, TT_HLO_EQ, v[0], v[1]), mask, false,
                                     TT_HLO_REDUCE_AND));
  return NULL;
}

// aminmax(self, *, dim?, keepdim) -> (min, max).
static tt_status lower_aminmax(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, 1, t.rank, true, mask));
  if (tt_lower_is_none(c, 1) && tt_hlo_numel(&t) == 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "aminmax(): cannot compute aminmax over an "
                         "empty dimension as the operation has no identity.");
  for (int d = 0; d < t.rank; d++)
    if (mask[d] && t.dims[d] == 0)
      return tt_lower_fail(c, TT_OUT_OF_RANGE, "aminmax: Expected reduction dim %d "
                           "to have non-zero size.", d);
  bool keep = tt_lower_bool(c, 2);
  bool is_bool = t.dtype == TT_BOOL;
  tt_lower_result(c, tt_lower_reduce(c, x, mask, keep, is_bool ? TT_HLO_REDUCE_AND
                                                                : TT_HLO_REDUCE_MIN));
  tt_lower_result(c, tt_lower_reduce(c, x, mask, keep, is_bool ? TT_HLO_REDUCE_OR
                                                                : TT_HLO_REDUCE_MAX));
  return NULL;
}

// --- isin, bucketize, searchsorted ----------------------------------------------------------------

// v flattened to 1-d.
static tt_hv flat(tt_lower_ctx *c, tt_hv v) {
  tt_hlo_type t = tt_lower_type(c, v);
  int64_t n = tt_hlo_numel(&t);
  return tt_hlo_reshape(tt_lower_hlo(c), v, 1, &n);
}

// isin(elements, test_elements, *, assume_unique, invert): each element
// compared with every test element ([N, M]), or-reduced over M.
static tt_status lower_isin(tt_lower_ctx *c) {
  static const int idx[2] = {0, 1};
  tt_dtype rt = tt_lower_result_type(c, idx, 2);
  if (rt == TT_DTYPE_NONE)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "promotion between these dtypes is not "
                         "supported");
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv e = tt_lower_operand(c, 0, rt), te = flat(c, tt_lower_operand(c, 1, rt));
  tt_hlo_type et = tt_lower_type(c, e);
  tt_hv ef = flat(c, e);
  int64_t dims[2] = {tt_hlo_numel(&et), tt_lower_type(c, te).dims[0]};
  int64_t b0 = 0, b1 = 1;
  tt_hv eq = cmp(c, TT_HLO_EQ, tt_hlo_broadcast_in_dim(b, ef, 2, dims, &b0),
                 tt_hlo_broadcast_in_dim(b, te, 2, dims, &b1));
  bool mask[2] = {false, true};
  tt_hv r = tt_lower_reduce(c, eq, mask, false, TT_HLO_REDUCE_OR);
  if (tt_lower_bool(c, 3)) r = un(c, TT_HLO_NOT, r);
  tt_lower_result(c, tt_hlo_reshape(b, r, et.rank, et.dims));
  return NULL;
}

// seq[..., idx[...]] along seq's last dim: seq is 1-d (idx of any shape) or
// [*B, M] with idx [*B, K]; the result has idx's shape.
static tt_hv row_gather(tt_lower_ctx *c, tt_hv seq, tt_hv idx) {
  static const int64_t kIota[TT_MAX_RANK] = {0, 1, 2, 3, 4, 5, 6, 7};
  static const int64_t kOnes[TT_MAX_RANK] = {1, 1, 1, 1, 1, 1, 1, 1};
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type st = tt_lower_type(c, seq), it = tt_lower_type(c, idx);
  int r = it.rank, n = st.rank;
  int64_t cd[TT_MAX_RANK + 1];
  memcpy(cd, it.dims, sizeof(int64_t) * (size_t)r);
  cd[r] = 1;
  tt_hlo_type i64 = tt_hlo_make_type(TT_I64, r, it.dims);
  tt_hv parts[TT_MAX_RANK];
  for (int d = 0; d < n; d++)
    parts[d] = tt_hlo_reshape(b, d == n - 1 ? idx : tt_hlo_iota(b, &i64, d), r + 1, cd);
  tt_hlo_gather_dims gd = {.collapsed_slice_dims = kIota, .n_collapsed = n,
                           .start_index_map = kIota, .n_start_index_map = n,
                           .index_vector_dim = r};
  return tt_hlo_gather(b, seq, tt_hlo_concatenate(b, parts, n, r), &gd, kOnes, NULL);
}

// PyTorch's searchsorted_pre_check, its order and texts (side is checked by
// the caller): sorter (arg sorter_arg, -1 for none), dims of the boundaries
// st and values vt, the out= dtype. (The devices match: both are on tpu.)
static tt_status search_checks(tt_lower_ctx *c, const tt_hlo_type *st, const tt_hlo_type *vt,
                               int sorter_arg, bool out_int32) {
  char s1[96], s2[96];
  if (sorter_arg >= 0 && !tt_lower_is_none(c, sorter_arg)) {
    tt_hlo_type so = tt_lower_tensor_type(c, sorter_arg, -1);
    bool same = so.rank == st->rank;
    for (int d = 0; same && d < st->rank; d++) same = so.dims[d] == st->dims[d];
    if (!same)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.searchsorted(): boundary and sorter "
                           "must have the same size, but got boundary tensor %sand got sorter "
                           "tensor %s", tt_shape_str(st, s1, sizeof s1), tt_shape_str(&so, s2, sizeof s2));
    if (so.dtype != TT_I64)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.searchsorted(): sorter must be a tensor "
                           "of long dtype but got dtype %s", tt_dtype_torch_name(so.dtype));
  }
  if (vt->rank == 0 && st->rank != 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.searchsorted(): input value can be a "
                         "scalar only when boundaries tensor dimension is 1, but we got boundaries "
                         "tensor dim(%d) and input value's dim(0) numel(1)", (int)st->rank);
  if (st->rank == 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.searchsorted(): boundaries tensor "
                         "should have positive dimension, but got 0 dimension");
  bool match = st->rank == 1 || vt->rank == st->rank;
  for (int d = 0; match && d < st->rank - 1; d++) match = vt->dims[d] == st->dims[d];
  if (!match)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.searchsorted(): boundaries tensor should "
                         "be 1 dimension or the first N-1 dimensions of boundaries tensor and "
                         "input value tensor must match, but we got boundaries tensor %s and "
                         "input value tensor %s", tt_shape_str(st, s1, sizeof s1),
                         tt_shape_str(vt, s2, sizeof s2));
  tt_hlo_type dest;
  if (tt_lower_dest_type(c, 0, &dest) && dest.dtype != (out_int32 ? TT_I32 : TT_I64))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.searchsorted(): output tensor's dtype "
                         "is wrong, it can only be Int(int32) or Long(int64) depending on whether "
                         "out_int32 flag is True, but we got output tensor's dtype %s and "
                         "out_int32 flag is %s", tt_dtype_torch_name(dest.dtype),
                         out_int32 ? "True" : "False");
  if (out_int32 && st->dims[st->rank - 1] >= INT32_MAX)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.searchsorted(): the size of boundaries' "
                         "last dimension should be less than %d, but we got %" PRId64, INT32_MAX,
                         st->dims[st->rank - 1]);
  return NULL;
}

// Index of each value in the sorted last dim of seq (through the sorter
// permutation when given) by PyTorch's binary search, step for step, so
// unsorted rows give its answers too: go right while !(e >= v) (left; NaN
// values go last) or !(e > v) (right). seq is 1-d, or has values' leading
// dims. ceil(log2(M + 1)) gathers per value, not an [N, M] comparison.
static tt_status search(tt_lower_ctx *c, int seq_arg, int val_arg, int sorter_arg,
                        bool out_int32, bool right) {
  int idx[2] = {seq_arg, val_arg};
  tt_dtype rt = tt_lower_result_type(c, idx, 2);
  if (rt == TT_DTYPE_NONE || rt == TT_BOOL)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "search of these dtypes");
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv seq = tt_lower_convert(c, tt_lower_tensor(c, seq_arg), rt);
  tt_hv val = tt_lower_operand(c, val_arg, rt);
  tt_hlo_type st = tt_lower_type(c, seq), vt = tt_lower_type(c, val);
  TT_RETURN_IF_ERROR(search_checks(c, &st, &vt, sorter_arg, out_int32));
  int64_t m = st.dims[st.rank - 1];
  if (sorter_arg >= 0 && !tt_lower_is_none(c, sorter_arg) && m > 0) {
    tt_hv so = tt_lower_tensor(c, sorter_arg);
    tt_lower_check_index(c, so, m, false, TT_INVALID_ARGUMENT,
                         "torch.searchsorted(): sorter index out of range", 0, 0);
    seq = row_gather(c, seq, so);
  }
  tt_hlo_type it = tt_hlo_make_type(TT_I64, vt.rank, vt.dims);
  tt_hv lo = tt_hlo_splat_i(b, &it, 0), hi = tt_hlo_splat_i(b, &it, m);
  for (int64_t span = m; span > 0 && tt_hlo_numel(&vt) > 0; span >>= 1) {
    tt_hv active = cmp(c, TT_HLO_LT, lo, hi);
    tt_hv mid = add_(c, lo, tt_lower_bin(c, TT_HLO_SHR_A, sub_(c, hi, lo), ki(c, lo, 1)));
    tt_hv e = row_gather(c, seq, tt_lower_bin(c, TT_HLO_MIN, mid, ki(c, mid, m - 1)));
    tt_hv go = un(c, TT_HLO_NOT, cmp(c, right ? TT_HLO_GT : TT_HLO_GE, e, val));
    lo = sel(c, tt_lower_bin(c, TT_HLO_AND, active, go), add_(c, mid, ki(c, mid, 1)), lo);
    hi = sel(c, tt_lower_bin(c, TT_HLO_AND, active, un(c, TT_HLO_NOT, go)), mid, hi);
  }
  tt_lower_result(c, tt_lower_convert(c, lo, out_int32 ? TT_I32 : TT_I64));
  return NULL;
}

// bucketize(self, boundaries, *, out_int32, right).
static tt_status lower_bucketize(tt_lower_ctx *c) {
  int rank = tt_lower_tensor_type(c, 1, -1).rank;
  if (rank != 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "boundaries tensor must be 1 dimension, but "
                         "got dim(%d)", rank);
  return search(c, 1, 0, -1, tt_lower_bool(c, 2), tt_lower_bool(c, 3));
}

// searchsorted(sorted_sequence, self, *, out_int32, right, side, sorter).
static tt_status lower_searchsorted(tt_lower_ctx *c) {
  bool right = tt_lower_bool(c, 3);
  const tt_value *side = tt_lower_arg(c, 4);
  if (side->kind == TT_VALUE_STRING) {
    bool r = strcmp(side->u.str, "right") == 0;
    if (!r && strcmp(side->u.str, "left") != 0)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.searchsorted(): side can only be "
                           "'left' or 'right' but got %s", side->u.str);
    if (right && !r)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.searchsorted(): side and right can't "
                           "be set to opposites, got side of left while right was True");
    right = r;
  }
  return search(c, 0, 1, 5, tt_lower_bool(c, 2), right);
}

// --- orthogonal polynomials ----------------------------------------------------------------
//
// special_*_polynomial_*(x, n) with n a tensor, truncated to an integer as
// PyTorch's static_cast<int64_t>(n): PyTorch's special values and closed
// (trigonometric) forms, else its three-term recurrence run by a
// stablehlo.while up to the largest n among the elements that need it (each
// element stops at its own n), so any n is exact, as on the CPU.

// P_j from p = P_{j-2}, q = P_{j-1} at step j (jf: j as a float of x's shape).
typedef tt_hv (*recur_fn)(tt_lower_ctx *c, tt_hv jf, tt_hv x, tt_hv p, tt_hv q);

// P_n for elements with need (and n >= 2); others get q1 (= P_1).
static tt_hv recur(tt_lower_ctx *c, tt_hv x, tt_hv n, tt_hv need, tt_hv q1, recur_fn f) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_type(c, x);
  bool all[TT_MAX_RANK];
  for (int i = 0; i < TT_MAX_RANK; i++) all[i] = true;
  tt_hv nn = sel(c, need, n, k(c, n, 0));
  tt_hv nmax = tt_lower_reduce(c, nn, all, false, TT_HLO_REDUCE_MAX);
  tt_hv kmax = tt_lower_convert(c, nmax, TT_I32);
  tt_hlo_type it = tt_hlo_make_type(TT_I32, 0, NULL);
  tt_hv init[6] = {tt_hlo_splat_i(b, &it, 2), kmax, x, n, k(c, x, 1), q1};
  tt_hv a[6];
  tt_hv r = tt_hlo_while_begin(b, init, 6, a);
  tt_hv pred = cmp(c, TT_HLO_LE, a[0], a[1]);
  tt_hlo_while_body(b, pred, 6, r, a);
  tt_hv jf = tt_lower_broadcast_to(c, tt_lower_convert(c, a[0], t.dtype), t.rank, t.dims);
  tt_hv act = cmp(c, TT_HLO_LE, jf, a[3]);
  tt_hv pj = f(c, jf, a[2], a[4], a[5]);
  tt_hv next[6] = {add_(c, a[0], ki(c, a[0], 1)), a[1], a[2], a[3],
                   sel(c, act, a[5], a[4]), sel(c, act, pj, a[5])};
  tt_hlo_while_end(b, init, next, 6, r);
  return r == TT_HV_INVALID ? TT_HV_INVALID : r + 5;
}

static tt_hv two_x(tt_lower_ctx *c, tt_hv x) { return add_(c, x, x); }

static tt_hv step_cheb(tt_lower_ctx *c, tt_hv jf, tt_hv x, tt_hv p, tt_hv q) {
  (void)jf;
  return sub_(c, mul_(c, two_x(c, x), q), p);
}
static tt_hv step_h(tt_lower_ctx *c, tt_hv jf, tt_hv x, tt_hv p, tt_hv q) {
  tt_hv kk = mul_(c, sub_(c, jf, k(c, jf, 1)), k(c, jf, 2));
  return sub_(c, mul_(c, two_x(c, x), q), mul_(c, kk, p));
}
static tt_hv step_he(tt_lower_ctx *c, tt_hv jf, tt_hv x, tt_hv p, tt_hv q) {
  return sub_(c, mul_(c, x, q), mul_(c, sub_(c, jf, k(c, jf, 1)), p));
}
static tt_hv step_l(tt_lower_ctx *c, tt_hv jf, tt_hv x, tt_hv p, tt_hv q) {
  tt_hv kk = sub_(c, jf, k(c, jf, 1));
  tt_hv a = add_(c, add_(c, kk, kk), sub_(c, k(c, x, 1), x));
  return div_(c, sub_(c, mul_(c, a, q), mul_(c, kk, p)), jf);
}
static tt_hv step_p(tt_lower_ctx *c, tt_hv jf, tt_hv x, tt_hv p, tt_hv q) {
  tt_hv kk = sub_(c, jf, k(c, jf, 1));
  tt_hv a = mul_(c, mul_(c, add_(c, add_(c, kk, kk), k(c, kk, 1)), x), q);
  return div_(c, sub_(c, a, mul_(c, kk, p)), jf);
}

typedef enum { P_T, P_U, P_V, P_W, P_H, P_HE, P_L, P_P } poly_kind;

// The polynomial of kind at (x, n) (n truncated, opmath), PyTorch's branches.
static tt_hv poly_eval(tt_lower_ctx *c, poly_kind kind, tt_hv x, tt_hv n) {
  tt_hv one = k(c, x, 1), zero = k(c, x, 0);
  tt_hv even = cmp(c, TT_HLO_EQ, un(c, TT_HLO_FLOOR, mul_(c, n, k(c, n, 0.5))),
                   mul_(c, n, k(c, n, 0.5)));
  tt_hv ax = un(c, TT_HLO_ABS, x);
  tt_hv pos = cmp(c, TT_HLO_GT, x, zero);
  tt_hv ge2 = cmp(c, TT_HLO_GE, n, k(c, n, 2));
  tt_hv n1 = add_(c, n, one), n21 = add_(c, add_(c, n, n), one);
  tt_hv q1, edge = TT_HV_INVALID, edge_v = zero, trig = TT_HV_INVALID, trig_v = zero;
  recur_fn f = step_cheb;
  if (kind <= P_W) {
    edge = cmp(c, TT_HLO_EQ, ax, one);
    trig = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_GT, n, k(c, n, kind == P_T ? 6 : 8)),
                        cmp(c, TT_HLO_LT, ax, one));
    tt_hv xs = sel(c, trig, x, zero);  // keeps acos finite where unused
    tt_hv th = tt_lower_bin(c, TT_HLO_ATAN2, un(c, TT_HLO_SQRT, mul_(c, sub_(c, one, xs), add_(c, one, xs))), xs), h = mul_(c, th, k(c, th, 0.5));
    tt_hv nh = add_(c, n, k(c, n, 0.5));
    tt_hv alt = sel(c, tt_lower_bin(c, TT_HLO_OR, pos, even), one, k(c, x, -1));
    switch (kind) {
      case P_T:
        q1 = x, edge_v = alt;
        trig_v = un(c, TT_HLO_COS, mul_(c, n, th));
        break;
      case P_U: {
        q1 = two_x(c, x), edge_v = mul_(c, alt, n1);
        tt_hv s = un(c, TT_HLO_SIN, th);
        tt_hv a = mul_(c, n1, th);
        trig_v = sel(c, cmp(c, TT_HLO_NE, s, zero), div_(c, un(c, TT_HLO_SIN, a), s),
                     div_(c, mul_(c, n1, un(c, TT_HLO_COS, a)), xs));
        break;
      }
      case P_V: {
        q1 = sub_(c, two_x(c, x), one);
        tt_hv odd_v = sel(c, even, n21, un(c, TT_HLO_NEG, n21));
        edge_v = sel(c, pos, one, odd_v);
        trig_v = sel(c, cmp(c, TT_HLO_NE, un(c, TT_HLO_SIN, h), one),
                     div_(c, un(c, TT_HLO_COS, mul_(c, nh, th)), un(c, TT_HLO_COS, h)), odd_v);
        break;
      }
      default: {
        q1 = add_(c, two_x(c, x), one);
        edge_v = sel(c, pos, n21, sel(c, even, one, k(c, x, -1)));
        trig_v = sel(c, cmp(c, TT_HLO_NE, un(c, TT_HLO_COS, h), one),
                     div_(c, un(c, TT_HLO_SIN, mul_(c, nh, th)), un(c, TT_HLO_SIN, h)), edge_v);
        break;
      }
    }
  } else if (kind == P_H) {
    q1 = two_x(c, x), f = step_h;
  } else if (kind == P_HE) {
    q1 = x, f = step_he;
  } else if (kind == P_L) {
    q1 = sub_(c, one, x), f = step_l;
    edge = cmp(c, TT_HLO_EQ, ax, zero), edge_v = one;
  } else {
    q1 = x, f = step_p;
    edge = cmp(c, TT_HLO_EQ, ax, one);
    edge_v = sel(c, tt_lower_bin(c, TT_HLO_OR, pos, even), one, k(c, x, -1));
  }
  tt_hv need = ge2;
  if (edge != TT_HV_INVALID) need = tt_lower_bin(c, TT_HLO_AND, need, un(c, TT_HLO_NOT, edge));
  if (trig != TT_HV_INVALID) need = tt_lower_bin(c, TT_HLO_AND, need, un(c, TT_HLO_NOT, trig));
  tt_hv r = recur(c, x, n, need, q1, f);
  r = sel(c, cmp(c, TT_HLO_EQ, n, zero), one, r);
  if (trig != TT_HV_INVALID) r = sel(c, trig, trig_v, r);
  if (edge != TT_HV_INVALID) r = sel(c, edge, edge_v, r);
  return sel(c, cmp(c, TT_HLO_LT, n, zero), zero, r);
}

// (x, n) promoted and broadcast; n truncated toward zero (NaN counts as
// negative, as the cast gives INT64_MIN on the CPU), optionally x -> 2x - 1.
static tt_status poly_rule(tt_lower_ctx *c, poly_kind kind, bool shifted) {
  static const int idx[2] = {0, 1};
  tt_dtype rt = tt_lower_result_type(c, idx, 2);
  if (rt == TT_DTYPE_NONE)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "promotion between these dtypes is not "
                         "supported");
  rt = tt_lower_float_dtype(c, rt);
  tt_hv v[2];
  TT_RETURN_IF_ERROR(tt_lower_operands(c, idx, 2, tt_opmath(rt), v));
  tt_hv x = v[0], n = v[1];
  tt_hv nt = sel(c, cmp(c, TT_HLO_LT, n, k(c, n, 0)), un(c, TT_HLO_CEIL, n), un(c, TT_HLO_FLOOR, n));
  nt = sel(c, cmp(c, TT_HLO_NE, n, n), k(c, n, -1), nt);
  nt = tt_lower_bin(c, TT_HLO_MIN, nt, k(c, n, 1 << 30));
  if (shifted) x = sub_(c, two_x(c, x), k(c, x, 1));
  tt_lower_result(c, tt_lower_convert(c, poly_eval(c, kind, x, nt), rt));
  return NULL;
}

#define POLY(name, kind, shifted) \
  static tt_status lower_##name(tt_lower_ctx *c) { return poly_rule(c, kind, shifted); }
POLY(cheb_t, P_T, false)
POLY(cheb_u, P_U, false)
POLY(cheb_v, P_V, false)
POLY(cheb_w, P_W, false)
POLY(scheb_t, P_T, true)
POLY(scheb_u, P_U, true)
POLY(scheb_v, P_V, true)
POLY(scheb_w, P_W, true)
POLY(hermite_h, P_H, false)
POLY(hermite_he, P_HE, false)
POLY(laguerre, P_L, false)
POLY(legendre, P_P, false)
#undef POLY

// --- zeta, entr, erfcx, spherical j0 -------------------------------------------------------

// Hurwitz zeta(x, q) by chlo.zeta, with PyTorch's values at q's poles.
static tt_status lower_zeta(tt_lower_ctx *c) {
  static const int idx[2] = {0, 1};
  tt_dtype rt = tt_lower_result_type(c, idx, 2);
  if (rt == TT_DTYPE_NONE)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "promotion between these dtypes is not "
                         "supported");
  rt = tt_lower_float_dtype(c, rt);
  tt_hv v[2];
  TT_RETURN_IF_ERROR(tt_lower_operands(c, idx, 2, tt_opmath(rt), v));
  tt_hv x = v[0], q = v[1];
  tt_hv z = tt_hlo_chlo_binary(tt_lower_hlo(c), "chlo.zeta", x, q);
  // PyTorch's zeta (Cephes), its cases in its order, applied last to first:
  // x == 1 gives inf; x < 1 NaN; a pole q = 0, -1, -2, ... inf (a NaN x
  // too); x = +inf sums terms (q + n)^-inf: inf if q < 1, 1 if q == 1,
  // else NaN (its tail term is 0 * inf). chlo.zeta gave inf for x < 1 at
  // the poles.
  tt_hv one = k(c, q, 1);
  tt_hv xinf = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_EQ, x, k(c, x, INFINITY)),
                            cmp(c, TT_HLO_EQ, q, q));
  tt_hv at_inf = sel(c, cmp(c, TT_HLO_LT, q, one), k(c, q, INFINITY),
                     sel(c, cmp(c, TT_HLO_EQ, q, one), one, k(c, q, NAN)));
  z = sel(c, xinf, at_inf, z);
  tt_hv pole = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_LE, q, k(c, q, 0)),
                            cmp(c, TT_HLO_EQ, q, un(c, TT_HLO_FLOOR, q)));
  z = sel(c, pole, k(c, z, INFINITY), z);
  tt_hv xone = k(c, x, 1);
  z = sel(c, cmp(c, TT_HLO_LT, x, xone), k(c, z, NAN), z);
  z = sel(c, cmp(c, TT_HLO_EQ, x, xone), k(c, z, INFINITY), z);
  tt_lower_result(c, tt_lower_convert(c, z, rt));
  return NULL;
}

// entr(x) = -x log x, 0 at 0, -inf below; NaN passes through.
static tt_hv f_entr(tt_lower_ctx *c, tt_hv x) {
  tt_hv zero = k(c, x, 0);
  tt_hv r = mul_(c, un(c, TT_HLO_NEG, x), un(c, TT_HLO_LOG, x));
  r = sel(c, cmp(c, TT_HLO_EQ, x, zero), zero, r);
  return sel(c, cmp(c, TT_HLO_LT, x, zero), k(c, x, -INFINITY), r);
}

// erfcx(x) = e^(x^2) erfc(x). Below 5: e^(x^2) from x = h + d with h a
// multiple of 1/16 (h^2 exact, up to the overflow near -9.4), so the
// exponent keeps x^2's digits; from 5: the asymptotic series
// 1/(x sqrt(pi)) sum (-1)^k (2k-1)!! / (2x^2)^k, whose 15 terms reach 1e-10.
static tt_hv f_erfcx(tt_lower_ctx *c, tt_hv x) {
  const double kSplit = 5.0;
  tt_hv big = cmp(c, TT_HLO_GE, x, k(c, x, kSplit));
  tt_hv xs = sel(c, big, k(c, x, 0), x);
  tt_hv h = div_(c, un(c, TT_HLO_ROUND_EVEN, mul_(c, xs, k(c, xs, 16))), k(c, xs, 16));
  tt_hv d = sub_(c, xs, h);
  tt_hv e = mul_(c, un(c, TT_HLO_EXP, mul_(c, h, h)), un(c, TT_HLO_EXP, mul_(c, d, add_(c, xs, h))));
  tt_hv small = mul_(c, e, f_erfc(c, xs));
  double coef[15];
  double f = 1;
  for (int i = 0; i < 15; i++) {
    if (i) f *= -(2.0 * i - 1);
    coef[i] = f;
  }
  tt_hv xl = sel(c, big, x, k(c, x, kSplit));
  tt_hv t = div_(c, k(c, xl, 0.5), mul_(c, xl, xl));
  tt_hv asym = div_(c, poly(c, t, coef, 15), mul_(c, xl, k(c, xl, sqrt(M_PI))));
  tt_hv r = sel(c, big, asym, small);
  return sel(c, cmp(c, TT_HLO_LT, x, k(c, x, -10)), k(c, x, INFINITY), r);  // 2 e^(x^2) overflows
}

// spherical j0(x) = sin(x) / x: a Taylor series below 1/2, 0 at +-inf.
static tt_hv f_sph_j0(tt_lower_ctx *c, tt_hv x) {
  static const double kCoef[] = {1, -1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880,
                                 -1.0 / 39916800, 1.0 / 6227020800.0};
  tt_hv s = poly(c, mul_(c, x, x), kCoef, 7);
  tt_hv r = div_(c, un(c, TT_HLO_SIN, x), x);
  r = sel(c, cmp(c, TT_HLO_LT, un(c, TT_HLO_ABS, x), k(c, x, 0.5)), s, r);
  return sel(c, cmp(c, TT_HLO_EQ, un(c, TT_HLO_ABS, x), k(c, x, INFINITY)), k(c, x, 0), r);
}

static tt_status lower_entr(tt_lower_ctx *c) { return float_math(c, f_entr); }
static tt_status lower_erfcx(tt_lower_ctx *c) { return float_math(c, f_erfcx); }
static tt_status lower_sph_j0(tt_lower_ctx *c) { return float_math(c, f_sph_j0); }

// --- modified Bessel functions of the second kind ------------------------------------------
//
// K0, K1 and e^x K0, e^x K1 for x > 0 (inf at 0, NaN below, like PyTorch):
// up to 1 the power series (A&S 9.6.11 for n = 0, 1); up to 12 the integral
// e^x K_nu(x) = int_0^inf e^(-x (cosh t - 1)) cosh(nu t) dt by the trapezoid
// rule (step 0.2, to t = 6.2: the integrand is entire, so the error is about
// e^(-pi^2 / 0.2)); above 12 the asymptotic series
// sqrt(pi / 2x) sum_k prod_{j<=k} (4nu^2 - (2j-1)^2) / (j 8x).

enum { kKSteps = 32, kKAsym = 20 };

// x clamped into [lo, hi] (keeps unused branches finite).
static tt_hv clamp_(tt_lower_ctx *c, tt_hv x, double lo, double hi) {
  return tt_lower_bin(c, TT_HLO_MIN, tt_lower_bin(c, TT_HLO_MAX, x, k(c, x, lo)), k(c, x, hi));
}

// Unscaled K_nu by the series, for 0 < x <= 1.
static tt_hv k_series(tt_lower_ctx *c, int nu, tt_hv x) {
  const double kEuler = 0.57721566490153286;
  tt_hv y = mul_(c, mul_(c, x, x), k(c, x, 0.25));
  tt_hv lg = un(c, TT_HLO_LOG, mul_(c, x, k(c, x, 0.5)));
  double ic[12], pc[12];  // I_nu / (x/2)^nu and the psi sum, in powers of y
  double f = 1, h = 0;    // k! (k+nu)!, H_k
  for (int i = 0; i < 12; i++) {
    if (i) f *= (double)i * (double)(i + nu), h += 1.0 / i;
    ic[i] = 1 / f;
    double psi1 = -kEuler + h, psi2 = nu ? psi1 + 1.0 / (i + 1) : psi1;
    pc[i] = (psi1 + psi2) / f;
  }
  tt_hv in = poly(c, y, ic, 12), ps = poly(c, y, pc, 12);
  if (nu == 0) return add_(c, mul_(c, un(c, TT_HLO_NEG, lg), in), mul_(c, ps, k(c, ps, 0.5)));
  tt_hv half = mul_(c, x, k(c, x, 0.5));
  tt_hv r = add_(c, div_(c, k(c, x, 1), x), mul_(c, lg, mul_(c, in, half)));
  return sub_(c, r, mul_(c, mul_(c, half, k(c, x, 0.5)), ps));
}

// e^x K_nu by the trapezoid rule, for 1 <= x <= 12.
static tt_hv k_integral(tt_lower_ctx *c, int nu, tt_hv x) {
  const double step = 0.2;
  tt_hv sum = mul_(c, un(c, TT_HLO_EXP, k(c, x, 0)), k(c, x, 0.5));  // t = 0, weight 1/2
  for (int j = 1; j < kKSteps; j++) {
    double t = j * step;
    tt_hv e = un(c, TT_HLO_EXP, mul_(c, x, k(c, x, 1 - cosh(t))));
    sum = add_(c, sum, nu ? mul_(c, e, k(c, e, cosh(t))) : e);
  }
  return mul_(c, sum, k(c, x, step));
}

// e^x K_nu by the asymptotic series, for x >= 12.
static tt_hv k_asym(tt_lower_ctx *c, int nu, tt_hv x) {
  double coef[kKAsym];
  coef[0] = 1;
  for (int j = 1; j < kKAsym; j++)
    coef[j] = coef[j - 1] * (4.0 * nu * nu - (2.0 * j - 1) * (2.0 * j - 1)) / (8.0 * j);
  tt_hv u = div_(c, k(c, x, 1), x);
  return mul_(c, poly(c, u, coef, kKAsym), un(c, TT_HLO_SQRT, mul_(c, u, k(c, u, M_PI / 2))));
}

static tt_hv f_k(tt_lower_ctx *c, int nu, bool scaled, tt_hv x) {
  tt_hv ex = un(c, TT_HLO_EXP, un(c, TT_HLO_NEG, x));
  tt_hv in_s = tt_lower_bin(c, TT_HLO_AND, cmp(c, TT_HLO_GT, x, k(c, x, 0)),
                            cmp(c, TT_HLO_LE, x, k(c, x, 1)));
  tt_hv xs = sel(c, in_s, x, k(c, x, 1)), xm = clamp_(c, x, 1, 12), xl = clamp_(c, x, 12, INFINITY);
  tt_hv s = k_series(c, nu, xs);
  if (scaled) s = mul_(c, s, un(c, TT_HLO_EXP, xs));
  tt_hv m = k_integral(c, nu, xm), l = k_asym(c, nu, xl);
  if (!scaled) m = mul_(c, m, ex), l = mul_(c, l, ex);
  tt_hv r = sel(c, cmp(c, TT_HLO_LE, x, k(c, x, 1)), s,
                sel(c, cmp(c, TT_HLO_LT, x, k(c, x, 12)), m, l));
  r = sel(c, cmp(c, TT_HLO_EQ, x, k(c, x, 0)), k(c, x, INFINITY), r);
  return sel(c, cmp(c, TT_HLO_LT, x, k(c, x, 0)), k(c, x, NAN), r);
}

static tt_hv f_k0(tt_lower_ctx *c, tt_hv x) { return f_k(c, 0, false, x); }
static tt_hv f_k1(tt_lower_ctx *c, tt_hv x) { return f_k(c, 1, false, x); }
static tt_hv f_k0e(tt_lower_ctx *c, tt_hv x) { return f_k(c, 0, true, x); }
static tt_hv f_k1e(tt_lower_ctx *c, tt_hv x) { return f_k(c, 1, true, x); }
static tt_status lower_k0(tt_lower_ctx *c) { return float_math(c, f_k0); }
static tt_status lower_k1(tt_lower_ctx *c) { return float_math(c, f_k1); }
static tt_status lower_k0e(tt_lower_ctx *c) { return float_math(c, f_k0e); }
static tt_status lower_k1e(tt_lower_ctx *c) { return float_math(c, f_k1e); }

// --- Bessel functions of the first kind ----------------------------------------------------
//
// J0, J1: below |x| = 25 Bessel's integral J_n(x) = 1/pi int_0^pi cos(n t -
// x sin t) dt by the trapezoid rule on 64 points of the period (exact up to
// aliasing terms J_{64 +- n}(x), below 1e-12 there); above, Hankel's
// asymptotic expansion sqrt(2 / (pi x)) (P cos chi - Q sin chi), chi = x -
// (n/2 + 1/4) pi, with cos chi and sin chi from cos x and sin x (x - pi/4
// would round away x's last bits). Accurate in absolute terms (~1e-7), like
// PyTorch's approximations near the zeros; float64 falls back to the CPU.

enum { kJPoints = 64, kJAsym = 8 };

static tt_hv j_integral(tt_lower_ctx *c, int nu, tt_hv x) {
  tt_hv sum = k(c, x, 0);
  for (int j = 0; j <= kJPoints / 2; j++) {
    double t = 2 * M_PI * j / kJPoints, w = (j == 0 || j == kJPoints / 2) ? 0.5 : 1;
    tt_hv a = sub_(c, k(c, x, nu * t), mul_(c, x, k(c, x, sin(t))));
    sum = add_(c, sum, mul_(c, un(c, TT_HLO_COS, a), k(c, x, w)));
  }
  return mul_(c, sum, k(c, x, 2.0 / kJPoints));
}

// For large a = |x|: J_nu(a), or Y_nu(a) when `second`, from `terms` (at
// most kHankelMax) terms each of P and Q.
enum { kHankelMax = 16 };
static tt_hv hankel_asym(tt_lower_ctx *c, int nu, bool second, int terms, tt_hv a) {
  double mu = 4.0 * nu * nu, pc[kHankelMax], qc[kHankelMax];
  double t = 1;  // prod_{j<=m} (mu - (2j-1)^2) / (j 8), alternately into Q and P
  for (int m = 0; m < 2 * terms; m++) {
    if (m) t *= (mu - (2.0 * m - 1) * (2.0 * m - 1)) / (8.0 * m);
    double s = (m / 2) % 2 ? -1 : 1;
    if (m % 2) qc[m / 2] = s * t; else pc[m / 2] = s * t;
  }
  tt_hv u = div_(c, k(c, a, 1), a), u2 = mul_(c, u, u);
  tt_hv p = poly(c, u2, pc, terms), q = mul_(c, poly(c, u2, qc, terms), u);
  tt_hv cs = un(c, TT_HLO_COS, a), sn = un(c, TT_HLO_SIN, a);
  // chi = a - pi/4 (nu = 0) or a - 3pi/4 (nu = 1), times sqrt(2).
  tt_hv cchi = nu ? sub_(c, sn, cs) : add_(c, cs, sn);
  tt_hv schi = nu ? un(c, TT_HLO_NEG, add_(c, sn, cs)) : sub_(c, sn, cs);
  // J = P cos chi - Q sin chi, Y = P sin chi + Q cos chi (DLMF 10.17.3-4).
  tt_hv r = second ? add_(c, mul_(c, p, schi), mul_(c, q, cchi))
                   : sub_(c, mul_(c, p, cchi), mul_(c, q, schi));
  return mul_(c, r, un(c, TT_HLO_SQRT, mul_(c, u, k(c, u, 1 / M_PI))));  // sqrt(2/(pi a)) / sqrt(2)
}

static tt_hv f_j(tt_lower_ctx *c, int nu, tt_hv x) {
  const double kSplit = 25;
  tt_hv a = un(c, TT_HLO_ABS, x);
  tt_hv small = cmp(c, TT_HLO_LT, a, k(c, a, kSplit));
  tt_hv xs = sel(c, small, x, k(c, x, 0));
  tt_hv al = sel(c, small, k(c, a, kSplit), a);
  tt_hv l = hankel_asym(c, nu, false, kJAsym, al);
  if (nu) l = sel(c, cmp(c, TT_HLO_LT, x, k(c, x, 0)), un(c, TT_HLO_NEG, l), l);
  tt_hv r = sel(c, small, j_integral(c, nu, xs), l);
  return sel(c, cmp(c, TT_HLO_NE, x, x), x, r);  // +-inf: NaN, as PyTorch's
}

static tt_hv f_j0(tt_lower_ctx *c, tt_hv x) { return f_j(c, 0, x); }
static tt_hv f_j1(tt_lower_ctx *c, tt_hv x) { return f_j(c, 1, x); }
// Float32 precision only (the asymptotic series stops near 1e-7 at 25).
static tt_status j_rule(tt_lower_ctx *c, math_fn f) {
  if (tt_opmath(tt_lower_tensor_type(c, 0, -1).dtype) == TT_F64)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "float64 (float32 accuracy only)");
  return float_math(c, f);
}
static tt_status lower_j0(tt_lower_ctx *c) { return j_rule(c, f_j0); }
static tt_status lower_j1(tt_lower_ctx *c) { return j_rule(c, f_j1); }

// --- Bessel functions of the second kind ---------------------------------------------------
//
// Y0, Y1 for 0 < x < 25 from Neumann's expansion (A&S 9.1.88)
//   Y0 = (2/pi)(ln(x/2) + gamma) J0 - (4/pi) sum_k (-1)^k J_2k / k
// and its derivative (Y1 = -Y0', J_n' = (J_{n-1} - J_{n+1}) / 2):
//   Y1 = -(2/(pi x)) J0 + (2/pi)(ln(x/2) + gamma) J1
//        + (2/pi) sum_k (-1)^k (J_{2k-1} - J_{2k+1}) / k.
// Every J_n comes from Bessel's integral by the trapezoid rule on the same
// kYPoints points t_i of the period, J_n = 1/N sum_i [cos(n t_i) cos(x sin t_i)
// + sin(n t_i) sin(x sin t_i)], so each whole sum is one weighted sum of
// cos(x s_r), sin(x s_r) over the kYPoints/4 + 1 distinct |sin t_i| = s_r, with
// weights folded here in double. Unlike the power series this has no
// cancellation (the J_n are bounded, the weights ~1/k); J_n(18) < 1e-17 beyond
// n = 2 kYTerms + 1 and the trapezoid's aliases J_{N-n} are smaller still, so
// it holds float64 accuracy. From 18, Hankel's expansion (as for J) to 14
// terms each (its terms fall to 1e-16 there); kYPoints and kYTerms fit 18.
// Float32 computes in float32 with 64 points, 15 terms and Hankel from 12
// (J_n(12) < 1e-9 beyond n = 31; Hankel's 16 terms reach 4e-11 there): half
// the cos / sin of float64's, within 3e-6 absolute of SciPy's on [0, 60] (x
// sin t rounds to float32; the OpInfo tolerance is 1e-5). Float64: 1e-13.

enum { kYPoints = 96, kYTerms = 25, kYSums = kYPoints / 4 + 1, kYAsym = 14 };
enum { kYPoints32 = 64, kYTerms32 = 15 };

typedef struct {
  double a[kYSums], b[kYSums];  // weights of cos(x s_r), sin(x s_r)
} y_weights;

// Adds w J_n's trapezoid weights on `pts` points (a multiple of 4) into *y.
static void add_jn(y_weights *y, int pts, int n, double w) {
  for (int i = 0; i < pts; i++) {
    double t = 2 * M_PI * i / pts;
    int r = i % (pts / 2);
    if (r > pts / 4) r = pts / 2 - r;  // sin(pi - t) = sin t
    double sign = i < pts / 2 ? 1 : -1;  // sin(t + pi) = -sin t
    y->a[r] += w * cos(n * t) / pts;
    y->b[r] += w * sign * sin(n * t) / pts;
  }
}

static tt_hv y_sum(tt_lower_ctx *c, const y_weights *y, int sums, const tt_hv *cs,
                   const tt_hv *sn) {
  tt_hv r = k(c, cs[0], 0);
  for (int i = 0; i < sums; i++) {
    if (y->a[i] != 0) r = add_(c, r, mul_(c, cs[i], k(c, cs[i], y->a[i])));
    if (fabs(y->b[i]) > 1e-300) r = add_(c, r, mul_(c, sn[i], k(c, sn[i], y->b[i])));
  }
  return r;
}

// Y_nu by Neumann's expansion (`terms` of its sum, on `pts` points).
static tt_hv y_neumann(tt_lower_ctx *c, int nu, int pts, int terms, tt_hv x) {
  const double kEuler = 0.57721566490153286;
  int sums = pts / 4 + 1;
  y_weights j0 = {0}, jn = {0}, rest = {0};
  add_jn(&j0, pts, 0, 1);
  add_jn(&jn, pts, nu, 1);
  for (int kk = 1; kk <= terms; kk++) {
    double s = kk % 2 ? -1.0 : 1.0;
    if (nu == 0) {
      add_jn(&rest, pts, 2 * kk, -4 / M_PI * s / kk);
    } else {
      add_jn(&rest, pts, 2 * kk - 1, 2 / M_PI * s / kk);
      add_jn(&rest, pts, 2 * kk + 1, -2 / M_PI * s / kk);
    }
  }
  tt_hv cs[kYSums], sn[kYSums];
  for (int i = 0; i < sums; i++) {
    tt_hv a = mul_(c, x, k(c, x, sin(2 * M_PI * i / pts)));
    cs[i] = un(c, TT_HLO_COS, a);
    sn[i] = un(c, TT_HLO_SIN, a);
  }
  tt_hv lg = mul_(c, add_(c, un(c, TT_HLO_LOG, mul_(c, x, k(c, x, 0.5))), k(c, x, kEuler)),
                  k(c, x, 2 / M_PI));
  tt_hv r = add_(c, mul_(c, lg, y_sum(c, &jn, sums, cs, sn)), y_sum(c, &rest, sums, cs, sn));
  if (nu) r = sub_(c, r, div_(c, mul_(c, y_sum(c, &j0, sums, cs, sn), k(c, x, 2 / M_PI)), x));
  return r;
}

// Y0 / Y1: -inf at +-0, NaN below 0 and at +inf (as PyTorch's).
static tt_hv f_y(tt_lower_ctx *c, int nu, tt_hv x) {
  bool f64 = tt_lower_type(c, x).dtype == TT_F64;
  double kSplit = f64 ? 18 : 12;
  tt_hv small = cmp(c, TT_HLO_LT, x, k(c, x, kSplit));
  tt_hv xs = sel(c, small, x, k(c, x, 1));
  tt_hv xl = sel(c, small, k(c, x, kSplit), x);
  tt_hv ys = y_neumann(c, nu, f64 ? kYPoints : kYPoints32, f64 ? kYTerms : kYTerms32, xs);
  tt_hv r = sel(c, small, ys, hankel_asym(c, nu, true, f64 ? kYAsym : kJAsym, xl));
  r = sel(c, cmp(c, TT_HLO_EQ, x, k(c, x, 0)), k(c, x, -INFINITY), r);
  return sel(c, cmp(c, TT_HLO_LT, x, k(c, x, 0)), k(c, x, NAN), r);
}

static tt_hv f_y0(tt_lower_ctx *c, tt_hv x) { return f_y(c, 0, x); }
static tt_hv f_y1(tt_lower_ctx *c, tt_hv x) { return f_y(c, 1, x); }
static tt_status lower_y0(tt_lower_ctx *c) { return float_math(c, f_y0); }
static tt_status lower_y1(tt_lower_ctx *c) { return float_math(c, f_y1); }

// --- Airy function Ai ------------------------------------------------------------------------
//
// Four ranges (DLMF 9.4, 9.6, 9.7), errors measured against mpmath:
//   -7 <= x <= 1: Maclaurin series c1 f(x) - c2 g(x) (9.4.1-3); its terms
//     grow like e^zeta, zeta = (2/3)|x|^(3/2), so at -7 it keeps ~1e-12;
//   1 < x < 9.5: Ai = (1/pi) sqrt(x/3) K_1/3(zeta) (9.6.1) with e^zeta K_nu
//     by the trapezoid rule as for K0 / K1 (step 1/8 to 6.5: all terms
//     positive, ~5e-15 relative);
//   x >= 9.5: e^-zeta / (2 sqrt(pi) x^(1/4)) sum (-1)^k u_k zeta^-k (9.7.5);
//   x < -7: the oscillating expansion (9.7.9), ~5e-14 at -7.
// Always in float64: in float32 the series would lose e^zeta ~ 2e5 at -7
// (and the seams move inward where no expansion reaches 1e-6). Like the
// CPU: NaN at +-inf, exactly 0 above 103.892.

enum { kAiSeries = 32, kAiSteps = 52, kAiPos = 20, kAiNeg = 12 };

static const double kAi0 = 0.355028053887817239, kAip0 = 0.258819403792806798;

// u_0 .. u_{n-1} of DLMF 9.7.2.
static void airy_u(double *u, int n) {
  u[0] = 1;
  for (int i = 1; i < n; i++)
    u[i] = u[i - 1] * (6.0 * i - 5) * (6.0 * i - 3) * (6.0 * i - 1) / ((2.0 * i - 1) * 216 * i);
}

static tt_hv airy_series(tt_lower_ctx *c, tt_hv x) {
  double fc[kAiSeries], gc[kAiSeries];
  fc[0] = gc[0] = 1;
  for (int i = 1; i < kAiSeries; i++) {
    fc[i] = fc[i - 1] / ((3.0 * i - 1) * (3.0 * i));
    gc[i] = gc[i - 1] / ((3.0 * i) * (3.0 * i + 1));
  }
  tt_hv z = mul_(c, mul_(c, x, x), x);
  tt_hv f = poly(c, z, fc, kAiSeries), g = mul_(c, poly(c, z, gc, kAiSeries), x);
  return sub_(c, mul_(c, f, k(c, f, kAi0)), mul_(c, g, k(c, g, kAip0)));
}

static tt_hv zeta_of(tt_lower_ctx *c, tt_hv a) {  // (2/3) a^(3/2)
  return mul_(c, mul_(c, a, un(c, TT_HLO_SQRT, a)), k(c, a, 2.0 / 3));
}

static tt_hv airy_kint(tt_lower_ctx *c, tt_hv x) {
  const double step = 0.125;
  tt_hv zeta = zeta_of(c, x);
  tt_hv sum = k(c, x, 0.5);  // t = 0, weight 1/2
  for (int j = 1; j <= kAiSteps; j++) {
    double t = j * step;
    tt_hv e = un(c, TT_HLO_EXP, mul_(c, zeta, k(c, zeta, 1 - cosh(t))));
    sum = add_(c, sum, mul_(c, e, k(c, e, cosh(t / 3))));
  }
  tt_hv pre = mul_(c, un(c, TT_HLO_SQRT, mul_(c, x, k(c, x, 1.0 / 3))), k(c, x, step / M_PI));
  return mul_(c, mul_(c, sum, pre), un(c, TT_HLO_EXP, un(c, TT_HLO_NEG, zeta)));
}

static tt_hv airy_pos(tt_lower_ctx *c, tt_hv x) {
  double u[kAiPos];
  airy_u(u, kAiPos);
  for (int i = 1; i < kAiPos; i += 2) u[i] = -u[i];
  tt_hv zeta = zeta_of(c, x);
  tt_hv s = poly(c, div_(c, k(c, zeta, 1), zeta), u, kAiPos);
  tt_hv d = mul_(c, un(c, TT_HLO_SQRT, un(c, TT_HLO_SQRT, x)), k(c, x, 2 * sqrt(M_PI)));
  return div_(c, mul_(c, s, un(c, TT_HLO_EXP, un(c, TT_HLO_NEG, zeta))), d);
}

// For x < 0 (a = -x).
static tt_hv airy_neg(tt_lower_ctx *c, tt_hv a) {
  double u[2 * kAiNeg], pc[kAiNeg], qc[kAiNeg];
  airy_u(u, 2 * kAiNeg);
  for (int i = 0; i < kAiNeg; i++) {
    pc[i] = (i % 2 ? -1 : 1) * u[2 * i];
    qc[i] = (i % 2 ? -1 : 1) * u[2 * i + 1];
  }
  tt_hv zeta = zeta_of(c, a), w = div_(c, k(c, zeta, 1), zeta), w2 = mul_(c, w, w);
  tt_hv p = poly(c, w2, pc, kAiNeg), q = mul_(c, poly(c, w2, qc, kAiNeg), w);
  // cos(zeta - pi/4), sin(zeta - pi/4) times sqrt(2), from cos / sin of zeta.
  tt_hv cz = un(c, TT_HLO_COS, zeta), sz = un(c, TT_HLO_SIN, zeta);
  tt_hv r = add_(c, mul_(c, p, add_(c, cz, sz)), mul_(c, q, sub_(c, sz, cz)));
  tt_hv d = mul_(c, un(c, TT_HLO_SQRT, un(c, TT_HLO_SQRT, a)), k(c, a, sqrt(2 * M_PI)));
  return div_(c, r, d);
}

static tt_hv f_airy_ai(tt_lower_ctx *c, tt_hv x) {
  const double kNeg = -7, kInt = 1, kPos = 9.5, kZero = 103.892;
  tt_hv lt = cmp(c, TT_HLO_LT, x, k(c, x, kNeg));
  tt_hv le1 = cmp(c, TT_HLO_LE, x, k(c, x, kInt)), ltp = cmp(c, TT_HLO_LT, x, k(c, x, kPos));
  tt_hv r = sel(c, lt, airy_neg(c, un(c, TT_HLO_NEG, clamp_(c, x, -INFINITY, kNeg))),
                sel(c, le1, airy_series(c, clamp_(c, x, kNeg, kInt)),
                    sel(c, ltp, airy_kint(c, clamp_(c, x, kInt, kPos)),
                        airy_pos(c, clamp_(c, x, kPos, kZero)))));
  r = sel(c, cmp(c, TT_HLO_GT, x, k(c, x, kZero)), k(c, x, 0), r);
  r = sel(c, cmp(c, TT_HLO_EQ, un(c, TT_HLO_ABS, x), k(c, x, INFINITY)), k(c, x, NAN), r);
  return sel(c, cmp(c, TT_HLO_NE, x, x), x, r);
}

static tt_status lower_airy_ai(tt_lower_ctx *c) {
  tt_dtype rt;
  tt_hv x = tt_lower_convert(c, float_arg(c, 0, &rt), TT_F64);
  tt_lower_result(c, tt_lower_convert(c, f_airy_ai(c, x), rt));
  return NULL;
}

// --- table ------------------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
#define RC(name, fn) {"aten::" name, fn, TT_RULE_COMPLEX}  // complex-capable
// Functional, in-place and out= variants sharing one rule.
#define U(name, fn) R(name, fn), R(name "_", fn), R(name ".out", fn)
// special_<name>(x, n) with its Scalar x / Scalar n and out= overloads.
#define P(name, fn) R("special_" name, fn), R("special_" name ".out", fn), \
    R("special_" name ".x_scalar", fn), R("special_" name ".x_scalar_out", fn), \
    R("special_" name ".n_scalar", fn), R("special_" name ".n_scalar_out", fn)

static const tt_rule kRules[] = {
    U("lgamma", lower_lgamma), U("digamma", lower_digamma),
    R("polygamma", lower_polygamma), R("polygamma.out", lower_polygamma),
    R("polygamma_", lower_polygamma_),
    R("special_polygamma", lower_polygamma), R("special_polygamma.out", lower_polygamma),
    U("erfc", lower_erfc), U("erfinv", lower_erfinv),
    R("special_ndtri", lower_ndtri), R("special_ndtri.out", lower_ndtri),
    R("special_log_ndtr", lower_log_ndtr), R("special_log_ndtr.out", lower_log_ndtr),
    U("i0", lower_i0),
    R("special_i0e", lower_i0e), R("special_i0e.out", lower_i0e),
    R("special_i1", lower_i1), R("special_i1.out", lower_i1),
    R("special_i1e", lower_i1e), R("special_i1e.out", lower_i1e),
    U("igamma", lower_igamma), U("igammac", lower_igammac),
    R("nextafter", lower_nextafter), R("nextafter_", lower_nextafter),
    R("nextafter.out", lower_nextafter),
    R("frexp.Tensor", lower_frexp), R("frexp.Tensor_out", lower_frexp),
    RC("angle", lower_angle), RC("angle.out", lower_angle),
    RC("equal", lower_equal),
    R("aminmax", lower_aminmax), R("aminmax.out", lower_aminmax),
    R("isin.Tensor_Tensor", lower_isin), R("isin.Tensor_Tensor_out", lower_isin),
    R("isin.Tensor_Scalar", lower_isin), R("isin.Tensor_Scalar_out", lower_isin),
    R("isin.Scalar_Tensor", lower_isin), R("isin.Scalar_Tensor_out", lower_isin),
    R("bucketize.Tensor", lower_bucketize), R("bucketize.Tensor_out", lower_bucketize),
    R("bucketize.Scalar", lower_bucketize), R("bucketize.Scalar_out", lower_bucketize),
    R("searchsorted.Tensor", lower_searchsorted), R("searchsorted.Tensor_out", lower_searchsorted),
    R("searchsorted.Scalar", lower_searchsorted), R("searchsorted.Scalar_out", lower_searchsorted),
    R("special_modified_bessel_i0", lower_i0), R("special_modified_bessel_i0.out", lower_i0),
    R("special_modified_bessel_i1", lower_i1), R("special_modified_bessel_i1.out", lower_i1),
    R("special_modified_bessel_k0", lower_k0), R("special_modified_bessel_k0.out", lower_k0),
    R("special_modified_bessel_k1", lower_k1), R("special_modified_bessel_k1.out", lower_k1),
    R("special_scaled_modified_bessel_k0", lower_k0e),
    R("special_scaled_modified_bessel_k0.out", lower_k0e),
    R("special_scaled_modified_bessel_k1", lower_k1e),
    R("special_scaled_modified_bessel_k1.out", lower_k1e),
    R("special_bessel_j0", lower_j0), R("special_bessel_j0.out", lower_j0),
    R("special_bessel_j1", lower_j1), R("special_bessel_j1.out", lower_j1),
    R("special_bessel_y0", lower_y0), R("special_bessel_y0.out", lower_y0),
    R("special_bessel_y1", lower_y1), R("special_bessel_y1.out", lower_y1),
    R("special_airy_ai", lower_airy_ai), R("special_airy_ai.out", lower_airy_ai),
    R("special_zeta", lower_zeta), R("special_zeta.out", lower_zeta),
    R("special_zeta.self_scalar", lower_zeta), R("special_zeta.self_scalar_out", lower_zeta),
    R("special_zeta.other_scalar", lower_zeta), R("special_zeta.other_scalar_out", lower_zeta),
    R("special_entr", lower_entr), R("special_entr.out", lower_entr),
    R("special_erfcx", lower_erfcx), R("special_erfcx.out", lower_erfcx),
    R("special_spherical_bessel_j0", lower_sph_j0),
    R("special_spherical_bessel_j0.out", lower_sph_j0),
    P("chebyshev_polynomial_t", lower_cheb_t), P("chebyshev_polynomial_u", lower_cheb_u),
    P("chebyshev_polynomial_v", lower_cheb_v), P("chebyshev_polynomial_w", lower_cheb_w),
    P("shifted_chebyshev_polynomial_t", lower_scheb_t),
    P("shifted_chebyshev_polynomial_u", lower_scheb_u),
    P("shifted_chebyshev_polynomial_v", lower_scheb_v),
    P("shifted_chebyshev_polynomial_w", lower_scheb_w),
    P("hermite_polynomial_h", lower_hermite_h), P("hermite_polynomial_he", lower_hermite_he),
    P("laguerre_polynomial_l", lower_laguerre), P("legendre_polynomial_p", lower_legendre),
};
#undef P
#undef R
#undef RC
#undef U

const tt_rule_table tt_rules_special = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
