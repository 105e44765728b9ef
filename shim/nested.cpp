// nested.cpp — NestedTensors on tpu, and the dense transformer ops whose CPU
// kernels are device-generic compositions (the inference fast paths of
// nn.TransformerEncoder and nn.MultiheadAttention).
//
// A NestedTensor is a NestedTensorImpl: one flat buffer (here a tpu tensor)
// plus metadata that lives on the CPU for every device (sizes, strides and
// offsets of its components). PyTorch registers its nested kernels for
// NestedTensorCPU/CUDA, and HPU; a nested tpu tensor dispatches to
// NestedTensorPrivateUse1, which has none of its own. Most of those kernels
// are compositions: they read the metadata on the host and reach the buffer
// only through ATen ops, which then dispatch to tpu like any other op. So one
// boxed kernel behind NestedTensorPrivateUse1 routes each op:
//   - to the kernel PyTorch registers for NestedTensorHPU (an out-of-tree
//     device like ours): those are the shared CPU/CUDA/HPU kernels, written
//     for any device;
//   - to the NestedTensorCPU kernel, for the few CPU-only registrations that
//     are compositions as well (kGenericNestedCpu, read in PyTorch's sources);
//   - for the other CPU-only kernels (they read the buffer's memory on the
//     host), through the CPU: nested arguments are copied to NestedTensorCPU
//     (buffer copied, metadata kept), PyTorch's kernel runs, results come
//     back; counted and warned about as any CPU fallback.
// An op with no nested kernel at all fails as on the CPU (NotImplementedError).
//
// Leaves out: op logic. The lists below only say which of PyTorch's kernels
// are device-generic; jagged-layout nested tensors (torch.jagged) are Python
// subclasses over dense tensors and need nothing here.
#include "shim.h"

#include <ATen/native/DispatchStub.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/native_layer_norm_backward.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_map>

namespace torchtpu {
namespace {

// --- which of PyTorch's kernels run as they are --------------------------------

// CPU-only nested kernels (no NestedTensorHPU registration) that are
// compositions of dispatched ops, so they run on a tpu buffer unchanged.
const char *const kGenericNestedCpu[] = {
    "aten::to_padded_tensor",                  // unbind, pad, stack
    "aten::bmm",                               // mm_out per component
    "aten::_nested_tensor_softmax_with_shape",  // softmax + index_put_ per sequence
    "aten::_native_multi_head_attention",      // see kGenericDenseCpu
    "aten::_nested_tensor_storage_offsets",    // metadata only
};

// CPU-only nested kernels that pad a nested first argument (to_padded_tensor)
// and then run their dense code: pad on tpu, then run the dense op on tpu
// (the core's rule, or the CPU fallback when it has none).
const char *const kPadFirst[] = {
    "aten::_transform_bias_rescale_qkv",
};

// Dense ops whose CPU kernel is a composition of dispatched ATen ops (PyTorch
// registers the same function for CPU and CUDA, or an out-of-tree
// PrivateUse1 backend calls it for its device): with no rule in the core,
// they run PyTorch's CPU kernel on tpu tensors, not the CPU fallback.
const char *const kGenericDenseCpu[] = {
    "aten::_transformer_encoder_layer_fwd",       // MHA + layer_norm + linear
    "aten::_native_multi_head_attention",         // linear, bmm, softmax
    "aten::_nested_tensor_from_mask",             // cumsum, argmin, masked_select
    "aten::_nested_tensor_from_mask_left_aligned",
    "aten::_nested_from_padded",                  // CPU's is the generic one
    "aten::_nested_view_from_buffer",             // a view: must not be copied
};

bool listed(const std::string &name, c10::ArrayRef<const char *> list) {
  for (const char *n : list) {
    if (name == n) return true;
  }
  return false;
}

std::string op_name(const c10::OperatorHandle &op) {
  const c10::OperatorName &n = op.operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

// --- routing --------------------------------------------------------------------

enum class Route { kShared, kGenericCpu, kPadFirst, kHost, kMissing };

Route route_of(const c10::OperatorHandle &op) {
  static std::mutex mu;
  static std::unordered_map<const c10::FunctionSchema *, Route> cache;
  const c10::FunctionSchema *key = &op.schema();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const std::string name = op_name(op);
  const std::string base = op.operator_name().name;
  Route r = Route::kMissing;
  if (op.hasKernelForDispatchKey(c10::DispatchKey::NestedTensorHPU)) {
    r = Route::kShared;
  } else if (op.hasKernelForDispatchKey(c10::DispatchKey::NestedTensorCPU)) {
    r = listed(base, kGenericNestedCpu) || listed(name, kGenericNestedCpu) ? Route::kGenericCpu
        : listed(name, kPadFirst)                                        ? Route::kPadFirst
                                                                         : Route::kHost;
  }
  cache.emplace(key, r);
  return r;
}

// The device of the first tpu tensor among the op's arguments.
c10::optional<c10::Device> tpu_device(c10::ArrayRef<c10::IValue> args) {
  for (const c10::IValue &iv : args) {
    if (iv.isTensor() && is_tpu(iv.toTensor())) return iv.toTensor().device();
    if (iv.isTensorList()) {
      for (const at::Tensor &t : iv.toTensorVector()) {
        if (is_tpu(t)) return t.device();
      }
    }
  }
  return c10::nullopt;
}

c10::IValue moved(const c10::IValue &iv, c10::Device to) {
  if (iv.isTensor()) {
    const at::Tensor &t = iv.toTensor();
    return t.defined() && t.device() != to ? c10::IValue(t.to(to)) : iv;
  }
  if (iv.isTensorList()) {
    std::vector<at::Tensor> list = iv.toTensorVector();
    for (at::Tensor &t : list) {
      if (t.defined() && t.device() != to) t = t.to(to);
    }
    return c10::IValue(std::move(list));
  }
  return iv;
}

// Runs the op on the CPU: tpu arguments (nested or dense) are copied to the
// host, PyTorch's CPU kernel runs, fresh results come back to `device`,
// written arguments get the new values copied in.
void run_on_host(const c10::OperatorHandle &op, torch::jit::Stack *stack, c10::Device device) {
  note_cpu_fallback(op_name(op), "a nested tensor op whose PyTorch kernel reads the "
                    "buffer on the host (NestedTensorCPU only)");
  const c10::FunctionSchema &schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t first = stack->size() - nargs;
  std::vector<c10::IValue> originals(stack->begin() + first, stack->end());
  const c10::Device cpu(c10::DeviceType::CPU);
  for (size_t i = 0; i < nargs; i++) (*stack)[first + i] = moved(originals[i], cpu);
  std::vector<c10::IValue> hosted(stack->begin() + first, stack->end());
  op.callBoxed(stack);
  for (size_t i = 0; i < nargs; i++) {
    const c10::AliasInfo *a = schema.arguments()[i].alias_info();
    if (a == nullptr || !a->isWrite() || !originals[i].isTensor()) continue;
    at::Tensor dst = originals[i].toTensor();
    if (dst.defined()) dst.copy_(hosted[i].toTensor());
  }
  const auto &rets = schema.returns();
  const size_t base = stack->size() - rets.size();
  for (size_t r = 0; r < rets.size(); r++) {
    c10::IValue &iv = (*stack)[base + r];
    const c10::AliasInfo *a = rets[r].alias_info();
    bool aliased = false;
    for (size_t i = 0; a != nullptr && i < nargs && !aliased; i++) {
      const c10::AliasInfo *b = schema.arguments()[i].alias_info();
      if (b != nullptr && b->isWrite() && b->beforeSets() == a->beforeSets()) {
        iv = originals[i];
        aliased = true;
      }
    }
    if (!aliased) iv = moved(iv, device);
  }
}

// Replaces a nested first argument by its padded form (zeros), as PyTorch's
// CPU kernel does first, and runs the dense op. False (nothing done) when
// some other argument is nested too.
bool run_padded(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const size_t nargs = op.schema().arguments().size();
  const size_t first = stack->size() - nargs;
  c10::IValue &iv = (*stack)[first];
  if (!iv.isTensor() || !iv.toTensor().is_nested()) return false;
  for (size_t i = 1; i < nargs; i++) {
    const c10::IValue &other = (*stack)[first + i];
    if (other.isTensor() && other.toTensor().is_nested()) return false;
  }
  iv = c10::IValue(iv.toTensor().to_padded_tensor(0.0));
  op.callBoxed(stack);
  return true;
}

void nested_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const size_t nargs = op.schema().arguments().size();
  const c10::ArrayRef<c10::IValue> args(stack->data() + stack->size() - nargs, nargs);
  const c10::optional<c10::Device> device = tpu_device(args);
  const c10::OptionalDeviceGuard guard(device);
  switch (route_of(op)) {
    case Route::kShared:
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::NestedTensorHPU), stack);
      return;
    case Route::kGenericCpu:
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::NestedTensorCPU), stack);
      return;
    case Route::kPadFirst:
      if (run_padded(op, stack)) return;
      [[fallthrough]];
    case Route::kHost:
      run_on_host(op, stack, device.value_or(c10::Device(c10::DeviceType::PrivateUse1, 0)));
      return;
    case Route::kMissing:
      break;
  }
  // No kernel for nested tensors on any device: the dispatcher's own error
  // for NestedTensorCPU (it has no kernel to run there either), naming ours.
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::NestedTensorCPU), stack);
  } catch (const c10::NotImplementedError &e) {
    std::string msg = e.what_without_backtrace();
    const std::string cpu = "'NestedTensorCPU' backend";
    const size_t at = msg.find(cpu);
    if (at != std::string::npos) msg.replace(at, cpu.size(), "'NestedTensortpu' backend");
    TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
  }
  TORCH_CHECK(false, op_name(op), ": no nested tensor kernel, yet NestedTensorCPU ran one");
}

// Runs PyTorch's CPU kernel of a dense op in kGenericDenseCpu on tpu tensors.
void run_cpu_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const size_t nargs = op.schema().arguments().size();
  const c10::ArrayRef<c10::IValue> args(stack->data() + stack->size() - nargs, nargs);
  const c10::OptionalDeviceGuard guard(tpu_device(args));
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

// --- DispatchStubs the shared nested kernels call -------------------------------
//
// nested_layer_norm and its backward call the LayerNorm DispatchStubs with
// the buffer's device type, which PyTorch lets PrivateUse1 backends fill.
// Ours run the dense ops (the core's rules) on the [M, N] view and copy into
// the results the nested kernel allocated.

bool wanted(const at::Tensor *t) { return t != nullptr && t->defined(); }

// gamma/beta of any normalized shape (LayerNorm((size, size, 4))) as the [N]
// the dense op over the [M, N] view takes.
c10::optional<at::Tensor> flat(const at::Tensor &t, int64_t N) {
  return t.defined() ? c10::optional<at::Tensor>(t.reshape({N})) : c10::nullopt;
}

void layer_norm_stub(const at::Tensor &X, const at::Tensor &gamma, const at::Tensor &beta,
                     int64_t M, int64_t N, double eps, at::Tensor *Y, at::Tensor *mean,
                     at::Tensor *rstd) {
  const auto [y, m, r] = at::native_layer_norm(X.reshape({M, N}), {N}, flat(gamma, N),
                                                 flat(beta, N), eps);
  Y->copy_(y.view(Y->sizes()));
  if (wanted(mean)) mean->copy_(m.view(mean->sizes()));
  if (wanted(rstd)) rstd->copy_(r.view(rstd->sizes()));
}

void layer_norm_backward_stub(const at::Tensor &dY, const at::Tensor &X, const at::Tensor &mean,
                              const at::Tensor &rstd, const at::Tensor &gamma, int64_t M,
                              int64_t N, at::Tensor *dX, at::Tensor *dgamma, at::Tensor *dbeta) {
  // The stub gets no bias; native_layer_norm_backward only reads its shape
  // ([N], gamma's) to produce dbeta.
  const auto [dx, dg, db] = at::native_layer_norm_backward(
      dY.reshape({M, N}), X.reshape({M, N}), {N}, mean.reshape({M, 1}), rstd.reshape({M, 1}),
      flat(gamma, N), wanted(dbeta) ? flat(gamma, N) : c10::nullopt,
      {wanted(dX), wanted(dgamma), wanted(dbeta)});
  if (wanted(dX)) dX->copy_(dx.view(dX->sizes()));
  if (wanted(dgamma)) dgamma->copy_(dg.view(dgamma->sizes()));
  if (wanted(dbeta)) dbeta->copy_(db.view(dbeta->sizes()));
}

}  // namespace

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&nested_fallback>());
}

// A backend fallback comes after an op's CompositeImplicitAutograd kernel,
// which PyTorch gives every nested key without a kernel of its own: linear,
// matmul, chunk, narrow... would run their dense decompositions on a nested
// tensor and fail. Ops with a nested kernel get the router explicitly.
TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  auto &dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName &n : dispatcher.getAllOpNames()) {
    if (n.name.rfind("aten::", 0) != 0) continue;
    const auto op = dispatcher.findOp(n);
    if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::NestedTensorCPU) &&
        !op->hasKernelForDispatchKey(c10::DispatchKey::NestedTensorHPU)) {
      continue;
    }
    const std::string full = n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
    m.impl(full.substr(6).c_str(), torch::CppFunction::makeFromBoxedFunction<&nested_fallback>());
  }
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char *name : kGenericDenseCpu) {
    if (tt_op_lookup(name) >= 0) continue;  // the core lowers it: boxed_fallback
    m.impl(name + 6, torch::CppFunction::makeFromBoxedFunction<&run_cpu_kernel>());
  }
}

}  // namespace torchtpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(LayerNormKernel, &torchtpu::layer_norm_stub)
REGISTER_PRIVATEUSE1_DISPATCH(LayerNormBackwardKernel, &torchtpu::layer_norm_backward_stub)
}  // namespace at::native
