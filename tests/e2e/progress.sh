#!/usr/bin/env bash
# Long work says how far it is (issue 41): export-chakra, the Chakra import (graph --chakra),
# sweep, the layout search (its check and its replays) and run each print a progress line with a rate and an ETA on stderr, and none under
# --quiet. SCALESCOPE_PROGRESS_INTERVAL=0 makes every step report, so that these short commands
# show it (the default interval is 1 s).
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export SCALESCOPE_PROGRESS_INTERVAL=0
qs=$repo/inputs/experiments/quickstart.yaml
fail=0
# has NAME PATTERN FILE: the pattern is in the file; lacks NAME PATTERN FILE: it is not.
has() { if grep -qE "$2" "$3"; then echo "ok   $1"; else echo "FAIL $1: no '$2' in $(head -c 300 "$3")"; fail=1; fi; }
lacks() { if grep -qE "$2" "$3"; then echo "FAIL $1: '$2' under --quiet"; fail=1; else echo "ok   $1"; fi; }
"$bin" graph "$qs" -o "$tmp/g.h5" >/dev/null

mkdir -p "$tmp/a" "$tmp/b"
"$bin" export-chakra "$tmp/g.h5" "$tmp/a/qs" 2>"$tmp/e1" >/dev/null
"$bin" export-chakra "$tmp/g.h5" "$tmp/b/qs" --quiet 2>"$tmp/e2" >/dev/null
has "export-chakra: progress with rate and ETA" "^export-chakra: +[0-9.]+ % \(64 of 64 files\) \| .* files/s \| ETA" "$tmp/e1"
lacks "export-chakra --quiet: no progress" "export-chakra:" "$tmp/e2"
"$bin" graph --chakra "$tmp/a/qs" -o "$tmp/back.h5" 2>"$tmp/i1" >/dev/null
"$bin" graph --chakra "$tmp/a/qs" -o "$tmp/back2.h5" --quiet 2>"$tmp/i2" >/dev/null
has "Chakra import: progress with rate and ETA" "^Chakra import: +[0-9.]+ % \(64 of 64 files\) \| .* files/s \| ETA" "$tmp/i1"
lacks "graph --chakra --quiet: no progress" "Chakra import:" "$tmp/i2"
"$bin" sweep "$qs" --vary training.micro_batch_size=1,2 -o "$tmp/s1" 2>"$tmp/s1.err" >/dev/null
"$bin" sweep "$qs" --vary training.micro_batch_size=1,2 -o "$tmp/s2" -q 2>"$tmp/s2.err" >/dev/null
has "sweep: a line per configuration with rate and ETA" "^\[2/2\] .* configurations/s \| ETA 0 s" "$tmp/s1.err"
lacks "sweep -q: no progress" "ETA" "$tmp/s2.err"
"$bin" sweep "$qs" --search layout -o "$tmp/l1" 2>"$tmp/l1.err" >/dev/null
"$bin" sweep "$qs" --search layout -o "$tmp/l2" -q 2>"$tmp/l2.err" >/dev/null
has "layout search: its check with rate and ETA" "^layout search, checking: +[0-9.]+ % \(1440 of 1440 configurations\) \| .* configurations/s \| ETA" "$tmp/l1.err"
has "layout search: its replays with rate and ETA" "^layout search: +100.0 % \([0-9]+ of [0-9]+ candidates\) \| .* candidates/s \| ETA" "$tmp/l1.err"
lacks "sweep --search layout -q: no progress" "layout search" "$tmp/l2.err"
# A run long enough for the engine's check (every 2^16 events): GPT-3 on 1,024 GPUs.
big=$repo/inputs/experiments/gpt3-175b-1024.yaml
"$bin" run "$big" -o "$tmp/r1" 2>"$tmp/r1.err" >/dev/null
"$bin" run "$big" -o "$tmp/r2" -q 2>"$tmp/r2.err" >/dev/null
has "run: progress with rate and ETA" "^progress: .* events/s \| ETA" "$tmp/r1.err"
lacks "run -q: no progress" "progress:" "$tmp/r2.err"
exit $fail
