// The op entry points: tt_op_run hands a call to the executor in use
// (rt->exec: strict, fused, or a capture); tt_op_infer lowers it for its
// result metas only.
#include <string.h>

#include "lower/ctx.h"
#include "lower/lower.h"
#include "runtime/executor.h"
#include "runtime/runtime.h"

static tt_status check_call(tt_runtime *rt, const tt_op_call *call,
                            const tt_rule **rule) {
  *rule = tt_rule_get(call->op);
  if (!*rule)
    return tt_make_status(TT_UNIMPLEMENTED, "op id %d has no lowering", (int)call->op);
  if (call->device < 0 || call->device >= rt->info.device_count)
    return tt_make_status(TT_INVALID_ARGUMENT, "%s: tpu:%d does not exist",
                          (*rule)->name, (int)call->device);
  return NULL;
}

tt_status tt_op_run(tt_runtime *rt, const tt_op_call *call,
                    tt_op_result *results, int32_t cap, int32_t *out_nresults) {
  *out_nresults = 0;
  const tt_rule *rule;
  TT_RETURN_IF_ERROR(check_call(rt, call, &rule));
  tt_check_fn check = tt_rule_check_get(call->op);
  if (check) TT_RETURN_IF_ERROR(check(call));
  TT_RETURN_IF_ERROR(tt_lower_kernel_prepare(call));  // before the lock
  pthread_mutex_lock(&rt->mu);
  tt_status st = tt_exec_run_op(rt->exec, call, rule, results, cap, out_nresults);
  pthread_mutex_unlock(&rt->mu);
  return st;
}

tt_status tt_op_infer(tt_runtime *rt, const tt_op_call *call,
                      tt_op_result *results, int32_t cap,
                      int32_t *out_nresults) {
  *out_nresults = 0;
  const tt_rule *rule;
  TT_RETURN_IF_ERROR(check_call(rt, call, &rule));
  TT_RETURN_IF_ERROR(tt_lower_kernel_prepare(call));  // before the lock
  pthread_mutex_lock(&rt->mu);
  tt_hlo_reset(rt->hlo);
  tt_lower_options opts;
  tt_runtime_lower_options(rt, true, &opts);
  tt_program prog;
  tt_status st = tt_lower_call(call, rule, &opts, rt->hlo, &prog, NULL, NULL);
  if (!st) {
    for (int r = 0; r < prog.nresults && r < cap; r++) results[r] = prog.results[r];
    *out_nresults = prog.nresults < cap ? prog.nresults : cap;
  }
  tt_program_deinit(&prog);
  pthread_mutex_unlock(&rt->mu);
  return st;
}
