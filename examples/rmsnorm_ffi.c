// rmsnorm_ffi.c — an RMSNorm forward and backward as plain C kernels for
// torchtpu.kernels.c_op: no JAX, no C++, no rebuilding torchtpu. The device
// runs them through XLA's FFI (here on the CPU plugin's host memory).
//
//   y  = x * rstd * w,  rstd = 1 / sqrt(mean(x^2 over the last dim) + eps)
//   dx = rstd * (w*dy - x * rstd^2 * mean(w*dy*x)),  dw = sum over rows of dy * x * rstd
//
// x: float32 [..., D] (rows = product of the leading dims), w: float32 [D].
// Built by `make examples` into build/examples/librmsnorm_ffi.so.
#include <math.h>
#include <stdint.h>

#include "torchtpu_types.h"

#define EPS 1e-6f

// Rows and D of x, or 0 rows when the buffers don't fit the kernel.
static int64_t shape_of(const tt_kernel_buffer *x, const tt_kernel_buffer *w, int64_t *d) {
  if (x->dtype != TT_F32 || w->dtype != TT_F32 || x->rank < 1 || w->rank != 1) return -1;
  *d = x->dims[x->rank - 1];
  if (w->dims[0] != *d) return -1;
  int64_t rows = 1;
  for (int i = 0; i < x->rank - 1; i++) rows *= x->dims[i];
  return rows;
}

static float row_rstd(const float *x, int64_t d) {
  float ss = 0.0f;
  for (int64_t j = 0; j < d; j++) ss += x[j] * x[j];
  return 1.0f / sqrtf(ss / (float)d + EPS);
}

// ins: x, w; outs: y (x's shape).
const char *rmsnorm_forward(const tt_kernel_buffer *ins, int32_t nin, tt_kernel_buffer *outs,
                            int32_t nout) {
  int64_t d = 0;
  int64_t rows = nin == 2 && nout == 1 ? shape_of(&ins[0], &ins[1], &d) : -1;
  if (rows < 0) return "rmsnorm_forward wants float32 x [..., D], w [D] and one output";
  const float *x = ins[0].data, *w = ins[1].data;
  float *y = outs[0].data;
  for (int64_t r = 0; r < rows; r++) {
    float rstd = row_rstd(x + r * d, d);
    for (int64_t j = 0; j < d; j++) y[r * d + j] = x[r * d + j] * rstd * w[j];
  }
  return NULL;
}

// ins: x, w, dy; outs: dx (x's shape), dw (w's shape).
const char *rmsnorm_backward(const tt_kernel_buffer *ins, int32_t nin, tt_kernel_buffer *outs,
                             int32_t nout) {
  int64_t d = 0;
  int64_t rows = nin == 3 && nout == 2 ? shape_of(&ins[0], &ins[1], &d) : -1;
  if (rows < 0) return "rmsnorm_backward wants float32 x [..., D], w [D], dy and two outputs";
  const float *x = ins[0].data, *w = ins[1].data, *dy = ins[2].data;
  float *dx = outs[0].data, *dw = outs[1].data;
  for (int64_t j = 0; j < d; j++) dw[j] = 0.0f;
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * d, *gr = dy + r * d;
    float rstd = row_rstd(xr, d), dot = 0.0f;
    for (int64_t j = 0; j < d; j++) dot += w[j] * gr[j] * xr[j];
    dot /= (float)d;
    for (int64_t j = 0; j < d; j++) {
      dx[r * d + j] = rstd * (w[j] * gr[j] - xr[j] * rstd * rstd * dot);
      dw[j] += gr[j] * xr[j] * rstd;
    }
  }
  return NULL;
}

// A kernel that always fails (the tests check its message reaches Python).
const char *always_fails(const tt_kernel_buffer *ins, int32_t nin, tt_kernel_buffer *outs,
                         int32_t nout) {
  (void)ins; (void)nin; (void)outs; (void)nout;
  return "this kernel always fails";
}
