#!/usr/bin/env bash
# Chakra ET round trip through the CLI: export-chakra of the quickstart graph, graph --chakra back,
# both replayed give the same iteration time; run --chakra replays ASTRA-sim's 8-NPU 1 MB
# all-reduce microbenchmark; our own microbenchmarks (8 … 16,384 ranks) replay identically at
# np 1 and 2; --expand dp=N; the MSCCL ring fixture replays with eager sends; a truncated trace
# is a one-line error with no output.
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
qs=$repo/inputs/experiments/quickstart.yaml
"$bin" graph "$qs" -o "$tmp/graph.h5" >/dev/null
"$bin" export-chakra "$tmp/graph.h5" "$tmp/et/qs" >/dev/null
test "$(ls "$tmp"/et/qs.*.et | wc -l)" -eq 64
"$bin" graph --chakra "$tmp/et/qs" -o "$tmp/back.h5" >/dev/null
"$bin" run --graph "$tmp/graph.h5" -o "$tmp/direct" --quiet
"$bin" run --graph "$tmp/back.h5" -o "$tmp/back" --quiet
"$bin" run --chakra "$tmp/et/qs" -o "$tmp/chakra" --quiet
# No METADATA node by default (stock ASTRA-sim stops on one); the groups for its
# --comm-group-configuration beside the files. On another cluster than the placeholder's
# (dgx-a100), the round trip keeps the cluster the graph was built for (GlobalMetadata ss_config),
# also in the --metadata-node flavour.
test -f "$tmp/et/qs.comm_groups.json"
"$bin" graph "$qs" --set cluster.preset=dgx-a100 -o "$tmp/a100.h5" >/dev/null
"$bin" export-chakra "$tmp/a100.h5" "$tmp/et/a100" >/dev/null
"$bin" export-chakra "$tmp/a100.h5" "$tmp/et/a100m" --metadata-node >/dev/null
"$bin" run --graph "$tmp/a100.h5" -o "$tmp/a100-direct" --quiet
"$bin" run --chakra "$tmp/et/a100" -o "$tmp/a100-chakra" --quiet
"$bin" run --chakra "$tmp/et/a100m" -o "$tmp/a100-meta" --quiet
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
t = [json.load(open(f"{d}/{o}/summary.json"))["iteration_time_s"]
     for o in ("a100-direct", "a100-chakra", "a100-meta")]
assert t[0] == t[1] == t[2], t
print("dgx-a100 round trip, both flavours:", t[0])
PY
# An imported trace replays identically under the optimistic engine (np 2).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpirun -np 2 "$bin" run --chakra "$tmp/et/qs" --set run.engine=optimistic -o "$tmp/chakra2" --quiet
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
import h5py, numpy as np
d = sys.argv[1]
t = [json.load(open(f"{d}/{o}/summary.json"))["iteration_time_s"] for o in ("direct", "back", "chakra")]
assert t[0] == t[1] == t[2], t
def ranks(run):
    with h5py.File(f"{d}/{run}/results.h5") as f:
        return {k: f["ranks"][k][()] for k in f["ranks"]}
a, b = ranks("chakra"), ranks("chakra2")
assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a), "np 2 differs"
print("round trip ok:", t[0], "s; np 2 identical")
PY

# ASTRA-sim-style microbenchmarks written by our writer (chakra-microbench): 1 MB all-reduce,
# all-gather and all-to-all on 8 … 16,384 ranks, replayed at np 1 and np 2, bit-identical; and
# --expand dp=8 of a one-rank all-reduce replays as the 8-rank one.
for kind in all_reduce all_gather all_to_all; do
  for n in 8 1024 16384; do
    [ $kind != all_reduce ] && [ $n = 16384 ] && continue
    mkdir -p "$tmp/mb/$kind$n"
    "$bin" chakra-microbench $kind "$tmp/mb/$kind$n/t" --ranks $n >/dev/null
    "$bin" run --chakra "$tmp/mb/$kind$n/t" -o "$tmp/mb/$kind$n.np1" --quiet
    mpirun -np 2 "$bin" run --chakra "$tmp/mb/$kind$n/t" --set run.engine=optimistic \
      -o "$tmp/mb/$kind$n.np2" --quiet
  done
done
mkdir -p "$tmp/mb/one"
"$bin" chakra-microbench all_reduce "$tmp/mb/one/t" --ranks 1 >/dev/null
"$bin" run --chakra "$tmp/mb/one/t" --expand dp=8 -o "$tmp/mb/expanded" --quiet
if "$bin" run --chakra "$tmp/mb/one/t" --expand tp=8 -o "$tmp/mb/bad" --quiet 2>"$tmp/err"; then
  echo "--expand tp=8 was accepted" >&2; exit 1
fi
test "$(wc -l < "$tmp/err")" -eq 1 && test ! -e "$tmp/mb/bad"
/usr/bin/python3 - "$tmp/mb" <<'PY'
import json, os, sys
import h5py, numpy as np
d = sys.argv[1]
for run in sorted(x[:-4] for x in os.listdir(d) if x.endswith(".np1")):
    a, b = (json.load(open(f"{d}/{run}.{np}/summary.json")) for np in ("np1", "np2"))
    assert a["iteration_time_s"] == b["iteration_time_s"] > 0, (run, a, b)
    with h5py.File(f"{d}/{run}.np1/results.h5") as fa, h5py.File(f"{d}/{run}.np2/results.h5") as fb:
        for k in fa["ranks"]:
            assert np.array_equal(fa["ranks"][k][()], fb["ranks"][k][()]), f"{run}: /ranks/{k}"
    print(f"{run}: {a['iteration_time_s'] * 1e6:.1f} us, np 2 identical")
e = json.load(open(f"{d}/expanded/summary.json"))["iteration_time_s"]
r8 = json.load(open(f"{d}/all_reduce8.np1/summary.json"))["iteration_time_s"]
assert e == r8, (e, r8)
print("expand dp=8 of one rank = the 8-rank all-reduce:", e)
# The 1,024-rank all-to-all of 1 MiB (1 KiB a peer; issue 38: it replayed in 34.8 us) is never
# faster than its lower bound on dgx-h100 (NIC latency 5 us, 400 Gb/s a GPU), derived by hand:
# NIC injection 5 + 1,040,384 B / 50e9 B/s = 25.8 us; NCCL's batches (16 p2p channels across
# DGX H100 nodes, each remote node's 8 ranks one batch, a channel's batches in turn): ceil(127/16)
# = 8 batches plus the first ready-to-receive, 9 x 5 us = 45 us.
a2a = json.load(open(f"{d}/all_to_all1024.np1/summary.json"))["iteration_time_s"]
assert a2a >= 45e-6 and a2a >= 25.8e-6, a2a
print(f"1,024-rank all-to-all of 1 MiB: {a2a * 1e6:.1f} us >= its 45 us lower bound")
PY

fixtures=$repo/../shared/formats/chakra-fixtures
if [ ! -d "$fixtures" ]; then
  echo "!!! $fixtures is absent: the ASTRA-sim fixture part of this test did NOT run !!!" >&2
  exit 77
fi
"$bin" run --chakra "$fixtures/all_reduce-8npus-1MB/all_reduce" --set cluster.preset=dgx-h100 \
  -o "$tmp/ar" --quiet
/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['iteration_time_s'] > 0; print('all_reduce fixture:', s['iteration_time_s'], 's')" "$tmp/ar/summary.json"

# The MSCCL ring all-reduce (every rank sends before it receives) replays with eager sends, the
# default for a foreign trace, identically at np 1 and 2 and through graph --chakra; forced to
# rendezvous it deadlocks, a one-line error with no output.
ring=$fixtures/custom-ring-allreduce-8npus-1MB/custom_allreduce
"$bin" run --chakra "$ring" -o "$tmp/ring1" --quiet
mpirun -np 2 "$bin" run --chakra "$ring" --set run.engine=optimistic -o "$tmp/ring2" --quiet
"$bin" graph --chakra "$ring" -o "$tmp/ring.h5" >/dev/null
"$bin" run --graph "$tmp/ring.h5" -o "$tmp/ring3" --quiet
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
import h5py, numpy as np
d = sys.argv[1]
t = [json.load(open(f"{d}/ring{i}/summary.json"))["iteration_time_s"] for i in (1, 2, 3)]
assert t[0] == t[1] == t[2] > 49e-6, t  # 7 reduction steps of 7 µs each, plus 14 transfers
with h5py.File(f"{d}/ring1/results.h5") as fa, h5py.File(f"{d}/ring2/results.h5") as fb:
    for k in fa["ranks"]:
        assert np.array_equal(fa["ranks"][k][()], fb["ranks"][k][()]), f"ring: /ranks/{k}"
print(f"MSCCL ring: {t[0] * 1e6:.1f} us, np 2 and graph.h5 identical")
PY
# With no host issue time every rank's eager ring transfer arrives at the same instant as its
# partner's: the critical-path walk once circled the ring forever there (host_launch_us < 3 µs,
# either preset). It must end, and its segments must fit in the iteration.
for preset in dgx-h100 dgx-a100; do
  for h in 0 1 2; do
    timeout 60 "$bin" run --chakra "$ring" --set cluster.preset=$preset \
      --set cluster.host_launch_us=$h -o "$tmp/ring_h$h-$preset" --quiet
    /usr/bin/python3 - "$tmp/ring_h$h-$preset/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
t, cp = s["iteration_time_s"], sum(s["critical_path"]["totals_s"].values())
assert t > 0 and 0 < cp <= t * (1 + 1e-9), (t, cp)
PY
  done
done
if "$bin" run --chakra "$ring" --set run.p2p=rendezvous -o "$tmp/ring_rv" --quiet 2>"$tmp/err"; then
  echo "the ring replayed with rendezvous sends" >&2; exit 1
fi
test "$(wc -l < "$tmp/err")" -eq 1 && grep -q "deadlocks with run.p2p=rendezvous" "$tmp/err"
test ! -e "$tmp/ring_rv"

# Errors: one line, exit ≠ 0, no outputs.
mkdir -p "$tmp/bad"
for r in 0 1; do head -c 60 "$fixtures/all_reduce-8npus-1MB/all_reduce.$r.et" > "$tmp/bad/t.$r.et"; done
if "$bin" run --chakra "$tmp/bad/t" -o "$tmp/bad_out" --quiet 2> "$tmp/err"; then
  echo "a truncated trace was accepted" >&2; exit 1
fi
test "$(wc -l < "$tmp/err")" -eq 1
grep -q "t.0.et" "$tmp/err"
grep -q "truncated" "$tmp/err"
test ! -e "$tmp/bad_out"
# A missing rank file: with .3.et gone beside .4 … .7 the trace once ran as 3 ranks, no word.
mkdir -p "$tmp/gap"
for r in 0 1 2 4 5 6 7; do cp "$fixtures/all_reduce-8npus-1MB/all_reduce.$r.et" "$tmp/gap/t.$r.et"; done
if "$bin" run --chakra "$tmp/gap/t" -o "$tmp/gap_out" --quiet 2> "$tmp/err"; then
  echo "a trace with a missing rank file was accepted" >&2; exit 1
fi
test "$(wc -l < "$tmp/err")" -eq 1
grep -q "rank file .*t.3.et is missing" "$tmp/err"
test ! -e "$tmp/gap_out"
# A killed export leaves no rank file under its final name (issue 38: 21 of 1,024 complete-looking
# files were left); the staging directory of the dead export, once ten minutes old, is removed by
# the next export of the same prefix. 256 ranks take ~2 s to export here.
"$bin" graph "$qs" --set cluster.num_gpus=256 --set parallel.dp=32 \
  --set training.global_batch_size=256 -o "$tmp/k.h5" >/dev/null
"$bin" export-chakra "$tmp/k.h5" "$tmp/kill/k" >/dev/null &
pid=$!
n=0
for _ in $(seq 1 1000); do
  n=$( (find "$tmp/kill/k.partial-$pid" -name 'k.*.et' 2>/dev/null || true) | wc -l)
  [ "$n" -ge 3 ] && break
  sleep 0.01
done
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
if [ "$n" -lt 3 ]; then echo "never saw the export's staging directory fill" >&2; exit 1; fi
if find "$tmp/kill" -maxdepth 1 -name 'k.*.et' | grep -q .; then
  echo "a killed export left rank files under their final names" >&2; exit 1
fi
touch -d '20 minutes ago' "$tmp/kill/k.partial-$pid"
"$bin" export-chakra "$tmp/k.h5" "$tmp/kill/k" >/dev/null
test "$(find "$tmp/kill" -maxdepth 1 -name 'k.*.et' | wc -l)" -eq 256
test ! -e "$tmp/kill/k.partial-$pid"
echo ok
