#!/usr/bin/env bash
# Configures and builds scalescope into build/ (Release, warnings as errors).
# Extra arguments go to CMake's configure step, e.g. -DSCALESCOPE_SANITIZE=ON.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SCALESCOPE_BUILD_DIR:-$root/build}
jobs=${SCALESCOPE_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSCALESCOPE_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j "$jobs"
