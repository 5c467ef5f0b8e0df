// PHOLD's committed history is the same under the optimistic engine at this process count (ctest
// runs 1, 2 and 4) as under the sequential engine, with block and METIS partitions, with and
// without forced late messages.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "pdes/optimistic_engine.hpp"
#include "pdes/partitioner.hpp"
#include "pdes/phold.hpp"

namespace scalescope::pdes {
namespace {

struct Case {
  const char* partition;
  std::uint32_t delay_every;
  double remote;
};

class PholdParallel : public ::testing::TestWithParam<Case> {};

TEST_P(PholdParallel, ChecksumEqualsSequential) {
  int me = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Case c = GetParam();
  PholdParams params;
  params.num_lps = 64u * static_cast<std::uint32_t>(size);
  params.start_events = 2;
  params.remote = c.remote;
  const SimTime end = phold_ticks(30.0, "end");
  // Every process computes the reference alone: the model does not depend on the partition.
  const PholdRun reference = run_phold_sequential(params, end);

  // A ring LP graph so METIS has edges to cut (PHOLD itself talks to everyone).
  LpGraph graph;
  for (LpId i = 0; i < params.num_lps; ++i) {
    graph.neighbours.push_back((i + 1) % params.num_lps);
    graph.weights.push_back(1);
    graph.offsets.push_back(static_cast<std::uint32_t>(graph.neighbours.size()));
  }
  const auto owner = make_partitioner(c.partition)
                         ->assign(params.num_lps, static_cast<std::uint32_t>(size), &graph);
  PholdLps lps(params, owner, me);
  OptimisticConfig config;
  config.gvt_interval = 256;
  config.batch_events = c.delay_every ? 2 : 64;
  config.delay_every = c.delay_every;
  OptimisticEngine engine(
      MPI_COMM_WORLD, owner, [&](LpId id) { return lps.make(id); }, config);
  const OptimisticStats total = engine.total(engine.run(end));
  EXPECT_EQ(lps.checksum(MPI_COMM_WORLD), reference.checksum);
  EXPECT_EQ(total.events_committed, reference.stats.events_committed);
  EXPECT_EQ(total.events_processed, total.events_committed + total.events_rolled_back);
  if (size > 1 && c.delay_every > 0) {
    EXPECT_GT(total.events_rolled_back, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Partitions, PholdParallel,
                         ::testing::Values(Case{"block", 0, 0.25}, Case{"metis", 0, 0.25},
                                           Case{"block", 2, 0.5}, Case{"metis", 3, 0.9}));

}  // namespace
}  // namespace scalescope::pdes
