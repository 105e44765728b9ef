// attention.c — scaled dot-product attention as one program each way:
// _scaled_dot_product_flash_attention_for_cpu (output and logsumexp) and its
// backward, plus _safe_softmax (the math path's softmax, whose fully masked
// rows give 0 instead of NaN).
//
// F.scaled_dot_product_attention asks a per-device stub which backend to run;
// the shim's stub for "tpu" picks the CPU flash op whenever it fits (no
// dropout, a mask that needs no gradient), so SDPA reaches these rules as
// two ops (forward, backward) instead of the math path's dozen. The shapes
// are PyTorch's: query [..., Hq, L, E], key [..., Hk, S, E], value
// [..., Hk, S, Ev], attn_mask broadcastable to [..., Hq, L, S] (bool: True
// takes part; float: added to the scores). Grouped-query attention (Hq a
// multiple of Hk, query head h reading key/value head h / (Hq / Hk), as
// enable_gqa's repeat_interleave does) needs no copies: the query heads of
// one group are folded into the rows, [N, Hk, G * L, E]. is_causal keeps
// key s for query l when s <= l (top-left aligned, like tril).
//
// Math in the opmath dtype (float32 for 16-bit floats). The backward
// recomputes the probabilities from logsumexp (P = exp(S - lse)) and uses
// D = rowsum(dO * O). A fully masked row gives output 0 and logsumexp 0, as
// PyTorch's CPU kernel does.
//
// Leaves out: dropout inside the fused op (the stub sends dropout_p > 0 to
// the math path, whose dropout lowers natively; the rules treat dropout_p as
// 0), a gradient for attn_mask (same), nested tensors.
#include <math.h>
#include <stdio.h>

#include "lower/lower.h"

// --- helpers --------------------------------------------------------------------------------

static tt_hv reduce_last(tt_lower_ctx *c, tt_hv v, tt_hlo_reduce_kind kind) {
  bool mask[TT_MAX_RANK] = {false};
  int rank = tt_lower_type(c, v).rank;
  if (rank < 1) return v;  // an invalid value: the builder holds its error
  mask[rank - 1] = true;
  return tt_lower_reduce(c, v, mask, true, kind);
}

// A batched matmul over dims 0 and 1 of two rank-4 values, contracting dim
// cx of x with dim cy of y.
static tt_hv bmm(tt_lower_ctx *c, tt_hv x, tt_hv y, int64_t cx, int64_t cy) {
  static const int64_t batch[2] = {0, 1};
  return tt_hlo_dot_general(tt_lower_hlo(c), x, y, batch, batch, 2, &cx, &cy, 1,
                            tt_lower_type(c, x).dtype);
}

// --- shapes ---------------------------------------------------------------------------------

// The problem's sizes: q [N, Hk * G, L, E], k [N, Hk, S, E], v [N, Hk, S, Ev],
// with N the product of the batch dims (those before the head dim).
typedef struct att_shape {
  tt_hlo_type q, k, v;  // the arguments' own types
  int64_t n, hk, g, l, s, e, ev;
  tt_dtype acc;
} att_shape;

// Splits t ([..., H, R, C], rank >= 2) into n, h, r, c.
static void split(const tt_hlo_type *t, int64_t *n, int64_t *h, int64_t *r, int64_t *col) {
  int k = t->rank;
  *n = 1;
  for (int d = 0; d < k - 3; d++) *n *= t->dims[d];
  *h = k >= 3 ? t->dims[k - 3] : 1;
  *r = t->dims[k - 2];
  *col = t->dims[k - 1];
}

static tt_status read_shape(tt_lower_ctx *c, int qi, int ki, int vi, att_shape *a) {
  a->q = tt_lower_tensor_type(c, qi, -1);
  a->k = tt_lower_tensor_type(c, ki, -1);
  a->v = tt_lower_tensor_type(c, vi, -1);
  char s1[96], s2[96], s3[96];
  if (!tt_dtype_is_float(a->q.dtype) || a->k.dtype != a->q.dtype || a->v.dtype != a->q.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected query, key and value of one floating "
                         "dtype, got %s, %s and %s", tt_dtype_name(a->q.dtype),
                         tt_dtype_name(a->k.dtype), tt_dtype_name(a->v.dtype));
  bool ok = a->q.rank >= 2 && a->k.rank == a->q.rank && a->v.rank == a->q.rank;
  for (int d = 0; ok && d < a->q.rank - 3; d++)
    ok = a->k.dims[d] == a->q.dims[d] && a->v.dims[d] == a->q.dims[d];
  int64_t nq = 0, hq = 0, nk = 0, nv = 0, hv = 0, sv = 0, e2 = 0;
  if (ok) {  // split reads the last two dims: only for rank >= 2
    split(&a->q, &nq, &hq, &a->l, &a->e);
    split(&a->k, &nk, &a->hk, &a->s, &e2);
    split(&a->v, &nv, &hv, &sv, &a->ev);
  }
  ok = ok && e2 == a->e && hv == a->hk && sv == a->s && a->hk > 0 && hq % a->hk == 0;
  if (!ok)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "query %s, key %s and value %s don't fit "
                         "[..., Hq, L, E], [..., Hk, S, E], [..., Hk, S, Ev] with Hq a "
                         "multiple of Hk", tt_shape_str(&a->q, s1, sizeof s1),
                         tt_shape_str(&a->k, s2, sizeof s2), tt_shape_str(&a->v, s3, sizeof s3));
  a->n = nq;
  a->g = hq / a->hk;
  a->acc = tt_opmath(a->q.dtype);
  return NULL;
}

// Tensor argument i as opmath [N, Hk, rows, cols].
static tt_hv as4(tt_lower_ctx *c, int i, const att_shape *a, int64_t rows, int64_t cols) {
  int64_t d4[4] = {a->n, a->hk, rows, cols};
  return tt_hlo_reshape(tt_lower_hlo(c), tt_lower_convert(c, tt_lower_tensor(c, i), a->acc), 4, d4);
}

// v ([N, Hk, rows, cols]) back in the shape of `like` with its last dim
// replaced by cols (cols < 0: dropped), dtype d.
static tt_hv unfold(tt_lower_ctx *c, tt_hv v, const tt_hlo_type *like, int64_t cols, tt_dtype d) {
  tt_hlo_type t = *like;
  if (cols >= 0) t.dims[t.rank - 1] = cols;
  else t.rank--;
  return tt_lower_convert(c, tt_hlo_reshape(tt_lower_hlo(c), v, t.rank, t.dims), d);
}

// --- scores -----------------------------------------------------------------------------------

// The softmax scale: the argument `scale_arg` (float?), else 1 / sqrt(E).
static tt_hv attention_scale(tt_lower_ctx *c, const att_shape *a, int scale_arg) {
  if (tt_lower_is_none(c, scale_arg))
    return tt_hlo_const(tt_lower_hlo(c), a->acc, 1.0 / sqrt((double)a->e));
  return tt_lower_scalar(c, scale_arg, a->acc);
}

// The scaled, masked scores [N, Hk, G*L, S] (opmath): scale * Q K^T + mask,
// -inf where causality or a bool mask hides a key. Arguments: the mask
// (Tensor?), is_causal (bool or -1 for false), scale (float?).
static tt_hv scores(tt_lower_ctx *c, const att_shape *a, tt_hv q4, tt_hv k4, int mask_arg,
                    int causal_arg, int scale_arg) {
  tt_hlo *b = tt_lower_hlo(c);
  int64_t gl = a->g * a->l, d4[4] = {a->n, a->hk, gl, a->s};
  // Scaling the scores rather than Q costs no pass of its own (XLA fuses it
  // into the masking), and keeps Q K^T the same product in the forward and
  // in the backward's recomputation, which XLA then computes once when both
  // are in one program (the whole training step).
  tt_hv s = bmm(c, q4, k4, 3, 3);
  tt_hv sc = attention_scale(c, a, scale_arg);
  s = tt_lower_bin(c, TT_HLO_MUL, s, tt_lower_broadcast_to(c, sc, 4, d4));
  tt_hlo_type st = tt_hlo_make_type(a->acc, 4, d4);
  tt_hv neg_inf = tt_hlo_splat(b, &st, -INFINITY);
  if (!tt_lower_is_none(c, mask_arg)) {
    // Broadcast to [..., Hq, L, S] first: the mask's dims follow query's.
    tt_hlo_type full = a->q;
    full.dims[full.rank - 1] = a->s;
    tt_hv m = tt_lower_broadcast_to(c, tt_lower_tensor(c, mask_arg), full.rank, full.dims);
    m = tt_hlo_reshape(b, m, 4, d4);
    if (tt_lower_tensor_type(c, mask_arg, -1).dtype == TT_BOOL)
      s = tt_hlo_select(b, m, s, neg_inf);
    else
      s = tt_lower_bin(c, TT_HLO_ADD, s, tt_lower_convert(c, m, a->acc));
  }
  if (causal_arg >= 0 && tt_lower_bool(c, causal_arg)) {
    int64_t d3[3] = {a->g, a->l, a->s}, d2[2] = {gl, a->s}, bd[2] = {2, 3};
    tt_hlo_type it = tt_hlo_make_type(TT_I64, 3, d3);
    tt_hv keep = tt_hlo_compare(b, TT_HLO_LE, tt_hlo_iota(b, &it, 2), tt_hlo_iota(b, &it, 1));
    keep = tt_hlo_broadcast_in_dim(b, tt_hlo_reshape(b, keep, 2, d2), 4, d4, bd);
    s = tt_hlo_select(b, keep, s, neg_inf);
  }
  return s;
}

// --- the CPU kernel ---------------------------------------------------------------------------
//
// On XLA's CPU plugin the runtime registers C kernels for attention
// (kernels/cpu_attention.c; runtime/attention_kernel.c says why): a call
// without a mask then lowers to one custom call each way. Their operands are
// float32 with the sequence before the heads ([N, L, H, E]): models make
// their [N, H, L, E] arguments by transposing that layout, and XLA cancels
// our transpose against theirs where a copy to the kernel's layout would
// otherwise be written.

static const int64_t kSwap12[4] = {0, 2, 1, 3};

static bool use_kernel(tt_lower_ctx *c, const att_shape *a, int mask_arg) {
  return tt_lower_attention_ffi_target(c) && a->acc == TT_F32 && tt_lower_is_none(c, mask_arg);
}

// Tensor argument i ([..., H, R, C]) as float32 [N, R, H, C].
static tt_hv seq_major(tt_lower_ctx *c, int i, const att_shape *a) {
  tt_hlo_type t = tt_lower_tensor_type(c, i, -1);
  int64_t h = t.rank >= 3 ? t.dims[t.rank - 3] : 1;  // rank 2: one head
  int64_t d4[4] = {a->n, h, t.dims[t.rank - 2], t.dims[t.rank - 1]};
  tt_hv x = tt_lower_convert(c, tt_lower_tensor(c, i), a->acc);
  return tt_hlo_transpose(tt_lower_hlo(c), tt_hlo_reshape(tt_lower_hlo(c), x, 4, d4), kSwap12);
}

// A kernel result [N, R, H, C] back as `like` ([..., H, R, C]), dtype d.
static tt_hv from_seq_major(tt_lower_ctx *c, tt_hv v, const tt_hlo_type *like, tt_dtype d) {
  if (v == TT_HV_INVALID) return v;
  return unfold(c, tt_hlo_transpose(tt_lower_hlo(c), v, kSwap12), like, like->dims[like->rank - 1],
                d);
}

// The custom call to kernel `base` (its causal variant when is_causal holds).
static tt_hv kernel_call(tt_lower_ctx *c, const char *base, int causal_arg, const tt_hv *ins,
                         int n, const tt_hlo_type *res, int nres) {
  bool causal = causal_arg >= 0 && tt_lower_bool(c, causal_arg);
  char attrs[128];
  snprintf(attrs, sizeof attrs, "tt_kernel = \"torchtpu::%s%s\"", base, causal ? "_causal" : "");
  return tt_hlo_ffi_call(tt_lower_hlo(c), tt_lower_attention_ffi_target(c), attrs, ins, n, res,
                         nres);
}

static tt_status kernel_forward(tt_lower_ctx *c, const att_shape *a) {
  int64_t hq = a->hk * a->g, od[4] = {a->n, a->l, hq, a->ev}, ld[3] = {a->n, hq, a->l};
  tt_hlo_type res[2] = {tt_hlo_make_type(TT_F32, 4, od), tt_hlo_make_type(TT_F32, 3, ld)};
  tt_hv ins[4] = {seq_major(c, 0, a), seq_major(c, 1, a), seq_major(c, 2, a),
                  attention_scale(c, a, 6)};
  tt_hv r = kernel_call(c, "cpu_attention_fwd", 4, ins, 4, res, 2);
  tt_hlo_type ot = a->q;
  ot.dims[ot.rank - 1] = a->ev;
  tt_lower_result(c, from_seq_major(c, r, &ot, a->q.dtype));
  tt_lower_result(c, r == TT_HV_INVALID ? r : unfold(c, r + 1, &a->q, -1, a->acc));
  return NULL;
}

static tt_status kernel_backward(tt_lower_ctx *c, const att_shape *a) {
  int64_t hq = a->hk * a->g, ld[3] = {a->n, hq, a->l};
  tt_hv lse = tt_hlo_reshape(tt_lower_hlo(c), tt_lower_convert(c, tt_lower_tensor(c, 5), a->acc),
                             3, ld);
  tt_hv ins[7] = {seq_major(c, 0, a), seq_major(c, 1, a), seq_major(c, 2, a),
                  seq_major(c, 3, a), seq_major(c, 4, a), lse, attention_scale(c, a, 9)};
  int64_t qd[4] = {a->n, a->l, hq, a->e}, kd[4] = {a->n, a->s, a->hk, a->e},
          vd[4] = {a->n, a->s, a->hk, a->ev};
  tt_hlo_type res[3] = {tt_hlo_make_type(TT_F32, 4, qd), tt_hlo_make_type(TT_F32, 4, kd),
                        tt_hlo_make_type(TT_F32, 4, vd)};
  tt_hv r = kernel_call(c, "cpu_attention_bwd", 7, ins, 7, res, 3);
  bool ok = r != TT_HV_INVALID;
  tt_lower_result(c, from_seq_major(c, r, &a->q, a->q.dtype));
  tt_lower_result(c, from_seq_major(c, ok ? r + 1 : r, &a->k, a->k.dtype));
  tt_lower_result(c, from_seq_major(c, ok ? r + 2 : r, &a->v, a->v.dtype));
  return NULL;
}

// --- forward and backward ---------------------------------------------------------------------

// _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p,
//   is_causal, *, attn_mask?, scale?) -> (output, logsumexp [..., Hq, L])
static tt_status lower_flash_attention(tt_lower_ctx *c) {
  att_shape a;
  TT_RETURN_IF_ERROR(read_shape(c, 0, 1, 2, &a));
  if (use_kernel(c, &a, 5)) return kernel_forward(c, &a);
  tt_hlo *b = tt_lower_hlo(c);
  int64_t gl = a.g * a.l;
  tt_hv q4 = as4(c, 0, &a, gl, a.e), k4 = as4(c, 1, &a, a.s, a.e), v4 = as4(c, 2, &a, a.s, a.ev);
  tt_hv s = scores(c, &a, q4, k4, 5, 4, 6);
  // Shift by the row max (0 for a fully masked row, so it stays -inf - 0).
  tt_hv m = reduce_last(c, s, TT_HLO_REDUCE_MAX);
  tt_hv finite = tt_hlo_unary(b, TT_HLO_IS_FINITE, m);
  m = tt_hlo_select(b, finite, m, tt_lower_splat_like(c, m, 0));
  tt_hv e = tt_hlo_unary(b, TT_HLO_EXP, tt_lower_bin(c, TT_HLO_SUB, s, tt_lower_expand_like(c, m, s)));
  tt_hv sum = reduce_last(c, e, TT_HLO_REDUCE_ADD);
  tt_hv any = tt_hlo_compare(b, TT_HLO_GT, sum, tt_lower_splat_like(c, sum, 0));
  tt_hv inv = tt_hlo_select(b, any, tt_lower_bin(c, TT_HLO_DIV, tt_lower_splat_like(c, sum, 1), sum),
                            tt_lower_splat_like(c, sum, 0));
  // Normalised after the product: (E V) / sum scales [GL, Ev] a head, where
  // (E / sum) V would write the [GL, S] probabilities once more.
  tt_hv o = bmm(c, e, v4, 3, 2);
  o = tt_lower_bin(c, TT_HLO_MUL, o, tt_lower_expand_like(c, inv, o));
  tt_hv lse = tt_lower_bin(c, TT_HLO_ADD, m, tt_hlo_unary(b, TT_HLO_LOG, sum));
  lse = tt_hlo_select(b, any, lse, tt_lower_splat_like(c, lse, 0));
  tt_lower_result(c, unfold(c, o, &a.q, a.ev, a.q.dtype));
  tt_lower_result(c, unfold(c, lse, &a.q, -1, a.acc));
  return NULL;
}

// _scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key,
//   value, out, logsumexp, dropout_p, is_causal, *, attn_mask?, scale?)
//   -> (grad_query, grad_key, grad_value)
static tt_status lower_flash_attention_backward(tt_lower_ctx *c) {
  att_shape a;
  TT_RETURN_IF_ERROR(read_shape(c, 1, 2, 3, &a));
  if (use_kernel(c, &a, 8)) return kernel_backward(c, &a);
  tt_hlo *b = tt_lower_hlo(c);
  int64_t gl = a.g * a.l, d3[3] = {a.n, a.hk, gl};
  tt_hv q4 = as4(c, 1, &a, gl, a.e), k4 = as4(c, 2, &a, a.s, a.e), v4 = as4(c, 3, &a, a.s, a.ev);
  tt_hv go = as4(c, 0, &a, gl, a.ev), o = as4(c, 4, &a, gl, a.ev);
  tt_hv s = scores(c, &a, q4, k4, 8, 7, 9);
  tt_hv lse = tt_hlo_reshape(b, tt_lower_convert(c, tt_lower_tensor(c, 5), a.acc), 3, d3);
  int64_t bd[3] = {0, 1, 2};
  lse = tt_hlo_broadcast_in_dim(b, lse, 4, tt_lower_type(c, s).dims, bd);
  tt_hv p = tt_hlo_unary(b, TT_HLO_EXP, tt_lower_bin(c, TT_HLO_SUB, s, lse));
  tt_hv gv = bmm(c, p, go, 2, 2);                           // P^T dO   [N, Hk, S, Ev]
  tt_hv gp = bmm(c, go, v4, 3, 3);                          // dO V^T   [N, Hk, GL, S]
  tt_hv dsum = reduce_last(c, tt_lower_bin(c, TT_HLO_MUL, go, o), TT_HLO_REDUCE_ADD);
  tt_hv gs = tt_lower_bin(c, TT_HLO_MUL, p, tt_lower_bin(c, TT_HLO_SUB, gp, tt_lower_expand_like(c, dsum, gp)));
  // S = scale Q K^T: the scale multiplies the two small products, not dS
  // (XLA's CPU backend wrote the broadcast scale out at dS's full size to
  // feed the fused dot).
  tt_hv sc = attention_scale(c, &a, 9);
  tt_hv gq = bmm(c, gs, k4, 3, 2);                          // dS K     [N, Hk, GL, E]
  tt_hv gk = bmm(c, gs, q4, 2, 2);                          // dS^T Q   [N, Hk, S, E]
  gq = tt_lower_bin(c, TT_HLO_MUL, gq, tt_lower_broadcast_to(c, sc, 4, tt_lower_type(c, gq).dims));
  gk = tt_lower_bin(c, TT_HLO_MUL, gk, tt_lower_broadcast_to(c, sc, 4, tt_lower_type(c, gk).dims));
  tt_lower_result(c, unfold(c, gq, &a.q, a.e, a.q.dtype));
  tt_lower_result(c, unfold(c, gk, &a.k, a.e, a.k.dtype));
  tt_lower_result(c, unfold(c, gv, &a.v, a.ev, a.v.dtype));
  return NULL;
}

// --- _safe_softmax ------------------------------------------------------------------------------

// _safe_softmax(self, dim, dtype?): softmax (in `dtype` when given), with 0
// for the rows whose every element is -inf (softmax gives NaN there).
static tt_status lower_safe_softmax(tt_lower_ctx *c) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type t = tt_lower_tensor_type(c, 0, -1);
  const tt_value *dv = tt_lower_arg(c, 2);
  tt_dtype out = dv->kind == TT_VALUE_DTYPE ? dv->u.dtype : t.dtype;
  if (!tt_dtype_is_float(out))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "softmax of %s is not supported",
                         tt_dtype_name(out));
  bool mask[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_lower_dim_mask(c, 1, t.rank, false, mask));
  tt_hv x = tt_lower_convert(c, tt_lower_convert(c, tt_lower_tensor(c, 0), out), tt_opmath(out));
  tt_hv masked = tt_hlo_compare(b, TT_HLO_EQ, x, tt_lower_splat_like(c, x, -INFINITY));
  tt_hv dead = tt_lower_expand_like(c, tt_lower_reduce(c, masked, mask, true, TT_HLO_REDUCE_AND), x);
  tt_hv m = tt_lower_expand_like(c, tt_lower_reduce(c, x, mask, true, TT_HLO_REDUCE_MAX), x);
  tt_hv e = tt_hlo_unary(b, TT_HLO_EXP, tt_lower_bin(c, TT_HLO_SUB, x, m));
  tt_hv r = tt_lower_bin(c, TT_HLO_DIV, e, tt_lower_expand_like(c, tt_lower_reduce(c, e, mask, true, TT_HLO_REDUCE_ADD), e));
  r = tt_hlo_select(b, dead, tt_lower_splat_like(c, r, 0), r);
  tt_lower_result(c, tt_lower_convert(c, r, out));
  return NULL;
}

// --- the table ----------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
static const tt_rule kRules[] = {
    R("_scaled_dot_product_flash_attention_for_cpu", lower_flash_attention),
    R("_scaled_dot_product_flash_attention_for_cpu_backward", lower_flash_attention_backward),
    // CompositeExplicitAutograd in PyTorch (softmax + isneginf + all + where):
    // one rule instead.
    {"aten::_safe_softmax", lower_safe_softmax, TT_RULE_REPLACES_COMPOSITE},
};
#undef R

const tt_rule_table tt_rules_attention = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
