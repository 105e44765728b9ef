// Fused eager: ops are lowered into one deferred graph and run as a single
// program when a value is needed.
//
// Recording an op lowers it at once (so a user error raises at the op) into
// a builder that persists across ops. What the graph needs at the flush is
// kept beside it:
//  - parameters, in the builder's order: storages read from their buffer
//    (one per storage: a later read reuses the value), scalar values and
//    view offsets (their bits), random states (the generator is advanced at
//    record time, exactly as strict eager does at launch);
//  - per storage, its current value in the graph (fields on tt_storage,
//    valid while graph_epoch is the graph's epoch): a fresh result is a
//    "pending" storage with a value and no buffer;
//  - the storages written, in order of first write: the program's outputs.
// A storage that dies while pending drops out of the outputs, so an
// intermediate that never leaves the graph takes no device memory. A storage
// that loses its buffer (destroyed, overwritten from the host) while the
// graph reads it hands that buffer to its parameter.
//
// The flush finishes the module, compiles it through the program cache
// (parameters, values and outputs are numbered by first use, so the same
// step gives the same text and compiles once), launches it asynchronously
// and hands the outputs to their storages.
//
// Leaves out: donation of input buffers, graphs across devices (an op on
// another device flushes first), keeping a graph across a failed flush (its
// pending values are lost; reading one later is an error).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "lower/ctx.h"
#include "runtime/cache.h"
#include "runtime/runtime.h"

#define DEFAULT_MAX_OPS 10000
#define DEFAULT_MAX_BYTES (64ll << 20)
#define LOST_EPOCH (-1)  // graph_epoch of a storage whose graph failed

typedef tt_gparam gparam;  // runtime.h: graph capture reads them too

struct tt_fused {
  tt_hlo *b;
  int64_t epoch;  // > 0; bumped when a graph ends
  int device;
  gparam *params;
  int nparams, cap_params;
  tt_storage **writes;  // outputs; NULL entries were dropped
  int nwrites, cap_writes;
  int32_t *ops;         // op ids, for error messages
  int nops, cap_ops;
  int64_t max_ops, max_bytes;
  tt_fused_stats stats;
  struct tt_capture *cap;  // graph.c: set while a graph is captured
};

// --- life cycle -------------------------------------------------------------------------

tt_status tt_fused_create(tt_fused **out) {
  *out = NULL;
  tt_fused *f = calloc(1, sizeof *f);
  if (!f) return tt_make_status(TT_RESOURCE_EXHAUSTED, "fused graph: out of memory");
  tt_status st = tt_hlo_create(&f->b);
  if (st) {
    free(f);
    return st;
  }
  f->epoch = 1;
  f->max_ops = DEFAULT_MAX_OPS;
  f->max_bytes = DEFAULT_MAX_BYTES;
  *out = f;
  return NULL;
}

// Ends the graph: frees the buffers its parameters kept and forgets every
// storage (they see a new epoch). `lost`: pending values are gone.
static void clear(tt_runtime *rt, tt_fused *f, bool lost) {
  for (int i = 0; i < f->nparams; i++) {
    gparam *p = &f->params[i];
    if (!p->owned) continue;
    tt_pjrt_buffer_destroy(rt->pjrt, p->owned);
    rt->stats.bytes_in_use -= p->owned_bytes;
    rt->stats.buffers_in_use--;
  }
  for (int i = 0; lost && i < f->nwrites; i++) {
    tt_storage *s = f->writes[i];
    if (s && s->graph_epoch == f->epoch && !s->buf) s->graph_epoch = LOST_EPOCH;
  }
  f->nparams = f->nwrites = f->nops = 0;
  f->epoch++;
  tt_hlo_reset(f->b);
}

void tt_fused_destroy(tt_runtime *rt, tt_fused *f) {
  if (!f) return;
  clear(rt, f, true);
  tt_hlo_destroy(f->b);
  free(f->params);
  free(f->writes);
  free(f->ops);
  free(f);
}

void tt_fused_set_capture(tt_fused *f, struct tt_capture *c) { f->cap = c; }
struct tt_capture *tt_fused_capture(const tt_fused *f) { return f->cap; }

void tt_fused_set_limit(tt_fused *f, int64_t max_ops, int64_t max_bytes) {
  f->max_ops = max_ops > 0 ? max_ops : DEFAULT_MAX_OPS;
  f->max_bytes = max_bytes > 0 ? max_bytes : DEFAULT_MAX_BYTES;
}

// --- storages and the graph ----------------------------------------------------------------

static bool holds(const tt_fused *f, const tt_storage *s) {
  return f && s->graph_epoch == f->epoch;
}

bool tt_fused_writes(tt_runtime *rt, const tt_storage *s) {
  return holds(rt->fused, s) && s->graph_write >= 0;
}

void tt_fused_detach(tt_runtime *rt, tt_storage *s) {
  tt_fused *f = rt->fused;
  if (!holds(f, s)) return;
  if (f->cap && tt_capture_input_of(f->cap, s) >= 0)
    tt_capture_break(f->cap, "a graph input's buffer was replaced (a host "
                     "write?) while the graph was recorded");
  if (s->graph_param >= 0) {
    gparam *p = &f->params[s->graph_param];
    if (p->storage == s && s->buf) {
      // The counters keep counting the buffer until the graph ends.
      p->owned = s->buf;
      p->owned_bytes = s->dev_bytes;
      s->buf = NULL;
      s->dev_bytes = 0;
    }
    p->storage = NULL;
  }
  if (s->graph_write >= 0) f->writes[s->graph_write] = NULL;
  s->graph_epoch = 0;
}

static tt_hv value_of(void *ctx, const tt_storage *s) {
  const tt_fused *f = ctx;
  return holds(f, s) ? s->graph_val : TT_HV_INVALID;
}

// Sets the storage's current value, making it an output of the graph.
static void note_write(tt_fused *f, tt_storage *s, tt_hv v) {
  if (!holds(f, s)) {
    s->graph_epoch = f->epoch;
    s->graph_param = -1;
    s->graph_write = -1;
  }
  s->graph_val = v;
  if (s->graph_write < 0) {
    s->graph_write = f->nwrites;
    f->writes[f->nwrites++] = s;
  }
}

static bool reserve(void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return true;
  int n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  void *q = realloc(*p, (size_t)n * elem);
  if (!q) return false;
  *p = q;
  *cap = n;
  return true;
}

// --- recording an op ---------------------------------------------------------------------

static tt_generator *generator_of(tt_runtime *rt, const tt_op_call *call,
                                  int arg) {
  if (arg >= 0 && arg < call->nargs &&
      call->args[arg].kind == TT_VALUE_GENERATOR && call->args[arg].u.gen)
    return call->args[arg].u.gen;
  return tt_runtime_default_generator_locked(rt, call->device);
}

static const tt_scalar *scalar_arg(const tt_op_call *call, const tt_param *p) {
  const tt_value *v = &call->args[p->arg];
  if (v->kind == TT_VALUE_LIST) v = &v->u.list.items[p->item];
  return &v->u.scalar;
}

// Everything that can fail before the op joins the graph: room, storage
// buffers for new parameters, generators, fresh storages.
// Storage parameters that had no buffer yet (zeros) are marked in `empty`
// (the first 64).
static tt_status prepare(tt_runtime *rt, tt_fused *f, const tt_op_call *call,
                         const tt_slot *slots, const tt_plan *plan,
                         tt_storage **fresh, int *nfresh, int32_t cap,
                         uint64_t *empty) {
  const char *name = tt_op_name(call->op);
  if (!reserve((void **)&f->params, &f->cap_params, f->nparams + plan->nparams,
               sizeof *f->params) ||
      !reserve((void **)&f->writes, &f->cap_writes, f->nwrites + plan->nouts,
               sizeof *f->writes) ||
      !reserve((void **)&f->ops, &f->cap_ops, f->nops + 1, sizeof *f->ops))
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "%s: fused graph: out of memory", name);
  for (int i = 0; i < plan->nparams; i++) {
    const tt_param *p = &plan->params[i];
    if (p->kind == TT_PARAM_RNG && !generator_of(rt, call, p->arg))
      return tt_make_status(TT_RESOURCE_EXHAUSTED, "%s: generator: out of memory", name);
    if (p->kind != TT_PARAM_STORAGE) continue;
    tt_storage *s = slots[p->slot].t->storage;
    if (s->graph_epoch == LOST_EPOCH && !s->buf)
      return tt_make_status(TT_FAILED_PRECONDITION,
                            "%s: an input's value was lost: the fused graph "
                            "that computed it failed (see that error)", name);
    if (!s->buf && i < 64) *empty |= 1ull << i;
    TT_RETURN_IF_ERROR(tt_storage_materialize(s, p->dtype));
    if (s->dtype != p->dtype || s->numel != p->numel)
      return tt_make_status(TT_INTERNAL, "%s: storage changed under its plan", name);
  }
  *nfresh = 0;
  for (int o = 0; o < plan->nouts; o++) {
    const tt_out *out = &plan->outs[o];
    if (!out->fresh) continue;
    tt_status st = *nfresh < cap ? NULL
                   : tt_make_status(TT_INTERNAL, "%s: more results than room", name);
    if (!st)
      st = tt_storage_create(rt, call->device,
                             out->numel * tt_dtype_size(out->dtype), &fresh[*nfresh]);
    if (st) {
      for (int k = 0; k < *nfresh; k++) free(fresh[k]);  // no buffer yet
      *nfresh = 0;
      return st;
    }
    (*nfresh)++;
  }
  return NULL;
}

// Adds the op's parameters and outputs to the graph. Cannot fail.
static void commit(tt_runtime *rt, tt_fused *f, const tt_op_call *call,
                   const tt_slot *slots, const tt_lower_graph_out *lo,
                   tt_storage **fresh, tt_op_result *results, int32_t *nres,
                   uint64_t empty) {
  const tt_plan *plan = lo->plan;
  for (int i = 0; i < plan->nparams; i++) {
    const tt_param *p = &plan->params[i];
    gparam *g = &f->params[f->nparams];
    *g = (gparam){.kind = p->kind, .dtype = p->dtype, .numel = p->numel, .input = -1};
    if (p->kind == TT_PARAM_STORAGE) {
      tt_storage *s = slots[p->slot].t->storage;
      g->storage = s;
      if (f->cap) {
        g->input = tt_capture_input_of(f->cap, s);
        if (g->input < 0 && i < 64 && (empty >> i & 1))
          g->input = TT_GPARAM_ZEROS;  // a new empty tensor: zeros every run
        else if (g->input < 0)
          tt_capture_break(f->cap, "%s reads a tensor that is not a graph input "
                           "(a constant or a captured global)", tt_op_name(call->op));
      }
      s->graph_epoch = f->epoch;
      s->graph_val = lo->param_vals[i];
      s->graph_param = f->nparams;
      s->graph_write = -1;
    } else if (p->kind == TT_PARAM_SCALAR) {
      g->bits[0] = tt_scalar_bits(scalar_arg(call, p), p->dtype);
    } else if (p->kind == TT_PARAM_OFFSET) {
      g->dtype = TT_I64;
      g->bits[0] = (uint64_t)slots[p->slot].t->offset;
    } else {  // TT_PARAM_RNG
      tt_generator *gen = generator_of(rt, call, p->arg);
      g->bits[0] = gen->seed;
      g->bits[1] = gen->offset;
      g->gen = gen;
      g->count = p->count;
      gen->offset += p->count;
      if (f->cap && gen != tt_runtime_default_generator_locked(rt, call->device))
        tt_capture_break(f->cap, "%s draws from an explicit generator",
                         tt_op_name(call->op));
    }
    f->nparams++;
  }
  int r = 0, k = 0;  // fresh results seen, in result order; fresh storages used
  for (int o = 0; o < plan->nouts; o++) {
    const tt_out *out = &plan->outs[o];
    if (!out->fresh) {
      note_write(f, slots[out->slot].t->storage, lo->out_vals[o]);
      continue;
    }
    while (r < plan->nresults && call->dests[r].arg >= 0) r++;
    tt_storage *s = fresh[k++];
    note_write(f, s, lo->out_vals[o]);
    results[*nres] = plan->results[r++];
    results[*nres].storage = s;
    (*nres)++;
  }
  f->ops[f->nops++] = call->op;
  f->stats.ops++;
  rt->stats.op_calls++;
}

tt_status tt_fused_record(tt_runtime *rt, const tt_op_call *call,
                          const tt_rule *rule, tt_op_result *results,
                          int32_t cap, int32_t *out_nresults) {
  *out_nresults = 0;
  tt_fused *f = rt->fused;
  // A captured graph is one program whatever its size.
  if (f->nops > 0 &&
      (call->device != f->device ||
       (!f->cap && (f->nops >= f->max_ops ||
                    (int64_t)tt_hlo_body_bytes(f->b) >= f->max_bytes))))
    TT_RETURN_IF_ERROR(tt_fused_flush(rt));
  if (f->nops == 0) f->device = call->device;

  tt_slot stack[32], *slots = stack;
  int n = tt_call_slots(call, stack, 32);
  if (n > 32) {
    slots = malloc((size_t)n * sizeof *slots);
    if (!slots) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
    tt_call_slots(call, slots, n);
  }
  tt_storage *fresh_stack[16], **fresh = fresh_stack;
  if (cap > 16) fresh = malloc((size_t)cap * sizeof *fresh);

  tt_hlo_mark mark = tt_hlo_get_mark(f->b);
  tt_lower_graph graph = {value_of, f};
  tt_lower_options opts = {.infer_only = false, .supports_f64 = rt->supports_f64};
  tt_lower_graph_out lo;
  int nfresh = 0;
  uint64_t empty = 0;
  tt_status st = fresh ? NULL : tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  if (!st) st = tt_lower_into_graph(call, rule, &opts, f->b, &graph, &lo);
  else memset(&lo, 0, sizeof lo);
  if (!st) st = prepare(rt, f, call, slots, lo.plan, fresh, &nfresh, cap, &empty);
  if (!st) commit(rt, f, call, slots, &lo, fresh, results, out_nresults, empty);
  else tt_hlo_rewind(f->b, &mark);  // the graph is as it was before the op
  f->stats.pending_ops = f->nops;
  tt_lower_graph_out_deinit(&lo);
  if (slots != stack) free(slots);
  if (fresh != fresh_stack) free(fresh);
  return st;
}

// --- flushing ----------------------------------------------------------------------------

// "graph of 812 ops (mm, add.Tensor, relu, ...)" into buf.
static void describe(const tt_fused *f, char *buf, size_t cap) {
  size_t len = (size_t)snprintf(buf, cap, "fused graph of %d op%s (", f->nops,
                                f->nops == 1 ? "" : "s");
  for (int i = 0; i < f->nops && i < 6 && len < cap; i++) {
    const char *name = tt_op_name(f->ops[i]);
    const char *p = name ? strstr(name, "::") : NULL;
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "",
                            p ? p + 2 : (name ? name : "?"));
  }
  if (len < cap) snprintf(buf + len, cap - len, "%s)", f->nops > 6 ? ", ..." : "");
}

// A flush-local table of scalar buffers made for this launch, by value.
typedef struct scalar_temps {
  tt_pjrt_buffer **bufs;  // open addressing by (dtype, bits)
  tt_dtype *dtypes;
  uint64_t *bits;
  int n, cap;      // cap: a power of two, > 2 * scalars
} scalar_temps;

static tt_status scalar_arg_buffer(tt_runtime *rt, int device, scalar_temps *t,
                                   tt_dtype d, uint64_t bits,
                                   tt_pjrt_buffer **out) {
  TT_RETURN_IF_ERROR(tt_scalar_buffer(rt, device, d, bits, true, out));
  if (*out) return NULL;  // in the runtime's cache: nothing inserts until launch
  uint64_t key[2] = {(uint64_t)d, bits};
  int i = (int)(tt_hash64(key, sizeof key) & (uint64_t)(t->cap - 1));
  while (t->bufs[i]) {
    if (t->dtypes[i] == d && t->bits[i] == bits) {
      *out = t->bufs[i];
      return NULL;
    }
    i = (i + 1) & (t->cap - 1);
  }
  TT_RETURN_IF_ERROR(tt_pjrt_buffer_from_host(rt->pjrt, device, d, NULL, 0, &bits,
                                              &t->bufs[i]));
  t->dtypes[i] = d;
  t->bits[i] = bits;
  t->n++;
  *out = t->bufs[i];
  return NULL;
}

// Fills args[i] for parameter i; random states are uploaded into `rng`.
static tt_status gather(tt_runtime *rt, tt_fused *f, tt_pjrt_buffer **args,
                        scalar_temps *temps, tt_pjrt_buffer **rng, int *nrng) {
  for (int i = 0; i < f->nparams; i++) {
    gparam *p = &f->params[i];
    if (p->kind == TT_PARAM_STORAGE) {
      tt_storage *s = p->storage;
      args[i] = s ? s->buf : p->owned;
      if (!args[i] || (s && (s->dtype != p->dtype || s->numel != p->numel)))
        return tt_make_status(TT_INTERNAL, "parameter %d: its storage changed "
                              "while the graph was recorded", i);
    } else if (p->kind == TT_PARAM_RNG) {
      int64_t two = 2;
      TT_RETURN_IF_ERROR(tt_pjrt_buffer_from_host(rt->pjrt, f->device, TT_U64, &two,
                                                  1, p->bits, &rng[*nrng]));
      args[i] = rng[(*nrng)++];
    } else {
      TT_RETURN_IF_ERROR(scalar_arg_buffer(rt, f->device, temps, p->dtype,
                                           p->bits[0], &args[i]));
    }
  }
  return NULL;
}

// Finishes, compiles and launches the graph's program; hands the outputs to
// the live storages it wrote.
static tt_status run(tt_runtime *rt, tt_fused *f, tt_storage **live, int nlive,
                     tt_pjrt_exe **out_exe) {
  tt_status st = NULL;
  tt_hv *outv = malloc((size_t)(nlive ? nlive : 1) * sizeof *outv);
  tt_pjrt_buffer **outs = calloc((size_t)(nlive ? nlive : 1), sizeof *outs);
  size_t np = (size_t)(f->nparams ? f->nparams : 1);
  tt_pjrt_buffer **args = calloc(np, sizeof *args);
  tt_pjrt_buffer **rng = calloc(np, sizeof *rng);
  int nrng = 0, cap = 16;
  while (cap < 2 * f->nparams + 2) cap *= 2;
  scalar_temps temps = {calloc((size_t)cap, sizeof(tt_pjrt_buffer *)),
                        calloc((size_t)cap, sizeof(tt_dtype)),
                        calloc((size_t)cap, sizeof(uint64_t)), 0, cap};
  if (!outv || !outs || !args || !rng || !temps.bufs || !temps.dtypes || !temps.bits) {
    st = tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
    goto cleanup;
  }
  for (int i = 0; i < nlive; i++) outv[i] = live[i]->graph_val;
  const char *text = NULL;
  size_t len = 0;
  TT_GOTO_IF_ERROR(st, tt_hlo_finish(f->b, outv, nlive, &text, &len), cleanup);
  f->stats.last_graph_bytes = (int64_t)len;
  tt_pjrt_exe *exe = NULL;
  TT_GOTO_IF_ERROR(st, tt_runtime_compile(rt, text, len, &exe), cleanup);
  *out_exe = exe;
  TT_GOTO_IF_ERROR(st, gather(rt, f, args, &temps, rng, &nrng), cleanup);
  tt_pjrt_event *done = NULL;
  TT_GOTO_IF_ERROR(st, tt_pjrt_execute(rt->pjrt, exe, f->device, args, f->nparams,
                                       outs, &done), cleanup);
  f->epoch++;  // the storages leave the graph: set_buffer must not detach
  for (int i = 0; i < nlive; i++) {
    const tt_hlo_type *ty = tt_hlo_type_of(f->b, outv[i]);
    tt_storage_set_buffer(live[i], outs[i], ty->dtype, tt_hlo_numel(ty));
  }
  st = tt_runtime_track_event(rt, done);
  for (int i = 0; i < temps.cap; i++)  // keep this step's scalars for the next
    if (temps.bufs[i])
      tt_scalar_cache_put(rt, f->device, temps.dtypes[i], temps.bits[i], temps.bufs[i]);
  temps.n = 0;
  memset(temps.bufs, 0, (size_t)temps.cap * sizeof *temps.bufs);
cleanup:
  for (int i = 0; temps.bufs && i < temps.cap; i++)
    if (temps.bufs[i]) tt_pjrt_buffer_destroy(rt->pjrt, temps.bufs[i]);
  for (int i = 0; i < nrng; i++) tt_pjrt_buffer_destroy(rt->pjrt, rng[i]);
  free(temps.bufs);
  free(temps.dtypes);
  free(temps.bits);
  free(outv);
  free(outs);
  free(args);
  free(rng);
  return st;
}

tt_status tt_fused_flush(tt_runtime *rt) {
  return tt_fused_flush_with(rt, NULL, NULL);
}

tt_status tt_fused_flush_with(tt_runtime *rt,
                              void (*seen)(void *ctx, const tt_fused_program *p),
                              void *ctx) {
  tt_fused *f = rt->fused;
  if (f && f->cap && !tt_capture_ending(f->cap) && f->nops > 0)
    tt_capture_break(f->cap, "the graph was flushed midway (a host read such "
                     "as .item(), a CPU-fallback op, or a mode switch)");
  if (!f || f->nops == 0) {
    if (f && seen) seen(ctx, &(tt_fused_program){.device = f->device});
    return NULL;
  }
  int nlive = 0;
  for (int i = 0; i < f->nwrites; i++)
    if (f->writes[i]) f->writes[nlive++] = f->writes[i];  // in write order
  tt_status st = NULL;
  tt_pjrt_exe *exe = NULL;
  if (nlive > 0) st = run(rt, f, f->writes, nlive, &exe);
  if (!st && seen)
    seen(ctx, &(tt_fused_program){exe, f->device, f->params, f->nparams,
                                  f->writes, nlive});
  f->stats.graphs++;
  f->stats.last_graph_ops = f->nops;
  f->stats.last_graph_params = f->nparams;
  f->stats.last_graph_outputs = nlive;
  if (st) {
    char what[256];
    describe(f, what, sizeof what);
    st = tt_status_annotate(st, "%s", what);
  }
  f->nwrites = nlive;
  clear(rt, f, st != NULL);
  f->stats.pending_ops = 0;
  return st;
}

// --- public entry points ----------------------------------------------------------------

tt_status tt_runtime_flush(tt_runtime *rt) {
  pthread_mutex_lock(&rt->mu);
  tt_status st = rt->deferred;
  rt->deferred = NULL;
  tt_status fl = tt_fused_flush(rt);
  if (!st) st = fl;
  else tt_status_free(fl);
  pthread_mutex_unlock(&rt->mu);
  return st;
}

void tt_runtime_set_fuse_limit(tt_runtime *rt, int64_t max_ops,
                               int64_t max_bytes) {
  pthread_mutex_lock(&rt->mu);
  if (rt->fused) tt_fused_set_limit(rt->fused, max_ops, max_bytes);
  pthread_mutex_unlock(&rt->mu);
}

void tt_runtime_fused_stats(tt_runtime *rt, tt_fused_stats *out) {
  pthread_mutex_lock(&rt->mu);
  if (rt->fused) *out = rt->fused->stats;
  else memset(out, 0, sizeof *out);
  pthread_mutex_unlock(&rt->mu);
}
