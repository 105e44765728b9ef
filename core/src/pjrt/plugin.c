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
// libtpu: TPU_SKIP_MDS_QUERY=1 is the default where no TPU device node
// exists, PJRT_Plugin_Initialize runs under a timeout
// (TORCHTPU_PLUGIN_INIT_TIMEOUT, seconds), and its "no TPU device" failure
// becomes our message naming the lock file it leaves (see "libtpu" below).
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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

// --- libtpu ------------------------------------------------------------------
//
// libtpu on a host without a TPU: PJRT_Plugin_Initialize asks the cloud
// metadata server for each of its settings and waits ~30 s per key unless
// TPU_SKIP_MDS_QUERY is set; then PJRT_Client_Create fails ("TPU
// initialization failed: No jellyfish device found."), and a lock file is
// left in the temporary folder. On a TPU host the metadata server answers
// (a pod slice's topology comes from it), so the default is set only where
// no TPU device node exists.

static bool is_libtpu(const char *path) {
  const char *base = strrchr(path, '/');
  return strncmp(base ? base + 1 : path, "libtpu", 6) == 0;
}

static bool tpu_device_present(void) {
  return exists("/dev/accel0") || exists("/dev/vfio");
}

// Where libtpu keeps its lock file (it names no other place in its message).
static const char *libtpu_lock_file(char *buf, size_t cap) {
  const char *tmp = getenv("TMPDIR");
  snprintf(buf, cap, "%s/libtpu_lockfile", tmp && tmp[0] ? tmp : "/tmp");
  if (!exists(buf)) snprintf(buf, cap, "/tmp/libtpu_lockfile");
  return buf;
}

tt_status tt_pjrt_explain_failure(const char *path, tt_status st) {
  if (!st || !is_libtpu(path)) return st;
  char lock[PATH_MAX];
  libtpu_lock_file(lock, sizeof lock);
  const char *msg = tt_status_message(st);
  if (!tpu_device_present() && (strstr(msg, "No jellyfish device") ||
                                strstr(msg, "TPU initialization failed"))) {
    tt_status mine = tt_make_status(
        TT_NOT_FOUND,
        "libtpu found no TPU on this host: there is no /dev/accel* or "
        "/dev/vfio device. On a machine without a TPU, unset "
        "TORCHTPU_PLUGIN_PATH/TPU_LIBRARY_PATH (torchtpu then uses XLA's CPU "
        "plugin). libtpu left its lock file %s%s (harmless; it only keeps two "
        "processes off one TPU). libtpu said: %s",
        lock, exists(lock) ? "" : " (not there now)", msg);
    tt_status_free(st);
    return mine;
  }
  return tt_status_annotate(
      st,
      "libtpu %s; if another process holds the TPU, libtpu's lock file %s "
      "names no owner: `lsof %s` does; stop that process, or remove the file "
      "if none holds it",
      path, lock, lock);
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

// An initialisation that timed out may still be running on its thread: the
// plugin's state is unknown, so this process must not use it again.
static _Atomic(int) init_abandoned;

tt_status tt_pjrt_plugin_open(tt_pjrt *p, const char *path) {
  if (!is_file(path))
    return tt_make_status(TT_NOT_FOUND,
                          "PJRT plugin %s: no such file (set "
                          "TORCHTPU_PLUGIN_PATH to a plugin .so)",
                          path);
  if (init_abandoned)
    return tt_make_status(TT_FAILED_PRECONDITION,
                          "PJRT plugin %s: an earlier initialisation in this "
                          "process timed out and may still be running; start "
                          "a new process",
                          path);
  // Before the plugin can read it (at load or at initialisation).
  if (is_libtpu(path) && !tpu_device_present())
    setenv("TPU_SKIP_MDS_QUERY", "1", 0);
  // Loaded already (by an earlier client, or by JAX in this process): then
  // it has been initialised, and initialising twice is not allowed.
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  p->fresh = dl == NULL;
  if (p->fresh) dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
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
  return NULL;
}

double tt_pjrt_init_timeout(void) {
  const char *env = getenv("TORCHTPU_PLUGIN_INIT_TIMEOUT");
  char *end = NULL;
  double s = env && env[0] ? strtod(env, &end) : 0;
  return end && *end == '\0' && s > 0 ? s : TT_PJRT_INIT_TIMEOUT_DEFAULT;
}

// PJRT_Plugin_Initialize on its own thread, so that a plugin that never
// returns (libtpu waiting on a metadata server) costs a timeout, not a hang.
// The block is shared: whoever of the two threads finishes last frees it.
typedef struct init_call {
  const PJRT_Api *api;
  PJRT_Plugin_Initialize_Args args;
  PJRT_Error *err;
  bool done;
  int refs;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} init_call;

static void init_call_release(init_call *c) {
  pthread_mutex_lock(&c->mu);
  bool last = --c->refs == 0;
  pthread_mutex_unlock(&c->mu);
  if (!last) return;
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

static void *init_thread(void *arg) {
  init_call *c = arg;
  PJRT_Error *err = c->api->PJRT_Plugin_Initialize(&c->args);
  pthread_mutex_lock(&c->mu);
  c->err = err;
  c->done = true;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  init_call_release(c);  // an abandoned error is the plugin's to leak
  return NULL;
}

// Waits up to `seconds`; true when the call returned (its error in *out_err).
static bool wait_init(init_call *c, double seconds, PJRT_Error **out_err) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)seconds;
  until.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&c->mu);
  while (!c->done)
    if (pthread_cond_timedwait(&c->cv, &c->mu, &until) != 0) break;
  bool done = c->done;
  if (done) {
    *out_err = c->err;
    c->err = NULL;
  }
  pthread_mutex_unlock(&c->mu);
  return done;
}

static tt_status initialize_timed(tt_pjrt *p, const char *path) {
  if (!tt_pjrt_has_slot(p->api, offsetof(PJRT_Api, PJRT_Plugin_Initialize)))
    return tt_pjrt_missing_slot(p->api, "PJRT_Plugin_Initialize");
  init_call *c = calloc(1, sizeof *c);
  if (!c) return tt_make_status(TT_RESOURCE_EXHAUSTED, "out of host memory");
  c->api = p->api;
  c->args.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  c->refs = 2;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  pthread_t t;
  if (pthread_create(&t, NULL, init_thread, c) != 0) {
    free(c);
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "cannot start a thread");
  }
  pthread_detach(t);
  double seconds = tt_pjrt_init_timeout();
  PJRT_Error *err = NULL;
  bool done = wait_init(c, seconds, &err);
  init_call_release(c);
  if (!done) {
    init_abandoned = 1;
    const char *mds = getenv("TPU_SKIP_MDS_QUERY");
    return tt_make_status(
        TT_FAILED_PRECONDITION,
        "PJRT_Plugin_Initialize did not return within %g s "
        "(TORCHTPU_PLUGIN_INIT_TIMEOUT)%s; this process cannot use the plugin "
        "any more",
        seconds,
        is_libtpu(path) && !(mds && mds[0])
            ? ": libtpu waits on the cloud metadata server when "
              "TPU_SKIP_MDS_QUERY is unset (set TPU_SKIP_MDS_QUERY=1 off "
              "Cloud TPU)"
            : "");
  }
  return tt_pjrt_error_status(p->api, err, "PJRT_Plugin_Initialize", __FILE__,
                              __LINE__);
}

tt_status tt_pjrt_plugin_init(tt_pjrt *p, const char *path) {
  if (!p->fresh) return NULL;
  tt_status st = initialize_timed(p, path);
  if (!st) {
    p->fresh = false;  // initialised: once per process
    return NULL;
  }
  st = tt_status_annotate(st, "initialising %s", path);
  // A timeout says all there is; the plugin's own failures may need the
  // lock file's name.
  return init_abandoned ? st : tt_pjrt_explain_failure(path, st);
}

tt_status tt_pjrt_plugin_load(tt_pjrt *p, const char *path) {
  TT_RETURN_IF_ERROR(tt_pjrt_plugin_open(p, path));
  return tt_pjrt_plugin_init(p, path);
}
