// background.h — compiling programs on a worker thread (internal; background.c).
//
// Strict eager's cold signatures (strict.c) run on the host while their
// program compiles here, so a first call never waits for XLA. One worker
// thread, started on the first job, at low scheduling priority (it uses the
// cores the caller leaves idle). Queued jobs are taken hottest first: the
// signature called most often since it was queued, so a loop's recurring
// ops are ready before the one-off shapes of a growing sequence.
//
// The worker touches nothing but the plugin's compiler (PJRT clients are
// thread-safe) and the jobs under the queue's own mutex; the caller adopts
// a finished executable into the program cache under rt->mu.
#ifndef TT_RUNTIME_BACKGROUND_H
#define TT_RUNTIME_BACKGROUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pjrt/pjrt.h"
#include "torchtpu.h"

typedef struct tt_bg tt_bg;
typedef struct tt_bg_job tt_bg_job;

// `opts` (a serialized CompileOptionsProto, copied) is what every job
// compiles with; NULL: the client's default options.
tt_status tt_bg_create(tt_pjrt *pjrt, const void *opts, size_t opts_len, tt_bg **out);
// Stops the worker: waits for the running compile (if any), joins the
// thread; queued jobs stay queued (never done). Submits after it queue only.
// At exit: a thread inside XLA's compiler while the process tears down its
// static objects crashes.
void tt_bg_stop(tt_bg *bg);
// Stops the worker and frees the queue. Every job must have been taken or
// cancelled first. NULL-safe.
void tt_bg_destroy(tt_bg *bg);

// Queues a compile of `text` (copied). The job belongs to the caller until
// it is taken (tt_bg_take) or cancelled (tt_bg_cancel).
tt_status tt_bg_submit(tt_bg *bg, const char *text, size_t len, tt_bg_job **out);
// One more call of the job's signature: a hotter job is compiled sooner.
void tt_bg_touch(tt_bg_job *job);
// True once the job's compile has finished (successfully or not).
bool tt_bg_done(tt_bg_job *job);
// Hands over a finished job's executable (owned by the caller) and its
// compile seconds, or its error, and frees the job.
tt_status tt_bg_take(tt_bg_job *job, tt_pjrt_exe **out, double *out_seconds);
// Frees the job: now if it is queued or finished, after its compile if it
// is running. NULL-safe.
void tt_bg_cancel(tt_bg_job *job);

// Waits until no job is queued or running (queued jobs are compiled, not
// dropped). Returns the number of jobs it waited for.
int64_t tt_bg_wait_idle(tt_bg *bg);
// Jobs queued or running.
int64_t tt_bg_pending(tt_bg *bg);

#endif
