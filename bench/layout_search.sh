#!/usr/bin/env bash
# The layout search's figure (issue 41): for Qwen3-30B-A3B on 256 H100 (its config.json) and
# Llama 3 70B on 1,024 H100, `sweep --search layout` — configurations listed, refused by the
# plan rules, not fitting, dominated before their replay, replayed — and its wall time on this
# machine, at one process and at two (mpirun -np 2: the configurations dealt over both cores).
# Writes bench/results/layout_search.txt.
#   bench/layout_search.sh [BIN]    (default build/scalescope)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$repo/build/scalescope}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
out=$repo/bench/results/layout_search.txt
{
  echo "# sweep --search layout, $(nproc) cores, $(date -u +%F)"
  echo "experiment np configurations invalid does_not_fit dominated replayed_ok wall_s best_s"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  for exp in qwen3-30b-a3b-256 llama3-70b-1k; do
    for np in 1 2; do
      start=$(date +%s.%N)
      mpirun -np $np "$bin" sweep "$repo/inputs/experiments/$exp.yaml" --search layout -q \
        -o "$tmp/$exp-$np"
      end=$(date +%s.%N)
      /usr/bin/python3 - "$tmp/$exp-$np/sweep.json" "$exp" $np "$start" "$end" <<'PY'
import collections, json, sys
rows = json.load(open(sys.argv[1]))["rows"]
c = collections.Counter(r["status"] for r in rows)
best = min(r["iteration_time_s"] for r in rows if r["status"] == "ok")
print(sys.argv[2], sys.argv[3], len(rows), c["invalid"], c["does_not_fit"], c["dominated"], c["ok"],
      f"{float(sys.argv[5]) - float(sys.argv[4]):.1f}", f"{best:.4f}")
PY
    done
    cmp "$tmp/$exp-1/sweep.csv" "$tmp/$exp-2/sweep.csv"  # the same table at any process count
  done
} | tee "$out"
