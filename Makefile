# furlong developer entry points. Each target does its own set-up, so on a fresh machine
# `make demo` and `make test` are all a newcomer needs.
#   make setup   Debian packages, .venv with the pinned torch wheel, real tokenizer files
#   make build   configure (CMake + Ninja + ccache) and build build/furlong and the tests
#   make test    build, then run the whole suite with CTest
#   make bench   build, then run the side-by-side benchmarks (writes bench/results/*.json)
#   make demo    build, then GRPO makes SmolLM2-135M-Instruct better at addition (held-out eval)
#   make demo-tiny  build, then SFT + GRPO on a tiny random model (a minute or two)
#   make lint    clang-format check, file sizes, flags named in comments, commit subjects
#   make cuda-check  compile the CUDA-only sources against a CUDA libtorch (.venv-cuda, build-cuda)
#   make device-check-dry-run  scripts/device_check.sh on CPU (tiny shapes; CUDA parts skipped)
#   make tidy    clang-tidy (bugprone, performance) on the files changed since origin/main

BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CTEST_ARGS ?=
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_DIR ?= $(CURDIR)/.cache/ccache

.PHONY: setup configure build test bench demo demo-tiny lint tidy format clean cuda-check device-check-dry-run

setup:
	@bash scripts/setup.sh

$(BUILD_DIR)/build.ninja: CMakeLists.txt
	@$(MAKE) --no-print-directory setup
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo

configure: $(BUILD_DIR)/build.ninja

build: setup configure
	ninja -C $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

bench: build
	.venv/bin/python bench/run_all.py --build-dir $(BUILD_DIR)

demo: build
	bash scripts/demo.sh $(BUILD_DIR)

demo-tiny: build
	bash scripts/demo_tiny.sh $(BUILD_DIR)

lint: setup
	bash scripts/lint.sh

cuda-check:
	bash scripts/cuda_compile_check.sh

device-check-dry-run: build
	DEVICE_CHECK_BUILD_DIR=$(BUILD_DIR) JOBS=$(JOBS) bash scripts/device_check.sh --dry-run $(BUILD_DIR)/device-check/out

tidy: setup
	bash scripts/tidy.sh

format:
	clang-format -i $$(git ls-files 'src/*.h' 'src/*.cpp' 'tests/*.h' 'tests/*.cpp' 'bench/*.cpp')

clean:
	rm -rf $(BUILD_DIR)
