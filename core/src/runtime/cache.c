// Signature and program caches: chained hash tables keyed by bytes. See
// cache.h. Keys are compared in full, so hash collisions are harmless.
#include "runtime/cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/hash.h"

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
  uint64_t h = tt_hash64(key, len);
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
  e->hash = tt_hash64(key, len);
  e->key = k;
  e->len = len;
  e->value = value;
  e->next = t->buckets[e->hash % t->nbuckets];
  t->buckets[e->hash % t->nbuckets] = e;
  if (++t->count > 2 * t->nbuckets) grow(t);
  return NULL;
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
  free(p->params);
  free(p->outs);
  free(p->results);
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

struct tt_prog_cache {
  table t;
};

static void free_exe(void *v, void *ctx) { tt_pjrt_exe_destroy(ctx, v); }

tt_status tt_prog_cache_create(tt_prog_cache **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return tt_make_status(TT_RESOURCE_EXHAUSTED, "cache: out of memory");
  tt_status st = table_init(&(*out)->t);
  if (st) {
    free(*out);
    *out = NULL;
  }
  return st;
}

void tt_prog_cache_destroy(tt_prog_cache *c, tt_pjrt *p) {
  if (!c) return;
  table_deinit(&c->t, free_exe, p);
  free(c);
}

tt_pjrt_exe *tt_prog_cache_find(tt_prog_cache *c, const char *text,
                                size_t len) {
  return table_find(&c->t, text, len);
}

tt_status tt_prog_cache_insert(tt_prog_cache *c, const char *text, size_t len,
                               tt_pjrt_exe *exe) {
  return table_insert(&c->t, text, len, exe);
}
