// linalg_lu.c — Cholesky, triangular solves and LU with partial pivoting,
// and what PyTorch builds on LU (solve, inv, det, slogdet), batched over
// leading dims, float32/float64.
//
// Algorithms:
//   - Cholesky: LAPACK's left-looking potf2 in one stablehlo.while over the
//     columns (column j minus the product of the columns before it, then
//     scaled by the square root of its diagonal). `info` is computed on the
//     device: the first column whose diagonal is not > 0 (NaN included),
//     1-based, else 0; from there on the input is left as it was, as LAPACK
//     leaves it. (stablehlo.cholesky is no use here: XLA's CPU expansion
//     turns the whole factor into NaN when a matrix fails, so neither info
//     nor LAPACK's partial factor can be read from it.) upper=True factors
//     A^T and transposes back.
//   - triangular solves (triangular_solve, linalg_solve_triangular,
//     _cholesky_solve_helper, cholesky_inverse): stablehlo.triangular_solve.
//   - LU (linalg_lu_factor_ex): the right-looking unblocked algorithm of
//     LAPACK's getf2 in one stablehlo.while over the min(m, n) columns: the
//     pivot is the first row of largest |a| on or below the diagonal; the
//     rows are swapped, the column below divided by the pivot, the trailing
//     block updated by the rank-1 product. Each step works on the whole
//     [*, m, n] block through masks (O(m n) per step, O(m n min(m,n)) in all,
//     like LAPACK; no unrolling over n, so programs stay small). A zero pivot
//     leaves its column unscaled and sets info (first such column, 1-based)
//     like LAPACK. The loop also carries the row permutation, for P and for
//     the solves. Pivots are LAPACK's: 1-based int32.
//   - Solves on LU (linalg_lu_solve, _linalg_solve_ex, linalg_inv_ex):
//     the row permutation as a gather, then two triangular solves reading
//     the unit-lower and upper triangles of the same LU block.
//   - det = sign(perm) * prod(diag U); slogdet = (sign(perm) * prod(sign
//     diag U), sum(log |diag U|)).
//
// Numerical caveats: no blocking, so results differ from LAPACK's by
// rounding (the trailing updates sum in another order); partial pivoting
// is backward stable in practice but the usual growth-factor caveat holds;
// on ill-conditioned inputs the factors agree with LAPACK's to about
// cond(A) * eps. A NaN in a pivot column is not chosen as pivot unless
// it comes first (LAPACK's idamax never chooses it).
//
//   - matrix_exp (float64): scaling and squaring with the [13/13] Pade
//     approximant (see its section).
//
// Leaves out: complex dtypes and half precision (the CPU fallback serves
// them: rules refuse with TT_UNIMPLEMENTED), LU without pivoting (the CPU
// refuses it too), and PyTorch's column-major result strides
// (results are row-major). check_errors=True raises through a device-side
// check (RuntimeError at the next synchronisation, not LinAlgError).
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lower/lower.h"

// --- helpers ---------------------------------------------------------------------------

static tt_hlo_type targ(const tt_lower_ctx *c, int i) { return tt_lower_tensor_type(c, i, -1); }

static tt_hv k_like(tt_lower_ctx *c, tt_hv v, double x) { return tt_lower_splat_like(c, v, x); }
static tt_hv ci32(tt_lower_ctx *c, int64_t v) { return tt_hlo_const_i(tt_lower_hlo(c), TT_I32, v); }
static tt_hv bin(tt_lower_ctx *c, tt_hlo_binop op, tt_hv x, tt_hv y) {
  return tt_hlo_binary(tt_lower_hlo(c), op, x, y);
}
static tt_hv cmp(tt_lower_ctx *c, tt_hlo_cmp op, tt_hv x, tt_hv y) {
  return tt_hlo_compare(tt_lower_hlo(c), op, x, y);
}
static tt_hv sel(tt_lower_ctx *c, tt_hv p, tt_hv x, tt_hv y) {
  return tt_hlo_select(tt_lower_hlo(c), p, x, y);
}

// Refuses what the rules don't serve and mirrors PyTorch's input checks for
// `api`: at least 2 dims, square when `square`, a floating dtype (integers
// get PyTorch's error when `check_dtype`, else the CPU's own refusal).
static tt_status check_matrix(const tt_lower_ctx *c, int i, const char *api, bool square,
                              bool check_dtype) {
  tt_hlo_type t = targ(c, i);
  if (t.rank < 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s: The input tensor A must have at least "
                         "2 dimensions.", api);
  int64_t m = t.dims[t.rank - 2], n = t.dims[t.rank - 1];
  if (square && m != n)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s: A must be batches of square matrices, "
                         "but they are %" PRId64 " by %" PRId64 " matrices", api, m, n);
  if (check_dtype && (t.dtype == TT_BOOL || tt_dtype_is_int(t.dtype)))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s: Expected a floating point or complex "
                         "tensor as input. Got %s", api, tt_dtype_torch_name(t.dtype));
  if (t.dtype != TT_F32 && t.dtype != TT_F64)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "%s of %s", api, tt_dtype_name(t.dtype));
  return NULL;
}

static tt_status check_same_dtype(const tt_lower_ctx *c, int i, int j, const char *api) {
  tt_dtype a = targ(c, i).dtype, b = targ(c, j).dtype;
  if (a != b)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s: Expected A and B to have the same "
                         "dtype, but found A of type %s and B of type %s instead", api,
                         tt_dtype_torch_name(a), tt_dtype_torch_name(b));
  return NULL;
}

// The shape-and-size check of a solver: A [*, n, n] against B [*, n, k]
// (left) or [*, k, n].
static tt_status check_solver(const tt_lower_ctx *c, const tt_hlo_type *a,
                              const tt_hlo_type *b, bool left, const char *api) {
  int64_t n = a->dims[a->rank - 1];
  bool ok = b->rank >= 2 && b->dims[b->rank - (left ? 2 : 1)] == n;
  if (!ok) {
    int64_t b0 = b->rank >= 2 ? b->dims[b->rank - 2] : 1, b1 = b->dims[b->rank - 1];
    if (b->rank < 2) b0 = b->rank == 1 ? b->dims[0] : 1, b1 = 1;
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s: Incompatible shapes of A and B for "
                         "the equation %s (%" PRId64 "x%" PRId64 " and %" PRId64 "x%" PRId64
                         ")", api, left ? "AX = B" : "XA = B", n, n, b0, b1);
  }
  return NULL;
}

// The broadcast of two batch shapes (all but the last two dims) into out.
static tt_status broadcast_batch(const tt_lower_ctx *c, const tt_hlo_type *a,
                                 const tt_hlo_type *b, tt_hlo_type *out) {
  int ra = a->rank - 2, rb = b->rank - 2, r = ra > rb ? ra : rb;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int ia = i - (r - ra), ib = i - (r - rb);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "The size of tensor a (%" PRId64 ") must "
                           "match the size of tensor b (%" PRId64 ") at non-singleton "
                           "dimension %d", da, db, i);
    out->dims[i] = da == 1 ? db : da;
  }
  return NULL;
}

// v (a [*, p, q] value) with its batch broadcast to `batch`.
static tt_hv to_batch(tt_lower_ctx *c, tt_hv v, const tt_hlo_type *batch) {
  tt_hlo_type t = tt_lower_type(c, v);
  int64_t dims[TT_MAX_RANK];
  memcpy(dims, batch->dims, sizeof(int64_t) * (size_t)batch->rank);
  dims[batch->rank] = t.dims[t.rank - 2];
  dims[batch->rank + 1] = t.dims[t.rank - 1];
  return tt_lower_broadcast_to(c, v, batch->rank + 2, dims);
}

// An i32 iota of type t's shape along dim.
static tt_hv iota(tt_lower_ctx *c, const tt_hlo_type *t, int64_t dim) {
  tt_hlo_type it = tt_hlo_make_type(TT_I32, t->rank, t->dims);
  return tt_hlo_iota(tt_lower_hlo(c), &it, dim);
}

// The lower (`lower`) or upper triangle of the [*, m, n] value x, the
// diagonal included, the rest zero.
static tt_hv triangle(tt_lower_ctx *c, tt_hv x, bool lower) {
  tt_hlo_type t = tt_lower_type(c, x);
  tt_hv rows = iota(c, &t, t.rank - 2), cols = iota(c, &t, t.rank - 1);
  return sel(c, cmp(c, lower ? TT_HLO_GE : TT_HLO_LE, rows, cols), x, k_like(c, x, 0));
}

// Sum (or other kind) of x over its dim d, removed.
static tt_hv reduce_dim(tt_lower_ctx *c, tt_hv x, int64_t d, tt_hlo_reduce_kind kind) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype dt = tt_lower_type(c, x).dtype;
  return tt_hlo_reduce(b, x, tt_lower_reduce_init(c, dt, kind), &d, 1, kind);
}

// The diagonal [*, n] of the [*, n, n] value x (min(m, n) for [*, m, n]).
static tt_hv diagonal(tt_lower_ctx *c, tt_hv x) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_type(c, x);
  int r = t.rank;
  int64_t m = t.dims[r - 2], n = t.dims[r - 1], k = m < n ? m : n;
  if (m != n) {
    int64_t lo[TT_MAX_RANK] = {0}, hi[TT_MAX_RANK], st[TT_MAX_RANK];
    for (int d = 0; d < r; d++) hi[d] = t.dims[d], st[d] = 1;
    hi[r - 2] = hi[r - 1] = k;
    x = tt_hlo_slice(b, x, lo, hi, st);
    t.dims[r - 2] = t.dims[r - 1] = k;
  }
  tt_hv eye = cmp(c, TT_HLO_EQ, iota(c, &t, r - 2), iota(c, &t, r - 1));
  return reduce_dim(c, sel(c, eye, x, k_like(c, x, 0)), r - 1, TT_HLO_REDUCE_ADD);
}

// v broadcast to `t`'s shape, v's dims going to t's dims `bdims`.
static tt_hv bcast(tt_lower_ctx *c, tt_hv v, const tt_hlo_type *t, const int64_t *bdims) {
  return tt_hlo_broadcast_in_dim(tt_lower_hlo(c), v, t->rank, t->dims, bdims);
}

// bdims for a value holding t's batch dims then the dims listed in `more`.
static void batch_bdims(int batch, const int64_t *more, int nmore, int64_t *out) {
  for (int i = 0; i < batch; i++) out[i] = i;
  for (int i = 0; i < nmore; i++) out[batch + i] = more[i];
}

// x with the entries along dim `dim` of x's [*, m, k] reordered by idx
// ([*, len], i32, 0-based, the same batch): out[.., i, ..] = x[.., idx[i], ..].
static tt_hv take(tt_lower_ctx *c, tt_hv x, tt_hv idx, int64_t dim) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_type(c, x);
  if (tt_hlo_numel(&t) == 0) return x;  // nothing to move (and gather refuses it)
  int r = t.rank;
  int64_t cd[TT_MAX_RANK + 1], bd[TT_MAX_RANK];
  memcpy(cd, t.dims, sizeof(int64_t) * (size_t)r);
  cd[r] = 1;
  batch_bdims(r - 2, &dim, 1, bd);
  tt_hv parts[TT_MAX_RANK];
  for (int d = 0; d < r; d++) {
    tt_hv v = d == dim ? bcast(c, idx, &t, bd) : iota(c, &t, d);
    parts[d] = tt_hlo_reshape(b, v, r + 1, cd);
  }
  static const int64_t kIota[TT_MAX_RANK] = {0, 1, 2, 3, 4, 5, 6, 7};
  static const int64_t kOnes[TT_MAX_RANK] = {1, 1, 1, 1, 1, 1, 1, 1};
  tt_hlo_gather_dims gd = {.collapsed_slice_dims = kIota, .n_collapsed = r,
                           .start_index_map = kIota, .n_start_index_map = r,
                           .index_vector_dim = r};
  return tt_hlo_gather(b, x, tt_hlo_concatenate(b, parts, r, r), &gd, kOnes, &t);
}

// The inverse of the permutation perm ([*, n], i32) along its last dim.
static tt_hv inverse_perm(tt_lower_ctx *c, tt_hv perm) {
  tt_hlo_type t = tt_lower_type(c, perm);
  tt_hv inv = TT_HV_INVALID, sorted = TT_HV_INVALID;
  tt_hlo_sort(tt_lower_hlo(c), perm, iota(c, &t, t.rank - 1), t.rank - 1, false, &sorted, &inv);
  return inv;
}

// One interchange of a row permutation perm ([*, m], i32): entries k (a 0-d
// i32, the same for all batches) and p ([*], i32, per batch) trade places.
static tt_hv swap_entries(tt_lower_ctx *c, tt_hv perm, tt_hv k, tt_hv p) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_type(c, perm);
  int nb = t.rank - 1;
  int64_t bd[TT_MAX_RANK];
  batch_bdims(nb, NULL, 0, bd);
  tt_hv pos = iota(c, &t, nb);
  tt_hv at_k = cmp(c, TT_HLO_EQ, pos, bcast(c, k, &t, NULL));
  tt_hv at_p = cmp(c, TT_HLO_EQ, pos, bcast(c, p, &t, bd));
  tt_hv zero = k_like(c, perm, 0);
  tt_hv vk = reduce_dim(c, sel(c, at_k, perm, zero), nb, TT_HLO_REDUCE_ADD);
  tt_hv vp = reduce_dim(c, sel(c, at_p, perm, zero), nb, TT_HLO_REDUCE_ADD);
  (void)b;
  return sel(c, at_k, bcast(c, vp, &t, bd), sel(c, at_p, bcast(c, vk, &t, bd), perm));
}

// --- LU ----------------------------------------------------------------------------------

typedef struct lu_result {
  tt_hv lu;    // [*, m, n]: L below the diagonal (unit diagonal implied), U on and above
  tt_hv piv;   // [*, min(m, n)] i32, LAPACK's 1-based interchanges
  tt_hv perm;  // [*, m] i32: row i of L U is row perm[i] of A
  tt_hv info;  // [*] i32: first zero pivot (1-based), else 0
} lu_result;

// LU with partial pivoting of the [*, m, n] float value a (see the header).
static lu_result lu_factor(tt_lower_ctx *c, tt_hv a) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_type(c, a);
  int r = t.rank, nb = r - 2;
  int64_t m = t.dims[r - 2], n = t.dims[r - 1], kmin = m < n ? m : n;
  tt_hlo_type vt = tt_hlo_make_type(TT_I32, r - 1, t.dims);  // [*, m]
  tt_hlo_type pt = vt, bt = tt_hlo_make_type(TT_I32, nb, t.dims);  // [*, kmin], [*]
  pt.dims[r - 2] = kmin;
  tt_hv rows = iota(c, &t, r - 2), cols = iota(c, &t, r - 1), vpos = iota(c, &vt, r - 2);
  if (kmin == 0) {  // nothing to eliminate (and no column to slice)
    lu_result e = {a, tt_hlo_splat_i(b, &pt, 1), vpos, tt_hlo_splat_i(b, &bt, 0)};
    return e;
  }
  int64_t bd[TT_MAX_RANK], bd_row[TT_MAX_RANK], bd_col[TT_MAX_RANK];
  int64_t last = r - 1, prow = r - 2;
  batch_bdims(nb, NULL, 0, bd);
  batch_bdims(nb, &last, 1, bd_row);  // a [*, n] row into [*, m, n]
  batch_bdims(nb, &prow, 1, bd_col);  // a [*, m] column into [*, m, n]
  tt_hv init[5] = {ci32(c, 0), a, tt_hlo_splat_i(b, &pt, 0), vpos, tt_hlo_splat_i(b, &bt, 0)};
  tt_hv v[5];
  tt_hv res = tt_hlo_while_begin(b, init, 5, v);
  tt_hlo_while_body(b, cmp(c, TT_HLO_LT, v[0], ci32(c, kmin)), 5, res, v);
  tt_hv k = v[0], x = v[1], zero_i = ci32(c, 0);
  tt_hv kb = bcast(c, k, &t, NULL);
  // The pivot: the first largest |x[i, k]| for i >= k.
  tt_hv starts[TT_MAX_RANK];
  for (int d = 0; d < r; d++) starts[d] = zero_i;
  starts[r - 1] = k;
  int64_t csz[TT_MAX_RANK];
  memcpy(csz, t.dims, sizeof csz);
  csz[r - 1] = 1;
  tt_hv col = tt_hlo_reshape(b, tt_hlo_dynamic_slice(b, x, starts, csz), r - 1, vt.dims);
  tt_hv above = cmp(c, TT_HLO_LT, vpos, bcast(c, k, &vt, NULL));
  tt_hv mag = sel(c, above, k_like(c, col, -1), tt_hlo_unary(b, TT_HLO_ABS, col));
  tt_hv best = TT_HV_INVALID, p = TT_HV_INVALID;
  tt_hlo_argreduce(b, mag, r - 2, true, TT_I32, &best, &p);
  // Swap rows k and p.
  tt_hv at_k = cmp(c, TT_HLO_EQ, rows, kb), at_p = cmp(c, TT_HLO_EQ, rows, bcast(c, p, &t, bd));
  tt_hv zero = k_like(c, x, 0);
  tt_hv row_k = reduce_dim(c, sel(c, at_k, x, zero), r - 2, TT_HLO_REDUCE_ADD);
  tt_hv row_p = reduce_dim(c, sel(c, at_p, x, zero), r - 2, TT_HLO_REDUCE_ADD);
  tt_hv x1 = sel(c, at_k, bcast(c, row_p, &t, bd_row), sel(c, at_p, bcast(c, row_k, &t, bd_row), x));
  // Eliminate below the pivot (a zero pivot leaves its zero column as is).
  tt_hlo_type rt = tt_hlo_make_type(t.dtype, r - 1, t.dims);  // [*, n]
  rt.dims[r - 2] = n;
  tt_hv on_k = cmp(c, TT_HLO_EQ, iota(c, &rt, r - 2), bcast(c, k, &rt, NULL));
  tt_hv pivot = reduce_dim(c, sel(c, on_k, row_p, k_like(c, row_p, 0)), r - 2, TT_HLO_REDUCE_ADD);
  tt_hv nonzero = cmp(c, TT_HLO_NE, pivot, k_like(c, pivot, 0));
  tt_hv col1 = tt_hlo_reshape(b, tt_hlo_dynamic_slice(b, x1, starts, csz), r - 1, vt.dims);
  tt_hv l = sel(c, bcast(c, nonzero, &vt, bd), bin(c, TT_HLO_DIV, col1, bcast(c, pivot, &vt, bd)),
                col1);
  tt_hv lb = bcast(c, l, &t, bd_col);
  tt_hv below = cmp(c, TT_HLO_GT, rows, kb);
  tt_hv right = bin(c, TT_HLO_AND, below, cmp(c, TT_HLO_GT, cols, kb));
  tt_hv on_col = bin(c, TT_HLO_AND, below, cmp(c, TT_HLO_EQ, cols, kb));
  tt_hv upd = bin(c, TT_HLO_SUB, x1, bin(c, TT_HLO_MUL, lb, bcast(c, row_p, &t, bd_row)));
  tt_hv x2 = sel(c, right, upd, sel(c, on_col, lb, x1));
  // Bookkeeping: the interchange, the permutation, the first zero pivot.
  tt_hv pstarts[TT_MAX_RANK];
  for (int d = 0; d < r - 1; d++) pstarts[d] = zero_i;
  pstarts[r - 2] = k;
  int64_t one_dims[TT_MAX_RANK];
  memcpy(one_dims, bt.dims, sizeof(int64_t) * (size_t)nb);
  one_dims[nb] = 1;
  tt_hv piv = tt_hlo_dynamic_update_slice(b, v[2], tt_hlo_reshape(b, p, r - 1, one_dims), pstarts);
  tt_hv perm = swap_entries(c, v[3], k, p);
  tt_hv info = v[4];
  tt_hv first = bin(c, TT_HLO_AND, cmp(c, TT_HLO_EQ, info, k_like(c, info, 0)),
                    tt_hlo_unary(b, TT_HLO_NOT, nonzero));
  info = sel(c, first, bcast(c, bin(c, TT_HLO_ADD, k, ci32(c, 1)), &bt, NULL), info);
  tt_hv next[5] = {bin(c, TT_HLO_ADD, k, ci32(c, 1)), x2, piv, perm, info};
  tt_hlo_while_end(b, init, next, 5, res);
  lu_result out = {TT_HV_INVALID, TT_HV_INVALID, TT_HV_INVALID, TT_HV_INVALID};
  if (res == TT_HV_INVALID) return out;
  out.lu = res + 1;
  out.piv = bin(c, TT_HLO_ADD, res + 2, tt_hlo_splat_i(b, &pt, 1));
  out.perm = res + 3;
  out.info = res + 4;
  return out;
}

// The row permutation [*, m] that LAPACK pivots ([*, k], i32, 1-based) make:
// the interchanges applied in order to 0..m-1.
static tt_hv perm_of_pivots(tt_lower_ctx *c, tt_hv piv, int64_t m) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type pt = tt_lower_type(c, piv);
  int nb = pt.rank - 1;
  int64_t kk = pt.dims[nb];
  tt_hlo_type vt = pt;
  vt.dims[nb] = m;
  piv = bin(c, TT_HLO_SUB, piv, k_like(c, piv, 1));
  tt_hv init[2] = {ci32(c, 0), iota(c, &vt, nb)}, v[2];
  tt_hv res = tt_hlo_while_begin(b, init, 2, v);
  tt_hlo_while_body(b, cmp(c, TT_HLO_LT, v[0], ci32(c, kk)), 2, res, v);
  tt_hv on = cmp(c, TT_HLO_EQ, iota(c, &pt, nb), bcast(c, v[0], &pt, NULL));
  tt_hv p = reduce_dim(c, sel(c, on, piv, k_like(c, piv, 0)), nb, TT_HLO_REDUCE_ADD);
  tt_hv next[2] = {bin(c, TT_HLO_ADD, v[0], ci32(c, 1)), swap_entries(c, v[1], v[0], p)};
  tt_hlo_while_end(b, init, next, 2, res);
  return res == TT_HV_INVALID ? TT_HV_INVALID : res + 1;
}

// A row permutation [*, n] with its batch broadcast to `batch`.
static tt_hv perm_to_batch(tt_lower_ctx *c, tt_hv perm, const tt_hlo_type *batch) {
  tt_hlo_type t = tt_lower_type(c, perm);
  int64_t dims[TT_MAX_RANK];
  memcpy(dims, batch->dims, sizeof(int64_t) * (size_t)batch->rank);
  dims[batch->rank] = t.dims[t.rank - 1];
  return tt_lower_broadcast_to(c, perm, batch->rank + 1, dims);
}

// X solving A X = B (left) or X A = B, or with A^H when `adjoint`, from
// A's LU block [*, n, n] and row permutation perm [*, n]; B has A's batch.
static tt_hv lu_solve(tt_lower_ctx *c, tt_hv lu, tt_hv perm, tt_hv rhs, bool left, bool adjoint) {
  tt_hlo *b = tt_lower_hlo(c);
  int r = tt_lower_type(c, rhs).rank;
  tt_hlo_transpose_op op = adjoint ? TT_HLO_ADJOINT : TT_HLO_NO_TRANSPOSE;
  if (left && !adjoint) {  // L U X = P^T B: rows of B in perm's order
    tt_hv y = take(c, rhs, perm, r - 2);
    y = tt_hlo_triangular_solve(b, lu, y, true, true, true, op);
    return tt_hlo_triangular_solve(b, lu, y, true, false, false, op);
  }
  if (left) {  // U^H L^H (Pm X) = B
    tt_hv z = tt_hlo_triangular_solve(b, lu, rhs, true, false, false, op);
    z = tt_hlo_triangular_solve(b, lu, z, true, true, true, op);
    return take(c, z, inverse_perm(c, perm), r - 2);
  }
  if (!adjoint) {  // (X Pm^T) L U = B
    tt_hv w = tt_hlo_triangular_solve(b, lu, rhs, false, false, false, op);
    w = tt_hlo_triangular_solve(b, lu, w, false, true, true, op);
    return take(c, w, inverse_perm(c, perm), r - 1);
  }
  // X U^H L^H = B Pm^T: columns of B in perm's order
  tt_hv w = take(c, rhs, perm, r - 1);
  w = tt_hlo_triangular_solve(b, lu, w, false, true, true, op);
  return tt_hlo_triangular_solve(b, lu, w, false, false, false, op);
}

// sign(perm) from pivots [*, k] (1-based) as a [*] value of dtype d: -1 to the
// number of pivots that moved a row.
static tt_hv perm_sign(tt_lower_ctx *c, tt_hv piv, tt_dtype d) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type pt = tt_lower_type(c, piv);
  int nb = pt.rank - 1;
  tt_hv moved = cmp(c, TT_HLO_NE, piv, bin(c, TT_HLO_ADD, iota(c, &pt, nb), k_like(c, piv, 1)));
  tt_hv count = reduce_dim(c, tt_hlo_convert(b, moved, TT_I32), nb, TT_HLO_REDUCE_ADD);
  tt_hv odd = cmp(c, TT_HLO_EQ, bin(c, TT_HLO_AND, count, k_like(c, count, 1)), k_like(c, count, 1));
  tt_hlo_type st = tt_hlo_make_type(d, nb, pt.dims);
  return sel(c, odd, tt_hlo_splat(b, &st, -1), tt_hlo_splat(b, &st, 1));
}

// --- Cholesky ------------------------------------------------------------------------------

// Lower Cholesky factor of the [*, n, n] value a (its lower triangle read),
// left-looking like LAPACK's potf2: step j updates column j by the columns
// before it, then scales it by sqrt of its diagonal. At the first diagonal
// that is not > 0 (NaN included) it stores that value there, sets info to
// j + 1 and stops, leaving the rest of a as it was (LAPACK's partial result).
static void cholesky_lower(tt_lower_ctx *c, tt_hv a, tt_hv *out_l, tt_hv *out_info) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_type(c, a);
  int r = t.rank, nb = r - 2;
  int64_t n = t.dims[r - 1];
  tt_hlo_type vt = tt_hlo_make_type(t.dtype, r - 1, t.dims);  // [*, n]
  tt_hlo_type bt = tt_hlo_make_type(TT_I32, nb, t.dims);      // [*]
  tt_hv rows = iota(c, &t, r - 2), cols = iota(c, &t, r - 1), vpos = iota(c, &vt, r - 2);
  int64_t bd[TT_MAX_RANK], bd_col[TT_MAX_RANK], prow = r - 2;
  batch_bdims(nb, NULL, 0, bd);
  batch_bdims(nb, &prow, 1, bd_col);
  tt_hv init[3] = {ci32(c, 0), a, tt_hlo_splat_i(b, &bt, 0)}, v[3];
  tt_hv res = tt_hlo_while_begin(b, init, 3, v);
  tt_hlo_while_body(b, cmp(c, TT_HLO_LT, v[0], ci32(c, n)), 3, res, v);
  tt_hv j = v[0], x = v[1], info = v[2];
  tt_hv jb = bcast(c, j, &t, NULL), zero = k_like(c, x, 0);
  // Row j left of the diagonal (L[j, :j]) and the columns before j.
  tt_hv done_cols = cmp(c, TT_HLO_LT, cols, jb);
  tt_hv lrow = reduce_dim(c, sel(c, bin(c, TT_HLO_AND, done_cols, cmp(c, TT_HLO_EQ, rows, jb)),
                                 x, zero), r - 2, TT_HLO_REDUCE_ADD);
  tt_hv left = sel(c, done_cols, x, zero);
  static const int64_t kB[TT_MAX_RANK] = {0, 1, 2, 3, 4, 5, 6, 7};
  int64_t cx = r - 1, cy = r - 2;
  tt_hv dot = tt_hlo_dot_general(b, left, lrow, kB, kB, nb, &cx, &cy, 1, t.dtype);  // [*, n]
  tt_hv colj = reduce_dim(c, sel(c, cmp(c, TT_HLO_EQ, cols, jb), x, zero), r - 1, TT_HLO_REDUCE_ADD);
  tt_hv col = bin(c, TT_HLO_SUB, colj, dot);
  tt_hv on_j = cmp(c, TT_HLO_EQ, vpos, bcast(c, j, &vt, NULL));
  tt_hv d = reduce_dim(c, sel(c, on_j, col, k_like(c, col, 0)), r - 2, TT_HLO_REDUCE_ADD);  // [*]
  tt_hv ok = cmp(c, TT_HLO_GT, d, k_like(c, d, 0));
  tt_hv active = cmp(c, TT_HLO_EQ, info, k_like(c, info, 0));
  tt_hv root = tt_hlo_unary(b, TT_HLO_SQRT, sel(c, ok, d, k_like(c, d, 1)));
  tt_hv scaled = sel(c, on_j, bcast(c, root, &vt, bd), bin(c, TT_HLO_DIV, col, bcast(c, root, &vt, bd)));
  tt_hv newcol = sel(c, bcast(c, ok, &vt, bd), scaled, sel(c, on_j, col, colj));
  tt_hv in_col = bin(c, TT_HLO_AND, cmp(c, TT_HLO_EQ, cols, jb), cmp(c, TT_HLO_GE, rows, jb));
  tt_hv write = bin(c, TT_HLO_AND, in_col, bcast(c, active, &t, bd));
  tt_hv x2 = sel(c, write, bcast(c, newcol, &t, bd_col), x);
  tt_hv fail = bin(c, TT_HLO_AND, active, tt_hlo_unary(b, TT_HLO_NOT, ok));
  tt_hv info2 = sel(c, fail, bcast(c, bin(c, TT_HLO_ADD, j, ci32(c, 1)), &bt, NULL), info);
  // Once failed, the loop only runs out (the cost is the same either way).
  tt_hv next[3] = {bin(c, TT_HLO_ADD, j, ci32(c, 1)), x2, info2};
  tt_hlo_while_end(b, init, next, 3, res);
  *out_l = res == TT_HV_INVALID ? TT_HV_INVALID : triangle(c, res + 1, true);
  *out_info = res == TT_HV_INVALID ? TT_HV_INVALID : res + 2;
}

// The factor (other triangle zeroed) and info of arg 0; upper is the lower
// factor of A^T, transposed (real dtypes only here).
static void cholesky(tt_lower_ctx *c, bool upper, tt_hv *out_l, tt_hv *out_info) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv a = tt_lower_tensor(c, 0);
  tt_hlo_type t = targ(c, 0);
  int64_t perm[TT_MAX_RANK];
  for (int d = 0; d < t.rank; d++) perm[d] = d;
  perm[t.rank - 2] = t.rank - 1, perm[t.rank - 1] = t.rank - 2;
  if (t.dims[t.rank - 1] == 0 || tt_hlo_numel(&t) == 0) {  // nothing to factor
    tt_hlo_type bt = tt_hlo_make_type(TT_I32, t.rank - 2, t.dims);
    *out_l = a;
    *out_info = tt_hlo_splat_i(b, &bt, 0);
    return;
  }
  cholesky_lower(c, upper ? tt_hlo_transpose(b, a, perm) : a, out_l, out_info);
  if (upper) *out_l = tt_hlo_transpose(b, *out_l, perm);
}

// linalg_cholesky_ex(self, *, upper, check_errors) -> (L, info)
static tt_status lower_cholesky_ex(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "linalg.cholesky", true, true));
  tt_hv l, info;
  cholesky(c, tt_lower_bool(c, 1), &l, &info);
  if (tt_lower_bool(c, 2))
    tt_lower_check(c, cmp(c, TT_HLO_NE, info, k_like(c, info, 0)), info, TT_INVALID_ARGUMENT,
                   "linalg.cholesky_ex: The factorization could not be completed because the "
                   "input is not positive-definite (the leading minor of order {} is not "
                   "positive-definite).", 0, 0);
  tt_lower_result(c, l);
  tt_lower_result(c, info);
  return NULL;
}

// cholesky(self, upper): the deprecated form, which always checks.
static tt_status lower_cholesky(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "cholesky", true, true));
  tt_hv l, info;
  cholesky(c, tt_lower_bool(c, 1), &l, &info);
  tt_lower_check(c, cmp(c, TT_HLO_NE, info, k_like(c, info, 0)), info, TT_INVALID_ARGUMENT,
                 "cholesky: The factorization could not be completed because the input is not "
                 "positive-definite (the leading minor of order {} is not positive-definite).",
                 0, 0);
  tt_lower_result(c, l);
  return NULL;
}

// _cholesky_solve_helper(self [*, n, k], A [*, n, n], upper): X with
// L L^H X = B (or U^H U X = B); cholesky_solve has broadcast both already.
static tt_status lower_cholesky_solve_helper(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 1, "cholesky_solve", true, false));
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "cholesky_solve", false, false));
  TT_RETURN_IF_ERROR(check_same_dtype(c, 1, 0, "cholesky_solve"));
  tt_hlo_type at = targ(c, 1), bt = targ(c, 0), batch;
  TT_RETURN_IF_ERROR(check_solver(c, &at, &bt, true, "cholesky_solve"));
  TT_RETURN_IF_ERROR(broadcast_batch(c, &at, &bt, &batch));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv a = to_batch(c, tt_lower_tensor(c, 1), &batch), x = to_batch(c, tt_lower_tensor(c, 0), &batch);
  bool upper = tt_lower_bool(c, 2);
  // lower: L (L^H X) = B; upper: U^H (U X) = B.
  x = tt_hlo_triangular_solve(b, a, x, true, !upper, false, upper ? TT_HLO_ADJOINT : TT_HLO_NO_TRANSPOSE);
  x = tt_hlo_triangular_solve(b, a, x, true, !upper, false, upper ? TT_HLO_NO_TRANSPOSE : TT_HLO_ADJOINT);
  tt_lower_result(c, x);
  return NULL;
}

// cholesky_inverse(self, upper): (L L^H)^-1 from the factor, in full.
static tt_status lower_cholesky_inverse(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "cholesky_inverse", true, false));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv a = tt_lower_tensor(c, 0);
  tt_hlo_type t = targ(c, 0);
  tt_hv eye = cmp(c, TT_HLO_EQ, iota(c, &t, t.rank - 2), iota(c, &t, t.rank - 1));
  tt_hv x = sel(c, eye, k_like(c, a, 1), k_like(c, a, 0));
  bool upper = tt_lower_bool(c, 1);
  x = tt_hlo_triangular_solve(b, a, x, true, !upper, false, upper ? TT_HLO_ADJOINT : TT_HLO_NO_TRANSPOSE);
  x = tt_hlo_triangular_solve(b, a, x, true, !upper, false, upper ? TT_HLO_NO_TRANSPOSE : TT_HLO_ADJOINT);
  tt_lower_result(c, x);
  return NULL;
}

// --- triangular solves ------------------------------------------------------------------------

// triangular_solve(self [*, n, k], A [*, n, n], upper, transpose,
// unitriangular) -> (solution, cloned_coefficient).
static tt_status lower_triangular_solve(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 1, "triangular_solve", true, false));
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "triangular_solve", false, false));
  TT_RETURN_IF_ERROR(check_same_dtype(c, 1, 0, "triangular_solve"));
  tt_hlo_type at = targ(c, 1), bt = targ(c, 0), batch;
  TT_RETURN_IF_ERROR(check_solver(c, &at, &bt, true, "triangular_solve"));
  TT_RETURN_IF_ERROR(broadcast_batch(c, &at, &bt, &batch));
  tt_hv a = to_batch(c, tt_lower_tensor(c, 1), &batch), x = to_batch(c, tt_lower_tensor(c, 0), &batch);
  bool upper = tt_lower_bool(c, 2), transpose = tt_lower_bool(c, 3), unit = tt_lower_bool(c, 4);
  tt_lower_result(c, tt_hlo_triangular_solve(tt_lower_hlo(c), a, x, true, !upper, unit,
                                             transpose ? TT_HLO_TRANSPOSE : TT_HLO_NO_TRANSPOSE));
  tt_lower_result(c, a);
  return NULL;
}

// linalg_solve_triangular(self=A [*, n, n], B, *, upper, left, unitriangular)
static tt_status lower_solve_triangular(tt_lower_ctx *c) {
  const char *api = "linalg.solve_triangular";
  TT_RETURN_IF_ERROR(check_matrix(c, 0, api, true, false));
  TT_RETURN_IF_ERROR(check_matrix(c, 1, api, false, false));
  tt_hlo_type at = targ(c, 0), bt = targ(c, 1), batch;
  if (at.dtype != bt.dtype)  // PyTorch promotes; let the CPU do it
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "%s of mixed dtypes", api);
  bool left = tt_lower_bool(c, 3);
  TT_RETURN_IF_ERROR(check_solver(c, &at, &bt, left, api));
  TT_RETURN_IF_ERROR(broadcast_batch(c, &at, &bt, &batch));
  tt_hv a = to_batch(c, tt_lower_tensor(c, 0), &batch), x = to_batch(c, tt_lower_tensor(c, 1), &batch);
  tt_lower_result(c, tt_hlo_triangular_solve(tt_lower_hlo(c), a, x, left, !tt_lower_bool(c, 2),
                                             tt_lower_bool(c, 4), TT_HLO_NO_TRANSPOSE));
  return NULL;
}

// --- LU and what is built on it ------------------------------------------------------------

// linalg_lu_factor_ex(A, *, pivot, check_errors) -> (LU, pivots, info)
static tt_status lower_lu_factor_ex(tt_lower_ctx *c) {
  tt_hlo_type t = targ(c, 0);
  if (t.rank < 2) {
    char s[96];
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "torch.lu_factor: Expected tensor with 2 or "
                         "more dimensions. Got size: %s instead", tt_shape_str(&t, s, sizeof s));
  }
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "linalg.lu_factor", false, false));
  if (!tt_lower_bool(c, 1))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "LU without pivoting");
  lu_result f = lu_factor(c, tt_lower_tensor(c, 0));
  if (tt_lower_bool(c, 2))
    tt_lower_check(c, cmp(c, TT_HLO_NE, f.info, k_like(c, f.info, 0)), f.info,
                   TT_INVALID_ARGUMENT, "torch.linalg.lu_factor_ex: U[{},{}] is zero and using "
                   "it on lu_solve would result in a division by zero.", 0, 0);
  tt_lower_result(c, f.lu);
  tt_lower_result(c, f.piv);
  tt_lower_result(c, f.info);
  return NULL;
}

// P [*, m, m] with P[perm[i], i] = 1 (A = P L U), in dtype d.
static tt_hv perm_matrix(tt_lower_ctx *c, tt_hv perm, tt_dtype d) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type vt = tt_lower_type(c, perm);
  int nb = vt.rank - 1;
  int64_t m = vt.dims[nb], dims[TT_MAX_RANK], bd[TT_MAX_RANK], col = nb + 1;
  memcpy(dims, vt.dims, sizeof(int64_t) * (size_t)vt.rank);
  dims[nb + 1] = m;
  tt_hlo_type t = tt_hlo_make_type(TT_I32, nb + 2, dims);
  batch_bdims(nb, &col, 1, bd);
  tt_hv is = cmp(c, TT_HLO_EQ, iota(c, &t, nb), bcast(c, perm, &t, bd));
  t.dtype = d;
  return sel(c, is, tt_hlo_splat(b, &t, 1), tt_hlo_splat(b, &t, 0));
}

// L [*, m, k] (unit diagonal) and U [*, k, n] out of an LU block [*, m, n].
static void unpack_lu(tt_lower_ctx *c, tt_hv lu, tt_hv *out_l, tt_hv *out_u) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_type(c, lu);
  int r = t.rank;
  int64_t m = t.dims[r - 2], n = t.dims[r - 1], k = m < n ? m : n;
  int64_t lo[TT_MAX_RANK] = {0}, hi[TT_MAX_RANK], st[TT_MAX_RANK];
  for (int d = 0; d < r; d++) hi[d] = t.dims[d], st[d] = 1;
  hi[r - 1] = k;
  tt_hv l = tt_hlo_slice(b, lu, lo, hi, st);
  hi[r - 1] = n, hi[r - 2] = k;
  tt_hv u = triangle(c, tt_hlo_slice(b, lu, lo, hi, st), false);
  tt_hlo_type lt = tt_lower_type(c, l);
  tt_hv rows = iota(c, &lt, r - 2), cols = iota(c, &lt, r - 1);
  tt_hv one = k_like(c, l, 1), zero = k_like(c, l, 0);
  *out_l = sel(c, cmp(c, TT_HLO_GT, rows, cols), l,
               sel(c, cmp(c, TT_HLO_EQ, rows, cols), one, zero));
  *out_u = u;
}

// linalg_lu(A, *, pivot) -> (P, L, U)
static tt_status lower_linalg_lu(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "linalg.lu", false, false));
  if (!tt_lower_bool(c, 1))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "LU without pivoting");
  lu_result f = lu_factor(c, tt_lower_tensor(c, 0));
  tt_hv l, u;
  unpack_lu(c, f.lu, &l, &u);
  tt_lower_result(c, perm_matrix(c, f.perm, targ(c, 0).dtype));
  tt_lower_result(c, l);
  tt_lower_result(c, u);
  return NULL;
}

// lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots) -> (P, L, U);
// what is not unpacked is an empty [0] tensor.
static tt_status lower_lu_unpack(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "lu_unpack", false, false));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = targ(c, 0), pt = targ(c, 1);
  int r = t.rank;
  int64_t m = t.dims[r - 2], n = t.dims[r - 1], k = m < n ? m : n;
  bool ok = pt.rank == r - 1 && pt.dims[r - 2] == k && tt_dtype_is_int(pt.dtype);
  for (int d = 0; ok && d < r - 2; d++) ok = pt.dims[d] == t.dims[d];
  if (!ok) {
    char s1[96], s2[96];
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "lu_unpack: LU_pivots %s don't match "
                         "LU_data %s (expected integer pivots of shape [*, min(m, n)])",
                         tt_shape_str(&pt, s1, sizeof s1), tt_shape_str(&t, s2, sizeof s2));
  }
  static const int64_t zero_len = 0;
  tt_hlo_type empty = tt_hlo_make_type(t.dtype, 1, &zero_len);
  if (tt_lower_bool(c, 3)) {
    tt_hv piv = tt_hlo_convert(b, tt_lower_tensor(c, 1), TT_I32);
    tt_hv bad = bin(c, TT_HLO_OR, cmp(c, TT_HLO_LT, piv, k_like(c, piv, 1)),
                    cmp(c, TT_HLO_GT, piv, k_like(c, piv, (double)m)));
    tt_lower_check(c, bad, piv, TT_INVALID_ARGUMENT, "pivots passed to lu_unpack must be "
                   "between 1 and LU.size(-2) inclusive.Did you properly pass the result of "
                   "lu_factor?", 0, 0);
    piv = tt_hlo_clamp(b, k_like(c, piv, 1), piv, k_like(c, piv, (double)m));
    tt_lower_result(c, perm_matrix(c, perm_of_pivots(c, piv, m), t.dtype));
  } else {
    tt_lower_result(c, tt_hlo_splat(b, &empty, 0));
  }
  if (tt_lower_bool(c, 2)) {
    tt_hv l, u;
    unpack_lu(c, tt_lower_tensor(c, 0), &l, &u);
    tt_lower_result(c, l);
    tt_lower_result(c, u);
  } else {
    tt_lower_result(c, tt_hlo_splat(b, &empty, 0));
    tt_lower_result(c, tt_hlo_splat(b, &empty, 0));
  }
  return NULL;
}

// linalg_lu_solve(LU, pivots, B, *, left, adjoint)
static tt_status lower_lu_solve(tt_lower_ctx *c) {
  const char *api = "linalg.lu_solve";
  TT_RETURN_IF_ERROR(check_matrix(c, 0, api, true, false));
  TT_RETURN_IF_ERROR(check_matrix(c, 2, api, false, false));
  TT_RETURN_IF_ERROR(check_same_dtype(c, 0, 2, api));
  tt_hlo_type at = targ(c, 0), pt = targ(c, 1), bt = targ(c, 2), batch;
  bool left = tt_lower_bool(c, 3), adjoint = tt_lower_bool(c, 4);
  TT_RETURN_IF_ERROR(check_solver(c, &at, &bt, left, api));
  int64_t n = at.dims[at.rank - 1];
  bool ok = pt.rank == at.rank - 1 && pt.dims[pt.rank - 1] == n && pt.dtype == TT_I32;
  for (int d = 0; ok && d < at.rank - 2; d++) ok = pt.dims[d] == at.dims[d];
  if (!ok)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s: Expected LU.shape[:-1] == "
                         "pivots.shape and pivots of dtype Int", api);
  TT_RETURN_IF_ERROR(broadcast_batch(c, &at, &bt, &batch));
  tt_hv lu = to_batch(c, tt_lower_tensor(c, 0), &batch);
  tt_hv rhs = to_batch(c, tt_lower_tensor(c, 2), &batch);
  // pivots [*, n] -> [batch, n]
  int64_t pd[TT_MAX_RANK];
  memcpy(pd, batch.dims, sizeof(int64_t) * (size_t)batch.rank);
  pd[batch.rank] = n;
  tt_hv piv = tt_lower_broadcast_to(c, tt_lower_tensor(c, 1), batch.rank + 1, pd);
  piv = tt_hlo_clamp(tt_lower_hlo(c), k_like(c, piv, 1), piv, k_like(c, piv, (double)n));
  tt_lower_result(c, lu_solve(c, lu, perm_of_pivots(c, piv, n), rhs, left, adjoint));
  return NULL;
}

// _linalg_solve_ex(A, B, *, left, check_errors) -> (result, LU, pivots, info).
// B [*, n] (or [n]) is a batch of vectors when PyTorch's rule says so.
static tt_status lower_solve_ex(tt_lower_ctx *c) {
  const char *api = "linalg.solve";
  TT_RETURN_IF_ERROR(check_matrix(c, 0, api, true, true));
  tt_hlo_type at = targ(c, 0), bt = targ(c, 1), batch;
  TT_RETURN_IF_ERROR(check_same_dtype(c, 0, 1, api));
  bool left = tt_lower_bool(c, 2);
  // linalg_solve_is_vector_rhs: B is 1-D, or one dim short of A with A's batch.
  bool vector = bt.rank == 1;
  if (bt.rank == at.rank - 1) {
    vector = true;
    for (int d = 0; d < bt.rank - 1; d++) vector = vector && bt.dims[d] == at.dims[d];
  }
  if (vector && !left)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "linalg.solve: Vector broadcasting of the "
                         "left hand side is not supported for left=False. In this case "
                         "linalg.solve is equivalent to B / A.squeeze(-1)");
  tt_hv rhs = tt_lower_tensor(c, 1);
  tt_hlo_type bm = bt;
  if (vector) {
    bm.dims[bm.rank++] = 1;
    rhs = tt_hlo_reshape(tt_lower_hlo(c), rhs, bm.rank, bm.dims);
  }
  TT_RETURN_IF_ERROR(check_solver(c, &at, &bm, left, api));
  TT_RETURN_IF_ERROR(broadcast_batch(c, &at, &bm, &batch));
  lu_result f = lu_factor(c, tt_lower_tensor(c, 0));
  if (tt_lower_bool(c, 3))
    tt_lower_check(c, cmp(c, TT_HLO_NE, f.info, k_like(c, f.info, 0)), f.info,
                   TT_INVALID_ARGUMENT, "torch.linalg.solve_ex: The solver failed because the "
                   "input matrix is singular.", 0, 0);
  tt_hv x = lu_solve(c, to_batch(c, f.lu, &batch), perm_to_batch(c, f.perm, &batch), 
                     to_batch(c, rhs, &batch), left, false);
  if (vector) {
    tt_hlo_type xt = tt_lower_type(c, x);
    x = tt_hlo_reshape(tt_lower_hlo(c), x, xt.rank - 1, xt.dims);
  }
  tt_lower_result(c, x);
  tt_lower_result(c, f.lu);
  tt_lower_result(c, f.piv);
  tt_lower_result(c, f.info);
  return NULL;
}

// linalg_inv_ex(A, *, check_errors) -> (inverse, info): A X = I.
static tt_status lower_inv_ex(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "linalg.inv", true, true));
  tt_hlo_type t = targ(c, 0);
  lu_result f = lu_factor(c, tt_lower_tensor(c, 0));
  if (tt_lower_bool(c, 1))
    tt_lower_check(c, cmp(c, TT_HLO_NE, f.info, k_like(c, f.info, 0)), f.info,
                   TT_INVALID_ARGUMENT, "linalg.inv_ex: The diagonal element {} is zero, the "
                   "inversion could not be completed because the input matrix is singular.",
                   0, 0);
  tt_hv eye = cmp(c, TT_HLO_EQ, iota(c, &t, t.rank - 2), iota(c, &t, t.rank - 1));
  tt_hlo_type ft = t;
  tt_hv one = tt_hlo_splat(tt_lower_hlo(c), &ft, 1), zero = tt_hlo_splat(tt_lower_hlo(c), &ft, 0);
  tt_lower_result(c, lu_solve(c, f.lu, f.perm, sel(c, eye, one, zero), true, false));
  tt_lower_result(c, f.info);
  return NULL;
}

// True when tensor arg i is contiguous (row-major; size-1 dims don't count).
static bool is_contiguous(const tt_lower_ctx *c, int i) {
  const tt_value *v = tt_lower_arg(c, i);
  if (v->kind != TT_VALUE_TENSOR) return false;
  const tt_tensor *t = &v->u.tensor;
  int64_t expect = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->sizes[d] == 0) return true;
    if (t->sizes[d] != 1 && t->strides[d] != expect) return false;
    expect *= t->sizes[d];
  }
  return true;
}

// The LU that _linalg_det and _linalg_slogdet return: PyTorch factors A^T
// when A is contiguous and real (its backward, linalg_det_backward, solves
// with the adjoint flag chosen by the same test), else A itself.
static lu_result det_lu(tt_lower_ctx *c) {
  tt_hv a = tt_lower_tensor(c, 0);
  if (is_contiguous(c, 0)) {
    tt_hlo_type t = targ(c, 0);
    int64_t perm[TT_MAX_RANK];
    for (int d = 0; d < t.rank; d++) perm[d] = d;
    perm[t.rank - 2] = t.rank - 1, perm[t.rank - 1] = t.rank - 2;
    a = tt_hlo_transpose(tt_lower_hlo(c), a, perm);
  }
  return lu_factor(c, a);
}

// _linalg_det(A) -> (result, LU, pivots)
static tt_status lower_det(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "linalg.det", true, true));
  tt_dtype d = targ(c, 0).dtype;
  lu_result f = det_lu(c);
  tt_hv diag = diagonal(c, f.lu);
  tt_hv prod = reduce_dim(c, diag, tt_lower_type(c, diag).rank - 1, TT_HLO_REDUCE_MUL);
  tt_lower_result(c, bin(c, TT_HLO_MUL, perm_sign(c, f.piv, d), prod));
  tt_lower_result(c, f.lu);
  tt_lower_result(c, f.piv);
  return NULL;
}

// _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots)
static tt_status lower_slogdet(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "linalg.slogdet", true, true));
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype d = targ(c, 0).dtype;
  lu_result f = det_lu(c);
  tt_hv diag = diagonal(c, f.lu);
  int64_t last = tt_lower_type(c, diag).rank - 1;
  tt_hv sgn = reduce_dim(c, tt_hlo_unary(b, TT_HLO_SIGN, diag), last, TT_HLO_REDUCE_MUL);
  tt_hv logabs = reduce_dim(c, tt_hlo_unary(b, TT_HLO_LOG, tt_hlo_unary(b, TT_HLO_ABS, diag)),
                            last, TT_HLO_REDUCE_ADD);
  tt_lower_result(c, bin(c, TT_HLO_MUL, perm_sign(c, f.piv, d), sgn));
  tt_lower_result(c, logabs);
  tt_lower_result(c, f.lu);
  tt_lower_result(c, f.piv);
  return NULL;
}

// --- matrix exponential ----------------------------------------------------------------------
//
// Higham's scaling and squaring with the [13/13] Pade approximant (SIAM J.
// Matrix Anal. Appl. 26(4), 2005): s = max(0, ceil(log2(|A|_1 / theta13)))
// per matrix, A / 2^s (an exact power of two, built from its exponent
// bits), R = (V - U)^-1 (V + U) by LU, then R squared s times by a while
// loop (each matrix stops at its own s). PyTorch's CPU kernel uses Taylor
// polynomials of degree up to 18 instead; both are accurate to a few eps
// times |A| for normal matrices. s is capped where 2^-s stops being normal.

// x @ y for [*, n, n] values with the same batch.
static tt_hv matmul(tt_lower_ctx *c, tt_hv x, tt_hv y) {
  static const int64_t kB[TT_MAX_RANK] = {0, 1, 2, 3, 4, 5, 6, 7};
  tt_hlo_type t = tt_lower_type(c, x);
  int64_t cx = t.rank - 1, cy = t.rank - 2;
  return tt_hlo_dot_general(tt_lower_hlo(c), x, y, kB, kB, t.rank - 2, &cx, &cy, 1, t.dtype);
}

// sum_i coef[i] * xs[i] (xs of one type).
static tt_hv combo(tt_lower_ctx *c, const tt_hv *xs, const double *coef, int n) {
  tt_hv acc = TT_HV_INVALID;
  for (int i = 0; i < n; i++) {
    tt_hv term = bin(c, TT_HLO_MUL, xs[i], k_like(c, xs[i], coef[i]));
    acc = i == 0 ? term : bin(c, TT_HLO_ADD, acc, term);
  }
  return acc;
}

// linalg_matrix_exp(self)
static tt_status lower_matrix_exp(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_matrix(c, 0, "linalg.matrix_exp", true, true));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = targ(c, 0);
  // In float32 the result agrees with the float64 truth as closely as the
  // CPU's does, but not with the CPU's own rounding to OpInfo's tolerance
  // (a different algorithm): float32 stays on the CPU until that is settled.
  if (t.dtype != TT_F64)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "linalg.matrix_exp of %s", tt_dtype_name(t.dtype));
  int r = t.rank, nb = r - 2;
  tt_hv a = tt_lower_tensor(c, 0);
  if (tt_hlo_numel(&t) == 0) {
    tt_lower_result(c, a);
    return NULL;
  }
  static const double kB13[14] = {
      64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
      129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
      40840800.0, 960960.0, 16380.0, 182.0, 1.0};
  const double theta13 = 5.371920351148152;
  bool f64 = t.dtype == TT_F64;
  tt_dtype it = f64 ? TT_I64 : TT_I32;
  int64_t bias = f64 ? 1023 : 127, mant = f64 ? 52 : 23, cap = bias - 1;
  int64_t bd[TT_MAX_RANK];
  batch_bdims(nb, NULL, 0, bd);
  // s per matrix, from the 1-norm (largest column sum of |a|).
  tt_hv norm = reduce_dim(c, reduce_dim(c, tt_hlo_unary(b, TT_HLO_ABS, a), r - 2, TT_HLO_REDUCE_ADD),
                          r - 2, TT_HLO_REDUCE_MAX);  // [*]
  tt_hv lg = bin(c, TT_HLO_DIV, tt_hlo_unary(b, TT_HLO_LOG, bin(c, TT_HLO_DIV, norm,
                                                                 k_like(c, norm, theta13))),
                 k_like(c, norm, 0.69314718055994530942));
  tt_hv sf = tt_hlo_unary(b, TT_HLO_CEIL, lg);
  sf = sel(c, tt_hlo_unary(b, TT_HLO_IS_FINITE, sf), sf, k_like(c, sf, 0));
  sf = tt_hlo_clamp(b, k_like(c, sf, 0), sf, k_like(c, sf, (double)cap));
  tt_hv si = tt_hlo_convert(b, sf, it);
  // 2^-s from its exponent bits: (bias - s) << mantissa bits.
  tt_hv bits = bin(c, TT_HLO_SHL, bin(c, TT_HLO_SUB, k_like(c, si, (double)bias), si),
                   k_like(c, si, (double)mant));
  tt_hv scale = tt_hlo_bitcast(b, bits, t.dtype);
  tt_hv x = bin(c, TT_HLO_MUL, a, bcast(c, scale, &t, bd));
  // The Pade approximant.
  tt_hv eye = sel(c, cmp(c, TT_HLO_EQ, iota(c, &t, r - 2), iota(c, &t, r - 1)), k_like(c, a, 1),
                  k_like(c, a, 0));
  tt_hv x2 = matmul(c, x, x), x4 = matmul(c, x2, x2), x6 = matmul(c, x4, x2);
  tt_hv hi_u[3] = {x6, x4, x2}, lo_u[4] = {x6, x4, x2, eye};
  const double cu_hi[3] = {kB13[13], kB13[11], kB13[9]}, cu_lo[4] = {kB13[7], kB13[5], kB13[3], kB13[1]};
  const double cv_hi[3] = {kB13[12], kB13[10], kB13[8]}, cv_lo[4] = {kB13[6], kB13[4], kB13[2], kB13[0]};
  tt_hv u = matmul(c, x, bin(c, TT_HLO_ADD, matmul(c, x6, combo(c, hi_u, cu_hi, 3)),
                              combo(c, lo_u, cu_lo, 4)));
  tt_hv v = bin(c, TT_HLO_ADD, matmul(c, x6, combo(c, hi_u, cv_hi, 3)), combo(c, lo_u, cv_lo, 4));
  lu_result f = lu_factor(c, bin(c, TT_HLO_SUB, v, u));
  tt_hv res0 = lu_solve(c, f.lu, f.perm, bin(c, TT_HLO_ADD, v, u), true, false);
  // Squaring, each matrix s times.
  bool all[TT_MAX_RANK];
  for (int i = 0; i < TT_MAX_RANK; i++) all[i] = true;
  tt_hv smax = nb == 0 ? si : tt_lower_reduce(c, si, all, false, TT_HLO_REDUCE_MAX);
  tt_hv init[3] = {tt_hlo_const_i(b, it, 0), res0, smax}, w[3];
  tt_hv lp = tt_hlo_while_begin(b, init, 3, w);
  tt_hlo_while_body(b, cmp(c, TT_HLO_LT, w[0], w[2]), 3, lp, w);
  tt_hlo_type st = tt_lower_type(c, si);
  tt_hv more = cmp(c, TT_HLO_LT, bcast(c, w[0], &st, NULL), si);
  tt_hv sq = sel(c, bcast(c, more, &t, bd), matmul(c, w[1], w[1]), w[1]);
  tt_hv next[3] = {bin(c, TT_HLO_ADD, w[0], tt_hlo_const_i(b, it, 1)), sq, w[2]};
  tt_hlo_while_end(b, init, next, 3, lp);
  tt_lower_result(c, lp == TT_HV_INVALID ? TT_HV_INVALID : lp + 1);
  return NULL;
}

// --- the table ---------------------------------------------------------------------------

static const tt_rule kRules[] = {
    {"aten::linalg_cholesky_ex", lower_cholesky_ex, 0},
    {"aten::linalg_cholesky_ex.L", lower_cholesky_ex, 0},
    {"aten::cholesky", lower_cholesky, 0},
    {"aten::cholesky.out", lower_cholesky, 0},
    {"aten::_cholesky_solve_helper", lower_cholesky_solve_helper, 0},
    {"aten::_cholesky_solve_helper.out", lower_cholesky_solve_helper, 0},
    {"aten::cholesky_inverse", lower_cholesky_inverse, 0},
    {"aten::cholesky_inverse.out", lower_cholesky_inverse, 0},
    {"aten::triangular_solve", lower_triangular_solve, 0},
    {"aten::triangular_solve.X", lower_triangular_solve, 0},
    {"aten::linalg_solve_triangular", lower_solve_triangular, 0},
    {"aten::linalg_solve_triangular.out", lower_solve_triangular, 0},
    {"aten::linalg_lu_factor_ex", lower_lu_factor_ex, 0},
    {"aten::linalg_lu_factor_ex.out", lower_lu_factor_ex, 0},
    {"aten::linalg_lu", lower_linalg_lu, 0},
    {"aten::linalg_lu.out", lower_linalg_lu, 0},
    {"aten::lu_unpack", lower_lu_unpack, 0},
    {"aten::lu_unpack.out", lower_lu_unpack, 0},
    {"aten::linalg_lu_solve", lower_lu_solve, 0},
    {"aten::linalg_lu_solve.out", lower_lu_solve, 0},
    {"aten::_linalg_solve_ex", lower_solve_ex, 0},
    {"aten::_linalg_solve_ex.result", lower_solve_ex, 0},
    {"aten::linalg_inv_ex", lower_inv_ex, 0},
    {"aten::linalg_inv_ex.inverse", lower_inv_ex, 0},
    {"aten::_linalg_det", lower_det, TT_RULE_READS_LAYOUT},
    {"aten::_linalg_det.result", lower_det, TT_RULE_READS_LAYOUT},
    {"aten::_linalg_slogdet", lower_slogdet, TT_RULE_READS_LAYOUT},
    {"aten::_linalg_slogdet.sign", lower_slogdet, TT_RULE_READS_LAYOUT},
    {"aten::linalg_matrix_exp", lower_matrix_exp, 0},
    {"aten::linalg_matrix_exp.out", lower_matrix_exp, 0},
};

const tt_rule_table tt_rules_linalg_lu = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
