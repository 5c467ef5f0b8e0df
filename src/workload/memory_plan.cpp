// Memory classes and the reserved-memory constants (docs/model.md "Memory capacity").
#include "workload/memory_plan.hpp"

#include <algorithm>
#include <cmath>

#include "workload/accounting.hpp"

namespace scalescope::workload {
namespace {

constexpr std::int64_t kMiB = 1 << 20;
// CUDA context: the first CUDA call of a PyTorch process takes ~700–800 MiB of device memory
// before any tensor (PyTorch forums, "What is the reason for pytorch's GPU memory floor?": 723
// MiB; "High gpu memory overhead": "~700+MB", depending on CUDA version and device).
constexpr std::int64_t kCudaContext = 768 * kMiB;
// cuBLAS/cuBLASLt workspace: 32 MiB per handle and stream on Hopper (PyTorch's default
// workspace size for H100, pytorch/pytorch#139442), one for the compute stream and one for the
// side stream of TP overlap or Transformer Engine. PyTorch allocates them through its caching
// allocator since pytorch/pytorch#85447, so they count in memory_allocated
// (pytorch/benchmark#1226).
constexpr std::int64_t kCublasWorkspace = 2 * 32 * kMiB;
// NCCL: NCCL_BUFFSIZE (Simple protocol) is 4 MiB per channel and peer (nccl init.cc, MODELING
// §7.1); a ring channel has a send and a receive peer, and NCCL opens up to 16 channels on
// NVLink-connected H100/A100 nodes by default (per-communicator estimate, LL/LL128 buffers
// ignored): 16 · 2 · 4 MiB = 128 MiB per communicator. A planning figure, not a measurement.
constexpr std::int64_t kNcclPerCommunicator = 16 * 2 * 4 * kMiB;

}  // namespace

std::string_view mem_class_name(MemClass c) {
  static constexpr std::array<std::string_view, kNumMemClasses> kNames = {
      "weights",       "main_grads",   "optimizer",        "activations", "workspace",
      "fragmentation", "cuda_context", "cublas_workspace", "nccl_buffers"};
  return kNames[static_cast<std::size_t>(c)];
}

std::int64_t MemoryBreakdown::allocated() const {
  return (*this)[MemClass::Weights] + (*this)[MemClass::MainGrads] + (*this)[MemClass::Optimizer] +
         (*this)[MemClass::Activations] + (*this)[MemClass::Workspace] +
         (*this)[MemClass::CublasWorkspace];
}

std::int64_t MemoryBreakdown::total() const {
  std::int64_t t = 0;
  for (std::int64_t b : bytes) t += b;
  return t;
}

MemClass MemoryBreakdown::dominant() const {
  const auto it = std::max_element(bytes.begin(), bytes.end());
  return static_cast<MemClass>(it - bytes.begin());
}

int communicators_of_stage(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  int n = 0;
  if (p.tp() > 1) ++n;
  if (p.zero_shard() > 1) ++n;     // DP × CP gradient group (the shard group with HSDP)
  if (p.zero_replicas() > 1) ++n;  // HSDP replicate group
  if (p.cp() > 1) ++n;             // CP group
  if (m.moe()) {                   // MoE: EP, expert-TP and expert-DP groups
    if (p.ep() > 1) ++n;
    if (p.etp() > 1) ++n;
    if (p.edp() > 1) ++n;
    if (p.moe_token_dispatcher_type == MoeDispatcher::AllGather && p.etp() * p.ep() > 1) ++n;
  }
  if (p.pp() > 1) {
    const bool wrap = p.interleaved();
    n += (stage > 0 || wrap ? 1 : 0) + (stage < p.pp() - 1 || wrap ? 1 : 0);
    if (m.embedding_copy_on_last_stage() && (stage == 0 || stage == p.pp() - 1)) ++n;
  }
  return n;
}

MemoryBreakdown memory_breakdown(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t,
                                 std::int64_t stage, std::int64_t peak_allocated,
                                 std::int64_t peak_workspace) {
  MemoryBreakdown b;
  // Static memory as static_memory_bytes splits it (MODELING §3.2), plus TE's fp8 weight copies.
  const std::int64_t fp8_copies = fp8_weight_copy_bytes(m, p, t, stage);
  const std::int64_t total_static = static_memory_bytes(m, p, stage) + fp8_copies;
  b[MemClass::Weights] = weight_bytes(m, p, stage) + fp8_copies;
  b[MemClass::MainGrads] = main_grad_bytes(m, p, stage);
  b[MemClass::Optimizer] = total_static - b[MemClass::Weights] - b[MemClass::MainGrads];
  b[MemClass::Workspace] = peak_workspace;
  // ZeRO-3 / FSDP: the gathered parameters and the unsharded gradients the graph allocates are
  // counted as weights and main grads (their closed form at the peak, capped by what is there).
  std::int64_t dynamic = std::max<std::int64_t>(0, peak_allocated - total_static - peak_workspace);
  const std::int64_t gathered = std::min(dynamic, zero3_unsharded_param_bytes(m, p, stage));
  dynamic -= gathered;
  const std::int64_t unsharded_grads =
      std::min(dynamic, zero3_unsharded_grad_bytes(m, p, t, stage));
  dynamic -= unsharded_grads;
  b[MemClass::Weights] += gathered;
  b[MemClass::MainGrads] += unsharded_grads;
  b[MemClass::Activations] = dynamic;
  b[MemClass::Fragmentation] =
      static_cast<std::int64_t>(kFragmentationMargin * static_cast<double>(peak_allocated));
  b[MemClass::CudaContext] = kCudaContext;
  b[MemClass::CublasWorkspace] = kCublasWorkspace;
  b[MemClass::NcclBuffers] = communicators_of_stage(m, p, stage) * kNcclPerCommunicator;
  return b;
}

}  // namespace scalescope::workload
