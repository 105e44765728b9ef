"""Bad inputs, as a demanding user would try them: each case runs in a fresh
subprocess, bounded in time, and must raise the expected exception with a
message naming the op (or setting) and the cause, leave the process usable
(a small op afterwards gives the right value), and neither crash nor hang.

Where PyTorch's CPU defines the behaviour, the same code runs on "cpu" in the
same subprocess first and the exception types must agree: the reference is
PyTorch itself, not a guess. Cases that are torchtpu's own limits (rank > 8,
device index, settings) say what they expect.

Cases run in processes forked, one per case, from a server that imported
torch and torchtpu once (the runtime starts in the child), so 50 cases take
seconds, not minutes; settings run in fresh interpreters (they are read at
import). Each case is then its own test."""
import concurrent.futures
import json
import os
import subprocess
import sys
import textwrap

import pytest

TIMEOUT = 120  # seconds per case (import + a few compiles take ~5 s)

# (id, code using `dev`, expected exception type, substrings of the tpu message
# (case-insensitive), compare with the CPU's exception type)
CASES = [
    # --- devices -------------------------------------------------------------------
    ("device_index_5", "torch.ones(2, device='tpu:5')", "IndexError",
     ["device index 5", "out of range"], False),
    ("wrong_device_mix", "torch.ones(2, device=dev) + torch.ones(2, device='meta')",
     "RuntimeError", ["device"], False),
    # --- shapes PyTorch checks on the host ------------------------------------------
    ("broadcast", "torch.ones(2, 3, device=dev) + torch.ones(4, device=dev)",
     "RuntimeError", ["add", "broadcast"], True),
    ("mm_shapes", "torch.ones(2, 3, device=dev) @ torch.ones(4, 5, device=dev)",
     "RuntimeError", ["2", "3", "4", "5"], True),
    ("bmm_batch", "torch.bmm(torch.ones(2, 3, 4, device=dev), torch.ones(3, 4, 5, device=dev))",
     "RuntimeError", ["bmm"], True),
    ("max_pool2d_kernel_too_big", "F.max_pool2d(torch.ones(1, 1, 2, 2, device=dev), 3)",
     "RuntimeError", ["max_pool2d", "output size is too small"], True),
    ("avg_pool2d_kernel_too_big", "F.avg_pool2d(torch.ones(1, 1, 2, 2, device=dev), 3)",
     "RuntimeError", ["avg_pool2d", "output size is too small"], True),
    ("max_pool1d_kernel_too_big", "F.max_pool1d(torch.ones(1, 1, 2, device=dev), 3)",
     "RuntimeError", ["max_pool1d", "output size"], True),
    ("max_pool3d_kernel_too_big", "F.max_pool3d(torch.ones(1, 1, 2, 2, 2, device=dev), 3)",
     "RuntimeError", ["max_pool3d", "output size is too small"], True),
    ("avg_pool2d_padded_still_small",
     "F.avg_pool2d(torch.ones(1, 1, 1, 5, device=dev), (4, 1), padding=(1, 0))",
     "RuntimeError", ["avg_pool2d", "output size is too small"], True),
    ("conv2d_channels", "F.conv2d(torch.ones(1, 3, 5, 5, device=dev), torch.ones(2, 4, 3, 3, device=dev))",
     "RuntimeError", ["channels"], True),
    ("conv2d_kernel_too_big", "F.conv2d(torch.ones(1, 1, 2, 2, device=dev), torch.ones(1, 1, 3, 3, device=dev))",
     "RuntimeError", ["kernel"], True),
    ("conv2d_groups", "F.conv2d(torch.ones(1, 3, 5, 5, device=dev), torch.ones(2, 1, 3, 3, device=dev), groups=2)",
     "RuntimeError", ["group"], True),
    ("one_hot_float", "F.one_hot(torch.tensor([1.0, 2.0], device=dev), 3)",
     "RuntimeError", ["one_hot", "long"], True),
    ("cross_entropy_batch", "F.cross_entropy(torch.randn(2, 3, device=dev), torch.tensor([0, 1, 2], device=dev))",
     "ValueError", ["batch_size (2)", "batch_size (3)"], True),
    ("nll_loss_batch", "F.nll_loss(torch.randn(4, 3, device=dev), torch.tensor([0, 1], device=dev))",
     "ValueError", ["batch_size"], True),
    ("index_select_2d_index", "torch.ones(3, 4, device=dev).index_select(0, torch.zeros(2, 2, dtype=torch.long, device=dev))",
     "IndexError", ["index"], True),
    ("gather_rank", "torch.ones(3, 4, device=dev).gather(1, torch.zeros(3, dtype=torch.long, device=dev))",
     "RuntimeError", ["Index tensor must have the same number of dimensions as input tensor", "gather"], True),
    ("batch_norm_running_mean", "F.batch_norm(torch.randn(2, 3, 4, device=dev), torch.zeros(4, device=dev), torch.ones(4, device=dev))",
     "RuntimeError", ["running_mean should contain 3 elements not 4"], True),
    ("kthvalue_k_zero", "torch.randn(5, device=dev).kthvalue(0)",
     "RuntimeError", ["kthvalue", "selected number k out of range"], True),
    ("cat_shapes", "torch.cat([torch.ones(2, 3, device=dev), torch.ones(2, 4, device=dev)])",
     "RuntimeError", ["size"], True),
    ("stack_shapes", "torch.stack([torch.ones(2, 3, device=dev), torch.ones(3, 2, device=dev)])",
     "RuntimeError", ["stack"], True),
    ("view_size", "torch.ones(6, device=dev).view(5)", "RuntimeError", ["shape", "6"], True),
    ("sum_dim_range", "torch.ones(2, 3, device=dev).sum(dim=5)", "IndexError",
     ["dimension out of range"], True),
    ("softmax_dim_range", "torch.ones(2, 3, device=dev).softmax(dim=2)", "IndexError",
     ["dimension out of range"], True),
    ("transpose_range", "torch.ones(2, 3, device=dev).transpose(0, 5)", "IndexError",
     ["dimension out of range"], True),
    ("mm_vector", "torch.mm(torch.ones(3, device=dev), torch.ones(3, 3, device=dev))",
     "RuntimeError", ["mm", "must be a matrix"], True),
    ("linear_weight", "F.linear(torch.ones(2, 3, device=dev), torch.ones(4, 5, device=dev))",
     "RuntimeError", ["2", "3"], True),
    ("embedding_float_indices", "F.embedding(torch.tensor([0.0, 1.0], device=dev), torch.ones(3, 2, device=dev))",
     "RuntimeError", ["indices"], True),
    ("layer_norm_shape", "F.layer_norm(torch.ones(2, 3, device=dev), (4,))",
     "RuntimeError", ["normalized_shape"], True),
    ("expand_invalid", "torch.ones(2, 3, device=dev).expand(3, 2)", "RuntimeError",
     ["expand"], True),
    ("narrow_range", "torch.ones(4, device=dev).narrow(0, 2, 5)", "RuntimeError",
     ["exceeds"], True),
    ("topk_k", "torch.ones(3, device=dev).topk(5)", "RuntimeError", ["topk", "out of range"], True),
    ("arange_zero_step", "torch.arange(0, 10, 0, device=dev)", "RuntimeError", ["step"], True),
    ("empty_negative", "torch.empty(-1, device=dev)", "RuntimeError", ["negative dimension -1"], True),
    ("item_many", "torch.ones(2, device=dev).item()", "RuntimeError",
     ["2 elements", "scalar"], True),
    ("inplace_int_float", "torch.ones(2, dtype=torch.long, device=dev).add_(1.5)",
     "RuntimeError", ["can't be cast"], True),
    ("where_shapes", "torch.where(torch.ones(2, 3, dtype=torch.bool, device=dev), torch.ones(4, device=dev), 0.0)",
     "RuntimeError", ["where", "broadcast"], True),
    ("masked_fill_float_mask", "torch.ones(3, device=dev).masked_fill_(torch.ones(3, device=dev), 0.0)",
     "RuntimeError", ["mask", "bool"], True),
    ("out_of_memory", "torch.empty(2**42, device=dev).fill_(1)", "OutOfMemoryError",
     ["fill_", "out of memory"], False),
    ("float8_arithmetic", "torch.zeros(2, dtype=torch.float8_e4m3fn, device=dev) + 1",
     "NotImplementedError", ["add", "float8_e4m3fn"], True),
    # --- writes into memory shared between elements or with an input ----------------
    ("inplace_expanded_add_", "torch.zeros(3, device=dev).expand(2, 3).add_(1)",
     "RuntimeError", ["add_", "more than one element of the written-to tensor"], True),
    ("inplace_expanded_mul_", "torch.zeros(3, device=dev).expand(2, 3).mul_(2)",
     "RuntimeError", ["mul_", "more than one element"], True),
    ("inplace_expanded_exp_", "torch.zeros(3, device=dev).expand(2, 3).exp_()",
     "RuntimeError", ["exp_", "more than one element"], True),
    ("out_expanded", "torch.add(torch.ones(2, 3, device=dev), 1, out=torch.zeros(3, device=dev).expand(2, 3))",
     "RuntimeError", ["add", "more than one element"], True),
    ("inplace_partial_overlap", "b = torch.arange(8.0, device=dev); b[1:5].add_(b[0:4])",
     "RuntimeError", ["add_", "some elements of the input tensor and the written-to tensor"], True),
    ("index_add_partial_overlap",
     "b = torch.arange(8.0, device=dev); b[1:5].index_add_(0, torch.arange(4, device=dev), b[0:4])",
     "RuntimeError", ["index_add", "some elements"], True),
]

# (id, environment, substrings of the ValueError raised by `import torchtpu`)
ENV_CASES = [
    ("env_cpu_devices_huge", {"TORCHTPU_CPU_DEVICES": "99999999999"},
     ["TORCHTPU_CPU_DEVICES", "99999999999", "1 to 1024"]),
    ("env_cpu_devices_text", {"TORCHTPU_CPU_DEVICES": "two"}, ["TORCHTPU_CPU_DEVICES", "'two'"]),
    ("env_cpu_devices_zero", {"TORCHTPU_CPU_DEVICES": "0"}, ["TORCHTPU_CPU_DEVICES"]),
    ("env_cache_max_inf", {"TORCHTPU_CACHE_MAX_BYTES": "inf"},
     ["TORCHTPU_CACHE_MAX_BYTES", "'inf'", "size"]),
    ("env_cache_max_negative", {"TORCHTPU_CACHE_MAX_BYTES": "-5G"}, ["TORCHTPU_CACHE_MAX_BYTES"]),
    ("env_program_cache_max", {"TORCHTPU_PROGRAM_CACHE_MAX_BYTES": "lots"},
     ["TORCHTPU_PROGRAM_CACHE_MAX_BYTES"]),
    ("env_fallback", {"TORCHTPU_FALLBACK": "loud"}, ["TORCHTPU_FALLBACK", "warn, error, silent"]),
    ("env_launch_blocking", {"TPU_LAUNCH_BLOCKING": "maybe"}, ["TPU_LAUNCH_BLOCKING", "maybe"]),
    ("env_defer", {"TORCH_TPU_DEFER_AND_FUSE": "2"}, ["TORCH_TPU_DEFER_AND_FUSE"]),
    ("env_log_level", {"TF_CPP_MIN_LOG_LEVEL": "loud"}, ["TF_CPP_MIN_LOG_LEVEL", "0, 1, 2 or 3"]),
]

# One server process imports torch and torchtpu once (the runtime starts
# lazily, so nothing of it exists yet) and forks a fresh child per case: the
# child runs the case on the CPU (reference) and on "tpu", starting its own
# runtime, then a small op, and writes its result to a pipe. The server waits
# for it at most TIMEOUT seconds, kills it past that, and reports a child
# killed by a signal as a crash.
SERVER = textwrap.dedent("""
    import json, os, select, signal, sys, time
    import torch
    import torch.nn.functional as F
    import torchtpu
    TIMEOUT = float(sys.argv[1])

    def attempt(code, dev):
        try:
            exec(code, {"torch": torch, "F": F, "dev": dev})
            if dev == "tpu":
                torch.tpu.synchronize()
            return None, ""
        except Exception as e:
            return type(e).__name__, str(e)

    def child(code, compare, w):
        out = {}
        if compare:
            out["cpu_type"], out["cpu_msg"] = attempt(code, "cpu")
        out["type"], out["msg"] = attempt(code, "tpu")
        out["after"] = (torch.arange(4.0, device="tpu") * 2).sum().item()
        os.write(w, json.dumps(out).encode())
        os._exit(0)

    def run(code, compare):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                child(code, compare, w)
            finally:
                os._exit(3)
        os.close(w)
        data, deadline = b"", time.monotonic() + TIMEOUT
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(r)
                return {"hang": True}
            ready, _, _ = select.select([r], [], [], left)
            if ready:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    break
                data += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        if not data or os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0:
            return {"crash": status}
        return json.loads(data)

    cases = json.loads(sys.stdin.read())
    print("RESULT " + json.dumps({cid: run(code, compare) for cid, code, compare in cases}))
""")

ENV_RUNNER = textwrap.dedent("""
    import json
    try:
        import torchtpu
        out = {"type": None, "msg": ""}
    except Exception as e:
        out = {"type": type(e).__name__, "msg": str(e)}
    print("RESULT " + json.dumps(out))
""")


def _result(p, out, err):
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        return {"crash": p.returncode, "stderr": err[-2000:]}
    return json.loads(lines[-1][len("RESULT "):])


def _run_env(env):
    try:
        p = subprocess.run([sys.executable, "-c", ENV_RUNNER], env=env, text=True,
                           capture_output=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"hang": True}
    return _result(p, p.stdout, p.stderr)


@pytest.fixture(scope="module")
def results():
    base = dict(os.environ)
    base.pop("TORCHTPU_CHECK_NUMERICS", None)
    base.setdefault("TORCHTPU_FALLBACK", "silent")
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(TIMEOUT)], env=base, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cases = [(cid, code, compare) for cid, code, _, _, compare in CASES]
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        envs = {cid: pool.submit(_run_env, dict(base, **env)) for cid, env, _ in ENV_CASES}
        out, err = server.communicate(json.dumps(cases), timeout=TIMEOUT * len(CASES))
        res = _result(server, out, err)
        assert "crash" not in res, res
        res.update({cid: f.result() for cid, f in envs.items()})
    return res


def _check_message(r, want):
    msg = r["msg"].lower()
    missing = [w for w in want if w.lower() not in msg]
    assert not missing, f"message {r['msg']!r} lacks {missing}"


def test_enough_cases():
    assert len(CASES) + len(ENV_CASES) >= 40
    assert len({c[0] for c in CASES} | {c[0] for c in ENV_CASES}) == len(CASES) + len(ENV_CASES)


@pytest.mark.parametrize("cid,code,exc,want,compare", CASES, ids=[c[0] for c in CASES])
def test_bad_input(results, cid, code, exc, want, compare):
    r = results[cid]
    assert not r.get("hang"), f"{code}: no result within {TIMEOUT} s"
    assert "crash" not in r, f"{code}: process died ({r.get('crash')}): {r.get('stderr')}"
    if compare:
        assert r["cpu_type"] == exc, f"PyTorch CPU raised {r['cpu_type']}: {r['cpu_msg']}"
    assert r["type"] == exc, f"{code}: tpu raised {r['type']}: {r['msg']!r}, expected {exc}"
    _check_message(r, want)
    assert r["after"] == 12.0


@pytest.mark.parametrize("cid,env,want", ENV_CASES, ids=[c[0] for c in ENV_CASES])
def test_bad_setting(results, cid, env, want):
    r = results[cid]
    assert not r.get("hang") and "crash" not in r, r
    assert r["type"] == "ValueError", r
    _check_message(r, want)
