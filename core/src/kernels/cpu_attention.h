// cpu_attention.h — scaled dot-product attention kernels for XLA's CPU
// plugin (C kernels called through the FFI; see cpu_attention.c for the
// layouts). Each is a tt_c_kernel_pool_fn: its work runs on `pool` when
// given one, else on threads of its own.
#ifndef TT_KERNELS_CPU_ATTENTION_H
#define TT_KERNELS_CPU_ATTENTION_H

#include <stdbool.h>

#include "torchtpu_types.h"

// True when this build's kernels can run on this CPU (x86-64 with AVX2 and
// FMA, built by GCC or clang); the runtime registers them only then.
bool tt_cpu_attention_supported(void);

const char *tt_cpu_attention_fwd(const tt_kernel_buffer *ins, int32_t nin,
                                 tt_kernel_buffer *outs, int32_t nout,
                                 const tt_kernel_pool *pool);
const char *tt_cpu_attention_fwd_causal(const tt_kernel_buffer *ins, int32_t nin,
                                        tt_kernel_buffer *outs, int32_t nout,
                                        const tt_kernel_pool *pool);
const char *tt_cpu_attention_bwd(const tt_kernel_buffer *ins, int32_t nin,
                                 tt_kernel_buffer *outs, int32_t nout,
                                 const tt_kernel_pool *pool);
const char *tt_cpu_attention_bwd_causal(const tt_kernel_buffer *ins, int32_t nin,
                                        tt_kernel_buffer *outs, int32_t nout,
                                        const tt_kernel_pool *pool);

#endif
