"""vLLM's Platform for "tpu" (PlatformEnum.OOT): device type "tpu", dispatch
key PrivateUse1, torchtpu's c10d backend "tpu", and the choices vLLM asks a
platform to make: our worker, the paged-attention backend, the block size,
no CUDA graphs or Inductor (the model runner pads to shape buckets and the
"tpu" runtime compiles each bucket's programs once), memory queries.
"""
import os

import torch
from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum

logger = init_logger(__name__)

ATTN_BACKEND = "torchtpu.vllm.attention.TpuPagedAttentionBackend"
WORKER = "torchtpu.vllm.worker.TpuWorker"
DEFAULT_BLOCK_SIZE = 16


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "tpu"
    device_type = "tpu"
    dispatch_key = "PrivateUse1"
    ray_device_key = ""
    dist_backend = "tpu"
    device_control_env_var = "TPU_VISIBLE_CHIPS"
    simple_compile_backend = "eager"
    supported_quantization: list[str] = []

    @property
    def supported_dtypes(self):
        return [torch.bfloat16, torch.float32, torch.float16]

    @classmethod
    def import_kernels(cls):
        import torchtpu  # noqa: F401  (registers "tpu"; vLLM's _C is not built)

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
        cfg = attn_selector_config
        if getattr(cfg, "use_mla", False) or getattr(cfg, "use_sparse", False):
            raise NotImplementedError("torchtpu.vllm: MLA and sparse attention are not "
                                      "supported on 'tpu' (only the paged MHA/GQA backend)")
        from vllm.v1.attention.backends.registry import (AttentionBackendEnum,
                                                         register_backend)
        register_backend(AttentionBackendEnum.CUSTOM, ATTN_BACKEND)
        if selected_backend is not None and selected_backend != AttentionBackendEnum.CUSTOM:
            logger.info("torchtpu.vllm: %s was asked for; 'tpu' has one backend, %s",
                        selected_backend, ATTN_BACKEND)
        return ATTN_BACKEND

    @classmethod
    def get_device_name(cls, device_id=0):
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id=0):
        return torch.tpu.get_device_properties(device_id).total_memory

    @classmethod
    def get_current_memory_usage(cls, device=None):
        return float(torch.tpu.memory_allocated(device))

    @classmethod
    def mem_get_info(cls, device=None):
        return torch.tpu.mem_get_info(device)

    @classmethod
    def inference_mode(cls):
        # Inference tensors would forbid the KV cache's in-place writes from
        # outside the mode (warm-up, profiling); no_grad is what XLA devices use.
        return torch.no_grad()

    @classmethod
    def set_device(cls, device):
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed):
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def is_pin_memory_available(cls):
        return False

    @classmethod
    def get_device_communicator_cls(cls):
        return ("vllm.distributed.device_communicators.base_device_communicator."
                "DeviceCommunicatorBase")

    @classmethod
    def get_punica_wrapper(cls):
        raise NotImplementedError("torchtpu.vllm: LoRA is not supported on 'tpu' yet")

    @classmethod
    def is_sleep_mode_available(cls):
        return False

    @classmethod
    def support_hybrid_kv_cache(cls):
        return False

    @classmethod
    def support_static_graph_mode(cls):
        return False

    @classmethod
    def opaque_attention_op(cls):
        return True

    @classmethod
    def check_and_update_config(cls, vllm_config):
        from vllm.config import CompilationMode
        from vllm.config.compilation import CUDAGraphMode

        # The engine core and workers start by spawn: a forked child would
        # inherit the PJRT client's threads mid-flight.
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        model_config = vllm_config.model_config
        if model_config is not None:
            model_config.disable_cascade_attn = True
        cache_config = vllm_config.cache_config
        if not getattr(cache_config, "user_specified_block_size", False):
            cache_config.block_size = DEFAULT_BLOCK_SIZE
        parallel_config = vllm_config.parallel_config
        if parallel_config.worker_cls == "auto":
            parallel_config.worker_cls = WORKER
        if getattr(parallel_config, "enable_dbo", False):
            parallel_config.enable_dbo = False
        vllm_config.scheduler_config.async_scheduling = False
        comp = vllm_config.compilation_config
        # vLLM's own torch.compile path (Inductor, CUDA graphs) is not ours:
        # layers run their native PyTorch forwards ("none" custom ops, as
        # vLLM's _C kernels are not built) on the "tpu" runtime, whose
        # programs the runner's shape buckets keep to one compile each.
        comp.mode = CompilationMode.NONE
        comp.cudagraph_mode = CUDAGraphMode.NONE
        comp.cudagraph_capture_sizes = []
        comp.custom_ops = ["none"]
        if vllm_config.lora_config is not None:
            raise NotImplementedError("torchtpu.vllm: LoRA is not supported on 'tpu' yet")
