// scalars.h — device copies of recent scalar arguments (internal; scalars.c).
//
// A training step passes the same few scalar values again and again (alpha
// = 1, lr, eps, betas, view offsets), so every executor takes their 0-d
// device buffers from this small direct-mapped cache instead of uploading
// each time. Owns: the cached buffers. Borrows: the PJRT client passed in.
// The runtime context embeds one cache; rt->mu guards it.
#ifndef TT_RUNTIME_SCALARS_H
#define TT_RUNTIME_SCALARS_H

#include <stdbool.h>
#include <stdint.h>

#include "pjrt/pjrt.h"
#include "torchtpu.h"

#define TT_SCALAR_CACHE 256

typedef struct tt_scalar_slot {
  tt_pjrt_buffer *buf;  // owned; NULL when empty
  int device;
  tt_dtype dtype;
  uint64_t bits;        // the value's bytes, zero-extended
} tt_scalar_slot;

typedef struct tt_scalar_cache {
  tt_scalar_slot slots[TT_SCALAR_CACHE];
} tt_scalar_cache;

void tt_scalar_cache_deinit(tt_scalar_cache *c, tt_pjrt *p);

// The value of a Scalar as `d`'s bytes (zero-extended into 8 bytes).
uint64_t tt_scalar_bits(const tt_scalar *s, tt_dtype d);
// One part of a Scalar as `d`'s bytes: the real part (tt_scalar_bits), or
// the imaginary part when `imag` (0 for a real Scalar).
uint64_t tt_scalar_part_bits(const tt_scalar *s, tt_dtype d, bool imag);

// A device buffer holding the 0-d value `bits` of dtype d, borrowed from the
// cache (valid until the next insert). A buffer evicted to make room goes to
// `*evicted` (else NULL): it may already be an argument of the program being
// assembled, so the caller destroys it only after the launch.
tt_status tt_scalar_cache_get(tt_scalar_cache *c, tt_pjrt *p, int device,
                              tt_dtype d, uint64_t bits, tt_pjrt_buffer **out,
                              tt_pjrt_buffer **evicted);
// The cached buffer for the value, or NULL; inserts nothing.
tt_pjrt_buffer *tt_scalar_cache_find(tt_scalar_cache *c, int device, tt_dtype d,
                                     uint64_t bits);
// Puts an owned 0-d buffer into the cache (destroying what it displaces: safe
// while a launched program still reads it, see pjrt.h).
void tt_scalar_cache_put(tt_scalar_cache *c, tt_pjrt *p, int device, tt_dtype d,
                         uint64_t bits, tt_pjrt_buffer *b);

#endif
