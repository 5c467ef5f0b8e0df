#!/usr/bin/env bash
# The sequential engine, the optimistic engine and the conservative engine (not under the flow
# model across processes) at np 1, 2, 3, 4 with block and METIS partitions write identical results: summary.json without the engine statistics, and every dataset of
# results.h5 except /engine, for every shipped experiment (llama3-8b-hf shrunk to 64 GPUs, the
# interleaved Llama 3 405B 16k and 8k to TP 2 · DP 2 · their PP 16 with 8 model chunks) and the quickstart
# interleaved without overlapped transfers; Llama 3 70B (TP communication overlap) at DP 2; the
# context-parallel Llama 3 405B at CP 2 · TP 2 with 8k sequences; the FSDP Llama 3 8B with 4 layers
# at TP 2 · DP 4 and 4 micro-batches (gradients accumulated before the reduce-scatter); the four
# MoE experiments shrunk as noted below, two of them with the EP overlap (combined 1F1B: Qwen3
# interleaved with DeepEP and delayed wgrads, Mixtral at PP 1); FSDP under pipeline parallelism
# (torchtitan's Llama 3.1 405B, with looped BFS and accumulation runs, DeepSeek-V3 with EP, with EP
# and HSDP, HSDP), shrunk as noted below.
# The flow model (network.model: flow): Llama 3 70B on 64 GPUs over a 1:4 oversubscribed fabric
# with what-ifs (a slow GPU, a degraded NIC, a failed leaf uplink, extra spine latency, a late
# data loader), and Mixtral 8x7B whose expert all-to-alls cross nodes.
# The symmetry fast path (run.replicas: representative, sequential and np 2) on every experiment
# but the two flow-model ones, which it refuses.
# Also from graph.h5 (`run --graph`): the optimistic engine reads it in parallel, each process
# only its templates under block partitioning, all of them under METIS.
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for exp in quickstart llama3-8b-hf gpt3-175b-1024 llama3-405b-16k llama3-405b-8k quickstart-vpp llama3-70b-1k llama3-405b-128k-cp16 llama3-8b-fsdp llama3-8b-hsdp deepseek-v3-2k mixtral-8x7b-1k mixtral-8x22b-1k qwen3-235b-1k mixtral-allgather qwen3-ep-overlap mixtral-ep-overlap qwen3-host-bound llama3-70b-flow mixtral-flow llama3-405b-torchtitan-fsdp-tp8-pp8 llama3-405b-looped-bfs deepseek-v3-fsdp-ep64 deepseek-v3-hsdp-ep llama3-70b-hsdp-pp-1k; do
  cfg=$repo/inputs/experiments/$exp.yaml
  set_small=()
  whatif=()
  [ "$exp" = llama3-8b-hf ] && set_small=(--set model.num_layers=4 --set training.global_batch_size=64 --set cluster.num_gpus=64 --set parallel.dp=8 --set parallel.tp=4 --set parallel.pp=2)
  [ "$exp" = llama3-405b-128k-cp16 ] && set_small=(--set model.seq_length=8192 --set parallel.cp=2 --set parallel.tp=2 --set parallel.dp=1 --set cluster.num_gpus=64 --set training.global_batch_size=16 --set run.trace_ranks=[0,60])
  [ "$exp" = llama3-405b-16k ] || [ "$exp" = llama3-405b-8k ] && set_small=(--set training.global_batch_size=32 --set cluster.num_gpus=64 --set parallel.dp=2 --set parallel.tp=2 --set run.trace_ranks=[0,60])
  [ "$exp" = llama3-8b-fsdp ] && set_small=(--set model.num_layers=4 --set training.global_batch_size=16 --set cluster.num_gpus=8 --set parallel.tp=2 --set run.trace_ranks=[0,7])
  if [ "$exp" = llama3-8b-hsdp ]; then  # HSDP: shard groups of 2, 2 replicas
    cfg=$repo/inputs/experiments/llama3-8b-fsdp.yaml
    set_small=(--set model.num_layers=4 --set training.global_batch_size=16 --set cluster.num_gpus=8 --set parallel.tp=2 --set parallel.fsdp_shard_size=2 --set run.trace_ranks=[0,7])
  fi
  # MoE: DeepSeek-V3 with 8 layers (1 dense) over PP 4 (2 + 2·2 + 2), EP 8 over 16 ranks per
  # stage (expert DP 2), a skewed router; Mixtral 8x7B PP 4 · EP 8; Mixtral 8x22B TP 2 · PP 8 ·
  # EP 8 with its skew; Qwen3 TP 2 · PP 8 with 14 layers (+ embedding and loss) · EP 8.
  [ "$exp" = deepseek-v3-2k ] && set_small=(--set model.num_layers=8 --set 'model.moe_layer_freq=([0]*1+[1]*7)' --set parallel.pp=4 --set parallel.decoder_first_pipeline_num_layers=2 --set parallel.decoder_last_pipeline_num_layers=2 --set parallel.ep=8 --set cluster.num_gpus=64 --set training.global_batch_size=64 --set training.moe_expert_load_skew=0.5 --set run.trace_ranks=[0,63])
  [ "$exp" = mixtral-8x7b-1k ] && set_small=(--set model.num_layers=4 --set cluster.num_gpus=32 --set training.global_batch_size=32 --set run.trace_ranks=[0,24])
  [ "$exp" = mixtral-8x22b-1k ] && set_small=(--set model.num_layers=8 --set cluster.num_gpus=128 --set training.global_batch_size=32 --set run.trace_ranks=[0,126])
  if [ "$exp" = mixtral-allgather ]; then  # Megatron's default dispatcher, TP 2 · EP 4 groups
    cfg=$repo/inputs/experiments/mixtral-8x7b-1k.yaml
    set_small=(--set model.num_layers=4 --set cluster.num_gpus=32 --set training.global_batch_size=32 --set parallel.tp=2 --set parallel.sequence_parallel=true --set parallel.ep=4 --set parallel.moe_token_dispatcher_type=allgather --set run.trace_ranks=[0,24])
  fi
  if [ "$exp" = qwen3-ep-overlap ]; then  # interleaved (VP 2), DeepEP, delayed expert wgrads
    cfg=$repo/inputs/experiments/qwen3-235b-1k.yaml
    set_small=(--set model.num_layers=14 --set cluster.num_gpus=64 --set training.global_batch_size=32 --set parallel.vpp=2 --set parallel.moe_token_dispatcher_type=flex --set parallel.moe_a2a_overlap=true --set parallel.delay_wgrad_compute=true --set run.trace_ranks=[0,63])
  fi
  if [ "$exp" = qwen3-host-bound ]; then  # a host slower than the GPU, waiting at each dispatch
    cfg=$repo/inputs/experiments/qwen3-235b-1k.yaml
    set_small=(--set model.num_layers=14 --set cluster.num_gpus=64 --set training.global_batch_size=32 --set parallel.vpp=2 --set parallel.moe_token_dispatcher_type=flex --set parallel.moe_a2a_overlap=true --set parallel.delay_wgrad_compute=true --set cluster.host_launch_us=60 --set run.trace_ranks=[0,63])
  fi
  if [ "$exp" = mixtral-ep-overlap ]; then  # PP 1: F(i + 1) with B(i)
    cfg=$repo/inputs/experiments/mixtral-8x7b-1k.yaml
    set_small=(--set model.num_layers=4 --set cluster.num_gpus=32 --set training.global_batch_size=64 --set parallel.pp=1 --set parallel.moe_a2a_overlap=true --set run.trace_ranks=[0,24])
  fi
  if [ "$exp" = llama3-70b-flow ]; then
    cfg=$repo/inputs/experiments/llama3-70b-1k.yaml
    set_small=(--set training.global_batch_size=16 --set cluster.num_gpus=64 --set parallel.dp=2 --set run.trace_ranks=[0,56] --set network.model=flow --set cluster.topology.nodes_per_leaf=2 --set cluster.topology.spines_per_pod=2 --set cluster.topology.leaf_oversubscription=4)
    whatif=(--whatif 'slow_gpu: {ranks: [9], factor: 1.1}' --whatif 'degraded_nic: {nodes: [2], factor: 0.5}' --whatif 'failed_link: {leaf: 0, spine: 1}' --whatif 'extra_latency: {level: spine, us: 3}' --whatif 'slow_dataloader: {ranks: [40], delay_us: 200}')
  fi
  if [ "$exp" = mixtral-flow ]; then
    cfg=$repo/inputs/experiments/mixtral-8x7b-1k.yaml
    set_small=(--set model.num_layers=4 --set cluster.num_gpus=32 --set training.global_batch_size=32 --set run.trace_ranks=[0,24] --set cluster.gpus_per_node=4 --set cluster.nics_per_node=4 --set network.model=flow)
  fi
  [ "$exp" = qwen3-235b-1k ] && set_small=(--set model.num_layers=14 --set cluster.num_gpus=64 --set training.global_batch_size=16 --set run.trace_ranks=[0,63])
  [ "$exp" = llama3-70b-1k ] && set_small=(--set training.global_batch_size=16 --set cluster.num_gpus=64 --set parallel.dp=2 --set run.trace_ranks=[0,56])
  # FSDP under PP (issue 37): torchtitan's 405B layout with 16 one-layer virtual stages at
  # TP 2 · DP 2; DeepSeek-V3 under FSDP with EP 8 (expert DP 2) over PP 4 · VP 2; HSDP (shard
  # groups of 2, 2 replicas) with TP 2 and PP 4 · VP 2.
  [ "$exp" = llama3-405b-torchtitan-fsdp-tp8-pp8 ] && set_small=(--set model.num_layers=16 --set 'parallel.pipeline_layout=Et|(t|)*14tL' --set parallel.tp=2 --set parallel.dp=2 --set cluster.num_gpus=32 --set training.global_batch_size=64 --set run.trace_ranks=[0,28])
  [ "$exp" = deepseek-v3-fsdp-ep64 ] && set_small=(--set model.num_layers=8 --set 'model.moe_layer_freq=([0]*1+[1]*7)' --set parallel.pp=4 --set 'parallel.pipeline_layout=Et|(t|)*6tL' --set parallel.ep=8 --set cluster.num_gpus=64 --set training.global_batch_size=128 --set run.trace_ranks=[0,48])
  if [ "$exp" = llama3-405b-looped-bfs ]; then  # torch's looped BFS, two accumulation runs of 8
    cfg=$repo/inputs/experiments/llama3-405b-torchtitan-fsdp-tp8-pp8.yaml
    set_small=(--set model.num_layers=16 --set 'parallel.pipeline_layout=Et|(t|)*14tL' --set parallel.tp=2 --set parallel.dp=2 --set cluster.num_gpus=32 --set training.global_batch_size=128 --set parallel.schedule=looped_bfs --set training.gradient_accumulation_steps=2 --set run.trace_ranks=[0,28])
  fi
  if [ "$exp" = deepseek-v3-hsdp-ep ]; then  # HSDP with experts: 2 replicas, expert shards of 2
    cfg=$repo/inputs/experiments/deepseek-v3-fsdp-ep64.yaml
    set_small=(--set model.num_layers=8 --set 'model.moe_layer_freq=([0]*1+[1]*7)' --set parallel.pp=4 --set 'parallel.pipeline_layout=Et|(t|)*6tL' --set parallel.ep=8 --set parallel.fsdp_shard_size=16 --set cluster.num_gpus=128 --set training.global_batch_size=256 --set run.trace_ranks=[0,96])
  fi
  [ "$exp" = llama3-70b-hsdp-pp-1k ] && set_small=(--set model.num_layers=8 --set parallel.tp=2 --set parallel.dp=4 --set parallel.fsdp_shard_size=2 --set cluster.num_gpus=32 --set training.global_batch_size=32 --set run.trace_ranks=[0,24])
  if [ "$exp" = quickstart-vpp ]; then
    cfg=$repo/inputs/experiments/quickstart.yaml
    set_small=(--set parallel.vpp=4 --set parallel.overlap_p2p_comm=false)
  fi
  "$bin" run "$cfg" -o "$tmp/$exp-seq" --quiet "${set_small[@]}" ${whatif[@]+"${whatif[@]}"}
  # The symmetry fast path (run.replicas: representative) where replicas can be identical (the
  # analytical network, no per-rank what-ifs): the same results from one replayed replica.
  if [ ${#whatif[@]} -eq 0 ] && [[ $exp != *-flow ]]; then
    "$bin" run "$cfg" -o "$tmp/$exp-1rep" --quiet "${set_small[@]}" --set run.replicas=representative
    mpirun -np 2 "$bin" run "$cfg" -o "$tmp/$exp-2rep" --quiet "${set_small[@]}" \
      --set run.replicas=representative --set run.engine=optimistic
  fi
  for np in 1 2 3 4; do
    for part in block metis; do
      mpirun -np $np "$bin" run "$cfg" -o "$tmp/$exp-$np-$part" --quiet "${set_small[@]}" ${whatif[@]+"${whatif[@]}"} \
        --set run.engine=optimistic --set run.partition=$part
      # The conservative engine (windows; the communicators that span processes in a second
      # phase): not under the flow model across processes, which it refuses.
      if [[ $exp != *-flow ]] || [ $np -eq 1 ]; then
        mpirun -np $np "$bin" run "$cfg" -o "$tmp/$exp-$np-$part-cons" --quiet "${set_small[@]}" ${whatif[@]+"${whatif[@]}"} \
          --set run.engine=conservative --set run.partition=$part
      fi
    done
  done
  # Time Warp with its run-ahead bounded in simulated time (run.optimism_window_us).
  [ "$exp" = quickstart ] && mpirun -np 2 "$bin" run "$cfg" -o "$tmp/$exp-2-window" --quiet "${set_small[@]}" \
    --set run.engine=optimistic --set run.optimism_window_us=50
  # run.engine: auto, the default (windows where allowed, Time Warp under the flow model).
  mpirun -np 2 "$bin" run "$cfg" -o "$tmp/$exp-2-auto" --quiet "${set_small[@]}" ${whatif[@]+"${whatif[@]}"}
  "$bin" graph "$cfg" -o "$tmp/$exp.h5" "${set_small[@]}" >/dev/null
  for run in 2-block 4-block 2-metis; do
    mpirun -np ${run%%-*} "$bin" run --graph "$tmp/$exp.h5" -o "$tmp/$exp-$run-graph" --quiet ${whatif[@]+"${whatif[@]}"} \
      --set run.engine=optimistic --set run.partition=${run#*-}
  done
done
/usr/bin/python3 - "$tmp" <<'PY'
import glob, json, os, sys
import h5py, numpy as np
d = sys.argv[1]
def summary(p):
    s = json.load(open(p)); s.pop("engine"); return s
def datasets(p):
    out = {}
    with h5py.File(p) as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.startswith("engine"):
                out[name] = obj[()]
        f.visititems(visit)
        out["summary-attrs"] = dict(f["summary"].attrs)
    return out
bad = 0
# Every experiment the loop above ran: each has a sequential reference run.
exps = sorted(os.path.basename(p)[:-len("-seq")] for p in glob.glob(f"{d}/*-seq"))
assert exps, "no runs found"
for exp in exps:
    ref_s = summary(f"{d}/{exp}-seq/summary.json")
    ref_h = datasets(f"{d}/{exp}-seq/results.h5")
    for run in sorted(glob.glob(f"{d}/{exp}-[0-9]*")):
        name = os.path.basename(run)
        s = summary(f"{run}/summary.json")
        h = datasets(f"{run}/results.h5")
        same = s == ref_s and h.keys() == ref_h.keys() and all(
            np.array_equal(h[k], ref_h[k]) if not isinstance(h[k], dict) else
            all(np.array_equal(h[k][a], ref_h[k][a]) for a in h[k]) for k in h)
        engine = json.load(open(f"{run}/summary.json"))["engine"]
        print(f"{name:28s} identical={same} processes={engine['processes']} "
              f"efficiency={engine['efficiency']:.4f} rolled_back={engine['events_rolled_back']}")
        bad += not same
        if name.endswith("window"):  # no event ran more than 50 us past GVT
            print(f"{'':28s} max run-ahead {engine['max_run_ahead_s'] * 1e6:.1f} us (window 50 us)")
            bad += not 0 < engine["max_run_ahead_s"] <= 50e-6
        if name.endswith("auto"):  # the default at np 2: the engine auto chose, by its rule
            want = "optimistic" if exp.endswith("-flow") else "conservative"
            print(f"{'':28s} auto ran {engine['kind']} (want {want})")
            bad += engine["kind"] != want
        if name.endswith("rep"):  # one replica replayed, said so
            rep_ok = engine["replicas"] == "representative" and \
                engine["replayed_ranks"] * engine["replica_count"] == s["world_size"]
            print(f"{'':28s} representative: {engine['replayed_ranks']} of {s['world_size']} ranks, "
                  f"{engine['replica_count']} replicas, ok={rep_ok}")
            bad += not rep_ok
sys.exit(1 if bad else 0)
PY
