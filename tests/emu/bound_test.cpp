// The replay-free lower bound of the layout search (emu/bound.hpp): a bound on every layout,
// exact where nothing but peers could delay a rank.
#include "emu/bound.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "emu/emulation.hpp"
#include "test_costs.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::emu {
namespace {

graph::SlicedGraph job(std::int64_t tp, std::int64_t pp, std::int64_t dp, std::int64_t global) {
  const workload::ModelSpec m = testing::small_dense_model();
  workload::ParallelPlan p;
  p.tensor_model_parallel_size = tp;
  p.pipeline_model_parallel_size = pp;
  p.data_parallel_size = dp;
  p.overlap_grad_reduce = true;
  workload::TrainingSpec t;
  t.micro_batch_size = 1;
  t.global_batch_size = global;
  return workload::build_graph(m, p, t);
}

Costs costs(bool host) {
  return testing::member_sensitive_costs(host);
}

SimTime largest(const std::vector<AloneBound>& b) {
  SimTime t = 0;
  for (const AloneBound& x : b) t = std::max(t, x.finish);
  return t;
}

TEST(AloneBound, IsTheReplayWhereEveryRankIsAlike) {
  // TP 2 · DP 4, no pipeline: every rank runs the same program on communicators of the same
  // shape, so all members of each collective issue it at the same time and waiting for peers
  // adds nothing; the rank alone is the replay, to the nanosecond, with or without the host.
  for (const bool host : {false, true}) {
    const graph::SlicedGraph g = job(2, 1, 4, 16);
    const Costs c = costs(host);
    const ModelData data(g, c, true);
    const std::vector<AloneBound> b = alone_bounds(data);
    const RunResults r = emulate(g, c, EmulationOptions{});
    EXPECT_EQ(largest(b), r.summary.iteration_time) << "host " << host;
    EXPECT_EQ(b[0].microbatches, 4u);  // global 16 / DP 4
    EXPECT_GT(b[0].min_microbatch_span, 0);
  }
}

TEST(AloneBound, StaysBelowThePipelinedReplay) {
  // PP 2 and PP 4: a stage waits for its neighbour's activations (fill and drain), which the
  // rank alone does not, so the bound is below the replay and still above its compute alone.
  for (const std::int64_t pp : {2, 4}) {
    const graph::SlicedGraph g = job(1, pp, 2, 16);
    const Costs c = costs(true);
    const ModelData data(g, c, true);
    const std::vector<AloneBound> b = alone_bounds(data);
    const RunResults r = emulate(g, c, EmulationOptions{});
    EXPECT_LT(largest(b), r.summary.iteration_time) << "pp " << pp;
    for (std::size_t k = 0; k < b.size(); ++k) {
      SimTime compute = 0;
      for (std::uint32_t i = 0; i < g.templates[k].size(); ++i)
        if (g.templates[k].ops[i].stream == graph::Stream::Compute) compute += data.durations[k][i];
      EXPECT_GE(b[k].finish, compute) << "pp " << pp << " class " << k;
    }
  }
}

TEST(AloneBound, MissingMicroBatchesAddTheirLeastSpan) {
  // The search builds few micro-batches and adds, per missing one, the least compute-stream
  // span of a built one: built with 2 of 8, that extrapolation stays below the replay of all 8
  // (and above the bound of the 2 built).
  const graph::SlicedGraph few = job(2, 1, 2, 4), all = job(2, 1, 2, 16);
  const Costs c = costs(true);
  const ModelData data(few, c, true);
  const std::vector<AloneBound> b = alone_bounds(data);
  ASSERT_EQ(b[0].microbatches, 2u);
  const SimTime extrapolated = b[0].finish + 6 * b[0].min_microbatch_span;
  const RunResults r = emulate(all, c, EmulationOptions{});
  EXPECT_LE(extrapolated, r.summary.iteration_time);
  EXPECT_GT(extrapolated, b[0].finish);
}

}  // namespace
}  // namespace scalescope::emu
