// Defaults for executors with nothing deferred (see executor.h).
#include "runtime/executor.h"

int64_t tt_exec_no_pending(const tt_executor *ex) {
  (void)ex;
  return 0;
}

tt_status tt_exec_nothing_to_sync(tt_executor *ex, tt_storage *s) {
  (void)ex;
  (void)s;
  return NULL;
}

void tt_exec_nothing_to_detach(tt_executor *ex, tt_storage *s) {
  (void)ex;
  (void)s;
}

tt_status tt_exec_no_capture_begin(tt_executor *ex, int device) {
  (void)device;
  return tt_make_status(TT_FAILED_PRECONDITION,
                        "graph capture: the %s executor cannot capture (the "
                        "runtime must be in fused mode)", ex->ops->name);
}

tt_status tt_exec_no_capture_end(tt_executor *ex, tt_exec_seen_fn seen, void *ctx) {
  (void)seen;
  (void)ctx;
  return tt_make_status(TT_FAILED_PRECONDITION, "graph capture: the %s executor "
                        "is not capturing", ex->ops->name);
}

void tt_exec_keeps_no_exe(tt_executor *ex, const tt_pjrt_exe *exe) {
  (void)ex;
  (void)exe;
}
