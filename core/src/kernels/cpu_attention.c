// cpu_attention.c — scaled dot-product attention for XLA's CPU plugin, as a
// C kernel its programs call through the FFI (pjrt/ffi.c's trampoline).
//
// Why a kernel of our own: lowered to StableHLO (lower/attention.c), XLA's
// CPU backend writes the [B, H, L, S] scores, probabilities and their
// gradients to memory some thirty times a training step, and runs the
// batched products with a head dim of 16 in a generic loop; on the llama
// debug model attention took ~2.7x the time of PyTorch's own CPU flash
// kernel. Here each query row's scores live in a buffer of S floats that
// stays in cache: scores, softmax and the two products of a row are done
// before the next row starts, and causally hidden keys are never computed.
//
// Layouts (float32, row-major, what lower/attention.c passes): sequence
// before heads, as models hold them before their transpose(1, 2) (XLA then
// folds lowering's transpose back into theirs instead of copying):
//   q [N, L, Hq, E], k [N, S, Hk, E], v [N, S, Hk, Ev], scale f32[]
//   forward  -> o [N, L, Hq, Ev], lse [N, Hq, L]
//   backward (dO, q, k, v, o, lse, scale) -> dq, dk [N, S, Hk, E], dv
// Query head h reads key/value head h / (Hq / Hk) (grouped-query). Causal:
// query l sees keys s <= l (top-left, like tril). A row that sees no key
// (S == 0) gives output 0 and logsumexp 0, as PyTorch's CPU kernel does.
//
// Work is split into independent items (the forward: blocks of query rows;
// the backward: key/value heads, whose dk and dv sum over their query rows),
// run on the CPU runtime's own thread pool when the FFI hands us one (its
// threads are the ones XLA's loops use, so the cores are not oversubscribed
// while the program's other work runs), else on threads of our own.
#include "kernels/cpu_attention.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

// Compiled for AVX2 + FMA (what the vectorised loops are for), by GCC or
// clang, and registered only where the CPU has them
// (tt_cpu_attention_supported, defined before the target switch so that it
// runs anywhere). Elsewhere the entry points only say they are not built.
#if defined(__x86_64__) && defined(__GNUC__)
#define ATT_BUILT 1
#else
#define ATT_BUILT 0
#endif

#if ATT_BUILT
bool tt_cpu_attention_supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC optimize("O3", "no-trapping-math", "no-math-errno", "fp-contract=fast")
#pragma GCC target("avx2,fma")
#endif

#define ROW_BLOCK 64  // query rows per forward work item
#define KEY_TILE 32   // scores computed per tile, kept in registers
#define BWD_ROWS 8    // query rows whose dk, dv updates are summed in one pass
#define MAX_THREADS 64  // workers a call uses at most

// --- exp -------------------------------------------------------------------------

// exp(x) for x <= 0 (a shifted score), branch- and call-free so that loops
// of it vectorise: Cephes' expf polynomial after x = n ln2 + r, with n
// rounded by adding 1.5 * 2^23 (whose float then holds n in its low bits).
// Below -87 the result is clamped at ~1e-38 rather than 0: it only ever
// adds to a sum that holds exp(0) = 1.
static inline __attribute__((always_inline)) float exp_neg(float x) {
  const float round = 12582912.0f;  // 1.5 * 2^23
  x = x < -87.0f ? -87.0f : x;
  float t = x * 1.44269504088896341f + round, n = t - round;
  int32_t bits;
  memcpy(&bits, &t, sizeof bits);
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t e = (bits - 0x4B400000 + 127) << 23;  // 2^n
  float scale;
  memcpy(&scale, &e, sizeof scale);
  return p * scale;
}

// --- the problem -------------------------------------------------------------------

typedef struct att_dims {
  int64_t n, hk, g, l, s, e, ev;
  int64_t hq;  // hk * g
  int64_t ld;  // the rows of K^T and V^T: s rounded up to KEY_TILE, zero-padded
  float scale;
  int causal;
} att_dims;

// Where rows start: query-side tensors are [N, L, Hq, C], key-side ones
// [N, S, Hk, C]; a row's next (l + 1, j + 1) is hq * C, hk * C floats on.
static int64_t qrow(const att_dims *d, int64_t n, int64_t h, int64_t l, int64_t c) {
  return ((n * d->l + l) * d->hq + h) * c;
}

static int64_t krow(const att_dims *d, int64_t n, int64_t hk, int64_t j, int64_t c) {
  return ((n * d->s + j) * d->hk + hk) * c;
}

// The keys query row l sees: [0, keys(l)).
static int64_t keys(const att_dims *d, int64_t l) {
  if (!d->causal) return d->s;
  return l + 1 < d->s ? l + 1 : d->s;
}

// out = x^T ([cols, ld], the columns past rows zero): x [rows, cols], its
// rows `stride` floats apart. Row by row: each row of x is read once, in
// order (its columns one after another would touch every row's cache line
// once per column).
static void transpose(const float *x, int64_t rows, int64_t cols, int64_t stride, int64_t ld,
                      float *out) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) out[c * ld + r] = x[r * stride + c];
  for (int64_t c = 0; c < cols; c++)
    memset(out + c * ld + rows, 0, sizeof *out * (size_t)(ld - rows));
}

// dst [rows, cols] = the rows of x, `stride` floats apart, made contiguous:
// a head's rows in the [N, S, Hk, C] layout are Hk * C floats apart, a
// stride at which few of them share the L1 cache.
static void gather_rows(const float *x, int64_t rows, int64_t cols, int64_t stride,
                        float *dst) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = x[r * stride + c];
}

// The reverse: x [rows, cols] contiguous to rows of dst `stride` floats apart.
static void scatter_rows(const float *x, int64_t rows, int64_t cols, int64_t stride,
                         float *dst) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dst[r * stride + c] = x[r * cols + c];
}

// Eight floats in a register (GCC's vector extension: AVX here, SSE pairs
// or plain code where the target has less). Loaded and stored with memcpy:
// unaligned, and without type-punned pointers.
typedef float v8 __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) v8 load8(const float *p) {
  v8 v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline __attribute__((always_inline)) void store8(float *p, v8 v) {
  memcpy(p, &v, sizeof v);
}

// out[j] = scale * (x . y_j) for j < n rounded up to KEY_TILE (<= ld: the
// padding of yt), yt = y^T [e, ld]: KEY_TILE products at a time. Even and
// odd i go to two sets of four registers: a single set makes each sum wait
// on its previous FMA (4 cycles), leaving the FMA units half idle.
static void row_products(const float *x, const float *yt, int64_t e, int64_t ld, int64_t n,
                         float scale, float *out) {
  for (int64_t j0 = 0; j0 < n; j0 += KEY_TILE) {
    v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
    int64_t i = 0;
    for (; i + 2 <= e; i += 2) {
      const float xa = x[i], xb = x[i + 1], *ya = yt + i * ld + j0, *yb = ya + ld;
      a0 += xa * load8(ya);
      a1 += xa * load8(ya + 8);
      a2 += xa * load8(ya + 16);
      a3 += xa * load8(ya + 24);
      b0 += xb * load8(yb);
      b1 += xb * load8(yb + 8);
      b2 += xb * load8(yb + 16);
      b3 += xb * load8(yb + 24);
    }
    if (i < e) {
      const float xa = x[i], *ya = yt + i * ld + j0;
      a0 += xa * load8(ya);
      a1 += xa * load8(ya + 8);
      a2 += xa * load8(ya + 16);
      a3 += xa * load8(ya + 24);
    }
    store8(out + j0, (a0 + b0) * scale);
    store8(out + j0 + 8, (a1 + b1) * scale);
    store8(out + j0 + 16, (a2 + b2) * scale);
    store8(out + j0 + 24, (a3 + b3) * scale);
  }
}

// out[:c] = scale * sum_j w[j] * y[j, :c] for j < n (y's rows `ys` floats apart):
// 16 columns (a cache line) at a time, then 8, each summed over j in four
// sets of registers (j mod 4) so that an FMA does not wait on the one before
// it (4 cycles); the rest one by one.
static void weighted_rows(const float *w, const float *y, int64_t n, int64_t c, int64_t ys,
                          float scale, float *out) {
  int64_t i0 = 0;
  for (; i0 + 16 <= c; i0 += 16) {
    v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
    const float *yj = y + i0;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4, yj += 4 * ys) {
      a0 += w[j] * load8(yj);
      b0 += w[j] * load8(yj + 8);
      a1 += w[j + 1] * load8(yj + ys);
      b1 += w[j + 1] * load8(yj + ys + 8);
      a2 += w[j + 2] * load8(yj + 2 * ys);
      b2 += w[j + 2] * load8(yj + 2 * ys + 8);
      a3 += w[j + 3] * load8(yj + 3 * ys);
      b3 += w[j + 3] * load8(yj + 3 * ys + 8);
    }
    for (; j < n; j++, yj += ys) {
      a0 += w[j] * load8(yj);
      b0 += w[j] * load8(yj + 8);
    }
    store8(out + i0, ((a0 + a1) + (a2 + a3)) * scale);
    store8(out + i0 + 8, ((b0 + b1) + (b2 + b3)) * scale);
  }
  for (; i0 + 8 <= c; i0 += 8) {
    v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    const float *yj = y + i0;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4, yj += 4 * ys) {
      a0 += w[j] * load8(yj);
      a1 += w[j + 1] * load8(yj + ys);
      a2 += w[j + 2] * load8(yj + 2 * ys);
      a3 += w[j + 3] * load8(yj + 3 * ys);
    }
    for (; j < n; j++, yj += ys) a0 += w[j] * load8(yj);
    store8(out + i0, ((a0 + a1) + (a2 + a3)) * scale);
  }
  for (int64_t i = i0; i < c; i++) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; j++) acc += w[j] * y[j * ys + i];
    out[i] = acc * scale;
  }
}

// out[j, :c] += sum_r w[r, j] * x[r, :c] for j < n, r < rows (rows of out
// `os` floats apart, of w ld, of x xs): the rows' rank-1 updates, four out
// rows at a time (eight independent sums per 16 columns, each x row loaded
// once for the four), each out row loaded and stored once.
static void rank_updates(float *out, int64_t os, const float *w, int64_t ld, int rows,
                         const float *x, int64_t xs, int64_t n, int64_t c) {
  int64_t i0 = 0;
  for (; i0 + 16 <= c; i0 += 16) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      float *o = out + j * os + i0;
      v8 a0 = load8(o), b0 = load8(o + 8), a1 = load8(o + os), b1 = load8(o + os + 8),
         a2 = load8(o + 2 * os), b2 = load8(o + 2 * os + 8), a3 = load8(o + 3 * os),
         b3 = load8(o + 3 * os + 8);
      for (int r = 0; r < rows; r++) {
        const float *wr = w + r * ld + j, *xr = x + r * xs + i0;
        const v8 xa = load8(xr), xb = load8(xr + 8);
        a0 += wr[0] * xa;
        b0 += wr[0] * xb;
        a1 += wr[1] * xa;
        b1 += wr[1] * xb;
        a2 += wr[2] * xa;
        b2 += wr[2] * xb;
        a3 += wr[3] * xa;
        b3 += wr[3] * xb;
      }
      store8(o, a0);
      store8(o + 8, b0);
      store8(o + os, a1);
      store8(o + os + 8, b1);
      store8(o + 2 * os, a2);
      store8(o + 2 * os + 8, b2);
      store8(o + 3 * os, a3);
      store8(o + 3 * os + 8, b3);
    }
    for (; j < n; j++) {
      float *o = out + j * os + i0;
      v8 a0 = load8(o), b0 = load8(o + 8);
      for (int r = 0; r < rows; r++) {
        const float wr = w[r * ld + j], *xr = x + r * xs + i0;
        a0 += wr * load8(xr);
        b0 += wr * load8(xr + 8);
      }
      store8(o, a0);
      store8(o + 8, b0);
    }
  }
  for (int64_t j = 0; j < n && i0 < c; j++)
    for (int r = 0; r < rows; r++)
      for (int64_t i = i0; i < c; i++) out[j * os + i] += w[r * ld + j] * x[r * xs + i];
}

// max and sum of x[:n] over 8 lanes (without -ffast-math the compiler
// keeps a plain loop's order, one element at a time).
static float row_max(const float *x, int64_t n) {
  float m8[8];
  for (int i = 0; i < 8; i++) m8[i] = -INFINITY;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int i = 0; i < 8; i++) m8[i] = x[j + i] > m8[i] ? x[j + i] : m8[i];
  float m = -INFINITY;
  for (; j < n; j++) m = x[j] > m ? x[j] : m;
  for (int i = 0; i < 8; i++) m = m8[i] > m ? m8[i] : m;
  return m;
}

static float row_sum(const float *x, int64_t n) {
  float s8[8] = {0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int i = 0; i < 8; i++) s8[i] += x[j + i];
  float s = 0.0f;
  for (; j < n; j++) s += x[j];
  for (int i = 0; i < 8; i++) s += s8[i];
  return s;
}

// --- threads -------------------------------------------------------------------------

typedef void item_fn(const void *ctx, int64_t begin, int64_t end, float *scratch, int *failed);

static int cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  int n = CPU_COUNT(&set);
  return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
}

// Threads worth starting for `flops` of work over `items` items, at most
// `limit`: below ~1 MFLOP a thread's start costs more than it saves.
static int threads_for(double flops, int64_t items, int limit) {
  int64_t by_work = (int64_t)(flops / 1e6) + 1;
  int nt = limit;
  if (nt > items) nt = (int)items;
  if (nt > by_work) nt = (int)by_work;
  return nt < 1 ? 1 : nt;
}

// --- on a pool -----------------------------------------------------------------------
//
// The calling thread and the tasks it queues on the pool (the runtime's, or
// spawn_pool's threads of our own) claim chunks of items from a shared
// counter. The caller waits only for chunks that were claimed, so a
// task the pool starts late (its threads busy, or the caller one of them)
// finds nothing left and never holds the call up. The job lives on the
// heap, freed by whichever of the caller and its tasks lets go last: a late
// task still reads its counter after the call has returned.

typedef struct pool_job {
  item_fn *fn;
  const void *ctx;
  int64_t items, chunk, chunks;
  size_t scratch_floats;
  atomic_llong next;  // the next chunk to claim
  atomic_int refs;    // the caller and the tasks that were queued
  atomic_int failed;
  pthread_mutex_t mu;
  pthread_cond_t all_done;
  int64_t done;  // chunks finished (under mu)
} pool_job;

static void job_release(pool_job *j) {
  if (atomic_fetch_sub(&j->refs, 1) != 1) return;
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->all_done);
  free(j);
}

// Runs chunks until none is left to claim; *scratch is made on first need.
static void job_work(pool_job *j, float **scratch) {
  for (;;) {
    int64_t c = atomic_fetch_add(&j->next, 1);
    if (c >= j->chunks) return;
    if (!*scratch) *scratch = malloc(sizeof(float) * (j->scratch_floats + 1));
    int failed = !*scratch;
    if (*scratch) {
      int64_t end = (c + 1) * j->chunk < j->items ? (c + 1) * j->chunk : j->items;
      j->fn(j->ctx, c * j->chunk, end, *scratch, &failed);
    }
    if (failed) atomic_store(&j->failed, 1);
    pthread_mutex_lock(&j->mu);
    if (++j->done == j->chunks) pthread_cond_signal(&j->all_done);
    pthread_mutex_unlock(&j->mu);
  }
}

static void job_task(void *data) {
  pool_job *j = data;
  float *scratch = NULL;
  job_work(j, &scratch);
  free(scratch);
  job_release(j);
}

// Runs fn over [0, items) with nt workers, this thread and nt - 1 tasks on
// `pool`; 1 when all ran, 0 when a worker could not (no memory for its
// scratch), -1 when no job could be made (no memory).
static int pool_items(const tt_kernel_pool *pool, item_fn *fn, const void *ctx, int64_t items,
                      size_t scratch_floats, int nt) {
  pool_job *j = calloc(1, sizeof *j);
  if (!j) return -1;
  int64_t chunks = items < 4 * nt ? items : 4 * nt;  // a late thread's share stays small
  j->fn = fn;
  j->ctx = ctx;
  j->items = items;
  j->chunk = (items + chunks - 1) / chunks;
  j->chunks = (items + j->chunk - 1) / j->chunk;
  j->scratch_floats = scratch_floats;
  atomic_init(&j->next, 0);
  atomic_init(&j->refs, 1);
  atomic_init(&j->failed, 0);
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->all_done, NULL);
  for (int t = 1; t < nt; t++) {
    atomic_fetch_add(&j->refs, 1);
    if (!pool->schedule(pool->impl, job_task, j)) atomic_fetch_sub(&j->refs, 1);
  }
  float *scratch = NULL;
  job_work(j, &scratch);
  free(scratch);
  pthread_mutex_lock(&j->mu);
  while (j->done < j->chunks) pthread_cond_wait(&j->all_done, &j->mu);
  pthread_mutex_unlock(&j->mu);
  int ok = !atomic_load(&j->failed);
  job_release(j);
  return ok;
}

// Where no pool is handed in: each task on a thread of its own, started now.
static void *spawned(void *arg) {
  job_task(arg);
  return NULL;
}

static bool spawn(void *impl, void (*task)(void *), void *data) {
  (void)impl, (void)task;  // task is always job_task
  pthread_t tid;
  if (pthread_create(&tid, NULL, spawned, data) != 0) return false;
  pthread_detach(tid);
  return true;
}

// Runs fn over [0, items) on `pool`, or on threads of our own when there is
// none; false when a worker could not run (no memory).
static bool parallel_items(const tt_kernel_pool *pool, item_fn *fn, const void *ctx,
                           int64_t items, size_t scratch_floats, double flops) {
  int cpus = cpu_count();
  const tt_kernel_pool spawn_pool = {.threads = cpus, .schedule = spawn};
  if (!pool || pool->threads <= 0) pool = &spawn_pool;
  int limit = pool->threads < cpus ? pool->threads : cpus;
  return pool_items(pool, fn, ctx, items, scratch_floats, threads_for(flops, items, limit)) == 1;
}

// --- forward ---------------------------------------------------------------------------

typedef struct fwd_ctx {
  att_dims d;
  const float *q, *k, *v;
  float *o, *lse;
} fwd_ctx;

// Query row l of head h of batch n: o = softmax(scale q K^T) V, lse = log
// sum exp(scale q K^T). kt: the head's K^T; v: its V, rows ev floats apart.
static void fwd_row(const fwd_ctx *c, int64_t n, int64_t h, int64_t l, const float *kt,
                    const float *v, float *p) {
  const att_dims *d = &c->d;
  int64_t nk = keys(d, l);
  float *o = c->o + qrow(d, n, h, l, d->ev), *lse = c->lse + (n * d->hq + h) * d->l + l;
  if (nk == 0) {
    memset(o, 0, sizeof *o * (size_t)d->ev);
    *lse = 0.0f;
    return;
  }
  row_products(c->q + qrow(d, n, h, l, d->e), kt, d->e, d->ld, nk, d->scale, p);
  float m = row_max(p, nk);
  if (!isfinite(m)) m = 0.0f;  // inf/nan scores: let them propagate as PyTorch's do
  for (int64_t j = 0; j < nk; j++) p[j] = exp_neg(p[j] - m);
  float sum = row_sum(p, nk);
  weighted_rows(p, v, nk, d->ev, d->ev, 1.0f / sum, o);
  *lse = m + logf(sum);
}

// Items: (n, h, block of ROW_BLOCK query rows). Scratch: K^T, V, a row's
// scores.
static void fwd_items(const void *vctx, int64_t begin, int64_t end, float *scratch,
                      int *failed) {
  (void)failed;
  const fwd_ctx *c = vctx;
  const att_dims *d = &c->d;
  int64_t blocks = (d->l + ROW_BLOCK - 1) / ROW_BLOCK;
  float *kt = scratch, *v = kt + d->ld * d->e, *p = v + d->s * d->ev;
  int64_t kv_loaded = -1;
  for (int64_t it = begin; it < end; it++) {
    int64_t b = it % blocks, h = it / blocks % d->hq, n = it / blocks / d->hq;
    int64_t hk = h / d->g;
    if (n * d->hk + hk != kv_loaded) {
      transpose(c->k + krow(d, n, hk, 0, d->e), d->s, d->e, d->hk * d->e, d->ld, kt);
      gather_rows(c->v + krow(d, n, hk, 0, d->ev), d->s, d->ev, d->hk * d->ev, v);
      kv_loaded = n * d->hk + hk;
    }
    int64_t l0 = b * ROW_BLOCK, l1 = l0 + ROW_BLOCK < d->l ? l0 + ROW_BLOCK : d->l;
    for (int64_t l = l0; l < l1; l++) fwd_row(c, n, h, l, kt, v, p);
  }
}

// --- backward ------------------------------------------------------------------------------

typedef struct bwd_ctx {
  att_dims d;
  const float *go, *q, *k, *v, *o, *lse;
  float *gq, *gk, *gv;
} bwd_ctx;

// A backward item's scratch: its key/value head's K^T, V^T and K (rows
// contiguous), the dk and dv it sums, and a block's P and dS.
typedef struct bwd_scratch {
  float *kt, *vt, *k, *gk, *gv, *p, *ds;
} bwd_scratch;

static size_t bwd_scratch_floats(const att_dims *d) {
  return (size_t)(d->ld * (d->e + d->ev + 2 * BWD_ROWS) + d->s * (2 * d->e + d->ev));
}

static bwd_scratch bwd_scratch_at(const att_dims *d, float *f) {
  bwd_scratch w;
  w.kt = f;
  w.vt = w.kt + d->ld * d->e;
  w.p = w.vt + d->ld * d->ev;
  w.ds = w.p + BWD_ROWS * d->ld;
  w.k = w.ds + BWD_ROWS * d->ld;
  w.gk = w.k + d->s * d->e;
  w.gv = w.gk + d->s * d->e;
  return w;
}

// Query rows [l0, l1) (at most BWD_ROWS) of head h of batch n,
// FlashAttention-2's backward: P = exp(scale q K^T - lse), dP = dO V^T,
// dS = P (dP - dO . o); dq = scale dS K, dk += scale dS^T q, dv += P^T dO.
// P and dS of the block's rows are kept (zero past each row's keys) so that
// dk and dv take all the rows' updates in one pass over their rows.
static void bwd_rows(const bwd_ctx *c, int64_t n, int64_t h, int64_t l0, int64_t l1,
                     const bwd_scratch *w) {
  const att_dims *d = &c->d;
  int64_t e = d->e, ev = d->ev;
  int rows = (int)(l1 - l0);
  int64_t nmax = keys(d, l1 - 1);
  for (int r = 0; r < rows; r++) {
    int64_t l = l0 + r, nk = keys(d, l);
    const float *q = c->q + qrow(d, n, h, l, e), *go = c->go + qrow(d, n, h, l, ev),
                *o = c->o + qrow(d, n, h, l, ev);
    float *pr = w->p + r * d->ld, *dsr = w->ds + r * d->ld, dsum = 0.0f;
    float lse = c->lse[(n * d->hq + h) * d->l + l];
    for (int64_t i = 0; i < ev; i++) dsum += go[i] * o[i];
    row_products(q, w->kt, e, d->ld, nk, d->scale, pr);
    row_products(go, w->vt, ev, d->ld, nk, 1.0f, dsr);
    for (int64_t j = 0; j < nk; j++) {
      pr[j] = exp_neg(pr[j] - lse);
      dsr[j] = pr[j] * (dsr[j] - dsum) * d->scale;  // dS, scaled for dq and dk
    }
    for (int64_t j = nk; j < nmax; j++) pr[j] = dsr[j] = 0.0f;
    weighted_rows(dsr, w->k, nk, e, e, 1.0f, c->gq + qrow(d, n, h, l, e));
  }
  rank_updates(w->gk, e, w->ds, d->ld, rows, c->q + qrow(d, n, h, l0, e), d->hq * e, nmax, e);
  rank_updates(w->gv, ev, w->p, d->ld, rows, c->go + qrow(d, n, h, l0, ev), d->hq * ev, nmax,
               ev);
}

// Items: (n, hk); each sums the gradients of its G query heads into its own
// dk and dv, in scratch (contiguous rows), then writes them out.
static void bwd_items(const void *vctx, int64_t begin, int64_t end, float *scratch,
                      int *failed) {
  (void)failed;
  const bwd_ctx *c = vctx;
  const att_dims *d = &c->d;
  const bwd_scratch w = bwd_scratch_at(d, scratch);
  for (int64_t it = begin; it < end; it++) {
    int64_t n = it / d->hk, hk = it % d->hk;
    const float *k = c->k + krow(d, n, hk, 0, d->e), *v = c->v + krow(d, n, hk, 0, d->ev);
    gather_rows(k, d->s, d->e, d->hk * d->e, w.k);
    transpose(w.k, d->s, d->e, d->e, d->ld, w.kt);  // from the contiguous copy
    transpose(v, d->s, d->ev, d->hk * d->ev, d->ld, w.vt);
    memset(w.gk, 0, sizeof(float) * (size_t)(d->s * (d->e + d->ev)));  // gk and gv
    for (int64_t h = hk * d->g; h < (hk + 1) * d->g; h++)
      for (int64_t l0 = 0; l0 < d->l; l0 += BWD_ROWS)
        bwd_rows(c, n, h, l0, l0 + BWD_ROWS < d->l ? l0 + BWD_ROWS : d->l, &w);
    scatter_rows(w.gk, d->s, d->e, d->hk * d->e, c->gk + krow(d, n, hk, 0, d->e));
    scatter_rows(w.gv, d->s, d->ev, d->hk * d->ev, c->gv + krow(d, n, hk, 0, d->ev));
  }
}

// --- the kernels' entry points ---------------------------------------------------------------

static bool is_f32(const tt_kernel_buffer *b, int rank) {
  return b->dtype == TT_F32 && b->rank == rank;
}

// Reads the sizes from q [N, L, Hq, E], k [N, S, Hk, E], v [N, S, Hk, Ev]
// and the scale; NULL when they fit, else why not.
static const char *read_dims(const tt_kernel_buffer *q, const tt_kernel_buffer *k,
                             const tt_kernel_buffer *v, const tt_kernel_buffer *scale,
                             int causal, att_dims *d) {
  if (!is_f32(q, 4) || !is_f32(k, 4) || !is_f32(v, 4) || !is_f32(scale, 0))
    return "expected float32 q [N, L, Hq, E], k [N, S, Hk, E], v [N, S, Hk, Ev], a scale []";
  *d = (att_dims){.n = q->dims[0], .l = q->dims[1], .hq = q->dims[2], .e = q->dims[3],
                  .s = k->dims[1], .hk = k->dims[2], .ev = v->dims[3],
                  .scale = *(const float *)scale->data, .causal = causal};
  d->ld = (d->s + KEY_TILE - 1) / KEY_TILE * KEY_TILE;
  if (k->dims[0] != d->n || v->dims[0] != d->n || v->dims[1] != d->s || v->dims[2] != d->hk ||
      k->dims[3] != d->e || d->hk <= 0 || d->hq % d->hk != 0)
    return "query, key and value sizes disagree";
  d->g = d->hq / d->hk;
  return NULL;
}

static const char *forward(const tt_kernel_buffer *ins, int32_t nin, tt_kernel_buffer *outs,
                           int32_t nout, const tt_kernel_pool *pool, int causal) {
  if (nin != 4 || nout != 2) return "expected 4 inputs (q, k, v, scale) and 2 outputs";
  fwd_ctx c = {.q = ins[0].data, .k = ins[1].data, .v = ins[2].data, .o = outs[0].data,
               .lse = outs[1].data};
  const char *err = read_dims(&ins[0], &ins[1], &ins[2], &ins[3], causal, &c.d);
  if (err) return err;
  const att_dims *d = &c.d;
  int64_t blocks = (d->l + ROW_BLOCK - 1) / ROW_BLOCK, items = d->n * d->hq * blocks;
  if (items == 0) return NULL;
  double flops = 2.0 * (double)(d->n * d->hq * d->l) * (double)d->s * (double)(d->e + d->ev);
  size_t scratch = (size_t)(d->ld * (d->e + 1) + d->s * d->ev);
  if (!parallel_items(pool, fwd_items, &c, items, scratch, flops))
    return "out of host memory for the attention kernel's scratch";
  return NULL;
}

static const char *backward(const tt_kernel_buffer *ins, int32_t nin, tt_kernel_buffer *outs,
                            int32_t nout, const tt_kernel_pool *pool, int causal) {
  if (nin != 7 || nout != 3)
    return "expected 7 inputs (dO, q, k, v, o, lse, scale) and 3 outputs";
  bwd_ctx c = {.go = ins[0].data, .q = ins[1].data, .k = ins[2].data, .v = ins[3].data,
               .o = ins[4].data, .lse = ins[5].data, .gq = outs[0].data, .gk = outs[1].data,
               .gv = outs[2].data};
  const char *err = read_dims(&ins[1], &ins[2], &ins[3], &ins[6], causal, &c.d);
  if (err) return err;
  const att_dims *d = &c.d;
  int64_t items = d->n * d->hk;
  if (items == 0) return NULL;
  double flops = 4.0 * (double)(d->n * d->hq * d->l) * (double)d->s * (double)(d->e + d->ev);
  if (!parallel_items(pool, bwd_items, &c, items, bwd_scratch_floats(d), flops))
    return "out of host memory for the attention kernel's scratch";
  return NULL;
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#else  // !ATT_BUILT

bool tt_cpu_attention_supported(void) { return false; }

// What the entry points below run here: they only say the kernel is not built.
static const char *forward(const tt_kernel_buffer *ins, int32_t nin, tt_kernel_buffer *outs,
                           int32_t nout, const tt_kernel_pool *pool, int causal) {
  (void)ins, (void)nin, (void)outs, (void)nout, (void)pool, (void)causal;
  return "the CPU attention kernel is built only for x86-64 (AVX2 + FMA)";
}

static const char *backward(const tt_kernel_buffer *ins, int32_t nin, tt_kernel_buffer *outs,
                            int32_t nout, const tt_kernel_pool *pool, int causal) {
  return forward(ins, nin, outs, nout, pool, causal);
}

#endif  // ATT_BUILT

const char *tt_cpu_attention_fwd(const tt_kernel_buffer *ins, int32_t nin,
                                 tt_kernel_buffer *outs, int32_t nout,
                                 const tt_kernel_pool *pool) {
  return forward(ins, nin, outs, nout, pool, 0);
}

const char *tt_cpu_attention_fwd_causal(const tt_kernel_buffer *ins, int32_t nin,
                                        tt_kernel_buffer *outs, int32_t nout,
                                        const tt_kernel_pool *pool) {
  return forward(ins, nin, outs, nout, pool, 1);
}

const char *tt_cpu_attention_bwd(const tt_kernel_buffer *ins, int32_t nin,
                                 tt_kernel_buffer *outs, int32_t nout,
                                 const tt_kernel_pool *pool) {
  return backward(ins, nin, outs, nout, pool, 0);
}

const char *tt_cpu_attention_bwd_causal(const tt_kernel_buffer *ins, int32_t nin,
                                        tt_kernel_buffer *outs, int32_t nout,
                                        const tt_kernel_pool *pool) {
  return backward(ins, nin, outs, nout, pool, 1);
}
