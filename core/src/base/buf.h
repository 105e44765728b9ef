// buf.h — a growable byte buffer, used for signatures and text.
//
// Appends never fail loudly: on allocation failure the buffer is marked
// `oom` and further appends are ignored; the owner checks tt_buf_ok once.
#ifndef TT_BASE_BUF_H
#define TT_BASE_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tt_buf {
  char *data;  // owned; NUL-terminated when text was appended
  size_t len;
  size_t cap;
  bool oom;
} tt_buf;

void tt_buf_init(tt_buf *b);
void tt_buf_deinit(tt_buf *b);
void tt_buf_clear(tt_buf *b);  // keeps the memory
bool tt_buf_ok(const tt_buf *b);
void tt_buf_append(tt_buf *b, const void *p, size_t n);
void tt_buf_append_i64(tt_buf *b, int64_t v);
void tt_buf_printf(tt_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
