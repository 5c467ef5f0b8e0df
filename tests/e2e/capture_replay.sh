#!/usr/bin/env bash
# A captured PyTorch model replays (issue 11): `scalescope capture` of inputs/pytorch/llama.py
# and of gpt3.py at small sizes, then `run` with model.source under the sequential engine and the
# optimistic one at np 2 (with sequence parallelism): identical results, compiled (the default,
# model.compile: inductor) and, for Llama, eager, with context parallelism 2, with full
# recomputation and per-op checkpointing (compiled and eager), under ZeRO-3, in fp8 (torchao's Float8Linear) and with
# async TP; and a Mixtral block with expert parallelism 2, balanced, with a router load skew and
# at ETP 1. Exit 77, loudly, where PyTorch is missing (scripts/setup.sh installs python3-torch).
set -euo pipefail
bin=$1; repo=$2
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "!!! no PyTorch for /usr/bin/python3: capture replay NOT tested !!!" >&2
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
echo '{dim: 1024, n_layers: 4, n_heads: 8, n_kv_heads: 2, vocab_size: 32000, ffn_dim: 2816}' >"$tmp/llama.yaml"
echo '{vocab_size: 32000, block_size: 512, n_layer: 4, n_head: 8, n_embd: 1024}' >"$tmp/gpt.yaml"
"$bin" capture "$repo/inputs/pytorch/llama.py:Transformer" --args "$tmp/llama.yaml" --seq 512 \
  -o "$tmp/llama.h5" >/dev/null
"$bin" capture "$repo/inputs/pytorch/gpt3.py:GPT" --args "$tmp/gpt.yaml" --blocks h --seq 512 \
  -o "$tmp/gpt.h5" >/dev/null
echo '{dim: 1024, n_layers: 4, n_heads: 8, n_kv_heads: 2, vocab_size: 32000, ffn_dim: 2048, num_experts: 4, top_k: 2}' >"$tmp/mixtral.yaml"
"$bin" capture "$repo/inputs/pytorch/mixtral.py:Mixtral" --args "$tmp/mixtral.yaml" --seq 512 \
  -o "$tmp/mixtral.h5" >/dev/null
common=(--set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=2 --set cluster.num_gpus=8
        --set training.global_batch_size=8 --set run.trace_ranks=[0,7])
for m in llama gpt llama-eager llama-cp llama-full llama-zero3 llama-fp8 llama-atp llama-sac llama-esac mixtral-ep mixtral-skew mixtral-etp1; do
  cap=${m%-*}
  mode=inductor; [ $m = llama-eager ] || [ $m = llama-esac ] && mode=eager
  cpargs=()
  [ $m = llama-cp ] && cpargs=(--set parallel.cp=2 --set parallel.dp=1)
  [ $m = llama-full ] && cpargs=(--set parallel.recompute=full)
  [ $m = llama-zero3 ] && cpargs=(--set parallel.pp=1 --set parallel.dp=4 --set parallel.zero_stage=3)
  [ $m = llama-fp8 ] && cpargs=(--set training.precision=fp8)
  [ $m = llama-sac ] || [ $m = llama-esac ] && cpargs=(--set parallel.recompute=op)
  [ $m = llama-atp ] && cpargs=(--set parallel.tp_comm_overlap=true --set parallel.sequence_parallel=true)
  [ $m = mixtral-skew ] && cpargs=(--set training.moe_expert_load_skew=0.5)
  [ $m = mixtral-etp1 ] && cpargs=(--set parallel.expert_tensor_parallel_size=1)
  if [ $cap = mixtral ]; then
    model=(--set model.preset=mixtral-8x7b --set model.num_query_groups=2 --set model.num_attention_heads=8
           --set model.kv_channels=128 --set model.num_experts=4 --set model.moe_ffn_hidden_size=2048
           --set model.ffn_hidden_size=2048 --set parallel.ep=2 --set model.tp_plan=llama)
  elif [ $cap = llama ]; then
    model=(--set model.preset=llama3-8b --set model.num_query_groups=2 --set model.num_attention_heads=8
           --set model.ffn_hidden_size=2816 --set model.kv_channels=128 --set model.tp_plan=llama)
  else
    model=(--set model.preset=gpt3-175b --set model.num_attention_heads=8 --set model.kv_channels=128
           --set model.ffn_hidden_size=4096 --set model.tp_plan=gpt)
  fi
  args=("$repo/inputs/experiments/quickstart.yaml" "${common[@]}" "${model[@]}"
        --set model.source="$tmp/$cap.h5" --set model.compile=$mode --set model.num_layers=4 --set model.seq_length=512
        --set model.vocab_size=32000 --set model.hidden_size=1024 "${cpargs[@]}")
  "$bin" run "${args[@]}" -o "$tmp/$m-seq" --quiet
  mpirun -np 2 "$bin" run "${args[@]}" --set run.engine=optimistic -o "$tmp/$m-np2" --quiet
done
# model.pytorch: the module captured on first use into the cache, then reused; the same run as
# with model.source of the same capture.
pt=(--set model.pytorch="$repo/inputs/pytorch/llama.py:Transformer" --set model.pytorch_args="$tmp/llama.yaml"
    --set model.preset=llama3-8b --set model.num_query_groups=2 --set model.num_attention_heads=8
    --set model.ffn_hidden_size=2816 --set model.kv_channels=128 --set model.num_layers=4
    --set model.seq_length=512 --set model.vocab_size=32000 --set model.hidden_size=1024)
for k in 1 2; do
  SCALESCOPE_CACHE="$tmp/cache" "$bin" run "$repo/inputs/experiments/quickstart.yaml" "${common[@]}" \
    "${pt[@]}" -o "$tmp/pytorch$k" --quiet 2>/dev/null
done
test "$(ls "$tmp/cache/captures" | wc -l)" -eq 1
/usr/bin/python3 -c "
import json, sys
a, b, c = (json.load(open(sys.argv[i] + '/summary.json')) for i in (1, 2, 3))
assert a['iteration_time_s'] == b['iteration_time_s'] == c['iteration_time_s'], (a, b, c)
print('model.pytorch: captured once, as model.source:', a['iteration_time_s'])" \
  "$tmp/pytorch1" "$tmp/pytorch2" "$tmp/llama-seq"

# A capture whose experts disagree with model.num_experts, and CP on an eager capture: one line
# each, exit ≠ 0, no output.
for bad in "--set model.num_experts=8" "--set model.compile=eager --set parallel.cp=2 --set parallel.dp=1"; do
  src=mixtral; [ "${bad#*eager}" != "$bad" ] && src=llama
  if [ $src = mixtral ]; then model=(--set model.preset=mixtral-8x7b --set model.num_query_groups=2
      --set model.num_attention_heads=8 --set model.kv_channels=128 --set model.moe_ffn_hidden_size=2048
      --set model.ffn_hidden_size=2048 --set parallel.ep=2); else model=(--set model.preset=llama3-8b
      --set model.num_query_groups=2 --set model.num_attention_heads=8 --set model.ffn_hidden_size=2816
      --set model.kv_channels=128); fi
  # shellcheck disable=SC2086
  if "$bin" run "$repo/inputs/experiments/quickstart.yaml" "${common[@]}" "${model[@]}" \
      --set model.source="$tmp/$src.h5" --set model.num_layers=4 --set model.seq_length=512 \
      --set model.vocab_size=32000 --set model.hidden_size=1024 $bad -o "$tmp/bad" --quiet 2>"$tmp/err"; then
    echo "accepted: $bad" >&2; exit 1
  fi
  test "$(wc -l < "$tmp/err")" -eq 1 && test ! -e "$tmp/bad"
  cat "$tmp/err"
done
# gpt3.py ties its output layer to the embedding: untied embeddings disagree with the capture.
if "$bin" run "$repo/inputs/experiments/quickstart.yaml" "${common[@]}" --set model.preset=gpt3-175b \
    --set model.num_attention_heads=8 --set model.kv_channels=128 --set model.ffn_hidden_size=4096 \
    --set model.tp_plan=gpt --set model.source="$tmp/gpt.h5" --set model.num_layers=4 \
    --set model.seq_length=512 --set model.vocab_size=32000 --set model.hidden_size=1024 \
    --set model.untie_embeddings=true -o "$tmp/bad" --quiet 2>"$tmp/err"; then
  echo "accepted: untied embeddings on a tied capture" >&2; exit 1
fi
test "$(wc -l < "$tmp/err")" -eq 1 && test ! -e "$tmp/bad" && grep -q "model.untie_embeddings" "$tmp/err"
cat "$tmp/err"
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
import h5py, numpy as np
d = sys.argv[1]
for m in ("llama", "gpt", "llama-eager", "llama-cp", "llama-full", "llama-zero3", "llama-fp8",
          "llama-atp", "llama-sac", "llama-esac", "mixtral-ep", "mixtral-skew", "mixtral-etp1"):
    a, b = (json.load(open(f"{d}/{m}-{r}/summary.json")) for r in ("seq", "np2"))
    a.pop("engine"); b.pop("engine")
    assert a == b, f"{m}: summary differs between the engines"
    with h5py.File(f"{d}/{m}-seq/results.h5") as fa, h5py.File(f"{d}/{m}-np2/results.h5") as fb:
        for k in fa["ranks"]:
            assert np.array_equal(fa["ranks"][k][()], fb["ranks"][k][()]), f"{m}: /ranks/{k}"
    assert a["iteration_time_s"] > 0
    print(f"ok: captured {m} replays, {a['iteration_time_s']:.4f} s, np 2 identical")
t = {m: json.load(open(f"{d}/{m}-seq/summary.json"))["iteration_time_s"] for m in ("llama", "llama-fp8")}
# Slower in fp8: every linear here (512 tokens, k ≤ 1408, n ≤ 1408 per TP rank) is smaller than
# torchao's 1024 × 2048 × 1024 example, which it measured at 0.80× (torchao/float8/README.md).
assert t["llama-fp8"] > t["llama"], t
PY
