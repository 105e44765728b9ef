// attention_kernel — our CPU attention kernel (core/src/kernels/
// cpu_attention.c) called directly, as XLA's CPU plugin calls it through the
// FFI, without PyTorch, XLA or a program around it: the kernel's own time,
// which bench/attention_cpu.py's figures include among layout copies and
// launches.
//
//     make build/bench/attention_kernel
//     build/bench/attention_kernel [threads] [batch heads seq head_dim]
//
// Causal forward (o, logsumexp) and backward (dq, dk, dv) on random float32
// inputs in the kernel's [N, L, H, E] layout, 31 calls each; prints the
// median and the fastest ms of each. threads: 1 runs on the calling thread
// alone (a pool that takes no task); any other value lets the kernel start
// threads of its own (one per core), as it does where XLA hands it no pool.
// Defaults: 2 threads, the llama debug model's attention (4 16 128 16).
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/cpu_attention.h"

enum { CALLS = 31 };

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static bool refuse(void *impl, void (*task)(void *), void *data) {
  (void)impl, (void)task, (void)data;
  return false;
}

static float *random_floats(size_t n) {
  float *x = malloc(sizeof *x * n);
  for (size_t i = 0; x && i < n; i++) x[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
  return x;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  int64_t n = 4, h = 16, l = 128, e = 16;
  if (argc > 5) n = atoll(argv[2]), h = atoll(argv[3]), l = atoll(argv[4]), e = atoll(argv[5]);
  if (!tt_cpu_attention_supported()) {
    printf("attention_kernel: the kernel is not built for this CPU\n");
    return 0;
  }
  size_t count = (size_t)(n * l * h * e);
  float *q = random_floats(count), *k = random_floats(count), *v = random_floats(count),
        *go = random_floats(count), *o = random_floats(count), *gq = random_floats(count),
        *gk = random_floats(count), *gv = random_floats(count),
        *lse = random_floats((size_t)(n * h * l));
  if (!q || !k || !v || !go || !o || !gq || !gk || !gv || !lse) {
    fprintf(stderr, "attention_kernel: out of memory\n");
    return 1;
  }
  float scale = 0.25f;
  int64_t dims[4] = {n, l, h, e}, lse_dims[3] = {n, h, l};
  tt_kernel_buffer bq = {TT_F32, 4, dims, q}, bk = {TT_F32, 4, dims, k},
                   bv = {TT_F32, 4, dims, v}, bs = {TT_F32, 0, NULL, &scale},
                   bo = {TT_F32, 4, dims, o}, bl = {TT_F32, 3, lse_dims, lse},
                   bgo = {TT_F32, 4, dims, go};
  tt_kernel_buffer fwd_in[4] = {bq, bk, bv, bs}, fwd_out[2] = {bo, bl};
  tt_kernel_buffer bwd_in[7] = {bgo, bq, bk, bv, bo, bl, bs};
  tt_kernel_buffer bwd_out[3] = {{TT_F32, 4, dims, gq}, {TT_F32, 4, dims, gk},
                                 {TT_F32, 4, dims, gv}};
  const tt_kernel_pool alone = {.threads = 1, .schedule = refuse};
  const tt_kernel_pool *pool = threads == 1 ? &alone : NULL;
  double fwd[CALLS], bwd[CALLS];
  for (int i = -3; i < CALLS; i++) {  // 3 warm-up calls
    double t0 = now_ms();
    const char *err = tt_cpu_attention_fwd_causal(fwd_in, 4, fwd_out, 2, pool);
    double t1 = now_ms();
    if (!err) err = tt_cpu_attention_bwd_causal(bwd_in, 7, bwd_out, 3, pool);
    double t2 = now_ms();
    if (err) {
      fprintf(stderr, "attention_kernel: %s\n", err);
      return 1;
    }
    if (i >= 0) fwd[i] = t1 - t0, bwd[i] = t2 - t1;
  }
  qsort(fwd, CALLS, sizeof fwd[0], cmp);
  qsort(bwd, CALLS, sizeof bwd[0], cmp);
  printf("causal attention [%lld, %lld, %lld, %lld] float32, %s, %d calls: forward %.3f ms "
         "(fastest %.3f), backward %.3f ms (fastest %.3f)\n",
         (long long)n, (long long)l, (long long)h, (long long)e,
         threads == 1 ? "1 thread" : "threads of its own", CALLS, fwd[CALLS / 2], fwd[0],
         bwd[CALLS / 2], bwd[0]);
  return 0;
}
