// test_hlo.c — the StableHLO builder against the real XLA CPU plugin.
//
// Each test builds a small program with hlo.h, compiles and runs it through
// pjrt.h, and compares the outputs with values computed here in plain C:
// elementwise ops and constants (inf, nan, -0, bf16, f16, wrapped ints),
// broadcast/reshape/transpose/slice/pad/concat/reverse/dynamic slices,
// dot_general, reduce, argreduce (NaN and ties), gather, scatter, iota,
// convert, compare/select, clamp, chlo.erf, rng_bit_generator. Also checks
// that builder errors are sticky statuses, not crashes.
//
// Build and run (from the repository root):
//   gcc -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -g -Icore/include
//       -Icore/src core/src/base/*.c core/src/hlo/*.c core/src/pjrt/*.c
//       core/tests/test_hlo.c -o build/test_hlo -ldl -lpthread -lm
//   TORCHTPU_PLUGIN_PATH=/path/to/pjrt_c_api_cpu_plugin.so build/test_hlo
// Add -fsanitize=address,undefined for the sanitizer run; TT_HLO_PRINT=1
// prints every program.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "hlo/hlo.h"
#include "pjrt/pjrt.h"
#include "check.h"

static tt_pjrt *g_pjrt = NULL;



// --- running a program ----------------------------------------------------------------

// Reads element i of a host array of dtype d as a double.
static double elem(tt_dtype d, const void *p, int64_t i) {
  switch (d) {
    case TT_BOOL: case TT_U8: return ((const uint8_t *)p)[i];
    case TT_I8: return ((const int8_t *)p)[i];
    case TT_I16: return ((const int16_t *)p)[i];
    case TT_I32: return ((const int32_t *)p)[i];
    case TT_I64: return (double)((const int64_t *)p)[i];
    case TT_U16: return ((const uint16_t *)p)[i];
    case TT_U32: return ((const uint32_t *)p)[i];
    case TT_U64: return (double)((const uint64_t *)p)[i];
    case TT_F32: return ((const float *)p)[i];
    case TT_F64: return ((const double *)p)[i];
    case TT_F16: case TT_BF16: {
      uint16_t h = ((const uint16_t *)p)[i];
      if (d == TT_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
      }
      int e = (h >> 10) & 31, m = h & 1023;
      double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                  : ldexp(m + 1024, e - 25);
      return (h & 0x8000) ? -v : v;
    }
    default: return NAN;
  }
}

typedef struct prog {
  tt_hlo *b;
  int nparams;
  const void *inputs[16];  // host data per parameter, borrowed
  tt_hlo_type types[16];
} prog;

static void prog_init(prog *p) {
  memset(p, 0, sizeof *p);
  tt_status st = tt_hlo_create(&p->b);
  if (st) {
    fprintf(stderr, "tt_hlo_create: %s\n", tt_status_message(st));
    exit(2);
  }
}

static tt_hv prog_param(prog *p, tt_dtype d, int rank, const int64_t *dims,
                        const void *host) {
  tt_hlo_type t = tt_hlo_make_type(d, rank, dims);
  p->inputs[p->nparams] = host;
  p->types[p->nparams++] = t;
  return tt_hlo_param(p->b, &t);
}

// Compiles and runs the program; writes each result, widened to double, into
// outs[i] (capacity cap elements each). Returns false (after reporting) on
// any failure.
static bool prog_run_at(const char *file, int line, prog *p, const tt_hv *res,
                        int n, double **outs, int cap) {
  const char *text;
  size_t len;
  tt_pjrt_exe *e = NULL;
  tt_pjrt_buffer *in[16] = {0}, *out[8] = {0};
  tt_status st = tt_hlo_finish(p->b, res, n, &text, &len);
  if (!st && getenv("TT_HLO_PRINT")) printf("%s\n", text);
  if (!st) st = tt_pjrt_compile(g_pjrt, text, len, &e);
  for (int i = 0; !st && i < p->nparams; i++)
    st = tt_pjrt_buffer_from_host(g_pjrt, 0, p->types[i].dtype, p->types[i].dims,
                                  p->types[i].rank, p->inputs[i], &in[i]);
  if (!st) st = tt_pjrt_execute(g_pjrt, e, 0, in, p->nparams, NULL, out, NULL);
  for (int i = 0; !st && i < n; i++) {
    const tt_hlo_type *t = tt_hlo_type_of(p->b, res[i]);
    int64_t numel = tt_hlo_numel(t);
    size_t nbytes = (size_t)(numel * tt_dtype_size(t->dtype));
    void *host = malloc(nbytes ? nbytes : 1);
    st = tt_pjrt_buffer_to_host(g_pjrt, out[i], host, nbytes);
    for (int64_t j = 0; j < numel && j < cap; j++) outs[i][j] = elem(t->dtype, host, j);
    free(host);
  }
  for (int i = 0; i < p->nparams; i++) tt_pjrt_buffer_destroy(g_pjrt, in[i]);
  for (int i = 0; i < n; i++) tt_pjrt_buffer_destroy(g_pjrt, out[i]);
  tt_pjrt_exe_destroy(g_pjrt, e);
  if (st) {
    fprintf(stderr, "%s:%d: FAIL running program: %s\n", file, line,
            tt_status_message(st));
    if (!getenv("TT_HLO_PRINT") && tt_hlo_status(p->b) == NULL && text)
      fprintf(stderr, "%s\n", text);
    tt_status_free(st);
    check_failures++;
  }
  tt_hlo_destroy(p->b);
  p->b = NULL;
  return st == NULL;
}
#define prog_run(p, res, n, outs, cap) \
  prog_run_at(__FILE__, __LINE__, (p), (res), (n), (outs), (cap))

static const int64_t k23[2] = {2, 3};

// --- elementwise, constants, convert ----------------------------------------------------

// y = exp(x) * s + sqrt(|x|) - tanh(x), with s a 0-d runtime parameter.
static void test_elementwise(void) {
  static const float x[6] = {-1.5f, -0.25f, 0, 0.5f, 2, 3.75f};
  static const float s = 2.5f;
  prog p;
  prog_init(&p);
  tt_hlo *b = p.b;
  tt_hv vx = prog_param(&p, TT_F32, 2, k23, x);
  tt_hv vs = prog_param(&p, TT_F32, 0, NULL, &s);
  tt_hv sb = tt_hlo_broadcast_in_dim(b, vs, 2, k23, NULL);
  tt_hv y = tt_hlo_binary(b, TT_HLO_MUL, tt_hlo_unary(b, TT_HLO_EXP, vx), sb);
  y = tt_hlo_binary(b, TT_HLO_ADD, y,
                    tt_hlo_unary(b, TT_HLO_SQRT, tt_hlo_unary(b, TT_HLO_ABS, vx)));
  y = tt_hlo_binary(b, TT_HLO_SUB, y, tt_hlo_unary(b, TT_HLO_TANH, vx));
  tt_hv z = tt_hlo_binary(b, TT_HLO_POW, vx, tt_hlo_splat(b, tt_hlo_type_of(b, vx), 2.0));
  tt_hv res[2] = {y, z};
  double got[2][6], want[2][6];
  double *outs[2] = {got[0], got[1]};
  if (!prog_run(&p, res, 2, outs, 6)) return;
  for (int i = 0; i < 6; i++) {
    want[0][i] = expf(x[i]) * s + sqrtf(fabsf(x[i])) - tanhf(x[i]);
    want[1][i] = (double)x[i] * x[i];
  }
  CHECK_CLOSE(got[0], want[0], 6, 1e-5);
  CHECK_CLOSE(got[1], want[1], 6, 1e-6);
}

// Constants that need care in MLIR text.
static void test_constants(void) {
  prog p;
  prog_init(&p);
  tt_hlo *b = p.b;
  tt_hv c[8] = {
      tt_hlo_const(b, TT_F32, INFINITY), tt_hlo_const(b, TT_F32, -INFINITY),
      tt_hlo_const(b, TT_F32, NAN),      tt_hlo_const(b, TT_F32, -0.0),
      tt_hlo_const(b, TT_F32, 0.1),      tt_hlo_const(b, TT_BF16, 3.14159),
      tt_hlo_const(b, TT_F16, 1e-7),     tt_hlo_const(b, TT_F64, 0.1),
  };
  double got[12][1];
  double *outs[12];
  for (int i = 0; i < 12; i++) outs[i] = got[i];
  if (!prog_run(&p, c, 8, outs, 1)) return;
  prog_init(&p);  // prog_run fetches up to 8 outputs
  b = p.b;
  tt_hv c2[4] = {tt_hlo_const_i(b, TT_I8, 200), tt_hlo_const_i(b, TT_U64, -1),
                 tt_hlo_const_i(b, TT_BOOL, 7), tt_hlo_const(b, TT_F16, 70000)};
  if (!prog_run(&p, c2, 4, outs + 8, 1)) return;
  double want[12] = {INFINITY, -INFINITY, NAN, 0, (float)0.1, 3.140625,
                     ldexp(2, -24), 0.1, -56, 18446744073709551615.0, 1, INFINITY};
  for (int i = 0; i < 12; i++)
    CHECK(got[i][0] == want[i] || (isnan(got[i][0]) && isnan(want[i])),
          "constant %d: got %.17g want %.17g", i, got[i][0], want[i]);
  CHECK(signbit(got[3][0]), "-0.0 lost its sign");
}

// iota -> convert chains, float->bool (NaN is true), float->int truncation.
static void test_iota_convert(void) {
  static const float x[6] = {-1.75f, -0.0f, 0, 0.5f, NAN, 3.99f};
  prog p;
  prog_init(&p);
  tt_hlo *b = p.b;
  tt_hv vx = prog_param(&p, TT_F32, 2, k23, x);
  tt_hlo_type it = tt_hlo_make_type(TT_I32, 2, k23);
  tt_hv i1 = tt_hlo_iota(b, &it, 1);
  tt_hv f1 = tt_hlo_convert(b, i1, TT_BF16);
  tt_hv xb = tt_hlo_convert(b, vx, TT_BOOL);
  tt_hv xi = tt_hlo_convert(b, tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_NE, vx, vx),
                                             tt_hlo_splat(b, tt_hlo_type_of(b, vx), 0), vx),
                            TT_I64);
  tt_hv res[3] = {f1, xb, xi};
  double got[3][6];
  double *outs[3] = {got[0], got[1], got[2]};
  if (!prog_run(&p, res, 3, outs, 6)) return;
  double w0[6] = {0, 1, 2, 0, 1, 2}, w1[6] = {1, 0, 0, 1, 1, 1}, w2[6] = {-1, 0, 0, 0, 0, 3};
  CHECK_CLOSE(got[0], w0, 6, 0);
  CHECK_CLOSE(got[1], w1, 6, 0);
  CHECK_CLOSE(got[2], w2, 6, 0);
}

// compare / select / clamp and integer ops: signed vs unsigned comparisons.
static void test_compare_select(void) {
  static const int32_t a[6] = {-3, 5, 7, -1, 0, 9};
  static const int32_t c[6] = {2, 5, -7, 4, 0, 1};
  static const uint8_t u[6] = {1, 200, 3, 255, 0, 128};
  static const uint8_t v[6] = {2, 100, 3, 1, 0, 129};
  prog p;
  prog_init(&p);
  tt_hlo *b = p.b;
  tt_hv va = prog_param(&p, TT_I32, 2, k23, a);
  tt_hv vc = prog_param(&p, TT_I32, 2, k23, c);
  tt_hv vu = prog_param(&p, TT_U8, 2, k23, u);
  tt_hv vv = prog_param(&p, TT_U8, 2, k23, v);
  tt_hv lt = tt_hlo_compare(b, TT_HLO_LT, va, vc);
  tt_hv mx = tt_hlo_select(b, lt, vc, va);
  tt_hv ult = tt_hlo_compare(b, TT_HLO_LT, vu, vv);
  tt_hv cl = tt_hlo_clamp(b, tt_hlo_const_i(b, TT_I32, -2), va, tt_hlo_const_i(b, TT_I32, 6));
  tt_hv rm = tt_hlo_binary(b, TT_HLO_REM, va, tt_hlo_splat_i(b, tt_hlo_type_of(b, va), 4));
  tt_hv res[5] = {lt, mx, ult, cl, rm};
  double got[5][6];
  double *outs[5] = {got[0], got[1], got[2], got[3], got[4]};
  if (!prog_run(&p, res, 5, outs, 6)) return;
  double w[5][6];
  for (int i = 0; i < 6; i++) {
    w[0][i] = a[i] < c[i];
    w[1][i] = a[i] < c[i] ? c[i] : a[i];
    w[2][i] = u[i] < v[i];
    w[3][i] = a[i] < -2 ? -2 : a[i] > 6 ? 6 : a[i];
    w[4][i] = a[i] % 4;  // C and StableHLO both truncate
  }
  for (int k = 0; k < 5; k++) CHECK_CLOSE(got[k], w[k], 6, 0);
}

// erf: chlo.erf must be accepted by the plugin (used by gelu).
static void test_erf(void) {
  static const float x[6] = {-2, -0.5f, 0, 0.25f, 1, 3};
  prog p;
  prog_init(&p);
  tt_hv vx = prog_param(&p, TT_F32, 2, k23, x);
  tt_hv e = tt_hlo_erf(p.b, vx);
  double got[6], want[6];
  double *outs[1] = {got};
  if (!prog_run(&p, &e, 1, outs, 6)) return;
  for (int i = 0; i < 6; i++) want[i] = erf(x[i]);
  CHECK_CLOSE(got, want, 6, 1e-6);
}

// --- shapes -------------------------------------------------------------------------------

static void test_shapes(void) {
  static const float x[6] = {0, 1, 2, 3, 4, 5};  // [[0,1,2],[3,4,5]]
  static const int64_t start = 1;
  prog p;
  prog_init(&p);
  tt_hlo *b = p.b;
  tt_hv vx = prog_param(&p, TT_F32, 2, k23, x);
  tt_hv vstart = prog_param(&p, TT_I64, 0, NULL, &start);
  int64_t perm[2] = {1, 0};
  tt_hv tr = tt_hlo_transpose(b, vx, perm);  // [[0,3],[1,4],[2,5]]
  int64_t s0[2] = {0, 1}, l0[2] = {2, 3}, st[2] = {1, 2};
  tt_hv sl = tt_hlo_slice(b, vx, s0, l0, st);  // [[1],[4]]
  int64_t lo[2] = {1, 0}, hi[2] = {0, 1}, in[2] = {0, 1};
  tt_hv pd = tt_hlo_pad(b, sl, tt_hlo_const(b, TT_F32, -1), lo, hi, in);  // 3x2
  tt_hv parts[2] = {vx, vx};
  tt_hv cc = tt_hlo_concatenate(b, parts, 2, 0);  // 4x3
  int64_t rd[1] = {1};
  tt_hv rv = tt_hlo_reverse(b, vx, rd, 1);  // [[2,1,0],[5,4,3]]
  tt_hv zero = tt_hlo_const_i(b, TT_I64, 0);
  tt_hv starts[2] = {zero, vstart};
  int64_t sz[2] = {2, 2};
  tt_hv ds = tt_hlo_dynamic_slice(b, vx, starts, sz);  // [[1,2],[4,5]]
  int64_t d12[2] = {1, 2};
  tt_hv upd = tt_hlo_reshape(b, tt_hlo_const(b, TT_F32, 9), 0, NULL);
  upd = tt_hlo_broadcast_in_dim(b, upd, 2, d12, NULL);
  tt_hv starts2[2] = {tt_hlo_const_i(b, TT_I64, 1), vstart};
  tt_hv du = tt_hlo_dynamic_update_slice(b, vx, upd, starts2);  // [[0,1,2],[3,9,9]]
  tt_hv res[7] = {tr, sl, pd, cc, rv, ds, du};
  double got[7][12];
  double *outs[7];
  for (int i = 0; i < 7; i++) outs[i] = got[i];
  if (!prog_run(&p, res, 7, outs, 12)) return;
  double wtr[6] = {0, 3, 1, 4, 2, 5}, wsl[2] = {1, 4}, wpd[6] = {-1, -1, 1, -1, 4, -1};
  double wcc[12] = {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}, wrv[6] = {2, 1, 0, 5, 4, 3};
  double wds[4] = {1, 2, 4, 5}, wdu[6] = {0, 1, 2, 3, 9, 9};
  CHECK_CLOSE(got[0], wtr, 6, 0);
  CHECK_CLOSE(got[1], wsl, 2, 0);
  CHECK_CLOSE(got[2], wpd, 6, 0);
  CHECK_CLOSE(got[3], wcc, 12, 0);
  CHECK_CLOSE(got[4], wrv, 6, 0);
  CHECK_CLOSE(got[5], wds, 4, 0);
  CHECK_CLOSE(got[6], wdu, 6, 0);
}

// --- dot, reduce, argreduce ----------------------------------------------------------------

// Batched matmul [2,2,3] x [2,3,2] -> [2,2,2], and a plain [2,3] x [3] matvec.
static void test_dot(void) {
  float x[12], y[12];
  for (int i = 0; i < 12; i++) {
    x[i] = (float)(i % 5) - 1.5f;
    y[i] = (float)(i % 7) * 0.5f - 1;
  }
  static const int64_t dx[3] = {2, 2, 3}, dy[3] = {2, 3, 2}, d3[1] = {3};
  prog p;
  prog_init(&p);
  tt_hlo *b = p.b;
  tt_hv vx = prog_param(&p, TT_F32, 3, dx, x);
  tt_hv vy = prog_param(&p, TT_F32, 3, dy, y);
  tt_hv vx2 = prog_param(&p, TT_F32, 2, k23, x);
  tt_hv vv = prog_param(&p, TT_F32, 1, d3, y);
  int64_t b0 = 0, cx = 2, cy = 1, c1 = 1, c0 = 0;
  tt_hv bmm = tt_hlo_dot_general(b, vx, vy, &b0, &b0, 1, &cx, &cy, 1, TT_F32);
  tt_hv mv = tt_hlo_dot_general(b, vx2, vv, NULL, NULL, 0, &c1, &c0, 1, TT_F32);
  tt_hv res[2] = {bmm, mv};
  double got[2][8], want[2][8];
  double *outs[2] = {got[0], got[1]};
  if (!prog_run(&p, res, 2, outs, 8)) return;
  for (int n = 0; n < 2; n++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++) {
        double s = 0;
        for (int k = 0; k < 3; k++) s += x[n * 6 + i * 3 + k] * y[n * 6 + k * 2 + j];
        want[0][n * 4 + i * 2 + j] = s;
      }
  for (int i = 0; i < 2; i++) {
    want[1][i] = 0;
    for (int k = 0; k < 3; k++) want[1][i] += x[i * 3 + k] * y[k];
  }
  CHECK_CLOSE(got[0], want[0], 8, 1e-6);
  CHECK_CLOSE(got[1], want[1], 2, 1e-6);
}

static void test_reduce(void) {
  static const float x[6] = {1, -2, 3.5f, 4, 0.25f, -6};
  static const int64_t xi[6] = {1, 2, 3, 4, 5, 6};
  prog p;
  prog_init(&p);
  tt_hlo *b = p.b;
  tt_hv vx = prog_param(&p, TT_F32, 2, k23, x);
  tt_hv vi = prog_param(&p, TT_I64, 2, k23, xi);
  int64_t d1 = 1, d01[2] = {0, 1}, d0 = 0;
  tt_hv sum1 = tt_hlo_reduce(b, vx, tt_hlo_const(b, TT_F32, 0), &d1, 1, TT_HLO_REDUCE_ADD);
  tt_hv max_all = tt_hlo_reduce(b, vx, tt_hlo_const(b, TT_F32, -INFINITY), d01, 2,
                                TT_HLO_REDUCE_MAX);
  tt_hv prod0 = tt_hlo_reduce(b, vi, tt_hlo_const_i(b, TT_I64, 1), &d0, 1, TT_HLO_REDUCE_MUL);
  tt_hv pos = tt_hlo_compare(b, TT_HLO_GT, vx, tt_hlo_splat(b, tt_hlo_type_of(b, vx), 0));
  tt_hv all1 = tt_hlo_reduce(b, pos, tt_hlo_const_i(b, TT_BOOL, 1), &d1, 1, TT_HLO_REDUCE_AND);
  tt_hv res[4] = {sum1, max_all, prod0, all1};
  double got[4][3];
  double *outs[4] = {got[0], got[1], got[2], got[3]};
  if (!prog_run(&p, res, 4, outs, 3)) return;
  double w0[2] = {2.5, -1.75}, w1[1] = {4}, w2[3] = {4, 10, 18}, w3[2] = {0, 0};
  CHECK_CLOSE(got[0], w0, 2, 1e-6);
  CHECK_CLOSE(got[1], w1, 1, 0);
  CHECK_CLOSE(got[2], w2, 3, 0);
  CHECK_CLOSE(got[3], w3, 2, 0);
}

// First occurrence wins on ties; NaN is the max (and the min) like PyTorch.
static void test_argreduce(void) {
  static const float x[12] = {1, 5, 5, 2,  NAN, 3, NAN, 3,  -1, -1, -7, -7};
  static const int32_t xi[4] = {3, 9, 9, -2};
  static const int64_t d34[2] = {3, 4}, d4[1] = {4};
  prog p;
  prog_init(&p);
  tt_hlo *b = p.b;
  tt_hv vx = prog_param(&p, TT_F32, 2, d34, x);
  tt_hv vi = prog_param(&p, TT_I32, 1, d4, xi);
  tt_hv mv, mi, nv, ni, iv, ii;
  tt_hlo_argreduce(b, vx, 1, true, TT_I64, &mv, &mi);
  tt_hlo_argreduce(b, vx, 1, false, TT_I64, &nv, &ni);
  tt_hlo_argreduce(b, vi, 0, true, TT_I32, &iv, &ii);
  tt_hv res[6] = {mv, mi, nv, ni, iv, ii};
  double got[6][3];
  double *outs[6];
  for (int i = 0; i < 6; i++) outs[i] = got[i];
  if (!prog_run(&p, res, 6, outs, 3)) return;
  double wmv[3] = {5, NAN, -1}, wmi[3] = {1, 0, 0};
  double wnv[3] = {1, NAN, -7}, wni[3] = {0, 0, 2};
  double wiv[1] = {9}, wii[1] = {1};
  CHECK_CLOSE(got[0], wmv, 3, 0);
  CHECK_CLOSE(got[1], wmi, 3, 0);
  CHECK_CLOSE(got[2], wnv, 3, 0);
  CHECK_CLOSE(got[3], wni, 3, 0);
  CHECK_CLOSE(got[4], wiv, 1, 0);
  CHECK_CLOSE(got[5], wii, 1, 0);
}

// --- gather, scatter, rng ---------------------------------------------------------------------

// Row gather (index_select on dim 0) and scatter-add of rows.
static void test_gather_scatter(void) {
  static const float x[6] = {0, 1, 2, 3, 4, 5};
  static const int32_t idx[3] = {1, 0, 1};
  static const float upd[9] = {1, 1, 1, 2, 2, 2, 10, 20, 30};
  static const int64_t d3[1] = {3}, d31[2] = {3, 1}, d33[2] = {3, 3};
  prog p;
  prog_init(&p);
  tt_hlo *b = p.b;
  tt_hv vx = prog_param(&p, TT_F32, 2, k23, x);
  tt_hv vi = prog_param(&p, TT_I32, 1, d3, idx);
  tt_hv vu = prog_param(&p, TT_F32, 2, d33, upd);
  tt_hv i2 = tt_hlo_reshape(b, vi, 2, d31);
  static const int64_t one = 1, zero = 0;
  tt_hlo_gather_dims gd = {.offset_dims = &one, .n_offset_dims = 1,
                           .collapsed_slice_dims = &zero, .n_collapsed = 1,
                           .start_index_map = &zero, .n_start_index_map = 1,
                           .index_vector_dim = 1};
  int64_t sizes[2] = {1, 3};
  tt_hv g = tt_hlo_gather(b, vx, i2, &gd, sizes, NULL);
  tt_hlo_scatter_dims sd = {.update_window_dims = &one, .n_update_window = 1,
                            .inserted_window_dims = &zero, .n_inserted = 1,
                            .scatter_dims_to_operand_dims = &zero,
                            .n_scatter_to_operand = 1, .index_vector_dim = 1};
  tt_hv s = tt_hlo_scatter(b, vx, i2, vu, &sd, TT_HLO_REDUCE_ADD);
  tt_hv res[2] = {g, s};
  double got[2][9];
  double *outs[2] = {got[0], got[1]};
  if (!prog_run(&p, res, 2, outs, 9)) return;
  double wg[9] = {3, 4, 5, 0, 1, 2, 3, 4, 5};
  double ws[6] = {2, 3, 4, 3 + 1 + 10, 4 + 1 + 20, 5 + 1 + 30};
  CHECK_CLOSE(got[0], wg, 9, 0);
  CHECK_CLOSE(got[1], ws, 6, 0);
}

// Same state, same bits; another state, other bits; bits look uniform.
static void test_rng(void) {
  static const uint64_t s1[2] = {42, 0}, s2[2] = {42, 1};
  static const int64_t two = 2, n = 4096;
  prog p;
  prog_init(&p);
  tt_hlo *b = p.b;
  tt_hv a = prog_param(&p, TT_U64, 1, &two, s1);
  tt_hv c = prog_param(&p, TT_U64, 1, &two, s2);
  tt_hlo_type t = tt_hlo_make_type(TT_U32, 1, &n);
  tt_hv res[3] = {tt_hlo_rng_bits(b, a, &t), tt_hlo_rng_bits(b, a, &t),
                  tt_hlo_rng_bits(b, c, &t)};
  static double got[3][4096];
  double *outs[3] = {got[0], got[1], got[2]};
  if (!prog_run(&p, res, 3, outs, 4096)) return;
  int same01 = 0, same02 = 0;
  double mean = 0;
  for (int i = 0; i < n; i++) {
    same01 += got[0][i] == got[1][i];
    same02 += got[0][i] == got[2][i];
    mean += got[0][i] / 4294967296.0 / (double)n;
  }
  CHECK(same01 == n, "same state gave %d/%d equal words", same01, (int)n);
  CHECK(same02 < 4, "different states gave %d equal words", same02);
  CHECK(fabs(mean - 0.5) < 0.02, "mean of uniform bits %g", mean);
}

// --- errors ---------------------------------------------------------------------------------

static void test_errors(void) {
  tt_hlo *b = NULL;
  if (tt_hlo_create(&b)) return;
  tt_hlo_type f = tt_hlo_make_type(TT_F32, 2, k23);
  tt_hlo_type i = tt_hlo_make_type(TT_I32, 2, k23);
  tt_hv x = tt_hlo_param(b, &f), y = tt_hlo_param(b, &i);
  tt_hv z = tt_hlo_binary(b, TT_HLO_ADD, x, y);
  CHECK(z == TT_HV_INVALID, "add of f32 and i32 gave a value");
  tt_hv w = tt_hlo_unary(b, TT_HLO_EXP, z);  // invalid stays invalid
  CHECK(w == TT_HV_INVALID, "op on an invalid value gave a value");
  tt_status st = tt_hlo_status(b);
  CHECK(st && tt_status_code(st) == TT_INTERNAL, "status %d", (int)tt_status_code(st));
  CHECK(st && strstr(tt_status_message(st), "tensor<2x3xi32>"), "message: %s",
        tt_status_message(st));
  const char *text;
  size_t len;
  st = tt_hlo_finish(b, &x, 1, &text, &len);
  CHECK(st != NULL, "finish after an error succeeded");
  tt_status_free(st);
  tt_hlo_reset(b);  // reusable after reset
  x = tt_hlo_param(b, &f);
  st = tt_hlo_finish(b, &x, 1, &text, &len);
  CHECK(st == NULL && strstr(text, "func.return"), "identity program after reset");
  tt_status_free(st);
  tt_hlo_destroy(b);
}

// stablehlo.while: acc = x^n by repeated multiplication, n a runtime value.
static void test_while(void) {
  static const float x[6] = {-1.5f, -0.5f, 0, 0.5f, 1.25f, 2};
  static const int64_t n = 5;
  prog p;
  prog_init(&p);
  tt_hlo *b = p.b;
  tt_hv vx = prog_param(&p, TT_F32, 2, k23, x);
  tt_hv vn = prog_param(&p, TT_I64, 0, NULL, &n);
  tt_hv init[2] = {tt_hlo_const_i(b, TT_I64, 0), tt_hlo_splat(b, tt_hlo_type_of(b, vx), 1.0)};
  tt_hv a[2];
  tt_hv r = tt_hlo_while_begin(b, init, 2, a);
  tt_hv pred = tt_hlo_compare(b, TT_HLO_LT, a[0], vn);
  tt_hlo_while_body(b, pred, 2, r, a);
  tt_hv next[2] = {tt_hlo_binary(b, TT_HLO_ADD, a[0], tt_hlo_const_i(b, TT_I64, 1)),
                   tt_hlo_binary(b, TT_HLO_MUL, a[1], vx)};
  tt_hlo_while_end(b, init, next, 2, r);
  tt_hv res[2] = {r, r + 1};
  double got[2][6], want[2][6];
  double *outs[2] = {got[0], got[1]};
  if (!prog_run(&p, res, 2, outs, 6)) return;
  want[0][0] = (double)n;
  for (int i = 0; i < 6; i++) want[1][i] = pow(x[i], (double)n);
  CHECK_CLOSE(got[0], want[0], 1, 0);
  CHECK_CLOSE(got[1], want[1], 6, 1e-6);
}

// A module as jax.export writes it (pretty form, a private callee) spliced
// into @main and called twice; the second add of the same key adds nothing.
static void test_spliced_functions(void) {
  static const char *kExported =
      "module @jit_f attributes {mhlo.num_partitions = 1 : i32} {\n"
      "  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32> {jax.result_info = \"result\"}) {\n"
      "    %0 = call @square(%arg0) : (tensor<2x3xf32>) -> tensor<2x3xf32>\n"
      "    %1 = stablehlo.add %0, %arg0 : tensor<2x3xf32>\n"
      "    return %1 : tensor<2x3xf32>\n"
      "  }\n"
      "  func.func private @square(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {\n"
      "    %0 = stablehlo.multiply %arg0, %arg0 : tensor<2x3xf32>\n"
      "    return %0 : tensor<2x3xf32>\n"
      "  }\n"
      "}\n";
  static const float x[6] = {-1.5f, -0.5f, 0, 0.5f, 1.25f, 2};
  char *funcs = NULL, *entry = NULL;
  tt_status st = tt_hlo_import_functions(kExported, "k0_", &funcs, &entry);
  CHECK(!st, "import: %s", st ? tt_status_message(st) : "");
  if (st) { tt_status_free(st); return; }
  CHECK(strcmp(entry, "k0_main") == 0, "entry %s", entry);
  CHECK(strstr(funcs, "func.func private @k0_main(") && strstr(funcs, "call @k0_square(") &&
        !strstr(funcs, "public"), "renamed functions:\n%s", funcs);
  prog p;
  prog_init(&p);
  tt_hlo *b = p.b;
  tt_hv vx = prog_param(&p, TT_F32, 2, k23, x);
  tt_hlo_type t = *tt_hlo_type_of(b, vx);
  tt_hlo_add_functions(b, 7, funcs);
  tt_hv y = tt_hlo_call(b, entry, &vx, 1, &t, 1);
  tt_hlo_add_functions(b, 7, funcs);  // same key: once in the module
  tt_hv z = tt_hlo_call(b, entry, &y, 1, &t, 1);
  double got[6], want[6];
  double *outs[1] = {got};
  if (prog_run(&p, &z, 1, outs, 6)) {
    for (int i = 0; i < 6; i++) {
      double f = (double)x[i] * x[i] + x[i];
      want[i] = f * f + f;
    }
    CHECK_CLOSE(got, want, 6, 1e-6);
  }
  free(funcs);
  free(entry);
  tt_status bad = tt_hlo_import_functions("func.func @f() { }", "k1_", &funcs, &entry);
  CHECK(bad && strstr(tt_status_message(bad), "@main"), "a module without @main was accepted");
  tt_status_free(bad);
}

int main(void) {
  tt_pjrt_options opts = {.plugin_path = getenv("TORCHTPU_PLUGIN_PATH"),
                          .cpu_device_count = 1};
  tt_status st = tt_pjrt_create(&opts, &g_pjrt);
  if (st) {
    fprintf(stderr, "FAIL: no PJRT plugin: %s\n", tt_status_message(st));
    tt_status_free(st);
    return 1;
  }
  test_errors();
  test_elementwise();
  test_constants();
  test_iota_convert();
  test_compare_select();
  test_erf();
  test_shapes();
  test_dot();
  test_reduce();
  test_argreduce();
  test_gather_scatter();
  test_rng();
  test_while();
  test_spliced_functions();
  tt_pjrt_destroy(g_pjrt);
  if (check_failures) {
    fprintf(stderr, "test_hlo: %d failure(s)\n", check_failures);
    return 1;
  }
  printf("test_hlo: all passed\n");
  return 0;
}
