"""PyTorch's sparse OpInfo samples, run on "cpu" and on "tpu", outputs compared.

    python -m torchtpu.testing.sparse_opinfo [--dtype float32] [--layouts coo,csr,...]
                                             [--ops abs,mul] [--json out.json]

Every entry of PyTorch's op database that supports a sparse layout
(supports_sparse, supports_sparse_csr/csc/bsr/bsc) gives sample inputs in
that layout through op.sample_inputs_sparse(layout, "cpu", dtype): the
OpInfo-driven part of PyTorch's test_sparse.py / test_sparse_csr.py
(TestSparseUnaryUfuncs, the sparse reductions and binary ufuncs), which the
installed wheel carries (torch.testing._internal), so this sweep needs no
checkout of PyTorch's test folder. Each sample runs on the CPU and, with its
tensors moved to tpu (indices and values become tpu tensors), on tpu; the
results must have the CPU's layout, shape and dtype, and equal values
(to_dense, assert_close at the dtype's defaults, 10x for sums).

Statuses per (entry, layout): native-pass (every sample matched, nothing ran
through the CPU fallback), pass-with-fallback, wrong-result, error (tpu raised
where the CPU did not), skip (no sample ran: the CPU rejected all). Random
entries (randn_like) are compared by layout, shape and dtype only.

Leaves out: gradients (tests/test_sparse.py checks the autograd of the ops
users train with), error_inputs_sparse.
"""
import argparse
import json
import os
import sys
import time
import warnings

import torch

LAYOUTS = {
    "coo": (torch.sparse_coo, "supports_sparse"),
    "csr": (torch.sparse_csr, "supports_sparse_csr"),
    "csc": (torch.sparse_csc, "supports_sparse_csc"),
    "bsr": (torch.sparse_bsr, "supports_sparse_bsr"),
    "bsc": (torch.sparse_bsc, "supports_sparse_bsc"),
}
STATUSES = ("native-pass", "pass-with-fallback", "wrong-result", "error", "skip")
RANDOM = ("randn_like", "rand_like", "empty_like")


def _map(x, fn):
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_map(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return x


def _to_tpu(x):
    return _map(x, lambda t: t.to("tpu"))


_CONVERT = {
    "coo": lambda t: t.to_sparse(),
    "csr": lambda t: t.to_sparse_csr() if t.dim() == 2 else None,
    "csc": lambda t: t.to_sparse_csc() if t.dim() == 2 else None,
    "bsr": lambda t: t.to_sparse_bsr((1, 1)) if t.dim() == 2 else None,
    "bsc": lambda t: t.to_sparse_bsc((1, 1)) if t.dim() == 2 else None,
}


def samples_of(op, layout_name, dtype, limit=8):
    """[(input, args, kwargs)]: the entry's sparse samples, or, for entries
    that give none (the unary ufuncs), its dense samples with the input
    converted to the layout, as PyTorch's TestSparseUnaryUfuncs does."""
    layout = LAYOUTS[layout_name][0]
    try:
        return [(s.input, s.args, s.kwargs) for s in op.sample_inputs_sparse(layout, "cpu", dtype)]
    except NotImplementedError:
        pass
    out = []
    for s in op.sample_inputs("cpu", dtype):
        if not isinstance(s.input, torch.Tensor) or s.input.dim() == 0:
            continue
        t = _CONVERT[layout_name](s.input)
        if t is not None:
            out.append((t, s.args, s.kwargs))
        if len(out) == limit:
            break
    return out


def _dense(t):
    return t.to_dense() if t.layout != torch.strided else t


_MEMBERS = {
    torch.sparse_coo: ("_indices", "_values"),
    torch.sparse_csr: ("crow_indices", "col_indices", "values"),
    torch.sparse_bsr: ("crow_indices", "col_indices", "values"),
    torch.sparse_csc: ("ccol_indices", "row_indices", "values"),
    torch.sparse_bsc: ("ccol_indices", "row_indices", "values"),
}


def compare(expected, actual, random=False, device="tpu"):
    """Raises AssertionError where actual (tpu) differs from expected (cpu)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"got {type(actual).__name__}, not a tensor"
        assert actual.device.type == device, f"result on {actual.device}, not {device}"
        assert actual.layout == expected.layout, f"layout {actual.layout} != {expected.layout}"
        assert actual.shape == expected.shape, f"shape {list(actual.shape)} != {list(expected.shape)}"
        assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
        if random:
            return
        tol = {}
        if expected.dtype in (torch.float32, torch.complex64):
            tol = dict(atol=1e-4, rtol=1.3e-5)  # sums of a few products
        try:
            e = _dense(expected)
        except RuntimeError:
            # PyTorch's own result does not densify (torch.masked's CSR
            # amax/amin/mean can give more values than nnz): the members
            e = None
        if e is None:
            got = actual.cpu()
            for name in _MEMBERS[expected.layout]:
                torch.testing.assert_close(getattr(got, name)(), getattr(expected, name)(),
                                           equal_nan=True, **tol)
            return
        torch.testing.assert_close(_dense(actual.cpu()), e, equal_nan=True, **tol)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for e, a in zip(expected, actual):
            compare(e, a, random, device)
    else:
        assert actual == expected, f"{actual!r} != {expected!r}"


def _fallbacks():
    import torchtpu
    return sum(torchtpu.fallback_counts().values())


def run_entry(op, layout_name, dtype, limit=None, seed=0):
    """(status, samples matched, samples run, first message) for one entry
    (its first `limit` samples when given)."""
    random = op.name in RANDOM
    torch.manual_seed(seed)  # the samples' values: a rerun sees the same ones
    try:
        samples = samples_of(op, layout_name, dtype)[:limit]
    except Exception as e:  # noqa: BLE001 - the entry's own generator failed
        return "skip", 0, 0, f"samples: {type(e).__name__}: {str(e)[:120]}"
    ok = run = 0
    message = ""
    wrong = error = False
    before = _fallbacks()
    for s in samples:
        try:
            expected = op(s[0], *s[1], **s[2])
        except Exception:  # noqa: BLE001 - the CPU rejects it: not a tpu case
            continue
        run += 1
        try:
            inp, args, kwargs = _to_tpu(s)
            actual = op(inp, *args, **kwargs)
            # a sample that names the result's device (zeros_like(x, device="cpu"))
            device = torch.device(kwargs["device"]).type if kwargs.get("device") else "tpu"
            compare(expected, actual, random, device)
            ok += 1
        except AssertionError as e:
            wrong = True
            message = message or f"{_describe(s)}: {str(e).splitlines()[0][:160]}"
        except Exception as e:  # noqa: BLE001 - recorded as the entry's error
            error = True
            first = str(e).splitlines()[0] if str(e) else ""
            message = message or f"{_describe(s)}: {type(e).__name__}: {first[:160]}"
    if run == 0:
        return "skip", 0, 0, message
    if error:
        return "error", ok, run, message
    if wrong:
        return "wrong-result", ok, run, message
    return ("native-pass" if _fallbacks() == before else "pass-with-fallback"), ok, run, ""


def _describe(s):
    def d(x):
        if isinstance(x, torch.Tensor):
            lay = "" if x.layout == torch.strided else str(x.layout).replace("torch.sparse_", "") + " "
            return f"{lay}{str(x.dtype).replace('torch.', '')}{list(x.shape)}"
        return repr(x)[:30]
    return "(" + ", ".join([d(s[0])] + [d(a) for a in s[1]]) + ")"


def entries(layouts, names=None):
    from torch.testing._internal.common_methods_invocations import op_db
    out = []
    for layout_name in layouts:
        attr = LAYOUTS[layout_name][1]
        for op in op_db:
            if not getattr(op, attr, False):
                continue
            key = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
            if names and op.name not in names and key not in names:
                continue
            out.append((key, layout_name, op))
    return out


def run_sweep(layouts, dtype, names=None, out=sys.stdout):
    import torchtpu
    torchtpu.set_fallback_mode("silent")
    # the device's programs, not the host tier's CPU kernels (which would
    # compare the CPU with itself), as the other conformance runners do;
    # TORCHTPU_COMPILE_AFTER, when set, wins
    if "TORCHTPU_COMPILE_AFTER" not in os.environ:
        torchtpu.set_host_tier(compile_after=0)
    results = []
    todo = entries(layouts, names)
    t0 = time.time()
    for i, (key, layout_name, op) in enumerate(todo):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            status, ok, run, msg = run_entry(op, layout_name, dtype)
        results.append(dict(entry=key, layout=layout_name, status=status, ok=ok, run=run,
                            message=msg))
        print(f"[{i + 1}/{len(todo)}] {key} ({layout_name}): {status} {ok}/{run} {msg}",
              file=sys.stderr, flush=True)
    return results, time.time() - t0


def format_table(results, dtype, seconds):
    lines = [f"sparse OpInfo sweep, {str(dtype).replace('torch.', '')}: {len(results)} "
             f"(entry, layout) pairs in {seconds:.0f}s", ""]
    layouts = sorted({r["layout"] for r in results}, key=list(LAYOUTS).index)
    lines.append("| layout | " + " | ".join(STATUSES) + " | % pass of run |")
    lines.append("|---" * (len(STATUSES) + 2) + "|")
    for lay in layouts + ["all"]:
        rs = [r for r in results if lay == "all" or r["layout"] == lay]
        counts = [sum(r["status"] == s for r in rs) for s in STATUSES]
        ran = len(rs) - counts[-1]
        passed = counts[0] + counts[1]
        pct = f"{100.0 * passed / ran:.1f}" if ran else "-"
        lines.append(f"| {lay} | " + " | ".join(map(str, counts)) + f" | {pct} |")
    bad = [r for r in results if r["status"] in ("wrong-result", "error")]
    if bad:
        lines += ["", "Not passing:", ""]
        for r in bad:
            lines.append(f"- {r['entry']} ({r['layout']}): {r['status']} {r['ok']}/{r['run']}: "
                         f"{r['message']}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="float32")
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--ops", default=None, help="comma-separated entry names")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    names = set(args.ops.split(",")) if args.ops else None
    results, seconds = run_sweep(args.layouts.split(","), dtype, names)
    print(format_table(results, dtype, seconds))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(dtype=args.dtype, seconds=seconds, results=results), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
