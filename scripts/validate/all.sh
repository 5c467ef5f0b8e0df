#!/usr/bin/env bash
# Every public validation set, all rows, one summary line per set, validation.json.
#   scripts/validate/all.sh [--quick] [--only vtrain,memory,h100,nccl,torchtitan,recipe]
#                           [--scalescope PATH] [--json validation.json] [--check docs/validation.md]
# Full: about 20 minutes on 2 cores; --quick: about 3 (docs/validation.md "All sets").
# --check fails when a set's median |err| grows by more than one point over its pin.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$root/build/scalescope" ] || "$root/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec /usr/bin/python3 "$root/scripts/validate/all.py" "$@"
