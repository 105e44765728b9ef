"""torch_xla.core on torchtpu: xla_model (xm)."""
