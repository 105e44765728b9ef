// The persistent compilation cache and the recompile explainer, without
// PyTorch: a runtime writes an op's program to a fresh directory, a second
// runtime loads it instead of compiling, a damaged file is rejected and
// rewritten; cache entries and recompile causes are reported.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "torchtpu.h"
#include "check.h"

static tt_runtime *make_runtime(const char *dir) {
  tt_runtime *rt = NULL;
  tt_runtime_options o = {.plugin_path = getenv("TORCHTPU_PLUGIN_PATH"),
                          .cpu_device_count = 1};
  CHECK_OK(tt_runtime_create(&o, &rt));
  if (rt) CHECK_OK(tt_runtime_set_cache_dir(rt, dir, 0));
  return rt;
}

// exp of a fresh [r, c] f32 tensor (zeros); frees the result.
static void run_exp(tt_runtime *rt, int64_t r, int64_t c) {
  int64_t sizes[2] = {r, c}, strides[2] = {c, 1};
  tt_storage *s = NULL;
  CHECK_OK(tt_storage_create(rt, 0, r * c * 4, &s));
  if (!s) return;
  tt_value arg = {.kind = TT_VALUE_TENSOR};
  arg.u.tensor = (tt_tensor){s, TT_F32, 2, sizes, strides, 0};
  tt_dest dest = {-1, -1};
  tt_op_call call = {tt_op_lookup("aten::exp"), 0, TT_F32, &arg, 1, &dest, 1};
  tt_op_result res[1];
  int32_t n = 0;
  CHECK_OK(tt_op_run(rt, &call, res, 1, &n));
  CHECK(n == 1);
  if (n == 1) {
    float host[64];
    CHECK_OK(tt_tensor_download(rt, &(tt_tensor){res[0].storage, TT_F32, 2, sizes, strides, 0},
                                host));
    CHECK(host[0] == 1.0f, "exp(0) = %g", host[0]);
    tt_storage_destroy(res[0].storage);
  }
  tt_storage_destroy(s);
}

// The path of the only .ttexe file in dir (static buffer), or NULL.
static const char *only_entry(const char *dir, int *count) {
  static char path[512];
  *count = 0;
  DIR *d = opendir(dir);
  if (!d) return NULL;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n > 6 && strcmp(e->d_name + n - 6, ".ttexe") == 0) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      (*count)++;
    }
  }
  closedir(d);
  return *count ? path : NULL;
}

int main(void) {
  char dir[] = "/tmp/tt-disk-cache-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  tt_stats st;

  // 1. A cold runtime compiles and writes.
  tt_runtime *rt = make_runtime(dir);
  if (!rt) return 1;
  tt_runtime_set_explain_recompiles(rt, true);
  run_exp(rt, 2, 3);
  run_exp(rt, 4, 3);  // a new shape: a recompile, explained
  tt_runtime_stats(rt, &st);
  CHECK(st.compiles == 2 && st.disk_writes == 2 && st.disk_misses == 2,
        "compiles %lld writes %lld misses %lld", (long long)st.compiles,
        (long long)st.disk_writes, (long long)st.disk_misses);
  CHECK(st.recompiles == 1, "recompiles %lld", (long long)st.recompiles);
  const char *names[16];
  int64_t counts[16];
  int nc = tt_runtime_recompile_causes(rt, names, counts, 16);
  bool shape = false;
  for (int i = 0; i < nc && i < 16; i++)
    shape = shape || (strcmp(names[i], "shape") == 0 && counts[i] == 1);
  CHECK(shape, "one compile caused by a shape change");
  char summary[1024];
  size_t need = tt_runtime_recompile_summary(rt, summary, sizeof summary);
  CHECK(need > 0 && strstr(summary, "aten::exp"), "summary: %s", summary);
  tt_cache_entry_info entries[4];
  int ne = tt_runtime_cache_entries(rt, entries, 4);
  CHECK(ne == 2 && strcmp(entries[0].label, "aten::exp") == 0 &&
        strlen(entries[0].key) == 32 && !entries[0].from_disk,
        "%d entries, first %s", ne, ne ? entries[0].label : "-");
  tt_runtime_destroy(rt);

  // 2. A warm runtime loads instead of compiling.
  rt = make_runtime(dir);
  if (!rt) return 1;
  run_exp(rt, 2, 3);
  tt_runtime_stats(rt, &st);
  CHECK(st.compiles == 0 && st.disk_hits == 1, "compiles %lld hits %lld",
        (long long)st.compiles, (long long)st.disk_hits);
  ne = tt_runtime_cache_entries(rt, entries, 4);
  CHECK(ne == 1 && entries[0].from_disk);
  tt_runtime_destroy(rt);

  // 3. Damaged entries are rejected, recompiled and rewritten.
  int nfiles = 0;
  only_entry(dir, &nfiles);
  CHECK(nfiles == 2, "%d files", nfiles);
  for (int round = 0; round < 2; round++) {
    char cmd[1200];
    // Cut every file to 100 bytes (round 0), then flip bytes at its end.
    snprintf(cmd, sizeof cmd,
             round == 0 ? "for f in %s/*.ttexe; do truncate -s 100 $f; done"
                        : "for f in %s/*.ttexe; do printf 'XXXXXXXX' | dd of=$f bs=1 "
                          "seek=$(($(stat -c %%s $f) - 8)) conv=notrunc 2>/dev/null; done",
             dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    rt = make_runtime(dir);
    if (!rt) return 1;
    run_exp(rt, 2, 3);
    tt_runtime_stats(rt, &st);
    CHECK(st.disk_rejected == 1 && st.compiles == 1 && st.disk_writes == 1 &&
              st.disk_errors == 0,
          "round %d: rejected %lld compiles %lld writes %lld errors %lld", round,
          (long long)st.disk_rejected, (long long)st.compiles,
          (long long)st.disk_writes, (long long)st.disk_errors);
    tt_runtime_destroy(rt);
  }

  // 4. An unusable directory only counts errors.
  char bad[600];
  snprintf(bad, sizeof bad, "%s/%s", only_entry(dir, &nfiles), "sub");
  rt = make_runtime(bad);
  if (!rt) return 1;
  run_exp(rt, 2, 3);
  tt_runtime_stats(rt, &st);
  CHECK(st.compiles == 1 && st.disk_errors == 1, "compiles %lld errors %lld",
        (long long)st.compiles, (long long)st.disk_errors);
  tt_runtime_destroy(rt);

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  (void)!system(cmd);
  printf("test_disk_cache: %s\n", check_failures ? "FAILED" : "ok");
  return check_exit_code();
}
