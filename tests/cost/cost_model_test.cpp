// Tests of CostModel (src/cost/cost_model.cpp): cluster validation, communicator shapes, the
// network model's closed forms and its error against measured nccl-tests runs.
#include "cost/cost_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "cost/compute_model.hpp"

namespace scalescope::cost {
namespace {

using graph::OpKind;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

// A DGX/HGX-like node: 8 GPUs, NVSwitch, one NIC per GPU.
ClusterSpec cluster(const char* gpu, double nvlink_GBps, double nic_Gbps) {
  ClusterSpec c;
  c.gpu = gpu;
  c.gpus_per_node = 8;
  c.num_gpus = 1024;
  c.nvlink_bandwidth_GBps = nvlink_GBps;
  c.nvlink_latency_us = 1.5;
  c.nic_bandwidth_Gbps = nic_Gbps;
  c.nics_per_node = 8;
  c.nic_latency_us = 3.0;
  return c;
}

ClusterSpec a100() {
  return cluster("A100", 300, 200);
}

CommShape shape(std::uint32_t ranks, std::uint32_t nodes, std::uint32_t per_node) {
  return CommShape{ranks, nodes, per_node};
}

// nccl-tests bus bandwidth of an all-reduce: S · 2(n−1)/n / t (MODELING §7.4), GB/s.
double allreduce_busbw(double bytes, std::uint32_t n, SimTime ns) {
  return bytes * 2.0 * (n - 1) / n / static_cast<double>(ns);
}

std::string message_of(const ClusterSpec& c) {
  try {
    CostModel m(c);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(CostModel, ConstructorValidatesTheCluster) {
  EXPECT_NO_THROW(CostModel{a100()});
  ClusterSpec c = a100();
  c.gpu = "V100";
  EXPECT_NE(message_of(c).find("cluster.gpu: unknown GPU 'V100'"), std::string::npos)
      << message_of(c);
  c = a100();
  c.gpus_per_node = 0;
  EXPECT_NE(message_of(c).find("cluster.gpus_per_node"), std::string::npos);
  c = a100();
  c.nvlink_bandwidth_GBps = 0;
  EXPECT_NE(message_of(c).find("cluster.nvlink_bandwidth_GBps"), std::string::npos);
  c = a100();
  c.nic_bandwidth_Gbps = -200;
  EXPECT_NE(message_of(c).find("cluster.nic_bandwidth_Gbps"), std::string::npos);
  c = a100();
  c.nic_bandwidth_Gbps = std::nan("");
  EXPECT_NE(message_of(c).find("cluster.nic_bandwidth_Gbps"), std::string::npos);
  c = a100();
  c.nic_latency_us = -1;
  EXPECT_NE(message_of(c).find("cluster.nic_latency_us"), std::string::npos);
}

TEST(CostModel, ShapeOfCountsNodesAndTheLargestGroupOnANode) {
  const CostModel m(a100());                                  // 8 GPUs per node: node = rank / 8
  const std::vector<std::uint32_t> mixed{0, 1, 2, 8, 9, 17};  // nodes 0,0,0,1,1,2
  const CommShape s = m.shape_of(mixed.data(), mixed.data() + mixed.size());
  EXPECT_EQ(s.ranks, 6u);
  EXPECT_EQ(s.nodes, 3u);
  EXPECT_EQ(s.ranks_per_node, 3u);
  const std::vector<std::uint32_t> rail{3, 11, 19, 27};  // a DP group with TP = 8
  const CommShape r = m.shape_of(rail.data(), rail.data() + rail.size());
  EXPECT_EQ(r.ranks, 4u);
  EXPECT_EQ(r.nodes, 4u);
  EXPECT_EQ(r.ranks_per_node, 1u);
  const std::vector<std::uint32_t> tp{8, 9, 10, 11, 12, 13, 14, 15};
  const CommShape t = m.shape_of(tp.data(), tp.data() + tp.size());
  EXPECT_EQ(t.nodes, 1u);
  EXPECT_EQ(t.ranks_per_node, 8u);
}

TEST(CostModel, ComputeNsIsTheComputeModelRoundedToNanoseconds) {
  const CostModel m(a100());
  graph::Op op;
  op.kind = graph::OpKind::Gemm;
  op.shape = {4096, 4096, 4096};
  op.flops = 2.0 * 4096 * 4096 * 4096;
  op.mem_bytes = 6.0 * 4096 * 4096;
  EXPECT_EQ(m.compute_ns(op), seconds_to_ns(compute_seconds(m.gpu(), op)));
}

TEST(CostModel, ClusterKeysOverrideTheKernelDefaults) {
  // Unset keys keep the GPU table's physical defaults (2 µs, 1, 1, 0.8); a set key replaces its
  // own value only, and compute_ns applies it.
  ClusterSpec c = a100();
  c.gemm_efficiency = 0.5;
  const CostModel m(c);
  EXPECT_EQ(m.kernel().gemm_efficiency, 0.5);
  EXPECT_EQ(m.kernel().kernel_overhead_us, 2.0);
  EXPECT_EQ(m.kernel().attention_efficiency, 1.0);
  EXPECT_EQ(m.kernel().hbm_efficiency, 0.8);
  graph::Op op;
  op.kind = graph::OpKind::Gemm;
  op.shape = {4096, 4096, 4096};
  op.flops = 2.0 * 4096 * 4096 * 4096;
  op.mem_bytes = 6.0 * 4096 * 4096;
  EXPECT_EQ(m.compute_ns(op), seconds_to_ns(compute_seconds(m.gpu(), m.kernel(), op)));
  c.kernel_overhead_us = -1.0;
  EXPECT_THROW(CostModel{c}, InputError);
}

TEST(CostModel, BusBandwidthFollowsNvlinkAndTheRailShareOfNics) {
  const CostModel m(a100());
  // One node: 300 GB/s · 232/300 = 232 GB/s.
  EXPECT_NEAR(m.bus_bandwidth_GBps(shape(8, 1, 8)), 232, 1e-9);
  // 8 ranks per node use all 8 NICs: 8 · 25 GB/s · 0.8 = 160 GB/s.
  EXPECT_NEAR(m.bus_bandwidth_GBps(shape(16, 2, 8)), 160, 1e-9);
  // 4 per node: half the NICs, 80 GB/s; 1 per node (a DP group under TP = 8): one NIC, 20 GB/s.
  EXPECT_NEAR(m.bus_bandwidth_GBps(shape(32, 8, 4)), 80, 1e-9);
  EXPECT_NEAR(m.bus_bandwidth_GBps(shape(16, 16, 1)), 20, 1e-9);
  // NICs faster than NVLink: the NVLink term bounds (8 · 800 Gb/s would give 640 GB/s).
  const CostModel fast(cluster("A100", 300, 800));
  EXPECT_NEAR(fast.bus_bandwidth_GBps(shape(16, 2, 8)), 232, 1e-9);
}

TEST(CostModel, NothingToDoCostsNothing) {
  const CostModel m(a100());
  EXPECT_EQ(m.collective_ns(OpKind::AllReduce, 1 * kGiB, shape(1, 1, 1)), 0);
  EXPECT_EQ(m.collective_ns(OpKind::AllGather, 0, shape(8, 1, 8)), 0);
  EXPECT_EQ(m.p2p_ns(0, true), 0);
}

TEST(CostModel, MultiNodeCommunicatorNeedsNics) {
  ClusterSpec c = a100();
  c.nics_per_node = 0;
  const CostModel m(c);
  EXPECT_GT(m.collective_ns(OpKind::AllReduce, kMiB, shape(8, 1, 8)), 0);  // NVLink only: fine
  EXPECT_THROW(m.collective_ns(OpKind::AllReduce, kMiB, shape(16, 2, 8)), InputError);
}

TEST(CostModel, AForcedAlgorithmAppliesWhereNcclCouldRunIt) {
  // network.nccl_algo: tree, as NCCL_ALGO="allreduce:tree": a multi-node all-reduce runs the
  // tree; an all-gather, which the tree cannot run, keeps NCCL's choice (one node: the ring, as
  // the only candidate on A100) instead of failing.
  NetworkOptions opt;
  opt.filter.algo = NcclAlgo::Tree;
  const CostModel m(a100(), opt);
  EXPECT_EQ(m.collective_estimate(OpKind::AllReduce, kGiB, shape(64, 8, 8)).algo, NcclAlgo::Tree);
  EXPECT_EQ(m.collective_estimate(OpKind::AllGather, kGiB, shape(8, 1, 8)).algo, NcclAlgo::Ring);
  // A caller's own filter stays binding (a contract, as before).
  NcclFilter pat;
  pat.algo = NcclAlgo::Pat;
  EXPECT_THROW(m.collective_estimate(OpKind::AllReduce, kGiB, shape(8, 1, 8), pat), ContractError);
}

TEST(CostModel, NcclCollectivesHoldTheirRingChannelsSms) {
  // An NCCL collective holds one SM per ring channel (NcclTuner.RingChannelsAsNcclsGraphSearch-
  // FindsThem derives the counts): 8 H100 of a node 24, 8 a node across DGX H100 nodes (8 NICs
  // of 400 Gb/s) 16, one a node 4.
  const CostModel m(cluster("H100", 450, 400));
  graph::Op ar;
  ar.kind = OpKind::AllReduce;
  EXPECT_EQ(m.comm_kernel_sms(ar, shape(8, 1, 8)), 24U);
  EXPECT_EQ(m.comm_kernel_sms(ar, shape(64, 8, 8)), 16U);
  EXPECT_EQ(m.comm_kernel_sms(ar, shape(8, 8, 1)), 4U);
  // Not NCCL's, or charged elsewhere: a userbuffers TP collective (Op::comm_sms set; its SMs are
  // on its GEMM), DeepEP's dispatch (shape[0] copies), a point-to-point transfer, one member.
  graph::Op ub = ar;
  ub.comm_sms = 16;
  EXPECT_EQ(m.comm_kernel_sms(ub, shape(8, 1, 8)), 0U);
  graph::Op deepep;
  deepep.kind = OpKind::AllToAll;
  deepep.shape = {8, 64, 0};
  EXPECT_EQ(m.comm_kernel_sms(deepep, shape(8, 1, 8)), 0U);
  graph::Op a2a;
  a2a.kind = OpKind::AllToAll;
  EXPECT_EQ(m.comm_kernel_sms(a2a, shape(8, 1, 8)), 24U);
  graph::Op p2p;
  p2p.kind = OpKind::SendRecv;
  EXPECT_EQ(m.comm_kernel_sms(p2p, shape(2, 2, 1)), 0U);
  EXPECT_EQ(m.comm_kernel_sms(ar, shape(1, 1, 1)), 0U);
  // network.comm_kernel_sms: false turns it off.
  NetworkOptions off;
  off.comm_kernel_sms = false;
  EXPECT_EQ(CostModel(cluster("H100", 450, 400), off).comm_kernel_sms(ar, shape(8, 1, 8)), 0U);
}

TEST(CostModel, RingSimpleAllReduceIsTheClosedForm) {
  // Forced to ring / Simple (NCCL_ALGO=Ring NCCL_PROTO=Simple) on one node, NCCL's model is
  // baseLat + nsteps · hwLat + S / algBw = 8.4 µs + 2(n−1) · 3.4 µs + 2(n−1)/n · S / B: the
  // closed form 2(n−1)/n · S/B + 2(n−1)·α with α = 3.4 µs, B = 300 · 232/300 = 232 GB/s, plus
  // NCCL's base latency 8.4 µs once. E.g. n = 8, 1 GiB: 8099.3 + 47.6 + 8.4 = 8155.3 µs.
  NetworkOptions opt;
  opt.filter.algo = NcclAlgo::Ring;
  opt.filter.proto = NcclProto::Simple;
  const CostModel m(a100(), opt);
  for (std::uint32_t n : {2u, 4u, 8u}) {
    for (double bytes : {64.0, 1 * kMiB, 64 * kMiB, 1 * kGiB}) {
      const double expected = ring_allreduce_seconds(bytes, n, 232, 3.4) + 8.4e-6;
      EXPECT_NEAR(static_cast<double>(m.collective_ns(OpKind::AllReduce, bytes, shape(n, 1, n))),
                  expected * 1e9, 1.0)
          << "n = " << n << ", bytes = " << bytes;
    }
  }
  EXPECT_NEAR(static_cast<double>(m.collective_ns(OpKind::AllReduce, kGiB, shape(8, 1, 8))),
              8155.3e3, 0.1e3);
}

TEST(CostModel, AllGatherAndReduceScatterMoveHalfAnAllReduce) {
  // Ring AG/RS of S: nsteps n−1 instead of 2(n−1), so the bandwidth term (n−1)/n · S/B is half
  // the all-reduce's 2(n−1)/n · S/B, on one node and across nodes.
  const CostModel m(a100());
  NcclFilter ring_simple;
  ring_simple.algo = NcclAlgo::Ring;
  ring_simple.proto = NcclProto::Simple;
  for (const CommShape& s : {shape(8, 1, 8), shape(64, 8, 8), shape(16, 16, 1)}) {
    for (double bytes : {1 * kMiB, 256 * kMiB, 4 * kGiB}) {
      const auto ar = m.collective_estimate(OpKind::AllReduce, bytes, s, ring_simple);
      for (OpKind k : {OpKind::AllGather, OpKind::ReduceScatter}) {
        const auto e = m.collective_estimate(k, bytes, s, ring_simple);
        EXPECT_NEAR(e.time_us - e.latency_us, 0.5 * (ar.time_us - ar.latency_us),
                    1e-9 * ar.time_us);
      }
    }
  }
  // With NCCL free to choose, a large single-node AG costs half an AR within 1 %: both run
  // ring / Simple and the latencies (32.2 vs 56 µs) are small against ~16 ms.
  const double ar =
      static_cast<double>(m.collective_ns(OpKind::AllReduce, 4 * kGiB, shape(8, 1, 8)));
  const double ag =
      static_cast<double>(m.collective_ns(OpKind::AllGather, 4 * kGiB, shape(8, 1, 8)));
  EXPECT_NEAR(ag / ar, 0.5, 0.005);
}

TEST(CostModel, BiggerMessageIsNeverFaster) {
  for (const ClusterSpec& c : {a100(), cluster("H100", 450, 400), cluster("B200", 900, 400)}) {
    const CostModel m(c);
    for (const CommShape& s :
         {shape(2, 1, 2), shape(8, 1, 8), shape(16, 2, 8), shape(12, 2, 6), shape(64, 8, 8),
          shape(128, 16, 8), shape(16, 16, 1), shape(1024, 128, 8)}) {
      for (OpKind k : {OpKind::AllReduce, OpKind::AllGather, OpKind::ReduceScatter}) {
        SimTime prev = 0;
        // Geometric steps of 3 % plus every power of two and its neighbours, 1 B … 32 GiB.
        std::vector<double> sizes;
        for (double b = 1; b < 32 * kGiB; b *= 1.03) sizes.push_back(std::floor(b));
        for (int e = 0; e <= 35; ++e)
          for (double d : {-1.0, 0.0, 1.0}) sizes.push_back(std::ldexp(1.0, e) + d);
        std::sort(sizes.begin(), sizes.end());
        for (double b : sizes) {
          if (b <= 0) continue;
          const SimTime t = m.collective_ns(k, b, s);
          ASSERT_GE(t, prev) << c.gpu << " " << graph::op_kind_name(k) << " n = " << s.ranks
                             << " nodes = " << s.nodes << " bytes = " << b;
          prev = t;
        }
      }
    }
  }
}

TEST(CostModel, NcclChoosesTreeForMidSizesAcrossManyNodes) {
  // 128 ranks on 16 A100 nodes, bus 160 GB/s. At 16 MiB: tree/LL128 = 99.5 µs +
  // 16.78e6 B / (160 · 0.92 · 120/128 · 0.5 · 0.9 GB/s) = 99.5 + 270.2 = 369.7 µs, against
  // ring/LL128 = 14 + 224 · 2 + 30 · 4 = 582 µs + 226 µs, tree/Simple 176.4 + 325.9 µs and
  // ring/Simple 1.4 · (8.4 + 224 · 6 + 30 · 14) = 2481 µs + 208 µs.
  const CostModel m(a100());
  const auto mid = m.collective_estimate(OpKind::AllReduce, 16 * kMiB, shape(128, 16, 8));
  EXPECT_EQ(mid.algo, NcclAlgo::Tree);
  EXPECT_EQ(mid.proto, NcclProto::LL128);
  EXPECT_NEAR(mid.time_us, 369.7, 0.1);
  // At 4 GiB the ring's 1.4 · 2481-µs latency is amortized and its bandwidth
  // 160 · 128/254 beats the tree's 160 · 0.92 · 0.5.
  const auto big = m.collective_estimate(OpKind::AllReduce, 4 * kGiB, shape(128, 16, 8));
  EXPECT_EQ(big.algo, NcclAlgo::Ring);
  EXPECT_EQ(big.proto, NcclProto::Simple);
}

TEST(CostModel, SingleNodeBusBandwidthMatchesNvidiaFigures) {
  // nccl-tests all-reduce busbw on 8 GPUs (MODELING §7.5): A100 232 (the figure the NVLink
  // efficiency is derived from), H100 370, H200 365.6 (ring), B200 682.2 (ring). The model:
  // 300 / 450 / 450 / 900 GB/s × 232/300 = 232 / 348 / 348 / 696 GB/s less the latency share.
  struct Case {
    ClusterSpec c;
    double bytes;
    double measured;
    double tolerance;
  };
  // The ring figures are NCCL's without NVLS: Hopper and Blackwell clusters here set nvls off.
  auto ring_only = [](ClusterSpec c) {
    c.nvls = false;
    return c;
  };
  const std::vector<Case> cases{{a100(), 1 * kGiB, 232, 0.01},
                                {ring_only(cluster("H100", 450, 400)), 8 * kGiB, 370, 0.07},
                                {ring_only(cluster("H200", 450, 400)), 8 * kGiB, 365.6, 0.06},
                                {ring_only(cluster("B200", 900, 400)), 8 * kGiB, 682.2, 0.03},
                                // With NVLS (the default on Hopper and later): 8×H100 480 and
                                // 8×B200 838.0 GB/s are the figures kNvlsBusRatio comes from;
                                // 8×H200 473.1 is another measurement (model 480, +1.5 %).
                                {cluster("H100", 450, 400), 8 * kGiB, 480, 0.005},
                                {cluster("H200", 450, 400), 8 * kGiB, 473.1, 0.02},
                                {cluster("B200", 900, 400), 8 * kGiB, 838.0, 0.005}};
  for (const Case& k : cases) {
    const CostModel m(k.c);
    const double busbw =
        allreduce_busbw(k.bytes, 8, m.collective_ns(OpKind::AllReduce, k.bytes, shape(8, 1, 8)));
    std::printf("  8x%-5s model busbw %6.1f GB/s, measured %6.1f (%+.1f %%)\n", k.c.gpu.c_str(),
                busbw, k.measured, 100 * (busbw / k.measured - 1));
    EXPECT_NEAR(busbw / k.measured, 1.0, k.tolerance) << k.c.gpu;
  }
}

TEST(CostModel, MultiNodeBusBandwidthIsWithinAFifthOfDgxFigures) {
  // GTC24 S62129 (MODELING §7.5): DGX A100 8 × 200 Gb → 192 GB/s, DGX H100 8 × 400 Gb → 380.
  // The NIC efficiency 0.8 is a compromise with the Azure data (docs/cost-model.md §2.3), so the
  // model sits ~18 % below these: A100 min(232, 8 · 25 · 0.8) = 160, H100 min(348, 320) = 320,
  // less latency, at 8 GiB over 8 nodes.
  const CostModel a(a100());
  const double a_bw =
      allreduce_busbw(8 * kGiB, 64, a.collective_ns(OpKind::AllReduce, 8 * kGiB, shape(64, 8, 8)));
  const CostModel h(cluster("H100", 450, 400));
  const double h_bw =
      allreduce_busbw(8 * kGiB, 64, h.collective_ns(OpKind::AllReduce, 8 * kGiB, shape(64, 8, 8)));
  std::printf("  DGX A100 x8 nodes: model %.1f GB/s vs 192 (%+.1f %%)\n", a_bw,
              100 * (a_bw / 192 - 1));
  std::printf("  DGX H100 x8 nodes: model %.1f GB/s vs 380 (%+.1f %%)\n", h_bw,
              100 * (h_bw / 380 - 1));
  EXPECT_NEAR(a_bw / 192, 1.0, 0.20);
  EXPECT_NEAR(h_bw / 380, 1.0, 0.20);
}

struct AzureRow {
  std::uint32_t ranks;
  double bytes;
  double time_us;
};

std::vector<AzureRow> read_azure_csv() {
  std::ifstream in(SCALESCOPE_SOURCE_DIR "/../shared/validation/nccl_allreduce_azure_a100.csv");
  std::vector<AzureRow> rows;
  if (!in) return rows;
  std::string line;
  std::getline(in, line);  // header: ranks,size_bytes,time_us,busbw_GBps
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    AzureRow r{};
    char comma = 0;
    if (ss >> r.ranks >> comma >> r.bytes >> comma >> r.time_us) rows.push_back(r);
  }
  return rows;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs the model over the Azure ND A100 v4 rows (8 GPUs and 8 × 200 Gb/s NICs per node), prints
// each row's error and returns the median |error| of the rows ≥ 16 MiB.
double azure_median_error(const std::vector<AzureRow>& rows, const NetworkOptions& opt,
                          const char* label) {
  const CostModel m(a100(), opt);
  std::vector<double> large, all;
  std::printf("  Azure ND A100 v4 all-reduce, NIC efficiency %.2f (%s)\n", opt.nic_efficiency,
              label);
  std::printf("  ranks       bytes  measured_us   model_us   error  choice\n");
  for (const AzureRow& r : rows) {
    const CommShape s = shape(r.ranks, (r.ranks + 7) / 8, std::min(r.ranks, 8u));
    const auto e = m.collective_estimate(OpKind::AllReduce, r.bytes, s);
    const double t = static_cast<double>(m.collective_ns(OpKind::AllReduce, r.bytes, s)) * 1e-3;
    const double err = t / r.time_us - 1;
    std::printf("  %5u %11.0f %12.1f %10.1f %+6.1f%%  %s/%s\n", r.ranks, r.bytes, r.time_us, t,
                100 * err, std::string(nccl_algo_name(e.algo)).c_str(),
                std::string(nccl_proto_name(e.proto)).c_str());
    all.push_back(std::fabs(err));
    if (r.bytes >= 16 * kMiB) large.push_back(std::fabs(err));
  }
  const double med = median(large);
  std::printf("  median |error|: %.1f %% for >= 16 MiB (%zu rows), %.1f %% over all %zu rows\n",
              100 * med, large.size(), 100 * median(all), all.size());
  return med;
}

TEST(CostModel, MatchesAzureAllReduceMeasurements) {
  const std::vector<AzureRow> rows = read_azure_csv();
  if (rows.empty()) GTEST_SKIP() << "shared/validation/nccl_allreduce_azure_a100.csv not found";
  ASSERT_EQ(rows.size(), 39u);
  // Defaults (NIC efficiency 0.8, the compromise with the DGX figures): measured 17.7 %, the
  // model being faster than this Azure system on every row ≥ 16 MiB but one.
  EXPECT_LE(azure_median_error(rows, NetworkOptions{}, "default"), 0.20);
  // The Azure-only fit (0.64): measured 3.7 %.
  NetworkOptions azure;
  azure.nic_efficiency = 0.64;
  EXPECT_LE(azure_median_error(rows, azure, "Azure fit"), 0.06);
}

TEST(CostModel, PointToPointIsLatencyPlusBytesOverBandwidth) {
  const CostModel m(a100());  // NVLink 300 GB/s, 1.5 µs; NIC 200 Gb/s, 3 µs
  // Same node: 1.5 µs + 1e9 B / (300e9 · 0.88 B/s) = 1.5 µs + 3787.9 µs.
  EXPECT_NEAR(static_cast<double>(m.p2p_ns(1e9, true)), 1.5e3 + 1e9 / (300 * 0.88), 1.0);
  // Across nodes, one NIC: 3 µs + 1e9 B / (25e9 · 0.96 B/s) = 3 µs + 41666.7 µs.
  EXPECT_NEAR(static_cast<double>(m.p2p_ns(1e9, false)), 3e3 + 1e9 / (25 * 0.96), 1.0);
  EXPECT_NEAR(static_cast<double>(m.p2p_ns(1e9, false)), 41669.7e3, 0.1e3);
  // A tiny message costs the latency.
  EXPECT_NEAR(static_cast<double>(m.p2p_ns(1, true)), 1.5e3, 1.0);
}

/// a100()'s NIC bandwidth per GPU as the all-to-all sees it: nics_per_node / gpus_per_node NICs
/// of 25e9 B/s at the point-to-point efficiency 0.96.
double a100_nic_share() {
  const ClusterSpec c = a100();
  return 25e9 * static_cast<double>(c.nics_per_node) / static_cast<double>(c.gpus_per_node) * 0.96;
}

TEST(CostModel, AllToAllIsTheSlowerOfNvlinkAndNicShares) {
  // 16 members on 2 nodes of 8 (a100(): NVLink 300 GB/s, 1.5 µs; 200 Gb/s NICs, 3 µs), 64 MiB
  // sent per member, 1/16 to each: 7/16 over NVLink at 300e9 · 0.88 B/s = 111.2 µs, 8/16 over
  // the GPU's NIC share (nics_per_node / gpus_per_node NICs of 25e9 B/s, efficiency 0.96) =
  // 1398.1 µs at one NIC per GPU: the NIC sets the time, plus the 3 µs inter-node latency.
  const CostModel m(a100());
  const double S = 64.0 * 1024 * 1024;
  const double nic = a100_nic_share();
  const double expected_ns = 3e3 + std::max(S * 7 / 16 / (300e9 * 0.88), S * 8 / 16 / nic) * 1e9;
  EXPECT_NEAR(static_cast<double>(m.collective_ns(graph::OpKind::AllToAll, S, {16, 2, 8})),
              expected_ns, 1.0);
  // One node of 8: NVLink only, 7/8 of the buffer, 1.5 µs.
  EXPECT_NEAR(static_cast<double>(m.collective_ns(graph::OpKind::AllToAll, S, {8, 1, 8})),
              1.5e3 + S * 7 / 8 / (300e9 * 0.88) * 1e9, 1.0);
}

TEST(CostModel, AllToAllOverManyPeersIsNeverFasterThanItsLowerBound) {
  // 1,024 ranks = 128 DGX H100 nodes of 8 (one 400 Gb/s NIC a GPU, NIC latency 3 µs here, NVLink
  // 1.5 µs), 1 MiB per member: 1 KiB to each peer (issue 38: ASTRA-sim's generated case, which
  // replayed in 34.8 µs). Two bounds, derived by hand:
  // - NIC injection at full line rate: 1,016 of the 1,024 KiB leave the node through the GPU's
  //   50e9 B/s NIC: 1,040,384 / 50e9 = 20.81 µs, plus one NIC latency: 23.81 µs.
  // - NCCL's batches (v2.27.7): C = 16 p2p channels (DGX H100 across nodes: 16 collective
  //   channels, NcclTuner.RingChannels; already a power of two), each remote node's 8 ranks one
  //   batch on channel (node mod 16), batches of a channel one after another: ⌈127/16⌉ = 8
  //   batches, plus the first ready-to-receive message, 9 × 3 µs = 27 µs.
  ClusterSpec c = cluster("H100", 450, 400);
  const CostModel m(c);
  const CommShape s = shape(1024, 128, 8);
  EXPECT_EQ(m.p2p_channels(s), 16U);
  EXPECT_EQ(m.a2a_latency_chain_ns(s), 27000);
  const double injection_ns = 3e3 + kMiB * 1016 / 1024 / 50e9 * 1e9;
  for (double bytes = 1024; bytes <= 1 * kGiB; bytes *= 4) {
    const auto t = static_cast<double>(m.collective_ns(OpKind::AllToAll, bytes, s));
    EXPECT_GE(t, 27000.0) << bytes;
    EXPECT_GE(t, 3e3 + bytes * 1016 / 1024 / 50e9 * 1e9) << bytes;
  }
  // At 1 MiB the chain sets the time (the wire at the point-to-point efficiency 0.96 takes
  // 3 + 20.81 / 0.96 = 24.68 µs): 27 µs, where the bandwidth model alone gave 24.68.
  EXPECT_GT(27000.0, injection_ns);
  EXPECT_EQ(m.collective_ns(OpKind::AllToAll, kMiB, s), 27000);
  // On one node of 8: its 7 peers are one batch, plus the handshake: 2 × 1.5 µs for a tiny
  // buffer.
  EXPECT_EQ(m.collective_ns(OpKind::AllToAll, 64, shape(8, 1, 8)), 3000);
}

TEST(CostModel, FlexDispatchSendsATokenOncePerNode) {
  // DeepEP (Megatron's flex dispatcher): 16 EP ranks on 2 nodes of 8 (a100(): 200 Gb/s NICs at
  // 0.96, 3 µs), top-2 of 8 experts, 4 a node. A token misses the other node with probability
  // C(4, 2)/C(8, 2) = 6/28, so it reaches 2·(1 − 6/28) = 11/7 nodes, 11/14 of a send to the other
  // node; the all-to-all sends 8/16 of its 2 copies there, 1 per token. Per member S = 64 MiB of
  // copies, S/2 of tokens: the NIC moves S/2 · 11/14 (the NVLink side, 7/16 of S, stays faster),
  // at HybridEP's measured 2-node fraction of the NIC, (0.7171 + 0.6295)/2, not NCCL's 0.96.
  const CostModel m(a100());
  const double S = 64.0 * 1024 * 1024;
  const double nic = a100_nic_share() / 0.96 * (0.7171 + 0.6295) / 2;
  const double expected_ns = 3e3 + S / 2 * 11 / 14 / nic * 1e9;
  EXPECT_NEAR(static_cast<double>(m.ep_dispatch_ns(S, 2, 8, {16, 2, 8})), expected_ns, 1.0);
  // 11/14 of the all-to-all's 1 per token, but at 0.673 / 0.96 of NCCL's rate: over two nodes
  // HybridEP's measured kernels lose more than the saved bytes, (11/14) / (0.673/0.96) = 1.12×
  // the all-to-all's wire time.
  const double a2a_wire = S / 2 / a100_nic_share() * 1e9;
  EXPECT_NEAR(static_cast<double>(m.ep_dispatch_ns(S, 2, 8, {16, 2, 8})) - 3e3,
              a2a_wire * (11.0 / 14) / ((0.7171 + 0.6295) / 2 / 0.96), 1.0);
  // On one node with one expert a rank, a token's 2 experts are on 2 ranks: the all-to-all (on
  // an A100 the flex kernels' NVLink fraction is NCCL's point-to-point one).
  EXPECT_EQ(m.ep_dispatch_ns(S, 2, 8, {8, 1, 8}),
            m.collective_ns(graph::OpKind::AllToAll, S, {8, 1, 8}));
}

TEST(CostModel, FlexDispatchSendsATokenOncePerRank) {
  // One node of 8, top-8 of 32 experts (4 a rank): a rank is missed with probability
  // C(28, 8)/C(32, 8) = (24·23·22·21)/(32·31·30·29) = 0.29549499, so a token reaches
  // 8·0.70450501 = 5.63604 ranks, 7/8 of them others, instead of 7/8 of its 8 copies. S = 64 MiB
  // of copies, S/8 of tokens, over NVLink at 300 GB/s · 396/450, plus 1.5 µs.
  const CostModel m(a100());
  const double S = 64.0 * 1024 * 1024;
  const double nvlink = 300e9 * 396.0 / 450.0;
  const double expected_ns = 1.5e3 + S / 8 * 5.63604005 * 7 / 8 / nvlink * 1e9;
  EXPECT_NEAR(static_cast<double>(m.ep_dispatch_ns(S, 8, 32, {8, 1, 8})), expected_ns, 2.0);
  EXPECT_LT(m.ep_dispatch_ns(S, 8, 32, {8, 1, 8}),
            m.collective_ns(graph::OpKind::AllToAll, S, {8, 1, 8}));
}

TEST(CostModel, FlexDispatchAgainstHybridEpOnH100) {
  // Megatron-Core's MoE report (arXiv 2603.07685, Table 7): HybridEP dispatch / combine of 4,096
  // tokens of hidden 7,168 (bf16), 256 experts, top-8 (DeepSeek-V3), on H100 nodes of 8 with
  // 8 × 400 Gb/s, in µs: EP 8 661 / 624, EP 16 1,485 / 1,688, EP 32 3,064 / 3,088, EP 64
  // 4,626 / 4,398 (held out: the link fractions come from HybridEP's own tables). The test
  // asserts the model's closed form for each row, derived by hand (docs/cost-model.md §2.4),
  // and prints the comparison with the measurement, with unlimited routing and with
  // DeepSeek-V3's node-limited routing (8 groups, the best 4); the errors are reported there,
  // not asserted: a tolerance set around them would only restate today's output (issue 23).
  //   A token's 8 experts of 256, spread evenly, reach r = n·(1 − Π_{i<8} (256 − 256/n − i) /
  //   (256 − i)) of n units. T = 4,096 · 7,168 · 2 = 58,720,256 B of tokens. NVLink moves
  //   T · r_ranks · 7/8 at 450 · 396/450 = 396 GB/s (+ 1 µs latency in one node); across N nodes
  //   the NICs move T · r_nodes · (N − 1)/N at 50 GB/s × HybridEP's measured fraction for N
  //   nodes (0.6733, 0.8636, 0.87275; cost_model.cpp) (+ 5 µs); the slower side sets the time.
  //   Node-limited, a token reaches at most the nodes of its 4 groups of 8, one group or more a
  //   node: N·(1 − C(8 − 8/N, 4)/C(8, 4)) = 1.971429, 3.142857, 4 nodes. By hand:
  //     EP 8:  r_ranks 5.294652 → 58,720,256 · 5.294652 · 7/8 / 396e9 = 686.96 µs, + 1 = 687.96
  //     EP 16: r_nodes 1.993020 → T · 1.993020 · 1/2 / 33.665e9 = 1,738.17 µs, + 5; limited
  //            1.971429 → 1,719.33, + 5
  //     EP 32: r_nodes 3.614214 → T · 3.614214 · 3/4 / 43.18e9 = 3,686.21, + 5; limited 3,205.47
  //     EP 64: r_nodes 5.294652 → T · 5.294652 · 7/8 / 43.6375e9 = 6,234.10, + 5; limited 4,709.73
  ClusterSpec c = cluster("H100", 450, 400);
  c.nvlink_latency_us = 1.0;
  c.nic_latency_us = 5.0;
  const CostModel m(c);
  const double S = 4096.0 * 7168 * 2 * 8;  // the copies: 8 per token
  const struct {
    std::uint32_t ep;
    double model_us, limited_us, dispatch_us, combine_us;
  } rows[] = {{8, 687.96, 687.96, 661, 624},
              {16, 1743.17, 1724.33, 1485, 1688},
              {32, 3691.21, 3210.47, 3064, 3088},
              {64, 6239.10, 4714.73, 4626, 4398}};
  std::printf(
      "  HybridEP on H100 (MoE report Table 7): EP, model us (unlimited, node-limited), "
      "dispatch / combine us, node-limited error\n");
  for (const auto& r : rows) {
    const CommShape sh{r.ep, std::max(1u, r.ep / 8), std::min(8u, r.ep)};
    const double us = static_cast<double>(m.ep_dispatch_ns(S, 8, 256, sh)) * 1e-3;
    const double lim =
        static_cast<double>(m.ep_dispatch_ns(S, 8, 256, sh, graph::routing_groups(8, 4))) * 1e-3;
    EXPECT_NEAR(us, r.model_us, 0.05) << "EP " << r.ep;
    if (r.ep > 8) {
      EXPECT_NEAR(lim, r.limited_us, 0.05) << "EP " << r.ep;
    }
    std::printf("  EP %2u %8.1f %8.1f %6.0f / %6.0f  %+5.1f / %+5.1f %%\n", r.ep, us, lim,
                r.dispatch_us, r.combine_us, 100 * (lim / r.dispatch_us - 1),
                100 * (lim / r.combine_us - 1));
  }
}

TEST(CostModel, FlexLinkFractionsByArchitectureAndNodes) {
  // HybridEP's measured fractions (cost_model.cpp): NVLink on Blackwell the median of its B200 and
  // GB200 kernel-time figures, (0.6913 + 0.6940) / 2; on Hopper NCCL's point-to-point 396 / 450.
  // The NIC: 2, 4, 8 nodes (0.7171 + 0.6295) / 2, (0.8653 + 0.8619) / 2, (0.8745 + 0.8710) / 2;
  // log-linear between (3 nodes: x = log2 3 − 1 = 0.585 of the way from 2 to 4), the 8-node one
  // beyond, and at one node the 2-node one (not used: nothing leaves the node).
  const double n2 = (0.7171 + 0.6295) / 2, n4 = (0.8653 + 0.8619) / 2, n8 = (0.8745 + 0.8710) / 2;
  EXPECT_DOUBLE_EQ(flex_link_efficiency(GpuArch::Blackwell, 1).nvlink, (0.6913 + 0.6940) / 2);
  EXPECT_DOUBLE_EQ(flex_link_efficiency(GpuArch::Hopper, 1).nvlink, 396.0 / 450.0);
  // (Off Blackwell the network's point-to-point NVLink fraction, whatever it is set to.)
  EXPECT_DOUBLE_EQ(flex_link_efficiency(GpuArch::Hopper, 1, 0.5).nvlink, 0.5);
  EXPECT_DOUBLE_EQ(flex_link_efficiency(GpuArch::Hopper, 2).nic, n2);
  EXPECT_DOUBLE_EQ(flex_link_efficiency(GpuArch::Hopper, 4).nic, n4);
  EXPECT_DOUBLE_EQ(flex_link_efficiency(GpuArch::Hopper, 8).nic, n8);
  EXPECT_NEAR(flex_link_efficiency(GpuArch::Hopper, 3).nic, n2 + (n4 - n2) * (std::log2(3.0) - 1),
              1e-15);
  EXPECT_NEAR(flex_link_efficiency(GpuArch::Hopper, 6).nic, n4 + (n8 - n4) * (std::log2(6.0) - 2),
              1e-15);
  EXPECT_DOUBLE_EQ(flex_link_efficiency(GpuArch::Blackwell, 64).nic, n8);
}

TEST(CostModel, GroupLimitedRoutingReachesFewerNodes) {
  // 32 EP ranks on 4 nodes of 8, top-4 of 16 experts (4 a node), S = 64 MiB of copies, S/4 of
  // tokens. Unlimited, a node is missed with probability C(12, 4)/C(16, 4) = 495/1820.
  // Groups inside nodes (4 groups, the best 2): a token reaches the nodes of its 2 groups,
  // 4·(1 − C(3, 2)/C(4, 2)) = 2 (fewer than 4·(1 − 495/1820) = 2.91). Nodes inside groups
  // (2 groups of 2 nodes, the best 1): its 4 experts come from 8 on 2 nodes,
  // 2·(1 − C(4, 4)/C(8, 4)) = 138/70 nodes. The NIC moves (S/4)·reached·3/4.
  // The NIC at HybridEP's measured 4-node fraction, (0.8653 + 0.8619)/2.
  const CostModel m(a100());
  const double S = 64.0 * 1024 * 1024;
  const double nic = a100_nic_share() / 0.96 * (0.8653 + 0.8619) / 2;
  const auto expected = [&](double reached) { return 3e3 + S / 4 * reached * 3 / 4 / nic * 1e9; };
  const CommShape shape{32, 4, 8};
  EXPECT_NEAR(static_cast<double>(m.ep_dispatch_ns(S, 4, 16, shape)),
              expected(4 * (1 - 495.0 / 1820)), 1.0);
  EXPECT_NEAR(static_cast<double>(m.ep_dispatch_ns(S, 4, 16, shape, graph::routing_groups(4, 2))),
              expected(2), 1.0);
  EXPECT_NEAR(static_cast<double>(m.ep_dispatch_ns(S, 4, 16, shape, graph::routing_groups(2, 1))),
              expected(138.0 / 70), 1.0);
}

}  // namespace
}  // namespace scalescope::cost

namespace scalescope::cost {
namespace {

TEST(CostModel, DurationsPastTheModelledRangeAreInputErrorsNamingTheKeys) {
  // Issue 38: at gemm_efficiency 1e-15 a 4096³ bf16 GEMM (2·4096³ ≈ 1.4e11 FLOPs) would take
  // ≈ 1.4e11 / (1e-15 · ~1e15 FLOP/s) ≈ 1.4e11 s, past the 10^6 s an op may take; its
  // nanoseconds would wrap int64 (it once gave 92 % MFU). The error names the op and the key.
  ClusterSpec c = a100();
  c.gemm_efficiency = 1e-15;
  const CostModel m(c);
  graph::Op op;
  op.kind = OpKind::Gemm;
  op.name = graph::OpName::QkvGemm;
  op.shape = {4096, 4096, 4096};
  op.flops = 2.0 * 4096 * 4096 * 4096;
  op.mem_bytes = 3 * 2.0 * 4096 * 4096;
  try {
    (void)m.compute_ns(op);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("qkv_gemm"), std::string::npos) << what;
    EXPECT_NE(what.find("cluster.gemm_efficiency=1e-15"), std::string::npos) << what;
  }
  // A latency of 10^15 µs (10^9 s) on a point-to-point transfer, likewise.
  ClusterSpec l = a100();
  l.nic_latency_us = 1e15;
  EXPECT_THROW((void)CostModel(l).p2p_ns(1e6, false), InputError);
  // Efficiencies are fractions: (0, 1].
  ClusterSpec f = a100();
  f.hbm_efficiency = 1.5;
  EXPECT_NE(message_of(f).find("cluster.hbm_efficiency must be in (0, 1]"), std::string::npos);
  // At the edge: 10^6 s converts, a hair more does not.
  SimTime ns = 0;
  EXPECT_TRUE(duration_ns(kMaxDurationSeconds, ns));
  EXPECT_EQ(ns, SimTime{1'000'000'000'000'000});
  EXPECT_FALSE(duration_ns(kMaxDurationSeconds * (1 + 1e-12), ns));
  EXPECT_FALSE(duration_ns(std::nan(""), ns));
  EXPECT_FALSE(duration_ns(-1e-9, ns));
}

}  // namespace
}  // namespace scalescope::cost
