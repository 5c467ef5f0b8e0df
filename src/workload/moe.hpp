#pragma once
/// Mixture-of-experts token routing as scalescope models it: how many tokens each expert and each
/// expert-parallel rank receives (docs/model.md "Mixture of experts").
#include <cstdint>
#include <vector>

#include "workload/model_spec.hpp"
#include "workload/parallel_plan.hpp"

namespace scalescope::workload {

/// The share of the routed tokens each of `experts` experts receives: 1/E each when `skew` is 0,
/// else exp(σ·z_e) normalised, z_e standard normal from mt19937_64(seed) through Box–Muller (both
/// fully specified, so the draw is the same on every platform and process).
std::vector<double> expert_load_shares(std::int64_t experts, double skew, std::int64_t seed);

/// Tokens of one MoE layer's forward for one micro-batch, as seen by one rank.
struct MoeLoad {
  double local_tokens = 0;  ///< tokens entering the layer on this rank (its SP / CP share)
  double sent = 0;          ///< token copies this rank dispatches (local_tokens · k, less drops)
  double received = 0;      ///< token copies its local experts receive from its EP group
  double computed = 0;      ///< token copies its expert GEMMs process (received · ETP)
  /// The largest send or receive of any rank of the EP group: with NCCL's grouped point-to-point
  /// all-to-all the busiest member sets the time, so every member's op carries it.
  double max_exchanged = 0;
};

/// The token copies each of the E experts keeps in one MoE layer's forward of one micro-batch
/// when every rank of the EP group routes `local_tokens` tokens (shares of
/// expert_load_shares, capped by the capacity factor as moe_load describes).
std::vector<double> expert_copies(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t,
                                  double local_tokens);

/// The load of EP rank `ep_rank` (its experts are [ep_rank·E/EP, (ep_rank + 1)·E/EP), Megatron's
/// contiguous assignment); `local_tokens` tokens per rank. With a capacity factor c > 0 each
/// expert keeps at most c·(EP·local_tokens·k)/E of the copies routed to it (Megatron's drop
/// policy without padding).
MoeLoad moe_load(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t,
                 std::int64_t ep_rank, double local_tokens);

}  // namespace scalescope::workload

namespace scalescope::workload {

/// Kernels one MoE layer launches for one micro-batch beyond the ops' own (Op::kernels), counted
/// from Megatron-Core's code at NVIDIA/Megatron-LM@d98e8a6 and Transformer Engine's at
/// NVIDIA/TransformerEngine@d0067d0 (docs/cost-model.md §1.6 "MoE kernel counts"; the reading is
/// docs/research/2026-12-04-moe_host.md §B), each the op's whole count (Op::kernels). Collective
/// launches (NCCL) count as kernels: the host launches them alike. 0 = the op's derived count.
struct MoeKernels {
  std::uint16_t router_topk_fwd = 0;  ///< RouterTopk: score function, top-k, aux loss
  std::uint16_t permute_fwd = 0;      ///< MoePermute: counts, their D2H copies, permutation
  std::uint16_t dispatch_fwd = 0;     ///< EpDispatch: the token (and probability) exchange
  std::uint16_t tp_gather = 0;        ///< EtpAllGather forward / EtpReduceScatter backward
  std::uint16_t sort_dispatch = 0;    ///< MoeSortChunks after the dispatch (and its backward)
  std::uint16_t sort_combine = 0;     ///< MoeSortChunks before the combine (and its backward)
  std::uint16_t combine_fwd = 0;      ///< EpCombine forward
  std::uint16_t unpermute_fwd = 0;    ///< MoeUnpermute forward (with the shared experts' add)
  std::uint16_t unpermute_bwd = 0;
  std::uint16_t combine_bwd = 0;
  std::uint16_t dispatch_bwd = 0;
  std::uint16_t permute_bwd = 0;
  std::uint16_t router_topk_bwd = 0;
};

/// The counts for this model and plan: the router's with or without --moe-router-fusion, aux loss
/// on when model.moe_aux_loss_coeff > 0; the all-to-all or flex (DeepEP) dispatcher's with or
/// without --moe-permute-fusion (the all-gather dispatcher's ops keep their derived counts).
MoeKernels moe_kernels(const ModelSpec& m, const ParallelPlan& p);

}  // namespace scalescope::workload
