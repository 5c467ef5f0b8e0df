// The kernels one Megatron MoE layer launches (workload::moe_kernels, Op::kernels), counted by
// hand from Megatron-Core's code at NVIDIA/Megatron-LM@d98e8a6 and Transformer Engine's at
// NVIDIA/TransformerEngine@d0067d0, and the CUDA-graph scopes that fold them into one launch.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>

#include "cost/compute_model.hpp"
#include "transformer_builder_test_util.hpp"
#include "workload/moe.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::workload {
namespace {

using builder_test::Job;
using graph::OpName;
using graph::Phase;

/// One MoE layer of 16 experts, top-2, EP 8 (2 local experts), TP 1, the all-to-all dispatcher,
/// no shared experts, bf16, one micro-batch.
Job one_moe_layer(bool fused) {
  Job s = builder_test::small(1, 1, 8);
  s.m.num_layers = 1;
  s.m.num_experts = 16;
  s.m.moe_router_topk = 2;
  s.m.moe_ffn_hidden_size = 1792;
  s.m.moe_aux_loss_coeff = 1e-3;  // Megatron-Bridge's Qwen3 (qwen3_moe_bridge.py l.57)
  s.p.expert_model_parallel_size = 8;
  s.p.moe_router_fusion = fused;
  s.p.moe_permute_fusion = fused;
  s.t.global_batch_size = 8;
  return s;
}

/// Host launches of layer 0's MoE block in one phase, per op name (cost::host_launches: the
/// kernels the host issues for each op).
std::map<OpName, double> launches(const Job& s, Phase phase) {
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  std::map<OpName, double> n;
  for (const graph::Op& op : g.templates[0].ops) {
    if (op.layer != 0 || op.phase != phase) continue;
    switch (op.name) {
      case OpName::Router:
      case OpName::RouterTopk:
      case OpName::MoePermute:
      case OpName::EpDispatch:
      case OpName::MoeSortChunks:
      case OpName::ExpertFc1Gemm:
      case OpName::ExpertActivation:
      case OpName::ExpertFc2Gemm:
      case OpName::EpCombine:
      case OpName::MoeUnpermute:
        n[op.name] += cost::host_launches(op);
        break;
      default:
        break;
    }
  }
  return n;
}

double total(const std::map<OpName, double>& n) {
  double t = 0;
  for (const auto& [name, k] : n) t += k;
  return t;
}

TEST(MoeKernels, OneFusedLayerForwardLaunchesWhatMegatronsCodeDoes) {
  // Forward, --moe-router-fusion and --moe-permute-fusion, aux loss on, TP = CP = 1:
  //   gating GEMM (router.py gating)                                                      1
  //   fused top-k 1, fused aux-loss scores 1, routing_map.sum(0) 1 (no all-reduce: TP·CP =
  //   1), fused aux loss 1, the tracker's record (/ coeff, +=) 2                          6
  //   preprocess: routing_map.sum(0), input_splits sum, contiguous slice, three sums 6;
  //   the counts' all-gather over TP × EP 1; their D2H copies 4; permutation 1:
  //   make_row_id_map 3 + permute 1 (token_dispatcher.py l.501-622, 921-956)             15
  //   all-to-all of tokens and of probabilities (l.705, 718)                              2
  //   permutation 2: make_chunk_sort_map + sort_chunks_by_map                             2
  //   FC1: one cuBLAS GEMM per local expert (TE GroupedLinear, multi-stream)              2
  //   weighted SwiGLU (one fused kernel)                                                  1
  //   FC2                                                                                 2
  //   unpermutation 2                                                                     2
  //   combine all-to-all (l.864)                                                          1
  //   unpermute (fused), no shared experts                                                1
  //                                                                              total  35
  const auto n = launches(one_moe_layer(true), Phase::Forward);
  EXPECT_EQ(n.at(OpName::Router), 1);
  EXPECT_EQ(n.at(OpName::RouterTopk), 6);
  EXPECT_EQ(n.at(OpName::MoePermute), 15);
  EXPECT_EQ(n.at(OpName::EpDispatch), 2);
  EXPECT_EQ(n.at(OpName::MoeSortChunks), 4);
  EXPECT_EQ(n.at(OpName::ExpertFc1Gemm), 2);
  EXPECT_EQ(n.at(OpName::ExpertActivation), 1);
  EXPECT_EQ(n.at(OpName::ExpertFc2Gemm), 2);
  EXPECT_EQ(n.at(OpName::EpCombine), 1);
  EXPECT_EQ(n.at(OpName::MoeUnpermute), 1);
  EXPECT_EQ(total(n), 35);
}

TEST(MoeKernels, UnfusedRouterAndPermutationLaunchMore) {
  // The same layer without the fusions:
  //   gating GEMM                                                                         1
  //   top-k 8 (topk, softmax, zeros_like + scatter, zeros_like, .int(), scatter, .bool();
  //   moe_utils.py l.883-955), aux-loss scores 6 (l.960-1016), aux loss 7 (l.269-289)    21
  //   preprocess 6 + all-gather 1 + D2H 5 + permutation 1 unfused 6 (l.460-486)          18
  //   tokens and probabilities all-to-all                                                 2
  //   permutation 2: torch.cat of tokens and of probabilities 2, before the combine 1    3
  //   FC1 2, activation 1, FC2 2                                                          5
  //   combine 1; unpermute: zeros + scatter_add 2                                         3
  //                                                                              total  53
  const auto n = launches(one_moe_layer(false), Phase::Forward);
  EXPECT_EQ(n.at(OpName::RouterTopk), 21);
  EXPECT_EQ(n.at(OpName::MoePermute), 18);
  EXPECT_EQ(n.at(OpName::MoeSortChunks), 3);
  EXPECT_EQ(n.at(OpName::MoeUnpermute), 2);
  EXPECT_EQ(total(n), 53);
}

TEST(MoeKernels, FusedLayerBackward) {
  // Backward of the fused layer: unpermute's backward 1; combine's backward 1; the two chunk
  // sorts' backwards 2 + 2; FC2 dgrad and wgrad 2 + 2; the activation's backward 1; FC1 dgrad
  // and wgrad 2 + 2; dispatch's backward (tokens, probabilities) 2; permute's backward 1 (TE's
  // unpermute kernel); the router: fused top-k backward 1, aux scores' and loss's backwards 2,
  // MoEAuxLossAutoScaler's ones_like · scale 2, the gradients' sum 1 = 6; the gating GEMM's
  // dgrad and wgrad 2: 1 + 1 + 4 + 4 + 1 + 4 + 2 + 1 + 6 + 2                        = 26
  const auto n = launches(one_moe_layer(true), Phase::Backward);
  EXPECT_EQ(n.at(OpName::RouterTopk), 6);
  EXPECT_EQ(n.at(OpName::Router), 2);
  EXPECT_EQ(n.at(OpName::MoePermute), 1);
  EXPECT_EQ(total(n), 26);
}

TEST(MoeKernels, ExtraKernelsCostTheGpuTheirOverheadEach) {
  // A memory-bound op of k kernels pays the per-kernel overhead k times: the fused top-k with
  // its aux loss (6 kernels) against the same op as one kernel, at t0 = 2 µs, differ by 5 · 2 µs.
  const cost::GpuSpec& gpu = cost::find_gpu("H100");
  cost::KernelCalibration cal;
  cal.kernel_overhead_us = 2.0;
  graph::Op op;
  op.kind = graph::OpKind::Elementwise;
  op.name = OpName::RouterTopk;
  op.mem_bytes = 1e6;
  const double one = cost::compute_seconds(gpu, cal, op);
  op.kernels = 6;
  EXPECT_NEAR(cost::compute_seconds(gpu, cal, op) - one, 5 * 2e-6, 1e-12);
}

/// Launches of layer 0's ops in `phase` whose names are in `names`, and how many graphs begin
/// among them.
std::pair<double, int> graph_launches(const Job& s, Phase phase, const std::set<OpName>& names) {
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  double launches = 0;
  int graphs = 0;
  for (const graph::Op& op : g.templates[0].ops)
    if (op.layer == 0 && op.phase == phase && names.count(op.name)) {
      launches += cost::host_launches(op);
      graphs += op.cuda_graph == 2 ? 1 : 0;
    }
  return {launches, graphs};
}

TEST(MoeKernels, CudaGraphScopesFollowMegatronsPerLayerCapture) {
  // Megatron's TE graphs are per layer (transformer_layer.py _te_cuda_graph_capture): attention
  // with `attn`, then on an MoE layer with `moe_router` the MLP part up to its early return in
  // capture (moe_utils.py maybe_skip_or_early_return_by_cudagraph): the pre-MLP norm, the router
  // and, with `moe_preprocess`, the permutation. One graph, one launch, forward and backward.
  using N = OpName;
  // (Each layer has two residual adds, after attention and after the MLP; the first belongs to
  // the attention graph, the test counts it below.)
  const std::set<OpName> attention{N::InputNorm, N::QkvGemm, N::Rope, N::Attention, N::OutProjGemm};
  const std::set<OpName> moe_head{N::PreMlpNorm, N::Router, N::RouterTopk, N::MoePermute};
  std::set<OpName> both = attention;
  both.insert(moe_head.begin(), moe_head.end());
  Job s = one_moe_layer(true);
  // moe_router + moe_preprocess: the norm (1), gating GEMM (1), top-k (6) and permute (15): one
  // launch for the 23 kernels; the MoE block's 35 forward launches become 35 − 22 = 13.
  s.p.cuda_graph_scope = kCudaGraphMoeRouter | kCudaGraphMoePreprocess;
  EXPECT_EQ(graph_launches(s, Phase::Forward, moe_head), (std::pair<double, int>{1, 1}));
  EXPECT_EQ(total(launches(s, Phase::Forward)), 13);
  EXPECT_EQ(graph_launches(s, Phase::Forward, attention).second, 0);  // attention stays eager
  // Backward: the same ops, one replay: permute 1, top-k 6, the gating GEMM's dgrad and wgrad 2,
  // the norm 1 → one launch.
  EXPECT_EQ(graph_launches(s, Phase::Backward, moe_head), (std::pair<double, int>{1, 1}));
  // moe_router alone: the permute stays eager (15 launches), the norm, GEMM and top-k one graph.
  s.p.cuda_graph_scope = kCudaGraphMoeRouter;
  EXPECT_EQ(graph_launches(s, Phase::Forward, moe_head), (std::pair<double, int>{1 + 15, 1}));
  // attn alone: the attention part to its residual add.
  s.p.cuda_graph_scope = kCudaGraphAttn;
  EXPECT_EQ(graph_launches(s, Phase::Forward, attention), (std::pair<double, int>{1, 1}));
  EXPECT_EQ(graph_launches(s, Phase::Forward, moe_head).second, 0);
  // All three: attention and the MoE head are one graph.
  s.p.cuda_graph_scope = kCudaGraphAttn | kCudaGraphMoeRouter | kCudaGraphMoePreprocess;
  EXPECT_EQ(graph_launches(s, Phase::Forward, both), (std::pair<double, int>{1, 1}));
  EXPECT_EQ(graph_launches(s, Phase::Backward, both), (std::pair<double, int>{1, 1}));
  // Of the two residual adds, one is inside the graph in each pass, the other eager.
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  for (const Phase phase : {Phase::Forward, Phase::Backward}) {
    int inside = 0, eager = 0;
    for (const graph::Op& op : g.templates[0].ops)
      if (op.layer == 0 && op.phase == phase && op.name == N::BiasDropoutAdd)
        (op.cuda_graph == 1 ? inside : eager) += 1;
    EXPECT_EQ(inside, 1);
    EXPECT_EQ(eager, 1);
  }
}

TEST(MoeKernels, RouterCountsHoldForEveryDispatcher) {
  // The router runs before any dispatcher: with the all-gather dispatcher its fused top-k and
  // aux loss are the same 6 kernels.
  Job s = one_moe_layer(true);
  s.p.moe_token_dispatcher_type = MoeDispatcher::AllGather;
  EXPECT_EQ(launches(s, Phase::Forward).at(OpName::RouterTopk), 6);
}

}  // namespace
}  // namespace scalescope::workload
