// spill.h — dense copies in place of per-layout programs (internal; spill.c).
//
// A program is compiled per input layout: the view's strides are folded into
// the op's gather. A caller that sweeps many layouts of one shape (a test
// looping over transposes and slices, a sampler over permuted views) compiles
// one program per op and layout, and XLA's compile dwarfs the op. Once an
// op has been compiled for `layouts_per_op` layouts of inputs with the same
// dense signature, the strict executor stops specialising: a further layout
// is "spilled", its strided inputs copied dense first (one copy program per
// layout, shared by every op) and the op run through its dense program.
//
// Only read-only inputs that are strided without being expanded (no stride-0
// dim) are spilled: a written view keeps its layout (the program scatters
// into it), an expanded input stays a broadcast. Fresh results are dense
// either way, so nothing but the count of launches changes.
#ifndef TT_RUNTIME_SPILL_H
#define TT_RUNTIME_SPILL_H

#include <stdint.h>

#include "lower/ctx.h"
#include "torchtpu.h"

// Counts of distinct layouts seen per dense signature (by 64-bit hash: a
// collision only makes a layout spill early, which is still correct).
typedef struct tt_layout_counts {
  uint64_t *keys;  // 0: empty
  int32_t *counts;
  size_t cap, used;
} tt_layout_counts;

void tt_layout_counts_deinit(tt_layout_counts *m);
// Adds one layout to `hash`'s count and returns the new count (0 when out
// of memory: then nothing spills).
int32_t tt_layout_counts_bump(tt_layout_counts *m, uint64_t hash);

// Slots (bit i: slot i, i < 64) that could be spilled: strided, not
// expanded, not empty, not written (`written`: slots the program writes).
uint64_t tt_spill_candidates(const tt_slot *slots, int nslots, uint64_t written);

// A copy of a call whose spilled slots read other storages, densely.
typedef struct tt_spill_call {
  tt_op_call call;
  tt_value *args;                  // owned, with owned copies of lists
  int64_t (*strides)[TT_MAX_RANK];  // per slot (owned)
} tt_spill_call;

// Builds `out` from `call`: slot i in `mask` reads `storages[i]` (offset 0,
// row-major strides), everything else as in `call`.
tt_status tt_spill_call_init(tt_spill_call *out, const tt_op_call *call,
                             const tt_slot *slots, int nslots, uint64_t mask,
                             tt_storage *const *storages);
void tt_spill_call_deinit(tt_spill_call *c);

#endif
