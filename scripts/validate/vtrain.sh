#!/usr/bin/env bash
# Calibration against 109 measured Megatron iteration times (vTrain, 64–512 A100): builds
# scalescope if needed, runs every row with the kernel model at its physical defaults
# (uncalibrated), at the in-sample fit and at its leave-one-model-out fit, and prints per-row
# errors, median / mean absolute errors and per-model-size median signed errors.
# Refit first with: scripts/validate/fit_calibration.py build/scalescope CSV --fit
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
csv=${VTRAIN_CSV:-$root/../shared/validation/vtrain_a100_multinode.csv}
[ -x "$root/build/scalescope" ] || "$root/scripts/build.sh"
exec /usr/bin/python3 "$root/scripts/validate/fit_calibration.py" "$root/build/scalescope" "$csv" "$@"
