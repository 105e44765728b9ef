"""embedding_bag's backward on "tpu", from ops the core lowers.

The forward (_embedding_bag) is a lowering rule of the core
(core/src/lower/misc.c); ATen's backward kernels are CPU and CUDA only, so
training an nn.EmbeddingBag used to send every gradient through the CPU
fallback (the tensors copied to the host and back each step). Here:

- the weight's gradient (_embedding_bag_backward, dense): for sum and mean
  each index's row is its bag's gradient (divided by the bag's size for
  mean, times its per-sample weight); embedding_dense_backward, a rule of
  the core, then drops padding_idx rows, applies scale_grad_by_freq and
  scatter-adds them. For max, each (bag, feature) gradient goes to the row
  that was the max (maximum_indices; -1 for an empty bag goes nowhere).
- the per-sample weights' gradient: the dot of each index's bag gradient
  with its weight row (0 at padding_idx), as ATen's kernel computes it.

sparse=True gradients are ATen's composition (_embedding_bag_sparse_backward),
a sparse COO tensor on tpu (torchtpu/_sparse.py, docs/sparse.md).
"""
import torch

_LIB = None
_SUM, _MEAN, _MAX = 0, 1, 2


def _max_backward(grad, maximum_indices, num_weights):
    bags, dim = grad.shape
    valid = maximum_indices >= 0
    cols = torch.arange(dim, device=grad.device).expand(bags, dim)
    # an empty bag's -1 goes to one slot past the end, dropped after
    flat = torch.where(valid, maximum_indices.long() * dim + cols, num_weights * dim)
    out = grad.new_zeros(num_weights * dim + 1)
    out.scatter_add_(0, flat.reshape(-1), grad.reshape(-1))
    return out[:-1].reshape(num_weights, dim)


def embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                 num_weights, scale_grad_by_freq, mode, per_sample_weights,
                                 padding_idx=-1):
    if mode == _MAX:
        return _max_backward(grad, maximum_indices, num_weights)
    bag = offset2bag.long()
    rows = grad.index_select(0, bag)
    if mode == _MEAN:
        rows = rows / bag_size.index_select(0, bag).to(rows.dtype).clamp_min(1).unsqueeze(1)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.to(rows.dtype).unsqueeze(1)
    return torch.ops.aten.embedding_dense_backward(rows, indices, num_weights, padding_idx,
                                                   scale_grad_by_freq)


def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
                           num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights,
                           padding_idx=-1):
    if sparse:  # ATen's composition: a sparse COO gradient (torchtpu/_sparse.py)
        if indices.numel() and offset2bag.numel() == 0:  # the forward's sum fast path
            pos = torch.arange(indices.numel(), device=indices.device, dtype=offsets.dtype)
            offset2bag = torch.searchsorted(offsets, pos, right=True) - 1
        return torch.ops.aten._embedding_bag_sparse_backward(
            grad, indices, offsets, offset2bag, bag_size, num_weights, scale_grad_by_freq,
            mode, per_sample_weights, padding_idx)
    return embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                        num_weights, scale_grad_by_freq, mode,
                                        per_sample_weights, padding_idx)


def per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
                                padding_idx=-1):
    if mode != _SUM:
        raise RuntimeError("embedding_bag_backward: per_sample_weights only supported for "
                           "mode='sum'")
    acc = torch.promote_types(grad.dtype, torch.float32) if grad.dtype in (
        torch.float16, torch.bfloat16) else grad.dtype
    bag_grad = grad.index_select(0, offset2bag.long()).to(acc)
    rows = weight.index_select(0, indices.long()).to(acc)
    out = (bag_grad * rows).sum(1)
    if padding_idx >= 0:
        out = torch.where(indices == padding_idx, torch.zeros_like(out), out)
    return out.to(grad.dtype)


_KERNELS = {
    "_embedding_bag_backward": embedding_bag_backward,
    "_embedding_bag_dense_backward": embedding_bag_dense_backward,
    "_embedding_bag_per_sample_weights_backward": per_sample_weights_backward,
}


def install():
    """Registers the kernels for "tpu" (once; idempotent)."""
    global _LIB
    if _LIB is None:
        _LIB = torch.library.Library("aten", "IMPL")
        for name, fn in _KERNELS.items():
            _LIB.impl(name, fn, "PrivateUse1")
