#!/usr/bin/python3
"""Compare two scalescope results.h5 files: the /summary figures side by side with relative
differences, the per-pipeline-stage iteration time and peak memory, then every attribute and
dataset of the two files except /engine (which holds the wall-clock time of the emulation).
/meta config_text is compared without its comment lines unless --strict-config is given.

Exit status: 0 when the contents are identical (or every number is within --rtol), 1 when they
differ or a file cannot be read."""

import argparse
import math

import numpy as np

import scalescope_results as sr

IGNORED = ("engine",)  # top-level groups left out of the content check


def rel_diff(a, b):
    """(b - a) / |a| for numbers, None when they are not both numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return None
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return None
    if a == b:
        return 0.0
    if a == 0:
        return math.inf if b > 0 else -math.inf
    return (b - a) / abs(a)


def fmt_value(v):
    if isinstance(v, float):
        return f"{v:.6g}" if abs(v) < 1e7 else f"{v:.6e}"
    if isinstance(v, list):
        return "[" + ", ".join(fmt_value(x) for x in v) + "]"
    return str(v)


def fmt_rel(a, b):
    if a == b:
        return "="
    r = rel_diff(a, b)
    if r is None:
        return "differs"
    if math.isinf(r):
        return "+inf" if r > 0 else "-inf"
    return f"{100 * r:+.3f} %"


def table(headers, rows, left=1):
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
    out = []
    for row in [headers] + rows:
        out.append("  " + "  ".join(str(c).ljust(w) if i < left else str(c).rjust(w)
                                    for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    return out


def close(a, b, rtol):
    """Numbers within rtol (relative to the larger magnitude); anything else must be equal."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, rtol) for x, y in zip(a, b))
    if rel_diff(a, b) is None:
        return a == b
    if a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)):
        return True
    return abs(a - b) <= rtol * max(abs(a), abs(b))


def first_line_diff(a, b):
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}: '{x.strip()}' vs '{y.strip()}'"
    return f"{len(la)} vs {len(lb)} lines"


def compare_arrays(name, a, b, rtol):
    """A one-line description of how datasets `a` and `b` differ, or None."""
    if a.shape != b.shape:
        return f"{name}: shape {a.shape} vs {b.shape}"
    fields_a, fields_b = a.dtype.names, b.dtype.names
    if fields_a or fields_b:
        if fields_a != fields_b:
            return f"{name}: fields {fields_a} vs {fields_b}"
        parts = []
        for fld in fields_a:
            d = compare_arrays(name, a[fld], b[fld], rtol)
            if d:
                parts.append(f"{fld} ({d.split(': ', 1)[1]})")
        return f"{name}: " + "; ".join(parts) if parts else None
    if a.dtype.kind in "OSU" or b.dtype.kind in "OSU":
        equal = a.tolist() == b.tolist()
        return None if equal else f"{name}: values differ"
    if a.dtype != b.dtype:
        return f"{name}: type {a.dtype} vs {b.dtype}"
    x, y = a.astype(np.float64), b.astype(np.float64)
    if rtol > 0:
        same = np.isclose(x, y, rtol=rtol, atol=0.0, equal_nan=True) | (x == y)
    else:
        same = (a == b) | (np.isnan(x) & np.isnan(y))
    n = int(np.size(same) - np.count_nonzero(same))
    if n == 0:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(y - x) / np.maximum(np.abs(x), np.abs(y))
    worst = float(np.nanmax(rel[~same])) if np.any(~np.isnan(rel[~same])) else math.nan
    return f"{name}: {n} of {np.size(same)} values differ, max |rel diff| {worst:.3g}"


def config_values(text):
    """The resolved configuration without its comment lines, which record provenance (the input
    file's path as typed, the preset names) rather than content."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def content_diffs(ra, rb, rtol, strict_config=False):
    """One line per object or attribute whose content differs, /engine left out."""
    diffs = []
    oa, ob = ra.objects(IGNORED), rb.objects(IGNORED)
    for path in sorted(set(oa) | set(ob), key=lambda p: (p.count("/"), p)):
        if path not in ob:
            diffs.append(f"{path}: only in {ra.path}")
            continue
        if path not in oa:
            diffs.append(f"{path}: only in {rb.path}")
            continue
        if oa[path] != ob[path]:
            diffs.append(f"{path}: {oa[path]} vs {ob[path]}")
            continue
        aa, ab = ra.attrs(path), rb.attrs(path)
        if path == "/meta" and not strict_config:
            for attrs in (aa, ab):
                if isinstance(attrs.get("config_text"), str):
                    attrs["config_text"] = config_values(attrs["config_text"])
        for key in sorted(set(aa) | set(ab)):
            if key not in ab or key not in aa:
                diffs.append(f"{path} attribute {key}: only in "
                             f"{ra.path if key in aa else rb.path}")
            elif not close(aa[key], ab[key], rtol):
                x, y = aa[key], ab[key]
                if isinstance(x, str) and isinstance(y, str):
                    detail = first_line_diff(x, y) if "\n" in x + y else f"'{x}' vs '{y}'"
                else:
                    detail = f"{fmt_value(x)} vs {fmt_value(y)} ({fmt_rel(x, y)})"
                diffs.append(f"{path} attribute {key}: {detail}")
        if oa[path] == "dataset":
            d = compare_arrays(path, ra.dataset(path), rb.dataset(path), rtol)
            if d:
                diffs.append(d)
    return diffs


def stage_rows(ranks):
    return {st["stage"]: st for st in sr.stage_table(ranks)}


def main():
    p = argparse.ArgumentParser(
        description="Compare two scalescope results.h5 files: summary figures side by side with "
                    "relative differences, per-stage iteration time and peak memory, and every "
                    "attribute and dataset except /engine (wall-clock time). Exit 0 when "
                    "identical (or within --rtol), 1 when they differ or a file cannot be read.",
        epilog="example: scripts/post/compare.py out/a/results.h5 out/b/results.h5 --rtol 1e-6")
    p.add_argument("a", help="first results.h5")
    p.add_argument("b", help="second results.h5")
    p.add_argument("--rtol", type=float, default=0.0,
                   help="relative tolerance for numbers (default 0: bit-identical)")
    p.add_argument("--max-diffs", type=int, default=20, metavar="N",
                   help="list at most N differing objects (default 20)")
    p.add_argument("--strict-config", action="store_true",
                   help="compare /meta config_text verbatim (default: without its comment lines, "
                        "which hold the input path as typed and the preset names)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the verdict")
    args = p.parse_args()
    if not args.rtol >= 0 or math.isinf(args.rtol):
        p.error(f"--rtol must be a finite number ≥ 0, not {args.rtol}")

    with sr.Results(args.a) as ra, sr.Results(args.b) as rb:
        sa, sb = ra.summary(), rb.summary()
        ea, eb = ra.engine(), rb.engine()
        sta, stb = stage_rows(ra.ranks()), stage_rows(rb.ranks())
        diffs = content_diffs(ra, rb, args.rtol, args.strict_config)

    out = []
    if not args.quiet:
        out += [f"a: {args.a}", f"b: {args.b}", "", "summary"]
        rows = []
        for key in sr.SUMMARY_KEYS + ("peak_memory_bytes_by_pp_stage",):
            x, y = sa[key], sb[key]
            mark = "" if close(x, y, args.rtol) else " *"
            rows.append([key, fmt_value(x), fmt_value(y),
                         (fmt_rel(x, y) if not isinstance(x, list) else
                          ("=" if x == y else "differs")) + mark])
        out += table(["", "a", "b", "b vs a"], rows)

        out += ["", "pipeline stages (iteration = the stage's last finish, s; peak memory GiB)"]
        rows = []
        for s in sorted(set(sta) | set(stb)):
            x, y = sta.get(s), stb.get(s)
            fa = x["finish_max_s"] if x else None
            fb = y["finish_max_s"] if y else None
            ma = x["peak_memory_bytes"] / sr.GIB if x else None
            mb = y["peak_memory_bytes"] / sr.GIB if y else None
            rows.append([str(s),
                         f"{fa:.6f}" if x else "-", f"{fb:.6f}" if y else "-",
                         fmt_rel(fa, fb) if x and y else "missing",
                         f"{ma:.3f}" if x else "-", f"{mb:.3f}" if y else "-",
                         fmt_rel(x["peak_memory_bytes"], y["peak_memory_bytes"])
                         if x and y else "missing"])
        out += table(["stage", "iter a", "iter b", "b vs a", "peak a", "peak b", "b vs a"], rows)

        out += ["", "engine (not compared)"]
        rows = [[k, fmt_value(ea[k]), fmt_value(eb[k])]
                for k in ("kind", "processes", "events_committed", "wall_s")]
        out += table(["", "a", "b"], rows)
        out.append("")

    tol = f" within rtol {args.rtol:g}" if args.rtol > 0 else ""
    if diffs:
        if not args.quiet:
            beyond = f" beyond rtol {args.rtol:g}" if args.rtol > 0 else ""
            out.append(f"contents differ{beyond} ({len(diffs)} difference"
                       f"{'s' if len(diffs) > 1 else ''}, /engine ignored):")
            out += [f"  {d}" for d in diffs[:args.max_diffs]]
            if len(diffs) > args.max_diffs:
                out.append(f"  … and {len(diffs) - args.max_diffs} more")
        out.append(f"DIFFER: {args.a} and {args.b} ({len(diffs)} difference"
                   f"{'s' if len(diffs) > 1 else ''})")
    else:
        out.append(f"IDENTICAL{tol}: {args.a} and {args.b} (/engine ignored)")
    print("\n".join(out))
    return 1 if diffs else 0


if __name__ == "__main__":
    sr.run_main(main)
