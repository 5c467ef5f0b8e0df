#!/usr/bin/env bash
# One command from a fresh machine to a passing test suite: install, build, run ctest; then, where
# clang and libFuzzer exist, a 30-second smoke run of the Chakra reader's fuzz target.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 GTEST_COLOR=no
export OMPI_MCA_rmaps_base_oversubscribe=1
(cd "${SCALESCOPE_BUILD_DIR:-$root/build}" && ctest --output-on-failure -j "$(nproc)" "$@")

# libFuzzer smoke run (SCALESCOPE_FUZZ; fuzz/chakra_fuzz.cpp), seeded with the Chakra fixtures
# and a trace of our own. Skipped, saying so, without clang's fuzzer runtime.
if command -v clang++ >/dev/null 2>&1 &&
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  fuzz=${SCALESCOPE_FUZZ_BUILD_DIR:-$root/build-fuzz}
  CC=clang CXX=clang++ cmake -S "$root" -B "$fuzz" -DCMAKE_BUILD_TYPE=Release \
    -DSCALESCOPE_FUZZ=ON -DSCALESCOPE_ENABLE_CUDA=OFF >/dev/null
  cmake --build "$fuzz" -j "$(nproc)" --target chakra_fuzz >/dev/null
  corpus=$(mktemp -d)
  trap 'rm -rf "$corpus"' EXIT
  cp "$root"/../shared/formats/chakra-fixtures/*/*.0.et "$corpus"/ 2>/dev/null || true
  bin=${SCALESCOPE_BUILD_DIR:-$root/build}/scalescope
  "$bin" graph "$root/inputs/experiments/quickstart.yaml" --set model.num_layers=2 \
    -o "$corpus/q.h5" >/dev/null
  "$bin" export-chakra "$corpus/q.h5" "$corpus/et/q" >/dev/null
  cp "$corpus/et/q.0.et" "$corpus/" && rm -rf "$corpus/et" "$corpus/q.h5"
  "$fuzz/chakra_fuzz" -max_total_time=30 -max_len=65536 -rss_limit_mb=2048 \
    -print_final_stats=1 "$corpus" 2>&1 | tail -n 3
  echo "fuzz smoke: chakra_fuzz ran 30 s clean"
else
  echo "fuzz smoke: SKIPPED (no clang++ with libFuzzer: apt install clang libclang-rt-dev)"
fi
