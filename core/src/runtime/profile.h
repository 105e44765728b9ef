// profile.h — per-launch program events while profiling is on (profile.c).
//
// The executors launch through tt_profile_execute (and collectives through
// tt_profile_execute_replicated) instead of tt_pjrt_execute: with profiling
// off that is the plain launch behind one flag test; with it on, the launch
// is stamped, its parameter and result bytes summed, and the program's
// completion event stamps the end time from the plugin's thread.
//
// Leaves out: the plugin's own (per-HLO) profiles, and host copies.
#ifndef TT_RUNTIME_PROFILE_H
#define TT_RUNTIME_PROFILE_H

#include "pjrt/pjrt.h"
#include "torchtpu.h"

typedef struct tt_profile tt_profile;  // owned by tt_runtime (rt->profile)

// True while recording; rt->mu held. Callers that build a name (fused
// flushes) build it only then.
bool tt_profile_on(const tt_runtime *rt);

// tt_pjrt_execute, recording one event named `name` (copied; NULL: "?") of
// `kind` when profiling is on; rt->mu held. `out_done` must be non-NULL.
// `donate`: as tt_pjrt_execute's (NULL: nothing donated).
tt_status tt_profile_execute(tt_runtime *rt, tt_profile_kind kind, const char *name,
                             tt_pjrt_exe *e, int device, tt_pjrt_buffer *const *args,
                             int nargs, const bool *donate, tt_pjrt_buffer **outs,
                             tt_pjrt_event **out_done);

// tt_pjrt_execute_replicated, recording one event per device.
tt_status tt_profile_execute_replicated(tt_runtime *rt, const char *name,
                                        tt_pjrt_exe *e, int ndev,
                                        tt_pjrt_buffer *const *args, int nargs,
                                        tt_pjrt_buffer **outs,
                                        tt_pjrt_event **out_done);

// Frees the ring, unless a completion callback may still come (then it is
// left to the process: a callback never touches freed memory).
void tt_profile_destroy(tt_profile *p);

#endif
