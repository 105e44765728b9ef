// executor.h — the one interface through which ops run (internal).
//
// Strict eager (strict.c), fused eager (fused.c) and graph capture (graph.c)
// are three implementations of tt_executor_ops, a table of functions over an
// opaque executor, as ggml's backends and IREE's HAL drivers are. The
// runtime context (runtime.h) owns them and points `rt->exec` at the one in
// use; storages, the op entry points, mode switches and graph replay reach
// an executor only through this table, never through a particular one.
// Collectives and custom kernels plug in here as more ops or executors.
//
// Every function runs with rt->mu held.
//
// Ownership: the context owns every executor (ops->destroy frees it). An
// executor borrows the context and the storages it holds in a deferred
// program; it must let go of a storage when told (detach).
#ifndef TT_RUNTIME_EXECUTOR_H
#define TT_RUNTIME_EXECUTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "hlo/hlo.h"
#include "lower/lower.h"
#include "lower/program.h"
#include "pjrt/pjrt.h"
#include "torchtpu.h"

typedef struct tt_executor tt_executor;

// Room an executor keeps on each storage it holds in a deferred program
// (storage.h embeds one). Only the executor whose epoch it carries reads the
// other fields; any other epoch means "not held".
typedef struct tt_exec_mark {
  int64_t epoch;
  tt_hv val;      // the storage's current value in the program's builder
  int32_t param;  // index of the parameter that reads its buffer, or -1
  int32_t write;  // index of its output (written in the program), or -1
} tt_exec_mark;

// A parameter of a deferred program, in the program's parameter order.
typedef struct tt_exec_param {
  tt_param_kind kind;
  tt_dtype dtype;
  int64_t numel;          // STORAGE: flat elements
  tt_storage *storage;    // STORAGE: read its buffer at the flush; NULL once
                          // detached (then `owned` holds the buffer)
  tt_pjrt_buffer *owned;  // STORAGE: owned; still counted in the stats
  int64_t owned_bytes;
  bool was_empty;         // STORAGE: the storage had no buffer (read zeros)
  uint64_t bits[2];       // SCALAR, OFFSET: value bits; RNG: seed, offset
  tt_generator *gen;      // RNG: the generator it advanced
  uint64_t count;         // RNG: numbers drawn
  int32_t op;             // the op that added it (for messages)
} tt_exec_param;

// A device-side check of a deferred program (program.h's tt_check), with the
// op that made it; its flag is the program's output after `nouts`.
typedef struct tt_exec_check {
  tt_check check;
  int32_t op;
} tt_exec_check;

// What a deferred program ran, shown to a capture before it is cleared.
// `exe` is NULL when nothing ran (no op, or no output alive).
typedef struct tt_exec_program {
  tt_pjrt_exe *exe;             // borrowed from the program cache
  int device;
  const tt_exec_param *params;
  int nparams;
  tt_storage *const *outs;      // program outputs, in order: their storages
  int nouts;                    // (buffers already handed over)
  const tt_exec_check *checks;  // then one flag output per check
  int nchecks;
  // Per parameter: the output (< nouts) the program may write into its
  // buffer when a launch donates it, or -1; NULL: none (the exe aliases nothing).
  const int32_t *param_alias;
} tt_exec_program;

typedef void (*tt_exec_seen_fn)(void *ctx, const tt_exec_program *p);

typedef struct tt_executor_ops {
  const char *name;  // "strict", "fused", "capture"
  // Runs (or records) one op call; the rule is looked up and the device
  // checked. Fresh results go to `results` (capacity `cap`).
  tt_status (*run_op)(tt_executor *ex, const tt_op_call *call,
                      const tt_rule *rule, tt_op_result *results, int32_t cap,
                      int32_t *out_nresults);
  // Launches everything deferred (does not wait for it).
  tt_status (*flush)(tt_executor *ex);
  // Ops recorded and not yet launched.
  int64_t (*pending_ops)(const tt_executor *ex);
  // The host is about to patch part of `s` or resize it: makes its buffer
  // hold its current value.
  tt_status (*sync_storage)(tt_executor *ex, tt_storage *s);
  // `s` is about to lose its buffer or die: the executor lets go of it (a
  // deferred read keeps the old buffer, a deferred write to it is dropped).
  void (*detach)(tt_executor *ex, tt_storage *s);
  // Deferred executors: from now on, record every op on `device` into ONE
  // program (no size bound) until capture_end, which launches it and shows
  // it to `seen` (may be NULL). capture_end returns TT_UNIMPLEMENTED with
  // the reason when the program was split (flushed midway) or could not be
  // recorded whole; the ops ran all the same.
  tt_status (*capture_begin)(tt_executor *ex, int device);
  tt_status (*capture_end)(tt_executor *ex, tt_exec_seen_fn seen, void *ctx);
  // The program cache is about to destroy `exe` (evicted under its bound):
  // everything the executor keeps that borrows it goes first.
  void (*forget_exe)(tt_executor *ex, const tt_pjrt_exe *exe);
  void (*destroy)(tt_executor *ex);
} tt_executor_ops;

struct tt_executor {
  const tt_executor_ops *ops;
  tt_runtime *rt;  // borrowed
};

static inline tt_status tt_exec_run_op(tt_executor *ex, const tt_op_call *call,
                                       const tt_rule *rule,
                                       tt_op_result *results, int32_t cap,
                                       int32_t *out_nresults) {
  return ex->ops->run_op(ex, call, rule, results, cap, out_nresults);
}
static inline tt_status tt_exec_flush(tt_executor *ex) { return ex->ops->flush(ex); }
static inline int64_t tt_exec_pending_ops(const tt_executor *ex) {
  return ex->ops->pending_ops(ex);
}
static inline tt_status tt_exec_sync_storage(tt_executor *ex, tt_storage *s) {
  return ex->ops->sync_storage(ex, s);
}
static inline void tt_exec_detach(tt_executor *ex, tt_storage *s) {
  ex->ops->detach(ex, s);
}
static inline void tt_exec_forget_exe(tt_executor *ex, const tt_pjrt_exe *exe) {
  if (ex) ex->ops->forget_exe(ex, exe);
}
static inline void tt_exec_destroy(tt_executor *ex) {
  if (ex) ex->ops->destroy(ex);
}

// Shared by the implementations that have nothing deferred.
int64_t tt_exec_no_pending(const tt_executor *ex);
tt_status tt_exec_nothing_to_sync(tt_executor *ex, tt_storage *s);
void tt_exec_nothing_to_detach(tt_executor *ex, tt_storage *s);
tt_status tt_exec_no_capture_begin(tt_executor *ex, int device);
tt_status tt_exec_no_capture_end(tt_executor *ex, tt_exec_seen_fn seen, void *ctx);
void tt_exec_keeps_no_exe(tt_executor *ex, const tt_pjrt_exe *exe);

#endif
