"""vLLM attention backend for "tpu": paged KV cache as tensor ops (ops.py).

The builder turns vLLM's CommonAttentionMetadata (CPU tensors: the model
runner keeps its bookkeeping on the host) into TpuAttentionMetadata: the
step's plan (ops.PagedPlan), the padded block table and slot mapping, on
"tpu", once per step for all layers. The impl's forward writes the layer's
keys and values into its cache, then attends (prefill, chunked prefill and
decode in one call). Shapes are bucketed (powers of two) so each bucket's
programs compile once: tokens (the runner pads the model's inputs to the
same bucket) and requests; the query layout (one row per request when all
decode, else groups of QUERY_CHUNK rows) follows from them, and keys span
the whole block-table width (max_model_len).

KV cache per layer: [2, num_blocks, block_size, kv_heads, head_size],
allocated by the model runner (model_runner.py), not by vLLM's allocator.
"""
import os
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from vllm.v1.attention.backend import (AttentionBackend, AttentionImpl,
                                       AttentionMetadataBuilder, AttentionType)

from . import ops

MIN_TOKENS = 16     # the smallest token bucket
MIN_REQS = 4        # the smallest request bucket
# query rows per group in a step with prefill (ops.plan_step's chunked
# layout); 0: one group of token-bucket rows per request
def _query_chunk():
    raw = os.environ.get("TORCHTPU_VLLM_QUERY_CHUNK", "8")
    if not raw.isdigit():
        raise ValueError(f"TORCHTPU_VLLM_QUERY_CHUNK={raw!r}: expected a whole number of "
                         f"query rows >= 0 (0: one group of token-bucket rows per request)")
    return int(raw)


QUERY_CHUNK = _query_chunk()


def token_bucket(n):
    return ops.pad_to_bucket(n, MIN_TOKENS)


def req_bucket(r, max_reqs):
    return min(ops.pad_to_bucket(r, MIN_REQS), max(max_reqs, MIN_REQS))


def device():
    return torch.device("tpu", torch.tpu.current_device())


@dataclass
class TpuAttentionMetadata:
    plan: ops.PagedPlan
    block_table: torch.Tensor    # [R, MB] on tpu
    slot_mapping: torch.Tensor   # [T] on tpu (padding: -1)
    num_actual_tokens: int
    num_tokens: int              # padded: the model's input length


class TpuPagedAttentionBackend(AttentionBackend):
    forward_includes_kv_cache_update: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16,
                                                     torch.float16]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto"]

    @staticmethod
    def get_name():
        # vLLM names backends by its enum; out-of-tree ones register as CUSTOM
        # (platform.get_attn_backend_cls does).
        return "CUSTOM"

    @staticmethod
    def get_impl_cls():
        return TpuPagedAttentionImpl

    @staticmethod
    def get_builder_cls():
        return TpuAttentionMetadataBuilder

    @classmethod
    def supports_attn_type(cls, attn_type):
        return attn_type == AttentionType.DECODER

    @classmethod
    def supports_sliding_window(cls):
        return True

    @classmethod
    def supports_non_causal(cls):
        return False

    @staticmethod
    def use_cascade_attention(*args, **kwargs):
        return False

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size,
                           cache_dtype_str="auto"):
        return (2, num_blocks, block_size, num_kv_heads, head_size)


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device_):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device_)
        self.block_size = kv_cache_spec.block_size
        mml = vllm_config.model_config.max_model_len
        self.max_blocks = -(-mml // self.block_size)
        self.max_reqs = vllm_config.scheduler_config.max_num_seqs

    def plan(self, query_start_loc, seq_lens, block_table, slot_mapping, num_tokens):
        """The metadata for one step from host arrays (also used by the
        runner's warm-up, which has no CommonAttentionMetadata)."""
        qsl = np.asarray(query_start_loc, dtype=np.int64)
        sl = np.asarray(seq_lens, dtype=np.int64)
        r = len(sl)
        qlen = qsl[1:] - qsl[:-1]
        t_pad = token_bucket(num_tokens)
        r_pad = req_bucket(r, self.max_reqs)
        # The query layout depends only on (tokens, requests) buckets and on
        # whether every request decodes, which warm-up enumerates: one row
        # per request when every request decodes; with any prefill, groups
        # of QUERY_CHUNK rows ((t_pad / C + r_pad) * C rows), or one group of
        # t_pad rows per request where that is fewer rows (small buckets).
        # Keys: the whole block-table width (see docs/vllm.md).
        mb = self.max_blocks
        dev = device()
        kw = dict(num_tokens=t_pad, num_reqs=r_pad, max_blocks=mb,
                  block_size=self.block_size, device=dev)
        if r == 0 or int(qlen.max()) <= 1:
            plan = ops.plan_step(qsl, sl, max_query_len=1, **kw)
        elif QUERY_CHUNK > 0 and (-(-t_pad // QUERY_CHUNK) + r_pad) * QUERY_CHUNK < r_pad * t_pad:
            plan = ops.plan_step(qsl, sl, query_chunk=QUERY_CHUNK, **kw)
        else:
            plan = ops.plan_step(qsl, sl, max_query_len=t_pad, **kw)
        bt = np.zeros((r_pad, mb), dtype=np.int64)
        src = np.asarray(block_table)[:r, :mb]
        bt[:r, :src.shape[1]] = src
        sm = np.full(t_pad, -1, dtype=np.int64)
        n = int(qsl[-1]) if r else 0
        sm[:n] = np.asarray(slot_mapping)[:n]
        return TpuAttentionMetadata(
            plan=plan, block_table=torch.from_numpy(bt).to(dev),
            slot_mapping=torch.from_numpy(sm).to(dev), num_actual_tokens=n,
            num_tokens=t_pad)

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        m = common_attn_metadata
        r = m.num_reqs
        qsl = m.query_start_loc_cpu[: r + 1].numpy()
        sl = m.seq_lens[:r].cpu().numpy()
        return self.plan(qsl, sl, m.block_table_tensor[:r].cpu().numpy(),
                         m.slot_mapping.cpu().numpy(), m.num_actual_tokens)


class TpuPagedAttentionImpl(AttentionImpl):
    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None,
                 sliding_window=None, kv_cache_dtype="auto", logits_soft_cap=None,
                 attn_type=AttentionType.DECODER, kv_sharing_target_layer_name=None,
                 sinks=None, **kwargs):
        what = []
        if alibi_slopes is not None:
            what.append("ALiBi slopes")
        if logits_soft_cap:
            what.append(f"logits soft cap {logits_soft_cap}")
        if sinks is not None:
            what.append("attention sinks")
        if kv_cache_dtype not in ("auto", None):
            what.append(f"kv_cache_dtype {kv_cache_dtype}")
        if attn_type != AttentionType.DECODER:
            what.append(f"attention type {attn_type}")
        if what:
            raise NotImplementedError("torchtpu.vllm paged attention: " + ", ".join(what) +
                                      " not supported on 'tpu' yet")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.sliding_window = sliding_window
        self.kv_cache_dtype = kv_cache_dtype
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("torchtpu.vllm paged attention: fused output "
                                      "quantization is not supported")
        if attn_metadata is None:   # vLLM's profiling pass: no cache yet
            return output.fill_(0)
        q = query.view(-1, self.num_heads, self.head_size)
        if self.kv_sharing_target_layer_name is None and key is not None:
            k = key.view(-1, self.num_kv_heads, self.head_size)
            v = value.view(-1, self.num_kv_heads, self.head_size)
            ops.write_kv_cache(k, v, kv_cache, attn_metadata.slot_mapping)
        o = ops.paged_attention(q, kv_cache, attn_metadata.block_table, attn_metadata.plan,
                                self.scale, self.sliding_window)
        output.view(o.shape[0], -1).copy_(o.reshape(o.shape[0], -1))
        return output
