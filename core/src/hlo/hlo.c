// hlo.c — the StableHLO text builder: values and types, @main's signature,
// constants, the generic-form op emitter and regions. The ops themselves live
// in hlo_ops.c (elementwise, shapes, dot, reductions) and hlo_index.c
// (gather, scatter, random bits).
//
// Leaves out: verification beyond operand types (the plugin's parser checks
// the rest and its diagnostic names the op), symbolic shapes. Functions other
// than @main (spliced kernels) are hlo_func.c's.
#include "hlo/hlo_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- text buffer -----------------------------------------------------------------

static bool buf_reserve(tt_hlo_buf *s, size_t extra) {
  if (s->oom) return false;
  if (s->len + extra + 1 <= s->cap) return true;
  size_t cap = s->cap ? s->cap : 1024;
  while (cap < s->len + extra + 1) cap *= 2;
  char *p = realloc(s->p, cap);
  if (!p) {
    s->oom = true;
    return false;
  }
  s->p = p;
  s->cap = cap;
  return true;
}

void tt_hlo_buf_printf(tt_hlo_buf *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0 || !buf_reserve(s, (size_t)n)) return;
  if ((size_t)n < sizeof small) {
    memcpy(s->p + s->len, small, (size_t)n + 1);
  } else {
    va_start(ap, fmt);
    vsnprintf(s->p + s->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  s->len += (size_t)n;
}

void tt_hlo_buf_free(tt_hlo_buf *s) {
  free(s->p);
  memset(s, 0, sizeof *s);
}

static void buf_clear(tt_hlo_buf *s) {
  s->len = 0;
  s->oom = false;
  if (s->p) s->p[0] = '\0';
}

// --- builder lifetime and errors -------------------------------------------------

tt_status tt_hlo_create(tt_hlo **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return tt_make_status(TT_RESOURCE_EXHAUSTED, "hlo builder: out of memory");
  return NULL;
}

void tt_hlo_destroy(tt_hlo *b) {
  if (!b) return;
  free(b->vals);
  free(b->params);
  tt_hlo_buf_free(&b->body);
  tt_hlo_buf_free(&b->text);
  tt_hlo_buf_free(&b->funcs);
  free(b->func_keys);
  tt_status_free(b->status);
  free(b);
}

void tt_hlo_reset(tt_hlo *b) {
  b->nvals = 0;
  b->nparams = 0;
  b->next_name = 0;
  b->indent = 0;
  buf_clear(&b->body);
  buf_clear(&b->text);
  buf_clear(&b->funcs);
  b->nfunc_keys = 0;
  tt_status_free(b->status);
  b->status = NULL;
}

tt_hlo_mark tt_hlo_get_mark(const tt_hlo *b) {
  return (tt_hlo_mark){b->nvals, b->nparams, b->next_name, b->body.len, b->indent};
}

void tt_hlo_rewind(tt_hlo *b, const tt_hlo_mark *m) {
  b->nvals = m->nvals;
  b->nparams = m->nparams;
  b->next_name = m->next_name;
  b->indent = m->indent;
  if (b->body.len > m->body_len) b->body.len = m->body_len;
  b->body.oom = false;  // the text up to the mark is intact
  if (b->body.p) b->body.p[b->body.len] = '\0';
  tt_status_free(b->status);
  b->status = NULL;
}

// Makes `dst` the builder `src` was at mark `m` (the whole of it when m is
// NULL): values, parameters and body text up to the mark; no error.
tt_status tt_hlo_copy_to_mark(tt_hlo *dst, const tt_hlo *src, const tt_hlo_mark *m) {
  tt_hlo_mark all = tt_hlo_get_mark(src);
  if (!m) m = &all;
  tt_hlo_reset(dst);
  if (m->nvals > dst->cap_vals) {
    tt_hlo_value *v = realloc(dst->vals, (size_t)m->nvals * sizeof *v);
    if (!v) return tt_make_status(TT_RESOURCE_EXHAUSTED, "hlo builder: out of memory");
    dst->vals = v;
    dst->cap_vals = m->nvals;
  }
  if (m->nparams > dst->cap_params) {
    int32_t *p = realloc(dst->params, (size_t)m->nparams * sizeof *p);
    if (!p) return tt_make_status(TT_RESOURCE_EXHAUSTED, "hlo builder: out of memory");
    dst->params = p;
    dst->cap_params = m->nparams;
  }
  if (m->nvals) memcpy(dst->vals, src->vals, (size_t)m->nvals * sizeof *dst->vals);
  if (m->nparams) memcpy(dst->params, src->params, (size_t)m->nparams * sizeof *dst->params);
  dst->nvals = m->nvals;
  dst->nparams = m->nparams;
  dst->next_name = m->next_name;
  dst->indent = m->indent;
  if (m->body_len) tt_hlo_buf_printf(&dst->body, "%.*s", (int)m->body_len, src->body.p);
  // Functions beside @main are not rewound (an op after the mark may have
  // added some: unused private functions are harmless).
  if (src->funcs.len) tt_hlo_buf_printf(&dst->funcs, "%s", src->funcs.p);
  if (src->nfunc_keys > dst->cap_func_keys) {
    uint64_t *k = realloc(dst->func_keys, (size_t)src->nfunc_keys * sizeof *k);
    if (!k) return tt_make_status(TT_RESOURCE_EXHAUSTED, "hlo builder: out of memory");
    dst->func_keys = k;
    dst->cap_func_keys = src->nfunc_keys;
  }
  if (src->nfunc_keys)
    memcpy(dst->func_keys, src->func_keys, (size_t)src->nfunc_keys * sizeof *dst->func_keys);
  dst->nfunc_keys = src->nfunc_keys;
  if (dst->body.oom || dst->funcs.oom)
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "hlo builder: out of memory");
  return NULL;
}

size_t tt_hlo_body_bytes(const tt_hlo *b) { return b->body.len; }

tt_status tt_hlo_status(const tt_hlo *b) { return b->status; }

tt_status tt_hlo_take_status(tt_hlo *b) {
  tt_status s = b->status;
  b->status = NULL;
  return s;
}

void tt_hlo_fail(tt_hlo *b, tt_status s) {
  if (!s) return;
  if (b->status) {
    tt_status_free(s);
    return;
  }
  b->status = s;
}

void tt_hlo_failf(tt_hlo *b, const char *fmt, ...) {
  if (b->status) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  b->status = tt_make_status(TT_INTERNAL, "hlo builder: %s", msg);
}

bool tt_hlo_ok(tt_hlo *b, const tt_hv *vs, int n) {
  for (int i = 0; i < n; i++) {
    if (vs[i] == TT_HV_INVALID) {
      // Normally an earlier call failed and said why; if not, say it here.
      if (!b->status) tt_hlo_failf(b, "operand %d is an invalid value", i);
      return false;
    }
    if (vs[i] < 0 || vs[i] >= b->nvals) {
      tt_hlo_failf(b, "value id %d out of range (%d values)", (int)vs[i],
                   (int)b->nvals);
      return false;
    }
  }
  return true;
}

// --- types -----------------------------------------------------------------------

static const char *const kElemNames[TT_DTYPE_COUNT] = {
    [TT_BOOL] = "i1",  [TT_U8] = "ui8",   [TT_I8] = "i8",    [TT_I16] = "i16",
    [TT_I32] = "i32",  [TT_I64] = "i64",  [TT_F16] = "f16",  [TT_BF16] = "bf16",
    [TT_F32] = "f32",  [TT_F64] = "f64",  [TT_U16] = "ui16", [TT_U32] = "ui32",
    [TT_U64] = "ui64", [TT_C64] = "complex<f32>", [TT_C128] = "complex<f64>",
};

const char *tt_hlo_elem_name(tt_dtype d) {
  return (d >= 0 && d < TT_DTYPE_COUNT) ? kElemNames[d] : NULL;
}

const tt_hlo_type *tt_hlo_type_of(const tt_hlo *b, tt_hv v) {
  if (v < 0 || v >= b->nvals) return NULL;
  return &b->vals[v].type;
}

// A type's rank as far as its dims array goes: a type made with a rank past
// TT_MAX_RANK (refused by valid_type when used) is never read past its array.
static int stored_rank(const tt_hlo_type *t) {
  return t->rank < 0 ? 0 : t->rank > TT_MAX_RANK ? TT_MAX_RANK : t->rank;
}

// Saturates at INT64_MAX: valid_type refuses such types, but a caller may
// ask of one it has only made.
int64_t tt_hlo_numel(const tt_hlo_type *t) {
  int64_t n = 1;
  for (int i = 0; i < stored_rank(t); i++)
    if (t->dims[i] == 0) return 0;
  for (int i = 0; i < stored_rank(t); i++)
    if (__builtin_mul_overflow(n, t->dims[i], &n)) return INT64_MAX;
  return n;
}

tt_hlo_type tt_hlo_make_type(tt_dtype d, int rank, const int64_t *dims) {
  tt_hlo_type t;
  memset(&t, 0, sizeof t);
  t.dtype = d;
  t.rank = rank;
  for (int i = 0; dims && i < rank && i < TT_MAX_RANK; i++) t.dims[i] = dims[i];
  return t;
}

bool tt_hlo_same_type(const tt_hlo_type *x, const tt_hlo_type *y) {
  if (x->dtype != y->dtype || x->rank != y->rank) return false;
  for (int i = 0; i < stored_rank(x); i++)
    if (x->dims[i] != y->dims[i]) return false;
  return true;
}

void tt_hlo_put_type(tt_hlo_buf *s, const tt_hlo_type *t) {
  tt_hlo_buf_printf(s, "tensor<");
  if (t->rank != stored_rank(t)) tt_hlo_buf_printf(s, "rank%dx", (int)t->rank);
  for (int i = 0; i < stored_rank(t); i++) tt_hlo_buf_printf(s, "%" PRId64 "x", t->dims[i]);
  const char *e = tt_hlo_elem_name(t->dtype);
  tt_hlo_buf_printf(s, "%s>", e ? e : "?");
}

void tt_hlo_put_name(tt_hlo *b, tt_hlo_buf *s, tt_hv v) {
  const tt_hlo_value *x = &b->vals[v];
  if (x->idx < 0)
    tt_hlo_buf_printf(s, "%%%d", (int)x->base);
  else
    tt_hlo_buf_printf(s, "%%%d#%d", (int)x->base, (int)x->idx);
}

void tt_hlo_put_i64s(tt_hlo_buf *s, const int64_t *xs, int n) {
  tt_hlo_buf_printf(s, "array<i64%s", n ? ": " : "");
  for (int i = 0; i < n; i++)
    tt_hlo_buf_printf(s, "%s%" PRId64, i ? ", " : "", xs[i]);
  tt_hlo_buf_printf(s, ">");
}

void tt_hlo_put_list(tt_hlo_buf *s, const int64_t *xs, int n) {
  tt_hlo_buf_printf(s, "[");
  for (int i = 0; i < n; i++)
    tt_hlo_buf_printf(s, "%s%" PRId64, i ? ", " : "", xs[i]);
  tt_hlo_buf_printf(s, "]");
}

// --- values ------------------------------------------------------------------------

static bool valid_type(tt_hlo *b, const tt_hlo_type *t) {
  if (!tt_hlo_elem_name(t->dtype) || t->rank < 0 || t->rank > TT_MAX_RANK) {
    tt_hlo_failf(b, "bad type (dtype %d, rank %d)", (int)t->dtype, (int)t->rank);
    return false;
  }
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) {
      tt_hlo_failf(b, "negative dimension %" PRId64, t->dims[i]);
      return false;
    }
  }
  // Element counts past 2^60 cannot be addressed in bytes on any device,
  // and every size computed from them would overflow.
  if (tt_hlo_numel(t) > ((int64_t)1 << 60)) {
    tt_hlo_failf(b, "a tensor of %s elements is too large", "more than 2^60");
    return false;
  }
  return true;
}

tt_hv tt_hlo_new_values(tt_hlo *b, const tt_hlo_type *types, int n) {
  for (int i = 0; i < n; i++)
    if (!valid_type(b, &types[i])) return TT_HV_INVALID;
  if (b->nvals + n > b->cap_vals) {
    int32_t cap = b->cap_vals ? b->cap_vals * 2 : 64;
    while (cap < b->nvals + n) cap *= 2;
    tt_hlo_value *v = realloc(b->vals, (size_t)cap * sizeof *v);
    if (!v) {
      tt_hlo_fail(b, tt_make_status(TT_RESOURCE_EXHAUSTED, "hlo builder: out of memory"));
      return TT_HV_INVALID;
    }
    b->vals = v;
    b->cap_vals = cap;
  }
  tt_hv first = b->nvals;
  int32_t name = b->next_name++;
  for (int i = 0; i < n; i++) {
    tt_hlo_value *v = &b->vals[b->nvals++];
    v->type = types[i];
    v->base = name;
    v->idx = n > 1 ? i : -1;
  }
  return first;
}

// --- signature and finish ------------------------------------------------------------

tt_hv tt_hlo_param(tt_hlo *b, const tt_hlo_type *t) {
  if (b->nparams == b->cap_params) {
    int32_t cap = b->cap_params ? b->cap_params * 2 : 16;
    int32_t *p = realloc(b->params, (size_t)cap * sizeof *p);
    if (!p) {
      tt_hlo_fail(b, tt_make_status(TT_RESOURCE_EXHAUSTED, "hlo builder: out of memory"));
      return TT_HV_INVALID;
    }
    b->params = p;
    b->cap_params = cap;
  }
  tt_hv v = tt_hlo_new_values(b, t, 1);
  if (v != TT_HV_INVALID) b->params[b->nparams++] = v;
  return v;
}

static void put_signature(tt_hlo *b, const tt_hv *results, int n,
                          const int32_t *param_alias) {
  tt_hlo_buf *s = &b->text;
  tt_hlo_buf_printf(s,
                    "module @tt attributes {mhlo.num_partitions = 1 : i32, "
                    "mhlo.num_replicas = 1 : i32} {\n  func.func public @main(");
  for (int i = 0; i < b->nparams; i++) {
    tt_hlo_buf_printf(s, "%s", i ? ", " : "");
    tt_hlo_put_name(b, s, b->params[i]);
    tt_hlo_buf_printf(s, ": ");
    tt_hlo_put_type(s, &b->vals[b->params[i]].type);
    if (param_alias && param_alias[i] >= 0)
      tt_hlo_buf_printf(s, " {tf.aliasing_output = %d : i32}", (int)param_alias[i]);
  }
  tt_hlo_buf_printf(s, ") -> (");
  for (int i = 0; i < n; i++) {
    tt_hlo_buf_printf(s, "%s", i ? ", " : "");
    tt_hlo_put_type(s, &b->vals[results[i]].type);
  }
  tt_hlo_buf_printf(s, ") {\n");
}

tt_status tt_hlo_finish(tt_hlo *b, const tt_hv *results, int n,
                        const char **out_text, size_t *out_len) {
  return tt_hlo_finish_aliased(b, results, n, NULL, out_text, out_len);
}

// An alias must name a result of the parameter's type, each result once.
static tt_status check_aliases(const tt_hlo *b, const tt_hv *results, int n,
                               const int32_t *param_alias) {
  for (int i = 0; param_alias && i < b->nparams; i++) {
    int32_t r = param_alias[i];
    if (r < 0) continue;
    if (r >= n || !tt_hlo_same_type(&b->vals[b->params[i]].type, &b->vals[results[r]].type))
      return tt_make_status(TT_INTERNAL, "hlo builder: parameter %d cannot alias result %d",
                            i, (int)r);
    for (int j = 0; j < i; j++)
      if (param_alias[j] == r)
        return tt_make_status(TT_INTERNAL, "hlo builder: result %d aliased twice", (int)r);
  }
  return NULL;
}

tt_status tt_hlo_finish_aliased(tt_hlo *b, const tt_hv *results, int n,
                                const int32_t *param_alias, const char **out_text,
                                size_t *out_len) {
  tt_hlo_ok(b, results, n);
  if (b->body.oom) tt_hlo_fail(b, tt_make_status(TT_RESOURCE_EXHAUSTED, "hlo builder: out of memory"));
  if (b->status) return tt_status_annotate(tt_hlo_take_status(b), "building StableHLO");
  TT_RETURN_IF_ERROR(check_aliases(b, results, n, param_alias));
  buf_clear(&b->text);
  put_signature(b, results, n, param_alias);
  tt_hlo_buf *s = &b->text;
  tt_hlo_buf_printf(s, "%s    \"func.return\"(", b->body.p ? b->body.p : "");
  for (int i = 0; i < n; i++) {
    tt_hlo_buf_printf(s, "%s", i ? ", " : "");
    tt_hlo_put_name(b, s, results[i]);
  }
  tt_hlo_buf_printf(s, ")");
  tt_hlo_put_types(b, s, results, n);
  tt_hlo_buf_printf(s, "()\n  }\n%s}\n", b->funcs.p ? b->funcs.p : "");
  if (s->oom || b->funcs.oom) return tt_make_status(TT_RESOURCE_EXHAUSTED, "hlo builder: out of memory");
  *out_text = s->p;
  *out_len = s->len;
  return NULL;
}

// --- op emission -----------------------------------------------------------------------

void tt_hlo_begin_line(tt_hlo *b, tt_hv first, int n) {
  tt_hlo_buf_printf(&b->body, "%*s", b->indent ? b->indent : 4, "");
  if (n == 0) return;
  tt_hlo_buf_printf(&b->body, "%%%d", (int)b->vals[first].base);
  if (n > 1) tt_hlo_buf_printf(&b->body, ":%d", n);
  tt_hlo_buf_printf(&b->body, " = ");
}

void tt_hlo_put_types(tt_hlo *b, tt_hlo_buf *s, const tt_hv *vs, int n) {
  tt_hlo_buf_printf(s, " : (");
  for (int i = 0; i < n; i++) {
    tt_hlo_buf_printf(s, "%s", i ? ", " : "");
    tt_hlo_put_type(s, &b->vals[vs[i]].type);
  }
  tt_hlo_buf_printf(s, ") -> ");
}

static void put_call(tt_hlo *b, const char *name, const tt_hv *operands, int n) {
  tt_hlo_buf_printf(&b->body, "\"%s\"(", name);
  for (int i = 0; i < n; i++) {
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_name(b, &b->body, operands[i]);
  }
  tt_hlo_buf_printf(&b->body, ")");
}

tt_hv tt_hlo_emit(tt_hlo *b, const char *name, const tt_hv *operands, int n,
                  const char *attrs, const tt_hlo_type *result) {
  if (!tt_hlo_ok(b, operands, n)) return TT_HV_INVALID;
  tt_hv r = tt_hlo_new_values(b, result, 1);
  if (r == TT_HV_INVALID) return r;
  tt_hlo_begin_line(b, r, 1);
  put_call(b, name, operands, n);
  if (attrs) tt_hlo_buf_printf(&b->body, " %s", attrs);
  tt_hlo_put_types(b, &b->body, operands, n);
  tt_hlo_put_type(&b->body, result);
  tt_hlo_buf_printf(&b->body, "\n");
  return r;
}

// --- regions -------------------------------------------------------------------------

void tt_hlo_region_begin(tt_hlo *b, const tt_dtype *dtypes, int n,
                         tt_hv *out_args) {
  int outer = b->indent ? b->indent : 4;
  tt_hlo_buf_printf(&b->body, " ({\n%*s^bb0(", outer, "");
  for (int i = 0; i < n; i++) {
    tt_hlo_type t = tt_hlo_make_type(dtypes[i], 0, NULL);
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

void tt_hlo_region_end(tt_hlo *b, const tt_hv *results, int n) {
  if (tt_hlo_ok(b, results, n)) {
    tt_hlo_begin_line(b, 0, 0);
    put_call(b, "stablehlo.return", results, n);
    tt_hlo_put_types(b, &b->body, results, n);
    tt_hlo_buf_printf(&b->body, "()\n");
  }
  b->indent -= 2;
  tt_hlo_buf_printf(&b->body, "%*s})", b->indent, "");
}

void tt_hlo_combiner_region(tt_hlo *b, const tt_dtype *dtypes, int n,
                            int kind) {
  static const tt_hlo_binop kOps[] = {
      [TT_HLO_REDUCE_ADD] = TT_HLO_ADD, [TT_HLO_REDUCE_MUL] = TT_HLO_MUL,
      [TT_HLO_REDUCE_MAX] = TT_HLO_MAX, [TT_HLO_REDUCE_MIN] = TT_HLO_MIN,
      [TT_HLO_REDUCE_AND] = TT_HLO_AND, [TT_HLO_REDUCE_OR] = TT_HLO_OR,
      [TT_HLO_REDUCE_XOR] = TT_HLO_XOR,
  };
  tt_dtype both[2 * TT_MAX_RANK] = {TT_BOOL};
  tt_hv args[2 * TT_MAX_RANK] = {0}, res[TT_MAX_RANK] = {0};
  if (n < 1 || n > TT_MAX_RANK) {
    tt_hlo_failf(b, "combiner region over %d operands", n);
    return;
  }
  for (int i = 0; i < n; i++) both[i] = both[n + i] = dtypes[i];
  tt_hlo_region_begin(b, both, 2 * n, args);
  for (int i = 0; i < n; i++) {
    res[i] = kind < 0 ? args[n + i]
                      : tt_hlo_binary(b, kOps[kind], args[i], args[n + i]);
  }
  tt_hlo_region_end(b, res, n);
}

// --- constants -------------------------------------------------------------------------

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// Rounds to bfloat16 (nearest, ties to even) and returns the value as float.
static float round_bf16(float f) {
  uint32_t u = f32_bits(f);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return f32_from_bits(u & 0xFFFF0000u);
}

// Rounds to IEEE half (nearest, ties to even) and returns the value as float.
static float round_f16(float f) {
  float a = fabsf(f);
  if (a >= 65520.0f) return copysignf(INFINITY, f);  // overflows to inf
  if (a < 6.103515625e-05f) {  // subnormal: multiples of 2^-24
    float q = nearbyintf(a * 16777216.0f) / 16777216.0f;
    return copysignf(q, f);
  }
  int e;
  float m = frexpf(a, &e);  // a = m * 2^e, m in [0.5, 1): keep 11 bits
  float q = ldexpf(nearbyintf(ldexpf(m, 11)), e - 11);
  return copysignf(q, f);
}

// Appends the literal for one element of dtype d with value v.
static void put_float_literal(tt_hlo_buf *s, tt_dtype d, double v) {
  if (isnan(v) || isinf(v)) {
    // MLIR takes non-finite floats only as their bit pattern.
    bool neg = signbit(v) != 0;
    static const char *const kInf[2][4] = {
        {"0x7C00", "0x7F80", "0x7F800000", "0x7FF0000000000000"},
        {"0xFC00", "0xFF80", "0xFF800000", "0xFFF0000000000000"}};
    static const char *const kNan[4] = {"0x7E00", "0x7FC0", "0x7FC00000",
                                        "0x7FF8000000000000"};
    int k = d == TT_F16 ? 0 : d == TT_BF16 ? 1 : d == TT_F32 ? 2 : 3;
    tt_hlo_buf_printf(s, "%s", isnan(v) ? kNan[k] : kInf[neg][k]);
    return;
  }
  if (d == TT_F64) {
    tt_hlo_buf_printf(s, "%.16e", v);
    return;
  }
  float f = (float)v;
  if (d == TT_BF16) f = round_bf16(f);
  if (d == TT_F16) f = round_f16(f);
  if (isinf(f)) {
    put_float_literal(s, d, (double)f);
    return;
  }
  tt_hlo_buf_printf(s, "%.8e", (double)f);  // 9 digits: exact for a float
}

// Wraps v to the dtype's width (C conversion semantics) and appends it.
static void put_int_literal(tt_hlo_buf *s, tt_dtype d, int64_t v) {
  int bits = (int)tt_dtype_size(d) * 8;
  uint64_t u = (uint64_t)v;
  if (bits < 64) u &= (UINT64_C(1) << bits) - 1;
  bool is_unsigned = d == TT_U8 || d == TT_U16 || d == TT_U32 || d == TT_U64;
  if (d == TT_BOOL) {
    tt_hlo_buf_printf(s, "%s", v ? "true" : "false");
  } else if (is_unsigned) {
    tt_hlo_buf_printf(s, "%" PRIu64, u);
  } else {
    if (bits < 64 && (u >> (bits - 1)) & 1) u |= ~((UINT64_C(1) << bits) - 1);
    tt_hlo_buf_printf(s, "%" PRId64, (int64_t)u);
  }
}

static bool is_float_dtype(tt_dtype d) {
  return d == TT_F16 || d == TT_BF16 || d == TT_F32 || d == TT_F64;
}

// A splat constant; `fv` is used for floats, `iv` for integers and bool,
// (fv, im) for complex.
static tt_hv splat_c(tt_hlo *b, const tt_hlo_type *t, double fv, int64_t iv,
                     double im) {
  tt_hv r = tt_hlo_new_values(b, t, 1);
  if (r == TT_HV_INVALID) return r;
  tt_hlo_begin_line(b, r, 1);
  tt_hlo_buf_printf(&b->body, "\"stablehlo.constant\"() {value = dense<");
  if (tt_dtype_is_complex(t->dtype)) {
    tt_dtype part = tt_dtype_to_real(t->dtype);
    tt_hlo_buf_printf(&b->body, "(");
    put_float_literal(&b->body, part, fv);
    tt_hlo_buf_printf(&b->body, ", ");
    put_float_literal(&b->body, part, im);
    tt_hlo_buf_printf(&b->body, ")");
  } else if (is_float_dtype(t->dtype))
    put_float_literal(&b->body, t->dtype, fv);
  else
    put_int_literal(&b->body, t->dtype, iv);
  tt_hlo_buf_printf(&b->body, "> : ");
  tt_hlo_put_type(&b->body, t);
  tt_hlo_buf_printf(&b->body, "} : () -> ");
  tt_hlo_put_type(&b->body, t);
  tt_hlo_buf_printf(&b->body, "\n");
  return r;
}

static tt_hv splat(tt_hlo *b, const tt_hlo_type *t, double fv, int64_t iv) {
  return splat_c(b, t, fv, iv, 0.0);
}

tt_hv tt_hlo_splat_c(tt_hlo *b, const tt_hlo_type *t, double re, double im) {
  if (!tt_dtype_is_complex(t->dtype)) return tt_hlo_splat(b, t, re);
  return splat_c(b, t, re, 0, im);
}

// Double to int64 the way C would, without undefined behaviour out of range.
static int64_t double_to_i64(double v) {
  if (isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return (int64_t)v;
}

tt_hv tt_hlo_splat(tt_hlo *b, const tt_hlo_type *t, double v) {
  // Unsigned 64-bit values above INT64_MAX keep their bits.
  int64_t iv = (t->dtype == TT_U64 && v >= 9.2233720368547758e18 && v < 1.8446744073709552e19)
                   ? (int64_t)(uint64_t)v
                   : double_to_i64(v);
  if (t->dtype == TT_BOOL) iv = v != 0;
  return splat(b, t, v, iv);
}

tt_hv tt_hlo_splat_i(tt_hlo *b, const tt_hlo_type *t, int64_t v) {
  return splat(b, t, (double)v, t->dtype == TT_BOOL ? v != 0 : v);
}

tt_hv tt_hlo_const(tt_hlo *b, tt_dtype d, double v) {
  tt_hlo_type t = tt_hlo_make_type(d, 0, NULL);
  return tt_hlo_splat(b, &t, v);
}

tt_hv tt_hlo_const_i(tt_hlo *b, tt_dtype d, int64_t v) {
  tt_hlo_type t = tt_hlo_make_type(d, 0, NULL);
  return tt_hlo_splat_i(b, &t, v);
}
