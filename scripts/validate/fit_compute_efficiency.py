#!/usr/bin/python3
"""Split-half calibration of cluster.compute_efficiency on the vTrain rows.

Usage: fit_compute_efficiency.py SCALESCOPE CSV [E ...]
Runs vtrain.py for each candidate efficiency E, picks the one with the lowest median absolute
percentage error on the even rows (the fit half), and reports the error on the odd rows (held
out), so the figure quoted is not the figure the parameter was chosen on.
"""
import csv
import os
import statistics
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
binary, data = sys.argv[1], sys.argv[2]
grid = [float(x) for x in sys.argv[3:]] or [0.70, 0.75, 0.80, 0.85, 0.90, 1.0]
results = {}
with tempfile.TemporaryDirectory() as tmp:
    for e in grid:
        out = os.path.join(tmp, f"e{e}.csv")
        subprocess.run(["/usr/bin/python3", os.path.join(here, "vtrain.py"), binary, data,
                        "--set", f"cluster.compute_efficiency={e}", "--csv-out", out],
                       check=True, stdout=subprocess.DEVNULL)
        errs = [abs(float(r["error_pct"])) for r in csv.DictReader(open(out))]
        fit, held = errs[0::2], errs[1::2]
        results[e] = (statistics.median(fit), statistics.median(held), statistics.median(errs),
                      statistics.mean(errs))
        print(f"compute_efficiency {e:.3f}: median APE fit half {results[e][0]:5.1f} %, "
              f"held-out half {results[e][1]:5.1f} %, all {results[e][2]:5.1f} %, "
              f"MAPE all {results[e][3]:5.1f} %", flush=True)
best = min(results, key=lambda e: results[e][0])
print(f"best on the fit half: {best:.3f}; held-out median APE {results[best][1]:.1f} %")
