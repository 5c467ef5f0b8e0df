// The optimistic engine reproduces the sequential engine's results bit for bit, at every process
// count this executable is started with (ctest runs it at 1, 2 and 4), for block and METIS
// partitions, and also when late messages force rollbacks and anti-messages.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>

#include "emu/emulation.hpp"
#include "mpi_helpers.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::emu {
namespace {

using namespace mpitest;

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
  // Every processed event ended committed or rolled back.
  EXPECT_EQ(par.engine.events_processed,
            par.engine.events_committed + par.engine.events_rolled_back);
}

TEST_P(OptimisticMatchesSequential, WithForcedStragglers) {
  // Hold back every second partial batch and make batches tiny, so remote events arrive after
  // their receivers have run ahead, and the committed results must not change. METIS cuts
  // pipelines, so rollbacks happen there with more than one process; whether one happens in a
  // given run still depends on the processes' relative speed (a loaded CI machine once ran a
  // whole emulation without one), so the run is repeated, up to eight times, until one rolled
  // back (the total is the same on every process, so all stop together), and every run must
  // match the sequential one. The block partition gives each process whole model replicas that
  // meet only in DP collectives: stragglers are possible there, but not counted
  // (time_warp_test forces them under block partitions on PHOLD).
  const graph::SlicedGraph g = mixed_graph(workload::Recompute::Full);
  EmulationOptions opt;
  opt.trace_ranks = {3};
  const RunResults seq = emulate(g, test_costs(), opt);
  opt.engine = EngineKind::Optimistic;
  opt.partition = GetParam();
  opt.optimistic.gvt_interval = 100000;
  opt.optimistic.batch_events = 2;
  opt.optimistic.delay_every = 2;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const bool want_rollbacks = size > 1 && GetParam() == "metis";
  std::uint64_t rolled_back = 0;
  for (int attempt = 0; attempt < (want_rollbacks ? 8 : 1) && rolled_back == 0; ++attempt) {
    const RunResults par = emulate_parallel(g, test_costs(), opt, MPI_COMM_WORLD);
    rolled_back = par.engine.events_rolled_back;
    if (world_rank() == 0) expect_identical(seq, par);
  }
  if (want_rollbacks) {
    EXPECT_GT(rolled_back, 0u);
  }
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
