// background.c — the background compiler: one worker thread, a queue of
// compile jobs taken hottest first. See background.h.
#include "runtime/background.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/status.h"

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state;

struct tt_bg_job {
  tt_bg *bg;
  tt_bg_job *prev, *next;  // in bg->jobs while queued or running
  char *text;              // owned until compiled
  size_t len;
  job_state state;
  bool cancelled;          // running when cancelled: freed by the worker
  int64_t calls;           // the priority: hotter first
  tt_pjrt_exe *exe;        // done: the result (owned until taken)
  tt_status status;        // done: the error, or NULL
  double seconds;
};

struct tt_bg {
  tt_pjrt *pjrt;
  void *opts;  // owned, may be NULL
  size_t opts_len;
  pthread_mutex_t mu;
  pthread_cond_t wake;   // a job was queued, or stop
  pthread_cond_t idle;   // a job finished
  tt_bg_job *jobs;       // queued and running jobs
  int64_t pending;       // jobs queued or running
  bool started, stop;
  bool boosted;  // the worker runs at its normal share, not only on idle cores
  pthread_t thread;
  pid_t pid;  // the process that started it: a fork's child has no worker to join
};

// A queued job called this often on the host boosts the worker out of
// SCHED_IDLE: a loop that keeps every core busy (PyTorch's intra-op threads
// spin between ops) would otherwise keep its hottest ops on the host forever.
enum { HOT_CALLS = 128 };

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void unlink_job(tt_bg_job *j) {
  if (j->prev) j->prev->next = j->next;
  else j->bg->jobs = j->next;
  if (j->next) j->next->prev = j->prev;
  j->prev = j->next = NULL;
}

static void free_job(tt_bg_job *j) {
  tt_pjrt_exe_destroy(j->bg->pjrt, j->exe);
  tt_status_free(j->status);
  free(j->text);
  free(j);
}

// The queued job called most often (ties: the oldest), or NULL.
static tt_bg_job *hottest(tt_bg *bg) {
  tt_bg_job *best = NULL;
  for (tt_bg_job *j = bg->jobs; j; j = j->next)
    if (j->state == JOB_QUEUED && (!best || j->calls >= best->calls)) best = j;
  return best;
}

// --- the worker -----------------------------------------------------------------------------

// The worker's scheduling: only idle cores (Linux's SCHED_IDLE), or, when
// boosted, the normal policy at nice 10. At nice 0 the compiles took the
// core PyTorch's second intra-op thread needs: a cold generate() ran 2x
// slower than with them at nice 10, and 10% faster again under SCHED_IDLE.
static void set_idle(pthread_t t, bool idle) {
#ifdef SCHED_IDLE
  struct sched_param p = {0};
  pthread_setschedparam(t, idle ? SCHED_IDLE : SCHED_OTHER, &p);
#else
  (void)t;
  (void)idle;
#endif
}

static void *worker(void *arg) {
  tt_bg *bg = arg;
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);  // kept under SCHED_OTHER
  set_idle(pthread_self(), true);
  pthread_mutex_lock(&bg->mu);
  for (;;) {
    tt_bg_job *j = NULL;
    while (!bg->stop && !(j = hottest(bg))) pthread_cond_wait(&bg->wake, &bg->mu);
    if (bg->stop) break;
    if (bg->boosted && j->calls < HOT_CALLS) {
      bg->boosted = false;
      set_idle(pthread_self(), true);
    }
    j->state = JOB_RUNNING;
    pthread_mutex_unlock(&bg->mu);
    double t0 = now_seconds();
    tt_pjrt_exe *exe = NULL;
    tt_status st = bg->opts ? tt_pjrt_compile_with_options(bg->pjrt, j->text, j->len,
                                                           bg->opts, bg->opts_len, &exe)
                            : tt_pjrt_compile(bg->pjrt, j->text, j->len, &exe);
    double seconds = now_seconds() - t0;
    pthread_mutex_lock(&bg->mu);
    unlink_job(j);
    bg->pending--;
    j->state = JOB_DONE;
    j->exe = exe;
    j->status = st;
    j->seconds = seconds;
    if (j->cancelled) free_job(j);
    pthread_cond_broadcast(&bg->idle);
  }
  pthread_mutex_unlock(&bg->mu);
  return NULL;
}

// --- the queue ------------------------------------------------------------------------------

tt_status tt_bg_create(tt_pjrt *pjrt, const void *opts, size_t opts_len, tt_bg **out) {
  *out = NULL;
  tt_bg *bg = calloc(1, sizeof *bg);
  if (!bg) return tt_make_status(TT_RESOURCE_EXHAUSTED, "background compiler: out of memory");
  bg->pjrt = pjrt;
  if (opts && opts_len) {
    bg->opts = malloc(opts_len);
    if (!bg->opts) {
      free(bg);
      return tt_make_status(TT_RESOURCE_EXHAUSTED, "background compiler: out of memory");
    }
    memcpy(bg->opts, opts, opts_len);
    bg->opts_len = opts_len;
  }
  pthread_mutex_init(&bg->mu, NULL);
  pthread_cond_init(&bg->wake, NULL);
  pthread_cond_init(&bg->idle, NULL);
  *out = bg;
  return NULL;
}

void tt_bg_stop(tt_bg *bg) {
  if (!bg) return;
  pthread_mutex_lock(&bg->mu);
  bool started = bg->started;
  bg->stop = true;
  bg->started = false;
  pthread_cond_broadcast(&bg->wake);
  pthread_mutex_unlock(&bg->mu);
  if (started && bg->pid == getpid()) pthread_join(bg->thread, NULL);
}

void tt_bg_destroy(tt_bg *bg) {
  if (!bg) return;
  tt_bg_stop(bg);
  while (bg->jobs) {  // not taken nor cancelled: a caller's leak, freed here
    tt_bg_job *j = bg->jobs;
    unlink_job(j);
    free_job(j);
  }
  pthread_cond_destroy(&bg->wake);
  pthread_cond_destroy(&bg->idle);
  pthread_mutex_destroy(&bg->mu);
  free(bg->opts);
  free(bg);
}

tt_status tt_bg_submit(tt_bg *bg, const char *text, size_t len, tt_bg_job **out) {
  *out = NULL;
  tt_bg_job *j = calloc(1, sizeof *j);
  char *copy = malloc(len ? len : 1);
  if (!j || !copy) {
    free(j);
    free(copy);
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "background compiler: out of memory");
  }
  memcpy(copy, text, len);
  *j = (tt_bg_job){.bg = bg, .text = copy, .len = len, .state = JOB_QUEUED, .calls = 1};
  pthread_mutex_lock(&bg->mu);
  tt_status st = NULL;
  if ((!bg->started || bg->pid != getpid()) && !bg->stop) {  // first job, or a fork's child
    if (pthread_create(&bg->thread, NULL, worker, bg) == 0) {
      bg->started = true;
      bg->pid = getpid();
    }
    else st = tt_make_status(TT_RESOURCE_EXHAUSTED, "background compiler: no thread");
  }
  if (!st) {
    j->next = bg->jobs;
    if (bg->jobs) bg->jobs->prev = j;
    bg->jobs = j;
    bg->pending++;
    pthread_cond_signal(&bg->wake);
  }
  pthread_mutex_unlock(&bg->mu);
  if (st) {
    free(copy);
    free(j);
    return st;
  }
  *out = j;
  return NULL;
}

void tt_bg_touch(tt_bg_job *j) {
  tt_bg *bg = j->bg;
  pthread_mutex_lock(&bg->mu);
  j->calls++;
  if (j->calls >= HOT_CALLS && j->state == JOB_QUEUED && !bg->boosted && bg->started) {
    bg->boosted = true;
    set_idle(bg->thread, false);
  }
  pthread_mutex_unlock(&bg->mu);
}

bool tt_bg_done(tt_bg_job *j) {
  pthread_mutex_lock(&j->bg->mu);
  bool done = j->state == JOB_DONE;
  pthread_mutex_unlock(&j->bg->mu);
  return done;
}

tt_status tt_bg_take(tt_bg_job *j, tt_pjrt_exe **out, double *out_seconds) {
  *out = NULL;
  pthread_mutex_lock(&j->bg->mu);
  bool done = j->state == JOB_DONE;
  pthread_mutex_unlock(&j->bg->mu);
  if (!done) return tt_make_status(TT_INTERNAL, "background compile taken before it finished");
  tt_status st = j->status;
  *out = j->exe;
  *out_seconds = j->seconds;
  j->status = NULL;
  j->exe = NULL;
  free_job(j);
  return st;
}

void tt_bg_cancel(tt_bg_job *j) {
  if (!j) return;
  tt_bg *bg = j->bg;
  pthread_mutex_lock(&bg->mu);
  if (j->state == JOB_RUNNING) {
    j->cancelled = true;  // the worker frees it
    pthread_mutex_unlock(&bg->mu);
    return;
  }
  if (j->state == JOB_QUEUED) {
    unlink_job(j);
    bg->pending--;
    pthread_cond_broadcast(&bg->idle);
  }
  pthread_mutex_unlock(&bg->mu);
  free_job(j);
}

int64_t tt_bg_wait_idle(tt_bg *bg) {
  pthread_mutex_lock(&bg->mu);
  int64_t n = bg->pending;
  while (bg->pending > 0 && bg->started) pthread_cond_wait(&bg->idle, &bg->mu);
  pthread_mutex_unlock(&bg->mu);
  return n;
}

int64_t tt_bg_pending(tt_bg *bg) {
  pthread_mutex_lock(&bg->mu);
  int64_t n = bg->pending;
  pthread_mutex_unlock(&bg->mu);
  return n;
}
