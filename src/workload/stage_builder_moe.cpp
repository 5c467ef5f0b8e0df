// StageBuilder: mixture-of-experts layers: router, token dispatch and combine over EP (all-to-all,
// all-gather, flex), grouped expert GEMMs, shared experts.
#include "workload/stage_builder.hpp"

#include <algorithm>
#include <vector>

namespace scalescope::workload::detail {

/// The expert-TP gather / scatter around the experts: the all-to-all dispatcher's (the
/// all-gather dispatcher's TP × EP gather already brings every token of the ETP group).
bool StageBuilder::etp_comm() const {
  return p_.etp() > 1 && p_.moe_token_dispatcher_type != MoeDispatcher::AllGather;
}

bool StageBuilder::allgather_dispatch() const {
  return p_.moe_token_dispatcher_type == MoeDispatcher::AllGather && p_.etp() * p_.ep() > 1;
}

/// The grouped expert GEMM [N, k]×[k, n] of the rank's local experts: N token copies in all,
/// N / E_local per expert (the shape the GEMM efficiency sees), one launch.
Op StageBuilder::grouped_gemm(OpName name, Phase phase, double tokens, double n, double k) const {
  Op op = gemm(name, phase, std::max(1.0, tokens / local_experts_), n, k);
  op.flops = 2 * tokens * n * k;
  const double weights = local_experts_ * k * n;
  op.mem_bytes = fp8_ ? gemm_input_bytes() * (tokens * k + weights) + 2 * tokens * n
                      : 2 * (tokens * k + weights + tokens * n);
  return op;
}

/// Dispatch (forward) or combine (backward of the combine: the same direction) of the token
/// copies over EP, with the all-to-all dispatcher: S = 2·h·(the busiest member's copies), the
/// send and receive buffers alive while it runs. The all-gather dispatcher gathers every
/// token of the EP group (and its routing) instead, and reduce-scatters the outputs back.
/// Returns kNone, or with `beside` the all-to-all issued beside the compute chain (the shared
/// experts' overlap), for the caller to wait for.
std::uint32_t StageBuilder::ep_exchange(Phase phase, OpName name, bool towards_experts,
                                        bool beside) {
  const double h = h_;
  if (p_.moe_token_dispatcher_type == MoeDispatcher::AllGather) {
    // MoEAllGatherTokenDispatcher: hidden states [T_l, h] (and the routing) of the whole
    // ETP × EP group gathered, the experts' outputs reduce-scattered back over it.
    if (!allgather_dispatch()) return kNone;
    const double bytes = 2 * h * load_.local_tokens * static_cast<double>(p_.ep() * p_.etp());
    Op op = collective(towards_experts ? OpKind::AllGather : OpKind::ReduceScatter, CommRole::TpEp,
                       name, phase, bytes);
    op.mem_transient = static_cast<std::int64_t>(bytes);
    chain(op);
    return kNone;
  }
  if (!ep_comm()) return kNone;
  Op op = collective(OpKind::AllToAll, CommRole::Ep, name, phase, 2 * h * load_.max_exchanged);
  const MoeKernels& k = moe_kernels_;
  const bool fwd = phase != Phase::Backward;
  op.kernels = name == OpName::EpDispatch ? (fwd ? k.dispatch_fwd : k.dispatch_bwd)
                                          : (fwd ? k.combine_fwd : k.combine_bwd);
  op.mem_transient = static_cast<std::int64_t>(2 * h * (load_.sent + load_.received));
  if (p_.moe_token_dispatcher_type == MoeDispatcher::Flex)  // DeepEP: per node, not per copy
    op.shape = {static_cast<std::uint32_t>(m_.moe_router_topk),
                static_cast<std::uint32_t>(m_.num_experts),
                graph::routing_groups(static_cast<std::uint32_t>(m_.moe_router_num_groups),
                                      static_cast<std::uint32_t>(m_.moe_router_group_topk))};
  if (beside) return add_beside(op);
  chain(op);
  return kNone;
}

/// Megatron's --moe-shared-expert-overlap: the shared experts' FC1 and activation run while
/// the dispatch all-to-all is in flight, their FC2 while the combine is (moe_layer.py,
/// shared_experts.py on their own stream); the backward likewise.
double StageBuilder::overlapped_shared() const {
  return p_.moe_shared_expert_overlap ? static_cast<double>(m_.moe_shared_expert_intermediate_size)
                                      : 0.0;
}

/// The all-to-all dispatcher's "permutation 2" (Megatron-Core token_dispatcher.py at d98e8a6,
/// MoEAlltoAllTokenDispatcher.dispatch_postprocess / combine_preprocess: with more than one
/// local expert and dropless routing, sort_chunks_by_idxs orders the received rows by local
/// expert after the dispatch (and the TP gather) and restores their order before the combine;
/// its backward is the inverse sort). Each pass reads and writes the N received bf16 rows
/// (4·N·h bytes), the dispatch's also their fp32 probabilities (8·N). The flex (DeepEP) and
/// all-gather dispatchers permute once on each side instead, which MoePermute / MoeUnpermute
/// carry.
void StageBuilder::sort_chunks(Phase phase, bool dispatch_side) {
  if (p_.moe_token_dispatcher_type != MoeDispatcher::AllToAll || local_experts_ <= 1) return;
  const double N = load_.computed;
  Op sort = memory_bound(OpKind::Elementwise, OpName::MoeSortChunks, phase,
                         4 * N * h_ + (dispatch_side ? 8 * N : 0.0));
  sort.kernels = dispatch_side ? moe_kernels_.sort_dispatch : moe_kernels_.sort_combine;
  chain(sort);
}

/// The MoE block's forward (Megatron MoELayer with MoEAlltoAllTokenDispatcher: router,
/// permute → A2A(EP) → AG(ETP) → grouped FC1, activation, grouped FC2 → RS(ETP) → A2A(EP) →
/// unpermute; token_dispatcher.py).
void StageBuilder::moe_forward(Phase phase, bool keep, double out_bytes, std::int64_t& mlp_alloc) {
  const double h = h_, Tl = load_.local_tokens;
  const double E = static_cast<double>(m_.num_experts);
  const double k = static_cast<double>(m_.moe_router_topk);
  const double glu = m_.gated_linear_unit ? 2.0 : 1.0;
  const double f = static_cast<double>(m_.expert_ffn()) / static_cast<double>(p_.etp());
  const double N = load_.computed;
  auto alloc = [&](double bytes) { return keep ? static_cast<std::int64_t>(bytes) : 0; };
  // Router: [Tl, h]·[h, E] logits (bf16 operands, the router's fp32 output kept), then the
  // score function, top-k and the auxiliary loss over [Tl, E].
  Op router = gemm(OpName::Router, phase, Tl, E, h);
  router.gemm_dtype = graph::GemmDtype::Bf16;
  router.mem_bytes = 2 * (Tl * h + E * h) + 4 * Tl * E;
  router.mem_alloc = alloc(4 * Tl * E);
  mlp_alloc += router.mem_alloc;
  chain(router);
  Op topk =
      memory_bound(OpKind::Elementwise, OpName::RouterTopk, phase, 3 * 4 * Tl * E, 8 * Tl * E);
  topk.mem_alloc = alloc(4 * Tl * E + 8 * Tl * k);  // probabilities and the routing map
  topk.kernels = moe_kernels_.router_topk_fwd;
  mlp_alloc += topk.mem_alloc;
  chain(topk);
  Op permute =
      memory_bound(OpKind::Elementwise, OpName::MoePermute, phase, 2 * Tl * h + 2 * load_.sent * h);
  // Megatron copies the tokens per expert to the host here (the dispatcher's split sizes, the
  // grouped GEMM's m_splits; DeepEP's dispatch waits for its receive counts): the host stops
  // issuing until the router and this permute ran (docs/model.md "Host issue").
  permute.host_sync = 1;
  permute.kernels = moe_kernels_.permute_fwd;
  chain(permute);
  const double shared = overlapped_shared();
  ovl_stage(3, -1);
  const std::uint32_t dispatch = ep_exchange(phase, OpName::EpDispatch, true, shared > 0);
  ovl_stage(5, -1);
  if (shared > 0) {
    mlp_fc1(shared, phase, keep, out_bytes, mlp_alloc, OpName::SharedFc1Gemm);
    wait_for_overlapped(dispatch);
  }
  if (etp_comm()) {
    Op gather =
        collective(OpKind::AllGather, CommRole::Etp, OpName::EtpAllGather, phase, 2 * h * N);
    gather.kernels = moe_kernels_.tp_gather;
    chain(gather);
  }
  sort_chunks(phase, true);
  fp8_cast(phase, N * h);
  Op fc1 = grouped_gemm(OpName::ExpertFc1Gemm, phase, N, f * glu, h);
  fc1.mem_alloc = alloc(gemm_input_bytes() * N * h + 2 * N * f * glu);  // its input and output
  mlp_alloc += fc1.mem_alloc;
  chain(fc1);
  Op act = expert_activation(phase, N, f);
  // moe_act: the activation's output is freed after FC2 ran and made again before FC2's
  // backward (moe_backward).
  act.mem_alloc = p_.recomputes(kRecomputeMoeAct) ? 0 : alloc(out_bytes * N * f);
  mlp_alloc += act.mem_alloc;
  chain(act);
  Op fc2 = grouped_gemm(OpName::ExpertFc2Gemm, phase, N, h, f);
  fc2.mem_transient = static_cast<std::int64_t>(2 * N * h);
  chain(fc2);
  sort_chunks(phase, false);
  if (etp_comm())
    chain(collective(OpKind::ReduceScatter, CommRole::Etp, OpName::EtpReduceScatter, phase,
                     2 * h * N));
  const std::uint32_t combine = ep_exchange(phase, OpName::EpCombine, false, shared > 0);
  ovl_stage(7, -1);
  if (shared > 0) {
    mlp_fc2(shared, phase, OpName::SharedFc2Gemm);
    wait_for_overlapped(combine);
  }
  // Unpermute: the k expert outputs of each token, weighted by their probabilities and summed;
  // the expert outputs stay for the probabilities' gradient.
  Op unpermute = memory_bound(OpKind::Elementwise, OpName::MoeUnpermute, phase,
                              2 * load_.sent * h + 2 * Tl * h, 2 * load_.sent * h);
  unpermute.mem_alloc = alloc(2 * load_.sent * h);
  unpermute.kernels = moe_kernels_.unpermute_fwd;
  mlp_alloc += unpermute.mem_alloc;
  chain(unpermute);
}

/// The MoE block's backward, the forward's collectives in reverse.
void StageBuilder::moe_backward(std::int64_t l) {
  const double h = h_, Tl = load_.local_tokens;
  const double E = static_cast<double>(m_.num_experts);
  const double glu = m_.gated_linear_unit ? 2.0 : 1.0;
  const double f = static_cast<double>(m_.expert_ffn()) / static_cast<double>(p_.etp());
  const double N = load_.computed;
  const Phase B = Phase::Backward;
  Op unpermute = memory_bound(OpKind::Elementwise, OpName::MoeUnpermute, B,
                              2 * Tl * h + 2 * 2 * load_.sent * h);
  unpermute.kernels = moe_kernels_.unpermute_bwd;
  chain(unpermute);
  const double shared = overlapped_shared();
  const std::uint32_t combine = ep_exchange(B, OpName::EpCombine, true, shared > 0);
  ovl_stage(-1, 2);
  if (shared > 0) {
    ready_[param_key(l, kFc2)] = mlp_fc2_backward(shared, OpName::SharedFc2Gemm);
    wait_for_overlapped(combine);
  }
  if (etp_comm())
    chain(collective(OpKind::AllGather, CommRole::Etp, OpName::EtpAllGather, B, 2 * h * N));
  sort_chunks(B, false);  // the backward of the un-sort before the combine
  if (p_.recomputes(kRecomputeMoeAct)) {
    // moe_act: the activation again from the kept FC1 output; FC2's wgrad reads it.
    Op act = expert_activation(Phase::Recompute, N, f);
    act.mem_alloc = static_cast<std::int64_t>(gemm_input_bytes() * N * f);
    rerun_alloc_ += act.mem_alloc;
    chain(act);
  }
  fp8_cast(B, N * h);
  Op fc2_dgrad = grouped_gemm(OpName::ExpertFc2Gemm, B, N, f, h);
  chain(fc2_dgrad);
  Op fc2_wgrad = grouped_gemm(OpName::ExpertFc2Gemm, B, N, h, f);
  fc2_wgrad.shape = {static_cast<std::uint32_t>(f), static_cast<std::uint32_t>(h),
                     static_cast<std::uint32_t>(std::max(1.0, N / local_experts_))};
  fc2_wgrad.mem_bytes += 2 * p_.grad_bytes() * local_experts_ * f * h;
  wgrad(fc2_wgrad);
  chain(shaped(memory_bound(OpKind::Elementwise, OpName::ExpertActivation, B, 2 * N * f * (glu + 2),
                            8 * N * f),
               N, f, glu));
  fp8_cast(B, N * f * glu);
  Op fc1_dgrad = grouped_gemm(OpName::ExpertFc1Gemm, B, N, h, f * glu);
  fc1_dgrad.mem_transient = static_cast<std::int64_t>(2 * N * h);
  chain(fc1_dgrad);
  Op fc1_wgrad = grouped_gemm(OpName::ExpertFc1Gemm, B, N, f * glu, h);
  fc1_wgrad.shape = {static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(f * glu),
                     static_cast<std::uint32_t>(std::max(1.0, N / local_experts_))};
  fc1_wgrad.mem_bytes += 2 * p_.grad_bytes() * local_experts_ * h * f * glu;
  ready_[param_key(l, kExperts)] = wgrad(fc1_wgrad);
  sort_chunks(B, true);  // the backward of the dispatch's sort
  if (etp_comm()) {
    Op scatter =
        collective(OpKind::ReduceScatter, CommRole::Etp, OpName::EtpReduceScatter, B, 2 * h * N);
    scatter.kernels = moe_kernels_.tp_gather;
    chain(scatter);
  }
  ovl_stage(-1, 4);
  const std::uint32_t dispatch = ep_exchange(B, OpName::EpDispatch, false, shared > 0);
  ovl_stage(-1, 6);
  if (shared > 0) {
    ready_[param_key(l, kFc1)] = mlp_fc1_backward(shared, OpName::SharedFc1Gemm);
    wait_for_overlapped(dispatch);
  }
  Op permute =
      memory_bound(OpKind::Elementwise, OpName::MoePermute, B, 2 * load_.sent * h + 2 * Tl * h);
  permute.kernels = moe_kernels_.permute_bwd;
  chain(permute);
  Op topk = memory_bound(OpKind::Elementwise, OpName::RouterTopk, B, 3 * 4 * Tl * E, 8 * Tl * E);
  topk.kernels = moe_kernels_.router_topk_bwd;
  chain(topk);
  chain(gemm(OpName::Router, B, Tl, h, E));
  Op rw = gemm(OpName::Router, B, h, E, Tl);
  rw.gemm_dtype = graph::GemmDtype::Bf16;
  rw.mem_bytes += 2 * p_.grad_bytes() * h * E;
  ready_[param_key(l, kRouter)] = chain_weight_grad(rw);
}

/// The experts' activation over N rows of width f: reads FC1's output (φ₁·f), writes FC2's
/// input.
Op StageBuilder::expert_activation(Phase phase, double N, double f) const {
  const double glu = m_.gated_linear_unit ? 2.0 : 1.0;
  return shaped(memory_bound(OpKind::Elementwise, OpName::ExpertActivation, phase,
                             2 * N * f * glu + gemm_input_bytes() * N * f, 8 * N * f),
                N, f, glu);
}

/// The "moe" module: an MoE layer's whole block checkpointed; "shared_experts": its shared
/// MLP (not with moe_shared_expert_overlap, whose halves run beside the all-to-alls).
bool StageBuilder::checkpoints_moe(std::int64_t l) const {
  return p_.recomputes(kRecomputeMoe) && m_.is_moe_layer(l);
}

bool StageBuilder::checkpoints_shared(std::int64_t l) const {
  return p_.recomputes(kRecomputeSharedExperts) && m_.is_moe_layer(l) && overlapped_shared() == 0;
}

}  // namespace scalescope::workload::detail
