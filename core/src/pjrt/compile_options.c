// compile_options.c — the serialized xla.CompileOptionsProto we compile with.
//
// PJRT_Client_Compile takes its options as protobuf bytes. We need only a
// handful of scalar fields, so a tiny writer (varints and length-delimited
// fields) replaces a protobuf dependency. Field numbers are those of
// xla/pjrt/proto/compile_options.proto:
//
//   CompileOptionsProto
//     3  executable_build_options : ExecutableBuildOptionsProto
//          1  device_ordinal  int64 = -1   (no device chosen at compile time)
//          4  num_replicas    int64 = 1
//          5  num_partitions  int64 = 1
//     4  compile_portable_executable : bool = true
//
// "Portable" is what lets one compiled program run on any addressable device:
// the executable gets no device assignment and every launch names its device
// (PJRT_LoadedExecutable_Execute's execute_device). Left out: argument
// layouts (the plugin picks defaults), debug options (the plugin's defaults
// apply), SPMD/sharding settings (single device only).
//
// Replicated programs (collectives across the devices of a process) add
//     3  executable_build_options
//          4  num_replicas      = n
//          9  device_assignment : xla.DeviceAssignmentProto (xla_data.proto)
//               1  replica_count     int32 = n
//               2  computation_count int32 = 1
//               3  computation_devices (repeated ComputationDevice), one:
//                    1  replica_device_ids  repeated int64 (device ids)
// and are not portable (compile_portable_executable left false): the device
// assignment fixes where each replica runs.
#include <stdlib.h>
#include <string.h>

#include "pjrt/internal.h"

// --- a growable byte buffer --------------------------------------------------

typedef struct pb_buf {
  unsigned char *data;  // owned
  size_t len, cap;      // bytes
  bool oom;             // a write failed: the contents are incomplete
} pb_buf;

static void pb_put(pb_buf *b, const void *src, size_t n) {
  if (b->oom) return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->len + n) cap *= 2;
    unsigned char *data = realloc(b->data, cap);
    if (!data) {
      b->oom = true;
      return;
    }
    b->data = data;
    b->cap = cap;
  }
  memcpy(b->data + b->len, src, n);
  b->len += n;
}

// --- protobuf wire format ----------------------------------------------------

enum { WIRE_VARINT = 0, WIRE_LEN = 2 };

static void pb_varint(pb_buf *b, uint64_t v) {
  unsigned char tmp[10];
  size_t n = 0;
  do {
    tmp[n] = (unsigned char)(v & 0x7f);
    v >>= 7;
    if (v) tmp[n] |= 0x80;
    n++;
  } while (v);
  pb_put(b, tmp, n);
}

static void pb_tag(pb_buf *b, uint32_t field, uint32_t wire) {
  pb_varint(b, ((uint64_t)field << 3) | wire);
}

// int64 and bool fields: negative values are sent as their 64-bit two's
// complement (10 bytes), as protobuf does for int64.
static void pb_int(pb_buf *b, uint32_t field, int64_t v) {
  pb_tag(b, field, WIRE_VARINT);
  pb_varint(b, (uint64_t)v);
}

static void pb_message(pb_buf *b, uint32_t field, const pb_buf *inner) {
  pb_tag(b, field, WIRE_LEN);
  pb_varint(b, inner->len);
  if (inner->oom) b->oom = true;
  if (inner->len) pb_put(b, inner->data, inner->len);
}

// --- CompileOptionsProto -----------------------------------------------------

enum {
  BUILD_DEVICE_ORDINAL = 1,
  BUILD_NUM_REPLICAS = 4,
  BUILD_NUM_PARTITIONS = 5,
  OPTIONS_EXECUTABLE_BUILD_OPTIONS = 3,
  OPTIONS_COMPILE_PORTABLE_EXECUTABLE = 4,
};

// Hands the encoded message to the caller (or frees it when encoding ran out
// of memory).
static tt_status take_message(pb_buf *opts, void **out, size_t *out_len) {
  if (opts->oom) {
    free(opts->data);
    return tt_make_status(TT_RESOURCE_EXHAUSTED,
                          "out of host memory encoding compile options");
  }
  *out = opts->data;
  *out_len = opts->len;
  return NULL;
}

tt_status tt_pjrt_compile_options(void **out, size_t *out_len) {
  return tt_pjrt_compile_options_opt_level(-1, out, out_len);
}

// --- the backend's optimisation level ------------------------------------------
//
// CompileOptionsProto's `map<string, OptionOverrideProto> env_option_overrides
// = 7` sets single DebugOptions fields by name on top of the plugin's
// defaults (setting `debug_options` itself would replace all of them with
// zeros). A map entry is a message {1: key string, 2: value}; the value,
// OptionOverrideProto, is a oneof of which we use `int64 int_field = 3`.
enum {
  OPTIONS_ENV_OPTION_OVERRIDES = 7,
  MAP_KEY = 1,
  MAP_VALUE = 2,
  OVERRIDE_INT_FIELD = 3,
};

static void pb_string(pb_buf *b, uint32_t field, const char *s) {
  size_t n = strlen(s);
  pb_tag(b, field, WIRE_LEN);
  pb_varint(b, n);
  pb_put(b, s, n);
}

tt_status tt_pjrt_compile_options_opt_level(int level, void **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  pb_buf build = {0}, value = {0}, entry = {0}, opts = {0};
  pb_int(&build, BUILD_DEVICE_ORDINAL, -1);
  pb_int(&build, BUILD_NUM_REPLICAS, 1);
  pb_int(&build, BUILD_NUM_PARTITIONS, 1);
  pb_message(&opts, OPTIONS_EXECUTABLE_BUILD_OPTIONS, &build);
  pb_int(&opts, OPTIONS_COMPILE_PORTABLE_EXECUTABLE, 1);
  if (level >= 0) {
    pb_int(&value, OVERRIDE_INT_FIELD, level);
    pb_string(&entry, MAP_KEY, "xla_backend_optimization_level");
    pb_message(&entry, MAP_VALUE, &value);
    pb_message(&opts, OPTIONS_ENV_OPTION_OVERRIDES, &entry);
  }
  free(build.data);
  free(value.data);
  free(entry.data);
  return take_message(&opts, out, out_len);
}

// --- replicated programs ------------------------------------------------------

enum {
  BUILD_DEVICE_ASSIGNMENT = 9,
  ASSIGN_REPLICA_COUNT = 1,
  ASSIGN_COMPUTATION_COUNT = 2,
  ASSIGN_COMPUTATION_DEVICES = 3,
  COMPUTATION_REPLICA_DEVICE_IDS = 1,
};

tt_status tt_pjrt_compile_options_replicated(int n, const int64_t *device_ids,
                                             void **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  if (n < 1 || !device_ids)
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "compile options: %d replicas", n);
  pb_buf ids = {0}, comp = {0}, assign = {0}, build = {0}, opts = {0};
  // Packed repeated int64 (proto3's default encoding for repeated scalars).
  for (int i = 0; i < n; i++) pb_varint(&ids, (uint64_t)device_ids[i]);
  pb_message(&comp, COMPUTATION_REPLICA_DEVICE_IDS, &ids);
  pb_int(&assign, ASSIGN_REPLICA_COUNT, n);
  pb_int(&assign, ASSIGN_COMPUTATION_COUNT, 1);
  pb_message(&assign, ASSIGN_COMPUTATION_DEVICES, &comp);
  pb_int(&build, BUILD_DEVICE_ORDINAL, -1);
  pb_int(&build, BUILD_NUM_REPLICAS, n);
  pb_int(&build, BUILD_NUM_PARTITIONS, 1);
  pb_message(&build, BUILD_DEVICE_ASSIGNMENT, &assign);
  pb_message(&opts, OPTIONS_EXECUTABLE_BUILD_OPTIONS, &build);
  free(ids.data);
  free(comp.data);
  free(assign.data);
  free(build.data);
  return take_message(&opts, out, out_len);
}
