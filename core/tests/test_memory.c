// Memory tests without PyTorch, on the real XLA CPU plugin: the list of live
// buffers a memory snapshot reads (tt_runtime_list_buffers) against the
// memory counters, and the per-process limit (tt_runtime_set_memory_limit)
// refusing a storage, and an op's result, that would pass it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu.h"
#include "check.h"
#include "op_helpers.h"

// The listed buffers' bytes; *found: whether `s` is among them.
static int64_t listed_bytes(tt_runtime *rt, const tt_storage *s, bool *found,
                            int64_t *in_use) {
  tt_buffer_info bufs[16];
  int64_t n = 0, sum = 0;
  tt_runtime_list_buffers(rt, bufs, 16, &n, in_use);
  CHECK(n <= 16, "%lld buffers", (long long)n);
  *found = false;
  for (int64_t i = 0; i < n && i < 16; i++) {
    sum += bufs[i].bytes;
    if (bufs[i].storage == s) *found = true;
    CHECK(bufs[i].device == 0);
  }
  return sum;
}

static void test_list_buffers(tt_runtime *rt) {
  float h[6] = {1, 2, 3, 4, 5, 6};
  dense a, b;
  make_dense(rt, &a, 2, 3, h);
  make_dense(rt, &b, 3, 5, NULL);  // no buffer until written
  bool found = false;
  int64_t in_use = -1;
  int64_t sum = listed_bytes(rt, a.s, &found, &in_use);
  tt_stats st;
  tt_runtime_stats(rt, &st);
  CHECK(found && sum == 24 && in_use == 24 && st.bytes_in_use == 24,
        "listed %lld, in use %lld", (long long)sum, (long long)in_use);
  listed_bytes(rt, b.s, &found, &in_use);
  CHECK(!found);

  tt_storage *c = add_ok(rt, &a.t, &a.t, 1.0);  // a fresh result: listed
  sum = listed_bytes(rt, c, &found, &in_use);
  CHECK(found && sum == 48 && in_use == 48);
  // Too little room: the count says how many there are.
  tt_buffer_info one[1];
  int64_t n = 0;
  tt_runtime_list_buffers(rt, one, 1, &n, &in_use);
  CHECK(n == 2 && one[0].storage == c, "n %lld", (long long)n);  // newest first

  tt_storage_destroy(c);
  tt_storage_destroy(a.s);
  tt_storage_destroy(b.s);
  sum = listed_bytes(rt, a.s, &found, &in_use);
  CHECK(sum == 0 && in_use == 0);
}

static void test_memory_limit(tt_runtime *rt) {
  float h[6] = {1, 2, 3, 4, 5, 6};
  dense a;
  make_dense(rt, &a, 2, 3, h);  // 24 bytes in use
  int64_t limit = 0, refused0 = 0, refused = 0;
  tt_runtime_memory_limit(rt, &limit, &refused0);
  CHECK(limit == 0);
  tt_runtime_set_memory_limit(rt, 40);

  tt_storage *s = NULL;
  CHECK_OK(tt_storage_create(rt, 0, 16, &s));  // 24 + 16 <= 40: room
  tt_storage_destroy(s);
  s = NULL;
  tt_status st = tt_storage_create(rt, 0, 17, &s);
  CHECK(st && !s && tt_status_code(st) == TT_RESOURCE_EXHAUSTED);
  CHECK(st && strstr(tt_status_message(st), "limit of") &&
        strstr(tt_status_message(st), "(40 bytes"), "%s", st ? tt_status_message(st) : "");
  tt_status_free(st);

  // An op's 24-byte result does not fit either: refused, nothing kept.
  tt_storage *c = add(rt, &a.t, &a.t, 1.0, &st);
  CHECK(st && !c && tt_status_code(st) == TT_RESOURCE_EXHAUSTED);
  tt_status_free(st);
  tt_stats stats;
  tt_runtime_stats(rt, &stats);
  CHECK(stats.bytes_in_use == 24, "%lld", (long long)stats.bytes_in_use);
  tt_runtime_memory_limit(rt, &limit, &refused);
  CHECK(limit == 40 && refused - refused0 == 2);

  tt_runtime_set_memory_limit(rt, 0);  // no limit
  c = add_ok(rt, &a.t, &a.t, 1.0);
  float got[6];
  tt_tensor ct = {c, TT_F32, 2, a.sizes, a.strides, 0};
  if (c) CHECK_OK(tt_tensor_download(rt, &ct, got));
  CHECK(c && got[5] == 12.0f);
  tt_storage_destroy(c);
  tt_storage_destroy(a.s);
}

int main(void) {
  tt_runtime *rt = NULL;
  tt_runtime_options o = {.plugin_path = getenv("TORCHTPU_PLUGIN_PATH"),
                          .cpu_device_count = 1};
  CHECK_OK(tt_runtime_create(&o, &rt));
  if (!rt) return 1;
  test_list_buffers(rt);
  test_memory_limit(rt);
  CHECK_OK(tt_runtime_synchronize(rt));
  tt_runtime_destroy(rt);
  printf("test_memory: %s\n", check_failures ? "FAILED" : "ok");
  return check_exit_code();
}
