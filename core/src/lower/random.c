// random.c — in-place samplers: uniform_, normal_ (Box–Muller), random_
// (integers in a range), bernoulli_ (scalar or tensor p), and their
// functional forms. Bits come from stablehlo.rng_bit_generator (THREE_FRY)
// keyed by the generator's (seed, offset), a runtime argument, so a new draw
// never recompiles; each call advances the offset by the numbers it drew.
//
// The streams are not PyTorch's (no backend reproduces the CPU generator's
// Mersenne Twister); the distributions are.
//
// Also randperm (random keys sorted), and gamma and Dirichlet samples
// (Marsaglia-Tsang with all candidates drawn at once).
//
// Leaves out: exponential_, geometric_, log_normal_, cauchy_, multinomial.
#include <inttypes.h>
#include <math.h>

#include "lower/lower.h"

static tt_hv k(tt_lower_ctx *c, tt_hv like, double v) {
  return tt_lower_splat_like(c, like, v);
}

// The tensor the sampler fills: the destination (in-place) or self.
static tt_hlo_type target_type(const tt_lower_ctx *c) {
  tt_hlo_type t;
  if (!tt_lower_dest_type(c, 0, &t)) t = tt_lower_tensor_type(c, 0, -1);
  return t;
}

// `bits` (TT_U32 or TT_U64) of the given shape, drawn with the generator in
// argument gen_arg.
static tt_hv draw(tt_lower_ctx *c, int gen_arg, tt_dtype bits, int rank, const int64_t *dims) {
  tt_hlo_type t = tt_hlo_make_type(bits, rank, dims);
  tt_hv state = tt_lower_rng_state(c, gen_arg, (uint64_t)tt_hlo_numel(&t));
  return tt_hlo_rng_bits(tt_lower_hlo(c), state, &t);
}

// Uniform [0, 1) in f32 or f64, shaped dims: k * 2^-24 (2^-53) for k of 24
// (53) random bits, as PyTorch's uniform_real draws them.
static tt_hv uniform01(tt_lower_ctx *c, int gen_arg, tt_dtype d, int rank, const int64_t *dims) {
  tt_hlo *b = tt_lower_hlo(c);
  bool wide = d == TT_F64;
  tt_hv u = draw(c, gen_arg, wide ? TT_U64 : TT_U32, rank, dims);
  tt_hv top = tt_lower_bin(c, TT_HLO_SHR_L, u, tt_lower_splat_like(c, u, wide ? 11 : 8));
  tt_hv f = tt_hlo_convert(b, top, wide ? TT_F64 : TT_F32);  // exact: < 2^24 (2^53)
  return tt_lower_bin(c, TT_HLO_MUL, f, k(c, f, wide ? 0x1p-53 : 0x1p-24));
}

// The dtype sampling math happens in for a float target.
static tt_dtype sample_dtype(tt_dtype d) { return d == TT_F64 ? TT_F64 : TT_F32; }

static tt_status need_float(const tt_lower_ctx *c, tt_dtype d) {
  if (tt_dtype_is_float(d)) return NULL;
  return tt_lower_fail(c, TT_UNIMPLEMENTED, "sampling a %s tensor", tt_dtype_name(d));
}

// --- uniform_, normal_ ---------------------------------------------------------------------

// uniform_(self, from=0, to=1, *, generator): from + (to - from) * U[0, 1),
// computed in f32 (f64) and rounded to self's dtype; a value that rounds to
// `to` is `from` instead, as PyTorch's CPU kernel does (in float16 about one
// draw in 4,096 of uniform_(0, 1) would be 1.0; in 2,048 of (-9, 9), 9.0).
static tt_status lower_uniform(tt_lower_ctx *c) {
  tt_hlo_type t = target_type(c);
  TT_RETURN_IF_ERROR(need_float(c, t.dtype));
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype sd = sample_dtype(t.dtype);
  tt_hv u = uniform01(c, 3, sd, t.rank, t.dims);
  tt_hv lo = tt_lower_is_none(c, 1) ? tt_hlo_const(b, sd, 0) : tt_lower_scalar(c, 1, sd);
  tt_hv hi = tt_lower_is_none(c, 2) ? tt_hlo_const(b, sd, 1) : tt_lower_scalar(c, 2, sd);
  tt_hv span = tt_lower_broadcast_to(c, tt_lower_bin(c, TT_HLO_SUB, hi, lo), t.rank, t.dims);
  tt_hv r = tt_lower_bin(c, TT_HLO_ADD, tt_lower_broadcast_to(c, lo, t.rank, t.dims),
                tt_lower_bin(c, TT_HLO_MUL, span, u));
  // Compared in the result's type (XLA's CPU backend would compare the
  // unrounded f32 value of a 16-bit one).
  tt_hv vr = tt_lower_rounded16(c, tt_hlo_convert(b, r, t.dtype));
  tt_hv to = tt_lower_broadcast_to(c, tt_hlo_convert(b, hi, t.dtype), t.rank, t.dims);
  tt_hv from = tt_lower_broadcast_to(c, tt_hlo_convert(b, lo, t.dtype), t.rank, t.dims);
  tt_lower_result(c, tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_EQ, vr, to), from, vr));
  return NULL;
}

// A standard normal from two uniform draws of the same shape (Box-Muller):
// sqrt(-2 ln(1 - u1)) cos(2 pi u2).
static tt_hv box_muller(tt_lower_ctx *c, tt_hv u1, tt_hv u2) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv r = tt_hlo_unary(b, TT_HLO_SQRT, tt_lower_bin(c, TT_HLO_MUL, k(c, u1, -2),
                         tt_hlo_unary(b, TT_HLO_LOG, tt_lower_bin(c, TT_HLO_SUB, k(c, u1, 1), u1))));
  return tt_lower_bin(c, TT_HLO_MUL, r, tt_hlo_unary(b, TT_HLO_COS,
                      tt_lower_bin(c, TT_HLO_MUL, k(c, u2, 6.28318530717958647692), u2)));
}

// normal_(self, mean=0, std=1, *, generator): Box–Muller on two uniform
// draws per element, z = sqrt(-2 ln(1 - u1)) cos(2 pi u2).
static tt_status lower_normal(tt_lower_ctx *c) {
  tt_hlo_type t = target_type(c);
  TT_RETURN_IF_ERROR(need_float(c, t.dtype));
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype sd = sample_dtype(t.dtype);
  int64_t n = tt_hlo_numel(&t), two[2] = {2, n};
  tt_hv u = uniform01(c, 3, sd, 2, two);
  int64_t s0[2] = {0, 0}, s1[2] = {1, 0}, l0[2] = {1, n}, l1[2] = {2, n}, st[2] = {1, 1};
  tt_hv u1 = tt_hlo_reshape(b, tt_hlo_slice(b, u, s0, l0, st), t.rank, t.dims);
  tt_hv u2 = tt_hlo_reshape(b, tt_hlo_slice(b, u, s1, l1, st), t.rank, t.dims);
  tt_hv z = box_muller(c, u1, u2);
  tt_hv mean = tt_lower_is_none(c, 1) ? tt_hlo_const(b, sd, 0) : tt_lower_scalar(c, 1, sd);
  tt_hv std = tt_lower_is_none(c, 2) ? tt_hlo_const(b, sd, 1) : tt_lower_scalar(c, 2, sd);
  z = tt_lower_bin(c, TT_HLO_MUL, z, tt_lower_broadcast_to(c, std, t.rank, t.dims));
  z = tt_lower_bin(c, TT_HLO_ADD, z, tt_lower_broadcast_to(c, mean, t.rank, t.dims));
  tt_lower_result(c, tt_hlo_convert(b, z, t.dtype));
  return NULL;
}

// --- random_ ------------------------------------------------------------------------------------

// The largest value random_ draws for dtype d when no upper bound is given:
// 2^mantissa digits for floats (every integer below is exact), the type's
// maximum for integers.
static int64_t random_max(tt_dtype d) {
  switch (d) {
    case TT_BOOL: return 1;
    case TT_F16: return INT64_C(1) << 11;
    case TT_BF16: return INT64_C(1) << 8;
    case TT_F32: return INT64_C(1) << 24;
    case TT_F64: return INT64_C(1) << 53;
    case TT_U8: return 255;
    case TT_I8: return 127;
    case TT_I16: case TT_U16: return d == TT_I16 ? 32767 : 65535;
    case TT_I32: return 2147483647;
    case TT_U32: return INT64_C(4294967295);
    default: return INT64_MAX;
  }
}

// Integers uniform in [from, from + range) (range 0 means 2^64) from 64-bit
// draws, converted to the target dtype. The modulo bias is below 2^-32 for
// ranges under 2^32.
static tt_status random_range(tt_lower_ctx *c, int gen_arg, int64_t from, uint64_t range) {
  tt_hlo_type t = target_type(c);
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv u = draw(c, gen_arg, TT_U64, t.rank, t.dims);
  tt_hlo_type ut = tt_hlo_make_type(TT_U64, t.rank, t.dims);
  if (range != 0) u = tt_lower_bin(c, TT_HLO_REM, u, tt_hlo_splat_i(b, &ut, (int64_t)range));
  tt_hv v = tt_hlo_bitcast(b, u, TT_I64);  // wraps like two's complement
  ut.dtype = TT_I64;
  v = tt_lower_bin(c, TT_HLO_ADD, v, tt_hlo_splat_i(b, &ut, from));
  tt_lower_result(c, tt_hlo_convert(b, v, t.dtype));
  return NULL;
}

// PyTorch's check_from_to_in_range: from and to_inc must fit the dtype
// (int64 takes every int64, so it is not checked).
static tt_status check_random_bounds(tt_lower_ctx *c, int64_t from, int64_t to_inc) {
  tt_dtype d = target_type(c).dtype;
  if (d == TT_I64 || d == TT_U64) return NULL;
  double lo, hi;
  tt_dtype_bounds(d, &lo, &hi);
  if ((double)from < lo || (double)from > hi)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "from is out of bounds for %s",
                         tt_dtype_cpp_name(d));
  if ((double)to_inc < lo || (double)to_inc > hi)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "to - 1 is out of bounds for %s",
                         tt_dtype_cpp_name(d));
  return NULL;
}

// [from, to) with PyTorch's checks; random_.from and random_.to.
static tt_status random_from_to(tt_lower_ctx *c, int gen_arg, int64_t from, int64_t to) {
  if (from >= to)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "random_ expects 'from' to be less than "
                         "'to', but got from=%" PRId64 " >= to=%" PRId64, from, to);
  TT_RETURN_IF_ERROR(check_random_bounds(c, from, to - 1));
  return random_range(c, gen_arg, from, (uint64_t)to - (uint64_t)from);
}

// random_.from(self, from, to=None, *, generator): [from, to), or up to
// random_max inclusive.
static tt_status lower_random_from(tt_lower_ctx *c) {
  int64_t from = tt_lower_int(c, 1);
  if (!tt_lower_is_none(c, 2)) return random_from_to(c, 3, from, tt_lower_int(c, 2));
  if (from == INT64_MIN) return random_range(c, 3, from, 0);  // all of int64
  int64_t max = random_max(target_type(c).dtype);
  TT_RETURN_IF_ERROR(check_random_bounds(c, from, max));
  if (from > max)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "random_ expects 'from' casted to dtype to "
                         "be less than or equal to 'to_inc' casted to dtype, but got from=%"
                         PRId64 " > to_inc=%" PRId64, from, max);
  return random_range(c, 3, from, (uint64_t)max - (uint64_t)from + 1);
}

// random_.to(self, to, *, generator): [0, to).
static tt_status lower_random_to(tt_lower_ctx *c) {
  return random_from_to(c, 2, 0, tt_lower_int(c, 1));
}

// random_(self, *, generator): [0, random_max] inclusive.
static tt_status lower_random(tt_lower_ctx *c) {
  return random_range(c, 1, 0, (uint64_t)random_max(target_type(c).dtype) + 1);
}

// --- bernoulli_ ----------------------------------------------------------------------------------

// bernoulli_(self, p, *, generator): 1 where U[0, 1) < p. p is a Scalar
// (default 0.5) or a tensor broadcast to self.
static tt_status lower_bernoulli(tt_lower_ctx *c) {
  tt_hlo_type t = target_type(c);
  tt_hlo *b = tt_lower_hlo(c);
  const tt_value *pv = tt_lower_arg(c, 1);
  bool wide = t.dtype == TT_F64 ||
              (pv->kind == TT_VALUE_TENSOR && pv->u.tensor.dtype == TT_F64);
  tt_dtype sd = wide ? TT_F64 : TT_F32;
  tt_hv p = tt_lower_is_none(c, 1) ? tt_hlo_const(b, sd, 0.5) : tt_lower_operand(c, 1, sd);
  p = tt_lower_broadcast_to(c, p, t.rank, t.dims);
  tt_hv u = uniform01(c, 2, sd, t.rank, t.dims);
  tt_lower_allow_any_cast(c);  // the bool draw goes into any dtype
  tt_lower_result(c, tt_hlo_convert(b, tt_hlo_compare(b, TT_HLO_LT, u, p), t.dtype));
  return NULL;
}

// --- gamma and dirichlet -----------------------------------------------------------------------
//
// _standard_gamma(alpha, *, generator): PyTorch's sample_gamma, Marsaglia
// and Tsang's rejection method, alpha < 1 boosted to alpha + 1 and scaled by
// U^(1/alpha). Instead of its loop, kGammaTries candidates per element are
// drawn at once and the first accepted one is taken: each is accepted with
// probability above 0.95 (alpha >= 1 after the boost), so all of them
// failing (the last is then taken) has probability below 1e-20. Results
// below the dtype's smallest normal become it, as on the CPU.
enum { kGammaTries = 16 };

// Smallest positive normal and epsilon of a float dtype.
static void float_limits(tt_dtype d, double *tiny, double *eps) {
  switch (d) {
    case TT_F16: *tiny = 0x1p-14, *eps = 0x1p-10; break;
    case TT_BF16: *tiny = 0x1p-126, *eps = 0x1p-7; break;
    case TT_F64: *tiny = 0x1p-1022, *eps = 0x1p-52; break;
    default: *tiny = 0x1p-126, *eps = 0x1p-23; break;
  }
}

// Row r of a [rows, n] value, as [n].
static tt_hv row(tt_hlo *b, tt_hv x, int64_t r, int64_t n) {
  int64_t s0[2] = {r, 0}, l0[2] = {r + 1, n}, st[2] = {1, 1};
  return tt_hlo_reshape(b, tt_hlo_slice(b, x, s0, l0, st), 1, &n);
}

// Gamma(alpha, 1) samples of flat alpha [n] (dtype sd), drawn with the
// generator in argument gen_arg; 0 where alpha is 0.
static tt_hv gamma_flat(tt_lower_ctx *c, tt_hv alpha, int64_t n, tt_dtype sd, int gen_arg) {
  tt_hlo *b = tt_lower_hlo(c);
  const int64_t kt = kGammaTries;
  int64_t all[2] = {3 * kt + 1, n}, kn[2] = {kt, n};
  tt_hv u = uniform01(c, gen_arg, sd, 2, all);
  int64_t st[2] = {1, 1};
  tt_hv part[3];
  for (int i = 0; i < 3; i++) {
    int64_t lo[2] = {i * kt, 0}, hi[2] = {(i + 1) * kt, n};
    part[i] = tt_hlo_slice(b, u, lo, hi, st);
  }
  tt_hv a = tt_hlo_broadcast_in_dim(b, alpha, 2, kn, (int64_t[1]){1});
  tt_hv small = tt_hlo_compare(b, TT_HLO_LT, a, k(c, a, 1));
  tt_hv boosted = tt_hlo_select(b, small, tt_lower_bin(c, TT_HLO_ADD, a, k(c, a, 1)), a);
  tt_hv d = tt_lower_bin(c, TT_HLO_SUB, boosted, k(c, a, 1.0 / 3.0));
  tt_hv cc = tt_lower_bin(c, TT_HLO_DIV, k(c, a, 1),
                          tt_hlo_unary(b, TT_HLO_SQRT, tt_lower_bin(c, TT_HLO_MUL, k(c, a, 9), d)));
  tt_hv x = box_muller(c, part[0], part[1]);  // standard normals, as normal_ draws them
  tt_hv y = tt_lower_bin(c, TT_HLO_ADD, k(c, a, 1), tt_lower_bin(c, TT_HLO_MUL, cc, x));
  tt_hv v = tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_MUL, y, y), y);
  tt_hv uu = tt_lower_bin(c, TT_HLO_SUB, k(c, a, 1), part[2]);  // in (0, 1]
  tt_hv xx = tt_lower_bin(c, TT_HLO_MUL, x, x);
  tt_hv squeeze = tt_hlo_compare(b, TT_HLO_LT, uu, tt_lower_bin(c, TT_HLO_SUB, k(c, a, 1),
                      tt_lower_bin(c, TT_HLO_MUL, k(c, a, 0.0331), tt_lower_bin(c, TT_HLO_MUL, xx, xx))));
  tt_hv logv = tt_hlo_unary(b, TT_HLO_LOG, v);
  tt_hv bound = tt_lower_bin(c, TT_HLO_ADD, tt_lower_bin(c, TT_HLO_MUL, k(c, a, 0.5), xx),
                    tt_lower_bin(c, TT_HLO_MUL, d, tt_lower_bin(c, TT_HLO_ADD,
                        tt_lower_bin(c, TT_HLO_SUB, k(c, a, 1), v), logv)));
  tt_hv full = tt_hlo_compare(b, TT_HLO_LT, tt_hlo_unary(b, TT_HLO_LOG, uu), bound);
  tt_hv ok = tt_lower_bin(c, TT_HLO_AND, tt_hlo_compare(b, TT_HLO_GT, y, k(c, a, 0)),
                          tt_lower_bin(c, TT_HLO_OR, squeeze, full));
  tt_hv cand = tt_lower_bin(c, TT_HLO_MUL, d, v);
  // The first accepted candidate (the last one when none is).
  tt_hv pick = row(b, cand, kt - 1, n);
  for (int64_t r = kt - 2; r >= 0; r--)
    pick = tt_hlo_select(b, row(b, ok, r, n), row(b, cand, r, n), pick);
  tt_hv ub = row(b, u, 3 * kt, n);
  tt_hv boost = tt_lower_bin(c, TT_HLO_POW, tt_lower_bin(c, TT_HLO_SUB, k(c, ub, 1), ub),
                             tt_lower_bin(c, TT_HLO_DIV, k(c, alpha, 1), alpha));
  tt_hv is_small = tt_hlo_compare(b, TT_HLO_LT, alpha, k(c, alpha, 1));
  tt_hv r = tt_lower_bin(c, TT_HLO_MUL, tt_hlo_select(b, is_small, boost, k(c, alpha, 1)), pick);
  return tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_EQ, alpha, k(c, alpha, 0)), k(c, alpha, 0), r);
}

static tt_status lower_standard_gamma(tt_lower_ctx *c) {
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  TT_RETURN_IF_ERROR(need_float(c, t.dtype));
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype sd = sample_dtype(t.dtype);
  int64_t n = tt_hlo_numel(&t);
  tt_hv alpha = tt_hlo_reshape(b, tt_hlo_convert(b, tt_lower_tensor(c, 0), sd), 1, &n);
  double tiny, eps;
  float_limits(t.dtype, &tiny, &eps);
  tt_hv g = n ? gamma_flat(c, alpha, n, sd, 1) : alpha;
  g = tt_hlo_convert(b, tt_hlo_reshape(b, g, t.rank, t.dims), t.dtype);
  tt_lower_result(c, tt_lower_bin(c, TT_HLO_MAX, g, k(c, g, tiny)));
  return NULL;
}

// _sample_dirichlet(alpha, *, generator): gamma samples (in float64 where
// the device has it, as the CPU draws them) normalised along the last dim,
// then kept in [smallest normal, 1 - eps] of alpha's dtype.
static tt_status lower_sample_dirichlet(tt_lower_ctx *c) {
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  TT_RETURN_IF_ERROR(need_float(c, t.dtype));
  if (t.rank < 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "dirichlet needs at least 1 dim, got a 0-d alpha");
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype sd = tt_lower_supports_f64(c) ? TT_F64 : TT_F32;
  int64_t n = tt_hlo_numel(&t);
  double tiny, eps, tiny_sd, eps_sd;
  float_limits(t.dtype, &tiny, &eps);
  float_limits(sd, &tiny_sd, &eps_sd);
  tt_hv alpha = tt_hlo_reshape(b, tt_hlo_convert(b, tt_lower_tensor(c, 0), sd), 1, &n);
  tt_hv g = n ? gamma_flat(c, alpha, n, sd, 1) : alpha;
  g = tt_hlo_reshape(b, g, t.rank, t.dims);
  g = tt_lower_bin(c, TT_HLO_MAX, g, k(c, g, tiny_sd));
  bool last[TT_MAX_RANK] = {false};
  last[t.rank - 1] = true;
  tt_hv sum = tt_lower_reduce(c, g, last, true, TT_HLO_REDUCE_ADD);
  tt_hv r = tt_hlo_convert(b, tt_lower_bin(c, TT_HLO_DIV, g, tt_lower_expand_like(c, sum, g)), t.dtype);
  r = tt_hlo_clamp(b, k(c, r, tiny), r, k(c, r, 1 - eps));
  tt_lower_result(c, r);
  return NULL;
}

// --- randperm ------------------------------------------------------------------------------------

// PyTorch's check_supported_max_int_with_precision: n - 1 must fit out's
// dtype, and a float dtype must hold every integer up to n.
static tt_status check_randperm_n(tt_lower_ctx *c, int64_t n, tt_dtype d) {
  if (n < 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "n must be non-negative, got%" PRId64, n);
  double lo, hi;
  tt_dtype_bounds(d, &lo, &hi);
  if (d == TT_BOOL || (double)(n > 0 ? n - 1 : n) > hi)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "n is too large for result tensor type: '%s'",
                         tt_dtype_torch_name(d));
  // PyTorch's texts (it checks Half, Float and Double; BFloat16 the same way).
  static const struct { tt_dtype d; int bits; const char *limit, *name; } kFloat[] = {
      {TT_F16, 11, "2049", "Half"}, {TT_BF16, 8, "257", "BFloat16"},
      {TT_F32, 24, "2^24+1", "Float"}, {TT_F64, 53, "2^53+1", "Double"}};
  for (size_t k = 0; k < sizeof kFloat / sizeof kFloat[0]; k++)
    if (d == kFloat[k].d && n > (INT64_C(1) << kFloat[k].bits) + 1)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "n cannot be greater than %s for %s type.",
                           kFloat[k].limit, kFloat[k].name);
  return NULL;
}

// randperm.out(n, *, out) and randperm.generator_out(n, *, generator, out):
// 0..n-1 in a uniformly random order, in out's dtype. n random 64-bit keys
// are sorted carrying their positions (two equal keys, about n^2 / 2^65
// likely, keep index order).
static tt_status randperm(tt_lower_ctx *c, int gen_arg) {
  tt_hlo *b = tt_lower_hlo(c);
  int64_t n = tt_lower_int(c, 0);
  tt_hlo_type out;
  if (!tt_lower_dest_type(c, 0, &out)) out.dtype = TT_I64;
  TT_RETURN_IF_ERROR(check_randperm_n(c, n, out.dtype));
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 1, &n);
  tt_hv perm = tt_hlo_iota(b, &it, 0);
  if (n > 1) {
    tt_hv keys = draw(c, gen_arg, TT_U64, 1, &n), sorted;
    tt_hlo_sort(b, keys, perm, 0, false, &sorted, &perm);
  }
  tt_lower_result(c, tt_hlo_convert(b, perm, out.dtype));
  return NULL;
}

static tt_status lower_randperm_out(tt_lower_ctx *c) { return randperm(c, -1); }
static tt_status lower_randperm_generator_out(tt_lower_ctx *c) { return randperm(c, 1); }

// --- argument checks (each call: the values are runtime arguments) -------------------------------

// uniform_(self, from, to): PyTorch's uniform_impl_ checks, in its order.
static tt_status check_uniform(const tt_op_call *call) {
  double from = 0, to = 1, lo, hi;
  if (call->nargs < 1 || call->args[0].kind != TT_VALUE_TENSOR) return NULL;  // the rule refuses
  tt_dtype d = call->args[0].u.tensor.dtype;
  if (!tt_dtype_is_float(d)) return NULL;
  tt_call_number(call, 1, &from);
  tt_call_number(call, 2, &to);
  tt_dtype_bounds(d, &lo, &hi);
  if (!(from >= lo && from <= hi))
    return tt_make_status(TT_INVALID_ARGUMENT, "from is out of bounds for %s", tt_dtype_cpp_name(d));
  if (!(to >= lo && to <= hi))
    return tt_make_status(TT_INVALID_ARGUMENT, "to is out of bounds for %s", tt_dtype_cpp_name(d));
  if (!(from <= to))
    return tt_make_status(TT_INVALID_ARGUMENT, "uniform_ expects to return a [from, to) range, "
                          "but found from=%g > to=%g", from, to);
  if (!(to - from <= hi))
    return tt_make_status(TT_INVALID_ARGUMENT, "uniform_ expects to-from <= std::numeric_limits"
                          "<%s>::max(), but found to=%g and from=%g which result in to-from to "
                          "exceed the limit", tt_dtype_torch_name(d), to, from);
  return NULL;
}

// normal_(self, mean, std)
static tt_status check_normal(const tt_op_call *call) {
  return tt_call_check_range(call, 2, 0, false, INFINITY, false,
                             "normal expects std >= 0.0, but found std %g");
}

// bernoulli_.float / bernoulli.p(self, p)
static tt_status check_bernoulli(const tt_op_call *call) {
  return tt_call_check_range(call, 1, 0, false, 1, false,
                             "bernoulli_ expects p to be in [0, 1], but got p=%g");
}

// --- the table ------------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
static const tt_rule kRules[] = {
    R("uniform_", lower_uniform), R("uniform", lower_uniform),
    R("normal_", lower_normal),
    R("random_.from", lower_random_from), R("random.from", lower_random_from),
    R("random_.to", lower_random_to), R("random.to", lower_random_to),
    R("random_", lower_random), R("random", lower_random),
    R("bernoulli_.float", lower_bernoulli), R("bernoulli_.Tensor", lower_bernoulli),
    R("bernoulli.p", lower_bernoulli),
    R("_standard_gamma", lower_standard_gamma), R("_sample_dirichlet", lower_sample_dirichlet),
    R("randperm.out", lower_randperm_out), R("randperm.generator_out", lower_randperm_generator_out),
};
#undef R

const tt_rule_table tt_rules_random = {kRules, (int)(sizeof kRules / sizeof kRules[0])};

static const tt_rule_check kChecks[] = {
    {"aten::uniform_", check_uniform},
    {"aten::uniform", check_uniform},
    {"aten::normal_", check_normal},
    {"aten::bernoulli_.float", check_bernoulli},
    {"aten::bernoulli.p", check_bernoulli},
};
const tt_rule_checks tt_checks_random = {kChecks, (int)(sizeof kChecks / sizeof kChecks[0])};
