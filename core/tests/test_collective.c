// test_collective.c — device collectives on 4 devices of the XLA CPU plugin:
// the compile options' bytes, every collective against the answer computed
// here on the host (exact: small integers in float32 and int32), a second
// call compiling nothing, and mismatched inputs failing with a message.
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "torchtpu.h"

// The internal encoder, to check its bytes (the library exports it hidden,
// but the test links the objects).
#include "hlo/hlo.h"
#include "pjrt/pjrt.h"
#include "runtime/runtime.h"

enum { N = 4, M = 8 };  // devices; elements per device

typedef struct dev_tensor {
  tt_storage *s;
  int64_t sizes[1], strides[1];
  tt_tensor t;
} dev_tensor;

static void make(tt_runtime *rt, dev_tensor *d, int device, tt_dtype dt,
                 int64_t n, const void *host) {
  d->sizes[0] = n;
  d->strides[0] = 1;
  d->s = NULL;
  CHECK_OK(tt_storage_create(rt, device, n * tt_dtype_size(dt), &d->s));
  d->t = (tt_tensor){d->s, dt, 1, d->sizes, d->strides, 0};
  if (host && d->s) CHECK_OK(tt_tensor_upload(rt, &d->t, host));
}

static void destroy_all(dev_tensor *ts, int n) {
  for (int i = 0; i < n; i++) tt_storage_destroy(ts[i].s);
}

// --- compile options -------------------------------------------------------------

static void test_compile_options_bytes(void) {
  // The single-device bytes are the persistent cache's key: unchanged.
  static const unsigned char single[] = {
      0x1a, 0x0f, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x01, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01};
  void *b = NULL;
  size_t len = 0;
  CHECK_OK(tt_pjrt_compile_options(&b, &len));
  CHECK(len == sizeof single && memcmp(b, single, len) == 0,
        "single-device options changed (%zu bytes)", len);
  free(b);
  // 2 replicas on ids 0, 1: build options gain num_replicas 2 and
  // device_assignment {1: 2, 2: 1, 3: {1: [0, 1] packed}}.
  static const unsigned char two[] = {
      0x1a, 0x1b, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x01, 0x20, 0x02, 0x28, 0x01, 0x4a, 0x0a, 0x08, 0x02, 0x10, 0x01, 0x1a,
      0x04, 0x0a, 0x02, 0x00, 0x01};
  int64_t ids[2] = {0, 1};
  CHECK_OK(tt_pjrt_compile_options_replicated(2, ids, &b, &len));
  CHECK(len == sizeof two && memcmp(b, two, len) == 0,
        "replicated options: %zu bytes", len);
  free(b);
}

// --- collectives ---------------------------------------------------------------------

// Runs `kind`/`op` on float32 inputs x[d][i] = (d + 1) * (i + 1) - 3 and
// compares every device's output with `want` (out_n elements per device).
static void run_f32(tt_runtime *rt, tt_collective_kind kind, tt_reduce_op op,
                    int root, int64_t out_n, const float *want /* [N][out_n] */) {
  dev_tensor in[N], out[N];
  tt_tensor ins[N], outs[N];
  for (int d = 0; d < N; d++) {
    float h[M];
    for (int i = 0; i < M; i++) h[i] = (float)((d + 1) * (i + 1) - 3);
    make(rt, &in[d], d, TT_F32, M, h);
    make(rt, &out[d], d, TT_F32, out_n, NULL);
    ins[d] = in[d].t;
    outs[d] = out[d].t;
  }
  tt_collective_desc desc = {kind, op, root, N};
  printf("  %s %d\n", tt_collective_name(kind), (int)op);
  fflush(stdout);
  tt_status st = tt_collective_run(rt, &desc, ins, outs);
  if (st) {
    fprintf(stderr, "%s %d: ", tt_collective_name(kind), (int)op);
    CHECK_OK(st);
  } else {
    for (int d = 0; d < N; d++) {
      float got[N * M];
      CHECK_OK(tt_tensor_download(rt, &outs[d], got));
      double g[N * M], w[N * M];
      for (int i = 0; i < out_n; i++) {
        g[i] = got[i];
        w[i] = want[d * out_n + i];
      }
      CHECK_CLOSE(g, w, (int)out_n, 0);
    }
  }
  destroy_all(in, N);
  destroy_all(out, N);
}

static float x_of(int d, int i) { return (float)((d + 1) * (i + 1) - 3); }

static void test_collectives(tt_runtime *rt) {
  float want[N * N * M];
  // all_reduce SUM, MAX, MIN, PRODUCT, AVG
  for (int op = TT_REDUCE_SUM; op <= TT_REDUCE_MAX; op++) {
    for (int i = 0; i < M; i++) {
      float acc = x_of(0, i);
      for (int d = 1; d < N; d++) {
        float v = x_of(d, i);
        if (op == TT_REDUCE_SUM || op == TT_REDUCE_AVG) acc += v;
        if (op == TT_REDUCE_PRODUCT) acc *= v;
        if (op == TT_REDUCE_MIN) acc = v < acc ? v : acc;
        if (op == TT_REDUCE_MAX) acc = v > acc ? v : acc;
      }
      if (op == TT_REDUCE_AVG) acc /= N;
      for (int d = 0; d < N; d++) want[d * M + i] = acc;
    }
    run_f32(rt, TT_COLLECTIVE_ALL_REDUCE, (tt_reduce_op)op, 0, M, want);
  }
  // all_gather: device j's input at block j, on every device
  for (int d = 0; d < N; d++)
    for (int j = 0; j < N; j++)
      for (int i = 0; i < M; i++) want[d * N * M + j * M + i] = x_of(j, i);
  run_f32(rt, TT_COLLECTIVE_ALL_GATHER, TT_REDUCE_SUM, 0, N * M, want);
  // reduce_scatter SUM: device d gets block d of the sum
  for (int d = 0; d < N; d++)
    for (int i = 0; i < M / N; i++) {
      float acc = 0;
      for (int j = 0; j < N; j++) acc += x_of(j, d * (M / N) + i);
      want[d * (M / N) + i] = acc;
    }
  run_f32(rt, TT_COLLECTIVE_REDUCE_SCATTER, TT_REDUCE_SUM, 0, M / N, want);
  // all_to_all: device d gets block d of every device's input
  for (int d = 0; d < N; d++)
    for (int j = 0; j < N; j++)
      for (int i = 0; i < M / N; i++)
        want[d * M + j * (M / N) + i] = x_of(j, d * (M / N) + i);
  run_f32(rt, TT_COLLECTIVE_ALL_TO_ALL, TT_REDUCE_SUM, 0, M, want);
  // broadcast from device 2
  for (int d = 0; d < N; d++)
    for (int i = 0; i < M; i++) want[d * M + i] = x_of(2, i);
  run_f32(rt, TT_COLLECTIVE_BROADCAST, TT_REDUCE_SUM, 2, M, want);
}

// int32 all_reduce MAX in place; a second call compiles nothing.
static void test_int_inplace_cached(tt_runtime *rt) {
  dev_tensor t[N];
  tt_tensor ts[N];
  for (int d = 0; d < N; d++) {
    int32_t h[M];
    for (int i = 0; i < M; i++) h[i] = (i % N == d) ? 1000 + i : -i;
    make(rt, &t[d], d, TT_I32, M, h);
    ts[d] = t[d].t;
  }
  tt_collective_desc desc = {TT_COLLECTIVE_ALL_REDUCE, TT_REDUCE_MAX, 0, N};
  CHECK_OK(tt_collective_run(rt, &desc, ts, ts));
  tt_stats before, after;
  tt_runtime_stats(rt, &before);
  CHECK_OK(tt_collective_run(rt, &desc, ts, ts));
  tt_runtime_stats(rt, &after);
  CHECK(after.compiles == before.compiles, "second call compiled %lld",
        (long long)(after.compiles - before.compiles));
  for (int d = 0; d < N; d++) {
    int32_t got[M];
    CHECK_OK(tt_tensor_download(rt, &ts[d], got));
    for (int i = 0; i < M; i++)
      CHECK(got[i] == 1000 + i, "device %d [%d] = %d", d, i, got[i]);
  }
  destroy_all(t, N);
}

static void test_mismatch(tt_runtime *rt) {
  dev_tensor in[N];
  tt_tensor ts[N];
  for (int d = 0; d < N; d++) {
    make(rt, &in[d], d, TT_F32, d == 3 ? M / 2 : M, NULL);
    ts[d] = in[d].t;
  }
  tt_collective_desc desc = {TT_COLLECTIVE_ALL_REDUCE, TT_REDUCE_SUM, 0, N};
  tt_status st = tt_collective_run(rt, &desc, ts, ts);
  CHECK(st && tt_status_code(st) == TT_INVALID_ARGUMENT &&
            strstr(tt_status_message(st), "all_reduce") &&
            strstr(tt_status_message(st), "device 3") &&
            strstr(tt_status_message(st), "[4]"),
        "got %s", st ? tt_status_message(st) : "OK");
  tt_status_free(st);
  // tensor 1 on device 0
  tt_tensor swapped[N];
  memcpy(swapped, ts, sizeof swapped);
  swapped[1] = ts[0];
  st = tt_collective_run(rt, &desc, swapped, swapped);
  CHECK(st && tt_status_code(st) == TT_INVALID_ARGUMENT &&
            strstr(tt_status_message(st), "device i"),
        "got %s", st ? tt_status_message(st) : "OK");
  tt_status_free(st);
  destroy_all(in, N);
}

// --- the ops' text -------------------------------------------------------------------

static void test_text(void) {
  tt_hlo *b = NULL;
  REQUIRE_OK(tt_hlo_create(&b));
  int64_t dims[2] = {N, 3};
  tt_hlo_type t = tt_hlo_make_type(TT_F32, 2, dims);
  tt_hv x = tt_hlo_param(b, &t);
  int64_t pairs[1][2] = {{0, 1}};
  tt_hv r[5] = {
      tt_hlo_all_reduce(b, x, TT_HLO_REDUCE_MAX, N, 1),
      tt_hlo_all_gather(b, x, 1, N, 2),
      tt_hlo_reduce_scatter(b, x, 0, TT_HLO_REDUCE_ADD, N, 3),
      tt_hlo_all_to_all(b, x, 0, 1, N, 4),
      tt_hlo_collective_permute(b, x, (const int64_t(*)[2])pairs, 1, 5),
  };
  const char *text = NULL;
  size_t len = 0;
  CHECK_OK(tt_hlo_finish(b, r, 5, &text, &len));
  static const char *const want[] = {
      "\"stablehlo.all_reduce\"(%",
      "replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, "
      "channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, "
      "use_global_device_ids} : (tensor<4x3xf32>) -> tensor<4x3xf32>",
      "all_gather_dim = 1 : i64", "-> tensor<4x12xf32>",
      "scatter_dimension = 0 : i64", "-> tensor<1x3xf32>",
      "split_dimension = 0 : i64, concat_dimension = 1 : i64, split_count = 4 "
      ": i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : "
      "(tensor<4x3xf32>) -> tensor<1x12xf32>",
      "source_target_pairs = dense<[[0, 1]]> : tensor<1x2xi64>} :",
  };
  for (size_t i = 0; text && i < sizeof want / sizeof want[0]; i++)
    CHECK(strstr(text, want[i]), "missing %s in\n%s", want[i], text);
  // all_to_all and collective_permute carry no channel (see hlo.h).
  CHECK(text && !strstr(text, "handle = 4") && !strstr(text, "handle = 5"));
  // A dim that doesn't split is the builder's error.
  tt_hlo_reset(b);
  x = tt_hlo_param(b, &t);
  CHECK(tt_hlo_reduce_scatter(b, x, 1, TT_HLO_REDUCE_ADD, N, 1) == TT_HV_INVALID);
  CHECK(tt_hlo_status(b) != NULL);
  tt_hlo_destroy(b);
}

// --- collective_permute, straight through pjrt/ ----------------------------------------

// A ring shift (device i's x to device i+1), built with the hlo/ builder,
// compiled with the replicated options and launched on all devices.
static void test_permute_ring(tt_runtime *rt) {
  tt_pjrt *p = rt->pjrt;
  tt_hlo *b = NULL;
  REQUIRE_OK(tt_hlo_create(&b));
  int64_t m = M;
  tt_hlo_type t = tt_hlo_make_type(TT_F32, 1, &m);
  tt_hv x = tt_hlo_param(b, &t);
  int64_t pairs[N][2];
  for (int i = 0; i < N; i++) {
    pairs[i][0] = i;
    pairs[i][1] = (i + 1) % N;
  }
  tt_hv r = tt_hlo_collective_permute(b, x, (const int64_t(*)[2])pairs, N, 1);
  const char *text = NULL;
  size_t len = 0;
  tt_status st = tt_hlo_finish(b, &r, 1, &text, &len);
  CHECK_OK(st);
  char *mod = NULL;
  if (!st) {  // num_replicas = N in the module, as collective.c writes it
    mod = malloc(len + 8);
    const char *at = strstr(text, "mhlo.num_replicas = 1");
    CHECK(at != NULL);
    if (mod && at) {
      size_t k = (size_t)(at - text);
      memcpy(mod, text, k);
      int w = sprintf(mod + k, "mhlo.num_replicas = %d", N);
      strcpy(mod + k + w, at + strlen("mhlo.num_replicas = 1"));
    }
  }
  int64_t ids[N];
  for (int i = 0; i < N; i++) CHECK_OK(tt_pjrt_device_id(p, i, &ids[i]));
  void *opts = NULL;
  size_t opts_len = 0;
  CHECK_OK(tt_pjrt_compile_options_replicated(N, ids, &opts, &opts_len));
  tt_pjrt_exe *e = NULL;
  if (mod && opts)
    CHECK_OK(tt_pjrt_compile_with_options(p, mod, strlen(mod), opts, opts_len, &e));
  if (e) {
    tt_pjrt_buffer *args[N] = {0}, *outs[N] = {0};
    tt_pjrt_event *done[N] = {0};
    for (int d = 0; d < N; d++) {
      float h[M];
      for (int i = 0; i < M; i++) h[i] = x_of(d, i);
      CHECK_OK(tt_pjrt_buffer_from_host(p, d, TT_F32, &m, 1, h, &args[d]));
    }
    CHECK_OK(tt_pjrt_execute_replicated(p, e, N, args, 1, outs, done));
    for (int d = 0; d < N; d++) {
      CHECK_OK(tt_pjrt_event_await(p, done[d]));
      tt_pjrt_event_destroy(p, done[d]);
      float got[M];
      double g[M], w[M];
      if (!outs[d]) continue;
      CHECK_OK(tt_pjrt_buffer_to_host(p, outs[d], got, sizeof got));
      for (int i = 0; i < M; i++) {
        g[i] = got[i];
        w[i] = x_of((d + N - 1) % N, i);
      }
      CHECK_CLOSE(g, w, M, 0);
      tt_pjrt_buffer_destroy(p, outs[d]);
      tt_pjrt_buffer_destroy(p, args[d]);
    }
  }
  tt_pjrt_exe_destroy(p, e);
  free(opts);
  free(mod);
  tt_hlo_destroy(b);
}

int main(void) {
  test_compile_options_bytes();
  test_text();
  tt_runtime *rt = NULL;
  tt_runtime_options o = {.plugin_path = getenv("TORCHTPU_PLUGIN_PATH"),
                          .cpu_device_count = N};
  CHECK_OK(tt_runtime_create(&o, &rt));
  if (!rt) return 1;
  tt_runtime_info info;
  tt_runtime_info_get(rt, &info);
  printf("platform %s, %d device(s)\n", info.platform, info.device_count);
  if (info.device_count < N) {
    printf("test_collective: skipped (%d devices)\n", info.device_count);
    tt_runtime_destroy(rt);
    return check_exit_code();
  }
  test_collectives(rt);
  test_int_inplace_cached(rt);
  test_mismatch(rt);
  test_permute_ring(rt);
  tt_runtime_destroy(rt);
  printf("test_collective: %s\n", check_failures ? "FAILED" : "ok");
  return check_exit_code();
}
