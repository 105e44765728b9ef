// SHA-256 and HMAC-SHA256 against the published test vectors: FIPS 180-4's
// examples ("abc", the 448-bit message, one million 'a'), the empty string,
// RFC 4231's HMAC cases 1, 2, 6 and 7; split updates give the same digest.
#include <stdio.h>
#include <string.h>

#include "base/sha256.h"
#include "check.h"

static void hex(const unsigned char *d, char out[65]) {
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void check_sha(const char *msg, size_t len, const char *want) {
  unsigned char d[32];
  char got[65];
  tt_sha256(msg, len, d);
  hex(d, got);
  CHECK(strcmp(got, want) == 0, "sha256(%.20s...) = %s, want %s", msg, got, want);
}

static void check_hmac(const void *key, size_t klen, const char *msg, const char *want) {
  unsigned char d[32];
  char got[65];
  tt_hmac_sha256(key, klen, msg, strlen(msg), d);
  hex(d, got);
  CHECK(strcmp(got, want) == 0, "hmac(%.20s) = %s, want %s", msg, got, want);
}

static void test_sha256_vectors(void) {
  check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  check_sha(m448, strlen(m448),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a', fed in uneven pieces (exercises the block buffering).
  static char a[1000];
  memset(a, 'a', sizeof a);
  tt_sha256_ctx s;
  tt_sha256_init(&s);
  size_t left = 1000000, piece = 1;
  while (left > 0) {
    size_t n = piece < left ? piece : left;
    if (n > sizeof a) n = sizeof a;
    tt_sha256_update(&s, a, n);
    left -= n;
    piece = piece * 7 % 997 + 1;
  }
  unsigned char d[32];
  char got[65];
  tt_sha256_final(&s, d);
  hex(d, got);
  CHECK(strcmp(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0,
        "sha256(1e6 x 'a') = %s", got);
  // Lengths around the padding boundary (55, 56, 63, 64 bytes): one update
  // and byte-by-byte updates agree.
  for (size_t n = 50; n <= 70; n++) {
    unsigned char one[32], many[32];
    tt_sha256(a, n, one);
    tt_sha256_init(&s);
    for (size_t i = 0; i < n; i++) tt_sha256_update(&s, a + i, 1);
    tt_sha256_final(&s, many);
    CHECK(memcmp(one, many, 32) == 0, "length %zu: split updates differ", n);
  }
}

static void test_hmac_vectors(void) {
  unsigned char k1[20];
  memset(k1, 0x0b, sizeof k1);
  check_hmac(k1, sizeof k1, "Hi There",
             "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  check_hmac("Jefe", 4, "what do ya want for nothing?",
             "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  unsigned char k6[131];
  memset(k6, 0xaa, sizeof k6);
  check_hmac(k6, sizeof k6, "Test Using Larger Than Block-Size Key - Hash Key First",
             "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  check_hmac(k6, sizeof k6,
             "This is a test using a larger than block-size key and a larger than "
             "block-size data. The key needs to be hashed before being used by the "
             "HMAC algorithm.",
             "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  unsigned char a[32] = {1}, b[32] = {1};
  CHECK(tt_digest_equal(a, b, 32));
  b[31] = 2;
  CHECK(!tt_digest_equal(a, b, 32));
}

int main(void) {
  test_sha256_vectors();
  test_hmac_vectors();
  if (check_exit_code() == 0) printf("test_sha256: ok\n");
  return check_exit_code();
}
