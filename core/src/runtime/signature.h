// signature.h — an op call's signature (internal; signature.c).
//
// The bytes that decide an op call's program: op, default dtype, result
// destinations, each argument's kind and structural value, each tensor's
// dtype, shape, strides, whether its offset is zero, which earlier tensor
// shares its storage, and its storage's buffer facts; scalar values only when
// the rule puts them in the signature. Never a storage's identity or an
// offset's value, so a training loop repeats its signatures. The strict
// executor keys its plans by it; fused eager keys its recorded traces by it.
#ifndef TT_RUNTIME_SIGNATURE_H
#define TT_RUNTIME_SIGNATURE_H

#include "base/buf.h"
#include "lower/ctx.h"
#include "lower/lower.h"
#include "torchtpu.h"

// Writes the signature of `call` (slots from tt_call_slots) into `b`,
// clearing it first.
void tt_signature_build(tt_buf *b, const tt_op_call *call, const tt_rule *rule,
                        const tt_slot *slots);

#endif
