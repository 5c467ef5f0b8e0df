#pragma once
/// Memory you can plan with: the classes of a rank's memory at its peak, what the CUDA driver,
/// NCCL and cuBLAS reserve beside PyTorch's allocator, and whether it fits the GPU
/// (docs/model.md "Memory capacity"; every constant's source is in memory_plan.cpp).
#include <array>
#include <cstdint>
#include <string_view>

#include "workload/model_spec.hpp"
#include "workload/parallel_plan.hpp"

namespace scalescope::workload {

enum class MemClass : std::uint8_t {
  Weights,          ///< bf16/fp16 parameters (fp8 copies included)
  MainGrads,        ///< fp32 main gradients
  Optimizer,        ///< fp32 master weights + Adam m, v (sharded by the distributed optimizer)
  Activations,      ///< tensors kept for the backward, live at the peak
  Workspace,        ///< transient outputs / workspaces of the op at the peak
  Fragmentation,    ///< allocator: reserved − allocated (planning margin)
  CudaContext,      ///< CUDA context, kernels and driver state
  CublasWorkspace,  ///< cuBLAS / cuBLASLt workspaces
  NcclBuffers,      ///< NCCL communicator buffers
  Count
};
inline constexpr int kNumMemClasses = static_cast<int>(MemClass::Count);
std::string_view mem_class_name(MemClass c);

struct MemoryBreakdown {
  std::array<std::int64_t, kNumMemClasses> bytes{};
  std::int64_t& operator[](MemClass c) { return bytes[static_cast<int>(c)]; }
  std::int64_t operator[](MemClass c) const { return bytes[static_cast<int>(c)]; }
  /// What torch.cuda.max_memory_allocated would report (the cuBLAS workspaces included).
  std::int64_t allocated() const;
  /// What torch.cuda.max_memory_reserved would report: allocated + the allocator's slack.
  std::int64_t reserved() const { return allocated() + (*this)[MemClass::Fragmentation]; }
  /// What the process holds on the device (PyTorch reserved + context, cuBLAS, NCCL): the
  /// number that must fit.
  std::int64_t total() const;
  /// The largest class.
  MemClass dominant() const;
};

/// Communicators a rank of `stage` belongs to (TP, DP, pipeline pairs, tied embedding).
int communicators_of_stage(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage);

/// The breakdown of a rank of pipeline stage `stage` at its allocated peak `peak_allocated`,
/// of which `peak_workspace` is the transient workspace of the op at the peak.
MemoryBreakdown memory_breakdown(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t,
                                 std::int64_t stage, std::int64_t peak_allocated,
                                 std::int64_t peak_workspace);

/// Allocator fragmentation margin as a fraction of the allocated peak.
inline constexpr double kFragmentationMargin = 0.05;

}  // namespace scalescope::workload
