#include "workload/accounting.hpp"

#include <cmath>

namespace scalescope::workload {

namespace {
/// Elements of one norm's parameters: LayerNorm has weight and bias (GPT), RMSNorm a weight.
double norm_params(const ModelSpec& m) {
  return static_cast<double>(m.hidden_size) * (m.add_bias_linear ? 2.0 : 1.0);
}
double glu(const ModelSpec& m) {
  return m.gated_linear_unit ? 2.0 : 1.0;
}
}  // namespace

double layer_parameters(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  const double q = static_cast<double>(m.query_width());
  const double kv = static_cast<double>(m.kv_width());
  const double f = static_cast<double>(m.ffn());
  double w = h * (q + 2 * kv) + q * h + h * f * glu(m) + f * h;
  if (m.add_bias_linear) w += (q + 2 * kv) + h + f * glu(m) + h;
  return w + 2 * norm_params(m);
}

double position_parameters(const ModelSpec& m) {
  if (m.position_embedding_type != PositionEmbedding::LearnedAbsolute) return 0;
  return static_cast<double>(m.seq_length) * static_cast<double>(m.hidden_size);
}

double total_parameters(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  const double v = static_cast<double>(m.vocab_size);
  return static_cast<double>(m.num_layers) * layer_parameters(m) + norm_params(m) +
         v * h * (m.untie_embeddings ? 2.0 : 1.0) + position_parameters(m);
}

double layer_parameters_on_rank(const ModelSpec& m, const ParallelPlan& p) {
  const double t = static_cast<double>(p.tp());
  const double h = static_cast<double>(m.hidden_size);
  const double q = static_cast<double>(m.query_width());
  const double kv = static_cast<double>(m.kv_width());
  const double f = static_cast<double>(m.ffn());
  // Column-parallel QKV and FC1 and row-parallel out-proj and FC2 weights are split over TP;
  // column-parallel biases are split, row-parallel biases and norms are replicated
  // (megatron/core/tensor_parallel/layers.py).
  double layer = (h * (q + 2 * kv) + q * h + h * f * glu(m) + f * h) / t + 2 * norm_params(m);
  if (m.add_bias_linear) layer += (q + 2 * kv + f * glu(m)) / t + 2 * h;
  return layer;
}

double parameters_on_rank(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  const double t = static_cast<double>(p.tp());
  const double h = static_cast<double>(m.hidden_size);
  double n =
      layer_parameters_on_rank(m, p) * static_cast<double>(p.layers_on_stage(stage, m.num_layers));
  const double vocab_shard = static_cast<double>(m.padded_vocab(p.tp())) * h / t;
  if (stage == 0) n += vocab_shard + position_parameters(m);
  if (stage == p.pp() - 1) {
    n += norm_params(m);
    // The output layer: its own weight when untied; with tied weights and PP > 1 the last stage
    // keeps a copy of the embedding (megatron/core/models/common/language_module).
    if (m.untie_embeddings || p.pp() > 1) n += vocab_shard;
  }
  return n;
}

double weight_bytes_per_parameter(const ParallelPlan& p) {
  return p.zero() >= 3 ? 2.0 / static_cast<double>(p.zero_shard()) : 2.0;
}
double grad_bytes_per_parameter(const ParallelPlan& p) {
  return p.zero() >= 2 ? p.grad_bytes() / static_cast<double>(p.zero_shard()) : p.grad_bytes();
}
double optimizer_bytes_per_parameter(const ParallelPlan& p) {
  return p.zero() >= 1 ? 12.0 / static_cast<double>(p.zero_shard()) : 12.0;
}

std::int64_t static_memory_bytes(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  const double n = parameters_on_rank(m, p, stage);
  // ZeRO shards over the DP × CP group (Megatron's dp-cp group), MODELING §3.2.
  return static_cast<std::int64_t>(
      std::ceil(n * (weight_bytes_per_parameter(p) + grad_bytes_per_parameter(p) +
                     optimizer_bytes_per_parameter(p))));
}

std::int64_t zero3_unsharded_param_bytes(const ModelSpec& m, const ParallelPlan& p,
                                         std::int64_t stage) {
  if (p.zero() < 3 || p.zero_shard() == 1) return 0;
  const double layer = layer_parameters_on_rank(m, p);
  const double root = parameters_on_rank(m, p, stage) -
                      layer * static_cast<double>(p.layers_on_stage(stage, m.num_layers));
  if (!p.reshard_after_forward)
    return static_cast<std::int64_t>(std::ceil(2 * parameters_on_rank(m, p, stage)));
  // The root unit stays gathered through the micro-batch; two layer units besides it.
  return static_cast<std::int64_t>(std::ceil(2 * (root + 2 * layer)));
}

std::int64_t zero3_unsharded_grad_bytes(const ModelSpec& m, const ParallelPlan& p,
                                        const TrainingSpec& t, std::int64_t stage) {
  if (p.zero() < 3 || p.zero_shard() == 1) return 0;
  if (t.num_microbatches(p.dp()) > 1 && !p.fsdp_reduce_every_microbatch)
    return static_cast<std::int64_t>(std::ceil(p.grad_bytes() * parameters_on_rank(m, p, stage)));
  const double layer = layer_parameters_on_rank(m, p);
  const double root = parameters_on_rank(m, p, stage) -
                      layer * static_cast<double>(p.layers_on_stage(stage, m.num_layers));
  // The root's gradients (produced first, in the head's backward, reduced last) and the layer's.
  return static_cast<std::int64_t>(std::ceil(p.grad_bytes() * (root + layer)));
}

double linear_parameters_on_rank(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  const double h = static_cast<double>(m.hidden_size);
  const double q = static_cast<double>(m.query_width());
  const double kv = static_cast<double>(m.kv_width());
  const double f = static_cast<double>(m.ffn());
  const double layer =
      (h * (q + 2 * kv) + q * h + h * f * glu(m) + f * h) / static_cast<double>(p.tp());
  return layer * static_cast<double>(p.layers_on_stage(stage, m.num_layers));
}

std::int64_t fp8_weight_copy_bytes(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t,
                                   std::int64_t stage) {
  if (t.precision != Precision::Fp8) return 0;
  return static_cast<std::int64_t>(std::ceil(2 * linear_parameters_on_rank(m, p, stage)));
}

std::int64_t activation_bytes_per_layer(const ModelSpec& m, const ParallelPlan& p,
                                        const TrainingSpec& t) {
  const double s =
      static_cast<double>(m.seq_length) / static_cast<double>(p.cp());  // this rank's share
  const double b = static_cast<double>(t.micro_batch_size);
  const double h = static_cast<double>(m.hidden_size);
  const double a = static_cast<double>(m.num_attention_heads);
  const double tp = static_cast<double>(p.tp());
  const double q = static_cast<double>(m.query_width());
  const double kv = static_cast<double>(m.kv_width());
  const double f = static_cast<double>(m.ffn());
  const double seq_shard = p.sequence_parallel ? tp : 1.0;  // tensors split along s with SP
  const double sbh = s * b * h;
  if (p.recompute == Recompute::Full) return static_cast<std::int64_t>(2 * sbh / seq_shard);
  // Korthikanti et al. §4.1 terms, in bytes (bf16 = 2, masks 1):
  double replicated = 2 * sbh                         // input norm input
                      + 2 * sbh                       // QKV GEMM input (norm output)
                      + 2 * sbh                       // pre-MLP norm input
                      + 2 * sbh;                      // FC1 input (norm output)
  if (m.hidden_dropout > 0) replicated += sbh + sbh;  // two 1-byte hidden-dropout masks
  double sharded = 2 * s * b * (q + 2 * kv)           // Q, K, V
                   + 2 * s * b * q                    // attention output = out-proj input
                   + 2 * s * b * f * glu(m)           // FC1 output
                   + 2 * s * b * f;                   // activation output = FC2 input
  if (p.recompute != Recompute::Selective) {
    if (t.attention == AttentionBackend::Unfused) {
      // softmax output 2·a·s²·b, its dropout mask a·s²·b and dropout output 2·a·s²·b
      sharded += (m.attention_dropout > 0 ? 5.0 : 2.0) * a * s * s * b;
    } else {
      sharded += 4 * b * a * s;  // flash attention keeps the fp32 log-sum-exp only
    }
  }
  return static_cast<std::int64_t>(std::llround(replicated / seq_shard + sharded / tp));
}

double model_flops_per_iteration(const ModelSpec& m, const TrainingSpec& t, std::int64_t tp) {
  // F = 6·B·s·[L·(h·(q + 2·kv) + q·h) + L·h·f·φ + h·V] + 6·B·s²·q·L, φ = 3 (SwiGLU) or 2.
  const double B = static_cast<double>(t.global_batch_size);
  const double s = static_cast<double>(m.seq_length);
  const double L = static_cast<double>(m.num_layers);
  const double h = static_cast<double>(m.hidden_size);
  const double q = static_cast<double>(m.query_width());
  const double kv = static_cast<double>(m.kv_width());
  const double f = static_cast<double>(m.ffn());
  const double V = static_cast<double>(m.padded_vocab(tp));
  const double phi = m.gated_linear_unit ? 3.0 : 2.0;
  return 6 * B * s * (L * (h * (q + 2 * kv) + q * h) + L * h * f * phi + h * V) +
         6 * B * s * s * q * L;
}

}  // namespace scalescope::workload
