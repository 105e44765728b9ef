// Dense copies in place of per-layout programs (see spill.h).
#include "runtime/spill.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/storage.h"

// --- layout counts --------------------------------------------------------------------------

void tt_layout_counts_deinit(tt_layout_counts *m) {
  free(m->keys);
  free(m->counts);
  memset(m, 0, sizeof *m);
}

static int32_t *slot_of(const tt_layout_counts *m, uint64_t key) {
  size_t i = (size_t)(key ^ (key >> 29)) & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  return &m->counts[i];
}

static bool grow(tt_layout_counts *m) {
  size_t cap = m->cap ? m->cap * 2 : 256;
  tt_layout_counts n = {calloc(cap, sizeof *n.keys), calloc(cap, sizeof *n.counts), cap,
                        m->used};
  if (!n.keys || !n.counts) {
    tt_layout_counts_deinit(&n);
    return false;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    int32_t *c = slot_of(&n, m->keys[i]);
    n.keys[c - n.counts] = m->keys[i];
    *c = m->counts[i];
  }
  tt_layout_counts_deinit(m);
  *m = n;
  return true;
}

int32_t tt_layout_counts_bump(tt_layout_counts *m, uint64_t hash) {
  uint64_t key = hash ? hash : 1;  // 0 marks an empty slot
  if ((m->used + 1) * 4 > m->cap * 3 && !grow(m)) return 0;
  int32_t *c = slot_of(m, key);
  if (!m->keys[c - m->counts]) {
    m->keys[c - m->counts] = key;
    m->used++;
  }
  return ++*c;
}

// --- which slots --------------------------------------------------------------------------

// Strided, or a part of its storage, or another dtype's buffer (what the
// signature records), and not expanded: a dense copy would read otherwise.
static bool spillable(const tt_tensor *t) {
  for (int d = 0; d < t->ndim; d++)
    if (t->sizes[d] > 1 && t->strides[d] == 0) return false;  // expanded
  int64_t numel = tt_view_numel(t);
  if (numel == 0) return false;
  tt_storage_facts f;
  tt_storage_facts_of(t->storage, &f);
  return !tt_view_is_whole(t) || tt_facts_buffer_dtype(&f, t->dtype) != t->dtype ||
         tt_facts_buffer_numel(&f, t->dtype) != numel;
}

uint64_t tt_spill_candidates(const tt_slot *slots, int nslots, uint64_t written) {
  uint64_t mask = 0;
  for (int i = 0; i < nslots && i < 64; i++) {
    if (written >> i & 1) continue;
    if (spillable(slots[i].t)) mask |= 1ull << i;
  }
  return mask;
}

// --- the dense call ---------------------------------------------------------------------------

void tt_spill_call_deinit(tt_spill_call *c) {
  if (c->args) {
    for (int i = 0; i < c->call.nargs; i++)
      if (c->args[i].kind == TT_VALUE_LIST) free((void *)c->args[i].u.list.items);
    free(c->args);
  }
  free(c->strides);
  memset(c, 0, sizeof *c);
}

// Copies the call's arguments, and each list's items, so slots can be swapped.
static tt_status copy_args(tt_spill_call *c, const tt_op_call *call) {
  c->args = calloc((size_t)(call->nargs ? call->nargs : 1), sizeof *c->args);
  if (!c->args) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  c->call.nargs = call->nargs;
  for (int i = 0; i < call->nargs; i++) {
    c->args[i] = call->args[i];
    if (call->args[i].kind != TT_VALUE_LIST) continue;
    int n = call->args[i].u.list.n;
    tt_value *items = malloc((size_t)(n ? n : 1) * sizeof *items);
    c->args[i].u.list.items = items;
    if (!items) {
      c->args[i].kind = TT_VALUE_NONE;  // nothing for deinit to free
      return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
    }
    memcpy(items, call->args[i].u.list.items, (size_t)n * sizeof *items);
  }
  return NULL;
}

tt_status tt_spill_call_init(tt_spill_call *out, const tt_op_call *call,
                             const tt_slot *slots, int nslots, uint64_t mask,
                             tt_storage *const *storages) {
  memset(out, 0, sizeof *out);
  out->call = *call;
  out->strides = calloc((size_t)(nslots ? nslots : 1), sizeof *out->strides);
  tt_status st = out->strides ? copy_args(out, call)
                              : tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  if (st) {
    tt_spill_call_deinit(out);
    return st;
  }
  out->call.args = out->args;
  for (int i = 0; i < nslots && i < 64; i++) {
    if (!(mask >> i & 1)) continue;
    const tt_slot *s = &slots[i];
    tt_value *v = &out->args[s->arg];
    if (s->item >= 0) v = (tt_value *)&v->u.list.items[s->item];
    int64_t *st_i = out->strides[i], step = 1;
    for (int d = s->t->ndim - 1; d >= 0; d--) {
      st_i[d] = step;
      step *= s->t->sizes[d];
    }
    v->u.tensor.storage = storages[i];
    v->u.tensor.strides = st_i;
    v->u.tensor.offset = 0;
  }
  return NULL;
}
