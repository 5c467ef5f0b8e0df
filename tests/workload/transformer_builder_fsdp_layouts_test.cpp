// FSDP in the layouts PyTorch-native runs use: under pipeline parallelism (torchtitan with
// torch.distributed.pipelining) and with experts (dense units over DP × CP, experts over expert
// DP). Every expected figure is derived by hand in the test's comment.
#include "workload/transformer_builder.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "workload/accounting.hpp"
#include "workload/memory_plan.hpp"

#include "transformer_builder_test_util.hpp"

namespace scalescope::workload {
namespace {

using namespace builder_test;

struct Collectives {
  double forward_gather = 0, backward_gather = 0, reduce_scatter = 0, all_reduce = 0;
  int gathers = 0, reduce_scatters = 0;
};

/// DP (or expert-DP) collectives of one template, with the micro-batches they belong to.
Collectives collectives(const graph::RankProgram& t, graph::CommRole role,
                        std::vector<int>* gather_mbs = nullptr,
                        std::vector<int>* reduce_mbs = nullptr) {
  Collectives c;
  for (const graph::Op& op : t.ops) {
    if (op.role != role) continue;
    if (op.kind == graph::OpKind::AllGather) {
      (op.phase == graph::Phase::Backward ? c.backward_gather : c.forward_gather) += op.comm_bytes;
      ++c.gathers;
      if (gather_mbs) gather_mbs->push_back(op.microbatch);
    } else if (op.kind == graph::OpKind::ReduceScatter) {
      c.reduce_scatter += op.comm_bytes;
      ++c.reduce_scatters;
      if (reduce_mbs) reduce_mbs->push_back(op.microbatch);
    } else if (op.kind == graph::OpKind::AllReduce) {
      c.all_reduce += op.comm_bytes;
    }
  }
  return c;
}

/// FSDP2 under torchtitan's PP: parameters kept gathered across the step, gradients
/// accumulated unsharded, one reduction after the last backward (what io/config sets for PP).
void fsdp_under_pp(Job& s) {
  s.p.fsdp = true;
  s.p.zero_stage = 3;
  s.p.reshard_after_forward = false;
  s.p.fsdp_reduce_every_microbatch = false;
}

/// A small MoE under FSDP2 (4 layers, 8 experts of FFN 1792, top-2), TP 1, DP `dp`, EP `ep`,
/// shard groups of `shard` ranks (0: no HSDP).
Job fsdp_moe_job(std::int64_t dp, std::int64_t ep, std::int64_t shard = 0) {
  Job s = small(1, 1, dp);
  s.m.num_experts = 8;
  s.m.moe_router_topk = 2;
  s.m.moe_ffn_hidden_size = 1792;
  s.p.expert_model_parallel_size = ep;
  s.p.overlap_grad_reduce = false;
  s.p.fsdp = true;
  s.p.zero_stage = 3;
  s.p.fsdp_shard_size = shard;
  return s;
}

std::vector<std::uint32_t> members(const graph::SlicedGraph& g, graph::CommRole role) {
  const auto c = static_cast<std::uint32_t>(g.comm_of(0, role));
  return {g.comms.members_begin(c), g.comms.members_end(c)};
}

/// Each stage of a two-stage FSDP-under-PP job: `runs` gathers of all its units (2 · N_s each,
/// none in a backward) and `runs` reduce-scatters (4 · N_s each), the gathers in micro-batches
/// `gather_mbs`, the reduce-scatters in `reduce_mbs`; every byte gathered or accumulated freed
/// again by the end.
void expect_stage_traffic(const Job& s, const graph::SlicedGraph& g, double runs,
                          const std::set<int>& gather_mbs, const std::set<int>& reduce_mbs) {
  for (std::int64_t stage = 0; stage < 2; ++stage) {
    SCOPED_TRACE(stage);
    const graph::RankProgram& t = g.templates[static_cast<std::size_t>(stage)];
    const double n = parameters_on_rank(s.m, s.p, stage);
    std::vector<int> gathers, reduces;
    const Collectives c = collectives(t, graph::CommRole::Dp, &gathers, &reduces);
    EXPECT_DOUBLE_EQ(c.forward_gather, runs * 2 * n);
    EXPECT_DOUBLE_EQ(c.backward_gather, 0);
    EXPECT_DOUBLE_EQ(c.reduce_scatter, runs * 4 * n);
    for (int mb : gathers) EXPECT_TRUE(gather_mbs.count(mb)) << mb;
    for (int mb : reduces) EXPECT_TRUE(reduce_mbs.count(mb)) << mb;
    activation_peak(t);
  }
}

/// The order of a template's forward and backward layer computations: (micro-batch, layer or 0
/// without `by_layer`, 0 forward / 1 backward), consecutive repeats merged.
std::vector<std::tuple<int, int, int>> layer_steps(const graph::RankProgram& t, bool by_layer) {
  std::vector<std::tuple<int, int, int>> order;
  for (const graph::Op& op : t.ops) {
    if (op.layer == 0xFFFF || op.microbatch == graph::kNoIndex) continue;
    if (op.phase != graph::Phase::Forward && op.phase != graph::Phase::Backward) continue;
    if (graph::is_communication(op.kind)) continue;
    const std::tuple<int, int, int> k{op.microbatch, by_layer ? op.layer : 0,
                                      op.phase == graph::Phase::Backward ? 1 : 0};
    if (order.empty() || order.back() != k) order.push_back(k);
  }
  return order;
}

TEST(FsdpLayouts, PipelineStagesGatherOnceAStepAndReduceAfterTheirLastBackward) {
  // Two stages (PP 2) of two layers each, DP 2, two micro-batches (global batch 4 = 1 · 2 · 2).
  // Stage s holds N_s parameters: its two layers (P each) and its root R_s = N_s − 2P (stage 0
  // the embedding, stage 1 the final norm and the output layer). torchtitan's apply_fsdp keeps
  // the parameters gathered after the forward when PP is on, and PipelineStage turns resharding
  // and gradient sync off for every backward and reduces once after the stage's last backward:
  //   all-gathers: one per unit, all in micro-batch 0's forward, S = 2 · unit: Σ = 2 · N_s;
  //   backward all-gathers: none;
  //   reduce-scatters: one per unit, after micro-batch 1's backward, S = 4 · unit (fp32): 4 N_s.
  // Memory: the shard is 16 / 2 bytes a parameter (FSDP2: the fp32 shard, its fp32 gradients,
  // Adam's m and v). From micro-batch 0's forward every unit is
  // gathered (2 · unit, rounded up per unit) until the reshard after the last backward; from
  // the first backward every unit's unsharded fp32 gradients accumulate (4 · unit, rounded down
  // per unit) until their reduce-scatter. So just before the first reduce-scatter (activations
  // and gathered parameters freed) the stage holds the shard and the gradients, and at its peak
  // at least the shard, the gathered parameters and the gradients: 6 · N_s above the shard.
  Job s = small(1, 2, 2);
  s.t.global_batch_size = 4;
  ASSERT_EQ(s.t.num_microbatches(2), 2);
  fsdp_under_pp(s);
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const double p_layer = layer_parameters_on_rank(s.m, s.p);
  for (std::int64_t stage = 0; stage < 2; ++stage) {
    SCOPED_TRACE(stage);
    const graph::RankProgram& t = g.templates[static_cast<std::size_t>(stage)];
    const double n = parameters_on_rank(s.m, s.p, stage);
    const double root = n - 2 * p_layer;
    std::vector<int> gather_mbs, reduce_mbs;
    const Collectives c = collectives(t, graph::CommRole::Dp, &gather_mbs, &reduce_mbs);
    EXPECT_EQ(c.gathers, 3);
    EXPECT_EQ(c.reduce_scatters, 3);
    EXPECT_DOUBLE_EQ(c.forward_gather, 2 * n);
    EXPECT_DOUBLE_EQ(c.backward_gather, 0);
    EXPECT_DOUBLE_EQ(c.reduce_scatter, 4 * n);
    EXPECT_DOUBLE_EQ(c.all_reduce, 0);
    for (int mb : gather_mbs) EXPECT_EQ(mb, 0);
    for (int mb : reduce_mbs) EXPECT_EQ(mb, 1);
    // Live bytes in issue order up to the first reduce-scatter.
    std::int64_t live = t.static_memory;
    for (const graph::Op& op : t.ops) {
      if (op.role == graph::CommRole::Dp && op.kind == graph::OpKind::ReduceScatter) break;
      live += op.mem_alloc - op.mem_free;
    }
    const auto up = [](double x) { return static_cast<std::int64_t>(std::ceil(x)); };
    const auto down = [](double x) { return static_cast<std::int64_t>(x); };
    const std::int64_t gathered = up(2 * root) + 2 * up(2 * p_layer);
    const std::int64_t grads = down(4 * root) + 2 * down(4 * p_layer);
    EXPECT_EQ(t.static_memory, up(n * 16 / 2));
    EXPECT_EQ(live - t.static_memory, grads);
    // Everything gathered or accumulated is freed again by the end of the step.
    const std::int64_t peak = activation_peak(t);
    EXPECT_GE(peak - t.static_memory, gathered + grads);
    // `scalescope memory` names them: weights 4 N / 2 (the fp32 shard) + 2 N (gathered), main
    // grads 4 N / 2 + 4 N (unsharded), the rest of the peak activations.
    const MemoryBreakdown b = memory_breakdown(s.m, s.p, s.t, stage, peak, 0);
    EXPECT_EQ(b[MemClass::Weights], up(4 * n / 2) + up(2 * n));
    EXPECT_EQ(b[MemClass::MainGrads], up(4 * n / 2) + up(4 * n));
  }
}

TEST(FsdpLayouts, PipelineStagesWithFsdpInsideTheStageReshardAndReduceEveryBackward) {
  // fsdp_reduce_every_microbatch under PP: FSDP2 wraps modules inside the stage's module, so
  // the stage's no-sync branch is not taken and FSDP2's defaults act (NeMo AutoModel before
  // 2025-10-08): reshard_after_forward false (not pp_enabled), each backward reshards and
  // reduce-scatters. The job of PipelineStagesGatherOnceAStep… (PP 2, DP 2, two micro-batches,
  // 1F1B). Stage 0 runs F0 F1 B0 B1: F0 gathers every unit (2 N), F1 finds them gathered, B0
  // reduces (4 N) and reshards, so B1 gathers every unit again (2 N: the root too, FSDP2
  // unshards it before its backward) and reduces (4 N). Stage 1 runs F0 B0 F1 B1: each
  // forward gathers (2 N each), each backward reduces (4 N each). Forward gathers in
  // micro-batch 0 (and 1 on stage 1), reduce-scatters in both micro-batches.
  Job s = small(1, 2, 2);
  s.t.global_batch_size = 4;
  s.p.fsdp = true;
  s.p.zero_stage = 3;
  s.p.reshard_after_forward = false;
  s.p.fsdp_reduce_every_microbatch = true;
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  for (std::int64_t stage = 0; stage < 2; ++stage) {
    SCOPED_TRACE(stage);
    const graph::RankProgram& t = g.templates[static_cast<std::size_t>(stage)];
    const double n = parameters_on_rank(s.m, s.p, stage);
    const Collectives c = collectives(t, graph::CommRole::Dp);
    EXPECT_DOUBLE_EQ(c.forward_gather, stage == 0 ? 2 * n : 2 * 2 * n);
    EXPECT_DOUBLE_EQ(c.backward_gather, stage == 0 ? 2 * n : 0);
    EXPECT_DOUBLE_EQ(c.reduce_scatter, 2 * 4 * n);
    activation_peak(t);
  }
}

TEST(FsdpLayouts, GradientAccumulationStepsRunTheScheduleOncePerStep) {
  // training.gradient_accumulation_steps 2 on the job of PipelineStagesGatherOnceAStep… with
  // four micro-batches (global batch 8): the iteration runs the 1F1B schedule twice, on
  // micro-batches 0-1 and 2-3, and torch.distributed.pipelining reduces after each run's last
  // backward. Per stage: gathers 2 · 2 N_s (in micro-batches 0 and 2), reduce-scatters
  // 2 · 4 N_s (in micro-batches 1 and 3). The pipeline drains between the runs: stage 0's
  // forward of micro-batch 2 comes after its backward of micro-batch 1, which 1F1B over all
  // four would not do (stage 0 warms up with one forward, so it would run F2 before B1).
  Job s = small(1, 2, 2);
  s.t.global_batch_size = 8;
  s.t.gradient_accumulation_steps = 2;
  ASSERT_EQ(s.t.microbatches_per_run(2), 2);
  fsdp_under_pp(s);
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  expect_stage_traffic(s, g, 2, {0, 2}, {1, 3});
  // Stage 0's order of its forward and backward ops by micro-batch: F0 F1 B0 B1 F2 F3 B2 B3.
  const std::vector<std::tuple<int, int, int>> want{{0, 0, 0}, {1, 0, 0}, {0, 0, 1}, {1, 0, 1},
                                                    {2, 0, 0}, {3, 0, 0}, {2, 0, 1}, {3, 0, 1}};
  EXPECT_EQ(layer_steps(g.templates[0], false), want);
}

TEST(FsdpLayouts, LoopedBfsRunsEveryMicroBatchOfAChunkBeforeTheNext) {
  // torch's ScheduleLoopedBFS on PP 2 × VP 2 (4 layers, one per virtual stage: stage 0 holds
  // layers 0 and 2), DP 2, two micro-batches: stage 0 runs F(0, L0) F(1, L0) F(0, L2) F(1, L2),
  // then B(1, L2) B(0, L2) B(1, L0) B(0, L0) (stages reversed, micro-batches reversed). Under
  // FSDP with PP each chunk gathers in its first forward (micro-batch 0) and reduces after its
  // last backward, which here is micro-batch 0's: every gather and reduce-scatter is in
  // micro-batch 0, 2 N_s and 4 N_s in all.
  Job s = small(1, 2, 2);
  s.p.virtual_pipeline_model_parallel_size = 2;
  s.p.schedule = Schedule::LoopedBfs;
  s.t.global_batch_size = 4;
  fsdp_under_pp(s);
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const std::vector<std::tuple<int, int, int>> want{{0, 0, 0}, {1, 0, 0}, {0, 2, 0}, {1, 2, 0},
                                                    {1, 2, 1}, {0, 2, 1}, {1, 0, 1}, {0, 0, 1}};
  EXPECT_EQ(layer_steps(g.templates[0], true), want);
  expect_stage_traffic(s, g, 1, {0}, {0});
}

TEST(FsdpLayouts, InterleavedChunksGatherAtTheirFirstForwardAndReduceAtTheirLastBackward) {
  // PP 2 × VP 2 (4 layers: one per chunk), DP 2, four micro-batches. Each model chunk is its
  // own FSDP root (torchtitan wraps each model part): chunk c's units are gathered in its first
  // forward (micro-batch 0) and reduce-scattered after its last backward (micro-batch 3). Over
  // the stage the volumes are those of the non-interleaved case: 2 · N_s gathered, 4 · N_s
  // reduced. On the last stage the output layer is chunk 1's root and the reduce-scatters of
  // chunk 1 come before chunk 0's (the backward takes the chunks in reverse).
  Job s = small(1, 2, 2);
  s.p.virtual_pipeline_model_parallel_size = 2;
  s.t.global_batch_size = 8;
  ASSERT_EQ(s.t.num_microbatches(2), 4);
  fsdp_under_pp(s);
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  expect_stage_traffic(s, g, 1, {0}, {3});
  // The last stage: its output layer's reduction (layer unset) is chunk 1's, issued before the
  // reduction of chunk 0's layer (layer 1 on stage 1: layers 0, 2 on stage 0; 1, 3 on stage 1).
  std::vector<int> layers;
  for (const graph::Op& op : g.templates[1].ops)
    if (op.role == graph::CommRole::Dp && op.kind == graph::OpKind::ReduceScatter)
      layers.push_back(op.layer);
  EXPECT_EQ(layers, (std::vector<int>{0xFFFF, 3, 1}));
}

TEST(FsdpLayouts, ExpertsShardOverExpertDataParallelAndDenseUnitsOverDataParallel) {
  // A small MoE (4 layers, 8 experts of FFN 1792, gated: 3 · h · f = 3 · 1024 · 1792 each), EP 2,
  // DP 4, TP 1, FSDP with its defaults (reshard after forward, reduce every micro-batch), eight
  // micro-batches. A rank holds 8 / 2 = 4 experts a layer: P_e = 4 · 3 · 1024 · 1792 expert
  // parameters, sharded over expert DP = TP·DP / (ETP·EP) = 4 / 2 = 2; the dense part of a layer
  // P_d (attention, norms, router) and the root R over DP = 4. Per micro-batch:
  //   DP all-gathers: forward 2 · (R + 4 P_d), backward 2 · 4 P_d (the root stays gathered);
  //   expert-DP all-gathers: forward 2 · 4 P_e, backward 2 · 4 P_e;
  //   reduce-scatters: DP 4 · (R + 4 P_d), expert DP 4 · 4 P_e.
  // Static bytes (FSDP2: fp32 shard, fp32 gradients, Adam's m, v): dense (4 + 4 + 8) / 4 a
  // parameter, experts (4 + 4 + 8) / 2.
  // Groups (Megatron's expert order etp-ep-edp): EP {0, 1}, expert DP {0, 2}; DP {0, 1, 2, 3}.
  Job s = fsdp_moe_job(4, 2);
  ASSERT_EQ(s.p.edp(), 2);
  const double m = 8;
  ASSERT_EQ(s.t.num_microbatches(4), 8);
  const double p_e = 4.0 * 3 * 1024 * 1792;
  const RankParameters layer = layer_parameters_on_rank(s.m, s.p, 0);
  ASSERT_DOUBLE_EQ(layer.expert, p_e);
  const double p_d = layer.dense;
  const RankParameters all = rank_parameters(s.m, s.p, 0);
  const double root = all.dense - 4 * p_d;
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const graph::RankProgram& t = g.templates[0];
  const Collectives dp = collectives(t, graph::CommRole::Dp);
  const Collectives edp = collectives(t, graph::CommRole::Edp);
  EXPECT_DOUBLE_EQ(dp.forward_gather, m * 2 * (root + 4 * p_d));
  EXPECT_DOUBLE_EQ(dp.backward_gather, m * 2 * 4 * p_d);
  EXPECT_DOUBLE_EQ(dp.reduce_scatter, m * 4 * (root + 4 * p_d));
  EXPECT_DOUBLE_EQ(edp.forward_gather, m * 2 * 4 * p_e);
  EXPECT_DOUBLE_EQ(edp.backward_gather, m * 2 * 4 * p_e);
  EXPECT_DOUBLE_EQ(edp.reduce_scatter, m * 4 * 4 * p_e);
  EXPECT_EQ(static_memory_bytes(s.m, s.p, 0),
            static_cast<std::int64_t>(std::ceil(all.dense * 16 / 4 + all.expert * 16 / 2)));
  EXPECT_EQ(members(g, graph::CommRole::Edp), (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(members(g, graph::CommRole::Ep), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(members(g, graph::CommRole::Dp), (std::vector<std::uint32_t>{0, 1, 2, 3}));
  activation_peak(t);
  // ZeRO-2: gradients sharded the same way (dense / 4, experts / 2), weights whole.
  s.p.fsdp = false;
  s.p.zero_stage = 2;
  EXPECT_EQ(static_memory_bytes(s.m, s.p, 0),
            static_cast<std::int64_t>(
                std::ceil(all.dense * (2 + 16.0 / 4) + all.expert * (2 + 16.0 / 2))));
}

TEST(FsdpLayouts, HsdpWithExpertsShardsThemWithinAReplica) {
  // HSDP with experts: DP 8 in shard groups of 4 (2 replicas), EP 2, TP 1, the small MoE of
  // ExpertsShardOver… Expert DP = 8 / 2 = 4, of which each replica holds 2: the experts shard
  // over 2 ranks (torchtitan's dp_shard_mod_ep within a dp_replicate slice) and the dense
  // units over 4. Rank r = dp (TP 1); expert rank = e + 2·ed, so rank 0 is e = 0, ed = 0:
  //   DP shard group {0, 1, 2, 3}, replicate group {0, 4};
  //   EP {0, 1}; expert shard group: e = 0, ed ∈ {0, 1} of replica 0 → {0, 2};
  //   the experts' replicate group is the dense one: ed + 2 → rank + 4.
  // Per micro-batch (m = 8, every micro-batch reduced): expert gathers 2 · 4 P_e forward and
  // backward, expert reduce-scatters 4 · 4 P_e, and all-reduces across the replicas of the
  // reduced shards: 4 · (R + 4 P_d) / 4 dense + 4 · 4 P_e / 2 experts.
  // Static bytes (FSDP2): dense 16 / 4, experts 16 / 2 a parameter.
  Job s = fsdp_moe_job(8, 2, 4);
  ASSERT_EQ(s.p.edp(), 4);
  ASSERT_EQ(s.p.expert_shard(), 2);
  const double m = 8;
  ASSERT_EQ(s.t.num_microbatches(8), 8);
  const RankParameters layer = layer_parameters_on_rank(s.m, s.p, 0);
  const double p_e = layer.expert, p_d = layer.dense;
  const RankParameters all = rank_parameters(s.m, s.p, 0);
  const double root = all.dense - 4 * p_d;
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const graph::RankProgram& t = g.templates[0];
  const Collectives edp = collectives(t, graph::CommRole::Edp);
  const Collectives rep = collectives(t, graph::CommRole::DpReplicate);
  EXPECT_DOUBLE_EQ(edp.forward_gather, m * 2 * 4 * p_e);
  EXPECT_DOUBLE_EQ(edp.backward_gather, m * 2 * 4 * p_e);
  EXPECT_DOUBLE_EQ(edp.reduce_scatter, m * 4 * 4 * p_e);
  EXPECT_DOUBLE_EQ(rep.all_reduce, m * (4 * (root + 4 * p_d) / 4 + 4 * 4 * p_e / 2));
  EXPECT_EQ(members(g, graph::CommRole::Dp), (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(members(g, graph::CommRole::DpReplicate), (std::vector<std::uint32_t>{0, 4}));
  EXPECT_EQ(members(g, graph::CommRole::Ep), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(members(g, graph::CommRole::Edp), (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(static_memory_bytes(s.m, s.p, 0),
            static_cast<std::int64_t>(std::ceil(all.dense * 16 / 4 + all.expert * 16 / 2)));
  activation_peak(t);
}

TEST(FsdpLayouts, ExpertsWholeOnTheirRankAreNeitherGatheredNorReduced) {
  // EP = DP = 4 (TP 1): expert DP is 1, every rank holds its experts whole, so FSDP gathers and
  // reduces the dense units only and the experts keep 4 + 4 + 8 bytes a parameter (dense:
  // 16 / 4).
  Job s = fsdp_moe_job(4, 4);
  ASSERT_EQ(s.p.edp(), 1);
  const graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  const Collectives edp = collectives(g.templates[0], graph::CommRole::Edp);
  EXPECT_EQ(edp.gathers + edp.reduce_scatters, 0);
  const RankParameters all = rank_parameters(s.m, s.p, 0);
  EXPECT_EQ(static_memory_bytes(s.m, s.p, 0),
            static_cast<std::int64_t>(std::ceil(all.dense * 16 / 4 + all.expert * 16)));
  activation_peak(g.templates[0]);
}

}  // namespace
}  // namespace scalescope::workload
