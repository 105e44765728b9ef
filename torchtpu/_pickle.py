"""pickle of tpu tensors and storages (pickle.dumps, multiprocessing queues,
joblib, Ray): through a host copy, rebuilt on the same tpu device.

Tensor.__reduce_ex__ pickles a tensor as its TypedStorage plus the view's
offset, sizes and strides. TypedStorage.__reduce__ (and UntypedStorage's)
then write the storage with PyTorch's legacy torch.save, whose
UntypedStorage._write_file reads a non-CPU storage through at::from_blob of
its data pointer. A tpu data pointer is a handle, not memory, and a storage
built around it is not one the tpu allocator made, so that read fails. (The
zip-file torch.save, the default, copies storages with .cpu() and works.)

install() registers reducers for the two storage classes in copyreg's
dispatch table, which pickle consults before an object's own __reduce__:
a tpu storage becomes (rebuild, (its CPU copy, device)); every other
storage keeps PyTorch's own reduction. The tensor around the storage is
PyTorch's (_rebuild_tensor_v2 sets the view on the rebuilt storage)."""
import copyreg

import torch


def _rebuild_typed(cpu_storage, device):
    return torch.storage.TypedStorage(
        wrap_storage=cpu_storage._untyped_storage.to(device=device), dtype=cpu_storage.dtype,
        _internal=True)


def _rebuild_untyped(cpu_bytes, device):
    return cpu_bytes.to(device).untyped_storage()


def _reduce_typed(storage):
    # The untyped storage's device: TypedStorage.device warns that
    # TypedStorage is deprecated, and this runs for every pickled tensor.
    device = storage._untyped_storage.device
    if device.type != "tpu":
        return storage.__reduce__()
    cpu = torch.storage.TypedStorage(wrap_storage=storage._untyped_storage.cpu(),
                                     dtype=storage.dtype, _internal=True)
    return _rebuild_typed, (cpu, str(device))


def _reduce_untyped(storage):
    if storage.device.type != "tpu":
        return storage.__reduce__()
    # As a uint8 tensor: PyTorch cannot unpickle a bare UntypedStorage (its
    # legacy loader asks the class for a dtype), not even a CPU one.
    cpu_bytes = torch.empty(0, dtype=torch.uint8).set_(storage.cpu())
    return _rebuild_untyped, (cpu_bytes, str(storage.device))


def install():
    copyreg.pickle(torch.storage.TypedStorage, _reduce_typed)
    copyreg.pickle(torch.UntypedStorage, _reduce_untyped)
