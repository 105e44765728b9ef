// Runtime tests without PyTorch: storages, views, op calls through the rule
// table on the real XLA CPU plugin, in-place writes through views, the
// signature cache (scalar values never recompile) and memory counters.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu.h"
#include "check.h"
#include "op_helpers.h"

static void check_close(const char *what, const float *got, const float *want,
                        int n, int line) {
  double g[16], w[16];
  for (int i = 0; i < n && i < 16; i++) {
    g[i] = got[i];
    w[i] = want[i];
  }
  check_close_at(__FILE__, line, what, g, w, n < 16 ? n : 16, 1e-6);
}

// --- tests -------------------------------------------------------------------------------

static void test_add_and_scalars(tt_runtime *rt) {
  float ha[6] = {1, 2, 3, 4, 5, 6}, hb[6] = {10, 20, 30, 40, 50, 60};
  dense a, b;
  make_dense(rt, &a, 2, 3, ha);
  make_dense(rt, &b, 2, 3, hb);
  tt_stats s0, s1;
  tt_runtime_stats(rt, &s0);
  for (int k = 0; k < 3; k++) {
    double alpha = 0.5 * k;
    tt_storage *out = add_ok(rt, &a.t, &b.t, alpha);
    if (!out) return;
    tt_tensor ot = {out, TT_F32, 2, a.sizes, a.strides, 0};
    float got[6], want[6];
    CHECK_OK(tt_tensor_download(rt, &ot, got));
    for (int i = 0; i < 6; i++) want[i] = ha[i] + (float)alpha * hb[i];
    check_close("add alpha", got, want, 6, __LINE__);
    tt_storage_destroy(out);
  }
  tt_runtime_stats(rt, &s1);
  // Three calls that differ only in alpha: at most one compile.
  CHECK(s1.compiles - s0.compiles <= 1);
  CHECK(s1.sig_hits - s0.sig_hits >= 2);
  tt_storage_destroy(a.s);
  tt_storage_destroy(b.s);
}

static void test_transposed_view(tt_runtime *rt) {
  float ha[6] = {1, 2, 3, 4, 5, 6}, hb[6] = {1, 1, 1, 1, 1, 1};
  dense a, b;
  make_dense(rt, &a, 2, 3, ha);
  make_dense(rt, &b, 3, 2, hb);
  int64_t ts[2] = {3, 2}, tst[2] = {1, 3};  // a.T
  tt_tensor at = {a.s, TT_F32, 2, ts, tst, 0};
  tt_storage *out = add_ok(rt, &at, &b.t, 1.0);
  if (!out) return;
  tt_tensor ot = {out, TT_F32, 2, b.sizes, b.strides, 0};
  float got[6], want[6] = {2, 5, 3, 6, 4, 7};
  CHECK_OK(tt_tensor_download(rt, &ot, got));
  check_close("a.T + 1", got, want, 6, __LINE__);
  tt_storage_destroy(out);
  tt_storage_destroy(a.s);
  tt_storage_destroy(b.s);
}

// a[1, :] += b[0, :] (in place through a row view) is seen by the base.
static void test_inplace_view(tt_runtime *rt) {
  float ha[6] = {1, 2, 3, 4, 5, 6}, hb[6] = {10, 20, 30, 40, 50, 60};
  dense a, b;
  make_dense(rt, &a, 2, 3, ha);
  make_dense(rt, &b, 2, 3, hb);
  int64_t rs[1] = {3}, rst[1] = {1};
  tt_tensor arow = {a.s, TT_F32, 1, rs, rst, 3};
  tt_tensor brow = {b.s, TT_F32, 1, rs, rst, 0};
  tt_value args[3] = {tensor_value(&arow), tensor_value(&brow), scalar_value(1)};
  tt_dest dest = {0, -1};
  tt_op_call call = {tt_op_lookup("aten::add_.Tensor"), 0, TT_F32, args, 3, &dest, 1, false};
  tt_op_result res[1];
  int32_t n = -1;
  CHECK_OK(tt_op_run(rt, &call, res, 1, &n));
  CHECK(n == 0);
  float got[6], want[6] = {1, 2, 3, 14, 25, 36};
  CHECK_OK(tt_tensor_download(rt, &a.t, got));
  check_close("a[1] += b[0]", got, want, 6, __LINE__);
  // A column view (strided) written in place: a[:, 0] += 100.
  int64_t cs[1] = {2}, cst[1] = {3};
  tt_tensor acol = {a.s, TT_F32, 1, cs, cst, 0};
  tt_value args2[3] = {tensor_value(&acol), scalar_value(100), scalar_value(1)};
  call.op = tt_op_lookup("aten::add_.Scalar");
  call.args = args2;
  if (call.op >= 0) {
    CHECK_OK(tt_op_run(rt, &call, res, 1, &n));
    float want2[6] = {101, 2, 3, 114, 25, 36};
    CHECK_OK(tt_tensor_download(rt, &a.t, got));
    check_close("a[:, 0] += 100", got, want2, 6, __LINE__);
  }
  tt_storage_destroy(a.s);
  tt_storage_destroy(b.s);
}

static void test_bad_shapes(tt_runtime *rt) {
  dense a, b;
  make_dense(rt, &a, 2, 3, NULL);
  make_dense(rt, &b, 4, 5, NULL);
  tt_value args[3] = {tensor_value(&a.t), tensor_value(&b.t), scalar_value(1)};
  tt_dest dest = {-1, -1};
  tt_op_call call = {tt_op_lookup("aten::add.Tensor"), 0, TT_F32, args, 3, &dest, 1, false};
  tt_op_result res[1];
  int32_t n = 0;
  tt_status st = tt_op_run(rt, &call, res, 1, &n);
  CHECK(tt_status_code(st) == TT_INVALID_ARGUMENT);
  CHECK(st && strstr(tt_status_message(st), "add") != NULL);
  CHECK(st && strstr(tt_status_message(st), "[2, 3]") != NULL);
  tt_status_free(st);
  tt_storage_destroy(a.s);
  tt_storage_destroy(b.s);
}

static void test_memory_returns_to_zero(tt_runtime *rt) {
  CHECK_OK(tt_runtime_synchronize(rt));
  tt_stats s;
  tt_runtime_stats(rt, &s);
  CHECK(s.bytes_in_use == 0);
  CHECK(s.buffers_in_use == 0);
  CHECK(s.peak_bytes_in_use > 0);
}

int main(void) {
  tt_runtime *rt = NULL;
  tt_runtime_options o = {.plugin_path = getenv("TORCHTPU_PLUGIN_PATH"),
                          .cpu_device_count = 1};
  CHECK_OK(tt_runtime_create(&o, &rt));
  if (!rt) return 1;
  tt_runtime_info info;
  tt_runtime_info_get(rt, &info);
  printf("platform %s (%s), PJRT API %d.%d, %d device(s)\n", info.platform,
         info.platform_version, info.api_major, info.api_minor, info.device_count);
  test_add_and_scalars(rt);
  test_transposed_view(rt);
  test_inplace_view(rt);
  test_bad_shapes(rt);
  test_memory_returns_to_zero(rt);
  tt_runtime_destroy(rt);
  printf("test_runtime: %s\n", check_failures ? "FAILED" : "ok");
  return check_exit_code();
}
