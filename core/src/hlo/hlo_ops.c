// hlo_ops.c — the builder's ops: elementwise, conversions, shape ops, dot and
// reductions. Each checks its operands' types (a mismatch is a rule bug,
// reported as TT_INTERNAL with the types), computes the result type and emits
// one generic-form line (see hlo.c).
//
// Leaves out: gather/scatter/random (hlo_index.c); ops with dynamic shapes.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hlo/hlo_internal.h"

// --- type checks -------------------------------------------------------------------

// K_CPLX: complex<f32>/complex<f64>; K_ANY leaves it out (max/min have no
// complex order), K_ALL takes it.
enum { K_FLOAT = 1, K_INT = 2, K_BOOL = 4, K_ANY = 7, K_CPLX = 8, K_ALL = 15 };

static int dtype_kind(tt_dtype d) {
  switch (d) {
    case TT_F16: case TT_BF16: case TT_F32: case TT_F64: return K_FLOAT;
    case TT_BOOL: return K_BOOL;
    case TT_C64: case TT_C128: return K_CPLX;
    default: return K_INT;
  }
}

static bool is_unsigned(tt_dtype d) {
  return d == TT_U8 || d == TT_U16 || d == TT_U32 || d == TT_U64;
}

// "tensor<2x3xf32>" into buf for messages.
static const char *type_str(const tt_hlo_type *t, char *buf, size_t cap) {
  tt_hlo_buf s = {0};
  tt_hlo_put_type(&s, t);
  snprintf(buf, cap, "%s", s.p ? s.p : "?");
  tt_hlo_buf_free(&s);
  return buf;
}

static const tt_hlo_type *ty(tt_hlo *b, tt_hv v) { return &b->vals[v].type; }

static bool check_kind(tt_hlo *b, const char *op, tt_hv x, int kinds) {
  if (dtype_kind(ty(b, x)->dtype) & kinds) return true;
  char s[96];
  tt_hlo_failf(b, "%s: operand type %s not supported", op,
               type_str(ty(b, x), s, sizeof s));
  return false;
}

static bool check_same(tt_hlo *b, const char *op, tt_hv x, tt_hv y) {
  if (tt_hlo_same_type(ty(b, x), ty(b, y))) return true;
  char s1[96], s2[96];
  tt_hlo_failf(b, "%s: operand types differ: %s vs %s", op,
               type_str(ty(b, x), s1, sizeof s1), type_str(ty(b, y), s2, sizeof s2));
  return false;
}

// --- elementwise ---------------------------------------------------------------------

static const struct { const char *name; int kinds; } kUnops[TT_HLO_UNOP_COUNT] = {
    [TT_HLO_ABS] = {"stablehlo.abs", K_FLOAT | K_INT | K_CPLX},  // complex -> real
    [TT_HLO_NEG] = {"stablehlo.negate", K_FLOAT | K_INT | K_CPLX},
    [TT_HLO_EXP] = {"stablehlo.exponential", K_FLOAT | K_CPLX},
    [TT_HLO_EXPM1] = {"stablehlo.exponential_minus_one", K_FLOAT | K_CPLX},
    [TT_HLO_LOG] = {"stablehlo.log", K_FLOAT | K_CPLX},
    [TT_HLO_LOG1P] = {"stablehlo.log_plus_one", K_FLOAT | K_CPLX},
    [TT_HLO_SQRT] = {"stablehlo.sqrt", K_FLOAT | K_CPLX},
    [TT_HLO_RSQRT] = {"stablehlo.rsqrt", K_FLOAT | K_CPLX},
    [TT_HLO_TANH] = {"stablehlo.tanh", K_FLOAT | K_CPLX},
    [TT_HLO_LOGISTIC] = {"stablehlo.logistic", K_FLOAT},
    [TT_HLO_SIN] = {"stablehlo.sine", K_FLOAT | K_CPLX},
    [TT_HLO_COS] = {"stablehlo.cosine", K_FLOAT | K_CPLX},
    [TT_HLO_TAN] = {"stablehlo.tan", K_FLOAT | K_CPLX},
    [TT_HLO_FLOOR] = {"stablehlo.floor", K_FLOAT},
    [TT_HLO_CEIL] = {"stablehlo.ceil", K_FLOAT},
    [TT_HLO_ROUND_EVEN] = {"stablehlo.round_nearest_even", K_FLOAT},
    [TT_HLO_SIGN] = {"stablehlo.sign", K_FLOAT | K_INT},
    [TT_HLO_NOT] = {"stablehlo.not", K_INT | K_BOOL},
    [TT_HLO_IS_FINITE] = {"stablehlo.is_finite", K_FLOAT},
    [TT_HLO_CBRT] = {"stablehlo.cbrt", K_FLOAT},
    [TT_HLO_POPCNT] = {"stablehlo.popcnt", K_INT},
};

static const struct { const char *name; int kinds; } kBinops[TT_HLO_BINOP_COUNT] = {
    [TT_HLO_ADD] = {"stablehlo.add", K_ALL},
    [TT_HLO_SUB] = {"stablehlo.subtract", K_FLOAT | K_INT | K_CPLX},
    [TT_HLO_MUL] = {"stablehlo.multiply", K_ALL},
    [TT_HLO_DIV] = {"stablehlo.divide", K_FLOAT | K_INT | K_CPLX},
    [TT_HLO_REM] = {"stablehlo.remainder", K_FLOAT | K_INT},
    [TT_HLO_POW] = {"stablehlo.power", K_FLOAT | K_INT | K_CPLX},
    [TT_HLO_MAX] = {"stablehlo.maximum", K_ANY},
    [TT_HLO_MIN] = {"stablehlo.minimum", K_ANY},
    [TT_HLO_AND] = {"stablehlo.and", K_INT | K_BOOL},
    [TT_HLO_OR] = {"stablehlo.or", K_INT | K_BOOL},
    [TT_HLO_XOR] = {"stablehlo.xor", K_INT | K_BOOL},
    [TT_HLO_ATAN2] = {"stablehlo.atan2", K_FLOAT},
    [TT_HLO_SHL] = {"stablehlo.shift_left", K_INT},
    [TT_HLO_SHR_A] = {"stablehlo.shift_right_arithmetic", K_INT},
    [TT_HLO_SHR_L] = {"stablehlo.shift_right_logical", K_INT},
};

tt_hv tt_hlo_unary(tt_hlo *b, tt_hlo_unop op, tt_hv x) {
  if (!tt_hlo_ok(b, &x, 1)) return TT_HV_INVALID;
  if (op < 0 || op >= TT_HLO_UNOP_COUNT) {
    tt_hlo_failf(b, "unknown unary op %d", (int)op);
    return TT_HV_INVALID;
  }
  if (!check_kind(b, kUnops[op].name, x, kUnops[op].kinds)) return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  if (op == TT_HLO_IS_FINITE) t.dtype = TT_BOOL;
  if (op == TT_HLO_ABS) t.dtype = tt_dtype_to_real(t.dtype);  // |z| is real
  return tt_hlo_emit(b, kUnops[op].name, &x, 1, NULL, &t);
}

// --- complex parts ---------------------------------------------------------------------

static tt_hv complex_part(tt_hlo *b, const char *name, tt_hv x) {
  if (!tt_hlo_ok(b, &x, 1) || !check_kind(b, name, x, K_CPLX)) return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  t.dtype = tt_dtype_to_real(t.dtype);
  return tt_hlo_emit(b, name, &x, 1, NULL, &t);
}

tt_hv tt_hlo_real(tt_hlo *b, tt_hv x) { return complex_part(b, "stablehlo.real", x); }
tt_hv tt_hlo_imag(tt_hlo *b, tt_hv x) { return complex_part(b, "stablehlo.imag", x); }

tt_hv tt_hlo_complex(tt_hlo *b, tt_hv re, tt_hv im) {
  tt_hv xs[2] = {re, im};
  if (!tt_hlo_ok(b, xs, 2) || !check_same(b, "stablehlo.complex", re, im))
    return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, re);
  if (t.dtype != TT_F32 && t.dtype != TT_F64) {
    char s1[96];
    tt_hlo_failf(b, "stablehlo.complex: parts of type %s (f32 or f64 only)",
                 type_str(&t, s1, sizeof s1));
    return TT_HV_INVALID;
  }
  t.dtype = t.dtype == TT_F32 ? TT_C64 : TT_C128;
  return tt_hlo_emit(b, "stablehlo.complex", xs, 2, NULL, &t);
}

tt_hv tt_hlo_binary(tt_hlo *b, tt_hlo_binop op, tt_hv x, tt_hv y) {
  tt_hv xs[2] = {x, y};
  if (!tt_hlo_ok(b, xs, 2)) return TT_HV_INVALID;
  if (op < 0 || op >= TT_HLO_BINOP_COUNT) {
    tt_hlo_failf(b, "unknown binary op %d", (int)op);
    return TT_HV_INVALID;
  }
  const char *name = kBinops[op].name;
  if (!check_same(b, name, x, y) || !check_kind(b, name, x, kBinops[op].kinds))
    return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  // XLA's CPU compiler dies of SIGFPE on an integer divide or remainder of
  // shape [0] (seen with the pinned plugin; [2, 0] compiles): nothing to
  // compute, so an empty constant.
  bool int_div = (op == TT_HLO_DIV || op == TT_HLO_REM) && dtype_kind(t.dtype) == K_INT;
  if (int_div && tt_hlo_numel(&t) == 0) return tt_hlo_splat(b, &t, 0);
  return tt_hlo_emit(b, name, xs, 2, NULL, &t);
}

tt_hv tt_hlo_erf(tt_hlo *b, tt_hv x) {
  if (!tt_hlo_ok(b, &x, 1) || !check_kind(b, "chlo.erf", x, K_FLOAT))
    return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  return tt_hlo_emit(b, "chlo.erf", &x, 1, NULL, &t);
}

tt_hv tt_hlo_barrier(tt_hlo *b, tt_hv x) {
  if (!tt_hlo_ok(b, &x, 1)) return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  return tt_hlo_emit(b, "stablehlo.optimization_barrier", &x, 1, NULL, &t);
}

tt_hv tt_hlo_compare(tt_hlo *b, tt_hlo_cmp cmp, tt_hv x, tt_hv y) {
  static const char *const kDir[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  tt_hv xs[2] = {x, y};
  if (!tt_hlo_ok(b, xs, 2) || !check_same(b, "stablehlo.compare", x, y))
    return TT_HV_INVALID;
  if ((int)cmp < 0 || (int)cmp > TT_HLO_GE) {
    tt_hlo_failf(b, "unknown comparison %d", (int)cmp);
    return TT_HV_INVALID;
  }
  tt_dtype d = ty(b, x)->dtype;
  if (dtype_kind(d) == K_CPLX && cmp != TT_HLO_EQ && cmp != TT_HLO_NE) {
    tt_hlo_failf(b, "stablehlo.compare: complex values have no order");
    return TT_HV_INVALID;
  }
  const char *kind = dtype_kind(d) & (K_FLOAT | K_CPLX) ? "FLOAT"
                     : (d == TT_BOOL || is_unsigned(d)) ? "UNSIGNED" : "SIGNED";
  char attrs[160];
  snprintf(attrs, sizeof attrs,
           "{compare_type = #stablehlo<comparison_type %s>, comparison_direction "
           "= #stablehlo<comparison_direction %s>}", kind, kDir[cmp]);
  tt_hlo_type t = *ty(b, x);
  t.dtype = TT_BOOL;
  return tt_hlo_emit(b, "stablehlo.compare", xs, 2, attrs, &t);
}

tt_hv tt_hlo_select(tt_hlo *b, tt_hv pred, tt_hv on_true, tt_hv on_false) {
  tt_hv xs[3] = {pred, on_true, on_false};
  if (!tt_hlo_ok(b, xs, 3) || !check_same(b, "stablehlo.select", on_true, on_false))
    return TT_HV_INVALID;
  const tt_hlo_type *p = ty(b, pred);
  tt_hlo_type want = *ty(b, on_true);
  want.dtype = TT_BOOL;
  if (p->dtype != TT_BOOL || (p->rank != 0 && !tt_hlo_same_type(p, &want))) {
    char s1[96], s2[96];
    tt_hlo_failf(b, "stablehlo.select: predicate %s for values %s",
                 type_str(p, s1, sizeof s1), type_str(ty(b, on_true), s2, sizeof s2));
    return TT_HV_INVALID;
  }
  tt_hlo_type t = *ty(b, on_true);
  return tt_hlo_emit(b, "stablehlo.select", xs, 3, NULL, &t);
}

// A clamp bound may be 0-d or the operand's type.
static bool check_bound(tt_hlo *b, tt_hv bound, tt_hv x) {
  const tt_hlo_type *t = ty(b, bound);
  if (t->rank == 0 && t->dtype == ty(b, x)->dtype) return true;
  return check_same(b, "stablehlo.clamp", bound, x);
}

tt_hv tt_hlo_clamp(tt_hlo *b, tt_hv lo, tt_hv x, tt_hv hi) {
  tt_hv xs[3] = {lo, x, hi};
  if (!tt_hlo_ok(b, xs, 3) || !check_bound(b, lo, x) || !check_bound(b, hi, x))
    return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  return tt_hlo_emit(b, "stablehlo.clamp", xs, 3, NULL, &t);
}

tt_hv tt_hlo_convert(tt_hlo *b, tt_hv x, tt_dtype d) {
  if (!tt_hlo_ok(b, &x, 1)) return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  if (t.dtype == d) return x;
  if (d == TT_BOOL) {
    // Spelled out as x != 0 so NaN and -0.0 follow PyTorch (true, false).
    tt_hv zero = tt_hlo_splat(b, &t, 0.0);
    return tt_hlo_compare(b, TT_HLO_NE, x, zero);
  }
  if (tt_dtype_is_complex(t.dtype) && !tt_dtype_is_complex(d)) {
    // XLA has no complex -> real convert; PyTorch drops the imaginary part.
    x = tt_hlo_real(b, x);
    t.dtype = tt_dtype_to_real(t.dtype);
    if (t.dtype == d) return x;
  }
  bool from_float = t.dtype == TT_F16 || t.dtype == TT_BF16 ||
                    t.dtype == TT_F32 || t.dtype == TT_F64;
  if (from_float && (d == TT_U8 || d == TT_U16 || d == TT_U32)) {
    // PyTorch's CPU casts float -> unsigned through a signed integer, so
    // -16.4 becomes 240 as uint8; XLA's direct convert would saturate to 0.
    x = tt_hlo_convert(b, x, TT_I64);
    t.dtype = TT_I64;
  }
  t.dtype = d;
  return tt_hlo_emit(b, "stablehlo.convert", &x, 1, NULL, &t);
}

tt_hv tt_hlo_bitcast(tt_hlo *b, tt_hv x, tt_dtype d) {
  if (!tt_hlo_ok(b, &x, 1)) return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  if (tt_dtype_is_complex(t.dtype) != tt_dtype_is_complex(d) && t.dtype != d) {
    char s[96];
    tt_hlo_failf(b, "bitcast_convert of %s to %s: XLA has no complex bitcast "
                 "(use real/imag/complex)", type_str(&t, s, sizeof s), tt_hlo_elem_name(d));
    return TT_HV_INVALID;
  }
  if (tt_dtype_size(t.dtype) != tt_dtype_size(d) || d == TT_BOOL || t.dtype == TT_BOOL) {
    char s[96];
    tt_hlo_failf(b, "bitcast_convert of %s to %s: element sizes differ",
                 type_str(&t, s, sizeof s), tt_hlo_elem_name(d));
    return TT_HV_INVALID;
  }
  if (t.dtype == d) return x;
  t.dtype = d;
  return tt_hlo_emit(b, "stablehlo.bitcast_convert", &x, 1, NULL, &t);
}

tt_hv tt_hlo_bitcast_to(tt_hlo *b, tt_hv x, const tt_hlo_type *t) {
  if (!tt_hlo_ok(b, &x, 1)) return TT_HV_INVALID;
  const tt_hlo_type *from = ty(b, x);
  if (tt_hlo_numel(from) * tt_dtype_size(from->dtype) !=
          tt_hlo_numel(t) * tt_dtype_size(t->dtype) ||
      from->dtype == TT_BOOL || t->dtype == TT_BOOL ||
      (tt_dtype_is_complex(from->dtype) != tt_dtype_is_complex(t->dtype))) {
    char s1[96], s2[96];
    tt_hlo_failf(b, "bitcast_convert of %s to %s: sizes differ (or complex)",
                 type_str(from, s1, sizeof s1), type_str(t, s2, sizeof s2));
    return TT_HV_INVALID;
  }
  if (tt_hlo_same_type(from, t)) return x;
  return tt_hlo_emit(b, "stablehlo.bitcast_convert", &x, 1, NULL, t);
}

// --- shapes -------------------------------------------------------------------------

tt_hv tt_hlo_reshape(tt_hlo *b, tt_hv x, int rank, const int64_t *dims) {
  if (!tt_hlo_ok(b, &x, 1)) return TT_HV_INVALID;
  tt_hlo_type t = tt_hlo_make_type(ty(b, x)->dtype, rank, dims);
  if (rank < 0 || rank > TT_MAX_RANK || tt_hlo_numel(&t) != tt_hlo_numel(ty(b, x))) {
    char s1[96], s2[96];
    tt_hlo_failf(b, "reshape %s to %s: element counts differ",
                 type_str(ty(b, x), s1, sizeof s1), type_str(&t, s2, sizeof s2));
    return TT_HV_INVALID;
  }
  if (tt_hlo_same_type(&t, ty(b, x))) return x;
  return tt_hlo_emit(b, "stablehlo.reshape", &x, 1, NULL, &t);
}

tt_hv tt_hlo_broadcast_in_dim(tt_hlo *b, tt_hv x, int rank,
                              const int64_t *dims, const int64_t *bdims) {
  if (!tt_hlo_ok(b, &x, 1)) return TT_HV_INVALID;
  const tt_hlo_type *xt = ty(b, x);
  tt_hlo_type t = tt_hlo_make_type(xt->dtype, rank, dims);
  bool ok = rank >= xt->rank && rank <= TT_MAX_RANK;
  for (int i = 0; ok && i < xt->rank; i++) {
    ok = bdims[i] >= 0 && bdims[i] < rank &&
         (xt->dims[i] == 1 || xt->dims[i] == dims[bdims[i]]);
  }
  if (!ok) {
    char s1[96], s2[96];
    tt_hlo_failf(b, "broadcast_in_dim %s to %s: bad dimension map",
                 type_str(xt, s1, sizeof s1), type_str(&t, s2, sizeof s2));
    return TT_HV_INVALID;
  }
  tt_hlo_buf a = {0};
  tt_hlo_buf_printf(&a, "{broadcast_dimensions = ");
  tt_hlo_put_i64s(&a, bdims, xt->rank);
  tt_hlo_buf_printf(&a, "}");
  tt_hv r = tt_hlo_emit(b, "stablehlo.broadcast_in_dim", &x, 1, a.p, &t);
  tt_hlo_buf_free(&a);
  return r;
}

tt_hv tt_hlo_transpose(tt_hlo *b, tt_hv x, const int64_t *perm) {
  if (!tt_hlo_ok(b, &x, 1)) return TT_HV_INVALID;
  const tt_hlo_type *xt = ty(b, x);
  tt_hlo_type t = *xt;
  bool seen[TT_MAX_RANK] = {false}, identity = true;
  for (int i = 0; i < xt->rank; i++) {
    if (perm[i] < 0 || perm[i] >= xt->rank || seen[perm[i]]) {
      tt_hlo_failf(b, "transpose: bad permutation at %d", i);
      return TT_HV_INVALID;
    }
    seen[perm[i]] = true;
    identity = identity && perm[i] == i;
    t.dims[i] = xt->dims[perm[i]];
  }
  if (identity) return x;
  tt_hlo_buf a = {0};
  tt_hlo_buf_printf(&a, "{permutation = ");
  tt_hlo_put_i64s(&a, perm, xt->rank);
  tt_hlo_buf_printf(&a, "}");
  tt_hv r = tt_hlo_emit(b, "stablehlo.transpose", &x, 1, a.p, &t);
  tt_hlo_buf_free(&a);
  return r;
}

tt_hv tt_hlo_fft(tt_hlo *b, tt_hv x, tt_hlo_fft_type type, const int64_t *len, int n) {
  static const char *const kType[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
  if (!tt_hlo_ok(b, &x, 1)) return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  bool real_in = type == TT_HLO_RFFT;
  bool ok = n >= 1 && n <= 3 && n <= t.rank && (int)type >= 0 && type <= TT_HLO_IRFFT &&
            (real_in ? (t.dtype == TT_F32 || t.dtype == TT_F64) : dtype_kind(t.dtype) == K_CPLX);
  for (int i = 0; ok && i < n; i++) {
    int64_t have = t.dims[t.rank - n + i], want = len[i];
    if (i == n - 1 && type == TT_HLO_IRFFT) want = len[i] / 2 + 1;
    ok = len[i] >= 1 && have == want;
  }
  if (!ok) {
    char s1[96];
    tt_hlo_failf(b, "stablehlo.fft %s of %s over %d trailing dims: bad type or lengths",
                 (int)type >= 0 && type <= TT_HLO_IRFFT ? kType[type] : "?",
                 type_str(&t, s1, sizeof s1), n);
    return TT_HV_INVALID;
  }
  if (type == TT_HLO_RFFT) {
    t.dtype = t.dtype == TT_F32 ? TT_C64 : TT_C128;
    t.dims[t.rank - 1] = len[n - 1] / 2 + 1;
  } else if (type == TT_HLO_IRFFT) {
    t.dtype = tt_dtype_to_real(t.dtype);
    t.dims[t.rank - 1] = len[n - 1];
  }
  tt_hlo_buf a = {0};
  tt_hlo_buf_printf(&a, "{fft_type = #stablehlo<fft_type %s>, fft_length = ", kType[type]);
  tt_hlo_put_i64s(&a, len, n);
  tt_hlo_buf_printf(&a, "}");
  tt_hv r = tt_hlo_emit(b, "stablehlo.fft", &x, 1, a.p, &t);
  tt_hlo_buf_free(&a);
  return r;
}

tt_hv tt_hlo_slice(tt_hlo *b, tt_hv x, const int64_t *start,
                   const int64_t *limit, const int64_t *stride) {
  if (!tt_hlo_ok(b, &x, 1)) return TT_HV_INVALID;
  const tt_hlo_type *xt = ty(b, x);
  tt_hlo_type t = *xt;
  for (int i = 0; i < xt->rank; i++) {
    if (start[i] < 0 || limit[i] < start[i] || limit[i] > xt->dims[i] || stride[i] < 1) {
      tt_hlo_failf(b, "slice dim %d: [%" PRId64 ":%" PRId64 ":%" PRId64
                   "] of size %" PRId64, i, start[i], limit[i], stride[i], xt->dims[i]);
      return TT_HV_INVALID;
    }
    t.dims[i] = (limit[i] - start[i] + stride[i] - 1) / stride[i];
  }
  tt_hlo_buf a = {0};
  tt_hlo_buf_printf(&a, "{limit_indices = ");
  tt_hlo_put_i64s(&a, limit, xt->rank);
  tt_hlo_buf_printf(&a, ", start_indices = ");
  tt_hlo_put_i64s(&a, start, xt->rank);
  tt_hlo_buf_printf(&a, ", strides = ");
  tt_hlo_put_i64s(&a, stride, xt->rank);
  tt_hlo_buf_printf(&a, "}");
  tt_hv r = tt_hlo_emit(b, "stablehlo.slice", &x, 1, a.p, &t);
  tt_hlo_buf_free(&a);
  return r;
}

// Start indices: one 0-d integer per dim of x.
static bool check_starts(tt_hlo *b, const char *op, tt_hv x, const tt_hv *starts) {
  int rank = ty(b, x)->rank;
  if (!tt_hlo_ok(b, starts, rank)) return false;
  for (int i = 0; i < rank; i++) {
    const tt_hlo_type *s = ty(b, starts[i]);
    if (s->rank != 0 || dtype_kind(s->dtype) != K_INT) {
      tt_hlo_failf(b, "%s: start index %d must be a 0-d integer", op, i);
      return false;
    }
  }
  return true;
}

tt_hv tt_hlo_dynamic_slice(tt_hlo *b, tt_hv x, const tt_hv *starts,
                           const int64_t *sizes) {
  if (!tt_hlo_ok(b, &x, 1) || !check_starts(b, "dynamic_slice", x, starts))
    return TT_HV_INVALID;
  const tt_hlo_type *xt = ty(b, x);
  int rank = xt->rank;
  tt_hlo_type t = *xt;
  tt_hv ops[1 + TT_MAX_RANK] = {x};
  for (int i = 0; i < rank; i++) {
    if (sizes[i] < 0 || sizes[i] > xt->dims[i]) {
      tt_hlo_failf(b, "dynamic_slice: size %" PRId64 " of dim %d (%" PRId64 ")",
                   sizes[i], i, xt->dims[i]);
      return TT_HV_INVALID;
    }
    t.dims[i] = sizes[i];
    ops[1 + i] = starts[i];
  }
  tt_hlo_buf a = {0};
  tt_hlo_buf_printf(&a, "{slice_sizes = ");
  tt_hlo_put_i64s(&a, sizes, rank);
  tt_hlo_buf_printf(&a, "}");
  tt_hv r = tt_hlo_emit(b, "stablehlo.dynamic_slice", ops, 1 + rank, a.p, &t);
  tt_hlo_buf_free(&a);
  return r;
}

tt_hv tt_hlo_dynamic_update_slice(tt_hlo *b, tt_hv x, tt_hv update,
                                  const tt_hv *starts) {
  tt_hv xu[2] = {x, update};
  if (!tt_hlo_ok(b, xu, 2) || !check_starts(b, "dynamic_update_slice", x, starts))
    return TT_HV_INVALID;
  const tt_hlo_type *xt = ty(b, x), *ut = ty(b, update);
  bool ok = xt->dtype == ut->dtype && xt->rank == ut->rank;
  for (int i = 0; ok && i < xt->rank; i++) ok = ut->dims[i] <= xt->dims[i];
  if (!ok) {
    char s1[96], s2[96];
    tt_hlo_failf(b, "dynamic_update_slice of %s into %s", type_str(ut, s1, sizeof s1),
                 type_str(xt, s2, sizeof s2));
    return TT_HV_INVALID;
  }
  tt_hv ops[2 + TT_MAX_RANK] = {x, update};
  for (int i = 0; i < xt->rank; i++) ops[2 + i] = starts[i];
  tt_hlo_type t = *xt;
  return tt_hlo_emit(b, "stablehlo.dynamic_update_slice", ops, 2 + xt->rank, NULL, &t);
}

tt_hv tt_hlo_concatenate(tt_hlo *b, const tt_hv *xs, int n, int64_t dim) {
  if (n < 1 || !tt_hlo_ok(b, xs, n)) {
    if (n < 1) tt_hlo_failf(b, "concatenate of no values");
    return TT_HV_INVALID;
  }
  tt_hlo_type t = *ty(b, xs[0]);
  if (dim < 0 || dim >= t.rank) {
    tt_hlo_failf(b, "concatenate: dim %" PRId64 " of rank %d", dim, (int)t.rank);
    return TT_HV_INVALID;
  }
  t.dims[dim] = 0;
  for (int i = 0; i < n; i++) {
    tt_hlo_type u = *ty(b, xs[i]);
    t.dims[dim] += u.dims[dim];
    u.dims[dim] = t.dims[dim];
    if (!tt_hlo_same_type(&u, &t)) {
      char s1[96], s2[96];
      tt_hlo_failf(b, "concatenate: %s does not fit %s", type_str(ty(b, xs[i]), s1, sizeof s1),
                   type_str(ty(b, xs[0]), s2, sizeof s2));
      return TT_HV_INVALID;
    }
  }
  if (n == 1) return xs[0];
  char attrs[64];
  snprintf(attrs, sizeof attrs, "{dimension = %" PRId64 " : i64}", dim);
  return tt_hlo_emit(b, "stablehlo.concatenate", xs, n, attrs, &t);
}

tt_hv tt_hlo_pad(tt_hlo *b, tt_hv x, tt_hv pad_value, const int64_t *lo,
                 const int64_t *hi, const int64_t *interior) {
  tt_hv xs[2] = {x, pad_value};
  if (!tt_hlo_ok(b, xs, 2)) return TT_HV_INVALID;
  const tt_hlo_type *xt = ty(b, x);
  if (ty(b, pad_value)->rank != 0 || ty(b, pad_value)->dtype != xt->dtype) {
    tt_hlo_failf(b, "pad: padding value must be 0-d of the operand's dtype");
    return TT_HV_INVALID;
  }
  tt_hlo_type t = *xt;
  for (int i = 0; i < xt->rank; i++) {
    int64_t d = xt->dims[i];
    t.dims[i] = lo[i] + hi[i] + d + (d > 0 ? (d - 1) * interior[i] : 0);
    if (interior[i] < 0 || t.dims[i] < 0) {
      tt_hlo_failf(b, "pad: dim %d becomes %" PRId64, i, t.dims[i]);
      return TT_HV_INVALID;
    }
  }
  tt_hlo_buf a = {0};
  tt_hlo_buf_printf(&a, "{edge_padding_high = ");
  tt_hlo_put_i64s(&a, hi, xt->rank);
  tt_hlo_buf_printf(&a, ", edge_padding_low = ");
  tt_hlo_put_i64s(&a, lo, xt->rank);
  tt_hlo_buf_printf(&a, ", interior_padding = ");
  tt_hlo_put_i64s(&a, interior, xt->rank);
  tt_hlo_buf_printf(&a, "}");
  tt_hv r = tt_hlo_emit(b, "stablehlo.pad", xs, 2, a.p, &t);
  tt_hlo_buf_free(&a);
  return r;
}

tt_hv tt_hlo_reverse(tt_hlo *b, tt_hv x, const int64_t *dims, int n) {
  if (!tt_hlo_ok(b, &x, 1)) return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  for (int i = 0; i < n; i++) {
    if (dims[i] < 0 || dims[i] >= t.rank) {
      tt_hlo_failf(b, "reverse: dim %" PRId64 " of rank %d", dims[i], (int)t.rank);
      return TT_HV_INVALID;
    }
  }
  if (n == 0) return x;
  tt_hlo_buf a = {0};
  tt_hlo_buf_printf(&a, "{dimensions = ");
  tt_hlo_put_i64s(&a, dims, n);
  tt_hlo_buf_printf(&a, "}");
  tt_hv r = tt_hlo_emit(b, "stablehlo.reverse", &x, 1, a.p, &t);
  tt_hlo_buf_free(&a);
  return r;
}

tt_hv tt_hlo_iota(tt_hlo *b, const tt_hlo_type *t, int64_t dim) {
  if (t->rank < 1 || dim < 0 || dim >= t->rank || t->dtype == TT_BOOL) {
    tt_hlo_failf(b, "iota: dim %" PRId64 " of rank %d (dtype %d)", dim,
                 (int)t->rank, (int)t->dtype);
    return TT_HV_INVALID;
  }
  char attrs[64];
  snprintf(attrs, sizeof attrs, "{iota_dimension = %" PRId64 " : i64}", dim);
  return tt_hlo_emit(b, "stablehlo.iota", NULL, 0, attrs, t);
}

// --- dot -------------------------------------------------------------------------------

static bool in_list(int64_t d, const int64_t *xs, int n) {
  for (int i = 0; i < n; i++)
    if (xs[i] == d) return true;
  return false;
}

// Result: batch dims, then x's free dims, then y's free dims.
static bool dot_type(tt_hlo *b, tt_hv x, tt_hv y, const int64_t *bx,
                     const int64_t *by, int nb, const int64_t *cx,
                     const int64_t *cy, int nc, tt_hlo_type *t) {
  const tt_hlo_type *xt = ty(b, x), *yt = ty(b, y);
  int r = 0;
  for (int i = 0; i < nb; i++) {
    if (bx[i] < 0 || bx[i] >= xt->rank || by[i] < 0 || by[i] >= yt->rank ||
        xt->dims[bx[i]] != yt->dims[by[i]]) return false;
    t->dims[r++] = xt->dims[bx[i]];
  }
  for (int i = 0; i < nc; i++) {
    if (cx[i] < 0 || cx[i] >= xt->rank || cy[i] < 0 || cy[i] >= yt->rank ||
        xt->dims[cx[i]] != yt->dims[cy[i]]) return false;
  }
  for (int i = 0; i < xt->rank; i++)
    if (!in_list(i, bx, nb) && !in_list(i, cx, nc)) t->dims[r++] = xt->dims[i];
  for (int i = 0; i < yt->rank; i++)
    if (!in_list(i, by, nb) && !in_list(i, cy, nc)) t->dims[r++] = yt->dims[i];
  t->rank = r;
  return r <= TT_MAX_RANK;
}

tt_hv tt_hlo_dot_general(tt_hlo *b, tt_hv x, tt_hv y,
                         const int64_t *batch_x, const int64_t *batch_y,
                         int nbatch, const int64_t *contract_x,
                         const int64_t *contract_y, int ncontract,
                         tt_dtype out_dtype) {
  tt_hv xs[2] = {x, y};
  if (!tt_hlo_ok(b, xs, 2)) return TT_HV_INVALID;
  tt_hlo_type t = tt_hlo_make_type(out_dtype, 0, NULL);
  if (ty(b, x)->dtype != ty(b, y)->dtype ||
      !dot_type(b, x, y, batch_x, batch_y, nbatch, contract_x, contract_y, ncontract, &t)) {
    char s1[96], s2[96];
    tt_hlo_failf(b, "dot_general: operands %s and %s don't fit the dimension numbers",
                 type_str(ty(b, x), s1, sizeof s1), type_str(ty(b, y), s2, sizeof s2));
    return TT_HV_INVALID;
  }
  tt_hlo_buf a = {0};
  tt_hlo_buf_printf(&a, "{dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = ");
  tt_hlo_put_list(&a, batch_x, nbatch);
  tt_hlo_buf_printf(&a, ", rhs_batching_dimensions = ");
  tt_hlo_put_list(&a, batch_y, nbatch);
  tt_hlo_buf_printf(&a, ", lhs_contracting_dimensions = ");
  tt_hlo_put_list(&a, contract_x, ncontract);
  tt_hlo_buf_printf(&a, ", rhs_contracting_dimensions = ");
  tt_hlo_put_list(&a, contract_y, ncontract);
  tt_hlo_buf_printf(&a, ">");
  // Full precision: PyTorch's f32 matmul is f32, while TPUs default to
  // bf16 passes for f32 operands.
  if (dtype_kind(ty(b, x)->dtype) == K_FLOAT)
    tt_hlo_buf_printf(&a, ", precision_config = [#stablehlo<precision HIGHEST>, "
                          "#stablehlo<precision HIGHEST>]");
  tt_hlo_buf_printf(&a, "}");
  tt_hv r = tt_hlo_emit(b, "stablehlo.dot_general", xs, 2, a.p, &t);
  tt_hlo_buf_free(&a);
  return r;
}

// --- reductions ------------------------------------------------------------------------

// The type of x with `dims` removed; false if a dim is out of range or repeated.
static bool reduced_type(const tt_hlo_type *xt, const int64_t *dims, int n,
                         tt_hlo_type *t) {
  bool drop[TT_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    if (dims[i] < 0 || dims[i] >= xt->rank || drop[dims[i]]) return false;
    drop[dims[i]] = true;
  }
  *t = tt_hlo_make_type(xt->dtype, 0, NULL);
  for (int i = 0; i < xt->rank; i++)
    if (!drop[i]) t->dims[t->rank++] = xt->dims[i];
  return true;
}

// Emits the reduce line for operands xs[0..n) and inits xs[n..2n) with
// results of types rt (already allocated at `r`); the caller writes the
// region between begin and end.
static void reduce_begin(tt_hlo *b, tt_hv r, const tt_hv *xs, int n) {
  tt_hlo_begin_line(b, r, n);
  tt_hlo_buf_printf(&b->body, "\"stablehlo.reduce\"(");
  for (int i = 0; i < 2 * n; i++) {
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_name(b, &b->body, xs[i]);
  }
  tt_hlo_buf_printf(&b->body, ")");
}

static void reduce_end(tt_hlo *b, tt_hv r, const tt_hv *xs, int n,
                       const int64_t *dims, int ndims) {
  tt_hlo_buf_printf(&b->body, " {dimensions = ");
  tt_hlo_put_i64s(&b->body, dims, ndims);
  tt_hlo_buf_printf(&b->body, "}");
  tt_hlo_put_types(b, &b->body, xs, 2 * n);
  tt_hlo_buf_printf(&b->body, n > 1 ? "(" : "");
  for (int i = 0; i < n; i++) {
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_type(&b->body, ty(b, r + i));
  }
  tt_hlo_buf_printf(&b->body, n > 1 ? ")\n" : "\n");
}

tt_hv tt_hlo_reduce(tt_hlo *b, tt_hv x, tt_hv init, const int64_t *dims,
                    int ndims, tt_hlo_reduce_kind kind) {
  tt_hv xs[2] = {x, init};
  if (!tt_hlo_ok(b, xs, 2)) return TT_HV_INVALID;
  tt_hlo_type t;
  const tt_hlo_type *it = ty(b, init);
  if (!reduced_type(ty(b, x), dims, ndims, &t) || it->rank != 0 ||
      it->dtype != ty(b, x)->dtype || kind < TT_HLO_REDUCE_ADD || kind > TT_HLO_REDUCE_XOR) {
    char s[96];
    tt_hlo_failf(b, "reduce of %s: bad dims, init or kind %d",
                 type_str(ty(b, x), s, sizeof s), (int)kind);
    return TT_HV_INVALID;
  }
  if (ndims == 0) return x;
  tt_hv r = tt_hlo_new_values(b, &t, 1);
  if (r == TT_HV_INVALID) return r;
  reduce_begin(b, r, xs, 1);
  tt_hlo_combiner_region(b, &t.dtype, 1, (int)kind);
  reduce_end(b, r, xs, 1, dims, ndims);
  return r;
}

// The argmax/argmin comparator over (value, index) pairs a and c: a wins when
// it is strictly better (NaN beats numbers for both max and min, like
// PyTorch), or equal (NaN equals NaN) with the smaller index.
void tt_hlo_argreduce_region(tt_hlo *b, tt_dtype vd, tt_dtype id, bool is_max) {
  tt_dtype dts[4] = {vd, id, vd, id};
  tt_hv a[4];
  tt_hlo_region_begin(b, dts, 4, a);
  tt_hv better = tt_hlo_compare(b, is_max ? TT_HLO_GT : TT_HLO_LT, a[0], a[2]);
  tt_hv equal = tt_hlo_compare(b, TT_HLO_EQ, a[0], a[2]);
  if (dtype_kind(vd) == K_FLOAT) {
    tt_hv a_nan = tt_hlo_compare(b, TT_HLO_NE, a[0], a[0]);
    tt_hv c_nan = tt_hlo_compare(b, TT_HLO_NE, a[2], a[2]);
    tt_hv c_num = tt_hlo_unary(b, TT_HLO_NOT, c_nan);
    better = tt_hlo_binary(b, TT_HLO_OR, better, tt_hlo_binary(b, TT_HLO_AND, a_nan, c_num));
    equal = tt_hlo_binary(b, TT_HLO_OR, equal, tt_hlo_binary(b, TT_HLO_AND, a_nan, c_nan));
  }
  tt_hv first = tt_hlo_compare(b, TT_HLO_LT, a[1], a[3]);
  tt_hv pick = tt_hlo_binary(b, TT_HLO_OR, better, tt_hlo_binary(b, TT_HLO_AND, equal, first));
  tt_hv res[2] = {tt_hlo_select(b, pick, a[0], a[2]), tt_hlo_select(b, pick, a[1], a[3])};
  tt_hlo_region_end(b, res, 2);
}

// The identity of max (or min) for dtype d: -inf/+inf, or the integer limits.
static tt_hv arg_init(tt_hlo *b, tt_dtype d, bool is_max) {
  if (dtype_kind(d) == K_FLOAT) return tt_hlo_const(b, d, is_max ? -INFINITY : INFINITY);
  if (d == TT_BOOL) return tt_hlo_const_i(b, d, is_max ? 0 : 1);
  int bits = (int)tt_dtype_size(d) * 8;
  if (is_unsigned(d)) return tt_hlo_const_i(b, d, is_max ? 0 : -1);  // -1 wraps to max
  int64_t hi = bits == 64 ? INT64_MAX : (INT64_C(1) << (bits - 1)) - 1;
  return tt_hlo_const_i(b, d, is_max ? -hi - 1 : hi);
}

void tt_hlo_argreduce(tt_hlo *b, tt_hv x, int64_t dim, bool is_max,
                      tt_dtype idx_dtype, tt_hv *out_values, tt_hv *out_idx) {
  *out_values = *out_idx = TT_HV_INVALID;
  if (!tt_hlo_ok(b, &x, 1)) return;
  const tt_hlo_type xt = *ty(b, x);
  tt_hlo_type rt[2];
  if (!reduced_type(&xt, &dim, 1, &rt[0]) || dtype_kind(idx_dtype) != K_INT) {
    tt_hlo_failf(b, "argreduce: dim %" PRId64 " of rank %d", dim, (int)xt.rank);
    return;
  }
  rt[1] = rt[0];
  rt[1].dtype = idx_dtype;
  tt_hlo_type it = xt;
  it.dtype = idx_dtype;
  tt_hv xs[4] = {x, tt_hlo_iota(b, &it, dim), arg_init(b, xt.dtype, is_max),
                 tt_hlo_const_i(b, idx_dtype, 0)};
  if (!tt_hlo_ok(b, xs, 4)) return;
  tt_hv r = tt_hlo_new_values(b, rt, 2);
  if (r == TT_HV_INVALID) return;
  reduce_begin(b, r, xs, 2);  // operands (x, iota), inits (x_init, 0)
  tt_hlo_argreduce_region(b, xt.dtype, idx_dtype, is_max);
  reduce_end(b, r, xs, 2, &dim, 1);
  *out_values = r;
  *out_idx = r + 1;
}

// --- CHLO elementwise (special functions) --------------------------------------------

tt_hv tt_hlo_chlo_unary(tt_hlo *b, const char *name, tt_hv x) {
  if (!tt_hlo_ok(b, &x, 1) || !check_kind(b, name, x, K_FLOAT)) return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  return tt_hlo_emit(b, name, &x, 1, NULL, &t);
}

tt_hv tt_hlo_chlo_binary(tt_hlo *b, const char *name, tt_hv x, tt_hv y) {
  tt_hv xs[2] = {x, y};
  if (!tt_hlo_ok(b, xs, 2) || !check_same(b, name, x, y) || !check_kind(b, name, x, K_FLOAT))
    return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  return tt_hlo_emit(b, name, xs, 2, NULL, &t);
}

// --- while loops -------------------------------------------------------------------------

// Writes a block header "^bb0(%a: type, ...):" with arguments of the types of
// values vs[0..n) (their ids go to out_args) and indents the region.
static void while_block(tt_hlo *b, const tt_hv *vs, int n, tt_hv *out_args) {
  int outer = b->indent ? b->indent : 4;
  tt_hlo_buf_printf(&b->body, "{\n%*s^bb0(", outer, "");
  for (int i = 0; i < n; i++) {
    tt_hlo_type t = *ty(b, vs[i]);
    out_args[i] = tt_hlo_new_values(b, &t, 1);
    if (out_args[i] == TT_HV_INVALID) return;
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_name(b, &b->body, out_args[i]);
    tt_hlo_buf_printf(&b->body, ": ");
    tt_hlo_put_type(&b->body, &t);
  }
  tt_hlo_buf_printf(&b->body, "):\n");
  b->indent = outer + 2;
}

// Writes "stablehlo.return" of vs and closes the region with "}".
static void while_return(tt_hlo *b, const tt_hv *vs, int n) {
  if (tt_hlo_ok(b, vs, n)) {
    tt_hlo_begin_line(b, 0, 0);
    tt_hlo_buf_printf(&b->body, "\"stablehlo.return\"(");
    for (int i = 0; i < n; i++) {
      tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
      tt_hlo_put_name(b, &b->body, vs[i]);
    }
    tt_hlo_buf_printf(&b->body, ")");
    tt_hlo_put_types(b, &b->body, vs, n);
    tt_hlo_buf_printf(&b->body, "()\n");
  }
  b->indent -= 2;
  tt_hlo_buf_printf(&b->body, "%*s}", b->indent, "");
}

tt_hv tt_hlo_while_begin(tt_hlo *b, const tt_hv *init, int n, tt_hv *out_args) {
  for (int i = 0; i < n; i++) out_args[i] = TT_HV_INVALID;
  if (n < 1 || n > 64 || !tt_hlo_ok(b, init, n)) return TT_HV_INVALID;
  tt_hlo_type ts[64];
  for (int i = 0; i < n; i++) ts[i] = *ty(b, init[i]);
  tt_hv r = tt_hlo_new_values(b, ts, n);
  if (r == TT_HV_INVALID) return r;
  tt_hlo_begin_line(b, r, n);
  tt_hlo_buf_printf(&b->body, "\"stablehlo.while\"(");
  for (int i = 0; i < n; i++) {
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_name(b, &b->body, init[i]);
  }
  tt_hlo_buf_printf(&b->body, ") (");
  while_block(b, init, n, out_args);
  return r;
}

void tt_hlo_while_body(tt_hlo *b, tt_hv pred, int n, tt_hv r, tt_hv *out_args) {
  for (int i = 0; i < n; i++) out_args[i] = TT_HV_INVALID;
  if (r == TT_HV_INVALID) return;
  const tt_hlo_type *pt = pred == TT_HV_INVALID ? NULL : ty(b, pred);
  if (pt && (pt->dtype != TT_BOOL || pt->rank != 0)) {
    tt_hlo_failf(b, "while: the condition must be a 0-d bool");
    pred = TT_HV_INVALID;
  }
  while_return(b, &pred, 1);
  tt_hlo_buf_printf(&b->body, ", ");
  tt_hv rs[64];
  for (int i = 0; i < n; i++) rs[i] = r + i;
  while_block(b, rs, n, out_args);
}

void tt_hlo_while_end(tt_hlo *b, const tt_hv *init, const tt_hv *next, int n,
                      tt_hv r) {
  if (r == TT_HV_INVALID) return;
  for (int i = 0; i < n && tt_hlo_ok(b, next, n); i++)
    if (!tt_hlo_same_type(ty(b, next[i]), ty(b, r + i)))
      tt_hlo_failf(b, "while: carried value %d changes type", i);
  while_return(b, next, n);
  tt_hlo_buf_printf(&b->body, ")");
  tt_hlo_put_types(b, &b->body, init, n);
  tt_hlo_buf_printf(&b->body, "(");
  for (int i = 0; i < n; i++) {
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_type(&b->body, ty(b, r + i));
  }
  tt_hlo_buf_printf(&b->body, ")\n");
}
