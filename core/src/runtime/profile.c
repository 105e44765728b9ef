// profile.c — one event per launched program while profiling is on.
//
// The events sit in a ring of `cap` slots, written at launch with rt->mu
// held; event number `tag` (1, 2, ... since the runtime started) goes to
// slot tag % cap. A program's end time comes later, from its completion
// event's callback on a plugin thread (or at once, when the launch already
// finished): that callback takes only the ring's own small lock, `stamp_mu`,
// never rt->mu, and finds its slot by its tag, so a slot reused since (the
// ring wrapped) is left alone.
//
// Several readers may record at once (torch.profiler's session through the
// shim's Kineto plugin, torchtpu.profiler.trace): start and stop count them,
// recording is on while one is, and each reads the events after the mark it
// took at its start (tt_runtime_profile_mark / _read_since).
//
// Each event carries the correlation id its host thread had set at launch
// (tt_profile_set_correlation): the profiler's id of the ATen op the program
// ran under, which links device time to that op. It is thread-local state,
// not the runtime's, because the profiler keeps it per host thread (autograd
// runs backward ops on a thread of its own).
//
// Leaves out: plugin-side (per-HLO) timing; host copies and compiles.
#include "runtime/profile.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/executor.h"
#include "runtime/runtime.h"

typedef struct slot {
  tt_profile_event ev;
  uint64_t tag;  // the event's tag (p->recorded when it was written); 0: empty
} slot;

struct tt_profile {
  bool on;
  int users;           // readers recording now (start minus stop)
  pthread_mutex_t stamp_mu;  // guards ring, cap and slot contents
  slot *ring;
  int cap;
  uint64_t start_tag;  // tag of the first event since the last start
  uint64_t recorded;   // events recorded since creation; the last tag
  atomic_int inflight;  // completion callbacks not called yet
};

typedef struct stamp {  // a completion callback's argument
  tt_profile *p;
  uint64_t tag;
} stamp;

static _Thread_local uint64_t tls_correlation;

uint64_t tt_profile_set_correlation(uint64_t id) {
  uint64_t old = tls_correlation;
  tls_correlation = id;
  return old;
}

int64_t tt_runtime_profile_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

bool tt_profile_on(const tt_runtime *rt) { return rt->profile && rt->profile->on; }

// --- recording ---------------------------------------------------------------------------

static int64_t sum_bytes(tt_pjrt *pj, tt_pjrt_buffer *const *bufs, int n) {
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    int64_t b = bufs[i] ? tt_pjrt_buffer_device_bytes(pj, bufs[i]) : 0;
    if (b > 0) total += b;
  }
  return total;
}

static void stamp_ready(void *arg, bool ok) {
  stamp *s = arg;
  int64_t now = tt_runtime_profile_now_ns();
  tt_profile *p = s->p;
  pthread_mutex_lock(&p->stamp_mu);
  slot *sl = &p->ring[s->tag % (uint64_t)p->cap];  // the ring may have grown since
  if (sl->tag == s->tag) {
    sl->ev.end_ns = now;
    sl->ev.failed = !ok;
  }
  pthread_mutex_unlock(&p->stamp_mu);
  atomic_fetch_sub(&p->inflight, 1);
  free(s);
}

// Writes one event into the ring, then asks for its end time; rt->mu held.
static void record(tt_runtime *rt, tt_profile_kind kind, const char *name, int device,
                   int64_t start, int64_t launched, int64_t bytes_in, int64_t bytes_out,
                   tt_pjrt_event *done) {
  tt_profile *p = rt->profile;
  pthread_mutex_lock(&p->stamp_mu);
  uint64_t tag = ++p->recorded;
  slot *sl = &p->ring[tag % (uint64_t)p->cap];
  memset(sl, 0, sizeof *sl);
  sl->tag = tag;
  snprintf(sl->ev.name, sizeof sl->ev.name, "%s", name ? name : "?");
  sl->ev.kind = (int32_t)kind;
  sl->ev.device = device;
  sl->ev.start_ns = start;
  sl->ev.launched_ns = launched;
  sl->ev.bytes_in = bytes_in;
  sl->ev.bytes_out = bytes_out;
  sl->ev.seq = tag - p->start_tag;
  sl->ev.correlation = tls_correlation;
  pthread_mutex_unlock(&p->stamp_mu);
  if (!done) return;
  stamp *s = malloc(sizeof *s);
  if (!s) return;  // the event keeps end_ns 0: "not known"
  *s = (stamp){p, tag};
  atomic_fetch_add(&p->inflight, 1);
  // Not under stamp_mu: an event already ready calls back in this thread.
  tt_status st = tt_pjrt_event_on_ready(rt->pjrt, done, stamp_ready, s);
  if (st) {
    tt_status_free(st);
    atomic_fetch_sub(&p->inflight, 1);
    free(s);
  }
}

tt_status tt_profile_execute(tt_runtime *rt, tt_profile_kind kind, const char *name,
                             tt_pjrt_exe *e, int device, tt_pjrt_buffer *const *args,
                             int nargs, const bool *donate, tt_pjrt_buffer **outs,
                             tt_pjrt_event **out_done) {
  if (!tt_profile_on(rt)) {
    // A synchronous plugin (XLA's CPU plugin, run inline) has finished the
    // program when the launch returns, and a failed program fails the launch
    // or its outputs: no completion event to ask for (making and destroying
    // one costs a sixth of a tiny op's launch there).
    if (out_done) *out_done = NULL;
    return tt_pjrt_execute(rt->pjrt, e, device, args, nargs, donate, outs,
                           rt->info.asynchronous ? out_done : NULL);
  }
  int64_t start = tt_runtime_profile_now_ns();
  int64_t bytes_in = sum_bytes(rt->pjrt, args, nargs);  // before donated ones are gone
  TT_RETURN_IF_ERROR(tt_pjrt_execute(rt->pjrt, e, device, args, nargs, donate, outs,
                                     out_done));
  int64_t launched = tt_runtime_profile_now_ns();
  int nouts = tt_pjrt_exe_num_outputs(rt->pjrt, e);
  record(rt, kind, name, device, start, launched, bytes_in,
         sum_bytes(rt->pjrt, outs, nouts), *out_done);
  return NULL;
}

tt_status tt_profile_execute_replicated(tt_runtime *rt, const char *name,
                                        tt_pjrt_exe *e, int ndev,
                                        tt_pjrt_buffer *const *args, int nargs,
                                        tt_pjrt_buffer **outs,
                                        tt_pjrt_event **out_done) {
  if (!tt_profile_on(rt))
    return tt_pjrt_execute_replicated(rt->pjrt, e, ndev, args, nargs, outs, out_done);
  int64_t start = tt_runtime_profile_now_ns();
  TT_RETURN_IF_ERROR(tt_pjrt_execute_replicated(rt->pjrt, e, ndev, args, nargs, outs,
                                                out_done));
  int64_t launched = tt_runtime_profile_now_ns();
  int nouts = tt_pjrt_exe_num_outputs(rt->pjrt, e);
  for (int d = 0; d < ndev; d++)
    record(rt, TT_PROFILE_COLLECTIVE, name, d, start, launched,
           sum_bytes(rt->pjrt, args + (size_t)d * nargs, nargs),
           sum_bytes(rt->pjrt, outs + (size_t)d * nouts, nouts),
           out_done ? out_done[d] : NULL);
  return NULL;
}

void tt_profile_destroy(tt_profile *p) {
  if (!p) return;
  if (atomic_load(&p->inflight) > 0) return;  // a callback may still come
  pthread_mutex_destroy(&p->stamp_mu);
  free(p->ring);
  free(p);
}

// --- public ------------------------------------------------------------------------------

// A ring of `cap` slots holding the events of `old` that still fit (each at
// tag % cap); NULL when out of memory. stamp_mu held.
static slot *regrow(const tt_profile *p, int cap) {
  slot *ring = calloc((size_t)cap, sizeof *ring);
  if (!ring) return NULL;
  for (int i = 0; i < p->cap; i++) {
    const slot *old = &p->ring[i];
    if (old->tag && old->tag + (uint64_t)cap > p->recorded)  // among the newest cap
      ring[old->tag % (uint64_t)cap] = *old;
  }
  return ring;
}

tt_status tt_runtime_profile_start(tt_runtime *rt, int capacity) {
  if (!rt) return tt_make_status(TT_INVALID_ARGUMENT, "profile start: NULL runtime");
  if (capacity <= 0) capacity = 65536;
  tt_status st = NULL;
  pthread_mutex_lock(&rt->mu);
  tt_profile *p = rt->profile;
  if (!p) {
    p = calloc(1, sizeof *p);
    if (!p) {
      st = tt_make_status(TT_RESOURCE_EXHAUSTED, "profile start: out of memory");
      goto done;
    }
    pthread_mutex_init(&p->stamp_mu, NULL);
    rt->profile = p;
  }
  pthread_mutex_lock(&p->stamp_mu);
  // A reader joining others may grow the ring, never shrink it under them.
  if (p->users == 0 ? p->cap != capacity : p->cap < capacity) {
    slot *ring = regrow(p, capacity);
    if (!ring) {
      st = tt_make_status(TT_RESOURCE_EXHAUSTED,
                          "profile start: out of memory for %d events", capacity);
    } else {
      free(p->ring);
      p->ring = ring;
      p->cap = capacity;
    }
  }
  if (!st) {
    if (p->users == 0) p->start_tag = p->recorded + 1;
    p->users++;
    p->on = true;
  }
  pthread_mutex_unlock(&p->stamp_mu);
done:
  pthread_mutex_unlock(&rt->mu);
  return st;
}

void tt_runtime_profile_stop(tt_runtime *rt) {
  if (!rt) return;
  pthread_mutex_lock(&rt->mu);
  tt_profile *p = rt->profile;
  if (p && p->users > 0 && --p->users == 0) p->on = false;
  pthread_mutex_unlock(&rt->mu);
}

bool tt_runtime_profile_enabled(tt_runtime *rt) {
  if (!rt) return false;
  pthread_mutex_lock(&rt->mu);
  bool on = tt_profile_on(rt);
  pthread_mutex_unlock(&rt->mu);
  return on;
}

tt_status tt_runtime_profile_settle(tt_runtime *rt, int timeout_ms) {
  if (!rt) return tt_make_status(TT_INVALID_ARGUMENT, "profile settle: NULL runtime");
  pthread_mutex_lock(&rt->mu);
  // Pending fused work runs now; an error in it is kept for the caller's next
  // synchronize (the runtime's deferred error), as the profiler has no one
  // to raise it to.
  tt_status fl = tt_exec_flush(rt->exec);
  if (fl && !rt->deferred) rt->deferred = fl;
  else tt_status_free(fl);
  tt_profile *p = rt->profile;
  pthread_mutex_unlock(&rt->mu);
  if (!p) return NULL;
  struct timespec nap = {0, 200000};  // 0.2 ms
  for (int64_t waited_us = 0; atomic_load(&p->inflight) > 0; waited_us += 200) {
    if (waited_us >= (int64_t)timeout_ms * 1000)
      return tt_make_status(TT_FAILED_PRECONDITION, "profile settle: %d programs still "
                            "running after %d ms", atomic_load(&p->inflight), timeout_ms);
    nanosleep(&nap, NULL);
  }
  return NULL;
}

uint64_t tt_runtime_profile_mark(tt_runtime *rt) {
  uint64_t mark = 0;
  if (!rt) return 0;
  pthread_mutex_lock(&rt->mu);
  if (rt->profile) {
    pthread_mutex_lock(&rt->profile->stamp_mu);
    mark = rt->profile->recorded;
    pthread_mutex_unlock(&rt->profile->stamp_mu);
  }
  pthread_mutex_unlock(&rt->mu);
  return mark;
}

tt_status tt_runtime_profile_read_since(tt_runtime *rt, uint64_t mark,
                                        tt_profile_event *out, int cap, int *out_n) {
  if (!rt || !out_n || (cap > 0 && !out))
    return tt_make_status(TT_INVALID_ARGUMENT, "profile read: NULL argument");
  *out_n = 0;
  pthread_mutex_lock(&rt->mu);
  tt_profile *p = rt->profile;
  if (p && p->cap > 0) {
    pthread_mutex_lock(&p->stamp_mu);
    uint64_t total = p->recorded > mark ? p->recorded - mark : 0;
    uint64_t kept = total < (uint64_t)p->cap ? total : (uint64_t)p->cap;
    int n = kept < (uint64_t)(cap > 0 ? cap : 0) ? (int)kept : (cap > 0 ? cap : 0);
    for (int i = 0; i < n; i++) {  // the oldest kept first
      uint64_t tag = p->recorded - kept + 1 + (uint64_t)i;
      out[i] = p->ring[tag % (uint64_t)p->cap].ev;
    }
    *out_n = n;
    pthread_mutex_unlock(&p->stamp_mu);
  }
  pthread_mutex_unlock(&rt->mu);
  return NULL;
}

tt_status tt_runtime_profile_read(tt_runtime *rt, tt_profile_event *out, int cap,
                                  int *out_n) {
  uint64_t start = 1;
  if (rt) {
    pthread_mutex_lock(&rt->mu);
    if (rt->profile) start = rt->profile->start_tag;
    pthread_mutex_unlock(&rt->mu);
  }
  return tt_runtime_profile_read_since(rt, start - 1, out, cap, out_n);
}

void tt_runtime_profile_counts(tt_runtime *rt, int64_t *out_recorded,
                               int64_t *out_dropped) {
  int64_t rec = 0, drop = 0;
  if (rt) {
    pthread_mutex_lock(&rt->mu);
    tt_profile *p = rt->profile;
    if (p) {
      pthread_mutex_lock(&p->stamp_mu);
      uint64_t total = p->recorded + 1 - p->start_tag;
      rec = (int64_t)p->recorded;
      drop = total > (uint64_t)p->cap ? (int64_t)(total - (uint64_t)p->cap) : 0;
      pthread_mutex_unlock(&p->stamp_mu);
    }
    pthread_mutex_unlock(&rt->mu);
  }
  if (out_recorded) *out_recorded = rec;
  if (out_dropped) *out_dropped = drop;
}
