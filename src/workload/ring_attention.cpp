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

  // Merge bytes of step 0 and of each later step (at the ranks' average), of the final casts,
  // and what the merges hold besides the saved tensors.
  double first = 0, later = 0, casts = 0, held = 0;
  if (forward) {
    first = te ? 4 * o : 6 * o;
    later = te ? (6 * o + 6 * o / 2) / 2 : (38 * o + (38 * o / 2 + 8 * o)) / 2;
    casts = te ? 0 : 6 * o;
    // TE: the c step outputs (the later ones 3/4 of the rows on average) and the output;
    // PyTorch: the fp32 output and two fp32 temporaries.
    held = te ? 2 * o * (1 + 0.75 * (c - 1)) + 2 * o : 12 * o;
  } else if (te) {
    first = 4 * (o + kv);
    later = (6 * o + 6 * o / 2) / 2 + (6 * kv / 2 + 6 * kv) / 2;
  } else {
    first = 10 * o + 18 * kv;
    later = (10 * o + (10 * o / 2 + 8 * o)) / 2 + ((10 * kv / 2 + 8 * kv) + 18 * kv) / 2;
    casts = 6 * (o + kv);
    held = 4 * o + 8 * kv;  // the fp32 dq, and the dK, dV blocks received and sent
  }
  graph::Op steps = whole;
  steps.mem_alloc = 0;
  steps.mem_free = 0;
  graph::Op merge;
  merge.kind = graph::OpKind::Elementwise;
  merge.name = graph::OpName::CpMerge;
  merge.phase = whole.phase;
  merge.layer = whole.layer;
  merge.microbatch = whole.microbatch;
  merge.mem_bytes = first + (c - 1) * later + casts;
  merge.mem_transient = whole.mem_transient + static_cast<std::int64_t>(held);
  merge.mem_alloc = whole.mem_alloc;
  merge.mem_free = whole.mem_free;
  return {steps, merge};
}

}  // namespace scalescope::workload
