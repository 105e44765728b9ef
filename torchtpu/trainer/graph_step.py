"""training.compile_mode = "step": the whole training step as one program.

    python -m torchtpu.train --config torchtpu/configs/llama_debug.toml \\
        --training.compile_mode step

One step is forward + loss (+ the MoE load-balancing loss) over every
micro-batch, backward, gradient clipping (training.max_norm), the AdamW /
Adam / SGD update with weight decay, and the optimizer's step counts. It is
written as one functional function of (parameters, buffers, optimizer state,
learning rates, micro-batches) -> (loss, grad norm): torch.func.functional_call
runs the model on the parameters it is given, torch.autograd.grad takes the
gradients. make_fx traces that function once with fake tensors into an FX
graph of ATen ops (the backward included), decomposed with
torchtpu.compile.decompositions(), and torchtpu.compile's _GraphRunner runs
it: the first step is recorded under a core graph capture, every later step
replays the captured program in one shim call.

Parameters and optimizer state are updated in place by the program: the
graph ends with copy_ of each new value into its input, and a replay
donates those inputs' buffers to the program, which writes the new values
into them (tf.aliasing_output; see tt_graph_replay and
torchtpu.compile.stats()["donated_buffers"]), so model.parameters() and
optimizer.state are the live values without a second copy of them, and
checkpoints, read-back and resume see them as usual. The
optimizer state keeps torch.optim's layout (exp_avg, exp_avg_sq and a step
count per parameter, as capturable Adam keeps them: a float32 tensor on the
device; momentum_buffer for SGD).

The learning rate is an input (one 0-d float32 tensor per parameter group,
uploaded each step from group["lr"], which the trainer's LambdaLR sets), so
the schedule changes nothing in the program: nothing recompiles. Gradient
accumulation runs inside the step: the micro-batches come as one
[accum, batch, seq] tensor and the graph sums their gradients.

On many ranks the collectives cannot run inside a device program across
processes on this plugin (the host transport), so the step runs as program
segments with the collectives between them:
- DDP (data_parallel_replicate_degree = world size): a forward+backward
  program, the all_reduce of one flat gradient bucket, a clipping+optimizer
  program (2 segments).
- SimpleFSDP (parallelism.fsdp = "simple", data_parallel_shard_degree > 1,
  HSDP too): the parameters and optimizer state stay DTensor Shard(0) shards;
  one traced graph gathers the shards, runs forward and backward,
  reduce-scatters the gradients and all-reduces the squares of the shards'
  grad norms (clipping needs the global norm), as _c10d_functional ops;
  torchtpu.compile._SegmentedGraph splits it around them (4 segments:
  [casts] gather [forward, backward] reduce-scatter [norm] all-reduce
  [update]), each captured once and replayed.
The trainer prints the programs per step and the segments, and stats() has
them with the compiles and segment replays after step 2.

Not covered (a clear error): FSDP2 (fully_shard: its collectives run in
eager hooks), tensor parallelism, the fused optimizer implementation,
amsgrad, maximize, SGD dampening, and optimizers other than
torch.optim.AdamW, Adam and SGD. Random ops (dropout) draw fresh numbers at
every replay but not the numbers eager would draw."""
import contextlib

import torch
import torch.nn.functional as F
from torch.nn.utils.stateless import _reparametrize_module as reparametrize

__all__ = ["WholeStep", "programs_during"]


def programs_during(fn):
    """(fn's result, programs the core launched while it ran: strict ops,
    fused flushes, graph replays, collectives), counted with the core's
    launch profile (started for the call unless it is on already)."""
    from .. import _core

    _core.runtime()
    if _core.profile_enabled():
        before = _core.profile_counts()[0]
        out = fn()
        return out, _core.profile_counts()[0] - before
    _core.profile_start()
    try:
        out = fn()
        events = _core.profile_read()
    finally:
        _core.profile_stop()
    return out, len(events)


def _compiles():
    return torch.tpu._get_cache_stats()["compiles"]


class WholeStep:
    """The trainer's step in compile_mode "step". `model` is the module
    itself (not its DDP wrapper); `optimizer` an AdamW / Adam / SGD over its
    parameters. step(xs, ys) with xs, ys [accum, batch, seq] CPU tensors runs
    one step and returns (mean loss over the micro-batches, grad norm before
    clipping) as 0-d device tensors."""

    def __init__(self, model, optimizer, cfg, device, par=None):
        t = cfg["training"]
        self.device = torch.device(device)
        if self.device.type != "tpu":
            raise ValueError("training.compile_mode = 'step' runs on the tpu device "
                             f"(training.device is {self.device.type!r})")
        from .. import compile as tc

        self._tc = tc
        self.fused = tc._fused_runner()
        if self.fused is None:
            raise RuntimeError("training.compile_mode = 'step' needs fused eager "
                               "(torchtpu.modes), which this build lacks")
        self.par = par
        self.ranks = par.world if par is not None and par.enabled else 1
        if par is not None and par.enabled and par.tp > 1:
            raise ValueError(
                "training.compile_mode = 'step' supports one process, DDP and SimpleFSDP "
                f"(parallelism.fsdp = 'simple'); got tensor_parallel_degree {par.tp}")
        if par is not None and par.enabled and par.shard > 1 and not par.simple:
            raise ValueError(
                f"training.compile_mode = 'step' with data_parallel_shard_degree {par.shard} "
                f"needs parallelism.fsdp = 'simple' (SimpleFSDP, whose gathers and "
                f"reduce-scatters the traced step holds); FSDP2's fully_shard runs its "
                f"collectives in eager module hooks, which one traced step cannot contain")
        self.simple = par is not None and par.enabled and par.simple
        self.model = model
        self.optimizer = optimizer
        self.max_norm = float(t["max_norm"])
        self.accum = int(t["gradient_accumulation_steps"])
        self.autocast = t["mixed_precision"] == "bfloat16"
        self.kind = self._optimizer_kind(optimizer)

        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.pnames = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.bnames = [n for n, _ in model.named_buffers()]
        self.buffers = [b for _, b in model.named_buffers()]
        frozen = [(n, p) for n, p in model.named_parameters() if not p.requires_grad]
        self.fnames, self.frozen = [n for n, _ in frozen], [p for _, p in frozen]
        group_of = {}
        for gi, group in enumerate(optimizer.param_groups):
            for p in group["params"]:
                group_of[id(p)] = gi
        missing = [n for n, p in named if id(p) not in group_of]
        if missing:
            raise ValueError(f"training.compile_mode = 'step': parameters not in the optimizer: "
                             f"{missing[:4]}")
        self.group = [group_of[id(p)] for p in self.params]
        if self.simple:
            self._init_shards(par)
        self.states = self._init_state()
        self.runners = None   # one _GraphRunner per segment, made at the first step
        self.calls = 0
        self.programs_per_step = None
        self.compiles_after_warmup = 0
        self.replays_after_warmup = 0
        self._compiles_at_2 = None

    # --- set-up --------------------------------------------------------------------

    @staticmethod
    def _optimizer_kind(opt):
        kind = {torch.optim.AdamW: "adamw", torch.optim.Adam: "adam",
                torch.optim.SGD: "sgd"}.get(type(opt))
        if kind is None:
            raise ValueError(f"training.compile_mode = 'step': optimizer {type(opt).__name__} "
                             f"is not supported (AdamW, Adam or SGD)")
        for group in opt.param_groups:
            bad = [k for k in ("fused", "amsgrad", "maximize", "differentiable")
                   if group.get(k)]
            if group.get("dampening", 0):
                bad.append("dampening")
            if bad:
                raise ValueError(
                    f"training.compile_mode = 'step': {type(opt).__name__} with "
                    f"{', '.join(bad)} is not supported (the step computes the update "
                    f"itself; optimizer.implementation must be foreach or for-loop)")
            if kind == "adam" and group.get("decoupled_weight_decay"):
                kind = "adamw"  # Adam(decoupled_weight_decay=True) is AdamW
        return kind

    def _init_state(self):
        """Per parameter, the state tensors the step reads and writes, in
        torch.optim's layout (created as torch.optim would on its first step)."""
        states = []
        for p, gi in zip(self.params, self.group):
            st = self.optimizer.state[p]
            group = self.optimizer.param_groups[gi]
            if self.kind in ("adam", "adamw"):
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float32, device=self.device)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                # a resumed run's step count lives on the host: the step updates it
                st["step"] = torch.as_tensor(st["step"], dtype=torch.float32).to(self.device)
                states.append([st["exp_avg"], st["exp_avg_sq"], st["step"]])
            elif group["momentum"]:
                # torch's first step sets the buffer to the gradient: with no
                # dampening, 0 * momentum + grad is exactly that
                if st.get("momentum_buffer") is None:
                    st["momentum_buffer"] = torch.zeros_like(p)
                states.append([st["momentum_buffer"]])
            else:
                states.append([])
        return states

    # --- SimpleFSDP: the collectives in the graph ----------------------------------
    #
    # The parameters (and the optimizer state) are DTensors Shard(0) on the
    # data-parallel mesh (torchtpu/trainer/simple_fsdp.py); the step takes
    # their local shards. It does what SimpleFSDP's parametrization does, once
    # per step instead of once per parameter read: all-gather the shards
    # (cast to mixed_precision_param first), run forward and backward on the
    # full parameters, reduce-scatter the gradients (in
    # mixed_precision_reduce, averaged over the ranks; HSDP: and all-reduced
    # over the replicas), and update the shards. The collectives are
    # _c10d_functional ops in the traced graph, one per bucket (every
    # parameter of one dtype flattened into one tensor): on the host
    # transport torchtpu.compile._SegmentedGraph splits the step around
    # them, so a step is a few programs with one all-gather, one
    # reduce-scatter and the grad norm's all-reduce between them.

    def _init_shards(self, par):
        from torch.distributed.tensor import DTensor

        from .simple_fsdp import DTYPES

        mesh = par.mesh
        self.shard_pg = mesh.get_group("dp_shard")
        self.rep_pg = mesh.get_group("dp_replicate") if mesh.ndim == 2 else None
        self.nshard = mesh.size(mesh.ndim - 1)
        self.param_dtype, self.reduce_dtype = DTYPES[par.param_dtype], DTYPES[par.reduce_dtype]
        sharded = self.params + self.frozen
        plain = [n for n, p in zip(self.pnames + self.fnames, sharded)
                 if not isinstance(p, DTensor)]
        if plain:
            raise ValueError(f"training.compile_mode = 'step' with SimpleFSDP: parameters "
                             f"{plain[:4]} are not sharded DTensors (parallelism.apply "
                             f"shards every parameter)")
        # per parameter: (rows of the full tensor, rows of one padded chunk);
        # Shard(0) splits as torch.chunk does (the last ranks may hold fewer
        # rows, or none), the collectives need equal pieces: pad to the chunk
        self.rows = [(p.shape[0], -(-p.shape[0] // self.nshard)) for p in sharded]

    @staticmethod
    def _local(t):
        from torch.distributed.tensor import DTensor
        return t._local_tensor if isinstance(t, DTensor) else t

    @staticmethod
    def _pad_rows(x, rows):
        if x.shape[0] == rows:
            return x
        return torch.cat([x, x.new_zeros((rows - x.shape[0],) + tuple(x.shape[1:]))])

    @staticmethod
    def _buckets(tensors):
        """dtype -> indices of the tensors (not None) of that dtype."""
        out = {}
        for i, t in enumerate(tensors):
            if t is not None:
                out.setdefault(t.dtype, []).append(i)
        return out

    def _gather(self, shards):
        """Local shards -> full tensors, one all-gather per dtype bucket."""
        c10d = torch.ops._c10d_functional
        S, group = self.nshard, self.shard_pg.group_name
        shards = [x.to(self.param_dtype) if x.is_floating_point() else x for x in shards]
        full = [None] * len(shards)
        for idx in self._buckets(shards).values():
            pieces = [self._pad_rows(shards[i], self.rows[i][1]).reshape(-1) for i in idx]
            sizes = [p.numel() for p in pieces]
            out = c10d.wait_tensor(c10d.all_gather_into_tensor(torch.cat(pieces), S, group))
            out = out.view(S, sum(sizes))  # rank r's bucket in row r
            k = 0
            for i, n in zip(idx, sizes):
                rows, chunk = self.rows[i]
                shape = (S * chunk,) + tuple(shards[i].shape[1:])
                full[i] = out[:, k:k + n].reshape(shape)[:rows]
                k += n
        return full

    def _reduce_scatter(self, grads, shards):
        """Full gradients -> this rank's shard of their mean over the ranks,
        one reduce-scatter (and, HSDP, one all-reduce) per dtype bucket."""
        c10d = torch.ops._c10d_functional
        S, group = self.nshard, self.shard_pg.group_name
        grads = [None if g is None else g.to(self.reduce_dtype) for g in grads]
        out = [None] * len(grads)
        for idx in self._buckets(grads).values():
            # [S, chunk x rest] per gradient, side by side: row r is rank r's bucket
            pieces = [self._pad_rows(grads[i], S * self.rows[i][1]).reshape(S, -1)
                      for i in idx]
            sizes = [p.shape[1] for p in pieces]
            mine = c10d.wait_tensor(c10d.reduce_scatter_tensor(
                torch.cat(pieces, dim=1).reshape(-1), "avg", S, group))
            if self.rep_pg is not None:
                mine = c10d.wait_tensor(c10d.all_reduce(mine, "avg", self.rep_pg.group_name))
            k = 0
            for i, n in zip(idx, sizes):
                shape = (self.rows[i][1],) + tuple(grads[i].shape[1:])
                local = shards[i]
                out[i] = mine[k:k + n].view(shape)[:local.shape[0]].to(local.dtype)
                k += n
        return out

    def _sharded(self, *flat):
        """SimpleFSDP (shard > 1, HSDP too): gather, forward + backward,
        reduce-scatter, the global grad norm, the update of the shards."""
        P, B, F_, S, G = (len(self.params), len(self.buffers), len(self.frozen),
                          len(self._flat_state()), len(self.optimizer.param_groups))
        params, buffers, frozen, state, lrs, rest = self._split(flat, (P, B, F_, S, G, 2))
        xs, ys = rest
        full = self._gather(params + frozen)
        loss, grads = self._loss_and_grads(full[:P], buffers, full[P:], xs, ys)
        grads = self._reduce_scatter(grads, params)
        with torch.no_grad():
            norm = self._update(params, self._unflat_state(state), lrs, grads)
        return loss, norm

    def _norm(self, grads):
        """The total 2-norm of the gradients, torch.nn.utils.clip_grad_norm_'s;
        SimpleFSDP: of the whole gradients, from the shards' squared norms
        summed over the shard group (the replicas hold the same shards)."""
        norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
        if not self.simple:
            return torch.linalg.vector_norm(norms)
        c10d = torch.ops._c10d_functional
        sq = (norms.float() ** 2).sum()
        sq = c10d.wait_tensor(c10d.all_reduce(sq, "sum", self.shard_pg.group_name))
        return sq.sqrt()

    # --- the functions traced ------------------------------------------------------

    def _loss_and_grads(self, params, buffers, frozen, xs, ys):
        """Forward + loss + backward of every micro-batch, as the eager trainer
        runs them: loss (+ aux) under autocast, (total / accum).backward()
        outside it, gradients summed over the micro-batches."""
        leaves = [p.detach().requires_grad_(True) for p in params]
        tensors = dict(zip(self.pnames, leaves))
        tensors.update(zip(self.bnames, buffers))
        tensors.update(zip(self.fnames, frozen))
        amp = (torch.autocast(self.device.type, dtype=torch.bfloat16) if self.autocast
               else contextlib.nullcontext())
        loss_sum, grads = None, None
        for i in range(self.accum):
            # The backward runs inside the reparametrization too (not after it,
            # as functional_call would leave it): activation checkpointing
            # recomputes its blocks during the backward, and they must read
            # the traced parameters, not the module's real ones.
            with reparametrize(self.model, tensors):
                with amp:
                    logits = self.model(xs[i])
                    loss = F.cross_entropy(logits.flatten(0, 1).float(), ys[i].flatten())
                    aux = self.model.aux_loss()
                    total = loss if aux is None else loss + aux
                g = torch.autograd.grad(total / self.accum, leaves, allow_unused=True)
            if grads is None:
                grads = list(g)
            else:
                grads = [b if a is None else a if b is None else a + b
                         for a, b in zip(grads, g)]
            loss = loss.detach()
            loss_sum = loss if loss_sum is None else loss_sum + loss
        return loss_sum / self.accum, grads

    def _update(self, params, states, lrs, grads):
        """Gradient clipping (torch.nn.utils.clip_grad_norm_'s formula) and the
        optimizer update (torch.optim's formulas, with the learning rate and
        the bias corrections as device values), written into the inputs.
        Returns the total grad norm before clipping."""
        live = [i for i, g in enumerate(grads) if g is not None]  # torch skips grad None
        norm = self._norm([grads[i] for i in live])
        if self.max_norm > 0:
            coef = torch.clamp(self.max_norm / (norm + 1e-6), max=1.0)
            grads = [None if g is None else g * coef for g in grads]
        groups = self.optimizer.param_groups
        for i in live:
            p, g, group, lr = params[i], grads[i], groups[self.group[i]], lrs[self.group[i]]
            wd = group["weight_decay"]
            if self.kind == "sgd":
                if wd:
                    g = g + wd * p
                momentum = group["momentum"]
                if momentum:
                    (buf,) = states[i]
                    new_buf = buf * momentum + g
                    buf.copy_(new_buf)
                    g = g + momentum * new_buf if group["nesterov"] else new_buf
                p.copy_(p - lr * g)
                continue
            exp_avg, exp_avg_sq, step = states[i]
            beta1, beta2 = group["betas"]
            new_step = step + 1
            new_p = p
            if wd:
                if self.kind == "adamw":
                    new_p = p * (1 - lr * wd)
                else:
                    g = g + wd * p
            m = torch.lerp(exp_avg, g, 1 - beta1)
            v = torch.addcmul(exp_avg_sq * beta2, g, g, value=1 - beta2)
            step_size = lr / (1 - torch.pow(beta1, new_step))
            bc2_sqrt = torch.sqrt(1 - torch.pow(beta2, new_step))
            denom = torch.sqrt(v) / bc2_sqrt + group["eps"]
            p.copy_(new_p - step_size * (m / denom))
            exp_avg.copy_(m)
            exp_avg_sq.copy_(v)
            step.copy_(new_step)
        return norm

    # --- inputs and segments -------------------------------------------------------

    def _flat_state(self):
        return [s for st in self.states for s in st]

    def _unflat_state(self, flat):
        out, k = [], 0
        for st in self.states:
            out.append(list(flat[k:k + len(st)]))
            k += len(st)
        return out

    def _split(self, flat, sizes):
        out, k = [], 0
        for n in sizes:
            out.append(list(flat[k:k + n]))
            k += n
        return out

    def _whole(self, *flat):
        """Single process: the whole step, one graph."""
        P, B, F_, S, G = (len(self.params), len(self.buffers), len(self.frozen),
                          len(self._flat_state()), len(self.optimizer.param_groups))
        params, buffers, frozen, state, lrs, rest = self._split(flat, (P, B, F_, S, G, 2))
        xs, ys = rest
        loss, grads = self._loss_and_grads(params, buffers, frozen, xs, ys)
        with torch.no_grad():
            norm = self._update(params, self._unflat_state(state), lrs, grads)
        return loss, norm

    def _forward_backward(self, *flat):
        """Many ranks, segment 1: the local loss and one flat gradient bucket."""
        P, B, F_ = len(self.params), len(self.buffers), len(self.frozen)
        params, buffers, frozen, rest = self._split(flat, (P, B, F_, 2))
        xs, ys = rest
        loss, grads = self._loss_and_grads(params, buffers, frozen, xs, ys)
        self._live = [i for i, g in enumerate(grads) if g is not None]
        return loss, torch.cat([grads[i].flatten() for i in self._live])

    def _optimizer(self, *flat):
        """Many ranks, segment 2: the summed bucket -> mean gradients, clipping
        and the update."""
        P, S, G = len(self.params), len(self._flat_state()), len(self.optimizer.param_groups)
        params, state, lrs, rest = self._split(flat, (P, S, G, 1))
        bucket = rest[0] / self.ranks  # DDP averages the gradients
        grads, k = [None] * P, 0
        for i in self._live:
            n = self.params[i].numel()
            grads[i] = bucket[k:k + n].view(self.params[i].shape)
            k += n
        return self._update(params, self._unflat_state(state), lrs, grads)

    def _trace(self, fn, inputs, kind):
        from torch._subclasses.fake_tensor import FakeTensor
        import torch.fx.traceback as fx_traceback
        from torch.fx.experimental.proxy_tensor import make_fx

        from .. import _core

        tc = self._tc
        try:
            # preserve_node_meta restores fx's global node metadata afterwards:
            # selective checkpointing writes "recompute" tags into it while
            # tracing and does not take them out, so every later torch.compile
            # in the process would see its nodes as checkpointed
            # fused_sdp_tracing: SDPA traces as the fused attention op, as
            # under torch.compile (make_fx does not functionalize)
            with fx_traceback.preserve_node_meta(), _core.fused_sdp_tracing():
                gm = make_fx(fn, decomposition_table=tc.decompositions(),
                             tracing_mode="fake")(*inputs)
        finally:
            # the forward left traced values on the modules (MoE's aux_loss)
            for m in self.model.modules():
                for k, v in list(vars(m).items()):
                    if isinstance(v, FakeTensor):
                        setattr(m, k, None)
        consts = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
        if consts:
            raise RuntimeError(f"training.compile_mode = 'step': the traced {kind} graph reads "
                               f"tensors that are not inputs ({consts[:4]}); the step would "
                               f"not be replayable")
        gm = tc._flat_updates(tc._match_traced_layouts(gm))
        if any(tc._is_collective(n) for n in gm.graph.nodes):
            # the host transport: program segments with the collectives between
            return tc._SegmentedGraph(gm, kind, self.fused, replay=True)
        return tc._GraphRunner(gm, kind, self.fused)

    def _lrs(self):
        return [torch.tensor(float(g["lr"]), dtype=torch.float32).to(self.device)
                for g in self.optimizer.param_groups]

    def _run(self, xs, ys):
        xs, ys = xs.to(self.device), ys.to(self.device)
        params = [p.detach() for p in self.params]  # aliases: the program writes them
        base = params + [b.detach() for b in self.buffers] + [p.detach() for p in self.frozen]
        state = self._flat_state()
        if self.simple:  # the local shards of the DTensors
            local = self._local
            inputs = ([local(p).detach() for p in self.params]
                      + [b.detach() for b in self.buffers]
                      + [local(p).detach() for p in self.frozen] + [local(s) for s in state]
                      + self._lrs() + [xs, ys])
            if self.runners is None:
                self.runners = [self._trace(self._sharded, inputs, "whole-step")]
            return self.runners[0](inputs)
        if self.ranks == 1:
            inputs = base + state + self._lrs() + [xs, ys]
            if self.runners is None:
                self.runners = [self._trace(self._whole, inputs, "whole-step")]
            return self.runners[0](inputs)
        import torch.distributed as dist

        inputs = base + [xs, ys]
        if self.runners is None:
            self.runners = [self._trace(self._forward_backward, inputs, "forward+backward")]
        loss, bucket = self.runners[0](inputs)
        dist.all_reduce(bucket)  # the host transport: between the two programs
        inputs = params + state + self._lrs() + [bucket]
        if len(self.runners) == 1:
            self.runners.append(self._trace(self._optimizer, inputs, "optimizer"))
        norm = self.runners[1](inputs)
        return loss, norm

    def _segment_runners(self):
        out = []
        for r in self.runners or ():
            if isinstance(r, self._tc._SegmentedGraph):
                out += [m.runner for m in r.split.children()
                        if isinstance(m, self._tc._Segment)]
            else:
                out.append(r)
        return out

    @property
    def segments(self):
        """Device programs per step: 1 on one process; on the host transport
        the program segments between the collectives (DDP: 2 around the
        gradients' all_reduce; SimpleFSDP: those of the split graph)."""
        if self.runners is None:
            return None
        return len(self._segment_runners())

    def not_captured(self):
        """Why a segment runs fused instead of replaying, or None."""
        for r in self._segment_runners():
            if r.no_capture is not None:
                return f"{r.kind}: {r.no_capture}"
        return None

    def stats(self):
        """The trainer's whole_step report: programs launched by step 2,
        program segments per step, compiles in the steps after step 2, and
        segment replays in those steps (segments x steps when every segment
        replays its captured program)."""
        return {"programs_per_step": self.programs_per_step, "segments": self.segments,
                "compiles_after_step2": self.compiles_after_warmup,
                "replays_after_step2": self.replays_after_warmup}

    def __call__(self, xs, ys):
        self.calls += 1
        if self.calls == 2:  # the first replay: count its programs
            out, n = programs_during(lambda: self._run(xs, ys))
            self.programs_per_step = n
            self._compiles_at_2 = _compiles()
        else:
            c0, r0 = _compiles(), self._tc._stats["replays"]
            out = self._run(xs, ys)
            if self.calls > 2:
                self.compiles_after_warmup += _compiles() - c0
                self.replays_after_warmup += self._tc._stats["replays"] - r0
        # LambdaLR warns when stepped before optimizer.step(): this is its step
        self.optimizer._opt_called = True
        return out
