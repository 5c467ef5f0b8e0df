#!/usr/bin/python3
"""Gantt chart of traced ranks from a scalescope results.h5: one row per (rank, stream), ops
coloured by phase (fwd / bwd / recompute / optim / other) or by kind, decoded with the tables
stored as attributes on /timeline. Compute rows are labelled with the micro-batch (F3 = forward
of micro-batch 3, B3 = its backward) where the chart leaves room for it."""

import argparse

import numpy as np

import scalescope_results as sr

PHASE_COLORS = {"fwd": "#4c78a8", "bwd": "#f58518", "recompute": "#b279a2", "optim": "#54a24b",
                "other": "#9d9d9d"}
PHASE_LETTER = {"fwd": "F", "bwd": "B", "recompute": "R"}
KIND_COLORS = {"gemm": "#4c78a8", "attention": "#72b7b2", "elementwise": "#b279a2",
               "norm": "#ff9da6", "embedding": "#9d755d", "loss": "#bab0ac",
               "optimizer": "#54a24b", "all_reduce": "#e45756", "all_gather": "#f58518",
               "reduce_scatter": "#eeca3b", "send_recv": "#222222"}
FALLBACK = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf"]


def color_table(names, preset):
    return [preset.get(n, FALLBACK[i % len(FALLBACK)]) for i, n in enumerate(names)]


def runs(rows, phase_names):
    """Maximal runs of consecutive compute ops with the same phase and micro-batch:
    (start_ns, end_ns, label) for fwd / bwd / recompute runs."""
    out = []
    cur = None
    for r in rows:
        phase = phase_names[r["phase"]] if r["phase"] < len(phase_names) else "?"
        mb = int(r["microbatch"])
        key = (phase, mb)
        if cur is not None and cur[0] == key:
            cur[2] = max(cur[2], int(r["end_ns"]))
            continue
        if cur is not None:
            out.append(cur)
        cur = [key, int(r["start_ns"]), int(r["end_ns"])]
    if cur is not None:
        out.append(cur)
    labelled = []
    for (phase, mb), s, e in out:
        if phase in PHASE_LETTER and mb != sr.NONE_U16:
            labelled.append((s, e, f"{PHASE_LETTER[phase]}{mb}"))
    return labelled


def main():
    p = argparse.ArgumentParser(
        description="Draw a Gantt chart of the traced ranks of a scalescope results.h5: one row "
                    "per (rank, stream), ops coloured by phase or kind.",
        epilog="example: scripts/post/timeline.py out/quickstart/results.h5 --ranks 0,32 "
               "-o timeline.png --start 0 --end 0.05")
    p.add_argument("results", help="results.h5 written by `scalescope run`")
    p.add_argument("--ranks", help="comma-separated ranks or ranges (e.g. 0,8 or 0-3); "
                                   "default: every traced rank")
    p.add_argument("-o", "--output", default="timeline.png", help="PNG to write (default %(default)s)")
    p.add_argument("--start", type=float, default=None, metavar="S",
                   help="start of the time window, seconds (default: 0)")
    p.add_argument("--end", type=float, default=None, metavar="S",
                   help="end of the time window, seconds (default: the last op's end)")
    p.add_argument("--color-by", choices=("phase", "kind"), default="phase",
                   help="colour ops by phase (default) or by op kind")
    p.add_argument("--all-streams", action="store_true",
                   help="draw a row for every stream, also those without ops")
    p.add_argument("--width", type=float, default=14.0, help="figure width, inches (default 14)")
    p.add_argument("--title", help="chart title (default: model, GPU, world size)")
    args = p.parse_args()
    if args.ranks is not None:
        try:
            want = sr.parse_ranks(args.ranks)
        except ValueError as e:
            p.error(str(e))
    if args.start is not None and args.end is not None and args.end <= args.start:
        p.error(f"--end {args.end} must be after --start {args.start}")

    with sr.Results(args.results) as res:
        traced = res.traced_ranks()
        if not traced:
            raise sr.ResultsError(f"{args.results}: no rank was traced (set run.trace_ranks)")
        ranks = traced if args.ranks is None else want
        res.check_traced(ranks, traced)
        tables = res.decoding_tables()
        summary = res.summary()
        timelines = {r: res.timeline(r) for r in ranks}
    plt = sr.import_pyplot()
    from matplotlib.patches import Patch

    stream_names = tables["stream_names"]
    cat_field = "phase" if args.color_by == "phase" else "kind"
    cat_names = tables["phase_names"] if cat_field == "phase" else tables["kind_names"]
    colors = color_table(cat_names, PHASE_COLORS if cat_field == "phase" else KIND_COLORS)

    t_last = max((int(t["end_ns"].max()) for t in timelines.values() if len(t)), default=0) * 1e-9
    x0 = args.start if args.start is not None else 0.0
    x1 = args.end if args.end is not None else t_last
    if x1 <= x0:
        raise sr.ResultsError(f"empty time window: --start {x0:g} s is not before the end, "
                              f"{x1:g} s (the last op ends at {t_last:.6f} s)")
    lo_ns, hi_ns = x0 * 1e9, x1 * 1e9

    # Rows, top to bottom: rank by rank, stream by stream.
    rows = []  # (rank, stream, ops of that stream inside the window)
    for r in ranks:
        t = timelines[r]
        t = t[(t["end_ns"] > lo_ns) & (t["start_ns"] < hi_ns)]
        for s in range(len(stream_names)):
            ops = t[t["stream"] == s]
            if len(ops) or args.all_streams:
                rows.append((r, s, ops))
    if not rows:
        raise sr.ResultsError(f"no op of rank{'s' if len(ranks) > 1 else ''} "
                              f"{', '.join(map(str, ranks))} in [{x0}, {x1}] s")

    height = 1.2 + 0.42 * len(rows) + 0.25 * len(ranks)
    fig, ax = plt.subplots(figsize=(args.width, height), dpi=110)
    used = set()
    yticks, ylabels = [], []
    y = 0.0
    prev_rank = None
    rank_bands = []
    for r, s, ops in rows:
        if prev_rank is not None and r != prev_rank:
            y += 0.5  # gap between ranks
        if r != prev_rank:
            rank_bands.append((r, y))
        prev_rank = r
        starts = ops["start_ns"] * 1e-9
        widths = (ops["end_ns"] - ops["start_ns"]) * 1e-9
        cats = ops[cat_field]
        for c in np.unique(cats):
            sel = cats == c
            color = colors[c] if c < len(colors) else "#000000"
            ax.broken_barh(list(zip(starts[sel], widths[sel])), (y - 0.4, 0.8),
                           facecolors=color, edgecolors="none")
            used.add(int(c))
        if stream_names[s] == "compute" and len(ops):
            for a, b, label in runs(ops, tables["phase_names"]):
                a, b = max(a, lo_ns), min(b, hi_ns)
                if (b - a) > 0.012 * (hi_ns - lo_ns) * (len(label) / 2):
                    ax.text((a + b) * 0.5e-9, y, label, ha="center", va="center",
                            fontsize=7, color="black", clip_on=True,
                            bbox=dict(boxstyle="round,pad=0.15", facecolor="white",
                                      edgecolor="none", alpha=0.8))
        yticks.append(y)
        ylabels.append(f"rank {r}  {stream_names[s] if s < len(stream_names) else s}")
        y += 1.0

    for i, (r, ytop) in enumerate(rank_bands):
        if i > 0:
            ax.axhline(ytop - 0.75, color="#555555", linewidth=0.8)
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels, fontsize=9)
    ax.set_ylim(y - 0.4, -0.6)  # first row on top
    ax.set_xlim(x0, x1)
    ax.set_xlabel("time (s)")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    title = args.title or (f"{summary['model']} on {summary['world_size']} × {summary['gpu']}: "
                           f"timeline of rank{'s' if len(ranks) > 1 else ''} "
                           f"{', '.join(map(str, ranks))} "
                           f"(iteration {summary['iteration_time_s']:.4f} s)")
    ax.set_title(title, fontsize=11)
    handles = [Patch(color=colors[c], label=cat_names[c]) for c in sorted(used) if c < len(cat_names)]
    ax.legend(handles=handles, title=args.color_by, loc="upper left", bbox_to_anchor=(1.005, 1.0),
              fontsize=8, title_fontsize=9, frameon=False)
    fig.tight_layout()
    sr.save_png(fig, args.output)
    plt.close(fig)
    print(f"wrote {args.output} ({len(rows)} rows, ranks {', '.join(map(str, ranks))}, "
          f"{x0:.6f}–{x1:.6f} s)")
    return 0


if __name__ == "__main__":
    sr.run_main(main)
