// event.c — PJRT events: wait, poll, free.
//
// An event becomes ready when asynchronous work (a launch, a copy) ends, and
// then carries that work's error, if any. A tt_pjrt_event * is the plugin's
// PJRT_Event * itself (see internal.h).
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
