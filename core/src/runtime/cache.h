// cache.h — what the eager executor remembers between calls (internal).
//
// Two levels:
//  - the signature cache maps an op call's signature (op, argument metadata,
//    structural values; never scalar values) to a plan: the compiled program,
//    how to assemble its arguments, and where its outputs go. A hit skips
//    lowering entirely.
//  - the program cache maps StableHLO text to its compiled executable, so
//    signatures that lower to the same program share one compile.
#ifndef TT_RUNTIME_CACHE_H
#define TT_RUNTIME_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "pjrt/pjrt.h"
#include "torchtpu.h"

typedef enum tt_param_kind {
  TT_PARAM_STORAGE,  // the flat buffer of a tensor slot's storage
  TT_PARAM_SCALAR,   // a Scalar argument, converted to `dtype` on the host
  TT_PARAM_OFFSET,   // a tensor slot's storage offset (i64), for dynamic_slice
  TT_PARAM_RNG,      // ui64[2] (seed, offset) of a generator
} tt_param_kind;

typedef struct tt_param {
  tt_param_kind kind;
  int32_t slot;    // STORAGE, OFFSET: tensor slot
  int32_t arg;     // SCALAR: argument; RNG: generator argument or -1
  int32_t item;    // SCALAR: list item when `arg` is a Scalar[] list
  tt_dtype dtype;  // STORAGE: buffer dtype (zeros if still empty); SCALAR
  int64_t numel;   // STORAGE: flat elements
  uint64_t count;  // RNG: numbers drawn per call
} tt_param;

// One output of the program.
typedef struct tt_out {
  bool fresh;      // a new tensor (else: the new buffer of a slot's storage)
  int32_t slot;    // storage write: the tensor slot whose storage it replaces
  tt_dtype dtype;  // of the flat buffer
  int64_t numel;
} tt_out;

typedef struct tt_plan {
  bool unimplemented;    // no lowering: fall back without trying again
  char *message;         // why unimplemented (owned)
  tt_pjrt_exe *exe;      // borrowed from the program cache
  tt_param *params;      // owned
  int nparams;
  tt_out *outs;          // owned
  int nouts;
  tt_op_result *results; // owned: metas of every result (fresh and dest)
  int nresults;
} tt_plan;

void tt_plan_free(tt_plan *p);

typedef struct tt_sig_cache tt_sig_cache;
tt_status tt_sig_cache_create(tt_sig_cache **out);
void tt_sig_cache_destroy(tt_sig_cache *c, tt_pjrt *p);
// Borrowed plan or NULL.
tt_plan *tt_sig_cache_find(tt_sig_cache *c, const void *key, size_t len);
// Takes ownership of `plan`.
tt_status tt_sig_cache_insert(tt_sig_cache *c, const void *key, size_t len,
                              tt_plan *plan);

// --- cache keys (disk_cache.c) ------------------------------------------------------
//
// A program's key names it across processes: two independent 64-bit hashes
// of its StableHLO text, each seeded with the hash of the compile
// environment (compile options bytes, plugin platform, platform version,
// PJRT API version, device count and kind). The in-memory table compares the
// full text; the disk file stores the text too, so a key collision is caught.

typedef struct tt_cache_key {
  uint64_t h[2];
} tt_cache_key;

// Hash of the compile environment bytes `env`.
void tt_cache_env_hash(const void *env, size_t len, uint64_t out[2]);
void tt_cache_key_make(const uint64_t env[2], const char *text, size_t len,
                       tt_cache_key *out);
void tt_cache_key_hex(const tt_cache_key *k, char out[33]);

// --- the persistent cache (disk_cache.c) ----------------------------------------------
//
// One file per program, <key hex>.ttexe, in one directory. Nothing here
// fails an op: I/O errors and bad files are counted in `stats` and the
// caller compiles as if the file were absent.

typedef struct tt_disk_cache tt_disk_cache;

// `max_bytes` <= 0: no bound. The directory is created on the first write.
tt_status tt_disk_cache_create(const char *dir, int64_t max_bytes,
                               const uint64_t env[2], tt_disk_cache **out);
void tt_disk_cache_destroy(tt_disk_cache *d);
const char *tt_disk_cache_dir(const tt_disk_cache *d);  // borrowed

// The executable stored for `text` (owned by the caller), or false.
bool tt_disk_cache_load(tt_disk_cache *d, tt_pjrt *p, const tt_cache_key *key,
                        const char *text, size_t len, tt_stats *stats,
                        tt_pjrt_exe **out);
// Writes (or overwrites) the entry for `text` atomically, then keeps the
// directory under its size bound by removing least recently used entries.
void tt_disk_cache_store(tt_disk_cache *d, tt_pjrt *p, const tt_cache_key *key,
                         const char *text, size_t len, tt_pjrt_exe *exe,
                         tt_stats *stats);

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

// --- the program cache (cache.c) ------------------------------------------------------

// Facts kept per program for tt_runtime_cache_entries.
typedef struct tt_prog_meta {
  tt_cache_key key;
  const char *label;  // copied
  double seconds;     // compile seconds, or load seconds when from_disk
  bool from_disk;
} tt_prog_meta;

typedef struct tt_prog_cache tt_prog_cache;
tt_status tt_prog_cache_create(tt_prog_cache **out);
void tt_prog_cache_destroy(tt_prog_cache *c, tt_pjrt *p);
// Borrowed executable or NULL; a hit counts a use of the entry.
tt_pjrt_exe *tt_prog_cache_find(tt_prog_cache *c, const char *text,
                                size_t len);
// Takes ownership of `exe` (also on error). `meta` may be NULL.
tt_status tt_prog_cache_insert(tt_prog_cache *c, const char *text, size_t len,
                               tt_pjrt_exe *exe, const tt_prog_meta *meta);
// Fills up to `cap` entries in insertion order; returns the number of entries.
int tt_prog_cache_entries(tt_prog_cache *c, tt_cache_entry_info *out, int cap);

// What hangs off the program cache: the persistent directory (NULL when
// off), the compile environment's hash (computed on first compile), the
// recompile explainer (always there).
tt_disk_cache *tt_prog_cache_disk(tt_prog_cache *c);
void tt_prog_cache_set_disk(tt_prog_cache *c, tt_disk_cache *d);  // takes it
const uint64_t *tt_prog_cache_env(const tt_prog_cache *c);  // [2] or NULL
void tt_prog_cache_set_env(tt_prog_cache *c, const uint64_t env[2]);
tt_explain *tt_prog_cache_explain(tt_prog_cache *c);

// --- bounding the program cache (cache.c) ------------------------------------------
//
// An LRU bound in bytes (text + serialised executable per entry; 0: none).
// `p` destroys evicted executables; `plans` is the signature cache whose
// plans borrow from this one: a plan whose executable is evicted is dropped
// with it. Borrowers that keep an executable past the current call (captured
// graphs) must pin it; pinned entries and the entry just inserted are never
// evicted. Applies at once (evicting down to 90% of the bound).
void tt_prog_cache_set_bound(tt_prog_cache *c, tt_pjrt *p, tt_sig_cache *plans,
                             int64_t max_bytes);
void tt_prog_cache_pin(tt_prog_cache *c, const tt_pjrt_exe *exe);
void tt_prog_cache_unpin(tt_prog_cache *c, const tt_pjrt_exe *exe);
void tt_prog_cache_usage(const tt_prog_cache *c, int64_t *out_bytes,
                         int64_t *out_entries, int64_t *out_evictions);

#endif
