// hlo_func.c — functions beside @main: a module exported elsewhere (a JAX or
// Pallas kernel, from jax.export) is spliced into the program being built,
// its functions renamed so that they cannot clash with another kernel's, and
// called from @main with func.call. So a kernel sits inside one program with
// the ops around it and XLA inlines and fuses it like any other op.
//
// Leaves out: parsing MLIR. The import works on the text: it finds the
// `func.func` definitions at the module's top level by their keyword, and
// renames every `@symbol` reference to one of them. Quoted symbol names
// (@"a b") are refused with a message; nested modules are not looked for.
#include "hlo/hlo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- importing a module's functions ----------------------------------------------------

static bool ident_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch >= '0' && ch <= '9') || ch == '_' || ch == '$' || ch == '.' || ch == '-';
}

typedef struct symtab {
  const char **names;  // point into the source text
  size_t *lens;
  int n, cap;
} symtab;

static bool symtab_add(symtab *t, const char *name, size_t len) {
  if (t->n == t->cap) {
    int cap = t->cap ? 2 * t->cap : 16;
    const char **names = realloc(t->names, (size_t)cap * sizeof *names);
    if (!names) return false;
    t->names = names;
    size_t *lens = realloc(t->lens, (size_t)cap * sizeof *lens);
    if (!lens) return false;
    t->lens = lens;
    t->cap = cap;
  }
  t->names[t->n] = name;
  t->lens[t->n++] = len;
  return true;
}

static bool symtab_has(const symtab *t, const char *name, size_t len) {
  for (int i = 0; i < t->n; i++)
    if (t->lens[i] == len && memcmp(t->names[i], name, len) == 0) return true;
  return false;
}

// The defined function names: "func.func [public|private|nested] @name".
static tt_status collect_functions(const char *text, symtab *t) {
  for (const char *p = strstr(text, "func.func "); p; p = strstr(p + 1, "func.func ")) {
    const char *q = p + strlen("func.func ");
    while (*q && *q != '@' && *q != '(' && *q != '\n') q++;
    if (*q != '@')
      return tt_make_status(TT_INVALID_ARGUMENT, "func.func without a symbol name");
    q++;
    if (*q == '"')
      return tt_make_status(TT_UNIMPLEMENTED, "quoted symbol names are not supported");
    size_t len = 0;
    while (ident_char(q[len])) len++;
    if (!symtab_add(t, q, len))
      return tt_make_status(TT_RESOURCE_EXHAUSTED, "importing functions: out of memory");
  }
  if (t->n == 0)
    return tt_make_status(TT_INVALID_ARGUMENT, "no func.func in the module");
  return NULL;
}

// The module's body: what lies between "module ... {" and its last '}'.
static tt_status module_body(const char *text, const char **out_begin,
                             const char **out_end) {
  const char *m = strstr(text, "module");
  const char *f = strstr(text, "func.func");
  if (!f) return tt_make_status(TT_INVALID_ARGUMENT, "no func.func in the module");
  if (!m || m > f) {  // bare functions
    *out_begin = text;
    *out_end = text + strlen(text);
    return NULL;
  }
  const char *lbrace = strchr(m, '{');
  // "module @x attributes {...} {": the body starts after the last '{'
  // before the first function.
  for (const char *p = lbrace; p && p < f; p = strchr(p + 1, '{')) lbrace = p;
  const char *close = strrchr(text, '}');
  if (!lbrace || !close || close < f)
    return tt_make_status(TT_INVALID_ARGUMENT, "module braces do not match");
  *out_begin = lbrace + 1;
  *out_end = close;
  return NULL;
}

tt_status tt_hlo_import_functions(const char *text, const char *prefix,
                                  char **out_funcs, char **out_entry) {
  *out_funcs = NULL;
  *out_entry = NULL;
  symtab t = {0};
  tt_hlo_buf s = {0};
  const char *begin = NULL, *end = NULL;
  tt_status st = module_body(text, &begin, &end);
  if (!st) st = collect_functions(text, &t);
  if (!st && !symtab_has(&t, "main", 4))
    st = tt_make_status(TT_INVALID_ARGUMENT, "the module has no @main");
  if (st) goto cleanup;
  for (const char *p = begin; p < end;) {
    if (*p == '@' && p + 1 < end && (p == begin || !ident_char(p[-1]))) {
      size_t len = 0;
      while (p + 1 + len < end && ident_char(p[1 + len])) len++;
      if (symtab_has(&t, p + 1, len)) {
        tt_hlo_buf_printf(&s, "@%s%.*s", prefix, (int)len, p + 1);
        p += 1 + len;
        continue;
      }
    }
    // Every imported function is private to the program that calls it.
    if (strncmp(p, "func.func public ", 17) == 0) {
      tt_hlo_buf_printf(&s, "func.func private ");
      p += 17;
      continue;
    }
    const char *next = p + 1;
    while (next < end && *next != '@' && *next != 'f') next++;
    tt_hlo_buf_printf(&s, "%.*s", (int)(next - p), p);
    p = next;
  }
  tt_hlo_buf_printf(&s, "\n");
  size_t n = strlen(prefix) + 5;
  *out_entry = malloc(n);
  if (s.oom || !*out_entry) {
    st = tt_make_status(TT_RESOURCE_EXHAUSTED, "importing functions: out of memory");
    goto cleanup;
  }
  snprintf(*out_entry, n, "%smain", prefix);
  *out_funcs = s.p;
  s.p = NULL;
cleanup:
  if (st) {
    free(*out_entry);
    *out_entry = NULL;
  }
  tt_hlo_buf_free(&s);
  free(t.names);
  free(t.lens);
  return st;
}

// --- functions in the builder ----------------------------------------------------------

void tt_hlo_add_functions(tt_hlo *b, uint64_t key, const char *text) {
  for (int i = 0; i < b->nfunc_keys; i++)
    if (b->func_keys[i] == key) return;
  if (b->nfunc_keys == b->cap_func_keys) {
    int32_t cap = b->cap_func_keys ? 2 * b->cap_func_keys : 8;
    uint64_t *k = realloc(b->func_keys, (size_t)cap * sizeof *k);
    if (!k) {
      tt_hlo_fail(b, tt_make_status(TT_RESOURCE_EXHAUSTED, "hlo builder: out of memory"));
      return;
    }
    b->func_keys = k;
    b->cap_func_keys = cap;
  }
  b->func_keys[b->nfunc_keys++] = key;
  tt_hlo_buf_printf(&b->funcs, "%s", text);
}

// "%a, %b" of a call's operands.
static void put_operand_names(tt_hlo *b, const tt_hv *operands, int n) {
  for (int i = 0; i < n; i++) {
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_name(b, &b->body, operands[i]);
  }
}

// " : (operand types) -> (result types)" and the end of the line.
static void put_call_types(tt_hlo *b, const tt_hv *operands, int n,
                           const tt_hlo_type *types, int nres) {
  tt_hlo_put_types(b, &b->body, operands, n);
  tt_hlo_buf_printf(&b->body, "(");
  for (int i = 0; i < nres; i++) {
    tt_hlo_buf_printf(&b->body, "%s", i ? ", " : "");
    tt_hlo_put_type(&b->body, &types[i]);
  }
  tt_hlo_buf_printf(&b->body, ")\n");
}

tt_hv tt_hlo_call(tt_hlo *b, const char *callee, const tt_hv *operands, int n,
                  const tt_hlo_type *types, int nres) {
  if (!tt_hlo_ok(b, operands, n)) return TT_HV_INVALID;
  if (nres < 1) {
    tt_hlo_failf(b, "func.call of @%s with no results", callee);
    return TT_HV_INVALID;
  }
  tt_hv r = tt_hlo_new_values(b, types, nres);
  if (r == TT_HV_INVALID) return r;
  tt_hlo_begin_line(b, r, nres);
  tt_hlo_buf_printf(&b->body, "\"func.call\"(");
  put_operand_names(b, operands, n);
  tt_hlo_buf_printf(&b->body, ") {callee = @%s}", callee);
  put_call_types(b, operands, n, types, nres);
  return r;
}

// --- typed FFI custom calls -----------------------------------------------------------

static void put_layouts(tt_hlo_buf *s, const tt_hlo_type *types, int n) {
  tt_hlo_buf_printf(s, "[");
  for (int i = 0; i < n; i++) {  // row-major: minor-to-major is rank-1 .. 0
    tt_hlo_buf_printf(s, "%sdense<", i ? ", " : "");
    if (types[i].rank == 0) tt_hlo_buf_printf(s, "[]");
    else if (types[i].rank > 1) tt_hlo_buf_printf(s, "[");
    for (int d = types[i].rank - 1; d >= 0; d--)
      tt_hlo_buf_printf(s, "%s%d", d == types[i].rank - 1 ? "" : ", ", d);
    if (types[i].rank > 1) tt_hlo_buf_printf(s, "]");
    tt_hlo_buf_printf(s, "> : tensor<%dxindex>", (int)types[i].rank);
  }
  tt_hlo_buf_printf(s, "]");
}

tt_hv tt_hlo_ffi_call(tt_hlo *b, const char *target, const char *attrs,
                      const tt_hv *operands, int n, const tt_hlo_type *types,
                      int nres) {
  if (!tt_hlo_ok(b, operands, n)) return TT_HV_INVALID;
  if (nres < 1 || n > 64) {
    tt_hlo_failf(b, "custom call %s with %d results, %d operands", target, nres, n);
    return TT_HV_INVALID;
  }
  tt_hlo_type in_types[64];
  for (int i = 0; i < n; i++) in_types[i] = b->vals[operands[i]].type;
  tt_hv r = tt_hlo_new_values(b, types, nres);
  if (r == TT_HV_INVALID) return r;
  tt_hlo_begin_line(b, r, nres);
  tt_hlo_buf_printf(&b->body, "\"stablehlo.custom_call\"(");
  put_operand_names(b, operands, n);
  tt_hlo_buf_printf(&b->body, ") {api_version = 4 : i32, backend_config = {%s}, "
                    "call_target_name = \"%s\", operand_layouts = ", attrs, target);
  put_layouts(&b->body, in_types, n);
  tt_hlo_buf_printf(&b->body, ", result_layouts = ");
  put_layouts(&b->body, types, nres);
  tt_hlo_buf_printf(&b->body, "}");
  put_call_types(b, operands, n, types, nres);
  return r;
}
