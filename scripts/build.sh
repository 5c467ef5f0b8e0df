#!/usr/bin/env bash
# Configures and builds scalescope into build/ (Release, warnings as errors).
# Extra arguments go to CMake's configure step, e.g. -DSCALESCOPE_SANITIZE=ON.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SCALESCOPE_BUILD_DIR:-$root/build}
jobs=${SCALESCOPE_JOBS:-$(nproc)}
# The CUDA sources (kernels/: scalescope-kernels, cuda_kernels_test) compile whenever a CUDA
# toolkit is present; without one (CI) the switch is left off. -DSCALESCOPE_ENABLE_CUDA=OFF wins.
cuda=()
if [[ -x /usr/local/cuda/bin/nvcc ]] || command -v nvcc >/dev/null 2>&1; then
  cuda=(-DSCALESCOPE_ENABLE_CUDA=ON)
  if [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  fi
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSCALESCOPE_WERROR=ON \
  ${cuda[@]+"${cuda[@]}"} "$@" >/dev/null
cmake --build "$build" -j "$jobs"
