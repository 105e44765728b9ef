"""torch_xla.debug on torchtpu: metrics."""
