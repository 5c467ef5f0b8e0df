#!/usr/bin/python3
"""NCCL all-reduce times on Azure ND A100 v4 (../shared/validation/nccl_allreduce_azure_a100.csv)
predicted through the emulation: each row becomes ASTRA-sim's all-reduce microbenchmark
(`scalescope chakra-microbench all_reduce --ranks N --bytes S`), replayed by `scalescope run
--chakra` on a cluster preset (default azure-nd-a100-v4: 8 A100 per VM on NVSwitch, 8 × 200 Gb/s
HDR NICs). The iteration time of that one-collective trace is the collective's time under the same
network model the training replays use; `--set network.model=flow` runs it through the flow model
(scripts/validate/nccl.sh does).

--fit: chooses the preset's nic_bus_efficiency on the FIT_RANKS rows only (16 and 64 GPUs; a grid
of 0.50 … 0.96 by 0.01, least squared log error) and reports the held-out rows (32, 128 GPUs and
every single-node row, which the NIC does not touch) apart.

Usage: scripts/validate/nccl_azure.py [--scalescope build/scalescope] [--jobs 2] [--json FILE]
       [--ranks 2,16,128] [--preset NAME] [--set key=value ...] [--fit]
"""
import argparse
import concurrent.futures
import csv
import json
import math
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CSV = os.path.join(ROOT, "..", "shared", "validation", "nccl_allreduce_azure_a100.csv")


FIT_RANKS = {16, 64}


def run_row(scalescope, i, r, tmp, preset="azure-nd-a100-v4", sets=()):
    d = os.path.join(tmp, f"row{i}")
    env = {**os.environ, "TMPDIR": tmp}
    p = subprocess.run([scalescope, "chakra-microbench", "all_reduce", os.path.join(d, "ar"),
                        "--ranks", r["ranks"], "--bytes", r["size_bytes"]],
                       capture_output=True, text=True, env=env)
    if p.returncode == 0:
        extra = [a for kv in sets for a in ("--set", kv)]
        p = subprocess.run([scalescope, "run", "--chakra", os.path.join(d, "ar"), "--quiet",
                            "--set", f"cluster.preset={preset}", *extra,
                            "-o", os.path.join(d, "out")],
                           capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"nccl_azure: row {r}: {(p.stderr or p.stdout).strip()}")
    t = json.load(open(os.path.join(d, "out", "summary.json")))["iteration_time_s"] * 1e6
    meas = float(r["time_us"])
    return {"ranks": int(r["ranks"]), "bytes": int(r["size_bytes"]), "measured_us": meas,
            "predicted_us": t, "error": t / meas - 1}


def evaluate(scalescope, rows, jobs=2, preset="azure-nd-a100-v4", sets=()):
    tmp = tempfile.mkdtemp(prefix="nccl_azure_")
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        return list(ex.map(lambda a: run_row(scalescope, a[0], a[1], tmp, preset, sets),
                           enumerate(rows)))


def fit_efficiency(scalescope, rows, jobs, preset, sets):
    """The nic_bus_efficiency (grid 0.50 … 0.96) minimizing the squared log error on `rows`."""
    best = None
    for k in range(50, 97):
        eff = k / 100
        res = evaluate(scalescope, rows, jobs, preset, [*sets, f"cluster.nic_bus_efficiency={eff}"])
        loss = sum(math.log(d["predicted_us"] / d["measured_us"]) ** 2 for d in res)
        if best is None or loss < best[1]:
            best = (eff, loss)
    return best[0]


def summarize(label, results):
    errs = [d["error"] for d in results]
    if errs:
        print(f"{label} rows {len(errs)}: median {100 * statistics.median(errs):+.1f} %, median "
              f"|err| {100 * statistics.median(abs(e) for e in errs):.1f} %, max |err| "
              f"{100 * max(abs(e) for e in errs):.1f} %")


def load_rows(ranks=None):
    rows = list(csv.DictReader(open(CSV)))
    return [r for r in rows if not ranks or int(r["ranks"]) in ranks]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scalescope", default=os.path.join(ROOT, "build", "scalescope"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--ranks", help="comma-separated communicator sizes to keep")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--preset", default="azure-nd-a100-v4")
    ap.add_argument("--set", action="append", default=[], help="an override for every replay")
    ap.add_argument("--fit", action="store_true",
                    help="fit nic_bus_efficiency on the 16- and 64-GPU rows first")
    args = ap.parse_args()
    ranks = {int(x) for x in args.ranks.split(",")} if args.ranks else None
    rows = load_rows(ranks)
    sets = list(args.set)
    if args.fit:
        eff = fit_efficiency(args.scalescope, [r for r in rows if int(r["ranks"]) in FIT_RANKS],
                             args.jobs, args.preset, sets)
        print(f"fitted nic_bus_efficiency {eff:.2f} on the {sorted(FIT_RANKS)}-GPU rows")
        sets.append(f"cluster.nic_bus_efficiency={eff}")
    results = evaluate(args.scalescope, rows, args.jobs, args.preset, sets)
    print(f"{'ranks':>5} {'bytes':>11} {'measured us':>12} {'model us':>10} {'error':>7}")
    for d in results:
        print(f"{d['ranks']:>5} {d['bytes']:>11} {d['measured_us']:12.1f} {d['predicted_us']:10.1f} "
              f"{100 * d['error']:+6.1f}%")
    summarize("all", results)
    summarize("fit (16, 64 GPUs)", [d for d in results if d["ranks"] in FIT_RANKS])
    summarize("held out (32, 128 GPUs)", [d for d in results if d["ranks"] in {32, 128}])
    summarize("one node (2-8 GPUs)", [d for d in results if d["ranks"] <= 8])
    if args.json:
        json.dump(results, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
