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

/// One layer's parameters by part, whole (not sharded).
struct LayerParts {
  double attn_w = 0;        ///< TP-split attention projection weights
  double attn_rep_w = 0;    ///< MLA's down projections (TP-duplicated)
  double latent_norms = 0;  ///< MLA's RMSNorms on the latents (TP-duplicated)
  double mlp_w = 0;         ///< dense MLP or shared experts, TP-split
  double router = 0;        ///< MoE router [E, h], replicated over TP
  double expert_w = 0;      ///< one routed expert's weights
  double expert_b = 0;      ///< one routed expert's biases
  double col_bias = 0;      ///< column-parallel biases (split over TP)
  double row_bias = 0;      ///< row-parallel biases (replicated over TP)
  double norms = 0;         ///< the two layer norms
  double mtp_proj = 0;      ///< an MTP module's [2h → h] projection (column-parallel, TP-split)
};

LayerParts layer_parts(const ModelSpec& m, std::int64_t layer) {
  LayerParts x;
  const double h = static_cast<double>(m.hidden_size);
  const double bias = m.add_bias_linear ? 1.0 : 0.0;
  if (m.multi_latent_attention) {
    // megatron/core/transformer/multi_latent_attention.py: duplicated down projections
    // h → q_lora and h → kv_lora + rope dim with RMSNorms on the latents; column-parallel up
    // projections to a·(dqk + dpe) and a·(dqk + dv); row-parallel output a·dv → h.
    const double a = static_cast<double>(m.num_attention_heads);
    const double ql = static_cast<double>(m.q_lora_rank);
    const double kvl = static_cast<double>(m.kv_lora_rank);
    const double dpe = static_cast<double>(m.qk_pos_emb_head_dim);
    const double qk = static_cast<double>(m.qk_dim());
    const double dv = static_cast<double>(m.v_dim());
    x.attn_rep_w = h * (kvl + dpe);
    x.latent_norms = kvl;
    if (m.q_lora_rank > 0) {
      x.attn_rep_w += h * ql;
      x.latent_norms += ql;
      x.attn_w = ql * a * qk;
    } else {
      x.attn_w = h * a * qk;
    }
    x.attn_w += kvl * a * (static_cast<double>(m.qk_head_dim) + dv) + a * dv * h;
  } else {
    const double q = static_cast<double>(m.query_width());
    const double kv = static_cast<double>(m.kv_width());
    x.attn_w = h * (q + 2 * kv) + q * h;
    x.col_bias += (m.add_qkv_bias ? 1.0 : bias) * (q + 2 * kv);
  }
  x.row_bias += bias * h;  // out-projection
  const auto mlp = [&](double f) { return h * f * glu(m) + f * h; };
  if (m.is_moe_layer(layer)) {
    const double e = static_cast<double>(m.expert_ffn());
    x.router = static_cast<double>(m.num_experts) * h;
    x.expert_w = mlp(e);
    x.expert_b = bias * (e * glu(m) + h);
    if (const double fs = static_cast<double>(m.moe_shared_expert_intermediate_size); fs > 0) {
      x.mlp_w = mlp(fs);
      x.col_bias += bias * fs * glu(m);
      x.row_bias += bias * h;
    }
  } else {
    const double f = static_cast<double>(m.ffn());
    x.mlp_w = mlp(f);
    x.col_bias += bias * f * glu(m);
    x.row_bias += bias * h;
  }
  x.norms = 2 * norm_params(m);
  // Query and key norms: one head_dim weight each (and bias for LayerNorm), shared by the heads.
  // (With MLA, Megatron's qk_layernorm is the latent norms, counted above.)
  if (m.qk_layernorm && !m.multi_latent_attention)
    x.norms += 2 * static_cast<double>(m.head_dim()) * (m.add_bias_linear ? 2.0 : 1.0);
  // An MTP module around its layer: enorm, hnorm and its final norm, eh_proj without a bias
  // (multi_token_prediction.py MultiTokenPredictionLayer).
  if (m.is_mtp_layer(layer)) {
    x.mtp_proj = 2 * h * h;
    x.norms += 3 * norm_params(m);
  }
  return x;
}

/// Everything of a layer but its routed experts.
double layer_dense_common(const LayerParts& x) {
  return x.attn_w + x.attn_rep_w + x.latent_norms + x.mlp_w + x.router + x.col_bias + x.row_bias +
         x.norms + x.mtp_proj;
}
}  // namespace

double layer_parameters(const ModelSpec& m, std::int64_t layer) {
  const LayerParts x = layer_parts(m, layer);
  return layer_dense_common(x) + static_cast<double>(m.num_experts) * (x.expert_w + x.expert_b);
}

double layer_active_parameters(const ModelSpec& m, std::int64_t layer) {
  const LayerParts x = layer_parts(m, layer);
  return layer_dense_common(x) +
         (m.is_moe_layer(layer) ? static_cast<double>(m.moe_router_topk) : 0.0) *
             (x.expert_w + x.expert_b);
}

double position_parameters(const ModelSpec& m) {
  if (m.position_embedding_type != PositionEmbedding::LearnedAbsolute) return 0;
  return static_cast<double>(m.seq_length) * static_cast<double>(m.hidden_size);
}

double total_parameters(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden_size);
  const double v = static_cast<double>(m.vocab_size);
  double layers = 0;
  for (std::int64_t l = 0; l < m.num_layers; ++l) layers += layer_parameters(m, l);
  return layers + norm_params(m) + v * h * (m.untie_embeddings ? 2.0 : 1.0) +
         position_parameters(m);
}

double active_parameters(const ModelSpec& m, bool with_input_embedding) {
  const double h = static_cast<double>(m.hidden_size);
  const double v = static_cast<double>(m.vocab_size);
  double layers = 0;
  for (std::int64_t l = 0; l < m.num_layers; ++l) layers += layer_active_parameters(m, l);
  // The output layer is a GEMM every token goes through; the input embedding is a row lookup.
  return layers + norm_params(m) + v * h + (with_input_embedding ? v * h : 0.0) +
         (with_input_embedding ? position_parameters(m) : 0.0);
}

double tp_replicated_parameters(const ModelSpec& m, std::int64_t layer) {
  const LayerParts x = layer_parts(m, layer);
  return x.norms + x.latent_norms + x.attn_rep_w + x.router;
}

RankParameters layer_parameters_on_rank(const ModelSpec& m, const ParallelPlan& p,
                                        std::int64_t layer) {
  const double t = static_cast<double>(p.tp());
  const LayerParts x = layer_parts(m, layer);
  // Column-parallel QKV and FC1 and row-parallel out-proj and FC2 weights are split over TP;
  // column-parallel biases are split, row-parallel biases and norms are replicated
  // (megatron/core/tensor_parallel/layers.py). Routed experts: E/EP per rank, each split over
  // ETP (megatron/core/transformer/moe/experts.py TEGroupedMLP).
  RankParameters r;
  r.dense = (x.attn_w + x.mlp_w + x.col_bias + x.mtp_proj) / t + x.attn_rep_w + x.latent_norms +
            x.router + x.row_bias + x.norms;
  if (m.is_moe_layer(layer)) {
    const double local = static_cast<double>(m.num_experts / p.ep());
    r.expert = local * (x.expert_w + x.expert_b) / static_cast<double>(p.etp());
  }
  return r;
}

double layer_parameters_on_rank(const ModelSpec& m, const ParallelPlan& p) {
  return layer_parameters_on_rank(m, p, 0).total();
}

double last_stage_vocab_tables(const ModelSpec& m, const ParallelPlan& p) {
  // The output layer's own weight when untied; with PP > 1 a copy of the embedding for a tied
  // output layer (megatron/core/models/common/language_module) or for MTP's embedding lookups
  // (GPTModel builds the embedding where pre_process or mtp_process).
  return (m.untie_embeddings ? 1.0 : 0.0) +
         (p.pp() > 1 && m.embedding_copy_on_last_stage() ? 1.0 : 0.0);
}

std::int64_t layers_in_chunk(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage,
                             std::int64_t chunk) {
  const bool mtp = stage == p.pp() - 1 && chunk == p.vpp() - 1;
  return p.layers_in_chunk(stage, chunk, m.num_layers) + (mtp ? m.mtp_num_layers : 0);
}
std::int64_t layers_on_stage(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  std::int64_t n = 0;
  for (std::int64_t c = 0; c < p.vpp(); ++c) n += layers_in_chunk(m, p, stage, c);
  return n;
}

namespace {
/// Global indices of the transformer layers on pipeline stage `stage`, all chunks: the MTP
/// modules' after the decoder's on the last stage.
template <class F>
void for_each_layer_on_stage(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage, F f) {
  for (std::int64_t c = 0; c < p.vpp(); ++c) {
    const std::int64_t first = p.first_layer_of_chunk(stage, c, m.num_layers);
    const std::int64_t n = layers_in_chunk(m, p, stage, c);
    for (std::int64_t l = first; l < first + n; ++l) f(l);
  }
}
}  // namespace

RankParameters rank_parameters(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  const double t = static_cast<double>(p.tp());
  const double h = static_cast<double>(m.hidden_size);
  RankParameters r;
  for_each_layer_on_stage(m, p, stage, [&](std::int64_t l) {
    const RankParameters x = layer_parameters_on_rank(m, p, l);
    r.dense += x.dense;
    r.expert += x.expert;
  });
  const double vocab_shard = static_cast<double>(m.padded_vocab(p.tp())) * h / t;
  if (stage == 0) r.dense += vocab_shard + position_parameters(m);
  if (stage == p.pp() - 1) {
    r.dense += norm_params(m);
    r.dense += last_stage_vocab_tables(m, p) * vocab_shard;
  }
  return r;
}

double parameters_on_rank(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  return rank_parameters(m, p, stage).total();
}

// PyTorch FSDP2 (`fsdp: true`) keeps the sharded parameters in their fp32 dtype and casts them
// to bf16 for the all-gather (MixedPrecisionPolicy param_dtype): the fp32 shard is the weight
// and Adam's master at once, 4 + 8 bytes (m, v) instead of 2 + 12.
double weight_bytes_per_parameter(const ParallelPlan& p) {
  return p.zero() >= 3 ? (p.fsdp ? 4.0 : 2.0) / static_cast<double>(p.zero_shard()) : 2.0;
}
double grad_bytes_per_parameter(const ParallelPlan& p) {
  return p.zero() >= 2 ? p.grad_bytes() / static_cast<double>(p.zero_shard()) : p.grad_bytes();
}
double optimizer_bytes_per_parameter(const ParallelPlan& p) {
  return p.zero() >= 1 ? (p.fsdp ? 8.0 : 12.0) / static_cast<double>(p.zero_shard()) : 12.0;
}

double expert_weight_bytes_per_parameter(const ParallelPlan& p) {
  return p.zero() >= 3 ? (p.fsdp ? 4.0 : 2.0) / static_cast<double>(p.expert_shard()) : 2.0;
}
double expert_grad_bytes_per_parameter(const ParallelPlan& p) {
  return p.zero() >= 2 ? p.grad_bytes() / static_cast<double>(p.expert_shard()) : p.grad_bytes();
}
double expert_optimizer_bytes_per_parameter(const ParallelPlan& p) {
  return p.zero() >= 1 ? (p.fsdp ? 8.0 : 12.0) / static_cast<double>(p.expert_shard()) : 12.0;
}

std::int64_t weight_bytes(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  const RankParameters n = rank_parameters(m, p, stage);
  return static_cast<std::int64_t>(std::ceil(n.dense * weight_bytes_per_parameter(p) +
                                             n.expert * expert_weight_bytes_per_parameter(p)));
}

std::int64_t main_grad_bytes(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  const RankParameters n = rank_parameters(m, p, stage);
  return static_cast<std::int64_t>(std::ceil(n.dense * grad_bytes_per_parameter(p) +
                                             n.expert * expert_grad_bytes_per_parameter(p)));
}

std::int64_t static_memory_bytes(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  const RankParameters n = rank_parameters(m, p, stage);
  // ZeRO shards over the DP × CP group (Megatron's dp-cp group), MODELING §3.2; expert
  // parameters over the expert-data-parallel group.
  return static_cast<std::int64_t>(std::ceil(
      n.dense * (weight_bytes_per_parameter(p) + grad_bytes_per_parameter(p) +
                 optimizer_bytes_per_parameter(p)) +
      n.expert * (expert_weight_bytes_per_parameter(p) + expert_grad_bytes_per_parameter(p) +
                  expert_optimizer_bytes_per_parameter(p))));
}

namespace {
/// The largest layer unit of a rank of `stage` (every layer alike without experts).
double largest_layer_on_stage(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  if (!m.moe()) return layer_parameters_on_rank(m, p);
  double largest = 0;
  for_each_layer_on_stage(m, p, stage, [&](std::int64_t l) {
    largest = std::max(largest, layer_parameters_on_rank(m, p, l).total());
  });
  return largest;
}
}  // namespace

double root_unit_on_stage(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  if (!m.moe())
    return parameters_on_rank(m, p, stage) -
           layer_parameters_on_rank(m, p) * static_cast<double>(layers_on_stage(m, p, stage));
  double root = parameters_on_rank(m, p, stage);
  for_each_layer_on_stage(
      m, p, stage, [&](std::int64_t l) { root -= layer_parameters_on_rank(m, p, l).total(); });
  return root;
}

std::int64_t zero3_unsharded_param_bytes(const ModelSpec& m, const ParallelPlan& p,
                                         std::int64_t stage) {
  if (p.zero() < 3 || p.zero_shard() == 1) return 0;
  if (!p.reshard_after_forward)
    return static_cast<std::int64_t>(std::ceil(2 * parameters_on_rank(m, p, stage)));
  // The root unit stays gathered through the micro-batch; two layer units besides it.
  return static_cast<std::int64_t>(
      std::ceil(2 * (root_unit_on_stage(m, p, stage) + 2 * largest_layer_on_stage(m, p, stage))));
}

std::int64_t zero3_unsharded_grad_bytes(const ModelSpec& m, const ParallelPlan& p,
                                        const TrainingSpec& t, std::int64_t stage) {
  if (p.zero() < 3 || p.zero_shard() == 1) return 0;
  if (t.num_microbatches(p.dp()) > 1 && !p.fsdp_reduce_every_microbatch)
    return static_cast<std::int64_t>(std::ceil(p.grad_bytes() * parameters_on_rank(m, p, stage)));
  // The root's gradients (produced first, in the head's backward, reduced last) and the layer's.
  return static_cast<std::int64_t>(std::ceil(
      p.grad_bytes() * (root_unit_on_stage(m, p, stage) + largest_layer_on_stage(m, p, stage))));
}

namespace {
/// linear_parameters_on_rank split into the dense layers' and the experts'.
RankParameters linear_parameters_by_kind(const ModelSpec& m, const ParallelPlan& p,
                                         std::int64_t stage) {
  RankParameters n;
  for_each_layer_on_stage(m, p, stage, [&](std::int64_t l) {
    const LayerParts x = layer_parts(m, l);
    n.dense += (x.attn_w + x.mlp_w + x.mtp_proj) / static_cast<double>(p.tp()) + x.attn_rep_w;
    if (m.is_moe_layer(l))
      n.expert +=
          static_cast<double>(m.num_experts / p.ep()) * x.expert_w / static_cast<double>(p.etp());
  });
  return n;
}
}  // namespace

double linear_parameters_on_rank(const ModelSpec& m, const ParallelPlan& p, std::int64_t stage) {
  return linear_parameters_by_kind(m, p, stage).total();
}

std::int64_t fp8_weight_copy_bytes(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t,
                                   std::int64_t stage) {
  // A captured model's fp8 is torchao's: no cached copy, the fp8 weight is cast each forward and
  // kept for the backward like an activation (workload::lower_block).
  // With fp8 primary weights the fp8 data and its transpose take the place of the bf16 weight.
  if (!t.quantized() || m.capture || p.fp8_param_gather) return 0;
  // Under ZeRO-3 / FSDP the quantized weights are sharded like the weights they copy and
  // gathered per unit (Megatron-FSDP "shards and all-gathers TransformerEngine-quantized
  // parameters", docs/user-guide/features/megatron_fsdp.md; TE's Float8Tensor.fsdp_pre_all_gather
  // hands FSDP2 its local shard), so a rank keeps 1/shard of the copy.
  // Expert weights shard over the expert-data-parallel group.
  const bool z3 = p.zero() >= 3;
  const RankParameters n = linear_parameters_by_kind(m, p, stage);
  const double sharded = n.dense / (z3 ? static_cast<double>(p.zero_shard()) : 1.0) +
                         n.expert / (z3 ? static_cast<double>(p.expert_shard()) : 1.0);
  return static_cast<std::int64_t>(std::ceil(2 * t.gemm_operand_bytes() * sharded));
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
  // Selective recomputation of the dense MLP ("mlp"): its fused norm's output, FC1's output and
  // the activation's are not kept (only the MLP's input, the pre-MLP norm input above).
  if (p.recomputes(kRecomputeMlp)) {
    replicated -= 2 * sbh;
    sharded -= 2 * s * b * f * glu(m) + 2 * s * b * f;
  }
  if (!p.recomputes(kRecomputeCoreAttn)) {
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
  // F = 6·B·s·[Σ_l A_l + h·V] + 3·B·s²·Σ_l a·(dqk + dv), A_l the layer's active linear weights
  // (attention projections; the dense MLP, or the router, the top-k routed and the shared
  // experts), the causal attention term halved (κ = 6 for dqk = dv = dh: 6·B·s²·q·L), as
  // Megatron's num_floating_point_operations counts MoE and MLA layers (training.py). MTP
  // (D modules): D more layers like the last, their projections 2h² and norms 3h per token
  // (Megatron counts the norms as 3h "FLOPs" too), and D more logits GEMMs.
  const double D = static_cast<double>(m.mtp_num_layers);
  const double B = static_cast<double>(t.global_batch_size);
  const double s = static_cast<double>(m.seq_length);
  const double h = static_cast<double>(m.hidden_size);
  const double V = static_cast<double>(m.padded_vocab(tp));
  double linear = 0;
  for (std::int64_t l = 0; l < m.num_layers + m.mtp_num_layers; ++l) {
    const LayerParts x = layer_parts(m, l);
    linear += x.attn_w + x.attn_rep_w + x.mlp_w + x.router + x.mtp_proj +
              (m.is_mtp_layer(l) ? 3 * h : 0.0) +
              (m.is_moe_layer(l) ? static_cast<double>(m.moe_router_topk) * x.expert_w : 0.0);
  }
  const double attn = static_cast<double>(m.num_layers + m.mtp_num_layers) *
                      static_cast<double>(m.num_attention_heads) *
                      static_cast<double>(m.qk_dim() + m.v_dim());
  return 6 * B * s * (linear + (1 + D) * h * V) + 3 * B * s * s * attn;
}

}  // namespace scalescope::workload
