// Tests of the NCCL tuner model (src/cost/nccl_tuner.cpp). Latencies are recomputed by hand from
// NCCL's tables (tuning.cc; MODELING §7.2): baseLat Ring {LL 6.6, LL128 14, Simple 8.4}, Tree
// {6.8, 14, 8.4}; hwLat NVLink Ring {0.6, 1.9, 3.4}, Tree {0.6, 1.25, 4.0}; NET Ring
// {2.7, 4.0, 14}, Tree {5.0, 8.5, 14}.
#include "cost/nccl_tuner.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"

namespace scalescope::cost {
namespace {

using graph::OpKind;
constexpr double kMiB = 1024.0 * 1024.0;

NcclComm comm(OpKind kind, std::uint32_t ranks, std::uint32_t nodes, double bus,
              CpuVendor cpu = CpuVendor::Amd) {
  NcclComm c;
  c.kind = kind;
  c.ranks = ranks;
  c.nodes = nodes;
  c.bus_bw_GBps = bus;
  c.arch = GpuArch::Ampere;
  c.cpu = cpu;
  return c;
}

TEST(NcclTuner, SingleNodeRingSimpleLatencyAndBandwidth) {
  // 8 ranks, one node. AR: nsteps = 14, lat = 8.4 + 14 · 3.4 = 56.0 µs, algBw = bus · 8/14.
  const auto ar =
      nccl_estimate(comm(OpKind::AllReduce, 8, 1, 232), 1 << 30, NcclAlgo::Ring, NcclProto::Simple);
  ASSERT_TRUE(ar);
  EXPECT_NEAR(ar->latency_us, 56.0, 1e-9);
  EXPECT_NEAR(ar->algbw_GBps, 232.0 * 8 / 14, 1e-9);
  EXPECT_NEAR(ar->time_us, 56.0 + (1 << 30) / (1000.0 * 232 * 8 / 14), 1e-6);
  // AG: nsteps = 7, lat = 8.4 + 7 · 3.4 = 32.2 µs, algBw = bus · 8/7.
  const auto ag =
      nccl_estimate(comm(OpKind::AllGather, 8, 1, 232), 1 << 30, NcclAlgo::Ring, NcclProto::Simple);
  ASSERT_TRUE(ag);
  EXPECT_NEAR(ag->latency_us, 32.2, 1e-9);
  EXPECT_NEAR(ag->algbw_GBps, 232.0 * 8 / 7, 1e-9);
}

TEST(NcclTuner, MultiNodeRingLatencyUsesNetStepsOverheadAndPlateau) {
  // 16 ranks on 2 AMD nodes, AR: nsteps 30, nInter 2(2−1) = 2. Simple: intraLat =
  // max(3.4, 2 µs · 3) = 6; lat = 8.4 + 28 · 6 + 2 · 14 = 204.4, × 1.4 plateau = 286.16 µs.
  const NcclComm amd = comm(OpKind::AllReduce, 16, 2, 160);
  EXPECT_NEAR(nccl_estimate(amd, 64 * kMiB, NcclAlgo::Ring, NcclProto::Simple)->latency_us, 286.16,
              1e-9);
  // Below bytes/(16 channels · 16 ranks) = 64, i.e. < 16 KiB, no plateau factor: 204.4 µs.
  EXPECT_NEAR(nccl_estimate(amd, 8192, NcclAlgo::Ring, NcclProto::Simple)->latency_us, 204.4, 1e-9);
  // Intel hosts: overhead 1 µs · 3, intraLat = max(3.4, 3) = 3.4:
  // (8.4 + 28 · 3.4 + 2 · 14) · 1.4 = 184.24 µs.
  const NcclComm intel = comm(OpKind::AllReduce, 16, 2, 160, CpuVendor::Intel);
  EXPECT_NEAR(nccl_estimate(intel, 64 * kMiB, NcclAlgo::Ring, NcclProto::Simple)->latency_us,
              184.24, 1e-9);
  // LL128 on AMD: 14 + 28 · max(1.9, 2) + 2 · 4.0 = 78 µs; bandwidth 0.92 · bus.
  const auto ll128 = nccl_estimate(amd, 64 * kMiB, NcclAlgo::Ring, NcclProto::LL128);
  EXPECT_NEAR(ll128->latency_us, 78.0, 1e-9);
  EXPECT_NEAR(ll128->algbw_GBps, 0.92 * 160 * 16 / 30, 1e-9);
}

TEST(NcclTuner, OneRankPerNodeUsesTheTreeNetworkLatency) {
  // 16 ranks on 16 nodes, ring LL: every step crosses the network (nInter = 30 = nsteps) and
  // NCCL charges the tree's NET latency 5.0 µs: lat = 6.6 + 30 · 5.0 = 156.6 µs.
  const auto e =
      nccl_estimate(comm(OpKind::AllReduce, 16, 16, 20), 1 * kMiB, NcclAlgo::Ring, NcclProto::LL);
  EXPECT_NEAR(e->latency_us, 156.6, 1e-9);
}

TEST(NcclTuner, TreeLatencyAndBandwidth) {
  // 128 ranks on 16 nodes (ppn 8, log2 16 = 4):
  // LL128: 14 + 2 · (7 · 1.25 + 4 · 8.5) = 99.5 µs; Simple: 8.4 + 2 · (7 · 4 + 4 · 14) = 176.4;
  // LL: 6.8 + 2 · (7 · 0.6 + 4 · 5) = 55.2.
  const NcclComm c = comm(OpKind::AllReduce, 128, 16, 160);
  EXPECT_NEAR(nccl_estimate(c, kMiB, NcclAlgo::Tree, NcclProto::LL128)->latency_us, 99.5, 1e-9);
  EXPECT_NEAR(nccl_estimate(c, kMiB, NcclAlgo::Tree, NcclProto::Simple)->latency_us, 176.4, 1e-9);
  EXPECT_NEAR(nccl_estimate(c, kMiB, NcclAlgo::Tree, NcclProto::LL)->latency_us, 55.2, 1e-9);
  // Simple bandwidth: bus · 0.92 · 0.5 × treeCorrectionFactor. 16 MiB = 64 B · 2^18, where the
  // Simple row reads 0.7; at 12 MiB (2^17.585) it is interpolated between 0.8 (2^17) and 0.7.
  EXPECT_NEAR(nccl_estimate(c, 16 * kMiB, NcclAlgo::Tree, NcclProto::Simple)->algbw_GBps,
              160 * 0.92 * 0.5 * 0.7, 1e-9);
  EXPECT_NEAR(nccl_estimate(c, 12 * kMiB, NcclAlgo::Tree, NcclProto::Simple)->algbw_GBps,
              160 * 0.92 * 0.5 * (0.8 - 0.1 * std::log2(1.5)), 1e-9);
  // From 512 MiB (2^23 · 64 B) NCCL applies no correction.
  EXPECT_NEAR(nccl_estimate(c, 1024 * kMiB, NcclAlgo::Tree, NcclProto::Simple)->algbw_GBps,
              160 * 0.92 * 0.5, 1e-9);
  // LL128: bus · 0.92 · 120/128 · 0.5 × 0.9 (LL128 row at 2^18).
  EXPECT_NEAR(nccl_estimate(c, 16 * kMiB, NcclAlgo::Tree, NcclProto::LL128)->algbw_GBps,
              160 * 0.92 * 120 / 128 * 0.5 * 0.9, 1e-9);
}

TEST(NcclTuner, LowLatencyBandwidthIsCappedByLlMaxBw) {
  // Ring LL: min(llMaxBw, 0.5 · bus). One Ampere node: llMaxBw 87.7 < 116 → algBw 87.7 · 8/14.
  EXPECT_NEAR(nccl_estimate(comm(OpKind::AllReduce, 8, 1, 232), kMiB, NcclAlgo::Ring, NcclProto::LL)
                  ->algbw_GBps,
              87.7 * 8 / 14, 1e-9);
  // More than two AMD nodes: 19.0; two Intel nodes: 39.0.
  EXPECT_NEAR(
      nccl_estimate(comm(OpKind::AllGather, 32, 4, 160), kMiB, NcclAlgo::Ring, NcclProto::LL)
          ->algbw_GBps,
      19.0 * 32 / 31, 1e-9);
  EXPECT_NEAR(nccl_estimate(comm(OpKind::AllGather, 16, 2, 160, CpuVendor::Intel), kMiB,
                            NcclAlgo::Ring, NcclProto::LL)
                  ->algbw_GBps,
              39.0 * 16 / 15, 1e-9);
}

TEST(NcclTuner, OffersTreeOnlyForMultiNodeAllReduceAndLl128OnlyWhenEnabled) {
  EXPECT_FALSE(
      nccl_estimate(comm(OpKind::AllReduce, 8, 1, 232), kMiB, NcclAlgo::Tree, NcclProto::Simple));
  EXPECT_FALSE(nccl_estimate(comm(OpKind::ReduceScatter, 16, 2, 160), kMiB, NcclAlgo::Tree,
                             NcclProto::Simple));
  NcclComm c = comm(OpKind::AllReduce, 8, 1, 232);
  c.ll128 = false;
  EXPECT_FALSE(nccl_estimate(c, kMiB, NcclAlgo::Ring, NcclProto::LL128));
  // A filter that leaves nothing is a caller bug.
  NcclFilter tree_only;
  tree_only.algo = NcclAlgo::Tree;
  EXPECT_THROW(nccl_best(comm(OpKind::AllGather, 8, 1, 232), kMiB, tree_only), ContractError);
}

TEST(NcclTuner, BestIsTheCheapestCandidate) {
  const NcclComm c = comm(OpKind::AllReduce, 128, 16, 160);
  for (double bytes : {1e3, 1e6, 16 * kMiB, 4e9}) {
    const NcclEstimate best = nccl_best(c, bytes);
    for (NcclAlgo a : {NcclAlgo::Ring, NcclAlgo::Tree})
      for (NcclProto p : {NcclProto::LL, NcclProto::LL128, NcclProto::Simple})
        if (const auto e = nccl_estimate(c, bytes, a, p)) {
          EXPECT_LE(best.time_us, e->time_us);
        }
  }
  // Small messages go to a low-latency protocol, large ones to Simple.
  EXPECT_NE(nccl_best(comm(OpKind::AllReduce, 8, 1, 232), 4096).proto, NcclProto::Simple);
  EXPECT_EQ(nccl_best(comm(OpKind::AllReduce, 8, 1, 232), 1e9).proto, NcclProto::Simple);
}

TEST(NcclTuner, RingAllReduceClosedForm) {
  // 2(n−1)/n · S/B + 2(n−1) · α with n = 8, S = 1 GiB, B = 232 GB/s, α = 3.4 µs:
  // 14/8 · 2^30 / 232e9 = 8.0993 ms, + 14 · 3.4 µs = 47.6 µs → 8.1469 ms.
  EXPECT_NEAR(ring_allreduce_seconds(1 << 30, 8, 232, 3.4), 8.1469e-3, 1e-7);
  EXPECT_EQ(ring_allreduce_seconds(1 << 30, 1, 232, 3.4), 0);
}

}  // namespace
}  // namespace scalescope::cost
