// collective.c — device collectives over the devices of this process.
//
// One call = one replicated program: the StableHLO collective (hlo.h's
// tt_hlo_all_reduce ...) over one replica group of every device, compiled
// with num_replicas = n and a device assignment (replica i on device i's
// global id), cached by its text, launched on all n devices at once. The
// text names the replica count and the device ids (a leading comment and
// the module's mhlo.num_replicas), so it never collides in the program
// cache with a single-device program or another device set.
//
// Reductions: SUM, PRODUCT, MIN, MAX are the collective's region; AVG is
// SUM then a divide by n (integers truncate, as a divide does). Broadcast is
// an all_reduce ADD of the input's bits (as integers) masked to zero on
// every device but the root: exact for every dtype (-0.0 and NaN payloads
// survive), one collective, no per-device program.
//
// An input storage's buffer may hold another element type than the view
// (storages are untyped bytes): the program reinterprets its bits.
//
// Leaves out: strided inputs (the caller copies; see torchtpu.h), uneven
// all_to_all splits, sub-groups, collectives inside fused graphs (this runs
// as its own program after flushing the executor).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/collective.h"

#include "base/buf.h"
#include "runtime/compile.h"
#include "runtime/runtime.h"
#include "runtime/profile.h"
#include "runtime/storage.h"

// --- names and messages --------------------------------------------------------------

const char *tt_collective_name(tt_collective_kind kind) {
  static const char *const kNames[] = {
      [TT_COLLECTIVE_ALL_REDUCE] = "all_reduce",
      [TT_COLLECTIVE_ALL_GATHER] = "all_gather",
      [TT_COLLECTIVE_REDUCE_SCATTER] = "reduce_scatter",
      [TT_COLLECTIVE_ALL_TO_ALL] = "all_to_all",
      [TT_COLLECTIVE_BROADCAST] = "broadcast",
  };
  _Static_assert(sizeof kNames / sizeof kNames[0] == TT_COLLECTIVE_BROADCAST + 1,
                 "one name per collective");
  if ((int)kind < 0 || kind > TT_COLLECTIVE_BROADCAST) return "collective?";
  return kNames[kind];
}

static const char *op_name(tt_reduce_op op) {
  static const char *const kNames[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX"};
  return (int)op >= 0 && op <= TT_REDUCE_MAX ? kNames[op] : "?";
}

// "[2, 3]" into buf.
static const char *shape_str(const tt_tensor *t, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < t->ndim && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "",
                          (long long)t->sizes[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

// Dense row-major, offset 0, covering the whole storage.
static bool whole_dense(const tt_tensor *t) { return t->storage && tt_view_is_whole(t); }

// --- the program ---------------------------------------------------------------------

static bool is_float(tt_dtype d) {
  return d == TT_F16 || d == TT_BF16 || d == TT_F32 || d == TT_F64;
}

// The collective's region for `op` on dtype d (bool, reduced as u8: SUM and
// MAX are MAX (or), PRODUCT and MIN are MIN (and)); -1 when AVG is asked of
// bool.
static int reduce_kind(tt_reduce_op op, tt_dtype d) {
  if (d == TT_BOOL) {
    if (op == TT_REDUCE_AVG) return -1;
    return op == TT_REDUCE_SUM || op == TT_REDUCE_MAX ? TT_HLO_REDUCE_MAX
                                                      : TT_HLO_REDUCE_MIN;
  }
  switch (op) {
    case TT_REDUCE_SUM: case TT_REDUCE_AVG: return TT_HLO_REDUCE_ADD;
    case TT_REDUCE_PRODUCT: return TT_HLO_REDUCE_MUL;
    case TT_REDUCE_MIN: return TT_HLO_REDUCE_MIN;
    case TT_REDUCE_MAX: return TT_HLO_REDUCE_MAX;
  }
  return -1;
}

static tt_hv divide_by(tt_hlo *b, tt_hv x, int n) {
  const tt_hlo_type *t = tt_hlo_type_of(b, x);
  if (!t) return TT_HV_INVALID;
  tt_hlo_type tt = *t;
  tt_hv d = is_float(tt.dtype) ? tt_hlo_splat(b, &tt, (double)n)
                               : tt_hlo_splat_i(b, &tt, n);
  return tt_hlo_binary(b, TT_HLO_DIV, x, d);
}

// The root's x on every replica: the integer sum of x's bits, zeroed off the
// root (one nonzero term: exact; XLA's CPU backend has no OR collective).
static tt_hv broadcast_from(tt_hlo *b, tt_hv x, int root, int n) {
  tt_hlo_type t = *tt_hlo_type_of(b, x);
  static const tt_dtype kBits[9] = {[1] = TT_U8, [2] = TT_I16, [4] = TT_I32,
                                    [8] = TT_I64};
  tt_dtype bits = kBits[tt_dtype_size(t.dtype)];
  tt_hv xi = t.dtype == TT_BOOL ? tt_hlo_convert(b, x, TT_U8)
             : bits == t.dtype  ? x
                                : tt_hlo_bitcast(b, x, bits);
  tt_hlo_type ti = tt_hlo_make_type(bits, t.rank, t.dims);
  tt_hv me = tt_hlo_replica_id(b);
  tt_hv is_root = tt_hlo_compare(b, TT_HLO_EQ, me, tt_hlo_const_i(b, TT_U32, root));
  static const int64_t kNoDims[1] = {0};
  tt_hv mask = tt_hlo_broadcast_in_dim(b, is_root, t.rank, t.dims, kNoDims);
  tt_hv masked = tt_hlo_select(b, mask, xi, tt_hlo_splat_i(b, &ti, 0));
  tt_hv r = tt_hlo_all_reduce(b, masked, TT_HLO_REDUCE_ADD, n, 1);
  if (t.dtype == TT_BOOL) return tt_hlo_convert(b, r, TT_BOOL);
  return bits == t.dtype ? r : tt_hlo_bitcast(b, r, t.dtype);
}

static tt_status bad_count(const tt_collective_desc *d, int64_t numel) {
  return tt_make_status(TT_INVALID_ARGUMENT,
                        "%s over %d devices: %lld elements per device don't "
                        "split into %d equal blocks",
                        tt_collective_name(d->kind), d->ndevices,
                        (long long)numel, d->ndevices);
}

// The parameter (the flat buffer) read as `in->numel` elements of in->dtype.
static tt_status read_input(tt_hlo *b, const tt_collective_input *in,
                            tt_hv *out) {
  int64_t vbytes = in->numel * tt_dtype_size(in->dtype);
  int64_t bbytes = in->buf_numel * tt_dtype_size(in->buf_dtype);
  if (vbytes != bbytes || in->buf_dtype == TT_BOOL || in->dtype == TT_BOOL) {
    if (in->buf_dtype == in->dtype && in->buf_numel == in->numel) goto same;
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "the storage's buffer holds %lld %s elements, the "
                          "view %lld %s (copy it to a fresh tensor first)",
                          (long long)in->buf_numel, tt_dtype_name(in->buf_dtype),
                          (long long)in->numel, tt_dtype_name(in->dtype));
  }
same:;
  tt_hlo_type pt = tt_hlo_make_type(in->buf_dtype, 1, &in->buf_numel);
  tt_hv x = tt_hlo_param(b, &pt);
  int64_t bs = tt_dtype_size(in->buf_dtype), vs = tt_dtype_size(in->dtype);
  tt_hlo_type vt = tt_hlo_make_type(in->dtype, 1, &in->numel);
  if (in->buf_dtype == in->dtype) {
    *out = x;
  } else if (bs == vs) {
    *out = tt_hlo_bitcast(b, x, in->dtype);
  } else if (bs < vs) {  // widening: [numel, ratio] of the narrow type
    int64_t dims[2] = {in->numel, vs / bs};
    *out = tt_hlo_bitcast_to(b, tt_hlo_reshape(b, x, 2, dims), &vt);
  } else {  // narrowing: the result has a trailing dim of the ratio
    int64_t dims[2] = {in->buf_numel, bs / vs};
    tt_hlo_type nt = tt_hlo_make_type(in->dtype, 2, dims);
    *out = tt_hlo_reshape(b, tt_hlo_bitcast_to(b, x, &nt), 1, &in->numel);
  }
  return NULL;
}

tt_status tt_collective_program(tt_hlo *b, const tt_collective_desc *d,
                                const tt_collective_input *in,
                                int64_t *out_numel, const char **out_text,
                                size_t *out_len) {
  int n = d->ndevices;
  tt_dtype dtype = in->dtype;
  int64_t in_numel = in->numel;
  tt_hlo_reset(b);
  tt_hv x = TT_HV_INVALID, r = TT_HV_INVALID;
  TT_RETURN_IF_ERROR(read_input(b, in, &x));
  int kind = reduce_kind(d->op, dtype);
  bool reduces = d->kind == TT_COLLECTIVE_ALL_REDUCE ||
                 d->kind == TT_COLLECTIVE_REDUCE_SCATTER;
  if (reduces && kind < 0)
    return tt_make_status(TT_INVALID_ARGUMENT, "%s: %s of %s is not supported",
                          tt_collective_name(d->kind), op_name(d->op),
                          tt_dtype_name(dtype));
  switch (d->kind) {
    case TT_COLLECTIVE_ALL_REDUCE:
      *out_numel = in_numel;
      if (dtype == TT_BOOL) {
        r = tt_hlo_all_reduce(b, tt_hlo_convert(b, x, TT_U8),
                              (tt_hlo_reduce_kind)kind, n, 1);
        r = tt_hlo_convert(b, r, TT_BOOL);
        break;
      }
      r = tt_hlo_all_reduce(b, x, (tt_hlo_reduce_kind)kind, n, 1);
      if (d->op == TT_REDUCE_AVG) r = divide_by(b, r, n);
      break;
    case TT_COLLECTIVE_ALL_GATHER:
      *out_numel = in_numel * n;
      r = tt_hlo_all_gather(b, x, 0, n, 1);
      break;
    case TT_COLLECTIVE_REDUCE_SCATTER:
      if (in_numel % n) return bad_count(d, in_numel);
      *out_numel = in_numel / n;
      r = tt_hlo_reduce_scatter(b, x, 0, (tt_hlo_reduce_kind)kind, n, 1);
      if (d->op == TT_REDUCE_AVG) r = divide_by(b, r, n);
      break;
    case TT_COLLECTIVE_ALL_TO_ALL: {
      if (in_numel % n) return bad_count(d, in_numel);
      *out_numel = in_numel;
      int64_t blocks[2] = {n, in_numel / n};
      r = tt_hlo_all_to_all(b, tt_hlo_reshape(b, x, 2, blocks), 0, 0, n, 1);
      r = tt_hlo_reshape(b, r, 1, &in_numel);
      break;
    }
    case TT_COLLECTIVE_BROADCAST:
      if (d->root < 0 || d->root >= n)
        return tt_make_status(TT_INVALID_ARGUMENT,
                              "broadcast: root %d outside devices 0..%d",
                              d->root, n - 1);
      *out_numel = in_numel;
      r = broadcast_from(b, x, d->root, n);
      break;
    default:
      return tt_make_status(TT_INVALID_ARGUMENT, "unknown collective %d",
                            (int)d->kind);
  }
  TT_RETURN_IF_ERROR(tt_hlo_take_status(b));
  return tt_hlo_finish(b, &r, 1, out_text, out_len);
}

// --- checks --------------------------------------------------------------------------

static tt_status check_args(tt_runtime *rt, const tt_collective_desc *d,
                            const tt_tensor *in, const tt_tensor *out) {
  const char *what = tt_collective_name(d->kind);
  int n = d->ndevices;
  if (n < 1 || n > rt->info.device_count || n > TT_MAX_DEVICES)
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "%s over %d devices: this process has %d %s devices",
                          what, n, rt->info.device_count, rt->info.platform);
  char s0[96], si[96];
  for (int i = 0; i < n; i++) {
    const tt_tensor *x = &in[i], *y = &out[i];
    if (!x->storage || !y->storage)
      return tt_make_status(TT_INVALID_ARGUMENT, "%s: %s of device %d is "
                            "undefined", what, x->storage ? "output" : "input",
                            i);
    if (x->storage->device != i || y->storage->device != i)
      return tt_make_status(TT_INVALID_ARGUMENT,
                            "%s: tensor %d is on device %d (input) and %d "
                            "(output); tensor i must be on device i", what, i,
                            x->storage->device, y->storage->device);
    if (x->dtype != in[0].dtype || y->dtype != in[0].dtype)
      return tt_make_status(TT_INVALID_ARGUMENT,
                            "%s: device %d has %s input and %s output, device "
                            "0 has %s input", what, i, tt_dtype_name(x->dtype),
                            tt_dtype_name(y->dtype),
                            tt_dtype_name(in[0].dtype));
    bool same = x->ndim == in[0].ndim;
    for (int k = 0; same && k < x->ndim; k++)
      same = x->sizes[k] == in[0].sizes[k];
    if (!same)
      return tt_make_status(TT_INVALID_ARGUMENT,
                            "%s: device %d's input has shape %s, device 0's "
                            "%s; every device must pass the same shape", what,
                            i, shape_str(x, si, sizeof si),
                            shape_str(&in[0], s0, sizeof s0));
    if (!whole_dense(x) || !whole_dense(y))
      return tt_make_status(TT_INVALID_ARGUMENT,
                            "%s: device %d's %s is not a dense view covering "
                            "its storage (copy it to a contiguous tensor "
                            "first)", what, i, whole_dense(x) ? "output" : "input");
  }
  return NULL;
}

// --- running -------------------------------------------------------------------------

// The final text: a comment naming the device ids, and the replica count.
static tt_status replicated_text(const char *text, size_t len, int n,
                                 const int64_t *ids, tt_buf *out) {
  static const char one[] = "mhlo.num_replicas = 1 : i32";
  tt_buf_printf(out, "// torchtpu collective: %d replicas on device ids", n);
  for (int i = 0; i < n; i++) tt_buf_printf(out, " %lld", (long long)ids[i]);
  tt_buf_printf(out, "\n");
  const char *at = strstr(text, one);
  if (!at || (size_t)(at - text) > len)
    return tt_make_status(TT_INTERNAL, "collective: module has no %s", one);
  tt_buf_append(out, text, (size_t)(at - text));
  tt_buf_printf(out, "mhlo.num_replicas = %d : i32", n);
  size_t rest = (size_t)(at - text) + sizeof one - 1;
  tt_buf_append(out, text + rest, len - rest);
  return tt_buf_ok(out) ? NULL
                        : tt_make_status(TT_RESOURCE_EXHAUSTED,
                                         "collective: out of host memory");
}

static tt_status compile_locked(tt_runtime *rt, const tt_collective_desc *d,
                                const tt_collective_input *in,
                                int64_t *out_numel, tt_pjrt_exe **out) {
  int n = d->ndevices;
  int64_t ids[TT_MAX_DEVICES];
  for (int i = 0; i < n; i++)
    TT_RETURN_IF_ERROR(tt_pjrt_device_id(rt->pjrt, i, &ids[i]));
  tt_hlo *b = NULL;
  TT_RETURN_IF_ERROR(tt_hlo_create(&b));
  const char *text = NULL;
  size_t len = 0;
  void *opts = NULL;
  size_t opts_len = 0;
  tt_buf full;
  tt_buf_init(&full);
  tt_status st = tt_collective_program(b, d, in, out_numel, &text, &len);
  if (!st) st = replicated_text(text, len, n, ids, &full);
  if (!st) st = tt_pjrt_compile_options_replicated(n, ids, &opts, &opts_len);
  if (!st)
    st = tt_runtime_compile_with_options(rt, (const char *)full.data, full.len,
                                         opts, opts_len, out);
  free(opts);
  tt_buf_deinit(&full);
  tt_hlo_destroy(b);
  return st;
}

// Gives every input storage a buffer and describes them; they must agree.
static tt_status gather_inputs(const tt_collective_desc *d, const tt_tensor *in,
                               tt_pjrt_buffer **args, tt_collective_input *out) {
  const char *what = tt_collective_name(d->kind);
  for (int i = 0; i < d->ndevices; i++) {
    tt_storage *s = in[i].storage;
    if (!s->buf && s->lost)
      return tt_make_status(TT_FAILED_PRECONDITION,
                            "%s: device %d's input lost its value (a fused "
                            "graph that was to compute it failed)", what, i);
    TT_RETURN_IF_ERROR(tt_storage_materialize(s, in[i].dtype));
    if (i == 0) {
      *out = (tt_collective_input){in[0].dtype, tt_view_numel(&in[0]), s->dtype,
                                   s->numel};
    } else if (s->dtype != out->buf_dtype || s->numel != out->buf_numel) {
      return tt_make_status(TT_INVALID_ARGUMENT,
                            "%s: device %d's storage holds %lld %s elements, "
                            "device 0's %lld %s (copy the inputs to fresh "
                            "tensors first)", what, i, (long long)s->numel,
                            tt_dtype_name(s->dtype), (long long)out->buf_numel,
                            tt_dtype_name(out->buf_dtype));
    }
    args[i] = s->buf;
  }
  return NULL;
}

static tt_status run_locked(tt_runtime *rt, const tt_collective_desc *d,
                            const tt_tensor *in, const tt_tensor *out) {
  int n = d->ndevices;
  const char *what = tt_collective_name(d->kind);
  TT_RETURN_IF_ERROR(tt_exec_flush(rt->exec));
  tt_pjrt_buffer *args[TT_MAX_DEVICES], *outs[TT_MAX_DEVICES];
  tt_pjrt_event *done[TT_MAX_DEVICES];
  tt_collective_input ci;
  TT_RETURN_IF_ERROR(gather_inputs(d, in, args, &ci));
  int64_t out_numel = 0;
  tt_pjrt_exe *exe = NULL;
  tt_status st = compile_locked(rt, d, &ci, &out_numel, &exe);
  if (st) return tt_status_annotate(st, "%s", what);
  for (int i = 0; i < n; i++) {
    if (tt_view_numel(&out[i]) != out_numel) {
      char so[96];
      return tt_make_status(TT_INVALID_ARGUMENT,
                            "%s over %d devices: device %d's output has shape "
                            "%s (%lld elements), expected %lld elements", what,
                            n, i, shape_str(&out[i], so, sizeof so),
                            (long long)tt_view_numel(&out[i]), (long long)out_numel);
    }
  }
  st = tt_profile_execute_replicated(rt, what, exe, n, args, 1, outs, done);
  if (st)
    return tt_status_annotate(st, "%s %s of %lld %s elements on devices 0..%d",
                              what, op_name(d->op), (long long)ci.numel,
                              tt_dtype_name(ci.dtype), n - 1);
  for (int i = 0; i < n; i++)
    tt_storage_set_buffer(out[i].storage, outs[i], ci.dtype, out_numel);
  for (int i = 0; i < n; i++) {
    tt_status e = tt_runtime_track_event(rt, done[i]);
    if (e && !st) st = e;
    else tt_status_free(e);
  }
  rt->stats.op_calls++;
  return st;
}

tt_status tt_collective_run(tt_runtime *rt, const tt_collective_desc *d,
                            const tt_tensor *inputs, const tt_tensor *outputs) {
  if (!rt || !d || !inputs || !outputs)
    return tt_make_status(TT_INVALID_ARGUMENT, "collective: NULL argument");
  TT_RETURN_IF_ERROR(check_args(rt, d, inputs, outputs));
  pthread_mutex_lock(&rt->mu);
  tt_status st = run_locked(rt, d, inputs, outputs);
  pthread_mutex_unlock(&rt->mu);
  return st;
}
