// CostModel: validates the cluster and turns ops into integer nanoseconds
// (docs/cost-model.md).
#include "cost/cost_model.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/error.hpp"
#include "core/units.hpp"
#include "cost/compute_model.hpp"

namespace scalescope::cost {
namespace {

GpuArch arch_of(const GpuSpec& gpu) {
  const std::string& n = gpu.name;
  if (n.rfind("A100", 0) == 0) return GpuArch::Ampere;
  if (n.rfind("H100", 0) == 0 || n.rfind("H200", 0) == 0) return GpuArch::Hopper;
  return GpuArch::Blackwell;
}

// The DGX reference host of each GPU: DGX A100 uses AMD EPYC (as does Azure ND A100 v4, the
// validation system), DGX H100/H200/B200 use Intel Xeon (unverified here).
CpuVendor default_cpu(GpuArch arch) {
  return arch == GpuArch::Ampere ? CpuVendor::Amd : CpuVendor::Intel;
}

void require_positive(double v, const char* key) {
  if (!(v > 0) || !std::isfinite(v)) throw_input("cluster.{} must be > 0, got {}", key, v);
}

void require_non_negative(double v, const char* key) {
  if (!(v >= 0) || !std::isfinite(v)) throw_input("cluster.{} must be >= 0, got {}", key, v);
}

const GpuSpec& checked_gpu(const ClusterSpec& c) {
  try {
    return find_gpu(c.gpu);
  } catch (const InputError& e) {
    throw_input("cluster.gpu: {}", e.what());
  }
}

}  // namespace

CostModel::CostModel(const ClusterSpec& cluster) : CostModel(cluster, NetworkOptions{}) {}

CostModel::CostModel(const ClusterSpec& cluster, const NetworkOptions& network)
    : cluster_(cluster), gpu_(&checked_gpu(cluster)), network_(network) {
  if (cluster_.gpus_per_node < 1)
    throw_input("cluster.gpus_per_node must be >= 1, got {}", cluster_.gpus_per_node);
  if (!(cluster_.compute_efficiency > 0 && cluster_.compute_efficiency <= 1))
    throw_input("cluster.compute_efficiency must be in (0, 1], got {}",
                cluster_.compute_efficiency);
  if (cluster_.num_gpus < 0)
    throw_input("cluster.num_gpus must be >= 0, got {}", cluster_.num_gpus);
  if (cluster_.nics_per_node < 0)
    throw_input("cluster.nics_per_node must be >= 0, got {}", cluster_.nics_per_node);
  require_positive(cluster_.nvlink_bandwidth_GBps, "nvlink_bandwidth_GBps");
  require_positive(cluster_.nic_bandwidth_Gbps, "nic_bandwidth_Gbps");
  require_non_negative(cluster_.nvlink_latency_us, "nvlink_latency_us");
  require_non_negative(cluster_.nic_latency_us, "nic_latency_us");
  kernel_ = gpu_->kernel;
  if (cluster_.kernel_overhead_us) kernel_.kernel_overhead_us = *cluster_.kernel_overhead_us;
  if (cluster_.gemm_efficiency) kernel_.gemm_efficiency = *cluster_.gemm_efficiency;
  if (cluster_.attention_efficiency) kernel_.attention_efficiency = *cluster_.attention_efficiency;
  if (cluster_.hbm_efficiency) kernel_.hbm_efficiency = *cluster_.hbm_efficiency;
  if (cluster_.norm_activation_efficiency)
    kernel_.norm_activation_efficiency = *cluster_.norm_activation_efficiency;
  if (cluster_.host_launch_us) kernel_.host_launch_us = *cluster_.host_launch_us;
  require_non_negative(kernel_.kernel_overhead_us, "kernel_overhead_us");
  require_non_negative(kernel_.host_launch_us, "host_launch_us");
  // Sustained fractions of a rate: (0, 1], as docs/config.md states them.
  for (const auto& [v, key] : {std::pair{kernel_.gemm_efficiency, "gemm_efficiency"},
                               std::pair{kernel_.attention_efficiency, "attention_efficiency"},
                               std::pair{kernel_.hbm_efficiency, "hbm_efficiency"}})
    if (!(v > 0 && v <= 1)) throw_input("cluster.{} must be in (0, 1], got {}", key, v);
  if (cluster_.norm_activation_efficiency &&
      !(*cluster_.norm_activation_efficiency > 0 && *cluster_.norm_activation_efficiency <= 1))
    throw_input("cluster.norm_activation_efficiency must be in (0, 1], got {}",
                *cluster_.norm_activation_efficiency);
  if (cluster_.nic_bus_efficiency) {
    if (!(*cluster_.nic_bus_efficiency > 0 && *cluster_.nic_bus_efficiency <= 1))
      throw_input("cluster.nic_bus_efficiency must be in (0, 1], got {}",
                  *cluster_.nic_bus_efficiency);
    network_.nic_efficiency = *cluster_.nic_bus_efficiency;
  }
  SCALESCOPE_EXPECTS(network_.nvlink_efficiency > 0 && network_.nic_efficiency > 0);
  SCALESCOPE_EXPECTS(network_.p2p_nvlink_efficiency > 0 && network_.p2p_nic_efficiency > 0);
  arch_ = arch_of(*gpu_);
  cpu_ = network_.cpu.value_or(default_cpu(arch_));
  // The flow model's fabric; the NIC links carry what one transfer reaches on a NIC.
  if (network_.flow && cluster_.nics_per_node > 0)
    fabric_ = std::make_shared<Fabric>(
        cluster_, cluster_.topology.value_or(TopologySpec{}),
        cluster_.nic_bandwidth_Gbps * units::kGbitToBytes * network_.p2p_nic_efficiency);
}

void CostModel::out_of_range(double seconds, std::string_view what) const {
  throw_input(
      "{} would take {} s (the model covers up to {} s an op): the cost inputs are outside "
      "what it covers (cluster.gemm_efficiency={}, attention_efficiency={}, hbm_efficiency={}, "
      "compute_efficiency={}, nvlink_bandwidth_GBps={}, nic_bandwidth_Gbps={}, "
      "nvlink_latency_us={}, nic_latency_us={}, host_launch_us={})",
      what, seconds, kMaxDurationSeconds, kernel_.gemm_efficiency, kernel_.attention_efficiency,
      kernel_.hbm_efficiency, cluster_.compute_efficiency, cluster_.nvlink_bandwidth_GBps,
      cluster_.nic_bandwidth_Gbps, cluster_.nvlink_latency_us, cluster_.nic_latency_us,
      kernel_.host_launch_us);
}

SimTime CostModel::compute_ns(const graph::Op& op) const {
  const double s = compute_seconds(*gpu_, kernel_, op) / cluster_.compute_efficiency;
  return to_ns(s, [&] {
    return fmt::format("op '{}' ({} FLOPs, {} bytes)", graph::op_name(op.name), op.flops,
                       op.mem_bytes);
  });
}

SimTime CostModel::host_ns(const graph::Op& op) const {
  const double s = host_seconds(kernel_, op);
  return to_ns(s,
               [&] { return fmt::format("the host issue of op '{}'", graph::op_name(op.name)); });
}

std::uint32_t CostModel::comm_kernel_sms(const graph::Op& op, const CommShape& shape) const {
  if (!network_.comm_kernel_sms || shape.ranks < 2 || !graph::is_collective(op.kind)) return 0;
  // DeepEP's dispatch (flex) and TE userbuffers' collectives: their SMs are charged on the GEMMs
  // beside them (Op::comm_sms), not here.
  if ((op.kind == graph::OpKind::AllToAll && op.shape[0] > 0) || op.comm_sms > 0) return 0;
  return std::min<std::uint32_t>(nccl_ring_channels(topo_budget(shape)),
                                 static_cast<std::uint32_t>(gpu_->sms));
}

NcclTopoBudget CostModel::topo_budget(const CommShape& shape) const {
  NcclTopoBudget b;
  b.arch = arch_;
  b.nvlink_GBps = cluster_.nvlink_bandwidth_GBps;
  b.nodes = shape.nodes;
  if (shape.nodes > 1) {
    b.nic_GBps = cluster_.nic_bandwidth_Gbps / 8.0;
    b.nics = nics_used(shape);
  }
  return b;
}

double CostModel::intra_bus_bandwidth_GBps() const {
  return cluster_.nvlink_bandwidth_GBps * network_.nvlink_efficiency;
}

double CostModel::bus_bandwidth_GBps(const CommShape& shape) const {
  if (shape.nodes <= 1) return intra_bus_bandwidth_GBps();
  return std::min(intra_bus_bandwidth_GBps(), inter_bus_bandwidth_GBps(shape));
}

double CostModel::nics_used(const CommShape& shape) const {
  // Rail model: each GPU owns nics_per_node / gpus_per_node NICs; the communicator's members on
  // a node use theirs, concurrent communicators (other TP ranks' DP groups) use the others.
  const double share = std::min(
      1.0, static_cast<double>(shape.ranks_per_node) / static_cast<double>(cluster_.gpus_per_node));
  return static_cast<double>(cluster_.nics_per_node) * share;
}

double CostModel::inter_bus_bandwidth_GBps(const CommShape& shape) const {
  if (cluster_.nics_per_node < 1)
    throw_input("cluster.nics_per_node is 0, but a communicator spans {} nodes", shape.nodes);
  return cluster_.nic_bandwidth_Gbps / 8.0 * nics_used(shape) * network_.nic_efficiency;
}

NcclEstimate CostModel::collective_estimate(graph::OpKind kind, double bytes,
                                            const CommShape& shape,
                                            const NcclFilter& filter) const {
  SCALESCOPE_EXPECTS(graph::is_collective(kind));
  SCALESCOPE_EXPECTS(shape.ranks >= 2 && shape.nodes >= 1 && shape.ranks_per_node >= 1);
  SCALESCOPE_EXPECTS(shape.nodes <= shape.ranks &&
                     shape.ranks <= std::uint64_t{shape.nodes} * shape.ranks_per_node);
  NcclComm comm;
  comm.kind = kind;
  comm.ranks = shape.ranks;
  comm.nodes = shape.nodes;
  comm.bus_bw_GBps = bus_bandwidth_GBps(shape);
  comm.arch = arch_;
  comm.cpu = cpu_;
  comm.ll128 = network_.ll128;
  // What NVLS, PAT and CollNet read besides the ring's bus bandwidth (docs/cost-model.md §2.2).
  comm.intra_bw_GBps = intra_bus_bandwidth_GBps();
  if (shape.nodes > 1) comm.inter_bw_GBps = inter_bus_bandwidth_GBps(shape);
  comm.nics = static_cast<std::uint32_t>(std::max(1.0, std::floor(nics_used(shape))));
  if (cluster_.nvls.value_or(arch_ >= GpuArch::Hopper))
    comm.nvls_bw_GBps = cluster_.nvlink_bandwidth_GBps * kNvlsBusRatio[static_cast<int>(arch_)];
  comm.collnet = cluster_.in_network_reduction;
  NcclFilter f = network_.filter;
  if (filter.algo) f.algo = filter.algo;
  if (filter.proto) f.proto = filter.proto;
  if (auto e = nccl_try_best(comm, bytes, f)) return *e;
  // network.nccl_algo / nccl_proto force NCCL's choice where it can run this collective, as
  // NCCL_ALGO="<function>:<algorithm>" does per function; elsewhere NCCL chooses
  // (docs/config.md). A filter from the caller stays binding (nccl_best throws if it leaves
  // nothing).
  return nccl_best(comm, bytes, filter);
}

SimTime CostModel::collective_ns(graph::OpKind kind, double bytes, const CommShape& shape) const {
  SCALESCOPE_EXPECTS(graph::is_collective(kind));
  // A one-member communicator, or nothing to move: NCCL returns without communicating.
  if (shape.ranks <= 1 || !(bytes > 0)) return 0;
  if (kind == graph::OpKind::AllToAll) return all_to_all_ns(bytes, shape);
  const double s = collective_estimate(kind, bytes, shape).time_us * 1e-6;
  return to_ns(s,
               [&] { return fmt::format("a {}-rank collective of {} bytes", shape.ranks, bytes); });
}

SimTime CostModel::all_to_all_ns(double bytes, const CommShape& shape) const {
  const ExchangeBytes x = all_to_all_bytes(bytes, shape);
  return std::max(exchange_ns(shape, x.inter, x.intra), a2a_latency_chain_ns(shape));
}

std::uint32_t CostModel::p2p_channels(const CommShape& shape) const {
  const std::uint32_t c = std::clamp<std::uint32_t>(nccl_ring_channels(topo_budget(shape)), 1, 64);
  return std::bit_ceil(c);
}

SimTime CostModel::a2a_latency_chain_ns(const CommShape& shape) const {
  if (shape.ranks <= 1) return 0;
  const std::uint64_t per_node = std::min<std::uint64_t>(shape.ranks_per_node, shape.ranks);
  const bool one_node = shape.nodes <= 1;
  const std::uint64_t c = one_node ? 1 : p2p_channels(shape);
  // The busiest channel's batches: on one node its peers', else the other nodes' groups.
  const std::uint64_t batches =
      one_node ? (per_node - 1 + 7) / 8
               : (std::uint64_t{shape.nodes} - 1 + c - 1) / c * ((per_node + 7) / 8);
  const double latency_us = one_node ? cluster_.nvlink_latency_us : cluster_.nic_latency_us;
  return to_ns(static_cast<double>(batches + 1) * latency_us * 1e-6,
               [&] { return fmt::format("a {}-rank all-to-all", shape.ranks); });
}

ExchangeBytes CostModel::all_to_all_bytes(double bytes, const CommShape& shape) const {
  // NCCL runs all-to-all as grouped point-to-point transfers, which its tuner does not model
  // (MODELING §7.5): per member, `bytes` (the send buffer, nccl-tests' size) goes 1/n to each
  // member. The share for the other members of its node crosses NVLink, the share for members on
  // other nodes the GPU's share of the node's NICs; both run at once, the slower sets the time,
  // plus one link latency.
  const double n = shape.ranks;
  const double on_node = std::min<double>(shape.ranks_per_node, n);
  return {bytes * (n - on_node) / n, bytes * (on_node - 1) / n};
}

double CostModel::exchange_seconds(double inter, double intra, const CommShape* flex) const {
  const FlexLinkEfficiency eta =
      flex != nullptr
          ? flex_link_efficiency(arch_, flex->nodes, network_.p2p_nvlink_efficiency)
          : FlexLinkEfficiency{network_.p2p_nvlink_efficiency, network_.p2p_nic_efficiency};
  const double nvlink = cluster_.nvlink_bandwidth_GBps * units::kGB * eta.nvlink;
  const double nic = cluster_.nic_bandwidth_Gbps * units::kGbitToBytes *
                     static_cast<double>(cluster_.nics_per_node) /
                     static_cast<double>(cluster_.gpus_per_node) * eta.nic;
  return std::max(intra / nvlink, inter / nic);
}

SimTime CostModel::exchange_ns(const CommShape& shape, double inter, double intra,
                               bool flex) const {
  const double latency_us = shape.nodes > 1 ? cluster_.nic_latency_us : cluster_.nvlink_latency_us;
  const double s = latency_us * 1e-6 + exchange_seconds(inter, intra, flex ? &shape : nullptr);
  return to_ns(
      s, [&] { return fmt::format("a {}-rank exchange of {} bytes", shape.ranks, inter + intra); });
}

// HybridEP (deepseek-ai/DeepEP@17cfb81, branch hybrid-ep, docs/README_Hybrid-EP.md, "Kernel
// Only" columns: 4,096 tokens of hidden 7,168, top-8, 8 local experts, random uniform routing),
// dispatch (bf16) and combine, turned into the fraction of the link our byte counts reach.
// tests/test_hybrid_ep.py there counts NVLink bytes as the rows a rank receives (its own
// included: (n − 1)/n of them cross NVLink) and RDMA bytes as the (token, node) pairs a token
// reaches, its own node included ((N − 1)/N of them leave the node):
//   H100, 16 SMs, IB 400 Gb/s per GPU (50 GB/s): 16 ranks 71.71 / 62.95 GB/s · 1/2 / 50 = 0.717 /
//   0.630; 32 ranks 57.69 / 57.46 · 3/4 / 50 = 0.865 / 0.862; 64 ranks 49.97 / 49.77 · 7/8 / 50
//   = 0.874 / 0.871. The mean of dispatch and combine per node count: 0.673, 0.864, 0.873.
//   Blackwell NVLink (900 GB/s): B200 8 ranks, 16 SMs 734.95 / 673.84 · 7/8 / 900 = 0.714 /
//   0.655; GB200 NVL72, 32 SMs (what Megatron-Bridge sets, scripts/performance/utils/
//   overrides.py:73@c81012934), 8 / 16 / 24 / 32 / 36 ranks: 0.743 / 0.717, 0.736 / 0.694,
//   0.709 / 0.681, 0.691 / 0.651, 0.683 / 0.645. Their median, 0.693.
// The Torch-API columns beside them add the copy out of HybridEP's buffer, which Megatron's
// permute takes over (dispatch_with_permute); the kernel figures agree with the MoE report's
// H100 Table 7 under DeepSeek-V3's node-limited routing within −2 … +16 %.
constexpr double kFlexNicEfficiency2 = (0.7171 + 0.6295) / 2;
constexpr double kFlexNicEfficiency4 = (0.8653 + 0.8619) / 2;
constexpr double kFlexNicEfficiency8 = (0.8745 + 0.8710) / 2;
constexpr double kFlexNvlinkBlackwell = (0.6913 + 0.6940) / 2;

FlexLinkEfficiency flex_link_efficiency(GpuArch arch, std::uint32_t nodes,
                                        double p2p_nvlink_efficiency) {
  FlexLinkEfficiency e;
  e.nvlink = arch >= GpuArch::Blackwell ? kFlexNvlinkBlackwell : p2p_nvlink_efficiency;
  const double x = std::log2(static_cast<double>(std::max<std::uint32_t>(nodes, 2)));
  e.nic = x <= 2   ? kFlexNicEfficiency2 + (kFlexNicEfficiency4 - kFlexNicEfficiency2) * (x - 1)
          : x <= 3 ? kFlexNicEfficiency4 + (kFlexNicEfficiency8 - kFlexNicEfficiency4) * (x - 2)
                   : kFlexNicEfficiency8;
  return e;
}

namespace {
/// Expected nodes reached when `k` of `items` items, spread evenly over `nodes` nodes, are drawn
/// without replacement: a node holding items/nodes of them is missed with probability
/// C(items − items/nodes, k) / C(items, k) = Π_{i<k} (items − items/nodes − i) / (items − i).
double nodes_reached(double items, double nodes, double k) {
  const double per_node = items / nodes;
  double miss = 1;
  for (double i = 0; i < k; ++i) miss *= std::max(0.0, (items - per_node - i) / (items - i));
  return nodes * (1 - miss);
}
}  // namespace

SimTime CostModel::ep_dispatch_ns(double bytes, std::uint32_t copies, std::uint32_t experts,
                                  const CommShape& shape, std::uint32_t groups) const {
  if (shape.ranks <= 1 || !(bytes > 0)) return 0;
  if (copies == 0 || experts == 0) return all_to_all_ns(bytes, shape);  // NCCL's all-to-all
  const ExchangeBytes x = ep_dispatch_bytes(bytes, copies, experts, shape, groups);
  return exchange_ns(shape, x.inter, x.intra, true);
}

ExchangeBytes CostModel::ep_dispatch_bytes(double bytes, std::uint32_t copies,
                                           std::uint32_t experts, const CommShape& shape,
                                           std::uint32_t groups) const {
  if (copies == 0 || experts == 0) return all_to_all_bytes(bytes, shape);
  // DeepEP's normal kernels (docs/legacy.md, "NVLink and RDMA forwarding"): a token's k of E
  // experts drawn evenly sit on r of the n ranks (nodes_reached over ranks) and d of the N
  // nodes; it is sent once per rank, not per expert: d·(N − 1)/N RDMA sends to the other
  // nodes, and over NVLink to the r ranks but the one holding it in each node, r·(g − 1)/g for
  // g ranks a node (on one node (n − 1)/n of r). The slower side sets the time.
  const double N = shape.nodes, k = copies, E = experts, n = shape.ranks;
  const double g = std::min<double>(shape.ranks_per_node, n);
  const double token_bytes = bytes / k;
  const double intra = token_bytes * nodes_reached(E, n, k) * (g - 1) / g;
  if (shape.nodes <= 1) return {0, intra};
  double reached = nodes_reached(E, N, k);
  // Group-limited routing (G groups of E/G experts, the k experts from the best Gt of them):
  // with groups inside nodes (N divides G) a token reaches at most the nodes of its Gt groups;
  // with nodes inside groups (G divides N) its k experts come from Gt·E/G experts on Gt·N/G
  // nodes. Other layouts are charged as unlimited routing.
  const double G = groups >> 16, Gt = groups & 0xFFFFu;
  if (G > 0 && Gt > 0 && Gt < G) {
    const auto whole = [](double a, double b) { return std::fmod(a, b) == 0; };
    if (whole(G, N))
      reached = std::min(reached, nodes_reached(G, N, Gt));
    else if (whole(N, G))
      reached = std::min(reached, nodes_reached(Gt * E / G, Gt * N / G, k));
  }
  return {token_bytes * reached * (N - 1) / N, intra};
}

SimTime CostModel::p2p_ns(double bytes, bool same_node) const {
  if (!(bytes > 0)) return 0;
  // Latency + bytes / (link bandwidth per direction × efficiency); across nodes one NIC carries
  // the transfer (a PP neighbour sits on the same rail).
  const double seconds = same_node
                             ? cluster_.nvlink_latency_us * 1e-6 +
                                   bytes / (cluster_.nvlink_bandwidth_GBps * units::kGB *
                                            network_.p2p_nvlink_efficiency)
                             : cluster_.nic_latency_us * 1e-6 +
                                   bytes / (cluster_.nic_bandwidth_Gbps * units::kGbitToBytes *
                                            network_.p2p_nic_efficiency);
  return to_ns(seconds,
               [&] { return fmt::format("a point-to-point transfer of {} bytes", bytes); });
}

FlowRequest CostModel::flow_request(const graph::Op& op, const CommShape& shape) const {
  SCALESCOPE_EXPECTS(graph::is_communication(op.kind) && shape.nodes > 1 && op.comm_bytes > 0);
  FlowRequest r;
  const double bytes = op.comm_bytes;
  const double n = shape.ranks;
  if (op.kind == graph::OpKind::SendRecv) {
    r.pattern = FlowPattern::P2P;
    r.flow_bytes = bytes;
    r.alone_ns = 1e9 * bytes /
                 (cluster_.nic_bandwidth_Gbps * units::kGbitToBytes * network_.p2p_nic_efficiency);
    r.latency_ns = cluster_.nic_latency_us * 1e3;
    return r;
  }
  if (op.kind == graph::OpKind::AllToAll) {
    const ExchangeBytes x =
        op.shape[0] > 0 ? ep_dispatch_bytes(bytes, op.shape[0], op.shape[1], shape, op.shape[2])
                        : all_to_all_bytes(bytes, shape);
    // Each member sends `inter` bytes to the members on other nodes, equally.
    const double g = std::min<double>(shape.ranks_per_node, n);
    r.pattern = FlowPattern::AllToAll;
    r.flow_bytes = x.inter / std::max(1.0, n - g);
    r.alone_ns = 1e9 * exchange_seconds(x.inter, x.intra, op.shape[0] > 0 ? &shape : nullptr);
    r.latency_ns = cluster_.nic_latency_us * 1e3;
    // NCCL's all-to-all alone is never faster than its batches' latency chain.
    if (op.shape[0] == 0)
      r.latency_ns =
          std::max(r.latency_ns, static_cast<double>(a2a_latency_chain_ns(shape)) - r.alone_ns);
    if (!(r.flow_bytes > 0)) r.flow_bytes = bytes / n;  // guard: nothing leaves the node
    return r;
  }
  const NcclEstimate e = collective_estimate(op.kind, bytes, shape);
  const bool allreduce = op.kind == graph::OpKind::AllReduce;
  const double channels = shape.ranks_per_node;
  r.alone_ns = 1e3 * bytes / (1000.0 * e.algbw_GBps);
  r.latency_ns = e.latency_us * 1e3;
  // Trees, and reductions in the fabric (CollNet, NVLS across nodes), move each node's data up
  // and down a tree of nodes; PAT moves a ring's volume through each NIC (docs/network.md).
  const bool tree = e.algo == NcclAlgo::Tree || e.algo == NcclAlgo::NvlsTree ||
                    e.algo == NcclAlgo::CollNetDirect || e.algo == NcclAlgo::CollNetChain ||
                    e.algo == NcclAlgo::Nvls;
  if (tree) {
    // Each of the two trees carries half the data up and half down every edge (§7.1).
    r.pattern = FlowPattern::Tree;
    r.flow_bytes = bytes / 2 / channels;
    r.steps = 2 * static_cast<std::uint32_t>(std::ceil(std::log2(shape.nodes)));
  } else {
    // A ring moves nsteps/n of the data over every edge, split over a node's channels.
    const double nsteps = allreduce ? 2 * (n - 1) : n - 1;
    r.pattern = FlowPattern::Ring;
    r.flow_bytes = nsteps / n * bytes / channels;
    r.steps = (allreduce ? 2 : 1) * (shape.nodes - 1);
  }
  return r;
}

CommShape CostModel::shape_of(const std::uint32_t* members_begin,
                              const std::uint32_t* members_end) const {
  SCALESCOPE_EXPECTS(members_begin != nullptr && members_begin < members_end);
  SCALESCOPE_EXPECTS(std::is_sorted(members_begin, members_end));
  CommShape s;
  s.ranks = static_cast<std::uint32_t>(members_end - members_begin);
  s.nodes = 0;
  s.ranks_per_node = 0;
  // Sorted ranks give non-decreasing nodes: count runs of equal node ids.
  std::int64_t node = -1;
  std::uint32_t run = 0;
  for (const std::uint32_t* r = members_begin; r != members_end; ++r) {
    const std::int64_t n = cluster_.node_of(*r);
    if (n != node) {
      node = n;
      ++s.nodes;
      run = 0;
    }
    s.ranks_per_node = std::max(s.ranks_per_node, ++run);
  }
  return s;
}

}  // namespace scalescope::cost
