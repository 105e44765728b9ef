// internal.h — what the pjrt/*.c files share: the tt_pjrt struct, the
// checked-call macro, and PJRT_Error -> tt_status conversion.
//
// Handles: a tt_pjrt_buffer * is the plugin's PJRT_Buffer * and a
// tt_pjrt_event * is its PJRT_Event *, converted with the helpers below. No
// wrapper is allocated per buffer or event, so the hot path (one upload, one
// launch) costs no malloc of ours. A tt_pjrt_exe is a real struct: it caches
// the output count.
//
// Only core/src/pjrt/*.c include this file.
#ifndef TT_PJRT_INTERNAL_H
#define TT_PJRT_INTERNAL_H

#include <stddef.h>

#include "base/status.h"
#include "pjrt/abi.h"
#include "pjrt/pjrt.h"

struct tt_pjrt {
  void *dl;             // dlopen handle; never closed (see plugin.c)
  bool fresh;           // our dlopen loaded it: PJRT_Plugin_Initialize is ours
  const PJRT_Api *api;  // owned by the plugin
  PJRT_Client *client;  // owned
  char *plugin_path;    // owned
  int api_major, api_minor;
  char *platform;          // owned, lower case: "cpu", "cuda", "tpu"
  char *platform_version;  // owned
  char *device_kind;       // owned, of device 0
  PJRT_Device *const *devices;  // addressable devices, owned by the client
  int device_count;
  bool asynchronous;      // see tt_pjrt_info
  // XLA's CPU plugin: a buffer's memory is host memory, read with memcpy
  // once the buffer is ready (PJRT_Buffer_UnsafePointer) instead of the
  // plugin's asynchronous transfer and its hand-off between threads.
  bool host_addressable;
  void *compile_options;  // owned, serialized CompileOptionsProto
  size_t compile_options_len;
};

struct tt_pjrt_exe {
  PJRT_LoadedExecutable *exe;  // owned
  int num_outputs;
  bool aliasing;  // its parameters may alias outputs (tt_pjrt_exe_set_aliasing)
};

static inline PJRT_Buffer *tt_pjrt_raw_buffer(tt_pjrt_buffer *b) {
  return (PJRT_Buffer *)(void *)b;
}
static inline tt_pjrt_buffer *tt_pjrt_wrap_buffer(PJRT_Buffer *b) {
  return (tt_pjrt_buffer *)(void *)b;
}
static inline PJRT_Event *tt_pjrt_raw_event(tt_pjrt_event *e) {
  return (PJRT_Event *)(void *)e;
}
static inline tt_pjrt_event *tt_pjrt_wrap_event(PJRT_Event *e) {
  return (tt_pjrt_event *)(void *)e;
}

// --- loading (plugin.c) ------------------------------------------------------

// dlopens `path`, checks its API version and table size, and initialises it
// (once per process). Sets p->dl, p->api, p->api_major, p->api_minor.
// = tt_pjrt_plugin_open + tt_pjrt_plugin_init.
tt_status tt_pjrt_plugin_load(tt_pjrt *p, const char *path);
// dlopen, GetPjrtApi, version and table checks; nothing of the plugin runs.
tt_status tt_pjrt_plugin_open(tt_pjrt *p, const char *path);
// PJRT_Plugin_Initialize (when p->fresh), on a thread, waiting at most
// tt_pjrt_init_timeout() seconds.
tt_status tt_pjrt_plugin_init(tt_pjrt *p, const char *path);
#define TT_PJRT_INIT_TIMEOUT_DEFAULT 300.0  // seconds; a TPU pod host's first
                                            // initialisation takes tens
double tt_pjrt_init_timeout(void);  // env TORCHTPU_PLUGIN_INIT_TIMEOUT
// libtpu's failures made plain: "no TPU device" becomes our NOT_FOUND
// message, others gain the lock file's name. Other plugins' pass through.
// Takes and returns ownership of `st` (NULL stays NULL).
tt_status tt_pjrt_explain_failure(const char *path, tt_status st);

// The two halves of tt_pjrt_create, for tt_pjrt_check: open (discovery when
// `path` is NULL, dlopen, version; nothing of the plugin runs) and start
// (initialise, create the client, read platform and devices).
tt_status tt_pjrt_open(const char *path, tt_pjrt **out);
tt_status tt_pjrt_start(tt_pjrt *p, const tt_pjrt_options *opts);

// --- struct sizes as the plugin checks them (check.c) -------------------------

typedef struct tt_pjrt_struct_probe {
  const char *name;  // "PJRT_Client_Create_Args", static
  size_t ours;       // our struct_size for it
  long plugin_min;   // the least struct_size the plugin accepts; -1: its
                     // message named none; -2: its table has no such slot
} tt_pjrt_struct_probe;
// How many structs tt_pjrt_probe_struct_sizes fills.
int tt_pjrt_probe_count(void);
// Calls every slot we use with struct_size 1, in a forked child, and reads
// the minimum from the plugin's refusal. `out` has tt_pjrt_probe_count()
// entries. An error when the child died (a plugin that doesn't check).
tt_status tt_pjrt_probe_struct_sizes(const PJRT_Api *api,
                                     tt_pjrt_struct_probe *out);

// --- calling the plugin ------------------------------------------------------

// True when the plugin's table is long enough to hold the slot at `offset`.
static inline int tt_pjrt_has_slot(const PJRT_Api *api, size_t offset) {
  return offset + sizeof(void *) <= api->struct_size;
}

// Turns `err` (may be NULL) into a status naming `fn`, keeping the plugin's
// message and mapping its code; destroys `err`. `file`:`line` is the call.
tt_status tt_pjrt_error_status(const PJRT_Api *api, PJRT_Error *err,
                               const char *fn, const char *file, int line);
// The status for calling a slot the plugin's table doesn't have.
tt_status tt_pjrt_missing_slot(const PJRT_Api *api, const char *fn);

// Calls api->fn(args) if the plugin has that slot; evaluates to a tt_status.
// Use for every slot that returns PJRT_Error *.
#define TT_PJRT_CALL(api, fn, args)                                       \
  (tt_pjrt_has_slot((api), offsetof(PJRT_Api, fn))                        \
       ? tt_pjrt_error_status((api), (api)->fn(args), #fn, __FILE__,      \
                              __LINE__)                                   \
       : tt_pjrt_missing_slot((api), #fn))

// Destroys `ev` (may be NULL), ignoring errors: nothing can act on them.
void tt_pjrt_raw_event_destroy(const PJRT_Api *api, PJRT_Event *ev);
// Awaits `ev` and returns its error; does not destroy it.
tt_status tt_pjrt_raw_event_await(const PJRT_Api *api, PJRT_Event *ev);

#endif
