// The symmetry fast path (run.replicas: representative): which ranks it replays, that it gives
// the full replay's results, and where it must refuse.
#include "emu/replicas.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>

#include <string>

#include "core/error.hpp"
#include "emu/emulation.hpp"
#include "test_costs.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::emu {
namespace {

/// TP 2 · PP 2 · DP `dp` (16 ranks by default), `global` / `dp` micro-batches per replica (4).
graph::SlicedGraph dense_job(workload::RankLayout& layout, std::int64_t dp = 4,
                             std::int64_t global = 16) {
  const workload::ModelSpec m = testing::small_dense_model();
  workload::ParallelPlan p;
  p.tensor_model_parallel_size = 2;
  p.pipeline_model_parallel_size = 2;
  p.data_parallel_size = dp;
  workload::TrainingSpec t;
  t.micro_batch_size = 1;
  t.global_batch_size = global;
  layout = workload::layout_of(p);
  return workload::build_graph(m, p, t);
}

using testing::member_sensitive_costs;

TEST(Replicas, EachRankMapsToItsTensorAndPipelinePositionInReplicaZero) {
  // Replicas are the DP ranks' model copies: rank (tp, dp, pp) ↔ rank (tp, 0, pp), so replica
  // 0 holds tp · pp = 4 ranks and there are dp = 4 replicas.
  workload::RankLayout lay;
  const graph::SlicedGraph g = dense_job(lay);
  const ReplicaMap map = representative_replicas(g, member_sensitive_costs(), false);
  EXPECT_EQ(map.replicas, 4u);
  EXPECT_EQ(map.active_ranks, 4u);
  for (std::int64_t pp = 0; pp < 2; ++pp)
    for (std::int64_t dp = 0; dp < 4; ++dp)
      for (std::int64_t tp = 0; tp < 2; ++tp) {
        const std::uint32_t r = lay.rank(tp, 0, dp, pp);
        EXPECT_EQ(map.rep[r], lay.rank(tp, 0, 0, pp)) << "rank " << r;
        EXPECT_EQ(map.is_active(r), dp == 0) << "rank " << r;
      }
  // Every DP group has a member in replica 0, so every one runs; TP groups and pipeline pairs
  // run only in replica 0.
  std::uint32_t dp_groups = 0, running = 0;
  for (std::uint32_t c = 0; c < g.comms.size(); ++c) {
    dp_groups += g.comms.kind[c] == graph::CommKind::DpGroup;
    running += map.is_active(g.world_size + c);
    if (g.comms.kind[c] == graph::CommKind::DpGroup) {
      EXPECT_TRUE(map.is_active(g.world_size + c));
    }
  }
  EXPECT_EQ(dp_groups, 4u);  // one per (tp, pp) position
  EXPECT_LT(running, g.comms.size());
}

TEST(Replicas, TheRepresentativeReplayGivesTheFullReplaysResults) {
  workload::RankLayout lay;
  const graph::SlicedGraph g = dense_job(lay);
  const Costs c = member_sensitive_costs();
  EmulationOptions full;
  full.trace_ranks = {0, 15};  // rank 15 = (tp 1, dp 3, pp 1): outside replica 0
  EmulationOptions rep = full;
  rep.representative_replicas = true;
  const RunResults a = emulate(g, c, full);
  const RunResults b = emulate(g, c, rep);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    const RankResult &x = a.ranks[r], &y = b.ranks[r];
    EXPECT_EQ(x.finish, y.finish) << r;
    EXPECT_EQ(x.compute, y.compute) << r;
    EXPECT_EQ(x.exposed_dp, y.exposed_dp) << r;
    EXPECT_EQ(x.exposed_tp, y.exposed_tp) << r;
    EXPECT_EQ(x.exposed_pp, y.exposed_pp) << r;
    EXPECT_EQ(x.bubble, y.bubble) << r;
    EXPECT_EQ(x.straggler_wait, y.straggler_wait) << r;
    EXPECT_EQ(x.other_wait, y.other_wait) << r;
    EXPECT_EQ(x.peak_memory, y.peak_memory) << r;
    EXPECT_EQ(x.pp_stage, y.pp_stage) << r;
  }
  EXPECT_GT(a.ranks[15].exposed_dp + a.ranks[15].bubble + a.ranks[15].straggler_wait,
            0);  // the DP reduction is waited for
  EXPECT_EQ(a.summary.iteration_time, b.summary.iteration_time);
  ASSERT_EQ(b.timelines.size(), 2u);  // the traced ranks only
  for (std::uint32_t r : {0u, 15u}) {
    ASSERT_EQ(a.timelines.at(r).size(), b.timelines.at(r).size()) << r;
    for (std::size_t i = 0; i < a.timelines.at(r).size(); ++i) {
      EXPECT_EQ(a.timelines.at(r)[i].start, b.timelines.at(r)[i].start);
      EXPECT_EQ(a.timelines.at(r)[i].end, b.timelines.at(r)[i].end);
    }
  }
  ASSERT_EQ(a.critical_path.segments.size(), b.critical_path.segments.size());
  for (std::size_t i = 0; i < a.critical_path.segments.size(); ++i) {
    EXPECT_EQ(a.critical_path.segments[i].rank, b.critical_path.segments[i].rank);
    EXPECT_EQ(a.critical_path.segments[i].end, b.critical_path.segments[i].end);
  }
  // One replica of four and the DP collectives: fewer than a third of the full replay's events.
  EXPECT_EQ(b.engine.replicas, "representative");
  EXPECT_EQ(b.engine.replayed_ranks, 4u);
  EXPECT_EQ(a.engine.replicas, "all");
  EXPECT_LT(3 * b.engine.events_committed, a.engine.events_committed);
  const ReplicaMap map = representative_replicas(g, c, false);
  EXPECT_EQ(b.engine.events_committed, expected_events(g, true, 0, &map.active));
}

TEST(Replicas, CommunicatorsOnDifferentNodeShapesAreNotSymmetric) {
  // Replica 3's TP groups span two nodes, replica 0's one: their collectives cost differently.
  workload::RankLayout lay;
  const graph::SlicedGraph g = dense_job(lay);
  Costs c = member_sensitive_costs();
  c.shape = [&](const std::uint32_t* b, const std::uint32_t* e) {
    const bool far = *b == lay.rank(0, 0, 3, 0);
    return cost::CommShape{static_cast<std::uint32_t>(e - b), far ? 2u : 1u, 1};
  };
  try {
    (void)representative_replicas(g, c, false);
    FAIL() << "an asymmetric communicator was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("run.replicas: representative"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("spans the nodes differently"), std::string::npos)
        << e.what();
  }
}

TEST(Replicas, PerRankDurationsAreRefused) {
  // A slow GPU or a sandbox rank: its replica differs from the others.
  workload::RankLayout lay;
  const graph::SlicedGraph g = dense_job(lay);
  EmulationOptions o;
  o.representative_replicas = true;
  o.rank_durations[5] = std::vector<SimTime>(g.program_of(5).ops.size(), 7);
  EXPECT_THROW((void)emulate(g, member_sensitive_costs(), o), InputError);
}

TEST(Partition, DataParallelGroupsAreDealtOverTheProcesses) {
  // TP 2 · PP 2 · DP 16: 16 replicas of 4 ranks, 4 DP groups of 16 members. Blocks of replicas
  // give process 0 replicas 0–7 and process 1 replicas 8–15; the k-th DP group goes to process
  // k mod 2 (each has a member on both), two each, instead of all four on the first replicas'.
  workload::RankLayout lay;
  const graph::SlicedGraph g = dense_job(lay, 16, 32);
  const std::vector<std::uint32_t> owner = partition_lps(g, 2, "block");
  std::array<int, 2> dp_groups{};
  std::uint32_t k = 0;
  for (std::uint32_t c = 0; c < g.comms.size(); ++c) {
    if (g.comms.kind[c] != graph::CommKind::DpGroup) continue;
    EXPECT_EQ(owner[g.world_size + c], k % 2) << "DP group " << k;
    ++dp_groups[owner[g.world_size + c]];
    ++k;
  }
  EXPECT_EQ(k, 4u);
  EXPECT_EQ(dp_groups[0], 2);
  EXPECT_EQ(dp_groups[1], 2);
  EXPECT_EQ(std::count(owner.begin(), owner.begin() + g.world_size, 0u), 32);  // 8 replicas each
}

}  // namespace
}  // namespace scalescope::emu
