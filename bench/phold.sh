#!/usr/bin/env bash
# PHOLD benchmark of the engines (ROSS's PHOLD): 32,768 LPs in total, one start event per LP,
# mean 1.0, lookahead 0.1, end 200, remote 0.10 / 0.25 / 0.50; the sequential engine on one
# process, the optimistic (Time Warp) and the conservative (windows of the lookahead) engine on
# `mpirun -np 1` and `-np 2` (2 × 16,384 LPs), each the best of REPEATS runs. Prints a table with
# each parallel row's speed against the sequential engine
# of the same remote fraction, and writes bench/results/phold.csv. Every engine must commit the
# same history: the checksums must agree.
#
#   bench/phold.sh [BUILD_DIR]        (default: build; env END, SEED, REMOTES, REPEATS (3),
#                                      NPS ("1 2") override)
# Timings on a shared 2-core machine are noisy: compare rates only between runs made together.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
exe="$build/scalescope-phold"
end="${END:-200}"
seed="${SEED:-1}"
remotes="${REMOTES:-0.10 0.25 0.50}"
repeats="${REPEATS:-3}"
nps="${NPS:-1 2}"
total_lps=32768
py=/usr/bin/python3  # Debian's interpreter (see shared/TOOLCHAIN.md)

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 GTEST_COLOR=no

if [[ ! -x "$exe" ]]; then
  echo "phold.sh: $exe not found; build it: cmake --build $build --target scalescope-phold" >&2
  exit 1
fi

results="$root/bench/results"
mkdir -p "$results"
csv="$results/phold.csv"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

common=(--start-events 1 --mean 1.0 --lookahead 0.1 --end "$end" --seed "$seed")

echo "engine,processes,remote,lps,committed_events,committed_events_per_s,efficiency,rolled_back_events,peak_rss_mib,peak_rss_mib_total,wall_s,checksum" >"$csv"
row() {  # engine processes remote json
  "$py" - "$@" >>"$csv" <<'PY'
import json, sys
engine, procs, remote, path = sys.argv[1:5]
j = json.load(open(path))
print(f"{engine},{procs},{remote},32768,{j['committed_events']},{j['committed_events_per_s']:.0f},"
      f"{j['efficiency']:.4f},{j['rolled_back_events']},{j['peak_rss_mib']:.1f},"
      f"{j['peak_rss_mib_total']:.1f},{j['wall_s']:.3f},{j['checksum']}")
PY
}

best() {  # best NAME CMD...: runs CMD (with --json) $repeats times, keeps the fastest run's JSON
  local name=$1 k; shift
  for ((k = 0; k < repeats; k++)); do
    "$@" --json "$tmp/$name.try.json" >/dev/null
    if [[ ! -e "$tmp/$name.json" ]] || "$py" -c "
import json, sys
r = lambda p: json.load(open(p))['committed_events_per_s']
sys.exit(0 if r('$tmp/$name.try.json') > r('$tmp/$name.json') else 1)"; then
      mv "$tmp/$name.try.json" "$tmp/$name.json"
    fi
  done
}
for remote in $remotes; do
  # Side by side: each engine's best of $repeats runs, made one after another.
  best "seq-$remote" "$exe" --engine sequential --lps-per-process "$total_lps" --remote "$remote" \
    "${common[@]}"
  row sequential 1 "$remote" "$tmp/seq-$remote.json"
  for np in $nps; do
    best "opt$np-$remote" mpirun -np "$np" "$exe" --engine optimistic \
      --lps-per-process $((total_lps / np)) --remote "$remote" "${common[@]}"
    row optimistic "$np" "$remote" "$tmp/opt$np-$remote.json"
    best "con$np-$remote" mpirun -np "$np" "$exe" --engine conservative \
      --lps-per-process $((total_lps / np)) --remote "$remote" "${common[@]}"
    row conservative "$np" "$remote" "$tmp/con$np-$remote.json"
  done
done

"$py" - "$csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
rate = {(r['engine'], r['processes'], r['remote']): float(r['committed_events_per_s'])
        for r in rows}
print(f"{'engine':<12} {'np':>2} {'remote':>6} {'committed':>10} {'events/s':>11} {'vs seq':>6} "
      f"{'efficiency':>10} {'RSS MiB':>8} {'wall s':>7}  checksum")
for r in rows:
    ratio = float(r['committed_events_per_s']) / rate[('sequential', '1', r['remote'])]
    print(f"{r['engine']:<12} {r['processes']:>2} {r['remote']:>6} {r['committed_events']:>10} "
          f"{float(r['committed_events_per_s']):>11.3e} {ratio:>6.2f} {r['efficiency']:>10} "
          f"{r['peak_rss_mib']:>8} {r['wall_s']:>7}  {r['checksum']}")
seq = {r['remote']: r['checksum'] for r in rows if r['engine'] == 'sequential'}
bad = [r['remote'] for r in rows if r['engine'] != 'sequential' and r['checksum'] != seq[r['remote']]]
if bad:
    print(f"MISMATCH: optimistic and sequential checksums differ at remote {', '.join(bad)}")
    sys.exit(1)
PY
echo "wrote $csv"
