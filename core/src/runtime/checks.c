// Device-side checks: pending flag buffers, read at synchronisation. See
// checks.h.
#include "runtime/checks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

// Pending flags read at once past this many: their buffers are tiny, but
// the list must not grow without bound in a loop that never synchronises.
#define MAX_PENDING 4096

static void release(tt_runtime *rt, tt_pending_check *p) {
  tt_pjrt_buffer_destroy(rt->pjrt, p->buf);
  p->buf = NULL;
  rt->stats.device_checks_pending--;
}

void tt_checks_drop(tt_runtime *rt) {
  for (int i = 0; i < rt->nchecks; i++) release(rt, &rt->checks[i]);
  free(rt->checks);
  rt->checks = NULL;
  rt->nchecks = rt->cap_checks = 0;
}

tt_status tt_checks_push(tt_runtime *rt, tt_pjrt_buffer *buf, const tt_check *check,
                         int32_t op) {
  tt_status st = NULL;
  if (rt->nchecks >= MAX_PENDING) st = tt_checks_read(rt);
  if (rt->nchecks == rt->cap_checks) {
    int cap = rt->cap_checks ? 2 * rt->cap_checks : 64;
    tt_pending_check *p = realloc(rt->checks, (size_t)cap * sizeof *p);
    if (!p) {  // can't keep it: read it now rather than lose it
      rt->stats.device_checks_pending++;
      tt_pending_check one = {buf, *check, op};
      tt_pending_check *saved = rt->checks;
      int n = rt->nchecks;
      rt->checks = &one;
      rt->nchecks = 1;
      tt_status now = tt_checks_read(rt);  // frees `one`'s buffer
      rt->checks = saved;
      rt->nchecks = n;
      if (!st) st = now;
      else tt_status_free(now);
      return st;
    }
    rt->checks = p;
    rt->cap_checks = cap;
  }
  rt->checks[rt->nchecks++] = (tt_pending_check){buf, *check, op};
  rt->stats.device_checks_pending++;
  return st;
}

// PyTorch's message with "{}" replaced by the offending value, then the args.
static void format_message(const tt_check *ck, int64_t value, char *out, size_t cap) {
  int64_t vals[3] = {value, ck->args[0], ck->args[1]};
  int k = 0;
  size_t len = 0;
  for (const char *p = ck->msg ? ck->msg : "device-side check failed"; *p && len + 1 < cap; p++) {
    if (p[0] == '{' && p[1] == '}' && k < 3) {
      int w = snprintf(out + len, cap - len, "%lld", (long long)vals[k++]);
      if (w > 0) len += (size_t)w;
      if (len >= cap) len = cap - 1;
      p++;
      continue;
    }
    out[len++] = *p;
  }
  out[len] = '\0';
}

// Reads the flags of checks[0..n) into flags[2 * i], all copies at once.
static tt_status read_flags(tt_runtime *rt, int n, int64_t *flags) {
  tt_pjrt_buffer **bufs = malloc((size_t)n * sizeof *bufs);
  if (!bufs) return tt_make_status(TT_RESOURCE_EXHAUSTED, "device-side checks: out of memory");
  for (int i = 0; i < n; i++) bufs[i] = rt->checks[i].buf;
  tt_status st = tt_pjrt_buffers_to_host(rt->pjrt, bufs, n, flags, 2 * sizeof(int64_t));
  free(bufs);
  rt->stats.device_check_reads += n;
  return st;
}

tt_status tt_checks_read(tt_runtime *rt) {
  if (rt->nchecks == 0) return NULL;
  int n = rt->nchecks;
  int64_t stack[128], *flags = n <= 64 ? stack : calloc((size_t)n, 2 * sizeof *flags);
  tt_status first = flags ? read_flags(rt, n, flags)
                    : tt_make_status(TT_RESOURCE_EXHAUSTED, "device-side checks: out of memory");
  if (first)  // a program itself failed: that error comes first
    first = tt_status_annotate(first, "reading device-side checks");
  for (int i = 0; i < n; i++) {
    tt_pending_check *p = &rt->checks[i];
    if (!first && flags[2 * i]) {
      int64_t flag[2] = {flags[2 * i], flags[2 * i + 1]};
      char msg[512];
      format_message(&p->check, flag[1], msg, sizeof msg);
      const char *name = tt_op_name(p->op);
      const char *shortn = name ? strstr(name, "::") : NULL;
      first = tt_make_status(p->check.code == TT_OK ? TT_INVALID_ARGUMENT : p->check.code,
                             "%s (device-side check in %s, raised at the next "
                             "synchronization after it ran)", msg,
                             shortn ? shortn + 2 : (name ? name : "?"));
    }
    release(rt, p);
  }
  if (flags != stack) free(flags);
  rt->nchecks = 0;
  return first;
}
