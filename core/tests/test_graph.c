// Static graph capture (what torch.tpu.graph builds on) without PyTorch: a
// host read while capturing fails at once and breaks the capture (the ops
// still run); a replay into static outputs writes the new results into the
// captured output's own storage, reading the inputs' current values.
#include <stdio.h>
#include <stdlib.h>

#include "torchtpu.h"
#include "check.h"
#include "op_helpers.h"

static const float kA[6] = {1, 2, 3, 4, 5, 6};
static const float kB[6] = {0.5f, -1, 2, 0, 3, -2};

static void test_host_read_refused(tt_runtime *rt) {
  dense a, b;
  make_dense(rt, &a, 2, 3, kA);
  make_dense(rt, &b, 2, 3, kB);
  tt_runtime_set_mode(rt, TT_MODE_FUSED);
  CHECK_OK(tt_graph_capture_begin_static(rt, 0));
  tt_storage *c = add_ok(rt, &a.t, &b.t, 1.0);
  tt_tensor ct = {c, TT_F32, 2, a.sizes, a.strides, 0};
  float out[6];
  tt_status st = tt_tensor_download(rt, &ct, out);  // .item() / .cpu() inside
  CHECK(tt_status_code(st) == TT_FAILED_PRECONDITION);
  tt_status_free(st);
  tt_graph *g = NULL;
  st = tt_graph_capture_end(rt, &ct, 1, &g);
  CHECK(tt_status_code(st) == TT_UNIMPLEMENTED && g == NULL);
  tt_status_free(st);
  tt_runtime_set_mode(rt, TT_MODE_STRICT);
  CHECK_OK(tt_tensor_download(rt, &ct, out));  // the ops ran all the same
  for (int i = 0; i < 6; i++) CHECK(out[i] == kA[i] + kB[i]);
  tt_storage_destroy(c);
  tt_storage_destroy(a.s);
  tt_storage_destroy(b.s);
}

static void test_replay_into(tt_runtime *rt) {
  dense a, b, wrong;
  make_dense(rt, &a, 2, 3, kA);
  make_dense(rt, &b, 2, 3, kB);
  make_dense(rt, &wrong, 3, 3, NULL);
  tt_runtime_set_mode(rt, TT_MODE_FUSED);
  CHECK_OK(tt_graph_capture_begin_static(rt, 0));
  tt_storage *c = add_ok(rt, &a.t, &b.t, 2.0);  // c = a + 2b
  tt_tensor ins[2] = {a.t, b.t};
  CHECK_OK(tt_graph_capture_input(rt, 0, &ins[0]));
  CHECK_OK(tt_graph_capture_input(rt, 1, &ins[1]));
  tt_tensor ct = {c, TT_F32, 2, a.sizes, a.strides, 0};
  tt_graph *g = NULL;
  CHECK_OK(tt_graph_capture_end(rt, &ct, 1, &g));
  tt_runtime_set_mode(rt, TT_MODE_STRICT);
  if (!g) return;
  CHECK(tt_graph_num_results(g) == 1);
  float a2[6] = {10, 20, 30, 40, 50, 60}, out[6];
  CHECK_OK(tt_tensor_upload(rt, &a.t, a2));  // new values into the static input
  CHECK_OK(tt_graph_replay_into(rt, g, ins, 2, &ct, 1));
  CHECK_OK(tt_tensor_download(rt, &ct, out));  // the same storage, new values
  for (int i = 0; i < 6; i++) CHECK(out[i] == a2[i] + 2 * kB[i]);
  // An output storage unlike the capture's: refused, nothing runs.
  tt_status st = tt_graph_replay_into(rt, g, ins, 2, &wrong.t, 1);
  CHECK(tt_status_code(st) == TT_INVALID_ARGUMENT);
  tt_status_free(st);
  tt_graph_destroy(g);
  tt_storage_destroy(c);
  tt_storage_destroy(a.s);
  tt_storage_destroy(b.s);
  tt_storage_destroy(wrong.s);
}

int main(void) {
  tt_runtime *rt = NULL;
  tt_runtime_options o = {.plugin_path = getenv("TORCHTPU_PLUGIN_PATH"),
                          .cpu_device_count = 1};
  CHECK_OK(tt_runtime_create(&o, &rt));
  if (!rt) return 1;
  test_host_read_refused(rt);
  test_replay_into(rt);
  tt_runtime_destroy(rt);
  printf("test_graph: %s\n", check_failures ? "FAILED" : "ok");
  return check_exit_code();
}
