// Status: how every fallible function in the core reports failure.
//
// A tt_status is NULL for OK, or an owned error object carrying a code, a
// message and the file:line where it was made. The receiver of a non-NULL
// status either returns it upward (optionally annotated) or frees it with
// tt_status_free. Library code never aborts or exits.
#ifndef TT_BASE_STATUS_H
#define TT_BASE_STATUS_H

#include "torchtpu_types.h"

// Makes an error status with a printf-style message. Never returns NULL for a
// code other than TT_OK (allocation failure yields a static out-of-memory
// status, which tt_status_free knows not to free).
tt_status tt_make_status_at(tt_code code, const char *file, int line,
                            const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define tt_make_status(code, ...) \
  tt_make_status_at((code), __FILE__, __LINE__, __VA_ARGS__)

// TT_RUN_ON_HOST, the host tier's answer for every call of a cold signature:
// a static status (no allocation), which tt_status_free and
// tt_status_annotate leave alone.
tt_status tt_status_run_on_host(void);

// Prepends "<prefix>: " to the message of `s` (if non-NULL) and returns it.
tt_status tt_status_annotate(tt_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define TT_RETURN_IF_ERROR(expr)         \
  do {                                   \
    tt_status tt_s_ = (expr);            \
    if (tt_s_ != NULL) return tt_s_;     \
  } while (0)

// For `goto cleanup` style: stores the status in `st` and jumps.
#define TT_GOTO_IF_ERROR(st, expr, label) \
  do {                                    \
    (st) = (expr);                        \
    if ((st) != NULL) goto label;         \
  } while (0)

#endif
