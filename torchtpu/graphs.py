"""torch.tpu.graphs — CUDA graphs' API on "tpu": capture once, replay as one
program.

    g = torch.tpu.TPUGraph()
    static_x = torch.randn(8, 16, device="tpu")
    with torch.tpu.graph(g):
        static_y = model(static_x)
    for x in batches:
        static_x.copy_(x)      # new input values into the static buffer
        g.replay()             # one program; static_y holds the result

    step = torch.tpu.make_graphed_callables(model, (sample_x,))
    loss = step(x).sum(); loss.backward()   # forward and backward: one program each

On XLA devices a graph is what torchtpu already does inside torch.compile:
the region's ops are recorded by fused eager into one program under a core
capture (runtime/graph.c), and a replay launches that program once with no
per-op work. What CUDA graphs promise holds:

- static buffers: the capture keeps every tensor the region read that
  existed before it (its inputs) and every tensor it made (its outputs).
  A replay reads the inputs' current values and writes the outputs' new
  values into the same tensors (same storages, same data_ptr()): copy new
  values in with copy_, read results from the tensors the capture returned.
  Like a CUDA graph's memory pool, everything the region made stays alive
  while the graph does (those still used when it ends: intermediates that
  died are not kept).
- one program per replay, whatever the region's number of ops; random ops
  draw fresh numbers at every replay (the generator advances).
- what cannot be captured raises: a host read of a tpu value inside the
  region (.item(), .cpu(), printing, nonzero or boolean indexing, an op that
  runs on the CPU) raises at once, as CUDA's "operation not permitted when
  stream is capturing" does; a value copied in from the host, or a region
  too large for one program, makes the capture fail at its end with the
  reason. Values copied in from the host inside the region (torch.tensor(...,
  device="tpu"), .to("tpu")) are copied once, at capture: constants of the
  graph.

Unlike CUDA, capturing runs the region once (the outputs hold its results
after the `with` block), and `pool`, `stream` and `capture_error_mode` are
accepted for compatibility and ignored: there is one device stream and no
allocator pool to share.
"""
import collections
import sys
import threading
import weakref

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from . import modes

__all__ = ["TPUGraph", "graph", "graph_pool_handle", "make_graphed_callables"]

_capture = threading.local()  # .depth: captures under way on this thread


def is_capturing():
    """Whether this thread is inside a TPUGraph capture
    (torch.tpu.is_current_stream_capturing)."""
    return getattr(_capture, "depth", 0) > 0


def graph_pool_handle():
    """An opaque token, for code that shares CUDA graph pools between
    captures; graphs on tpu have no pool to share."""
    return (0, 0)


def _storage_key(t):
    """The tpu storage behind `t` (its handle), or None without one."""
    if t.device.type != "tpu" or t.numel() == 0:
        return None
    return t.untyped_storage().data_ptr() or None


class _Recorder(TorchDispatchMode):
    """While a graph is captured: every tpu tensor an op reads that no op of
    the region made (the graph's inputs, in first-use order) and every tpu
    tensor an op returns (its outputs). Holding them keeps their storages
    alive as long as the graph, which reads and writes those storages."""

    def __init__(self):
        super().__init__()
        self.inputs, self.outputs = [], []
        self._made, self._seen = set(), set()
        self.autograd = False  # an op recorded an autograd graph

    def live_outputs(self):
        """The outputs still used when the capture ends. A tensor only the
        recorder holds is an intermediate that died: dropping it spares the
        program an output and the graph its memory. Autograd's nodes may hold
        one Python cannot see: the tensor itself (its Python object then
        outlives the recorder's reference, so a weak reference finds it) or a
        copy sharing its storage (a saved result: the storage has an owner
        the recorder does not hold)."""
        held = collections.Counter(_storage_key(t) for t in self.outputs)
        keep, maybe = [], []
        for t in self.outputs:
            # references: the list, the loop and getrefcount's argument
            used = sys.getrefcount(t) > 3
            if not used and self.autograd:
                storage = t.untyped_storage()  # one more owner while it lives
                owners = torch._C._storage_Use_Count(storage._cdata) - 1
                used = owners > held[_storage_key(t)]
                del storage
            (keep if used else maybe).append(t)
        refs = [weakref.ref(x) for x in maybe]
        maybe = t = None  # the recorder's last strong references
        self.outputs = []
        return keep + [t for t in (r() for r in refs) if t is not None]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in pytree.tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor) and id(t) not in self._seen:
                key = _storage_key(t)
                if key is not None and key not in self._made:
                    self._seen.add(id(t))
                    self.inputs.append(t)
        out = func(*args, **kwargs)
        # A copy from the host (.to("tpu") of a CPU tensor) runs once, now: its
        # result is a constant of the graph, an input like torch.tensor(...,
        # device="tpu"), whose copy this mode never sees.
        from_host = any(isinstance(t, torch.Tensor) and t.device.type == "cpu"
                        for t in pytree.tree_leaves((args, kwargs)))
        if from_host:
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and id(t) not in self._seen \
                        and _storage_key(t) is not None:
                    self._seen.add(id(t))
                    self.inputs.append(t)
            return out
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and id(t) not in self._seen:
                key = _storage_key(t)
                self.autograd = self.autograd or t.requires_grad
                if key is not None:
                    self._made.add(key)
                    self._seen.add(id(t))
                    self.outputs.append(t)
        return out


class TPUGraph:
    """A captured region of tpu work, replayed as one program (mirrors
    torch.cuda.CUDAGraph). Capture with torch.tpu.graph(g) or
    capture_begin()/capture_end()."""

    def __init__(self, keep_graph=False):
        del keep_graph  # instantiating is free on tpu: nothing to keep apart
        self._handle = 0
        self._inputs, self._outputs = [], []
        self._recorder = self._mode = None
        self.replays = 0

    def capture_begin(self, pool=None, capture_error_mode="global"):
        del pool, capture_error_mode
        if self._handle or self._recorder is not None:
            raise RuntimeError("TPUGraph.capture_begin: this graph already holds a "
                               "capture; reset() it first")
        torch.tpu.synchronize()
        device = torch.tpu.current_device()
        self._mode = modes.mode("fused")
        self._mode.__enter__()
        try:
            torch.ops.torchtpu.graph_static_capture_begin(device)
        except BaseException:
            self._leave_mode()
            raise
        self._recorder = _Recorder()
        self._recorder.__enter__()
        _capture.depth = getattr(_capture, "depth", 0) + 1

    def capture_end(self):
        rec = self._stop_recording()
        rec.outputs = rec.live_outputs()  # the others die here, before the program is built
        try:
            handle, why = torch.ops.torchtpu.graph_static_capture_end(rec.inputs, rec.outputs)
        finally:
            self._leave_mode()
        if not handle:
            raise RuntimeError("torch.tpu.graph: the captured region cannot be replayed "
                               f"as one program: {why}")
        self._handle, self._inputs, self._outputs = handle, rec.inputs, rec.outputs

    def _abandon(self):
        """Leaves a capture that raised (its ops run as a plain fused graph)."""
        self._stop_recording()
        try:
            torch.ops.torchtpu.graph_abandon_capture()
        finally:
            self._leave_mode()

    def _stop_recording(self):
        rec, self._recorder = self._recorder, None
        if rec is None:
            raise RuntimeError("TPUGraph.capture_end: no capture under way")
        _capture.depth -= 1
        rec.__exit__(None, None, None)
        return rec

    def _leave_mode(self):
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(None, None, None)

    def replay(self):
        """Runs the captured program once on the inputs' current values; the
        outputs' storages get the results."""
        if not self._handle:
            raise RuntimeError("TPUGraph.replay: nothing was captured")
        torch.ops.torchtpu.graph_replay_into(self._handle, self._inputs, self._outputs)
        self.replays += 1

    def reset(self):
        """Frees the captured program and lets go of its tensors."""
        if self._handle:
            torch.ops.torchtpu.graph_destroy(self._handle)
        self._handle = 0
        self._inputs, self._outputs = [], []

    def pool(self):
        return graph_pool_handle()

    def __del__(self):
        try:
            self.reset()
        except Exception:  # interpreter shutdown
            pass


class graph:
    """Captures the block's tpu work into `tpu_graph` (mirrors
    torch.cuda.graph). An exception in the block leaves the capture (its
    ops still ran) and propagates; a region that cannot be replayed raises
    RuntimeError with the reason at the block's end."""

    def __init__(self, tpu_graph, pool=None, stream=None, capture_error_mode="global"):
        del stream
        self.tpu_graph = tpu_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        self.tpu_graph.capture_begin(self.pool, self.capture_error_mode)

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.tpu_graph._abandon()
            return False
        self.tpu_graph.capture_end()
        return False


# --- make_graphed_callables -------------------------------------------------------------

def _graph_one(fn, args, num_warmup_iters, allow_unused_input):
    if not all(isinstance(a, torch.Tensor) and a.device.type == "tpu" for a in args):
        raise TypeError("make_graphed_callables: sample_args must be tuples of tpu "
                        "tensors, got " + ", ".join(type(a).__name__ for a in args))
    params = tuple(fn.parameters()) if isinstance(fn, torch.nn.Module) else ()
    static_inputs = tuple(args) + params
    differentiable = [t for t in static_inputs if t.requires_grad]

    def grads_of(outs, grad_outs):
        pairs = [(o, g) for o, g in zip(outs, grad_outs) if g is not None]
        if not pairs or not differentiable:
            return ()
        return torch.autograd.grad([o for o, _ in pairs], differentiable,
                                   grad_outputs=[g for _, g in pairs],
                                   allow_unused=allow_unused_input)

    def needs_grad(o):
        return isinstance(o, torch.Tensor) and o.requires_grad

    # Warm-up: compiles the ops' programs before the capture, as on CUDA.
    for _ in range(num_warmup_iters):
        outs = pytree.tree_leaves(fn(*args))
        grads_of(outs, [torch.empty_like(o) if needs_grad(o) else None for o in outs])
    del outs

    fwd = TPUGraph()
    with graph(fwd):
        out = fn(*args)
    flat_out, spec = pytree.tree_flatten(out)
    static_grad_outs = [torch.empty_like(o) if needs_grad(o) else None for o in flat_out]
    bwd = TPUGraph()
    with graph(bwd):
        grads = grads_of(flat_out, static_grad_outs)
    grads = iter(grads)
    static_grad_ins = [next(grads, None) if t.requires_grad else None for t in static_inputs]
    nargs = len(args)

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            for static, x in zip(static_inputs[:nargs], inputs[:nargs]):
                if x is not static:
                    static.copy_(x)  # new values into the capture's input buffer
            fwd.replay()
            return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in flat_out)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grad_outs):
            for static, g in zip(static_grad_outs, grad_outs):
                if static is not None:
                    if g is None:
                        static.zero_()
                    else:
                        static.copy_(g)
            bwd.replay()
            # Copies: autograd may keep a returned gradient as a leaf's .grad
            # (it steals a tensor nobody else holds), which the next replay
            # would overwrite.
            return tuple(g.clone() if g is not None else None for g in static_grad_ins)

    def graphed(*user_args):
        if len(user_args) != nargs:
            raise TypeError(f"graphed callable: {len(user_args)} arguments, captured "
                            f"with {nargs}")
        return pytree.tree_unflatten(list(Graphed.apply(*(tuple(user_args) + params))), spec)

    graphed.graphs = (fwd, bwd)
    if isinstance(fn, torch.nn.Module):
        fn.forward = graphed
        return fn
    return graphed


def make_graphed_callables(callables, sample_args, num_warmup_iters=3,
                           allow_unused_input=False, pool=None):
    """Graphed versions of `callables` (a function or nn.Module, or a tuple
    of them), mirroring torch.cuda.make_graphed_callables: their forward and
    backward are each captured once with `sample_args` (tuples of tpu
    tensors) and replayed as one program per call. Arguments must keep the
    sample's shapes and dtypes; their values are copied into the capture's
    static inputs. A module's forward is replaced and the module returned.
    Outputs (and gradients) are the graph's static buffers: the next call
    overwrites them."""
    del pool
    if not isinstance(callables, tuple):
        return _graph_one(callables, tuple(sample_args), num_warmup_iters,
                          allow_unused_input)
    return tuple(_graph_one(fn, tuple(a), num_warmup_iters, allow_unused_input)
                 for fn, a in zip(callables, sample_args))
