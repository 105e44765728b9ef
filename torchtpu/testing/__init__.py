"""Testing tools for torchtpu: the differential OpInfo harness (opinfo.py)."""
