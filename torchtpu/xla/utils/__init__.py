"""torch_xla.utils on torchtpu: utils (xu)."""
