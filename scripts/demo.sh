#!/usr/bin/env bash
# One command from a fresh machine to a result: install the packages, build, run the quickstart
# experiment, print its summary and write its HTML report (out/quickstart/report.html).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "$root"
build/scalescope run inputs/experiments/quickstart.yaml -o out/quickstart
build/scalescope report out/quickstart
