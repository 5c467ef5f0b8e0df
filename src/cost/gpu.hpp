#pragma once
/// Datasheet and measured facts of the GPUs scalescope knows. Every number cites its source in
/// gpu.cpp.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace scalescope::cost {

/// The sustained-rate model of one GPU's kernels (docs/cost-model.md §1.3): every kernel pays a
/// fixed overhead, and each op class runs at a sustained fraction of its measured isolated rate.
/// The defaults in the GPU table are the physical (uncalibrated) values; a cluster preset may
/// carry values calibrated against measured training runs.
struct KernelCalibration {
  double kernel_overhead_us = 2.0;    ///< fixed time per kernel (launch gap, ramp-up, tail)
  double gemm_efficiency = 1.0;       ///< sustained fraction of the shape-aware MAMF GEMM rate
  double attention_efficiency = 1.0;  ///< sustained fraction of the fused-attention table rate
  double hbm_efficiency = 0.8;        ///< fraction of the datasheet HBM bandwidth streams reach
  /// The same for norm and activation ops; 0 → hbm_efficiency.
  double norm_activation_efficiency = 0;
  /// Host (CPU) time to issue one kernel: the framework's Python and C++ dispatch and the CUDA
  /// launch (docs/cost-model.md §1.6). 0: the host is not modelled (it always runs ahead).
  double host_launch_us = 0;
};

struct GpuSpec {
  std::string name;                  ///< canonical name, e.g. "A100-SXM4-80GB"
  double peak_tflops_bf16 = 0;       ///< dense BF16/FP16 tensor-core peak, datasheet
  double hbm_bytes = 0;              ///< HBM capacity
  double hbm_usable_bytes = 0;       ///< device memory the driver reports (cudaMemGetInfo total)
  double hbm_bandwidth_TBps = 0;     ///< datasheet HBM bandwidth
  double nvlink_bandwidth_GBps = 0;  ///< per direction (datasheet bidirectional / 2)
  int sms = 0;
  double gemm_ceiling_tflops = 0;      ///< best measured bf16 GEMM (MAMF), the large-GEMM ceiling
  double peak_tflops_fp8 = 0;          ///< dense FP8 tensor-core peak, datasheet; 0 = no fp8
  double gemm_ceiling_fp8_tflops = 0;  ///< best measured fp8 GEMM (MAMF table)
  double peak_tflops_fp4 = 0;          ///< dense FP4 tensor-core peak, datasheet; 0 = no FP4
  /// FlashAttention-2 fwd+bwd measured TFLOP/s (hd128, causal) at s = 512, 1k, 2k, 4k, 8k, 16k.
  std::vector<double> attention_tflops;
  /// Fused attention measured per pass (forward, backward) at the same points, where the GPU has
  /// such a measurement (Hopper: cuDNN's SDPA); empty → `attention_tflops` serves both.
  std::vector<double> attention_fwd_tflops;
  std::vector<double> attention_bwd_tflops;
  KernelCalibration kernel;  ///< physical defaults of the kernel model
};

/// Looks a GPU up by canonical name or alias ("A100", "H100", "h100-sxm", …); case-insensitive.
/// Throws InputError listing the known names when it is unknown.
const GpuSpec& find_gpu(std::string_view name);
/// Canonical names of the known GPUs, in table order.
std::vector<std::string> gpu_names();
/// Shape (m, n, k) at which `gemm_ceiling_tflops` was measured (the MAMF sweep's best shape);
/// {0, 0, 0} for a GPU not in the table. The compute model scales its efficiency to it.
std::array<std::uint32_t, 3> gemm_ceiling_shape(const GpuSpec& gpu);

}  // namespace scalescope::cost
