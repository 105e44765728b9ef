// Signature and program caches: chained hash tables keyed by bytes. See
// cache.h. Keys are compared in full, so hash collisions are harmless.
#include "runtime/cache.h"

#include "runtime/background.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "runtime/explain.h"

// --- a byte-keyed table ------------------------------------------------------------

typedef struct entry {
  struct entry *next;
  uint64_t hash;
  void *key;  // owned
  size_t len;
  void *value;
} entry;

typedef struct table {
  entry **buckets;
  size_t nbuckets;
  size_t count;
} table;

static tt_status table_init(table *t) {
  t->nbuckets = 1024;
  t->count = 0;
  t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
  if (!t->buckets) return tt_make_status(TT_RESOURCE_EXHAUSTED, "cache: out of memory");
  return NULL;
}

static void *table_find(const table *t, const void *key, size_t len) {
  uint64_t h = tt_hash_words(key, len);
  for (entry *e = t->buckets[h % t->nbuckets]; e; e = e->next)
    if (e->hash == h && e->len == len && memcmp(e->key, key, len) == 0)
      return e->value;
  return NULL;
}

static void grow(table *t) {
  size_t n = t->nbuckets * 2;
  entry **b = calloc(n, sizeof *b);
  if (!b) return;  // keep the longer chains
  for (size_t i = 0; i < t->nbuckets; i++) {
    for (entry *e = t->buckets[i], *next; e; e = next) {
      next = e->next;
      e->next = b[e->hash % n];
      b[e->hash % n] = e;
    }
  }
  free(t->buckets);
  t->buckets = b;
  t->nbuckets = n;
}

static tt_status table_insert(table *t, const void *key, size_t len,
                              void *value) {
  entry *e = malloc(sizeof *e);
  void *k = malloc(len ? len : 1);
  if (!e || !k) {
    free(e);
    free(k);
    return tt_make_status(TT_RESOURCE_EXHAUSTED, "cache: out of memory");
  }
  memcpy(k, key, len);
  e->hash = tt_hash_words(key, len);
  e->key = k;
  e->len = len;
  e->value = value;
  e->next = t->buckets[e->hash % t->nbuckets];
  t->buckets[e->hash % t->nbuckets] = e;
  if (++t->count > 2 * t->nbuckets) grow(t);
  return NULL;
}

// Unlinks the entry for `key` and returns its value (NULL when absent).
static void *table_remove(table *t, const void *key, size_t len) {
  uint64_t h = tt_hash_words(key, len);
  for (entry **pe = &t->buckets[h % t->nbuckets]; *pe; pe = &(*pe)->next) {
    entry *e = *pe;
    if (e->hash == h && e->len == len && memcmp(e->key, key, len) == 0) {
      void *v = e->value;
      *pe = e->next;
      free(e->key);
      free(e);
      t->count--;
      return v;
    }
  }
  return NULL;
}

// Removes every entry for which `drop(value, ctx)` is true (freeing it).
static void table_remove_if(table *t, bool (*drop)(void *value, void *ctx), void *ctx) {
  for (size_t i = 0; i < t->nbuckets; i++) {
    for (entry **pe = &t->buckets[i]; *pe;) {
      entry *e = *pe;
      if (drop(e->value, ctx)) {
        *pe = e->next;
        free(e->key);
        free(e);
        t->count--;
      } else {
        pe = &e->next;
      }
    }
  }
}

typedef void (*free_value_fn)(void *value, void *ctx);

static void table_deinit(table *t, free_value_fn free_value, void *ctx) {
  for (size_t i = 0; t->buckets && i < t->nbuckets; i++) {
    for (entry *e = t->buckets[i], *next; e; e = next) {
      next = e->next;
      free_value(e->value, ctx);
      free(e->key);
      free(e);
    }
  }
  free(t->buckets);
  t->buckets = NULL;
}

// --- signature cache -------------------------------------------------------------

struct tt_sig_cache {
  table t;
};

void tt_plan_free(tt_plan *p) {
  if (!p) return;
  free(p->message);
  free(p->text);
  free(p->why);
  tt_bg_cancel(p->job);
  tt_program_deinit(&p->prog);
  free(p);
}

static void free_plan(void *v, void *ctx) {
  (void)ctx;
  tt_plan_free(v);
}

tt_status tt_sig_cache_create(tt_sig_cache **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return tt_make_status(TT_RESOURCE_EXHAUSTED, "cache: out of memory");
  tt_status st = table_init(&(*out)->t);
  if (st) {
    free(*out);
    *out = NULL;
  }
  return st;
}

void tt_sig_cache_destroy(tt_sig_cache *c, tt_pjrt *p) {
  (void)p;  // plans borrow their executables from the program cache
  if (!c) return;
  table_deinit(&c->t, free_plan, NULL);
  free(c);
}

tt_plan *tt_sig_cache_find(tt_sig_cache *c, const void *key, size_t len) {
  return table_find(&c->t, key, len);
}

tt_status tt_sig_cache_insert(tt_sig_cache *c, const void *key, size_t len,
                              tt_plan *plan) {
  tt_status st = table_insert(&c->t, key, len, plan);
  if (st) tt_plan_free(plan);
  return st;
}

// --- program cache ----------------------------------------------------------------
//
// Values are prog_entry records: the executable plus what
// tt_runtime_cache_entries reports. `list` keeps them in insertion order.

typedef struct prog_entry {
  tt_pjrt_exe *exe;  // owned
  tt_cache_key key;
  char label[64];
  int64_t uses;
  double seconds;
  bool from_disk;
  int64_t text_bytes;
  char *text;        // owned copy of the table key (to remove the entry)
  int64_t exe_bytes; // serialised executable, when the disk cache told us
  int64_t bytes;     // text + serialised executable, when bounded
  uint64_t last_use; // c->clock at the last lookup
  int32_t pins;      // borrowers that outlive the call (graphs)
} prog_entry;

struct tt_prog_cache {
  table t;
  prog_entry **list;  // borrowed from the table
  int nlist, cap_list;
  // The bound (see tt_prog_cache_set_max_bytes); 0: none.
  int64_t max_bytes, total_bytes;
  uint64_t clock;
  int64_t evictions;
  tt_pjrt *pjrt;         // borrowed: to destroy evicted executables
  // Told before an evicted executable is destroyed, so that what borrows it
  // (signature plans, recorded traces) lets go first.
  tt_prog_evict_fn on_evict;
  void *evict_ctx;
  tt_disk_cache *disk;  // owned; NULL: no persistent cache
  uint64_t env[2];
  bool env_ready;
  tt_explain *explain;  // owned
};

static void free_entry(void *v, void *ctx) {
  prog_entry *e = v;
  tt_pjrt_exe_destroy(ctx, e->exe);
  free(e->text);
  free(e);
}

tt_status tt_prog_cache_create(tt_prog_cache **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return tt_make_status(TT_RESOURCE_EXHAUSTED, "cache: out of memory");
  tt_status st = table_init(&(*out)->t);
  if (!st) st = tt_explain_create(&(*out)->explain);
  if (st) {
    free((*out)->t.buckets);
    free(*out);
    *out = NULL;
  }
  return st;
}

void tt_prog_cache_destroy(tt_prog_cache *c, tt_pjrt *p) {
  if (!c) return;
  table_deinit(&c->t, free_entry, p);
  free(c->list);
  tt_disk_cache_destroy(c->disk);
  tt_explain_destroy(c->explain);
  free(c);
}

tt_pjrt_exe *tt_prog_cache_find(tt_prog_cache *c, const char *text,
                                size_t len) {
  prog_entry *e = table_find(&c->t, text, len);
  if (!e) return NULL;
  e->uses++;
  e->last_use = ++c->clock;
  return e->exe;
}

// --- the bound -----------------------------------------------------------------------
//
// Past max_bytes, the least recently used entries go, oldest first, until
// the total is back under 90% of the bound. Borrowed executables stay valid:
//  - a plan of the signature cache points at its executable; evicting the
//    executable drops those plans in the same step (the next call of that
//    signature lowers again and finds or compiles its program);
//  - a borrower that keeps an executable beyond the current call (a captured
//    graph) pins it, and pinned entries are never evicted;
//  - the entry just inserted is never evicted (its caller is about to run it).
// An entry's size is its text, its serialised executable and what a loaded
// executable holds beyond that (the plugin reports no in-memory size). On
// XLA's CPU plugin the process grows by ~260 KB and ~4 memory mappings per
// loaded program (JIT code and data sections, the JIT session; measured by
// bench/soak_program_cache.py), far more than its serialised form (a few
// KB), so that fixed part dominates the estimate.
#define LOADED_EXE_BYTES (256 << 10)

static int64_t measure(tt_prog_cache *c, const prog_entry *e) {
  int64_t bytes = e->text_bytes + LOADED_EXE_BYTES;
  if (e->exe_bytes > 0) return bytes + e->exe_bytes;
  void *data = NULL;
  size_t n = 0;
  if (c->pjrt) {
    tt_status st = tt_pjrt_exe_serialize(c->pjrt, e->exe, &data, &n);
    if (st) tt_status_free(st);
    else bytes += (int64_t)n;
    free(data);
  }
  return bytes;
}

static bool plan_uses(void *value, void *ctx) {
  tt_plan *p = value;
  if (p->exe != ctx) return false;
  tt_plan_free(p);
  return true;
}

static void remove_from_list(tt_prog_cache *c, const prog_entry *e) {
  for (int i = 0; i < c->nlist; i++) {
    if (c->list[i] != e) continue;
    memmove(&c->list[i], &c->list[i + 1], (size_t)(c->nlist - i - 1) * sizeof *c->list);
    c->nlist--;
    return;
  }
}

static void evict(tt_prog_cache *c, const prog_entry *keep) {
  if (c->max_bytes <= 0 || c->total_bytes <= c->max_bytes || !c->pjrt) return;
  int64_t target = c->max_bytes - c->max_bytes / 10;
  while (c->total_bytes > target) {
    prog_entry *victim = NULL;
    for (int i = 0; i < c->nlist; i++) {
      prog_entry *e = c->list[i];
      if (e == keep || e->pins > 0 || !e->text) continue;
      if (!victim || e->last_use < victim->last_use) victim = e;
    }
    if (!victim) return;  // everything left is pinned or in use
    if (c->on_evict) c->on_evict(c->evict_ctx, victim->exe);
    table_remove(&c->t, victim->text, (size_t)victim->text_bytes);
    remove_from_list(c, victim);
    c->total_bytes -= victim->bytes;
    c->evictions++;
    free_entry(victim, c->pjrt);
  }
}

tt_status tt_prog_cache_insert(tt_prog_cache *c, const char *text, size_t len,
                               tt_pjrt_exe *exe, const tt_prog_meta *meta) {
  prog_entry *e = calloc(1, sizeof *e);
  if (c->nlist == c->cap_list) {
    int cap = c->cap_list ? 2 * c->cap_list : 64;
    prog_entry **l = realloc(c->list, (size_t)cap * sizeof *l);
    if (l) {
      c->list = l;
      c->cap_list = cap;
    }
  }
  tt_status st = NULL;
  if (!e || c->nlist == c->cap_list)
    st = tt_make_status(TT_RESOURCE_EXHAUSTED, "cache: out of memory");
  if (!st) {
    e->exe = exe;
    e->uses = 1;
    e->text_bytes = (int64_t)len;
    if (meta) {
      e->key = meta->key;
      snprintf(e->label, sizeof e->label, "%s", meta->label ? meta->label : "");
      e->seconds = meta->seconds;
      e->from_disk = meta->from_disk;
      e->exe_bytes = meta->exe_bytes;
    }
    st = table_insert(&c->t, text, len, e);
  }
  if (st) {
    free(e);
    return st;  // the caller still owns exe
  }
  c->list[c->nlist++] = e;
  e->last_use = ++c->clock;
  e->text = malloc(len ? len : 1);
  if (e->text) memcpy(e->text, text, len);
  if (c->max_bytes > 0) {
    e->bytes = measure(c, e);
    c->total_bytes += e->bytes;
    evict(c, e);
  }
  return NULL;
}

int tt_prog_cache_entries(tt_prog_cache *c, tt_cache_entry_info *out, int cap) {
  for (int i = 0; i < c->nlist && i < cap; i++) {
    const prog_entry *e = c->list[i];
    tt_cache_entry_info *o = &out[i];
    memset(o, 0, sizeof *o);
    tt_cache_key_hex(&e->key, o->key);
    memcpy(o->label, e->label, sizeof o->label);
    o->uses = e->uses;
    o->compile_seconds = e->seconds;
    o->from_disk = e->from_disk;
    o->text_bytes = e->text_bytes;
  }
  return c->nlist;
}

tt_disk_cache *tt_prog_cache_disk(tt_prog_cache *c) { return c->disk; }

void tt_prog_cache_set_disk(tt_prog_cache *c, tt_disk_cache *d) {
  tt_disk_cache_destroy(c->disk);
  c->disk = d;
}

const uint64_t *tt_prog_cache_env(const tt_prog_cache *c) {
  return c->env_ready ? c->env : NULL;
}

void tt_prog_cache_set_env(tt_prog_cache *c, const uint64_t env[2]) {
  c->env[0] = env[0];
  c->env[1] = env[1];
  c->env_ready = true;
}

tt_explain *tt_prog_cache_explain(tt_prog_cache *c) { return c->explain; }

// --- bound, pins, dependents ---------------------------------------------------------

void tt_sig_cache_drop_exe(tt_sig_cache *c, const tt_pjrt_exe *exe) {
  table_remove_if(&c->t, plan_uses, (void *)exe);
}

void tt_prog_cache_set_bound(tt_prog_cache *c, tt_pjrt *p, int64_t max_bytes,
                             tt_prog_evict_fn on_evict, void *ctx) {
  c->pjrt = p;
  c->on_evict = on_evict;
  c->evict_ctx = ctx;
  bool was = c->max_bytes > 0;
  c->max_bytes = max_bytes > 0 ? max_bytes : 0;
  if (c->max_bytes > 0 && !was) {  // entries made while unbounded: size them now
    c->total_bytes = 0;
    for (int i = 0; i < c->nlist; i++) {
      c->list[i]->bytes = measure(c, c->list[i]);
      c->total_bytes += c->list[i]->bytes;
    }
  }
  evict(c, NULL);
}

static prog_entry *entry_of_exe(tt_prog_cache *c, const tt_pjrt_exe *exe) {
  for (int i = c->nlist - 1; i >= 0; i--)
    if (c->list[i]->exe == exe) return c->list[i];
  return NULL;
}

void tt_prog_cache_pin(tt_prog_cache *c, const tt_pjrt_exe *exe) {
  prog_entry *e = entry_of_exe(c, exe);
  if (e) e->pins++;
}

void tt_prog_cache_unpin(tt_prog_cache *c, const tt_pjrt_exe *exe) {
  prog_entry *e = entry_of_exe(c, exe);
  if (e && e->pins > 0) e->pins--;
}

void tt_prog_cache_usage(const tt_prog_cache *c, int64_t *out_bytes, int64_t *out_entries,
                         int64_t *out_evictions) {
  *out_bytes = c->total_bytes;
  *out_entries = c->nlist;
  *out_evictions = c->evictions;
}
