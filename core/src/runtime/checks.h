// checks.h — device-side checks: the flags programs computed, read at the
// next synchronisation (internal; checks.c).
//
// A lowering rule with a value precondition (an index in range, a class
// target below C, a non-zero integer divisor) makes its program compute an
// i64[2] flag (violated, an offending value) beside its results (program.h's
// tt_check). Every executor hands the flag buffers of the programs it
// launched to the runtime, which keeps them pending, in launch order, and
// reads them all at the next synchronisation (a host read, synchronize(),
// and after each op in debug eager): the first violated one becomes the
// error, CUDA's device-side assert semantics. Reading never happens per op
// in strict or fused eager; past MAX pending flags (checks.c) they are read
// at once, a synchronisation of its own.
//
// Owns: the pending flag buffers (rt->checks). Every read frees them all,
// violated or not, so the device stays usable after an error.
#ifndef TT_RUNTIME_CHECKS_H
#define TT_RUNTIME_CHECKS_H

#include "base/status.h"
#include "lower/program.h"
#include "pjrt/pjrt.h"
#include "torchtpu.h"

typedef struct tt_pending_check {
  tt_pjrt_buffer *buf;  // owned: i64[2] (violated, value)
  tt_check check;       // its message is static
  int32_t op;           // the op whose program computed it
} tt_pending_check;

// Takes `buf` (the flag of `check`, computed by op `op`). Reads every
// pending flag first when the list is full (the error, if any, is returned).
// rt->mu held.
tt_status tt_checks_push(tt_runtime *rt, tt_pjrt_buffer *buf, const tt_check *check,
                         int32_t op);

// Reads and frees every pending flag; the first violated one (in launch
// order) is the error: the check's code, PyTorch's message, then the op.
// rt->mu held.
tt_status tt_checks_read(tt_runtime *rt);

// Frees every pending flag unread (the runtime ends). rt->mu held or unshared.
void tt_checks_drop(tt_runtime *rt);

#endif
