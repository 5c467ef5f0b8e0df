#!/usr/bin/env python3
"""Per-op throughput on one GPU through PyTorch, to validate scalescope's cost model.

Measures, with CUDA events and the median of >= 20 timed repetitions after warm-ups:

  gemm      bf16 torch.mm(A[m,k], B[k,n]) over the shapes in op_shapes.json (squares, the shapes
            the shipped experiments' graphs hold, a tokens x hidden x TP sweep);
  gemm_fp8  torch._scaled_mm, e4m3 operands, per-tensor scales, bf16 output (skipped loudly when
            it does not run);
  attention F.scaled_dot_product_attention, flash and cuDNN backends, bf16, causal, forward and
            forward+backward; FLOPs by the FlashAttention convention (fwd 4*b*s^2*h*d, halved when
            causal; bwd 2.5 x fwd, so fwd+bwd 3.5 x fwd);
  memory    copy_, add, RMSNorm (fused F.rms_norm, the eager expression, torch.compile'd) and
            SwiGLU (eager, compiled) over 4 KiB .. 4 GiB; GB/s = ideal bytes (each input read
            once, each output written once) / time;
  launch    tiny-kernel time: eager back-to-back issue, CUDA-graph replay, launch+sync round trip,
            and one kernel timed alone.

Timing of every row (except `launch`): before each repetition a 256 MiB buffer is zeroed (flushes
the 60 MB L2, so operands come from HBM) and the GPU is made to spin (torch.cuda._sleep) so that
the CPU queues the op before the GPU reaches it; CUDA events are recorded right around the op, so
neither the flush nor launch latency is in the time. The CSV's `note` column says so per row.

Usage:
  measure_ops.py --out DIR                 # on the GPU: writes DIR/h200_ops.csv, DIR/env.txt
  measure_ops.py --dry-run                 # anywhere, no torch: lists the plan and time estimate
  measure_ops.py --mock --out /tmp/x       # anywhere, no GPU: runs every section against a stub
                                           # torch with modelled times (checks the bookkeeping)
  measure_ops.py --make-shapes G1.h5 ...   # here, with h5py: rebuild op_shapes.json from graphs
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SHAPES = os.path.join(HERE, "op_shapes.json")

COLUMNS = ["kind", "dtype", "m", "n", "k", "batch_heads", "seq", "head_dim", "causal", "pass",
           "bytes", "flops", "median_us", "p10_us", "p90_us", "reps", "tflops", "gbps", "tag",
           "note"]

TIMING_NOTE = "events around op; 256MiB L2 flush + GPU spin before each rep"
FLUSH_BYTES = 256 << 20
SPIN_CYCLES = 200_000            # ~100 us at 1.98 GHz: lets the CPU queue the op ahead of the GPU
SPIN_CYCLES_BWD = 1_000_000      # ~500 us: autograd's CPU work for fwd+bwd is longer

# Assumed rates for the time estimate only (not results).
EST_BF16_TFLOPS = 600.0
EST_FP8_TFLOPS = 1100.0
EST_ATTN_TFLOPS = 350.0
EST_HBM_GBPS = 3500.0

# Section caps in seconds (wall, on the device); the global budget stops everything.
SECTION_CAP_S = {"squares": 25, "launch": 15, "memory": 35, "attention": 45, "gemm_experiment": 35,
                 "gemm_sweep": 45, "fp8": 15, "compiled": 40}

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def log(msg):
    print(msg, flush=True)


# ------------------------------------------------------------------------------------ counting

def gemm_flops(m, n, k):
    return 2.0 * m * n * k


def gemm_bytes(m, n, k, in_elt=2, out_elt=2):
    return in_elt * (m * k + k * n) + out_elt * m * n


def attn_fwd_flops(batch, heads_q, seq, head_dim, causal):
    f = 4.0 * batch * seq * seq * heads_q * head_dim
    return f / 2 if causal else f


def attn_io_bytes(batch, heads_q, heads_kv, seq, head_dim):
    # Q, O (heads_q) and K, V (heads_kv), bf16: the forward's compulsory traffic.
    return 2.0 * batch * seq * head_dim * (2 * heads_q + 2 * heads_kv)


def mem_layout(op, size_bytes):
    """(rows, cols, ideal bytes) for a memory-bound op whose main input is size_bytes of bf16."""
    numel = size_bytes // 2
    if op in ("copy",):
        return 1, numel, 2 * size_bytes
    if op == "add":
        return 1, numel, 3 * size_bytes
    if op.startswith("rmsnorm"):
        cols = min(8192, numel)
        return numel // cols, cols, 2 * size_bytes
    if op.startswith("swiglu"):
        # input [rows, 2*cols] (FC1 output, gate|up), output [rows, cols]
        cols = min(8192, numel // 2)
        return numel // (2 * cols), cols, size_bytes + size_bytes // 2
    raise ValueError(op)


def reps_for(est_s, lo=20, hi=50, target_s=0.25):
    return int(max(lo, min(hi, target_s / max(est_s, 1e-7))))


def pct(sorted_vals, q):
    i = q * (len(sorted_vals) - 1)
    lo = int(math.floor(i))
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (i - lo)


# ------------------------------------------------------------------------------------ shape file

def load_shapes(path):
    with open(path) as f:
        spec = json.load(f)
    errors = []
    seen = set()
    for g in spec["gemm"]:
        m, n, k = g["m"], g["n"], g["k"]
        if not all(isinstance(x, int) and x > 0 for x in (m, n, k)):
            errors.append(f"gemm {g}: dims must be positive ints")
        if (m, n, k) in seen:
            errors.append(f"gemm {m}x{n}x{k} listed twice")
        seen.add((m, n, k))
        if not g.get("tags"):
            errors.append(f"gemm {m}x{n}x{k}: no tags")
    for g in spec["gemm_fp8"]:
        if any(x % 16 for x in (g["m"], g["n"], g["k"])):
            errors.append(f"fp8 {g}: _scaled_mm wants multiples of 16")
    for a in spec["attention"]:
        if a["heads_q"] % a["heads_kv"]:
            errors.append(f"attention {a}: heads_q not a multiple of heads_kv")
        if a["head_dim"] != 128:
            errors.append(f"attention {a}: head_dim {a['head_dim']} (plan is hd128)")
    for s in spec["memory"]["sizes"]:
        if s % 4096:
            errors.append(f"memory size {s} not a multiple of 4 KiB")
    if errors:
        raise SystemExit("op_shapes.json is invalid:\n  " + "\n  ".join(errors))
    return spec


def gemm_sets(spec):
    """Split the GEMM list into sections by tag kind, keeping the file's order."""
    squares, exp, sweep = [], [], []
    for g in spec["gemm"]:
        tags = g["tags"]
        if any(t.startswith("square") for t in tags):
            squares.append(g)
        elif any(t.startswith("exp:") for t in tags):
            exp.append(g)
        else:
            sweep.append(g)
    return squares, exp, sweep


# ------------------------------------------------------------------------------------ plan

def plan(spec):
    """[(section, [item, ...])] with each item a dict holding 'est_s' (one timed repetition)."""
    squares, exp, sweep = gemm_sets(spec)

    def gemm_items(lst):
        out = []
        for g in lst:
            est = gemm_flops(g["m"], g["n"], g["k"]) / (EST_BF16_TFLOPS * 1e12) + 5e-6
            out.append(dict(g, est_s=est))
        return out

    mem = []
    for op in spec["memory"]["ops"]:
        for s in spec["memory"]["sizes"]:
            rows, cols, nbytes = mem_layout(op, s)
            mem.append({"op": op, "size": s, "rows": rows, "cols": cols, "bytes": nbytes,
                        "est_s": nbytes / (EST_HBM_GBPS * 1e9) * (3 if "eager" in op else 1) + 3e-6})
    compiled = []
    for op in spec["memory"].get("compiled_ops", []):
        for s in spec["memory"]["sizes"]:
            rows, cols, nbytes = mem_layout(op, s)
            compiled.append({"op": op, "size": s, "rows": rows, "cols": cols, "bytes": nbytes,
                             "est_s": nbytes / (EST_HBM_GBPS * 1e9) + 3e-6})
    attn = []
    for a in spec["attention"]:
        for backend in a.get("backends", ["flash", "cudnn"]):
            for pss in ("fwd", "fwd_bwd"):
                f = attn_fwd_flops(a["batch"], a["heads_q"], a["seq"], a["head_dim"], a["causal"])
                f *= 3.5 if pss == "fwd_bwd" else 1.0
                attn.append(dict(a, backend=backend, pass_=pss, flops=f,
                                 est_s=f / (EST_ATTN_TFLOPS * 1e12) + 2e-5))
    fp8 = []
    for g in spec["gemm_fp8"]:
        for fast in (False, True):
            est = gemm_flops(g["m"], g["n"], g["k"]) / (EST_FP8_TFLOPS * 1e12) + 5e-6
            fp8.append(dict(g, fast_accum=fast, est_s=est))
    launch = [{"what": w, "est_s": 0.5} for w in
              ("eager_b2b", "graph_b2b", "sync_roundtrip", "isolated")]
    return [("squares", gemm_items(squares)), ("launch", launch), ("memory", mem),
            ("attention", attn), ("gemm_experiment", gemm_items(exp)),
            ("gemm_sweep", gemm_items(sweep)), ("fp8", fp8), ("compiled", compiled)]


def item_wall_estimate(item):
    """Wall seconds of one item: warm-ups + reps, each with flush + spin (~0.2 ms) + overheads."""
    if "what" in item:   # launch items: fixed loops, ~1 s each
        return 1.0
    est = item["est_s"]
    reps = reps_for(est)
    warm = 2 if est > 0.01 else 5
    return (reps + warm) * (est + 2.5e-4) + 0.05


def dry_run(spec, path):
    total = 0.0
    log(f"shape file {path}: OK")
    squares, exp, sweep = gemm_sets(spec)
    log(f"distinct bf16 GEMM shapes: {len(spec['gemm'])} (squares {len(squares)}, experiments "
        f"{len(exp)}, sweep {len(sweep)}); fp8 {len(spec['gemm_fp8'])}; attention configs "
        f"{len(spec['attention'])}; memory ops {spec['memory']['ops']} + compiled "
        f"{spec['memory'].get('compiled_ops', [])} x {len(spec['memory']['sizes'])} sizes")
    for name, items in plan(spec):
        w = sum(item_wall_estimate(i) for i in items)
        if name == "compiled" and items:
            w += 30.0  # inductor + triton compile of two dynamic-shape kernels (guess)
        total += w
        log(f"  {name:16s} {len(items):4d} items  est {w:6.1f} s  (cap {SECTION_CAP_S[name]} s)")
        shown = items if len(items) <= 6 else items[:3] + [{"...": len(items) - 6}] + items[-3:]
        for it in shown:
            log("      " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                     for k, v in it.items() if k != "tags"))
    big = max(spec["gemm"], key=lambda g: gemm_bytes(g["m"], g["n"], g["k"]))
    log(f"largest GEMM footprint: {big['m']}x{big['n']}x{big['k']} "
        f"{gemm_bytes(big['m'], big['n'], big['k']) / GIB:.1f} GiB")
    log(f"estimated total {total:.0f} s + ~20 s start-up (import, CUDA init, warm-up)")
    return total


# ------------------------------------------------------------------------------------ make shapes

OP_NAMES = {2: "qkv", 5: "proj", 8: "fc1", 10: "fc2", 12: "logits"}
PHASES = {0: "fwd", 1: "bwd", 2: "recompute"}


def _cfg_int(text, key):
    m = re.search(rf"^\s*{key}:\s*(\d+)", text, re.M)
    return int(m.group(1)) if m else None


def make_shapes(graphs, out_path):
    import h5py
    import numpy as np

    gemm = {}      # (m, n, k) -> tags
    attention = []

    def add(m, n, k, tag):
        gemm.setdefault((int(m), int(n), int(k)), [])
        if tag not in gemm[(int(m), int(n), int(k))]:
            gemm[(int(m), int(n), int(k))].append(tag)

    # 1. squares
    for s in (1024, 2048, 4096, 6144, 8192, 12288, 16384):
        add(s, s, s, f"square{s}")
    add(2048, 2048, 13312, "square:mamf-h100-best")  # the MAMF best shape the model is anchored at

    # 2. the shipped experiments' graphs
    for path in graphs:
        exp = os.path.splitext(os.path.basename(path))[0]
        with h5py.File(path, "r") as f:
            cfg = f["meta"].attrs["config_text"]
            heads = _cfg_int(cfg, "num_attention_heads")
            groups = _cfg_int(cfg, "num_query_groups") or heads
            tp = _cfg_int(cfg, "tensor_model_parallel_size")
            seen_attn = set()
            for t in f["templates"]:
                T = f["templates"][t]
                kind = T["kind"][:]
                shape = T["shape"][:]
                name = T["name"][:]
                phase = T["phase"][:]
                for i in np.nonzero(kind == 0)[0]:
                    m, n, k = shape[i]
                    add(m, n, k, f"exp:{exp}:{OP_NAMES.get(int(name[i]), name[i])}:"
                                 f"{PHASES.get(int(phase[i]), phase[i])}")
                for i in np.nonzero(kind == 1)[0]:
                    bh, s, d = (int(x) for x in shape[i])
                    if (bh, s, d) in seen_attn:
                        continue
                    seen_attn.add((bh, s, d))
                    hq = heads // tp
                    hkv = max(1, groups // tp)
                    attention.append({"batch": bh // hq, "heads_q": hq, "heads_kv": hkv, "seq": s,
                                      "head_dim": d, "causal": True, "tag": f"exp:{exp}"})

    # 3. tokens x hidden x TP sweep: FC1 column-parallel (N split) and FC2 row-parallel (K split),
    #    Llama 3 8B / 70B / 405B hidden and FFN sizes, SwiGLU FC1 = 2 x ffn.
    for h, ffn in ((4096, 14336), (8192, 28672), (16384, 53248)):
        for tp in (1, 2, 4, 8):
            for m in (1024, 4096, 8192, 16384):
                add(m, 2 * ffn // tp, h, f"sweep:h{h}:tp{tp}:fc1")
                add(m, h, ffn // tp, f"sweep:h{h}:tp{tp}:fc2")

    # Order: squares, experiments, sweep (sections), each by FLOPs.
    def key(item):
        (m, n, k), tags = item
        sect = 0 if any(t.startswith("square") for t in tags) else \
            1 if any(t.startswith("exp:") for t in tags) else 2
        return (sect, m * n * k)
    gemm_list = [{"m": m, "n": n, "k": k, "tags": tags}
                 for (m, n, k), tags in sorted(gemm.items(), key=key)]

    # FlashAttention benchmark setup: 16k tokens, hidden 2048 = 16 heads x 128, causal.
    fa = [{"batch": 16384 // s, "heads_q": 16, "heads_kv": 16, "seq": s, "head_dim": 128,
           "causal": True, "tag": "fa-bench"} for s in (512, 1024, 2048, 4096, 8192, 16384)]
    gqa = [{"batch": 1, "heads_q": 64, "heads_kv": 8, "seq": s, "head_dim": 128, "causal": True,
            "tag": "gqa64/8"} for s in (4096, 8192)]

    fp8 = [{"m": s, "n": s, "k": s, "tag": f"square{s}"} for s in (4096, 8192, 16384)]
    fp8 += [{"m": m, "n": n, "k": k, "tag": "exp:llama3-405b-8k"}
            for (m, n, k) in ((8192, 2304, 16384), (8192, 16384, 2048), (8192, 13312, 16384),
                              (8192, 16384, 6656))]
    fp8 += [{"m": m, "n": n, "k": k, "tag": "exp:llama3-70b-1k"}
            for (m, n, k) in ((8192, 1280, 8192), (8192, 7168, 8192), (8192, 8192, 3584))]

    sizes = [4 * KIB, 64 * KIB] + [MIB << i for i in range(13)]  # 4 KiB, 64 KiB, 1 MiB .. 4 GiB
    spec = {
        "comment": "Generated by measure_ops.py --make-shapes from the graphs of "
                   + ", ".join(os.path.basename(g) for g in graphs)
                   + ". GEMM shape = m, n, k (A[m,k] @ B[k,n]); tags say where a shape comes "
                     "from (exp:EXPERIMENT:GEMM:PHASE, square, sweep:hHIDDEN:tpTP:fc1|fc2).",
        "gemm": gemm_list,
        "gemm_fp8": fp8,
        "attention": fa + gqa + attention,
        "memory": {"sizes": sizes,
                   "ops": ["copy", "add", "rmsnorm_fused", "rmsnorm_eager", "swiglu_eager"],
                   "compiled_ops": ["rmsnorm_compiled", "swiglu_compiled"]},
    }
    with open(out_path, "w") as f:
        json.dump(spec, f, indent=1)
        f.write("\n")
    log(f"wrote {out_path}: {len(gemm_list)} GEMM shapes, {len(spec['attention'])} attention "
        f"configs, {len(fp8)} fp8 shapes")


# ------------------------------------------------------------------------------------ measuring

def make_fns(torch):
    """The eager RMSNorm and SwiGLU expressions (also what torch.compile is given)."""
    import torch.nn.functional as F

    def rmsnorm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def swiglu(x, cols):
        return F.silu(x[:, :cols]) * x[:, cols:]
    return {"rmsnorm": rmsnorm, "swiglu": swiglu}


class Runner:
    def __init__(self, torch, out_dir, budget_s, mock=False):
        self.torch = torch
        self.mock = mock
        self.t0 = time.time()
        self.budget_s = budget_s
        self.csv_path = os.path.join(out_dir, "h200_ops.csv")
        self.csv = open(self.csv_path, "w")
        self.csv.write(",".join(COLUMNS) + "\n")
        self.csv.flush()
        self.rows = []
        self.skipped = []
        self.fns = make_fns(torch)
        self.compiled = {}
        if not mock:
            self.flush_buf = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
            self.has_sleep = hasattr(torch.cuda, "_sleep")
            if not self.has_sleep:
                log("WARNING: torch.cuda._sleep missing: no GPU spin before reps")

    def left(self):
        return self.budget_s - (time.time() - self.t0)

    def row(self, **kw):
        if "pass_" in kw:
            kw["pass"] = kw.pop("pass_")
        r = {c: kw.get(c, "") for c in COLUMNS}
        med = kw.get("median_us")
        if med:
            if kw.get("flops"):
                r["tflops"] = f"{kw['flops'] / (med * 1e-6) / 1e12:.2f}"
            if kw.get("bytes"):
                r["gbps"] = f"{kw['bytes'] / (med * 1e-6) / 1e9:.1f}"
        for c in ("median_us", "p10_us", "p90_us"):
            if isinstance(r[c], float):
                r[c] = f"{r[c]:.3f}"
        for c in ("bytes", "flops"):
            if isinstance(r[c], float):
                r[c] = f"{r[c]:.0f}"
        r["note"] = str(r["note"]).replace(",", ";")
        r["tag"] = str(r["tag"]).replace(",", ";")
        self.rows.append(r)
        self.csv.write(",".join(str(r[c]) for c in COLUMNS) + "\n")
        self.csv.flush()
        return r

    def bench(self, fn, reps, warmup, spin=SPIN_CYCLES, est_s=None):
        """(median, p10, p90) in microseconds of fn, each rep after an L2 flush and a GPU spin."""
        if self.mock:
            for _ in range(warmup + reps):
                fn()
            t = (est_s or 1e-5) * 1e6
            return t, t * 0.98, t * 1.03
        torch = self.torch
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(reps)]
        for s, e in events:
            self.flush_buf.zero_()
            if self.has_sleep and spin:
                torch.cuda._sleep(spin)
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        ts = sorted(s.elapsed_time(e) * 1e3 for s, e in events)
        return pct(ts, 0.5), pct(ts, 0.1), pct(ts, 0.9)

    def section(self, name, items, body):
        t_start = time.time()
        cap = SECTION_CAP_S[name]
        n_done = 0
        log(f"=== {name}: {len(items)} items (cap {cap} s, {self.left():.0f} s left in budget)")
        for i, it in enumerate(items):
            if time.time() - t_start > cap or self.left() <= 0:
                n_left = len(items) - i
                why = "section cap" if self.left() > 0 else "global budget"
                log(f"!!! {name}: SKIPPING the remaining {n_left} items ({why} reached)")
                self.skipped.append(f"{name}: {n_left} items ({why})")
                break
            try:
                body(it)
                n_done += 1
            except Exception as ex:  # one failed item must not end the run
                msg = f"{type(ex).__name__}: {str(ex).splitlines()[0] if str(ex) else ''}"[:300]
                log(f"!!! {name}: item {dict((k, v) for k, v in it.items() if k != 'tags')} "
                    f"FAILED: {msg}")
                self.skipped.append(f"{name}: item failed: {msg}")
                if not self.mock:
                    try:
                        self.torch.cuda.synchronize()
                    except Exception as ex2:
                        log(f"!!! synchronize after the failure raised too: {ex2}")
        if not self.mock:
            self.torch.cuda.empty_cache()
        log(f"=== {name}: {n_done}/{len(items)} done in {time.time() - t_start:.1f} s")

    # ---- GEMM
    def gemm(self, g):
        torch = self.torch
        m, n, k = g["m"], g["n"], g["k"]
        est = g["est_s"]
        dev = "cuda"
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        reps = reps_for(est)
        med, p10, p90 = self.bench(lambda: torch.mm(a, b, out=c), reps, 2 if est > 0.01 else 5,
                                   est_s=est)
        r = self.row(kind="gemm", dtype="bf16", m=m, n=n, k=k, pass_="fwd",
                     bytes=float(gemm_bytes(m, n, k)), flops=gemm_flops(m, n, k), median_us=med,
                     p10_us=p10, p90_us=p90, reps=reps, tag="|".join(g["tags"]),
                     note="torch.mm(A[m;k] row-major; B[k;n] row-major; out=C) randn; "
                          + TIMING_NOTE)
        log(f"gemm {m:6d}x{n:6d}x{k:6d}  {med:10.1f} us  {r['tflops']:>7s} TFLOP/s  "
            f"[{g['tags'][0]}]")

    # ---- fp8 GEMM
    def gemm_fp8(self, g):
        torch = self.torch
        m, n, k = g["m"], g["n"], g["k"]
        est = g["est_s"]
        fast = g["fast_accum"]
        f8 = torch.float8_e4m3fn
        a = (torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 0.5).to(f8)
        bt = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.5).to(f8)
        b = bt.t()  # column-major [k, n], as _scaled_mm requires
        sa = torch.tensor(1.0, device="cuda", dtype=torch.float32)
        sb = torch.tensor(1.0, device="cuda", dtype=torch.float32)

        def fn():
            return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                    use_fast_accum=fast)
        if not self.mock:
            out = fn()
            if not bool(torch.isfinite(out).all()):
                raise RuntimeError("fp8 output not finite")
            del out
        reps = reps_for(est)
        med, p10, p90 = self.bench(fn, reps, 2 if est > 0.01 else 5, est_s=est)
        r = self.row(kind="gemm_fp8", dtype="e4m3", m=m, n=n, k=k, pass_="fwd",
                     bytes=float(gemm_bytes(m, n, k, in_elt=1, out_elt=2)),
                     flops=gemm_flops(m, n, k), median_us=med, p10_us=p10, p90_us=p90, reps=reps,
                     tag=g["tag"],
                     note=f"torch._scaled_mm per-tensor scales; bf16 out; use_fast_accum={fast}; "
                          + TIMING_NOTE)
        log(f"fp8  {m:6d}x{n:6d}x{k:6d} fast_accum={fast!s:5s} {med:10.1f} us "
            f"{r['tflops']:>7s} TFLOP/s")

    # ---- attention
    def attention(self, a):
        torch = self.torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        b, hq, hkv, s, d = a["batch"], a["heads_q"], a["heads_kv"], a["seq"], a["head_dim"]
        causal = a["causal"]
        backend = {"flash": SDPBackend.FLASH_ATTENTION,
                   "cudnn": SDPBackend.CUDNN_ATTENTION}[a["backend"]]
        pss = a["pass_"]
        q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16)
        note = f"F.scaled_dot_product_attention {a['backend']} backend; (b;h;s;d) contiguous"
        kw = {}
        if hkv != hq:
            kw["enable_gqa"] = True
            note += f"; GQA {hq}q/{hkv}kv enable_gqa=True"
        k.requires_grad_(True)
        v.requires_grad_(True)
        dout = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)

        with sdpa_kernel([backend]):
            def fwd():
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)
            try:
                if not self.mock:
                    fwd()
            except RuntimeError as ex:
                if not kw:
                    raise
                # GQA not supported by this backend: time the same FLOPs with K, V expanded.
                log(f"    {a['backend']}: enable_gqa failed ({str(ex).splitlines()[0][:120]}); "
                    f"retrying with K/V expanded to {hq} heads")
                k = k.detach().repeat_interleave(hq // hkv, dim=1).requires_grad_(True)
                v = v.detach().repeat_interleave(hq // hkv, dim=1).requires_grad_(True)
                kw = {}
                note += " FAILED -> K/V expanded to heads_q (repeat_interleave; untimed)"

                def fwd():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                fwd()

            if pss == "fwd":
                fn, spin = fwd, SPIN_CYCLES
            else:
                def fn():
                    return torch.autograd.grad(fwd(), (q, k, v), dout)
                spin = SPIN_CYCLES_BWD
            est = a["est_s"]
            reps = reps_for(est)
            med, p10, p90 = self.bench(fn, reps, 3, spin=spin, est_s=est)
        flops = attn_fwd_flops(b, hq, s, d, causal) * (3.5 if pss == "fwd_bwd" else 1.0)
        r = self.row(kind="attention", dtype="bf16", batch_heads=b * hq, seq=s, head_dim=d,
                     causal=int(causal), pass_=pss,
                     bytes=attn_io_bytes(b, hq, hkv, s, d), flops=flops, median_us=med,
                     p10_us=p10, p90_us=p90, reps=reps, tag=f"{a['tag']}:{a['backend']}",
                     note=note + "; FLOPs FA convention (fwd 4bs^2hd/2 causal; bwd 2.5x fwd); "
                     "fwd_bwd = fwd + autograd.grad; " + TIMING_NOTE)
        log(f"attn {a['backend']:5s} {pss:7s} b={b:3d} hq={hq:3d} hkv={hkv:3d} s={s:6d}  "
            f"{med:10.1f} us  {r['tflops']:>7s} TFLOP/s  [{a['tag']}]")

    # ---- memory-bound
    def mem_fn(self, op, rows, cols, size):
        torch = self.torch
        import torch.nn.functional as F
        numel = size // 2
        eps = 1e-5
        if op == "copy":
            src = torch.randn(numel, device="cuda", dtype=torch.bfloat16)
            dst = torch.empty_like(src)
            return lambda: dst.copy_(src)
        if op == "add":
            x = torch.randn(numel, device="cuda", dtype=torch.bfloat16)
            y = torch.randn(numel, device="cuda", dtype=torch.bfloat16)
            z = torch.empty_like(x)
            return lambda: torch.add(x, y, out=z)
        if op.startswith("rmsnorm"):
            x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
            if op == "rmsnorm_fused":
                return lambda: F.rms_norm(x, (cols,), w, eps)
            f = self.fns["rmsnorm"] if op == "rmsnorm_eager" else self.compiled["rmsnorm"]
            return lambda: f(x, w)
        if op.startswith("swiglu"):
            x = torch.randn(rows, 2 * cols, device="cuda", dtype=torch.bfloat16)
            f = self.fns["swiglu"] if op == "swiglu_eager" else self.compiled["swiglu"]
            return lambda: f(x, cols)
        raise ValueError(op)

    def count_kernels(self, fn):
        """CUDA kernels one call of fn launches (torch.profiler), or '' if that fails."""
        if self.mock:
            return ""
        torch = self.torch
        try:
            from torch.profiler import ProfilerActivity, profile
            fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            names = [e.name for e in prof.events()
                     if str(getattr(e, "device_type", "")).endswith("CUDA")]
            return f"{len(names)} kernels: " + "+".join(n[:40].replace(",", ";")
                                                       for n in names)[:300]
        except Exception as ex:
            return f"kernel count failed: {type(ex).__name__}"

    def memory(self, it):
        op, size, rows, cols, nbytes = it["op"], it["size"], it["rows"], it["cols"], it["bytes"]
        fn = self.mem_fn(op, rows, cols, size)
        est = it["est_s"]
        reps = reps_for(est, hi=100)
        med, p10, p90 = self.bench(fn, reps, 3, est_s=est)
        note = ""
        if size == MIB:  # count kernels once per op
            note = self.count_kernels(fn) + "; "
        r = self.row(kind=op, dtype="bf16", m=rows, n=cols, pass_="fwd", bytes=float(nbytes),
                     median_us=med, p10_us=p10, p90_us=p90, reps=reps, tag=f"size{size}",
                     note=note + "bytes = ideal (inputs read once + outputs written once); "
                     + TIMING_NOTE)
        log(f"mem  {op:17s} {size / MIB:9.3f} MiB  {med:10.2f} us  {r['gbps']:>8s} GB/s")

    # ---- launch overhead
    def launch(self, it):
        torch = self.torch
        what = it["what"]
        if self.mock:
            self.row(kind="launch", dtype="bf16", n=1024, pass_=what, median_us=2.0, reps=1)
            return
        x = torch.zeros(1024, device="cuda", dtype=torch.bfloat16)
        n_k = 2000
        if what == "eager_b2b":
            vals = []
            for _ in range(7):
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                c0 = time.perf_counter()
                s.record()
                for _ in range(n_k):
                    x.add_(1.0)
                e.record()
                c1 = time.perf_counter()
                torch.cuda.synchronize()
                vals.append((s.elapsed_time(e) * 1e3 / n_k, (c1 - c0) * 1e6 / n_k))
            gpu = sorted(v[0] for v in vals)
            cpu = sorted(v[1] for v in vals)
            self.row(kind="launch", dtype="bf16", n=1024, pass_=what, median_us=pct(gpu, .5),
                     p10_us=pct(gpu, .1), p90_us=pct(gpu, .9), reps=len(vals),
                     note=f"{n_k} eager x.add_(1) back to back; events around the loop; per "
                     f"kernel; CPU issue time per launch median {pct(cpu, .5):.2f} us")
            log(f"launch eager back-to-back: {pct(gpu, .5):.2f} us/kernel on the GPU clock, "
                f"CPU issue {pct(cpu, .5):.2f} us/launch")
        elif what == "graph_b2b":
            n_g = 500
            st = torch.cuda.Stream()
            st.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(st):
                for _ in range(3):
                    x.add_(1.0)
            torch.cuda.current_stream().wait_stream(st)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(n_g):
                    x.add_(1.0)
            g.replay()
            torch.cuda.synchronize()
            vals = []
            for _ in range(15):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                g.replay()
                e.record()
                torch.cuda.synchronize()
                vals.append(s.elapsed_time(e) * 1e3 / n_g)
            vals.sort()
            self.row(kind="launch", dtype="bf16", n=1024, pass_=what, median_us=pct(vals, .5),
                     p10_us=pct(vals, .1), p90_us=pct(vals, .9), reps=len(vals),
                     note=f"CUDA graph of {n_g} x.add_(1); replay timed with events; per kernel")
            log(f"launch CUDA-graph back-to-back: {pct(vals, .5):.2f} us/kernel")
        elif what == "sync_roundtrip":
            vals = []
            for _ in range(300):
                c0 = time.perf_counter()
                x.add_(1.0)
                torch.cuda.synchronize()
                vals.append((time.perf_counter() - c0) * 1e6)
            vals.sort()
            self.row(kind="launch", dtype="bf16", n=1024, pass_=what, median_us=pct(vals, .5),
                     p10_us=pct(vals, .1), p90_us=pct(vals, .9), reps=len(vals),
                     note="host wall clock of x.add_(1) + torch.cuda.synchronize()")
            log(f"launch + sync round trip: {pct(vals, .5):.2f} us")
        elif what == "isolated":
            med, p10, p90 = self.bench(lambda: x.add_(1.0), 100, 5)
            self.row(kind="launch", dtype="bf16", n=1024, pass_=what, median_us=med, p10_us=p10,
                     p90_us=p90, reps=100,
                     note="one x.add_(1) between events, queued behind a GPU spin: kernel + "
                          "event granularity; " + TIMING_NOTE)
            log(f"launch isolated tiny kernel (events): {med:.2f} us")


def write_env(torch, out_dir, when):
    lines = [f"# {when} {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"]
    if when == "start":
        lines += [f"python {sys.version.split()[0]}", f"torch {torch.__version__}",
                  f"torch.version.cuda {torch.version.cuda}",
                  f"cudnn {torch.backends.cudnn.version()}",
                  f"device {torch.cuda.get_device_name(0)}"]
        p = torch.cuda.get_device_properties(0)
        lines += [f"props {p}",
                  f"allow_bf16_reduced_precision_reduction "
                  f"{torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}"]
        for attr in ("L2_cache_size", "multi_processor_count", "total_memory"):
            lines.append(f"{attr} {getattr(p, attr, '?')}")
    for cmd in (["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,"
                 "clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu,"
                 "utilization.gpu,memory.used,memory.total", "--format=csv"],
                ["nvidia-smi", "-q"] if when == "start" else
                # throttle-reason counters (SW power capping, thermal) since the start; added
                # after the 2026-11-30 run, whose env.txt lacks them
                ["nvidia-smi", "-q", "-d", "PERFORMANCE"]):
        if cmd is None:
            continue
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
            if cmd[1:] == ["-q"]:
                out = "\n".join(out.splitlines()[:120])
            lines += [f"$ {' '.join(cmd)}", out]
        except Exception as ex:
            lines.append(f"$ {' '.join(cmd)} failed: {ex}")
    with open(os.path.join(out_dir, "env.txt"), "a") as f:
        f.write("\n".join(lines) + "\n")
    log("\n".join(lines[:8]))


def summary(rows):
    def find(pred):
        return [r for r in rows if pred(r)]
    log("\n========== summary ==========")
    for r in find(lambda r: r["kind"] == "gemm" and r["m"] == r["n"] == r["k"]):
        log(f"bf16 GEMM {r['m']}^3: {r['tflops']} TFLOP/s ({r['median_us']} us)")
    g = [float(r["tflops"]) for r in find(lambda r: r["kind"] == "gemm" and r["tflops"])]
    if g:
        log(f"bf16 GEMM over {len(g)} shapes: {min(g):.0f} .. {max(g):.0f} TFLOP/s")
    for r in find(lambda r: r["kind"] == "attention" and str(r["tag"]).startswith("fa-bench")):
        log(f"attn {r['tag']:18s} {r['pass']:7s} s={r['seq']:>5}: {r['tflops']} TFLOP/s")
    for r in find(lambda r: r["kind"] in ("copy", "add") and str(r["tag"]) in
                  (f"size{GIB}", f"size{4 * GIB}", f"size{MIB}", f"size{4 * KIB}")):
        log(f"{r['kind']:5s} {r['tag']:14s}: {r['gbps']} GB/s, {r['median_us']} us")
    for r in find(lambda r: r["kind"] == "launch"):
        log(f"launch {r['pass']:15s}: {r['median_us']} us")
    for r in find(lambda r: r["kind"] == "gemm_fp8" and r["m"] == r["n"] == r["k"]):
        log(f"fp8 {r['m']}^3 {r['note'].split(';')[2].strip()}: {r['tflops']} TFLOP/s")


def run(args):
    os.makedirs(args.out, exist_ok=True)
    spec = load_shapes(args.shapes)
    if args.mock:
        from unittest import mock
        torch = mock.MagicMock()
        sys.modules["torch"] = torch
        sys.modules["torch.nn"] = torch.nn
        sys.modules["torch.nn.functional"] = torch.nn.functional
        sys.modules["torch.nn.attention"] = torch.nn.attention
        sys.modules["torch.profiler"] = torch.profiler
    else:
        import torch
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device")
        write_env(torch, args.out, "start")
    r = Runner(torch, args.out, args.budget_s, mock=args.mock)
    sections = dict(plan(spec))

    if not args.mock:
        # Warm the clocks: ~1.5 s of 8192^3 GEMMs.
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        t0 = time.time()
        while time.time() - t0 < 1.5:
            for _ in range(20):
                torch.mm(a, b)
            torch.cuda.synchronize()
        del a, b
        log(f"warm-up done at {time.time() - r.t0:.1f} s")

    r.section("squares", sections["squares"], r.gemm)
    r.section("launch", sections["launch"], r.launch)
    r.section("memory", sections["memory"], r.memory)
    r.section("attention", sections["attention"], r.attention)
    r.section("gemm_experiment", sections["gemm_experiment"], r.gemm)
    r.section("gemm_sweep", sections["gemm_sweep"], r.gemm)
    if hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn"):
        r.section("fp8", sections["fp8"], r.gemm_fp8)
    else:
        log("!!! fp8: torch._scaled_mm or float8_e4m3fn missing: SKIPPED")
        r.skipped.append("fp8: _scaled_mm missing")
    # torch.compile'd RMSNorm and SwiGLU (one dynamic-shape compile each), last: lowest priority.
    if sections["compiled"] and r.left() > 30:
        try:
            t0 = time.time()
            r.compiled = {name: torch.compile(f, dynamic=True) for name, f in r.fns.items()}
            if not args.mock:
                xs = torch.randn(64, 8192, device="cuda", dtype=torch.bfloat16)
                r.compiled["rmsnorm"](xs, torch.ones(8192, device="cuda", dtype=torch.bfloat16))
                r.compiled["swiglu"](xs, 4096)
                torch.cuda.synchronize()
            log(f"torch.compile of rmsnorm and swiglu: {time.time() - t0:.1f} s")
            r.section("compiled", sections["compiled"], r.memory)
        except Exception as ex:
            log(f"!!! compiled: torch.compile failed: {type(ex).__name__}: "
                f"{str(ex).splitlines()[0][:200] if str(ex) else ''}")
            r.skipped.append("compiled: torch.compile failed")
    else:
        log("!!! compiled: SKIPPED (budget)")
        r.skipped.append("compiled: budget")
    r.csv.close()
    if not args.mock:
        write_env(torch, args.out, "end")
    summary(r.rows)
    log(f"\n{len(r.rows)} rows in {r.csv_path}; {time.time() - r.t0:.0f} s")
    if r.skipped:
        log("SKIPPED / FAILED:\n  " + "\n  ".join(r.skipped))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory (h200_ops.csv, env.txt)")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--budget-s", type=float, default=225.0,
                    help="wall seconds after start-up before remaining items are skipped")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--mock", action="store_true")
    ap.add_argument("--make-shapes", nargs="+", metavar="GRAPH_H5")
    args = ap.parse_args()
    if args.make_shapes:
        make_shapes(args.make_shapes, args.shapes)
        return
    if args.dry_run:
        dry_run(load_shapes(args.shapes), args.shapes)
        return
    if not args.out:
        ap.error("--out is required")
    run(args)


if __name__ == "__main__":
    main()
