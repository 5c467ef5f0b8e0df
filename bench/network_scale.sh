#!/usr/bin/env bash
# The flow model's cost at scale (issue 24): Llama 3 405B on 16,384 GPUs
# (inputs/experiments/llama3-405b-16k.yaml) under network.model analytical and flow, on the
# optimistic engine at `mpirun -np NP` (default 2): the engine's wall time, the ratio, and each
# process's peak resident memory (GNU time's %M). Run from the repository root after
# scripts/build.sh. Not a test: the figures go into notes and docs/network.md.
set -euo pipefail
np=${1:-2}
bin=${SCALESCOPE:-build/scalescope}
exp=inputs/experiments/llama3-405b-16k.yaml
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
declare -A wall
for model in analytical flow; do
  mpirun -np "$np" /usr/bin/time -f "$model rank-process peak RSS %M KiB" "$bin" run "$exp" \
    -o "$tmp/$model" --quiet --set run.engine=optimistic --set network.model=$model \
    --set run.trace_ranks=[0] 2>&1 | grep "peak RSS" || true
  wall[$model]=$(/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['engine']['wall_s'])" "$tmp/$model/summary.json")
  it=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['iteration_time_s'])" "$tmp/$model/summary.json")
  echo "$model: iteration $it s, engine wall ${wall[$model]} s at np $np"
done
/usr/bin/python3 -c "import sys; print(f'flow / analytical wall time: {float(sys.argv[2]) / float(sys.argv[1]):.2f}x')" "${wall[analytical]}" "${wall[flow]}"
