#!/usr/bin/python3
"""The result table of `scalescope sweep` (sweep.json): counts by status, the best
configuration, and the Pareto front of iteration time against peak memory among the
configurations that fit (the fastest plan for each memory budget); with -o, a scatter plot of
every replayed configuration (peak memory against iteration time, coloured by TP, hollow when it
does not fit), the GPU's usable memory and the front."""

import argparse
import json
import os

import scalescope_results as sr

GIB = 1024.0 ** 3
FIELDS = ("index", "status", "replayed", "iteration_time_s", "model_tflops_per_gpu", "mfu",
          "peak_memory_bytes", "memory_capacity_bytes", "tp", "pp", "dp", "cp", "ep", "vpp",
          "micro_batch_size", "overrides", "message")


def load(path):
    """The sweep's rows (in rank order) and its header, from sweep.json or its directory."""
    if os.path.isdir(path):
        path = os.path.join(path, "sweep.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise sr.ResultsError(f"{path}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise sr.ResultsError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise sr.ResultsError(f"{path}: not a sweep.json (no 'rows' list)")
    for k, row in enumerate(doc["rows"]):
        missing = [f for f in FIELDS if not isinstance(row, dict) or f not in row]
        if missing:
            raise sr.ResultsError(f"{path}: row {k} lacks {', '.join(missing)}")
    return doc["rows"], doc


def pareto_front(rows):
    """Configurations that fit and that no other fitting one beats on both iteration time and
    peak memory (equal on both: the earlier index stays), fastest first."""
    fit = sorted((r for r in rows if r["status"] == "ok"),
                 key=lambda r: (r["iteration_time_s"], r["peak_memory_bytes"], r["index"]))
    front, best_memory = [], None
    for r in fit:
        if best_memory is None or r["peak_memory_bytes"] < best_memory:
            front.append(r)
            best_memory = r["peak_memory_bytes"]
    return front


def plan(r):
    return (f"TP {r['tp']} PP {r['pp']} DP {r['dp']} CP {r['cp']} EP {r['ep']} "
            f"VPP {r['vpp']} MBS {r['micro_batch_size']}")


def plot(rows, front, doc, output, title):
    plt = sr.import_pyplot()
    fig, ax = plt.subplots(figsize=(10, 6), dpi=100)
    replayed = [r for r in rows if r["replayed"]]
    if not replayed:
        raise sr.ResultsError("no configuration was replayed: nothing to plot")
    tps = sorted({r["tp"] for r in replayed})
    colors = plt.get_cmap("viridis")
    for k, tp in enumerate(tps):
        color = colors(k / max(1, len(tps) - 1))
        for fits in (True, False):
            pts = [r for r in replayed if r["tp"] == tp and (r["status"] == "ok") == fits]
            if not pts:
                continue
            ax.scatter([r["peak_memory_bytes"] / GIB for r in pts],
                       [r["iteration_time_s"] for r in pts], s=36,
                       facecolors=color if fits else "none", edgecolors=color,
                       label=f"TP {tp}" + ("" if fits else " (does not fit)"))
    if front:
        # The best time for each memory budget: a staircase from the leanest plan rightwards.
        lean = front[::-1]
        ax.plot([r["peak_memory_bytes"] / GIB for r in lean],
                [r["iteration_time_s"] for r in lean], color="#d62728", linewidth=1,
                drawstyle="steps-post", label="Pareto front")
        best = front[0]
        ax.annotate(f"best: {plan(best)}\n{best['iteration_time_s']:.4g} s",
                    (best["peak_memory_bytes"] / GIB, best["iteration_time_s"]),
                    textcoords="offset points", xytext=(-8, 8), ha="right", fontsize=8)
    capacity = max(r["memory_capacity_bytes"] for r in replayed) / GIB
    ax.axvline(capacity, color="#444444", linestyle="--", linewidth=0.8,
               label=f"usable memory {capacity:.1f} GiB")
    ax.set_xlabel("peak memory of the tightest rank (GiB)")
    ax.set_ylabel("iteration time (s)")
    ax.grid(color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title(title or f"{doc.get('experiment', 'sweep')}: {len(rows)} configurations",
                 fontsize=11)
    ax.legend(fontsize=8, framealpha=0.9)
    fig.tight_layout()
    sr.save_png(fig, output)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(
        description="Summarize a `scalescope sweep` table: counts, the best configuration and "
                    "the Pareto front of iteration time against peak memory; -o plots them.",
        epilog="example: scripts/post/sweep.py out/sweep -o sweep.png")
    p.add_argument("sweep", help="sweep.json written by `scalescope sweep`, or its directory")
    p.add_argument("-o", "--output", help="PNG to write (scatter plot); none by default")
    p.add_argument("--json", action="store_true", help="print the Pareto front as JSON rows")
    p.add_argument("--title", help="chart title (default: the experiment)")
    args = p.parse_args()
    rows, doc = load(args.sweep)
    front = pareto_front(rows)
    if args.json:
        print(json.dumps({"pareto_front": front}, indent=2))
    else:
        counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "does_not_fit", "invalid")}
        print(f"{doc.get('experiment', '?')}: {len(rows)} configurations: {counts['ok']} fit, "
              f"{counts['does_not_fit']} do not fit, {counts['invalid']} refused")
        if front:
            b = front[0]
            print(f"best: {plan(b)}: {b['iteration_time_s']:.6g} s, "
                  f"{b['model_tflops_per_gpu']:.1f} TFLOP/s per GPU, "
                  f"{b['peak_memory_bytes'] / GIB:.2f} GiB ({' '.join(b['overrides'])})")
            print("Pareto front (fastest for each memory budget):")
            for r in front:
                print(f"  {r['iteration_time_s']:10.6g} s  {r['peak_memory_bytes'] / GIB:8.2f} GiB"
                      f"  {plan(r)}  [{r['index']}]")
        else:
            print("no configuration fits in memory")
    if args.output:
        plot(rows, front, doc, args.output, args.title)
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sr.run_main(main)
