// The builder's MoE layers (dispatchers, EP overlap, shared experts, expert TP and DP, skewed
// routing) and multi-latent attention.
#include "workload/transformer_builder.hpp"

#include <gtest/gtest.h>

#include <map>

#include <array>
#include <cmath>
#include <set>
#include <tuple>

#include "core/error.hpp"
#include "workload/accounting.hpp"
#include "workload/moe.hpp"

#include "transformer_builder_test_util.hpp"

namespace scalescope::workload {
namespace {

using namespace builder_test;

/// A small Mixtral-like MoE job: 4 layers, 8 experts, top-2, EP over the stage's ranks.
Job moe_job(std::int64_t tp, std::int64_t pp, std::int64_t dp, std::int64_t ep,
            std::int64_t etp = 0) {
  Job s = small(tp, pp, dp);
  s.m.num_experts = 8;
  s.m.moe_router_topk = 2;
  s.m.moe_ffn_hidden_size = 1792;
  s.p.expert_model_parallel_size = ep;
  s.p.expert_tensor_parallel_size = etp;
  s.p.overlap_grad_reduce = false;
  return s;
}

/// DeepSeek-style MLA on small()'s 16 heads: q_lora 384, kv_lora 128, dqk 64 + dpe 32, dv 64.
void with_mla(Job& s) {
  s.m.multi_latent_attention = true;
  s.m.q_lora_rank = 384;
  s.m.kv_lora_rank = 128;
  s.m.qk_head_dim = 64;
  s.m.qk_pos_emb_head_dim = 32;
  s.m.v_head_dim = 64;
  s.m.num_query_groups = 16;
}

std::vector<std::uint32_t> members(const graph::SlicedGraph& g, std::uint32_t rank,
                                   graph::CommRole role) {
  const auto c = static_cast<std::uint32_t>(g.comm_of(rank, role));
  return {g.comms.members_begin(c), g.comms.members_end(c)};
}

TEST(MoeBuilder, SharedExpertOverlapRunsTheSharedMlpBesideTheAllToAlls) {
  // --moe-shared-expert-overlap (Megatron moe_layer.py with shared_experts.py on its own
  // stream): the shared experts' FC1 and activation run while the dispatch all-to-all is in
  // flight, their FC2 while the combine is; without it they run after the routed experts.
  // Program order on layer 1's forward: dispatch, shared FC1, expert FC1, …, combine, shared FC2,
  // unpermute; backward: combine, shared FC2's backward, …, dispatch, shared FC1's, permute.
  Job s = moe_job(1, 1, 2, 2);
  s.m.moe_shared_expert_intermediate_size = 1024;
  s.t.global_batch_size = 2;
  const auto order = [&](bool overlap, graph::Phase phase) {
    s.p.moe_shared_expert_overlap = overlap;
    const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
    std::vector<graph::OpName> names;
    for (const graph::Op& op : g.templates[0].ops)
      if (op.layer == 1 && op.microbatch == 0 && op.phase == phase &&
          (op.name == graph::OpName::EpDispatch || op.name == graph::OpName::EpCombine ||
           op.name == graph::OpName::SharedFc1Gemm || op.name == graph::OpName::SharedFc2Gemm ||
           op.name == graph::OpName::ExpertFc1Gemm || op.name == graph::OpName::MoeUnpermute))
        if (names.empty() || names.back() != op.name) names.push_back(op.name);
    return names;
  };
  using N = graph::OpName;
  EXPECT_EQ(order(true, graph::Phase::Forward),
            (std::vector<N>{N::EpDispatch, N::SharedFc1Gemm, N::ExpertFc1Gemm, N::EpCombine,
                            N::SharedFc2Gemm, N::MoeUnpermute}));
  EXPECT_EQ(order(false, graph::Phase::Forward),
            (std::vector<N>{N::EpDispatch, N::ExpertFc1Gemm, N::EpCombine, N::MoeUnpermute,
                            N::SharedFc1Gemm, N::SharedFc2Gemm}));
  EXPECT_EQ(order(true, graph::Phase::Backward),
            (std::vector<N>{N::MoeUnpermute, N::EpCombine, N::SharedFc2Gemm, N::ExpertFc1Gemm,
                            N::EpDispatch, N::SharedFc1Gemm}));
}

TEST(MoeBuilder, EpOverlapPairsOneMicroBatchsForwardWithAnothersBackward) {
  // --overlap-moe-expert-parallel-comm at PP 1 (Megatron combined_1f1b_schedule_for_no_
  // pipelining): F(0) alone, then F(i + 1) with B(i) layer by layer, then B(7) alone. The
  // program holds the same ops as without, in TransformerLayerSchedulePlan.run's issue order:
  // per pair (forward layer i, backward layer 3 − i) the backward's combine, the forward's
  // attention, the backward's experts, the forward's dispatch, the backward's dispatch, the
  // forward's experts and combine, the backward's attention. The two micro-batches' chains do
  // not depend on each other inside the step.
  Job s = moe_job(1, 1, 4, 4);
  s.p.moe_token_dispatcher_type = MoeDispatcher::Flex;
  using N = graph::OpName;
  using P = graph::Phase;
  const auto ops_of = [&](bool overlap) {
    s.p.moe_a2a_overlap = overlap;
    return build_graph(s.m, s.p, s.t).templates[0];
  };
  const graph::RankProgram plain = ops_of(false), ovl = ops_of(true);
  const auto census = [](const graph::RankProgram& g) {
    std::map<std::tuple<int, int, int, int>, int> n;
    for (const graph::Op& op : g.ops)
      ++n[{static_cast<int>(op.name), static_cast<int>(op.phase), op.layer, op.microbatch}];
    return n;
  };
  EXPECT_EQ(census(plain), census(ovl));
  // The step F(1) + B(0): its interesting ops in program order, consecutive repeats merged.
  std::vector<std::tuple<N, P, int>> seq;
  for (const graph::Op& op : ovl.ops) {
    const bool in_step = (op.phase == P::Forward && op.microbatch == 1) ||
                         (op.phase == P::Backward && op.microbatch == 0);
    if (!in_step || (op.name != N::EpCombine && op.name != N::EpDispatch &&
                     op.name != N::Attention && op.name != N::ExpertFc1Gemm))
      continue;
    const std::tuple<N, P, int> e{op.name, op.phase, op.layer};
    if (seq.empty() || seq.back() != e) seq.push_back(e);
  }
  const std::vector<std::tuple<N, P, int>> pair0 = {
      {N::EpCombine, P::Backward, 3},     {N::Attention, P::Forward, 0},
      {N::ExpertFc1Gemm, P::Backward, 3}, {N::EpDispatch, P::Forward, 0},
      {N::EpDispatch, P::Backward, 3},    {N::ExpertFc1Gemm, P::Forward, 0},
      {N::EpCombine, P::Forward, 0},      {N::Attention, P::Backward, 3},
      {N::EpCombine, P::Backward, 2}};
  ASSERT_GE(seq.size(), pair0.size());
  EXPECT_EQ(std::vector(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(pair0.size())),
            pair0);
  for (std::uint32_t i = 0; i < ovl.size(); ++i) {
    const graph::Op& op = ovl.ops[i];
    for (const std::uint32_t* d = ovl.deps_begin(i); d != ovl.deps_end(i); ++d) {
      const graph::Op& dep = ovl.ops[*d];
      EXPECT_FALSE(op.phase == P::Forward && op.microbatch == 1 && dep.phase == P::Backward &&
                   dep.microbatch == 0)
          << i;
      EXPECT_FALSE(op.phase == P::Backward && op.microbatch == 0 && dep.phase == P::Forward &&
                   dep.microbatch == 1)
          << i;
    }
  }
  // DeepEP's 20 SMs: the GEMMs of paired layers run on the other 112 (F(0) and B(7) alone keep
  // all 132).
  for (const graph::Op& op : ovl.ops) {
    if (op.kind != graph::OpKind::Gemm || op.layer == graph::kNoIndex || op.layer >= 4) continue;
    const bool alone = (op.microbatch == 0 && op.phase == P::Forward) ||
                       (op.microbatch == 7 && op.phase == P::Backward);
    EXPECT_EQ(op.comm_sms, alone ? 0 : 20) << graph::op_name(op.name) << " mb " << op.microbatch;
  }
  // --delay-wgrad-compute: the experts' wgrads leave the chain; the backward's dispatch waits
  // for FC1's dgrad only.
  s.p.delay_wgrad_compute = true;
  const graph::RankProgram d = ops_of(true);
  int dispatches = 0;
  for (std::uint32_t i = 0; i < d.size(); ++i) {
    if (d.ops[i].name != N::EpDispatch || d.ops[i].phase != P::Backward) continue;
    ++dispatches;
    for (const std::uint32_t* x = d.deps_begin(i); x != d.deps_end(i); ++x)
      // FC1's wgrad is [h, 2·f] × [2·f, N/experts] (its n = 2 · 1792), its dgrad's n is h.
      EXPECT_FALSE(d.ops[*x].name == N::ExpertFc1Gemm && d.ops[*x].shape[1] == 2 * 1792u)
          << "the dispatch waits for FC1's wgrad";
  }
  EXPECT_EQ(dispatches, 4 * 8);
  // Without the delay the dispatch waits for the wgrad (chained before it).
  s.p.delay_wgrad_compute = false;
  const graph::RankProgram c = ops_of(true);
  bool waits = false;
  for (std::uint32_t i = 0; i < c.size(); ++i)
    if (c.ops[i].name == N::EpDispatch && c.ops[i].phase == P::Backward)
      for (const std::uint32_t* x = c.deps_begin(i); x != c.deps_end(i); ++x)
        waits |= c.ops[*x].name == N::ExpertFc1Gemm && c.ops[*x].shape[1] == 2 * 1792u;
  EXPECT_TRUE(waits);
}

TEST(MoeBuilder, RecomputeModulesDiscardTheirOutputsAndRunThemAgain) {
  // Megatron's --recompute-modules on an MLA + MoE layer (TP 2 with SP, EP 2, ETP 2; s = 1024,
  // b = 1: T = 1024 tokens, the rank's SP share [512, 1024], 524,288 values):
  //  layernorm: the input norm (MLA's, not fused) and the pre-MLP norm (before the router)
  //    keep their input only: 2 · 2 · 524,288 = 2,097,152 B less;
  //  mla_up_proj: Q [T, a(dqk + dpe)/t] = 2·1024·16·96/2 = 1,572,864 B and K, V
  //    [T, (a(dqk + dpe) + a·dv)/t] = 2·1024·(1536 + 1024)/2 = 2,621,440 B less;
  //  moe_act: the experts' activation output: each EP rank receives 512·2 (top-2) copies from
  //    each of the 2 EP ranks for its 4 experts, ETP 2 gathers them: N = 2048 rows of
  //    f = 1792/2 = 896, 2·2048·896 = 3,670,016 B less.
  // 9,961,472 B in all; each discarded output is made again in the backward (a Recompute op).
  Job s = moe_job(2, 1, 2, 2);
  with_mla(s);
  s.p.recompute = Recompute::Selective;
  const auto run = [&](std::uint8_t modules) {
    s.p.recompute_modules = modules;
    const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
    std::int64_t kept = 0;
    std::set<std::pair<graph::OpName, graph::OpKind>> again;
    for (const graph::Op& op : g.templates[0].ops) {
      if (op.layer != 1 || op.microbatch != 0) continue;
      if (op.phase == graph::Phase::Forward) kept += op.mem_alloc;
      if (op.phase == graph::Phase::Recompute) again.insert({op.name, op.kind});
    }
    activation_peak(g.templates[0]);  // every allocation is freed again
    return std::pair{kept, again};
  };
  const auto [base, base_again] = run(kRecomputeCoreAttn);
  const auto [less, again] =
      run(kRecomputeCoreAttn | kRecomputeLayerNorm | kRecomputeMlaUpProj | kRecomputeMoeAct);
  EXPECT_EQ(base - less, 9961472);
  using N = graph::OpName;
  using K = graph::OpKind;
  EXPECT_EQ(base_again, (std::set<std::pair<N, K>>{{N::Attention, K::Attention}}));
  EXPECT_EQ(again, (std::set<std::pair<N, K>>{{N::Attention, K::Attention},
                                              {N::InputNorm, K::Norm},
                                              {N::PreMlpNorm, K::Norm},
                                              {N::QUpGemm, K::Gemm},
                                              {N::KvUpGemm, K::Gemm},
                                              {N::Rope, K::Elementwise},
                                              {N::TpAllGather, K::AllGather},
                                              {N::ExpertActivation, K::Elementwise}}));
  // The whole MoE block ("moe"): nothing between the pre-MLP norm and the MLP's residual add is
  // kept in the forward; the backward runs it again, all-to-alls included, once per
  // micro-batch (8).
  {
    s.p.recompute_modules = kRecomputeMoe;
    const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
    std::int64_t moe_kept = 0;
    int dispatch_again = 0, experts_again = 0;
    for (const graph::Op& op : g.templates[0].ops) {
      if (op.layer != 1) continue;
      const bool moe_op = op.name == N::Router || op.name == N::RouterTopk ||
                          op.name == N::MoePermute || op.name == N::EpDispatch ||
                          op.name == N::ExpertFc1Gemm || op.name == N::ExpertActivation ||
                          op.name == N::ExpertFc2Gemm || op.name == N::EpCombine ||
                          op.name == N::MoeUnpermute;
      if (moe_op && op.phase == graph::Phase::Forward) moe_kept += op.mem_alloc;
      if (op.phase == graph::Phase::Recompute) {
        dispatch_again += op.name == N::EpDispatch;
        experts_again += op.name == N::ExpertFc1Gemm;
      }
    }
    EXPECT_EQ(moe_kept, 0);
    EXPECT_EQ(dispatch_again, 8);
    EXPECT_EQ(experts_again, 8);
    activation_peak(g.templates[0]);
  }
  // The shared experts ("shared_experts", 1024 wide): their FC1 output and activation are not
  // kept, they run again once per micro-batch.
  {
    s.m.moe_shared_expert_intermediate_size = 1024;
    s.p.recompute_modules = kRecomputeSharedExperts;
    const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
    std::int64_t shared_kept = 0;
    int shared_again = 0;
    for (const graph::Op& op : g.templates[0].ops) {
      if (op.layer != 1) continue;
      if (op.phase == graph::Phase::Forward &&
          (op.name == N::SharedFc1Gemm || op.name == N::Activation))
        shared_kept += op.mem_alloc;
      shared_again += op.phase == graph::Phase::Recompute && op.name == N::SharedFc1Gemm;
    }
    EXPECT_EQ(shared_kept, 0);
    EXPECT_EQ(shared_again, 8);
    activation_peak(g.templates[0]);
  }
  // The dense MLP ("mlp", small() at TP 4): run again whole, FC1 and FC2 once per micro-batch.
  Job d = small(4, 2, 1);
  d.p.recompute = Recompute::Selective;
  d.p.recompute_modules = kRecomputeMlp;
  int fc1 = 0, fc2 = 0, attention = 0;
  const graph::SlicedGraph g = build_graph(d.m, d.p, d.t);
  for (const graph::Op& op : g.templates[0].ops)
    if (op.layer == 0 && op.phase == graph::Phase::Recompute) {
      fc1 += op.name == N::Fc1Gemm;
      fc2 += op.name == N::Fc2Gemm;
      attention += op.name == N::Attention;
    }
  EXPECT_EQ(fc1, 8);
  EXPECT_EQ(fc2, 8);
  EXPECT_EQ(attention, 0);  // core_attn not listed: not recomputed
  activation_peak(g.templates[0]);
}

TEST(MoeBuilder, FlexDispatcherMarksItsAllToAllsWithTheRouting) {
  // The flex dispatcher (DeepEP) keeps the all-to-alls and their bytes; each carries the copies
  // per token (top-2) and the experts (8) for the cost model's per-node count.
  Job s = moe_job(1, 1, 4, 4);
  for (const auto d : {MoeDispatcher::AllToAll, MoeDispatcher::Flex}) {
    s.p.moe_token_dispatcher_type = d;
    const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
    int a2a = 0;
    for (const graph::Op& op : g.templates[0].ops)
      if (op.kind == graph::OpKind::AllToAll) {
        ++a2a;
        const std::array<std::uint32_t, 3> flex{2, 8, 0}, none{};
        EXPECT_EQ(op.shape, (d == MoeDispatcher::Flex ? flex : none));
      }
    EXPECT_EQ(a2a, 4 * 4 * 8);  // 4 per layer and micro-batch, 4 layers, 8 micro-batches
  }
}

TEST(MoeBuilder, AllToAllDispatcherSortsReceivedTokensByLocalExpert) {
  // Megatron's all-to-all dispatcher with more than one local expert sorts the received rows by
  // local expert after the dispatch and back before the combine (sort_chunks_by_idxs), and the
  // backward runs both inverses: 4 passes per layer and micro-batch. A rank receives on average
  // N = T·k rows (balanced router; T = 1024 / TP 2 = 512, k = 2): each pass reads and writes
  // them in bf16, 4·N·h bytes, the dispatch's sort also their fp32 probabilities (+8·N).
  // EP 4 of 8 experts: 2 local experts. EP 8 (one local expert) and DeepEP (flex) do not sort.
  Job s = moe_job(2, 1, 8, 4, 1);
  const double N = 512.0 * 2, h = 1024;
  auto sorts = [&](const graph::SlicedGraph& g) {
    std::vector<double> bytes;
    for (const graph::Op& op : g.templates[0].ops)
      if (op.name == graph::OpName::MoeSortChunks) bytes.push_back(op.mem_bytes);
    return bytes;
  };
  const std::vector<double> b = sorts(build_graph(s.m, s.p, s.t));
  ASSERT_EQ(b.size(), 4u * 4 * 8);  // 4 per layer · 4 layers · 8 micro-batches
  int with_probs = 0;
  for (double x : b) {
    EXPECT_TRUE(x == 4 * N * h || x == 4 * N * h + 8 * N) << x;
    with_probs += x == 4 * N * h + 8 * N;
  }
  EXPECT_EQ(with_probs, 2 * 4 * 8);  // the dispatch's sort and its backward
  s.p.moe_token_dispatcher_type = MoeDispatcher::Flex;
  EXPECT_TRUE(sorts(build_graph(s.m, s.p, s.t)).empty());
  s.p.moe_token_dispatcher_type = MoeDispatcher::AllToAll;
  s.p.expert_model_parallel_size = 8;
  s.p.data_parallel_size = 8;
  EXPECT_TRUE(sorts(build_graph(s.m, s.p, s.t)).empty());
}

TEST(MoeBuilder, AllToAllBytesPerLayerAreTokensTimesTopkTimesHidden) {
  // Each MoE layer moves, per micro-batch and rank, T·k token copies of h bf16 values to the
  // experts and back: the all-to-all's buffer S = T·k·h·2, of which (EP − 1)/EP crosses to
  // other ranks (NCCL alltoall). Forward dispatch + combine and their backward: 4 per layer.
  // T = s·b / TP with sequence parallelism = 1024 / 2.
  Job s = moe_job(2, 1, 8, 4, 1);
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const double T = 1024.0 / 2, k = 2, h = 1024;
  int a2a = 0;
  for (const graph::Op& op : g.templates[0].ops)
    if (op.kind == graph::OpKind::AllToAll) {
      ++a2a;
      EXPECT_EQ(op.role, graph::CommRole::Ep);
      EXPECT_DOUBLE_EQ(op.comm_bytes, T * k * h * 2);
    }
  EXPECT_EQ(a2a, 4 * 4 * 8);  // 4 per layer · 4 layers · 8 micro-batches
  // No expert TP (ETP 1): no expert-TP collectives; TP's own stay.
  for (const graph::Op& op : g.templates[0].ops) EXPECT_NE(op.role, graph::CommRole::Etp);
  // Layout etp-ep-edp inside the stage (16 ranks, TP 2, ETP 1, EP 4, EDP 4): EP groups are
  // consecutive blocks of 4, expert DP strides of 4.
  EXPECT_EQ(members(g, 5, graph::CommRole::Ep), (std::vector<std::uint32_t>{4, 5, 6, 7}));
  EXPECT_EQ(members(g, 5, graph::CommRole::Edp), (std::vector<std::uint32_t>{1, 5, 9, 13}));
  EXPECT_EQ(members(g, 5, graph::CommRole::Tp), (std::vector<std::uint32_t>{4, 5}));
}

TEST(MoeBuilder, ExpertTensorParallelGathersAndScattersTheReceivedTokens) {
  // ETP 2: the T·k copies each rank receives (balanced) are all-gathered over the expert-TP
  // group (S = 2·T·k·h·ETP, the gathered tensor), FC1 runs on them with f/ETP columns.
  Job s = moe_job(2, 1, 4, 2, 2);
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const double T = 512, k = 2, h = 1024, f = 1792;
  bool saw_fc1 = false;
  for (const graph::Op& op : g.templates[0].ops) {
    if (op.name == graph::OpName::EtpAllGather) {
      EXPECT_DOUBLE_EQ(op.comm_bytes, 2 * T * k * h * 2);
    }
    if (op.name == graph::OpName::ExpertFc1Gemm && op.phase == graph::Phase::Forward) {
      saw_fc1 = true;
      // 4 experts per rank (8 / EP 2), 2·T·k·ETP copies in all, SwiGLU: 2·f/ETP columns.
      EXPECT_DOUBLE_EQ(op.flops, 2 * (T * k * 2) * h * (2 * f / 2));
      EXPECT_EQ(op.shape[0], static_cast<std::uint32_t>(T * k * 2 / 4));
    }
  }
  EXPECT_TRUE(saw_fc1);
  EXPECT_EQ(members(g, 0, graph::CommRole::Etp), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(members(g, 0, graph::CommRole::Ep), (std::vector<std::uint32_t>{0, 2}));
}

TEST(MoeBuilder, AllGatherDispatcherGathersOverTheExpertTpTimesEpGroup) {
  // Megatron's MoEAllGatherTokenDispatcher: [T_l, h] of every rank of the ETP × EP group
  // gathered (S = 2·h·T_l·ETP·EP) before the experts, reduce-scattered after; 2 of each per
  // layer and micro-batch (forward and backward), no all-to-all, no separate ETP collectives.
  // TP 2 = ETP 2, EP 2 → groups of 4 consecutive ranks (etp fastest, then ep).
  Job s = moe_job(2, 1, 4, 2, 2);
  s.p.moe_token_dispatcher_type = MoeDispatcher::AllGather;
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const double Tl = 1024.0 / 2, h = 1024;
  int gathers = 0, scatters = 0;
  for (const graph::Op& op : g.templates[0].ops) {
    EXPECT_NE(op.kind, graph::OpKind::AllToAll);
    EXPECT_NE(op.role, graph::CommRole::Etp);
    if (op.role != graph::CommRole::TpEp) continue;
    EXPECT_DOUBLE_EQ(op.comm_bytes, 2 * h * Tl * 2 * 2);
    (op.kind == graph::OpKind::AllGather ? gathers : scatters) += 1;
  }
  EXPECT_EQ(gathers, 2 * 4 * 8);
  EXPECT_EQ(scatters, 2 * 4 * 8);
  EXPECT_EQ(members(g, 5, graph::CommRole::TpEp), (std::vector<std::uint32_t>{4, 5, 6, 7}));
}

TEST(MoeBuilder, ExpertGradientsReduceOverExpertDataParallel) {
  // Dense gradients reduce-scatter over DP (S = 4·dense parameters), expert gradients over
  // expert DP (S = 4·expert parameters), each exactly once per iteration.
  Job s = moe_job(1, 1, 8, 4);
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  double dense = 0, expert = 0;
  for (const graph::Op& op : g.templates[0].ops) {
    if (op.name == graph::OpName::DpReduceScatter) dense += op.comm_bytes;
    if (op.name == graph::OpName::EdpReduceScatter) {
      EXPECT_EQ(op.role, graph::CommRole::Edp);
      expert += op.comm_bytes;
    }
  }
  const RankParameters n = rank_parameters(s.m, s.p, 0);
  EXPECT_DOUBLE_EQ(n.expert, 4 * 2 * 3 * 1024.0 * 1792);  // 2 experts per rank, 4 layers
  EXPECT_DOUBLE_EQ(dense, 4 * n.dense);
  EXPECT_DOUBLE_EQ(expert, 4 * n.expert);
}

TEST(MoeBuilder, SkewedRouterGivesEachEpRankItsOwnProgram) {
  // σ > 0: one template per (stage, EP rank); EP rank r's grouped GEMMs process
  // EP·T·k·Σ_{e ∈ r} w_e token copies, w the seeded shares.
  Job s = moe_job(1, 2, 4, 4);
  s.t.moe_expert_load_skew = 1.0;
  s.t.moe_expert_load_seed = 3;
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  ASSERT_EQ(g.templates.size(), 8u);
  const auto w = expert_load_shares(8, 1.0, 3);
  const double T = 1024, k = 2, h = 1024, f = 1792;
  double busiest = 0;
  for (int r = 0; r < 4; ++r) busiest = std::max(busiest, w[2 * r] + w[2 * r + 1]);
  for (std::uint32_t rank = 0; rank < 8; ++rank) {
    // Stage = rank / 4 (4 ranks per stage), EP rank = rank % 4 (ETP 1): template stage·4 + ep.
    const std::int64_t ep = rank % 4;
    EXPECT_EQ(g.rank_class[rank], rank / 4 * 4 + ep);
    const auto& prog = g.templates[g.rank_class[rank]];
    const double copies = 4 * T * k * (w[2 * ep] + w[2 * ep + 1]);
    for (const graph::Op& op : prog.ops) {
      if (op.name == graph::OpName::ExpertFc1Gemm && op.phase == graph::Phase::Forward) {
        EXPECT_NEAR(op.flops, 2 * copies * h * 2 * f, 1e-6 * op.flops);
      }
      if (op.kind == graph::OpKind::AllToAll) {  // the busiest member sets the exchange
        EXPECT_NEAR(op.comm_bytes, 2 * h * std::max(T * k, 4 * T * k * busiest), 1e-3);
      }
    }
  }
}

TEST(MlaBuilder, ProjectionsAndAttentionFollowTheLatentShapes) {
  // DeepSeek-style MLA with TP 2, SP: down projections on the T/t local tokens, up projections
  // to a·(dqk + dpe)/t and a·(dqk + dv)/t columns, attention FLOPs 2·b·s²·a(dqk + dpe + dv)/t
  // (causal half of 4·…), latents all-gathered (2·T·q_lora and 2·T·(kv_lora + dpe) bytes).
  Job s = small(2, 1, 2);
  with_mla(s);
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const double T = 1024, a = 16, t = 2, h = 1024;
  std::set<double> gathers;
  bool q_up = false, kv_up = false, attn = false, q_down = false;
  for (const graph::Op& op : g.templates[0].ops) {
    if (op.phase != graph::Phase::Forward || op.layer != 1 || op.microbatch != 0) continue;
    if (op.name == graph::OpName::QDownGemm) {
      q_down = true;
      EXPECT_EQ(op.shape, (std::array<std::uint32_t, 3>{512, 384, 1024}));
    }
    if (op.name == graph::OpName::QUpGemm) {
      q_up = true;
      EXPECT_EQ(op.shape, (std::array<std::uint32_t, 3>{1024, 16 * 96 / 2, 384}));
    }
    if (op.name == graph::OpName::KvUpGemm) {
      kv_up = true;
      EXPECT_EQ(op.shape, (std::array<std::uint32_t, 3>{1024, 16 * 128 / 2, 128}));
    }
    if (op.kind == graph::OpKind::Attention) {
      attn = true;
      EXPECT_DOUBLE_EQ(op.flops, 0.5 * 2 * T * T * a * (96 + 64) / t);
    }
    if (op.name == graph::OpName::TpAllGather) gathers.insert(op.comm_bytes);
  }
  EXPECT_TRUE(q_down && q_up && kv_up && attn);
  EXPECT_TRUE(gathers.count(2 * T * 384) && gathers.count(2 * T * (128 + 32)) &&
              gathers.count(2 * T * h));
}

}  // namespace
}  // namespace scalescope::workload
