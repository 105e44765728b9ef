// ctx.h — the lowering context's life cycle (internal to the core).
//
// The executor creates a context for one op call, runs the rule through it
// and gets back the StableHLO text plus the tt_program (program.h) that says
// how to feed and unpack the compiled program on every later call with the
// same signature. Nothing here knows the runtime: storages are opaque, seen
// through the executor's tt_storage_facts_fn.
#ifndef TT_LOWER_CTX_H
#define TT_LOWER_CTX_H

#include "lower/lower.h"
#include "lower/program.h"

// A tensor slot: one device tensor among the arguments (a Tensor argument, or
// one tensor item of a Tensor[] argument), numbered in argument order.
typedef struct tt_slot {
  int32_t arg;
  int32_t item;        // list item, or -1
  const tt_tensor *t;  // borrowed from the call
  int32_t group;       // first slot sharing this slot's storage
} tt_slot;

// Enumerates the call's tensor slots into `out` (capacity `cap`); returns
// the number of slots (which may exceed cap: then call again with more room).
int tt_call_slots(const tt_op_call *call, tt_slot *out, int cap);

typedef struct tt_lower_options {
  bool infer_only;     // compute result metas; emit no writes, no text
  bool supports_f64;   // the device has 64-bit floats
  bool device_checks;  // rules' value checks (tt_lower_check) become outputs
  // The custom-call target of the process's C kernels when the CPU
  // attention kernels (kernels/cpu_attention.c) are registered with the
  // plugin, else NULL: attention then lowers to plain StableHLO.
  const char *attention_ffi_target;
  tt_storage_facts_fn facts;  // the executor's view of its storages
} tt_lower_options;

// Lowers `call` with `rule` into `b` (reset by the caller). On success
// `*out` holds the program (owned by the caller: tt_program_deinit) and,
// unless infer_only, the text (owned by `b`) is in `*out_text`. On error
// `*out` is empty.
tt_status tt_lower_call(const tt_op_call *call, const tt_rule *rule,
                        const tt_lower_options *opts, tt_hlo *b,
                        tt_program *out, const char **out_text,
                        size_t *out_len);

// --- lowering into a graph (fused eager) ----------------------------------------
//
// A graph is many op calls lowered into one builder that persists across
// calls. The recorder tells the context which storages the graph already
// holds a value for (a pending result, a storage written or read earlier);
// those are read from that value instead of becoming a new parameter.

typedef struct tt_lower_graph {
  // The storage's current value in the builder, or TT_HV_INVALID when the
  // graph does not hold it (then it becomes a new parameter).
  tt_hv (*value_of)(void *ctx, const tt_storage *s);
  void *ctx;
} tt_lower_graph;

typedef struct tt_lower_graph_out {
  tt_program prog;    // owned: params, outs and result metas
  tt_hv *param_vals;  // owned: builder value of each plan param
  tt_hv *out_vals;    // owned: builder value of each plan out (a flat
                      // buffer: a fresh result or a storage's new value),
                      // then of each check (prog.nouts + prog.nchecks)
} tt_lower_graph_out;

// Lowers `call` into `b`, which holds the graph so far (not reset), and
// emits no module: the recorder keeps the values in `out`. On error the
// builder may hold part of the op: the caller rewinds it (tt_hlo_rewind).
tt_status tt_lower_into_graph(const tt_op_call *call, const tt_rule *rule,
                              const tt_lower_options *opts, tt_hlo *b,
                              const tt_lower_graph *graph,
                              tt_lower_graph_out *out);
void tt_lower_graph_out_deinit(tt_lower_graph_out *out);

#endif
