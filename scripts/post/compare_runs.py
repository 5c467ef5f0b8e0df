#!/usr/bin/python3
"""Runs side by side (`scalescope compare A B [C …]`): the headline figures, the time breakdown
of each run's last rank to finish, the critical path, the per-stage iteration and memory, and
the ranks and ops whose time moved most against the first run — a table on stdout and one
self-contained HTML page. A what-if run alone (its directory holds baseline/, written by
`scalescope run --whatif`) is set against its baseline.

Every figure is read from the runs' files (summary.json, checked against results.h5 as the report
does; results.h5's /ranks and the traced ranks' timelines) and only subtracted here.

    scripts/post/compare_runs.py out/a out/b [-o compare.html]
    scripts/post/compare_runs.py out/whatif            # against out/whatif/baseline
"""

import argparse
import os

import numpy as np

import report as rp
import scalescope_results as sr

TOP = 10  # ranks and ops listed per comparison


class Run:
    """One run directory: summary.json and what is needed of results.h5."""

    def __init__(self, path, label):
        self.path, self.label = path, label
        self.summary = rp.load_json(os.path.join(path, "summary.json"))
        with sr.Results(os.path.join(path, "results.h5")) as res:
            res.check_summary_json(self.summary, os.path.join(path, "summary.json"))
            self.ranks = res.ranks()
            self.stages = {st["stage"]: st for st in sr.stage_table(self.ranks)}
            names = res.decoding_tables()["op_names"]
            # Per traced rank: total time of each op name (its ops' durations added up).
            self.op_time = {}
            for r in res.traced_ranks():
                t = res.timeline(r)
                d = (t["end_ns"].astype(np.int64) - t["start_ns"].astype(np.int64))
                totals = {}
                for name, ns in zip(t["name"].tolist(), d.tolist()):
                    key = names[name] if name < len(names) else str(name)
                    totals[key] = totals.get(key, 0) + ns
                self.op_time[r] = totals

    def figure(self, key):
        """A headline figure by its summary.json path ("memory.peak_total_bytes"), or None."""
        v = self.summary
        for p in key.split("."):
            if not isinstance(v, dict) or p not in v:
                return None
            v = v[p]
        return v


# (summary.json key, label, formatter)
HEADLINE = (("iteration_time_s", "iteration time", rp.seconds),
            ("tokens_per_s", "tokens / s", lambda v: f"{v:,.0f}"),
            ("model_tflops_per_gpu", "model TFLOP/s per GPU", lambda v: f"{v:.1f}"),
            ("mfu", "MFU", lambda v: f"{100 * v:.1f} %"),
            ("memory.peak_allocated_bytes", "peak allocated", rp.gib),
            ("memory.peak_reserved_bytes", "peak reserved", rp.gib),
            ("memory.peak_total_bytes", "peak on the device", rp.gib))


def change(a, b):
    """b against a: a signed percentage, '=' when equal, '' when either is missing."""
    if a is None or b is None:
        return ""
    if a == b:
        return "="
    if a == 0:
        return "new"
    return f"{100 * (b - a) / abs(a):+.2f} %"


def ms(ns):
    return f"{ns * 1e-6:.3f}"


def signed_ms(ns):
    return f"{ns * 1e-6:+.3f}"


def compare(runs):
    """The comparison as rows of tables: {name: (headers, rows)} plus notes."""
    a = runs[0]
    out, notes = {}, []
    labels = [r.label for r in runs]
    rows = []
    for key, label, f in HEADLINE:
        vals = [r.figure(key) for r in runs]
        if all(v is None for v in vals):
            continue
        row = [label] + [f(v) if v is not None else "-" for v in vals]
        row += [change(vals[0], v) for v in vals[1:]]
        rows.append((key, vals, row))
    out["headline"] = ([""] + labels + [f"{r.label} vs {a.label}" for r in runs[1:]], rows)
    # The last rank to finish, each run's: where its time went (summary.json time_breakdown_s).
    rows = []
    for term, _ in sr.BREAKDOWN_TERMS:
        vals = [r.summary["time_breakdown_s"].get(term, 0.0) for r in runs]
        if not any(vals):
            continue
        rows.append((term, vals, [rp.TERM_LABELS.get(term, term)] +
                     [f"{v * 1e3:.3f}" for v in vals] +
                     [f"{(v - vals[0]) * 1e3:+.3f}" for v in vals[1:]]))
    out["breakdown"] = (["ms"] + [f"{r.label} (rank {r.summary['time_breakdown_rank']})"
                                  for r in runs] +
                        [f"{r.label} − {a.label}" for r in runs[1:]], rows)
    # The critical path's totals per category.
    cps = [r.summary.get("critical_path", {}).get("totals_s", {}) for r in runs]
    rows = []
    for k in sorted(set().union(*cps), key=lambda k: (-max(cp.get(k, 0) for cp in cps), k)):
        vals = [cp.get(k, 0.0) for cp in cps]
        rows.append((k, vals, [k] + [f"{v * 1e3:.3f}" for v in vals] +
                     [f"{(v - vals[0]) * 1e3:+.3f}" for v in vals[1:]]))
    out["critical_path"] = (["ms on the critical path"] + labels +
                            [f"{r.label} − {a.label}" for r in runs[1:]], rows)
    # Per pipeline stage: its last finish and its peak memory.
    rows = []
    for s in sorted(set().union(*(r.stages for r in runs))):
        st = [r.stages.get(s) for r in runs]
        rows.append((s, None, [str(s)] +
                     [f"{x['finish_max_s'] * 1e3:.3f}" if x else "-" for x in st] +
                     [rp.gib(x["peak_memory_bytes"]) if x else "-" for x in st]))
    out["stages"] = (["stage"] + [f"finish ms, {l}" for l in labels] +
                     [f"peak, {l}" for l in labels], rows)
    # Ranks and ops that moved most, each run against the first.
    for r in runs[1:]:
        if len(r.ranks["finish_ns"]) != len(a.ranks["finish_ns"]):
            notes.append(f"{r.label} has {len(r.ranks['finish_ns'])} ranks, {a.label} "
                         f"{len(a.ranks['finish_ns'])}: ranks not compared")
            continue
        d = r.ranks["finish_ns"].astype(np.int64) - a.ranks["finish_ns"].astype(np.int64)
        order = np.argsort(-np.abs(d), kind="stable")[:TOP]
        rows = []
        for k in order:
            if d[k] == 0:
                break
            terms = {t: int(r.ranks[c][k]) - int(a.ranks[c][k]) for t, c in sr.BREAKDOWN_TERMS}
            t = max(terms, key=lambda x: abs(terms[x]))
            rows.append((int(k), int(d[k]),
                         [str(int(k)), ms(int(a.ranks["finish_ns"][k])),
                          ms(int(r.ranks["finish_ns"][k])), signed_ms(int(d[k])),
                          f"{rp.TERM_LABELS.get(t, t)} {signed_ms(terms[t])}"]))
        out[f"ranks:{r.label}"] = (["rank", f"finish ms, {a.label}", f"finish ms, {r.label}",
                                    "change ms", "most of it"], rows)
        rows = []
        for rank in sorted(set(a.op_time) & set(r.op_time)):
            for name in set(a.op_time[rank]) | set(r.op_time[rank]):
                x, y = a.op_time[rank].get(name, 0), r.op_time[rank].get(name, 0)
                if x != y:
                    rows.append((rank, y - x, [str(rank), name, ms(x), ms(y), signed_ms(y - x)]))
        rows.sort(key=lambda row: -abs(row[1]))
        out[f"ops:{r.label}"] = (["traced rank", "op", f"ms, {a.label}", f"ms, {r.label}",
                                  "change ms"], rows[:TOP])
        if not set(a.op_time) & set(r.op_time):
            notes.append(f"{a.label} and {r.label} trace no rank in common: ops not compared")
    notes.append("links: results.h5 keeps no per-link load, so the links whose time moved are "
                 "not listed (the flow model's busiest links are in each run's trace.json)")
    return out, notes


TITLES = {"headline": "Headline", "breakdown": "Where the last rank's time went",
          "critical_path": "Critical path", "stages": "Pipeline stages"}


def title(name, reference):
    """A table's heading: its fixed title, or for the moved ranks / ops, which run against which."""
    if name in TITLES:
        return TITLES[name]
    kind, _, label = name.partition(":")
    if kind == "ranks":
        return f"Ranks whose finish moved most, {label} against {reference}"
    return f"Ops whose time moved most on the traced ranks, {label} against {reference}"


def text(runs, tables, notes):
    lines = [f"{r.label}: {r.path}" for r in runs]
    for name, (headers, rows) in tables.items():
        lines += ["", title(name, runs[0].label)]
        if not rows:
            lines.append("  none moved")
            continue
        body = [headers] + [row for _, _, row in rows]
        widths = [max(len(str(c)) for c in col) for col in zip(*body)]
        for row in body:
            lines.append("  " + "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                                          for i, (c, w) in enumerate(zip(row, widths))))
    lines += [""] + [f"note: {n}" for n in notes]
    return "\n".join(lines)


def html_page(runs, tables, notes):
    a = runs[0]
    body = [f"<h1>{rp.esc(' vs '.join(r.label for r in runs))}</h1>",
            '<p class="sub">scalescope comparison of ' +
            ", ".join(f"<code>{rp.esc(os.path.abspath(r.path))}</code>" for r in runs) + "</p>"]
    whatif = runs[-1].summary.get("whatif")
    if whatif and len(runs) == 2:
        body.append(f'<p class="note">What-if {rp.esc("; ".join(whatif["applied"]))} against '
                    f"its baseline.</p>")
    # Headline cards: each run's value (data-value: the file's), the change against the first.
    # One row of cards a figure, the runs side by side.
    body.append('<div id="headline">')
    for key, vals, row in tables["headline"][1]:
        cards = []
        for r, v in zip(runs, vals):
            if v is None:
                continue
            label = f"{row[0]}, {r.label}"
            if r is not a:
                label += f" ({change(vals[0], v)} vs {a.label})"
            cards.append(rp.card(label, row[1 + runs.index(r)], f"{r.label}:{key}", v))
        body.append('<div class="cards" style="margin-bottom:10px">' + "".join(cards) + "</div>")
    body.append("</div>")
    for name, (headers, rows) in tables.items():
        if name == "headline":
            continue
        body.append(f"<h2>{rp.esc(title(name, a.label))}</h2>")
        if rows:
            body.append(rp.table(headers, [row for _, _, row in rows],
                                 table_id=name.replace(":", "-")))
        else:
            body.append("<p>none moved</p>")
    body += [f'<p class="note">{rp.esc(n)}</p>' for n in notes]
    return rp.page(" vs ".join(r.label for r in runs), "\n".join(body))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run directories (summary.json, results.h5)")
    p.add_argument("-o", "--output", help="the HTML page (default: compare.html in the last run)")
    args = p.parse_args()
    paths = args.runs
    if len(paths) == 1:
        base = os.path.join(paths[0], "baseline")
        if not os.path.isdir(base):
            raise sr.ResultsError(f"{paths[0]}: one run is compared against its what-if baseline "
                                  f"({base} is missing: give two runs, or a run made with "
                                  "--whatif)")
        runs = [Run(base, "baseline"), Run(paths[0], "what-if")]
    else:
        labels = [os.path.basename(os.path.normpath(x)) or x for x in paths]
        if len(set(labels)) < len(labels):
            labels = [f"{chr(ord('A') + i)}" for i in range(len(paths))]
        runs = [Run(x, l) for x, l in zip(paths, labels)]
    tables, notes = compare(runs)
    print(text(runs, tables, notes))
    out = args.output or os.path.join(paths[-1], "compare.html")
    page = html_page(runs, tables, notes).replace("Written by scripts/post/report.py",
                                                  "Written by scripts/post/compare_runs.py")
    sr.write_via_temporary(out, lambda f: f.write(page), mode="w")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sr.run_main(main)
