// disk_cache.c — the persistent compilation cache: compiled executables kept
// in a directory across processes, and the 128-bit keys that name them.
//
// One file per program, "<32 hex digits>.ttexe":
//
//   offset  bytes  field
//        0      8  magic "TTPUEXE\0"
//        8      4  format version (kVersion), host byte order
//       12      4  header bytes (kHeader)
//       16     16  key (two u64)
//       32     16  compile environment hash (two u64)
//       48      8  text length (bytes)
//       56      8  payload length (bytes)
//       64     32  HMAC-SHA256 tag of bytes 0..64, the text and the payload
//       96      -  the StableHLO text, then the payload (tt_pjrt_exe_serialize)
//
// An executable is code this process will run, so a file is trusted only
// when it is authenticated, not merely intact: the tag is keyed with the
// user's secret (".ttkey" in the directory: 32 random bytes, mode 0600, made
// on first use). Whoever cannot read that key cannot make an entry that
// loads, even knowing the format. The directory is created 0700 and refused
// (the cache is then off, with an error the caller reports) when another
// user owns it or its group or others may write it; an entry owned by
// another user or writable by others, a symlink, a FIFO or any non-regular
// file is refused, warned about once on stderr and counted (disk_rejected).
// Files are opened O_NOFOLLOW | O_NONBLOCK and fstat'ed before any read, so
// a FIFO planted there cannot block the runtime.
//
// A file is used only when every field matches, the text is the same byte
// for byte and the tag verifies, so a key collision, a file from another
// plugin or version, a truncated, partly overwritten or forged file are all
// ignored (counted) and the program is compiled and the file rewritten.
// Writes go to a unique temp file in the same directory, are fsync'ed and
// renamed over the entry: readers see the old file or the new one, never
// half of one, and two processes writing the same entry both leave a valid
// file.
//
// Size bound: the directory's total is estimated from one scan (on the first
// write of the process) plus the bytes written since; past the bound, the
// least recently used entries (oldest mtime; a hit touches its file) are
// removed down to 90% of it. Temp files older than an hour (a writer that
// died) go too.
//
// Leaves out: file locking (not needed: rename is atomic and readers check),
// compression, and sharing across byte orders (the version check fails).
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/hash.h"
#include "base/sha256.h"
#include "runtime/disk_cache.h"

static const char kMagic[8] = "TTPUEXE";  // + NUL
// Version 2: the two unkeyed hashes of version 1 became one HMAC tag.
enum { kVersion = 2, kTagOffset = 64, kHeader = 96, kSecretBytes = 32 };
static const char kSecretFile[] = ".ttkey";
static const char kSuffix[] = ".ttexe";
#define MAX_FILE_BYTES ((int64_t)1 << 34)  // 16 GiB: larger is not ours

// --- hashing -------------------------------------------------------------------------

static uint64_t mix64(uint64_t z) {  // a strong 64-bit finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A word-at-a-time hash, independent of FNV (tt_hash64): multiply-rotate
// over 8-byte words, length folded in, finalised by mix64.
static uint64_t hash_words(const void *data, size_t len, uint64_t seed) {
  const unsigned char *p = data;
  uint64_t h = seed ^ (len * 0x9e3779b97f4a7c15ull);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h ^= mix64(w + 0x632be59bd9b4e019ull);
    h = ((h << 27) | (h >> 37)) * 0x9e3779b97f4a7c15ull + 0x52dce729u;
  }
  uint64_t tail = 0;
  memcpy(&tail, p + i, len - i);
  h ^= mix64(tail ^ (uint64_t)(len - i));
  return mix64(h);
}

void tt_cache_env_hash(const void *env, size_t len, uint64_t out[2]) {
  out[0] = tt_hash64(env, len);
  out[1] = hash_words(env, len, 0x7470752d656e7631ull);
}

void tt_cache_key_make(const uint64_t env[2], const char *text, size_t len,
                       tt_cache_key *out) {
  out->h[0] = mix64(tt_hash64(text, len) ^ env[0]);
  out->h[1] = hash_words(text, len, env[1]);
}

void tt_cache_key_hex(const tt_cache_key *k, char out[33]) {
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)k->h[0],
           (unsigned long long)k->h[1]);
}

// --- the cache object --------------------------------------------------------------------

struct tt_disk_cache {
  char *dir;            // owned
  int64_t max_bytes;    // <= 0: unbounded
  uint64_t env[2];
  unsigned char secret[kSecretBytes];  // the user's key (see load_secret)
  int64_t total_bytes;  // estimate of the directory's entries; -1: not scanned
  bool warned;          // a refused entry was reported on stderr
  uint64_t tmp_counter;
};

// Prints one line on stderr the first time this cache refuses something.
static void warn_once(tt_disk_cache *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void warn_once(tt_disk_cache *d, const char *fmt, ...) {
  if (d->warned) return;
  d->warned = true;
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "torchtpu: persistent compilation cache %s: %s (further "
          "refusals are only counted)\n", d->dir, msg);
}

// Why `sb` (of a directory or file in the cache) cannot be trusted, or NULL:
// it must belong to this user and be writable by nobody else, as OpenSSH
// asks of ~/.ssh and Python of its bytecode cache.
static const char *untrusted(const struct stat *sb, char *why, size_t cap) {
  if (sb->st_uid != geteuid()) {
    snprintf(why, cap, "owned by uid %ld, not by this user (uid %ld)",
             (long)sb->st_uid, (long)geteuid());
    return why;
  }
  if (sb->st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(why, cap, "writable by %s (mode %04o)",
             (sb->st_mode & S_IWOTH) ? "others" : "its group",
             (unsigned)(sb->st_mode & 07777));
    return why;
  }
  return NULL;
}

// mkdir -p, new directories 0700; true when the directory exists afterwards.
static bool make_dirs(const char *dir) {
  char *p = strdup(dir);
  if (!p) return false;
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST) {
      free(p);
      return false;
    }
    *s = '/';
  }
  bool ok = mkdir(p, 0700) == 0 || errno == EEXIST;
  free(p);
  return ok;
}

// Opens a file of the cache for reading without following a symlink and
// without blocking (a FIFO or device planted there opens at once and is then
// refused by the caller's fstat). -1 with errno on failure.
static int open_quiet(int dirfd, const char *name) {
  return openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
}

// Reads all of `fd` (size `n`) into `buf`; false on error or short read.
static bool read_exact(int fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return true;
}

static bool write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

static bool random_bytes(void *out, size_t n) {
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = read_exact(fd, out, n);
  close(fd);
  return ok;
}

// The user's secret key, kSecretFile in the directory: kSecretBytes random
// bytes, a regular file of this user, mode 0600 (nobody else may read or
// write it). Made on first use: written to a temp file, then link()ed into
// place, so of two processes racing, both end with the winner's key.
static tt_status load_secret(tt_disk_cache *d, int dirfd) {
  char why[160];
  for (int attempt = 0; attempt < 2; attempt++) {
    int fd = open_quiet(dirfd, kSecretFile);
    if (fd >= 0) {
      struct stat sb;
      tt_status st = NULL;
      if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = tt_make_status(TT_FAILED_PRECONDITION, "%s is not a regular file", kSecretFile);
      } else if (untrusted(&sb, why, sizeof why) || (sb.st_mode & 077)) {
        if (!untrusted(&sb, why, sizeof why))
          snprintf(why, sizeof why, "readable by others (mode %04o)", (unsigned)(sb.st_mode & 07777));
        st = tt_make_status(TT_FAILED_PRECONDITION, "key file %s is %s; expected mode "
                            "0600 owned by this user", kSecretFile, why);
      } else if (sb.st_size != kSecretBytes || !read_exact(fd, d->secret, kSecretBytes)) {
        st = tt_make_status(TT_FAILED_PRECONDITION, "key file %s has %lld bytes, expected "
                            "%d (remove it to make a new one)", kSecretFile,
                            (long long)sb.st_size, kSecretBytes);
      }
      close(fd);
      return st;
    }
    if (errno != ENOENT)
      return tt_make_status(TT_FAILED_PRECONDITION, "cannot open key file %s: %s",
                            kSecretFile, strerror(errno));
    // Absent: make one.
    unsigned char key[kSecretBytes];
    if (!random_bytes(key, sizeof key))
      return tt_make_status(TT_INTERNAL, "no random bytes for the key file (/dev/urandom)");
    char tmp[64];
    snprintf(tmp, sizeof tmp, ".key.%ld.tmp", (long)getpid());
    (void)unlinkat(dirfd, tmp, 0);
    int w = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (w < 0)
      return tt_make_status(TT_FAILED_PRECONDITION, "cannot create key file: %s", strerror(errno));
    bool ok = write_all(w, key, sizeof key) && fsync(w) == 0;
    ok = close(w) == 0 && ok;
    memset(key, 0, sizeof key);
    int linked = ok ? linkat(dirfd, tmp, dirfd, kSecretFile, 0) : -1;
    int link_errno = errno;
    (void)unlinkat(dirfd, tmp, 0);
    if (!ok || (linked != 0 && link_errno != EEXIST))
      return tt_make_status(TT_FAILED_PRECONDITION, "cannot write key file: %s",
                            strerror(link_errno));
    // Linked, or another process won the race: read what is there.
  }
  return tt_make_status(TT_FAILED_PRECONDITION, "key file %s vanished while being made",
                        kSecretFile);
}

// Makes the directory (0700) if needed, checks who owns it and who may write
// it, and loads (or makes) the key.
static tt_status open_dir(tt_disk_cache *d) {
  if (!make_dirs(d->dir))
    return tt_make_status(TT_FAILED_PRECONDITION, "cannot create the directory: %s",
                          strerror(errno));
  int fd = open(d->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return tt_make_status(TT_FAILED_PRECONDITION, "cannot open the directory: %s",
                          strerror(errno));
  struct stat sb;
  char why[160];
  tt_status st = NULL;
  if (fstat(fd, &sb) != 0) {
    st = tt_make_status(TT_FAILED_PRECONDITION, "cannot stat the directory: %s", strerror(errno));
  } else if (untrusted(&sb, why, sizeof why)) {
    st = tt_make_status(TT_FAILED_PRECONDITION,
                        "refused: the directory is %s; another user could plant "
                        "programs this process would run (fix: chmod 700, or "
                        "choose another TORCHTPU_CACHE_DIR)", why);
  } else {
    st = load_secret(d, fd);
  }
  close(fd);
  return st;
}

tt_status tt_disk_cache_create(const char *dir, int64_t max_bytes,
                               const uint64_t env[2], tt_disk_cache **out) {
  *out = NULL;
  if (!dir || !*dir)
    return tt_make_status(TT_INVALID_ARGUMENT, "cache dir: empty path");
  tt_disk_cache *d = calloc(1, sizeof *d);
  char *copy = strdup(dir);
  if (!d || !copy) {
    free(d);
    free(copy);
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "cache dir: out of memory");
  }
  size_t n = strlen(copy);
  while (n > 1 && copy[n - 1] == '/') copy[--n] = '\0';
  d->dir = copy;
  d->max_bytes = max_bytes;
  d->env[0] = env[0];
  d->env[1] = env[1];
  d->total_bytes = -1;
  tt_status st = open_dir(d);
  if (st) {
    tt_disk_cache_destroy(d);
    return st;
  }
  *out = d;
  return NULL;
}

void tt_disk_cache_destroy(tt_disk_cache *d) {
  if (!d) return;
  memset(d->secret, 0, sizeof d->secret);
  free(d->dir);
  free(d);
}

const char *tt_disk_cache_dir(const tt_disk_cache *d) { return d->dir; }

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// "<dir>/<hex>.ttexe" into a malloc'd string.
static char *entry_path(const tt_disk_cache *d, const tt_cache_key *key) {
  char hex[33];
  tt_cache_key_hex(key, hex);
  size_t n = strlen(d->dir) + 1 + 32 + sizeof kSuffix;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s%s", d->dir, hex, kSuffix);
  return p;
}

// --- the header ------------------------------------------------------------------------

typedef struct header {
  uint32_t version, header_bytes;
  uint64_t key[2], env[2];
  uint64_t text_len, payload_len;
  unsigned char tag[TT_SHA256_BYTES];
} header;

static void header_write(const header *h, unsigned char out[kHeader]) {
  memset(out, 0, kHeader);
  memcpy(out, kMagic, 8);
  memcpy(out + 8, &h->version, 4);
  memcpy(out + 12, &h->header_bytes, 4);
  memcpy(out + 16, h->key, 16);
  memcpy(out + 32, h->env, 16);
  memcpy(out + 48, &h->text_len, 8);
  memcpy(out + 56, &h->payload_len, 8);
  memcpy(out + kTagOffset, h->tag, TT_SHA256_BYTES);
}

static bool header_read(const unsigned char in[kHeader], header *h) {
  if (memcmp(in, kMagic, 8) != 0) return false;
  memcpy(&h->version, in + 8, 4);
  memcpy(&h->header_bytes, in + 12, 4);
  memcpy(h->key, in + 16, 16);
  memcpy(h->env, in + 32, 16);
  memcpy(&h->text_len, in + 48, 8);
  memcpy(&h->payload_len, in + 56, 8);
  memcpy(h->tag, in + kTagOffset, TT_SHA256_BYTES);
  return h->version == kVersion && h->header_bytes == kHeader;
}

// HMAC-SHA256 under the user's key of the header's first kTagOffset bytes,
// the text and the payload: only a holder of the key can make a file that
// passes, whatever else they can compute.
static void entry_tag(const tt_disk_cache *d, const unsigned char *head,
                      const void *text, size_t len, const void *payload,
                      size_t payload_len, unsigned char out[TT_SHA256_BYTES]) {
  tt_hmac m;
  tt_hmac_init(&m, d->secret, sizeof d->secret);
  tt_hmac_update(&m, head, kTagOffset);
  tt_hmac_update(&m, text, len);
  tt_hmac_update(&m, payload, payload_len);
  tt_hmac_final(&m, out);
}

// --- loading ----------------------------------------------------------------------------

// Whether `file` (n bytes) is the entry for `text` under this environment,
// written by a holder of the key; sets *payload / *payload_len.
static bool entry_valid(const tt_disk_cache *d, const tt_cache_key *key,
                        const char *text, size_t len, const unsigned char *file,
                        size_t n, const unsigned char **payload,
                        size_t *payload_len) {
  header h;
  if (n < kHeader || !header_read(file, &h)) return false;
  if (h.key[0] != key->h[0] || h.key[1] != key->h[1]) return false;
  if (h.env[0] != d->env[0] || h.env[1] != d->env[1]) return false;
  if (h.text_len != len || (uint64_t)n - kHeader < h.text_len) return false;
  if (h.payload_len != (uint64_t)n - kHeader - h.text_len) return false;
  const unsigned char *t = file + kHeader;
  if (memcmp(t, text, len) != 0) return false;
  *payload = t + len;
  *payload_len = (size_t)h.payload_len;
  unsigned char tag[TT_SHA256_BYTES];
  entry_tag(d, file, t, len, *payload, *payload_len, tag);
  return tt_digest_equal(tag, h.tag, sizeof tag);
}

bool tt_disk_cache_load(tt_disk_cache *d, tt_pjrt *p, const tt_cache_key *key,
                        const char *text, size_t len, tt_stats *stats,
                        tt_pjrt_exe **out, size_t *exe_bytes) {
  *out = NULL;
  double t0 = now_seconds();
  char *path = entry_path(d, key);
  if (!path) {
    stats->disk_errors++;
    stats->disk_misses++;
    return false;
  }
  unsigned char *file = NULL;
  bool hit = false;
  char why[160];
  int fd = open_quiet(AT_FDCWD, path);
  if (fd < 0) {
    if (errno == ELOOP) {  // a symlink planted in place of an entry
      stats->disk_rejected++;
      warn_once(d, "refused %s: a symbolic link", path);
    } else if (errno != ENOENT && errno != ENOTDIR) {
      stats->disk_errors++;  // else absent
    }
    goto done;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    stats->disk_errors++;
    goto done;
  }
  if (!S_ISREG(sb.st_mode)) {  // a FIFO, device or directory: never read
    stats->disk_rejected++;
    warn_once(d, "refused %s: not a regular file", path);
    goto done;
  }
  if (untrusted(&sb, why, sizeof why)) {
    stats->disk_rejected++;
    warn_once(d, "refused %s: %s", path, why);
    goto done;
  }
  if (sb.st_size < kHeader || sb.st_size > MAX_FILE_BYTES) {
    stats->disk_rejected++;
    goto done;
  }
  file = malloc((size_t)sb.st_size);
  if (!file || !read_exact(fd, file, (size_t)sb.st_size)) {
    stats->disk_errors++;
    goto done;
  }
  const unsigned char *payload = NULL;
  size_t payload_len = 0;
  if (!entry_valid(d, key, text, len, file, (size_t)sb.st_size, &payload,
                   &payload_len)) {
    stats->disk_rejected++;
    goto done;
  }
  tt_status st = tt_pjrt_exe_deserialize(p, payload, payload_len, out);
  if (st) {  // the plugin refused it (e.g. built by another plugin build)
    tt_status_free(st);
    *out = NULL;
    stats->disk_rejected++;
    goto done;
  }
  hit = true;
  if (exe_bytes) *exe_bytes = payload_len;
  (void)futimens(fd, NULL);  // most recently used; may be read-only
done:
  if (fd >= 0) close(fd);
  free(file);
  free(path);
  if (hit) {
    stats->disk_hits++;
    stats->disk_load_seconds += now_seconds() - t0;
  } else {
    stats->disk_misses++;
  }
  return hit;
}

// --- writing ------------------------------------------------------------------------------

// Opens a new temp file beside the entry: ".<hex>.<pid>.<random>.tmp", 0600.
static int open_temp(tt_disk_cache *d, const tt_cache_key *key, char *path,
                     size_t cap) {
  char hex[33];
  tt_cache_key_hex(key, hex);
  for (int attempt = 0; attempt < 8; attempt++) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t r = mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
                       ((uint64_t)getpid() << 16) ^ (uint64_t)(uintptr_t)path ^
                       ++d->tmp_counter);
    snprintf(path, cap, "%s/.%s.%ld.%016llx.tmp", d->dir, hex, (long)getpid(),
             (unsigned long long)r);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

static void evict(tt_disk_cache *d, const char *keep, tt_stats *stats);

size_t tt_disk_cache_store(tt_disk_cache *d, tt_pjrt *p, const tt_cache_key *key,
                           const char *text, size_t len, tt_pjrt_exe *exe,
                           tt_stats *stats) {
  void *payload = NULL;
  size_t payload_len = 0;
  char *path = entry_path(d, key);
  size_t cap = strlen(d->dir) + 96;
  char *tmp = malloc(cap);
  int fd = -1;
  bool ok = false;
  if (!path || !tmp) goto done;
  tt_status st = tt_pjrt_exe_serialize(p, exe, &payload, &payload_len);
  if (st) {
    tt_status_free(st);
    goto done;
  }
  fd = open_temp(d, key, tmp, cap);
  if (fd < 0) goto done;
  header h = {
      .version = kVersion, .header_bytes = kHeader,
      .key = {key->h[0], key->h[1]}, .env = {d->env[0], d->env[1]},
      .text_len = len, .payload_len = payload_len,
  };
  unsigned char head[kHeader];
  header_write(&h, head);
  entry_tag(d, head, text, len, payload, payload_len, head + kTagOffset);
  ok = write_all(fd, head, kHeader) && write_all(fd, text, len) &&
       write_all(fd, payload, payload_len) && fsync(fd) == 0;
  ok = (close(fd) == 0) && ok;
  fd = -1;
  ok = ok && rename(tmp, path) == 0;
  if (!ok) unlink(tmp);
done:
  if (fd >= 0) close(fd);
  if (ok) {
    stats->disk_writes++;
    if (d->total_bytes >= 0)
      d->total_bytes += (int64_t)(kHeader + len + payload_len);
    evict(d, path, stats);
  } else {
    stats->disk_errors++;
  }
  free(payload);
  free(tmp);
  free(path);
  return ok ? payload_len : 0;
}

// --- the size bound ------------------------------------------------------------------------

typedef struct file_info {
  char *name;  // owned
  int64_t bytes;
  struct timespec mtime;
} file_info;

static int by_mtime(const void *a, const void *b) {
  const file_info *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

static bool is_entry_name(const char *name) {
  size_t n = strlen(name);
  if (n != 32 + sizeof kSuffix - 1 || strcmp(name + 32, kSuffix) != 0) return false;
  for (int i = 0; i < 32; i++) {
    char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

static bool is_temp_name(const char *name) {
  size_t n = strlen(name);
  return name[0] == '.' && n > 4 && strcmp(name + n - 4, ".tmp") == 0;
}

// Lists the entries (and removes stale temp files); returns the count or -1.
static int scan(tt_disk_cache *d, file_info **out, int64_t *total) {
  *out = NULL;
  *total = 0;
  DIR *dir = opendir(d->dir);
  if (!dir) return errno == ENOENT ? 0 : -1;
  int n = 0, cap = 0;
  file_info *files = NULL;
  time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(dir)) != NULL) {
    bool entry = is_entry_name(e->d_name);
    if (!entry && !is_temp_name(e->d_name)) continue;
    struct stat sb;
    if (fstatat(dirfd(dir), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(sb.st_mode))
      continue;
    if (!entry) {
      if (now - sb.st_mtime > 3600) (void)unlinkat(dirfd(dir), e->d_name, 0);
      continue;
    }
    if (n == cap) {
      int c = cap ? 2 * cap : 64;
      file_info *f = realloc(files, (size_t)c * sizeof *f);
      if (!f) break;
      files = f;
      cap = c;
    }
    char *name = strdup(e->d_name);
    if (!name) break;
    files[n++] = (file_info){name, (int64_t)sb.st_size, sb.st_mtim};
    *total += (int64_t)sb.st_size;
  }
  closedir(dir);
  *out = files;
  return n;
}

static void evict(tt_disk_cache *d, const char *keep, tt_stats *stats) {
  if (d->max_bytes <= 0) return;
  if (d->total_bytes >= 0 && d->total_bytes <= d->max_bytes) return;
  file_info *files = NULL;
  int64_t total = 0;
  int n = scan(d, &files, &total);
  if (n < 0) {
    stats->disk_errors++;
    return;
  }
  d->total_bytes = total;
  if (total > d->max_bytes) {
    qsort(files, (size_t)n, sizeof *files, by_mtime);
    const char *keep_name = strrchr(keep, '/');
    keep_name = keep_name ? keep_name + 1 : keep;
    int64_t target = d->max_bytes - d->max_bytes / 10;
    for (int i = 0; i < n && d->total_bytes > target; i++) {
      if (strcmp(files[i].name, keep_name) == 0) continue;
      size_t cap = strlen(d->dir) + strlen(files[i].name) + 2;
      char *p = malloc(cap);
      if (!p) break;
      snprintf(p, cap, "%s/%s", d->dir, files[i].name);
      if (unlink(p) == 0) {
        d->total_bytes -= files[i].bytes;
        stats->disk_evictions++;
      } else if (errno != ENOENT) {  // another process may have removed it
        stats->disk_errors++;
      }
      free(p);
    }
  }
  for (int i = 0; i < n; i++) free(files[i].name);
  free(files);
}
