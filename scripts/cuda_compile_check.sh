#!/usr/bin/env bash
# Compiles furlong's CUDA-only translation units against a CUDA build of libtorch on a machine
# without a GPU, so that the CUDA path cannot rot (CI runs this; nothing is executed).
#   1. .venv-cuda/: the torch CUDA wheel (FURLONG_CUDA_TORCH, default torch==2.14.1) that pip
#      takes from the local wheel directory (/opt/pypi-more here; no multi-GB download),
#   2. build-cuda/: configured against it (cmake/TorchCuda.cmake finds the CUDA toolkit that
#      nvcc belongs to), tests and benchmarks off,
#   3. the target furlong_cuda_units: every library holding a CUDA-only source (NCCL process
#      groups, ...); `scripts/cuda_compile_check.sh furlong` builds the whole binary instead.
# Needs nvcc (a CUDA toolkit) on PATH or in /usr/local/cuda; fails clearly without one.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_SPEC=${FURLONG_CUDA_TORCH:-torch==2.14.1}
TARGETS=${*:-furlong_cuda_units}
step() { printf '\033[1m[cuda-check]\033[0m %s\n' "$*"; }

if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "cuda-check: no nvcc (CUDA toolkit) on PATH or in /usr/local/cuda; cannot compile the CUDA path" >&2
  exit 1
fi
stamp=.venv-cuda/.furlong-torch
if [ ! -x .venv-cuda/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$TORCH_SPEC" ]; then
  step "creating .venv-cuda with $TORCH_SPEC (CUDA wheel from the local wheel directory)"
  [ -x .venv-cuda/bin/python ] || python3 -m venv .venv-cuda
  .venv-cuda/bin/pip install -q --disable-pip-version-check --only-binary=:all: "$TORCH_SPEC" 2>&1 \
    | grep -v "^WARNING: Location" || true
  cuda=$(.venv-cuda/bin/python -c "import torch; print(torch.version.cuda or '')" 2>/dev/null)
  [ -n "$cuda" ] || { echo "cuda-check: .venv-cuda's torch is not a CUDA build" >&2; exit 1; }
  echo "$TORCH_SPEC" > "$stamp"
fi
if [ ! -f build-cuda/build.ninja ]; then
  step "configuring build-cuda against $(.venv-cuda/bin/python -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFURLONG_PYTHON="$PWD/.venv-cuda/bin/python" -DFURLONG_BUILD_TESTS=OFF \
    -DFURLONG_BUILD_BENCH=OFF >/dev/null
fi
step "building $TARGETS"
start=$(date +%s)
ninja -C build-cuda -j "$(nproc)" $TARGETS
step "built $TARGETS against the CUDA libtorch in $(( $(date +%s) - start )) s"
