"""Fault injection for the fault-tolerance tests (tests/test_fault_tolerance.py):
a rank kills itself, receives SIGTERM or stalls at a chosen step, so a test
can show what survives what.

The trainer reads TORCHTPU_FAULTS (empty: nothing is injected, and this
module is not even imported) and calls after_step(step, rank) after every
optimizer step. TORCHTPU_FAULTS is a comma-separated list of

    ACTION@STEP:RANKS[:SECONDS]

ACTION is one of
    kill     SIGKILL this process (a crashed host: no handler runs)
    sigterm  send SIGTERM to this process (a preemption notice; the trainer's
             handler runs)
    stall    sleep SECONDS (default 60) before going on: the other ranks wait
             in the next collective (a hung or diverged rank)
RANKS is a rank, a '+'-separated list of ranks, or '*' (every rank).

A fault fires only in the first attempt of a torchrun job
(TORCHELASTIC_RESTART_COUNT unset or 0), so the restarted group runs clean;
TORCHTPU_FAULTS_ATTEMPT=N makes it fire in attempt N instead.

    TORCHTPU_FAULTS="kill@5:1"           rank 1 dies after step 5
    TORCHTPU_FAULTS="sigterm@5:*"        every rank is told to stop after step 5
    TORCHTPU_FAULTS="stall@3:1:30"       rank 1 stalls 30 s after step 3
"""
import os
import signal
import sys
import time
from dataclasses import dataclass

ENV = "TORCHTPU_FAULTS"
ACTIONS = ("kill", "sigterm", "stall")

__all__ = ["Fault", "parse", "from_env", "spec", "ENV"]


@dataclass(frozen=True)
class Fault:
    action: str
    step: int
    ranks: tuple  # () means every rank
    seconds: float = 60.0

    def applies(self, step, rank):
        return step == self.step and (not self.ranks or rank in self.ranks)


def parse(text):
    """TORCHTPU_FAULTS' text -> [Fault]; ValueError naming the bad entry."""
    faults = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        try:
            action, rest = entry.split("@", 1)
            parts = rest.split(":")
            step = int(parts[0])
            ranks = () if len(parts) < 2 or parts[1] == "*" else tuple(
                int(r) for r in parts[1].split("+"))
            seconds = float(parts[2]) if len(parts) > 2 else 60.0
        except ValueError:
            raise ValueError(f"{ENV}: cannot read {entry!r}: expected ACTION@STEP:RANKS[:SECONDS]"
                             f" (e.g. kill@5:1)") from None
        if action not in ACTIONS:
            raise ValueError(f"{ENV}: {entry!r}: unknown action {action!r} "
                             f"(expected one of {', '.join(ACTIONS)})")
        faults.append(Fault(action, step, ranks, seconds))
    return faults


def spec(action, step, ranks="*", seconds=None):
    """One entry of TORCHTPU_FAULTS, e.g. spec("kill", 5, 1) -> "kill@5:1"."""
    if isinstance(ranks, (list, tuple)):
        ranks = "+".join(str(r) for r in ranks)
    return f"{action}@{step}:{ranks}" + ("" if seconds is None else f":{seconds}")


class Injector:
    def __init__(self, faults):
        self.faults = faults

    def after_step(self, step, rank):
        for f in self.faults:
            if f.applies(step, rank):
                _fire(f, step, rank)


def _fire(f, step, rank):
    print(f"[faults] rank {rank}: {f.action} after step {step}", file=sys.stderr, flush=True)
    if f.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif f.action == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    elif f.action == "stall":
        time.sleep(f.seconds)


def from_env(environ=None):
    """An Injector for this process's TORCHTPU_FAULTS, or None (nothing set,
    or not the attempt the faults are for)."""
    environ = os.environ if environ is None else environ
    text = environ.get(ENV, "")
    if not text.strip():
        return None
    attempt = int(environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if attempt != int(environ.get("TORCHTPU_FAULTS_ATTEMPT", "0")):
        return None
    return Injector(parse(text))
