// abi.h — our declarations of the part of the PJRT C API that torchtpu uses.
//
// Written against PJRT C API 0.117 (libtpu 0.0.52) and checked there and on
// XLA's CPU plugin at 0.115 (lammps-jax-pjrt-cpu 0.11.2): core/tests/
// test_abi.c pins every offset below and asks the plugin which size it
// accepts for each call we make. Only the subset we call is declared. The
// PJRT_Api table keeps the exact slot order up to the last slot we call
// (PJRT_Buffer_UnsafePointer, optional: the table must reach
// PJRT_Buffer_ReadyEvent); slots we never call are `void *` placeholders.
//
// Minor-version rules (major 0), what our calls rely on:
//  1. A plugin with major 0 and minor >= TT_ABI_MIN_MINOR (81) has every slot
//     and field declared here at the offsets declared here: within a major
//     version XLA's header only appends, to argument structs and to the
//     PJRT_Api table (the last rearrangement was 0.57; the newest field whose
//     value matters to us, PJRT_ExecuteOptions.incarnation_ids, came in
//     0.78; later fields we declare hold the value meaning "absent").
//  2. Our `struct_size` says how many fields we know. A NEWER plugin reads
//     only those, but refuses a call whose struct_size is below its minimum
//     for that struct ("Unexpected X size: expected N, got M" — XLA checks
//     this before anything else). XLA keeps N at the old size for a while
//     after appending a field (PJRT_ExecuteOptions: 112, up to
//     incarnation_ids, at 0.117; its full size is 144, which we pass), then
//     may raise it: that is when a field must be added here. tt_pjrt_check
//     and test_abi read N from the plugin for every struct we pass.
//  3. An OLDER plugin (81 <= minor < ours) reads only its own prefix of our
//     structs, so a field appended after 0.81 is set only where the plugin's
//     minor says it knows it, and a slot past 0.81 is called only where the
//     table reaches it (TT_PJRT_CALL checks api->struct_size).
//  4. Outputs: the plugin writes only fields inside the struct_size we pass.
//  5. A plugin with another major version is refused (check_version).
// Raising TT_ABI_MIN_MINOR or adding a field: change the struct, its
// TT_ABI_STRUCT last field, and test_abi.c's offset table together.
//
// Rules for users (plugin.c, client.c, buffer.c, executable.c, event.c,
// check.c):
//  - zero-initialise every args struct and set `.struct_size = X_STRUCT_SIZE`;
//  - call a slot only through TT_PJRT_CALL (internal.h), which checks that the
//    plugin's table is long enough to hold it.
//
// Nothing outside core/src/pjrt/ includes this file.
#ifndef TT_PJRT_ABI_H
#define TT_PJRT_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The size a struct had when `last` was its last field: what `struct_size`
// must say, so that a plugin never reads fields past the ones we declared.
#define TT_ABI_SIZE(type, last) \
  (offsetof(type, last) + sizeof(((type *)0)->last))
#define TT_ABI_STRUCT(type, last) \
  enum { type##_STRUCT_SIZE = TT_ABI_SIZE(type, last) }

#define TT_ABI_MIN_MAJOR 0
#define TT_ABI_MIN_MINOR 81
// The version these declarations were written and checked against.
#define TT_ABI_WRITTEN_MINOR 117

// --- opaque plugin objects ---------------------------------------------------

typedef struct PJRT_Error PJRT_Error;
typedef struct PJRT_Event PJRT_Event;
typedef struct PJRT_Client PJRT_Client;
typedef struct PJRT_Device PJRT_Device;
typedef struct PJRT_Memory PJRT_Memory;
typedef struct PJRT_DeviceDescription PJRT_DeviceDescription;
typedef struct PJRT_Executable PJRT_Executable;
typedef struct PJRT_LoadedExecutable PJRT_LoadedExecutable;
typedef struct PJRT_Buffer PJRT_Buffer;
typedef struct PJRT_SerializedExecutable PJRT_SerializedExecutable;
typedef struct PJRT_ExecuteContext PJRT_ExecuteContext;

// Extension chains: we never pass any in arguments (the field stays NULL);
// the plugin's PJRT_Api has one (its optional extensions), which
// tt_pjrt_check lists. Every extension struct starts with this head.
typedef struct PJRT_Extension_Base {
  size_t struct_size;
  int type;  // PJRT_Extension_Type (an enum, int-sized)
  const struct PJRT_Extension_Base *next;
} PJRT_Extension_Base;

// --- version and errors ------------------------------------------------------

typedef struct PJRT_Api_Version {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  int major_version;  // out
  int minor_version;  // out
} PJRT_Api_Version;

typedef enum {
  PJRT_Error_Code_OK = 0,
  PJRT_Error_Code_CANCELLED = 1,
  PJRT_Error_Code_UNKNOWN = 2,
  PJRT_Error_Code_INVALID_ARGUMENT = 3,
  PJRT_Error_Code_DEADLINE_EXCEEDED = 4,
  PJRT_Error_Code_NOT_FOUND = 5,
  PJRT_Error_Code_ALREADY_EXISTS = 6,
  PJRT_Error_Code_PERMISSION_DENIED = 7,
  PJRT_Error_Code_RESOURCE_EXHAUSTED = 8,
  PJRT_Error_Code_FAILED_PRECONDITION = 9,
  PJRT_Error_Code_ABORTED = 10,
  PJRT_Error_Code_OUT_OF_RANGE = 11,
  PJRT_Error_Code_UNIMPLEMENTED = 12,
  PJRT_Error_Code_INTERNAL = 13,
  PJRT_Error_Code_UNAVAILABLE = 14,
  PJRT_Error_Code_DATA_LOSS = 15,
  PJRT_Error_Code_UNAUTHENTICATED = 16,
} PJRT_Error_Code;

typedef struct PJRT_Error_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Error *error;
} PJRT_Error_Destroy_Args;
TT_ABI_STRUCT(PJRT_Error_Destroy_Args, error);

typedef struct PJRT_Error_Message_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const PJRT_Error *error;
  const char *message;  // out; lives as long as `error`, not NUL-terminated
  size_t message_size;  // out, bytes
} PJRT_Error_Message_Args;
TT_ABI_STRUCT(PJRT_Error_Message_Args, message_size);

typedef struct PJRT_Error_GetCode_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const PJRT_Error *error;
  PJRT_Error_Code code;  // out
} PJRT_Error_GetCode_Args;
TT_ABI_STRUCT(PJRT_Error_GetCode_Args, code);

// --- named values (client create options) ------------------------------------

typedef enum {
  PJRT_NamedValue_kString = 0,
  PJRT_NamedValue_kInt64,
  PJRT_NamedValue_kInt64List,
  PJRT_NamedValue_kFloat,
  PJRT_NamedValue_kBool,
} PJRT_NamedValue_Type;

typedef struct PJRT_NamedValue {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const char *name;
  size_t name_size;  // bytes, without NUL
  PJRT_NamedValue_Type type;
  union {
    const char *string_value;
    int64_t int64_value;
    const int64_t *int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size;  // elements for lists and strings; 1 for scalars
} PJRT_NamedValue;
TT_ABI_STRUCT(PJRT_NamedValue, value_size);

// --- plugin ------------------------------------------------------------------

typedef struct PJRT_Plugin_Initialize_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
} PJRT_Plugin_Initialize_Args;
TT_ABI_STRUCT(PJRT_Plugin_Initialize_Args, extension_start);

typedef struct PJRT_Plugin_Attributes_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const PJRT_NamedValue *attributes;  // out, live as long as the process
  size_t num_attributes;              // out
} PJRT_Plugin_Attributes_Args;
TT_ABI_STRUCT(PJRT_Plugin_Attributes_Args, num_attributes);

// --- events ------------------------------------------------------------------

// Destroy, IsReady, Error and Await all take the same fields up to `event`.
typedef struct PJRT_Event_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Event *event;
} PJRT_Event_Destroy_Args;
TT_ABI_STRUCT(PJRT_Event_Destroy_Args, event);

typedef struct PJRT_Event_IsReady_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Event *event;
  bool is_ready;  // out
} PJRT_Event_IsReady_Args;
TT_ABI_STRUCT(PJRT_Event_IsReady_Args, is_ready);

typedef struct PJRT_Event_Error_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Event *event;
} PJRT_Event_Error_Args;
TT_ABI_STRUCT(PJRT_Event_Error_Args, event);

typedef struct PJRT_Event_Await_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Event *event;
} PJRT_Event_Await_Args;
TT_ABI_STRUCT(PJRT_Event_Await_Args, event);

// Called once the event is ready, on a plugin thread or (already ready) at
// once in the caller's; it owns `error` (NULL when the work succeeded).
typedef void (*PJRT_Event_OnReadyCallback)(PJRT_Error *error, void *user_arg);

typedef struct PJRT_Event_OnReady_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Event *event;
  PJRT_Event_OnReadyCallback callback;
  void *user_arg;
} PJRT_Event_OnReady_Args;
TT_ABI_STRUCT(PJRT_Event_OnReady_Args, user_arg);

// --- client ------------------------------------------------------------------

typedef struct PJRT_Client_Create_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const PJRT_NamedValue *create_options;
  size_t num_options;
  // Key-value store callbacks for multi-process setups; we leave them NULL.
  void *kv_get_callback;
  void *kv_get_user_arg;
  void *kv_put_callback;
  void *kv_put_user_arg;
  PJRT_Client *client;  // out
  void *kv_try_get_callback;
  void *kv_try_get_user_arg;
} PJRT_Client_Create_Args;
TT_ABI_STRUCT(PJRT_Client_Create_Args, kv_try_get_user_arg);

typedef struct PJRT_Client_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
} PJRT_Client_Destroy_Args;
TT_ABI_STRUCT(PJRT_Client_Destroy_Args, client);

// PlatformName and PlatformVersion share this shape; strings live as long as
// the client and are not NUL-terminated.
typedef struct PJRT_Client_PlatformName_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  const char *platform_name;  // out
  size_t platform_name_size;  // out
} PJRT_Client_PlatformName_Args;
TT_ABI_STRUCT(PJRT_Client_PlatformName_Args, platform_name_size);

typedef struct PJRT_Client_ProcessIndex_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  int process_index;  // out
} PJRT_Client_ProcessIndex_Args;
TT_ABI_STRUCT(PJRT_Client_ProcessIndex_Args, process_index);

typedef struct PJRT_Client_PlatformVersion_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  const char *platform_version;  // out
  size_t platform_version_size;  // out
} PJRT_Client_PlatformVersion_Args;
TT_ABI_STRUCT(PJRT_Client_PlatformVersion_Args, platform_version_size);

typedef struct PJRT_Client_AddressableDevices_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  PJRT_Device *const *addressable_devices;  // out, owned by the client
  size_t num_addressable_devices;           // out
} PJRT_Client_AddressableDevices_Args;
TT_ABI_STRUCT(PJRT_Client_AddressableDevices_Args, num_addressable_devices);

typedef struct PJRT_Program {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  char *code;  // not modified by Compile, despite the missing const
  size_t code_size;
  const char *format;  // "mlir" or "hlo"
  size_t format_size;
} PJRT_Program;
TT_ABI_STRUCT(PJRT_Program, format_size);

typedef struct PJRT_Client_Compile_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  const PJRT_Program *program;
  const char *compile_options;  // serialized xla.CompileOptionsProto
  size_t compile_options_size;
  PJRT_LoadedExecutable *executable;  // out
} PJRT_Client_Compile_Args;
TT_ABI_STRUCT(PJRT_Client_Compile_Args, executable);

// --- buffers: element types and layouts --------------------------------------

typedef enum {
  PJRT_Buffer_Type_INVALID,
  PJRT_Buffer_Type_PRED,
  PJRT_Buffer_Type_S8,
  PJRT_Buffer_Type_S16,
  PJRT_Buffer_Type_S32,
  PJRT_Buffer_Type_S64,
  PJRT_Buffer_Type_U8,
  PJRT_Buffer_Type_U16,
  PJRT_Buffer_Type_U32,
  PJRT_Buffer_Type_U64,
  PJRT_Buffer_Type_F16,
  PJRT_Buffer_Type_F32,
  PJRT_Buffer_Type_F64,
  PJRT_Buffer_Type_BF16,
  PJRT_Buffer_Type_C64,   // (f32 re, f32 im)
  PJRT_Buffer_Type_C128,  // (f64 re, f64 im)
  // Later values (fp8, sub-byte ints, ...) are not used by torchtpu.
} PJRT_Buffer_Type;

typedef enum {
  // The plugin copies during the call; the host memory is free afterwards.
  PJRT_HostBufferSemantics_kImmutableOnlyDuringCall = 0,
} PJRT_HostBufferSemantics;

typedef enum {
  PJRT_Buffer_MemoryLayout_Type_Tiled = 0,
  PJRT_Buffer_MemoryLayout_Type_Strides,
} PJRT_Buffer_MemoryLayout_Type;

typedef struct PJRT_Buffer_MemoryLayout_Tiled {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const int64_t *minor_to_major;
  size_t minor_to_major_size;
  const int64_t *tile_dims;
  const size_t *tile_dim_sizes;
  size_t num_tiles;
} PJRT_Buffer_MemoryLayout_Tiled;
TT_ABI_STRUCT(PJRT_Buffer_MemoryLayout_Tiled, num_tiles);

// Declared only so the union below has its real size.
typedef struct PJRT_Buffer_MemoryLayout_Strides {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const int64_t *byte_strides;
  size_t num_byte_strides;
} PJRT_Buffer_MemoryLayout_Strides;

typedef struct PJRT_Buffer_MemoryLayout {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  union {
    PJRT_Buffer_MemoryLayout_Tiled tiled;
    PJRT_Buffer_MemoryLayout_Strides strides;
  };
  PJRT_Buffer_MemoryLayout_Type type;
} PJRT_Buffer_MemoryLayout;
TT_ABI_STRUCT(PJRT_Buffer_MemoryLayout, type);

typedef struct PJRT_Client_BufferFromHostBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  const void *data;
  PJRT_Buffer_Type type;
  const int64_t *dims;
  size_t num_dims;
  const int64_t *byte_strides;  // NULL: dense, row-major
  size_t num_byte_strides;
  PJRT_HostBufferSemantics host_buffer_semantics;
  PJRT_Device *device;
  PJRT_Memory *memory;                      // NULL: the device's default
  PJRT_Buffer_MemoryLayout *device_layout;  // NULL: the plugin chooses
  PJRT_Event *done_with_host_buffer;        // out, caller destroys
  PJRT_Buffer *buffer;                      // out, caller destroys
} PJRT_Client_BufferFromHostBuffer_Args;
TT_ABI_STRUCT(PJRT_Client_BufferFromHostBuffer_Args, buffer);

// --- devices -----------------------------------------------------------------

typedef struct PJRT_Device_GetDescription_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Device *device;
  PJRT_DeviceDescription *device_description;  // out, owned by the device
} PJRT_Device_GetDescription_Args;
TT_ABI_STRUCT(PJRT_Device_GetDescription_Args, device_description);

typedef struct PJRT_DeviceDescription_Kind_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_DeviceDescription *device_description;
  const char *device_kind;  // out, not NUL-terminated
  size_t device_kind_size;  // out
} PJRT_DeviceDescription_Kind_Args;
TT_ABI_STRUCT(PJRT_DeviceDescription_Kind_Args, device_kind_size);

typedef struct PJRT_DeviceDescription_Id_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_DeviceDescription *device_description;
  int id;  // out: the global device id
} PJRT_DeviceDescription_Id_Args;
TT_ABI_STRUCT(PJRT_DeviceDescription_Id_Args, id);

typedef struct PJRT_DeviceDescription_DebugString_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_DeviceDescription *device_description;
  const char *debug_string;  // out, not NUL-terminated
  size_t debug_string_size;  // out
} PJRT_DeviceDescription_DebugString_Args;
TT_ABI_STRUCT(PJRT_DeviceDescription_DebugString_Args, debug_string_size);

typedef struct PJRT_Device_AddressableMemories_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Device *device;
  PJRT_Memory *const *memories;  // out, live as long as the device
  size_t num_memories;           // out
} PJRT_Device_AddressableMemories_Args;
TT_ABI_STRUCT(PJRT_Device_AddressableMemories_Args, num_memories);

typedef struct PJRT_Device_DefaultMemory_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Device *device;
  PJRT_Memory *memory;  // out, lives as long as the device
} PJRT_Device_DefaultMemory_Args;
TT_ABI_STRUCT(PJRT_Device_DefaultMemory_Args, memory);

typedef struct PJRT_Memory_Id_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Memory *memory;
  int id;  // out
} PJRT_Memory_Id_Args;
TT_ABI_STRUCT(PJRT_Memory_Id_Args, id);

typedef struct PJRT_Memory_Kind_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Memory *memory;
  const char *kind;  // out, not NUL-terminated ("device", "pinned_host", ...)
  size_t kind_size;  // out
} PJRT_Memory_Kind_Args;
TT_ABI_STRUCT(PJRT_Memory_Kind_Args, kind_size);

// --- executables -------------------------------------------------------------

typedef struct PJRT_Executable_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Executable *executable;
} PJRT_Executable_Destroy_Args;
TT_ABI_STRUCT(PJRT_Executable_Destroy_Args, executable);

typedef struct PJRT_LoadedExecutable_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_LoadedExecutable *executable;
} PJRT_LoadedExecutable_Destroy_Args;
TT_ABI_STRUCT(PJRT_LoadedExecutable_Destroy_Args, executable);

// The returned PJRT_Executable is a new object the caller destroys.
typedef struct PJRT_LoadedExecutable_GetExecutable_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_LoadedExecutable *loaded_executable;
  PJRT_Executable *executable;  // out
} PJRT_LoadedExecutable_GetExecutable_Args;
TT_ABI_STRUCT(PJRT_LoadedExecutable_GetExecutable_Args, executable);

typedef struct PJRT_Executable_NumOutputs_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Executable *executable;
  size_t num_outputs;  // out
} PJRT_Executable_NumOutputs_Args;
TT_ABI_STRUCT(PJRT_Executable_NumOutputs_Args, num_outputs);

// The bytes live in `serialized_executable`, freed by calling the deleter once.
typedef struct PJRT_Executable_Serialize_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const PJRT_Executable *executable;
  const char *serialized_bytes;                      // out
  size_t serialized_bytes_size;                      // out
  PJRT_SerializedExecutable *serialized_executable;  // out
  void (*serialized_executable_deleter)(PJRT_SerializedExecutable *);  // out
} PJRT_Executable_Serialize_Args;
TT_ABI_STRUCT(PJRT_Executable_Serialize_Args, serialized_executable_deleter);

typedef struct PJRT_Executable_DeserializeAndLoad_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Client *client;
  const char *serialized_executable;
  size_t serialized_executable_size;
  PJRT_LoadedExecutable *loaded_executable;  // out
  const char *overridden_serialized_compile_options;  // NULL: keep stored ones
  size_t overridden_serialized_compile_options_size;
  void *load_options;  // PJRT_LoadOptions *; NULL: the defaults (0.111)
} PJRT_Executable_DeserializeAndLoad_Args;
TT_ABI_STRUCT(PJRT_Executable_DeserializeAndLoad_Args, load_options);

typedef struct PJRT_ExecuteOptions {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  void **send_callbacks;  // host send/recv: unused, NULL
  void **recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t *non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  PJRT_ExecuteContext *context;
  const char *call_location;
  size_t num_tasks;
  int *task_ids;
  int64_t *incarnation_ids;
  // Plugins accept the struct up to here (112 bytes) until XLA ends the
  // compatibility window of 0.97-0.112 (rule 2 above); we pass the whole of
  // it, with each later field at the value the plugin assumes when absent.
  void *multi_slice_config;  // PJRT_MultiSlice_Config *; NULL (0.97)
  bool use_major_to_minor_data_layout_for_callbacks;  // true: the default (0.108)
  void *hlo_output_callbacks;  // PJRT_HloOutputCallbackInfo *; NULL (0.112)
  size_t num_hlo_output_callbacks;
} PJRT_ExecuteOptions;
TT_ABI_STRUCT(PJRT_ExecuteOptions, num_hlo_output_callbacks);

// Sets the fields every launch passes the same way (struct_size included).
static inline void tt_abi_execute_options_init(PJRT_ExecuteOptions *o) {
  *o = (PJRT_ExecuteOptions){0};
  o->struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  o->use_major_to_minor_data_layout_for_callbacks = true;
}

// Arrays are indexed [device][arg] and [device][output]: one device for a
// portable program, every replica's device for a replicated one.
typedef struct PJRT_LoadedExecutable_Execute_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_LoadedExecutable *executable;
  PJRT_ExecuteOptions *options;
  PJRT_Buffer *const *const *argument_lists;
  size_t num_devices;
  size_t num_args;
  PJRT_Buffer **const *output_lists;    // in: caller's arrays; out: buffers
  PJRT_Event **device_complete_events;  // in: caller's array or NULL
  PJRT_Device *execute_device;          // NULL: the compiled-in devices
} PJRT_LoadedExecutable_Execute_Args;
TT_ABI_STRUCT(PJRT_LoadedExecutable_Execute_Args, execute_device);

// --- buffers -----------------------------------------------------------------

typedef struct PJRT_Buffer_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Buffer *buffer;
} PJRT_Buffer_Destroy_Args;
TT_ABI_STRUCT(PJRT_Buffer_Destroy_Args, buffer);

typedef struct PJRT_Buffer_ElementType_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Buffer *buffer;
  PJRT_Buffer_Type type;  // out
} PJRT_Buffer_ElementType_Args;
TT_ABI_STRUCT(PJRT_Buffer_ElementType_Args, type);

typedef struct PJRT_Buffer_Dimensions_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Buffer *buffer;
  const int64_t *dims;  // out, lives as long as the buffer
  size_t num_dims;      // out
} PJRT_Buffer_Dimensions_Args;
TT_ABI_STRUCT(PJRT_Buffer_Dimensions_Args, num_dims);

typedef struct PJRT_Buffer_OnDeviceSizeInBytes_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Buffer *buffer;
  size_t on_device_size_in_bytes;  // out
} PJRT_Buffer_OnDeviceSizeInBytes_Args;
TT_ABI_STRUCT(PJRT_Buffer_OnDeviceSizeInBytes_Args, on_device_size_in_bytes);

typedef struct PJRT_Buffer_ToHostBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Buffer *src;
  PJRT_Buffer_MemoryLayout *host_layout;  // NULL: the buffer's own layout
  void *dst;        // NULL: only report the size needed in dst_size
  size_t dst_size;  // in/out, bytes
  PJRT_Event *event;  // out, ready when the copy is done
} PJRT_Buffer_ToHostBuffer_Args;
TT_ABI_STRUCT(PJRT_Buffer_ToHostBuffer_Args, event);

typedef struct PJRT_Buffer_ReadyEvent_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Buffer *buffer;
  PJRT_Event *event;  // out, caller destroys
} PJRT_Buffer_ReadyEvent_Args;
TT_ABI_STRUCT(PJRT_Buffer_ReadyEvent_Args, event);

typedef struct PJRT_Buffer_UnsafePointer_Args {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Buffer *buffer;
  uintptr_t buffer_pointer;  // out: the platform's address of the buffer's memory
} PJRT_Buffer_UnsafePointer_Args;
TT_ABI_STRUCT(PJRT_Buffer_UnsafePointer_Args, buffer_pointer);

// --- the function table ------------------------------------------------------

typedef struct PJRT_Api {
  size_t struct_size;  // of the plugin's table: slots past it don't exist
  PJRT_Extension_Base *extension_start;
  PJRT_Api_Version pjrt_api_version;

  void (*PJRT_Error_Destroy)(PJRT_Error_Destroy_Args *);
  void (*PJRT_Error_Message)(PJRT_Error_Message_Args *);
  PJRT_Error *(*PJRT_Error_GetCode)(PJRT_Error_GetCode_Args *);

  PJRT_Error *(*PJRT_Plugin_Initialize)(PJRT_Plugin_Initialize_Args *);
  PJRT_Error *(*PJRT_Plugin_Attributes)(PJRT_Plugin_Attributes_Args *);

  PJRT_Error *(*PJRT_Event_Destroy)(PJRT_Event_Destroy_Args *);
  PJRT_Error *(*PJRT_Event_IsReady)(PJRT_Event_IsReady_Args *);
  PJRT_Error *(*PJRT_Event_Error)(PJRT_Event_Error_Args *);
  PJRT_Error *(*PJRT_Event_Await)(PJRT_Event_Await_Args *);
  PJRT_Error *(*PJRT_Event_OnReady)(PJRT_Event_OnReady_Args *);

  PJRT_Error *(*PJRT_Client_Create)(PJRT_Client_Create_Args *);
  PJRT_Error *(*PJRT_Client_Destroy)(PJRT_Client_Destroy_Args *);
  PJRT_Error *(*PJRT_Client_PlatformName)(PJRT_Client_PlatformName_Args *);
  PJRT_Error *(*PJRT_Client_ProcessIndex)(PJRT_Client_ProcessIndex_Args *);
  PJRT_Error *(*PJRT_Client_PlatformVersion)(
      PJRT_Client_PlatformVersion_Args *);
  void *PJRT_Client_Devices;
  PJRT_Error *(*PJRT_Client_AddressableDevices)(
      PJRT_Client_AddressableDevices_Args *);
  void *PJRT_Client_LookupDevice;
  void *PJRT_Client_LookupAddressableDevice;
  void *PJRT_Client_AddressableMemories;
  PJRT_Error *(*PJRT_Client_Compile)(PJRT_Client_Compile_Args *);
  void *PJRT_Client_DefaultDeviceAssignment;
  PJRT_Error *(*PJRT_Client_BufferFromHostBuffer)(
      PJRT_Client_BufferFromHostBuffer_Args *);

  PJRT_Error *(*PJRT_DeviceDescription_Id)(PJRT_DeviceDescription_Id_Args *);
  void *PJRT_DeviceDescription_ProcessIndex;
  void *PJRT_DeviceDescription_Attributes;
  PJRT_Error *(*PJRT_DeviceDescription_Kind)(
      PJRT_DeviceDescription_Kind_Args *);
  PJRT_Error *(*PJRT_DeviceDescription_DebugString)(
      PJRT_DeviceDescription_DebugString_Args *);
  void *PJRT_DeviceDescription_ToString;

  PJRT_Error *(*PJRT_Device_GetDescription)(PJRT_Device_GetDescription_Args *);
  void *PJRT_Device_IsAddressable;
  void *PJRT_Device_LocalHardwareId;
  PJRT_Error *(*PJRT_Device_AddressableMemories)(
      PJRT_Device_AddressableMemories_Args *);
  PJRT_Error *(*PJRT_Device_DefaultMemory)(PJRT_Device_DefaultMemory_Args *);
  void *PJRT_Device_MemoryStats;

  PJRT_Error *(*PJRT_Memory_Id)(PJRT_Memory_Id_Args *);
  PJRT_Error *(*PJRT_Memory_Kind)(PJRT_Memory_Kind_Args *);
  void *PJRT_Memory_DebugString;
  void *PJRT_Memory_ToString;
  void *PJRT_Memory_AddressableByDevices;

  PJRT_Error *(*PJRT_Executable_Destroy)(PJRT_Executable_Destroy_Args *);
  void *PJRT_Executable_Name;
  void *PJRT_Executable_NumReplicas;
  void *PJRT_Executable_NumPartitions;
  PJRT_Error *(*PJRT_Executable_NumOutputs)(PJRT_Executable_NumOutputs_Args *);
  void *PJRT_Executable_SizeOfGeneratedCodeInBytes;
  void *PJRT_Executable_GetCostAnalysis;
  void *PJRT_Executable_OutputMemoryKinds;
  void *PJRT_Executable_OptimizedProgram;
  PJRT_Error *(*PJRT_Executable_Serialize)(PJRT_Executable_Serialize_Args *);

  PJRT_Error *(*PJRT_LoadedExecutable_Destroy)(
      PJRT_LoadedExecutable_Destroy_Args *);
  PJRT_Error *(*PJRT_LoadedExecutable_GetExecutable)(
      PJRT_LoadedExecutable_GetExecutable_Args *);
  void *PJRT_LoadedExecutable_AddressableDevices;
  void *PJRT_LoadedExecutable_Delete;
  void *PJRT_LoadedExecutable_IsDeleted;
  PJRT_Error *(*PJRT_LoadedExecutable_Execute)(
      PJRT_LoadedExecutable_Execute_Args *);
  PJRT_Error *(*PJRT_Executable_DeserializeAndLoad)(
      PJRT_Executable_DeserializeAndLoad_Args *);
  void *PJRT_LoadedExecutable_Fingerprint;

  PJRT_Error *(*PJRT_Buffer_Destroy)(PJRT_Buffer_Destroy_Args *);
  PJRT_Error *(*PJRT_Buffer_ElementType)(PJRT_Buffer_ElementType_Args *);
  PJRT_Error *(*PJRT_Buffer_Dimensions)(PJRT_Buffer_Dimensions_Args *);
  void *PJRT_Buffer_UnpaddedDimensions;
  void *PJRT_Buffer_DynamicDimensionIndices;
  void *PJRT_Buffer_GetMemoryLayout;
  PJRT_Error *(*PJRT_Buffer_OnDeviceSizeInBytes)(
      PJRT_Buffer_OnDeviceSizeInBytes_Args *);
  void *PJRT_Buffer_Device;
  void *PJRT_Buffer_Memory;
  void *PJRT_Buffer_Delete;
  void *PJRT_Buffer_IsDeleted;
  void *PJRT_Buffer_CopyToDevice;
  PJRT_Error *(*PJRT_Buffer_ToHostBuffer)(PJRT_Buffer_ToHostBuffer_Args *);
  void *PJRT_Buffer_IsOnCpu;
  PJRT_Error *(*PJRT_Buffer_ReadyEvent)(PJRT_Buffer_ReadyEvent_Args *);
  // Optional: called only where the table reaches it (TT_PJRT_CALL checks).
  PJRT_Error *(*PJRT_Buffer_UnsafePointer)(PJRT_Buffer_UnsafePointer_Args *);
  // Later slots exist in the plugin's table but are not declared here.
} PJRT_Api;

// The table must reach at least this far for every slot we call to exist.
#define TT_ABI_API_MIN_SIZE TT_ABI_SIZE(PJRT_Api, PJRT_Buffer_ReadyEvent)

// Entry point every plugin exports.
typedef const PJRT_Api *(*tt_abi_get_api_fn)(void);
#define TT_ABI_ENTRY_SYMBOL "GetPjrtApi"

#endif
