// Fused eager without PyTorch: ops recorded into one deferred graph on the
// real XLA CPU plugin. Pending results hold no device memory, a dead
// intermediate is dropped from the outputs, reading a value flushes, user
// errors raise at the op and leave the graph intact, in-place writes through
// views of pending storages, inputs destroyed or overwritten before the
// flush, a repeated graph compiles nothing, and a graph that fails to
// compile names its ops in the error of the call that flushed it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu.h"
#include "check.h"
#include "op_helpers.h"
#include "hlo/hlo_internal.h"
#include "lower/lower.h"

static int64_t bytes_in_use(tt_runtime *rt) {
  tt_stats s;
  tt_runtime_stats(rt, &s);
  return s.bytes_in_use;
}

static void expect(tt_runtime *rt, const tt_tensor *t, const float *want,
                   int n, const char *what, int line) {
  float got[16];
  double g[16], w[16];
  CHECK_OK(tt_tensor_download(rt, t, got));
  for (int i = 0; i < n; i++) {
    g[i] = got[i];
    w[i] = want[i];
  }
  check_close_at(__FILE__, line, what, g, w, n, 1e-6);
}

// c = (a + b) + 2 * (a + b): the first sum is an intermediate that dies.
static void test_chain_and_memory(tt_runtime *rt) {
  float ha[6] = {1, 2, 3, 4, 5, 6}, hb[6] = {10, 20, 30, 40, 50, 60};
  dense a, b;
  make_dense(rt, &a, 2, 3, ha);
  make_dense(rt, &b, 2, 3, hb);
  int64_t base = bytes_in_use(rt);
  tt_storage *s = add_ok(rt, &a.t, &b.t, 1);
  if (!s) return;
  tt_tensor st = {s, TT_F32, 2, a.sizes, a.strides, 0};
  tt_storage *c = add_ok(rt, &st, &st, 2);
  if (!c) return;
  tt_storage_destroy(s);  // pending: dropped from the graph's outputs
  CHECK(bytes_in_use(rt) == base, "pending results hold %lld bytes",
        (long long)(bytes_in_use(rt) - base));
  tt_fused_stats fs;
  tt_runtime_fused_stats(rt, &fs);
  CHECK(fs.pending_ops == 2);
  tt_tensor ct = {c, TT_F32, 2, a.sizes, a.strides, 0};
  float want[6];
  for (int i = 0; i < 6; i++) want[i] = 3 * (ha[i] + hb[i]);
  expect(rt, &ct, want, 6, "3 * (a + b)", __LINE__);  // flushes
  tt_runtime_fused_stats(rt, &fs);
  CHECK(fs.pending_ops == 0 && fs.last_graph_ops == 2);
  CHECK(fs.last_graph_outputs == 1, "outputs %lld", (long long)fs.last_graph_outputs);
  CHECK(bytes_in_use(rt) == base + 24);
  tt_storage_destroy(c);
  tt_storage_destroy(a.s);
  tt_storage_destroy(b.s);
}

static void test_error_at_the_op(tt_runtime *rt) {
  float ha[6] = {1, 2, 3, 4, 5, 6};
  dense a, bad;
  make_dense(rt, &a, 2, 3, ha);
  make_dense(rt, &bad, 4, 5, NULL);
  tt_storage *s = add_ok(rt, &a.t, &a.t, 1);
  tt_status st = NULL;
  tt_storage *x = add(rt, &a.t, &bad.t, 1, &st);
  CHECK(!x && tt_status_code(st) == TT_INVALID_ARGUMENT);
  CHECK(st && strstr(tt_status_message(st), "add") && strstr(tt_status_message(st), "[2, 3]"));
  tt_status_free(st);
  if (!s) return;
  tt_tensor t = {s, TT_F32, 2, a.sizes, a.strides, 0};
  float want[6] = {2, 4, 6, 8, 10, 12};
  expect(rt, &t, want, 6, "graph intact after an error", __LINE__);
  tt_storage_destroy(s);
  tt_storage_destroy(a.s);
  tt_storage_destroy(bad.s);
}

// p = a + a (pending); p[1, :] += a[0, :] through a row view; then the input
// a is overwritten from the host and another input dies before the flush.
static void test_views_and_inputs(tt_runtime *rt) {
  float ha[6] = {1, 2, 3, 4, 5, 6}, hz[6] = {0};
  dense a, d;
  make_dense(rt, &a, 2, 3, ha);
  make_dense(rt, &d, 2, 3, ha);
  tt_storage *p = add_ok(rt, &a.t, &a.t, 1);
  tt_storage *e = add_ok(rt, &d.t, &d.t, 1);
  if (!p || !e) return;
  int64_t rs[1] = {3}, rst[1] = {1};
  tt_tensor prow = {p, TT_F32, 1, rs, rst, 3};
  tt_tensor arow = {a.s, TT_F32, 1, rs, rst, 0};
  tt_value args[3] = {tensor_value(&prow), tensor_value(&arow), scalar_value(1)};
  tt_dest dest = {0, -1};
  tt_op_call call = {tt_op_lookup("aten::add_.Tensor"), 0, TT_F32, args, 3, &dest, 1, false};
  tt_op_result res[1];
  int32_t n = -1;
  CHECK_OK(tt_op_run(rt, &call, res, 1, &n));
  CHECK(n == 0);
  CHECK_OK(tt_tensor_upload(rt, &a.t, hz));  // a's old buffer stays with the graph
  tt_storage_destroy(d.s);                   // so does d's
  tt_tensor pt = {p, TT_F32, 2, a.sizes, a.strides, 0};
  tt_tensor et = {e, TT_F32, 2, a.sizes, a.strides, 0};
  float want[6] = {2, 4, 6, 9, 12, 15}, want_e[6] = {2, 4, 6, 8, 10, 12};
  expect(rt, &pt, want, 6, "p[1] += a[0]", __LINE__);
  expect(rt, &et, want_e, 6, "d + d, d destroyed", __LINE__);
  expect(rt, &a.t, hz, 6, "a overwritten", __LINE__);
  tt_storage_destroy(p);
  tt_storage_destroy(e);
  tt_storage_destroy(a.s);
}

// The same graph twice with other scalar values: one compile at most.
static void test_repeat_compiles_once(tt_runtime *rt) {
  float ha[6] = {1, 2, 3, 4, 5, 6};
  dense a;
  make_dense(rt, &a, 2, 3, ha);
  int64_t compiles[3];
  for (int k = 0; k < 3; k++) {
    tt_stats s;
    tt_runtime_stats(rt, &s);
    compiles[k] = s.compiles;
    tt_storage *x = add_ok(rt, &a.t, &a.t, k);
    if (!x) return;
    tt_tensor xt = {x, TT_F32, 2, a.sizes, a.strides, 0};
    tt_storage *y = add_ok(rt, &xt, &a.t, 0.5 * k);
    CHECK_OK(tt_runtime_flush(rt));
    if (y) {
      tt_tensor yt = {y, TT_F32, 2, a.sizes, a.strides, 0};
      float want[6];
      for (int i = 0; i < 6; i++) want[i] = ha[i] * (1 + k) + 0.5f * k * ha[i];
      expect(rt, &yt, want, 6, "repeated graph", __LINE__);
    }
    tt_storage_destroy(x);
    tt_storage_destroy(y);
  }
  tt_stats s;
  tt_runtime_stats(rt, &s);
  CHECK(s.compiles == compiles[1], "compiles %lld -> %lld", (long long)compiles[1],
        (long long)s.compiles);
  tt_storage_destroy(a.s);
}

// A rule whose program the plugin rejects (an op StableHLO does not have):
// recording succeeds, the flush fails.
static tt_status lower_bogus(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  const tt_hlo_type *ty = tt_hlo_type_of(tt_lower_hlo(c), x);
  if (!ty) return NULL;
  tt_hlo_type t = *ty;
  tt_lower_result(c, tt_hlo_emit(tt_lower_hlo(c), "stablehlo.frobnicate", &x, 1, NULL, &t));
  return NULL;
}

static void test_flush_error_names_the_ops(tt_runtime *rt) {
  int32_t op = tt_rule_register("aten::tt_test_bogus", lower_bogus, 0);
  float ha[6] = {1, 2, 3, 4, 5, 6};
  dense a;
  make_dense(rt, &a, 2, 3, ha);
  tt_storage *s = add_ok(rt, &a.t, &a.t, 1);
  if (!s || op < 0) return;
  tt_tensor st = {s, TT_F32, 2, a.sizes, a.strides, 0};
  tt_value args[1] = {tensor_value(&st)};
  tt_dest dest = {-1, -1};
  tt_op_call call = {op, 0, TT_F32, args, 1, &dest, 1, false};
  tt_op_result res[1];
  int32_t n = 0;
  CHECK_OK(tt_op_run(rt, &call, res, 1, &n));  // recorded: no error yet
  CHECK(n == 1);
  if (n != 1) return;
  tt_tensor bt = {res[0].storage, TT_F32, 2, a.sizes, a.strides, 0};
  float got[6];
  tt_status e = tt_tensor_download(rt, &bt, got);  // flushes: fails to compile
  CHECK(e != NULL);
  const char *msg = e ? tt_status_message(e) : "";
  CHECK(strstr(msg, "fused graph of 2 ops (add.Tensor, tt_test_bogus)") != NULL, "%s", msg);
  CHECK(strstr(msg, "frobnicate") != NULL, "%s", msg);
  tt_status_free(e);
  e = tt_tensor_download(rt, &st, got);  // its values were lost with the graph
  CHECK(tt_status_code(e) == TT_FAILED_PRECONDITION);
  tt_status_free(e);
  tt_storage *ok = add_ok(rt, &a.t, &a.t, 1);  // the runtime goes on
  if (ok) {
    tt_tensor ot = {ok, TT_F32, 2, a.sizes, a.strides, 0};
    float want[6] = {2, 4, 6, 8, 10, 12};
    expect(rt, &ot, want, 6, "after a failed graph", __LINE__);
  }
  tt_storage_destroy(ok);
  tt_storage_destroy(res[0].storage);
  tt_storage_destroy(s);
  tt_storage_destroy(a.s);
}

static void test_memory_returns_to_zero(tt_runtime *rt) {
  CHECK_OK(tt_runtime_synchronize(rt));
  tt_stats s;
  tt_runtime_stats(rt, &s);
  CHECK(s.bytes_in_use == 0, "%lld bytes", (long long)s.bytes_in_use);
  CHECK(s.buffers_in_use == 0, "%lld buffers", (long long)s.buffers_in_use);
}

int main(void) {
  tt_runtime *rt = NULL;
  tt_runtime_options o = {.plugin_path = getenv("TORCHTPU_PLUGIN_PATH"),
                          .cpu_device_count = 1};
  CHECK_OK(tt_runtime_create(&o, &rt));
  if (!rt) return 1;
  tt_runtime_set_mode(rt, TT_MODE_FUSED);
  test_chain_and_memory(rt);
  test_error_at_the_op(rt);
  test_views_and_inputs(rt);
  test_repeat_compiles_once(rt);
  test_flush_error_names_the_ops(rt);
  test_memory_returns_to_zero(rt);
  tt_runtime_set_mode(rt, TT_MODE_STRICT);
  tt_runtime_destroy(rt);
  printf("test_fused: %s\n", check_failures ? "FAILED" : "ok");
  return check_exit_code();
}
