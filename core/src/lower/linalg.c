// linalg.c — matrix products: mm, bmm, mv, dot/vdot, and the fused forms
// addmm, addmv, addr, addbmm and baddbmm (beta * self + alpha * product,
// with PyTorch's rule that beta == 0 ignores self, NaN included).
//
// 16-bit float products accumulate in float32 (preferred element type) and
// are rounded once, like PyTorch's CPU and CUDA kernels.
//
// Complex products are plain dot_general (no conjugation but vdot's); lazy
// conj views arrive resolved (the shim materialises them).
//
// Leaves out: matmul, linear, einsum (PyTorch decomposes them into these),
// integer overflow behaviour of int matmuls.
#include <inttypes.h>
#include <stdio.h>

#include "lower/lower.h"

// --- helpers ------------------------------------------------------------------------------

static tt_hlo_type type_at(const tt_lower_ctx *c, int i) {
  return tt_lower_tensor_type(c, i, -1);
}

static tt_dtype acc_dtype(tt_dtype d) {
  return (d == TT_F16 || d == TT_BF16) ? TT_F32 : d;
}

// Checks ranks and dtypes of the two operands (args i and j).
static tt_status check_operands(const tt_lower_ctx *c, int i, int j, int ri, int rj) {
  tt_hlo_type a = type_at(c, i), b = type_at(c, j);
  if (a.rank != ri || b.rank != rj)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected %dD and %dD tensors, but got "
                         "%dD and %dD", ri, rj, (int)a.rank, (int)b.rank);
  if (a.dtype != b.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected m1 and m2 to have the same "
                         "dtype, but got: %s != %s", tt_dtype_cpp_name(a.dtype),
                         tt_dtype_cpp_name(b.dtype));
  if (a.dtype == TT_BOOL)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "matrix product of bool tensors");
  return NULL;
}

static tt_status shape_error(const tt_lower_ctx *c, int i, int j) {
  tt_hlo_type a = type_at(c, i), b = type_at(c, j);
  char s1[96], s2[96];
  if (a.rank == 2 && b.rank == 2)  // mm, addmm: PyTorch's text
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "mat1 and mat2 shapes cannot be multiplied "
                         "(%lldx%lld and %lldx%lld)", (long long)a.dims[0], (long long)a.dims[1],
                         (long long)b.dims[0], (long long)b.dims[1]);
  return tt_lower_fail(c, TT_INVALID_ARGUMENT, "shapes %s and %s cannot be multiplied",
                       tt_shape_str(&a, s1, sizeof s1), tt_shape_str(&b, s2, sizeof s2));
}

// Contracts x's dim cx with y's dim cy (batch dims 0 when `batched`), in
// the accumulation dtype; the caller rounds.
static tt_hv product(tt_lower_ctx *c, int i, int j, int64_t cx, int64_t cy, bool batched) {
  tt_hv x = tt_lower_tensor(c, i), y = tt_lower_tensor(c, j);
  tt_dtype d = type_at(c, i).dtype;
  static const int64_t zero = 0;
  return tt_hlo_dot_general(tt_lower_hlo(c), x, y, &zero, &zero, batched ? 1 : 0,
                            &cx, &cy, 1, acc_dtype(d));
}

static tt_status result(tt_lower_ctx *c, tt_hv v, tt_dtype d) {
  tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), v, d));
  return NULL;
}

// --- products ------------------------------------------------------------------------------

// mm(self [n,k], mat2 [k,m]) -> [n,m]
static tt_status lower_mm(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_operands(c, 0, 1, 2, 2));
  if (type_at(c, 0).dims[1] != type_at(c, 1).dims[0]) return shape_error(c, 0, 1);
  return result(c, product(c, 0, 1, 1, 0, false), type_at(c, 0).dtype);
}

// bmm(self [b,n,k], mat2 [b,k,m]) -> [b,n,m]
static tt_status lower_bmm(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_operands(c, 0, 1, 3, 3));
  tt_hlo_type a = type_at(c, 0), b = type_at(c, 1);
  if (a.dims[0] != b.dims[0] || a.dims[2] != b.dims[1]) return shape_error(c, 0, 1);
  return result(c, product(c, 0, 1, 2, 1, true), a.dtype);
}

// mv(self [n,k], vec [k]) -> [n]
static tt_status lower_mv(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_operands(c, 0, 1, 2, 1));
  if (type_at(c, 0).dims[1] != type_at(c, 1).dims[0]) return shape_error(c, 0, 1);
  return result(c, product(c, 0, 1, 1, 0, false), type_at(c, 0).dtype);
}

// dot(self [k], tensor [k]) -> []
static tt_status lower_dot(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_operands(c, 0, 1, 1, 1));
  if (type_at(c, 0).dims[0] != type_at(c, 1).dims[0])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "inconsistent tensor size, expected "
                         "tensor [%" PRId64 "] and src [%" PRId64 "] to have the same "
                         "number of elements, but got %" PRId64 " and %" PRId64 " elements "
                         "respectively", type_at(c, 0).dims[0], type_at(c, 1).dims[0],
                         type_at(c, 0).dims[0], type_at(c, 1).dims[0]);
  return result(c, product(c, 0, 1, 0, 0, false), type_at(c, 0).dtype);
}

// vdot(self [k], other [k]) -> []: conj(self) . other (dot for reals).
static tt_status lower_vdot(tt_lower_ctx *c) {
  if (!tt_dtype_is_complex(type_at(c, 0).dtype)) return lower_dot(c);
  TT_RETURN_IF_ERROR(check_operands(c, 0, 1, 1, 1));
  if (type_at(c, 0).dims[0] != type_at(c, 1).dims[0]) return lower_dot(c);  // its message
  static const int64_t zero = 0;
  tt_hv x = tt_lower_conj(c, tt_lower_tensor(c, 0)), y = tt_lower_tensor(c, 1);
  tt_dtype d = type_at(c, 0).dtype;
  return result(c, tt_hlo_dot_general(tt_lower_hlo(c), x, y, NULL, NULL, 0, &zero, &zero, 1, d), d);
}

// --- addmm, baddbmm ------------------------------------------------------------------------------

// beta * self + alpha * p, where p is the product (accumulation dtype) and
// self (arg 0) broadcasts to p's shape; beta (arg 3) == 0 drops self.
static tt_status add_scaled(tt_lower_ctx *c, tt_hv p, tt_dtype d) {
  tt_hlo *b = tt_lower_hlo(c);
  const tt_hlo_type *pt = tt_hlo_type_of(b, p);
  if (!pt) return NULL;
  tt_hlo_type t = *pt;
  tt_hv self = tt_hlo_convert(b, tt_lower_tensor(c, 0), t.dtype);
  tt_hlo_type st = type_at(c, 0);
  for (int i = 0; i < st.rank; i++) {
    int j = t.rank - st.rank + i;
    if (st.rank > t.rank || (st.dims[i] != 1 && st.dims[i] != t.dims[j])) {
      char s1[96], s2[96];
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "self of shape %s doesn't broadcast "
                           "to the product's shape %s", tt_shape_str(&st, s1, sizeof s1),
                           tt_shape_str(&t, s2, sizeof s2));
    }
  }
  self = tt_lower_broadcast_to(c, self, t.rank, t.dims);
  tt_hv beta = tt_lower_is_none(c, 3) ? tt_hlo_const(b, t.dtype, 1) : tt_lower_scalar(c, 3, t.dtype);
  tt_hv alpha = tt_lower_is_none(c, 4) ? tt_hlo_const(b, t.dtype, 1) : tt_lower_scalar(c, 4, t.dtype);
  tt_hv zero = tt_hlo_const(b, t.dtype, 0);
  tt_hv bs = tt_hlo_binary(b, TT_HLO_MUL, self, tt_lower_broadcast_to(c, beta, t.rank, t.dims));
  tt_hv beta0 = tt_lower_broadcast_to(c, tt_hlo_compare(b, TT_HLO_EQ, beta, zero), t.rank, t.dims);
  bs = tt_hlo_select(b, beta0, tt_lower_broadcast_to(c, zero, t.rank, t.dims), bs);
  tt_hv ap = tt_hlo_binary(b, TT_HLO_MUL, p, tt_lower_broadcast_to(c, alpha, t.rank, t.dims));
  return result(c, tt_hlo_binary(b, TT_HLO_ADD, bs, ap), d);
}

// addmm(self, mat1 [n,k], mat2 [k,m], *, beta, alpha)
static tt_status lower_addmm(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_operands(c, 1, 2, 2, 2));
  if (type_at(c, 1).dims[1] != type_at(c, 2).dims[0]) return shape_error(c, 1, 2);
  if (type_at(c, 0).dtype != type_at(c, 1).dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "self and mat2 must have the same dtype");
  return add_scaled(c, product(c, 1, 2, 1, 0, false), type_at(c, 1).dtype);
}

// baddbmm(self, batch1 [b,n,k], batch2 [b,k,m], *, beta, alpha)
static tt_status lower_baddbmm(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_operands(c, 1, 2, 3, 3));
  tt_hlo_type a = type_at(c, 1), b = type_at(c, 2);
  if (a.dims[0] != b.dims[0] || a.dims[2] != b.dims[1]) return shape_error(c, 1, 2);
  if (type_at(c, 0).dtype != a.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "self and batch1 must have the same dtype");
  return add_scaled(c, product(c, 1, 2, 2, 1, true), a.dtype);
}

// addmv(self, mat [n,k], vec [k], *, beta, alpha)
static tt_status lower_addmv(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_operands(c, 1, 2, 2, 1));
  if (type_at(c, 1).dims[1] != type_at(c, 2).dims[0]) return shape_error(c, 1, 2);
  tt_dtype ds = type_at(c, 0).dtype, dm = type_at(c, 1).dtype, dv = type_at(c, 2).dtype;
  if (ds != dm || dm != dv)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "addmv input tensors must have the same dtype, "
                         "but got %s, %s, and %s", tt_dtype_torch_name(ds),
                         tt_dtype_torch_name(dm), tt_dtype_torch_name(dv));
  return add_scaled(c, product(c, 1, 2, 1, 0, false), type_at(c, 1).dtype);
}

// addbmm(self, batch1 [b,n,k], batch2 [b,k,m], *, beta, alpha): the batch
// of products summed, contracting b and k together.
static tt_status lower_addbmm(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_operands(c, 1, 2, 3, 3));
  tt_hlo_type a = type_at(c, 1), b = type_at(c, 2);
  if (a.dims[0] != b.dims[0] || a.dims[2] != b.dims[1]) return shape_error(c, 1, 2);
  if (type_at(c, 0).dtype != a.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "self and batch1 must have the same dtype");
  static const int64_t cx[2] = {0, 2}, cy[2] = {0, 1};
  tt_hv p = tt_hlo_dot_general(tt_lower_hlo(c), tt_lower_tensor(c, 1), tt_lower_tensor(c, 2),
                               NULL, NULL, 0, cx, cy, 2, acc_dtype(a.dtype));
  return add_scaled(c, p, a.dtype);
}

// addr(self, vec1 [n], vec2 [m], *, beta, alpha): the outer product.
static tt_status lower_addr(tt_lower_ctx *c) {
  tt_hlo_type a = type_at(c, 1), b = type_at(c, 2);
  if (a.rank != 1 || b.rank != 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "addr: Expected 1-D arguments vec1 and "
                         "vec2, but got %dD and %dD", (int)a.rank, (int)b.rank);
  if (a.dtype != b.dtype || type_at(c, 0).dtype != a.dtype || a.dtype == TT_BOOL)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "addr with mixed or bool dtypes");
  static const char *const kNames[2] = {"beta", "alpha"};  // ATen's addr kernel checks
  for (int i = 3; i <= 4; i++) {
    const tt_value *v = tt_lower_arg(c, i);
    if (v->kind == TT_VALUE_SCALAR && v->u.scalar.dtype == TT_BOOL)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Boolean %s only supported for Boolean "
                           "results.", kNames[i - 3]);
  }
  tt_hv p = tt_hlo_dot_general(tt_lower_hlo(c), tt_lower_tensor(c, 1), tt_lower_tensor(c, 2),
                               NULL, NULL, 0, NULL, NULL, 0, acc_dtype(a.dtype));
  return add_scaled(c, p, a.dtype);
}

// --- the table ------------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, TT_RULE_COMPLEX}  // all: dot_general takes complex
static const tt_rule kRules[] = {
    R("mm", lower_mm), R("mm.out", lower_mm),
    R("bmm", lower_bmm), R("bmm.out", lower_bmm),
    R("mv", lower_mv), R("mv.out", lower_mv),
    R("dot", lower_dot), R("dot.out", lower_dot),
    R("vdot", lower_vdot), R("vdot.out", lower_vdot),
    R("addmv", lower_addmv), R("addmv_", lower_addmv), R("addmv.out", lower_addmv),
    R("addbmm", lower_addbmm), R("addbmm_", lower_addbmm), R("addbmm.out", lower_addbmm),
    // addr's composite kernel (mul, add) skips ATen's checks of bool beta/alpha
    {"aten::addr", lower_addr, TT_RULE_COMPLEX | TT_RULE_REPLACES_COMPOSITE},
    {"aten::addr_", lower_addr, TT_RULE_COMPLEX | TT_RULE_REPLACES_COMPOSITE},
    R("addr.out", lower_addr),
    R("addmm", lower_addmm), R("addmm_", lower_addmm), R("addmm.out", lower_addmm),
    R("baddbmm", lower_baddbmm), R("baddbmm_", lower_baddbmm), R("baddbmm.out", lower_baddbmm),
};
#undef R

const tt_rule_table tt_rules_linalg = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
