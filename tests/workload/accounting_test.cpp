#include "workload/accounting.hpp"

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
  t.global_batch_size = 128;  // two micro-batches, reduced on the last only
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
