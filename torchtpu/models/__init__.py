"""Models the trainer builds by name: "llama" (dense) and "moe"."""
from .llama import LLAMA_FLAVORS, LlamaArgs, Transformer, flops_per_token, llama_args, num_params
from .moe import MOE_FLAVORS, MoEArgs, MoETransformer, moe_args

__all__ = ["build_model", "model_args", "flops_per_token", "num_params", "LlamaArgs",
           "MoEArgs", "Transformer", "MoETransformer", "LLAMA_FLAVORS", "MOE_FLAVORS"]

_MODELS = {"llama": (llama_args, Transformer), "moe": (moe_args, MoETransformer)}


def model_args(name, flavor, **overrides):
    if name not in _MODELS:
        raise ValueError(f"model {name!r}: expected one of {sorted(_MODELS)}")
    return _MODELS[name][0](flavor, **overrides)


def build_model(name, flavor, **overrides):
    """A freshly initialised model on the CPU (move it with .to(device))."""
    args = model_args(name, flavor, **overrides)
    return _MODELS[name][1](args)
