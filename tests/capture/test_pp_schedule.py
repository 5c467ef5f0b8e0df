#!/usr/bin/env python3
"""torch.distributed.pipelining's schedules as PyTorch itself computes them (issue 39): the
action tables of its schedule classes (scripts/capture/pp_schedule.py: the classes constructed
with stand-in stages), replayed by `parallel.schedule: actions`. Checked: a compute-only table
lowered by scalescope runs exactly as PyTorch's own lowering (pipeline_order_with_comms) of it;
ScheduleLoopedBFS's table runs exactly as the built-in looped_bfs; Interleaved1F1B against
Megatron-Core's interleaved 1F1B at the same layout; the refusals.
Usage: test_pp_schedule.py REPO SCALESCOPE"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish, runner  # noqa: E402

repo, scalescope = os.path.abspath(sys.argv[1]), sys.argv[2]
tmp = tempfile.mkdtemp()
sh = runner(scalescope)
script = os.path.join(repo, "scripts/capture/pp_schedule.py")


def table(name, pp, v, m, fmt="compute_comms"):
    out = os.path.join(tmp, f"{name}-{pp}-{v}-{m}-{fmt}.csv")
    r = subprocess.run([sys.executable, script, name, "--pp", str(pp), "--stages-per-rank", str(v),
                        "--microbatches", str(m), "--format", fmt, "-o", out],
                       capture_output=True, text=True)
    return out if r.returncode == 0 else r.stderr.strip()


def experiment(pp, v, m, schedule, actions=None):
    """Llama 3 8B's shapes, 2 layers a virtual stage, sequence 2048, PP × VP on pp GPUs (DP 1),
    m micro-batches of 1."""
    path = os.path.join(tmp, f"x-{pp}-{v}-{m}-{schedule}-{os.path.basename(actions or '')}.yaml")
    extra = f", pipeline_actions: {actions}" if actions else ""
    with open(path, "w") as f:
        f.write(f"model: {{preset: llama3-8b, num_layers: {2 * pp * v}, seq_length: 2048}}\n"
                f"parallel: {{tp: 1, pp: {pp}, dp: 1, virtual_pipeline_model_parallel_size: {v}, "
                f"schedule: {schedule}{extra}}}\n"
                f"training: {{micro_batch_size: 1, global_batch_size: {m}, precision: bf16}}\n"
                f"cluster: {{preset: dgx-h100, num_gpus: {pp}}}\n")
    return path


def run(cfg, name):
    out = os.path.join(tmp, name)
    r = sh("run", cfg, "-o", out, "--quiet")
    if r.returncode != 0:
        return None, r.stderr.strip()
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f), ""


for name, pp, v, m in (("Interleaved1F1B", 4, 2, 8), ("Interleaved1F1B", 4, 2, 12),
                       ("Interleaved1F1B", 2, 4, 4), ("LoopedBFS", 4, 2, 8),
                       ("LoopedBFS", 8, 2, 16)):
    comms, only = table(name, pp, v, m), table(name, pp, v, m, "compute_only")
    a, ea = run(experiment(pp, v, m, "actions", comms), "a")
    b, eb = run(experiment(pp, v, m, "actions", only), "b")
    label = f"{name} PP {pp} × {v} stages a rank, {m} micro-batches"
    check(a is not None and b is not None and
          a["iteration_time_s"] == b["iteration_time_s"] and
          "torch.distributed.pipelining" in a.get("pipeline_schedule", ""),
          f"{label}: PyTorch's pipeline_order_with_comms and scalescope's lowering of its "
          f"pipeline_order run alike ({a and a['iteration_time_s']} s, "
          f"{b and b['iteration_time_s']} s; {ea or eb})")
    builtin, eb = run(experiment(pp, v, m, "looped_bfs" if name == "LoopedBFS" else "1f1b"), "c")
    if a is None or builtin is None:
        check(False, f"{label}: runs ({ea or eb})")
    elif name == "LoopedBFS":
        check(a["iteration_time_s"] == builtin["iteration_time_s"],
              f"{label}: PyTorch's table runs as the built-in looped_bfs "
              f"({a['iteration_time_s']} s, {builtin['iteration_time_s']} s)")
    else:
        ratio = a["iteration_time_s"] / builtin["iteration_time_s"]
        check(abs(ratio - 1) <= 0.03,
              f"{label}: PyTorch's Interleaved1F1B {a['iteration_time_s']:.6f} s against "
              f"Megatron-Core's interleaved 1F1B {builtin['iteration_time_s']:.6f} s "
              f"({ratio:.4f}x)")

# A table made for another batch, and the schedules that are not modelled: one line each.
t8 = table("Interleaved1F1B", 4, 2, 8)
r = sh("run", experiment(4, 2, 16, "actions", t8), "-o", os.path.join(tmp, "x"))
check(r.returncode != 0 and r.stderr.count("\n") == 1 and "never runs 0F8" in r.stderr,
      f"a table of 8 micro-batches on a run of 16 refused ({r.stderr.strip()!r})")
# Zero bubble with the loop placement (InterleavedZeroBubble: split backwards, I then W): the
# same lowering check; the same compute as Interleaved1F1B on every rank, in less time (the
# weight gradients fill the bubble: Qi et al. 2024, "Zero Bubble Pipeline Parallelism").
for pp, v, m in ((4, 2, 8), (2, 2, 4)):
    comms, only = table("InterleavedZeroBubble", pp, v, m), table("InterleavedZeroBubble", pp, v, m,
                                                                   "compute_only")
    a, ea = run(experiment(pp, v, m, "actions", comms), "z")
    b, eb = run(experiment(pp, v, m, "actions", only), "zo")
    i1, ei = run(experiment(pp, v, m, "actions", table("Interleaved1F1B", pp, v, m)), "i")
    ok = a is not None and b is not None and i1 is not None
    check(ok and a["iteration_time_s"] == b["iteration_time_s"] and
          "weight gradients at their W actions" in a.get("pipeline_schedule", ""),
          f"InterleavedZeroBubble PP {pp} × {v}, {m} micro-batches: PyTorch's lowering and "
          f"scalescope's run alike ({ea or eb or ei})")
    same = ok and (a["time_breakdown_rank"] != i1["time_breakdown_rank"] or
                   abs(a["time_breakdown_s"]["compute"] / i1["time_breakdown_s"]["compute"] - 1)
                   < 1e-9)
    check(ok and a["iteration_time_s"] < i1["iteration_time_s"] and same,
          f"InterleavedZeroBubble {a and a['iteration_time_s']:.6f} s against Interleaved1F1B "
          f"{i1 and i1['iteration_time_s']:.6f} s, the same compute")
# The same with a captured model (inputs/pytorch/llama.py at h 1024, 8 layers): its lowered
# backward's weight-gradient GEMMs move to the W actions too.
args = os.path.join(tmp, "small.yaml")
with open(args, "w") as f:
    f.write("{dim: 1024, n_layers: 8, n_heads: 16, n_kv_heads: 4, vocab_size: 32000, "
            "ffn_dim: 3584}\n")
cap = os.path.join(tmp, "small.h5")
r = sh("capture", os.path.join(repo, "inputs/pytorch/llama.py:Transformer"), "--args", args,
       "--seq", "2048", "-o", cap)
got = {}
for name in ("InterleavedZeroBubble", "Interleaved1F1B"):
    path = os.path.join(tmp, f"cap-{name}.yaml")
    with open(path, "w") as f:
        f.write(f"model: {{source: {cap}}}\n"
                f"parallel: {{tp: 1, pp: 4, dp: 1, virtual_pipeline_model_parallel_size: 2, "
                f"schedule: actions, pipeline_actions: {table(name, 4, 2, 8)}}}\n"
                "training: {micro_batch_size: 1, global_batch_size: 8, precision: bf16}\n"
                "cluster: {preset: dgx-h100, num_gpus: 4}\n")
    got[name] = run(path, "cap-" + name)
(z, ez), (i1, ei) = got["InterleavedZeroBubble"], got["Interleaved1F1B"]
check(r.returncode == 0 and z is not None and i1 is not None and
      z["iteration_time_s"] < i1["iteration_time_s"] and
      z["peak_memory_bytes"] > i1["peak_memory_bytes"],
      f"a captured model under InterleavedZeroBubble: {z and z['iteration_time_s']:.6f} s, "
      f"Interleaved1F1B {i1 and i1['iteration_time_s']:.6f} s; more memory held for W "
      f"({ez or ei or r.stderr.strip()[-200:]})")
for name in ("ZBVZeroBubble", "DualPipeV"):
    t = table(name, 4, 2, 8)
    r = sh("run", experiment(4, 2, 8, "actions", t), "-o", os.path.join(tmp, "x"))
    check(r.returncode != 0 and r.stderr.count("\n") == 1 and
          ("OVERLAP_F_B" in r.stderr or "V-shaped" in r.stderr),
          f"{name}'s table refused ({r.stderr.strip()[-200:]!r})")
msg = table("1F1B", 4, 1, 8)
check("runs its own loop" in msg, f"Schedule1F1B: no action table to replay ({msg!r})")
finish("ok: torch.distributed.pipelining's action tables replayed as PyTorch runs them")
