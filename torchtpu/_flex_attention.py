"""FlexAttention (torch.nn.attention.flex_attention) on "tpu".

PyTorch's flex_attention() front end refuses every device outside a fixed
set ({cuda, cpu, xpu, hpu, mps}: `_validate_device`, whose docstring says it
goes once other devices are supported) before doing anything, in eager and
under torch.compile alike, so code written for CUDA (TorchTitan's default
llama3 attention is `torch.compile(flex_attention)`) stops there on "tpu".

Nothing else in FlexAttention is CUDA-specific on the path "tpu" takes: the
flex_attention higher-order op's dense implementations
(CompositeExplicitAutograd: the scores matrix with score_mod and the block
mask's mask_mod applied through vmap, softmax, the output and logsumexp; and
its backward) are ordinary ATen ops, which lower natively, and under
torch.compile the forward and backward graphs (with the op inside) go to the
"tpu" backend. `install()` therefore widens the check to "tpu" and changes
nothing else: other devices keep PyTorch's check and its messages, and
everything after the check (shape, GQA and block-mask checks) still runs.
What "tpu" does not have is Inductor's fused FlexAttention kernel: the dense
path materialises the [B, H, L, S] scores, like PyTorch's CPU eager path."""
import torch.nn.attention.flex_attention as _fa


def install():
    """Lets flex_attention accept "tpu" tensors (once; idempotent)."""
    check = _fa._validate_device
    if getattr(check, "_torchtpu", False):
        return

    def _validate_device(query, key, value):
        if query.device.type == "tpu":
            return  # q, k, v share a device: the caller checked that before
        check(query, key, value)

    _validate_device._torchtpu = True
    _validate_device.__doc__ = check.__doc__
    _fa._validate_device = _validate_device
