// check.h — assertions shared by the core's C tests.
//
// A failed check prints file:line, the expression and the details (status
// message, max abs diff), counts the failure and lets the test go on; main()
// returns check_exit_code(). Included by exactly one .c file per test binary.
#ifndef TT_TESTS_CHECK_H
#define TT_TESTS_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#include "torchtpu.h"

static int check_failures = 0;

// Formats the optional details of a CHECK (static buffer: tests are serial).
static inline const char *check_fmt(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static inline const char *check_fmt(const char *fmt, ...) {
  static char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

static inline int check_exit_code(void) { return check_failures ? 1 : 0; }

// CHECK(cond) or CHECK(cond, "printf format", args...).
#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: FAIL %s:", __FILE__, __LINE__, #cond); \
      fprintf(stderr, "%s\n", check_fmt(" " __VA_ARGS__));              \
      check_failures++;                                               \
    }                                                                 \
  } while (0)

// True when `s` is OK; otherwise reports and frees it.
static inline bool check_ok_at(tt_status s, const char *expr, const char *file,
                               int line) {
  if (!s) return true;
  fprintf(stderr, "%s:%d: FAIL %s: %s\n", file, line, expr, tt_status_message(s));
  tt_status_free(s);
  check_failures++;
  return false;
}

#define CHECK_OK(expr) ((void)check_ok_at((expr), #expr, __FILE__, __LINE__))
// Like CHECK_OK, but returns from the calling (void) test on failure.
#define REQUIRE_OK(expr) \
  do {                   \
    if (!check_ok_at((expr), #expr, __FILE__, __LINE__)) return; \
  } while (0)

// Compares n doubles within tol * (1 + |want|); NaN matches NaN, inf itself.
static inline void check_close_at(const char *file, int line, const char *what,
                                  const double *got, const double *want, int n,
                                  double tol) {
  double worst = 0;
  int at = -1;
  for (int i = 0; i < n; i++) {
    if ((isnan(got[i]) && isnan(want[i])) || (isinf(got[i]) && got[i] == want[i]))
      continue;
    double d = fabs(got[i] - want[i]);
    if ((isnan(d) || d > tol * (1 + fabs(want[i]))) && (at < 0 || isnan(d) || d > worst)) {
      worst = d;
      at = i;
    }
  }
  if (at >= 0) {
    fprintf(stderr, "%s:%d: FAIL %s: max abs diff %g at [%d] (got %g, want %g)\n",
            file, line, what, worst, at, got[at], want[at]);
    check_failures++;
  }
}

#define CHECK_CLOSE(got, want, n, tol) \
  check_close_at(__FILE__, __LINE__, #got, (got), (want), (n), (tol))

#endif
