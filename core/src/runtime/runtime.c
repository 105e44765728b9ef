// The runtime context: plugin + client, caches, executors, counters,
// pending events, default generators. See runtime.h.
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/attention_kernel.h"
#include "runtime/background.h"
#include "runtime/cache.h"
#include "runtime/checks.h"
#include "runtime/executor.h"
#include "runtime/fused.h"
#include "runtime/hostmem.h"
#include "runtime/profile.h"
#include "runtime/storage.h"
#include "runtime/strict.h"

// --- create / destroy -----------------------------------------------------------

tt_status tt_runtime_create(const tt_runtime_options *opts,
                            tt_runtime **out_rt) {
  *out_rt = NULL;
  tt_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) return tt_make_status(TT_RESOURCE_EXHAUSTED, "runtime: out of memory");
  pthread_mutex_init(&rt->mu, NULL);
  rt->device_checks = true;
  rt->layouts_per_op = TT_DEFAULT_LAYOUTS_PER_OP;
  rt->compile_after = TT_DEFAULT_COMPILE_AFTER;
  rt->host_tier_bytes = TT_DEFAULT_HOST_TIER_BYTES;
  tt_status st = NULL;
  tt_pjrt_options po = {
      .plugin_path = opts ? opts->plugin_path : NULL,
      .cpu_device_count = opts && opts->cpu_device_count > 0
                              ? opts->cpu_device_count : 1,
      // Inline by default: a launch of a tiny program then costs no thread
      // hand-off (a wake-up, a completion signal), which dominates op-by-op
      // eager on a host whose cores are busy.
      .cpu_async = opts && opts->cpu_launch == TT_CPU_LAUNCH_ASYNC ? 1 : 0,
  };
  TT_GOTO_IF_ERROR(st, tt_pjrt_create(&po, &rt->pjrt), fail);
  tt_pjrt_info_get(rt->pjrt, &rt->info);
  // TPUs have no 64-bit floats; XLA's CPU and GPU backends do.
  rt->supports_f64 = strcmp(rt->info.platform, "tpu") != 0;
  bool cpu = strcmp(rt->info.platform, "cpu") == 0;
  if (cpu && !(opts && opts->cpu_memory == TT_CPU_MEMORY_RELEASE))
    rt->host_memory_kept = tt_hostmem_keep();
  if (cpu && !(opts && opts->cpu_attention_xla))
    rt->attention_ffi_target = tt_attention_kernel_register(rt->pjrt);
  int level = opts && opts->op_opt_level_given ? opts->op_opt_level : TT_DEFAULT_OP_OPT_LEVEL;
  TT_GOTO_IF_ERROR(st, tt_pjrt_compile_options_opt_level(level, &rt->op_opts, &rt->op_opts_len),
                   fail);
  TT_GOTO_IF_ERROR(st, tt_bg_create(rt->pjrt, rt->op_opts, rt->op_opts_len, &rt->bg), fail);
  TT_GOTO_IF_ERROR(st, tt_hlo_create(&rt->hlo), fail);
  TT_GOTO_IF_ERROR(st, tt_prog_cache_create(&rt->progs), fail);
  TT_GOTO_IF_ERROR(st, tt_strict_create(rt, &rt->strict), fail);
  TT_GOTO_IF_ERROR(st, tt_fused_create(rt, &rt->fused), fail);
  tt_runtime_pick_executor(rt);
  *out_rt = rt;
  return NULL;
fail:
  tt_runtime_destroy(rt);
  return st;
}

void tt_runtime_destroy(tt_runtime *rt) {
  if (!rt) return;
  if (rt->exec) {
    tt_status st = tt_runtime_synchronize(rt);  // runs a pending fused graph
    tt_status_free(st);
  }
  // A capture left open drops its recording; then no executor holds storages.
  tt_exec_destroy(rt->capture);
  tt_exec_destroy(rt->fused);
  tt_exec_destroy(rt->strict);
  tt_bg_destroy(rt->bg);  // after the plans that held its jobs
  free(rt->op_opts);
  tt_status_free(rt->deferred);
  tt_checks_drop(rt);
  tt_profile_destroy(rt->profile);
  tt_prog_cache_destroy(rt->progs, rt->pjrt);
  tt_hlo_destroy(rt->hlo);
  for (int i = 0; i < TT_MAX_DEVICES; i++) free(rt->generators[i]);
  tt_scalar_cache_deinit(&rt->scalars, rt->pjrt);
  for (int i = 0; i < rt->nfallbacks; i++) free(rt->fallbacks[i].name);
  free(rt->fallbacks);
  free(rt->pending);
  tt_pjrt_destroy(rt->pjrt);
  pthread_mutex_destroy(&rt->mu);
  free(rt);
}

// --- the process-wide runtime ----------------------------------------------------

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static tt_runtime *g_rt;
static tt_status g_err;  // kept: every later call reports the same failure

// A 0/1 setting: *out -1 when unset, else its value; another value is an
// error saying what each means.
static tt_status env_01(const char *name, const char *off, const char *on, int *out) {
  const char *v = getenv(name);
  *out = -1;
  if (!v || !*v) return NULL;
  if (strcmp(v, "0") && strcmp(v, "1"))
    return tt_make_status(TT_INVALID_ARGUMENT, "%s=%s: expected 0 (%s) or 1 (%s)", name, v,
                          off, on);
  *out = *v == '1';
  return NULL;
}

static void create_global(void) {
  tt_runtime_options o = {0};
  o.plugin_path = getenv("TORCHTPU_PLUGIN_PATH");
  if (o.plugin_path && !*o.plugin_path) o.plugin_path = NULL;
  const char *n = getenv("TORCHTPU_CPU_DEVICES");
  o.cpu_device_count = 1;
  if (n && *n) {
    char *end = NULL;
    long v = strtol(n, &end, 10);
    if (*end || v < 1 || v > 1024) {
      g_err = tt_make_status(TT_INVALID_ARGUMENT, "TORCHTPU_CPU_DEVICES=%s: expected "
                             "an integer from 1 to 1024", n);
      return;
    }
    o.cpu_device_count = (int)v;
  }
  int async = -1, keep = -1, attention = -1;
  g_err = env_01("TORCHTPU_CPU_ASYNC", "programs run inline on the launching thread",
                 "asynchronously, on the plugin's threads", &async);
  if (!g_err)
    g_err = env_01("TORCHTPU_CPU_KEEP_MEMORY", "the C library's defaults",
                   "freed host memory is kept for reuse", &keep);
  if (!g_err)
    g_err = env_01("TORCHTPU_CPU_ATTENTION_KERNEL", "attention lowers to XLA's own ops",
                   "attention runs torchtpu's C kernel where the CPU can", &attention);
  if (g_err) return;
  o.cpu_attention_xla = attention == 0;
  const char *level = getenv("TORCHTPU_OP_OPT_LEVEL");
  if (level && *level) {
    o.op_opt_level_given = true;
    if (strcmp(level, "default") == 0) o.op_opt_level = -1;
    else if (level[0] >= '0' && level[0] <= '3' && !level[1]) o.op_opt_level = level[0] - '0';
    else {
      g_err = tt_make_status(TT_INVALID_ARGUMENT, "TORCHTPU_OP_OPT_LEVEL=%s: expected 0 to 3, "
                             "or \"default\" for the plugin's", level);
      return;
    }
  }
  if (async >= 0) o.cpu_launch = async ? TT_CPU_LAUNCH_ASYNC : TT_CPU_LAUNCH_INLINE;
  if (keep >= 0) o.cpu_memory = keep ? TT_CPU_MEMORY_KEEP : TT_CPU_MEMORY_RELEASE;
  g_err = tt_runtime_create(&o, &g_rt);
  if (!g_err) {
    const char *lb = getenv("TPU_LAUNCH_BLOCKING");
    if (lb && strcmp(lb, "1") == 0) g_rt->mode = TT_MODE_DEBUG;
  }
}

tt_status tt_runtime_get(tt_runtime **out_rt) {
  pthread_once(&g_once, create_global);
  *out_rt = g_rt;
  if (g_err)
    return tt_make_status(tt_status_code(g_err), "%s",
                          tt_status_message(g_err));
  return NULL;
}

// --- info, mode, counters ----------------------------------------------------------

void tt_runtime_info_get(tt_runtime *rt, tt_runtime_info *out) {
  memset(out, 0, sizeof *out);
  out->platform = rt->info.platform;
  out->platform_version = rt->info.platform_version;
  out->plugin_path = rt->info.plugin_path;
  out->api_major = rt->info.api_major;
  out->api_minor = rt->info.api_minor;
  out->device_count = rt->info.device_count;
  out->device_kind = rt->info.device_kind;
  out->supports_f64 = rt->supports_f64;
  out->asynchronous = rt->info.asynchronous;
  out->host_memory_kept = rt->host_memory_kept;
  out->cpu_attention_kernel = rt->attention_ffi_target != NULL;
}

void tt_runtime_pick_executor(tt_runtime *rt) {
  if (rt->mode != TT_MODE_FUSED) rt->exec = rt->strict;
  else rt->exec = rt->capture ? rt->capture : rt->fused;
}

void tt_runtime_lower_options(const tt_runtime *rt, bool infer_only,
                              tt_lower_options *out) {
  *out = (tt_lower_options){.infer_only = infer_only,
                            .supports_f64 = rt->supports_f64,
                            .device_checks = rt->device_checks,
                            .attention_ffi_target = rt->attention_ffi_target,
                            .facts = tt_storage_facts_of};
}

void tt_runtime_set_mode(tt_runtime *rt, tt_exec_mode mode) {
  pthread_mutex_lock(&rt->mu);
  if (mode != rt->mode) {
    // Only the executor in use holds pending storages: it runs them before
    // another takes over. The error, if any, waits for the next flush or
    // synchronize (this call returns nothing).
    tt_status st = tt_exec_flush(rt->exec);
    if (st && !rt->deferred) rt->deferred = st;
    else tt_status_free(st);
  }
  rt->mode = mode;
  tt_runtime_pick_executor(rt);
  pthread_mutex_unlock(&rt->mu);
}

tt_exec_mode tt_runtime_mode(tt_runtime *rt) { return rt->mode; }

void tt_runtime_set_device_checks(tt_runtime *rt, bool on) {
  pthread_mutex_lock(&rt->mu);
  rt->device_checks = on;  // part of every signature: plans don't mix
  pthread_mutex_unlock(&rt->mu);
}

tt_status tt_runtime_set_layouts_per_op(tt_runtime *rt, int64_t n) {
  if (n < 0 || n > INT32_MAX)
    return tt_make_status(TT_INVALID_ARGUMENT, "layouts per op %lld: expected a count "
                          "from 1 to %d, or 0 for a program per layout", (long long)n,
                          INT32_MAX);
  pthread_mutex_lock(&rt->mu);
  rt->layouts_per_op = (int32_t)n;
  pthread_mutex_unlock(&rt->mu);
  return NULL;
}

tt_status tt_runtime_set_host_tier(tt_runtime *rt, int64_t compile_after, int64_t max_bytes) {
  if (compile_after < 0 || compile_after > INT32_MAX)
    return tt_make_status(TT_INVALID_ARGUMENT, "compile after %lld calls: expected a count "
                          "from 1 to %d, or 0 to compile at a signature's first call",
                          (long long)compile_after, INT32_MAX);
  if (max_bytes < 0)
    return tt_make_status(TT_INVALID_ARGUMENT, "host tier bound %lld bytes: expected 0 or "
                          "more", (long long)max_bytes);
  pthread_mutex_lock(&rt->mu);
  rt->compile_after = (int32_t)compile_after;
  rt->host_tier_bytes = max_bytes;
  pthread_mutex_unlock(&rt->mu);
  return NULL;
}

void tt_runtime_host_tier(tt_runtime *rt, int64_t *out_compile_after, int64_t *out_max_bytes) {
  pthread_mutex_lock(&rt->mu);
  *out_compile_after = rt->compile_after;
  *out_max_bytes = rt->host_tier_bytes;
  pthread_mutex_unlock(&rt->mu);
}

void tt_runtime_wait_compiles(tt_runtime *rt) {
  pthread_mutex_lock(&rt->mu);
  tt_bg *bg = rt->bg;
  pthread_mutex_unlock(&rt->mu);
  tt_bg_wait_idle(bg);  // not under rt->mu: the worker never takes it
}

void tt_runtime_stop_compiles(tt_runtime *rt) {
  pthread_mutex_lock(&rt->mu);
  tt_bg *bg = rt->bg;
  pthread_mutex_unlock(&rt->mu);
  tt_bg_stop(bg);
}

bool tt_runtime_device_checks(tt_runtime *rt) {
  pthread_mutex_lock(&rt->mu);
  bool on = rt->device_checks;
  pthread_mutex_unlock(&rt->mu);
  return on;
}

void tt_runtime_stats(tt_runtime *rt, tt_stats *out) {
  pthread_mutex_lock(&rt->mu);
  *out = rt->stats;
  tt_prog_cache_usage(rt->progs, &out->program_cache_bytes, &out->program_cache_entries,
                      &out->program_cache_evictions);
  out->compiles_pending = tt_bg_pending(rt->bg);
  pthread_mutex_unlock(&rt->mu);
}

void tt_runtime_reset_peak(tt_runtime *rt) {
  pthread_mutex_lock(&rt->mu);
  rt->stats.peak_bytes_in_use = rt->stats.bytes_in_use;
  pthread_mutex_unlock(&rt->mu);
}

bool tt_runtime_note_fallback(tt_runtime *rt, const char *op_name) {
  pthread_mutex_lock(&rt->mu);
  rt->stats.fallback_calls++;
  bool first = true;
  for (int i = 0; i < rt->nfallbacks; i++) {
    if (strcmp(rt->fallbacks[i].name, op_name) == 0) {
      rt->fallbacks[i].count++;
      first = false;
      break;
    }
  }
  if (first && rt->nfallbacks == rt->cap_fallbacks) {
    int cap = rt->cap_fallbacks ? 2 * rt->cap_fallbacks : 16;
    tt_fallback_count *p = realloc(rt->fallbacks, (size_t)cap * sizeof *p);
    if (p) {
      rt->fallbacks = p;
      rt->cap_fallbacks = cap;
    }
  }
  if (first && rt->nfallbacks < rt->cap_fallbacks) {
    char *name = strdup(op_name);
    if (name) rt->fallbacks[rt->nfallbacks++] = (tt_fallback_count){name, 1};
  }
  pthread_mutex_unlock(&rt->mu);
  return first;
}

int tt_runtime_fallback_counts(tt_runtime *rt, const char **names,
                               int64_t *counts, int cap) {
  pthread_mutex_lock(&rt->mu);
  for (int i = 0; i < rt->nfallbacks && i < cap; i++) {
    names[i] = rt->fallbacks[i].name;
    counts[i] = rt->fallbacks[i].count;
  }
  int n = rt->nfallbacks;
  pthread_mutex_unlock(&rt->mu);
  return n;
}

// --- events ------------------------------------------------------------------------

// Drops events of programs that already finished, so the list stays short.
static tt_status reap_ready(tt_runtime *rt) {
  tt_status first = NULL;
  int kept = 0;
  for (int i = 0; i < rt->npending; i++) {
    tt_pjrt_event *ev = rt->pending[i];
    if (!tt_pjrt_event_is_ready(rt->pjrt, ev)) {
      rt->pending[kept++] = ev;
      continue;
    }
    tt_status st = tt_pjrt_event_await(rt->pjrt, ev);
    if (st && !first) first = st; else tt_status_free(st);
    tt_pjrt_event_destroy(rt->pjrt, ev);
  }
  rt->npending = kept;
  return first;
}

tt_status tt_runtime_track_event(tt_runtime *rt, tt_pjrt_event *ev) {
  if (!ev) return NULL;
  if (rt->mode == TT_MODE_DEBUG) {
    tt_status st = tt_pjrt_event_await(rt->pjrt, ev);
    tt_pjrt_event_destroy(rt->pjrt, ev);
    return st;
  }
  if (rt->npending == rt->cap_pending) {
    TT_RETURN_IF_ERROR(reap_ready(rt));
  }
  if (rt->npending == rt->cap_pending) {
    int cap = rt->cap_pending ? 2 * rt->cap_pending : 64;
    tt_pjrt_event **p = realloc(rt->pending, (size_t)cap * sizeof *p);
    if (!p) {
      // Can't remember it: wait for it instead of losing its error.
      tt_status st = tt_pjrt_event_await(rt->pjrt, ev);
      tt_pjrt_event_destroy(rt->pjrt, ev);
      return st;
    }
    rt->pending = p;
    rt->cap_pending = cap;
  }
  rt->pending[rt->npending++] = ev;
  return NULL;
}

tt_status tt_runtime_synchronize(tt_runtime *rt) {
  pthread_mutex_lock(&rt->mu);
  tt_status first = rt->deferred;  // a flush error with no caller yet
  rt->deferred = NULL;
  tt_status fl = tt_exec_flush(rt->exec);
  if (!first) first = fl;
  else tt_status_free(fl);
  // Take the list so programs launched by other threads meanwhile are kept.
  tt_pjrt_event **evs = rt->pending;
  int n = rt->npending;
  rt->pending = NULL;
  rt->npending = rt->cap_pending = 0;
  pthread_mutex_unlock(&rt->mu);
  for (int i = 0; i < n; i++) {
    tt_status st = tt_pjrt_event_await(rt->pjrt, evs[i]);
    if (st && !first) first = st; else tt_status_free(st);
    tt_pjrt_event_destroy(rt->pjrt, evs[i]);
  }
  free(evs);
  // The programs are done: their device-side checks are read now.
  pthread_mutex_lock(&rt->mu);
  tt_status ck = tt_checks_read(rt);
  pthread_mutex_unlock(&rt->mu);
  if (!first) first = ck;
  else tt_status_free(ck);
  return first;
}

tt_status tt_runtime_flush(tt_runtime *rt) {
  pthread_mutex_lock(&rt->mu);
  tt_status st = rt->deferred;
  rt->deferred = NULL;
  tt_status fl = tt_exec_flush(rt->exec);
  if (!st) st = fl;
  else tt_status_free(fl);
  pthread_mutex_unlock(&rt->mu);
  return st;
}

// --- generators ----------------------------------------------------------------------

tt_status tt_generator_create(tt_runtime *rt, uint64_t seed,
                              tt_generator **out_gen) {
  tt_generator *g = calloc(1, sizeof *g);
  if (!g) return tt_make_status(TT_RESOURCE_EXHAUSTED, "generator: out of memory");
  g->rt = rt;
  g->seed = seed;
  *out_gen = g;
  return NULL;
}

void tt_generator_destroy(tt_generator *g) { free(g); }

void tt_generator_set_state(tt_generator *g, uint64_t seed, uint64_t offset) {
  g->seed = seed;
  g->offset = offset;
}

void tt_generator_get_state(const tt_generator *g, uint64_t *seed,
                            uint64_t *offset) {
  *seed = g->seed;
  *offset = g->offset;
}

tt_generator *tt_runtime_default_generator_locked(tt_runtime *rt, int device) {
  if (device < 0 || device >= TT_MAX_DEVICES) return NULL;
  if (!rt->generators[device]) {
    tt_generator *g = calloc(1, sizeof *g);
    if (g) {
      g->rt = rt;
      g->seed = 67280421310721ull;  // PyTorch's default seed
    }
    rt->generators[device] = g;
  }
  return rt->generators[device];
}

tt_generator *tt_runtime_call_generator(tt_runtime *rt, const tt_op_call *call,
                                        int arg) {
  if (arg >= 0 && arg < call->nargs &&
      call->args[arg].kind == TT_VALUE_GENERATOR && call->args[arg].u.gen)
    return call->args[arg].u.gen;
  return tt_runtime_default_generator_locked(rt, call->device);
}

tt_generator *tt_runtime_default_generator(tt_runtime *rt, int device) {
  pthread_mutex_lock(&rt->mu);
  tt_generator *g = tt_runtime_default_generator_locked(rt, device);
  pthread_mutex_unlock(&rt->mu);
  return g;
}
