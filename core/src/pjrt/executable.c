// executable.c — compile StableHLO, (de)serialise, launch.
//
// Programs are compiled "portable" (compile_options.c): no device is fixed at
// compile time, and every launch names its device through execute_device, so
// one executable serves all addressable devices. Replicated programs
// (collectives) are the exception: compiled with their own options for a
// fixed device assignment and launched on all of its devices at once
// (tt_pjrt_execute_replicated). The output count is read once, when the
// executable is made, and cached in tt_pjrt_exe.
#include <stdlib.h>
#include <string.h>

#include "pjrt/internal.h"

// --- helpers -----------------------------------------------------------------

// The PJRT_Executable view of a loaded executable: a new object to destroy.
static tt_status get_executable(tt_pjrt *p, PJRT_LoadedExecutable *le,
                                PJRT_Executable **out) {
  PJRT_LoadedExecutable_GetExecutable_Args a = {0};
  a.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  a.loaded_executable = le;
  TT_RETURN_IF_ERROR(
      TT_PJRT_CALL(p->api, PJRT_LoadedExecutable_GetExecutable, &a));
  *out = a.executable;
  return NULL;
}

static void destroy_executable(tt_pjrt *p, PJRT_Executable *ex) {
  if (!ex) return;
  PJRT_Executable_Destroy_Args a = {0};
  a.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  a.executable = ex;
  tt_status_free(TT_PJRT_CALL(p->api, PJRT_Executable_Destroy, &a));
}

static void destroy_loaded(tt_pjrt *p, PJRT_LoadedExecutable *le) {
  if (!le) return;
  PJRT_LoadedExecutable_Destroy_Args a = {0};
  a.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
  a.executable = le;
  tt_status_free(TT_PJRT_CALL(p->api, PJRT_LoadedExecutable_Destroy, &a));
}

static tt_status count_outputs(tt_pjrt *p, PJRT_LoadedExecutable *le,
                               int *out) {
  PJRT_Executable *ex = NULL;
  TT_RETURN_IF_ERROR(get_executable(p, le, &ex));
  PJRT_Executable_NumOutputs_Args a = {0};
  a.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  a.executable = ex;
  tt_status st = TT_PJRT_CALL(p->api, PJRT_Executable_NumOutputs, &a);
  destroy_executable(p, ex);
  if (!st) *out = (int)a.num_outputs;
  return st;
}

// Wraps `le` (taken over: destroyed on failure) into a tt_pjrt_exe.
static tt_status wrap_loaded(tt_pjrt *p, PJRT_LoadedExecutable *le,
                             tt_pjrt_exe **out) {
  tt_pjrt_exe *e = calloc(1, sizeof *e);
  tt_status st = e ? count_outputs(p, le, &e->num_outputs)
                   : tt_make_status(TT_RESOURCE_EXHAUSTED,
                                    "out of host memory");
  if (st) {
    free(e);
    destroy_loaded(p, le);
    return st;
  }
  e->exe = le;
  *out = e;
  return NULL;
}

// --- compile -----------------------------------------------------------------

tt_status tt_pjrt_compile(tt_pjrt *p, const char *mlir, size_t len,
                          tt_pjrt_exe **out) {
  return tt_pjrt_compile_with_options(p, mlir, len, p->compile_options,
                                      p->compile_options_len, out);
}

tt_status tt_pjrt_compile_with_options(tt_pjrt *p, const char *mlir, size_t len,
                                       const void *options, size_t options_len,
                                       tt_pjrt_exe **out) {
  *out = NULL;
  static const char format[] = "mlir";
  PJRT_Program prog = {0};
  prog.struct_size = PJRT_Program_STRUCT_SIZE;
  prog.code = (char *)mlir;  // read only; the ABI field just lacks const
  prog.code_size = len;
  prog.format = format;
  prog.format_size = sizeof format - 1;

  PJRT_Client_Compile_Args a = {0};
  a.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  a.client = p->client;
  a.program = &prog;
  a.compile_options = options;
  a.compile_options_size = options_len;
  tt_status st = TT_PJRT_CALL(p->api, PJRT_Client_Compile, &a);
  if (st)
    return tt_status_annotate(st, "compiling %zu bytes of StableHLO on %s",
                              len, p->platform);
  return wrap_loaded(p, a.executable, out);
}

void tt_pjrt_exe_destroy(tt_pjrt *p, tt_pjrt_exe *e) {
  if (!p || !e) return;
  destroy_loaded(p, e->exe);
  free(e);
}

int tt_pjrt_exe_num_outputs(tt_pjrt *p, tt_pjrt_exe *e) {
  (void)p;
  return e->num_outputs;
}

// --- serialise ---------------------------------------------------------------

tt_status tt_pjrt_exe_serialize(tt_pjrt *p, tt_pjrt_exe *e, void **out_data,
                                size_t *out_len) {
  *out_data = NULL;
  *out_len = 0;
  PJRT_Executable *ex = NULL;
  TT_RETURN_IF_ERROR(get_executable(p, e->exe, &ex));
  PJRT_Executable_Serialize_Args a = {0};
  a.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
  a.executable = ex;
  tt_status st = TT_PJRT_CALL(p->api, PJRT_Executable_Serialize, &a);
  if (!st) {
    // The plugin's bytes die with its deleter: copy them into our own.
    void *copy = malloc(a.serialized_bytes_size ? a.serialized_bytes_size : 1);
    if (copy) {
      memcpy(copy, a.serialized_bytes, a.serialized_bytes_size);
      *out_data = copy;
      *out_len = a.serialized_bytes_size;
    } else {
      st = tt_make_status(TT_RESOURCE_EXHAUSTED,
                          "out of host memory copying a %zu-byte executable",
                          a.serialized_bytes_size);
    }
    if (a.serialized_executable_deleter)
      a.serialized_executable_deleter(a.serialized_executable);
  }
  destroy_executable(p, ex);
  return st;
}

tt_status tt_pjrt_exe_deserialize(tt_pjrt *p, const void *data, size_t len,
                                  tt_pjrt_exe **out) {
  *out = NULL;
  PJRT_Executable_DeserializeAndLoad_Args a = {0};
  a.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
  a.client = p->client;
  a.serialized_executable = data;
  a.serialized_executable_size = len;
  tt_status st = TT_PJRT_CALL(p->api, PJRT_Executable_DeserializeAndLoad, &a);
  if (st)
    return tt_status_annotate(st, "loading a %zu-byte serialized executable",
                              len);
  return wrap_loaded(p, a.loaded_executable, out);
}

// --- execute -----------------------------------------------------------------

// Argument and output arrays up to this size live on the stack.
enum { SMALL = 32 };

void tt_pjrt_exe_set_aliasing(tt_pjrt_exe *e) { e->aliasing = true; }
bool tt_pjrt_exe_aliasing(const tt_pjrt_exe *e) { return e->aliasing; }

// The arguments an aliasing program must not donate: all but donate[i],
// written to `small` (room for SMALL) when they fit, else to the heap (the
// caller frees what is not `small`). NULL with *n = 0 when the program
// aliases nothing (PJRT donates nothing then) or on no memory (*n = -1).
static int64_t *kept_args(const tt_pjrt_exe *e, int nargs, const bool *donate,
                          int64_t *small, int64_t *n) {
  *n = 0;
  if (!e->aliasing || nargs == 0) return NULL;
  int64_t *kept = nargs <= SMALL ? small : malloc(sizeof *kept * (size_t)nargs);
  if (!kept) {
    *n = -1;
    return NULL;
  }
  for (int i = 0; i < nargs; i++)
    if (!donate || !donate[i]) kept[(*n)++] = i;
  return kept;
}

tt_status tt_pjrt_execute(tt_pjrt *p, tt_pjrt_exe *e, int device,
                          tt_pjrt_buffer *const *args, int nargs, const bool *donate,
                          tt_pjrt_buffer **outs, tt_pjrt_event **out_done) {
  if (out_done) *out_done = NULL;
  if (device < 0 || device >= p->device_count)
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "execute: device %d out of range: %s has %d devices",
                          device, p->platform, p->device_count);
  if (nargs < 0 || (nargs > 0 && !args))
    return tt_make_status(TT_INVALID_ARGUMENT, "execute: %d arguments at %p",
                          nargs, (const void *)args);
  int nouts = e->num_outputs;

  // Our handles are the plugin's pointers, but copying them into arrays of
  // the plugin's type keeps the C aliasing rules intact.
  PJRT_Buffer *arg_small[SMALL], *out_small[SMALL];
  PJRT_Buffer **argv = nargs <= SMALL ? arg_small
                                      : malloc(sizeof *argv * (size_t)nargs);
  PJRT_Buffer **outv = nouts <= SMALL ? out_small
                                      : malloc(sizeof *outv * (size_t)nouts);
  int64_t nkept = 0, kept_small[SMALL];
  int64_t *kept = kept_args(e, nargs, donate, kept_small, &nkept);
  tt_status st = NULL;
  if (!argv || !outv || nkept < 0) {
    st = tt_make_status(TT_RESOURCE_EXHAUSTED, "out of host memory");
    goto cleanup;
  }
  for (int i = 0; i < nargs; i++) {
    if (!args[i]) {
      st = tt_make_status(TT_INVALID_ARGUMENT, "execute: argument %d is NULL",
                          i);
      goto cleanup;
    }
    argv[i] = tt_pjrt_raw_buffer(args[i]);
  }
  for (int i = 0; i < nouts; i++) outv[i] = NULL;

  PJRT_ExecuteOptions opts;
  tt_abi_execute_options_init(&opts);
  opts.non_donatable_input_indices = kept;
  opts.num_non_donatable_input_indices = (size_t)nkept;
  PJRT_Buffer *const *arg_lists[1] = {argv};
  PJRT_Buffer **out_lists[1] = {outv};
  PJRT_Event *done[1] = {NULL};

  PJRT_LoadedExecutable_Execute_Args a = {0};
  a.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  a.executable = e->exe;
  a.options = &opts;
  a.argument_lists = arg_lists;
  a.num_devices = 1;
  a.num_args = (size_t)nargs;
  a.output_lists = out_lists;
  a.device_complete_events = out_done ? done : NULL;
  a.execute_device = p->devices[device];
  st = TT_PJRT_CALL(p->api, PJRT_LoadedExecutable_Execute, &a);
  if (st) {
    st = tt_status_annotate(st, "launching on %s device %d", p->platform,
                            device);
    goto cleanup;
  }
  for (int i = 0; i < nouts; i++) outs[i] = tt_pjrt_wrap_buffer(outv[i]);
  if (out_done) *out_done = tt_pjrt_wrap_event(done[0]);

cleanup:
  if (argv != arg_small) free(argv);
  if (outv != out_small) free(outv);
  if (kept != kept_small) free(kept);
  return st;
}

// --- replicated launch ---------------------------------------------------------

tt_status tt_pjrt_execute_replicated(tt_pjrt *p, tt_pjrt_exe *e, int ndev,
                                     tt_pjrt_buffer *const *args, int nargs,
                                     tt_pjrt_buffer **outs,
                                     tt_pjrt_event **out_done) {
  if (ndev < 1 || ndev > p->device_count || nargs < 0 || (nargs && !args))
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "execute: %d devices (of %d on %s), %d arguments",
                          ndev, p->device_count, p->platform, nargs);
  int nouts = e->num_outputs;
  size_t nd = (size_t)ndev;
  PJRT_Buffer **argv = malloc(sizeof *argv * (nd * (size_t)nargs + 1));
  PJRT_Buffer **outv = calloc(nd * (size_t)nouts + 1, sizeof *outv);
  PJRT_Buffer *const **arg_lists = malloc(sizeof *arg_lists * nd);
  PJRT_Buffer ***out_lists = malloc(sizeof *out_lists * nd);
  PJRT_Event **done = calloc(nd, sizeof *done);
  tt_status st = NULL;
  if (!argv || !outv || !arg_lists || !out_lists || !done) {
    st = tt_make_status(TT_RESOURCE_EXHAUSTED, "out of host memory");
    goto cleanup;
  }
  for (int i = 0; i < ndev * nargs; i++) {
    if (!args[i]) {
      st = tt_make_status(TT_INVALID_ARGUMENT,
                          "execute: argument %d of device %d is NULL",
                          i % nargs, i / nargs);
      goto cleanup;
    }
    argv[i] = tt_pjrt_raw_buffer(args[i]);
  }
  for (int d = 0; d < ndev; d++) {
    arg_lists[d] = argv + (size_t)d * (size_t)nargs;
    out_lists[d] = outv + (size_t)d * (size_t)nouts;
  }

  PJRT_ExecuteOptions opts;
  tt_abi_execute_options_init(&opts);
  PJRT_LoadedExecutable_Execute_Args a = {0};
  a.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  a.executable = e->exe;
  a.options = &opts;
  a.argument_lists = (PJRT_Buffer *const *const *)arg_lists;
  a.num_devices = nd;
  a.num_args = (size_t)nargs;
  a.output_lists = (PJRT_Buffer **const *)out_lists;
  a.device_complete_events = out_done ? done : NULL;
  a.execute_device = NULL;  // the devices of the compiled device assignment
  st = TT_PJRT_CALL(p->api, PJRT_LoadedExecutable_Execute, &a);
  if (st) {
    st = tt_status_annotate(st, "launching a program replicated over %d %s "
                            "devices", ndev, p->platform);
    goto cleanup;
  }
  for (size_t i = 0; i < nd * (size_t)nouts; i++)
    outs[i] = tt_pjrt_wrap_buffer(outv[i]);
  if (out_done)
    for (int d = 0; d < ndev; d++) out_done[d] = tt_pjrt_wrap_event(done[d]);

cleanup:
  free(argv);
  free(outv);
  free(arg_lists);
  free(out_lists);
  free(done);
  return st;
}
