#include "pdes/phold.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "pdes/optimistic_engine.hpp"
#include "pdes/partitioner.hpp"

namespace scalescope::pdes {
namespace {

/// 64 LPs with 4 events each, ROSS's mean 1.0 and lookahead 0.1, 25 % remote.
PholdParams small() {
  PholdParams p;
  p.num_lps = 64;
  p.start_events = 4;
  p.remote = 0.25;
  p.mean = phold_ticks(1.0, "mean");
  p.lookahead = phold_ticks(0.1, "lookahead");
  p.seed = 7;
  return p;
}

const SimTime kEnd = phold_ticks(100.0, "end");

TEST(Phold, TicksPerUnit) {
  EXPECT_EQ(phold_ticks(1.0, "x"), 1'000'000);  // 10^6 ticks per unit
  EXPECT_EQ(phold_ticks(0.1, "x"), 100'000);
  EXPECT_EQ(phold_ticks(0.0, "x"), 0);
  EXPECT_THROW(phold_ticks(-1.0, "x"), InputError);
  EXPECT_THROW(phold_ticks(1e300, "x"), InputError);
}

TEST(Phold, SequentialRunIsDeterministic) {
  const PholdRun a = run_phold_sequential(small(), kEnd);
  const PholdRun b = run_phold_sequential(small(), kEnd);
  EXPECT_EQ(a.checksum, b.checksum);
  EXPECT_EQ(a.stats.events_committed, b.stats.events_committed);
  EXPECT_EQ(a.stats.end_time, b.stats.end_time);
}

TEST(Phold, ChecksumDependsOnSeed) {
  PholdParams other = small();
  other.seed = 8;
  EXPECT_NE(run_phold_sequential(small(), kEnd).checksum,
            run_phold_sequential(other, kEnd).checksum);
}

TEST(Phold, CommittedEventCountMatchesRenewalRate) {
  // Events never vanish or multiply: each of the 64 · 4 = 256 start events is a token that hops
  // (to its own or a random LP) after lookahead + Exp(mean), 0.1 + 1.0 = 1.1 units on average,
  // and its first event also comes lookahead + Exp(mean) after t = 0. So each token is a renewal
  // process with mean gap μ = 1.1 and standard deviation σ = 1.0, and by the renewal theorem
  // E[N(T)] = T/μ + (σ² − μ²)/(2μ²) + o(1) = 100/1.1 − 0.09 ≈ 90.8 per token, 23,250 in all.
  // Its standard deviation is √(256 · Tσ²/μ³) ≈ 139 events (0.6 %), so 10 % never fails by luck.
  const PholdRun run = run_phold_sequential(small(), kEnd);
  const double expected = 256.0 * 100.0 / 1.1;
  EXPECT_NEAR(static_cast<double>(run.stats.events_committed), expected, 0.10 * expected);
  EXPECT_LE(run.stats.end_time, kEnd);
}

TEST(Phold, RollbackCheckPassesAndChangesNothing) {
  PholdParams p = small();
  p.num_lps = 16;
  const SimTime end = phold_ticks(20.0, "end");
  const PholdRun checked = run_phold_sequential(p, end, /*rollback_check=*/true);
  const PholdRun plain = run_phold_sequential(p, end);
  EXPECT_GT(checked.stats.events_committed, 0u);
  EXPECT_EQ(checked.checksum, plain.checksum);
  EXPECT_EQ(checked.stats.events_committed, plain.stats.events_committed);
}

TEST(Phold, ZeroLookaheadKeepsTheEventOrderContract) {
  // Mean 2 ticks, no lookahead: 22 % of the delays round to 0 ticks (Exp(2) < 0.5 with
  // probability 1 − e^(−1/4)), which the model lifts to 1 tick, so every sent event sorts after
  // the event being handled and the engine's contract check stays quiet. The mean gap is then
  // about 2 + 0.22 ticks, ≈ 450 events per token up to t = 1000; 1000/3 is a loose floor.
  PholdParams p = small();
  p.mean = 2;
  p.lookahead = 0;
  const PholdRun run = run_phold_sequential(p, 1000, /*rollback_check=*/true);
  EXPECT_GT(run.stats.events_committed, 256u * 1000 / 3);
}

TEST(Phold, WithoutRemoteEventsEachLpIsIndependent) {
  // remote = 0: every event stays on its LP, so LP 3's committed history depends on the seed and
  // its id only, not on how many other LPs there are.
  PholdParams p = small();
  p.remote = 0;
  const SimTime end = phold_ticks(10.0, "end");
  auto history_of_lp3 = [&](std::uint32_t num_lps) {
    p.num_lps = num_lps;
    std::vector<PholdLP> lps = make_phold_lps(p);
    std::vector<LogicalProcess*> ptrs;
    for (PholdLP& lp : lps) ptrs.push_back(&lp);
    SequentialEngine(ptrs).run(end);
    return std::make_pair(lps[3].history_hash(), lps[3].committed());
  };
  const auto four = history_of_lp3(4);
  EXPECT_GT(four.second, 0u);
  EXPECT_EQ(four, history_of_lp3(32));
}

TEST(Phold, OptimisticEngineMatchesSequential) {
  // Runs at whatever process count the test binary was started with; every process computes the
  // sequential reference on its own.
  const PholdParams p = small();
  const SimTime end = phold_ticks(20.0, "end");
  const PholdRun reference = run_phold_sequential(p, end);

  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const auto owner =
      BlockPartitioner{}.assign(p.num_lps, static_cast<std::uint32_t>(size), nullptr);
  std::vector<PholdLP> lps;
  lps.reserve(p.num_lps);
  OptimisticConfig config;
  config.gvt_interval = 64;
  OptimisticEngine engine(
      MPI_COMM_WORLD, owner, [&](LpId id) -> LogicalProcess* { return &lps.emplace_back(id, p); },
      config);
  const OptimisticStats total = engine.total(engine.run(end));
  const std::uint64_t local_sum = phold_checksum(lps);
  std::uint64_t checksum = 0;
  MPI_Allreduce(&local_sum, &checksum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(checksum, reference.checksum);
  EXPECT_EQ(total.events_committed, reference.stats.events_committed);
}

}  // namespace
}  // namespace scalescope::pdes
