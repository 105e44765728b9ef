// ffi_abi.h — our declarations of the part of XLA's FFI C API that a typed
// custom-call handler sees (xla/ffi/api/c_api.h, API version 0.1), and of the
// PJRT FFI extension that registers such handlers with a plugin
// (xla/pjrt/c/pjrt_c_api_ffi_extension.h, extension version 2). Written from
// the documented layouts; only what ffi.c uses. Like abi.h: every struct
// starts with struct_size; we never read past a struct's size.
#ifndef TT_PJRT_FFI_ABI_H
#define TT_PJRT_FFI_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "pjrt/abi.h"

#define TT_FFI_API_MAJOR 0  // the FFI API version our handler speaks
#define TT_FFI_API_MINOR 1

// --- the PJRT extension -------------------------------------------------------------

#define TT_PJRT_EXTENSION_TYPE_FFI 5  // PJRT_Extension_Type_FFI

// The head every extension in PJRT_Api's chain starts with.
typedef struct tt_pjrt_extension_head {
  size_t struct_size;
  int type;  // PJRT_Extension_Type
  const struct tt_pjrt_extension_head *next;
} tt_pjrt_extension_head;

// The layout of the plugin we build against (PJRT C API 0.115, the pinned
// CPU plugin): typed handlers only. Read off its PJRT_FFI_Register_Handler,
// which checks struct_size >= 52 and reads the target at 8/16, the handler at
// 24, the platform at 32/40 and the traits at 48. (Older headers, e.g. the
// one published with extension version 2, had an `int api_version` before
// the handler: a plugin of that age would misread these args.)
typedef struct PJRT_FFI_Register_Handler_Args {
  size_t struct_size;  // (this struct has no extension_start)
  const char *target_name;
  size_t target_name_size;
  void *handler;  // XLA_FFI_Handler *
  const char *platform_name;  // "Host" (CPU plugin), "CUDA", "ROCM"
  size_t platform_name_size;
  uint32_t traits;  // 0
} PJRT_FFI_Register_Handler_Args;
TT_ABI_STRUCT(PJRT_FFI_Register_Handler_Args, traits);
_Static_assert(PJRT_FFI_Register_Handler_Args_STRUCT_SIZE == 52,
               "the plugin checks struct_size >= 52");

typedef PJRT_Error *PJRT_FFI_Register_Handler(PJRT_FFI_Register_Handler_Args *args);

typedef struct PJRT_FFI_Extension {
  tt_pjrt_extension_head base;
  void *type_id_register;  // unused here
  void *user_data_add;     // unused here
  PJRT_FFI_Register_Handler *register_handler;
} PJRT_FFI_Extension;

// --- the call frame a handler receives ---------------------------------------------------

typedef struct XLA_FFI_Error XLA_FFI_Error;  // opaque; made by Error_Create

typedef struct XLA_FFI_Extension_Base {
  size_t struct_size;
  int type;  // 1: metadata (the registration's query of our version)
  struct XLA_FFI_Extension_Base *next;
} XLA_FFI_Extension_Base;

enum { TT_XLA_FFI_EXTENSION_METADATA = 1 };

typedef struct XLA_FFI_Api_Version {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  int major_version;  // out
  int minor_version;  // out
} XLA_FFI_Api_Version;

typedef struct XLA_FFI_Metadata {
  size_t struct_size;
  XLA_FFI_Api_Version api_version;  // out
  uint32_t traits;                  // out
} XLA_FFI_Metadata;

typedef struct XLA_FFI_Metadata_Extension {
  XLA_FFI_Extension_Base extension_base;
  XLA_FFI_Metadata *metadata;
} XLA_FFI_Metadata_Extension;

// xla::PrimitiveType numbers.
typedef enum {
  XLA_FFI_DataType_PRED = 1, XLA_FFI_DataType_S8 = 2, XLA_FFI_DataType_S16 = 3,
  XLA_FFI_DataType_S32 = 4, XLA_FFI_DataType_S64 = 5, XLA_FFI_DataType_U8 = 6,
  XLA_FFI_DataType_U16 = 7, XLA_FFI_DataType_U32 = 8, XLA_FFI_DataType_U64 = 9,
  XLA_FFI_DataType_F16 = 10, XLA_FFI_DataType_F32 = 11, XLA_FFI_DataType_F64 = 12,
  XLA_FFI_DataType_BF16 = 16,
} XLA_FFI_DataType;

typedef struct XLA_FFI_Buffer {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  XLA_FFI_DataType dtype;
  void *data;
  int64_t rank;
  int64_t *dims;  // rank entries
} XLA_FFI_Buffer;

enum { XLA_FFI_ArgType_BUFFER = 1, XLA_FFI_RetType_BUFFER = 1 };
enum { XLA_FFI_AttrType_STRING = 4 };

typedef struct XLA_FFI_ByteSpan {
  const char *ptr;
  size_t len;  // not NUL-terminated
} XLA_FFI_ByteSpan;

typedef struct XLA_FFI_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  int64_t size;
  int *types;   // XLA_FFI_ArgType, `size` entries
  void **args;  // XLA_FFI_Buffer * for BUFFER
} XLA_FFI_Args;

typedef struct XLA_FFI_Rets {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  int64_t size;
  int *types;   // XLA_FFI_RetType
  void **rets;  // XLA_FFI_Buffer *
} XLA_FFI_Rets;

typedef struct XLA_FFI_Attrs {  // sorted by name
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  int64_t size;
  int *types;                // XLA_FFI_AttrType
  XLA_FFI_ByteSpan **names;
  void **attrs;              // XLA_FFI_ByteSpan * for STRING
} XLA_FFI_Attrs;

typedef enum { XLA_FFI_ExecutionStage_EXECUTE = 3 } XLA_FFI_ExecutionStage;

typedef struct XLA_FFI_Error_Create_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  const char *message;
  int errc;  // XLA_FFI_Error_Code (absl codes: 3 invalid argument, 13 internal)
} XLA_FFI_Error_Create_Args;

typedef XLA_FFI_Error *XLA_FFI_Error_Create(XLA_FFI_Error_Create_Args *args);

typedef struct XLA_FFI_Error_Destroy_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  XLA_FFI_Error *error;
} XLA_FFI_Error_Destroy_Args;

typedef void XLA_FFI_Error_Destroy(XLA_FFI_Error_Destroy_Args *args);

typedef struct XLA_FFI_ExecutionContext XLA_FFI_ExecutionContext;  // opaque

// The CPU runtime's intra-op thread pool (the one its own parallel loops
// use): Schedule queues task(data) on it, NumThreads says how many threads
// it has. Both fail when the program runs without a pool.
typedef void XLA_FFI_Task(void *data);

typedef struct XLA_FFI_ThreadPool_Schedule_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  XLA_FFI_ExecutionContext *ctx;
  XLA_FFI_Task *task;
  void *data;
} XLA_FFI_ThreadPool_Schedule_Args;

typedef XLA_FFI_Error *XLA_FFI_ThreadPool_Schedule(XLA_FFI_ThreadPool_Schedule_Args *args);

typedef struct XLA_FFI_ThreadPool_NumThreads_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  XLA_FFI_ExecutionContext *ctx;
  int64_t *num_threads;  // out
} XLA_FFI_ThreadPool_NumThreads_Args;

typedef XLA_FFI_Error *XLA_FFI_ThreadPool_NumThreads(XLA_FFI_ThreadPool_NumThreads_Args *args);

// The prefix of XLA_FFI_Api we use: the error constructor and destructor and
// the thread pool. The pool's two entries came after the API's struct_size
// stopped growing (XLA sets it at XLA_FFI_Stream_Get), so it cannot say
// whether a plugin has them: they were read off the pinned CPU plugin
// (lammps-jax-pjrt-cpu 0.11.2, whose FFI checks the sizes of both argument
// structs), and only the CPU kernels that ask for a pool call them.
typedef struct XLA_FFI_Api {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  XLA_FFI_Api_Version api_version;
  void *internal_api;
  XLA_FFI_Error_Create *XLA_FFI_Error_Create;
  void *XLA_FFI_Error_GetMessage;
  XLA_FFI_Error_Destroy *XLA_FFI_Error_Destroy;
  void *XLA_FFI_Handler_Register;
  void *XLA_FFI_Stream_Get;
  void *XLA_FFI_TypeId_Register;
  void *XLA_FFI_ExecutionContext_Get;
  void *XLA_FFI_State_Set;
  void *XLA_FFI_State_Get;
  void *XLA_FFI_DeviceMemory_Allocate;
  void *XLA_FFI_DeviceMemory_Free;
  XLA_FFI_ThreadPool_Schedule *XLA_FFI_ThreadPool_Schedule;
  XLA_FFI_ThreadPool_NumThreads *XLA_FFI_ThreadPool_NumThreads;
} XLA_FFI_Api;

typedef struct XLA_FFI_CallFrame {
  size_t struct_size;
  XLA_FFI_Extension_Base *extension_start;
  const XLA_FFI_Api *api;
  XLA_FFI_ExecutionContext *ctx;
  int stage;  // XLA_FFI_ExecutionStage
  XLA_FFI_Args args;
  XLA_FFI_Rets rets;
  XLA_FFI_Attrs attrs;
} XLA_FFI_CallFrame;

typedef XLA_FFI_Error *XLA_FFI_Handler(XLA_FFI_CallFrame *call_frame);

#endif
