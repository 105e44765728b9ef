// The persistent compilation cache and the recompile explainer, without
// PyTorch: a runtime writes an op's program to a fresh directory, a second
// runtime loads it instead of compiling, a damaged file is rejected and
// rewritten; cache entries and recompile causes are reported.
#include <dirent.h>
#include <sys/stat.h>
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
  if (rt && dir) CHECK_OK(tt_runtime_set_cache_dir(rt, dir, 0));
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
  tt_op_call call = {tt_op_lookup("aten::exp"), 0, TT_F32, &arg, 1, &dest, 1, false};
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

// --- security: ownership, permissions, special files, forged entries --------------

static void sh(const char *fmt, const char *dir) {
  char cmd[1400];
  snprintf(cmd, sizeof cmd, fmt, dir, dir, dir, dir);
  CHECK(system(cmd) == 0, "%s", cmd);
}

// Runs exp [2, 3] with `dir` as the cache; returns the runtime's stats.
static tt_stats run_in(const char *dir) {
  tt_stats st = {0};
  tt_runtime *rt = make_runtime(dir);
  if (!rt) return st;
  run_exp(rt, 2, 3);
  tt_runtime_stats(rt, &st);
  tt_runtime_destroy(rt);
  return st;
}

static void test_security(const char *dir) {
  // A fresh directory is made 0700, its key 0600.
  char sub[600], path[700];
  snprintf(sub, sizeof sub, "%s/fresh/cache", dir);
  tt_stats st = run_in(sub);
  CHECK(st.disk_writes == 1, "writes %lld", (long long)st.disk_writes);
  struct stat sb;
  CHECK(stat(sub, &sb) == 0 && (sb.st_mode & 0777) == 0700, "dir mode %o", sb.st_mode & 0777);
  snprintf(path, sizeof path, "%s/.ttkey", sub);
  CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600 && sb.st_size == 32,
        "key mode %o size %lld", sb.st_mode & 0777, (long long)sb.st_size);

  // Warm: a hit. Then a FIFO in place of the entry: refused, not waited on.
  st = run_in(sub);
  CHECK(st.disk_hits == 1 && st.compiles == 0, "hits %lld", (long long)st.disk_hits);
  sh("cd %s && for f in *.ttexe; do rm $f && mkfifo $f; done", sub);
  st = run_in(sub);
  CHECK(st.disk_rejected == 1 && st.compiles == 1, "fifo: rejected %lld compiles %lld",
        (long long)st.disk_rejected, (long long)st.compiles);

  // An entry made writable by others is refused.
  sh("cd %s && rm -f *.ttexe", sub);
  run_in(sub);
  sh("chmod 666 %s/*.ttexe", sub);
  st = run_in(sub);
  CHECK(st.disk_rejected == 1 && st.disk_hits == 0, "0666 entry: rejected %lld hits %lld",
        (long long)st.disk_rejected, (long long)st.disk_hits);

  // A symlink in place of an entry is refused.
  sh("cd %s && for f in *.ttexe; do mv $f ../target && ln -s ../target $f; done", sub);
  st = run_in(sub);
  CHECK(st.disk_rejected == 1 && st.disk_hits == 0, "symlink: rejected %lld hits %lld",
        (long long)st.disk_rejected, (long long)st.disk_hits);

  // A different key (another user's, or a forger's): every entry is refused.
  run_in(sub);  // rewritten
  sh("head -c 32 /dev/zero > %s/.ttkey.new && chmod 600 %s/.ttkey.new && "
     "mv %s/.ttkey.new %s/.ttkey", sub);
  st = run_in(sub);
  CHECK(st.disk_rejected == 1 && st.disk_hits == 0, "foreign key: rejected %lld",
        (long long)st.disk_rejected);

  // A key readable by others, and a directory writable by others: the cache
  // is refused when set.
  sh("chmod 644 %s/.ttkey", sub);
  tt_runtime *rt = make_runtime(NULL);
  if (!rt) return;
  tt_status s = tt_runtime_set_cache_dir(rt, sub, 0);
  CHECK(s && strstr(tt_status_message(s), "0644"), "0644 key: %s",
        s ? tt_status_message(s) : "accepted");
  tt_status_free(s);
  sh("chmod 600 %s/.ttkey && chmod 777 %s", sub);
  s = tt_runtime_set_cache_dir(rt, sub, 0);
  CHECK(s && strstr(tt_status_message(s), "writable by others"), "0777 dir: %s",
        s ? tt_status_message(s) : "accepted");
  tt_status_free(s);
  sh("chmod 700 %s", sub);
  CHECK_OK(tt_runtime_set_cache_dir(rt, sub, 0));
  tt_runtime_destroy(rt);
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

  // 4. An unusable directory is refused when set: the runtime compiles
  //    without it.
  char bad[600];
  snprintf(bad, sizeof bad, "%s/%s", only_entry(dir, &nfiles), "sub");
  rt = make_runtime(NULL);
  if (!rt) return 1;
  tt_status s = tt_runtime_set_cache_dir(rt, bad, 0);
  CHECK(s && strstr(tt_status_message(s), "sub"), "unusable dir: %s",
        s ? tt_status_message(s) : "accepted");
  tt_status_free(s);
  run_exp(rt, 2, 3);
  tt_runtime_stats(rt, &st);
  CHECK(st.compiles == 1 && st.disk_errors == 0 && st.disk_writes == 0,
        "compiles %lld errors %lld", (long long)st.compiles, (long long)st.disk_errors);
  tt_runtime_destroy(rt);

  test_security(dir);

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  (void)!system(cmd);
  printf("test_disk_cache: %s\n", check_failures ? "FAILED" : "ok");
  return check_exit_code();
}
