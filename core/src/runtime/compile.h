// compile.h — compiling programs through the caches (internal; compile.c).
//
// Every executor compiles through tt_runtime_compile, so the program cache,
// the persistent directory, the explainer and the counters see every
// program. Owns nothing itself: the program cache (rt->progs) owns the
// executables; callers borrow them.
#ifndef TT_RUNTIME_COMPILE_H
#define TT_RUNTIME_COMPILE_H

#include <stddef.h>

#include "pjrt/pjrt.h"
#include "torchtpu.h"

// The executable for StableHLO `text`: from the program cache, else loaded
// from disk or compiled, and cached (rt->mu held). Borrowed from the cache.
tt_status tt_runtime_compile(tt_runtime *rt, const char *text, size_t len,
                             tt_pjrt_exe **out);

#endif
