// client.c — one loaded plugin plus its PJRT client: create, destroy, info.
//
// tt_pjrt_create finds or takes the plugin path, loads it (plugin.c), creates
// a client and caches what never changes afterwards: platform name and
// version, the addressable devices, device 0's kind, and the serialized
// compile options. After creation a tt_pjrt is read-only, so our side of it
// is safe to share between threads (PJRT clients are thread-safe).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // strndup, when the build doesn't define it
#endif
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "pjrt/internal.h"

// --- helpers -----------------------------------------------------------------

static tt_status dup_n(const char *s, size_t n, char **out) {
  *out = strndup(s ? s : "", s ? n : 0);
  if (!*out)
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of host memory");
  return NULL;
}

// The "cpu_device_count" and "asynchronous" options are only understood by
// CPU plugins; others reject unknown options. The platform is unknown until
// the client exists, so the plugin's file name decides.
static bool looks_like_cpu_plugin(const char *path) {
  const char *base = strrchr(path, '/');
  return strstr(base ? base + 1 : path, "cpu") != NULL;
}

// --- client ------------------------------------------------------------------

static PJRT_NamedValue named(const char *name, PJRT_NamedValue_Type type) {
  PJRT_NamedValue v = {0};
  v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  v.name = name;
  v.name_size = strlen(name);
  v.type = type;
  v.value_size = 1;
  return v;
}

static tt_status create_client(tt_pjrt *p, const tt_pjrt_options *opts) {
  int cpu_device_count = opts ? opts->cpu_device_count : 0;
  int cpu_async = opts ? opts->cpu_async : -1;
  PJRT_NamedValue opt[2];
  size_t n = 0;
  bool cpu = looks_like_cpu_plugin(p->plugin_path);
  if (cpu && cpu_device_count > 0) {
    opt[n] = named("cpu_device_count", PJRT_NamedValue_kInt64);
    opt[n++].int64_value = cpu_device_count;
  }
  if (cpu && cpu_async >= 0) {
    opt[n] = named("asynchronous", PJRT_NamedValue_kBool);
    opt[n++].bool_value = cpu_async > 0;
  }
  // XLA's CPU client is asynchronous unless told otherwise; so is every
  // other plugin.
  p->asynchronous = !(cpu && cpu_async == 0);

  PJRT_Client_Create_Args a = {0};
  a.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  a.create_options = n ? opt : NULL;
  a.num_options = n;
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Client_Create, &a));
  p->client = a.client;
  return NULL;
}

static tt_status read_platform(tt_pjrt *p) {
  PJRT_Client_PlatformName_Args n = {0};
  n.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  n.client = p->client;
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Client_PlatformName, &n));
  TT_RETURN_IF_ERROR(dup_n(n.platform_name, n.platform_name_size,
                           &p->platform));

  PJRT_Client_PlatformVersion_Args v = {0};
  v.struct_size = PJRT_Client_PlatformVersion_Args_STRUCT_SIZE;
  v.client = p->client;
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Client_PlatformVersion, &v));
  return dup_n(v.platform_version, v.platform_version_size,
               &p->platform_version);
}

static tt_status read_devices(tt_pjrt *p) {
  PJRT_Client_AddressableDevices_Args d = {0};
  d.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  d.client = p->client;
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Client_AddressableDevices, &d));
  if (d.num_addressable_devices == 0 || d.num_addressable_devices > INT_MAX)
    return tt_make_status(TT_FAILED_PRECONDITION,
                          "platform %s reports %zu addressable devices",
                          p->platform, d.num_addressable_devices);
  p->devices = d.addressable_devices;
  p->device_count = (int)d.num_addressable_devices;

  PJRT_Device_GetDescription_Args g = {0};
  g.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  g.device = p->devices[0];
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Device_GetDescription, &g));
  PJRT_DeviceDescription_Kind_Args k = {0};
  k.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
  k.device_description = g.device_description;
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_DeviceDescription_Kind, &k));
  return dup_n(k.device_kind, k.device_kind_size, &p->device_kind);
}

// Errors of loading name the path already; later ones get it prepended.
tt_status tt_pjrt_open(const char *path, tt_pjrt **out) {
  *out = NULL;
  tt_pjrt *p = calloc(1, sizeof *p);
  if (!p) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of host memory");
  char found[PATH_MAX];
  tt_status st = NULL;
  if (!path) {
    st = tt_pjrt_discover(found, sizeof found);
    path = found;
  }
  if (!st) st = dup_n(path, strlen(path), &p->plugin_path);
  if (!st) st = tt_pjrt_plugin_open(p, p->plugin_path);
  if (st) {
    tt_pjrt_destroy(p);
    return st;
  }
  *out = p;
  return NULL;
}

tt_status tt_pjrt_start(tt_pjrt *p, const tt_pjrt_options *opts) {
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_init(p, p->plugin_path));
  TT_RETURN_IF_ERROR(
      tt_pjrt_compile_options(&p->compile_options, &p->compile_options_len));
  tt_status st = create_client(p, opts);
  st = tt_pjrt_explain_failure(p->plugin_path, st);
  if (!st) st = read_platform(p);
  if (!st) st = read_devices(p);
  if (!st)
    p->host_addressable = strcmp(p->platform, "cpu") == 0 &&
                          tt_pjrt_has_slot(p->api, offsetof(PJRT_Api, PJRT_Buffer_UnsafePointer));
  return tt_status_annotate(st, "PJRT plugin %s", p->plugin_path);
}

tt_status tt_pjrt_create(const tt_pjrt_options *opts, tt_pjrt **out) {
  *out = NULL;
  tt_pjrt *p = NULL;
  TT_RETURN_IF_ERROR(tt_pjrt_open(opts ? opts->plugin_path : NULL, &p));
  tt_status st = tt_pjrt_start(p, opts);
  if (st) {
    tt_pjrt_destroy(p);
    return st;
  }
  *out = p;
  return NULL;
}

void tt_pjrt_destroy(tt_pjrt *p) {
  if (!p) return;
  if (p->client) {
    PJRT_Client_Destroy_Args a = {0};
    a.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
    a.client = p->client;
    tt_status_free(TT_PJRT_CALL(p->api, PJRT_Client_Destroy, &a));
  }
  // p->dl stays open on purpose: see plugin.c.
  free(p->plugin_path);
  free(p->platform);
  free(p->platform_version);
  free(p->device_kind);
  free(p->compile_options);
  free(p);
}

void tt_pjrt_info_get(tt_pjrt *p, tt_pjrt_info *out) {
  out->plugin_path = p->plugin_path;
  out->platform = p->platform;
  out->platform_version = p->platform_version;
  out->api_major = p->api_major;
  out->api_minor = p->api_minor;
  out->device_count = p->device_count;
  out->device_kind = p->device_kind;
  out->asynchronous = p->asynchronous;
}

// --- device ids -------------------------------------------------------------------

tt_status tt_pjrt_device_id(tt_pjrt *p, int device, int64_t *out_id) {
  *out_id = -1;
  if (device < 0 || device >= p->device_count)
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "device %d out of range: %s has %d devices", device,
                          p->platform, p->device_count);
  PJRT_Device_GetDescription_Args g = {0};
  g.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  g.device = p->devices[device];
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Device_GetDescription, &g));
  PJRT_DeviceDescription_Id_Args a = {0};
  a.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
  a.device_description = g.device_description;
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_DeviceDescription_Id, &a));
  *out_id = a.id;
  return NULL;
}
