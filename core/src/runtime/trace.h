// trace.h — recorded fused-eager graphs, replayed without lowering
// (internal; trace.c, used by fused.c only).
//
// A training step records the same ops every time. The fused executor keeps
// each op of a graph it records: its signature in the graph (signature.h,
// plus the graph value each tensor slot's storage already had), what lowering
// produced (program, parameter and output values) and the builder's mark
// after it. At the flush the graph becomes a trace: those ops, the builder
// as it stood (the program text before its outputs were chosen) and the
// executable for the outputs that were live. The next graph whose ops match
// a trace's, signature by signature, replays the lowering results instead of
// lowering again (a hash and a compare per op), and a flush at the trace's
// end with the same live outputs launches the same executable with no text
// built at all. On the first op that differs, the graph is taken up from the
// trace's builder at that op's mark and recording goes on as usual.
//
// Owns: the traces (their op records and builders). Borrows: executables
// from the program cache.
#ifndef TT_RUNTIME_TRACE_H
#define TT_RUNTIME_TRACE_H

#include <stdbool.h>
#include <stddef.h>

#include "hlo/hlo.h"
#include "lower/ctx.h"
#include "pjrt/pjrt.h"

typedef struct tt_trace_op {
  void *sig;           // owned
  size_t sig_len;
  tt_lower_graph_out lo;  // owned
  tt_hlo_mark mark;    // the builder after this op
} tt_trace_op;

// The ops of the graph being recorded.
typedef struct tt_trace_rec {
  tt_trace_op *ops;
  int n, cap;
  bool ok;  // false once an op could not be kept (out of memory)
} tt_trace_rec;

void tt_trace_rec_init(tt_trace_rec *r);
void tt_trace_rec_clear(tt_trace_rec *r);  // frees the ops, keeps the array
void tt_trace_rec_deinit(tt_trace_rec *r);
// Appends an op, taking `lo` (emptied); on failure marks the record not ok.
void tt_trace_rec_add(tt_trace_rec *r, const void *sig, size_t len,
                      tt_lower_graph_out *lo, const tt_hlo_mark *mark);

typedef struct tt_trace tt_trace;
typedef struct tt_trace_set tt_trace_set;

tt_status tt_trace_set_create(int max_traces, tt_trace_set **out);
void tt_trace_set_destroy(tt_trace_set *s);
// The most recently used trace on `device` whose first op has signature
// `sig`, or NULL.
tt_trace *tt_trace_find(tt_trace_set *s, int device, const void *sig, size_t len);
// Another trace on `device` whose first `pos` ops are those of `cur` and
// whose op `pos` has signature `sig` (a branch taken from the same prefix),
// or NULL. Its builder at that prefix is the same as cur's.
tt_trace *tt_trace_find_branch(tt_trace_set *s, int device, const tt_trace *cur,
                               int pos, const void *sig, size_t len);
// Makes a trace of `rec` (its ops are taken) and builder `b` (taken), with
// the executable for outputs `outv`; the least recently used trace goes when
// the set is full. On error nothing is taken.
tt_status tt_trace_add(tt_trace_set *s, int device, tt_trace_rec *rec, tt_hlo *b,
                       const tt_hv *outv, int nout, tt_pjrt_exe *exe);

int tt_trace_nops(const tt_trace *t);
const tt_trace_op *tt_trace_op_at(const tt_trace *t, int i);
bool tt_trace_matches(const tt_trace *t, int i, const void *sig, size_t len);
const tt_hlo *tt_trace_builder(const tt_trace *t);
// The executable recorded for exactly these outputs, or NULL.
tt_pjrt_exe *tt_trace_exe_for(const tt_trace *t, const tt_hv *outv, int n);
tt_status tt_trace_add_variant(tt_trace *t, const tt_hv *outv, int n,
                               tt_pjrt_exe *exe);
// Drops every recorded executable that is `exe` (the program cache evicts it).
void tt_trace_forget_exe(tt_trace_set *s, const tt_pjrt_exe *exe);
// Copies the first `n` ops of `t` into `r` (emptied first).
tt_status tt_trace_copy_prefix(const tt_trace *t, int n, tt_trace_rec *r);

#endif
