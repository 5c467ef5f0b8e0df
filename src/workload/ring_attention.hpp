#pragma once
/// Context parallelism's ring attention as the kernels one rank runs (docs/model.md "Context
/// parallelism"): the fused attention of this rank's L = s/c queries against the whole sequence,
/// split into the c ring steps and the merges between them. Shared by the built-in builder
/// (Transformer Engine's ring) and the capture lowering (PyTorch's).
#include <cstdint>
#include <vector>

#include "graph/op.hpp"

namespace scalescope::workload {

/// Whose ring: Transformer Engine's AttnFuncWithCPAndKVP2P (Megatron-Core) or PyTorch's
/// context_parallel (torch/distributed/tensor/experimental/_attention.py, torchtitan).
enum class RingImpl : std::uint8_t { TransformerEngine, PyTorch };

/// Element counts on this rank: the attention's queries and its output (b · L · heads · dv / t;
/// the same as the queries' when dv = dqk) and one K plus one V block (b · L · kv heads ·
/// (dqk + dv) / t).
struct RingTensors {
  double out = 0;
  double kv = 0;
};

/// The ops replacing fused attention op `whole` (this rank's share of one pass: forward,
/// recompute or backward) under CP degree `cp` > 1 with the load-balanced causal layout (rank r
/// holds sequence chunks r and 2c − 1 − r): the ring's c steps, then its merges. Step 0 is the
/// causal L × L block, each later step an unmasked L × L/2 (the first half of a received K, V
/// block) or L/2 × L (the second half of the queries) block: the same FLOPs each, so the c steps
/// are `whole` (its FLOPs and bytes, at the rate of blocks of L) as one op; the memory-bound merges
/// are one OpName::CpMerge op, each step counted at the ranks' average (half of the steps after
/// the first are full-query steps, half half-query ones), carrying `whole`'s allocation and
/// release and, beside its transient, the merges' own temporaries. Two ops rather than 2c keep a
/// CP-16 graph a third of the size; they run back to back on the compute stream either way, so
/// only the further 2c − 2 kernel launches (2 µs each on the presets) are not charged.
///
/// Transformer Engine (context_parallel.py; bf16 throughout):
/// - forward: the c steps, then the output corrections, one per step, after the loop: the first
///   copies the step's output (2 + 2 B per element), the others add the rescaled step output
///   (read 2 B, read and write 2 B); the c step outputs are held until then;
/// - backward: each step followed by its dq add (6 B per query element, bf16) and its dK, dV add
///   into the block travelling the ring (6 B per element).
/// PyTorch (_SDPAMerger, convert_to_f32):
/// - forward: after each step the fp32 merge out − sigmoid(Δlse)·(out − block_out): step 0 the
///   fp32 copy (2 + 4 B per element), later ones 38 B per element and, on half-query steps,
///   the concatenation back into the whole output (+8 B per element of the whole); the final
///   cast back (4 + 2 B); the fp32 output and two fp32 temporaries alive while merging;
/// - backward: each step's gradients accumulated in fp32 (grad_query += grad_query_: read 4 + 2,
///   write 4 B; on half-query steps the concatenation, +8 B per element of the whole), dK and dV
///   added to the fp32 block received and concatenated into the next send (read 4 + 2, write 4,
///   copy 4 + 4 B); the final casts of dq, dK, dV to bf16 (4 + 2 B per element).
std::vector<graph::Op> ring_attention(const graph::Op& whole, std::int64_t cp, RingImpl impl,
                                      const RingTensors& tensors);

}  // namespace scalescope::workload
