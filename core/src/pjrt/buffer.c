// buffer.c — device buffers: upload, download, shape queries, waiting.
//
// A tt_pjrt_buffer * is the plugin's PJRT_Buffer * itself (see internal.h).
// Host data is always dense and row-major: uploads pass no byte strides and
// downloads ask for a row-major host layout explicitly, because a plugin's
// own device layout may be tiled or permuted (TPU). Only the tt_dtypes are
// mapped; a buffer of another element type reports TT_DTYPE_NONE.
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "pjrt/internal.h"

// --- dtypes ------------------------------------------------------------------

static const PJRT_Buffer_Type pjrt_types[] = {
    [TT_BOOL] = PJRT_Buffer_Type_PRED, [TT_U8] = PJRT_Buffer_Type_U8,
    [TT_I8] = PJRT_Buffer_Type_S8,     [TT_I16] = PJRT_Buffer_Type_S16,
    [TT_I32] = PJRT_Buffer_Type_S32,   [TT_I64] = PJRT_Buffer_Type_S64,
    [TT_F16] = PJRT_Buffer_Type_F16,   [TT_BF16] = PJRT_Buffer_Type_BF16,
    [TT_F32] = PJRT_Buffer_Type_F32,   [TT_F64] = PJRT_Buffer_Type_F64,
    [TT_U16] = PJRT_Buffer_Type_U16,   [TT_U32] = PJRT_Buffer_Type_U32,
    [TT_U64] = PJRT_Buffer_Type_U64,   [TT_C64] = PJRT_Buffer_Type_C64,
    [TT_C128] = PJRT_Buffer_Type_C128,
};
static_assert(sizeof pjrt_types / sizeof pjrt_types[0] == TT_DTYPE_COUNT,
              "every tt_dtype needs a PJRT element type");

static tt_dtype from_pjrt_type(PJRT_Buffer_Type t) {
  for (int d = 0; d < TT_DTYPE_COUNT; d++)
    if (pjrt_types[d] == t) return (tt_dtype)d;
  return TT_DTYPE_NONE;
}

// --- upload and download -----------------------------------------------------

static tt_status check_device(const tt_pjrt *p, int device) {
  if (device < 0 || device >= p->device_count)
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "device %d out of range: %s has %d devices", device,
                          p->platform, p->device_count);
  return NULL;
}

tt_status tt_pjrt_buffer_from_host(tt_pjrt *p, int device, tt_dtype dtype,
                                   const int64_t *dims, int rank,
                                   const void *host, tt_pjrt_buffer **out) {
  *out = NULL;
  TT_RETURN_IF_ERROR(check_device(p, device));
  if ((int)dtype < 0 || dtype >= TT_DTYPE_COUNT)
    return tt_make_status(TT_INVALID_ARGUMENT, "upload: bad dtype %d",
                          (int)dtype);
  if (rank < 0 || rank > TT_MAX_RANK || (rank > 0 && !dims))
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "upload: rank %d (max %d) or NULL dims", rank,
                          TT_MAX_RANK);
  int64_t elements = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0)
      return tt_make_status(TT_INVALID_ARGUMENT,
                            "upload: dim %d is %lld, must be >= 0", i,
                            (long long)dims[i]);
    elements *= dims[i];
  }
  if (!host && elements > 0)
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "upload: NULL host data for %lld elements",
                          (long long)elements);
  static const int64_t empty_dims[1] = {0};  // never read: rank 0 or 0 bytes
  PJRT_Client_BufferFromHostBuffer_Args a = {0};
  a.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  a.client = p->client;
  a.data = host ? host : empty_dims;
  a.type = pjrt_types[dtype];
  a.dims = rank > 0 ? dims : empty_dims;
  a.num_dims = (size_t)rank;
  a.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  a.device = p->devices[device];
  TT_RETURN_IF_ERROR(
      TT_PJRT_CALL(p->api, PJRT_Client_BufferFromHostBuffer, &a));
  // The copy finished within the call (that is what the semantics promise),
  // so the host-buffer event carries nothing we need.
  tt_pjrt_raw_event_destroy(p->api, a.done_with_host_buffer);
  *out = tt_pjrt_wrap_buffer(a.buffer);
  return NULL;
}

// Fills a row-major host layout for `rank` dims: minor_to_major = rank-1..0.
static void row_major_layout(int rank, int64_t *minor_to_major,
                             PJRT_Buffer_MemoryLayout *out) {
  for (int i = 0; i < rank; i++) minor_to_major[i] = rank - 1 - i;
  *out = (PJRT_Buffer_MemoryLayout){0};
  out->struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE;
  out->type = PJRT_Buffer_MemoryLayout_Type_Tiled;
  out->tiled.struct_size = PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE;
  out->tiled.minor_to_major = minor_to_major;
  out->tiled.minor_to_major_size = (size_t)rank;
}

// A host-addressable (CPU plugin) buffer of rank <= 1 read with memcpy once
// it is ready: its memory is host memory, and a flat array's layout is
// plain. *done false: not such a buffer, read it the plugin's way.
static tt_status read_in_place(tt_pjrt *p, tt_pjrt_buffer *b, int rank, const int64_t *dims,
                               void *host, size_t nbytes, bool *done) {
  *done = false;
  if (!p->host_addressable || rank > 1) return NULL;
  int64_t numel = rank ? dims[0] : 1;
  if ((size_t)numel * tt_dtype_size(tt_pjrt_buffer_dtype(p, b)) != nbytes || !nbytes)
    return NULL;
  TT_RETURN_IF_ERROR(tt_pjrt_buffer_await(p, b));  // the program that makes it has run
  PJRT_Buffer_UnsafePointer_Args a = {0};
  a.struct_size = PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE;
  a.buffer = tt_pjrt_raw_buffer(b);
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Buffer_UnsafePointer, &a));
  if (!a.buffer_pointer) return NULL;
  memcpy(host, (const void *)a.buffer_pointer, nbytes);
  *done = true;
  return NULL;
}

tt_status tt_pjrt_buffer_to_host(tt_pjrt *p, tt_pjrt_buffer *b, void *host,
                                 size_t nbytes) {
  int64_t dims[TT_MAX_RANK];
  int rank = tt_pjrt_buffer_dims(p, b, dims);
  if (rank < 0)
    return tt_make_status(TT_INTERNAL,
                          "download: can't read the buffer's dims, or rank "
                          "above %d",
                          TT_MAX_RANK);
  bool done = false;
  TT_RETURN_IF_ERROR(read_in_place(p, b, rank, dims, host, nbytes, &done));
  if (done) return NULL;
  int64_t minor_to_major[TT_MAX_RANK + 1];
  PJRT_Buffer_MemoryLayout layout;
  row_major_layout(rank, minor_to_major, &layout);

  // First ask for the size, so a mismatch is our error, not a plugin crash.
  PJRT_Buffer_ToHostBuffer_Args a = {0};
  a.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  a.src = tt_pjrt_raw_buffer(b);
  a.host_layout = &layout;
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Buffer_ToHostBuffer, &a));
  if (a.dst_size != nbytes)
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "download: the %s buffer of rank %d holds %zu "
                          "bytes, the host buffer has %zu",
                          tt_dtype_name(tt_pjrt_buffer_dtype(p, b)), rank,
                          a.dst_size, nbytes);

  static int64_t empty_dst;  // plugins read a NULL dst as "size query"
  a.dst = nbytes ? host : &empty_dst;
  a.dst_size = nbytes;
  a.event = NULL;
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Buffer_ToHostBuffer, &a));
  tt_status st = tt_pjrt_raw_event_await(p->api, a.event);
  tt_pjrt_raw_event_destroy(p->api, a.event);
  return st;
}

tt_status tt_pjrt_buffers_to_host(tt_pjrt *p, tt_pjrt_buffer *const *bufs, int n,
                                  void *host, size_t each) {
  int64_t minor_to_major[TT_MAX_RANK + 1];
  PJRT_Buffer_MemoryLayout layout;
  tt_status first = NULL;
  PJRT_Event **events = calloc((size_t)(n ? n : 1), sizeof *events);
  if (!events) return tt_make_status(TT_RESOURCE_EXHAUSTED, "download: out of memory");
  for (int i = 0; i < n && !first; i++) {  // start every copy, then wait for all
    int64_t dims[TT_MAX_RANK];
    int rank = tt_pjrt_buffer_dims(p, bufs[i], dims);
    int64_t numel = 1;
    for (int d = 0; d < rank; d++) numel *= dims[d];
    if (rank < 0 || (size_t)(numel * tt_dtype_size(tt_pjrt_buffer_dtype(p, bufs[i]))) != each) {
      first = tt_make_status(TT_INVALID_ARGUMENT, "download: buffer %d of %d does not hold "
                             "%zu bytes", i, n, each);
      break;
    }
    row_major_layout(rank, minor_to_major, &layout);
    PJRT_Buffer_ToHostBuffer_Args a = {0};
    a.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
    a.src = tt_pjrt_raw_buffer(bufs[i]);
    a.host_layout = &layout;
    a.dst = (char *)host + (size_t)i * each;
    a.dst_size = each;
    first = TT_PJRT_CALL(p->api, PJRT_Buffer_ToHostBuffer, &a);
    events[i] = a.event;
  }
  for (int i = 0; i < n; i++) {
    if (!events[i]) continue;
    tt_status st = tt_pjrt_raw_event_await(p->api, events[i]);
    if (st && !first) first = st;
    else tt_status_free(st);
    tt_pjrt_raw_event_destroy(p->api, events[i]);
  }
  free(events);
  return first;
}

// PJRT_Buffer_Destroy acts as PJRT_Buffer_Delete first, whose memory is only
// released once pending work using the buffer completes: so this is safe
// while launches that read `b` are in flight.
void tt_pjrt_buffer_destroy(tt_pjrt *p, tt_pjrt_buffer *b) {
  if (!p || !b) return;
  PJRT_Buffer_Destroy_Args a = {0};
  a.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  a.buffer = tt_pjrt_raw_buffer(b);
  tt_status_free(TT_PJRT_CALL(p->api, PJRT_Buffer_Destroy, &a));
}

// --- queries -----------------------------------------------------------------

tt_dtype tt_pjrt_buffer_dtype(tt_pjrt *p, tt_pjrt_buffer *b) {
  PJRT_Buffer_ElementType_Args a = {0};
  a.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
  a.buffer = tt_pjrt_raw_buffer(b);
  tt_status st = TT_PJRT_CALL(p->api, PJRT_Buffer_ElementType, &a);
  if (st) {
    tt_status_free(st);
    return TT_DTYPE_NONE;
  }
  return from_pjrt_type(a.type);
}

// Returns -1 when the plugin fails or the rank exceeds TT_MAX_RANK.
int tt_pjrt_buffer_dims(tt_pjrt *p, tt_pjrt_buffer *b, int64_t *dims) {
  PJRT_Buffer_Dimensions_Args a = {0};
  a.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  a.buffer = tt_pjrt_raw_buffer(b);
  tt_status st = TT_PJRT_CALL(p->api, PJRT_Buffer_Dimensions, &a);
  if (st) {
    tt_status_free(st);
    return -1;
  }
  if (a.num_dims > TT_MAX_RANK) return -1;
  for (size_t i = 0; i < a.num_dims; i++) dims[i] = a.dims[i];
  return (int)a.num_dims;
}

// Returns -1 when the plugin fails.
int64_t tt_pjrt_buffer_device_bytes(tt_pjrt *p, tt_pjrt_buffer *b) {
  PJRT_Buffer_OnDeviceSizeInBytes_Args a = {0};
  a.struct_size = PJRT_Buffer_OnDeviceSizeInBytes_Args_STRUCT_SIZE;
  a.buffer = tt_pjrt_raw_buffer(b);
  tt_status st = TT_PJRT_CALL(p->api, PJRT_Buffer_OnDeviceSizeInBytes, &a);
  if (st) {
    tt_status_free(st);
    return -1;
  }
  return (int64_t)a.on_device_size_in_bytes;
}

tt_status tt_pjrt_buffer_await(tt_pjrt *p, tt_pjrt_buffer *b) {
  PJRT_Buffer_ReadyEvent_Args a = {0};
  a.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
  a.buffer = tt_pjrt_raw_buffer(b);
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(p->api, PJRT_Buffer_ReadyEvent, &a));
  tt_status st = tt_pjrt_raw_event_await(p->api, a.event);
  tt_pjrt_raw_event_destroy(p->api, a.event);
  return st;
}
