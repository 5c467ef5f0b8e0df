#!/usr/bin/python3
"""One self-contained HTML page for a run or a sweep, to open in a browser and send on.

A run directory (summary.json, results.h5, trace.json): the experiment, the headline figures,
the time breakdown of the last rank to finish, a per-stage table, the memory classes at the
tightest rank's peak and its memory curve, the traced ranks' timeline (inline SVG), what-ifs,
the hybrid sandbox and the engine statistics. A sweep directory (sweep.json): the ranked table
(click a column to sort) and the Pareto plot of iteration time against peak memory.

Every figure on the page is read from the run's files (summary.json for the headline, the
memory check and the breakdown; results.h5 for the per-rank table, the timeline and memory
curves; sweep.json for a sweep) and only formatted here; the per-stage table is the one
scripts/post/summarize.py prints from results.h5's /ranks. The page loads nothing from the
network: styles, script and figures are inline.

    scripts/post/report.py out/quickstart              # → out/quickstart/report.html
    scripts/post/report.py out/sweep -o sweep.html
"""

import argparse
import html
import json
import math
import os

import numpy as np

import scalescope_results as sr
import sweep as sweep_table

GIB = sr.GIB
# Colours of the time terms, the memory classes and the timeline's op kinds (colour-blind safe
# Okabe–Ito / Tableau hues; one palette so a term has one colour everywhere on the page).
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac", "#17becf", "#8c564b")
TERM_LABELS = {"compute": "compute", "exposed_tp": "exposed TP comm.",
               "exposed_pp": "exposed PP comm.", "exposed_dp": "exposed DP comm.",
               "exposed_embedding": "exposed embedding comm.", "exposed_cp": "exposed CP comm.",
               "exposed_ep": "exposed EP comm.", "bubble": "pipeline bubble",
               "straggler_wait": "waiting for slower peers (stragglers)", "host_wait": "waiting for the host", "other_wait": "other waits"}
CHAKRA_MARKER = "# chakra-import:"  # first line of a Chakra import's configuration

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#222;
 background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:18px 28px 40px}
h1{font-size:1.5em;margin:.4em 0 .1em}h2{font-size:1.15em;margin:1.6em 0 .5em;
 border-bottom:1px solid #ccd;padding-bottom:.2em}
.sub{color:#555;margin:0 0 1em}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{background:#fff;border:1px solid #dde;border-radius:6px;padding:10px 14px;min-width:140px}
.card .v{font-size:1.45em;font-weight:600}.card .k{color:#666;font-size:.85em}
.card.bad{border-color:#d62728}.card.bad .v{color:#d62728}.card.good .v{color:#2a7a2a}
table{border-collapse:collapse;background:#fff;font-size:.88em}
th,td{border:1px solid #dde;padding:3px 8px;text-align:right;white-space:nowrap}
th{background:#eef0f4}td.l,th.l{text-align:left}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th[aria-sort=ascending]::after{content:' \\25B2'}
table.sortable th[aria-sort=descending]::after{content:' \\25BC'}
tr.front td{background:#fff4e0}tr.nofit td{color:#999}
.kv{display:grid;grid-template-columns:max-content auto;gap:2px 18px;background:#fff;
 border:1px solid #dde;border-radius:6px;padding:10px 14px;font-size:.92em}
.kv div:nth-child(odd){color:#666}
.note{background:#fff8e5;border:1px solid #e8c36a;border-radius:6px;padding:10px 14px}
.warn{background:#fdecea;border:1px solid #d62728;border-radius:6px;padding:10px 14px}
.legend span{display:inline-block;margin-right:14px;font-size:.85em}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
svg{background:#fff;border:1px solid #dde;border-radius:6px}
svg text{font-family:inherit}
code{background:#eef0f4;padding:0 3px;border-radius:3px}
.scroll{overflow-x:auto}
.tall{max-height:560px;overflow-y:auto}
.tall th{position:sticky;top:0}
#sweep-table td:last-child{white-space:normal;min-width:320px;font-size:.85em}
"""

# Sorts a table.sortable by the clicked column: numbers by value (data-v), text otherwise;
# a second click reverses. Records the state in aria-sort (read by tests/post/report_test.py).
SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var asc = th.getAttribute('aria-sort') !== 'ascending';
      table.querySelectorAll('th').forEach(function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var key = function (row) {
        var cell = row.cells[col];
        var v = cell.getAttribute('data-v');
        return v === null ? cell.textContent : v;
      };
      var numeric = rows.every(function (r) {
        var v = key(r); return v === '' || !isNaN(parseFloat(v));
      });
      rows.sort(function (a, b) {
        var x = key(a), y = key(b), d;
        if (numeric) {
          x = x === '' ? Infinity : parseFloat(x); y = y === '' ? Infinity : parseFloat(y);
          d = x < y ? -1 : x > y ? 1 : 0;
        } else { d = x.localeCompare(y); }
        return asc ? d : -d;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


# -- formatting -------------------------------------------------------------------------------

def esc(value):
    return html.escape(str(value), quote=True)


def seconds(s):
    """0.19011 → '190.1 ms'; 12.3 → '12.30 s'; 4.2e-6 → '4.2 µs'."""
    s = float(s)
    if s == 0:
        return "0"
    if abs(s) >= 1:
        return f"{s:.3f} s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def gib(b):
    return f"{float(b) / GIB:.2f} GiB"


def count(n):
    return f"{int(n):,}"


def card(label, text, source_key, source_value, cls=""):
    """A headline figure: its text, and the file's key and value it was formatted from."""
    return (f'<div class="card {cls}" data-key="{esc(source_key)}" data-value="{esc(source_value)}">'
            f'<div class="v">{esc(text)}</div><div class="k">{esc(label)}</div></div>')


def kv(pairs):
    cells = "".join(f"<div>{esc(k)}</div><div>{esc(v)}</div>" for k, v in pairs if v is not None)
    return f'<div class="kv">{cells}</div>'


def table(headers, rows, cls="", row_classes=None, left=1, table_id=None):
    """rows: lists of cells; a cell is a value or (text, sort_value). `left`: the number of
    leading left-aligned columns, or the set of their indices."""
    left = set(range(left)) if isinstance(left, int) else set(left)
    head = "".join(f'<th class="{"l" if i in left else ""}">{esc(h)}</th>'
                   for i, h in enumerate(headers))
    body = []
    for k, row in enumerate(rows):
        cells = []
        for i, c in enumerate(row):
            text, v = c if isinstance(c, tuple) else (c, None)
            attr = f' data-v="{esc(v)}"' if v is not None else ""
            cells.append(f'<td class="{"l" if i in left else ""}"{attr}>{esc(text)}</td>')
        rc = f' class="{row_classes[k]}"' if row_classes and row_classes[k] else ""
        body.append(f"<tr{rc}>{''.join(cells)}</tr>")
    tid = f' id="{table_id}"' if table_id else ""
    box = "scroll tall" if len(rows) > 25 else "scroll"
    return (f'<div class="{box}"><table class="{cls}"{tid}><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def legend(items):
    return '<div class="legend">' + "".join(
        f'<span><i style="background:{c}"></i>{esc(label)}</span>' for label, c in items) + "</div>"


def nice_ticks(lo, hi, n=6):
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    step = 10 ** math.floor(math.log10((hi - lo) / n))
    for m in (1, 2, 2.5, 5, 10):
        if (hi - lo) / (step * m) <= n:
            step *= m
            break
    first = math.floor(lo / step) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        ticks.append(t)
        t += step
    return ticks


def tick_label(v):
    return f"{v:.6g}"


# -- SVG figures ------------------------------------------------------------------------------

def stacked_bar(parts, total_label, width=1100):
    """One horizontal bar of (label, seconds, colour) parts, with the total on the right."""
    total = sum(v for _, v, _ in parts)
    x, rects = 10.0, []
    scale = (width - 170) / total if total > 0 else 0
    for label, v, color in parts:
        w = v * scale
        if w > 0:
            rects.append(f'<rect x="{x:.2f}" y="8" width="{w:.2f}" height="30" fill="{color}">'
                         f"<title>{esc(label)}: {esc(seconds(v))}</title></rect>")
        x += w
    rects.append(f'<text x="{x + 8:.1f}" y="28" font-size="13">{esc(total_label)}</text>')
    return f'<svg width="{width}" height="46" role="img">{"".join(rects)}</svg>'


def bars(items, unit_fn, width=1100):
    """Horizontal bars of (label, value, colour)."""
    h = 22 * len(items) + 12
    vmax = max(v for _, v, _ in items) or 1
    x0, x1 = 190, width - 120
    out = [f'<svg width="{width}" height="{h}" role="img">']
    for k, (label, v, color) in enumerate(items):
        y = 8 + 22 * k
        w = (x1 - x0) * v / vmax
        out.append(f'<text x="{x0 - 8}" y="{y + 14}" font-size="12" text-anchor="end">'
                   f"{esc(label)}</text>")
        out.append(f'<rect x="{x0}" y="{y}" width="{w:.2f}" height="17" fill="{color}"/>')
        out.append(f'<text x="{x0 + w + 6:.1f}" y="{y + 14}" font-size="12">{esc(unit_fn(v))}</text>')
    out.append("</svg>")
    return "".join(out)


def plot_frame(width, height, xr, yr, xlabel, ylabel, margin=(70, 20, 20, 45)):
    """Axes with ticks; returns (svg parts, x→px, y→px)."""
    ml, mr, mt, mb = margin
    (x_lo, x_hi), (y_lo, y_hi) = xr, yr
    xs = lambda v: ml + (width - ml - mr) * (v - x_lo) / ((x_hi - x_lo) or 1)  # noqa: E731
    ys = lambda v: height - mb - (height - mt - mb) * (v - y_lo) / ((y_hi - y_lo) or 1)  # noqa
    out = [f'<rect x="{ml}" y="{mt}" width="{width - ml - mr}" height="{height - mt - mb}" '
           f'fill="none" stroke="#999"/>']
    for t in nice_ticks(x_lo, x_hi):
        if x_lo <= t <= x_hi:
            out.append(f'<line x1="{xs(t):.1f}" y1="{mt}" x2="{xs(t):.1f}" y2="{height - mb}" '
                       f'stroke="#eee"/><text x="{xs(t):.1f}" y="{height - mb + 15}" '
                       f'font-size="11" text-anchor="middle">{tick_label(t)}</text>')
    for t in nice_ticks(y_lo, y_hi):
        if y_lo <= t <= y_hi:
            out.append(f'<line x1="{ml}" y1="{ys(t):.1f}" x2="{width - mr}" y2="{ys(t):.1f}" '
                       f'stroke="#eee"/><text x="{ml - 6}" y="{ys(t) + 4:.1f}" font-size="11" '
                       f'text-anchor="end">{tick_label(t)}</text>')
    out.append(f'<text x="{(ml + width - mr) / 2}" y="{height - 8}" font-size="12" '
               f'text-anchor="middle">{esc(xlabel)}</text>')
    out.append(f'<text x="14" y="{(mt + height - mb) / 2}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 14 {(mt + height - mb) / 2})">{esc(ylabel)}</text>')
    return out, xs, ys


def memory_curve(curve, iteration_s, width=1100, height=260):
    """Allocated bytes over the iteration, a step line from 0 to the iteration's end."""
    t = curve["time_ns"] * 1e-6
    v = curve["live_bytes"] / GIB
    t_end = max(float(t.max()), iteration_s * 1e3) or 1
    parts, xs, ys = plot_frame(width, height, (0, t_end), (0, float(v.max()) * 1.1 or 1),
                               "time in the iteration (ms)", "allocated (GiB)")
    pts = []
    prev = None
    for ti, vi in zip(t.tolist(), v.tolist()):
        if prev is not None:
            pts.append(f"{xs(ti):.1f},{ys(prev):.1f}")
        pts.append(f"{xs(ti):.1f},{ys(vi):.1f}")
        prev = vi
    parts.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="#4e79a7" '
                 f'stroke-width="1.3"/>')
    return f'<svg width="{width}" height="{height}" role="img">{"".join(parts)}</svg>'


def lane_boxes(start_px, end_px, kind, n_px):
    """One lane's ops in pixel columns: each column's covered width per op kind (its ops cut at
    the column edges), the column drawn in the kind that covers most of it, runs of columns of one
    kind merged into one box: [(first column, last column + 1, kind)]. Every box is at least a
    pixel wide and one colour of the legend, whatever the ops' sizes."""
    if len(start_px) == 0:
        return []
    kinds = np.unique(kind)
    index = {int(k): i for i, k in enumerate(kinds)}
    cover = np.zeros((len(kinds), n_px + 1))
    a = np.clip(start_px, 0, n_px)
    b = np.clip(end_px, 0, n_px)
    ka = np.array([index[int(k)] for k in kind], dtype=np.int64)
    ca, cb = np.floor(a).astype(np.int64), np.floor(b).astype(np.int64)
    same = ca == cb
    # Ops inside one column: their width there.
    np.add.at(cover, (ka[same], ca[same]), (b - a)[same])
    # Ops over several columns: the first and last columns' parts, every column between whole.
    multi = ~same
    np.add.at(cover, (ka[multi], ca[multi]), (ca[multi] + 1 - a[multi]))
    np.add.at(cover, (ka[multi], cb[multi]), (b - cb)[multi])
    full = np.zeros((len(kinds), n_px + 2))
    np.add.at(full, (ka[multi], ca[multi] + 1), 1)
    np.add.at(full, (ka[multi], cb[multi]), -1)
    cover += np.cumsum(full, axis=1)[:, :n_px + 1]
    cover = cover[:, :n_px]
    used = cover.sum(axis=0) > 0
    dominant = np.where(used, kinds[np.argmax(cover, axis=0)], -1)
    boxes, col = [], 0
    while col < n_px:
        k = dominant[col]
        end = col + 1
        while end < n_px and dominant[end] == k:
            end += 1
        if k >= 0:
            boxes.append((col, end, int(k)))
        col = end
    return boxes


def gantt(res, ranks, width=1100):
    """The traced ranks' ops, one lane per (rank, stream), at any size: each lane's ops in pixel
    columns, a column coloured by the op kind that covers most of it, runs of one kind one box
    (lane_boxes); every colour drawn is in the legend. trace.json has every op."""
    tables = res.decoding_tables()
    streams, kinds = tables["stream_names"], tables["kind_names"]
    lanes, t_end = [], 0
    for r in ranks:
        tl = res.timeline(r)
        if len(tl):
            t_end = max(t_end, int(tl["end_ns"].max()))
        for s in sorted(set(int(x) for x in tl["stream"])):
            lanes.append((r, s, tl[tl["stream"] == s]))
    if not lanes:
        return "<p>The traced ranks recorded no ops.</p>", 0
    ml, lane_h = 160, 16
    n_px = width - ml - 20
    height = 30 + lane_h * len(lanes) + 30
    scale = n_px / (t_end or 1)
    drawn = [(r, s, lane_boxes(tl["start_ns"] * scale, tl["end_ns"] * scale, tl["kind"], n_px))
             for r, s, tl in lanes]
    used_kinds = sorted({k for _, _, boxes in drawn for _, _, k in boxes})
    color = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(used_kinds)}
    out = [f'<svg width="{width}" height="{height}" role="img" id="gantt">']
    grid = []
    axis_y = 20 + lane_h * len(lanes) + 6
    for tick in nice_ticks(0, t_end * 1e-6):
        x = ml + tick * 1e6 * scale
        if x <= width - 10:
            grid.append(f'<line x1="{x:.1f}" y1="16" x2="{x:.1f}" y2="{axis_y}" stroke="#eee"/>'
                        f'<text x="{x:.1f}" y="{axis_y + 13}" font-size="11" '
                        f'text-anchor="middle">{tick_label(tick)} ms</text>')
    out += grid  # under the ops
    rect_count = 0
    for i, (r, s, boxes) in enumerate(drawn):
        y = 20 + lane_h * i
        out.append(f'<text x="{ml - 6}" y="{y + 11}" font-size="11" text-anchor="end" '
                   f'class="lane" data-rank="{r}">'
                   f"rank {r} · {esc(streams[s] if s < len(streams) else s)}</text>")
        for c0, c1, k in boxes:
            out.append(f'<rect x="{ml + c0}" y="{y}" width="{c1 - c0}" height="{lane_h - 3}" '
                       f'fill="{color[k]}" data-kind="{k}"/>')
        rect_count += len(boxes)
    out.append("</svg>")
    keys = legend([(kinds[k] if k < len(kinds) else str(k), color[k]) for k in used_kinds])
    return keys + '<div class="scroll">' + "".join(out) + "</div>", rect_count


def rank_heatmap(values, label, unit_fn, svg_id, width=1100, max_cells=4096):
    """One cell per rank (up to `max_cells`; beyond, consecutive ranks share a cell, which shows
    their largest value), 64 to a row, from light (the smallest) to dark (the largest); each cell's
    title names its ranks and value."""
    n = len(values)
    per = max(1, -(-n // max_cells))
    cells = [(i * per, min(n, (i + 1) * per)) for i in range(-(-n // per))]
    vals = [float(np.max(values[a:b])) for a, b in cells]
    lo, hi = min(vals), max(vals)
    cols = min(64, len(cells))
    size = max(4, min(16, (width - 20) // cols))
    rows = -(-len(cells) // cols)
    out = [f'<svg width="{cols * size + 20}" height="{rows * size + 10}" role="img" id="{svg_id}">']
    for i, ((a, b), v) in enumerate(zip(cells, vals)):
        f = 0.0 if hi == lo else (v - lo) / (hi - lo)
        # #f1eef6 → #045a8d (light to dark blue)
        rgb = [round(c0 + (c1 - c0) * f) for c0, c1 in ((0xf1, 0x04), (0xee, 0x5a), (0xf6, 0x8d))]
        who = f"rank {a}" if b - a == 1 else f"ranks {a}–{b - 1}"
        out.append(f'<rect x="{(i % cols) * size}" y="{(i // cols) * size}" width="{size - 1}" '
                   f'height="{size - 1}" fill="#{rgb[0]:02x}{rgb[1]:02x}{rgb[2]:02x}" '
                   f'data-v="{v}"><title>{esc(who)}: {esc(unit_fn(v))}</title></rect>')
    out.append("</svg>")
    scale = (f'<p class="sub">{esc(label)}: light {esc(unit_fn(lo))} … dark {esc(unit_fn(hi))}'
             + (f"; {per} consecutive ranks a cell, their largest" if per > 1 else "; a cell a rank")
             + ", 64 cells a row</p>")
    return scale + '<div class="scroll">' + "".join(out) + "</div>"


def pareto_plot(rows, front, width=1100, height=460):
    """Peak memory against iteration time of every replayed configuration: filled where it
    fits, hollow where not; the Pareto front as a staircase; the usable memory dashed."""
    pts = [r for r in rows if r["replayed"]]
    if not pts:
        return "<p>No configuration was replayed.</p>"
    capacity = max(r["memory_capacity_bytes"] for r in pts) / GIB
    mems = [r["peak_memory_bytes"] / GIB for r in pts]
    times = [r["iteration_time_s"] for r in pts]
    x_hi = max(max(mems), capacity) * 1.05
    y_lo, y_hi = min(times) * 0.95, max(times) * 1.05
    parts, xs, ys = plot_frame(width, height, (0, x_hi), (y_lo, y_hi),
                               "peak memory of the tightest rank (GiB)", "iteration time (s)")
    parts.append(f'<line x1="{xs(capacity):.1f}" y1="{ys(y_hi):.1f}" x2="{xs(capacity):.1f}" '
                 f'y2="{ys(y_lo):.1f}" stroke="#d62728" stroke-dasharray="5 4"/>'
                 f'<text x="{xs(capacity) - 4:.1f}" y="{ys(y_hi) + 14:.1f}" font-size="11" '
                 f'text-anchor="end" fill="#d62728">usable memory {capacity:.1f} GiB</text>')
    if front:
        lean = front[::-1]  # leanest first: a staircase rightwards
        step, prev_y = [], None
        for r in lean:
            x, y = xs(r["peak_memory_bytes"] / GIB), ys(r["iteration_time_s"])
            if prev_y is not None:  # the level of the previous (leaner, slower) plan first
                step.append(f"{x:.1f},{prev_y:.1f}")
            step.append(f"{x:.1f},{y:.1f}")
            prev_y = y
        step.append(f"{xs(x_hi):.1f},{prev_y:.1f}")
        parts.append(f'<polyline points="{" ".join(step)}" fill="none" stroke="#f28e2b" '
                     f'stroke-width="1.5"/>')
    front_idx = {r["index"] for r in front}
    for r in pts:
        fits = r["status"] == "ok"
        color = "#f28e2b" if r["index"] in front_idx else "#4e79a7"
        fill = color if fits else "none"
        parts.append(f'<circle cx="{xs(r["peak_memory_bytes"] / GIB):.1f}" '
                     f'cy="{ys(r["iteration_time_s"]):.1f}" r="4.5" fill="{fill}" '
                     f'stroke="{color}" stroke-width="1.4"><title>#{r["index"]} '
                     f'{esc(sweep_table.plan(r))}: {r["iteration_time_s"]:.6g} s, '
                     f'{r["peak_memory_bytes"] / GIB:.2f} GiB</title></circle>')
    svg = f'<svg width="{width}" height="{height}" role="img" id="pareto">{"".join(parts)}</svg>'
    keys = legend([("fits in memory", "#4e79a7"), ("Pareto front", "#f28e2b")])
    # The hollow marker is named only when a hollow point is drawn (--replay-unfit).
    hollow = sum(r["status"] != "ok" for r in pts)
    note = (f'<p class="sub">hollow: replayed but does not fit in memory ({hollow})</p>'
            if hollow else "")
    return keys + note + svg


# -- the run page -----------------------------------------------------------------------------

def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise sr.ResultsError(f"{path}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise sr.ResultsError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None


def experiment_facts(config_text):
    """(title, source, [(key, value)]) from the resolved configuration results.h5 carries."""
    import yaml
    try:
        c = yaml.safe_load(config_text) or {}
    except yaml.YAMLError as e:
        raise sr.ResultsError(f"results.h5 /meta config_text: not YAML ({e})") from None
    first = config_text.splitlines()[0] if config_text else ""
    source = first.split(" of ", 1)[1] if " of " in first else ""
    m, p, t = c.get("model", {}), c.get("parallel", {}), c.get("training", {})
    cl, run, net = c.get("cluster", {}), c.get("run", {}), c.get("network", {})
    cluster = (f"{cl.get('num_gpus')} × {cl.get('gpu')}, {cl.get('gpus_per_node')} per node, "
               f"NVLink {cl.get('nvlink_bandwidth_GBps')} GB/s, {cl.get('nics_per_node')} NICs × "
               f"{cl.get('nic_bandwidth_Gbps')} Gb/s")
    engine = f"{run.get('engine')} ({run.get('partition')} partition)"
    if first.startswith(CHAKRA_MARKER):
        # A Chakra import: the trace holds the programs; model, parallel and training are the
        # placeholders that make it an experiment (app/chakra_commands.cpp), so not shown.
        trace = first[len(CHAKRA_MARKER):].strip()
        return None, trace, [("workload", f"Chakra execution traces {trace}"),
                             ("cluster", cluster), ("network model", net.get("model")),
                             ("send/recv", run.get("p2p")), ("engine", engine)]
    layout = " · ".join(f"{k} {p[v]}" for k, v in (
        ("TP", "tensor_model_parallel_size"), ("PP", "pipeline_model_parallel_size"),
        ("VPP", "virtual_pipeline_model_parallel_size"), ("CP", "context_parallel_size"),
        ("EP", "expert_model_parallel_size"), ("DP", "data_parallel_size")) if v in p)
    extras = [k.replace("_", " ") for k in ("sequence_parallel", "use_distributed_optimizer",
                                             "overlap_grad_reduce", "overlap_param_gather",
                                             "tp_comm_overlap") if p.get(k) is True]
    model = m.get("name", "?")
    shape = ", ".join(f"{v} {k}" for k, v in (
        ("layers", m.get("num_layers")), ("hidden", m.get("hidden_size")),
        ("heads", m.get("num_attention_heads")), ("experts", m.get("num_experts")),
        ("seq", m.get("seq_length"))) if v)
    facts = [
        ("model", f"{model} ({shape})"),
        ("parallel layout", layout + (f"; {', '.join(extras)}" if extras else "")),
        ("schedule / recompute", f"{p.get('schedule', '?')} / {p.get('recompute', 'none')}"),
        ("batch", f"micro-batch {t.get('micro_batch_size')}, global batch "
                  f"{t.get('global_batch_size')}"),
        ("precision", t.get("precision")),
        ("cluster", cluster),
        ("network model", net.get("model")),
        ("engine", engine),
    ]
    return model, source, facts


def program_note(s):
    """A hybrid run with the user's own program (run --sandbox-program, summary.json "hybrid")."""
    h = s.get("hybrid")
    if not h:
        return ""
    pure = seconds(h["pure_replay_iteration_time_s"]) if "pure_replay_iteration_time_s" in h else ""
    if h.get("program_in_replay"):
        return (f'<p class="note">Hybrid run: sandbox rank {esc(h["rank"])} ran the user\'s program '
                f'<code>{esc(h["sandbox_program"])}</code> ({esc(h["iterations"])} iterations, '
                f'identical-replica assumption), and its last iteration runs on that rank inside '
                f'the replay, every other rank the graph: the figures below are the hybrid '
                f'replay\'s. The pure replay predicts <b>{esc(pure)}</b>; the rank\'s timeline, '
                f'compute and memory beside the pure replay\'s are in '
                f'<code>{esc(h["report"])}</code>.</p>')
    return (f'<p class="note">Hybrid run: sandbox rank {esc(h["rank"])} ran the user\'s program '
            f'<code>{esc(h["sandbox_program"])}</code> ({esc(h["iterations"])} iterations, '
            f'identical-replica assumption); its collectives differ from the graph\'s '
            f'({esc(h.get("figures", ""))}). The figures below are the pure replay\'s; the '
            f'program\'s own iteration, compute and memory are in '
            f'<code>{esc(h["report"])}</code>.</p>')


def hybrid_note(s):
    sb = s.get("sandbox")
    if not sb:
        return program_note(s)
    if sb.get("functional_check"):
        return (f'<p class="warn"><b>Functional check, not a prediction.</b> Sandbox rank(s) '
                f'{esc(", ".join(map(str, sb["ranks"])))} ran their kernels on the '
                f'{esc(sb["backend"])} backend ({esc(sb["device"])}) at shapes shrunk by '
                f'op_scale {esc(sb["op_scale"])}; the iteration time below '
                f'({esc(seconds(s["iteration_time_s"]))}) checks that real kernels run inside '
                f'the replay. The pure replay of the same job predicts '
                f'<b>{esc(seconds(sb["pure_replay_iteration_time_s"]))}</b>.</p>')
    return (f'<p class="note">Hybrid run: sandbox rank(s) {esc(", ".join(map(str, sb["ranks"])))} '
            f'ran real kernels on {esc(sb["device"])} ({esc(sb["backend"])}); '
            f'{100 * sb["measured_fraction_of_compute_time"]:.1f} % of their compute time was '
            f"measured. The pure replay predicts "
            f'{esc(seconds(sb["pure_replay_iteration_time_s"]))}.</p>'
            if "pure_replay_iteration_time_s" in sb else "")


def run_page(path):
    s = load_json(os.path.join(path, "summary.json"))
    with sr.Results(os.path.join(path, "results.h5")) as res:
        # Both files are read for the page: they must be of one run, and undamaged.
        res.check_summary_json(s, os.path.join(path, "summary.json"))
        model, source, facts = experiment_facts(res.config_text())
        ranks = res.ranks()
        stages = sr.stage_table(ranks)
        traced = res.traced_ranks()
        memory_ranks = res.memory_ranks()
        mem = s.get("memory")
        tight = mem["tightest_rank"] if mem else None
        curve_rank = tight if tight in memory_ranks else None
        if curve_rank is None and mem:  # a traced rank of the same stage has the same curve
            same = [r for r in memory_ranks if int(ranks["pp_stage"][r]) == mem["tightest_pp_stage"]]
            curve_rank = same[0] if same else None
        curve = res.memory(curve_rank) if curve_rank is not None else None
        timeline, rects = gantt(res, traced) if traced else ("", 0)
    e = s["engine"]
    title = f"{model or s['model']} on {s['world_size']:,} GPUs"
    out = [f"<h1>{esc(title)}</h1>",
           f'<p class="sub">{esc(source)} · {esc(s["gpu"])} · scalescope report of '
           f"<code>{esc(os.path.abspath(path))}</code></p>", hybrid_note(s)]
    # Headline
    fits = mem["fits"] if mem else None
    check = bool(s.get("sandbox", {}).get("functional_check"))
    cards = [card("iteration time" + (": a functional check, not a prediction" if check else ""),
                  seconds(s["iteration_time_s"]), "iteration_time_s", s["iteration_time_s"],
                  "bad" if check else ""),
             card("tokens / s", f"{s['tokens_per_s']:,.0f}", "tokens_per_s", s["tokens_per_s"]),
             card("model TFLOP/s per GPU", f"{s['model_tflops_per_gpu']:.1f}",
                  "model_tflops_per_gpu", s["model_tflops_per_gpu"]),
             card(f"MFU (of the dense bf16 peak, {s.get('mfu_peak_tflops', 0):.1f} TFLOP/s)",
                  f"{100 * s['mfu']:.1f} %", "mfu", s["mfu"])]
    for fmt in ("fp8", "fp4"):
        if f"mfu_{fmt}" in s:
            cards.append(card(f"MFU (of the dense {fmt} peak, {s[f'mfu_{fmt}_peak_tflops']:.1f} "
                              "TFLOP/s)", f"{100 * s[f'mfu_{fmt}']:.1f} %", f"mfu_{fmt}",
                              s[f"mfu_{fmt}"]))
    if mem and "peak_allocated_bytes" in mem:
        # The names run, memory and sweep use (docs/model.md "Memory capacity").
        cards.append(card("peak allocated memory (torch max_memory_allocated)",
                          gib(mem["peak_allocated_bytes"]), "memory.peak_allocated_bytes",
                          mem["peak_allocated_bytes"]))
        cards.append(card("peak reserved memory (torch max_memory_reserved)",
                          gib(mem["peak_reserved_bytes"]), "memory.peak_reserved_bytes",
                          mem["peak_reserved_bytes"]))
    else:
        cards.append(card("peak allocated memory (max over ranks)", gib(s["peak_memory_bytes"]),
                          "peak_memory_bytes", s["peak_memory_bytes"]))
    if mem:
        cards.append(card(f"memory check: rank {mem['tightest_rank']} needs, of "
                          f"{gib(mem['capacity_bytes'])} usable",
                          f"{'fits' if fits else 'does not fit'}: {gib(mem['peak_total_bytes'])}",
                          "memory.peak_total_bytes", mem["peak_total_bytes"],
                          "good" if fits else "bad"))
    out.append('<div class="cards" id="headline">' + "".join(cards) + "</div>")
    out.append("<h2>Experiment</h2>" + kv(facts))
    if s.get("whatif"):
        w = s["whatif"]
        out.append("<h2>What-if</h2>" + kv([
            ("applied", "; ".join(w["applied"])),
            ("baseline iteration time", seconds(w["baseline_iteration_time_s"])),
            ("with the what-ifs", seconds(w["iteration_time_s"])),
            ("change", f"{100 * w['change']:+.2f} %")]))
    # Where the time goes
    br = s["time_breakdown_s"]
    terms = [t for t in TERM_LABELS if t in br]
    colors = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(TERM_LABELS)}
    parts = [(TERM_LABELS[t], br[t], colors[t]) for t in terms if br[t] > 0]
    out.append(f"<h2>Where the time goes: rank {s['time_breakdown_rank']}, the last to finish</h2>")
    out.append(legend([(label, c) for label, _, c in parts]))
    out.append(stacked_bar(parts, seconds(sum(br[t] for t in terms))))
    out.append(table(["term", "time", "share of the iteration"],
                     [[TERM_LABELS[t], (seconds(br[t]), br[t]),
                       f"{100 * br[t] / s['iteration_time_s']:.1f} %"] for t in terms]))
    cp = s.get("critical_path")
    if cp:
        out.append(f"<p>What set the iteration time (the critical path: {cp['segments']:,} "
                   f"segments over {cp['ranks_visited']} ranks):</p>")
        out.append(table(["on the critical path", "time"],
                         [[k, seconds(v)] for k, v in cp["totals_s"].items() if v > 0]))
    # Per stage
    out.append("<h2>Pipeline stages</h2>")
    rows = []
    for st in stages:
        k = st["stage"]
        total = mem["total_bytes_by_pp_stage"][k] if mem else None
        rows.append([str(k), sr.rank_ranges(st["rank_list"]), seconds(st["finish_max_s"]),
                     seconds(st["compute_mean_s"]), seconds(st["bubble_mean_s"]),
                     seconds(st.get("straggler_wait_mean_s", 0)),
                     gib(s["peak_memory_bytes_by_pp_stage"][k]),
                     gib(total) if total is not None else "–",
                     ("yes" if total <= mem["capacity_bytes"] else "NO") if mem else "–"])
    out.append(table(["stage", "ranks", "finish (max)", "compute (mean)", "bubble (mean)",
                      "straggler wait (mean)",
                      "peak allocated", "peak total (with context, buffers)", "fits"], rows,
                     left=2))
    # Memory
    if mem:
        out.append(f"<h2>Memory: rank {mem['tightest_rank']} (pipeline stage "
                   f"{mem['tightest_pp_stage']}), the tightest</h2>")
        items = sorted(mem["breakdown_bytes"].items(), key=lambda kv_: -kv_[1])
        out.append(f"<p>At its peak it needs {esc(gib(mem['peak_total_bytes']))} of the "
                   f"{esc(s['gpu'])}'s {esc(gib(mem['capacity_bytes']))} usable; the largest "
                   f"class is <b>{esc(mem['dominant_class'])}</b>.</p>")
        out.append(bars([(k.replace("_", " "), v, PALETTE[i % len(PALETTE)])
                         for i, (k, v) in enumerate(items)], gib))
        if curve is not None:
            which = ("" if curve_rank == tight else
                     f" (rank {curve_rank}, traced, runs the same stage's program)")
            out.append(f"<p>Memory allocated by the framework over the iteration{esc(which)} "
                       f"(the CUDA context, NCCL buffers, workspaces and fragmentation above "
                       f"come on top of it).</p>" + memory_curve(curve, s["iteration_time_s"]))
        else:
            out.append(f"<p>No memory curve: rank {mem['tightest_rank']} was not traced "
                       f"(add it to <code>run.trace_ranks</code>).</p>")
    # Timeline
    out.append("<h2>Timeline of the traced ranks</h2>")
    if traced:
        out.append(f"<p>Ranks {esc(', '.join(map(str, traced)))}, one lane per stream; a pixel "
                   f"column shows the op kind that covers most of it. For every "
                   f"op with its name, open <code>trace.json</code> in "
                   f'<a href="https://ui.perfetto.dev">ui.perfetto.dev</a> ("Open trace file"; '
                   f"it runs in the browser, the file stays on your machine).</p>")
        out.append(timeline)
    else:
        out.append("<p>No rank was traced (<code>run.trace_ranks</code> is empty).</p>")
    # Every rank of the job: when it finished and how long it waited for communication.
    out.append("<h2>Every rank</h2>")
    exposed = sum(ranks[c].astype(np.int64) for t, c in sr.BREAKDOWN_TERMS
                  if t.startswith("exposed_"))
    out.append(rank_heatmap(ranks["finish_ns"].astype(np.int64) * 1e-9, "finish time", seconds,
                            "heat-finish"))
    out.append(rank_heatmap(exposed * 1e-9, "exposed communication", seconds, "heat-exposed"))
    # Engine
    out.append("<h2>Engine</h2>")
    out.append(kv([("engine", f"{e['kind']}, {e['processes']} process(es)"),
                   ("events committed", count(e["events_committed"])),
                   ("events processed", count(e["events_processed"])),
                   ("rolled back", count(e["events_rolled_back"])),
                   ("efficiency", f"{e['efficiency']:.4f}"),
                   ("remote messages", count(e["remote_messages"])),
                   ("GVT rounds", count(e["gvt_rounds"])),
                   ("wall time", seconds(e["wall_s"])),
                   ("committed events / s", f"{e['committed_events_per_s']:,.0f}"),
                   ("replicas", f"{e.get('replicas', 'all')}: {e.get('replayed_ranks', '?')} of "
                                f"{s['world_size']:,} ranks replayed"
                                + (f" (one of {e['replica_count']:,} identical replicas, the "
                                   f"others copied)" if e.get("replicas") == "representative"
                                   else ""))]))
    if e.get("per_process"):
        out.append("<p>Per process:</p>" + table(
            ["process", "processed", "committed", "rolled back", "remote", "wall", "GVT", "idle"],
            [[str(i), count(p["events_processed"]), count(p["events_committed"]),
              count(p["events_rolled_back"]), count(p["remote_messages"]), seconds(p["wall_s"]),
              seconds(p["gvt_s"]), seconds(p["idle_s"])] for i, p in enumerate(e["per_process"])]))
    return title, "".join(out)


# -- the sweep page ---------------------------------------------------------------------------

def sweep_page(path):
    rows, doc = sweep_table.load(path)
    front = sweep_table.pareto_front(rows)
    front_idx = {r["index"] for r in front}
    counts = {k: sum(r["status"] == k for r in rows) for k in ("ok", "does_not_fit", "invalid")}
    title = f"Sweep of {doc.get('experiment', '?')}"
    out = [f"<h1>{esc(title)}</h1>",
           f'<p class="sub">scalescope report of <code>{esc(os.path.abspath(path))}</code></p>']
    out.append('<div class="cards" id="headline">' + "".join([
        card("configurations", f"{len(rows):,}", "configurations", len(rows)),
        card("fit in memory", f"{counts['ok']:,}", "ok", counts["ok"]),
        card("do not fit", f"{counts['does_not_fit']:,}", "does_not_fit", counts["does_not_fit"]),
        card("refused (invalid)", f"{counts['invalid']:,}", "invalid", counts["invalid"])])
        + "</div>")
    axes = []
    for a in doc.get("axes", []):
        values = [v[0].split("=", 1)[-1] if len(v) == 1 else " ".join(v) for v in a["values"]]
        text = ", ".join(values)
        if len(values) > 6:  # e.g. the layout search: a count and the first ones
            text = f"{len(values)} values: " + "; ".join(values[:3]) + "; …"
        axes.append((a["name"], text))
    if axes:
        out.append("<h2>Axes</h2>" + kv(axes))
    if front:
        b = front[0]
        out.append(f"<h2>Best</h2><p><b>{esc(sweep_table.plan(b))}</b>: "
                   f"{esc(seconds(b['iteration_time_s']))} per iteration, "
                   f"{b['model_tflops_per_gpu']:.1f} TFLOP/s per GPU, MFU "
                   f"{100 * b['mfu']:.1f} %, {esc(gib(b['peak_memory_bytes']))} "
                   f"({esc(' '.join(b['overrides']))}).</p>")
    out.append("<h2>Iteration time against peak memory</h2>" + pareto_plot(rows, front))
    out.append("<h2>All configurations</h2><p>Click a column to sort; highlighted: the Pareto "
               "front.</p>")
    def recompute(r):
        for o in r["overrides"]:
            if o.startswith("parallel.recompute="):
                return o.split("=", 1)[1] or "none"
        return "–"

    def rows_of(subset, start):
        body, classes = [], []
        for rank, r in enumerate(subset, start):
            replayed = r["replayed"]
            num = (lambda v, f: (f(v), v)) if replayed else (lambda v, f: ("–", ""))  # noqa: E731
            mem = (gib(r["peak_memory_bytes"]), r["peak_memory_bytes"]) if r["tp"] else ("–", "")
            run = r.get("run_dir")  # a point's own run, when the sweep kept one
            body.append([
                (str(rank), rank), (str(r["index"]), r["index"]), r["status"],
                num(r["iteration_time_s"], seconds), num(r["tokens_per_s"], lambda v: f"{v:,.0f}"),
                num(r["model_tflops_per_gpu"], lambda v: f"{v:.1f}"),
                num(r["mfu"], lambda v: f"{100 * v:.1f} %"),
                num(r.get("compute_s", 0), seconds), num(r.get("exposed_comm_s", 0), seconds),
                num(r.get("bubble_s", 0), seconds), num(r.get("straggler_wait_s", 0), seconds),
                mem,
                *[(str(r[k]), r[k]) if r["tp"] else ("–", "") for k in
                  ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size")],
                recompute(r), " ".join(r["overrides"]) + (f" (run: {run})" if run else ""),
                r["message"]])
            classes.append("front" if r["index"] in front_idx else
                           ("nofit" if r["status"] != "ok" else ""))
        return body, classes

    headers = ["rank", "#", "status", "iteration", "tokens/s", "TFLOP/s/GPU", "MFU", "compute",
               "exposed comm.", "bubble", "straggler wait", "peak memory", "TP", "PP", "DP", "CP", "EP", "VPP",
               "MBS", "recompute", "overrides", "why not replayed"]
    # Refused rows apart, below: they have no figures to sort by.
    checked = [r for r in rows if r["status"] != "invalid"]
    refused = [r for r in rows if r["status"] == "invalid"]
    body, classes = rows_of(checked, 1)
    out.append(table(headers, body, cls="sortable", row_classes=classes, left={2, 18, 19, 20},
                     table_id="sweep-table"))
    if refused:
        out.append(f"<h2>Refused ({len(refused)})</h2><p>Configurations the rules of the "
                   "parallel plan refuse, before any replay; each says why.</p>")
        body, _ = rows_of(refused, len(checked) + 1)
        out.append(table(["rank", "#", "status", "overrides", "why"],
                         [[row[0], row[1], row[2], row[19], row[20]] for row in body],
                         left={2, 3, 4}, table_id="refused-table"))
    return title, "".join(out)


# -- plumbing ---------------------------------------------------------------------------------

def page(title, body):
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width\"><title>{esc(title)}</title>"
            f"<style>{CSS}</style></head><body><main>{body}"
            '<p class="sub" style="margin-top:2em">Written by scripts/post/report.py from the '
            "run's files; every figure is theirs.</p></main>"
            f"<script>{SORT_JS}</script></body></html>\n")


def main():
    p = argparse.ArgumentParser(
        description="Write one self-contained HTML report of a scalescope run or sweep.",
        epilog="example: scripts/post/report.py out/quickstart -o quickstart.html")
    p.add_argument("dir", help="a run's output directory (summary.json, results.h5) or a "
                               "sweep's (sweep.json)")
    p.add_argument("-o", "--output", help="HTML file to write (default DIR/report.html)")
    args = p.parse_args()
    if not os.path.isdir(args.dir):
        raise sr.ResultsError(f"{args.dir}: not a directory")
    if os.path.exists(os.path.join(args.dir, "sweep.json")):
        title, body = sweep_page(args.dir)
    elif os.path.exists(os.path.join(args.dir, "summary.json")):
        title, body = run_page(args.dir)
    else:
        raise sr.ResultsError(f"{args.dir}: neither a run (summary.json) nor a sweep (sweep.json)")
    output = args.output or os.path.join(args.dir, "report.html")
    text = page(title, body)
    sr.write_via_temporary(output, lambda f: f.write(text), mode="w")
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sr.run_main(main)
