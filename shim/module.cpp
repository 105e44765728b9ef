// module.cpp — the shim's few entry points for Python.
//
// Python reaches the core's C API directly through ctypes (info, counters,
// modes, generators' state). The shim only adds what lives on its side:
// the fallback mode (plain C functions, called through ctypes) and the
// default generators as torch.Generator objects (a torchtpu:: operator, since
// an at::Generator can only reach Python through the dispatcher's boxing).
#include "shim.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <torch/library.h>

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

at::Generator default_generator(int64_t device) {
  return at::detail::getPrivateUse1Hooks().getDefaultGenerator(
      static_cast<c10::DeviceIndex>(device));
}

}  // namespace

TORCH_LIBRARY(torchtpu, m) {
  m.def("_default_generator(int device) -> Generator?", &default_generator);
}
