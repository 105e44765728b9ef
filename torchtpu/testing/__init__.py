"""Testing tools for torchtpu: the differential OpInfo harness (opinfo.py),
the runner for PyTorch's own device-generic test suites (pytorch_suites.py)
and a reader of the optimized programs XLA dumps (hlo_dump.py)."""
import contextlib

__all__ = ["native_only"]


@contextlib.contextmanager
def native_only():
    """Runs the block with the CPU fallback turned into an error (fallback
    mode "error"), so an op without a native rule raises at once, and checks
    afterwards that the fallback counts did not move."""
    import torchtpu

    before = dict(torchtpu.fallback_counts())
    mode = torchtpu.fallback_mode()
    torchtpu.set_fallback_mode("error")
    try:
        yield
    finally:
        torchtpu.set_fallback_mode(mode)
    assert torchtpu.fallback_counts() == before, "an op fell back to the CPU"
