#!/usr/bin/python3
"""One MoE layer on 8 H100 against Megatron-LM's own MoE layer benchmark (held out, nothing
fitted): the GPU time of a Megatron-Core MoELayer forward and backward, measured with CUDA
events around `layer(input)` and `output.backward()`, after "a long CUDA kernel to hide the
router launch overhead", so host time is excluded (NVIDIA/Megatron-LM@d98e8a6
tests/functional_tests/test_cases/common/moe_perf/__main__.py l.209-247; the shapes in
test_cases.py: MIXTRAL_PROXY seq 4096, micro-batch 1, hidden 4096, expert FFN 14336, 8 experts,
top-2, aux loss, EP 8 on one node, permute and router fusion on, forced load balance; the times in
baseline.json, commit cf39a4d, 2025-12-17).

scalescope replays a one-layer Mixtral 8x7B at the same shapes (balanced routing, stack
megatron-lm) and takes, on rank 0, the span from the MoE block's first op to its last in each
phase (router, permutation, dispatch, experts, combine, unpermutation, their fp8 casts):
the GPU time of the block, communication waits included. DeepEP and HybridEP run as the flex
dispatcher. Error = predicted / measured - 1.

Usage: scripts/validate/moe_layer.py [--scalescope build/scalescope]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# baseline.json (forward_ms, backward_ms) of the Mixtral-proxy cases, fp8 = e4m3 blockwise.
MEASURED = {
    ("alltoall", "a2a", "bf16"): (4.327, 7.684), ("alltoall", "a2a", "fp8"): (3.788, 6.618),
    ("flex", "deepep", "bf16"): (4.636, 7.854), ("flex", "deepep", "fp8"): (4.101, 6.827),
    ("flex", "hybridep", "bf16"): (4.343, 7.741), ("flex", "hybridep", "fp8"): (3.701, 6.572),
}
MOE_OPS = {"router", "router_topk", "moe_permute", "moe_sort_chunks", "ep_dispatch",
           "expert_fc1_gemm", "expert_activation", "expert_fc2_gemm", "ep_combine",
           "moe_unpermute"}

YAML = """model:
  preset: mixtral-8x7b
  num_layers: 1
  seq_length: 4096
parallel:
  tp: 1
  pp: 1
  dp: 8
  expert_model_parallel_size: 8
  moe_token_dispatcher_type: {dispatcher}
training:
  micro_batch_size: 1
  global_batch_size: 8
  precision: {precision}
  stack: megatron-lm
{recipe}cluster:
  preset: dgx-h100
  num_gpus: 8
run:
  trace_ranks: [0]
"""


def block_spans(trace):
    """(forward, backward) span in ms of the MoE block's ops on rank 0."""
    spans = {"fwd": [None, None], "bwd": [None, None]}
    events = json.load(open(trace))["traceEvents"]
    layer_ops = [e for e in events if e.get("ph") == "X" and e.get("pid") == 0
                 and e.get("cat") in spans]
    for e in layer_ops:
        name = e["name"].split(" L")[0].split(" mb")[0]
        if name not in MOE_OPS:
            continue
        s = spans[e["cat"]]
        s[0] = e["ts"] if s[0] is None else min(s[0], e["ts"])
        s[1] = e["ts"] + e["dur"] if s[1] is None else max(s[1], e["ts"] + e["dur"])
    return tuple((spans[p][1] - spans[p][0]) / 1e3 for p in ("fwd", "bwd"))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scalescope", default=os.path.join(ROOT, "build", "scalescope"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="moe_layer_")
    errs = []
    print(f"{'case':<28} {'meas fwd':>9} {'pred fwd':>9} {'err':>7} {'meas bwd':>9} "
          f"{'pred bwd':>9} {'err':>7}")
    for (dispatcher, name, precision), (mf, mb) in MEASURED.items():
        recipe = "  fp8_recipe: blockwise\n" if precision == "fp8" else ""
        y = os.path.join(tmp, f"{name}_{precision}.yaml")
        open(y, "w").write(YAML.format(dispatcher=dispatcher, precision=precision, recipe=recipe))
        out = os.path.join(tmp, f"{name}_{precision}")
        subprocess.run([args.scalescope, "run", y, "-q", "-o", out], check=True,
                       capture_output=True, text=True)
        pf, pb = block_spans(os.path.join(out, "trace.json"))
        ef, eb = pf / mf - 1, pb / mb - 1
        errs += [ef, eb]
        print(f"mixtral_{name}_tp1ep8_{precision:<5} {mf:9.3f} {pf:9.3f} {100 * ef:+6.1f}% "
              f"{mb:9.3f} {pb:9.3f} {100 * eb:+6.1f}%")
    print(f"12 figures: median {100 * statistics.median(errs):+.1f} %, median |err| "
          f"{100 * statistics.median(abs(e) for e in errs):.1f} %")


if __name__ == "__main__":
    main()
