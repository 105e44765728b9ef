// Storages: the device side of a PyTorch StorageImpl, and host<->device
// copies of views over them.
//
// A storage holds one flat PJRT buffer (or none until first written). Host
// copies of a view that is not the whole storage go through the host: the
// whole buffer is read, the view's elements are gathered (or patched and the
// buffer written back). That needs no program per view shape and works when
// a view's dtype differs from the buffer's (x.view(torch.int32)).
//
// In fused eager a storage may be pending: its value exists only in a
// deferred program. Storages reach that program's executor only through the
// executor interface (rt->exec): any read from the host flushes it first,
// patching part of a storage or resizing it syncs the storage, and replacing
// its buffer or destroying it detaches it (a deferred read keeps the old
// buffer, a deferred write to a dead storage is dropped).
//
// Bytes read from the host are kept as the storage's host copy (rt->host,
// evictable, up to TT_HOST_CACHE_MAX_BYTES in all) until its buffer changes:
// element-by-element reads of one tensor then cost one transfer, not one per
// element, and the host tier's inputs cross once. The host tier's results
// stay on the host (a storage's value without a buffer) until a program
// reads them: a chain of cold calls moves nothing between host and device.
#include "runtime/storage.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/checks.h"
#include "runtime/executor.h"
#include "runtime/runtime.h"

// --- the memory limit ----------------------------------------------------------------
//
// Checked when a storage is created: by the shim's allocator before an op
// writes it, and by the executors for an op's fresh results (on the CPU
// plugin their program has run by then; they are dropped, and the op
// raises). The bytes in use are read without rt->mu, which some callers
// hold: the check is as exact as the counter at that instant.

static double mib(int64_t bytes) { return (double)bytes / (1 << 20); }

static tt_status check_limit(tt_runtime *rt, int64_t nbytes) {
  int64_t limit = __atomic_load_n(&rt->mem_limit, __ATOMIC_RELAXED);
  if (limit <= 0) return NULL;
  int64_t in_use = __atomic_load_n(&rt->stats.bytes_in_use, __ATOMIC_RELAXED);
  if (nbytes <= limit - in_use) return NULL;
  __atomic_fetch_add(&rt->mem_refused, 1, __ATOMIC_RELAXED);
  return tt_make_status(
      TT_RESOURCE_EXHAUSTED,
      "tpu out of memory: allocating %.2f MiB (%lld bytes) would bring the memory "
      "in use from %.2f MiB to %.2f MiB, past this process's limit of %.2f MiB "
      "(%lld bytes, set by torch.tpu.set_per_process_memory_fraction)",
      mib(nbytes), (long long)nbytes, mib(in_use), mib(in_use + nbytes), mib(limit),
      (long long)limit);
}

void tt_runtime_set_memory_limit(tt_runtime *rt, int64_t bytes) {
  __atomic_store_n(&rt->mem_limit, bytes > 0 ? bytes : 0, __ATOMIC_RELAXED);
}

void tt_runtime_memory_limit(tt_runtime *rt, int64_t *out_bytes, int64_t *out_refused) {
  *out_bytes = __atomic_load_n(&rt->mem_limit, __ATOMIC_RELAXED);
  *out_refused = __atomic_load_n(&rt->mem_refused, __ATOMIC_RELAXED);
}

// --- the list of buffers ---------------------------------------------------------------
//
// Storages holding a buffer, newest write first (rt->mu held), so that a
// memory snapshot can list every buffer and its owner.

static void list_add(tt_storage *s) {
  tt_runtime *rt = s->rt;
  s->buf_prev = NULL;
  s->buf_next = rt->buffers;
  if (rt->buffers) rt->buffers->buf_prev = s;
  rt->buffers = s;
}

static void list_remove(tt_storage *s) {
  if (s->buf_prev) s->buf_prev->buf_next = s->buf_next;
  else if (s->rt->buffers == s) s->rt->buffers = s->buf_next;
  if (s->buf_next) s->buf_next->buf_prev = s->buf_prev;
  s->buf_prev = s->buf_next = NULL;
}

void tt_runtime_list_buffers(tt_runtime *rt, tt_buffer_info *out, int64_t cap,
                             int64_t *out_count, int64_t *out_bytes_in_use) {
  pthread_mutex_lock(&rt->mu);
  int64_t n = 0;
  for (tt_storage *s = rt->buffers; s; s = s->buf_next, n++) {
    if (n < cap) out[n] = (tt_buffer_info){.storage = s, .device = s->device,
                                           .bytes = s->dev_bytes};
  }
  *out_count = n;
  *out_bytes_in_use = rt->stats.bytes_in_use;
  pthread_mutex_unlock(&rt->mu);
}

// --- lifetime ----------------------------------------------------------------------

tt_status tt_storage_create(tt_runtime *rt, int device, int64_t nbytes,
                            tt_storage **out_storage) {
  *out_storage = NULL;
  if (device < 0 || device >= rt->info.device_count)
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "tpu:%d does not exist (%d device(s) available)",
                          device, rt->info.device_count);
  if (nbytes < 0)
    return tt_make_status(TT_INVALID_ARGUMENT, "negative storage size %lld",
                          (long long)nbytes);
  TT_RETURN_IF_ERROR(check_limit(rt, nbytes));
  tt_storage *s = calloc(1, sizeof *s);
  if (!s) return tt_make_status(TT_RESOURCE_EXHAUSTED, "storage: out of memory");
  s->rt = rt;
  s->device = device;
  s->nbytes = nbytes;
  *out_storage = s;
  return NULL;
}

void tt_storage_release_buffer(tt_runtime *rt, tt_pjrt_buffer *b, int64_t bytes) {
  if (!b) return;
  tt_pjrt_buffer_destroy(rt->pjrt, b);
  __atomic_fetch_sub(&rt->stats.bytes_in_use, bytes, __ATOMIC_RELAXED);  // check_limit
  rt->stats.buffers_in_use--;
}

// --- host copies -------------------------------------------------------------------

// Evictable copies kept at most (their sum): reads element by element of a
// few tensors and the host tier's inputs fit; a copy is at most a quarter.
#define TT_HOST_CACHE_MAX_BYTES ((int64_t)256 << 20)

static void cache_unlink(tt_storage *s) {
  struct tt_host_copies *h = &s->rt->host;
  if (s->host_prev) s->host_prev->host_next = s->host_next;
  else h->newest = s->host_next;
  if (s->host_next) s->host_next->host_prev = s->host_prev;
  else h->oldest = s->host_prev;
  s->host_prev = s->host_next = NULL;
  s->host_cached = false;
  h->cached_bytes -= s->nbytes;
}

// The storage's host copy, handed to the caller (the storage keeps none);
// NULL if it has none.
static char *host_take(tt_storage *s) {
  char *bytes = s->host;
  if (!bytes) return NULL;
  if (s->host_cached) cache_unlink(s);
  s->host = NULL;
  s->rt->stats.host_copy_bytes -= s->nbytes;
  return bytes;
}

static void host_drop(tt_storage *s) { free(host_take(s)); }

// Makes `bytes` (malloc'd, s->nbytes long) the value of a storage without a
// buffer, kept on the host (s->dtype and s->numel say its elements).
static void host_set_value(tt_storage *s, char *bytes) {
  host_drop(s);
  s->host = bytes;
  s->rt->stats.host_copy_bytes += s->nbytes;
}

// Keeps `bytes` (malloc'd, s->nbytes long, the current contents of its
// buffer) as the storage's evictable host copy; frees them when it has no
// buffer (a storage never written has no value to copy: its zeros stay
// implicit) or they are too large to keep.
static void host_keep(tt_storage *s, char *bytes) {
  tt_runtime *rt = s->rt;
  struct tt_host_copies *h = &rt->host;
  host_drop(s);
  if (!s->buf || s->nbytes > TT_HOST_CACHE_MAX_BYTES / 4) {
    free(bytes);
    return;
  }
  while (h->oldest && h->cached_bytes + s->nbytes > TT_HOST_CACHE_MAX_BYTES)
    host_drop(h->oldest);
  s->host = bytes;
  rt->stats.host_copy_bytes += s->nbytes;
  s->host_cached = true;
  s->host_next = h->newest;
  if (h->newest) h->newest->host_prev = s;
  else h->oldest = s;
  h->newest = s;
  h->cached_bytes += s->nbytes;
}

// A cached copy just read moves to the front of the list.
static void host_touch(tt_storage *s) {
  if (!s->host_cached || s->rt->host.newest == s) return;
  char *bytes = host_take(s);
  host_keep(s, bytes);
}

tt_pjrt_buffer *tt_storage_take_buffer(tt_storage *s, int64_t *out_bytes) {
  host_drop(s);
  tt_pjrt_buffer *b = s->buf;
  if (b) list_remove(s);
  *out_bytes = s->dev_bytes;
  s->buf = NULL;
  s->dev_bytes = 0;
  return b;
}

void tt_storage_set_buffer(tt_storage *s, tt_pjrt_buffer *b, tt_dtype dtype,
                           int64_t numel) {
  tt_runtime *rt = s->rt;
  tt_exec_detach(rt->exec, s);
  host_drop(s);
  if (s->buf) list_remove(s);
  tt_storage_release_buffer(rt, s->buf, s->dev_bytes);
  s->buf = b;
  s->dtype = dtype;
  s->numel = numel;
  s->dev_bytes = 0;
  if (b) {
    s->lost = false;
    s->dev_bytes = numel * tt_dtype_size(dtype);
    list_add(s);
    __atomic_fetch_add(&rt->stats.bytes_in_use, s->dev_bytes, __ATOMIC_RELAXED);
    rt->stats.buffers_in_use++;
    if (rt->stats.bytes_in_use > rt->stats.peak_bytes_in_use)
      rt->stats.peak_bytes_in_use = rt->stats.bytes_in_use;
  }
}

void tt_storage_destroy_locked(tt_storage *s) {
  tt_storage_set_buffer(s, NULL, TT_U8, 0);
  free(s);
}

void tt_storage_destroy(tt_storage *s) {
  if (!s) return;
  tt_runtime *rt = s->rt;
  pthread_mutex_lock(&rt->mu);
  tt_storage_destroy_locked(s);
  pthread_mutex_unlock(&rt->mu);
}

void tt_storage_free_unused(tt_storage *s) { free(s); }

int64_t tt_storage_nbytes(const tt_storage *s) { return s->nbytes; }

void tt_storage_facts_of(const tt_storage *s, tt_storage_facts *out) {
  *out = (tt_storage_facts){.nbytes = s->nbytes, .has_buffer = s->buf || s->host,
                            .dtype = s->dtype, .numel = s->numel};
}
int tt_storage_device(const tt_storage *s) { return s->device; }

// Uploads `numel` elements of `dtype` from host as the storage's new buffer.
static tt_status upload_flat(tt_storage *s, tt_dtype dtype, int64_t numel,
                             const void *host) {
  tt_pjrt_buffer *b = NULL;
  int64_t dims[1] = {numel};
  TT_RETURN_IF_ERROR(
      tt_pjrt_buffer_from_host(s->rt->pjrt, s->device, dtype, dims, 1, host, &b));
  s->rt->stats.host_to_device_bytes += numel * tt_dtype_size(dtype);
  tt_storage_set_buffer(s, b, dtype, numel);
  return NULL;
}

tt_status tt_storage_materialize(tt_storage *s, tt_dtype dtype) {
  if (s->buf) return NULL;
  if (s->host) {  // its value, on the host: uploaded, the copy kept as a cache
    char *bytes = host_take(s);
    tt_status st = upload_flat(s, s->dtype, s->numel, bytes);
    if (st) host_set_value(s, bytes);  // still its value
    else host_keep(s, bytes);
    return st;
  }
  int64_t numel = s->nbytes / tt_dtype_size(dtype);
  void *zeros = calloc((size_t)(numel ? numel : 1), (size_t)tt_dtype_size(dtype));
  if (!zeros) return tt_make_status(TT_RESOURCE_EXHAUSTED, "storage: out of host memory");
  tt_status st = upload_flat(s, dtype, numel, zeros);
  free(zeros);
  return st;
}

// Reads the whole storage into `host` (s->nbytes long; zeros if unwritten).
static tt_status read_all(tt_storage *s, void *host) {
  if (s->host) {
    memcpy(host, s->host, (size_t)s->nbytes);
    return NULL;
  }
  memset(host, 0, (size_t)s->nbytes);
  if (!s->buf) return NULL;
  size_t n = (size_t)(s->numel * tt_dtype_size(s->dtype));
  if (n == 0) return NULL;
  if ((int64_t)n == s->nbytes) {
    TT_RETURN_IF_ERROR(tt_pjrt_buffer_to_host(s->rt->pjrt, s->buf, host, n));
  } else {  // buffer shorter than the storage (odd byte sizes): read, copy
    void *tmp = malloc(n);
    if (!tmp) return tt_make_status(TT_RESOURCE_EXHAUSTED, "storage: out of host memory");
    tt_status st = tt_pjrt_buffer_to_host(s->rt->pjrt, s->buf, tmp, n);
    if (!st) memcpy(host, tmp, n < (size_t)s->nbytes ? n : (size_t)s->nbytes);
    free(tmp);
    TT_RETURN_IF_ERROR(st);
  }
  s->rt->stats.device_to_host_bytes += (int64_t)n;
  return NULL;
}

// The storage's bytes in a malloc'd array the caller then owns: its host
// copy, taken over, or read from the buffer.
static tt_status take_bytes(tt_storage *s, char **out) {
  *out = host_take(s);
  if (*out) return NULL;
  char *all = malloc((size_t)(s->nbytes ? s->nbytes : 1));
  if (!all) return tt_make_status(TT_RESOURCE_EXHAUSTED, "copy_: out of host memory");
  tt_status st = read_all(s, all);
  if (st) {
    free(all);
    return st;
  }
  *out = all;
  return NULL;
}

tt_status tt_storage_resize(tt_storage *s, int64_t nbytes) {
  tt_runtime *rt = s->rt;
  pthread_mutex_lock(&rt->mu);
  tt_status st = NULL;
  void *old = NULL, *grown = NULL;
  TT_GOTO_IF_ERROR(st, tt_exec_sync_storage(rt->exec, s), done);
  if (!s->buf && !s->host) {
    s->nbytes = nbytes;
    goto done;
  }
  old = malloc((size_t)(s->nbytes ? s->nbytes : 1));
  grown = calloc(1, (size_t)(nbytes ? nbytes : 1));
  if (!old || !grown) {
    st = tt_make_status(TT_RESOURCE_EXHAUSTED, "resize_: out of host memory");
    goto done;
  }
  TT_GOTO_IF_ERROR(st, read_all(s, old), done);
  memcpy(grown, old, (size_t)(nbytes < s->nbytes ? nbytes : s->nbytes));
  tt_dtype d = s->dtype;
  if (nbytes % tt_dtype_size(d) != 0) d = TT_U8;
  s->nbytes = nbytes;
  st = upload_flat(s, d, nbytes / tt_dtype_size(d), grown);
done:
  free(old);
  free(grown);
  pthread_mutex_unlock(&rt->mu);
  return st;
}

// --- views <-> host -------------------------------------------------------------

int64_t tt_view_numel(const tt_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->sizes[i];
  return n;
}

bool tt_view_is_whole(const tt_tensor *t) {
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->sizes[i] != 1 && t->strides[i] != expect) return false;
    expect *= t->sizes[i];
  }
  return t->offset == 0 &&
         expect * tt_dtype_size(t->dtype) == tt_storage_nbytes(t->storage);
}

// Copies between a strided view inside `base` (byte array of the storage) and
// a dense array; `to_dense` picks the direction. Runs along the last dim are
// one memcpy when it is contiguous (a row of a row-major view, a whole dense
// view); offsets are stepped, not recomputed, from one element to the next.
static void strided_copy(const tt_tensor *t, char *base, char *dense,
                         bool to_dense) {
  int64_t esize = tt_dtype_size(t->dtype);
  int64_t numel = tt_view_numel(t);
  if (numel == 0) return;
  int nd = t->ndim;
  // Merge dims that are contiguous with the next one, so a dense view is one run.
  int64_t sizes[TT_MAX_RANK], strides[TT_MAX_RANK];
  int r = 0;
  for (int d = 0; d < nd; d++) {
    if (t->sizes[d] == 1) continue;
    if (r > 0 && strides[r - 1] == t->strides[d] * t->sizes[d]) {
      sizes[r - 1] *= t->sizes[d];
      strides[r - 1] = t->strides[d];
    } else {
      sizes[r] = t->sizes[d];
      strides[r] = t->strides[d];
      r++;
    }
  }
  int64_t run = 1;  // elements per memcpy
  if (r > 0 && strides[r - 1] == 1) run = sizes[--r];
  int64_t idx[TT_MAX_RANK] = {0};
  int64_t off = t->offset;
  size_t bytes = (size_t)(run * esize);
  for (int64_t n = 0; n < numel; n += run) {
    char *elem = base + off * esize;
    if (to_dense) memcpy(dense + n * esize, elem, bytes);
    else memcpy(elem, dense + n * esize, bytes);
    for (int d = r - 1; d >= 0; d--) {
      off += strides[d];
      if (++idx[d] < sizes[d]) break;
      off -= strides[d] * sizes[d];
      idx[d] = 0;
    }
  }
}

static tt_status check_view(const tt_tensor *t, const char *what) {
  if (!t->storage)
    return tt_make_status(TT_INVALID_ARGUMENT, "%s: undefined tensor", what);
  if (t->dtype < 0 || t->dtype >= TT_DTYPE_COUNT)
    return tt_make_status(TT_INVALID_ARGUMENT, "%s: invalid dtype %d", what,
                          (int)t->dtype);
  if (t->ndim < 0 || t->ndim > TT_MAX_RANK)
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "%s: rank %d exceeds the supported %d", what,
                          (int)t->ndim, TT_MAX_RANK);
  // Keep host copies inside the storage whatever metadata arrives.
  int64_t last = t->offset, numel = 1;
  for (int i = 0; i < t->ndim; i++) {
    numel *= t->sizes[i];
    if (t->sizes[i] > 0) last += (t->sizes[i] - 1) * t->strides[i];
  }
  int64_t esize = tt_dtype_size(t->dtype);
  if (numel > 0 && (t->offset < 0 || (last + 1) * esize > t->storage->nbytes))
    return tt_make_status(TT_OUT_OF_RANGE,
                          "%s: view reaches byte %lld of a %lld-byte storage",
                          what, (long long)((last + 1) * esize),
                          (long long)t->storage->nbytes);
  return NULL;
}

static tt_status upload_locked(const tt_tensor *dst, const void *host) {
  tt_storage *s = dst->storage;
  int64_t numel = tt_view_numel(dst);
  if (numel == 0) return NULL;
  if (tt_view_is_whole(dst)) return upload_flat(s, dst->dtype, numel, host);
  TT_RETURN_IF_ERROR(tt_exec_sync_storage(s->rt->exec, s));
  if (!s->buf && s->host) {  // a value on the host: patched there
    strided_copy(dst, s->host, (char *)host, false);
    return NULL;
  }
  char *all = NULL;
  TT_RETURN_IF_ERROR(take_bytes(s, &all));
  strided_copy(dst, all, (char *)host, false);
  tt_dtype d = s->buf ? s->dtype : dst->dtype;
  if (s->nbytes % tt_dtype_size(d) != 0) d = TT_U8;
  tt_status st = upload_flat(s, d, s->nbytes / tt_dtype_size(d), all);
  if (st) free(all);
  else host_keep(s, all);  // the new buffer's bytes
  return st;
}

tt_status tt_tensor_upload(tt_runtime *rt, const tt_tensor *dst,
                           const void *host) {
  TT_RETURN_IF_ERROR(check_view(dst, "copy to tpu"));
  pthread_mutex_lock(&rt->mu);
  tt_status st = upload_locked(dst, host);
  pthread_mutex_unlock(&rt->mu);
  return st;
}

// What every read from the host does first: deferred work runs, failed
// device checks raise, a lost value is an error.
static tt_status before_read(tt_storage *s) {
  // Any read from the host ends the graph, even of a value it doesn't hold:
  // graphs then end where the program syncs (loss.item()), so a training
  // step is one graph, the same every step, whatever the size bound cut.
  TT_RETURN_IF_ERROR(tt_exec_flush(s->rt->exec));
  // A host read is a synchronisation: a device-side check that failed in
  // any program launched so far raises here (CUDA's semantics).
  TT_RETURN_IF_ERROR(tt_checks_read(s->rt));
  if (!s->buf && s->lost)
    return tt_make_status(TT_FAILED_PRECONDITION,
                          "this tensor's value was lost: the fused graph that "
                          "computed it failed (see that error)");
  return NULL;
}

static tt_status download_locked(const tt_tensor *src, void *host) {
  tt_storage *s = src->storage;
  int64_t numel = tt_view_numel(src);
  if (numel == 0) return NULL;
  TT_RETURN_IF_ERROR(before_read(s));
  if (s->host) {
    host_touch(s);
    strided_copy(src, s->host, host, true);
    return NULL;
  }
  // The whole storage in its buffer's dtype: one read of the buffer.
  if (tt_view_is_whole(src) && s->buf && s->dtype == src->dtype) {
    size_t n = (size_t)(numel * tt_dtype_size(src->dtype));
    TT_RETURN_IF_ERROR(tt_pjrt_buffer_to_host(s->rt->pjrt, s->buf, host, n));
    s->rt->stats.device_to_host_bytes += (int64_t)n;
    return NULL;
  }
  char *all = NULL;
  TT_RETURN_IF_ERROR(take_bytes(s, &all));
  strided_copy(src, all, host, true);
  host_keep(s, all);
  return NULL;
}

tt_status tt_tensor_download(tt_runtime *rt, const tt_tensor *src,
                             void *host) {
  TT_RETURN_IF_ERROR(check_view(src, "copy to cpu"));
  pthread_mutex_lock(&rt->mu);
  tt_status st = download_locked(src, host);
  pthread_mutex_unlock(&rt->mu);
  return st;
}

// --- the host tier's reads and writes ---------------------------------------------

static tt_status read_cached_locked(tt_storage *s, void *host) {
  TT_RETURN_IF_ERROR(before_read(s));
  if (s->host) {
    host_touch(s);
    memcpy(host, s->host, (size_t)s->nbytes);
    return NULL;
  }
  TT_RETURN_IF_ERROR(read_all(s, host));
  char *copy = s->buf ? malloc((size_t)s->nbytes) : NULL;
  if (copy) {
    memcpy(copy, host, (size_t)s->nbytes);
    host_keep(s, copy);
  }
  return NULL;
}

tt_status tt_storage_read_cached(tt_runtime *rt, tt_storage *s, void *host) {
  if (s->nbytes == 0) return NULL;
  pthread_mutex_lock(&rt->mu);
  tt_status st = read_cached_locked(s, host);
  pthread_mutex_unlock(&rt->mu);
  return st;
}

tt_status tt_storage_write_host(tt_runtime *rt, tt_storage *s, tt_dtype dtype,
                                const void *bytes) {
  if (dtype < 0 || dtype >= TT_DTYPE_COUNT)
    return tt_make_status(TT_INVALID_ARGUMENT, "write to tpu: invalid dtype %d", (int)dtype);
  if (s->nbytes == 0) return NULL;
  char *copy = malloc((size_t)s->nbytes);
  if (!copy) return tt_make_status(TT_RESOURCE_EXHAUSTED, "write to tpu: out of host memory");
  memcpy(copy, bytes, (size_t)s->nbytes);
  pthread_mutex_lock(&rt->mu);
  // A storage with a value keeps its element type (as a partial upload
  // does); a fresh one takes `dtype` when its elements tile the bytes.
  if ((s->buf || s->host) && s->numel * tt_dtype_size(s->dtype) == s->nbytes) dtype = s->dtype;
  if (s->nbytes % tt_dtype_size(dtype) != 0) dtype = TT_U8;
  tt_storage_set_buffer(s, NULL, dtype, s->nbytes / tt_dtype_size(dtype));
  s->lost = false;
  host_set_value(s, copy);
  pthread_mutex_unlock(&rt->mu);
  return NULL;
}
