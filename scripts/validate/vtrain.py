#!/usr/bin/python3
"""Runs every row of the vTrain measurements through scalescope once and reports the error.

Usage: vtrain.py SCALESCOPE CSV [--base YAML] [--set key=value ...] [--csv-out FILE] [--jobs J]
Prints one line per row and the mean / median absolute percentage error of iteration time.
(scripts/validate/vtrain.sh runs fit_calibration.py, which compares calibrations.)
"""
import argparse
import csv
import statistics

import vtrain_rows as vr

ap = argparse.ArgumentParser()
ap.add_argument("scalescope")
ap.add_argument("csv")
ap.add_argument("--base", default=vr.BASE)
ap.add_argument("--set", action="append", default=[], help="extra override for every row")
ap.add_argument("--csv-out", help="write per-row results here")
ap.add_argument("--jobs", type=int, default=2)
args = ap.parse_args()

rows = vr.load_rows(args.csv)
extra = dict(s.split("=", 1) for s in args.set)
sims = vr.run_rows(args.scalescope, rows, extra, args.jobs, args.base)
errors, out_rows = [], []
for r, sim in zip(rows, sims):
    meas = float(r["measured_iter_ms"])
    err = (sim - meas) / meas
    errors.append(abs(err))
    out_rows.append({**r, "simulated_iter_ms": f"{sim:.1f}", "error_pct": f"{100 * err:.1f}"})
    print(f"{r['params_b']:>6}B gpus {r['gpus']:>4} tp {r['tp']} pp {r['pp']:>2} dp {r['dp']:>3} "
          f"mbs {r['micro_batch']:>2}: measured {meas:8.1f} ms  simulated {sim:8.1f} ms  "
          f"error {100 * err:+6.1f} %")
if args.csv_out:
    with open(args.csv_out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out_rows[0].keys()))
        w.writeheader()
        w.writerows(out_rows)
print(f"rows {len(errors)}  MAPE {100 * statistics.mean(errors):.1f} %  "
      f"median APE {100 * statistics.median(errors):.1f} %  "
      f"max APE {100 * max(errors):.1f} %")
