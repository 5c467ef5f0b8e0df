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
  /// Layers on the first / last pipeline stage, 0 = an even split (Megatron's
  /// --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers). The other stages
  /// share the remaining layers evenly (Llama 3 405B: 126 layers, PP 16, 7 on each end stage).
  std::int64_t decoder_first_pipeline_num_layers = 0;
  std::int64_t decoder_last_pipeline_num_layers = 0;

  std::int64_t tp() const { return tensor_model_parallel_size; }
  std::int64_t pp() const { return pipeline_model_parallel_size; }
  std::int64_t dp() const { return data_parallel_size; }
  std::int64_t world() const { return tp() * pp() * dp(); }

  /// Number of stages that take an even share of the layers not pinned to the end stages.
  std::int64_t middle_stages() const {
    if (pp() == 1) return 1;
    return pp() - (decoder_first_pipeline_num_layers > 0 ? 1 : 0) -
           (decoder_last_pipeline_num_layers > 0 ? 1 : 0);
  }
  /// Transformer layers on pipeline stage `stage` of a `layers`-layer model.
  std::int64_t layers_on_stage(std::int64_t stage, std::int64_t layers) const {
    if (pp() > 1 && stage == 0 && decoder_first_pipeline_num_layers > 0)
      return decoder_first_pipeline_num_layers;
    if (pp() > 1 && stage == pp() - 1 && decoder_last_pipeline_num_layers > 0)
      return decoder_last_pipeline_num_layers;
    const std::int64_t rest = layers - (pp() > 1 ? decoder_first_pipeline_num_layers : 0) -
                              (pp() > 1 ? decoder_last_pipeline_num_layers : 0);
    return middle_stages() > 0 ? rest / middle_stages() : 0;
  }
  /// Global index of the first layer of `stage`.
  std::int64_t first_layer_of_stage(std::int64_t stage, std::int64_t layers) const {
    std::int64_t first = 0;
    for (std::int64_t s = 0; s < stage; ++s) first += layers_on_stage(s, layers);
    return first;
  }
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
