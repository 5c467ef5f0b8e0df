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
    for (NcclAlgo a : kNcclAlgos)
      for (NcclProto p : {NcclProto::LL, NcclProto::LL128, NcclProto::Simple})
        if (const auto e = nccl_estimate(c, bytes, a, p)) {
          EXPECT_LE(best.time_us, e->time_us);
        }
  }
  // Small messages go to a low-latency protocol, large ones to Simple.
  EXPECT_NE(nccl_best(comm(OpKind::AllReduce, 8, 1, 232), 4096).proto, NcclProto::Simple);
  EXPECT_EQ(nccl_best(comm(OpKind::AllReduce, 8, 1, 232), 1e9).proto, NcclProto::Simple);
}

// NVLS, NVLS-Tree, PAT and CollNet (tuning.cc; MODELING §7.2–7.3): Simple only; baseLat 0 (PAT 8);
// hwLat NVLink NVLS 25, NVLS-Tree 25, CollNet Direct 3.7, Chain 2.8; NET NVLS 18, NVLS-Tree 20.9,
// CollNet Direct 31, Chain 30; NVLS efficiency 0.85 on Hopper; perChMaxNVLSTree Hopper 57.7 (2
// nodes) / 45.5 (more). The NVLS graph of 8 H100s: 8 channels × 60 GB/s = 480 GB/s.
NcclComm hopper(OpKind kind, std::uint32_t ranks, std::uint32_t nodes, double bus) {
  NcclComm c = comm(kind, ranks, nodes, bus, CpuVendor::Intel);
  c.arch = GpuArch::Hopper;
  c.nvls_bw_GBps = 480;
  c.intra_bw_GBps = 348;
  return c;
}

TEST(NcclTuner, NvlsInsideANodeByHand) {
  // 8 GPUs, all-reduce: per channel min(60 · 0.85 · 7/8 · 2 = 89.25, bwInter = 60) = 60, bus
  // 8 · 60 = 480, algBw = 480 · 8/14; latency = hwLat NVLink NVLS = 25 µs.
  const NcclComm ar = hopper(OpKind::AllReduce, 8, 1, 348);
  const auto e = nccl_estimate(ar, 1 << 30, NcclAlgo::Nvls, NcclProto::Simple);
  ASSERT_TRUE(e);
  EXPECT_NEAR(e->algbw_GBps, 480.0 * 8 / 14, 1e-9);
  EXPECT_NEAR(e->latency_us, 25.0, 1e-12);
  EXPECT_NEAR(e->time_us, 25.0 + (1 << 30) / (1000.0 * 480 * 8 / 14), 1e-6);
  // Against the ring's 348 GB/s bus (algBw 348 · 8/14, latency 8.4 + 14 · 3.4 = 56 µs), NVLS
  // wins at 1 GiB; only Simple is offered.
  EXPECT_EQ(nccl_best(ar, 1 << 30).algo, NcclAlgo::Nvls);
  EXPECT_FALSE(nccl_estimate(ar, 1 << 30, NcclAlgo::Nvls, NcclProto::LL128));
  // All-gather: per channel 60 · 0.85 · 7/8 · 7/8 = 39.047 GB/s, bus 312.375, no bus → algBw
  // conversion off the ring: algBw = bus. The ring (348 · 8/7 = 397.7) wins.
  const NcclComm ag = hopper(OpKind::AllGather, 8, 1, 348);
  const auto g = nccl_estimate(ag, 1 << 30, NcclAlgo::Nvls, NcclProto::Simple);
  ASSERT_TRUE(g);
  EXPECT_NEAR(g->algbw_GBps, 8 * 60 * 0.85 * 7 / 8 * 7 / 8, 1e-9);
  EXPECT_EQ(nccl_best(ag, 1 << 30).algo, NcclAlgo::Ring);
  // 4 GPUs: 4 channels · 60 = 240 GB/s bus, algBw 240 · 4/6 = 160 < the ring's 348 · 4/6: NVLS is
  // chosen only above 4 GPUs, as measured on 8×H200 (MODELING §7.5).
  const NcclComm four = hopper(OpKind::AllReduce, 4, 1, 348);
  EXPECT_NEAR(nccl_estimate(four, 1 << 30, NcclAlgo::Nvls, NcclProto::Simple)->algbw_GBps, 160.0,
              1e-9);
  EXPECT_EQ(nccl_best(four, 1 << 30).algo, NcclAlgo::Ring);
  // No NVLS on Ampere, with one GPU a node, or across nodes without CollNet.
  NcclComm ampere = ar;
  ampere.arch = GpuArch::Ampere;
  EXPECT_FALSE(nccl_estimate(ampere, 1 << 30, NcclAlgo::Nvls, NcclProto::Simple));
  EXPECT_FALSE(nccl_estimate(hopper(OpKind::AllReduce, 16, 16, 40), 1 << 30, NcclAlgo::Nvls,
                             NcclProto::Simple));
  EXPECT_FALSE(nccl_estimate(hopper(OpKind::AllReduce, 128, 16, 320), 1 << 30, NcclAlgo::Nvls,
                             NcclProto::Simple));
}

TEST(NcclTuner, NvlsTreeAcrossNodesByHand) {
  // 16 nodes × 8 GPUs, NICs' bus 320 GB/s: per channel min(89.25, 320/8 = 40, 45.5) = 40, bus
  // 320, algBw = 320 · 128/254; latency 25 + 2 · log2(16) · 20.9 = 192.2 µs.
  NcclComm c = hopper(OpKind::AllReduce, 128, 16, 320);
  c.inter_bw_GBps = 320;
  const auto e = nccl_estimate(c, 1 << 30, NcclAlgo::NvlsTree, NcclProto::Simple);
  ASSERT_TRUE(e);
  EXPECT_NEAR(e->algbw_GBps, 320.0 * 128 / 254, 1e-9);
  EXPECT_NEAR(e->latency_us, 192.2, 1e-9);
  // Two nodes: bwInter doubles (80) and perChMaxNVLSTree is 57.7: bus 8 · 57.7 = 461.6, latency
  // 25 + 2 · 1 · 20.9 = 66.8 µs.
  NcclComm two = hopper(OpKind::AllReduce, 16, 2, 320);
  two.inter_bw_GBps = 320;
  const auto t = nccl_estimate(two, 1 << 30, NcclAlgo::NvlsTree, NcclProto::Simple);
  ASSERT_TRUE(t);
  EXPECT_NEAR(t->algbw_GBps, 461.6 * 16 / 30, 1e-9);
  EXPECT_NEAR(t->latency_us, 66.8, 1e-9);
  // All-reduce only, and across nodes only.
  EXPECT_FALSE(nccl_estimate(hopper(OpKind::AllGather, 128, 16, 320), 1 << 30, NcclAlgo::NvlsTree,
                             NcclProto::Simple));
  EXPECT_FALSE(nccl_estimate(hopper(OpKind::AllReduce, 8, 1, 348), 1 << 30, NcclAlgo::NvlsTree,
                             NcclProto::Simple));
}

TEST(NcclTuner, PatWithOneGpuPerNodeByHand) {
  // All-gather over 64 nodes, one GPU each, bus 40 GB/s: PAT's bus 0.75 · 40 = 30 = algBw;
  // latency 8 + log2(64) · 14/3.5 + 2.8 · 64 = 211.2 µs.
  const NcclComm c = comm(OpKind::AllGather, 64, 64, 40, CpuVendor::Intel);
  const auto e = nccl_estimate(c, kMiB, NcclAlgo::Pat, NcclProto::Simple);
  ASSERT_TRUE(e);
  EXPECT_NEAR(e->algbw_GBps, 30.0, 1e-12);
  EXPECT_NEAR(e->latency_us, 211.2, 1e-9);
  // The ring pays 63 network steps (ppn = 1: the tree's NET latency, 14 µs): 8.4 + 63 · 14 =
  // 890.4 µs. At 1 MiB PAT wins (246 µs against 916); at 1 GiB the ring's bandwidth does
  // (2^30/30e3 = 35,791 µs against 2^30/(40 · 64/63 · 1e3) = 26,425 µs).
  EXPECT_NEAR(nccl_estimate(c, kMiB, NcclAlgo::Ring, NcclProto::Simple)->latency_us, 890.4, 1e-9);
  EXPECT_EQ(nccl_best(c, kMiB).algo, NcclAlgo::Pat);
  EXPECT_EQ(nccl_best(c, 1 << 30).algo, NcclAlgo::Ring);
  // Not with two GPUs a node, nor for all-reduce.
  EXPECT_FALSE(
      nccl_estimate(comm(OpKind::AllGather, 64, 32, 40), kMiB, NcclAlgo::Pat, NcclProto::Simple));
  EXPECT_FALSE(
      nccl_estimate(comm(OpKind::AllReduce, 64, 64, 40), kMiB, NcclAlgo::Pat, NcclProto::Simple));
}

TEST(NcclTuner, CollNetReducesInTheFabricByHand) {
  // 16 nodes × 8 GPUs with 8 NICs, in-network reduction. Direct: bus = the NVLink side 348,
  // GPU/NIC ratio 1 (no penalty), × 0.85 on Hopper = 295.8, algBw · 0.5 = 147.9; latency
  // 2 · (1 · 3.7 + 7 · 0.4) + 31 = 44 µs. Chain: algBw 348 · 0.5 = 174, latency 2 · 7 · 2.8 + 30
  // = 69.2 µs.
  NcclComm c = hopper(OpKind::AllReduce, 128, 16, 320);
  c.inter_bw_GBps = 320;
  c.nics = 8;
  EXPECT_FALSE(nccl_estimate(c, 1 << 30, NcclAlgo::CollNetDirect, NcclProto::Simple));
  c.collnet = true;
  const auto d = nccl_estimate(c, 1 << 30, NcclAlgo::CollNetDirect, NcclProto::Simple);
  ASSERT_TRUE(d);
  EXPECT_NEAR(d->algbw_GBps, 147.9, 1e-9);
  EXPECT_NEAR(d->latency_us, 44.0, 1e-9);
  const auto ch = nccl_estimate(c, 1 << 30, NcclAlgo::CollNetChain, NcclProto::Simple);
  ASSERT_TRUE(ch);
  EXPECT_NEAR(ch->algbw_GBps, 174.0, 1e-9);
  EXPECT_NEAR(ch->latency_us, 69.2, 1e-9);
  // Four NICs for 8 GPUs: ratio 2 costs 2 − 1/2 = 1.5: 348 / 1.5 · 0.85 · 0.5 = 98.6.
  c.nics = 4;
  EXPECT_NEAR(nccl_estimate(c, 1 << 30, NcclAlgo::CollNetDirect, NcclProto::Simple)->algbw_GBps,
              98.6, 1e-9);
  // With CollNet, NVLS runs across nodes: per channel min(89.25, 40) → bus 320, algBw
  // 320 · 128/254; latency 25 + 18 = 43 µs.
  const auto n = nccl_estimate(c, 1 << 30, NcclAlgo::Nvls, NcclProto::Simple);
  ASSERT_TRUE(n);
  EXPECT_NEAR(n->algbw_GBps, 320.0 * 128 / 254, 1e-9);
  EXPECT_NEAR(n->latency_us, 43.0, 1e-9);
}

TEST(NcclTuner, AlgorithmNamesAreNcclAlgosNames) {
  // NCCL_ALGO's names (ncclAlgoStr), compared case-insensitively by NCCL.
  const char* names[] = {"ring", "tree",          "nvls",        "nvlstree",
                         "pat",  "collnetdirect", "collnetchain"};
  int i = 0;
  for (NcclAlgo a : kNcclAlgos) EXPECT_EQ(nccl_algo_name(a), names[i++]);
}

TEST(NcclTuner, RingChannelsAsNcclsGraphSearchFindsThem) {
  // search.cc walks the generation's speed array from the fastest speed the path carries, keeps a
  // speed only when channels × speed grows, and goes on while the next speed is > 0.49 of the
  // best; ncclTopoDupChannels doubles the channels unless (Hopper+) speed < 50 with > 4 of them;
  // connect.cc doubles the result (and again on Hopper across nodes under 16 above 45 GB/s).
  NcclTopoBudget b;
  // 8×H100 in a node: 18 NVLinks × 20.6 = 370.8 GB/s. 60 → 6 channels (360); 50 → 7 (350), 40
  // → 9, 30 → 12, 24 → 15, 20 → 18 (all 360, not more); 15 / 60 < 0.49 stops. 60 ≥ 50 → dup
  // 12, × 2 = 24: the 24 CTAs Nsight shows for an FSDP all-gather on H100 (NVIDIA developer
  // forum, "Compute-Communication Overlap Causes Severe GEMM Performance Degradation because of
  // Tail Effect").
  b.arch = GpuArch::Hopper;
  b.nvlink_GBps = 450;
  EXPECT_EQ(nccl_ring_channels(b), 24U);
  // H800: 8 NVLinks (200 GB/s) = 164.8: 60 → 2 (120), 50 → 3 (150), 40 → 4 (160), 30 → 5, 24
  // → 6 (144), 20 → 8 (160, not more); 15 / 40 < 0.49 stops. 40 < 50 but only 4 channels →
  // dup 8, × 2 = 16: NCCL's "16 coll channels" on 8×H800 (NVIDIA/nccl issue 892's log).
  b.nvlink_GBps = 200;
  EXPECT_EQ(nccl_ring_channels(b), 16U);
  // 8×A100: 12 × 20.0 = 240: 40 → 6 channels carry all 240 (stop); dup 12, × 2 = 24.
  b.arch = GpuArch::Ampere;
  b.nvlink_GBps = 300;
  EXPECT_EQ(nccl_ring_channels(b), 24U);
  // 8×B200: 18 × 40.1 = 721.8: 90 → 8 (720); 80 → 9, 60 → 12, 45 → 16 (720), 70 → 10, 50 → 14
  // (700); 40 / 90 < 0.49 stops. dup 16, × 2 = 32.
  b.arch = GpuArch::Blackwell;
  b.nvlink_GBps = 900;
  EXPECT_EQ(nccl_ring_channels(b), 32U);
  // DGX H100 across nodes, 8 NICs of 400 Gb/s (50 GB/s) for 8 GPUs: 48 → one channel a NIC, 8
  // (384); 24 → 2 a NIC, 16 (384, not more); 22 / 48 < 0.49 stops. 48 < 50 with 8 channels: no
  // dup; × 2 = 16, not under 16: 16.
  b.arch = GpuArch::Hopper;
  b.nvlink_GBps = 450;
  b.nodes = 4;
  b.nic_GBps = 50;
  b.nics = 8;
  EXPECT_EQ(nccl_ring_channels(b), 16U);
  // One GPU a node (one NIC): 1 × 48; 24 → 2 (48, not more). dup 2 at 24, × 2 = 4; 24 < 45: 4.
  b.nics = 1;
  EXPECT_EQ(nccl_ring_channels(b), 4U);
  // DGX A100 across nodes, 8 HDR NICs (25 GB/s): 48, 30, 28 exceed 25; 24 → 8 (192); 12 → 16
  // (192, not more); 10 / 24 < 0.49 stops. 24 < 25: no dup; × 2 = 16.
  b.arch = GpuArch::Ampere;
  b.nvlink_GBps = 300;
  b.nic_GBps = 25;
  b.nics = 8;
  EXPECT_EQ(nccl_ring_channels(b), 16U);
}

TEST(NcclTuner, RingAllReduceClosedForm) {
  // 2(n−1)/n · S/B + 2(n−1) · α with n = 8, S = 1 GiB, B = 232 GB/s, α = 3.4 µs:
  // 14/8 · 2^30 / 232e9 = 8.0993 ms, + 14 · 3.4 µs = 47.6 µs → 8.1469 ms.
  EXPECT_NEAR(ring_allreduce_seconds(1 << 30, 8, 232, 3.4), 8.1469e-3, 1e-7);
  EXPECT_EQ(ring_allreduce_seconds(1 << 30, 1, 232, 3.4), 0);
}

}  // namespace
}  // namespace scalescope::cost
