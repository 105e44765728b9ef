"""nonzero, masked_select, unique, repeat_interleave, one_hot and bincount on "tpu":
ops whose result's shape is the data's.

A compiled program has static shapes, so the core has no rule for these and
they used to run on the CPU (the tensor copied to the host and back). Here
they run on the device from ops the core lowers. As on CUDA, the count of
selected elements is read to the host (one synchronisation; the result's
shape depends on it). The positions come from nonzero_static, which the core
lowers, with `size` the count: a program per (shape, count), as every op on
the result compiles per its shape anyway. (A power-of-two bucket and a view
of its first rows would compile fewer selections, but the result would then
not own its storage exactly, and nested tensors, built from masked_select's
buffer, read the storage's size.)

unique (torch.unique without dim: _unique2) sorts the flattened input,
marks where each run of equal values starts (NaNs each start one, as on the
CPU) and takes those; unique_consecutive marks runs in place. The inverse is
the running count of starts (scattered back through the sort's order), the
counts the gaps between starts. unique over a dim, and complex inputs, stay
on the CPU.

Registered under PrivateUse1, below autograd: masked_select keeps PyTorch's
derivative. Tensors on other devices (a CPU mask) take PyTorch's CPU kernel,
as the boxed CPU fallback did.
"""
import torch

_LIB = None


def _count(mask):
    """The number of True elements of bool `mask`, read to the host (the one
    synchronisation)."""
    return int(torch.count_nonzero(mask)) if mask.numel() else 0


def nonzero(self):
    shape = self.shape
    mask = self != 0  # bool for every dtype (complex ones too)
    count = _count(mask)
    # PyTorch's CPU and CUDA kernels return the [count, ndim] positions as
    # the transpose of a contiguous [ndim, count] tensor, so that a row of
    # nonzero(x).t() is contiguous (sparse compressed conversions take their
    # plain indices that way, and check it); so does this.
    if count == 0 or not shape:
        return self.new_empty((len(shape), count), dtype=torch.long).t()
    pos = torch.nonzero_static(mask, size=count)
    return self.new_empty((len(shape), count), dtype=torch.long).copy_(pos.t()).t()


def nonzero_out(self, *, out):
    _check_no_overlap(out, self)
    if out.dtype != torch.long:
        raise RuntimeError("nonzero: Expected out tensor to have scalar type Long but got "
                           f"scalar type{_aten_name(out.dtype)}")
    r = nonzero(self)
    out.resize_(r.shape)
    return out.copy_(r)


def masked_select(self, mask):
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    if self.device != mask.device:
        return torch.ops.aten.masked_select(self.cpu(), mask.cpu()).to(self.device)
    m, src = torch.broadcast_tensors(mask, self)  # in ATen's order (its size error names them so)
    count = _count(m)
    if count == 0:
        return self.new_empty((0,))
    pos = torch.nonzero_static(m.reshape(-1), size=count)[:, 0]
    return src.reshape(-1).index_select(0, pos)


def masked_select_out(self, mask, *, out):
    _check_no_overlap(out, self, mask)
    if out.dtype != self.dtype:
        raise RuntimeError("masked_select(): self and result must have the same scalar type")
    r = masked_select(self, mask)
    out.resize_(r.shape)
    return out.copy_(r)


def _on_cpu(op, self, *args):
    """op on a host copy of self, results moved back (the CPU fallback's way)."""
    return tuple(r.to(self.device) for r in op(self.cpu(), *args))


def _runs(vals):
    """The bool mask of where each run of equal values of 1-D `vals` starts."""
    if vals.numel() < 2:
        return torch.ones_like(vals, dtype=torch.bool)
    head = torch.ones(1, dtype=torch.bool, device=vals.device)
    return torch.cat([head, vals[1:] != vals[:-1]])


def _grouped(vals, starts, shape, return_inverse, return_counts, order=None):
    """(values, inverse, counts) of the runs of 1-D `vals` that `starts` marks;
    `order` maps vals' positions back to the input's (a sort's indices)."""
    n, count = vals.numel(), _count(starts)
    pos = torch.nonzero_static(starts, size=count)[:, 0]
    empty = vals.new_empty((0,), dtype=torch.long)
    inverse = counts = empty
    if return_inverse:
        group = starts.long().cumsum(0) - 1
        if order is not None:
            group = torch.empty_like(group).scatter_(0, order, group)
        inverse = group.reshape(shape)
    if return_counts:
        counts = torch.cat([pos[1:], pos.new_full((1,), n)]) - pos
    return vals.index_select(0, pos), inverse, counts


def _empty_unique(self, return_inverse):
    inverse = self.new_empty(self.shape if return_inverse else (0,), dtype=torch.long)
    return self.new_empty((0,)), inverse, self.new_empty((0,), dtype=torch.long)


def unique2(self, sorted=True, return_inverse=False, return_counts=False):
    # The CPU returns sorted values whatever `sorted` says; so does this.
    if self.is_complex():
        return _on_cpu(torch.ops.aten._unique2, self, sorted, return_inverse, return_counts)
    if self.numel() == 0:
        return _empty_unique(self, return_inverse)
    vals, order = self.reshape(-1).sort(stable=True)
    return _grouped(vals, _runs(vals), self.shape, return_inverse, return_counts, order)


def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    if dim is not None or self.is_complex():
        return _on_cpu(torch.ops.aten.unique_consecutive, self, return_inverse,
                       return_counts, dim)
    if self.numel() == 0:
        return _empty_unique(self, return_inverse)
    flat = self.reshape(-1)
    return _grouped(flat, _runs(flat), self.shape, return_inverse, return_counts)


def repeat_interleave(repeats, output_size=None):
    """repeat_interleave.Tensor: each index i repeated repeats[i] times (the
    index list torch.repeat_interleave(x, repeats, dim) selects with). The
    total and the sign check are read in one synchronisation (the CPU checks
    both, also when output_size is given); the positions are a searchsorted
    of the running total."""
    if repeats.dtype not in (torch.int32, torch.int64):
        raise NotImplementedError(
            f'"repeat_interleave_cpu" not implemented for \'{_aten_name(repeats.dtype)}\'')
    if repeats.dim() != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.numel() == 0:
        return torch.empty_like(repeats, memory_format=torch.contiguous_format)
    ends = repeats.cumsum(0)  # int64
    total, negative = torch.stack([ends[-1], (repeats < 0).any().long()]).tolist()
    if output_size is not None and output_size != total:
        raise RuntimeError("allocated size does not match required size")
    if negative:
        raise RuntimeError("repeats can not be negative")
    if total == 0:
        return repeats.new_empty((0,))
    pos = torch.arange(total, device=repeats.device)
    return torch.searchsorted(ends, pos, right=True).to(repeats.dtype)


def one_hot(self, num_classes=-1):
    """ATen's one_hot with the CPU's checks. ATen skips them for PrivateUse1
    (CUDA reports bad classes by a device assert), which left a bad class a
    deferred scatter error; the CPU and PyTorch's tests raise at the call.
    Without num_classes the result's shape is the data's, so the one
    synchronisation that reads the largest class also reads the smallest."""
    if self.dtype != torch.long:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    shape = tuple(self.shape)
    if self.numel() == 0:
        if num_classes <= 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        return self.new_zeros(shape + (num_classes,))
    lo, hi = torch.stack(torch.aminmax(self)).tolist()
    if lo < 0:
        raise RuntimeError("Class values must be non-negative.")
    if num_classes == -1:
        num_classes = hi + 1
    elif num_classes <= hi:
        raise RuntimeError("Class values must be smaller than num_classes.")
    classes = torch.arange(num_classes, device=self.device)
    return (self.unsqueeze(-1) == classes).long()


def bincount(self, weights=None, minlength=0):
    """The CPU kernel's checks and dtypes (int64 counts; float32 sums for
    float32 weights, float64 for others; an empty input gives int64 zeros);
    the number of bins, max + 1 or minlength, is read to the host with the
    smallest value (one synchronisation), then a scatter_add counts."""
    if self.dtype.is_floating_point or self.dtype.is_complex or self.dtype == torch.bool:
        raise NotImplementedError(
            f'"bincount_cpu" not implemented for \'{_aten_name(self.dtype)}\'')
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if self.dim() == 1 and self.numel() == 0:
        return self.new_zeros((minlength,), dtype=torch.long)
    if self.dim() != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != self.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    lo, hi = torch.stack(torch.aminmax(self)).tolist()
    if lo < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is None:
        dtype, src = torch.long, torch.ones_like(self, dtype=torch.long)
    else:
        dtype = torch.float32 if weights.dtype == torch.float32 else torch.float64
        src = weights.to(device=self.device, dtype=dtype)
    bins = self.new_zeros((max(hi + 1, minlength),), dtype=dtype)
    return bins.scatter_add_(0, self.long(), src)


def _check_no_overlap(out, *inputs):
    """ATen's assert_no_overlap for contiguous tensors: `out` may not share memory
    with an input (what the boxed path checks for the other ops)."""
    def span(t):
        start = t.storage_offset() * t.element_size()
        return start, start + t.numel() * t.element_size()
    if not out.is_contiguous() or out.numel() == 0:
        return
    for t in inputs:
        if (t.device == out.device and t.numel() and t.is_contiguous()
                and t.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()):
            (a, b), (c, d) = span(out), span(t)
            if a < d and c < b:
                raise RuntimeError(
                    "unsupported operation: some elements of the input tensor and the written-to "
                    "tensor refer to a single memory location. Please clone() the tensor before "
                    "performing the operation.")


def _aten_name(dtype):
    """PyTorch's ScalarType name ("Float" for torch.float32) as its messages print it."""
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
            torch.bfloat16: "BFloat16", torch.int32: "Int", torch.int16: "Short",
            torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool"}.get(dtype, str(dtype))


def install():
    """Registers the kernels for "tpu" (once; idempotent)."""
    global _LIB
    if _LIB is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("nonzero", nonzero, "PrivateUse1")
    lib.impl("nonzero.out", nonzero_out, "PrivateUse1")
    lib.impl("masked_select", masked_select, "PrivateUse1")
    lib.impl("masked_select.out", masked_select_out, "PrivateUse1")
    lib.impl("_unique2", unique2, "PrivateUse1")
    lib.impl("unique_consecutive", unique_consecutive, "PrivateUse1")
    lib.impl("repeat_interleave.Tensor", repeat_interleave, "PrivateUse1")
    lib.impl("one_hot", one_hot, "PrivateUse1")
    lib.impl("bincount", bincount, "PrivateUse1")
    _LIB = lib
