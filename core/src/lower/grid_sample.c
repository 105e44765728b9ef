// grid_sample.c — F.grid_sample on 4-d and 5-d inputs (spatial
// transformers, flow warping, deformable attention, volumes):
//
//   grid_sampler_2d(input [N, C, H, W], grid [N, Ho, Wo, 2],
//                   interpolation_mode, padding_mode, align_corners)
//       -> [N, C, Ho, Wo]
//   grid_sampler_3d(input [N, C, D, H, W], grid [N, Do, Ho, Wo, 3], ...)
//       -> [N, C, Do, Ho, Wo]
//   grid_sampler_{2,3}d_backward(grad_output, input, grid,
//       interpolation_mode, padding_mode, align_corners, output_mask)
//       -> (grad_input, grad_grid)
//
// As PyTorch's CPU kernels: grid component 0 indexes W, 1 H, 2 D; a
// coordinate is unnormalised from [-1, 1] (align_corners: to the corner
// pixels' centres, else to their outer edges), then clipped (border) or
// reflected and clipped (reflection); (bi/tri)linear mixes the 2^d
// neighbours, nearest takes the nearest one (ties to even); with zeros
// padding a neighbour outside the input adds nothing. Computed in the
// opmath dtype.
//
// Each neighbour is one gather of [N, P] rows (P output points) of the
// input laid out [N, spatial..., C] (all channels at once); the backward
// scatter-adds the weighted gradient into that layout, and the grid's
// gradient follows the weights' derivatives times the
// unnormalise/clip/reflect chain's.
//
// Bicubic (2-d only, as in PyTorch) takes the 4 x 4 neighbours around
// floor(src) with cubic convolution weights (A = -0.75), each neighbour
// padded on its own (get_value_bounded).
#include "lower/lower.h"

enum { MODE_BILINEAR = 0, MODE_NEAREST = 1, MODE_BICUBIC = 2 };
enum { PAD_ZEROS = 0, PAD_BORDER = 1, PAD_REFLECTION = 2 };

typedef struct gs {
  tt_lower_ctx *c;
  tt_hlo *b;
  tt_dtype acc;
  int nsp;                  // spatial dims: 2 or 3
  int64_t n, ch;
  int64_t in[3], out[3];    // spatial sizes, input's order (D,) H, W
  int64_t rows, p;          // input points, output points
  int mode, pad;
  bool align;
  tt_hv table;              // input as [N, rows, C], acc
  tt_hv src[3], dsrc[3];    // per grid component k: source coordinate [N, P]
                            // and d src / d grid
} gs;

// Input size along grid component k (0: W, 1: H, 2: D).
static int64_t comp_size(const gs *s, int k) { return s->in[s->nsp - 1 - k]; }

static tt_hv k(const gs *s, tt_hv like, double v) { return tt_lower_splat_like(s->c, like, v); }
static tt_hv bin(const gs *s, tt_hlo_binop op, tt_hv x, tt_hv y) { return tt_lower_bin(s->c, op, x, y); }
static tt_hv pick(const gs *s, tt_hv pred, tt_hv x, tt_hv y) { return tt_hlo_select(s->b, pred, x, y); }
static tt_hv cmp(const gs *s, tt_hlo_cmp op, tt_hv x, double v) { return tt_hlo_compare(s->b, op, x, k(s, x, v)); }
static tt_hv both(const gs *s, tt_hv x, tt_hv y) { return tt_lower_bin(s->c, TT_HLO_AND, x, y); }

// PyTorch's checks (check_grid_sampler_common, then _2d / _3d), in its order
// and words, then the sizes every rule below works with.
static tt_status gs_read(tt_lower_ctx *c, int xi, int gi, int mode_arg, int nsp, gs *s) {
  tt_hlo_type xt = tt_lower_tensor_type(c, xi, -1), gt = tt_lower_tensor_type(c, gi, -1);
  char xs[128], gss[128];
  tt_shape_str(&xt, xs, sizeof xs);
  tt_shape_str(&gt, gss, sizeof gss);
  if (xt.rank < 1 || gt.rank < 1 || xt.dims[0] != gt.dims[0])
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grid_sampler(): expected grid and input to "
                         "have same batch size, but got input with sizes %s and grid with "
                         "sizes %s", xs, gss);
  if (gt.dims[gt.rank - 1] != xt.rank - 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grid_sampler(): expected grid to have size "
                         "%d in last dimension, but got grid with sizes %s", xt.rank - 2, gss);
  for (int d = 2; d < xt.rank; d++)
    if (xt.dims[d] <= 0)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grid_sampler(): expected input to have "
                           "non-empty spatial dimensions, but input has sizes %s with "
                           "dimension %d being empty", xs, d);
  if (xt.rank != nsp + 2 || gt.rank != nsp + 2)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grid_sampler(): expected %dD input and grid "
                         "with same number of dimensions, but got input with sizes %s and "
                         "grid with sizes %s", nsp + 2, xs, gss);
  int mode = (int)tt_lower_int(c, mode_arg);
  if (nsp == 3 && mode == MODE_BICUBIC)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grid_sampler(): bicubic interpolation only "
                         "supports 4D input");
  if (!tt_dtype_is_float(xt.dtype) || xt.dtype != gt.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grid_sampler(): expected input and grid to "
                         "have same dtype, but input has %s and grid has %s",
                         tt_dtype_name(xt.dtype), tt_dtype_name(gt.dtype));
  *s = (gs){.c = c, .b = tt_lower_hlo(c), .acc = tt_opmath(xt.dtype), .nsp = nsp,
            .n = xt.dims[0], .ch = xt.dims[1], .rows = 1, .p = 1, .mode = mode,
            .pad = (int)tt_lower_int(c, mode_arg + 1), .align = tt_lower_bool(c, mode_arg + 2)};
  for (int d = 0; d < nsp; d++) {
    s->in[d] = xt.dims[2 + d];
    s->out[d] = gt.dims[1 + d];
    // An empty batch or channel dim lets the others be huge: keep the
    // products (rows, points, row strides) in int64.
    if (__builtin_mul_overflow(s->rows, s->in[d], &s->rows) ||
        __builtin_mul_overflow(s->p, s->out[d], &s->p) || s->rows > ((int64_t)1 << 60) ||
        s->p > ((int64_t)1 << 60))
      return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grid_sampler(): input %s or grid %s is "
                           "too large", xs, gss);
  }
  if (mode < MODE_BILINEAR || mode > MODE_BICUBIC)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "unknown interpolation mode %d", mode);
  if (s->pad < PAD_ZEROS || s->pad > PAD_REFLECTION)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "unknown padding mode %d", s->pad);
  return NULL;
}

// clip_coordinates(_set_grad): x in [0, size - 1]; the derivative is 0 where clipped.
static tt_hv clip(const gs *s, tt_hv x, int64_t size, tt_hv *grad) {
  tt_hv inside = tt_lower_bin(s->c, TT_HLO_AND, cmp(s, TT_HLO_GT, x, 0), cmp(s, TT_HLO_LT, x, (double)(size - 1)));
  *grad = bin(s, TT_HLO_MUL, *grad, pick(s, inside, k(s, x, 1), k(s, x, 0)));
  return tt_hlo_clamp(s->b, k(s, x, 0), x, k(s, x, (double)(size - 1)));
}

// reflect_coordinates(_set_grad) over [twice_lo / 2, twice_hi / 2].
static tt_hv reflect(const gs *s, tt_hv x, int64_t twice_lo, int64_t twice_hi, tt_hv *grad) {
  if (twice_lo == twice_hi) {
    *grad = k(s, x, 0);
    return k(s, x, 0);
  }
  double lo = (double)twice_lo / 2, span = (double)(twice_hi - twice_lo) / 2;
  tt_hv d = bin(s, TT_HLO_SUB, x, k(s, x, lo));
  tt_hv sign = pick(s, cmp(s, TT_HLO_LT, d, 0), k(s, x, -1), k(s, x, 1));
  d = tt_hlo_unary(s->b, TT_HLO_ABS, d);
  tt_hv extra = bin(s, TT_HLO_REM, d, k(s, x, span));
  tt_hv flips = tt_hlo_unary(s->b, TT_HLO_FLOOR, bin(s, TT_HLO_DIV, d, k(s, x, span)));
  tt_hv even = cmp(s, TT_HLO_EQ, bin(s, TT_HLO_REM, flips, k(s, x, 2)), 0);
  *grad = bin(s, TT_HLO_MUL, *grad, pick(s, even, sign, tt_hlo_unary(s->b, TT_HLO_NEG, sign)));
  return pick(s, even, bin(s, TT_HLO_ADD, extra, k(s, x, lo)),
              bin(s, TT_HLO_ADD, bin(s, TT_HLO_SUB, k(s, x, span), extra), k(s, x, lo)));
}

// grid_sampler_unnormalize(_set_grad): v in [-1, 1] to pixel coordinates.
static tt_hv unnormalize(const gs *s, tt_hv v, int64_t size, tt_hv *grad) {
  if (s->align) {
    *grad = k(s, v, (double)(size - 1) / 2);
    return bin(s, TT_HLO_MUL, bin(s, TT_HLO_DIV, bin(s, TT_HLO_ADD, v, k(s, v, 1)), k(s, v, 2)),
               k(s, v, (double)(size - 1)));
  }
  *grad = k(s, v, (double)size / 2);
  return bin(s, TT_HLO_DIV, bin(s, TT_HLO_SUB, bin(s, TT_HLO_MUL, bin(s, TT_HLO_ADD, v, k(s, v, 1)),
                                                 k(s, v, (double)size)), k(s, v, 1)), k(s, v, 2));
}

// compute_coordinates(_set_grad): the padding mode applied to pixel
// coordinate x (grad multiplied by its derivative).
static tt_hv pad_coordinate(const gs *s, tt_hv x, int64_t size, tt_hv *grad) {
  if (s->pad == PAD_BORDER) return clip(s, x, size, grad);
  if (s->pad == PAD_REFLECTION) {
    x = s->align ? reflect(s, x, 0, 2 * (size - 1), grad) : reflect(s, x, -1, 2 * size - 1, grad);
    return clip(s, x, size, grad);
  }
  return x;
}

// [N, C, spatial...] as [N, P or rows, C] (perm to channels last), and back.
static tt_hv to_rows(const gs *s, tt_hv x, int64_t count) {
  int64_t perm[5] = {0};
  for (int d = 0; d < s->nsp; d++) perm[1 + d] = 2 + d;
  perm[s->nsp + 1] = 1;
  int64_t dims[3] = {s->n, count, s->ch};
  return tt_hlo_reshape(s->b, tt_hlo_transpose(s->b, x, perm), 3, dims);
}

static tt_hv from_rows(const gs *s, tt_hv v, const int64_t *sp, tt_dtype d) {
  int64_t dims[5] = {s->n}, perm[5] = {0, s->nsp + 1};
  for (int i = 0; i < s->nsp; i++) {
    dims[1 + i] = sp[i];
    perm[2 + i] = 1 + i;
  }
  dims[s->nsp + 1] = s->ch;
  tt_hv r = tt_hlo_transpose(s->b, tt_hlo_reshape(s->b, v, s->nsp + 2, dims), perm);
  return tt_lower_convert(s->c, r, d);
}

// The input as rows and the grid's source coordinates.
static void gs_prepare(gs *s, int xi, int gi) {
  tt_hlo *b = s->b;
  s->table = to_rows(s, tt_lower_convert(s->c, tt_lower_tensor(s->c, xi), s->acc), s->rows);
  tt_hv g = tt_lower_convert(s->c, tt_lower_tensor(s->c, gi), s->acc);
  int64_t flat[3] = {s->n, s->p, s->nsp}, np[2] = {s->n, s->p}, one[3] = {1, 1, 1};
  g = tt_hlo_reshape(b, g, 3, flat);
  for (int c = 0; c < s->nsp; c++) {
    int64_t lo[3] = {0, 0, c}, hi[3] = {s->n, s->p, c + 1};
    tt_hv v = tt_hlo_reshape(b, tt_hlo_slice(b, g, lo, hi, one), 2, np);
    // grid_sampler_compute_source_index; bicubic pads each neighbour instead.
    s->src[c] = unnormalize(s, v, comp_size(s, c), &s->dsrc[c]);
    if (s->mode != MODE_BICUBIC) s->src[c] = pad_coordinate(s, s->src[c], comp_size(s, c), &s->dsrc[c]);
  }
}

// One neighbour at integral coordinates crd[k] ([N, P], acc): its gather
// coordinates ([N, P, 2]: batch, row), whether it lies inside the input,
// and its weight.
typedef struct tap {
  tt_hv crd, inside, weight;
} tap;

static tap make_tap(const gs *s, const tt_hv *at, tt_hv weight) {
  tt_hv inside = TT_HV_INVALID, row = TT_HV_INVALID;
  int64_t stride = 1;
  for (int c = 0; c < s->nsp; c++) {
    double hi = (double)(comp_size(s, c) - 1);
    tt_hv in = both(s, cmp(s, TT_HLO_GE, at[c], 0), cmp(s, TT_HLO_LE, at[c], hi));
    inside = c == 0 ? in : both(s, inside, in);
    tt_hv i = tt_hlo_convert(s->b, tt_hlo_clamp(s->b, k(s, at[c], 0), at[c], k(s, at[c], hi)), TT_I64);
    tt_hv term = bin(s, TT_HLO_MUL, i, tt_lower_splat_like(s->c, i, (double)stride));
    row = c == 0 ? term : bin(s, TT_HLO_ADD, row, term);
    stride *= comp_size(s, c);
  }
  int64_t np[2] = {s->n, s->p}, np1[3] = {s->n, s->p, 1};
  tt_hlo_type bt = tt_hlo_make_type(TT_I64, 2, np);
  tt_hv parts[2] = {tt_hlo_reshape(s->b, tt_hlo_iota(s->b, &bt, 0), 3, np1),
                    tt_hlo_reshape(s->b, row, 3, np1)};
  return (tap){tt_hlo_concatenate(s->b, parts, 2, 2), inside, weight};
}

// A [N, P] value as [N, P, C] (the same for every channel).
static tt_hv per_row(const gs *s, tt_hv v, tt_hv like) {
  int64_t np1[3] = {s->n, s->p, 1};
  return tt_lower_expand_like(s->c, tt_hlo_reshape(s->b, v, 3, np1), like);
}

// The table's rows at the tap, 0 outside the input: [N, P, C].
static tt_hv tap_values(const gs *s, const tap *t) {
  static const int64_t offset[1] = {2}, collapsed[2] = {0, 1}, start_map[2] = {0, 1};
  tt_hlo_gather_dims d = {.offset_dims = offset, .n_offset_dims = 1,
                          .collapsed_slice_dims = collapsed, .n_collapsed = 2,
                          .start_index_map = start_map, .n_start_index_map = 2,
                          .index_vector_dim = 2};
  int64_t slice[3] = {1, 1, s->ch};
  tt_hv v = tt_hlo_gather(s->b, s->table, t->crd, &d, slice, NULL);
  return pick(s, per_row(s, t->inside, v), v, k(s, v, 0));
}

// The corners' pieces for (bi/tri)linear: lo = floor(src), and the two
// factors a corner's weight multiplies, per component.
typedef struct corners {
  tt_hv lo[3], hi[3];
  tt_hv f_lo[3], f_hi[3];  // (lo + 1) - src for the low corner, src - lo for the high
} corners;

static corners make_corners(const gs *s) {
  corners q;
  for (int c = 0; c < s->nsp; c++) {
    q.lo[c] = tt_hlo_unary(s->b, TT_HLO_FLOOR, s->src[c]);
    q.hi[c] = bin(s, TT_HLO_ADD, q.lo[c], k(s, q.lo[c], 1));
    q.f_lo[c] = bin(s, TT_HLO_SUB, q.hi[c], s->src[c]);
    q.f_hi[c] = bin(s, TT_HLO_SUB, s->src[c], q.lo[c]);
  }
  return q;
}

// Corner `bits` (bit c: high along component c; PyTorch's order, W fastest):
// the product of its factors, leaving out component `skip` (-1: none).
static tt_hv corner_product(const gs *s, const corners *q, int bits, int skip) {
  tt_hv w = TT_HV_INVALID;
  for (int c = 0; c < s->nsp; c++) {
    if (c == skip) continue;
    tt_hv f = (bits >> c) & 1 ? q->f_hi[c] : q->f_lo[c];
    w = w == TT_HV_INVALID ? f : bin(s, TT_HLO_MUL, w, f);
  }
  return w;
}

// --- bicubic (2-d) -------------------------------------------------------------------------

// Cubic convolution (A = -0.75) weights of the 4 neighbours floor - 1 ..
// floor + 2 at fraction t, and their derivatives (get_cubic_upsample_coefficients
// and its _grad twin, whose signs the backward follows).
static void cubic_weights(const gs *s, tt_hv t, tt_hv w[4], tt_hv dw[4]) {
  const double a = -0.75;
  tt_hv one = k(s, t, 1);
  // conv1(x) = ((A + 2) x - (A + 3)) x^2 + 1 for |x| <= 1,
  // conv2(x) = ((A x - 5A) x + 8A) x - 4A for 1 < |x| < 2.
  tt_hv xs[4] = {bin(s, TT_HLO_ADD, t, one), t, bin(s, TT_HLO_SUB, one, t),
                 bin(s, TT_HLO_SUB, k(s, t, 2), t)};
  for (int i = 0; i < 4; i++) {
    tt_hv x = xs[i];
    if (i == 0 || i == 3) {
      w[i] = bin(s, TT_HLO_SUB, bin(s, TT_HLO_MUL, bin(s, TT_HLO_ADD, bin(s, TT_HLO_MUL,
                 bin(s, TT_HLO_SUB, bin(s, TT_HLO_MUL, k(s, x, a), x), k(s, x, 5 * a)), x),
                 k(s, x, 8 * a)), x), k(s, x, 4 * a));
    } else {
      w[i] = bin(s, TT_HLO_ADD, bin(s, TT_HLO_MUL, bin(s, TT_HLO_MUL, bin(s, TT_HLO_SUB,
                 bin(s, TT_HLO_MUL, k(s, x, a + 2), x), k(s, x, a + 3)), x), x), one);
    }
  }
  // The derivatives as PyTorch writes them: at x = -1 - t, -t, 1 - t, 2 - t.
  tt_hv x0 = bin(s, TT_HLO_SUB, k(s, t, -1), t), x1 = tt_hlo_unary(s->b, TT_HLO_NEG, t);
  tt_hv x2 = bin(s, TT_HLO_SUB, one, t), x3 = bin(s, TT_HLO_SUB, k(s, t, 2), t);
  dw[0] = bin(s, TT_HLO_SUB, bin(s, TT_HLO_MUL, bin(s, TT_HLO_SUB, bin(s, TT_HLO_MUL, k(s, t, -3 * a), x0),
              k(s, t, 10 * a)), x0), k(s, t, 8 * a));
  dw[1] = bin(s, TT_HLO_MUL, bin(s, TT_HLO_SUB, bin(s, TT_HLO_MUL, k(s, t, -3 * (a + 2)), x1),
              k(s, t, 2 * (a + 3))), x1);
  dw[2] = bin(s, TT_HLO_MUL, bin(s, TT_HLO_SUB, bin(s, TT_HLO_MUL, k(s, t, 3 * (a + 2)), x2),
              k(s, t, 2 * (a + 3))), x2);
  dw[3] = bin(s, TT_HLO_ADD, bin(s, TT_HLO_MUL, bin(s, TT_HLO_SUB, bin(s, TT_HLO_MUL, k(s, t, 3 * a), x3),
              k(s, t, 10 * a)), x3), k(s, t, 8 * a));
}

// The 16 neighbours (j over y outer, i over x inner), each padded as
// get_value_bounded does; wx/wy and dwx/dwy: the per-axis weights and
// derivatives for the backward.
typedef struct cubic {
  tt_hv wx[4], wy[4], dwx[4], dwy[4];
} cubic;

static int cubic_taps(const gs *s, tap out[16], cubic *cb) {
  tt_hv lo[2], base[2][4];
  for (int c = 0; c < 2; c++) {
    lo[c] = tt_hlo_unary(s->b, TT_HLO_FLOOR, s->src[c]);
    tt_hv t = bin(s, TT_HLO_SUB, s->src[c], lo[c]);
    cubic_weights(s, t, c == 0 ? cb->wx : cb->wy, c == 0 ? cb->dwx : cb->dwy);
    for (int i = 0; i < 4; i++) {
      tt_hv at = bin(s, TT_HLO_ADD, lo[c], k(s, lo[c], i - 1)), ignored = k(s, at, 1);
      base[c][i] = pad_coordinate(s, at, comp_size(s, c), &ignored);
    }
  }
  for (int j = 0; j < 4; j++)
    for (int i = 0; i < 4; i++) {
      tt_hv at[2] = {base[0][i], base[1][j]};
      out[j * 4 + i] = make_tap(s, at, bin(s, TT_HLO_MUL, cb->wx[i], cb->wy[j]));
    }
  return 16;
}

// The neighbours of every output point for the mode: 2^nsp (linear; q is
// filled, the backward's derivatives use it), 16 (bicubic; cb is filled) or
// 1 (nearest).
static int taps(const gs *s, tap out[16], corners *q, cubic *cb) {
  if (s->mode == MODE_BICUBIC) return cubic_taps(s, out, cb);
  if (s->mode == MODE_NEAREST) {
    tt_hv at[3];
    for (int c = 0; c < s->nsp; c++) at[c] = tt_hlo_unary(s->b, TT_HLO_ROUND_EVEN, s->src[c]);
    out[0] = make_tap(s, at, k(s, at[0], 1));
    return 1;
  }
  *q = make_corners(s);
  int n = 1 << s->nsp;
  for (int bits = 0; bits < n; bits++) {
    tt_hv at[3];
    for (int c = 0; c < s->nsp; c++) at[c] = (bits >> c) & 1 ? q->hi[c] : q->lo[c];
    out[bits] = make_tap(s, at, corner_product(s, q, bits, -1));
  }
  return n;
}

static tt_status grid_sampler(tt_lower_ctx *c, int nsp) {
  gs s;
  TT_RETURN_IF_ERROR(gs_read(c, 0, 1, 2, nsp, &s));
  gs_prepare(&s, 0, 1);
  corners q;
  cubic cb;
  tap t[16];
  int nt = taps(&s, t, &q, &cb);
  tt_hv out = TT_HV_INVALID;
  for (int i = 0; i < nt; i++) {
    tt_hv v = tap_values(&s, &t[i]);
    tt_hv term = bin(&s, TT_HLO_MUL, v, per_row(&s, t[i].weight, v));
    out = i == 0 ? term : bin(&s, TT_HLO_ADD, out, term);
  }
  tt_lower_result(c, from_rows(&s, out, s.out, tt_lower_tensor_type(c, 0, -1).dtype));
  return NULL;
}

// grad_output, input, grid, modes..., output_mask: both gradients are computed.
static tt_status grid_sampler_backward(tt_lower_ctx *c, int nsp) {
  gs s;
  TT_RETURN_IF_ERROR(gs_read(c, 1, 2, 3, nsp, &s));
  gs_prepare(&s, 1, 2);
  tt_hlo *b = s.b;
  tt_hv go = to_rows(&s, tt_lower_convert(c, tt_lower_tensor(c, 0), s.acc), s.p);
  corners q;
  cubic cb;
  tap t[16];
  int nt = taps(&s, t, &q, &cb);
  tt_hv gin = k(&s, s.table, 0), gsrc[3];
  for (int d = 0; d < s.nsp; d++) gsrc[d] = k(&s, s.src[d], 0);
  bool mask[TT_MAX_RANK] = {false, false, true};
  static const int64_t win[1] = {2}, ins[2] = {0, 1}, to_op[2] = {0, 1};
  tt_hlo_scatter_dims sd = {.update_window_dims = win, .n_update_window = 1,
                            .inserted_window_dims = ins, .n_inserted = 2,
                            .scatter_dims_to_operand_dims = to_op, .n_scatter_to_operand = 2,
                            .index_vector_dim = 2};
  for (int i = 0; i < nt; i++) {
    tt_hv upd = pick(&s, per_row(&s, t[i].inside, go),
                     bin(&s, TT_HLO_MUL, go, per_row(&s, t[i].weight, go)), k(&s, go, 0));
    gin = tt_hlo_scatter(b, gin, t[i].crd, upd, &sd, TT_HLO_REDUCE_ADD);
    if (s.mode == MODE_NEAREST) continue;
    tt_hv dot = tt_lower_reduce(c, bin(&s, TT_HLO_MUL, tap_values(&s, &t[i]), go), mask, false,
                                TT_HLO_REDUCE_ADD);
    if (s.mode == MODE_BICUBIC) {  // gix -= val * dwx[i] * wy[j] * gOut, giy likewise
      int ix = i % 4, iy = i / 4;
      gsrc[0] = bin(&s, TT_HLO_SUB, gsrc[0], bin(&s, TT_HLO_MUL, dot, bin(&s, TT_HLO_MUL, cb.dwx[ix], cb.wy[iy])));
      gsrc[1] = bin(&s, TT_HLO_SUB, gsrc[1], bin(&s, TT_HLO_MUL, dot, bin(&s, TT_HLO_MUL, cb.dwy[iy], cb.wx[ix])));
      continue;
    }
    for (int d = 0; d < s.nsp; d++) {
      // d weight / d src_d: the other factors, + for the high corner, - for the low.
      tt_hv rest = corner_product(&s, &q, i, d);
      tt_hv term = bin(&s, TT_HLO_MUL, dot, rest);
      gsrc[d] = bin(&s, (i >> d) & 1 ? TT_HLO_ADD : TT_HLO_SUB, gsrc[d], term);
    }
  }
  tt_lower_result(c, from_rows(&s, gin, s.in, tt_lower_tensor_type(c, 1, -1).dtype));
  int64_t dims1[5] = {s.n};
  for (int d = 0; d < s.nsp; d++) dims1[1 + d] = s.out[d];
  dims1[s.nsp + 1] = 1;
  tt_hv parts[3];
  for (int d = 0; d < s.nsp; d++)
    parts[d] = tt_hlo_reshape(b, bin(&s, TT_HLO_MUL, gsrc[d], s.dsrc[d]), s.nsp + 2, dims1);
  tt_hv gg = tt_hlo_concatenate(b, parts, s.nsp, s.nsp + 1);
  tt_lower_result(c, tt_lower_convert(c, gg, tt_lower_tensor_type(c, 2, -1).dtype));
  return NULL;
}

static tt_status grid_sampler_2d(tt_lower_ctx *c) { return grid_sampler(c, 2); }
static tt_status grid_sampler_3d(tt_lower_ctx *c) { return grid_sampler(c, 3); }
static tt_status grid_sampler_2d_backward(tt_lower_ctx *c) { return grid_sampler_backward(c, 2); }
static tt_status grid_sampler_3d_backward(tt_lower_ctx *c) { return grid_sampler_backward(c, 3); }

static const tt_rule kRules[] = {
    {"aten::grid_sampler_2d", grid_sampler_2d, 0},
    {"aten::grid_sampler_2d_backward", grid_sampler_2d_backward, 0},
    {"aten::grid_sampler_3d", grid_sampler_3d, 0},
    {"aten::grid_sampler_3d_backward", grid_sampler_3d_backward, 0},
};

const tt_rule_table tt_rules_grid_sample = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
