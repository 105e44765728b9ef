// The eager executor: tt_op_run and tt_op_infer.
//
// An op call is keyed by its signature: op, dtypes, shapes, view layouts,
// storage sharing and structural argument values, but not scalar values. A
// signature seen before reuses its plan (no lowering, no hashing of text);
// a new one is lowered, its StableHLO looked up in the program cache and
// compiled on a miss. Running a plan gathers the argument buffers (storages,
// cached scalar buffers, offsets, random state), launches the program
// asynchronously and swaps output buffers into storages.
//
// In TT_MODE_FUSED tt_op_run records the call into the deferred graph
// instead (fused.c); this file's signature cache is the strict path only.
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "lower/ctx.h"
#include "runtime/cache.h"
#include "runtime/runtime.h"

// --- signatures ------------------------------------------------------------------------

static void sig_tensor(tt_buf *b, const tt_tensor *t, int group) {
  if (!t->storage) {
    tt_buf_append_i64(b, -1);
    return;
  }
  tt_buf_append_i64(b, t->dtype);
  tt_buf_append_i64(b, t->ndim);
  tt_buf_append(b, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
  tt_buf_append(b, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  tt_buf_append_i64(b, t->offset != 0);
  tt_buf_append_i64(b, group);
  tt_buf_append_i64(b, tt_slot_buffer_dtype(t));
  tt_buf_append_i64(b, tt_slot_buffer_numel(t));
  tt_buf_append_i64(b, t->storage->nbytes);
}

static void sig_value(tt_buf *b, const tt_value *v, bool scalar_values,
                      const tt_slot *slots, int *slot) {
  tt_buf_append_i64(b, v->kind);
  switch (v->kind) {
    case TT_VALUE_TENSOR:
      sig_tensor(b, &v->u.tensor, v->u.tensor.storage ? slots[*slot].group : -1);
      if (v->u.tensor.storage) (*slot)++;
      break;
    case TT_VALUE_SCALAR:
      tt_buf_append_i64(b, v->u.scalar.dtype);
      tt_buf_append_i64(b, v->u.scalar.wrapped);
      if (scalar_values) {
        tt_buf_append(b, &v->u.scalar.f, sizeof v->u.scalar.f);
        tt_buf_append_i64(b, v->u.scalar.i);
      }
      break;
    case TT_VALUE_INT: tt_buf_append_i64(b, v->u.i); break;
    case TT_VALUE_BOOL: tt_buf_append_i64(b, v->u.b); break;
    case TT_VALUE_DTYPE: tt_buf_append_i64(b, v->u.dtype); break;
    case TT_VALUE_INTS:
      tt_buf_append_i64(b, v->u.ints.n);
      tt_buf_append(b, v->u.ints.data, sizeof(int64_t) * (size_t)v->u.ints.n);
      break;
    case TT_VALUE_STRING:
      tt_buf_append(b, v->u.str, strlen(v->u.str) + 1);
      break;
    case TT_VALUE_LIST:
      tt_buf_append_i64(b, v->u.list.n);
      for (int j = 0; j < v->u.list.n; j++)
        sig_value(b, &v->u.list.items[j], scalar_values, slots, slot);
      break;
    case TT_VALUE_NONE:
    case TT_VALUE_GENERATOR:
      break;
  }
}

static void build_signature(tt_buf *b, const tt_op_call *call,
                            const tt_rule *rule, const tt_slot *slots) {
  tt_buf_clear(b);
  tt_buf_append_i64(b, call->op);
  tt_buf_append_i64(b, call->default_dtype);
  tt_buf_append_i64(b, call->ndests);
  for (int i = 0; i < call->ndests; i++) {
    tt_buf_append_i64(b, call->dests[i].arg);
    tt_buf_append_i64(b, call->dests[i].item);
  }
  bool values = rule->flags & TT_RULE_SCALARS_IN_SIGNATURE;
  int slot = 0;
  for (int i = 0; i < call->nargs; i++)
    sig_value(b, &call->args[i], values, slots, &slot);
}

// --- scalar arguments ---------------------------------------------------------------------

// The value of a Scalar as `d`'s bytes (zero-extended into 8 bytes).
static uint64_t scalar_bits(const tt_scalar *s, tt_dtype d) {
  bool fl = s->dtype == TT_F64 || s->dtype == TT_F32 || s->dtype == TT_F16 ||
            s->dtype == TT_BF16;
  double f = fl ? s->f : (double)s->i;
  int64_t i = fl ? (int64_t)s->f : s->i;
  uint64_t out = 0;
  switch (d) {
    case TT_BOOL: { uint8_t v = fl ? f != 0 : i != 0; memcpy(&out, &v, 1); break; }
    case TT_U8: { uint8_t v = (uint8_t)i; memcpy(&out, &v, 1); break; }
    case TT_I8: { int8_t v = (int8_t)i; memcpy(&out, &v, 1); break; }
    case TT_I16: { int16_t v = (int16_t)i; memcpy(&out, &v, 2); break; }
    case TT_U16: { uint16_t v = (uint16_t)i; memcpy(&out, &v, 2); break; }
    case TT_I32: { int32_t v = (int32_t)i; memcpy(&out, &v, 4); break; }
    case TT_U32: { uint32_t v = (uint32_t)i; memcpy(&out, &v, 4); break; }
    case TT_I64: case TT_U64: memcpy(&out, &i, 8); break;
    case TT_F16: { _Float16 v = (_Float16)f; memcpy(&out, &v, 2); break; }
    case TT_BF16: {  // round to nearest even from float32
      float x = (float)f;
      uint32_t u;
      memcpy(&u, &x, 4);
      uint16_t v = (x != x) ? 0x7FC0 : (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
      memcpy(&out, &v, 2);
      break;
    }
    case TT_F32: { float v = (float)f; memcpy(&out, &v, 4); break; }
    case TT_F64: memcpy(&out, &f, 8); break;
    default: break;
  }
  return out;
}

// The cache slot of a value: Fibonacci hashing of the key's FNV hash, whose
// low bits alone are weak.
static tt_scalar_slot *scalar_slot(tt_runtime *rt, int device, tt_dtype d,
                                   uint64_t bits) {
  uint64_t key[3] = {(uint64_t)device, (uint64_t)d, bits};
  uint64_t h = tt_hash64(key, sizeof key) * 0x9E3779B97F4A7C15ull;
  return &rt->scalars[(h >> 32) % TT_SCALAR_CACHE];
}

// A device buffer holding the 0-d value `bits` of dtype d (borrowed from the
// runtime's scalar cache). A buffer evicted from the cache to make room goes
// to `*evicted` (else NULL): it may already be an argument of the program
// being assembled, so the caller destroys it only after the launch.
static tt_status scalar_buffer(tt_runtime *rt, int device, tt_dtype d,
                               uint64_t bits, tt_pjrt_buffer **out,
                               tt_pjrt_buffer **evicted) {
  tt_scalar_slot *s = scalar_slot(rt, device, d, bits);
  *evicted = NULL;
  if (s->buf && s->device == device && s->dtype == d && s->bits == bits) {
    *out = s->buf;
    return NULL;
  }
  tt_pjrt_buffer *b = NULL;
  TT_RETURN_IF_ERROR(tt_pjrt_buffer_from_host(rt->pjrt, device, d, NULL, 0, &bits, &b));
  *evicted = s->buf;
  *s = (tt_scalar_slot){b, device, d, bits};
  *out = b;
  return NULL;
}

uint64_t tt_scalar_bits(const tt_scalar *s, tt_dtype d) {
  return scalar_bits(s, d);
}

tt_status tt_scalar_buffer(tt_runtime *rt, int device, tt_dtype d,
                           uint64_t bits, bool lookup_only,
                           tt_pjrt_buffer **out) {
  if (!lookup_only) {
    tt_pjrt_buffer *evicted = NULL;
    TT_RETURN_IF_ERROR(scalar_buffer(rt, device, d, bits, out, &evicted));
    // Nothing launched yet may use it: callers pass lookup_only = true while
    // assembling a program's arguments.
    if (evicted) tt_pjrt_buffer_destroy(rt->pjrt, evicted);
    return NULL;
  }
  tt_scalar_slot *s = scalar_slot(rt, device, d, bits);
  bool hit = s->buf && s->device == device && s->dtype == d && s->bits == bits;
  *out = hit ? s->buf : NULL;
  return NULL;
}

void tt_scalar_cache_put(tt_runtime *rt, int device, tt_dtype d, uint64_t bits,
                         tt_pjrt_buffer *b) {
  tt_scalar_slot *s = scalar_slot(rt, device, d, bits);
  // Safe while a launched program still reads the old one (see pjrt.h).
  if (s->buf) tt_pjrt_buffer_destroy(rt->pjrt, s->buf);
  *s = (tt_scalar_slot){b, device, d, bits};
}

static tt_generator *generator_of(tt_runtime *rt, const tt_op_call *call,
                                  int arg) {
  if (arg >= 0 && arg < call->nargs &&
      call->args[arg].kind == TT_VALUE_GENERATOR && call->args[arg].u.gen)
    return call->args[arg].u.gen;
  return tt_runtime_default_generator_locked(rt, call->device);
}

// --- running a plan -------------------------------------------------------------------------

// Fills args[i] for parameter i. Buffers made here (random states) and
// scalar buffers evicted from the cache meanwhile are appended to `temps`
// (room for nparams) for the caller to destroy after the launch.
static tt_status gather_args(tt_runtime *rt, const tt_op_call *call,
                             const tt_plan *plan, const tt_slot *slots,
                             tt_pjrt_buffer **args, tt_pjrt_buffer **temps,
                             int *ntemps) {
  for (int i = 0; i < plan->nparams; i++) {
    const tt_param *p = &plan->params[i];
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
      uint64_t bits = scalar_bits(&v->u.scalar, p->dtype);
      tt_pjrt_buffer *evicted = NULL;
      TT_RETURN_IF_ERROR(scalar_buffer(rt, call->device, p->dtype, bits, &args[i], &evicted));
      if (evicted) temps[(*ntemps)++] = evicted;
    } else if (p->kind == TT_PARAM_OFFSET) {
      uint64_t bits = (uint64_t)slots[p->slot].t->offset;
      tt_pjrt_buffer *evicted = NULL;
      TT_RETURN_IF_ERROR(scalar_buffer(rt, call->device, TT_I64, bits, &args[i], &evicted));
      if (evicted) temps[(*ntemps)++] = evicted;
    } else {  // TT_PARAM_RNG
      tt_generator *g = generator_of(rt, call, p->arg);
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

// Hands the program's outputs to fresh storages and written storages.
static tt_status scatter_outputs(tt_runtime *rt, const tt_op_call *call,
                                 const tt_plan *plan, const tt_slot *slots,
                                 tt_pjrt_buffer **outs, tt_op_result *results,
                                 int32_t cap, int32_t *nres) {
  tt_status st = NULL;
  int r = 0;  // fresh results seen, in result order
  for (int o = 0; o < plan->nouts; o++) {
    const tt_out *out = &plan->outs[o];
    if (!out->fresh) {
      tt_storage_set_buffer(slots[out->slot].t->storage, outs[o], out->dtype,
                            out->numel);
      continue;
    }
    while (r < plan->nresults && call->dests[r].arg >= 0) r++;
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
    results[*nres] = plan->results[r++];
    results[*nres].storage = s;
    (*nres)++;
  }
  return st;
}

static tt_status run_plan(tt_runtime *rt, const tt_op_call *call,
                          const tt_plan *plan, const tt_slot *slots,
                          tt_op_result *results, int32_t cap, int32_t *nres) {
  tt_pjrt_buffer *stack_args[16], *stack_outs[16], *stack_temps[16];
  bool heap = plan->nparams > 16 || plan->nouts > 16;
  size_t na = (size_t)(plan->nparams ? plan->nparams : 1);
  size_t no = (size_t)(plan->nouts ? plan->nouts : 1);
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
  TT_GOTO_IF_ERROR(st, tt_pjrt_execute(rt->pjrt, plan->exe, call->device, args,
                                       plan->nparams, outs, &done), cleanup);
  rt->stats.op_calls++;
  st = scatter_outputs(rt, call, plan, slots, outs, results, cap, nres);
  tt_status ev = tt_runtime_track_event(rt, done);
  if (ev && !st) st = tt_status_annotate(ev, "%s", tt_op_name(call->op));
  else tt_status_free(ev);
cleanup:
  for (int i = 0; i < ntemps; i++) tt_pjrt_buffer_destroy(rt->pjrt, temps[i]);
  if (heap) {
    free(args);
    free(temps);
    free(outs);
  }
  return st;
}

// --- lowering and compiling on a miss ---------------------------------------------------------

// Lowers and compiles `call`; caches the plan (also "unimplemented" plans, so
// an op without a lowering falls back at once on later calls).
static tt_status make_plan(tt_runtime *rt, const tt_op_call *call,
                           const tt_rule *rule, tt_plan **out) {
  tt_hlo_reset(rt->hlo);
  tt_lower_options opts = {.infer_only = false, .supports_f64 = rt->supports_f64};
  const char *text = NULL;
  size_t len = 0;
  tt_plan *plan = NULL;
  tt_status st = tt_lower_call(call, rule, &opts, rt->hlo, &plan, &text, &len);
  if (tt_status_code(st) == TT_UNIMPLEMENTED) {
    plan = calloc(1, sizeof *plan);
    if (plan) {
      plan->unimplemented = true;
      plan->message = strdup(tt_status_message(st));
    }
  } else if (!st) {
    st = tt_runtime_compile(rt, text, len, &plan->exe);
    if (st) st = tt_status_annotate(st, "%s: compiling its program", tt_op_name(call->op));
  }
  if (st && tt_status_code(st) != TT_UNIMPLEMENTED) {
    tt_plan_free(plan);
    return st;
  }
  tt_status_free(st);
  if (!plan) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  TT_RETURN_IF_ERROR(tt_sig_cache_insert(rt->sigs, rt->sig.data, rt->sig.len, plan));
  *out = plan;
  return NULL;
}

// --- entry points ----------------------------------------------------------------------------

static tt_status check_call(tt_runtime *rt, const tt_op_call *call,
                            const tt_rule **rule) {
  *rule = tt_rule_get(call->op);
  if (!*rule)
    return tt_make_status(TT_UNIMPLEMENTED, "op id %d has no lowering", (int)call->op);
  if (call->device < 0 || call->device >= rt->info.device_count)
    return tt_make_status(TT_INVALID_ARGUMENT, "%s: tpu:%d does not exist",
                          (*rule)->name, (int)call->device);
  return NULL;
}

// Runs `fn` with the call's slots in a stack array (heap for long lists).
static tt_status with_slots(const tt_op_call *call, tt_slot **out, tt_slot *stack,
                            int cap) {
  int n = tt_call_slots(call, stack, cap);
  *out = stack;
  if (n <= cap) return NULL;
  *out = malloc((size_t)n * sizeof **out);
  if (!*out) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  tt_call_slots(call, *out, n);
  return NULL;
}

tt_status tt_op_run(tt_runtime *rt, const tt_op_call *call,
                    tt_op_result *results, int32_t cap, int32_t *out_nresults) {
  *out_nresults = 0;
  const tt_rule *rule;
  TT_RETURN_IF_ERROR(check_call(rt, call, &rule));
  if (rt->mode == TT_MODE_FUSED) {  // record into the deferred graph instead
    pthread_mutex_lock(&rt->mu);
    bool fused = rt->mode == TT_MODE_FUSED;  // not switched meanwhile
    tt_status st = NULL;
    if (fused) st = tt_fused_record(rt, call, rule, results, cap, out_nresults);
    pthread_mutex_unlock(&rt->mu);
    if (fused) return st;
  }
  tt_slot stack[32], *slots;
  TT_RETURN_IF_ERROR(with_slots(call, &slots, stack, 32));
  pthread_mutex_lock(&rt->mu);
  tt_status st = NULL;
  build_signature(&rt->sig, call, rule, slots);
  tt_plan *plan = tt_sig_cache_find(rt->sigs, rt->sig.data, rt->sig.len);
  if (plan) rt->stats.sig_hits++;
  else {
    // Recompile explainer hooks (runtime/explain.c, owned by the cache work):
    // keep these two calls around lowering+compiling a signature miss.
    tt_explain_op(rt, call);
    st = make_plan(rt, call, rule, &plan);
    tt_explain_op_done(rt);
  }
  if (!st && plan->unimplemented)
    st = tt_make_status(TT_UNIMPLEMENTED, "%s", plan->message ? plan->message : "");
  if (!st) st = run_plan(rt, call, plan, slots, results, cap, out_nresults);
  pthread_mutex_unlock(&rt->mu);
  if (slots != stack) free(slots);
  return st;
}

tt_status tt_op_infer(tt_runtime *rt, const tt_op_call *call,
                      tt_op_result *results, int32_t cap,
                      int32_t *out_nresults) {
  *out_nresults = 0;
  const tt_rule *rule;
  TT_RETURN_IF_ERROR(check_call(rt, call, &rule));
  pthread_mutex_lock(&rt->mu);
  tt_hlo_reset(rt->hlo);
  tt_lower_options opts = {.infer_only = true, .supports_f64 = rt->supports_f64};
  tt_plan *plan = NULL;
  tt_status st = tt_lower_call(call, rule, &opts, rt->hlo, &plan, NULL, NULL);
  if (!st) {
    for (int r = 0; r < plan->nresults && r < cap; r++) results[r] = plan->results[r];
    *out_nresults = plan->nresults < cap ? plan->nresults : cap;
  }
  tt_plan_free(plan);
  pthread_mutex_unlock(&rt->mu);
  return st;
}
