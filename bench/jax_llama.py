"""The Llama model of torchtpu.models.llama written in JAX, for benchmarks: the
same architecture (RMSNorm, interleaved-pair rotary embeddings, grouped-query
causal attention, SwiGLU, untied head), the same parameters (taken from a
torch state_dict), the same loss (mean token cross-entropy) and AdamW
(PyTorch's defaults: decoupled weight decay, bias correction).

    params = params_from_torch(model.state_dict(), args)
    step = make_train_step(args, lr=1e-3)            # one jax.jit program
    params, opt_state, loss = step(params, opt_state, tokens)

Needs `jax` (jaxlib with its CPU backend: the same XLA as the "tpu" device's
CPU plugin). bench/train_step.py imports this module only when jax is
installed; install it with `.venv/bin/pip install jax` (about 620 MB; 0.10.x
was seen installable here). Never a test dependency."""
import math

import jax
import jax.numpy as jnp
import numpy as np


def params_from_torch(state_dict, args):
    """{name: jnp.float32 array} from a torchtpu llama state_dict (CPU tensors).
    Linear weights are kept as PyTorch stores them ([out, in])."""
    del args
    return {k: jnp.asarray(v.detach().cpu().float().numpy()) for k, v in state_dict.items()
            if not k.startswith("rope_")}


def rope_tables(head_dim, max_seq_len, theta):
    freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.outer(np.arange(max_seq_len, dtype=np.float64), freqs)
    return jnp.asarray(np.cos(angles), jnp.float32), jnp.asarray(np.sin(angles), jnp.float32)


# --- the model ------------------------------------------------------------------------

def rms_norm(x, w, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def apply_rope(x, cos, sin):
    """x [b, s, h, d]; cos, sin [s, d/2]: rotates consecutive pairs."""
    b, s, h, d = x.shape
    xp = x.reshape(b, s, h, d // 2, 2)
    x0, x1 = xp[..., 0], xp[..., 1]
    c, si = cos[None, :, None, :], sin[None, :, None, :]
    return jnp.stack((x0 * c - x1 * si, x0 * si + x1 * c), axis=-1).reshape(b, s, h, d)


def linear(x, w):
    return x @ w.T


def attention(p, pre, x, cos, sin, args):
    b, s, _ = x.shape
    nh, nkv, hd = args.n_heads, args.kv_heads, args.head_dim
    q = linear(x, p[pre + "wq.weight"]).reshape(b, s, nh, hd)
    k = linear(x, p[pre + "wk.weight"]).reshape(b, s, nkv, hd)
    v = linear(x, p[pre + "wv.weight"]).reshape(b, s, nkv, hd)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    rep = nh // nkv
    if rep > 1:
        k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))  # [b, h, s, d]
    scores = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(hd)
    mask = jnp.tril(jnp.ones((s, s), bool))
    scores = jnp.where(mask, scores, -jnp.inf)
    out = jax.nn.softmax(scores, axis=-1) @ v
    return linear(out.transpose(0, 2, 1, 3).reshape(b, s, nh * hd), p[pre + "wo.weight"])


def feed_forward(p, pre, x):
    h = jax.nn.silu(linear(x, p[pre + "w1.weight"])) * linear(x, p[pre + "w3.weight"])
    return linear(h, p[pre + "w2.weight"])


def forward(p, tokens, args, cos, sin):
    """tokens [b, s] int32 -> logits [b, s, vocab]."""
    s = tokens.shape[1]
    cos, sin = cos[:s], sin[:s]
    h = p["tok_embeddings.weight"][tokens]
    for i in range(args.n_layers):
        pre = f"layers.{i}."
        h = h + attention(p, pre + "attention.",
                          rms_norm(h, p[pre + "attention_norm.weight"], args.norm_eps),
                          cos, sin, args)
        h = h + feed_forward(p, pre + "feed_forward.",
                             rms_norm(h, p[pre + "ffn_norm.weight"], args.norm_eps))
    return linear(rms_norm(h, p["norm.weight"], args.norm_eps), p["output.weight"])


def loss_fn(p, tokens, args, cos, sin):
    logits = forward(p, tokens[:, :-1], args, cos, sin)
    logp = jax.nn.log_softmax(logits, axis=-1)
    target = tokens[:, 1:]
    return -jnp.mean(jnp.take_along_axis(logp, target[..., None], axis=-1))


# --- training ---------------------------------------------------------------------------

def adamw_init(params):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return {"step": jnp.zeros((), jnp.int32), "m": zeros,
            "v": jax.tree_util.tree_map(jnp.zeros_like, params)}


def make_train_step(args, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    """One jitted step: loss, gradients and torch.optim.AdamW's update."""
    cos, sin = rope_tables(args.head_dim, args.max_seq_len, args.rope_theta)
    b1, b2 = betas

    def step(params, opt, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, args, cos, sin)
        t = opt["step"] + 1
        bc1 = 1 - b1 ** t.astype(jnp.float32)
        bc2 = 1 - b2 ** t.astype(jnp.float32)

        def update(p, g, m, v):
            p = p * (1 - lr * weight_decay)
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            p = p - lr * (m / bc1) / (jnp.sqrt(v / bc2) + eps)
            return p, m, v

        out = {k: update(params[k], grads[k], opt["m"][k], opt["v"][k]) for k in params}
        new_p = {k: o[0] for k, o in out.items()}
        new_opt = {"step": t, "m": {k: o[1] for k, o in out.items()},
                   "v": {k: o[2] for k, o in out.items()}}
        return new_p, new_opt, loss

    return jax.jit(step, donate_argnums=(0, 1))
