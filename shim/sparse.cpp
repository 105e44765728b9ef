// sparse.cpp — sparse COO and compressed (CSR/CSC/BSR/BSC) tensors on tpu:
// PyTorch's device-generic sparse kernels registered for SparsePrivateUse1
// and SparseCsrPrivateUse1.
//
// A sparse tpu tensor is PyTorch's own SparseTensorImpl (COO) or
// SparseCsrTensorImpl (compressed) whose member tensors (indices, values;
// crow/col indices, values) are dense tpu tensors. Most of PyTorch's sparse
// kernels are registered with one function for SparseCPU and SparseCUDA:
// they read metadata and reach the data only through dispatched ATen ops
// (construction, _indices/_values/_nnz, _coalesced_, clone, copy_, empty,
// unary ufuncs over the values, to_dense = zeros + add_, mm = addmm, ...).
// Those run unchanged on tpu members: each is registered here as a boxed
// kernel that redispatches to the SparseCPU (SparseCsrCPU) key, whose kernel
// is that shared function. The lists were read off native_functions.yaml
// (entries whose SparseCPU and SparseCUDA kernels are the same function).
//
// The kernels that differ between CPU and CUDA (coalesce, add.out, addmm,
// mul.out, index_select, sparse sums, sampled_addmm...) read memory on the
// host or call cuSPARSE; torchtpu/_sparse.py registers compositions of dense
// tpu ops for them. An op in neither place raises PyTorch's
// NotImplementedError for the 'Sparsetpu' backend, as on any device without
// the kernel.
//
// Leaves out: op logic.
#include "shim.h"

#include <ATen/native/DispatchStub.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

// PyTorch declares this stub in ATen/native/sparse/SparseStubs.h, which the
// wheel does not ship; the declaration is the same (the exported symbol's
// type says the signature).
namespace at::native {
using flatten_indices_fn = at::Tensor (*)(const at::Tensor &indices, at::IntArrayRef size);
DECLARE_DISPATCH(flatten_indices_fn, flatten_indices_stub)
}  // namespace at::native

namespace torchtpu {
namespace {

// SparseCPU == SparseCUDA kernels (COO).
const char *const kSharedCoo[] = {
    "abs", "abs_", "abs.out", "sgn", "sgn_", "sgn.out", "conj_physical.out",
    "add.Tensor", "add_.Tensor", "asinh", "asinh_", "asinh.out", "atanh", "atanh_",
    "atanh.out", "asin", "asin_", "asin.out", "atan", "atan_", "atan.out",
    "_sparse_broadcast_to", "cat", "ceil", "ceil_", "ceil.out", "copy_", "div.Tensor",
    "div_.Tensor", "div.out", "div.Tensor_mode", "div_.Tensor_mode", "div.out_mode",
    "empty.memory_format", "empty_like", "erf", "erf_", "erf.out", "expm1", "expm1_",
    "expm1.out", "floor", "floor_", "floor.out", "floor_divide", "floor_divide_.Tensor",
    "floor_divide.out", "frac", "frac_", "frac.out", "isnan", "nan_to_num", "nan_to_num_",
    "nan_to_num.out", "log1p", "log1p_", "log1p.out", "mm", "mm.out", "mul.Tensor",
    "mul_.Tensor", "mv", "narrow_copy", "permute", "rad2deg", "rad2deg_", "rad2deg.out",
    "deg2rad", "deg2rad_", "deg2rad.out", "neg", "neg_", "neg.out", "round", "round_",
    "round.out", "relu", "relu_", "sin", "sin_", "sin.out", "sinh", "sinh_", "sinh.out", "sum",
    "sum.dim_IntList", "sqrt", "sqrt_", "sqrt.out", "tan", "tan_", "tan.out", "tanh", "tanh_",
    "tanh.out", "threshold_backward.grad_input", "threshold_backward", "trunc", "trunc_",
    "trunc.out", "unsqueeze", "zeros.out", "native_norm", "native_norm.ScalarOpt_dim_dtype",
    "norm.ScalarOpt_dim_dtype", "norm.ScalarOpt_dim", "clone", "resize_as_sparse_", "zero_",
    "sub.out", "sub.Tensor", "sub_.Tensor", "_sparse_coo_tensor_with_dims",
    "_sparse_coo_tensor_with_dims_and_tensors", "sparse_resize_", "sparse_resize_and_clear_",
    "sparse_mask", "_sparse_mask_projection", "_to_dense", "sparse_dim", "_dimI", "dense_dim",
    "_dimV", "_nnz", "is_coalesced", "_indices", "_values", "_coalesced_", "indices", "values",
    "copy_sparse_to_sparse_", "_to_sparse.sparse_dim", "_to_sparse", "_to_sparse_csr",
    "_to_sparse_csc", "_to_sparse_bsr", "_to_sparse_bsc", "erfinv", "erfinv_", "erfinv.out",
    "sign", "sign_", "sign.out", "signbit", "signbit.out", "any", "pow.Tensor_Scalar_out",
    "pow.Tensor_Scalar", "isinf", "isposinf", "isposinf.out", "isneginf", "isneginf.out",
};

// SparseCsrCPU == SparseCsrCUDA kernels (CSR, CSC, BSR, BSC). addmm and
// mm go through addmm.out, which _sparse.py provides.
const char *const kSharedCompressed[] = {
    "abs", "abs_", "abs.out", "angle", "angle.out", "sgn", "sgn_", "sgn.out", "_conj_physical",
    "conj_physical.out", "conj_physical_", "add.Tensor", "add_.Tensor", "asinh", "asinh_",
    "asinh.out", "atanh", "atanh_", "atanh.out", "asin", "asin_", "asin.out", "atan", "atan_",
    "atan.out", "ceil", "ceil_", "ceil.out", "copy_", "empty.memory_format", "resize_",
    "empty_like", "erf", "erf_", "erf.out", "expm1", "expm1_", "expm1.out", "fill_.Scalar",
    "floor", "floor_", "floor.out", "frac", "frac_", "frac.out", "isnan", "log1p", "log1p_",
    "log1p.out", "mm", "mm.out", "mul.Tensor", "mul_.Tensor", "mul.out", "mul.Scalar",
    "mul_.Scalar", "rad2deg", "rad2deg_", "rad2deg.out", "deg2rad", "deg2rad_", "deg2rad.out",
    "neg", "neg_", "neg.out", "round", "round_", "round.out", "relu", "relu_", "select.int",
    "sin", "sin_", "sin.out", "sinh", "sinh_", "sinh.out", "sum", "sum.dim_IntList", "sqrt",
    "sqrt_", "sqrt.out", "tan", "tan_", "tan.out", "tanh", "tanh_", "tanh.out",
    "threshold_backward.grad_input", "threshold_backward", "trunc", "trunc_", "trunc.out",
    "clone", "resize_as_sparse_", "zero_", "addmm", "sparse_mask", "_to_dense", "sparse_dim",
    "dense_dim", "_nnz", "values", "crow_indices", "col_indices", "ccol_indices",
    "row_indices", "_to_sparse.sparse_dim", "_to_sparse", "_to_sparse_csr", "_to_sparse_csc",
    "_to_sparse_bsr", "_to_sparse_bsc", "erfinv", "erfinv_", "erfinv.out", "sign", "sign_",
    "sign.out", "signbit", "signbit.out", "normal_", "isinf", "isposinf", "isposinf.out",
    "isneginf", "isneginf.out", "select_copy.int",
};

// Dense -> sparse conversions: PyTorch's CPU and CUDA kernels are one
// composition (nonzero, index), so a dense tpu tensor converts on the device
// instead of through the CPU fallback. (_to_sparse.sparse_dim, whose shared
// kernel calls unique_dim, is _sparse.py's.)
const char *const kSharedDense[] = {
    "_to_sparse", "_to_sparse_csr", "_to_sparse_csc",
    "_to_sparse_bsr", "_to_sparse_bsc",
};

// The device of the first tpu tensor among the op's arguments.
c10::optional<c10::Device> tpu_device(c10::ArrayRef<c10::IValue> args) {
  for (const c10::IValue &iv : args) {
    if (iv.isTensor() && iv.toTensor().defined() && is_tpu(iv.toTensor())) {
      return iv.toTensor().device();
    }
    if (iv.isTensorList()) {
      for (const at::Tensor &t : iv.toTensorVector()) {
        if (t.defined() && is_tpu(t)) return t.device();
      }
    }
  }
  return c10::nullopt;
}

// flatten_indices_stub: the row-major position of each column of indices
// [sparse_dim, nnz] within `size` (compressed -> compressed conversions call
// it through at::sparse::flatten_indices). ATen ops, so it runs on tpu.
at::Tensor flatten_indices(const at::Tensor &indices, at::IntArrayRef size) {
  const int64_t sd = indices.size(0);
  if (sd == 0) return at::zeros({indices.size(1)}, indices.options());
  at::Tensor lin = indices.select(0, 0);
  for (int64_t d = 1; d < sd; d++) lin = lin.mul(size[d]).add(indices.select(0, d));
  return lin.contiguous();
}

template <c10::DispatchKey K>
void run_shared(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const size_t nargs = op.schema().arguments().size();
  const c10::ArrayRef<c10::IValue> args(stack->data() + stack->size() - nargs, nargs);
  const c10::OptionalDeviceGuard guard(tpu_device(args));
  op.redispatchBoxed(c10::DispatchKeySet(K), stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  for (const char *name : kSharedCoo) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&run_shared<c10::DispatchKey::SparseCPU>>());
  }
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  for (const char *name : kSharedCompressed) {
    m.impl(name,
           torch::CppFunction::makeFromBoxedFunction<&run_shared<c10::DispatchKey::SparseCsrCPU>>());
  }
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char *name : kSharedDense) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&run_shared<c10::DispatchKey::CPU>>());
  }
}

}  // namespace torchtpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(flatten_indices_stub, &torchtpu::flatten_indices)
}  // namespace at::native
