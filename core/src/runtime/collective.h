// collective.h — device collectives over the devices of this process
// (internal; collective.c). The public entry point is torchtpu.h's
// tt_collective_run.
//
// A collective is one replicated program (num_replicas = ndevices, replica i
// on device i) whose parameter is the flat input of one device and whose
// result is that device's flat output; PJRT launches it on every device at
// once. Owns nothing: the program cache owns the executable, the output
// storages own the result buffers.
#ifndef TT_RUNTIME_COLLECTIVE_H
#define TT_RUNTIME_COLLECTIVE_H

#include <stdint.h>

#include "hlo/hlo.h"
#include "torchtpu.h"

// Builds the program of collective `d` on a flat input of `in_numel`
// elements of `dtype` into `b` (reset first) and finishes it: the text
// (borrowed from `b`) is a module for d->ndevices replicas. Writes the output's
// element count to `out_numel`. Element counts that don't divide are
// TT_INVALID_ARGUMENT.
tt_status tt_collective_program(tt_hlo *b, const tt_collective_desc *d,
                                tt_dtype dtype, int64_t in_numel,
                                int64_t *out_numel, const char **out_text,
                                size_t *out_len);

#endif
