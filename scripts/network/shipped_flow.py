#!/usr/bin/python3
"""The shipped experiments under the analytical and the flow network model (issue 24): one
markdown row per experiment with both iteration times and the change, for docs/validation.md
("Flow model"). Usage, from the repository root after scripts/build.sh:

    scripts/network/shipped_flow.py [--scalescope build/scalescope] [EXPERIMENT.yaml ...]

Runs the sequential engine with only rank 0 traced (a few minutes on a 2-core VM)."""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def iteration(binary, exp, model, out):
    subprocess.run([binary, "run", exp, "-o", out, "--quiet", "--set", f"network.model={model}",
                    "--set", "run.trace_ranks=[0]", "--set", "run.engine=sequential"],
                   check=True, stderr=subprocess.DEVNULL)
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)["iteration_time_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scalescope", default=os.path.join(ROOT, "build", "scalescope"))
    ap.add_argument("experiments", nargs="*")
    a = ap.parse_args()
    exps = a.experiments or sorted(glob.glob(os.path.join(ROOT, "inputs", "experiments", "*.yaml")))
    print("| experiment | analytical (s) | flow (s) | change |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for exp in exps:
            name = os.path.splitext(os.path.basename(exp))[0]
            try:
                ta = iteration(a.scalescope, exp, "analytical", os.path.join(tmp, name + "-a"))
                tf = iteration(a.scalescope, exp, "flow", os.path.join(tmp, name + "-f"))
            except subprocess.CalledProcessError as e:
                print(f"| {name} | failed: {e} | | |")
                continue
            print(f"| {name} | {ta:.4f} | {tf:.4f} | {100 * (tf / ta - 1):+.2f} % |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
