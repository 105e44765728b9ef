// kernels.c — the public face of custom kernels (torchtpu.h's tt_kernel_*):
// registration is lowering's business (lower/kernel.c); the runtime only
// exports it, so that lower/ stays below the public API.
#include "torchtpu.h"

#include <dlfcn.h>
#include <string.h>

#include "lower/lower.h"
#include "pjrt/pjrt.h"
#include "runtime/runtime.h"

tt_status tt_kernel_register(const char *name, tt_kernel_export_fn export_fn,
                             void *export_ctx, int32_t *out_op) {
  return tt_lower_kernel_register(name, export_fn, export_ctx, out_op);
}

tt_status tt_kernel_add_variant(const char *name, const char *signature,
                                const char *module_text, int32_t nres,
                                const int32_t *res_dtypes, const int32_t *res_ranks,
                                const int64_t *res_dims) {
  return tt_lower_kernel_add_variant(name, signature, module_text, nres, res_dtypes,
                                     res_ranks, res_dims);
}

int32_t tt_kernel_num_variants(const char *name) {
  return tt_lower_kernel_num_variants(name);
}

// --- C kernels through XLA's FFI ------------------------------------------------------

tt_status tt_kernel_register_c(tt_runtime *rt, const char *name, const char *library,
                               const char *symbol, tt_kernel_export_fn shape_fn,
                               void *shape_ctx, int32_t *out_op) {
  if (out_op) *out_op = -1;
  if (!name || !library || !symbol)
    return tt_make_status(TT_INVALID_ARGUMENT, "C kernel: name, library and symbol are required");
  // Loaded for the process's life: programs may call the kernel at any time.
  void *dl = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!dl)
    return tt_make_status(TT_NOT_FOUND, "C kernel %s: cannot load library %s: %s", name,
                          library, dlerror());
  dlerror();
  void *fn = dlsym(dl, symbol);
  const char *err = dlerror();
  if (err || !fn)
    return tt_make_status(TT_NOT_FOUND, "C kernel %s: library %s has no symbol %s%s%s", name,
                          library, symbol, err ? ": " : "", err ? err : "");
  tt_c_kernel_fn kfn;
  memcpy(&kfn, &fn, sizeof kfn);  // object pointer to function pointer (POSIX)
  TT_RETURN_IF_ERROR(tt_status_annotate(tt_pjrt_ffi_register(rt->pjrt, name, kfn),
                                        "C kernel %s", name));
  return tt_lower_kernel_register_ffi(name, tt_pjrt_ffi_target(), shape_fn, shape_ctx, out_op);
}
