// test_pjrt.c — the PJRT layer against a real plugin, no PyTorch.
//
// Loads the plugin named by TORCHTPU_PLUGIN_PATH (else the discovered one)
// with two CPU devices, then checks: info; host round trips of every dtype;
// a hand-written StableHLO program (add, then multiply by a runtime scalar)
// against values computed here, on device 0 and device 1; serialise ->
// deserialise -> execute; events; and the error paths (bad MLIR keeps the
// plugin's diagnostic, a missing plugin is NOT_FOUND, wrong sizes and
// argument counts are statuses, not crashes).
//
// Build and run from the repository root with core/tests/Makefile.pjrt
// (`make -f core/tests/Makefile.pjrt test asan PLUGIN=/path/plugin.so`), or:
//   gcc -std=c11 -Wall -Wextra -Werror -fPIC -D_GNU_SOURCE -g
//       -Icore/include -Icore/src core/tests/test_pjrt.c core/src/pjrt/*.c
//       core/src/base/status.c core/src/base/dtype.c
//       -o build/test_pjrt -ldl -lpthread -lm
//   TORCHTPU_PLUGIN_PATH=/path/to/plugin.so build/test_pjrt
// adding -fsanitize=address,undefined for the sanitizer run.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "pjrt/pjrt.h"
#include "check.h"




// --- the program -------------------------------------------------------------

// out0 = (x + y) * s, out1 = x + y; s is a 0-d runtime argument.
static const char kProgram[] =
    "module @add_scale {\n"
    "  func.func public @main(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>,\n"
    "                         %s: tensor<f32>)\n"
    "      -> (tensor<2x3xf32>, tensor<2x3xf32>) {\n"
    "    %sum = stablehlo.add %x, %y : tensor<2x3xf32>\n"
    "    %b = stablehlo.broadcast_in_dim %s, dims = [] :\n"
    "        (tensor<f32>) -> tensor<2x3xf32>\n"
    "    %prod = stablehlo.multiply %sum, %b : tensor<2x3xf32>\n"
    "    return %prod, %sum : tensor<2x3xf32>, tensor<2x3xf32>\n"
    "  }\n"
    "}\n";

static const int64_t kDims[2] = {2, 3};
static const float kX[6] = {1, 2, 3, 4, 5, 6};
static const float kY[6] = {0.5f, -1, 2.25f, 10, -7, 0};
static const float kS = 3.5f;

static float max_abs_diff(const float *a, const float *b, int n) {
  float m = 0;
  for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
  return m;
}

// Uploads the inputs to `device`, runs `e`, checks both outputs. Destroys
// the inputs right after the launch: the plugin must keep them alive.
static void run_and_check(tt_pjrt *p, tt_pjrt_exe *e, int device) {
  tt_pjrt_buffer *in[3] = {NULL, NULL, NULL};
  REQUIRE_OK(tt_pjrt_buffer_from_host(p, device, TT_F32, kDims, 2, kX, &in[0]));
  REQUIRE_OK(tt_pjrt_buffer_from_host(p, device, TT_F32, kDims, 2, kY, &in[1]));
  REQUIRE_OK(tt_pjrt_buffer_from_host(p, device, TT_F32, NULL, 0, &kS, &in[2]));

  tt_pjrt_buffer *out[2] = {NULL, NULL};
  tt_pjrt_event *done = NULL;
  tt_status st = tt_pjrt_execute(p, e, device, in, 3, NULL, out, &done);
  for (int i = 0; i < 3; i++) tt_pjrt_buffer_destroy(p, in[i]);
  REQUIRE_OK(st);
  CHECK(done != NULL, "no completion event");

  REQUIRE_OK(tt_pjrt_event_await(p, done));
  CHECK(tt_pjrt_event_is_ready(p, done), "event not ready after await");
  tt_pjrt_event_destroy(p, done);
  REQUIRE_OK(tt_pjrt_buffer_await(p, out[0]));

  float want_prod[6], want_sum[6], got_prod[6], got_sum[6];
  for (int i = 0; i < 6; i++) {
    want_sum[i] = kX[i] + kY[i];
    want_prod[i] = want_sum[i] * kS;
  }
  st = tt_pjrt_buffer_to_host(p, out[0], got_prod, sizeof got_prod);
  if (!st) st = tt_pjrt_buffer_to_host(p, out[1], got_sum, sizeof got_sum);
  CHECK(tt_pjrt_buffer_dtype(p, out[0]) == TT_F32, "output dtype %d",
        (int)tt_pjrt_buffer_dtype(p, out[0]));
  tt_pjrt_buffer_destroy(p, out[0]);
  tt_pjrt_buffer_destroy(p, out[1]);
  REQUIRE_OK(st);
  float d0 = max_abs_diff(got_prod, want_prod, 6);
  float d1 = max_abs_diff(got_sum, want_sum, 6);
  CHECK(d0 <= 1e-6f, "device %d: (x+y)*s max abs diff %g", device, d0);
  CHECK(d1 <= 1e-6f, "device %d: x+y max abs diff %g", device, d1);
}

// --- tests -------------------------------------------------------------------

static void test_compile_options(void) {
  void *data = NULL;
  size_t len = 0;
  REQUIRE_OK(tt_pjrt_compile_options(&data, &len));
  // 3: { 1: -1, 4: 1, 5: 1 }, 4: true
  static const unsigned char want[] = {
      0x1a, 0x0f, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0x01, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01};
  CHECK(len == sizeof want && memcmp(data, want, len) == 0,
        "compile options encoding differs (%zu bytes)", len);
  free(data);
}

static void test_info(tt_pjrt *p) {
  tt_pjrt_info info;
  tt_pjrt_info_get(p, &info);
  printf("plugin:   %s\n", info.plugin_path);
  printf("platform: %s (%s), PJRT C API %d.%d\n", info.platform,
         info.platform_version, info.api_major, info.api_minor);
  printf("devices:  %d x %s\n", info.device_count, info.device_kind);
  CHECK(info.api_major == 0 && info.api_minor >= 81, "api %d.%d",
        info.api_major, info.api_minor);
  CHECK(info.device_count >= 1, "%d devices", info.device_count);
  if (strcmp(info.platform, "cpu") == 0)
    CHECK(info.device_count == 2, "cpu_device_count=2 gave %d devices",
          info.device_count);
}

// Every dtype goes up and comes back bit-identical, with its dtype and dims.
static void test_roundtrip(tt_pjrt *p) {
  for (int d = 0; d < TT_DTYPE_COUNT; d++) {
    int64_t esize = tt_dtype_size((tt_dtype)d);
    unsigned char src[6 * 16], dst[6 * 16];  // complex128: 16 bytes
    size_t n = (size_t)(6 * esize);
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 37 + 11);
    if (d == TT_BOOL)  // PRED holds only 0 and 1
      for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i % 2);
    if (tt_dtype_is_complex((tt_dtype)d)) esize /= 2;  // per part
    if (d == TT_F16 || d == TT_BF16 || d == TT_F32 || d == TT_F64 ||
        tt_dtype_is_complex((tt_dtype)d))
      for (size_t i = 0; i < n; i++)  // keep clear of NaN payloads
        src[i] = (unsigned char)(i % (size_t)esize == (size_t)esize - 1
                                     ? 0x3c
                                     : i * 7);
    tt_pjrt_buffer *b = NULL;
    REQUIRE_OK(tt_pjrt_buffer_from_host(p, 0, (tt_dtype)d, kDims, 2, src, &b));
    int64_t dims[TT_MAX_RANK];
    int rank = tt_pjrt_buffer_dims(p, b, dims);
    CHECK(rank == 2 && dims[0] == 2 && dims[1] == 3, "%s: rank %d",
          tt_dtype_name((tt_dtype)d), rank);
    CHECK(tt_pjrt_buffer_dtype(p, b) == (tt_dtype)d, "%s came back as %d",
          tt_dtype_name((tt_dtype)d), (int)tt_pjrt_buffer_dtype(p, b));
    CHECK(tt_pjrt_buffer_device_bytes(p, b) >= (int64_t)n,
          "%s: %lld device bytes", tt_dtype_name((tt_dtype)d),
          (long long)tt_pjrt_buffer_device_bytes(p, b));
    memset(dst, 0xee, sizeof dst);
    tt_status st = tt_pjrt_buffer_to_host(p, b, dst, n);
    tt_pjrt_buffer_destroy(p, b);
    REQUIRE_OK(st);
    CHECK(memcmp(src, dst, n) == 0, "%s: bytes differ",
          tt_dtype_name((tt_dtype)d));
  }

  // Rank 0 and zero elements.
  double one = 1.25, back = 0;
  tt_pjrt_buffer *b = NULL;
  REQUIRE_OK(tt_pjrt_buffer_from_host(p, 0, TT_F64, NULL, 0, &one, &b));
  tt_status st = tt_pjrt_buffer_to_host(p, b, &back, sizeof back);
  int64_t dims[TT_MAX_RANK];
  CHECK(tt_pjrt_buffer_dims(p, b, dims) == 0, "rank-0 buffer has dims");
  tt_pjrt_buffer_destroy(p, b);
  REQUIRE_OK(st);
  CHECK(back == one, "rank 0: got %g", back);
  int64_t empty[2] = {0, 4};
  REQUIRE_OK(tt_pjrt_buffer_from_host(p, 0, TT_F32, empty, 2, NULL, &b));
  st = tt_pjrt_buffer_to_host(p, b, NULL, 0);
  tt_pjrt_buffer_destroy(p, b);
  REQUIRE_OK(st);
}

static void test_execute(tt_pjrt *p) {
  tt_pjrt_exe *e = NULL;
  REQUIRE_OK(tt_pjrt_compile(p, kProgram, strlen(kProgram), &e));
  CHECK(tt_pjrt_exe_num_outputs(p, e) == 2, "%d outputs",
        tt_pjrt_exe_num_outputs(p, e));
  run_and_check(p, e, 0);
  tt_pjrt_info info;
  tt_pjrt_info_get(p, &info);
  if (info.device_count > 1) run_and_check(p, e, 1);

  // Launch without a completion event, then wait on the output buffer.
  tt_pjrt_buffer *in[3] = {NULL, NULL, NULL}, *out[2] = {NULL, NULL};
  tt_status st = tt_pjrt_buffer_from_host(p, 0, TT_F32, kDims, 2, kX, &in[0]);
  if (!st) st = tt_pjrt_buffer_from_host(p, 0, TT_F32, kDims, 2, kY, &in[1]);
  if (!st) st = tt_pjrt_buffer_from_host(p, 0, TT_F32, NULL, 0, &kS, &in[2]);
  if (!st) st = tt_pjrt_execute(p, e, 0, in, 3, NULL, out, NULL);
  if (!st) st = tt_pjrt_buffer_await(p, out[1]);
  CHECK(st == NULL, "launch without event: %s", tt_status_message(st));
  tt_status_free(st);

  // Errors that must come back as statuses.
  st = tt_pjrt_execute(p, e, 0, in, 2, NULL, out, NULL);  // one argument short
  CHECK(st != NULL, "2 of 3 arguments accepted");
  printf("short argument list -> %s\n", tt_status_message(st));
  tt_status_free(st);
  st = tt_pjrt_execute(p, e, 99, in, 3, NULL, out, NULL);
  CHECK(tt_status_code(st) == TT_INVALID_ARGUMENT, "device 99: %s",
        tt_status_message(st));
  tt_status_free(st);
  float small[2];
  st = out[0] ? tt_pjrt_buffer_to_host(p, out[0], small, sizeof small) : NULL;
  CHECK(tt_status_code(st) == TT_INVALID_ARGUMENT, "short host buffer: %s",
        tt_status_message(st));
  tt_status_free(st);

  for (int i = 0; i < 3; i++) tt_pjrt_buffer_destroy(p, in[i]);
  for (int i = 0; i < 2; i++) tt_pjrt_buffer_destroy(p, out[i]);
  tt_pjrt_exe_destroy(p, e);
}

static void test_serialize(tt_pjrt *p) {
  tt_pjrt_exe *e = NULL, *e2 = NULL;
  REQUIRE_OK(tt_pjrt_compile(p, kProgram, strlen(kProgram), &e));
  void *data = NULL;
  size_t len = 0;
  tt_status st = tt_pjrt_exe_serialize(p, e, &data, &len);
  tt_pjrt_exe_destroy(p, e);
  REQUIRE_OK(st);
  CHECK(len > 0, "empty serialization");
  st = tt_pjrt_exe_deserialize(p, data, len, &e2);
  free(data);
  REQUIRE_OK(st);
  CHECK(tt_pjrt_exe_num_outputs(p, e2) == 2, "%d outputs after reload",
        tt_pjrt_exe_num_outputs(p, e2));
  run_and_check(p, e2, 0);
  tt_pjrt_info info;
  tt_pjrt_info_get(p, &info);
  if (info.device_count > 1) run_and_check(p, e2, 1);
  tt_pjrt_exe_destroy(p, e2);
}

static void test_bad_mlir(tt_pjrt *p) {
  static const char bad[] =
      "func.func public @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
      "  %y = stablehlo.frobnicate %x : tensor<2xf32>\n"
      "  return %y : tensor<2xf32>\n"
      "}\n";
  tt_pjrt_exe *e = NULL;
  tt_status st = tt_pjrt_compile(p, bad, strlen(bad), &e);
  CHECK(st != NULL && e == NULL, "bad MLIR compiled");
  const char *msg = tt_status_message(st);
  printf("bad MLIR -> %s\n", msg);
  CHECK(strstr(msg, "frobnicate") != NULL,
        "the plugin's diagnostic is missing: %s", msg);
  tt_status_free(st);
}

static void test_bad_plugin(void) {
  tt_pjrt_options o = {"/nonexistent/libnope_pjrt.so", 1, -1};
  tt_pjrt *p = NULL;
  tt_status st = tt_pjrt_create(&o, &p);
  CHECK(tt_status_code(st) == TT_NOT_FOUND && p == NULL, "got %s",
        tt_status_message(st));
  printf("missing plugin -> %s\n", tt_status_message(st));
  tt_status_free(st);

  // A set but wrong TORCHTPU_PLUGIN_PATH is reported, not skipped.
  const char *old = getenv("TORCHTPU_PLUGIN_PATH");
  char *saved = old ? strdup(old) : NULL;
  setenv("TORCHTPU_PLUGIN_PATH", "/nonexistent/env_plugin.so", 1);
  char path[4096];
  st = tt_pjrt_discover(path, sizeof path);
  CHECK(tt_status_code(st) == TT_NOT_FOUND &&
            strstr(tt_status_message(st), "env_plugin.so"),
        "got %s", tt_status_message(st));
  tt_status_free(st);
  if (saved)
    setenv("TORCHTPU_PLUGIN_PATH", saved, 1);
  else
    unsetenv("TORCHTPU_PLUGIN_PATH");
  free(saved);
}

int main(void) {
  test_compile_options();
  test_bad_plugin();

  // Asynchronous launches first (TPU and GPU plugins always are); the second
  // client below runs the same programs inline.
  tt_pjrt_options o = {NULL, 2, 1};
  tt_pjrt *p = NULL;
  tt_status st = tt_pjrt_create(&o, &p);
  if (st) {
    fprintf(stderr, "%s:%d: FAIL loading the plugin: %s\n", __FILE__,
            __LINE__, tt_status_message(st));
    tt_status_free(st);
    return 1;
  }
  test_info(p);
  tt_pjrt_info info;
  tt_pjrt_info_get(p, &info);
  CHECK(info.asynchronous, "cpu_async=1: the client says it is not asynchronous");
  test_roundtrip(p);
  test_execute(p);
  test_serialize(p);
  test_bad_mlir(p);
  tt_pjrt_destroy(p);

  // A second client of the same (already initialised) plugin, running
  // programs inline on the launching thread (the CPU plugin's option).
  o.cpu_device_count = 1;
  o.cpu_async = 0;
  st = tt_pjrt_create(&o, &p);
  CHECK(st == NULL, "second client: %s", tt_status_message(st));
  tt_status_free(st);
  if (p) {
    tt_pjrt_info_get(p, &info);
    CHECK(info.asynchronous == (strcmp(info.platform, "cpu") != 0),
          "cpu_async=0 on %s: asynchronous=%d", info.platform, info.asynchronous);
    test_roundtrip(p);
    test_execute(p);
  }
  tt_pjrt_destroy(p);

  if (check_failures) {
    fprintf(stderr, "test_pjrt: %d failure(s)\n", check_failures);
    return 1;
  }
  printf("test_pjrt: OK\n");
  return 0;
}
