#!/usr/bin/env bash
# Public model code captured as its authors publish it (issue 25): nanoGPT's model.py from
# ../shared/fixtures, unmodified, through tests/capture/nanogpt_factory.py:gpt2_medium (GPT-2
# medium: 24 layers, 16 heads, 1,024 wide, vocabulary 50,257, context 1,024), replayed on 64 H100
# without hand overrides. Checks: the plan inferred from the graph (and printed); per-iteration
# GEMM FLOPs against 6·N·tokens + the attention term; Megatron's TP all-reduces counted by hand;
# the iteration time against the hand-written builder's for the same shapes (TP 2 and TP 1);
# a plan given in YAML; a plan that matches no linear layer and a bad style name are one-line
# errors. Exit 77, loudly, without PyTorch or ../shared.
set -euo pipefail
bin=$1; repo=$2
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "!!! no PyTorch for /usr/bin/python3: public model capture NOT tested !!!" >&2
  exit 77
fi
if [[ ! -f "$repo/../shared/fixtures/pytorch-models/nanogpt_model.py" ]]; then
  echo "!!! $repo/../shared/fixtures not found: nanoGPT capture NOT tested !!!" >&2
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$bin" capture --factory "$repo/tests/capture/nanogpt_factory.py:gpt2_medium" --seq 1024 \
  -o "$tmp/gpt2m.h5" --summary >"$tmp/summary.txt"
# The plan inferred from the graph: Megatron's (and torchtitan's) for GPT-2.
for line in "attn.c_attn +colwise" "attn.c_proj +rowwise" "mlp.c_fc +colwise" \
  "mlp.c_proj +rowwise" "transformer.wte +rowwise" "lm_head +colwise"; do
  grep -Eq "^  $line\$" "$tmp/summary.txt" || { cat "$tmp/summary.txt"; echo "FAIL: no '$line'"; exit 1; }
done
grep -q "captured / expected = 1.0000" "$tmp/summary.txt" || { cat "$tmp/summary.txt"; exit 1; }

cat >"$tmp/capture.yaml" <<YAML
model:
  source: $tmp/gpt2m.h5
parallel: {tp: 2, pp: 1, dp: 32}
training: {micro_batch_size: 1, global_batch_size: 64, precision: bf16}
cluster: {preset: dgx-h100, num_gpus: 64}
run: {output: $tmp/out}
YAML
# The hand-written builder on the same shapes (GPT-3's architecture at GPT-2 medium's sizes, no
# vocabulary padding, no dropout as nanoGPT's config has it).
cat >"$tmp/builder.yaml" <<YAML
model: {preset: gpt3-175b, num_layers: 24, hidden_size: 1024, ffn_hidden_size: 4096,
        num_attention_heads: 16, kv_channels: 64, seq_length: 1024, vocab_size: 50257,
        make_vocab_size_divisible_by: 1, hidden_dropout: 0, attention_dropout: 0}
parallel: {tp: 2, pp: 1, dp: 32}
training: {micro_batch_size: 1, global_batch_size: 64, precision: bf16, attention: flash}
cluster: {preset: dgx-h100, num_gpus: 64}
run: {output: $tmp/out}
YAML
# The run prints the plan it uses.
"$bin" run "$tmp/capture.yaml" -o "$tmp/printed" | grep -q "tensor-parallel plan (inferred from the capture)"

# FLOPs and collectives from the eager graph (one kernel per ATen op: attention's scores and
# values are batched GEMMs there).
for tp in 2 1; do
  dp=$((64 / tp))
  "$bin" graph "$tmp/capture.yaml" --set parallel.tp=$tp --set parallel.dp=$dp \
    --set model.compile=eager -o "$tmp/g$tp.h5" >/dev/null
done
/usr/bin/python3 - "$tmp" <<'PY'
import sys, h5py, numpy as np
tmp = sys.argv[1]
# N: the weights GEMMs read: per layer c_attn 3h², c_proj h², c_fc and c_proj 4h² each = 12h²;
# the head (tied to the embedding) V·h. T: 64 sequences of 1,024 tokens. Attention's GEMMs over
# the whole s × s matrix: 4·s·h per token and layer forward, 12 with the backward.
L, h, V, s, T = 24, 1024, 50257, 1024, 64 * 1024
# On PyTorch 2.x nanoGPT calls scaled_dot_product_attention(is_causal=True): one fused op, not
# GEMMs, costed 4·s·h per token and layer over the square, halved (causal), forward, and 2.5×
# that backward (FlashAttention-2's recomputation): 7·L·s·h·T in all.
N = L * 12 * h * h + V * h
fused = h5py.File(f"{tmp}/gpt2m.h5")["meta"].attrs["torch_version"][0] != "1"
expected = 6 * N * T + (0 if fused else 12 * L * s * h * T)
expected_attention = 7 * L * s * h * T if fused else 0
for tp in (2, 1):
    f = h5py.File(f"{tmp}/g{tp}.h5")
    cls = f["ranks/class"][()]
    total = attention = 0.0
    for k, count in zip(*np.unique(cls, return_counts=True)):
        t = f[f"templates/{k}"]
        total += count * t["flops"][()][t["kind"][()] == 0].sum()
        attention += count * t["flops"][()][t["kind"][()] == 1].sum()
    assert abs(total / expected - 1) < 0.01, (tp, total, expected)
    assert abs(attention - expected_attention) <= 0.01 * expected_attention, \
        (tp, attention, expected_attention)
    print(f"TP {tp}: GEMM FLOPs {total:.6g} against 6·N·T{'' if fused else ' + 12·L·s·h·T'} "
          f"{expected:.6g} ({total / expected:.5f}); attention {attention:.6g}")
    # Megatron's TP without SP, per layer and micro-batch (2 per rank at DP 32): an all-reduce
    # after the attention's and the MLP's row-parallel GEMMs (forward) and after the input
    # gradients of their column-parallel GEMMs (backward), each of b·s·h bf16 = 2 MiB.
    t = f[f"templates/{cls[0]}"]
    tp_ar = (t["role"][()] == 1) & (t["kind"][()] == 7) & (t["layer"][()] != 0xFFFF)
    if tp == 2:
        assert tp_ar.sum() == 4 * L * 2, tp_ar.sum()
        assert np.all(t["comm_bytes"][()][tp_ar] == 2 * s * h), set(t["comm_bytes"][()][tp_ar])
    else:
        assert tp_ar.sum() == 0, tp_ar.sum()
print("GEMM FLOPs and TP all-reduces as counted by hand")
PY

# Iteration time against the builder's (compiled, with cuDNN's attention as the builder's
# Transformer Engine runs it), TP 2 · DP 32 and TP 1 · DP 64: the GPU work within 3 %. The host is
# left out of this comparison (cluster.host_launch_us=0): the builder is Megatron with Transformer
# Engine, whose module code costs the host tens of µs a linear layer (docs/cost-model.md §1.6),
# the capture nanoGPT under torch.compile; at GPT-2 medium's sizes that host work is longer than
# the GPU's, so with the host on the builder is the slower, as a host-bound job is.
# Like for like, the lowering's own fusion rules (model.fusion: rederived) within 3 %; with the
# kernels Inductor's scheduler made (the default where the capture read them: more, smaller
# kernels than Transformer Engine's fused ones, docs/flint.md §2) within 6 %, and no faster.
for tp in 2 1; do
  dp=$((64 / tp))
  set_tp=(--set parallel.tp=$tp --set parallel.dp=$dp --set cluster.host_launch_us=0)
  "$bin" run "$tmp/capture.yaml" "${set_tp[@]}" --set model.sdpa=cudnn \
    --set model.fusion=rederived -o "$tmp/c$tp" --quiet
  "$bin" run "$tmp/capture.yaml" "${set_tp[@]}" --set model.sdpa=cudnn -o "$tmp/i$tp" --quiet
  "$bin" run "$tmp/builder.yaml" "${set_tp[@]}" -o "$tmp/b$tp" --quiet
  /usr/bin/python3 -c "
import json, sys
c, i, b = (json.load(open(sys.argv[k] + '/summary.json'))['iteration_time_s'] for k in (1, 2, 3))
print(f'TP $tp: captured {c:.6f} s (Inductor\'s kernels {i:.6f} s), builder {b:.6f} s '
      f'({c / b:.4f}x, {i / b:.4f}x)')
assert abs(c / b - 1) <= 0.03, (c, b)
assert 1 <= i / b <= 1.06, (i, b)" "$tmp/c$tp" "$tmp/i$tp" "$tmp/b$tp"
done

# The plan as YAML (parallelize_module's names): the same run as the inferred plan.
"$bin" run "$tmp/capture.yaml" --set model.sdpa=cudnn --set cluster.host_launch_us=0 \
  -o "$tmp/yaml" --quiet \
  --set 'model.pytorch_tp_plan={transformer.h.*.attn.c_attn: ColwiseParallel, attn.c_proj: RowwiseParallel, mlp.c_fc: ColwiseParallel(), mlp.c_proj: RowwiseParallel, ln_1: SequenceParallel, transformer.wte: RowwiseParallel, lm_head: ColwiseParallel}'
/usr/bin/python3 -c "
import json, sys
a, b = (json.load(open(sys.argv[i] + '/summary.json'))['iteration_time_s'] for i in (1, 2))
assert a == b, (a, b)
print('YAML plan: same iteration time as the inferred plan', a)" "$tmp/yaml" "$tmp/i2"

# A plan for other module names at TP 2, and a style that is not one: one line, exit != 0.
for plan in '{attention.wq: ColwiseParallel, attention.wo: RowwiseParallel}' '{attn.c_attn: Colwise2}'; do
  if "$bin" run "$tmp/capture.yaml" --set "model.pytorch_tp_plan=$plan" -o "$tmp/bad" >"$tmp/err" 2>&1; then
    echo "FAIL: plan $plan accepted"; exit 1
  fi
  test "$(wc -l <"$tmp/err")" -eq 1 || { cat "$tmp/err"; exit 1; }
  grep -Eq "shards none of the block's 4 linear layers|is not a parallelize_module style" "$tmp/err" \
    || { cat "$tmp/err"; exit 1; }
  test ! -e "$tmp/bad/summary.json"
done
# A plan the model file declares (tests/capture/variants.py's tp_plan dict) is the one used.
"$bin" capture "$repo/tests/capture/variants.py:HfStyle" --seq 128 -o "$tmp/hf.h5" >/dev/null
"$bin" run "$tmp/capture.yaml" --set model.source="$tmp/hf.h5" -o "$tmp/hf" >"$tmp/hf.txt"
grep -q "tensor-parallel plan (the model file)" "$tmp/hf.txt" || { head -20 "$tmp/hf.txt"; exit 1; }
echo "ok: nanoGPT captured unmodified and replayed without hand overrides"
