#!/usr/bin/python3
"""Compare scalescope's compute model with per-op times measured on an H200.

Usage: h200_ops.py [CSV] [--rows OUT.csv] [--compute-efficiency E] [--gpu NAME]

CSV defaults to inputs/profiles/h200-torch/h200_ops.csv (written by
scripts/device/measure_ops.py). For every measured GEMM, attention and memory-bound row it
computes the model's time for one kernel and prints error = t_model / t_measured - 1 per op class
(median, mean, median and mean of |error|), as docs/cost-model.md §2.5 does for NCCL.

The model is re-implemented here from the C++ (no build needed); the names are the C++ ones:
  tile_wave, gemm_quantization, gemm_efficiency, attention_tflops, compute_seconds
    (src/cost/compute_model.cpp),
and the constants are read from the sources, so this follows edits to them:
  GPU row (peak_tflops_bf16, hbm_bandwidth_TBps, sms, gemm_ceiling_tflops, attention_tflops and
    the MAMF ceiling shape) from src/cost/gpu.cpp;
  kHbmEfficiency, kLaunchOverheadSeconds, kGemmTiles, kGemmKHalf from
    src/cost/compute_model.hpp.
CostModel::compute_ns (src/cost/cost_model.cpp) divides compute_seconds by
cluster.compute_efficiency (presets 0.85, a whole-step framework factor); kernels measured in
isolation are compared with compute_efficiency 1 unless --compute-efficiency says otherwise.

What each measured row is compared with:
  gemm       kind Gemm, shape (m, n, k), flops 2mnk, mem_bytes 2(mk + kn + mn);
  attention  kind Attention, shape (b*heads, s, 128), flops of the row (FlashAttention convention,
             fwd or fwd+bwd = 3.5 x fwd), mem_bytes Q, K, V, O; the model has one rate (FA2
             fwd+bwd) for both passes;
  copy, add, rmsnorm_*, swiglu_*
             memory-bound kind (Elementwise / Norm), flops 0, mem_bytes = the row's ideal bytes
             (inputs read once, outputs written once; the graph's convention, docs/model.md);
  launch     t_launch against the tiny-kernel rows.
"""
import argparse
import csv
import math
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_CSV = os.path.join(ROOT, "inputs", "profiles", "h200-torch", "h200_ops.csv")
GPU_CPP = os.path.join(ROOT, "src", "cost", "gpu.cpp")
MODEL_HPP = os.path.join(ROOT, "src", "cost", "compute_model.hpp")


# ------------------------------------------------------------------ constants from the sources

def _num(s):
    return float(s.replace("'", ""))


def read_gpu(name):
    """The GpuSpec fields and ceiling shape of the row whose g.name is `name` (gpu.cpp)."""
    src = open(GPU_CPP).read()
    vectors = {m.group(1): [_num(x) for x in m.group(2).split(",")]
               for m in re.finditer(r"const std::vector<double> (\w+)\{([^}]*)\};", src)}
    start = src.find(f'g.name = "{name}";')
    if start < 0:
        raise SystemExit(f"{GPU_CPP}: no row with g.name = \"{name}\"")
    end = src.find("r.push_back", start)
    block = src[start:end]
    gpu = {"name": name}
    for field in ("peak_tflops_bf16", "hbm_bandwidth_TBps", "sms", "gemm_ceiling_tflops"):
        m = re.search(rf"g\.{field} = ([0-9.e']+);", block)
        if not m:
            raise SystemExit(f"{GPU_CPP}: {name}: no g.{field}")
        gpu[field] = _num(m.group(1))
    m = re.search(r"g\.attention_tflops = (\w+);", block)
    if not m or m.group(1) not in vectors:
        raise SystemExit(f"{GPU_CPP}: {name}: attention_tflops is not a named table")
    gpu["attention_tflops"] = vectors[m.group(1)]
    gpu["attention_table_name"] = m.group(1)
    m = re.search(r"\{(\d+), (\d+), (\d+)\}", src[end:end + 400])
    gpu["ceiling_shape"] = tuple(int(x) for x in m.groups()) if m else (0, 0, 0)
    return gpu


def read_model_constants():
    src = open(MODEL_HPP).read()
    gpu_hpp = open(os.path.join(os.path.dirname(MODEL_HPP), "gpu.hpp")).read()

    def const(text, name, where):
        m = re.search(rf"{name} = ([0-9.e\-']+);", text)
        if not m:
            raise SystemExit(f"{where}: no {name}")
        return _num(m.group(1))
    m = re.search(r"kGemmTiles\[\d+\]\[2\] = \{(.*?)\};", src, re.S)
    tiles = [(int(a), int(b)) for a, b in re.findall(r"\{(\d+), (\d+)\}", m.group(1))]
    # The kernel model's physical defaults (cost::KernelCalibration in gpu.hpp): the values the
    # Hopper presets use; the GEMM and attention efficiencies are 1 there.
    return {"hbm_efficiency": const(gpu_hpp, "hbm_efficiency", "gpu.hpp"),
            "launch_s": const(gpu_hpp, "kernel_overhead_us", "gpu.hpp") * 1e-6,
            "k_half": const(src, "kGemmKHalf", MODEL_HPP), "tiles": tiles}


# ------------------------------------------------------------------ the model (compute_model.cpp)

def tile_wave(m, n, tm, tn, sms):
    tiles = math.ceil(m / tm) * math.ceil(n / tn)
    tile_eff = (m * n) / (tiles * tm * tn)
    wave_eff = tiles / (math.ceil(tiles / sms) * sms)
    return tile_eff * wave_eff


def gemm_quantization(gpu, c, m, n, k):
    tw = max(tile_wave(m, n, tm, tn, gpu["sms"]) for tm, tn in c["tiles"])
    return tw * k / (k + c["k_half"])


def gemm_efficiency(gpu, c, m, n, k):
    ceiling = gpu["gemm_ceiling_tflops"] / gpu["peak_tflops_bf16"]
    if m == 0 or n == 0 or k == 0:
        return ceiling
    best = gpu["ceiling_shape"]
    q_best = gemm_quantization(gpu, c, *best) if best[0] > 0 else 1.0
    return ceiling * min(1.0, gemm_quantization(gpu, c, m, n, k) / q_best)


def attention_tflops(gpu, seq):
    t = gpu["attention_tflops"]
    x = math.log2(seq / 512.0) if seq > 0 else 0.0
    last = len(t) - 1
    if not x > 0:
        return t[0]
    if x >= last:
        return t[-1]
    lo = math.floor(x)
    frac = x - lo
    return t[lo] if frac == 0 else t[lo] + (t[lo + 1] - t[lo]) * frac


def compute_seconds(gpu, c, kind, flops, mem_bytes, shape=(0, 0, 0)):
    peak = gpu["peak_tflops_bf16"] * 1e12
    mem_s = mem_bytes / (c["hbm_efficiency"] * gpu["hbm_bandwidth_TBps"] * 1e12)
    if kind == "gemm":
        flop_s = flops / (peak * gemm_efficiency(gpu, c, *shape))
    elif kind == "attention":
        flop_s = flops / (attention_tflops(gpu, shape[1]) * 1e12)
    else:
        flop_s = flops / peak
    return max(flop_s, mem_s) + c["launch_s"]


# ------------------------------------------------------------------ comparison

MEM_KINDS = ("copy", "add", "rmsnorm_fused", "rmsnorm_eager", "rmsnorm_compiled", "swiglu_eager",
             "swiglu_compiled")


def classes_of(r):
    """Op classes a measured row belongs to (a row can count in several)."""
    kind = r["kind"]
    out = []
    if kind == "gemm":
        out.append("gemm bf16, all")
        tag = r["tag"]
        if "exp:" in tag:
            out.append("gemm bf16, shipped experiments' shapes")
        if "sweep:" in tag:
            out.append("gemm bf16, tokens x hidden x TP sweep")
        if "square" in tag:
            out.append("gemm bf16, squares")
        us = float(r["median_us"])
        out.append("gemm bf16, kernel < 1 ms" if us < 1000 else "gemm bf16, kernel >= 1 ms")
    elif kind == "attention":
        backend = r["tag"].rsplit(":", 1)[1]
        out.append(f"attention {backend} {r['pass']}, all")
        if r["tag"].startswith("fa-bench"):
            out.append(f"attention {backend} {r['pass']}, FA benchmark (16k tokens)")
        if r["tag"].startswith("exp:"):
            out.append(f"attention {backend} {r['pass']}, shipped experiments' shapes")
    elif kind in MEM_KINDS:
        size = int(r["tag"].replace("size", ""))
        if size >= 1 << 20:
            out.append(f"{kind}, 1 MiB - 4 GiB")
        if size >= 16 << 20:
            out.append(f"{kind}, 16 MiB - 4 GiB")
    return out


def predict(gpu, c, r, ce):
    kind = r["kind"]
    if kind == "gemm":
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        t = compute_seconds(gpu, c, "gemm", 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n),
                            (m, n, k))
    elif kind == "attention":
        t = compute_seconds(gpu, c, "attention", float(r["flops"]), float(r["bytes"]),
                            (int(r["batch_heads"]), int(r["seq"]), int(r["head_dim"])))
    elif kind in MEM_KINDS:
        t = compute_seconds(gpu, c, "memory", 0.0, float(r["bytes"]))
    else:
        return None
    return t / ce


def stats(errs):
    a = [abs(e) for e in errs]
    return (len(errs), statistics.median(errs), statistics.mean(errs), statistics.median(a),
            statistics.mean(a), min(errs), max(errs))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="?", default=DEFAULT_CSV)
    ap.add_argument("--gpu", default="H200-SXM")
    ap.add_argument("--compute-efficiency", type=float, default=1.0)
    ap.add_argument("--rows", help="write every compared row with the model's time here")
    args = ap.parse_args()

    gpu = read_gpu(args.gpu)
    c = read_model_constants()
    print(f"model: {gpu['name']}: peak {gpu['peak_tflops_bf16']} TFLOP/s, HBM "
          f"{gpu['hbm_bandwidth_TBps']} TB/s x eta {c['hbm_efficiency']}, {gpu['sms']:.0f} SMs, "
          f"GEMM ceiling {gpu['gemm_ceiling_tflops']} at {gpu['ceiling_shape']}, attention "
          f"{gpu['attention_table_name']} {gpu['attention_tflops']}, t_launch "
          f"{c['launch_s'] * 1e6:g} us, tiles {c['tiles']}, k_half {c['k_half']:g}; "
          f"compute_efficiency {args.compute_efficiency}")

    rows = list(csv.DictReader(open(args.csv)))
    per_class = {}
    out_rows = []
    for r in rows:
        t_model = predict(gpu, c, r, args.compute_efficiency)
        if t_model is None or not r["median_us"]:
            continue
        t_meas = float(r["median_us"]) * 1e-6
        err = t_model / t_meas - 1
        for cl in classes_of(r):
            per_class.setdefault(cl, []).append(err)
        out_rows.append({"kind": r["kind"], "m": r["m"], "n": r["n"], "k": r["k"],
                         "batch_heads": r["batch_heads"], "seq": r["seq"], "pass": r["pass"],
                         "tag": r["tag"], "measured_us": r["median_us"],
                         "model_us": f"{t_model * 1e6:.3f}", "error_pct": f"{100 * err:.1f}"})

    print()
    print("| op class | rows | median error | mean error | median abs error | mean abs error "
          "| min .. max |")
    print("|---|---|---|---|---|---|---|")
    order = ["gemm bf16, all", "gemm bf16, shipped", "gemm bf16, tokens", "gemm bf16, squares",
             "gemm bf16, kernel <", "gemm bf16, kernel >=", "attention flash fwd_bwd",
             "attention flash fwd,", "attention cudnn fwd_bwd", "attention cudnn fwd,"]
    order += list(MEM_KINDS)

    def rank(cl):
        return (min((i for i, p in enumerate(order) if cl.startswith(p)), default=len(order)), cl)
    for cl in sorted(per_class, key=rank):
        errs = per_class[cl]
        n, med, mean, amed, amean, lo, hi = stats(errs)
        print(f"| {cl} | {n} | {100 * med:+.1f} % | {100 * mean:+.1f} % | {100 * amed:.1f} % | "
              f"{100 * amean:.1f} % | {100 * lo:+.0f} .. {100 * hi:+.0f} % |")

    launch = {r["pass"]: float(r["median_us"]) for r in rows if r["kind"] == "launch"}
    if launch:
        print(f"\nt_launch in the model: {c['launch_s'] * 1e6:g} us per kernel; measured: "
              + ", ".join(f"{k} {v:.2f} us" for k, v in launch.items()))
    print("\nerror = t_model / t_measured - 1 (negative: the model is faster than the GPU)")

    if args.rows:
        with open(args.rows, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(out_rows[0]))
            w.writeheader()
            w.writerows(out_rows)
        print(f"wrote {len(out_rows)} rows to {args.rows}", file=sys.stderr)


if __name__ == "__main__":
    main()
