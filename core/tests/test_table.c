// test_table.c — the op table and the lowering rules, end to end.
//
// First the table itself: built-in names are unique and well formed
// (tt_rule_table_check), every name resolves to an id and back, ".default"
// is the plain name, unknown names are -1, registration appends or replaces
// keeping the id. Then a sample of rules from every family runs through the
// public API (tt_op_run) on the real XLA CPU plugin and is compared with
// values computed here in plain C: promotion and broadcasting, division
// rounding modes, gelu, reductions with keepdim and indices, softmax and its
// backward, matrix products (addmm's beta == 0 drops NaN), cat with
// promotion, index_select, embedding_dense_backward, padding, roll, repeat,
// nll_loss forward/backward, mse_loss, in-place and out= writes, copy_,
// fill_, masked_fill_, the samplers' statistics, arange with out= resizing,
// and user errors as statuses with the op name.
//
// Build and run: `make ctest` (or build/tests/test_table after
// `make build/tests/test_table`); TORCHTPU_PLUGIN_PATH picks the plugin.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "lower/lower.h"
#include "torchtpu.h"
#include "check.h"

static tt_runtime *g_rt = NULL;



// --- host values -----------------------------------------------------------------------------

static void put(tt_dtype d, void *p, int64_t i, double v) {
  switch (d) {
    case TT_BOOL: case TT_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case TT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case TT_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case TT_F64: ((double *)p)[i] = v; break;
    default: ((float *)p)[i] = (float)v; break;  // tests use these dtypes only
  }
}

static double get(tt_dtype d, const void *p, int64_t i) {
  switch (d) {
    case TT_BOOL: case TT_U8: return ((const uint8_t *)p)[i];
    case TT_I32: return ((const int32_t *)p)[i];
    case TT_I64: return (double)((const int64_t *)p)[i];
    case TT_F64: return ((const double *)p)[i];
    default: return ((const float *)p)[i];
  }
}

// --- device tensors ----------------------------------------------------------------------------

typedef struct ten {
  tt_tensor t;
  int64_t sizes[TT_MAX_RANK], strides[TT_MAX_RANK];
} ten;

static ten g_pool[32];
static int g_npool = 0;

static int64_t numel_of(int rank, const int64_t *sizes) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= sizes[i];
  return n;
}

// A dense tensor holding `vals` (NULL: zeros), owned by the pool.
static ten *mk(tt_dtype d, int rank, const int64_t *sizes, const double *vals) {
  ten *x = &g_pool[g_npool++];
  memset(x, 0, sizeof *x);
  int64_t n = numel_of(rank, sizes), stride = 1;
  for (int i = rank - 1; i >= 0; i--) {
    x->sizes[i] = sizes[i];
    x->strides[i] = stride;
    stride *= sizes[i];
  }
  tt_storage *s = NULL;
  tt_status st = tt_storage_create(g_rt, 0, n * tt_dtype_size(d), &s);
  if (st) {
    fprintf(stderr, "tt_storage_create: %s\n", tt_status_message(st));
    exit(2);
  }
  x->t = (tt_tensor){s, d, rank, x->sizes, x->strides, 0};
  void *host = calloc((size_t)(n ? n : 1), 8);
  for (int64_t i = 0; vals && i < n; i++) put(d, host, i, vals[i]);
  st = tt_tensor_upload(g_rt, &x->t, host);
  free(host);
  if (st) {
    fprintf(stderr, "tt_tensor_upload: %s\n", tt_status_message(st));
    exit(2);
  }
  return x;
}

static void pool_free(void) {
  for (int i = 0; i < g_npool; i++) tt_storage_destroy(g_pool[i].t.storage);
  g_npool = 0;
}

// Downloads a view into out (cap elements, as doubles).
static void fetch(const tt_tensor *t, double *out, int cap) {
  int64_t n = numel_of(t->ndim, t->sizes);
  void *host = calloc((size_t)(n ? n : 1), 8);
  tt_status st = tt_tensor_download(g_rt, t, host);
  if (st) {
    fprintf(stderr, "download: %s\n", tt_status_message(st));
    tt_status_free(st);
    check_failures++;
  }
  for (int64_t i = 0; i < n && i < cap; i++) out[i] = get(t->dtype, host, i);
  free(host);
}

// --- argument values -------------------------------------------------------------------------------

static tt_value vT(const ten *x) { return (tt_value){.kind = TT_VALUE_TENSOR, .u.tensor = x->t}; }
static tt_value vNone(void) { return (tt_value){.kind = TT_VALUE_NONE}; }
static tt_value vI(int64_t i) { return (tt_value){.kind = TT_VALUE_INT, .u.i = i}; }
static tt_value vB(bool b) { return (tt_value){.kind = TT_VALUE_BOOL, .u.b = b}; }
static tt_value vStr(const char *s) { return (tt_value){.kind = TT_VALUE_STRING, .u.str = s}; }
static tt_value vDt(tt_dtype d) { return (tt_value){.kind = TT_VALUE_DTYPE, .u.dtype = d}; }
static tt_value vS(double f) {  // a Python float
  return (tt_value){.kind = TT_VALUE_SCALAR, .u.scalar = {TT_F64, true, f, 0}};
}
static tt_value vSI(int64_t i) {  // a Python int
  return (tt_value){.kind = TT_VALUE_SCALAR, .u.scalar = {TT_I64, true, (double)i, i}};
}
static tt_value vInts(const int64_t *xs, int n) {
  tt_value v = {.kind = TT_VALUE_INTS};
  v.u.ints.data = xs;
  v.u.ints.n = n;
  return v;
}

// --- running ops ---------------------------------------------------------------------------------------

typedef struct outs {
  int n;
  tt_op_result r[4];
  double v[4][64];  // fresh results, downloaded
} outs;

// Runs `name`; fresh results (ndests of them, unless `dests` says where they
// go) are downloaded into o and freed. Returns the status (owned).
static tt_status run_st(const char *name, const tt_value *args, int nargs,
                        const tt_dest *dests, int ndests, outs *o) {
  static const tt_dest kFresh[4] = {{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}};
  tt_op_call call = {tt_op_lookup(name), 0, TT_F32, args, nargs,
                     dests ? dests : kFresh, ndests, false};
  memset(o, 0, sizeof *o);
  if (call.op < 0) return tt_make_status(TT_NOT_FOUND, "no rule %s", name);
  int32_t n = 0;
  tt_status st = tt_op_run(g_rt, &call, o->r, 4, &n);
  o->n = st ? 0 : n;
  for (int i = 0; i < o->n; i++) {
    tt_op_result *r = &o->r[i];
    int64_t strides[TT_MAX_RANK], s = 1;
    for (int d = r->ndim - 1; d >= 0; d--) {
      strides[d] = s;
      s *= r->sizes[d];
    }
    tt_tensor t = {r->storage, r->dtype, r->ndim, r->sizes, strides, 0};
    fetch(&t, o->v[i], 64);
    tt_storage_destroy(r->storage);
  }
  return st;
}

#define RUN(name, args, nargs, dests, ndests, o) \
  run_at(__FILE__, __LINE__, name, args, nargs, dests, ndests, o)

static bool run_at(const char *file, int line, const char *name, const tt_value *args,
                   int nargs, const tt_dest *dests, int ndests, outs *o) {
  tt_status st = run_st(name, args, nargs, dests, ndests, o);
  if (!st) return true;
  fprintf(stderr, "%s:%d: FAIL %s: %s\n", file, line, name, tt_status_message(st));
  tt_status_free(st);
  check_failures++;
  return false;
}

// Expects `name` to fail with `code` and a message naming the op.
#define EXPECT_ERROR(name, args, nargs, code) \
  expect_error(__FILE__, __LINE__, name, args, nargs, code)

static void expect_error(const char *file, int line, const char *name, const tt_value *args,
                         int nargs, tt_code code) {
  outs o;
  tt_status st = run_st(name, args, nargs, NULL, 1, &o);
  const char *short_name = strstr(name, "::") ? strstr(name, "::") + 2 : name;
  if (tt_status_code(st) != code || !strstr(tt_status_message(st), short_name)) {
    fprintf(stderr, "%s:%d: FAIL %s: want code %d naming the op, got %d: %s\n", file,
            line, name, (int)code, (int)tt_status_code(st), tt_status_message(st));
    check_failures++;
  }
  tt_status_free(st);
}

static const int64_t k2[1] = {2}, k3[1] = {3}, k4[1] = {4}, k6[1] = {6};
static const int64_t k23[2] = {2, 3}, k32[2] = {3, 2}, k13[2] = {1, 3};

// --- the table ------------------------------------------------------------------------------------------

static void test_table(void) {
  tt_status st = tt_rule_table_check();
  CHECK(st == NULL, "%s", tt_status_message(st));
  tt_status_free(st);
  int32_t n = tt_op_count();
  CHECK(n > 300, "only %d rules", (int)n);
  for (int32_t id = 0; id < n; id++) {
    const char *name = tt_op_name(id);
    CHECK(name && tt_op_lookup(name) == id, "id %d (%s) doesn't round-trip", (int)id,
          name ? name : "?");
  }
  CHECK(tt_op_lookup("aten::relu.default") == tt_op_lookup("aten::relu"), "'.default'");
  CHECK(tt_op_lookup("aten::no_such_op") == -1, "unknown name");
  CHECK(tt_op_lookup(NULL) == -1, "NULL name");
  CHECK(tt_rule_get(-1) == NULL && tt_rule_get(n + 1000) == NULL, "out-of-range ids");
  // Registration: a new name appends, an existing one keeps its id.
  const tt_rule *relu = tt_rule_get(tt_op_lookup("aten::relu"));
  int32_t id = tt_rule_register("test::identity", relu->fn, 0);
  CHECK(id == n && tt_op_lookup("test::identity") == id, "registered id %d", (int)id);
  int32_t again = tt_rule_register("test::identity", relu->fn, TT_RULE_SCALARS_IN_SIGNATURE);
  CHECK(again == id && tt_rule_get(id)->flags == TT_RULE_SCALARS_IN_SIGNATURE,
        "re-registration changed the id (%d vs %d)", (int)again, (int)id);
}

// --- elementwise ------------------------------------------------------------------------------------------

// int32 [2,3] + 2.5 * float [3]: promotion to float32 and broadcasting.
static void test_add_promote(void) {
  double a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {0.5, -1, 2};
  ten *x = mk(TT_I32, 2, k23, a), *y = mk(TT_F32, 1, k3, b);
  tt_value args[3] = {vT(x), vT(y), vS(2.5)};
  outs o;
  if (RUN("aten::add.Tensor", args, 3, NULL, 1, &o)) {
    double want[6];
    for (int i = 0; i < 6; i++) want[i] = a[i] + 2.5 * b[i % 3];
    CHECK(o.r[0].dtype == TT_F32 && o.r[0].ndim == 2, "dtype %d rank %d", o.r[0].dtype,
          o.r[0].ndim);
    CHECK_CLOSE(o.v[0], want, 6, 1e-6);
  }
  tt_value sargs[3] = {vT(x), vSI(7), vSI(2)};  // int tensor + int scalar stays int32
  if (RUN("aten::sub.Scalar", sargs, 3, NULL, 1, &o)) {
    double want[6];
    for (int i = 0; i < 6; i++) want[i] = a[i] - 14;
    CHECK(o.r[0].dtype == TT_I32, "sub.Scalar dtype %d", o.r[0].dtype);
    CHECK_CLOSE(o.v[0], want, 6, 0);
  }
  pool_free();
}

// div rounding modes and Python remainder, for ints and floats.
static void test_div_modes(void) {
  double a[6] = {7, -7, 7, -7, 0, 5}, b[6] = {2, 2, -2, -2, 3, -3};
  double af[6] = {7.5, -7.5, 1, -1, 0.5, 5}, bf[6] = {2, 2, 0.1, 0.1, -3, -3};
  ten *xi = mk(TT_I64, 1, k6, a), *yi = mk(TT_I64, 1, k6, b);
  ten *xf = mk(TT_F32, 1, k6, af), *yf = mk(TT_F32, 1, k6, bf);
  outs o;
  tt_value floor_i[3] = {vT(xi), vT(yi), vStr("floor")}, trunc_i[3] = {vT(xi), vT(yi), vStr("trunc")};
  tt_value floor_f[3] = {vT(xf), vT(yf), vStr("floor")}, true_i[2] = {vT(xi), vT(yi)};
  double wfi[6] = {3, -4, -4, 3, 0, -2}, wti[6] = {3, -3, -3, 3, 0, -1};
  double wff[6] = {3, -4, 9, -10, -1, -2}, wtrue[6], wrem[6] = {1, 1, -1, -1, 0, -1};
  for (int i = 0; i < 6; i++) wtrue[i] = (float)(a[i] / b[i]);
  if (RUN("aten::div.Tensor_mode", floor_i, 3, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wfi, 6, 0);
  if (RUN("aten::div.Tensor_mode", trunc_i, 3, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wti, 6, 0);
  if (RUN("aten::div.Tensor_mode", floor_f, 3, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wff, 6, 0);
  if (RUN("aten::div.Tensor", true_i, 2, NULL, 1, &o)) {
    CHECK(o.r[0].dtype == TT_F32, "int / int gives %d", o.r[0].dtype);
    CHECK_CLOSE(o.v[0], wtrue, 6, 1e-7);
  }
  if (RUN("aten::remainder.Tensor", true_i, 2, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wrem, 6, 0);
  tt_value bad[3] = {vT(xf), vT(yf), vStr("round")};
  EXPECT_ERROR("aten::div.Tensor_mode", bad, 3, TT_INVALID_ARGUMENT);
  pool_free();
}

static void test_activations(void) {
  double x[6] = {-3, -1, -0.25, 0, 0.5, 2.5};
  ten *t = mk(TT_F32, 1, k6, x);
  outs o;
  tt_value none[2] = {vT(t), vStr("none")}, tanh_[2] = {vT(t), vStr("tanh")};
  double we[6], wt[6], ws[6];
  for (int i = 0; i < 6; i++) {
    we[i] = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2)));
    wt[i] = 0.5 * x[i] * (1 + tanh(sqrt(2 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
    ws[i] = x[i] / (1 + exp(-x[i]));
  }
  if (RUN("aten::gelu", none, 2, NULL, 1, &o)) CHECK_CLOSE(o.v[0], we, 6, 1e-6);
  if (RUN("aten::gelu", tanh_, 2, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wt, 6, 1e-6);
  if (RUN("aten::silu", none, 1, NULL, 1, &o)) CHECK_CLOSE(o.v[0], ws, 6, 1e-6);
  // gelu_backward against a central difference of gelu.
  double ones[6] = {1, 1, 1, 1, 1, 1}, wg[6];
  ten *g = mk(TT_F32, 1, k6, ones);
  for (int i = 0; i < 6; i++) {
    double h = 1e-4, p = x[i] + h, m = x[i] - h;
    wg[i] = (0.5 * p * (1 + erf(p / sqrt(2))) - 0.5 * m * (1 + erf(m / sqrt(2)))) / (2 * h);
  }
  tt_value gb[3] = {vT(g), vT(t), vStr("none")};
  if (RUN("aten::gelu_backward", gb, 3, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wg, 6, 1e-5);
  pool_free();
}

// where, clamp with one bound, in-place masked_fill_, copy_ and fill_.
static void test_select_fill(void) {
  double x[6] = {-2, -1, 0, 1, 2, 3}, m[6] = {1, 0, 0, 1, 0, 1};
  ten *t = mk(TT_F32, 2, k23, x), *mask = mk(TT_BOOL, 2, k23, m);
  outs o;
  tt_value w[3] = {vT(mask), vT(t), vS(9)};
  double ww[6] = {-2, 9, 9, 1, 9, 3};
  if (RUN("aten::where.ScalarOther", w, 3, NULL, 1, &o)) CHECK_CLOSE(o.v[0], ww, 6, 0);
  tt_value cl[3] = {vT(t), vNone(), vS(0.5)};
  double wc[6] = {-2, -1, 0, 0.5, 0.5, 0.5};
  if (RUN("aten::clamp", cl, 3, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wc, 6, 0);
  tt_value mf[3] = {vT(t), vT(mask), vS(-7)};
  static const tt_dest self = {0, -1};
  double wm[6] = {-7, -1, 0, -7, 2, -7}, got[6];
  if (RUN("aten::masked_fill_.Scalar", mf, 3, &self, 1, &o)) {
    fetch(&t->t, got, 6);
    CHECK_CLOSE(got, wm, 6, 0);
  }
  // copy_ from an int64 row broadcast into the float tensor.
  double row[3] = {5, 6, 7}, wcp[6] = {5, 6, 7, 5, 6, 7};
  ten *r = mk(TT_I64, 2, k13, row);
  tt_value cp[3] = {vT(t), vT(r), vB(false)};
  if (RUN("aten::copy_", cp, 3, &self, 1, &o)) {
    fetch(&t->t, got, 6);
    CHECK_CLOSE(got, wcp, 6, 0);
  }
  tt_value fl[2] = {vT(r), vS(2.75)};  // fill_ of an int tensor truncates
  double wf[3] = {2, 2, 2};
  if (RUN("aten::fill_.Scalar", fl, 2, &self, 1, &o)) {
    fetch(&r->t, got, 3);
    CHECK_CLOSE(got, wf, 3, 0);
  }
  pool_free();
}

// --- reductions -------------------------------------------------------------------------------------------

static void test_reductions(void) {
  double x[6] = {1, 5, 3, 7, -2, 7};
  ten *t = mk(TT_F32, 2, k23, x), *ti = mk(TT_I32, 2, k23, x);
  outs o;
  static const int64_t d1[1] = {1}, d0[1] = {0};
  tt_value s[4] = {vT(ti), vInts(d1, 1), vB(true), vNone()};
  double ws[2] = {9, 12};
  if (RUN("aten::sum.dim_IntList", s, 4, NULL, 1, &o)) {
    CHECK(o.r[0].dtype == TT_I64 && o.r[0].ndim == 2 && o.r[0].sizes[1] == 1,
          "sum of int32 with keepdim: dtype %d rank %d", o.r[0].dtype, o.r[0].ndim);
    CHECK_CLOSE(o.v[0], ws, 2, 0);
  }
  tt_value mn[4] = {vT(t), vInts(d0, 1), vB(false), vNone()};
  double wm[3] = {4, 1.5, 5};
  if (RUN("aten::mean.dim", mn, 4, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wm, 3, 1e-7);
  tt_value md[3] = {vT(t), vI(-1), vB(false)};
  double wv[2] = {5, 7}, wi[2] = {1, 0};  // first occurrence of the max 7
  if (RUN("aten::max.dim", md, 3, NULL, 2, &o)) {
    CHECK(o.n == 2 && o.r[1].dtype == TT_I64, "max.dim results %d", o.n);
    CHECK_CLOSE(o.v[0], wv, 2, 0);
    CHECK_CLOSE(o.v[1], wi, 2, 0);
  }
  tt_value am[3] = {vT(t), vNone(), vB(true)};
  double wa[1] = {3};
  if (RUN("aten::argmax", am, 3, NULL, 1, &o)) {
    CHECK(o.r[0].ndim == 2 && o.r[0].sizes[0] == 1 && o.r[0].sizes[1] == 1,
          "argmax keepdim without dim: rank %d", o.r[0].ndim);
    CHECK_CLOSE(o.v[0], wa, 1, 0);
  }
  tt_value vr[4] = {vT(t), vNone(), vNone(), vB(false)};
  double mean = (1 + 5 + 3 + 7 - 2 + 7) / 6.0, ss = 0;
  for (int i = 0; i < 6; i++) ss += (x[i] - mean) * (x[i] - mean);
  double wvar[1] = {ss / 5};
  if (RUN("aten::var.correction", vr, 4, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wvar, 1, 1e-6);
  tt_value bad[4] = {vT(t), vInts((const int64_t[]){2}, 1), vB(false), vNone()};
  EXPECT_ERROR("aten::sum.dim_IntList", bad, 4, TT_OUT_OF_RANGE);
  pool_free();
}

static void test_softmax(void) {
  double x[6] = {1, 2, 3, -1e30, 0, 1000};
  ten *t = mk(TT_F32, 2, k23, x);
  outs o;
  tt_value a[3] = {vT(t), vI(1), vB(false)};
  double ws[6], wl[6];
  for (int r = 0; r < 2; r++) {
    double m = fmax(fmax(x[3 * r], x[3 * r + 1]), x[3 * r + 2]), s = 0;
    for (int j = 0; j < 3; j++) s += exp(x[3 * r + j] - m);
    for (int j = 0; j < 3; j++) {
      ws[3 * r + j] = exp(x[3 * r + j] - m) / s;
      wl[3 * r + j] = x[3 * r + j] - m - log(s);
    }
  }
  if (RUN("aten::_softmax", a, 3, NULL, 1, &o)) CHECK_CLOSE(o.v[0], ws, 6, 1e-6);
  if (RUN("aten::_log_softmax", a, 3, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wl, 6, 1e-6);
  // log_softmax backward: g - exp(y) * sum(g).
  double g[6] = {1, 0, -1, 0.5, 0.5, 0}, wb[6];
  for (int i = 0; i < 6; i++) {
    int r = i / 3;
    wb[i] = g[i] - exp(wl[i]) * (g[3 * r] + g[3 * r + 1] + g[3 * r + 2]);
  }
  ten *tg = mk(TT_F32, 2, k23, g), *ty = mk(TT_F32, 2, k23, wl);
  tt_value b[4] = {vT(tg), vT(ty), vI(1), vDt(TT_F32)};
  if (RUN("aten::_log_softmax_backward_data", b, 4, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wb, 6, 1e-6);
  pool_free();
}

// --- linalg -------------------------------------------------------------------------------------------------

static void test_linalg(void) {
  double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, -1, 2, 0.5, -3, 1}, nan6[4];
  for (int i = 0; i < 4; i++) nan6[i] = NAN;
  static const int64_t k22[2] = {2, 2};
  ten *x = mk(TT_F32, 2, k23, a), *y = mk(TT_F32, 2, k32, b), *s = mk(TT_F32, 2, k22, nan6);
  double wmm[4];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      wmm[i * 2 + j] = a[i * 3] * b[j] + a[i * 3 + 1] * b[2 + j] + a[i * 3 + 2] * b[4 + j];
  outs o;
  tt_value mm[2] = {vT(x), vT(y)};
  if (RUN("aten::mm", mm, 2, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wmm, 4, 1e-6);
  tt_value ad[5] = {vT(s), vT(x), vT(y), vS(0), vS(2)};  // beta = 0: NaN self ignored
  double w2[4];
  for (int i = 0; i < 4; i++) w2[i] = 2 * wmm[i];
  if (RUN("aten::addmm", ad, 5, NULL, 1, &o)) CHECK_CLOSE(o.v[0], w2, 4, 1e-6);
  tt_value bad[2] = {vT(x), vT(x)};
  EXPECT_ERROR("aten::mm", bad, 2, TT_INVALID_ARGUMENT);
  pool_free();
}

// --- shape ops ---------------------------------------------------------------------------------------------------

static void test_shape_ops(void) {
  double a[6] = {0, 1, 2, 3, 4, 5}, b[3] = {7, 8, 9};
  ten *x = mk(TT_F32, 2, k23, a), *y = mk(TT_I32, 2, k13, b);
  outs o;
  tt_value items[2] = {vT(x), vT(y)};
  tt_value cat[2] = {{.kind = TT_VALUE_LIST, .u.list = {items, 2}}, vI(0)};
  double wc[9] = {0, 1, 2, 3, 4, 5, 7, 8, 9};
  if (RUN("aten::cat", cat, 2, NULL, 1, &o)) {
    CHECK(o.r[0].dtype == TT_F32 && o.r[0].sizes[0] == 3, "cat: dtype %d", o.r[0].dtype);
    CHECK_CLOSE(o.v[0], wc, 9, 0);
  }
  double idx[3] = {2, 0, 2};
  ten *ix = mk(TT_I64, 1, k3, idx);
  tt_value is[3] = {vT(x), vI(1), vT(ix)};
  double wi[6] = {2, 0, 2, 5, 3, 5};
  if (RUN("aten::index_select", is, 3, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wi, 6, 0);
  static const int64_t pad[4] = {1, 0, 0, 1};  // last dim (1, 0), then dim 0 (0, 1)
  tt_value pd[3] = {vT(x), vInts(pad, 4), vS(-1)};
  double wp[12] = {-1, 0, 1, 2, -1, 3, 4, 5, -1, -1, -1, -1};
  if (RUN("aten::constant_pad_nd", pd, 3, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wp, 12, 0);
  static const int64_t sh[1] = {1}, dm[1] = {1};
  tt_value rl[3] = {vT(x), vInts(sh, 1), vInts(dm, 1)};
  double wr[6] = {2, 0, 1, 5, 3, 4};
  if (RUN("aten::roll", rl, 3, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wr, 6, 0);
  static const int64_t reps[3] = {2, 1, 2};
  tt_value rp[2] = {vT(y), vInts(reps, 3)};
  double wrp[12] = {7, 8, 9, 7, 8, 9, 7, 8, 9, 7, 8, 9};
  if (RUN("aten::repeat", rp, 2, NULL, 1, &o)) {
    CHECK(o.r[0].ndim == 3 && o.r[0].sizes[0] == 2 && o.r[0].sizes[2] == 6, "repeat shape");
    CHECK_CLOSE(o.v[0], wrp, 12, 0);
  }
  pool_free();
}

// Gradient rows scatter-add into their embedding rows; padding_idx rows stay
// zero; scale_grad_by_freq divides by each index's count.
static void test_embedding_backward(void) {
  double g[8] = {1, 2, 3, 4, 5, 6, 7, 8}, ind[4] = {1, 3, 1, 0};
  static const int64_t k42[2] = {4, 2};
  ten *tg = mk(TT_F32, 2, k42, g), *ti = mk(TT_I64, 1, k4, ind);
  outs o;
  tt_value a[5] = {vT(tg), vT(ti), vI(4), vI(0), vB(false)};
  double w[8] = {0, 0, 1 + 5, 2 + 6, 0, 0, 3, 4};  // row 0 is padding
  if (RUN("aten::embedding_dense_backward", a, 5, NULL, 1, &o)) CHECK_CLOSE(o.v[0], w, 8, 0);
  tt_value s[5] = {vT(tg), vT(ti), vI(4), vI(-1), vB(true)};
  double ws[8] = {7, 8, 3, 4, 0, 0, 3, 4};
  if (RUN("aten::embedding_dense_backward", s, 5, NULL, 1, &o)) CHECK_CLOSE(o.v[0], ws, 8, 0);
  pool_free();
}

// --- losses ---------------------------------------------------------------------------------------------------------

static void test_losses(void) {
  double x[6] = {-1, -2, -3, -0.5, -1.5, -2.5}, t[2] = {2, -100}, t2[2] = {2, 0};
  double w[3] = {1, 2, 3};
  ten *tx = mk(TT_F32, 2, k23, x), *tt = mk(TT_I64, 1, k2, t), *tt2 = mk(TT_I64, 1, k2, t2);
  ten *tw = mk(TT_F32, 1, k3, w);
  outs o;
  tt_value mean_ign[5] = {vT(tx), vT(tt), vNone(), vI(1), vI(-100)};
  double w1[1] = {3}, wt1[1] = {1};
  if (RUN("aten::nll_loss_forward", mean_ign, 5, NULL, 2, &o)) {
    CHECK_CLOSE(o.v[0], w1, 1, 1e-6);
    CHECK_CLOSE(o.v[1], wt1, 1, 0);
  }
  tt_value weighted[5] = {vT(tx), vT(tt2), vT(tw), vI(1), vI(-100)};
  double w2[1] = {(3 * 3 + 1 * 0.5) / 4}, wt2[1] = {4};
  if (RUN("aten::nll_loss_forward", weighted, 5, NULL, 2, &o)) {
    CHECK_CLOSE(o.v[0], w2, 1, 1e-6);
    CHECK_CLOSE(o.v[1], wt2, 1, 0);
  }
  double one = 1, four = 4;
  ten *go = mk(TT_F32, 0, NULL, &one), *tot = mk(TT_F32, 0, NULL, &four);
  tt_value bw[7] = {vT(go), vT(tx), vT(tt2), vT(tw), vI(1), vI(-100), vT(tot)};
  double wg[6] = {0, 0, -0.75, -0.25, 0, 0};
  if (RUN("aten::nll_loss_backward", bw, 7, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wg, 6, 1e-7);
  double y[6] = {0, 0, 0, 0, 0, 1};
  ten *ty = mk(TT_F32, 2, k23, y);
  tt_value ms[3] = {vT(tx), vT(ty), vI(2)};
  double wms[1] = {1 + 4 + 9 + 0.25 + 2.25 + 3.5 * 3.5};
  if (RUN("aten::mse_loss", ms, 3, NULL, 1, &o)) CHECK_CLOSE(o.v[0], wms, 1, 1e-6);
  pool_free();
}

// --- random --------------------------------------------------------------------------------------------------------------

static void moments(const double *v, int n, double *mean, double *var) {
  double s = 0, s2 = 0;
  for (int i = 0; i < n; i++) s += v[i];
  *mean = s / n;
  for (int i = 0; i < n; i++) s2 += (v[i] - *mean) * (v[i] - *mean);
  *var = s2 / n;
}

static void test_random(void) {
  enum { N = 4096 };
  static const int64_t kn[1] = {N};
  static double got[N];
  ten *t = mk(TT_F32, 1, kn, NULL);
  static const tt_dest self = {0, -1};
  outs o;
  double mean, var, lo = INFINITY, hi = -INFINITY;
  tt_value u[4] = {vT(t), vS(-2), vS(6), vNone()};
  if (RUN("aten::uniform_", u, 4, &self, 1, &o)) {
    fetch(&t->t, got, N);
    for (int i = 0; i < N; i++) lo = fmin(lo, got[i]), hi = fmax(hi, got[i]);
    moments(got, N, &mean, &var);
    CHECK(lo >= -2 && hi < 6 && fabs(mean - 2) < 0.2 && fabs(var - 64 / 12.0) < 0.5,
          "uniform(-2, 6): range [%g, %g], mean %g, var %g", lo, hi, mean, var);
  }
  double first = got[0];
  if (RUN("aten::uniform_", u, 4, &self, 1, &o)) {  // the generator advanced
    fetch(&t->t, got, N);
    CHECK(got[0] != first, "two uniform_ calls drew the same numbers");
  }
  tt_value nm[4] = {vT(t), vS(1), vS(3), vNone()};
  if (RUN("aten::normal_", nm, 4, &self, 1, &o)) {
    fetch(&t->t, got, N);
    moments(got, N, &mean, &var);
    CHECK(fabs(mean - 1) < 0.2 && fabs(sqrt(var) - 3) < 0.2, "normal(1, 3): mean %g, std %g",
          mean, sqrt(var));
  }
  ten *ti = mk(TT_I64, 1, kn, NULL);
  tt_value rd[3] = {vT(ti), vI(5), vNone()};
  if (RUN("aten::random_.to", rd, 3, &self, 1, &o)) {
    fetch(&ti->t, got, N);
    int counts[5] = {0}, bad = 0;
    for (int i = 0; i < N; i++) {
      if (got[i] < 0 || got[i] > 4 || got[i] != floor(got[i])) bad++;
      else counts[(int)got[i]]++;
    }
    CHECK(bad == 0 && counts[0] > N / 8 && counts[4] > N / 8, "random_(to=5): %d bad", bad);
  }
  tt_value be[3] = {vT(t), vS(0.25), vNone()};
  if (RUN("aten::bernoulli_.float", be, 3, &self, 1, &o)) {
    fetch(&t->t, got, N);
    moments(got, N, &mean, &var);
    CHECK(fabs(mean - 0.25) < 0.03, "bernoulli(0.25): mean %g", mean);
  }
  pool_free();
}

// --- factory --------------------------------------------------------------------------------------------------------------

// arange(0.5, 3, 0.5, out=float32 [5]): an out tensor of the right size is
// written; a wrong size asks for a resize.
static void test_arange(void) {
  static const int64_t k5[1] = {5};
  ten *out = mk(TT_F32, 1, k5, NULL), *small = mk(TT_F32, 1, k2, NULL);
  static const tt_dest dest = {3, -1};
  outs o;
  tt_value a[4] = {vS(0.5), vSI(3), vS(0.5), vT(out)};
  double got[5], want[5] = {0.5, 1, 1.5, 2, 2.5};
  if (RUN("aten::arange.start_out", a, 4, &dest, 1, &o)) {
    fetch(&out->t, got, 5);
    CHECK_CLOSE(got, want, 5, 0);
  }
  tt_value b[4] = {vS(0.5), vSI(3), vS(0.5), vT(small)};
  tt_status st = run_st("aten::arange.start_out", b, 4, &dest, 1, &o);
  CHECK(tt_status_code(st) == TT_OUT_RESIZE, "wrong-size out gave %d: %s",
        (int)tt_status_code(st), tt_status_message(st));
  tt_status_free(st);
  ten *iout = mk(TT_I64, 1, k4, NULL);
  tt_value c[4] = {vSI(10), vSI(2), vSI(-2), vT(iout)};
  double wi[4] = {10, 8, 6, 4};
  if (RUN("aten::arange.start_out", c, 4, &dest, 1, &o)) {
    fetch(&iout->t, got, 4);
    CHECK_CLOSE(got, wi, 4, 0);
  }
  pool_free();
}

int main(void) {
  test_table();
  tt_runtime_options opts = {.plugin_path = getenv("TORCHTPU_PLUGIN_PATH"),
                             .cpu_device_count = 1};
  tt_status st = tt_runtime_create(&opts, &g_rt);
  if (st) {
    fprintf(stderr, "FAIL: no runtime: %s\n", tt_status_message(st));
    tt_status_free(st);
    return 1;
  }
  test_add_promote();
  test_div_modes();
  test_activations();
  test_select_fill();
  test_reductions();
  test_softmax();
  test_linalg();
  test_shape_ops();
  test_embedding_backward();
  test_losses();
  test_random();
  test_arange();
  tt_runtime_destroy(g_rt);
  if (check_failures) {
    fprintf(stderr, "test_table: %d failure(s)\n", check_failures);
    return 1;
  }
  printf("test_table: all passed (%d rules)\n", (int)tt_op_count());
  return 0;
}
