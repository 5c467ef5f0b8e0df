#!/usr/bin/python3
"""Summary of a scalescope results.h5: the headline figures, a per-pipeline-stage table computed
from /ranks, the time breakdown of the last rank to finish and the engine statistics."""

import argparse
import json
import math
import sys

import scalescope_results as sr


def build(res):
    """Everything summarize prints, as one JSON-ready dict (summary.json's keys, plus stages)."""
    s = res.summary()
    ranks = res.ranks()
    if len(ranks["finish_ns"]) != s["world_size"]:
        raise sr.ResultsError(f"{res.path}: /ranks has {len(ranks['finish_ns'])} rows, "
                              f"/summary world_size is {s['world_size']}")
    rank, breakdown = sr.time_breakdown(ranks)
    out = {k: s[k] for k in ("world_size", "iteration_time_s", "tokens_per_s",
                             "model_tflops_per_gpu", "mfu", "peak_memory_bytes",
                             "peak_memory_bytes_by_pp_stage", "model", "gpu")}
    out["time_breakdown_rank"] = rank
    out["time_breakdown_s"] = breakdown
    out["engine"] = res.engine()
    out["iteration_time_ns"] = s["iteration_time_ns"]
    out["tokens_per_iteration"] = s["tokens_per_iteration"]
    out["model_flops_per_iteration"] = s["model_flops_per_iteration"]
    out["peak_flops_per_gpu"] = s["peak_flops_per_gpu"]
    out["mfu_peak_tflops"] = s["peak_flops_per_gpu"] / 1e12
    # The share of the last rank's iteration its GPU waited for the host; host-bound from 10 %
    # (io/summary_json.cpp kHostBoundShare).
    finish = float(ranks["finish_ns"][rank])
    out["host_wait_fraction"] = float(ranks["host_wait_ns"][rank]) / finish if finish > 0 else 0.0
    out["host_bound"] = out["host_wait_fraction"] >= 0.10
    for fmt in ("fp8", "fp4"):  # an fp8 / NVFP4 job's MFU against that peak too (docs/model.md)
        peak = res.summary_attr_or(f"peak_{fmt}_flops_per_gpu", 0.0)
        if peak > 0:
            out[f"mfu_{fmt}"] = s["mfu"] * s["peak_flops_per_gpu"] / peak
            out[f"mfu_{fmt}_peak_tflops"] = peak / 1e12
    stack = res.summary_attr_or("software_stack", "")
    if stack:
        out["software_stack"] = stack
    out["traced_ranks"] = res.traced_ranks()
    out["stages"] = sr.stage_table(ranks)
    memory = res.memory_check()
    if memory is not None:
        out["memory"] = memory
    path = res.critical_path()
    if path is not None:
        out["critical_path"] = path
    whatif = res.whatif()
    if whatif is not None:
        out["whatif"] = whatif
    return out


def fmt_table(headers, rows, left=1):
    """Aligned text: the first `left` columns left-aligned, the rest right-aligned."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
    lines = []
    for row in [headers] + rows:
        cells = [str(c).ljust(w) if i < left else str(c).rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def text(d, path):
    gib = sr.GIB
    e = d["engine"]
    lines = [f"{path}", ""]
    head = [
        ("model", d["model"]),
        ("GPU", d["gpu"]),
        ("world size", f"{d['world_size']}"),
        ("iteration time", f"{d['iteration_time_s']:.6f} s"),
        ("throughput", f"{d['tokens_per_s']:.1f} tokens/s"),
        ("model TFLOP/s per GPU", f"{d['model_tflops_per_gpu']:.2f}"),
        ("MFU", f"{d['mfu'] * 100:.2f} %"),
        ("peak memory", f"{d['peak_memory_bytes'] / gib:.2f} GiB"),
        ("tokens per iteration", f"{d['tokens_per_iteration']:.0f}"),
        ("traced ranks", ", ".join(map(str, d["traced_ranks"])) or "none"),
    ]
    w = max(len(k) for k, _ in head)
    lines += [f"  {k.ljust(w)}  {v}" for k, v in head]

    lines += ["", f"time breakdown of rank {d['time_breakdown_rank']} (finishes last)"]
    total = sum(d["time_breakdown_s"].values())
    rows = [[k.replace("_", " ").replace("exposed tp", "exposed TP")
             .replace("exposed pp", "exposed PP").replace("exposed dp", "exposed DP")
             .replace("exposed cp", "exposed CP").replace("exposed ep", "exposed EP"),
             f"{v:.6f}", f"{100 * v / total:.1f}" if total else "-"]
            for k, v in d["time_breakdown_s"].items()]
    rows.append(["total (finish)", f"{total:.6f}", "100.0" if total else "-"])
    lines += fmt_table(["", "s", "%"], rows)

    lines += ["", "pipeline stages (times in s: finish max / min over the stage's ranks, "
              "the rest the mean; memory: max, GiB)"]
    rows = []
    for st in d["stages"]:
        rows.append([str(st["stage"]), str(st["ranks"]), sr.rank_ranges(st["rank_list"]),
                     f"{st['finish_max_s']:.6f}", f"{st['finish_min_s']:.6f}",
                     f"{st['compute_mean_s']:.6f}", f"{st['exposed_tp_mean_s']:.6f}",
                     f"{st['exposed_pp_mean_s']:.6f}", f"{st['exposed_dp_mean_s']:.6f}",
                     f"{st['exposed_embedding_mean_s']:.6f}", f"{st['exposed_cp_mean_s']:.6f}",
                     f"{st['exposed_ep_mean_s']:.6f}", f"{st['bubble_mean_s']:.6f}",
                     f"{st['straggler_wait_mean_s']:.6f}", f"{st['host_wait_mean_s']:.6f}", f"{st['other_wait_mean_s']:.6f}",
                     f"{st['peak_memory_bytes'] / gib:.2f}",
                     f"{st['static_memory_bytes'] / gib:.2f}"])
    lines += fmt_table(["stage", "ranks", "rank ids", "finish max", "finish min", "compute",
                        "exp TP", "exp PP", "exp DP", "exp emb", "exp CP", "exp EP", "bubble", "stragglers",
                        "host",
                        "other",
                        "peak GiB",
                        "static GiB"],
                       rows, left=3)

    lines += ["", "engine"]
    eng = [
        ("kind", f"{e['kind']}, {e['processes']} process{'es' if e['processes'] != 1 else ''}"),
        ("events processed", f"{e['events_processed']}"),
        ("events committed", f"{e['events_committed']} ({100 * e['efficiency']:.1f} % efficiency)"),
        ("events rolled back", f"{e['events_rolled_back']}"),
        ("remote messages", f"{e['remote_messages']}"),
        ("GVT rounds", f"{e['gvt_rounds']}"),
        ("per virtual rank", f"{e['events_per_virtual_rank']:.0f} events, "
                             f"{e['lp_state_bytes_per_virtual_rank'] / 1024:.1f} KiB LP state"),
        ("wall time", f"{e['wall_s']:.3f} s ({e['committed_events_per_s']:.0f} committed events/s)"),
    ]
    w = max(len(k) for k, _ in eng)
    lines += [f"  {k.ljust(w)}  {v}" for k, v in eng]
    return "\n".join(lines)


def finite_or_null(v):
    """summary.json's convention: a non-finite number is written as null."""
    if isinstance(v, dict):
        return {k: finite_or_null(x) for k, x in v.items()}
    if isinstance(v, list):
        return [finite_or_null(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def main():
    p = argparse.ArgumentParser(
        description="Print the summary of a scalescope results.h5: iteration time, tokens/s, MFU, "
                    "model TFLOP/s per GPU, peak memory, a per-pipeline-stage table computed "
                    "from /ranks, the time breakdown of the last rank and engine statistics.",
        epilog="example: scripts/post/summarize.py out/quickstart/results.h5 --json")
    p.add_argument("results", help="results.h5 written by `scalescope run`")
    p.add_argument("--json", action="store_true",
                   help="print JSON instead of text (summary.json's keys plus 'stages')")
    args = p.parse_args()
    with sr.Results(args.results) as res:
        d = build(res)
    if args.json:
        json.dump(finite_or_null(d), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(text(d, args.results))
    return 0


if __name__ == "__main__":
    sr.run_main(main)
