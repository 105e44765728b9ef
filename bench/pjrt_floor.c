// pjrt_floor — what the plugin alone costs for one tiny op, without PyTorch
// or our runtime: a compiled float32[1024] add executed on two resident
// buffers, its completion event and output buffer destroyed, as strict eager
// does per op. Prints the median microseconds per op over 21 blocks, with
// and without the completion event. bench/op_latency.py --floor runs it
// (make build/bench/pjrt_floor) to show the floor beside its own figures.
//
//     build/bench/pjrt_floor [ops per block]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pjrt/pjrt.h"

enum { BLOCKS = 21, N = 1024 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// Median microseconds per op of `iters` launches per block.
static double median_us(tt_pjrt *p, tt_pjrt_exe *e, tt_pjrt_buffer *const *args, int iters,
                        bool with_event) {
  double t[BLOCKS];
  for (int k = 0; k < BLOCKS; k++) {
    double t0 = now();
    for (int i = 0; i < iters; i++) {
      tt_pjrt_buffer *out = NULL;
      tt_pjrt_event *ev = NULL;
      tt_status st = tt_pjrt_execute(p, e, 0, args, 2, NULL, &out, with_event ? &ev : NULL);
      if (st) {
        fprintf(stderr, "execute: %s\n", tt_status_message(st));
        exit(1);
      }
      if (ev) tt_pjrt_event_destroy(p, ev);
      tt_pjrt_buffer_destroy(p, out);
    }
    t[k] = (now() - t0) / iters * 1e6;
  }
  qsort(t, BLOCKS, sizeof t[0], cmp);
  return t[BLOCKS / 2];
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 2000;
  tt_pjrt_options o = {.plugin_path = NULL, .cpu_device_count = 1, .cpu_async = 0};
  tt_pjrt *p = NULL;
  tt_status st = tt_pjrt_create(&o, &p);
  static const char kAdd[] =
      "func.func @main(%a: tensor<1024xf32>, %b: tensor<1024xf32>) -> tensor<1024xf32> {\n"
      "  %c = stablehlo.add %a, %b : tensor<1024xf32>\n"
      "  return %c : tensor<1024xf32>\n"
      "}\n";
  tt_pjrt_exe *e = NULL;
  if (!st) st = tt_pjrt_compile(p, kAdd, strlen(kAdd), &e);
  static float host[N];
  int64_t n = N;
  tt_pjrt_buffer *args[2] = {NULL, NULL};
  for (int i = 0; i < 2 && !st; i++) st = tt_pjrt_buffer_from_host(p, 0, TT_F32, &n, 1, host, &args[i]);
  if (st) {
    fprintf(stderr, "pjrt_floor: %s\n", tt_status_message(st));
    return 1;
  }
  median_us(p, e, args, iters, true);  // warm up
  printf("execute + event + output destroy: %.2f us/op\n", median_us(p, e, args, iters, true));
  printf("execute + output destroy (no event): %.2f us/op\n", median_us(p, e, args, iters, false));
  return 0;
}
