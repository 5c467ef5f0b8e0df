#pragma once
/// The machine a job runs on: GPU type and the two-level network (NVLink inside a node, NICs
/// between nodes). Bandwidths are per GPU, per direction.
#include <cstdint>
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
  /// Fraction of isolated-kernel speed a training framework sustains across a step (launch gaps,
  /// allocator, unfused glue kernels, clocks under the power cap); every compute op's roofline
  /// time is divided by it. Calibrated against measured runs (docs/cost-model.md §1.5).
  double compute_efficiency = 1.0;

  std::int64_t node_of(std::int64_t rank) const { return rank / gpus_per_node; }
};

}  // namespace scalescope::cost
