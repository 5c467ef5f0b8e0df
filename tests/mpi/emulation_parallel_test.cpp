// The optimistic engine reproduces the sequential engine's results bit for bit, at every process
// count this executable is started with (ctest runs it at 1, 2 and 4), for block and METIS
// partitions, and also when late messages force rollbacks and anti-messages.
#include <gtest/gtest.h>
#include <mpi.h>

#include "emu/emulation.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::emu {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

graph::SlicedGraph mixed_graph(workload::Recompute recompute) {
  workload::ModelSpec m;
  m.num_layers = 4;
  m.hidden_size = 512;
  m.num_attention_heads = 8;
  m.num_query_groups = 4;
  m.vocab_size = 1000;
  m.seq_length = 256;
  m.gated_linear_unit = true;
  workload::ParallelPlan p;
  p.tensor_model_parallel_size = 2;
  p.pipeline_model_parallel_size = 2;
  p.data_parallel_size = 2;
  p.sequence_parallel = true;
  p.use_distributed_optimizer = true;
  p.overlap_grad_reduce = true;
  p.recompute = recompute;
  workload::TrainingSpec t;
  t.global_batch_size = 8;
  return workload::build_graph(m, p, t);
}

/// Deterministic costs that vary per op, so ties are rare but possible.
Costs test_costs() {
  Costs c;
  c.compute = [](const graph::Op& op) -> SimTime {
    return 700 + static_cast<SimTime>(op.flops / 2e5 + op.mem_bytes / 2e3);
  };
  c.collective = [](graph::OpKind k, double bytes, const cost::CommShape& s) -> SimTime {
    return 2500 +
           static_cast<SimTime>(bytes / 1e3) * (k == graph::OpKind::AllReduce ? 2 : 1) * s.nodes;
  };
  c.p2p = [](double bytes, bool) -> SimTime { return 1500 + static_cast<SimTime>(bytes / 4e3); };
  c.shape = [](const std::uint32_t* b, const std::uint32_t* e) {
    const auto n = static_cast<std::uint32_t>(e - b);
    return cost::CommShape{n, b[n - 1] / 4 - b[0] / 4 + 1, std::min(n, 4u)};
  };
  c.gpu = "test";
  c.peak_flops = 1e12;
  return c;
}

void expect_identical(const RunResults& a, const RunResults& b) {
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    EXPECT_EQ(a.ranks[r].finish, b.ranks[r].finish) << "rank " << r;
    EXPECT_EQ(a.ranks[r].compute, b.ranks[r].compute) << "rank " << r;
    EXPECT_EQ(a.ranks[r].exposed_tp, b.ranks[r].exposed_tp) << "rank " << r;
    EXPECT_EQ(a.ranks[r].exposed_pp, b.ranks[r].exposed_pp) << "rank " << r;
    EXPECT_EQ(a.ranks[r].exposed_dp, b.ranks[r].exposed_dp) << "rank " << r;
    EXPECT_EQ(a.ranks[r].other_wait, b.ranks[r].other_wait) << "rank " << r;
    EXPECT_EQ(a.ranks[r].peak_memory, b.ranks[r].peak_memory) << "rank " << r;
  }
  ASSERT_EQ(a.timelines.size(), b.timelines.size());
  for (const auto& [rank, tl] : a.timelines) {
    const auto& other = b.timelines.at(rank);
    ASSERT_EQ(tl.size(), other.size());
    for (std::size_t i = 0; i < tl.size(); ++i) {
      EXPECT_EQ(tl[i].start, other[i].start);
      EXPECT_EQ(tl[i].end, other[i].end);
      EXPECT_EQ(tl[i].op, other[i].op);
    }
  }
  for (const auto& [rank, mem] : a.memory) {
    const auto& other = b.memory.at(rank);
    ASSERT_EQ(mem.size(), other.size());
    for (std::size_t i = 0; i < mem.size(); ++i) {
      EXPECT_EQ(mem[i].time, other[i].time);
      EXPECT_EQ(mem[i].live, other[i].live);
    }
  }
  EXPECT_EQ(a.summary.iteration_time, b.summary.iteration_time);
  EXPECT_EQ(a.engine.events_committed, b.engine.events_committed);
}

class OptimisticMatchesSequential : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimisticMatchesSequential, OnAMixedTpPpDpJob) {
  const graph::SlicedGraph g = mixed_graph(workload::Recompute::Selective);
  EmulationOptions opt;
  opt.trace_ranks = {0, 5};
  const RunResults seq = emulate(g, test_costs(), opt);
  opt.engine = EngineKind::Optimistic;
  opt.partition = GetParam();
  opt.optimistic.gvt_interval = 64;
  const RunResults par = emulate_parallel(g, test_costs(), opt, MPI_COMM_WORLD);
  if (world_rank() == 0) expect_identical(seq, par);
  EXPECT_GE(par.engine.events_processed, par.engine.events_committed);
}

TEST_P(OptimisticMatchesSequential, WithForcedStragglers) {
  // Hold back every second partial batch and make batches tiny, so remote events arrive after
  // their receivers have run ahead: rollbacks and anti-messages must happen (with more than one
  // process) and the committed results must not change.
  const graph::SlicedGraph g = mixed_graph(workload::Recompute::Full);
  EmulationOptions opt;
  opt.trace_ranks = {3};
  const RunResults seq = emulate(g, test_costs(), opt);
  opt.engine = EngineKind::Optimistic;
  opt.partition = GetParam();
  opt.optimistic.gvt_interval = 100000;
  opt.optimistic.batch_events = 2;
  opt.optimistic.delay_every = 2;
  const RunResults par = emulate_parallel(g, test_costs(), opt, MPI_COMM_WORLD);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) {
    EXPECT_GT(par.engine.events_rolled_back, 0u);
  }
  if (world_rank() == 0) expect_identical(seq, par);
}

INSTANTIATE_TEST_SUITE_P(Partitions, OptimisticMatchesSequential,
                         ::testing::Values(std::string("block"), std::string("metis")));

TEST(RollbackCheck, EmulationLpsReverseExactly) {
  // ROSS-style check mode: every event forward, reverse, compare state, then forward again.
  for (auto rc : {workload::Recompute::None, workload::Recompute::Full}) {
    const graph::SlicedGraph g = mixed_graph(rc);
    for (bool coalesce : {true, false}) {
      EmulationOptions opt;
      opt.coalesce_local_ops = coalesce;
      opt.rollback_check = true;
      bool passed = true;
      try {
        emulate(g, test_costs(), opt);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        passed = false;
      }
      EXPECT_TRUE(passed);
    }
  }
}

}  // namespace
}  // namespace scalescope::emu
