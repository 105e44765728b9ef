// The strict executor: one cached program per op signature, launched
// asynchronously (debug mode: waited for). See strict.h.
//
// An op call is keyed by its signature: op, dtypes, shapes, view layouts,
// storage sharing and structural argument values, but not scalar values. A
// signature seen before reuses its plan (no lowering, no hashing of text);
// a new one is lowered, its StableHLO looked up in the program cache and
// compiled on a miss. Running a plan gathers the argument buffers (storages,
// cached scalar buffers, offsets, random state), launches the program
// asynchronously and swaps output buffers into storages.
#include "runtime/strict.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/hash.h"
#include "lower/ctx.h"
#include "runtime/background.h"
#include "runtime/cache.h"
#include "runtime/checks.h"
#include "runtime/compile.h"
#include "runtime/executor.h"
#include "runtime/explain.h"
#include "runtime/runtime.h"
#include "runtime/scalars.h"
#include "runtime/signature.h"
#include "runtime/profile.h"
#include "runtime/spill.h"
#include "runtime/storage.h"

typedef struct strict {
  tt_executor base;  // first: the executor is the strict struct
  tt_sig_cache *sigs;
  tt_buf sig;        // scratch for signatures
  tt_buf dense_sig;  // scratch for a spill candidate's dense signature
  tt_layout_counts layouts;  // layouts compiled per dense signature (spill.h)
  int32_t copy_op;   // aten::copy, which makes a spill's dense copies
  int32_t copy_to_op;  // aten::copy_: a copy already, nothing to gain
  int spilling;      // > 0 while a spill runs its copies and dense op
} strict;

static tt_status strict_run_op(tt_executor *ex, const tt_op_call *call,
                               const tt_rule *rule, tt_op_result *results,
                               int32_t cap, int32_t *out_nresults);

// --- running a plan -------------------------------------------------------------------------

// Fills args[i] for parameter i. Buffers made here (random states) and
// scalar buffers evicted from the cache meanwhile are appended to `temps`
// (room for nparams) for the caller to destroy after the launch.
static tt_status gather_args(tt_runtime *rt, const tt_op_call *call,
                             const tt_plan *plan, const tt_slot *slots,
                             tt_pjrt_buffer **args, tt_pjrt_buffer **temps,
                             int *ntemps) {
  for (int i = 0; i < plan->prog.nparams; i++) {
    const tt_param *p = &plan->prog.params[i];
    if (p->kind == TT_PARAM_STORAGE) {
      tt_storage *s = slots[p->slot].t->storage;
      TT_RETURN_IF_ERROR(tt_storage_materialize(s, p->dtype));
      if (s->dtype != p->dtype || s->numel != p->numel)
        return tt_make_status(TT_INTERNAL, "%s: storage changed under its plan",
                              tt_op_name(call->op));
      args[i] = s->buf;
    } else if (p->kind == TT_PARAM_SCALAR) {
      const tt_value *v = &call->args[p->arg];
      if (v->kind == TT_VALUE_LIST) v = &v->u.list.items[p->item];
      uint64_t bits = tt_scalar_part_bits(&v->u.scalar, p->dtype, p->imag);
      tt_pjrt_buffer *evicted = NULL;
      TT_RETURN_IF_ERROR(tt_scalar_cache_get(&rt->scalars, rt->pjrt, call->device,
                                             p->dtype, bits, &args[i], &evicted));
      if (evicted) temps[(*ntemps)++] = evicted;
    } else if (p->kind == TT_PARAM_OFFSET) {
      uint64_t bits = (uint64_t)slots[p->slot].t->offset;
      tt_pjrt_buffer *evicted = NULL;
      TT_RETURN_IF_ERROR(tt_scalar_cache_get(&rt->scalars, rt->pjrt, call->device,
                                             TT_I64, bits, &args[i], &evicted));
      if (evicted) temps[(*ntemps)++] = evicted;
    } else {  // TT_PARAM_RNG
      tt_generator *g = tt_runtime_call_generator(rt, call, p->arg);
      if (!g) return tt_make_status(TT_RESOURCE_EXHAUSTED, "generator: out of memory");
      uint64_t state[2] = {g->seed, g->offset};
      g->offset += p->count;
      int64_t two = 2;
      TT_RETURN_IF_ERROR(tt_pjrt_buffer_from_host(rt->pjrt, call->device, TT_U64,
                                                  &two, 1, state, &args[i]));
      temps[(*ntemps)++] = args[i];
    }
  }
  return NULL;
}

// The storage buffers the op's program may write its new values into: the
// storages it rewrites (their old buffers are dropped when the outputs
// replace them, and a storage is one parameter, so nothing else reads them).
// *n and *bytes: how many, and their size.
static void donations(const tt_plan *plan, const tt_slot *slots, bool *donate,
                      int64_t *n, int64_t *bytes) {
  for (int i = 0; i < plan->prog.nparams; i++) {
    donate[i] = tt_program_param_alias(&plan->prog, i) >= 0;
    if (!donate[i]) continue;
    (*n)++;
    *bytes += slots[plan->prog.params[i].slot].t->storage->nbytes;
  }
}

// Hands the program's outputs to fresh storages and written storages.
static tt_status scatter_outputs(tt_runtime *rt, const tt_op_call *call,
                                 const tt_plan *plan, const tt_slot *slots,
                                 tt_pjrt_buffer **outs, tt_op_result *results,
                                 int32_t cap, int32_t *nres) {
  tt_status st = NULL;
  int r = 0;  // fresh results seen, in result order
  for (int o = 0; o < plan->prog.nouts; o++) {
    const tt_out *out = &plan->prog.outs[o];
    if (!out->fresh) {
      tt_storage_set_buffer(slots[out->slot].t->storage, outs[o], out->dtype,
                            out->numel);
      continue;
    }
    while (r < plan->prog.nresults && call->dests[r].arg >= 0) r++;
    tt_storage *s = NULL;
    if (!st && *nres < cap)
      st = tt_storage_create(rt, call->device, out->numel * tt_dtype_size(out->dtype), &s);
    if (!s) {
      tt_pjrt_buffer_destroy(rt->pjrt, outs[o]);
      if (!st) st = tt_make_status(TT_INTERNAL, "%s: more results than room",
                                   tt_op_name(call->op));
      r++;
      continue;
    }
    tt_storage_set_buffer(s, outs[o], out->dtype, out->numel);
    results[*nres] = plan->prog.results[r++];
    results[*nres].storage = s;
    (*nres)++;
  }
  return st;
}

static tt_status run_plan(tt_runtime *rt, const tt_op_call *call,
                          const tt_plan *plan, const tt_slot *slots,
                          tt_op_result *results, int32_t cap, int32_t *nres) {
  tt_pjrt_buffer *stack_args[16], *stack_outs[16], *stack_temps[16];
  int nouts = plan->prog.nouts + plan->prog.nchecks;  // checks' flags last
  bool heap = plan->prog.nparams > 16 || nouts > 16;
  size_t na = (size_t)(plan->prog.nparams ? plan->prog.nparams : 1);
  size_t no = (size_t)(nouts ? nouts : 1);
  tt_pjrt_buffer **args = heap ? calloc(na, sizeof *args) : stack_args;
  tt_pjrt_buffer **temps = heap ? calloc(na, sizeof *temps) : stack_temps;
  tt_pjrt_buffer **outs = heap ? calloc(no, sizeof *outs) : stack_outs;
  int ntemps = 0;
  tt_pjrt_event *done = NULL;
  tt_status st = NULL;
  if (!args || !temps || !outs) {
    st = tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
    goto cleanup;
  }
  TT_GOTO_IF_ERROR(st, gather_args(rt, call, plan, slots, args, temps, &ntemps), cleanup);
  bool stack_donate[16], *donate = NULL;
  int64_t donated = 0, donated_bytes = 0;
  if (tt_pjrt_exe_aliasing(plan->exe)) {
    donate = heap ? calloc(na, sizeof *donate) : stack_donate;
    if (!donate) {
      st = tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
      goto cleanup;
    }
    donations(plan, slots, donate, &donated, &donated_bytes);
  }
  st = tt_profile_execute(rt, TT_PROFILE_OP, tt_op_name(call->op), plan->exe, call->device,
                          args, plan->prog.nparams, donate, outs, &done);
  if (heap) free(donate);
  if (st) goto cleanup;
  rt->stats.op_calls++;
  rt->stats.donated_buffers += donated;  // counted once launched, as fused.c and graph.c do
  rt->stats.donated_bytes += donated_bytes;
  st = scatter_outputs(rt, call, plan, slots, outs, results, cap, nres);
  for (int k = 0; k < plan->prog.nchecks; k++) {  // read at the next sync
    tt_status ck = tt_checks_push(rt, outs[plan->prog.nouts + k], &plan->prog.checks[k],
                                  call->op);
    if (ck && !st) st = ck;
    else tt_status_free(ck);
  }
  tt_status ev = tt_runtime_track_event(rt, done);
  if (ev && !st) st = tt_status_annotate(ev, "%s", tt_op_name(call->op));
  else tt_status_free(ev);
  // Debug eager: the op has finished (track_event waited); so are its checks.
  if (!st && rt->mode == TT_MODE_DEBUG && plan->prog.nchecks) st = tt_checks_read(rt);
cleanup:
  for (int i = 0; i < ntemps; i++) tt_pjrt_buffer_destroy(rt->pjrt, temps[i]);
  if (heap) {
    free(args);
    free(temps);
    free(outs);
  }
  return st;
}

// The call's slots in a stack array (heap for long lists); `*n` their number.
static tt_status with_slots(const tt_op_call *call, tt_slot **out, tt_slot *stack,
                            int cap, int *n) {
  *n = tt_call_slots(call, stack, cap);
  *out = stack;
  if (*n <= cap) return NULL;
  *out = malloc((size_t)*n * sizeof **out);
  if (!*out) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  tt_call_slots(call, *out, *n);
  return NULL;
}

// --- spilling strided inputs (spill.h) ----------------------------------------------------

// The slots of this new layout to copy dense instead of compiling a program
// for it: 0 unless the op has been compiled for rt->layouts_per_op layouts
// with the same dense signature (`prog`: the call's lowering, which says
// what it writes).
static uint64_t spill_mask(strict *x, const tt_op_call *call, const tt_rule *rule,
                           const tt_slot *slots, int nslots, const tt_program *prog) {
  tt_runtime *rt = x->base.rt;
  if (x->spilling || rt->layouts_per_op <= 0 || x->copy_op < 0 || call->op == x->copy_op ||
      call->op == x->copy_to_op || (rule->flags & TT_RULE_READS_LAYOUT))
    return 0;
  // An op that writes into a tensor it was given does not spill: spilled,
  // minimum(e[k], s[k], out=e[k]) over the rows k of a permuted e left rows
  // k >= 1 unwritten (test_torch's test_index_reduce computes its reference
  // so). Its cause in the dense call is not found; written views keep a
  // program per layout, as before spilling.
  for (int o = 0; o < prog->nouts; o++)
    if (!prog->outs[o].fresh) return 0;
  uint64_t mask = tt_spill_candidates(slots, nslots, 0);
  if (!mask) return 0;
  // The dense call's signature: storages without buffers of the copies' size
  // have the facts the copies will have.
  tt_storage holders[64], *stores[64] = {0};
  for (int i = 0; i < nslots && i < 64; i++) {
    if (!(mask >> i & 1)) continue;
    holders[i] = (tt_storage){.rt = rt, .device = call->device,
                              .nbytes = tt_view_numel(slots[i].t) *
                                        tt_dtype_size(slots[i].t->dtype)};
    stores[i] = &holders[i];
  }
  tt_spill_call dense;
  tt_status st = tt_spill_call_init(&dense, call, slots, nslots, mask, stores);
  if (st) {
    tt_status_free(st);
    return 0;
  }
  tt_slot stack[32], *dslots = stack;
  int n;
  int32_t count = 0;
  st = with_slots(&dense.call, &dslots, stack, 32, &n);
  if (!st) {
    tt_signature_build(&x->dense_sig, &dense.call, rule, dslots);
    count = tt_layout_counts_bump(&x->layouts,
                                  tt_hash_words(x->dense_sig.data, x->dense_sig.len));
    if (dslots != stack) free(dslots);
  }
  tt_spill_call_deinit(&dense);
  tt_status_free(st);
  return count > rt->layouts_per_op ? mask : 0;
}

// A dense copy of `t` in a fresh storage (aten::copy through this executor).
static tt_status dense_copy(strict *x, const tt_op_call *call, const tt_tensor *t,
                           tt_storage **out) {
  tt_value args[3] = {{.kind = TT_VALUE_TENSOR, .u.tensor = *t},
                      {.kind = TT_VALUE_TENSOR, .u.tensor = *t},
                      {.kind = TT_VALUE_BOOL, .u.b = false}};
  tt_dest dest = {-1, -1};
  tt_op_call c = {.op = x->copy_op, .device = call->device,
                  .default_dtype = call->default_dtype, .args = args, .nargs = 3,
                  .dests = &dest, .ndests = 1};
  tt_op_result r;
  int32_t n = 0;
  TT_RETURN_IF_ERROR(strict_run_op(&x->base, &c, tt_rule_get(x->copy_op), &r, 1, &n));
  if (n != 1) return tt_make_status(TT_INTERNAL, "%s: dense copy gave no result",
                                    tt_op_name(call->op));
  *out = r.storage;
  return NULL;
}

// Runs `call` with the slots in `mask` copied dense first.
static tt_status run_spilled(strict *x, const tt_op_call *call, const tt_rule *rule,
                             const tt_slot *slots, int nslots, uint64_t mask,
                             tt_op_result *results, int32_t cap, int32_t *nres) {
  tt_storage *copies[64] = {0};
  tt_spill_call dense = {0};
  tt_status st = NULL;
  x->spilling++;
  for (int i = 0; i < nslots && i < 64 && !st; i++)
    if (mask >> i & 1) st = dense_copy(x, call, slots[i].t, &copies[i]);
  if (!st) st = tt_spill_call_init(&dense, call, slots, nslots, mask, copies);
  if (!st) {
    x->base.rt->stats.layout_spills++;
    st = strict_run_op(&x->base, &dense.call, rule, results, cap, nres);
    tt_spill_call_deinit(&dense);
  }
  x->spilling--;
  // A launched program keeps what it reads alive (PJRT counts its uses).
  for (int i = 0; i < 64; i++) {
    if (copies[i]) tt_storage_destroy_locked(copies[i]);
  }
  return st;
}

// --- the host tier: cold signatures ------------------------------------------------------------
//
// A new signature whose program is in no cache is cold: its calls return
// TT_RUN_ON_HOST (the shim runs PyTorch's CPU kernels) while the program
// compiles in the background, from the signature's rt->compile_after-th
// call on. The first call after the compile finished takes the executable
// into the program cache and runs on the device, as every later call does.

// Whether the storages of the call's tensors (what the host tier copies:
// a slice of a large table reads the whole table) fit in
// rt->host_tier_bytes, each storage counted once: small enough for the host
// tier and for the per-op optimisation level.
static bool small_call(const tt_runtime *rt, const tt_slot *slots, int nslots) {
  int64_t bytes = 0;
  for (int i = 0; i < nslots; i++) {
    const tt_storage *s = slots[i].t->storage;
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = slots[j].t->storage == s;
    if (!seen && s) bytes += tt_storage_nbytes(s);
  }
  return bytes <= rt->host_tier_bytes;
}

// Whether `call` may run on the host instead of waiting for its compile;
// `prog` (NULL before lowering) must draw no random numbers: they come from
// the device's generator, and the host's would give other numbers for the
// same seed (the shim does not mark random ops host_ok either).
static bool tier_applies(strict *x, const tt_op_call *call, const tt_slot *slots, int nslots,
                         const tt_program *prog) {
  const tt_runtime *rt = x->base.rt;
  if (rt->compile_after <= 0 || !call->host_ok || rt->mode != TT_MODE_STRICT || x->spilling ||
      !small_call(rt, slots, nslots))
    return false;
  for (int i = 0; prog && i < prog->nparams; i++)
    if (prog->params[i].kind == TT_PARAM_RNG) return false;
  return true;
}

static tt_status make_cold(tt_plan *plan, const char *text, size_t len) {
  plan->text = malloc(len ? len : 1);
  if (!plan->text) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(plan->text, text, len);
  plan->text_len = len;
  plan->cold = true;
  return NULL;
}

// The plan's program from its finished background compile, or, when that
// failed or the tier no longer applies, compiled now (a cold plan is small).
static tt_status warm_plan(tt_runtime *rt, const tt_op_call *call, tt_plan *plan) {
  tt_status st = NULL;
  if (plan->why) tt_explain_op_resume(rt, call->op, plan->why_cause, plan->why, plan->calls);
  else tt_explain_op(rt, call);
  if (plan->job && tt_bg_done(plan->job)) {
    tt_pjrt_exe *exe = NULL;
    double seconds = 0;
    st = tt_bg_take(plan->job, &exe, &seconds);
    plan->job = NULL;
    if (!st) st = tt_runtime_adopt_compiled(rt, plan->text, plan->text_len, exe, seconds,
                                            &plan->exe);
    tt_status_free(st);  // a failed compile is compiled again below, for its error
    st = NULL;
  }
  tt_bg_cancel(plan->job);
  plan->job = NULL;
  if (!plan->exe) st = tt_runtime_compile_op(rt, plan->text, plan->text_len, true, &plan->exe);
  tt_explain_op_done(rt);
  if (st) return tt_status_annotate(st, "%s: compiling its program", tt_op_name(call->op));
  plan->cold = false;
  free(plan->text);
  plan->text = NULL;
  free(plan->why);
  plan->why = NULL;
  return NULL;
}

// A call of a cold signature: NULL when its program is ready now (the plan
// is warm), else TT_RUN_ON_HOST.
static tt_status cold_call(strict *x, const tt_op_call *call, const tt_slot *slots, int nslots,
                           tt_plan *plan) {
  tt_runtime *rt = x->base.rt;
  if (!plan->unlowered &&
      ((plan->job && tt_bg_done(plan->job)) || !tier_applies(x, call, slots, nslots, &plan->prog)))
    return warm_plan(rt, call, plan);
  plan->calls++;
  if (plan->job) tt_bg_touch(plan->job);
  else if (!plan->unlowered && plan->calls >= rt->compile_after)
    TT_RETURN_IF_ERROR(tt_bg_submit(rt->bg, plan->text, plan->text_len, &plan->job));
  rt->stats.host_calls++;
  return tt_status_run_on_host();
}

// --- lowering and compiling on a miss ---------------------------------------------------------

// Lowers `call` into `plan` (empty, or cold and not lowered yet) and
// compiles it, or leaves it cold (the host tier; its program compiled later
// in the background, or found in a cache now), or marks it spilled or
// unimplemented (an op without a lowering falls back at once on later calls).
static tt_status lower_plan(strict *x, const tt_op_call *call, const tt_rule *rule,
                            const tt_slot *slots, int nslots, tt_plan *plan) {
  tt_runtime *rt = x->base.rt;
  tt_hlo_reset(rt->hlo);
  tt_lower_options opts;
  tt_runtime_lower_options(rt, false, &opts);
  const char *text = NULL;
  size_t len = 0;
  plan->unlowered = false;
  plan->cold = false;
  tt_status st = tt_lower_call(call, rule, &opts, rt->hlo, &plan->prog, &text, &len);
  if (tt_status_code(st) == TT_UNIMPLEMENTED) {
    plan->unimplemented = true;
    plan->message = strdup(tt_status_message(st));
    tt_status_free(st);
    return NULL;
  }
  if (!st && tier_applies(x, call, slots, nslots, &plan->prog)) {
    // Cold unless compiled before; not spilled: the host tier already keeps
    // a new layout from compiling until it is called again.
    st = tt_runtime_find_compiled(rt, text, len, &plan->exe);
    if (!st && !plan->exe) st = make_cold(plan, text, len);
    if (!st && plan->cold && !plan->why) plan->why = tt_explain_why(rt, &plan->why_cause);
  } else if (!st) {
    plan->spill_mask = spill_mask(x, call, rule, slots, nslots, &plan->prog);
    if (!plan->spill_mask)
      st = tt_runtime_compile_op(rt, text, len, small_call(rt, slots, nslots), &plan->exe);
    if (st) st = tt_status_annotate(st, "%s: compiling its program", tt_op_name(call->op));
  }
  return st;
}

// A new signature's plan, cached under `x->sig`. Under the host tier with
// compile_after >= 2 its first call runs before it is even lowered (the
// StableHLO text costs tens of microseconds, more than the host's op): the
// call that reaches compile_after lowers it (cold_or_lower).
static tt_status make_plan(strict *x, const tt_op_call *call, const tt_rule *rule,
                           const tt_slot *slots, int nslots, tt_plan **out) {
  tt_runtime *rt = x->base.rt;
  tt_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  tt_status st = NULL;
  if (rt->compile_after >= 2 && tier_applies(x, call, slots, nslots, NULL)) {
    plan->cold = plan->unlowered = true;
  } else {
    tt_explain_op(rt, call);
    st = lower_plan(x, call, rule, slots, nslots, plan);
    tt_explain_op_done(rt);
  }
  if (st) {
    tt_plan_free(plan);
    return st;
  }
  TT_RETURN_IF_ERROR(tt_sig_cache_insert(x->sigs, x->sig.data, x->sig.len, plan));
  *out = plan;
  return NULL;
}

// A cold plan not lowered yet is lowered at the call that reaches
// compile_after, or when the host tier no longer takes the call.
static tt_status lower_if_due(strict *x, const tt_op_call *call, const tt_rule *rule,
                              const tt_slot *slots, int nslots, tt_plan *plan) {
  tt_runtime *rt = x->base.rt;
  if (!plan->unlowered ||
      (plan->calls + 1 < rt->compile_after && tier_applies(x, call, slots, nslots, NULL)))
    return NULL;
  tt_explain_op(rt, call);
  tt_status st = lower_plan(x, call, rule, slots, nslots, plan);
  tt_explain_op_done(rt);
  if (st) {  // not lowered after all: the next call tries again, and fails the same way
    tt_program_deinit(&plan->prog);
    memset(&plan->prog, 0, sizeof plan->prog);
    free(plan->text);
    plan->text = NULL;
    plan->cold = plan->unlowered = true;
  }
  return st;
}

// --- the executor ----------------------------------------------------------------------------

static tt_status strict_run_op(tt_executor *ex, const tt_op_call *call,
                               const tt_rule *rule, tt_op_result *results,
                               int32_t cap, int32_t *out_nresults) {
  strict *x = (strict *)ex;
  tt_runtime *rt = ex->rt;
  tt_slot stack[32], *slots;
  int nslots;
  TT_RETURN_IF_ERROR(with_slots(call, &slots, stack, 32, &nslots));
  tt_status st = NULL;
  tt_signature_build(&x->sig, call, rule, slots);
  tt_buf_append_i64(&x->sig, rt->device_checks);  // plans with and without checks
  tt_plan *plan = tt_sig_cache_find(x->sigs, x->sig.data, x->sig.len);
  // The recompile explainer describes the call around its lowering, so the
  // compile that follows (if any) is explained with it.
  if (plan) rt->stats.sig_hits++;
  else st = make_plan(x, call, rule, slots, nslots, &plan);
  if (!st) st = lower_if_due(x, call, rule, slots, nslots, plan);
  if (!st && plan->unimplemented)
    st = tt_make_status(TT_UNIMPLEMENTED, "%s", plan->message ? plan->message : "");
  if (!st && plan->cold) st = cold_call(x, call, slots, nslots, plan);
  if (!st && plan->spill_mask)
    st = run_spilled(x, call, rule, slots, nslots, plan->spill_mask, results, cap,
                     out_nresults);
  else if (!st) st = run_plan(rt, call, plan, slots, results, cap, out_nresults);
  if (slots != stack) free(slots);
  return st;
}

// Nothing is deferred: launching is all there is.
static tt_status strict_flush(tt_executor *ex) {
  (void)ex;
  return NULL;
}

static void strict_forget_exe(tt_executor *ex, const tt_pjrt_exe *exe) {
  tt_sig_cache_drop_exe(((strict *)ex)->sigs, exe);
}

static void strict_destroy(tt_executor *ex) {
  strict *x = (strict *)ex;
  tt_sig_cache_destroy(x->sigs, ex->rt->pjrt);
  tt_buf_deinit(&x->sig);
  tt_buf_deinit(&x->dense_sig);
  tt_layout_counts_deinit(&x->layouts);
  free(x);
}

static const tt_executor_ops kStrictOps = {
    .name = "strict",
    .run_op = strict_run_op,
    .flush = strict_flush,
    .pending_ops = tt_exec_no_pending,
    .sync_storage = tt_exec_nothing_to_sync,
    .detach = tt_exec_nothing_to_detach,
    .capture_begin = tt_exec_no_capture_begin,
    .capture_end = tt_exec_no_capture_end,
    .forget_exe = strict_forget_exe,
    .destroy = strict_destroy,
};

tt_status tt_strict_create(tt_runtime *rt, tt_executor **out) {
  *out = NULL;
  strict *x = calloc(1, sizeof *x);
  if (!x) return tt_make_status(TT_RESOURCE_EXHAUSTED, "strict executor: out of memory");
  x->base = (tt_executor){&kStrictOps, rt};
  x->copy_op = tt_op_lookup("aten::copy");
  x->copy_to_op = tt_op_lookup("aten::copy_");
  tt_buf_init(&x->sig);
  tt_buf_init(&x->dense_sig);
  tt_status st = tt_sig_cache_create(&x->sigs);
  if (st) {
    tt_buf_deinit(&x->sig);
    free(x);
    return st;
  }
  *out = &x->base;
  return NULL;
}
