// disk_cache.h — cache keys and the persistent compilation cache (internal;
// disk_cache.c).
//
// Owns: the directory handle and its settings. Borrows: the PJRT client to
// (de)serialise executables and the counters it updates.
#ifndef TT_RUNTIME_DISK_CACHE_H
#define TT_RUNTIME_DISK_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "pjrt/pjrt.h"
#include "torchtpu.h"

// --- cache keys (disk_cache.c) ------------------------------------------------------
//
// A program's key names it across processes: two independent 64-bit hashes
// of its StableHLO text, each seeded with the hash of the compile
// environment (compile options bytes, plugin platform, platform version,
// PJRT API version, device count and kind). The in-memory table compares the
// full text; the disk file stores the text too, so a key collision is caught.

typedef struct tt_cache_key {
  uint64_t h[2];
} tt_cache_key;

// Hash of the compile environment bytes `env`.
void tt_cache_env_hash(const void *env, size_t len, uint64_t out[2]);
void tt_cache_key_make(const uint64_t env[2], const char *text, size_t len,
                       tt_cache_key *out);
void tt_cache_key_hex(const tt_cache_key *k, char out[33]);

// --- the persistent cache (disk_cache.c) ----------------------------------------------
//
// One file per program, <key hex>.ttexe, in one directory. Nothing here
// fails an op: I/O errors and bad files are counted in `stats` and the
// caller compiles as if the file were absent.

typedef struct tt_disk_cache tt_disk_cache;

// `max_bytes` <= 0: no bound. The directory is created on the first write.
tt_status tt_disk_cache_create(const char *dir, int64_t max_bytes,
                               const uint64_t env[2], tt_disk_cache **out);
void tt_disk_cache_destroy(tt_disk_cache *d);
const char *tt_disk_cache_dir(const tt_disk_cache *d);  // borrowed

// The executable stored for `text` (owned by the caller), or false;
// *exe_bytes (may be NULL) gets its serialised size.
bool tt_disk_cache_load(tt_disk_cache *d, tt_pjrt *p, const tt_cache_key *key,
                        const char *text, size_t len, tt_stats *stats,
                        tt_pjrt_exe **out, size_t *exe_bytes);
// Writes (or overwrites) the entry for `text` atomically, then keeps the
// directory under its size bound by removing least recently used entries.
// Returns the executable's serialised size (0 when nothing was written), so
// that the program cache need not serialise it again to size it.
size_t tt_disk_cache_store(tt_disk_cache *d, tt_pjrt *p, const tt_cache_key *key,
                           const char *text, size_t len, tt_pjrt_exe *exe,
                           tt_stats *stats);

#endif
