// torchtpu_types.h — the vocabulary every layer of the core shares.
//
// Statuses, dtypes, tensors as views, op-call descriptions and the op table:
// plain declarations with no runtime behind them, so the bottom layers
// (base/, pjrt/, hlo/, lower/) can use them without seeing the runtime's API.
// torchtpu.h includes this header; the shim only ever includes torchtpu.h.
// Ownership rules are torchtpu.h's.
#ifndef TORCHTPU_TYPES_H
#define TORCHTPU_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TT_API __attribute__((visibility("default")))
#define TT_MAX_RANK 8

// --- status ------------------------------------------------------------------

typedef enum tt_code {
  TT_OK = 0,
  TT_INVALID_ARGUMENT = 1,  // bad user input: shapes, dtypes, devices
  TT_UNIMPLEMENTED = 2,     // no lowering for this op/dtype: shim falls back
  TT_NOT_FOUND = 3,         // plugin or file missing
  TT_FAILED_PRECONDITION = 4,  // e.g. plugin API version incompatible
  TT_INTERNAL = 5,          // a bug in torchtpu or the plugin
  TT_RESOURCE_EXHAUSTED = 6,   // out of memory
  TT_OUT_OF_RANGE = 7,      // index out of range (IndexError in Python)
  TT_OUT_RESIZE = 8,        // an out= tensor has the wrong shape: resize, retry
  TT_TYPE_ERROR = 9,        // a dtype PyTorch refuses with TypeError (TORCH_CHECK_TYPE)
  TT_RUN_ON_HOST = 10,      // not an error: run this call with the host's kernels (a cold
                            // signature whose program is still compiling)
} tt_code;

typedef struct tt_status_s *tt_status;  // NULL == OK

TT_API tt_code tt_status_code(tt_status s);
TT_API const char *tt_status_message(tt_status s);  // borrowed from s
TT_API void tt_status_free(tt_status s);

// --- dtypes ------------------------------------------------------------------

typedef enum tt_dtype {
  TT_BOOL = 0,
  TT_U8,
  TT_I8,
  TT_I16,
  TT_I32,
  TT_I64,
  TT_F16,
  TT_BF16,
  TT_F32,
  TT_F64,
  TT_U16,  // the wide unsigned types exist for random bits and bit tricks
  TT_U32,
  TT_U64,
  TT_C64,   // complex<float32>: (re, im) pairs, 8 bytes
  TT_C128,  // complex<float64>: follows float64's device support
  TT_DTYPE_COUNT,
  TT_DTYPE_NONE = -1,  // "not given" in optional dtype arguments
} tt_dtype;

TT_API const char *tt_dtype_name(tt_dtype d);  // "float32", static
TT_API const char *tt_dtype_torch_name(tt_dtype d);  // PyTorch's "Float", static
TT_API const char *tt_dtype_cpp_name(tt_dtype d);    // c10's TypeMeta "float", static
TT_API int64_t tt_dtype_size(tt_dtype d);      // bytes per element
TT_API bool tt_dtype_is_complex(tt_dtype d);   // TT_C64, TT_C128
// A complex dtype's component (TT_C64 -> TT_F32); other dtypes unchanged.
TT_API tt_dtype tt_dtype_to_real(tt_dtype d);
// Lowest and highest finite values of d as doubles (complex: the component's).
TT_API void tt_dtype_bounds(tt_dtype d, double *lo, double *hi);

// --- tensors and op calls ------------------------------------------------------
//
// Storages and generators are opaque here: the runtime owns them.

typedef struct tt_storage tt_storage;
typedef struct tt_generator tt_generator;

// A tensor: a strided view over a storage.
typedef struct tt_tensor {
  tt_storage *storage;     // borrowed; NULL for an undefined optional tensor
  tt_dtype dtype;
  int32_t ndim;
  const int64_t *sizes;    // elements
  const int64_t *strides;  // elements
  int64_t offset;          // elements
} tt_tensor;


typedef enum tt_value_kind {
  TT_VALUE_NONE = 0,   // None / undefined optional; ignored args too
  TT_VALUE_TENSOR,     // a device tensor
  TT_VALUE_SCALAR,     // Scalar, float, or a 0-dim CPU tensor: runtime value
  TT_VALUE_INT,        // int / SymInt: structural
  TT_VALUE_BOOL,       // structural
  TT_VALUE_INTS,       // int[] / SymInt[]: structural
  TT_VALUE_STRING,     // structural ("tanh", "mean", ...)
  TT_VALUE_DTYPE,      // ScalarType
  TT_VALUE_LIST,       // Tensor[] / Tensor?[] (items are TENSOR or NONE)
  TT_VALUE_GENERATOR,
} tt_value_kind;

typedef struct tt_scalar {
  tt_dtype dtype;  // TT_F64 for Python floats, TT_I64 ints, TT_BOOL bools,
                   // TT_C128 for Python complex numbers
  bool wrapped;    // a Python number (lowest promotion priority), not a tensor
  double f;        // value when dtype is floating; the real part when complex
  int64_t i;       // value when dtype is integral or bool
  double im;       // the imaginary part when dtype is complex, else 0
} tt_scalar;

typedef struct tt_value tt_value;
struct tt_value {
  tt_value_kind kind;
  union {
    tt_tensor tensor;
    tt_scalar scalar;
    int64_t i;
    bool b;
    struct { const int64_t *data; int32_t n; } ints;
    const char *str;
    tt_dtype dtype;
    struct { const tt_value *items; int32_t n; } list;
    tt_generator *gen;
  } u;
};

// Where one result of the op goes.
typedef struct tt_dest {
  int32_t arg;   // -1: a fresh tensor; else the index of the written argument
  int32_t item;  // list item when that argument is a list, else -1
} tt_dest;

typedef struct tt_op_call {
  int32_t op;               // id from tt_op_lookup
  int32_t device;           // device index the op runs on
  tt_dtype default_dtype;   // torch.get_default_dtype()
  const tt_value *args;
  int32_t nargs;
  // Where the rule's results go, in order. A fresh result is returned in
  // `tt_op_result`; fewer fresh results than declared is fine for ops that
  // return a list of varying length (then `ndests` is an upper bound).
  const tt_dest *dests;
  int32_t ndests;
  // The caller can run this call with the host's own kernels when the
  // runtime answers TT_RUN_ON_HOST (tt_runtime_set_compile_after).
  bool host_ok;
} tt_op_call;

// A fresh result: an owned storage holding a dense row-major tensor.
typedef struct tt_op_result {
  tt_storage *storage;  // owned by the receiver (wrap it into a StorageImpl)
  tt_dtype dtype;
  int32_t ndim;
  int64_t sizes[TT_MAX_RANK];
} tt_op_result;

// The id of a lowering rule by full ATen name ("aten::add.Tensor",
// "aten::relu" for the default overload), or -1 when no rule exists.
TT_API int32_t tt_op_lookup(const char *name);
TT_API const char *tt_op_name(int32_t op);  // static
TT_API int32_t tt_op_count(void);
// True when the op's rule replaces PyTorch's CompositeExplicitAutograd
// kernel (the shim then registers the op for the device, so calls reach the
// core instead of the composite: _foreach_*, convolution_overrideable, ...).
TT_API bool tt_op_replaces_composite(int32_t op);

// Registers `name` ("aten::foo.overload") with the lowering rule of the
// existing op `existing_name`, so calls of `name` run natively from then on
// (see the shim's per-schema cache: only ops not yet called in the process
// pick it up). Returns the new op's id, or -1 when `existing_name` has no
// rule or the table is full. A name that already has a rule is replaced.
TT_API int32_t tt_op_register_alias(const char *name, const char *existing_name);

// --- custom kernels ----------------------------------------------------------------
//
// Called when a kernel is used with an input signature it has no variant
// for ("f32[4,8],f32[8]"): it adds one (tt_kernel_add_variant) and returns 0,
// or writes why it could not into err (capacity err_cap) and returns nonzero.
// `name` and `signature` are borrowed for the call. It runs inside the op
// call, on the calling thread, with no lock of the core held.
typedef int (*tt_kernel_export_fn)(void *ctx, const char *name, const char *signature,
                                   char *err, size_t err_cap);

// A C kernel (torchtpu.kernels.c_op): a plain C function the device runs
// through XLA's FFI, on the device's memory (host memory on the CPU plugin).
// Inputs and outputs are dense row-major buffers; outputs are preallocated
// with the shapes the kernel's shape function gave. Returns NULL, or a
// message saying why it failed (static or thread-local storage): the op then
// fails with that message and the kernel's name.
typedef struct tt_kernel_buffer {
  tt_dtype dtype;
  int32_t rank;
  const int64_t *dims;  // rank entries, elements
  void *data;
} tt_kernel_buffer;

typedef const char *(*tt_c_kernel_fn)(const tt_kernel_buffer *ins, int32_t nin,
                                      tt_kernel_buffer *outs, int32_t nout);

// A host thread pool a C kernel may spread its work over: on XLA's CPU
// plugin, the runtime's intra-op pool, the one its own parallel loops use,
// so that a kernel's threads and the program's never outnumber the cores.
// schedule(impl, task, data) queues task(data) on it and returns false when
// it could not; valid for the kernel call it was given to. threads: the
// pool's size.
typedef struct tt_kernel_pool {
  void *impl;
  int32_t threads;
  bool (*schedule)(void *impl, void (*task)(void *data), void *data);
} tt_kernel_pool;

// A C kernel that takes the pool (NULL where the program runs without one).
typedef const char *(*tt_c_kernel_pool_fn)(const tt_kernel_buffer *ins, int32_t nin,
                                           tt_kernel_buffer *outs, int32_t nout,
                                           const tt_kernel_pool *pool);

#ifdef __cplusplus
}
#endif
#endif  // TORCHTPU_TYPES_H
