// fft.c — ATen's three FFT primitives, which every torch.fft function
// (fft/ifft/rfft/irfft/hfft, their 2-d and n-d forms, stft) and their
// backward ops reduce to:
//   _fft_c2c(self, dim, normalization, forward)     complex -> complex
//   _fft_r2c(self, dim, normalization, onesided)    real -> complex
//   _fft_c2r(self, dim, normalization, last_dim_size) complex -> real
// normalization is PyTorch's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by
// 1/n, n the product of the signal lengths.
//
// stablehlo.fft transforms the trailing 1..3 dims, so the requested dims are
// moved to the end, transformed (in groups of at most 3) and moved back.
// The real transforms follow pocketfft's order, as PyTorch's CPU does: r2c
// is a one-sided transform of the last requested dim, then complex
// transforms of the others; c2r the reverse. XLA's inverse transforms divide
// by n themselves; the one scale at the end turns that into the mode asked.
//
// Leaves out: half-precision inputs (complex32) and zero-length signals
// (the CPU raises PyTorch's errors for both).
#include <math.h>

#include "lower/lower.h"

// --- helpers ---------------------------------------------------------------------------

// The dims argument (1) wrapped for rank `rank`, in order, into dims[]; no repeats.
static tt_status fft_dims(const tt_lower_ctx *c, int rank, int64_t *dims, int *n) {
  const tt_value *v = tt_lower_arg(c, 1);
  if (v->kind != TT_VALUE_INTS || v->u.ints.n > rank)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected at most %d dims", rank);
  bool seen[TT_MAX_RANK] = {false};
  for (int i = 0; i < v->u.ints.n; i++) {
    TT_RETURN_IF_ERROR(tt_lower_dim(c, v->u.ints.data[i], rank, &dims[i]));
    if (seen[dims[i]])
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "dims must be unique");
    seen[dims[i]] = true;
  }
  *n = v->u.ints.n;
  return NULL;
}

// The normalization argument (2) as the factor to apply for n points; after
// an inverse transform (`inverse`) XLA has already divided by n.
static tt_status norm_scale(const tt_lower_ctx *c, double n, bool inverse, double *out) {
  int64_t mode = tt_lower_int(c, 2);
  if (mode < 0 || mode > 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "unknown fft normalization mode %lld",
                         (long long)mode);
  double want = mode == 0 ? 1.0 : mode == 1 ? 1.0 / sqrt(n) : 1.0 / n;
  *out = inverse ? want * n : want;  // undo XLA's 1/n
  return NULL;
}

// x transformed by `type` over its dims dims[0..n) (1..3), of lengths len:
// moved to the end in order, transformed, moved back.
static tt_hv fft_over(tt_lower_ctx *c, tt_hv x, tt_hlo_fft_type type, const int64_t *dims,
                      int n, const int64_t *len) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_type(c, x);
  bool picked[TT_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) picked[dims[i]] = true;
  int64_t perm[TT_MAX_RANK], inv[TT_MAX_RANK];
  int m = 0;
  for (int d = 0; d < t.rank; d++)
    if (!picked[d]) perm[m++] = d;
  for (int i = 0; i < n; i++) perm[m++] = dims[i];
  for (int d = 0; d < t.rank; d++) inv[perm[d]] = d;
  tt_hv y = tt_hlo_fft(b, tt_hlo_transpose(b, x, perm), type, len, n);
  return tt_hlo_transpose(b, y, inv);
}

// Complex transforms (FFT or IFFT) over dims[0..n), in groups of 3.
static tt_hv c2c_over(tt_lower_ctx *c, tt_hv x, bool forward, const int64_t *dims, int n) {
  tt_hlo_type t = tt_lower_type(c, x);
  for (int i = 0; i < n; i += 3) {
    int g = n - i < 3 ? n - i : 3;
    int64_t len[3];
    for (int j = 0; j < g; j++) len[j] = t.dims[dims[i + j]];
    x = fft_over(c, x, forward ? TT_HLO_FFT : TT_HLO_IFFT, dims + i, g, len);
  }
  return x;
}

static tt_status scaled_result(tt_lower_ctx *c, tt_hv x, double scale) {
  if (scale != 1.0) x = tt_lower_bin(c, TT_HLO_MUL, x, tt_lower_splat_like(c, x, scale));
  tt_lower_result(c, x);
  return NULL;
}

// Refuses zero-length signals and half precision (the CPU's errors).
static tt_status check_signal(const tt_lower_ctx *c, const tt_hlo_type *t, const int64_t *dims,
                              int n, bool want_complex) {
  bool ok = want_complex ? tt_dtype_is_complex(t->dtype)
                         : (t->dtype == TT_F32 || t->dtype == TT_F64);
  if (!ok)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "fft of %s", tt_dtype_name(t->dtype));
  for (int i = 0; i < n; i++)
    if (t->dims[dims[i]] < 1)
      return tt_lower_fail(c, TT_UNIMPLEMENTED, "fft of a zero-length signal");
  return NULL;
}

// The transformed dims of argument 1 (checked against the signal `t`) and
// how many points they span, the product of their lengths.
static tt_status signal_dims(tt_lower_ctx *c, const tt_hlo_type *t, bool complex_in,
                             int64_t *dims, int *n, double *points) {
  TT_RETURN_IF_ERROR(fft_dims(c, t->rank, dims, n));
  TT_RETURN_IF_ERROR(check_signal(c, t, dims, *n, complex_in));
  *points = 1;
  for (int i = 0; i < *n; i++) *points *= (double)t->dims[dims[i]];
  return NULL;
}

// --- the rules -------------------------------------------------------------------------

// _fft_c2c(self, dim, normalization, forward)
static tt_status lower_fft_c2c(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  int64_t dims[TT_MAX_RANK];
  int n = 0;
  double points, scale;
  TT_RETURN_IF_ERROR(signal_dims(c, &t, true, dims, &n, &points));
  bool forward = tt_lower_bool(c, 3);
  TT_RETURN_IF_ERROR(norm_scale(c, points, !forward && n > 0, &scale));
  return scaled_result(c, c2c_over(c, x, forward, dims, n), scale);
}

// _fft_r2c(self, dim, normalization, onesided): the last dim in `dim` keeps
// n/2+1 entries when onesided, else the full (Hermitian) spectrum.
static tt_status lower_fft_r2c(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  int64_t dims[TT_MAX_RANK];
  int n = 0;
  double points, scale;
  TT_RETURN_IF_ERROR(signal_dims(c, &t, false, dims, &n, &points));
  if (n == 0) return tt_lower_fail(c, TT_UNIMPLEMENTED, "r2c over no dims");
  TT_RETURN_IF_ERROR(norm_scale(c, points, false, &scale));
  tt_dtype cd = t.dtype == TT_F32 ? TT_C64 : TT_C128;
  if (!tt_lower_bool(c, 3))  // two-sided: the complex transform of x
    return scaled_result(c, c2c_over(c, tt_lower_convert(c, x, cd), true, dims, n), scale);
  int64_t last = dims[n - 1], len = t.dims[last];
  tt_hv y = fft_over(c, x, TT_HLO_RFFT, &last, 1, &len);
  return scaled_result(c, c2c_over(c, y, true, dims, n - 1), scale);
}

// _fft_c2r(self, dim, normalization, last_dim_size): the inverse of a
// one-sided r2c; the last dim in `dim` becomes last_dim_size long (only its
// first last_dim_size/2+1 inputs are read).
static tt_status lower_fft_c2r(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  int64_t dims[TT_MAX_RANK];
  int n = 0;
  TT_RETURN_IF_ERROR(fft_dims(c, t.rank, dims, &n));
  TT_RETURN_IF_ERROR(check_signal(c, &t, dims, n, true));
  int64_t out_len = tt_lower_int(c, 3);
  if (n == 0 || out_len < 1)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "c2r over no dims or of length %lld",
                         (long long)out_len);
  int64_t last = dims[n - 1], half = out_len / 2 + 1;
  if (t.dims[last] < half)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "c2r input shorter than last_dim_size/2+1");
  if (t.dims[last] > half) {
    int64_t lo[TT_MAX_RANK] = {0}, hi[TT_MAX_RANK], st[TT_MAX_RANK];
    for (int d = 0; d < t.rank; d++) hi[d] = t.dims[d], st[d] = 1;
    hi[last] = half;
    x = tt_hlo_slice(b, x, lo, hi, st);
  }
  double points = (double)out_len, scale;
  for (int i = 0; i < n - 1; i++) points *= (double)t.dims[dims[i]];
  TT_RETURN_IF_ERROR(norm_scale(c, points, true, &scale));
  x = c2c_over(c, x, false, dims, n - 1);
  return scaled_result(c, fft_over(c, x, TT_HLO_IRFFT, &last, 1, &out_len), scale);
}

// --- the table -------------------------------------------------------------------------

#define RC(name, fn) {"aten::" name, fn, TT_RULE_COMPLEX}
static const tt_rule kRules[] = {
    RC("_fft_c2c", lower_fft_c2c), RC("_fft_c2c.out", lower_fft_c2c),
    RC("_fft_r2c", lower_fft_r2c), RC("_fft_r2c.out", lower_fft_r2c),
    RC("_fft_c2r", lower_fft_c2r), RC("_fft_c2r.out", lower_fft_c2r),
};
#undef RC

const tt_rule_table tt_rules_fft = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
