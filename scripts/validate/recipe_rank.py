#!/usr/bin/python3
"""Do scalescope's sweeps pick the layouts NVIDIA's tuned recipes use?

For each dense row of the public H100 tables (the NeMo / Megatron-Bridge performance recipes,
whose layouts NVIDIA tuned on real clusters), `scalescope sweep --search parallel` tries every
TP × PP × VPP layout on the row's GPUs with its CP, micro-batch, global batch, precision and
overrides, DP derived, replaying also the layouts scalescope's memory check refuses
(--replay-unfit: several recipes ran although the tables leave out what made them fit, e.g.
fp8 parameters or bf16 gradients). The layouts compared with the recipe's are those whose
predicted peak memory is within the budget max(usable HBM, the recipe's own predicted peak):
what the recipe shows to be runnable, even where scalescope's memory model is conservative.
Reported per row: where the recipe's layout ranks by predicted iteration time among them,
whether scalescope thinks it fits, and how much faster the best of them is predicted to be. A
recipe ranked first (or within a few per cent of the best) is what a faithful model should
say of a layout that was tuned by measurement; a large predicted gain flags a bias (or a
layout NVIDIA did not try).

Usage: scripts/validate/recipe_rank.py [--scalescope build/scalescope] [--only NAME] [--np N]
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

import h100

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TABLES = ("h100_megatron_throughput.csv", "h100_nemo_throughput.csv")


def dense_recipe(r):
    """Rows of tuned recipes: dense models, not Megatron's functional tests (tiny GPT configs
    sized for CI, not tuned) and not the long-sequence sweep (its layouts scale CP by rule)."""
    return (not r.get("ep") and not r["model"].startswith("gpt3_")
            and not r["model"].startswith("LLAMA2-7B-") and not h100.why_skip(r))


def layout(t):
    """(TP, PP, VP) of a sweep.csv row."""
    return int(t["tp"]), int(t["pp"]), int(t["vpp"])


def fmt(lay):
    return "/".join(map(str, lay))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scalescope", default=os.path.join(ROOT, "build", "scalescope"))
    ap.add_argument("--only", help="rows whose model name contains this string")
    ap.add_argument("--np", type=int, default=1, help="mpirun processes per sweep (default 1)")
    ap.add_argument("--keep", help="write the rows' YAML and sweep tables under this folder")
    ap.add_argument("--json", help="write every ranked row here (scripts/validate/all.py)")
    ap.add_argument("--reuse", action="store_true",
                    help="with --keep: take a row's sweep.csv from there when it exists")
    args = ap.parse_args()
    rows = [r for t in TABLES for r in csv.DictReader(open(os.path.join(ROOT, "inputs",
                                                                          "validation", t)))
            if dense_recipe(r) and (not args.only or args.only in r["model"])]
    tmp = args.keep or tempfile.mkdtemp(prefix="recipe_rank_")
    os.makedirs(tmp, exist_ok=True)
    print(f"{'model':<22} {'gpus':>5} {'recipe TP/PP/VP':>15} {'rank':>7} {'recipe s':>9} "
          f"{'best TP/PP/VP':>13} {'best s':>8} {'gain':>6}  recipe fits (scalescope)")
    gains, ranks, ranked = [], [], []
    for i, r in enumerate(rows):
        ypath = os.path.join(tmp, f"row{i}.yaml")
        with open(ypath, "w") as f:
            f.write(h100.experiment_yaml(r))
        out = os.path.join(tmp, f"row{i}")
        cmd = [args.scalescope, "sweep", ypath, "--search", "parallel", "--set", "parallel.dp=",
               "--replay-unfit", "-q", "-o", out] + h100.extra_sets(r)
        if args.np > 1:
            cmd = ["mpirun", "-np", str(args.np)] + cmd
        if args.reuse and os.path.exists(os.path.join(out, "sweep.csv")):
            p = subprocess.CompletedProcess(cmd, 0)
        else:
            p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"SKIP {r['model']}: {(p.stderr or p.stdout).strip().splitlines()[-1]}")
            continue
        table = list(csv.DictReader(open(os.path.join(out, "sweep.csv"))))
        want = (int(r["tp"]), int(r["pp"]), int(r["vpp"]))
        recipe = [t for t in table if layout(t) == want]
        if not recipe or recipe[0]["replayed"] != "true":
            why = recipe[0]["status"] if recipe else "not in the search"
            print(f"{r['model']:<22} {r['gpus']:>5} {fmt(want):>15} {why}")
            continue
        budget = max(float(recipe[0]["memory_capacity_gib"]), float(recipe[0]["peak_memory_gib"]))
        fit = sorted((t for t in table
                      if t["replayed"] == "true" and float(t["peak_memory_gib"]) <= budget),
                     key=lambda t: (float(t["iteration_time_s"]), int(t["index"])))
        best = fit[0]
        rank = fit.index(recipe[0]) + 1
        rt, bt = float(recipe[0]["iteration_time_s"]), float(best["iteration_time_s"])
        gains.append(rt / bt - 1)
        ranks.append(rank)
        ranked.append({"model": r["model"], "gpus": int(r["gpus"]), "recipe": fmt(want),
                       "rank": rank, "of": len(fit), "recipe_s": rt, "best": fmt(layout(best)),
                       "best_s": bt, "gain": rt / bt - 1})
        print(f"{r['model']:<22} {r['gpus']:>5} {fmt(want):>15} {rank:>3}/{len(fit):<3} {rt:9.3f} "
              f"{fmt(layout(best)):>13} {bt:8.3f} {100 * (rt / bt - 1):5.1f}%  "
              f"{'yes' if recipe[0]['status'] == 'ok' else 'no'} ({float(recipe[0]['peak_memory_gib']):.1f} GiB)")
    if args.json:
        json.dump(ranked, open(args.json, "w"), indent=1)
    if gains:
        print(f"{len(gains)} recipes ranked: median rank {statistics.median(ranks)}, "
              f"first in {sum(k == 1 for k in ranks)}; predicted gain of the best layout over "
              f"the recipe's: median {100 * statistics.median(gains):.1f} %, "
              f"max {100 * max(gains):.1f} %")


if __name__ == "__main__":
    sys.exit(main())
