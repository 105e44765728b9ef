"""Grouped matmul for MoE experts as a Pallas kernel.

    out = gmm(lhs, rhs, group_sizes)   # lhs [M, K], rhs [G, K, N], group_sizes [G] i32

Rows of lhs are sorted by expert: the first group_sizes[0] rows use rhs[0],
the next group_sizes[1] rows rhs[1], and so on (sum(group_sizes) <= M; rows
past the last group come out zero). The forward is a Pallas kernel over a
grid of (row tile, column tile); each program visits only the groups that
overlap its rows (bounds from the cumulative group sizes) and masks the rows
of each. The backward: d lhs is the same kernel against rhs transposed;
d rhs[g] = lhs_g^T @ dout_g is a second Pallas kernel (tgmm) whose program g
visits only the row tiles of group g.

Runs with `interpret=True` here (plain StableHLO); on a TPU the same kernel
lowers to a Mosaic custom call (megablox's gmm is the tuned production
version of this idea).
"""
import functools

from . import jax_op

BLOCK_M = 32
BLOCK_N = 32


def _gmm_kernel(sizes_ref, lhs_ref, rhs_ref, out_ref, *, block_m, groups):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    i = pl.program_id(0)
    sizes = sizes_ref[...]                       # [G] i32
    ends = jnp.cumsum(sizes)
    starts = ends - sizes
    r0 = i * block_m
    rows = r0 + jax.lax.broadcasted_iota(jnp.int32, (block_m, 1), 0)
    first = jnp.sum((ends <= r0).astype(jnp.int32))            # groups before the tile
    last = jnp.minimum(jnp.sum((starts < r0 + block_m).astype(jnp.int32)), groups)
    x = lhs_ref[...].astype(jnp.float32)                          # [bm, K]

    def body(g, acc):
        w = rhs_ref[g].astype(jnp.float32)                        # [K, bn]
        s = jax.lax.dynamic_index_in_dim(starts, g, keepdims=False)
        e = jax.lax.dynamic_index_in_dim(ends, g, keepdims=False)
        y = jnp.dot(x, w, preferred_element_type=jnp.float32)
        return acc + jnp.where((rows >= s) & (rows < e), y, 0.0)

    acc = jax.lax.fori_loop(first, last, body, jnp.zeros(out_ref.shape, jnp.float32))
    out_ref[...] = acc.astype(out_ref.dtype)


def gmm_forward(lhs, rhs, group_sizes, *, block_m=BLOCK_M, block_n=BLOCK_N, interpret=True):
    import jax
    from jax.experimental import pallas as pl
    M, K = lhs.shape
    G, _, N = rhs.shape
    bm, bn = min(block_m, M), min(block_n, N)
    if M % bm or N % bn:
        raise ValueError(f"gmm: M={M}, N={N} must be multiples of the tiles ({bm}, {bn})")
    kernel = functools.partial(_gmm_kernel, block_m=bm, groups=G)
    return pl.pallas_call(
        kernel,
        grid=(M // bm, N // bn),
        in_specs=[
            pl.BlockSpec((G,), lambda i, j: (0,)),
            pl.BlockSpec((bm, K), lambda i, j: (i, 0)),
            pl.BlockSpec((G, K, bn), lambda i, j: (0, 0, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((M, N), lhs.dtype),
        interpret=interpret,
    )(group_sizes, lhs, rhs)


def _tgmm_kernel(sizes_ref, lhs_ref, dout_ref, out_ref, *, block_m, rows_total):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    g = pl.program_id(0)
    sizes = sizes_ref[...]
    ends = jnp.cumsum(sizes)
    end = jax.lax.dynamic_index_in_dim(ends, g, keepdims=False)
    start = end - jax.lax.dynamic_index_in_dim(sizes, g, keepdims=False)
    first = start // block_m
    last = jnp.minimum((end + block_m - 1) // block_m, rows_total // block_m)

    def body(t, acc):                          # the row tiles that overlap group g
        x = lhs_ref[pl.ds(t * block_m, block_m), :].astype(jnp.float32)    # [bm, K]
        dy = dout_ref[pl.ds(t * block_m, block_m), :].astype(jnp.float32)  # [bm, N]
        rows = t * block_m + jax.lax.broadcasted_iota(jnp.int32, (block_m, 1), 0)
        x = jnp.where((rows >= start) & (rows < end), x, 0.0)
        return acc + jnp.dot(x.T, dy, preferred_element_type=jnp.float32)

    acc = jax.lax.fori_loop(first, last, body, jnp.zeros(out_ref.shape, jnp.float32))
    out_ref[...] = acc.astype(out_ref.dtype)


def tgmm(lhs, dout, group_sizes, *, block_m=BLOCK_M, interpret=True):
    """out [G, K, N]: out[g] = lhs_g^T @ dout_g over the rows of group g."""
    import jax
    from jax.experimental import pallas as pl
    M, K = lhs.shape
    N = dout.shape[1]
    G = group_sizes.shape[0]
    bm = min(block_m, M)
    return pl.pallas_call(
        functools.partial(_tgmm_kernel, block_m=bm, rows_total=M),
        grid=(G,),
        in_specs=[pl.BlockSpec((G,), lambda g: (0,)),
                  pl.BlockSpec((M, K), lambda g: (0, 0)),
                  pl.BlockSpec((M, N), lambda g: (0, 0))],
        out_specs=pl.BlockSpec((None, K, N), lambda g: (g, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((G, K, N), lhs.dtype),
        interpret=interpret,
    )(group_sizes, lhs, dout)


def gmm_backward(lhs, rhs, group_sizes, dout):
    import jax.numpy as jnp
    dlhs = gmm_forward(dout, jnp.swapaxes(rhs, 1, 2), group_sizes)
    drhs = tgmm(lhs, dout, group_sizes).astype(rhs.dtype)
    return dlhs, drhs, jnp.zeros(group_sizes.shape, group_sizes.dtype)


# out [M, N] = rows of lhs [M, K] grouped by group_sizes [G] (int32), each group
# times its rhs[g] ([G, K, N]).
gmm = jax_op("torchtpu_kernels::gmm", lambda lhs, rhs, group_sizes: gmm_forward(lhs, rhs, group_sizes),
             vjp=gmm_backward)
