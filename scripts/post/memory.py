#!/usr/bin/python3
"""Memory over time of the traced ranks of a scalescope results.h5: live memory (GiB) of each
rank as a step plot from /memory/<rank>, with each rank's peak marked and annotated, and its
static memory (weights, gradients, optimizer state; /ranks/static_memory_bytes) dashed. The
samples are allocated memory; /ranks/peak_memory_bytes, drawn dotted, also counts the workspace an
op holds only while it runs, so it can lie a little above the sampled peak."""

import argparse

import numpy as np

import scalescope_results as sr


def main():
    p = argparse.ArgumentParser(
        description="Plot live memory (GiB) over time for the traced ranks of a scalescope "
                    "results.h5, one step line per rank with its peak marked.",
        epilog="example: scripts/post/memory.py out/quickstart/results.h5 -o memory.png")
    p.add_argument("results", help="results.h5 written by `scalescope run`")
    p.add_argument("-o", "--output", default="memory.png", help="PNG to write (default %(default)s)")
    p.add_argument("--ranks", help="comma-separated ranks or ranges (e.g. 0,32 or 0-3); "
                                   "default: every traced rank")
    p.add_argument("--no-static", action="store_true",
                   help="draw neither each rank's static memory (dashed) nor its peak including "
                        "op workspaces (dotted)")
    p.add_argument("--width", type=float, default=12.0, help="figure width, inches (default 12)")
    p.add_argument("--title", help="chart title (default: model, GPU, world size)")
    args = p.parse_args()
    want = None
    if args.ranks is not None:
        try:
            want = sr.parse_ranks(args.ranks)
        except ValueError as e:
            p.error(str(e))

    with sr.Results(args.results) as res:
        traced = res.memory_ranks()
        if not traced:
            raise sr.ResultsError(f"{args.results}: no rank was traced (set run.trace_ranks)")
        ranks = traced if want is None else want
        res.check_traced(ranks, traced)
        summary = res.summary()
        static = res.dataset("ranks/static_memory_bytes")
        peak = res.dataset("ranks/peak_memory_bytes")
        samples = {r: res.memory(r) for r in ranks}
    for r in ranks:
        if r >= len(static):
            raise sr.ResultsError(f"{args.results}: /memory/{r}: rank beyond /ranks "
                                  f"({len(static)} ranks)")
    plt = sr.import_pyplot()

    fig, ax = plt.subplots(figsize=(args.width, 5.5), dpi=110)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    gib = sr.GIB
    t_end = summary["iteration_time_s"]
    lines = []
    y_max = 0.0
    for i, r in enumerate(ranks):
        m = samples[r]
        color = colors[i % len(colors)]
        if len(m) == 0:
            lines.append(f"rank {r}: no memory samples")
            continue
        t = m["time_ns"] * 1e-9
        live = m["live_bytes"] / gib
        # Hold the last value to the end of the iteration so the step ends where the run does.
        if t[-1] < t_end:
            t = np.append(t, t_end)
            live = np.append(live, live[-1])
        k = int(np.argmax(live))  # first time the peak is reached
        ax.step(t, live, where="post", color=color, linewidth=1.2,
                label=f"rank {r} live (peak {live[k]:.2f} GiB)")
        ax.plot([t[k]], [live[k]], marker="v", markersize=9, color=color,
                markeredgecolor="black", zorder=5)
        ax.annotate(f"rank {r} peak {live[k]:.2f} GiB at {t[k]:.4f} s", (t[k], live[k]),
                    xytext=(14, 12 + 30 * i), textcoords="offset points", fontsize=8,
                    color=color, arrowprops=dict(arrowstyle="-", color=color, linewidth=0.8),
                    bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor=color,
                              alpha=0.9))
        if not args.no_static:
            ax.axhline(peak[r] / gib, color=color, linestyle=":", linewidth=1.0, alpha=0.9,
                       label=f"rank {r} peak incl. op workspace {peak[r] / gib:.2f} GiB")
            ax.axhline(static[r] / gib, color=color, linestyle="--", linewidth=0.8, alpha=0.7,
                       label=f"rank {r} static {static[r] / gib:.2f} GiB")
        y_max = max(y_max, float(live[k]), peak[r] / gib)
        lines.append(f"rank {r}: peak live {live[k]:.3f} GiB at {t[k]:.6f} s "
                     f"({peak[r] / gib:.3f} GiB with op workspaces), {len(m)} samples")

    ax.set_xlabel("time (s)")
    ax.set_ylabel("live memory (GiB)")
    ax.set_xlim(0, max(t_end, 1e-9))
    ax.set_ylim(0, y_max * (1.12 + 0.06 * len(ranks)) if y_max > 0 else 1)
    ax.grid(color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    title = args.title or (f"{summary['model']} on {summary['world_size']} × {summary['gpu']}: "
                           f"memory of rank{'s' if len(ranks) > 1 else ''} "
                           f"{', '.join(map(str, ranks))} "
                           f"(peak over all ranks {summary['peak_memory_bytes'] / gib:.2f} GiB)")
    ax.set_title(title, fontsize=11)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    sr.save_png(fig, args.output)
    plt.close(fig)
    print(f"wrote {args.output}")
    for line in lines:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sr.run_main(main)
