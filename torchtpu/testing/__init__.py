"""Testing tools for torchtpu: the differential OpInfo harness (opinfo.py)
and the runner for PyTorch's own device-generic test suites (pytorch_suites.py)."""
