// hostmem.c — keeps the C heap's freed memory when XLA's CPU plugin is the device.
//
// On the CPU plugin, device buffers are host memory from malloc
// (posix_memalign), and every program run allocates its temporaries as one
// block: 131 MiB for the llama debug model's training step. glibc serves a
// block that large with mmap (its dynamic mmap threshold stops at 32 MiB)
// and unmaps it when the run frees it, so each run faults its temporaries in
// again, a page at a time: 22% of the step's time was the kernel's page-fault
// and zeroing work (perf, bench/train_step.py's whole step). A device's
// allocator keeps its memory (PJRT's BFC allocator on TPU and GPU, PyTorch's
// caching allocator on CUDA); this does the same for the host heap: big
// blocks come from the heap (sbrk), and a freed top is kept while under
// 2 GiB (M_TRIM_THRESHOLD's int limit), so the next run reuses the pages.
//
// It is process-wide (mallopt has no other scope) and only set for the CPU
// plugin; TORCHTPU_CPU_KEEP_MEMORY=0 (tt_runtime_options.cpu_memory) leaves
// glibc's defaults. Other C libraries: nothing is changed.
#include "runtime/hostmem.h"

#include <limits.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

bool tt_hostmem_keep(void) {
#ifdef __GLIBC__
  return mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
#else
  return false;
#endif
}
