// The scalar-argument cache (see scalars.h).
#include "runtime/scalars.h"

#include <string.h>

#include "base/hash.h"
#include "base/status.h"

// The value of a Scalar as `d`'s bytes (zero-extended into 8 bytes).
uint64_t tt_scalar_bits(const tt_scalar *s, tt_dtype d) {
  bool fl = s->dtype == TT_F64 || s->dtype == TT_F32 || s->dtype == TT_F16 ||
            s->dtype == TT_BF16 || tt_dtype_is_complex(s->dtype);  // the real part
  double f = fl ? s->f : (double)s->i;
  // Saturating, as C's conversion of NaN, inf or out-of-range values is undefined.
  int64_t i = !fl ? s->i
              : s->f != s->f ? 0
              : s->f >= 9223372036854775807.0 ? INT64_MAX
              : s->f <= -9223372036854775808.0 ? INT64_MIN : (int64_t)s->f;
  uint64_t out = 0;
  switch (d) {
    case TT_BOOL: { uint8_t v = fl ? f != 0 : i != 0; memcpy(&out, &v, 1); break; }
    case TT_U8: { uint8_t v = (uint8_t)i; memcpy(&out, &v, 1); break; }
    case TT_I8: { int8_t v = (int8_t)i; memcpy(&out, &v, 1); break; }
    case TT_I16: { int16_t v = (int16_t)i; memcpy(&out, &v, 2); break; }
    case TT_U16: { uint16_t v = (uint16_t)i; memcpy(&out, &v, 2); break; }
    case TT_I32: { int32_t v = (int32_t)i; memcpy(&out, &v, 4); break; }
    case TT_U32: { uint32_t v = (uint32_t)i; memcpy(&out, &v, 4); break; }
    case TT_I64: case TT_U64: memcpy(&out, &i, 8); break;
    case TT_F16: { _Float16 v = (_Float16)f; memcpy(&out, &v, 2); break; }
    case TT_BF16: {  // round to nearest even from float32
      float x = (float)f;
      uint32_t u;
      memcpy(&u, &x, 4);
      uint16_t v = (x != x) ? 0x7FC0 : (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
      memcpy(&out, &v, 2);
      break;
    }
    case TT_F32: { float v = (float)f; memcpy(&out, &v, 4); break; }
    case TT_F64: memcpy(&out, &f, 8); break;
    default: break;
  }
  return out;
}

uint64_t tt_scalar_part_bits(const tt_scalar *s, tt_dtype d, bool imag) {
  if (!imag) return tt_scalar_bits(s, d);
  tt_scalar im = {.dtype = TT_F64, .f = tt_dtype_is_complex(s->dtype) ? s->im : 0.0};
  return tt_scalar_bits(&im, d);
}

// The cache slot of a value: the high bits of its word hash.
static tt_scalar_slot *slot_of(tt_scalar_cache *c, int device, tt_dtype d,
                               uint64_t bits) {
  uint64_t key[3] = {(uint64_t)device, (uint64_t)d, bits};
  uint64_t h = tt_hash_words(key, sizeof key);
  return &c->slots[(h >> 32) % TT_SCALAR_CACHE];
}

static bool holds(const tt_scalar_slot *s, int device, tt_dtype d, uint64_t bits) {
  return s->buf && s->device == device && s->dtype == d && s->bits == bits;
}

tt_status tt_scalar_cache_get(tt_scalar_cache *c, tt_pjrt *p, int device,
                              tt_dtype d, uint64_t bits, tt_pjrt_buffer **out,
                              tt_pjrt_buffer **evicted) {
  tt_scalar_slot *s = slot_of(c, device, d, bits);
  *evicted = NULL;
  if (holds(s, device, d, bits)) {
    *out = s->buf;
    return NULL;
  }
  tt_pjrt_buffer *b = NULL;
  TT_RETURN_IF_ERROR(tt_pjrt_buffer_from_host(p, device, d, NULL, 0, &bits, &b));
  *evicted = s->buf;
  *s = (tt_scalar_slot){b, device, d, bits};
  *out = b;
  return NULL;
}

tt_pjrt_buffer *tt_scalar_cache_find(tt_scalar_cache *c, int device, tt_dtype d,
                                     uint64_t bits) {
  tt_scalar_slot *s = slot_of(c, device, d, bits);
  return holds(s, device, d, bits) ? s->buf : NULL;
}

void tt_scalar_cache_put(tt_scalar_cache *c, tt_pjrt *p, int device, tt_dtype d,
                         uint64_t bits, tt_pjrt_buffer *b) {
  tt_scalar_slot *s = slot_of(c, device, d, bits);
  if (s->buf) tt_pjrt_buffer_destroy(p, s->buf);
  *s = (tt_scalar_slot){b, device, d, bits};
}

void tt_scalar_cache_deinit(tt_scalar_cache *c, tt_pjrt *p) {
  for (int i = 0; i < TT_SCALAR_CACHE; i++) {
    if (c->slots[i].buf) tt_pjrt_buffer_destroy(p, c->slots[i].buf);
    c->slots[i].buf = NULL;
  }
}
