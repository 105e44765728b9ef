// Profile tests without PyTorch: while profiling is on every strict op
// records one event (its ATen name, a completion time after its launch, the
// bytes of its parameters and result); off, nothing is recorded; the ring
// keeps the newest events and counts those it overwrote.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu.h"
#include "check.h"
#include "op_helpers.h"

static void add_n(tt_runtime *rt, dense *a, dense *b, int n) {
  for (int k = 0; k < n; k++) {
    tt_storage *out = add_ok(rt, &a->t, &b->t, 1.0);
    tt_storage_destroy(out);
  }
}

static void test_events(tt_runtime *rt) {
  dense a, b;
  make_dense(rt, &a, 2, 3, NULL);
  make_dense(rt, &b, 2, 3, NULL);
  int64_t rec0, rec1, dropped;
  tt_runtime_profile_counts(rt, &rec0, &dropped);
  add_n(rt, &a, &b, 2);  // off: nothing recorded
  tt_runtime_profile_counts(rt, &rec1, &dropped);
  CHECK(rec1 == rec0);
  CHECK(!tt_runtime_profile_enabled(rt));

  CHECK_OK(tt_runtime_profile_start(rt, 4));
  CHECK(tt_runtime_profile_enabled(rt));
  add_n(rt, &a, &b, 3);
  CHECK_OK(tt_runtime_synchronize(rt));
  tt_runtime_profile_stop(rt);
  add_n(rt, &a, &b, 1);  // stopped: not recorded
  tt_profile_event ev[8];
  int n = -1;
  CHECK_OK(tt_runtime_profile_read(rt, ev, 8, &n));
  CHECK(n == 3);
  for (int i = 0; i < n; i++) {
    CHECK(strcmp(ev[i].name, "aten::add.Tensor") == 0);
    CHECK(ev[i].kind == TT_PROFILE_OP && ev[i].device == 0);
    CHECK(ev[i].seq == (uint64_t)i);
    CHECK(ev[i].start_ns > 0 && ev[i].launched_ns >= ev[i].start_ns);
    CHECK(ev[i].end_ns >= ev[i].start_ns);
    CHECK(ev[i].bytes_in >= 2 * 6 * 4);  // a, b (and maybe alpha's scalar)
    CHECK(ev[i].bytes_out == 6 * 4);
    CHECK(!ev[i].failed);
  }
  CHECK(ev[2].start_ns <= tt_runtime_profile_now_ns());

  // A ring of 4 after 6 launches keeps the last 4 and counts 2 dropped.
  CHECK_OK(tt_runtime_profile_start(rt, 4));
  add_n(rt, &a, &b, 6);
  CHECK_OK(tt_runtime_synchronize(rt));
  tt_runtime_profile_stop(rt);
  CHECK_OK(tt_runtime_profile_read(rt, ev, 8, &n));
  CHECK(n == 4);
  CHECK(n == 4 && ev[0].seq == 2 && ev[3].seq == 5);
  tt_runtime_profile_counts(rt, &rec1, &dropped);
  CHECK(rec1 == rec0 + 9 && dropped == 2);
  CHECK_OK(tt_runtime_profile_read(rt, ev, 2, &n));  // room for 2: the oldest 2
  CHECK(n == 2 && ev[0].seq == 2);
  tt_status st = tt_runtime_profile_read(rt, NULL, 2, &n);
  CHECK(tt_status_code(st) == TT_INVALID_ARGUMENT);
  tt_status_free(st);
  tt_storage_destroy(a.s);
  tt_storage_destroy(b.s);
}

// Two readers at once (torch.profiler's session and a torchtpu.profiler.trace):
// recording stays on until both stopped, each reads from its own mark, and
// every event carries the correlation id its thread had set.
static void test_readers_and_correlation(tt_runtime *rt) {
  dense a, b;
  make_dense(rt, &a, 2, 3, NULL);
  make_dense(rt, &b, 2, 3, NULL);
  CHECK_OK(tt_runtime_profile_start(rt, 8));
  uint64_t m1 = tt_runtime_profile_mark(rt);
  CHECK(tt_profile_set_correlation(7) == 0);
  add_n(rt, &a, &b, 1);
  CHECK_OK(tt_runtime_profile_start(rt, 4));  // joins: the ring is not shrunk
  uint64_t m2 = tt_runtime_profile_mark(rt);
  CHECK(m2 == m1 + 1);
  CHECK(tt_profile_set_correlation(9) == 7);
  add_n(rt, &a, &b, 2);
  tt_runtime_profile_stop(rt);
  CHECK(tt_runtime_profile_enabled(rt));  // the first reader still records
  add_n(rt, &a, &b, 1);
  tt_runtime_profile_stop(rt);
  CHECK(!tt_runtime_profile_enabled(rt));
  add_n(rt, &a, &b, 1);  // nobody records
  CHECK_OK(tt_runtime_profile_settle(rt, 10000));  // every end time stamped
  tt_profile_event ev[8];
  int n = -1;
  CHECK_OK(tt_runtime_profile_read_since(rt, m1, ev, 8, &n));
  CHECK(n == 4);
  for (int i = 0; i < n; i++) CHECK(ev[i].end_ns >= ev[i].start_ns && ev[i].end_ns > 0);
  CHECK_OK(tt_runtime_synchronize(rt));
  CHECK(n == 4 && ev[0].correlation == 7 && ev[1].correlation == 9 &&
        ev[3].correlation == 9);
  CHECK_OK(tt_runtime_profile_read_since(rt, m2, ev, 8, &n));
  CHECK(n == 3 && ev[0].seq == 1);
  tt_profile_set_correlation(0);
  tt_storage_destroy(a.s);
  tt_storage_destroy(b.s);
}

int main(void) {
  tt_runtime *rt = NULL;
  tt_runtime_options o = {.plugin_path = getenv("TORCHTPU_PLUGIN_PATH"),
                          .cpu_device_count = 1};
  CHECK_OK(tt_runtime_create(&o, &rt));
  if (!rt) return 1;
  test_events(rt);
  test_readers_and_correlation(rt);
  tt_runtime_destroy(rt);
  printf("test_profile: %s\n", check_failures ? "FAILED" : "ok");
  return check_exit_code();
}
