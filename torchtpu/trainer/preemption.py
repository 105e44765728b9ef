"""Preemption: the signals a host's maintenance or preemption sends
([preemption] signals, SIGTERM by default) make the trainer stop at the end
of the current step, write a checkpoint, and exit with [preemption]
exit_code (143, non-zero: torchrun --max-restarts restarts the group, and the
restarted trainer resumes from that checkpoint).

The handler only notes the signal; the step loop asks stop_requested() after
every step, and on many ranks the ranks agree (any rank's signal stops them
all at the same step, so they write the same checkpoint). The grace period
runs from the signal: if the checkpoint is not written by then (a hung
collective, a slow disk), a watchdog thread exits the process with the exit
code itself, before the scheduler's SIGKILL would; the checkpoints already
written are intact (saves are atomic)."""
import os
import signal
import sys
import threading
import time

from .config import signal_numbers

__all__ = ["Preemption", "Preempted"]


class Preempted(SystemExit):
    """Raised by the trainer after the preemption checkpoint is written; its
    code is [preemption] exit_code."""


class Preemption:
    def __init__(self, p, log=print):
        self.signals = signal_numbers(p["signals"])
        self.grace = float(p["grace_period_seconds"])
        self.exit_code = int(p["exit_code"])
        self.log = log
        self.received = None     # the signal's name, once one came
        self.received_at = None  # time.monotonic() of it
        self._old = {}
        self._timer = None

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers can only be set from the main thread
        for sig in self.signals:
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
        if self._timer is not None:
            self._timer.cancel()

    def _handle(self, signum, frame):
        if self.received is not None:
            return
        self.received = signal.Signals(signum).name
        self.received_at = time.monotonic()
        self._timer = threading.Timer(self.grace, self._expired)
        self._timer.daemon = True
        self._timer.start()

    def _expired(self):
        sys.stderr.write(f"preemption: the checkpoint was not written within the grace period "
                         f"({self.grace:g} s after {self.received}); exiting with "
                         f"{self.exit_code}\n")
        sys.stderr.flush()
        os._exit(self.exit_code)

    def seconds_since(self):
        return None if self.received_at is None else time.monotonic() - self.received_at
