"""Debugging tools: the numerics checker.

    with torchtpu.debug.check_numerics():          # or TORCHTPU_CHECK_NUMERICS=1
        loss = model(x).sum(); loss.backward()

Every ATen op that touches a tpu tensor (forward and backward: the mode sits
below autograd) is also run by PyTorch on the CPU, on copies of the same
inputs, and the results are compared. Each op is checked on its own inputs,
so an error does not spread: the first op reported is the one that is wrong.
The report names the op, the shapes and dtypes of its inputs, the worst
element (max abs diff, both values), the tolerance and the user's Python
stack (frames of torch and torchtpu left out).

- Random ops (torch.Tag.nondeterministic_seeded) and ops returning
  uninitialised memory (empty*) are compared by shape and dtype only.
- Ops that mutate an argument (in-place, out=) are compared on the mutated
  arguments after the op, as well as on their results.
- View ops are not checked (they move no data; the ops reading them are).
- A tpu result holding NaN or Inf where the CPU result is finite is a
  divergence whatever the tolerance.

Slow by design (every op copies its inputs to the host): a debugging aid.
"""
import contextlib
import os
import traceback
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

__all__ = ["check_numerics", "CheckNumericsMode", "NumericsError",
           "enable_check_numerics", "disable_check_numerics"]

# (rtol, atol) per dtype when not given: XLA's transcendental functions and
# reduction orders differ from PyTorch's by a few ulps.
DEFAULT_TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (5e-2, 1e-2),
}

_UNINITIALISED = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                  "resize_", "set_"}
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_TORCHTPU_DIR = os.path.dirname(os.path.abspath(__file__))


class NumericsError(RuntimeError):
    """A tpu op's result diverged from PyTorch's CPU result."""

    def __init__(self, message, op=None, max_abs_diff=None):
        super().__init__(message)
        self.op = op
        self.max_abs_diff = max_abs_diff


def _is_tpu(x):
    return isinstance(x, torch.Tensor) and x.device.type == "tpu"


def _user_stack():
    frames = [f for f in traceback.extract_stack()[:-1]
              if not os.path.abspath(f.filename).startswith((_TORCH_DIR + os.sep,
                                                             _TORCHTPU_DIR + os.sep))]
    return "".join(traceback.format_list(frames[-8:]))


def _describe(x):
    if isinstance(x, torch.Tensor):
        return f"{list(x.shape)} {str(x.dtype).removeprefix('torch.')} on {x.device}"
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_describe(v) for v in x) + "]"
    return repr(x) if len(repr(x)) < 40 else type(x).__name__


class CheckNumericsMode(TorchDispatchMode):
    """The dispatch mode behind check_numerics(). `action` is "raise" (the
    first divergence raises NumericsError) or "warn" (every divergence
    warns and is appended to `reports`)."""

    def __init__(self, atol=None, rtol=None, action="raise"):
        super().__init__()
        if action not in ("raise", "warn"):
            raise ValueError(f"check_numerics: action {action!r}: expected 'raise' or 'warn'")
        self.atol, self.rtol, self.action = atol, rtol, action
        self.reports = []  # messages of every divergence seen
        self.checked = 0   # ops compared

    # --- the mode -------------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat = list(args) + list(kwargs.values())
        on_tpu = any(_is_tpu(x) or (isinstance(x, (list, tuple)) and any(_is_tpu(v) for v in x))
                     for x in flat) or _device_is_tpu(kwargs.get("device"))
        schema = func._schema
        if not on_tpu or _is_view(schema):
            return func(*args, **kwargs)
        name = func.overloadpacket.__name__
        mutated = [i for i, a in enumerate(schema.arguments)
                   if a.alias_info is not None and a.alias_info.is_write]
        values_matter = (torch.Tag.nondeterministic_seeded not in func.tags
                         and name not in _UNINITIALISED)
        ref_args, ref_kwargs = None, None
        try:
            ref_args, ref_kwargs = tree_map(_to_cpu, (args, kwargs))
        except Exception:  # an input the CPU can't hold: run unchecked
            pass
        out = func(*args, **kwargs)
        if ref_args is None:
            return out
        try:
            if values_matter:
                ref = func(*ref_args, **ref_kwargs)
            else:
                ref = _on_meta(func, args, kwargs)
        except Exception:  # the CPU (or meta) kernel refuses: nothing to compare
            return out
        self.checked += 1
        problems = []
        _compare_tree(out, ref, "result", values_matter, problems, self._tol)
        for i in mutated:
            if i < len(args):
                got, want, what = args[i], ref_args[i], f"argument {i} ({schema.arguments[i].name}) after the op"
            else:
                key = schema.arguments[i].name
                if key not in kwargs:
                    continue
                got, want, what = kwargs[key], ref_kwargs[key], f"argument {key!r} after the op"
            _compare_tree(got, want, what, values_matter, problems, self._tol)
        if problems:
            self._report(func, args, kwargs, problems)
        return out

    def _tol(self, dtype):
        rtol, atol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
        return (self.rtol if self.rtol is not None else rtol,
                self.atol if self.atol is not None else atol)

    def _report(self, func, args, kwargs, problems):
        inputs = ", ".join(_describe(a) for a in args)
        if kwargs:
            inputs += ", " + ", ".join(f"{k}={_describe(v)}" for k, v in kwargs.items())
        text, worst = problems[0]
        more = "".join(f"  also {t}\n" for t, _ in problems[1:])
        msg = (f"check_numerics: {func} diverges from PyTorch's CPU result: {text}\n{more}"
               f"  inputs: ({inputs})\n"
               f"  user stack (most recent call last):\n{_user_stack()}")
        self.reports.append(msg)
        if self.action == "raise":
            raise NumericsError(msg, op=str(func), max_abs_diff=worst)
        warnings.warn(msg, stacklevel=2)


def _device_is_tpu(d):
    return d is not None and torch.device(d).type == "tpu"


def _is_view(schema):
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def _to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", copy=True)
    if isinstance(x, torch.device) and x.type == "tpu":
        return torch.device("cpu")
    if isinstance(x, torch.Generator) and x.device.type == "tpu":
        return None
    return x


def _on_meta(func, args, kwargs):
    def meta(x):
        if isinstance(x, torch.Tensor):
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        if isinstance(x, torch.device) and x.type == "tpu":
            return torch.device("meta")
        if isinstance(x, torch.Generator):
            return None
        return x
    a, k = tree_map(meta, (args, kwargs))
    return func(*a, **k)


# --- comparing ----------------------------------------------------------------------------

def _compare_tree(got, want, what, values_matter, problems, tol):
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
        if len(got) != len(want):
            problems.append((f"{what}: {len(got)} items, CPU gives {len(want)}", None))
            return
        for i, (g, w) in enumerate(zip(got, want)):
            _compare_tree(g, w, f"{what}[{i}]" if len(got) > 1 else what, values_matter,
                          problems, tol)
        return
    if isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor):
        _compare_tensor(got, want, what, values_matter, problems, tol)
    elif isinstance(got, (bool, int, float)) and isinstance(want, (bool, int, float)) and values_matter:
        g, w = torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64)
        _compare_tensor(g, w, what, True, problems, lambda d: tol(torch.float32))


def _compare_tensor(got, want, what, values_matter, problems, tol):
    if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
        problems.append((f"{what}: {list(got.shape)} {got.dtype} where the CPU gives "
                         f"{list(want.shape)} {want.dtype}", None))
        return
    if not values_matter or want.device.type == "meta" or got.numel() == 0:
        return
    g = got.detach().to("cpu")
    w = want.detach().to("cpu")
    if not (g.is_floating_point() or g.is_complex()):
        bad = g != w
        if bad.any():
            idx = tuple(int(i) for i in bad.nonzero()[0])
            diff = (g.double() - w.double()).abs().max().item() if g.dtype != torch.bool else 1.0
            problems.append((f"{what}: {list(g.shape)} {g.dtype}: {int(bad.sum())} elements "
                             f"differ, max abs diff {diff:g}; first at {idx}: tpu "
                             f"{g[idx].item()} vs cpu {w[idx].item()}", diff))
        return
    rtol, atol = tol(g.dtype)
    g64, w64 = g.double(), w.double()
    nonfinite = ~torch.isfinite(g64) & torch.isfinite(w64)
    if nonfinite.any():
        idx = tuple(int(i) for i in nonfinite.nonzero()[0])
        problems.append((f"{what}: {list(g.shape)} {g.dtype}: produces NaN/Inf where the CPU "
                         f"result is finite ({int(nonfinite.sum())} elements; first at {idx}: "
                         f"tpu {g[idx].item()} vs cpu {w[idx].item()})", float("inf")))
        return
    close = torch.isclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return
    diff = (g64 - w64).abs()
    diff = torch.where(close, torch.zeros_like(diff), diff)
    diff = torch.nan_to_num(diff, nan=float("inf"))
    flat = int(diff.argmax())
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), g.shape)) if g.dim() else ()
    worst = float((g64 - w64).abs()[idx]) if g.dim() else float((g64 - w64).abs())
    problems.append((f"{what}: {list(g.shape)} {g.dtype}: {int((~close).sum())} of {g.numel()} "
                     f"elements beyond tolerance (rtol {rtol:g}, atol {atol:g}); max abs diff "
                     f"{worst:g} at {idx}: tpu {g[idx].item():g} vs cpu {w[idx].item():g}", worst))


# --- entry points ---------------------------------------------------------------------------

@contextlib.contextmanager
def check_numerics(atol=None, rtol=None, action="raise"):
    """Checks every tpu op in the block against PyTorch's CPU result.

    atol, rtol: tolerances for floating results (default per dtype, see
    DEFAULT_TOLERANCES); integer and bool results must match exactly.
    action: "raise" (NumericsError at the first divergent op) or "warn".
    Yields the mode; its `reports` lists the divergences seen."""
    mode = CheckNumericsMode(atol=atol, rtol=rtol, action=action)
    with mode:
        yield mode


_global_mode = None


def enable_check_numerics(atol=None, rtol=None, action="raise"):
    """check_numerics() for the rest of the program (TORCHTPU_CHECK_NUMERICS=1)."""
    global _global_mode
    if _global_mode is None:
        _global_mode = CheckNumericsMode(atol=atol, rtol=rtol, action=action)
        _global_mode.__enter__()
    return _global_mode


def disable_check_numerics():
    global _global_mode
    if _global_mode is not None:
        _global_mode.__exit__(None, None, None)
        _global_mode = None
