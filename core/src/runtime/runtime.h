// runtime.h — the one runtime context (internal; runtime.c).
//
// tt_runtime owns the PJRT plugin and client, the program cache, the
// executors, the default generators, the scalar-argument cache, counters and
// the events of programs still running. It is the only state the core keeps
// beyond what callers hold, and every module borrows it.
//
// One mutex serialises every entry point: PyTorch calls the backend from the
// Python thread and from autograd's device thread, and the single-threaded
// core keeps its caches simple. The lock is not held while a program runs,
// only while it is launched.
//
// The runtime's modules, each with its header:
//   storage.h    storages (device buffers) and host copies
//   executor.h   the executor interface; strict.h, fused.h (and graph.c's
//                capture) implement it
//   compile.h    the program cache in front of the plugin's compiler
//   cache.h      the in-memory signature and program caches
//   disk_cache.h the persistent cache;  explain.h  the recompile explainer
//   scalars.h    device copies of recent scalar arguments
//   checks.h     device-side checks' flags, read at synchronisation
//   profile.h    per-launch program events while profiling is on
#ifndef TT_RUNTIME_RUNTIME_H
#define TT_RUNTIME_RUNTIME_H

#include <pthread.h>

#include "base/status.h"
#include "hlo/hlo.h"
#include "lower/ctx.h"
#include "pjrt/pjrt.h"
#include "runtime/executor.h"
#include "runtime/scalars.h"
#include "torchtpu.h"

#define TT_MAX_DEVICES 64

typedef struct tt_prog_cache tt_prog_cache;  // cache.h

typedef struct tt_fallback_count {
  char *name;  // owned
  int64_t count;
} tt_fallback_count;

struct tt_generator {
  tt_runtime *rt;
  uint64_t seed;
  uint64_t offset;  // numbers drawn so far
};

struct tt_runtime {
  pthread_mutex_t mu;
  tt_pjrt *pjrt;
  tt_pjrt_info info;
  bool supports_f64;
  bool host_memory_kept;  // CPU plugin: runtime/hostmem.c's policy is in force
  // CPU plugin: the FFI target our attention kernels are registered under
  // (runtime/attention_kernel.c), NULL when attention lowers to XLA's ops.
  const char *attention_ffi_target;
  tt_exec_mode mode;
  tt_stats stats;
  struct tt_profile *profile;  // profile.h; NULL until profiling first starts

  tt_prog_cache *progs;
  tt_hlo *hlo;  // scratch builder for lowering one op (strict eager, infer)

  // The executors (owned), and the one ops go to: strict in strict and
  // debug mode, fused in fused mode, the capture while a graph is captured.
  tt_executor *strict, *fused, *capture;
  tt_executor *exec;
  // An error of a flush that had no caller to return it to (a mode switch),
  // returned by the next tt_runtime_flush / tt_runtime_synchronize.
  tt_status deferred;

  tt_fallback_count *fallbacks;
  int nfallbacks, cap_fallbacks;

  tt_pjrt_event **pending;  // completion events of launched programs
  int npending, cap_pending;

  // Device-side checks (checks.h): on unless the user turned them off; the
  // flag buffers of launched programs, read at the next synchronisation.
  bool device_checks;
  // Layouts of one dense signature the strict executor compiles programs
  // for before it copies further layouts dense (runtime/spill.h); 0: never.
  int32_t layouts_per_op;
  // The host tier (strict.c): a new signature's program compiles in the
  // background at its `compile_after`-th call; until it is ready, its calls
  // run on the host (TT_RUN_ON_HOST). 0: compile at the first call.
  int32_t compile_after;
  int64_t host_tier_bytes;  // the largest call the host tier takes
  struct tt_bg *bg;  // background.h, owned
  // Per-op programs' compile options (the backend's optimisation level;
  // NULL: the client's defaults), owned.
  void *op_opts;
  size_t op_opts_len;
  struct tt_pending_check *checks;
  int nchecks, cap_checks;

  tt_generator *generators[TT_MAX_DEVICES];
  tt_graph_stats graph_stats;  // graph capture and replay (graph.c)
  tt_scalar_cache scalars;

  // Host copies of storages' bytes (storage.c). A copy of a storage that
  // also has its device buffer is a cache: reads from the host (the host
  // tier's inputs, `for x in t` element by element) cost no transfer while
  // the storage keeps its value; such copies are evictable, oldest first,
  // past TT_HOST_CACHE_MAX_BYTES. A copy without a buffer is the storage's
  // value (the host tier's results): uploaded when a program first reads it.
  struct tt_host_copies {
    tt_storage *newest, *oldest;  // evictable copies, linked through host_prev/next
    int64_t cached_bytes;         // theirs
  } host;

  // Storages holding a device buffer, linked through their buf_prev/next
  // (storage.c): what a memory snapshot lists (tt_runtime_list_buffers).
  tt_storage *buffers;
  // The per-process memory limit (tt_runtime_set_memory_limit; bytes, 0:
  // none) and the storages it refused. Read without rt->mu (a storage is
  // created with or without it held), so accessed atomically.
  int64_t mem_limit;
  int64_t mem_refused;
};

// The device's default generator, created on first use; rt->mu held.
tt_generator *tt_runtime_default_generator_locked(tt_runtime *rt, int device);

// The generator an op's argument `arg` names, else the device's default
// (NULL only when out of memory); rt->mu held.
tt_generator *tt_runtime_call_generator(tt_runtime *rt, const tt_op_call *call,
                                        int arg);

// Keeps the completion event of a launched program; in debug mode waits.
tt_status tt_runtime_track_event(tt_runtime *rt, tt_pjrt_event *ev);

// Points rt->exec at the executor the mode and a capture call for.
void tt_runtime_pick_executor(tt_runtime *rt);

// The options every executor lowers with (storages seen through storage.h).
void tt_runtime_lower_options(const tt_runtime *rt, bool infer_only,
                              tt_lower_options *out);

#endif
