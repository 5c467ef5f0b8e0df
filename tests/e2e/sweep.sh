#!/usr/bin/env bash
# `scalescope sweep`: each configuration gives what `scalescope run` gives for it, refused plans
# and configurations that do not fit are rows that say so, bad axes are one-line errors with no
# output, and the table is the same at np 1, 2, 3 and 4 (optimistic process groups at 3 and 4).
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
qs=$repo/inputs/experiments/quickstart.yaml
# 3 TP values × 2 micro-batch sizes: TP 3 is refused (it does not divide the sequence under SP).
# DP derived from the 64 GPUs (the file pins it to 8).
axes=(--set parallel.dp= --vary parallel.tp=2,3,4 --vary training.micro_batch_size=1,2)
"$bin" sweep "$qs" "${axes[@]}" -q -o "$tmp/s1"
mpirun -np 2 "$bin" sweep "$qs" "${axes[@]}" -q -o "$tmp/s2"
cmp "$tmp/s1/sweep.csv" "$tmp/s2/sweep.csv"
cmp "$tmp/s1/sweep.json" "$tmp/s2/sweep.json"
# More processes than configurations: a group of processes replays each on the optimistic engine
# (np 4, 2 configurations: groups of 2; np 3: a group of 2 and one sequential process).
few=(--set parallel.dp= --vary parallel.tp=2,4 -q)
"$bin" sweep "$qs" "${few[@]}" -o "$tmp/f1"
mpirun -np 4 "$bin" sweep "$qs" "${few[@]}" -o "$tmp/f4"
mpirun -np 3 "$bin" sweep "$qs" "${few[@]}" -o "$tmp/f3"
cmp "$tmp/f1/sweep.csv" "$tmp/f4/sweep.csv"
cmp "$tmp/f1/sweep.csv" "$tmp/f3/sweep.csv"
# The same axes from the file's sweep: section give the same table.
{ cat "$qs"; printf 'sweep:\n  vary:\n    parallel.tp: [2, 3, 4]\n    training.micro_batch_size: [1, 2]\n'; } \
  >"$tmp/with-sweep.yaml"
"$bin" sweep "$tmp/with-sweep.yaml" --set parallel.dp= -q -o "$tmp/s3"
# (the refusals name the experiment file, which differs)
cmp <(sed "s#$qs#EXP#g" "$tmp/s1/sweep.csv") <(sed "s#$tmp/with-sweep.yaml#EXP#g" "$tmp/s3/sweep.csv")
# The same two configurations through `scalescope run`.
"$bin" run "$qs" --set parallel.dp= --set parallel.tp=4 --set training.micro_batch_size=2 \
  -o "$tmp/r42" --quiet
"$bin" run "$qs" --set parallel.dp= --set parallel.tp=2 --set training.micro_batch_size=1 \
  -o "$tmp/r21" --quiet
# Memory: micro-batch 16 at TP 1, PP 1 needs more than an H100's 80 GB (78.8 GiB at 8, the
# activations of 8 more sequences on top), so it is reported, and replayed only on request.
common=(--set parallel.dp= --set parallel.sequence_parallel=false --set training.global_batch_size=1024
  --vary parallel.tp=1 --vary parallel.pp=1 --vary training.micro_batch_size=4,16)
"$bin" sweep "$qs" "${common[@]}" -q -o "$tmp/m1"
"$bin" sweep "$qs" "${common[@]}" --replay-unfit -q -o "$tmp/m2"
# Bad axes: one line, non-zero, nothing written.
for bad in "parallel.tpx=1,2" "parallel.tp=" "parallel.recompute_modules=[mlp"; do
  if "$bin" sweep "$qs" --vary "$bad" -o "$tmp/bad" 2>"$tmp/err"; then
    echo "sweep accepted --vary $bad"; exit 1
  fi
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || { cat "$tmp/err"; exit 1; }
  [ ! -e "$tmp/bad" ] || { echo "output written for --vary $bad"; exit 1; }
done
# A corrupt file met by one process's configuration (here cost.profile) stops the sweep with
# its one-line error on every process count, and nothing is written (no process hangs).
echo "not hdf5" >"$tmp/junk.h5"
for np in 1 2; do
  if timeout 120 mpirun -np $np "$bin" sweep "$qs" --vary "cost.profile=~,$tmp/junk.h5" -q \
      -o "$tmp/junk$np" 2>"$tmp/err"; then
    echo "sweep with a corrupt profile succeeded at np $np"; exit 1
  fi
  grep -q "junk.h5: cannot open as an HDF5 file" "$tmp/err" || { cat "$tmp/err"; exit 1; }
  [ ! -e "$tmp/junk$np" ] || { echo "output written at np $np"; exit 1; }
done
/usr/bin/python3 - "$tmp" <<'PY'
import csv, json, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/s1/sweep.csv")))
assert len(rows) == 6, len(rows)
by = {r["overrides"]: r for r in rows}
for tp, mb, run in ((4, 2, "r42"), (2, 1, "r21")):
    r = by[f"parallel.tp={tp} training.micro_batch_size={mb}"]
    s = json.load(open(f"{d}/{run}/summary.json"))
    assert r["status"] == "ok", r
    # The same pipeline: the very same iteration time and peak memory.
    assert float(r["iteration_time_s"]) == s["iteration_time_s"], (r, s["iteration_time_s"])
    assert float(r["tokens_per_s"]) == s["tokens_per_s"]
    assert (int(r["tp"]), int(r["dp"]), int(r["micro_batch_size"])) == (tp, 64 // (tp * 2), mb)
refused = [r for r in rows if r["status"] == "invalid"]
assert len(refused) == 2 and all("parallel.tp=3" in r["overrides"] for r in refused), refused
assert all("does not divide model.seq_length" in r["message"] for r in refused), refused
assert [r["status"] for r in rows] == ["ok"] * 4 + ["invalid"] * 2
times = [float(r["iteration_time_s"]) for r in rows[:4]]
assert times == sorted(times), times  # ranked by iteration time
assert [int(r["rank"]) for r in rows] == list(range(1, 7))
m1 = {r["micro_batch_size"]: r for r in csv.DictReader(open(f"{d}/m1/sweep.csv"))}
m2 = {r["micro_batch_size"]: r for r in csv.DictReader(open(f"{d}/m2/sweep.csv"))}
assert m1["4"]["status"] == "ok" and m1["16"]["status"] == "does_not_fit", m1
assert m1["16"]["replayed"] == "false" and m1["16"]["iteration_time_s"] == ""  # not 0: empty
assert all(r["iteration_time_s"] == r["peak_memory_gib"] == "" for r in refused), refused
assert float(m1["16"]["peak_memory_gib"]) > float(m1["16"]["memory_capacity_gib"])
assert "needs" in m1["16"]["message"], m1["16"]
assert m2["16"]["status"] == "does_not_fit" and m2["16"]["replayed"] == "true"
assert float(m2["16"]["iteration_time_s"]) > 0
assert m2["16"]["peak_memory_gib"] == m1["16"]["peak_memory_gib"]  # templates = replay
print("ok")
PY
# A killed sweep keeps the configurations it finished (issue 38: it kept none): each is in the
# journal as it finishes; --resume replays only the others and gives the table of an
# uninterrupted sweep, byte for byte; a journal of another sweep is refused. Llama 3 70B on 1,024
# GPUs, 4 configurations of ~0.3 s each here, killed once one is in the journal.
big=$repo/inputs/experiments/llama3-70b-1k.yaml
kaxes=(--vary training.micro_batch_size=1,2 --vary training.global_batch_size=256,512)
"$bin" sweep "$big" "${kaxes[@]}" -q -o "$tmp/kfull"
"$bin" sweep "$big" "${kaxes[@]}" -q -o "$tmp/k" &
pid=$!
rows=0
for _ in $(seq 1 6000); do
  rows=$( (cat "$tmp"/k/sweep.journal.*.jsonl 2>/dev/null || true) | wc -l)
  [ "$rows" -ge 2 ] && break
  sleep 0.01
done
kill -9 "$pid" 2>/dev/null || { echo "the sweep ended before it could be killed" >&2; exit 1; }
wait "$pid" 2>/dev/null || true
if [ "$rows" -lt 2 ]; then echo "the sweep's journal never held a finished row" >&2; exit 1; fi
test ! -e "$tmp/k/sweep.csv"
"$bin" sweep "$big" "${kaxes[@]}" -o "$tmp/k" --resume >/dev/null 2>"$tmp/resume.err"
grep -q "resuming: [1-3] of 4 configurations were finished" "$tmp/resume.err"
resumed=$(cat "$tmp/resume.err")
cmp "$tmp/kfull/sweep.csv" "$tmp/k/sweep.csv"
cmp "$tmp/kfull/sweep.json" "$tmp/k/sweep.json"
test -z "$(ls "$tmp"/k/sweep.journal.* 2>/dev/null)"
printf '{"fingerprint": "0000000000000000"}\n' >"$tmp/k/sweep.journal.0.jsonl"
if "$bin" sweep "$big" "${kaxes[@]}" -q -o "$tmp/k" --resume 2>"$tmp/resume.err"; then
  echo "a journal of another sweep was accepted" >&2; exit 1
fi
grep -q "sweep.journal.0.jsonl: the journal is of another sweep" "$tmp/resume.err"
echo "ok: killed sweep, then $resumed"
