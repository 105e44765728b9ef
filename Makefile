# torchtpu build: the C core (libtorchtpu_core.so), the C++ shim against
# PyTorch (libtorchtpu_shim.so), and the core's C tests (plain and ASan+UBSan).
#
#   make          core + shim
#   make core     core only (no PyTorch needed)
#   make ctest    build and run every core/tests/test_*.c, plain and sanitized
#   make pytest-asan  a subset of the Python tests over the ASan+UBSan core
#   make fuzz-run the libFuzzer target over the committed corpus and earlier findings;
#   make fuzz-explore / fuzz-merge  mutation (FUZZ_SECONDS) and folding its corpus in;
#                 needs clang (skipped with a message when there is none)
#   make clean
#
# Objects live under build/ (build/asan/ for sanitized ones); the libraries
# land in torchtpu/lib/ beside the Python package that loads them.

PYTHON ?= .venv/bin/python
CC ?= gcc
CXX ?= g++

LIBDIR := torchtpu/lib
CORE_LIB := $(LIBDIR)/libtorchtpu_core.so
SHIM_LIB := $(LIBDIR)/libtorchtpu_shim.so

# --- core (C11) ----------------------------------------------------------------

CORE_SRCS := $(shell find core/src -name '*.c' | sort)
CORE_OBJS := $(CORE_SRCS:%.c=build/obj/%.o)
CORE_CFLAGS := -std=c11 -O2 -g -fPIC -fvisibility=hidden -D_GNU_SOURCE \
  -Wall -Wextra -Werror -Icore/include -Icore/src -MMD -MP
CORE_LDLIBS := -ldl -lpthread -lm

SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer
ASAN_OBJS := $(CORE_SRCS:%.c=build/asan/obj/%.o)

TEST_SRCS := $(sort $(wildcard core/tests/test_*.c))
TESTS := $(TEST_SRCS:core/tests/%.c=build/tests/%)
ASAN_TESTS := $(TEST_SRCS:core/tests/%.c=build/asan/tests/%)

# --- shim (C++17 against PyTorch) ------------------------------------------------
#
# Torch's location and C++ ABI come from the venv's python, asked only when
# the shim is built (`make core` / `make ctest` never import torch).

torch_query = $(shell TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PYTHON) -c "import torch, os; print($(1))")
TORCH_DIR = $(eval TORCH_DIR := $(call torch_query,os.path.dirname(torch.__file__)))$(TORCH_DIR)
TORCH_ABI = $(eval TORCH_ABI := $(call torch_query,int(torch._C._GLIBCXX_USE_CXX11_ABI)))$(TORCH_ABI)

SHIM_SRCS := $(sort $(wildcard shim/*.cpp))
SHIM_OBJS := $(SHIM_SRCS:%.cpp=build/obj/%.o)
SHIM_CXXFLAGS = -std=c++17 -O2 -g -fPIC -fvisibility=hidden \
  -D_GLIBCXX_USE_CXX11_ABI=$(TORCH_ABI) -Wall -Wextra \
  -Icore/include -isystem $(TORCH_DIR)/include -MMD -MP
SHIM_LDFLAGS = -shared -Wl,-z,defs -L$(LIBDIR) -L$(TORCH_DIR)/lib \
  -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,$(TORCH_DIR)/lib
SHIM_LDLIBS := -ltorchtpu_core -ltorch_cpu -lc10
# shim/profiler.cpp is a Kineto child profiler (PyTorch's PrivateUse1
# profiling interface): it needs USE_KINETO, as PyTorch's wheels are built,
# and Kineto's headers.
build/obj/shim/profiler.o: SHIM_CXXFLAGS += -DUSE_KINETO -isystem $(TORCH_DIR)/include/kineto

# --- targets -------------------------------------------------------------------

.PHONY: all core shim examples ctest ctest-plain ctest-asan asan-lib pytest-asan fuzz fuzz-run fuzz-explore fuzz-merge clean
all: core shim examples
core: $(CORE_LIB)
shim: $(SHIM_LIB)

$(CORE_LIB): $(CORE_OBJS)
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-z,defs -o $@ $^ $(CORE_LDLIBS)

build/obj/core/%.o: core/%.c
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) -c $< -o $@

build/asan/obj/core/%.o: core/%.c
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) $(SAN_FLAGS) -c $< -o $@

$(SHIM_LIB): $(SHIM_OBJS) $(CORE_LIB)
	@mkdir -p $(@D)
	$(CXX) $(SHIM_LDFLAGS) -o $@ $(SHIM_OBJS) $(SHIM_LDLIBS)

build/obj/shim/%.o: shim/%.cpp
	@mkdir -p $(@D)
	$(CXX) $(SHIM_CXXFLAGS) -c $< -o $@

# --- example C kernels (torchtpu.kernels.c_op) ----------------------------------------

EXAMPLE_LIBS := build/examples/librmsnorm_ffi.so
examples: $(EXAMPLE_LIBS)

build/examples/lib%.so: examples/%.c core/include/torchtpu_types.h
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -g -fPIC -shared -Wall -Wextra -Werror -Icore/include -o $@ $< -lm

# --- C tests -------------------------------------------------------------------
#
# Tests link the core's objects directly, so they can reach hidden (internal)
# functions as well as the public API.

build/tests/%: core/tests/%.c $(CORE_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) -o $@ $< $(CORE_OBJS) $(CORE_LDLIBS)

# The C benchmarks: bench/pjrt_floor (the plugin's own cost of a tiny op,
# bench/op_latency.py --floor) and bench/attention_kernel (our CPU attention
# kernel on its own). ctest-plain builds them, so that they keep compiling.
BENCHES := $(patsubst bench/%.c,build/bench/%,$(sort $(wildcard bench/*.c)))
build/bench/%: bench/%.c $(CORE_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) -o $@ $< $(CORE_OBJS) $(CORE_LDLIBS)

# The sanitized core as a library, with a copy of the shim beside it (its
# rpath $ORIGIN then finds this core): TORCHTPU_LIB_DIR=build/asan/lib and
# libasan preloaded run Python tests over it (make pytest-asan).
ASAN_LIBDIR := build/asan/lib
asan-lib: $(ASAN_LIBDIR)/libtorchtpu_core.so $(ASAN_LIBDIR)/libtorchtpu_shim.so

$(ASAN_LIBDIR)/libtorchtpu_core.so: $(ASAN_OBJS)
	@mkdir -p $(@D)
	$(CC) -shared $(SAN_FLAGS) -Wl,-z,defs -o $@ $^ $(CORE_LDLIBS)

$(ASAN_LIBDIR)/libtorchtpu_shim.so: $(SHIM_LIB)
	@mkdir -p $(@D)
	cp $< $@

# A subset of the Python suite over the sanitized core (ASan + UBSan): the
# op boundary, views, bad inputs, fused traces. The sanitizers' runtime must
# come first in the process, hence LD_PRELOAD; leaks are not checked (Python
# and XLA keep allocations to exit), nor the plugin's own new/delete pairing.
ASAN_PYTESTS ?= tests/test_ops.py tests/test_storage_views.py tests/test_bad_inputs.py \
  tests/test_fused_trace.py tests/test_errors.py tests/test_tensors.py tests/test_ops_misc.py \
  tests/test_ops_select.py tests/test_modes.py tests/test_device_checks.py \
  tests/test_layout_spill.py tests/test_donation.py
pytest-asan: asan-lib
	@export TORCHTPU_LIB_DIR=$(CURDIR)/$(ASAN_LIBDIR); \
	export LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)"; \
	export ASAN_OPTIONS="$${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1:alloc_dealloc_mismatch=0:new_delete_type_mismatch=0}"; \
	export UBSAN_OPTIONS="$${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"; \
	$(PYTHON) -m pytest -q -p no:cacheprovider $(ASAN_PYTESTS)

build/asan/tests/%: core/tests/%.c $(ASAN_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CORE_CFLAGS) $(SAN_FLAGS) -o $@ $< $(ASAN_OBJS) $(CORE_LDLIBS)

# Where the core looks for the CPU PJRT plugin's package when no plugin path
# is given (the Python package sets the same variable at import).
SITE_PACKAGES = $(shell $(PYTHON) -c "import site; print(':'.join(site.getsitepackages()))")

ctest: ctest-plain ctest-asan

ctest-plain: $(TESTS) $(BENCHES)
	@export TORCHTPU_SITE_PACKAGES="$${TORCHTPU_SITE_PACKAGES:-$(SITE_PACKAGES)}"; \
	failed=0; \
	for t in $(TESTS); do \
	  echo "== $$t"; \
	  $$t || { echo "FAILED: $$t"; failed=$$((failed + 1)); }; \
	done; \
	test $$failed -eq 0 || { echo "$$failed C test(s) failed"; exit 1; }

ctest-asan: $(ASAN_TESTS)
	@export TORCHTPU_SITE_PACKAGES="$${TORCHTPU_SITE_PACKAGES:-$(SITE_PACKAGES)}"; \
	export ASAN_OPTIONS="$${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}"; \
	export UBSAN_OPTIONS="$${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"; \
	failed=0; \
	for t in $(ASAN_TESTS); do \
	  echo "== $$t"; \
	  $$t || { echo "FAILED: $$t"; failed=$$((failed + 1)); }; \
	done; \
	test $$failed -eq 0 || { echo "$$failed sanitized C test(s) failed"; exit 1; }

# --- fuzzing (clang's libFuzzer, ASan + UBSan) ------------------------------------
#
# The core is rebuilt by clang under build/fuzz/; the target uses only the
# public API (torchtpu.h).

# clang 15 or later (the core uses _Float16); the newest one installed.
FUZZ_CC ?= $(or $(firstword $(foreach v,19 18 17 16 15,$(shell command -v clang-$(v) 2>/dev/null))),clang)
# Exploration (make fuzz-explore): FUZZ_SECONDS of mutation from a random
# seed (FUZZ_SEED=0), FUZZ_JOBS processes.
FUZZ_SECONDS ?= 600
FUZZ_SEED ?= 0
FUZZ_JOBS ?= 2
FUZZ_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_OBJS := $(CORE_SRCS:%.c=build/fuzz/obj/%.o)
FUZZ_BIN := build/fuzz/fuzz_op_call

build/fuzz/obj/core/%.o: core/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CORE_CFLAGS) -Wno-unknown-warning-option $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BIN): core/tests/fuzz_op_call.c $(FUZZ_OBJS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(CORE_CFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJS) $(CORE_LDLIBS)

fuzz:
	@if command -v $(FUZZ_CC) >/dev/null 2>&1; then $(MAKE) --no-print-directory $(FUZZ_BIN); \
	else echo "fuzz: SKIPPED: no clang >= 15 found (apt-get install clang-16 libclang-rt-16-dev)"; fi

# CI's fuzz step (make fuzz-run) is deterministic: it replays the inputs of
# earlier findings (core/tests/fuzz_regress) and the committed corpus
# (core/tests/fuzz_corpus, 1,725 inputs that cover what exploration
# reached), each once. It used to mutate from a fixed seed for a fixed
# count; on another machine (other paths, thread timing feeding libFuzzer's
# comparison tracing) that still reached inputs the developer's run never
# had, and CI failed on defects nobody had seen. Mutation is `make
# fuzz-explore`: findings are saved as build/fuzz/crash-*, go into
# fuzz_regress once fixed, and `make fuzz-merge` folds what it covered into
# the committed corpus. Any crash or sanitizer report fails. One input may
# take 35 s on a loaded 2-core machine (a rank-5 program's XLA compile):
# -timeout (a hang) is well above that.
FUZZ_ENV = export TORCHTPU_SITE_PACKAGES="$${TORCHTPU_SITE_PACKAGES:-$(SITE_PACKAGES)}"; \
	  export TF_CPP_MIN_LOG_LEVEL=2 ASAN_OPTIONS="$${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}" UBSAN_OPTIONS="$${UBSAN_OPTIONS:-print_stacktrace=1}"
FUZZ_OPTS = -timeout=180 -rss_limit_mb=4096 -max_len=512 -len_control=0

fuzz-run: fuzz
	@if [ -x $(FUZZ_BIN) ]; then $(FUZZ_ENV); \
	  $(FUZZ_BIN) -runs=1 core/tests/fuzz_regress/* || exit 1; \
	  $(FUZZ_BIN) -runs=0 $(FUZZ_OPTS) core/tests/fuzz_corpus || exit 1; \
	fi

fuzz-explore: fuzz
	@$(FUZZ_ENV); mkdir -p build/fuzz/corpus; \
	  $(FUZZ_BIN) -fork=$(FUZZ_JOBS) -ignore_crashes=1 -seed=$(FUZZ_SEED) -max_total_time=$(FUZZ_SECONDS) \
	    $(FUZZ_OPTS) -artifact_prefix=build/fuzz/ build/fuzz/corpus core/tests/fuzz_corpus core/tests/fuzz_regress

fuzz-merge: fuzz
	@$(FUZZ_ENV); $(FUZZ_BIN) -merge=1 $(FUZZ_OPTS) core/tests/fuzz_corpus build/fuzz/corpus

clean:
	rm -rf build $(CORE_LIB) $(SHIM_LIB)

-include $(CORE_OBJS:.o=.d) $(ASAN_OBJS:.o=.d) $(SHIM_OBJS:.o=.d) $(FUZZ_OBJS:.o=.d)
