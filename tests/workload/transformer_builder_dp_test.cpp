// The builder's data parallelism: FSDP, HSDP, ZeRO-2 and ZeRO-3 collectives and memory.
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

/// Sums of the DP collectives' S (nccl-tests convention: the whole gathered / reduced tensor)
/// of stage 0's program, by kind and phase.
struct DpVolume {
  double gather_forward = 0, gather_backward = 0, gather_other = 0, reduce_scatter = 0,
         all_reduce = 0;
};
DpVolume dp_volume(const graph::SlicedGraph& g) {
  DpVolume v;
  for (const graph::Op& op : g.templates[0].ops) {
    if (op.role != graph::CommRole::Dp) continue;
    if (op.kind == graph::OpKind::AllGather)
      (op.phase == graph::Phase::Forward    ? v.gather_forward
       : op.phase == graph::Phase::Backward ? v.gather_backward
                                            : v.gather_other) += op.comm_bytes;
    if (op.kind == graph::OpKind::ReduceScatter) v.reduce_scatter += op.comm_bytes;
    if (op.kind == graph::OpKind::AllReduce) v.all_reduce += op.comm_bytes;
  }
  return v;
}

TEST(TransformerBuilder, FsdpAllGatherVolumePerStep) {
  // FSDP (ZeRO-3), TP 2 · DP 4, L = 4 layers, m = 8 micro-batches. Units: each layer (P_l =
  // layer_parameters_on_rank) and the root R = N − L·P_l (embedding, final norm, output layer).
  // With reshard_after_forward every micro-batch gathers every unit in its forward
  // (S = 2 · unit parameters, bf16) and the layers again in its backward (the root stays
  // gathered): forward m · 2 · N, backward m · 2 · L · P_l. Gradients are reduce-scattered on
  // the last micro-batch only (S = 4 · N, fp32) without fsdp_reduce_every_microbatch, or on
  // each with it (the default, FSDP2's and Megatron-FSDP's behaviour).
  // Nothing is gathered after the optimizer step.
  Job s = small(2, 1, 4);
  s.p.fsdp = true;
  s.p.zero_stage = 3;
  EXPECT_TRUE(s.p.fsdp_reduce_every_microbatch);
  s.p.fsdp_reduce_every_microbatch = false;
  const double mb = 8;
  ASSERT_EQ(s.t.num_microbatches(4), 8);
  const double n = parameters_on_rank(s.m, s.p, 0);
  const double layers = 4 * layer_parameters_on_rank(s.m, s.p);
  DpVolume v = dp_volume(build_graph(s.m, s.p, s.t));
  EXPECT_DOUBLE_EQ(v.gather_forward, mb * 2 * n);
  EXPECT_DOUBLE_EQ(v.gather_backward, mb * 2 * layers);
  EXPECT_DOUBLE_EQ(v.gather_other, 0);
  EXPECT_DOUBLE_EQ(v.reduce_scatter, 4 * n);
  EXPECT_DOUBLE_EQ(v.all_reduce, 0);
  s.p.fsdp_reduce_every_microbatch = true;
  EXPECT_DOUBLE_EQ(dp_volume(build_graph(s.m, s.p, s.t)).reduce_scatter, mb * 4 * n);
  // SHARD_GRAD_OP (reshard_after_forward: false) keeps the parameters for the backward.
  s.p.reshard_after_forward = false;
  v = dp_volume(build_graph(s.m, s.p, s.t));
  EXPECT_DOUBLE_EQ(v.gather_forward, mb * 2 * n);
  EXPECT_DOUBLE_EQ(v.gather_backward, 0);
}

TEST(TransformerBuilder, HsdpShardsWithinGroupsAndAllReducesAcrossReplicas) {
  // HSDP, TP 2 · DP 4 with shard groups of 2 (torchtitan's dp_shard 2 × dp_replicate 2): the
  // FSDP traffic of FsdpAllGatherVolumePerStep stays on the shard group (the DP role), and each
  // unit's reduced shard is then all-reduced across the 2 replicas: S = 4 · unit / 2 (fp32), N/2
  // in all on the last micro-batch. Static bytes shard over 2: FSDP2's fp32 shard, its fp32
  // gradients and Adam's m, v, (4 + 4 + 8)/2 per parameter.
  // Groups in rank order (rank = tp + 2·dp): shard {0, 2}, {4, 6}; replicate {0, 4}, {2, 6}.
  Job s = small(2, 1, 4);
  s.p.fsdp = true;
  s.p.zero_stage = 3;
  s.p.fsdp_shard_size = 2;
  s.p.fsdp_reduce_every_microbatch = false;  // reduce on the last micro-batch only
  const double n = parameters_on_rank(s.m, s.p, 0);
  graph::SlicedGraph g = build_graph(s.m, s.p, s.t);
  DpVolume v = dp_volume(g);
  EXPECT_DOUBLE_EQ(v.gather_forward, 8 * 2 * n);
  EXPECT_DOUBLE_EQ(v.reduce_scatter, 4 * n);
  double replicated = 0;
  for (const graph::Op& op : g.templates[0].ops)
    if (op.role == graph::CommRole::DpReplicate) {
      EXPECT_EQ(op.kind, graph::OpKind::AllReduce);
      replicated += op.comm_bytes;
    }
  EXPECT_DOUBLE_EQ(replicated, 4 * n / 2);
  auto members = [&](graph::CommRole role) {
    const auto c = static_cast<std::uint32_t>(g.comm_of(0, role));
    return std::vector<std::uint32_t>(g.comms.members_begin(c), g.comms.members_end(c));
  };
  EXPECT_EQ(members(graph::CommRole::Dp), (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(members(graph::CommRole::DpReplicate), (std::vector<std::uint32_t>{0, 4}));
  EXPECT_EQ(static_memory_bytes(s.m, s.p, 0), static_cast<std::int64_t>(std::ceil(n * 16 / 2)));
}

TEST(TransformerBuilder, Zero3MovesOneAndAHalfTimesDdpBytes) {
  // ZeRO §7: ZeRO-3 moves 1.5 × DDP's volume. One micro-batch, bf16 grads on the wire
  // (grad_reduce_in_fp32: false), Ψ = N parameters on the rank, ρ = (D − 1)/D. A ring
  // all-gather or reduce-scatter of S bytes puts ρ·S on each link, an all-reduce 2ρ·S.
  // DDP: all-reduce of 2Ψ → 4ρΨ. ZeRO-3: forward gather 2Ψ + backward gather 2(Ψ − R) (the root
  // unit R stays gathered) + reduce-scatter 2Ψ → ρ(6Ψ − 2R). So (wire + 2ρR) / DDP = 3/2.
  Job s = small(2, 1, 4);
  s.t.global_batch_size = 4;  // m = 1
  s.p.grad_reduce_in_fp32 = false;
  s.p.use_distributed_optimizer = false;
  const DpVolume ddp = dp_volume(build_graph(s.m, s.p, s.t));
  s.p.zero_stage = 3;
  s.p.use_distributed_optimizer = true;
  const DpVolume z3 = dp_volume(build_graph(s.m, s.p, s.t));
  const double n = parameters_on_rank(s.m, s.p, 0);
  const double root = n - 4 * layer_parameters_on_rank(s.m, s.p);
  EXPECT_DOUBLE_EQ(ddp.all_reduce, 2 * n);
  const double zero3_wire = z3.gather_forward + z3.gather_backward + z3.reduce_scatter;
  EXPECT_NEAR((zero3_wire + 2 * root) / (2 * ddp.all_reduce), 1.5, 1e-12);
}

TEST(TransformerBuilder, Zero2ReduceScattersEveryMicrobatchAndFsdpBalancesMemory) {
  // ZeRO-2 shards the gradients, so every micro-batch's are reduce-scattered: m · 4 · N, then
  // the distributed optimizer's gather of the updated bf16 parameters, 2 · N.
  Job s = small(2, 1, 4);
  s.p.zero_stage = 2;
  const double n = parameters_on_rank(s.m, s.p, 0);
  const DpVolume v = dp_volume(build_graph(s.m, s.p, s.t));
  EXPECT_DOUBLE_EQ(v.reduce_scatter, 8 * 4 * n);
  EXPECT_DOUBLE_EQ(v.gather_other, 2 * n);
  // ZeRO-3: every gathered buffer and unsharded gradient is freed again within the iteration,
  // so the template allocates and frees the same bytes as the DDP one does.
  auto balance = [](const graph::SlicedGraph& g) {
    std::int64_t b = 0;
    for (const graph::Op& op : g.templates[0].ops) b += op.mem_alloc - op.mem_free;
    return b;
  };
  s.p.zero_stage = 0;
  const std::int64_t ddp = balance(build_graph(s.m, s.p, s.t));
  s.p.zero_stage = 3;
  for (bool reshard : {true, false})
    for (bool every : {true, false}) {
      s.p.reshard_after_forward = reshard;
      s.p.fsdp_reduce_every_microbatch = every;
      EXPECT_EQ(balance(build_graph(s.m, s.p, s.t)), ddp);
    }
}

}  // namespace
}  // namespace scalescope::workload
