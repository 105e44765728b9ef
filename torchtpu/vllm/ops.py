"""Paged attention on "tpu" as tensor ops: the KV-cache write, the step's
gather plan, and prefill/decode attention over the gathered blocks.

Nothing here imports vLLM: the backend (torchtpu/vllm/attention.py) calls
these functions, and tests/test_vllm_backend.py checks them against a
per-request reference without a vLLM build.

Layout (vLLM's names):
  kv_cache     [2, num_blocks, block_size, Hk, D]   (keys, values)
  block_table  [R, max_blocks]  block ids of each request, in order
  slot_mapping [T]   block_id * block_size + offset of each token's key
  query        [T, Hq, D]   the step's tokens, requests one after another
  query_start_loc [R + 1]   where each request's tokens start (cumulative)
  seq_lens     [R]          tokens of each request after this step's
                            (context + this step's queries)

A request's queries are its last query_len positions: token i of request r
sits at position seq_lens[r] - query_len[r] + i and, causally, sees keys
0 .. that position. This one rule covers prefill (context 0), chunked
prefill (context > 0) and decode (query_len 1).

How it runs: the step's ragged layout becomes a padded one, [G, Lq] query
rows in groups of one request's consecutive tokens (G = R, one group per
request, or G = T / Lq + R groups of Lq rows: plan_step's two layouts), by
a plan computed once per step on the host (PagedPlan: integer index
tensors, shared by every layer). Each layer then does a fixed-shape gather
of each group's request's blocks, one scaled_dot_product_attention with a
boolean mask (causal offset, sequence end, sliding window; grouped-query
heads folded by enable_gqa, which the "tpu" SDPA lowering handles without
copies) and a gather back to the ragged token order. Shapes depend only on
(T, R, G, Lq, max_blocks), which the model runner pads to buckets, so a
serving process compiles each bucket once.

Padding: a token whose slot is negative (vLLM's PAD_SLOT_ID) writes zeros
into slot 0, i.e. block 0, which vLLM's block pool keeps as its null block
and never hands to a request (padded block-table entries point there, so it
must stay finite: a masked key's value still enters the output as 0 *
value); padded query rows attend to key 0 only (so no row is fully masked)
and their outputs are dropped. tests/test_vllm_backend.py's padding test
fills every padded place with garbage and checks the real rows.
"""
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["PagedPlan", "plan_step", "write_kv_cache", "paged_attention",
           "slot_mapping", "pad_to_bucket", "dense_moe"]


def pad_to_bucket(n, minimum=1, maximum=None):
    """The smallest power of two >= n (and >= minimum), capped at maximum."""
    b = max(int(minimum), 1)
    while b < n:
        b *= 2
    if maximum is not None:
        if n > maximum:
            raise ValueError(f"pad_to_bucket: {n} exceeds the largest bucket {maximum}")
        b = min(b, maximum)
    return b


def slot_mapping(positions, req_indices, block_table, block_size):
    """The KV-cache slot of each token: block_table[req, pos // block_size]
    * block_size + pos % block_size. positions, req_indices: [T] integer
    arrays (numpy or CPU tensors); block_table [R, max_blocks]. A negative
    req index marks a padding token, whose slot is -1.

    vLLM computes this with a Triton kernel on the device; on "tpu" the
    runner computes it on the host, where the step's positions already are.
    """
    pos = np.asarray(positions, dtype=np.int64)
    req = np.asarray(req_indices, dtype=np.int64)
    bt = np.asarray(block_table)
    if pos.shape != req.shape or pos.ndim != 1:
        raise ValueError(f"slot_mapping: positions {tuple(pos.shape)} and req_indices "
                         f"{tuple(req.shape)} must be equal 1-d shapes")
    valid = req >= 0
    blk = pos // block_size
    if valid.any() and (blk[valid] >= bt.shape[1]).any():
        bad = int(pos[valid][(blk[valid] >= bt.shape[1])][0])
        raise ValueError(f"slot_mapping: position {bad} needs block {bad // block_size}, "
                         f"but the block table has {bt.shape[1]} columns "
                         f"(block_size {block_size})")
    out = np.full(pos.shape, -1, dtype=np.int64)
    out[valid] = bt[req[valid], blk[valid]].astype(np.int64) * block_size + pos[valid] % block_size
    return out


def write_kv_cache(key, value, kv_cache, slot_mapping):
    """Scatters key/value [T, Hk, D] into kv_cache [2, NB, BS, Hk, D] at the
    tokens' slots (in place). Negative slots (padding) write zeros into slot
    0, the null block's: every request's padded block-table columns read the
    null block, and a masked-out key still reaches the output as 0 * value
    (NaN for a NaN value), so whatever the padded tokens' keys and values
    are, the null block stays zero."""
    if kv_cache.dim() != 5 or kv_cache.shape[0] != 2:
        raise ValueError(f"write_kv_cache: kv_cache {tuple(kv_cache.shape)} is not "
                         f"[2, num_blocks, block_size, kv_heads, head_size]")
    _, nb, bs, hk, d = kv_cache.shape
    t = slot_mapping.shape[0]
    if key.shape[1:] != (hk, d) or value.shape[1:] != (hk, d) or key.shape[0] < t \
            or value.shape[0] < t:
        raise ValueError(f"write_kv_cache: key {tuple(key.shape)} / value "
                         f"{tuple(value.shape)} do not fit {t} slots of a cache with "
                         f"{hk} kv heads of size {d}")
    pad = (slot_mapping < 0)[None, :, None, None]
    slots = slot_mapping.clamp(min=0)
    # One index_copy_ into the whole cache, not one per half: a write through
    # the view flat[0] reads the half out and patches it back (two copies of
    # it per step), while a write into the whole storage is a scatter into
    # the buffer that fused eager donates: in place, whatever the cache size.
    kv = torch.stack([key[:t], value[:t]]).to(kv_cache.dtype)
    kv_cache.view(2, nb * bs, hk, d).index_copy_(1, slots, torch.where(pad, 0, kv))


@dataclass
class PagedPlan:
    """One step's ragged-to-padded plan, shared by every attention layer.

    The step's query tokens are laid out in G groups of Lq rows; a group
    holds consecutive tokens of one request and attends over that request's
    keys. Per-request layout: G = num_reqs, group r is request r, Lq its
    padded query length. Chunked layout: a request's tokens fill
    ceil(query_len / Lq) groups, G = ceil(num_tokens / Lq) + num_reqs.

    q_index  [G, Lq]  token of each padded query row (padding: 0)
    out_index [T]     padded row (g * Lq + i) of each token (padding: 0)
    mask     [G, 1, Lq, S] bool, S = max_blocks * block_size: key s takes
                      part in row (g, i)
    group_req [G]     request of each group (None: the identity)
    """
    q_index: torch.Tensor
    out_index: torch.Tensor
    mask: torch.Tensor
    q_pos: torch.Tensor      # [G, Lq] position of each row (padding: -1)
    num_tokens: int
    num_reqs: int
    max_query_len: int       # Lq
    causal: bool = True
    windowed: dict = None    # sliding window -> its mask, made on first use
    group_req: torch.Tensor = None
    num_groups: int = None

    def mask_for(self, sliding_window):
        """The mask with a sliding window (key s > position - window) on top,
        built once per step and window on the device."""
        if not sliding_window or sliding_window <= 0 or not self.causal:
            return self.mask
        if self.windowed is None:
            self.windowed = {}
        m = self.windowed.get(sliding_window)
        if m is None:
            s = torch.arange(self.mask.shape[-1], device=self.mask.device)
            inside = s > (self.q_pos[:, :, None] - sliding_window)
            m = self.mask & inside[:, None]
            self.windowed[sliding_window] = m
        return m


def plan_step(query_start_loc, seq_lens, *, num_tokens, num_reqs, max_query_len=None,
              max_blocks, block_size, device, causal=True, sliding_window=None,
              query_chunk=None):
    """Builds the PagedPlan on the host from the step's CPU metadata
    (query_start_loc [r + 1], seq_lens [r], r <= num_reqs real requests) and
    moves it to `device`. num_tokens, num_reqs, max_blocks and either
    max_query_len (per-request layout: one group of max_query_len rows per
    request) or query_chunk (chunked layout: groups of query_chunk rows,
    ceil(num_tokens / query_chunk) + num_reqs of them) are the padded sizes
    (buckets) the programs are compiled for. The chunked layout bounds the
    padded query rows by num_tokens + num_reqs * query_chunk where the
    per-request one needs num_reqs * (longest query).
    """
    qsl = np.asarray(query_start_loc, dtype=np.int64)
    sl = np.asarray(seq_lens, dtype=np.int64)
    r = sl.shape[0]
    if qsl.shape != (r + 1,):
        raise ValueError(f"plan_step: query_start_loc {tuple(qsl.shape)} needs "
                         f"len(seq_lens) + 1 = {r + 1} entries")
    if (max_query_len is None) == (query_chunk is None):
        raise ValueError("plan_step: give exactly one of max_query_len (per-request "
                         "layout) and query_chunk (chunked layout)")
    chunked = query_chunk is not None
    lq = int(query_chunk if chunked else max_query_len)
    qlen = qsl[1:] - qsl[:-1]
    if r > num_reqs or qsl[-1] > num_tokens or (r and not chunked and qlen.max() > lq):
        raise ValueError(f"plan_step: {r} requests, {qsl[-1]} tokens, longest query "
                         f"{qlen.max() if r else 0} exceed the padded sizes {num_reqs}, "
                         f"{num_tokens}, {lq}")
    s_max = max_blocks * block_size
    if r and (sl.max() > s_max or (qlen > sl).any()):
        raise ValueError(f"plan_step: seq_lens {sl.tolist()} must be >= the query lengths "
                         f"{qlen.tolist()} and <= max_blocks * block_size = {s_max}")
    # groups of lq rows: each request's tokens in ceil(qlen / lq) of them (at
    # least one, so the per-request layout's group r is request r)
    ng = -(-num_tokens // lq) + num_reqs if chunked else num_reqs
    nch = np.maximum(1, -(-qlen // lq))
    first = np.concatenate([[0], np.cumsum(nch)])          # first group of each request
    g_real = int(first[-1])
    g_req = np.repeat(np.arange(r), nch)                    # [g_real]
    g_off = (np.arange(g_real) - first[:-1][g_req]) * lq    # token offset in its request
    i = np.arange(lq)
    live = g_off[:, None] + i[None, :] < qlen[g_req][:, None]   # [g_real, lq]
    q_index = np.zeros((ng, lq), dtype=np.int64)
    q_pos = np.full((ng, lq), -1, dtype=np.int64)           # -1: padding row
    kv_len = np.ones(ng, dtype=np.int64)
    q_index[:g_real] = np.where(live, qsl[:-1][g_req][:, None] + g_off[:, None] + i, 0)
    q_pos[:g_real] = np.where(live, (sl - qlen)[g_req][:, None] + g_off[:, None] + i, -1)
    kv_len[:g_real] = np.maximum(sl[g_req], 1)
    out_index = np.zeros(num_tokens, dtype=np.int64)
    n = int(qsl[-1])
    if n:
        tok_req = np.repeat(np.arange(r), qlen)
        k = np.arange(n) - qsl[:-1][tok_req]                 # index in its request
        out_index[:n] = (first[:-1][tok_req] + k // lq) * lq + k % lq
    s = np.arange(s_max)
    keep = np.broadcast_to(s[None, None, :] < kv_len[:, None, None], (ng, lq, s_max)).copy()
    if causal:
        keep &= s[None, None, :] <= q_pos[:, :, None]
        if sliding_window is not None and sliding_window > 0:
            keep &= s[None, None, :] > q_pos[:, :, None] - sliding_window
    pad = q_pos < 0
    keep[pad] = False
    keep[pad, 0] = True   # padding rows see key 0: no row is fully masked
    to = lambda a, dt: torch.from_numpy(a).to(dt).to(device)  # noqa: E731
    group_req = None
    if chunked:   # padding groups read request 0's blocks (their rows see key 0 only)
        gr = np.zeros(ng, dtype=np.int64)
        gr[:g_real] = g_req
        group_req = to(gr, torch.int64)
    return PagedPlan(q_index=to(q_index, torch.int64), out_index=to(out_index, torch.int64),
                     mask=to(keep[:, None], torch.bool), q_pos=to(q_pos, torch.int64),
                     num_tokens=num_tokens, num_reqs=num_reqs, max_query_len=lq,
                     causal=causal, group_req=group_req, num_groups=ng)


def paged_attention(query, kv_cache, block_table, plan, scale, sliding_window=None):
    """Attention of query [T, Hq, D] over the paged cache, [T, Hq, D] out.

    block_table [R, max_blocks] (R = plan.num_reqs; padded rows may hold any
    valid block id); the mask in `plan` decides which keys each row sees.
    """
    t, hq, d = query.shape
    _, nb, bs, hk, dv = kv_cache.shape
    r, mb = block_table.shape
    if hq % hk or d != dv:
        raise ValueError(f"paged_attention: {hq} query heads of size {d} over a cache of "
                         f"{hk} kv heads of size {dv} (query heads must be a multiple)")
    if r != plan.num_reqs or plan.mask.shape[-1] != mb * bs or t != plan.num_tokens:
        raise ValueError(f"paged_attention: block_table {tuple(block_table.shape)} and "
                         f"{t} tokens do not match the step plan ({plan.num_reqs} requests, "
                         f"{plan.num_tokens} tokens, {plan.mask.shape[-1]} keys)")
    if plan.group_req is not None:
        block_table = block_table.index_select(0, plan.group_req)
    g = block_table.shape[0]
    ids = block_table.reshape(-1).long()
    k = kv_cache[0].index_select(0, ids).view(g, mb * bs, hk, d).transpose(1, 2)
    v = kv_cache[1].index_select(0, ids).view(g, mb * bs, hk, d).transpose(1, 2)
    q = query.index_select(0, plan.q_index.reshape(-1))
    q = q.view(g, plan.max_query_len, hq, d).transpose(1, 2)   # [G, Hq, Lq, D]
    o = F.scaled_dot_product_attention(q.to(k.dtype), k, v,
                                       attn_mask=plan.mask_for(sliding_window),
                                       scale=scale, enable_gqa=hq != hk)
    o = o.transpose(1, 2).reshape(g * plan.max_query_len, hq, d)
    return o.index_select(0, plan.out_index)


def dense_moe(x, w13, w2, topk_weights, topk_ids, activation="silu"):
    """x [T, H], w13 [E, 2I, H] (gate rows then up rows), w2 [E, H, I],
    topk_weights / topk_ids [T, k] -> [T, H]."""
    e = w13.shape[0]
    if activation not in ("silu", "swiglu"):
        raise NotImplementedError(f"torchtpu.vllm MoE: activation {activation!r} "
                                  f"(only SiLU-gated experts)")
    gate_up = torch.einsum("th,eih->tei", x, w13)            # [T, E, 2I]
    gate, up = gate_up.chunk(2, dim=-1)
    y = torch.einsum("tei,ehi->teh", F.silu(gate) * up, w2)  # [T, E, H]
    dense = torch.zeros(x.shape[0], e, dtype=y.dtype, device=x.device)
    dense = dense.scatter_add(1, topk_ids.long(), topk_weights.to(y.dtype))
    return torch.einsum("te,teh->th", dense, y).to(x.dtype)
