"""Training metrics as TorchTitan reports them: loss, grad norm, tokens per
second, achieved TFLOP/s, MFU and device memory, one line per logged step;
the same values to TensorBoard (by default when it is installed); and a
progress bar (tqdm if installed, otherwise a plain one on a terminal).

MFU = model FLOPs per token x tokens per second / peak FLOP/s of the device.
The peak is either given (metrics.peak_flops) or measured at start with a
timed matmul on the training device in the training precision; it is never
assumed from a spec sheet. On XLA's CPU plugin the measured figure is this
machine's matmul speed through the plugin.
"""
import sys
import time

import torch


def measure_peak_flops(device, dtype=torch.float32, n=1024, repeats=5):
    """Best FLOP/s of an n x n matmul on `device` over `repeats` timed runs
    (after one untimed run, which compiles)."""
    a = torch.randn(n, n, dtype=torch.float32).to(device=device, dtype=dtype)
    b = torch.randn(n, n, dtype=torch.float32).to(device=device, dtype=dtype)
    _sync(device)
    (a @ b).sum().item()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        c = a @ b
        _sync(device)
        c.view(-1)[0].item()
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best


def _sync(device):
    if torch.device(device).type == "tpu":
        torch.tpu.synchronize()


def memory(device):
    """(allocated, peak) bytes on a tpu device; None on the CPU."""
    if torch.device(device).type != "tpu":
        return None
    return torch.tpu.memory_allocated(), torch.tpu.max_memory_allocated()


def _gib(n):
    return n / 2 ** 30


def format_line(step, loss, grad_norm, tps, tflops, mfu, mem, lr):
    parts = [f"step: {step:4d}", f"loss: {loss:7.4f}", f"grad_norm: {grad_norm:7.4f}",
             f"lr: {lr:.2e}"]
    if mem is not None:
        parts.append(f"memory: {_gib(mem[0]):5.3f}GiB (max {_gib(mem[1]):5.3f}GiB)")
    parts += [f"tps: {tps:,.0f}", f"tflops: {tflops:.4f}", f"mfu: {mfu:.2f}%"]
    return "  ".join(parts)


class ProgressBar:
    """tqdm when installed; otherwise a one-line bar on stderr when stderr is
    a terminal (nothing when it is a file or pipe, so logs stay clean)."""

    def __init__(self, total, initial=0, enabled=True):
        self.total, self.n = total, initial
        self.tqdm = None
        self.enabled = enabled
        if not enabled:
            return
        try:
            from tqdm import tqdm
            self.tqdm = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)
        except ImportError:
            self.enabled = sys.stderr.isatty()
        self.t0 = time.perf_counter()

    def update(self, n=1):
        self.n += n
        if self.tqdm is not None:
            self.tqdm.update(n)
        elif self.enabled:
            self._draw()

    def _draw(self):
        width = 30
        filled = int(width * self.n / max(self.total, 1))
        elapsed = time.perf_counter() - self.t0
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.n}/{self.total} "
                         f"{elapsed:6.1f}s")
        sys.stderr.flush()

    def write(self, line):
        """Prints a log line without breaking the bar."""
        if self.tqdm is not None:
            self.tqdm.write(line)
            return
        if self.enabled:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()
        print(line, flush=True)
        if self.enabled:
            self._draw()

    def close(self):
        if self.tqdm is not None:
            self.tqdm.close()
        elif self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


class TensorBoard:
    """A SummaryWriter of the logged scalars. `enabled`: True (asked for: a
    log line says so when tensorboard is missing), False, or "auto" / None
    (the default to be: on when tensorboard is installed, on rank 0 only;
    off without a word otherwise). Strings from the command line ("true",
    "false", "auto") mean the same."""

    def __init__(self, enabled, folder, log):
        self.writer = None
        enabled = _on_off_auto(enabled)
        if enabled == "auto" and _rank() != 0:
            enabled = False
        if enabled is False:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            if enabled is True:
                log("metrics: enable_tensorboard is set but tensorboard is not installed; "
                    "skipping TensorBoard")
            return
        self.writer = SummaryWriter(folder)
        if enabled == "auto":
            log(f"metrics: TensorBoard scalars in {folder} (tensorboard is installed; "
                f"metrics.enable_tensorboard = false turns them off)")

    def add(self, step, values):
        if self.writer is not None:
            for k, v in values.items():
                self.writer.add_scalar(k, v, step)

    def close(self):
        if self.writer is not None:
            self.writer.close()


def _on_off_auto(value):
    if value is None:
        return "auto"
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("auto", ""):
            return "auto"
        if v in ("true", "1", "yes", "on"):
            return True
        if v in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"metrics.enable_tensorboard: expected true, false or auto, "
                         f"got {value!r}")
    return bool(value)


def _rank():
    import torch.distributed as dist
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
