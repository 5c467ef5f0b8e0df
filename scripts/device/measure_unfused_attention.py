#!/usr/bin/env python3
"""Times Megatron's unfused core attention pass by pass on one GPU (fp16), to check the cost
model's unfused-attention passes (docs/cost-model.md §1.4).

Usage: measure_unfused_attention.py OUT.csv
For each (B = batch·heads, s, dh): the forward passes one at a time — QKᵀ (`baddbmm`, β = 0,
α = 1/√dh), softmax over the causally masked scores (`masked_fill` + `softmax`: two kernels where
Megatron's fused kernel is one, so the mask fill is timed on its own too), dropout (p = 0.1), PV
(`bmm`) — and the whole forward and backward through autograd. Median of 20 timed repetitions
after 3 warm-ups, CUDA events around each; tensors are far larger than L2.
"""
import csv
import statistics
import sys

import torch
import torch.nn.functional as F

SHAPES = [  # (B, s, dh, what)
    (32, 2048, 96, "GPT-3 3.6B, TP 1, micro-batch 1"),
    (12, 2048, 128, "GPT-3 175B, TP 8, micro-batch 1"),
    (48, 2048, 128, "GPT-3 175B, TP 8, micro-batch 4"),
]


def bench(fn, reps=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(100_000)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def main():
    out = sys.argv[1]
    dev = torch.device("cuda")
    rows = []
    for B, s, dh, what in SHAPES:
        q = torch.randn(B, s, dh, device=dev, dtype=torch.float16)
        k = torch.randn(B, s, dh, device=dev, dtype=torch.float16)
        v = torch.randn(B, s, dh, device=dev, dtype=torch.float16)
        mask = torch.ones(s, s, device=dev, dtype=torch.bool).triu(1)
        scores = torch.empty(B, s, s, device=dev, dtype=torch.float16)
        alpha = dh ** -0.5

        def qk():
            torch.baddbmm(scores, q, k.transpose(1, 2), beta=0.0, alpha=alpha, out=scores)

        qk()
        probs = torch.softmax(scores.masked_fill(mask, -10000.0), dim=-1)
        t = {
            "qk_baddbmm": bench(qk),
            "mask_fill": bench(lambda: scores.masked_fill(mask, -10000.0)),
            "softmax": bench(lambda: torch.softmax(scores, dim=-1)),
            "dropout": bench(lambda: F.dropout(probs, 0.1, True)),
            "pv_bmm": bench(lambda: torch.bmm(probs, v)),
        }
        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))

        def forward():
            sc = torch.baddbmm(torch.empty(B, s, s, device=dev, dtype=torch.float16), qg,
                               kg.transpose(1, 2), beta=0.0, alpha=alpha)
            p = torch.softmax(sc.masked_fill(mask, -10000.0), dim=-1)
            return torch.bmm(F.dropout(p, 0.1, True), vg)

        do = torch.randn(B, s, dh, device=dev, dtype=torch.float16)
        t["forward_total"] = bench(forward)
        t["forward_backward_total"] = bench(
            lambda: torch.autograd.grad(forward(), (qg, kg, vg), do))
        for name, us in t.items():
            rows.append({"B": B, "s": s, "dh": dh, "what": what, "pass": name,
                         "median_us": f"{us:.1f}"})
            print(f"{what:34s} {name:24s} {us:9.1f} us", flush=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(torch.cuda.get_device_name(), torch.__version__)


if __name__ == "__main__":
    main()
