// compile.h — compiling programs through the caches (internal; compile.c).
//
// Every executor compiles through tt_runtime_compile, so the program cache,
// the persistent directory, the explainer and the counters see every
// program. Owns nothing itself: the program cache (rt->progs) owns the
// executables; callers borrow them.
#ifndef TT_RUNTIME_COMPILE_H
#define TT_RUNTIME_COMPILE_H

#include <stdbool.h>
#include <stddef.h>

#include "pjrt/pjrt.h"
#include "torchtpu.h"

// The executable for StableHLO `text`: from the program cache, else loaded
// from disk or compiled, and cached (rt->mu held). Borrowed from the cache.
tt_status tt_runtime_compile(tt_runtime *rt, const char *text, size_t len,
                             tt_pjrt_exe **out);

// The same with explicit compile options (serialized CompileOptionsProto,
// e.g. tt_pjrt_compile_options_replicated). The caches key on the text (and
// the client's compile environment), not on `opts`: the text must itself
// say everything the options decide (collective.c writes the replica count
// and device ids into it).
tt_status tt_runtime_compile_with_options(tt_runtime *rt, const char *text,
                                          size_t len, const void *opts,
                                          size_t opts_len, tt_pjrt_exe **out);

// Per-op programs (strict eager). A `small` one (its tensors within
// rt->host_tier_bytes) is compiled with rt->op_opts, the optimisation level
// TORCHTPU_OP_OPT_LEVEL asks for (the plugin's own by default), a larger one
// always at the plugin's own. The caches key on the text alone: any
// executable of a program is a valid one.
tt_status tt_runtime_compile_op(tt_runtime *rt, const char *text, size_t len, bool small,
                                tt_pjrt_exe **out);

// The executable for `text` if the program cache or the persistent
// directory has it, else *out NULL; never compiles (rt->mu held).
tt_status tt_runtime_find_compiled(tt_runtime *rt, const char *text, size_t len,
                                   tt_pjrt_exe **out);

// Takes `exe`, compiled from `text` in `seconds` outside the lock (the
// background compiler), into the program cache as a compile is (counted,
// explained, written to disk); *out is the cached executable, borrowed
// (rt->mu held).
tt_status tt_runtime_adopt_compiled(tt_runtime *rt, const char *text, size_t len,
                                    tt_pjrt_exe *exe, double seconds, tt_pjrt_exe **out);

#endif
