"""Sparse COO and compressed (CSR/CSC/BSR/BSC) kernels on "tpu" that PyTorch
implements differently for CPU and CUDA, as compositions of dense tpu ops.

shim/sparse.cpp registers PyTorch's device-generic sparse kernels (the
constructors, _indices/_values/_nnz, _coalesced_, clone, copy_, unary
ufuncs, to_dense = zeros + add_, mm = addmm, ...). The kernels here are the
ones whose CPU version reads memory on the host and whose CUDA version is
CUDA code: coalesce, add, mul, addmm (sparse @ dense), bmm, index_select,
sampled_addmm, the sparse sum's backward, softmax, and the COO <-> CSR index
conversions. Each is a few dense ops (sort, index_add, index_select,
searchsorted, nonzero_static) that the core lowers, so they run as device
programs; the member tensors never leave the device.

Why Python and not C++ or lowering rules: every kernel here composes ops
that already have rules, and the sparse tensor is only a container of two
dense tensors; a per-op C++ kernel would be the same composition written
against ATen's C++ API, and a lowering rule cannot create the nnz-shaped
result. The cost is one Python call per sparse op (microseconds), beside
programs that each take as long.

Data-dependent sizes synchronise as torchtpu/_data_dependent.py's ops do:
coalesce, sparse * sparse and index_select read the count of their result's
non-zeros to the host (one read per call, like CUDA's coalesce); the rest
keep nnz from their inputs and never wait.
"""
import warnings

import torch

_LIB = None
aten = torch.ops.aten


# --- helpers -----------------------------------------------------------------------------

def _make(indices, values, shape, coalesced=False):
    """A COO tensor on indices' device, without the invariant checks (the
    indices come from valid ones)."""
    sd = indices.shape[0]
    # None leaves the flag to PyTorch (set for nnz < 2, as on the CPU)
    return aten._sparse_coo_tensor_with_dims_and_tensors(
        sd, values.dim() - 1, list(shape), indices, values, dtype=values.dtype,
        layout=torch.sparse_coo, device=values.device, is_coalesced=coalesced or None)


def _linear(indices, sizes):
    """Row-major position of each column of indices [sd, nnz] in sizes (int64)."""
    sd = indices.shape[0]
    if sd == 0:
        return indices.new_zeros((indices.shape[1],))
    lin = indices[0]
    for d in range(1, sd):
        lin = lin * sizes[d] + indices[d]
    return lin


def _count(mask):
    """The number of True elements of `mask`, read to the host (the one
    synchronisation)."""
    return int(torch.count_nonzero(mask)) if mask.numel() else 0


def _positions(mask, count):
    return torch.nonzero_static(mask, size=count)[:, 0]


def _acc_dtype(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _sizes(t):
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


# --- coalesce ----------------------------------------------------------------------------

def coalesce(self):
    """_coalesce: sorts the entries by position, sums duplicates (in sorted,
    stable order, as the CPU does) and keeps each position's first index."""
    sd, nnz = self.sparse_dim(), self._nnz()
    idx, val = self._indices(), self._values()
    if nnz < 2:
        return _make(idx.clone(), val.clone(), self.shape, True)
    lin, order = _linear(idx, self.shape[:sd]).sort(stable=True)
    starts = torch.cat([torch.ones(1, dtype=torch.bool, device=lin.device), lin[1:] != lin[:-1]])
    count = _count(starts)
    seg = starts.long().cumsum(0) - 1
    src = val.index_select(0, order)
    if val.dtype == torch.bool:
        out = val.new_zeros((count,) + val.shape[1:], dtype=torch.int64)
        out = out.index_add_(0, seg, src.long()).bool()
    else:
        out = val.new_zeros((count,) + val.shape[1:], dtype=_acc_dtype(val.dtype))
        out = out.index_add_(0, seg, src.to(out.dtype)).to(val.dtype)
    first = order.index_select(0, _positions(starts, count))
    return _make(idx.index_select(1, first), out, self.shape, True)


# --- add -----------------------------------------------------------------------------------

def _scatter_into_dense(dense, sparse, alpha):
    """dense + alpha * sparse as a new dense tensor of dense's dtype."""
    sd = sparse.sparse_dim()
    idx, val = sparse._indices(), sparse._values()
    flat = dense.reshape((-1,) + tuple(dense.shape[sd:]))
    src = val.to(dense.dtype)
    if alpha != 1:
        src = src * alpha
    return flat.index_add(0, _linear(idx, dense.shape[:sd]), src).view(dense.shape)


def add_out(self, other, alpha=1, *, out):
    if self.layout == torch.strided and other.layout == torch.sparse_coo:
        if self.shape != other.shape:
            raise RuntimeError(f"add: expected 'self' and 'other' to have same size, but self has "
                               f"size {list(self.shape)} while other has size "
                               f"{list(other.shape)} (FYI: dense-sparse addition does not "
                               f"currently support broadcasting)")
        dtype = torch.result_type(self, other)
        res = _scatter_into_dense(self.to(dtype), other, alpha)
        if out.layout != torch.strided:
            raise RuntimeError("add: expected 'out' to be a strided tensor for dense + sparse")
        if out is not self:
            out.resize_(res.shape)
        return out.copy_(res)
    if self.layout == torch.sparse_coo and other.layout == torch.strided:
        raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) instead.")
    if self.shape != other.shape:
        raise RuntimeError(f"add: expected sizes of 'self' and 'other' to match, but "
                           f"{list(self.shape)} != {list(other.shape)}")
    if self.sparse_dim() != other.sparse_dim():
        raise RuntimeError(f"add: expected 'self' and 'other' to have same sparse dimensions, "
                           f"but {self.sparse_dim()} != {other.sparse_dim()}")
    dtype = out.dtype
    a_val, b_val = self._values().to(dtype), other._values().to(dtype)
    if alpha != 1:
        b_val = b_val * alpha
    idx = torch.cat([self._indices(), other._indices()], 1)
    res = _make(idx, torch.cat([a_val, b_val]), self.shape)
    if self.is_coalesced() and other.is_coalesced() and res._nnz():
        res = coalesce(res)  # the CPU merges two coalesced operands into a coalesced sum
    out.copy_(res)
    return out


# --- mul -----------------------------------------------------------------------------------

def _intersect(a, b):
    """Coalesced a * b of two sparse tensors of one shape: the positions both hold."""
    a, b = a.coalesce(), b.coalesce()
    sd = a.sparse_dim()
    la, lb = _linear(a._indices(), a.shape[:sd]), _linear(b._indices(), b.shape[:sd])
    if la.numel() == 0 or lb.numel() == 0:
        dtype = torch.result_type(a, b)
        return _make(a._indices()[:, :0], a._values()[:0].to(dtype), a.shape, True)
    at = torch.searchsorted(lb, la).clamp_max(lb.numel() - 1)
    hit = lb.index_select(0, at) == la
    count = _count(hit)
    pos = _positions(hit, count)
    va = a._values().index_select(0, pos)
    vb = b._values().index_select(0, at.index_select(0, pos))
    return _make(a._indices().index_select(1, pos), va * vb, a.shape, True)


def _unravel(pos, sizes):
    """indices [len(sizes), n] of row-major positions pos in sizes."""
    rows = []
    for size in reversed(sizes):
        rows.append(pos % size)
        pos = pos // size
    return torch.stack(rows[::-1]) if rows else pos.new_zeros((0, pos.numel()))


def dense_to_sparse(self, sparse_dim):
    """_to_sparse.sparse_dim of a dense tensor: the positions (over the first
    sparse_dim dims) holding any non-zero, read with one count."""
    if not 0 <= sparse_dim <= self.dim():
        raise RuntimeError(f"sparse_dim argument must be in [0,{self.dim()}] range, but "
                           f"{sparse_dim} is given")
    lead = tuple(self.shape[:sparse_dim])
    n = 1
    for s in lead:
        n *= s
    flat = self.reshape((n,) + tuple(self.shape[sparse_dim:]))
    nz = flat != 0
    if nz.dim() > 1:
        nz = nz.reshape(n, -1).any(1)
    count = _count(nz)
    pos = _positions(nz, count)
    return _make(_unravel(pos, lead), flat.index_select(0, pos), self.shape, True)


def _dense_at(dense, sparse):
    """The rows of dense (broadcast to sparse's shape) at sparse's positions."""
    sd = sparse.sparse_dim()
    full = dense.expand(sparse.shape)
    flat = full.reshape((-1,) + tuple(sparse.shape[sd:]))
    return flat.index_select(0, _linear(sparse._indices(), sparse.shape[:sd]))


def mul_out(self, other, *, out):
    # a wrapped number (x * 2.0) reaches Python kernels as a Python number
    if not isinstance(self, torch.Tensor):
        self, other = other, self
    if not isinstance(other, torch.Tensor):
        other = torch.tensor(other, device=self.device)
    s_sparse, o_sparse = self.layout == torch.sparse_coo, other.layout == torch.sparse_coo
    if s_sparse and o_sparse:
        if self.shape != other.shape:
            raise RuntimeError(f"mul(sparse, sparse): expected sizes to match, but "
                               f"{list(self.shape)} != {list(other.shape)}")
        res = _intersect(self, other)
        if not (self.is_coalesced() and other.is_coalesced()):  # as the CPU flags it
            res = _make(res._indices(), res._values(), res.shape)
    else:
        sp, dn = (self, other) if s_sparse else (other, self)
        if dn.dim() == 0:
            vals = sp._values() * dn
        else:
            vals = sp._values() * _dense_at(dn, sp)
        res = _make(sp._indices(), vals, sp.shape, sp.is_coalesced())
    res = _make(res._indices(), res._values().to(out.dtype), res.shape, res.is_coalesced())
    out.copy_(res)
    return out


# --- sparse @ dense ------------------------------------------------------------------------

def _spmm(mat1, mat2, op):
    """mat1 [n, k] sparse COO @ mat2 [k, m] dense: each non-zero's row of mat2,
    scaled, added into its output row (index_add)."""
    if mat1.sparse_dim() != 2 or mat1.dense_dim() != 0:
        raise RuntimeError(f"{op}: expected first two dims to be sparse (indices has size 2 at "
                           f"first dim), but got {mat1.sparse_dim()} sparse dims")
    if mat2.dim() != 2:
        raise RuntimeError(f"{op}: Argument #3 (dense): Expected dim to be 2, got {mat2.dim()}")
    if mat2.shape[0] != mat1.shape[1]:
        raise RuntimeError(f"{op}: Argument #3 (dense): Expected dim 0 size {mat1.shape[1]}, got "
                           f"{mat2.shape[0]}")
    dtype = torch.promote_types(mat1.dtype, mat2.dtype)
    acc = _acc_dtype(dtype)
    idx, val = mat1._indices(), mat1._values()
    out = mat2.new_zeros((mat1.shape[0], mat2.shape[1]), dtype=acc)
    if val.numel() == 0:
        return out.to(dtype)
    rows = mat2.to(acc).index_select(0, idx[1]) * val.to(acc).unsqueeze(1)
    return out.index_add_(0, idx[0], rows).to(dtype)


def _addmm(self, mat1, mat2, beta, alpha, op="addmm"):
    prod = _spmm(mat1, mat2, op)
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod
    base = self.expand(prod.shape) if self.layout == torch.strided else self.to_dense()
    return base * beta + prod if beta != 1 else base + prod


def addmm(self, mat1, mat2, beta=1, alpha=1):
    return _addmm(self, mat1, mat2, beta, alpha)


def addmm_out(self, mat1, mat2, beta=1, alpha=1, *, out):
    res = _addmm(self, mat1, mat2, beta, alpha)
    out.resize_(res.shape)
    return out.copy_(res)


def addmm_(self, mat1, mat2, beta=1, alpha=1):
    return self.copy_(_addmm(self, mat1, mat2, beta, alpha))


def sspaddmm_out(self, mat1, mat2, beta=1, alpha=1, *, out):
    """beta * self + alpha * (mat1 @ mat2) as a sparse COO result: each
    non-zero (i, k) of mat1 gives row i's entries v * mat2[k, :]; summed with
    self's by coalesce (nothing dense of the result's size is built)."""
    if mat1.layout != torch.sparse_coo or mat2.layout != torch.strided:
        raise RuntimeError("sspaddmm: expected a sparse mat1 and a dense mat2")
    _spmm(mat1, mat2.new_zeros(mat2.shape[0], 0), "sspaddmm")  # the shape checks
    shape = (mat1.shape[0], mat2.shape[1])
    if beta == 0 and self.layout == torch.sparse_coo and self._nnz() == 0:
        self = _make(mat1._indices()[:, :0], mat1._values()[:0], shape)  # smm's placeholder
    if tuple(self.shape) != shape:
        raise RuntimeError(f"sspaddmm: Argument #1 (t): Expected dim 0 size {mat1.shape[0]} and "
                           f"dim 1 size {mat2.shape[1]}, got {_sizes(self)}")
    idx, val = mat1._indices(), mat1._values()
    m = mat2.shape[1]
    nnz = val.numel()
    rows = idx[0].unsqueeze(1).expand(nnz, m).reshape(-1)
    cols = torch.arange(m, device=mat2.device).unsqueeze(0).expand(nnz, m).reshape(-1)
    prod_idx = torch.stack([rows, cols])
    prod_val = (mat2.index_select(0, idx[1]) * val.unsqueeze(1)).reshape(-1) * alpha
    s_idx, s_val = self._indices(), self._values() * beta
    res = _make(torch.cat([s_idx, prod_idx], 1), torch.cat([s_val, prod_val.to(s_val.dtype)]),
                self.shape)
    return out.copy_(coalesce(res) if res._nnz() else res)


def bmm(self, mat2):
    """[b, n, k] sparse @ [b, k, m] dense: the batch folded into the rows."""
    if self.dim() != 3 or mat2.dim() != 3 or self.sparse_dim() != 3:
        raise RuntimeError(f"bmm_sparse: Expected 3-D tensors (sparse dims 3), got "
                           f"{_sizes(self)} and {_sizes(mat2)}")
    b, n, k = self.shape
    if mat2.shape[0] != b or mat2.shape[1] != k:
        raise RuntimeError(f"bmm_sparse: Expected self.size(0) == mat2.size(0) and "
                           f"self.size(2) == mat2.size(1), got {_sizes(self)} and {_sizes(mat2)}")
    idx = self._indices()
    flat = torch.stack([idx[0] * n + idx[1], idx[0] * k + idx[2]])
    m2 = _make(flat, self._values(), (b * n, b * k))
    return _spmm(m2, mat2.reshape(b * k, -1), "bmm").view(b, n, -1)


def bmm_out(self, mat2, *, out):
    res = bmm(self, mat2)
    out.resize_(res.shape)
    return out.copy_(res)


def sparse_sparse_matmul(self, other):
    """sparse @ sparse (torch.sparse.mm of two COO matrices): self times
    other's dense form, back to a coalesced COO result."""
    dense = _spmm(self, other.to_dense(), "sparse_sparse_matmul")
    return aten._to_sparse.sparse_dim(dense, 2).coalesce()


# --- index_select ------------------------------------------------------------------------

def index_select(self, dim, index):
    nd = self.dim()
    if not -nd <= dim < nd:
        raise IndexError(f"index_select(): Dimension out of range (expected to be in range of "
                         f"[{-nd}, {nd - 1}], but got {dim})")
    dim = dim % nd
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    index = index.reshape(-1).long()
    size = self.shape[dim]
    if index.numel():
        lo, hi = torch.stack(torch.aminmax(index)).tolist()
        bad = hi if hi >= size else lo if lo < -size else None
        if bad is not None:
            raise IndexError(f"index_select(): index contains {bad} that is out of range for "
                             f"tensor of size {list(self.shape)} at dimension {dim}")
        index = torch.where(index < 0, index + size, index)
    sd = self.sparse_dim()
    idx, val = self._indices(), self._values()
    shape = list(self.shape)
    shape[dim] = index.numel()
    if dim >= sd:  # a dense dimension: select in the values
        return _make(idx, val.index_select(dim - sd + 1, index), shape, self.is_coalesced())
    # every (non-zero, index position) pair whose coordinate matches
    hit = idx[dim].unsqueeze(1) == index.unsqueeze(0)  # [nnz, len(index)]
    count = _count(hit)
    pairs = torch.nonzero_static(hit, size=count)
    nz, j = pairs[:, 0], pairs[:, 1]
    new_idx = idx.index_select(1, nz).clone()
    new_idx[dim] = j
    return _make(new_idx, val.index_select(0, nz), shape)


# --- sums and softmax --------------------------------------------------------------------

def sparse_sum_backward(grad, self, dim):
    """Gradient of torch.sparse.sum(self, dim) at self's (coalesced) entries:
    each entry takes the gradient at its position with the summed dims
    dropped; a sparse result shaped as self."""
    sd = self.sparse_dim()
    nd = self.dim()
    dims = sorted({d % nd for d in dim})
    sparse_dims = [d for d in dims if d < sd]
    dense_dims = [d - sd + 1 for d in dims if d >= sd]
    idx, val = self._indices(), self._values()
    kept = [d for d in range(sd) if d not in sparse_dims]
    if grad.layout == torch.sparse_coo:  # some sparse dims kept
        g = grad.coalesce().to_dense()
    else:
        g = grad
    # g's leading dims are the kept sparse dims, then val's dense dims minus dense_dims
    if kept:
        ksizes = [self.shape[d] for d in kept]
        lin = _linear(idx[kept], ksizes)
        rows = g.reshape((-1,) + tuple(g.shape[len(kept):])).index_select(0, lin)
    else:
        rows = g.unsqueeze(0).expand((val.shape[0],) + tuple(g.shape))
    for d in dense_dims:
        rows = rows.unsqueeze(d)
    rows = rows.expand(val.shape).to(val.dtype)
    return _make(idx, rows.contiguous(), self.shape, self.is_coalesced())


def _softmax(self, dim, half_to_float, log):
    """softmax over dim of a COO tensor: over the entries that share every
    other sparse coordinate (missing entries are -inf, as on the CPU)."""
    if half_to_float:
        raise RuntimeError("softmax with half to float conversion is not supported on tpu")
    x = self.coalesce()
    nd = x.dim()
    dim = dim % nd
    sd = x.sparse_dim()
    idx, val = x._indices(), x._values()
    if val.numel() == 0:
        return _make(idx, val.clone(), x.shape, True)
    if dim >= sd:  # a dense dim: the values' own softmax
        f = torch.log_softmax if log else torch.softmax
        return _make(idx, f(val, dim - sd + 1), x.shape, True)
    others = [d for d in range(sd) if d != dim]
    group = _linear(idx[others], [x.shape[d] for d in others]) if others else \
        idx.new_zeros(idx.shape[1])
    ngroups = 1
    for d in others:
        ngroups *= x.shape[d]
    tail = tuple(val.shape[1:])
    mx = val.new_full((ngroups,) + tail, float("-inf"))
    mx = mx.index_reduce(0, group, val, "amax")
    e = (val - mx.index_select(0, group)).exp()
    den = val.new_zeros((ngroups,) + tail).index_add_(0, group, e)
    dsel = den.index_select(0, group)
    out = (val - mx.index_select(0, group) - dsel.log()) if log else e / dsel
    return _make(idx, out, x.shape, True)


def softmax(self, dim, half_to_float):
    return _softmax(self, dim, half_to_float, False)


def log_softmax(self, dim, half_to_float):
    return _softmax(self, dim, half_to_float, True)


def _group_sum(x, values, dim):
    sd = x.sparse_dim()
    idx = x._indices()
    others = [d for d in range(sd) if d != dim]
    group = _linear(idx[others], [x.shape[d] for d in others]) if others else \
        idx.new_zeros(idx.shape[1])
    n = 1
    for d in others:
        n *= x.shape[d]
    tot = values.new_zeros((n,) + tuple(values.shape[1:])).index_add_(0, group, values)
    return tot.index_select(0, group)


def _softmax_backward(grad_output, output, dim, log):
    """softmax's (log=False) or log_softmax's backward over the output's
    values: the sum over `dim` is over a dense dim of the values, or over
    the entries sharing the other sparse indices (_group_sum)."""
    out = output.coalesce()
    g = grad_output.coalesce()
    dim = dim % out.dim()
    gv = g._values() if g._nnz() == out._nnz() else _dense_at(g.to_dense(), out)
    ov = out._values()
    summed = gv if log else gv * ov
    if dim >= out.sparse_dim():
        total = summed.sum(dim - out.sparse_dim() + 1, keepdim=True)
    else:
        total = _group_sum(out, summed, dim)
    res = gv - ov.exp() * total if log else ov * (gv - total)
    return _make(out._indices(), res, out.shape, True)


def softmax_backward(grad_output, output, dim, input_dtype):
    return _softmax_backward(grad_output, output, dim, log=False)


def log_softmax_backward(grad_output, output, dim, input_dtype):
    return _softmax_backward(grad_output, output, dim, log=True)


# --- compressed layouts ------------------------------------------------------------------

def coo_to_csr(input, size, *, out_int32=False):
    """_convert_indices_from_coo_to_csr: crow[i] = how many sorted row
    indices are below i (a searchsorted; no synchronisation)."""
    dtype = torch.int32 if out_int32 else torch.int64
    bounds = torch.arange(size + 1, device=input.device, dtype=input.dtype)
    return torch.searchsorted(input.contiguous(), bounds).to(dtype)


def coo_to_csr_out(input, size, *, out_int32=False, out):
    res = coo_to_csr(input, size, out_int32=out_int32)
    out.resize_(res.shape)
    return out.copy_(res)


def csr_to_coo(crow_indices, col_indices, *, out_int32=False, transpose=False):
    """_convert_indices_from_csr_to_coo: each entry's row is the number of row
    starts at or before it (nnz is col_indices' length: no synchronisation)."""
    dtype = torch.int32 if out_int32 else torch.int64
    batch = crow_indices.shape[:-1]
    if len(batch):
        raise RuntimeError("_convert_indices_from_csr_to_coo: batched compressed indices are "
                           "not supported on tpu")
    nnz = col_indices.shape[-1]
    pos = torch.arange(nnz, device=col_indices.device, dtype=crow_indices.dtype)
    rows = torch.searchsorted(crow_indices[1:].contiguous(), pos, right=True)
    res = torch.stack([rows.to(dtype), col_indices.to(dtype)])
    return res.flip(0) if transpose else res


def csr_to_coo_out(crow_indices, col_indices, *, out_int32=False, transpose=False, out):
    res = csr_to_coo(crow_indices, col_indices, out_int32=out_int32, transpose=transpose)
    out.resize_(res.shape)
    return out.copy_(res)


_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


def _as_coo(t):
    return t.to_sparse() if t.layout in _COMPRESSED else t


def _as_layout(res, like):
    """res (dense or COO) in like's compressed layout (with its blocksize)."""
    lay = like.layout
    if lay == torch.sparse_csr:
        return res.to_sparse_csr()
    if lay == torch.sparse_csc:
        return res.to_sparse_csc()
    blocksize = like.values().shape[-2:] if like.values().dim() >= 3 else None
    dense = res.to_dense() if res.layout != torch.strided else res
    return dense.to_sparse(layout=lay, blocksize=tuple(blocksize))


def compressed_addmm(self, mat1, mat2, beta=1, alpha=1):
    m1c, m2c = mat1.layout in _COMPRESSED, mat2.layout in _COMPRESSED
    if m1c and not m2c:
        prod = _spmm(_as_coo(mat1), mat2, "addmm")
    elif m2c and not m1c:
        prod = _spmm(_as_coo(mat2).t().coalesce(), mat1.t(), "addmm").t()
    else:
        prod = _spmm(_as_coo(mat1), mat2.to_dense(), "addmm")
    if alpha != 1:
        prod = prod * alpha
    if beta != 0:
        base = self.to_dense() if self.layout != torch.strided else self.expand(prod.shape)
        prod = base * beta + prod if beta != 1 else base + prod
    return prod


def compressed_addmm_out(self, mat1, mat2, beta=1, alpha=1, *, out):
    res = compressed_addmm(self, mat1, mat2, beta, alpha)
    if out.layout in _COMPRESSED:
        res = _as_layout(res, out)
        out.resize_as_sparse_(res)
        return out.copy_(res)
    out.resize_(res.shape)
    return out.copy_(res)


def compressed_addmv_out(self, mat, vec, beta=1, alpha=1, *, out):
    res = compressed_addmm(self.unsqueeze(1) if self.dim() == 1 else self, mat,
                           vec.unsqueeze(1), beta, alpha).squeeze(1)
    out.resize_(res.shape)
    return out.copy_(res)


def compressed_add_out(self, other, alpha=1, *, out):
    if self.layout == torch.strided:
        res = self.to(out.dtype) + _as_coo(other).to_dense().to(out.dtype) * alpha
        out.resize_(res.shape)
        return out.copy_(res)
    if self.layout != other.layout:
        raise RuntimeError(f"add: expected operands of one layout, got {self.layout} and "
                           f"{other.layout}")
    res = aten.add.Tensor(_as_coo(self).coalesce(), _as_coo(other).coalesce(), alpha=alpha)
    res = _as_layout(res.coalesce().to(out.dtype), self)
    out.resize_as_sparse_(res)  # copy_ needs the same nnz
    return out.copy_(res)


def sampled_addmm(self, mat1, mat2, beta=1, alpha=1):
    """self's pattern (CSR) keeps beta*self + alpha*(mat1 @ mat2) at its
    entries: each entry a dot of mat1's row and mat2's column."""
    if self.layout != torch.sparse_csr:
        raise RuntimeError(f"sampled_addmm: Expected self to be a sparse CSR tensor, got "
                           f"{self.layout}")
    if mat1.dim() != 2 or mat2.dim() != 2 or self.dim() != 2:
        raise RuntimeError("sampled_addmm: batched inputs are not supported on tpu; expected "
                           f"2-D, got {_sizes(self)}, {_sizes(mat1)}, {_sizes(mat2)}")
    if mat1.shape[1] != mat2.shape[0] or (mat1.shape[0], mat2.shape[1]) != tuple(self.shape):
        raise RuntimeError(f"sampled_addmm: shapes don't match: self {_sizes(self)}, mat1 "
                           f"{_sizes(mat1)}, mat2 {_sizes(mat2)}")
    crow, col = self.crow_indices(), self.col_indices()
    rc = csr_to_coo(crow, col)
    dots = (mat1.index_select(0, rc[0]) * mat2.t().index_select(0, rc[1])).sum(-1)
    vals = alpha * dots
    if beta != 0:
        vals = vals + beta * self.values()
    return torch.sparse_csr_tensor(crow.clone(), col.clone(), vals.to(self.dtype), self.shape,
                                   device=self.device)


def sampled_addmm_out(self, mat1, mat2, beta=1, alpha=1, *, out):
    res = sampled_addmm(self, mat1, mat2, beta, alpha)
    out.resize_as_sparse_(res)
    return out.copy_(res)


def _csr_parts(self, other, op):
    if self.layout != torch.sparse_csr or self.dim() != 2 or other.dim() != 2:
        raise RuntimeError(f"{op}: expected a 2-D sparse CSR self and a 2-D dense other, got "
                           f"{self.layout} {_sizes(self)} and {_sizes(other)}")
    if self.shape[1] != other.shape[0]:
        raise RuntimeError(f"{op}: self {_sizes(self)} and other {_sizes(other)} can't be "
                           f"multiplied")
    crow, col = self.crow_indices(), self.col_indices()
    row = csr_to_coo(crow, col)[0]
    counts = (crow[1:] - crow[:-1]).unsqueeze(1)
    return crow, col.long(), row, self.values(), counts


def sparse_mm_reduce(self, other, reduce):
    """_sparse_mm_reduce_impl (torch.sparse.mm(csr, dense, reduce)): each row's
    products reduced by sum, mean, amax or amin (0 for an empty row); for
    amax/amin under autograd, arg_out holds the position (into values) each
    result came from, nnz where none, as the CPU kernel does."""
    _, col, row, val, counts = _csr_parts(self, other, "sparse_mm_reduce")
    n, m, nnz = self.shape[0], other.shape[1], val.shape[0]
    prod = val.unsqueeze(1) * other.index_select(0, col)
    arg = torch.empty(0, dtype=torch.long, device=other.device)
    if reduce in ("sum", "mean"):
        out = other.new_zeros((n, m)).index_add_(0, row, prod)
        if reduce == "mean":
            out = out / counts.clamp_min(1).to(out.dtype)
        return out, arg
    if reduce not in ("amax", "amin"):
        raise RuntimeError(f"sparse_mm_reduce: reduce argument must be either sum, mean, amax "
                           f"or amin, got {reduce}")
    out = other.new_zeros((n, m)).index_reduce_(0, row, prod, reduce, include_self=False)
    if self.requires_grad or other.requires_grad:
        hit = prod == out.index_select(0, row)
        pos = torch.arange(nnz, device=other.device).unsqueeze(1).expand(nnz, m)
        pos = torch.where(hit, pos, nnz)
        arg = torch.full((n, m), nnz, dtype=torch.long, device=other.device)
        arg = arg.index_reduce_(0, row, pos, "amin", include_self=True)
    return out, arg


def sparse_mm_reduce_backward(self, grad_out, weight, reduce, arg_out, output_mask):
    crow, col, row, val, counts = _csr_parts(self, weight, "sparse_mm_reduce_backward")
    nnz, m = val.shape[0], weight.shape[1]
    g_self = g_other = None
    if reduce in ("sum", "mean"):
        g = grad_out.index_select(0, row)
        if reduce == "mean":
            g = g / counts.clamp_min(1).to(g.dtype).index_select(0, row)
        if output_mask[0]:
            gv = (g * weight.index_select(0, col)).sum(1)
        if output_mask[1]:
            g_other = torch.zeros_like(weight).index_add_(0, col, g * val.unsqueeze(1))
    else:
        valid = arg_out < nnz
        src = torch.where(valid, arg_out, 0)  # [n, m] positions into values
        g = torch.where(valid, grad_out, 0)
        cidx = col.index_select(0, src.reshape(-1)).view_as(src)  # weight rows used
        if output_mask[0]:
            gv = val.new_zeros(nnz).index_add_(0, src.reshape(-1),
                                               (g * weight.gather(0, cidx)).reshape(-1))
        if output_mask[1]:
            flat = cidx * m + torch.arange(m, device=weight.device)
            contrib = g * val.index_select(0, src.reshape(-1)).view_as(src)
            g_other = weight.new_zeros(weight.numel()).index_add_(
                0, flat.reshape(-1), contrib.reshape(-1)).view_as(weight)
    if output_mask[0]:
        g_self = torch.sparse_csr_tensor(crow.clone(), self.col_indices().clone(), gv,
                                         self.shape, device=self.device)
    return g_self, g_other


def _csr_reduce(self, dim, keepdim, dtype, how):
    """_sparse_csr_sum / _sparse_csr_prod: the reduction of each row's
    (dim 1), column's (dim 0) or all (both) specified values, as a CSR result
    whose pattern is the rows/columns that have any (the CPU's); one
    synchronisation reads how many."""
    op = f"_sparse_csr_{how}"
    if self.layout != torch.sparse_csr or self.dim() != 2:
        raise RuntimeError(f"{op}: expected a 2-D sparse CSR tensor, got {self.layout} "
                           f"{_sizes(self)}")
    dims = sorted({d % 2 for d in dim})
    if not keepdim:
        raise RuntimeError(f"{op}: reduction operations on CSR tensors with keepdim=False is "
                           f"unsupported")
    crow, col = self.crow_indices(), self.col_indices()
    row = csr_to_coo(crow, col)[0]
    val = self.values().to(dtype) if dtype is not None else self.values()
    if val.dtype in (torch.bool,) or not (val.dtype.is_floating_point or val.dtype.is_complex):
        val = val.to(torch.int64) if dtype is None else val
    n, m = self.shape
    group, ngroups = {(1,): (row, n), (0,): (col.long(), m),
                      (0, 1): (torch.zeros_like(row), 1)}[tuple(dims)]
    if how == "sum":
        red = val.new_zeros(ngroups).index_add_(0, group, val)
    else:
        red = val.new_ones(ngroups).index_reduce_(0, group, val, "prod", include_self=False)
    has = val.new_zeros(ngroups, dtype=torch.int64).index_add_(
        0, group, torch.ones_like(group)) > 0
    count = _count(has)
    pos = _positions(has, count)
    vals = red.index_select(0, pos)
    dev, itype = crow.device, crow.dtype
    zero = torch.zeros(1, dtype=itype, device=dev)
    if dims == [1]:  # [n, 1]: one entry per row that has any
        new_crow = torch.cat([zero, has.to(itype).cumsum(0)])
        new_col = torch.zeros(count, dtype=itype, device=dev)
        shape = (n, 1)
    else:  # [1, m] or [1, 1]
        new_crow = torch.cat([zero, torch.full((1,), count, dtype=itype, device=dev)])
        new_col = pos.to(itype)
        shape = (1, m) if dims == [0] else (1, 1)
    return torch.sparse_csr_tensor(new_crow, new_col, vals, shape, device=dev)


def csr_sum(self, dim, keepdim=False, *, dtype=None):
    return _csr_reduce(self, dim, keepdim, dtype, "sum")


def csr_prod(self, dim, keepdim=False, *, dtype=None):
    return _csr_reduce(self, dim, keepdim, dtype, "prod")


# --- registration --------------------------------------------------------------------------

_COO = {
    "_coalesce": coalesce,
    "add.out": add_out,
    "mul.out": mul_out,
    "addmm": addmm,
    "addmm.out": addmm_out,
    "addmm_": addmm_,
    "sspaddmm.out": sspaddmm_out,
    "bmm": bmm,
    "bmm.out": bmm_out,
    "_sparse_sparse_matmul": sparse_sparse_matmul,
    "index_select": index_select,
    "_sparse_sum_backward": sparse_sum_backward,
    "_sparse_softmax": softmax,
    "_sparse_log_softmax": log_softmax,
    "_sparse_softmax_backward_data": softmax_backward,
    "_sparse_log_softmax_backward_data": log_softmax_backward,
}

_CSR = {
    "addmm.out": compressed_addmm_out,
    "addmv.out": compressed_addmv_out,
    "add.out": compressed_add_out,
    "sparse_sampled_addmm": sampled_addmm,
    "sparse_sampled_addmm.out": sampled_addmm_out,
    "_sparse_csr_sum.dim_dtype": csr_sum,
    "_sparse_csr_prod.dim_dtype": csr_prod,
    "_sparse_mm_reduce_impl": sparse_mm_reduce,
    "_sparse_mm_reduce_impl_backward": sparse_mm_reduce_backward,
}

_DENSE = {
    "_to_sparse.sparse_dim": dense_to_sparse,
    "_convert_indices_from_coo_to_csr": coo_to_csr,
    "_convert_indices_from_coo_to_csr.out": coo_to_csr_out,
    "_convert_indices_from_csr_to_coo": csr_to_coo,
    "_convert_indices_from_csr_to_coo.out": csr_to_coo_out,
}


def install():
    """Registers the kernels for sparse "tpu" tensors (once; idempotent)."""
    global _LIB
    if _LIB is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    for name, fn in _COO.items():
        lib.impl(name, fn, "SparsePrivateUse1")
    for name, fn in _CSR.items():
        lib.impl(name, fn, "SparseCsrPrivateUse1")
    with warnings.catch_warnings():
        # The shim routes these structured ops to the CPU (register_structured_ops);
        # replacing that route is the point, so PyTorch's override warning is noise.
        warnings.simplefilter("ignore", UserWarning)
        for name, fn in _DENSE.items():
            lib.impl(name, fn, "PrivateUse1")
    _LIB = lib
