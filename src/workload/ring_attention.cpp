#include "workload/ring_attention.hpp"

#include "core/error.hpp"

namespace scalescope::workload {

std::vector<graph::Op> ring_attention(const graph::Op& whole, std::int64_t cp, RingImpl impl,
                                      const RingTensors& tensors) {
  SCALESCOPE_EXPECTS(cp > 1 && whole.kind == graph::OpKind::Attention);
  const auto c = static_cast<double>(cp);
  const double o = tensors.out, kv = tensors.kv;
  const bool forward = whole.phase != graph::Phase::Backward;
  const bool te = impl == RingImpl::TransformerEngine;

  graph::Op step = whole;
  step.flops = whole.flops / c;
  step.mem_bytes = whole.mem_bytes / c;
  step.mem_alloc = 0;
  step.mem_free = 0;
  graph::Op merge;
  merge.kind = graph::OpKind::Elementwise;
  merge.name = graph::OpName::CpMerge;
  merge.phase = whole.phase;
  merge.layer = whole.layer;
  merge.microbatch = whole.microbatch;
  merge.mem_transient = whole.mem_transient;
  const auto merged = [&](double bytes, double held) {
    graph::Op m = merge;
    m.mem_bytes = bytes;
    m.mem_transient += static_cast<std::int64_t>(held);
    return m;
  };

  // Per-step merge bytes: (step 0, each later step at the ranks' average), and what the merges
  // hold besides the saved tensors.
  double first = 0, later = 0, held = 0;
  if (forward) {
    first = te ? 4 * o : 6 * o;
    later = te ? (6 * o + 6 * o / 2) / 2 : (38 * o + (38 * o / 2 + 8 * o)) / 2;
    // TE: the c step outputs (the later ones 3/4 of the rows on average) and the output;
    // PyTorch: the fp32 output and two fp32 temporaries.
    held = te ? 2 * o * (1 + 0.75 * (c - 1)) + 2 * o : 12 * o;
  } else if (te) {
    first = 4 * (o + kv);
    later = (6 * o + 6 * o / 2) / 2 + (6 * kv / 2 + 6 * kv) / 2;
  } else {
    first = 10 * o + 18 * kv;
    later = (10 * o + (10 * o / 2 + 8 * o)) / 2 + ((10 * kv / 2 + 8 * kv) + 18 * kv) / 2;
    held = 4 * o + 8 * kv;  // the fp32 dq, and the dK, dV blocks received and sent
  }

  std::vector<graph::Op> ops;
  ops.reserve(static_cast<std::size_t>(2 * cp + 1));
  if (te && forward) {
    // All steps, then the output corrections while the step outputs are held.
    for (std::int64_t i = 0; i < cp; ++i) ops.push_back(step);
    ops.push_back(merged(first, held));
    for (std::int64_t i = 1; i < cp; ++i) ops.push_back(merged(later, held));
  } else {
    for (std::int64_t i = 0; i < cp; ++i) {
      ops.push_back(step);
      ops.push_back(merged(i == 0 ? first : later, held));
    }
    // PyTorch: the fp32 results cast back to bf16 (forward: the output; backward: dq, dK, dV).
    if (!te) ops.push_back(merged(forward ? 6 * o : 6 * (o + kv), held));
  }
  ops.back().mem_alloc = whole.mem_alloc;
  ops.back().mem_free = whole.mem_free;
  return ops;
}

}  // namespace scalescope::workload
