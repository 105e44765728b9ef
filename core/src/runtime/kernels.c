// kernels.c — the public face of custom kernels (torchtpu.h's tt_kernel_*):
// registration is lowering's business (lower/kernel.c); the runtime only
// exports it, so that lower/ stays below the public API.
#include "torchtpu.h"

#include "lower/lower.h"

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
