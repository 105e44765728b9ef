// storage.h — device storages (internal; storage.c).
//
// Owns: a storage's flat PJRT buffer and its share of the memory counters.
// Borrows: the runtime context. A storage knows no executor: when it is
// about to lose its buffer it tells the executor in use (rt->exec) through
// the executor interface, and before the host reads it or patches part of
// it, it asks that executor to make the buffer current.
//
// Functions here run with rt->mu held unless the public API says otherwise.
#ifndef TT_RUNTIME_STORAGE_H
#define TT_RUNTIME_STORAGE_H

#include "lower/program.h"
#include "pjrt/pjrt.h"
#include "runtime/executor.h"
#include "torchtpu.h"

struct tt_storage {
  tt_runtime *rt;
  int device;
  int64_t nbytes;
  tt_pjrt_buffer *buf;  // owned; NULL until first written
  tt_dtype dtype;       // of buf
  int64_t numel;        // of buf (flat)
  int64_t dev_bytes;    // device bytes accounted for buf
  // Its value was lost: the deferred program that was to compute it failed.
  // Reading it is an error until it is written again.
  bool lost;
  // The executor's bookkeeping while a deferred program holds the storage
  // (a pending storage, a fresh result not yet run, has no buf: its value
  // exists only in that program).
  tt_exec_mark mark;
  // rt->buffers' list, while buf is set (a memory snapshot's segments).
  tt_storage *buf_prev, *buf_next;
  // Its bytes on the host (nbytes of them), current whenever set: with buf,
  // an evictable cache in rt->host's list (host_cached); without, the value
  // itself, in dtype/numel, uploaded when a program reads it (see
  // rt->host in runtime.h).
  char *host;
  bool host_cached;
  tt_storage *host_prev, *host_next;
};

// Replaces the storage's buffer (taking ownership of `b`) and updates the
// memory counters; the executor in use lets go of the storage first. `b`
// may be NULL.
void tt_storage_set_buffer(tt_storage *s, tt_pjrt_buffer *b, tt_dtype dtype,
                           int64_t numel);
// Hands the storage's buffer over without destroying it (the counters keep
// counting it; the new owner gives it back with tt_storage_release_bytes).
tt_pjrt_buffer *tt_storage_take_buffer(tt_storage *s, int64_t *out_bytes);
// Destroys a buffer taken with tt_storage_take_buffer and uncounts it.
void tt_storage_release_buffer(tt_runtime *rt, tt_pjrt_buffer *b, int64_t bytes);
// Makes sure the storage has a buffer: its host value uploaded, or zeros of
// `dtype` when it has no value at all.
tt_status tt_storage_materialize(tt_storage *s, tt_dtype dtype);
// tt_storage_destroy with rt->mu already held (a storage the runtime made
// for itself: a spill's dense copy).
void tt_storage_destroy_locked(tt_storage *s);
// Frees a storage that never held a buffer nor was seen by an executor
// (a fresh result whose op failed before it ran).
void tt_storage_free_unused(tt_storage *s);

// Elements of a view (the product of its sizes).
int64_t tt_view_numel(const tt_tensor *t);
// True when the view is exactly its whole storage, densely (row-major,
// offset 0, numel * element size == the storage's bytes).
bool tt_view_is_whole(const tt_tensor *t);

// The facts lowering reads (lower/program.h): a tt_storage_facts_fn.
void tt_storage_facts_of(const tt_storage *s, tt_storage_facts *out);

#endif
