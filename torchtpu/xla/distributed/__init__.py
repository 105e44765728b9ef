"""torch_xla.distributed on torchtpu: xla_multiprocessing, parallel_loader,
xla_backend, spmd."""
