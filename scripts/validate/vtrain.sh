#!/usr/bin/env bash
# Calibration against 109 measured Megatron iteration times (vTrain, 64–512 A100):
# builds scalescope if needed, runs every row, prints per-row and mean / median error.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
csv=${VTRAIN_CSV:-$root/../shared/validation/vtrain_a100_multinode.csv}
[ -x "$root/build/scalescope" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/validate/vtrain.py" "$root/build/scalescope" "$csv" "$@"
