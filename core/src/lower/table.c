// table.c — the op table: joins the family tables into one id space, resolves
// ATen names to ids (a sorted index, binary search), accepts rules registered
// at run time, and checks the built-in names for duplicates.
//
// Ids are stable for the life of the process: built-in rules take ids
// 0..n-1 in family order, registered ones are appended. The index is built
// once (pthread_once); registration and lookup take a mutex, tt_rule_get is
// lock-free (it reads a published slot).
//
// Leaves out: unregistering (ids must stay valid while the shim caches them).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower/lower.h"

// --- the joined table ------------------------------------------------------------------

static const tt_rule_table *const kFamilies[] = {
    &tt_rules_elementwise, &tt_rules_reduction, &tt_rules_linalg, &tt_rules_shape,
    &tt_rules_nn,          &tt_rules_random,    &tt_rules_factory,
    &tt_rules_conv,        &tt_rules_norm,      &tt_rules_index,
    &tt_rules_foreach,     &tt_rules_loss,
    &tt_rules_attention,   &tt_rules_dropout,
    &tt_rules_special,
    &tt_rules_spatial,
    &tt_rules_select,
    &tt_rules_misc,
    &tt_rules_fft,
    &tt_rules_linalg_lu,
    &tt_rules_linalg_qr,
    &tt_rules_rnn,
    &tt_rules_norm_sync,
    &tt_rules_transformer,
    &tt_rules_amp,
    &tt_rules_weight_norm,
    &tt_rules_grid_sample,
};
enum { kNumFamilies = (int)(sizeof kFamilies / sizeof kFamilies[0]) };

static const tt_rule_checks *const kChecks[] = {&tt_checks_elementwise, &tt_checks_random,
                                                 &tt_checks_select};
enum { kNumChecks = (int)(sizeof kChecks / sizeof kChecks[0]) };

static const tt_rule_variants *const kVariants[] = {&tt_variants_elementwise};
enum { kNumVariants = (int)(sizeof kVariants / sizeof kVariants[0]) };

#define MAX_RULES 4096

// Process-wide registry. `slots` are published with release stores so that
// tt_rule_get can read them without the lock.
static struct {
  pthread_once_t once;
  pthread_mutex_t mu;
  const tt_rule *slots[MAX_RULES];
  tt_check_fn checks[MAX_RULES];  // per id; set with its slot
  tt_variant_fn variants[MAX_RULES];  // per id; set with its slot
  int32_t count;
  int32_t sorted[MAX_RULES];  // ids ordered by name (first id wins on ties)
  int32_t nsorted;
} g = {PTHREAD_ONCE_INIT, PTHREAD_MUTEX_INITIALIZER, {0}, {0}, {0}, 0, {0}, 0};

static int32_t find_locked(const char *name);

static int cmp_ids(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  int c = strcmp(g.slots[x]->name, g.slots[y]->name);
  return c ? c : (x > y) - (x < y);
}

static void build(void) {
  int32_t n = 0;
  for (int f = 0; f < kNumFamilies; f++)
    for (int i = 0; i < kFamilies[f]->n && n < MAX_RULES; i++)
      g.slots[n++] = &kFamilies[f]->rules[i];
  for (int32_t i = 0; i < n; i++) g.sorted[i] = i;
  qsort(g.sorted, (size_t)n, sizeof g.sorted[0], cmp_ids);
  g.nsorted = n;
  for (int f = 0; f < kNumChecks; f++)  // a check naming no rule is left out
    for (int i = 0; i < kChecks[f]->n; i++) {
      int32_t id = find_locked(kChecks[f]->items[i].name);
      if (id >= 0) g.checks[id] = kChecks[f]->items[i].check;
    }
  for (int f = 0; f < kNumVariants; f++)
    for (int i = 0; i < kVariants[f]->n; i++) {
      int32_t id = find_locked(kVariants[f]->items[i].name);
      if (id >= 0) g.variants[id] = kVariants[f]->items[i].variant;
    }
  __atomic_store_n(&g.count, n, __ATOMIC_RELEASE);
}

static void ensure_built(void) { pthread_once(&g.once, build); }

// Position of the first entry >= name in the sorted index (lock held).
static int32_t lower_bound(const char *name) {
  int32_t lo = 0, hi = g.nsorted;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (strcmp(g.slots[g.sorted[mid]]->name, name) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// "aten::relu.default" names the same op as "aten::relu".
static void normalize(const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", name);
  size_t n = strlen(buf);
  static const char kDefault[] = ".default";
  size_t k = sizeof kDefault - 1;
  if (n > k && strcmp(buf + n - k, kDefault) == 0) buf[n - k] = '\0';
}

static int32_t find_locked(const char *name) {
  int32_t pos = lower_bound(name);
  if (pos < g.nsorted && strcmp(g.slots[g.sorted[pos]]->name, name) == 0)
    return g.sorted[pos];
  return -1;
}

// --- lookups ------------------------------------------------------------------------------

int32_t tt_op_lookup(const char *name) {
  if (!name) return -1;
  ensure_built();
  char buf[256];
  normalize(name, buf, sizeof buf);
  pthread_mutex_lock(&g.mu);
  int32_t id = find_locked(buf);
  pthread_mutex_unlock(&g.mu);
  return id;
}

const tt_rule *tt_rule_get(int32_t op) {
  ensure_built();
  if (op < 0 || op >= __atomic_load_n(&g.count, __ATOMIC_ACQUIRE)) return NULL;
  return __atomic_load_n(&g.slots[op], __ATOMIC_ACQUIRE);
}

tt_check_fn tt_rule_check_get(int32_t op) {
  ensure_built();
  if (op < 0 || op >= __atomic_load_n(&g.count, __ATOMIC_ACQUIRE)) return NULL;
  return __atomic_load_n(&g.checks[op], __ATOMIC_ACQUIRE);
}

tt_variant_fn tt_rule_variant_get(int32_t op) {
  ensure_built();
  if (op < 0 || op >= __atomic_load_n(&g.count, __ATOMIC_ACQUIRE)) return NULL;
  return __atomic_load_n(&g.variants[op], __ATOMIC_ACQUIRE);
}

const char *tt_op_name(int32_t op) {
  const tt_rule *r = tt_rule_get(op);
  return r ? r->name : NULL;
}

bool tt_op_replaces_composite(int32_t op) {
  const tt_rule *r = tt_rule_get(op);
  return r && (r->flags & TT_RULE_REPLACES_COMPOSITE);
}

int32_t tt_op_count(void) {
  ensure_built();
  return __atomic_load_n(&g.count, __ATOMIC_ACQUIRE);
}

// --- registration ----------------------------------------------------------------------------

// A heap copy of a registered rule. Never freed, since ids (and the rule
// pointers tt_rule_get handed out) live as long as the process; chained from
// `owned` so they stay reachable (leak checkers stay quiet).
typedef struct owned_rule {
  tt_rule rule;
  struct owned_rule *next;
  char name[];
} owned_rule;

static owned_rule *g_owned = NULL;  // guarded by g.mu

static tt_rule *copy_rule(const char *name, tt_lower_fn fn, uint32_t flags) {
  size_t len = strlen(name) + 1;
  owned_rule *r = malloc(sizeof *r + len);
  if (!r) return NULL;
  memcpy(r->name, name, len);
  r->rule = (tt_rule){r->name, fn, flags};
  r->next = g_owned;
  g_owned = r;
  return &r->rule;
}

int32_t tt_rule_register(const char *name, tt_lower_fn fn, uint32_t flags) {
  if (!name || !fn) return -1;
  ensure_built();
  char buf[256];
  normalize(name, buf, sizeof buf);
  pthread_mutex_lock(&g.mu);
  int32_t id = find_locked(buf);
  tt_rule *r = (id >= 0 || g.count < MAX_RULES) ? copy_rule(buf, fn, flags) : NULL;
  if (r && id >= 0) {  // replace in place: the id stays, the old rule's check goes
    __atomic_store_n(&g.checks[id], NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&g.slots[id], r, __ATOMIC_RELEASE);
  } else if (r) {
    id = g.count;
    g.slots[id] = r;
    int32_t pos = lower_bound(buf);
    memmove(&g.sorted[pos + 1], &g.sorted[pos], (size_t)(g.nsorted - pos) * sizeof(int32_t));
    g.sorted[pos] = id;
    g.nsorted++;
    __atomic_store_n(&g.count, id + 1, __ATOMIC_RELEASE);
  } else {
    id = -1;
  }
  pthread_mutex_unlock(&g.mu);
  return id;
}

// --- checks ------------------------------------------------------------------------------------

static int cmp_names(const void *a, const void *b) {
  return strcmp((*(const tt_rule *const *)a)->name, (*(const tt_rule *const *)b)->name);
}

// Appends "what: name" to the message buffer.
static void note(char *msg, size_t cap, int *count, const char *what, const char *name) {
  size_t n = strlen(msg);
  if (n < cap) snprintf(msg + n, cap - n, "%s%s %s", *count ? "; " : "", what, name ? name : "(null)");
  (*count)++;
}

tt_status tt_rule_table_check(void) {
  int total = 0;
  for (int f = 0; f < kNumFamilies; f++) total += kFamilies[f]->n;
  const tt_rule **all = malloc((size_t)(total ? total : 1) * sizeof *all);
  if (!all) return tt_make_status(TT_RESOURCE_EXHAUSTED, "rule table check: out of memory");
  char msg[2048] = "";
  int bad = 0, n = 0;
  for (int f = 0; f < kNumFamilies; f++) {
    for (int i = 0; i < kFamilies[f]->n; i++) {
      const tt_rule *r = &kFamilies[f]->rules[i];
      if (!r->name || strncmp(r->name, "aten::", 6) != 0) note(msg, sizeof msg, &bad, "bad name", r->name);
      else if (!r->fn) note(msg, sizeof msg, &bad, "no function", r->name);
      else all[n++] = r;
    }
  }
  qsort(all, (size_t)n, sizeof *all, cmp_names);
  for (int i = 1; i < n; i++)
    if (strcmp(all[i - 1]->name, all[i]->name) == 0) note(msg, sizeof msg, &bad, "duplicate", all[i]->name);
  free(all);
  if (total > MAX_RULES) note(msg, sizeof msg, &bad, "too many rules for MAX_RULES", "");
  return bad ? tt_make_status(TT_INTERNAL, "rule table: %d problem(s): %s", bad, msg) : NULL;
}

// --- aliases (public API) -------------------------------------------------------------------

int32_t tt_op_register_alias(const char *name, const char *existing_name) {
  int32_t existing = tt_op_lookup(existing_name);
  const tt_rule *r = tt_rule_get(existing);
  if (!name || !r) return -1;
  tt_check_fn check = tt_rule_check_get(existing);
  tt_variant_fn variant = tt_rule_variant_get(existing);
  int32_t id = tt_rule_register(name, r->fn, r->flags);
  if (id >= 0) {
    __atomic_store_n(&g.checks[id], check, __ATOMIC_RELEASE);
    __atomic_store_n(&g.variants[id], variant, __ATOMIC_RELEASE);
  }
  return id;
}
