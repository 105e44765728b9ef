"""A mixture-of-experts decoder: the Llama blocks of models/llama.py with the
feed-forward layer replaced by top-k routed SwiGLU experts.

Routing (per token): router logits -> softmax over experts -> top-k experts,
their probabilities renormalised to sum to 1. A Switch-Transformer style
load-balancing loss, n_experts * sum_e(fraction of assignments to e * mean
router probability of e), is kept per layer; Transformer.aux_loss() returns
their mean times aux_loss_coef, for the trainer to add to the loss.

Data parallelism (the trainer calls set_data_parallel_group with the group
of every data-parallel rank, replicas and shards): a run on R ranks routes
as one process on the R ranks' global batch. Each rank all_gathers the
per-expert assignment counts of every rank (one functional collective of
n_experts floats per layer: eager runs it through the process group,
torch.compile and make_fx trace it, and the compile path splits its graphs
around it), for two uses.

Load balancing, as Megatron's "global" load-balancing loss. With N tokens
on each of R ranks (NR in all), C_e the assignments to expert e summed over
the ranks and P_e the mean router probability of e over the rank's own
tokens, each rank computes
    aux_r = n_experts * sum_e C_e / (NR k) * P_e.
The counts come from top-k, so they carry no gradient: aux_r is linear in
P_e with the same coefficients on every rank, and the mean over ranks of P_e
is the mean probability over all NR tokens (each rank holds N of them). So
mean_r aux_r is exactly the one-process loss of the global batch, and
mean_r d aux_r / d theta its gradient; the data-parallel gradient average
(DDP's, FSDP2's, SimpleFSDP's Partial("avg")) takes that mean, as it does for
the ranks' cross-entropies. With each rank's own counts (c_e / (N k)) the
loss is a mean of products of per-rank means, not the product of global
means (with that and per-rank capacity, the 2-rank SimpleFSDP run of the
debug model drifted from one process by up to 2.8e-2 relative in 20 steps).

Capacity (capacity_scope "global", the default): an assignment is kept when
its position among its expert's assignments in the global batch's order
(the ranks' rows in rank order, as one process sees them: the counts of the
ranks before this one plus its position on this rank) is below the capacity
of the global token count. The same assignments are dropped as in one
process; a rank's buffer holds min(N, global capacity) slots per expert, at
most N: the expert matmuls of capacity_factor n_experts / top_k (2x the
debug model's rows on 2 ranks and more). This is needed, not a nicety:
measured over test_simple_fsdp's 20 steps of the debug model (4 rows of 32
tokens, capacity factor 2), the routing is far from balanced and one process
drops 6891 of 30720 assignments (101 of 120 layer forwards drop some), and
a capacity per rank's tokens would have dropped 6972 (2 ranks) or 7034 (4
ranks), other ones: the runs would part. capacity_scope "rank" keeps
Switch's / GShard's / Megatron's per-rank capacity (each rank's tokens
against the capacity of its token count: buffers of the rank's capacity;
a data-parallel run then differs from one process whenever a token drops).
self.dropped is the last forward's dropped assignments on this rank (a 0-d
tensor; Transformer.dropped() sums the layers).

Dispatch uses index ops only, with static shapes (no host round trip, one
compiled program per shape on XLA):
  1. sort the (token, expert) assignments by expert (stable argsort);
  2. each assignment's rank within its expert = position - first position of
     that expert (cumsum of per-expert counts); ranks >= capacity are dropped;
  3. gather the tokens into an [n_experts, capacity, dim] buffer (scatter by
     slot index), run all experts as batched matmuls;
  4. gather each kept assignment's output, weight it by its routing
     probability, scatter_add it back to its token.
capacity = ceil(capacity_factor * tokens * top_k / n_experts); a capacity
factor of n_experts / top_k or more never drops a token.
"""
import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from .llama import LlamaArgs, Transformer, TransformerBlock


@dataclass
class MoEArgs(LlamaArgs):
    n_experts: int = 8
    top_k: int = 2
    expert_hidden: int = 256       # SwiGLU width of one expert
    capacity_factor: float = 2.0
    capacity_scope: str = "global"  # data parallelism: "global" (one process's drops) | "rank"
    aux_loss_coef: float = 0.01
    use_gmm_kernel: bool = False   # experts through the Pallas grouped matmul


MOE_FLAVORS = {
    "tiny": MoEArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=264,
                    max_seq_len=256, n_experts=4, top_k=2, expert_hidden=64,
                    capacity_factor=2.0),
    "debugmodel": MoEArgs(dim=256, n_layers=6, n_heads=16, vocab_size=2048,
                          n_experts=8, top_k=2, expert_hidden=256),
    "small": MoEArgs(dim=512, n_layers=8, n_heads=8, n_kv_heads=4, vocab_size=2048,
                     n_experts=16, top_k=2, expert_hidden=512),
    # Qwen3-30B-A3B's shapes (its published config): 48 layers of dim 2048,
    # 32 query / 4 kv heads of head_dim 128 (wider than dim / heads), 128
    # experts of SwiGLU width 768, top-8 renormalised, no shared expert,
    # 151936-token vocabulary, untied head. Qwen3's q/k RMSNorm (256
    # parameters a layer) is not modelled. About 30.5e9 parameters, 3.3e9 used
    # per token. Build it on the meta device. Its capacity is per rank: a
    # global one on many ranks gives each rank min(tokens, ranks x capacity)
    # slots per expert, up to n_experts / (capacity_factor x top_k) = 8x the
    # expert rows.
    "30B-A3B": MoEArgs(dim=2048, n_layers=48, n_heads=32, n_kv_heads=4, attn_head_dim=128,
                       vocab_size=151936, norm_eps=1e-6, rope_theta=1e6, max_seq_len=40960,
                       n_experts=128, top_k=8, expert_hidden=768, capacity_factor=2.0,
                       aux_loss_coef=0.001, capacity_scope="rank"),
}


def moe_args(flavor, **overrides):
    if flavor not in MOE_FLAVORS:
        raise ValueError(f"moe flavour {flavor!r}: expected one of {sorted(MOE_FLAVORS)}")
    return replace(MOE_FLAVORS[flavor], **overrides)


class MoEFeedForward(nn.Module):
    """x [batch, seq, dim] -> [batch, seq, dim]; the layer's load-balancing
    loss of the last forward is in self.aux_loss."""

    def __init__(self, args):
        super().__init__()
        e, d, h = args.n_experts, args.dim, args.expert_hidden
        self.n_experts, self.top_k, self.capacity_factor = e, args.top_k, args.capacity_factor
        if args.capacity_scope not in ("global", "rank"):
            raise ValueError(f"MoE capacity_scope {args.capacity_scope!r}: expected 'global' "
                             f"or 'rank'")
        self.capacity_scope = args.capacity_scope
        self.router = nn.Linear(d, e, bias=False)
        self.w1 = nn.Parameter(torch.empty(e, d, h))  # gate projection, per expert
        self.w3 = nn.Parameter(torch.empty(e, d, h))  # up projection
        self.w2 = nn.Parameter(torch.empty(e, h, d))  # down projection
        self.aux_loss = None
        self.dropped = None   # assignments over capacity in the last forward (a 0-d tensor)
        self.dp_group = None  # the data-parallel group whose tokens the loss balances
        self.dp_size, self.dp_rank = 1, 0
        self.gmm = None
        if args.use_gmm_kernel:
            from ..kernels.gmm import gmm
            self.gmm = gmm

    def set_data_parallel_group(self, group):
        """The load-balancing loss counts assignments over `group` (a
        ProcessGroup of the data-parallel ranks, which see different tokens);
        None: this rank's tokens alone."""
        import torch.distributed as dist
        self.dp_group = group
        self.dp_size = 1 if group is None else dist.get_world_size(group)
        self.dp_rank = 0 if group is None else dist.get_rank(group)

    def capacity(self, n_tokens):
        return math.ceil(self.capacity_factor * n_tokens * self.top_k / self.n_experts)

    def forward(self, x):
        b, s, d = x.shape
        e, k = self.n_experts, self.top_k
        xt = x.reshape(-1, d)                                   # [T, d]
        n = xt.shape[0]
        probs = F.softmax(self.router(xt).float(), dim=-1)      # [T, e]
        top_p, top_e = torch.topk(probs, k, dim=-1)             # [T, k]
        top_p = (top_p / top_p.sum(-1, keepdim=True)).to(x.dtype)

        # load balancing: fraction of assignments per expert x mean probability
        counts = torch.zeros(e, device=x.device, dtype=torch.float32)
        counts = counts.scatter_add(0, top_e.reshape(-1),
                                    torch.ones(n * k, device=x.device, dtype=torch.float32))
        total, before = counts, None
        if self.dp_size > 1:  # every rank's counts (see the module docstring)
            import torch.distributed._functional_collectives as funcol
            every = funcol.all_gather_single(counts, 0, self.dp_group).view(self.dp_size, e)
            total = every.sum(0)
            if self.capacity_scope == "global":
                before = every[:self.dp_rank].sum(0)  # assignments of the ranks before this one
        self.aux_loss = e * torch.sum(total / (n * self.dp_size * k) * probs.mean(0))

        # 1-2: sort assignments by expert; rank within expert; slot in the buffer
        flat_e = top_e.reshape(-1)                              # [T*k]
        order = torch.argsort(flat_e, stable=True)              # [T*k]
        sorted_e = flat_e[order]
        starts = torch.cumsum(counts.long(), 0) - counts.long()  # first position of each expert
        rank = torch.arange(n * k, device=x.device) - starts[sorted_e]
        if before is None:  # this rank's tokens, this rank's capacity
            cap = slots = self.capacity(n)
            keep = rank < cap
        else:  # the position in the global batch's order against the global capacity
            cap = self.capacity(n * self.dp_size)
            slots = min(n, cap)  # a rank keeps at most its n tokens of an expert
            keep = rank + before.long()[sorted_e] < cap
        self.dropped = n * k - keep.sum()
        slot = torch.where(keep, sorted_e * slots + rank, torch.full_like(rank, e * slots))

        token = order // k                                      # token of each sorted assignment
        if self.gmm is not None:  # 3-4 with the grouped matmul: rows sorted by expert
            sizes = counts.to(torch.int32)
            xs = xt[token]                                      # [T*k, d]
            hs = F.silu(self.gmm(xs, self.w1, sizes)) * self.gmm(xs, self.w3, sizes)
            y = self.gmm(hs, self.w2, sizes)                    # [T*k, d]
            weight = (top_p.reshape(-1)[order] * keep.to(x.dtype))[:, None]
            return xt.new_zeros(n, d).index_add(0, token, y * weight).view(b, s, d)

        # 3: gather tokens into [e, slots, d] (one spare row for dropped ones), run experts
        buf = x.new_zeros(e * slots + 1, d)
        buf = buf.index_copy(0, slot, xt[token])
        hx = buf[:-1].view(e, slots, d)
        y = torch.bmm(F.silu(torch.bmm(hx, self.w1)) * torch.bmm(hx, self.w3), self.w2)

        # 4: combine: weighted outputs scattered back to their tokens
        y = torch.cat((y.reshape(e * slots, d), y.new_zeros(1, d)))
        weight = (top_p.reshape(-1)[order] * keep.to(x.dtype))[:, None]
        out = xt.new_zeros(n, d).index_add(0, token, y[slot] * weight)
        return out.view(b, s, d)


class MoEBlock(TransformerBlock):
    def __init__(self, layer_id, args):
        super().__init__(layer_id, args, ffn=MoEFeedForward(args))


class MoETransformer(Transformer):
    """The Llama decoder with MoE feed-forward layers."""

    def __init__(self, args):
        super().__init__(args, block=MoEBlock)

    @torch.no_grad()
    def init_weights(self):
        super().init_weights()
        for layer in self.layers:
            ff = layer.feed_forward
            nn.init.trunc_normal_(ff.router.weight, std=0.02, a=-0.04, b=0.04)
            nn.init.trunc_normal_(ff.w1, std=0.02, a=-0.04, b=0.04)
            for w in (ff.w2, ff.w3):
                nn.init.trunc_normal_(w, std=layer.init_std, a=-2 * layer.init_std,
                                      b=2 * layer.init_std)

    def aux_loss(self):
        losses = [layer.feed_forward.aux_loss for layer in self.layers]
        if any(a is None for a in losses):
            return None
        return self.args.aux_loss_coef * torch.stack(losses).mean()

    def set_data_parallel_group(self, group):
        """Every MoE layer balances its load over `group` (None: this rank)."""
        for layer in self.layers:
            layer.feed_forward.set_data_parallel_group(group)

    def dropped(self):
        """Assignments dropped over capacity in the last forward, all layers (a
        0-d tensor; reading it waits for the device), or None before one."""
        d = [layer.feed_forward.dropped for layer in self.layers]
        if any(v is None for v in d):
            return None
        return torch.stack(d).sum()

    def active_params(self):
        """Parameters one token uses (non-embedding): every dense weight, the
        router, and top_k of the n_experts experts."""
        total = sum(p.numel() for p in self.parameters()) - self.tok_embeddings.weight.numel()
        a = self.args
        per_expert = 3 * a.dim * a.expert_hidden
        return total - a.n_layers * (a.n_experts - a.top_k) * per_expert
