// torchtpu.h — the public C API of the torchtpu core.
//
// This is the only header the C++ shim (and Python, through ctypes) uses. The
// core knows nothing of PyTorch: the shim describes each ATen call as a
// tt_op_call (op id, argument values, where each result goes) and the core
// lowers it to StableHLO, compiles it once per signature, and runs it through
// a PJRT plugin.
//
// Ownership, stated once:
//  - `_create` returns an owned object, freed by the matching `_destroy`
//    (NULL-safe). Other pointers returned by accessors are borrowed and live as
//    long as the object they came from, unless the comment says otherwise.
//  - Every fallible function returns tt_status: NULL is OK; otherwise an owned
//    error the caller must free with tt_status_free (or pass on).
//  - Pointers in argument structs are borrowed for the duration of the call.
#ifndef TORCHTPU_H
#define TORCHTPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchtpu_types.h"  // statuses, dtypes, tensors, op calls

#ifdef __cplusplus
extern "C" {
#endif

// --- runtime -----------------------------------------------------------------

typedef struct tt_runtime tt_runtime;

// How XLA's CPU plugin runs a launched program (other plugins are always
// asynchronous).
typedef enum tt_cpu_launch {
  TT_CPU_LAUNCH_DEFAULT = 0,  // inline: the faster one for op-by-op eager work
  TT_CPU_LAUNCH_INLINE = 1,   // on the launching thread, before the launch returns
  TT_CPU_LAUNCH_ASYNC = 2,    // on the plugin's worker threads; the launch returns at once
} tt_cpu_launch;

// What the C heap does with memory freed by XLA's CPU plugin's programs (its
// device buffers and temporaries are host memory; other plugins: ignored).
typedef enum tt_cpu_memory {
  TT_CPU_MEMORY_DEFAULT = 0,  // keep
  TT_CPU_MEMORY_KEEP = 1,     // keep it for reuse, as a device allocator does (a
                              // process-wide glibc setting: runtime/hostmem.c)
  TT_CPU_MEMORY_RELEASE = 2,  // the C library's defaults (big blocks unmapped)
} tt_cpu_memory;

typedef struct tt_runtime_options {
  const char *plugin_path;  // NULL: discover (env TORCHTPU_PLUGIN_PATH first)
  int cpu_device_count;     // devices the CPU plugin creates; <=0 means 1
  tt_cpu_launch cpu_launch;
  tt_cpu_memory cpu_memory;
  // XLA's CPU plugin: true lowers scaled dot-product attention to plain
  // StableHLO even where our C attention kernel can run (an x86-64 CPU with
  // AVX2 and FMA; runtime/attention_kernel.c says why it exists).
  bool cpu_attention_xla;
  // XLA's backend optimisation level for strict eager's per-op programs of
  // small calls (DebugOptions' xla_backend_optimization_level). On XLA's CPU
  // backend level 0 halves a tiny program's compile but its loops run
  // unvectorised (an elementwise op over 16K floats: 33 -> 145 us), so the
  // default is the plugin's own; fused and compiled graphs always use it.
  // Used when `op_opt_level_given` (else TT_DEFAULT_OP_OPT_LEVEL); -1: the
  // plugin's.
  bool op_opt_level_given;
  int op_opt_level;
} tt_runtime_options;

#define TT_DEFAULT_OP_OPT_LEVEL (-1)

TT_API tt_status tt_runtime_create(const tt_runtime_options *opts,
                                   tt_runtime **out_rt);
TT_API void tt_runtime_destroy(tt_runtime *rt);

// The process-wide runtime used by the shim and Python. Created on first use
// from the environment (TORCHTPU_PLUGIN_PATH, TORCHTPU_CPU_DEVICES,
// TORCHTPU_CPU_ASYNC: 1 asynchronous, 0 inline, unset the default;
// TORCHTPU_CPU_KEEP_MEMORY: 1 keep, 0 release, unset the default;
// TORCHTPU_CPU_ATTENTION_KERNEL: 0 sets cpu_attention_xla;
// TORCHTPU_OP_OPT_LEVEL: 0 to 3, or "default" for the plugin's); a failed
// creation is remembered and returned again (with its message) on every call.
TT_API tt_status tt_runtime_get(tt_runtime **out_rt);

typedef struct tt_runtime_info {
  const char *platform;          // "cpu", "tpu", "cuda"
  const char *platform_version;  // plugin / XLA version string
  const char *plugin_path;
  int api_major, api_minor;      // PJRT C API version of the plugin
  int device_count;
  const char *device_kind;       // kind of device 0
  bool supports_f64;
  bool asynchronous;             // launches return before their programs end
  bool host_memory_kept;         // CPU plugin: tt_cpu_memory's keep is in force
  bool cpu_attention_kernel;     // CPU plugin: attention runs our C kernel
} tt_runtime_info;

// Fills `out` with borrowed strings that live as long as `rt`.
TT_API void tt_runtime_info_get(tt_runtime *rt, tt_runtime_info *out);

// --- execution mode and counters ---------------------------------------------

typedef enum tt_exec_mode {
  TT_MODE_STRICT = 0,  // asynchronous, one program per op (default)
  TT_MODE_DEBUG = 1,   // synchronous after each op
  TT_MODE_FUSED = 2,   // ops recorded into a deferred graph, run as one
                       // program at a flush (see tt_runtime_flush)
} tt_exec_mode;

TT_API void tt_runtime_set_mode(tt_runtime *rt, tt_exec_mode mode);
TT_API tt_exec_mode tt_runtime_mode(tt_runtime *rt);

// Waits for every program launched so far; returns the first async error.
// In fused mode it flushes the deferred graph first. Then reads the
// device-side checks of those programs: a violated one is the error.
TT_API tt_status tt_runtime_synchronize(tt_runtime *rt);

// Device-side checks (on by default): value preconditions PyTorch checks on
// the host (indices in range, class targets, integer division by zero) are
// computed inside each program and raised at the next synchronisation (a
// host read of any tensor, tt_runtime_synchronize; after the op in debug
// mode) with PyTorch's message and the op's name. Off: programs compute no
// checks (and out-of-range indices are clamped or dropped, as XLA does).
TT_API void tt_runtime_set_device_checks(tt_runtime *rt, bool on);
TT_API bool tt_runtime_device_checks(tt_runtime *rt);

// Strided inputs and compile storms. A program is compiled per input layout
// (the strides are folded into the op's gather). Once an op has programs for
// `n` layouts of inputs of the same shapes and dtypes, a further layout's
// strided, read-only inputs are copied dense first (one copy program per
// layout, shared by every op) and the op runs through its dense program
// (tt_stats.layout_spills counts such calls). 0: a program per layout
// always. Default TT_DEFAULT_LAYOUTS_PER_OP.
#define TT_DEFAULT_LAYOUTS_PER_OP 4
TT_API tt_status tt_runtime_set_layouts_per_op(tt_runtime *rt, int64_t n);

// Cold signatures and the host tier. Strict eager compiles a program per
// op signature; a compile costs tens of milliseconds, a CPU op microseconds.
// With `n` >= 1, a new signature's program is compiled in the background
// (one worker thread, the signatures called most often first) from its
// n-th call on, and until it is ready each call of the signature returns
// TT_RUN_ON_HOST: the caller runs the op with the host's own kernels (the
// shim: PyTorch's CPU kernels, on host copies of the tensors). Only calls
// whose tt_op_call.host_ok is set, in strict mode (not debug, fused or a
// capture), whose program draws no random numbers; a program already in the
// program cache or the persistent directory runs at once. A signature
// called fewer than n times is never compiled. 0: every new signature
// compiles at its first call, as the device-only path. `max_bytes` bounds
// the storages of the call's tensors (bytes, each storage once: what the
// host tier copies) that the host tier takes: a larger call compiles at
// once, since on an accelerator the host copies and the host's arithmetic
// grow with it while a compile does not.
#define TT_DEFAULT_COMPILE_AFTER 2
#define TT_DEFAULT_HOST_TIER_BYTES (4 << 20)
TT_API tt_status tt_runtime_set_host_tier(tt_runtime *rt, int64_t compile_after,
                                          int64_t max_bytes);
TT_API void tt_runtime_host_tier(tt_runtime *rt, int64_t *out_compile_after,
                                 int64_t *out_max_bytes);
// Waits until the background compiles queued so far are done (not under
// the runtime's lock: other threads go on).
TT_API void tt_runtime_wait_compiles(tt_runtime *rt);
// Stops the background compiler (waits for the compile under way): at
// exit, before the plugin's static objects go. Cold signatures then stay
// on the host tier.
TT_API void tt_runtime_stop_compiles(tt_runtime *rt);

// --- fused eager ---------------------------------------------------------------
//
// In TT_MODE_FUSED an op is lowered at once (a user error raises at the op,
// as in strict mode) into a deferred graph; its fresh results are pending
// storages that hold no device memory. The graph runs as one program, whose
// outputs are the live storages it wrote, when it is flushed: by
// tt_runtime_flush, by any tt_tensor_download (.item(), .cpu(), printing,
// the CPU fallback), by a partial upload into or a resize of a storage it
// wrote, by tt_runtime_synchronize, by a mode switch, or when it grows past
// its bound. Programs are cached by their
// text, so a training loop compiles its step once. A flush error names the
// graph's first ops and is returned by the call that caused the flush.

// Compiles (when new) and launches the deferred graph without waiting for
// it; no-op when the graph is empty.
TT_API tt_status tt_runtime_flush(tt_runtime *rt);

// Bounds the deferred graph: it is flushed before an op that would make it
// longer than `max_ops` ops, or when it already holds `max_instructions`
// StableHLO instructions (its compile-cost estimate) or `max_bytes` bytes of
// text. A value <= 0 restores that bound's default (10000 ops, 20000
// instructions, 64 MiB). The first split by a bound is said once on stderr.
TT_API void tt_runtime_set_fuse_limit(tt_runtime *rt, int64_t max_ops, int64_t max_bytes,
                                      int64_t max_instructions);

typedef struct tt_fused_stats {
  int64_t graphs;              // graphs flushed (run, or dropped when no
                               // output was still alive)
  int64_t ops;                 // ops recorded in fused mode
  int64_t pending_ops;         // ops in the graph being recorded now
  int64_t last_graph_ops;      // of the last graph flushed
  int64_t last_graph_params;
  int64_t last_graph_outputs;
  int64_t last_graph_bytes;    // StableHLO text length
  int64_t lowered_ops;         // ops lowered to StableHLO while recording
  int64_t replayed_ops;        // ops that matched a recorded graph's op and
                               // reused its lowering (no StableHLO built)
  int64_t last_graph_instructions;  // StableHLO instructions of the last graph
  int64_t bound_splits;        // graphs flushed because they reached a bound
  int64_t donated_buffers;     // parameters' buffers a flush let its program
  int64_t donated_bytes;       // write in place (the storages it rewrote)
} tt_fused_stats;

TT_API void tt_runtime_fused_stats(tt_runtime *rt, tt_fused_stats *out);

typedef struct tt_stats {
  int64_t op_calls;         // native op executions
  int64_t sig_hits;         // op signature cache hits (no lowering at all)
  int64_t compiles;         // programs compiled
  int64_t cache_requests;   // lookups of a lowered program
  int64_t cache_hits;
  double compile_seconds;
  int64_t fallback_calls;   // ops run through the CPU fallback
  int64_t bytes_in_use;     // device bytes held by live storages
  int64_t peak_bytes_in_use;
  int64_t buffers_in_use;   // live device buffers
  int64_t host_to_device_bytes;
  int64_t device_to_host_bytes;
  // The persistent compilation cache (see tt_runtime_set_cache_dir). Every
  // program-cache miss is one disk hit or one disk miss while it is on.
  int64_t disk_hits;          // executables loaded from the cache directory
  int64_t disk_misses;        // no usable file: compiled (then written)
  int64_t disk_writes;        // entries written
  int64_t disk_errors;        // I/O failures; the op went on without the disk
  double disk_load_seconds;   // reading, checking and deserialising hits
  int64_t disk_rejected;      // corrupt, truncated or foreign files ignored
  int64_t disk_evictions;     // files removed to stay under the size bound
  int64_t recompiles;         // compiles of an op or graph already compiled
                              // with another signature (see explain)
  // Device-side checks (tt_runtime_set_device_checks): flags of launched
  // programs not read yet (each one small device buffer), and flags read.
  int64_t device_checks_pending;
  int64_t device_check_reads;
  // The in-memory program cache: live executables, their estimated host
  // bytes (counted only while bounded, see tt_runtime_set_program_cache_bytes)
  // and the executables evicted to stay under the bound.
  int64_t program_cache_entries;
  int64_t program_cache_bytes;
  int64_t program_cache_evictions;
  // Op calls whose strided inputs were copied dense instead of compiling a
  // program for their layout (tt_runtime_set_layouts_per_op).
  int64_t layout_spills;
  // The host tier (tt_runtime_set_compile_after): op calls run on the host
  // while their signature's program was not compiled yet, programs
  // compiled in the background and taken into the program cache (also
  // counted in `compiles`), and background compiles queued or running.
  int64_t host_calls;
  int64_t background_compiles;
  int64_t compiles_pending;
  // Host copies of storages (tt_storage_read_cached, tt_storage_write_host,
  // partial reads): their bytes, caches and values kept on the host alike.
  int64_t host_copy_bytes;
  // Buffers of storages an op, a fused flush or a graph replay rewrote that
  // its program was let write in place (donated), and their bytes.
  int64_t donated_buffers;
  int64_t donated_bytes;
} tt_stats;

TT_API void tt_runtime_stats(tt_runtime *rt, tt_stats *out);
TT_API void tt_runtime_reset_peak(tt_runtime *rt);

// Records one CPU-fallback call of `op_name`. Returns true the first time the
// op is seen (the shim warns once per op).
TT_API bool tt_runtime_note_fallback(tt_runtime *rt, const char *op_name);
// Per-op fallback counts: fills up to `cap` entries, returns the total count
// of distinct ops. Names are borrowed from rt.
TT_API int tt_runtime_fallback_counts(tt_runtime *rt, const char **names,
                                      int64_t *counts, int cap);

// --- storages ----------------------------------------------------------------
//
// A storage is the device side of one PyTorch StorageImpl: `nbytes` of device
// memory on one device, held as a flat PJRT buffer (of whatever dtype last
// wrote it) or not yet materialised. PJRT buffers are immutable, so a write
// replaces the buffer; every view of the storage sees the new value.

TT_API tt_status tt_storage_create(tt_runtime *rt, int device, int64_t nbytes,
                                   tt_storage **out_storage);
TT_API void tt_storage_destroy(tt_storage *s);
TT_API int64_t tt_storage_nbytes(const tt_storage *s);
TT_API int tt_storage_device(const tt_storage *s);

// Grows or shrinks the storage to `nbytes`, keeping the common prefix.
TT_API tt_status tt_storage_resize(tt_storage *s, int64_t nbytes);

// The host tier's copies (strict eager runs a cold signature with PyTorch's
// CPU kernel, see tt_runtime_set_compile_after). tt_storage_read_cached
// reads the storage's bytes (nbytes of them; zeros if it has no value) into
// `host` and keeps a host copy while the storage keeps its value, so that a
// weight read by many cold calls crosses to the host once.
// tt_storage_write_host makes `bytes` (nbytes of them) the storage's value,
// kept on the host and uploaded when a program first reads it: a chain of
// cold calls moves nothing between host and device. The element type is the
// storage's own when it has a value, else `dtype` (bytes when its elements
// do not tile the storage). Neither counts in bytes_in_use while on the host
// (tt_stats.host_copy_bytes does).
TT_API tt_status tt_storage_read_cached(tt_runtime *rt, tt_storage *s, void *host);
TT_API tt_status tt_storage_write_host(tt_runtime *rt, tt_storage *s, tt_dtype dtype,
                                       const void *bytes);

// The per-process device memory limit (torch.tpu.set_per_process_memory_fraction):
// creating a storage whose `nbytes` would bring the bytes in use
// (tt_stats.bytes_in_use) past `bytes` fails with TT_RESOURCE_EXHAUSTED,
// naming the limit. The core counts all devices together, so one limit
// covers them all. `bytes` <= 0: no limit (the default).
TT_API void tt_runtime_set_memory_limit(tt_runtime *rt, int64_t bytes);
// The limit in force (0: none) and the storages it has refused so far.
TT_API void tt_runtime_memory_limit(tt_runtime *rt, int64_t *out_bytes,
                                    int64_t *out_refused);

typedef struct tt_buffer_info {
  const tt_storage *storage;  // the owner, as an identity (it may be gone
                              // once the call returns: never dereferenced)
  int device;
  int64_t bytes;              // device bytes counted in bytes_in_use
} tt_buffer_info;

// The device buffers storages hold, at one instant: up to `cap` in `out`
// (most recently written first), their number in *out_count (more than
// `cap`: call again with more room), and tt_stats.bytes_in_use at the same
// instant in *out_bytes_in_use. Bytes in use beyond the listed buffers are
// held by a deferred program (fused eager) until it runs.
TT_API void tt_runtime_list_buffers(tt_runtime *rt, tt_buffer_info *out, int64_t cap,
                                    int64_t *out_count, int64_t *out_bytes_in_use);

// Host <-> device copies of a view. `host` holds the view's elements densely
// in row-major order, in the view's dtype.
TT_API tt_status tt_tensor_upload(tt_runtime *rt, const tt_tensor *dst,
                                  const void *host);
TT_API tt_status tt_tensor_download(tt_runtime *rt, const tt_tensor *src,
                                    void *host);

// --- generators ----------------------------------------------------------------
//
// Counter-based random state: programs receive (seed, offset) as a runtime
// argument, so a new step never recompiles.

TT_API tt_status tt_generator_create(tt_runtime *rt, uint64_t seed,
                                     tt_generator **out_gen);
TT_API void tt_generator_destroy(tt_generator *g);
TT_API void tt_generator_set_state(tt_generator *g, uint64_t seed,
                                   uint64_t offset);
TT_API void tt_generator_get_state(const tt_generator *g, uint64_t *seed,
                                   uint64_t *offset);
// The default generator of device `device` (owned by rt).
TT_API tt_generator *tt_runtime_default_generator(tt_runtime *rt, int device);

// --- op calls ----------------------------------------------------------------
//
// (The op-call description and the op table are in torchtpu_types.h.)

// Runs `call`. Fresh results are written to `results` (capacity `cap`); the
// number written goes to `out_nresults`. On TT_UNIMPLEMENTED nothing ran and
// the caller may fall back. On TT_OUT_RESIZE the message is irrelevant: the
// caller resizes the out= tensors to the shapes tt_op_infer reports and calls
// again.
TT_API tt_status tt_op_run(tt_runtime *rt, const tt_op_call *call,
                           tt_op_result *results, int32_t cap,
                           int32_t *out_nresults);

// Computes the dtypes and shapes of ALL results (fresh and in-place/out=, in
// dest order) without running anything; used to resize out= tensors after
// TT_OUT_RESIZE. Storages in `results` are NULL.
TT_API tt_status tt_op_infer(tt_runtime *rt, const tt_op_call *call,
                             tt_op_result *results, int32_t cap,
                             int32_t *out_nresults);

// --- compilation cache --------------------------------------------------------
//
// Every program goes through one cache: in memory for the life of the
// runtime and, once a directory is set, on disk across processes. Files are
// named by a 128-bit key of (StableHLO text, compile options, plugin platform,
// platform version, PJRT API version, device count and kind) and hold the
// serialised executable after a header (magic, format version, key, text,
// checksums); a corrupt, truncated or foreign file is ignored, counted and
// overwritten. Writes are atomic (temp file, fsync, rename), so processes may
// share a directory. Disk errors never fail an op: they are counted.

// Turns the persistent cache on (`dir`, created when first written) or off
// (NULL or ""). `max_bytes` bounds the directory (<= 0: unbounded); the least
// recently used files (by mtime, touched on every hit) are removed first.
// The Python package calls this at start-up from TORCHTPU_CACHE_DIR.
TT_API tt_status tt_runtime_set_cache_dir(tt_runtime *rt, const char *dir,
                                          int64_t max_bytes);

// Bounds the in-memory program cache to about `max_bytes` (StableHLO text
// plus serialised executable per entry; 0: no bound, the default). Past the
// bound the least recently used programs are dropped, with the signature
// plans and recorded fused traces that use them (they lower and compile
// again when they come back); executables of live captured graphs are kept.
TT_API tt_status tt_runtime_set_program_cache_bytes(tt_runtime *rt, int64_t max_bytes);

// One program in the in-memory cache.
typedef struct tt_cache_entry_info {
  char key[33];            // 32 hex digits: the file name stem on disk
  char label[64];          // eager op name, or "graph: first ops", truncated
  int64_t uses;            // lookups that returned it, the first included
  double compile_seconds;  // compile time, or load time when from_disk
  bool from_disk;
  int64_t text_bytes;      // StableHLO text length
} tt_cache_entry_info;

// Fills up to `cap` entries (insertion order); returns how many there are.
TT_API int tt_runtime_cache_entries(tt_runtime *rt, tt_cache_entry_info *out,
                                    int cap);

// --- recompile explainer -------------------------------------------------------
//
// While on, every compile prints one line to stderr naming the op (or the
// first ops of a graph) and what differs from the nearest signature of the
// same op compiled before: "shape", "dtype", "layout" (strides/offset),
// "argument" (a structural value), "storage" (sizes or aliasing of storages),
// "graph" (new graph structure) or "new op". Causes are counted always.

TT_API void tt_runtime_set_explain_recompiles(tt_runtime *rt, bool on);
TT_API bool tt_runtime_explain_recompiles(tt_runtime *rt);
// Compile counts by cause: fills up to `cap` (static name, count) pairs,
// returns the number of causes.
TT_API int tt_runtime_recompile_causes(tt_runtime *rt, const char **names,
                                       int64_t *counts, int cap);
// A printable summary (top causes and ops) into `buf`; returns the length it
// needs (excluding the NUL), like snprintf.
TT_API size_t tt_runtime_recompile_summary(tt_runtime *rt, char *buf,
                                           size_t cap);

// --- graph capture and replay -----------------------------------------------------
//
// A torch.compile graph is captured once and replayed as one launch with no
// per-op work. Capture runs in fused mode:
//
//   tt_graph_capture_begin(rt, device);          // flushes pending work
//   tt_graph_capture_input(rt, 0, &x); ...       // the graph's inputs
//   tt_op_run(...) ...                            // the graph's ops, recorded
//   tt_graph_capture_end(rt, outs, n, &g);       // runs them (the first call)
//   tt_graph_replay(rt, g, inputs, n, ...);      // every later call
//
// The program's parameters are the declared inputs, read by position (not by
// storage), scalar values baked at capture (constants of the graph) and
// random states: each replay draws from the generator at its current offset
// and advances it by what the capture drew. A capture fails (the ops still
// run, as a plain fused flush) when the graph reads a storage that is not a
// declared input, draws from a non-default generator, is flushed midway (a
// host read, a CPU-fallback op, a mode switch, another device), or leaves a
// written storage alive that is neither an output nor an input.
//
// Outputs of a replay: every program output that is not an input's new
// value is a fresh storage (tt_op_result, flat: ndim 1); each graph output is
// a view of one of them or of an input (tt_graph_output_info). Inputs the
// graph wrote (mutations) get their new buffers in place.

typedef struct tt_graph tt_graph;

// Starts capturing on `device`; the runtime must be in TT_MODE_FUSED. Any
// pending fused graph is flushed first (its error is returned).
TT_API tt_status tt_graph_capture_begin(tt_runtime *rt, int device);
// Declares graph input `index` (0, 1, ... in order). A tensor without storage
// (zero elements) is fine.
TT_API tt_status tt_graph_capture_input(tt_runtime *rt, int index,
                                        const tt_tensor *t);
// Ends the capture: flushes the recorded ops (the first run; their results
// are the fresh storages already returned by tt_op_run) and builds the graph
// whose outputs are `outputs`. On TT_UNIMPLEMENTED the ops ran but the graph
// could not be captured: the message says why, *out_graph is NULL. Owned
// graph; free with tt_graph_destroy (before the runtime).
TT_API tt_status tt_graph_capture_end(tt_runtime *rt, const tt_tensor *outputs,
                                      int n, tt_graph **out_graph);
// Runs the graph on `inputs` (as many as declared), asynchronously. Each
// input must match its capture: dtype, shape, strides, offset, storage size,
// and which inputs share a storage; else TT_INVALID_ARGUMENT naming the input
// and nothing runs. Fresh storages go to `results` (capacity `cap`, at least
// tt_graph_num_results), their count to `out_nresults`.
TT_API tt_status tt_graph_replay(tt_runtime *rt, tt_graph *g,
                                 const tt_tensor *inputs, int n,
                                 tt_op_result *results, int cap,
                                 int *out_nresults);
// A static capture (torch.tpu.graph): as tt_graph_capture_begin, but a host
// read of a tpu value while it records (a download, .item(), a CPU-fallback
// op) fails at once with TT_FAILED_PRECONDITION, and the capture with it.
TT_API tt_status tt_graph_capture_begin_static(tt_runtime *rt, int device);
// Replays into static outputs: as tt_graph_replay, but the fresh results are
// written into the storages of `outputs` (the graph's outputs, as captured:
// each keeps its storage, which gets the new buffer) instead of new storages.
// Mismatched inputs or outputs: TT_INVALID_ARGUMENT, nothing runs.
TT_API tt_status tt_graph_replay_into(tt_runtime *rt, tt_graph *g,
                                      const tt_tensor *inputs, int n,
                                      const tt_tensor *outputs, int noutputs);
TT_API void tt_graph_destroy(tt_graph *g);

TT_API int tt_graph_num_inputs(const tt_graph *g);
TT_API int tt_graph_num_outputs(const tt_graph *g);   // graph outputs
TT_API int tt_graph_num_results(const tt_graph *g);   // fresh storages per replay

// One graph output: a view of fresh result `result` or of input `input`.
typedef struct tt_graph_output {
  int32_t input;   // >= 0: a view of this input's storage
  int32_t result;  // else: a view of this fresh result's storage
  tt_dtype dtype;
  int32_t ndim;
  int64_t sizes[TT_MAX_RANK];    // elements
  int64_t strides[TT_MAX_RANK];  // elements
  int64_t offset;                // elements
} tt_graph_output;

TT_API void tt_graph_output_info(const tt_graph *g, int i, tt_graph_output *out);

typedef struct tt_graph_stats {
  int64_t captures;          // graphs captured
  int64_t capture_failures;  // captures that ran as plain fused graphs
  int64_t replays;           // replays launched
  int64_t replay_mismatches; // replays refused: inputs unlike the capture
  int64_t donated_buffers;   // input buffers replays donated (updated in place)
  int64_t donated_bytes;     // their device bytes
} tt_graph_stats;

TT_API void tt_runtime_graph_stats(tt_runtime *rt, tt_graph_stats *out);

// --- custom kernels (JAX / Pallas modules, C functions through XLA's FFI) ------------
//
// A kernel is an op like any other: tt_kernel_register makes `name`
// ("ns::name", the torch.library schema name) a lowering rule, so strict
// eager, fused eager and graph capture all run it. For each input signature
// the kernel needs one variant: an exported StableHLO module (jax.export's
// text, no locations) whose @main takes the op's tensors in order and returns
// its results. The rule splices the module's functions into the program being
// built and calls them. `export_fn` (may be NULL) is asked for a variant the
// first time a signature is seen. Registering a name again replaces its
// exporter and keeps its variants.
TT_API tt_status tt_kernel_register(const char *name, tt_kernel_export_fn export_fn,
                                    void *export_ctx, int32_t *out_op);
// Adds the variant for `signature` ("f32[4,8],f32[8]": dtype and dims of each
// tensor argument). Result i has dtype res_dtypes[i], rank res_ranks[i] and
// its dims next in res_dims (all results' dims, concatenated). Text is copied
// (NULL for a C kernel's variant).
// A signature already present is kept (the call does nothing).
TT_API tt_status tt_kernel_add_variant(const char *name, const char *signature,
                                       const char *module_text, int32_t nres,
                                       const int32_t *res_dtypes,
                                       const int32_t *res_ranks,
                                       const int64_t *res_dims);
// How many variants the kernel has; -1 when no kernel has that name.
TT_API int32_t tt_kernel_num_variants(const char *name);

// Registers the C function `symbol` of shared library `library` (a
// tt_c_kernel_fn, torchtpu_types.h) as kernel `name`: our handler is
// registered with the plugin's PJRT FFI extension (platform "Host" on the
// CPU plugin, "CUDA" on the GPU one) and the op lowers to a typed-FFI
// stablehlo.custom_call naming the kernel. `shape_fn` adds each signature's
// variant with module_text NULL (result types only). TT_NOT_FOUND for a
// missing library or symbol; TT_UNIMPLEMENTED for a plugin without FFI.
TT_API tt_status tt_kernel_register_c(tt_runtime *rt, const char *name,
                                      const char *library, const char *symbol,
                                      tt_kernel_export_fn shape_fn, void *shape_ctx,
                                      int32_t *out_op);

// --- device collectives ----------------------------------------------------------
//
// A collective over devices 0..ndevices-1 of this process, run as ONE
// replicated StableHLO program (all_reduce, all_gather, reduce_scatter,
// all_to_all) launched on all of them at once by PJRT, compiled once per
// signature through the program cache. Deferred work is flushed first; the
// call returns once the program is launched (results are ready when read).
//
// inputs[i] and outputs[i] live on device i; every input has the same dtype
// and shape; every input and output is a dense row-major view at offset 0
// covering its whole storage (a caller with a strided view copies it first);
// the storage's buffer may hold another element type (storages are bytes).
// Shapes, flattened: all_reduce and broadcast: out = in; all_gather: out has
// ndevices * in elements (device j's input at block j); reduce_scatter: in
// has ndevices * out elements (device i gets block i of the reduction);
// all_to_all: in and out have equal elements divisible by ndevices (device i
// gets block i of every device's input, in device order). An output may
// share the storage of its input (in-place). Mismatched shapes, dtypes or
// devices are TT_INVALID_ARGUMENT naming the collective, device and shapes.

typedef enum tt_collective_kind {
  TT_COLLECTIVE_ALL_REDUCE = 0,
  TT_COLLECTIVE_ALL_GATHER = 1,
  TT_COLLECTIVE_REDUCE_SCATTER = 2,
  TT_COLLECTIVE_ALL_TO_ALL = 3,
  TT_COLLECTIVE_BROADCAST = 4,
} tt_collective_kind;

typedef enum tt_reduce_op {  // torch.distributed.ReduceOp's order
  TT_REDUCE_SUM = 0,
  TT_REDUCE_AVG = 1,
  TT_REDUCE_PRODUCT = 2,
  TT_REDUCE_MIN = 3,
  TT_REDUCE_MAX = 4,
} tt_reduce_op;

typedef struct tt_collective_desc {
  tt_collective_kind kind;
  tt_reduce_op op;  // ALL_REDUCE, REDUCE_SCATTER
  int root;         // BROADCAST: the source device
  int ndevices;     // the group: devices 0..ndevices-1
} tt_collective_desc;

TT_API tt_status tt_collective_run(tt_runtime *rt, const tt_collective_desc *d,
                                   const tt_tensor *inputs,
                                   const tt_tensor *outputs);
TT_API const char *tt_collective_name(tt_collective_kind kind);  // static

// --- profiling ---------------------------------------------------------------
//
// While profiling is on, the runtime records one event per program it
// launches (a strict op, a fused flush, a graph replay, a collective on each
// of its devices) in a bounded ring: the oldest events are overwritten once
// it is full. Off by default, and then a launch costs one flag test.
// Timestamps are CLOCK_MONOTONIC nanoseconds (tt_runtime_profile_now_ns).

typedef enum tt_profile_kind {
  TT_PROFILE_OP = 0,          // strict eager: one ATen op
  TT_PROFILE_FUSED = 1,       // a fused graph's flush
  TT_PROFILE_GRAPH = 2,       // a captured graph's replay (torch.compile)
  TT_PROFILE_COLLECTIVE = 3,  // one device's part of a collective
} tt_profile_kind;

typedef struct tt_profile_event {
  char name[128];       // "aten::mm", "fused graph of 3 ops (mul.Tensor, ...)"
  int32_t kind;         // tt_profile_kind
  int32_t device;
  int64_t start_ns;     // the host began the launch
  int64_t launched_ns;  // the launch call returned
  int64_t end_ns;       // the program's completion event was ready; 0: not yet
  int64_t bytes_in;     // device bytes of the program's parameters
  int64_t bytes_out;    // device bytes of its results
  uint64_t seq;         // events recorded before this one since the start
  bool failed;          // the program finished with an error
  uint64_t correlation; // the launching thread's tt_profile_set_correlation id
} tt_profile_event;

// Turns recording on for one more reader; `capacity` events (<= 0: 65536).
// The first reader clears the ring; one joining others may grow it, never
// shrink it. Recording stays on until every reader has stopped.
TT_API tt_status tt_runtime_profile_start(tt_runtime *rt, int capacity);
TT_API void tt_runtime_profile_stop(tt_runtime *rt);  // keeps what was recorded
// Runs pending fused work and waits (at most `timeout_ms`) until every
// recorded program has its end time, without taking the runtime's errors:
// an error of that work, or of the programs, still reaches the caller's next
// synchronize. For a profiler, which has no one to raise them to.
TT_API tt_status tt_runtime_profile_settle(tt_runtime *rt, int timeout_ms);
// The number of the last event recorded (0: none): a reader's mark at its
// start, for tt_runtime_profile_read_since.
TT_API uint64_t tt_runtime_profile_mark(tt_runtime *rt);
// Copies up to `cap` of the events recorded after `mark` that the ring still
// holds, oldest first, into `out`; `*out_n` the number copied.
TT_API tt_status tt_runtime_profile_read_since(tt_runtime *rt, uint64_t mark,
                                               tt_profile_event *out, int cap,
                                               int *out_n);
// Sets the calling thread's correlation id, stamped on the events of the
// programs it launches from now on (0: none); returns the previous one. A
// profiler sets its id of the ATen op being run (the shim's Kineto plugin).
TT_API uint64_t tt_profile_set_correlation(uint64_t id);
TT_API bool tt_runtime_profile_enabled(tt_runtime *rt);
// Copies up to `cap` events recorded since the last start, oldest first, into
// `out` (not consuming them); `*out_n` the number copied. Call after a
// synchronize for every end_ns to be set.
TT_API tt_status tt_runtime_profile_read(tt_runtime *rt, tt_profile_event *out,
                                         int cap, int *out_n);
// Events recorded since the runtime was created (`recorded`), and those
// overwritten before being read since the last start (`dropped`).
TT_API void tt_runtime_profile_counts(tt_runtime *rt, int64_t *out_recorded,
                                      int64_t *out_dropped);
TT_API int64_t tt_runtime_profile_now_ns(void);
// Names a captured graph in profiles ("graph replay" until named); copied.
TT_API void tt_graph_set_name(tt_graph *g, const char *name);

#ifdef __cplusplus
}
#endif
#endif  // TORCHTPU_H
