// runtime.h — the one runtime context and what hangs off it (internal).
//
// tt_runtime owns the PJRT plugin and client, the op-signature cache, the
// program cache, the default generators, counters and the events of programs
// still running. One mutex serialises every entry point: PyTorch calls the
// backend from the Python thread and from autograd's device thread, and the
// single-threaded core keeps its caches simple. The lock is not held while a
// program runs, only while it is launched.
#ifndef TT_RUNTIME_RUNTIME_H
#define TT_RUNTIME_RUNTIME_H

#include <pthread.h>

#include "base/buf.h"
#include "base/status.h"
#include "hlo/hlo.h"
#include "pjrt/pjrt.h"
#include "runtime/cache.h"
#include "torchtpu.h"

#define TT_MAX_DEVICES 64

typedef struct tt_sig_cache tt_sig_cache;
typedef struct tt_prog_cache tt_prog_cache;

#define TT_SCALAR_CACHE 256

typedef struct tt_scalar_slot {
  tt_pjrt_buffer *buf;  // owned; NULL when empty
  int device;
  tt_dtype dtype;
  uint64_t bits;        // the value's bytes, zero-extended
} tt_scalar_slot;

typedef struct tt_fallback_count {
  char *name;  // owned
  int64_t count;
} tt_fallback_count;

struct tt_generator {
  tt_runtime *rt;
  uint64_t seed;
  uint64_t offset;  // numbers drawn so far
};

struct tt_storage {
  tt_runtime *rt;
  int device;
  int64_t nbytes;
  tt_pjrt_buffer *buf;  // owned; NULL until first written
  tt_dtype dtype;       // of buf
  int64_t numel;        // of buf (flat)
  int64_t dev_bytes;    // device bytes accounted for buf
  // Fused eager (fused.c): the storage's place in the graph being recorded,
  // meaningful only while graph_epoch equals that graph's epoch. A pending
  // storage (a fresh result not yet run) has no buf, only graph_val.
  int64_t graph_epoch;
  tt_hv graph_val;      // its current value in the graph's builder
  int32_t graph_param;  // index of the parameter that reads its buf, or -1
  int32_t graph_write;  // index of its output (written in the graph), or -1
};

struct tt_runtime {
  pthread_mutex_t mu;
  tt_pjrt *pjrt;
  tt_pjrt_info info;
  bool supports_f64;
  tt_exec_mode mode;
  tt_stats stats;

  tt_sig_cache *sigs;
  tt_prog_cache *progs;
  tt_hlo *hlo;  // reused by every lowering
  tt_buf sig;   // scratch for signatures

  tt_fallback_count *fallbacks;
  int nfallbacks, cap_fallbacks;

  tt_pjrt_event **pending;  // completion events of launched programs
  int npending, cap_pending;

  tt_generator *generators[TT_MAX_DEVICES];

  // Fused eager: the deferred graph (fused.c), and an error of a flush that
  // had no caller to return it to (a mode switch), returned by the next
  // tt_runtime_flush / tt_runtime_synchronize.
  struct tt_fused *fused;
  tt_status deferred;

  // Graph capture and replay (graph.c): counters.
  tt_graph_stats graph_stats;

  // Device copies of recent scalar arguments (alpha = 1, lr, eps...): a
  // training step reuses the same few values, so most calls upload nothing.
  tt_scalar_slot scalars[TT_SCALAR_CACHE];
};

// --- storage internals (storage.c) ---------------------------------------------

// Replaces the storage's buffer (taking ownership of `b`) and updates the
// memory counters. `b` may be NULL.
void tt_storage_set_buffer(tt_storage *s, tt_pjrt_buffer *b, tt_dtype dtype,
                           int64_t numel);
// Makes sure the storage has a buffer: zeros of `dtype` when it has none.
tt_status tt_storage_materialize(tt_storage *s, tt_dtype dtype);

// The device's default generator, created on first use; rt->mu held.
tt_generator *tt_runtime_default_generator_locked(tt_runtime *rt, int device);

// --- fused eager (fused.c) ------------------------------------------------------------
//
// Every function here runs with rt->mu held.

typedef struct tt_fused tt_fused;
struct tt_rule;  // lower/lower.h
tt_status tt_fused_create(tt_fused **out);
// Drops the graph unrun (its pending values are lost) and frees it.
void tt_fused_destroy(tt_runtime *rt, tt_fused *f);

// Records `call` (rule already looked up) into the graph: fresh results are
// pending storages in `results`. User errors come back at once, like eager.
tt_status tt_fused_record(tt_runtime *rt, const tt_op_call *call,
                          const struct tt_rule *rule, tt_op_result *results,
                          int32_t cap, int32_t *out_nresults);
// Compiles (once per graph text) and launches the graph, gives the live
// written storages their buffers and starts an empty graph. An error names
// the graph's first ops.
tt_status tt_fused_flush(tt_runtime *rt);
// True when the graph has written `s` (its value exists only in the graph).
bool tt_fused_writes(tt_runtime *rt, const tt_storage *s);
// The storage is about to lose its buffer or die: a parameter reading the
// buffer keeps it, an output to the storage is dropped, and the graph
// forgets the storage. No-op for storages the graph does not hold.
void tt_fused_detach(tt_runtime *rt, tt_storage *s);
void tt_fused_set_limit(tt_fused *f, int64_t max_ops, int64_t max_bytes);
// The capture being recorded (graph.c), or NULL; set_capture(NULL) ends it.
struct tt_capture;
void tt_fused_set_capture(tt_fused *f, struct tt_capture *c);
struct tt_capture *tt_fused_capture(const tt_fused *f);

// A parameter of the deferred graph, in the program's parameter order.
typedef struct tt_gparam {
  tt_param_kind kind;
  tt_dtype dtype;
  int64_t numel;          // STORAGE: flat elements
  struct tt_storage *storage;  // STORAGE: read its buf at the flush; NULL
                          // once detached (then `owned` holds the buffer)
  tt_pjrt_buffer *owned;  // STORAGE: owned; still counted in the stats
  int64_t owned_bytes;
  uint64_t bits[2];       // SCALAR, OFFSET: value bits; RNG: seed, offset
  int32_t input;          // STORAGE while capturing: the graph input it
                          // reads, TT_GPARAM_ZEROS, or -1
  tt_generator *gen;      // RNG: the generator it advanced
  uint64_t count;         // RNG: numbers drawn
} tt_gparam;

// A captured parameter reading a storage that had no buffer yet (an empty
// tensor made in the graph): zeros on every run.
#define TT_GPARAM_ZEROS (-2)

// What a flush ran, shown to tt_fused_flush_with's callback before the graph
// is cleared. `exe` is NULL when nothing ran (no op, or no output alive).
typedef struct tt_fused_program {
  tt_pjrt_exe *exe;             // borrowed from the program cache
  int device;
  const tt_gparam *params;
  int nparams;
  tt_storage *const *outs;      // program outputs, in order: their storages
  int nouts;                    // (buffers already handed over)
} tt_fused_program;

// tt_fused_flush, calling `seen` (may be NULL) when the flush succeeded.
tt_status tt_fused_flush_with(tt_runtime *rt,
                              void (*seen)(void *ctx, const tt_fused_program *p),
                              void *ctx);

// --- graph capture (graph.c) ----------------------------------------------------------
//
// While rt->fused->cap is set, the recorder asks the capture which graph
// input a storage is, and breaks the capture (reason kept; recording goes on
// as plain fused eager) on what a replay could not repeat. rt->mu held.

struct tt_capture;
// The input index declared for `s`, or -1.
int tt_capture_input_of(const struct tt_capture *c, const tt_storage *s);
// Marks the capture as failed (the first reason is kept).
void tt_capture_break(struct tt_capture *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
// True while the capture's own end is flushing (not a break).
bool tt_capture_ending(const struct tt_capture *c);

// --- scalar arguments (eager.c) -----------------------------------------------------

// The value of a Scalar as `d`'s bytes (zero-extended into 8 bytes).
uint64_t tt_scalar_bits(const tt_scalar *s, tt_dtype d);
// A device buffer holding the 0-d value `bits` of dtype d, borrowed from the
// runtime's cache of recent scalars (valid until the next call that inserts;
// `lookup_only` inserts nothing and returns NULL on a miss).
tt_status tt_scalar_buffer(tt_runtime *rt, int device, tt_dtype d,
                           uint64_t bits, bool lookup_only,
                           tt_pjrt_buffer **out);
// Puts an owned 0-d buffer into the cache (freeing what it displaces).
void tt_scalar_cache_put(tt_runtime *rt, int device, tt_dtype d, uint64_t bits,
                         tt_pjrt_buffer *b);

// --- compiling (compile.c) ---------------------------------------------------------

// The executable for StableHLO `text`: from the program cache, else compiled
// and cached (rt->mu held). The executable is borrowed from the cache.
tt_status tt_runtime_compile(tt_runtime *rt, const char *text, size_t len,
                             tt_pjrt_exe **out);

// --- events (runtime.c) ----------------------------------------------------------

// Keeps the completion event of a launched program; in debug mode waits.
tt_status tt_runtime_track_event(tt_runtime *rt, tt_pjrt_event *ev);

#endif
