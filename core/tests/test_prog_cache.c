// The in-memory program cache bounded in bytes (LRU): 60 shapes of add run
// under a bound that holds a handful of programs; the cache stays under it,
// evicts the least recently used, and every signature plan left points at a
// live executable (ASan would catch a use after free): early shapes run again
// correctly (their plans went with their programs: lowered and compiled
// again), recent ones hit their plans. A pinned executable is never evicted.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "op_helpers.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"

// x + 2 x for an [r, 3] tensor of 1..3r; checks the values.
static void run_add(tt_runtime *rt, int64_t r) {
  float host[3 * 80], out[3 * 80];  // r <= 80
  for (int i = 0; i < 3 * r; i++) host[i] = (float)(i + 1);
  dense x;
  make_dense(rt, &x, r, 3, host);
  if (!x.s) return;
  tt_storage *y = add_ok(rt, &x.t, &x.t, 2.0);
  if (y) {
    tt_tensor yt = {y, TT_F32, 2, x.sizes, x.strides, 0};
    CHECK_OK(tt_tensor_download(rt, &yt, out));
    for (int i = 0; i < 3 * r; i++)
      CHECK(out[i] == 3.0f * host[i], "r=%lld: [%d] = %g", (long long)r, i, out[i]);
    tt_storage_destroy(y);
  }
  tt_storage_destroy(x.s);
}

int main(void) {
  tt_runtime *rt = NULL;
  tt_runtime_options o = {.plugin_path = getenv("TORCHTPU_PLUGIN_PATH"), .cpu_device_count = 1};
  CHECK_OK(tt_runtime_create(&o, &rt));
  if (!rt) return 1;

  // Size one program first, then bound the cache at about five of them.
  run_add(rt, 1);
  int64_t bytes = 0, entries = 0, evictions = 0;
  CHECK_OK(tt_runtime_set_program_cache_bytes(rt, (int64_t)1 << 40));
  tt_prog_cache_usage(rt->progs, &bytes, &entries, &evictions);
  CHECK(entries == 1 && bytes > 0, "entries %lld bytes %lld", (long long)entries, (long long)bytes);
  const int64_t bound = 5 * bytes + bytes / 2;
  CHECK_OK(tt_runtime_set_program_cache_bytes(rt, bound));

  // A pinned program survives everything below.
  static const char kPinned[] =
      "module @pinned {\n"
      "  func.func public @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
      "    %0 = \"stablehlo.negate\"(%x) : (tensor<2xf32>) -> tensor<2xf32>\n"
      "    return %0 : tensor<2xf32>\n"
      "  }\n"
      "}\n";
  tt_pjrt_exe *pinned = NULL;
  pthread_mutex_lock(&rt->mu);
  CHECK_OK(tt_runtime_compile(rt, kPinned, strlen(kPinned), &pinned));
  if (pinned) tt_prog_cache_pin(rt->progs, pinned);
  pthread_mutex_unlock(&rt->mu);

  for (int64_t r = 2; r <= 60; r++) {
    run_add(rt, r);
    tt_prog_cache_usage(rt->progs, &bytes, &entries, &evictions);
    CHECK(bytes <= bound + bound / 4, "r=%lld: %lld bytes over the bound %lld",
          (long long)r, (long long)bytes, (long long)bound);
  }
  CHECK(evictions >= 50, "evictions %lld", (long long)evictions);
  CHECK(entries <= 7, "entries %lld", (long long)entries);

  tt_stats st0, st1;
  tt_runtime_stats(rt, &st0);
  run_add(rt, 60);  // recent: its plan is still there
  tt_runtime_stats(rt, &st1);
  CHECK(st1.sig_hits == st0.sig_hits + 1 && st1.compiles == st0.compiles,
        "recent shape: sig hits +%lld compiles +%lld", (long long)(st1.sig_hits - st0.sig_hits),
        (long long)(st1.compiles - st0.compiles));
  run_add(rt, 3);  // evicted long ago: compiled again, runs right
  tt_runtime_stats(rt, &st0);
  CHECK(st0.compiles == st1.compiles + 1, "old shape: compiles +%lld",
        (long long)(st0.compiles - st1.compiles));

  CHECK(pinned && tt_prog_cache_find(rt->progs, kPinned, strlen(kPinned)) == pinned,
        "the pinned program was evicted");
  tt_prog_cache_unpin(rt->progs, pinned);
  for (int64_t r = 61; r <= 70; r++) run_add(rt, r);
  CHECK(tt_prog_cache_find(rt->progs, kPinned, strlen(kPinned)) == NULL,
        "unpinned, the oldest program is evicted");

  // Unbounded again: nothing more is evicted.
  CHECK_OK(tt_runtime_set_program_cache_bytes(rt, 0));
  tt_prog_cache_usage(rt->progs, &bytes, &entries, &evictions);
  int64_t before = evictions;
  for (int64_t r = 71; r <= 76; r++) run_add(rt, r);
  tt_prog_cache_usage(rt->progs, &bytes, &entries, &evictions);
  CHECK(evictions == before, "unbounded evicted %lld", (long long)(evictions - before));

  tt_runtime_destroy(rt);
  printf("test_prog_cache: %s\n", check_failures ? "FAILED" : "ok");
  return check_exit_code();
}
