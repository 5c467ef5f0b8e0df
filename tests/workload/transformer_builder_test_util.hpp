#pragma once
// Helpers of the workload builder tests (transformer_builder*_test.cpp): a small Llama-like job,
// a template's activation peak.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "workload/transformer_builder.hpp"

namespace scalescope::workload::builder_test {

struct Job {
  ModelSpec m;
  ParallelPlan p;
  TrainingSpec t;
};

inline Job small(std::int64_t tp, std::int64_t pp, std::int64_t dp) {
  Job s;
  s.m.num_layers = 4;
  s.m.hidden_size = 1024;
  s.m.ffn_hidden_size = 3584;
  s.m.num_attention_heads = 16;
  s.m.num_query_groups = 4;
  s.m.vocab_size = 32000;
  s.m.seq_length = 1024;
  s.m.gated_linear_unit = true;
  s.m.untie_embeddings = false;
  s.m.add_bias_linear = false;
  s.p.tensor_model_parallel_size = tp;
  s.p.pipeline_model_parallel_size = pp;
  s.p.data_parallel_size = dp;
  s.p.sequence_parallel = tp > 1;
  s.p.use_distributed_optimizer = true;
  s.p.overlap_grad_reduce = true;
  s.t.micro_batch_size = 1;
  s.t.global_batch_size = 8 * dp;
  return s;
}

/// Allocated peak of a template in issue order (without transients); checks that every
/// activation is freed again by the end of the iteration.
inline std::int64_t activation_peak(const graph::RankProgram& t) {
  std::int64_t live = t.static_memory, peak = live;
  for (const graph::Op& op : t.ops) {
    live += op.mem_alloc;
    peak = std::max(peak, live);
    live -= op.mem_free;
  }
  EXPECT_EQ(live, t.static_memory);
  return peak;
}

}  // namespace scalescope::workload::builder_test
