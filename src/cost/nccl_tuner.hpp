#pragma once
/// NCCL's analytical tuner (NCCL `src/graph/tuning.cc`: `ncclTopoTuneModel` and
/// `ncclTopoGetAlgoTime`; MODELING §7.1–7.3): each (algorithm, protocol) costs
/// t = latency + bytes / algBw, and NCCL runs the cheapest. Modelled: Ring (all-reduce,
/// all-gather, reduce-scatter) and Tree (all-reduce across nodes) with LL, LL128 and Simple;
/// NVLS (NVLink SHARP inside a node; across nodes with CollNet), NVLS-Tree (all-reduce across
/// nodes), PAT (all-gather and reduce-scatter with one GPU per node) and CollNet Direct / Chain
/// (all-reduce reduced in the fabric), Simple only. Formulas: docs/cost-model.md §2.
#include <cstdint>
#include <optional>
#include <string_view>

#include "graph/op.hpp"

namespace scalescope::cost {

/// In the order nccl_best tries them (on equal times the earlier wins).
enum class NcclAlgo : std::uint8_t { Ring, Tree, Nvls, NvlsTree, Pat, CollNetDirect, CollNetChain };
inline constexpr NcclAlgo kNcclAlgos[] = {
    NcclAlgo::Ring, NcclAlgo::Tree,          NcclAlgo::Nvls,        NcclAlgo::NvlsTree,
    NcclAlgo::Pat,  NcclAlgo::CollNetDirect, NcclAlgo::CollNetChain};
enum class NcclProto : std::uint8_t { LL, LL128, Simple };
inline constexpr NcclProto kNcclProtos[] = {NcclProto::LL, NcclProto::LL128, NcclProto::Simple};
/// GPU generation: selects NCCL's per-generation constants (llMaxBw on one node, ring plateau).
enum class GpuArch : std::uint8_t { Volta, Ampere, Hopper, Blackwell };
/// Host CPU vendor: NCCL's multi-node LL cap and per-step network overhead depend on it.
enum class CpuVendor : std::uint8_t { Intel, Amd };

std::string_view nccl_algo_name(NcclAlgo a);
std::string_view nccl_proto_name(NcclProto p);

/// What the tuner knows of one communicator.
struct NcclComm {
  graph::OpKind kind = graph::OpKind::AllReduce;  ///< AllReduce, AllGather or ReduceScatter
  std::uint32_t ranks = 1;
  std::uint32_t nodes = 1;
  double bus_bw_GBps = 0;  ///< ring Simple bus bandwidth (NCCL: nChannels × bandwidth per channel)
  GpuArch arch = GpuArch::Ampere;
  CpuVendor cpu = CpuVendor::Intel;
  bool ll128 = true;  ///< NCCL enables LL128 by default on NVLink with PXB/PXN NIC paths
  /// NVLS: the NVSwitch reduces and multicasts (NVLink SHARP; Hopper and later), and the NVLS
  /// graph's bandwidth per GPU with 8 or more GPUs of the communicator in a node (NCCL:
  /// nChannels × bwIntra of the NVLS graph; 0: no NVLS).
  double nvls_bw_GBps = 0;
  /// The communicator's share of its nodes' NIC bandwidth, as a bus bandwidth (NCCL: bwInter
  /// × nChannels); used by NVLS across nodes and CollNet. 0 on one node.
  double inter_bw_GBps = 0;
  /// The NVLink ring bus bandwidth inside a node (NCCL: bwIntra × nChannels; CollNet reads it);
  /// 0: bus_bw_GBps.
  double intra_bw_GBps = 0;
  /// NICs of a node the communicator's members use (CollNet Direct's GPU/NIC ratio).
  std::uint32_t nics = 1;
  /// CollNet: the fabric reduces in-network (InfiniBand SHARP with NCCL's CollNet plugin).
  bool collnet = false;
};

/// Restricts the search, as NCCL_ALGO / NCCL_PROTO do.
struct NcclFilter {
  std::optional<NcclAlgo> algo;
  std::optional<NcclProto> proto;
};

/// One (algorithm, protocol) and its cost for one message size.
struct NcclEstimate {
  NcclAlgo algo = NcclAlgo::Ring;
  NcclProto proto = NcclProto::Simple;
  double latency_us = 0;  ///< including the multi-node ring plateau factor
  double algbw_GBps = 0;  ///< including the tree correction factor
  double time_us = 0;     ///< latency_us + bytes / algbw
};

/// Cost of `bytes` (nccl-tests size S) with one (algo, proto); nullopt where NCCL would not
/// run it (tree for anything but a multi-node all-reduce, LL128 when disabled, NVLS without
/// NVLink SHARP or with one GPU a node, PAT with more than one, CollNet without in-network
/// reduction, ...).
std::optional<NcclEstimate> nccl_estimate(const NcclComm& comm, double bytes, NcclAlgo algo,
                                          NcclProto proto);
/// The cheapest allowed (algo, proto), as `ncclTopoGetAlgoTime`'s minimum. Throws ContractError
/// if the filter leaves nothing.
NcclEstimate nccl_best(const NcclComm& comm, double bytes, const NcclFilter& filter = {});
/// As nccl_best, nullopt where the filter leaves nothing.
std::optional<NcclEstimate> nccl_try_best(const NcclComm& comm, double bytes,
                                          const NcclFilter& filter);

/// What NCCL's ring graph search sees of a communicator's GPUs (nccl_ring_channels).
struct NcclTopoBudget {
  GpuArch arch = GpuArch::Ampere;
  double nvlink_GBps = 0;  ///< datasheet NVLink bandwidth per direction per GPU; 0: PCIe only
  std::uint32_t nodes = 1;
  double nic_GBps = 0;  ///< one NIC's bandwidth (nodes > 1)
  double nics = 1;      ///< NICs of a node the communicator's GPUs use (nodes > 1)
};
/// Channels NCCL's ring and tree collectives run on, each one CTA on one SM for the whole
/// collective (docs/cost-model.md §2.7): the ring graph search (search.cc ncclTopoCompute: the
/// per-channel speed walk over the generation's speed array, ncclTopoDupChannels) and the
/// execution channels connect.cc derives from it (× 2, × 2 again on Hopper across nodes).
std::uint32_t nccl_ring_channels(const NcclTopoBudget& budget);

/// Textbook ring all-reduce (DESIGN.md; MODELING §7.4): 2(n−1)/n·S/B + 2(n−1)·α, in seconds.
double ring_allreduce_seconds(double bytes, std::uint32_t n, double bus_bw_GBps, double alpha_us);

}  // namespace scalescope::cost
