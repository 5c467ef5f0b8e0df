#!/usr/bin/python3
"""torchtitan's Llama 3.1 405B runs on 512 H100 (FSDP × TP × PP, and × CP) against scalescope:
what the pipeline schedule and context parallelism change, and the peak memory torchtitan
reports. Held out: nothing was fitted to these rows.

Source: pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370,
torch 1963fc8, 2024-12-26), Table 5 ("3D parallelism (FSDP + TP + PP) + torch.compile + Float8
+ AsyncTP ... 512 GPUs (FSDP 8, TP 8, PP8). Local batch size 32, global batch size 256. Full
activation checkpointing": 1F1B 100 TPS/GPU 82.5 GiB, Interleaved 1F1B 128 TPS/GPU 72.7 GiB)
and Table 6 ("4D parallelism (FSDP + TP + PP + CP) ... 1F1B ... 512 GPUs (TP 8, PP8). Local batch
size 8. Full activation checkpointing": FSDP 8 CP 1 32768 76 / 75.3 GiB, FSDP 4 CP 2 65536
47 / 75.9, FSDP 2 CP 4 131072 31 / 77.1, FSDP 1 CP 8 262144 16 / 84.9). Their H100s are Grand
Teton's 96 GB HBM2e parts at a 500 W power limit and the preset is a 700 W DGX H100, so tokens/s
are compared as ratios within a table (what the schedule, what CP buys), as
scripts/validate/torchtitan.py does; memory (the caching allocator's peak reserved bytes, "the
maximum across all GPUs") is compared directly.

Every run is inputs/experiments/llama3-405b-torchtitan-fsdp-tp8-pp8.yaml (its comments cite the
settings) with the table's parallel sizes; torchtitan's default of PP-degree micro-batches
(config_manager.py l.342-351 at 9dec370) gives 8 micro-batches: 4 sequences each in Table 5
(local batch 32), 1 in Table 6 (local batch 8). 1F1B puts 15 | 16 × 6 | 15 layers on the
stages, Interleaved1F1B 7 | 8 × 14 | 7 on 16 virtual stages (pipelining_utils.py
generate_split_points, l.18-57).

    scripts/validate/torchtitan_405b.py [--scalescope build/scalescope] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXPERIMENT = os.path.join(ROOT, "inputs", "experiments", "llama3-405b-torchtitan-fsdp-tp8-pp8.yaml")
ONE_F_ONE_B = "Et*15|(t*16|)*6t*15L"
INTERLEAVED = "Ettttttt|(tttttttt|)*14tttttttL"

# name, overrides, measured tokens/s per GPU, measured GiB
JOBS = [
    ("Table 5 1F1B", {"parallel.pipeline_layout": ONE_F_ONE_B}, 100, 82.5),
    ("Table 5 Interleaved 1F1B", {"parallel.pipeline_layout": INTERLEAVED}, 128, 72.7),
] + [
    (f"Table 6 FSDP {8 // cp} CP {cp} seq {32768 * cp}",
     {"parallel.pipeline_layout": ONE_F_ONE_B, "parallel.context_parallel_size": cp,
      "parallel.data_parallel_size": 8 // cp, "model.seq_length": 32768 * cp,
      "training.micro_batch_size": 1, "training.global_batch_size": 8 * (8 // cp)},
     tps, gib)
    for cp, tps, gib in ((1, 76, 75.3), (2, 47, 75.9), (4, 31, 77.1), (8, 16, 84.9))
]
# (numerator job, denominator job): ratios of tokens/s per GPU within one table.
RATIOS = [(1, 0), (3, 2), (4, 2), (5, 2)]


def run(scalescope, name, sets, tmp, extra_sets=()):
    out = os.path.join(tmp, name.replace(" ", "_"))
    args = [scalescope, "run", EXPERIMENT, "--quiet", "-o", out]
    for k, v in list(sets.items()) + [tuple(kv.split("=", 1)) for kv in extra_sets]:
        args += ["--set", f"{k}={v}"]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{name}: {(p.stderr or p.stdout).strip()}")
    s = json.load(open(os.path.join(out, "summary.json")))
    return {"tokens_per_s_per_gpu": s["tokens_per_s"] / s["world_size"],
            "reserved_gib": s["memory"]["peak_reserved_bytes"] / 2**30}


def evaluate(scalescope, extra_sets=()):
    tmp = tempfile.mkdtemp(prefix="torchtitan_405b_")
    got = [run(scalescope, name, sets, tmp, extra_sets) for name, sets, _, _ in JOBS]
    ratios = []
    for a, b in RATIOS:
        meas = JOBS[a][2] / JOBS[b][2]
        pred = got[a]["tokens_per_s_per_gpu"] / got[b]["tokens_per_s_per_gpu"]
        ratios.append({"id": f"405B {JOBS[a][0]} / {JOBS[b][0].split(' ', 2)[2]}",
                       "measured": meas, "predicted": pred, "error": pred / meas - 1})
    memory = [{"job": name, "measured_gib": gib, "predicted_gib": g["reserved_gib"],
               "error": g["reserved_gib"] / gib - 1,
               "predicted_tokens_per_s_per_gpu": g["tokens_per_s_per_gpu"],
               "measured_tokens_per_s_per_gpu": tps}
              for (name, _, tps, gib), g in zip(JOBS, got)]
    return ratios, memory


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scalescope", default=os.path.join(ROOT, "build", "scalescope"))
    ap.add_argument("--json")
    args = ap.parse_args()
    ratios, memory = evaluate(os.path.abspath(args.scalescope))
    print(f"{'ratio of tokens/s per GPU':<58} {'meas':>7} {'pred':>7} {'err':>7}")
    for r in ratios:
        print(f"{r['id']:<58} {r['measured']:7.3f} {r['predicted']:7.3f} {100 * r['error']:+6.1f}%")
    print(f"\n{'peak reserved memory':<40} {'meas GiB':>9} {'pred GiB':>9} {'err':>7}  "
          f"(tokens/s/GPU meas 500 W, pred 700 W)")
    for m in memory:
        print(f"{m['job']:<40} {m['measured_gib']:9.1f} {m['predicted_gib']:9.1f} "
              f"{100 * m['error']:+6.1f}%  ({m['measured_tokens_per_s_per_gpu']}, "
              f"{m['predicted_tokens_per_s_per_gpu']:.1f})")
    if args.json:
        json.dump({"ratios": ratios, "memory": memory}, open(args.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
