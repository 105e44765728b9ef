// hostmem.h — the C heap's policy when the "device" is XLA's CPU plugin.
#ifndef TT_RUNTIME_HOSTMEM_H
#define TT_RUNTIME_HOSTMEM_H

#include <stdbool.h>

// Makes the C library keep freed memory for reuse instead of handing it back
// to the kernel (glibc: no mmap'd chunks, no heap trimming below 2 GiB of
// free top). True when the policy is in force. See hostmem.c for why.
bool tt_hostmem_keep(void);

#endif  // TT_RUNTIME_HOSTMEM_H
