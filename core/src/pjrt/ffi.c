// ffi.c — C kernels through XLA's FFI: one typed handler of ours (the
// "trampoline") is registered with the plugin's PJRT FFI extension under the
// custom-call target tt_pjrt_ffi_target(); every C kernel's custom call names
// that target and carries the kernel's name as a string attribute
// (backend_config = {tt_kernel = "ns::name"}). The trampoline finds the
// user's function by that name and calls it with plain buffer descriptors.
// A name, not a pointer, lives in the program text, so programs in the
// persistent cache stay valid in a later process.
//
// The FFI calls a bare function pointer with no context, so the table of C
// kernels is process-wide (a mutex guards it; entries are never removed).
//
// A kernel registered with a pool (tt_pjrt_ffi_register_pooled: our own
// CPU kernels) is also handed the CPU runtime's intra-op thread pool.
//
// Leaves out: attributes other than the name, asynchronous handlers, the
// prepare/initialize stages, execution-context user data.
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "pjrt/ffi_abi.h"
#include "pjrt/internal.h"

#define MAX_C_KERNELS 256
#define MAX_KERNEL_BUFFERS 64

typedef struct c_kernel {
  char name[128];
  tt_c_kernel_fn fn;            // one of the two
  tt_c_kernel_pool_fn pool_fn;
} c_kernel;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static c_kernel g_kernels[MAX_C_KERNELS];
static int g_nkernels;
static const void *g_registered_api;  // the plugin our trampoline is registered with

const char *tt_pjrt_ffi_target(void) { return "torchtpu_c_kernel"; }

// Copies the kernel `name` into *out; false when there is none.
static bool find_kernel(const char *name, size_t len, c_kernel *out) {
  bool found = false;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_nkernels && !found; i++)
    if (strlen(g_kernels[i].name) == len && memcmp(g_kernels[i].name, name, len) == 0) {
      *out = g_kernels[i];
      found = true;
    }
  pthread_mutex_unlock(&g_mu);
  return found;
}

// --- the handler ----------------------------------------------------------------------

static tt_dtype from_xla(XLA_FFI_DataType d) {
  switch (d) {
    case XLA_FFI_DataType_PRED: return TT_BOOL;
    case XLA_FFI_DataType_S8: return TT_I8;
    case XLA_FFI_DataType_S16: return TT_I16;
    case XLA_FFI_DataType_S32: return TT_I32;
    case XLA_FFI_DataType_S64: return TT_I64;
    case XLA_FFI_DataType_U8: return TT_U8;
    case XLA_FFI_DataType_U16: return TT_U16;
    case XLA_FFI_DataType_U32: return TT_U32;
    case XLA_FFI_DataType_U64: return TT_U64;
    case XLA_FFI_DataType_F16: return TT_F16;
    case XLA_FFI_DataType_F32: return TT_F32;
    case XLA_FFI_DataType_F64: return TT_F64;
    case XLA_FFI_DataType_BF16: return TT_BF16;
  }
  return TT_DTYPE_NONE;
}

static XLA_FFI_Error *make_error(const XLA_FFI_CallFrame *f, const char *msg) {
  XLA_FFI_Error_Create_Args a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.message = msg;
  a.errc = 13;  // INTERNAL: the kernel said it failed
  return f->api->XLA_FFI_Error_Create(&a);
}

// --- the CPU runtime's thread pool, as a tt_kernel_pool ------------------------------------

typedef struct xla_pool {
  const XLA_FFI_Api *api;
  XLA_FFI_ExecutionContext *ctx;
} xla_pool;

static void drop_error(const XLA_FFI_Api *api, XLA_FFI_Error *e) {
  XLA_FFI_Error_Destroy_Args a = {.struct_size = sizeof a, .error = e};
  api->XLA_FFI_Error_Destroy(&a);
}

static bool pool_schedule(void *impl, void (*task)(void *), void *data) {
  const xla_pool *p = impl;
  XLA_FFI_ThreadPool_Schedule_Args a = {.struct_size = sizeof a, .ctx = p->ctx, .task = task,
                                        .data = data};
  XLA_FFI_Error *e = p->api->XLA_FFI_ThreadPool_Schedule(&a);
  if (e) drop_error(p->api, e);
  return e == NULL;
}

// The pool of the call's runtime; false when it has none.
static bool pool_of(const XLA_FFI_CallFrame *f, xla_pool *impl, tt_kernel_pool *out) {
  const XLA_FFI_Api *api = f->api;
  if (!api->XLA_FFI_ThreadPool_NumThreads || !api->XLA_FFI_ThreadPool_Schedule ||
      !api->XLA_FFI_Error_Destroy)
    return false;
  int64_t n = 0;
  XLA_FFI_ThreadPool_NumThreads_Args a = {.struct_size = sizeof a, .ctx = f->ctx,
                                          .num_threads = &n};
  XLA_FFI_Error *e = api->XLA_FFI_ThreadPool_NumThreads(&a);
  if (e) {
    drop_error(api, e);
    return false;
  }
  *impl = (xla_pool){api, f->ctx};
  *out = (tt_kernel_pool){.impl = impl, .threads = (int32_t)n, .schedule = pool_schedule};
  return n > 0;
}

// Fills `out` from an FFI buffer; false when the dtype or rank is unknown.
static bool to_kernel_buffer(const XLA_FFI_Buffer *b, tt_kernel_buffer *out) {
  out->dtype = from_xla(b->dtype);
  out->rank = (int32_t)b->rank;
  out->dims = b->dims;
  out->data = b->data;
  return out->dtype != TT_DTYPE_NONE && b->rank >= 0 && b->rank <= TT_MAX_RANK;
}

static XLA_FFI_Error *trampoline(XLA_FFI_CallFrame *f) {
  // Registration asks for our API version through a metadata extension.
  for (XLA_FFI_Extension_Base *e = f->extension_start; e; e = e->next) {
    if (e->type == TT_XLA_FFI_EXTENSION_METADATA) {
      XLA_FFI_Metadata *md = ((XLA_FFI_Metadata_Extension *)e)->metadata;
      md->api_version.major_version = TT_FFI_API_MAJOR;
      md->api_version.minor_version = TT_FFI_API_MINOR;
      md->traits = 0;
      return NULL;
    }
  }
  if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  const char *name = NULL;
  size_t len = 0;
  for (int64_t i = 0; i < f->attrs.size; i++) {
    const XLA_FFI_ByteSpan *n = f->attrs.names[i];
    if (n->len == 9 && memcmp(n->ptr, "tt_kernel", 9) == 0 &&
        f->attrs.types[i] == XLA_FFI_AttrType_STRING) {
      const XLA_FFI_ByteSpan *v = f->attrs.attrs[i];
      name = v->ptr;
      len = v->len;
    }
  }
  char msg[1024];
  if (!name) return make_error(f, "torchtpu C kernel: the custom call has no tt_kernel attribute");
  c_kernel k;
  if (!find_kernel(name, len, &k)) {
    snprintf(msg, sizeof msg, "C kernel %.*s is not registered in this process", (int)len, name);
    return make_error(f, msg);
  }
  tt_kernel_buffer ins[MAX_KERNEL_BUFFERS], outs[MAX_KERNEL_BUFFERS];
  int64_t nin = f->args.size, nout = f->rets.size;
  if (nin > MAX_KERNEL_BUFFERS || nout > MAX_KERNEL_BUFFERS) {
    snprintf(msg, sizeof msg, "C kernel %.*s: more than %d buffers", (int)len, name,
             MAX_KERNEL_BUFFERS);
    return make_error(f, msg);
  }
  bool ok = true;
  for (int64_t i = 0; i < nin; i++)
    ok = ok && f->args.types[i] == XLA_FFI_ArgType_BUFFER &&
         to_kernel_buffer(f->args.args[i], &ins[i]);
  for (int64_t i = 0; i < nout; i++)
    ok = ok && f->rets.types[i] == XLA_FFI_RetType_BUFFER &&
         to_kernel_buffer(f->rets.rets[i], &outs[i]);
  if (!ok) {
    snprintf(msg, sizeof msg, "C kernel %.*s: an argument is not a buffer of a known dtype",
             (int)len, name);
    return make_error(f, msg);
  }
  const char *err;
  if (k.pool_fn) {
    xla_pool impl;
    tt_kernel_pool pool;
    bool has_pool = pool_of(f, &impl, &pool);
    err = k.pool_fn(ins, (int32_t)nin, outs, (int32_t)nout, has_pool ? &pool : NULL);
  } else {
    err = k.fn(ins, (int32_t)nin, outs, (int32_t)nout);
  }
  if (!err) return NULL;
  snprintf(msg, sizeof msg, "C kernel %.*s failed: %s", (int)len, name, err);
  return make_error(f, msg);
}

// --- registration -----------------------------------------------------------------------

static const PJRT_FFI_Extension *find_extension(const PJRT_Api *api) {
  const tt_pjrt_extension_head *e = (const tt_pjrt_extension_head *)api->extension_start;
  for (; e; e = e->next)
    if (e->type == TT_PJRT_EXTENSION_TYPE_FFI) return (const PJRT_FFI_Extension *)e;
  return NULL;
}

// XLA's FFI names platforms its own way.
static const char *ffi_platform(const char *platform) {
  if (strcmp(platform, "cpu") == 0) return "Host";
  if (strcmp(platform, "cuda") == 0 || strcmp(platform, "gpu") == 0) return "CUDA";
  if (strcmp(platform, "rocm") == 0) return "ROCM";
  return NULL;
}

static tt_status register_trampoline(tt_pjrt *p) {
  if (g_registered_api == p->api) return NULL;
  const PJRT_FFI_Extension *ext = find_extension(p->api);
  if (!ext || ext->base.struct_size < offsetof(PJRT_FFI_Extension, register_handler) + sizeof(void *) ||
      !ext->register_handler)
    return tt_make_status(TT_UNIMPLEMENTED,
                          "the %s plugin (%s) has no PJRT FFI extension with handler "
                          "registration: C kernels need XLA's CPU or GPU plugin",
                          p->platform, p->plugin_path);
  const char *platform = ffi_platform(p->platform);
  if (!platform)
    return tt_make_status(TT_UNIMPLEMENTED, "C kernels: XLA's FFI has no platform for '%s'",
                          p->platform);
  PJRT_FFI_Register_Handler_Args a;
  memset(&a, 0, sizeof a);
  a.struct_size = PJRT_FFI_Register_Handler_Args_STRUCT_SIZE;
  a.target_name = tt_pjrt_ffi_target();
  a.target_name_size = strlen(a.target_name);
  a.handler = (void *)trampoline;
  a.platform_name = platform;
  a.platform_name_size = strlen(platform);
  tt_status st = tt_pjrt_error_status(p->api, ext->register_handler(&a),
                                      "PJRT_FFI_Register_Handler", __FILE__, __LINE__);
  if (!st) g_registered_api = p->api;
  return st;
}

static tt_status add_kernel(tt_pjrt *p, const char *name, tt_c_kernel_fn fn,
                            tt_c_kernel_pool_fn pool_fn) {
  pthread_mutex_lock(&g_mu);
  tt_status st = register_trampoline(p);
  if (!st) {
    int i = 0;
    while (i < g_nkernels && strcmp(g_kernels[i].name, name) != 0) i++;
    if (i == MAX_C_KERNELS || strlen(name) >= sizeof g_kernels[0].name) {
      st = tt_make_status(TT_RESOURCE_EXHAUSTED, "C kernel %s: the table holds %d kernels "
                          "of names under 128 bytes", name, MAX_C_KERNELS);
    } else {
      snprintf(g_kernels[i].name, sizeof g_kernels[i].name, "%s", name);
      g_kernels[i].fn = fn;
      g_kernels[i].pool_fn = pool_fn;
      if (i == g_nkernels) g_nkernels++;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return st;
}

tt_status tt_pjrt_ffi_register(tt_pjrt *p, const char *name, tt_c_kernel_fn fn) {
  return add_kernel(p, name, fn, NULL);
}

tt_status tt_pjrt_ffi_register_pooled(tt_pjrt *p, const char *name, tt_c_kernel_pool_fn fn) {
  return add_kernel(p, name, NULL, fn);
}
