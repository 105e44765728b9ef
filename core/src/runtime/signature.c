// Op-call signatures (see signature.h).
#include "runtime/signature.h"

#include <string.h>

#include "runtime/storage.h"

static void sig_tensor(tt_buf *b, const tt_tensor *t, int group) {
  if (!t->storage) {
    tt_buf_append_i64(b, -1);
    return;
  }
  tt_buf_append_i64(b, t->dtype);
  tt_buf_append_i64(b, t->ndim);
  tt_buf_append(b, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
  tt_buf_append(b, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  tt_buf_append_i64(b, t->offset != 0);
  tt_buf_append_i64(b, group);
  tt_storage_facts f;
  tt_storage_facts_of(t->storage, &f);
  tt_buf_append_i64(b, tt_facts_buffer_dtype(&f, t->dtype));
  tt_buf_append_i64(b, tt_facts_buffer_numel(&f, t->dtype));
  tt_buf_append_i64(b, f.nbytes);
}

static void sig_value(tt_buf *b, const tt_value *v, bool scalar_values,
                      const tt_slot *slots, int *slot) {
  tt_buf_append_i64(b, v->kind);
  switch (v->kind) {
    case TT_VALUE_TENSOR:
      sig_tensor(b, &v->u.tensor, v->u.tensor.storage ? slots[*slot].group : -1);
      if (v->u.tensor.storage) (*slot)++;
      break;
    case TT_VALUE_SCALAR:
      tt_buf_append_i64(b, v->u.scalar.dtype);
      tt_buf_append_i64(b, v->u.scalar.wrapped);
      if (scalar_values) {
        tt_buf_append(b, &v->u.scalar.f, sizeof v->u.scalar.f);
        tt_buf_append(b, &v->u.scalar.im, sizeof v->u.scalar.im);
        tt_buf_append_i64(b, v->u.scalar.i);
      }
      break;
    case TT_VALUE_INT: tt_buf_append_i64(b, v->u.i); break;
    case TT_VALUE_BOOL: tt_buf_append_i64(b, v->u.b); break;
    case TT_VALUE_DTYPE: tt_buf_append_i64(b, v->u.dtype); break;
    case TT_VALUE_INTS:
      tt_buf_append_i64(b, v->u.ints.n);
      tt_buf_append(b, v->u.ints.data, sizeof(int64_t) * (size_t)v->u.ints.n);
      break;
    case TT_VALUE_STRING:
      tt_buf_append(b, v->u.str, strlen(v->u.str) + 1);
      break;
    case TT_VALUE_LIST:
      tt_buf_append_i64(b, v->u.list.n);
      for (int j = 0; j < v->u.list.n; j++)
        sig_value(b, &v->u.list.items[j], scalar_values, slots, slot);
      break;
    case TT_VALUE_NONE:
    case TT_VALUE_GENERATOR:
      break;
  }
}

void tt_signature_build(tt_buf *b, const tt_op_call *call,
                            const tt_rule *rule, const tt_slot *slots) {
  tt_buf_clear(b);
  tt_buf_append_i64(b, call->op);
  tt_buf_append_i64(b, call->default_dtype);
  tt_buf_append_i64(b, call->ndests);
  for (int i = 0; i < call->ndests; i++) {
    tt_buf_append_i64(b, call->dests[i].arg);
    tt_buf_append_i64(b, call->dests[i].item);
  }
  bool values = rule->flags & TT_RULE_SCALARS_IN_SIGNATURE;
  int slot = 0;
  for (int i = 0; i < call->nargs; i++)
    sig_value(b, &call->args[i], values, slots, &slot);
  tt_variant_fn variant = tt_rule_variant_get(call->op);
  if (variant) tt_buf_append_i64(b, variant(call));
}
