// program.h — what lowering produces: a program's parameters, outputs and
// result metas (the StableHLO text itself stays in the builder that made it).
//
// Lowering knows nothing of the runtime. It sees storages only through
// tt_storage_facts, which the executor supplies (tt_lower_options), and
// describes in a tt_program how to feed and unpack the compiled program on
// every later call with the same signature: which storage buffers, scalar
// values, view offsets and random states go in, in which order, and which
// outputs are fresh tensors or the new buffers of written storages. The
// runtime turns a tt_program plus an executable into something it runs.
#ifndef TT_LOWER_PROGRAM_H
#define TT_LOWER_PROGRAM_H

#include <stdbool.h>
#include <stdint.h>

#include "torchtpu_types.h"

// --- storages, as lowering sees them ----------------------------------------------

// What a program's reader needs to know of a storage: its size, and the flat
// buffer that holds its value now (a storage may have none yet: it then
// reads as zeros of the view's dtype).
typedef struct tt_storage_facts {
  int64_t nbytes;
  bool has_buffer;
  tt_dtype dtype;  // of the buffer, when has_buffer
  int64_t numel;   // of the buffer, when has_buffer
} tt_storage_facts;

// Supplied by the executor: fills `out` for `s`.
typedef void (*tt_storage_facts_fn)(const tt_storage *s, tt_storage_facts *out);

// The flat buffer a program reads for a view of dtype `view_dtype`: the
// buffer's dtype and length, or, for a storage without one, the view dtype
// over the storage's bytes. These two facts are part of every signature.
tt_dtype tt_facts_buffer_dtype(const tt_storage_facts *f, tt_dtype view_dtype);
int64_t tt_facts_buffer_numel(const tt_storage_facts *f, tt_dtype view_dtype);

// --- the program ---------------------------------------------------------------------

typedef enum tt_param_kind {
  TT_PARAM_STORAGE,  // the flat buffer of a tensor slot's storage
  TT_PARAM_SCALAR,   // a Scalar argument, converted to `dtype` on the host
  TT_PARAM_OFFSET,   // a tensor slot's storage offset (i64), for dynamic_slice
  TT_PARAM_RNG,      // ui64[2] (seed, offset) of a generator
} tt_param_kind;

typedef struct tt_param {
  tt_param_kind kind;
  int32_t slot;    // STORAGE, OFFSET: tensor slot
  int32_t arg;     // SCALAR: argument; RNG: generator argument or -1
  int32_t item;    // SCALAR: list item when `arg` is a Scalar[] list
  tt_dtype dtype;  // STORAGE: buffer dtype (zeros if still empty); SCALAR
  bool imag;       // SCALAR: the imaginary part of a complex Scalar (else the real
                   // part): a complex Scalar is two real parameters, one 8-byte part each
  int64_t numel;   // STORAGE: flat elements
  uint64_t count;  // RNG: numbers drawn per call
} tt_param;

// One output of the program.
typedef struct tt_out {
  bool fresh;      // a new tensor (else: the new buffer of a slot's storage)
  int32_t slot;    // storage write: the tensor slot whose storage it replaces
  tt_dtype dtype;  // of the flat buffer
  int64_t numel;
} tt_out;

// A value precondition PyTorch checks on the host (an index in range, a
// class target below C, a non-zero integer divisor) that here holds on the
// device: the program computes it as one more output, an i64[2] (violated:
// 0 or 1, an offending value), after its `outs`. The runtime reads the flag
// at the next synchronisation and raises with `msg` (device-side checks).
typedef struct tt_check {
  tt_code code;     // TT_OUT_OF_RANGE: an IndexError in Python; else RuntimeError
  const char *msg;  // static (a string literal): PyTorch's text; each "{}" is
                    // replaced by the offending value, then by args[0], args[1]
  int64_t args[2];
} tt_check;

// Owns its arrays; free with tt_program_deinit. A zeroed value is empty.
typedef struct tt_program {
  tt_param *params;
  int nparams;
  tt_out *outs;
  int nouts;
  tt_check *checks;  // one program output each, after the nouts outs
  int nchecks;
  tt_op_result *results;  // metas of every result (fresh and dest), in dest
  int nresults;           // order; storages NULL
} tt_program;

void tt_program_deinit(tt_program *p);

// The output that rewrites storage parameter `param`'s storage with the
// parameter's flat type (XLA may write it into the parameter's buffer when
// that buffer is donated: tf.aliasing_output), or -1. The module a program
// is lowered to declares exactly these aliases.
int tt_program_param_alias(const tt_program *p, int param);

#endif
