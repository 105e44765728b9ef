"""torch_xla.distributed.parallel_loader (pl): batches moved to the device.

    loader = pl.MpDeviceLoader(train_loader, device)
    for x, y in loader: ...           # x, y on "tpu"; len(loader) == len(train_loader)

As in PyTorch/XLA, fetching each batch ends the previous step (xm.mark_step:
fused eager's graph runs, step closures run), and so does the end of the
epoch, so a loop over the loader needs no mark_step of its own. Tensors in
tuples, lists, dicts and namedtuples are moved; the copies are queued
(asynchronous host-to-device), so no prefetch thread is needed."""
from .. import _device
from ..core import xla_model as xm


class PerDeviceLoader:
    """Iterates `loader`, moving every batch to `device`."""

    def __init__(self, loader, device, batches_per_execution=1):
        self._loader = loader
        self._device = _device.map_device(device)
        self._every = max(1, int(batches_per_execution))

    def __len__(self):
        return len(self._loader)

    def __iter__(self):
        for count, batch in enumerate(self._loader):
            if count % self._every == 0:
                xm.mark_step()
            yield xm.send_cpu_data_to_device(batch, self._device)
        xm.mark_step()

    def per_device_samples(self):
        return len(self)


class ParallelLoader:
    """PyTorch/XLA's ParallelLoader for this process's device(s); prefetch
    sizes and transfer threads are accepted and not needed."""

    def __init__(self, cpu_loader, devices, batchdim=0, batches_per_execution=1,
                 loader_prefetch_size=16, device_prefetch_size=8,
                 host_to_device_transfer_threads=1, input_sharding=None, **kwargs):
        del batchdim, loader_prefetch_size, device_prefetch_size, kwargs
        del host_to_device_transfer_threads
        if input_sharding is not None:
            raise NotImplementedError(
                "torch_xla.distributed.parallel_loader: input_sharding is not supported on "
                "torchtpu; shard batches with DTensor (docs/migrating_from_torch_xla.md)")
        self._loader = cpu_loader
        self._devices = [_device.map_device(d) for d in devices]
        self._every = batches_per_execution

    def per_device_loader(self, device):
        return PerDeviceLoader(self._loader, device, self._every)

    def per_device_samples(self):
        return len(self._loader) // max(1, len(self._devices))

    def close(self):
        pass


class MpDeviceLoader:
    """`loader`'s batches on `device` (one device per process); keeps len()."""

    def __init__(self, loader, device, **kwargs):
        self._loader = loader
        self._device = device
        self._parallel_loader_kwargs = kwargs
        self._every = kwargs.get("batches_per_execution", 1)
        if kwargs.get("input_sharding") is not None:
            ParallelLoader(loader, [device], **kwargs)  # raises, naming input_sharding

    def __iter__(self):
        return iter(PerDeviceLoader(self._loader, self._device, self._every))

    def __len__(self):
        return len(self._loader)


def __getattr__(name):
    raise AttributeError(f"torch_xla.distributed.parallel_loader.{name} is not provided by "
                         "torchtpu's migration layer (docs/migrating_from_torch_xla.md)")
