// Names and sizes of the core's dtypes.
#include "torchtpu_types.h"

#include <float.h>

typedef struct dtype_info {
  const char *name;
  int64_t size;  // bytes
} dtype_info;

static const dtype_info kInfo[] = {
    [TT_BOOL] = {"bool", 1},     [TT_U8] = {"uint8", 1},
    [TT_I8] = {"int8", 1},       [TT_I16] = {"int16", 2},
    [TT_I32] = {"int32", 4},     [TT_I64] = {"int64", 8},
    [TT_F16] = {"float16", 2},   [TT_BF16] = {"bfloat16", 2},
    [TT_F32] = {"float32", 4},   [TT_F64] = {"float64", 8},
    [TT_U16] = {"uint16", 2},    [TT_U32] = {"uint32", 4},
    [TT_U64] = {"uint64", 8},
    [TT_C64] = {"complex64", 8}, [TT_C128] = {"complex128", 16},
};
_Static_assert(sizeof kInfo / sizeof kInfo[0] == TT_DTYPE_COUNT,
               "every dtype needs a name and size");

// PyTorch's ScalarType names ("Float", "Long"), the spelling of its error
// messages, which ours mirror so that tests matching PyTorch's text pass.
static const char *const kTorchName[] = {
    [TT_BOOL] = "Bool",    [TT_U8] = "Byte",       [TT_I8] = "Char",
    [TT_I16] = "Short",    [TT_I32] = "Int",       [TT_I64] = "Long",
    [TT_F16] = "Half",     [TT_BF16] = "BFloat16", [TT_F32] = "Float",
    [TT_F64] = "Double",   [TT_U16] = "UInt16",    [TT_U32] = "UInt32",
    [TT_U64] = "UInt64",   [TT_C64] = "ComplexFloat", [TT_C128] = "ComplexDouble",
};
_Static_assert(sizeof kTorchName / sizeof kTorchName[0] == TT_DTYPE_COUNT,
               "every dtype needs PyTorch's name");

const char *tt_dtype_torch_name(tt_dtype d) {
  return (d >= 0 && d < TT_DTYPE_COUNT) ? kTorchName[d] : "Undefined";
}

// c10's TypeMeta names, which the structured kernels' messages print.
const char *tt_dtype_cpp_name(tt_dtype d) {
  static const char *const kCpp[] = {
      [TT_BOOL] = "bool",         [TT_U8] = "unsigned char",    [TT_I8] = "signed char",
      [TT_I16] = "short int",     [TT_I32] = "int",             [TT_I64] = "long int",
      [TT_F16] = "c10::Half",     [TT_BF16] = "c10::BFloat16",  [TT_F32] = "float",
      [TT_F64] = "double",        [TT_U16] = "unsigned short",  [TT_U32] = "unsigned int",
      [TT_U64] = "unsigned long", [TT_C64] = "c10::complex<float>",
      [TT_C128] = "c10::complex<double>",
  };
  _Static_assert(sizeof kCpp / sizeof kCpp[0] == TT_DTYPE_COUNT, "every dtype needs a name");
  return d >= 0 && d < TT_DTYPE_COUNT ? kCpp[d] : "unknown";
}

const char *tt_dtype_name(tt_dtype d) {
  return (d >= 0 && d < TT_DTYPE_COUNT) ? kInfo[d].name : "invalid";
}

int64_t tt_dtype_size(tt_dtype d) {
  return (d >= 0 && d < TT_DTYPE_COUNT) ? kInfo[d].size : 0;
}

bool tt_dtype_is_complex(tt_dtype d) { return d == TT_C64 || d == TT_C128; }

tt_dtype tt_dtype_to_real(tt_dtype d) {
  return d == TT_C64 ? TT_F32 : d == TT_C128 ? TT_F64 : d;
}

// Lowest and highest finite values, as doubles (a complex dtype: its
// component's). int64's and uint64's round to the nearest double.
void tt_dtype_bounds(tt_dtype d, double *lo, double *hi) {
  switch (tt_dtype_to_real(d)) {
    case TT_BOOL: *lo = 0, *hi = 1; return;
    case TT_U8: *lo = 0, *hi = 255; return;
    case TT_I8: *lo = -128, *hi = 127; return;
    case TT_I16: *lo = -32768, *hi = 32767; return;
    case TT_U16: *lo = 0, *hi = 65535; return;
    case TT_I32: *lo = -2147483648.0, *hi = 2147483647.0; return;
    case TT_U32: *lo = 0, *hi = 4294967295.0; return;
    case TT_I64: *lo = -9223372036854775808.0, *hi = 9223372036854775807.0; return;
    case TT_U64: *lo = 0, *hi = 18446744073709551615.0; return;
    case TT_F16: *lo = -65504.0, *hi = 65504.0; return;
    case TT_BF16: *lo = -3.38953138925153547590e38, *hi = 3.38953138925153547590e38; return;
    case TT_F32: *lo = -FLT_MAX, *hi = FLT_MAX; return;
    default: *lo = -DBL_MAX, *hi = DBL_MAX; return;  // float64
  }
}
