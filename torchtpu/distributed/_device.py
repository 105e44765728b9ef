"""The few torch.cuda-like device-module pieces torch.distributed uses that
torch.tpu does not have yet (FSDP2 enters `device_handle.stream(s)`).

Installed on torch.tpu only where the name is missing, so a fuller version in
torchtpu/tpu.py replaces these without a change here. "tpu" has one stream
per device (the core orders its work), so entering a stream makes it current
and restores the previous one on exit, which keeps torch's stream bookkeeping
consistent and changes no ordering."""
import torch


class _StreamContext:
    """`with torch.tpu.stream(s):` makes `s` the current stream (None: no-op)."""

    def __init__(self, stream):
        self.stream, self.prev = stream, None

    def __enter__(self):
        if self.stream is None:
            return self.stream
        self.prev = torch.accelerator.current_stream(self.stream.device)
        torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.prev is not None:
            torch.accelerator.set_stream(self.prev)
        return False


def stream(s):
    return _StreamContext(s)


def set_stream(s):
    if s is not None:
        torch.accelerator.set_stream(s)


def install(module):
    """Adds what `module` (torch.tpu) lacks; keeps what it has."""
    for name, fn in (("stream", stream), ("set_stream", set_stream),
                     ("StreamContext", _StreamContext)):
        if not hasattr(module, name):
            setattr(module, name, fn)
