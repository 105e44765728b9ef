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

// What one device's input is: the view's dtype and element count, and the
// flat buffer its storage holds (storages are untyped bytes: the buffer may
// have another element type, e.g. a uint8 storage viewed as float32; the
// program reinterprets its bits). Every device's input must agree.
typedef struct tt_collective_input {
  tt_dtype dtype;
  int64_t numel;
  tt_dtype buf_dtype;
  int64_t buf_numel;
} tt_collective_input;

// Builds the program of collective `d` on the flat input `in` into `b`
// (reset first) and finishes it: the text (borrowed from `b`) is a module
// for one replica (the caller sets the count). Writes the output's element
// count (of in->dtype) to `out_numel`. Element counts that don't divide, or
// a buffer whose bytes differ from the view's, are TT_INVALID_ARGUMENT.
tt_status tt_collective_program(tt_hlo *b, const tt_collective_desc *d,
                                const tt_collective_input *in,
                                int64_t *out_numel, const char **out_text,
                                size_t *out_len);

#endif
