// Growable byte buffer. See buf.h.
#include "base/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tt_buf_init(tt_buf *b) { memset(b, 0, sizeof *b); }

void tt_buf_deinit(tt_buf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

void tt_buf_clear(tt_buf *b) {
  b->len = 0;
  b->oom = false;
  if (b->data) b->data[0] = '\0';
}

bool tt_buf_ok(const tt_buf *b) { return !b->oom; }

// Ensures room for `n` more bytes plus a terminating NUL.
static bool reserve(tt_buf *b, size_t n) {
  if (b->oom) return false;
  if (b->len + n + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + n + 1) cap *= 2;
  char *p = realloc(b->data, cap);
  if (!p) {
    b->oom = true;
    return false;
  }
  b->data = p;
  b->cap = cap;
  return true;
}

void tt_buf_append(tt_buf *b, const void *p, size_t n) {
  if (!reserve(b, n)) return;
  if (n) memcpy(b->data + b->len, p, n);  // p may be NULL when n is 0 (an empty list)
  b->len += n;
  b->data[b->len] = '\0';
}

void tt_buf_append_i64(tt_buf *b, int64_t v) { tt_buf_append(b, &v, sizeof v); }

void tt_buf_printf(tt_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    tt_buf_append(b, small, (size_t)n);
    return;
  }
  if (!reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}
