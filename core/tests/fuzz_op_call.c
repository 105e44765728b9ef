// fuzz_op_call.c — libFuzzer target over the op-call description: bytes
// become one tt_op_call (an op of the table, its arguments: tensors of any
// dtype, rank 0..TT_MAX_RANK, strided views with offsets, ints, int lists,
// scalars (real and complex) including NaN/inf and extremes, bools, strings, dtypes, tensor
// lists, Nones; its destinations) handed to the core through the public API
// only (torchtpu.h), as the shim would. Most inputs go to tt_op_infer
// (lowering, no compile: fast); one in sixteen also runs through tt_op_run
// (lowering, compile, execute). Any status is fine; a crash, a sanitizer
// report or a hang is a finding.
//
//   make fuzz                  build build/fuzz/fuzz_op_call (clang)
//   make fuzz-run FUZZ_SECONDS=60
//
// Leaves out: the shim's own checks (rank > TT_MAX_RANK never reaches the
// core: describe() refuses it), generators (their state is host-side),
// tensors on other devices.
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu.h"

// --- reading the input -------------------------------------------------------------

typedef struct reader {
  const uint8_t *p;
  size_t n;
} reader;

static uint8_t u8(reader *r) {
  if (r->n == 0) return 0;
  r->n--;
  return *r->p++;
}

static int64_t i64(reader *r) {
  uint8_t k = u8(r);
  switch (k % 8) {
    case 0: return -1;
    case 1: return (int64_t)(u8(r) % 9) - 2;  // -2..6: dims, small sizes
    case 2: return INT64_MAX;
    case 3: return INT64_MIN;
    case 4: return (int64_t)1 << 40;
    default: return (int64_t)(u8(r) % 16);
  }
}

// Non-finite and huge values are fed only with FUZZ_NONFINITE: eager.c's
// scalar_bits converts a float Scalar to an integer parameter with a plain C
// cast, undefined for NaN/inf/out of range (reported; the shim saturates).
static double f64(reader *r) {
#ifdef FUZZ_NONFINITE
  static const double kValues[] = {0.0, 1.0, -1.0, 0.5, 2.0, 1e308, -1e308, 1e-320,
                                   NAN, INFINITY, -INFINITY, 3.0, 100.0, -0.0};
#else
  static const double kValues[] = {0.0, 1.0, -1.0, 0.5, 2.0, 1e-320, 3.0, 100.0, -0.0,
                                   -7.5, 1e6, 65504.0};
#endif
  return kValues[u8(r) % (sizeof kValues / sizeof kValues[0])];
}

// --- building the call -----------------------------------------------------------------

enum { kMaxArgs = 10, kMaxTensors = 24, kMaxItems = 4, kMaxInts = 12, kMaxDests = 6 };

typedef struct arena {
  tt_value args[kMaxArgs];
  tt_value items[kMaxArgs][kMaxItems];
  int64_t ints[kMaxArgs][kMaxInts];
  int64_t sizes[kMaxTensors][TT_MAX_RANK], strides[kMaxTensors][TT_MAX_RANK];
  tt_storage *storages[kMaxTensors];
  int ntensors;
  int max_rank;  // TT_MAX_RANK when only lowering; lower when compiling (see below)
  tt_dest dests[kMaxDests];
} arena;

static tt_runtime *g_rt;  // one runtime for the whole run

static bool make_tensor(reader *r, arena *a, tt_tensor *out) {
  if (a->ntensors == kMaxTensors) return false;
  int t = a->ntensors++;
  tt_dtype d = (tt_dtype)(u8(r) % TT_DTYPE_COUNT);
  int ndim = u8(r) % (a->max_rank + 1);
  bool dense = u8(r) % 4 != 0;
  int64_t numel = 1, extent = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    a->sizes[t][i] = u8(r) % 5;  // 0..4
    a->strides[t][i] = dense ? numel : (int64_t)(u8(r) % 6);
    numel *= a->sizes[t][i];
  }
  int64_t offset = dense ? 0 : u8(r) % 4;
  for (int i = 0; i < ndim; i++)
    if (a->sizes[t][i] > 0) extent += (a->sizes[t][i] - 1) * a->strides[t][i];
  if (numel == 0) extent = 0;
  int64_t nbytes = (offset + extent) * tt_dtype_size(d);
  tt_storage *s = NULL;
  if (nbytes > 0) {
    tt_status st = tt_storage_create(g_rt, 0, nbytes, &s);
    if (st) {
      tt_status_free(st);
      return false;
    }
  }
  a->storages[t] = s;
  *out = (tt_tensor){s, d, ndim, a->sizes[t], a->strides[t], s ? offset : 0};
  return true;
}

static const char *const kStrings[] = {"mean", "sum", "none", "tanh", "floor", "trunc",
                                       "reflect", "replicate", "circular", "constant",
                                       "bilinear", "nearest", "", "bogus"};

static void make_arg(reader *r, arena *a, int i) {
  tt_value *v = &a->args[i];
  memset(v, 0, sizeof *v);
  switch (u8(r) % 11) {
    case 0: v->kind = TT_VALUE_NONE; break;
    case 1: case 2: case 3:
      v->kind = TT_VALUE_TENSOR;
      if (!make_tensor(r, a, &v->u.tensor)) v->kind = TT_VALUE_NONE;
      break;
    case 4: {
      v->kind = TT_VALUE_SCALAR;
      uint8_t raw = u8(r), k = raw % 3;
      v->u.scalar.dtype = k == 0 ? TT_F64 : k == 1 ? TT_I64 : TT_BOOL;
      v->u.scalar.wrapped = u8(r) & 1;
      v->u.scalar.f = f64(r);
      v->u.scalar.i = k == 2 ? (u8(r) & 1) : i64(r);
      if (k != 0) v->u.scalar.f = (double)v->u.scalar.i;
      if (raw >= 252) {  // a Python complex (rare codes, so older inputs keep their meaning)
        v->u.scalar.dtype = TT_C128;
        v->u.scalar.f = f64(r);
        v->u.scalar.im = f64(r);
      }
      break;
    }
    case 5: v->kind = TT_VALUE_INT; v->u.i = i64(r); break;
    case 6: v->kind = TT_VALUE_BOOL; v->u.b = u8(r) & 1; break;
    case 7: {
      v->kind = TT_VALUE_INTS;
      int n = u8(r) % (kMaxInts + 1);
      for (int k = 0; k < n; k++) a->ints[i][k] = i64(r);
      v->u.ints.data = a->ints[i];
      v->u.ints.n = n;
      break;
    }
    case 8:
      v->kind = TT_VALUE_STRING;
      v->u.str = kStrings[u8(r) % (sizeof kStrings / sizeof kStrings[0])];
      break;
    case 9:
      v->kind = TT_VALUE_DTYPE;
      v->u.dtype = (tt_dtype)((int)(u8(r) % (TT_DTYPE_COUNT + 1)) - 1);
      break;
    default: {
      v->kind = TT_VALUE_LIST;
      int n = u8(r) % (kMaxItems + 1);
      for (int k = 0; k < n; k++) {
        tt_value *it = &a->items[i][k];
        memset(it, 0, sizeof *it);
        it->kind = TT_VALUE_TENSOR;
        if (u8(r) % 5 == 0 || !make_tensor(r, a, &it->u.tensor)) it->kind = TT_VALUE_NONE;
      }
      v->u.list.items = a->items[i];
      v->u.list.n = n;
      break;
    }
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  tt_runtime_options o = {.plugin_path = getenv("TORCHTPU_PLUGIN_PATH"), .cpu_device_count = 1};
  tt_status st = tt_runtime_create(&o, &g_rt);
  if (st) {
    fprintf(stderr, "fuzz_op_call: no runtime: %s\n", tt_status_message(st));
    tt_status_free(st);
    exit(1);  // a test harness, not library code
  }
  return 0;
}

enum { kMaxRunBytes = 256 << 20 };

// Bytes of the results tt_op_infer described (saturating).
static int64_t result_bytes(const tt_op_result *res, int32_t n) {
  int64_t total = 0;
  for (int32_t k = 0; k < n && k < 64; k++) {
    int64_t b = 8;
    for (int d = 0; d < res[k].ndim && d < TT_MAX_RANK; d++)
      if (res[k].sizes[d] > 0 && __builtin_mul_overflow(b, res[k].sizes[d], &b)) return INT64_MAX;
    if (__builtin_add_overflow(total, b, &total)) return INT64_MAX;
  }
  return total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size};
  arena a;
  memset(&a, 0, sizeof a);
  uint8_t mode = u8(&r);
  // Compiled inputs (one in 16) keep to rank <= 5: the XLA CPU plugin's
  // compile time grows exponentially with the rank of some programs (a
  // rank-6 permute().contiguous() compiles for 12 s, rank 7 for over a
  // minute; reported), which a time-bounded run would report as timeouts.
  // FUZZ_DEEP_COMPILE lifts the limit to look for more of them.
  const bool compile = (mode & 15) == 0;
  a.max_rank = compile && !getenv("FUZZ_DEEP_COMPILE") ? 5 : TT_MAX_RANK;
  int32_t count = tt_op_count();
  if (count <= 0) return 0;
  int32_t op = (int32_t)((u8(&r) | (uint32_t)u8(&r) << 8) % (uint32_t)count);
  int nargs = u8(&r) % (kMaxArgs + 1);
  for (int i = 0; i < nargs; i++) make_arg(&r, &a, i);
  int ndests = 1 + u8(&r) % kMaxDests;
  for (int k = 0; k < ndests; k++) {
    uint8_t d = u8(&r);
    a.dests[k] = (tt_dest){-1, -1};
    if (d % 4 == 0 && nargs > 0) {  // a written argument (maybe a list item)
      int arg = d / 4 % nargs;
      // A destination names a tensor with storage: the core treats one
      // without (no slot) as a fresh result and eager.c's scatter_outputs
      // then reads past the plan's results (reported; fix in ctx.c).
      if (a.args[arg].kind == TT_VALUE_TENSOR && a.args[arg].u.tensor.storage)
        a.dests[k] = (tt_dest){arg, -1};
      if (a.args[arg].kind == TT_VALUE_LIST && a.args[arg].u.list.n > 0) {
        int item = (d / 64) % a.args[arg].u.list.n;
        // As the shim does: a written list item is always a tensor (a None
        // item as a destination is refused by nobody yet: see the report).
        if (a.args[arg].u.list.items[item].kind == TT_VALUE_TENSOR &&
            a.args[arg].u.list.items[item].u.tensor.storage)
          a.dests[k] = (tt_dest){arg, item};
      }
    }
  }
  tt_op_call call = {op, 0, (mode & 16) ? TT_F64 : TT_F32, a.args, nargs, a.dests, ndests, false};
  if (getenv("FUZZ_PRINT")) {  // replaying a finding: say what it calls
    fprintf(stderr, "fuzz_op_call: %s %s, %d args:", compile ? "run" : "infer",
            tt_op_name(op), nargs);
    for (int i = 0; i < nargs; i++) {
      const tt_value *v = &a.args[i];
      if (v->kind == TT_VALUE_TENSOR) {
        fprintf(stderr, " tensor(%s, rank %d, offset %lld, strides", tt_dtype_name(v->u.tensor.dtype),
                (int)v->u.tensor.ndim, (long long)v->u.tensor.offset);
        for (int d = 0; d < v->u.tensor.ndim; d++)
          fprintf(stderr, " %lld/%lld", (long long)v->u.tensor.sizes[d], (long long)v->u.tensor.strides[d]);
        fprintf(stderr, ")");
      } else {
        fprintf(stderr, " kind%d", (int)v->kind);
      }
    }
    fprintf(stderr, "\n");
  }
  tt_op_result res[64];
  int32_t n = 0;
  tt_status st = tt_op_infer(g_rt, &call, res, 64, &n);
  // Results too large to allocate are the plugin's out-of-memory error
  // (tested in Python); run here only what fits in the fuzzer's memory
  // limit, so an allocation of terabytes is not reported as a finding.
  bool run = compile && !st && result_bytes(res, n) <= kMaxRunBytes;
  if (run) st = tt_op_run(g_rt, &call, res, 64, &n);
  if (!st && run) {
    for (int32_t k = 0; k < n && k < 64; k++) tt_storage_destroy(res[k].storage);
  }
  tt_status_free(st);
  if (run) {  // surface asynchronous errors of the run now
    tt_status s2 = tt_runtime_synchronize(g_rt);
    tt_status_free(s2);
  }
  for (int t = 0; t < a.ntensors; t++) tt_storage_destroy(a.storages[t]);
  return 0;
}
