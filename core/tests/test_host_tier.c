// The host tier and the background compiler without PyTorch: a cold
// signature answers TT_RUN_ON_HOST until its program, compiled on the
// worker thread from its compile_after-th call, is ready; then it runs on
// the device with the right values. Calls without host_ok, and calls past
// the size bound, compile at once. The worker is stopped with jobs queued,
// and memory returns to zero.
#include <stdio.h>
#include <stdlib.h>

#include "torchtpu.h"
#include "check.h"
#include "op_helpers.h"

// a + alpha * b with host_ok set: the status, and the result when it ran.
static tt_status add_host_ok(tt_runtime *rt, const tt_tensor *a, const tt_tensor *b,
                             tt_storage **out) {
  tt_value args[3] = {tensor_value(a), tensor_value(b), scalar_value(1.0)};
  tt_dest dest = {-1, -1};
  tt_op_call call = {tt_op_lookup("aten::add.Tensor"), 0, TT_F32, args, 3, &dest, 1, true};
  tt_op_result res[1];
  int32_t n = 0;
  *out = NULL;
  tt_status st = tt_op_run(rt, &call, res, 1, &n);
  if (!st && n == 1) *out = res[0].storage;
  return st;
}

static tt_code code_of(tt_status st) {
  tt_code c = st ? tt_status_code(st) : TT_OK;
  tt_status_free(st);
  return c;
}

static void check_sum(tt_runtime *rt, tt_storage *s, const dense *like, const float *want) {
  tt_tensor t = {s, TT_F32, 2, like->sizes, like->strides, 0};
  float got[6];
  CHECK_OK(tt_tensor_download(rt, &t, got));
  for (int i = 0; i < 6; i++) CHECK(got[i] == want[i], "[%d] %g != %g", i, got[i], want[i]);
}

static void test_cold_then_warm(tt_runtime *rt) {
  float ha[6] = {1, 2, 3, 4, 5, 6}, want[6];
  for (int i = 0; i < 6; i++) want[i] = 2 * ha[i];
  dense a;
  make_dense(rt, &a, 2, 3, ha);
  CHECK_OK(tt_runtime_set_host_tier(rt, 2, 1 << 20));
  tt_stats s0, s1;
  tt_runtime_stats(rt, &s0);
  tt_storage *out = NULL;
  CHECK(code_of(add_host_ok(rt, &a.t, &a.t, &out)) == TT_RUN_ON_HOST);
  tt_runtime_stats(rt, &s1);
  CHECK(s1.compiles_pending == s0.compiles_pending, "queued at the first call");
  CHECK(code_of(add_host_ok(rt, &a.t, &a.t, &out)) == TT_RUN_ON_HOST);
  tt_runtime_stats(rt, &s1);
  CHECK(s1.host_calls == s0.host_calls + 2);
  tt_runtime_wait_compiles(rt);
  CHECK_OK(add_host_ok(rt, &a.t, &a.t, &out));  // adopted, run on the device
  CHECK(out != NULL);
  if (out) check_sum(rt, out, &a, want);
  tt_storage_destroy(out);
  tt_runtime_stats(rt, &s1);
  CHECK(s1.background_compiles == s0.background_compiles + 1);
  CHECK(s1.compiles == s0.compiles + 1);
  tt_storage_destroy(a.s);
}

static void test_no_host_ok_compiles_at_once(tt_runtime *rt) {
  float ha[6] = {1, 2, 3, 4, 5, 6}, want[6];
  for (int i = 0; i < 6; i++) want[i] = ha[i] + 0.5f * ha[i];
  dense a;
  make_dense(rt, &a, 3, 2, ha);  // another shape: a new signature
  tt_stats s0, s1;
  tt_runtime_stats(rt, &s0);
  tt_status st = NULL;
  tt_storage *out = add(rt, &a.t, &a.t, 0.5, &st);
  CHECK_OK(st);
  tt_runtime_stats(rt, &s1);
  CHECK(s1.compiles == s0.compiles + 1 && s1.host_calls == s0.host_calls);
  dense like = a;
  if (out) check_sum(rt, out, &like, want);
  tt_storage_destroy(out);
  tt_storage_destroy(a.s);
}

static void test_size_bound(tt_runtime *rt) {
  float ha[6] = {1, 2, 3, 4, 5, 6};
  dense a;
  make_dense(rt, &a, 1, 6, ha);
  CHECK_OK(tt_runtime_set_host_tier(rt, 2, 8));  // 8 bytes: every call is larger
  tt_storage *out = NULL;
  CHECK_OK(add_host_ok(rt, &a.t, &a.t, &out));
  tt_storage_destroy(out);
  CHECK(code_of(tt_runtime_set_host_tier(rt, -1, 0)) == TT_INVALID_ARGUMENT);
  CHECK(code_of(tt_runtime_set_host_tier(rt, 1, -1)) == TT_INVALID_ARGUMENT);
  int64_t n = 0, bytes = 0;
  tt_runtime_host_tier(rt, &n, &bytes);
  CHECK(n == 2 && bytes == 8);
  tt_storage_destroy(a.s);
}

// Many cold signatures queued at once, then the worker stopped: the
// runtime is destroyed with jobs still queued (ASan sees what leaks).
static void test_stop_with_jobs_queued(tt_runtime *rt) {
  CHECK_OK(tt_runtime_set_host_tier(rt, 1, 1 << 20));
  for (int r = 1; r <= 12; r++) {
    dense a;
    make_dense(rt, &a, r, 5, NULL);
    tt_storage *out = NULL;
    CHECK(code_of(add_host_ok(rt, &a.t, &a.t, &out)) == TT_RUN_ON_HOST);
    tt_storage_destroy(a.s);
  }
  tt_runtime_stop_compiles(rt);
  tt_stats s;
  tt_runtime_stats(rt, &s);
  printf("stopped with %lld compiles queued\n", (long long)s.compiles_pending);
}

static void test_memory_returns_to_zero(tt_runtime *rt) {
  CHECK_OK(tt_runtime_synchronize(rt));
  tt_stats s;
  tt_runtime_stats(rt, &s);
  CHECK(s.bytes_in_use == 0, "%lld bytes", (long long)s.bytes_in_use);
  CHECK(s.buffers_in_use == 0);
}

int main(void) {
  tt_runtime *rt = NULL;
  tt_runtime_options o = {.plugin_path = getenv("TORCHTPU_PLUGIN_PATH"),
                          .cpu_device_count = 1};
  CHECK_OK(tt_runtime_create(&o, &rt));
  if (!rt) return 1;
  test_cold_then_warm(rt);
  test_no_host_ok_compiles_at_once(rt);
  test_size_bound(rt);
  test_stop_with_jobs_queued(rt);
  test_memory_returns_to_zero(rt);
  tt_runtime_destroy(rt);
  printf("test_host_tier: %s\n", check_failures ? "FAILED" : "ok");
  return check_exit_code();
}
