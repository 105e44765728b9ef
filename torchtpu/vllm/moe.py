"""Mixture-of-experts layers on "tpu": vLLM's unquantized FusedMoE method
for an out-of-tree platform leaves the expert computation to the plugin.
Ours is dense and fixed-shape: every token goes through every expert as one
batched matmul per projection, and the router's top-k weights (zero for the
experts not chosen) combine the results. E times the routed FLOPs, but no
data-dependent shapes, so a bucket stays one program; right for small
expert counts, where a grouped matmul (torchtpu.kernels.gmm) is the next
step for large ones.

Shared experts (Qwen2-MoE, DeepSeek): vLLM's MoE runner owns them. It
calls our apply() with the layer's SharedExperts and their input, but runs
them itself, before the routed experts (SharedExpertsOrder.NO_OVERLAP),
unless the method's kernel says it overlaps them with its own dispatch
(mk_can_overlap_shared_experts, False here: no modular kernel). apply()
returns the routed output only; the runner pairs it with the shared output
((shared_out, routed_out), what FusedMoE's moe_forward_shared answers) and
the layer adds them, reducing across tensor-parallel ranks as configured."""
import torch
from vllm.model_executor.custom_op import op_registry_oot
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import \
    UnquantizedFusedMoEMethod

from .ops import dense_moe


class TpuUnquantizedFusedMoEMethod(UnquantizedFusedMoEMethod):
    @property
    def is_monolithic(self):
        return False   # the router selects experts, then forward_native runs

    @property
    def mk_can_overlap_shared_experts(self):
        return False   # the runner runs shared experts (see the module doc)

    def forward_native(self, layer, x, topk_weights, topk_ids, shared_experts=None,
                       shared_experts_input=None):
        if getattr(layer, "expert_map", None) is not None:
            raise NotImplementedError("torchtpu.vllm MoE: expert parallelism (expert_map)")
        if getattr(layer, "apply_router_weight_on_input", False):
            raise NotImplementedError("torchtpu.vllm MoE: apply_router_weight_on_input")
        act = getattr(layer, "activation", "silu")
        act = getattr(act, "value", act)
        act = str(act).lower()
        # shared_experts / shared_experts_input: already run by the runner
        # (NO_OVERLAP), which pairs their output with ours; nothing to do here.
        return dense_moe(x, layer.w13_weight, layer.w2_weight, topk_weights, topk_ids, act)

    forward_oot = forward_native
    forward_cuda = forward_native


def _topk_routing(score):
    def route(topk_weights, topk_ids, token_expert_indices, gating_output, renormalize=False,
              is_padding=None):
        p = score(gating_output.float())
        w, i = p.topk(topk_ids.shape[-1], dim=-1)
        if renormalize:
            w = w / w.sum(-1, keepdim=True)
        topk_weights.copy_(w.to(topk_weights.dtype))
        topk_ids.copy_(i.to(topk_ids.dtype))
        token_expert_indices.copy_(i.to(token_expert_indices.dtype))
    return route


def register():
    """Makes vLLM instantiate our method for unquantized MoE layers, and
    routes top-k softmax / sigmoid through tensor ops instead of vLLM's
    _moe_C kernels (not built)."""
    from vllm import _custom_ops
    _custom_ops.topk_softmax = _topk_routing(lambda g: g.softmax(-1))
    _custom_ops.topk_sigmoid = _topk_routing(torch.sigmoid)
    name = UnquantizedFusedMoEMethod.__name__
    if name not in op_registry_oot:
        UnquantizedFusedMoEMethod.register_oot(TpuUnquantizedFusedMoEMethod)
