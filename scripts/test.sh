#!/usr/bin/env bash
# One command from a fresh machine to a passing test suite: install, build, run ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 GTEST_COLOR=no
export OMPI_MCA_rmaps_base_oversubscribe=1
cd "${SCALESCOPE_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "$(nproc)" "$@"
