"""torch.compile(backend="tpu"): Dynamo + AOTAutograd, graphs run by the core.

    model = torch.compile(model, backend="tpu")      # registered on `import torchtpu`
    loss = model(x).sum(); loss.backward()            # forward and backward graphs

Dynamo captures the Python program into FX graphs (graph breaks run eagerly in
between); AOTAutograd functionalises each graph, splits it into forward and
backward graphs and decomposes it to core ATen with `decompositions()`: the
core-ATen table less the decompositions of ops the C core lowers natively
(softmax backward, nll_loss, silu, ...), so they stay one rule each. Mutated
inputs (BatchNorm running stats, in-place updates of inputs) come back from
AOTAutograd as extra outputs, which its runtime wrapper copies into the real
tensors; inference graphs keep the copy in the graph
(keep_inference_input_mutations).

Each graph is run by `_GraphRunner` under fused eager: the graph's ops are
recorded, and flushed as one program at its end, found in the program cache
on the next call (options={"fused": False}: op by op in strict eager, every
op's program cached by signature). Either way a second call with the same
shapes compiles nothing. Results whose traced layout is strided are copied
into that layout (see `_match_traced_layouts`). New shapes retrace, bounded
by Dynamo's recompile limit (torch._dynamo.config.recompile_limit, 8);
dynamic=True (or torchtpu.mark_dynamic, or Dynamo's automatic dynamic shapes)
gives graphs with symbolic sizes, whose programs the core compiles per
concrete shape; each shape's capture is kept and replayed (below).

`compile_training` is the trainer's training.compile: forward+loss and the
optimizer step, set up so that neither recompiles as the lr changes.

Replay (options={"replay": False} turns it off): the first call of a graph
runs it under a core graph capture (tt_graph_capture_*: the fused graph with
the FX graph's placeholders declared as its inputs), later calls replay the
captured program in one shim call (torchtpu::graph_replay: no Python per
op, no recording, no lowering). A graph keeps up to MAX_CAPTURES captures,
one per input shape and value of its int inputs (symbolic sizes); inputs
unlike every capture's (shape, strides, storage) capture again; a graph that cannot be captured (it reads a
constant tensor, runs a CPU-fallback op, takes non-tensor inputs other than
a DeviceMesh, ...) keeps the fused runner. Random ops draw fresh numbers on
every replay.

Graphs with functional collectives (DTensor redistributes, SimpleFSDP's
all-gathers and reduce-scatters: _c10d_functional.*) are split around them
(`_SegmentedGraph`): the compute between collectives becomes program
segments, each run and replayed as above, and the collectives run in
between through the process group (the host transport). Each compute op is
placed in the earliest segment its inputs allow, so independent collectives
gather into one group: SimpleFSDP's forward is [casts] gathers [the rest],
its backward [all the gradients] reduce-scatters [casts]."""
import functools
import operator

import torch

from . import _core

__all__ = ["tpu_backend", "decompositions", "stats", "reset_stats", "compile_training"]

_stats = {"graphs": 0, "forward": 0, "backward": 0, "inference": 0, "calls": 0,
          "captures": 0, "capture_failures": 0, "replays": 0, "recaptures": 0,
          "segments": 0, "segment_runs": 0, "collective_runs": 0}


_DONATED = ("donated_buffers", "donated_bytes")
_donated_base = dict.fromkeys(_DONATED, 0)  # the core's counts at reset_stats


def _core_donated():
    """The core's donation counts since the process started (0 without a runtime)."""
    try:
        core = _core.graph_stats()
    except RuntimeError:
        return dict.fromkeys(_DONATED, 0)
    return {k: core[k] for k in _DONATED}


def stats():
    """Counters: graphs compiled (by kind), compiled-graph calls, graph
    captures (and captures that failed: the graph then runs fused) and
    replays (calls that ran the captured program, recording nothing).
    segments: program segments of the graphs compiled (1 per graph, more
    where collectives split it); segment_runs: segments run;
    collective_runs: groups of collectives run between segments.
    donated_buffers / donated_bytes: input buffers (and their bytes) that
    replays donated to the program, which wrote the inputs' new values into
    them (parameters and optimizer state updated in place)."""
    now = _core_donated()
    return dict(_stats, **{k: now[k] - _donated_base[k] for k in _DONATED})


def reset_stats():
    for key in _stats:
        _stats[key] = 0
    _donated_base.update(_core_donated())


# --- decompositions ------------------------------------------------------------------

def _aten_name(op):
    """The core's name for an OpOverload: "aten::add.Tensor", "aten::relu"."""
    overload = op._overloadname
    return op._schema.name + ("" if overload == "default" else "." + overload)


def has_rule(op):
    """True when the C core lowers OpOverload `op` natively."""
    return _core.has_rule(_aten_name(op))


@functools.cache
def decompositions():
    """torch._decomp.core_aten_decompositions() without the functional ops the
    core lowers natively (their fused rule beats the decomposition)."""
    from torch._decomp import core_aten_decompositions

    table = core_aten_decompositions()
    for op in list(table):
        if (isinstance(op, torch._ops.OpOverload) and not op._schema.is_mutable
                and has_rule(op)):
            del table[op]
    return table


# --- running one graph ------------------------------------------------------------------

def _modes():
    """torchtpu.modes when this build has fused eager, else None."""
    try:
        from . import modes
    except ImportError:
        return None
    return modes if hasattr(modes, "mode") else None


class _Fused:
    """Runs a function under fused eager; leaving the mode flushes what it
    recorded as one program (launched, not waited for). Inside a caller's
    own fused region the ops join the caller's graph instead; under debug
    eager (TPU_LAUNCH_BLOCKING=1) they run op by op, so an error names its op."""

    def __init__(self, modes):
        self.modes = modes

    def run(self, fn, *args):
        if self.modes.get_mode() != "strict":
            return fn(*args)
        with self.modes.mode("fused"):
            return fn(*args)


def _fused_runner():
    """A _Fused when the core has fused eager, else None (strict eager)."""
    modes = _modes()
    return _Fused(modes) if modes is not None else None


class _Graph:
    """A captured graph: its core handle (freed with this object) and how to
    rebuild the FX graph's output structure from the replayed tensors."""

    def __init__(self, handle, template, kind):
        self.handle = handle
        self.template = template  # per output: ("t", k) or ("c", constant)
        self.kind = kind          # list, tuple, or None for a bare result

    def outputs(self, tensors):
        out = [tensors[v] if tag == "t" else v for tag, v in self.template]
        if self.kind is None:  # a bare result, not a sequence
            return out[0]
        return out if self.kind is list else tuple(out)

    def __del__(self):
        try:
            torch.ops.torchtpu.graph_destroy(self.handle)
        except Exception:  # interpreter shutdown
            pass


class _GraphRunner:
    """Runs one AOTAutograd graph (boxed calling convention: a list of
    inputs, cleared so the graph can free them early).

    Under fused eager the graph's ops are recorded and flushed as one program
    at its end; the runtime keys the program by the graph's fingerprint, so
    a second call with the same shapes compiles nothing. Without it, each op
    runs as its own cached program (strict eager).

    With replay (the default) the first call records the graph under a core
    capture whose inputs are the graph's placeholders; later calls replay
    the captured program through one shim op: one C++ call, no Python per
    op. Inputs unlike the capture's raise ValueError in the core before
    anything runs: the runner captures again. A graph that cannot be
    captured runs fused from then on."""

    def __init__(self, gm, kind, fused, replay=True, segment=None):
        # An instance attribute: Dynamo's disable() wrapper copies __dict__.
        self._boxed_call = True
        self.gm = gm
        self.kind = kind
        self.fused = fused
        self.replay = replay and fused is not None
        self.graph = None       # the _Graph captured last
        self.captures = {}      # _capture_key(inputs) -> (_Graph, opaque), oldest first
        self.no_capture = None  # why this graph runs fused instead
        self.opaque = ()        # (position, object) of the last capture's opaque inputs
        self.number = _stats["graphs"]  # its name in profiles
        self.segment = segment  # (k, n): segment k of n of a split graph, else None

    def _profile_name(self):
        """"compiled forward graph #3 (12 ops: mm, add, ...)": its name in
        profiles (torchtpu.profiler)."""
        ops = [n.target for n in self.gm.graph.nodes if n.op == "call_function"]
        names = [getattr(t, "__name__", str(t)).split(".")[0] for t in ops[:4]]
        more = ", ..." if len(ops) > 4 else ""
        part = f" segment {self.segment[0]}/{self.segment[1]}" if self.segment else ""
        return (f"compiled {self.kind} graph #{self.number}{part} "
                f"({len(ops)} ops: {', '.join(names)}{more})")

    def __call__(self, args):
        inputs = list(args)
        args.clear()
        if self.segment is None:
            _stats["calls"] += 1
        _stats["segment_runs"] += 1
        if self.fused is None:
            return self.gm(*inputs)
        if (not self.replay or self.no_capture is not None
                or self.fused.modes.get_mode() != "strict"):
            return self.fused.run(self.gm, *inputs)
        key = _capture_key(inputs)
        if self.captures:
            graph, opaque = self.captures.get(key, (None, ()))
            if graph is not None and all(inputs[i] is obj for i, obj in opaque):
                try:
                    tensors = torch.ops.torchtpu.graph_replay(graph.handle, _tensors(inputs))
                except ValueError:  # inputs unlike the capture: nothing ran
                    pass
                else:
                    _stats["replays"] += 1
                    return graph.outputs(tensors)
            _stats["recaptures"] += 1
        return self._capture(inputs, key)

    def _capture(self, inputs, key):
        why = _capturable(inputs)
        if why is not None:
            self.no_capture = why
            _stats["capture_failures"] += 1
            return self.fused.run(self.gm, *inputs)
        self.opaque = tuple((i, x) for i, x in enumerate(inputs) if _opaque(x))
        tensor_inputs = _tensors(inputs)
        ops = torch.ops.torchtpu
        with self.fused.modes.mode("fused"):
            ops.graph_capture_begin(tensor_inputs[0].device.index or 0, tensor_inputs)
            try:
                out = self.gm(*inputs)
            except BaseException:
                try:
                    ops.graph_capture_end([])  # leaves the capture
                except Exception:
                    pass
                raise
            seq = out if isinstance(out, (list, tuple)) else [out]
            tensors, template = [], []
            for v in seq:
                if isinstance(v, torch.Tensor) and v.device.type == "tpu":
                    template.append(("t", len(tensors)))
                    tensors.append(v)
                else:
                    template.append(("c", v))
            handle, why = ops.graph_capture_end(tensors)
        if any(isinstance(v, torch.Tensor) for tag, v in template if tag == "c"):
            handle, why = 0, "an output is not a tpu tensor"
        if handle == 0:
            self.no_capture = why
            self.graph = None
            self.captures.clear()
            _stats["capture_failures"] += 1
        else:
            kind = None
            if isinstance(out, (list, tuple)):
                kind = list if isinstance(out, list) else tuple
            self.graph = _Graph(handle, template, kind)
            torch.ops.torchtpu.graph_set_name(handle, self._profile_name())
            _stats["captures"] += 1
            self._keep(key, self.graph)
        return out

    def _keep(self, key, graph):
        """Keeps the capture for inputs like these, beside the captures for
        other shapes (a graph with symbolic sizes, or one called with a few
        shapes in turn, replays each), the oldest dropped past MAX_CAPTURES."""
        self.captures.pop(key, None)
        self.captures[key] = (graph, self.opaque)
        while len(self.captures) > MAX_CAPTURES:
            del self.captures[next(iter(self.captures))]


def _opaque(x):
    """A DeviceMesh or process group: graphs over DTensors take the mesh as
    an input that no op reads (their collectives name the group by string).
    A capture keeps such an input by identity and replays only when the call
    passes the same object."""
    from torch.distributed.device_mesh import DeviceMesh
    return isinstance(x, DeviceMesh) or type(x).__name__.startswith("ProcessGroup")


def _tensors(inputs):
    return [x for x in inputs if isinstance(x, torch.Tensor)]


MAX_CAPTURES = 16  # captures kept per graph (shapes of a dynamic graph, in turn)


def _capture_key(inputs):
    """What a capture was made for: each tensor input's dtype, shape and
    strides, each number's value. A graph with symbolic sizes (Dynamo's
    automatic dynamic shapes, dynamic=True, mark_dynamic) takes its sizes as
    int inputs; a capture bakes them in, so each set of values is its own
    capture. Storage facts are left to the core, which refuses a replay whose
    inputs alias unlike the capture's (the runner then captures again)."""
    key = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            key.append((x.dtype, tuple(x.shape), x.stride()))
        elif isinstance(x, (bool, int, float)):
            key.append((type(x), x))
        else:
            key.append(id(x))
    return tuple(key)


def _capturable(inputs):
    """None when a graph with these inputs can be captured, else why not:
    every input must be a tpu tensor (a CPU tensor would be baked into the
    program), all on one device, a number (a symbolic size: baked in, and
    part of the capture's key) or an opaque mesh object."""
    if not _tensors(inputs):
        return "the graph has no tensor inputs"
    device = None
    for i, x in enumerate(inputs):
        if _opaque(x) or isinstance(x, (bool, int, float)):
            continue
        if not isinstance(x, torch.Tensor) or x.device.type != "tpu":
            return f"input {i} is not a tpu tensor ({type(x).__name__})"
        if device is None:
            device = x.device
        elif x.device != device:
            return f"inputs on {device} and {x.device}"
    return None


# --- layouts ------------------------------------------------------------------------------
#
# The graph was traced with PyTorch's meta functions, whose outputs can be
# strided (the CPU flash-attention output is [b, h, s, d] over a [b, s, h, d]
# buffer), and later nodes rely on it: a reshape became a `view` because the
# traced strides allowed one. The core's rules return dense row-major
# results, so after each op whose traced result is not dense, the result is
# copied into the traced layout when it differs (one transpose in the program).

def _match_layout(x, size, stride):
    if not isinstance(x, torch.Tensor) or tuple(x.stride()) == stride or x.numel() <= 1:
        return x
    out = torch.empty_strided(size, stride, dtype=x.dtype, device=x.device)
    return out.copy_(x)


def _fresh_result(node):
    """True when `node` makes a new tensor (not a view, not a mutation)."""
    target = node.target
    if target is operator.getitem:
        node = node.args[0]
        target = getattr(node, "target", None)
    return (isinstance(target, torch._ops.OpOverload) and not target.is_view
            and not target._schema.is_mutable)


# --- random-state wrappers of recomputed ops ------------------------------------------------
#
# Under activation checkpointing, AOTAutograd wraps every op tagged
# nondeterministic_seeded that the backward recomputes in
# rng_prims.run_and_save_rng_state / run_with_rng_state, so the recomputation
# draws the forward's numbers. PyTorch implements those for cuda, cpu, hpu
# and xpu only ("Backend not supported for tpu"). The CPU flash-attention op
# the tpu SDPA picks carries the tag for its dropout; without dropout it
# draws nothing, so its wrappers are dropped: the op runs as itself and the
# saved state is an empty placeholder. Ops that do draw numbers keep the
# wrappers (and PyTorch's error).

_ATTENTION_OPS = ("_scaled_dot_product_flash_attention_for_cpu",)


def _draws_nothing(op, args, kwargs):
    """True for an attention op called with dropout_p == 0."""
    name = getattr(op, "_schema", None) and op._schema.name.split("::")[-1]
    if name not in _ATTENTION_OPS:
        return False
    dropout = args[3] if len(args) > 3 else kwargs.get("dropout_p", 0.0)
    return dropout == 0.0


def _run_and_save_no_state(op, *args, **kwargs):
    out = op(*args, **kwargs)
    return torch.empty(0, dtype=torch.uint8, device=args[0].device), out


def _run_with_no_state(state, op, *args, **kwargs):
    del state
    return op(*args, **kwargs)


def _drop_rng_wrappers(gm):
    """Replaces the random-state wrappers of ops that draw nothing (above)."""
    from torch._prims import rng_prims

    save = getattr(rng_prims, "run_and_save_rng_state", None)
    restore = getattr(rng_prims, "run_with_rng_state", None)
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in (save, restore):
            continue
        rest = node.args if node.target is save else node.args[1:]
        op, args = rest[0], rest[1:]
        if _draws_nothing(op, args, node.kwargs):
            node.target = _run_and_save_no_state if node.target is save else _run_with_no_state
            changed = True
    if changed:
        gm.recompile()
    return gm


def _match_traced_layouts(gm):
    """Inserts _match_layout after every op whose traced result is strided."""
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        val = node.meta.get("val")
        if (node.op != "call_function" or not isinstance(val, torch.Tensor)
                or not _fresh_result(node) or val.is_contiguous()):
            continue
        size, stride = tuple(val.shape), tuple(val.stride())
        if not all(isinstance(v, int) for v in size + stride):
            continue  # symbolic: left to the runtime
        with graph.inserting_after(node):
            fixed = graph.call_function(_match_layout, (node, size, stride))
        node.replace_all_uses_with(fixed, delete_user_cb=lambda user: user is not fixed)
        changed = True
    if changed:
        gm.recompile()
    return gm


# --- inputs rewritten in place: their last op on the flat storage ----------------------------
#
# A graph that rewrites an input (an optimizer step: copy_(exp_avg, lerp(...)))
# is captured with the input aliased to its new value, and replays donate the
# input's buffer (README, "torch.compile"). The core passes a storage as a
# flat vector and views it in the tensor's shape; XLA writes a fusion's result
# into an operand's buffer only when the two have one shape, so a moment
# updated as [2048, 256] from a flat [524288] parameter was copied at the
# program's entry, every step. When the op that makes an input's new value is
# pointwise, `_flat_updates` runs it on flattened operands and views the
# result back: the same values, computed in the parameter's own shape
# (bench/step_copies.py: the llama debug step's entry copies 69 -> 22 MiB; the
# rest are step counts and weights, whose old values other ops read, such as
# the backward's dX = dY W, unordered with their updates).


def _flat_operands(node, shape):
    """node's args with each tensor of `shape` flattened (0-dim ones kept), or
    None when an operand has another shape or a tensor hides in a list or kwarg."""
    def is_tensor(a):
        return isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)

    def nested(a):
        return isinstance(a, (list, tuple)) and any(isinstance(x, torch.fx.Node) for x in a)

    if any(is_tensor(v) or nested(v) for v in node.kwargs.values()):
        return None
    plan = []
    for a in node.args:
        if nested(a):
            return None
        if not is_tensor(a) or a.meta["val"].dim() == 0:
            plan.append((a, False))
        elif list(a.meta["val"].shape) == shape:
            plan.append((a, True))
        else:
            return None
    return plan


def _flat_updates(gm):
    """Computes each rewritten input's new value on flat operands (above)."""
    graph = gm.graph
    reshape = torch.ops.aten.reshape.default
    changed = False
    for node in list(graph.nodes):
        if node.target is not torch.ops.aten.copy_.default:
            continue
        dest, new = node.args[0], node.args[1]
        if getattr(dest, "op", None) != "placeholder" or not isinstance(new, torch.fx.Node):
            continue
        op, val = new.target, new.meta.get("val")
        if (not isinstance(op, torch._ops.OpOverload) or torch.Tag.pointwise not in op.tags
                or op._schema.is_mutable or not isinstance(val, torch.Tensor)
                or val.dim() < 2 or not val.is_contiguous()):
            continue
        shape = list(val.shape)
        if not all(isinstance(d, int) for d in shape):
            continue  # symbolic sizes: the runtime's shapes, not the trace's
        plan = _flat_operands(new, shape)
        if plan is None:
            continue
        with graph.inserting_before(new):
            args = [graph.call_function(reshape, (a, [-1])) if flat else a for a, flat in plan]
            flat = graph.call_function(op, tuple(args), dict(new.kwargs))
            back = graph.call_function(reshape, (flat, shape))
        back.meta["val"] = val
        new.replace_all_uses_with(back)
        graph.erase_node(new)
        changed = True
    if changed:
        gm.recompile()
    return gm


def _compiler(kind, options):
    use_fused = options.get("fused", True)
    use_replay = options.get("replay", True)

    def compile_graph(gm, example_inputs):
        del example_inputs
        _stats["graphs"] += 1
        _stats[kind] += 1
        gm = _flat_updates(_match_traced_layouts(_drop_rng_wrappers(gm)))
        fused = _fused_runner() if use_fused else None
        if any(_is_collective(n) for n in gm.graph.nodes):
            return _SegmentedGraph(gm, kind, fused, use_replay)
        _stats["segments"] += 1
        return _GraphRunner(gm, kind, fused, replay=use_replay)

    return compile_graph


# --- graphs with collectives ------------------------------------------------------------

_COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d_functional", "_c10d_functional_autograd")


def _is_collective(node):
    t = node.target
    return (node.op == "call_function" and isinstance(t, torch._ops.OpOverload)
            and t.namespace in _COLLECTIVE_NAMESPACES)


def _partitions(gm):
    """node -> partition: 2k for compute of segment k, 2k+1 for the
    collectives after it. A compute op goes to the earliest segment after
    the collectives it reads; a collective (and its wait) right after the
    segment that makes its input."""
    level, part = {}, {}
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            level[node] = 0
            continue
        if node.op == "output":
            continue
        coll = _is_collective(node)
        lv = 0
        for i in node.all_input_nodes:
            lv = max(lv, level[i] + (1 if not coll and _is_collective(i) else 0))
        level[node] = lv
        part[node] = 2 * lv + coll
    return part


class _Segment(torch.nn.Module):
    """A compute segment of a split graph, called by the split graph's
    top-level code: its _GraphRunner (boxed) under a plain call."""

    def __init__(self, runner):
        super().__init__()
        self.runner = runner

    def forward(self, *args):
        return self.runner(list(args))


class _Collectives(torch.nn.Module):
    """A group of collectives between segments, run as they are: each
    functional collective calls the process group (the host transport)."""

    def __init__(self, gm):
        super().__init__()
        self.gm = gm

    def forward(self, *args):
        _stats["collective_runs"] += 1
        return self.gm(*args)


class _SegmentedGraph:
    """An AOTAutograd graph with functional collectives, split by
    torch.fx's split_module into compute segments (each a _GraphRunner:
    captured once, replayed) and the collectives between them. The split's
    top-level code (a few Python calls per segment) runs them in order."""

    def __init__(self, gm, kind, fused, replay):
        from torch.fx.passes.split_module import split_module
        self._boxed_call = True
        self.kind = kind
        part = _partitions(gm)
        split = split_module(gm, None, lambda n: part[n], keep_original_order=True)
        names = sorted((int(name[len("submod_"):]), name) for name, _ in split.named_children())
        compute = [name for p, name in names if p % 2 == 0]
        for p, name in names:
            sub = getattr(split, name)
            if p % 2:
                setattr(split, name, _Collectives(sub))
            else:
                seg = (compute.index(name) + 1, len(compute))
                setattr(split, name, _Segment(_GraphRunner(sub, kind, fused, replay, segment=seg)))
        self.split = split
        self.segments = len(compute)
        self.collective_groups = len(names) - len(compute)
        _stats["segments"] += self.segments

    def __call__(self, args):
        inputs = list(args)
        args.clear()
        _stats["calls"] += 1
        return self.split(*inputs)


# --- the backend ----------------------------------------------------------------------

def tpu_backend(gm, example_inputs, options=None, mode=None):
    """The Dynamo backend behind torch.compile(backend="tpu").

    options (torch.compile(..., options={...})):
      "fused": False  runs graphs op by op in strict eager even when fused
                      eager is available (for comparison).
      "replay": False records every call under fused eager instead of
                      replaying the captured program."""
    if mode not in _MODES:
        raise ValueError(f"torch.compile(backend='tpu'): unknown mode {mode!r}; known: "
                         f"{sorted(m for m in _MODES if m)} (every mode compiles each graph "
                         f"into one program and replays it)")
    from torch._dynamo.backends.common import aot_autograd

    options = dict(options or {})
    unknown = set(options) - {"fused", "replay"}
    if unknown:
        raise ValueError(f"torch.compile(backend='tpu'): unknown options {sorted(unknown)}; "
                         f"known: ['fused', 'replay']")
    backend = aot_autograd(
        fw_compiler=_compiler("forward", options),
        bw_compiler=_compiler("backward", options),
        inference_compiler=_compiler("inference", options),
        decompositions=decompositions(),
        keep_inference_input_mutations=True,
    )
    return backend(gm, example_inputs)


# torch.compile's modes: all mean the same here (one program per graph,
# replayed without Python per op, which is what "reduce-overhead" asks for).
_MODES = {None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"}


# --- torch.compile's default backend on tpu tensors -----------------------------------------
#
# torch.compile(model) with no backend= is Inductor, whose own "tpu" device
# (Pallas code generation for Google's torch_tpu) fails here with "No module
# named 'torch_tpu'". Graphs that touch tpu tensors go to the "tpu" backend
# instead, as CUDA code expects its default to work; other graphs keep
# Inductor. Inductor has already validated mode= and options= (an unknown
# key raises there); the ones it set are performance settings with no
# meaning for the tpu backend, named once in a warning.

_warned_options = set()


def _is_tpu(v):
    return isinstance(v, torch.Tensor) and v.device.type == "tpu"


def _graph_on_tpu(gm, inputs):
    if any(_is_tpu(x) for x in inputs):
        return True
    for node in getattr(getattr(gm, "graph", None), "nodes", ()):
        val = node.meta.get("val", node.meta.get("example_value"))
        vals = val if isinstance(val, (list, tuple)) else (val,)
        if any(_is_tpu(v) for v in vals):
            return True
    return False


def _route_default_backend():
    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    if wrapper is None or getattr(wrapper.__call__, "_torchtpu", False):
        return
    inductor_call = wrapper.__call__

    def __call__(self, model_, inputs_, *, config_patches=None):
        if not _graph_on_tpu(model_, inputs_):
            return inductor_call(self, model_, inputs_, config_patches=config_patches)
        ignored = sorted(set({**self.config, **(config_patches or {})}) - _warned_options)
        if ignored:
            import warnings
            _warned_options.update(ignored)
            warnings.warn(f"torch.compile on tpu tensors runs through torchtpu's 'tpu' backend "
                          f"(not Inductor); these Inductor settings have no effect there: "
                          f"{ignored}", stacklevel=2)
        return tpu_backend(model_, inputs_)

    __call__._torchtpu = True
    wrapper.__call__ = __call__


_route_default_backend()


def register():
    """Registers the backend name "tpu" with Dynamo (once)."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "tpu" not in _COMPILER_FNS:
        register_backend(tpu_backend, name="tpu")


# --- the trainer's training.compile ---------------------------------------------------------

def compile_training(forward_loss, optimizer, device):
    """For torchtpu.train with training.compile = true: compiles the step's
    forward+loss function (AOTAutograd makes its backward) and, on "tpu", the
    optimizer step. Returns (forward_loss, optimizer_step).

    So that the optimizer step compiles once, its per-step values live on the
    device: the learning rate becomes a 0-d tensor (the scheduler fills it in
    place instead of handing Dynamo a new constant, which would recompile) and
    Adam's step counts become device tensors (capturable). A fused optimizer
    implementation keeps its eager step. On the CPU the backend is inductor
    and the optimizer step stays eager (the CPU has no capturable Adam)."""
    device = torch.device(device)
    backend = "tpu" if device.type == "tpu" else "inductor"
    forward_loss = torch.compile(forward_loss, backend=backend)
    groups = optimizer.param_groups
    if device.type != "tpu" or any(g.get("fused") for g in groups):
        return forward_loss, optimizer.step
    for group in groups:
        if "capturable" in group:
            group["capturable"] = True
        if not isinstance(group["lr"], torch.Tensor):
            group["lr"] = torch.tensor(float(group["lr"]), device=device)
    for state in optimizer.state.values():  # a resumed optimizer's step counts
        if isinstance(state.get("step"), torch.Tensor):
            state["step"] = state["step"].to(device=device, dtype=torch.float32)
    return forward_loss, torch.compile(optimizer.step, backend=backend)
