#include "workload/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "core/error.hpp"

namespace scalescope::workload {

std::vector<double> expert_load_shares(std::int64_t experts, double skew, std::int64_t seed) {
  SCALESCOPE_EXPECTS(experts > 0 && skew >= 0);
  const auto n = static_cast<std::size_t>(experts);
  std::vector<double> w(n, 1.0 / static_cast<double>(experts));
  if (skew == 0) return w;
  std::mt19937_64 gen(static_cast<std::uint64_t>(seed));
  // Uniform in (0, 1] from the top 53 bits; Box–Muller pairs.
  const auto uniform = [&] { return (static_cast<double>(gen() >> 11) + 1.0) * 0x1.0p-53; };
  double sum = 0;
  for (std::size_t e = 0; e < n; ++e) {
    const double u1 = uniform(), u2 = uniform();
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    w[e] = std::exp(skew * z);
    sum += w[e];
  }
  for (double& x : w) x /= sum;
  return w;
}

std::vector<double> expert_copies(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t,
                                  double local_tokens) {
  SCALESCOPE_EXPECTS(m.moe());
  std::vector<double> w =
      expert_load_shares(m.num_experts, t.moe_expert_load_skew, t.moe_expert_load_seed);
  const double copies = static_cast<double>(p.ep()) * local_tokens *
                        static_cast<double>(m.moe_router_topk);  // routed in the EP group
  const double cap = m.moe_expert_capacity_factor > 0 ? m.moe_expert_capacity_factor * copies /
                                                            static_cast<double>(m.num_experts)
                                                      : INFINITY;
  for (double& x : w) x = std::min(cap, x * copies);
  return w;
}

MoeLoad moe_load(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t,
                 std::int64_t ep_rank, double local_tokens) {
  SCALESCOPE_EXPECTS(m.moe() && ep_rank >= 0 && ep_rank < p.ep());
  const double ep = static_cast<double>(p.ep());
  const std::vector<double> kept_by_expert = expert_copies(m, p, t, local_tokens);
  const std::int64_t per_rank = m.num_experts / p.ep();
  std::vector<double> received(static_cast<std::size_t>(p.ep()), 0.0);
  double kept = 0;
  for (std::int64_t e = 0; e < m.num_experts; ++e) {
    const double x = kept_by_expert[static_cast<std::size_t>(e)];
    received[static_cast<std::size_t>(e / per_rank)] += x;
    kept += x;
  }
  MoeLoad l;
  l.local_tokens = local_tokens;
  l.sent = kept / ep;  // every rank routes alike: the same share of its copies survives
  l.received = received[static_cast<std::size_t>(ep_rank)];
  l.computed = l.received * static_cast<double>(p.etp());
  l.max_exchanged = std::max(l.sent, *std::max_element(received.begin(), received.end()));
  return l;
}

}  // namespace scalescope::workload

namespace scalescope::workload {

// Megatron-LM@d98e8a6 megatron/core/transformer/moe/{router.py, moe_utils.py,
// token_dispatcher.py, fused_a2a.py}; TransformerEngine@d0067d0 pytorch/{router.py,
// permutation.py, csrc/extensions/router.cpp, triton/permutation.py}. Each count names the lines
// it reads; "NCCL" is one collective launch, "D2H" one cudaMemcpyAsync.
MoeKernels moe_kernels(const ModelSpec& m, const ParallelPlan& p) {
  MoeKernels k;
  const bool router_fused = p.moe_router_fusion, permute_fused = p.moe_permute_fusion;
  const bool aux = m.moe_aux_loss_coeff > 0;  // router.py is_aux_loss_enabled l.403-408
  // The aux loss's token counts are all-reduced over TP × CP (moe_utils.py l.278-281;
  // reduce_from_tensor_model_parallel_region returns at once on a group of one).
  const int aux_nccl = p.tp() * p.cp() > 1 ? 1 : 0;

  // ---- router, after the gating GEMM (router.py routing l.746-837) ----
  int topk = 0;
  if (router_fused) {
    // One fused_topk_with_score_function kernel (moe_utils.py l.883-885; TE router.cpp
    // l.107-146). Aux loss: fused_compute_score_for_moe_aux_loss 1 (l.960-1016),
    // routing_map.sum(0) 1 + the TP×CP all-reduce (l.278-281), fused_moe_aux_loss 1
    // (l.133-143), the tracker's record: aux_loss / coeff 1 and its indexed += 1
    // (router.py l.597-604; moe_logging.py l.94-128).
    topk = 1 + (aux ? 5 + aux_nccl : 0);
  } else {
    // Softmax top-k: topk, softmax over [N, k], zeros_like + scatter of the probabilities,
    // zeros_like, .int(), scatter, .bool() of the routing map: 8 (moe_utils.py l.883-955);
    // group-limited routing adds view-topk, sum, topk, zeros_like, scatter_, the expanding copy,
    // .bool(), ~ and masked_fill: 8 (l.673-729). Aux loss: its scores (softmax, topk, zeros_like,
    // .int(), scatter, .bool(): 6, l.960-1016) and the loss (routing_map.sum 1, the all-reduce,
    // probs.sum, mul, sum, scale 4, the record 2: 7, l.269-289, 146-150).
    topk = 8 + (m.moe_router_num_groups > 0 ? 8 : 0) + (aux ? 13 + aux_nccl : 0);
  }
  k.router_topk_fwd = static_cast<std::uint16_t>(topk);
  // Backward (autograd of the above): the fused top-k's backward kernel 1 (TE router.py
  // l.154-172), and with the aux loss the scores' and the loss's backward kernels 2 (l.382-398,
  // 478-489), MoEAuxLossAutoScaler.backward's ones_like · scale 2 (moe_utils.py l.311-328) and
  // the sum of the two gradients reaching the logits 1. Unfused: the scatter's gather, softmax's
  // backward, top-k's zeros + scatter 4, and with the aux loss the AutoScaler's 2, the loss
  // chain's mul, sum and broadcast 3, the scores' softmax backward 1, the gradient sum 1.
  k.router_topk_bwd =
      static_cast<std::uint16_t>(router_fused ? 1 + (aux ? 5 : 0) : 4 + (aux ? 7 : 0));

  // The all-gather dispatcher keeps the derived counts of its ops (one kernel each; its
  // permutation and gathers are not counted from the code).
  if (p.moe_token_dispatcher_type == MoeDispatcher::AllGather) return k;
  const bool comm = p.ep() * p.etp() > 1;
  if (p.moe_token_dispatcher_type == MoeDispatcher::Flex) {
    // DeepEP (_DeepepManager, token_dispatcher.py l.1225-1468; fused_a2a.py l.72-213): the
    // top-k indices 1 (l.1300), get_dispatch_layout 1 and notify_dispatch 1, then the host
    // spins until the receive counts arrive (DeepEP csrc/legacy/buffer.hpp l.580-596: this op's
    // host synchronization), the indices → multihot map (fused_indices_to_multihot 1, l.1425;
    // unfused 11 with boolean indexing, l.1337-1365) and the permutation (fused: make_row_id_map
    // 3 + permute 1; unfused: transpose, argsort, %, transpose, gather, index_select 6). The
    // model issues the map and the permutation before the dispatch, DeepEP after it.
    k.permute_fwd = static_cast<std::uint16_t>(3 + (permute_fused ? 1 + 4 : 11 + 6));
    k.dispatch_fwd = 1;  // the dispatch kernel (buffer.hpp l.638)
    k.combine_fwd = 2;   // cached_notify_combine 1 + combine 1 (buffer.hpp l.783, 812)
    k.dispatch_bwd = 2;  // FusedDispatch.backward = a cached combine (fused_a2a.py l.143-163)
    k.combine_bwd = 1;   // FusedCombine.backward = a cached dispatch (l.194-212)
  } else {
    // All-to-all (MoEAlltoAllTokenDispatcher, token_dispatcher.py l.375-962). preprocess
    // (l.501-622): routing_map.sum(0), the input splits' sum, the gathered counts' contiguous
    // slice and three sums: 6, and the counts' all-gather over TP × EP (NCCL); their D2H copies
    // on the side stream: 4 fused, 5 unfused (l.921-956); the host waits for them before the
    // all-to-all (l.596, 958: this op's host synchronization). Permutation 1 (moe_utils.py
    // l.460-486): fused make_row_id_map 3 + permute 1 (TE triton/permutation.py l.73-174),
    // unfused 6. Without EP or expert TP only the count and its D2H copy remain.
    const int pre = comm ? 6 + 1 + (permute_fused ? 4 : 5) : 2;
    k.permute_fwd = static_cast<std::uint16_t>(pre + (permute_fused ? 4 : 6));
    if (comm) {
      k.dispatch_fwd = 2;  // tokens and probabilities (l.705, 718)
      k.combine_fwd = 1;   // l.864
      k.dispatch_bwd = 2;  // their gradients
      k.combine_bwd = 1;
    }
    k.tp_gather =
        2;  // gather_from_sequence_parallel_region of tokens and probabilities (l.739-752)
    // Permutation 2 over the local experts (l.778-788, 813-822): fused make_chunk_sort_map +
    // sort_chunks_by_map 2 each side (TE permutation.py l.1110-1160); unfused torch.cat of the
    // chunks, tokens and probabilities 2 after the dispatch, tokens 1 before the combine.
    k.sort_dispatch = 2;
    k.sort_combine = static_cast<std::uint16_t>(permute_fused ? 2 : 1);
  }
  // Unpermutation (moe_utils.py l.601-618): fused unpermute 1; unfused zeros + scatter_add 2;
  // the shared experts' output added 1 (token_dispatcher.py l.904-907). Backward: one permute-
  // like kernel fused, one gather unfused; the permutation's backward: one unpermute kernel
  // fused, zeros + index_add unfused.
  const int shared_add = m.moe_shared_expert_intermediate_size > 0 ? 1 : 0;
  k.unpermute_fwd = static_cast<std::uint16_t>((permute_fused ? 1 : 2) + shared_add);
  k.unpermute_bwd = 1;
  k.permute_bwd = static_cast<std::uint16_t>(permute_fused ? 1 : 2);
  return k;
}

}  // namespace scalescope::workload
