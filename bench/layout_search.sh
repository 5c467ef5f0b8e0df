#!/usr/bin/env bash
# The layout search's figure (issue 41): for Qwen3-30B-A3B on 256 H100 (its config.json) and
# Llama 3 70B on 1,024 H100, `sweep --search layout` — configurations listed, refused by the
# plan rules, not fitting, dominated before their replay, replayed — and its wall time on this
# machine, one process. Writes bench/results/layout_search.txt.
#   bench/layout_search.sh [BIN]    (default build/scalescope)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$repo/build/scalescope}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
out=$repo/bench/results/layout_search.txt
{
  echo "# sweep --search layout, one process, $(nproc) cores, $(date -u +%F)"
  echo "experiment configurations invalid does_not_fit dominated replayed_ok wall_s"
  for exp in qwen3-30b-a3b-256 llama3-70b-1k; do
    start=$(date +%s.%N)
    "$bin" sweep "$repo/inputs/experiments/$exp.yaml" --search layout -q -o "$tmp/$exp"
    end=$(date +%s.%N)
    /usr/bin/python3 - "$tmp/$exp/sweep.json" "$exp" "$start" "$end" <<'PY'
import collections, json, sys
rows = json.load(open(sys.argv[1]))["rows"]
c = collections.Counter(r["status"] for r in rows)
print(sys.argv[2], len(rows), c["invalid"], c["does_not_fit"], c["dominated"], c["ok"],
      f"{float(sys.argv[4]) - float(sys.argv[3]):.1f}")
PY
  done
} | tee "$out"
