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
// A capture (executor.h's capture entries) is the same recording with no
// size bound; a flush before its end splits it, and capture_end says why.
//
// A graph that repeats one recorded before is not lowered again: each op's
// signature in the graph is matched against the recorded trace (trace.h) and
// its lowering results are reused; a flush at the trace's end with the same
// live outputs reuses its executable. Lowering resumes at the first op that
// differs.
//
// A graph's program declares which parameters may share their buffer with
// the output that rewrites their storage (tf.aliasing_output; aliases), and
// the flush donates those buffers: an in-place write into part of a large
// storage (a KV cache's index_copy_, a slice assignment) is then written in
// place instead of copying the whole storage into a new buffer. Donating is
// safe whatever the program declares: the storage's buffer is replaced by
// the flush's output anyway, and no other storage or parameter holds it.
// Graph replays of a capture's program donate them too (graph.c).
//
// Leaves out: graphs across devices (an op on another device flushes
// first), keeping a graph across a failed flush (its pending values are
// lost; reading one later is an error).
#include "runtime/fused.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "lower/ctx.h"
#include "runtime/checks.h"
#include "runtime/compile.h"
#include "runtime/executor.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"
#include "runtime/scalars.h"
#include "runtime/signature.h"
#include "runtime/storage.h"
#include "runtime/trace.h"

#define DEFAULT_MAX_OPS 10000
#define MAX_TRACES 16
#define DEFAULT_MAX_BYTES (64ll << 20)
// XLA's compile time grows faster than linearly with a program's
// instructions (on the CPU plugin: ~2,000 ATen ops, ~6 s; 10,000, ~2 min),
// so a graph's instruction count is its compile-cost estimate; a graph is
// flushed before it passes this bound. See DEFAULT_MAX_INSTRUCTIONS' figures
// in bench/soak_fused.py.
#define DEFAULT_MAX_INSTRUCTIONS 20000
typedef tt_exec_param gparam;

typedef struct tt_fused {
  tt_executor base;  // first: the executor is the fused struct
  tt_hlo *b;
  int64_t epoch;  // > 0; bumped when a graph ends
  int device;
  gparam *params;
  int nparams, cap_params;
  tt_storage **writes;  // outputs; NULL entries were dropped
  int nwrites, cap_writes;
  int32_t *ops;         // op ids, for error messages
  int nops, cap_ops;
  tt_exec_check *checks;  // device-side checks of the ops: outputs after the
  tt_hv *check_vals;      // writes, their flags handed to the runtime
  int nchecks, cap_checks, cap_check_vals;
  int64_t max_ops, max_bytes, max_instructions;
  tt_fused_stats stats;
  bool told_split;   // the first split by a bound was reported
  bool capturing;    // between capture_begin and capture_end
  bool ending;       // capture_end's flush: the program a graph will replay
  int32_t *alias;    // per parameter, the live output it may alias or -1
  int cap_alias;
  bool aliased;      // the program run declares `alias` (its buffers are donated)
  char split[200];   // why the capture was split ("": it holds)
  // Traces: the graphs recorded so far, the ops of this one (while it is
  // lowered), or the trace it follows and how many of its ops matched.
  tt_trace_set *traces;
  tt_trace_rec rec;
  tt_trace *tr;
  int pos;
  tt_buf sig;  // scratch: an op's signature in the graph
} tt_fused;

static tt_status flush_with(tt_fused *f, tt_exec_seen_fn seen, void *ctx);

// --- life cycle -------------------------------------------------------------------------

// Ends the graph: frees the buffers its parameters kept and forgets every
// storage (they see a new epoch). `lost`: pending values are gone.
static void clear(tt_fused *f, bool lost) {
  tt_runtime *rt = f->base.rt;
  for (int i = 0; i < f->nparams; i++) {
    gparam *p = &f->params[i];
    if (p->owned) tt_storage_release_buffer(rt, p->owned, p->owned_bytes);
    p->owned = NULL;
  }
  for (int i = 0; lost && i < f->nwrites; i++) {
    tt_storage *s = f->writes[i];
    if (s && s->mark.epoch == f->epoch && !s->buf) {
      s->lost = true;
      s->mark.epoch = 0;
    }
  }
  f->nparams = f->nwrites = f->nops = f->nchecks = 0;
  f->epoch++;
  tt_hlo_reset(f->b);
  tt_trace_rec_clear(&f->rec);
  f->tr = NULL;
  f->pos = 0;
}

static void fused_destroy(tt_executor *ex) {
  tt_fused *f = (tt_fused *)ex;
  clear(f, true);
  tt_hlo_destroy(f->b);
  tt_trace_rec_deinit(&f->rec);
  tt_trace_set_destroy(f->traces);
  tt_buf_deinit(&f->sig);
  free(f->params);
  free(f->writes);
  free(f->ops);
  free(f->checks);
  free(f->check_vals);
  free(f->alias);
  free(f);
}

static void set_limit(tt_fused *f, int64_t max_ops, int64_t max_bytes, int64_t max_instructions) {
  f->max_ops = max_ops > 0 ? max_ops : DEFAULT_MAX_OPS;
  f->max_bytes = max_bytes > 0 ? max_bytes : DEFAULT_MAX_BYTES;
  f->max_instructions = max_instructions > 0 ? max_instructions : DEFAULT_MAX_INSTRUCTIONS;
}

// --- storages and the graph ----------------------------------------------------------------

static bool holds(const tt_fused *f, const tt_storage *s) {
  return s->mark.epoch == f->epoch;
}

static void fused_detach(tt_executor *ex, tt_storage *s) {
  tt_fused *f = (tt_fused *)ex;
  if (!holds(f, s)) return;
  if (s->mark.param >= 0) {
    gparam *p = &f->params[s->mark.param];
    // The counters keep counting the buffer until the graph ends.
    if (p->storage == s && s->buf) p->owned = tt_storage_take_buffer(s, &p->owned_bytes);
    p->storage = NULL;
  }
  if (s->mark.write >= 0) f->writes[s->mark.write] = NULL;
  s->mark.epoch = 0;
}

static tt_hv value_of(void *ctx, const tt_storage *s) {
  const tt_fused *f = ctx;
  return holds(f, s) ? s->mark.val : TT_HV_INVALID;
}

// Sets the storage's current value, making it an output of the graph.
static void note_write(tt_fused *f, tt_storage *s, tt_hv v) {
  if (!holds(f, s)) s->mark = (tt_exec_mark){f->epoch, v, -1, -1};
  s->mark.val = v;
  if (s->mark.write < 0) {
    s->mark.write = f->nwrites;
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

static const tt_scalar *scalar_arg(const tt_op_call *call, const tt_param *p) {
  const tt_value *v = &call->args[p->arg];
  if (v->kind == TT_VALUE_LIST) v = &v->u.list.items[p->item];
  return &v->u.scalar;
}

// Everything that can fail before the op joins the graph: room, storage
// buffers for new parameters, generators, fresh storages.
// Storage parameters that had no value yet (zeros) are marked in `empty`
// (the first 64).
static tt_status prepare(tt_runtime *rt, tt_fused *f, const tt_op_call *call,
                         const tt_slot *slots, const tt_program *plan,
                         tt_storage **fresh, int *nfresh, int32_t cap,
                         uint64_t *empty) {
  const char *name = tt_op_name(call->op);
  if (!reserve((void **)&f->params, &f->cap_params, f->nparams + plan->nparams,
               sizeof *f->params) ||
      !reserve((void **)&f->writes, &f->cap_writes, f->nwrites + plan->nouts,
               sizeof *f->writes) ||
      !reserve((void **)&f->ops, &f->cap_ops, f->nops + 1, sizeof *f->ops) ||
      !reserve((void **)&f->checks, &f->cap_checks, f->nchecks + plan->nchecks,
               sizeof *f->checks) ||
      !reserve((void **)&f->check_vals, &f->cap_check_vals, f->nchecks + plan->nchecks,
               sizeof *f->check_vals))
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "%s: fused graph: out of memory", name);
  for (int i = 0; i < plan->nparams; i++) {
    const tt_param *p = &plan->params[i];
    if (p->kind == TT_PARAM_RNG && !tt_runtime_call_generator(rt, call, p->arg))
      return tt_make_status(TT_RESOURCE_EXHAUSTED, "%s: generator: out of memory", name);
    if (p->kind != TT_PARAM_STORAGE) continue;
    tt_storage *s = slots[p->slot].t->storage;
    if (s->lost && !s->buf)
      return tt_make_status(TT_FAILED_PRECONDITION,
                            "%s: an input's value was lost: the fused graph "
                            "that computed it failed (see that error)", name);
    if (!s->buf && !s->host && i < 64) *empty |= 1ull << i;
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
      for (int k = 0; k < *nfresh; k++) tt_storage_free_unused(fresh[k]);
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
  const tt_program *plan = &lo->prog;
  for (int i = 0; i < plan->nparams; i++) {
    const tt_param *p = &plan->params[i];
    gparam *g = &f->params[f->nparams];
    *g = (gparam){.kind = p->kind, .dtype = p->dtype, .numel = p->numel,
                  .op = call->op};
    if (p->kind == TT_PARAM_STORAGE) {
      tt_storage *s = slots[p->slot].t->storage;
      g->storage = s;
      g->was_empty = i < 64 && (empty >> i & 1);
      s->mark = (tt_exec_mark){f->epoch, lo->param_vals[i], f->nparams, -1};
    } else if (p->kind == TT_PARAM_SCALAR) {
      g->bits[0] = tt_scalar_part_bits(scalar_arg(call, p), p->dtype, p->imag);
    } else if (p->kind == TT_PARAM_OFFSET) {
      g->dtype = TT_I64;
      g->bits[0] = (uint64_t)slots[p->slot].t->offset;
    } else {  // TT_PARAM_RNG
      tt_generator *gen = tt_runtime_call_generator(rt, call, p->arg);
      g->bits[0] = gen->seed;
      g->bits[1] = gen->offset;
      g->gen = gen;
      g->count = p->count;
      gen->offset += p->count;
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
  for (int k = 0; k < plan->nchecks; k++) {
    f->checks[f->nchecks] = (tt_exec_check){plan->checks[k], call->op};
    f->check_vals[f->nchecks++] = lo->out_vals[plan->nouts + k];
  }
  f->ops[f->nops++] = call->op;
  f->stats.ops++;
  rt->stats.op_calls++;
}

// --- following a recorded trace -------------------------------------------------------

// The graph's text so far: the builder's, or the trace's up to the ops matched.
static int64_t body_bytes(const tt_fused *f) {
  if (!f->tr) return (int64_t)tt_hlo_body_bytes(f->b);
  return f->pos ? (int64_t)tt_trace_op_at(f->tr, f->pos - 1)->mark.body_len : 0;
}

// The graph's instructions so far (its compile-cost estimate).
static int64_t body_instructions(const tt_fused *f) {
  if (!f->tr) return tt_hlo_get_mark(f->b).nvals;
  return f->pos ? tt_trace_op_at(f->tr, f->pos - 1)->mark.nvals : 0;
}

// Which bound a graph that goes on would pass (NULL: none). A captured graph
// is one program whatever its size.
static const char *bound_reached(const tt_fused *f) {
  if (f->capturing || f->nops == 0) return NULL;
  if (f->nops >= f->max_ops) return "ops";
  if (body_instructions(f) >= f->max_instructions) return "instructions (compile-cost estimate)";
  if (body_bytes(f) >= f->max_bytes) return "bytes of program text";
  return NULL;
}

// Says once per process-lifetime of the executor why graphs are split: a
// user who expected one program per step learns to sync more often or to
// raise the bound.
static void tell_split(tt_fused *f, const char *bound) {
  f->stats.bound_splits++;
  if (f->told_split) return;
  f->told_split = true;
  fprintf(stderr, "torchtpu: fused eager split a graph of %d ops and %" PRId64 " instructions at its "
          "bound on %s; later graphs may be split the same way (this is said once). Call "
          "torchtpu.sync() more often, or raise the bound with torchtpu.modes.set_fuse_limit() "
          "or TORCHTPU_FUSE_MAX_INSTRUCTIONS.\n", f->nops, body_instructions(f), bound);
}

// The op's signature in the graph: its own, plus the graph value each slot's
// storage has (or -1), which decides how lowering reads it.
static void graph_signature(tt_fused *f, const tt_op_call *call,
                            const tt_rule *rule, const tt_slot *slots) {
  tt_signature_build(&f->sig, call, rule, slots);
  tt_buf_append_i64(&f->sig, f->base.rt->device_checks);
  int n = tt_call_slots(call, NULL, 0);
  for (int i = 0; i < n; i++) {
    const tt_storage *s = slots[i].t->storage;
    tt_buf_append_i64(&f->sig, holds(f, s) ? (int64_t)s->mark.val : -1);
  }
}

// Stops following the trace: the builder and the record become what lowering
// the matched ops would have made, and lowering goes on from there.
static tt_status leave_trace(tt_fused *f) {
  const tt_trace *t = f->tr;
  tt_hlo_mark none = {0};
  const tt_hlo_mark *m = f->pos ? &tt_trace_op_at(t, f->pos - 1)->mark : &none;
  tt_status st = tt_hlo_copy_to_mark(f->b, tt_trace_builder(t), m);
  if (!st) st = tt_trace_copy_prefix(t, f->pos, &f->rec);
  f->tr = NULL;
  return st;
}

// Computes the op's graph signature; when the graph follows (or, at its
// first op, can start following) a trace and the op matches it, `*use` is the
// trace's lowering of the op. Else *use is NULL and the caller lowers.
static tt_status follow_trace(tt_fused *f, const tt_op_call *call,
                              const tt_rule *rule, const tt_slot *slots,
                              const tt_lower_graph_out **use) {
  *use = NULL;
  graph_signature(f, call, rule, slots);
  if (!tt_buf_ok(&f->sig)) {
    tt_buf_clear(&f->sig);
    f->rec.ok = false;  // a graph with an unknown signature is not kept
    return f->tr ? leave_trace(f) : NULL;
  }
  if (f->nops == 0 && !f->tr) {
    f->tr = tt_trace_find(f->traces, call->device, f->sig.data, f->sig.len);
    f->pos = 0;
  }
  if (!f->tr) return NULL;
  if (!tt_trace_matches(f->tr, f->pos, f->sig.data, f->sig.len)) {
    // Another recorded graph may have taken this branch from the same ops.
    tt_trace *t = tt_trace_find_branch(f->traces, call->device, f->tr, f->pos,
                                       f->sig.data, f->sig.len);
    if (!t) return leave_trace(f);
    f->tr = t;
  }
  *use = &tt_trace_op_at(f->tr, f->pos)->lo;
  return NULL;
}

// Splits a capture: the first reason is kept for capture_end.
static void split_capture(tt_fused *f, const char *why) {
  if (f->capturing && f->nops > 0 && !f->split[0])
    snprintf(f->split, sizeof f->split, "%s", why);
}

static tt_status fused_run_op(tt_executor *ex, const tt_op_call *call,
                              const tt_rule *rule, tt_op_result *results,
                              int32_t cap, int32_t *out_nresults) {
  tt_fused *f = (tt_fused *)ex;
  tt_runtime *rt = ex->rt;
  *out_nresults = 0;
  const char *bound = bound_reached(f);
  if (bound) tell_split(f, bound);
  if (f->nops > 0 && (call->device != f->device || bound)) {
    split_capture(f, "an op ran on another device than the graph's");
    TT_RETURN_IF_ERROR(flush_with(f, NULL, NULL));
  }
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

  tt_lower_graph_out lo;
  memset(&lo, 0, sizeof lo);
  int nfresh = 0;
  uint64_t empty = 0;
  tt_status st = fresh ? NULL : tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  const tt_lower_graph_out *use = NULL;  // the lowering results committed
  if (!st) st = follow_trace(f, call, rule, slots, &use);
  if (!st && use) {  // replayed: the trace holds what lowering would give
    st = prepare(rt, f, call, slots, &use->prog, fresh, &nfresh, cap, &empty);
    if (!st) {
      commit(rt, f, call, slots, use, fresh, results, out_nresults, empty);
      f->pos++;
      f->stats.replayed_ops++;
    }
  } else if (!st) {
    tt_hlo_mark mark = tt_hlo_get_mark(f->b);
    tt_lower_graph graph = {value_of, f};
    tt_lower_options opts;
    tt_runtime_lower_options(rt, false, &opts);
    st = tt_lower_into_graph(call, rule, &opts, f->b, &graph, &lo);
    if (!st) st = prepare(rt, f, call, slots, &lo.prog, fresh, &nfresh, cap, &empty);
    if (!st) {
      commit(rt, f, call, slots, &lo, fresh, results, out_nresults, empty);
      f->stats.lowered_ops++;
      tt_hlo_mark after = tt_hlo_get_mark(f->b);
      tt_trace_rec_add(&f->rec, f->sig.data, f->sig.len, &lo, &after);
    } else {
      tt_hlo_rewind(f->b, &mark);  // the graph is as it was before the op
    }
  }
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
  *out = tt_scalar_cache_find(&rt->scalars, device, d, bits);
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

// Launches `exe` on the graph's parameters; hands the outputs (values `outv`,
// typed in builder `types`) to the live storages it wrote.
static tt_status launch(tt_fused *f, tt_pjrt_exe *exe, const tt_hlo *types,
                        tt_storage **live, const tt_hv *outv, int nlive) {
  tt_runtime *rt = f->base.rt;
  tt_status st = NULL;
  int nouts = nlive + f->nchecks;  // the checks' flags follow the storages'
  tt_pjrt_buffer **outs = calloc((size_t)(nouts ? nouts : 1), sizeof *outs);
  size_t np = (size_t)(f->nparams ? f->nparams : 1);
  tt_pjrt_buffer **args = calloc(np, sizeof *args);
  tt_pjrt_buffer **rng = calloc(np, sizeof *rng);
  bool *donate = NULL;  // when the program aliases: the buffers it may write in place
  int nrng = 0, cap = 16;
  while (cap < 2 * f->nparams + 2) cap *= 2;
  scalar_temps temps = {calloc((size_t)cap, sizeof(tt_pjrt_buffer *)),
                        calloc((size_t)cap, sizeof(tt_dtype)),
                        calloc((size_t)cap, sizeof(uint64_t)), 0, cap};
  if (!outs || !args || !rng || !temps.bufs || !temps.dtypes || !temps.bits) {
    st = tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
    goto cleanup;
  }
  TT_GOTO_IF_ERROR(st, gather(rt, f, args, &temps, rng, &nrng), cleanup);
  if (f->aliased) {
    donate = calloc(np, sizeof *donate);
    if (!donate) {
      st = tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
      goto cleanup;
    }
  }
  int64_t donated = 0, donated_bytes = 0;
  for (int i = 0; donate && i < f->nparams; i++) {
    donate[i] = f->alias[i] >= 0;
    donated += donate[i];
    donated_bytes += donate[i] ? f->params[i].storage->nbytes : 0;
  }
  tt_pjrt_event *done = NULL;
  char what[128] = "";
  if (tt_profile_on(rt)) describe(f, what, sizeof what);
  TT_GOTO_IF_ERROR(st, tt_profile_execute(rt, TT_PROFILE_FUSED, what, exe, f->device, args,
                                          f->nparams, donate, outs, &done), cleanup);
  f->stats.donated_buffers += donated;
  f->stats.donated_bytes += donated_bytes;
  rt->stats.donated_buffers += donated;
  rt->stats.donated_bytes += donated_bytes;
  f->epoch++;  // the storages leave the graph: set_buffer must not detach
  for (int i = 0; i < nlive; i++) {
    const tt_hlo_type *ty = tt_hlo_type_of(types, outv[i]);
    tt_storage_set_buffer(live[i], outs[i], ty->dtype, tt_hlo_numel(ty));
  }
  for (int k = 0; k < f->nchecks; k++) {
    tt_status ck = tt_checks_push(rt, outs[nlive + k], &f->checks[k].check,
                                  f->checks[k].op);
    if (ck && !st) st = ck;
    else tt_status_free(ck);
  }
  tt_status ev = tt_runtime_track_event(rt, done);
  if (!st) st = ev;
  else tt_status_free(ev);
  for (int i = 0; i < temps.cap; i++)  // keep this step's scalars for the next
    if (temps.bufs[i])
      tt_scalar_cache_put(&rt->scalars, rt->pjrt, f->device, temps.dtypes[i],
                          temps.bits[i], temps.bufs[i]);
  memset(temps.bufs, 0, (size_t)temps.cap * sizeof *temps.bufs);
cleanup:
  for (int i = 0; temps.bufs && i < temps.cap; i++)
    if (temps.bufs[i]) tt_pjrt_buffer_destroy(rt->pjrt, temps.bufs[i]);
  for (int i = 0; i < nrng; i++) tt_pjrt_buffer_destroy(rt->pjrt, rng[i]);
  free(temps.bufs);
  free(temps.dtypes);
  free(temps.bits);
  free(outs);
  free(args);
  free(rng);
  free(donate);
  return st;
}

// Keeps the graph just compiled as a trace (its record and builder), or as
// another output set of the trace it followed to the end (`followed`).
static void keep_trace(tt_fused *f, tt_trace *followed, const tt_hv *outv, int nlive,
                       tt_pjrt_exe *exe) {
  if (followed) {
    tt_status_free(tt_trace_add_variant(followed, outv, nlive, exe));
    return;
  }
  tt_hlo *fresh = NULL;
  if (f->capturing || !f->rec.ok || f->rec.n != f->nops || tt_hlo_create(&fresh))
    return;  // (a capture is kept as a graph: its ops won't come again)
  if (tt_trace_add(f->traces, f->device, &f->rec, f->b, outv, nlive, exe)) {
    tt_hlo_destroy(fresh);
    return;
  }
  f->b = fresh;  // the trace took the builder
}

// Parameter i may alias live output j when the graph writes the storage it
// reads and the two have one flat type (`types` types the outputs): the
// flush donates the parameter's buffer, and a graph replay of a capture's
// program can too (graph.c). False when none does (or no memory).
static bool aliases(tt_fused *f, const tt_hlo *types, tt_storage **live, int nlive,
                    const tt_hv *outv) {
  if (f->nparams == 0 ||
      !reserve((void **)&f->alias, &f->cap_alias, f->nparams, sizeof *f->alias))
    return false;
  bool any = false;
  for (int i = 0; i < f->nparams; i++) f->alias[i] = -1;
  for (int j = 0; j < nlive; j++) {
    tt_storage *s = live[j];
    int i = s->mark.param;
    if (i < 0 || f->params[i].storage != s || f->params[i].was_empty) continue;
    const tt_hlo_type *ty = tt_hlo_type_of(types, outv[j]);
    if (ty->dtype != f->params[i].dtype || ty->rank != 1 || ty->dims[0] != f->params[i].numel)
      continue;
    f->alias[i] = j;
    any = true;
  }
  return any;
}

// The program for the live outputs `outv` (the `nlive` live storages' values,
// then the checks'): the trace's executable when the graph followed it to
// its end with these outputs; else the graph's text (built from the trace's
// builder when following) compiled through the program cache, and kept as a
// trace. `*types` gets the builder that types the outputs.
static tt_status program_for(tt_fused *f, tt_storage **live, int nlive, const tt_hv *outv,
                             int n, tt_pjrt_exe **exe, const tt_hlo **types) {
  tt_trace *followed = NULL;
  f->aliased = false;
  if (f->tr && f->pos == tt_trace_nops(f->tr)) {
    *exe = tt_trace_exe_for(f->tr, outv, n);
    *types = tt_trace_builder(f->tr);
    if (*exe) {
      f->stats.last_graph_bytes = (int64_t)tt_hlo_body_bytes(*types);
      f->aliased = tt_pjrt_exe_aliasing(*exe) && aliases(f, *types, live, nlive, outv);
      return NULL;
    }
    followed = f->tr;
  }
  if (f->tr) TT_RETURN_IF_ERROR(leave_trace(f));
  const char *text = NULL;
  size_t len = 0;
  bool aliased = aliases(f, f->b, live, nlive, outv);
  TT_RETURN_IF_ERROR(tt_hlo_finish_aliased(f->b, outv, n, aliased ? f->alias : NULL,
                                           &text, &len));
  f->stats.last_graph_bytes = (int64_t)len;
  TT_RETURN_IF_ERROR(tt_runtime_compile(f->base.rt, text, len, exe));
  f->aliased = aliased && tt_pjrt_exe_aliasing(*exe);  // (compile.c marks it)
  *types = f->b;  // stays alive when a new trace takes it
  keep_trace(f, followed, outv, n, *exe);
  return NULL;
}

// Finishes (or finds), compiles and launches the graph's program; hands the
// outputs to the live storages it wrote.
static tt_status run(tt_fused *f, tt_storage **live, int nlive, tt_pjrt_exe **out_exe) {
  int n = nlive + f->nchecks;
  tt_hv *outv = malloc((size_t)(n ? n : 1) * sizeof *outv);
  if (!outv) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  for (int i = 0; i < nlive; i++) outv[i] = live[i]->mark.val;
  for (int k = 0; k < f->nchecks; k++) outv[nlive + k] = f->check_vals[k];
  const tt_hlo *types = NULL;
  tt_status st = program_for(f, live, nlive, outv, n, out_exe, &types);
  if (!st) st = launch(f, *out_exe, types, live, outv, nlive);
  free(outv);
  return st;
}

static tt_status flush_with(tt_fused *f, tt_exec_seen_fn seen, void *ctx) {
  if (f->nops == 0) {
    if (seen) seen(ctx, &(tt_exec_program){.device = f->device});
    return NULL;
  }
  int nlive = 0;
  for (int i = 0; i < f->nwrites; i++)
    if (f->writes[i]) f->writes[nlive++] = f->writes[i];  // in write order
  tt_status st = NULL;
  tt_pjrt_exe *exe = NULL;
  int64_t instructions = body_instructions(f);  // before run() hands the builder on
  // A graph whose results all died still runs when it checks something.
  if (nlive > 0 || f->nchecks > 0) st = run(f, f->writes, nlive, &exe);
  if (!st && seen)
    seen(ctx, &(tt_exec_program){exe, f->device, f->params, f->nparams,
                                 f->writes, nlive, f->checks, f->nchecks,
                                 f->aliased ? f->alias : NULL});
  f->stats.graphs++;
  f->stats.last_graph_ops = f->nops;
  f->stats.last_graph_instructions = instructions;
  f->stats.last_graph_params = f->nparams;
  f->stats.last_graph_outputs = nlive;
  if (st) {
    char what[256];
    describe(f, what, sizeof what);
    st = tt_status_annotate(st, "%s", what);
  }
  f->nwrites = nlive;
  clear(f, st != NULL);
  f->stats.pending_ops = 0;
  return st;
}

// --- the executor interface ---------------------------------------------------------------

static tt_status fused_flush(tt_executor *ex) {
  tt_fused *f = (tt_fused *)ex;
  split_capture(f, "the graph was flushed midway (a host read such as "
                "tensor.item(), a CPU-fallback op, or a mode switch)");
  return flush_with(f, NULL, NULL);
}

static int64_t fused_pending_ops(const tt_executor *ex) {
  return ((const tt_fused *)ex)->nops;
}

// The storage's value exists only in the graph when the graph wrote it.
static tt_status fused_sync_storage(tt_executor *ex, tt_storage *s) {
  tt_fused *f = (tt_fused *)ex;
  if (!holds(f, s) || s->mark.write < 0) return NULL;
  return fused_flush(ex);
}

static tt_status fused_capture_begin(tt_executor *ex, int device) {
  tt_fused *f = (tt_fused *)ex;
  if (f->capturing)
    return tt_make_status(TT_FAILED_PRECONDITION,
                          "graph capture: a capture is already under way");
  TT_RETURN_IF_ERROR(flush_with(f, NULL, NULL));
  f->capturing = true;
  f->device = device;
  f->split[0] = '\0';
  return NULL;
}

static tt_status fused_capture_end(tt_executor *ex, tt_exec_seen_fn seen, void *ctx) {
  tt_fused *f = (tt_fused *)ex;
  if (!f->capturing)
    return tt_make_status(TT_FAILED_PRECONDITION, "graph capture: not capturing");
  f->capturing = false;
  bool split = f->split[0] != '\0';
  f->ending = !split;
  tt_status st = flush_with(f, split ? NULL : seen, ctx);
  f->ending = false;
  TT_RETURN_IF_ERROR(st);
  if (split)
    return tt_make_status(TT_UNIMPLEMENTED, "%s", f->split);
  return NULL;
}

// Recorded traces keep executables (one per live-output set).
static void fused_forget_exe(tt_executor *ex, const tt_pjrt_exe *exe) {
  tt_trace_forget_exe(((tt_fused *)ex)->traces, exe);
}

static const tt_executor_ops kFusedOps = {
    .name = "fused",
    .run_op = fused_run_op,
    .flush = fused_flush,
    .pending_ops = fused_pending_ops,
    .sync_storage = fused_sync_storage,
    .detach = fused_detach,
    .capture_begin = fused_capture_begin,
    .capture_end = fused_capture_end,
    .forget_exe = fused_forget_exe,
    .destroy = fused_destroy,
};

tt_status tt_fused_create(tt_runtime *rt, tt_executor **out) {
  *out = NULL;
  tt_fused *f = calloc(1, sizeof *f);
  if (!f) return tt_make_status(TT_RESOURCE_EXHAUSTED, "fused graph: out of memory");
  tt_status st = tt_hlo_create(&f->b);
  if (st) {
    free(f);
    return st;
  }
  st = tt_trace_set_create(MAX_TRACES, &f->traces);
  if (st) {
    tt_hlo_destroy(f->b);
    free(f);
    return st;
  }
  tt_trace_rec_init(&f->rec);
  tt_buf_init(&f->sig);
  f->base = (tt_executor){&kFusedOps, rt};
  f->epoch = 1;
  set_limit(f, 0, 0, 0);
  *out = &f->base;
  return NULL;
}

// --- public entry points ----------------------------------------------------------------

void tt_runtime_set_fuse_limit(tt_runtime *rt, int64_t max_ops, int64_t max_bytes,
                               int64_t max_instructions) {
  pthread_mutex_lock(&rt->mu);
  if (rt->fused) set_limit((tt_fused *)rt->fused, max_ops, max_bytes, max_instructions);
  pthread_mutex_unlock(&rt->mu);
}

void tt_runtime_fused_stats(tt_runtime *rt, tt_fused_stats *out) {
  pthread_mutex_lock(&rt->mu);
  if (rt->fused) *out = ((tt_fused *)rt->fused)->stats;
  else memset(out, 0, sizeof *out);
  pthread_mutex_unlock(&rt->mu);
}
