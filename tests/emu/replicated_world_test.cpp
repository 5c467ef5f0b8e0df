// graph::mesh_groups and graph::replicated_world with given groups (the sandbox program's
// iteration run by every rank, app/sandbox_program.cpp): groups by hand.
#include <gtest/gtest.h>

#include <vector>

#include "emu/emulation.hpp"
#include "graph/expand.hpp"

namespace scalescope::graph {
namespace {

using Groups = std::vector<std::vector<std::uint32_t>>;

TEST(MeshGroups, TranslatesOfADeviceMeshDimension) {
  // A (4, 2) mesh over 8 ranks: its "tp" groups (stride 1) and "dp" groups (stride 2).
  EXPECT_EQ(mesh_groups({0, 1}, 8), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(mesh_groups({1, 3, 5, 7}, 8), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  // A (2, 2, 2) mesh's middle dimension: stride 2, blocks of 4.
  EXPECT_EQ(mesh_groups({4, 6}, 8), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh_groups({0, 1, 2, 3, 4, 5, 6, 7}, 8), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  // Not of that form: unequal spacing, a size that does not divide the world, a group that
  // straddles its block.
  EXPECT_TRUE(mesh_groups({0, 2, 5}, 8).empty());
  EXPECT_TRUE(mesh_groups({0, 1, 2}, 8).empty());
  EXPECT_TRUE(mesh_groups({2, 4}, 8).empty());
}

TEST(ReplicatedWorld, EachRoleItsOwnGroups) {
  // Every rank all-reduces 1 MiB over its TP pair, then 1 MiB over its DP group of 4: the
  // groups are the given ones, and the pair's all-reduce ends before the DP one starts.
  RankProgram p;
  p.name = "program";
  Op tp;
  tp.kind = OpKind::AllReduce;
  tp.role = CommRole::Tp;
  tp.stream = stream_of(CommRole::Tp);
  tp.name = OpName::TpAllReduce;
  tp.comm_bytes = 1 << 20;
  Op dp = tp;
  dp.role = CommRole::Dp;
  dp.stream = stream_of(CommRole::Dp);
  dp.name = OpName::DpAllReduce;
  const std::uint32_t a = p.add(tp, {});
  p.add(dp, {a});
  const SlicedGraph g = replicated_world(
      p, 8, {{CommRole::Tp, mesh_groups({0, 1}, 8)}, {CommRole::Dp, mesh_groups({0, 2, 4, 6}, 8)}});
  ASSERT_EQ(g.comms.size(), 6u);
  for (std::uint32_t r = 0; r < 8; ++r) {
    const auto t = static_cast<std::uint32_t>(g.comm_of(r, CommRole::Tp));
    const auto d = static_cast<std::uint32_t>(g.comm_of(r, CommRole::Dp));
    EXPECT_EQ(std::vector<std::uint32_t>(g.comms.members_begin(t), g.comms.members_end(t)),
              (std::vector<std::uint32_t>{r & ~1u, r | 1u}));
    EXPECT_EQ(std::vector<std::uint32_t>(g.comms.members_begin(d), g.comms.members_end(d)),
              (std::vector<std::uint32_t>{r & 1u, (r & 1u) + 2, (r & 1u) + 4, (r & 1u) + 6}));
  }
  EXPECT_EQ(comm_kind_of(CommRole::Tp), CommKind::TpGroup);
  EXPECT_EQ(comm_kind_of(CommRole::Dp), CommKind::DpGroup);
}

}  // namespace
}  // namespace scalescope::graph
