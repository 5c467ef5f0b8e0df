#!/usr/bin/python3
"""Runs every row of the vTrain measurements through scalescope and reports the error.

Usage: vtrain.py SCALESCOPE CSV [--base YAML] [--set key=value ...] [--csv-out FILE]
Prints one line per row and the mean / median absolute percentage error of iteration time.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("scalescope")
ap.add_argument("csv")
ap.add_argument("--base", default=os.path.join(here, "vtrain-base.yaml"))
ap.add_argument("--set", action="append", default=[], help="extra override for every row")
ap.add_argument("--csv-out", help="write per-row results here")
args = ap.parse_args()

rows = list(csv.DictReader(open(args.csv)))
errors, out_rows = [], []
with tempfile.TemporaryDirectory() as tmp:
    for i, r in enumerate(rows):
        out = os.path.join(tmp, f"row{i}")
        sets = {
            "model.num_layers": r["layers"], "model.hidden_size": r["hidden"],
            "model.num_attention_heads": r["heads"], "model.seq_length": r["seq_len"],
            "parallel.tensor_model_parallel_size": r["tp"],
            "parallel.pipeline_model_parallel_size": r["pp"],
            "parallel.data_parallel_size": r["dp"], "cluster.num_gpus": r["gpus"],
            "training.micro_batch_size": r["micro_batch"],
            "training.global_batch_size": r["global_batch"],
        }
        cmd = [args.scalescope, "run", args.base, "-o", out, "--quiet"]
        for k, v in sets.items():
            cmd += ["--set", f"{k}={v}"]
        for s in args.set:
            cmd += ["--set", s]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"row {i}: scalescope failed: {p.stderr.strip()}", file=sys.stderr)
            sys.exit(1)
        s = json.load(open(os.path.join(out, "summary.json")))
        sim = s["iteration_time_s"] * 1e3
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
