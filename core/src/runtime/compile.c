// Compiling programs: the program cache in front of the plugin's compiler.
// Every executor (eager, fused) compiles through tt_runtime_compile, so the
// cache and its counters see every program.
//
// A miss in memory looks in the persistent directory (disk_cache.c) when one
// is set, then compiles; a compile is explained (explain.c) and written to
// the directory. Disk trouble never fails the call: it is counted in
// tt_stats and the program is compiled as usual.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/compile.h"

#include "base/buf.h"
#include "runtime/cache.h"
#include "runtime/disk_cache.h"
#include "runtime/executor.h"
#include "runtime/explain.h"
#include "runtime/runtime.h"

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// --- the compile environment ----------------------------------------------------------------

// Hash of what, besides the text, decides the executable: the compile
// options bytes, the plugin's identity and XLA_FLAGS (the plugin reads its
// debug options from it: a persistent entry compiled under other flags was
// reused before). Computed once (rt->mu held).
static tt_status compile_env(tt_runtime *rt, const uint64_t **out) {
  *out = tt_prog_cache_env(rt->progs);
  if (*out) return NULL;
  void *opts = NULL;
  size_t opts_len = 0;
  TT_RETURN_IF_ERROR(tt_pjrt_compile_options(&opts, &opts_len));
  const char *flags = getenv("XLA_FLAGS");
  tt_buf b;
  tt_buf_init(&b);
  tt_buf_append_i64(&b, (int64_t)opts_len);
  tt_buf_append(&b, opts, opts_len);
  tt_buf_printf(&b, "|%s|%s|%d.%d|%d|%s|%s", rt->info.platform,
                rt->info.platform_version, rt->info.api_major,
                rt->info.api_minor, rt->info.device_count,
                rt->info.device_kind ? rt->info.device_kind : "", flags ? flags : "");
  free(opts);
  if (!tt_buf_ok(&b)) {
    tt_buf_deinit(&b);
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "compile cache: out of memory");
  }
  uint64_t env[2];
  tt_cache_env_hash(b.data, b.len, env);
  tt_buf_deinit(&b);
  tt_prog_cache_set_env(rt->progs, env);
  *out = tt_prog_cache_env(rt->progs);
  return NULL;
}

// --- compiling -------------------------------------------------------------------------------

// Counts, explains and writes to disk a program compiled `seconds` ago
// (rt->mu held); fills meta's size.
static void note_compiled(tt_runtime *rt, const char *text, size_t len,
                          tt_prog_meta *meta, tt_pjrt_exe *exe) {
  rt->stats.compiles++;
  rt->stats.compile_seconds += meta->seconds;
  tt_explain *x = tt_prog_cache_explain(rt->progs);
  if (tt_explain_compile(x, meta->label, text, len, meta->seconds) != TT_CAUSE_NEW_OP)
    rt->stats.recompiles++;
  tt_disk_cache *disk = tt_prog_cache_disk(rt->progs);
  if (disk)
    meta->exe_bytes = (int64_t)tt_disk_cache_store(disk, rt->pjrt, &meta->key, text, len, exe,
                                                   &rt->stats);
}

// Loads `text` from disk into *out (NULL when the directory has none);
// fills meta (rt->mu held).
static void load_from_disk(tt_runtime *rt, const char *text, size_t len,
                           tt_prog_meta *meta, tt_pjrt_exe **out) {
  *out = NULL;
  tt_disk_cache *disk = tt_prog_cache_disk(rt->progs);
  double t0 = now_seconds();
  size_t exe_bytes = 0;
  if (disk && tt_disk_cache_load(disk, rt->pjrt, &meta->key, text, len,
                                 &rt->stats, out, &exe_bytes)) {
    meta->from_disk = true;
    meta->exe_bytes = (int64_t)exe_bytes;
    meta->seconds = now_seconds() - t0;
  }
}

// Loads `text` from disk or compiles it; fills meta (rt->mu held).
// `opts` NULL: the client's single-device options.
static tt_status load_or_compile(tt_runtime *rt, const char *text, size_t len,
                                 const void *opts, size_t opts_len,
                                 tt_prog_meta *meta, tt_pjrt_exe **out) {
  load_from_disk(rt, text, len, meta, out);
  if (*out) return NULL;
  double t0 = now_seconds();
  TT_RETURN_IF_ERROR(opts ? tt_pjrt_compile_with_options(rt->pjrt, text, len,
                                                         opts, opts_len, out)
                          : tt_pjrt_compile(rt->pjrt, text, len, out));
  meta->seconds = now_seconds() - t0;
  note_compiled(rt, text, len, meta, *out);
  return NULL;
}

// The key and label of `text` (rt->mu held).
static tt_status make_meta(tt_runtime *rt, const char *text, size_t len, char *label,
                           size_t label_cap, tt_prog_meta *meta) {
  const uint64_t *env = NULL;
  TT_RETURN_IF_ERROR(compile_env(rt, &env));
  tt_explain_label(tt_prog_cache_explain(rt->progs), text, len, label, label_cap);
  *meta = (tt_prog_meta){.label = label};
  tt_cache_key_make(env, text, len, &meta->key);
  return NULL;
}

// Every executable enters the cache here (compiled, loaded from disk or
// adopted from the background compiler): one whose module lets parameters
// alias results is marked so, or PJRT would donate every aliased argument
// of its launches, wanted or not (tt_pjrt_execute donates only what it is
// told to for a marked one).
static tt_status insert(tt_runtime *rt, const char *text, size_t len, tt_prog_meta *meta,
                        tt_pjrt_exe **out) {
  static const char kAlias[] = "tf.aliasing_output";
  if (memmem(text, len, kAlias, sizeof kAlias - 1)) tt_pjrt_exe_set_aliasing(*out);
  tt_status st = tt_prog_cache_insert(rt->progs, text, len, *out, meta);
  if (st) {  // still ours
    tt_pjrt_exe_destroy(rt->pjrt, *out);
    *out = NULL;
  }
  return st;
}

static tt_status compile_cached(tt_runtime *rt, const char *text, size_t len,
                                const void *opts, size_t opts_len,
                                tt_pjrt_exe **out) {
  rt->stats.cache_requests++;
  *out = tt_prog_cache_find(rt->progs, text, len);
  if (*out) {
    rt->stats.cache_hits++;
    return NULL;
  }
  char label[64];
  tt_prog_meta meta;
  TT_RETURN_IF_ERROR(make_meta(rt, text, len, label, sizeof label, &meta));
  TT_RETURN_IF_ERROR(load_or_compile(rt, text, len, opts, opts_len, &meta, out));
  return insert(rt, text, len, &meta, out);
}

// A lookup like compile_cached's (a request; a memory miss is one disk
// lookup, hit or miss), without the compile.
tt_status tt_runtime_find_compiled(tt_runtime *rt, const char *text, size_t len,
                                   tt_pjrt_exe **out) {
  rt->stats.cache_requests++;
  *out = tt_prog_cache_find(rt->progs, text, len);
  if (*out) {
    rt->stats.cache_hits++;
    return NULL;
  }
  if (!tt_prog_cache_disk(rt->progs)) return NULL;
  char label[64];
  tt_prog_meta meta;
  TT_RETURN_IF_ERROR(make_meta(rt, text, len, label, sizeof label, &meta));
  load_from_disk(rt, text, len, &meta, out);
  if (!*out) return NULL;
  return insert(rt, text, len, &meta, out);
}

// Not a lookup: the signature's find_compiled was its request.
tt_status tt_runtime_adopt_compiled(tt_runtime *rt, const char *text, size_t len,
                                    tt_pjrt_exe *exe, double seconds, tt_pjrt_exe **out) {
  *out = tt_prog_cache_find(rt->progs, text, len);
  if (*out) {  // compiled meanwhile for another signature with the same program
    tt_pjrt_exe_destroy(rt->pjrt, exe);
    return NULL;
  }
  char label[64];
  tt_prog_meta meta;
  tt_status st = make_meta(rt, text, len, label, sizeof label, &meta);
  if (st) {
    tt_pjrt_exe_destroy(rt->pjrt, exe);
    return st;
  }
  meta.seconds = seconds;
  rt->stats.background_compiles++;
  note_compiled(rt, text, len, &meta, exe);
  *out = exe;
  return insert(rt, text, len, &meta, out);
}

tt_status tt_runtime_compile_op(tt_runtime *rt, const char *text, size_t len, bool small,
                                tt_pjrt_exe **out) {
  if (!small) return compile_cached(rt, text, len, NULL, 0, out);
  return compile_cached(rt, text, len, rt->op_opts, rt->op_opts_len, out);
}

tt_status tt_runtime_compile(tt_runtime *rt, const char *text, size_t len,
                             tt_pjrt_exe **out) {
  return compile_cached(rt, text, len, NULL, 0, out);
}

tt_status tt_runtime_compile_with_options(tt_runtime *rt, const char *text,
                                          size_t len, const void *opts,
                                          size_t opts_len, tt_pjrt_exe **out) {
  return compile_cached(rt, text, len, opts, opts_len, out);
}

// --- public API -------------------------------------------------------------------------------

tt_status tt_runtime_set_cache_dir(tt_runtime *rt, const char *dir,
                                   int64_t max_bytes) {
  pthread_mutex_lock(&rt->mu);
  tt_disk_cache *d = NULL;
  const uint64_t *env = NULL;
  tt_status st = NULL;
  if (dir && *dir) {
    st = compile_env(rt, &env);
    if (!st) st = tt_disk_cache_create(dir, max_bytes, env, &d);
  }
  if (!st) tt_prog_cache_set_disk(rt->progs, d);
  pthread_mutex_unlock(&rt->mu);
  return st ? tt_status_annotate(st, "cache dir %s", dir) : NULL;
}

// Every executor lets go of an executable before the program cache frees it.
static void forget_everywhere(void *ctx, const tt_pjrt_exe *exe) {
  tt_runtime *rt = ctx;
  tt_exec_forget_exe(rt->strict, exe);
  tt_exec_forget_exe(rt->fused, exe);
}

tt_status tt_runtime_set_program_cache_bytes(tt_runtime *rt, int64_t max_bytes) {
  if (max_bytes < 0)
    return tt_make_status(TT_INVALID_ARGUMENT, "program cache bound %lld: expected "
                          "a size in bytes, 0 for no bound", (long long)max_bytes);
  pthread_mutex_lock(&rt->mu);
  tt_prog_cache_set_bound(rt->progs, rt->pjrt, max_bytes, forget_everywhere, rt);
  pthread_mutex_unlock(&rt->mu);
  return NULL;
}

int tt_runtime_cache_entries(tt_runtime *rt, tt_cache_entry_info *out,
                             int cap) {
  pthread_mutex_lock(&rt->mu);
  int n = tt_prog_cache_entries(rt->progs, out, cap);
  pthread_mutex_unlock(&rt->mu);
  return n;
}
