// profiler.cpp — tpu programs as device activity in torch.profiler.
//
// PyTorch's extension point for PrivateUse1 profiling is a Kineto child
// profiler: a libkineto::IActivityProfiler registered with
// REGISTER_PRIVATEUSE1_PROFILER (torch/csrc/profiler/standalone/
// privateuse1_profiler.h; PyTorch hands it to Kineto when Kineto starts).
// Kineto then asks it for a session whenever torch.profiler.profile traces
// ProfilerActivity.PrivateUse1, starts and stops it with the trace, tells it
// the correlation id of every ATen op entered on each thread, and finally
// asks it for its activities, linking each to the CPU op of its correlation
// id. So unchanged user code gets, per program the core launched (an ATen
// op, a fused graph, a compiled graph's replay, a collective), a
// CONCURRENT_KERNEL activity on the "tpu" device with its device time and
// bytes: in export_chrome_trace (a kernel whose "External id" is its op's),
// in key_averages() (the op's device time) and in TensorBoard's trace view;
// a record_function range that launched programs gets a span over them on
// the device row (as Kineto draws CUDA's user annotations).
//
// The events come from the core's profile ring (runtime/profile.c), which
// stamps each launch with the thread's correlation id (set here from
// Kineto's push/pop). Kineto's clock is Unix-epoch nanoseconds, the core's
// CLOCK_MONOTONIC: the offset is measured when the session stops.
//
// Built with USE_KINETO and Kineto's headers (the Makefile's flags for this
// file only): the CPU wheel of PyTorch is built with Kineto and exports the
// registry and Kineto's classes.
//
// Leaves out: host<->device copies and compiles (not program events; they
// show as the CPU ops they run under).
// Kineto's activity metadata formats numbers with fmt, whose compiled part
// PyTorch does not export: this file takes fmt's header-only build (hidden,
// like all of the shim's symbols).
#define FMT_HEADER_ONLY 1
#include <fmt/format.h>

#include "shim.h"

#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <libkineto.h>
#include <output_base.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace torchtpu {
namespace {

using libkineto::ActivityType;

// The activity types that ask for a tpu session: the device's
// (ProfilerActivity.PrivateUse1 asks for CONCURRENT_KERNEL among others) and
// the backend runtime's, which PyTorch puts among the CPU's
// (PRIVATEUSE1_RUNTIME): a trace of the CPU alone, as TorchTitan asks for on
// any device but CUDA and XPU, still shows the programs its ops launched.
// Programs are recorded as kernels either way, so PyTorch counts them as
// the device's time (DeviceType::PrivateUse1).
const std::set<ActivityType> &tpu_activities() {
  static const std::set<ActivityType> types{ActivityType::CONCURRENT_KERNEL,
                                            ActivityType::PRIVATEUSE1_RUNTIME};
  return types;
}

const char *kind_name(int32_t kind) {
  switch (kind) {
    case TT_PROFILE_OP: return "op";
    case TT_PROFILE_FUSED: return "fused";
    case TT_PROFILE_GRAPH: return "graph";
    case TT_PROFILE_COLLECTIVE: return "collective";
    default: return "?";
  }
}

// Unix-epoch ns minus CLOCK_MONOTONIC ns, from the tightest of a few brackets.
int64_t monotonic_to_unix_ns() {
  int64_t best_width = -1, best = 0;
  for (int i = 0; i < 5; i++) {
    const int64_t a = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
    const int64_t m = tt_runtime_profile_now_ns();
    const int64_t b = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
    if (best_width < 0 || b - a < best_width) {
      best_width = b - a;
      best = (a + b) / 2 - m;
    }
  }
  return best;
}

// Per host thread: the correlation ids Kineto pushed (innermost last), and
// the user ranges (record_function) open: their id and the core's event mark
// when they opened.
thread_local std::vector<uint64_t> t_correlations;
thread_local std::vector<std::pair<uint64_t, uint64_t>> t_user_ranges;

// A user range (record_function) and the events launched while it was open
// (marks: after `begin`, up to `end`).
struct UserRange {
  uint64_t id, begin, end;
};

// The name of an op's program on the device row: the op's own name would
// make key_averages() list the op twice under one name.
std::string program_name(const tt_profile_event &e) {
  return e.kind == TT_PROFILE_OP ? std::string(e.name) + " (tpu program)" : std::string(e.name);
}

// --- the session --------------------------------------------------------------------

class TpuSession : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    tt_runtime *rt = nullptr;
    // Starts the runtime if nothing did yet (about 50 ms, once): programs
    // launched in the window must find recording on.
    tt_status s = tt_runtime_get(&rt);
    if (s == nullptr) s = tt_runtime_profile_start(rt, 0);
    if (s != nullptr) {
      errors_.push_back(std::string("tpu profiler: ") +
                        (tt_status_message(s) ? tt_status_message(s) : "cannot start"));
      tt_status_free(s);
      status_ = libkineto::TraceStatus::ERROR;
      return;
    }
    mark_ = tt_runtime_profile_mark(rt);
    rt_ = rt;
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    tt_runtime *rt = rt_.exchange(nullptr);
    if (rt == nullptr) return;
    // Work launched in the window finishes (a fused graph is flushed) so
    // that every event has its end time; its errors stay for the user's
    // next synchronize.
    tt_status s = tt_runtime_profile_settle(rt, 60000);
    if (s != nullptr) {
      errors_.push_back(std::string("tpu profiler: ") +
                        (tt_status_message(s) ? tt_status_message(s) : "?"));
      tt_status_free(s);
    }
    tt_runtime_profile_stop(rt);
    const int64_t total = static_cast<int64_t>(tt_runtime_profile_mark(rt) - mark_);
    events_.resize(static_cast<size_t>(std::min<int64_t>(total, 65536)));
    int n = 0;
    s = tt_runtime_profile_read_since(rt, mark_, events_.data(),
                                      static_cast<int>(events_.size()), &n);
    if (s != nullptr) {
      tt_status_free(s);
      n = 0;
    }
    events_.resize(static_cast<size_t>(n));
    first_tag_ = mark_ + static_cast<uint64_t>(total) - static_cast<uint64_t>(n) + 1;
    offset_ns_ = monotonic_to_unix_ns();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger &logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger &logger,
                    libkineto::getLinkedActivityCallback linked, int64_t start_ns,
                    int64_t end_ns) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_ns, end_ns, "tpu programs");
    buffer_->gpuOpCount = static_cast<int>(events_.size());
    std::vector<int64_t> lane_ends;  // per lane, the end of its last event
    for (const tt_profile_event &e : events_) {
      const int64_t begin = e.start_ns + offset_ns_;
      const int64_t done = (e.end_ns > 0 ? e.end_ns : e.launched_ns) + offset_ns_;
      buffer_->emplace_activity(buffer_->span, ActivityType::CONCURRENT_KERNEL,
                                program_name(e));
      libkineto::GenericTraceActivity &act = *buffer_->activities.back();
      act.startTime = begin;
      act.endTime = std::max(done, begin);
      act.device = e.device;
      act.resource = lane(lane_ends, e.device, begin, act.endTime);
      act.id = static_cast<int32_t>(e.correlation);
      act.linked = linked && e.correlation ? linked(static_cast<int32_t>(e.correlation))
                                           : nullptr;
      act.addMetadataQuoted("kind", kind_name(e.kind));
      act.addMetadata("device", e.device);
      act.addMetadata("bytes in", e.bytes_in);
      act.addMetadata("bytes out", e.bytes_out);
      act.addMetadata("launch us", static_cast<double>(e.launched_ns - e.start_ns) / 1e3);
      if (e.end_ns == 0) act.addMetadataQuoted("finished", "false");
      if (e.failed) act.addMetadataQuoted("failed", "true");
      logger.handleActivity(act);
      max_device_ = std::max<int64_t>(max_device_, e.device);
    }
    lanes_ = static_cast<int>(lane_ends.size());
    annotate(logger, linked);
  }

  // One GPU_USER_ANNOTATION activity per user range that launched programs,
  // over them on the device row, as Kineto draws CUDA's (unlinked: PyTorch
  // would otherwise add its time to the range's CPU event again).
  void annotate(libkineto::ActivityLogger &logger,
                const libkineto::getLinkedActivityCallback &linked) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const UserRange &r : ranges_) {
      int64_t lo = 0, hi = 0;
      int32_t device = 0;
      bool any = false;
      for (size_t i = 0; i < events_.size(); i++) {
        const uint64_t tag = first_tag_ + i;
        if (tag <= r.begin || tag > r.end) continue;
        const libkineto::GenericTraceActivity &a = *buffer_->activities[i];
        lo = any ? std::min(lo, a.startTime) : a.startTime;
        hi = any ? std::max(hi, a.endTime) : a.endTime;
        device = a.device;
        any = true;
      }
      const libkineto::ITraceActivity *cpu =
          linked ? linked(static_cast<int32_t>(r.id)) : nullptr;
      if (!any || cpu == nullptr) continue;
      buffer_->emplace_activity(buffer_->span, ActivityType::GPU_USER_ANNOTATION,
                                cpu->name());
      libkineto::GenericTraceActivity &act = *buffer_->activities.back();
      act.startTime = lo;
      act.endTime = hi;
      act.device = device;
      act.resource = 0;
      act.id = static_cast<int32_t>(r.id);
      logger.handleActivity(act);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{
        0, kSortBase, "tpu:0", "tpu programs (torchtpu)"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (int64_t d = 0; d <= max_device_; d++) {
      for (int l = 0; l < std::max(lanes_, 1); l++) {
        out.push_back({l, l, d, l == 0 ? "programs" : "programs (" + std::to_string(l) + ")"});
      }
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override {
    t_correlations.push_back(id);
    tt_profile_set_correlation(id);
  }

  void popCorrelationId() override {
    if (!t_correlations.empty()) t_correlations.pop_back();
    tt_profile_set_correlation(t_correlations.empty() ? 0 : t_correlations.back());
  }

  void pushUserCorrelationId(uint64_t id) override {
    tt_runtime *rt = rt_.load();
    t_user_ranges.emplace_back(id, rt ? tt_runtime_profile_mark(rt) : 0);
  }

  void popUserCorrelationId() override {
    if (t_user_ranges.empty()) return;
    const auto [id, begin] = t_user_ranges.back();
    t_user_ranges.pop_back();
    tt_runtime *rt = rt_.load();
    if (rt == nullptr) return;
    const uint64_t end = tt_runtime_profile_mark(rt);
    if (end == begin) return;  // launched nothing
    std::lock_guard<std::mutex> lock(mu_);
    ranges_.push_back({id, begin, end});
  }

  ~TpuSession() override {
    tt_runtime *rt = rt_.exchange(nullptr);
    if (rt != nullptr) tt_runtime_profile_stop(rt);  // never stopped: a trace abandoned
  }

 private:
  static constexpr int64_t kSortBase = 0x1000000;  // tpu rows below the CPU's

  // A row (trace thread) of `device` on which the event overlaps no other:
  // a program launched before the previous one finished goes one row down.
  static int32_t lane(std::vector<int64_t> &ends, int32_t device, int64_t begin,
                      int64_t end) {
    (void)device;  // rows are numbered per device alike; overlap is rare
    for (size_t i = 0; i < ends.size(); i++) {
      if (begin >= ends[i]) {
        ends[i] = end;
        return static_cast<int32_t>(i);
      }
    }
    ends.push_back(end);
    return static_cast<int32_t>(ends.size() - 1);
  }

  std::atomic<tt_runtime *> rt_{nullptr};  // while recording (ops on any thread read it)
  uint64_t mark_ = 0;
  uint64_t first_tag_ = 0;  // the core's number of events_[0]
  int64_t offset_ns_ = 0;
  int64_t max_device_ = 0;
  int lanes_ = 0;
  std::vector<tt_profile_event> events_;
  std::vector<std::string> errors_;
  std::mutex mu_;  // guards ranges_ (ranges close on any thread)
  std::vector<UserRange> ranges_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

// --- the profiler Kineto asks for sessions ---------------------------------------------

class TpuProfiler : public libkineto::IActivityProfiler {
 public:
  const std::string &name() const override { return name_; }

  const std::set<ActivityType> &availableActivities() const override {
    return tpu_activities();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType> &types, const libkineto::Config &) override {
    for (ActivityType t : tpu_activities())
      if (types.count(t)) return std::make_unique<TpuSession>();
    return nullptr;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<ActivityType> &types,
      const libkineto::Config &config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "torchtpu";
};

REGISTER_PRIVATEUSE1_PROFILER(TpuProfiler);

// PyTorch hands the registered factory to Kineto only once a trace asks for
// ProfilerActivity.PrivateUse1; a trace of the CPU alone (TorchTitan's) would
// not find it. Handing it over now (at load, after the registration above:
// same file, declared first) lets every trace configure it; Kineto keeps it
// until its profiler starts.
struct HandToKineto {
  HandToKineto() { torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().onKinetoInit(); }
} hand_to_kineto;

}  // namespace
}  // namespace torchtpu
