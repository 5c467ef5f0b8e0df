#!/usr/bin/env bash
# The GPT-3 175B, 1,024-A100 experiment writes all three files, reports an MFU in [0.2, 0.7],
# and its files are readable with h5py and a JSON parser.
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$bin" run "$repo/inputs/experiments/gpt3-175b-1024.yaml" -o "$tmp/out" --quiet
for f in results.h5 summary.json trace.json; do [ -s "$tmp/out/$f" ] || { echo "missing $f"; exit 1; }; done
/usr/bin/python3 - "$tmp/out" <<'PY'
import json, sys, h5py
d = sys.argv[1]
s = json.load(open(f"{d}/summary.json"))
assert s["world_size"] == 1024, s["world_size"]
assert 0.2 <= s["mfu"] <= 0.7, s["mfu"]
assert len(s["peak_memory_bytes_by_pp_stage"]) == 8
assert s["peak_memory_bytes"] == max(s["peak_memory_bytes_by_pp_stage"])
assert s["peak_memory_bytes"] < 80e9, "must fit an 80 GB A100"
for k in ("iteration_time_s", "tokens_per_s", "model_tflops_per_gpu", "engine"):
    assert k in s, k
assert s["engine"]["events_committed"] > 0
with h5py.File(f"{d}/results.h5", "r") as f:
    assert f["ranks/finish_ns"].shape == (1024,)
    assert abs(f["ranks/finish_ns"][:].max() * 1e-9 - s["iteration_time_s"]) < 1e-9
    assert "0" in f["timeline"] and "1016" in f["timeline"]
    assert len(f["memory/0"]) > 0
t = json.load(open(f"{d}/trace.json"))
assert len(t["traceEvents"]) > 1000
print(f"ok: MFU {s['mfu']:.3f}, iteration {s['iteration_time_s']:.3f} s")
PY
