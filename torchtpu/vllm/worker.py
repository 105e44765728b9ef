"""vLLM's worker on "tpu": device and c10d set-up, memory queries, the
memory-pool context (none: "tpu" storages come from torchtpu's allocator,
not CUDA's cumem pool), and warm-up of the runner's shape buckets."""
import os
import time
from contextlib import nullcontext

import torch
from vllm.logger import init_logger
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes

from .model_runner import TpuModelRunner

logger = init_logger(__name__)


class TpuWorker(Worker):
    def init_device(self):
        import torchtpu  # noqa: F401
        from vllm.platforms import current_platform

        from . import moe
        moe.register()
        n = torch.tpu.device_count()
        # A process that sees one device (XLA's CPU plugin; a TPU host whose
        # chips are split among processes) uses it whatever its local rank.
        idx = self.local_rank if n > 1 else 0
        if idx >= n:
            raise RuntimeError(f"torchtpu.vllm: local rank {self.local_rank} needs tpu:{idx}, "
                               f"but this process sees {n} tpu device(s)")
        torch.tpu.set_device(idx)
        self.device = torch.device("tpu", idx)
        init_worker_distributed_environment(self.vllm_config, self.rank,
                                            self.distributed_init_method, self.local_rank,
                                            current_platform.dist_backend)
        set_random_seed(self.model_config.seed)
        self.model_runner = TpuModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag):
        return nullcontext()

    def sleep(self, level=1):
        logger.warning("torchtpu.vllm: sleep mode is not supported on 'tpu'; ignored")

    def wake_up(self, tags=None):
        logger.warning("torchtpu.vllm: sleep mode is not supported on 'tpu'; ignored")

    def determine_available_memory(self):
        """Bytes for the KV cache: kv_cache_memory_bytes when given, else
        gpu_memory_utilization of the device's total less what is in use
        (on XLA's CPU plugin the device's memory is the host's)."""
        explicit = self.cache_config.kv_cache_memory_bytes
        if explicit is not None:
            return int(explicit)
        free, total = torch.tpu.mem_get_info(self.device)
        used = torch.tpu.memory_allocated(self.device)
        want = int(total * self.cache_config.gpu_memory_utilization) - used
        avail = min(want, int(free * 0.9))
        if avail <= 0:
            raise ValueError(f"torchtpu.vllm: no memory left for the KV cache on tpu:"
                             f"{self.device.index} (total {total}, free {free}, in use {used}); "
                             f"set kv_cache_memory_bytes or gpu_memory_utilization")
        return avail

    def compile_or_warm_up_model(self):
        t0 = time.perf_counter()
        runs = 0
        if os.environ.get("TORCHTPU_VLLM_WARMUP", "1") != "0":
            runs = self.model_runner.warm_up()
        dt = time.perf_counter() - t0
        logger.info("torchtpu.vllm: warmed up %d shape buckets in %.1f s", runs, dt)
        set_random_seed(self.model_config.seed)
        return CompilationTimes(language_model=dt, encoder=0.0)
