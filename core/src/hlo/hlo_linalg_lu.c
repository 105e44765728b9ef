// hlo_linalg_lu.c — the builder's factorisation ops that StableHLO has
// natively: stablehlo.cholesky and stablehlo.triangular_solve. XLA expands
// both into loops of its own on every backend (the CPU plugin has no LAPACK
// calls), so they need no custom call.
//
// Leaves out: LU, QR, eigen and singular value decompositions (StableHLO has
// none; lower/linalg_lu.c and lower/linalg_qr.c build them from loops).
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

tt_hv tt_hlo_cholesky(tt_hlo *b, tt_hv a, bool lower) {
  if (!tt_hlo_ok(b, &a, 1)) return TT_HV_INVALID;
  tt_hlo_type t = b->vals[a].type;
  if (!square_batch(&t)) {
    tt_hlo_failf(b, "stablehlo.cholesky: operand of rank %d and dtype %d is not a batch "
                 "of square float matrices", (int)t.rank, (int)t.dtype);
    return TT_HV_INVALID;
  }
  return tt_hlo_emit(b, "stablehlo.cholesky", &a, 1,
                     lower ? "{lower = true}" : "{lower = false}", &t);
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
