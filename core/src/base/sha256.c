// sha256.c — SHA-256 and HMAC-SHA256. See sha256.h.
#include "base/sha256.h"

#include <string.h>

// --- SHA-256 -----------------------------------------------------------------------
//
// FIPS 180-4 section 6.2: 64 rounds over 512-bit blocks, big-endian words.
// The round constants are the first 32 bits of the fractional parts of the
// cube roots of the first 64 primes; the initial hash, of the square roots
// of the first 8 primes.

static const uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static uint32_t load_be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         (uint32_t)p[3];
}

static void store_be32(unsigned char *p, uint32_t x) {
  p[0] = (unsigned char)(x >> 24);
  p[1] = (unsigned char)(x >> 16);
  p[2] = (unsigned char)(x >> 8);
  p[3] = (unsigned char)x;
}

static void compress(uint32_t h[8], const unsigned char block[64]) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++) w[t] = load_be32(block + 4 * t);
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
  uint32_t e = h[4], f = h[5], g = h[6], k = h[7];
  for (int t = 0; t < 64; t++) {
    uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = k + S1 + ch + kRound[t] + w[t];
    uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = S0 + maj;
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += k;
}

void tt_sha256_init(tt_sha256_ctx *s) {
  static const uint32_t kInit[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                    0xa54ff53a, 0x510e527f, 0x9b05688c,
                                    0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, kInit, sizeof kInit);
  s->total = 0;
  s->fill = 0;
}

void tt_sha256_update(tt_sha256_ctx *s, const void *data, size_t len) {
  const unsigned char *p = data;
  s->total += len;
  if (s->fill > 0) {
    size_t take = TT_SHA256_BLOCK - s->fill;
    if (take > len) take = len;
    memcpy(s->block + s->fill, p, take);
    s->fill += take;
    p += take;
    len -= take;
    if (s->fill < TT_SHA256_BLOCK) return;
    compress(s->h, s->block);
    s->fill = 0;
  }
  for (; len >= TT_SHA256_BLOCK; p += TT_SHA256_BLOCK, len -= TT_SHA256_BLOCK)
    compress(s->h, p);
  if (len > 0) memcpy(s->block, p, len);
  s->fill = len;
}

// Padding: 0x80, zeros up to 56 mod 64, then the message length in bits as a
// big-endian 64-bit number.
void tt_sha256_final(tt_sha256_ctx *s, unsigned char out[TT_SHA256_BYTES]) {
  uint64_t bits = s->total * 8;
  s->block[s->fill++] = 0x80;
  if (s->fill > 56) {
    memset(s->block + s->fill, 0, TT_SHA256_BLOCK - s->fill);
    compress(s->h, s->block);
    s->fill = 0;
  }
  memset(s->block + s->fill, 0, 56 - s->fill);
  for (int i = 0; i < 8; i++) s->block[56 + i] = (unsigned char)(bits >> (56 - 8 * i));
  compress(s->h, s->block);
  for (int i = 0; i < 8; i++) store_be32(out + 4 * i, s->h[i]);
  memset(s, 0, sizeof *s);
}

void tt_sha256(const void *data, size_t len, unsigned char out[TT_SHA256_BYTES]) {
  tt_sha256_ctx s;
  tt_sha256_init(&s);
  tt_sha256_update(&s, data, len);
  tt_sha256_final(&s, out);
}

// --- HMAC --------------------------------------------------------------------------
//
// RFC 2104: H((K ^ opad) || H((K ^ ipad) || m)), K hashed first when longer
// than a block and zero-padded to one.

void tt_hmac_init(tt_hmac *m, const void *key, size_t key_len) {
  unsigned char k[TT_SHA256_BLOCK] = {0};
  if (key_len > TT_SHA256_BLOCK) {
    tt_sha256(key, key_len, k);
  } else if (key_len > 0) {
    memcpy(k, key, key_len);
  }
  unsigned char ikey[TT_SHA256_BLOCK];
  for (int i = 0; i < TT_SHA256_BLOCK; i++) {
    ikey[i] = k[i] ^ 0x36;
    m->okey[i] = k[i] ^ 0x5c;
  }
  tt_sha256_init(&m->inner);
  tt_sha256_update(&m->inner, ikey, sizeof ikey);
  memset(k, 0, sizeof k);
  memset(ikey, 0, sizeof ikey);
}

void tt_hmac_update(tt_hmac *m, const void *data, size_t len) {
  tt_sha256_update(&m->inner, data, len);
}

void tt_hmac_final(tt_hmac *m, unsigned char out[TT_SHA256_BYTES]) {
  unsigned char inner[TT_SHA256_BYTES];
  tt_sha256_final(&m->inner, inner);
  tt_sha256_ctx outer;
  tt_sha256_init(&outer);
  tt_sha256_update(&outer, m->okey, sizeof m->okey);
  tt_sha256_update(&outer, inner, sizeof inner);
  tt_sha256_final(&outer, out);
  memset(m, 0, sizeof *m);
}

void tt_hmac_sha256(const void *key, size_t key_len, const void *data,
                    size_t len, unsigned char out[TT_SHA256_BYTES]) {
  tt_hmac m;
  tt_hmac_init(&m, key, key_len);
  tt_hmac_update(&m, data, len);
  tt_hmac_final(&m, out);
}

bool tt_digest_equal(const unsigned char *a, const unsigned char *b, size_t n) {
  unsigned char diff = 0;
  for (size_t i = 0; i < n; i++) diff |= (unsigned char)(a[i] ^ b[i]);
  return diff == 0;
}
