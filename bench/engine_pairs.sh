#!/usr/bin/env bash
# Wall time of the parallel engine against the sequential one in alternating pairs (issue 42):
# Llama 3 405B (inputs/experiments/llama3-405b-16k.yaml) at GPUS GPUs (DP = GPUS/128, global
# batch 16·DP, so every pipeline runs the issue's 16 micro-batches), the sequential engine and
# `mpirun -np NP` with run.engine ENGINE (default auto: the conservative windows here) one after
# the other, PAIRS times. Alternating pairs, because on a shared machine a slow spell hits one
# run of a pair, not a whole series. Each pair's results must be identical (summary.json without
# its engine section). Records the engine wall time (summary.json engine.wall_s), the process
# wall time and the peak RSS of the largest process (GNU time's %M over mpirun: the largest
# descendant) into bench/results/engine_pairs-GPUS-ENGINE.csv and prints each pair's speed-up.
#
#   bench/engine_pairs.sh [BUILD_DIR]   (env GPUS=131072 PAIRS=3 NP=2 ENGINE=auto)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
exe="$build/scalescope"
gpus="${GPUS:-131072}"
pairs="${PAIRS:-3}"
np="${NP:-2}"
engine="${ENGINE:-auto}"
cfg="$root/inputs/experiments/llama3-405b-16k.yaml"
[ -x "$exe" ] || { echo "engine_pairs.sh: build $exe first (scripts/build.sh)" >&2; exit 1; }
[ $((gpus % 128)) -eq 0 ] || { echo "engine_pairs.sh: GPUS=$gpus is not a multiple of 128 (TP 8 · PP 16)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
dp=$((gpus / 128))
sets=(--set cluster.num_gpus=$gpus --set parallel.data_parallel_size=$dp
      --set training.global_batch_size=$((16 * dp)) -q)
# The experiment traces rank 15360 (the last stage's first) too; below 16,384 GPUs only rank 0.
[ "$gpus" -lt 16384 ] && sets+=(--set "run.trace_ranks=[0]")
mkdir -p "$root/bench/results"
csv="$root/bench/results/engine_pairs-$gpus-$engine.csv"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "pair,engine,processes,engine_wall_s,process_wall_s,peak_rss_mib,events_committed,identical" >"$csv.partial"
for ((p = 1; p <= pairs; p++)); do
  rm -rf "$tmp/seq" "$tmp/par"
  /usr/bin/time -f "%e %M" -o "$tmp/seq.time" "$exe" run "$cfg" "${sets[@]}" -o "$tmp/seq"
  /usr/bin/time -f "%e %M" -o "$tmp/par.time" mpirun -np "$np" "$exe" run "$cfg" "${sets[@]}" \
    --set run.engine="$engine" -o "$tmp/par"
  /usr/bin/python3 - "$tmp" "$p" "$np" >>"$csv.partial" <<'PY'
import json, sys
tmp, pair, np_ = sys.argv[1:]
a, b = (json.load(open(f"{tmp}/{r}/summary.json")) for r in ("seq", "par"))
ea, eb = a.pop("engine"), b.pop("engine")
same = a == b
for e, r in ((ea, "seq"), (eb, "par")):
    wall, rss_kb = open(f"{tmp}/{r}.time").read().split()
    print(f"{pair},{e['kind']},{e['processes']},{e['wall_s']:.2f},{float(wall):.1f},"
          f"{int(rss_kb) / 1024:.0f},{e['events_committed']},{same}")
print(f"pair {pair}: sequential {ea['wall_s']:.1f} s, {eb['kind']} np {np_} {eb['wall_s']:.1f} s "
      f"({ea['wall_s'] / eb['wall_s']:.2f}x), identical {same}", file=sys.stderr)
sys.exit(0 if same else f"pair {pair}: the results differ")
PY
done
mv "$csv.partial" "$csv"
cat "$csv"
