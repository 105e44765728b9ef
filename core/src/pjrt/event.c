// event.c — PJRT events: wait, poll, free.
//
// An event becomes ready when asynchronous work (a launch, a copy) ends, and
// then carries that work's error, if any. A tt_pjrt_event * is the plugin's
// PJRT_Event * itself (see internal.h).
#include <stdlib.h>

#include "pjrt/internal.h"

// --- raw events (shared with buffer.c and executable.c) ----------------------

void tt_pjrt_raw_event_destroy(const PJRT_Api *api, PJRT_Event *ev) {
  if (!ev) return;
  PJRT_Event_Destroy_Args a = {0};
  a.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  a.event = ev;
  tt_status_free(TT_PJRT_CALL(api, PJRT_Event_Destroy, &a));
}

tt_status tt_pjrt_raw_event_await(const PJRT_Api *api, PJRT_Event *ev) {
  PJRT_Event_Await_Args a = {0};
  a.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  a.event = ev;
  // Await already returns the event's error; asking PJRT_Event_Error as well
  // costs nothing and covers plugins that only report it there.
  TT_RETURN_IF_ERROR(TT_PJRT_CALL(api, PJRT_Event_Await, &a));
  PJRT_Event_Error_Args e = {0};
  e.struct_size = PJRT_Event_Error_Args_STRUCT_SIZE;
  e.event = ev;
  return TT_PJRT_CALL(api, PJRT_Event_Error, &e);
}

// --- public ------------------------------------------------------------------

tt_status tt_pjrt_event_await(tt_pjrt *p, tt_pjrt_event *ev) {
  if (!ev) return tt_make_status(TT_INVALID_ARGUMENT, "await: NULL event");
  return tt_pjrt_raw_event_await(p->api, tt_pjrt_raw_event(ev));
}

// A failed query counts as ready, so that the caller goes on to await the
// event and gets the error from there.
bool tt_pjrt_event_is_ready(tt_pjrt *p, tt_pjrt_event *ev) {
  if (!ev) return true;
  PJRT_Event_IsReady_Args a = {0};
  a.struct_size = PJRT_Event_IsReady_Args_STRUCT_SIZE;
  a.event = tt_pjrt_raw_event(ev);
  tt_status st = TT_PJRT_CALL(p->api, PJRT_Event_IsReady, &a);
  if (st) {
    tt_status_free(st);
    return true;
  }
  return a.is_ready;
}

void tt_pjrt_event_destroy(tt_pjrt *p, tt_pjrt_event *ev) {
  if (!p || !ev) return;
  tt_pjrt_raw_event_destroy(p->api, tt_pjrt_raw_event(ev));
}

// --- readiness callbacks -------------------------------------------------------

typedef struct ready_thunk {
  const PJRT_Api *api;
  tt_pjrt_ready_fn fn;
  void *arg;
} ready_thunk;

static void on_ready(PJRT_Error *error, void *user_arg) {
  ready_thunk *t = user_arg;
  if (error) {
    PJRT_Error_Destroy_Args d = {0};
    d.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
    d.error = error;
    t->api->PJRT_Error_Destroy(&d);
  }
  t->fn(t->arg, error == NULL);
  free(t);
}

tt_status tt_pjrt_event_on_ready(tt_pjrt *p, tt_pjrt_event *ev,
                                 tt_pjrt_ready_fn fn, void *arg) {
  if (!p || !ev || !fn)
    return tt_make_status(TT_INVALID_ARGUMENT, "event on_ready: NULL argument");
  ready_thunk *t = malloc(sizeof *t);
  if (!t) return tt_make_status(TT_RESOURCE_EXHAUSTED, "event on_ready: out of memory");
  *t = (ready_thunk){p->api, fn, arg};
  PJRT_Event_OnReady_Args a = {0};
  a.struct_size = PJRT_Event_OnReady_Args_STRUCT_SIZE;
  a.event = tt_pjrt_raw_event(ev);
  a.callback = on_ready;
  a.user_arg = t;
  tt_status st = TT_PJRT_CALL(p->api, PJRT_Event_OnReady, &a);
  if (st) free(t);  // the plugin took no callback
  return st;
}
