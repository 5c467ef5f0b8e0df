#!/usr/bin/env bash
# ctest -L accuracy: every quick validation set's median |err| against the pins recorded in
# docs/validation.md ("Pinned figures"); fails when a set grows by more than one point. First
# checks that the check can fail: the memory set against a pin of 0.5 % must be refused.
# Needs ../shared/validation (vTrain, NCCL rows); skips (77) saying so without it.
set -euo pipefail
bin=$1
root=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [[ ! -f "$root/../shared/validation/vtrain_a100_multinode.csv" ]]; then
  echo "SKIPPED: $root/../shared/validation not found (the vTrain and NCCL rows live there)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '<!-- accuracy-pins -->\n| set | mode | rows | median | median abs |\n|---|---|---|---|---|\n| memory | full | 9 | -2.6 %% | 0.5 %% |\n' >"$tmp/pins.md"
if /usr/bin/python3 "$root/scripts/validate/all.py" --scalescope "$bin" --only memory \
  --json "$tmp/m.json" --check "$tmp/pins.md" >"$tmp/m.log" 2>&1; then
  cat "$tmp/m.log"
  echo "FAIL: a pin of 0.5 % was accepted"
  exit 1
fi
grep -q "accuracy check FAILED" "$tmp/m.log" || { cat "$tmp/m.log"; exit 1; }
/usr/bin/python3 "$root/scripts/validate/all.py" --scalescope "$bin" --quick \
  --json "$tmp/validation.json" --check "$root/docs/validation.md"
