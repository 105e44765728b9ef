// explain.c — the recompile explainer: why was this program compiled?
//
// Eager ops: on a signature-cache miss, eager.c calls tt_explain_op with the
// call. The call is described as a list of typed records, one per fact the
// signature depends on, each tagged with the argument it belongs to and its
// category (shape, dtype, layout, argument, storage). The description is
// diffed against the last HISTORY descriptions of the same op; the nearest
// one (fewest differing categories, then most recent) names the cause. If the
// miss then leads to a real compile (not a program-cache or disk hit),
// tt_explain_compile counts the cause and, when enabled, prints one line:
//
//   [torchtpu] compile #7 aten::add.Tensor (0.031 s): shape: arg 0 [3, 5] -> [4, 5]
//
// Whole graphs (fused eager, torch.compile) compile with no eager call
// pending: their text is reduced to a skeleton (tensor types blanked) and
// the types' dims and element types; a graph whose skeleton was seen before
// differs by "shape" or "dtype", one with a known label but a new skeleton by
// "graph", one never seen is a "new op".
//
// The description mirrors what eager.c's signature holds, in a form made for
// diffing: layouts are "contiguous" or the strides (so a shape change of a
// contiguous tensor is not also a layout change), a view's offset counts only
// as zero/non-zero (its value is a runtime argument), storage facts are
// relative to the view.
//
// Leaves out: explaining program-cache hits (nothing compiled) and the
// signature cache's own misses that end in a hit (they cost a lowering only).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/explain.h"

#include "base/buf.h"
#include "base/hash.h"
#include "lower/lower.h"
#include "lower/program.h"
#include "runtime/cache.h"
#include "runtime/runtime.h"
#include "runtime/storage.h"

#define HISTORY 8   // descriptions kept per op
#define GRAPHS 64   // graph signatures kept
#define TOP 6       // ops listed in the summary

static const char *const kCauseNames[TT_CAUSE_COUNT] = {
    [TT_CAUSE_NEW_OP] = "new op",   [TT_CAUSE_SHAPE] = "shape",
    [TT_CAUSE_DTYPE] = "dtype",     [TT_CAUSE_LAYOUT] = "layout",
    [TT_CAUSE_ARGUMENT] = "argument", [TT_CAUSE_STORAGE] = "storage",
    [TT_CAUSE_GRAPH] = "graph",
};
_Static_assert(sizeof kCauseNames / sizeof kCauseNames[0] == TT_CAUSE_COUNT,
               "one name per cause");

const char *tt_cause_name(tt_cause c) {
  return c >= 0 && c < TT_CAUSE_COUNT ? kCauseNames[c] : "?";
}

// How a record's payload prints in a detail message.
typedef enum fmt { FMT_INTS, FMT_DTYPES, FMT_TEXT, FMT_LAYOUT, FMT_OPAQUE } fmt;

// A record: this header, then `n` bytes of payload.
typedef struct rec {
  uint8_t cause;  // tt_cause
  uint8_t fmt;
  int16_t arg;    // argument index, -1 for the call itself
  uint32_t n;
} rec;

typedef struct op_hist {
  tt_buf desc[HISTORY];
  int count, next;
} op_hist;

typedef struct graph_sig {
  char label[64];
  uint64_t skeleton, dims, elts;
} graph_sig;

typedef struct label_count {
  char label[64];
  int64_t compiles;
  int64_t by_cause[TT_CAUSE_COUNT];
} label_count;

struct tt_explain {
  bool enabled;
  // The eager call being lowered (-1: none) and what explains it.
  int32_t op;
  tt_cause cause;
  uint32_t mask;  // every category that differs
  char detail[200];
  tt_buf cur;     // its description

  op_hist *ops;  // indexed by op id
  int nops;
  graph_sig graphs[GRAPHS];
  int ngraphs, gnext;

  int64_t counts[TT_CAUSE_COUNT];
  int64_t seq;  // compiles so far
  double seconds;
  label_count *labels;
  int nlabels, cap_labels;
};

tt_status tt_explain_create(tt_explain **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return tt_make_status(TT_RESOURCE_EXHAUSTED, "explain: out of memory");
  (*out)->op = -1;
  tt_buf_init(&(*out)->cur);
  return NULL;
}

void tt_explain_destroy(tt_explain *x) {
  if (!x) return;
  for (int i = 0; i < x->nops; i++)
    for (int j = 0; j < HISTORY; j++) tt_buf_deinit(&x->ops[i].desc[j]);
  free(x->ops);
  free(x->labels);
  tt_buf_deinit(&x->cur);
  free(x);
}

void tt_explain_set_enabled(tt_explain *x, bool on) { x->enabled = on; }
bool tt_explain_enabled(const tt_explain *x) { return x->enabled; }

// --- describing a call ----------------------------------------------------------------

static void put(tt_buf *b, tt_cause cause, fmt f, int arg, const void *data,
                size_t n) {
  rec r = {(uint8_t)cause, (uint8_t)f, (int16_t)arg, (uint32_t)n};
  tt_buf_append(b, &r, sizeof r);
  tt_buf_append(b, data, n);
}

static void put_i64s(tt_buf *b, tt_cause cause, fmt f, int arg,
                     const int64_t *v, int n) {
  put(b, cause, f, arg, v, sizeof(int64_t) * (size_t)(n > 0 ? n : 0));
}

static bool contiguous(const tt_tensor *t) {
  int64_t expect = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->sizes[d] != 1 && t->strides[d] != expect) return false;
    expect *= t->sizes[d];
  }
  return true;
}

typedef struct seen {
  const tt_storage *s[64];
  int n;
} seen;

// The index of the first tensor seen on t's storage (aliasing), else a new one.
static int64_t alias_group(seen *sn, const tt_storage *s) {
  for (int i = 0; i < sn->n; i++)
    if (sn->s[i] == s) return i;
  if (sn->n < 64) sn->s[sn->n++] = s;
  return sn->n - 1;
}

static void describe_tensor(tt_buf *b, int arg, const tt_tensor *t, seen *sn) {
  if (!t->storage) {
    int64_t none = -1;
    put_i64s(b, TT_CAUSE_ARGUMENT, FMT_OPAQUE, arg, &none, 1);
    return;
  }
  int64_t dt = t->dtype;
  put_i64s(b, TT_CAUSE_DTYPE, FMT_DTYPES, arg, &dt, 1);
  put_i64s(b, TT_CAUSE_SHAPE, FMT_INTS, arg, t->sizes, t->ndim);
  // layout: [offset != 0, contiguous, strides if not]
  int64_t lay[2 + TT_MAX_RANK] = {t->offset != 0, contiguous(t)};
  int n = 2;
  if (!lay[1])
    for (int d = 0; d < t->ndim && d < TT_MAX_RANK; d++) lay[n++] = t->strides[d];
  put_i64s(b, TT_CAUSE_LAYOUT, FMT_LAYOUT, arg, lay, n);
  int64_t numel = 1;
  for (int d = 0; d < t->ndim; d++) numel *= t->sizes[d];
  tt_storage_facts f;
  tt_storage_facts_of(t->storage, &f);
  int64_t bnumel = tt_facts_buffer_numel(&f, t->dtype);
  tt_dtype bd = tt_facts_buffer_dtype(&f, t->dtype);
  int64_t st[4] = {alias_group(sn, t->storage), bd == t->dtype ? -1 : (int64_t)bd,
                   bnumel == numel ? -1 : bnumel,
                   t->storage->nbytes == bnumel * tt_dtype_size(bd)
                       ? -1 : t->storage->nbytes};
  put_i64s(b, TT_CAUSE_STORAGE, FMT_OPAQUE, arg, st, 4);
}

static void describe_value(tt_buf *b, int arg, const tt_value *v,
                           bool scalar_values, seen *sn) {
  int64_t kind = v->kind;
  put_i64s(b, TT_CAUSE_ARGUMENT, FMT_OPAQUE, arg, &kind, 1);
  switch (v->kind) {
    case TT_VALUE_TENSOR: describe_tensor(b, arg, &v->u.tensor, sn); break;
    case TT_VALUE_SCALAR: {
      int64_t d[2] = {v->u.scalar.dtype, v->u.scalar.wrapped};
      put_i64s(b, TT_CAUSE_DTYPE, FMT_DTYPES, arg, d, 1);
      put_i64s(b, TT_CAUSE_ARGUMENT, FMT_OPAQUE, arg, d + 1, 1);
      if (scalar_values) {
        put(b, TT_CAUSE_ARGUMENT, FMT_OPAQUE, arg, &v->u.scalar.f, sizeof v->u.scalar.f);
        put_i64s(b, TT_CAUSE_ARGUMENT, FMT_INTS, arg, &v->u.scalar.i, 1);
      }
      break;
    }
    case TT_VALUE_INT: put_i64s(b, TT_CAUSE_ARGUMENT, FMT_INTS, arg, &v->u.i, 1); break;
    case TT_VALUE_BOOL: {
      int64_t x = v->u.b;
      put_i64s(b, TT_CAUSE_ARGUMENT, FMT_INTS, arg, &x, 1);
      break;
    }
    case TT_VALUE_DTYPE: {
      int64_t x = v->u.dtype;
      put_i64s(b, TT_CAUSE_DTYPE, FMT_DTYPES, arg, &x, 1);
      break;
    }
    case TT_VALUE_INTS:
      put_i64s(b, TT_CAUSE_ARGUMENT, FMT_INTS, arg, v->u.ints.data, v->u.ints.n);
      break;
    case TT_VALUE_STRING:
      put(b, TT_CAUSE_ARGUMENT, FMT_TEXT, arg, v->u.str, strlen(v->u.str));
      break;
    case TT_VALUE_LIST: {
      int64_t n = v->u.list.n;
      put_i64s(b, TT_CAUSE_ARGUMENT, FMT_INTS, arg, &n, 1);
      for (int j = 0; j < v->u.list.n; j++)
        describe_value(b, arg, &v->u.list.items[j], scalar_values, sn);
      break;
    }
    case TT_VALUE_NONE:
    case TT_VALUE_GENERATOR:
      break;
  }
}

static void describe(tt_buf *b, const tt_op_call *call) {
  tt_buf_clear(b);
  const tt_rule *rule = tt_rule_get(call->op);
  bool values = rule && (rule->flags & TT_RULE_SCALARS_IN_SIGNATURE);
  int64_t dd = call->default_dtype;
  put_i64s(b, TT_CAUSE_DTYPE, FMT_DTYPES, -1, &dd, 1);
  int64_t dests[1 + 2 * 16] = {call->ndests};
  int n = 1;
  for (int i = 0; i < call->ndests && i < 16; i++) {
    dests[n++] = call->dests[i].arg;
    dests[n++] = call->dests[i].item;
  }
  put_i64s(b, TT_CAUSE_ARGUMENT, FMT_OPAQUE, -1, dests, n);
  seen sn = {.n = 0};
  for (int i = 0; i < call->nargs; i++)
    describe_value(b, i, &call->args[i], values, &sn);
}

// --- diffing two descriptions ----------------------------------------------------------

typedef struct diff {
  uint32_t mask;          // 1 << cause for every differing category
  const rec *first[TT_CAUSE_COUNT];  // first differing record (new side), unaligned
  const void *old_data[TT_CAUSE_COUNT];
  uint32_t old_n[TT_CAUSE_COUNT];
} diff;

static const rec *rec_at(const char *p, size_t off, size_t len, rec *tmp) {
  if (off + sizeof *tmp > len) return NULL;
  memcpy(tmp, p + off, sizeof *tmp);
  if (off + sizeof *tmp + tmp->n > len) return NULL;
  return tmp;
}

// Records `c` as differing; `at` is the new side's record (or NULL).
static void mark(diff *d, tt_cause c, const char *at, const void *old_data,
                 uint32_t old_n) {
  if (d->mask & (1u << c)) return;
  d->mask |= 1u << c;
  d->first[c] = (const rec *)(const void *)at;
  d->old_data[c] = old_data;
  d->old_n[c] = old_n;
}

// Diffs `a` (new) against `b` (old). Descriptions of different structure
// (another argument kind, list length) differ by "argument" from there on.
static void diff_desc(const tt_buf *a, const tt_buf *b, diff *d) {
  memset(d, 0, sizeof *d);
  size_t ia = 0, ib = 0;
  while (ia < a->len || ib < b->len) {
    rec ra, rb;
    const rec *pa = rec_at(a->data, ia, a->len, &ra);
    const rec *pb = rec_at(b->data, ib, b->len, &rb);
    if (!pa || !pb || pa->cause != pb->cause || pa->arg != pb->arg) {
      mark(d, TT_CAUSE_ARGUMENT, pa ? a->data + ia : NULL, NULL, 0);
      return;
    }
    const char *da = a->data + ia + sizeof ra, *db = b->data + ib + sizeof rb;
    if (pa->n != pb->n || memcmp(da, db, pa->n) != 0) {
      mark(d, (tt_cause)pa->cause, a->data + ia, db, pb->n);
      // A different argument kind or list length changes what follows.
      if (pa->cause == TT_CAUSE_ARGUMENT && pa->fmt == FMT_OPAQUE && pa->n == 8 &&
          pb->n == 8)
        return;
    }
    ia += sizeof ra + pa->n;
    ib += sizeof rb + pb->n;
  }
}

static int popcount(uint32_t v) {
  int n = 0;
  for (; v; v &= v - 1) n++;
  return n;
}

// --- detail messages --------------------------------------------------------------------

static void print_payload(tt_buf *out, fmt f, const void *data, uint32_t n) {
  int64_t v[TT_MAX_RANK + 2 + 32];
  int k = (int)(n / 8) < (int)(sizeof v / sizeof v[0]) ? (int)(n / 8) : (int)(sizeof v / sizeof v[0]);
  if (f != FMT_TEXT) memcpy(v, data, (size_t)k * 8);
  switch (f) {
    case FMT_INTS:
      tt_buf_printf(out, "[");
      for (int i = 0; i < k; i++) tt_buf_printf(out, "%s%lld", i ? ", " : "", (long long)v[i]);
      tt_buf_printf(out, "]");
      break;
    case FMT_DTYPES:
      tt_buf_printf(out, "%s", k ? tt_dtype_name((tt_dtype)v[0]) : "?");
      break;
    case FMT_TEXT:
      tt_buf_printf(out, "'%.*s'", (int)(n < 40 ? n : 40), (const char *)data);
      break;
    case FMT_LAYOUT:
      if (k >= 2 && v[1]) tt_buf_printf(out, "contiguous");
      else {
        tt_buf_printf(out, "strides [");
        for (int i = 2; i < k; i++) tt_buf_printf(out, "%s%lld", i > 2 ? ", " : "", (long long)v[i]);
        tt_buf_printf(out, "]");
      }
      if (k >= 1 && v[0]) tt_buf_printf(out, " at an offset");
      break;
    default:
      tt_buf_printf(out, "(changed)");
      break;
  }
}

static tt_cause primary(uint32_t mask) {
  static const tt_cause order[] = {TT_CAUSE_SHAPE, TT_CAUSE_DTYPE, TT_CAUSE_LAYOUT,
                                   TT_CAUSE_ARGUMENT, TT_CAUSE_STORAGE};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
    if (mask & (1u << order[i])) return order[i];
  return TT_CAUSE_STORAGE;
}

static void explain_diff(tt_explain *x, const diff *d) {
  x->mask = d->mask;
  x->cause = primary(d->mask);
  tt_buf m;
  tt_buf_init(&m);
  const rec *r = d->first[x->cause];
  if (!d->mask) {
    tt_buf_printf(&m, "same arguments as an earlier call; storages or aliasing differ");
  } else if (!r) {
    tt_buf_printf(&m, "the arguments' structure differs");
  } else {
    rec h;
    memcpy(&h, r, sizeof h);
    if (h.arg >= 0) tt_buf_printf(&m, "arg %d ", h.arg);
    else tt_buf_printf(&m, "call ");
    if (d->old_data[x->cause]) {
      print_payload(&m, (fmt)h.fmt, d->old_data[x->cause], d->old_n[x->cause]);
      tt_buf_printf(&m, " -> ");
    }
    print_payload(&m, (fmt)h.fmt, (const char *)r + sizeof h, h.n);
  }
  uint32_t others = d->mask & ~(1u << x->cause);
  for (int c = 0; c < TT_CAUSE_COUNT; c++)
    if (others & (1u << c)) tt_buf_printf(&m, "; also %s", kCauseNames[c]);
  snprintf(x->detail, sizeof x->detail, "%s", tt_buf_ok(&m) && m.data ? m.data : "");
  tt_buf_deinit(&m);
}

// --- eager hooks ------------------------------------------------------------------------

static op_hist *history_of(tt_explain *x, int32_t op) {
  if (op < 0) return NULL;
  if (op >= x->nops) {
    int n = op + 64;
    op_hist *h = realloc(x->ops, (size_t)n * sizeof *h);
    if (!h) return NULL;
    for (int i = x->nops; i < n; i++) {
      memset(&h[i], 0, sizeof h[i]);
      for (int j = 0; j < HISTORY; j++) tt_buf_init(&h[i].desc[j]);
    }
    x->ops = h;
    x->nops = n;
  }
  return &x->ops[op];
}

void tt_explain_op(tt_runtime *rt, const tt_op_call *call) {
  tt_explain *x = tt_prog_cache_explain(rt->progs);
  x->op = call->op;
  x->cause = TT_CAUSE_NEW_OP;
  x->mask = 0;
  snprintf(x->detail, sizeof x->detail, "first signature of this op");
  describe(&x->cur, call);
  op_hist *h = history_of(x, call->op);
  if (!h || !tt_buf_ok(&x->cur)) return;
  int best = -1, best_n = 1 << 30;
  diff d, best_d;
  memset(&best_d, 0, sizeof best_d);
  for (int k = 0; k < h->count; k++) {
    int j = (h->next - 1 - k + HISTORY) % HISTORY;  // most recent first
    diff_desc(&x->cur, &h->desc[j], &d);
    if (popcount(d.mask) < best_n) {
      best = j;
      best_n = popcount(d.mask);
      best_d = d;
    }
  }
  if (best >= 0) {
    // The records point into x->cur or the history: explain before reusing them.
    explain_diff(x, &best_d);
  }
  tt_buf *slot = &h->desc[h->next];
  tt_buf_clear(slot);
  tt_buf_append(slot, x->cur.data, x->cur.len);
  h->next = (h->next + 1) % HISTORY;
  if (h->count < HISTORY) h->count++;
}

void tt_explain_op_done(tt_runtime *rt) {
  tt_prog_cache_explain(rt->progs)->op = -1;
}

char *tt_explain_why(tt_runtime *rt, int *cause) {
  tt_explain *x = tt_prog_cache_explain(rt->progs);
  if (x->op < 0) return NULL;
  *cause = x->cause;
  return strdup(x->detail);
}

void tt_explain_op_resume(tt_runtime *rt, int32_t op, int cause, const char *why,
                          int64_t host_calls) {
  tt_explain *x = tt_prog_cache_explain(rt->progs);
  x->op = op;
  x->cause = cause >= 0 && cause < TT_CAUSE_COUNT ? (tt_cause)cause : TT_CAUSE_NEW_OP;
  x->mask = 1u << x->cause;
  snprintf(x->detail, sizeof x->detail, "%s (ran %lld times on the host first)", why,
           (long long)host_calls);
}

// --- graphs -----------------------------------------------------------------------------

// Skeleton (text with tensor types blanked), dims and element-type hashes.
static void graph_hashes(const char *text, size_t len, graph_sig *g) {
  uint64_t sk = 1469598103934665603ull, dm = sk, el = sk;
  static const char kTensor[] = "tensor<";
  const size_t kt = sizeof kTensor - 1;
  for (size_t i = 0; i < len; i++) {
    if (i + kt <= len && memcmp(text + i, kTensor, kt) == 0) {
      size_t s = i + kt, e = s;
      int depth = 1;
      size_t last_x = (size_t)-1;
      for (; e < len && depth > 0; e++) {
        if (text[e] == '<') depth++;
        else if (text[e] == '>') depth--;
        else if (text[e] == 'x' && depth == 1) last_x = e;
      }
      size_t end = e ? e - 1 : e;  // the closing '>'
      size_t split = last_x == (size_t)-1 ? s : last_x + 1;
      dm = (dm ^ tt_hash64(text + s, split - s)) * 1099511628211ull;
      el = (el ^ tt_hash64(text + split, end > split ? end - split : 0)) * 1099511628211ull;
      sk = (sk ^ 'T') * 1099511628211ull;
      i = end;
      continue;
    }
    sk = (sk ^ (unsigned char)text[i]) * 1099511628211ull;
  }
  g->skeleton = sk;
  g->dims = dm;
  g->elts = el;
}

void tt_explain_label(tt_explain *x, const char *text, size_t len, char *out,
                      size_t cap) {
  if (x->op >= 0) {
    const char *name = tt_op_name(x->op);
    snprintf(out, cap, "%s", name ? name : "?");
    return;
  }
  // "graph: add, dot_general, tanh": the first distinct ops, constants aside.
  static const char kPrefix[] = "stablehlo.";
  const size_t kp = sizeof kPrefix - 1;
  char names[3][32];
  int n = 0;
  for (size_t i = 0; i + kp < len && n < 3; i++) {
    if (memcmp(text + i, kPrefix, kp) != 0) continue;
    size_t s = i + kp, e = s;
    while (e < len && e - s < 31 && (text[e] == '_' || (text[e] >= 'a' && text[e] <= 'z')))
      e++;
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(e - s), text + s);
    i = e;
    if (!*name || strcmp(name, "constant") == 0) continue;
    bool dup = false;
    for (int k = 0; k < n; k++) dup = dup || strcmp(names[k], name) == 0;
    if (!dup) memcpy(names[n++], name, sizeof name);
  }
  snprintf(out, cap, "graph: %s%s%s%s%s", n > 0 ? names[0] : "empty",
           n > 1 ? ", " : "", n > 1 ? names[1] : "", n > 2 ? ", " : "",
           n > 2 ? names[2] : "");
}

static void explain_graph(tt_explain *x, const char *label, const char *text,
                          size_t len) {
  graph_sig g;
  snprintf(g.label, sizeof g.label, "%s", label);
  graph_hashes(text, len, &g);
  x->cause = TT_CAUSE_NEW_OP;
  snprintf(x->detail, sizeof x->detail, "first graph with these ops");
  for (int k = 0; k < x->ngraphs; k++) {
    const graph_sig *o = &x->graphs[(x->gnext - 1 - k + GRAPHS) % GRAPHS];
    if (o->skeleton == g.skeleton) {
      x->cause = o->elts != g.elts ? TT_CAUSE_DTYPE : TT_CAUSE_SHAPE;
      snprintf(x->detail, sizeof x->detail,
               "same graph structure as an earlier one; tensor %s differ",
               x->cause == TT_CAUSE_DTYPE ? "element types" : "shapes");
      break;
    }
    if (x->cause == TT_CAUSE_NEW_OP && strcmp(o->label, g.label) == 0) {
      x->cause = TT_CAUSE_GRAPH;
      snprintf(x->detail, sizeof x->detail,
               "graph structure (or a shape-dependent attribute) differs "
               "from an earlier graph with the same first ops");
    }
  }
  x->graphs[x->gnext] = g;
  x->gnext = (x->gnext + 1) % GRAPHS;
  if (x->ngraphs < GRAPHS) x->ngraphs++;
}

// --- compiles -------------------------------------------------------------------------------

static label_count *label_entry(tt_explain *x, const char *label) {
  for (int i = 0; i < x->nlabels; i++)
    if (strcmp(x->labels[i].label, label) == 0) return &x->labels[i];
  if (x->nlabels == x->cap_labels) {
    int cap = x->cap_labels ? 2 * x->cap_labels : 64;
    label_count *l = realloc(x->labels, (size_t)cap * sizeof *l);
    if (!l) return NULL;
    x->labels = l;
    x->cap_labels = cap;
  }
  label_count *e = &x->labels[x->nlabels++];
  memset(e, 0, sizeof *e);
  snprintf(e->label, sizeof e->label, "%s", label);
  return e;
}

tt_cause tt_explain_compile(tt_explain *x, const char *label, const char *text,
                            size_t len, double seconds) {
  if (x->op < 0) explain_graph(x, label, text, len);
  tt_cause c = x->cause;
  x->counts[c]++;
  x->seq++;
  x->seconds += seconds;
  label_count *e = label_entry(x, label);
  if (e) {
    e->compiles++;
    e->by_cause[c]++;
  }
  if (x->enabled) {
    fprintf(stderr, "[torchtpu] compile #%lld %s (%.3f s): %s: %s\n",
            (long long)x->seq, label, seconds, kCauseNames[c], x->detail);
    fflush(stderr);
  }
  return c;
}

// --- counts and summary -----------------------------------------------------------------------

void tt_explain_counts(const tt_explain *x, int64_t *out) {
  memcpy(out, x->counts, sizeof x->counts);
}

static int by_recompiles(const void *a, const void *b) {
  const label_count *x = a, *y = b;
  int64_t rx = x->compiles - x->by_cause[TT_CAUSE_NEW_OP];
  int64_t ry = y->compiles - y->by_cause[TT_CAUSE_NEW_OP];
  if (rx != ry) return rx > ry ? -1 : 1;
  if (x->compiles != y->compiles) return x->compiles > y->compiles ? -1 : 1;
  return strcmp(x->label, y->label);
}

size_t tt_explain_summary(const tt_explain *x, char *buf, size_t cap) {
  tt_buf m;
  tt_buf_init(&m);
  int64_t re = x->seq - x->counts[TT_CAUSE_NEW_OP];
  tt_buf_printf(&m, "[torchtpu] %lld programs compiled (%.2f s), %lld recompiles of "
                "an op or graph already compiled\n",
                (long long)x->seq, x->seconds, (long long)re);
  if (x->seq) {
    tt_buf_printf(&m, "  causes:");
    for (int c = 0; c < TT_CAUSE_COUNT; c++)
      if (x->counts[c])
        tt_buf_printf(&m, " %s %lld;", kCauseNames[c], (long long)x->counts[c]);
    m.len--;  // the last ';'
    tt_buf_printf(&m, "\n");
  }
  label_count *sorted = NULL;
  if (x->nlabels) sorted = malloc((size_t)x->nlabels * sizeof *sorted);
  if (sorted && re > 0) {
    memcpy(sorted, x->labels, (size_t)x->nlabels * sizeof *sorted);
    qsort(sorted, (size_t)x->nlabels, sizeof *sorted, by_recompiles);
    tt_buf_printf(&m, "  most recompiled:\n");
    for (int i = 0; i < x->nlabels && i < TOP; i++) {
      const label_count *e = &sorted[i];
      if (e->compiles == e->by_cause[TT_CAUSE_NEW_OP]) break;
      tt_buf_printf(&m, "    %-40s %lld compiles:", e->label, (long long)e->compiles);
      for (int c = 0; c < TT_CAUSE_COUNT; c++)
        if (e->by_cause[c])
          tt_buf_printf(&m, " %s %lld", kCauseNames[c], (long long)e->by_cause[c]);
      tt_buf_printf(&m, "\n");
    }
  }
  free(sorted);
  size_t need = tt_buf_ok(&m) ? m.len : 0;
  if (cap) snprintf(buf, cap, "%.*s", (int)need, m.data ? m.data : "");
  tt_buf_deinit(&m);
  return need;
}

// --- public API ---------------------------------------------------------------------------------

void tt_runtime_set_explain_recompiles(tt_runtime *rt, bool on) {
  pthread_mutex_lock(&rt->mu);
  tt_explain_set_enabled(tt_prog_cache_explain(rt->progs), on);
  pthread_mutex_unlock(&rt->mu);
}

bool tt_runtime_explain_recompiles(tt_runtime *rt) {
  pthread_mutex_lock(&rt->mu);
  bool on = tt_explain_enabled(tt_prog_cache_explain(rt->progs));
  pthread_mutex_unlock(&rt->mu);
  return on;
}

int tt_runtime_recompile_causes(tt_runtime *rt, const char **names,
                                int64_t *counts, int cap) {
  pthread_mutex_lock(&rt->mu);
  int64_t c[TT_CAUSE_COUNT];
  tt_explain_counts(tt_prog_cache_explain(rt->progs), c);
  pthread_mutex_unlock(&rt->mu);
  for (int i = 0; i < TT_CAUSE_COUNT && i < cap; i++) {
    names[i] = kCauseNames[i];
    counts[i] = c[i];
  }
  return TT_CAUSE_COUNT;
}

size_t tt_runtime_recompile_summary(tt_runtime *rt, char *buf, size_t cap) {
  pthread_mutex_lock(&rt->mu);
  size_t n = tt_explain_summary(tt_prog_cache_explain(rt->progs), buf, cap);
  pthread_mutex_unlock(&rt->mu);
  return n;
}
