#pragma once
/// The machine a job runs on: GPU type and the two-level network (NVLink inside a node, NICs
/// between nodes). Bandwidths are per GPU, per direction.
#include <cstdint>
#include <optional>
#include <string>

namespace scalescope::cost {

/// `cluster.topology`. A leaf switch serves `nodes_per_leaf` nodes (rail-optimised: NIC i of
/// each of them, one leaf per rail; otherwise every NIC of them); leaves form pods of
/// `leaves_per_pod` (0: one pod, a two-tier fabric), each leaf linked to every spine of its pod;
/// spine k of every pod links to the `cores_per_plane` core switches of plane k.
struct TopologySpec {
  bool rail_optimized = true;
  std::int64_t nodes_per_leaf = 32;
  std::int64_t leaves_per_pod = 0;
  std::int64_t spines_per_pod = 8;
  std::int64_t cores_per_plane = 1;
  /// NIC-facing over spine-facing capacity of a leaf (1: non-blocking; 4: 1:4).
  double leaf_oversubscription = 1.0;
  /// Leaf-facing over core-facing capacity of a spine (three tiers only).
  double spine_oversubscription = 1.0;
  /// Added to a transfer's latency per spine and per core switch its route crosses (the NIC
  /// latency of the cluster covers NIC, cable and leaf).
  double spine_latency_us = 0;
  double core_latency_us = 0;
  /// How a route picks its spine (and core): `Ecmp` hashes the two NICs (Ethernet / RoCE);
  /// `DestMod` takes the destination's port under its leaf modulo the spines (InfiniBand's
  /// destination-based D-mod-k routing, non-blocking for shift permutations).
  enum class Routing : std::uint8_t { Ecmp, DestMod } routing = Routing::Ecmp;
};

struct ClusterSpec {
  std::string preset;  ///< name of the preset file it came from, if any
  std::string gpu;     ///< a name in the GPU table (cost/gpu.hpp)
  std::int64_t gpus_per_node = 8;
  std::int64_t num_gpus = 0;
  double nvlink_bandwidth_GBps = 0;  ///< per GPU, per direction (A100: 300, H100: 450)
  double nvlink_latency_us = 0;
  double nic_bandwidth_Gbps = 0;  ///< per NIC, per direction (HDR 200, NDR 400)
  std::int64_t nics_per_node = 0;
  double nic_latency_us = 0;
  /// The kernel model's parameters (cost/gpu.hpp KernelCalibration); unset → the GPU table's
  /// physical defaults. Cluster presets carry calibrated values (docs/cost-model.md §1.3).
  std::optional<double> kernel_overhead_us;
  std::optional<double> gemm_efficiency;
  std::optional<double> attention_efficiency;
  std::optional<double> hbm_efficiency;
  /// HBM efficiency of the norm and activation kernels alone (unset: hbm_efficiency): a
  /// framework that runs them unfused (eager PyTorch) reaches far less than fused kernels.
  std::optional<double> norm_activation_efficiency;
  /// Host time to issue one kernel (KernelCalibration::host_launch_us); unset: the GPU table's 0.
  std::optional<double> host_launch_us;
  /// An extra multiplier on every compute op's speed, in (0, 1]: the op's time is divided by it.
  /// 1 by default; kept for configurations written before the kernel model.
  double compute_efficiency = 1.0;
  /// Ring bus bandwidth across nodes over the NIC bandwidth (NetworkOptions::nic_efficiency) of
  /// this cluster; unset: the network model's default (docs/cost-model.md §2.3).
  std::optional<double> nic_bus_efficiency;
  /// NVLink SHARP in the node's NVSwitch (NCCL's NVLS and NVLS-Tree); unset: on for Hopper and
  /// later GPUs (NCCL_NVLS_ENABLE's default where the driver reports multicast).
  std::optional<bool> nvls;
  /// The fabric reduces in-network (InfiniBand SHARP with NCCL's CollNet plugin,
  /// NCCL_COLLNET_ENABLE=1): NCCL may run CollNet Direct / Chain and NVLS across nodes.
  bool in_network_reduction = false;
  /// The fabric between nodes (cluster.topology); unset: only "inside a node / across nodes".
  std::optional<TopologySpec> topology;

  std::int64_t node_of(std::int64_t rank) const { return rank / gpus_per_node; }
};

}  // namespace scalescope::cost
