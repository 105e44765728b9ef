// cache.h — what the eager executor remembers between calls (internal).
//
// Two levels:
//  - the signature cache maps an op call's signature (op, argument metadata,
//    structural values; never scalar values) to a plan: the compiled program,
//    how to assemble its arguments, and where its outputs go. A hit skips
//    lowering entirely.
//  - the program cache maps StableHLO text to its compiled executable, so
//    signatures that lower to the same program share one compile.
#ifndef TT_RUNTIME_CACHE_H
#define TT_RUNTIME_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "pjrt/pjrt.h"
#include "torchtpu.h"

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
  tt_dtype dtype;  // STORAGE: buffer dtype (zeros if still empty); SCALAR
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

typedef struct tt_plan {
  bool unimplemented;    // no lowering: fall back without trying again
  char *message;         // why unimplemented (owned)
  tt_pjrt_exe *exe;      // borrowed from the program cache
  tt_param *params;      // owned
  int nparams;
  tt_out *outs;          // owned
  int nouts;
  tt_op_result *results; // owned: metas of every result (fresh and dest)
  int nresults;
} tt_plan;

void tt_plan_free(tt_plan *p);

typedef struct tt_sig_cache tt_sig_cache;
tt_status tt_sig_cache_create(tt_sig_cache **out);
void tt_sig_cache_destroy(tt_sig_cache *c, tt_pjrt *p);
// Borrowed plan or NULL.
tt_plan *tt_sig_cache_find(tt_sig_cache *c, const void *key, size_t len);
// Takes ownership of `plan`.
tt_status tt_sig_cache_insert(tt_sig_cache *c, const void *key, size_t len,
                              tt_plan *plan);

typedef struct tt_prog_cache tt_prog_cache;
tt_status tt_prog_cache_create(tt_prog_cache **out);
void tt_prog_cache_destroy(tt_prog_cache *c, tt_pjrt *p);
// Borrowed executable or NULL.
tt_pjrt_exe *tt_prog_cache_find(tt_prog_cache *c, const char *text,
                                size_t len);
// Takes ownership of `exe`.
tt_status tt_prog_cache_insert(tt_prog_cache *c, const char *text, size_t len,
                               tt_pjrt_exe *exe);

#endif
