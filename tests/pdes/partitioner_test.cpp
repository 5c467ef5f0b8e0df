#include "pdes/partitioner.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"

namespace scalescope::pdes {
namespace {

struct Edge {
  LpId a, b;
  std::uint32_t weight;
};

/// Symmetric CSR from an undirected edge list (each edge listed in both directions).
LpGraph graph_of(std::uint32_t n, const std::vector<Edge>& edges) {
  std::vector<std::vector<std::pair<LpId, std::uint32_t>>> adj(n);
  for (const Edge& e : edges) {
    adj[e.a].push_back({e.b, e.weight});
    adj[e.b].push_back({e.a, e.weight});
  }
  LpGraph g;
  for (const auto& list : adj) {
    for (const auto& [v, w] : list) {
      g.neighbours.push_back(v);
      g.weights.push_back(w);
    }
    g.offsets.push_back(static_cast<std::uint32_t>(g.neighbours.size()));
  }
  return g;
}

/// Total weight of the edges whose ends have different owners.
std::uint64_t cut_weight(const std::vector<Edge>& edges, const std::vector<std::uint32_t>& owner) {
  std::uint64_t cut = 0;
  for (const Edge& e : edges)
    if (owner[e.a] != owner[e.b]) cut += e.weight;
  return cut;
}

std::vector<std::uint32_t> sizes(const std::vector<std::uint32_t>& owner, std::uint32_t parts) {
  std::vector<std::uint32_t> s(parts, 0);
  for (std::uint32_t p : owner) ++s.at(p);
  return s;
}

/// Two 8-cliques, clique A on the even ids and clique B on the odd ids, joined by the edge 0-1.
std::vector<Edge> interleaved_cliques() {
  std::vector<Edge> edges;
  for (LpId parity = 0; parity < 2; ++parity)
    for (LpId i = parity; i < 16; i += 2)
      for (LpId j = i + 2; j < 16; j += 2) edges.push_back({i, j, 10});
  edges.push_back({0, 1, 10});
  return edges;
}

/// An 8 × 8 grid, 4-neighbour, unit weights.
std::vector<Edge> grid8() {
  std::vector<Edge> edges;
  for (LpId r = 0; r < 8; ++r)
    for (LpId c = 0; c < 8; ++c) {
      if (c + 1 < 8) edges.push_back({r * 8 + c, r * 8 + c + 1, 1});
      if (r + 1 < 8) edges.push_back({r * 8 + c, (r + 1) * 8 + c, 1});
    }
  return edges;
}

TEST(BlockPartitioner, ContiguousBlocksFirstOnesLarger) {
  // 10 LPs on 4 processes: 10 = 4·2 + 2, so the first two blocks hold 3, the last two 2.
  const auto owner = BlockPartitioner{}.assign(10, 4, nullptr);
  EXPECT_EQ(owner, (std::vector<std::uint32_t>{0, 0, 0, 1, 1, 1, 2, 2, 3, 3}));
}

TEST(BlockPartitioner, EvenSplitAndFewerLpsThanProcesses) {
  EXPECT_EQ(sizes(BlockPartitioner{}.assign(32768, 2, nullptr), 2),
            (std::vector<std::uint32_t>{16384, 16384}));
  EXPECT_EQ(BlockPartitioner{}.assign(2, 4, nullptr), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_TRUE(BlockPartitioner{}.assign(0, 3, nullptr).empty());
}

TEST(MetisPartitioner, OneProcessOwnsEverything) {
  const auto edges = grid8();
  const LpGraph g = graph_of(64, edges);
  EXPECT_EQ(MetisPartitioner{}.assign(64, 1, &g), std::vector<std::uint32_t>(64, 0));
}

TEST(MetisPartitioner, FallsBackToBlocksWithoutEdges) {
  const BlockPartitioner block;
  EXPECT_EQ(MetisPartitioner{}.assign(10, 4, nullptr), block.assign(10, 4, nullptr));
  // Self-loops only (what the PHOLD driver passes): nothing to cut, so blocks.
  LpGraph loops;
  for (LpId i = 0; i < 10; ++i) {
    loops.neighbours.push_back(i);
    loops.weights.push_back(1);
    loops.offsets.push_back(i + 1);
  }
  EXPECT_EQ(MetisPartitioner{}.assign(10, 4, &loops), block.assign(10, 4, nullptr));
}

TEST(MetisPartitioner, DeterministicAndCoversAllProcesses) {
  const auto edges = grid8();
  LpGraph g = graph_of(64, edges);
  g.vertex_weights.assign(64, 5);
  const auto first = MetisPartitioner{}.assign(64, 4, &g);
  const auto second = MetisPartitioner{}.assign(64, 4, &g);
  EXPECT_EQ(first, second);
  const auto s = sizes(first, 4);
  // ufactor 30 asks for parts of at most 1.03 · 16 = 16.5 LPs' weight; METIS treats it as a
  // target, so allow one LP of slack. Every process must own some LPs.
  for (std::uint32_t size : s) {
    EXPECT_GE(size, 1u);
    EXPECT_LE(size, 17u);
  }
  // Blocks of 16 are two grid rows each: 3 boundaries × 8 edges = 24 cut edges; METIS (quadrants
  // or equivalent) should do no worse.
  EXPECT_EQ(cut_weight(edges, BlockPartitioner{}.assign(64, 4, nullptr)), 24u);
  EXPECT_LE(cut_weight(edges, first), 24u);
}

TEST(MetisPartitioner, FindsInterleavedClusters) {
  const auto edges = interleaved_cliques();
  const LpGraph g = graph_of(16, edges);
  const auto metis = MetisPartitioner{}.assign(16, 2, &g);
  const auto block = BlockPartitioner{}.assign(16, 2, nullptr);
  // Blocks {0..7} and {8..15} split each clique 4 + 4: 4·4 = 16 cut edges per clique, weight 10
  // each → 320; the bridge 0-1 lies inside block 0. The clusters themselves cut only the bridge.
  EXPECT_EQ(cut_weight(edges, block), 320u);
  EXPECT_EQ(cut_weight(edges, metis), 10u);
  EXPECT_EQ(sizes(metis, 2), (std::vector<std::uint32_t>{8, 8}));
  for (LpId i = 2; i < 16; ++i) EXPECT_EQ(metis[i], metis[i % 2]) << i;
}

TEST(MakePartitioner, ByNameAndRejectsUnknown) {
  EXPECT_EQ(make_partitioner("block")->name(), "block");
  EXPECT_EQ(make_partitioner("metis")->name(), "metis");
  try {
    make_partitioner("random");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "unknown partition 'random' (use block or metis)");
  }
}

}  // namespace
}  // namespace scalescope::pdes
