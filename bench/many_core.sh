#!/usr/bin/env bash
# For a many-core machine (16+ cores, 32+ GiB; issue 42): Llama 3 405B at 131,072 GPUs on the
# sequential engine and the conservative engine (what run.engine: auto runs there) at np 2, 4
# and 8, one run each, with the determinism checks of bench/scaling.sh (every engine's summary
# equal to the sequential one's). About 4–8 minutes where each process has a core of its own;
# on a 2-core machine np 4 and 8 only share two cores (use bench/engine_cachegrind.sh there).
# Writes bench/results/scaling.csv (the rows of this size only) and prints them.
#
#   bench/many_core.sh [BUILD_DIR]    (env NPS="2 4 8 16" for other process counts,
#                                      ENGINES="conservative optimistic" for Time Warp too)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SIZES=131072 BIG_REPEATS=1 NPS="${NPS:-2 4 8}" ENGINES="${ENGINES:-conservative}" exec "$root/bench/scaling.sh" "$@"
