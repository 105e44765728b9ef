"""Differential OpInfo harness: every PyTorch OpInfo entry, run on "cpu" and
on "tpu", outputs compared.

    python -m torchtpu.testing.opinfo --dtype float32 [--ops add,mul] [--limit N]
                                      [--jobs J] [--json out.json]

For each entry of PyTorch's op database (torch.testing._internal.
common_methods_invocations.op_db) that supports the dtype on the CPU, every
sample input (op.sample_inputs("cpu", dtype)) runs once on the CPU and once
with its tensors moved to "tpu"; the tpu outputs, moved back, must match the
CPU ones under torch.testing.assert_close (dtype included), at the OpInfo's
own tolerance overrides or the defaults below. Random ops (and ops returning
uninitialised memory) are checked for shapes and dtypes only.

Each entry gets one status:

    native-pass         every sample matched, no op ran through the CPU fallback
    pass-with-fallback  every sample matched, some op ran on the CPU
    wrong-result        a sample's tpu result differs from the CPU's
    error               the tpu run raised where the CPU run did not
    crash               the process died (a bug: every failure must raise)
    skip                no sample ran (none, all complex32, or the CPU raised)

Samples the CPU itself rejects are skipped; samples whose CPU result is
complex32 are skipped (the core has complex64/complex128 only).

Entries run in worker processes (--jobs, default 1) that are fed one entry at
a time, so a crash costs one entry and the worker is restarted. A per-sample
timer (--timeout) turns a hang in Python into an error. `run_entry` runs one
entry in the calling process (tests use it).

Leaves out: gradients, in-place and out= variants (they share the functional
rule), complex32.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import torch

STATUSES = ("native-pass", "pass-with-fallback", "wrong-result", "error", "crash", "skip")

# Ops whose values are random (or uninitialised): shape and dtype only.
RANDOM_OPS = {
    "bernoulli", "normal", "uniform", "multinomial", "rand_like", "randn_like",
    "randint_like", "randint", "randn", "rand", "cauchy", "exponential",
    "geometric", "log_normal", "nn.functional.rrelu", "empty", "empty_like",
    "new_empty", "new_empty_strided", "empty_strided", "empty_permuted",
    "torch.empty", "randperm", "nn.functional.feature_alpha_dropout",
    "nn.functional.alpha_dropout", "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d", "nn.functional.scaled_dot_product_attention",
    "svd_lowrank", "pca_lowrank",
    "nn.functional.multi_head_attention_forward",  # dropout in training samples
}
RANDOM_SUBSTRINGS = ("dropout", "rand")

# Ops that sum many products or terms: default tolerances scaled by 10.
ACCUMULATING = (
    "mm", "bmm", "matmul", "addmm", "addbmm", "baddbmm", "addmv", "addr", "mv", "dot",
    "vdot", "inner", "outer", "einsum", "tensordot", "linalg.", "nn.functional.linear",
    "nn.functional.bilinear", "nn.functional.conv", "conv", "__rmatmul__",
    "chain_matmul", "cumsum", "cumprod", "logcumsumexp", "cumulative_trapezoid",
    "trapz", "trapezoid", "std", "var", "norm", "cdist", "pdist", "softmax",
    "log_softmax", "logsumexp", "nn.functional.", "kron", "cov", "corrcoef",
    "_refs.",
    # An n-point transform sums n terms per output; PyTorch's TestFFT allows
    # float32 2e-4 against NumPy (toleranceOverride of the fft OpInfos).
    "fft.", "stft", "istft",
)

# assert_close's defaults, per output dtype (atol, rtol).
_DEFAULT_TOL = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1.3e-6),
    torch.bfloat16: (1e-2, 1.6e-2),
    torch.float16: (1e-3, 1e-3),
    torch.complex64: (1e-5, 1.3e-6),
    torch.complex128: (1e-7, 1e-7),
}


def entry_key(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def is_random(op):
    name = op.name
    return name in RANDOM_OPS or any(s in name for s in RANDOM_SUBSTRINGS)


def _is_reduction(op):
    from torch.testing._internal.opinfo.core import ReductionOpInfo
    return isinstance(op, ReductionOpInfo)


def _accumulates(op):
    return _is_reduction(op) or any(op.name == a or op.name.startswith(a) for a in ACCUMULATING)


def _override_tol(op, dtype):
    """The largest (atol, rtol) the OpInfo's toleranceOverride decorators
    give for dtype, or None."""
    from torch.testing._internal.common_device_type import toleranceOverride
    best = None
    for dec in getattr(op, "decorators", ()) or ():
        inner = getattr(dec, "decorators", None)
        for d in (inner if inner is not None else [dec]):
            if isinstance(d, toleranceOverride) and dtype in d.d:
                t = d.d[dtype]
                best = (t.atol, t.rtol) if best is None else (max(best[0], t.atol), max(best[1], t.rtol))
    return best


def tolerance(op, sweep_dtype, out_dtype):
    """(atol, rtol) for an output of out_dtype; (0, 0) for exact dtypes."""
    if out_dtype not in _DEFAULT_TOL:
        return 0.0, 0.0
    atol, rtol = _DEFAULT_TOL[out_dtype]
    if _accumulates(op):
        atol, rtol = atol * 10, rtol * 10
    over = _override_tol(op, out_dtype if out_dtype != sweep_dtype else sweep_dtype)
    if over is not None:
        atol, rtol = max(atol, over[0]), max(rtol, over[1])
    return atol, rtol


# --- moving samples and outputs -----------------------------------------------------------

def _map_leaves(x, fn):
    """x with fn applied to every leaf of its (named tuples excepted) tuples,
    lists and dicts."""
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_map_leaves(v, fn) for v in x)
    if isinstance(x, list):
        return [_map_leaves(v, fn) for v in x]
    if isinstance(x, dict):
        return {k: _map_leaves(v, fn) for k, v in x.items()}
    return fn(x)


def _to_tpu(x, keep_cpu=False):
    """x with its tensors (and "cpu" devices) moved to tpu; with keep_cpu,
    tensors stay on the CPU (for arguments an op requires there, such as
    tensor_split's indices)."""
    def leaf(v):
        if isinstance(v, torch.Tensor):
            return v.detach().clone() if keep_cpu else v.detach().to("tpu")
        if isinstance(v, torch.device) and v.type == "cpu":
            return torch.device("tpu")
        if isinstance(v, str) and v == "cpu":
            return "tpu"
        return v
    return _map_leaves(x, leaf)


def _on_tpu(x):
    """True when x holds a tpu tensor or names the tpu device."""
    if isinstance(x, torch.Tensor):
        return x.device.type == "tpu"
    if isinstance(x, (torch.device, str)):
        return str(x).startswith("tpu")
    if isinstance(x, (tuple, list)):
        return any(_on_tpu(v) for v in x)
    if isinstance(x, dict):
        return any(_on_tpu(v) for v in x.values())
    return False


def _clone(x):
    return _map_leaves(x, lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v)


def _leaves(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (tuple, list)):
        for v in x:
            _leaves(v, out)
    elif isinstance(x, dict):
        for k in sorted(x, key=str):
            _leaves(x[k], out)
    else:
        out.append(x)
    return out


class WrongResult(AssertionError):
    pass


class SkipSample(Exception):
    pass


def compare(op, sweep_dtype, expected, actual, devices, random):
    """Raises WrongResult when the tpu outputs differ from the CPU ones."""
    exp, act = _leaves(expected, []), _leaves(actual, [])
    if len(exp) != len(act):
        raise WrongResult(f"{len(act)} outputs, expected {len(exp)}")
    for i, (e, a) in enumerate(zip(exp, act)):
        where = f"output {i}" if len(exp) > 1 else "output"
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise WrongResult(f"{where}: got {type(a).__name__}, expected a tensor")
            dev = devices.pop(0) if devices else None
            if dev is not None and dev.type != "tpu":
                raise WrongResult(f"{where}: on device {dev}, expected tpu")
            if a.dtype != e.dtype or tuple(a.shape) != tuple(e.shape):
                raise WrongResult(f"{where}: {a.dtype}{list(a.shape)}, expected "
                                  f"{e.dtype}{list(e.shape)}")
            if random:
                continue
            a = a.cpu()
            atol, rtol = tolerance(op, sweep_dtype, e.dtype)
            try:
                torch.testing.assert_close(a, e, atol=atol, rtol=rtol, equal_nan=True,
                                           check_device=False, check_stride=False)
            except AssertionError as err:
                raise WrongResult(f"{where}: {_first_lines(str(err), 4)}") from None
        elif random:
            continue
        elif isinstance(e, float) and isinstance(a, float):
            if not (e == a or (e != e and a != a) or abs(e - a) <= 1e-5 + 1e-5 * abs(e)):
                raise WrongResult(f"{where}: {a} != {e}")
        elif e != a:
            raise WrongResult(f"{where}: {a!r} != {e!r}")


def _first_lines(s, n):
    return " | ".join(line.strip() for line in s.strip().splitlines()[:n] if line.strip())


def _has_complex32(x):
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.complex32 for t in _leaves(x, []))


# --- one entry -------------------------------------------------------------------------------------

class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout("sample timed out")


def _fallback_total():
    import torchtpu
    return dict(torchtpu.fallback_counts())


def run_entry(op, dtype, limit=None, timeout=60.0):
    """Runs every sample of OpInfo `op` at `dtype` on cpu and tpu; returns a
    dict with status, counts, fallback ops and the first failure message."""
    import torchtpu
    torchtpu.set_fallback_mode("silent")
    res = {"key": entry_key(op), "status": "skip", "samples": 0, "passed": 0,
           "wrong": 0, "errors": 0, "skipped": 0, "fallback_ops": {}, "message": "",
           "seconds": 0.0}
    t0 = time.time()
    random = is_random(op)
    before = _fallback_total()
    use_alarm = timeout and hasattr(signal, "setitimer") and \
        __import__("threading").current_thread() is __import__("threading").main_thread()
    old = signal.signal(signal.SIGALRM, _alarm) if use_alarm else None
    try:
        torch.manual_seed(0)
        try:
            samples = iter(op.sample_inputs("cpu", dtype, requires_grad=False))
        except Exception as e:  # noqa: BLE001 - the CPU side cannot make samples
            res["message"] = f"sample_inputs: {type(e).__name__}: {e}"
            return res
        n = 0
        while limit is None or n < limit:
            try:
                s = next(samples)
            except StopIteration:
                break
            except Exception as e:  # noqa: BLE001
                res["message"] = res["message"] or f"sample_inputs: {type(e).__name__}: {e}"
                break
            n += 1
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                outcome, msg = _run_sample(op, dtype, s, random)
            except _Timeout as e:
                outcome, msg = "error", f"{e} after {timeout:.0f}s"
            finally:
                if use_alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            if outcome == "skip":
                res["skipped"] += 1
                continue
            res["samples"] += 1
            if outcome == "pass":
                res["passed"] += 1
                continue
            res["wrong" if outcome == "wrong" else "errors"] += 1
            if outcome == "wrong" and not res.get("first_wrong"):
                res["first_wrong"] = f"{_describe(s)}: {msg}"
            if outcome == "error" and not res.get("first_error"):
                res["first_error"] = f"{_describe(s)}: {msg}"
    finally:
        if use_alarm:
            signal.signal(signal.SIGALRM, old)
    after = _fallback_total()
    res["fallback_ops"] = {k: v - before.get(k, 0) for k, v in after.items()
                           if v - before.get(k, 0) > 0}
    if res["wrong"]:
        res["status"], res["message"] = "wrong-result", res["first_wrong"]
    elif res["errors"]:
        res["status"], res["message"] = "error", res["first_error"]
    elif res["samples"]:
        res["status"] = "pass-with-fallback" if res["fallback_ops"] else "native-pass"
    res["seconds"] = round(time.time() - t0, 3)
    return res


def _describe(s):
    def d(x):
        if isinstance(x, torch.Tensor):
            return f"{str(x.dtype).replace('torch.', '')}{list(x.shape)}"
        if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
            inner = ", ".join(d(v) for v in x[:4]) + (", ..." if len(x) > 4 else "")
            return "[" + inner + "]" if isinstance(x, list) else "(" + inner + ")"
        r = repr(x)
        return r if len(r) < 40 else r[:37] + "..."
    parts = [d(s.input)] + [d(a) for a in s.args] + [f"{k}={d(v)}" for k, v in s.kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def _run_sample(op, dtype, s, random):
    """("pass" | "wrong" | "error" | "skip", message) for one sample."""
    tpu_in = _to_tpu((s.input, s.args, s.kwargs))
    if not _on_tpu(tpu_in):  # e.g. a factory call without a device: nothing to test
        return "skip", "no tpu input"
    cpu_in = _clone((s.input, s.args, s.kwargs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = s.output_process_fn_grad(op(cpu_in[0], *cpu_in[1], **cpu_in[2]))
        except Exception as e:  # noqa: BLE001 - the CPU rejects it: not our business
            return "skip", f"cpu: {type(e).__name__}: {e}"
        if _has_complex32(expected):
            return "skip", "complex32 result"
        try:
            try:
                actual = op(tpu_in[0], *tpu_in[1], **tpu_in[2])
            except RuntimeError as e:
                if "to be on cpu" not in str(e):
                    raise
                # Some arguments must stay on the CPU (as they must on CUDA).
                tpu_in = (tpu_in[0], _to_tpu(s.args, True), _to_tpu(s.kwargs, True))
                actual = op(tpu_in[0], *tpu_in[1], **tpu_in[2])
            # As PyTorch's test_compare_cpu: a sample's output_process_fn_grad
            # makes results that are defined only up to sign (SVD and eigh
            # vectors) comparable; it is the identity for most samples.
            actual = s.output_process_fn_grad(actual)
            devices = []
            actual = _move_back(actual, devices)
        except _Timeout:
            raise
        except Exception as e:  # noqa: BLE001 - any tpu failure is recorded
            return "error", f"{type(e).__name__}: {_first_lines(str(e), 2)}"
    try:
        compare(op, dtype, expected, actual, devices, random)
    except WrongResult as e:
        if not (_same_up_to_ties(op, s, expected, actual) or
                _as_accurate_as_cpu(op, dtype, s, expected, actual)):
            return "wrong", str(e)
    return "pass", ""


def _double(x):
    """x with its 16-bit float tensors in float64."""
    def leaf(v):
        if isinstance(v, torch.Tensor) and v.dtype in (torch.bfloat16, torch.float16):
            return v.detach().double()
        return v
    return _map_leaves(x, leaf)


def _numpy_ref(op, s):
    """The OpInfo's NumPy / SciPy reference (op.ref, float64) on a unary
    ufunc's sample without extra arguments, as a tensor; None when there is
    none or it fails."""
    from torch.testing._internal.opinfo.core import UnaryUfuncInfo
    x = s.input
    if (not isinstance(op, UnaryUfuncInfo) or getattr(op, "ref", None) is None or s.args
            or s.kwargs or not isinstance(x, torch.Tensor) or not x.is_floating_point()):
        return None
    try:
        import numpy as np
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.as_tensor(np.asarray(op.ref(x.detach().cpu().double().numpy()),
                                              dtype=np.float64))
    except Exception:  # noqa: BLE001 - no usable reference: no verdict
        return None


def _as_accurate_as_cpu(op, dtype, s, expected, actual):
    """True when the tpu result, though it differs from the CPU's, is at least
    as close as the CPU's to a more accurate answer, as PyTorch's own
    reference tests judge a result: for a 16-bit float sweep the op computed
    in float64 on the same inputs (the CPU may round partial sums to bfloat16
    where XLA accumulates in float32); for float32 / float64 a unary ufunc's
    NumPy / SciPy reference (PyTorch's float64 bessel_y1 is off by 9e-7 near
    x = 5, airy_ai by 3e-6 near -2.1, beyond float64's tolerance)."""
    if dtype in (torch.float32, torch.float64):
        ref = _numpy_ref(op, s)
        if ref is None:
            return False
    elif dtype in (torch.bfloat16, torch.float16):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = op(*_double((s.input,) + tuple(s.args)), **_double(s.kwargs))
        except Exception:  # noqa: BLE001 - no float64 version: no verdict
            return False
    else:
        return False
    exp, act, ref = _leaves(expected, []), _leaves(actual, []), _leaves(ref, [])
    if not (len(exp) == len(act) == len(ref)):
        return False
    for e, a, r in zip(exp, act, ref):
        if not isinstance(e, torch.Tensor):
            continue
        if not e.is_floating_point() or not isinstance(r, torch.Tensor) or r.shape != e.shape:
            return False
        r = r.double()
        finite = r.isfinite()
        a, e = a.cpu().double(), e.double()
        if not torch.equal(a.isfinite(), e.isfinite()):
            return False
        err_a = (a - r).abs()[finite].max().item() if finite.any() else 0.0
        err_e = (e - r).abs()[finite].max().item() if finite.any() else 0.0
        if err_a > err_e:
            return False
    return True


# Ops whose indices among equal values are left unspecified (stable=False, the
# default; `stable` is keyword-only): the CPU's introsort and XLA's sort order
# ties differently, and any order is right. The position of `dim` among each
# op's arguments after the input.
_TIE_ORDER_FREE = {"sort": 0, "argsort": 0, "topk": 1}


def _same_up_to_ties(op, s, expected, actual):
    """True when op's tpu indices differ from the CPU's only among equal values:
    the input gathered along dim by them is what the CPU's indices give."""
    pos = _TIE_ORDER_FREE.get(op.name)
    if pos is None or s.kwargs.get("stable"):
        return False
    x = s.input
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return False
    dim = s.kwargs.get("dim", s.args[pos] if len(s.args) > pos else -1)
    exp, act = _leaves(expected, []), _leaves(actual, [])
    ie, ia = exp[-1], act[-1].cpu()  # the indices are the last output
    if ie.dtype != torch.int64 or ia.shape != ie.shape:
        return False
    srt = ia.sort(dim).values  # each index once per row
    if srt.shape[dim] > 1 and not bool((srt.diff(dim=dim) > 0).all()):
        return False
    vals = [x.gather(dim, i) for i in (ie, ia)]
    if not torch.equal(vals[0].isnan(), vals[1].isnan()) or \
            not torch.equal(vals[0].nan_to_num(0.0), vals[1].nan_to_num(0.0)):
        return False
    # any other output (the values) must match exactly
    return all(torch.equal(e.nan_to_num(0.0), a.cpu().nan_to_num(0.0))
               for e, a in zip(exp[:-1], act[:-1]))


def _move_back(x, devices):
    """Host copies of the tensors in x (errors of asynchronous programs surface
    here); the device each came from is appended to `devices`, in leaf order."""
    if isinstance(x, torch.Tensor):
        devices.append(x.device)
        return x.detach().cpu()
    if isinstance(x, (tuple, list)):
        return [_move_back(v, devices) for v in x]
    if isinstance(x, dict):
        return {k: _move_back(x[k], devices) for k in sorted(x, key=str)}
    return x


# --- selecting entries -----------------------------------------------------------------------

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
           "float16": torch.float16, "int64": torch.int64, "int32": torch.int32,
           "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
           "complex64": torch.complex64, "complex128": torch.complex128}


def parse_dtype(name):
    name = name.replace("torch.", "")
    if name not in _DTYPES:
        raise ValueError(f"--dtype {name!r}: expected one of {', '.join(_DTYPES)}")
    return _DTYPES[name]


def op_db():
    from torch.testing._internal.common_methods_invocations import op_db as db
    return db


def select(dtype, names=None):
    """(index into op_db, OpInfo) for entries that support dtype on the CPU,
    optionally only those whose name or key is in `names`."""
    out = []
    for i, op in enumerate(op_db()):
        if names is not None and op.name not in names and entry_key(op) not in names:
            continue
        try:
            supported = op.supported_dtypes("cpu")
        except Exception:  # noqa: BLE001
            continue
        if dtype in supported:
            out.append((i, op))
    return out



def entries_by_key(keys, dtype=torch.float32):
    """The OpInfo entry for each key in `keys` (None where op_db has none
    supporting `dtype` on the CPU), in order: pytest parameters for tests
    that pin a family of entries to the native path."""
    found = {entry_key(op): op for _, op in select(dtype, set(keys))}
    return [found.get(k) for k in keys]


def assert_native_pass(key, op, dtype=torch.float32, limit=None):
    """Runs entry `op` (found for `key`) and fails unless at least one sample
    ran and every sample passed with no op falling back to the CPU."""
    assert op is not None, f"OpInfo entry {key} not found or not {dtype} on cpu"
    res = run_entry(op, dtype, limit=limit)
    assert res["samples"] > 0, f"{key}: no sample ran ({res['message']})"
    assert res["status"] == "native-pass", \
        f"{key}: {res['status']}: {res['message']} fallback={res['fallback_ops']}"

# --- worker processes ---------------------------------------------------------------------------

_TAG = "@@opinfo "


def _worker(args):
    """Reads op_db indices from stdin, one a line; answers one JSON line each."""
    dtype = parse_dtype(args.dtype)
    import torchtpu  # noqa: F401
    if args.blocking:
        torchtpu.set_launch_blocking(True)
    db = op_db()
    out = sys.stdout
    sys.stdout = sys.stderr  # anything an op prints stays out of the protocol
    for line in sys.stdin:
        i = int(line)
        res = run_entry(db[i], dtype, limit=args.limit, timeout=args.timeout)
        res["index"] = i
        out.write(_TAG + json.dumps(res) + "\n")
        out.flush()


class _Proc:
    """One worker; its stderr goes to a temp file, read back when it dies."""

    def __init__(self, argv):
        import tempfile
        self.err = tempfile.TemporaryFile(mode="w+")
        # OpInfo checks the device's programs: with the host tier on, a
        # signature's first call would run PyTorch's CPU kernel and compare
        # the CPU with itself.
        env = dict(os.environ)
        env.setdefault("TORCHTPU_COMPILE_AFTER", "0")
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, bufsize=1, env=env)
        self.current = None

    def send(self, index):
        self.current = index
        self.p.stdin.write(f"{index}\n")
        self.p.stdin.flush()

    def stderr_tail(self, n=3):
        self.err.seek(0)
        lines = [ln for ln in self.err.read().splitlines() if ln.strip()]
        return " | ".join(lines[-n:])

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        self.p.wait()
        self.err.close()


def run_sweep(dtype_name, entries, limit=None, jobs=1, timeout=60.0, blocking=True,
              progress=None):
    """Runs entries [(index, op)] in `jobs` worker processes; returns results
    in entry order. A worker that dies marks its entry "crash" and restarts."""
    import selectors
    argv = [sys.executable, "-m", "torchtpu.testing.opinfo", "--worker", "--dtype", dtype_name,
            "--timeout", str(timeout)] + (["--limit", str(limit)] if limit else []) + \
           ([] if blocking else ["--no-blocking"])
    pending = [i for i, _ in entries]
    names = {i: entry_key(op) for i, op in entries}
    results = {}
    sel = selectors.DefaultSelector()
    procs = []

    def start():
        pr = _Proc(argv)
        sel.register(pr.p.stdout, selectors.EVENT_READ, pr)
        procs.append(pr)
        feed(pr)

    def feed(pr):
        if pending:
            pr.send(pending.pop(0))
        else:
            pr.current = None

    for _ in range(max(1, min(jobs, len(pending)))):
        start()
    while any(p.current is not None for p in procs):
        for key, _ in sel.select(timeout=5):
            pr = key.data
            line = pr.p.stdout.readline()
            if line.startswith(_TAG):
                res = json.loads(line[len(_TAG):])
                results[res["index"]] = res
                if progress:
                    progress(res, len(results), len(entries))
                feed(pr)
            elif line == "":  # the worker died
                rc = pr.p.wait()
                idx = pr.current
                sel.unregister(pr.p.stdout)
                procs.remove(pr)
                if idx is not None:
                    tail = pr.stderr_tail()
                    results[idx] = {"index": idx, "key": names[idx], "status": "crash",
                                    "samples": 0, "passed": 0, "wrong": 0, "errors": 0,
                                    "skipped": 0, "fallback_ops": {}, "seconds": 0.0,
                                    "message": f"worker died (exit {rc}): {tail[-300:]}"}
                    if progress:
                        progress(results[idx], len(results), len(entries))
                pr.err.close()
                if pending:
                    start()
    for pr in procs:
        sel.unregister(pr.p.stdout)
        pr.close()
    return [results[i] for i, _ in entries if i in results]


# --- report ------------------------------------------------------------------------------------

def totals(results):
    t = {s: 0 for s in STATUSES}
    for r in results:
        t[r["status"]] += 1
    return t


def format_table(results):
    lines = [f"{'entry':40} {'status':19} {'ok/run':>9}  fallback / message"]
    for r in results:
        fb = ",".join(sorted(r["fallback_ops"]))
        note = r["message"] if r["status"] in ("wrong-result", "error", "crash") else fb
        if r["status"] == "skip":
            note = r["message"] or "no sample ran"
        note = note.replace("\n", " ")
        lines.append(f"{r['key'][:40]:40} {r['status']:19} "
                     f"{r['passed']:>4}/{r['samples']:<4}  {note[:160]}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m torchtpu.testing.opinfo",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--ops", default=None, help="comma-separated OpInfo names or keys")
    ap.add_argument("--limit", type=int, default=None, help="at most N samples per entry")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per sample")
    ap.add_argument("--json", default=None, help="write per-entry details here")
    ap.add_argument("--quiet", action="store_true", help="totals only, no table")
    ap.add_argument("--no-blocking", dest="blocking", action="store_false",
                    help="asynchronous eager (default: TPU_LAUNCH_BLOCKING-style sync)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    dtype = parse_dtype(args.dtype)
    names = set(args.ops.split(",")) if args.ops else None
    entries = select(dtype, names)
    if not entries:
        print(f"no OpInfo entry supports {args.dtype} on cpu"
              + (f" among {sorted(names)}" if names else ""), file=sys.stderr)
        return 2
    t0 = time.time()

    def progress(res, done, total):
        if res["status"] in ("wrong-result", "error", "crash"):
            print(f"[{done}/{total}] {res['key']}: {res['status']}: {res['message'][:200]}",
                  file=sys.stderr, flush=True)
        elif done % 50 == 0:
            print(f"[{done}/{total}] {time.time() - t0:.0f}s", file=sys.stderr, flush=True)

    results = run_sweep(args.dtype, entries, limit=args.limit, jobs=args.jobs,
                        timeout=args.timeout, blocking=args.blocking, progress=progress)
    elapsed = time.time() - t0
    if not args.quiet:
        print(format_table(results))
    t = totals(results)
    print(f"\n{args.dtype}: {len(results)} entries in {elapsed:.0f}s: " +
          ", ".join(f"{k} {v}" for k, v in t.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dtype": args.dtype, "seconds": round(elapsed, 1), "totals": t,
                       "torch": torch.__version__, "entries": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
