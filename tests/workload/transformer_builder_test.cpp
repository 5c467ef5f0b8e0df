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

TEST(TransformerBuilder, OneTemplatePerStageAndMegatronRankOrder) {
  Job s = small(2, 2, 4);
  graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  EXPECT_EQ(g.world_size, 16u);
  ASSERT_EQ(g.templates.size(), 2u);
  // Rank = tp + 2·(dp + 4·pp): ranks 0–7 are stage 0, 8–15 stage 1.
  for (std::uint32_t r = 0; r < 16; ++r) EXPECT_EQ(g.rank_class[r], r / 8);
  // Communicators: 8 TP pairs, 4 DP groups (tp × pp), 8 PP pairs, 8 tied-embedding pairs.
  EXPECT_EQ(g.comms.size(), 8u + 4u + 8u + 8u);
  // Rank 5 = (tp 1, dp 2, pp 0): its TP group is {4, 5}, DP group {1, 3, 5, 7}, next stage 13.
  auto tp = static_cast<std::uint32_t>(g.comm_of(5, graph::CommRole::Tp));
  EXPECT_EQ(std::vector<std::uint32_t>(g.comms.members_begin(tp), g.comms.members_end(tp)),
            (std::vector<std::uint32_t>{4, 5}));
  auto dp = static_cast<std::uint32_t>(g.comm_of(5, graph::CommRole::Dp));
  EXPECT_EQ(std::vector<std::uint32_t>(g.comms.members_begin(dp), g.comms.members_end(dp)),
            (std::vector<std::uint32_t>{1, 3, 5, 7}));
  auto pp = static_cast<std::uint32_t>(g.comm_of(5, graph::CommRole::PpNext));
  EXPECT_EQ(std::vector<std::uint32_t>(g.comms.members_begin(pp), g.comms.members_end(pp)),
            (std::vector<std::uint32_t>{5, 13}));
  EXPECT_EQ(g.comm_of(5, graph::CommRole::PpPrev), graph::kNoComm);
}

TEST(TransformerBuilder, ForwardAllocationsOfALayerEqualTheClosedForm) {
  using Case = std::pair<Recompute, std::uint8_t>;
  for (auto [recompute, modules] :
       {Case{Recompute::None, kRecomputeCoreAttn}, Case{Recompute::Selective, kRecomputeCoreAttn},
        Case{Recompute::Selective, kRecomputeCoreAttn | kRecomputeMlp},
        Case{Recompute::Selective, kRecomputeMlp}}) {
    Job s = small(4, 2, 1);
    s.p.recompute = recompute;
    s.p.recompute_modules = modules;
    graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
    std::int64_t sum = 0;
    for (const graph::Op& op : g.templates[0].ops)
      if (op.layer == 0 && op.microbatch == 0 && op.phase == graph::Phase::Forward)
        sum += op.mem_alloc;
    EXPECT_EQ(sum, activation_bytes_per_layer(s.m, s.p, s.t));
  }
}

TEST(TransformerBuilder, OneFOneBStageZeroHoldsPipelineDepthMicrobatches) {
  // Rank r of a 1F1B pipeline holds min(p − r, m) micro-batches of activations (MODELING §2.1),
  // so stage 0's peak is at least static + p · (L/p) · per-layer activations.
  Job s = small(1, 4, 1);
  s.m.num_layers = 8;
  graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const std::int64_t peak = activation_peak(g.templates[0]);
  const std::int64_t layer = activation_bytes_per_layer(s.m, s.p, s.t);
  const std::int64_t held = peak - g.templates[0].static_memory;
  EXPECT_GE(held, 4 * 2 * layer);
  EXPECT_LT(held, 5 * 2 * layer);  // not a fifth micro-batch
}

TEST(TransformerBuilder, InterleavedStageZeroHoldsKorthikantisFactor) {
  // Interleaved 1F1B, p = 4, v = 2, L = 16 (2 layers per chunk), m = 8, G = p: rank 0 runs
  // w = 2·(p − 1) + (v − 1)·G = 10 warm-up forwards and holds w + 1 = 11 chunk-micro-batches at
  // its peak, i.e. 22 layer-micro-batches = L·(1 + (p − 1)/(p·v)) = 16·(1 + 3/8) (Korthikanti
  // et al. 2022 §4.2.3; MODELING §2.2), against L = 16 without interleaving.
  Job s = small(1, 4, 1);
  s.m.num_layers = 16;
  s.p.virtual_pipeline_model_parallel_size = 2;
  graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const std::int64_t peak = activation_peak(g.templates[0]);
  const std::int64_t layer = activation_bytes_per_layer(s.m, s.p, s.t);
  const std::int64_t held = peak - g.templates[0].static_memory;
  EXPECT_GE(held, 22 * layer);
  EXPECT_LT(held, 23 * layer);  // the embedding's token ids and masks are far below a layer
}

TEST(TransformerBuilder, InterleavedGraphsValidate) {
  // Every rank's sends match its neighbour's receives (graph::validate), wrap-around included,
  // with and without overlapped transfers, uneven or accounted end stages.
  for (std::int64_t pp : {2, 4})
    for (std::int64_t v : {2, 4})
      for (bool overlap : {false, true})
        for (int ends = 0; ends < 3; ++ends) {
          Job s = small(2, pp, 2);
          s.m.num_layers = 4 * pp * v;
          s.p.virtual_pipeline_model_parallel_size = v;
          s.p.overlap_p2p_comm = overlap;
          s.p.overlap_param_gather = overlap;
          if (ends == 1) {
            s.p.account_for_embedding_in_pipeline_split = true;
            s.p.account_for_loss_in_pipeline_split = true;
            s.m.num_layers -= 2;
          }
          if (ends == 2) {  // 2 chunks of 1 layer on each end stage, the rest even
            s.p.decoder_first_pipeline_num_layers = v;
            s.p.decoder_last_pipeline_num_layers = v;
            s.m.num_layers = 2 * v + (pp - 2) * 4 * v;
          }
          SCOPED_TRACE(::testing::Message() << "pp " << pp << " v " << v << " ends " << ends);
          graph::SlicedGraph g;
          ASSERT_NO_THROW(g = build_graph(s.m, s.p, s.t));
          std::int64_t layers = 0;
          for (const auto& t : g.templates) {
            std::set<std::uint16_t> seen;
            for (const graph::Op& op : t.ops)
              if (op.kind == graph::OpKind::Gemm && op.layer != graph::kNoIndex)
                seen.insert(op.layer);
            layers += static_cast<std::int64_t>(seen.size());
          }
          EXPECT_EQ(layers, s.m.num_layers);  // every layer is built exactly once
        }
}

TEST(TransformerBuilder, PrecisionSetsGemmDtypeAndGradientBytes) {
  // Stage 0 of PP 2 with DP 2: the DP gradient reductions carry grad_bytes per parameter of the
  // rank (4 in fp32, 2 with grad_reduce_in_fp32 = false); fp8 runs the four linear GEMMs of
  // every layer in fp8 (forward, dgrad, wgrad: 12 per layer and micro-batch) and keeps the
  // logits GEMM in bf16.
  for (bool fp32 : {true, false}) {
    Job s = small(2, 2, 2);
    s.p.grad_reduce_in_fp32 = fp32;
    graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
    double reduced = 0;
    for (const graph::Op& op : g.templates[0].ops)
      if (op.name == graph::OpName::DpReduceScatter) reduced += op.comm_bytes;
    EXPECT_DOUBLE_EQ(reduced, (fp32 ? 4 : 2) * parameters_on_rank(s.m, s.p, 0));
  }
  Job s = small(2, 2, 1);
  s.t.precision = Precision::Fp8;
  graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const auto m = static_cast<int>(s.t.num_microbatches(1));
  int fp8 = 0, logits_bf16 = 0;
  for (const graph::Op& op : g.templates[1].ops) {
    if (op.kind != graph::OpKind::Gemm) continue;
    if (op.gemm_dtype == graph::GemmDtype::Fp8) ++fp8;
    if (op.name == graph::OpName::LogitsGemm && op.gemm_dtype == graph::GemmDtype::Bf16)
      ++logits_bf16;
  }
  EXPECT_EQ(fp8, 12 * 2 * m);  // 2 layers on stage 1
  EXPECT_EQ(logits_bf16, 3 * m);
  EXPECT_EQ(g.templates[1].static_memory,
            static_memory_bytes(s.m, s.p, 1) + fp8_weight_copy_bytes(s.m, s.p, s.t, 1));
}

TEST(TransformerBuilder, DpBucketsSplitInsideLayersAsTheParamAndGradBuffer) {
  // Megatron-Core's param-and-grad buffer takes the parameters in backward order and closes a
  // bucket once it holds ddp_bucket_size parameters or more. small(1, 1, 2): h = 1024,
  // f = 3584 SwiGLU, q = 1024, kv = 256, no biases, RMSNorm weights of h. Backward order: final
  // norm 1024; then per layer (last first) FC2 3584·1024 = 3,670,016, FC1 1024·7168 = 7,340,032,
  // pre-MLP norm 1024, out-proj 1,048,576, QKV 1024·1536 = 1,572,864, input norm 1024. With a
  // bucket size of 5,000,000: bucket 1 = 1024 + 3,670,016 + 7,340,032 = 11,011,072 (closes
  // inside layer 3); bucket 2 = 1024 + 1,048,576 + 1,572,864 + 1024 + 3,670,016 = 6,293,504.
  // Each reduce-scatter carries 4 bytes (fp32) per parameter.
  Job s = small(1, 1, 2);
  s.p.ddp_bucket_size = 5'000'000;
  graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  std::vector<double> bytes;
  for (const graph::Op& op : g.templates[0].ops)
    if (op.name == graph::OpName::DpReduceScatter) bytes.push_back(op.comm_bytes);
  ASSERT_GE(bytes.size(), 2u);
  EXPECT_DOUBLE_EQ(bytes[0], 4.0 * 11'011'072);
  EXPECT_DOUBLE_EQ(bytes[1], 4.0 * 6'293'504);
  double total = 0;
  for (double b : bytes) total += b;
  EXPECT_DOUBLE_EQ(total, 4 * parameters_on_rank(s.m, s.p, 0));
}

TEST(TransformerBuilder, ContextParallelAttentionAndGroups) {
  // CP c = 4, TP 2 with SP, s = 1024, b = 1 (small(): h = 1024, 16 heads, 4 query groups of
  // dh 64: q = 1024, kv = 256). Each rank holds s/c = 256 tokens; causal attention with load
  // balancing does 1/c of the work: ½·4·b·s·(s/c)·q/t = ½·4·1024·256·1024/2 FLOPs. Keys and
  // values move in a ring: c − 1 transfers of this rank's block of 2·b·(s/c)·kv/t bf16 values
  // (K and V) = 2·2·256·256/2 = 131,072 bytes, i.e. an all-gather of S = c·block over the CP
  // group (a ring all-gather moves (c − 1)/c·S per rank); the backward adds a reduce-scatter of
  // dK, dV of the same size. Pipeline messages shrink by c: 2·(s/c)·b·h/t bytes. Gradients
  // reduce over DP × CP.
  // Transformer Engine's ring (AttnFuncWithCPAndKVP2P) runs that work as c = 4 kernels (the
  // causal L × L block, then L × L/2 or L/2 × L blocks, L = 256; one op), then c output
  // corrections in bf16 (one op): the first copies the step output (4 B per element of the
  // [256, q/t = 512] output, 131,072 elements), the later ones add (6 B per element on
  // full-query steps, on half the rows for half-query steps: 4.5 B on average over ranks). The
  // backward's steps each add their dq and dK, dV (kv elements: 256 · 2 · kv/t = 65,536): 4 B
  // per element for the first, 4.5 B on average for the others.
  Job s = small(2, 2, 1);
  s.p.context_parallel_size = 4;
  s.t.global_batch_size = 4;  // m = 4 micro-batches
  graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  EXPECT_EQ(g.world_size, 2u * 4 * 2);
  int gathers = 0, scatters = 0, attention_fwd = 0;
  const double out = 256 * 1024 / 2, kv = 256 * 2 * 256 / 2;
  std::map<double, int> forward_merges, backward_merges;  // bytes → count
  for (const graph::Op& op : g.templates[0].ops) {
    if (op.name == graph::OpName::CpKvExchange) {
      EXPECT_EQ(op.role, graph::CommRole::Cp);
      EXPECT_DOUBLE_EQ(op.comm_bytes, 4 * 131072.0);
      (op.kind == graph::OpKind::AllGather ? gathers : scatters)++;
    }
    if (op.kind == graph::OpKind::Attention && op.phase == graph::Phase::Forward) {
      ++attention_fwd;
      EXPECT_DOUBLE_EQ(op.flops, 0.5 * 4 * 1024.0 * 256 * 1024 / 2);
      EXPECT_EQ(op.shape[1], 256u);
    }
    if (op.name == graph::OpName::CpMerge)
      ++(op.phase == graph::Phase::Forward ? forward_merges : backward_merges)[op.mem_bytes];
    if (op.kind == graph::OpKind::SendRecv) {
      EXPECT_DOUBLE_EQ(op.comm_bytes, 2.0 * 256 * 1024 / 2);
    }
  }
  const int passes = 2 * 4;  // 2 layers on stage 0, 4 micro-batches
  EXPECT_EQ(forward_merges, (std::map<double, int>{{4 * out + 3 * 4.5 * out, passes}}));
  EXPECT_EQ(backward_merges,
            (std::map<double, int>{{4 * (out + kv) + 3 * 4.5 * (out + kv), passes}}));
  // One gather per forward, one gather and one reduce-scatter per backward.
  EXPECT_EQ(attention_fwd, 2 * 4);
  EXPECT_EQ(gathers, 2 * 4 * 2);
  EXPECT_EQ(scatters, 2 * 4);
  // Rank 0's communicators: TP {0, 1}, CP {0, 2, 4, 6} (tp-cp-dp-pp order), DP × CP = CP here.
  auto members = [&](graph::CommRole role) {
    const auto c = static_cast<std::uint32_t>(g.comm_of(0, role));
    return std::vector<std::uint32_t>(g.comms.members_begin(c), g.comms.members_end(c));
  };
  EXPECT_EQ(members(graph::CommRole::Tp), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(members(graph::CommRole::Cp), (std::vector<std::uint32_t>{0, 2, 4, 6}));
  EXPECT_EQ(members(graph::CommRole::Dp), (std::vector<std::uint32_t>{0, 2, 4, 6}));
}

TEST(TransformerBuilder, Fp8ParamGatherGathersLinearWeightsInFp8) {
  // --fp8-param-gather (fp8 primary weights): the distributed optimizer's parameter all-gathers
  // move the linear layers' weights in fp8, 1 B instead of 2, the rest (norms, embedding, output
  // layer) in bf16; TE keeps no bf16 copy beside the fp8 data and its transpose, so the 2 B of
  // fp8 copies per linear parameter are no longer added to the static memory.
  Job s = small(1, 1, 2);
  s.p.overlap_param_gather = true;
  s.t.precision = Precision::Fp8;
  const auto gathered = [&](bool fp8) {
    s.p.fp8_param_gather = fp8;
    double bytes = 0;
    const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
    for (const graph::Op& op : g.templates[0].ops)
      if (op.name == graph::OpName::DpAllGather) bytes += op.comm_bytes;
    return bytes;
  };
  const double linear = linear_parameters_on_rank(s.m, s.p, 0);
  EXPECT_GT(linear, 0);
  EXPECT_DOUBLE_EQ(gathered(false) - gathered(true), linear);
  s.p.fp8_param_gather = false;
  EXPECT_EQ(fp8_weight_copy_bytes(s.m, s.p, s.t, 0),
            static_cast<std::int64_t>(std::ceil(2 * linear)));
  s.p.fp8_param_gather = true;
  EXPECT_EQ(fp8_weight_copy_bytes(s.m, s.p, s.t, 0), 0);
}

TEST(TransformerBuilder, Fp8RecipesCastWithTheirOwnPasses) {
  // Transformer Engine's casts of activations and gradients to fp8 per bf16 value (the second
  // micro-batch: the first also casts the weights): delayed scaling reads 2 B and writes 1 B
  // (amax fused); tensorwise (current scaling) reads the tensor once more for its amax, 5 B;
  // blockwise writes an fp32 scale per 128 values, 3 + 4/128 B; mxfp8 (Blackwell) a byte per 32.
  Job s = small(2, 1, 1);
  s.t.global_batch_size = 2;
  s.t.precision = Precision::Fp8;
  const auto cast_bytes = [&](Fp8Recipe recipe) {
    s.t.fp8_recipe = recipe;
    const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
    double bytes = 0;
    for (const graph::Op& op : g.templates[0].ops)
      if (op.name == graph::OpName::Fp8Cast && op.microbatch == 1) bytes += op.mem_bytes;
    return bytes;
  };
  const double delayed = cast_bytes(Fp8Recipe::Delayed);
  EXPECT_GT(delayed, 0);
  EXPECT_DOUBLE_EQ(cast_bytes(Fp8Recipe::Tensorwise) / delayed, 5.0 / 3);
  EXPECT_DOUBLE_EQ(cast_bytes(Fp8Recipe::Blockwise) / delayed, (3 + 4.0 / 128) / 3);
  EXPECT_DOUBLE_EQ(cast_bytes(Fp8Recipe::Mxfp8) / delayed, (3 + 1.0 / 32) / 3);
}

TEST(TransformerBuilder, QkvBiasAndQkNorms) {
  // small() at TP 2 (16 heads of 64, 4 query groups: q = 1024, kv = 256; s = 1024, b = 1):
  // --add-qkv-bias adds q + 2kv = 1536 biases per layer; --qk-layernorm two RMSNorm weights of
  // head_dim, 128. The norms run on the rank's [T, (q + kv)/t] = 1024 · 640 = 655,360 values
  // between the QKV GEMM and the rotary embedding: forward reads and writes them (bf16, 4 B per
  // value) and keeps its input (2 B), backward reads the input and dY and writes dX (6 B).
  Job s = small(2, 1, 1);
  s.t.global_batch_size = 1;
  const double plain = layer_parameters(s.m, 0);
  s.m.add_qkv_bias = true;
  s.m.qk_layernorm = true;
  EXPECT_DOUBLE_EQ(layer_parameters(s.m, 0) - plain, 1536 + 128);
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const double e = 1024.0 * 640;
  std::vector<std::tuple<graph::Phase, double, std::int64_t>> norms;
  for (const graph::Op& op : g.templates[0].ops)
    if (op.layer == 1 && op.name == graph::OpName::QkNorm) {
      EXPECT_EQ(op.kind, graph::OpKind::Norm);
      EXPECT_EQ(op.shape[0], 1024u * 10);  // rows: tokens × the rank's 8 + 2 heads
      EXPECT_EQ(op.shape[1], 64u);
      norms.emplace_back(op.phase, op.mem_bytes, op.mem_alloc);
    }
  EXPECT_EQ(norms, (std::vector<std::tuple<graph::Phase, double, std::int64_t>>{
                       {graph::Phase::Forward, 4 * e, static_cast<std::int64_t>(2 * e)},
                       {graph::Phase::Backward, 6 * e, 0}}));
}

TEST(TransformerBuilder, MultiTokenPredictionOnTheLastStage) {
  // small() at TP 2, PP 2, untied, one MTP module (Megatron's --mtp-num-layers 1): h = 1024,
  // q = 1024, kv = 256, f = 3584 (SwiGLU), RMSNorm, V = 32,000 (a multiple of 128·2).
  // Its layer is a decoder layer: attention h(q + 2kv) + qh = 2,621,440, MLP 3hf = 11,010,048,
  // TP-split: 6,815,744 a rank, two norms 2,048; the module adds eh_proj 2h² / 2 = 1,048,576
  // and three norms 3,072; the last stage keeps a copy of the embedding, 32,000·1024 / 2 =
  // 16,384,000 (multi_token_prediction.py, GPTModel): 24,253,440 more parameters a rank.
  Job s = small(2, 2, 1);
  s.m.untie_embeddings = true;
  const double before_first = parameters_on_rank(s.m, s.p, 0);
  const double before_last = parameters_on_rank(s.m, s.p, 1);
  const double flops_before = model_flops_per_iteration(s.m, s.t, 2);
  s.m.mtp_num_layers = 1;
  EXPECT_DOUBLE_EQ(parameters_on_rank(s.m, s.p, 0), before_first);
  EXPECT_DOUBLE_EQ(parameters_on_rank(s.m, s.p, 1) - before_last, 24253440.0);
  // Megatron's model FLOPs (training.py): one more layer, 2h² + 3h for the module, one more
  // logits GEMM, per token: 6·B·s·(2,621,440 + 11,010,048 + 2,097,152 + 3,072 + 32,768,000)
  // + 3·B·s²·a(dqk + dv) with B = 8, s = 1024, a(dqk + dv) = 16·128.
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(s.m, s.t, 2) - flops_before,
                   6.0 * 8 * 1024 * 48499712 + 3.0 * 8 * 1024 * 1024 * 2048);

  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  ASSERT_EQ(g.templates.size(), 2u);
  // Per micro-batch (8) on the last stage: eh_proj [T, 2h]·[2h, h/t] forward, its dgrad and
  // wgrad; two logits GEMMs each way (the main head and the module's); the module's ops carry
  // layer 4, after the decoder's 0–3.
  std::map<std::pair<graph::OpName, graph::Phase>, int> count;
  for (const graph::Op& op : g.templates[1].ops) {
    ++count[{op.name, op.phase}];
    if (op.name == graph::OpName::MtpProjGemm) {
      EXPECT_EQ(op.layer, 4);
      if (op.phase == graph::Phase::Forward) {
        EXPECT_DOUBLE_EQ(op.flops, 2.0 * 1024 * 512 * 2048);
      }
    }
  }
  const auto f = graph::Phase::Forward, b = graph::Phase::Backward;
  EXPECT_EQ((count[{graph::OpName::MtpProjGemm, f}]), 8);
  EXPECT_EQ((count[{graph::OpName::MtpProjGemm, b}]), 16);
  EXPECT_EQ((count[{graph::OpName::LogitsGemm, f}]), 16);
  EXPECT_EQ((count[{graph::OpName::LogitsGemm, b}]), 32);
  EXPECT_EQ((count[{graph::OpName::CrossEntropy, f}]), 16);
  // The embedding lookups on the last stage: one per micro-batch (the first stage's 8 are
  // elsewhere), and its gradient all-reduced with the first stage's although untied.
  EXPECT_EQ((count[{graph::OpName::Embedding, f}]), 8);
  for (const auto& t : g.templates) {
    int emb_ar = 0;
    for (const graph::Op& op : t.ops) emb_ar += op.name == graph::OpName::EmbAllReduce;
    EXPECT_EQ(emb_ar, 1);
  }
  // Full recomputation: uniform recomputes the module's layer, block does not (Megatron:
  // "recompute_method == 'block' is not supported for MTP yet").
  s.p.recompute = Recompute::Full;
  for (const auto method : {RecomputeMethod::Uniform, RecomputeMethod::Block}) {
    s.p.recompute_method = method;
    s.p.recompute_num_layers = 1;
    int again = 0;
    const graph::SlicedGraph r = build_graph(s.m, s.p, s.t);
    for (const graph::Op& op : r.templates[1].ops)
      again += op.layer == 4 && op.phase == graph::Phase::Recompute;
    EXPECT_EQ(again > 0, method == RecomputeMethod::Uniform);
  }
}

TEST(TransformerBuilder, PipelineLayoutWithAnMtpOnlyLastChunk) {
  // Megatron's layout "Et|tt|t|mL" on PP 2 (VP 2) for 4 layers and one MTP module: virtual
  // stage v = chunk·PP + stage, so stage 0 runs layer 0 (chunk 0) and layer 3 (chunk 1), stage 1
  // layers 1–2 (chunk 0) and, in chunk 1, no decoder layer but the MTP module (layer 4) and the
  // loss.
  Job s = small(1, 2, 1);
  s.m.mtp_num_layers = 1;
  s.p.virtual_pipeline_model_parallel_size = 2;
  s.p.layout_layers = {1, 2, 1, 0};
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  ASSERT_EQ(g.templates.size(), 2u);
  std::array<std::set<int>, 2> layers;
  std::array<int, 2> losses{};
  for (std::size_t k = 0; k < 2; ++k)
    for (const graph::Op& op : g.templates[k].ops) {
      if (op.layer != graph::kNoIndex && op.kind == graph::OpKind::Gemm) layers[k].insert(op.layer);
      losses[k] += op.name == graph::OpName::CrossEntropy && op.phase == graph::Phase::Forward;
    }
  EXPECT_EQ(layers[0], (std::set<int>{0, 3}));
  EXPECT_EQ(layers[1], (std::set<int>{1, 2, 4}));
  EXPECT_EQ(losses[0], 0);
  EXPECT_EQ(losses[1], 2 * 8);  // the main loss and the module's, 8 micro-batches
}

TEST(TransformerBuilder, UlyssesAllToAllsAroundTheAttention) {
  // CP c = 2 with cp_comm_type a2a (Transformer Engine's AttnFuncWithCPAndQKVOA2A), TP 2 with
  // SP, s = 1024, b = 1 (small(): 16 heads of 64, 4 query groups: q = o = 1024, k = v = 256).
  // Each rank holds s/c = 512 tokens; an all-to-all over CP turns its Q, K, V of every head into
  // all 1024 tokens of 16/(2·2) = 4 heads: bf16 bytes 2·512·(1024 + 256 + 256)/2 = 786,432
  // (nccl-tests' size), another brings the output back, 2·512·1024/2 = 524,288; the backward
  // the other way round. The attention is causal over all s for 4 heads:
  // 4·s²·64·4/2 = 536,870,912 FLOPs, at the rate of length 1024; no key/value ring.
  Job s = small(2, 1, 1);
  s.p.context_parallel_size = 2;
  s.p.cp_comm_type = CpCommType::A2a;
  s.t.global_batch_size = 1;
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  std::vector<std::pair<graph::Phase, double>> a2a;
  int attention = 0;
  for (const graph::Op& op : g.templates[0].ops) {
    if (op.layer != 1) continue;
    if (op.role == graph::CommRole::Cp) {
      EXPECT_EQ(op.kind, graph::OpKind::AllToAll);
      a2a.emplace_back(op.phase, op.comm_bytes);
    }
    if (op.kind == graph::OpKind::Attention && op.phase == graph::Phase::Forward) {
      ++attention;
      EXPECT_DOUBLE_EQ(op.flops, 4.0 * 1024 * 1024 * 64 * 4 / 2);
      EXPECT_EQ(op.shape[0], 4u);
      EXPECT_EQ(op.shape[1], 1024u);
    }
  }
  EXPECT_EQ(attention, 1);
  const auto f = graph::Phase::Forward, b = graph::Phase::Backward;
  EXPECT_EQ(a2a, (std::vector<std::pair<graph::Phase, double>>{
                     {f, 786432}, {f, 524288}, {b, 524288}, {b, 786432}}));
}

TEST(TransformerBuilder, RecomputeMethodsCheckpointTheirLayers) {
  // Megatron's full recomputation over 6 layers on one stage, one micro-batch
  // (transformer_block.py _checkpointed_forward): uniform N keeps only the input of each group
  // of N layers ([T, h] bf16 = 2·1024·1024 bytes, allocated by the group's first op) and runs
  // the whole group forward again before the backward of its last layer; block N checkpoints the
  // first N layers one by one and the others keep every activation, as without recomputation;
  // interval N every N-th layer (torchtitan's selective_ac_option: N).
  Job s = small(1, 1, 1);
  s.m.num_layers = 6;
  s.t.global_batch_size = 1;
  const std::int64_t input = 2 * 1024 * 1024;
  struct Layer {
    std::int64_t forward_alloc = 0;
    int recompute_ops = 0;
    std::size_t first_recompute = SIZE_MAX, last_recompute = 0, first_backward = SIZE_MAX,
                last_backward = 0;
  };
  const auto layers = [&](Recompute rc, RecomputeMethod method, std::int64_t n) {
    s.p.recompute = rc;
    s.p.recompute_method = method;
    s.p.recompute_num_layers = n;
    const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
    std::vector<Layer> out(6);
    const auto& ops = g.templates[0].ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const graph::Op& op = ops[i];
      if (op.layer >= 6 || graph::is_communication(op.kind)) continue;
      Layer& x = out[op.layer];
      if (op.phase == graph::Phase::Forward) x.forward_alloc += op.mem_alloc;
      if (op.phase == graph::Phase::Recompute) {
        ++x.recompute_ops;
        x.first_recompute = std::min(x.first_recompute, i);
        x.last_recompute = std::max(x.last_recompute, i);
      }
      if (op.phase == graph::Phase::Backward) {
        x.first_backward = std::min(x.first_backward, i);
        x.last_backward = std::max(x.last_backward, i);
      }
    }
    return out;
  };
  const std::vector<Layer> none = layers(Recompute::None, RecomputeMethod::Uniform, 1);
  const std::vector<Layer> every = layers(Recompute::Full, RecomputeMethod::Uniform, 1);
  const std::vector<Layer> groups = layers(Recompute::Full, RecomputeMethod::Uniform, 4);
  const std::vector<Layer> block = layers(Recompute::Full, RecomputeMethod::Block, 2);
  // torchtitan's layer-wise checkpointing every 3rd layer: layers 2 and 5 (counted from 1).
  const std::vector<Layer> interval = layers(Recompute::Full, RecomputeMethod::Interval, 3);
  for (int l = 0; l < 6; ++l) {
    SCOPED_TRACE(l);
    EXPECT_EQ(every[l].forward_alloc, input);
    EXPECT_GT(every[l].recompute_ops, 0);
    // Groups [0, 3] and [4, 5].
    EXPECT_EQ(groups[l].forward_alloc, l == 0 || l == 4 ? input : 0);
    EXPECT_EQ(groups[l].recompute_ops, every[l].recompute_ops);
    EXPECT_EQ(block[l].forward_alloc, l < 2 ? input : none[l].forward_alloc);
    EXPECT_EQ(block[l].recompute_ops, l < 2 ? every[l].recompute_ops : 0);
    const bool third = l == 2 || l == 5;
    EXPECT_EQ(interval[l].forward_alloc, third ? input : none[l].forward_alloc);
    EXPECT_EQ(interval[l].recompute_ops, third ? every[l].recompute_ops : 0);
  }
  EXPECT_GT(none[2].forward_alloc, 4 * input);
  // The group [0, 3] runs again after layer 4's backward, all of it before layer 3's backward.
  EXPECT_GT(groups[0].first_recompute, groups[4].last_backward);
  EXPECT_LT(groups[0].last_recompute, groups[1].first_recompute);
  EXPECT_LT(groups[3].last_recompute, groups[3].first_backward);
  // One layer at a time: layer 1 runs again after layer 2's backward, layer 0 after layer 1's.
  EXPECT_GT(every[1].first_recompute, every[2].last_backward);
  EXPECT_GT(every[0].first_recompute, every[1].last_backward);
}

TEST(TransformerBuilder, GraphsValidateForEveryOption) {
  for (auto sched : {Schedule::OneFOneB, Schedule::GPipe})
    for (auto rc : {Recompute::None, Recompute::Selective, Recompute::Full})
      for (bool dist : {false, true})
        for (bool overlap : {false, true}) {
          Job s = small(2, 2, 2);
          s.p.schedule = sched;
          s.p.recompute = rc;
          s.p.use_distributed_optimizer = dist;
          s.p.overlap_grad_reduce = overlap;
          s.p.overlap_param_gather = overlap;
          EXPECT_NO_THROW(build_graph(s.m, s.p, s.t));
        }
}

TEST(GraphValidate, RejectsUnmatchedPointToPoint) {
  Job s = small(1, 2, 1);
  graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  // Drop the receive part of stage 1's first receive: stage 0's sends are left unmatched.
  for (graph::Op& op : g.templates[1].ops)
    if (op.kind == graph::OpKind::SendRecv && op.role2 == graph::CommRole::PpPrev) {
      op.role2 = graph::CommRole::None;
      op.role = op.role == graph::CommRole::None ? graph::CommRole::PpPrev : op.role;
      break;
    }
  g.templates[1].finalize();
  EXPECT_THROW(graph::validate(g), InputError);
}

TEST(GraphValidate, RejectsInconsistentCollectives) {
  Job s = small(2, 1, 2);
  graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  // Give rank 1 its own template whose first TP collective moves a different size.
  g.templates.push_back(g.templates[0]);
  for (graph::Op& op : g.templates[1].ops)
    if (op.role == graph::CommRole::Tp) {
      op.comm_bytes *= 2;
      break;
    }
  g.rank_class[1] = 1;
  EXPECT_THROW(graph::validate(g), InputError);
}

TEST(TransformerBuilder, UnevenEndStagesAsLlama3) {
  // 126 layers over PP 16 with 7 on each end stage: 7 + 14·8 + 7 = 126 (Llama 3 405B).
  ParallelPlan p;
  p.pipeline_model_parallel_size = 16;
  p.data_parallel_size = 1;
  p.decoder_first_pipeline_num_layers = 7;
  p.decoder_last_pipeline_num_layers = 7;
  EXPECT_EQ(p.layers_on_stage(0, 126), 7);
  EXPECT_EQ(p.layers_on_stage(1, 126), 8);
  EXPECT_EQ(p.layers_on_stage(15, 126), 7);
  EXPECT_EQ(p.first_layer_of_chunk(1, 0, 126), 7);
  EXPECT_EQ(p.total_layers(126), 126);
  Job j = small(1, 4, 1);
  j.m.num_layers = 10;  // 2 + 3 + 3 + 2
  j.p.decoder_first_pipeline_num_layers = 2;
  j.p.decoder_last_pipeline_num_layers = 2;
  graph::SlicedGraph g = build_graph(j.m, j.p, j.t);
  // Each stage's forward of micro-batch 0 touches exactly its layers, in order.
  const std::vector<std::pair<int, int>> expected{{0, 1}, {2, 4}, {5, 7}, {8, 9}};
  for (std::size_t s = 0; s < 4; ++s) {
    int lo = 1 << 30, hi = -1;
    for (const graph::Op& op : g.templates[s].ops)
      if (op.layer != graph::kNoIndex) {
        lo = std::min(lo, static_cast<int>(op.layer));
        hi = std::max(hi, static_cast<int>(op.layer));
      }
    EXPECT_EQ(std::make_pair(lo, hi), expected[s]) << "stage " << s;
  }
}

TEST(TransformerBuilder, RopeOpsOnlyWithRotaryEmbeddings) {
  // RoPE: one forward and one backward op per layer and micro-batch (4 layers, PP 1, 8
  // micro-batches, no recompute: 2 · 4 · 8 = 64). Learned absolute embeddings have none.
  Job s = small(1, 1, 1);
  auto count = [&] {
    std::size_t n = 0;
    const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
    for (const graph::Op& op : g.templates[0].ops) n += op.name == graph::OpName::Rope;
    return n;
  };
  EXPECT_EQ(count(), 2u * 4 * 8);
  s.m.position_embedding_type = PositionEmbedding::LearnedAbsolute;
  EXPECT_EQ(count(), 0u);
}

TEST(TransformerBuilder, FlashAttention2BackendKeepsTheFusedWorkOnItsOwnKernel) {
  // training.attention: flash2 (Transformer Engine's flash-attn backend): the fused op's work
  // and bytes, marked for FlashAttention-2's rates; the ring steps under CP as with cuDNN.
  for (const std::int64_t cp : {1, 2}) {
    Job fused = small(2, 1, 2);
    fused.p.context_parallel_size = cp;
    fused.p.data_parallel_size = 2 / cp;
    Job fa2 = fused;
    fa2.t.attention = AttentionBackend::Flash2;
    const graph::RankProgram a = build_graph(fused.m, fused.p, fused.t).templates[0];
    const graph::RankProgram b = build_graph(fa2.m, fa2.p, fa2.t).templates[0];
    ASSERT_EQ(a.size(), b.size()) << "cp " << cp;
    int attention = 0;
    for (std::uint32_t i = 0; i < a.size(); ++i) {
      if (a.ops[i].kind != graph::OpKind::Attention) continue;
      ++attention;
      EXPECT_EQ(a.ops[i].attention_impl, graph::AttentionImpl::Fused);
      EXPECT_EQ(b.ops[i].attention_impl, graph::AttentionImpl::Flash2);
      EXPECT_EQ(a.ops[i].flops, b.ops[i].flops);
      EXPECT_EQ(a.ops[i].mem_bytes, b.ops[i].mem_bytes);
    }
    // 4 layers · micro-batches (global batch 16 over DP 2 / cp) · forward and backward.
    EXPECT_EQ(attention, 4 * (16 / (2 / cp)) * 2) << "cp " << cp;
  }
}

TEST(TransformerBuilder, UnfusedAttentionCarriesItsPasses) {
  // b = 1, s = 1024, a/t = 16/2 = 8 heads, dh = 64, attention dropout 0.1. Scores per op:
  // E = 8 · 1024² elements; one [8, 1024, 64] tensor is H = 2 · 8 · 1024 · 64 bytes.
  // Forward: 4·b·s²·q/t = 4 · 1024² · 512 FLOPs (the full square: the GEMMs skip nothing);
  // bytes 2 GEMMs · (2H + 2E) + softmax 4E + dropout 5E. Backward: twice the FLOPs; bytes
  // 4 GEMMs · (2H + 2E) + dropout 5E + softmax 6E.
  Job s = small(2, 1, 1);
  s.t.attention = AttentionBackend::Unfused;
  s.m.attention_dropout = 0.1;
  const double E = 8.0 * 1024 * 1024, H = 2.0 * 8 * 1024 * 64;
  bool fwd = false, bwd = false;
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  for (const graph::Op& op : g.templates[0].ops) {
    if (op.kind != graph::OpKind::Attention) continue;
    EXPECT_EQ(op.attention_impl, graph::AttentionImpl::Unfused);
    EXPECT_EQ(op.shape, (std::array<std::uint32_t, 3>{8, 1024, 64}));
    if (op.phase == graph::Phase::Backward) {
      EXPECT_DOUBLE_EQ(op.flops, 2 * 4.0 * 1024 * 1024 * 512);
      EXPECT_DOUBLE_EQ(op.mem_bytes, 4 * (2 * H + 2 * E) + 11 * E);
      bwd = true;
    } else {
      EXPECT_DOUBLE_EQ(op.flops, 4.0 * 1024 * 1024 * 512);
      EXPECT_DOUBLE_EQ(op.mem_bytes, 2 * (2 * H + 2 * E) + 9 * E);
      fwd = true;
    }
  }
  EXPECT_TRUE(fwd && bwd);
}
}  // namespace
}  // namespace scalescope::workload
