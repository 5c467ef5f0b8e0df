#!/usr/bin/env bash
# The profile path (docs/kernels.md) end to end on the host backend: the signature list of an
# experiment, a host-measured profile, a run that uses it (sequential and optimistic at np 2,
# identical), a measured.json import, and one-line errors for a corrupt measured.json or
# profile.h5 with no output left behind.
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
qs=$repo/inputs/experiments/quickstart.yaml
small=(--set model.num_layers=4 --set training.global_batch_size=32)

"$bin" profile "$qs" "${small[@]}" --list "$tmp/ops.json" >/dev/null
"$bin" profile "$qs" "${small[@]}" --backend host --op-scale 0.02 -o "$tmp/profile.h5" >/dev/null
"$bin" run "$qs" "${small[@]}" --set cost.profile="$tmp/profile.h5" -o "$tmp/seq" --quiet
mpirun -np 2 "$bin" run "$qs" "${small[@]}" --set cost.profile="$tmp/profile.h5" \
  --set run.engine=optimistic -o "$tmp/np2" --quiet
"$bin" run "$qs" "${small[@]}" -o "$tmp/roofline" --quiet

/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
ops = json.load(open(f"{d}/ops.json"))
assert ops["format"] == "scalescope-ops/1", ops["format"]
kernels = {o["kernel"] for o in ops["ops"]}
for k in ("gemm", "attention", "rmsnorm", "swiglu", "rope", "cross_entropy", "adam", "embedding"):
    assert k in kernels, f"no {k} signature in ops.json: {sorted(kernels)}"
seq, np2, roof = (json.load(open(f"{d}/{r}/summary.json")) for r in ("seq", "np2", "roofline"))
p = seq["profile"]
assert p["signatures_found"] == p["signatures_total"] == len(ops["ops"]), p
assert p["measured_fraction_of_compute_time"] == 1.0, p
for s in (seq, np2):
    s.pop("engine")
assert seq == np2, "sequential and optimistic runs with a profile differ"
assert seq["iteration_time_s"] != roof["iteration_time_s"], "the profile changed nothing"
print(f"ok: {len(ops['ops'])} signatures, profile run {seq['iteration_time_s']:.3f} s "
      f"(roofline {roof['iteration_time_s']:.3f} s), np 2 identical")
PY

# A measured.json with one of the list's signatures: 1 of N found, the rest from the roofline.
sig=$(/usr/bin/python3 -c "import json,sys; print([o['sig'] for o in json.load(open(sys.argv[1]))['ops'] if o['kernel']=='gemm'][0])" "$tmp/ops.json")
cat >"$tmp/measured.json" <<JSON
{"format": "scalescope-measured/1", "device": "test device", "results": [
 {"sig": "$sig", "median_us": 12.5, "p10_us": 12.0, "p90_us": 13.0, "reps": 9, "impl": "test"}]}
JSON
"$bin" profile --import "$tmp/measured.json" -o "$tmp/imported.h5" >/dev/null
"$bin" run "$qs" "${small[@]}" --set cost.profile="$tmp/imported.h5" -o "$tmp/imp" --quiet
/usr/bin/python3 -c "
import json, sys; p = json.load(open(sys.argv[1]))['profile']
assert p['signatures_found'] == 1 and 0 < p['measured_fraction_of_compute_time'] < 1, p
print('ok: import, 1 signature measured,', round(100 * p['measured_fraction_of_compute_time'], 1), '% of compute')" "$tmp/imp/summary.json"

# Bad inputs: one line naming the file, exit ≠ 0, nothing written.
echo '{"format": "scalescope-measured/1", "results": [{"sig": "x"}]}' >"$tmp/bad.json"
if "$bin" profile --import "$tmp/bad.json" -o "$tmp/bad.h5" 2>"$tmp/err"; then echo "FAIL: bad import accepted"; exit 1; fi
grep -q "bad.json: results\[0\].median_us" "$tmp/err" || { echo "FAIL: $(cat "$tmp/err")"; exit 1; }
[ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -e "$tmp/bad.h5" ] || { echo "FAIL: output or extra lines"; exit 1; }
head -c 100 "$tmp/profile.h5" >"$tmp/corrupt.h5"
if "$bin" run "$qs" "${small[@]}" --set cost.profile="$tmp/corrupt.h5" -o "$tmp/c" 2>"$tmp/err"; then echo "FAIL: corrupt profile accepted"; exit 1; fi
grep -q "corrupt.h5" "$tmp/err" && [ ! -e "$tmp/c" ] || { echo "FAIL: $(cat "$tmp/err")"; exit 1; }
echo "ok: bad measured.json and corrupt profile.h5 rejected: $(cat "$tmp/err")"
