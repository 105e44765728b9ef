"""A Llama-3 style dense decoder: RMSNorm, rotary position embeddings,
grouped-query attention (F.scaled_dot_product_attention, causal) and a SwiGLU
feed-forward block, with pre-norm residuals and an untied output head.

Written for this project from the published architecture; the flavours follow
the usual Llama-3 sizes ("debugmodel" is the small model the trainer uses).
Nothing here is device-specific: the same module trains on "cpu" and "tpu".

    args = LLAMA_FLAVORS["debugmodel"]
    model = Transformer(args)            # parameters initialised on the CPU
    logits = model(tokens)               # [batch, seq] int64 -> [batch, seq, vocab]
"""
import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaArgs:
    dim: int = 256
    n_layers: int = 6
    n_heads: int = 16
    n_kv_heads: int | None = None  # None: same as n_heads (no grouping)
    vocab_size: int = 2048
    multiple_of: int = 256         # SwiGLU hidden size is rounded up to this
    ffn_dim_multiplier: float | None = None
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    max_seq_len: int = 2048
    dropout: float = 0.0           # on attention probabilities and residual branches
    depth_init: bool = True        # output projections scaled by layer depth
    attention: str = "sdpa"        # sdpa | flash (the Pallas kernel, torchtpu.kernels)
    attn_head_dim: int | None = None  # None: dim // n_heads (Qwen3 decouples them)

    @property
    def head_dim(self):
        return self.attn_head_dim or self.dim // self.n_heads

    @property
    def kv_heads(self):
        return self.n_kv_heads or self.n_heads

    @property
    def ffn_hidden(self):
        """Llama's SwiGLU width: 2/3 of 4*dim, times the multiplier, rounded up."""
        hidden = int(2 * (4 * self.dim) / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        return self.multiple_of * ((hidden + self.multiple_of - 1) // self.multiple_of)


LLAMA_FLAVORS = {
    # For tests: a few layers, dim 64.
    "tiny": LlamaArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=264,
                      multiple_of=32, max_seq_len=256),
    "debugmodel": LlamaArgs(dim=256, n_layers=6, n_heads=16, vocab_size=2048),
    "small": LlamaArgs(dim=512, n_layers=8, n_heads=8, n_kv_heads=4, vocab_size=2048),
    # Reference sizes (Llama 3.2 1B, Llama 3 8B and 70B shapes, 128256-token
    # vocabulary; SwiGLU widths 8192, 14336 and 28672). Build the large ones on
    # the meta device (torchtpu.trainer.plan, --dry-run).
    "1B": LlamaArgs(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, vocab_size=128256,
                    ffn_dim_multiplier=1.5, multiple_of=256, max_seq_len=8192),
    "8B": LlamaArgs(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=128256,
                    ffn_dim_multiplier=1.3, multiple_of=1024, max_seq_len=8192),
    "70B": LlamaArgs(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, vocab_size=128256,
                     ffn_dim_multiplier=1.3, multiple_of=4096, max_seq_len=8192),
}


def llama_args(flavor, **overrides):
    """The flavour's arguments with `overrides` (e.g. vocab_size) applied."""
    if flavor not in LLAMA_FLAVORS:
        raise ValueError(f"llama flavour {flavor!r}: expected one of {sorted(LLAMA_FLAVORS)}")
    return replace(LLAMA_FLAVORS[flavor], **overrides)


# --- building blocks ----------------------------------------------------------------

class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in float32."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


def rope_tables(head_dim, max_seq_len, theta):
    """cos and sin of position * frequency: two [max_seq_len, head_dim/2] tables."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), freqs)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x, cos, sin):
    """Rotates consecutive pairs (x0, x1) of the last dimension by the position's
    angle. x: [batch, seq, heads, head_dim]; cos, sin: [seq, head_dim/2]."""
    b, s, h, d = x.shape
    xp = x.float().reshape(b, s, h, d // 2, 2)
    x0, x1 = xp[..., 0], xp[..., 1]
    c, si = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack((x0 * c - x1 * si, x0 * si + x1 * c), dim=-1)
    return out.reshape(b, s, h, d).type_as(x)


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = args.n_heads, args.kv_heads, args.head_dim
        if self.n_heads % self.n_kv:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv}")
        self.wq = nn.Linear(args.dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, args.dim, bias=False)
        self.dropout = args.dropout
        self.flash = None
        if args.attention == "flash":
            if args.dropout:
                raise ValueError("attention 'flash' (the Pallas kernel) has no dropout")
            from ..kernels.flash_attention import flash_attention
            self.flash = flash_attention
        elif args.attention != "sdpa":
            raise ValueError(f"attention {args.attention!r}: expected 'sdpa' or 'flash'")

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, s, self.n_kv, self.head_dim)
        v = self.wv(x).view(b, s, self.n_kv, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.flash is not None:  # causal, grouped-query: kv heads are not repeated
            out = self.flash(*(t.transpose(1, 2) for t in (q, k, v)))
            return self.wo(out.transpose(1, 2).reshape(b, s, -1))
        rep = self.n_heads // self.n_kv
        if rep > 1:  # grouped-query attention: each kv head serves `rep` query heads
            k = k[:, :, :, None, :].expand(b, s, self.n_kv, rep, self.head_dim)
            k = k.reshape(b, s, self.n_heads, self.head_dim)
            v = v[:, :, :, None, :].expand(b, s, self.n_kv, rep, self.head_dim)
            v = v.reshape(b, s, self.n_heads, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [b, heads, s, head_dim]
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id, args, ffn=None):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = ffn if ffn is not None else FeedForward(args.dim, args.ffn_hidden)
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.drop = nn.Dropout(args.dropout)
        n = (layer_id + 1) if args.depth_init else args.n_layers
        self.init_std = 0.02 / math.sqrt(2 * n)

    def forward(self, x, cos, sin):
        h = x + self.drop(self.attention(self.attention_norm(x), cos, sin))
        return h + self.drop(self.feed_forward(self.ffn_norm(h)))


# --- the model ----------------------------------------------------------------------

class Transformer(nn.Module):
    """tokens [batch, seq] -> logits [batch, seq, vocab_size]."""

    def __init__(self, args, block=TransformerBlock):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(block(i, args) for i in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        cos, sin = rope_tables(args.head_dim, args.max_seq_len, args.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """Embeddings N(0, 1); input projections N(0, 0.02) truncated at 2 std;
        output projections of each block scaled down with depth; head
        N(0, dim^-0.5). Run on the CPU, so that a seed gives the same model on
        every device."""
        nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers:
            std = layer.init_std
            for name, p in layer.named_parameters():
                if name.endswith("norm.weight"):
                    nn.init.ones_(p)
                elif name.endswith(("wo.weight", "w2", "w3", "w2.weight", "w3.weight")):
                    nn.init.trunc_normal_(p, std=std, a=-2 * std, b=2 * std)
                elif p.dim() >= 2:
                    nn.init.trunc_normal_(p, std=0.02, a=-0.04, b=0.04)
        nn.init.ones_(self.norm.weight)
        std = self.args.dim ** -0.5
        nn.init.trunc_normal_(self.output.weight, std=std, a=-3 * std, b=3 * std)

    def forward(self, tokens):
        s = tokens.shape[1]
        if s > self.args.max_seq_len:
            raise ValueError(f"sequence length {s} exceeds max_seq_len {self.args.max_seq_len}")
        cos, sin = self.rope_cos[:s], self.rope_sin[:s]
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h)).float()

    def aux_loss(self):
        """Extra loss terms of the last forward (none for a dense model)."""
        return None


def num_params(model, exclude_embedding=False):
    n = sum(p.numel() for p in model.parameters())
    if exclude_embedding:
        n -= model.tok_embeddings.weight.numel()
    return n


def flops_per_token(model, seq_len):
    """Training FLOPs per token as the usual MFU convention counts them:
    6 per (non-embedding) parameter for forward + backward, plus the attention
    score and value products, 12 * layers * heads * head_dim * seq_len (causal
    masking not discounted). MoE models count only the parameters a token uses."""
    a = model.args
    active = getattr(model, "active_params", None)
    n = active() if active is not None else num_params(model, exclude_embedding=True)
    return 6 * n + 12 * a.n_layers * a.n_heads * a.head_dim * seq_len
