// reduction.c — ATen's reductions: sum, mean, prod, amax/amin, max/min (full
// and with indices), argmax/argmin, any/all, var/std, and the softmax family
// (_softmax, _log_softmax and their backward ops, numerically stable).
//
// Accumulation follows PyTorch: bool and integer sums and products give
// int64, 16-bit floats accumulate in float32 and are rounded once at the end,
// an explicit dtype= converts the input first, and out= variants without a
// dtype take the out tensor's dtype.
//
// Also: var_mean/std_mean, nansum, count_nonzero, hash_tensor, and vector norms
// (linalg_vector_norm, norm), whose order p is part of the signature.
//
// Leaves out: nanmean/nanmedian, reductions over named dims.
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "lower/lower.h"

// --- helpers -------------------------------------------------------------------------------

// The dtype= argument i, or TT_DTYPE_NONE.
static tt_dtype dtype_arg(const tt_lower_ctx *c, int i) {
  const tt_value *v = tt_lower_arg(c, i);
  return v->kind == TT_VALUE_DTYPE ? v->u.dtype : TT_DTYPE_NONE;
}

// Number of elements the mask reduces over.
static int64_t reduced_count(const tt_hlo_type *t, const bool *mask) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++)
    if (mask[d]) n *= t->dims[d];
  return n;
}

// b (reduced, keepdim) broadcast back over a's shape.
static tt_hv expand_like(tt_lower_ctx *c, tt_hv b, tt_hv a) {
  tt_hlo_type t = tt_lower_type(c, a);
  return tt_lower_broadcast_to(c, b, t.rank, t.dims);
}

// The dtype of a sum/prod/mean result: dtype=, else out='s, else PyTorch's
// default (integers and bool accumulate into int64).
static tt_dtype accum_dtype(const tt_lower_ctx *c, int dtype_idx, tt_dtype in) {
  tt_dtype d = dtype_arg(c, dtype_idx);
  tt_hlo_type dest;
  if (d == TT_DTYPE_NONE && tt_lower_dest_type(c, 0, &dest)) d = dest.dtype;
  if (d == TT_DTYPE_NONE) d = tt_dtype_is_float(in) || tt_dtype_is_complex(in) ? in : TT_I64;
  return d;
}

// --- sum, mean, prod -------------------------------------------------------------------------

// sum / prod / mean of argument 0 over dims argument `dim_idx` (-1: all),
// keepdim argument `keep_idx` (-1: false), dtype argument `dtype_idx`.
static tt_status sum_like(tt_lower_ctx *c, int dim_idx, int keep_idx, int dtype_idx,
                          tt_hlo_reduce_kind kind, bool mean) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  tt_dtype rt = accum_dtype(c, dtype_idx, t.dtype);
  if (mean && !tt_dtype_is_float(rt) && !tt_dtype_is_complex(rt))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "mean(): could not infer output dtype. "
                         "Input dtype must be either a floating point or complex dtype. "
                         "Got: %s", tt_dtype_name(rt));
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, dim_idx, t.rank, true, mask));
  bool keep = keep_idx >= 0 && tt_lower_bool(c, keep_idx);
  tt_hv r = tt_lower_reduce(c, tt_lower_convert(c, tt_lower_convert(c, x, rt), tt_opmath(rt)), mask, keep, kind);
  if (mean) {
    tt_hv n = tt_lower_splat_like(c, r, (double)reduced_count(&t, mask));
    r = tt_lower_bin(c, TT_HLO_DIV, r, n);
  }
  tt_lower_result(c, tt_lower_convert(c, r, rt));
  return NULL;
}

static tt_status lower_sum(tt_lower_ctx *c) { return sum_like(c, -1, -1, 1, TT_HLO_REDUCE_ADD, false); }
static tt_status lower_sum_dim(tt_lower_ctx *c) { return sum_like(c, 1, 2, 3, TT_HLO_REDUCE_ADD, false); }
static tt_status lower_mean(tt_lower_ctx *c) { return sum_like(c, -1, -1, 1, TT_HLO_REDUCE_ADD, true); }
static tt_status lower_mean_dim(tt_lower_ctx *c) { return sum_like(c, 1, 2, 3, TT_HLO_REDUCE_ADD, true); }
static tt_status lower_prod(tt_lower_ctx *c) { return sum_like(c, -1, -1, 1, TT_HLO_REDUCE_MUL, false); }
static tt_status lower_prod_dim(tt_lower_ctx *c) { return sum_like(c, 1, 2, 3, TT_HLO_REDUCE_MUL, false); }

// --- amax, amin, max, min -----------------------------------------------------------------------

// max/min/amax/amin/argmax/argmin over the dims in mask (argument dim_idx,
// -1: all of them) of a tensor of type t: none may be empty, with PyTorch's
// texts (reducing everything of an empty tensor is a RuntimeError for
// max/min/amax, an IndexError for argmax; one empty dim is an IndexError).
static tt_status check_nonempty(const tt_lower_ctx *c, const tt_hlo_type *t, const bool *mask,
                                int dim_idx) {
  const char *op = tt_lower_op_name(c);
  int len = tt_lower_op_base_len(c);
  const tt_value *v = dim_idx >= 0 ? tt_lower_arg(c, dim_idx) : NULL;
  bool no_dim = !v || v->kind == TT_VALUE_NONE || (v->kind == TT_VALUE_INTS && v->u.ints.n == 0);
  if (no_dim && tt_hlo_numel(t) == 0) {
    bool arg = !strncmp(op, "arg", 3);
    return tt_lower_fail(c, arg ? TT_OUT_OF_RANGE : TT_INVALID_ARGUMENT,
                         "%.*s(): Expected reduction dim to be specified for input.numel() == "
                         "0.%s", len, op, arg ? "" : " Specify the reduction dim with the 'dim' "
                         "argument.");
  }
  for (int d = 0; d < t->rank; d++)
    if (mask[d] && t->dims[d] == 0)
      return tt_lower_fail(c, TT_OUT_OF_RANGE, "%.*s(): Expected reduction dim %d to have "
                           "non-zero size.", len, op, d);
  return NULL;
}

// max/min over the masked dims; a reduced dim of size 0 has no identity in
// PyTorch, so it is an error.
static tt_status extreme(tt_lower_ctx *c, int dim_idx, int keep_idx, bool is_max) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, dim_idx, t.rank, true, mask));
  TT_RETURN_IF_ERROR(check_nonempty(c, &t, mask, dim_idx));
  bool keep = keep_idx >= 0 && tt_lower_bool(c, keep_idx);
  tt_hlo_reduce_kind kind = t.dtype == TT_BOOL ? (is_max ? TT_HLO_REDUCE_OR : TT_HLO_REDUCE_AND)
                                               : (is_max ? TT_HLO_REDUCE_MAX : TT_HLO_REDUCE_MIN);
  tt_lower_result(c, tt_lower_reduce(c, x, mask, keep, kind));
  return NULL;
}

static tt_status lower_amax(tt_lower_ctx *c) { return extreme(c, 1, 2, true); }
static tt_status lower_amin(tt_lower_ctx *c) { return extreme(c, 1, 2, false); }
static tt_status lower_max(tt_lower_ctx *c) { return extreme(c, -1, -1, true); }
static tt_status lower_min(tt_lower_ctx *c) { return extreme(c, -1, -1, false); }

// --- max.dim, min.dim, argmax, argmin -----------------------------------------------------------

// Values and int64 indices of the max/min of x along dim (rank >= 1).
static tt_status arg_along(tt_lower_ctx *c, tt_hv x, int64_t dim, bool keep, bool is_max,
                           tt_hv *vals, tt_hv *idx) {
  tt_hlo_type t = tt_lower_type(c, x);
  tt_hlo_argreduce(tt_lower_hlo(c), x, dim, is_max, TT_I64, vals, idx);
  if (keep) {
    t.dims[dim] = 1;
    *vals = tt_hlo_reshape(tt_lower_hlo(c), *vals, t.rank, t.dims);
    *idx = tt_hlo_reshape(tt_lower_hlo(c), *idx, t.rank, t.dims);
  }
  return NULL;
}

// max.dim / min.dim: (values, indices); a 0-d input is its own max at 0.
static tt_status with_indices(tt_lower_ctx *c, bool is_max) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  int64_t dim;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 1), t.rank, &dim));
  bool mask[TT_MAX_RANK] = {false};
  if (t.rank > 0) mask[dim] = true;
  TT_RETURN_IF_ERROR(check_nonempty(c, &t, mask, 1));
  tt_hv vals = x, idx;
  if (t.rank == 0)
    idx = tt_hlo_const_i(tt_lower_hlo(c), TT_I64, 0);
  else
    TT_RETURN_IF_ERROR(arg_along(c, x, dim, tt_lower_bool(c, 2), is_max, &vals, &idx));
  tt_lower_result(c, vals);
  tt_lower_result(c, idx);
  return NULL;
}

static tt_status lower_max_dim(tt_lower_ctx *c) { return with_indices(c, true); }
static tt_status lower_min_dim(tt_lower_ctx *c) { return with_indices(c, false); }

// argmax/argmin(self, dim=None, keepdim): dim None flattens; with keepdim the
// result has self's rank with every dim 1.
static tt_status arg_only(tt_lower_ctx *c, bool is_max) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  bool keep = tt_lower_bool(c, 2), flat = tt_lower_is_none(c, 1);
  int64_t dim = 0, n = tt_hlo_numel(&t);
  if (flat || t.rank == 0)
    x = tt_hlo_reshape(tt_lower_hlo(c), x, 1, &n);
  if (!flat) TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_int(c, 1), t.rank, &dim));
  if (t.rank == 0) dim = 0;
  bool mask[TT_MAX_RANK] = {false};
  for (int d = 0; d < t.rank; d++) mask[d] = flat || d == dim;
  TT_RETURN_IF_ERROR(check_nonempty(c, &t, mask, 1));
  tt_hv vals, idx;
  TT_RETURN_IF_ERROR(arg_along(c, x, dim, !flat && keep && t.rank > 0, is_max, &vals, &idx));
  if (flat && keep) {
    int64_t ones[TT_MAX_RANK] = {1, 1, 1, 1, 1, 1, 1, 1};
    idx = tt_hlo_reshape(tt_lower_hlo(c), idx, t.rank, ones);
  }
  tt_lower_result(c, idx);
  return NULL;
}

static tt_status lower_argmax(tt_lower_ctx *c) { return arg_only(c, true); }
static tt_status lower_argmin(tt_lower_ctx *c) { return arg_only(c, false); }

// --- any, all ----------------------------------------------------------------------------------------

// PyTorch returns uint8 for uint8 input, bool otherwise.
static tt_status any_all(tt_lower_ctx *c, int dim_idx, int keep_idx, bool is_any) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, dim_idx, t.rank, false, mask));
  bool keep = keep_idx >= 0 && tt_lower_bool(c, keep_idx);
  tt_hv r = tt_lower_reduce(c, tt_lower_convert(c, x, TT_BOOL), mask, keep,
                            is_any ? TT_HLO_REDUCE_OR : TT_HLO_REDUCE_AND);
  tt_lower_result(c, t.dtype == TT_U8 ? tt_lower_convert(c, r, TT_U8) : r);
  return NULL;
}

static tt_status lower_any(tt_lower_ctx *c) { return any_all(c, -1, -1, true); }
static tt_status lower_any_dim(tt_lower_ctx *c) { return any_all(c, 1, 2, true); }
static tt_status lower_all(tt_lower_ctx *c) { return any_all(c, -1, -1, false); }
static tt_status lower_all_dim(tt_lower_ctx *c) { return any_all(c, 1, 2, false); }

// --- var, std -------------------------------------------------------------------------------------------

// var.correction(self, dim?, *, correction?, keepdim): two-pass, divided by
// max(N - correction, 0); correction is a runtime Scalar (default 1).
static tt_status var_like(tt_lower_ctx *c, bool is_std, bool with_mean) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  if (!tt_dtype_is_float(t.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "std and var only support floating point "
                         "and complex dtypes");
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, 1, t.rank, true, mask));
  tt_dtype acc = tt_opmath(t.dtype);
  tt_hlo *b = tt_lower_hlo(c);
  x = tt_lower_convert(c, x, acc);
  double n = (double)reduced_count(&t, mask);
  tt_hv sum = tt_lower_reduce(c, x, mask, true, TT_HLO_REDUCE_ADD);
  tt_hv mean = tt_lower_bin(c, TT_HLO_DIV, sum, tt_lower_splat_like(c, sum, n));
  tt_hv d = tt_lower_bin(c, TT_HLO_SUB, x, expand_like(c, mean, x));
  tt_hv ss = tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_MUL, d, d), mask, tt_lower_bool(c, 3),
                             TT_HLO_REDUCE_ADD);
  tt_hv corr = tt_lower_is_none(c, 2) ? tt_hlo_const(b, acc, 1) : tt_lower_scalar(c, 2, acc);
  tt_hv denom = tt_lower_bin(c, TT_HLO_MAX, tt_lower_bin(c, TT_HLO_SUB, tt_hlo_const(b, acc, n), corr),
                    tt_hlo_const(b, acc, 0));
  tt_hv v = tt_lower_bin(c, TT_HLO_DIV, ss, expand_like(c, denom, ss));
  if (is_std) v = tt_hlo_unary(b, TT_HLO_SQRT, v);
  tt_lower_result(c, tt_lower_convert(c, v, t.dtype));
  if (with_mean) {  // var_mean / std_mean: the mean, with keepdim applied
    tt_hv m = tt_lower_reduce(c, x, mask, tt_lower_bool(c, 3), TT_HLO_REDUCE_ADD);
    tt_lower_result(c, tt_lower_convert(c, tt_lower_bin(c, TT_HLO_DIV, m, tt_lower_splat_like(c, m, n)), t.dtype));
  }
  return NULL;
}

static tt_status lower_var(tt_lower_ctx *c) { return var_like(c, false, false); }
static tt_status lower_std(tt_lower_ctx *c) { return var_like(c, true, false); }
static tt_status lower_var_mean(tt_lower_ctx *c) { return var_like(c, false, true); }
static tt_status lower_std_mean(tt_lower_ctx *c) { return var_like(c, true, true); }

// --- nansum, count_nonzero, vector norms ------------------------------------------------------------

// nansum(self, dim?, keepdim, *, dtype): sum with NaNs read as 0.
static tt_status lower_nansum(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  tt_dtype rt = accum_dtype(c, 3, t.dtype);
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, 1, t.rank, true, mask));
  x = tt_lower_convert(c, tt_lower_convert(c, x, rt), tt_opmath(rt));
  if (tt_dtype_is_float(rt)) {
    tt_hv nan = tt_hlo_compare(tt_lower_hlo(c), TT_HLO_NE, x, x);
    x = tt_hlo_select(tt_lower_hlo(c), nan, tt_lower_splat_like(c, x, 0), x);
  }
  tt_hv r = tt_lower_reduce(c, x, mask, tt_lower_bool(c, 2), TT_HLO_REDUCE_ADD);
  tt_lower_result(c, tt_lower_convert(c, r, rt));
  return NULL;
}

// count_nonzero(self, dim) with dim an int[] or an optional int: int64.
static tt_status lower_count_nonzero(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, 1, t.rank, true, mask));
  tt_hv nz = tt_lower_convert(c, tt_lower_convert(c, x, TT_BOOL), TT_I64);
  tt_lower_result(c, tt_lower_reduce(c, nz, mask, false, TT_HLO_REDUCE_ADD));
  return NULL;
}

// hash_tensor(self, dim=[], *, keepdim, mode): uint64, the XOR of the
// elements' 64-bit patterns (floats widened to double, integers and bool to
// int64), as ATen's xor_sum. What the CPU refuses or raises on (other modes,
// the wide unsigned and complex dtypes, an empty reduction) goes to it for
// its texts; so do floats where the device has no float64.
static tt_status lower_hash_tensor(tt_lower_ctx *c) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, 1, t.rank, true, mask));
  bool fl = tt_dtype_is_float(t.dtype), empty = t.rank > 0 && reduced_count(&t, mask) == 0;
  bool wide_uint = t.dtype == TT_U16 || t.dtype == TT_U32 || t.dtype == TT_U64;
  if (tt_lower_int(c, 3) != 0 || wide_uint || tt_dtype_is_complex(t.dtype) || empty ||
      (fl && !tt_lower_supports_f64(c)))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "hash_tensor of %s (mode %" PRId64 ")",
                         tt_dtype_name(t.dtype), tt_lower_int(c, 3));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv bits = tt_hlo_bitcast(b, tt_lower_convert(c, x, fl ? TT_F64 : TT_I64), TT_U64);
  tt_lower_result(c, tt_lower_reduce(c, bits, mask, tt_lower_bool(c, 2), TT_HLO_REDUCE_XOR));
  return NULL;
}

// The value of the Scalar argument i (in the signature: the rule is flagged
// TT_RULE_SCALARS_IN_SIGNATURE), or dflt when it is None.
static double scalar_value(const tt_lower_ctx *c, int i, double dflt) {
  const tt_value *v = tt_lower_arg(c, i);
  if (v->kind == TT_VALUE_SCALAR)
    return tt_dtype_is_float(v->u.scalar.dtype) ? v->u.scalar.f : (double)v->u.scalar.i;
  if (v->kind == TT_VALUE_INT) return (double)v->u.i;
  return dflt;
}

// The p-norm of x over the masked dims, in x's (float) dtype: max/min |x|
// for +-inf, the count of nonzeros for 0, else (sum |x|^p)^(1/p).
static tt_hv vector_norm(tt_lower_ctx *c, tt_hv x, double p, const bool *mask, bool keep) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv a = tt_hlo_unary(b, TT_HLO_ABS, x);
  if (isinf(p))
    return tt_lower_reduce(c, a, mask, keep, p > 0 ? TT_HLO_REDUCE_MAX : TT_HLO_REDUCE_MIN);
  if (p == 0) {
    tt_hv nz = tt_hlo_compare(b, TT_HLO_NE, a, tt_lower_splat_like(c, a, 0));
    tt_dtype d = tt_lower_type(c, x).dtype;
    return tt_lower_reduce(c, tt_lower_convert(c, nz, d), mask, keep, TT_HLO_REDUCE_ADD);
  }
  if (p == 1) return tt_lower_reduce(c, a, mask, keep, TT_HLO_REDUCE_ADD);
  if (p == 2) {
    tt_hv s = tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_MUL, a, a), mask, keep, TT_HLO_REDUCE_ADD);
    return tt_hlo_unary(b, TT_HLO_SQRT, s);
  }
  tt_hv s = tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_POW, a, tt_lower_splat_like(c, a, p)), mask, keep,
                            TT_HLO_REDUCE_ADD);
  return tt_lower_bin(c, TT_HLO_POW, s, tt_lower_splat_like(c, s, 1.0 / p));
}

// linalg_vector_norm(self, ord, dim?, keepdim, *, dtype?) and the norm
// overloads (self, p?, [dim, keepdim,] [dtype]); arguments by index.
static tt_status norm_like(tt_lower_ctx *c, int dim_idx, int keep_idx, int dtype_idx) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  // Unlike sum's, a norm's out= tensor does not choose the dtype: PyTorch
  // refuses one of another dtype than the result's (ctx.c's kExactOut).
  tt_dtype d = dtype_idx >= 0 ? dtype_arg(c, dtype_idx) : TT_DTYPE_NONE;
  if (d == TT_DTYPE_NONE) d = t.dtype;
  if (!tt_dtype_is_float(t.dtype) || !tt_dtype_is_float(d))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "linalg.vector_norm: Expected a floating "
                         "point or complex tensor as input. Got %s", tt_dtype_name(t.dtype));
  double p = scalar_value(c, 1, 2.0);
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, dim_idx, t.rank, true, mask));
  if (p < 0 || (isinf(p) && p > 0))  // max/min with no identity: empty is an error
    for (int i = 0; i < t.rank; i++)
      if (mask[i] && t.dims[i] == 0)
        return tt_lower_fail(c, TT_INVALID_ARGUMENT, "linalg.vector_norm cannot compute the "
                             "%g norm on the empty dimension %d", p, i);
  bool keep = keep_idx >= 0 && tt_lower_bool(c, keep_idx);
  tt_hv r = vector_norm(c, tt_lower_convert(c, tt_lower_convert(c, x, d), tt_opmath(d)), p, mask, keep);
  tt_lower_result(c, tt_lower_convert(c, r, d));
  return NULL;
}

static tt_status lower_vector_norm(tt_lower_ctx *c) { return norm_like(c, 2, 3, 4); }
static tt_status lower_norm_dim(tt_lower_ctx *c) { return norm_like(c, 2, 3, -1); }
static tt_status lower_norm_dim_dtype(tt_lower_ctx *c) { return norm_like(c, 2, 3, 4); }
static tt_status lower_norm_all(tt_lower_ctx *c) { return norm_like(c, -1, -1, -1); }
static tt_status lower_norm_all_dtype(tt_lower_ctx *c) { return norm_like(c, -1, -1, 2); }

// --- softmax family ----------------------------------------------------------------------------------

// x - max(x) along dim (keepdim, broadcast back): the stable shift. A row of
// all -inf gives NaN, as in PyTorch.
static tt_hv shifted(tt_lower_ctx *c, tt_hv x, const bool *mask) {
  tt_hv m = tt_lower_reduce(c, x, mask, true, TT_HLO_REDUCE_MAX);
  return tt_lower_bin(c, TT_HLO_SUB, x, expand_like(c, m, x));
}

// _softmax / _log_softmax(self, dim, half_to_float).
static tt_status softmax_like(tt_lower_ctx *c, bool log) {
  tt_hv x = tt_lower_tensor(c, 0);
  tt_hlo_type t = tt_lower_type(c, x);
  if (!tt_dtype_is_float(t.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "softmax of %s is not supported",
                         tt_dtype_name(t.dtype));
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, 1, t.rank, false, mask));
  tt_dtype out = tt_lower_bool(c, 2) ? TT_F32 : t.dtype;  // half_to_float
  tt_hv z = shifted(c, tt_lower_convert(c, x, tt_opmath(t.dtype)), mask);
  tt_hv e = tt_hlo_unary(tt_lower_hlo(c), TT_HLO_EXP, z);
  tt_hv s = expand_like(c, tt_lower_reduce(c, e, mask, true, TT_HLO_REDUCE_ADD), e);
  tt_hv r = log ? tt_lower_bin(c, TT_HLO_SUB, z, tt_hlo_unary(tt_lower_hlo(c), TT_HLO_LOG, s))
                : tt_lower_bin(c, TT_HLO_DIV, e, s);
  tt_lower_result(c, tt_lower_convert(c, r, out));
  return NULL;
}

static tt_status lower_softmax(tt_lower_ctx *c) { return softmax_like(c, false); }
static tt_status lower_log_softmax(tt_lower_ctx *c) { return softmax_like(c, true); }

// (grad_output, output, dim, input_dtype):
//   softmax:     y * (g - sum(g * y))
//   log_softmax: g - exp(y) * sum(g)
static tt_status softmax_backward(tt_lower_ctx *c, bool log) {
  tt_hv g = tt_lower_tensor(c, 0), y = tt_lower_tensor(c, 1);
  tt_hlo_type t = tt_lower_type(c, y);
  tt_dtype in = dtype_arg(c, 3);
  if (in == TT_DTYPE_NONE) in = t.dtype;
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, 2, t.rank, false, mask));
  tt_dtype acc = tt_opmath(t.dtype);
  g = tt_lower_convert(c, g, acc);
  y = tt_lower_convert(c, y, acc);
  tt_hv r;
  if (log) {
    tt_hv s = expand_like(c, tt_lower_reduce(c, g, mask, true, TT_HLO_REDUCE_ADD), g);
    r = tt_lower_bin(c, TT_HLO_SUB, g, tt_lower_bin(c, TT_HLO_MUL, tt_hlo_unary(tt_lower_hlo(c), TT_HLO_EXP, y), s));
  } else {
    tt_hv gy = tt_lower_bin(c, TT_HLO_MUL, g, y);
    tt_hv s = expand_like(c, tt_lower_reduce(c, gy, mask, true, TT_HLO_REDUCE_ADD), gy);
    r = tt_lower_bin(c, TT_HLO_MUL, y, tt_lower_bin(c, TT_HLO_SUB, g, s));
  }
  tt_lower_result(c, tt_lower_convert(c, r, in));
  return NULL;
}

static tt_status lower_softmax_backward(tt_lower_ctx *c) { return softmax_backward(c, false); }
static tt_status lower_log_softmax_backward(tt_lower_ctx *c) { return softmax_backward(c, true); }

// --- the table ----------------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
#define RC(name, fn) {"aten::" name, fn, TT_RULE_COMPLEX}  // complex-capable
#define S(name, fn) {"aten::" name, fn, TT_RULE_SCALARS_IN_SIGNATURE}  // p shapes the program
static const tt_rule kRules[] = {
    RC("sum", lower_sum), RC("sum.out", lower_sum),
    RC("sum.dim_IntList", lower_sum_dim), RC("sum.IntList_out", lower_sum_dim),
    RC("mean", lower_mean), RC("mean.dtype_out", lower_mean),
    RC("mean.dim", lower_mean_dim), RC("mean.out", lower_mean_dim),
    RC("prod", lower_prod), RC("prod.out", lower_prod),
    RC("prod.dim_int", lower_prod_dim), RC("prod.int_out", lower_prod_dim),
    R("amax", lower_amax), R("amax.out", lower_amax),
    R("amin", lower_amin), R("amin.out", lower_amin),
    R("max", lower_max), R("max.unary_out", lower_max),
    R("min", lower_min), R("min.unary_out", lower_min),
    R("max.dim", lower_max_dim), R("max.dim_max", lower_max_dim),
    R("min.dim", lower_min_dim), R("min.dim_min", lower_min_dim),
    R("argmax", lower_argmax), R("argmax.out", lower_argmax),
    R("argmin", lower_argmin), R("argmin.out", lower_argmin),
    R("any", lower_any), R("any.all_out", lower_any),
    R("any.dim", lower_any_dim), R("any.out", lower_any_dim),
    R("any.dims", lower_any_dim), R("any.dims_out", lower_any_dim),
    R("all", lower_all), R("all.all_out", lower_all),
    R("all.dim", lower_all_dim), R("all.out", lower_all_dim),
    R("all.dims", lower_all_dim), R("all.dims_out", lower_all_dim),
    R("var.correction", lower_var), R("var.correction_out", lower_var),
    R("std.correction", lower_std), R("std.correction_out", lower_std),
    R("var_mean.correction", lower_var_mean), R("var_mean.correction_out", lower_var_mean),
    R("std_mean.correction", lower_std_mean), R("std_mean.correction_out", lower_std_mean),
    R("nansum", lower_nansum), R("nansum.out", lower_nansum),
    R("count_nonzero.dim_IntList", lower_count_nonzero),
    R("count_nonzero.dim_IntList_out", lower_count_nonzero),
    R("count_nonzero", lower_count_nonzero), R("count_nonzero.out", lower_count_nonzero),
    R("hash_tensor", lower_hash_tensor), R("hash_tensor.out", lower_hash_tensor),
    S("linalg_vector_norm", lower_vector_norm), S("linalg_vector_norm.out", lower_vector_norm),
    S("norm.ScalarOpt_dim", lower_norm_dim), S("norm.out", lower_norm_dim),
    S("norm.ScalarOpt_dim_dtype", lower_norm_dim_dtype), S("norm.dtype_out", lower_norm_dim_dtype),
    S("norm.Scalar", lower_norm_all), S("norm.Scalar_out", lower_norm_all),
    S("norm.ScalarOpt_dtype", lower_norm_all_dtype), S("norm.ScalarOpt_dtype_out", lower_norm_all_dtype),
    R("_softmax", lower_softmax), R("_softmax.out", lower_softmax),
    R("_log_softmax", lower_log_softmax), R("_log_softmax.out", lower_log_softmax),
    R("_softmax_backward_data", lower_softmax_backward),
    R("_softmax_backward_data.out", lower_softmax_backward),
    R("_log_softmax_backward_data", lower_log_softmax_backward),
    R("_log_softmax_backward_data.out", lower_log_softmax_backward),
};
#undef R
#undef RC
#undef S

const tt_rule_table tt_rules_reduction = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
