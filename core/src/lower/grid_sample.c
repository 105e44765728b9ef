// grid_sample.c — F.grid_sample on 4-d inputs (spatial transformers, flow
// warping, deformable attention):
//
//   grid_sampler_2d(input [N, C, H, W], grid [N, Ho, Wo, 2],
//                   interpolation_mode, padding_mode, align_corners)
//       -> [N, C, Ho, Wo]
//   grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode,
//                            padding_mode, align_corners, output_mask)
//       -> (grad_input, grad_grid)
//
// As PyTorch's CPU kernels: grid x indexes W and y indexes H; a coordinate is
// unnormalised from [-1, 1] (align_corners: to the corner pixels' centres,
// else to their outer edges), then clipped (border) or reflected and clipped
// (reflection); bilinear mixes the four neighbours, nearest takes the one
// nearest (ties to even); with zeros padding a neighbour outside the input
// adds nothing. Computed in the opmath dtype.
//
// Each neighbour is one gather of [N, Ho*Wo] rows of the input laid out
// [N, H*W, C] (all channels at once); the backward scatter-adds the weighted
// gradient into the same layout, and the grid's gradient follows the
// weights' derivatives times the unnormalise/clip/reflect chain's.
//
// Leaves out: bicubic (mode 2) runs on the CPU.
#include "lower/lower.h"

enum { MODE_BILINEAR = 0, MODE_NEAREST = 1 };
enum { PAD_ZEROS = 0, PAD_BORDER = 1, PAD_REFLECTION = 2 };

typedef struct gs {
  tt_lower_ctx *c;
  tt_hlo *b;
  tt_dtype acc;
  int64_t n, ch, h, w, ho, wo, p;  // p = ho * wo
  int mode, pad;
  bool align;
  tt_hv table;   // input as [N, H*W, C], acc
  tt_hv ix, iy;  // source coordinates [N, P], acc
  tt_hv gx, gy;  // d ix / d grid x, d iy / d grid y [N, P]
} gs;

static tt_hv k(const gs *s, tt_hv like, double v) { return tt_lower_splat_like(s->c, like, v); }
static tt_hv bin(const gs *s, tt_hlo_binop op, tt_hv x, tt_hv y) { return tt_lower_bin(s->c, op, x, y); }
static tt_hv pick(const gs *s, tt_hv pred, tt_hv x, tt_hv y) { return tt_hlo_select(s->b, pred, x, y); }
static tt_hv cmp(const gs *s, tt_hlo_cmp op, tt_hv x, double v) { return tt_hlo_compare(s->b, op, x, k(s, x, v)); }

// PyTorch's checks (check_grid_sampler_common, then _2d), in its order and
// words, then the layouts every rule below works in.
static tt_status gs_read(tt_lower_ctx *c, int xi, int gi, int mode_arg, gs *s) {
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
  if (xt.rank != 4 || gt.rank != 4)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grid_sampler(): expected 4D input and grid "
                         "with same number of dimensions, but got input with sizes %s and "
                         "grid with sizes %s", xs, gss);
  if (!tt_dtype_is_float(xt.dtype) || xt.dtype != gt.dtype)
    return tt_lower_fail(c, TT_INVALID_ARGUMENT, "grid_sampler(): expected input and grid to "
                         "have same dtype, but input has %s and grid has %s",
                         tt_dtype_name(xt.dtype), tt_dtype_name(gt.dtype));
  *s = (gs){.c = c, .b = tt_lower_hlo(c), .acc = tt_opmath(xt.dtype), .n = xt.dims[0],
            .ch = xt.dims[1], .h = xt.dims[2], .w = xt.dims[3], .ho = gt.dims[1],
            .wo = gt.dims[2], .mode = (int)tt_lower_int(c, mode_arg),
            .pad = (int)tt_lower_int(c, mode_arg + 1), .align = tt_lower_bool(c, mode_arg + 2)};
  s->p = s->ho * s->wo;
  if (s->mode != MODE_BILINEAR && s->mode != MODE_NEAREST)
    return tt_lower_fail(c, TT_UNIMPLEMENTED, "interpolation mode %d (bicubic) has no rule",
                         s->mode);
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

// grid_sampler_compute_source_index(_set_grad) of coordinate v along size.
static tt_hv source_index(const gs *s, tt_hv v, int64_t size, tt_hv *grad) {
  tt_hv x;
  if (s->align) {
    x = bin(s, TT_HLO_MUL, bin(s, TT_HLO_DIV, bin(s, TT_HLO_ADD, v, k(s, v, 1)), k(s, v, 2)),
            k(s, v, (double)(size - 1)));
    *grad = k(s, v, (double)(size - 1) / 2);
  } else {
    x = bin(s, TT_HLO_DIV, bin(s, TT_HLO_SUB, bin(s, TT_HLO_MUL, bin(s, TT_HLO_ADD, v, k(s, v, 1)),
                                                  k(s, v, (double)size)), k(s, v, 1)), k(s, v, 2));
    *grad = k(s, v, (double)size / 2);
  }
  if (s->pad == PAD_BORDER) return clip(s, x, size, grad);
  if (s->pad == PAD_REFLECTION) {
    x = s->align ? reflect(s, x, 0, 2 * (size - 1), grad) : reflect(s, x, -1, 2 * size - 1, grad);
    return clip(s, x, size, grad);
  }
  return x;
}

// The input as [N, H*W, C] rows and the grid's source coordinates.
static void gs_prepare(gs *s, int xi, int gi) {
  tt_hlo *b = s->b;
  static const int64_t to_nhwc[4] = {0, 2, 3, 1};
  tt_hv x = tt_lower_convert(s->c, tt_lower_tensor(s->c, xi), s->acc);
  int64_t rows[3] = {s->n, s->h * s->w, s->ch};
  s->table = tt_hlo_reshape(b, tt_hlo_transpose(b, x, to_nhwc), 3, rows);
  tt_hv g = tt_lower_convert(s->c, tt_lower_tensor(s->c, gi), s->acc);
  int64_t flat[3] = {s->n, s->p, 2}, np[2] = {s->n, s->p};
  g = tt_hlo_reshape(b, g, 3, flat);
  int64_t lo0[3] = {0, 0, 0}, lo1[3] = {0, 0, 1}, hi0[3] = {s->n, s->p, 1},
          hi1[3] = {s->n, s->p, 2}, one[3] = {1, 1, 1};
  tt_hv vx = tt_hlo_reshape(b, tt_hlo_slice(b, g, lo0, hi0, one), 2, np);
  tt_hv vy = tt_hlo_reshape(b, tt_hlo_slice(b, g, lo1, hi1, one), 2, np);
  s->ix = source_index(s, vx, s->w, &s->gx);
  s->iy = source_index(s, vy, s->h, &s->gy);
}

// One neighbour at integral (x, y) [N, P]: its gather coordinates into the
// table ([N, P, 2]: batch, row) and whether it lies inside the input.
typedef struct tap {
  tt_hv crd, inside;
  tt_hv weight;  // [N, P], acc
} tap;

static tap make_tap(const gs *s, tt_hv x, tt_hv y, tt_hv weight) {
  tt_lower_ctx *c = s->c;
  tt_hv inside = tt_lower_bin(c, TT_HLO_AND,
      tt_lower_bin(c, TT_HLO_AND, cmp(s, TT_HLO_GE, x, 0), cmp(s, TT_HLO_LE, x, (double)(s->w - 1))),
      tt_lower_bin(c, TT_HLO_AND, cmp(s, TT_HLO_GE, y, 0), cmp(s, TT_HLO_LE, y, (double)(s->h - 1))));
  tt_hv xc = tt_hlo_convert(s->b, tt_hlo_clamp(s->b, k(s, x, 0), x, k(s, x, (double)(s->w - 1))), TT_I64);
  tt_hv yc = tt_hlo_convert(s->b, tt_hlo_clamp(s->b, k(s, y, 0), y, k(s, y, (double)(s->h - 1))), TT_I64);
  tt_hv row = bin(s, TT_HLO_ADD, bin(s, TT_HLO_MUL, yc, tt_lower_splat_like(c, yc, (double)s->w)), xc);
  int64_t np[2] = {s->n, s->p}, np1[3] = {s->n, s->p, 1};
  tt_hlo_type bt = tt_hlo_make_type(TT_I64, 2, np);
  tt_hv parts[2] = {tt_hlo_reshape(s->b, tt_hlo_iota(s->b, &bt, 0), 3, np1),
                    tt_hlo_reshape(s->b, row, 3, np1)};
  return (tap){tt_hlo_concatenate(s->b, parts, 2, 2), inside, weight};
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
  tt_hv in = tt_lower_expand_like(s->c, tt_hlo_reshape(s->b, t->inside, 3, (int64_t[3]){s->n, s->p, 1}), v);
  return pick(s, in, v, k(s, v, 0));
}

// A [N, P] value as [N, P, C] (the same for every channel).
static tt_hv per_row(const gs *s, tt_hv v, tt_hv like) {
  return tt_lower_expand_like(s->c, tt_hlo_reshape(s->b, v, 3, (int64_t[3]){s->n, s->p, 1}), like);
}

// The neighbours of every output point: 4 (bilinear) or 1 (nearest).
static int taps(const gs *s, tap out[4]) {
  if (s->mode == MODE_NEAREST) {
    tt_hv x = tt_hlo_unary(s->b, TT_HLO_ROUND_EVEN, s->ix), y = tt_hlo_unary(s->b, TT_HLO_ROUND_EVEN, s->iy);
    out[0] = make_tap(s, x, y, k(s, x, 1));
    return 1;
  }
  tt_hv x0 = tt_hlo_unary(s->b, TT_HLO_FLOOR, s->ix), y0 = tt_hlo_unary(s->b, TT_HLO_FLOOR, s->iy);
  tt_hv x1 = bin(s, TT_HLO_ADD, x0, k(s, x0, 1)), y1 = bin(s, TT_HLO_ADD, y0, k(s, y0, 1));
  tt_hv dx0 = bin(s, TT_HLO_SUB, s->ix, x0), dx1 = bin(s, TT_HLO_SUB, x1, s->ix);
  tt_hv dy0 = bin(s, TT_HLO_SUB, s->iy, y0), dy1 = bin(s, TT_HLO_SUB, y1, s->iy);
  out[0] = make_tap(s, x0, y0, bin(s, TT_HLO_MUL, dx1, dy1));  // nw
  out[1] = make_tap(s, x1, y0, bin(s, TT_HLO_MUL, dx0, dy1));  // ne
  out[2] = make_tap(s, x0, y1, bin(s, TT_HLO_MUL, dx1, dy0));  // sw
  out[3] = make_tap(s, x1, y1, bin(s, TT_HLO_MUL, dx0, dy0));  // se
  return 4;
}

// [N, P, C] back to [N, C, Ho, Wo] in dtype d.
static tt_hv to_nchw(const gs *s, tt_hv v, tt_dtype d) {
  static const int64_t to_nchw_perm[4] = {0, 3, 1, 2};
  int64_t nhwc[4] = {s->n, s->ho, s->wo, s->ch};
  tt_hv r = tt_hlo_transpose(s->b, tt_hlo_reshape(s->b, v, 4, nhwc), to_nchw_perm);
  return tt_lower_convert(s->c, r, d);
}

static tt_status grid_sampler(tt_lower_ctx *c) {
  gs s;
  TT_RETURN_IF_ERROR(gs_read(c, 0, 1, 2, &s));
  gs_prepare(&s, 0, 1);
  tap t[4];
  int nt = taps(&s, t);
  tt_hv out = TT_HV_INVALID;
  for (int i = 0; i < nt; i++) {
    tt_hv v = tap_values(&s, &t[i]);
    tt_hv term = bin(&s, TT_HLO_MUL, v, per_row(&s, t[i].weight, v));
    out = i == 0 ? term : bin(&s, TT_HLO_ADD, out, term);
  }
  tt_lower_result(c, to_nchw(&s, out, tt_lower_tensor_type(c, 0, -1).dtype));
  return NULL;
}

// d weight / d ix and d weight / d iy of bilinear tap i (nw, ne, sw, se).
static void weight_grads(const gs *s, int i, tt_hv *wx, tt_hv *wy) {
  tt_hv x0 = tt_hlo_unary(s->b, TT_HLO_FLOOR, s->ix), y0 = tt_hlo_unary(s->b, TT_HLO_FLOOR, s->iy);
  tt_hv dx0 = bin(s, TT_HLO_SUB, s->ix, x0), dy0 = bin(s, TT_HLO_SUB, s->iy, y0);
  tt_hv dx1 = bin(s, TT_HLO_SUB, bin(s, TT_HLO_ADD, x0, k(s, x0, 1)), s->ix);
  tt_hv dy1 = bin(s, TT_HLO_SUB, bin(s, TT_HLO_ADD, y0, k(s, y0, 1)), s->iy);
  bool east = i == 1 || i == 3, south = i >= 2;
  tt_hv ry = south ? dy0 : dy1, rx = east ? dx0 : dx1;
  *wx = east ? ry : tt_hlo_unary(s->b, TT_HLO_NEG, ry);
  *wy = south ? rx : tt_hlo_unary(s->b, TT_HLO_NEG, rx);
}

// grad_output, input, grid, modes..., output_mask: both gradients are computed.
static tt_status grid_sampler_backward(tt_lower_ctx *c) {
  gs s;
  TT_RETURN_IF_ERROR(gs_read(c, 1, 2, 3, &s));
  gs_prepare(&s, 1, 2);
  tt_hlo *b = s.b;
  static const int64_t to_nhwc[4] = {0, 2, 3, 1};
  int64_t npc[3] = {s.n, s.p, s.ch};
  tt_hv go = tt_lower_convert(c, tt_lower_tensor(c, 0), s.acc);
  go = tt_hlo_reshape(b, tt_hlo_transpose(b, go, to_nhwc), 3, npc);
  tap t[4];
  int nt = taps(&s, t);
  tt_hv gin = k(&s, s.table, 0), gix = k(&s, s.ix, 0), giy = k(&s, s.iy, 0);
  bool mask[TT_MAX_RANK] = {false, false, true};
  static const int64_t win[1] = {2}, ins[2] = {0, 1}, to_op[2] = {0, 1};
  tt_hlo_scatter_dims sd = {.update_window_dims = win, .n_update_window = 1,
                            .inserted_window_dims = ins, .n_inserted = 2,
                            .scatter_dims_to_operand_dims = to_op, .n_scatter_to_operand = 2,
                            .index_vector_dim = 2};
  for (int i = 0; i < nt; i++) {
    tt_hv in = per_row(&s, t[i].inside, go);
    tt_hv upd = pick(&s, in, bin(&s, TT_HLO_MUL, go, per_row(&s, t[i].weight, go)), k(&s, go, 0));
    gin = tt_hlo_scatter(b, gin, t[i].crd, upd, &sd, TT_HLO_REDUCE_ADD);
    if (s.mode != MODE_BILINEAR) continue;
    tt_hv dot = tt_lower_reduce(c, bin(&s, TT_HLO_MUL, tap_values(&s, &t[i]), go), mask, false,
                                TT_HLO_REDUCE_ADD);
    tt_hv wx, wy;
    weight_grads(&s, i, &wx, &wy);
    gix = bin(&s, TT_HLO_ADD, gix, bin(&s, TT_HLO_MUL, dot, wx));
    giy = bin(&s, TT_HLO_ADD, giy, bin(&s, TT_HLO_MUL, dot, wy));
  }
  static const int64_t to_nchw_perm[4] = {0, 3, 1, 2};
  int64_t nhwc[4] = {s.n, s.h, s.w, s.ch};
  tt_hv gi = tt_hlo_transpose(b, tt_hlo_reshape(b, gin, 4, nhwc), to_nchw_perm);
  tt_lower_result(c, tt_lower_convert(c, gi, tt_lower_tensor_type(c, 1, -1).dtype));
  int64_t np1[4] = {s.n, s.ho, s.wo, 1};
  tt_hv parts[2] = {tt_hlo_reshape(b, bin(&s, TT_HLO_MUL, gix, s.gx), 4, np1),
                    tt_hlo_reshape(b, bin(&s, TT_HLO_MUL, giy, s.gy), 4, np1)};
  tt_hv gg = tt_hlo_concatenate(b, parts, 2, 3);
  tt_lower_result(c, tt_lower_convert(c, gg, tt_lower_tensor_type(c, 2, -1).dtype));
  return NULL;
}

static const tt_rule kRules[] = {
    {"aten::grid_sampler_2d", grid_sampler, 0},
    {"aten::grid_sampler_2d_backward", grid_sampler_backward, 0},
};

const tt_rule_table tt_rules_grid_sample = {kRules, (int)(sizeof kRules / sizeof kRules[0])};
