#!/usr/bin/env bash
# ROSS-style check mode on the emulation LPs of every shipped experiment: each event is run
# forward, reversed and the LP state compared byte for byte before it runs for real. The check
# copies a rank's whole state twice per event, so the large experiments run with fewer layers
# and micro-batches (the same op kinds, schedule phases and communicators).
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
e=$repo/inputs/experiments
"$bin" run "$e/quickstart.yaml" -o "$tmp/a" --quiet --rollback-check
"$bin" run "$e/llama3-8b-hf.yaml" -o "$tmp/b" --quiet --rollback-check \
  --set model.num_layers=4 --set training.global_batch_size=32
"$bin" run "$e/gpt3-175b-1024.yaml" -o "$tmp/c" --quiet --rollback-check \
  --set model.num_layers=16 --set training.global_batch_size=128
# The interleaved schedule; context parallelism with TP overlap and fp8.
"$bin" run "$e/quickstart.yaml" -o "$tmp/e" --quiet --rollback-check --set parallel.vpp=4
"$bin" run "$e/quickstart.yaml" -o "$tmp/f" --quiet --rollback-check --set parallel.cp=2 \
  --set parallel.dp=4 --set parallel.tp_comm_overlap=true --set training.precision=fp8
# The flow model's fabric LP (state saving, not reverse computation) over an oversubscribed
# fabric, with what-ifs.
"$bin" run "$e/llama3-70b-1k.yaml" -o "$tmp/g" --quiet --rollback-check \
  --set training.global_batch_size=16 --set cluster.num_gpus=64 --set parallel.dp=2 \
  --set run.trace_ranks=[0] --set network.model=flow --set cluster.topology.nodes_per_leaf=2 \
  --set cluster.topology.leaf_oversubscription=4 \
  --whatif 'failed_link: {leaf: 0, spine: 1}' --whatif 'slow_gpu: {ranks: [3], factor: 1.2}'
# The check must not change results: compare with a normal run.
"$bin" run "$e/quickstart.yaml" -o "$tmp/d" --quiet
/usr/bin/python3 -c "
import json,sys
a=json.load(open('$tmp/a/summary.json')); d=json.load(open('$tmp/d/summary.json'))
a.pop('engine'); d.pop('engine'); sys.exit(0 if a==d else 1)"
echo ok
