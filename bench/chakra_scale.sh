#!/usr/bin/env bash
# Chakra import + replay rate (issue 11): Chakra nodes replayed per second, from the files on disk
# to summary.json, for ASTRA-sim's 1 MB all-reduce microbenchmark on 1,024 and 16,384 ranks
# (written by `scalescope chakra-microbench`) and for a 1,024-rank data-parallel training trace
# (the quickstart model at TP 1 · PP 1 · DP 1,024, written by export-chakra), at np 1 and np 2.
#
#   bench/chakra_scale.sh [BUILD_DIR] [OUT_DIR]
#
# Prints one line per case: ranks, files, Chakra nodes, wall seconds and nodes per second. The
# wall time is the whole `run --chakra` (reading every file, slicing, replaying, writing results).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$repo/build}
out=${2:-$(mktemp -d)}
bin=$build/scalescope
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$out"
mkdir -p "$out/ar1k" "$out/ar16k" "$out/dp1k"
"$bin" chakra-microbench all_reduce "$out/ar1k/t" --ranks 1024 >/dev/null
"$bin" chakra-microbench all_reduce "$out/ar16k/t" --ranks 16384 >/dev/null
"$bin" graph "$repo/inputs/experiments/quickstart.yaml" -o "$out/dp1k.h5" \
  --set parallel.tp=1 --set parallel.pp=1 --set parallel.dp=1024 --set cluster.num_gpus=1024 \
  --set training.global_batch_size=1024 --set parallel.sequence_parallel=false >/dev/null
"$bin" export-chakra "$out/dp1k.h5" "$out/dp1k/t" >/dev/null
printf '%-28s %3s %7s %9s %8s %12s\n' case np ranks nodes wall_s nodes_per_s
for c in ar1k ar16k dp1k; do
  nodes=$("$bin" graph --chakra "$out/$c/t" -o "$out/$c.graph.h5" | sed -E 's/.* ([0-9]+) nodes\)$/\1/')
  ranks=$(ls "$out/$c" | wc -l)
  for np in 1 2; do
    start=$(date +%s%N)
    if [ $np = 1 ]; then
      "$bin" run --chakra "$out/$c/t" -o "$out/$c.run$np" --quiet
    else
      mpirun -np $np "$bin" run --chakra "$out/$c/t" --set run.engine=optimistic \
        -o "$out/$c.run$np" --quiet
    fi
    end=$(date +%s%N)
    awk -v c="$c" -v np=$np -v r="$ranks" -v n="$nodes" -v ns=$((end - start)) \
      'BEGIN { w = ns / 1e9; printf "%-28s %3s %7s %9s %8.2f %12.0f\n", c, np, r, n, w, n / w }'
  done
done
