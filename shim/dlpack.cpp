// dlpack.cpp — tpu tensors through DLPack: the capsules made from tpu
// tensors, and the storages PyTorch makes when it imports them
// (torch.from_dlpack, torch.utils.dlpack, torch.asarray of a capsule).
//
// Why this is needed: PyTorch exports a tensor as its data_ptr() and imports
// a capsule with at::from_blob, which wraps the pointer in a StorageImpl whose
// DataPtr has PyTorch's deleter, not ours. Our data pointer is an opaque
// tt_storage handle and a view's data_ptr() is that handle plus a byte
// offset, so from the imported address alone storage_handle() cannot tell
// which tt_storage it lies in: handle + offset may be another storage's
// handle.
//
// What is done: every capsule made from a tpu tensor is rewritten as DLPack
// intends for opaque device pointers (its note on OpenCL's cl_mem): `data` is
// the tt_storage handle and `byte_offset` the view's offset in bytes.
// PyTorch's import honours byte_offset (the storage at `data`, storage_offset
// byte_offset / itemsize), so the alias's storage has the handle itself as
// its data pointer, and the alias the same data_ptr() as the original. A
// registry counts the live exports of each handle; storage_handle() accepts
// a foreign storage whose data pointer is a registered handle
// (export_storage). The capsule's manager holds the exported tensor, hence
// its tt_storage, until the importer's storage (or an unconsumed capsule)
// goes; its deleter, wrapped here, drops the registry entry then.
//
// Python calls torchtpu::_dlpack_export on each capsule it makes
// (torchtpu/_dlpack.py): PyTorch has no C++ hook for exports.
//
// Leaves out: DLPack's C exchange API (Tensor.__dlpack_c_exchange_api__):
// its exports of tpu tensors keep PyTorch's data_ptr() and cannot be
// imported back here (storage_handle refuses them with its message).
#include "shim.h"

#include <ATen/dlpack.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_map>

namespace torchtpu {
namespace {

using AnyDeleter = void (*)();  // the producer's deleter, cast back by type

struct Export {
  tt_storage *storage;
  AnyDeleter deleter;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<const void *, Export> exports;  // by DLManagedTensor(Versioned)*
  std::unordered_map<const tt_storage *, int64_t> live;  // live exports per handle
};

// Never destroyed: an importer's storage may go during teardown, after
// static destructors.
Registry &registry() {
  static auto *r = new Registry();
  return *r;
}

// Drops the entry of `managed`; returns its producer's deleter.
AnyDeleter forget(const void *managed) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.exports.find(managed);
  if (it == r.exports.end()) return nullptr;
  const Export e = it->second;
  r.exports.erase(it);
  auto live = r.live.find(e.storage);
  if (live != r.live.end() && --live->second == 0) r.live.erase(live);
  return e.deleter;
}

// Runs when the importer's storage goes, or an unconsumed capsule does. The
// producer's deleter (PyTorch's) then releases the exported tensor, outside
// the lock: that may free the tt_storage.
template <class T>
void export_deleter(T *managed) {
  const AnyDeleter d = forget(managed);
  if (d != nullptr) reinterpret_cast<void (*)(T *)>(d)(managed);
}

template <class T>
void adopt(T *managed, const at::Tensor &source) {
  DLTensor &dl = managed->dl_tensor;
  TORCH_CHECK(dl.device.device_type == kDLExtDev, "tpu dlpack: the capsule is not on a tpu device");
  const c10::StorageImpl *impl = source.storage().unsafeGetStorageImpl();
  tt_storage *s = storage_handle(impl);
  // No elements: nothing to alias; the importer's storage has zero bytes,
  // which storage_handle accepts without a handle.
  if (s == nullptr || source.numel() == 0) return;
  auto *base = static_cast<char *>(
      const_cast<c10::StorageImpl *>(impl)->_mutable_data_ptr_no_checks().get());
  const int64_t offset = source.storage_offset() * static_cast<int64_t>(source.element_size());
  // PyTorch exported source's data_ptr() (an as_strided view of it).
  TORCH_CHECK(static_cast<char *>(dl.data) + dl.byte_offset == base + offset,
              "tpu dlpack: the capsule does not hold the tensor it was made from");
  AnyDeleter producer = reinterpret_cast<AnyDeleter>(managed->deleter);
  {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    TORCH_CHECK(r.exports.count(managed) == 0, "tpu dlpack: capsule exported twice");
    r.exports[managed] = Export{s, producer};
    r.live[s]++;
  }
  dl.data = s;
  dl.byte_offset = static_cast<uint64_t>(offset);
  managed->deleter = &export_deleter<T>;
}

// managed: the DLManagedTensor (versioned: DLManagedTensorVersioned) inside
// a capsule PyTorch just made from `source`, a tpu tensor, not consumed yet.
// Internal: only torchtpu/_dlpack.py calls it, with the capsule's pointer.
void dlpack_export(const at::Tensor &source, int64_t managed, bool versioned) {
  TORCH_CHECK(is_tpu(source), "tpu dlpack: expected a tpu tensor, got one on ", source.device());
  TORCH_CHECK(managed != 0, "tpu dlpack: no capsule");
  void *p = reinterpret_cast<void *>(static_cast<intptr_t>(managed));
  if (versioned) {
    adopt(static_cast<DLManagedTensorVersioned *>(p), source);
  } else {
    adopt(static_cast<DLManagedTensor *>(p), source);
  }
}

}  // namespace

tt_storage *export_storage(const void *data) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(static_cast<const tt_storage *>(data));
  return it == r.live.end() ? nullptr : const_cast<tt_storage *>(it->first);
}

}  // namespace torchtpu

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  m.def("_dlpack_export(Tensor source, int managed, bool versioned) -> ()",
        &torchtpu::dlpack_export);
}
