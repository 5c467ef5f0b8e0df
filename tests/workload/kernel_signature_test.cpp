// Kernel signatures of the builder's ops (docs/kernels.md): what each op class maps to, with
// dimensions derived by hand from the layer's shapes.
#include "cost/kernel_signature.hpp"

#include <gtest/gtest.h>

#include <set>

#include "cost/profile.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::workload {
namespace {

struct Job {
  ModelSpec m;
  ParallelPlan p;
  TrainingSpec t;
};

Job llama_like() {
  Job j;  // 2 layers, h 1024, 16 heads of 64, 4 KV groups, SwiGLU f 2816, TP 2 with SP, CP 2
  j.m.num_layers = 2;
  j.m.hidden_size = 1024;
  j.m.ffn_hidden_size = 2816;
  j.m.num_attention_heads = 16;
  j.m.num_query_groups = 4;
  j.m.vocab_size = 32000;
  j.m.seq_length = 2048;
  j.m.gated_linear_unit = true;
  j.m.add_bias_linear = false;
  j.p.tensor_model_parallel_size = 2;
  j.p.sequence_parallel = true;
  j.p.context_parallel_size = 2;
  j.p.data_parallel_size = 1;
  j.t.global_batch_size = 1;
  return j;
}

std::set<std::string> signatures(const graph::SlicedGraph& g) {
  std::set<std::string> out;
  for (const auto& t : g.templates)
    for (const auto& op : t.ops)
      if (const auto s = cost::kernel_signature(op); s.measurable()) out.insert(s.key());
  return out;
}

TEST(KernelSignature, LayerOpsMapToTheirKernels) {
  // T = s·b/CP = 1024 tokens per rank; SP shard T/TP = 512 rows for norms; QKV GEMM
  // [T, (q + 2kv)/t] = [1024, (1024 + 512)/2 = 768], K = h; attention bh = 16/2 = 8 heads,
  // sq = 1024 local queries against sk = 2048 keys (CP), d = dv = 64; SwiGLU [1024, 2816/2];
  // RoPE on (16 + 4)/2 = 10 heads of 64; the loss over V/t = 32000/2 columns.
  const Job j = llama_like();
  const auto sigs = signatures(build_graph(j.m, j.p, j.t));
  for (const char* expected :
       {"gemm:bf16:m=1024:n=768:k=1024", "attention:fwd:bh=8:sq=1024:sk=2048:d=64:dv=64:causal=1",
        "attention:bwd:bh=8:sq=1024:sk=2048:d=64:dv=64:causal=1", "rmsnorm:fwd:rows=512:cols=1024",
        "rmsnorm:bwd:rows=512:cols=1024", "swiglu:fwd:rows=1024:cols=1408",
        "swiglu:bwd:rows=1024:cols=1408", "rope:fwd:rows=1024:heads=10:dim=64",
        "cross_entropy:fwd:rows=1024:vocab=16000", "embedding:fwd:rows=1024:cols=1024:vocab=16000"})
    EXPECT_TRUE(sigs.count(expected)) << expected;
}

TEST(KernelSignature, GroupedExpertGemmRepeatsThePerExpertShapeAndMlaKeepsItsValueDim) {
  Job j = llama_like();
  j.p.context_parallel_size = 1;
  j.m.num_experts = 8;
  j.m.moe_router_topk = 2;
  j.m.moe_ffn_hidden_size = 512;
  j.p.expert_model_parallel_size = 2;
  j.p.data_parallel_size = 2;
  j.t.global_batch_size = 2;
  j.p.expert_tensor_parallel_size = 1;
  j.m.multi_latent_attention = true;
  j.m.q_lora_rank = 256;
  j.m.kv_lora_rank = 128;
  j.m.qk_head_dim = 64;
  j.m.qk_pos_emb_head_dim = 32;
  j.m.v_head_dim = 64;
  j.m.num_query_groups = 16;
  const graph::SlicedGraph g = build_graph(j.m, j.p, j.t);
  bool grouped = false, mla = false;
  for (const auto& op : g.templates[0].ops) {
    const cost::KernelSig s = cost::kernel_signature(op);
    if (op.name == graph::OpName::ExpertFc1Gemm && op.phase == graph::Phase::Forward) {
      // T_l = 2048/2 = 1024 local tokens, k = 2 → 2048 copies over 4 local experts: 512 per
      // expert, 4 GEMMs of [512, 2·512]·… in the group.
      grouped = true;
      EXPECT_EQ(s.key(), "gemm:bf16:m=512:n=1024:k=1024");
      EXPECT_DOUBLE_EQ(s.repeat, 4.0);
    }
    if (op.kind == graph::OpKind::Attention && op.phase == graph::Phase::Forward) {
      mla = true;  // d = 64 + 32, dv = 64, full sequence (no CP)
      EXPECT_EQ(s.key(), "attention:fwd:bh=8:sq=2048:sk=2048:d=96:dv=64:causal=1");
    }
  }
  EXPECT_TRUE(grouped && mla);
}

TEST(KernelSignature, ProfileDurationsScaleByRepeatAndMissRoofline) {
  Job j = llama_like();
  const graph::SlicedGraph g = build_graph(j.m, j.p, j.t);
  cost::Profile p;
  p.entries["gemm:bf16:m=1024:n=768:k=1024"] = {2e-6, 1e-6, 3e-6, 10, "test"};
  int found = 0;
  for (const auto& op : g.templates[0].ops) {
    const auto d = p.duration(op);
    if (cost::kernel_signature(op).key() == "gemm:bf16:m=1024:n=768:k=1024") {
      ASSERT_TRUE(d);
      EXPECT_EQ(*d, 2000);  // 2 µs
      ++found;
    } else {
      EXPECT_FALSE(d);
    }
  }
  EXPECT_GT(found, 0);
}

TEST(KernelSignature, OpsOfSeveralKernelsAndBlockScaledGemmsAreNotMeasured) {
  // A profile measures one kernel per signature: an op standing for several (a Megatron MoE
  // router's top-k and aux loss, Op::kernels) and the block-scaled GEMMs the runner does not time
  // (MXFP8, NVFP4) keep the analytical model rather than take a single kernel's measurement.
  graph::Op copy;
  copy.kind = graph::OpKind::Elementwise;
  copy.mem_bytes = 1 << 20;
  EXPECT_TRUE(cost::kernel_signature(copy).measurable());
  copy.kernels = 6;
  EXPECT_FALSE(cost::kernel_signature(copy).measurable());
  graph::Op g;
  g.kind = graph::OpKind::Gemm;
  g.shape = {1024, 1024, 1024};
  g.flops = 2.0 * 1024 * 1024 * 1024;
  g.gemm_dtype = graph::GemmDtype::Fp8;
  EXPECT_EQ(cost::kernel_signature(g).key(), "gemm:fp8:m=1024:n=1024:k=1024");
  for (const auto d : {graph::GemmDtype::Mxfp8, graph::GemmDtype::Nvfp4}) {
    g.gemm_dtype = d;
    EXPECT_FALSE(cost::kernel_signature(g).measurable());
  }
}

}  // namespace
}  // namespace scalescope::workload
