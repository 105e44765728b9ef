// The lowering context: turns storages + views into program parameters and
// values for rules, and rule results into fresh tensors or writes through
// views. See lower.h (the rules' side) and ctx.h (the executor's side).
//
// Reading a view: the storage is one flat parameter; a dense view is a slice
// (dynamic when the offset is non-zero, so offsets never recompile) plus a
// reshape; a permuted dense view adds a transpose; expanded (stride-0) dims
// become a broadcast; anything else is a gather with computed indices.
// Writing mirrors it: the whole storage is replaced, or the view is patched
// with dynamic_update_slice / scatter and the storage gets the new buffer.
//
// Strict eager lowers one op into a module of its own. Fused eager lowers
// ops into a graph (tt_lower_into_graph): a storage the graph already holds
// is read from its value there instead of a parameter, and the values of the
// op's outputs go back to the recorder instead of into a finished module.
#include "lower/ctx.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tt_lower_ctx {
  const tt_op_call *call;
  const tt_rule *rule;
  tt_lower_options opts;
  const tt_lower_graph *graph;  // NULL in strict eager
  char op_name[96];  // "add.Tensor"
  tt_hlo *b;
  tt_slot *slots;
  tt_storage_facts *facts;  // per slot: its storage, from the executor
  int nslots;
  tt_hv *slot_val;     // materialised view per slot
  tt_hv *group_param;  // storage parameter per group (slot index)
  tt_hv *group_cur;    // storage value after this program's writes
  tt_hv *offset_param; // offset parameter per slot
  tt_param *params;
  tt_hv *param_vals;   // builder value of each parameter
  int nparams, cap_params;
  tt_hv *results;
  int nresults, cap_results;
  tt_check *checks;    // device-side checks, and their i64[2] values
  tt_hv *check_vals;
  int nchecks, cap_checks;
  bool any_cast;
};

// --- slots ---------------------------------------------------------------------------

int tt_call_slots(const tt_op_call *call, tt_slot *out, int cap) {
  int n = 0;
  for (int i = 0; i < call->nargs; i++) {
    const tt_value *v = &call->args[i];
    int nitems = v->kind == TT_VALUE_LIST ? v->u.list.n : 1;
    for (int j = 0; j < nitems; j++) {
      const tt_value *it = v->kind == TT_VALUE_LIST ? &v->u.list.items[j] : v;
      if (it->kind != TT_VALUE_TENSOR || !it->u.tensor.storage) continue;
      if (n < cap) {
        out[n] = (tt_slot){i, v->kind == TT_VALUE_LIST ? j : -1,
                           &it->u.tensor, n};
        for (int k = 0; k < n; k++) {
          if (out[k].t->storage == it->u.tensor.storage) {
            out[n].group = out[k].group;
            break;
          }
        }
      }
      n++;
    }
  }
  return n;
}

static tt_dtype slot_buffer_dtype(const tt_lower_ctx *c, int slot) {
  return tt_facts_buffer_dtype(&c->facts[slot], c->slots[slot].t->dtype);
}

static int64_t slot_buffer_numel(const tt_lower_ctx *c, int slot) {
  return tt_facts_buffer_numel(&c->facts[slot], c->slots[slot].t->dtype);
}

static int find_slot(const tt_lower_ctx *c, int arg, int item) {
  for (int s = 0; s < c->nslots; s++)
    if (c->slots[s].arg == arg && c->slots[s].item == item) return s;
  return -1;
}

// --- parameters ---------------------------------------------------------------------

static tt_hv add_param(tt_lower_ctx *c, tt_param p, const tt_hlo_type *t) {
  if (c->nparams == c->cap_params) {
    int cap = c->cap_params ? 2 * c->cap_params : 8;
    tt_param *np = realloc(c->params, (size_t)cap * sizeof *np);
    if (np) c->params = np;
    tt_hv *nv = np ? realloc(c->param_vals, (size_t)cap * sizeof *nv) : NULL;
    if (!nv) {
      tt_hlo_fail(c->b, tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory"));
      return TT_HV_INVALID;
    }
    c->param_vals = nv;
    c->cap_params = cap;
  }
  tt_hv v = tt_hlo_param(c->b, t);
  c->params[c->nparams] = p;
  c->param_vals[c->nparams++] = v;
  return v;
}

// The value an enclosing graph holds for the slot's storage, or invalid.
static tt_hv graph_value(const tt_lower_ctx *c, int slot) {
  if (!c->graph) return TT_HV_INVALID;
  return c->graph->value_of(c->graph->ctx, c->slots[slot].t->storage);
}

// The dtype of the slot storage's flat buffer (its graph value's, in a graph).
static tt_dtype buffer_dtype(const tt_lower_ctx *c, int slot) {
  tt_hv v = graph_value(c, slot);
  const tt_hlo_type *ty = v == TT_HV_INVALID ? NULL : tt_hlo_type_of(c->b, v);
  return ty ? ty->dtype : slot_buffer_dtype(c, slot);
}

static tt_hv storage_param(tt_lower_ctx *c, int slot) {
  int g = c->slots[slot].group;
  if (c->group_param[g] != TT_HV_INVALID) return c->group_param[g];
  c->group_param[g] = graph_value(c, g);
  if (c->group_param[g] != TT_HV_INVALID) return c->group_param[g];
  tt_param p = {.kind = TT_PARAM_STORAGE, .slot = g, .arg = -1,
                .dtype = slot_buffer_dtype(c, g),
                .numel = slot_buffer_numel(c, g)};
  tt_hlo_type ty = tt_hlo_make_type(p.dtype, 1, &p.numel);
  c->group_param[g] = add_param(c, p, &ty);
  return c->group_param[g];
}

static tt_hv offset_value(tt_lower_ctx *c, int slot) {
  if (c->slots[slot].t->offset == 0) return tt_hlo_const_i(c->b, TT_I64, 0);
  if (c->offset_param[slot] != TT_HV_INVALID) return c->offset_param[slot];
  tt_param p = {.kind = TT_PARAM_OFFSET, .slot = slot, .arg = -1,
                .dtype = TT_I64};
  tt_hlo_type ty = tt_hlo_make_type(TT_I64, 0, NULL);
  c->offset_param[slot] = add_param(c, p, &ty);
  return c->offset_param[slot];
}

// --- view geometry --------------------------------------------------------------------

typedef struct view {
  int rank;
  int64_t sizes[TT_MAX_RANK];
  int64_t strides[TT_MAX_RANK];
} view;

static int64_t view_numel(const view *v) {
  int64_t n = 1;
  for (int i = 0; i < v->rank; i++) n *= v->sizes[i];
  return n;
}

// Dense row-major, ignoring size-1 dims (their stride is meaningless).
static bool is_dense(const view *v) {
  int64_t expect = 1;
  for (int i = v->rank - 1; i >= 0; i--) {
    if (v->sizes[i] == 1) continue;
    if (v->strides[i] != expect) return false;
    expect *= v->sizes[i];
  }
  return true;
}

// If the view is a permutation of a dense layout, writes `order` (dims by
// decreasing stride) and returns true.
static bool dense_permutation(const view *v, int *order) {
  for (int i = 0; i < v->rank; i++) order[i] = i;
  for (int i = 1; i < v->rank; i++) {  // insertion sort, stable
    int d = order[i], j = i;
    while (j > 0 && v->strides[order[j - 1]] < v->strides[d]) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = d;
  }
  view p = {.rank = v->rank};
  for (int i = 0; i < v->rank; i++) {
    p.sizes[i] = v->sizes[order[i]];
    p.strides[i] = v->strides[order[i]];
  }
  return is_dense(&p);
}

// Flat element indices of the view (i64, shape = view sizes), offset added.
static tt_hv view_indices(tt_lower_ctx *c, int slot, const view *v) {
  tt_hlo_type it = tt_hlo_make_type(TT_I64, v->rank, v->sizes);
  tt_hv idx = tt_hlo_splat_i(c->b, &it, 0);
  for (int d = 0; d < v->rank; d++) {
    if (v->sizes[d] == 1 || v->strides[d] == 0) continue;
    tt_hv io = tt_hlo_iota(c->b, &it, d);
    tt_hv st = tt_hlo_splat_i(c->b, &it, v->strides[d]);
    idx = tt_hlo_binary(c->b, TT_HLO_ADD, idx,
                        tt_hlo_binary(c->b, TT_HLO_MUL, io, st));
  }
  tt_hv off = offset_value(c, slot);
  int64_t none[1];
  tt_hv offb = tt_hlo_broadcast_in_dim(c->b, off, v->rank, v->sizes, none);
  return tt_hlo_binary(c->b, TT_HLO_ADD, idx, offb);
}

static const int64_t kZero = 0, kOne = 1;

static tt_hv gather_view(tt_lower_ctx *c, int slot, tt_hv flat, const view *v,
                         tt_dtype d) {
  // One flat gather of numel elements, then the view's shape: a rank-r batch
  // of indices would need rank r + 1 (past TT_MAX_RANK for a rank-8 view),
  // and XLA compiles high-rank gathers slowly.
  int64_t numel = view_numel(v), two[2] = {numel, 1};
  tt_hv idx = tt_hlo_reshape(c->b, view_indices(c, slot, v), 2, two);
  tt_hlo_gather_dims gd = {
      .collapsed_slice_dims = &kZero, .n_collapsed = 1,
      .start_index_map = &kZero, .n_start_index_map = 1,
      .index_vector_dim = 1};
  tt_hlo_type out = tt_hlo_make_type(d, 1, &numel);
  tt_hv x = tt_hlo_gather(c->b, flat, idx, &gd, &kOne, &out);
  return tt_hlo_reshape(c->b, x, v->rank, v->sizes);
}

// A dense run of `numel` elements starting at the slot's offset.
static tt_hv dense_run(tt_lower_ctx *c, int slot, tt_hv flat, int64_t numel) {
  const tt_hlo_type *ft = tt_hlo_type_of(c->b, flat);
  if (!ft) return TT_HV_INVALID;
  if (c->slots[slot].t->offset == 0) {
    if (numel == ft->dims[0]) return flat;
    int64_t start = 0;
    return tt_hlo_slice(c->b, flat, &start, &numel, &kOne);
  }
  tt_hv off = offset_value(c, slot);
  return tt_hlo_dynamic_slice(c->b, flat, &off, &numel);
}

// A strided view (RoPE's x[..., 0] of [..., d/2, 2] pairs: the stride-2
// elements) as a box: its dims by decreasing stride, each stride a whole
// multiple of the next dim's extent, are a slice of a dense box of the
// storage run (box dim i steps stride i; a last dim steps 1). A reshape and a
// slice, which XLA fuses into the consumer; XLA's CPU gather is a serial
// loop. TT_HV_INVALID when the view is no such box (then: a gather).
static tt_hv strided_view(tt_lower_ctx *c, int slot, tt_hv flat, const view *v,
                          tt_dtype d) {
  int order[TT_MAX_RANK], k = 0;  // dims of size > 1, by decreasing stride
  for (int i = 0; i < v->rank; i++)
    if (v->sizes[i] > 1) order[k++] = i;
  for (int i = 1; i < k; i++) {  // insertion sort, stable
    int x = order[i], j = i;
    while (j > 0 && v->strides[order[j - 1]] < v->strides[x]) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = x;
  }
  if (k == 0 || k > 4) return TT_HV_INVALID;  // transposes past rank 4: see extract
  int64_t box[TT_MAX_RANK + 1], limit[TT_MAX_RANK + 1], start[TT_MAX_RANK + 1] = {0};
  int64_t one[TT_MAX_RANK + 1], sorted[TT_MAX_RANK], extent = 1;
  for (int i = 0; i < k; i++) {
    int64_t st = v->strides[order[i]], n = v->sizes[order[i]];
    int64_t next = i + 1 < k ? v->strides[order[i + 1]] : 1;
    if (st <= 0 || next <= 0 || st % next != 0) return TT_HV_INVALID;
    if (i + 1 < k && st < next * v->sizes[order[i + 1]]) return TT_HV_INVALID;  // overlap
    box[i] = i == 0 ? n : v->strides[order[i - 1]] / st;
    limit[i] = n;
    sorted[i] = n;
    one[i] = 1;
    extent += (n - 1) * st;
  }
  box[k] = v->strides[order[k - 1]];  // the innermost step, read at 0
  limit[k] = 1;
  one[k] = 1;
  int64_t run = box[0] * v->strides[order[0]];
  const tt_hlo_type *ft = tt_hlo_type_of(c->b, flat);
  if (!ft) return TT_HV_INVALID;
  // The box's last row may run past the storage: pad its end. A non-zero
  // offset is a run-time value (the program serves every offset), so pad
  // for the largest one a view this size can have; its dynamic slice would
  // clamp, shifting the data.
  int64_t hi = c->slots[slot].t->offset != 0 ? run - extent : run - ft->dims[0];
  if (hi > 0) {
    if (tt_dtype_is_complex(d) || d == TT_BOOL) return TT_HV_INVALID;
    int64_t lo = 0, in = 0;
    flat = tt_hlo_pad(c->b, flat, tt_hlo_const(c->b, d, 0), &lo, &hi, &in);
  }
  tt_hv x = tt_hlo_reshape(c->b, dense_run(c, slot, flat, run), k + 1, box);
  x = tt_hlo_reshape(c->b, tt_hlo_slice(c->b, x, start, limit, one), k, sorted);
  // Back to view order: result dim j (the j-th dim of size > 1) is the
  // sorted dim that holds it.
  bool moved = false;
  int64_t perm[TT_MAX_RANK];
  for (int i = 0, j = 0; i < v->rank; i++)
    if (v->sizes[i] > 1)
      for (int q = 0; q < k; q++)
        if (order[q] == i) {
          perm[j] = q;
          moved = moved || q != j;
          j++;
        }
  if (moved) x = tt_hlo_transpose(c->b, x, perm);
  return tt_hlo_reshape(c->b, x, v->rank, v->sizes);
}

// The view `v` of the slot's storage (value `flat`, dtype d), no stride-0 dims.
static tt_hv extract(tt_lower_ctx *c, int slot, tt_hv flat, const view *v,
                     tt_dtype d) {
  int64_t numel = view_numel(v);
  if (is_dense(v)) {
    tt_hv run = dense_run(c, slot, flat, numel);
    return tt_hlo_reshape(c->b, run, v->rank, v->sizes);
  }
  // A permuted dense view is a transpose; past rank 4 XLA's CPU compiler
  // takes minutes over one (seen: 5 min for rank 7), a flat gather seconds.
  int order[TT_MAX_RANK];
  if (v->rank <= 4 && dense_permutation(v, order)) {
    int64_t psizes[TT_MAX_RANK], perm[TT_MAX_RANK];
    for (int i = 0; i < v->rank; i++) {
      psizes[i] = v->sizes[order[i]];
      perm[order[i]] = i;
    }
    tt_hv run = dense_run(c, slot, flat, numel);
    tt_hv x = tt_hlo_reshape(c->b, run, v->rank, psizes);
    return tt_hlo_transpose(c->b, x, perm);
  }
  tt_hv x = strided_view(c, slot, flat, v, d);
  return x != TT_HV_INVALID ? x : gather_view(c, slot, flat, v, d);
}

// A view may have another dtype than its storage's buffer (x.view(torch.int32),
// a uint8 view from UntypedStorage.copy_): storages are untyped bytes. The
// view reads and writes the buffer's bytes as elements of its own dtype; it
// needs the buffer's byte length to be a whole number of them.
static tt_status check_buffer_dtype(const tt_lower_ctx *c, int slot) {
  const tt_tensor *t = c->slots[slot].t;
  tt_dtype s = buffer_dtype(c, slot);
  tt_hv v = graph_value(c, slot);
  const tt_hlo_type *ty = v == TT_HV_INVALID ? NULL : tt_hlo_type_of(c->b, v);
  int64_t n = ty ? ty->dims[0] : slot_buffer_numel(c, slot);
  if ((n * tt_dtype_size(s)) % tt_dtype_size(t->dtype) != 0)
    return tt_lower_fail(c, TT_UNIMPLEMENTED,
                         "a %s view of a %lld-byte %s buffer is not lowered",
                         tt_dtype_name(t->dtype), (long long)(n * tt_dtype_size(s)),
                         tt_dtype_name(s));
  return NULL;
}

// True when a view of dtype `v` reads a buffer of dtype `b` element for element.
// (XLA bitcasts no complex values: complex views go through their parts.)
static bool same_width(tt_dtype b, tt_dtype v) {
  return b == v || (tt_dtype_size(b) == tt_dtype_size(v) && b != TT_BOOL && v != TT_BOOL &&
                    !tt_dtype_is_complex(b) && !tt_dtype_is_complex(v));
}

// A flat complex value [n] as its parts [2n] (re, im, re, im, ...): the
// bytes PyTorch's view_as_real reads.
static tt_hv split_complex(tt_lower_ctx *c, tt_hv flat) {
  int64_t n = tt_hlo_type_of(c->b, flat)->dims[0], col[2] = {n, 1}, all = 2 * n;
  tt_hv parts[2] = {tt_hlo_reshape(c->b, tt_hlo_real(c->b, flat), 2, col),
                    tt_hlo_reshape(c->b, tt_hlo_imag(c->b, flat), 2, col)};
  return tt_hlo_reshape(c->b, tt_hlo_concatenate(c->b, parts, 2, 1), 1, &all);
}

// The inverse: flat parts [2n] of complex dtype `to`'s component as [n] of `to`.
static tt_hv join_complex(tt_lower_ctx *c, tt_hv flat) {
  int64_t m = tt_hlo_type_of(c->b, flat)->dims[0] / 2, pairs[2] = {m, 2};
  tt_hv x = tt_hlo_reshape(c->b, flat, 2, pairs);
  int64_t s0[2] = {0, 0}, s1[2] = {0, 1}, l0[2] = {m, 1}, l1[2] = {m, 2}, st[2] = {1, 1};
  tt_hv re = tt_hlo_reshape(c->b, tt_hlo_slice(c->b, x, s0, l0, st), 1, &m);
  tt_hv im = tt_hlo_reshape(c->b, tt_hlo_slice(c->b, x, s1, l1, st), 1, &m);
  return tt_hlo_complex(c->b, re, im);
}

// The flat buffer value `flat` read as elements of `to`: the same bytes,
// in the host's (little-endian) order, as PyTorch reinterprets storages.
static tt_hv reinterpret(tt_lower_ctx *c, tt_hv flat, tt_dtype to) {
  const tt_hlo_type *ty = tt_hlo_type_of(c->b, flat);
  if (!ty || ty->dtype == to) return ty ? flat : TT_HV_INVALID;
  if (same_width(ty->dtype, to)) return tt_hlo_bitcast(c->b, flat, to);
  if (tt_dtype_is_complex(ty->dtype)) return reinterpret(c, split_complex(c, flat), to);
  if (tt_dtype_is_complex(to))
    return join_complex(c, reinterpret(c, flat, tt_dtype_to_real(to)));
  tt_dtype from = ty->dtype;
  int64_t n = ty->dims[0];
  if (from == TT_BOOL) {
    flat = tt_hlo_convert(c->b, flat, TT_U8);
    from = TT_U8;
  }
  tt_dtype raw = to == TT_BOOL ? TT_U8 : to;
  int64_t fs = tt_dtype_size(from), ts = tt_dtype_size(raw);
  tt_hv x = flat;
  if (fs > ts) {  // narrower: each element becomes fs/ts elements
    int64_t dims[2] = {n, fs / ts}, all = n * (fs / ts);
    tt_hlo_type t = tt_hlo_make_type(raw, 2, dims);
    x = tt_hlo_reshape(c->b, tt_hlo_bitcast_to(c->b, flat, &t), 1, &all);
  } else if (fs < ts) {  // wider: ts/fs elements become one
    int64_t r = ts / fs, dims[2] = {n / r, r}, m = n / r;
    tt_hlo_type t = tt_hlo_make_type(raw, 1, &m);
    x = tt_hlo_bitcast_to(c->b, tt_hlo_reshape(c->b, flat, 2, dims), &t);
  } else if (from != raw) {
    x = tt_hlo_bitcast(c->b, flat, raw);
  }
  return to == TT_BOOL ? tt_hlo_convert(c->b, x, TT_BOOL) : x;
}

static tt_hv materialize(tt_lower_ctx *c, int slot) {
  const tt_tensor *t = c->slots[slot].t;
  view full = {.rank = t->ndim}, core = {.rank = t->ndim};
  bool expanded = false;
  for (int i = 0; i < t->ndim; i++) {
    full.sizes[i] = core.sizes[i] = t->sizes[i];
    full.strides[i] = core.strides[i] = t->strides[i];
    if (t->strides[i] == 0 && t->sizes[i] > 1) {
      core.sizes[i] = 1;  // read one row, broadcast it back
      expanded = true;
    }
  }
  if (view_numel(&full) == 0) {
    tt_hlo_type ty = tt_hlo_make_type(t->dtype, t->ndim, t->sizes);
    return tt_hlo_splat(c->b, &ty, 0);
  }
  tt_status st = check_buffer_dtype(c, slot);
  if (st) {
    tt_hlo_fail(c->b, st);
    return TT_HV_INVALID;
  }
  tt_dtype bd = buffer_dtype(c, slot);
  tt_hv x;
  if (same_width(bd, t->dtype)) {
    x = extract(c, slot, storage_param(c, slot), &core, bd);
    if (bd != t->dtype) x = tt_hlo_bitcast(c->b, x, t->dtype);
  } else {
    x = extract(c, slot, reinterpret(c, storage_param(c, slot), t->dtype), &core,
                t->dtype);
  }
  if (expanded) {
    int64_t dims[TT_MAX_RANK];
    for (int i = 0; i < t->ndim; i++) dims[i] = i;
    x = tt_hlo_broadcast_in_dim(c->b, x, t->ndim, t->sizes, dims);
  }
  return x;
}

// --- the rules' API: arguments ----------------------------------------------------------

static const tt_value kNone = {.kind = TT_VALUE_NONE};

const char *tt_lower_op_name(const tt_lower_ctx *c) { return c->op_name; }
int tt_lower_op_base_len(const tt_lower_ctx *c) { return (int)strcspn(c->op_name, "."); }
const char *tt_lower_rule_name(const tt_lower_ctx *c) { return c->rule->name; }
tt_hlo *tt_lower_hlo(tt_lower_ctx *c) { return c->b; }
int tt_lower_nargs(const tt_lower_ctx *c) { return c->call->nargs; }
tt_dtype tt_lower_default_dtype(const tt_lower_ctx *c) {
  return c->call->default_dtype;
}

bool tt_lower_supports_f64(const tt_lower_ctx *c) { return c->opts.supports_f64; }
const char *tt_lower_attention_ffi_target(const tt_lower_ctx *c) {
  return c->opts.attention_ffi_target;
}

const tt_value *tt_lower_arg(const tt_lower_ctx *c, int i) {
  return (i >= 0 && i < c->call->nargs) ? &c->call->args[i] : &kNone;
}

bool tt_lower_is_none(const tt_lower_ctx *c, int i) {
  const tt_value *v = tt_lower_arg(c, i);
  return v->kind == TT_VALUE_NONE ||
         (v->kind == TT_VALUE_TENSOR && !v->u.tensor.storage);
}

int64_t tt_lower_int(const tt_lower_ctx *c, int i) {
  const tt_value *v = tt_lower_arg(c, i);
  if (v->kind == TT_VALUE_BOOL) return v->u.b;
  if (v->kind == TT_VALUE_SCALAR) return v->u.scalar.i;
  return v->kind == TT_VALUE_INT ? v->u.i : 0;
}

bool tt_lower_bool(const tt_lower_ctx *c, int i) {
  const tt_value *v = tt_lower_arg(c, i);
  if (v->kind == TT_VALUE_INT) return v->u.i != 0;
  return v->kind == TT_VALUE_BOOL && v->u.b;
}

static tt_hv slot_value(tt_lower_ctx *c, int slot, int arg) {
  if (slot < 0) {
    tt_hlo_fail(c->b, tt_lower_fail(c, TT_INTERNAL,
                                    "argument %d is not a tpu tensor", arg));
    return TT_HV_INVALID;
  }
  if (c->slot_val[slot] == TT_HV_INVALID) c->slot_val[slot] = materialize(c, slot);
  return c->slot_val[slot];
}

// A 0-dim CPU tensor where a tensor is expected (PyTorch allows them beside
// device tensors) arrives as a scalar: it becomes a 0-d runtime value of its
// own dtype. Returns NULL when the argument (item) is no such scalar.
static const tt_scalar *cpu_scalar(const tt_lower_ctx *c, int i, int j) {
  const tt_value *v = tt_lower_arg(c, i);
  if (j >= 0) {
    if (v->kind != TT_VALUE_LIST || j >= v->u.list.n) return NULL;
    v = &v->u.list.items[j];
  }
  return v->kind == TT_VALUE_SCALAR ? &v->u.scalar : NULL;
}

tt_hv tt_lower_tensor(tt_lower_ctx *c, int i) {
  const tt_scalar *s = cpu_scalar(c, i, -1);
  if (s) return tt_lower_scalar(c, i, s->dtype);
  return slot_value(c, find_slot(c, i, -1), i);
}

tt_hv tt_lower_list_tensor(tt_lower_ctx *c, int i, int j) {
  const tt_scalar *s = cpu_scalar(c, i, j);
  if (s) return tt_lower_list_scalar(c, i, j, s->dtype);
  return slot_value(c, find_slot(c, i, j), i);
}

tt_hlo_type tt_lower_tensor_type(const tt_lower_ctx *c, int i, int j) {
  const tt_scalar *sc = cpu_scalar(c, i, j);
  if (sc) return tt_hlo_make_type(sc->dtype, 0, NULL);
  int s = find_slot(c, i, j);
  if (s < 0) return tt_hlo_make_type(TT_F32, 0, NULL);
  const tt_tensor *t = c->slots[s].t;
  return tt_hlo_make_type(t->dtype, t->ndim, t->sizes);
}

tt_hv tt_lower_scalar(tt_lower_ctx *c, int i, tt_dtype d) {
  const tt_value *v = tt_lower_arg(c, i);
  if (v->kind == TT_VALUE_TENSOR && v->u.tensor.storage) {
    tt_hv x = tt_lower_tensor(c, i);
    const tt_hlo_type *ty = tt_hlo_type_of(c->b, x);
    if (ty && ty->rank != 0) x = tt_hlo_reshape(c->b, x, 0, NULL);
    return tt_hlo_convert(c->b, x, d);
  }
  if (v->kind == TT_VALUE_INT || v->kind == TT_VALUE_BOOL)
    return tt_hlo_const_i(c->b, d, tt_lower_int(c, i));
  if (v->kind != TT_VALUE_SCALAR) {
    tt_hlo_fail(c->b, tt_lower_fail(c, TT_INTERNAL,
                                    "argument %d is not a scalar", i));
    return TT_HV_INVALID;
  }
  const tt_scalar *s = &v->u.scalar;
  if (tt_dtype_is_complex(s->dtype) && !tt_dtype_is_complex(d)) {
    // Dropping the imaginary part is the CPU's call (it raises or warns).
    tt_hlo_fail(c->b, tt_lower_fail(c, TT_UNIMPLEMENTED, "a complex Scalar (argument %d) "
                                    "as %s", i, tt_dtype_name(d)));
    return TT_HV_INVALID;
  }
  if (c->rule->flags & TT_RULE_SCALARS_IN_SIGNATURE) {
    bool fl = s->dtype == TT_F64 || tt_dtype_is_float(s->dtype) || tt_dtype_is_complex(s->dtype);
    if (tt_dtype_is_complex(d)) {
      tt_hlo_type ty = tt_hlo_make_type(d, 0, NULL);
      return tt_hlo_splat_c(c->b, &ty, fl ? s->f : (double)s->i,
                            tt_dtype_is_complex(s->dtype) ? s->im : 0.0);
    }
    return fl ? tt_hlo_const(c->b, d, s->f) : tt_hlo_const_i(c->b, d, s->i);
  }
  if (tt_dtype_is_complex(d)) {
    // A complex value from two real runtime parameters (a parameter holds one
    // 8-byte part); a real Scalar's imaginary part is a constant 0.
    tt_dtype part = tt_dtype_to_real(d);
    tt_hlo_type ty = tt_hlo_make_type(part, 0, NULL);
    tt_param p = {.kind = TT_PARAM_SCALAR, .slot = -1, .arg = i, .dtype = part};
    tt_hv re = add_param(c, p, &ty);
    if (!tt_dtype_is_complex(s->dtype)) return tt_hlo_convert(c->b, re, d);
    p.imag = true;
    return tt_hlo_complex(c->b, re, add_param(c, p, &ty));
  }
  tt_param p = {.kind = TT_PARAM_SCALAR, .slot = -1, .arg = i, .dtype = d};
  tt_hlo_type ty = tt_hlo_make_type(d, 0, NULL);
  return add_param(c, p, &ty);
}

tt_hv tt_lower_list_scalar(tt_lower_ctx *c, int i, int j, tt_dtype d) {
  const tt_value *v = tt_lower_arg(c, i);
  if (v->kind != TT_VALUE_LIST || j < 0 || j >= v->u.list.n ||
      v->u.list.items[j].kind != TT_VALUE_SCALAR) {
    tt_hlo_fail(c->b, tt_lower_fail(c, TT_INTERNAL,
                                    "argument %d item %d is not a scalar", i, j));
    return TT_HV_INVALID;
  }
  if (c->rule->flags & TT_RULE_SCALARS_IN_SIGNATURE) {
    const tt_scalar *s = &v->u.list.items[j].u.scalar;
    bool fl = tt_dtype_is_float(s->dtype);
    return fl ? tt_hlo_const(c->b, d, s->f) : tt_hlo_const_i(c->b, d, s->i);
  }
  tt_param p = {.kind = TT_PARAM_SCALAR, .slot = -1, .arg = i, .item = j, .dtype = d};
  tt_hlo_type ty = tt_hlo_make_type(d, 0, NULL);
  return add_param(c, p, &ty);
}

tt_hv tt_lower_rng_state(tt_lower_ctx *c, int gen_arg, uint64_t count) {
  tt_param p = {.kind = TT_PARAM_RNG, .slot = -1, .arg = gen_arg,
                .dtype = TT_U64, .count = count};
  int64_t two = 2;
  tt_hlo_type ty = tt_hlo_make_type(TT_U64, 1, &two);
  return add_param(c, p, &ty);
}

// --- the rules' API: results ------------------------------------------------------------

void tt_lower_result(tt_lower_ctx *c, tt_hv v) {
  if (c->nresults == c->cap_results) {
    int cap = c->cap_results ? 2 * c->cap_results : 8;
    tt_hv *p = realloc(c->results, (size_t)cap * sizeof *p);
    if (!p) {
      tt_hlo_fail(c->b, tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory"));
      return;
    }
    c->results = p;
    c->cap_results = cap;
  }
  c->results[c->nresults++] = v;
}

// --- the rules' API: device-side checks ----------------------------------------------

void tt_lower_check(tt_lower_ctx *c, tt_hv bad, tt_hv val, tt_code code,
                    const char *msg, int64_t arg0, int64_t arg1) {
  if (!c->opts.device_checks || c->opts.infer_only) return;
  tt_hlo *b = c->b;
  const tt_hlo_type *bt = tt_hlo_type_of(b, bad);
  if (!bt) return;  // the builder's error is reported later
  if (c->nchecks == c->cap_checks) {
    int cap = c->cap_checks ? 2 * c->cap_checks : 4;
    tt_check *p = realloc(c->checks, (size_t)cap * sizeof *p);
    if (p) c->checks = p;
    tt_hv *v = p ? realloc(c->check_vals, (size_t)cap * sizeof *v) : NULL;
    if (!v) {
      tt_hlo_fail(b, tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory"));
      return;
    }
    c->check_vals = v;
    c->cap_checks = cap;
  }
  int rank = bt->rank;
  int64_t dims[TT_MAX_RANK], one = 1;
  for (int i = 0; i < rank; i++) dims[i] = i;
  bad = tt_hlo_convert(b, bad, TT_BOOL);
  tt_hv any = rank == 0 ? bad : tt_hlo_reduce(b, bad, tt_hlo_const_i(b, TT_BOOL, 0),
                                               dims, rank, TT_HLO_REDUCE_OR);
  // The largest offending value (INT64_MIN when none is given or violated).
  tt_hv worst = tt_hlo_const_i(b, TT_I64, INT64_MIN);
  if (val != TT_HV_INVALID) {
    tt_hv v = tt_hlo_convert(b, val, TT_I64);
    tt_hlo_type vt = tt_hlo_make_type(TT_I64, rank, bt->dims);
    tt_hv vs = tt_hlo_select(b, bad, v, tt_hlo_splat_i(b, &vt, INT64_MIN));
    worst = rank == 0 ? vs : tt_hlo_reduce(b, vs, worst, dims, rank, TT_HLO_REDUCE_MAX);
  }
  tt_hv parts[2] = {tt_hlo_reshape(b, tt_hlo_convert(b, any, TT_I64), 1, &one),
                    tt_hlo_reshape(b, worst, 1, &one)};
  c->checks[c->nchecks] = (tt_check){code, msg, {arg0, arg1}};
  c->check_vals[c->nchecks++] = tt_hlo_concatenate(b, parts, 2, 0);
}

static const tt_tensor *dest_tensor(const tt_lower_ctx *c, int r) {
  if (r < 0 || r >= c->call->ndests || c->call->dests[r].arg < 0) return NULL;
  int s = find_slot(c, c->call->dests[r].arg, c->call->dests[r].item);
  return s < 0 ? NULL : c->slots[s].t;
}

bool tt_lower_dest_type(const tt_lower_ctx *c, int r, tt_hlo_type *out) {
  const tt_tensor *t = dest_tensor(c, r);
  if (!t) return false;
  *out = tt_hlo_make_type(t->dtype, t->ndim, t->sizes);
  return true;
}

void tt_lower_allow_any_cast(tt_lower_ctx *c) { c->any_cast = true; }

tt_status tt_lower_fail_at(const tt_lower_ctx *c, tt_code code, const char *file,
                           int line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return tt_make_status_at(code, file, line, "%s (in aten::%s)", msg, c->op_name);
}

// --- writing results -------------------------------------------------------------------

static bool same_shape(const tt_hlo_type *a, const tt_tensor *t) {
  if (a->rank != t->ndim) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != t->sizes[i]) return false;
  return true;
}

static bool is_whole_storage(const tt_lower_ctx *c, int slot) {
  const tt_tensor *t = c->slots[slot].t;
  view v = {.rank = t->ndim};
  memcpy(v.sizes, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
  memcpy(v.strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  return t->offset == 0 && is_dense(&v) &&
         view_numel(&v) * tt_dtype_size(t->dtype) == c->facts[slot].nbytes;
}

// True when the slot's view is a permutation (rank <= 4, as extract reads
// one) of a dense layout covering its whole storage from offset 0; `order`
// gets its dims by decreasing stride.
static bool permuted_whole_storage(const tt_lower_ctx *c, int slot, int *order) {
  const tt_tensor *t = c->slots[slot].t;
  view v = {.rank = t->ndim};
  memcpy(v.sizes, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
  memcpy(v.strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  return t->offset == 0 && v.rank <= 4 && !is_dense(&v) && dense_permutation(&v, order) &&
         view_numel(&v) * tt_dtype_size(t->dtype) == c->facts[slot].nbytes;
}

// v (in the view's dims) transposed into the storage's order: dim i of the
// result is view dim order[i], the inverse of extract's transpose.
static tt_hv to_storage_order(tt_lower_ctx *c, tt_hv v, int rank, const int *order) {
  int64_t perm[TT_MAX_RANK];
  for (int i = 0; i < rank; i++) perm[i] = order[i];
  return tt_hlo_transpose(c->b, v, perm);
}

// --- out= dtypes -------------------------------------------------------------------------
//
// PyTorch has two rules for an out= tensor of another dtype than the result.
// TensorIterator ops that cast their common dtype to the outputs (add, sin,
// sum, ...) accept any dtype the result can be cast to (tt_can_cast). The
// others refuse any other dtype: structured kernels whose meta function sets
// the output's dtype (mm, gather, sort, ...) and unary ops built with
// check_all_same_dtype (neg, abs, floor, ...). These are the latter, each with
// PyTorch's message, measured op by op on the CPU (tests/test_conformance.py
// sweeps them). An entry with a '.' names one overload, else every overload.

enum { NAMES_TORCH, NAMES_CPP };  // "Float" (ScalarType) or "float" (C++ type)
enum { RESULT_FIRST, OUT_FIRST };

typedef struct exact_out {
  const char *op;
  const char *fmt;  // two %s (dtype names) or none
  uint8_t names, order;
} exact_out;

#define TI_SAME "Found dtype %s but expected %s"
#define STRUCTURED "Expected out tensor to have dtype %s, but got %s instead"

static const exact_out kExactOut[] = {
    // Unary TensorIterator ops with check_all_same_dtype.
    {"abs", TI_SAME, NAMES_TORCH, OUT_FIRST}, {"ceil", TI_SAME, NAMES_TORCH, OUT_FIRST},
    {"floor", TI_SAME, NAMES_TORCH, OUT_FIRST}, {"frac", TI_SAME, NAMES_TORCH, OUT_FIRST},
    {"neg", TI_SAME, NAMES_TORCH, OUT_FIRST}, {"round", TI_SAME, NAMES_TORCH, OUT_FIRST},
    {"sign", TI_SAME, NAMES_TORCH, OUT_FIRST}, {"sgn", TI_SAME, NAMES_TORCH, OUT_FIRST},
    {"trunc", TI_SAME, NAMES_TORCH, OUT_FIRST}, {"fix", TI_SAME, NAMES_TORCH, OUT_FIRST},
    {"gelu", TI_SAME, NAMES_TORCH, OUT_FIRST}, {"hardshrink", TI_SAME, NAMES_TORCH, OUT_FIRST},
    {"softshrink", TI_SAME, NAMES_TORCH, OUT_FIRST}, {"softplus", TI_SAME, NAMES_TORCH, OUT_FIRST},
    {"bitwise_not", TI_SAME, NAMES_TORCH, OUT_FIRST}, {"hardtanh", TI_SAME, NAMES_TORCH, OUT_FIRST},
    {"leaky_relu", TI_SAME, NAMES_TORCH, OUT_FIRST}, {"elu", TI_SAME, NAMES_TORCH, OUT_FIRST},
    {"silu", TI_SAME, NAMES_TORCH, OUT_FIRST}, {"hardsigmoid", TI_SAME, NAMES_TORCH, OUT_FIRST},
    {"hardswish", TI_SAME, NAMES_TORCH, OUT_FIRST}, {"mish", TI_SAME, NAMES_TORCH, OUT_FIRST},
    // clamp with Scalar bounds only; its Tensor overloads cast.
    {"clamp.out", TI_SAME, NAMES_TORCH, OUT_FIRST},
    {"clamp_min.out", TI_SAME, NAMES_TORCH, OUT_FIRST},
    {"clamp_max.out", TI_SAME, NAMES_TORCH, OUT_FIRST},
    // Structured kernels: set_output checks the out= tensor's dtype.
    {"addmm", STRUCTURED, NAMES_CPP, RESULT_FIRST}, {"addmv", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"baddbmm", STRUCTURED, NAMES_CPP, RESULT_FIRST}, {"bmm", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"mm", STRUCTURED, NAMES_CPP, RESULT_FIRST}, {"linalg_cross", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"max.dim_max", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"min.dim_min", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"_softmax", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"_log_softmax", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"aminmax", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"avg_pool2d", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"avg_pool3d", STRUCTURED, NAMES_CPP, RESULT_FIRST}, {"topk", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"gather", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"index_copy", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"index_add", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"index_reduce", STRUCTURED, NAMES_CPP, RESULT_FIRST}, {"sort", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"scatter", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"scatter_add", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"scatter_reduce", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"renorm", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"take_along_dim", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"tril", STRUCTURED, NAMES_CPP, RESULT_FIRST}, {"triu", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"norm", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"linalg_vector_norm", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"argmax", STRUCTURED, NAMES_CPP, RESULT_FIRST}, {"argmin", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"diag", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    // the structured linear algebra ops (every output, integer infos too)
    {"linalg_cholesky_ex", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"linalg_inv_ex", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"_linalg_eigh", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"_linalg_det", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"_linalg_slogdet", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"linalg_lu_factor_ex", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"linalg_lu", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"linalg_lu_solve", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"_linalg_svd", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"linalg_qr", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"_linalg_solve_ex", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    {"triangular_solve", STRUCTURED, NAMES_CPP, RESULT_FIRST},
    // Their own checks.
    {"amax", "Expected the dtype for input and out to match, but got %s for input's dtype "
             "and %s for out's dtype.", NAMES_TORCH, RESULT_FIRST},
    {"amin", "Expected the dtype for input and out to match, but got %s for input's dtype "
             "and %s for out's dtype.", NAMES_TORCH, RESULT_FIRST},
    {"where", "Expected out type to be %s but got %s", NAMES_TORCH, RESULT_FIRST},
    {"index_select", "index_select(): self and result must have the same scalar type",
     NAMES_TORCH, RESULT_FIRST},
    {"take", "take(): self and out expected to have the same dtype, but got self.dtype = %s "
             "and out.dtype = %s", NAMES_TORCH, RESULT_FIRST},
    {"nan_to_num", "nan_to_num: dtype of out: %s should be same as input: %s", NAMES_TORCH,
     OUT_FIRST},
    {"kthvalue", "output values must be of same type as input", NAMES_TORCH, RESULT_FIRST},
    {"log_sigmoid_forward", "expected scalar type %s but found %s", NAMES_TORCH, RESULT_FIRST},
    {"heaviside", "heaviside is not yet implemented for tensors with different dtypes.",
     NAMES_TORCH, RESULT_FIRST},
    {"histc", "torch.histogram: input tensor and hist tensor should have the same dtype, but "
              "got input %s and hist %s", NAMES_CPP, RESULT_FIRST},
    {"frexp", "torch.frexp() expects mantissa to have dtype %s but got %s", NAMES_CPP,
     RESULT_FIRST},
    {"addbmm", "self and mat2 must have the same dtype, but got %s and %s", NAMES_TORCH,
     OUT_FIRST},
    {"cummax", "expected scalar_type %s but found %s", NAMES_TORCH, RESULT_FIRST},
    {"cummin", "expected scalar_type %s but found %s", NAMES_TORCH, RESULT_FIRST},
    {"logcumsumexp", "expected scalar_type %s but found %s", NAMES_TORCH, RESULT_FIRST},
    {"dot", "result dtype %s does not match input dtype %s", NAMES_TORCH, OUT_FIRST},
    {"vdot", "result dtype %s does not match input dtype %s", NAMES_TORCH, OUT_FIRST},
    {"signbit", "signbit does not support non-boolean outputs.", NAMES_TORCH, OUT_FIRST},
    {"all", "all only supports bool tensor for result, got: %s", NAMES_TORCH, OUT_FIRST},
    {"any", "any only supports bool tensor for result, got: %s", NAMES_TORCH, OUT_FIRST},
};

static const exact_out *find_exact_out(const char *op_name) {
  size_t base = strcspn(op_name, ".");
  for (size_t i = 0; i < sizeof kExactOut / sizeof kExactOut[0]; i++) {
    const char *e = kExactOut[i].op;
    if (strchr(e, '.') ? strcmp(e, op_name) == 0
                       : strlen(e) == base && strncmp(e, op_name, base) == 0)
      return &kExactOut[i];
  }
  return NULL;
}

// Refuses an out= tensor whose dtype differs from the result's for the ops
// that PyTorch refuses it for.
static tt_status check_exact_out(const tt_lower_ctx *c, tt_dtype result, tt_dtype out) {
  const exact_out *e = find_exact_out(c->op_name);
  if (!e) return NULL;
  // abs of a complex input into a real out= computes in a complex tensor and
  // copies its real part (unary_op_impl_with_complex_to_float_out): any
  // dtype its real type casts to; a complex out= must have the input's dtype.
  tt_dtype in = tt_lower_tensor_type(c, 0, -1).dtype;
  if (!strcmp(e->op, "abs") && tt_dtype_is_complex(in)) {
    if (!tt_dtype_is_complex(out) || out == in) return NULL;
    result = in;
  }
  const char *rn = e->names == NAMES_CPP ? tt_dtype_cpp_name(result) : tt_dtype_torch_name(result);
  const char *on = e->names == NAMES_CPP ? tt_dtype_cpp_name(out) : tt_dtype_torch_name(out);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
#pragma GCC diagnostic ignored "-Wformat-extra-args"
  return e->order == RESULT_FIRST ? tt_lower_fail(c, TT_INVALID_ARGUMENT, e->fmt, rn, on)
                                  : tt_lower_fail(c, TT_INVALID_ARGUMENT, e->fmt, on, rn);
#pragma GCC diagnostic pop
}

// The linear algebra ops whose out= takes any dtype the result casts to,
// refused in their own words (ATen's checkLinalgCompatibleDtype): the op's
// base name, or NULL for the others.
static const char *linalg_castable_check(const char *op_name) {
  static const char *const kOps[] = {"cholesky", "cholesky_inverse"};
  size_t base = strcspn(op_name, ".");
  for (size_t i = 0; i < sizeof kOps / sizeof kOps[0]; i++)
    if (strlen(kOps[i]) == base && !strncmp(kOps[i], op_name, base)) return kOps[i];
  return NULL;
}

// Converts result r to its destination's dtype and checks its shape.
static tt_status fit_to_dest(tt_lower_ctx *c, int r, const tt_tensor *t,
                             tt_hv *v) {
  const tt_hlo_type *ty = tt_hlo_type_of(c->b, *v);
  if (!ty) return NULL;  // the builder's error is reported later
  char a[128], b2[128];
  if (!same_shape(ty, t)) {
    tt_hlo_type want = tt_hlo_make_type(t->dtype, t->ndim, t->sizes);
    if (c->call->dests[r].arg == 0)  // in-place on self
      return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                           "output with shape %s doesn't match the broadcast "
                           "shape %s", tt_shape_str(&want, a, sizeof a),
                           tt_shape_str(ty, b2, sizeof b2));
    return tt_lower_fail(c, TT_OUT_RESIZE, "out= needs resizing");
  }
  if (ty->dtype != t->dtype && !c->any_cast) {
    if (c->call->dests[r].arg > 0) TT_RETURN_IF_ERROR(check_exact_out(c, ty->dtype, t->dtype));
    if (!tt_can_cast(ty->dtype, t->dtype) && !strncmp(c->op_name, "cat.", 4))
      return tt_lower_fail(c, TT_TYPE_ERROR, "torch.cat(): input types can't be cast to "
                           "the desired output type %s", tt_dtype_torch_name(t->dtype));
    if (!tt_can_cast(ty->dtype, t->dtype) && linalg_castable_check(c->op_name))
      return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                           "%s: Expected result to be safely castable from %s dtype, but got "
                           "result with dtype %s", linalg_castable_check(c->op_name),
                           tt_dtype_torch_name(ty->dtype), tt_dtype_torch_name(t->dtype));
    if (!tt_can_cast(ty->dtype, t->dtype))
      return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                           "result type %s can't be cast to the desired output "
                           "type %s", tt_dtype_torch_name(ty->dtype),
                           tt_dtype_torch_name(t->dtype));
  }
  *v = tt_hlo_convert(c->b, *v, t->dtype);
  return NULL;
}

static tt_status patch_view(tt_lower_ctx *c, int slot, tt_hv v, int64_t numel);

// Writes value v (dest dtype and shape) through the view of `slot`.
static tt_status write_view(tt_lower_ctx *c, int slot, tt_hv v) {
  const tt_tensor *t = c->slots[slot].t;
  int g = c->slots[slot].group;
  int64_t numel = 1;
  for (int i = 0; i < t->ndim; i++) numel *= t->sizes[i];
  if (is_whole_storage(c, slot)) {
    c->group_cur[g] = tt_hlo_reshape(c->b, v, 1, &numel);
    return NULL;
  }
  // A permuted view of the whole storage (torch.compile's copies into a
  // traced strided layout: empty_strided + copy_) replaces it with the value
  // transposed into the storage's order: no read of the old contents.
  int order[TT_MAX_RANK];
  if (permuted_whole_storage(c, slot, order)) {
    c->group_cur[g] = tt_hlo_reshape(c->b, to_storage_order(c, v, t->ndim, order), 1, &numel);
    return NULL;
  }
  if (numel == 0) return NULL;
  TT_RETURN_IF_ERROR(check_buffer_dtype(c, slot));
  tt_dtype bd = buffer_dtype(c, slot);
  if (c->group_cur[g] == TT_HV_INVALID) c->group_cur[g] = storage_param(c, slot);
  if (!same_width(bd, t->dtype)) {
    // Patch the bytes as the view's elements; the buffer keeps its dtype, so
    // the storage's signature stays the same.
    c->group_cur[g] = reinterpret(c, c->group_cur[g], t->dtype);
    TT_RETURN_IF_ERROR(patch_view(c, slot, v, numel));
    c->group_cur[g] = reinterpret(c, c->group_cur[g], bd);
    return NULL;
  }
  if (bd != t->dtype) v = tt_hlo_bitcast(c->b, v, bd);
  return patch_view(c, slot, v, numel);
}

// Writes v through the (not whole-storage) view of `slot` into its group's
// current value, which has v's dtype.
static tt_status patch_view(tt_lower_ctx *c, int slot, tt_hv v, int64_t numel) {
  const tt_tensor *t = c->slots[slot].t;
  int g = c->slots[slot].group;
  view w = {.rank = t->ndim};
  memcpy(w.sizes, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
  memcpy(w.strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  // A permuted dense run (rank <= 4, as extract reads one) is the value
  // transposed into the storage's order, patched in as a dense run: a
  // scatter with computed indices is a serial loop on XLA's CPU backend.
  int order[TT_MAX_RANK];
  bool permuted = !is_dense(&w) && w.rank <= 4 && dense_permutation(&w, order);
  if (is_dense(&w) || permuted) {
    if (permuted) v = to_storage_order(c, v, w.rank, order);
    tt_hv flat = tt_hlo_reshape(c->b, v, 1, &numel);
    tt_hv off = offset_value(c, slot);
    c->group_cur[g] = tt_hlo_dynamic_update_slice(c->b, c->group_cur[g], flat, &off);
    return NULL;
  }
  tt_hv idx = view_indices(c, slot, &w);
  tt_hv idx1 = tt_hlo_reshape(c->b, idx, 1, &numel);
  int64_t two[2] = {numel, 1};
  idx1 = tt_hlo_reshape(c->b, idx1, 2, two);
  tt_hv flat = tt_hlo_reshape(c->b, v, 1, &numel);
  tt_hlo_scatter_dims sd = {
      .inserted_window_dims = &kZero, .n_inserted = 1,
      .scatter_dims_to_operand_dims = &kZero, .n_scatter_to_operand = 1,
      .index_vector_dim = 1};
  c->group_cur[g] = tt_hlo_scatter(c->b, c->group_cur[g], idx1, flat, &sd, -1);
  return NULL;
}

// Finishes the module; a storage the op rewrites may take its new value in
// its old buffer (tt_program_param_alias): an in-place op on a large
// storage (index_copy_, a slice assignment) then writes in place when the
// executor donates that buffer, instead of copying the storage.
static tt_status finish_aliased(tt_lower_ctx *c, const tt_program *prog, const tt_hv *outv,
                                int nout, const char **text, size_t *len) {
  // (the program takes c's parameter list after this)
  tt_program whole = {.params = c->params, .nparams = c->nparams,
                      .outs = prog->outs, .nouts = prog->nouts};
  int32_t *alias = NULL;
  for (int i = 0; i < whole.nparams; i++) {
    int o = tt_program_param_alias(&whole, i);
    if (o < 0) continue;
    if (!alias) {
      alias = malloc((size_t)whole.nparams * sizeof *alias);
      if (!alias) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
      for (int k = 0; k < whole.nparams; k++) alias[k] = -1;
    }
    alias[i] = o;
  }
  tt_status st = tt_hlo_finish_aliased(c->b, outv, nout + prog->nchecks, alias, text, len);
  free(alias);
  return st;
}

void tt_lower_write_arg(tt_lower_ctx *c, int i, tt_hv v) {
  if (c->opts.infer_only) return;
  int s = find_slot(c, i, -1);
  const tt_hlo_type *ty = tt_hlo_type_of(c->b, v);
  if (s < 0 || !ty) {
    if (s < 0)
      tt_hlo_fail(c->b, tt_lower_fail(c, TT_INTERNAL, "argument %d is not a tpu tensor", i));
    return;
  }
  const tt_tensor *t = c->slots[s].t;
  if (!same_shape(ty, t)) {
    tt_hlo_fail(c->b, tt_lower_fail(c, TT_INTERNAL, "write to argument %d: shape differs", i));
    return;
  }
  tt_status st = write_view(c, s, tt_hlo_convert(c->b, v, t->dtype));
  if (st) tt_hlo_fail(c->b, st);
}

static void record_meta(tt_op_result *m, const tt_hlo_type *ty) {
  memset(m, 0, sizeof *m);
  m->dtype = ty->dtype;
  m->ndim = ty->rank;
  for (int i = 0; i < ty->rank; i++) m->sizes[i] = ty->dims[i];
}

// After the rule: route results, assemble the program and its outputs.
// In a graph the output values go to `*graph_outs` (owned) instead of a module.
static tt_status finish(tt_lower_ctx *c, tt_program *prog, const char **text,
                        size_t *len, tt_hv **graph_outs) {
  if (c->nresults > c->call->ndests)
    return tt_lower_fail(c, TT_INTERNAL, "rule made %d results for %d outputs",
                         c->nresults, c->call->ndests);
  for (int r = c->nresults; r < c->call->ndests; r++)
    if (c->call->dests[r].arg >= 0)
      return tt_lower_fail(c, TT_INTERNAL, "rule made no result %d", r);
  prog->results = calloc((size_t)(c->nresults ? c->nresults : 1), sizeof *prog->results);
  prog->outs = calloc((size_t)(c->nresults + c->nslots + 1), sizeof *prog->outs);
  tt_hv *outv = calloc((size_t)(c->nresults + c->nslots + c->nchecks + 1), sizeof *outv);
  prog->checks = calloc((size_t)(c->nchecks ? c->nchecks : 1), sizeof *prog->checks);
  if (!prog->results || !prog->outs || !outv || !prog->checks) {
    free(outv);
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  }
  prog->nresults = c->nresults;
  tt_status st = NULL;
  int nout = 0;
  for (int r = 0; r < c->nresults && !st; r++) {
    const tt_hlo_type *ty = tt_hlo_type_of(c->b, c->results[r]);
    if (!ty) break;
    record_meta(&prog->results[r], ty);
    if (c->opts.infer_only) continue;
    const tt_tensor *dt = dest_tensor(c, r);
    if (!dt && c->call->dests[r].arg >= 0) {
      st = tt_lower_fail(c, TT_INVALID_ARGUMENT, "result %d goes to argument %d, "
                         "which is not a tpu tensor", r, (int)c->call->dests[r].arg);
      break;
    }
    if (!dt) {
      if ((ty->dtype == TT_F64 || ty->dtype == TT_C128) && !c->opts.supports_f64)
        st = tt_lower_fail(c, TT_INVALID_ARGUMENT, "%s is not supported by this device",
                           tt_dtype_name(ty->dtype));
      int64_t n = tt_hlo_numel(ty);
      prog->outs[nout] = (tt_out){.fresh = true, .slot = -1, .dtype = ty->dtype, .numel = n};
      outv[nout++] = tt_hlo_reshape(c->b, c->results[r], 1, &n);
      continue;
    }
    tt_hv v = c->results[r];
    st = fit_to_dest(c, r, dt, &v);
    if (!st) st = write_view(c, find_slot(c, c->call->dests[r].arg, c->call->dests[r].item), v);
  }
  for (int g = 0; g < c->nslots && !st && !c->opts.infer_only; g++) {
    if (c->group_cur[g] == TT_HV_INVALID) continue;
    const tt_hlo_type *ty = tt_hlo_type_of(c->b, c->group_cur[g]);
    if (!ty) break;
    prog->outs[nout] = (tt_out){.fresh = false, .slot = g, .dtype = ty->dtype,
                                .numel = ty->dims[0]};
    outv[nout++] = c->group_cur[g];
  }
  prog->nouts = nout;
  // The checks' flags follow the outputs (in the order the rule made them).
  for (int k = 0; k < c->nchecks && !c->opts.infer_only; k++) {
    prog->checks[prog->nchecks++] = c->checks[k];
    outv[nout + k] = c->check_vals[k];
  }
  if (!st) st = tt_hlo_take_status(c->b);
  if (!st && graph_outs) {
    *graph_outs = outv;  // the recorder keeps the values; no module
    return NULL;
  }
  if (!st && !c->opts.infer_only) st = finish_aliased(c, prog, outv, nout, text, len);
  free(outv);
  return st;
}

// --- life cycle ---------------------------------------------------------------------------

static void short_name(const char *full, char *out, size_t cap) {
  const char *p = strstr(full, "::");
  snprintf(out, cap, "%s", p ? p + 2 : full);
}

static tt_status ctx_init(tt_lower_ctx *c, const tt_op_call *call,
                          const tt_rule *rule, const tt_lower_options *opts,
                          tt_hlo *b) {
  memset(c, 0, sizeof *c);
  c->call = call;
  c->rule = rule;
  c->opts = *opts;
  c->b = b;
  short_name(rule->name, c->op_name, sizeof c->op_name);
  int n = tt_call_slots(call, NULL, 0);
  size_t cap = (size_t)(n ? n : 1);
  c->slots = calloc(cap, sizeof *c->slots);
  c->facts = calloc(cap, sizeof *c->facts);
  c->slot_val = malloc(cap * sizeof(tt_hv));
  c->group_param = malloc(cap * sizeof(tt_hv));
  c->group_cur = malloc(cap * sizeof(tt_hv));
  c->offset_param = malloc(cap * sizeof(tt_hv));
  if (!c->slots || !c->facts || !c->slot_val || !c->group_param ||
      !c->group_cur || !c->offset_param)
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  if (!opts->facts)
    return tt_make_status(TT_INTERNAL, "lowering: no storage facts given");
  c->nslots = tt_call_slots(call, c->slots, n);
  for (int i = 0; i < c->nslots; i++) {
    const tt_tensor *t = c->slots[i].t;
    if (t->ndim < 0 || t->ndim > TT_MAX_RANK)  // every view array is TT_MAX_RANK long
      return tt_make_status(TT_INVALID_ARGUMENT, "%s: argument %d has rank %d; at "
                            "most %d dimensions are supported", rule->name,
                            (int)c->slots[i].arg, (int)t->ndim, TT_MAX_RANK);
    opts->facts(t->storage, &c->facts[i]);
  }
  for (int i = 0; i < n; i++)
    c->slot_val[i] = c->group_param[i] = c->group_cur[i] = c->offset_param[i] =
        TT_HV_INVALID;
  return NULL;
}

static void ctx_deinit(tt_lower_ctx *c) {
  free(c->slots);
  free(c->facts);
  free(c->slot_val);
  free(c->group_param);
  free(c->group_cur);
  free(c->offset_param);
  free(c->params);
  free(c->param_vals);
  free(c->results);
  free(c->checks);
  free(c->check_vals);
}

// --- complex gate ----------------------------------------------------------------------

static bool value_is_complex(const tt_value *v) {
  switch (v->kind) {
    case TT_VALUE_TENSOR: return tt_dtype_is_complex(v->u.tensor.dtype);
    case TT_VALUE_SCALAR: return tt_dtype_is_complex(v->u.scalar.dtype);
    case TT_VALUE_DTYPE: return tt_dtype_is_complex(v->u.dtype);
    case TT_VALUE_LIST:
      for (int j = 0; j < v->u.list.n; j++)
        if (value_is_complex(&v->u.list.items[j])) return true;
      return false;
    default: return false;
  }
}

// A complex Scalar inside a Scalar[] list.
static bool value_is_complex_scalar_item(const tt_value *v) {
  if (v->kind != TT_VALUE_LIST) return false;
  for (int j = 0; j < v->u.list.n; j++) {
    const tt_value *it = &v->u.list.items[j];
    if (it->kind == TT_VALUE_SCALAR && tt_dtype_is_complex(it->u.scalar.dtype)) return true;
  }
  return false;
}

// A rule not marked TT_RULE_COMPLEX never sees a complex value. Complex
// Scalars reach such rules one at a time (tt_lower_scalar makes two real
// parameters of one); inside Scalar[] lists they are not lowered.
static tt_status check_complex(const tt_op_call *call, const tt_rule *rule) {
  bool ok = rule->flags & TT_RULE_COMPLEX;
  for (int i = 0; i < call->nargs; i++)
    if (ok ? value_is_complex_scalar_item(&call->args[i]) : value_is_complex(&call->args[i]))
      return tt_make_status(TT_UNIMPLEMENTED, "%s: no lowering for complex "
                            "%s (argument %d)", rule->name, ok ? "Scalars" : "arguments", i);
  return NULL;
}

// --- uint16/32/64 ------------------------------------------------------------------------
//
// PyTorch's CPU kernels cover few ops for the wide unsigned dtypes (mul but not
// add, == but not <; it raises "not implemented for 'UInt64'" for the rest).
// The rules were written for PyTorch's usual dtypes, so only the ops below,
// whose rules are exact for them, see these dtypes, and only when every
// tensor has the same dtype (PyTorch has no promotion rules for them either).
// Every other call is TT_UNIMPLEMENTED: the shim runs it on the CPU, which
// computes or refuses it exactly as PyTorch does.

static bool is_wide_uint(tt_dtype d) { return d == TT_U16 || d == TT_U32 || d == TT_U64; }

// The dtype of the first tensor or dtype argument in v (TT_DTYPE_NONE if
// none); *mixed when tensors of other dtypes are there too.
static void scan_dtypes(const tt_value *v, tt_dtype *first, bool *mixed, bool *any_uint) {
  tt_dtype d = TT_DTYPE_NONE;
  if (v->kind == TT_VALUE_TENSOR) d = v->u.tensor.dtype;
  if (v->kind == TT_VALUE_DTYPE) d = v->u.dtype;
  if (v->kind == TT_VALUE_LIST)
    for (int j = 0; j < v->u.list.n; j++) scan_dtypes(&v->u.list.items[j], first, mixed, any_uint);
  if (d == TT_DTYPE_NONE) return;
  if (is_wide_uint(d)) *any_uint = true;
  if (*first == TT_DTYPE_NONE) *first = d;
  else if (*first != d) *mixed = true;
}

static tt_status check_wide_uint(const tt_op_call *call, const tt_rule *rule) {
  static const char *const kNative[] = {
      "aten::copy_", "aten::clone", "aten::cat", "aten::cat.out", "aten::zero_",
      "aten::eq.Tensor", "aten::ne.Tensor", "aten::mul.Tensor", "aten::mul_.Tensor",
      "aten::bitwise_and.Tensor", "aten::bitwise_or.Tensor", "aten::bitwise_xor.Tensor",
      "aten::bitwise_and_.Tensor", "aten::bitwise_or_.Tensor", "aten::bitwise_xor_.Tensor",
  };
  tt_dtype first = TT_DTYPE_NONE;
  bool mixed = false, any_uint = false;
  for (int i = 0; i < call->nargs; i++) scan_dtypes(&call->args[i], &first, &mixed, &any_uint);
  if (!any_uint) return NULL;
  bool native = false;
  for (size_t i = 0; i < sizeof kNative / sizeof kNative[0] && !native; i++)
    native = strcmp(rule->name, kNative[i]) == 0;
  // copy_ converts between any dtypes; the others need one dtype throughout.
  if (native && (!mixed || strcmp(rule->name, "aten::copy_") == 0)) return NULL;
  return tt_make_status(TT_UNIMPLEMENTED, "%s: no lowering for uint16/32/64 arguments here",
                        rule->name);
}

// Runs the rule and finishes into `prog` (emptied on error); in a graph,
// `graph_out` also takes the parameter and output values.
static tt_status lower(const tt_op_call *call, const tt_rule *rule,
                       const tt_lower_options *opts, tt_hlo *b,
                       const tt_lower_graph *graph, tt_program *prog,
                       const char **out_text, size_t *out_len,
                       tt_lower_graph_out *graph_out) {
  memset(prog, 0, sizeof *prog);
  tt_lower_ctx c;
  memset(&c, 0, sizeof c);
  tt_hv *outs = NULL;
  tt_status st = check_complex(call, rule);
  if (!st) st = check_wide_uint(call, rule);
  if (!st) st = ctx_init(&c, call, rule, opts, b);
  c.graph = graph;
  if (!st) st = rule->fn(&c);
  if (!st) st = tt_hlo_take_status(b);
  if (!st) st = finish(&c, prog, out_text, out_len, graph_out ? &outs : NULL);
  if (!st) {
    prog->params = c.params;  // the program takes the parameter list
    prog->nparams = c.nparams;
    c.params = NULL;
    if (graph_out) {
      graph_out->param_vals = c.param_vals;
      graph_out->out_vals = outs;
      c.param_vals = NULL;
    }
  } else {
    tt_program_deinit(prog);
  }
  ctx_deinit(&c);
  return st;
}

tt_status tt_lower_call(const tt_op_call *call, const tt_rule *rule,
                        const tt_lower_options *opts, tt_hlo *b,
                        tt_program *out, const char **out_text,
                        size_t *out_len) {
  return lower(call, rule, opts, b, NULL, out, out_text, out_len, NULL);
}

tt_status tt_lower_into_graph(const tt_op_call *call, const tt_rule *rule,
                              const tt_lower_options *opts, tt_hlo *b,
                              const tt_lower_graph *graph,
                              tt_lower_graph_out *out) {
  memset(out, 0, sizeof *out);
  tt_lower_options o = *opts;
  o.infer_only = false;
  return lower(call, rule, &o, b, graph, &out->prog, NULL, NULL, out);
}

void tt_lower_graph_out_deinit(tt_lower_graph_out *out) {
  tt_program_deinit(&out->prog);
  free(out->param_vals);
  free(out->out_vals);
  memset(out, 0, sizeof *out);
}
