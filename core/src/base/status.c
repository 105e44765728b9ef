// Status objects: code + message + origin. See status.h.
#include "base/status.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tt_status_s {
  tt_code code;
  char *message;  // owned, "message (file:line)"
};

// Returned when even the error can't be allocated; never freed.
static struct tt_status_s oom_status = {TT_RESOURCE_EXHAUSTED,
                                        (char *)"out of host memory"};

// A cold signature's call (strict eager's host tier): made once per call
// of such a signature, so not allocated; never freed nor annotated.
static struct tt_status_s run_on_host_status = {
    TT_RUN_ON_HOST, (char *)"its program is not compiled yet: run on the host"};

tt_status tt_status_run_on_host(void) { return &run_on_host_status; }

static bool is_static(tt_status s) { return s == &oom_status || s == &run_on_host_status; }

static char *vformat(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) return NULL;
  char *buf = malloc((size_t)n + 1);
  if (buf) vsnprintf(buf, (size_t)n + 1, fmt, ap);
  return buf;
}

tt_status tt_make_status_at(tt_code code, const char *file, int line,
                            const char *fmt, ...) {
  if (code == TT_OK) return NULL;
  tt_status s = malloc(sizeof *s);
  if (!s) return &oom_status;
  va_list ap;
  va_start(ap, fmt);
  char *msg = vformat(fmt, ap);
  va_end(ap);
  // Keep only the file's base name: paths differ between machines.
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  size_t n = (msg ? strlen(msg) : 0) + strlen(base) + 32;
  s->code = code;
  s->message = malloc(n);
  if (!s->message) {
    free(msg);
    free(s);
    return &oom_status;
  }
  snprintf(s->message, n, "%s [%s:%d]", msg ? msg : "?", base, line);
  free(msg);
  return s;
}

tt_status tt_status_annotate(tt_status s, const char *fmt, ...) {
  if (s == NULL || is_static(s)) return s;
  va_list ap;
  va_start(ap, fmt);
  char *prefix = vformat(fmt, ap);
  va_end(ap);
  if (!prefix) return s;
  size_t n = strlen(prefix) + strlen(s->message) + 3;
  char *msg = malloc(n);
  if (msg) {
    snprintf(msg, n, "%s: %s", prefix, s->message);
    free(s->message);
    s->message = msg;
  }
  free(prefix);
  return s;
}

tt_code tt_status_code(tt_status s) { return s ? s->code : TT_OK; }

const char *tt_status_message(tt_status s) { return s ? s->message : "OK"; }

void tt_status_free(tt_status s) {
  if (s == NULL || is_static(s)) return;
  free(s->message);
  free(s);
}
