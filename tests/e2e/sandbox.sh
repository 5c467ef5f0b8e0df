#!/usr/bin/env bash
# A hybrid run (issue 10): one host sandbox rank under mpirun -np 3 (it gets a process of its
# own; run.engine: auto) completes, summary.json carries the sandbox figures, results.h5 /sandbox the
# measurements, and --replay-measurements reproduces the run bit for bit without measuring —
# sequentially and at np 2; calibrate_from_sandbox gives the sandbox's class its durations.
# A host sandbox (op_scale < 1) says its iteration time is a functional check, with the pure
# replay's beside it (summary.json, stdout), and calibrating from host measurements is refused.
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
qs=$repo/inputs/experiments/quickstart.yaml
small=(--set model.num_layers=4 --set training.global_batch_size=32)

# run.engine: auto (the default): the conservative engine's windows here.
mpirun -np 3 "$bin" run "$qs" "${small[@]}" --sandbox 0 --set run.sandbox_op_scale=0.02 \
  -o "$tmp/hybrid" >"$tmp/hybrid.txt"
grep -q "functional check, not a prediction: the host sandbox ran kernels shrunk to op_scale 0.02" \
  "$tmp/hybrid.txt" || { echo "FAIL: stdout does not mark the functional check:"; cat "$tmp/hybrid.txt"; exit 1; }
echo "ok: stdout: $(grep "functional check" "$tmp/hybrid.txt" | sed 's/^ *//')"
# Calibrating whole classes from shrunk CPU kernels is refused, measured or replayed.
for how in "--sandbox 0" "--replay-measurements $tmp/hybrid/results.h5"; do
  if "$bin" run "$qs" "${small[@]}" $how --set run.calibrate_from_sandbox=true -o "$tmp/refused" 2>"$tmp/err"; then
    echo "FAIL: calibrate_from_sandbox with host measurements accepted ($how)"; exit 1; fi
  [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "calibrate_from_sandbox.*host backend.*op_scale 0.0" "$tmp/err" &&
    [ ! -e "$tmp/refused" ] || { echo "FAIL: $(cat "$tmp/err")"; exit 1; }
  echo "ok: refused: $(cat "$tmp/err")"
done
# The same measurements labelled as taken on a GPU (backend cuda, full shapes) may calibrate.
cp "$tmp/hybrid/results.h5" "$tmp/gpu-measured.h5"
/usr/bin/python3 -c 'import h5py, sys
with h5py.File(sys.argv[1], "a") as f:
    f["sandbox"].attrs["backend"] = "cuda"; f["sandbox"].attrs["op_scale"] = 1.0' "$tmp/gpu-measured.h5"
"$bin" run "$qs" "${small[@]}" --replay-measurements "$tmp/hybrid/results.h5" -o "$tmp/replay" --quiet
mpirun -np 2 "$bin" run "$qs" "${small[@]}" --replay-measurements "$tmp/hybrid/results.h5" \
  --set run.engine=optimistic -o "$tmp/replay2" --quiet
mpirun -np 4 "$bin" run "$qs" "${small[@]}" --replay-measurements "$tmp/hybrid/results.h5" \
  -o "$tmp/replay4" --quiet
"$bin" run "$qs" "${small[@]}" --replay-measurements "$tmp/gpu-measured.h5" \
  --set run.calibrate_from_sandbox=true -o "$tmp/calibrated" --quiet
"$bin" run "$qs" "${small[@]}" -o "$tmp/pure" --quiet

/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
import h5py, numpy as np
d = sys.argv[1]
def summary(run):
    s = json.load(open(f"{d}/{run}/summary.json")); s.pop("engine"); return s
def datasets(run):
    out = {}
    with h5py.File(f"{d}/{run}/results.h5") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()])
                     if isinstance(o, h5py.Dataset) and not n.startswith("engine") else None)
    return out
h = summary("hybrid")
assert json.load(open(f"{d}/hybrid/summary.json"))["engine"]["kind"] == "conservative"
sb = h["sandbox"]
for key in ("ranks", "backend", "device", "measured_ops", "measured_fraction_of_compute_time",
            "peak_allocated_bytes", "peak_reserved_bytes"):
    assert key in sb, f"summary.json sandbox lacks {key}"
assert sb["ranks"] == [0] and sb["backend"] == "host" and sb["measured_ops"] > 0, sb
assert sb["measured_fraction_of_compute_time"] > 0.5, sb
assert sb["peak_reserved_bytes"] >= sb["peak_allocated_bytes"] > 0, sb
# A host sandbox at op_scale 0.02: a functional check, with the pure replay's figure beside it —
# exactly the iteration time of the run without a sandbox (both engines are deterministic).
pure_s = summary("pure")
assert sb["functional_check"] is True and "not a prediction" in h["iteration_time_note"], sb
assert sb["pure_replay_iteration_time_s"] == pure_s["iteration_time_s"], (sb, pure_s["iteration_time_s"])
assert sb["pure_replay_iteration_time_s"] != h["iteration_time_s"]
assert "sandbox" not in pure_s and "iteration_time_note" not in pure_s
cal_s = summary("calibrated")
assert cal_s["sandbox"]["functional_check"] is False and "iteration_time_note" not in cal_s, cal_s["sandbox"]
hd = datasets("hybrid")
assert len(hd["sandbox/median_s"]) == sb["measured_ops"]
for run in ("replay", "replay2", "replay4"):
    r = summary(run)
    assert r["sandbox"].pop("replayed_measurements") is True
    h2 = dict(h); h2["sandbox"] = {k: v for k, v in sb.items() if k != "replayed_measurements"}
    assert r == h2, f"{run}: summary differs from the hybrid run's"
    rd = datasets(run)
    assert rd.keys() == hd.keys() and all(np.array_equal(rd[k], hd[k]) for k in hd), run
pure, cal = datasets("pure"), datasets("calibrated")
stage = hd["ranks/pp_stage"]
# The sandbox rank's own compute time comes from the measurements; with calibration every rank
# of its class (stage 0) has it, the other stage keeps the roofline model's.
assert hd["ranks/compute_ns"][0] != pure["ranks/compute_ns"][0]
same = stage == stage[0]
assert np.all(cal["ranks/compute_ns"][same] == hd["ranks/compute_ns"][0])
assert np.all(cal["ranks/compute_ns"][~same] == pure["ranks/compute_ns"][~same])
print(f"ok: hybrid np 3, {sb['measured_ops']} kernels measured on {sb['device']}, "
      f"replays identical, calibration applied to {int(same.sum())} ranks")
PY

# Replaying from results without /sandbox is a one-line error naming the file.
if "$bin" run "$qs" "${small[@]}" --replay-measurements "$tmp/pure/results.h5" -o "$tmp/x" 2>"$tmp/err"; then
  echo "FAIL: replay without /sandbox accepted"; exit 1; fi
grep -q "pure/results.h5.*no /sandbox" "$tmp/err" && [ ! -e "$tmp/x" ] || { echo "FAIL: $(cat "$tmp/err")"; exit 1; }
echo "ok: $(cat "$tmp/err")"
