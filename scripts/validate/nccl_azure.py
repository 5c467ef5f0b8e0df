#!/usr/bin/python3
"""NCCL all-reduce times on Azure ND A100 v4 (../shared/validation/nccl_allreduce_azure_a100.csv)
predicted through the emulation: each row becomes ASTRA-sim's all-reduce microbenchmark
(`scalescope chakra-microbench all_reduce --ranks N --bytes S`), replayed by `scalescope run
--chakra` on the dgx-a100 cluster preset (8 A100 per node on NVSwitch, 8 × 200 Gb/s HDR NICs: the
ND A100 v4's layout). The iteration time of that one-collective trace is the collective's time
under the same network model the training replays use (tests/cost checks the cost function
itself on the same rows).

Usage: scripts/validate/nccl_azure.py [--scalescope build/scalescope] [--jobs 2] [--json FILE]
       [--ranks 2,16,128]   (only these communicator sizes)
"""
import argparse
import concurrent.futures
import csv
import json
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CSV = os.path.join(ROOT, "..", "shared", "validation", "nccl_allreduce_azure_a100.csv")


def run_row(scalescope, i, r, tmp):
    d = os.path.join(tmp, f"row{i}")
    env = {**os.environ, "TMPDIR": tmp}
    p = subprocess.run([scalescope, "chakra-microbench", "all_reduce", os.path.join(d, "ar"),
                        "--ranks", r["ranks"], "--bytes", r["size_bytes"]],
                       capture_output=True, text=True, env=env)
    if p.returncode == 0:
        p = subprocess.run([scalescope, "run", "--chakra", os.path.join(d, "ar"), "--quiet",
                            "--set", "cluster.preset=dgx-a100", "-o", os.path.join(d, "out")],
                           capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"nccl_azure: row {r}: {(p.stderr or p.stdout).strip()}")
    t = json.load(open(os.path.join(d, "out", "summary.json")))["iteration_time_s"] * 1e6
    meas = float(r["time_us"])
    return {"ranks": int(r["ranks"]), "bytes": int(r["size_bytes"]), "measured_us": meas,
            "predicted_us": t, "error": t / meas - 1}


def evaluate(scalescope, rows, jobs=2):
    tmp = tempfile.mkdtemp(prefix="nccl_azure_")
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        return list(ex.map(lambda a: run_row(scalescope, a[0], a[1], tmp), enumerate(rows)))


def load_rows(ranks=None):
    rows = list(csv.DictReader(open(CSV)))
    return [r for r in rows if not ranks or int(r["ranks"]) in ranks]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scalescope", default=os.path.join(ROOT, "build", "scalescope"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--ranks", help="comma-separated communicator sizes to keep")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    ranks = {int(x) for x in args.ranks.split(",")} if args.ranks else None
    results = evaluate(args.scalescope, load_rows(ranks), args.jobs)
    print(f"{'ranks':>5} {'bytes':>11} {'measured us':>12} {'model us':>10} {'error':>7}")
    for d in results:
        print(f"{d['ranks']:>5} {d['bytes']:>11} {d['measured_us']:12.1f} {d['predicted_us']:10.1f} "
              f"{100 * d['error']:+6.1f}%")
    errs = [d["error"] for d in results]
    print(f"rows {len(errs)}: median {100 * statistics.median(errs):+.1f} %, median |err| "
          f"{100 * statistics.median(abs(e) for e in errs):.1f} %")
    if args.json:
        json.dump(results, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
