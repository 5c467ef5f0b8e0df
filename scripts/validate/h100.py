#!/usr/bin/python3
"""Predicted vs measured H100 training throughput for public Megatron-Core / NeMo runs.

Usage: scripts/validate/h100.py [--scalescope build/scalescope] [--csv FILE ...]

Default rows: inputs/validation/h100_megatron_throughput.csv (Megatron functional tests, NeMo
24.12 fp8) and inputs/validation/h100_nemo_throughput.csv (NeMo 24.07 / 24.03.01 fp8 and
Megatron-Bridge 25.11 / 26.04.01, measured as tokens/s per GPU).

Every bf16 row becomes an experiment YAML (cluster preset dgx-h100) that `scalescope run --quiet`
replays once into a temporary directory; summary.json gives iteration_time_s and
model_tflops_per_gpu. A row measured as an iteration time is converted to TFLOP/s per GPU with
scalescope's own model-FLOPs count for that row (measured_tflops = predicted_tflops *
predicted_time / measured_time), so both sides use the same formula; a row measured as
TFLOP/s is converted to an iteration time the same way. Error = predicted / measured - 1 on
the iteration time (positive = scalescope too slow). A row measured as tokens/s per GPU gives
the iteration time gbs·seq / (tokens/s · GPUs), free of any FLOP convention. Optional columns:
`preset` (a model preset, the row's seq length on top), `ep` (expert parallelism) and `extra`
(`;`-separated `--set key=value` overrides), `cluster_preset`, `skip` (why a row scalescope
cannot express is not run). Rows scalescope cannot express are skipped with the reason.
"""
import argparse
import concurrent.futures
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

import experiment_yaml as ey

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_CSVS = [os.path.join(ROOT, "inputs", "validation", name)
                for name in ("h100_megatron_throughput.csv", "h100_nemo_throughput.csv",
                             "h100_moe_modelzoo.csv")]


b = ey.flag


def experiment_yaml(r):
    llama = b(r["swiglu"])
    tp, pp, dp = (int(r[k]) for k in ("tp", "pp", "dp"))
    if r.get("preset"):
        model = {"preset": r["preset"], "seq_length": r["seq"]}
    else:
        # Llama-style rows: no biases, no dropout, RoPE. GPT rows (Megatron functional tests):
        # Megatron's defaults, biases, dropout 0.1, learned absolute positions.
        model = {"name": r["model"], "num_layers": r["num_layers"], "hidden_size": r["hidden"],
                 "ffn_hidden_size": r["ffn"], "num_attention_heads": r["heads"],
                 "num_query_groups": r["groups"], "vocab_size": r["vocab"], "seq_length": r["seq"],
                 "gated_linear_unit": llama, "untie_embeddings": b(r["untie"]),
                 "add_bias_linear": not llama, "hidden_dropout": 0.0 if llama else 0.1,
                 "attention_dropout": 0.0 if llama else 0.1,
                 "position_embedding_type": "rope" if llama else "learned_absolute"}
    parallel = {"tp": tp, "pp": pp, "dp": dp, "context_parallel_size": r["cp"],
                "sequence_parallel": b(r["sequence_parallel"]),
                # NeMo's summary does not state recomputation: none (the recipes fit without).
                "recompute": "none" if r["recompute"] == "unknown" else r["recompute"],
                "use_distributed_optimizer": b(r["distributed_optimizer"]),
                "virtual_pipeline_model_parallel_size": r["vpp"]}
    if r.get("ep"):
        parallel["expert_model_parallel_size"] = r["ep"]
    training = {"micro_batch_size": r["mbs"], "global_batch_size": r["gbs"],
                "precision": r["precision"]}
    # The software stack the row ran (`stack` column, docs/config.md "Software stacks") decides
    # the attention kernel unless the row names one (a run that set it itself).
    if r.get("stack"):
        training["stack"] = r["stack"]
    if r.get("attention"):
        training["attention"] = r["attention"]
    return ey.experiment_yaml(model, parallel, training, tp * int(r["cp"]) * pp * dp,
                              preset=r.get("cluster_preset") or "dgx-h100")


def extra_sets(r):
    """The row's `extra` overrides as scalescope --set arguments."""
    out = []
    for kv in filter(None, (r.get("extra") or "").split(";")):
        out += ["--set", kv.strip()]
    return out


def why_skip(r):
    if r.get("skip"):  # a row scalescope cannot express, said in the CSV (its `skip` column)
        return r["skip"]
    if r["precision"] not in ("bf16", "fp8", "nvfp4"):
        return f"precision {r['precision'] or '(not published)'} not modelled"
    if int(r["gpus"]) > 16384:
        return f"{r['gpus']} GPUs > 16k"
    if r["recompute"] not in ("none", "selective", "full", "unknown"):
        return f"recompute '{r['recompute']}' unknown"
    return None


# NeMo's model-FLOPs formulas of the 24.12 era (NVIDIA/NeMo nemo/utils/flops_formulas.py, before
# the causal discount was added): the NeMo rows' TFLOP/s are in this count.
NEMO_VOCAB = {"gpt3": 51200, "llama2": 32000, "llama3": 128256}


def nemo_flops(r):
    family = r["model"].lower().split("-")[0]
    gbs, s, L, h = (float(r[k]) for k in ("gbs", "seq", "num_layers", "hidden"))
    if family == "gpt3":
        return (24 * gbs * s * h * h + 4 * gbs * s * s * h) * (3 * L) + 6 * gbs * s * h * NEMO_VOCAB[family]
    groups, heads, ffn = float(r["groups"]), float(r["heads"]), float(r["ffn"])
    return gbs * s * L * h * h * (12 + 12 * groups / heads + 18 * ffn / h + 12 * s / h
                                  + 6 * NEMO_VOCAB[family] / (L * h))


def run_row(scalescope, i, r, tmp, timeout, sets):
    """One row through `scalescope run --quiet`: (row dict, None) or (None, why skipped)."""
    why = why_skip(r)
    if why:
        return None, why
    ypath = os.path.join(tmp, f"row{i}.yaml")
    with open(ypath, "w") as f:
        f.write(experiment_yaml(r))
    out = os.path.join(tmp, f"row{i}")
    try:
        p = subprocess.run(["nice", "-n", "15", scalescope, "run", ypath, "--quiet", "-o", out]
                           + extra_sets(r) + [a for kv in sets for a in ("--set", kv)],
                           capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "TMPDIR": tmp})
    except subprocess.TimeoutExpired:
        return None, f"run took > {timeout:.0f} s"
    if p.returncode != 0:
        msg = (p.stderr or p.stdout).strip().splitlines()
        return None, msg[-1] if msg else f"exit {p.returncode}"
    s = json.load(open(os.path.join(out, "summary.json")))
    pt, ptf = s["iteration_time_s"], s["model_tflops_per_gpu"]
    meas = float(r["measured"])
    if r["unit"] == "iteration_time_s":
        mt, mtf = meas, ptf * pt / meas
    elif r["unit"] == "tokens_per_s_per_gpu":
        mt = float(r["gbs"]) * float(r["seq"]) / (meas * float(r["gpus"]))
        mtf = ptf * pt / mt
    elif r["unit"] == "megatron_tflops_per_gpu":
        # Megatron's own TFLOP/s per GPU (training.py's num_floating_point_operations, the
        # count scalescope's model_tflops_per_gpu reproduces) → the iteration time.
        mt, mtf = ptf * pt / meas, meas
    else:  # NeMo's TFLOP/s per GPU in NeMo's FLOP count → the measured iteration time
        mt = nemo_flops(r) / (meas * 1e12 * float(r["gpus"]))
        mtf = ptf * pt / mt
    return {"model": r["model"], "gpus": int(r["gpus"]), "measured_s": mt, "predicted_s": pt,
            "measured_tflops": mtf, "predicted_tflops": ptf, "error": pt / mt - 1,
            "fits": s.get("memory", {}).get("fits", ""),
            "peak_memory_gib": s.get("peak_memory_bytes", 0) / 2**30,
            "moe": bool(r.get("ep")), "long_sequence": r["model"].startswith("LLAMA2-7B-"),
            "vintage": r.get("vintage", "")}, None


def evaluate(scalescope, rows, tmp, timeout=60.0, sets=(), jobs=1):
    """Every row, in order: (results, skipped); results as run_row returns them."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        done = list(ex.map(lambda a: run_row(scalescope, a[0], a[1], tmp, timeout, sets),
                           enumerate(rows)))
    results = [d for d, _ in done if d]
    skipped = [(r["model"], r["gpus"], why) for r, (d, why) in zip(rows, done) if not d]
    return results, skipped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scalescope", default=os.path.join(ROOT, "build", "scalescope"))
    ap.add_argument("--csv", nargs="+", default=DEFAULT_CSVS)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per run")
    ap.add_argument("--only", help="run only the rows whose model name contains this string")
    ap.add_argument("--keep", help="write the rows' YAML and results under this folder")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a scalescope --set override applied to every row after its own "
                         "(repeatable): what-if studies over the whole table")
    args = ap.parse_args()

    rows = [r for path in args.csv for r in csv.DictReader(open(path))
            if not args.only or args.only in r["model"]]
    tmp = args.keep or tempfile.mkdtemp(prefix="h100_validate_")
    os.makedirs(tmp, exist_ok=True)
    results, skipped = evaluate(args.scalescope, rows, tmp, args.timeout, args.set, args.jobs)
    print(f"{'model':<40} {'gpus':>5} {'meas s':>8} {'pred s':>8} {'meas TF':>8} {'pred TF':>8} "
          f"{'err':>7} {'fits':>5}")
    for d in results:
        print(f"{d['model']:<40} {d['gpus']:>5} {d['measured_s']:8.4f} {d['predicted_s']:8.4f} "
              f"{d['measured_tflops']:8.1f} {d['predicted_tflops']:8.1f} "
              f"{100 * d['error']:+6.1f}% {str(d['fits']):>5}")
    for m, g, why in skipped:
        print(f"SKIPPED {m} ({g} GPUs): {why}")
    errs = [d["error"] for d in results]
    if errs:
        print(f"rows {len(errs)} (skipped {len(skipped)})  iteration-time error (pred/meas - 1): "
              f"median {100 * statistics.median(errs):+.1f} %, median |err| "
              f"{100 * statistics.median(abs(e) for e in errs):.1f} %, "
              f"min {100 * min(errs):+.1f} %, max {100 * max(errs):+.1f} %")


if __name__ == "__main__":
    main()
