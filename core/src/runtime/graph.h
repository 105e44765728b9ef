// graph.h — graph capture and replay (internal; graph.c).
//
// The public API is torchtpu.h's tt_graph_*. A capture is an executor
// (executor.h) that wraps the deferred executor in use while a graph is
// recorded: rt->capture while it lasts. Owns: the capture's declared inputs
// and, after capture_end, the tt_graph (its input descriptions, parameter
// buffers holding captured scalars and zeros, output map). Borrows: the
// executable (program cache), the generators it redraws from, the storages
// passed to each replay.
#ifndef TT_RUNTIME_GRAPH_H
#define TT_RUNTIME_GRAPH_H

#include "runtime/executor.h"
#include "torchtpu.h"

#endif
