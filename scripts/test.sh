#!/usr/bin/env bash
# One command from a fresh machine to a passing test suite: install, build, run ctest; then, where
# clang and libFuzzer exist, a 20-second smoke run of each libFuzzer target (scripts/fuzz.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 GTEST_COLOR=no
export OMPI_MCA_rmaps_base_oversubscribe=1
(cd "${SCALESCOPE_BUILD_DIR:-$root/build}" && ctest --output-on-failure -j "$(nproc)" "$@")

# libFuzzer smoke run of every target (fuzz/, docs/fuzzing.md: ASan and UBSan, each seeded with
# its committed corpus, crash inputs found so far included, and the shipped inputs it reads), 20 s
# each. Skipped, saying so, without clang's fuzzer runtime.
if command -v clang++ >/dev/null 2>&1 &&
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  "$root/scripts/fuzz.sh" --time 20
  echo "fuzz smoke: every target ran 20 s clean"
else
  echo "fuzz smoke: SKIPPED (no clang++ with libFuzzer: apt install clang libclang-rt-dev)"
fi
