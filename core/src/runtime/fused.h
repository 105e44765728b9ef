// fused.h — the fused-eager executor (internal; fused.c).
//
// Ops are lowered at once (a user error raises at the op) into one deferred
// program, flushed as a single launch when a value is needed, at an explicit
// sync, at a mode switch or when the program grows past its bound. Owns: the
// program's builder, its parameters (and the buffers of storages that died
// while it read them), the list of storages it writes. Borrows: the runtime
// context, the storages it holds (through their tt_exec_mark), the program
// cache's executables. It also implements the executor interface's capture
// entries, on which graph capture (graph.c) is built; it knows nothing of
// graphs beyond them.
#ifndef TT_RUNTIME_FUSED_H
#define TT_RUNTIME_FUSED_H

#include "runtime/executor.h"

tt_status tt_fused_create(tt_runtime *rt, tt_executor **out);

#endif
