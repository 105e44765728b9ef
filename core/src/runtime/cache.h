// cache.h — the in-memory caches (internal; cache.c).
//
// Two levels:
//  - the signature cache maps an op call's signature (op, argument metadata,
//    structural values; never scalar values) to a plan: the compiled program,
//    how to assemble its arguments, and where its outputs go. A hit skips
//    lowering entirely.
//  - the program cache maps StableHLO text to its compiled executable, so
//    signatures that lower to the same program share one compile.
// Owns: the plans (the strict executor's signature cache holds them), the
// executables, their metadata, the persistent cache handle and the
// explainer hanging off the program cache. Borrows: the PJRT client given to
// each call. Plans and deferred programs borrow executables from here.
#ifndef TT_RUNTIME_CACHE_H
#define TT_RUNTIME_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "lower/program.h"
#include "pjrt/pjrt.h"
#include "runtime/disk_cache.h"
#include "torchtpu.h"

typedef struct tt_explain tt_explain;  // explain.h

// A signature's plan: the lowered program and its executable.
typedef struct tt_plan {
  bool unimplemented;    // no lowering: fall back without trying again
  char *message;         // why unimplemented (owned)
  tt_pjrt_exe *exe;      // borrowed from the program cache
  tt_program prog;       // owned: parameters, outputs, result metas
  // Spilled (spill.h): no program of its own; these slots are copied dense
  // and the call runs through the dense call's plan.
  uint64_t spill_mask;
  // Cold (strict.c's host tier): no executable yet. Calls run on the host
  // while `job` (background.h; NULL until the signature has been called
  // often enough) compiles `text`.
  bool cold;
  bool unlowered;  // cold, and not even lowered yet: prog and text are empty
  char *text;  // owned while cold
  size_t text_len;
  int64_t calls;
  struct tt_bg_job *job;  // owned: cancelled when the plan is freed
  // Why it was lowered (explain.c's cause and detail, owned), kept for the
  // compile that happens later: in the background, or at a later call.
  char *why;
  int why_cause;
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

// --- the program cache (cache.c) ------------------------------------------------------

// Facts kept per program for tt_runtime_cache_entries.
typedef struct tt_prog_meta {
  tt_cache_key key;
  const char *label;  // copied
  double seconds;     // compile seconds, or load seconds when from_disk
  bool from_disk;
  int64_t exe_bytes;  // serialised size when known (the disk cache's), else 0
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
// Called before an evicted executable is destroyed.
typedef void (*tt_prog_evict_fn)(void *ctx, const tt_pjrt_exe *exe);
void tt_prog_cache_set_bound(tt_prog_cache *c, tt_pjrt *p, int64_t max_bytes,
                             tt_prog_evict_fn on_evict, void *ctx);
// Drops the plans whose executable is `exe`.
void tt_sig_cache_drop_exe(tt_sig_cache *c, const tt_pjrt_exe *exe);
void tt_prog_cache_pin(tt_prog_cache *c, const tt_pjrt_exe *exe);
void tt_prog_cache_unpin(tt_prog_cache *c, const tt_pjrt_exe *exe);
void tt_prog_cache_usage(const tt_prog_cache *c, int64_t *out_bytes,
                         int64_t *out_entries, int64_t *out_evictions);

#endif
