// hash.h — 64-bit FNV-1a, for cache keys (collisions are checked by callers,
// which compare the full key bytes).
#ifndef TT_BASE_HASH_H
#define TT_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t tt_hash64(const void *data, size_t len);

// Eight bytes a step (FNV takes one): for in-memory tables looked up on every
// op (signatures, scalar slots, program texts). Never persisted: its values
// may change between builds.
uint64_t tt_hash_words(const void *data, size_t len);

#endif
