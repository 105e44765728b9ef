"""The llama training step of bench/train_step.py run through torchax (PyTorch
on JAX), for the benchmark's peer rows: the SAME torchtpu.models.llama module
(same weights, same tokens), forward, cross-entropy, backward and AdamW
(PyTorch's defaults but lr), in two ways:

    eager   torchax tensors op by op (device "jax"): the model moved with
            .to("jax"), loss.backward() and torch.optim.AdamW, each ATen op
            of forward, backward and optimizer dispatched to a jax function as
            it comes
    jit     one jax.jit program per step: torch.func.functional_call of the
            model and the cross-entropy, differentiated with jax.value_and_grad
            (torchax.interop.jax_value_and_grad), and AdamW written in torch
            ops on the gradients, the whole step traced through torchax into
            jax.jit, parameters and optimizer state donated

Install (not a test dependency; jax 0.10.2 is already there for
bench/jax_llama.py, and torchax's declared extras would pull another jax):

    .venv/bin/pip install --no-deps torchax==0.0.13

torchax renames PyTorch's PrivateUse1 backend to "jax" at import, the slot
torchtpu's "tpu" device holds, so the two cannot share a process:
bench/train_step.py runs this file as a subprocess (with torch's device
backend autoload off, so that `import torch` does not import torchtpu), hands
it the weights and tokens in a torch.save file, and reads one JSON line back:

    python bench/torchax_llama.py IN.pt          # prints {"eager": [sec, loss], ...}

The model's module is loaded from torchtpu/models/llama.py by path for the same
reason (importing the torchtpu package would register "tpu")."""
import importlib.util
import json
import os
import sys
import warnings

import torch
import torch.nn.functional as F

from step_timing import loss_of, time_steps  # bench/ is on sys.path (the script's folder)

_LLAMA_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                         "torchtpu", "models", "llama.py")


def import_torchax():
    """torchax 0.0.13 builds op tables (at import, and its op and
    decomposition modules when its environment first loads them) that name
    Dimname overloads PyTorch 2.13 no longer has (aten.prod.dim_Dimname,
    aten.all.dimname, ...). While those modules import, a look-up of a missing
    overload gets a placeholder key instead of an AttributeError: no op ever
    resolves to it, and torch's get_decompositions ignores it."""
    import torch._ops as ops

    original = ops.OpOverloadPacket.__getattr__

    def getattr_or_placeholder(self, key):
        try:
            return original(self, key)
        except AttributeError:
            if key.startswith("__"):
                raise
            return ("overload missing in this torch", self._qualified_op_name, key)

    ops.OpOverloadPacket.__getattr__ = getattr_or_placeholder
    try:
        import torchax
        import torchax.decompositions  # noqa: F401
        from torchax.ops import jaten, jc10d, jtorch, jtorchvision_nms  # noqa: F401
    finally:
        ops.OpOverloadPacket.__getattr__ = original
    return torchax


def load_llama():
    spec = importlib.util.spec_from_file_location("bench_llama", _LLAMA_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build(llama, args, state_dict):
    model = llama.Transformer(llama.LlamaArgs(**args))
    model.load_state_dict(state_dict)
    return model


def eager_path(torchax, model, tokens, lr):
    """torchax tensors op by op; autograd and torch.optim.AdamW unchanged.

    The step runs under torchax's dispatch mode only, not its whole
    environment: the environment's torch-function mode also lowers F.linear,
    F.scaled_dot_product_attention and others above autograd, to results
    without a grad_fn, and loss.backward() then fails (a known torchax
    limitation, pytorch/xla#9313). Under the dispatch mode alone every ATen op
    of forward, backward and AdamW runs through torchax's jax lowering."""
    env = torchax.default_env()
    with env:
        model = model.to("jax")
        tokens = tokens.to("jax")
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def step():
        with env._dispatch_mode:
            loss = loss_of(model, tokens)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.item()
    return step


def adamw(p, g, m, v, t, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    """torch.optim.AdamW's update (decoupled weight decay, bias correction) in
    torch ops, t the step count after this step (a float tensor)."""
    b1, b2 = betas
    p = p * (1 - lr * weight_decay)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    bc1 = 1 - b1 ** t
    bc2 = 1 - b2 ** t
    return p - lr * (m / bc1) / (torch.sqrt(v / bc2) + eps), m, v


def jit_path(torchax, model, tokens, lr):
    """One jax.jit program per step, traced from torch code through torchax."""
    import jax
    from torchax import interop

    env = torchax.default_env()
    with env:
        model = model.to("jax")
        tokens = tokens.to("jax")
        params = {k: v.detach() for k, v in model.named_parameters()}
        buffers = {k: v for k, v in model.named_buffers()}
        state = {"p": params, "m": {k: torch.zeros_like(v) for k, v in params.items()},
                 "v": {k: torch.zeros_like(v) for k, v in params.items()},
                 "t": torch.zeros((), dtype=torch.float32, device="jax")}

    def loss_fn(params, buffers, tokens):
        return loss_of(lambda x: torch.func.functional_call(model, (params, buffers), (x,)),
                       tokens)

    grad_fn = interop.jax_value_and_grad(loss_fn)

    def train_step(state, buffers, tokens):
        loss, grads = grad_fn(state["p"], buffers, tokens)
        t = state["t"] + 1
        new = {k: adamw(state["p"][k], grads[k], state["m"][k], state["v"][k], t, lr)
               for k in state["p"]}
        return loss, {"p": {k: u[0] for k, u in new.items()},
                      "m": {k: u[1] for k, u in new.items()},
                      "v": {k: u[2] for k, u in new.items()}, "t": t}

    jitted = interop.jax_jit(train_step, kwargs_for_jax_jit={"donate_argnums": (0,)})
    del jax

    def step():
        with env:
            loss, state_new = jitted(state, buffers, tokens)
            state.update(state_new)
            return loss.item()
    return step


def run(spec):
    """{path: (seconds per step, last loss)} for spec["paths"], or
    {path: "skipped: reason"} for a path that failed."""
    torchax = import_torchax()
    llama = load_llama()
    out = {}
    for path in spec["paths"]:
        make = {"eager": eager_path, "jit": jit_path}[path]
        model = build(llama, spec["args"], spec["state_dict"])
        try:
            step = make(torchax, model, spec["tokens"].clone(), spec["lr"])
            out[path] = time_steps(step, spec["warmup"], spec["steps"])
        except Exception as e:  # a peer failing is reported, not fatal
            out[path] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python bench/torchax_llama.py IN.pt  (written by bench/train_step.py)")
    spec = torch.load(sys.argv[1], weights_only=False)
    # jax without x64 narrows the int64 tokens to int32, as intended; say it once, not per op
    warnings.filterwarnings("ignore", message="Explicitly requested dtype int64")
    print(json.dumps(run(spec)))


if __name__ == "__main__":
    main()
