#pragma once
// A small model and cost functions for the emulation tests that replay built graphs without
// the cost model.
#include "emu/model_data.hpp"
#include "workload/transformer_builder.hpp"

namespace scalescope::emu::testing {

/// A small dense decoder: 4 layers, hidden 512, 8 heads, vocabulary 1,000, sequence 256.
inline workload::ModelSpec small_dense_model() {
  workload::ModelSpec m;
  m.num_layers = 4;
  m.hidden_size = 512;
  m.num_attention_heads = 8;
  m.vocab_size = 1000;
  m.seq_length = 256;
  return m;
}

/// Compute from the op's FLOPs; a collective's time grows with its member count (so a DP group
/// costed with only some of its members would finish early), transfers from their bytes; each
/// communicator is on one node whatever its members. With `host`, the host takes 700 ns to issue
/// each op (more than the smallest kernels, so the host sets part of the schedule).
inline Costs member_sensitive_costs(bool host = false) {
  Costs c;
  c.compute = [](const graph::Op& op) -> SimTime {
    return 1000 + static_cast<SimTime>(op.flops / 1e6);
  };
  c.collective = [](graph::OpKind, double bytes, const cost::CommShape& s) -> SimTime {
    return 500 * static_cast<SimTime>(s.ranks) + static_cast<SimTime>(bytes / 1e4);
  };
  c.p2p = [](double bytes, bool) -> SimTime { return 300 + static_cast<SimTime>(bytes / 1e4); };
  c.shape = [](const std::uint32_t* b, const std::uint32_t* e) {
    return cost::CommShape{static_cast<std::uint32_t>(e - b), 1, static_cast<std::uint32_t>(e - b)};
  };
  if (host) c.host = [](const graph::Op&) -> SimTime { return 700; };
  c.gpu = "test";
  c.peak_flops = 1e12;
  return c;
}

}  // namespace scalescope::emu::testing
