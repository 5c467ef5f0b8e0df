// The conservative engine at whatever process count ctest starts this with (1, 2 and 4): PHOLD's
// history equals the sequential engine's (checksum and count) for windows of one tick and of
// many events, with ties; a send closer than the declared lookahead, or a handler's error, is
// thrown on every process with the sequential engine's message; a zero lookahead is refused.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "mpi_helpers.hpp"
#include "pdes/conservative_engine.hpp"
#include "pdes/partitioner.hpp"
#include "pdes/phold.hpp"

namespace scalescope::pdes {
namespace {

using emu::mpitest::world_size;

struct Result {
  std::uint64_t checksum = 0;
  ConservativeStats total;
};

Result run_conservative(const PholdParams& params, SimTime end, SimTime lookahead) {
  const auto owner =
      BlockPartitioner{}.assign(params.num_lps, static_cast<std::uint32_t>(world_size()), nullptr);
  std::vector<PholdLP> lps;
  lps.reserve(params.num_lps);
  ConservativeConfig config;
  config.lookahead = lookahead;
  ConservativeEngine engine(
      MPI_COMM_WORLD, owner,
      [&](LpId id) -> LogicalProcess* { return &lps.emplace_back(id, params); }, config);
  Result r;
  r.total = engine.total(engine.run(end));
  const std::uint64_t local = phold_checksum(lps);
  MPI_Allreduce(&local, &r.checksum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return r;
}

TEST(Conservative, PholdKeepsTheSequentialHistory) {
  struct Case {
    SimTime mean, lookahead, end;
  };
  // Lockstep (every delay exactly the lookahead: every window one instant, all of it tied) and
  // exponential delays over a lookahead of 4 ticks (windows of many events, ties at integers).
  for (const Case c : {Case{0, 10, 3000}, Case{3, 4, 600}, Case{1000, 100, 200000}}) {
    PholdParams p;
    p.num_lps = 16u * static_cast<std::uint32_t>(world_size());
    p.start_events = 4;
    p.remote = 0.5;
    p.mean = c.mean;
    p.lookahead = c.lookahead;
    const PholdRun reference = run_phold_sequential(p, c.end);
    const Result r = run_conservative(p, c.end, c.lookahead);
    EXPECT_EQ(r.checksum, reference.checksum) << "mean " << c.mean;
    EXPECT_EQ(r.total.events_processed, reference.stats.events_committed) << "mean " << c.mean;
    EXPECT_GT(r.total.windows, 0u);
    if (world_size() > 1) {
      EXPECT_GT(r.total.remote_messages, 0u);
    }
  }
}

TEST(Conservative, ASendCloserThanTheLookaheadIsAContractErrorEverywhere) {
  if (world_size() == 1) GTEST_SKIP() << "one process sends nothing to another process";
  PholdParams p;
  p.num_lps = 16u * static_cast<std::uint32_t>(world_size());
  p.remote = 0.5;
  p.mean = 0;
  p.lookahead = 10;  // every delay 10 ticks; the engine is told 11
  std::string error;
  try {
    run_conservative(p, 1000, 11);
  } catch (const ContractError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("closer than the model's lookahead of 11 ns"), std::string::npos) << error;
}

/// Throws InputError when it handles its event at `fail_at` (LP 1, the last process's when
/// there are several); LP 0 keeps sending itself events one tick apart.
class Failing final : public LogicalProcess {
 public:
  Failing(LpId id, SimTime fail_at) : id_(id), fail_at_(fail_at) {}
  void init(Context& ctx) override { ctx.send(id_, 1, 0, std::uint64_t{0}); }
  void forward(Event& e, Context& ctx) override {
    if (id_ == 1 && e.key.time == fail_at_)
      throw InputError(fmt::format("LP 1 failed at t={}", e.key.time));
    if (e.key.time < 100) ctx.send(id_, e.key.time + 1, 0, std::uint64_t{0});
  }
  void reverse(Event&, Context&) override {}
  void commit(const Event&) override {}

 private:
  LpId id_;
  SimTime fail_at_;
};

TEST(Conservative, AHandlersErrorIsThrownOnEveryProcess) {
  const auto size = static_cast<std::uint32_t>(world_size());
  std::vector<std::uint32_t> owner{0u, size - 1};
  std::vector<Failing> lps;
  lps.reserve(2);
  ConservativeConfig config;
  config.lookahead = 5;
  ConservativeEngine engine(
      MPI_COMM_WORLD, owner, [&](LpId id) -> LogicalProcess* { return &lps.emplace_back(id, 42); },
      config);
  std::string error;
  try {
    engine.run();
  } catch (const InputError& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "LP 1 failed at t=42");  // on every process
}

TEST(Conservative, AZeroLookaheadIsRefused) {
  std::vector<std::uint32_t> owner{0u};
  std::vector<Failing> lps;
  EXPECT_THROW(ConservativeEngine(
                   MPI_COMM_WORLD, owner,
                   [&](LpId id) -> LogicalProcess* { return &lps.emplace_back(id, 0); },
                   ConservativeConfig{}),
               ContractError);
}

}  // namespace
}  // namespace scalescope::pdes
