// StageBuilder: op construction (GEMMs, memory-bound ops, collectives), the main chain and the ops
// beside it, TP / SP collectives with userbuffers overlap, fp8 casts, and the issue keys of
// Megatron's EP overlap (combined 1F1B).
#include "workload/stage_builder.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace scalescope::workload::detail {

Op StageBuilder::base(OpKind kind, OpName name, Phase phase) const {
  Op op;
  op.kind = kind;
  op.name = name;
  op.phase = phase;
  op.layer = cur_layer_ < 0 ? graph::kNoIndex : static_cast<std::uint16_t>(cur_layer_);
  op.microbatch = cur_mb_ < 0 ? graph::kNoIndex : static_cast<std::uint16_t>(cur_mb_);
  return op;
}

/// GEMM [m,k]×[k,n]: 2·m·n·k FLOPs, bf16 operands and result through HBM. Under fp8 the
/// transformer layers' linear GEMMs (QKV, out-proj, FC1, FC2, forward and backward) take fp8
/// operands (1 byte) and write bf16, as Transformer Engine runs them; the logits GEMM stays
/// bf16 (Megatron keeps the output layer out of fp8).
Op StageBuilder::gemm(OpName name, Phase phase, double m, double n, double k) const {
  Op op = base(OpKind::Gemm, name, phase);
  op.shape = {static_cast<std::uint32_t>(m), static_cast<std::uint32_t>(n),
              static_cast<std::uint32_t>(k)};
  op.flops = 2 * m * n * k;
  op.mem_bytes = 2 * (m * k + k * n + m * n);
  if (fp8_ && name != OpName::LogitsGemm && name != OpName::Router) {
    op.gemm_dtype = t_.precision == Precision::Nvfp4    ? graph::GemmDtype::Nvfp4
                    : t_.fp8_recipe == Fp8Recipe::Mxfp8 ? graph::GemmDtype::Mxfp8
                                                        : graph::GemmDtype::Fp8;
    op.mem_bytes = gemm_input_bytes() * (m * k + k * n) + 2 * m * n;
  }
  op.comm_sms = std::exchange(ub_sms_, std::uint8_t{0});
  // EP overlap with DeepEP: a GEMM of a layer pair runs beside the other micro-batch's
  // dispatch or combine, whose kernels take kDeepEpSms SMs (Megatron-Core's MoE report,
  // arXiv 2603.07685: "DeepEP uses 20 SMs per GPU and introduces roughly 20% GEMM-efficiency
  // overhead"); every GEMM of the pair is charged, overlapping or not.
  if (ovl_ && ovl_slot_ >= 1 && ovl_slot_ <= ovl_pairs_ &&
      p_.moe_token_dispatcher_type == MoeDispatcher::Flex)
    op.comm_sms = std::max(op.comm_sms, kDeepEpSms);
  return op;
}

/// A TP collective run by userbuffers rather than NCCL: its kernel's SMs are charged on the
/// GEMM beside it (that GEMM's comm_sms), not as an NCCL kernel's (Op::comm_sms).
Op StageBuilder::userbuffers(Op comm, std::uint8_t sms) {
  comm.comm_sms = sms;
  return comm;
}

/// The SP all-gather before a column-parallel GEMM: beside the GEMM under userbuffers (returns
/// the gather, which the op after the GEMM waits for), else blocking (returns kNone).
std::uint32_t StageBuilder::gather_beside_gemm(Phase phase, double bytes) {
  if (!ub_) {
    sp_gather(phase, bytes);
    return kNone;
  }
  ub_sms_ = kRingExchangeSms;
  return add_free(userbuffers(collective(OpKind::AllGather, CommRole::Tp, OpName::TpAllGather,
                                         phase, bytes < 0 ? hidden_bytes_ : bytes),
                              kRingExchangeSms),
                  {chain_});
}

void StageBuilder::wait_for_overlapped(std::uint32_t comm) {
  if (comm != kNone) wait_for(comm);
}

/// A row-parallel GEMM and its TP reduction: pipelined chunk by chunk under userbuffers (the
/// reduction starts with the GEMM, the op after both waits for both), else one after the other.
void StageBuilder::gemm_then_reduce(Op gemm_op, Phase phase) {
  if (!ub_) {
    chain(gemm_op);
    if (tp_comm()) chain(tp_reduce(phase));
    return;
  }
  std::vector<std::uint32_t> start = wait_next_;
  start.push_back(chain_);
  gemm_op.comm_sms = kPipelineSms;
  chain(gemm_op);
  wait_for(add_free(userbuffers(tp_reduce(phase), kPipelineSms), start));
}

/// Transformer Engine's cast of `elements` bf16 values to fp8 (read 2 B, write 1 B), under
/// fp8 only: with delayed scaling the amax update fused in; tensorwise (current scaling) reads
/// the tensor once more for its amax first; mxfp8 and blockwise write their scales too (one
/// byte per 32 values, one fp32 per 128).
void StageBuilder::fp8_cast(Phase phase, double elements) {
  if (fp8_)
    chain(memory_bound(OpKind::Elementwise, OpName::Fp8Cast, phase,
                       (2 + gemm_input_bytes() + fp8_recipe_bytes(false)) * elements));
}

/// A recipe's bytes per value beyond reading bf16 and writing the quantized values: tensorwise
/// reads the tensor (2 B) for its amax; mxfp8 writes a 1-byte scale per 32 values, blockwise an
/// fp32 one per 128 (a weight's per 128 × 128 block), for each fp8 layout written (`weight`:
/// both). NVFP4 (TE's NVFP4BlockScaling, docs/features/low_precision_training/nvfp4 at
/// d0067d0): a per-tensor amax first (2 B read, as tensorwise) and the E4M3 scale per 16 values
/// inside gemm_input_bytes.
double StageBuilder::fp8_recipe_bytes(bool weight) const {
  if (t_.precision == Precision::Nvfp4) return 2;
  switch (t_.fp8_recipe) {
    case Fp8Recipe::Tensorwise:
      return 2;
    case Fp8Recipe::Mxfp8:
      return (weight ? 2.0 : 1.0) / 32;
    case Fp8Recipe::Blockwise:
      return weight ? 2 * 4.0 / (128 * 128) : 4.0 / 128;
    default:
      return 0;
  }
}

Op StageBuilder::shaped(Op op, double a, double b, double c) {
  op.shape = {static_cast<std::uint32_t>(std::llround(a)),
              static_cast<std::uint32_t>(std::llround(b)),
              static_cast<std::uint32_t>(std::llround(c))};
  return op;
}

Op StageBuilder::memory_bound(OpKind kind, OpName name, Phase phase, double bytes,
                              double flops) const {
  Op op = base(kind, name, phase);
  op.mem_bytes = bytes;
  op.flops = flops;
  return op;
}

Op StageBuilder::collective(OpKind kind, CommRole role, OpName name, Phase phase,
                            double bytes) const {
  Op op = base(kind, name, phase);
  op.role = role;
  op.stream = graph::stream_of(role);
  op.comm_bytes = bytes;
  return op;
}

/// Adds an op on the main chain: it depends on the previous chain op, and becomes the chain.
/// It also takes the pending allocation (ZeRO-3's unsharded gradients of a unit).
std::uint32_t StageBuilder::chain(Op op, std::vector<std::uint32_t> extra) {
  if (chain_ != kNone) extra.push_back(chain_);
  extra.insert(extra.end(), wait_next_.begin(), wait_next_.end());
  wait_next_.clear();
  op.mem_alloc += std::exchange(pending_alloc_, 0);
  chain_ = add_free(op, extra);
  return chain_;
}

/// Frees `bytes` when the chain's last op is issued (host order).
void StageBuilder::free_at_chain(double bytes) {
  prog_.ops[chain_].mem_free += static_cast<std::int64_t>(std::ceil(bytes));
}

std::uint32_t StageBuilder::add_free(const Op& op, std::vector<std::uint32_t> deps) {
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  if (keyed_)
    keys_.push_back((seg_ << 32) | (ovl_ ? static_cast<std::uint64_t>(ovl_slot_ * 16 + ovl_pos_)
                                         : std::uint64_t{0}));
  return prog_.add(op, deps);
}

// A combined step emits one micro-batch's forward and another's backward as two independent
// chains (each from the chain before the step) and tags their ops with where Megatron's
// TransformerLayerSchedulePlan.run issues them; after the schedule the program is put in that
// issue order (issue_in_key_order). Per layer pair (forward layer i ascending, backward layer
// popped from the top), positions: 0 the backward's combine (bias-dropout-add and unpermute
// backward, the all-to-all), 1 the forward's attention node (attention, pre-MLP norm, router,
// permute), 2 the backward's experts, 3 the forward's dispatch all-to-all, 4 the backward's
// delayed expert wgrads and dispatch all-to-all, 5 the forward's experts and combine
// all-to-all, 6 the backward's attention node, 7 the forward's unpermute and bias-dropout-add
// (Megatron runs them in the combine node on the communication stream; here on the compute
// stream after the backward's attention, so that it does not wait for the all-to-all).
// Unpaired layers follow the pairs, the backward's first; the pre-process (embedding forward,
// then output-layer backward) precedes them, the post-process follows.
void StageBuilder::ovl_layer(std::int64_t index) {
  if (!ovl_) return;
  const std::int64_t pairs = ovl_pairs_;
  if (index < pairs) {
    ovl_slot_ = index + 1;
    ovl_pos_ = ovl_fwd_ ? 1 : 0;
  } else {
    ovl_slot_ =
        ovl_fwd_ ? pairs + 1 + (ovl_nb_ - pairs) + (index - pairs) : pairs + 1 + (index - pairs);
    ovl_pos_ = 0;
  }
}

/// The pre-process (pre = true) or post-process slot of the step.
void StageBuilder::ovl_ends(bool pre) {
  if (!ovl_) return;
  ovl_slot_ = pre ? 0 : ovl_nb_ + ovl_nf_ - ovl_pairs_ + 1;
  ovl_pos_ = ovl_fwd_ ? 0 : 1;
}

/// Moves the forward (f ≥ 0) or backward (b ≥ 0) context to a position of its layer pair.
void StageBuilder::ovl_stage(int f, int b) {
  if (!ovl_) return;
  const int pos = ovl_fwd_ ? f : b;
  if (pos >= 0) ovl_pos_ = pos;
}

/// A weight-gradient GEMM: on the chain, or under delay_wgrad_compute beside it (nothing on
/// the chain waits for it) at the backward's position 4.
std::uint32_t StageBuilder::wgrad(const Op& op) {
  if (defer_wgrad_) {  // a grouped GEMM [k, n] over m rows per expert: it reads X and dY
    const double rows = static_cast<double>(op.shape[2]) * local_experts_;
    return defer_weight_grad(op, {}, 2 * rows * (op.shape[0] + op.shape[1]));
  }
  if (!p_.delay_wgrad_compute) return chain(op);
  const int pos = ovl_pos_;
  ovl_stage(-1, 4);
  const std::uint32_t id = add_beside(op);
  ovl_pos_ = pos;
  return id;
}

/// A weight-gradient op of a split backward's input half (zero bubble's I action): issued at
/// its W action (defer_seg_) rather than on the chain, after the ops it reads (`deps` and the
/// chain so far). The tensors it reads, `held` bytes (its input and output gradient; by default
/// those of a GEMM [k, n] summing over m rows, bf16: 2·m·(k + n)), stay allocated from the end
/// of the I action (where the backward frees what the layers saved) until it runs; whatever
/// waits for it (the DP bucket of its gradient) moves after it in issue_in_key_order.
std::uint32_t StageBuilder::defer_weight_grad(const Op& op, std::vector<std::uint32_t> deps,
                                              double held) {
  SCALESCOPE_EXPECTS(chain_ != kNone);
  if (held < 0) held = 2.0 * op.shape[2] * (op.shape[0] + op.shape[1]);
  deps.push_back(chain_);
  held_ += std::ceil(held);  // allocated at the end of the I action (run_actions)
  Op w = op;
  w.mem_free += static_cast<std::int64_t>(std::ceil(held));
  w.comm_sms = 0;  // at W nothing runs beside it (at I a bulk reduce-scatter would)
  const std::uint64_t seg = std::exchange(seg_, defer_seg_);
  const std::uint32_t id = add_free(w, std::move(deps));
  seg_ = seg;
  deferred_.push_back(id);
  return id;
}

/// A weight-gradient GEMM on the chain (after `deps` too), or deferred to its W action while a
/// split backward's input half is emitted.
std::uint32_t StageBuilder::chain_weight_grad(const Op& op, std::vector<std::uint32_t> deps) {
  return defer_wgrad_ ? defer_weight_grad(op, std::move(deps)) : chain(op, std::move(deps));
}

/// Puts the program in the issue order the keys give (stable: ops of equal keys keep the
/// order they were emitted in) and renumbers the dependencies. An op issues no earlier than
/// what it depends on: its key is raised to its dependencies' (a DP bucket waiting for a
/// deferred weight gradient moves after it; EP overlap's keys already respect this).
void StageBuilder::issue_in_key_order() {
  if (keys_.empty()) return;
  SCALESCOPE_EXPECTS(keys_.size() == prog_.ops.size());
  for (std::uint32_t i = 0; i < keys_.size(); ++i)
    for (const std::uint32_t* d = prog_.deps_begin(i); d != prog_.deps_end(i); ++d)
      keys_[i] = std::max(keys_[i], keys_[*d]);
  std::vector<std::uint32_t> order(keys_.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return keys_[a] < keys_[b]; });
  std::vector<std::uint32_t> where(order.size());
  for (std::uint32_t k = 0; k < order.size(); ++k) where[order[k]] = k;
  graph::RankProgram out;
  out.name = prog_.name;
  out.static_memory = prog_.static_memory;
  for (std::uint32_t k = 0; k < order.size(); ++k) {
    std::vector<std::uint32_t> deps;
    for (const std::uint32_t* d = prog_.deps_begin(order[k]); d != prog_.deps_end(order[k]); ++d)
      deps.push_back(where[*d]);
    std::sort(deps.begin(), deps.end());
    out.add(prog_.ops[order[k]], deps);  // a dependency after its op would be a builder bug
  }
  prog_ = std::move(out);
  keys_.clear();
}

/// Megatron's --cuda-graph-scope with TE's per-layer graphs (transformer_layer.py
/// _te_cuda_graph_capture at d98e8a6): one graph per layer, micro-batch and pass holds the
/// attention part (`attn`: the input norm through the output projection and its residual add,
/// with the TP / CP communication and fp8 casts inside) and, on an MoE layer with `moe_router`,
/// the MLP part up to where the MoE layer returns early in capture (moe_utils.py
/// maybe_skip_or_early_return_by_cudagraph): the pre-MLP norm, the router and, with
/// `moe_preprocess`, the token counts and the permutation. Each run of such ops, consecutive in
/// issue order with one layer, micro-batch and phase, is one replay: its first op carries the
/// graph's launch (Op::cuda_graph 2), the others none (1); their kernels still run on the GPU.
void StageBuilder::mark_cuda_graphs() {
  const std::uint8_t scope = p_.cuda_graph_scope;
  if (scope == 0) return;
  const bool attn = (scope & kCudaGraphAttn) != 0;
  const bool router = (scope & kCudaGraphMoeRouter) != 0;
  const bool preprocess = (scope & kCudaGraphMoePreprocess) != 0;
  const auto attention_op = [](OpName n) {
    switch (n) {
      case OpName::InputNorm:
      case OpName::QkvGemm:
      case OpName::QkNorm:
      case OpName::Rope:
      case OpName::Attention:
      case OpName::OutProjGemm:
      case OpName::QDownGemm:
      case OpName::KvDownGemm:
      case OpName::LatentNorm:
      case OpName::QUpGemm:
      case OpName::KvUpGemm:
      case OpName::CpKvExchange:
      case OpName::CpMerge:
        return true;
      default:
        return false;
    }
  };
  // Inside a graph its TP collectives and fp8 casts belong to it too.
  const auto inside = [](OpName n) {
    return n == OpName::TpAllGather || n == OpName::TpReduceScatter || n == OpName::TpAllReduce ||
           n == OpName::Fp8Cast;
  };
  const auto moe_layer = [&](const Op& op) {
    return op.layer != graph::kNoIndex && m_.is_moe_layer(op.layer);
  };
  // Whether `op` can be in a graph at all, and whether it may begin one (a residual add only
  // continues the attention part's graph).
  const auto graphed = [&](const Op& op) {
    if (attn && (attention_op(op.name) || op.name == OpName::BiasDropoutAdd)) return true;
    if (!router || !moe_layer(op)) return false;
    return op.name == OpName::PreMlpNorm || op.name == OpName::Router ||
           op.name == OpName::RouterTopk || (preprocess && op.name == OpName::MoePermute);
  };
  bool open = false;
  const Op* first = nullptr;
  bool closed = false;  // a forward graph reached its last op (the add, the router, the permute)
  for (Op& op : prog_.ops) {
    const bool same_group = open && !closed && op.layer == first->layer &&
                            op.microbatch == first->microbatch && op.phase == first->phase;
    if (same_group && (graphed(op) || inside(op.name))) {
      op.cuda_graph = 1;
    } else if (graphed(op) && op.name != OpName::BiasDropoutAdd) {
      op.cuda_graph = 2;
      open = true;
      closed = false;
      first = &op;
    } else {
      open = false;
      continue;
    }
    // In a forward (or its recomputation) the graph ends at its residual add when it has no MoE
    // part, at the router (moe_router alone) or the permutation (moe_preprocess); a backward
    // replay runs the same ops in reverse and ends where they do.
    if (op.phase == Phase::Backward) continue;
    if (op.name == OpName::BiasDropoutAdd && !(router && moe_layer(op))) closed = true;
    if (router && op.name == (preprocess ? OpName::MoePermute : OpName::RouterTopk)) closed = true;
  }
}

/// Issues `op` beside the chain: it starts once the chain's last op and everything the next
/// chained op waits for are done, and nothing on the chain waits for it unless told to.
std::uint32_t StageBuilder::add_beside(const Op& op) {
  std::vector<std::uint32_t> start = wait_next_;
  start.push_back(chain_);
  return add_free(op, start);
}

/// The sequence-parallel all-gather of [T, h] before a column-parallel GEMM (f operator).
void StageBuilder::sp_gather(Phase phase, double bytes) {
  if (tp_comm() && p_.sequence_parallel)
    chain(collective(OpKind::AllGather, CommRole::Tp, OpName::TpAllGather, phase,
                     bytes < 0 ? hidden_bytes_ : bytes));
}

/// The TP reduction of [T, h] after a row-parallel GEMM (g operator): reduce-scatter with
/// sequence parallelism, all-reduce without.
Op StageBuilder::tp_reduce(Phase phase, double bytes) const {
  return collective(p_.sequence_parallel ? OpKind::ReduceScatter : OpKind::AllReduce, CommRole::Tp,
                    p_.sequence_parallel ? OpName::TpReduceScatter : OpName::TpAllReduce, phase,
                    bytes < 0 ? hidden_bytes_ : bytes);
}

}  // namespace scalescope::workload::detail
