// attention_kernel.h — our C attention kernels on XLA's CPU plugin.
#ifndef TT_RUNTIME_ATTENTION_KERNEL_H
#define TT_RUNTIME_ATTENTION_KERNEL_H

#include "pjrt/pjrt.h"

// Registers kernels/cpu_attention.c's kernels with the plugin's FFI. Returns
// the custom-call target their calls name (tt_lower_options'
// attention_ffi_target), or NULL when they cannot run here (a CPU without
// AVX2 and FMA, a plugin without the FFI extension): attention then lowers
// to XLA's own ops, as on other plugins.
const char *tt_attention_kernel_register(tt_pjrt *p);

#endif  // TT_RUNTIME_ATTENTION_KERNEL_H
