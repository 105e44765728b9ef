// transformer.c — the ops of PyTorch's transformer inference fast paths that
// are not compositions: _transform_bias_rescale_qkv, _masked_softmax and
// _addmm_activation (linear + relu/gelu, the feed-forward of nested layers).
//
// nn.MultiheadAttention and nn.TransformerEncoderLayer in eval mode call
// _native_multi_head_attention / _transformer_encoder_layer_fwd, whose
// kernels are compositions of ATen ops that the shim runs as they are on
// tpu (shim/nested.cpp); these two are the pieces of them PyTorch implements
// with hand-written CPU loops. Semantics are the CPU kernels':
//   _transform_bias_rescale_qkv(qkv [B, T, 3D], bias [3D], H) -> q, k, v,
//     each [B, H, T, D/H]: q = (q + bq) * (1 / sqrt(D/H)), k + bk, v + bv,
//     in the opmath dtype, rounded once.
//   _masked_softmax(x, mask, dim?, mask_type?): softmax over `dim` of the
//     elements where mask is false; mask_type 0 is an [L, L] attention mask
//     and 1 a [B, L] padding mask for a 4-d x (both along the last dim), 2 a
//     mask of x's shape. A row with every element masked gives NaN, as on
//     the CPU.
//   _addmm_activation(self, mat1, mat2, beta, alpha, use_gelu): addmm
//     (rounded to the dtype), then relu or gelu (erf).
// Leaves out: integer dtypes and shapes the CPU kernels would read out of
// bounds with (TT_UNIMPLEMENTED: the CPU fallback gives PyTorch's own
// behaviour), the backward of _masked_softmax.
#include <math.h>

#include "lower/lower.h"

// --- _transform_bias_rescale_qkv ----------------------------------------------------------------

// Part k (0: q, 1: k, 2: v) of x [B, T, 3, H, Dh] as [B, H, T, Dh].
static tt_hv qkv_part(tt_lower_ctx *c, tt_hv x, int64_t k) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_type(c, x);
  int64_t start[5] = {0, 0, k, 0, 0}, step[5] = {1, 1, 1, 1, 1};
  int64_t limit[5] = {t.dims[0], t.dims[1], k + 1, t.dims[3], t.dims[4]};
  int64_t dims[4] = {t.dims[0], t.dims[1], t.dims[3], t.dims[4]};
  static const int64_t perm[4] = {0, 2, 1, 3};
  tt_hv part = tt_hlo_reshape(b, tt_hlo_slice(b, x, start, limit, step), 4, dims);
  return tt_hlo_transpose(b, part, perm);
}

static tt_status lower_transform_bias_rescale_qkv(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1), bt = tt_lower_tensor_type(c, 1, -1);
  int64_t heads = tt_lower_int(c, 2);
  if (t.rank != 3 || !tt_dtype_is_float(t.dtype) || bt.dtype != t.dtype || heads <= 0)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "qkv of rank %d, dtype %s, %lld heads",
                         t.rank, tt_dtype_name(t.dtype), (long long)heads);
  int64_t d = t.dims[2] / 3;
  // PyTorch's checks, in its order (TORCH_CHECK without a message).
  if (d % heads != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected D %% num_head == 0 to be true, "
                         "but got false.");
  if (t.dims[2] % 3 != 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected _3D %% 3 == 0 to be true, "
                         "but got false.");
  if (bt.rank != 1 || bt.dims[0] != t.dims[2])
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "qkv_bias is not [3D]");
  int64_t dh = d / heads;
  tt_dtype m = tt_opmath(t.dtype);
  int64_t dims[5] = {t.dims[0], t.dims[1], 3, heads, dh}, bdims[3] = {2, 3, 4};
  tt_hv x = tt_hlo_reshape(b, tt_lower_convert(c, tt_lower_tensor(c, 0), m), 5, dims);
  tt_hv bias = tt_hlo_reshape(b, tt_lower_convert(c, tt_lower_tensor(c, 1), m), 3, dims + 2);
  x = tt_lower_bin(c, TT_HLO_ADD, x, tt_hlo_broadcast_in_dim(b, bias, 5, dims, bdims));
  // The CPU kernel's scale: 1.0 / sqrt(Dh), the root taken in the opmath type.
  double s = m == TT_F64 ? 1.0 / sqrt((double)dh) : (double)(float)(1.0 / sqrtf((float)dh));
  tt_hv q = qkv_part(c, x, 0);
  q = tt_lower_bin(c, TT_HLO_MUL, q, tt_lower_splat_like(c, q, s));
  tt_lower_result(c, tt_lower_convert(c, q, t.dtype));
  tt_lower_result(c, tt_lower_convert(c, qkv_part(c, x, 1), t.dtype));
  tt_lower_result(c, tt_lower_convert(c, qkv_part(c, x, 2), t.dtype));
  return NULL;
}

// --- _masked_softmax ---------------------------------------------------------------------------

static bool same_shape(const tt_hlo_type *a, const tt_hlo_type *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

// masked_softmax_cpu's checks of the mask's shape for `type` (0, 1, 2, or
// -1 for None), which a 2-d mask with a 4-d x keeps and anything else turns
// into 2; *type gets the type the kernel goes on with.
static tt_status check_mask(tt_lower_ctx *c, const tt_hlo_type *x, int64_t *type) {
  tt_hlo_type m = tt_lower_tensor_type(c, 1, -1);
  if (m.rank != 2 || x->rank != 4) *type = 2;
  if (*type == 2 && !same_shape(x, &m))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                         "For mask_type == 2 mask shape should match input shape");
  if (*type == 1 && (x->dims[0] != m.dims[0] || x->dims[2] != m.dims[1]))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "For mask_type == 1 mask shape should be (B, L)");
  if (*type == 0 && (x->dims[2] != m.dims[0] || x->dims[2] != m.dims[1]))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "For mask_type == 0 mask shape should be (L, L)");
  return NULL;
}

// The mask as a bool value of x's shape (after check_mask and the dim).
static tt_status full_mask(tt_lower_ctx *c, const tt_hlo_type *x, int64_t type, tt_hv *out) {
  if (type < 0)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Mask Type should be defined");
  if (type > 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Mask Type should be 0 (src_mask) or 1 "
                         "(src_key_padding_mask), or 2 (default_mask)");
  *out = tt_lower_tensor(c, 1);
  if (type == 2) return NULL;
  // Both index the last dim with their second one, of which the CPU reads
  // L = x.size(2) elements: a last dim of another size reads past them.
  tt_hlo_type m = tt_lower_tensor_type(c, 1, -1);
  if (x->dims[3] != m.dims[1])
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "a mask of %lld columns for a last dim of %lld",
                         (long long)m.dims[1], (long long)x->dims[3]);
  int64_t bdims[2] = {type == 1 ? 0 : 2, 3};
  *out = tt_hlo_broadcast_in_dim(tt_lower_hlo(c), *out, 4, x->dims, bdims);
  return NULL;
}

static tt_status lower_masked_softmax(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type x = tt_lower_tensor_type(c, 0, -1);
  if (tt_lower_tensor_type(c, 1, -1).dtype != TT_BOOL)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Mask should be a boolean tensor");
  int64_t type = tt_lower_is_none(c, 3) ? -1 : tt_lower_int(c, 3);
  TT_RETURN_IF_ERROR(check_mask(c, &x, &type));
  int64_t dim = 0;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, tt_lower_is_none(c, 2) ? x.rank - 1 : tt_lower_int(c, 2),
                                  x.rank, &dim));
  if (!tt_dtype_is_float(x.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "masked_softmax of %s", tt_dtype_name(x.dtype));
  tt_hv mask = TT_HV_INVALID;
  TT_RETURN_IF_ERROR(full_mask(c, &x, type, &mask));
  if (x.rank == 0) {  // a single element: 1, or NaN when masked
    tt_hv one = tt_hlo_splat(b, &x, 1.0), nan = tt_hlo_splat(b, &x, NAN);
    tt_lower_result(c, tt_hlo_select(b, mask, nan, one));
    return NULL;
  }
  bool dims[TT_MAX_RANK] = {false};
  dims[dim] = true;
  tt_dtype m = tt_opmath(x.dtype);
  tt_hv v = tt_lower_convert(c, tt_lower_tensor(c, 0), m);
  tt_hv lowest = tt_lower_splat_like(c, v, -INFINITY), zero = tt_lower_splat_like(c, v, 0);
  tt_hv mx = tt_lower_reduce(c, tt_hlo_select(b, mask, lowest, v), dims, true, TT_HLO_REDUCE_MAX);
  tt_hv e = tt_hlo_unary(b, TT_HLO_EXP, tt_lower_bin(c, TT_HLO_SUB, v, tt_lower_expand_like(c, mx, v)));
  e = tt_hlo_select(b, mask, zero, e);
  // 1 / sum, then a product, as the CPU kernel does; a sum of 0 (every
  // element masked) gives 0 * inf = NaN there too.
  tt_hv sum = tt_lower_reduce(c, e, dims, true, TT_HLO_REDUCE_ADD);
  tt_hv inv = tt_lower_bin(c, TT_HLO_DIV, tt_lower_splat_like(c, sum, 1), sum);
  tt_hv out = tt_lower_bin(c, TT_HLO_MUL, e, tt_lower_expand_like(c, inv, e));
  tt_lower_result(c, tt_lower_convert(c, out, x.dtype));
  return NULL;
}

// --- _addmm_activation -------------------------------------------------------------------------

// _addmm_activation(self, mat1 [n, k], mat2 [k, m], *, beta, alpha, use_gelu):
// the feed-forward block's linear + activation (nested encoder layers call
// it): addmm rounded to the dtype, as the CPU kernel writes it, then relu
// or gelu (erf) in place, in the opmath dtype.
static tt_status lower_addmm_activation(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type s = tt_lower_tensor_type(c, 0, -1), m1 = tt_lower_tensor_type(c, 1, -1);
  tt_hlo_type m2 = tt_lower_tensor_type(c, 2, -1);
  tt_dtype d = m1.dtype;
  if (m1.rank != 2 || m2.rank != 2 || m2.dtype != d || s.dtype != d || !tt_dtype_is_float(d) ||
      s.rank > 2)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "_addmm_activation of these ranks or dtypes");
  if (m1.dims[1] != m2.dims[0])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "mat1 and mat2 shapes cannot be multiplied "
                         "(%lldx%lld and %lldx%lld)", (long long)m1.dims[0],
                         (long long)m1.dims[1], (long long)m2.dims[0], (long long)m2.dims[1]);
  int64_t dims[2] = {m1.dims[0], m2.dims[1]};
  for (int i = 0; i < s.rank; i++) {
    int64_t want = dims[2 - s.rank + i];
    if (s.dims[i] != 1 && s.dims[i] != want)
      return tt_lower_fail(c, TT_UNIMPLEMENTED, "self does not broadcast to the product");
  }
  tt_dtype acc = tt_opmath(d);
  static const int64_t cx = 1, cy = 0;
  tt_hv p = tt_hlo_dot_general(b, tt_lower_tensor(c, 1), tt_lower_tensor(c, 2), NULL, NULL, 0,
                               &cx, &cy, 1, acc);
  tt_hv self = tt_lower_broadcast_to(c, tt_lower_convert(c, tt_lower_tensor(c, 0), acc), 2, dims);
  tt_hv beta = tt_lower_is_none(c, 3) ? tt_hlo_const(b, acc, 1) : tt_lower_scalar(c, 3, acc);
  tt_hv alpha = tt_lower_is_none(c, 4) ? tt_hlo_const(b, acc, 1) : tt_lower_scalar(c, 4, acc);
  tt_hv zero = tt_lower_splat_like(c, p, 0);
  // beta == 0 ignores self, NaN and inf included (addmm's rule).
  tt_hv bs = tt_lower_bin(c, TT_HLO_MUL, self, tt_lower_broadcast_to(c, beta, 2, dims));
  tt_hv beta0 = tt_lower_broadcast_to(c, tt_hlo_compare(b, TT_HLO_EQ, beta, tt_hlo_const(b, acc, 0)),
                                      2, dims);
  bs = tt_hlo_select(b, beta0, zero, bs);
  tt_hv r = tt_lower_bin(c, TT_HLO_ADD, bs,
                         tt_lower_bin(c, TT_HLO_MUL, p, tt_lower_broadcast_to(c, alpha, 2, dims)));
  r = tt_lower_convert(c, tt_lower_convert(c, r, d), acc);
  if (tt_lower_bool(c, 5)) {  // gelu: x * (1 + erf(x / sqrt(2))) / 2
    tt_hv e = tt_hlo_erf(b, tt_lower_bin(c, TT_HLO_MUL, r, tt_lower_splat_like(c, r, 0.70710678118654752440)));
    tt_hv half = tt_lower_bin(c, TT_HLO_MUL, r, tt_lower_splat_like(c, r, 0.5));
    r = tt_lower_bin(c, TT_HLO_MUL, half, tt_lower_bin(c, TT_HLO_ADD, tt_lower_splat_like(c, r, 1), e));
  } else {  // relu, NaN kept
    r = tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_LT, r, zero), zero, r);
  }
  tt_lower_result(c, tt_lower_convert(c, r, d));
  return NULL;
}

// --- the table ----------------------------------------------------------------------------------

static const tt_rule kRules[] = {
    {"aten::_transform_bias_rescale_qkv", lower_transform_bias_rescale_qkv, 0},
    {"aten::_masked_softmax", lower_masked_softmax, 0},
    {"aten::_addmm_activation", lower_addmm_activation, 0},
    {"aten::_addmm_activation.out", lower_addmm_activation, 0},
};

const tt_rule_table tt_rules_transformer = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
