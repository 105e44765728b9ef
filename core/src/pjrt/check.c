// check.c — the plugin check behind `python -m torchtpu.tools.plugin_check`:
// loads a PJRT plugin through our own loader and reports, step by step, what
// torchtpu relies on: API versions (ours and the plugin's), the size the
// plugin accepts for every argument struct we pass, attributes, extensions,
// platform, devices and memory spaces, then compiles and runs one small
// StableHLO program and one all_reduce over every local device, checking
// their values. Stops at the first failure with its status.
//
// It lives in the core, not in Python, because only abi.h knows the PJRT
// layout (a second copy in ctypes would drift), and it needs no PyTorch:
// Python reaches it through ctypes (tt_pjrt_check, exported).
//
// Struct sizes are read from the plugin itself: an XLA-built plugin checks
// `struct_size` before anything else in every call and names its minimum
// ("Unexpected X size: expected N, got 1"). Each call is made with
// struct_size 1 in a forked child, so a plugin that reads further anyway
// crashes the child, not the caller.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "pjrt/internal.h"

// --- struct sizes, as the plugin checks them -----------------------------------

// Every args struct we pass, with the slot that receives it. ExecuteOptions
// travels inside Execute's args and is probed through it (see probe_one).
#define TT_PROBES(X)                                                        \
  X(PJRT_Error_GetCode, PJRT_Error_GetCode_Args)                            \
  X(PJRT_Plugin_Initialize, PJRT_Plugin_Initialize_Args)                    \
  X(PJRT_Plugin_Attributes, PJRT_Plugin_Attributes_Args)                    \
  X(PJRT_Event_Destroy, PJRT_Event_Destroy_Args)                            \
  X(PJRT_Event_IsReady, PJRT_Event_IsReady_Args)                            \
  X(PJRT_Event_Error, PJRT_Event_Error_Args)                                \
  X(PJRT_Event_Await, PJRT_Event_Await_Args)                                \
  X(PJRT_Event_OnReady, PJRT_Event_OnReady_Args)                            \
  X(PJRT_Client_Create, PJRT_Client_Create_Args)                            \
  X(PJRT_Client_Destroy, PJRT_Client_Destroy_Args)                          \
  X(PJRT_Client_PlatformName, PJRT_Client_PlatformName_Args)                \
  X(PJRT_Client_ProcessIndex, PJRT_Client_ProcessIndex_Args)                \
  X(PJRT_Client_PlatformVersion, PJRT_Client_PlatformVersion_Args)          \
  X(PJRT_Client_AddressableDevices, PJRT_Client_AddressableDevices_Args)    \
  X(PJRT_Client_Compile, PJRT_Client_Compile_Args)                          \
  X(PJRT_Client_BufferFromHostBuffer, PJRT_Client_BufferFromHostBuffer_Args) \
  X(PJRT_DeviceDescription_Id, PJRT_DeviceDescription_Id_Args)              \
  X(PJRT_DeviceDescription_Kind, PJRT_DeviceDescription_Kind_Args)          \
  X(PJRT_DeviceDescription_DebugString,                                     \
    PJRT_DeviceDescription_DebugString_Args)                                \
  X(PJRT_Device_GetDescription, PJRT_Device_GetDescription_Args)            \
  X(PJRT_Device_AddressableMemories, PJRT_Device_AddressableMemories_Args)  \
  X(PJRT_Device_DefaultMemory, PJRT_Device_DefaultMemory_Args)              \
  X(PJRT_Memory_Id, PJRT_Memory_Id_Args)                                    \
  X(PJRT_Memory_Kind, PJRT_Memory_Kind_Args)                                \
  X(PJRT_Executable_Destroy, PJRT_Executable_Destroy_Args)                  \
  X(PJRT_Executable_NumOutputs, PJRT_Executable_NumOutputs_Args)            \
  X(PJRT_Executable_Serialize, PJRT_Executable_Serialize_Args)              \
  X(PJRT_LoadedExecutable_Destroy, PJRT_LoadedExecutable_Destroy_Args)      \
  X(PJRT_LoadedExecutable_GetExecutable,                                    \
    PJRT_LoadedExecutable_GetExecutable_Args)                               \
  X(PJRT_LoadedExecutable_Execute, PJRT_LoadedExecutable_Execute_Args)      \
  X(PJRT_Executable_DeserializeAndLoad,                                     \
    PJRT_Executable_DeserializeAndLoad_Args)                                \
  X(PJRT_Buffer_Destroy, PJRT_Buffer_Destroy_Args)                          \
  X(PJRT_Buffer_ElementType, PJRT_Buffer_ElementType_Args)                  \
  X(PJRT_Buffer_Dimensions, PJRT_Buffer_Dimensions_Args)                    \
  X(PJRT_Buffer_OnDeviceSizeInBytes, PJRT_Buffer_OnDeviceSizeInBytes_Args)  \
  X(PJRT_Buffer_ToHostBuffer, PJRT_Buffer_ToHostBuffer_Args)                \
  X(PJRT_Buffer_ReadyEvent, PJRT_Buffer_ReadyEvent_Args)                    \
  X(PJRT_Buffer_UnsafePointer, PJRT_Buffer_UnsafePointer_Args)

enum {
#define TT_COUNT(slot, type) +1
  PROBE_COUNT = 1 TT_PROBES(TT_COUNT),  // + PJRT_ExecuteOptions
#undef TT_COUNT
};

// The N of the plugin's "size: expected N"; -1 when its message has none.
static long expected_size(const PJRT_Api *api, PJRT_Error *err) {
  if (!err) return -1;
  tt_status st = tt_pjrt_error_status(api, err, "probe", __FILE__, __LINE__);
  // "Unexpected X size: expected N, got 1" ("Unexpected" holds "expected").
  const char *at = strstr(tt_status_message(st), "size: expected ");
  long n = at ? strtol(at + 15, NULL, 10) : -1;
  tt_status_free(st);
  return n > 0 ? n : -1;
}

// Calls `slot` with struct_size 1 and reads the plugin's minimum.
#define TT_PROBE_CALL(slot, type)                                          \
  if (i == k++) {                                                          \
    if (!tt_pjrt_has_slot(api, offsetof(PJRT_Api, slot))) return -2;      \
    type a;                                                                \
    memset(&a, 0, sizeof a);                                               \
    a.struct_size = 1;                                                     \
    return expected_size(api, api->slot(&a));                             \
  }

static long probe_one(const PJRT_Api *api, int i) {
  int k = 0;
  TT_PROBES(TT_PROBE_CALL)
  // PJRT_ExecuteOptions: Execute checks its own args, then the options'.
  PJRT_LoadedExecutable_Execute_Args a = {0};
  PJRT_ExecuteOptions o;
  tt_abi_execute_options_init(&o);
  a.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  a.options = &o;
  o.struct_size = 1;
  return expected_size(api, api->PJRT_LoadedExecutable_Execute(&a));
}

static void fill_names(tt_pjrt_struct_probe *out) {
  int k = 0;
#define TT_NAME(slot, type)       \
  out[k].name = #type;            \
  out[k++].ours = type##_STRUCT_SIZE;
  TT_PROBES(TT_NAME)
#undef TT_NAME
  out[k].name = "PJRT_ExecuteOptions";
  out[k].ours = PJRT_ExecuteOptions_STRUCT_SIZE;
}

// The child: one long per probe down the pipe, then exit without running
// the parent's atexit handlers or the plugin's destructors.
static void probe_child(const PJRT_Api *api, int fd) {
  for (int i = 0; i < PROBE_COUNT; i++) {
    long n = probe_one(api, i);
    if (write(fd, &n, sizeof n) != (ssize_t)sizeof n) break;
  }
  _exit(0);
}

int tt_pjrt_probe_count(void) { return PROBE_COUNT; }

tt_status tt_pjrt_probe_struct_sizes(const PJRT_Api *api,
                                     tt_pjrt_struct_probe *out) {
  fill_names(out);
  for (int i = 0; i < PROBE_COUNT; i++) out[i].plugin_min = -1;
  int fds[2];
  if (pipe(fds) != 0)
    return tt_make_status(TT_INTERNAL, "probe: pipe: %s", strerror(errno));
  fflush(NULL);  // the child must not flush our buffered output again
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return tt_make_status(TT_INTERNAL, "probe: fork: %s", strerror(errno));
  }
  if (pid == 0) {
    close(fds[0]);
    probe_child(api, fds[1]);
  }
  close(fds[1]);
  int got = 0;
  long n;
  while (got < PROBE_COUNT && read(fds[0], &n, sizeof n) == (ssize_t)sizeof n)
    out[got++].plugin_min = n;
  close(fds[0]);
  int wst = 0;
  while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
  }
  if (got < PROBE_COUNT)
    return tt_make_status(
        TT_INTERNAL,
        "probe: the plugin %s when called with struct_size 1 for %s (it does "
        "not check struct sizes as XLA's plugins do)",
        WIFSIGNALED(wst) ? strsignal(WTERMSIG(wst)) : "stopped",
        out[got].name);
  return NULL;
}

// --- reporting -------------------------------------------------------------------

typedef struct reporter {
  tt_pjrt_check_emit_fn emit;
  void *arg;
} reporter;

static void say(const reporter *r, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(const reporter *r, const char *key, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  r->emit(r->arg, key, line);
}

static const char *const extension_names[] = {
    "GpuCustomCall", "Profiler", "CustomPartitioner", "Stream", "Layouts",
    "FFI", "MemoryDescriptions", "Triton", "RawBuffer", "PhaseCompile",
    "Example", "Unknown", "CrossHostTransfers", "ExecutableMetadata",
    "Callback", "HostAllocator", "TpuTopology", "TpuExecutable", "Megascale",
    "Shardings", "AbiVersion", "Collectives", "MultiSlice",
    "HostMemoryAllocator", "XlaTransform", "ExecuteChain"};

static void report_api(const reporter *r, tt_pjrt *p) {
  say(r, "api", "plugin %d.%d, torchtpu written for 0.%d, needs 0.%d or newer",
      p->api_major, p->api_minor, TT_ABI_WRITTEN_MINOR, TT_ABI_MIN_MINOR);
  say(r, "api_table", "plugin %zu bytes, torchtpu calls up to %zu",
      p->api->struct_size, (size_t)TT_ABI_API_MIN_SIZE);
}

static tt_status report_structs(const reporter *r, tt_pjrt *p) {
  tt_pjrt_struct_probe probes[PROBE_COUNT];
  TT_RETURN_IF_ERROR(tt_pjrt_probe_struct_sizes(p->api, probes));
  int bad = 0;
  for (int i = 0; i < PROBE_COUNT; i++) {
    const tt_pjrt_struct_probe *q = &probes[i];
    bool ok = q->plugin_min < 0 || (size_t)q->plugin_min <= q->ours;
    bad += !ok;
    if (q->plugin_min == -2)
      say(r, "struct", "%s: ours %zu, the plugin has no slot for it", q->name,
          q->ours);
    else if (q->plugin_min < 0)
      say(r, "struct", "%s: ours %zu, plugin did not say", q->name, q->ours);
    else
      say(r, "struct", "%s: ours %zu, plugin needs >= %ld: %s", q->name,
          q->ours, q->plugin_min, ok ? "ok" : "TOO SMALL");
  }
  if (bad)
    return tt_make_status(TT_FAILED_PRECONDITION,
                          "%d argument structs are smaller than the plugin "
                          "(C API %d.%d) accepts: torchtpu's abi.h needs the "
                          "fields added since",
                          bad, p->api_major, p->api_minor);
  return NULL;
}

static void report_value(const reporter *r, const PJRT_NamedValue *v) {
  char val[512] = "";
  int n = 0;
  switch (v->type) {
    case PJRT_NamedValue_kString:
      snprintf(val, sizeof val, "%.*s", (int)v->value_size, v->string_value);
      break;
    case PJRT_NamedValue_kInt64:
      snprintf(val, sizeof val, "%lld", (long long)v->int64_value);
      break;
    case PJRT_NamedValue_kInt64List:
      for (size_t i = 0; i < v->value_size && n < (int)sizeof val - 24; i++)
        n += snprintf(val + n, sizeof val - n, "%s%lld", i ? "." : "",
                      (long long)v->int64_array_value[i]);
      break;
    case PJRT_NamedValue_kFloat:
      snprintf(val, sizeof val, "%g", v->float_value);
      break;
    case PJRT_NamedValue_kBool:
      snprintf(val, sizeof val, "%s", v->bool_value ? "true" : "false");
      break;
  }
  say(r, "attribute", "%.*s = %s", (int)v->name_size, v->name, val);
}

static tt_status report_plugin(const reporter *r, tt_pjrt *p) {
  if (tt_pjrt_has_slot(p->api, offsetof(PJRT_Api, PJRT_Plugin_Attributes))) {
    PJRT_Plugin_Attributes_Args a = {0};
    a.struct_size = PJRT_Plugin_Attributes_Args_STRUCT_SIZE;
    TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Plugin_Attributes, &a));
    for (size_t i = 0; i < a.num_attributes; i++)
      report_value(r, &a.attributes[i]);
  }
  int n = 0;
  for (const PJRT_Extension_Base *e = p->api->extension_start; e && n < 64;
       e = e->next, n++) {
    int t = e->type;
    int known = (int)(sizeof extension_names / sizeof *extension_names);
    say(r, "extension", "%s (type %d, %zu bytes)",
        t >= 0 && t < known ? extension_names[t] : "?", t, e->struct_size);
  }
  return NULL;
}

static tt_status device_line(const reporter *r, tt_pjrt *p, int d) {
  PJRT_Device_GetDescription_Args g = {0};
  g.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  g.device = p->devices[d];
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Device_GetDescription, &g));
  PJRT_DeviceDescription_Id_Args id = {0};
  id.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
  id.device_description = g.device_description;
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_DeviceDescription_Id, &id));
  PJRT_DeviceDescription_Kind_Args k = {0};
  k.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
  k.device_description = g.device_description;
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_DeviceDescription_Kind, &k));
  PJRT_DeviceDescription_DebugString_Args s = {0};
  s.struct_size = PJRT_DeviceDescription_DebugString_Args_STRUCT_SIZE;
  s.device_description = g.device_description;
  TT_RETURN_IF_ERROR(
      TT_PJRT_CALL(p->api, PJRT_DeviceDescription_DebugString, &s));
  say(r, "device", "%d: id %d, kind %.*s, %.*s", d, id.id,
      (int)k.device_kind_size, k.device_kind, (int)s.debug_string_size,
      s.debug_string);
  return NULL;
}

static tt_status memory_lines(const reporter *r, tt_pjrt *p, int d) {
  PJRT_Device_AddressableMemories_Args m = {0};
  m.struct_size = PJRT_Device_AddressableMemories_Args_STRUCT_SIZE;
  m.device = p->devices[d];
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Device_AddressableMemories, &m));
  PJRT_Device_DefaultMemory_Args dm = {0};
  dm.struct_size = PJRT_Device_DefaultMemory_Args_STRUCT_SIZE;
  dm.device = p->devices[d];
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Device_DefaultMemory, &dm));
  for (size_t i = 0; i < m.num_memories; i++) {
    PJRT_Memory_Id_Args id = {0};
    id.struct_size = PJRT_Memory_Id_Args_STRUCT_SIZE;
    id.memory = m.memories[i];
    TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Memory_Id, &id));
    PJRT_Memory_Kind_Args k = {0};
    k.struct_size = PJRT_Memory_Kind_Args_STRUCT_SIZE;
    k.memory = m.memories[i];
    TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Memory_Kind, &k));
    say(r, "memory", "device %d: id %d, kind %.*s%s", d, id.id,
        (int)k.kind_size, k.kind,
        m.memories[i] == dm.memory ? " (default)" : "");
  }
  return NULL;
}

static tt_status report_devices(const reporter *r, tt_pjrt *p) {
  say(r, "platform", "%s", p->platform);
  say(r, "platform_version", "%s", p->platform_version);
  PJRT_Client_ProcessIndex_Args pi = {0};
  pi.struct_size = PJRT_Client_ProcessIndex_Args_STRUCT_SIZE;
  pi.client = p->client;
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Client_ProcessIndex, &pi));
  say(r, "process_index", "%d", pi.process_index);
  say(r, "devices", "%d", p->device_count);
  for (int d = 0; d < p->device_count; d++) {
    TT_RETURN_IF_ERROR(device_line(r, p, d));
    TT_RETURN_IF_ERROR(memory_lines(r, p, d));
  }
  return NULL;
}

// --- running programs ------------------------------------------------------------

// y = x * 2 + 1 over 8 floats: the smallest program with a constant, a
// multiply and an add, checked against the same arithmetic here.
static const char kAffine[] =
    "module @plugin_check {\n"
    "  func.func public @main(%x: tensor<8xf32>) -> tensor<8xf32> {\n"
    "    %two = stablehlo.constant dense<2.0> : tensor<8xf32>\n"
    "    %one = stablehlo.constant dense<1.0> : tensor<8xf32>\n"
    "    %m = stablehlo.multiply %x, %two : tensor<8xf32>\n"
    "    %y = stablehlo.add %m, %one : tensor<8xf32>\n"
    "    return %y : tensor<8xf32>\n"
    "  }\n"
    "}\n";

static tt_status run_affine(const reporter *r, tt_pjrt *p) {
  const int64_t dims[1] = {8};
  float x[8], y[8];
  for (int i = 0; i < 8; i++) x[i] = 0.5f * (float)i - 1.0f;
  tt_pjrt_exe *e = NULL;
  tt_pjrt_buffer *in = NULL, *out = NULL;
  tt_status st = tt_pjrt_compile(p, kAffine, strlen(kAffine), &e);
  if (!st) st = tt_pjrt_buffer_from_host(p, 0, TT_F32, dims, 1, x, &in);
  if (!st) st = tt_pjrt_execute(p, e, 0, &in, 1, NULL, &out, NULL);
  if (!st) st = tt_pjrt_buffer_to_host(p, out, y, sizeof y);
  double worst = 0;
  for (int i = 0; i < 8 && !st; i++)
    worst = fmax(worst, fabs((double)y[i] - (2.0 * x[i] + 1.0)));
  if (!st) {
    char vals[256];
    int n = 0;
    for (int i = 0; i < 8; i++)
      n += snprintf(vals + n, sizeof vals - n, "%s%g", i ? " " : "", y[i]);
    say(r, "program", "x*2+1 on f32[8], x = -1 -0.5 ... 2.5: %s (max error %g)",
        vals, worst);
    if (worst > 1e-6)
      st = tt_make_status(TT_INTERNAL, "program: x*2+1 is off by %g", worst);
  }
  tt_pjrt_buffer_destroy(p, in);
  tt_pjrt_buffer_destroy(p, out);
  tt_pjrt_exe_destroy(p, e);
  return tt_status_annotate(st, "running x*2+1 on device 0");
}

// all_reduce(sum) of x_d[i] = (d + 1) * (i + 1) over the n local devices:
// every device must hold (i + 1) * n (n + 1) / 2.
static tt_status all_reduce_text(int n, char **out) {
  tt_buf b;
  tt_buf_init(&b);
  tt_buf_printf(&b,
                "module @plugin_check_all_reduce attributes "
                "{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = %d : "
                "i32} {\n"
                "  func.func public @main(%%x: tensor<4xf32>) -> "
                "tensor<4xf32> {\n"
                "    %%r = \"stablehlo.all_reduce\"(%%x) ({\n"
                "    ^bb0(%%a: tensor<f32>, %%b: tensor<f32>):\n"
                "      %%s = stablehlo.add %%a, %%b : tensor<f32>\n"
                "      stablehlo.return %%s : tensor<f32>\n"
                "    }) {replica_groups = dense<[[",
                n);
  for (int d = 0; d < n; d++) tt_buf_printf(&b, "%s%d", d ? ", " : "", d);
  tt_buf_printf(&b,
                "]]> : tensor<1x%dxi64>} : (tensor<4xf32>) -> tensor<4xf32>\n"
                "    return %%r : tensor<4xf32>\n  }\n}\n",
                n);
  if (!tt_buf_ok(&b)) {
    tt_buf_deinit(&b);
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of host memory");
  }
  *out = b.data;  // owned by the caller now
  return NULL;
}

static tt_status check_all_reduce(tt_pjrt *p, int n, tt_pjrt_buffer **outs,
                                  double *worst) {
  *worst = 0;
  for (int d = 0; d < n; d++) {
    float got[4];
    TT_RETURN_IF_ERROR(tt_pjrt_buffer_to_host(p, outs[d], got, sizeof got));
    for (int i = 0; i < 4; i++)
      *worst = fmax(*worst, fabs(got[i] - (i + 1.0) * n * (n + 1) / 2.0));
  }
  return NULL;
}

static tt_status run_all_reduce(const reporter *r, tt_pjrt *p) {
  int n = p->device_count;
  if (n > 64) n = 64;
  const int64_t dims[1] = {4};
  char *text = NULL;
  void *opts = NULL;
  size_t opts_len = 0;
  int64_t ids[64];
  tt_pjrt_exe *e = NULL;
  tt_pjrt_buffer *args[64] = {0}, *outs[64] = {0};
  double worst = 0;
  tt_status st = all_reduce_text(n, &text);
  for (int d = 0; d < n && !st; d++) st = tt_pjrt_device_id(p, d, &ids[d]);
  if (!st) st = tt_pjrt_compile_options_replicated(n, ids, &opts, &opts_len);
  if (!st)
    st = tt_pjrt_compile_with_options(p, text, strlen(text), opts, opts_len, &e);
  for (int d = 0; d < n && !st; d++) {
    float h[4];
    for (int i = 0; i < 4; i++) h[i] = (float)((d + 1) * (i + 1));
    st = tt_pjrt_buffer_from_host(p, d, TT_F32, dims, 1, h, &args[d]);
  }
  if (!st) st = tt_pjrt_execute_replicated(p, e, n, args, 1, outs, NULL);
  if (!st) st = check_all_reduce(p, n, outs, &worst);
  if (!st) {
    say(r, "collective",
        "all_reduce(sum) over %d devices: device d holds (d+1)*[1 2 3 4], "
        "each got [%g %g %g %g]*%d (max error %g)",
        n, 1.0, 2.0, 3.0, 4.0, n * (n + 1) / 2, worst);
    if (worst > 1e-6)
      st = tt_make_status(TT_INTERNAL, "all_reduce is off by %g", worst);
  }
  for (int d = 0; d < n; d++) {
    tt_pjrt_buffer_destroy(p, args[d]);
    tt_pjrt_buffer_destroy(p, outs[d]);
  }
  tt_pjrt_exe_destroy(p, e);
  free(opts);
  free(text);
  return tt_status_annotate(st, "all_reduce over %d devices", n);
}

// --- the check -------------------------------------------------------------------

// Runs one step: names it first, so that a failure (or a hang) shows where.
#define STEP(name, expr)                 \
  do {                                   \
    say(&r, "step", "%s", name);         \
    st = (expr);                         \
    if (st) goto done;                   \
  } while (0)

tt_status tt_pjrt_check(const tt_pjrt_check_options *opts,
                        tt_pjrt_check_emit_fn emit, void *arg) {
  reporter r = {emit, arg};
  tt_pjrt *p = NULL;
  tt_status st = NULL;
  tt_pjrt_options po = {0};
  po.plugin_path = opts ? opts->plugin_path : NULL;
  po.cpu_device_count = opts ? opts->cpu_device_count : 0;
  po.cpu_async = -1;

  STEP("load", tt_pjrt_open(po.plugin_path, &p));
  say(&r, "plugin", "%s", p->plugin_path);
  report_api(&r, p);
  if (!opts || !opts->skip_struct_probe)
    STEP("struct sizes", report_structs(&r, p));
  STEP("initialise", tt_pjrt_plugin_init(p, p->plugin_path));
  STEP("attributes and extensions", report_plugin(&r, p));
  STEP("client", tt_pjrt_start(p, &po));
  STEP("devices", report_devices(&r, p));
  STEP("program", run_affine(&r, p));
  STEP("collective", run_all_reduce(&r, p));
  say(&r, "result", "ok");
done:
  tt_pjrt_destroy(p);
  return st;
}
