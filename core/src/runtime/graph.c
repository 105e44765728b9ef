// Graph capture and replay: a torch.compile graph recorded once by a
// deferred executor (fused eager), then launched again and again with no
// per-op work. See graph.h.
//
// A capture is an executor of its own that wraps the one in use (through the
// executor interface only): ops go on to it, recorded as one program by its
// capture entries; the capture adds what a replay needs. At the end, the
// wrapped executor runs the program (the first run) and shows it to the
// capture, which maps its storage parameters to declared inputs ("input k"
// rather than "this storage") and copies executable, parameters and outputs
// into a tt_graph. Scalar parameters keep their captured values (uploaded
// once, owned by the graph); random states are redrawn from their generator
// at every replay.
//
// A replay checks the inputs against the capture, gathers buffers, launches
// asynchronously, hands inputs their new buffers (mutations) and wraps the
// other outputs into fresh storages. An input the program rewrites, and
// reads through no other parameter, is donated: the capture's program lets
// that output share the parameter's buffer (fused.c), so the new value is
// written in place of the old one instead of beside it (parameters and
// optimizer state of a training step: half the memory, no allocation).
//
// A static capture (torch.tpu.graph, tt_graph_capture_begin_static) is the
// same capture with CUDA graphs' rules: a host read of a tpu value while it
// records fails at once (the value would be baked into the replays), and
// its replays write their results into the storages of the capture's own
// outputs (tt_graph_replay_into) rather than fresh ones: static addresses.
//
// Leaves out: captured constants (a storage read that is not an input fails
// the capture: its buffer may change or die), graphs across devices.
#include "runtime/graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cache.h"
#include "runtime/checks.h"
#include "runtime/executor.h"
#include "runtime/runtime.h"
#include "runtime/profile.h"
#include "runtime/storage.h"

// --- the capture --------------------------------------------------------------------

typedef struct graph_input {
  tt_storage *storage;  // at capture; NULL for a storage-less tensor
  tt_dtype dtype;
  int32_t ndim;
  int64_t sizes[TT_MAX_RANK];
  int64_t strides[TT_MAX_RANK];
  int64_t offset;
  int64_t nbytes;       // of its storage
  int32_t first;        // first input sharing its storage (itself if none)
  bool mutated;         // the graph writes its storage
} graph_input;

typedef struct capture {
  tt_executor base;    // first: the executor is the capture struct
  tt_executor *inner;  // borrowed: the executor that records the program
  int device;
  graph_input *inputs;
  int ninputs, cap_inputs;
  bool is_static;  // a host read fails (tt_graph_capture_begin_static)
  char why[256];  // first reason the capture broke; "" while it holds
} capture;

// The input index declared for `s` (the first sharing its storage), or -1.
static int input_of(const capture *c, const tt_storage *s) {
  for (int i = 0; s && i < c->ninputs; i++)
    if (c->inputs[i].storage == s) return c->inputs[i].first;
  return -1;
}

// Marks the capture as failed (the first reason is kept); the ops still run.
static void capture_break(capture *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void capture_break(capture *c, const char *fmt, ...) {
  if (c->why[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->why, sizeof c->why, fmt, ap);
  va_end(ap);
}

// --- the capture as an executor: the wrapped one's, plus what breaks it ---------------

static tt_status capture_run_op(tt_executor *ex, const tt_op_call *call,
                                const tt_rule *rule, tt_op_result *results,
                                int32_t cap, int32_t *out_nresults) {
  capture *c = (capture *)ex;
  if (call->device != c->device)
    capture_break(c, "%s ran on tpu:%d, the graph is captured on tpu:%d",
                  rule->name, (int)call->device, c->device);
  return tt_exec_run_op(c->inner, call, rule, results, cap, out_nresults);
}

// A static capture refuses what would run its recording before its end: a
// host read of a value, a synchronize, a mode switch. The host would see one
// value, fixed in every replay.
static tt_status refuse_host_read(capture *c) {
  capture_break(c, "a tpu value was read on the host while the graph was captured");
  return tt_make_status(TT_FAILED_PRECONDITION,
                        "graph capture: a tpu tensor was read on the host (.item(), "
                        ".cpu(), .tolist(), printing, a data-dependent shape such as "
                        "nonzero or boolean indexing, an op that runs on the CPU) or "
                        "the device synchronized while a graph was captured: the value "
                        "would be fixed in every replay. Move it out of the captured "
                        "region");
}

static tt_status capture_flush(tt_executor *ex) {
  capture *c = (capture *)ex;
  if (c->is_static && tt_exec_pending_ops(c->inner) > 0) return refuse_host_read(c);
  return tt_exec_flush(c->inner);
}

static int64_t capture_pending_ops(const tt_executor *ex) {
  return tt_exec_pending_ops(((const capture *)ex)->inner);
}

static tt_status capture_sync_storage(tt_executor *ex, tt_storage *s) {
  capture *c = (capture *)ex;
  if (c->is_static) return refuse_host_read(c);
  return tt_exec_sync_storage(c->inner, s);
}

static void capture_detach(tt_executor *ex, tt_storage *s) {
  capture *c = (capture *)ex;
  if (s->buf && input_of(c, s) >= 0)
    capture_break(c, "a graph input's buffer was replaced (a host write?) "
                  "while the graph was recorded");
  tt_exec_detach(c->inner, s);
}

static void capture_forget_exe(tt_executor *ex, const tt_pjrt_exe *exe) {
  tt_exec_forget_exe(((capture *)ex)->inner, exe);
}

static tt_status capture_again(tt_executor *ex, int device) {
  (void)ex;
  (void)device;
  return tt_make_status(TT_FAILED_PRECONDITION,
                        "graph capture: a capture is already under way");
}

static void capture_destroy(tt_executor *ex) {
  capture *c = (capture *)ex;
  if (!c) return;
  free(c->inputs);
  free(c);
}

static const tt_executor_ops kCaptureOps = {
    .name = "capture",
    .run_op = capture_run_op,
    .flush = capture_flush,
    .pending_ops = capture_pending_ops,
    .sync_storage = capture_sync_storage,
    .detach = capture_detach,
    .capture_begin = capture_again,
    .capture_end = tt_exec_no_capture_end,  // graph.c ends the inner capture
    .forget_exe = capture_forget_exe,
    .destroy = capture_destroy,
};

// --- the graph ----------------------------------------------------------------------

// A parameter reading a storage that had no buffer yet (an empty tensor made
// in the graph): zeros on every run.
#define ZEROS_INPUT (-2)

typedef struct graph_param {
  tt_param_kind kind;
  int32_t input;        // STORAGE: the input whose storage it reads, or
                        // ZEROS_INPUT (then `buf` holds the zeros)
  tt_dtype dtype;       // STORAGE: buffer dtype
  int64_t numel;        // STORAGE: flat elements
  tt_pjrt_buffer *buf;  // SCALAR, OFFSET, zeros: owned, the captured value
  tt_generator *gen;    // RNG
  uint64_t count;       // RNG: numbers drawn per run
  bool donate;          // STORAGE: a replay donates the input's buffer (the
                        // program writes its new value there; see donations)
} graph_param;

typedef struct graph_out {
  int32_t input;    // >= 0: the new buffer of this input's storage
  int32_t result;   // else: this fresh result
  tt_dtype dtype;   // flat buffer
  int64_t numel;
  int64_t nbytes;   // fresh result: its storage size
} graph_out;

struct tt_graph {
  tt_runtime *rt;
  int device;
  tt_pjrt_exe *exe;  // borrowed from the program cache; NULL: nothing to run
  graph_input *inputs;
  int ninputs;
  graph_param *params;
  int nparams;
  graph_out *outs;
  int nouts, nresults;
  tt_graph_output *outputs;  // the graph's outputs
  int noutputs;
  tt_exec_check *checks;  // device-side checks: program outputs after outs
  int nchecks;
  char name[96];  // in profiles (tt_graph_set_name); "": unnamed
};

// Frees a graph, rt->mu held: its executable is no longer pinned.
static void graph_free(tt_graph *g) {
  if (!g) return;
  if (g->exe) tt_prog_cache_unpin(g->rt->progs, g->exe);
  for (int i = 0; i < g->nparams; i++)
    if (g->params[i].buf) tt_pjrt_buffer_destroy(g->rt->pjrt, g->params[i].buf);
  free(g->inputs);
  free(g->params);
  free(g->outs);
  free(g->outputs);
  free(g->checks);
  free(g);
}

void tt_graph_destroy(tt_graph *g) {
  if (!g) return;
  tt_runtime *rt = g->rt;
  pthread_mutex_lock(&rt->mu);
  graph_free(g);
  pthread_mutex_unlock(&rt->mu);
}

void tt_graph_set_name(tt_graph *g, const char *name) {
  if (!g) return;
  pthread_mutex_lock(&g->rt->mu);
  snprintf(g->name, sizeof g->name, "%s", name ? name : "");
  pthread_mutex_unlock(&g->rt->mu);
}

int tt_graph_num_inputs(const tt_graph *g) { return g->ninputs; }
int tt_graph_num_outputs(const tt_graph *g) { return g->noutputs; }
int tt_graph_num_results(const tt_graph *g) { return g->nresults; }

void tt_graph_output_info(const tt_graph *g, int i, tt_graph_output *out) {
  *out = g->outputs[i];
}

// --- beginning a capture ------------------------------------------------------------

static tt_status begin(tt_runtime *rt, int device, bool is_static) {
  if (device < 0 || device >= rt->info.device_count)
    return tt_make_status(TT_INVALID_ARGUMENT, "graph capture: tpu:%d does not exist",
                          device);
  pthread_mutex_lock(&rt->mu);
  capture *c = calloc(1, sizeof *c);
  tt_status st = c ? NULL
                 : tt_make_status(TT_RESOURCE_EXHAUSTED, "graph capture: out of memory");
  // The executor in use records the program (and flushes what is pending);
  // only a deferred one can.
  if (!st) st = rt->exec->ops->capture_begin(rt->exec, device);
  if (!st) {
    c->base = (tt_executor){&kCaptureOps, rt};
    c->inner = rt->exec;
    c->device = device;
    c->is_static = is_static;
    rt->capture = &c->base;
    tt_runtime_pick_executor(rt);
  } else {
    free(c);
  }
  pthread_mutex_unlock(&rt->mu);
  return st;
}

tt_status tt_graph_capture_begin(tt_runtime *rt, int device) {
  return begin(rt, device, false);
}

tt_status tt_graph_capture_begin_static(tt_runtime *rt, int device) {
  return begin(rt, device, true);
}

static bool same_view(const graph_input *in, const tt_tensor *t) {
  if (in->dtype != t->dtype || in->ndim != t->ndim || in->offset != t->offset) return false;
  for (int d = 0; d < t->ndim; d++)
    if (in->sizes[d] != t->sizes[d] || in->strides[d] != t->strides[d]) return false;
  return true;
}

static void describe_input(graph_input *in, const tt_tensor *t) {
  in->storage = t->storage;
  in->dtype = t->dtype;
  in->ndim = t->ndim;
  memcpy(in->sizes, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
  memcpy(in->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  in->offset = t->offset;
  in->nbytes = t->storage ? t->storage->nbytes : 0;
}

tt_status tt_graph_capture_input(tt_runtime *rt, int index, const tt_tensor *t) {
  if (t->ndim < 0 || t->ndim > TT_MAX_RANK)
    return tt_make_status(TT_INVALID_ARGUMENT, "graph capture: input %d has rank %d "
                          "(at most %d)", index, (int)t->ndim, TT_MAX_RANK);
  pthread_mutex_lock(&rt->mu);
  capture *c = (capture *)rt->capture;
  tt_status st = NULL;
  if (!c) st = tt_make_status(TT_FAILED_PRECONDITION, "graph capture: not capturing");
  else if (index != c->ninputs)
    st = tt_make_status(TT_INVALID_ARGUMENT, "graph capture: input %d declared "
                        "after %d inputs (declare them in order)", index, c->ninputs);
  else if (t->storage && t->storage->device != c->device)
    st = tt_make_status(TT_INVALID_ARGUMENT, "graph capture: input %d is on tpu:%d, "
                        "the graph on tpu:%d", index, t->storage->device, c->device);
  if (!st && c->ninputs == c->cap_inputs) {
    int cap = c->cap_inputs ? 2 * c->cap_inputs : 16;
    graph_input *p = realloc(c->inputs, (size_t)cap * sizeof *p);
    if (!p) st = tt_make_status(TT_RESOURCE_EXHAUSTED, "graph capture: out of memory");
    else {
      c->inputs = p;
      c->cap_inputs = cap;
    }
  }
  if (!st) {
    graph_input *in = &c->inputs[c->ninputs];
    memset(in, 0, sizeof *in);
    describe_input(in, t);
    in->first = index;
    if (t->storage) {
      // The graph may already hold the storage (written before the capture
      // began is impossible: begin flushed), so sharing is all there is.
      int k = input_of(c, t->storage);
      if (k >= 0) in->first = k;
    }
    c->ninputs++;
  }
  pthread_mutex_unlock(&rt->mu);
  return st;
}

// --- ending a capture ---------------------------------------------------------------

typedef struct ending {
  tt_runtime *rt;
  capture *c;
  const tt_tensor *outputs;
  int noutputs;
  tt_graph *g;    // built by `seen`
  tt_status st;   // an error building it (not a capture break)
} ending;

// The input a storage parameter reads, ZEROS_INPUT, or -1 (the capture breaks).
static int32_t param_input(ending *e, const tt_exec_param *q) {
  int32_t in = input_of(e->c, q->storage);  // -1 for a detached storage
  if (in >= 0) return in;
  if (q->was_empty) return ZEROS_INPUT;  // a new empty tensor: zeros every run
  if (e->c->is_static)  // every tensor made before the capture is an input
    capture_break(e->c, "%s reads a tensor whose value came from the host while the "
                  "graph was captured (a CPU tensor copied in, torch.tensor(...)): a "
                  "replay cannot redo host work; copy such values into a tpu tensor "
                  "made before the capture", tt_op_name(q->op));
  else
    capture_break(e->c, "%s reads a tensor that is not a graph input (a constant "
                  "or a captured global)", tt_op_name(q->op));
  return -1;
}

static tt_status copy_params(ending *e, tt_graph *g, const tt_exec_program *p) {
  tt_runtime *rt = e->rt;
  g->params = calloc((size_t)(p->nparams ? p->nparams : 1), sizeof *g->params);
  if (!g->params) return tt_make_status(TT_RESOURCE_EXHAUSTED, "graph capture: out of memory");
  for (int i = 0; i < p->nparams; i++, g->nparams++) {
    const tt_exec_param *q = &p->params[i];
    graph_param *gp = &g->params[i];
    *gp = (graph_param){.kind = q->kind, .input = -1, .dtype = q->dtype,
                        .numel = q->numel, .gen = q->gen, .count = q->count};
    if (q->kind == TT_PARAM_STORAGE) gp->input = param_input(e, q);
    if (q->kind == TT_PARAM_RNG &&
        q->gen != tt_runtime_default_generator_locked(rt, p->device))
      capture_break(e->c, "%s draws from an explicit generator", tt_op_name(q->op));
    if (q->kind == TT_PARAM_SCALAR || q->kind == TT_PARAM_OFFSET)
      TT_RETURN_IF_ERROR(tt_pjrt_buffer_from_host(rt->pjrt, p->device, q->dtype, NULL,
                                                  0, &q->bits[0], &gp->buf));
    if (q->kind == TT_PARAM_STORAGE && gp->input == ZEROS_INPUT) {
      void *zeros = calloc((size_t)(q->numel ? q->numel : 1), (size_t)tt_dtype_size(q->dtype));
      if (!zeros) return tt_make_status(TT_RESOURCE_EXHAUSTED, "graph capture: out of memory");
      int64_t dims[1] = {q->numel};
      tt_status st = tt_pjrt_buffer_from_host(rt->pjrt, p->device, q->dtype, dims, 1,
                                              zeros, &gp->buf);
      free(zeros);
      TT_RETURN_IF_ERROR(st);
    }
  }
  return NULL;
}

// The program output whose storage is `s`, or -1.
static int out_of(const tt_exec_program *p, const tt_storage *s) {
  for (int j = 0; j < p->nouts; j++)
    if (p->outs[j] == s) return j;
  return -1;
}

// Maps program outputs to mutated inputs or fresh results, and graph outputs
// to views of either. False (capture broken) when one fits neither.
static bool map_outputs(ending *e, tt_graph *g, const tt_exec_program *p) {
  for (int j = 0; j < p->nouts; j++) {
    tt_storage *s = p->outs[j];
    graph_out *o = &g->outs[j];
    *o = (graph_out){.input = input_of(e->c, s), .result = -1,
                     .dtype = s->dtype, .numel = s->numel, .nbytes = s->nbytes};
    if (o->input >= 0) {
      e->c->inputs[o->input].mutated = true;
      continue;
    }
    bool returned = false;
    for (int i = 0; i < e->noutputs && !returned; i++)
      returned = e->outputs[i].storage == s;
    if (!returned) {
      capture_break(e->c, "a tensor the graph wrote outlives it but is "
                       "neither an output nor an input");
      return false;
    }
    o->result = g->nresults++;
  }
  g->nouts = p->nouts;
  for (int i = 0; i < e->noutputs; i++) {
    const tt_tensor *t = &e->outputs[i];
    tt_graph_output *go = &g->outputs[i];
    if (!t->storage || t->ndim < 0 || t->ndim > TT_MAX_RANK) {
      capture_break(e->c, "output %d has no device storage", i);
      return false;
    }
    *go = (tt_graph_output){.input = input_of(e->c, t->storage),
                            .result = -1, .dtype = t->dtype, .ndim = t->ndim,
                            .offset = t->offset};
    memcpy(go->sizes, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
    memcpy(go->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
    if (go->input >= 0) continue;
    int j = out_of(p, t->storage);
    if (j < 0 && e->c->is_static) {
      go->input = -1;  // made but never written (torch.empty): left alone
      continue;
    }
    if (j < 0) {
      capture_break(e->c, "output %d is not computed by the graph (a "
                       "constant or a captured global)", i);
      return false;
    }
    go->result = g->outs[j].result;
  }
  g->noutputs = e->noutputs;
  return true;
}

// Parameters whose input's buffer a replay donates: the program may write
// the input's new value (output j) into it (p->param_alias), and nothing else
// in the program reads that input. Its old value is then not kept alive
// beside the new one: parameters and optimizer state are updated in place.
static void donations(tt_graph *g, const tt_exec_program *p) {
  for (int i = 0; p->param_alias && i < g->nparams; i++) {
    int32_t j = p->param_alias[i], in = g->params[i].input;
    if (j < 0 || j >= g->nouts || in < 0 || g->outs[j].input != in) continue;
    int readers = 0;
    for (int k = 0; k < g->nparams; k++)
      readers += g->params[k].kind == TT_PARAM_STORAGE && g->params[k].input == in;
    g->params[i].donate = readers == 1;
  }
}

static void seen(void *ctx, const tt_exec_program *p) {
  ending *e = ctx;
  if (e->c->why[0]) return;  // broken: nothing to keep
  tt_graph *g = calloc(1, sizeof *g);
  if (!g) {
    e->st = tt_make_status(TT_RESOURCE_EXHAUSTED, "graph capture: out of memory");
    return;
  }
  g->rt = e->rt;
  g->device = e->c->device;
  g->exe = p->exe;  // pinned: the program cache keeps it while the graph lives
  if (g->exe) tt_prog_cache_pin(e->rt->progs, g->exe);
  g->outs = calloc((size_t)(p->nouts ? p->nouts : 1), sizeof *g->outs);
  g->outputs = calloc((size_t)(e->noutputs ? e->noutputs : 1), sizeof *g->outputs);
  g->checks = calloc((size_t)(p->nchecks ? p->nchecks : 1), sizeof *g->checks);
  if (g->checks && p->nchecks) {
    memcpy(g->checks, p->checks, (size_t)p->nchecks * sizeof *g->checks);
    g->nchecks = p->nchecks;
  }
  tt_status st = g->outs && g->outputs && g->checks ? NULL
                 : tt_make_status(TT_RESOURCE_EXHAUSTED, "graph capture: out of memory");
  if (!st) st = copy_params(e, g, p);
  if (st || e->c->why[0] || !map_outputs(e, g, p)) {
    e->st = st;
    graph_free(g);
    return;
  }
  donations(g, p);
  g->ninputs = e->c->ninputs;
  g->inputs = e->c->inputs;  // moved: the capture is freed without them
  e->c->inputs = NULL;
  e->g = g;
}

tt_status tt_graph_capture_end(tt_runtime *rt, const tt_tensor *outputs, int n,
                               tt_graph **out_graph) {
  *out_graph = NULL;
  pthread_mutex_lock(&rt->mu);
  capture *c = (capture *)rt->capture;
  if (!c) {
    pthread_mutex_unlock(&rt->mu);
    return tt_make_status(TT_FAILED_PRECONDITION, "graph capture: not capturing");
  }
  // Ops and storages go straight to the wrapped executor again: handing the
  // first run's outputs to inputs must not look like a host write.
  rt->capture = NULL;
  tt_runtime_pick_executor(rt);
  ending e = {rt, c, outputs, n, NULL, NULL};
  tt_status st = c->inner->ops->capture_end(c->inner, seen, &e);
  if (tt_status_code(st) == TT_UNIMPLEMENTED) {  // split: the ops ran
    capture_break(c, "%s", tt_status_message(st));
    tt_status_free(st);
    st = NULL;
  }
  if (!st) st = e.st;
  else tt_status_free(e.st);
  if (st) {
    graph_free(e.g);
    e.g = NULL;
  } else if (!e.g) {
    st = tt_make_status(TT_UNIMPLEMENTED, "graph capture failed: %s",
                        c->why[0] ? c->why : "no program");
  }
  if (e.g) rt->graph_stats.captures++;
  else rt->graph_stats.capture_failures++;
  capture_destroy(&c->base);
  pthread_mutex_unlock(&rt->mu);
  *out_graph = e.g;
  return st;
}

// --- replaying ------------------------------------------------------------------------

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *sizes) {
  size_t len = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < ndim && len < cap; d++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? ", " : "",
                            (long long)sizes[d]);
  if (len < cap) snprintf(buf + len, cap - len, "]");
}

static tt_status mismatch(int k, const graph_input *in, const tt_tensor *t,
                          const char *what) {
  char got[160] = "?", want[160];
  if (t->ndim >= 0 && t->ndim <= TT_MAX_RANK) shape_str(got, sizeof got, t->ndim, t->sizes);
  shape_str(want, sizeof want, in->ndim, in->sizes);
  return tt_make_status(TT_INVALID_ARGUMENT,
                        "graph replay: input %d (%s %s) differs from the capture "
                        "(%s %s) in its %s", k, tt_dtype_name(t->dtype), got,
                        tt_dtype_name(in->dtype), want, what);
}

// Inputs like the capture: views, storage sizes and sharing.
static tt_status check_inputs(const tt_graph *g, const tt_tensor *inputs, int n) {
  if (n != g->ninputs)
    return tt_make_status(TT_INVALID_ARGUMENT, "graph replay: %d inputs, the "
                          "capture had %d", n, g->ninputs);
  for (int k = 0; k < n; k++) {
    const graph_input *in = &g->inputs[k];
    const tt_tensor *t = &inputs[k];
    if (in->dtype != t->dtype) return mismatch(k, in, t, "dtype");
    if (in->ndim != t->ndim) return mismatch(k, in, t, "rank");
    for (int d = 0; d < t->ndim; d++)
      if (in->sizes[d] != t->sizes[d]) return mismatch(k, in, t, "shape");
    if (!same_view(in, t)) return mismatch(k, in, t, "strides or offset");
    if (!in->storage != !t->storage ||
        (t->storage && (t->storage->nbytes != in->nbytes ||
                        t->storage->device != g->device)))
      return mismatch(k, in, t, "storage (size or device)");
    if (in->first != k && t->storage != inputs[in->first].storage)
      return mismatch(k, in, t, "storage sharing (it shared input's storage at capture)");
  }
  for (int k = 0; k < n; k++) {  // a written storage is nobody else's
    if (!g->inputs[k].mutated) continue;
    for (int j = 0; j < n; j++)
      if (g->inputs[j].first != k && j != k && inputs[j].storage == inputs[k].storage)
        return mismatch(j, &g->inputs[j], &inputs[j],
                        "storage sharing (it shares a storage the graph writes)");
  }
  return NULL;
}

// Fills args; random states are uploaded into `rng` (advancing generators).
static tt_status gather(tt_runtime *rt, const tt_graph *g, const tt_tensor *inputs,
                        tt_pjrt_buffer **args, tt_pjrt_buffer **rng, int *nrng) {
  for (int i = 0; i < g->nparams; i++) {
    const graph_param *p = &g->params[i];
    if (p->kind == TT_PARAM_STORAGE && p->input == ZEROS_INPUT) {
      args[i] = p->buf;
    } else if (p->kind == TT_PARAM_STORAGE) {
      tt_storage *s = inputs[p->input].storage;
      if (!s->buf && s->lost)
        return tt_make_status(TT_FAILED_PRECONDITION, "graph replay: input %d's "
                              "value was lost: the fused graph that computed it "
                              "failed (see that error)", p->input);
      TT_RETURN_IF_ERROR(tt_storage_materialize(s, p->dtype));
      if (s->dtype != p->dtype || s->numel != p->numel)
        return tt_make_status(TT_INVALID_ARGUMENT, "graph replay: input %d's "
                              "storage holds %lld %s elements, the capture read "
                              "%lld %s", p->input, (long long)s->numel,
                              tt_dtype_name(s->dtype), (long long)p->numel,
                              tt_dtype_name(p->dtype));
      args[i] = s->buf;
    } else if (p->kind == TT_PARAM_RNG) {
      uint64_t state[2] = {p->gen->seed, p->gen->offset};
      int64_t two = 2;
      TT_RETURN_IF_ERROR(tt_pjrt_buffer_from_host(rt->pjrt, g->device, TT_U64, &two,
                                                  1, state, &rng[*nrng]));
      args[i] = rng[(*nrng)++];
    } else {
      args[i] = p->buf;
    }
  }
  return NULL;
}

// Hands the program outputs to inputs (mutations) and to fresh storages, or
// to `targets` (per result; tt_graph_replay_into) when given.
static tt_status scatter(tt_runtime *rt, const tt_graph *g, const tt_tensor *inputs,
                         tt_storage *const *targets, tt_pjrt_buffer **outs,
                         tt_op_result *results) {
  tt_status st = NULL;
  for (int j = 0; j < g->nouts; j++) {
    const graph_out *o = &g->outs[j];
    if (o->input >= 0) {
      tt_storage_set_buffer(inputs[o->input].storage, outs[j], o->dtype, o->numel);
      continue;
    }
    if (targets) {
      tt_storage_set_buffer(targets[o->result], outs[j], o->dtype, o->numel);
      continue;
    }
    tt_storage *s = NULL;
    if (!st) st = tt_storage_create(rt, g->device, o->nbytes, &s);
    if (!s) {
      tt_pjrt_buffer_destroy(rt->pjrt, outs[j]);
      continue;
    }
    tt_storage_set_buffer(s, outs[j], o->dtype, o->numel);
    results[o->result] = (tt_op_result){.storage = s, .dtype = o->dtype, .ndim = 1,
                                        .sizes = {o->numel}};
  }
  if (st)  // a storage could not be made: give back those that were
    for (int r = 0; r < g->nresults; r++) {
      tt_storage *s = results[r].storage;
      if (!s) continue;
      tt_storage_set_buffer(s, NULL, TT_U8, 0);  // tt_storage_destroy, locked
      tt_storage_free_unused(s);
      results[r].storage = NULL;
    }
  return st;
}

static tt_status replay_locked(tt_runtime *rt, tt_graph *g, const tt_tensor *inputs,
                               tt_storage *const *targets, tt_op_result *results) {
  if (rt->capture)
    return tt_make_status(TT_FAILED_PRECONDITION,
                          "graph replay: not while a graph is captured");
  // A pending deferred program may hold an input's value: run it first.
  TT_RETURN_IF_ERROR(tt_exec_flush(rt->exec));
  size_t np = (size_t)(g->nparams ? g->nparams : 1);
  size_t no = (size_t)(g->nouts + g->nchecks ? g->nouts + g->nchecks : 1);
  tt_pjrt_buffer **args = calloc(np, sizeof *args);
  tt_pjrt_buffer **rng = calloc(np, sizeof *rng);
  tt_pjrt_buffer **outs = calloc(no, sizeof *outs);
  uint64_t *offsets = calloc(np, sizeof *offsets);  // to undo on failure
  bool *donate = calloc(np, sizeof *donate);
  int nrng = 0;
  tt_status st = NULL;
  if (!args || !rng || !outs || !offsets || !donate) {
    st = tt_make_status(TT_RESOURCE_EXHAUSTED, "graph replay: out of memory");
    goto cleanup;
  }
  int64_t donated = 0, donated_bytes = 0;
  for (int i = 0; i < g->nparams; i++) {
    if (g->params[i].kind == TT_PARAM_RNG) offsets[i] = g->params[i].gen->offset;
    donate[i] = g->params[i].donate;
    if (!donate[i]) continue;
    donated++;
    donated_bytes += inputs[g->params[i].input].storage->nbytes;
  }
  st = gather(rt, g, inputs, args, rng, &nrng);
  // Generators advance as they would when the captured ops ran again.
  for (int i = 0; !st && i < g->nparams; i++)
    if (g->params[i].kind == TT_PARAM_RNG) g->params[i].gen->offset += g->params[i].count;
  tt_pjrt_event *done = NULL;
  if (!st && g->exe)
    st = tt_profile_execute(rt, TT_PROFILE_GRAPH, g->name[0] ? g->name : "graph replay",
                            g->exe, g->device, args, g->nparams, donate, outs, &done);
  if (st) {
    for (int i = 0; i < g->nparams; i++)
      if (g->params[i].kind == TT_PARAM_RNG) g->params[i].gen->offset = offsets[i];
    goto cleanup;
  }
  st = scatter(rt, g, inputs, targets, outs, results);
  for (int k = 0; k < g->nchecks; k++) {  // read at the next synchronisation
    tt_status ck = tt_checks_push(rt, outs[g->nouts + k], &g->checks[k].check,
                                  g->checks[k].op);
    if (ck && !st) st = ck;
    else tt_status_free(ck);
  }
  if (done) {
    tt_status ev = tt_runtime_track_event(rt, done);
    if (!st) st = ev;
    else tt_status_free(ev);
  }
  rt->graph_stats.replays++;
  rt->graph_stats.donated_buffers += donated;
  rt->graph_stats.donated_bytes += donated_bytes;
  rt->stats.donated_buffers += donated;
  rt->stats.donated_bytes += donated_bytes;
cleanup:
  for (int i = 0; i < nrng; i++) tt_pjrt_buffer_destroy(rt->pjrt, rng[i]);
  free(args);
  free(rng);
  free(outs);
  free(offsets);
  free(donate);
  return st;
}

tt_status tt_graph_replay(tt_runtime *rt, tt_graph *g, const tt_tensor *inputs,
                          int n, tt_op_result *results, int cap,
                          int *out_nresults) {
  *out_nresults = 0;
  if (cap < g->nresults)
    return tt_make_status(TT_INVALID_ARGUMENT, "graph replay: room for %d results, "
                          "the graph makes %d", cap, g->nresults);
  pthread_mutex_lock(&rt->mu);
  tt_status st = check_inputs(g, inputs, n);
  if (st) rt->graph_stats.replay_mismatches++;
  else {
    memset(results, 0, (size_t)g->nresults * sizeof *results);
    st = replay_locked(rt, g, inputs, NULL, results);
  }
  pthread_mutex_unlock(&rt->mu);
  if (!st) *out_nresults = g->nresults;
  return st;
}

// The storage each fresh result is written into: that of the first graph
// output viewing it, which must be the one it had at capture (same size and
// device; outputs that shared it still share it).
static tt_status result_targets(const tt_graph *g, const tt_tensor *outputs, int n,
                                tt_storage **targets) {
  if (n != g->noutputs)
    return tt_make_status(TT_INVALID_ARGUMENT, "graph replay: %d outputs, the "
                          "capture had %d", n, g->noutputs);
  for (int i = 0; i < n; i++) {
    const tt_graph_output *go = &g->outputs[i];
    if (go->result < 0) continue;
    tt_storage *s = outputs[i].storage;
    if (!s || s->device != g->device)
      return tt_make_status(TT_INVALID_ARGUMENT, "graph replay: output %d has no "
                            "storage on tpu:%d", i, g->device);
    if (!targets[go->result]) targets[go->result] = s;
    else if (targets[go->result] != s)
      return tt_make_status(TT_INVALID_ARGUMENT, "graph replay: output %d no longer "
                            "shares the storage it shared at capture", i);
  }
  for (int j = 0; j < g->nouts; j++) {
    const graph_out *o = &g->outs[j];
    if (o->input >= 0) continue;
    if (!targets[o->result] || targets[o->result]->nbytes != o->nbytes)
      return tt_make_status(TT_INVALID_ARGUMENT, "graph replay: the storage of result "
                            "%d holds %lld bytes, the capture's %lld", o->result,
                            targets[o->result] ? (long long)targets[o->result]->nbytes
                                               : 0LL, (long long)o->nbytes);
  }
  return NULL;
}

tt_status tt_graph_replay_into(tt_runtime *rt, tt_graph *g, const tt_tensor *inputs,
                               int n, const tt_tensor *outputs, int noutputs) {
  tt_storage **targets = calloc((size_t)(g->nresults ? g->nresults : 1), sizeof *targets);
  if (!targets) return tt_make_status(TT_RESOURCE_EXHAUSTED, "graph replay: out of memory");
  pthread_mutex_lock(&rt->mu);
  tt_status st = check_inputs(g, inputs, n);
  if (!st) st = result_targets(g, outputs, noutputs, targets);
  if (st) rt->graph_stats.replay_mismatches++;
  else st = replay_locked(rt, g, inputs, targets, NULL);
  pthread_mutex_unlock(&rt->mu);
  free(targets);
  return st;
}

void tt_runtime_graph_stats(tt_runtime *rt, tt_graph_stats *out) {
  pthread_mutex_lock(&rt->mu);
  *out = rt->graph_stats;
  pthread_mutex_unlock(&rt->mu);
}
