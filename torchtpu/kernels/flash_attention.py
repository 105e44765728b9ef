"""Blocked flash attention (causal, grouped-query) as a Pallas kernel.

    out = flash_attention(q, k, v)   # q [B, Hq, L, D], k/v [B, Hk, S, D], Hk | Hq

The forward is a Pallas kernel: a grid over (batch, query head, query block);
each program streams the key/value blocks of its kv head (GQA: query head h
reads kv head h // (Hq // Hk)) with an online softmax, and skips the blocks a
causal mask hides entirely. The backward program reruns the forward kernel
for its log-sum-exp, then two Pallas kernels recompute the probabilities
block by block (FlashAttention-2's backward): dq over query blocks, dk/dv
over kv blocks, summing the query heads that share each kv head.

On this machine the kernel runs with `interpret=True`: Pallas lowers it to
plain StableHLO (loops of dynamic slices), which the core splices into the
calling program like any JAX function. On a TPU, `interpret=False` lowers the
same kernel to a Mosaic custom call (`tpu_custom_call`) that libtpu compiles;
see the README ("Custom kernels").
"""
import functools
import math

import torch

from . import jax_op

BLOCK_Q = 32
BLOCK_K = 32


def _fwd_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, *, scale, causal, block_q, block_k, seq_k):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    qi = pl.program_id(2)
    q = q_ref[...].astype(jnp.float32) * scale             # [bq, D]
    d = q.shape[-1]
    rows = qi * block_q + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 0)
    nk = seq_k // block_k
    if causal:  # blocks right of the diagonal see nothing
        nk = jnp.minimum(nk, ((qi + 1) * block_q + block_k - 1) // block_k)

    def body(j, carry):
        m, l, acc = carry
        k = k_ref[pl.ds(j * block_k, block_k), :].astype(jnp.float32)  # [bk, D]
        v = v_ref[pl.ds(j * block_k, block_k), :].astype(jnp.float32)
        s = jnp.dot(q, k.T, preferred_element_type=jnp.float32)       # [bq, bk]
        if causal:
            cols = j * block_k + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
            s = jnp.where(cols <= rows, s, -jnp.inf)
        m_new = jnp.maximum(m, s.max(axis=-1))
        p = jnp.exp(s - m_new[:, None])
        alpha = jnp.exp(m - m_new)
        l = alpha * l + p.sum(axis=-1)
        acc = alpha[:, None] * acc + jnp.dot(p, v, preferred_element_type=jnp.float32)
        return m_new, l, acc

    init = (jnp.full((block_q,), -jnp.inf, jnp.float32), jnp.zeros((block_q,), jnp.float32),
            jnp.zeros((block_q, d), jnp.float32))
    m, l, acc = jax.lax.fori_loop(0, nk, body, init)
    o_ref[...] = (acc / l[:, None]).astype(o_ref.dtype)
    lse_ref[...] = m + jnp.log(l)


def flash_forward(q, k, v, *, causal=True, scale=None, block_q=BLOCK_Q, block_k=BLOCK_K,
                  interpret=True):
    """(out [B, Hq, L, D], lse [B, Hq, L] f32) with a Pallas kernel."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    B, Hq, L, D = q.shape
    Hk, S = k.shape[1], k.shape[2]
    group = Hq // Hk
    bq, bk = min(block_q, L), min(block_k, S)
    if L % bq or S % bk or Hq % Hk:
        raise ValueError(f"flash_attention: L={L}, S={S} must be multiples of the blocks "
                         f"({bq}, {bk}) and Hk={Hk} must divide Hq={Hq}")
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    kernel = functools.partial(_fwd_kernel, scale=scale, causal=causal, block_q=bq,
                               block_k=bk, seq_k=S)
    return pl.pallas_call(
        kernel,
        grid=(B, Hq, L // bq),
        in_specs=[
            pl.BlockSpec((None, None, bq, D), lambda b, h, i: (b, h, i, 0)),
            pl.BlockSpec((None, None, S, D), lambda b, h, i: (b, h // group, 0, 0)),
            pl.BlockSpec((None, None, S, D), lambda b, h, i: (b, h // group, 0, 0)),
        ],
        out_specs=[
            pl.BlockSpec((None, None, bq, D), lambda b, h, i: (b, h, i, 0)),
            pl.BlockSpec((None, None, bq), lambda b, h, i: (b, h, i)),
        ],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((B, Hq, L), jnp.float32)],
        interpret=interpret,
    )(q, k, v)


def _dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, *, scale, causal,
               block_q, block_k, seq_k):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    qi = pl.program_id(2)
    q = q_ref[...].astype(jnp.float32)                         # [bq, D]
    do = do_ref[...].astype(jnp.float32)
    lse, delta = lse_ref[...], delta_ref[...]                  # [bq]
    rows = qi * block_q + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 0)
    nk = seq_k // block_k
    if causal:
        nk = jnp.minimum(nk, ((qi + 1) * block_q + block_k - 1) // block_k)

    def body(j, dq):
        k = k_ref[pl.ds(j * block_k, block_k), :].astype(jnp.float32)
        v = v_ref[pl.ds(j * block_k, block_k), :].astype(jnp.float32)
        s = jnp.dot(q, k.T, preferred_element_type=jnp.float32) * scale
        p = jnp.exp(s - lse[:, None])
        if causal:
            cols = j * block_k + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
            p = jnp.where(cols <= rows, p, 0.0)
        dp = jnp.dot(do, v.T, preferred_element_type=jnp.float32)
        ds = p * (dp - delta[:, None])
        return dq + jnp.dot(ds, k, preferred_element_type=jnp.float32) * scale

    dq = jax.lax.fori_loop(0, nk, body, jnp.zeros(q.shape, jnp.float32))
    dq_ref[...] = dq.astype(dq_ref.dtype)


def _dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, *, scale,
                causal, block_q, block_k, seq_q, group):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    kj = pl.program_id(2)
    k = k_ref[...].astype(jnp.float32)                         # [bk, D]
    v = v_ref[...].astype(jnp.float32)
    cols = kj * block_k + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
    nq = seq_q // block_q
    first = (kj * block_k) // block_q if causal else 0        # blocks above see nothing

    def head(r, carry):                                        # each query head of the group
        def body(i, carry):
            dk, dv = carry
            q = q_ref[r, pl.ds(i * block_q, block_q), :].astype(jnp.float32)
            do = do_ref[r, pl.ds(i * block_q, block_q), :].astype(jnp.float32)
            lse = lse_ref[r, pl.ds(i * block_q, block_q)]
            delta = delta_ref[r, pl.ds(i * block_q, block_q)]
            s = jnp.dot(q, k.T, preferred_element_type=jnp.float32) * scale
            p = jnp.exp(s - lse[:, None])                      # [bq, bk]
            if causal:
                rows = i * block_q + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 0)
                p = jnp.where(cols <= rows, p, 0.0)
            dv = dv + jnp.dot(p.T, do, preferred_element_type=jnp.float32)
            dp = jnp.dot(do, v.T, preferred_element_type=jnp.float32)
            ds = p * (dp - delta[:, None])
            dk = dk + jnp.dot(ds.T, q, preferred_element_type=jnp.float32) * scale
            return dk, dv
        return jax.lax.fori_loop(first, nq, body, carry)

    zero = jnp.zeros(k.shape, jnp.float32)
    dk, dv = jax.lax.fori_loop(0, group, head, (zero, zero))
    dk_ref[...] = dk.astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def flash_backward(q, k, v, out, lse, dout, *, causal=True, scale=None, block_q=BLOCK_Q,
                   block_k=BLOCK_K, interpret=True):
    """Gradients (dq, dk, dv) with two Pallas kernels that recompute the
    probabilities block by block from the forward's log-sum-exp (FlashAttention
    2's backward): one over query blocks for dq, one over kv blocks (summing
    the query heads of its group) for dk and dv. Nothing of size L x S is
    stored."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    B, Hq, L, D = q.shape
    Hk, S = k.shape[1], k.shape[2]
    group = Hq // Hk
    bq, bk = min(block_q, L), min(block_k, S)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    delta = jnp.sum(dout.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)  # [B, Hq, L]
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, scale=scale, causal=causal, block_q=bq, block_k=bk,
                          seq_k=S),
        grid=(B, Hq, L // bq),
        in_specs=[
            pl.BlockSpec((None, None, bq, D), lambda b, h, i: (b, h, i, 0)),
            pl.BlockSpec((None, None, S, D), lambda b, h, i: (b, h // group, 0, 0)),
            pl.BlockSpec((None, None, S, D), lambda b, h, i: (b, h // group, 0, 0)),
            pl.BlockSpec((None, None, bq, D), lambda b, h, i: (b, h, i, 0)),
            pl.BlockSpec((None, None, bq), lambda b, h, i: (b, h, i)),
            pl.BlockSpec((None, None, bq), lambda b, h, i: (b, h, i)),
        ],
        out_specs=pl.BlockSpec((None, None, bq, D), lambda b, h, i: (b, h, i, 0)),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        interpret=interpret,
    )(q, k, v, dout, lse, delta)
    dk, dv = pl.pallas_call(
        functools.partial(_dkv_kernel, scale=scale, causal=causal, block_q=bq, block_k=bk,
                          seq_q=L, group=group),
        grid=(B, Hk, S // bk),
        in_specs=[
            pl.BlockSpec((None, group, L, D), lambda b, h, j: (b, h, 0, 0)),
            pl.BlockSpec((None, None, bk, D), lambda b, h, j: (b, h, j, 0)),
            pl.BlockSpec((None, None, bk, D), lambda b, h, j: (b, h, j, 0)),
            pl.BlockSpec((None, group, L, D), lambda b, h, j: (b, h, 0, 0)),
            pl.BlockSpec((None, group, L), lambda b, h, j: (b, h, 0)),
            pl.BlockSpec((None, group, L), lambda b, h, j: (b, h, 0)),
        ],
        out_specs=[pl.BlockSpec((None, None, bk, D), lambda b, h, j: (b, h, j, 0)),
                   pl.BlockSpec((None, None, bk, D), lambda b, h, j: (b, h, j, 0))],
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype),
                   jax.ShapeDtypeStruct(v.shape, v.dtype)],
        interpret=interpret,
    )(q, k, v, dout, lse, delta)
    return dq, dk, dv


# --- the torch op -------------------------------------------------------------------------

def _forward(q, k, v):
    return flash_forward(q, k, v)[0]


def _vjp(q, k, v, dout):
    out, lse = flash_forward(q, k, v)  # recomputed in the backward program
    return flash_backward(q, k, v, out, lse, dout)


# Causal attention of q [B, Hq, L, D] over k, v [B, Hk, S, D] (Hk | Hq), scale
# 1/sqrt(D): F.scaled_dot_product_attention(q, k, v, is_causal=True,
# enable_gqa=True).
flash_attention = jax_op("torchtpu_kernels::flash_attention", _forward, vjp=_vjp)
