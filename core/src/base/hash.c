// 64-bit FNV-1a. See hash.h.
#include "base/hash.h"

#include <string.h>

uint64_t tt_hash64(const void *data, size_t len) {
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// Multiply-xorshift over 8-byte words, the tail zero-padded with the length
// folded in, finalised by MurmurHash3's fmix64 so that the low bits (bucket
// indices) depend on every input bit.
uint64_t tt_hash_words(const void *data, size_t len) {
  const unsigned char *p = data;
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)len;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  uint64_t tail = 0;
  memcpy(&tail, p + i, len - i);
  h = (h ^ tail) * 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}
