// Sweep expansion, the parallel-layout search space and the table's ranking (src/explore).
#include "explore/sweep.hpp"

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace scalescope::explore {
namespace {

using Point = std::vector<std::string>;

TEST(Sweep, VaryListsOneOverridePerValue) {
  const Axis a = parse_vary("parallel.tp=1,2,4");
  EXPECT_EQ(a.name, "parallel.tp");
  ASSERT_EQ(a.values.size(), 3u);
  EXPECT_EQ(a.values[0], Point{"parallel.tp=1"});
  EXPECT_EQ(a.values[2], Point{"parallel.tp=4"});
}

TEST(Sweep, CommasInsideBracketsBelongToTheValue) {
  const Axis a = parse_vary("parallel.recompute_modules=[mlp,core_attn],[moe],{a: 1, b: 2}");
  ASSERT_EQ(a.values.size(), 3u);
  EXPECT_EQ(a.values[0], Point{"parallel.recompute_modules=[mlp,core_attn]"});
  EXPECT_EQ(a.values[1], Point{"parallel.recompute_modules=[moe]"});
  EXPECT_EQ(a.values[2], Point{"parallel.recompute_modules={a: 1, b: 2}"});
}

TEST(Sweep, MalformedVaryIsAOneLineError) {
  EXPECT_THROW(parse_vary("parallel.tp"), InputError);       // no '='
  EXPECT_THROW(parse_vary("=1,2"), InputError);              // no key
  EXPECT_THROW(parse_vary("parallel.tp="), InputError);      // no values
  EXPECT_THROW(parse_vary("parallel.tp=1,,2"), InputError);  // an empty value
  EXPECT_THROW(parse_vary("parallel.recompute_modules=[mlp"), InputError);
  EXPECT_THROW(parse_vary("parallel.recompute_modules=mlp]"), InputError);
  try {
    parse_vary("parallel.tp=1,,2");
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.tp=1,,2"), std::string::npos) << e.what();
  }
}

TEST(Sweep, ExpandIsTheProductWithTheLastAxisFastest) {
  const std::vector<Axis> axes = {parse_vary("parallel.tp=1,2"), parse_vary("parallel.pp=1,2,4")};
  const auto points = expand(axes);
  ASSERT_EQ(points.size(), 6u);  // 2 × 3
  EXPECT_EQ(points[0], (Point{"parallel.tp=1", "parallel.pp=1"}));
  EXPECT_EQ(points[1], (Point{"parallel.tp=1", "parallel.pp=2"}));
  EXPECT_EQ(points[3], (Point{"parallel.tp=2", "parallel.pp=1"}));
  EXPECT_EQ(points[5], (Point{"parallel.tp=2", "parallel.pp=4"}));
  EXPECT_EQ(expand({}).size(), 1u);  // no axes: the base configuration alone
}

TEST(Sweep, ParallelSearchCoversPowersOfTwoWithinANodeAndTheLayers) {
  // 64 GPUs, 8 per node, 8 layers: TP ∈ {1, 2, 4, 8}; PP ∈ {1, 2, 4, 8} (≤ 8 layers, TP·PP ≤
  // 64); VPP with PP · VPP dividing the 8 layers: PP 1 → {1}, PP 2 → {1, 2, 4}, PP 4 → {1, 2},
  // PP 8 → {1}: 7 per TP → 28 layouts.
  const Axis a = parallel_search(64, 8, 8);
  ASSERT_EQ(a.values.size(), 28u);
  EXPECT_EQ(a.values[0], (Point{"parallel.tp=1", "parallel.pp=1",
                                "parallel.vpp=", "parallel.dp=", "parallel.sequence_parallel=false",
                                "parallel.tp_comm_overlap=false"}));
  EXPECT_EQ(a.values[3], (Point{"parallel.tp=1", "parallel.pp=2", "parallel.vpp=4",
                                "parallel.dp=", "parallel.sequence_parallel=false",
                                "parallel.tp_comm_overlap=false"}));
  EXPECT_EQ(a.values[27], (Point{"parallel.tp=8", "parallel.pp=8", "parallel.vpp=", "parallel.dp=",
                                 "parallel.sequence_parallel=true"}));
  // 4 GPUs (a partial node), 80 layers: (TP, PP) ∈ {(1,1), (1,2), (1,4), (2,1), (2,2), (4,1)};
  // VPP: the divisors of 40 at PP 2 (1, 2, 4, 5, 8, 10, 20, 40: 8) and of 20 at PP 4 (1, 2, 4,
  // 5, 10, 20: 6): 1+8+6 + 1+8 + 1 = 25.
  const Axis b = parallel_search(4, 8, 80);
  EXPECT_EQ(b.values.size(), 25u);
  EXPECT_EQ(b.values[4][2], "parallel.vpp=5");  // PP 1: none; PP 2: none, 2, 4, 5 …
  // 2 layers bound PP and VPP: TP ∈ {1, 2, 4, 8} × (PP 1, PP 2) = 8.
  EXPECT_EQ(parallel_search(1024, 8, 2).values.size(), 8u);
  // Llama 3 405B's 126 layers with the embedding and the loss accounted for: 128 units, PP 8
  // takes VPP 2, 4, 8, 16 (16 units per stage) and none: 5 of the TP 8 layouts at PP 8.
  const Axis c = parallel_search(16384, 8, 128);
  std::size_t tp8_pp8 = 0;
  for (const auto& v : c.values)
    if (v[0] == "parallel.tp=8" && v[1] == "parallel.pp=8") ++tp8_pp8;
  EXPECT_EQ(tp8_pp8, 5u);
}

Row row(std::size_t index, Status s, double time, std::int64_t mem, bool replayed) {
  Row r;
  r.index = index;
  r.status = s;
  r.iteration_time_s = time;
  r.peak_memory_bytes = mem;
  r.replayed = replayed;
  return r;
}

TEST(Sweep, RankingPutsFittingPlansFirstByTime) {
  const std::vector<Row> rows = {
      row(0, Status::Invalid, 0, 0, false),       // refused: last
      row(1, Status::Ok, 2.0, 50, true),          // fits, slower
      row(2, Status::DoesNotFit, 0, 900, false),  // not replayed: by memory
      row(3, Status::Ok, 1.5, 70, true),          // fits, fastest: first
      row(4, Status::DoesNotFit, 1.0, 95, true),  // replayed but does not fit: after the fitting
      row(5, Status::DoesNotFit, 0, 800, false),
      row(6, Status::Ok, 1.5, 60, true),  // ties with 3 on time: by index
  };
  const std::vector<std::size_t> expected = {3, 6, 1, 4, 5, 2, 0};
  EXPECT_EQ(rank_rows(rows), expected);
}

}  // namespace
}  // namespace scalescope::explore
