// layout.cpp — the memory layout of the core's fresh results.
//
// The core's results are dense row-major. PyTorch's kernels give some
// results their inputs' layout, and users' code sees it (`is_contiguous`,
// `stride()`, channels_last models):
// - convolution, 2-d pooling, max_pool3d, upsampling, batch and group norm,
//   the 2-d/3-d reflection and replication pads: the first channels_last
//   argument's memory format (suggest_memory_format);
// - cat: its inputs' common memory format;
// - pointwise ops (PyTorch's `pointwise` tag, dropout, hardswish, prelu, glu): TensorIterator's
//   rule — the output is dense, its dims ordered as the inputs' strides order
//   them (TensorIteratorBase::reorder_dimensions), with its fast paths (all
//   inputs contiguous, all channels_last, all dense with equal strides);
// - the CPU flash attention kernels (_scaled_dot_product_flash_attention_for_cpu
//   and its backward): the output laid out like query (empty_like), the
//   logsumexp [B, H, L] with [B, L, H] memory, the gradients [B, L, H, E]
//   memory. Their meta kernels say the same, so graphs traced through them
//   (torch.compile) view the results as the device lays them out;
// - the linear algebra ops LAPACK backs on the CPU (cholesky, inv, lu_factor,
//   qr, geqrf, eigh's vectors, svd's U and Vh, the solvers, ...): their
//   matrices batched column-major (the last two dims' strides swapped), as
//   ATen's meta functions declare them (batched_matrix_contiguous_strides
//   with f_contig) and code reading `.mT.is_contiguous()` expects; vectors
//   (pivots, eigenvalues, singular values, infos) stay row-major.
// A result whose layout differs is copied once on the device into the
// layout; when every input is contiguous nothing is done.
#include "shim.h"

#include <ATen/ops/empty_strided.h>
#include <c10/util/SmallVector.h>

#include <numeric>

namespace torchtpu {

namespace {

bool is_tpu_tensor(const c10::IValue &v) { return v.isTensor() && is_tpu(v.toTensor()); }

bool follows_input_format(const std::string &name) {
  static const char *const kPrefixes[] = {
      // not avg_pool3d or the adaptive 3-d pools: PyTorch's CPU kernels give
      // contiguous results there
      "aten::convolution", "aten::max_pool", "aten::avg_pool2d", "aten::_adaptive_avg_pool2d",
      "aten::adaptive_max_pool2d", "aten::upsample_", "aten::_upsample_", "aten::native_batch_norm",
      "aten::_native_batch_norm_legit", "aten::_batch_norm_with_update",
      "aten::_batch_norm_no_update", "aten::batch_norm_backward", "aten::batch_norm_elemt",
      "aten::batch_norm_backward_elemt",
      // native_group_norm's Y and dX; the 2-d and 3-d pads and their backwards
      "aten::native_group_norm", "aten::reflection_pad2d", "aten::reflection_pad3d",
      "aten::replication_pad2d", "aten::replication_pad3d",
  };
  for (const char *p : kPrefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

// The results LAPACK's kernels give batched column-major (bit i: result i),
// read off PyTorch's CPU kernels; an out= overload has its functional form's.
uint32_t column_major_results(const std::string &name) {
  static const struct {
    const char *op;  // without the overload name
    uint32_t results;
  } kOps[] = {
      {"aten::cholesky", 1},           {"aten::linalg_cholesky_ex", 1},
      {"aten::linalg_inv_ex", 1},      {"aten::linalg_lu_factor_ex", 1},
      {"aten::linalg_lu_solve", 1},    {"aten::linalg_qr", 3},
      {"aten::geqrf", 1},              {"aten::linalg_householder_product", 1},
      {"aten::ormqr", 1},              {"aten::_linalg_eigh", 2},
      {"aten::_linalg_svd", 5},        {"aten::_linalg_solve_ex", 3},
      {"aten::linalg_solve_triangular", 1}, {"aten::triangular_solve", 3},
      {"aten::_cholesky_solve_helper", 1},  {"aten::cholesky_solve", 1},
      {"aten::cholesky_inverse", 1},   {"aten::linalg_lstsq", 1},
      {"aten::_linalg_det", 2},        {"aten::_linalg_slogdet", 4},
  };
  const std::string base = name.substr(0, name.find('.'));
  for (const auto &o : kOps) {
    if (base == o.op) return o.results;
  }
  return 0;
}

// Row-major strides are "no strides" (empty) throughout.
using Dims = c10::SmallVector<int64_t, 8>;

Dims channels_last_strides(c10::MemoryFormat m, c10::IntArrayRef shape) {
  if (m == c10::MemoryFormat::ChannelsLast && shape.size() == 4) {
    const auto st = c10::get_channels_last_strides_2d(shape);
    return Dims(st.begin(), st.end());
  }
  if (m == c10::MemoryFormat::ChannelsLast3d && shape.size() == 5) {
    const auto st = c10::get_channels_last_strides_3d(shape);
    return Dims(st.begin(), st.end());
  }
  return {};
}

// cat: the inputs' common suggested memory format, contiguous when any is
// contiguous or they differ (PyTorch's compute_output_memory_format).
Dims list_format_strides(c10::ArrayRef<c10::IValue> args, c10::IntArrayRef shape) {
  c10::optional<c10::MemoryFormat> common;
  for (const c10::IValue &a : args) {
    if (!a.isTensorList()) continue;
    for (const at::Tensor &t : a.toTensorVector()) {
      const c10::MemoryFormat m = t.suggest_memory_format();
      if (m == c10::MemoryFormat::Contiguous || (common && *common != m)) return {};
      common = m;
    }
  }
  return common ? channels_last_strides(*common, shape) : Dims{};
}

// The channels_last strides of `shape` when the first 4-d/5-d input that
// suggests a channels_last memory format has its rank.
Dims format_strides(c10::ArrayRef<c10::IValue> args, c10::IntArrayRef shape) {
  for (const c10::IValue &a : args) {
    if (!is_tpu_tensor(a)) continue;
    const at::Tensor &t = a.toTensor();
    if (t.dim() != 4 && t.dim() != 5) continue;
    const c10::MemoryFormat m = t.suggest_memory_format();
    if (m != c10::MemoryFormat::ChannelsLast && m != c10::MemoryFormat::ChannelsLast3d) continue;
    return channels_last_strides(m, shape);
  }
  return {};
}

// Strides of input t aligned to the result's shape: 0 where t broadcasts.
Dims broadcast_strides(const at::Tensor &t, c10::IntArrayRef shape) {
  Dims st(shape.size(), 0);
  const int64_t off = static_cast<int64_t>(shape.size()) - t.dim();
  for (int64_t i = 0; i < t.dim(); i++) {
    const bool broadcast = t.size(i) == 1 && shape[off + i] != 1;
    st[off + i] = broadcast ? 0 : t.stride(i);
  }
  return st;
}

// TensorIterator's permutation: perm[0] the fastest-moving dim.
Dims iteration_order(const c10::SmallVector<Dims, 4> &strides, c10::IntArrayRef shape) {
  const int64_t n = static_cast<int64_t>(shape.size());
  Dims perm(n);
  for (int64_t i = 0; i < n; i++) perm[i] = n - 1 - i;
  auto should_swap = [&](int64_t d0, int64_t d1) {
    for (const Dims &st : strides) {
      if (st[d0] == 0 || st[d1] == 0) continue;  // broadcast: no opinion
      if (st[d0] < st[d1]) return -1;
      if (st[d0] > st[d1]) return 1;
      if (shape[d0] > shape[d1]) return 1;  // equal strides: the smaller dim first
    }
    return 0;
  };
  for (int64_t i = 1; i < n; i++) {  // insertion sort with ambiguous comparisons
    int64_t d1 = i;
    for (int64_t d0 = i - 1; d0 >= 0; d0--) {
      const int cmp = should_swap(perm[d0], perm[d1]);
      if (cmp > 0) {
        std::swap(perm[d0], perm[d1]);
        d1 = d0;
      } else if (cmp < 0) {
        break;
      }
    }
  }
  return perm;
}

// Exactly row-major strides, size-1 dims included (is_contiguous() ignores
// those: a [N, C, 1, 1] channels_last tensor is "contiguous" too).
bool row_major(const at::Tensor &t) {
  int64_t step = 1;
  for (int64_t d = t.dim() - 1; d >= 0; d--) {
    if (t.stride(d) != step) return false;
    step *= std::max<int64_t>(t.size(d), 1);
  }
  return true;
}

// The strides TensorIterator gives an output of `shape`, or empty for
// row-major (no re-layout).
Dims pointwise_strides(c10::ArrayRef<c10::IValue> args, c10::IntArrayRef shape) {
  // Inputs all row-major give a row-major result (the common case: no work).
  bool any_strided = false;
  for (const c10::IValue &a : args) {
    any_strided = any_strided || (is_tpu_tensor(a) && !row_major(a.toTensor()));
  }
  if (!any_strided) return {};
  c10::SmallVector<const at::Tensor *, 4> ins;
  bool all_contiguous = true, all_cl = true, same_shape = true;
  for (const c10::IValue &a : args) {
    if (!is_tpu_tensor(a)) {
      // A host scalar tensor (Python's `x * 5`) is one of TensorIterator's
      // operands: of another shape, it turns the fast paths off.
      if (a.isTensor() && a.toTensor().defined()) same_shape = false;
      continue;
    }
    const at::Tensor &t = a.toTensor();
    ins.push_back(&t);
    all_contiguous = all_contiguous && t.is_contiguous();
    all_cl = all_cl && t.is_contiguous(c10::MemoryFormat::ChannelsLast);
    same_shape = same_shape && t.sizes() == shape;
  }
  if (ins.empty() || (all_contiguous && same_shape)) return {};
  if (same_shape && all_cl) {
    const auto cl = c10::get_channels_last_strides_2d(shape);
    return Dims(cl.begin(), cl.end());
  }
  if (same_shape && ins[0]->is_non_overlapping_and_dense()) {
    bool equal = true;
    for (const at::Tensor *t : ins) {
      equal = equal && t->is_non_overlapping_and_dense() && t->strides() == ins[0]->strides();
    }
    if (equal) return Dims(ins[0]->strides().begin(), ins[0]->strides().end());
  }
  c10::SmallVector<Dims, 4> strides;
  for (const at::Tensor *t : ins) {
    if (t->dim() <= static_cast<int64_t>(shape.size())) strides.push_back(broadcast_strides(*t, shape));
  }
  const Dims perm = iteration_order(strides, shape);
  Dims out(shape.size());
  int64_t step = 1;
  for (const int64_t d : perm) {
    out[d] = step;
    step *= std::max<int64_t>(shape[d], 1);
  }
  return out;
}

// Dense strides of `shape` with its dims in memory order `order` (outermost
// first).
Dims dense_in_order(c10::IntArrayRef shape, c10::IntArrayRef order) {
  Dims st(shape.size());
  int64_t step = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    st[*it] = step;
    step *= std::max<int64_t>(shape[*it], 1);
  }
  return st;
}

// A matrix (the last two dims) column-major, batched over the leading dims.
Dims column_major_strides(c10::IntArrayRef shape) {
  const int64_t n = static_cast<int64_t>(shape.size());
  if (n < 2) return {};
  Dims order;
  for (int64_t d = 0; d < n - 2; d++) order.push_back(d);
  order.push_back(n - 1);
  order.push_back(n - 2);
  return dense_in_order(shape, order);
}

// The flash attention kernel's result layouts (4-d only; see the file comment).
Dims attention_strides(c10::ArrayRef<c10::IValue> args, size_t index, c10::IntArrayRef shape) {
  static const int64_t kBLH[] = {0, 2, 1};
  if (index == 1) return shape.size() == 3 ? dense_in_order(shape, kBLH) : Dims{};  // logsumexp
  if (index != 0 || shape.size() != 4 || args.empty() || !is_tpu_tensor(args[0])) return {};
  const at::Tensor &q = args[0].toTensor();  // empty_like(query): its dim order, when dense
  if (q.dim() != 4 || !q.is_non_overlapping_and_dense() || row_major(q)) return {};
  Dims order = {0, 1, 2, 3};
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return q.stride(a) > q.stride(b); });
  return dense_in_order(shape, order);
}

}  // namespace

ResultLayout result_layout(const c10::OperatorHandle &op, const std::string &name) {
  if (follows_input_format(name)) return {LayoutKind::kInputFormat};
  if (name == "aten::cat" || name == "aten::cat.out") return {LayoutKind::kListFormat};
  if (name == "aten::_scaled_dot_product_flash_attention_for_cpu") return {LayoutKind::kAttention};
  if (name == "aten::_scaled_dot_product_flash_attention_for_cpu_backward")
    return {LayoutKind::kAttentionBackward};
  if (const uint32_t m = column_major_results(name)) return {LayoutKind::kColumnMajor, m};
  // hardswish, prelu's kernels and glu are TensorIterator ops without the tag
  if (op.hasTag(at::Tag::pointwise) || name.rfind("aten::native_dropout", 0) == 0 ||
      name.rfind("aten::bernoulli", 0) == 0 || name.rfind("aten::hardswish", 0) == 0 ||
      name.rfind("aten::_prelu_kernel", 0) == 0 || name.rfind("aten::glu", 0) == 0)
    return {LayoutKind::kPointwise};
  return {};
}

Dims result_strides(ResultLayout how, c10::ArrayRef<c10::IValue> inputs, size_t index,
                    c10::IntArrayRef shape) {
  static const int64_t kBLHE[] = {0, 2, 1, 3};
  switch (how.kind) {
    case LayoutKind::kAttention:
      return attention_strides(inputs, index, shape);
    case LayoutKind::kAttentionBackward:
      return shape.size() == 4 ? dense_in_order(shape, kBLHE) : Dims{};
    case LayoutKind::kInputFormat:
      return format_strides(inputs, shape);
    case LayoutKind::kListFormat:
      return list_format_strides(inputs, shape);
    case LayoutKind::kPointwise:
      return shape.size() >= 2 ? pointwise_strides(inputs, shape) : Dims{};
    case LayoutKind::kColumnMajor:
      return index < 32 && (how.matrices >> index & 1) ? column_major_strides(shape) : Dims{};
    case LayoutKind::kContiguous:
      break;
  }
  return {};
}

void lay_out_results(ResultLayout how, c10::ArrayRef<c10::IValue> inputs,
                     c10::SmallVectorImpl<at::Tensor> &results) {
  for (size_t i = 0; i < results.size(); i++) {
    at::Tensor &r = results[i];
    const Dims st = result_strides(how, inputs, i, r.sizes());
    if (st.empty() || r.strides() == c10::IntArrayRef(st)) continue;
    at::Tensor laid = at::empty_strided(r.sizes(), st, r.options());
    laid.copy_(r);
    r = std::move(laid);
  }
}

}  // namespace torchtpu
