// kernel.c — user kernels as lowering rules: a kernel is an op like any
// other to every executor (strict eager, fused eager, graph capture), so it
// is a rule registered at run time under the kernel's schema name.
//
// A JAX or Pallas kernel comes from Python as one exported StableHLO module
// per input signature (a "variant"). The rule splices that module's functions
// into the program being built (renamed, see hlo_func.c) and calls its @main
// with func.call: in fused eager and under torch.compile the kernel sits in
// one program with its neighbours. A signature without a variant asks the
// kernel's exporter (a callback, the Python side) to add one.
//
// Leaves out: non-tensor arguments (a kernel's static parameters are baked
// into its function), in-place kernels, symbolic shapes.
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "lower/lower.h"

// --- the registry --------------------------------------------------------------------
//
// Kernels live as long as the process (rules do too); the registry is the
// one piece of mutable lowering state besides the rule table, guarded by a
// mutex. Variants are appended, never removed, so a variant pointer taken
// under the lock stays valid.

typedef struct kvariant {
  char *signature;  // "f32[4,8],f32[8]"
  char *funcs;      // the module's functions, renamed, private
  char *entry;      // the renamed @main
  uint64_t key;     // identifies the function text in a builder
  int32_t nres;
  tt_hlo_type *res;
  struct kvariant *next;
} kvariant;

typedef struct kernel {
  char name[128];  // "ns::name", as the rule is registered
  char ffi_target[64];  // C kernels: the custom-call target ("" for JAX ones)
  int32_t index;   // its number among kernels (the symbol prefix)
  tt_kernel_export_fn export_fn;
  void *export_ctx;
  int32_t nvariants;
  kvariant *variants;
  struct kernel *next;
} kernel;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static kernel *g_kernels;
static int32_t g_nkernels;

static kernel *find_locked(const char *name) {
  for (kernel *k = g_kernels; k; k = k->next)
    if (strcmp(k->name, name) == 0) return k;
  return NULL;
}

static kvariant *find_variant_locked(kernel *k, const char *sig) {
  for (kvariant *v = k->variants; v; v = v->next)
    if (strcmp(v->signature, sig) == 0) return v;
  return NULL;
}

static void variant_free(kvariant *v) {
  if (!v) return;
  free(v->signature);
  free(v->funcs);
  free(v->entry);
  free(v->res);
  free(v);
}

// --- the rule --------------------------------------------------------------------------

// Appends "f32[4,8]" for t.
static void put_type(char *buf, size_t cap, const tt_hlo_type *t) {
  size_t n = strlen(buf);
  const char *e = tt_dtype_name(t->dtype);
  static const char *const kShort[TT_DTYPE_COUNT] = {
      [TT_BOOL] = "b1", [TT_U8] = "u8",   [TT_I8] = "i8",   [TT_I16] = "i16",
      [TT_I32] = "i32", [TT_I64] = "i64", [TT_F16] = "f16", [TT_BF16] = "bf16",
      [TT_F32] = "f32", [TT_F64] = "f64", [TT_U16] = "u16", [TT_U32] = "u32",
      [TT_U64] = "u64", [TT_C64] = "c64", [TT_C128] = "c128"};
  if (t->dtype >= 0 && t->dtype < TT_DTYPE_COUNT) e = kShort[t->dtype];
  n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s[", n ? "," : "", e ? e : "?");
  for (int i = 0; i < t->rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? "," : "", t->dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

static tt_status lower_kernel(tt_lower_ctx *c) {
  const char *name = tt_lower_rule_name(c);
  char sig[1024] = "";
  int tensors[64], nt = 0;
  for (int i = 0; i < tt_lower_nargs(c); i++) {
    const tt_value *a = tt_lower_arg(c, i);
    if (a->kind != TT_VALUE_TENSOR)
      return tt_lower_fail(c, TT_INVALID_ARGUMENT,
                           "kernel argument %d is not a tensor (kernels take tensors only)", i);
    if (nt == 64) return tt_lower_fail(c, TT_INVALID_ARGUMENT, "more than 64 tensor arguments");
    tt_hlo_type t = tt_lower_tensor_type(c, i, -1);
    put_type(sig, sizeof sig, &t);
    tensors[nt++] = i;
  }
  // The variant was exported, if it had to be, by tt_lower_kernel_prepare
  // before the runtime took its lock (the exporter runs Python).
  pthread_mutex_lock(&g_mu);
  kernel *k = find_locked(name);
  kvariant *v = k ? find_variant_locked(k, sig) : NULL;
  pthread_mutex_unlock(&g_mu);
  if (!k) return tt_lower_fail(c, TT_NOT_FOUND, "no kernel registered under this name");
  if (!v)
    return tt_lower_fail(c, TT_NOT_FOUND, "no variant for the signature (%s)", sig);
  tt_hlo *b = tt_lower_hlo(c);
  tt_hv ins[64];
  for (int j = 0; j < nt; j++) ins[j] = tt_lower_tensor(c, tensors[j]);
  tt_hv r;
  if (k->ffi_target[0]) {  // a C kernel: the FFI handler finds it by name
    char attrs[192];
    snprintf(attrs, sizeof attrs, "tt_kernel = \"%s\"", name);
    r = tt_hlo_ffi_call(b, k->ffi_target, attrs, ins, nt, v->res, v->nres);
  } else {
    tt_hlo_add_functions(b, v->key, v->funcs);
    r = tt_hlo_call(b, v->entry, ins, nt, v->res, v->nres);
  }
  for (int j = 0; j < v->nres; j++)
    tt_lower_result(c, r == TT_HV_INVALID ? TT_HV_INVALID : r + j);
  return NULL;
}

// The call's signature as the rule computes it; false when an argument is no
// tensor or it does not fit (the rule then reports the error).
static bool call_signature(const tt_op_call *call, char *sig, size_t cap) {
  sig[0] = '\0';
  for (int i = 0; i < call->nargs && i < 64; i++) {
    const tt_value *a = &call->args[i];
    if (a->kind != TT_VALUE_TENSOR || a->u.tensor.ndim < 0 || a->u.tensor.ndim > TT_MAX_RANK)
      return false;
    tt_hlo_type t = tt_hlo_make_type(a->u.tensor.dtype, a->u.tensor.ndim, a->u.tensor.sizes);
    put_type(sig, cap, &t);
  }
  return strlen(sig) + 1 < cap;
}

tt_status tt_lower_kernel_prepare(const tt_op_call *call) {
  const tt_rule *rule = tt_rule_get(call->op);
  if (!rule || rule->fn != lower_kernel) return NULL;
  char sig[1024];
  if (!call_signature(call, sig, sizeof sig)) return NULL;
  pthread_mutex_lock(&g_mu);
  kernel *k = find_locked(rule->name);
  bool missing = k && !find_variant_locked(k, sig) && k->export_fn;
  tt_kernel_export_fn fn = missing ? k->export_fn : NULL;
  void *fn_ctx = missing ? k->export_ctx : NULL;
  pthread_mutex_unlock(&g_mu);
  if (!fn) return NULL;
  // Runs with no lock held: it calls tt_kernel_add_variant.
  char err[1024] = "";
  if (fn(fn_ctx, rule->name, sig, err, sizeof err) != 0)
    return tt_make_status(TT_INVALID_ARGUMENT, "%s: exporting the kernel for (%s) failed: %s",
                          rule->name, sig, err[0] ? err : "(no message)");
  return NULL;
}

// --- registration (the runtime exports these as tt_kernel_*) ---------------------------------------------------------------

static tt_status register_kernel(const char *name, const char *ffi_target,
                                 tt_kernel_export_fn export_fn, void *export_ctx,
                                 int32_t *out_op) {
  if (out_op) *out_op = -1;
  if (!name || !strstr(name, "::") || strlen(name) >= sizeof ((kernel *)0)->name)
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "kernel name '%s' must be \"namespace::name\" (under 128 bytes)",
                          name ? name : "(null)");
  pthread_mutex_lock(&g_mu);
  kernel *k = find_locked(name);
  if (!k) {
    k = calloc(1, sizeof *k);
    if (!k) {
      pthread_mutex_unlock(&g_mu);
      return tt_make_status(TT_RESOURCE_EXHAUSTED, "kernel %s: out of memory", name);
    }
    snprintf(k->name, sizeof k->name, "%s", name);
    k->index = g_nkernels++;
    k->next = g_kernels;
    g_kernels = k;
  }
  k->export_fn = export_fn;
  k->export_ctx = export_ctx;
  snprintf(k->ffi_target, sizeof k->ffi_target, "%s", ffi_target ? ffi_target : "");
  pthread_mutex_unlock(&g_mu);
  int32_t op = tt_rule_register(name, lower_kernel, 0);
  if (op < 0) return tt_make_status(TT_RESOURCE_EXHAUSTED, "kernel %s: the rule table is full", name);
  if (out_op) *out_op = op;
  return NULL;
}

tt_status tt_lower_kernel_register(const char *name, tt_kernel_export_fn export_fn,
                                   void *export_ctx, int32_t *out_op) {
  return register_kernel(name, NULL, export_fn, export_ctx, out_op);
}

tt_status tt_lower_kernel_register_ffi(const char *name, const char *target,
                                       tt_kernel_export_fn export_fn, void *export_ctx,
                                       int32_t *out_op) {
  return register_kernel(name, target, export_fn, export_ctx, out_op);
}

tt_status tt_lower_kernel_add_variant(const char *name, const char *signature,
                                const char *module_text, int32_t nres,
                                const int32_t *res_dtypes, const int32_t *res_ranks,
                                const int64_t *res_dims) {
  if (nres < 1 || nres > 64 || !signature)
    return tt_make_status(TT_INVALID_ARGUMENT, "kernel %s: a variant needs a signature, "
                          "a module and 1..64 results (got %d)", name, (int)nres);
  pthread_mutex_lock(&g_mu);
  kernel *k = find_locked(name);
  int32_t index = k ? k->index : -1, nv = k ? k->nvariants : 0;
  pthread_mutex_unlock(&g_mu);
  if (!k) return tt_make_status(TT_NOT_FOUND, "kernel %s is not registered", name);

  tt_status st = NULL;
  kvariant *v = calloc(1, sizeof *v);
  if (!v) return tt_make_status(TT_RESOURCE_EXHAUSTED, "kernel %s: out of memory", name);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "ttk%d_v%d_", (int)index, (int)nv);
  if (module_text) {
    st = tt_hlo_import_functions(module_text, prefix, &v->funcs, &v->entry);
  } else if (!k->ffi_target[0]) {
    st = tt_make_status(TT_INVALID_ARGUMENT, "a JAX kernel's variant needs its module");
  } else {  // a C kernel's variant is its result types only
    v->funcs = strdup("");
    v->entry = strdup(prefix);
    if (!v->funcs || !v->entry) st = tt_make_status(TT_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (st) {
    variant_free(v);
    return tt_status_annotate(st, "kernel %s (%s): reading its exported module", name, signature);
  }
  v->signature = strdup(signature);
  v->res = calloc((size_t)nres, sizeof *v->res);
  if (!v->signature || !v->res) {
    variant_free(v);
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "kernel %s: out of memory", name);
  }
  v->nres = nres;
  for (int i = 0, d = 0; i < nres; i++) {
    if (res_ranks[i] < 0 || res_ranks[i] > TT_MAX_RANK ||
        res_dtypes[i] < 0 || res_dtypes[i] >= TT_DTYPE_COUNT) {
      variant_free(v);
      return tt_make_status(TT_INVALID_ARGUMENT, "kernel %s: result %d has dtype %d, rank %d",
                            name, i, (int)res_dtypes[i], (int)res_ranks[i]);
    }
    v->res[i] = tt_hlo_make_type((tt_dtype)res_dtypes[i], res_ranks[i], res_dims + d);
    d += res_ranks[i];
  }
  v->key = tt_hash64(v->entry, strlen(v->entry));

  pthread_mutex_lock(&g_mu);
  if (find_variant_locked(k, signature)) {  // another thread added it first
    pthread_mutex_unlock(&g_mu);
    variant_free(v);
    return NULL;
  }
  // The prefix numbers variants in order of arrival: renumber if one
  // arrived while this one was being imported.
  if (k->nvariants != nv) {
    pthread_mutex_unlock(&g_mu);
    variant_free(v);
    return tt_lower_kernel_add_variant(name, signature, module_text, nres, res_dtypes,
                                 res_ranks, res_dims);
  }
  v->next = k->variants;
  k->variants = v;
  k->nvariants++;
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

int32_t tt_lower_kernel_num_variants(const char *name) {
  pthread_mutex_lock(&g_mu);
  kernel *k = find_locked(name);
  int32_t n = k ? k->nvariants : -1;
  pthread_mutex_unlock(&g_mu);
  return n;
}
