// Names and sizes of the core's dtypes.
#include "torchtpu_types.h"

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
