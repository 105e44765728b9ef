// Compiling programs: the program cache in front of the plugin's compiler.
// Every executor (eager, fused) compiles through tt_runtime_compile, so the
// cache and its counters see every program.
#include <time.h>

#include "runtime/cache.h"
#include "runtime/runtime.h"

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

tt_status tt_runtime_compile(tt_runtime *rt, const char *text, size_t len,
                             tt_pjrt_exe **out) {
  rt->stats.cache_requests++;
  *out = tt_prog_cache_find(rt->progs, text, len);
  if (*out) {
    rt->stats.cache_hits++;
    return NULL;
  }
  double t0 = now_seconds();
  TT_RETURN_IF_ERROR(tt_pjrt_compile(rt->pjrt, text, len, out));
  rt->stats.compiles++;
  rt->stats.compile_seconds += now_seconds() - t0;
  tt_status st = tt_prog_cache_insert(rt->progs, text, len, *out);
  if (st) {
    tt_pjrt_exe_destroy(rt->pjrt, *out);
    *out = NULL;
  }
  return st;
}

