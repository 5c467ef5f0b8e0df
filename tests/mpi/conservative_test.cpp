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
#include "pdes/sequential_engine.hpp"

namespace scalescope::pdes {
namespace {

using emu::mpitest::world_rank;
using emu::mpitest::world_size;

struct Result {
  std::uint64_t checksum = 0;
  ConservativeStats total;
};

Result run_conservative(const PholdParams& params, SimTime end, SimTime lookahead) {
  const auto owner =
      BlockPartitioner{}.assign(params.num_lps, static_cast<std::uint32_t>(world_size()), nullptr);
  PholdLps lps(params, owner, world_rank());
  ConservativeConfig config;
  config.lookahead = lookahead;
  ConservativeEngine engine(
      MPI_COMM_WORLD, owner, [&](LpId id) { return lps.make(id); }, config);
  Result r;
  r.total = engine.total(engine.run(end));
  r.checksum = lps.checksum(MPI_COMM_WORLD);
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

/// Workers and collectors, like ranks and a data-parallel communicator: a worker runs events
/// 1–7 ticks apart and on every third sends its collector a ping at its own instant (no
/// lookahead); the collector answers `reply_after` ticks later. Collectors run in the second
/// phase. Each LP hashes the keys it commits, in order.
struct Hub final : public LogicalProcess {
  Hub(LpId lp, std::uint32_t num_workers, std::uint32_t num_collectors, SimTime reply)
      : id(lp), workers(num_workers), collectors(num_collectors), reply_after(reply) {}
  void init(Context& ctx) override {
    if (id < workers) ctx.send(id, 1, 0, std::uint64_t{0});
  }
  void forward(Event& e, Context& ctx) override {
    ++count;
    if (id >= workers) {  // a collector: answer the ping
      ctx.send(e.key.src, e.key.time + reply_after, 0, std::uint64_t{1});
      return;
    }
    if (e.key.src != id || count > 400) return;  // a reply, or done
    const auto step = static_cast<SimTime>(1 + (id * 7 + count * 13) % 7);
    ctx.send(id, e.key.time + step, 0, std::uint64_t{0});
    if (count % 3 == 0) ctx.send(workers + id % collectors, e.key.time, 1, std::uint64_t{2});
  }
  void reverse(Event&, Context&) override {}
  void commit(const Event& e) override {
    hash = hash * 0x9E3779B97F4A7C15ull ^
           (static_cast<std::uint64_t>(e.key.time) << 20 ^ e.key.src << 8 ^ e.key.priority);
  }
  LpId id;
  std::uint32_t workers, collectors;
  SimTime reply_after;
  std::uint64_t count = 0, hash = 1;
};

TEST(Conservative, SecondPhaseLpsHearFromOtherProcessesAtTheSendersInstant) {
  const std::uint32_t workers = 12u * static_cast<std::uint32_t>(world_size()), collectors = 3;
  const std::uint32_t n = workers + collectors;
  auto run_all = [&](SimTime reply_after) {
    std::vector<Hub> lps;
    lps.reserve(n);
    // Workers in blocks over the processes, collectors on process 0: every collector hears
    // from every process.
    std::vector<std::uint32_t> owner(n, 0u);
    for (std::uint32_t w = 0; w < workers; ++w)
      owner[w] = w * static_cast<std::uint32_t>(world_size()) / workers;
    ConservativeConfig config;
    config.lookahead = reply_after;
    config.second_phase.assign(n, 0);
    for (std::uint32_t c = workers; c < n; ++c) config.second_phase[c] = 1;
    ConservativeEngine engine(
        MPI_COMM_WORLD, owner,
        [&](LpId id) -> LogicalProcess* {
          return &lps.emplace_back(id, workers, collectors, reply_after);
        },
        config);
    const ConservativeStats total = engine.total(engine.run());
    std::uint64_t local = 0, sum = 0;
    for (const Hub& h : lps) local += h.hash * (h.id + 1);
    MPI_Allreduce(&local, &sum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    return std::pair{sum, total.events_processed};
  };
  for (const SimTime reply_after : {1, 5, 40}) {
    std::vector<Hub> seq;
    seq.reserve(n);
    std::vector<LogicalProcess*> ptrs;
    for (LpId id = 0; id < n; ++id)
      ptrs.push_back(&seq.emplace_back(id, workers, collectors, reply_after));
    SequentialEngine reference(ptrs);
    const EngineStats stats = reference.run();
    std::uint64_t expected = 0;
    for (const Hub& h : seq) expected += h.hash * (h.id + 1);
    const auto [sum, events] = run_all(reply_after);
    EXPECT_EQ(sum, expected) << "reply after " << reply_after;
    EXPECT_EQ(events, stats.events_committed) << "reply after " << reply_after;
  }
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
