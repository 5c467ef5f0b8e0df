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
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys, h5py, numpy as np
d = sys.argv[1]
def summary(p):
    s = json.load(open(p))
    s["engine"].pop("wall_s"); s["engine"].pop("committed_events_per_s", None)
    return s
a = summary(f"{d}/direct/summary.json")
for other in ("replayed", "replayed2"):
    assert a == summary(f"{d}/{other}/summary.json"), other
    with h5py.File(f"{d}/direct/results.h5") as x, h5py.File(f"{d}/{other}/results.h5") as y:
        for k in x["ranks"]:
            assert np.array_equal(x["ranks"][k][:], y["ranks"][k][:]), k
        for r in x["timeline"]:
            assert np.array_equal(x["timeline"][r][:], y["timeline"][r][:]), r
print("ok")
PY
