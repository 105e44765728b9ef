// linalg_qr.c — orthogonal decompositions natively: Householder QR (geqrf,
// linalg_qr, linalg_householder_product / orgqr, ormqr), the symmetric
// eigendecomposition (_linalg_eigh: eigh, eigvalsh, and pinv(hermitian=True))
// and the SVD (_linalg_svd: svd, svdvals, pinv, matrix_rank, matrix_norm
// 'nuc'/2, cond). XLA's CPU plugin has no LAPACK custom calls, so every
// algorithm is a stablehlo.while over small batched steps (no unrolling in n:
// program size does not grow with the matrix).
//
// QR: LAPACK's geqrf, column by column (dlarfg's reflector: beta =
// -sign(alpha) * ||x||, tau = (beta - alpha) / beta, v = x / (alpha - beta)
// with v[j] = 1; tau = 0 when the column below the diagonal is already 0), so
// R's signs and the packed (reflectors, tau) output match LAPACK's and
// PyTorch's CPU results element for element. Q is accumulated by applying the
// reflectors to the identity (orgqr), ormqr applies them to `other`.
// Backward-stable like LAPACK; no scaling against overflow of ||x||^2 (inputs
// near the float range overflow where LAPACK would rescale).
//
// lstsq (driver gels, PyTorch's default off the CPU): QR of A (or of A^T for
// the minimum-norm solution when m < n) and a substitution loop.
//
// eigh: cyclic Jacobi with the parallel (round-robin, Brent-Luk) ordering:
// each step rotates n/2 disjoint (p, q) pairs at once (pairs are positions
// (i, k+i) of a [top; bottom] layout, then positions are shuffled so that
// n-1 steps meet every pair once: a sweep). A pair rotates only when
// |a_pq| > eps * sqrt(|a_pp a_qq|) (the relative criterion of Demmel and
// Veselic, which keeps small eigenvalues of graded positive definite
// matrices accurate); the loop stops after a sweep without a rotation or
// after 40 sweeps (Jacobi converges quadratically: ~5-10 sweeps in
// practice). Odd n gets a decoupled zero row and column, dropped at the end.
// Eigenvalues ascending (PyTorch's order); eigenvector signs are arbitrary
// (PyTorch does not define them either).
//
// SVD: one-sided Jacobi (Hestenes) on the columns of the tall side (A or
// A^T), the same pairing and stopping rule on |g_p . g_q| > eps ||g_p||
// ||g_q||: accurate for ill-conditioned inputs (small singular values to
// high relative accuracy, better than LAPACK's norm-wise bound). Singular
// values descending; U's columns are the normalised columns, completed to an
// orthonormal basis (zero singular values, full_matrices) by a Householder QR
// of them with R's signs folded back. Vectors' signs are arbitrary.
//
// Cost per step is O(n^2) elementwise (eigh) or O(mn) (SVD); a sweep is n-1
// steps. Fine for the small and medium matrices this backend sees; large
// matrices would want blocked algorithms.
//
// Leaves out (the CPU fallback keeps serving them): complex dtypes, 16-bit
// floats (PyTorch's CPU kernels refuse them too), _linalg_svd's CUDA-only
// `driver`, lstsq's rank-revealing drivers (gelsy, gelsd, gelss) and lstsq
// with broadcast batch dims or empty inputs; QR backward needs
// linalg_solve_triangular (lower/linalg_lu.c's family).
#include <stdio.h>
#include <string.h>

#include "lower/lower.h"

// --- helpers ------------------------------------------------------------------------------

// A batch of matrices: the batch dims (all but the last two) and the dtype.
typedef struct la {
  tt_lower_ctx *c;
  tt_hlo *b;
  tt_dtype d;
  int br;                      // batch rank
  int64_t bd[TT_MAX_RANK];     // batch dims
} la;

static la la_make(tt_lower_ctx *c, const tt_hlo_type *t) {
  la L = {c, tt_lower_hlo(c), t->dtype, t->rank - 2, {0}};
  for (int i = 0; i < L.br; i++) L.bd[i] = t->dims[i];
  return L;
}

// The type batch + trailing dims d[0..nt).
static tt_hlo_type ty(const la *L, tt_dtype d, int nt, int64_t d0, int64_t d1) {
  int64_t dims[TT_MAX_RANK];
  for (int i = 0; i < L->br; i++) dims[i] = L->bd[i];
  if (nt > 0) dims[L->br] = d0;
  if (nt > 1) dims[L->br + 1] = d1;
  return tt_hlo_make_type(d, L->br + nt, dims);
}

static int rank_of(const la *L, tt_hv v) {
  const tt_hlo_type *t = tt_hlo_type_of(L->b, v);
  return t ? t->rank : 0;
}
static int64_t dim_of(const la *L, tt_hv v, int i) {
  const tt_hlo_type *t = tt_hlo_type_of(L->b, v);
  return t ? t->dims[i < 0 ? t->rank + i : i] : 0;
}

static tt_hv add(la *L, tt_hv x, tt_hv y) { return tt_hlo_binary(L->b, TT_HLO_ADD, x, y); }
static tt_hv sub(la *L, tt_hv x, tt_hv y) { return tt_hlo_binary(L->b, TT_HLO_SUB, x, y); }
static tt_hv mul(la *L, tt_hv x, tt_hv y) { return tt_hlo_binary(L->b, TT_HLO_MUL, x, y); }
static tt_hv dvd(la *L, tt_hv x, tt_hv y) { return tt_hlo_binary(L->b, TT_HLO_DIV, x, y); }
static tt_hv un(la *L, tt_hlo_unop op, tt_hv x) { return tt_hlo_unary(L->b, op, x); }
static tt_hv kk(la *L, tt_hv like, double v) { return tt_lower_splat_like(L->c, like, v); }
static tt_hv cmp(la *L, tt_hlo_cmp op, tt_hv x, tt_hv y) { return tt_hlo_compare(L->b, op, x, y); }
static tt_hv sel(la *L, tt_hv p, tt_hv x, tt_hv y) { return tt_hlo_select(L->b, p, x, y); }
static tt_hv ki(la *L, int64_t v) { return tt_hlo_const_i(L->b, TT_I32, v); }

// v: batch dims then `vt` trailing dims, mapped to trailing positions
// tmap[] of the result batch + d[0..nt).
static tt_hv expand(la *L, tt_hv v, int vt, const int *tmap, int nt, int64_t d0, int64_t d1) {
  tt_hlo_type t = ty(L, L->d, nt, d0, d1);
  int64_t bd[TT_MAX_RANK];
  for (int i = 0; i < L->br; i++) bd[i] = i;
  for (int i = 0; i < vt; i++) bd[L->br + i] = L->br + tmap[i];
  return tt_hlo_broadcast_in_dim(L->b, v, t.rank, t.dims, bd);
}
// [*, k] as [*, k, n] (each row constant) or [*, n, k] (each column constant).
static tt_hv rows_of(la *L, tt_hv v, int64_t n) {
  static const int m0 = 0;
  return expand(L, v, 1, &m0, 2, dim_of(L, v, -1), n);
}
static tt_hv cols_of(la *L, tt_hv v, int64_t n) {
  static const int m1 = 1;
  return expand(L, v, 1, &m1, 2, n, dim_of(L, v, -1));
}
// [*] as [*, k].
static tt_hv vec_of(la *L, tt_hv v, int64_t k) { return expand(L, v, 0, NULL, 1, k, 0); }

// Sum over the last dim.
static tt_hv sum_last(la *L, tt_hv x) {
  int64_t d = rank_of(L, x) - 1;
  return tt_hlo_reduce(L->b, x, tt_hlo_const(L->b, L->d, 0), &d, 1, TT_HLO_REDUCE_ADD);
}
// Any over every dim of a bool value (a 0-d bool).
static tt_hv any_all(la *L, tt_hv x) {
  int r = rank_of(L, x);
  if (r == 0) return x;
  int64_t dims[TT_MAX_RANK];
  for (int i = 0; i < r; i++) dims[i] = i;
  return tt_hlo_reduce(L->b, x, tt_hlo_const_i(L->b, TT_BOOL, 0), dims, r, TT_HLO_REDUCE_OR);
}

// x[..., lo:hi, ...] along dim (negative counts from the end).
static tt_hv sl(la *L, tt_hv x, int dim, int64_t lo, int64_t hi) {
  const tt_hlo_type *t = tt_hlo_type_of(L->b, x);
  if (!t) return TT_HV_INVALID;
  int64_t s[TT_MAX_RANK], e[TT_MAX_RANK], st[TT_MAX_RANK];
  int d = dim < 0 ? t->rank + dim : dim;
  for (int i = 0; i < t->rank; i++) s[i] = 0, e[i] = t->dims[i], st[i] = 1;
  s[d] = lo, e[d] = hi;
  return tt_hlo_slice(L->b, x, s, e, st);
}
static tt_hv cat2(la *L, tt_hv x, tt_hv y, int dim) {
  tt_hv xs[2] = {x, y};
  return tt_hlo_concatenate(L->b, xs, 2, rank_of(L, x) + dim);
}

static tt_hv mT(la *L, tt_hv x) {
  int64_t p[TT_MAX_RANK];
  int r = rank_of(L, x);
  for (int i = 0; i < r; i++) p[i] = i;
  p[r - 2] = r - 1, p[r - 1] = r - 2;
  return tt_hlo_transpose(L->b, x, p);
}

// i32 index of trailing dim `which` (0 or 1) over batch + [n0, n1].
static tt_hv idx2(la *L, int64_t n0, int64_t n1, int which) {
  tt_hlo_type t = ty(L, TT_I32, 2, n0, n1);
  return tt_hlo_iota(L->b, &t, L->br + which);
}
// The identity's first columns: batch + [m, n] with ones where row == col.
static tt_hv eye(la *L, int64_t m, int64_t n) {
  tt_hlo_type t = ty(L, L->d, 2, m, n);
  tt_hv on = cmp(L, TT_HLO_EQ, idx2(L, m, n, 0), idx2(L, m, n, 1));
  return sel(L, on, tt_hlo_splat(L->b, &t, 1), tt_hlo_splat(L->b, &t, 0));
}

// Column j (0-d i32) of x [*, m, n] as [*, m].
static tt_hv col_at(la *L, tt_hv x, tt_hv j) {
  tt_hv st[TT_MAX_RANK];
  int64_t sz[TT_MAX_RANK];
  int r = rank_of(L, x);
  for (int i = 0; i < r; i++) st[i] = ki(L, 0), sz[i] = dim_of(L, x, i);
  st[r - 1] = j, sz[r - 1] = 1;
  tt_hv v = tt_hlo_dynamic_slice(L->b, x, st, sz);
  return tt_hlo_reshape(L->b, v, r - 1, sz);
}
// Element j of v [*, k] as [*].
static tt_hv elem_at(la *L, tt_hv v, tt_hv j) {
  tt_hv st[TT_MAX_RANK];
  int64_t sz[TT_MAX_RANK];
  int r = rank_of(L, v);
  for (int i = 0; i < r; i++) st[i] = ki(L, 0), sz[i] = dim_of(L, v, i);
  st[r - 1] = j, sz[r - 1] = 1;
  return tt_hlo_reshape(L->b, tt_hlo_dynamic_slice(L->b, v, st, sz), r - 1, sz);
}

static double eps_of(tt_dtype d) { return d == TT_F64 ? 2.220446049250313e-16 : 1.1920929e-07; }

// Only float32 / float64 are lowered; integer inputs get PyTorch's error,
// 16-bit floats go to the CPU (whose kernels name what they refuse).
static tt_status check_matrix(tt_lower_ctx *c, int i, const char *api, bool square) {
  tt_hlo_type t = tt_lower_tensor_type(c, i, -1);
  if (t.rank < 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s: The input tensor A must have at least "
                         "2 dimensions.", api);
  if (t.dtype != TT_F32 && t.dtype != TT_F64) {
    if (!tt_dtype_is_float(t.dtype) && !tt_dtype_is_complex(t.dtype))
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s: Expected a floating point or complex "
                           "tensor as input. Got %s", api, tt_dtype_torch_name(t.dtype));
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "%s of %s", api, tt_dtype_torch_name(t.dtype));
  }
  if (square && t.dims[t.rank - 1] != t.dims[t.rank - 2])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s: A must be batches of square matrices, "
                         "but they are %lld by %lld matrices", api,
                         (long long)t.dims[t.rank - 2], (long long)t.dims[t.rank - 1]);
  return NULL;
}

static const char *str_arg(tt_lower_ctx *c, int i, const char *dflt) {
  const tt_value *v = tt_lower_arg(c, i);
  return v->kind == TT_VALUE_STRING ? v->u.str : dflt;
}
static bool bool_arg(tt_lower_ctx *c, int i, bool dflt) {
  return tt_lower_is_none(c, i) ? dflt : tt_lower_bool(c, i);
}

static tt_hv empty0(la *L) {
  int64_t z = 0;
  tt_hlo_type t = tt_hlo_make_type(L->d, 1, &z);
  return tt_hlo_splat(L->b, &t, 0);
}

// --- Householder QR ----------------------------------------------------------------------

typedef struct qr_out {
  tt_hv r;    // [*, m, n], upper triangular (zeros below the diagonal)
  tt_hv v;    // [*, m, k] reflectors: 1 on the diagonal, zeros above
  tt_hv tau;  // [*, k]
} qr_out;

// geqrf of a [*, m, n] (m, n > 0), one column per step.
static qr_out house_qr(la *L, tt_hv a, int64_t m, int64_t n) {
  int64_t k = m < n ? m : n;
  tt_hlo_type vt = ty(L, L->d, 2, m, k), tt = ty(L, L->d, 1, k, 0);
  tt_hlo_type mt = ty(L, TT_I32, 1, m, 0);
  tt_hv row = tt_hlo_iota(L->b, &mt, L->br);  // [*, m]
  tt_hv rr = idx2(L, m, n, 0), cc = idx2(L, m, n, 1);
  tt_hlo_type kt = ty(L, TT_I32, 1, k, 0);
  tt_hv kidx = tt_hlo_iota(L->b, &kt, L->br);
  tt_hv init[4] = {ki(L, 0), a, tt_hlo_splat(L->b, &vt, 0), tt_hlo_splat(L->b, &tt, 0)};
  tt_hv g[4];
  tt_hv res = tt_hlo_while_begin(L->b, init, 4, g);
  tt_hlo_while_body(L->b, cmp(L, TT_HLO_LT, g[0], ki(L, k)), 4, res, g);
  tt_hv j = g[0], w = g[1];
  tt_hv jm = tt_hlo_broadcast_in_dim(L->b, j, L->br + 1, ty(L, TT_I32, 1, m, 0).dims, NULL);
  tt_hv x = col_at(L, w, j);
  tt_hv at = cmp(L, TT_HLO_EQ, row, jm), below = cmp(L, TT_HLO_GT, row, jm);
  tt_hv zx = kk(L, x, 0);
  tt_hv alpha = sum_last(L, sel(L, at, x, zx));
  tt_hv xt = sel(L, below, x, zx);
  tt_hv xn2 = sum_last(L, mul(L, xt, xt));
  tt_hv nrm = un(L, TT_HLO_SQRT, add(L, mul(L, alpha, alpha), xn2));
  tt_hv beta = sel(L, cmp(L, TT_HLO_GE, alpha, kk(L, alpha, 0)), un(L, TT_HLO_NEG, nrm), nrm);
  tt_hv keep = cmp(L, TT_HLO_EQ, xn2, kk(L, xn2, 0));  // H = I
  tt_hv one = kk(L, alpha, 1), zero = kk(L, alpha, 0);
  tt_hv sbeta = sel(L, keep, one, beta);
  tt_hv tau = sel(L, keep, zero, dvd(L, sub(L, beta, alpha), sbeta));
  tt_hv scale = sel(L, keep, zero, dvd(L, one, sel(L, keep, one, sub(L, alpha, beta))));
  tt_hv v = sel(L, at, kk(L, x, 1), mul(L, xt, vec_of(L, scale, m)));
  // w -= tau v (v^T w); then column j is exactly beta e_j below row j.
  int64_t bx[TT_MAX_RANK];
  for (int i = 0; i < L->br; i++) bx[i] = i;
  int64_t cv = L->br, cw = L->br;
  tt_hv vw = tt_hlo_dot_general(L->b, v, w, bx, bx, L->br, &cv, &cw, 1, L->d);  // [*, n]
  tt_hv upd = mul(L, cols_of(L, mul(L, vec_of(L, tau, n), vw), m), rows_of(L, v, n));
  tt_hv w2 = sub(L, w, upd);
  tt_hv jmn = tt_hlo_broadcast_in_dim(L->b, j, L->br + 2, ty(L, TT_I32, 2, m, n).dims, NULL);
  tt_hv colj = cmp(L, TT_HLO_EQ, cc, jmn);
  tt_hv diag = tt_lower_bin(L->c, TT_HLO_AND, colj, cmp(L, TT_HLO_EQ, rr, jmn));
  tt_hv under = tt_lower_bin(L->c, TT_HLO_AND, colj, cmp(L, TT_HLO_GT, rr, jmn));
  tt_hv beff = sel(L, keep, alpha, beta);
  w2 = sel(L, diag, expand(L, beff, 0, NULL, 2, m, n), sel(L, under, kk(L, w2, 0), w2));
  tt_hv st[TT_MAX_RANK];
  for (int i = 0; i < L->br + 1; i++) st[i] = ki(L, 0);
  st[L->br + 1] = j;
  int64_t vd[TT_MAX_RANK];
  memcpy(vd, ty(L, L->d, 2, m, 1).dims, sizeof vd);
  tt_hv v2 = tt_hlo_dynamic_update_slice(L->b, g[2], tt_hlo_reshape(L->b, v, L->br + 2, vd), st);
  tt_hv jk = tt_hlo_broadcast_in_dim(L->b, j, L->br + 1, kt.dims, NULL);
  tt_hv t2 = sel(L, cmp(L, TT_HLO_EQ, kidx, jk), vec_of(L, tau, k), g[3]);
  tt_hv next[4] = {add(L, j, ki(L, 1)), w2, v2, t2};
  tt_hlo_while_end(L->b, init, next, 4, res);
  qr_out o = {TT_HV_INVALID, TT_HV_INVALID, TT_HV_INVALID};
  if (res == TT_HV_INVALID) return o;
  o.r = res + 1, o.v = res + 2, o.tau = res + 3;
  return o;
}

// Q = H_0 H_1 ... H_{k-1} (H_j = I - tau_j v_j v_j^T, v: [*, m, k]) applied
// to x: Q x or Q^T x (left: x [*, m, p]), x Q or x Q^T (right: x [*, p, m]).
static tt_hv apply_q(la *L, tt_hv v, tt_hv tau, tt_hv x, bool left, bool trans) {
  int64_t k = dim_of(L, v, -1), m = dim_of(L, v, -2);
  int64_t p = left ? dim_of(L, x, -1) : dim_of(L, x, -2);
  if (k == 0) return x;
  // The order: Q x and x Q^T apply H_{k-1} first; Q^T x and x Q apply H_0 first.
  bool desc = left != trans;
  tt_hv init[2] = {ki(L, 0), x};
  tt_hv g[2];
  tt_hv res = tt_hlo_while_begin(L->b, init, 2, g);
  tt_hlo_while_body(L->b, cmp(L, TT_HLO_LT, g[0], ki(L, k)), 2, res, g);
  tt_hv j = desc ? sub(L, ki(L, k - 1), g[0]) : g[0];
  tt_hv vj = col_at(L, v, j), tj = elem_at(L, tau, j);  // [*, m], [*]
  int64_t bx[TT_MAX_RANK];
  for (int i = 0; i < L->br; i++) bx[i] = i;
  tt_hv y = g[1], w, upd;
  if (left) {  // y -= tau v (v^T y)
    int64_t cv = L->br, cy = L->br;
    w = tt_hlo_dot_general(L->b, vj, y, bx, bx, L->br, &cv, &cy, 1, L->d);  // [*, p]
    upd = mul(L, cols_of(L, mul(L, vec_of(L, tj, p), w), m), rows_of(L, vj, p));
  } else {  // y -= tau (y v) v^T
    int64_t cv = L->br, cy = L->br + 1;
    w = tt_hlo_dot_general(L->b, y, vj, bx, bx, L->br, &cy, &cv, 1, L->d);  // [*, p]
    upd = mul(L, rows_of(L, mul(L, vec_of(L, tj, p), w), m), cols_of(L, vj, p));
  }
  tt_hv next[2] = {add(L, g[0], ki(L, 1)), sub(L, y, upd)};
  tt_hlo_while_end(L->b, init, next, 2, res);
  return res == TT_HV_INVALID ? TT_HV_INVALID : res + 1;
}

// The unit lower trapezoid of the first k columns of a [*, m, n]: the
// reflectors geqrf packs below R.
static tt_hv unit_lower(la *L, tt_hv a, int64_t m, int64_t k) {
  tt_hv ak = sl(L, a, -1, 0, k);
  tt_hv r = idx2(L, m, k, 0), c = idx2(L, m, k, 1);
  tt_hv z = kk(L, ak, 0);
  return sel(L, cmp(L, TT_HLO_EQ, r, c), kk(L, ak, 1), sel(L, cmp(L, TT_HLO_GT, r, c), ak, z));
}

// geqrf(self) -> (a, tau)
static tt_status lower_geqrf(tt_lower_ctx *c) {
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  if (t.rank < 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.geqrf: input must have at least 2 "
                         "dimensions.");
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "torch.geqrf", false));
  la L = la_make(c, &t);
  int64_t m = t.dims[t.rank - 2], n = t.dims[t.rank - 1], k = m < n ? m : n;
  tt_hv a = tt_lower_tensor(c, 0);
  tt_hlo_type tt = ty(&L, L.d, 1, k, 0);
  if (tt_hlo_numel(&t) == 0) {
    tt_lower_result(c, a);
    tt_lower_result(c, tt_hlo_splat(L.b, &tt, 0));
    return NULL;
  }
  qr_out q = house_qr(&L, a, m, n);
  tt_hv v = q.v;
  if (n > k) {  // pad the reflectors' columns to n
    tt_hlo_type zt = ty(&L, L.d, 2, m, n - k);
    v = cat2(&L, v, tt_hlo_splat(L.b, &zt, 0), -1);
  }
  tt_hv below = cmp(&L, TT_HLO_GT, idx2(&L, m, n, 0), idx2(&L, m, n, 1));
  tt_lower_result(c, sel(&L, below, v, q.r));
  tt_lower_result(c, q.tau);
  return NULL;
}

// linalg_qr(A, mode) -> (Q, R)
static tt_status lower_linalg_qr(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "linalg.qr", false));
  const char *mode = str_arg(c, 1, "reduced");
  bool complete = strcmp(mode, "complete") == 0, ronly = strcmp(mode, "r") == 0;
  if (!complete && !ronly && strcmp(mode, "reduced") != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "qr received unrecognized mode '%s' but "
                         "expected one of 'reduced' (default), 'r', or 'complete'", mode);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  la L = la_make(c, &t);
  int64_t m = t.dims[t.rank - 2], n = t.dims[t.rank - 1], k = m < n ? m : n;
  int64_t qc = complete ? m : k, rr = complete ? m : k;
  tt_hv a = tt_lower_tensor(c, 0);
  tt_hlo_type rt = ty(&L, L.d, 2, rr, n);
  if (tt_hlo_numel(&t) == 0) {
    tt_lower_result(c, ronly ? empty0(&L) : eye(&L, m, qc));
    tt_lower_result(c, tt_hlo_splat(L.b, &rt, 0));
    return NULL;
  }
  qr_out q = house_qr(&L, a, m, n);
  tt_lower_result(c, ronly ? empty0(&L) : apply_q(&L, q.v, q.tau, eye(&L, m, qc), true, false));
  tt_lower_result(c, rr == m ? q.r : sl(&L, q.r, -2, 0, rr));
  return NULL;
}

// linalg_householder_product(input [*, m, n], tau [*, k]) -> Q[:, :n]
static tt_status lower_householder_product(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "torch.linalg.householder_product", false));
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1), tt = tt_lower_tensor_type(c, 1, -1);
  int64_t m = t.dims[t.rank - 2], n = t.dims[t.rank - 1];
  int64_t k = tt.rank ? tt.dims[tt.rank - 1] : 0;
  if (m < n)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.linalg.householder_product: "
                         "input.shape[-2] must be greater than or equal to input.shape[-1]");
  if (n < k)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.linalg.householder_product: "
                         "input.shape[-1] must be greater than or equal to tau.shape[-1]");
  if (tt.rank != t.rank - 1 || memcmp(tt.dims, t.dims, sizeof(int64_t) * (size_t)(t.rank - 2)))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.linalg.householder_product: Expected "
                         "batch dimensions of tau to be equal to input.shape[:-2]");
  if (tt.dtype != t.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.linalg.householder_product: tau dtype "
                         "%s does not match input dtype %s", tt_dtype_cpp_name(tt.dtype),
                         tt_dtype_cpp_name(t.dtype));
  la L = la_make(c, &t);
  tt_hv a = tt_lower_tensor(c, 0), tau = tt_lower_tensor(c, 1);
  if (tt_hlo_numel(&t) == 0) {
    tt_lower_result(c, eye(&L, m, n));
    return NULL;
  }
  tt_lower_result(c, apply_q(&L, unit_lower(&L, a, m, k), tau, eye(&L, m, n), true, false));
  return NULL;
}

// ormqr(input [*, mq, k'], tau [*, k], other, left, transpose)
static tt_status lower_ormqr(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "torch.ormqr", false));
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1), tt = tt_lower_tensor_type(c, 1, -1);
  tt_hlo_type ot = tt_lower_tensor_type(c, 2, -1);
  bool left = bool_arg(c, 3, true), trans = bool_arg(c, 4, false);
  int64_t mq = t.dims[t.rank - 2], kc = t.dims[t.rank - 1];
  int64_t k = tt.rank ? tt.dims[tt.rank - 1] : 0;
  if (ot.rank != t.rank || tt.rank != t.rank - 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.ormqr: other.dim() must be equal to "
                         "input.dim() and tau.dim() to input.dim() - 1");
  int64_t om = left ? ot.dims[ot.rank - 2] : ot.dims[ot.rank - 1];
  if (om != mq)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.ormqr: Expected other.shape[%d] to be "
                         "equal to %lld, but got %lld", left ? -2 : -1, (long long)mq,
                         (long long)om);
  if (k > kc || k > mq)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.ormqr: tau.shape[-1] must be less "
                         "than or equal to input.shape[-1]");
  for (int i = 0; i < t.rank - 2; i++)
    if (ot.dims[i] != t.dims[i] || tt.dims[i] != t.dims[i])
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.ormqr: Expected batch dimensions "
                           "of other and tau to be equal to input.shape[:-2]");
  if (tt.dtype != t.dtype || ot.dtype != t.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.ormqr: Expected input, tau and other "
                         "to have the same dtype");
  la L = la_make(c, &t);
  tt_hv a = tt_lower_tensor(c, 0), tau = tt_lower_tensor(c, 1), o = tt_lower_tensor(c, 2);
  if (tt_hlo_numel(&t) == 0 || tt_hlo_numel(&ot) == 0) {
    tt_lower_result(c, o);
    return NULL;
  }
  tt_lower_result(c, apply_q(&L, unit_lower(&L, a, mq, k), tau, o, left, trans));
  return NULL;
}

// --- Jacobi rotations ----------------------------------------------------------------------

// The rotation that zeroes the off-diagonal of [[a, g], [g, b]] (Golub and
// Van Loan's symSchur2): t = sign(z) / (|z| + sqrt(1 + z^2)), z = (b - a) /
// (2g), c = 1 / sqrt(1 + t^2), s = t c; c = 1, s = 0 where !rot.
static void rotation(la *L, tt_hv a, tt_hv bb, tt_hv g, tt_hv rot, tt_hv *c, tt_hv *s) {
  tt_hv one = kk(L, g, 1);
  tt_hv gs = sel(L, rot, g, one);
  tt_hv z = dvd(L, sub(L, bb, a), add(L, gs, gs));
  tt_hv az = un(L, TT_HLO_ABS, z);
  tt_hv big = cmp(L, TT_HLO_GT, az, one);
  tt_hv inv = dvd(L, one, sel(L, big, az, one));
  tt_hv root = sel(L, big, mul(L, az, un(L, TT_HLO_SQRT, add(L, one, mul(L, inv, inv)))),
                   un(L, TT_HLO_SQRT, add(L, one, mul(L, az, az))));
  tt_hv t = dvd(L, one, add(L, az, root));
  t = sel(L, cmp(L, TT_HLO_LT, z, kk(L, z, 0)), un(L, TT_HLO_NEG, t), t);
  tt_hv cc = un(L, TT_HLO_RSQRT, add(L, one, mul(L, t, t)));
  *c = sel(L, rot, cc, one);
  *s = sel(L, rot, mul(L, t, cc), kk(L, g, 0));
}

// Positions after one round of the round-robin: new top = [t0, b0, t1 ..
// t_{k-2}], new bottom = [b1 .. b_{k-1}, t_{k-1}] along `dim` (length 2k).
static tt_hv shuffle(la *L, tt_hv x, int dim, int64_t k) {
  if (k < 2) return x;
  const int64_t lo[5] = {0, k, 1, k + 1, k - 1}, hi[5] = {1, k + 1, k - 1, 2 * k, k};
  tt_hv parts[5];
  int n = 0;
  for (int i = 0; i < 5; i++)
    if (hi[i] > lo[i]) parts[n++] = sl(L, x, dim, lo[i], hi[i]);
  int r = rank_of(L, x);
  return tt_hlo_concatenate(L->b, parts, n, dim < 0 ? r + dim : dim);
}

// Column pairs (i, k+i) of x [*, r, 2k] rotated: [cL - sR, sL + cR].
static tt_hv rotate_cols(la *L, tt_hv x, tt_hv c, tt_hv s, int64_t k) {
  int64_t r = dim_of(L, x, -2);
  tt_hv lf = sl(L, x, -1, 0, k), rt = sl(L, x, -1, k, 2 * k);
  tt_hv cb = cols_of(L, c, r), sb = cols_of(L, s, r);
  return cat2(L, sub(L, mul(L, cb, lf), mul(L, sb, rt)), add(L, mul(L, sb, lf), mul(L, cb, rt)), -1);
}
static tt_hv rotate_rows(la *L, tt_hv x, tt_hv c, tt_hv s, int64_t k) {
  int64_t n = dim_of(L, x, -1);
  tt_hv tp = sl(L, x, -2, 0, k), bt = sl(L, x, -2, k, 2 * k);
  tt_hv cb = rows_of(L, c, n), sb = rows_of(L, s, n);
  return cat2(L, sub(L, mul(L, cb, tp), mul(L, sb, bt)), add(L, mul(L, sb, tp), mul(L, cb, bt)), -2);
}

// The diagonal of the k x k block of x [*, N, N] at (r0, c0): [*, k].
static tt_hv block_diag(la *L, tt_hv x, int64_t r0, int64_t c0, int64_t k, tt_hv eyek) {
  tt_hv blk = sl(L, sl(L, x, -2, r0, r0 + k), -1, c0, c0 + k);
  return sum_last(L, mul(L, blk, eyek));
}

enum { kMaxSweeps = 40 };

// The state the sweep loops carry besides the matrices: step in the sweep,
// sweep count, a rotation happened this sweep, done.
typedef struct sweep_state { tt_hv step, sweep, rotated, done; } sweep_state;

static tt_hv bconst(la *L, bool v) { return tt_hlo_const_i(L->b, TT_BOOL, v); }

// Advances the bookkeeping after a round that rotated where `rot` ([*, k]).
static sweep_state sweep_next(la *L, sweep_state s, tt_hv rot, int64_t rounds) {
  tt_hv any = tt_lower_bin(L->c, TT_HLO_OR, s.rotated, any_all(L, rot));
  tt_hv last = cmp(L, TT_HLO_EQ, s.step, ki(L, rounds - 1));
  sweep_state n;
  n.step = sel(L, last, ki(L, 0), add(L, s.step, ki(L, 1)));
  n.sweep = sel(L, last, add(L, s.sweep, ki(L, 1)), s.sweep);
  n.rotated = sel(L, last, bconst(L, false), any);
  n.done = sel(L, last, un(L, TT_HLO_NOT, any), bconst(L, false));
  return n;
}
static tt_hv sweep_cond(la *L, sweep_state s) {
  return tt_lower_bin(L->c, TT_HLO_AND, un(L, TT_HLO_NOT, s.done),
                      cmp(L, TT_HLO_LT, s.sweep, ki(L, kMaxSweeps)));
}

// i32 positions 0..N-1 as [N] (tracks where each original index went).
static tt_hv positions(la *L, int64_t N) {
  tt_hlo_type t = tt_hlo_make_type(TT_I32, 1, &N);
  return tt_hlo_iota(L->b, &t, 0);
}

// --- eigh ------------------------------------------------------------------------------------

// Jacobi on symmetric a [*, n, n]: (w [*, n] ascending, V [*, n, n] or invalid).
static void jacobi_eigh(la *L, tt_hv a, int64_t n, bool want_v, tt_hv *out_w, tt_hv *out_v) {
  int64_t N = n + (n & 1), k = N / 2;
  if (N != n) {  // a decoupled zero row and column
    tt_hv z = tt_hlo_const(L->b, L->d, 0);
    int64_t lo[TT_MAX_RANK] = {0}, hi[TT_MAX_RANK] = {0}, in[TT_MAX_RANK] = {0};
    hi[L->br] = hi[L->br + 1] = 1;
    a = tt_hlo_pad(L->b, a, z, lo, hi, in);
  }
  tt_hv eyek = eye(L, k, k);
  double eps = eps_of(L->d), tiny = L->d == TT_F64 ? 2.2250738585072014e-308 : 1.17549435e-38;
  tt_hv init[7] = {ki(L, 0), ki(L, 0), bconst(L, false), bconst(L, false), a,
                   want_v ? eye(L, N, N) : ki(L, 0), positions(L, N)};
  tt_hv g[7];
  tt_hv res = tt_hlo_while_begin(L->b, init, 7, g);
  sweep_state s = {g[0], g[1], g[2], g[3]};
  tt_hlo_while_body(L->b, sweep_cond(L, s), 7, res, g);
  s = (sweep_state){g[0], g[1], g[2], g[3]};
  tt_hv x = g[4];
  tt_hv app = block_diag(L, x, 0, 0, k, eyek), aqq = block_diag(L, x, k, k, k, eyek);
  tt_hv apq = block_diag(L, x, 0, k, k, eyek);
  tt_hv thr = mul(L, kk(L, app, eps), mul(L, un(L, TT_HLO_SQRT, un(L, TT_HLO_ABS, app)),
                                         un(L, TT_HLO_SQRT, un(L, TT_HLO_ABS, aqq))));
  tt_hv aq = un(L, TT_HLO_ABS, apq);
  tt_hv rot = tt_lower_bin(L->c, TT_HLO_AND, cmp(L, TT_HLO_GT, aq, thr),
                           cmp(L, TT_HLO_GT, aq, kk(L, aq, tiny)));
  tt_hv cs, sn;
  rotation(L, app, aqq, apq, rot, &cs, &sn);
  x = rotate_cols(L, rotate_rows(L, x, cs, sn, k), cs, sn, k);
  tt_hv v = want_v ? shuffle(L, rotate_cols(L, g[5], cs, sn, k), -1, k) : g[5];
  x = shuffle(L, shuffle(L, x, -2, k), -1, k);
  sweep_state ns = sweep_next(L, s, rot, N - 1);
  tt_hv next[7] = {ns.step, ns.sweep, ns.rotated, ns.done, x, v, shuffle(L, g[6], 0, k)};
  tt_hlo_while_end(L->b, init, next, 7, res);
  if (res == TT_HV_INVALID) {
    *out_w = *out_v = TT_HV_INVALID;
    return;
  }
  tt_hv w = sum_last(L, mul(L, res + 4, eye(L, N, N)));
  if (N != n) {  // the padding sorts last
    tt_hv pos = tt_hlo_broadcast_in_dim(L->b, res + 6, L->br + 1, ty(L, TT_I32, 1, N, 0).dims,
                                        (int64_t[]){L->br});
    tt_hv pad = cmp(L, TT_HLO_EQ, pos, tt_lower_splat_like(L->c, pos, (double)n));
    w = sel(L, pad, kk(L, w, __builtin_inf()), w);
  }
  tt_hv ws, vs = TT_HV_INVALID;
  if (want_v) {
    tt_hv ks;
    tt_hlo_sort(L->b, cols_of(L, w, N), res + 5, L->br + 1, false, &ks, &vs);
  }
  tt_hlo_sort(L->b, w, TT_HV_INVALID, L->br, false, &ws, NULL);
  if (N != n) {
    ws = sl(L, ws, -1, 0, n);
    if (want_v) vs = sl(L, sl(L, vs, -1, 0, n), -2, 0, n);
  }
  *out_w = ws;
  *out_v = vs;
}

// _linalg_eigh(A, UPLO="L", compute_v=True) -> (eigenvalues, eigenvectors)
static tt_status lower_linalg_eigh(tt_lower_ctx *c) {
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  if (t.rank >= 2 && !tt_dtype_is_float(t.dtype) && !tt_dtype_is_complex(t.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "eigh of %s: the CPU kernel names the error",
                         tt_dtype_torch_name(t.dtype));
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "linalg.eigh", true));
  const char *uplo = str_arg(c, 1, "L");
  if (strcmp(uplo, "L") != 0 && strcmp(uplo, "U") != 0 && strcmp(uplo, "l") != 0 &&
      strcmp(uplo, "u") != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected UPLO argument to be 'L' or 'U', "
                         "but got %s", uplo);
  bool lower = uplo[0] == 'L' || uplo[0] == 'l';
  bool want_v = bool_arg(c, 2, true);
  la L = la_make(c, &t);
  int64_t n = t.dims[t.rank - 1];
  tt_hv a = tt_lower_tensor(c, 0);
  tt_hlo_type wt = ty(&L, L.d, 1, n, 0);
  if (tt_hlo_numel(&t) == 0 || n == 1) {
    tt_lower_result(c, n == 1 ? tt_hlo_reshape(L.b, a, wt.rank, wt.dims) : tt_hlo_splat(L.b, &wt, 0));
    tt_lower_result(c, want_v ? eye(&L, n, n) : empty0(&L));
    return NULL;
  }
  // The symmetric matrix the chosen triangle describes.
  tt_hv r = idx2(&L, n, n, 0), cc = idx2(&L, n, n, 1);
  tt_hv mine = cmp(&L, lower ? TT_HLO_GE : TT_HLO_LE, r, cc);
  a = sel(&L, mine, a, mT(&L, a));
  tt_hv w, v;
  jacobi_eigh(&L, a, n, want_v, &w, &v);
  tt_lower_result(c, w);
  tt_lower_result(c, want_v ? v : empty0(&L));
  return NULL;
}

// --- SVD -------------------------------------------------------------------------------------

// One-sided Jacobi on the columns of g [*, m, n] (m >= n): (s [*, n]
// descending, U1 [*, m, n] (normalised columns, zeros for s == 0), V [*, n, n]
// or invalid).
static void jacobi_svd(la *L, tt_hv g0, int64_t m, int64_t n, bool want_v, tt_hv *out_s,
                       tt_hv *out_u, tt_hv *out_v) {
  int64_t N = n + (n & 1), k = N / 2;
  tt_hv z = tt_hlo_const(L->b, L->d, 0);
  int64_t lo[TT_MAX_RANK] = {0}, hi[TT_MAX_RANK] = {0}, in[TT_MAX_RANK] = {0};
  hi[L->br + 1] = N - n;
  tt_hv gp = N != n ? tt_hlo_pad(L->b, g0, z, lo, hi, in) : g0;
  double eps = eps_of(L->d);
  int64_t rd = L->br;  // column sums reduce the rows
  tt_hv zz = tt_hlo_const(L->b, L->d, 0);  // made outside the loop: used after it too
  tt_hv init[7] = {ki(L, 0), ki(L, 0), bconst(L, false), bconst(L, false), gp,
                   want_v ? eye(L, N, N) : ki(L, 0), positions(L, N)};
  tt_hv g[7];
  tt_hv res = tt_hlo_while_begin(L->b, init, 7, g);
  sweep_state s = {g[0], g[1], g[2], g[3]};
  tt_hlo_while_body(L->b, sweep_cond(L, s), 7, res, g);
  s = (sweep_state){g[0], g[1], g[2], g[3]};
  tt_hv x = g[4];
  tt_hv lf = sl(L, x, -1, 0, k), rt = sl(L, x, -1, k, 2 * k);
  tt_hv al = tt_hlo_reduce(L->b, mul(L, lf, lf), zz, &rd, 1, TT_HLO_REDUCE_ADD);
  tt_hv be = tt_hlo_reduce(L->b, mul(L, rt, rt), zz, &rd, 1, TT_HLO_REDUCE_ADD);
  tt_hv ga = tt_hlo_reduce(L->b, mul(L, lf, rt), zz, &rd, 1, TT_HLO_REDUCE_ADD);
  tt_hv thr = mul(L, kk(L, al, eps), mul(L, un(L, TT_HLO_SQRT, al), un(L, TT_HLO_SQRT, be)));
  tt_hv rot = cmp(L, TT_HLO_GT, un(L, TT_HLO_ABS, ga), thr);
  tt_hv cs, sn;
  rotation(L, al, be, ga, rot, &cs, &sn);
  x = shuffle(L, rotate_cols(L, x, cs, sn, k), -1, k);
  tt_hv v = want_v ? shuffle(L, rotate_cols(L, g[5], cs, sn, k), -1, k) : g[5];
  sweep_state ns = sweep_next(L, s, rot, N - 1);
  tt_hv next[7] = {ns.step, ns.sweep, ns.rotated, ns.done, x, v, shuffle(L, g[6], 0, k)};
  tt_hlo_while_end(L->b, init, next, 7, res);
  if (res == TT_HV_INVALID) {
    *out_s = *out_u = *out_v = TT_HV_INVALID;
    return;
  }
  x = res + 4;
  tt_hv sv = un(L, TT_HLO_SQRT, tt_hlo_reduce(L->b, mul(L, x, x), zz, &rd, 1, TT_HLO_REDUCE_ADD));
  tt_hv key = sv;
  if (N != n) {  // the padded column sorts last
    tt_hv pos = tt_hlo_broadcast_in_dim(L->b, res + 6, L->br + 1, ty(L, TT_I32, 1, N, 0).dims,
                                        (int64_t[]){L->br});
    tt_hv pad = cmp(L, TT_HLO_EQ, pos, tt_lower_splat_like(L->c, pos, (double)n));
    key = sel(L, pad, kk(L, sv, -1), sv);
  }
  tt_hv ks, xs, vs = TT_HV_INVALID;
  tt_hlo_sort(L->b, cols_of(L, key, m), x, L->br + 1, true, &ks, &xs);
  if (want_v) tt_hlo_sort(L->b, cols_of(L, key, N), res + 5, L->br + 1, true, &ks, &vs);
  tt_hlo_sort(L->b, key, TT_HV_INVALID, L->br, true, &ks, NULL);
  if (N != n) {
    ks = sl(L, ks, -1, 0, n);
    xs = sl(L, xs, -1, 0, n);
    if (want_v) vs = sl(L, sl(L, vs, -1, 0, n), -2, 0, n);
  }
  tt_hv pos = cmp(L, TT_HLO_GT, ks, kk(L, ks, 0));
  tt_hv inv = sel(L, pos, dvd(L, kk(L, ks, 1), sel(L, pos, ks, kk(L, ks, 1))), kk(L, ks, 0));
  *out_s = ks;
  *out_u = mul(L, xs, cols_of(L, inv, m));
  *out_v = vs;
}

// u1 [*, m, n] with orthonormal (or zero, trailing) columns completed to the
// first `cols` columns of an orthogonal matrix (cols >= n).
static tt_hv complete_basis(la *L, tt_hv u1, int64_t m, int64_t n, int64_t cols) {
  qr_out q = house_qr(L, u1, m, n);
  tt_hv qm = apply_q(L, q.v, q.tau, eye(L, m, cols), true, false);
  tt_hv d = sum_last(L, mul(L, sl(L, q.r, -2, 0, n), eye(L, n, n)));  // diag(R): [*, n]
  tt_hv sg = sel(L, cmp(L, TT_HLO_LT, d, kk(L, d, 0)), kk(L, d, -1), kk(L, d, 1));
  if (cols > n) {
    tt_hlo_type ot = ty(L, L->d, 1, cols - n, 0);
    sg = cat2(L, sg, tt_hlo_splat(L->b, &ot, 1), -1);
  }
  return mul(L, qm, cols_of(L, sg, m));
}

// _linalg_svd(A, full_matrices=False, compute_uv=True, *, driver=None) -> (U, S, Vh)
static tt_status lower_linalg_svd(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "linalg.svd", false));
  if (!tt_lower_is_none(c, 3))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "svd with a driver (cuSOLVER only)");
  bool full = bool_arg(c, 1, false), want_uv = bool_arg(c, 2, true);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  la L = la_make(c, &t);
  int64_t m = t.dims[t.rank - 2], n = t.dims[t.rank - 1], k = m < n ? m : n;
  int64_t mm = m < n ? n : m;  // the tall side's rows
  int64_t uc = full ? m : k, vr = full ? n : k;
  tt_hv a = tt_lower_tensor(c, 0);
  tt_hlo_type st = ty(&L, L.d, 1, k, 0);
  if (tt_hlo_numel(&t) == 0) {
    tt_lower_result(c, want_uv ? eye(&L, m, uc) : empty0(&L));
    tt_lower_result(c, tt_hlo_splat(L.b, &st, 0));
    tt_lower_result(c, want_uv ? eye(&L, vr, n) : empty0(&L));
    return NULL;
  }
  bool wide = m < n;
  tt_hv g = wide ? mT(&L, a) : a;  // [*, mm, k]
  tt_hv s, u1, v;
  jacobi_svd(&L, g, mm, k, want_uv, &s, &u1, &v);
  if (!want_uv) {
    tt_lower_result(c, empty0(&L));
    tt_lower_result(c, s);
    tt_lower_result(c, empty0(&L));
    return NULL;
  }
  // g = U1 S V^T; U1 completed to (full ? mm : k) columns.
  tt_hv u = complete_basis(&L, u1, mm, k, (wide ? vr : uc));
  if (!wide) {
    tt_lower_result(c, u);
    tt_lower_result(c, s);
    tt_lower_result(c, mT(&L, v));
  } else {  // A = V S U^T
    tt_lower_result(c, v);
    tt_lower_result(c, s);
    tt_lower_result(c, mT(&L, u));
  }
  return NULL;
}

// --- lstsq (driver 'gels') ---------------------------------------------------------------

// Solves the triangular r [*, n, n] (upper, or lower with `lower`) for y
// [*, n, p] by substitution, one row per step.
static tt_hv tri_solve(la *L, tt_hv r, tt_hv y, int64_t n, bool lower) {
  int64_t p = dim_of(L, y, -1);
  tt_hv rowi = idx2(L, n, p, 0);
  tt_hv init[2] = {ki(L, 0), kk(L, y, 0)};
  tt_hv g[2];
  tt_hv res = tt_hlo_while_begin(L->b, init, 2, g);
  tt_hlo_while_body(L->b, cmp(L, TT_HLO_LT, g[0], ki(L, n)), 2, res, g);
  tt_hv j = lower ? g[0] : sub(L, ki(L, n - 1), g[0]);
  tt_hv rr = col_at(L, mT(L, r), j);  // row j of r: [*, n]
  tt_hv rjj = elem_at(L, rr, j);      // [*]
  int64_t bx[TT_MAX_RANK];
  for (int i = 0; i < L->br; i++) bx[i] = i;
  int64_t cr = L->br, cx = L->br;
  // x's rows not yet solved are zero, so the product sums the solved ones.
  tt_hv dot = tt_hlo_dot_general(L->b, rr, g[1], bx, bx, L->br, &cr, &cx, 1, L->d);  // [*, p]
  tt_hv yj = col_at(L, mT(L, y), j);  // row j of y: [*, p]
  tt_hv xj = dvd(L, sub(L, yj, dot), vec_of(L, rjj, p));
  tt_hv jb = tt_hlo_broadcast_in_dim(L->b, j, L->br + 2, ty(L, TT_I32, 2, n, p).dims, NULL);
  tt_hv x2 = sel(L, cmp(L, TT_HLO_EQ, rowi, jb), cols_of(L, xj, n), g[1]);
  tt_hv next[2] = {add(L, g[0], ki(L, 1)), x2};
  tt_hlo_while_end(L->b, init, next, 2, res);
  return res == TT_HV_INVALID ? TT_HV_INVALID : res + 1;
}

// linalg_lstsq.out(A, B, rcond, *, driver, solution, residuals, rank,
// singular_values) with LAPACK gels' semantics (PyTorch's default off the
// CPU): full-rank A; QR of A (m >= n) or of A^T (m < n, the minimum-norm
// solution). Other drivers (rank-revealing) stay on the CPU.
static tt_status lower_lstsq(tt_lower_ctx *c) {
  tt_hlo_type at = tt_lower_tensor_type(c, 0, -1), bt = tt_lower_tensor_type(c, 1, -1);
  if (at.rank < 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.linalg.lstsq: input must have at "
                         "least 2 dimensions.");
  if (bt.rank < 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.linalg.lstsq: other must have at "
                         "least 1 dimension.");
  const char *driver = str_arg(c, 3, "gels");
  if (strcmp(driver, "gels") != 0)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "lstsq driver %s", driver);
  if (at.dtype != bt.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.linalg.lstsq: Expected input and "
                         "other to have the same dtype, but got input's dtype %s and other's "
                         "dtype %s", tt_dtype_torch_name(at.dtype), tt_dtype_torch_name(bt.dtype));
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "torch.linalg.lstsq", false));
  bool vec = bt.rank == at.rank - 1;
  if (!vec && bt.rank != at.rank)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.linalg.lstsq: input.dim() must be "
                         "greater or equal to other.dim() and (input.dim() - other.dim()) <= 1");
  int64_t m = at.dims[at.rank - 2], n = at.dims[at.rank - 1];
  if ((vec ? bt.dims[bt.rank - 1] : bt.dims[bt.rank - 2]) != m)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.linalg.lstsq: input.size(-2) should "
                         "match other.size(-2)");
  if (memcmp(bt.dims, at.dims, sizeof(int64_t) * (size_t)(at.rank - 2)))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "lstsq with broadcast batch dims");
  la L = la_make(c, &at);
  int64_t p = vec ? 1 : bt.dims[bt.rank - 1];
  tt_hv a = tt_lower_tensor(c, 0), b = tt_lower_tensor(c, 1);
  if (vec) b = tt_hlo_reshape(L.b, b, at.rank, ty(&L, L.d, 2, m, 1).dims);
  if (tt_hlo_numel(&at) == 0 || tt_hlo_numel(&bt) == 0 || p == 0)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "lstsq of empty inputs");
  tt_hv x, resid = empty0(&L);
  if (m >= n) {  // x = R^-1 (Q^T b)[:n]; residuals: |(Q^T b)[n:]|^2 when m > n
    qr_out q = house_qr(&L, a, m, n);
    tt_hv qb = apply_q(&L, q.v, q.tau, b, true, true);
    x = tri_solve(&L, sl(&L, q.r, -2, 0, n), sl(&L, qb, -2, 0, n), n, false);
    if (m > n) {
      tt_hv tail = sl(&L, qb, -2, n, m);
      int64_t rd = L.br;
      resid = tt_hlo_reduce(L.b, mul(&L, tail, tail), tt_hlo_const(L.b, L.d, 0), &rd, 1,
                            TT_HLO_REDUCE_ADD);  // [*, p]
    }
  } else {  // A^T = Q R: x = Q [R^-T b; 0]
    qr_out q = house_qr(&L, mT(&L, a), n, m);
    tt_hv z = tri_solve(&L, mT(&L, sl(&L, q.r, -2, 0, m)), b, m, true);
    tt_hlo_type zt = ty(&L, L.d, 2, n - m, p);
    x = apply_q(&L, q.v, q.tau, cat2(&L, z, tt_hlo_splat(L.b, &zt, 0), -2), true, false);
  }
  if (vec) x = tt_hlo_reshape(L.b, x, at.rank - 1, ty(&L, L.d, 1, n, 0).dims);
  int64_t zero = 0;
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 1, &zero);
  tt_lower_result(c, x);
  tt_lower_result(c, resid);
  tt_lower_result(c, tt_hlo_splat(L.b, &it, 0));
  tt_lower_result(c, empty0(&L));
  return NULL;
}

// --- the table ------------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
static const tt_rule kRules[] = {
    R("geqrf", lower_geqrf), R("geqrf.a", lower_geqrf),
    R("linalg_qr", lower_linalg_qr), R("linalg_qr.out", lower_linalg_qr),
    R("linalg_householder_product", lower_householder_product),
    R("linalg_householder_product.out", lower_householder_product),
    R("ormqr", lower_ormqr), R("ormqr.out", lower_ormqr),
    R("_linalg_eigh", lower_linalg_eigh), R("_linalg_eigh.eigenvalues", lower_linalg_eigh),
    R("_linalg_svd", lower_linalg_svd), R("_linalg_svd.U", lower_linalg_svd),
    R("linalg_lstsq.out", lower_lstsq),
};
#undef R

const tt_rule_table tt_rules_linalg_qr = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
