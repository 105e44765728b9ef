"""vLLM on "tpu": an out-of-tree platform plugin (docs/vllm.md).

vLLM finds it through the `vllm.platform_plugins` entry point `tpu =
torchtpu.vllm:register` (pyproject.toml): register() answers the platform's
qualified name, and vLLM then imports torchtpu.vllm.platform.TpuPlatform,
which picks our worker (worker.py), model runner (model_runner.py) and
paged-attention backend (attention.py, over the tensor ops of ops.py).

torchtpu.vllm.ops imports no vLLM: the backend's KV-cache write, step plan
and attention are tested without a vLLM build (tests/test_vllm_backend.py).
"""
import os

__all__ = ["register"]


def register():
    """vLLM's platform-plugin hook: the platform class's qualified name, or
    None when disabled (TORCHTPU_VLLM=0), so vLLM keeps its own detection."""
    if os.environ.get("TORCHTPU_VLLM", "1") == "0":
        return None
    return "torchtpu.vllm.platform.TpuPlatform"
