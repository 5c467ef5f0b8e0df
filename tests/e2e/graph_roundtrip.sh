#!/usr/bin/env bash
# `scalescope graph` + `scalescope run --graph` gives the same results as a direct run.
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
qs=$repo/inputs/experiments/quickstart.yaml
"$bin" run "$qs" -o "$tmp/direct" --quiet
"$bin" graph "$qs" -o "$tmp/graph.h5" >/dev/null
"$bin" run --graph "$tmp/graph.h5" -o "$tmp/replayed" --quiet
"$bin" run "$qs" --graph "$tmp/graph.h5" -o "$tmp/replayed2" --quiet
# same_run A B...: runs B... have run A's summary (wall times aside), /ranks and timelines.
cat >"$tmp/same_run.py" <<'PY'
import json, sys, h5py, numpy as np
def summary(p):
    s = json.load(open(p))
    s["engine"].pop("wall_s"); s["engine"].pop("committed_events_per_s", None)
    return s
a = sys.argv[1]
for b in sys.argv[2:]:
    assert summary(f"{a}/summary.json") == summary(f"{b}/summary.json"), b
    with h5py.File(f"{a}/results.h5") as x, h5py.File(f"{b}/results.h5") as y:
        for k in x["ranks"]:
            assert np.array_equal(x["ranks"][k][:], y["ranks"][k][:]), (b, k)
        for r in x.get("timeline", {}):
            assert np.array_equal(x["timeline"][r][:], y["timeline"][r][:]), (b, r)
print("ok:", " ".join(sys.argv[2:]), "= ", a)
PY
/usr/bin/python3 "$tmp/same_run.py" "$tmp/direct" "$tmp/replayed" "$tmp/replayed2"

# The recorded configuration reproduces the run (issue 38): a graph built for dgx-h100 replayed on
# dgx-a100 records the A100 cluster (it used to record the graph's H100 one, whose re-run gave
# 0.190 s instead of 0.494 s); running that recorded configuration gives the same summary and
# per-rank results bit for bit.
"$bin" run "$qs" --graph "$tmp/graph.h5" --set cluster.preset=dgx-a100 -o "$tmp/a100" --quiet
/usr/bin/python3 - "$tmp" <<'PY'
import sys, h5py
d = sys.argv[1]
with h5py.File(f"{d}/a100/results.h5") as f:
    text = f["meta"].attrs["config_text"]
text = text.decode() if isinstance(text, bytes) else text
assert "gpu: A100-SXM4-80GB" in text, "recorded configuration is not the A100 one"
open(f"{d}/recorded.yaml", "w").write(text)
PY
"$bin" run "$tmp/recorded.yaml" -o "$tmp/rerun" --quiet
/usr/bin/python3 "$tmp/same_run.py" "$tmp/a100" "$tmp/rerun"

# A job that does not fit: run --graph proposes the changes run CONFIG proposes (they are tried
# on the configuration that ran; a run of a stored graph once proposed none).
oom=(--set model.seq_length=65536 --set training.micro_batch_size=4 --set parallel.recompute=none)
"$bin" run "$qs" "${oom[@]}" -o "$tmp/oom-direct" --quiet 2>/dev/null
"$bin" graph "$qs" "${oom[@]}" -o "$tmp/oom.h5" >/dev/null
"$bin" run --graph "$tmp/oom.h5" -o "$tmp/oom-graph" --quiet 2>/dev/null
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
a = json.load(open(f"{d}/oom-direct/summary.json"))["memory"]
b = json.load(open(f"{d}/oom-graph/summary.json"))["memory"]
assert not a["fits"] and a.get("fixes"), a
assert a["fixes"] == b.get("fixes"), (a.get("fixes"), b.get("fixes"))
print("ok: run --graph proposes the same", len(a["fixes"]), "memory fixes")
PY
