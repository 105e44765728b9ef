"""The vLLM plugin's paged-attention pieces on "tpu" (torchtpu/vllm/ops.py),
checked without a vLLM build: slot mapping, the KV-cache write, and
prefill / chunked-prefill / decode attention over random block tables
against a per-request reference computed on the CPU in float64 from the
same cache contents."""
import numpy as np
import pytest
import torch

from torchtpu.vllm import ops

DEV = "tpu"


def _step(rng, qlens, ctxs, num_blocks, block_size, max_blocks):
    """A random step: block tables (distinct blocks, block 0 left as the null
    block), each token's position and request, and their slots."""
    r = len(qlens)
    perm = rng.permutation(np.arange(1, num_blocks))[: r * max_blocks]
    bt = perm.reshape(r, max_blocks)
    pos = np.concatenate([np.arange(c, c + q) for q, c in zip(qlens, ctxs)])
    req = np.concatenate([[i] * q for i, q in enumerate(qlens)])
    qsl = np.concatenate([[0], np.cumsum(qlens)])
    seq = np.asarray(qlens) + np.asarray(ctxs)
    return bt, pos, req, qsl, seq


def _reference(q, cache, bt, qsl, seq, qlens, scale, window=None):
    """Attention of each token over its request's keys 0..position (and
    inside the window), keys read block by block from the cache."""
    hq, hk = q.shape[1], cache.shape[3]
    outs = []
    for r in range(len(qlens)):
        k = cache[0][torch.as_tensor(bt[r])].reshape(-1, hk, cache.shape[-1]).double()
        v = cache[1][torch.as_tensor(bt[r])].reshape(-1, hk, cache.shape[-1]).double()
        k = k.repeat_interleave(hq // hk, 1)
        v = v.repeat_interleave(hq // hk, 1)
        for i in range(qlens[r]):
            p = int(seq[r] - qlens[r] + i)
            lo = 0 if not window else max(0, p - window + 1)
            s = torch.einsum("hd,shd->hs", q[qsl[r] + i].double(), k[lo:p + 1]) * scale
            outs.append(torch.einsum("hs,shd->hd", s.softmax(-1), v[lo:p + 1]))
    return torch.stack(outs)


def test_slot_mapping_matches_block_table():
    rng = np.random.default_rng(0)
    bt, pos, req, _, _ = _step(rng, [7, 1, 12], [0, 20, 5], 64, 4, 8)
    req = req.copy()
    req[3] = -1  # a padding token
    got = ops.slot_mapping(pos, req, bt, 4)
    for t in range(len(pos)):
        want = -1 if req[t] < 0 else bt[req[t], pos[t] // 4] * 4 + pos[t] % 4
        assert got[t] == want


def test_slot_mapping_rejects_position_past_table():
    with pytest.raises(ValueError, match=r"slot_mapping: position 9 needs block 2.*2 columns"):
        ops.slot_mapping([9], [0], np.zeros((1, 2), dtype=np.int64), 4)


def test_write_kv_cache_scatters_into_slots():
    rng = np.random.default_rng(1)
    nb, bs, hk, d = 32, 4, 2, 8
    bt, pos, req, _, _ = _step(rng, [5, 3, 1], [0, 6, 9], nb, bs, 4)
    slots = ops.slot_mapping(pos, req, bt, bs)
    slots = np.concatenate([slots, [-1, -1]])          # two padding tokens
    t = len(slots)
    cache = torch.randn(2, nb, bs, hk, d)
    key, val = torch.randn(t, hk, d), torch.randn(t, hk, d)
    ref = cache.clone()
    n = t - 2
    ref.view(2, -1, hk, d)[0][torch.as_tensor(slots[:n])] = key[:n]
    ref.view(2, -1, hk, d)[1][torch.as_tensor(slots[:n])] = val[:n]
    dc = cache.to(DEV)
    ops.write_kv_cache(key.to(DEV), val.to(DEV), dc, torch.as_tensor(slots).to(DEV))
    got = dc.cpu()
    # every block but the null block (0) is exactly the reference
    torch.testing.assert_close(got[:, 1:], ref[:, 1:], rtol=0, atol=0)


@pytest.mark.parametrize("hq,hk,window,dtype", [
    (4, 2, None, torch.float32),     # GQA
    (4, 4, None, torch.float32),     # MHA
    (8, 2, 5, torch.float32),        # GQA with a sliding window
    (4, 2, None, torch.bfloat16),
])
@pytest.mark.parametrize("query_chunk", [None, 4, 3])   # per-request rows; chunked (6 = 4 + 2, 3 + 3)
def test_paged_attention_matches_reference(hq, hk, window, dtype, query_chunk):
    rng = np.random.default_rng(2)
    torch.manual_seed(2)
    nb, bs, d, mb = 48, 4, 16, 6
    qlens, ctxs = [6, 1, 3, 1], [0, 13, 9, 0]     # prefill, decode, chunked, first token
    bt, pos, req, qsl, seq = _step(rng, qlens, ctxs, nb, bs, mb)
    t = int(qsl[-1])
    cache = torch.randn(2, nb, bs, hk, d).to(dtype)
    key, val = torch.randn(t, hk, d).to(dtype), torch.randn(t, hk, d).to(dtype)
    q = torch.randn(t, hq, d).to(dtype)
    slots = ops.slot_mapping(pos, req, bt, bs)
    ref_cache = cache.clone()
    ref_cache.view(2, -1, hk, d)[0][torch.as_tensor(slots)] = key
    ref_cache.view(2, -1, hk, d)[1][torch.as_tensor(slots)] = val
    ref = _reference(q, ref_cache, bt, qsl, seq, qlens, 0.25, window)

    # padded sizes, as the model runner's buckets give them
    t_pad, r_pad, lq = 16, 8, 8
    dc = cache.to(DEV)
    sm = torch.full((t_pad,), -1, dtype=torch.int64)
    sm[:t] = torch.as_tensor(slots)
    kp = torch.zeros(t_pad, hk, d, dtype=dtype)
    vp = torch.zeros(t_pad, hk, d, dtype=dtype)
    qp = torch.zeros(t_pad, hq, d, dtype=dtype)
    kp[:t], vp[:t], qp[:t] = key, val, q
    ops.write_kv_cache(kp.to(DEV), vp.to(DEV), dc, sm.to(DEV))
    btp = np.zeros((r_pad, mb), dtype=np.int64)
    btp[: len(qlens)] = bt
    layout = dict(max_query_len=lq) if query_chunk is None else dict(query_chunk=query_chunk)
    plan = ops.plan_step(qsl, seq, num_tokens=t_pad, num_reqs=r_pad, max_blocks=mb,
                         block_size=bs, device=DEV, **layout)
    if query_chunk is not None:
        assert plan.num_groups == -(-t_pad // query_chunk) + r_pad
    out = ops.paged_attention(qp.to(DEV), dc, torch.as_tensor(btp).to(DEV), plan, 0.25,
                              sliding_window=window).cpu()
    assert out.shape == (t_pad, hq, d) and out.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out[:t].double(), ref, rtol=tol, atol=tol)


GARBAGE = 1e15   # finite: a stale key or value beyond a sequence's end


@pytest.mark.parametrize("qlens,ctxs,window,query_chunk", [
    ([6, 1, 3, 1], [0, 13, 9, 0], None, None),   # any prefill: rows padded to the token bucket
    ([6, 1, 3, 1], [0, 13, 9, 0], None, 4),      # any prefill: groups of 4 query rows
    ([1, 1, 1], [7, 20, 2], None, None),         # decode only: one query row per request
    ([5, 1, 3], [4, 14, 0], 6, None),            # sliding window
    ([5, 1, 3], [4, 14, 0], 6, 2),
])
def test_padding_does_not_leak_into_real_results(qlens, ctxs, window, query_chunk):
    """A step padded the way the backend pads it (torchtpu/vllm/attention.py:
    tokens to the token bucket with slot -1, requests to the request bucket
    and block-table columns to max_model_len with block 0, vLLM's null block;
    query rows to the token bucket or in groups of query_chunk rows (padding
    groups included), or 1 when every request decodes), with
    garbage wherever padding is: the padded tokens' queries, keys and values
    are NaN, the slots of the requests' own blocks past their sequence end
    hold huge finite values (the runner zeroes new blocks; attention must
    not rely on it), blocks no request owns are NaN. The real tokens'
    outputs must equal a float64 reference over their own keys, the cache
    write must change exactly the real tokens' slots in every block but the
    null block, and the null block must stay zero (every padded column reads
    it, and a masked key's value still enters the output as 0 * value)."""
    rng = np.random.default_rng(5)
    torch.manual_seed(5)
    nb, bs, hk, hq, d, mb = 40, 4, 2, 4, 16, 8
    r = len(qlens)
    seq = np.asarray(qlens) + np.asarray(ctxs)
    need = -(-seq // bs)
    # each request owns the blocks its sequence needs; the last block id is one
    # of them (a padding write wrapping around would land in it)
    ids = np.concatenate([[nb - 1], rng.permutation(np.arange(1, nb - 1))])[: need.sum()]
    bt = np.zeros((r, mb), dtype=np.int64)       # padded columns: the null block
    owned = np.split(ids, np.cumsum(need)[:-1])
    for i, blocks in enumerate(owned):
        bt[i, : len(blocks)] = blocks
    pos = np.concatenate([np.arange(c, c + q) for q, c in zip(qlens, ctxs)])
    req = np.concatenate([[i] * q for i, q in enumerate(qlens)])
    qsl = np.concatenate([[0], np.cumsum(qlens)])
    t = int(qsl[-1])

    cache = torch.full((2, nb, bs, hk, d), float("nan"))
    cache[:, 0] = 0                              # the null block, as the runner allocates it
    for i, blocks in enumerate(owned):
        own = cache[:, torch.as_tensor(blocks)].view(2, -1, hk, d)
        own.fill_(GARBAGE)
        own[:, : ctxs[i]] = torch.randn(2, ctxs[i], hk, d)   # the cached context
        cache[:, torch.as_tensor(blocks)] = own.view(2, len(blocks), bs, hk, d)
    q, key, val = torch.randn(t, hq, d), torch.randn(t, hk, d), torch.randn(t, hk, d)
    slots = ops.slot_mapping(pos, req, bt, bs)
    ref_cache = cache.clone()
    ref_cache.view(2, -1, hk, d)[0][torch.as_tensor(slots)] = key
    ref_cache.view(2, -1, hk, d)[1][torch.as_tensor(slots)] = val
    ref = _reference(q, ref_cache, bt, qsl, seq, qlens, 0.25, window)

    t_pad = ops.pad_to_bucket(t, 16)
    r_pad = ops.pad_to_bucket(r, 4)
    lq = 1 if max(qlens) == 1 else t_pad
    nan = float("nan")
    qp, kp, vp = (torch.full((t_pad,) + x.shape[1:], nan) for x in (q, key, val))
    qp[:t], kp[:t], vp[:t] = q, key, val
    sm = torch.full((t_pad,), -1, dtype=torch.int64)
    sm[:t] = torch.as_tensor(slots)
    btp = np.zeros((r_pad, mb), dtype=np.int64)
    btp[:r] = bt
    dc = cache.to(DEV)
    ops.write_kv_cache(kp.to(DEV), vp.to(DEV), dc, sm.to(DEV))
    layout = dict(max_query_len=lq) if query_chunk is None else dict(query_chunk=query_chunk)
    plan = ops.plan_step(qsl, seq, num_tokens=t_pad, num_reqs=r_pad, max_blocks=mb,
                         block_size=bs, device=DEV, **layout)
    out = ops.paged_attention(qp.to(DEV), dc, torch.as_tensor(btp).to(DEV), plan, 0.25,
                              sliding_window=window).cpu()
    got_cache = dc.cpu()

    torch.testing.assert_close(got_cache[:, 1:], ref_cache[:, 1:], rtol=0, atol=0,
                               equal_nan=True)
    assert (got_cache[:, 0] == 0).all(), "padding tokens left non-zeros in the null block"
    assert torch.isfinite(out[:t]).all()
    torch.testing.assert_close(out[:t].double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", [dict(max_query_len=8), dict(query_chunk=4)])
def test_same_bucket_compiles_nothing_new(layout):
    """Two steps of different ragged lengths padded to the same buckets run
    the same programs: the second compiles nothing."""
    nb, bs, hk, hq, d, mb = 40, 4, 2, 4, 8, 4
    cache = torch.zeros(2, nb, bs, hk, d, device=DEV)

    def step(qlens, ctxs, seed):
        rng = np.random.default_rng(seed)
        bt, pos, req, qsl, seq = _step(rng, qlens, ctxs, nb, bs, mb)
        t = int(qsl[-1])
        sm = np.full(16, -1)
        sm[:t] = ops.slot_mapping(pos, req, bt, bs)
        btp = np.zeros((4, mb), dtype=np.int64)
        btp[: len(qlens)] = bt
        x = torch.randn(16, hq, d, device=DEV)
        ops.write_kv_cache(x[:, :hk], x[:, hk:], cache, torch.as_tensor(sm).to(DEV))
        plan = ops.plan_step(qsl, seq, num_tokens=16, num_reqs=4, max_blocks=mb,
                             block_size=bs, device=DEV, **layout)
        return ops.paged_attention(x, cache, torch.as_tensor(btp).to(DEV), plan, 0.3).cpu()

    step([5, 1, 2], [0, 7, 3], 0)
    before = torch.tpu._get_cache_stats()["compiles"]
    out = step([8, 1], [2, 11], 1)
    assert torch.tpu._get_cache_stats()["compiles"] == before
    assert torch.isfinite(out).all()


def test_bad_inputs_raise_with_shapes():
    cache = torch.zeros(2, 8, 4, 2, 8, device=DEV)
    with pytest.raises(ValueError, match=r"write_kv_cache: key \(3, 3, 8\)"):
        ops.write_kv_cache(torch.zeros(3, 3, 8, device=DEV), torch.zeros(3, 3, 8, device=DEV),
                           cache, torch.zeros(3, dtype=torch.int64, device=DEV))
    plan = ops.plan_step([0, 2], [2], num_tokens=4, num_reqs=1, max_query_len=2, max_blocks=2,
                         block_size=4, device=DEV)
    with pytest.raises(ValueError, match=r"paged_attention: 3 query heads .* 2 kv heads"):
        ops.paged_attention(torch.zeros(4, 3, 8, device=DEV), cache,
                            torch.zeros(1, 2, dtype=torch.int64, device=DEV), plan, 1.0)
    with pytest.raises(ValueError, match=r"plan_step: 1 requests, 9 tokens"):
        ops.plan_step([0, 9], [9], num_tokens=4, num_reqs=1, max_query_len=2, max_blocks=4,
                      block_size=4, device=DEV)
    with pytest.raises(ValueError, match=r"plan_step: seq_lens \[3\] must be >= the query"):
        ops.plan_step([0, 4], [3], num_tokens=4, num_reqs=1, max_query_len=4, max_blocks=4,
                      block_size=4, device=DEV)


def test_dense_moe_matches_per_token_experts():
    """The MoE layer's expert computation: each token's top-k experts
    (SiLU-gated MLPs) weighted by the router, computed token by token on the
    CPU as the reference."""
    torch.manual_seed(3)
    t, h, i, e, k = 6, 16, 12, 4, 2
    x = torch.randn(t, h)
    w13, w2 = torch.randn(e, 2 * i, h) / 4, torch.randn(e, h, i) / 4
    probs = torch.randn(t, e).softmax(-1)
    tw, ti = probs.topk(k, dim=-1)
    ref = torch.zeros(t, h, dtype=torch.float64)
    for a in range(t):
        for j in range(k):
            ex = int(ti[a, j])
            gu = w13[ex].double() @ x[a].double()
            act = torch.nn.functional.silu(gu[:i]) * gu[i:]
            ref[a] += tw[a, j].double() * (w2[ex].double() @ act)
    got = ops.dense_moe(x.to(DEV), w13.to(DEV), w2.to(DEV), tw.to(DEV),
                        ti.to(torch.int32).to(DEV)).cpu()
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)
