// pjrt.h — the core's internal interface to a PJRT plugin.
//
// Wraps the PJRT C API (our own declarations in abi.h) behind small
// status-returning functions. Everything here is plain C over opaque handles;
// nothing else in the core includes abi.h.
//
// Ownership: tt_pjrt_* objects returned through `out_` parameters are owned by
// the caller and freed with the matching _destroy (NULL-safe). Device handles
// are borrowed from the plugin and live as long as it does.
#ifndef TT_PJRT_PJRT_H
#define TT_PJRT_PJRT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchtpu_types.h"

typedef struct tt_pjrt tt_pjrt;              // loaded plugin + client
typedef struct tt_pjrt_buffer tt_pjrt_buffer;
typedef struct tt_pjrt_exe tt_pjrt_exe;      // loaded executable
typedef struct tt_pjrt_event tt_pjrt_event;

// --- plugin and client -------------------------------------------------------

typedef struct tt_pjrt_options {
  const char *plugin_path;  // NULL: tt_pjrt_discover
  int cpu_device_count;     // passed as the "cpu_device_count" create option
  // CPU plugins only, passed as the "asynchronous" create option: > 0, a
  // launch returns at once and the plugin's worker threads run the program;
  // 0, the program runs inline on the launching thread (no thread hand-off);
  // < 0, the plugin's default. Other plugins are always asynchronous.
  int cpu_async;
} tt_pjrt_options;

// Finds a plugin: env TORCHTPU_PLUGIN_PATH, then libtpu (when a TPU is
// present), then XLA's CUDA plugin (when a GPU is present), then the XLA CPU
// plugin installed from the package registry. Writes the path into `out`
// (capacity `cap`).
tt_status tt_pjrt_discover(char *out, size_t cap);

// dlopens the plugin, checks its API version, initialises it, creates a
// client. Errors name the path and the cause (missing file, no GetPjrtApi,
// incompatible major version, plugin error message).
tt_status tt_pjrt_create(const tt_pjrt_options *opts, tt_pjrt **out);
void tt_pjrt_destroy(tt_pjrt *p);

typedef struct tt_pjrt_info {
  const char *plugin_path;       // borrowed from p
  const char *platform;          // "cpu", "cuda", "tpu"
  const char *platform_version;
  int api_major, api_minor;      // of the plugin
  int device_count;              // addressable devices
  const char *device_kind;       // of device 0
  bool asynchronous;             // launches return before their programs end
} tt_pjrt_info;
void tt_pjrt_info_get(tt_pjrt *p, tt_pjrt_info *out);

// --- buffers -----------------------------------------------------------------

// Copies `host` (dense row-major, dims `dims`) to a new buffer on `device`.
// The host memory may be reused as soon as this returns.
tt_status tt_pjrt_buffer_from_host(tt_pjrt *p, int device, tt_dtype dtype,
                                   const int64_t *dims, int rank,
                                   const void *host, tt_pjrt_buffer **out);
// Blocks until the buffer's value is on the host in `host` (`nbytes` long).
tt_status tt_pjrt_buffer_to_host(tt_pjrt *p, tt_pjrt_buffer *b, void *host,
                                 size_t nbytes);
// Copies `n` buffers of `each` bytes (any dense shape) into host[i * each],
// every copy started before any is waited for (one wait, not n round trips).
tt_status tt_pjrt_buffers_to_host(tt_pjrt *p, tt_pjrt_buffer *const *bufs, int n,
                                  void *host, size_t each);
// Safe while programs using `b` are still running: the plugin keeps the
// memory until they finish.
void tt_pjrt_buffer_destroy(tt_pjrt *p, tt_pjrt_buffer *b);
tt_dtype tt_pjrt_buffer_dtype(tt_pjrt *p, tt_pjrt_buffer *b);
// Dims of the buffer; returns the rank (<= TT_MAX_RANK).
int tt_pjrt_buffer_dims(tt_pjrt *p, tt_pjrt_buffer *b, int64_t *dims);
int64_t tt_pjrt_buffer_device_bytes(tt_pjrt *p, tt_pjrt_buffer *b);
// Waits until the buffer is computed; returns the async error if any.
tt_status tt_pjrt_buffer_await(tt_pjrt *p, tt_pjrt_buffer *b);

// --- executables ---------------------------------------------------------------

// Compiles StableHLO MLIR text (a module with a public @main) for one device.
// The error carries the plugin's diagnostic.
tt_status tt_pjrt_compile(tt_pjrt *p, const char *mlir, size_t len,
                          tt_pjrt_exe **out);
void tt_pjrt_exe_destroy(tt_pjrt *p, tt_pjrt_exe *e);
int tt_pjrt_exe_num_outputs(tt_pjrt *p, tt_pjrt_exe *e);

// Serialises a compiled executable; `*out_data` is malloc'd, caller frees.
tt_status tt_pjrt_exe_serialize(tt_pjrt *p, tt_pjrt_exe *e, void **out_data,
                                size_t *out_len);
tt_status tt_pjrt_exe_deserialize(tt_pjrt *p, const void *data, size_t len,
                                  tt_pjrt_exe **out);

// Marks `e` as compiled from a module whose parameters may alias outputs
// (tf.aliasing_output): its launches then donate only what they say.
void tt_pjrt_exe_set_aliasing(tt_pjrt_exe *e);
bool tt_pjrt_exe_aliasing(const tt_pjrt_exe *e);

// Launches `e` on `device` with `nargs` arguments. Returns immediately with
// the output buffers (owned by the caller; `outs` has room for
// tt_pjrt_exe_num_outputs) and, when `out_done` is non-NULL, an event that
// becomes ready when the execution finishes. Argument i is donated when
// `donate` (NULL: none) has donate[i] and `e` aliases it to an output: the
// output may then be written into its memory, and the argument's buffer is
// deleted (its handle must still be destroyed). Other arguments are kept.
tt_status tt_pjrt_execute(tt_pjrt *p, tt_pjrt_exe *e, int device,
                          tt_pjrt_buffer *const *args, int nargs, const bool *donate,
                          tt_pjrt_buffer **outs, tt_pjrt_event **out_done);

// --- events ------------------------------------------------------------------

tt_status tt_pjrt_event_await(tt_pjrt *p, tt_pjrt_event *ev);  // + its error
bool tt_pjrt_event_is_ready(tt_pjrt *p, tt_pjrt_event *ev);
void tt_pjrt_event_destroy(tt_pjrt *p, tt_pjrt_event *ev);
// Calls fn(arg, ok) once `ev` is ready: on a plugin thread, or at once in
// this one when it already is; `ok` is false when the work failed. `ev` may be
// destroyed before then. On an error (no such slot) fn is never called.
typedef void (*tt_pjrt_ready_fn)(void *arg, bool ok);
tt_status tt_pjrt_event_on_ready(tt_pjrt *p, tt_pjrt_event *ev,
                                 tt_pjrt_ready_fn fn, void *arg);

// --- compile options -----------------------------------------------------------

// Encodes an xla.CompileOptionsProto for a single-replica, single-partition
// program (portable: runnable on any addressable device). `*out` is malloc'd.
tt_status tt_pjrt_compile_options(void **out, size_t *out_len);
// The same with XLA's backend optimisation level set (DebugOptions'
// xla_backend_optimization_level; -1: the plugin's default). Level 0 halves
// the CPU backend's compile time of a small program.
tt_status tt_pjrt_compile_options_opt_level(int level, void **out, size_t *out_len);

// --- C kernels through XLA's FFI (ffi.c) ---------------------------------------

// Registers our FFI handler with the plugin (once) and `fn` as the C kernel
// `name`; TT_UNIMPLEMENTED when the plugin has no FFI extension.
tt_status tt_pjrt_ffi_register(tt_pjrt *p, const char *name, tt_c_kernel_fn fn);
// The same for a kernel that is handed the CPU runtime's thread pool.
tt_status tt_pjrt_ffi_register_pooled(tt_pjrt *p, const char *name, tt_c_kernel_pool_fn fn);
// The custom-call target every C kernel's call names.
const char *tt_pjrt_ffi_target(void);

// --- the plugin check (check.c; python -m torchtpu.tools.plugin_check) ---------

// Called once per reported line: `key` names what it is ("step", "api",
// "struct", "attribute", "extension", "device", "memory", "program",
// "collective", "result", ...), `value` says it. Both live for the call.
typedef void (*tt_pjrt_check_emit_fn)(void *arg, const char *key,
                                      const char *value);

typedef struct tt_pjrt_check_options {
  const char *plugin_path;  // NULL: tt_pjrt_discover
  int cpu_device_count;     // CPU plugins: devices for the collective step
  bool skip_struct_probe;   // don't fork to ask the plugin its struct sizes
} tt_pjrt_check_options;

// Loads the plugin, reports versions, struct sizes, attributes, extensions,
// devices and memories, runs x*2+1 and an all_reduce over every device and
// checks their values; stops at the first failure and returns it (the last
// "step" line names where). Exported for ctypes: needs no PyTorch.
TT_API tt_status tt_pjrt_check(const tt_pjrt_check_options *opts,
                               tt_pjrt_check_emit_fn emit, void *arg);

// --- replicated programs (collectives) -------------------------------------------
//
// A program whose collectives span devices is compiled once for a fixed set
// of devices: num_replicas = n and a device assignment (replica i runs on
// global device id device_ids[i]), not portable. It is launched on all n
// devices at once.

// Encodes an xla.CompileOptionsProto for `n` replicas on `device_ids` (one
// partition). `*out` is malloc'd.
tt_status tt_pjrt_compile_options_replicated(int n, const int64_t *device_ids,
                                             void **out, size_t *out_len);
// The global device id of addressable device `device` (what a device
// assignment names).
tt_status tt_pjrt_device_id(tt_pjrt *p, int device, int64_t *out_id);
// Compiles StableHLO text with the given serialized CompileOptionsProto.
tt_status tt_pjrt_compile_with_options(tt_pjrt *p, const char *mlir, size_t len,
                                       const void *options, size_t options_len,
                                       tt_pjrt_exe **out);
// Launches a replicated executable on its `ndev` devices at once.
// `args` is [ndev][nargs] (row-major), `outs` [ndev][num_outputs] and receives
// owned buffers; `out_done` (NULL or room for ndev) receives one owned event
// per device.
tt_status tt_pjrt_execute_replicated(tt_pjrt *p, tt_pjrt_exe *e, int ndev,
                                     tt_pjrt_buffer *const *args, int nargs,
                                     tt_pjrt_buffer **outs,
                                     tt_pjrt_event **out_done);

#endif
