#pragma once
/// The machine a job runs on: GPU type and the two-level network (NVLink inside a node, NICs
/// between nodes). Bandwidths are per GPU, per direction.
#include <cstdint>
#include <optional>
#include <string>

namespace scalescope::cost {

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

  std::int64_t node_of(std::int64_t rank) const { return rank / gpus_per_node; }
};

}  // namespace scalescope::cost
