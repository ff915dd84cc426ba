# Tessera: every target does its own set-up, so `make test` or `make run` works on a fresh
# machine (Debian packages via scripts/bootstrap, then CMake configure and build).

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
TRACES ?= ../shared/traces/alibaba-gpu-2023
TRACE ?= default
SEEDS ?= 42-51
OUT ?= sim-out
FUZZ_SECONDS ?= 300
# Seconds one test may take before CTest stops it and fails it (the slowest take about 3 min).
TEST_TIMEOUT ?= 900

CONFIGURED := $(BUILD_DIR)/build.ninja

.PHONY: all bootstrap configure build test run sim bench fuzz format lint clean

all: build

bootstrap:
	@scripts/bootstrap

$(CONFIGURED): CMakeLists.txt | bootstrap
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

configure: bootstrap $(CONFIGURED)

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) --timeout $(TEST_TIMEOUT)

# A development server (tessera dev): store, TLS, an in-process agent per node (simulated GPUs,
# real processes), a demo tenant. It prints its address and tokens and how to submit a first
# workload. DEV_DIR keeps its data (default: a new temporary directory each time).
DEV_DIR ?=
DEV_ADDR ?= 127.0.0.1:8200
run: build
	@$(BUILD_DIR)/tessera dev --addr $(DEV_ADDR) $(if $(DEV_DIR),--data-dir $(DEV_DIR))

# The headline simulation: FGD against our policy on the default trace, 10 seeds.
sim: build
	@$(BUILD_DIR)/tessera sim openb \
	  --nodes $(TRACES)/openb_node_list_gpu_node.csv \
	  --pods $(TRACES)/openb_pod_list_$(TRACE).csv \
	  --policy fgd,tessera --seeds $(SEEDS) --tune 1.3 \
	  --expected $(TRACES)/fgd-expected-results --out $(OUT)

bench: build
	@scripts/bench $(BUILD_DIR) $(TRACES)

# Every fuzz target for FUZZ_SECONDS each, in the clang build the fuzz_brief test also uses.
fuzz: bootstrap
	@scripts/fuzz --seconds $(FUZZ_SECONDS) --build-dir $(BUILD_DIR)/fuzz-clang --jobs $(JOBS)

format: bootstrap
	@git ls-files '*.h' '*.cc' | xargs clang-format -i

lint: configure
	@git ls-files '*.h' '*.cc' | xargs clang-format --dry-run --Werror
	@scripts/check-layers
	@git ls-files 'src/*.cc' ':!:*_test.cc' | xargs clang-tidy -p $(BUILD_DIR) --quiet 2>/dev/null

clean:
	@rm -rf $(BUILD_DIR)
