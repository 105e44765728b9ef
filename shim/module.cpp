// module.cpp — the shim's few entry points for Python.
//
// Python reaches the core's C API directly through ctypes (info, counters,
// modes, generators' state). The shim only adds what lives on its side:
// the fallback mode (plain C functions, called through ctypes) and the
// default generators as torch.Generator objects (a torchtpu:: operator, since
// an at::Generator can only reach Python through the dispatcher's boxing).
#include "shim.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <execinfo.h>
#include <pthread.h>
#include <torch/library.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#define TORCHTPU_SHIM_API extern "C" __attribute__((visibility("default")))

// 0: warn, 1: error, 2: silent. Returns false for an unknown mode.
TORCHTPU_SHIM_API bool torchtpu_shim_set_fallback_mode(int mode) {
  if (mode < 0 || mode > 2) return false;
  torchtpu::set_fallback_mode(static_cast<torchtpu::FallbackMode>(mode));
  return true;
}

TORCHTPU_SHIM_API int torchtpu_shim_fallback_mode(void) {
  return static_cast<int>(torchtpu::fallback_mode());
}

// Enters (true) or leaves (false) a trace that wants the fused attention op (shim.h).
TORCHTPU_SHIM_API void torchtpu_shim_set_fused_sdp_tracing(bool on) {
  torchtpu::set_fused_sdp_tracing(on);
}

namespace {

// Says which thread reached std::terminate and where, then lets the handler
// that was installed before (libstdc++'s: "terminate called ...") report and
// abort. Why: now and then a process ends with "terminate called without an
// active exception" after its work is done (CI, several tests, always at
// exit), and that message alone names neither the thread nor the code.
std::terminate_handler previous_terminate = nullptr;

[[noreturn]] void report_terminate() {
  char name[32] = "?";
  pthread_getname_np(pthread_self(), name, sizeof name);
  char head[128];
  const int n = std::snprintf(head, sizeof head,
                              "torchtpu: std::terminate in thread '%s'; its stack:\n", name);
  if (n > 0) (void)!write(2, head, static_cast<size_t>(n));
  void *frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  if (previous_terminate != nullptr) previous_terminate();
  std::abort();
}

struct TerminateReport {
  TerminateReport() {
    void *first[1];
    backtrace(first, 1);  // loads the unwinder now, not in a dying thread
    previous_terminate = std::set_terminate(report_terminate);
  }
} terminate_report;

at::Generator default_generator(int64_t device) {
  return at::detail::getPrivateUse1Hooks().getDefaultGenerator(
      static_cast<c10::DeviceIndex>(device));
}

}  // namespace

TORCH_LIBRARY(torchtpu, m) {
  m.def("_default_generator(int device) -> Generator?", &default_generator);
}
