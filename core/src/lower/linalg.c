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

// The checks below raise PyTorch's own texts in ATen's order (its meta
// functions and CPU kernels), op by op: code matching them, PyTorch's
// error_inputs among it, sees the errors the CPU gives.
#define fail(c, ...) tt_lower_fail((c), TT_INVALID_ARGUMENT, __VA_ARGS__)

static const char *tname(const tt_lower_ctx *c, int i) {
  return tt_dtype_torch_name(type_at(c, i).dtype);
}

static const char *cname(const tt_lower_ctx *c, int i) {
  return tt_dtype_cpp_name(type_at(c, i).dtype);
}

static bool same_dtype(const tt_lower_ctx *c, int i, int j) {
  return type_at(c, i).dtype == type_at(c, j).dtype;
}

static tt_status no_bool(const tt_lower_ctx *c, int i) {
  if (type_at(c, i).dtype == TT_BOOL)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "matrix product of bool tensors");
  return NULL;
}

static tt_status mm_shapes(const tt_lower_ctx *c, int i, int j) {
  tt_hlo_type a = type_at(c, i), b = type_at(c, j);
  if (a.dims[1] == b.dims[0]) return NULL;
  return fail(c, "mat1 and mat2 shapes cannot be multiplied (%" PRId64 "x%" PRId64 " and %"
              PRId64 "x%" PRId64 ")", a.dims[0], a.dims[1], b.dims[0], b.dims[1]);
}

// mm(self, mat2): ranks, shapes, dtypes.
static tt_status check_mm(const tt_lower_ctx *c) {
  if (type_at(c, 0).rank != 2) return fail(c, "self must be a matrix");
  if (type_at(c, 1).rank != 2) return fail(c, "mat2 must be a matrix");
  TT_RETURN_IF_ERROR(mm_shapes(c, 0, 1));
  if (!same_dtype(c, 0, 1))
    return fail(c, "expected m1 and m2 to have the same dtype, but got: %s != %s",
                cname(c, 0), cname(c, 1));
  return no_bool(c, 0);
}

// addmm's dtype checks (also addbmm's): self against mat2, then mat1.
static tt_status addmm_dtypes(const tt_lower_ctx *c) {
  if (!same_dtype(c, 0, 2))
    return fail(c, "self and mat2 must have the same dtype, but got %s and %s",
                tname(c, 0), tname(c, 2));
  if (!same_dtype(c, 1, 2))
    return fail(c, "mat1 and mat2 must have the same dtype, but got %s and %s",
                tname(c, 1), tname(c, 2));
  return NULL;
}

// addmm(self, mat1, mat2): dtypes, ranks, shapes.
static tt_status check_addmm(const tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(addmm_dtypes(c));
  for (int i = 1; i <= 2; i++) {
    if (type_at(c, i).rank != 2)
      return fail(c, "mat%d must be a matrix, got %d-D tensor", i, (int)type_at(c, i).rank);
  }
  TT_RETURN_IF_ERROR(mm_shapes(c, 1, 2));
  return no_bool(c, 1);
}

// bmm(batch1, batch2) (i, j) and baddbmm (self at i - 1): ranks, then
// baddbmm's dtypes, the sizes, then bmm's dtypes.
static tt_status check_bmm(const tt_lower_ctx *c, int i, int j, bool with_self) {
  if (type_at(c, i).rank != 3) return fail(c, "batch1 must be a 3D tensor");
  if (type_at(c, j).rank != 3) return fail(c, "batch2 must be a 3D tensor");
  if (with_self && !same_dtype(c, i - 1, i))
    return fail(c, "Input dtypes must be the same, got: input %s, batch1: %s, batch2: %s",
                cname(c, i - 1), cname(c, i), cname(c, j));
  tt_hlo_type a = type_at(c, i), b = type_at(c, j);
  if (b.dims[0] != a.dims[0] || b.dims[1] != a.dims[2])
    return fail(c, "Expected size for first two dimensions of batch2 tensor to be: [%" PRId64
                ", %" PRId64 "] but got: [%" PRId64 ", %" PRId64 "].", a.dims[0], a.dims[2],
                b.dims[0], b.dims[1]);
  if (!same_dtype(c, i, j))
    return fail(c, "expected scalar type %s but found %s", tname(c, i), tname(c, j));
  return no_bool(c, i);
}

// addbmm(self, batch1, batch2): ranks, sizes, then addmm's dtypes.
static tt_status check_addbmm(const tt_lower_ctx *c) {
  if (type_at(c, 1).rank != 3) return fail(c, "batch1 must be a 3D tensor");
  if (type_at(c, 2).rank != 3) return fail(c, "batch2 must be a 3D tensor");
  tt_hlo_type a = type_at(c, 1), b = type_at(c, 2);
  if (a.dims[0] != b.dims[0])
    return fail(c, "batch1 and batch2 must have same number of batches, got %" PRId64
                " and %" PRId64, a.dims[0], b.dims[0]);
  if (a.dims[2] != b.dims[1])
    return fail(c, "Incompatible matrix sizes for bmm (%" PRId64 "x%" PRId64 " and %" PRId64
                "x%" PRId64 ")", a.dims[1], a.dims[2], b.dims[1], b.dims[2]);
  TT_RETURN_IF_ERROR(addmm_dtypes(c));
  return no_bool(c, 1);
}

// addmv(self, mat, vec), also mv's route (self: its fresh result): ranks,
// sizes, dtypes.
static tt_status check_addmv(const tt_lower_ctx *c) {
  tt_hlo_type s = type_at(c, 0), m = type_at(c, 1), v = type_at(c, 2);
  if (m.rank != 2 || v.rank != 1 || s.rank > 1)
    return fail(c, "vector + matrix @ vector expected, got %d, %d, %d", (int)s.rank,
                (int)m.rank, (int)v.rank);
  int64_t sn = tt_hlo_numel(&s);
  if (m.dims[1] != v.dims[0] || (m.dims[0] != sn && sn != 1))
    return fail(c, "size mismatch, got input (%" PRId64 "), mat (%" PRId64 "x%" PRId64
                "), vec (%" PRId64 ")", s.rank ? s.dims[0] : 1, m.dims[0], m.dims[1], v.dims[0]);
  if (!same_dtype(c, 0, 1) || !same_dtype(c, 1, 2))
    return fail(c, "addmv input tensors must have the same dtype, but got %s, %s, and %s",
                tname(c, 0), tname(c, 1), tname(c, 2));
  return no_bool(c, 1);
}

// dot and vdot: ranks, dtypes, sizes.
static tt_status check_dot(const tt_lower_ctx *c) {
  tt_hlo_type a = type_at(c, 0), b = type_at(c, 1);
  if (a.rank != 1 || b.rank != 1)
    return fail(c, "1D tensors expected, but got %dD and %dD tensors", (int)a.rank, (int)b.rank);
  if (a.dtype != b.dtype)
    return fail(c, "dot : expected both vectors to have same dtype, but found %s and %s",
                tname(c, 0), tname(c, 1));
  if (a.dims[0] != b.dims[0])
    return fail(c, "inconsistent tensor size, expected tensor [%" PRId64 "] and src [%" PRId64
                "] to have the same number of elements, but got %" PRId64 " and %" PRId64
                " elements respectively", a.dims[0], b.dims[0], a.dims[0], b.dims[0]);
  return no_bool(c, 0);
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
  TT_RETURN_IF_ERROR(check_mm(c));
  return result(c, product(c, 0, 1, 1, 0, false), type_at(c, 0).dtype);
}

// bmm(self [b,n,k], mat2 [b,k,m]) -> [b,n,m]
static tt_status lower_bmm(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_bmm(c, 0, 1, false));
  return result(c, product(c, 0, 1, 2, 1, true), type_at(c, 0).dtype);
}

// mv(self [n,k], vec [k]) -> [n]
static tt_status lower_mv(tt_lower_ctx *c) {
  tt_hlo_type m = type_at(c, 0), v = type_at(c, 1);
  if (m.rank != 2 || v.rank != 1)
    return fail(c, "vector + matrix @ vector expected, got 1, %d, %d", (int)m.rank, (int)v.rank);
  if (m.dims[1] != v.dims[0])
    return fail(c, "size mismatch, got input (%" PRId64 "), mat (%" PRId64 "x%" PRId64
                "), vec (%" PRId64 ")", m.dims[0], m.dims[0], m.dims[1], v.dims[0]);
  if (!same_dtype(c, 0, 1))
    return fail(c, "addmv input tensors must have the same dtype, but got %s, %s, and %s",
                tname(c, 1), tname(c, 0), tname(c, 1));
  TT_RETURN_IF_ERROR(no_bool(c, 0));
  return result(c, product(c, 0, 1, 1, 0, false), type_at(c, 0).dtype);
}

// dot(self [k], tensor [k]) -> []
static tt_status lower_dot(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_dot(c));
  return result(c, product(c, 0, 1, 0, 0, false), type_at(c, 0).dtype);
}

// vdot(self [k], other [k]) -> []: conj(self) . other (dot for reals).
static tt_status lower_vdot(tt_lower_ctx *c) {
  if (!tt_dtype_is_complex(type_at(c, 0).dtype)) return lower_dot(c);
  TT_RETURN_IF_ERROR(check_dot(c));
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
  TT_RETURN_IF_ERROR(check_addmm(c));
  return add_scaled(c, product(c, 1, 2, 1, 0, false), type_at(c, 1).dtype);
}

// baddbmm(self, batch1 [b,n,k], batch2 [b,k,m], *, beta, alpha)
static tt_status lower_baddbmm(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_bmm(c, 1, 2, true));
  return add_scaled(c, product(c, 1, 2, 2, 1, true), type_at(c, 1).dtype);
}

// addmv(self, mat [n,k], vec [k], *, beta, alpha)
static tt_status lower_addmv(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_addmv(c));
  return add_scaled(c, product(c, 1, 2, 1, 0, false), type_at(c, 1).dtype);
}

// addbmm(self, batch1 [b,n,k], batch2 [b,k,m], *, beta, alpha): the batch
// of products summed, contracting b and k together.
static tt_status lower_addbmm(tt_lower_ctx *c) {
  TT_RETURN_IF_ERROR(check_addbmm(c));
  tt_hlo_type a = type_at(c, 1);
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
