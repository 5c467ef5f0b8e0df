#include "cost/topology.hpp"

#include <gtest/gtest.h>

#include <set>

#include "core/error.hpp"

namespace scalescope::cost {
namespace {

/// 4 nodes of 8 GPUs and 8 NICs, rail-optimised, two nodes per leaf, 4 spines, 1:2 at the leaf.
ClusterSpec small_cluster() {
  ClusterSpec c;
  c.gpu = "H100";
  c.gpus_per_node = 8;
  c.nics_per_node = 8;
  c.num_gpus = 32;
  c.nic_bandwidth_Gbps = 400;
  c.nvlink_bandwidth_GBps = 450;
  return c;
}

TopologySpec small_topology() {
  TopologySpec t;
  t.nodes_per_leaf = 2;
  t.spines_per_pod = 4;
  t.leaf_oversubscription = 2;
  return t;
}

TEST(Fabric, LinkCountsAndCapacitiesFollowTheTopology) {
  const Fabric f(small_cluster(), small_topology(), 50e9);
  // 32 NICs up and down; 2 leaf groups × 8 rails = 16 leaves, each with 4 uplinks and 4
  // downlinks; one pod, so no core links.
  EXPECT_EQ(f.num_leaves(), 16u);
  EXPECT_EQ(f.num_links(), 32u + 32u + 64u + 64u);
  EXPECT_DOUBLE_EQ(f.capacity(0), 50e9);
  // A rail leaf serves 2 NICs of 50 GB/s; at 1:2 it has 50 GB/s up, over 4 spines.
  EXPECT_DOUBLE_EQ(f.capacity(f.leaf_uplink(0, 0)), 2 * 50e9 / 2 / 4);
}

TEST(Fabric, SameRailNeighboursMeetAtTheirLeafOthersCrossASpine) {
  const Fabric f(small_cluster(), small_topology(), 50e9);
  std::vector<LinkId> r;
  // Node 0 and node 1, rail 3: one leaf.
  EXPECT_EQ(f.route(3, 8 + 3, r), 0.0);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(f.level(r[0]), LinkLevel::NicUp);
  EXPECT_EQ(f.level(r[1]), LinkLevel::NicDown);
  // Node 0 → node 2 (other leaf group), and rail 3 → rail 4 (other rail): up, spine, down.
  for (auto [src, dst] : {std::pair{3u, 16u + 3u}, std::pair{3u, 8u + 4u}}) {
    r.clear();
    f.route(src, dst, r);
    ASSERT_EQ(r.size(), 4u);
    EXPECT_EQ(f.level(r[1]), LinkLevel::LeafUp);
    EXPECT_EQ(f.level(r[2]), LinkLevel::SpineDown);
  }
}

TEST(Fabric, EcmpIsDeterministicAndUsesEverySpine) {
  const Fabric f(small_cluster(), small_topology(), 50e9);
  std::set<LinkId> uplinks;
  for (std::uint32_t src = 0; src < 16; ++src)
    for (std::uint32_t dst = 16; dst < 32; ++dst) {
      std::vector<LinkId> a, b;
      f.route(src, dst, a);
      f.route(src, dst, b);
      ASSERT_EQ(a, b);
      if (a.size() == 4) uplinks.insert(a[1]);
    }
  // 16 leaves (one per node group and rail) × 4 spines; the first group's 8 leaves send here.
  EXPECT_EQ(uplinks.size(), 8u * 4u);
}

TEST(Fabric, AFailedLinkIsRoutedAroundAndAllFailedIsAnError) {
  Fabric f(small_cluster(), small_topology(), 50e9);
  std::vector<LinkId> before;
  f.route(3, 16 + 3, before);
  f.fail_link(before[1]);
  std::vector<LinkId> after;
  f.route(3, 16 + 3, after);
  ASSERT_EQ(after.size(), 4u);
  EXPECT_NE(after[1], before[1]);
  EXPECT_EQ(f.leaf_of_nic(3), f.leaf_of_nic(3));  // same leaf, another spine
  for (std::uint32_t k = 0; k < 4; ++k) f.fail_link(f.leaf_uplink(f.leaf_of_nic(3), k));
  std::vector<LinkId> none;
  EXPECT_THROW(f.route(3, 16 + 3, none), InputError);
}

TEST(Fabric, ThreeTiersCrossACoreBetweenPods) {
  ClusterSpec c = small_cluster();
  TopologySpec t = small_topology();
  t.leaves_per_pod = 8;  // the 8 rail leaves of one node group form a pod
  t.cores_per_plane = 2;
  t.spine_oversubscription = 7;
  t.spine_latency_us = 0.5;
  t.core_latency_us = 1.0;
  const Fabric f(c, t, 50e9);
  std::vector<LinkId> r;
  // Node 0 → node 2: other pod: up, leaf up, spine up, core down, spine down, down; the extra
  // latency is two spines and a core: 2 × 0.5 + 1 µs.
  EXPECT_DOUBLE_EQ(f.route(0, 16, r), 2000.0);
  ASSERT_EQ(r.size(), 6u);
  EXPECT_EQ(f.level(r[2]), LinkLevel::SpineUp);
  EXPECT_EQ(f.level(r[3]), LinkLevel::CoreDown);
  // A spine's pod-facing capacity: 8 leaves × its 12.5 GB/s link from each, 1:7, over 2 cores.
  EXPECT_DOUBLE_EQ(f.capacity(r[2]), 8 * (2 * 50e9 / 2 / 4) / 7 / 2);
}

TEST(Fabric, ImpossibleTopologiesAreInputErrors) {
  TopologySpec t = small_topology();
  t.leaves_per_pod = 3;  // not a multiple of the 8 rails
  EXPECT_THROW(Fabric(small_cluster(), t, 50e9), InputError);
  t = small_topology();
  t.leaf_oversubscription = 0.5;
  EXPECT_THROW(Fabric(small_cluster(), t, 50e9), InputError);
}

TEST(Demand, ARingUsesEachNodesRailOnceEachWayAndATreeItsParentAndChildren) {
  ClusterSpec c = small_cluster();
  const Fabric f(c, small_topology(), 50e9);
  // Ranks 3, 11, 19, 27: local GPU 3 of nodes 0..3, one channel on rail 3.
  const std::uint32_t members[] = {3, 11, 19, 27};
  const Demand ring = demand_of(f, FlowPattern::Ring, members, 4, 0);
  // Each NIC sends once and receives once: 8 NIC links of weight 1; edges 1→2 and 3→0 cross
  // the spine (one uplink and one downlink each): 4 more.
  ASSERT_EQ(ring.links.size(), 12u);
  for (float w : ring.weight) EXPECT_EQ(w, 1.0f);
  const Demand tree = demand_of(f, FlowPattern::Tree, members, 4, 0);
  // Two trees of 3 edges each, both directions: 12 NIC sends in all over 4 NICs.
  double sends = 0;
  for (std::size_t i = 0; i < tree.links.size(); ++i)
    if (f.level(tree.links[i]) == LinkLevel::NicUp) sends += tree.weight[i];
  EXPECT_EQ(sends, 12.0);
  // P2P from member 1 to member 0.
  const Demand p2p = demand_of(f, FlowPattern::P2P, members, 2, 1);
  ASSERT_EQ(p2p.links.size(), 2u);  // same leaf
  EXPECT_EQ(p2p.links[0], 11u);     // NIC up of GPU 11 = NIC 8 + 3
}

}  // namespace
}  // namespace scalescope::cost

namespace scalescope::cost {
namespace {

TEST(Fabric, DestinationModKRoutingSpreadsAShiftOverEverySpine) {
  // 8 nodes of one GPU and NIC, 4 per leaf, 4 spines: node i of leaf 0 sends to node i of leaf 1
  // (a pipeline's stage shift). D-mod-k picks spine = the destination's port under its leaf =
  // i, so the four transfers take the four spines, one each: no two share an uplink. (Hashing
  // the endpoints may put two on one spine; that is what RoCE's ECMP does.)
  ClusterSpec c;
  c.gpu = "H100";
  c.gpus_per_node = 1;
  c.nics_per_node = 1;
  c.num_gpus = 8;
  c.nic_bandwidth_Gbps = 400;
  c.nvlink_bandwidth_GBps = 450;
  TopologySpec t;
  t.nodes_per_leaf = 4;
  t.spines_per_pod = 4;
  t.routing = TopologySpec::Routing::DestMod;
  const Fabric f(c, t, 50e9);
  std::set<LinkId> uplinks;
  for (std::uint32_t i = 0; i < 4; ++i) {
    std::vector<LinkId> r;
    f.route(i, 4 + i, r);
    ASSERT_EQ(r.size(), 4u);
    EXPECT_EQ(r[1], f.leaf_uplink(0, i));
    uplinks.insert(r[1]);
  }
  EXPECT_EQ(uplinks.size(), 4u);
}

}  // namespace
}  // namespace scalescope::cost
