// The program value lowering produces, and storage facts (see program.h).
#include "lower/program.h"

#include <stdlib.h>
#include <string.h>

tt_dtype tt_facts_buffer_dtype(const tt_storage_facts *f, tt_dtype view_dtype) {
  return f->has_buffer ? f->dtype : view_dtype;
}

int64_t tt_facts_buffer_numel(const tt_storage_facts *f, tt_dtype view_dtype) {
  if (f->has_buffer) return f->numel;
  return f->nbytes / tt_dtype_size(view_dtype);
}

int tt_program_param_alias(const tt_program *p, int param) {
  const tt_param *q = &p->params[param];
  if (q->kind != TT_PARAM_STORAGE) return -1;
  for (int o = 0; o < p->nouts; o++) {
    const tt_out *out = &p->outs[o];
    if (!out->fresh && out->slot == q->slot)
      return out->dtype == q->dtype && out->numel == q->numel ? o : -1;
  }
  return -1;
}

void tt_program_deinit(tt_program *p) {
  if (!p) return;
  free(p->params);
  free(p->outs);
  free(p->results);
  free(p->checks);
  memset(p, 0, sizeof *p);
}
