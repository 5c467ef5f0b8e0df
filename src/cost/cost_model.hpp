#pragma once
/// Durations of ops: compute by roofline with size-dependent efficiency, collectives by NCCL's
/// ring/tree model over the NVLink / NIC hierarchy, P2P by latency + bytes / bandwidth.
/// Knows the graph's Op, never the workload or the engine.
#include <cstdint>
#include <memory>
#include <string_view>

#include "core/sim_time.hpp"
#include "cost/cluster_spec.hpp"
#include "cost/gpu.hpp"
#include "cost/network_model.hpp"
#include "cost/topology.hpp"
#include "graph/op.hpp"

namespace scalescope::cost {

/// How a communicator sits on the machine, as the network model needs it.
struct CommShape {
  std::uint32_t ranks = 1;
  std::uint32_t nodes = 1;
  std::uint32_t ranks_per_node = 1;  ///< the largest number of members on one node
};

/// A transfer between scale-up domains as the flow model runs it (docs/network.md): its flows
/// each carry `flow_bytes` over the links of `pattern`; alone they take `alone_ns` (NCCL's
/// algorithm bandwidth for the bytes, or the point-to-point / exchange bandwidth), then the fixed
/// `latency_ns` follows. `steps`: sequential network steps (each crosses the route's switches).
struct FlowRequest {
  FlowPattern pattern = FlowPattern::P2P;
  double flow_bytes = 0;
  double alone_ns = 0;
  double latency_ns = 0;
  std::uint32_t steps = 1;
};

/// Bytes an exchange (all-to-all, MoE dispatch) moves per member: to members on other nodes
/// (`inter`, through the NICs) and to the others on its node (`intra`, over NVLink).
struct ExchangeBytes {
  double inter = 0;
  double intra = 0;
};

/// Fractions of the NVLink and NIC bandwidth per direction that the flex dispatcher's kernels
/// (HybridEP / DeepEP: Megatron's moe_token_dispatcher_type flex) reach in a dispatch or combine.
struct FlexLinkEfficiency {
  double nvlink = 0;
  double nic = 0;
};
/// HybridEP's measured kernel-time bandwidths (docs/cost-model.md §2.4): NVLink on Blackwell
/// from its B200 and GB200 tables, on older GPUs the network's point-to-point NVLink fraction
/// (`p2p_nvlink_efficiency`, kP2pNvlinkEfficiency by default); across `nodes` nodes from its H100
/// table (2, 4, 8 nodes; log-linear between, the 8-node figure beyond).
FlexLinkEfficiency flex_link_efficiency(GpuArch arch, std::uint32_t nodes,
                                        double p2p_nvlink_efficiency = kP2pNvlinkEfficiency);

class CostModel {
 public:
  /// Throws InputError if the cluster's GPU is unknown or a bandwidth is not positive.
  explicit CostModel(const ClusterSpec& cluster);
  /// The same, with the network model's efficiencies and NCCL choices set explicitly.
  CostModel(const ClusterSpec& cluster, const NetworkOptions& network);

  const GpuSpec& gpu() const { return *gpu_; }
  /// The kernel model in force: the GPU's physical defaults overridden by the cluster's keys.
  const KernelCalibration& kernel() const { return kernel_; }
  const ClusterSpec& cluster() const { return cluster_; }

  /// Duration of a compute op (kind not a communication) on one GPU.
  SimTime compute_ns(const graph::Op& op) const;
  /// `seconds` as simulated time, or the one-line input error naming what `what()` returns (a
  /// description of the op or transfer, made only then) and the cost inputs when it is not a
  /// finite duration the model covers (kMaxDurationSeconds).
  template <class What>
  SimTime to_ns(double seconds, const What& what) const {
    SimTime ns = 0;
    if (!duration_ns(seconds, ns)) out_of_range(seconds, what());
    return ns;
  }
  /// Host time to issue op `op` (any kind): its kernel launches times host_launch_us; 0 when the
  /// host is not modelled.
  SimTime host_ns(const graph::Op& op) const;
  /// Duration of a collective of `bytes` (nccl-tests size S) over a communicator of `shape`:
  /// NCCL picks the fastest (algorithm, protocol); all-reduce considers ring and tree.
  SimTime collective_ns(graph::OpKind kind, double bytes, const CommShape& shape) const;
  /// One point-to-point transfer between two GPUs.
  /// All-to-all of `bytes` per member (the send buffer, nccl-tests' size): NVLink for the
  /// members on the node, the GPU's NIC share for the rest, whichever is slower, plus a latency;
  /// never less than the latency chain of NCCL's point-to-point batches (a2a_latency_chain_ns).
  SimTime all_to_all_ns(double bytes, const CommShape& shape) const;
  /// NCCL's point-to-point channels for a communicator of `shape`: its collective channels
  /// (nccl_ring_channels) capped at NCCL_MAX_P2P_NCHANNELS = 64 and rounded up to a power of two
  /// (src/graph/paths.cc:837-848, 864-866 at v2.27.7-1, 593de54e).
  std::uint32_t p2p_channels(const CommShape& shape) const;
  /// The lower bound an all-to-all's peers set (docs/cost-model.md §2.5): NCCL 2.27 gives each
  /// remote node's ranks_per_node peers one round group on one channel (channel.h:19-29,
  /// init.cc:1111-1139), groups dealt round-robin over the p2p channels, and runs a channel's
  /// batches of at most 8 peers (NCCL_MAX_DEV_WORK_P2P_PER_BATCH, device.h:369) one after the
  /// other, each ending when its receives have arrived (device/common.h:385-399,
  /// device/sendrecv.h); the first send waits for the receiver's ready-to-receive message
  /// (transport/net_ib.cc:2122-2130). So the busiest channel's batches to other nodes,
  /// ⌈(nodes − 1)/C⌉ · ⌈ranks_per_node / 8⌉, plus one, each take at least the NIC latency (on
  /// one node: its ⌈(ranks_per_node − 1)/8⌉ batches, plus one, the NVLink latency).
  SimTime a2a_latency_chain_ns(const CommShape& shape) const;
  /// An MoE dispatch or combine through DeepEP's normal kernels (Megatron's flex dispatcher):
  /// `bytes` as all_to_all_ns (this rank's `copies` copies of each token), `experts` spread
  /// evenly over the group's ranks. A token is sent once per rank holding one of its experts,
  /// not once per expert, and crosses to another node once per node holding one (to the GPU with
  /// the same local index there, which forwards it over NVLink).
  /// `groups`: graph::routing_groups of group-limited routing, 0 = none.
  SimTime ep_dispatch_ns(double bytes, std::uint32_t copies, std::uint32_t experts,
                         const CommShape& shape, std::uint32_t groups = 0) const;
  SimTime p2p_ns(double bytes, bool same_node) const;
  /// What the flow model needs of communication op `op` on a communicator of `shape` spanning
  /// several nodes (docs/network.md). Its time alone is the analytical wire time (±1 ns).
  FlowRequest flow_request(const graph::Op& op, const CommShape& shape) const;
  /// The fabric (cluster.topology, or a non-blocking two-tier fat-tree when none is given) when
  /// the network options ask for the flow model, else null. Mutable until the run starts: the
  /// what-ifs degrade it.
  const Fabric* fabric() const { return fabric_.get(); }
  Fabric* mutable_fabric() { return fabric_.get(); }
  /// SMs the communication kernel of op `op` holds on each member while it runs, on a
  /// communicator of `shape` (docs/cost-model.md §2.7): NCCL's ring channels (one CTA each) for
  /// a collective or an all-to-all; 0 for point-to-point transfers (not charged), DeepEP's
  /// dispatch and TE userbuffers' collectives (charged on their GEMMs, Op::comm_sms), one
  /// member, or network.comm_kernel_sms off.
  std::uint32_t comm_kernel_sms(const graph::Op& op, const CommShape& shape) const;
  /// Shape of a communicator given its sorted member ranks.
  CommShape shape_of(const std::uint32_t* members_begin, const std::uint32_t* members_end) const;

  /// What collective_ns decides: NCCL's (algorithm, protocol), latency and bandwidth. Needs
  /// shape.ranks ≥ 2; `filter` narrows the choice further than the options' filter.
  NcclEstimate collective_estimate(graph::OpKind kind, double bytes, const CommShape& shape,
                                   const NcclFilter& filter = {}) const;
  /// Ring Simple bus bandwidth (GB/s) of a communicator of `shape`: NVLink × efficiency inside a
  /// node, bounded by its nodes' share of NICs × efficiency across nodes.
  double bus_bandwidth_GBps(const CommShape& shape) const;
  /// The NIC side alone (shape.nodes > 1): the members' share of their nodes' NICs × efficiency.
  double inter_bus_bandwidth_GBps(const CommShape& shape) const;
  const NetworkOptions& network() const { return network_; }

 private:
  [[noreturn]] void out_of_range(double seconds, std::string_view what) const;
  /// NVLink × efficiency: the ring bus bandwidth inside a node.
  double intra_bus_bandwidth_GBps() const;
  /// NICs of a node a communicator of `shape` uses: its members' share of the node's NICs.
  double nics_used(const CommShape& shape) const;
  /// What NCCL's ring graph search sees of a communicator of `shape` (nccl_ring_channels).
  NcclTopoBudget topo_budget(const CommShape& shape) const;
  /// An exchange in which `intra` bytes per member cross NVLink to the members on its node while
  /// `inter` bytes leave through the GPU's share of the node's NICs, both at once: the slower
  /// side plus one link latency (all_to_all_ns, ep_dispatch_ns).
  /// `flex`: the flex dispatcher's kernels (HybridEP / DeepEP), which reach a measured fraction
  /// of the links (flex_link_efficiency) rather than NCCL's point-to-point one.
  SimTime exchange_ns(const CommShape& shape, double inter, double intra, bool flex = false) const;
  double exchange_seconds(double inter, double intra, const CommShape* flex = nullptr) const;
  ExchangeBytes all_to_all_bytes(double bytes, const CommShape& shape) const;
  ExchangeBytes ep_dispatch_bytes(double bytes, std::uint32_t copies, std::uint32_t experts,
                                  const CommShape& shape, std::uint32_t groups) const;

  ClusterSpec cluster_;
  const GpuSpec* gpu_;
  KernelCalibration kernel_;
  NetworkOptions network_;
  GpuArch arch_ = GpuArch::Ampere;
  CpuVendor cpu_ = CpuVendor::Intel;
  std::shared_ptr<Fabric> fabric_;
};

}  // namespace scalescope::cost
