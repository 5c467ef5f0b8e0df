#include "workload/accounting.hpp"
#include "workload/moe.hpp"

#include <gtest/gtest.h>

#include <array>

#include <cmath>

namespace scalescope::workload {
namespace {

ModelSpec llama3_8b() {
  ModelSpec m;
  m.num_layers = 32;
  m.hidden_size = 4096;
  m.ffn_hidden_size = 14336;
  m.num_attention_heads = 32;
  m.num_query_groups = 8;
  m.vocab_size = 128256;
  m.seq_length = 8192;
  m.gated_linear_unit = true;
  m.untie_embeddings = true;
  m.add_bias_linear = false;
  return m;
}

ModelSpec llama3_70b() {
  ModelSpec m = llama3_8b();
  m.num_layers = 80;
  m.hidden_size = 8192;
  m.ffn_hidden_size = 28672;
  m.num_attention_heads = 64;
  return m;
}

/// GPT-style layer as Korthikanti et al. analyse it: MHA, f = 4h, GELU, dropout 0.1.
ModelSpec gpt_like() {
  ModelSpec m;
  m.num_layers = 8;
  m.hidden_size = 2048;
  m.num_attention_heads = 16;
  m.vocab_size = 50257;
  m.seq_length = 2048;
  m.hidden_dropout = 0.1;
  m.attention_dropout = 0.1;
  return m;
}

TEST(Accounting, Llama3ParameterCountsMatchPublished) {
  // Published: Llama-3-8B has 8.03 B parameters, Llama-3-70B 70.6 B (Meta model cards).
  // 8B by hand: embedding and untied output 2·128256·4096 = 1.0507e9; per layer
  // 4096·(4096 + 2·1024) + 4096² + 3·4096·14336 + 2·4096 = 218.11e6, × 32 = 6.9795e9; + norm 4096
  // → 8.030e9.
  EXPECT_NEAR(total_parameters(llama3_8b()) / 8.03e9, 1.0, 0.005);
  EXPECT_NEAR(total_parameters(llama3_70b()) / 70.6e9, 1.0, 0.005);
}

TEST(Accounting, ActivationsWithoutRecomputationMatchKorthikanti) {
  // Korthikanti et al. 2022 eq. (1): s·b·h·(34 + 5·a·s/h) bytes per layer, no parallelism.
  ModelSpec m = gpt_like();
  ParallelPlan p;
  p.data_parallel_size = 1;
  TrainingSpec t;
  t.micro_batch_size = 2;
  t.attention = AttentionBackend::Unfused;
  const double s = 2048, b = 2, h = 2048, a = 16;
  EXPECT_EQ(activation_bytes_per_layer(m, p, t),
            static_cast<std::int64_t>(s * b * h * (34 + 5 * a * s / h)));
}

TEST(Accounting, ActivationsWithTpSpSelectiveMatchKorthikanti) {
  // Korthikanti et al. 2022 Table 2: TP + SP + selective recomputation keeps 34·s·b·h/t.
  ModelSpec m = gpt_like();
  ParallelPlan p;
  p.tensor_model_parallel_size = 8;
  p.data_parallel_size = 1;
  p.sequence_parallel = true;
  p.recompute = Recompute::Selective;
  TrainingSpec t;
  t.micro_batch_size = 1;
  for (auto backend : {AttentionBackend::Unfused, AttentionBackend::Flash}) {
    t.attention = backend;
    EXPECT_EQ(activation_bytes_per_layer(m, p, t), 34LL * 2048 * 1 * 2048 / 8);
  }
  // Recomputing the MLP too (--recompute-modules core_attn mlp) drops the FC1 input (2·s·b·h),
  // FC1's output (2·s·b·4h) and the GELU's (2·s·b·4h): 34 − 18 = 16·s·b·h/t.
  p.recompute_modules = kRecomputeCoreAttn | kRecomputeMlp;
  EXPECT_EQ(activation_bytes_per_layer(m, p, t), 16LL * 2048 * 1 * 2048 / 8);
  p.recompute_modules = kRecomputeCoreAttn;
  // TP without SP, selective: s·b·h·(10 + 24/t).
  p.sequence_parallel = false;
  EXPECT_EQ(activation_bytes_per_layer(m, p, t), 2048LL * 2048 * (10 + 24 / 8));
  // Full recomputation keeps only the layer input, 2·s·b·h.
  p.recompute = Recompute::Full;
  EXPECT_EQ(activation_bytes_per_layer(m, p, t), 2LL * 2048 * 2048);
  // With SP the saved layer input is the rank's sequence shard: 2·s·b·h/t.
  p.sequence_parallel = true;
  EXPECT_EQ(activation_bytes_per_layer(m, p, t), 2LL * 2048 * 2048 / 8);
  // Context parallelism: every term is per token, and a rank holds s/c of them; TP + SP +
  // selective with c = 4 keeps 34·(s/c)·b·h/t.
  p.recompute = Recompute::Selective;
  p.context_parallel_size = 4;
  EXPECT_EQ(activation_bytes_per_layer(m, p, t), 34LL * 512 * 1 * 2048 / 8);
}

/// TP 4 · PP 4 · DP 8 with the distributed optimizer (Llama 3 8B's static-memory checks).
ParallelPlan tp4_pp4_dp8_distributed() {
  ParallelPlan p;
  p.tensor_model_parallel_size = 4;
  p.pipeline_model_parallel_size = 4;
  p.data_parallel_size = 8;
  p.use_distributed_optimizer = true;
  return p;
}

TEST(Accounting, DistributedOptimizerStaticMemory) {
  // Derivation: bf16 weights 2 B + fp32 main grads 4 B + (fp32 master, Adam m, v) 12 B sharded
  // over DP → (2 + 4 + 12/DP) bytes per parameter held by the rank; without the distributed
  // optimizer 18 B. The rank holds its TP shard of its stage's layers, so summed over TP ranks
  // and stages it is the model's parameters plus the TP-replicated norms and the padded vocab.
  ModelSpec m = llama3_8b();
  ParallelPlan p = tp4_pp4_dp8_distributed();
  double sum = 0;
  for (std::int64_t stage = 0; stage < 4; ++stage) {
    const double n = parameters_on_rank(m, p, stage);
    EXPECT_EQ(static_memory_bytes(m, p, stage),
              static_cast<std::int64_t>(std::ceil(n * (2 + 4 + 12.0 / 8))));
    sum += n * 4;
  }
  // Replicated norms: 2 per layer + final, (t − 1) extra copies of h each; padded vocab
  // 128256 → 128512 (multiple of 128·4) on both embedding and output layer.
  const double extra = 3.0 * (2 * 32 + 1) * 4096 + 2.0 * (128512 - 128256) * 4096;
  EXPECT_DOUBLE_EQ(sum, total_parameters(m) + extra);
  p.use_distributed_optimizer = false;
  EXPECT_EQ(static_memory_bytes(m, p, 1),
            static_cast<std::int64_t>(std::ceil(parameters_on_rank(m, p, 1) * 18)));
}

TEST(Accounting, GradientPrecisionAndFp8WeightCopies) {
  // Distributed optimizer, bytes per parameter (MODELING §3.2, Megatron dist_optimizer.md):
  // bf16 weight 2 + main grad 4 (fp32, grad_reduce_in_fp32) or 2 (bf16) + fp32 master, m, v
  // 12/DP: 6 + 12/DP and 4 + 12/DP. fp8 (Transformer Engine) adds 2 bytes per linear weight,
  // the cached fp8 copy and its transpose; Llama 3 8B's linear weights per layer are
  // h·(q + 2·kv) + q·h + 3·h·f = 4096·6144 + 4096² + 3·4096·14336 = 218,103,808, /TP.
  ModelSpec m = llama3_8b();
  ParallelPlan p = tp4_pp4_dp8_distributed();
  const double n = parameters_on_rank(m, p, 1);
  EXPECT_EQ(static_memory_bytes(m, p, 1), static_cast<std::int64_t>(std::ceil(n * (6 + 1.5))));
  p.grad_reduce_in_fp32 = false;
  EXPECT_EQ(static_memory_bytes(m, p, 1), static_cast<std::int64_t>(std::ceil(n * (4 + 1.5))));
  // The distributed optimizer shards over DP × CP: 12/(8·2) with CP 2.
  p.grad_reduce_in_fp32 = true;
  p.context_parallel_size = 2;
  EXPECT_EQ(static_memory_bytes(m, p, 1), static_cast<std::int64_t>(std::ceil(n * (6 + 0.75))));
  p.context_parallel_size = 1;
  EXPECT_DOUBLE_EQ(linear_parameters_on_rank(m, p, 1), 218103808.0 / 4 * 8);  // 8 layers
  TrainingSpec t;
  EXPECT_EQ(fp8_weight_copy_bytes(m, p, t, 1), 0);
  t.precision = Precision::Fp16;  // fp16 weights and fp32 main grads: the bf16 byte counts
  EXPECT_EQ(fp8_weight_copy_bytes(m, p, t, 1), 0);
  t.precision = Precision::Fp8;
  EXPECT_EQ(fp8_weight_copy_bytes(m, p, t, 1), 2 * 218103808 / 4 * 8);
  // FSDP (ZeRO-3) over DP 8, TP 1, PP 1: the fp8 copies are sharded like the weights,
  // 2 B · 32 layers · 218,103,808 / 8 per rank (about 1.6 GiB, not the 13 GiB of an
  // unsharded copy).
  ParallelPlan f;
  f.data_parallel_size = 8;
  f.fsdp = true;
  f.zero_stage = 3;
  EXPECT_EQ(fp8_weight_copy_bytes(m, f, t, 0), 2 * 218103808LL * 32 / 8);
}

TEST(Accounting, ZeroStagesBytesPerParameter) {
  // MODELING §3.2 (ZeRO §5, Megatron dist_optimizer.md) with bf16 weights 2 B, fp32 main grads
  // 4 B, fp32 master + Adam m, v 12 B, sharded over D = DP · CP = 8 · 2 = 16:
  //   stage 0 (DDP): 2 + 4 + 12 = 18;  stage 1: 2 + 4 + 12/16 = 6.75;
  //   stage 2: 2 + (4 + 12)/16 = 3;    stage 3: (2 + 4 + 12)/16 = 1.125.
  // With bf16 grads (grad_reduce_in_fp32: false) these are the ZeRO paper's fp16 figures with
  // K = 12: 16, 4 + 12/D = 4.75, 2 + 14/D = 2.875, 16/D = 1.
  ModelSpec m = llama3_8b();
  ParallelPlan p = tp4_pp4_dp8_distributed();
  p.context_parallel_size = 2;
  const double n = parameters_on_rank(m, p, 1);
  const std::array<double, 4> fp32 = {18, 6.75, 3, 1.125}, bf16 = {16, 4.75, 2.875, 1};
  for (std::int64_t stage = 0; stage <= 3; ++stage) {
    p.use_distributed_optimizer = false;
    p.zero_stage = stage;
    for (bool fp32_grads : {true, false}) {
      p.grad_reduce_in_fp32 = fp32_grads;
      const double per_param = (fp32_grads ? fp32 : bf16)[static_cast<std::size_t>(stage)];
      EXPECT_DOUBLE_EQ(weight_bytes_per_parameter(p) + grad_bytes_per_parameter(p) +
                           optimizer_bytes_per_parameter(p),
                       per_param);
      EXPECT_EQ(static_memory_bytes(m, p, 1), static_cast<std::int64_t>(std::ceil(n * per_param)));
    }
  }
  // PyTorch FSDP2 (fsdp: true) keeps the shard in fp32, which is Adam's master too:
  // (4 + 4 + 8)/16 = 1, with bf16 grads (4 + 2 + 8)/16 = 0.875.
  p.zero_stage = 3;
  p.fsdp = true;
  for (bool fp32_grads : {true, false}) {
    p.grad_reduce_in_fp32 = fp32_grads;
    EXPECT_DOUBLE_EQ(weight_bytes_per_parameter(p) + grad_bytes_per_parameter(p) +
                         optimizer_bytes_per_parameter(p),
                     fp32_grads ? 1.0 : 0.875);
  }
  p.fsdp = false;
  // use_distributed_optimizer alone is stage 1.
  p.zero_stage = 0;
  p.use_distributed_optimizer = true;
  EXPECT_EQ(p.zero(), 1);
}

TEST(Accounting, Zero3UnshardedParametersAndGradients) {
  // FSDP keeps the root unit (embedding, final norm, output layer: the rank's parameters less
  // its layers') gathered and two layer units (current + prefetched, limit_all_gathers):
  // 2 · (R + 2 · layer) bytes; without reshard_after_forward all 2 · N. Unsharded gradients:
  // grad bytes · (R + layer) when each micro-batch reduces, grad bytes · N when micro-batches
  // accumulate before the reduce-scatter. Llama 3 8B, TP 1, PP 1, DP 64.
  ModelSpec m = llama3_8b();
  ParallelPlan p;
  p.data_parallel_size = 64;
  p.fsdp = true;
  p.zero_stage = 3;
  TrainingSpec t;
  t.micro_batch_size = 1;
  t.global_batch_size = 64;  // one micro-batch
  const double n = parameters_on_rank(m, p, 0);
  const double layer = layer_parameters_on_rank(m, p);
  const double root = n - 32 * layer;
  // The root is the padded embedding and output layer (128256 → 128256·4096 each) + the norm.
  EXPECT_DOUBLE_EQ(root, 2.0 * 128256 * 4096 + 4096);
  EXPECT_EQ(zero3_unsharded_param_bytes(m, p, 0),
            static_cast<std::int64_t>(std::ceil(2 * (root + 2 * layer))));
  EXPECT_EQ(zero3_unsharded_grad_bytes(m, p, t, 0),
            static_cast<std::int64_t>(std::ceil(4 * (root + layer))));
  t.global_batch_size = 128;  // two micro-batches, each reduced (FSDP2's default): as one
  EXPECT_EQ(zero3_unsharded_grad_bytes(m, p, t, 0),
            static_cast<std::int64_t>(std::ceil(4 * (root + layer))));
  p.fsdp_reduce_every_microbatch = false;  // reduced on the last only: all N accumulate
  EXPECT_EQ(zero3_unsharded_grad_bytes(m, p, t, 0), static_cast<std::int64_t>(std::ceil(4 * n)));
  p.reshard_after_forward = false;
  EXPECT_EQ(zero3_unsharded_param_bytes(m, p, 0), static_cast<std::int64_t>(std::ceil(2 * n)));
  p.zero_stage = 2;
  EXPECT_EQ(zero3_unsharded_param_bytes(m, p, 0), 0);
}

TEST(Accounting, ModelFlopsMatchMegatronFormula) {
  // GPT-3 175B, B = 1536, s = 2048: 6·B·s·[L·(4h²) + L·h·4h·2 + h·V] + 6·B·s²·h·L with
  // V = 51200 (50257 padded to 128·8). Sanity: ≈ 6 · 175e9 parameters · B·s tokens = 3.30e18
  // plus the attention term 6·B·s²·h·L = 4.6e16.
  ModelSpec m;
  m.num_layers = 96;
  m.hidden_size = 12288;
  m.num_attention_heads = 96;
  m.vocab_size = 50257;
  m.seq_length = 2048;
  TrainingSpec t;
  t.global_batch_size = 1536;
  const double B = 1536, s = 2048, L = 96, h = 12288, V = 51200;
  const double expected =
      6 * B * s * (L * 4 * h * h + L * h * 4 * h * 2 + h * V) + 6 * B * s * s * h * L;
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(m, t, 8), expected);
  EXPECT_NEAR(expected / (6 * 175e9 * B * s + 6 * B * s * s * h * L), 1.0, 0.02);
}

}  // namespace
}  // namespace scalescope::workload

namespace scalescope::workload {
namespace {

ModelSpec mixtral_8x7b() {
  ModelSpec m;  // inputs/models/mixtral-8x7b.yaml
  m.num_layers = 32;
  m.hidden_size = 4096;
  m.ffn_hidden_size = 14336;
  m.num_attention_heads = 32;
  m.num_query_groups = 8;
  m.kv_channels = 128;
  m.vocab_size = 32000;
  m.seq_length = 4096;
  m.gated_linear_unit = true;
  m.untie_embeddings = true;
  m.add_bias_linear = false;
  m.num_experts = 8;
  m.moe_router_topk = 2;
  m.moe_ffn_hidden_size = 14336;
  return m;
}

ModelSpec deepseek_v3() {
  ModelSpec m;  // inputs/models/deepseek-v3.yaml
  m.num_layers = 61;
  m.hidden_size = 7168;
  m.ffn_hidden_size = 18432;
  m.num_attention_heads = 128;
  m.num_query_groups = 128;
  m.vocab_size = 129280;
  m.seq_length = 4096;
  m.gated_linear_unit = true;
  m.untie_embeddings = true;
  m.add_bias_linear = false;
  m.num_experts = 256;
  m.moe_router_topk = 8;
  m.moe_ffn_hidden_size = 2048;
  m.moe_shared_expert_intermediate_size = 2048;
  m.moe_layer_pattern.assign(61, 1);
  for (int l = 0; l < 3; ++l) m.moe_layer_pattern[l] = 0;
  m.multi_latent_attention = true;
  m.q_lora_rank = 1536;
  m.kv_lora_rank = 512;
  m.qk_head_dim = 128;
  m.qk_pos_emb_head_dim = 64;
  m.v_head_dim = 128;
  return m;
}

TEST(Accounting, MixtralParameterCountsMatchPublished) {
  // Mistral AI: 46.7 B parameters, 12.9 B active. By hand: attention 4096·(4096 + 2·1024) +
  // 4096² = 41.94 M; one expert 3·4096·14336 = 176.16 M; router 8·4096; norms 2·4096 → a layer
  // 41.94 M + 8·176.16 M + 40 960 = 1451.3 M, × 32 = 46.44 B; embedding and output layer
  // 2·32000·4096 = 262.1 M → 46.70 B. Active: 41.94 M + 2·176.16 M + 40 960 = 394.3 M per layer,
  // × 32 = 12.62 B, + 262.1 M = 12.88 B (Mistral counts the input embedding).
  const ModelSpec m = mixtral_8x7b();
  EXPECT_NEAR(total_parameters(m) / 46.7e9, 1.0, 0.01);
  EXPECT_NEAR(active_parameters(m, true) / 12.9e9, 1.0, 0.01);
  EXPECT_NEAR(total_parameters(m),
              32 * (41943040.0 + 8 * 176160768.0 + 40960) + 2 * 131072000.0 + 4096, 1.0);
}

TEST(Accounting, DeepSeekV3ParameterCountsMatchPublished) {
  // DeepSeek-V3 (arXiv 2412.19437: 671 B total, 37 B activated; README_WEIGHTS.md as corrected
  // by DeepSeek: "Activation parameters: 36.6B (including 0.9B for the output Head)", the input
  // embedding not counted). By hand, MLA per layer: q_down 7168·1536, q_up 1536·128·192,
  // kv_down 7168·576, kv_up 512·128·256, out 128·128·7168, latent norms 1536 + 512 → 187.107 M;
  // an expert 3·7168·2048 = 44.04 M (the dense FFN 3·7168·18432 = 9 experts' worth); router
  // 256·7168. Total: 61·187.107 M + 3·396.36 M + 58·(257·44.04 M + 1.835 M) + 61·2·7168 +
  // 2·129280·7168 + 7168 = 671.03 B. Activated (9 experts per MoE layer): 35.70 B in the layers
  // + the output layer 0.927 B = 36.63 B (with the input embedding too: 37.55 B).
  const ModelSpec m = deepseek_v3();
  EXPECT_NEAR(total_parameters(m) / 671e9, 1.0, 0.01);
  EXPECT_NEAR(active_parameters(m, false) / 36.6e9, 1.0, 0.01);
  const double mla = 7168.0 * 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 + 512.0 * 128 * 256 +
                     128.0 * 128 * 7168 + 1536 + 512;
  const double expert = 3.0 * 7168 * 2048;
  const double expected = 61 * (mla + 2 * 7168.0) + 3 * 9 * expert +
                          58 * (257 * expert + 256 * 7168.0) + 2 * 129280.0 * 7168 + 7168;
  EXPECT_NEAR(total_parameters(m), expected, 1.0);
}

TEST(Accounting, DeepSeekV2LiteHeldOutCounts) {
  // Held out (not used to choose the counting rules): DeepSeek-V2-Lite, published 15.7 B total,
  // 2.4 B activated (arXiv 2405.04434 appendix; config.json: hidden 2048, 27 layers, the first
  // dense with FFN 10944, 64 routed + 2 shared experts of 1408, top-6, 16 heads, MLA without
  // query compression, kv_lora 512, dqk 128 + 64 rotary, dv 128, vocab 102400). By hand: MLA
  // 2048·16·192 + 2048·576 + 512 + 512·16·256 + 16·128·2048 = 13.76 M per layer; an expert
  // 3·2048·1408 = 8.65 M; total 27·13.76 M + 67.24 M + 26·(66·8.65 M + 64·2048) + norms +
  // 2·102400·2048 = 15.71 B; activated with the output layer only 2.45 B (the published 2.4 B
  // has two significant digits: ±2.5 %).
  ModelSpec m = deepseek_v3();
  m.num_layers = 27;
  m.hidden_size = 2048;
  m.ffn_hidden_size = 10944;
  m.num_attention_heads = 16;
  m.num_query_groups = 16;
  m.vocab_size = 102400;
  m.num_experts = 64;
  m.moe_router_topk = 6;
  m.moe_ffn_hidden_size = 1408;
  m.moe_shared_expert_intermediate_size = 2 * 1408;
  m.moe_layer_pattern.assign(27, 1);
  m.moe_layer_pattern[0] = 0;
  m.q_lora_rank = 0;
  EXPECT_NEAR(total_parameters(m) / 15.7e9, 1.0, 0.01);
  EXPECT_NEAR(active_parameters(m, false) / 2.4e9, 1.0, 0.025);
}

TEST(Accounting, MoeModelFlopsCountTheActiveExperts) {
  // Megatron's num_floating_point_operations with MoE: the MLP term uses top-k · the expert
  // width (plus the router); for Mixtral, per token and layer 6·(41.94 M + 2·176.16 M + 32 768)
  // FLOPs, the output layer 6·4096·V, attention 3·s·a·(dqk + dv) = 6·s·q.
  const ModelSpec m = mixtral_8x7b();
  TrainingSpec t;
  t.global_batch_size = 1;
  const double V = 32000;  // already a multiple of 128
  const double per_token =
      6 * (32 * (41943040.0 + 2 * 176160768.0 + 32768) + 4096 * V) + 6.0 * 4096 * 4096 * 32;
  EXPECT_NEAR(model_flops_per_iteration(m, t, 1) / (4096 * per_token), 1.0, 1e-12);
}

TEST(Accounting, ExpertOptimizerStateShardsOverExpertDataParallel) {
  // ZeRO-1 bytes per parameter: dense 2 + 4 + 12/(DP·CP), expert 2 + 4 + 12/EDP with
  // EDP = TP·CP·DP/(ETP·EP) = 1·1·16/(1·8) = 2.
  ModelSpec m = mixtral_8x7b();
  m.num_layers = 4;
  ParallelPlan p;
  p.data_parallel_size = 16;
  p.expert_model_parallel_size = 8;
  p.use_distributed_optimizer = true;
  const RankParameters n = rank_parameters(m, p, 0);
  EXPECT_DOUBLE_EQ(n.expert, 4 * 176160768.0);  // one expert per layer per rank
  EXPECT_EQ(static_memory_bytes(m, p, 0),
            static_cast<std::int64_t>(
                std::ceil(n.total() * 6 + n.dense * 12 / 16.0 + n.expert * 12 / 2.0)));
}

TEST(Accounting, ExpertLoadSharesAreSeededAndSumToOne) {
  const auto flat = expert_load_shares(8, 0.0, 1);
  for (double w : flat) EXPECT_DOUBLE_EQ(w, 1.0 / 8);
  const auto a = expert_load_shares(64, 0.5, 7), b = expert_load_shares(64, 0.5, 7);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, expert_load_shares(64, 0.5, 8));
  double sum = 0;
  for (double w : a) sum += w;
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

}  // namespace
}  // namespace scalescope::workload
