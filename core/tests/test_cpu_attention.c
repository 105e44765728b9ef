// The CPU attention kernels (kernels/cpu_attention.c) called directly, the
// way the FFI trampoline calls them, against a plain double-precision
// attention written here: forward output and logsumexp, and the backward's
// dq, dk, dv, causal and not, grouped-query heads, head dims with a vector
// tail. Each case runs on every way the work can be spread:
//   - no pool (the kernel's own pthreads);
//   - a pool whose tasks start at once on threads of their own;
//   - a pool that queues its tasks and runs them only after the kernel has
//     returned (a busy pool: the caller must do all the work, and a task
//     that starts late must find the job alive and nothing left to do;
//     the sanitized build catches a use after free);
//   - a pool that refuses every task.
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cpu_attention.h"

// --- pools ------------------------------------------------------------------------------

typedef struct task {
  void (*fn)(void *);
  void *data;
} task;

typedef struct test_pool {
  int mode;  // 0: start now, 1: queue for later, 2: refuse
  task queued[64];
  int nqueued;
} test_pool;

static void *run_task(void *arg) {
  task *t = arg;
  t->fn(t->data);
  free(t);
  return NULL;
}

static bool schedule(void *impl, void (*fn)(void *), void *data) {
  test_pool *p = impl;
  if (p->mode == 2) return false;
  if (p->mode == 1) {
    if (p->nqueued == 64) return false;
    p->queued[p->nqueued++] = (task){fn, data};
    return true;
  }
  task *t = malloc(sizeof *t);
  if (!t) return false;
  *t = (task){fn, data};
  pthread_t tid;
  if (pthread_create(&tid, NULL, run_task, t) != 0) {
    free(t);
    return false;
  }
  pthread_detach(tid);
  return true;
}

// Runs what a "later" pool queued (after the kernel returned).
static void run_queued(test_pool *p) {
  for (int i = 0; i < p->nqueued; i++) p->queued[i].fn(p->queued[i].data);
  p->nqueued = 0;
}

// --- the reference --------------------------------------------------------------------------

typedef struct shape {
  int64_t n, l, s, hq, hk, e, ev;
  int causal;
} shape;

#define Q(x, n, l, h, c, C) x[(((n) * sh->l + (l)) * sh->hq + (h)) * (C) + (c)]
#define K(x, n, j, h, c, C) x[(((n) * sh->s + (j)) * sh->hk + (h)) * (C) + (c)]

// Attention probabilities of query row (n, h, l) into p[S] (0 where hidden).
static void ref_probs(const shape *sh, const float *q, const float *k, float scale, int64_t n,
                      int64_t h, int64_t l, double *p) {
  int64_t hk = h / (sh->hq / sh->hk);
  double m = -INFINITY, sum = 0;
  for (int64_t j = 0; j < sh->s; j++) {
    double dot = 0;
    for (int64_t c = 0; c < sh->e; c++) dot += (double)Q(q, n, l, h, c, sh->e) * K(k, n, j, hk, c, sh->e);
    p[j] = (sh->causal && j > l) ? -INFINITY : scale * dot;
    m = p[j] > m ? p[j] : m;
  }
  for (int64_t j = 0; j < sh->s; j++) sum += p[j] = exp(p[j] - m);
  for (int64_t j = 0; j < sh->s; j++) p[j] /= sum;
}

// Forward and backward of the whole problem, in double.
static void reference(const shape *sh, const float *q, const float *k, const float *v,
                      const float *go, float scale, double *o, double *gq, double *gk,
                      double *gv) {
  double *p = malloc(sizeof(double) * sh->s), *dp = malloc(sizeof(double) * sh->s);
  for (int64_t n = 0; n < sh->n; n++)
    for (int64_t h = 0; h < sh->hq; h++)
      for (int64_t l = 0; l < sh->l; l++) {
        int64_t hk = h / (sh->hq / sh->hk);
        ref_probs(sh, q, k, scale, n, h, l, p);
        double dot_go_o = 0;
        for (int64_t c = 0; c < sh->ev; c++) {
          double acc = 0;
          for (int64_t j = 0; j < sh->s; j++) acc += p[j] * K(v, n, j, hk, c, sh->ev);
          Q(o, n, l, h, c, sh->ev) = acc;
          dot_go_o += acc * Q(go, n, l, h, c, sh->ev);
        }
        for (int64_t j = 0; j < sh->s; j++) {
          dp[j] = 0;
          for (int64_t c = 0; c < sh->ev; c++) {
            dp[j] += (double)Q(go, n, l, h, c, sh->ev) * K(v, n, j, hk, c, sh->ev);
            K(gv, n, j, hk, c, sh->ev) += p[j] * Q(go, n, l, h, c, sh->ev);
          }
          double ds = p[j] * (dp[j] - dot_go_o) * scale;
          for (int64_t c = 0; c < sh->e; c++) {
            Q(gq, n, l, h, c, sh->e) += ds * K(k, n, j, hk, c, sh->e);
            K(gk, n, j, hk, c, sh->e) += ds * Q(q, n, l, h, c, sh->e);
          }
        }
      }
  free(p);
  free(dp);
}

// --- one case ----------------------------------------------------------------------------------

static float *randoms(int64_t count, unsigned *seed) {
  float *x = malloc(sizeof(float) * (size_t)count);
  for (int64_t i = 0; i < count; i++) x[i] = (float)rand_r(seed) / (float)RAND_MAX * 2.0f - 1.0f;
  return x;
}

static double max_diff(const float *got, const double *want, int64_t count) {
  double m = 0;
  for (int64_t i = 0; i < count; i++) m = fmax(m, fabs(got[i] - want[i]));
  return m;
}

static void check_case(const shape *sh, int mode) {
  unsigned seed = 1234;
  int64_t nq = sh->n * sh->l * sh->hq, nk = sh->n * sh->s * sh->hk;
  float *q = randoms(nq * sh->e, &seed), *k = randoms(nk * sh->e, &seed);
  float *v = randoms(nk * sh->ev, &seed), *go = randoms(nq * sh->ev, &seed);
  float scale = 1.0f / sqrtf((float)sh->e);
  double *ro = calloc((size_t)(nq * sh->ev), sizeof(double));
  double *rgq = calloc((size_t)(nq * sh->e), sizeof(double));
  double *rgk = calloc((size_t)(nk * sh->e), sizeof(double));
  double *rgv = calloc((size_t)(nk * sh->ev), sizeof(double));
  reference(sh, q, k, v, go, scale, ro, rgq, rgk, rgv);

  float *o = calloc((size_t)(nq * sh->ev), sizeof(float)), *lse = calloc((size_t)nq, sizeof(float));
  float *gq = calloc((size_t)(nq * sh->e), sizeof(float)), *gk = calloc((size_t)(nk * sh->e), sizeof(float));
  float *gv = calloc((size_t)(nk * sh->ev), sizeof(float));
  int64_t dq[4] = {sh->n, sh->l, sh->hq, sh->e}, dk[4] = {sh->n, sh->s, sh->hk, sh->e};
  int64_t dv[4] = {sh->n, sh->s, sh->hk, sh->ev}, dO[4] = {sh->n, sh->l, sh->hq, sh->ev};
  int64_t dl[3] = {sh->n, sh->hq, sh->l};
  tt_kernel_buffer bq = {TT_F32, 4, dq, q}, bk = {TT_F32, 4, dk, k}, bv = {TT_F32, 4, dv, v};
  tt_kernel_buffer bs = {TT_F32, 0, NULL, &scale}, bo = {TT_F32, 4, dO, o};
  tt_kernel_buffer bl = {TT_F32, 3, dl, lse}, bgo = {TT_F32, 4, dO, go};
  tt_kernel_buffer fwd_in[4] = {bq, bk, bv, bs}, fwd_out[2] = {bo, bl};
  tt_kernel_buffer bwd_in[7] = {bgo, bq, bk, bv, bo, bl, bs};
  tt_kernel_buffer bwd_out[3] = {{TT_F32, 4, dq, gq}, {TT_F32, 4, dk, gk}, {TT_F32, 4, dv, gv}};

  test_pool tp = {.mode = mode};
  tt_kernel_pool pool = {.impl = &tp, .threads = 2, .schedule = schedule};
  const tt_kernel_pool *pp = mode < 0 ? NULL : &pool;
  const char *err = sh->causal ? tt_cpu_attention_fwd_causal(fwd_in, 4, fwd_out, 2, pp)
                               : tt_cpu_attention_fwd(fwd_in, 4, fwd_out, 2, pp);
  CHECK(err == NULL, "forward: %s", err ? err : "");
  run_queued(&tp);
  err = sh->causal ? tt_cpu_attention_bwd_causal(bwd_in, 7, bwd_out, 3, pp)
                   : tt_cpu_attention_bwd(bwd_in, 7, bwd_out, 3, pp);
  CHECK(err == NULL, "backward: %s", err ? err : "");
  run_queued(&tp);

  const char *what = sh->causal ? "causal" : "full";
  double e_o = max_diff(o, ro, nq * sh->ev), e_q = max_diff(gq, rgq, nq * sh->e);
  double e_k = max_diff(gk, rgk, nk * sh->e), e_v = max_diff(gv, rgv, nk * sh->ev);
  CHECK(e_o < 1e-5, "%s pool %d: o off by %g", what, mode, e_o);
  CHECK(e_q < 1e-4, "%s pool %d: dq off by %g", what, mode, e_q);
  CHECK(e_k < 1e-4, "%s pool %d: dk off by %g", what, mode, e_k);
  CHECK(e_v < 1e-4, "%s pool %d: dv off by %g", what, mode, e_v);

  free(q), free(k), free(v), free(go), free(ro), free(rgq), free(rgk), free(rgv);
  free(o), free(lse), free(gq), free(gk), free(gv);
}

int main(void) {
  if (!tt_cpu_attention_supported()) {
    printf("test_cpu_attention: SKIPPED (the kernel is not built for this CPU)\n");
    return 0;
  }
  // 100 x 100 rows: enough work for two threads; e 16 is all vector
  // columns, ev 20 has a tail; 4 query heads share 2 key/value heads. The
  // third: an odd e (the products' even/odd split has a last row), ev 24
  // (16 columns, then 8), key rows in fours with a remainder.
  shape shapes[] = {{2, 100, 100, 4, 2, 16, 20, 1}, {2, 70, 100, 4, 4, 16, 20, 0},
                    {1, 45, 47, 3, 1, 9, 24, 1}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int mode = -1; mode <= 2; mode++) check_case(&shapes[i], mode);
  return check_exit_code();
}
