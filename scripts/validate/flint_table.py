#!/usr/bin/env python3
"""docs/flint.md's table: a captured reference module against the built-in builder at the same
layout, per layer (forward + backward of one micro-batch) and per iteration.

    scripts/validate/flint_table.py [BUILD_DIR]      (needs h5py; captures with the interpreter
                                                      scripts/capture/python picks: the pinned
                                                      PyTorch 2.x venv, else Debian's 1.13)

The shipped experiments as they are, but for what captures do not lower yet (TE's TP overlap: off
in both runs; and selective recomputation for eager captures, which recompute nothing then). Each model twice: captured with model.compile: inductor against the
builder's fused attention, and model.compile: eager against the builder's unfused attention (the
eager modules' batched GEMMs). The Llama modules with fused_projections (wqkv, w13: Megatron's
layout, which the builder models) and once with separate wq/wk/wv, w1/w3 (torchtitan's)."""
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter

import h5py

repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(repo, "build")
bin_ = os.path.join(build, "scalescope")
tmp = tempfile.mkdtemp()
KINDS = ["gemm", "attention", "elementwise", "norm", "all_reduce", "all_gather", "reduce_scatter",
         "send_recv", "all_to_all"]

L8 = dict(dim=4096, n_layers=8, n_heads=32, n_kv_heads=8, vocab_size=128256, ffn_dim=14336)
CASES = [
    # name, module, ctor args, seq, plan, shipped experiment
    ("Llama 3 8B (quickstart, 8 layers)", "llama.py:Transformer",
     dict(L8, fused_projections=True), 4096, "llama", "quickstart"),
    ("Llama 3 8B, separate projections", "llama.py:Transformer", L8, 4096, "llama", "quickstart"),
    ("Llama 3 8B, CP 2 (DP 4)", "llama.py:Transformer", dict(L8, fused_projections=True), 4096,
     "llama", "quickstart"),
    ("Llama 3 70B", "llama.py:Transformer",
     dict(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, vocab_size=128256, ffn_dim=28672,
          fused_projections=True),
     8192, "llama", "llama3-70b-1k"),
    ("Mixtral 8x7B (EP 8)", "mixtral.py:Mixtral",
     dict(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=32000, ffn_dim=14336,
          num_experts=8, top_k=2),
     4096, "llama", "mixtral-8x7b-1k"),
    ("GPT-3 175B", "gpt3.py:GPT",
     dict(vocab_size=50257, block_size=2048, n_layer=96, n_head=96, n_embd=12288),
     2048, "gpt", "gpt3-175b-1024"),
    # Public code as published: nanoGPT's model.py (../shared/fixtures, through a factory), its
    # plan inferred from the graph; the builder on the same shapes (GPT-3's architecture at GPT-2
    # medium's sizes) on 64 H100, TP 2 · DP 32.
    ("nanoGPT GPT-2 medium (factory, plan inferred)",
     "factory:tests/capture/nanogpt_factory.py:gpt2_medium", None, 1024, None, "quickstart"),
]
# Per case, the layout and shapes of both runs where the shipped experiment is not the model's.
OVERRIDES = {
    "nanoGPT GPT-2 medium (factory, plan inferred)": [
        "model.preset=gpt3-175b", "model.num_layers=24", "model.hidden_size=1024",
        "model.ffn_hidden_size=4096", "model.num_attention_heads=16", "model.kv_channels=64",
        "model.seq_length=1024", "model.vocab_size=50257", "model.make_vocab_size_divisible_by=1",
        "model.hidden_dropout=0", "model.attention_dropout=0", "parallel.tp=2", "parallel.pp=1",
        "parallel.dp=32", "parallel.sequence_parallel=false", "cluster.num_gpus=64",
        "training.global_batch_size=64", "run.trace_ranks=[0]"],
}
# What captures do not lower yet, switched off in both runs: TE's TP overlap; selective
# recomputation for eager captures.
COMMON = ["--set", "parallel.tp_comm_overlap=false"]
# Compiled captures run their SDPA through cuDNN here, the fused attention the builder models
# (Transformer Engine's), so that the rows compare the lowering like for like (a capture's default
# is PyTorch's flash backend, FlashAttention-2: docs/flint.md "SDPA backend").
CUDNN = ["--set", "model.sdpa=cudnn"]
MODES = [  # label, model.compile, the builder's attention, settings of both runs, of the capture's
    ("inductor", "inductor", ["--set", "training.attention=flash"], [], CUDNN),
    ("inductor, builder's head", "inductor", ["--set", "training.attention=flash"], [],
     ["--set", "model.outer=builder"] + CUDNN),
    ("eager", "eager", ["--set", "training.attention=unfused"], ["--set", "parallel.recompute=none"],
     [])]


def run(*args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def layer_counts(graph):
    with h5py.File(graph) as f:
        t = f["templates/0"]
        kind, layer, mb, flops = t["kind"][:], t["layer"][:], t["microbatch"][:], t["flops"][:]
        names = [s.decode() if isinstance(s, bytes) else s for s in f["meta"].attrs.get("kind_names", [])]
    names = names or ["gemm", "attention", "elementwise", "norm", "embedding", "loss", "optimizer",
                      "all_reduce", "all_gather", "reduce_scatter", "send_recv", "all_to_all"]
    sel = (layer == 0) & (mb == 0)
    c = Counter(names[k] for k in kind[sel])
    # Matrix work: GEMMs (an eager capture's attention bmm among them), attention ops apart.
    gemm = float(flops[sel & (kind == 0)].sum())
    attention = float(flops[sel & (kind == 1)].sum())
    return c, gemm, attention


# The capture interpreter as `scalescope capture` picks it ($SCALESCOPE_PYTHON, the venv, 1.13).
PY = os.path.join(repo, "scripts/capture/python")
rows = []
for idx, (name, module, args, seq, plan, experiment) in enumerate(CASES):
    cap = os.path.join(tmp, f"{idx}.capture.h5")
    script = os.path.join(repo, "scripts/capture/capture.py")
    if module.startswith("factory:"):
        run(PY, script, "--factory",
            os.path.join(repo, module[len("factory:"):]), "--seq", str(seq), "-o", cap)
    else:
        argfile = os.path.join(tmp, f"{idx}.args.yaml")
        json.dump(args, open(argfile, "w"))
        run(PY, script, os.path.join(repo, "inputs/pytorch", module), "--args",
            argfile, "--seq", str(seq), "-o", cap)
    exp = os.path.join(repo, "inputs/experiments", experiment + ".yaml")
    layout = ["--set", "parallel.cp=2", "--set", "parallel.dp=4"] if "CP 2" in name else []
    for o in OVERRIDES.get(name, []):
        layout += ["--set", o]
    for label_mode, mode, attention, both, captured_only in MODES:
        if "CP 2" in name and mode == "eager":
            continue  # CP needs the fused attention
        out = {}
        for label, extra in (("builder", COMMON + both + layout + attention), ("captured", COMMON + both + layout + [
                "--set", f"model.source={cap}", "--set", f"model.compile={mode}"] +
                (["--set", f"model.tp_plan={plan}"] if plan else []) + captured_only)):
            g = os.path.join(tmp, f"{idx}-{len(captured_only)}-{mode}-{label}.h5")
            run(bin_, "graph", exp, "-o", g, *extra)
            d = os.path.join(tmp, f"{idx}-{len(captured_only)}-{mode}-{label}")
            run(bin_, "run", exp, "-o", d, "--quiet", *extra)
            s = json.load(open(os.path.join(d, "summary.json")))
            out[label] = layer_counts(g) + (s["iteration_time_s"],
                                            s["peak_memory_bytes"] / 2**30, s["world_size"])
        (cb, gb, ab, tb, mb, w), (cc, gc, ac, tc, mc, _) = out["builder"], out["captured"]
        counts = " / ".join(f"{k} {cc.get(k, 0)}:{cb.get(k, 0)}" for k in KINDS
                            if cc.get(k, 0) or cb.get(k, 0))
        rows.append(f"| {name} | {label_mode} | {experiment}.yaml, {w} GPUs | {counts} | "
                    f"{gc / gb:.4f} / {ac / ab:.4f} | {tc:.3f} / {tb:.3f} s ({tc / tb:.3f}×) | "
                    f"{mc:.1f} / {mb:.1f} GiB |")
print("PyTorch " + run(PY, "-c", "import torch; print(torch.__version__)").strip())
print("| model | capture compiled as | layout | ops per layer, captured:builder "
      "| GEMM / attention FLOPs ratio | iteration captured / builder "
      "| peak memory captured / builder |")
print("|---|---|---|---|---|---|---|")
print("\n".join(rows))
