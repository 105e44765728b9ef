// Recorded fused-eager graphs (see trace.h).
#include "runtime/trace.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#define MAX_VARIANTS 8  // live-output sets kept per trace

typedef struct variant {
  tt_hv *outv;  // owned
  int n;
  tt_pjrt_exe *exe;  // borrowed from the program cache
} variant;

struct tt_trace {
  int device;
  tt_trace_op *ops;  // owned
  int nops;
  tt_hlo *b;         // owned
  variant vars[MAX_VARIANTS];
  int nvars, next_var;
  int64_t last_use;
};

struct tt_trace_set {
  tt_trace **traces;
  int n, max;
  int64_t clock;
};

// --- op records ---------------------------------------------------------------------

static void op_free(tt_trace_op *op) {
  free(op->sig);
  tt_lower_graph_out_deinit(&op->lo);
}

void tt_trace_rec_init(tt_trace_rec *r) {
  memset(r, 0, sizeof *r);
  r->ok = true;
}

void tt_trace_rec_clear(tt_trace_rec *r) {
  for (int i = 0; i < r->n; i++) op_free(&r->ops[i]);
  r->n = 0;
  r->ok = true;
}

void tt_trace_rec_deinit(tt_trace_rec *r) {
  tt_trace_rec_clear(r);
  free(r->ops);
  memset(r, 0, sizeof *r);
}

static bool rec_reserve(tt_trace_rec *r, int need) {
  if (need <= r->cap) return true;
  int cap = r->cap ? 2 * r->cap : 256;
  while (cap < need) cap *= 2;
  tt_trace_op *p = realloc(r->ops, (size_t)cap * sizeof *p);
  if (!p) return false;
  r->ops = p;
  r->cap = cap;
  return true;
}

void tt_trace_rec_add(tt_trace_rec *r, const void *sig, size_t len,
                      tt_lower_graph_out *lo, const tt_hlo_mark *mark) {
  void *copy = r->ok && rec_reserve(r, r->n + 1) ? malloc(len ? len : 1) : NULL;
  if (!copy) {
    r->ok = false;
    tt_lower_graph_out_deinit(lo);
    return;
  }
  memcpy(copy, sig, len);
  r->ops[r->n++] = (tt_trace_op){copy, len, *lo, *mark};
  memset(lo, 0, sizeof *lo);
}

static void *dup(const void *p, size_t n) {
  void *q = malloc(n ? n : 1);
  if (q && n) memcpy(q, p, n);
  return q;
}

// A deep copy of what lowering produced for one op.
static bool lo_copy(const tt_lower_graph_out *src, tt_lower_graph_out *dst) {
  const tt_program *p = &src->prog;
  memset(dst, 0, sizeof *dst);
  dst->prog = (tt_program){
      .params = dup(p->params, (size_t)p->nparams * sizeof *p->params),
      .nparams = p->nparams,
      .outs = dup(p->outs, (size_t)p->nouts * sizeof *p->outs),
      .nouts = p->nouts,
      .results = dup(p->results, (size_t)p->nresults * sizeof *p->results),
      .nresults = p->nresults,
      .checks = dup(p->checks, (size_t)p->nchecks * sizeof *p->checks),
      .nchecks = p->nchecks};
  dst->param_vals = dup(src->param_vals, (size_t)p->nparams * sizeof(tt_hv));
  dst->out_vals = dup(src->out_vals, (size_t)(p->nouts + p->nchecks) * sizeof(tt_hv));
  if (dst->prog.params && dst->prog.outs && dst->prog.results && dst->param_vals &&
      dst->out_vals && dst->prog.checks)
    return true;
  tt_lower_graph_out_deinit(dst);
  return false;
}

tt_status tt_trace_copy_prefix(const tt_trace *t, int n, tt_trace_rec *r) {
  tt_trace_rec_clear(r);
  if (!rec_reserve(r, n)) goto oom;
  for (int i = 0; i < n; i++) {
    const tt_trace_op *op = &t->ops[i];
    tt_trace_op *c = &r->ops[i];
    c->sig = dup(op->sig, op->sig_len);
    if (!c->sig) goto oom;
    if (!lo_copy(&op->lo, &c->lo)) {
      free(c->sig);
      goto oom;
    }
    c->sig_len = op->sig_len;
    c->mark = op->mark;
    r->n = i + 1;
  }
  return NULL;
oom:
  r->ok = false;
  return tt_make_status(TT_RESOURCE_EXHAUSTED, "fused graph: out of memory");
}

// --- traces ---------------------------------------------------------------------------

static void trace_free(tt_trace *t) {
  if (!t) return;
  for (int i = 0; i < t->nops; i++) op_free(&t->ops[i]);
  free(t->ops);
  tt_hlo_destroy(t->b);
  for (int i = 0; i < t->nvars; i++) free(t->vars[i].outv);
  free(t);
}

tt_status tt_trace_set_create(int max_traces, tt_trace_set **out) {
  tt_trace_set *s = calloc(1, sizeof *s);
  if (s) s->traces = calloc((size_t)max_traces, sizeof *s->traces);
  if (!s || !s->traces) {
    free(s);
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "fused traces: out of memory");
  }
  s->max = max_traces;
  *out = s;
  return NULL;
}

void tt_trace_set_destroy(tt_trace_set *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) trace_free(s->traces[i]);
  free(s->traces);
  free(s);
}

bool tt_trace_matches(const tt_trace *t, int i, const void *sig, size_t len) {
  return i < t->nops && t->ops[i].sig_len == len &&
         memcmp(t->ops[i].sig, sig, len) == 0;
}

tt_trace *tt_trace_find(tt_trace_set *s, int device, const void *sig, size_t len) {
  tt_trace *best = NULL;
  for (int i = 0; i < s->n; i++) {
    tt_trace *t = s->traces[i];
    if (t->device == device && tt_trace_matches(t, 0, sig, len) &&
        (!best || t->last_use > best->last_use))
      best = t;
  }
  if (best) best->last_use = ++s->clock;
  return best;
}

static bool same_prefix(const tt_trace *a, const tt_trace *b, int n) {
  if (a->nops < n || b->nops < n) return false;
  for (int i = 0; i < n; i++)
    if (!tt_trace_matches(a, i, b->ops[i].sig, b->ops[i].sig_len)) return false;
  return true;
}

tt_trace *tt_trace_find_branch(tt_trace_set *s, int device, const tt_trace *cur,
                               int pos, const void *sig, size_t len) {
  tt_trace *best = NULL;
  for (int i = 0; i < s->n; i++) {
    tt_trace *t = s->traces[i];
    if (t == cur || t->device != device || !tt_trace_matches(t, pos, sig, len) ||
        (best && t->last_use <= best->last_use) || !same_prefix(t, cur, pos))
      continue;
    best = t;
  }
  if (best) best->last_use = ++s->clock;
  return best;
}

tt_status tt_trace_add_variant(tt_trace *t, const tt_hv *outv, int n,
                               tt_pjrt_exe *exe) {
  tt_hv *copy = dup(outv, (size_t)n * sizeof *outv);
  if (!copy) return tt_make_status(TT_RESOURCE_EXHAUSTED, "fused traces: out of memory");
  int k;
  if (t->nvars < MAX_VARIANTS) {
    k = t->nvars++;
  } else {  // replace the oldest
    k = t->next_var;
    t->next_var = (k + 1) % MAX_VARIANTS;
    free(t->vars[k].outv);
  }
  t->vars[k] = (variant){copy, n, exe};
  return NULL;
}

tt_status tt_trace_add(tt_trace_set *s, int device, tt_trace_rec *rec, tt_hlo *b,
                       const tt_hv *outv, int nout, tt_pjrt_exe *exe) {
  tt_trace *t = calloc(1, sizeof *t);
  if (!t) return tt_make_status(TT_RESOURCE_EXHAUSTED, "fused traces: out of memory");
  tt_status st = tt_trace_add_variant(t, outv, nout, exe);
  if (st) {
    free(t);
    return st;
  }
  t->device = device;
  t->ops = rec->ops;  // taken
  t->nops = rec->n;
  t->b = b;
  t->last_use = ++s->clock;
  tt_trace_rec_init(rec);
  if (s->n == s->max) {  // evict the least recently used
    int lru = 0;
    for (int i = 1; i < s->n; i++)
      if (s->traces[i]->last_use < s->traces[lru]->last_use) lru = i;
    trace_free(s->traces[lru]);
    s->traces[lru] = s->traces[--s->n];
  }
  s->traces[s->n++] = t;
  return NULL;
}

int tt_trace_nops(const tt_trace *t) { return t->nops; }
const tt_trace_op *tt_trace_op_at(const tt_trace *t, int i) { return &t->ops[i]; }
const tt_hlo *tt_trace_builder(const tt_trace *t) { return t->b; }

tt_pjrt_exe *tt_trace_exe_for(const tt_trace *t, const tt_hv *outv, int n) {
  for (int i = 0; i < t->nvars; i++)
    if (t->vars[i].n == n &&
        (n == 0 || memcmp(t->vars[i].outv, outv, (size_t)n * sizeof *outv) == 0))
      return t->vars[i].exe;
  return NULL;
}

void tt_trace_forget_exe(tt_trace_set *s, const tt_pjrt_exe *exe) {
  for (int i = 0; i < s->n; i++) {
    tt_trace *t = s->traces[i];
    int kept = 0;
    for (int k = 0; k < t->nvars; k++) {
      if (t->vars[k].exe == exe) free(t->vars[k].outv);
      else t->vars[kept++] = t->vars[k];
    }
    t->nvars = kept;
    t->next_var = 0;
  }
}
