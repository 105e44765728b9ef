// attention_kernel.c — puts our CPU attention kernels (kernels/
// cpu_attention.c) under XLA's CPU plugin: registered through the same FFI
// trampoline as users' C kernels (pjrt/ffi.c), under the names that
// lower/attention.c's custom calls carry.
//
// Why: XLA's CPU backend has no fused attention. Lowered to StableHLO, the
// llama debug model's attention wrote its [B, H, L, S] scores and
// probabilities to memory about thirty times a training step and ran its
// head-dim-16 products in a generic loop: 2.7x the time of PyTorch's CPU
// flash kernel, the largest share of the compiled step Inductor did not pay.
// The kernel keeps each query row's scores in cache. TPU and GPU plugins
// keep the StableHLO lowering (their compilers fuse it).
#include "runtime/attention_kernel.h"

#include "kernels/cpu_attention.h"

static const struct {
  const char *name;
  tt_c_kernel_pool_fn fn;
} kKernels[] = {
    {"torchtpu::cpu_attention_fwd", tt_cpu_attention_fwd},
    {"torchtpu::cpu_attention_fwd_causal", tt_cpu_attention_fwd_causal},
    {"torchtpu::cpu_attention_bwd", tt_cpu_attention_bwd},
    {"torchtpu::cpu_attention_bwd_causal", tt_cpu_attention_bwd_causal},
};

const char *tt_attention_kernel_register(tt_pjrt *p) {
  if (!tt_cpu_attention_supported()) return NULL;
  for (size_t i = 0; i < sizeof kKernels / sizeof kKernels[0]; i++) {
    tt_status st = tt_pjrt_ffi_register_pooled(p, kKernels[i].name, kKernels[i].fn);
    if (st) {  // no FFI here: the StableHLO lowering serves
      tt_status_free(st);
      return NULL;
    }
  }
  return tt_pjrt_ffi_target();
}
