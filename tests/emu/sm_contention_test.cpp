#include "emu/sm_contention.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace scalescope::emu {
namespace {

using graph::Op;
using graph::OpKind;
using graph::Stream;

Op compute() {
  Op op;
  op.kind = OpKind::Gemm;
  return op;
}

Op collective(Stream s) {
  Op op;
  op.kind = OpKind::ReduceScatter;
  op.stream = s;
  op.role = graph::CommRole::Dp;
  return op;
}

TEST(SmContention, AComputeOpSlowsOnlyWhileACommunicationKernelRuns) {
  // A (100 ns), then B (100) and C (100) on the compute stream; a reduce-scatter of 150 ns on the
  // DP stream after A holds 24 SMs, at which compute runs at half its rate. B starts at 100 with
  // the reduce-scatter: by 250 it has done 150 / 2 = 75 ns of its work, the 25 left alone end it
  // at 275: B takes 175. A ran before, C after: unchanged.
  graph::RankProgram p;
  const auto a = p.add(compute(), {});
  p.add(collective(Stream::DpComm), {a});
  const auto b = p.add(compute(), {a});
  p.add(compute(), {b});
  p.finalize();
  const std::vector<SimTime> dur{100, 0, 100, 100}, wire{0, 150, 0, 0};
  const std::vector<std::uint32_t> sms{0, 24, 0, 0};
  auto half = [](const Op&, std::uint32_t taken) { return taken > 0 ? 2.0 : 1.0; };
  EXPECT_EQ(with_comm_kernel_sms(p, dur, wire, sms, half),
            (std::vector<SimTime>{100, 0, 175, 100}));
  // Kernels that hold no SMs (point-to-point, userbuffers): nothing changes.
  EXPECT_EQ(with_comm_kernel_sms(p, dur, wire, {0, 0, 0, 0}, half), dur);
}

TEST(SmContention, TwoKernelsAtOnceHoldTheSumOfTheirSms) {
  // After A (100 ns): a DP reduce-scatter [100, 300] and an EP all-to-all [100, 200], 24 SMs each;
  // compute runs at 1 / (1 + taken / 48): half speed beside both, 1 / 1.5 beside one. B (300 ns
  // of work) does 100 / 2 = 50 by 200, 100 / 1.5 = 66.67 more by 300, and the 183.33 left alone
  // end it at 483.33: 383 ns (rounded).
  graph::RankProgram p;
  const auto a = p.add(compute(), {});
  p.add(collective(Stream::DpComm), {a});
  Op a2a = collective(Stream::EpComm);
  a2a.kind = OpKind::AllToAll;
  a2a.role = graph::CommRole::Ep;
  p.add(a2a, {a});
  p.add(compute(), {a});
  p.finalize();
  std::vector<std::uint32_t> seen;
  auto factor = [&](const Op&, std::uint32_t taken) {
    seen.push_back(taken);
    return 1.0 + taken / 48.0;
  };
  EXPECT_EQ(with_comm_kernel_sms(p, {100, 0, 0, 300}, {0, 200, 100, 0}, {0, 24, 24, 0}, factor),
            (std::vector<SimTime>{100, 0, 0, 383}));
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{48, 24}));
}

}  // namespace
}  // namespace scalescope::emu
