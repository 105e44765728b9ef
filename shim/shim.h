// shim.h — what the shim's files share: the runtime, dtype mapping, tensor
// descriptors, the storage handle inside a DataPtr, and the boxed entry point.
//
// The shim is generic PyTorch glue. It knows no op, no StableHLO and no PJRT:
// everything it needs from the core comes through torchtpu.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <string>

#include "torchtpu.h"

namespace torchtpu {

// --- runtime and status ------------------------------------------------------

// The process-wide core runtime; throws the core's message when it failed to
// start (no plugin, bad plugin, ...).
tt_runtime *runtime();

// Frees `s` and throws a c10::Error carrying its message (IndexError for
// TT_OUT_OF_RANGE, OutOfMemoryError for TT_RESOURCE_EXHAUSTED,
// NotImplementedError for TT_UNIMPLEMENTED, TypeError for TT_TYPE_ERROR). `what`
// prefixes the message when the core's message does not already say which op
// failed.
[[noreturn]] void throw_status(tt_status s, const std::string &what);

// Throws (freeing the status) when `s` is an error; does nothing on OK.
inline void check(tt_status s, const char *what) {
  if (s != nullptr) throw_status(s, what);
}

// Number of devices the runtime sees; 0 when it cannot start. Never throws.
int device_count_noexcept();

// --- dtypes ------------------------------------------------------------------

// TT_DTYPE_NONE when PyTorch's dtype has no tpu counterpart.
tt_dtype to_tt_dtype(c10::ScalarType t);
c10::ScalarType to_scalar_type(tt_dtype d);
// Like to_tt_dtype, but throws "<what>: dtype complex64 is not supported on tpu".
tt_dtype to_tt_dtype_checked(c10::ScalarType t, const std::string &what);
// The dtype host copies move `t` as: its own, or for a dtype the core has no
// programs for (complex32, the float8s) the unsigned integer of its width,
// since a copy moves bytes. Throws for quantized dtypes.
tt_dtype copy_dtype(c10::ScalarType t, const std::string &what);

// --- storages and tensors ----------------------------------------------------

c10::Allocator *allocator();

// The tt_storage behind a tpu StorageImpl (NULL for a storage that never got
// one, e.g. a zero-byte storage made elsewhere). Throws when the storage was
// not made by our allocator; a storage PyTorch made when it imported a
// DLPack capsule of a tpu tensor (torch.from_dlpack, torch.asarray) counts
// as ours when its data pointer is a handle that dlpack.cpp exported.
tt_storage *storage_handle(const c10::StorageImpl *storage);

// torch.tpu.memory's history (memory.cpp): a storage PyTorch now holds, one
// it let go of, an allocation refused (free_bytes: what the limit leaves).
// Cheap no-ops unless _record_memory_history is on.
void memory_note_alloc(const tt_storage *s, int device, int64_t nbytes);
void memory_note_free(const tt_storage *s, int device, int64_t nbytes);
void memory_note_oom(int device, int64_t nbytes, int64_t free_bytes);

// The tt_storage whose handle is `data` while a DLPack export of it lives
// (dlpack.cpp); NULL otherwise.
tt_storage *export_storage(const void *data);

// Grows (never shrinks) a tpu storage to `nbytes`, keeping its contents.
void grow_storage(c10::StorageImpl *storage, size_t nbytes);

// Sets sizes/strides of `self` (contiguous when `stride` is empty) and grows
// its storage to fit, as resize_ does on CPU, without touching device memory.
void resize_impl(c10::TensorImpl *self, c10::IntArrayRef size,
                 c10::OptionalIntArrayRef stride);

// A fresh tpu tensor owning `storage` (ownership moves in), dense row-major.
at::Tensor wrap_storage(tt_storage *storage, c10::ScalarType dtype,
                        c10::IntArrayRef sizes);

// A defined tensor on a tpu device.
inline bool is_tpu(const at::Tensor &t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// A view descriptor of a defined tpu tensor. It borrows sizes/strides from
// the tensor: keep the tensor alive while the descriptor is used.
tt_tensor describe(const at::Tensor &t, const std::string &what);

// A tpu view described for copying its elements in row-major order: size-1
// dims dropped and runs of dims that are contiguous with each other merged,
// which keeps that order. Lets tensors of more than TT_MAX_RANK dims (PyTorch
// allows 64) move between host and device; `desc` points into this object.
struct CopyView {
  tt_tensor desc;
  c10::SmallVector<int64_t, 8> sizes, strides;
  CopyView(const at::Tensor &t, const std::string &what);
  CopyView(const CopyView &) = delete;
  CopyView &operator=(const CopyView &) = delete;
};

// The core generator behind a tpu at::Generator; throws for other devices.
tt_generator *generator_handle(const at::Generator &gen, const std::string &what);

// --- ops ---------------------------------------------------------------------

// The boxed kernel behind every op without an explicit kernel: runs the op on
// the core, or on the CPU when the core has no lowering for it.
void boxed_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack);

// `src` (any CPU tensor broadcastable to dst) into the tpu view `dst`
// (kernels.cpp): what copy_ does, without the dispatcher.
void upload(const at::Tensor &dst, const at::Tensor &src);

// PyTorch gives structured ops (add.Tensor, mul_.Tensor, exp, ...) a default
// kernel for every backend that allocates the result and calls the out=
// variant. Route them to the boxed kernel instead when the core lowers them
// (one program, a fresh result, the core's error messages), or when neither
// they nor their out= variant are lowered (one CPU fallback, under the name
// the user called). Ops whose out= variant alone is lowered keep PyTorch's
// route to it.
void register_structured_ops(torch::Library &m);

// The core's results are dense row-major; PyTorch's kernels lay some results
// out like their inputs (shim/layout.cpp).
enum class LayoutKind {
  kContiguous,   // as the core made them
  kInputFormat,  // a channels_last input's memory format (convolution, pooling, ...)
  kListFormat,   // the common memory format of a Tensor[] argument's tensors (cat)
  kPointwise,    // TensorIterator's rule: the inputs' dim order, dense
  kAttention,          // the CPU flash attention kernel's: output like query, logsumexp [B, L, H]
  kAttentionBackward,  // its backward's: gradients in [B, L, H, E] memory
  kColumnMajor,        // LAPACK's: the results in `matrices`, each matrix column-major
};
struct ResultLayout {
  LayoutKind kind = LayoutKind::kContiguous;
  uint32_t matrices = 0;  // kColumnMajor: bit i set when result i is batched column-major
};
ResultLayout result_layout(const c10::OperatorHandle &op, const std::string &name);
// The strides `how` gives result `index` of `shape` for the op's `inputs`
// (its arguments, written ones left out); empty for row-major.
c10::SmallVector<int64_t, 8> result_strides(ResultLayout how, c10::ArrayRef<c10::IValue> inputs,
                                            size_t index, c10::IntArrayRef shape);
// Re-lays fresh results out as `how` says (one device copy per result whose
// layout changes, none otherwise).
void lay_out_results(ResultLayout how, c10::ArrayRef<c10::IValue> inputs,
                     c10::SmallVectorImpl<at::Tensor> &results);

// How ops without a lowering are treated.
enum class FallbackMode { kWarn = 0, kError = 1, kSilent = 2 };
FallbackMode fallback_mode();
void set_fallback_mode(FallbackMode mode);
// Between set_fused_sdp_tracing(true) and (false) (the process, nested),
// fake tensors traced without functionalization get the fused attention op
// from "tpu"'s SDPA choice, as functional ones do (fallback.cpp).
void set_fused_sdp_tracing(bool on);

// Before an op runs on the CPU: counts it (torch.tpu's fallback counters),
// warns once per op in kWarn mode, throws NotImplementedError in kError
// mode. `why` (may be empty) says what sent it there.
void note_cpu_fallback(const std::string &name, const std::string &why);

}  // namespace torchtpu
