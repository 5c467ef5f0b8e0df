#!/usr/bin/env bash
# Runs every shipped experiment (inputs/experiments/*.yaml, at its shipped size, sequential engine),
# the shipped sweeps, and the quickstart on captured PyTorch models (inputs/pytorch's Llama and
# Mixtral, nanoGPT's GPT-2 medium from ../shared; the capture front end is this checkout's
# Python, so both sides see the same capture.h5 and the C++ lowering is what is compared):
# eager and compiled, TP 2 / 4, CP, fp8 with async TP, recompute, MoE with EP, skew and ETP 1.
# Writes OUTDIR/<name>/{summary.json,results.h5} (sweeps: sweep.{csv,json}). Used with
# scripts/dev/same_outputs.py to show that a refactoring changes no output:
#   scripts/dev/outputs.sh build/scalescope /tmp/before   # at the old commit
#   scripts/dev/outputs.sh build/scalescope /tmp/after    # at the new one
#   scripts/dev/same_outputs.py /tmp/before /tmp/after
set -euo pipefail
bin=$(realpath "$1"); out=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
timed() {  # timed NAME COMMAND...
  local name=$1 start; shift
  start=$(date +%s.%N)
  "$@"
  printf '%-28s %6.1f s\n' "$name" "$(echo "$(date +%s.%N) - $start" | bc)"
}
for cfg in "$repo"/inputs/experiments/*.yaml; do
  timed "$(basename "$cfg" .yaml)" "$bin" run "$cfg" -o "$out/$(basename "$cfg" .yaml)" --quiet
done
# One fixed place for the captures: their path is part of each run's configuration (results.h5
# /meta), so both sides of a comparison must use the same one (run them one after the other).
caps=${TMPDIR:-/tmp}/scalescope-outputs-captures
rm -rf "$caps" && mkdir -p "$caps" && trap 'rm -rf "$caps"' EXIT
echo '{dim: 1024, n_layers: 4, n_heads: 8, n_kv_heads: 2, vocab_size: 32000, ffn_dim: 2048, num_experts: 4, top_k: 2}' >"$caps/mixtral.yaml"
"$bin" capture "$repo/inputs/pytorch/llama.py:Transformer" --args "$repo/inputs/pytorch/llama3-8b.yaml" --seq 4096 -o "$caps/llama.h5" >/dev/null
"$bin" capture "$repo/inputs/pytorch/mixtral.py:Mixtral" --args "$caps/mixtral.yaml" --seq 4096 -o "$caps/mixtral.h5" >/dev/null
"$bin" capture --factory "$repo/tests/capture/nanogpt_factory.py:gpt2_medium" --seq 1024 -o "$caps/gpt2m.h5" >/dev/null
qs=$repo/inputs/experiments/quickstart.yaml
L=(--set "model.source=$caps/llama.h5" --set model.num_layers=8)
M=(--set model.preset=mixtral-8x7b --set model.num_query_groups=2 --set model.num_attention_heads=8
   --set model.kv_channels=128 --set model.num_experts=4 --set model.moe_ffn_hidden_size=2048
   --set model.ffn_hidden_size=2048 --set model.tp_plan=llama --set "model.source=$caps/mixtral.h5"
   --set model.num_layers=4 --set model.vocab_size=32000 --set model.hidden_size=1024
   --set parallel.tp=2 --set parallel.dp=16 --set parallel.ep=4)
G=(--set model.preset=gpt3-175b --set model.num_attention_heads=16 --set model.kv_channels=64
   --set model.ffn_hidden_size=4096 --set model.num_layers=24 --set model.hidden_size=1024
   --set model.tp_plan=gpt --set "model.source=$caps/gpt2m.h5" --set model.seq_length=1024
   --set model.vocab_size=50257)
capture_run() {  # capture_run NAME ARGS...
  local name=$1; shift
  timed "capture-$name" "$bin" run "$qs" -o "$out/capture-$name" --quiet "$@"
}
capture_run llama-tp4 "${L[@]}"
capture_run llama-eager "${L[@]}" --set model.compile=eager
capture_run llama-tp2 "${L[@]}" --set parallel.tp=2 --set parallel.dp=16
capture_run llama-cp2 "${L[@]}" --set parallel.cp=2 --set parallel.dp=4
capture_run llama-fp8-atp "${L[@]}" --set training.precision=fp8 --set parallel.tp_comm_overlap=true
capture_run llama-sac "${L[@]}" --set parallel.recompute=op
capture_run llama-full "${L[@]}" --set parallel.recompute=full
capture_run mixtral-ep "${M[@]}"
capture_run mixtral-skew "${M[@]}" --set training.moe_expert_load_skew=0.5
capture_run mixtral-etp1 "${M[@]}" --set parallel.expert_tensor_parallel_size=1
capture_run gpt2m "${G[@]}"
capture_run gpt2m-eager "${G[@]}" --set model.compile=eager
for sweep in "$repo"/inputs/sweeps/*.yaml; do
  timed "sweep-$(basename "$sweep" .yaml)" "$bin" sweep "$sweep" -o "$out/sweep-$(basename "$sweep" .yaml)" --quiet
done
