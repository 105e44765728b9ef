// spatial.c — resampling and padding of the trailing spatial dims: nearest,
// nearest-exact, (bi/tri)linear and bicubic upsampling, reflection and
// replication padding (1-3 dims, each with its backward); 3-d adaptive
// average pooling (interpolate's "area"), 2-d/3-d adaptive max pooling,
// max_pool3d_with_indices, avg_pool3d, max_unpool2d/3d, nll_loss2d, glu and prelu
// (with their backward), im2col and col2im (each other's backward).
//
// Resampling and padding read, per spatial axis, a few source positions
// ("taps") per output position with a weight each: output o along an axis is
// sum_k w_k[o] * x[idx_k[o]]. The taps are computed in the program from an
// iota with PyTorch's own index arithmetic (same float ops, same order), the
// axes are applied one after the other as gathers, and the backward is the
// transpose: a scatter-add of the weighted gradient through the same taps.
// Adaptive max pooling is separable the same way (a running max over the
// window's positions, one dim at a time).
//
// Leaves out: antialiased resampling, adaptive max windows longer than
// kMaxWindow or im2col kernels over 256 positions (they fall back to the
// CPU); max_unpool and nll_loss2d don't check index/target
// values (they aren't known when lowering: out-of-range ones are dropped).
#include <inttypes.h>
#include <string.h>

#include "lower/lower.h"

// --- taps --------------------------------------------------------------------------------

// Up to four source positions per output position along one axis.
typedef struct taps {
  int n;
  tt_hv idx[4];  // [out] i64
  tt_hv w[4];    // [out] weights in the compute dtype; TT_HV_INVALID means 1
} taps;

static tt_hv iota1(tt_hlo *b, int64_t n, tt_dtype d) {
  tt_hlo_type t = tt_hlo_make_type(d, 1, &n);
  return tt_hlo_iota(b, &t, 0);
}

static tt_hv splat1(tt_hlo *b, int64_t n, tt_dtype d, double v) {
  tt_hlo_type t = tt_hlo_make_type(d, 1, &n);
  return tt_hlo_splat(b, &t, v);
}

static tt_hv bcast1(tt_hlo *b, tt_hv s, int64_t n) {  // 0-d -> [n]
  return tt_hlo_broadcast_in_dim(b, s, 1, &n, NULL);
}

// x with dim `axis` replaced by idx.len positions read at idx.
static tt_hv take(tt_lower_ctx *c, tt_hv x, int axis, tt_hv idx) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_type(c, x), it = tt_lower_type(c, idx);
  int64_t col[2] = {it.dims[0], 1}, offs[TT_MAX_RANK], sizes[TT_MAX_RANK], ax = axis;
  int n = 0;
  for (int r = 0; r < xt.rank; r++) {
    sizes[r] = r == axis ? 1 : xt.dims[r];
    if (r != axis) offs[n++] = r;
  }
  tt_hlo_gather_dims gd = {.offset_dims = offs, .n_offset_dims = n,
                           .collapsed_slice_dims = &ax, .n_collapsed = 1,
                           .start_index_map = &ax, .n_start_index_map = 1,
                           .index_vector_dim = 1};
  return tt_hlo_gather(b, x, tt_hlo_reshape(b, idx, 2, col), &gd, sizes, NULL);
}

// The transpose of take: g (dim `axis` of idx.len) added into zeros whose
// dim `axis` has `in` positions.
static tt_hv put_back(tt_lower_ctx *c, tt_hv g, int axis, tt_hv idx, int64_t in) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type gt = tt_lower_type(c, g), it = tt_lower_type(c, idx);
  int64_t col[2] = {it.dims[0], 1}, win[TT_MAX_RANK], ax = axis;
  int n = 0;
  for (int r = 0; r < gt.rank; r++)
    if (r != axis) win[n++] = r;
  tt_hlo_type zt = gt;
  zt.dims[axis] = in;
  tt_hlo_scatter_dims sd = {.update_window_dims = win, .n_update_window = n,
                            .inserted_window_dims = &ax, .n_inserted = 1,
                            .scatter_dims_to_operand_dims = &ax, .n_scatter_to_operand = 1,
                            .index_vector_dim = 1};
  return tt_hlo_scatter(b, tt_hlo_splat(b, &zt, 0), tt_hlo_reshape(b, idx, 2, col), g, &sd,
                        TT_HLO_REDUCE_ADD);
}

// w [len] broadcast along `axis` of v's shape.
static tt_hv weigh(tt_lower_ctx *c, tt_hv v, int axis, tt_hv w) {
  if (w == TT_HV_INVALID) return v;
  tt_hlo_type vt = tt_lower_type(c, v);
  int64_t bd = axis;
  tt_hlo *b = tt_lower_hlo(c);
  return tt_hlo_binary(b, TT_HLO_MUL, v,
                       tt_hlo_broadcast_in_dim(b, tt_hlo_convert(b, w, vt.dtype), vt.rank,
                                               vt.dims, &bd));
}

static tt_hv apply_taps(tt_lower_ctx *c, tt_hv x, int axis, const taps *t) {
  tt_hv y = TT_HV_INVALID;
  for (int k = 0; k < t->n; k++) {
    tt_hv v = weigh(c, take(c, x, axis, t->idx[k]), axis, t->w[k]);
    y = k ? tt_hlo_binary(tt_lower_hlo(c), TT_HLO_ADD, y, v) : v;
  }
  return y;
}

static tt_hv apply_taps_back(tt_lower_ctx *c, tt_hv g, int axis, const taps *t, int64_t in) {
  tt_hv y = TT_HV_INVALID;
  for (int k = 0; k < t->n; k++) {
    tt_hv v = put_back(c, weigh(c, g, axis, t->w[k]), axis, t->idx[k], in);
    y = k ? tt_hlo_binary(tt_lower_hlo(c), TT_HLO_ADD, y, v) : v;
  }
  return y;
}

// --- how each mode picks its taps --------------------------------------------------------

typedef enum mode {
  NEAREST, NEAREST_EXACT, LINEAR, CUBIC, REFLECT, REPLICATE,
  LINEAR_AA, CUBIC_AA,  // antialiased (weights as a dense [out, in] matrix)
} mode;

typedef struct axis_args {
  int64_t in, out;
  int64_t pad_lo;     // padding modes
  bool align;         // linear, cubic
  int scale_arg;      // argument holding `float? scales` for this axis, or -1
} axis_args;

// PyTorch's compute_scales_value: 1/scale when given and positive, else
// in/out; computed in `d` (0-d).
static tt_hv scale_value(tt_lower_ctx *c, const axis_args *a, tt_dtype d) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv ratio = tt_hlo_binary(b, TT_HLO_DIV, tt_hlo_const(b, d, (double)a->in),
                              tt_hlo_const(b, d, (double)a->out));
  if (a->scale_arg < 0 || tt_lower_is_none(c, a->scale_arg)) return ratio;
  tt_hv s = tt_lower_scalar(c, a->scale_arg, TT_F64);
  tt_hv inv = tt_hlo_convert(b, tt_hlo_binary(b, TT_HLO_DIV, tt_hlo_const(b, TT_F64, 1), s), d);
  tt_hv pos = tt_hlo_compare(b, TT_HLO_GT, s, tt_hlo_const(b, TT_F64, 0));
  return tt_hlo_select(b, pos, inv, ratio);
}

// area_pixel_compute_scale.
static tt_hv area_scale(tt_lower_ctx *c, const axis_args *a, tt_dtype d) {
  tt_hlo *b = tt_lower_hlo(c);
  if (!a->align) return scale_value(c, a, d);
  if (a->out <= 1) return tt_hlo_const(b, d, 0);
  return tt_hlo_binary(b, TT_HLO_DIV, tt_hlo_const(b, d, (double)(a->in - 1)),
                       tt_hlo_const(b, d, (double)(a->out - 1)));
}

static tt_hv clamp_idx(tt_hlo *b, tt_hv i, int64_t n, int64_t in) {
  return tt_hlo_clamp(b, bcast1(b, tt_hlo_const_i(b, TT_I64, 0), n), i,
                      bcast1(b, tt_hlo_const_i(b, TT_I64, in - 1), n));
}

static void nearest_taps(tt_lower_ctx *c, const axis_args *a, bool exact, taps *t) {
  tt_hlo *b = tt_lower_hlo(c);
  int64_t n = a->out;
  tt_hv o = iota1(b, n, TT_F32);
  if (exact) o = tt_hlo_binary(b, TT_HLO_ADD, o, splat1(b, n, TT_F32, 0.5));
  tt_hv src = tt_hlo_binary(b, TT_HLO_MUL, o, bcast1(b, scale_value(c, a, TT_F32), n));
  tt_hv i = tt_hlo_convert(b, tt_hlo_unary(b, TT_HLO_FLOOR, src), TT_I64);
  t->n = 1;
  t->idx[0] = tt_hlo_binary(b, TT_HLO_MIN, i, bcast1(b, tt_hlo_const_i(b, TT_I64, a->in - 1), n));
  t->w[0] = TT_HV_INVALID;
}

// The source coordinate of each output position (area_pixel_compute_source_index).
static tt_hv source_coord(tt_lower_ctx *c, const axis_args *a, tt_dtype d, bool cubic) {
  tt_hlo *b = tt_lower_hlo(c);
  int64_t n = a->out;
  tt_hv o = iota1(b, n, d), sc = bcast1(b, area_scale(c, a, d), n);
  if (a->align) return tt_hlo_binary(b, TT_HLO_MUL, sc, o);
  tt_hv half = splat1(b, n, d, 0.5);
  tt_hv src = tt_hlo_binary(b, TT_HLO_SUB, tt_hlo_binary(b, TT_HLO_MUL, sc,
                                                         tt_hlo_binary(b, TT_HLO_ADD, o, half)),
                            half);
  return cubic ? src : tt_hlo_binary(b, TT_HLO_MAX, src, splat1(b, n, d, 0));
}

static void linear_taps(tt_lower_ctx *c, const axis_args *a, tt_dtype d, taps *t) {
  tt_hlo *b = tt_lower_hlo(c);
  int64_t n = a->out;
  tt_hv real = source_coord(c, a, d, false);
  tt_hv i0 = tt_hlo_binary(b, TT_HLO_MIN,
                           tt_hlo_convert(b, tt_hlo_unary(b, TT_HLO_FLOOR, real), TT_I64),
                           bcast1(b, tt_hlo_const_i(b, TT_I64, a->in - 1), n));
  tt_hv lam = tt_hlo_clamp(b, splat1(b, n, d, 0),
                           tt_hlo_binary(b, TT_HLO_SUB, real, tt_hlo_convert(b, i0, d)),
                           splat1(b, n, d, 1));
  t->n = 2;
  t->idx[0] = i0;
  t->idx[1] = clamp_idx(b, tt_hlo_binary(b, TT_HLO_ADD, i0, splat1(b, n, TT_I64, 1)), n, a->in);
  t->w[0] = tt_hlo_binary(b, TT_HLO_SUB, splat1(b, n, d, 1), lam);
  t->w[1] = lam;
}

// Keys' cubic convolution with A = -0.75 (get_cubic_upsample_coefficients).
static tt_hv cubic1(tt_hlo *b, tt_hv x, int64_t n, tt_dtype d) {  // |x| <= 1
  const double A = -0.75;
  tt_hv y = tt_hlo_binary(b, TT_HLO_SUB, tt_hlo_binary(b, TT_HLO_MUL, splat1(b, n, d, A + 2), x),
                          splat1(b, n, d, A + 3));
  y = tt_hlo_binary(b, TT_HLO_MUL, tt_hlo_binary(b, TT_HLO_MUL, y, x), x);
  return tt_hlo_binary(b, TT_HLO_ADD, y, splat1(b, n, d, 1));
}

static tt_hv cubic2(tt_hlo *b, tt_hv x, int64_t n, tt_dtype d) {  // 1 < |x| < 2
  const double A = -0.75;
  tt_hv y = tt_hlo_binary(b, TT_HLO_SUB, tt_hlo_binary(b, TT_HLO_MUL, splat1(b, n, d, A), x),
                          splat1(b, n, d, 5 * A));
  y = tt_hlo_binary(b, TT_HLO_ADD, tt_hlo_binary(b, TT_HLO_MUL, y, x), splat1(b, n, d, 8 * A));
  return tt_hlo_binary(b, TT_HLO_SUB, tt_hlo_binary(b, TT_HLO_MUL, y, x), splat1(b, n, d, 4 * A));
}

static void cubic_taps(tt_lower_ctx *c, const axis_args *a, tt_dtype d, taps *t) {
  tt_hlo *b = tt_lower_hlo(c);
  int64_t n = a->out;
  tt_hv real = source_coord(c, a, d, true);
  tt_hv fl = tt_hlo_unary(b, TT_HLO_FLOOR, real), i = tt_hlo_convert(b, fl, TT_I64);
  tt_hv x1 = tt_hlo_binary(b, TT_HLO_SUB, real, fl), one = splat1(b, n, d, 1);
  tt_hv x2 = tt_hlo_binary(b, TT_HLO_SUB, one, x1);
  t->n = 4;
  t->w[0] = cubic2(b, tt_hlo_binary(b, TT_HLO_ADD, x1, one), n, d);
  t->w[1] = cubic1(b, x1, n, d);
  t->w[2] = cubic1(b, x2, n, d);
  t->w[3] = cubic2(b, tt_hlo_binary(b, TT_HLO_ADD, x2, one), n, d);
  for (int k = 0; k < 4; k++)
    t->idx[k] = clamp_idx(b, tt_hlo_binary(b, TT_HLO_ADD, i, splat1(b, n, TT_I64, k - 1)), n, a->in);
}

// Output o reads input o - pad_lo, reflected (without repeating the edge)
// or clamped into [0, in).
static void pad_taps(tt_lower_ctx *c, const axis_args *a, bool reflect, taps *t) {
  tt_hlo *b = tt_lower_hlo(c);
  int64_t n = a->out;
  tt_hv j = tt_hlo_binary(b, TT_HLO_SUB, iota1(b, n, TT_I64), splat1(b, n, TT_I64, (double)a->pad_lo));
  if (reflect) {
    tt_hv last = splat1(b, n, TT_I64, (double)(a->in - 1));
    j = tt_hlo_unary(b, TT_HLO_ABS, j);
    j = tt_hlo_binary(b, TT_HLO_SUB, last,
                      tt_hlo_unary(b, TT_HLO_ABS, tt_hlo_binary(b, TT_HLO_SUB, last, j)));
  } else {
    j = clamp_idx(b, j, n, a->in);
  }
  t->n = 1;
  t->idx[0] = j;
  t->w[0] = TT_HV_INVALID;
}

static void make_taps(tt_lower_ctx *c, mode m, const axis_args *a, tt_dtype d, taps *t) {
  switch (m) {
    case NEAREST: nearest_taps(c, a, false, t); break;
    case NEAREST_EXACT: nearest_taps(c, a, true, t); break;
    case LINEAR: linear_taps(c, a, d, t); break;
    case CUBIC: cubic_taps(c, a, d, t); break;
    case REFLECT: pad_taps(c, a, true, t); break;
    case REPLICATE: pad_taps(c, a, false, t); break;
    case LINEAR_AA: case CUBIC_AA: t->n = 0; break;  // weights as a matrix (aa_matrix)
  }
}

// --- antialiased resampling (interpolate(..., antialias=True)) ---------------------------------
//
// PyTorch's _compute_weights_aa: output i is centred at scale * (i + 0.5);
// inputs j in [trunc(centre - support + 0.5), trunc(centre + support + 0.5))
// (clipped to the input) weigh filter((j - centre + 0.5) / max(scale, 1)),
// normalised to sum 1; support is the filter's half-width (1 linear, 2
// cubic) times max(scale, 1). The scale is a runtime value (scales_h/w), so
// the weights are built on the device as a dense [out, in] matrix and
// applied with a dot (its transpose for the backward).

// The triangle (linear) or Keys cubic with A = -0.5 (PIL's, as PyTorch's aa
// filters) of |x|, elementwise.
static tt_hv aa_filter(tt_lower_ctx *c, tt_hv x, bool cubic) {
  tt_hlo *b = tt_lower_hlo(c);
  x = tt_hlo_unary(b, TT_HLO_ABS, x);
  tt_hv one = tt_lower_splat_like(c, x, 1), zero = tt_lower_splat_like(c, x, 0);
  if (!cubic)
    return tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_LT, x, one),
                         tt_hlo_binary(b, TT_HLO_SUB, one, x), zero);
  const double a = -0.5;
  tt_hv x2 = tt_hlo_binary(b, TT_HLO_MUL, x, x);
  // ((a + 2) x - (a + 3)) x^2 + 1 on [0, 1); ((a x - 5a) x + 8a) x - 4a on [1, 2).
  tt_hv near = tt_hlo_binary(b, TT_HLO_ADD, tt_hlo_binary(b, TT_HLO_MUL, tt_hlo_binary(b, TT_HLO_SUB,
                   tt_hlo_binary(b, TT_HLO_MUL, tt_lower_splat_like(c, x, a + 2), x),
                   tt_lower_splat_like(c, x, a + 3)), x2), one);
  tt_hv far = tt_hlo_binary(b, TT_HLO_SUB, tt_hlo_binary(b, TT_HLO_MUL, tt_hlo_binary(b, TT_HLO_ADD,
                  tt_hlo_binary(b, TT_HLO_MUL, tt_hlo_binary(b, TT_HLO_SUB,
                      tt_hlo_binary(b, TT_HLO_MUL, tt_lower_splat_like(c, x, a), x),
                      tt_lower_splat_like(c, x, 5 * a)), x), tt_lower_splat_like(c, x, 8 * a)), x),
                  tt_lower_splat_like(c, x, 4 * a));
  tt_hv two = tt_lower_splat_like(c, x, 2);
  return tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_LT, x, one), near,
                       tt_hlo_select(b, tt_hlo_compare(b, TT_HLO_LT, x, two), far, zero));
}

// The [out, in] weights of one axis, in d.
static tt_hv aa_matrix(tt_lower_ctx *c, const axis_args *a, tt_dtype d, bool cubic) {
  tt_hlo *b = tt_lower_hlo(c);
  int64_t dims[2] = {a->out, a->in};
  tt_hlo_type t = tt_hlo_make_type(d, 2, dims);
  tt_hv i = tt_hlo_iota(b, &t, 0), j = tt_hlo_iota(b, &t, 1);
  tt_hv sc = tt_hlo_broadcast_in_dim(b, area_scale(c, a, d), 2, dims, NULL);
  tt_hv one = tt_lower_splat_like(c, i, 1), half = tt_lower_splat_like(c, i, 0.5);
  tt_hv wide = tt_hlo_compare(b, TT_HLO_GE, sc, one);
  tt_hv stretch = tt_hlo_select(b, wide, sc, one);  // max(scale, 1) when scale >= 1
  tt_hv support = tt_hlo_binary(b, TT_HLO_MUL, tt_lower_splat_like(c, i, cubic ? 2 : 1), stretch);
  tt_hv centre = tt_hlo_binary(b, TT_HLO_MUL, sc, tt_hlo_binary(b, TT_HLO_ADD, i, half));
  // static_cast<int64_t> truncates; below 0 both ends clip to 0 anyway.
  tt_hv lo = tt_hlo_binary(b, TT_HLO_MAX, tt_hlo_unary(b, TT_HLO_FLOOR, tt_hlo_binary(b, TT_HLO_ADD,
                 tt_hlo_binary(b, TT_HLO_SUB, centre, support), half)), tt_lower_splat_like(c, i, 0));
  tt_hv hi = tt_hlo_binary(b, TT_HLO_MIN, tt_hlo_unary(b, TT_HLO_FLOOR, tt_hlo_binary(b, TT_HLO_ADD,
                 tt_hlo_binary(b, TT_HLO_ADD, centre, support), half)),
                 tt_lower_splat_like(c, i, (double)a->in));
  tt_hv inside = tt_hlo_binary(b, TT_HLO_AND, tt_hlo_compare(b, TT_HLO_GE, j, lo),
                               tt_hlo_compare(b, TT_HLO_LT, j, hi));
  tt_hv arg = tt_hlo_binary(b, TT_HLO_DIV, tt_hlo_binary(b, TT_HLO_ADD,
                  tt_hlo_binary(b, TT_HLO_SUB, j, centre), half), stretch);
  tt_hv w = tt_hlo_select(b, inside, aa_filter(c, arg, cubic), tt_lower_splat_like(c, i, 0));
  bool rows[TT_MAX_RANK] = {false, true};
  tt_hv total = tt_lower_reduce(c, w, rows, true, TT_HLO_REDUCE_ADD);
  tt_hv nonzero = tt_hlo_compare(b, TT_HLO_NE, total, tt_lower_splat_like(c, total, 0));
  tt_hv div = tt_hlo_select(b, nonzero, total, tt_lower_splat_like(c, total, 1));
  return tt_hlo_binary(b, TT_HLO_DIV, w, tt_lower_expand_like(c, div, w));
}

// v's dim `axis` contracted with the matrix (forward: [out, in] . v; backward:
// its transpose), the result's new dim put back at `axis`.
static tt_hv apply_matrix(tt_lower_ctx *c, tt_hv v, int axis, tt_hv w, bool backward) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type vt = tt_lower_type(c, v);
  int64_t cw = backward ? 0 : 1, cv = axis;
  tt_hv r = tt_hlo_dot_general(b, w, v, NULL, NULL, 0, &cw, &cv, 1, vt.dtype);  // [n, rest...]
  int64_t perm[TT_MAX_RANK];
  for (int k = 0, src = 1; k < vt.rank; k++) perm[k] = k == axis ? 0 : src++;
  return tt_hlo_transpose(b, r, perm);
}

// Applies mode `m` along the last ns dims of x (forward), or its transpose
// to the gradient g (backward, last axis first).
static tt_hv resample(tt_lower_ctx *c, tt_hv x, mode m, const axis_args *ax, int ns,
                      bool backward) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type xt = tt_lower_type(c, x);
  bool weighted = m == LINEAR || m == CUBIC || m == LINEAR_AA || m == CUBIC_AA;
  tt_dtype d = weighted ? tt_opmath(xt.dtype) : xt.dtype;
  if (backward) d = tt_opmath(xt.dtype);
  tt_hv v = tt_hlo_convert(b, x, d);
  for (int s = 0; s < ns; s++) {
    int i = backward ? ns - 1 - s : s;
    int axis = xt.rank - ns + i;
    if (m == LINEAR_AA || m == CUBIC_AA) {
      v = apply_matrix(c, v, axis, aa_matrix(c, &ax[i], d, m == CUBIC_AA), backward);
      continue;
    }
    taps t;
    make_taps(c, m, &ax[i], d, &t);
    v = backward ? apply_taps_back(c, v, axis, &t, ax[i].in) : apply_taps(c, v, axis, &t);
  }
  return tt_hlo_convert(b, v, xt.dtype);
}

// --- upsampling ---------------------------------------------------------------------------

// Reads output_size (argument `osz`) and, for the backward, input_size
// (argument `isz`, the full input shape) for ns spatial dims.
static tt_status read_upsample(tt_lower_ctx *c, int ns, int osz, int isz, int align_arg,
                               int scale_arg, axis_args *ax) {
  const tt_value *o = tt_lower_arg(c, osz);
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  const int64_t *in = NULL;
  if (isz >= 0) {
    const tt_value *iv = tt_lower_arg(c, isz);
    if (iv->kind != TT_VALUE_INTS || iv->u.ints.n != ns + 2)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input_size must have %d sizes", ns + 2);
    in = iv->u.ints.data + 2;
  } else if (xt.rank != ns + 2) {
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a %dD input, got %dD", ns + 2,
                         (int)xt.rank);
  }
  if (o->kind != TT_VALUE_INTS || o->u.ints.n != ns)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "output_size must have %d sizes", ns);
  for (int i = 0; i < ns; i++) {
    ax[i].in = in ? in[i] : xt.dims[2 + i];
    ax[i].out = o->u.ints.data[i];
    ax[i].pad_lo = 0;
    ax[i].align = align_arg >= 0 && tt_lower_bool(c, align_arg);
    ax[i].scale_arg = scale_arg + i;
    if (ax[i].in < 1 || ax[i].out < 1)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input (%" PRId64 ") and output (%" PRId64
                           ") sizes must be positive", ax[i].in, ax[i].out);
  }
  return NULL;
}

// forward: (self, output_size, [align_corners,] scales...);
// backward: (grad_output, output_size, input_size, [align_corners,] scales...)
static tt_status upsample(tt_lower_ctx *c, mode m, int ns, bool backward) {
  bool has_align = m == LINEAR || m == CUBIC || m == LINEAR_AA || m == CUBIC_AA;
  int isz = backward ? 2 : -1, next = backward ? 3 : 2;
  int align_arg = has_align ? next : -1;
  axis_args ax[3];
  TT_RETURN_IF_ERROR(read_upsample(c, ns, 1, isz, align_arg, next + (has_align ? 1 : 0), ax));
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  if (has_align && !tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "interpolation of %s", tt_dtype_name(xt.dtype));
  if (backward && (xt.rank != ns + 2 || !tt_dtype_is_float(xt.dtype)))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grad_output must be a %dD float tensor",
                         ns + 2);
  tt_lower_result(c, resample(c, tt_lower_tensor(c, 0), m, ax, ns, backward));
  return NULL;
}

#define UPSAMPLE(name, m, ns)                                                            \
  static tt_status lower_##name(tt_lower_ctx *c) { return upsample(c, m, ns, false); }  \
  static tt_status lower_##name##_backward(tt_lower_ctx *c) { return upsample(c, m, ns, true); }
UPSAMPLE(nearest1d, NEAREST, 1)
UPSAMPLE(nearest2d, NEAREST, 2)
UPSAMPLE(nearest3d, NEAREST, 3)
UPSAMPLE(nearest_exact1d, NEAREST_EXACT, 1)
UPSAMPLE(nearest_exact2d, NEAREST_EXACT, 2)
UPSAMPLE(nearest_exact3d, NEAREST_EXACT, 3)
UPSAMPLE(linear1d, LINEAR, 1)
UPSAMPLE(bilinear2d, LINEAR, 2)
UPSAMPLE(trilinear3d, LINEAR, 3)
UPSAMPLE(bicubic2d, CUBIC, 2)
UPSAMPLE(bilinear2d_aa, LINEAR_AA, 2)
UPSAMPLE(bicubic2d_aa, CUBIC_AA, 2)
#undef UPSAMPLE

// --- padding ------------------------------------------------------------------------------

// ATen's check on an image of ns spatial dims, with or without a batch dim:
// only the batch dim may be empty.
static tt_status check_image(const tt_lower_ctx *c, const tt_hlo_type *xt, int ns) {
  bool ok = xt->rank == ns + 1 || xt->rank == ns + 2;
  for (int d = xt->rank == ns + 2 ? 1 : 0; ok && d < xt->rank; d++) ok = xt->dims[d] != 0;
  if (ok) return NULL;
  char s[96];
  return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected %dD or %dD (batch mode) tensor with "
                       "possibly 0 batch size and other non-zero dimensions for input, but "
                       "got: %s", ns + 1, ns + 2, tt_shape_str(xt, s, sizeof s));
}

// forward: (self, padding); backward: (grad_output, self, padding). The
// padding lists (left, right) pairs from the last dim backwards.
static tt_status pad(tt_lower_ctx *c, mode m, int ns, bool backward) {
  int xi = backward ? 1 : 0;
  tt_hlo_type xt = tt_lower_tensor_type(c, xi, -1);
  const tt_value *p = tt_lower_arg(c, xi + 1);
  if (p->kind != TT_VALUE_INTS || p->u.ints.n != 2 * ns)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "padding must have %d values", 2 * ns);
  TT_RETURN_IF_ERROR(check_image(c, &xt, ns));
  if (backward && !tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "backward of %s", tt_dtype_name(xt.dtype));
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "padding", p->u.ints.data, 2 * ns));
  axis_args ax[3];
  for (int i = 0; i < ns; i++) {
    int64_t lo = p->u.ints.data[2 * (ns - 1 - i)], hi = p->u.ints.data[2 * (ns - 1 - i) + 1];
    ax[i] = (axis_args){.in = xt.dims[xt.rank - ns + i], .pad_lo = lo, .scale_arg = -1};
    ax[i].out = ax[i].in + lo + hi;
    char s[96];
    if (m == REFLECT && (lo >= ax[i].in || hi >= ax[i].in))  // ATen's text
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Argument #4: Padding size should be less "
                           "than the corresponding input dimension, but got: padding (%" PRId64
                           ", %" PRId64 ") at dimension %d of input %s", lo, hi,
                           xt.rank - ns + i, tt_shape_str(&xt, s, sizeof s));
    if (ax[i].out < 1)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input (%c: %" PRId64 ") is too small. "
                           "Calculated output %c: %" PRId64, "DHW"[3 - ns + i], ax[i].in,
                           "DHW"[3 - ns + i], ax[i].out);
  }
  tt_lower_result(c, resample(c, tt_lower_tensor(c, 0), m, ax, ns, backward));
  return NULL;
}

#define PAD(name, m, ns)                                                              \
  static tt_status lower_##name(tt_lower_ctx *c) { return pad(c, m, ns, false); }    \
  static tt_status lower_##name##_backward(tt_lower_ctx *c) { return pad(c, m, ns, true); }
PAD(reflection_pad1d, REFLECT, 1)
PAD(reflection_pad2d, REFLECT, 2)
PAD(reflection_pad3d, REFLECT, 3)
PAD(replication_pad1d, REPLICATE, 1)
PAD(replication_pad2d, REPLICATE, 2)
PAD(replication_pad3d, REPLICATE, 3)
#undef PAD

// --- glu and prelu ------------------------------------------------------------------------

// The two halves of x along `dim` (wrapped and checked to be even).
static tt_status halves(tt_lower_ctx *c, int xi, int64_t dim, tt_hv *a, tt_hv *h) {
  tt_hlo_type xt = tt_lower_tensor_type(c, xi, -1);
  int64_t d;
  TT_RETURN_IF_ERROR(tt_lower_dim(c, dim, xt.rank, &d));
  if (xt.dims[d] % 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "halving dim %" PRId64 " must be even, "
                         "got size %" PRId64, d, xt.dims[d]);
  if (!tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "glu of %s", tt_dtype_name(xt.dtype));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv x = tt_hlo_convert(b, tt_lower_tensor(c, xi), tt_opmath(xt.dtype));
  int64_t start[TT_MAX_RANK] = {0}, limit[TT_MAX_RANK], step[TT_MAX_RANK];
  for (int r = 0; r < xt.rank; r++) {
    limit[r] = xt.dims[r];
    step[r] = 1;
  }
  limit[d] = xt.dims[d] / 2;
  *a = tt_hlo_slice(b, x, start, limit, step);
  start[d] = limit[d];
  limit[d] = xt.dims[d];
  *h = tt_hlo_slice(b, x, start, limit, step);
  return NULL;
}

// glu(self, dim): a * sigmoid(b) for the halves a, b.
static tt_status lower_glu(tt_lower_ctx *c) {
  tt_hv a, h;
  TT_RETURN_IF_ERROR(halves(c, 0, tt_lower_int(c, 1), &a, &h));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv y = tt_hlo_binary(b, TT_HLO_MUL, a, tt_hlo_unary(b, TT_HLO_LOGISTIC, h));
  tt_lower_result(c, tt_hlo_convert(b, y, tt_lower_tensor_type(c, 0, -1).dtype));
  return NULL;
}

// glu_backward(grad_output, self, dim): [g * s, g * a * s * (1 - s)] with
// s = sigmoid(b), joined along dim.
static tt_status lower_glu_backward(tt_lower_ctx *c) {
  tt_hv a, h;
  int64_t dim = tt_lower_int(c, 2), d;
  TT_RETURN_IF_ERROR(halves(c, 1, dim, &a, &h));
  tt_hlo_type xt = tt_lower_tensor_type(c, 1, -1);
  TT_RETURN_IF_ERROR(tt_lower_dim(c, dim, xt.rank, &d));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv g = tt_hlo_convert(b, tt_lower_tensor(c, 0), tt_opmath(xt.dtype));
  tt_hv s = tt_hlo_unary(b, TT_HLO_LOGISTIC, h);
  tt_hv ga = tt_hlo_binary(b, TT_HLO_MUL, s, g);
  tt_hv one_minus = tt_hlo_binary(b, TT_HLO_SUB, tt_lower_splat_like(c, s, 1), s);
  tt_hv gb = tt_hlo_binary(b, TT_HLO_MUL, tt_hlo_binary(b, TT_HLO_MUL, one_minus, s),
                           tt_hlo_binary(b, TT_HLO_MUL, a, g));
  tt_hv parts[2] = {ga, gb};
  tt_lower_result(c, tt_hlo_convert(b, tt_hlo_concatenate(b, parts, 2, d), xt.dtype));
  return NULL;
}

// self and weight (broadcast) in the compute dtype, and self > 0.
static tt_status prelu_operands(tt_lower_ctx *c, int xi, tt_hv *x, tt_hv *w, tt_hv *pos) {
  tt_hlo_type xt = tt_lower_tensor_type(c, xi, -1);
  if (!tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "prelu of %s", tt_dtype_name(xt.dtype));
  tt_hv v[2];
  int idx[2] = {xi, xi + 1};
  TT_RETURN_IF_ERROR(tt_lower_operands(c, idx, 2, tt_opmath(xt.dtype), v));
  *x = v[0];
  *w = v[1];
  *pos = tt_hlo_compare(tt_lower_hlo(c), TT_HLO_GT, *x, tt_lower_splat_like(c, *x, 0));
  return NULL;
}

// _prelu_kernel(self, weight): self where self > 0, else weight * self.
static tt_status lower_prelu(tt_lower_ctx *c) {
  tt_hv x, w, pos;
  TT_RETURN_IF_ERROR(prelu_operands(c, 0, &x, &w, &pos));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv y = tt_hlo_select(b, pos, x, tt_hlo_binary(b, TT_HLO_MUL, w, x));
  tt_lower_result(c, tt_hlo_convert(b, y, tt_lower_tensor_type(c, 0, -1).dtype));
  return NULL;
}

// _prelu_kernel_backward(grad_output, self, weight) -> (grad_self,
// grad_weight), both of the broadcast shape (autograd sums to weight's).
static tt_status lower_prelu_backward(tt_lower_ctx *c) {
  tt_hv x, w, pos;
  TT_RETURN_IF_ERROR(prelu_operands(c, 1, &x, &w, &pos));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv g = tt_lower_broadcast_to(c, tt_hlo_convert(b, tt_lower_tensor(c, 0), tt_lower_type(c, x).dtype),
                                  tt_lower_type(c, x).rank, tt_lower_type(c, x).dims);
  tt_hv gx = tt_hlo_select(b, pos, g, tt_hlo_binary(b, TT_HLO_MUL, w, g));
  tt_hv gw = tt_hlo_select(b, pos, tt_lower_splat_like(c, g, 0), tt_hlo_binary(b, TT_HLO_MUL, x, g));
  tt_lower_result(c, tt_hlo_convert(b, gx, tt_lower_tensor_type(c, 1, -1).dtype));
  tt_lower_result(c, tt_hlo_convert(b, gw, tt_lower_tensor_type(c, 2, -1).dtype));
  return NULL;
}

// --- adaptive average pooling (3-d) ---------------------------------------------------------

// _adaptive_avg_pool3d(self, output_size) and
// _adaptive_avg_pool3d_backward(grad_output, self): one matmul per spatial
// dim; contracting the first spatial dim and appending the result dim
// cycles the three back into order.
static tt_status adaptive3d(tt_lower_ctx *c, bool backward) {
  int xi = backward ? 1 : 0;
  tt_hlo_type xt = tt_lower_tensor_type(c, xi, -1);
  if (xt.rank != 4 && xt.rank != 5)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a 4D or 5D input, got %dD",
                         (int)xt.rank);
  if (!tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "adaptive pooling of %s", tt_dtype_name(xt.dtype));
  int64_t out[3], in[3];
  const tt_value *o = tt_lower_arg(c, 1);
  tt_hlo_type gt = tt_lower_tensor_type(c, 0, -1);
  if (backward && gt.rank != xt.rank)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grad_output is %dD but self is %dD", (int)gt.rank,
                         (int)xt.rank);
  for (int r = 0; backward && r < xt.rank - 3; r++)
    if (gt.dims[r] != xt.dims[r])
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grad_output dim %d is %" PRId64 " but self's is %" PRId64,
                           r, gt.dims[r], xt.dims[r]);
  if (backward)
    TT_RETURN_IF_ERROR(tt_lower_check_nonempty(c, &gt, 1, "adaptive_avg_pool3d_backward",
                                               "grad_output"));
  else
    TT_RETURN_IF_ERROR(tt_lower_check_nonempty(c, &xt, 1, "adaptive_avg_pool3d", "input"));
  tt_hlo_type rt = xt;
  for (int i = 0; i < 3; i++) {
    in[i] = xt.dims[xt.rank - 3 + i];
    if (backward) out[i] = gt.dims[gt.rank - 3 + i];
    else if (o->kind == TT_VALUE_INTS && o->u.ints.n == 3) out[i] = o->u.ints.data[i];
    else return tt_lower_fail(c, TT_INVALID_ARGUMENT, "output_size must have 3 sizes");
    if (out[i] < 0)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "adaptive_avg_pool3d: elements of output_size "
                           "must be greater than or equal to 0 but received %" PRId64, out[i]);
    if (!backward) rt.dims[rt.rank - 3 + i] = out[i];
  }
  tt_hlo *b = tt_lower_hlo(c);
  if (!backward && (out[0] == 0 || out[1] == 0 || out[2] == 0)) {  // empty, as in PyTorch
    tt_lower_result(c, tt_hlo_splat(b, &rt, 0));
    return NULL;
  }
  tt_dtype acc = tt_opmath(xt.dtype);
  tt_hv v = tt_hlo_convert(b, tt_lower_tensor(c, 0), acc);
  int64_t first = tt_lower_type(c, v).rank - 3, mdim = backward ? 0 : 1;
  for (int i = 0; i < 3; i++)
    v = tt_hlo_dot_general(b, v, tt_lower_adaptive_avg_matrix(c, out[i], in[i], acc), NULL, NULL, 0, &first,
                           &mdim, 1, acc);
  tt_lower_result(c, tt_hlo_convert(b, v, xt.dtype));
  return NULL;
}

static tt_status lower_adaptive_avg_pool3d(tt_lower_ctx *c) { return adaptive3d(c, false); }
static tt_status lower_adaptive_avg_pool3d_backward(tt_lower_ctx *c) { return adaptive3d(c, true); }

// --- scattering through per-plane indices ----------------------------------------------------

// A tensor of type rt (zeros) receiving v: each element goes to the
// position its index (same shape as v) names within its plane (the last ns
// dims) of rt, overwriting (kind -1) or adding (TT_HLO_REDUCE_ADD). Indices
// outside the plane are dropped.
static tt_hv plane_scatter(tt_lower_ctx *c, tt_hv v, tt_hv idx, const tt_hlo_type *rt, int ns,
                           int kind) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type vt = tt_lower_type(c, v);
  int64_t planes = 1, in_plane = 1, out_plane = 1;
  for (int r = 0; r < vt.rank - ns; r++) planes *= vt.dims[r];
  for (int i = 0; i < ns; i++) {
    in_plane *= vt.dims[vt.rank - ns + i];
    out_plane *= rt->dims[rt->rank - ns + i];
  }
  int64_t pd[2] = {planes, in_plane}, n = planes * in_plane, total = planes * out_plane;
  tt_hlo_type pt = tt_hlo_make_type(TT_I64, 2, pd);
  idx = tt_hlo_reshape(b, tt_hlo_convert(b, idx, TT_I64), 2, pd);
  tt_hv inside = tt_hlo_binary(b, TT_HLO_AND,
                               tt_hlo_compare(b, TT_HLO_GE, idx, tt_hlo_splat_i(b, &pt, 0)),
                               tt_hlo_compare(b, TT_HLO_LT, idx, tt_hlo_splat_i(b, &pt, out_plane)));
  tt_hv base = tt_hlo_binary(b, TT_HLO_MUL, tt_hlo_iota(b, &pt, 0), tt_hlo_splat_i(b, &pt, out_plane));
  tt_hv flat = tt_hlo_select(b, inside, tt_hlo_binary(b, TT_HLO_ADD, base, idx),
                             tt_hlo_splat_i(b, &pt, total));  // out of bounds: dropped
  int64_t col[2] = {n, 1};
  tt_hlo_type zt = tt_hlo_make_type(rt->dtype, 1, &total);
  static const int64_t zero = 0;
  tt_hlo_scatter_dims sd = {.inserted_window_dims = &zero, .n_inserted = 1,
                            .scatter_dims_to_operand_dims = &zero, .n_scatter_to_operand = 1,
                            .index_vector_dim = 1};
  tt_hv y = tt_hlo_scatter(b, tt_hlo_splat(b, &zt, 0), tt_hlo_reshape(b, flat, 2, col),
                           tt_hlo_reshape(b, tt_hlo_convert(b, v, rt->dtype), 1, &n), &sd, kind);
  return tt_hlo_reshape(b, y, rt->rank, rt->dims);
}

// --- adaptive max pooling ---------------------------------------------------------------------

enum { kMaxWindow = 32 };  // longest adaptive window lowered (positions per dim)

// adaptive_max_pool{2,3}d(self, output_size) -> (values, indices): windows
// [floor(o*in/out), ceil((o+1)*in/out)) per dim. Max is separable, so the
// dims are reduced one at a time, last first, each as a running max over the
// window's k-th positions (clamped to the window, strict > so the first
// maximum wins, as in PyTorch's row-major scan); the flat index within the
// plane is carried along.
static tt_status adaptive_max(tt_lower_ctx *c, int ns) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  const tt_value *o = tt_lower_arg(c, 1);
  if ((xt.rank != ns + 1 && xt.rank != ns + 2) || o->kind != TT_VALUE_INTS || o->u.ints.n != ns)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a %dD or %dD input and %d output "
                         "sizes", ns + 1, ns + 2, ns);
  // PyTorch has no integer kernel: the CPU fallback raises its "not implemented".
  if (!tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "adaptive max pooling of %s", tt_dtype_name(xt.dtype));
  TT_RETURN_IF_ERROR(tt_lower_check_nonempty(c, &xt, 1, ns == 2 ? "adaptive_max_pool2d"
                                                                 : "adaptive_max_pool3d", "input"));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type ot = xt;  // the results' shape
  bool empty = false;
  for (int i = 0; i < ns; i++) {
    if (o->u.ints.data[i] < 0)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "adaptive_max_pool%dd: elements of output_size "
                           "must be greater than or equal to 0 but received %" PRId64, ns,
                           o->u.ints.data[i]);
    ot.dims[xt.rank - ns + i] = o->u.ints.data[i];
    empty = empty || o->u.ints.data[i] == 0;
  }
  if (empty) {  // empty values and indices, as in PyTorch
    tt_lower_result(c, tt_hlo_splat(b, &ot, 0));
    ot.dtype = TT_I64;
    tt_lower_result(c, tt_hlo_splat_i(b, &ot, 0));
    return NULL;
  }
  tt_hlo_type it = xt;
  it.dtype = TT_I64;
  tt_hv v = tt_lower_tensor(c, 0);
  tt_hv f = tt_hlo_splat_i(b, &it, 0);
  int64_t stride = 1;
  for (int i = ns - 1; i >= 0; i--) {
    int axis = xt.rank - ns + i;
    int64_t in = xt.dims[axis], out = o->u.ints.data[i], longest = 0;
    if (in < 1 || out < 1)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "sizes must be positive (input %" PRId64
                           ", output %" PRId64 ")", in, out);
    for (int64_t k = 0; k < out; k++) {
      int64_t len = ((k + 1) * in + out - 1) / out - k * in / out;
      if (len > longest) longest = len;
    }
    if (longest > kMaxWindow)
      return tt_lower_fail(c, TT_UNIMPLEMENTED, "adaptive windows of %" PRId64 " positions",
                           longest);
    tt_hv oi = iota1(b, out, TT_I64), n_in = splat1(b, out, TT_I64, (double)in),
          n_out = splat1(b, out, TT_I64, (double)out);
    tt_hv start = tt_hlo_binary(b, TT_HLO_DIV, tt_hlo_binary(b, TT_HLO_MUL, oi, n_in), n_out);
    tt_hv one = splat1(b, out, TT_I64, 1);
    tt_hv end = tt_hlo_binary(b, TT_HLO_MUL, tt_hlo_binary(b, TT_HLO_ADD, oi, one), n_in);
    end = tt_hlo_binary(b, TT_HLO_ADD, end, splat1(b, out, TT_I64, (double)(out - 1)));
    end = tt_hlo_binary(b, TT_HLO_DIV, end, n_out);
    tt_hv last = tt_hlo_binary(b, TT_HLO_SUB, end, one);
    tt_hv best = TT_HV_INVALID, best_f = TT_HV_INVALID;
    for (int64_t k = 0; k < longest; k++) {
      tt_hv at = tt_hlo_binary(b, TT_HLO_MIN, tt_hlo_binary(b, TT_HLO_ADD, start,
                                                            splat1(b, out, TT_I64, (double)k)), last);
      tt_hv cv = take(c, v, axis, at), cf = take(c, f, axis, at);
      tt_hv pos = tt_hlo_binary(b, TT_HLO_MUL, at, splat1(b, out, TT_I64, (double)stride));
      tt_hlo_type ct = tt_lower_type(c, cf);
      int64_t bd = axis;
      cf = tt_hlo_binary(b, TT_HLO_ADD, cf, tt_hlo_broadcast_in_dim(b, pos, ct.rank, ct.dims, &bd));
      if (k == 0) {
        best = cv;
        best_f = cf;
        continue;
      }
      tt_hv gt = tt_hlo_compare(b, TT_HLO_GT, cv, best);
      if (tt_dtype_is_float(xt.dtype))  // NaN wins, as PyTorch's isnan check
        gt = tt_hlo_binary(b, TT_HLO_OR, gt, tt_hlo_binary(b, TT_HLO_AND,
                           tt_hlo_compare(b, TT_HLO_NE, cv, cv),
                           tt_hlo_compare(b, TT_HLO_EQ, best, best)));
      best = tt_hlo_select(b, gt, cv, best);
      best_f = tt_hlo_select(b, gt, cf, best_f);
    }
    v = best;
    f = best_f;
    stride *= in;
  }
  tt_lower_result(c, v);
  tt_lower_result(c, f);
  return NULL;
}

// adaptive_max_pool{2,3}d_backward(grad_output, self, indices): the
// gradient added at the positions the indices name.
static tt_status adaptive_max_backward(tt_lower_ctx *c, int ns) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 1, -1), gt = tt_lower_tensor_type(c, 0, -1);
  if (gt.rank != xt.rank || xt.rank < ns + 1 || !tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grad_output and self must be float tensors "
                         "of the same rank");
  TT_RETURN_IF_ERROR(tt_lower_check_nonempty(c, &gt, 1, ns == 2 ? "adaptive_max_pool2d_backward"
                                             : "adaptive_max_pool3d_backward", "grad_output"));
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type at = xt;
  at.dtype = tt_opmath(xt.dtype);
  tt_hv g = plane_scatter(c, tt_lower_tensor(c, 0), tt_lower_tensor(c, 2), &at, ns,
                          TT_HLO_REDUCE_ADD);
  tt_lower_result(c, tt_hlo_convert(b, g, xt.dtype));
  return NULL;
}

static tt_status lower_adaptive_max_pool2d(tt_lower_ctx *c) { return adaptive_max(c, 2); }
static tt_status lower_adaptive_max_pool3d(tt_lower_ctx *c) { return adaptive_max(c, 3); }
static tt_status lower_adaptive_max_pool2d_backward(tt_lower_ctx *c) {
  return adaptive_max_backward(c, 2);
}
static tt_status lower_adaptive_max_pool3d_backward(tt_lower_ctx *c) {
  return adaptive_max_backward(c, 3);
}

// --- max_pool3d_with_indices ------------------------------------------------------------------

// int[3] argument i: one value repeats, [] gives `dflt`.
static bool ints3(const tt_lower_ctx *c, int i, const int64_t *dflt, int64_t *out) {
  const tt_value *v = tt_lower_arg(c, i);
  int m = v->kind == TT_VALUE_INTS ? v->u.ints.n : (v->kind == TT_VALUE_INT ? 1 : 0);
  for (int k = 0; k < 3; k++) {
    if (v->kind == TT_VALUE_INT) out[k] = v->u.i;
    else if (m == 0) out[k] = dflt[k];
    else if (m == 1) out[k] = v->u.ints.data[0];
    else if (m == 3) out[k] = v->u.ints.data[k];
    else return false;
  }
  return true;
}

// The window of a 3-d pooling op (kernel at arg k, then stride, padding;
// dilation at arg `dil` or none when -1; ceil_mode at `ceil_arg`) over x of
// type xt, with PyTorch's pooling_output_shape; the ceil_mode overhang is
// extra high padding (w->pad_hi - w->pad_lo).
static tt_status pool3d_window(tt_lower_ctx *c, const tt_hlo_type *xt, int k, int dil,
                               int ceil_arg, tt_hlo_window *w) {
  static const int64_t zeros[3] = {0, 0, 0}, ones[3] = {1, 1, 1};
  int64_t ks[3], st[3], pd[3], dl[3];
  if (xt->rank != 4 && xt->rank != 5)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a 4D or 5D input, got %dD",
                         (int)xt->rank);
  if (!ints3(c, k, zeros, ks) || !ints3(c, k + 1, ks, st) || !ints3(c, k + 2, zeros, pd) ||
      (dil >= 0 && !ints3(c, dil, ones, dl)))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "kernel_size, stride, padding and dilation "
                         "must have one or three values");
  if (dil < 0) memcpy(dl, ones, sizeof dl);
  bool ceil = tt_lower_bool(c, ceil_arg);
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "kernel_size", ks, 3));
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "stride", st, 3));
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "padding", pd, 3));
  TT_RETURN_IF_ERROR(tt_lower_check_window(c, "dilation", dl, 3));
  TT_RETURN_IF_ERROR(tt_lower_check_pool(c, 3, ks, st, pd, dl));
  TT_RETURN_IF_ERROR(tt_lower_check_pool_input(c, xt, 3, tt_lower_op_name(c)));
  *w = tt_hlo_window_identity(xt->rank);
  for (int i = 0; i < 3; i++) {
    int r = xt->rank - 3 + i;
    int64_t in = xt->dims[r];
    int64_t num = in + 2 * pd[i] - dl[i] * (ks[i] - 1) - 1 + (ceil ? st[i] - 1 : 0);
    int64_t out = num / st[i] + 1;
    if (ceil && (out - 1) * st[i] >= in + pd[i]) out--;
    if (num < 0 || out < 1)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Output size is too small: input size %"
                           PRId64 " in spatial dim %d, kernel %" PRId64 ", padding %" PRId64
                           ", dilation %" PRId64, in, i, ks[i], pd[i], dl[i]);
    int64_t extra = (out - 1) * st[i] + dl[i] * (ks[i] - 1) + 1 - in - 2 * pd[i];
    w->dims[r] = ks[i];
    w->strides[r] = st[i];
    w->window_dilation[r] = dl[i];
    w->pad_lo[r] = pd[i];
    w->pad_hi[r] = pd[i] + (extra > 0 ? extra : 0);
  }
  return NULL;
}

// (self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices)
static tt_status lower_max_pool3d(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  tt_hlo_window w;
  TT_RETURN_IF_ERROR(pool3d_window(c, &xt, 1, 4, 5, &w));
  tt_hlo *b = tt_lower_hlo(c);
  int64_t vol = 1, bd[3];
  for (int i = 0; i < 3; i++) {
    vol *= xt.dims[xt.rank - 3 + i];
    bd[i] = xt.rank - 3 + i;
  }
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 1, &vol);
  tt_hv idx = tt_hlo_reshape(b, tt_hlo_iota(b, &it, 0), 3, xt.dims + xt.rank - 3);
  idx = tt_hlo_broadcast_in_dim(b, idx, xt.rank, xt.dims, bd);
  tt_hv vals, ids;
  tt_hlo_argreduce_window(b, tt_lower_tensor(c, 0), idx, &w, true, &vals, &ids);
  tt_lower_result(c, vals);
  tt_lower_result(c, ids);
  return NULL;
}

// (grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
//  indices): each gradient is added where its index points.
static tt_status lower_max_pool3d_backward(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 1, -1), gt = tt_lower_tensor_type(c, 0, -1);
  if (gt.rank != xt.rank || (xt.rank != 4 && xt.rank != 5) || !tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grad_output and self must be 4D or 5D float "
                         "tensors of the same rank");
  tt_hlo_type at = xt;
  at.dtype = tt_opmath(xt.dtype);
  tt_hv g = plane_scatter(c, tt_lower_tensor(c, 0), tt_lower_tensor(c, 7), &at, 3,
                          TT_HLO_REDUCE_ADD);
  tt_lower_result(c, tt_hlo_convert(tt_lower_hlo(c), g, xt.dtype));
  return NULL;
}

// --- avg_pool3d -------------------------------------------------------------------------------

// The divisor of each output position of window w over x of type xt (acc,
// the window's result shape): divisor_override (arg `div_arg`), else the
// window's positions inside the padded image (count_include_pad) or inside
// the image.
static tt_hv avg3d_divisor(tt_lower_ctx *c, const tt_hlo_type *xt, const tt_hlo_window *w,
                           bool include_pad, int div_arg, tt_dtype acc) {
  tt_hlo *b = tt_lower_hlo(c);
  tt_hlo_type ot = *xt;
  ot.dtype = acc;
  tt_hv ones = tt_hlo_splat(b, &ot, 1);
  tt_hlo_window ww = *w;
  if (include_pad) {  // the padding counts, the ceil_mode overhang doesn't
    int64_t lo[TT_MAX_RANK] = {0}, none[TT_MAX_RANK] = {0};
    for (int r = 0; r < xt->rank; r++) {
      lo[r] = w->pad_lo[r];
      ww.pad_hi[r] = w->pad_hi[r] - w->pad_lo[r];
      ww.pad_lo[r] = 0;
    }
    ones = tt_hlo_pad(b, ones, tt_hlo_const(b, acc, 1), lo, lo, none);
  }
  tt_hv cnt = tt_hlo_reduce_window(b, ones, tt_hlo_const(b, acc, 0), &ww, TT_HLO_REDUCE_ADD);
  if (tt_lower_is_none(c, div_arg)) return cnt;
  return tt_lower_splat_like(c, cnt, (double)tt_lower_int(c, div_arg));
}

// avg_pool3d(self, kernel_size, stride, padding, ceil_mode,
//            count_include_pad, divisor_override)
static tt_status lower_avg_pool3d(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  tt_hlo_window w;
  TT_RETURN_IF_ERROR(pool3d_window(c, &xt, 1, -1, 4, &w));
  if (!tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "avg_pool3d of %s", tt_dtype_name(xt.dtype));
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype acc = tt_opmath(xt.dtype);
  tt_hv sum = tt_hlo_reduce_window(b, tt_hlo_convert(b, tt_lower_tensor(c, 0), acc),
                                   tt_hlo_const(b, acc, 0), &w, TT_HLO_REDUCE_ADD);
  tt_hv div = avg3d_divisor(c, &xt, &w, tt_lower_bool(c, 5), 6, acc);
  tt_lower_result(c, tt_hlo_convert(b, tt_hlo_binary(b, TT_HLO_DIV, sum, div), xt.dtype));
  return NULL;
}

// avg_pool3d_backward(grad_output, self, kernel_size, stride, padding,
//   ceil_mode, count_include_pad, divisor_override): every input position
// sums g/div over the windows covering it — a stride-dilated window sum.
static tt_status lower_avg_pool3d_backward(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 1, -1);
  tt_hlo_window w;
  TT_RETURN_IF_ERROR(pool3d_window(c, &xt, 2, -1, 5, &w));
  if (!tt_dtype_is_float(xt.dtype))
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "avg_pool3d of %s", tt_dtype_name(xt.dtype));
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype acc = tt_opmath(xt.dtype);
  tt_hv g = tt_hlo_convert(b, tt_lower_tensor(c, 0), acc);
  g = tt_hlo_binary(b, TT_HLO_DIV, g, avg3d_divisor(c, &xt, &w, tt_lower_bool(c, 6), 7, acc));
  tt_hlo_type gt = tt_lower_type(c, g);
  tt_hlo_window bw = tt_hlo_window_identity(gt.rank);
  int64_t start[TT_MAX_RANK] = {0}, limit[TT_MAX_RANK], step[TT_MAX_RANK];
  for (int r = 0; r < xt.rank; r++) {
    limit[r] = xt.dims[r];
    step[r] = 1;
    if (r < xt.rank - 3) continue;
    int64_t k = w.dims[r], p = w.pad_lo[r];
    bw.dims[r] = k;
    bw.base_dilation[r] = w.strides[r];
    bw.pad_lo[r] = k - 1 - p;
    int64_t hi = xt.dims[r] + k - 1 - ((gt.dims[r] - 1) * w.strides[r] + 1) - bw.pad_lo[r];
    bw.pad_hi[r] = hi > 0 ? hi : 0;
  }
  tt_hv gx = tt_hlo_reduce_window(b, g, tt_hlo_const(b, acc, 0), &bw, TT_HLO_REDUCE_ADD);
  gx = tt_hlo_slice(b, gx, start, limit, step);
  tt_lower_result(c, tt_hlo_convert(b, gx, xt.dtype));
  return NULL;
}

// --- max_unpool -----------------------------------------------------------------------------

// max_unpool2d(self, indices, output_size) and max_unpool3d(..., stride,
// padding): each value goes to the position its index names within its
// plane of the output; the rest are zero. Indices out of range are dropped
// (PyTorch raises; values aren't known when lowering).
static tt_status max_unpool(tt_lower_ctx *c, int ns) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1), it = tt_lower_tensor_type(c, 1, -1);
  const tt_value *o = tt_lower_arg(c, 2);
  if (o->kind != TT_VALUE_INTS || o->u.ints.n != ns)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "output_size must have %d sizes", ns);
  if ((xt.rank != ns + 1 && xt.rank != ns + 2) || it.rank != xt.rank)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "self (%dD) and indices (%dD) must both be "
                         "%dD or %dD", (int)xt.rank, (int)it.rank, ns + 1, ns + 2);
  for (int r = 0; r < xt.rank; r++)
    if (xt.dims[r] != it.dims[r])
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "self and indices shapes differ");
  tt_hlo_type rt = xt;
  for (int i = 0; i < ns; i++) rt.dims[rt.rank - ns + i] = o->u.ints.data[i];
  tt_lower_result(c, plane_scatter(c, tt_lower_tensor(c, 0), tt_lower_tensor(c, 1), &rt, ns,
                                   -1));
  return NULL;
}

static tt_status lower_max_unpool2d(tt_lower_ctx *c) { return max_unpool(c, 2); }
static tt_status lower_max_unpool3d(tt_lower_ctx *c) { return max_unpool(c, 3); }

// --- nll_loss2d -------------------------------------------------------------------------------

enum { kNone = 0, kMean = 1, kSum = 2 };  // PyTorch's reduction enum

// The pieces both directions need for self [N, C, H, W] and target
// [N, H, W], flattened to M = N*H*W positions.
typedef struct nll2d {
  int64_t m, classes;
  tt_dtype dt, acc;
  tt_hv hit;  // [M, C] bool: class c is the (not ignored) target
  tt_hv w;    // [M] acc: weight[target] (1 without weights), 0 where ignored
} nll2d;

// self at arg x, target x+1, weight x+2, reduction x+3, ignore_index x+4.
static tt_status nll2d_prepare(tt_lower_ctx *c, int x, nll2d *p) {
  tt_hlo_type xt = tt_lower_tensor_type(c, x, -1), tt = tt_lower_tensor_type(c, x + 1, -1);
  int64_t red = tt_lower_int(c, x + 3);
  if (xt.rank != 4 || tt.rank != 3 || tt.dims[0] != xt.dims[0] || tt.dims[1] != xt.dims[2] ||
      tt.dims[2] != xt.dims[3])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected input [N, C, H, W] and target "
                         "[N, H, W], got %dD and %dD", (int)xt.rank, (int)tt.rank);
  if (!tt_dtype_is_int(tt.dtype) || !tt_dtype_is_float(xt.dtype) || red < kNone || red > kSum)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "needs a float input, an integer target and "
                         "a reduction of 0-2 (got %s, %s, %" PRId64 ")",
                         tt_dtype_name(xt.dtype), tt_dtype_name(tt.dtype), red);
  tt_hlo *b = tt_lower_hlo(c);
  p->m = tt.dims[0] * tt.dims[1] * tt.dims[2];
  p->classes = xt.dims[1];
  p->dt = xt.dtype;
  p->acc = tt_opmath(xt.dtype);
  int64_t md[2] = {p->m, p->classes}, col[2] = {p->m, 1}, cls = 1;
  tt_hv t = tt_hlo_convert(b, tt_hlo_reshape(b, tt_lower_tensor(c, x + 1), 1, &p->m), TT_I64);
  tt_hv keep = tt_hlo_compare(b, TT_HLO_NE, t,
                              tt_lower_splat_like(c, t, (double)tt_lower_int(c, x + 4)));
  tt_hv out = tt_hlo_binary(b, TT_HLO_OR,
                            tt_hlo_compare(b, TT_HLO_LT, t, tt_lower_splat_like(c, t, 0)),
                            tt_hlo_compare(b, TT_HLO_GE, t,
                                           tt_lower_splat_like(c, t, (double)p->classes)));
  tt_lower_check(c, tt_hlo_binary(b, TT_HLO_AND, keep, out), t, TT_OUT_OF_RANGE,
                 "Target {} is out of bounds.", 0, 0);
  tt_hlo_type it = tt_hlo_make_type(TT_I64, 2, md), ft = tt_hlo_make_type(p->acc, 2, md);
  tt_hv kt = tt_hlo_broadcast_in_dim(b, tt_hlo_reshape(b, keep, 2, col), 2, md, (int64_t[]){0, 1});
  p->hit = tt_hlo_binary(b, TT_HLO_AND, kt,
                         tt_hlo_compare(b, TT_HLO_EQ, tt_hlo_iota(b, &it, 1),
                                        tt_hlo_broadcast_in_dim(b, tt_hlo_reshape(b, t, 2, col),
                                                                2, md, (int64_t[]){0, 1})));
  tt_hv wrow = tt_hlo_splat(b, &ft, 1);
  if (!tt_lower_is_none(c, x + 2))
    wrow = tt_hlo_broadcast_in_dim(b, tt_hlo_convert(b, tt_lower_tensor(c, x + 2), p->acc), 2,
                                   md, &cls);
  bool over_c[TT_MAX_RANK] = {false, true};
  p->w = tt_lower_reduce(c, tt_hlo_select(b, p->hit, wrow, tt_hlo_splat(b, &ft, 0)), over_c,
                         false, TT_HLO_REDUCE_ADD);
  return NULL;
}

// self [N, C, H, W] as [M, C] in acc.
static tt_hv rows(tt_lower_ctx *c, tt_hv x, const nll2d *p) {
  tt_hlo *b = tt_lower_hlo(c);
  static const int64_t to_last[4] = {0, 2, 3, 1};
  int64_t md[2] = {p->m, p->classes};
  return tt_hlo_convert(b, tt_hlo_reshape(b, tt_hlo_transpose(b, x, to_last), 2, md), p->acc);
}

// nll_loss2d_forward(self, target, weight?, reduction, ignore_index)
//   -> (output, total_weight)
static tt_status lower_nll_loss2d_forward(tt_lower_ctx *c) {
  nll2d p;
  TT_RETURN_IF_ERROR(nll2d_prepare(c, 0, &p));
  tt_hlo *b = tt_lower_hlo(c);
  int64_t red = tt_lower_int(c, 3);
  tt_hv x = rows(c, tt_lower_tensor(c, 0), &p);
  bool over_c[TT_MAX_RANK] = {false, true}, all[TT_MAX_RANK] = {true};
  tt_hv picked = tt_lower_reduce(c, tt_hlo_select(b, p.hit, x, tt_lower_splat_like(c, x, 0)),
                                 over_c, false, TT_HLO_REDUCE_ADD);
  tt_hv loss = tt_hlo_unary(b, TT_HLO_NEG, tt_hlo_binary(b, TT_HLO_MUL, picked, p.w));
  tt_hv total = tt_lower_reduce(c, p.w, all, false, TT_HLO_REDUCE_ADD), out;
  if (red == kNone) {
    tt_hlo_type tt = tt_lower_tensor_type(c, 1, -1);
    out = tt_hlo_reshape(b, loss, tt.rank, tt.dims);
    total = tt_hlo_const(b, p.acc, 0);
  } else {
    out = tt_lower_reduce(c, loss, all, false, TT_HLO_REDUCE_ADD);
    if (red == kMean) out = tt_hlo_binary(b, TT_HLO_DIV, out, total);
  }
  tt_lower_result(c, tt_hlo_convert(b, out, p.dt));
  tt_lower_result(c, tt_hlo_convert(b, total, p.dt));
  return NULL;
}

// nll_loss2d_backward(grad_output, self, target, weight?, reduction,
//                     ignore_index, total_weight) -> grad_input
static tt_status lower_nll_loss2d_backward(tt_lower_ctx *c) {
  nll2d p;
  TT_RETURN_IF_ERROR(nll2d_prepare(c, 1, &p));
  tt_hlo *b = tt_lower_hlo(c);
  int64_t red = tt_lower_int(c, 4), md[2] = {p.m, p.classes}, col[2] = {p.m, 1};
  tt_hv g = tt_hlo_convert(b, tt_lower_tensor(c, 0), p.acc);
  g = red == kNone ? tt_hlo_reshape(b, g, 1, &p.m)
                   : tt_lower_broadcast_to(c, tt_hlo_reshape(b, g, 0, NULL), 1, &p.m);
  tt_hv scale = tt_hlo_unary(b, TT_HLO_NEG, tt_hlo_binary(b, TT_HLO_MUL, p.w, g));
  if (red == kMean) {
    tt_hv tw = tt_hlo_convert(b, tt_hlo_reshape(b, tt_lower_tensor(c, 6), 0, NULL), p.acc);
    scale = tt_hlo_binary(b, TT_HLO_DIV, scale, tt_lower_broadcast_to(c, tw, 1, &p.m));
  }
  tt_hv sc = tt_lower_broadcast_to(c, tt_hlo_reshape(b, scale, 2, col), 2, md);
  tt_hv grad = tt_hlo_select(b, p.hit, sc, tt_lower_splat_like(c, sc, 0));
  tt_hlo_type xt = tt_lower_tensor_type(c, 1, -1);
  int64_t nhwc[4] = {xt.dims[0], xt.dims[2], xt.dims[3], xt.dims[1]};
  static const int64_t to_nchw[4] = {0, 3, 1, 2};
  grad = tt_hlo_transpose(b, tt_hlo_reshape(b, grad, 4, nhwc), to_nchw);
  tt_lower_result(c, tt_hlo_convert(b, grad, p.dt));
  return NULL;
}

// --- im2col / col2im --------------------------------------------------------------------------

typedef struct unfold_args {
  int64_t k[2], d[2], p[2], s[2];
  int64_t in[2], out[2];  // image size, and blocks per dim
} unfold_args;

// Reads kernel_size, dilation, padding, stride from argument `first` on for
// an image of size in[2].
static tt_status read_unfold(tt_lower_ctx *c, int first, const int64_t *in, unfold_args *a) {
  int64_t *dst[4] = {a->k, a->d, a->p, a->s};
  for (int j = 0; j < 4; j++) {
    const tt_value *v = tt_lower_arg(c, first + j);
    if (v->kind != TT_VALUE_INTS || v->u.ints.n != 2)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "kernel_size, dilation, padding and "
                           "stride must have two values each");
    dst[j][0] = v->u.ints.data[0];
    dst[j][1] = v->u.ints.data[1];
    static const char *const kNames[4] = {"kernel_size", "dilation", "padding", "stride"};
    TT_RETURN_IF_ERROR(tt_lower_check_window(c, kNames[j], dst[j], 2));
  }
  for (int i = 0; i < 2; i++) {
    a->in[i] = in[i];
    if (a->k[i] < 1 || a->d[i] < 1 || a->s[i] < 1 || a->p[i] < 0)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "kernel %" PRId64 ", dilation %" PRId64
                           ", stride %" PRId64 " must be positive, padding %" PRId64
                           " non-negative", a->k[i], a->d[i], a->s[i], a->p[i]);
    int64_t span = in[i] + 2 * a->p[i] - a->d[i] * (a->k[i] - 1) - 1;
    a->out[i] = span < 0 ? 0 : span / a->s[i] + 1;
    if (a->out[i] < 1)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "image of %" PRId64 " (padding %" PRId64
                           ") is smaller than the dilated kernel", in[i], a->p[i]);
  }
  return NULL;
}

// im2col(self [N, C, H, W] or [C, H, W], kernel_size, dilation, padding,
// stride) -> [N, C*kh*kw, L]: one strided slice of the padded image per
// kernel offset, stacked after the channel dim.
static tt_status lower_im2col(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  TT_RETURN_IF_ERROR(check_image(c, &xt, 2));
  unfold_args a;
  TT_RETURN_IF_ERROR(read_unfold(c, 1, xt.dims + xt.rank - 2, &a));
  int64_t kk = a.k[0] * a.k[1];
  if (kk > 256)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "kernels of %" PRId64 " positions", kk);
  tt_hlo *b = tt_lower_hlo(c);
  int64_t n = xt.rank == 4 ? xt.dims[0] : 1, ch = xt.dims[xt.rank - 3];
  int64_t x4[4] = {n, ch, a.in[0], a.in[1]}, lo[4] = {0, 0, a.p[0], a.p[1]},
          none[4] = {0};
  tt_hv x = tt_hlo_reshape(b, tt_lower_tensor(c, 0), 4, x4);
  x = tt_hlo_pad(b, x, tt_hlo_const(b, xt.dtype, 0), lo, lo, none);
  int64_t piece[5] = {n, ch, 1, a.out[0], a.out[1]};
  tt_hv parts[256];
  for (int64_t i = 0; i < a.k[0]; i++)
    for (int64_t j = 0; j < a.k[1]; j++) {
      int64_t st[4] = {0, 0, i * a.d[0], j * a.d[1]};
      int64_t lim[4] = {n, ch, st[2] + (a.out[0] - 1) * a.s[0] + 1,
                        st[3] + (a.out[1] - 1) * a.s[1] + 1};
      int64_t step[4] = {1, 1, a.s[0], a.s[1]};
      parts[i * a.k[1] + j] = tt_hlo_reshape(b, tt_hlo_slice(b, x, st, lim, step), 5, piece);
    }
  tt_hv y = kk == 1 ? parts[0] : tt_hlo_concatenate(b, parts, (int)kk, 2);
  int64_t rd[3] = {n, ch * kk, a.out[0] * a.out[1]};
  y = xt.rank == 4 ? tt_hlo_reshape(b, y, 3, rd) : tt_hlo_reshape(b, y, 2, rd + 1);
  tt_lower_result(c, y);
  return NULL;
}

// col2im(self [N, C*kh*kw, L] or [C*kh*kw, L], output_size, kernel_size,
// dilation, padding, stride) -> [N, C, H, W]: the transpose of im2col; each
// kernel offset's blocks are spread back (interior padding = stride - 1)
// onto the padded image and summed, then the padding is cut.
static tt_status lower_col2im(tt_lower_ctx *c) {
  tt_hlo_type xt = tt_lower_tensor_type(c, 0, -1);
  const tt_value *o = tt_lower_arg(c, 1);
  if ((xt.rank != 2 && xt.rank != 3) || o->kind != TT_VALUE_INTS || o->u.ints.n != 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "expected a 2D or 3D input and 2 output "
                         "sizes, got %dD", (int)xt.rank);
  bool empty = false;  // ATen's check (its text differs from im2col's)
  for (int d = xt.rank - 2; d < xt.rank; d++) empty |= xt.dims[d] == 0;
  if (empty) {
    char s[96];
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "Expected 2D or 3D (batch mode) tensor for "
                         "input with possibly 0 batch size and non-zero dimensions for input, "
                         "but got: %s", tt_shape_str(&xt, s, sizeof s));
  }
  unfold_args a;
  TT_RETURN_IF_ERROR(read_unfold(c, 2, o->u.ints.data, &a));
  int64_t kk = a.k[0] * a.k[1], rows = xt.dims[xt.rank - 2];
  if (rows % kk || xt.dims[xt.rank - 1] != a.out[0] * a.out[1])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "input of %" PRId64 " x %" PRId64 " doesn't "
                         "fit a %" PRId64 "x%" PRId64 " kernel and %" PRId64 "x%" PRId64
                         " blocks", rows, xt.dims[xt.rank - 1], a.k[0], a.k[1], a.out[0],
                         a.out[1]);
  tt_hlo *b = tt_lower_hlo(c);
  tt_dtype acc = tt_opmath(xt.dtype);
  int64_t n = xt.rank == 3 ? xt.dims[0] : 1, ch = rows / kk;
  int64_t x5[5] = {n, ch, kk, a.out[0], a.out[1]};
  tt_hv x = tt_hlo_reshape(b, tt_hlo_convert(b, tt_lower_tensor(c, 0), acc), 5, x5);
  int64_t ph = a.in[0] + 2 * a.p[0], pw = a.in[1] + 2 * a.p[1];
  tt_hv zero = tt_hlo_const(b, acc, 0), sum = TT_HV_INVALID;
  for (int64_t i = 0; i < a.k[0]; i++)
    for (int64_t j = 0; j < a.k[1]; j++) {
      int64_t q = i * a.k[1] + j;
      int64_t st[5] = {0, 0, q, 0, 0}, lim[5] = {n, ch, q + 1, a.out[0], a.out[1]},
              one[5] = {1, 1, 1, 1, 1}, p4[4] = {n, ch, a.out[0], a.out[1]};
      tt_hv v = tt_hlo_reshape(b, tt_hlo_slice(b, x, st, lim, one), 4, p4);
      int64_t lo[4] = {0, 0, i * a.d[0], j * a.d[1]}, in4[4] = {0, 0, a.s[0] - 1, a.s[1] - 1};
      int64_t hi[4] = {0, 0, ph - lo[2] - ((a.out[0] - 1) * a.s[0] + 1),
                       pw - lo[3] - ((a.out[1] - 1) * a.s[1] + 1)};
      v = tt_hlo_pad(b, v, zero, lo, hi, in4);
      sum = q ? tt_hlo_binary(b, TT_HLO_ADD, sum, v) : v;
    }
  int64_t st[4] = {0, 0, a.p[0], a.p[1]}, lim[4] = {n, ch, a.p[0] + a.in[0], a.p[1] + a.in[1]},
          one[4] = {1, 1, 1, 1};
  tt_hv y = tt_hlo_convert(b, tt_hlo_slice(b, sum, st, lim, one), xt.dtype);
  int64_t r4[4] = {n, ch, a.in[0], a.in[1]};
  tt_lower_result(c, xt.rank == 3 ? y : tt_hlo_reshape(b, y, 3, r4 + 1));
  return NULL;
}

// --- the table -------------------------------------------------------------------------------

#define R(name, fn) {"aten::" name, fn, 0}
#define R4(op, fn)                                                                   \
  R(op, lower_##fn), R(op ".out", lower_##fn), R(op "_backward", lower_##fn##_backward), \
      R(op "_backward.grad_input", lower_##fn##_backward)
static const tt_rule kRules[] = {
    R4("upsample_nearest1d", nearest1d),
    R4("upsample_nearest2d", nearest2d),
    R4("upsample_nearest3d", nearest3d),
    R4("_upsample_nearest_exact1d", nearest_exact1d),
    R4("_upsample_nearest_exact2d", nearest_exact2d),
    R4("_upsample_nearest_exact3d", nearest_exact3d),
    R4("upsample_linear1d", linear1d),
    R4("upsample_bilinear2d", bilinear2d),
    R4("upsample_trilinear3d", trilinear3d),
    R4("upsample_bicubic2d", bicubic2d),
    R4("_upsample_bilinear2d_aa", bilinear2d_aa),
    R4("_upsample_bicubic2d_aa", bicubic2d_aa),
    R4("reflection_pad1d", reflection_pad1d),
    R4("reflection_pad2d", reflection_pad2d),
    R4("reflection_pad3d", reflection_pad3d),
    R4("replication_pad1d", replication_pad1d),
    R4("replication_pad2d", replication_pad2d),
    R4("replication_pad3d", replication_pad3d),
    R("glu", lower_glu), R("glu.out", lower_glu),
    R("glu_backward", lower_glu_backward), R("glu_backward.grad_input", lower_glu_backward),
    R("_adaptive_avg_pool3d", lower_adaptive_avg_pool3d),
    R("_adaptive_avg_pool3d.out", lower_adaptive_avg_pool3d),
    R("_adaptive_avg_pool3d_backward", lower_adaptive_avg_pool3d_backward),
    R("_adaptive_avg_pool3d_backward.out", lower_adaptive_avg_pool3d_backward),
    R4("adaptive_max_pool2d", adaptive_max_pool2d),
    R4("adaptive_max_pool3d", adaptive_max_pool3d),
    R("max_pool3d_with_indices", lower_max_pool3d),
    R("max_pool3d_with_indices.out", lower_max_pool3d),
    R("max_pool3d_with_indices_backward", lower_max_pool3d_backward),
    R("max_pool3d_with_indices_backward.grad_input", lower_max_pool3d_backward),
    R4("avg_pool3d", avg_pool3d),
    R("max_unpool2d", lower_max_unpool2d), R("max_unpool2d.out", lower_max_unpool2d),
    R("max_unpool3d", lower_max_unpool3d), R("max_unpool3d.out", lower_max_unpool3d),
    R("nll_loss2d_forward", lower_nll_loss2d_forward),
    R("nll_loss2d_forward.output", lower_nll_loss2d_forward),
    R("nll_loss2d_backward", lower_nll_loss2d_backward),
    R("nll_loss2d_backward.grad_input", lower_nll_loss2d_backward),
    R("im2col", lower_im2col), R("im2col.out", lower_im2col),
    R("col2im", lower_col2im), R("col2im.out", lower_col2im),
    R("_prelu_kernel", lower_prelu), R("_prelu_kernel_backward", lower_prelu_backward),
};
#undef R4
#undef R

const tt_rule_table tt_rules_spatial = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
