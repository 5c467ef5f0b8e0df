#!/usr/bin/env bash
# The post-processing scripts (scripts/post/) on two small runs: quickstart on DGX H100 and on
# DGX A100. Checks every script's output, that summarize agrees with summary.json, that compare
# tells equal from different runs, and the one-line error paths.
# Usage: test_post.sh SCALESCOPE REPO
# matplotlib is required (scripts/setup.sh installs python3-matplotlib): without it the plotting
# checks fail, they are not skipped.
set -uo pipefail
bin=$1; repo=$2
post=$repo/scripts/post
py=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
qs=$repo/inputs/experiments/quickstart.yaml
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# --- two runs (and a repeat of the first, which must compare equal) ------------------------------
run() {  # run NAME ARGS...
  local name=$1; shift
  if "$bin" run "$qs" "$@" -o "$tmp/$name" >"$tmp/$name.log" 2>&1 && [ -s "$tmp/$name/results.h5" ]; then
    ok "run $name"
  else
    bad "run $name:"; tail -5 "$tmp/$name.log"; exit 1
  fi
}
run h100
# The A100 run with a what-if, so summarize also rebuilds summary.json's "whatif" object.
run a100 --set cluster.preset=dgx-a100 --whatif 'slow_gpu: {ranks: [3], factor: 1.5}'
(cd "$tmp" && "$bin" run "$qs" -o "$tmp/h100-again" >/dev/null 2>"$tmp/again.err") || { bad "run h100-again: $(cat "$tmp/again.err")"; exit 1; }
a=$tmp/h100/results.h5; b=$tmp/a100/results.h5

if $py -c 'import matplotlib' 2>/dev/null; then
  ok "matplotlib $($py -c 'import matplotlib; print(matplotlib.__version__)')"
else
  bad "matplotlib is not installed for $py: install python3-matplotlib (scripts/setup.sh)"
fi

# --- every script: shebang, executable, --help ----------------------------------------------------
for s in summarize timeline memory compare sweep; do
  f=$post/$s.py
  [ "$(head -1 "$f")" = "#!/usr/bin/python3" ] || bad "$s.py: first line is not #!/usr/bin/python3"
  [ -x "$f" ] || bad "$s.py: not executable"
  if "$f" --help >"$tmp/help" 2>&1 && grep -q "usage:" "$tmp/help"; then ok "$s.py --help"
  else bad "$s.py --help:"; cat "$tmp/help"; fi
done
for s in summarize timeline memory compare sweep; do
  grep -q "^import scalescope_results as sr" "$post/$s.py" || bad "$s.py: does not import scalescope_results"
  grep -q "h5py" "$post/$s.py" && bad "$s.py: reads h5py itself instead of scalescope_results"
done

# --- summarize ---------------------------------------------------------------------------------
for r in h100 a100; do
  f=$tmp/$r/results.h5
  if "$post/summarize.py" "$f" >"$tmp/$r.txt" 2>"$tmp/err"; then ok "summarize $r (text)"
  else bad "summarize $r: $(cat "$tmp/err")"; continue; fi
  for want in "iteration time" "tokens/s" "MFU" "model TFLOP/s per GPU" "peak memory" \
              "pipeline stages" "stage" "finish max" "static GiB" "engine" "events committed"; do
    grep -q -- "$want" "$tmp/$r.txt" || bad "summarize $r: no '$want' in the text"
  done
  "$post/summarize.py" --json "$f" >"$tmp/$r.json" 2>"$tmp/err" || { bad "summarize --json $r: $(cat "$tmp/err")"; continue; }
  # Every number of summary.json, and the stage table against /summary and /ranks.
  if $py - "$tmp/$r/summary.json" "$tmp/$r.json" "$tmp/$r.txt" >"$tmp/check" 2>&1 <<'PY'
import json, math, sys
ref = json.load(open(sys.argv[1])); got = json.load(open(sys.argv[2])); text = open(sys.argv[3]).read()
errors = []
def same(path, x, y):
    if isinstance(x, dict):
        for k in x:
            if k not in y: errors.append(f"{path}.{k}: missing"); continue
            same(f"{path}.{k}", x[k], y[k])
    elif isinstance(x, list):
        if len(x) != len(y): errors.append(f"{path}: length {len(x)} vs {len(y)}"); return
        for i, (u, v) in enumerate(zip(x, y)): same(f"{path}[{i}]", u, v)
    elif isinstance(x, float) or isinstance(y, float):
        if x is None or y is None or not math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-15):
            errors.append(f"{path}: summary.json {x!r}, summarize {y!r}")
    elif x != y:
        errors.append(f"{path}: summary.json {x!r}, summarize {y!r}")
same("", ref, got)
stages = got["stages"]
if [s["peak_memory_bytes"] for s in stages] != ref["peak_memory_bytes_by_pp_stage"]:
    errors.append("stage peak memory != peak_memory_bytes_by_pp_stage")
if not math.isclose(max(s["finish_max_s"] for s in stages), ref["iteration_time_s"], rel_tol=1e-12):
    errors.append("max stage finish != iteration_time_s")
if sum(s["ranks"] for s in stages) != ref["world_size"]:
    errors.append("stage rank counts do not add up to world_size")
for s in stages:
    total = sum(s[f"{t}_mean_s"] for t in ("compute", "exposed_tp", "exposed_pp", "exposed_dp",
                                           "exposed_embedding", "exposed_cp", "exposed_ep", "bubble",
                                           "straggler_wait", "host_wait", "other_wait"))
    if not (s["finish_min_s"] - 1e-9 <= total <= s["finish_max_s"] + 1e-9):
        errors.append(f"stage {s['stage']}: mean breakdown {total} outside [finish min, max]")
for want in (f"{ref['iteration_time_s']:.6f} s", f"{ref['tokens_per_s']:.1f} tokens/s",
             f"{ref['model_tflops_per_gpu']:.2f}", f"{ref['mfu'] * 100:.2f} %",
             f"{ref['peak_memory_bytes'] / 2**30:.2f} GiB", ref["model"], ref["gpu"]):
    if want not in text: errors.append(f"text has no '{want}'")
for st, peak in enumerate(ref["peak_memory_bytes_by_pp_stage"]):
    if not any(l.split()[:1] == [str(st)] and f"{peak / 2**30:.2f}" in l for l in text.splitlines()):
        errors.append(f"text has no stage {st} row with peak {peak / 2**30:.2f} GiB")
print("\n".join(errors) or "equal")
sys.exit(1 if errors else 0)
PY
  then ok "summarize $r equals summary.json"
  else bad "summarize $r differs from summary.json:"; cat "$tmp/check"; fi
done

# --- plots ---------------------------------------------------------------------------------------
check_png() {  # check_png NAME FILE
  local name=$1 f=$2
  if [ ! -f "$f" ]; then bad "$name: $f not written"; return; fi
  local magic size
  magic=$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')
  size=$(stat -c %s "$f")
  if [ "$magic" != "89504e470d0a1a0a" ]; then bad "$name: $f is not a PNG (magic $magic)"; return; fi
  if [ "$size" -lt 20000 ]; then bad "$name: $f is only $size bytes"; return; fi
  ok "$name: $(basename "$f") PNG, $size bytes"
}
plot() {  # plot NAME OUTPUT COMMAND...
  local name=$1 out=$2; shift 2
  rm -f "$out"
  if "$@" >"$tmp/plot.out" 2>"$tmp/plot.err"; then check_png "$name" "$out"
  else bad "$name: exit $?: $(cat "$tmp/plot.err")"; fi
}
plot "timeline h100" "$tmp/h100/timeline.png" "$post/timeline.py" "$a" --ranks 0,32 -o "$tmp/h100/timeline.png"
plot "timeline a100 window by kind" "$tmp/a100/timeline-zoom.png" \
  "$post/timeline.py" "$b" --ranks 32 -o "$tmp/a100/timeline-zoom.png" --start 0.01 --end 0.06 --color-by kind
plot "timeline all traced" "$tmp/a100/timeline.png" "$post/timeline.py" "$b" -o "$tmp/a100/timeline.png"
plot "memory h100" "$tmp/h100/memory.png" "$post/memory.py" "$a" -o "$tmp/h100/memory.png"
plot "memory a100 rank 32" "$tmp/a100/memory.png" "$post/memory.py" "$b" --ranks 32 -o "$tmp/a100/memory.png"
left=$(find "$tmp" -name '*.tmp' | wc -l)
[ "$left" -eq 0 ] && ok "no temporary PNG left" || bad "$left temporary files left"

# --- compare -------------------------------------------------------------------------------------
expect_rc() {  # expect_rc NAME RC COMMAND...
  local name=$1 want=$2; shift 2
  "$@" >"$tmp/cmp.out" 2>&1; local rc=$?
  if [ $rc -eq "$want" ]; then ok "$name: exit $rc, $(tail -1 "$tmp/cmp.out")"
  else bad "$name: exit $rc, expected $want:"; tail -5 "$tmp/cmp.out"; fi
}
expect_rc "compare same file" 0 "$post/compare.py" "$a" "$a"
expect_rc "compare a repeated run" 0 "$post/compare.py" "$a" "$tmp/h100-again/results.h5"
expect_rc "compare H100 vs A100" 1 "$post/compare.py" --max-diffs 100 "$a" "$b"
grep -q "iteration_time_s" "$tmp/cmp.out" && grep -q "pipeline stages" "$tmp/cmp.out" \
  && grep -q "/ranks/finish_ns" "$tmp/cmp.out" || bad "compare H100 vs A100: table or difference list missing"
expect_rc "compare H100 vs A100 within rtol 10 (GPU names still differ)" 1 \
  "$post/compare.py" -q --rtol 10 "$a" "$b"
# Only /engine differs (wall time): identical.
cp "$a" "$tmp/engine.h5"
$py -c 'import h5py, sys
with h5py.File(sys.argv[1], "a") as f: f["engine"].attrs["wall_s"] = 1234.5' "$tmp/engine.h5"
expect_rc "compare ignoring /engine" 0 "$post/compare.py" -q "$a" "$tmp/engine.h5"
# One value changed by 1e-9 relative: different at rtol 0, equal at rtol 1e-6.
cp "$a" "$tmp/nudged.h5"
$py -c 'import h5py, sys
with h5py.File(sys.argv[1], "a") as f:
    d = f["ranks/finish_ns"]; v = d[()]; v[5] += max(1, int(v[5] * 1e-9)); d[...] = v' "$tmp/nudged.h5"
expect_rc "compare nudged value" 1 "$post/compare.py" -q "$a" "$tmp/nudged.h5"
expect_rc "compare nudged value --rtol 1e-6" 0 "$post/compare.py" -q --rtol 1e-6 "$a" "$tmp/nudged.h5"

# --- error paths: exit 1, exactly one line, no traceback, no PNG -----------------------------------
expect_error() {  # expect_error NAME PATTERN COMMAND...
  local name=$1 pattern=$2; shift 2
  rm -f "$tmp/err.png"
  "$@" >"$tmp/e.out" 2>&1; local rc=$?
  local lines; lines=$(wc -l <"$tmp/e.out")
  if [ $rc -ne 1 ]; then bad "$name: exit $rc, expected 1:"; head -5 "$tmp/e.out"; return; fi
  if [ "$lines" -ne 1 ]; then bad "$name: $lines lines of output:"; head -5 "$tmp/e.out"; return; fi
  if ! grep -q -- "$pattern" "$tmp/e.out"; then bad "$name: no '$pattern' in: $(cat "$tmp/e.out")"; return; fi
  if [ -e "$tmp/err.png" ]; then bad "$name: wrote $tmp/err.png"; return; fi
  ok "$name: $(cat "$tmp/e.out")"
}
head -c $(( $(stat -c %s "$a") / 2 )) "$a" >"$tmp/truncated.h5"
echo "not hdf5" >"$tmp/text.h5"
cp "$a" "$tmp/no-ranks.h5"
$py -c 'import h5py, sys
with h5py.File(sys.argv[1], "a") as f:
    del f["ranks/finish_ns"]; del f["ranks/static_memory_bytes"]; del f["memory/32"]
    del f["timeline"].attrs["phase_names"]' "$tmp/no-ranks.h5"
for s in summarize timeline memory; do
  o=(); [ $s != summarize ] && o=(-o "$tmp/err.png")
  expect_error "$s missing file" "absent.h5: no such file" "$post/$s.py" "$tmp/absent.h5" "${o[@]}"
  expect_error "$s truncated file" "truncated.h5: cannot open" "$post/$s.py" "$tmp/truncated.h5" "${o[@]}"
  expect_error "$s not HDF5" "text.h5: cannot open" "$post/$s.py" "$tmp/text.h5" "${o[@]}"
done
expect_error "summarize missing dataset" "/ranks/finish_ns: missing" "$post/summarize.py" "$tmp/no-ranks.h5"
expect_error "timeline missing attribute" "/timeline: attribute 'phase_names' missing" \
  "$post/timeline.py" "$tmp/no-ranks.h5" -o "$tmp/err.png"
expect_error "memory missing dataset" "/ranks/static_memory_bytes: missing" \
  "$post/memory.py" "$tmp/no-ranks.h5" --ranks 0 -o "$tmp/err.png"
expect_error "memory untraced rank" "rank 32 not traced (traced ranks: 0)" \
  "$post/memory.py" "$tmp/no-ranks.h5" -o "$tmp/err.png" --ranks 32
expect_error "compare missing file" "absent.h5: no such file" "$post/compare.py" "$a" "$tmp/absent.h5"
expect_error "compare truncated file" "truncated.h5: cannot open" "$post/compare.py" "$tmp/truncated.h5" "$a"
expect_error "timeline untraced rank" "rank 8 not traced (traced ranks: 0, 32)" \
  "$post/timeline.py" "$a" --ranks 0,8 -o "$tmp/err.png"
expect_error "memory untraced ranks" "ranks 1, 2 not traced (traced ranks: 0, 32)" \
  "$post/memory.py" "$a" --ranks 0-2 -o "$tmp/err.png"
expect_error "timeline into a missing directory" "does not exist" \
  "$post/timeline.py" "$a" -o "$tmp/no-dir/err.png"

# --- sweep.py on a sweep of the quickstart: every TP × PP layout, micro-batch 1 and 2 ----------
if "$bin" sweep "$qs" --search parallel --vary training.micro_batch_size=1,2 -q -o "$tmp/sweep" \
    2>"$tmp/err"; then ok "sweep"; else bad "sweep: $(cat "$tmp/err")"; fi
plot "sweep.py" "$tmp/sweep.png" "$post/sweep.py" "$tmp/sweep" -o "$tmp/sweep.png"
"$post/sweep.py" "$tmp/sweep" --json >"$tmp/front.json" 2>"$tmp/err" || bad "sweep.py --json: $(cat "$tmp/err")"
# The front by its definition (no fitting configuration at most as slow and at most as large,
# and better in one), checked pairwise over the CSV, against the script's.
if $py - "$tmp/sweep/sweep.csv" "$tmp/front.json" <<'PY'; then ok "sweep.py Pareto front"; else bad "sweep.py Pareto front"; fi
import csv, json, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["status"] == "ok"]
pt = {int(r["index"]): (float(r["iteration_time_s"]), float(r["peak_memory_gib"])) for r in rows}
def dominated(i):
    t, m = pt[i]
    return any(j != i and pt[j][0] <= t and pt[j][1] <= m and (pt[j] != pt[i] or j < i)
               for j in pt)
want = sorted(i for i in pt if not dominated(i))
got = [r["index"] for r in json.load(open(sys.argv[2]))["pareto_front"]]
assert sorted(got) == want, (got, want)
assert len(want) >= 2, want   # 8 layers on 64 GPUs: more memory buys time
times = [pt[i][0] for i in got]
assert times == sorted(times), times  # fastest first
PY
"$post/sweep.py" "$tmp/sweep" >"$tmp/sweep.txt" 2>&1 || bad "sweep.py text: $(cat "$tmp/sweep.txt")"
grep -q "56 configurations" "$tmp/sweep.txt" && grep -q "^best: " "$tmp/sweep.txt" &&
  ok "sweep.py text" || bad "sweep.py text: $(head -3 "$tmp/sweep.txt")"
echo '{"rows": [{"index": 0}]}' >"$tmp/bad-sweep.json"
expect_error "sweep.py missing file" "absent.json: cannot read" "$post/sweep.py" "$tmp/absent.json"
expect_error "sweep.py not a table" "row 0 lacks status" "$post/sweep.py" "$tmp/bad-sweep.json"
expect_error "sweep.py not JSON" "not JSON" "$post/sweep.py" "$tmp/sweep/sweep.csv"

# --- report.py: the HTML page of a run (with a what-if) and of a sweep; its error paths ----------
# (tests/post/report_test.py opens them in Chromium.)
if "$post/report.py" "$tmp/a100" -o "$tmp/a100.html" >"$tmp/report.txt" 2>&1 &&
   grep -q "What-if" "$tmp/a100.html" && grep -q "slow_gpu" "$tmp/a100.html" &&
   grep -q '<svg width="1100" height="[0-9]*" role="img" id="gantt">' "$tmp/a100.html"; then
  ok "report.py run with a what-if"
else
  bad "report.py run: $(cat "$tmp/report.txt")"
fi
"$post/report.py" "$tmp/sweep" >"$tmp/report.txt" 2>&1 && grep -q 'id="sweep-table"' "$tmp/sweep/report.html" &&
  ok "report.py sweep (default output DIR/report.html)" || bad "report.py sweep: $(cat "$tmp/report.txt")"
# A hybrid run with a host sandbox: the page says the iteration time is a functional check and
# gives the pure replay's figure (summary.json's, formatted as the page formats seconds).
"$bin" run "$qs" --set model.num_layers=2 --sandbox 0 -o "$tmp/hybrid" --quiet &&
  "$post/report.py" "$tmp/hybrid" >"$tmp/report.txt" 2>&1 &&
  pure=$($py -c 'import json, sys; s = json.load(open(sys.argv[1]))["sandbox"]["pure_replay_iteration_time_s"]; print(f"{s * 1e3:.2f} ms")' "$tmp/hybrid/summary.json") &&
  grep -q "Functional check, not a prediction" "$tmp/hybrid/report.html" &&
  grep -q "predicts <b>$pure</b>" "$tmp/hybrid/report.html" &&
  ok "report.py hybrid run: functional check, pure replay $pure" || bad "report.py hybrid run: $(cat "$tmp/report.txt")"
# A replayed Chakra trace: the page names the trace, not the placeholder model of its configuration.
"$bin" chakra-microbench all_reduce "$tmp/mb/ar" --ranks 8 >/dev/null && "$bin" run --chakra "$tmp/mb/ar" -o "$tmp/chakra" --quiet &&
  "$post/report.py" "$tmp/chakra" >"$tmp/report.txt" 2>&1 && grep -q "Chakra execution traces $tmp/mb/ar (8 rank files)" "$tmp/chakra/report.html" &&
  ! grep -q "llama3-8b" "$tmp/chakra/report.html" && ok "report.py Chakra run" || bad "report.py Chakra run: $(cat "$tmp/report.txt")"
# `scalescope report` runs the same script.
"$bin" report "$tmp/h100" -o "$tmp/h100-cli.html" >"$tmp/report.txt" 2>&1 && "$post/report.py" "$tmp/h100" -o "$tmp/h100-py.html" >/dev/null &&
  cmp -s <(sed 's|/tmp[^<"]*||g' "$tmp/h100-cli.html") <(sed 's|/tmp[^<"]*||g' "$tmp/h100-py.html") &&
  ok "scalescope report = report.py" || bad "scalescope report: $(cat "$tmp/report.txt")"
expect_error "scalescope report missing directory" "absent-dir: not a directory" "$bin" report "$tmp/absent-dir"
mkdir -p "$tmp/broken-run" && echo '{"world_size": ' >"$tmp/broken-run/summary.json"
expect_error "report.py missing directory" "absent-dir: not a directory" "$post/report.py" "$tmp/absent-dir"
mkdir -p "$tmp/empty-dir"
expect_error "report.py neither run nor sweep" "neither a run" "$post/report.py" "$tmp/empty-dir"
expect_error "report.py corrupt summary.json" "summary.json: not JSON" "$post/report.py" "$tmp/broken-run"
[ ! -e "$tmp/broken-run/report.html" ] && ok "report.py writes nothing on error" ||
  bad "report.py left a report.html after an error"
# Issue 38: a summary.json without a figure (it was "KeyError: 'engine'"), a results.h5 whose
# values are out of range or do not add up (they were rendered), and two files of different runs.
for case in no-engine mixed big-time bad-sum nan-mfu; do cp -r "$tmp/h100" "$tmp/$case"; done
$py - "$tmp" <<'PY'
import json, sys, h5py, numpy as np
d = sys.argv[1]
s = json.load(open(f"{d}/no-engine/summary.json")); del s["engine"]
json.dump(s, open(f"{d}/no-engine/summary.json", "w"))
json.dump(json.load(open(f"{d}/a100/summary.json")), open(f"{d}/mixed/summary.json", "w"))
with h5py.File(f"{d}/big-time/results.h5", "r+") as f:
    f["summary"].attrs["iteration_time_ns"] = np.int64(2**63 - 1)
with h5py.File(f"{d}/bad-sum/results.h5", "r+") as f:
    c = f["ranks/compute_ns"]; v = c[:]; v[3] += 1; c[...] = v
with h5py.File(f"{d}/nan-mfu/results.h5", "r+") as f:
    f["summary"].attrs["mfu"] = np.nan
PY
expect_error "report.py summary.json lacks a figure" "summary.json: no 'engine'" "$post/report.py" "$tmp/no-engine"
expect_error "report.py files of two runs" "the two files are not of one run" "$post/report.py" "$tmp/mixed"
expect_error "report.py time out of range" "/summary: iteration_time_ns=9223372036854775807 is outside" "$post/report.py" "$tmp/big-time"
expect_error "report.py terms do not add up" "/ranks: rank 3: the time terms add up to" "$post/report.py" "$tmp/bad-sum"
expect_error "report.py NaN MFU" "/summary: mfu=nan is outside" "$post/report.py" "$tmp/nan-mfu"

[ $fail -eq 0 ] && echo "all post-processing checks passed"
exit $fail
