#!/usr/bin/env bash
# `sweep --search layout` (issue 41): TP, PP, VPP, CP, micro-batch, recompute and the optimizer's
# sharding searched together; every configuration checked first (rules, memory, a lower bound
# on its time), the rest replayed in order of their bound, skipping those a replayed one
# dominates. Checked against the files: every dominated row names a replayed configuration that
# fits, is no slower than its bound and needs no more memory; none of them could have been
# the fastest; and the table is the same at np 1 and np 2.
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
qs=$repo/inputs/experiments/quickstart.yaml
"$bin" sweep "$qs" --search layout -q -o "$tmp/a"
mpirun -np 2 "$bin" sweep "$qs" --search layout -q -o "$tmp/b"
cmp "$tmp/a/sweep.csv" "$tmp/b/sweep.csv"
# The check builds at most 2 · PP · VPP micro-batches: every configuration's memory (and so its
# fit) is the same as with all of them built.
SCALESCOPE_SEARCH_FULL_BUILDS=1 "$bin" sweep "$qs" --search layout -q -o "$tmp/full"
/usr/bin/python3 - "$tmp/a/sweep.json" "$tmp/full/sweep.json" <<'PY'
import json, sys
a, b = ({r["index"]: r for r in json.load(open(p))["rows"]} for p in sys.argv[1:3])
checked = [i for i in a if a[i]["status"] != "invalid"]
bad = [i for i in checked if a[i]["peak_memory_bytes"] != b[i]["peak_memory_bytes"] or
       (a[i]["status"] == "does_not_fit") != (b[i]["status"] == "does_not_fit")]
assert checked and not bad, [(a[i]["overrides"], a[i]["peak_memory_bytes"], b[i]["peak_memory_bytes"]) for i in bad[:3]]
print(f"ok: {len(checked)} configurations' memory the same with the micro-batches cut")
PY
/usr/bin/python3 - "$tmp/a/sweep.json" <<'PY'
import json, re, sys
rows = json.load(open(sys.argv[1]))["rows"]
by = {r["index"]: r for r in rows}
dominated = [r for r in rows if r["status"] == "dominated"]
ok = [r for r in rows if r["status"] == "ok"]
assert dominated and ok, (len(dominated), len(ok))
axes = {k for r in rows for o in r["overrides"] for k in [o.split("=")[0]]}
for key in ("parallel.tp", "parallel.pp", "parallel.vpp", "parallel.cp",
            "training.micro_batch_size", "parallel.recompute", "parallel.fsdp"):
    assert key in axes, (key, axes)
best = min(r["iteration_time_s"] for r in ok)
for r in dominated:
    k = int(re.search(r"#(\d+)", r["message"]).group(1))
    d = by[k]
    assert d["status"] == "ok" and d["replayed"], d
    assert d["iteration_time_s"] <= r["lower_bound_s"] and \
        d["peak_memory_bytes"] <= r["peak_memory_bytes"], (r, d)
    assert r["lower_bound_s"] >= best, (r, best)  # never the fastest
# The bound is a bound: no replayed configuration beat its own.
for r in ok:
    assert r["iteration_time_s"] >= r["lower_bound_s"] * (1 - 1e-12), r
print(f"ok: {len(rows)} configurations, {len(ok)} replayed and fit, {len(dominated)} dominated "
      f"before their replay, best {best:.4f} s")
PY
