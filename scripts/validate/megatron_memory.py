#!/usr/bin/python3
"""Predicted vs measured peak allocated memory for Megatron-LM functional-test cases.

Usage: scripts/validate/megatron_memory.py [--scalescope build/scalescope]
                                           [--csv inputs/validation/megatron_functional_memory.csv]

For every row it writes an experiment YAML (cluster preset dgx-h100: all rows' golden values are
the dgx_h100 ones), runs `scalescope memory`, and compares the PyTorch-allocated part of the
prediction (weights + main_grads + optimizer + activations + workspace + cuBLAS workspace, the
classes that torch.cuda.max_memory_allocated sees; not fragmentation, CUDA context or NCCL
buffers) with Megatron's `mem-max-allocated-bytes` (allocated_bytes.all.peak).

Megatron logs that metric from its TensorBoard writer, which exists on rank world_size - 1 only
(megatron/training/global_vars.py, _set_tensorboard_writer): the measured value is the LAST
pipeline stage's. The script therefore reports the prediction at the last stage (the like-for-like
ratio, used for the summary) and at the stage with the largest allocated peak. It also compares
`mem-allocated-bytes` (allocated after the iteration: the static state) with the predicted
weights + main_grads + optimizer at the last stage.
A row that `scalescope memory` rejects is skipped loudly with its error message.
"""
import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile

import experiment_yaml as ey

GIB = 1024 ** 3
ALLOCATED = ["weights", "main_grads", "optimizer", "activations", "workspace", "cublas_workspace"]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


b = ey.flag


def experiment_yaml(r):
    tp, pp, dp = (int(r[k]) for k in ("tp", "pp", "dp"))
    # Megatron defaults where no row overrides them: biases, dropout 0.1, learned positions.
    model = {"name": r["case"], "num_layers": r["num_layers"], "hidden_size": r["hidden_size"],
             "ffn_hidden_size": r["ffn_hidden_size"],
             "num_attention_heads": r["num_attention_heads"],
             "num_query_groups": r["num_query_groups"], "vocab_size": r["vocab_size"],
             "seq_length": r["seq_length"], "gated_linear_unit": b(r["swiglu"]),
             "untie_embeddings": b(r["untie"]), "add_bias_linear": True, "hidden_dropout": 0.1,
             "attention_dropout": 0.1, "position_embedding_type": "learned_absolute"}
    parallel = {"tp": tp, "pp": pp, "dp": dp, "sequence_parallel": b(r["sequence_parallel"]),
                "recompute": r["recompute"],
                "use_distributed_optimizer": b(r["distributed_optimizer"]),
                "overlap_grad_reduce": b(r["overlap_grad_reduce"]),
                "overlap_param_gather": b(r["overlap_param_gather"]),
                "virtual_pipeline_model_parallel_size": r["vpp"]}
    training = {"micro_batch_size": r["micro_batch_size"],
                "global_batch_size": r["global_batch_size"], "precision": r["precision"],
                "attention": r.get("attention") or "flash"}
    return ey.experiment_yaml(model, parallel, training, tp * pp * dp)

def parse_memory(out):
    """Returns {class: [GiB per stage]} from `scalescope memory` stdout."""
    classes = {}
    for line in out.splitlines():
        m = re.match(r"^\s+([a-z_]+)\s+((?:-?[0-9.]+\s*)+)$", line)
        if m:
            classes[m.group(1)] = [float(x) for x in m.group(2).split()]
    return classes


def evaluate(scalescope, rows, tmp):
    """Every row through `scalescope memory`: (results, skipped)."""
    results, skipped = [], []
    for r in rows:
        if r["precision"] not in ("bf16", "fp16"):
            skipped.append((r["case"], f"precision {r['precision']} not modelled"))
            continue
        path = os.path.join(tmp, r["case"] + ".yaml")
        with open(path, "w") as f:
            f.write(experiment_yaml(r))
        p = subprocess.run(["nice", "-n", "15", scalescope, "memory", path],
                           capture_output=True, text=True)
        if p.returncode != 0:
            msg = (p.stderr or p.stdout).strip().splitlines()
            skipped.append((r["case"], msg[-1] if msg else f"exit {p.returncode}"))
            continue
        cls = parse_memory(p.stdout)
        missing = [c for c in ALLOCATED if c not in cls]
        if missing:
            skipped.append((r["case"], f"memory table lacks {missing}"))
            continue
        nst = len(cls["weights"])
        alloc = [sum(cls[c][s] for c in ALLOCATED) for s in range(nst)]
        measured = float(r["measured_max_allocated_bytes"]) / GIB
        # mem-allocated-bytes: allocated after the iteration = the static classes only
        results.append({
            "case": r["case"], "measured_gib": measured, "error": alloc[-1] / measured - 1,
            "last_gib": alloc[-1], "max_gib": max(alloc),
            "static_measured_gib": float(r["measured_allocated_bytes"]) / GIB,
            "static_predicted_gib": sum(cls[c][-1] for c in ("weights", "main_grads", "optimizer")),
            "parts": "/".join(f"{cls[c][-1]:.2f}" for c in ALLOCATED)})
    return results, skipped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scalescope", default=os.path.join(ROOT, "build", "scalescope"))
    ap.add_argument("--csv", default=os.path.join(ROOT, "inputs", "validation",
                                                  "megatron_functional_memory.csv"))
    ap.add_argument("--keep", help="write the experiment YAMLs into this directory")
    args = ap.parse_args()

    rows = list(csv.DictReader(open(args.csv)))
    tmp = args.keep or tempfile.mkdtemp(prefix="megatron_memory_")
    os.makedirs(tmp, exist_ok=True)
    results, skipped = evaluate(args.scalescope, rows, tmp)
    print(f"{'case':<72} {'meas GiB':>8} {'last GiB':>8} {'ratio':>6} {'max GiB':>8} {'ratio':>6}  "
          "static: meas pred ratio   last-stage W/G/O/A/ws GiB")
    for d in results:
        meas, last, mx = d["measured_gib"], d["last_gib"], d["max_gib"]
        sm, sp = d["static_measured_gib"], d["static_predicted_gib"]
        print(f"{d['case']:<72} {meas:8.2f} {last:8.2f} {last / meas:6.3f} "
              f"{mx:8.2f} {mx / meas:6.3f}  {sm:6.2f} {sp:6.2f} {sp / sm:6.3f}   {d['parts']}")
    for case, why in skipped:
        print(f"SKIPPED {case}: {why}")
    if results:
        ratios = [d["last_gib"] / d["measured_gib"] for d in results]
        ratios_max = [d["max_gib"] / d["measured_gib"] for d in results]
        ratios_static = [d["static_predicted_gib"] / d["static_measured_gib"] for d in results]
        print(f"rows {len(ratios)} (skipped {len(skipped)})  predicted/measured at the last stage: "
              f"median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f};"
              f"  at the max stage: median {statistics.median(ratios_max):.3f}")
        print(f"static (mem-allocated-bytes vs weights+main_grads+optimizer, last stage): "
              f"median {statistics.median(ratios_static):.3f}, min {min(ratios_static):.3f}, "
              f"max {max(ratios_static):.3f}")


if __name__ == "__main__":
    main()
