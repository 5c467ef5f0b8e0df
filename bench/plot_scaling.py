#!/usr/bin/python3
"""Draws bench/results/scaling.png from scaling.csv and prints the fitted exponents."""
import csv
import math
import os
import sys

import matplotlib
matplotlib.use("agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = list(csv.DictReader(open(sys.argv[1])))
out = sys.argv[2]
series = {}
for r in rows:
    series.setdefault(f"{r['engine']} np {r['processes']}", []).append(r)

def slope(xs, ys):
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
for name, rs in series.items():
    n = [int(r["world_size"]) for r in rs]
    wall = [float(r["wall_s"]) for r in rs]
    rate = [float(r["committed_events_per_s"]) / 1e6 for r in rs]
    engine_wall = [float(r["engine_wall_s"]) for r in rs]
    k = slope(n, wall) if len(n) > 1 else float("nan")
    ke = slope(n, engine_wall) if len(n) > 1 else float("nan")
    print(f"{name}: process wall time ∝ world^{k:.2f}, engine wall time ∝ world^{ke:.2f}, "
          f"committed events/s {rate[0]:.2f} M → {rate[-1]:.2f} M")
    ax1.loglog(n, wall, "o-", label=f"{name} (process ∝ N^{k:.2f}, engine ∝ N^{ke:.2f})")
    ax2.semilogx(n, rate, "o-", label=name)
for ax in (ax1, ax2):
    ax.set_xlabel("virtual GPUs (world size)")
    sizes = sorted({int(r["world_size"]) for r in rows})
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{n // 1024}k" for n in sizes])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
ax1.set_ylabel("wall time of one run (s)")
ax1.set_title("Llama 3 405B, one iteration: wall time")
ax2.set_ylabel("committed events/s (millions)")
ax2.set_title("engine throughput")
ax2.set_ylim(bottom=0)
fig.tight_layout()
tmp = out + ".tmp.png"
fig.savefig(tmp, dpi=110)
os.replace(tmp, out)
print(f"wrote {out}")
