// hlo_index.c — the builder's indexing and random ops: stablehlo.gather,
// stablehlo.scatter (with a combiner or overwrite region) and
// stablehlo.rng_bit_generator.
//
// Leaves out: multi-operand scatter, sorted/unique index hints (always false:
// rules can't promise them).
#include <inttypes.h>
#include <stdio.h>

#include "hlo/hlo_internal.h"

static bool has(const int64_t *xs, int n, int64_t v) {
  for (int i = 0; i < n; i++)
    if (xs[i] == v) return true;
  return false;
}

// --- gather -------------------------------------------------------------------------

// Result shape per the StableHLO spec: the index tensor's batch dims (all but
// index_vector_dim) fill the result dims not named in offset_dims; offset dims
// take the slice sizes of the operand dims that are neither collapsed nor
// batching.
static bool gather_type(const tt_hlo_type *xt, const tt_hlo_type *it,
                        const tt_hlo_gather_dims *d, const int64_t *sizes,
                        tt_hlo_type *t) {
  int64_t offs[TT_MAX_RANK], batch[TT_MAX_RANK];
  int noff = 0, nbatch = 0;
  for (int i = 0; i < xt->rank; i++) {
    // A slice of 1 from an empty dim is allowed here: it can only be taken
    // when there are no indices, and then tt_hlo_gather emits no gather.
    if (sizes[i] < 0 || sizes[i] > (xt->dims[i] ? xt->dims[i] : 1)) return false;
    if (!has(d->collapsed_slice_dims, d->n_collapsed, i) &&
        !has(d->operand_batching_dims, d->n_operand_batching, i))
      offs[noff++] = sizes[i];
  }
  for (int i = 0; i < it->rank; i++)
    if (i != d->index_vector_dim) batch[nbatch++] = it->dims[i];
  if (noff != d->n_offset_dims || noff + nbatch > TT_MAX_RANK) return false;
  *t = tt_hlo_make_type(xt->dtype, noff + nbatch, NULL);
  int o = 0, bi = 0;
  for (int i = 0; i < t->rank; i++)
    t->dims[i] = has(d->offset_dims, d->n_offset_dims, i) ? offs[o++] : batch[bi++];
  return o == noff && bi == nbatch;
}

static void put_gather_attrs(tt_hlo_buf *a, const tt_hlo_gather_dims *d,
                             const int64_t *sizes, int rank) {
  tt_hlo_buf_printf(a, "{dimension_numbers = #stablehlo.gather<offset_dims = ");
  tt_hlo_put_list(a, d->offset_dims, d->n_offset_dims);
  tt_hlo_buf_printf(a, ", collapsed_slice_dims = ");
  tt_hlo_put_list(a, d->collapsed_slice_dims, d->n_collapsed);
  if (d->n_operand_batching) {  // only newer StableHLO knows batching dims
    tt_hlo_buf_printf(a, ", operand_batching_dims = ");
    tt_hlo_put_list(a, d->operand_batching_dims, d->n_operand_batching);
    tt_hlo_buf_printf(a, ", start_indices_batching_dims = ");
    tt_hlo_put_list(a, d->start_indices_batching_dims, d->n_indices_batching);
  }
  tt_hlo_buf_printf(a, ", start_index_map = ");
  tt_hlo_put_list(a, d->start_index_map, d->n_start_index_map);
  tt_hlo_buf_printf(a, ", index_vector_dim = %" PRId64 ">, indices_are_sorted = false"
                    ", slice_sizes = ", d->index_vector_dim);
  tt_hlo_put_i64s(a, sizes, rank);
  tt_hlo_buf_printf(a, "}");
}

tt_hv tt_hlo_gather(tt_hlo *b, tt_hv x, tt_hv indices,
                    const tt_hlo_gather_dims *dims,
                    const int64_t *slice_sizes, const tt_hlo_type *out_type) {
  tt_hv xs[2] = {x, indices};
  if (!tt_hlo_ok(b, xs, 2)) return TT_HV_INVALID;
  const tt_hlo_type *xt = tt_hlo_type_of(b, x), *it = tt_hlo_type_of(b, indices);
  tt_hlo_type t;
  if (!gather_type(xt, it, dims, slice_sizes, &t) ||
      (out_type && !tt_hlo_same_type(&t, out_type))) {
    tt_hlo_failf(b, "gather: dimension numbers don't fit operand rank %d, "
                 "indices rank %d%s", (int)xt->rank, (int)it->rank,
                 out_type ? " and the given result type" : "");
    return TT_HV_INVALID;
  }
  if (tt_hlo_numel(&t) == 0) return tt_hlo_splat(b, &t, 0);  // nothing to gather
  for (int i = 0; i < xt->rank; i++)
    if (slice_sizes[i] > xt->dims[i]) {  // an empty operand dim, and indices into it
      tt_hlo_failf(b, "gather: slice of %lld from an empty operand dim %d",
                   (long long)slice_sizes[i], i);
      return TT_HV_INVALID;
    }
  tt_hlo_buf a = {0};
  put_gather_attrs(&a, dims, slice_sizes, xt->rank);
  tt_hv r = tt_hlo_emit(b, "stablehlo.gather", xs, 2, a.p, &t);
  tt_hlo_buf_free(&a);
  return r;
}

// --- scatter ------------------------------------------------------------------------

static void put_scatter_attrs(tt_hlo_buf *a, const tt_hlo_scatter_dims *d) {
  tt_hlo_buf_printf(a, " {indices_are_sorted = false, scatter_dimension_numbers = "
                       "#stablehlo.scatter<update_window_dims = ");
  tt_hlo_put_list(a, d->update_window_dims, d->n_update_window);
  tt_hlo_buf_printf(a, ", inserted_window_dims = ");
  tt_hlo_put_list(a, d->inserted_window_dims, d->n_inserted);
  if (d->n_input_batching) {
    tt_hlo_buf_printf(a, ", input_batching_dims = ");
    tt_hlo_put_list(a, d->input_batching_dims, d->n_input_batching);
    tt_hlo_buf_printf(a, ", scatter_indices_batching_dims = ");
    tt_hlo_put_list(a, d->scatter_indices_batching_dims, d->n_indices_batching);
  }
  tt_hlo_buf_printf(a, ", scatter_dims_to_operand_dims = ");
  tt_hlo_put_list(a, d->scatter_dims_to_operand_dims, d->n_scatter_to_operand);
  tt_hlo_buf_printf(a, ", index_vector_dim = %" PRId64 ">, unique_indices = false}",
                    d->index_vector_dim);
}

tt_hv tt_hlo_scatter(tt_hlo *b, tt_hv x, tt_hv indices, tt_hv updates,
                     const tt_hlo_scatter_dims *dims, int update_kind) {
  tt_hv xs[3] = {x, indices, updates};
  if (!tt_hlo_ok(b, xs, 3)) return TT_HV_INVALID;
  tt_hlo_type t = *tt_hlo_type_of(b, x);
  if (tt_hlo_type_of(b, updates)->dtype != t.dtype || update_kind < -1 ||
      update_kind > TT_HLO_REDUCE_OR) {
    tt_hlo_failf(b, "scatter: updates dtype differs from the operand's, or "
                 "bad combiner %d", update_kind);
    return TT_HV_INVALID;
  }
  tt_hv r = tt_hlo_new_values(b, &t, 1);
  if (r == TT_HV_INVALID) return r;
  tt_hlo_begin_line(b, r, 1);
  tt_hlo_buf_printf(&b->body, "\"stablehlo.scatter\"(");
  for (int i = 0; i < 3; i++) {
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_name(b, &b->body, xs[i]);
  }
  tt_hlo_buf_printf(&b->body, ")");
  tt_hlo_combiner_region(b, &t.dtype, 1, update_kind);
  put_scatter_attrs(&b->body, dims);
  tt_hlo_put_types(b, &b->body, xs, 3);
  tt_hlo_put_type(&b->body, &t);
  tt_hlo_buf_printf(&b->body, "\n");
  return r;
}

// --- random bits ----------------------------------------------------------------------

tt_hv tt_hlo_rng_bits(tt_hlo *b, tt_hv state, const tt_hlo_type *t) {
  if (!tt_hlo_ok(b, &state, 1)) return TT_HV_INVALID;
  const tt_hlo_type *st = tt_hlo_type_of(b, state);
  if (st->dtype != TT_U64 || st->rank != 1 || st->dims[0] != 2 ||
      (t->dtype != TT_U32 && t->dtype != TT_U64)) {
    tt_hlo_failf(b, "rng_bit_generator: state must be ui64[2] and bits ui32/ui64");
    return TT_HV_INVALID;
  }
  tt_hlo_type types[2] = {*st, *t};
  tt_hv r = tt_hlo_new_values(b, types, 2);
  if (r == TT_HV_INVALID) return r;
  tt_hlo_begin_line(b, r, 2);
  tt_hlo_buf_printf(&b->body, "\"stablehlo.rng_bit_generator\"(");
  tt_hlo_put_name(b, &b->body, state);
  tt_hlo_buf_printf(&b->body, ") {rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>}");
  tt_hlo_put_types(b, &b->body, &state, 1);
  tt_hlo_buf_printf(&b->body, "(");
  tt_hlo_put_type(&b->body, &types[0]);
  tt_hlo_buf_printf(&b->body, ", ");
  tt_hlo_put_type(&b->body, &types[1]);
  tt_hlo_buf_printf(&b->body, ")\n");
  return r + 1;  // the bits; the new state is unused (the ctx advances it)
}
