"""Sparse COO and compressed tensors on tpu against PyTorch's CPU results:
construction, coalesce, conversion, sparse @ dense, reductions, elementwise,
index_select, softmax, autograd, sparse gradients of Embedding/EmbeddingBag,
the sparse optimizers, a recommendation model and a GCN (torchtpu/_sparse.py,
shim/sparse.cpp, docs/sparse.md)."""
import warnings

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

warnings.filterwarnings("ignore", message=".*Sparse.*")


def coo(indices, values, size, dev="cpu"):
    return torch.sparse_coo_tensor(torch.tensor(indices), torch.tensor(values), size).to(dev)


def same_sparse(t, ref, rtol=1.3e-6, atol=1e-5):
    """t (tpu) and ref (cpu) hold the same COO tensor: flags, shape, and,
    once coalesced, the same indices and values."""
    assert t.device.type == "tpu" and t.layout == ref.layout == torch.sparse_coo
    assert t.shape == ref.shape and t.is_coalesced() == ref.is_coalesced()
    assert (t.sparse_dim(), t.dense_dim()) == (ref.sparse_dim(), ref.dense_dim())
    a, b = t.cpu().coalesce(), ref.coalesce()
    torch.testing.assert_close(a._indices(), b._indices())
    torch.testing.assert_close(a._values(), b._values(), rtol=rtol, atol=atol)


# indices, values, size: duplicates, nnz 0, hybrid (a dense dim), 3 sparse dims
CASES = {
    "dups": ([[0, 1, 1, 0, 2], [2, 0, 2, 2, 1]], [3., 4., 5., 1., -2.], (3, 4)),
    "empty": (torch.zeros(2, 0, dtype=torch.long).tolist(), [], (3, 4)),
    "hybrid": ([[2, 0, 2]], [[1., 2.], [3., 4.], [5., 6.]], (4, 2)),
    "3d": ([[0, 1, 0], [1, 1, 1], [2, 0, 2]], [1., 2., 3.], (2, 2, 3)),
}


def case(name, dev="cpu"):
    i, v, size = CASES[name]
    i = torch.tensor(i, dtype=torch.long).reshape(len(size) - (name == "hybrid"), -1)
    return torch.sparse_coo_tensor(i, torch.tensor(v).reshape((-1,) + size[i.shape[0]:]),
                                   size).to(dev)


# --- construction, coalesce, conversion ---------------------------------------------------

@pytest.mark.parametrize("name", list(CASES))
def test_construct_coalesce_to_dense(name, no_fallback):
    ref = case(name)
    t = torch.sparse_coo_tensor(ref._indices().to("tpu"), ref._values().to("tpu"), ref.shape)
    assert t.device.type == "tpu" and t._indices().device.type == "tpu"
    fresh = torch.sparse_coo_tensor(ref._indices(), ref._values(), ref.shape)
    assert t._nnz() == ref._nnz() and t.is_coalesced() == fresh.is_coalesced()
    torch.testing.assert_close(t._indices().cpu(), ref._indices())
    c = t.coalesce()
    assert c.is_coalesced()
    torch.testing.assert_close(c.indices().cpu(), ref.coalesce().indices())
    torch.testing.assert_close(c.values().cpu(), ref.coalesce().values())
    torch.testing.assert_close(t.to_dense().cpu(), ref.to_dense())
    same_sparse(ref.to("tpu"), ref)  # a host sparse tensor moved over
    same_sparse(t.cpu().to("tpu"), ref)


@pytest.mark.parametrize("sparse_dim", [None, 1])
def test_dense_to_sparse(sparse_dim, no_fallback):
    x = torch.tensor([[0., 1., 0.], [2., 0., 0.], [0., 0., 0.], [3., 0., 4.]])
    args = () if sparse_dim is None else (sparse_dim,)
    same_sparse(x.to("tpu").to_sparse(*args), x.to_sparse(*args))


def test_bad_inputs_raise_as_on_cpu():
    i, v = torch.tensor([[0, 5]]), torch.tensor([1., 2.])
    for dev in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="size is 3 but found index 5"):
            torch.sparse_coo_tensor(i.to(dev), v.to(dev), (3,), check_invariants=True)
    s = case("dups", "tpu")
    with pytest.raises(RuntimeError, match=r"add\(sparse, dense\) is not supported"):
        s + torch.ones(3, 4, device="tpu")
    with pytest.raises(RuntimeError, match=r"addmm: Argument #3 \(dense\): Expected dim 0 size 4"):
        torch.sparse.mm(s, torch.ones(3, 2, device="tpu"))
    with pytest.raises(IndexError, match="index contains 7 that is out of range"):
        s.index_select(1, torch.tensor([0, 7], device="tpu"))
    with pytest.raises(RuntimeError, match="expected sizes of 'self' and 'other' to match"):
        s + case("hybrid", "tpu")


# --- sparse @ dense --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["dups", "empty"])
def test_mm_addmm(name, no_fallback):
    ref = case(name)
    t = ref.to("tpu")
    d = torch.randn(4, 5)
    b = torch.randn(3, 5)
    dt, bt = d.to("tpu"), b.to("tpu")
    torch.testing.assert_close(torch.sparse.mm(t, dt).cpu(), torch.sparse.mm(ref, d))
    torch.testing.assert_close(torch.mm(t, dt).cpu(), torch.mm(ref, d))
    torch.testing.assert_close((t @ dt).cpu(), ref @ d)
    torch.testing.assert_close(torch.addmm(bt, t, dt, beta=0.5, alpha=2.).cpu(),
                               torch.addmm(b, ref, d, beta=0.5, alpha=2.))
    torch.testing.assert_close(torch.sparse.addmm(bt, t, dt).cpu(), torch.sparse.addmm(b, ref, d))


def test_smm_bmm_and_sparse_sparse_mm():
    ref = case("dups")
    d = torch.randn(4, 5)
    torch.testing.assert_close(torch.smm(ref.to("tpu"), d.to("tpu")).to_dense().cpu(),
                               torch.smm(ref, d).to_dense())
    b3 = torch.randn(2, 3, 4).relu().to_sparse()
    m3 = torch.randn(2, 4, 5)
    torch.testing.assert_close(torch.bmm(b3.to("tpu"), m3.to("tpu")).cpu(), torch.bmm(b3, m3))


def test_mm_autograd(no_fallback):
    ref = case("dups").coalesce()
    d = torch.randn(4, 5)
    grads = []
    for dev in ("cpu", "tpu"):
        s = ref.detach().clone().to(dev).requires_grad_()
        x = d.clone().to(dev).requires_grad_()
        (torch.sparse.mm(s, x) ** 2).sum().backward()
        grads.append((s.grad.cpu(), x.grad.cpu()))
    (sg, xg), (sg_t, xg_t) = grads
    torch.testing.assert_close(xg_t, xg)
    torch.testing.assert_close(sg_t.to_dense(), sg.to_dense())


# --- reductions, elementwise, selection -----------------------------------------------------

@pytest.mark.parametrize("name", ["dups", "hybrid", "3d"])
def test_sum(name, no_fallback):
    ref = case(name)
    t = ref.to("tpu")
    torch.testing.assert_close(torch.sparse.sum(t).cpu(), torch.sparse.sum(ref))
    for dim in ([0], [ref.dim() - 1], list(range(ref.sparse_dim()))):
        r = torch.sparse.sum(ref, dim)
        got = torch.sparse.sum(t, dim)
        if r.layout == torch.sparse_coo:
            same_sparse(got, r)
        else:
            torch.testing.assert_close(got.cpu(), r)


def test_sum_backward():
    ref = case("3d").coalesce()
    grads = []
    for dev in ("cpu", "tpu"):
        s = ref.detach().clone().to(dev).requires_grad_()
        (torch.sparse.sum(s, [1]).to_dense() * torch.arange(6.).view(2, 3).to(dev)).sum().backward()
        grads.append(s.grad.cpu().to_dense())
    torch.testing.assert_close(grads[1], grads[0])


def test_add_mul_scalar_and_unary(no_fallback):
    a, b = case("dups"), case("dups").coalesce() * 3
    at, bt = a.to("tpu"), b.to("tpu")
    same_sparse(at + bt, a + b)
    same_sparse(at.coalesce() + bt, a.coalesce() + b)
    same_sparse(torch.add(at, bt, alpha=-2), torch.add(a, b, alpha=-2))
    d = torch.randn(3, 4)
    torch.testing.assert_close((d.to("tpu") + at).cpu(), d + a)
    x = d.to("tpu")
    x.add_(bt, alpha=0.5)
    torch.testing.assert_close(x.cpu(), d.add(b, alpha=0.5))
    same_sparse(at * 2.5, a * 2.5)
    same_sparse(at * bt, a * b)
    same_sparse(at * d.to("tpu"), a * d)
    same_sparse(-at, -a)
    same_sparse(at.coalesce().sin(), a.coalesce().sin())
    h = case("hybrid")
    same_sparse(h.to("tpu") * 2 + h.to("tpu"), h * 2 + h)


def test_index_select_transpose(no_fallback):
    idx = torch.tensor([1, 1, 0])
    for name, dim in (("dups", 0), ("dups", 1), ("hybrid", 1)):  # sparse dims, a dense dim
        ref = case(name)
        same_sparse(ref.to("tpu").index_select(dim, idx.to("tpu")), ref.index_select(dim, idx))
    ref = case("3d")
    same_sparse(ref.to("tpu").transpose(0, 2), ref.transpose(0, 2))
    same_sparse(case("dups", "tpu").t(), case("dups").t())


@pytest.mark.parametrize("name", ["dups", "hybrid"])  # a sparse dim; hybrid: a dense dim too
def test_softmax(name):
    ref = case(name).coalesce()
    weight = torch.arange(float(ref.numel())).view(ref.shape)
    cases = [(fn, dim) for fn in (torch.sparse.softmax, torch.sparse.log_softmax)
             for dim in range(ref.dim())]
    for fn, dim in cases:
        grads = []
        for dev in ("cpu", "tpu"):
            s = ref.detach().clone().to(dev).requires_grad_()
            out = fn(s, dim)
            (out.to_dense() * weight.to(dev)).sum().backward()
            grads.append((out.cpu(), s.grad.cpu()))
        (o, g), (o_t, g_t) = grads
        torch.testing.assert_close(o_t.to_dense(), o.to_dense(), msg=f"{fn.__name__} dim {dim}")
        torch.testing.assert_close(g_t.to_dense(), g.to_dense(), msg=f"{fn.__name__} dim {dim}")


def test_sparse_sparse_mm():
    a, b = case("dups"), torch.randn(4, 3).relu().to_sparse()
    same_sparse(torch.sparse.mm(a.to("tpu"), b.to("tpu")), torch.sparse.mm(a, b))


def test_out_of_range_indices_raise_on_use():
    """Unchecked construction (check_invariants=False) with an index past the
    size: using it raises (a device-side check), never silent numbers."""
    i = torch.tensor([[0, 1], [0, 7]], device="tpu")
    s = torch.sparse_coo_tensor(i, torch.ones(2, device="tpu"), (2, 2), check_invariants=False)
    with pytest.raises(IndexError, match="out of range"):
        torch.sparse.mm(s, torch.ones(2, 2, device="tpu")).cpu()


# --- sparse gradients and optimizers ------------------------------------------------------

def _embedding_grads(module_fn, dev, x, steps=1):
    torch.manual_seed(0)
    m = module_fn().to(dev)
    (m(x.to(dev)) ** 2).sum().backward()
    return m.weight.grad


@pytest.mark.parametrize("kind", ["embedding", "embedding_pad", "bag_sum", "bag_mean", "bag_psw"])
def test_sparse_embedding_grads(kind, no_fallback):
    x = torch.tensor([[1, 2, 3, 2], [4, 3, 9, 1]])
    grads = []
    for dev in ("cpu", "tpu"):
        torch.manual_seed(0)
        if kind.startswith("embedding"):
            m = torch.nn.Embedding(12, 5, sparse=True,
                                   padding_idx=3 if kind == "embedding_pad" else None)
            m = m.to(dev)
            out = m(x.to(dev))
        else:
            mode = {"bag_sum": "sum", "bag_mean": "mean", "bag_psw": "sum"}[kind]
            m = torch.nn.EmbeddingBag(12, 5, mode=mode, sparse=True).to(dev)
            psw = torch.linspace(0.5, 2, 8).view(2, 4).to(dev) if kind == "bag_psw" else None
            out = m(x.to(dev), per_sample_weights=psw)
        (out ** 2).sum().backward()
        grads.append(m.weight.grad)
    ref, got = grads
    assert got.layout == torch.sparse_coo and got.device.type == "tpu"
    same_sparse(got, ref)


@pytest.mark.parametrize("opt", ["sgd", "sgd_momentum", "adagrad"])  # SparseAdam: the model test
def test_sparse_optimizers(opt):
    make = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
        "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        "sparse_adam": lambda p: torch.optim.SparseAdam(p, lr=0.05),
        "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
    }[opt]
    g = torch.Generator().manual_seed(3)
    batches = [torch.randint(0, 30, (4, 3), generator=g) for _ in range(3)]
    weights = []
    for dev in ("cpu", "tpu"):
        torch.manual_seed(0)
        m = torch.nn.Embedding(30, 4, sparse=True).to(dev)
        o = make(m.parameters())
        for x in batches:
            o.zero_grad()
            (m(x.to(dev)) ** 2).sum().backward()
            o.step()
        weights.append(m.weight.detach().cpu())
    torch.testing.assert_close(weights[1], weights[0], rtol=1e-5, atol=1e-6)


class _Recommender(torch.nn.Module):
    """Two sparse EmbeddingBag tables (users' and items' features) and an MLP."""

    def __init__(self):
        super().__init__()
        self.users = torch.nn.EmbeddingBag(200, 16, mode="sum", sparse=True)
        self.items = torch.nn.EmbeddingBag(300, 16, mode="mean", sparse=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 1))

    def forward(self, u, u_off, i, i_off):
        return self.mlp(torch.cat([self.users(u, u_off), self.items(i, i_off)], 1)).squeeze(1)


def _recommender_run(dev, batches):
    torch.manual_seed(0)
    m = _Recommender().to(dev)
    sparse = list(m.users.parameters()) + list(m.items.parameters())
    opts = [torch.optim.SparseAdam(sparse, lr=0.01), torch.optim.Adam(m.mlp.parameters(), lr=0.01)]
    losses = []
    for u, uo, i, io, y in batches:
        for o in opts:
            o.zero_grad()
        pred = m(u.to(dev), uo.to(dev), i.to(dev), io.to(dev))
        loss = F.binary_cross_entropy_with_logits(pred, y.to(dev))
        loss.backward()
        for o in opts:
            o.step()
        losses.append(loss.item())
    return losses, m.users.weight.detach().cpu()


def test_recommendation_model_sparse_adam_matches_cpu():
    g = torch.Generator().manual_seed(7)
    batches = []
    for _ in range(20):
        # 20 distinct ids of 24 per table and batch: the gradients' nnz after
        # coalesce is the same every step, so each program compiles once
        # (a new nnz is a new shape; see docs/sparse.md)
        u = torch.randperm(200, generator=g)[:24]
        u[20:] = u[:4]
        i = torch.randperm(300, generator=g)[:24]
        i[20:] = i[:4]
        off = torch.arange(0, 24, 3)
        batches.append((u, off, i, off, torch.randint(0, 2, (8,), generator=g).float()))
    cpu, w_cpu = _recommender_run("cpu", batches)
    tpu, w_tpu = _recommender_run("tpu", batches)
    for step, (a, b) in enumerate(zip(cpu, tpu)):
        assert abs(a - b) <= 1e-5 * abs(a), f"step {step}: cpu {a} tpu {b}"
    torch.testing.assert_close(w_tpu, w_cpu, rtol=1e-4, atol=1e-5)


def _gcn_run(dev, adj, feats, labels):
    torch.manual_seed(0)
    w1 = torch.nn.Linear(8, 16).to(dev)
    w2 = torch.nn.Linear(16, 3).to(dev)
    opt = torch.optim.SGD(list(w1.parameters()) + list(w2.parameters()), lr=0.1)
    a, x, y = adj.to(dev), feats.to(dev), labels.to(dev)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        h = torch.sparse.mm(a, w1(x)).relu()
        out = torch.sparse.mm(a, w2(h))
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, w1.weight.detach().cpu()


def test_gcn_sparse_adjacency_matches_cpu(no_fallback):
    g = torch.Generator().manual_seed(5)
    n = 40
    src, dst = torch.randint(0, n, (2, 120), generator=g)
    loops = torch.arange(n)
    idx = torch.stack([torch.cat([src, dst, loops]), torch.cat([dst, src, loops])])
    deg = torch.zeros(n).index_add_(0, idx[0], torch.ones(idx.shape[1]))
    vals = (deg[idx[0]] * deg[idx[1]]).rsqrt()
    adj = torch.sparse_coo_tensor(idx, vals, (n, n)).coalesce()  # normalised, symmetric
    feats = torch.randn(n, 8, generator=g)
    labels = torch.randint(0, 3, (n,), generator=g)
    cpu, w_cpu = _gcn_run("cpu", adj, feats, labels)
    tpu, w_tpu = _gcn_run("tpu", adj, feats, labels)
    torch.testing.assert_close(torch.tensor(tpu), torch.tensor(cpu), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w_tpu, w_cpu, rtol=1e-4, atol=1e-5)


# --- compressed layouts --------------------------------------------------------------------

DENSE = torch.tensor([[0., 1., 0., 2.], [0., 0., 0., 0.], [3., 0., 4., 0.], [0., 5., 0., 6.]])


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc"])
def test_compressed_construct_convert(layout, no_fallback):
    conv = {"csr": lambda x: x.to_sparse_csr(), "csc": lambda x: x.to_sparse_csc(),
            "bsr": lambda x: x.to_sparse_bsr((2, 2)), "bsc": lambda x: x.to_sparse_bsc((2, 2))}
    ref = conv[layout](DENSE)
    t = conv[layout](DENSE.to("tpu"))
    assert t.layout == ref.layout and t.device.type == "tpu"
    comp = {"csr": ("crow_indices", "col_indices"), "bsr": ("crow_indices", "col_indices"),
            "csc": ("ccol_indices", "row_indices"), "bsc": ("ccol_indices", "row_indices")}
    for name in comp[layout]:
        torch.testing.assert_close(getattr(t, name)().cpu(), getattr(ref, name)())
    torch.testing.assert_close(t.values().cpu(), ref.values())
    torch.testing.assert_close(t.to_dense().cpu(), DENSE)
    torch.testing.assert_close(ref.to("tpu").to_dense().cpu(), DENSE)
    same_sparse(t.to_sparse(), ref.to_sparse())


def test_csr_constructor_and_coo_roundtrip(no_fallback):
    crow, col = torch.tensor([0, 2, 2, 4]), torch.tensor([0, 3, 1, 2])
    vals = torch.tensor([1., 2., 3., 4.])
    ref = torch.sparse_csr_tensor(crow, col, vals, (3, 4))
    t = torch.sparse_csr_tensor(crow.to("tpu"), col.to("tpu"), vals.to("tpu"), (3, 4))
    torch.testing.assert_close(t.to_dense().cpu(), ref.to_dense())
    back = t.to_sparse().to_sparse_csr()
    torch.testing.assert_close(back.crow_indices().cpu(), crow)
    torch.testing.assert_close(back.col_indices().cpu(), col)


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr"])
def test_compressed_matmul(layout, no_fallback):
    conv = {"csr": lambda x: x.to_sparse_csr(), "csc": lambda x: x.to_sparse_csc(),
            "bsr": lambda x: x.to_sparse_bsr((2, 2))}[layout]
    d = torch.randn(4, 3)
    b = torch.randn(4, 3)
    ref = conv(DENSE)
    t = conv(DENSE.to("tpu"))
    torch.testing.assert_close((t @ d.to("tpu")).cpu(), ref @ d)
    torch.testing.assert_close(torch.addmm(b.to("tpu"), t, d.to("tpu"), beta=2., alpha=.5).cpu(),
                               torch.addmm(b, ref, d, beta=2., alpha=.5))
    v = torch.randn(4)
    torch.testing.assert_close((t @ v.to("tpu")).cpu(), ref @ v)


def test_csr_add_sum_sampled_addmm(no_fallback):
    a = DENSE.to_sparse_csr()
    b = (DENSE * 2 + torch.eye(4)).to_sparse_csr()
    at, bt = a.to("tpu"), b.to("tpu")
    s = at + bt
    assert s.layout == torch.sparse_csr
    torch.testing.assert_close(s.to_dense().cpu(), (a + b).to_dense())
    torch.testing.assert_close((torch.ones(4, 4, device="tpu") + at).cpu(),
                               torch.ones(4, 4) + a)
    torch.testing.assert_close(torch.sum(at).cpu(), torch.sum(a))
    m1, m2 = torch.randn(4, 5), torch.randn(5, 4)
    ref = torch.sparse.sampled_addmm(a, m1, m2, beta=0.5, alpha=2.)
    got = torch.sparse.sampled_addmm(at, m1.to("tpu"), m2.to("tpu"), beta=0.5, alpha=2.)
    assert got.layout == torch.sparse_csr
    torch.testing.assert_close(got.to_dense().cpu(), ref.to_dense())
    torch.testing.assert_close((at * 3).to_dense().cpu(), (a * 3).to_dense())


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
def test_csr_mm_reduce_and_grads(reduce, no_fallback):
    a = torch.tensor([[0., 2., 0.], [0., 0., 0.], [1., 0., 3.]])
    w = torch.randn(3, 2)
    res = []
    for dev in ("cpu", "tpu"):
        A = a.to(dev).to_sparse_csr().requires_grad_()
        W = w.clone().to(dev).requires_grad_()
        out = torch.sparse.mm(A, W, reduce)
        (out * torch.arange(6.).view(3, 2).to(dev)).sum().backward()
        res.append((out.cpu(), W.grad.cpu(), A.grad.cpu().to_dense()))
    for got, ref in zip(res[1], res[0]):
        torch.testing.assert_close(got, ref)


def test_csr_sum_prod_keep_cpu_pattern(no_fallback):
    a = torch.tensor([[0., 2., 0.], [0., 0., 0.], [1., 0., -1.]]).to_sparse_csr()
    for dim in ([0], [1], [0, 1]):
        for f in (torch.ops.aten._sparse_csr_sum, torch.ops.aten._sparse_csr_prod):
            ref, got = f(a, dim, True), f(a.to("tpu"), dim, True)
            assert got.layout == torch.sparse_csr and got.shape == ref.shape
            for name in ("crow_indices", "col_indices", "values"):
                torch.testing.assert_close(getattr(got, name)().cpu(), getattr(ref, name)())


def test_dense_at_sparse(no_fallback):
    d, s = torch.randn(3, 4), torch.randn(4, 5).relu().to_sparse()
    torch.testing.assert_close(torch.mm(d.to("tpu"), s.to("tpu")).cpu(), torch.mm(d, s))
    torch.testing.assert_close((d.to("tpu") @ s.to("tpu").to_sparse_csr()).cpu(),
                               d @ s.to_sparse_csr())


def test_all_reduce_and_ddp_of_sparse_tensors_on_two_ranks():
    import os
    from torchtpu.testing.multiprocess import run

    here = os.path.dirname(os.path.abspath(__file__))
    env = {"PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    results = run("dist_workers:sparse_all_reduce", 2, timeout=240, env=env)
    for rank, res in enumerate(results):
        assert res["tpu"] == res["cpu"], (rank, res)
        assert res["tpu"]["layout"] == "torch.sparse_coo"


@pytest.mark.parametrize("layout", ["csr", "csc"])
def test_dense_to_compressed_indices_pass_pytorchs_checks(layout):
    """The plain indices of a converted tensor are contiguous, as PyTorch's
    own validation of compressed tensors requires (its nonzero's layout)."""
    x = torch.tensor([[0., 1, 0], [2, 0, 3]])
    t = getattr(x.to("tpu"), f"to_sparse_{layout}")()
    compressed, plain = ((t.crow_indices(), t.col_indices()) if layout == "csr"
                         else (t.ccol_indices(), t.row_indices()))
    assert plain.is_contiguous()
    torch._validate_sparse_compressed_tensor_args(compressed, plain, t.values(), t.shape, t.layout)
    torch.testing.assert_close(t.to_dense().cpu(), x)
