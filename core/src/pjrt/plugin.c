// plugin.c — finding, loading and checking a PJRT plugin; PJRT_Error -> status.
//
// Discovery order (tt_pjrt_discover):
//   1. env TORCHTPU_PLUGIN_PATH: used as is; if set but missing, NOT_FOUND.
//   2. libtpu, when a TPU is present (/dev/accel0 or /dev/vfio): env
//      TPU_LIBRARY_PATH, else libtpu/libtpu.so in a site-packages directory.
//   3. XLA's CUDA plugin, when a GPU is present (/dev/nvidia0):
//      jax_plugins/xla_cuda13 or xla_cuda12 / xla_cuda_plugin.so.
//   4. the XLA CPU plugin: lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so or
//      xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so.
// A step whose device is present but whose plugin isn't installed falls
// through to the next one; tt_pjrt_info tells which platform was found.
//
// Site-packages directories are found without Python, in this order:
//   - env TORCHTPU_SITE_PACKAGES (colon-separated; the Python package sets
//     it to its sys.path before loading the core);
//   - each ancestor A of the file holding this code (found with dladdr: our
//     .so in <site>/torchtpu/lib/, or a test binary in the repository), as A
//     itself, A/lib/python3*/site-packages (A is a venv) and
//     A/.venv/lib/python3*/site-packages (A is a checkout with a venv);
//   - $VIRTUAL_ENV/lib/python3*/site-packages;
//   - /usr/local/lib/python3*/{site,dist}-packages, /usr/lib/python3/
//     dist-packages, ~/.local/lib/python3*/site-packages.
//
// Loading: plugins are never dlclosed. XLA plugins start threads and hold
// static state that doesn't survive unloading, so once loaded a plugin stays
// for the life of the process, and PJRT_Plugin_Initialize runs only when our
// dlopen is the one that actually loaded it (checked with RTLD_NOLOAD).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // dladdr, strdup, realpath, when the build doesn't
#endif
#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pjrt/internal.h"

// --- PJRT_Error -> tt_status -------------------------------------------------

static tt_code map_code(PJRT_Error_Code c) {
  switch (c) {
    case PJRT_Error_Code_INVALID_ARGUMENT: return TT_INVALID_ARGUMENT;
    case PJRT_Error_Code_RESOURCE_EXHAUSTED: return TT_RESOURCE_EXHAUSTED;
    case PJRT_Error_Code_UNIMPLEMENTED: return TT_UNIMPLEMENTED;
    case PJRT_Error_Code_FAILED_PRECONDITION: return TT_FAILED_PRECONDITION;
    default: return TT_INTERNAL;
  }
}

static void destroy_error(const PJRT_Api *api, PJRT_Error *err) {
  if (!err || !tt_pjrt_has_slot(api, offsetof(PJRT_Api, PJRT_Error_Destroy)))
    return;
  PJRT_Error_Destroy_Args a = {0};
  a.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  a.error = err;
  api->PJRT_Error_Destroy(&a);
}

tt_status tt_pjrt_error_status(const PJRT_Api *api, PJRT_Error *err,
                               const char *fn, const char *file, int line) {
  if (err == NULL) return NULL;
  const char *msg = "(no message)";
  int msg_len = (int)strlen(msg);
  if (tt_pjrt_has_slot(api, offsetof(PJRT_Api, PJRT_Error_Message))) {
    PJRT_Error_Message_Args m = {0};
    m.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
    m.error = err;
    api->PJRT_Error_Message(&m);
    if (m.message) {
      msg = m.message;
      msg_len = m.message_size > INT_MAX ? INT_MAX : (int)m.message_size;
      // MLIR diagnostics end in a newline; ours add " [file:line]" after.
      while (msg_len > 0 && (msg[msg_len - 1] == '\n' || msg[msg_len - 1] == ' '))
        msg_len--;
    }
  }
  tt_code code = TT_INTERNAL;
  if (tt_pjrt_has_slot(api, offsetof(PJRT_Api, PJRT_Error_GetCode))) {
    PJRT_Error_GetCode_Args g = {0};
    g.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
    g.error = err;
    PJRT_Error *inner = api->PJRT_Error_GetCode(&g);
    if (inner == NULL) code = map_code(g.code);
    destroy_error(api, inner);
  }
  // The message points into `err`: format before destroying it.
  tt_status s =
      tt_make_status_at(code, file, line, "%s: %.*s", fn, msg_len, msg);
  destroy_error(api, err);
  return s;
}

tt_status tt_pjrt_missing_slot(const PJRT_Api *api, const char *fn) {
  return tt_make_status(TT_FAILED_PRECONDITION,
                        "PJRT plugin (C API %d.%d, table of %zu bytes) has no "
                        "%s; torchtpu needs C API 0.81 or newer",
                        api->pjrt_api_version.major_version,
                        api->pjrt_api_version.minor_version, api->struct_size,
                        fn);
}

// --- site-packages directories -----------------------------------------------

#define MAX_SITES 64

typedef struct site_list {
  char *dirs[MAX_SITES];  // owned
  int n;
} site_list;

static void sites_add(site_list *s, const char *dir) {
  if (s->n >= MAX_SITES || dir[0] == '\0') return;
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->dirs[i], dir) == 0) return;
  char *copy = strdup(dir);
  if (copy) s->dirs[s->n++] = copy;
}

// Adds every directory matching `pattern` (a glob, e.g. lib/python3*/...).
static void sites_add_glob(site_list *s, const char *pattern) {
  glob_t g;
  if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; i++) sites_add(s, g.gl_pathv[i]);
  }
  globfree(&g);
}

// Adds the matches of `root` + `suffix`; skips paths too long to hold.
static void sites_add_under(site_list *s, const char *root,
                            const char *suffix) {
  char pat[PATH_MAX];
  int n = snprintf(pat, sizeof pat, "%s%s", root, suffix);
  if (n > 0 && (size_t)n < sizeof pat) sites_add_glob(s, pat);
}

static void sites_add_root(site_list *s, const char *root) {
  sites_add(s, root);
  sites_add_under(s, root, "/lib/python3*/site-packages");
  sites_add_under(s, root, "/.venv/lib/python3*/site-packages");
}

static void sites_free(site_list *s) {
  for (int i = 0; i < s->n; i++) free(s->dirs[i]);
  s->n = 0;
}

static void sites_collect(site_list *s) {
  const char *env = getenv("TORCHTPU_SITE_PACKAGES");
  if (env) {
    char *copy = strdup(env);
    for (char *save = NULL, *tok = copy ? strtok_r(copy, ":", &save) : NULL;
         tok; tok = strtok_r(NULL, ":", &save))
      sites_add(s, tok);
    free(copy);
  }

  // Ancestors of the object holding this function: our .so or a test binary.
  Dl_info info;
  char self[PATH_MAX];
  if (dladdr((void *)&sites_collect, &info) && info.dli_fname &&
      realpath(info.dli_fname, self)) {
    for (int depth = 0; depth < 8; depth++) {
      char *slash = strrchr(self, '/');
      if (!slash || slash == self) break;
      *slash = '\0';
      sites_add_root(s, self);
    }
  }

  const char *venv = getenv("VIRTUAL_ENV");
  if (venv) sites_add_under(s, venv, "/lib/python3*/site-packages");
  sites_add_glob(s, "/usr/local/lib/python3*/site-packages");
  sites_add_glob(s, "/usr/local/lib/python3*/dist-packages");
  sites_add(s, "/usr/lib/python3/dist-packages");
  const char *home = getenv("HOME");
  if (home) sites_add_under(s, home, "/.local/lib/python3*/site-packages");
}

// --- discovery ---------------------------------------------------------------

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static tt_status copy_out(const char *path, char *out, size_t cap) {
  size_t n = strlen(path);
  if (n + 1 > cap)
    return tt_make_status(TT_INVALID_ARGUMENT,
                          "plugin path %s needs %zu bytes, buffer has %zu",
                          path, n + 1, cap);
  memcpy(out, path, n + 1);
  return NULL;
}

// Finds the first `rel` (a NULL-terminated list) under any site directory.
static bool find_in_sites(const site_list *s, const char *const *rel,
                          char *found, size_t cap) {
  for (int i = 0; i < s->n; i++) {
    for (const char *const *r = rel; *r; r++) {
      int n = snprintf(found, cap, "%s/%s", s->dirs[i], *r);
      if (n > 0 && (size_t)n < cap && is_file(found)) return true;
    }
  }
  return false;
}

static const char *const tpu_plugins[] = {"libtpu/libtpu.so", NULL};
static const char *const cuda_plugins[] = {
    "jax_plugins/xla_cuda13/xla_cuda_plugin.so",
    "jax_plugins/xla_cuda12/xla_cuda_plugin.so", NULL};
static const char *const cpu_plugins[] = {
    "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
    "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so", NULL};

tt_status tt_pjrt_discover(char *out, size_t cap) {
  const char *env = getenv("TORCHTPU_PLUGIN_PATH");
  if (env && env[0]) {
    if (!is_file(env))
      return tt_make_status(TT_NOT_FOUND,
                            "TORCHTPU_PLUGIN_PATH=%s: no such file (unset it "
                            "to search for an installed plugin)",
                            env);
    return copy_out(env, out, cap);
  }

  site_list sites = {0};
  sites_collect(&sites);
  char found[PATH_MAX];
  bool ok = false;
  if (exists("/dev/accel0") || exists("/dev/vfio")) {
    const char *tpu = getenv("TPU_LIBRARY_PATH");
    if (tpu && is_file(tpu)) {
      snprintf(found, sizeof found, "%s", tpu);
      ok = true;
    } else {
      ok = find_in_sites(&sites, tpu_plugins, found, sizeof found);
    }
  }
  if (!ok && exists("/dev/nvidia0"))
    ok = find_in_sites(&sites, cuda_plugins, found, sizeof found);
  if (!ok) ok = find_in_sites(&sites, cpu_plugins, found, sizeof found);

  tt_status st = NULL;
  if (ok) {
    st = copy_out(found, out, cap);
  } else {
    st = tt_make_status(
        TT_NOT_FOUND,
        "no PJRT plugin found in %d site-packages directories (first: %s); "
        "pip install lammps-jax-pjrt-cpu (CPU), libtpu (TPU) or "
        "jax-cuda12-plugin (GPU), or set TORCHTPU_PLUGIN_PATH to a plugin .so",
        sites.n, sites.n ? sites.dirs[0] : "none");
  }
  sites_free(&sites);
  return st;
}

// --- loading -----------------------------------------------------------------

static tt_status check_version(const PJRT_Api *api, const char *path) {
  if (api->struct_size < TT_ABI_SIZE(PJRT_Api, pjrt_api_version))
    return tt_make_status(TT_FAILED_PRECONDITION,
                          "PJRT plugin %s: API table of %zu bytes is too "
                          "small to hold a version",
                          path, api->struct_size);
  int major = api->pjrt_api_version.major_version;
  int minor = api->pjrt_api_version.minor_version;
  if (major != TT_ABI_MIN_MAJOR || minor < TT_ABI_MIN_MINOR)
    return tt_make_status(TT_FAILED_PRECONDITION,
                          "PJRT plugin %s has C API version %d.%d; torchtpu "
                          "needs %d.x with x >= %d (install a newer plugin)",
                          path, major, minor, TT_ABI_MIN_MAJOR,
                          TT_ABI_MIN_MINOR);
  if (api->struct_size < TT_ABI_API_MIN_SIZE)
    return tt_make_status(TT_FAILED_PRECONDITION,
                          "PJRT plugin %s (C API %d.%d): API table of %zu "
                          "bytes, torchtpu needs at least %zu",
                          path, major, minor, api->struct_size,
                          (size_t)TT_ABI_API_MIN_SIZE);
  return NULL;
}

tt_status tt_pjrt_plugin_load(tt_pjrt *p, const char *path) {
  if (!is_file(path))
    return tt_make_status(TT_NOT_FOUND,
                          "PJRT plugin %s: no such file (set "
                          "TORCHTPU_PLUGIN_PATH to a plugin .so)",
                          path);
  // Loaded already (by an earlier client, or by JAX in this process): then
  // it has been initialised, and initialising twice is not allowed.
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  bool fresh = dl == NULL;
  if (fresh) dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl)
    return tt_make_status(TT_FAILED_PRECONDITION, "dlopen(%s): %s", path,
                          dlerror());
  p->dl = dl;

  void *sym = dlsym(dl, TT_ABI_ENTRY_SYMBOL);
  if (!sym)
    return tt_make_status(TT_FAILED_PRECONDITION,
                          "%s exports no %s: not a PJRT plugin", path,
                          TT_ABI_ENTRY_SYMBOL);
  tt_abi_get_api_fn get_api;
  memcpy(&get_api, &sym, sizeof get_api);  // object -> function pointer
  const PJRT_Api *api = get_api();
  if (!api)
    return tt_make_status(TT_FAILED_PRECONDITION, "%s: %s returned NULL",
                          path, TT_ABI_ENTRY_SYMBOL);
  TT_RETURN_IF_ERROR(check_version(api, path));
  p->api = api;
  p->api_major = api->pjrt_api_version.major_version;
  p->api_minor = api->pjrt_api_version.minor_version;

  if (fresh) {
    PJRT_Plugin_Initialize_Args a = {0};
    a.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
    tt_status st = TT_PJRT_CALL(api, PJRT_Plugin_Initialize, &a);
    if (st) return tt_status_annotate(st, "initialising %s", path);
  }
  return NULL;
}
