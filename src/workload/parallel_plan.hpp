#pragma once
/// How the job is parallelised and trained. Key names follow Megatron-LM's arguments.
#include <cstdint>

namespace scalescope::workload {

enum class Recompute : std::uint8_t { None, Selective, Full };
enum class Schedule : std::uint8_t { OneFOneB, GPipe };
enum class Precision : std::uint8_t { Bf16, Fp16 };
enum class AttentionBackend : std::uint8_t { Flash, Unfused };

struct ParallelPlan {
  std::int64_t tensor_model_parallel_size = 1;
  std::int64_t pipeline_model_parallel_size = 1;
  std::int64_t data_parallel_size = 0;  ///< 0 → derived from the GPU count
  bool sequence_parallel = false;
  Recompute recompute = Recompute::None;
  bool use_distributed_optimizer = false;
  Schedule schedule = Schedule::OneFOneB;
  bool overlap_grad_reduce = false;   ///< DP reduction overlapped with the last backward
  bool overlap_param_gather = false;  ///< param all-gather overlapped with the next forward

  std::int64_t tp() const { return tensor_model_parallel_size; }
  std::int64_t pp() const { return pipeline_model_parallel_size; }
  std::int64_t dp() const { return data_parallel_size; }
  std::int64_t world() const { return tp() * pp() * dp(); }
};

struct TrainingSpec {
  std::int64_t micro_batch_size = 1;
  std::int64_t global_batch_size = 1;
  Precision precision = Precision::Bf16;
  AttentionBackend attention = AttentionBackend::Flash;
  /// Micro-batches per iteration on one pipeline: GBS / (MBS · DP).
  std::int64_t num_microbatches(std::int64_t dp) const {
    return global_batch_size / (micro_batch_size * dp);
  }
};

}  // namespace scalescope::workload
