// kernels.cpp — the ops that must be explicit on "tpu": creation (empty,
// empty_strided), metadata-only views (as_strided, view, _reshape_alias,
// unfold, view_as_real, view_as_complex), storage changes (resize_, set_), host <-> device copies
// (_copy_from, _copy_from_and_resize, _local_scalar_dense), _assert_async, and trivial
// queries (is_set_to, record_stream, _has_compatible_shallow_copy_type).
//
// Views reuse ATen's device-agnostic implementations. Nothing here touches
// device memory except through tt_tensor_upload / tt_tensor_download, and
// device-to-device copies go to the core like any other op (fallback.cpp).
#include "shim.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Context.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/conj_physical.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/resize.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace torchtpu {
namespace {

constexpr c10::DispatchKeySet kTpuKeys(c10::DispatchKey::PrivateUse1);

// --- creation ------------------------------------------------------------------

void check_creation(const c10::Device &device, std::optional<c10::Layout> layout,
                    std::optional<bool> pin_memory) {
  TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1,
              "tpu: asked to create a tensor on ", device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "tpu: only strided tensors are supported, got layout ",
              c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "tpu: pin_memory applies to CPU tensors only");
}

// torch.use_deterministic_algorithms(True) (with fill_uninitialized_memory,
// its default): fresh memory holds NaN, or the integer maximum, as on CPU and
// CUDA.
bool fills_uninitialized() {
  return at::globalContext().deterministicAlgorithms() &&
         at::globalContext().deterministicFillUninitializedMemory();
}

at::Tensor filled_if_deterministic(at::Tensor t) {
  if (fills_uninitialized() && t.numel() > 0) at::native::fill_empty_deterministic_(t);
  return t;
}

at::Tensor empty_memory_format(c10::SymIntArrayRef size,
                               std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  const c10::Device dev = c10::device_or_default(device);
  check_creation(dev, layout, pin_memory);
  const c10::OptionalDeviceGuard guard(dev);
  return filled_if_deterministic(
      at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), allocator(), kTpuKeys,
                                c10::dtype_or_default(dtype), memory_format));
}

at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                         std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  const c10::Device dev = c10::device_or_default(device);
  check_creation(dev, layout, pin_memory);
  const c10::OptionalDeviceGuard guard(dev);
  return filled_if_deterministic(at::detail::empty_strided_generic(
      C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
      allocator(), kTpuKeys, c10::dtype_or_default(dtype)));
}

// --- views -------------------------------------------------------------------

at::Tensor as_strided(const at::Tensor &self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset) offset = storage_offset->guard_int(__FILE__, __LINE__);
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), offset);
}

at::Tensor view(const at::Tensor &self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor &self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

// view_as_real / view_as_complex: the same bytes with another dtype and a
// last dimension of 2 (storages are untyped; the core reads complex bytes as
// their parts).
at::Tensor view_as_real(const at::Tensor &self) { return at::native::view_as_real(self); }

at::Tensor view_as_complex(const at::Tensor &self) {
  return at::native::view_as_complex(self);
}

at::Tensor unfold(const at::Tensor &self, int64_t dimension, int64_t size,
                  int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

// --- storage changes -----------------------------------------------------------

const at::Tensor &resize_(const at::Tensor &self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  const int64_t old_nbytes = static_cast<int64_t>(self.storage().nbytes());
  resize_impl(self.unsafeGetTensorImpl(), C10_AS_INTARRAYREF_SLOW(size),
              std::nullopt);
  if (fills_uninitialized()) at::native::fill_resize_deterministic_(self, old_nbytes);
  if (memory_format) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "Unsupported memory format", *memory_format);
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor &set_storage_offset_(at::Tensor &self, at::Storage source,
                                c10::SymInt storage_offset,
                                c10::SymIntArrayRef size,
                                c10::SymIntArrayRef stride) {
  const int64_t offset = storage_offset.guard_int(__FILE__, __LINE__);
  const c10::IntArrayRef sizes = C10_AS_INTARRAYREF_SLOW(size);
  const c10::IntArrayRef strides = C10_AS_INTARRAYREF_SLOW(stride);
  at::native::checkSetStorage(self, std::move(source), offset, sizes, strides);
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  const c10::OptionalIntArrayRef stride_opt =
      strides.data() != nullptr ? c10::OptionalIntArrayRef(strides) : std::nullopt;
  resize_impl(self.unsafeGetTensorImpl(), sizes, stride_opt);
  return self;
}

at::Tensor &set_storage_(at::Tensor &self, at::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor &set_tensor_(at::Tensor &self, const at::Tensor &source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor &set_empty_(at::Tensor &self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, allocator(),
                       /*resizable=*/true);
  return self.set_(std::move(storage), 0, {0}, {});
}

// --- host <-> device -------------------------------------------------------------

// The tpu view `src` as a dense CPU tensor of the same dtype and shape.
at::Tensor download(const at::Tensor &src) {
  at::Tensor host = at::empty(src.sizes(), src.options().device(c10::kCPU));
  if (src.numel() == 0) return host;
  const CopyView view(src, "copy from tpu");
  const c10::DeviceGuard guard(src.device());
  check(tt_tensor_download(runtime(), &view.desc, host.mutable_data_ptr()),
        "copy from tpu");
  return host;
}

// The values of the tpu view `src` on the CPU, its lazy conj/neg bits applied.
at::Tensor download_resolved(const at::Tensor &src) {
  at::Tensor host = download(src);  // the bytes: conj/neg not applied
  if (src.is_conj()) host = host.conj().resolve_conj();
  if (src.is_neg()) host = host._neg_view().resolve_neg();
  return host;
}

// The bytes of the tpu view `t`: an alias of its storage without its lazy
// conj/neg bits.
at::Tensor bytes_of(const at::Tensor &t) {
  at::Tensor a = at::empty({0}, t.options());
  a.set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
  return a;
}

// Device to device: the core's copy_ of the bytes.
void device_copy(const at::Tensor &dst, const at::Tensor &src, bool non_blocking) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "");
  torch::jit::Stack stack{dst, src, non_blocking};
  boxed_fallback(op, &stack);
}

at::Tensor copy_from(const at::Tensor &self, const at::Tensor &dst,
                     bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(), "tpu copy: undefined tensor");
  if (dst.numel() == 0) return dst;
  const bool src_tpu = self.device().type() == c10::DeviceType::PrivateUse1;
  const bool dst_tpu = dst.device().type() == c10::DeviceType::PrivateUse1;
  // Lazy conj/neg views (x.conj()) reach here unresolved (see the Conjugate
  // and Negative fallthroughs below), and this is where they are resolved
  // (resolve_conj, clone): dst's bytes are src's bytes conjugated / negated
  // where the two views' bits differ, computed on the device.
  const bool bits = self.is_conj() || self.is_neg() || dst.is_conj() || dst.is_neg();
  if (src_tpu && dst_tpu && self.device() == dst.device()) {
    if (!bits) {
      device_copy(dst, self, non_blocking);  // a program like any other op
      return dst;
    }
    at::Tensor v = bytes_of(self);
    if (self.is_conj() != dst.is_conj()) v = at::conj_physical(v);
    if (self.is_neg() != dst.is_neg()) v = at::neg(v);
    device_copy(bytes_of(dst), v, non_blocking);
    return dst;
  }
  if (src_tpu && dst_tpu) {
    upload(dst, download_resolved(self));  // across devices: through the host
    return dst;
  }
  if (dst_tpu) {
    upload(dst, self);
    return dst;
  }
  // tpu -> CPU (or another host-side device): download, then let the
  // destination's copy_ convert and broadcast.
  if (dst.is_cpu() && dst.is_contiguous() && dst.scalar_type() == self.scalar_type() &&
      dst.sizes() == self.sizes() && !dst.is_conj() && !dst.is_neg() && !bits) {
    const CopyView view(self, "copy from tpu");
    const c10::DeviceGuard guard(self.device());
    check(tt_tensor_download(runtime(), &view.desc, dst.mutable_data_ptr()),
          "copy from tpu");
    return dst;
  }
  const_cast<at::Tensor &>(dst).copy_(download_resolved(self), non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor &self, const at::Tensor &dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, /*non_blocking=*/false);
}

at::Scalar local_scalar_dense(const at::Tensor &self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  return download(self).item();
}

// _assert_async: checked when called, by reading the one value (as
// `bool(t)` would), so the error names the assertion where CUDA's would come
// later. Running no CPU op, it is not a fallback. (Checking inside the next
// program instead needs the core's device-side error flags.)
void assert_async_msg(const at::Tensor &self, c10::string_view assert_msg) {
  TORCH_CHECK(self.numel() != 0, "Boolean value of Tensor with no values is ambiguous");
  TORCH_CHECK(self.numel() == 1,
              "Boolean value of Tensor with more than one value is ambiguous");
  const c10::Scalar s = local_scalar_dense(self);
  const bool nonzero = s.isFloatingPoint() ? s.toDouble() != 0.0
                       : s.isBoolean()     ? s.toBool()
                                           : s.toLong() != 0;
  if (!nonzero) {
    if (assert_msg.empty()) {
      TORCH_CHECK(false, "Expected Tensor with single nonzero value, but got zero");
    }
    TORCH_CHECK(false, std::string(assert_msg));
  }
}

void assert_async(const at::Tensor &self) { assert_async_msg(self, ""); }

// --- queries -------------------------------------------------------------------

bool is_set_to(const at::Tensor &self, const at::Tensor &tensor) {
  return at::native::is_set_to(self, tensor);
}

// Module._apply (model.to("tpu")) moves a parameter in place (`param.data =
// moved`) only when this holds, else it makes a new Parameter per alias and
// tied weights come apart. PyTorch's own answer covers its built-in dense
// backends; PrivateUse1 backends are asked to extend it: a plain strided
// tpu tensor and a plain strided CPU (or tpu) tensor are interchangeable.
bool has_compatible_shallow_copy_type(const at::Tensor &self, const at::Tensor &from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  const c10::DispatchKeySet wrapped({c10::DispatchKey::Python, c10::DispatchKey::Functionalize,
                                     c10::DispatchKey::FuncTorchBatched,
                                     c10::DispatchKey::Conjugate, c10::DispatchKey::Negative});
  auto plain = [&](const at::Tensor &t) {
    const c10::DeviceType d = t.device().type();
    return (d == c10::DeviceType::CPU || d == c10::DeviceType::PrivateUse1) &&
           t.layout() == c10::kStrided && !t.is_quantized() && !t.is_nested() &&
           !t.key_set().has_any(wrapped);
  };
  return plain(self) && plain(from);
}

void record_stream(at::Tensor & /*self*/, c10::Stream /*s*/) {
  // One stream per device: nothing to record.
}

}  // namespace

// `src` (any CPU tensor broadcastable to dst) into the tpu view `dst`.
void upload(const at::Tensor &dst, const at::Tensor &src) {
  TORCH_CHECK(src.device().is_cpu(), "tpu: cannot copy from ", src.device(),
              " to ", dst.device(), " directly; copy through the CPU");
  at::Tensor host = src;
  if (host.scalar_type() != dst.scalar_type()) host = host.to(dst.scalar_type());
  if (host.sizes() != dst.sizes()) host = host.expand(dst.sizes());
  host = host.resolve_conj().resolve_neg();
  // dst's own lazy conj/neg bits: its bytes hold conj(value) / -value.
  if (dst.is_conj()) host = host.conj().resolve_conj();
  if (dst.is_neg()) host = host._neg_view().resolve_neg();
  host = host.contiguous();
  const CopyView view(dst, "copy to tpu");
  const c10::DeviceGuard guard(dst.device());
  check(tt_tensor_upload(runtime(), &view.desc, host.const_data_ptr()), "copy to tpu");
}

// _copy_from sees lazy conj/neg bits itself: PyTorch's Conjugate/Negative
// fallbacks would resolve them with clone, which calls _copy_from again.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("view_as_real", TORCH_FN(view_as_real));
  m.impl("view_as_complex", TORCH_FN(view_as_complex));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage", TORCH_FN(set_storage_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset_));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor_));
  m.impl("set_", TORCH_FN(set_empty_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("_assert_async", TORCH_FN(assert_async));
  m.impl("_assert_async.msg", TORCH_FN(assert_async_msg));
  m.impl("is_set_to", TORCH_FN(is_set_to));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  register_structured_ops(m);
}

}  // namespace torchtpu
