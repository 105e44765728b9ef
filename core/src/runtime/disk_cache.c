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
//       56      8  text hash
//       64      8  payload length (bytes)
//       72      8  payload hash
//       80      -  the StableHLO text, then the payload (tt_pjrt_exe_serialize)
//
// A file is used only when every field matches and the text is the same
// byte for byte, so a key collision, a file from another plugin or version,
// a truncated or partly overwritten file are all ignored (counted) and the
// program is compiled and the file rewritten. Writes go to a unique temp
// file in the same directory, are fsync'ed and renamed over the entry:
// readers see the old file or the new one, never half of one, and two
// processes writing the same entry both leave a valid file.
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
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/hash.h"
#include "runtime/disk_cache.h"

static const char kMagic[8] = "TTPUEXE";  // + NUL
enum { kVersion = 1, kHeader = 80 };
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
  int64_t total_bytes;  // estimate of the directory's entries; -1: not scanned
  bool dir_made;
  uint64_t tmp_counter;
};

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
  *out = d;
  return NULL;
}

void tt_disk_cache_destroy(tt_disk_cache *d) {
  if (!d) return;
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
  uint64_t text_len, text_hash, payload_len, payload_hash;
} header;

static void header_write(const header *h, unsigned char out[kHeader]) {
  memset(out, 0, kHeader);
  memcpy(out, kMagic, 8);
  memcpy(out + 8, &h->version, 4);
  memcpy(out + 12, &h->header_bytes, 4);
  memcpy(out + 16, h->key, 16);
  memcpy(out + 32, h->env, 16);
  memcpy(out + 48, &h->text_len, 8);
  memcpy(out + 56, &h->text_hash, 8);
  memcpy(out + 64, &h->payload_len, 8);
  memcpy(out + 72, &h->payload_hash, 8);
}

static bool header_read(const unsigned char in[kHeader], header *h) {
  if (memcmp(in, kMagic, 8) != 0) return false;
  memcpy(&h->version, in + 8, 4);
  memcpy(&h->header_bytes, in + 12, 4);
  memcpy(h->key, in + 16, 16);
  memcpy(h->env, in + 32, 16);
  memcpy(&h->text_len, in + 48, 8);
  memcpy(&h->text_hash, in + 56, 8);
  memcpy(&h->payload_len, in + 64, 8);
  memcpy(&h->payload_hash, in + 72, 8);
  return h->version == kVersion && h->header_bytes == kHeader;
}

// --- loading ----------------------------------------------------------------------------

// Reads all of `fd` (size `n`) into a malloc'd buffer; NULL on error.
static unsigned char *read_all(int fd, size_t n) {
  unsigned char *buf = malloc(n ? n : 1);
  if (!buf) return NULL;
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      free(buf);
      return NULL;
    }
    got += (size_t)r;
  }
  return buf;
}

// Whether `file` (n bytes) is the entry for `text` under this environment;
// sets *payload / *payload_len.
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
  if (memcmp(t, text, len) != 0 || hash_words(t, len, h.key[0]) != h.text_hash)
    return false;
  *payload = t + len;
  *payload_len = (size_t)h.payload_len;
  return hash_words(*payload, *payload_len, h.key[1]) == h.payload_hash;
}

bool tt_disk_cache_load(tt_disk_cache *d, tt_pjrt *p, const tt_cache_key *key,
                        const char *text, size_t len, tt_stats *stats,
                        tt_pjrt_exe **out) {
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
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT && errno != ENOTDIR) stats->disk_errors++;  // else absent
    goto done;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    stats->disk_errors++;
    goto done;
  }
  if (sb.st_size < kHeader || sb.st_size > MAX_FILE_BYTES) {
    stats->disk_rejected++;
    goto done;
  }
  file = read_all(fd, (size_t)sb.st_size);
  if (!file) {
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
  (void)utimensat(AT_FDCWD, path, NULL, 0);  // most recently used; may be read-only
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

// mkdir -p; true when the directory exists afterwards.
static bool make_dirs(const char *dir) {
  char *p = strdup(dir);
  if (!p) return false;
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
      free(p);
      return false;
    }
    *s = '/';
  }
  bool ok = mkdir(p, 0755) == 0 || errno == EEXIST;
  free(p);
  struct stat sb;
  return ok && stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode);
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

// Opens a new temp file beside the entry: ".<hex>.<pid>.<random>.tmp".
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
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

static void evict(tt_disk_cache *d, const char *keep, tt_stats *stats);

void tt_disk_cache_store(tt_disk_cache *d, tt_pjrt *p, const tt_cache_key *key,
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
  if (!d->dir_made && !(d->dir_made = make_dirs(d->dir))) goto done;
  fd = open_temp(d, key, tmp, cap);
  if (fd < 0) goto done;
  header h = {
      .version = kVersion, .header_bytes = kHeader,
      .key = {key->h[0], key->h[1]}, .env = {d->env[0], d->env[1]},
      .text_len = len, .text_hash = hash_words(text, len, key->h[0]),
      .payload_len = payload_len,
      .payload_hash = hash_words(payload, payload_len, key->h[1]),
  };
  unsigned char head[kHeader];
  header_write(&h, head);
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
