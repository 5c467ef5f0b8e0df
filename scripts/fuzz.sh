#!/usr/bin/env bash
# The libFuzzer campaigns (docs/fuzzing.md): builds the targets with clang, ASan and UBSan into
# build-fuzz/, then runs each named target (all by default) for --time seconds or --runs
# executions, whichever ends first. Each starts from its committed corpus (fuzz/corpus/TARGET:
# seeds and every crash input found so far) plus the shipped inputs it reads, and grows a working
# corpus in build-fuzz/corpus/TARGET. A crash stops the script with the input under
# build-fuzz/crashes/; copy it to fuzz/corpus/TARGET once fixed. Prints one line per target:
# executions, coverage (edges), corpus size, seconds.
#   scripts/fuzz.sh [--time S] [--runs N] [TARGET...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
time_s=60 runs=-1 targets=()
while (($#)); do
  case $1 in
    --time) time_s=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=(chakra experiment megatron hf_config graph_h5 capture_h5 pipeline_actions)
fuzz=${SCALESCOPE_FUZZ_BUILD_DIR:-$root/build-fuzz}
CC=clang CXX=clang++ cmake -S "$root" -B "$fuzz" -DCMAKE_BUILD_TYPE=Release \
  -DSCALESCOPE_FUZZ=ON -DSCALESCOPE_ENABLE_CUDA=OFF >/dev/null
cmake --build "$fuzz" -j "$(nproc)" --target fuzz_targets >/dev/null

# The shipped inputs each reader is seeded with, beside its committed corpus.
seeds() {
  case $1 in
    chakra)
      local d="$fuzz/seeds/chakra"
      if [[ ! -d $d ]]; then
        mkdir -p "$d"
        cp "$root"/../shared/formats/chakra-fixtures/*/*.0.et "$d"/ 2>/dev/null || true
        local bin=${SCALESCOPE_BUILD_DIR:-$root/build}/scalescope
        if [[ -x $bin ]]; then
          "$bin" graph "$root/inputs/experiments/quickstart.yaml" --set model.num_layers=2 \
            -o "$d/q.h5" >/dev/null && "$bin" export-chakra "$d/q.h5" "$d/q" >/dev/null &&
            rm -f "$d"/q.[1-9]*.et "$d/q.h5" "$d/q.comm_groups.json"
        fi
      fi
      echo "$d" ;;
    experiment) echo "$root/inputs/experiments" ;;
    hf_config) echo "$root/inputs/hf" ;;
    *) ;;
  esac
}

mkdir -p "$fuzz/crashes"
for t in "${targets[@]}"; do
  bin="$fuzz/fuzz/${t}_fuzz"
  [[ -x $bin ]] || { echo "fuzz.sh: no target $t" >&2; exit 2; }
  work="$fuzz/corpus/$t"
  mkdir -p "$work"
  log="$fuzz/$t.log"
  start=$(date +%s)
  set +e
  # shellcheck disable=SC2046
  committed=()  # fuzz/corpus/TARGET, where git holds any file for it
  [[ -d $root/fuzz/corpus/$t ]] && committed=("$root/fuzz/corpus/$t")
  "$bin" -max_total_time="$time_s" -runs="$runs" -max_len=65536 -rss_limit_mb=4096 -timeout=30 \
    -print_final_stats=1 -artifact_prefix="$fuzz/crashes/$t-" "$work" \
    ${committed[@]+"${committed[@]}"} $(seeds "$t") >"$log" 2>&1
  rc=$?
  set -e
  secs=$(($(date +%s) - start))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || echo 0)
  corpus=$(find "$work" -type f | wc -l)
  echo "fuzz $t: ${execs:-0} executions in ${secs} s, coverage ${cov:-0} edges, corpus $corpus, exit $rc"
  if ((rc != 0)); then
    echo "fuzz $t FAILED: see $log; the input is under $fuzz/crashes/" >&2
    grep -m 5 -E 'ERROR|SUMMARY|terminate|what\(\)' "$log" >&2 || true
    exit 1
  fi
done
