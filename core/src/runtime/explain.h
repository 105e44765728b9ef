// explain.h — the recompile explainer (internal; explain.c).
//
// Owns: the op histories, graph skeletons and cause counts. Borrows: the
// runtime context in its hooks (called by the strict executor around a
// signature miss) and public entry points.
#ifndef TT_RUNTIME_EXPLAIN_H
#define TT_RUNTIME_EXPLAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "torchtpu.h"

// --- the recompile explainer (explain.c) ----------------------------------------------
//
// Remembers the last few argument descriptions of every eager op and, when a
// new signature is compiled, says what differs from the nearest one seen:
// shape, dtype, layout (strides/offset), a structural argument, storage
// sharing, or, for whole graphs, their structure. Causes are always counted;
// the log lines go to stderr only while enabled.

typedef struct tt_explain tt_explain;

typedef enum tt_cause {
  TT_CAUSE_NEW_OP = 0,  // first program of this op (or graph)
  TT_CAUSE_SHAPE,
  TT_CAUSE_DTYPE,
  TT_CAUSE_LAYOUT,      // strides or storage offset of a view
  TT_CAUSE_ARGUMENT,    // a structural argument (int, list, string, None...)
  TT_CAUSE_STORAGE,     // storage size, buffer dtype or aliasing between args
  TT_CAUSE_GRAPH,       // a graph whose structure was not seen before
  TT_CAUSE_COUNT,
} tt_cause;

const char *tt_cause_name(tt_cause c);  // "shape", static

tt_status tt_explain_create(tt_explain **out);
void tt_explain_destroy(tt_explain *x);
void tt_explain_set_enabled(tt_explain *x, bool on);
bool tt_explain_enabled(const tt_explain *x);

// Eager hooks (eager.c, around lowering a call whose signature missed the
// signature cache): describes the call and diffs it against the op's
// history; the compile that follows (if any) is explained with it.
void tt_explain_op(tt_runtime *rt, const tt_op_call *call);
void tt_explain_op_done(tt_runtime *rt);
// The pending call's cause and detail (a malloc'd copy; NULL when none or out
// of memory), kept by a signature whose compile comes later (the host tier):
// tt_explain_op_resume explains that compile with it, adding that the call
// ran `host_calls` times on the host first, instead of describing the call
// again (it would be diffed against itself).
char *tt_explain_why(tt_runtime *rt, int *cause);
void tt_explain_op_resume(tt_runtime *rt, int32_t op, int cause, const char *why,
                          int64_t host_calls);

// A short label for the program about to be compiled: the pending eager op's
// name, else the first ops of the text ("graph: dot_general, add, ...").
void tt_explain_label(tt_explain *x, const char *text, size_t len, char *out,
                      size_t cap);
// A program is being compiled (not found in memory or on disk): counts its
// cause and, when enabled, prints why to stderr. Returns the cause.
tt_cause tt_explain_compile(tt_explain *x, const char *label, const char *text,
                            size_t len, double seconds);

// Causes counted so far (TT_CAUSE_COUNT entries) and a printable summary.
void tt_explain_counts(const tt_explain *x, int64_t *out);
size_t tt_explain_summary(const tt_explain *x, char *buf, size_t cap);

#endif
