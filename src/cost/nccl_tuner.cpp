// NCCL's tuner, constants from NCCL src/graph/tuning.cc (2.2x; MODELING §7.2–7.3 checked them
// against 2.30.7). Units as NCCL's: microseconds and GB/s, so bytes / (1000 · GB/s) is in µs.
#include "cost/nccl_tuner.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <span>

#include "core/error.hpp"

namespace scalescope::cost {
namespace {

constexpr int idx(NcclProto p) {
  return static_cast<int>(p);
}
constexpr int kTree = 0;
constexpr int kRing = 1;

// baseLat[algo][proto], µs (tuning.cc `baseLat`; MODELING §7.2).
constexpr double kBaseLat[2][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}};
// hwLat[NVLINK][algo][proto] and hwLat[NET][algo][proto], µs (tuning.cc `hwLat`; §7.2). NVLink is
// assumed inside every node (NVSwitch systems); the PCI row is not used.
constexpr double kHwLatNvlink[2][3] = {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}};
constexpr double kHwLatNet[2][3] = {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}};
// llMaxBws[row][nodes index], GB/s (tuning.cc; §7.3). One node: row by GPU generation. Several
// nodes: row 0 for Intel hosts, row 1 for AMD (NCCL reuses the Volta/Ampere rows), column 1 for
// two nodes and 2 for more.
constexpr double kLlMaxBw[4][3] = {
    {39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
// treeCorrectionFactor[proto][log2(bytes/64)], 64 B … 256 MiB (tuning.cc); no correction above.
constexpr double kTreeCorrection[3][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7,  .7,  .7,  .6, .5,
     .4,  .4,  .5,  .6,  .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7,  .6, .6,
     .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};
// Ring channels assumed for the plateau test bytes / (nChannels · nRanks) ≥ 64 (tuning.cc). NCCL
// uses 16–32 ring channels on 8-GPU NVSwitch nodes (assumption); the test only moves the step at
// a few hundred KiB.
constexpr double kAssumedChannels = 16;

// The other algorithms' constants (tuning.cc; MODELING §7.2–7.3), Simple only.
constexpr double kNvlsEfficiency[4] = {0.0, 0.0, 0.85, 0.74};  // nvlsEfficiency by generation
// perChMaxNVLSTreeBws[generation][nodes index], GB/s.
constexpr double kPerChMaxNvlsTree[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}, {0.0, 96.0, 80.0}};
// hwLat[NVLINK] and hwLat[NET] of NVLS, NVLS-Tree, CollNet Direct, CollNet Chain, PAT; µs.
// baseLat is 0 for NVLS, NVLS-Tree and CollNet and 8 for PAT.
constexpr double kNvlsLat[2] = {25.0, 18.0};
constexpr double kNvlsTreeLat[2] = {25.0, 20.9};
constexpr double kCollNetDirectLat[2] = {3.7, 31.0};
constexpr double kCollNetChainLat[2] = {2.8, 30.0};
constexpr double kPatBaseLat = 8.0;
constexpr double kPatNetTreeLat = 14.0;  // ppn = 1: the tree's network latency (hwLat NET Tree)
constexpr double kPatBwFactor = 0.75;
/// NVLS channels: NCCL_MAX_NVLS_ARITY (device.h) bounds them, the GPUs of the node set them
/// (search.cc: maxChannels = min(arity, GPUs)); the search keeps channels × bwIntra within the
/// GPU's NVLink bandwidth, which the NVLS graph reaches with 8 channels (8 × 60 GB/s = 480 GB/s
/// measured on 8×H100, MODELING §7.5; 60 is sm90SpeedArrayIntra's first speed).
constexpr double kNvlsMaxArity = 32;
constexpr double kNvlsFullChannels = 8;

int log2i(std::uint32_t v) {  // floor(log2(v)), v ≥ 1, as NCCL's log2i
  int r = 0;
  while (v >>= 1) ++r;
  return r;
}

// NCCL applies treeCorrectionFactor as a step function of floor(log2(bytes/64)). We interpolate
// linearly in log2(bytes) between the table points instead: the steps make a bigger message
// faster at some boundaries (0.5 → 0.6), the interpolation keeps time increasing with size
// (docs/cost-model.md §2.2).
double tree_correction(NcclProto p, double bytes) {
  const double x = std::log2(std::max(bytes, 64.0) / 64.0);
  const auto& row = kTreeCorrection[idx(p)];
  if (x >= 23) return 1.0;
  const double lo = std::floor(x);
  const auto i = static_cast<std::size_t>(lo);
  const double next = i + 1 < 23 ? row[i + 1] : 1.0;
  return row[i] + (next - row[i]) * (x - lo);
}

double ll_max_bw(const NcclComm& c) {
  if (c.nodes <= 1) return kLlMaxBw[static_cast<int>(c.arch)][0];
  return kLlMaxBw[c.cpu == CpuVendor::Amd ? 1 : 0][c.nodes == 2 ? 1 : 2];
}

/// NVLS, NVLS-Tree, PAT and CollNet (Simple only), as ncclTopoTuneModel and
/// ncclTopoGetAlgoTime compute them; nullopt where NCCL disables them.
std::optional<NcclEstimate> simple_only_estimate(const NcclComm& c, double bytes, NcclAlgo algo) {
  const bool allreduce = c.kind == graph::OpKind::AllReduce;
  const double n = c.ranks;
  const double ppn = n / c.nodes;  // NCCL's float ppn
  const int local = static_cast<int>(c.ranks / c.nodes);
  const auto gen = static_cast<int>(c.arch);
  const int nodes_idx = c.nodes <= 2 ? static_cast<int>(c.nodes) - 1 : 2;
  NcclEstimate e{algo, NcclProto::Simple, 0, 0, 0};
  double bus = 0;
  switch (algo) {
    case NcclAlgo::Nvls:
    case NcclAlgo::NvlsTree: {
      // NVLink SHARP on Hopper and later, with two or more GPUs of the communicator in a node
      // (nvls.cc: gpuCount < 2 disables it). NVLS across nodes needs CollNet (its all-gather and
      // reduce-scatter there need the plugin's, not assumed); NVLS-Tree is all-reduce across
      // nodes only.
      if (!(c.nvls_bw_GBps > 0) || c.arch < GpuArch::Hopper || local < 2) return std::nullopt;
      const bool tree = algo == NcclAlgo::NvlsTree;
      if (tree && (!allreduce || c.nodes < 2)) return std::nullopt;
      if (!tree && c.nodes > 1 && (!c.collnet || !allreduce)) return std::nullopt;
      const double ch = std::min<double>(local, kNvlsMaxArity);
      const double bw_intra = c.nvls_bw_GBps / std::max(ch, kNvlsFullChannels);
      double intra = bw_intra * kNvlsEfficiency[gen] * (ch - 1) / ch;
      intra *= allreduce ? 2.0 : (ppn - 1) / ppn;  // all-reduce pipelines two operations
      // One node: the NVLS graph's bwInter equals its bwIntra; across nodes, the NICs' share.
      double inter = c.nodes > 1 ? c.inter_bw_GBps / ch : bw_intra;
      if (tree && c.nodes <= 2) inter *= 2;
      double per_channel = std::min(intra, inter);
      if (tree) per_channel = std::min(per_channel, kPerChMaxNvlsTree[gen][nodes_idx]);
      bus = ch * per_channel;
      // Bus → algorithm bandwidth: n/nsteps for all-reduce; none for all-gather and
      // reduce-scatter off the ring.
      e.algbw_GBps = allreduce ? bus * n / (2 * (n - 1)) : bus;
      // Blackwell x86 hosts correct the NVLS-Tree all-reduce as the tree's (x86 assumed).
      if (tree && c.arch == GpuArch::Blackwell)
        e.algbw_GBps *= tree_correction(NcclProto::Simple, bytes);
      const auto& lat = tree ? kNvlsTreeLat : kNvlsLat;
      e.latency_us =
          tree ? lat[0] + 2 * log2i(c.nodes) * lat[1] : lat[0] + (c.nodes > 1 ? lat[1] : 0.0);
      break;
    }
    case NcclAlgo::Pat: {
      // All-gather and reduce-scatter with one GPU per node (ncclPatEnable).
      if (allreduce || c.nodes != c.ranks) return std::nullopt;
      bus = c.bus_bw_GBps * kPatBwFactor;
      e.algbw_GBps = bus;
      // Log latency plus a linear part: base + log2(nNodes)·interLat/3.5 + 2.8·nRanks.
      e.latency_us = kPatBaseLat + log2i(c.nodes) * (kPatNetTreeLat / 3.5) + 2.8 * n;
      break;
    }
    case NcclAlgo::CollNetDirect:
    case NcclAlgo::CollNetChain: {
      // All-reduce across nodes, reduced in the fabric (collnetEnable); all-gather and
      // reduce-scatter need the plugin's iallgather / ireducescatter (not assumed).
      if (!c.collnet || !allreduce || c.nodes < 2) return std::nullopt;
      // CollNet reads its graph's bwIntra: the NVLink side, nChannels × bwIntra.
      bus = c.intra_bw_GBps > 0 ? c.intra_bw_GBps : c.bus_bw_GBps;
      const bool direct = algo == NcclAlgo::CollNetDirect;
      const double inter =
          ppn == 1 ? kPatNetTreeLat : (direct ? kCollNetDirectLat[1] : kCollNetChainLat[1]);
      if (direct) {
        // Full speed needs a NIC per GPU: the GPU/NIC ratio f costs f − (f − 1)/2.
        double f = ppn / std::max(1.0, std::min<double>(local, c.nics));
        f -= (f - 1) / 2;
        bus /= f;
        if (c.arch >= GpuArch::Hopper) bus *= 0.85;
        e.latency_us =
            2 * (std::min(1, local - 1) * kCollNetDirectLat[0] + (local - 1) * 0.4) + inter;
      } else {
        e.latency_us = 2 * (local - 1) * kCollNetChainLat[0] + inter;
      }
      e.algbw_GBps = bus * 0.5;
      break;
    }
    default:
      return std::nullopt;
  }
  if (!(e.algbw_GBps > 0)) return std::nullopt;
  e.time_us = e.latency_us + bytes / (1000.0 * e.algbw_GBps);
  return e;
}

// The ring graph search's per-channel speeds (search.cc, NCCL 2.30): inside a node and across
// nodes, before Hopper, on Hopper (sm90) and on Blackwell (sm100).
constexpr double kSpeedIntra[] = {40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0,
                                  9.0,  7.0,  6.0,  5.0,  4.0,  3.0};
constexpr double kSpeedInter[] = {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0,
                                  7.0,  6.0,  5.0,  4.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr double kSm90SpeedIntra[] = {60.0, 50.0, 40.0, 30.0, 24.0, 20.0,
                                      15.0, 12.0, 11.0, 6.0,  3.0};
constexpr double kSm90SpeedInter[] = {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                                      15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr double kSm100SpeedIntra[] = {90.0, 80.0, 70.0, 60.0, 50.0, 45.0,
                                       40.0, 30.0, 24.0, 20.0, 19.0, 18.0};
constexpr double kSm100SpeedInter[] = {96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0,
                                       20.0, 17.5, 15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
// NVLink bandwidth of one link in NCCL's topology (topo.h SM80/SM90/SM100_NVLINK_BW) against the
// datasheet's per-direction figure for that link (25 GB/s up to Hopper, 50 on Blackwell).
constexpr double kNcclNvlinkPerLink[] = {20.0, 20.0, 20.6, 40.1};
constexpr double kDatasheetNvlinkPerLink[] = {25.0, 25.0, 25.0, 50.0};
constexpr double kPciBw = 12.0;             // topo.h PCI_BW: PCIe Gen3 x16
constexpr std::uint32_t kMaxChannels = 64;  // device.h MAXCHANNELS; the ring graph's max is half

}  // namespace

std::string_view nccl_algo_name(NcclAlgo a) {
  // NCCL_ALGO's names (`ncclAlgoStr`), lower-cased.
  switch (a) {
    case NcclAlgo::Ring:
      return "ring";
    case NcclAlgo::Tree:
      return "tree";
    case NcclAlgo::Nvls:
      return "nvls";
    case NcclAlgo::NvlsTree:
      return "nvlstree";
    case NcclAlgo::Pat:
      return "pat";
    case NcclAlgo::CollNetDirect:
      return "collnetdirect";
    case NcclAlgo::CollNetChain:
      return "collnetchain";
  }
  return "?";
}

std::string_view nccl_proto_name(NcclProto p) {
  switch (p) {
    case NcclProto::LL:
      return "LL";
    case NcclProto::LL128:
      return "LL128";
    case NcclProto::Simple:
      return "Simple";
  }
  return "?";
}

std::optional<NcclEstimate> nccl_estimate(const NcclComm& c, double bytes, NcclAlgo algo,
                                          NcclProto proto) {
  SCALESCOPE_EXPECTS(graph::is_collective(c.kind));
  SCALESCOPE_EXPECTS(c.ranks >= 2 && c.nodes >= 1 && c.nodes <= c.ranks);
  SCALESCOPE_EXPECTS(c.bus_bw_GBps > 0 && bytes >= 0);
  const bool allreduce = c.kind == graph::OpKind::AllReduce;
  // Tree is all-reduce only; on one node NCCL's tree is a chain that never wins against the ring
  // on NVSwitch, so it is only offered across nodes.
  if (algo == NcclAlgo::Tree && (!allreduce || c.nodes < 2)) return std::nullopt;
  if (proto == NcclProto::LL128 && !c.ll128) return std::nullopt;
  if (algo != NcclAlgo::Ring && algo != NcclAlgo::Tree)
    return proto == NcclProto::Simple ? simple_only_estimate(c, bytes, algo) : std::nullopt;

  const int p = idx(proto);
  const double n = c.ranks;
  const double ppn = n / c.nodes;
  NcclEstimate e{algo, proto, 0, 0, 0};
  double bus = c.bus_bw_GBps;
  if (algo == NcclAlgo::Ring) {
    // Bandwidth refinements (tuning.cc "Various model refinements"; §7.3). The per-channel LL128
    // cap is not modelled (we do not count channels).
    if (proto == NcclProto::LL) bus = std::min(ll_max_bw(c), 0.5 * bus);
    if (proto == NcclProto::LL128) bus *= 0.92;
    const double nsteps = allreduce ? 2 * (n - 1) : n - 1;  // §7.1
    e.algbw_GBps = bus * n / nsteps;                        // bus → algorithm bandwidth

    // Latency (§7.2): base + (nsteps − nInter)·max(intraLat, netOverhead) + nInter·interLat.
    const double n_inter = c.nodes == 1 ? 0 : (allreduce ? 2.0 : 1.0) * (c.nodes - 1);
    double intra = kHwLatNvlink[kRing][p];
    // With one rank per node every step is exposed: NCCL uses the tree's network latency.
    const double inter = ppn == 1 ? kHwLatNet[kTree][p] : kHwLatNet[kRing][p];
    if (c.nodes > 1) {
      // getNetOverhead(): 1 µs on Intel, 2 µs on AMD hosts, ×3 for Simple.
      double overhead = c.cpu == CpuVendor::Amd ? 2.0 : 1.0;
      if (proto == NcclProto::Simple) overhead *= 3;
      intra = std::max(intra, overhead);
    }
    e.latency_us = kBaseLat[kRing][p] + (nsteps - n_inter) * intra + n_inter * inter;
    // ncclTopoGetAlgoTime: "plateau effect of ring" for multi-node Simple all-reduce.
    if (proto == NcclProto::Simple && c.nodes > 1 && allreduce &&
        bytes / (kAssumedChannels * n) >= 64)
      e.latency_us *= c.arch == GpuArch::Volta ? 1.9 : 1.4;
  } else {
    // Tree all-reduce bandwidth (§7.3). perChMaxTree caps not modelled (channels not counted);
    // the ×0.85 for NCCL_TOPO_PATTERN_TREE does not apply to the balanced tree NCCL builds.
    bus *= 0.92;
    if (proto == NcclProto::LL) bus = std::min(bus / 3.8, ll_max_bw(c));
    if (proto == NcclProto::LL128) bus *= 120.0 / 128.0;  // multi-node value
    e.algbw_GBps = bus * 0.5 * tree_correction(proto, bytes);
    // Latency: base + 2·((ppn − 1)·intraLat + log2(nNodes)·interLat), integer ppn and log2.
    const double local = static_cast<double>(c.ranks / c.nodes) - 1;
    e.latency_us = kBaseLat[kTree][p] +
                   2 * (local * kHwLatNvlink[kTree][p] + log2i(c.nodes) * kHwLatNet[kTree][p]);
  }
  e.time_us = e.latency_us + bytes / (1000.0 * e.algbw_GBps);
  return e;
}

NcclEstimate nccl_best(const NcclComm& comm, double bytes, const NcclFilter& filter) {
  const auto best = nccl_try_best(comm, bytes, filter);
  SCALESCOPE_EXPECTS(best.has_value());
  return *best;
}

std::optional<NcclEstimate> nccl_try_best(const NcclComm& comm, double bytes,
                                          const NcclFilter& filter) {
  std::optional<NcclEstimate> best;
  for (NcclAlgo a : kNcclAlgos) {
    if (filter.algo && *filter.algo != a) continue;
    for (NcclProto p : kNcclProtos) {
      if (filter.proto && *filter.proto != p) continue;
      const auto e = nccl_estimate(comm, bytes, a, p);
      // Strict < keeps the first candidate on ties: a deterministic choice.
      if (e && (!best || e->time_us < best->time_us)) best = e;
    }
  }
  return best;
}

double ring_allreduce_seconds(double bytes, std::uint32_t n, double bus_bw_GBps, double alpha_us) {
  SCALESCOPE_EXPECTS(n >= 1 && bus_bw_GBps > 0);
  if (n == 1) return 0;
  const double dn = n;
  return 2 * (dn - 1) / dn * bytes / (bus_bw_GBps * 1e9) + 2 * (dn - 1) * alpha_us * 1e-6;
}

}  // namespace scalescope::cost

namespace scalescope::cost {

std::uint32_t nccl_ring_channels(const NcclTopoBudget& b) {
  const auto gen = static_cast<std::size_t>(b.arch);
  const bool inter = b.nodes > 1;
  std::span<const double> speeds;
  if (b.arch >= GpuArch::Blackwell)
    speeds = inter ? std::span<const double>(kSm100SpeedInter) : kSm100SpeedIntra;
  else if (b.arch == GpuArch::Hopper)
    speeds = inter ? std::span<const double>(kSm90SpeedInter) : kSm90SpeedIntra;
  else
    speeds = inter ? std::span<const double>(kSpeedInter) : kSpeedIntra;
  // The GPU's bandwidth budget: NVLink to the NVSwitch inside a node; across nodes, each channel
  // leaves through one of the NICs, a NIC carrying floor(NIC / speed) channels.
  const double nvlink = b.nvlink_GBps > 0
                            ? b.nvlink_GBps / kDatasheetNvlinkPerLink[gen] * kNcclNvlinkPerLink[gen]
                            : kPciBw;
  const double max_bw = inter ? std::min(b.nic_GBps, nvlink) : nvlink;
  const std::uint32_t max_search = kMaxChannels / 2;
  auto channels_at = [&](double speed) {
    const double c = inter ? std::floor(std::max(1.0, b.nics)) * std::floor(b.nic_GBps / speed)
                           : std::floor(nvlink / speed);
    return static_cast<std::uint32_t>(std::clamp(c, 0.0, double{max_search}));
  };
  // The speed walk: start at the fastest speed the path carries; keep a lower speed only when it
  // gives more bandwidth in all (channels × speed), and go on while the next speed is more than
  // 0.49 of the best so far; stop once the channels carry the GPU's whole budget.
  std::size_t i = 0;
  while (i + 1 < speeds.size() && speeds[i] > max_bw) ++i;
  std::uint32_t best = 0;
  double best_speed = 0;
  for (;;) {
    const std::uint32_t c = channels_at(speeds[i]);
    if (c * speeds[i] > best * best_speed) {
      best = c;
      best_speed = speeds[i];
    }
    if (best * best_speed >= max_bw * (inter ? std::max(1.0, b.nics) : 1.0)) break;
    if (i + 1 >= speeds.size() || (best > 0 && speeds[i + 1] / best_speed <= 0.49)) break;
    ++i;
  }
  if (best == 0) return 1;
  // ncclTopoDupChannels: doubled (at half the speed) unless the speed is under 25 GB/s, or, from
  // Hopper on, under 50 GB/s with more than 4 channels.
  std::uint32_t channels = best;
  double speed = best_speed;
  if (!(speed < 25.0) && !(b.arch >= GpuArch::Hopper && speed < 50.0 && channels > 4)) {
    const std::uint32_t dup = std::min(channels * 2, max_search);
    speed /= static_cast<double>((dup + channels - 1) / channels);
    channels = dup;
  }
  // connect.cc: the execution channels are the search's doubled; on Hopper and later across
  // nodes, doubled again while under 16 if the ring's speed is above 45 GB/s.
  channels = std::min(kMaxChannels, channels * 2);
  if (b.arch >= GpuArch::Hopper && inter && speed > 45.0 && channels < 16)
    channels = std::min(kMaxChannels, channels * 2);
  return channels;
}

}  // namespace scalescope::cost
