// test_abi.c — our PJRT declarations (pjrt/abi.h) against real plugins.
//
//  1. Layout: the offset of every field we set or read, and every PJRT_Api
//     slot we call, equals its offset in XLA's pjrt_c_api.h (numbers read
//     off the header at 0.114, the newest published one we could read; the
//     fields we use have not moved since 0.81, and the plugins below confirm
//     0.115 and 0.117).
//  2. The plugin under test (TORCHTPU_PLUGIN_PATH, else the discovered one —
//     the CPU plugin in CI, XLA's CUDA plugin on a GPU machine): the size it
//     accepts for each struct we pass is at most ours (asked of the plugin,
//     pjrt/check.c), and its version passes our rules.
//  3. libtpu, when installed (an optional extra, 467 MB: pip install
//     libtpu): the same sizes; the handshake (load, version 0.117,
//     initialise with TPU_SKIP_MDS_QUERY defaulted by our loader); off a TPU
//     host, client creation fails with our NOT_FOUND message naming the
//     lock file; and in a child process, an initialisation that waits on
//     the metadata server (TPU_SKIP_MDS_QUERY unset) ends at our timeout.
//     Skipped, saying why, when libtpu is not installed or under ASan.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "pjrt/internal.h"

// --- 1. layout -------------------------------------------------------------------

typedef struct field_offset {
  const char *what;
  size_t ours, header;  // bytes
} field_offset;

#define F(type, field, off) {#type "." #field, offsetof(type, field), off}

static const field_offset kOffsets[] = {
    F(PJRT_Api, pjrt_api_version, 16),
    F(PJRT_Api, PJRT_Error_Destroy, 40),
    F(PJRT_Api, PJRT_Plugin_Initialize, 64),
    F(PJRT_Api, PJRT_Plugin_Attributes, 72),
    F(PJRT_Api, PJRT_Event_OnReady, 112),
    F(PJRT_Api, PJRT_Client_Create, 120),
    F(PJRT_Api, PJRT_Client_ProcessIndex, 144),
    F(PJRT_Api, PJRT_Client_AddressableDevices, 168),
    F(PJRT_Api, PJRT_Client_Compile, 200),
    F(PJRT_Api, PJRT_Client_BufferFromHostBuffer, 216),
    F(PJRT_Api, PJRT_DeviceDescription_Id, 224),
    F(PJRT_Api, PJRT_DeviceDescription_DebugString, 256),
    F(PJRT_Api, PJRT_Device_GetDescription, 272),
    F(PJRT_Api, PJRT_Device_AddressableMemories, 296),
    F(PJRT_Api, PJRT_Device_DefaultMemory, 304),
    F(PJRT_Api, PJRT_Memory_Id, 320),
    F(PJRT_Api, PJRT_Memory_Kind, 328),
    F(PJRT_Api, PJRT_Executable_Destroy, 360),
    F(PJRT_Api, PJRT_Executable_Serialize, 432),
    F(PJRT_Api, PJRT_LoadedExecutable_Execute, 480),
    F(PJRT_Api, PJRT_Executable_DeserializeAndLoad, 488),
    F(PJRT_Api, PJRT_Buffer_Destroy, 504),
    F(PJRT_Api, PJRT_Buffer_ToHostBuffer, 600),
    F(PJRT_Api, PJRT_Buffer_ReadyEvent, 616),
    F(PJRT_Api, PJRT_Buffer_UnsafePointer, 624),
    F(PJRT_NamedValue, type, 32),
    F(PJRT_NamedValue, int64_value, 40),
    F(PJRT_NamedValue, value_size, 48),
    F(PJRT_Client_Create_Args, create_options, 16),
    F(PJRT_Client_Create_Args, client, 64),
    F(PJRT_Client_Create_Args, kv_try_get_user_arg, 80),
    F(PJRT_Client_Compile_Args, compile_options, 32),
    F(PJRT_Client_Compile_Args, executable, 48),
    F(PJRT_Program, format, 32),
    F(PJRT_Client_BufferFromHostBuffer_Args, type, 32),
    F(PJRT_Client_BufferFromHostBuffer_Args, host_buffer_semantics, 72),
    F(PJRT_Client_BufferFromHostBuffer_Args, device, 80),
    F(PJRT_Client_BufferFromHostBuffer_Args, device_layout, 96),
    F(PJRT_Client_BufferFromHostBuffer_Args, buffer, 112),
    F(PJRT_Buffer_MemoryLayout, type, 72),
    F(PJRT_ExecuteOptions, launch_id, 48),
    F(PJRT_ExecuteOptions, context, 72),
    F(PJRT_ExecuteOptions, incarnation_ids, 104),
    F(PJRT_ExecuteOptions, multi_slice_config, 112),
    F(PJRT_ExecuteOptions, use_major_to_minor_data_layout_for_callbacks, 120),
    F(PJRT_ExecuteOptions, hlo_output_callbacks, 128),
    F(PJRT_ExecuteOptions, num_hlo_output_callbacks, 136),
    F(PJRT_LoadedExecutable_Execute_Args, argument_lists, 32),
    F(PJRT_LoadedExecutable_Execute_Args, output_lists, 56),
    F(PJRT_LoadedExecutable_Execute_Args, execute_device, 72),
    F(PJRT_Executable_Serialize_Args, serialized_executable_deleter, 48),
    F(PJRT_Executable_DeserializeAndLoad_Args, loaded_executable, 40),
    F(PJRT_Executable_DeserializeAndLoad_Args,
      overridden_serialized_compile_options_size, 56),
    F(PJRT_Executable_DeserializeAndLoad_Args, load_options, 64),
    F(PJRT_Buffer_ToHostBuffer_Args, dst_size, 40),
    F(PJRT_Buffer_ToHostBuffer_Args, event, 48),
    F(PJRT_Plugin_Attributes_Args, num_attributes, 24),
    F(PJRT_Device_AddressableMemories_Args, num_memories, 32),
    F(PJRT_Memory_Kind_Args, kind_size, 32),
    F(PJRT_DeviceDescription_DebugString_Args, debug_string_size, 32),
};

static void test_layout(void) {
  for (size_t i = 0; i < sizeof kOffsets / sizeof *kOffsets; i++)
    CHECK(kOffsets[i].ours == kOffsets[i].header, "%s at %zu, header %zu",
          kOffsets[i].what, kOffsets[i].ours, kOffsets[i].header);
  // Whole, as in the header: plugins still accept 112 and 64 (up to
  // incarnation_ids, overridden_serialized_compile_options_size), for a
  // while only (rule 2 in abi.h).
  CHECK(PJRT_ExecuteOptions_STRUCT_SIZE == 144);
  CHECK(PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE == 72);
  CHECK(TT_ABI_API_MIN_SIZE == 624);
}

// --- 2. sizes the plugin accepts ----------------------------------------------------

// Every struct we pass must be at least what the plugin checks for.
static void check_sizes(const char *label, const PJRT_Api *api) {
  int n = tt_pjrt_probe_count();
  tt_pjrt_struct_probe *pr = calloc((size_t)n, sizeof *pr);
  CHECK_OK(tt_pjrt_probe_struct_sizes(api, pr));
  int told = 0;
  for (int i = 0; i < n; i++) {
    if (pr[i].plugin_min < 0) continue;
    told++;
    CHECK((size_t)pr[i].plugin_min <= pr[i].ours,
          "%s: %s is %zu bytes, the plugin needs %ld", label, pr[i].name,
          pr[i].ours, pr[i].plugin_min);
  }
  // XLA-built plugins name a minimum for every struct we pass.
  CHECK(told == n, "%s: the plugin named a size for %d of %d structs", label,
        told, n);
  printf("test_abi: %s: %d struct sizes accepted (C API %d.%d)\n", label,
         told, api->pjrt_api_version.major_version,
         api->pjrt_api_version.minor_version);
  free(pr);
}

static void test_plugin_under_test(void) {
  tt_pjrt *p = NULL;
  REQUIRE_OK(tt_pjrt_open(getenv("TORCHTPU_PLUGIN_PATH"), &p));
  check_sizes(p->plugin_path, p->api);
  tt_pjrt_destroy(p);
}

// --- 3. libtpu ---------------------------------------------------------------------

// libtpu/libtpu.so in the site-packages the core searches (TPU_LIBRARY_PATH
// first), or NULL.
static bool find_libtpu(char *out, size_t cap) {
  const char *env = getenv("TPU_LIBRARY_PATH");
  if (env && access(env, R_OK) == 0) {
    snprintf(out, cap, "%s", env);
    return true;
  }
  const char *sites = getenv("TORCHTPU_SITE_PACKAGES");
  char *copy = strdup(sites ? sites : "");
  bool found = false;
  for (char *save = NULL, *d = strtok_r(copy, ":", &save); d && !found;
       d = strtok_r(NULL, ":", &save)) {
    snprintf(out, cap, "%s/libtpu/libtpu.so", d);
    found = access(out, R_OK) == 0;
  }
  free(copy);
  if (!found) {  // a checkout's venv, as the core's discovery finds it
    glob_t g;
    if (glob(".venv/lib/python3*/site-packages/libtpu/libtpu.so", 0, NULL,
             &g) == 0 && g.gl_pathc > 0) {
      snprintf(out, cap, "%s", g.gl_pathv[0]);
      found = true;
    }
    globfree(&g);
  }
  return found;
}

static bool tpu_host(void) {
  struct stat st;
  return stat("/dev/accel0", &st) == 0 || stat("/dev/vfio", &st) == 0;
}

// In a child: the metadata-server wait (TPU_SKIP_MDS_QUERY unset) must end
// at our timeout with our message, not hang. Exit code 0 when it did.
static int timeout_child(const char *path) {
  tt_pjrt *p = NULL;
  tt_status st = tt_pjrt_open(path, &p);  // defaults TPU_SKIP_MDS_QUERY...
  if (st) return 2;
  unsetenv("TPU_SKIP_MDS_QUERY");  // ...which this check takes away again
  setenv("TORCHTPU_PLUGIN_INIT_TIMEOUT", "2", 1);
  st = tt_pjrt_plugin_init(p, path);
  int rc = st && tt_status_code(st) == TT_FAILED_PRECONDITION &&
                   strstr(tt_status_message(st), "did not return within 2 s") &&
                   strstr(tt_status_message(st), "TPU_SKIP_MDS_QUERY")
               ? 0
               : 3;
  if (st) fprintf(stderr, "test_abi: timeout child: %s\n", tt_status_message(st));
  tt_status_free(st);
  // A second load in this process is refused: the first may still run.
  tt_pjrt *q = NULL;
  st = tt_pjrt_open(path, &q);
  if (!st || !strstr(tt_status_message(st), "timed out")) rc = 4;
  tt_status_free(st);
  tt_pjrt_destroy(q);
  fflush(NULL);
  _exit(rc);  // a thread is still inside libtpu: skip its exit handlers
}

static void test_libtpu_timeout(const char *path) {
  if (tpu_host()) return;  // there the metadata server answers
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) timeout_child(path);
  int wst = 0;
  waitpid(pid, &wst, 0);
  CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
        "libtpu init timeout child: status %d", wst);
}

static void test_libtpu(void) {
#ifdef __SANITIZE_ADDRESS__
  printf("test_abi: libtpu: skipped (sanitized build; the plain run checks it)\n");
  return;
#endif
  char path[PATH_MAX];
  if (!find_libtpu(path, sizeof path)) {
    printf("test_abi: libtpu: skipped (not installed: pip install libtpu, "
           "or set TPU_LIBRARY_PATH)\n");
    return;
  }
  test_libtpu_timeout(path);  // first: it needs a process that never loaded it
  tt_pjrt *p = NULL;
  REQUIRE_OK(tt_pjrt_open(path, &p));
  CHECK(p->api_major == 0 && p->api_minor >= TT_ABI_MIN_MINOR);
  printf("test_abi: libtpu %s: C API %d.%d\n", path, p->api_major,
         p->api_minor);
  check_sizes("libtpu", p->api);
  CHECK_OK(tt_pjrt_plugin_init(p, path));
  tt_pjrt_options o = {.cpu_async = -1};
  tt_status st = tt_pjrt_start(p, &o);
  if (tpu_host()) {
    CHECK_OK(st);
  } else {
    CHECK(st && tt_status_code(st) == TT_NOT_FOUND &&
              strstr(tt_status_message(st), "found no TPU on this host") &&
              strstr(tt_status_message(st), "libtpu_lockfile"),
          "%s", st ? tt_status_message(st) : "created a client without a TPU");
    tt_status_free(st);
  }
  tt_pjrt_destroy(p);
}

int main(void) {
  test_layout();
  test_plugin_under_test();
  test_libtpu();
  return check_exit_code();
}
