#pragma once
/// Shared pieces of the MPI tests: a small mixed TP/PP/DP job, closed-form costs and a
/// bit-for-bit comparison of two results.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>

#include "emu/emulation.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::emu::mpitest {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

/// tp 2 × pp `pp` × dp 2 (pp 2 by default), Megatron's rank order.
inline graph::SlicedGraph mixed_graph(workload::Recompute recompute, int pp = 2, int layers = 4,
                                      int global_batch = 8) {
  workload::ModelSpec m;
  m.num_layers = layers;
  m.hidden_size = 512;
  m.num_attention_heads = 8;
  m.num_query_groups = 4;
  m.vocab_size = 1000;
  m.seq_length = 256;
  m.gated_linear_unit = true;
  workload::ParallelPlan p;
  p.tensor_model_parallel_size = 2;
  p.pipeline_model_parallel_size = pp;
  p.data_parallel_size = 2;
  p.sequence_parallel = true;
  p.use_distributed_optimizer = true;
  p.overlap_grad_reduce = true;
  p.recompute = recompute;
  workload::TrainingSpec t;
  t.global_batch_size = global_batch;
  return workload::build_graph(m, p, t);
}

/// Deterministic costs that vary per op, so ties are rare but possible.
inline Costs test_costs() {
  Costs c;
  c.compute = [](const graph::Op& op) -> SimTime {
    return 700 + static_cast<SimTime>(op.flops / 2e5 + op.mem_bytes / 2e3);
  };
  c.collective = [](graph::OpKind k, double bytes, const cost::CommShape& s) -> SimTime {
    return 2500 +
           static_cast<SimTime>(bytes / 1e3) * (k == graph::OpKind::AllReduce ? 2 : 1) * s.nodes;
  };
  c.p2p = [](double bytes, bool) -> SimTime { return 1500 + static_cast<SimTime>(bytes / 4e3); };
  c.shape = [](const std::uint32_t* b, const std::uint32_t* e) {
    const auto n = static_cast<std::uint32_t>(e - b);
    return cost::CommShape{n, b[n - 1] / 4 - b[0] / 4 + 1, std::min(n, 4u)};
  };
  c.gpu = "test";
  c.peak_flops = 1e12;
  return c;
}

inline void expect_identical(const RunResults& a, const RunResults& b) {
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    EXPECT_EQ(a.ranks[r].finish, b.ranks[r].finish) << "rank " << r;
    EXPECT_EQ(a.ranks[r].compute, b.ranks[r].compute) << "rank " << r;
    EXPECT_EQ(a.ranks[r].exposed_tp, b.ranks[r].exposed_tp) << "rank " << r;
    EXPECT_EQ(a.ranks[r].exposed_pp, b.ranks[r].exposed_pp) << "rank " << r;
    EXPECT_EQ(a.ranks[r].bubble, b.ranks[r].bubble) << "rank " << r;
    EXPECT_EQ(a.ranks[r].straggler_wait, b.ranks[r].straggler_wait) << "rank " << r;
    EXPECT_EQ(a.ranks[r].exposed_embedding, b.ranks[r].exposed_embedding) << "rank " << r;
    EXPECT_EQ(a.ranks[r].exposed_cp, b.ranks[r].exposed_cp) << "rank " << r;
    EXPECT_EQ(a.ranks[r].exposed_ep, b.ranks[r].exposed_ep) << "rank " << r;
    EXPECT_EQ(a.ranks[r].exposed_dp, b.ranks[r].exposed_dp) << "rank " << r;
    EXPECT_EQ(a.ranks[r].other_wait, b.ranks[r].other_wait) << "rank " << r;
    EXPECT_EQ(a.ranks[r].host_wait, b.ranks[r].host_wait) << "rank " << r;
    EXPECT_EQ(a.ranks[r].peak_memory, b.ranks[r].peak_memory) << "rank " << r;
  }
  ASSERT_EQ(a.timelines.size(), b.timelines.size());
  for (const auto& [rank, tl] : a.timelines) {
    const auto& other = b.timelines.at(rank);
    ASSERT_EQ(tl.size(), other.size());
    for (std::size_t i = 0; i < tl.size(); ++i) {
      EXPECT_EQ(tl[i].start, other[i].start);
      EXPECT_EQ(tl[i].end, other[i].end);
      EXPECT_EQ(tl[i].op, other[i].op);
    }
  }
  for (const auto& [rank, mem] : a.memory) {
    const auto& other = b.memory.at(rank);
    ASSERT_EQ(mem.size(), other.size());
    for (std::size_t i = 0; i < mem.size(); ++i) {
      EXPECT_EQ(mem[i].time, other[i].time);
      EXPECT_EQ(mem[i].live, other[i].live);
    }
  }
  EXPECT_EQ(a.summary.iteration_time, b.summary.iteration_time);
  EXPECT_EQ(a.engine.events_committed, b.engine.events_committed);
}

}  // namespace scalescope::emu::mpitest
