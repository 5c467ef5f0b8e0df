#!/usr/bin/python3
"""Whether two directories written by scripts/dev/outputs.sh hold the same results: for every
run, summary.json (all of it but the engine's wall-clock figures) and every dataset and attribute
of results.h5 (all but the engine's wall-clock figures), compared exactly; for every sweep,
sweep.json and sweep.csv byte for byte. Prints one line per run and exits 1 on any difference.

    scripts/dev/same_outputs.py BEFORE_DIR AFTER_DIR
"""
import json
import os
import sys

import h5py
import numpy as np

# Wall-clock measurements of the engine: the only figures that differ between two runs.
CLOCK_KEYS = {"wall_s", "gvt_s", "idle_s", "committed_events_per_s", "process_wall_s",
              "process_gvt_s", "process_idle_s"}


def summary(path):
    s = json.load(open(path))

    def drop(d):
        if isinstance(d, dict):
            return {k: drop(v) for k, v in d.items() if k not in CLOCK_KEYS}
        if isinstance(d, list):
            return [drop(v) for v in d]
        return d
    return drop(s)


def h5_contents(path):
    out = {}
    with h5py.File(path, "r") as f:
        def attrs(name, obj):
            for k, v in obj.attrs.items():
                if k not in CLOCK_KEYS:
                    out[f"{name}@{k}"] = v

        def visit(name, obj):
            attrs(name, obj)
            if isinstance(obj, h5py.Dataset) and os.path.basename(name) not in CLOCK_KEYS:
                out[name] = obj[()]
        attrs("/", f)
        f.visititems(visit)
    return out


def same_value(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and (
            np.array_equal(a, b) if a.dtype.kind != "f" else
            np.array_equal(a.view(np.uint8), b.view(np.uint8)))
    return type(a) is type(b) and a == b


def compare_run(a, b):
    problems = []
    if summary(f"{a}/summary.json") != summary(f"{b}/summary.json"):
        problems.append("summary.json differs")
    ha, hb = h5_contents(f"{a}/results.h5"), h5_contents(f"{b}/results.h5")
    if ha.keys() != hb.keys():
        problems.append(f"results.h5 objects differ: {sorted(ha.keys() ^ hb.keys())[:5]}")
    problems += [f"results.h5 {k} differs" for k in sorted(ha.keys() & hb.keys())
                 if not same_value(ha[k], hb[k])]
    return problems


def compare_sweep(a, b):
    return [f"{name} differs" for name in ("sweep.json", "sweep.csv")
            if open(f"{a}/{name}", "rb").read() != open(f"{b}/{name}", "rb").read()]


def main(before, after):
    names = sorted(os.listdir(before))
    if sorted(os.listdir(after)) != names:
        print(f"different runs: {sorted(set(names) ^ set(os.listdir(after)))}")
        return 1
    bad = 0
    for name in names:
        a, b = os.path.join(before, name), os.path.join(after, name)
        problems = compare_sweep(a, b) if name.startswith("sweep-") else compare_run(a, b)
        print(f"{name:28s} {'identical' if not problems else 'DIFFERENT: ' + '; '.join(problems[:4])}")
        bad += bool(problems)
    print(f"{len(names) - bad} of {len(names)} identical")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
