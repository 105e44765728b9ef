"""How a torchtpu process ends when C++ gives up: a std::terminate (in CI,
now and then, "terminate called without an active exception" at a
process's exit) is reported with the thread's name and stack before
libstdc++'s own message and the abort, so that the failing code can be
found from the log alone (shim/module.cpp)."""
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
