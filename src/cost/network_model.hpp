#pragma once
/// Network model parameters: how the cluster's link bandwidths turn into the bus bandwidth NCCL's
/// tuner starts from, and into point-to-point bandwidth. Derivations: docs/cost-model.md §2.3.
#include <optional>

#include "cost/nccl_tuner.hpp"

namespace scalescope::cost {

/// Ring bus bandwidth inside a node / NVLink bandwidth per direction: 8×A100 (NVLink3, 300 GB/s
/// per direction) all-reduce reaches 232 GB/s busbw (MODELING §7.5, GTC24 S62129), 232 / 300.
inline constexpr double kNvlinkBusEfficiency = 232.0 / 300.0;
/// Ring bus bandwidth across nodes / NIC bandwidth available to the communicator. Two sources
/// disagree: the Azure ND A100 v4 all-reduce data alone fit 0.64, DGX A100's 192 GB/s on
/// 8 × 200 Gb means 0.96 (MODELING §7.5). 0.80 minimizes the equal-weight squared log error over
/// both (docs/cost-model.md §2.3); set NetworkOptions::nic_efficiency for a known cluster.
inline constexpr double kNicBusEfficiency = 0.80;
/// One NVLink copy between two GPUs / NVLink bandwidth per direction: nvbandwidth on 8×H200,
/// 396 GB/s of 450 (MODELING §6.4).
inline constexpr double kP2pNvlinkEfficiency = 396.0 / 450.0;
/// One transfer over one NIC / NIC line rate: nccl-tests 24 GB/s on one 200 Gb/s NIC and 48 on
/// one 400 Gb/s NIC (MODELING §7.5), 0.96.
inline constexpr double kP2pNicEfficiency = 0.96;

/// NVLS all-reduce bus bandwidth of 8 GPUs of a node / NVLink bandwidth per direction
/// (nccl-tests, MODELING §7.5): 8×H100 480 GB/s of 450 (GTC24 S62129), 8×B200 838.0 of 900
/// (ml-engineering's SHARP tables). Indexed by GpuArch; 0 where there is no NVLS.
inline constexpr double kNvlsBusRatio[4] = {0.0, 0.0, 480.0 / 450.0, 838.0 / 900.0};

/// Tunable knobs of the network model; the defaults are the values above.
struct NetworkOptions {
  double nvlink_efficiency = kNvlinkBusEfficiency;
  double nic_efficiency = kNicBusEfficiency;
  double p2p_nvlink_efficiency = kP2pNvlinkEfficiency;
  double p2p_nic_efficiency = kP2pNicEfficiency;
  /// Host CPU vendor; unset: the GPU's DGX reference host (A100: AMD EPYC, later: Intel Xeon).
  std::optional<CpuVendor> cpu;
  bool ll128 = true;  ///< NCCL's default on NVLink nodes with GPU-local NICs
  NcclFilter filter;  ///< restrict NCCL's choice (NCCL_ALGO / NCCL_PROTO); empty: free choice
  /// network.model: false = analytical (every transfer priced alone), true = flow (transfers
  /// between nodes share the fabric's links max-min fairly; docs/network.md).
  bool flow = false;
  /// network.comm_kernel_sms: NCCL's collective kernels hold SMs (one per channel) while they
  /// run, and compute kernels beside them run on the SMs left (docs/cost-model.md §1.7).
  bool comm_kernel_sms = true;
};

}  // namespace scalescope::cost
