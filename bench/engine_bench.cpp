// Graph build and replay throughput. Counters: template ops built per second, op instances
// replayed per second (every rank's ops), committed events per second.
#include <benchmark/benchmark.h>

#include "cost/cost_model.hpp"
#include "emu/emulation.hpp"
#include "pdes/sequential_engine.hpp"
#include "workload/transformer_builder.hpp"

using namespace scalescope;

namespace {

struct Job {
  workload::ModelSpec m;
  workload::ParallelPlan p;
  workload::TrainingSpec t;
  cost::ClusterSpec c;
};

/// GPT-3 175B on `gpus` A100 (TP 8, PP 8, DP = gpus/64, GBS 1536) with `layers` layers.
Job gpt3(std::int64_t gpus, std::int64_t layers, std::int64_t gbs) {
  Job j;
  j.m.num_layers = layers;
  j.m.hidden_size = 12288;
  j.m.num_attention_heads = 96;
  j.m.vocab_size = 50257;
  j.m.seq_length = 2048;
  j.p.tensor_model_parallel_size = 8;
  j.p.pipeline_model_parallel_size = 8;
  j.p.data_parallel_size = gpus / 64;
  j.p.sequence_parallel = true;
  j.p.recompute = workload::Recompute::Selective;
  j.p.use_distributed_optimizer = true;
  j.p.overlap_grad_reduce = true;
  j.t.global_batch_size = gbs;
  j.c.gpu = "A100-SXM4-80GB";
  j.c.gpus_per_node = 8;
  j.c.num_gpus = gpus;
  j.c.nvlink_bandwidth_GBps = 300;
  j.c.nvlink_latency_us = 1;
  j.c.nic_bandwidth_Gbps = 200;
  j.c.nics_per_node = 8;
  j.c.nic_latency_us = 5;
  return j;
}

std::size_t instances(const graph::SlicedGraph& g) {
  std::size_t n = 0;
  for (std::uint32_t r = 0; r < g.world_size; ++r) n += g.program_of(r).size();
  return n;
}

void BM_GraphBuild(benchmark::State& state) {
  Job j = gpt3(state.range(0), 96, 1536);
  std::size_t ops = 0;
  for (auto _ : state) {
    graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
    for (const auto& t : g.templates) ops += t.size();
    benchmark::DoNotOptimize(g);
  }
  state.counters["template_ops/s"] =
      benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GraphBuild)->Arg(1024)->Arg(8192)->Unit(benchmark::kMillisecond);

void BM_Replay(benchmark::State& state) {
  // 16 layers and 96 micro-batches per pipeline: 1/6 of the GPT-3 1,024-GPU run.
  Job j = gpt3(state.range(0), 16, 1536 * state.range(0) / 1024);
  graph::SlicedGraph g = workload::build_graph(j.m, j.p, j.t);
  cost::CostModel cost(j.c);
  emu::EmulationOptions opt;
  opt.coalesce_local_ops = state.range(1) != 0;
  double events = 0, ops = 0;
  for (auto _ : state) {
    emu::RunResults r = emu::emulate(g, cost, opt);
    events += static_cast<double>(r.engine.events_committed);
    ops += static_cast<double>(instances(g));
  }
  state.counters["events/s"] = benchmark::Counter(events, benchmark::Counter::kIsRate);
  state.counters["op_instances/s"] = benchmark::Counter(ops, benchmark::Counter::kIsRate);
  state.counters["events/op"] = events / ops;
}
BENCHMARK(BM_Replay)
    ->Args({256, 1})
    ->Args({256, 0})
    ->Args({1024, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
