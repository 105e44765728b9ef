// hlo_linalg_lu.c — stablehlo.triangular_solve, which XLA expands into
// loops of its own on every backend (the CPU plugin has no LAPACK calls).
//
// Leaves out: stablehlo.cholesky (XLA's CPU expansion turns the whole
// factor into NaN when a matrix is not positive definite, so PyTorch's
// `info` can't be read from it; lower/linalg_lu.c runs its own loop), LU,
// QR, eigen and singular value decompositions (StableHLO has none).
#include <stdio.h>

#include "hlo/hlo_internal.h"

static bool is_factor_dtype(tt_dtype d) {
  return d == TT_F32 || d == TT_F64 || d == TT_C64 || d == TT_C128;
}

// A [*, n, n] value of a float or complex dtype.
static bool square_batch(const tt_hlo_type *t) {
  return t->rank >= 2 && t->dims[t->rank - 1] == t->dims[t->rank - 2] &&
         is_factor_dtype(t->dtype);
}

tt_hv tt_hlo_triangular_solve(tt_hlo *b, tt_hv a, tt_hv rhs, bool left_side, bool lower,
                              bool unit_diagonal, tt_hlo_transpose_op transpose) {
  static const char *const kTranspose[] = {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
  tt_hv ops[2] = {a, rhs};
  if (!tt_hlo_ok(b, ops, 2)) return TT_HV_INVALID;
  const tt_hlo_type *ta = &b->vals[a].type, *tb = &b->vals[rhs].type;
  bool ok = square_batch(ta) && tb->rank == ta->rank && tb->dtype == ta->dtype &&
            (int)transpose >= 0 && transpose <= TT_HLO_ADJOINT;
  int r = ta->rank;
  for (int i = 0; ok && i < r - 2; i++) ok = ta->dims[i] == tb->dims[i];
  // A left-side solve (A X = B) pairs A's n with B's rows, a right-side one
  // (X A = B) with B's columns.
  if (ok) ok = ta->dims[r - 1] == tb->dims[left_side ? r - 2 : r - 1];
  if (!ok) {
    tt_hlo_failf(b, "stablehlo.triangular_solve: operands of ranks %d, %d and dtypes "
                 "%d, %d don't form a batch of square systems", (int)ta->rank,
                 (int)tb->rank, (int)ta->dtype, (int)tb->dtype);
    return TT_HV_INVALID;
  }
  char attrs[160];
  snprintf(attrs, sizeof attrs, "{left_side = %s, lower = %s, unit_diagonal = %s, "
           "transpose_a = #stablehlo<transpose %s>}", left_side ? "true" : "false",
           lower ? "true" : "false", unit_diagonal ? "true" : "false", kTranspose[transpose]);
  tt_hlo_type t = *tb;
  return tt_hlo_emit(b, "stablehlo.triangular_solve", ops, 2, attrs, &t);
}
