"""How a torchtpu process ends when C++ gives up: a std::terminate (in CI,
now and then, "terminate called without an active exception" at a
process's exit) is reported with the thread's name and stack before
libstdc++'s own message and the abort, so that the failing code can be
found from the log alone (shim/module.cpp); and the autograd device thread
a tpu backward starts is left asleep at exit (torchtpu/_env.py)."""
import os
import signal
import subprocess
import sys

CALL_TERMINATE = """
import ctypes, threading, torch, torchtpu
libc = ctypes.CDLL(None)
libc.pthread_self.restype = ctypes.c_ulong
def die():  # named as the OS sees it (Python 3.11 names no native thread)
    libc.pthread_setname_np(ctypes.c_ulong(libc.pthread_self()), b"dying")
    ctypes.CDLL("libstdc++.so.6")._ZSt9terminatev()
t = threading.Thread(target=die)
t.start()
t.join()
"""


def test_terminate_names_the_thread_and_its_stack():
    out = subprocess.run([sys.executable, "-c", CALL_TERMINATE], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == -signal.SIGABRT
    assert "torchtpu: std::terminate in thread 'dying'; its stack:" in out.stderr
    assert "libstdc++" in out.stderr  # frames, one a line
    assert "terminate called without an active exception" in out.stderr  # the previous handler ran


def _wait_limit_after_import(env_value):
    env = dict(os.environ)
    env.pop("TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT", None)
    if env_value is not None:
        env["TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT"] = env_value
    code = ("import os, torch, torchtpu\n"
            "w = torch.ones(3, device='tpu', requires_grad=True)\n"
            "(w * 2).sum().backward()\n"
            "assert w.grad.cpu().tolist() == [2.0, 2.0, 2.0]\n"
            "print(os.environ['TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT'])\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_autograd_device_thread_is_left_asleep_at_exit():
    # torchtpu's default (torchtpu/_env.py quiet_autograd_exit), and a
    # user's own value kept; either way the process exits cleanly.
    assert _wait_limit_after_import(None) == "0"
    assert _wait_limit_after_import("5") == "5"
