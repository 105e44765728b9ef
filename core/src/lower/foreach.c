// foreach.c — the _foreach_* ops the optimizers call (SGD, Adam, AdamW,
// clip_grad_norm_): one program per call for the whole tensor list, where
// PyTorch's composite kernels would run one op per tensor.
//
// Every rule reads list items with tt_lower_list_tensor and declares one
// result per item, in order: in-place forms write each self item (the
// shim's dests), functional forms return a fresh Tensor[]. Scalars and
// Scalar[] items are runtime values (a new lr or bias correction never
// recompiles); norm's `ord` shapes the program, so it is in the signature.
//
// The rules replace PyTorch's CompositeExplicitAutograd kernels
// (TT_RULE_REPLACES_COMPOSITE): the shim registers them for the device.
//
// Also the fused Adam / AdamW / SGD / Adagrad steps (optim's fused=True,
// TorchTitan's default for Adam).
//
// Leaves out: the .Tensor overloads of addcmul/addcdiv (their scalars are a
// CPU tensor), _foreach_copy_, integer pow corner cases, complex numbers.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower/lower.h"

typedef enum form { F_LIST, F_SCALAR, F_SCALARLIST, F_TENSOR } form;

static int list_len(const tt_lower_ctx *c, int i) {
  const tt_value *v = tt_lower_arg(c, i);
  return v->kind == TT_VALUE_LIST ? v->u.list.n : 0;
}

// Checks that list arguments idx[0..n) all have the length of argument 0.
static tt_status same_lengths(tt_lower_ctx *c, const int *idx, int n) {
  int len = list_len(c, 0);
  for (int k = 0; k < n; k++)
    if (list_len(c, idx[k]) != len)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Tensor lists must have the same number "
                           "of tensors, got %d and %d", len, list_len(c, idx[k]));
  return NULL;
}

// The dtype of argument i (or its item j): a Scalar's or a tensor's.
static tt_dtype arg_dtype(const tt_lower_ctx *c, int i, int j, form f) {
  const tt_value *v = tt_lower_arg(c, i);
  if ((f == F_SCALARLIST || f == F_LIST) && v->kind == TT_VALUE_LIST && j < v->u.list.n)
    v = &v->u.list.items[j];
  if (v->kind == TT_VALUE_SCALAR) return v->u.scalar.dtype;
  if (v->kind == TT_VALUE_TENSOR) return v->u.tensor.dtype;
  return TT_DTYPE_NONE;
}

// Is argument i (or its item j) floating: decides int -> float promotion.
static bool arg_is_float(const tt_lower_ctx *c, int i, int j, form f) {
  const tt_value *v = tt_lower_arg(c, i);
  if (f == F_SCALARLIST && v->kind == TT_VALUE_LIST && j < v->u.list.n) v = &v->u.list.items[j];
  if (f == F_LIST && v->kind == TT_VALUE_LIST && j < v->u.list.n) v = &v->u.list.items[j];
  if (v->kind == TT_VALUE_SCALAR) return tt_dtype_is_float(v->u.scalar.dtype);
  if (v->kind == TT_VALUE_TENSOR) return tt_dtype_is_float(v->u.tensor.dtype);
  return false;
}

// The result dtype of item j of self (arg 0) combined with argument i.
static tt_dtype item_dtype(const tt_lower_ctx *c, int j, int i, form f, bool to_float) {
  tt_dtype d = tt_lower_tensor_type(c, 0, j).dtype;
  if (f == F_LIST && i >= 0) d = tt_promote_types(d, tt_lower_tensor_type(c, i, j).dtype);
  if (!tt_dtype_is_float(d) && (to_float || (i >= 0 && arg_is_float(c, i, j, f))))
    d = tt_lower_default_dtype(c);
  // A bool tensor with an integer Scalar: the Scalar's category wins (int64).
  if (d == TT_BOOL && i >= 0 && f != F_LIST && arg_dtype(c, i, j, f) != TT_BOOL) d = TT_I64;
  return d;
}

// Argument i as seen by item j (value `like`, dtype of like).
static tt_hv operand(tt_lower_ctx *c, int i, int j, form f, tt_hv like) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_type(c, like);
  tt_hv v;
  switch (f) {
    case F_LIST: v = tt_lower_list_tensor(c, i, j); break;
    case F_SCALARLIST: v = tt_lower_list_scalar(c, i, j, t.dtype); break;
    case F_TENSOR: {
      if (tt_lower_arg(c, i)->kind == TT_VALUE_SCALAR) {  // a 0-d CPU tensor
        v = tt_lower_scalar(c, i, t.dtype);
        break;
      }
      v = tt_lower_tensor(c, i);
      tt_hlo_type vt = tt_lower_type(c, v);
      if (vt.rank > 0 && tt_hlo_numel(&vt) == 1) v = tt_hlo_reshape(b, v, 0, NULL);
      break;
    }
    default: v = tt_lower_scalar(c, i, t.dtype); break;
  }
  return tt_lower_broadcast_to(c, tt_hlo_convert(b, v, t.dtype), t.rank, t.dims);
}

// --- binary: add, sub, mul, div, maximum, minimum, pow, clamp ------------------------------

typedef enum bop { B_ADD, B_SUB, B_MUL, B_DIV, B_MAX, B_MIN, B_POW } bop;

// (self[], other, [alpha]) with `other` in form f; alpha at arg 2 when has_alpha.
static tt_status binary(tt_lower_ctx *c, bop op, form f, bool has_alpha) {
  tt_hlo *b = tt_lower_hlo(c);
  int n = list_len(c, 0), other = 1;
  if (f == F_LIST || f == F_SCALARLIST) TT_RETURN_IF_ERROR(same_lengths(c, &other, 1));
  static const tt_hlo_binop kOps[] = {TT_HLO_ADD, TT_HLO_SUB, TT_HLO_MUL, TT_HLO_DIV,
                                      TT_HLO_MAX, TT_HLO_MIN, TT_HLO_POW};
  for (int j = 0; j < n; j++) {
    tt_dtype rt = item_dtype(c, j, 1, f, op == B_DIV);
    if (op == B_SUB && (tt_lower_tensor_type(c, 0, j).dtype == TT_BOOL || arg_dtype(c, 1, j, f) == TT_BOOL))
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Subtraction, the `-` operator, with %s is "
                           "not supported. %s", rt == TT_BOOL ? "two bool tensors" : "a bool tensor",
                           rt == TT_BOOL ? "Use the `^` or `logical_xor()` operator instead."
                           : "If you are trying to invert a mask, use the `~` or `logical_not()` "
                             "operator instead.");
    if (op == B_POW && rt == TT_BOOL)  // PyTorch's per-exponent cases: the CPU's
      return tt_lower_fail(c, TT_UNIMPLEMENTED, "bool pow");
    tt_hv x = tt_hlo_convert(b, tt_lower_list_tensor(c, 0, j), tt_opmath(rt));
    tt_hv y = operand(c, 1, j, f, x);
    if (has_alpha && !tt_lower_is_none(c, 2))
      y = tt_lower_bin(c, TT_HLO_MUL, y, tt_lower_broadcast_to(c, tt_lower_scalar(c, 2, tt_opmath(rt)),
                                                      tt_lower_type(c, x).rank, tt_lower_type(c, x).dims));
    tt_lower_result(c, tt_hlo_convert(b, tt_lower_bin(c, kOps[op], x, y), rt));
  }
  return NULL;
}

#define BIN(name, op, f, alpha) \
  static tt_status name(tt_lower_ctx *c) { return binary(c, op, f, alpha); }
BIN(add_list, B_ADD, F_LIST, true)
BIN(add_scalar, B_ADD, F_SCALAR, false)
BIN(add_scalarlist, B_ADD, F_SCALARLIST, false)
BIN(add_tensor, B_ADD, F_TENSOR, true)
BIN(sub_list, B_SUB, F_LIST, true)
BIN(sub_scalar, B_SUB, F_SCALAR, false)
BIN(sub_scalarlist, B_SUB, F_SCALARLIST, false)
BIN(mul_list, B_MUL, F_LIST, false)
BIN(mul_scalar, B_MUL, F_SCALAR, false)
BIN(mul_scalarlist, B_MUL, F_SCALARLIST, false)
BIN(mul_tensor, B_MUL, F_TENSOR, false)
BIN(div_list, B_DIV, F_LIST, false)
BIN(div_scalar, B_DIV, F_SCALAR, false)
BIN(div_scalarlist, B_DIV, F_SCALARLIST, false)
BIN(div_tensor, B_DIV, F_TENSOR, false)
BIN(max_list, B_MAX, F_LIST, false)
BIN(max_scalar, B_MAX, F_SCALAR, false)
BIN(max_scalarlist, B_MAX, F_SCALARLIST, false)
BIN(min_list, B_MIN, F_LIST, false)
BIN(min_scalar, B_MIN, F_SCALAR, false)
BIN(min_scalarlist, B_MIN, F_SCALARLIST, false)
BIN(pow_list, B_POW, F_LIST, false)
BIN(pow_scalar, B_POW, F_SCALAR, false)
BIN(pow_scalarlist, B_POW, F_SCALARLIST, false)
#undef BIN

// --- unary ---------------------------------------------------------------------------------

typedef enum uop { U_SQRT, U_NEG, U_ABS, U_EXP, U_LOG, U_RECIP, U_SIGMOID, U_TANH, U_ZERO } uop;

static tt_status unary(tt_lower_ctx *c, uop op) {
  tt_hlo *b = tt_lower_hlo(c);
  int n = list_len(c, 0);
  bool fl = op != U_NEG && op != U_ABS && op != U_ZERO;
  for (int j = 0; j < n; j++) {
    tt_dtype rt = item_dtype(c, j, -1, F_LIST, fl);
    tt_hv x = tt_hlo_convert(b, tt_lower_list_tensor(c, 0, j), tt_opmath(rt)), y;
    switch (op) {
      case U_SQRT: y = tt_hlo_unary(b, TT_HLO_SQRT, x); break;
      case U_NEG: y = tt_hlo_unary(b, TT_HLO_NEG, x); break;
      case U_ABS: y = tt_hlo_unary(b, TT_HLO_ABS, x); break;
      case U_EXP: y = tt_hlo_unary(b, TT_HLO_EXP, x); break;
      case U_LOG: y = tt_hlo_unary(b, TT_HLO_LOG, x); break;
      case U_RECIP: y = tt_lower_bin(c, TT_HLO_DIV, tt_lower_splat_like(c, x, 1), x); break;
      case U_SIGMOID: y = tt_hlo_unary(b, TT_HLO_LOGISTIC, x); break;
      case U_TANH: y = tt_hlo_unary(b, TT_HLO_TANH, x); break;
      default: y = tt_lower_splat_like(c, x, 0); break;
    }
    tt_lower_result(c, tt_hlo_convert(b, y, rt));
  }
  return NULL;
}

#define UN(name, op) \
  static tt_status name(tt_lower_ctx *c) { return unary(c, op); }
UN(f_sqrt, U_SQRT)
UN(f_neg, U_NEG)
UN(f_abs, U_ABS)
UN(f_exp, U_EXP)
UN(f_log, U_LOG)
UN(f_reciprocal, U_RECIP)
UN(f_sigmoid, U_SIGMOID)
UN(f_tanh, U_TANH)
UN(f_zero, U_ZERO)
#undef UN

// --- addcmul, addcdiv, lerp -----------------------------------------------------------------

// self + value * t1 (*|/) t2, value at arg 3 in form f (Scalar or Scalar[]).
static tt_status addc(tt_lower_ctx *c, bool div, form f) {
  tt_hlo *b = tt_lower_hlo(c);
  int n = list_len(c, 0), lists[3] = {1, 2, 3};
  TT_RETURN_IF_ERROR(same_lengths(c, lists, f == F_SCALARLIST ? 3 : 2));
  for (int j = 0; j < n; j++) {
    tt_dtype rt = item_dtype(c, j, 1, F_LIST, div);
    rt = tt_promote_types(rt, tt_lower_tensor_type(c, 2, j).dtype);
    tt_dtype acc = tt_opmath(rt);
    tt_hv x = tt_hlo_convert(b, tt_lower_list_tensor(c, 0, j), acc);
    tt_hv t1 = operand(c, 1, j, F_LIST, x), t2 = operand(c, 2, j, F_LIST, x);
    tt_hv prod = tt_lower_bin(c, div ? TT_HLO_DIV : TT_HLO_MUL, t1, t2);
    if (f == F_SCALARLIST || !tt_lower_is_none(c, 3)) prod = tt_lower_bin(c, TT_HLO_MUL, operand(c, 3, j, f, x), prod);
    tt_lower_result(c, tt_hlo_convert(b, tt_lower_bin(c, TT_HLO_ADD, x, prod), rt));
  }
  return NULL;
}

static tt_status addcmul_scalar(tt_lower_ctx *c) { return addc(c, false, F_SCALAR); }
static tt_status addcmul_scalarlist(tt_lower_ctx *c) { return addc(c, false, F_SCALARLIST); }
static tt_status addcdiv_scalar(tt_lower_ctx *c) { return addc(c, true, F_SCALAR); }
static tt_status addcdiv_scalarlist(tt_lower_ctx *c) { return addc(c, true, F_SCALARLIST); }

// self + w * (end - self), as PyTorch's lerp computes it (from the nearer end).
static tt_status lerp(tt_lower_ctx *c, form f) {
  tt_hlo *b = tt_lower_hlo(c);
  int n = list_len(c, 0), lists[2] = {1, 2};
  TT_RETURN_IF_ERROR(same_lengths(c, lists, f == F_SCALAR ? 1 : 2));
  for (int j = 0; j < n; j++) {
    tt_dtype rt = item_dtype(c, j, 1, F_LIST, true);
    tt_hv x = tt_hlo_convert(b, tt_lower_list_tensor(c, 0, j), tt_opmath(rt));
    tt_hv end = operand(c, 1, j, F_LIST, x), w = operand(c, 2, j, f, x);
    tt_hv diff = tt_lower_bin(c, TT_HLO_SUB, end, x);
    tt_hv small = tt_hlo_compare(b, TT_HLO_LT, tt_hlo_unary(b, TT_HLO_ABS, w), tt_lower_splat_like(c, w, 0.5));
    tt_hv lo = tt_lower_bin(c, TT_HLO_ADD, x, tt_lower_bin(c, TT_HLO_MUL, w, diff));
    tt_hv hi = tt_lower_bin(c, TT_HLO_SUB, end, tt_lower_bin(c, TT_HLO_MUL, diff, tt_lower_bin(c, TT_HLO_SUB, tt_lower_splat_like(c, w, 1), w)));
    tt_lower_result(c, tt_hlo_convert(b, tt_hlo_select(b, small, lo, hi), rt));
  }
  return NULL;
}

static tt_status lerp_scalar(tt_lower_ctx *c) { return lerp(c, F_SCALAR); }
static tt_status lerp_list(tt_lower_ctx *c) { return lerp(c, F_LIST); }
static tt_status lerp_scalarlist(tt_lower_ctx *c) { return lerp(c, F_SCALARLIST); }

// --- norm ----------------------------------------------------------------------------------

// _foreach_norm.Scalar(self[], ord=2, dtype?) -> 0-d tensors. `ord` is
// structural (TT_RULE_SCALARS_IN_SIGNATURE).
static tt_status f_norm(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  const tt_value *ov = tt_lower_arg(c, 1);
  double ord = ov->kind == TT_VALUE_SCALAR
                   ? (tt_dtype_is_float(ov->u.scalar.dtype) ? ov->u.scalar.f : (double)ov->u.scalar.i)
                   : 2.0;
  const tt_value *dv = tt_lower_arg(c, 2);
  int n = list_len(c, 0);
  bool all[TT_MAX_RANK] = {true, true, true, true, true, true, true, true};
  for (int j = 0; j < n; j++) {
    tt_dtype in = tt_lower_tensor_type(c, 0, j).dtype;
    tt_dtype rt = dv->kind == TT_VALUE_DTYPE ? dv->u.dtype : in;
    if (!tt_dtype_is_float(rt))
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "norm of %s is not supported", tt_dtype_name(rt));
    tt_dtype acc = tt_opmath(rt);
    tt_hv a = tt_hlo_unary(b, TT_HLO_ABS, tt_hlo_convert(b, tt_lower_list_tensor(c, 0, j), acc)), r;
    if (isinf(ord)) {
      r = tt_lower_reduce(c, a, all, false, ord > 0 ? TT_HLO_REDUCE_MAX : TT_HLO_REDUCE_MIN);
    } else if (ord == 0) {
      tt_hv nz = tt_hlo_convert(b, tt_hlo_compare(b, TT_HLO_NE, a, tt_lower_splat_like(c, a, 0)), acc);
      r = tt_lower_reduce(c, nz, all, false, TT_HLO_REDUCE_ADD);
    } else if (ord == 1) {
      r = tt_lower_reduce(c, a, all, false, TT_HLO_REDUCE_ADD);
    } else if (ord == 2) {
      r = tt_hlo_unary(b, TT_HLO_SQRT, tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_MUL, a, a), all, false,
                                                       TT_HLO_REDUCE_ADD));
    } else {
      tt_hv p = tt_lower_bin(c, TT_HLO_POW, a, tt_lower_splat_like(c, a, ord));
      r = tt_lower_reduce(c, p, all, false, TT_HLO_REDUCE_ADD);
      r = tt_lower_bin(c, TT_HLO_POW, r, tt_lower_splat_like(c, r, 1.0 / ord));
    }
    tt_lower_result(c, tt_hlo_convert(b, r, rt));
  }
  return NULL;
}

// --- fused Adam / AdamW ------------------------------------------------------------------
//
// _fused_adam(w)_(params[], grads[], exp_avgs[], exp_avg_sqs[], max_exp_avg_sqs[],
// state_steps[], lr, beta1, beta2, weight_decay, eps, amsgrad, maximize,
// grad_scale?, found_inf?), as PyTorch's CPU kernel computes it: the step
// counts are already incremented; grad_scale unscales the grads (written
// back); found_inf == 1 leaves everything as it was. Results follow the
// written lists: all params, then grads, exp_avgs, exp_avg_sqs and (amsgrad)
// max_exp_avg_sqs. lr (a float or a 0-d tensor), betas, weight decay and eps
// are runtime values; amsgrad and maximize shape the program.

enum { A_PARAM, A_GRAD, A_AVG, A_SQ, A_MAX, A_STEP, A_LR, A_B1, A_B2, A_WD, A_EPS,
       A_AMSGRAD, A_MAXIMIZE, A_SCALE, A_FOUND_INF };

static tt_status fused_adam(tt_lower_ctx *c, bool adamw) {
  tt_hlo *b = tt_lower_hlo(c);
  int n = list_len(c, A_PARAM);
  bool amsgrad = tt_lower_bool(c, A_AMSGRAD), maximize = tt_lower_bool(c, A_MAXIMIZE);
  static const int lists[] = {A_GRAD, A_AVG, A_SQ, A_STEP};
  TT_RETURN_IF_ERROR(same_lengths(c, lists, 4));
  if (amsgrad && list_len(c, A_MAX) != n)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "amsgrad needs %d max_exp_avg_sqs, got %d", n,
                         list_len(c, A_MAX));
  int nout = amsgrad ? 5 : 4;
  tt_hv *out = calloc((size_t)(n * nout + 1), sizeof *out);
  if (!out) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  bool scaled = !tt_lower_is_none(c, A_SCALE), skippable = !tt_lower_is_none(c, A_FOUND_INF);
  for (int j = 0; j < n; j++) {
    tt_dtype pd = tt_lower_tensor_type(c, A_PARAM, j).dtype;
    if (!tt_dtype_is_float(pd)) {
      free(out);
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "params must be floating, got %s",
                           tt_dtype_name(pd));
    }
    tt_dtype d = tt_opmath(pd);
    tt_hv p0 = tt_lower_list_tensor(c, A_PARAM, j), g0 = tt_lower_list_tensor(c, A_GRAD, j);
    tt_hv m0 = tt_lower_list_tensor(c, A_AVG, j), v0 = tt_lower_list_tensor(c, A_SQ, j);
    tt_hv p = tt_hlo_convert(b, p0, d), g = tt_hlo_convert(b, g0, d);
    tt_hv m = tt_hlo_convert(b, m0, d), v = tt_hlo_convert(b, v0, d);
    tt_hv one = tt_lower_splat_like(c, p, 1);
    tt_hv lr = tt_lower_expand_like(c, tt_lower_scalar(c, A_LR, d), p);
    tt_hv b1 = tt_lower_expand_like(c, tt_lower_scalar(c, A_B1, d), p);
    tt_hv b2 = tt_lower_expand_like(c, tt_lower_scalar(c, A_B2, d), p);
    tt_hv wd = tt_lower_expand_like(c, tt_lower_scalar(c, A_WD, d), p);
    tt_hv eps = tt_lower_expand_like(c, tt_lower_scalar(c, A_EPS, d), p);
    tt_hv step = tt_lower_expand_like(c, tt_hlo_convert(b, tt_lower_list_tensor(c, A_STEP, j), d), p);
    if (scaled) g = tt_lower_bin(c, TT_HLO_DIV, g, tt_lower_expand_like(c, tt_hlo_convert(b, tt_lower_tensor(c, A_SCALE), d), p));
    tt_hv gw = g;  // the grad as written back
    if (maximize) g = tt_hlo_unary(b, TT_HLO_NEG, g);
    if (adamw)
      p = tt_lower_bin(c, TT_HLO_MUL, p, tt_lower_bin(c, TT_HLO_SUB, one, tt_lower_bin(c, TT_HLO_MUL, lr, wd)));
    else
      g = tt_lower_bin(c, TT_HLO_ADD, g, tt_lower_bin(c, TT_HLO_MUL, p, wd));
    m = tt_lower_bin(c, TT_HLO_ADD, tt_lower_bin(c, TT_HLO_MUL, m, b1),
                     tt_lower_bin(c, TT_HLO_MUL, g, tt_lower_bin(c, TT_HLO_SUB, one, b1)));
    v = tt_lower_bin(c, TT_HLO_ADD, tt_lower_bin(c, TT_HLO_MUL, v, b2),
                     tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_MUL, g, g),
                                  tt_lower_bin(c, TT_HLO_SUB, one, b2)));
    tt_hv bc1 = tt_lower_bin(c, TT_HLO_SUB, one, tt_lower_bin(c, TT_HLO_POW, b1, step));
    tt_hv bc2 = tt_lower_bin(c, TT_HLO_SUB, one, tt_lower_bin(c, TT_HLO_POW, b2, step));
    tt_hv mx = v, mx0 = TT_HV_INVALID;
    if (amsgrad) {
      mx0 = tt_lower_list_tensor(c, A_MAX, j);
      mx = tt_lower_bin(c, TT_HLO_MAX, tt_hlo_convert(b, mx0, d), v);
    }
    tt_hv denom = tt_lower_bin(c, TT_HLO_ADD, tt_lower_bin(c, TT_HLO_DIV, tt_hlo_unary(b, TT_HLO_SQRT, mx),
                                                           tt_hlo_unary(b, TT_HLO_SQRT, bc2)), eps);
    tt_hv step_size = tt_lower_bin(c, TT_HLO_DIV, lr, bc1);
    p = tt_lower_bin(c, TT_HLO_SUB, p, tt_lower_bin(c, TT_HLO_DIV, tt_lower_bin(c, TT_HLO_MUL, step_size, m), denom));
    tt_hv newv[5] = {p, gw, m, v, mx}, oldv[5] = {p0, g0, m0, v0, mx0};
    tt_hv skip = TT_HV_INVALID;
    if (skippable) {
      tt_hv fi = tt_hlo_convert(b, tt_lower_tensor(c, A_FOUND_INF), TT_F32);
      skip = tt_lower_expand_like(c, tt_hlo_compare(b, TT_HLO_EQ, fi, tt_hlo_const(b, TT_F32, 1)), p);
    }
    for (int k = 0; k < nout; k++) {
      tt_dtype od = tt_lower_tensor_type(c, A_PARAM + k, j).dtype;
      tt_hv r = tt_hlo_convert(b, newv[k], od);
      if (skippable) r = tt_hlo_select(b, skip, oldv[k], r);
      out[k * n + j] = r;
    }
  }
  for (int i = 0; i < n * nout; i++) tt_lower_result(c, out[i]);
  free(out);
  return NULL;
}

static tt_status fused_adam_(tt_lower_ctx *c) { return fused_adam(c, false); }
static tt_status fused_adamw_(tt_lower_ctx *c) { return fused_adam(c, true); }

// --- fused SGD and Adagrad -------------------------------------------------------------------
//
// As PyTorch's CPU kernels compute them (fused=True is accepted for "tpu"):
// grad_scale unscales the grads (written back), maximize negates the step,
// weight decay adds wd * param; found_inf == 1 leaves everything as it was.
// Scalars (lr, momentum, dampening, wd, lr_decay, eps) are runtime values;
// nesterov, maximize and is_first_step shape the program.

// The fused kernels' common pieces for item j: params must be floating.
typedef struct fused_item {
  tt_dtype d;        // compute dtype
  tt_hv p0, g0;      // as given
  tt_hv p, g;        // in d; g unscaled (the grad written back: gw)
  tt_hv gw;
  tt_hv skip;        // bool like p, or TT_HV_INVALID
} fused_item;

static tt_status fused_read(tt_lower_ctx *c, int j, int scale_arg, int inf_arg, fused_item *it) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype pd = tt_lower_tensor_type(c, 0, j).dtype;
  if (!tt_dtype_is_float(pd))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "params must be floating, got %s",
                         tt_dtype_name(pd));
  it->d = tt_opmath(pd);
  it->p0 = tt_lower_list_tensor(c, 0, j);
  it->g0 = tt_lower_list_tensor(c, 1, j);
  it->p = tt_hlo_convert(b, it->p0, it->d);
  it->g = tt_hlo_convert(b, it->g0, it->d);
  if (!tt_lower_is_none(c, scale_arg))
    it->g = tt_lower_bin(c, TT_HLO_DIV, it->g, tt_lower_expand_like(c, tt_hlo_convert(b, tt_lower_tensor(c, scale_arg), it->d), it->p));
  it->gw = it->g;
  it->skip = TT_HV_INVALID;
  if (!tt_lower_is_none(c, inf_arg)) {
    tt_hv fi = tt_hlo_convert(b, tt_lower_tensor(c, inf_arg), TT_F32);
    it->skip = tt_lower_expand_like(c, tt_hlo_compare(b, TT_HLO_EQ, fi, tt_hlo_const(b, TT_F32, 1)), it->p);
  }
  return NULL;
}

// Result of written list `arg` item j: v in the item's dtype, or old where skipped.
static tt_hv fused_out(tt_lower_ctx *c, const fused_item *it, int arg, int j, tt_hv v, tt_hv old) {
  tt_hv r = tt_hlo_convert(tt_lower_hlo(c), v, tt_lower_tensor_type(c, arg, j).dtype);
  return it->skip == TT_HV_INVALID ? r : tt_hlo_select(tt_lower_hlo(c), it->skip, old, r);
}

static tt_hv scalar_like(tt_lower_ctx *c, int arg, const fused_item *it) {
  return tt_lower_expand_like(c, tt_lower_scalar(c, arg, it->d), it->p);
}

// g + wd * p, or g itself when wd (argument `arg`) is 0, as the kernels skip
// it (an inf param times 0 would make the step NaN).
static tt_hv decay(tt_lower_ctx *c, int arg, const fused_item *it, tt_hv g) {
  tt_hv wd = scalar_like(c, arg, it);
  tt_hv on = tt_hlo_compare(tt_lower_hlo(c), TT_HLO_NE, wd, tt_lower_splat_like(c, wd, 0));
  return tt_hlo_select(tt_lower_hlo(c), on, tt_lower_bin(c, TT_HLO_ADD, g, tt_lower_bin(c, TT_HLO_MUL, it->p, wd)), g);
}

// _fused_sgd_(params[], grads[], momentum_buffer_list[], weight_decay, momentum, lr,
// dampening, nesterov, maximize, is_first_step, grad_scale?, found_inf?): the
// buffer list is empty when momentum is 0. Results: params, grads, buffers.
enum { S_BUF = 2, S_WD, S_MOM, S_LR, S_DAMP, S_NESTEROV, S_MAXIMIZE, S_FIRST, S_SCALE, S_INF };

static tt_status fused_sgd_(tt_lower_ctx *c) {
  int n = list_len(c, 0), nb = list_len(c, S_BUF);
  static const int lists[] = {1};
  TT_RETURN_IF_ERROR(same_lengths(c, lists, 1));
  if (nb != 0 && nb != n)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "momentum_buffer_list must have %d tensors "
                         "or none, got %d", n, nb);
  tt_hv *out = calloc((size_t)(3 * n + 1), sizeof *out);
  if (!out) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  for (int j = 0; j < n; j++) {
    fused_item it;
    tt_status st = fused_read(c, j, S_SCALE, S_INF, &it);
    if (st) {
      free(out);
      return st;
    }
    tt_hv g = it.g;
    if (tt_lower_bool(c, S_MAXIMIZE)) g = tt_hlo_unary(tt_lower_hlo(c), TT_HLO_NEG, g);
    g = decay(c, S_WD, &it, g);
    if (nb) {
      tt_hv mom = scalar_like(c, S_MOM, &it), b0 = tt_lower_list_tensor(c, S_BUF, j), buf = g;
      if (!tt_lower_bool(c, S_FIRST)) {
        tt_hv keep = tt_lower_bin(c, TT_HLO_SUB, tt_lower_splat_like(c, g, 1), scalar_like(c, S_DAMP, &it));
        buf = tt_lower_bin(c, TT_HLO_ADD, tt_lower_bin(c, TT_HLO_MUL, tt_hlo_convert(tt_lower_hlo(c), b0, it.d), mom),
                           tt_lower_bin(c, TT_HLO_MUL, g, keep));
      }
      g = tt_lower_bool(c, S_NESTEROV) ? tt_lower_bin(c, TT_HLO_ADD, g, tt_lower_bin(c, TT_HLO_MUL, buf, mom)) : buf;
      out[2 * n + j] = fused_out(c, &it, S_BUF, j, buf, b0);
    }
    tt_hv p = tt_lower_bin(c, TT_HLO_SUB, it.p, tt_lower_bin(c, TT_HLO_MUL, g, scalar_like(c, S_LR, &it)));
    out[j] = fused_out(c, &it, 0, j, p, it.p0);
    out[n + j] = fused_out(c, &it, 1, j, it.gw, it.g0);
  }
  for (int i = 0; i < (nb ? 3 : 2) * n; i++) tt_lower_result(c, out[i]);
  free(out);
  return NULL;
}

// _fused_adagrad_(params[], grads[], state_sums[], state_steps[], lr, lr_decay,
// weight_decay, eps, maximize, grad_scale?, found_inf?): the steps are already
// incremented. Results: params, grads, state_sums, and (the plain overload,
// which marks them written) the steps unchanged.
enum { G_SUM = 2, G_STEP, G_LR, G_DECAY, G_WD, G_EPS, G_MAXIMIZE, G_SCALE, G_INF };

static tt_status fused_adagrad(tt_lower_ctx *c, bool steps_written) {
  tt_hlo *b = tt_lower_hlo(c);
  int n = list_len(c, 0);
  static const int lists[] = {1, G_SUM, G_STEP};
  TT_RETURN_IF_ERROR(same_lengths(c, lists, 3));
  int nout = steps_written ? 4 : 3;
  tt_hv *out = calloc((size_t)(nout * n + 1), sizeof *out);
  if (!out) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  for (int j = 0; j < n; j++) {
    fused_item it;
    tt_status st = fused_read(c, j, G_SCALE, G_INF, &it);
    if (st) {
      free(out);
      return st;
    }
    tt_hv g = it.g, one = tt_lower_splat_like(c, it.p, 1);
    if (tt_lower_bool(c, G_MAXIMIZE)) g = tt_hlo_unary(b, TT_HLO_NEG, g);
    g = decay(c, G_WD, &it, g);
    tt_hv s0 = tt_lower_list_tensor(c, G_SUM, j), step0 = tt_lower_list_tensor(c, G_STEP, j);
    tt_hv step = tt_lower_expand_like(c, tt_hlo_convert(b, step0, it.d), it.p);
    // clr = lr / (1 + (step - 1) * lr_decay)
    tt_hv clr = tt_lower_bin(c, TT_HLO_DIV, scalar_like(c, G_LR, &it),
                    tt_lower_bin(c, TT_HLO_ADD, one, tt_lower_bin(c, TT_HLO_MUL, tt_lower_bin(c, TT_HLO_SUB, step, one),
                                                                 scalar_like(c, G_DECAY, &it))));
    tt_hv sum = tt_lower_bin(c, TT_HLO_ADD, tt_hlo_convert(b, s0, it.d), tt_lower_bin(c, TT_HLO_MUL, g, g));
    tt_hv std = tt_lower_bin(c, TT_HLO_ADD, tt_hlo_unary(b, TT_HLO_SQRT, sum), scalar_like(c, G_EPS, &it));
    tt_hv p = tt_lower_bin(c, TT_HLO_SUB, it.p, tt_lower_bin(c, TT_HLO_DIV, tt_lower_bin(c, TT_HLO_MUL, clr, g), std));
    out[j] = fused_out(c, &it, 0, j, p, it.p0);
    out[n + j] = fused_out(c, &it, 1, j, it.gw, it.g0);
    out[2 * n + j] = fused_out(c, &it, G_SUM, j, sum, s0);
    if (steps_written) out[3 * n + j] = step0;
  }
  for (int i = 0; i < nout * n; i++) tt_lower_result(c, out[i]);
  free(out);
  return NULL;
}

static tt_status fused_adagrad_(tt_lower_ctx *c) { return fused_adagrad(c, true); }
static tt_status fused_adagrad_tensor_lr(tt_lower_ctx *c) { return fused_adagrad(c, false); }

// --- the table -------------------------------------------------------------------------------

#define RC(name, fn) {"aten::_foreach_" name, fn, TT_RULE_REPLACES_COMPOSITE}
#define BOTH(base, ov, fn) RC(base "." ov, fn), RC(base "_." ov, fn)
#define BOTH0(base, fn) RC(base, fn), RC(base "_", fn)
static const tt_rule kRules[] = {
    BOTH("add", "List", add_list), BOTH("add", "Scalar", add_scalar),
    BOTH("add", "ScalarList", add_scalarlist), BOTH("add", "Tensor", add_tensor),
    BOTH("sub", "List", sub_list), BOTH("sub", "Scalar", sub_scalar),
    BOTH("sub", "ScalarList", sub_scalarlist),
    BOTH("mul", "List", mul_list), BOTH("mul", "Scalar", mul_scalar),
    BOTH("mul", "ScalarList", mul_scalarlist), BOTH("mul", "Tensor", mul_tensor),
    BOTH("div", "List", div_list), BOTH("div", "Scalar", div_scalar),
    BOTH("div", "ScalarList", div_scalarlist), BOTH("div", "Tensor", div_tensor),
    BOTH("maximum", "List", max_list), BOTH("maximum", "Scalar", max_scalar),
    BOTH("maximum", "ScalarList", max_scalarlist),
    BOTH("minimum", "List", min_list), BOTH("minimum", "Scalar", min_scalar),
    BOTH("minimum", "ScalarList", min_scalarlist),
    BOTH("clamp_min", "List", max_list), BOTH("clamp_min", "Scalar", max_scalar),
    BOTH("clamp_min", "ScalarList", max_scalarlist),
    BOTH("clamp_max", "List", min_list), BOTH("clamp_max", "Scalar", min_scalar),
    BOTH("clamp_max", "ScalarList", min_scalarlist),
    BOTH("pow", "List", pow_list), BOTH("pow", "Scalar", pow_scalar),
    BOTH("pow", "ScalarList", pow_scalarlist),
    BOTH0("sqrt", f_sqrt), BOTH0("neg", f_neg), BOTH0("abs", f_abs), BOTH0("exp", f_exp),
    BOTH0("log", f_log), BOTH0("reciprocal", f_reciprocal), BOTH0("sigmoid", f_sigmoid),
    BOTH0("tanh", f_tanh), RC("zero_", f_zero),
    BOTH("addcmul", "Scalar", addcmul_scalar), BOTH("addcmul", "ScalarList", addcmul_scalarlist),
    BOTH("addcdiv", "Scalar", addcdiv_scalar), BOTH("addcdiv", "ScalarList", addcdiv_scalarlist),
    BOTH("lerp", "Scalar", lerp_scalar), BOTH("lerp", "List", lerp_list),
    BOTH("lerp", "ScalarList", lerp_scalarlist),
    {"aten::_foreach_norm.Scalar", f_norm,
     TT_RULE_REPLACES_COMPOSITE | TT_RULE_SCALARS_IN_SIGNATURE},
    {"aten::_fused_adam_", fused_adam_, 0}, {"aten::_fused_adam_.tensor_lr", fused_adam_, 0},
    {"aten::_fused_adamw_", fused_adamw_, 0}, {"aten::_fused_adamw_.tensor_lr", fused_adamw_, 0},
    {"aten::_fused_sgd_", fused_sgd_, 0}, {"aten::_fused_sgd_.tensor_lr", fused_sgd_, 0},
    {"aten::_fused_adagrad_", fused_adagrad_, 0},
    {"aten::_fused_adagrad_.tensor_lr", fused_adagrad_tensor_lr, 0},
};
#undef RC
#undef BOTH
#undef BOTH0

const tt_rule_table tt_rules_foreach = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
