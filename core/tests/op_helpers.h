// op_helpers.h — building op calls in the core's C tests: dense float32
// tensors over fresh storages, argument values, and aten::add.Tensor (the op
// the runtime tests drive). Include after check.h, once per test binary.
#ifndef TT_TESTS_OP_HELPERS_H
#define TT_TESTS_OP_HELPERS_H

#include "check.h"
#include "torchtpu.h"

typedef struct dense {
  tt_storage *s;
  int64_t sizes[2], strides[2];
  tt_tensor t;
} dense;

// An r x c float32 tensor over a fresh storage, filled from `host` if given.
static inline void make_dense(tt_runtime *rt, dense *d, int64_t r, int64_t c,
                              const float *host) {
  d->sizes[0] = r; d->sizes[1] = c;
  d->strides[0] = c; d->strides[1] = 1;
  d->s = NULL;
  CHECK_OK(tt_storage_create(rt, 0, r * c * 4, &d->s));
  d->t = (tt_tensor){d->s, TT_F32, 2, d->sizes, d->strides, 0};
  if (host && d->s) CHECK_OK(tt_tensor_upload(rt, &d->t, host));
}

static inline tt_value tensor_value(const tt_tensor *t) {
  tt_value v = {.kind = TT_VALUE_TENSOR};
  v.u.tensor = *t;
  return v;
}

// A Python float.
static inline tt_value scalar_value(double f) {
  tt_value v = {.kind = TT_VALUE_SCALAR};
  v.u.scalar = (tt_scalar){.dtype = TT_F64, .wrapped = true, .f = f};
  return v;
}

// a + alpha * b into a fresh storage (NULL on error, status in *st).
static inline tt_storage *add(tt_runtime *rt, const tt_tensor *a,
                              const tt_tensor *b, double alpha, tt_status *st) {
  tt_value args[3] = {tensor_value(a), tensor_value(b), scalar_value(alpha)};
  tt_dest dest = {-1, -1};
  tt_op_call call = {tt_op_lookup("aten::add.Tensor"), 0, TT_F32, args, 3, &dest, 1, false};
  tt_op_result res[1];
  int32_t n = 0;
  *st = tt_op_run(rt, &call, res, 1, &n);
  return !*st && n == 1 ? res[0].storage : NULL;
}

// add(), reporting a failure as a check failure.
static inline tt_storage *add_ok(tt_runtime *rt, const tt_tensor *a,
                                 const tt_tensor *b, double alpha) {
  tt_status st = NULL;
  tt_storage *s = add(rt, a, b, alpha, &st);
  CHECK(st || s, "add.Tensor returned no fresh result");
  CHECK_OK(st);
  return s;
}

#endif
