// hlo_collective.c — StableHLO's collective ops, for replicated programs.
//
// Each op is written in MLIR's generic form, regions before the attribute
// dictionary:
//   %r = "stablehlo.all_reduce"(%x) ({ ^bb0(...): ... }) {replica_groups =
//        dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, channel_handle =
//        #stablehlo.channel_handle<handle = 1, type = 1>,
//        use_global_device_ids} : (tensor<...>) -> tensor<...>
// Leaves out: several replica groups (one group of every replica is what a
// process group over the devices of a process needs), partitions (SPMD
// sharding), the variadic (tuple) forms.
#include <stdio.h>

#include "hlo/hlo_internal.h"

// --- shared attribute text ---------------------------------------------------------------

static const tt_hlo_type *ty(tt_hlo *b, tt_hv v) { return tt_hlo_type_of(b, v); }

// "replica_groups = dense<[[0, ..., n-1]]> : tensor<1xNxi64>, channel_handle
// = ..., use_global_device_ids" (no braces). channel < 1: the groups alone.
static void put_group_attrs(tt_hlo_buf *s, int n, int64_t channel) {
  tt_hlo_buf_printf(s, "replica_groups = dense<[[");
  for (int i = 0; i < n; i++) tt_hlo_buf_printf(s, "%s%d", i ? ", " : "", i);
  tt_hlo_buf_printf(s, "]]> : tensor<1x%dxi64>", n);
  if (channel < 1) return;
  tt_hlo_buf_printf(s,
                    ", channel_handle = #stablehlo.channel_handle<handle = %lld, "
                    "type = 1>, use_global_device_ids",
                    (long long)channel);
}

// Checks the operand, the group size and the channel; records the error.
static bool check(tt_hlo *b, const char *op, tt_hv x, int n, int64_t channel) {
  if (!tt_hlo_ok(b, &x, 1)) return false;
  if (n < 1 || channel < 1) {
    tt_hlo_failf(b, "%s: group of %d replicas, channel %lld", op, n,
                 (long long)channel);
    return false;
  }
  return true;
}

static bool check_dim(tt_hlo *b, const char *op, const tt_hlo_type *t,
                      int64_t dim, int64_t divisor) {
  if (dim < 0 || dim >= t->rank || (divisor > 1 && t->dims[dim] % divisor)) {
    tt_hlo_failf(b, "%s: dim %lld of a rank-%d operand (size %lld) over %lld "
                 "replicas", op, (long long)dim, t->rank,
                 dim >= 0 && dim < t->rank ? (long long)t->dims[dim] : -1LL,
                 (long long)divisor);
    return false;
  }
  return true;
}

static bool check_kind(tt_hlo *b, const char *op, tt_hlo_reduce_kind kind) {
  if (kind >= TT_HLO_REDUCE_ADD && kind <= TT_HLO_REDUCE_OR) return true;
  tt_hlo_failf(b, "%s: reduction kind %d", op, (int)kind);
  return false;
}

// Ends an op line: " : (x's type) -> result type\n".
static void put_tail(tt_hlo *b, tt_hv x, tt_hv r) {
  tt_hlo_put_types(b, &b->body, &x, 1);
  tt_hlo_put_type(&b->body, ty(b, r));
  tt_hlo_buf_printf(&b->body, "\n");
}

// Emits a reducing collective (all_reduce, reduce_scatter) of x into a new
// value of type `t`; `extra` are attributes before the group's.
static tt_hv reducing(tt_hlo *b, const char *name, tt_hv x,
                      const tt_hlo_type *t, tt_hlo_reduce_kind kind,
                      const char *extra, int n, int64_t channel) {
  tt_hv r = tt_hlo_new_values(b, t, 1);
  if (r == TT_HV_INVALID) return r;
  tt_hlo_begin_line(b, r, 1);
  tt_hlo_buf_printf(&b->body, "\"%s\"(", name);
  tt_hlo_put_name(b, &b->body, x);
  tt_hlo_buf_printf(&b->body, ")");
  tt_hlo_combiner_region(b, &t->dtype, 1, (int)kind);
  tt_hlo_buf_printf(&b->body, " {%s", extra ? extra : "");
  put_group_attrs(&b->body, n, channel);
  tt_hlo_buf_printf(&b->body, "}");
  put_tail(b, x, r);
  return r;
}

// Emits a collective without a region.
static tt_hv plain(tt_hlo *b, const char *name, tt_hv x, const tt_hlo_type *t,
                   const char *attrs) {
  tt_hv r = tt_hlo_new_values(b, t, 1);
  if (r == TT_HV_INVALID) return r;
  tt_hlo_begin_line(b, r, 1);
  tt_hlo_buf_printf(&b->body, "\"%s\"(", name);
  tt_hlo_put_name(b, &b->body, x);
  tt_hlo_buf_printf(&b->body, ") {%s}", attrs);
  put_tail(b, x, r);
  return r;
}

// --- the ops -----------------------------------------------------------------------------

tt_hv tt_hlo_all_reduce(tt_hlo *b, tt_hv x, tt_hlo_reduce_kind kind, int n,
                        int64_t channel) {
  if (!check(b, "all_reduce", x, n, channel) ||
      !check_kind(b, "all_reduce", kind))
    return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  return reducing(b, "stablehlo.all_reduce", x, &t, kind, NULL, n, channel);
}

tt_hv tt_hlo_reduce_scatter(tt_hlo *b, tt_hv x, int64_t dim,
                            tt_hlo_reduce_kind kind, int n, int64_t channel) {
  if (!check(b, "reduce_scatter", x, n, channel) ||
      !check_kind(b, "reduce_scatter", kind) ||
      !check_dim(b, "reduce_scatter", ty(b, x), dim, n))
    return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  t.dims[dim] /= n;
  char extra[64];
  snprintf(extra, sizeof extra, "scatter_dimension = %lld : i64, ",
           (long long)dim);
  return reducing(b, "stablehlo.reduce_scatter", x, &t, kind, extra, n,
                  channel);
}

tt_hv tt_hlo_all_gather(tt_hlo *b, tt_hv x, int64_t dim, int n,
                        int64_t channel) {
  if (!check(b, "all_gather", x, n, channel) ||
      !check_dim(b, "all_gather", ty(b, x), dim, 1))
    return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  t.dims[dim] *= n;
  tt_hlo_buf a = {0};
  tt_hlo_buf_printf(&a, "all_gather_dim = %lld : i64, ", (long long)dim);
  put_group_attrs(&a, n, channel);
  tt_hv r = a.oom ? TT_HV_INVALID
                  : plain(b, "stablehlo.all_gather", x, &t, a.p);
  if (a.oom) tt_hlo_failf(b, "all_gather: out of memory");
  tt_hlo_buf_free(&a);
  return r;
}

tt_hv tt_hlo_all_to_all(tt_hlo *b, tt_hv x, int64_t split_dim,
                        int64_t concat_dim, int n, int64_t channel) {
  if (!check(b, "all_to_all", x, n, channel) ||
      !check_dim(b, "all_to_all", ty(b, x), split_dim, n) ||
      !check_dim(b, "all_to_all", ty(b, x), concat_dim, 1))
    return TT_HV_INVALID;
  tt_hlo_type t = *ty(b, x);
  t.dims[split_dim] /= n;
  t.dims[concat_dim] *= n;
  tt_hlo_buf a = {0};
  tt_hlo_buf_printf(&a,
                    "split_dimension = %lld : i64, concat_dimension = %lld : "
                    "i64, split_count = %d : i64, ",
                    (long long)split_dim, (long long)concat_dim, n);
  // all_to_all has no use_global_device_ids: with a channel its groups
  // would be partition ids (cross_partition), so a replicated program
  // gives none and the groups are replica ids (cross_replica).
  (void)channel;
  put_group_attrs(&a, n, 0);
  tt_hv r = a.oom ? TT_HV_INVALID
                  : plain(b, "stablehlo.all_to_all", x, &t, a.p);
  if (a.oom) tt_hlo_failf(b, "all_to_all: out of memory");
  tt_hlo_buf_free(&a);
  return r;
}

tt_hv tt_hlo_collective_permute(tt_hlo *b, tt_hv x, const int64_t (*pairs)[2],
                                int npairs, int64_t channel) {
  if (!check(b, "collective_permute", x, npairs > 0 ? npairs : 1, channel))
    return TT_HV_INVALID;
  if (npairs < 1) {
    tt_hlo_failf(b, "collective_permute: %d source-target pairs", npairs);
    return TT_HV_INVALID;
  }
  tt_hlo_type t = *ty(b, x);
  tt_hlo_buf a = {0};
  tt_hlo_buf_printf(&a, "source_target_pairs = dense<[");
  for (int i = 0; i < npairs; i++)
    tt_hlo_buf_printf(&a, "%s[%lld, %lld]", i ? ", " : "",
                      (long long)pairs[i][0], (long long)pairs[i][1]);
  // As all_to_all: a channel would make the pairs partition ids.
  (void)channel;
  tt_hlo_buf_printf(&a, "]> : tensor<%dx2xi64>", npairs);
  tt_hv r = a.oom ? TT_HV_INVALID
                  : plain(b, "stablehlo.collective_permute", x, &t, a.p);
  if (a.oom) tt_hlo_failf(b, "collective_permute: out of memory");
  tt_hlo_buf_free(&a);
  return r;
}

tt_hv tt_hlo_replica_id(tt_hlo *b) {
  tt_hlo_type t = tt_hlo_make_type(TT_U32, 0, NULL);
  return tt_hlo_emit(b, "stablehlo.replica_id", NULL, 0, NULL, &t);
}
