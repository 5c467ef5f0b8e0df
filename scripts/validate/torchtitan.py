#!/usr/bin/env python3
"""Captured Llama modules against torchtitan's published H100 measurements (held out: nothing in
scalescope was fitted to them). torchtitan runs PyTorch code with torch.compile, FSDP2, DTensor
TP/SP, torchao float8 and Inductor's async TP, which is what a capture of
inputs/pytorch/llama.py models (docs/flint.md "fp8", "Async TP").

    scripts/validate/torchtitan.py [BUILD_DIR] [--check] [--json FILE] [--set KEY=VALUE ...]
    (needs /usr/bin/python3 with torch; --json writes the ratios and memory rows for
    scripts/validate/all.py; --set: a scalescope override for every run, after the script's own)

--check (tests/e2e/torchtitan.sh): exit 1 if a ratio is off by more than 10 % or the 8B jobs'
peak memory by more than 5 % (a guard on the model, not a fit: nothing here tunes anything).

Sources (pytorch/torchtitan):
  benchmarks/llama3_h100_202412_torchtitan.md, Tables 1, 3, 4;
  benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (its table, restated in docs/performance.md).
Their H100s are Grand Teton's 96 GB HBM2e parts at a 500 W power limit; the cluster preset is a
700 W DGX H100, so absolute tokens/s are not comparable and the script compares ratios: what a
technique buys (fp8 over bf16, async TP over plain TP) at one job, both runs modelled alike.
torchtitan compiles each TransformerBlock and runs embedding, output and loss eager
(`apply_compile`): model.compile: blocks. Also printed: peak memory against the reported one
(GiB; torchtitan reports the caching allocator's peak reserved memory).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ap = argparse.ArgumentParser()
ap.add_argument("build", nargs="?", default=os.path.join(repo, "build"),
                help="the build directory, or the scalescope binary itself")
ap.add_argument("--check", action="store_true")
ap.add_argument("--json", dest="json_out")
ap.add_argument("--set", action="append", default=[], dest="user_sets")
cli = ap.parse_args()
check, json_out, user_sets = cli.check, cli.json_out, cli.user_sets
bin_ = cli.build if os.path.isfile(cli.build) else os.path.join(cli.build, "scalescope")
tmp = tempfile.mkdtemp()

L8 = dict(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=128256, ffn_dim=14336)
L70 = dict(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, vocab_size=128256, ffn_dim=28672)
# name, module args, preset, GPUs, TP, local batch, recompute, [(label, measured tokens/s/GPU,
# measured GiB or None, precision, async TP)]
JOBS = [
    ("8B, 8 GPUs, FSDP 8 (Dec 2024 Table 1)", L8, "llama3-8b", 8, 1, 2, "op",
     [("bf16", 6667, 77.0, "bf16", False), ("fp8", 8532, 76.8, "fp8", False)]),
    ("8B, 128 GPUs, FSDP 128 (Dec 2024 Table 3)", L8, "llama3-8b", 128, 1, 2, "op",
     [("bf16", 6514, 62.0, "bf16", False), ("fp8", 8380, 61.8, "fp8", False)]),
    ("8B, 64 GPUs, FSDP 8 x TP 8 (June 2025)", L8, "llama3-8b", 64, 8, 12, "op",
     [("bf16", 4378, None, "bf16", False), ("bf16 async TP", 4809, None, "bf16", True),
      ("fp8", 5078, None, "fp8", False), ("fp8 async TP", 5570, None, "fp8", True)]),
    ("70B, 256 GPUs, FSDP 32 x TP 8 (June 2025)", L70, "llama3-70b", 256, 8, 16, "full",
     [("bf16", 597, None, "bf16", False), ("bf16 async TP", 652, None, "bf16", True),
      ("fp8", 810, None, "fp8", False), ("fp8 async TP", 942, None, "fp8", True)]),
    ("70B, 256 GPUs, FSDP 32 x TP 8 (Dec 2024 Table 4)", L70, "llama3-70b", 256, 8, 16, "full",
     [("fp8", 829, 71.9, "fp8", False), ("fp8 async TP", 876, 67.6, "fp8", True)]),
]
# Context parallelism (Dec 2024 Table 2): Llama 3.1 8B on 8 GPUs, FSDP × CP = 8, local batch 1,
# full AC, compile + float8, the sequence growing with CP. Reported, not checked: each job is
# its own sequence length, so only tokens/s across them compare.
CP_JOBS = [(1, 32768, 3890, 83.9), (2, 65536, 2540, 84.2), (4, 131072, 1071, 84.0),
           (8, 262144, 548, 84.5)]
# Ratios compared: (job index, numerator label, denominator label).
RATIOS = [(0, "fp8", "bf16"), (1, "fp8", "bf16"), (2, "fp8", "bf16"), (2, "bf16 async TP", "bf16"),
          (2, "fp8 async TP", "fp8"), (3, "fp8", "bf16"), (3, "bf16 async TP", "bf16"),
          (3, "fp8 async TP", "fp8"), (4, "fp8 async TP", "fp8")]


def run(*args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def capture(name, margs, seq, batch):
    """inputs/pytorch/llama.py captured at these constructor arguments; the capture's path."""
    argfile = os.path.join(tmp, f"{name}.args.json")
    json.dump(margs, open(argfile, "w"))
    path = os.path.join(tmp, f"{name}.capture.h5")
    run("/usr/bin/python3", os.path.join(repo, "scripts/capture/capture.py"),
        os.path.join(repo, "inputs/pytorch/llama.py:Transformer"), "--args", argfile,
        "--seq", str(seq), "--batch", str(batch), "-o", path)
    return path


def replay(exp, cap, out, *sets):
    """Runs experiment `exp` on capture `cap` as torchtitan compiles it: (tokens/s per GPU,
    peak GiB)."""
    extra = [a for kv in list(sets) + user_sets for a in ("--set", kv)]
    run(bin_, "run", exp, "-o", out, "--quiet", "--set", f"model.source={cap}",
        "--set", "model.tp_plan=llama", "--set", "model.compile=blocks",
        "--set", "run.on_oom=warn", *extra)
    s = json.load(open(os.path.join(out, "summary.json")))
    return s["tokens_per_s"] / s["world_size"], s["peak_memory_bytes"] / 2**30


captures = {}
results = {}
for j, (name, margs, preset, gpus, tp, batch, recompute, runs) in enumerate(JOBS):
    key = (margs["n_layers"], batch)
    if key not in captures:
        captures[key] = capture(str(j), margs, 8192, batch)
    dp = gpus // tp
    exp = os.path.join(tmp, f"{j}.yaml")
    with open(exp, "w") as f:
        f.write(f"""model: {{preset: {preset}, seq_length: 8192}}
parallel: {{tp: {tp}, pp: 1, dp: {dp}, sequence_parallel: {str(tp > 1).lower()}, fsdp: true,
           reshard_after_forward: true, recompute: {recompute}}}
training: {{micro_batch_size: {batch}, global_batch_size: {batch * dp}}}
cluster: {{preset: dgx-h100, num_gpus: {gpus}}}
run: {{trace_ranks: [0]}}
""")
    for label, measured, gib, precision, async_tp in runs:
        # fp8 as torchtitan's docs/float8.md recommends it: Float8Linear with FSDP's float8
        # all-gather and precomputed scales (and the fp8 weight recomputed for the backward).
        fp8_gather = f"parallel.fp8_param_gather={str(precision == 'fp8').lower()}"
        tps, peak = replay(exp, captures[key], os.path.join(tmp, f"{j}-{label.replace(' ', '_')}"),
                           f"training.precision={precision}",
                           f"parallel.tp_comm_overlap={str(async_tp).lower()}", fp8_gather)
        results[(j, label)] = (tps, measured, peak, gib)

cp_rows = []
for cp, seq, measured, gib in CP_JOBS:
    cap = capture(f"cp{cp}", L8, seq, 1)
    exp = os.path.join(tmp, f"cp{cp}.yaml")
    with open(exp, "w") as f:
        f.write(f"""model: {{preset: llama3-8b, seq_length: {seq}}}
parallel: {{tp: 1, pp: 1, cp: {cp}, dp: {8 // cp}, fsdp: true, reshard_after_forward: true,
           recompute: full}}
training: {{micro_batch_size: 1, global_batch_size: {8 // cp}, precision: fp8}}
cluster: {{preset: dgx-h100, num_gpus: 8}}
run: {{trace_ranks: [0]}}
""")
    tps, peak = replay(exp, cap, os.path.join(tmp, f"cp{cp}"), "parallel.fp8_param_gather=true")
    cp_rows.append((cp, seq, tps, measured, peak, gib))

print("| job | run | tokens/s/GPU here | measured | peak GiB here | measured |")
print("|---|---|---|---|---|---|")
for (j, label), (tps, measured, gib, mgib) in results.items():
    print(f"| {JOBS[j][0]} | {label} | {tps:,.0f} | {measured:,} | {gib:.1f} | "
          f"{'' if mgib is None else mgib} |")
print()
print("| job | ratio | here | measured | error |")
print("|---|---|---|---|---|")
failures = []
for j, a, b in RATIOS:
    here = results[(j, a)][0] / results[(j, b)][0]
    measured = results[(j, a)][1] / results[(j, b)][1]
    print(f"| {JOBS[j][0]} | {a} / {b} | {here:.3f} | {measured:.3f} | "
          f"{(here / measured - 1) * 100:+.1f} % |")
    if abs(here / measured - 1) > 0.10:
        failures.append(f"{JOBS[j][0]}: {a} / {b} {here:.3f} against {measured:.3f}")
for (j, label), (_, _, gib, mgib) in results.items():
    if mgib is not None and JOBS[j][2] == "llama3-8b" and abs(gib / mgib - 1) > 0.05:
        failures.append(f"{JOBS[j][0]} {label}: {gib:.1f} GiB against {mgib} GiB")
print()
print("| 8B, 8 GPUs, FSDP x CP = 8, float8, full AC (Dec 2024 Table 2) | tokens/s/GPU here | "
      "measured | relative to CP 1, here | measured | peak GiB here | measured |")
print("|---|---|---|---|---|---|---|")
for cp, seq, tps, measured, gib, mgib in cp_rows:
    print(f"| CP {cp}, sequence {seq:,} | {tps:,.0f} | {measured:,} | {tps / cp_rows[0][2]:.3f} | "
          f"{measured / cp_rows[0][3]:.3f} | {gib:.1f} | {mgib} |")
if json_out:
    json.dump({
        "ratios": [{"job": JOBS[j][0], "ratio": f"{a} / {b}",
                    "predicted": results[(j, a)][0] / results[(j, b)][0],
                    "measured": results[(j, a)][1] / results[(j, b)][1]} for j, a, b in RATIOS],
        "memory": [{"job": JOBS[j][0], "run": label, "predicted_gib": gib, "measured_gib": mgib}
                   for (j, label), (_, _, gib, mgib) in results.items() if mgib is not None],
    }, open(json_out, "w"), indent=1)
if check and failures:
    print("torchtitan check FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
    sys.exit(1)
