#!/usr/bin/env bash
# Runs every shipped experiment (inputs/experiments/*.yaml, at its shipped size, sequential engine)
# and the shipped sweep, writing OUTDIR/<name>/{summary.json,results.h5}. Used with
# scripts/dev/same_outputs.py to show that a refactoring changes no output:
#   scripts/dev/outputs.sh build/scalescope /tmp/before   # at the old commit
#   scripts/dev/outputs.sh build/scalescope /tmp/after    # at the new one
#   scripts/dev/same_outputs.py /tmp/before /tmp/after
set -euo pipefail
bin=$(realpath "$1"); out=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
for cfg in "$repo"/inputs/experiments/*.yaml; do
  name=$(basename "$cfg" .yaml)
  start=$(date +%s.%N)
  "$bin" run "$cfg" -o "$out/$name" --quiet
  printf '%-28s %6.1f s\n' "$name" "$(echo "$(date +%s.%N) - $start" | bc)"
done
for sweep in "$repo"/inputs/sweeps/*.yaml; do
  name=sweep-$(basename "$sweep" .yaml)
  start=$(date +%s.%N)
  "$bin" sweep "$sweep" -o "$out/$name" --quiet >/dev/null
  printf '%-28s %6.1f s\n' "$name" "$(echo "$(date +%s.%N) - $start" | bc)"
done
