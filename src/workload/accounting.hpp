#pragma once
/// Closed-form accounting of a dense transformer: parameters, model FLOPs, static memory and
/// activation bytes. Each formula names its source; docs/model.md derives them.
#include <cstdint>

#include "workload/model_spec.hpp"
#include "workload/parallel_plan.hpp"

namespace scalescope::workload {

/// Parameters of transformer layer `layer`, whole (not sharded): with MoE, every routed expert.
double layer_parameters(const ModelSpec& m, std::int64_t layer = 0);
/// Parameters one token uses in layer `layer`: the top-k routed experts instead of all.
double layer_active_parameters(const ModelSpec& m, std::int64_t layer = 0);
/// Learned absolute position embeddings (GPT-style): a [max positions, h] table on the first
/// stage, replicated over TP (megatron/core/models/common/embeddings/language_model_embedding.py);
/// max positions = seq_length. 0 with rotary embeddings.
double position_parameters(const ModelSpec& m);

/// [V/t, h] vocabulary tables the last pipeline stage holds beside its norm: an untied output
/// layer, and with PP > 1 a copy of the embedding (ModelSpec::embedding_copy_on_last_stage).
double last_stage_vocab_tables(const ModelSpec& m, const ParallelPlan& p);
/// Transformer layers in model chunk `chunk` of pipeline stage `stage`: the decoder's, and on the
/// last chunk of the last stage the MTP modules' after them (ModelSpec::mtp_num_layers).
std::int64_t layers_in_chunk(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage,
                             std::int64_t chunk);
/// … and on the whole stage.
std::int64_t layers_on_stage(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage);

/// Parameters of the whole model: layers, final norm, word embedding, output layer if untied,
/// learned position embeddings; not the MTP modules (DeepSeek-V3's published 671 B excludes its
/// 14 B of MTP), which rank_parameters counts.
/// Uses the unpadded vocabulary, as published counts do.
double total_parameters(const ModelSpec& m);
/// Parameters one token activates: the layers' active parameters, the final norm and the output
/// layer, and the input embedding table when `with_input_embedding` (Mistral and Qwen count it
/// in their published active counts; DeepSeek's 36.7 B does not reach it: docs/model.md).
double active_parameters(const ModelSpec& m, bool with_input_embedding);

/// One rank's parameters split by the group their gradients reduce over: dense (DP × CP, the
/// distributed optimizer shards them there) and expert (the expert-data-parallel group).
struct RankParameters {
  double dense = 0;
  double expert = 0;
  double total() const { return dense + expert; }
};
RankParameters rank_parameters(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage);
/// Weights of layer `layer` on one rank replicated over TP whose gradients (with sequence
/// parallelism: each TP rank saw other tokens) are all-reduced over TP: norms, MLA's down
/// projections and latent norms, the MoE router.
double tp_replicated_parameters(const ModelSpec& m, std::int64_t layer);
/// Parameters held by one rank of pipeline stage `stage`: its layers' linear weights sharded by
/// TP, norms and row-parallel biases replicated, the padded embedding shard on the first stage,
/// the output layer (or the tied embedding's copy when PP > 1) on the last.
double parameters_on_rank(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage);

/// Parameters of transformer layer `layer` held by one rank (its TP shard; with MoE its EP share
/// of the experts, each split over ETP).
RankParameters layer_parameters_on_rank(const ModelSpec& m, const ParallelPlan& p,
                                        std::int64_t layer);
/// Dense (non-MoE) models: the parameters of any layer on one rank.
double layer_parameters_on_rank(const ModelSpec& m, const ParallelPlan& p);

/// Persistent bytes per parameter by ZeRO stage (MODELING §3.2, ZeRO §5, Megatron
/// dist_optimizer.md), D = DP × CP: bf16/fp16 weights 2 (2/D under ZeRO-3), main grads
/// grad_bytes (/D from ZeRO-2), fp32 master + Adam m, v 12 (/D from ZeRO-1).
double weight_bytes_per_parameter(const ParallelPlan& p);
double grad_bytes_per_parameter(const ParallelPlan& p);
double optimizer_bytes_per_parameter(const ParallelPlan& p);
/// The same for expert parameters, which shard over the expert-data-parallel group E = TP·CP·DP
/// / (ETP·EP) instead (Megatron's expert_parallel_buffers and expert optimizer shard,
/// Megatron-FSDP's expert group, torchtitan's dp_shard_mod_ep mesh for the experts' FSDP).
double expert_weight_bytes_per_parameter(const ParallelPlan& p);
double expert_grad_bytes_per_parameter(const ParallelPlan& p);
double expert_optimizer_bytes_per_parameter(const ParallelPlan& p);

/// Persistent weight / main-gradient bytes of a rank of `stage`: dense parameters × the dense
/// figure plus expert parameters × the expert one.
std::int64_t weight_bytes(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage);
std::int64_t main_grad_bytes(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage);

/// Weights + gradients + optimizer state of one rank: parameters × the three figures above, e.g.
/// 18, 6 + 12/D (ZeRO-1), 2 + 16/D (ZeRO-2), 18/D (ZeRO-3) with fp32 grads. Expert parameters
/// shard over the expert-data-parallel group instead of DP × CP.
std::int64_t static_memory_bytes(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage);

/// ZeRO-3 / FSDP: the unsharded bf16 parameters live at the peak, beside the shards: the root
/// unit (embedding, final norm, output layer; FSDP2 keeps the root gathered through the
/// backward) and two layer units (the current one and the prefetched one, FSDP's
/// limit_all_gathers; with experts the largest layer's); all of the rank's parameters without
/// reshard_after_forward. 0 otherwise.
std::int64_t zero3_unsharded_param_bytes(const ModelSpec& m, const ParallelPlan& p,
                                         std::int64_t stage);
/// ZeRO-3 / FSDP's root unit on a rank of `stage`: what the layer units leave (embedding, final
/// norm, output layer); with experts the layers' units differ (dense layers, MTP) and are
/// subtracted one by one.
double root_unit_on_stage(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage);
/// ZeRO-3 / FSDP: unsharded gradients live at the peak: the root's and one layer's until their
/// reduce-scatter, or every parameter's when micro-batches accumulate before the reduction.
std::int64_t zero3_unsharded_grad_bytes(const ModelSpec& m, const ParallelPlan& p,
                                        const TrainingSpec& t, std::int64_t stage);

/// Weights of the transformer layers' linear layers (QKV, out-proj, FC1, FC2, MLA's projections,
/// the experts) on a rank of `stage`: the GEMMs Transformer Engine runs in fp8.
double linear_parameters_on_rank(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage);

/// fp8 training (Transformer Engine): the fp8 copy of each linear weight and its transpose that
/// TE caches from the first micro-batch on, 2 bytes per linear parameter; 0 otherwise.
std::int64_t fp8_weight_copy_bytes(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t,
                                   std::int64_t stage);

/// Activation bytes one dense transformer layer keeps for its backward, per micro-batch, per rank
/// (Korthikanti et al. 2022, §4, generalised to SwiGLU, GQA and flash attention; docs/model.md),
/// with selective recomputation's core_attn and mlp modules.
std::int64_t activation_bytes_per_layer(const ModelSpec& m, const ParallelPlan& p,
                                        const TrainingSpec& t);

/// Model FLOPs of one iteration as Megatron-LM counts them
/// (megatron/training/training.py::num_floating_point_operations, core_v0.16+, causal κ = 6).
double model_flops_per_iteration(const ModelSpec& m, const TrainingSpec& t, std::int64_t tp);

}  // namespace scalescope::workload
