// strict.h — the strict executor (internal; strict.c).
//
// Strict and debug eager: every op is its own program, compiled once per
// signature and launched asynchronously (debug mode waits for each one, in
// tt_runtime_track_event). Owns: the signature cache (plans: lowered program
// + borrowed executable). Borrows: the runtime context, the program cache.
#ifndef TT_RUNTIME_STRICT_H
#define TT_RUNTIME_STRICT_H

#include "runtime/executor.h"

tt_status tt_strict_create(tt_runtime *rt, tt_executor **out);

#endif
