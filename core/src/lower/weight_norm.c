// weight_norm.c — the fused weight normalisation nn.utils.weight_norm and
// its parametrization reach (torch._weight_norm over dim 0 or the last dim):
//
//   _weight_norm_interface(v, g, dim) -> (w, norms)
//       norms = ||v|| over every dim but `dim` (kept as size 1, g's shape),
//       w = v * (g / norms)
//   _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms,
//       dim) -> (grad_v, grad_g)
//       s = sum(grad_w * v) over the same dims,
//       grad_g = s / norms, grad_v = (g / norms) * (grad_w - v * s / norms^2)
//
// As PyTorch's CPU kernels: computed in the opmath dtype, norms kept in
// float32 for a bfloat16 g (g's dtype otherwise).
#include <inttypes.h>

#include "lower/lower.h"

typedef struct wn_shape {
  tt_hlo_type v;                 // v's (and w's) type
  int64_t dim;
  bool mask[TT_MAX_RANK];        // the dims reduced: all but dim
  int64_t kept[TT_MAX_RANK];     // v's dims with the reduced ones 1: norms' shape
} wn_shape;

// PyTorch's checks for v (argument vi), g (gi) and dim (di).
static tt_status wn_read(tt_lower_ctx *c, int vi, int gi, int di, wn_shape *s) {
  s->v = tt_lower_tensor_type(c, vi, -1);
  tt_hlo_type g = tt_lower_tensor_type(c, gi, -1);
  s->dim = tt_lower_int(c, di);
  int r = s->v.rank;
  if (r < 1 || !tt_dtype_is_float(s->v.dtype) || !tt_dtype_is_float(g.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected floating v and g with v of at "
                         "least 1 dim, got %dD %s and %s", r, tt_dtype_name(s->v.dtype),
                         tt_dtype_name(g.dtype));
  if (s->dim != 0 && s->dim != r - 1)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "fused kernels can only be applied for "
                         "first or last dim");
  for (int d = 0; d < r; d++) {
    s->mask[d] = d != s->dim;
    s->kept[d] = d == s->dim ? s->v.dims[d] : 1;
  }
  if (tt_hlo_numel(&g) != s->v.dims[s->dim])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "g must have %" PRId64 " elements (v's "
                         "size at dim %" PRId64 "), got %" PRId64, s->v.dims[s->dim], s->dim,
                         tt_hlo_numel(&g));
  return NULL;
}

// Argument i in dtype d, shaped like the norms.
static tt_hv kept_arg(tt_lower_ctx *c, int i, const wn_shape *s, tt_dtype d) {
  tt_hv x = tt_lower_convert(c, tt_lower_tensor(c, i), d);
  return tt_hlo_reshape(tt_lower_hlo(c), x, s->v.rank, s->kept);
}

static tt_dtype norms_dtype(tt_dtype g) { return g == TT_BF16 ? TT_F32 : g; }

static tt_status weight_norm(tt_lower_ctx *c) {
  wn_shape s;
  TT_RETURN_IF_ERROR(wn_read(c, 0, 1, 2, &s));
  tt_dtype acc = tt_opmath(s.v.dtype);
  tt_hv v = tt_lower_convert(c, tt_lower_tensor(c, 0), acc);
  tt_hv sq = tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_MUL, v, v), s.mask, true, TT_HLO_REDUCE_ADD);
  tt_hv norms = tt_hlo_unary(tt_lower_hlo(c), TT_HLO_SQRT, sq);
  tt_hv scale = tt_lower_bin(c, TT_HLO_DIV, kept_arg(c, 1, &s, acc), norms);
  tt_hv w = tt_lower_bin(c, TT_HLO_MUL, v, tt_lower_expand_like(c, scale, v));
  tt_lower_result(c, tt_lower_convert(c, w, s.v.dtype));
  tt_dtype gd = tt_lower_tensor_type(c, 1, -1).dtype;
  tt_lower_result(c, tt_lower_convert(c, norms, norms_dtype(gd)));
  return NULL;
}

// grad_w, saved_v, saved_g, saved_norms, dim
static tt_status weight_norm_backward(tt_lower_ctx *c) {
  wn_shape s;
  TT_RETURN_IF_ERROR(wn_read(c, 1, 2, 4, &s));
  tt_hlo_type gw = tt_lower_tensor_type(c, 0, -1);
  if (gw.rank != s.v.rank || tt_hlo_numel(&gw) != tt_hlo_numel(&s.v))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grad_w must have saved_v's shape");
  tt_dtype acc = tt_opmath(s.v.dtype);
  tt_hv v = tt_lower_convert(c, tt_lower_tensor(c, 1), acc);
  tt_hv grad = tt_lower_convert(c, tt_lower_tensor(c, 0), acc);
  tt_hv n = kept_arg(c, 3, &s, acc), g = kept_arg(c, 2, &s, acc);
  tt_hv dot = tt_lower_reduce(c, tt_lower_bin(c, TT_HLO_MUL, grad, v), s.mask, true, TT_HLO_REDUCE_ADD);
  tt_hv grad_g = tt_lower_bin(c, TT_HLO_DIV, dot, n);
  tt_hv per = tt_lower_bin(c, TT_HLO_DIV, dot, tt_lower_bin(c, TT_HLO_MUL, n, n));
  tt_hv inner = tt_lower_bin(c, TT_HLO_SUB, grad,
                             tt_lower_bin(c, TT_HLO_MUL, v, tt_lower_expand_like(c, per, v)));
  tt_hv grad_v = tt_lower_bin(c, TT_HLO_MUL, tt_lower_expand_like(c, tt_lower_bin(c, TT_HLO_DIV, g, n), v), inner);
  tt_lower_result(c, tt_lower_convert(c, grad_v, s.v.dtype));
  tt_hlo_type gt = tt_lower_tensor_type(c, 2, -1);
  tt_hv gg = tt_hlo_reshape(tt_lower_hlo(c), grad_g, gt.rank, gt.dims);
  tt_lower_result(c, tt_lower_convert(c, gg, gt.dtype));
  return NULL;
}

static const tt_rule kRules[] = {
    {"aten::_weight_norm_interface", weight_norm, 0},
    {"aten::_weight_norm_interface_backward", weight_norm_backward, 0},
};

const tt_rule_table tt_rules_weight_norm = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
