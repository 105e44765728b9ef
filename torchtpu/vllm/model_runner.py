"""vLLM's model runner on "tpu".

vLLM's GPU runner keeps its step bookkeeping (input batch, block tables,
positions, sampling) in device buffers filled by Triton kernels. Here, as in
vLLM's CPU runner which we build on, that bookkeeping stays on the host, and
only the model and its KV caches live on "tpu":

- the model is wrapped (TpuModel): its inputs are padded to a power-of-two
  token bucket and moved to "tpu", its hidden states come back for the
  runner's logits indexing, and compute_logits runs the LM head on "tpu";
- the slot-mapping step is ours (ops.slot_mapping on the host) instead of
  vLLM's Triton kernel or its _C op (neither exists without CUDA kernels);
- KV caches are allocated on "tpu" in the backend's layout,
  [2, num_blocks, block_size, kv_heads, head_size] per layer;
- warm_up() runs the model once per bucket the engine will meet, so a
  serving process compiles nothing after warm-up.
"""
import os

import numpy as np
import torch
import torch.nn as nn
import torchtpu
from vllm.logger import init_logger
from vllm.v1.kv_cache_interface import AttentionSpec
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.utils import bind_kv_cache

from . import ops
from .attention import TpuAttentionMetadataBuilder, device, req_bucket, token_bucket

logger = init_logger(__name__)


# --- slot mapping ------------------------------------------------------------------------------

class _SlotMappingKernel:
    """Stands in for vLLM's Triton kernel object: kernel[grid](*args)."""

    def __getitem__(self, grid):
        num_reqs = grid[0] - 1   # vLLM's grid is num_reqs + 1 programs
        return lambda *a, **kw: _slot_mapping_kernel(num_reqs, *a, **kw)


def _slot_mapping_kernel(num_reqs, num_tokens, max_num_tokens, query_start_loc, positions,
                         block_table, block_table_stride, block_size, slot_mapping,
                         kv_cache_block_size=None, blocks_per_kv_block=1, cp_world_size=1,
                         cp_rank=0, cp_interleave=1, PAD_ID=-1, BLOCK_SIZE=None):
    if cp_world_size != 1 or blocks_per_kv_block != 1:
        raise NotImplementedError("torchtpu.vllm: context parallelism and split KV blocks "
                                  "are not supported on 'tpu'")
    qsl = query_start_loc[: num_reqs + 1].numpy()
    req = np.repeat(np.arange(num_reqs), qsl[1:] - qsl[:-1])
    pos = positions[:num_tokens].numpy()
    sm = ops.slot_mapping(pos, req, block_table.numpy(), block_size)
    slot_mapping[:num_tokens].copy_(torch.from_numpy(sm))
    slot_mapping[num_tokens:max_num_tokens].fill_(PAD_ID)


# --- the model on "tpu" ------------------------------------------------------------------------

class TpuModel(nn.Module):
    """The loaded model behind a host/"tpu" boundary (see the module doc).
    Other attributes are the model's."""

    def __init__(self, model, dev, mode):
        super().__init__()
        self.inner = model
        self.dev = dev
        self.mode = mode   # "fused": one program per bucket; "strict": per op

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["inner"], name)

    def forward(self, input_ids=None, positions=None, intermediate_tensors=None,
                inputs_embeds=None, **kwargs):
        if inputs_embeds is not None or intermediate_tensors is not None:
            raise NotImplementedError("torchtpu.vllm: inputs_embeds and pipeline stages are "
                                      "not supported on 'tpu' yet")
        n = input_ids.shape[0]
        t = token_bucket(n)
        # int64 whatever the caller's dtype (vLLM's are int32): one graph per bucket
        ids = torch.zeros(t, dtype=torch.int64)
        ids[:n] = input_ids
        pos = torch.zeros(t, dtype=torch.int64)
        pos[:n] = positions
        with torchtpu.mode(self.mode):
            h = self.inner(input_ids=ids.to(self.dev), positions=pos.to(self.dev), **kwargs)
            return h.cpu()[:n]   # slicing on the device would make a graph per n

    def compute_logits(self, hidden_states, *args, **kwargs):
        n = hidden_states.shape[0]
        t = ops.pad_to_bucket(n, 4)   # the sampled rows: one bucket per few sizes
        h = torch.zeros((t,) + tuple(hidden_states.shape[1:]), dtype=hidden_states.dtype)
        h[:n] = hidden_states
        with torchtpu.mode(self.mode):
            logits = self.inner.compute_logits(h.to(self.dev), *args, **kwargs)
            return None if logits is None else logits.cpu()[:n]


# --- the runner --------------------------------------------------------------------------------

class TpuModelRunner(CPUModelRunner):
    def __init__(self, vllm_config, dev=None):
        super().__init__(vllm_config, torch.device("cpu"))
        self.tpu = device()

    def _postprocess_triton(self):
        import vllm.v1.worker.block_table as block_table
        block_table._COMPUTE_SLOT_MAPPING_KERNEL.kernel = _SlotMappingKernel()

    def load_model(self, load_dummy_weights=False):
        super().load_model(load_dummy_weights)
        self.model = TpuModel(self.model, self.tpu, os.environ.get("TORCHTPU_VLLM_MODE", "fused"))

    def get_model(self):
        # vLLM's interface checks (text generation, multimodal, ...) look at
        # the model's own class.
        return self.model.inner if isinstance(self.model, TpuModel) else self.model

    def initialize_kv_cache_tensors(self, kv_cache_config, kernel_block_sizes,
                                    kv_cache_allocation_context=None):
        kv_caches = {}
        nb = kv_cache_config.num_blocks
        for group in kv_cache_config.kv_cache_groups:
            spec = group.kv_cache_spec
            if not isinstance(spec, AttentionSpec):
                raise NotImplementedError(f"torchtpu.vllm: KV cache spec "
                                          f"{type(spec).__name__} is not supported on 'tpu'")
            for name in group.layer_names:
                kv_caches[name] = torch.zeros(2, nb, spec.block_size, spec.num_kv_heads,
                                              spec.head_size, dtype=spec.dtype,
                                              device=self.tpu)
        for name, target in self.shared_kv_cache_layers.items():
            kv_caches[name] = kv_caches[target]
        bind_kv_cache(kv_caches, self.compilation_config.static_forward_context,
                      self.kv_caches, 1)
        return kv_caches

    def _zero_block_ids(self, block_ids):
        """Zeroes newly allocated blocks (a stale NaN times a masked-out
        probability of 0 would still be NaN). The id list is padded to a
        power of two by repeating its first id, so a step compiles nothing
        new; warm_up() runs every such size."""
        if not block_ids:
            return
        n = ops.pad_to_bucket(len(block_ids), 8)
        ids = torch.tensor(list(block_ids) + [block_ids[0]] * (n - len(block_ids)),
                           dtype=torch.int64, device=self.tpu)
        for kv in {id(t): t for t in self.kv_caches}.values():
            kv.index_fill_(1, ids, 0)

    def _sync_device(self):
        torch.tpu.synchronize()

    # --- warm-up ---------------------------------------------------------------------------

    def warm_up(self, token_buckets=None, req_buckets=None):
        """Runs the model (with its attention over the real caches, writing
        only the null block) once per (tokens, requests) bucket a step can
        take, decode and prefill shapes, so later steps find every program
        compiled. Returns the number of shapes run."""
        from vllm.forward_context import set_forward_context

        builders = [g.get_metadata_builder() for groups in self.attn_groups for g in groups]
        if not builders or not self.kv_caches:
            return 0
        b = builders[0]
        assert isinstance(b, TpuAttentionMetadataBuilder)
        max_t = self.scheduler_config.max_num_batched_tokens
        max_r = self.scheduler_config.max_num_seqs
        tbs = token_buckets or sorted({token_bucket(x) for x in range(1, max_t + 1)})
        rbs = req_buckets or sorted({req_bucket(x, max_r) for x in range(1, max_r + 1)})
        shapes = set()
        for r in rbs:                      # decode: one token per request
            shapes.add((token_bucket(r), r, True))
        for t in tbs:                      # with prefill: r requests, t tokens
            for r in rbs:
                if r < t:
                    shapes.add((t, r, False))
        runs = 0
        for t, r, decode in sorted(shapes):
            r_real = min(r, max_r)
            n = r_real if decode else min(t, max_t)
            if n <= r_real and not decode:
                continue
            qlen = np.full(r_real, n // r_real, dtype=np.int64)
            qlen[: n % r_real] += 1
            qsl = np.concatenate([[0], np.cumsum(qlen)])
            sl = qlen.copy()
            bt = np.zeros((r_real, b.max_blocks), dtype=np.int64)   # the null block
            md = b.plan(qsl, sl, bt, np.full(n, -1), n)
            attn = {name: md for g in self.attn_groups for grp in g
                    for name in grp.layer_names}
            with set_forward_context(attn, self.vllm_config, num_tokens=md.num_tokens):
                h = self.model(input_ids=torch.zeros(n, dtype=torch.int64),
                               positions=torch.zeros(n, dtype=torch.int64))
                self.model.compute_logits(h[:r_real])
            runs += 1
        bs = b.block_size
        most = -(-max_t // bs) + max_r           # blocks a step can allocate
        z = 8
        while True:
            self._zero_block_ids([0] * z)         # the null block: harmless
            if z >= most:
                break
            z *= 2
        torch.tpu.synchronize()
        return runs

