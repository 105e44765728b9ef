// sha256.h — SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for
// authenticating persistent cache entries. Written from the standards'
// descriptions; checked against their published test vectors
// (core/tests/test_sha256.c).
//
// Leaves out: SHA-224/384/512, and constant-time guarantees beyond
// tt_digest_equal (the key never leaves the process; only the comparison of a
// computed tag with a stored one must not leak timing).
#ifndef TT_BASE_SHA256_H
#define TT_BASE_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TT_SHA256_BYTES 32
#define TT_SHA256_BLOCK 64

typedef struct tt_sha256 {
  uint32_t h[8];
  uint64_t total;  // bytes hashed so far
  unsigned char block[TT_SHA256_BLOCK];
  size_t fill;     // bytes pending in `block`
} tt_sha256_ctx;

void tt_sha256_init(tt_sha256_ctx *s);
void tt_sha256_update(tt_sha256_ctx *s, const void *data, size_t len);
void tt_sha256_final(tt_sha256_ctx *s, unsigned char out[TT_SHA256_BYTES]);
void tt_sha256(const void *data, size_t len, unsigned char out[TT_SHA256_BYTES]);

// HMAC-SHA256 over a message given in pieces (init, update..., final).
typedef struct tt_hmac {
  tt_sha256_ctx inner;
  unsigned char okey[TT_SHA256_BLOCK];  // key ^ opad
} tt_hmac;

void tt_hmac_init(tt_hmac *m, const void *key, size_t key_len);
void tt_hmac_update(tt_hmac *m, const void *data, size_t len);
void tt_hmac_final(tt_hmac *m, unsigned char out[TT_SHA256_BYTES]);
void tt_hmac_sha256(const void *key, size_t key_len, const void *data,
                    size_t len, unsigned char out[TT_SHA256_BYTES]);

// Compares two digests in time independent of where they differ.
bool tt_digest_equal(const unsigned char *a, const unsigned char *b, size_t n);

#endif
