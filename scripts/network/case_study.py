#!/usr/bin/python3
"""The network case study of docs/network.md (issue 24, Flint-style): Llama 3 70B on 1,024 H100
(inputs/experiments/llama3-70b-1k.yaml, the dgx-h100 preset's SuperPOD fabric) with the NIC
bandwidth at 400, 200, 100 and 50 Gb/s, the leaf-spine oversubscription at 1:1, 1:2 and 1:4, and
one node's NICs degraded to a quarter; each under the analytical and the flow model. Prints a
markdown table: iteration time and the critical path's composition.

Usage: scripts/network/case_study.py [--scalescope build/scalescope] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPERIMENT = os.path.join(ROOT, "inputs", "experiments", "llama3-70b-1k.yaml")

CASES = [
    ("NIC 400 Gb/s (preset)", [], []),
    ("NIC 200 Gb/s", ["cluster.nic_bandwidth_Gbps=200"], []),
    ("NIC 100 Gb/s", ["cluster.nic_bandwidth_Gbps=100"], []),
    ("NIC 50 Gb/s", ["cluster.nic_bandwidth_Gbps=50"], []),
    ("leaf-spine 1:2", ["cluster.topology.leaf_oversubscription=2"], []),
    ("leaf-spine 1:4", ["cluster.topology.leaf_oversubscription=4"], []),
    ("node 5's NICs at 25 %", [], ["degraded_nic: {nodes: [5], factor: 0.25}"]),
]


def run(scalescope, sets, whatifs, model, out):
    cmd = [scalescope, "run", EXPERIMENT, "--quiet", "-o", out, "--set", f"network.model={model}",
           "--set", "run.trace_ranks=[0]"]
    for s in sets:
        cmd += ["--set", s]
    for w in whatifs:
        cmd += ["--whatif", w]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"case_study: {' '.join(cmd)}: {p.stderr.strip()}")
    return json.load(open(os.path.join(out, "summary.json")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scalescope", default=os.path.join(ROOT, "build", "scalescope"))
    ap.add_argument("--json")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="case_study_")
    rows = []
    for i, (label, sets, whatifs) in enumerate(CASES):
        for model in ("analytical", "flow"):
            if whatifs and model == "analytical":
                continue  # a degraded NIC is a fabric what-if: the flow model only
            s = run(args.scalescope, sets, whatifs, model, os.path.join(tmp, f"{i}-{model}"))
            cp = s["critical_path"]["totals_s"]
            rows.append({"case": label, "model": model, "iteration_s": s["iteration_time_s"],
                         "critical_path_s": cp, "wall_s": s["engine"]["wall_s"]})
    kinds = ["compute", "TP", "PP", "DP", "EP", "host"]
    print("| case | model | iteration (s) | " + " | ".join(f"path: {k}" for k in kinds) + " |")
    print("|---|---|---|" + "---|" * len(kinds))
    for r in rows:
        it = r["iteration_s"]
        parts = " | ".join(f"{100 * r['critical_path_s'].get(k, 0) / it:.1f} %" for k in kinds)
        print(f"| {r['case']} | {r['model']} | {it:.3f} | {parts} |")
    if args.json:
        json.dump(rows, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
