"""The host-collective transport: a c10d process group whose collectives copy
"tpu" tensors to the host, run PyTorch's own gloo process group (created on
the same store) on the host copies, and copy the results back into the
original tensors (views included: the copy back is a write through the view).

CPU tensors given to this group go to the same gloo group (copied first only
when they are not contiguous), so one group serves both devices.

Every collective completes before it returns: the Work it hands back is
already finished, so wait() orders its result before later ops, as on CUDA.
Point-to-point is asynchronous (send posts a host snapshot; recv's wait()
copies the received buffer in), so irecv-before-isend patterns work.
Before each collective the ranks exchange a small descriptor (collective,
dtype, shape, root, reduce op) through gloo; a mismatch raises a RuntimeError
naming the collective and each rank's tensor instead of hanging or silently
reducing garbage (TORCHTPU_DIST_CHECK=0 turns the check off).

ReduceOp.PREMUL_SUM(f) (NCCL's: each rank's input times f, then summed; FSDP2
reduce-scatters gradients with it, e.g. TorchTitan's gradient_divide_factor
1.0) scales the host copies by f and sums them through gloo, which has no
PREMUL_SUM of its own.

Hung collectives (docs/fault_tolerance.md): every collective has a sequence
number per group, and a flight recorder keeps the last
TORCHTPU_FR_BUFFER_SIZE (2000) collectives of the process (group, sequence
number, collective, tensors, state, start, duration), as NCCL's does. A
collective that fails in gloo (its timeout passed, or a peer closed its
connection) raises a RuntimeError naming the collective, its sequence
number, the group and the ranks that did not arrive, and the recorder is
written to TORCHTPU_FR_DUMP_FILE<rank>.json (default
/tmp/torchtpu_trace_rank_<rank>.json). The ranks find out who did not
arrive through the store: each failing rank reports the collective it is
in; a rank with no report within the window (the timeout, at most 10 s; 2 s
after a closed connection) is dead or stuck elsewhere, one reporting another
collective has diverged.

Left out: recv_anysource (raises), the device-collective transport
(docs/distributed.md)."""
import collections
import datetime
import functools
import json
import os
import re
import threading
import time
import weakref

import torch
import torch.distributed as dist
import torch._C._distributed_c10d as _c10d
from torch._C._distributed_c10d import _create_work_from_future
from torch.futures import Future

TRANSPORT = "host (gloo)"

_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
           torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
           torch.complex64, torch.complex128]
_COLLECTIVES = ["all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
                "reduce_scatter", "reduce_scatter_tensor", "all_to_all_single", "all_to_all",
                "gather", "scatter", "barrier", "all_reduce_coalesced"]
_MAX_DIMS = 6
_DESC_LEN = 6 + _MAX_DIMS  # collective, dtype, root, reduce op, ndim, numel, dims


def _done(result):
    """A finished Work whose future holds `result` (what DDP's reducer reads)."""
    fut = Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


class _RecvWork(dist.Work):
    """An asynchronous recv: gloo receives into a host buffer in its own
    thread; wait() waits for it and then copies the buffer into the tensor, so
    the value is in place before any later op (irecv before isend works)."""

    def __init__(self, work, tensors, hosts, back):
        super().__init__()
        self._work, self._tensors, self._hosts, self._back = work, tensors, hosts, back
        self._copied = False

    def wait(self, timeout=None):
        if timeout is None:
            self._work.wait()
        else:
            self._work.wait(timeout)
        if not self._copied:
            self._copied = True
            for t, h in zip(self._tensors, self._hosts):
                self._back(t, h)
        return True

    def is_completed(self):
        return self._copied or self._work.is_completed()

    def is_success(self):
        return self._work.is_success()

    def exception(self):
        return self._work.exception()

    def source_rank(self):
        return self._work.source_rank()

    def _source_rank(self):
        return self._work._source_rank()

    def result(self):
        self.wait()
        return self._tensors

    def get_future(self):
        self.wait()
        fut = Future()
        fut.set_result(self._tensors)
        return fut


def _red_op(opts):
    """The reduce op as a RedOpType (PREMUL_SUM stays PREMUL_SUM: ranks agree on it)."""
    op = opts.reduceOp
    return getattr(op, "op", op)  # ReduceOp -> RedOpType


def _gloo_op(op):
    """The op gloo runs: PREMUL_SUM's sum happens there, after _premul scaled the inputs."""
    return dist.ReduceOp.SUM if op == dist.ReduceOp.PREMUL_SUM else op


def _premul(name, opts, hosts):
    """For PREMUL_SUM(f): new host tensors holding each input times f (the
    inputs themselves are left alone); for any other op: `hosts` unchanged."""
    if _red_op(opts) != dist.ReduceOp.PREMUL_SUM:
        return hosts
    factor = getattr(opts.reduceOp, "factor", None)
    if factor is None:
        raise ValueError(f"tpu {name}: ReduceOp.PREMUL_SUM needs a factor "
                         f"(torch.distributed._make_nccl_premul_sum(factor))")
    for h in hosts:
        if not h.is_floating_point():
            raise TypeError(f"tpu {name}: ReduceOp.PREMUL_SUM needs floating-point tensors, "
                            f"got {_describe(h)}")
    if isinstance(factor, torch.Tensor):
        return [h * factor.detach().to("cpu", h.dtype) for h in hosts]
    return [h * factor for h in hosts]


def _describe(t):
    return "none" if t is None else f"{str(t.dtype)[6:]}{list(t.shape)}"


# --- the flight recorder --------------------------------------------------------------------

_FR_SIZE_ENV, _FR_FILE_ENV = "TORCHTPU_FR_BUFFER_SIZE", "TORCHTPU_FR_DUMP_FILE"
_FR_DEFAULT_FILE = "/tmp/torchtpu_trace_rank_"


class FlightRecorder:
    """The last N collectives of this process, all groups together (a ring:
    recording costs a dict and a deque append per collective)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entries = None
        self._size = None

    def _buffer(self):
        size = int(os.environ.get(_FR_SIZE_ENV, "2000") or 0)
        if size != self._size:
            self._size = size
            self._entries = collections.deque(self._entries or (), maxlen=max(size, 1))
        return self._entries if size > 0 else None

    def start(self, group, seq, name, size, args):
        buf = self._buffer()
        if buf is None:
            return None
        entry = {"group": group, "seq": seq, "collective": name, "group_size": size,
                 "tensors": _tensors_of(args), "state": "started",
                 "time_started": time.time(), "duration_ms": None}
        with self._lock:
            buf.append(entry)
        return entry

    @staticmethod
    def finish(entry, state, t0):
        if entry is not None:
            entry["state"] = state
            entry["duration_ms"] = round((time.monotonic() - t0) * 1e3, 3)

    def entries(self):
        with self._lock:
            return list(self._entries or ())

    def dump(self, rank, reason):
        """Writes the entries to TORCHTPU_FR_DUMP_FILE<rank>.json; its path
        (None where that cannot be written or the recorder is off)."""
        if self._buffer() is None:
            return None
        path = os.environ.get(_FR_FILE_ENV) or _FR_DEFAULT_FILE
        path = f"{path}{rank}.json"
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump({"rank": rank, "pid": os.getpid(), "reason": reason,
                           "time": time.time(), "entries": self.entries()}, f, indent=1)
            os.replace(tmp, path)
        except OSError:
            return None
        return path


RECORDER = FlightRecorder()


def _tensors_of(args, limit=4):
    out = []

    def walk(a):
        if len(out) >= limit:
            return
        if isinstance(a, torch.Tensor):
            out.append(f"{_describe(a)}@{a.device.type}")
        elif isinstance(a, (list, tuple)):
            for x in a:
                walk(x)
    walk(args)
    return out


_COMM_FAILURE = re.compile(r"[Tt]imed out|[Tt]imeout|[Cc]onnection|[Rr]ead error|[Ww]rite error|"
                           r"[Ss]ocket|peer|gloo", re.S)


def _is_comm_failure(e):
    """gloo's errors: a timeout or a closed/reset connection (our own
    argument errors are ValueError/TypeError, and ranks disagreeing says so)."""
    if isinstance(e, (ValueError, TypeError, NotImplementedError)):
        return False
    text = str(e)
    return "ranks disagree" not in text and bool(_COMM_FAILURE.search(text))


def _collective(name):
    """Numbers the collective in its group, records it in the flight
    recorder and turns a gloo failure into the error that names it. Inner
    calls (coalesced ones looping over single ones) are part of the outer."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            if self._depth:
                return fn(self, *args, **kwargs)
            self._seq += 1
            seq, t0 = self._seq, time.monotonic()
            entry = RECORDER.start(self._name(), seq, name, self._size, args)
            self._depth += 1
            try:
                out = fn(self, *args, **kwargs)
            except Exception as e:
                RECORDER.finish(entry, "failed", t0)
                if _is_comm_failure(e):
                    raise self._comm_error(name, seq, e) from e
                raise
            finally:
                self._depth -= 1
            RECORDER.finish(entry, "completed", t0)
            return out
        return wrapper
    return deco


class _Released:
    """What a destroyed group's transport becomes: any use is a clear error."""

    def __getattr__(self, name):
        raise RuntimeError("tpu process group: used after destroy_process_group() "
                           f"(its gloo transport is gone; called {name})")


_live_groups = weakref.WeakSet()  # ProcessGroupTPU objects not yet shut down


def release_all():
    """Shuts down every tpu group still alive (at interpreter exit, before
    finalization: their gloo threads are joined while Python still runs)."""
    for pg in list(_live_groups):
        pg.shutdown()


class ProcessGroupTPU(dist.ProcessGroup):
    """The "tpu" / "tpu_dist" c10d backend (host transport). Made by
    torch.distributed.init_process_group through register_backend; not meant
    to be constructed directly."""

    def __init__(self, store, rank, size, timeout, check=True):
        super().__init__(rank, size)
        self._rank, self._size, self._check_shapes = rank, size, check
        if not isinstance(timeout, datetime.timedelta):
            timeout = datetime.timedelta(seconds=float(timeout))
        self._timeout = timeout
        # torchrun's attempt in the keys too: where the caller's store is
        # not scoped to the restart (torchrun keeps its store), the restarted
        # ranks must not read the dead attempt's gloo addresses
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self._gloo = dist.ProcessGroupGloo(
            dist.PrefixStore(f"tpu_host_gloo/{attempt}/", store), rank, size, timeout)
        self._fr_store = dist.PrefixStore(f"tpu_host_fr/{attempt}/", store)
        self._seq, self._depth = 0, 0
        self.transport = TRANSPORT
        _live_groups.add(self)

    @property
    def group_name(self):
        # The C++ ProcessGroup keeps its name on its backends; this group has
        # none. Once destroy_process_group has dropped it from c10d's tables
        # (vLLM's shutdown asks for the name after that), the name it had.
        name = dist.distributed_c10d._world.pg_names.get(self)
        if name is not None:
            self._last_name = name
        return name if name is not None else getattr(self, "_last_name", "")

    @property
    def pg_name(self):
        return self.group_name

    def getBackendName(self):
        return "tpu"

    @property
    def timeout(self):
        """The timeout of later collectives (init_process_group's, or set_timeout's)."""
        return self._timeout

    def set_timeout(self, timeout):
        """Sets the timeout of later collectives. The C++ ProcessGroup.set_timeout
        this overrides sets it on the group's registered backends, and this
        group has none (its transport is its own gloo group), so without this
        the call would succeed and change nothing."""
        if not isinstance(timeout, datetime.timedelta):
            raise TypeError(f"ProcessGroupTPU.set_timeout: expected a datetime.timedelta, "
                            f"got {type(timeout).__name__}")
        self._gloo.set_timeout(timeout)
        self._timeout = timeout

    def __repr__(self):
        return f"ProcessGroupTPU(rank={self._rank}, size={self._size}, transport={TRANSPORT!r})"

    def shutdown(self):
        """destroy_process_group's call. The C++ ProcessGroup.shutdown this
        overrides shuts the registered backends down, and this group has none;
        gloo's own shutdown does nothing (c10d's Backend default): its worker
        threads stop only when the gloo group is destroyed. Dropping it here
        joins them now, not at some point of the interpreter's exit, where a
        rank process died now and then with "terminate called without an
        active exception" after its work was done. Later use raises."""
        gloo, self._gloo = self._gloo, _Released()
        _live_groups.discard(self)
        if not isinstance(gloo, _Released):
            gloo.shutdown()
            del gloo  # the last reference but in-flight works': its threads are joined

    def abort(self):
        self._gloo.abort()

    # --- failures -----------------------------------------------------------------------------

    def _name(self):
        try:
            return self.group_name
        except (KeyError, AttributeError):
            return "?"

    def _global_rank(self, r):
        try:
            ranks = dist.distributed_c10d._world.pg_group_ranks[self]
            return {g: l for l, g in ranks.items()}[r]
        except (KeyError, AttributeError):
            return r

    def _comm_error(self, name, seq, cause):
        """The error of a collective gloo could not complete: which one, and
        who did not arrive (asked through the store), with the flight
        recorder written to its file."""
        text = str(cause)
        timed_out = "imed out" in text or "imeout" in text
        why = (f"not complete within the group's timeout ({self._timeout.total_seconds():g} s)"
               if timed_out else "fail: a peer closed its connection (it died or gave up)")
        # a closed connection: the peer is most likely dead, ask briefly
        absent, other = self._who_did_not_arrive(seq, name, 10.0 if timed_out else 2.0)
        me = self._global_rank(self._rank)
        where = (f"tpu process group {self._name()!r} ({self._size} ranks; this is rank {me}): "
                 f"{name} #{seq} (its sequence number in the group) did {why}")
        parts = [where]
        if absent is None:
            parts.append("the store cannot be reached to tell which ranks did not arrive")
        else:
            parts.append("ranks that did not arrive: "
                         + (str([self._global_rank(r) for r in absent]) if absent else "none")
                         + (" (no report: dead, hung, or still busy elsewhere)" if absent else ""))
            for r, what in other.items():
                parts.append(f"rank {self._global_rank(r)} is in {what} instead")
        path = RECORDER.dump(me, where)
        parts.append(f"flight recorder (last collectives of this rank): {path}"
                     if path else "flight recorder off (TORCHTPU_FR_BUFFER_SIZE=0)")
        parts.append(f"gloo: {text.strip()[:300]}")
        return RuntimeError("; ".join(parts))

    def _who_did_not_arrive(self, seq, name, most):
        """(ranks with no report, {rank: "collective #seq"} for ranks in
        another collective), from each failing rank's report in the store;
        (None, {}) where the store is gone."""
        mine = f"{name} #{seq}"
        window = min(self._timeout.total_seconds(), most)
        try:
            self._fr_store.set(f"in/{self._rank}", mine)
            reports, deadline = {}, time.monotonic() + window
            while True:
                for r in range(self._size):
                    if r != self._rank and r not in reports and \
                            self._fr_store.check([f"in/{r}"]):
                        reports[r] = self._fr_store.get(f"in/{r}").decode()
                if len(reports) == self._size - 1 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        except Exception:  # noqa: BLE001 (the store's server died with its rank)
            return None, {}
        absent = [r for r in range(self._size) if r != self._rank and r not in reports]
        return absent, {r: w for r, w in reports.items() if w != mine}

    # --- consistency check across ranks ---------------------------------------------------

    def _agree(self, name, t=None, root=-1, op=-1):
        """All ranks must call the same collective on the same dtype/shape."""
        if not self._check_shapes or self._size == 1:
            return
        desc = torch.full((_DESC_LEN,), -1, dtype=torch.int64)
        desc[0] = _COLLECTIVES.index(name)
        desc[2], desc[3] = root, int(op)
        if t is not None:
            if t.dim() > _MAX_DIMS:
                shape = [t.numel()]
            else:
                shape = list(t.shape)
            desc[1] = _DTYPES.index(t.dtype) if t.dtype in _DTYPES else 99
            desc[4], desc[5] = t.dim(), t.numel()
            desc[6:6 + len(shape)] = torch.tensor(shape, dtype=torch.int64)
        out = torch.empty(self._size * _DESC_LEN, dtype=torch.int64)
        self._gloo._allgather_base(out, desc).wait()
        out = out.view(self._size, _DESC_LEN)
        if bool((out == out[0]).all()):
            return
        parts = []
        for r in range(self._size):
            d = out[r].tolist()
            what = _COLLECTIVES[d[0]] if 0 <= d[0] < len(_COLLECTIVES) else "?"
            if d[1] < 0:
                tensor = "no tensor"
            else:
                dt = str(_DTYPES[d[1]])[6:] if d[1] < len(_DTYPES) else "?"
                tensor = f"{dt}{d[6:6 + d[4]] if d[4] <= _MAX_DIMS else [d[5]]}"
            extra = (f" root {d[2]}" if d[2] >= 0 else "") + \
                    (f" op {dist.ReduceOp.RedOpType(d[3]).name}" if d[3] >= 0 else "")
            parts.append(f"rank {r}: {what} {tensor}{extra}")
        raise RuntimeError(f"tpu process group: ranks disagree on {name} (this is rank "
                           f"{self._rank}): " + "; ".join(parts))

    # --- host copies ------------------------------------------------------------------------

    @staticmethod
    def _in(t):
        """A contiguous host tensor holding t's values (t itself if it is one);
        a sparse COO tensor comes back coalesced (gloo's sparse all_reduce
        reduces COO tensors; they have no memory format)."""
        if t.layout == torch.sparse_coo:
            return t if t.device.type == "cpu" else t.detach().coalesce().to("cpu")
        if t.device.type == "cpu" and t.is_contiguous():
            return t
        return t.detach().to("cpu").contiguous()

    @staticmethod
    def _out(t):
        """A contiguous host tensor to receive t's result (t itself if it can)."""
        if t.device.type == "cpu" and t.is_contiguous():
            return t
        return torch.empty(t.shape, dtype=t.dtype)

    @staticmethod
    def _back(t, h):
        if h is not t:
            with torch.no_grad():
                t.copy_(h.to(t.device) if h.layout == torch.sparse_coo else h)

    def _gloo_reduce_opts(self, cls, opts, op):
        o = cls()
        o.reduceOp = op
        if hasattr(opts, "timeout"):
            o.timeout = opts.timeout
        return o

    # --- collectives ------------------------------------------------------------------------

    @_collective('all_reduce')
    def allreduce(self, tensors, opts=_c10d.AllreduceOptions()):
        op = _red_op(opts)
        for t in tensors:
            self._agree("all_reduce", t, op=op)
        hosts = _premul("all_reduce", opts, [self._in(t) for t in tensors])
        self._gloo.allreduce(hosts, self._gloo_reduce_opts(_c10d.AllreduceOptions, opts,
                                                           _gloo_op(op))).wait()
        for t, h in zip(tensors, hosts):
            self._back(t, h)
        return _done(tensors)

    @_collective('all_reduce_coalesced')
    def allreduce_coalesced(self, tensors, opts=_c10d.AllreduceCoalescedOptions()):
        op = _red_op(opts)
        if not tensors:
            return _done(tensors)
        flat = torch.cat([self._in(t).reshape(-1) for t in tensors])
        self._agree("all_reduce_coalesced", flat, op=op)
        flat, = _premul("all_reduce_coalesced", opts, [flat])
        o = _c10d.AllreduceOptions()
        o.reduceOp = _gloo_op(op)
        self._gloo.allreduce([flat], o).wait()
        offset = 0
        for t in tensors:
            self._back(t, flat[offset:offset + t.numel()].view(t.shape))
            offset += t.numel()
        return _done(tensors)

    @_collective('broadcast')
    def broadcast(self, tensors, opts=_c10d.BroadcastOptions()):
        for t in tensors:
            self._agree("broadcast", t, root=opts.rootRank)
        hosts = [self._in(t) for t in tensors]
        o = _c10d.BroadcastOptions()
        o.rootRank, o.rootTensor = opts.rootRank, opts.rootTensor
        self._gloo.broadcast(hosts, o).wait()
        if self._rank != opts.rootRank:
            for t, h in zip(tensors, hosts):
                self._back(t, h)
        return _done(tensors)

    @_collective('reduce')
    def reduce(self, tensors, opts=_c10d.ReduceOptions()):
        op = _red_op(opts)
        for t in tensors:
            self._agree("reduce", t, root=opts.rootRank, op=op)
        hosts = _premul("reduce", opts, [self._in(t) for t in tensors])
        if self._rank != opts.rootRank:  # gloo may use non-root inputs as scratch
            hosts = [h.clone() if h is t else h for h, t in zip(hosts, tensors)]
        o = _c10d.ReduceOptions()
        o.reduceOp, o.rootRank, o.rootTensor = _gloo_op(op), opts.rootRank, opts.rootTensor
        self._gloo.reduce(hosts, o).wait()
        if self._rank == opts.rootRank:
            for t, h in zip(tensors, hosts):
                self._back(t, h)
        return _done(tensors)

    @_collective('all_gather')
    def allgather(self, output_lists, inputs, opts=_c10d.AllgatherOptions()):
        for t in inputs:
            self._agree("all_gather", t)
        for outs, t in zip(output_lists, inputs):
            self._check_list("all_gather", outs, t)
        hin = [self._in(t) for t in inputs]
        hout = [[self._out(o) for o in outs] for outs in output_lists]
        self._gloo.allgather(hout, hin).wait()
        for outs, houts in zip(output_lists, hout):
            for o, h in zip(outs, houts):
                self._back(o, h)
        return _done(output_lists)

    def _check_list(self, name, outs, t):
        if len(outs) != self._size:
            raise ValueError(f"tpu {name}: {len(outs)} tensors in the list, world size is "
                             f"{self._size}")
        for o in outs:
            if o.shape != t.shape or o.dtype != t.dtype:
                raise ValueError(f"tpu {name}: list tensor {_describe(o)} does not match "
                                 f"{_describe(t)}")

    @_collective('all_gather_into_tensor')
    def all_gather_single(self, output, input, opts=_c10d.AllgatherOptions()):
        self._agree("all_gather_into_tensor", input)
        if output.numel() != input.numel() * self._size or output.dtype != input.dtype:
            raise ValueError(f"tpu all_gather_into_tensor: output {_describe(output)} must hold "
                             f"world size ({self._size}) x input {_describe(input)}")
        # gloo wants a flat output made of world-size input-shaped chunks
        hin = self._in(input).reshape(-1)
        hout = torch.empty(output.numel(), dtype=output.dtype)
        self._gloo._allgather_base(hout, hin).wait()
        self._back(output, hout.view(output.shape))
        return _done([output])

    @_collective('all_gather_into_tensor_coalesced')
    def all_gather_single_coalesced(self, outputs, inputs, opts=_c10d.AllgatherOptions()):
        for o, i in zip(outputs, inputs, strict=True):
            self.all_gather_single(o, i, opts)
        return _done(outputs)

    @_collective('all_gather_coalesced')
    def allgather_coalesced(self, output_lists, inputs, opts=_c10d.AllgatherOptions()):
        for outs, t in zip(output_lists, inputs, strict=True):
            self.allgather([outs], [t], opts)
        return _done(output_lists)

    @_collective('reduce_scatter')
    def reduce_scatter(self, outputs, input_lists, opts=_c10d.ReduceScatterOptions()):
        op = _red_op(opts)
        for o in outputs:
            self._agree("reduce_scatter", o, op=op)
        for o, ins in zip(outputs, input_lists):
            self._check_list("reduce_scatter", ins, o)
        hout = [self._out(o) for o in outputs]
        hin = [_premul("reduce_scatter", opts, [self._in(t) for t in ins]) for ins in input_lists]
        o = _c10d.ReduceScatterOptions()
        o.reduceOp = _gloo_op(op)
        self._gloo.reduce_scatter(hout, hin, o).wait()
        for t, h in zip(outputs, hout):
            self._back(t, h)
        return _done(outputs)

    @_collective('reduce_scatter_tensor')
    def reduce_scatter_single(self, output, input, opts=_c10d.ReduceScatterOptions()):
        op = _red_op(opts)
        self._agree("reduce_scatter_tensor", output, op=op)
        if input.numel() != output.numel() * self._size or output.dtype != input.dtype:
            raise ValueError(f"tpu reduce_scatter_tensor: input {_describe(input)} must hold "
                             f"world size ({self._size}) x output {_describe(output)}")
        hout = torch.empty(output.numel(), dtype=output.dtype)
        hin, = _premul("reduce_scatter_tensor", opts, [self._in(input).reshape(-1)])
        o = _c10d.ReduceScatterOptions()
        o.reduceOp = _gloo_op(op)
        self._gloo._reduce_scatter_base(hout, hin, o).wait()
        self._back(output, hout.view(output.shape))
        return _done([output])

    @_collective('reduce_scatter_tensor_coalesced')
    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=_c10d.ReduceScatterOptions()):
        for o, i in zip(outputs, inputs, strict=True):
            self.reduce_scatter_single(o, i, opts)
        return _done(outputs)

    @_collective('all_to_all_single')
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=_c10d.AllToAllOptions()):
        # Shapes legitimately differ across ranks (uneven splits): agree on dtype only.
        self._agree("all_to_all_single", torch.empty(0, dtype=input.dtype))
        for name, t, splits in (("input", input, input_split_sizes),
                                ("output", output, output_split_sizes)):
            if splits and (len(splits) != self._size or sum(splits) != (t.shape[0] if t.dim() else 1)):
                raise ValueError(f"tpu all_to_all_single: {name} splits {list(splits)} do not "
                                 f"cover {_describe(t)} in {self._size} parts")
        hin, hout = self._in(input), self._out(output)
        self._gloo.alltoall_base(hout, hin, list(output_split_sizes or []),
                                 list(input_split_sizes or [])).wait()
        self._back(output, hout)
        return _done([output])

    @_collective('all_to_all')
    def alltoall(self, outputs, inputs, opts=_c10d.AllToAllOptions()):
        if len(outputs) != self._size or len(inputs) != self._size:
            raise ValueError(f"tpu all_to_all: lists of {len(outputs)} and {len(inputs)} "
                             f"tensors, world size is {self._size}")
        self._agree("all_to_all", torch.empty(0, dtype=inputs[0].dtype))
        hin = torch.cat([self._in(t).reshape(-1) for t in inputs])
        hout = torch.empty(sum(t.numel() for t in outputs), dtype=outputs[0].dtype)
        self._gloo.alltoall_base(hout, hin, [t.numel() for t in outputs],
                                 [t.numel() for t in inputs]).wait()
        offset = 0
        for t in outputs:
            self._back(t, hout[offset:offset + t.numel()].view(t.shape))
            offset += t.numel()
        return _done(outputs)

    @_collective('gather')
    def gather(self, output_lists, inputs, opts=_c10d.GatherOptions()):
        for t in inputs:
            self._agree("gather", t, root=opts.rootRank)
        hin = [self._in(t) for t in inputs]
        hout = [[self._out(o) for o in outs] for outs in output_lists]
        o = _c10d.GatherOptions()
        o.rootRank = opts.rootRank
        self._gloo.gather(hout, hin, o).wait()
        for outs, houts in zip(output_lists, hout):
            for t, h in zip(outs, houts):
                self._back(t, h)
        return _done(output_lists)

    @_collective('scatter')
    def scatter(self, outputs, input_lists, opts=_c10d.ScatterOptions()):
        for t in outputs:
            self._agree("scatter", t, root=opts.rootRank)
        hout = [self._out(t) for t in outputs]
        hin = [[self._in(t) for t in ins] for ins in input_lists]
        o = _c10d.ScatterOptions()
        o.rootRank = opts.rootRank
        self._gloo.scatter(hout, hin, o).wait()
        for t, h in zip(outputs, hout):
            self._back(t, h)
        return _done(outputs)

    def send(self, tensors, dst, tag=0):
        # Asynchronous: the host copy is a snapshot, later writes to the
        # tensors do not reach it. gloo's work keeps the copy alive.
        hosts = [self._in(t) for t in tensors]
        hosts = [h.clone() if h is t else h for h, t in zip(hosts, tensors)]
        return self._gloo.send(hosts, dst, tag)

    def recv(self, tensors, src, tag=0):
        hosts = [self._out(t) for t in tensors]
        return _RecvWork(self._gloo.recv(hosts, src, tag), tensors, hosts, self._back)

    def recv_anysource(self, tensors, tag=0):
        raise NotImplementedError("tpu process group: recv from any source is not supported; "
                                  "name the source rank")

    @_collective('barrier')
    def barrier(self, opts=_c10d.BarrierOptions()):
        self._agree("barrier")
        self._gloo.barrier().wait()
        return _done([])

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        return self._gloo.monitored_barrier(timeout or self._timeout, wait_all_ranks)
