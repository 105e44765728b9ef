// fallback.cpp — the one boxed kernel behind every "tpu" op without an
// explicit kernel. It describes the call to the core (op id, arguments as
// tt_values, where each result goes), runs it, and turns fresh results into
// tensors. Ops the core has no lowering for run on the CPU through ATen's
// cpu_fallback: counted, warned about once per op, or refused in "error" mode.
//
// Per operator, the schema is read once: the core's op id, how each argument
// is described, where each return comes from.
//
// Leaves out: any knowledge of particular ops, but for the backend stub of
// scaled_dot_product_attention at the end (PyTorch asks devices for one).
#include "shim.h"

#include <cstring>

#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace torchtpu {

// --- fallback mode -------------------------------------------------------------

namespace {
std::atomic<int> g_fallback_mode{static_cast<int>(FallbackMode::kWarn)};
}  // namespace

FallbackMode fallback_mode() { return static_cast<FallbackMode>(g_fallback_mode.load()); }
void set_fallback_mode(FallbackMode mode) { g_fallback_mode.store(static_cast<int>(mode)); }

namespace {

// --- schema, read once per operator ---------------------------------------------

enum class ArgKind {
  kTensor,      // Tensor, Tensor?
  kTensorList,  // Tensor[]
  kOptTensorList,  // Tensor?[]: CPU index tensors move to the device, as on CUDA
  kScalar,      // Scalar, float
  kInt,         // int, SymInt
  kBool,
  kInts,        // int[], SymInt[]
  kFloats,      // float[]  -> list of scalars
  kBools,       // bool[]   -> list of bools
  kScalars,     // Scalar[] -> list of scalars
  kString,
  kDtype,
  kDevice,      // checked, passed as None
  kGenerator,
  kIgnored,     // Layout, MemoryFormat, Stream: passed as None
  kUnsupported,
};

enum class RetKind { kTensor, kTensorList, kBool, kInt, kFloat, kScalar };

struct ArgSpec {
  ArgKind kind;
  bool written;  // Tensor(a!)
  std::string name;
};

struct RetSpec {
  RetKind kind;
  int32_t alias_arg;  // the written argument this return is, or -1 if fresh
};

struct OpInfo {
  std::string name;  // "aten::add.Tensor"
  int32_t id = -1;   // core op id; -1: run on the CPU
  std::vector<ArgSpec> args;
  std::vector<RetSpec> rets;
  // Read off the schema once, so that a call builds no text and allocates
  // only for the arguments it has.
  const struct OverlapRule *overlap = nullptr;  // how written tensors are checked; null: not
  const struct Alert *alert = nullptr;  // torch.use_deterministic_algorithms' alert, if any
  ResultLayout layout;  // how fresh results are laid out
  int32_t nlists = 0;           // arguments described as a list of values
  int32_t nints = 0;            // int[] arguments
  // The op may run with PyTorch's CPU kernel while its program compiles
  // (TT_RUN_ON_HOST): an aten op with a CPU kernel, tensors in, no device
  // argument (a factory's result must be made where it asks).
  bool host_ok = false;
  const struct UnmarkedWrites *unmarked = nullptr;  // arguments written unannounced
};

const struct OverlapRule *overlap_rule(const std::string &name);
const struct Alert *alert_of(const std::string &name);

c10::TypePtr unwrap_optional(const c10::TypePtr &t) {
  if (t->kind() == c10::TypeKind::OptionalType) {
    return t->castRaw<c10::OptionalType>()->getElementType();
  }
  return t;
}

ArgKind classify(const c10::TypePtr &type) {
  const c10::TypePtr t = unwrap_optional(type);
  switch (t->kind()) {
    case c10::TypeKind::TensorType: return ArgKind::kTensor;
    case c10::TypeKind::NumberType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::SymFloatType: return ArgKind::kScalar;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: return ArgKind::kInt;
    case c10::TypeKind::BoolType:
    case c10::TypeKind::SymBoolType: return ArgKind::kBool;
    case c10::TypeKind::StringType: return ArgKind::kString;
    case c10::TypeKind::ScalarTypeType: return ArgKind::kDtype;
    case c10::TypeKind::DeviceObjType: return ArgKind::kDevice;
    case c10::TypeKind::GeneratorType: return ArgKind::kGenerator;
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::MemoryFormatType:
    case c10::TypeKind::StreamObjType: return ArgKind::kIgnored;
    case c10::TypeKind::ListType: {
      const c10::TypePtr &elem = t->castRaw<c10::ListType>()->getElementType();
      switch (elem->kind()) {
        case c10::TypeKind::TensorType: return ArgKind::kTensorList;
        case c10::TypeKind::OptionalType:
          return unwrap_optional(elem)->kind() == c10::TypeKind::TensorType
                     ? ArgKind::kOptTensorList
                     : ArgKind::kUnsupported;
        case c10::TypeKind::IntType:
        case c10::TypeKind::SymIntType: return ArgKind::kInts;
        case c10::TypeKind::FloatType: return ArgKind::kFloats;
        case c10::TypeKind::BoolType: return ArgKind::kBools;
        case c10::TypeKind::NumberType: return ArgKind::kScalars;
        default: return ArgKind::kUnsupported;
      }
    }
    default: return ArgKind::kUnsupported;
  }
}

// False when the return type is one the core cannot produce.
bool classify_return(const c10::TypePtr &t, RetKind *out) {
  switch (t->kind()) {
    case c10::TypeKind::TensorType: *out = RetKind::kTensor; return true;
    case c10::TypeKind::BoolType: *out = RetKind::kBool; return true;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: *out = RetKind::kInt; return true;
    case c10::TypeKind::FloatType: *out = RetKind::kFloat; return true;
    case c10::TypeKind::NumberType: *out = RetKind::kScalar; return true;
    case c10::TypeKind::ListType:
      if (t->castRaw<c10::ListType>()->getElementType()->kind() ==
          c10::TypeKind::TensorType) {
        *out = RetKind::kTensorList;
        return true;
      }
      return false;
    default: return false;
  }
}

std::unique_ptr<OpInfo> read_schema(const c10::FunctionSchema &schema) {
  auto info = std::make_unique<OpInfo>();
  info->name = schema.name();
  if (!schema.overload_name().empty()) info->name += "." + schema.overload_name();
  bool supported = !schema.is_vararg() && !schema.is_varret();

  const auto &args = schema.arguments();
  for (const auto &a : args) {
    const c10::AliasInfo *alias = a.alias_info();
    // real_type(), not type(): the latter shows ScalarType, Layout and
    // MemoryFormat as int (Optional[ScalarType] as Optional[int]), so a
    // dtype= argument would reach the core as a plain integer and be ignored.
    ArgSpec spec{classify(a.real_type()), alias != nullptr && alias->isWrite(), a.name()};
    if (spec.kind == ArgKind::kUnsupported) supported = false;
    info->args.push_back(spec);
  }
  for (const auto &r : schema.returns()) {
    RetSpec spec{RetKind::kTensor, -1};
    if (!classify_return(r.type(), &spec.kind)) supported = false;
    const c10::AliasInfo *alias = r.alias_info();
    if (alias != nullptr) {
      // A view (non-written alias) cannot be a fresh result: leave to the CPU.
      if (!alias->isWrite()) supported = false;
      for (size_t i = 0; i < args.size() && spec.alias_arg < 0; i++) {
        const c10::AliasInfo *aa = args[i].alias_info();
        if (aa != nullptr && aa->isWrite() && aa->beforeSets() == alias->beforeSets()) {
          spec.alias_arg = static_cast<int32_t>(i);
        }
      }
      if (spec.alias_arg < 0) supported = false;
    }
    info->rets.push_back(spec);
  }
  info->id = supported ? tt_op_lookup(info->name.c_str()) : -1;
  bool written = false;
  for (const ArgSpec &a : info->args) {
    written = written || a.written;
    switch (a.kind) {
      case ArgKind::kTensorList:
      case ArgKind::kOptTensorList:
      case ArgKind::kFloats:
      case ArgKind::kBools:
      case ArgKind::kScalars: info->nlists++; break;
      case ArgKind::kInts: info->nints++; break;
      default: break;
    }
  }
  if (written) info->overlap = overlap_rule(info->name);
  info->alert = alert_of(info->name);
  return info;
}

// Ops that write arguments their schema does not mark written, and which:
// native_batch_norm updates running_mean and running_var (typed `Tensor?`)
// in training. The host tier copies them back; PyTorch's cpu_fallback would
// not. -1: the op is never run on the host.
struct UnmarkedWrites {
  const char *name;
  int args[2];
};
const UnmarkedWrites *unmarked_writes(const std::string &name) {
  static const UnmarkedWrites kOps[] = {
      {"aten::native_batch_norm", {3, 4}},   {"aten::_batch_norm_impl_index", {-1, -1}},
      {"aten::cudnn_batch_norm", {-1, -1}},  {"aten::miopen_batch_norm", {-1, -1}},
      {"aten::_fused_moving_avg_obs_fq_helper", {-1, -1}}};
  for (const UnmarkedWrites &op : kOps) {
    const size_t n = strlen(op.name);
    if (name.compare(0, n, op.name) == 0 && (name.size() == n || name[n] == '.')) return &op;
  }
  return nullptr;
}

const OpInfo &op_info(const c10::OperatorHandle &op) {
  static std::mutex mu;
  static std::unordered_map<const c10::FunctionSchema *, std::unique_ptr<OpInfo>> cache;
  const c10::FunctionSchema *key = &op.schema();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  auto info = read_schema(*key);
  info->layout = result_layout(op, info->name);
  info->unmarked = unmarked_writes(info->name);
  info->host_ok = info->id >= 0 && info->name.rfind("aten::", 0) == 0 &&
                  !(info->unmarked && info->unmarked->args[0] < 0) &&
                  (op.hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
                   op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd));
  // Random ops (a Generator argument; native_dropout draws from the default
  // one) take their numbers from the device's generator: the CPU's would
  // give others for the same seed. The core lowers a cold signature only
  // at its second call, so it is the shim that says so.
  if (info->name.rfind("aten::native_dropout", 0) == 0 &&
      info->name.rfind("aten::native_dropout_backward", 0) != 0)
    info->host_ok = false;
  for (const auto &a : key->arguments()) {
    const c10::TypePtr t = unwrap_optional(a.real_type());
    if (t->kind() == c10::TypeKind::DeviceObjType || t->kind() == c10::TypeKind::GeneratorType)
      info->host_ok = false;
  }
  const OpInfo &ref = *info;
  cache.emplace(key, std::move(info));
  return ref;
}

// --- arguments -> tt_values -----------------------------------------------------

std::string shape_str(const at::Tensor &t) {
  std::ostringstream os;
  os << "[";
  for (int64_t i = 0; i < t.dim(); i++) os << (i ? ", " : "") << t.size(i);
  os << "]";
  return os.str();
}


tt_scalar scalar_from(const c10::Scalar &s, const std::string &what) {
  tt_scalar out{};
  out.wrapped = true;
  if (s.isBoolean()) {
    out.dtype = TT_BOOL;
    out.i = s.toBool() ? 1 : 0;
    out.f = static_cast<double>(out.i);
  } else if (s.isIntegral(/*includeBool=*/false)) {
    out.dtype = TT_I64;
    out.i = s.toLong();
    out.f = static_cast<double>(out.i);
  } else if (s.isFloatingPoint()) {
    out.dtype = TT_F64;
    out.f = s.toDouble();
    // Saturating: converting NaN, inf or a double past int64's range is
    // undefined behaviour in C++.
    out.i = std::isnan(out.f) ? 0
            : out.f >= 9.2233720368547758e18 ? INT64_MAX
            : out.f <= -9.2233720368547758e18 ? INT64_MIN
            : static_cast<int64_t>(out.f);
  } else {
    // A Python complex: the core runs it on the CPU unless the op's rule
    // takes complex values.
    const c10::complex<double> z = s.toComplexDouble();
    out.dtype = TT_C128;
    out.f = z.real();
    out.im = z.imag();
  }
  (void)what;
  return out;
}

// A 0-dim CPU tensor: a runtime scalar of its own dtype.
tt_scalar scalar_from_tensor(const at::Tensor &t, const std::string &what) {
  tt_scalar out = scalar_from(t.item(), what);
  out.dtype = to_tt_dtype_checked(t.scalar_type(), what);
  out.wrapped = t.unsafeGetTensorImpl()->is_wrapped_number();
  return out;
}

// Everything the tt_values of one call point into, kept alive for the call.
// Inline room for a typical op's arguments: a call allocates nothing more
// unless it has list arguments.
struct Call {
  const OpInfo &info;
  c10::SmallVector<c10::IValue, 8> args;  // the popped stack arguments
  int32_t device = 0;
  c10::SmallVector<tt_value, 8> values;
  std::vector<std::vector<int64_t>> ints;
  std::vector<std::vector<tt_value>> lists;
  std::vector<at::Tensor> keep;  // tensors made here (moved index tensors)
  c10::SmallVector<tt_dest, 4> dests;
  bool host_ok;  // info.host_ok, unless the CPU kernel refused this call

  explicit Call(const OpInfo &i) : info(i), host_ok(i.host_ok) {}
};

[[noreturn]] void wrong_device(const Call &c, size_t i, const at::Tensor &t) {
  // A host tensor indexed with tpu indices (x[idx], x[idx] = v): the check
  // ATen's indexing makes, in its words.
  bool indexed = false;
  for (const ArgSpec &a : c.info.args) indexed = indexed || a.name == "indices";
  TORCH_CHECK(!(indexed && c.info.args[i].name == "self"), "indices should be either on ",
              c10::kCPU, " or on the same device as the indexed tensor (", t.device(), ")");
  // PyTorch's text (its codegen'd device check) first: tests match it.
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but got ",
              c.info.args[i].name, " is on ", t.device(), ", different from other tensors on tpu:",
              c.device, " (when checking argument in method ", c.info.name, "; its shape ",
              shape_str(t), ")");
}

// The device of the first tpu tensor among args (lists included).
c10::optional<c10::Device> first_tpu_device(c10::ArrayRef<c10::IValue> args) {
  for (const auto &iv : args) {
    if (iv.isTensor() && is_tpu(iv.toTensor())) return iv.toTensor().device();
    if (iv.isList()) {
      for (const c10::IValue &e : iv.toListRef()) {
        if (e.isTensor() && is_tpu(e.toTensor())) return e.toTensor().device();
      }
    }
  }
  return c10::nullopt;
}

// The device the op runs on: its first tpu tensor, else a Device argument,
// else the current device.
int32_t call_device(const Call &c, const c10::FunctionSchema &schema) {
  if (const auto d = first_tpu_device(c.args)) return d->index();
  for (size_t i = 0; i < c.args.size(); i++) {
    const c10::IValue &iv = c.args[i];
    if (!iv.isDevice()) continue;
    const c10::Device d = iv.toDevice();
    TORCH_CHECK(d.type() == c10::DeviceType::PrivateUse1, c.info.name,
                ": argument '", schema.arguments()[i].name(), "' asks for device ",
                d, " in a tpu op");
    if (d.has_index()) return d.index();
  }
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
}

tt_value tensor_value(Call &c, size_t i, const at::Tensor &t, bool in_index_list) {
  tt_value v{};
  if (!t.defined()) {
    v.kind = TT_VALUE_NONE;
    return v;
  }
  if (is_tpu(t)) {
    if (t.device().index() != c.device) wrong_device(c, i, t);
    v.kind = TT_VALUE_TENSOR;
    if (t.is_conj() || t.is_neg()) {
      // A lazy conj/neg view (ops PyTorch lets through with the bit: mm,
      // clone, ...): the core reads bytes, so read its resolved values.
      c.keep.push_back(t.resolve_conj().resolve_neg());
      v.u.tensor = describe(c.keep.back(), c.info.name);
      return v;
    }
    v.u.tensor = describe(t, c.info.name);
    return v;
  }
  if (t.device().is_cpu() && in_index_list) {
    // Indices may live on the CPU, as with CUDA: move them over.
    c.keep.push_back(t.to(c10::Device(c10::DeviceType::PrivateUse1,
                                      static_cast<c10::DeviceIndex>(c.device))));
    v.kind = TT_VALUE_TENSOR;
    v.u.tensor = describe(c.keep.back(), c.info.name);
    return v;
  }
  if (t.device().is_cpu() && t.dim() == 0 && !in_index_list) {
    v.kind = TT_VALUE_SCALAR;
    v.u.scalar = scalar_from_tensor(t, c.info.name);
    return v;
  }
  wrong_device(c, i, t);
}

tt_value list_value(Call &c, std::vector<tt_value> items) {
  tt_value v{};
  v.kind = TT_VALUE_LIST;
  c.lists.push_back(std::move(items));
  v.u.list.items = c.lists.back().data();
  v.u.list.n = static_cast<int32_t>(c.lists.back().size());
  return v;
}

tt_value arg_value(Call &c, size_t i) {
  const c10::IValue &iv = c.args[i];
  const ArgKind kind = c.info.args[i].kind;
  tt_value v{};
  v.kind = TT_VALUE_NONE;
  if (iv.isNone()) return v;
  switch (kind) {
    case ArgKind::kTensor:
      return tensor_value(c, i, iv.toTensor(), /*in_index_list=*/false);
    case ArgKind::kTensorList:
    case ArgKind::kOptTensorList: {
      const bool index_list = kind == ArgKind::kOptTensorList;
      std::vector<tt_value> items;
      if (iv.isTensorList()) {
        for (const at::Tensor &t : iv.toTensorVector()) {
          items.push_back(tensor_value(c, i, t, index_list));
        }
      } else {
        for (const c10::IValue &e : iv.toListRef()) {
          items.push_back(e.isNone() ? tt_value{}
                                     : tensor_value(c, i, e.toTensor(), index_list));
        }
      }
      return list_value(c, std::move(items));
    }
    case ArgKind::kScalar:
      v.kind = TT_VALUE_SCALAR;
      v.u.scalar = scalar_from(iv.toScalar(), c.info.name);
      return v;
    case ArgKind::kInt:
      v.kind = TT_VALUE_INT;
      v.u.i = iv.isSymInt() ? iv.toSymInt().guard_int(__FILE__, __LINE__) : iv.toInt();
      return v;
    case ArgKind::kBool:
      v.kind = TT_VALUE_BOOL;
      v.u.b = iv.isSymBool() ? iv.toSymBool().guard_bool(__FILE__, __LINE__) : iv.toBool();
      return v;
    case ArgKind::kInts: {
      std::vector<int64_t> data;
      if (iv.isIntList()) {
        data = iv.toIntVector();
      } else {
        for (const c10::IValue &e : iv.toListRef()) {
          data.push_back(e.isSymInt() ? e.toSymInt().guard_int(__FILE__, __LINE__)
                                      : e.toInt());
        }
      }
      c.ints.push_back(std::move(data));
      v.kind = TT_VALUE_INTS;
      v.u.ints.data = c.ints.back().data();
      v.u.ints.n = static_cast<int32_t>(c.ints.back().size());
      return v;
    }
    case ArgKind::kFloats:
    case ArgKind::kScalars: {
      std::vector<tt_value> items;
      for (const c10::IValue &e : iv.toListRef()) {
        tt_value s{};
        s.kind = TT_VALUE_SCALAR;
        s.u.scalar = scalar_from(e.toScalar(), c.info.name);
        items.push_back(s);
      }
      return list_value(c, std::move(items));
    }
    case ArgKind::kBools: {
      std::vector<tt_value> items;
      for (const c10::IValue &e : iv.toListRef()) {
        tt_value b{};
        b.kind = TT_VALUE_BOOL;
        b.u.b = e.toBool();
        items.push_back(b);
      }
      return list_value(c, std::move(items));
    }
    case ArgKind::kString:
      v.kind = TT_VALUE_STRING;
      v.u.str = iv.toStringRef().c_str();  // lives in c.args
      return v;
    case ArgKind::kDtype:
      v.kind = TT_VALUE_DTYPE;
      v.u.dtype = to_tt_dtype_checked(static_cast<c10::ScalarType>(iv.toInt()),
                                      c.info.name);
      return v;
    case ArgKind::kGenerator:
      v.kind = TT_VALUE_GENERATOR;
      v.u.gen = generator_handle(iv.toGenerator(), c.info.name);
      return v;
    case ArgKind::kDevice:
    case ArgKind::kIgnored:
    case ArgKind::kUnsupported:
      return v;
  }
  return v;
}

void build_values(Call &c) {
  c.values.clear();
  c.ints.clear();
  c.lists.clear();
  // Reserve so that pointers into these vectors' elements stay put (one
  // element per argument of that kind at most).
  if (c.info.nints) c.ints.reserve(c.info.nints);
  if (c.info.nlists) c.lists.reserve(c.info.nlists);
  c.values.reserve(c.args.size());
  for (size_t i = 0; i < c.args.size(); i++) c.values.push_back(arg_value(c, i));
}

// An upper bound on the length of a fresh Tensor[] result.
int32_t list_bound(const Call &c) {
  int64_t bound = 1;
  for (const tt_value &v : c.values) {
    if (v.kind == TT_VALUE_LIST) bound = std::max<int64_t>(bound, v.u.list.n);
    if (v.kind == TT_VALUE_INTS) bound = std::max<int64_t>(bound, v.u.ints.n + 1);
    if (v.kind == TT_VALUE_TENSOR) {
      for (int32_t d = 0; d < v.u.tensor.ndim; d++) {
        bound = std::max<int64_t>(bound, v.u.tensor.sizes[d]);
      }
    }
  }
  return static_cast<int32_t>(std::min<int64_t>(bound, 1 << 16));
}

void push_written_arg(Call &c, int32_t arg) {
  const c10::IValue &iv = c.args[arg];
  if (iv.isTensor()) {
    if (iv.toTensor().defined()) c.dests.push_back({arg, -1});
  } else if (iv.isTensorList()) {
    const int32_t n = static_cast<int32_t>(iv.toTensorList().size());
    for (int32_t k = 0; k < n; k++) c.dests.push_back({arg, k});
  }
}

void build_dests(Call &c) {
  c.dests.clear();
  if (c.info.rets.empty()) {
    for (size_t i = 0; i < c.info.args.size(); i++) {
      if (c.info.args[i].written) push_written_arg(c, static_cast<int32_t>(i));
    }
    return;
  }
  for (const RetSpec &r : c.info.rets) {
    if (r.alias_arg >= 0) {
      push_written_arg(c, r.alias_arg);
    } else if (r.kind == RetKind::kTensorList) {
      const int32_t n = list_bound(c);
      for (int32_t k = 0; k < n; k++) c.dests.push_back({-1, -1});
    } else {
      c.dests.push_back({-1, -1});
    }
  }
}

// --- results -> stack -----------------------------------------------------------

c10::IValue scalar_return(const at::Tensor &t, RetKind kind) {
  const c10::Scalar s = t.item();
  switch (kind) {
    case RetKind::kBool: return c10::IValue(s.toBool());
    case RetKind::kInt: return c10::IValue(s.toLong());
    case RetKind::kFloat: return c10::IValue(s.toDouble());
    default: return c10::IValue(s);
  }
}

using Fresh = c10::SmallVector<at::Tensor, 4>;

void push_returns(const Call &c, Fresh fresh, torch::jit::Stack *stack) {
  size_t fixed = 0;  // fresh results not part of a Tensor[] return
  for (const RetSpec &r : c.info.rets) {
    if (r.alias_arg < 0 && r.kind != RetKind::kTensorList) fixed++;
  }
  TORCH_CHECK(fresh.size() >= fixed, c.info.name, ": the core returned ",
              fresh.size(), " results, expected at least ", fixed);
  size_t next = 0;
  for (const RetSpec &r : c.info.rets) {
    if (r.alias_arg >= 0) {
      stack->push_back(c.args[r.alias_arg]);
    } else if (r.kind == RetKind::kTensorList) {
      const size_t n = fresh.size() - fixed;
      std::vector<at::Tensor> list(fresh.begin() + next, fresh.begin() + next + n);
      next += n;
      fixed += n;  // consumed
      stack->push_back(c10::IValue(std::move(list)));
    } else if (r.kind == RetKind::kTensor) {
      stack->push_back(c10::IValue(fresh[next++]));
    } else {
      stack->push_back(scalar_return(fresh[next++], r.kind));
    }
  }
}

// Takes ownership of every fresh result; a result that cannot be wrapped
// (and all after it) is destroyed rather than leaked.
Fresh wrap_results(tt_op_result *results, int32_t n) {
  Fresh out;
  out.reserve(n);
  int32_t i = 0;
  try {
    for (; i < n; i++) {
      const c10::ScalarType dtype = to_scalar_type(results[i].dtype);
      tt_storage *s = results[i].storage;
      results[i].storage = nullptr;
      out.push_back(wrap_storage(s, dtype, c10::IntArrayRef(results[i].sizes, results[i].ndim)));
    }
  } catch (...) {
    for (; i < n; i++) tt_storage_destroy(results[i].storage);
    throw;
  }
  return out;
}

// --- overlapping writes ----------------------------------------------------------
//
// PyTorch's CPU and CUDA kernels refuse to write into a tensor whose elements
// share memory (an expanded view) or that partly overlaps one of the inputs:
// the result would depend on the order of the writes. Here a write is a
// functional update of the storage that would silently keep one of the
// duplicates, so the same calls are refused with PyTorch's messages, before
// the core sees them. Ops whose ATen kernels skip the check (fills,
// masked/indexed fills, the triangle ops, reductions into out=) keep
// PyTorch's leniency.

// Most ops refuse an expanded written tensor and one that partly overlaps
// an input (TensorIterator's checks). The indexed writes (index_add_,
// scatter_, put_, index_put_, ...) and the gathers into out= (index_select,
// take, cat, ...) refuse any alias of their inputs, a full one too
// (assert_no_overlap); index_fill_, index_put_ and masked_fill_ only warn
// about an expanded self. Argument lists name the inputs checked ("*": all).
enum class Internal : uint8_t { kRefuse, kWarn, kSkip };
struct OverlapRule {
  const char *op;       // base name, its trailing '_' dropped
  Internal internal;    // a written tensor whose elements share memory
  const char *warning;  // kWarn's text (PyTorch's)
  const char *full;     // inputs that may not alias the written tensor at all
  const char *partial;  // inputs that may not partly overlap it
};

#define TT_EXPANDED_WARNING(op, example)                                                  \
  "Use of " op " on expanded tensors is deprecated. Please clone() the tensor before "   \
  "performing this operation. This also applies to advanced indexing e.g. " example

constexpr OverlapRule kDefaultOverlap = {"", Internal::kRefuse, nullptr, "", "*"};
constexpr OverlapRule kLenientOverlap = {"", Internal::kSkip, nullptr, "", ""};
constexpr OverlapRule kOverlapRules[] = {
    {"aten::index_add", Internal::kRefuse, nullptr, "*", ""},
    {"aten::index_copy", Internal::kRefuse, nullptr, "*", ""},
    {"aten::index_reduce", Internal::kRefuse, nullptr, "*", ""},
    {"aten::put", Internal::kRefuse, nullptr, "*", ""},
    {"aten::scatter", Internal::kRefuse, nullptr, "*", ""},
    {"aten::scatter_add", Internal::kRefuse, nullptr, "*", ""},
    {"aten::scatter_reduce", Internal::kRefuse, nullptr, "*", ""},
    {"aten::index_select", Internal::kRefuse, nullptr, "*", ""},
    {"aten::take", Internal::kRefuse, nullptr, "*", ""},
    {"aten::masked_select", Internal::kRefuse, nullptr, "*", ""},
    {"aten::cat", Internal::kRefuse, nullptr, "*", ""},
    {"aten::gather", Internal::kRefuse, nullptr, "self", "index"},
    {"aten::masked_scatter", Internal::kRefuse, nullptr, "", ""},
    {"aten::index_fill", Internal::kWarn,
     TT_EXPANDED_WARNING("index_fill_", "tensor[mask] = scalar"), "index", ""},
    {"aten::index_put", Internal::kWarn,
     TT_EXPANDED_WARNING("index_put_", "tensor[indices] = tensor"), "*", ""},
    {"aten::_index_put_impl", Internal::kWarn,
     TT_EXPANDED_WARNING("index_put_", "tensor[indices] = tensor"), "*", ""},
    {"aten::masked_fill", Internal::kWarn,
     TT_EXPANDED_WARNING("masked_fill_", "tensor[mask] = scalar"), "", "mask"},
};
#undef TT_EXPANDED_WARNING

// An op's name without overload and in-place mark: "aten::add_.Tensor" ->
// "aten::add" (the tables below key on it).
std::string base_op(const std::string &name) {
  std::string base = name.substr(0, name.find('.'));
  if (!base.empty() && base.back() == '_') base.pop_back();
  return base;
}

// Ops whose ATen kernels check nothing: fills, the triangle ops, reductions
// into out=, threshold (idempotent, so duplicates all get the same value).
bool skips_overlap_check(const std::string &base) {
  static const char *const kLenient[] = {
      "aten::fill", "aten::zero", "aten::fill_diagonal", "aten::tril", "aten::triu",
      "aten::sum", "aten::mean", "aten::prod", "aten::amax", "aten::amin", "aten::max",
      "aten::min", "aten::aminmax", "aten::argmax", "aten::argmin", "aten::norm",
      "aten::linalg_vector_norm", "aten::std", "aten::var", "aten::logsumexp",
      "aten::any", "aten::all", "aten::nansum", "aten::set", "aten::resize",
      "aten::threshold",
  };
  for (const char *l : kLenient) {
    if (base == l) return true;
  }
  return false;
}

const OverlapRule *overlap_rule(const std::string &name) {
  const std::string base = base_op(name);
  if (skips_overlap_check(base)) return &kLenientOverlap;
  for (const OverlapRule &r : kOverlapRules) {
    if (base == r.op) return &r;
  }
  return &kDefaultOverlap;
}

// An op of kOverlapRules: its ATen kernel checks overlaps whatever runs it.
bool checks_own_overlap(const OpInfo &info) {
  return info.overlap != nullptr && info.overlap != &kDefaultOverlap &&
         info.overlap != &kLenientOverlap;
}

// True when `list` ("a,b", "*") names the argument `name`.
bool names_arg(const char *list, const std::string &name) {
  if (list[0] == '\0') return false;
  if (std::strcmp(list, "*") == 0) return true;
  for (const char *p = list; *p != '\0';) {  // no allocation: this runs per call
    const char *end = std::strchr(p, ',');
    const size_t len = end != nullptr ? static_cast<size_t>(end - p) : std::strlen(p);
    if (name.size() == len && name.compare(0, len, p, len) == 0) return true;
    p += len + (end != nullptr ? 1 : 0);
  }
  return false;
}

void collect_tensors(const c10::IValue &iv, std::vector<at::Tensor> *out) {
  if (iv.isTensor()) {
    if (is_tpu(iv.toTensor())) out->push_back(iv.toTensor());
  } else if (iv.isList()) {
    for (const c10::IValue &e : iv.toListRef()) {
      if (e.isTensor() && is_tpu(e.toTensor())) out->push_back(e.toTensor());
    }
  }
}

void check_overlap(const Call &c) {
  const OverlapRule *rule = c.info.overlap;
  if (rule == nullptr) return;
  std::vector<at::Tensor> written;
  for (size_t i = 0; i < c.args.size(); i++) {
    if (c.info.args[i].written) collect_tensors(c.args[i], &written);
  }
  static const char *const kInput =
      "unsupported operation: some elements of the input tensor and the written-to "
      "tensor refer to a single memory location. Please clone() the tensor before "
      "performing the operation. (";
  for (const at::Tensor &w : written) {
    if (w.numel() > 1 && rule->internal != Internal::kSkip &&
        at::has_internal_overlap(w) == at::MemOverlap::Yes) {
      TORCH_CHECK(rule->internal == Internal::kWarn,
                  "unsupported operation: more than one element of the written-to "
                  "tensor refers to a single memory location. Please clone() the "
                  "tensor before performing the operation. (", c.info.name, ")");
      TORCH_WARN(rule->warning);
    }
    for (size_t i = 0; i < c.args.size(); i++) {
      const ArgSpec &a = c.info.args[i];
      const bool full = names_arg(rule->full, a.name);
      if (a.written || (!full && !names_arg(rule->partial, a.name))) continue;
      std::vector<at::Tensor> read;
      collect_tensors(c.args[i], &read);
      for (const at::Tensor &r : read) {
        if (!full && w.numel() <= 1) continue;
        const at::MemOverlapStatus st = at::get_overlap_status(w, r);
        TORCH_CHECK(st != at::MemOverlapStatus::Partial &&
                    !(full && st == at::MemOverlapStatus::Full), kInput, c.info.name, ")");
      }
    }
  }
}

// --- nondeterministic alerts -----------------------------------------------------
//
// Under torch.use_deterministic_algorithms(True), ATen raises (or warns) for
// these ops on every device, in code the core's rules stand in for: raise the
// same way. CUDA-only alerts are not repeated (the rules are deterministic).

struct Alert {
  const char *op;      // base name, its trailing '_' dropped
  const char *caller;  // the name PyTorch's message gives
  const char *unless;  // a bool argument that, when true, makes it deterministic
};

constexpr Alert kAlerts[] = {
    {"aten::put", "put_", "accumulate"},
    {"aten::max_unpool2d", "max_unpooling2d_forward_out", nullptr},
    {"aten::max_unpool3d", "max_unpooling3d_forward_out", nullptr},
};

const Alert *alert_of(const std::string &name) {
  const std::string base = base_op(name);
  for (const Alert &a : kAlerts) {
    if (base == a.op) return &a;
  }
  return nullptr;
}

void alert_nondeterministic(const Call &c) {
  const Alert *a = c.info.alert;
  if (a == nullptr || !at::globalContext().deterministicAlgorithms()) return;
  for (size_t i = 0; a->unless != nullptr && i < c.args.size(); i++) {
    if (c.info.args[i].name == a->unless && c.args[i].isBool() && c.args[i].toBool()) return;
  }
  at::globalContext().alertNotDeterministic(a->caller);
}

// A written tensor with a lazy conj/neg bit: the core would write values
// where the view's bytes hold their conjugate / negation.
bool writes_lazy_bits(const Call &c) {
  for (size_t i = 0; i < c.args.size(); i++) {
    if (!c.info.args[i].written) continue;
    std::vector<at::Tensor> ts;
    collect_tensors(c.args[i], &ts);
    for (const at::Tensor &t : ts) {
      if (t.is_conj() || t.is_neg()) return true;
    }
  }
  return false;
}

// --- running -------------------------------------------------------------------

tt_op_call make_call(const Call &c) {
  tt_op_call call{};
  call.op = c.info.id;
  call.device = c.device;
  call.default_dtype = to_tt_dtype(c10::get_default_dtype_as_scalartype());
  call.args = c.values.data();
  call.nargs = static_cast<int32_t>(c.values.size());
  call.dests = c.dests.data();
  call.ndests = static_cast<int32_t>(c.dests.size());
  call.host_ok = c.host_ok;
  return call;
}

// PyTorch's range factories resize out= themselves, only when its element
// count differs (an out of the right count keeps its shape), without
// resize_output's deprecation warning; arange warns in its own words.
// True when `name` is one of them (then `t` is handled).
bool resize_range_out(const std::string &name, const at::Tensor &t, c10::IntArrayRef sizes) {
  static const char *const kRanges[] = {"aten::arange.", "aten::linspace.", "aten::logspace.",
                                        "aten::range."};
  bool range = false;
  for (const char *prefix : kRanges) range = range || name.rfind(prefix, 0) == 0;
  if (!range || sizes.size() != 1) return range;
  const int64_t size = sizes[0];
  if (t.numel() == size) return true;
  if (t.numel() > 0 && name.rfind("aten::arange.", 0) == 0) {
    TORCH_WARN("The number of elements in the out tensor of shape ", t.sizes(), " is ",
               t.numel(), " which does not match the computed number of elements ", size,
               ". Note that this may occur as a result of rounding error. The out tensor "
               "will be resized to a tensor of shape (", size, ",).");
  }
  t.resize_(sizes);
  return true;
}

// TensorIterator resizes an out= tensor only when it is not also one of
// the op's inputs (`x.ldexp_(y)` is mul.out(x, 2**y, out=x)): such an out
// of another shape than the broadcast one raises, as on the CPU.
void check_read_write_out(const Call &c, const at::Tensor &out, c10::IntArrayRef sizes) {
  if (c.info.layout.kind != LayoutKind::kPointwise || out.sizes() == sizes) return;
  for (size_t i = 0; i < c.args.size(); i++) {
    const c10::IValue &a = c.args[i];
    TORCH_CHECK(c.info.args[i].written || !a.isTensor() || !a.toTensor().is_same(out),
                "output with shape ", out.sizes(), " doesn't match the broadcast shape ", sizes);
  }
}

// out= tensors of the wrong shape: resize them to what the core infers.
void resize_outs(Call &c) {
  const tt_op_call call = make_call(c);
  std::vector<tt_op_result> shapes(std::max<size_t>(c.dests.size(), 1));
  int32_t n = 0;
  check(tt_op_infer(runtime(), &call, shapes.data(),
                    static_cast<int32_t>(shapes.size()), &n),
        c.info.name.c_str());
  // A resized out= takes the layout a fresh result would have, as PyTorch's
  // structured kernels restride it (the inputs decide, not the outs).
  c10::SmallVector<c10::IValue, 8> inputs;
  for (size_t i = 0; i < c.args.size(); i++) {
    if (!c.info.args[i].written) inputs.push_back(c.args[i]);
  }
  for (int32_t k = 0; k < n && k < static_cast<int32_t>(c.dests.size()); k++) {
    const tt_dest d = c.dests[k];
    if (d.arg < 0) continue;
    const c10::IValue &iv = c.args[d.arg];
    at::Tensor t = d.item < 0 ? iv.toTensor() : iv.toTensorList().get(d.item);
    const c10::IntArrayRef sizes(shapes[k].sizes, shapes[k].ndim);
    if (resize_range_out(c.info.name, t, sizes)) continue;
    check_read_write_out(c, t, sizes);
    if (!at::native::resize_output(t, sizes)) continue;
    const auto strides = result_strides(c.info.layout, inputs, static_cast<size_t>(k), sizes);
    if (!strides.empty()) t.as_strided_(sizes, strides);
  }
}

}  // namespace

void note_cpu_fallback(const std::string &name, const std::string &why) {
  const FallbackMode mode = fallback_mode();
  if (mode == FallbackMode::kError) {
    TORCH_CHECK_NOT_IMPLEMENTED(
        false, name,
        " has no tpu lowering (set TORCHTPU_FALLBACK=warn to run it on the CPU)",
        why.empty() ? "" : ": ", why);
  }
  const bool first = tt_runtime_note_fallback(runtime(), name.c_str());
  if (first && mode == FallbackMode::kWarn) {
    TORCH_WARN(name, " has no tpu lowering: it runs on the CPU, copying its "
               "tensors to the host and back (set TORCHTPU_FALLBACK=silent to "
               "hide this warning, =error to raise instead)",
               why.empty() ? "" : ". Reason: ", why);
  }
}

namespace {

// A written tensor argument with a lazy conj/neg bit, swapped for a plain
// temporary while the CPU runs: PyTorch's cpu_fallback leaves such a view
// unwritten (linalg_solve_triangular(out=B.conj()) kept its zeros). copy_
// then writes the temporary's values through the view's bits.
struct LazyOut {
  size_t arg;
  at::Tensor view, temp;
};

std::vector<LazyOut> swap_lazy_outs(const OpInfo &info, torch::jit::Stack *stack,
                                    size_t nargs) {
  std::vector<LazyOut> lazy;
  for (size_t i = 0; i < nargs && i < info.args.size(); i++) {
    c10::IValue &iv = (*stack)[stack->size() - nargs + i];
    if (!info.args[i].written || !iv.isTensor()) continue;
    const at::Tensor &t = iv.toTensor();
    if (!t.defined() || !(t.is_conj() || t.is_neg())) continue;
    lazy.push_back({i, t, t.resolve_conj().resolve_neg()});
    iv = c10::IValue(lazy.back().temp);
  }
  return lazy;
}

void unswap_lazy_outs(const OpInfo &info, torch::jit::Stack *stack, std::vector<LazyOut> &lazy) {
  const size_t nrets = info.rets.size();
  for (LazyOut &l : lazy) {
    if (l.view.sizes() != l.temp.sizes()) l.view.resize_(l.temp.sizes());
    l.view.copy_(l.temp);
    for (size_t r = 0; r < nrets && r < stack->size(); r++) {
      if (info.rets[r].alias_arg == static_cast<int32_t>(l.arg))
        (*stack)[stack->size() - nrets + r] = c10::IValue(l.view);
    }
  }
}

// `host_tier`: a cold signature's call (TT_RUN_ON_HOST), neither counted
// nor warned about as a fallback.
void run_on_cpu(const OpInfo &info, const c10::OperatorHandle &op,
                torch::jit::Stack *stack, const std::string &why, bool host_tier = false) {
  if (!host_tier) note_cpu_fallback(info.name, why);
  // PyTorch's fallback moves results back to its first tensor argument's
  // device: a host scalar first (prims.mul(1e-5, x)) would leave them on the
  // CPU. An op on tpu tensors gives tpu results.
  const size_t nargs = op.schema().arguments().size();
  const c10::optional<c10::Device> device =
      first_tpu_device(c10::ArrayRef<c10::IValue>(*stack).slice(stack->size() - nargs));
  std::vector<LazyOut> lazy = swap_lazy_outs(info, stack, nargs);
  at::native::cpu_fallback(op, stack);
  if (!lazy.empty()) unswap_lazy_outs(info, stack, lazy);
  if (!device) return;
  const size_t nrets = op.schema().returns().size();
  for (size_t i = stack->size() - nrets; i < stack->size(); i++) {
    c10::IValue &iv = (*stack)[i];
    if (iv.isTensor() && iv.toTensor().defined() && iv.toTensor().device().is_cpu()) {
      iv = c10::IValue(iv.toTensor().to(*device));
    } else if (iv.isTensorList()) {
      std::vector<at::Tensor> list = iv.toTensorVector();
      bool moved = false;
      for (at::Tensor &t : list) {
        if (t.defined() && t.device().is_cpu()) t = t.to(*device), moved = true;
      }
      if (moved) iv = c10::IValue(std::move(list));
    }
  }
}

// --- the host tier --------------------------------------------------------------------
//
// A cold signature's call (TT_RUN_ON_HOST) runs with the op's CPU kernel on
// host views of its tpu tensors: each storage is read once, whole (a memcpy
// on the CPU plugin), and each tensor keeps its sizes, strides and offset
// over that copy, so a transposed weight or a sliced KV cache costs no
// gather (PyTorch's cpu_fallback makes every tensor dense first). Written
// arguments are copied back into their tpu views, fresh results go to the
// device.

struct HostViews {
  std::vector<std::pair<const c10::StorageImpl *, c10::Storage>> storages;

  c10::Storage storage_of(const at::Tensor &t) {
    const c10::StorageImpl *impl = t.storage().unsafeGetStorageImpl();
    for (const auto &[k, v] : storages)
      if (k == impl) return v;
    const int64_t nbytes = static_cast<int64_t>(t.storage().nbytes());
    at::Tensor bytes = at::empty({nbytes}, at::TensorOptions().dtype(at::kByte));
    if (nbytes > 0) {
      const c10::DeviceGuard guard(t.device());
      check(tt_storage_read_cached(runtime(), storage_handle(impl), bytes.mutable_data_ptr()),
            "copy to the host");
    }
    storages.emplace_back(impl, bytes.storage());
    return bytes.storage();
  }

  // Writes the host storage behind `host` back as the value of `tpu`'s
  // storage, kept on the host; false when the kernel moved or resized the
  // host tensor (the caller then copies it into its view).
  bool write_back(const at::Tensor &host, const at::Tensor &tpu) {
    const c10::StorageImpl *impl = tpu.storage().unsafeGetStorageImpl();
    if (host.sizes() != tpu.sizes() || host.strides() != tpu.strides() ||
        host.storage_offset() != tpu.storage_offset())
      return false;
    for (const auto &[k, v] : storages) {
      if (k != impl) continue;
      if (!host.storage().is_alias_of(v) || v.nbytes() != tpu.storage().nbytes()) return false;
      if (std::find(written.begin(), written.end(), impl) != written.end()) return true;
      const tt_dtype d = to_tt_dtype(tpu.scalar_type());
      const c10::DeviceGuard guard(tpu.device());
      check(tt_storage_write_host(runtime(), storage_handle(impl), d == TT_DTYPE_NONE ? TT_U8 : d,
                                  v.data()),
            "copy to tpu");
      written.push_back(impl);
      return true;
    }
    return false;
  }

  std::vector<const c10::StorageImpl *> written;

  at::Tensor view_of(const at::Tensor &t) {
    if (!t.defined() || !is_tpu(t)) return t;
    at::Tensor h = at::empty({0}, t.options().device(c10::kCPU));
    h.set_(storage_of(t), t.storage_offset(), t.sizes(), t.strides());
    return h;
  }

  c10::IValue of(const c10::IValue &iv) {
    if (iv.isTensor()) return view_of(iv.toTensor());
    if (iv.isTensorList()) {
      std::vector<at::Tensor> l = iv.toTensorVector();
      for (at::Tensor &t : l) t = view_of(t);
      return c10::IValue(l);
    }
    if (iv.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> l;
      for (const std::optional<at::Tensor> t : iv.toOptionalTensorList())
        l.push_back(t ? std::optional<at::Tensor>(view_of(*t)) : std::nullopt);
      return c10::IValue(l);
    }
    return iv;
  }
};

// Lazy conj/neg bits on a tpu tensor: left to cpu_fallback, which resolves them.
bool has_lazy_bits(const c10::IValue &iv) {
  const auto lazy = [](const at::Tensor &t) {
    return t.defined() && is_tpu(t) && (t.is_conj() || t.is_neg());
  };
  if (iv.isTensor()) return lazy(iv.toTensor());
  if (iv.isList())
    for (const c10::IValue &e : iv.toListRef())
      if (e.isTensor() && lazy(e.toTensor())) return true;
  return false;
}

// A fresh host result on the device, with its sizes and strides: its value
// stays on the host until a program reads it (tt_storage_write_host).
at::Tensor tensor_to_device(const at::Tensor &t, c10::Device device) {
  if (!t.defined() || !t.device().is_cpu()) return t;
  if (t.is_conj() || t.is_neg() || !t.is_non_overlapping_and_dense()) return t.to(device);
  at::Tensor d = at::empty_strided(t.sizes(), t.strides(), t.options().device(device));
  const tt_dtype dtype = to_tt_dtype(t.scalar_type());
  if (t.numel() == 0) return d;
  if (dtype == TT_DTYPE_NONE) {
    upload(d, t);
    return d;
  }
  // Dense and non-overlapping: its elements are the numel * itemsize bytes
  // from data_ptr, in the order d's strides give them.
  const c10::DeviceGuard guard(device);
  check(tt_storage_write_host(runtime(), storage_handle(d.storage().unsafeGetStorageImpl()),
                              dtype, t.const_data_ptr()),
        "copy to tpu");
  return d;
}

c10::IValue to_device(const c10::IValue &iv, c10::Device device) {
  if (iv.isTensor()) return c10::IValue(tensor_to_device(iv.toTensor(), device));
  if (iv.isTensorList()) {
    std::vector<at::Tensor> l = iv.toTensorVector();
    for (at::Tensor &t : l) t = tensor_to_device(t, device);
    return c10::IValue(l);
  }
  return iv;
}

// A written host argument back into its tpu original: its whole host
// storage becomes the storage's value (kept on the host), or, when the
// kernel resized or replaced it, copied into the view.
void copy_back(HostViews &views, const c10::IValue &host, const c10::IValue &tpu) {
  const auto back = [&](const at::Tensor &h, const at::Tensor &t) {
    if (!t.defined() || !is_tpu(t)) return;
    if (!views.write_back(h, t)) at::_copy_from_and_resize(h, t);
  };
  if (host.isTensor() && tpu.isTensor()) {
    back(host.toTensor(), tpu.toTensor());
  } else if (host.isTensorList() && tpu.isTensorList()) {
    const std::vector<at::Tensor> h = host.toTensorVector(), d = tpu.toTensorVector();
    for (size_t i = 0; i < h.size() && i < d.size(); i++) back(h[i], d[i]);
  }
}

// The CPU op that computes what a PrivateUse1-only op does, for ops whose
// CPU kernel only refuses (convolution_overrideable is what "tpu" tensors
// dispatch convolutions to): the same arguments, convolution's schema.
const c10::OperatorHandle *host_equivalent(const OpInfo &info) {
  static const c10::OperatorHandle conv =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
  return info.name == "aten::convolution_overrideable" ? &conv : nullptr;
}

// Runs the call on the host; false (stack untouched) when it has lazy bits.
bool run_on_host(const OpInfo &info, const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const size_t nargs = op.schema().arguments().size();
  const size_t base = stack->size() - nargs;
  const c10::ArrayRef<c10::IValue> args(stack->data() + base, nargs);
  for (const c10::IValue &iv : args)
    if (has_lazy_bits(iv)) return false;
  const c10::optional<c10::Device> device = first_tpu_device(args);
  if (!device) return false;
  std::vector<c10::IValue> originals(args.begin(), args.end());
  std::vector<c10::IValue> hosts;  // the written arguments' host views
  HostViews views;
  for (size_t i = 0; i < nargs; i++) {
    c10::IValue &slot = (*stack)[base + i];
    slot = views.of(slot);
    bool written = i < info.args.size() && info.args[i].written;
    if (info.unmarked)
      for (int a : info.unmarked->args) written = written || a == static_cast<int>(i);
    if (written) hosts.push_back(slot);
    else hosts.emplace_back();
  }
  if (const c10::OperatorHandle *eq = host_equivalent(info)) eq->callBoxed(stack);
  else op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (size_t i = 0; i < nargs; i++)
    if (!hosts[i].isNone()) copy_back(views, hosts[i], originals[i]);
  const size_t nrets = op.schema().returns().size();
  for (size_t r = 0; r < nrets; r++) {
    c10::IValue &ret = (*stack)[stack->size() - nrets + r];
    const int32_t alias = r < info.rets.size() ? info.rets[r].alias_arg : -1;
    ret = alias >= 0 ? originals[static_cast<size_t>(alias)] : to_device(ret, *device);
  }
  return true;
}

// The largest rank among the call's tensor arguments (lists included).
int64_t max_rank(const Call &c) {
  int64_t r = 0;
  for (const c10::IValue &iv : c.args) {
    if (iv.isTensor()) {
      if (iv.toTensor().defined()) r = std::max(r, iv.toTensor().dim());
    } else if (iv.isList()) {  // Tensor[] and Tensor?[]
      for (const c10::IValue &e : iv.toListRef())
        if (e.isTensor() && e.toTensor().defined()) r = std::max(r, e.toTensor().dim());
    }
  }
  return r;
}

// The first dtype among the call's tpu tensors that the core has no programs
// for (complex32, the float8s): such tensors live on tpu as bytes, and every
// op on them runs on the CPU, as PyTorch's own kernels define them.
c10::optional<c10::ScalarType> foreign_dtype(const Call &c) {
  const auto foreign = [](const c10::IValue &iv) {
    return iv.isTensor() && is_tpu(iv.toTensor()) &&
           to_tt_dtype(iv.toTensor().scalar_type()) == TT_DTYPE_NONE;
  };
  // A half tensor with a complex operand (a Python complex, a complex 0-dim
  // tensor) promotes to complex32 as well: `half_tensor * 1j`.
  bool half = false, complex = false;
  const auto note = [&](const c10::IValue &iv) {
    if (iv.isComplexDouble()) complex = true;
    if (!iv.isTensor() || !iv.toTensor().defined()) return;
    const c10::ScalarType t = iv.toTensor().scalar_type();
    half = half || t == c10::ScalarType::Half;
    complex = complex || c10::isComplexType(t);
  };
  for (const c10::IValue &iv : c.args) {
    if (foreign(iv)) return iv.toTensor().scalar_type();
    note(iv);
    if (!iv.isList()) continue;
    for (const c10::IValue &e : iv.toListRef()) {
      if (foreign(e)) return e.toTensor().scalar_type();
      note(e);
    }
  }
  if (half && complex) return c10::ScalarType::ComplexHalf;
  return c10::nullopt;
}

bool is_mask(const std::optional<at::Tensor> &t) {
  return t && t->defined() &&
         (t->scalar_type() == c10::ScalarType::Bool || t->scalar_type() == c10::ScalarType::Byte);
}

// ATen's indexing with masks (expandTensors, which CPU and CUDA share): in a
// Tensor?[] of indices (index, index_put), a bool (or uint8) index of k dims
// stands for the k long indices of its nonzero() columns. When the core
// refuses the masks, the tpu ones become long indices here, on the device
// (nonzero reads one count to the host, as on CUDA), and the call is retried;
// a 0-d mask or one on the CPU is left to the CPU's kernel, and so is an
// index_put of a one-element host value, which ATen turns into a masked_fill
// that casts the value (CUDA too; an index_put would refuse its dtype).
// Returns whether the indices (argument 1 of the `nargs` on the stack) changed.
bool expand_index_masks(torch::jit::Stack *stack, size_t nargs) {
  if (nargs < 2) return false;
  const size_t base = stack->size() - nargs;
  c10::IValue &arg = (*stack)[base + 1];
  if (!arg.isOptionalTensorList() || !(*stack)[base].isTensor()) return false;
  if (nargs > 2 && (*stack)[base + 2].isTensor()) {
    const at::Tensor &value = (*stack)[base + 2].toTensor();
    if (value.defined() && value.device().is_cpu() && value.numel() == 1) return false;
  }
  const at::Tensor self = (*stack)[base].toTensor();
  const auto list = arg.toOptionalTensorList();
  bool any = false;
  for (const std::optional<at::Tensor> t : list) {
    if (!is_mask(t)) continue;
    if (t->dim() == 0 || !is_tpu(*t)) return false;
    any = true;
  }
  if (!any) return false;
  c10::List<std::optional<at::Tensor>> out;
  for (const std::optional<at::Tensor> t : list) {
    if (!is_mask(t)) {
      out.push_back(t);
      continue;
    }
    if (t->scalar_type() == c10::ScalarType::Byte) {
      TORCH_WARN("indexing with dtype torch.uint8 is now deprecated, please use a dtype "
                 "torch.bool instead.");
    }
    for (int64_t j = 0; j < t->dim(); j++) {
      const int64_t src = static_cast<int64_t>(out.size()) + j;
      TORCH_CHECK_INDEX(t->size(j) == self.size(src), "The shape of the mask ", t->sizes(),
                        " at index ", j, " does not match the shape of the indexed tensor ",
                        self.sizes(), " at index ", src);
    }
    const at::Tensor nz = t->nonzero();
    for (int64_t j = 0; j < t->dim(); j++) out.push_back(nz.select(1, j));
  }
  arg = out;
  return true;
}

}  // namespace

void boxed_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  const OpInfo &info = op_info(op);
  const size_t nargs = op.schema().arguments().size();
  Call c(info);
  c.args.assign(stack->end() - static_cast<std::ptrdiff_t>(nargs), stack->end());
  if (info.id < 0) {
    // The CPU sees copies, not the aliases: check what ATen's kernel would.
    if (checks_own_overlap(info)) check_overlap(c);
    run_on_cpu(info, op, stack, "");
    return;
  }
  if (writes_lazy_bits(c)) {
    run_on_cpu(info, op, stack, "it writes into a lazy conj/neg view");
    return;
  }
  if (const int64_t rank = max_rank(c); rank > TT_MAX_RANK) {
    run_on_cpu(info, op, stack, "a tensor of rank " + std::to_string(rank) +
               " (the core's programs take at most " + std::to_string(TT_MAX_RANK) +
               " dims; PyTorch allows 64)");
    return;
  }
  if (const auto dt = foreign_dtype(c)) {
    check_overlap(c);
    run_on_cpu(info, op, stack, "dtype " + std::string(c10::getDtypeNames(*dt).first) +
               " has no tpu programs");
    return;
  }
  c.device = call_device(c, op.schema());
  check_overlap(c);
  alert_nondeterministic(c);
  build_values(c);
  build_dests(c);

  tt_runtime *rt = runtime();
  const c10::DeviceGuard guard(
      c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(c.device)));
  bool masks_expanded = false, resized = false;  // each retried once
  for (;;) {
    const tt_op_call call = make_call(c);
    c10::SmallVector<tt_op_result, 4> results(std::max<size_t>(c.dests.size(), 1));
    int32_t n = 0;
    tt_status s = tt_op_run(rt, &call, results.data(),
                            static_cast<int32_t>(results.size()), &n);
    if (s == nullptr) {
      Fresh fresh = wrap_results(results.data(), n);
      if (info.layout.kind != LayoutKind::kContiguous) lay_out_results(info.layout, c.args, fresh);
      torch::jit::drop(*stack, nargs);
      push_returns(c, std::move(fresh), stack);
      return;
    }
    const tt_code code = tt_status_code(s);
    if (code == TT_RUN_ON_HOST) {  // a cold signature: its program is compiling
      tt_status_free(s);
      const size_t base = stack->size() - nargs;  // below the call's arguments
      try {
        if (run_on_host(info, op, stack)) return;
        if (info.unmarked || host_equivalent(info)) {  // cpu_fallback can't: the device can
          c.host_ok = false;
          continue;
        }
        run_on_cpu(info, op, stack, "", /*host_tier=*/true);
        return;
      } catch (const c10::NotImplementedError &) {
        // The CPU has no kernel for these dtypes: the device's program is
        // compiled now and runs the call. Other errors are PyTorch's own.
        if (stack->size() > base) stack->resize(base);
        for (const c10::IValue &iv : c.args) stack->push_back(iv);
        c.host_ok = false;
        continue;
      }
    }
    if (code == TT_UNIMPLEMENTED) {
      const std::string why = tt_status_message(s) ? tt_status_message(s) : "";
      tt_status_free(s);
      if (!masks_expanded && expand_index_masks(stack, nargs)) {
        masks_expanded = true;
        c.args.assign(stack->end() - static_cast<std::ptrdiff_t>(nargs), stack->end());
        build_values(c);
        build_dests(c);
        continue;
      }
      run_on_cpu(info, op, stack, why);
      return;
    }
    if (code == TT_OUT_RESIZE && !resized) {
      resized = true;
      tt_status_free(s);
      resize_outs(c);
      build_values(c);
      build_dests(c);
      continue;
    }
    throw_status(s, info.name);
  }
}

namespace {

std::string full_name(const c10::OperatorName &n) {
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

bool has_cpu_kernel(const std::string &name, const std::string &overload) {
  const auto op = c10::Dispatcher::singleton().findOp({name, overload});
  return op && op->hasKernelForDispatchKey(c10::DispatchKey::CPU);
}

// The structured out= sibling of a functional or in-place op ("add.Tensor",
// "add_.Tensor" -> "add.out"; "pow.Tensor_Scalar" -> "pow.Tensor_Scalar_out"),
// or "" when there is none with a CPU kernel.
std::string structured_out(const c10::OperatorName &n) {
  const std::string base = base_op(n.name);
  if (has_cpu_kernel(base, "out")) return base + ".out";
  if (!n.overload_name.empty() && has_cpu_kernel(base, n.overload_name + "_out")) {
    return base + "." + n.overload_name + "_out";
  }
  return "";
}

}  // namespace

void register_structured_ops(torch::Library &m) {
  auto &dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName &n : dispatcher.getAllOpNames()) {
    if (n.name.rfind("aten::", 0) != 0) continue;
    const auto op = dispatcher.findOp(n);
    if (op && op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
        !op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      // A rule that replaces the composite kernel (the core says so) gets
      // the op; others keep PyTorch's composite.
      const std::string full = full_name(n);
      if (tt_op_replaces_composite(tt_op_lookup(full.c_str()))) {
        m.impl(full.substr(6).c_str(),
               torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>());
      }
      continue;
    }
    if (!op ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    const std::string full = full_name(n);
    if (tt_op_lookup(full.c_str()) < 0) {
      // Not lowered. Generated "_copy" ops decompose into views + clone on
      // the device: keep them. Structured ops whose out= form the core lowers
      // keep PyTorch's route to it; the others run on the CPU under their own
      // name (one CPU call, not a wrapper around a CPU out= call).
      if (n.name.size() > 5 && n.name.compare(n.name.size() - 5, 5, "_copy") == 0) continue;
      const std::string out = structured_out(n);
      if (out.empty() || tt_op_lookup(out.c_str()) >= 0) continue;
    }
    m.impl(full.substr(6).c_str(), torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>());
  }
}

// F.scaled_dot_product_attention asks a per-device stub for its backend
// (math, a decomposition into a dozen ops, when a device has none). When the
// core lowers the CPU flash op and its backward, send it the calls that op
// covers: no dropout (its backward draws no mask), no gradient for the mask,
// batch dims that match, Hk dividing Hq only under enable_gqa. The rest take
// the math path, unless the user turned it off too (then PyTorch reports no
// viable backend). Under torch.compile, AOTAutograd traces with fake tensors
// under its functionalization mode: those take the fused op for 4-d inputs,
// the rank its meta kernel describes; its results' layouts (query's for the
// output, [B, L, H] memory for logsumexp, [B, L, H, E] for the gradients) are
// the ones shim/layout.cpp gives the core's results, so the traced graph's
// views of them hold at run time. Other Python tensors in eager code (DTensor:
// PyTorch has no sharding strategy for the CPU flash op) take the math path.
// A trace of our own that runs fake tensors without functionalization (the
// trainer's whole step: make_fx) says so with set_fused_sdp_tracing, and gets
// the fused op as well: the math path costs a [B, H, L, S] mask, a safe
// softmax and its backward, several passes over the scores that the fused
// op's rules do without (the llama debug model's whole step: 401 -> 396 ms).
// The fused op stands for every fused backend CUDA code may ask for
// (sdpa_kernel(EFFICIENT_ATTENTION) or CUDNN_ATTENTION alone still gets a
// fused kernel on "tpu", not "no available kernel").
namespace {
// Process-wide, not per thread: the backward of a traced step (and the
// recomputation of checkpointed regions in it) runs on autograd's device
// thread, and must choose as the forward did. A count: traces may nest.
std::atomic<int> g_fused_sdp_tracing{0};
}  // namespace

void set_fused_sdp_tracing(bool on) { g_fused_sdp_tracing += on ? 1 : -1; }

int64_t fused_sdp_choice(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                         const std::optional<at::Tensor> &mask, double dropout_p,
                         bool /*is_causal*/, std::optional<double> /*scale*/, bool enable_gqa) {
  static const bool lowered =
      tt_op_lookup("aten::_scaled_dot_product_flash_attention_for_cpu") >= 0 &&
      tt_op_lookup("aten::_scaled_dot_product_flash_attention_for_cpu_backward") >= 0;
  const int64_t r = q.dim();
  const bool python = q.key_set().has(c10::DispatchKey::Python);
  const bool functional = c10::impl::TorchDispatchModeTLS::get_mode(
                              c10::impl::TorchDispatchModeKey::FUNCTIONAL)
                              .has_value();
  const at::Context &ctx = at::globalContext();
  const bool fused = ctx.userEnabledFlashSDP() || ctx.userEnabledMemEfficientSDP() ||
                     ctx.userEnabledCuDNNSDP();
  bool fits = lowered && fused && dropout_p == 0.0 &&
              (!python || ((functional || g_fused_sdp_tracing.load() > 0) && r == 4)) &&
              !q.is_nested() && !k.is_nested() && !v.is_nested() && r >= 3 &&
              k.dim() == r && v.dim() == r && !(mask && mask->defined() && mask->requires_grad());
  for (int64_t d = 0; fits && d < r - 3; d++) fits = k.size(d) == q.size(d) && v.size(d) == q.size(d);
  fits = fits && k.size(-3) == v.size(-3) && k.size(-3) > 0 &&
         (q.size(-3) == k.size(-3) || (enable_gqa && q.size(-3) % k.size(-3) == 0));
  if (fits) return static_cast<int64_t>(at::SDPBackend::flash_attention);
  return static_cast<int64_t>(ctx.userEnabledMathSDP() ? at::SDPBackend::math
                                                        : at::SDPBackend::error);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>());
}

}  // namespace torchtpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torchtpu::fused_sdp_choice)
}  // namespace at::native
