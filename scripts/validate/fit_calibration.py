#!/usr/bin/python3
"""Calibration of the kernel model on the vTrain rows, with leave-one-model-out validation.

Usage: fit_calibration.py SCALESCOPE CSV [--fit] [--iterations N] [--jobs J] [--rows-out FILE]

The kernel model (docs/cost-model.md §1.3) has, per GPU, a fixed overhead per kernel t0 (µs) and
sustained efficiencies of GEMMs (g) and of HBM streams (η); attention_efficiency stays at its
physical default, since every vTrain row runs the unfused attention path (no fused kernel).

--fit   linearizes every row's simulated time in u = (t0, 1/g, 1/η), in which the model is
        linear up to roofline switches and critical-path changes: one run at the point and one
        per parameter (finite differences). It then fits u on all rows (in-sample) and, for each
        model size, on the other three (leave-one-model-out, LOMO), minimizing a robust (soft L1,
        scale 5 %) loss of the relative error with every model size weighted equally.
        --iterations N re-linearizes N times around the in-sample fit. The result goes to
        calibration-a100.json next to this script; inputs/clusters/dgx-a100.yaml carries the
        in-sample values.
Always: runs every row at the physical defaults (uncalibrated), at the in-sample fit and at its
        LOMO fold's fit (every row predicted by constants fitted without its model), and prints
        the per-row errors, median / mean absolute errors and per-model-size median signed errors.
"""
import argparse
import json
import os
import re
import statistics
import sys

import numpy as np
from scipy.optimize import least_squares

import vtrain_rows as vr

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
JSON = os.path.join(HERE, "calibration-a100.json")
PRESET = os.path.join(ROOT, "inputs", "clusters", "dgx-a100.yaml")
KEYS = ["kernel_overhead_us", "gemm_efficiency", "hbm_efficiency"]
# The physical defaults: KernelCalibration in src/cost/gpu.hpp, which the A100 row keeps
# (docs/cost-model.md §1.3 gives their sources).
PHYSICAL = {"kernel_overhead_us": 2.0, "gemm_efficiency": 1.0, "hbm_efficiency": 0.8}
STEP = np.array([4.0, 0.15, 0.15])  # finite-difference steps in u
LOWER = np.array([0.0, 1.0, 1.0 / 0.95])  # g ≤ 1, η ≤ 0.95
UPPER = np.array([30.0, 2.0, 2.0])


def to_u(p):
    return np.array([p["kernel_overhead_us"], 1 / p["gemm_efficiency"], 1 / p["hbm_efficiency"]])


def to_params(u):
    return {"kernel_overhead_us": round(float(u[0]), 1),
            "gemm_efficiency": round(float(1 / u[1]), 3),
            "hbm_efficiency": round(float(1 / u[2]), 3)}


def linearize(args, rows, p):
    """Simulated times at p and the Jacobian in u by forward differences."""
    u0 = to_u(p)
    t0 = np.array(vr.run_rows(args.scalescope, rows, vr.calibration_sets(p), args.jobs))
    jac = np.zeros((len(rows), 3))
    for k in range(3):
        u = u0.copy()
        u[k] += STEP[k]
        tk = np.array(vr.run_rows(args.scalescope, rows, vr.calibration_sets(to_params(u)),
                                  args.jobs))
        # to_params rounds; use the step actually taken.
        jac[:, k] = (tk - t0) / (to_u(to_params(u))[k] - u0[k])
        print(f"  d(time)/d(u{k}) done", flush=True)
    return u0, t0, jac


def fit(u0, t0, jac, meas, weights, mask):
    def resid(u):
        pred = t0[mask] + jac[mask] @ (u - u0)
        return (pred / meas[mask] - 1) * np.sqrt(weights[mask])
    start = np.clip(u0, LOWER, UPPER)
    r = least_squares(resid, start, bounds=(LOWER, UPPER), loss="soft_l1", f_scale=0.05)
    return r.x


def do_fit(args, rows):
    meas = np.array(vr.measured(rows))
    models = [vr.model_of(r) for r in rows]
    sizes = sorted(set(models), key=float)
    # Every model size weighs the same, whatever its number of rows.
    weights = np.array([1.0 / models.count(m) for m in models])
    # Linearize at the physical defaults, or (--start-at-previous) at the fit now in JSON: a
    # refit after a model or input change starts next to its optimum.
    point = dict(json.load(open(JSON))["in_sample"]) if args.start_at_previous else dict(PHYSICAL)
    for it in range(args.iterations + 1):
        print(f"linearizing at {point}", flush=True)
        u0, t0, jac = linearize(args, rows, point)
        all_rows = np.ones(len(rows), dtype=bool)
        in_sample = to_params(fit(u0, t0, jac, meas, weights, all_rows))
        lomo = {}
        for m in sizes:
            mask = np.array([x != m for x in models])
            lomo[m] = to_params(fit(u0, t0, jac, meas, weights, mask))
        print(f"  in-sample {in_sample}; LOMO {lomo}", flush=True)
        if in_sample == point:
            break
        point = in_sample
    result = {"source": "scripts/validate/fit_calibration.py --fit on "
                        "shared/validation/vtrain_a100_multinode.csv",
              "physical": PHYSICAL, "linearized_at": {k: float(v) for k, v in
                                                      zip(KEYS, [u0[0], 1 / u0[1], 1 / u0[2]])},
              "in_sample": in_sample, "lomo": lomo}
    json.dump(result, open(JSON, "w"), indent=2)
    print(f"wrote {JSON}")


def preset_values():
    vals = {}
    for line in open(PRESET):
        m = re.match(r"^(\w+):\s*([-0-9.eE+]+)\s*$", line)
        if m and m.group(1) in KEYS:
            vals[m.group(1)] = float(m.group(2))
    return vals


def summary(name, errs, models):
    a = [abs(e) for e in errs]
    line = (f"{name:<26} median |err| {100 * statistics.median(a):5.1f} %  "
            f"mean |err| {100 * statistics.mean(a):5.1f} %  max {100 * max(a):5.1f} %  "
            f"within 10 %: {sum(x <= 0.10 for x in a)}/{len(a)}")
    per = []
    for m in sorted(set(models), key=float):
        e = [x for x, mm in zip(errs, models) if mm == m]
        per.append(f"{m}B {100 * statistics.median(e):+5.1f} %")
    return line + "\n" + " " * 27 + "median signed error by model: " + ", ".join(per)


def report(args, rows):
    cal = json.load(open(JSON))
    if preset_values() != cal["in_sample"]:
        print(f"warning: {PRESET} carries {preset_values()}, the fit says {cal['in_sample']}",
              file=sys.stderr)
    meas = vr.measured(rows)
    models = [vr.model_of(r) for r in rows]
    print(f"physical defaults: {cal['physical']}")
    print(f"in-sample fit:     {cal['in_sample']}")
    for m, p in cal["lomo"].items():
        print(f"LOMO without {m:>4}B: {p}")
    runs = {
        "uncalibrated": vr.run_rows(args.scalescope, rows, vr.calibration_sets(cal["physical"]),
                                    args.jobs),
        "in-sample": vr.run_rows(args.scalescope, rows, vr.calibration_sets(cal["in_sample"]),
                                 args.jobs),
        "leave-one-model-out": vr.run_rows(args.scalescope, rows,
                                           [vr.calibration_sets(cal["lomo"][m]) for m in models],
                                           args.jobs),
    }
    errs = {k: [s / x - 1 for s, x in zip(v, meas)] for k, v in runs.items()}
    print(f"{'model':>6} {'gpus':>5} tp pp  dp mbs {'measured':>9} | error: uncalibrated, "
          f"in-sample, LOMO")
    for i, r in enumerate(rows):
        print(f"{r['params_b']:>5}B {r['gpus']:>5} {r['tp']:>2} {r['pp']:>2} {r['dp']:>3} "
              f"{r['micro_batch']:>3} {meas[i]:8.1f}ms | "
              + "  ".join(f"{100 * errs[k][i]:+6.1f} %" for k in runs))
    print()
    for k in runs:
        print(summary(k, errs[k], models))
    if args.rows_out:
        with open(args.rows_out, "w") as f:
            f.write("params_b,gpus,tp,pp,dp,micro_batch,measured_ms,"
                    "uncalibrated_ms,in_sample_ms,lomo_ms\n")
            for i, r in enumerate(rows):
                f.write(f"{r['params_b']},{r['gpus']},{r['tp']},{r['pp']},{r['dp']},"
                        f"{r['micro_batch']},{meas[i]}," +
                        ",".join(f"{runs[k][i]:.1f}" for k in runs) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scalescope")
    ap.add_argument("csv")
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rows-out")
    ap.add_argument("--start-at-previous", action="store_true",
                    help="linearize first at the in-sample fit now in calibration-a100.json")
    ap.add_argument("--no-report", action="store_true", help="fit only")
    args = ap.parse_args()
    rows = vr.load_rows(args.csv)
    if args.fit:
        do_fit(args, rows)
    if not args.no_report:
        report(args, rows)


if __name__ == "__main__":
    main()
