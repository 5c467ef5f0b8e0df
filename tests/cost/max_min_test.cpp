#include "cost/max_min.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace scalescope::cost {
namespace {

/// A variable over `links` with one flow on each.
struct Var {
  std::vector<std::uint32_t> links;
  std::vector<float> weight;
  MaxMinVar v;
  Var(std::vector<std::uint32_t> l, double bound, float w = 1) : links(std::move(l)) {
    weight.assign(links.size(), w);
    v.links = links.data();
    v.weight = weight.data();
    v.n = static_cast<std::uint32_t>(links.size());
    v.bound = bound;
  }
};

std::vector<double> solve(std::vector<Var>& vars, const std::vector<double>& capacity) {
  MaxMinSolver s(capacity.size());
  std::vector<MaxMinVar*> p;
  for (Var& v : vars) {
    v.v.links = v.links.data();  // the vector may have copied the Var
    v.v.weight = v.weight.data();
    p.push_back(&v.v);
  }
  s.solve(p.data(), p.size(), capacity.data());
  std::vector<double> rates;
  for (Var& v : vars) rates.push_back(v.v.rate);
  return rates;
}

constexpr double kUnbounded = 1e30;

TEST(MaxMin, TwoFlowsOnOneLinkEachGetHalf) {
  std::vector<Var> vars{Var({0}, kUnbounded), Var({0}, kUnbounded)};
  const auto r = solve(vars, {10.0});
  EXPECT_DOUBLE_EQ(r[0], 5.0);
  EXPECT_DOUBLE_EQ(r[1], 5.0);
}

TEST(MaxMin, ThreeLinksFourFlowsByHand) {
  // Links L0 = 10, L1 = 4, L2 = 6. A on L0; B on L0, L1; C on L1, L2; D on L2.
  // Progressive filling: every link carries two flows, so all rise to min(10, 4, 6)/2 = 2, where
  // L1 is full: B = C = 2. Then L0 has 10 − 4 = 6 left for A alone and L2 6 − 4 = 2 for D alone;
  // both rise by 2 more, L2 is full: D = 4. A takes the rest of L0: 10 − 2 = 8.
  std::vector<Var> vars{Var({0}, kUnbounded), Var({0, 1}, kUnbounded), Var({1, 2}, kUnbounded),
                        Var({2}, kUnbounded)};
  const auto r = solve(vars, {10.0, 4.0, 6.0});
  EXPECT_DOUBLE_EQ(r[0], 8.0);
  EXPECT_DOUBLE_EQ(r[1], 2.0);
  EXPECT_DOUBLE_EQ(r[2], 2.0);
  EXPECT_DOUBLE_EQ(r[3], 4.0);
}

TEST(MaxMin, ABoundedFlowLeavesItsShareToTheOthers) {
  // Three flows on a link of 9: one capped at 1 takes 1, the other two split 8.
  std::vector<Var> vars{Var({0}, 1.0), Var({0}, kUnbounded), Var({0}, kUnbounded)};
  const auto r = solve(vars, {9.0});
  EXPECT_DOUBLE_EQ(r[0], 1.0);
  EXPECT_DOUBLE_EQ(r[1], 4.0);
  EXPECT_DOUBLE_EQ(r[2], 4.0);
}

TEST(MaxMin, AnAggregatedVariableCountsEachOfItsFlows) {
  // A variable standing for two flows and a single flow on a link of 9: three flows, 3 each;
  // the aggregate's per-flow rate is 3 (it uses 6 of the link).
  std::vector<Var> vars{Var({0}, kUnbounded, 2.0f), Var({0}, kUnbounded)};
  const auto r = solve(vars, {9.0});
  EXPECT_DOUBLE_EQ(r[0], 3.0);
  EXPECT_DOUBLE_EQ(r[1], 3.0);
}

TEST(MaxMin, AFlowAloneRunsAtItsBoundOrTheLinkWhicheverIsLower) {
  std::vector<Var> a{Var({0, 1}, 3.0)};
  EXPECT_DOUBLE_EQ(solve(a, {5.0, 7.0})[0], 3.0);
  std::vector<Var> b{Var({0, 1}, 30.0)};
  EXPECT_DOUBLE_EQ(solve(b, {5.0, 7.0})[0], 5.0);
}

TEST(MaxMin, ScratchIsReusedAcrossSolves) {
  MaxMinSolver s(3);
  const std::vector<double> cap{10.0, 4.0, 6.0};
  for (int round = 0; round < 3; ++round) {
    Var a({0, 1}, kUnbounded), b({1, 2}, kUnbounded);
    MaxMinVar* p[] = {&a.v, &b.v};
    s.solve(p, 2, cap.data());
    EXPECT_DOUBLE_EQ(a.v.rate, 2.0);  // L1 = 4 shared by both
    EXPECT_DOUBLE_EQ(b.v.rate, 2.0);
  }
}

}  // namespace
}  // namespace scalescope::cost
