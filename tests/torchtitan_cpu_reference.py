"""The CPU reference for tests/test_torchtitan.py: TorchTitan's own entry point
(torchtitan.train.main, the same arguments) on PyTorch's CPU, without torchtpu.

    torchrun --nproc_per_node=N tests/torchtitan_cpu_reference.py --module llama3 ...

The "tpu" run under test is TorchTitan unchanged. TorchTitan 0.3.0 has no
CPU mode, so this reference has to bend three things, all on the CPU side:

- Device: TorchTitan takes the first available accelerator, else "cuda"
  (tools/utils.py), and needs a torch.cuda-like module. Here that is "cpu"
  with torch.cpu plus the memory queries torch.cpu lacks (no peak statistics
  on the host: reported as absent, which TorchTitan's metrics accept).
- FlexAttention (the debug model's attention, `torch.compile(flex_attention)`):
  PyTorch refuses its backward on CPU tensors. The reference replaces it with plain attention: the BlockMask's
  mask_mod made dense (create_mask), masked softmax, logsumexp. That is an
  independent check of the "tpu" run's FlexAttention too. Dynamo is off, so
  everything here is eager CPU PyTorch (create_block_mask included).
- torch.distributed.set_timeout, which TorchTitan calls and torch 2.13 lacks
  (torchtpu supplies it for the tpu run): the same one-liner, over gloo.
- FSDP's gradient reduce-scatter: TorchTitan sets gradient_divide_factor 1.0,
  so FSDP2 asks for ReduceOp.PREMUL_SUM(1.0), which gloo refuses. Here FSDP
  divides by the factor before a plain SUM instead (the same values; the
  "tpu" backend does PREMUL_SUM itself).
"""
import os
import runpy
import sys
import types

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # no torchtpu: plain CPU PyTorch

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch._utils  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.fsdp._fully_shard._fsdp_collectives as _fsdp_collectives  # noqa: E402
import torch.nn.attention.flex_attention as fa  # noqa: E402


def _cpu_device_module():
    m = types.ModuleType("torchtitan_cpu_device")
    for name in ("set_device", "device_count", "synchronize", "is_available", "Stream",
                 "Event", "current_stream", "stream"):
        if hasattr(torch.cpu, name):
            setattr(m, name, getattr(torch.cpu, name))
    m.current_device = lambda: 0  # barrier(device_ids=[...]) wants an index
    m.get_device_name = lambda device=None: "cpu"
    m.get_device_properties = lambda device=None: types.SimpleNamespace(
        name="cpu", total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    m.memory_stats = lambda device=None: {}
    m.reset_peak_memory_stats = lambda device=None: None
    m.empty_cache = lambda: None
    return m


_cpu = _cpu_device_module()
torch._utils._get_available_device_type = lambda: "cpu"
_get_device_module = torch._utils._get_device_module
torch._utils._get_device_module = lambda d=None: _cpu if d == "cpu" else _get_device_module(d)



def _dense_flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None,
                          enable_gqa=False, return_lse=False, kernel_options=None,
                          *, return_aux=None):
    """flex_attention's contract (B, H, L, E layout; out and AuxOutput), computed
    as plain masked softmax attention."""
    if score_mod is not None:
        raise NotImplementedError("the CPU reference has no score_mod")
    B, Hq, L, E = query.shape
    S = key.size(-2)
    if enable_gqa and key.size(1) != Hq:
        key = key.repeat_interleave(Hq // key.size(1), dim=1)
        value = value.repeat_interleave(Hq // value.size(1), dim=1)
    s = query @ key.transpose(-1, -2) * (scale if scale is not None else E ** -0.5)
    if block_mask is not None:
        allowed = fa.create_mask(block_mask.mask_mod, B, 1, L, S, device=query.device)
        s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.exp(s - lse.unsqueeze(-1)) @ value
    if return_aux is not None:
        return out, fa.AuxOutput(lse=lse if return_aux.lse else None)
    return (out, lse) if return_lse else out


fa.flex_attention = _dense_flex_attention  # before TorchTitan imports it
torch._dynamo.config.disable = True

_divide_factors = _fsdp_collectives._get_gradient_divide_factors


def _gloo_divide_factors(*args, **kwargs):
    pre, post, rs_op, ar_op = _divide_factors(*args, **kwargs)
    if getattr(rs_op, "op", rs_op) == dist.ReduceOp.PREMUL_SUM:
        # PREMUL_SUM(1/f) is SUM after dividing by f, which FSDP does for pre_factor f
        pre, rs_op = 1.0 / float(rs_op.factor), dist.ReduceOp.SUM
    return pre, post, rs_op, ar_op


_fsdp_collectives._get_gradient_divide_factors = _gloo_divide_factors

if not hasattr(dist, "set_timeout"):
    dist.set_timeout = lambda timeout, group=None: (
        group or dist.distributed_c10d._get_default_group()).set_timeout(timeout)

if __name__ == "__main__":
    sys.argv[0] = "torchtitan.train"
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
