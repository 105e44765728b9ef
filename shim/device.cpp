// device.cpp — the "tpu" device as PyTorch sees it: runtime access and error
// conversion, dtype mapping, the allocator (a storage's data pointer is an
// opaque core handle, never host memory), storage and tensor descriptors, the
// device guard (current device and stream per thread, streams feeding one
// in-order queue, events that wait for the device),
// the PrivateUse1 hooks and the generator.
//
// Leaves out: kernels (kernels.cpp), op dispatch (fallback.cpp).
#include "shim.h"

#include <cctype>

#include <ATen/EmptyTensor.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceCapability.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

namespace torchtpu {

// --- runtime and status ------------------------------------------------------

tt_runtime *runtime() {
  tt_runtime *rt = nullptr;
  tt_status s = tt_runtime_get(&rt);
  if (s != nullptr) throw_status(s, "tpu runtime");
  return rt;
}

void throw_status(tt_status s, const std::string &what) {
  const tt_code code = tt_status_code(s);
  const char *raw = tt_status_message(s);
  std::string msg = raw != nullptr ? raw : "unknown error";
  tt_status_free(s);
  // Name the op unless the core's message already does ("... (in
  // aten::add.out)"); a device-side check names the op that failed. The name
  // goes after the text, before the core's [file:line]: messages that mirror
  // PyTorch's checks start with PyTorch's text, which tests match with "^...".
  const size_t colons = what.find("::");
  const std::string short_what = colons == std::string::npos ? what : what.substr(colons + 2);
  if (!what.empty() && msg.find(short_what) == std::string::npos &&
      msg.find("(device-side check in ") == std::string::npos) {
    const size_t loc = msg.rfind(" [");
    const bool has_loc = loc != std::string::npos && msg.back() == ']';
    const std::string ctx = " (in " + what + ")";
    msg = has_loc ? msg.substr(0, loc) + ctx + msg.substr(loc) : msg + ctx;
  }
  // The plugin reports an allocation failure inside a program as its own
  // error text; what says "out of memory" is one, whatever its code.
  std::string lower = msg;
  for (char &ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const bool oom = lower.find("out of memory") != std::string::npos ||
                   lower.find("resource_exhausted") != std::string::npos ||
                   lower.find("resource exhausted") != std::string::npos;
  if (oom && code != TT_RESOURCE_EXHAUSTED && code != TT_OUT_OF_RANGE) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
  }
  switch (code) {
    case TT_OUT_OF_RANGE:
      TORCH_CHECK_INDEX(false, msg);
      break;
    case TT_RESOURCE_EXHAUSTED:
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
      break;
    case TT_UNIMPLEMENTED:
      TORCH_CHECK_NOT_IMPLEMENTED(false, msg);
      break;
    case TT_TYPE_ERROR:
      TORCH_CHECK_TYPE(false, msg);
      break;
    default:
      break;
  }
  TORCH_CHECK(false, msg);
}

int device_count_noexcept() {
  tt_runtime *rt = nullptr;
  tt_status s = tt_runtime_get(&rt);
  if (s != nullptr) {
    tt_status_free(s);
    return 0;
  }
  tt_runtime_info info;
  std::memset(&info, 0, sizeof(info));
  tt_runtime_info_get(rt, &info);
  return info.device_count;
}

// --- dtypes ------------------------------------------------------------------

tt_dtype to_tt_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Bool: return TT_BOOL;
    case c10::ScalarType::Byte: return TT_U8;
    case c10::ScalarType::Char: return TT_I8;
    case c10::ScalarType::Short: return TT_I16;
    case c10::ScalarType::Int: return TT_I32;
    case c10::ScalarType::Long: return TT_I64;
    case c10::ScalarType::Half: return TT_F16;
    case c10::ScalarType::BFloat16: return TT_BF16;
    case c10::ScalarType::Float: return TT_F32;
    case c10::ScalarType::Double: return TT_F64;
    case c10::ScalarType::ComplexFloat: return TT_C64;
    case c10::ScalarType::ComplexDouble: return TT_C128;
    // PyTorch's CPU covers few ops for these; the core lowers those it can
    // and sends the rest to the CPU (see check_wide_uint in lower/ctx.c).
    case c10::ScalarType::UInt16: return TT_U16;
    case c10::ScalarType::UInt32: return TT_U32;
    case c10::ScalarType::UInt64: return TT_U64;
    default: return TT_DTYPE_NONE;
  }
}

c10::ScalarType to_scalar_type(tt_dtype d) {
  switch (d) {
    case TT_BOOL: return c10::ScalarType::Bool;
    case TT_U8: return c10::ScalarType::Byte;
    case TT_I8: return c10::ScalarType::Char;
    case TT_I16: return c10::ScalarType::Short;
    case TT_I32: return c10::ScalarType::Int;
    case TT_I64: return c10::ScalarType::Long;
    case TT_F16: return c10::ScalarType::Half;
    case TT_BF16: return c10::ScalarType::BFloat16;
    case TT_F32: return c10::ScalarType::Float;
    case TT_F64: return c10::ScalarType::Double;
    case TT_U16: return c10::ScalarType::UInt16;
    case TT_U32: return c10::ScalarType::UInt32;
    case TT_U64: return c10::ScalarType::UInt64;
    case TT_C64: return c10::ScalarType::ComplexFloat;
    case TT_C128: return c10::ScalarType::ComplexDouble;
    default: break;
  }
  TORCH_CHECK(false, "tpu: the core returned an unknown dtype ",
              static_cast<int>(d));
}

tt_dtype to_tt_dtype_checked(c10::ScalarType t, const std::string &what) {
  const tt_dtype d = to_tt_dtype(t);
  // Python spells dtypes "complex64", "float8_e4m3fn": say it that way.
  TORCH_CHECK(d != TT_DTYPE_NONE, what, ": dtype ", c10::getDtypeNames(t).first,
              " is not supported on tpu");
  return d;
}

// --- current device ------------------------------------------------------------

namespace {

thread_local c10::DeviceIndex g_current_device = 0;

void check_index(c10::DeviceIndex index) {
  const int count = device_count_noexcept();
  // DeviceIndex is a char type: print it as a number, not a character.
  TORCH_CHECK_INDEX(index >= 0 && index < count, "tpu: device index ", static_cast<int>(index),
                    " is out of range (", count, " tpu device",
                    count == 1 ? "" : "s", ")");
}

c10::DeviceIndex current_device() { return g_current_device; }

void set_current_device(c10::DeviceIndex index) {
  check_index(index);
  g_current_device = index;
}

}  // namespace

// --- allocator ---------------------------------------------------------------
//
// DataPtr(data = ctx = tt_storage*). PyTorch may do arithmetic on the data
// pointer (data_ptr() of a view) but never dereferences it for our device.

namespace {

// Both tell torch.tpu.memory's history (memory.cpp) while it records.
void delete_storage(void *ctx) {
  auto *s = static_cast<tt_storage *>(ctx);
  memory_note_free(s, tt_storage_device(s), tt_storage_nbytes(s));
  tt_storage_destroy(s);
}

c10::DataPtr make_data_ptr(tt_storage *s) {
  const auto device = c10::Device(c10::DeviceType::PrivateUse1,
                                  static_cast<c10::DeviceIndex>(tt_storage_device(s)));
  memory_note_alloc(s, tt_storage_device(s), tt_storage_nbytes(s));
  return c10::DataPtr(s, s, &delete_storage, device);
}

// The bytes still free under the per-process limit (0: no limit).
int64_t free_under_limit() {
  int64_t limit = 0, refused = 0;
  tt_runtime_memory_limit(runtime(), &limit, &refused);
  tt_stats st;
  std::memset(&st, 0, sizeof(st));
  tt_runtime_stats(runtime(), &st);
  return limit > st.bytes_in_use ? limit - st.bytes_in_use : 0;
}

struct TpuAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    tt_storage *s = nullptr;
    tt_status st = tt_storage_create(runtime(), current_device(),
                                     static_cast<int64_t>(nbytes), &s);
    if (st != nullptr && tt_status_code(st) == TT_RESOURCE_EXHAUSTED)
      memory_note_oom(current_device(), static_cast<int64_t>(nbytes), free_under_limit());
    check(st, "tpu allocator");
    return make_data_ptr(s);
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void * /*dest*/, const void * /*src*/,
                 std::size_t /*count*/) const override {
    TORCH_CHECK(false, "tpu memory is not host-addressable: copy it with "
                       "Tensor.copy_ or .to(), not through raw pointers");
  }

  // DeviceAllocator: torch.accelerator memory statistics.
  bool initialized() override { return device_count_noexcept() > 0; }
  void emptyCache(c10::MempoolId_t /*pool*/) override {}
  void recordStream(const c10::DataPtr & /*ptr*/, c10::Stream /*s*/) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(
      c10::DeviceIndex /*device*/) override {
    // The core counts all devices together.
    tt_stats st;
    std::memset(&st, 0, sizeof(st));
    tt_runtime_stats(runtime(), &st);
    c10::CachingDeviceAllocator::DeviceStats out;
    for (auto *arr : {&out.allocated_bytes, &out.reserved_bytes,
                      &out.active_bytes, &out.requested_bytes}) {
      auto &agg = (*arr)[0];
      agg.current = st.bytes_in_use;
      agg.peak = st.peak_bytes_in_use;
    }
    for (auto *arr : {&out.allocation, &out.segment, &out.active}) {
      (*arr)[0].current = st.buffers_in_use;
    }
    // Allocations refused by the per-process limit (set_per_process_memory_fraction).
    int64_t limit = 0;
    tt_runtime_memory_limit(runtime(), &limit, &out.num_ooms);
    return out;
  }

  // (free, total) bytes: torch.accelerator.get_memory_info, torch.tpu.mem_get_info.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex /*device*/) override {
    tt_runtime_info info;
    tt_runtime_info_get(runtime(), &info);
    if (std::strcmp(info.platform, "cpu") == 0) return host_memory();
    const size_t total = known_device_memory(info.device_kind);
    TORCH_CHECK_NOT_IMPLEMENTED(total > 0, "tpu: the memory size of a '", info.device_kind,
                                "' device is not known (PJRT's device memory statistics "
                                "are not read yet)");
    tt_stats st;
    std::memset(&st, 0, sizeof(st));
    tt_runtime_stats(runtime(), &st);
    const auto used = static_cast<size_t>(st.bytes_in_use);
    return {total > used ? total - used : 0, total};
  }

  // The CPU plugin's device memory is the host's: (available, physical).
  static std::pair<size_t, size_t> host_memory() {
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t total = page * static_cast<size_t>(sysconf(_SC_PHYS_PAGES));
    size_t avail = page * static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES));
    if (FILE *f = std::fopen("/proc/meminfo", "r")) {  // counts reclaimable cache too
      char line[256];
      unsigned long long kb = 0;
      while (std::fgets(line, sizeof line, f) != nullptr) {
        if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
          avail = static_cast<size_t>(kb) * 1024;
          break;
        }
      }
      std::fclose(f);
    }
    return {avail, total};
  }

  // HBM per device of TPU kinds, by PJRT's device_kind.
  static size_t known_device_memory(const char *kind) {
    static const std::pair<const char *, size_t> kKinds[] = {
        {"TPU v2", size_t{8} << 30},       {"TPU v3", size_t{16} << 30},
        {"TPU v4", size_t{32} << 30},      {"TPU v5 lite", size_t{16} << 30},
        {"TPU v5e", size_t{16} << 30},     {"TPU v5p", size_t{95} << 30},
        {"TPU v5", size_t{95} << 30},      {"TPU v6 lite", size_t{32} << 30},
        {"TPU v6e", size_t{32} << 30},
    };
    for (const auto &k : kKinds) {
      if (kind != nullptr && std::strcmp(kind, k.first) == 0) return k.second;
    }
    return 0;
  }

  void resetAccumulatedStats(c10::DeviceIndex /*device*/) override {}
  void resetPeakStats(c10::DeviceIndex /*device*/) override {
    tt_runtime_reset_peak(runtime());
  }
};

TpuAllocator g_allocator;

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator)

c10::Allocator *allocator() { return &g_allocator; }

// --- storages and tensors ----------------------------------------------------

tt_storage *storage_handle(const c10::StorageImpl *storage) {
  auto *impl = const_cast<c10::StorageImpl *>(storage);
  const c10::DataPtr &dp = impl->_mutable_data_ptr_no_checks();
  if (dp.get() == nullptr && dp.get_context() == nullptr) return nullptr;
  if (dp.get_deleter() == &delete_storage) return static_cast<tt_storage *>(dp.get_context());
  // PyTorch's storage around an imported DLPack capsule of a tpu tensor: its
  // data pointer is the exported tt_storage handle (dlpack.cpp).
  if (tt_storage *s = export_storage(dp.get())) return s;
  if (storage->nbytes() == 0) return nullptr;  // nothing to read or write
  TORCH_CHECK(false, "tpu: this storage was not allocated by the tpu allocator "
              "(device ", dp.device(), ")");
}

namespace {

void resize_storage_bytes(c10::StorageImpl *storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(),
              "Trying to resize storage that is not resizable");
  tt_storage *s = storage_handle(storage);
  if (s == nullptr) {
    storage->set_data_ptr_noswap(g_allocator.allocate(nbytes));
  } else {
    check(tt_storage_resize(s, static_cast<int64_t>(nbytes)), "resize storage");
  }
  storage->set_nbytes(nbytes);
}

}  // namespace

void grow_storage(c10::StorageImpl *storage, size_t nbytes) {
  if (nbytes > storage->nbytes()) resize_storage_bytes(storage, nbytes);
}

void resize_impl(c10::TensorImpl *self, c10::IntArrayRef size,
                 c10::OptionalIntArrayRef stride) {
  if (self->sizes() == size && (!stride || self->strides() == *stride)) return;
  const int64_t itemsize = static_cast<int64_t>(self->dtype().itemsize());
  const int64_t offset = self->storage_offset();
  size_t needed = 0;
  if (stride) {
    self->set_sizes_and_strides(size, *stride);
    needed = at::detail::computeStorageNbytes(size, *stride, itemsize, offset);
  } else {
    self->set_sizes_contiguous(size);
    needed = at::detail::computeStorageNbytesContiguous(size, itemsize, offset);
  }
  // A tensor of no elements needs no storage (and may have any offset).
  if (self->numel() == 0) return;
  const c10::Storage &storage = self->unsafe_storage();
  TORCH_CHECK(storage, "tpu: resize_ of a tensor without storage");
  grow_storage(storage.unsafeGetStorageImpl(), needed);
}

at::Tensor wrap_storage(tt_storage *storage, c10::ScalarType dtype,
                        c10::IntArrayRef sizes) {
  const size_t nbytes = static_cast<size_t>(tt_storage_nbytes(storage));
  auto impl = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes, make_data_ptr(storage),
      &g_allocator, /*resizable=*/true);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(std::move(impl)),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

tt_dtype copy_dtype(c10::ScalarType t, const std::string &what) {
  const tt_dtype d = to_tt_dtype(t);
  if (d != TT_DTYPE_NONE || c10::isQIntType(t)) return to_tt_dtype_checked(t, what);
  switch (c10::elementSize(t)) {
    case 1: return TT_U8;
    case 2: return TT_U16;
    case 4: return TT_U32;
    case 8: return TT_U64;
    default: return to_tt_dtype_checked(t, what);  // throws
  }
}

namespace {

tt_tensor describe_as(const at::Tensor &t, tt_dtype dtype, const std::string &what) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, what,
              ": expected a tpu tensor, got one on ", t.device());
  tt_tensor d;
  std::memset(&d, 0, sizeof(d));
  d.storage = storage_handle(t.storage().unsafeGetStorageImpl());
  TORCH_CHECK(d.storage != nullptr || t.numel() == 0, what,
              ": tpu tensor without device storage");
  d.dtype = dtype;
  // The core's descriptors hold at most TT_MAX_RANK dims; refuse more here,
  // before anything reads sizes into a fixed array.
  TORCH_CHECK(t.dim() <= TT_MAX_RANK, what, ": a tensor of rank ", t.dim(),
              " (shape ", t.sizes(), ") is not supported on tpu: at most ",
              TT_MAX_RANK, " dimensions");
  d.ndim = static_cast<int32_t>(t.dim());
  d.sizes = t.sizes().data();
  d.strides = t.strides().data();
  d.offset = t.storage_offset();
  return d;
}

}  // namespace

tt_tensor describe(const at::Tensor &t, const std::string &what) {
  return describe_as(t, to_tt_dtype_checked(t.scalar_type(), what), what);
}

CopyView::CopyView(const at::Tensor &t, const std::string &what) {
  const tt_dtype dtype = copy_dtype(t.scalar_type(), what);
  if (t.dim() <= TT_MAX_RANK) {
    desc = describe_as(t, dtype, what);
    return;
  }
  for (int64_t i = 0; i < t.dim(); i++) {
    if (t.size(i) == 1) continue;
    if (!sizes.empty() && strides.back() == t.size(i) * t.stride(i)) {
      sizes.back() *= t.size(i);  // dim i continues the previous one
      strides.back() = t.stride(i);
      continue;
    }
    sizes.push_back(t.size(i));
    strides.push_back(t.stride(i));
  }
  at::Tensor flat = at::empty({0}, t.options());
  flat.set_(t.storage(), t.storage_offset(), sizes, strides);
  desc = describe_as(flat, dtype, what);  // refuses when still above TT_MAX_RANK dims
  desc.sizes = sizes.data();
  desc.strides = strides.data();
}

// --- device guard ------------------------------------------------------------
//
// Streams: torch.tpu.Stream() objects are distinct (ids from a counter, a
// current stream per thread and device), but every stream feeds the core's
// one in-order queue, so work on any stream runs in program order: an event
// waited on (block) has always been reached already, and wait_stream /
// wait_event need no device work. Events record where in that order they
// were taken; query and synchronize wait for the device (the core has no
// per-point fence yet), so a True answer is always true. Timing events
// (enable_timing=True) wait for the work before them when recorded and take
// the host clock then: elapsed_time is the wall time between the two points
// of completion.

namespace {

struct TpuEvent {
  bool timing = false;
  double ms = 0;  // host clock when the work before the record had finished
};

thread_local std::vector<c10::StreamId> g_current_stream;  // per device; 0: default
std::atomic<c10::StreamId> g_next_stream{1};

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  static c10::DeviceIndex index_of(c10::Device d) noexcept {
    return d.index() >= 0 ? d.index() : current_device();
  }
  static c10::Stream make_stream(c10::DeviceIndex index, c10::StreamId id) noexcept {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, index), id);
  }
  static c10::Stream current_stream(c10::Device d) noexcept {
    const c10::DeviceIndex index = index_of(d);
    const auto i = static_cast<size_t>(index);
    return make_stream(index, i < g_current_stream.size() ? g_current_stream[i] : 0);
  }

  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device d) const override {
    const c10::DeviceIndex old = current_device();
    if (d.index() != old) set_current_device(d.index());
    return c10::Device(kType, old);
  }
  c10::Device getDevice() const override {
    return c10::Device(kType, current_device());
  }
  void setDevice(c10::Device d) const override { set_current_device(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) g_current_device = d.index();
  }

  c10::Stream getStream(c10::Device d) const override { return current_stream(d); }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return make_stream(index_of(d), 0);
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return make_stream(index_of(d), g_next_stream.fetch_add(1));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high*/) const override {
    return getNewStream(d, 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    const c10::Stream old = current_stream(s.device());
    const auto i = static_cast<size_t>(old.device_index());
    if (g_current_stream.size() <= i) g_current_stream.resize(i + 1, 0);
    g_current_stream[i] = s.id();
    return old;
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count_noexcept());
  }

  // torch.accelerator.get_device_capability: the dtypes tpu tensors can have
  // (float64 only where the plugin has it).
  c10::DeviceCapability getDeviceCapability(c10::Device /*d*/) const override {
    tt_runtime_info info;
    tt_runtime_info_get(runtime(), &info);
    auto supported = [&](c10::ScalarType t) {
      const tt_dtype d = to_tt_dtype(t);
      return d != TT_DTYPE_NONE && ((d != TT_F64 && d != TT_C128) || info.supports_f64);
    };
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
#define TT_SET_SUPPORTED(_1, n) \
  cap.capability_data.supported_scalar_types.has_##n = supported(c10::ScalarType::n) ? 1 : 0;
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(TT_SET_SUPPORTED)
#undef TT_SET_SUPPORTED
    return cap;
  }

  void destroyEvent(void *event, const c10::DeviceIndex /*index*/) const noexcept override {
    delete static_cast<TpuEvent *>(event);
  }
  void record(void **event, const c10::Stream & /*stream*/,
              const c10::DeviceIndex /*index*/,
              const c10::EventFlag flag) const override {
    if (*event == nullptr) *event = new TpuEvent();
    auto *e = static_cast<TpuEvent *>(*event);
    e->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
    if (e->timing) {
      check(tt_runtime_synchronize(runtime()), "tpu event record");
      e->ms = now_ms();
    }
  }
  void block(void * /*event*/, const c10::Stream & /*stream*/) const override {
    // One in-order queue: the recorded point is always before the waiter's work.
  }
  bool queryEvent(void *event) const override {
    if (event == nullptr) return true;
    check(tt_runtime_synchronize(runtime()), "tpu event query");
    return true;
  }
  void synchronizeEvent(void *event) const override {
    if (event == nullptr) return;
    check(tt_runtime_synchronize(runtime()), "tpu event synchronize");
  }
  double elapsedTime(void *event1, void *event2,
                     const c10::DeviceIndex /*index*/) const override {
    TORCH_CHECK(event1 != nullptr && event2 != nullptr,
                "tpu elapsed_time: both events must be recorded");
    const auto *a = static_cast<const TpuEvent *>(event1);
    const auto *b = static_cast<const TpuEvent *>(event2);
    TORCH_CHECK(a->timing && b->timing,
                "tpu elapsed_time: both events need enable_timing=True");
    return b->ms - a->ms;
  }

  bool queryStream(const c10::Stream & /*stream*/) const override {
    check(tt_runtime_synchronize(runtime()), "tpu stream query");
    return true;
  }
  void synchronizeStream(const c10::Stream & /*stream*/) const override {
    check(tt_runtime_synchronize(runtime()), "tpu synchronize");
  }
  void synchronizeDevice(const c10::DeviceIndex /*index*/) const override {
    check(tt_runtime_synchronize(runtime()), "tpu synchronize");
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl)

}  // namespace

// --- generator -----------------------------------------------------------------
//
// The state (seed, offset) lives in the core's tt_generator; programs take it
// as a runtime argument. The default generators wrap the runtime's own.

class TpuGenerator final : public c10::GeneratorImpl {
 public:
  TpuGenerator(c10::DeviceIndex index, tt_generator *gen, bool owned)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        gen_(gen),
        owned_(owned) {}
  ~TpuGenerator() override {
    if (owned_) tt_generator_destroy(gen_);
  }

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }
  tt_generator *handle() const { return gen_; }

  void set_current_seed(uint64_t seed) override {
    tt_generator_set_state(gen_, seed, 0);
  }
  uint64_t current_seed() const override { return state().first; }
  uint64_t seed() override {
    const uint64_t s = c10::detail::getNonDeterministicRandom();
    set_current_seed(s);
    return s;
  }
  void set_offset(uint64_t offset) override {
    tt_generator_set_state(gen_, state().first, offset);
  }
  uint64_t get_offset() const override { return state().second; }

  // The state tensor is a CPU uint8 tensor of 16 bytes: seed, then offset.
  void set_state(const c10::TensorImpl &new_state) override {
    TORCH_CHECK(new_state.device().is_cpu() &&
                    new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                    new_state.numel() == 16,
                "tpu generator: expected a CPU uint8 state tensor of 16 bytes "
                "(seed, offset), got ", new_state.numel(), " elements of ",
                new_state.dtype(), " on ", new_state.device());
    uint64_t words[2];
    std::memcpy(words, new_state.data(), sizeof(words));
    tt_generator_set_state(gen_, words[0], words[1]);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::Tensor t = at::empty({16}, at::TensorOptions().dtype(at::kByte));
    const auto st = state();
    const uint64_t words[2] = {st.first, st.second};
    std::memcpy(t.data_ptr(), words, sizeof(words));
    return t.getIntrusivePtr();
  }

 private:
  std::pair<uint64_t, uint64_t> state() const {
    uint64_t seed = 0, offset = 0;
    tt_generator_get_state(gen_, &seed, &offset);
    return {seed, offset};
  }

  TpuGenerator *clone_impl() const override {
    tt_generator *g = nullptr;
    check(tt_generator_create(runtime(), c10::default_rng_seed_val, &g),
          "tpu generator");
    const auto st = state();
    tt_generator_set_state(g, st.first, st.second);
    return new TpuGenerator(device_.index(), g, /*owned=*/true);
  }

  tt_generator *gen_;
  bool owned_;
};

tt_generator *generator_handle(const at::Generator &gen, const std::string &what) {
  TORCH_CHECK(gen.defined() && gen.device().type() == c10::DeviceType::PrivateUse1,
              what, ": expected a tpu generator, got one for ",
              gen.defined() ? c10::DeviceTypeName(gen.device().type()) : "nothing");
  return gen.get<TpuGenerator>()->handle();
}

namespace {

const at::Generator &default_generator(c10::DeviceIndex index) {
  static std::once_flag once;
  static std::vector<at::Generator> gens;
  std::call_once(once, [] {
    tt_runtime *rt = runtime();
    const int n = device_count_noexcept();
    for (int i = 0; i < n; i++) {
      gens.push_back(at::make_generator<TpuGenerator>(
          static_cast<c10::DeviceIndex>(i), tt_runtime_default_generator(rt, i),
          /*owned=*/false));
    }
  });
  if (index < 0) index = current_device();
  TORCH_CHECK_INDEX(index < static_cast<c10::DeviceIndex>(gens.size()),
                    "tpu: no default generator for device ", static_cast<int>(index));
  return gens[index];
}

}  // namespace

// --- hooks -------------------------------------------------------------------

namespace {

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  void init() const override { (void)runtime(); }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count_noexcept() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex /*index*/) const override { return true; }

  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count_noexcept());
  }
  void setCurrentDevice(c10::DeviceIndex index) const override {
    set_current_device(index);
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const c10::DeviceIndex old = current_device();
    if (index >= 0 && index != old) set_current_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    const c10::DeviceIndex old = current_device();
    if (index >= 0 && index < device_count_noexcept()) g_current_device = index;
    return old;
  }

  const at::Generator &getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    if (index < 0) index = current_device();
    check_index(index);
    tt_generator *g = nullptr;
    check(tt_generator_create(runtime(), c10::default_rng_seed_val, &g),
          "tpu generator");
    return at::make_generator<TpuGenerator>(index, g, /*owned=*/true);
  }

  at::Device getDeviceFromPtr(void * /*data*/) const override {
    // Data pointers are storage handles, possibly offset into by views.
    return at::Device(c10::DeviceType::PrivateUse1, current_device());
  }
  bool isPinnedPtr(const void * /*data*/) const override { return false; }
  // Host memory needs no pinning for PJRT transfers: plain CPU memory.
  at::Allocator *getPinnedMemoryAllocator() const override {
    return c10::GetCPUAllocator();
  }

  // UntypedStorage.resize_ on a tpu storage.
  void resizePrivateUse1Bytes(const c10::Storage &storage,
                              size_t nbytes) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), nbytes);
  }
};

const bool g_hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new TpuHooks());
  return true;
}();

}  // namespace

}  // namespace torchtpu
