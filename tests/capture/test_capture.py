#!/usr/bin/env python3
"""scripts/capture/capture.py on the three reference modules (issue 11 part 1), small sizes:
the captured joint graph's GEMM FLOPs against the hand count of the model's linear layers,
module paths of every GEMM, the outer graph's embedding and loss, one-line errors.
Usage: test_capture.py REPO (exit 77 when PyTorch is missing: `scripts/setup.sh` installs it)."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
    import h5py
except ImportError as e:
    print(f"SKIP: {e} (scripts/setup.sh installs python3-torch and python3-h5py)")
    sys.exit(77)

repo = sys.argv[1]
capture = os.path.join(repo, "scripts/capture/capture.py")
tmp = tempfile.mkdtemp()
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def run(model, args, out, *extra):
    path = os.path.join(tmp, "args.yaml")
    with open(path, "w") as f:
        json.dump(args, f)  # JSON is YAML
    r = subprocess.run([sys.executable, capture, os.path.join(repo, "inputs/pytorch", model),
                        "--args", path, "-o", out, *extra], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"capture {model} failed: {r.stderr.strip()[-500:]}")
    with h5py.File(out) as f:
        nodes = {g: json.loads(bytes(f[g + "/nodes_json"][()]).decode()) for g in ("block", "outer")}
        return dict(f["meta"].attrs), nodes


def gemm_flops(nodes):
    total = 0
    for n in nodes:
        op = n["op"].split(".")[0]
        if op in ("mm", "addmm", "bmm"):
            out = n["shapes"][0]
            a = nodes[n["inputs"][-2]]["shapes"][0]
            k = a[-1]
            m_n = 1
            for d in out:
                m_n *= d
            total += 2 * m_n * k
    return total


# Llama: T = 256 tokens, h 256, 4 heads of 64, 2 KV heads, f 512. Per block forward the linear
# layers do 2·T·(h·(q + 2kv) + q·h + 3·h·f) FLOPs; the backward twice that (dgrad + wgrad): the
# joint graph's linear GEMMs 3×. Attention's two batched GEMMs, 2·2·b·a·s²·dh forward, also 3×.
T, h, q, kv, f, a, dh = 256, 256, 256, 128, 512, 4, 64
meta, g = run("llama.py:Transformer", {"dim": h, "n_layers": 3, "n_heads": a, "n_kv_heads": 2,
                                        "vocab_size": 1000, "ffn_dim": f}, os.path.join(tmp, "l.h5"),
              "--seq", str(T), "--dtype", "fp32")
linear = 2 * T * (h * (q + 2 * kv) + q * h + 3 * h * f)
attention = 2 * 2 * a * T * T * dh
check(gemm_flops(g["block"]) == 3 * (linear + attention),
      f"llama block GEMM FLOPs {gemm_flops(g['block'])} != 3·{linear + attention}")
check(meta["num_blocks"] == 3 and meta["vocab_size"] == 1000 and meta["seq"] == T, f"meta {meta}")
mms = [n for n in g["block"] if n["op"].startswith("mm")]
check(len(mms) == 21, f"llama block: {len(mms)} mm nodes, expected 7 linear × 3")
check(all(n["module"].startswith("layers.0.") for n in mms), "an mm without its module path")
ops = {n["op"].split(".")[0] for n in g["outer"]}
for op in ("embedding", "nll_loss_forward", "nll_loss_backward", "embedding_dense_backward", "mm"):
    check(op in ops, f"llama outer graph lacks {op}: {sorted(ops)}")
# The output layer: 2·T·h·V forward, ×3 with its backward.
check(gemm_flops(g["outer"]) == 3 * 2 * T * h * 1000, f"outer GEMM FLOPs {gemm_flops(g['outer'])}")

# GPT: biased linears are addmm; the MLP is 4h wide.
meta, g = run("gpt3.py:GPT", {"vocab_size": 1000, "block_size": 128, "n_layer": 2, "n_head": 4,
                              "n_embd": 256}, os.path.join(tmp, "g.h5"),
              "--seq", "128", "--blocks", "h", "--dtype", "fp32")
T, h = 128, 256
linear = 2 * T * (3 * h * h + h * h + 2 * 4 * h * h)
attention = 2 * 2 * 4 * T * T * (h // 4)
check(gemm_flops(g["block"]) == 3 * (linear + attention),
      f"gpt block GEMM FLOPs {gemm_flops(g['block'])} != 3·{linear + attention}")
check(any(n["op"].startswith("addmm") for n in g["block"]), "gpt: no addmm for biased linears")

# Mixtral: router + E experts, each on T·k/E token copies (balanced capture routing).
meta, g = run("mixtral.py:Mixtral", {"dim": 256, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                                      "vocab_size": 1000, "ffn_dim": 512, "num_experts": 4,
                                      "top_k": 2}, os.path.join(tmp, "m.h5"),
              "--seq", "256", "--dtype", "fp32")
T, h, f, E, k = 256, 256, 512, 4, 2
experts = E * 2 * (T * k // E) * 3 * h * f
router = 2 * T * h * E
attn_linear = 2 * T * (h * (256 + 2 * 128) + 256 * h)
attention = 2 * 2 * 4 * T * T * 64
check(gemm_flops(g["block"]) == 3 * (experts + router + attn_linear + attention),
      f"mixtral block GEMM FLOPs {gemm_flops(g['block'])}")
check(any("block_sparse_moe.experts.3" in n["module"] for n in g["block"]), "no expert 3 path")

# Errors: one line, exit 2, no output.
bad = os.path.join(tmp, "bad.h5")
r = subprocess.run([sys.executable, capture, os.path.join(repo, "inputs/pytorch/llama.py:Nope"),
                    "-o", bad], capture_output=True, text=True)
check(r.returncode == 2 and r.stderr.count("\n") == 1 and "no class Nope" in r.stderr
      and not os.path.exists(bad), f"bad class: rc {r.returncode} {r.stderr!r}")
if failures:
    sys.exit(1)
print("ok: llama, gpt, mixtral captured; GEMM FLOPs match the hand counts")
