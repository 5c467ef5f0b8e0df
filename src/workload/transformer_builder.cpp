#include "workload/transformer_builder.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "workload/accounting.hpp"
#include "workload/moe.hpp"
#include "workload/ring_attention.hpp"

namespace scalescope::workload {

using graph::CommKind;
using graph::CommRole;
using graph::Op;
using graph::OpKind;
using graph::OpName;
using graph::Phase;
using graph::Stream;

namespace {

constexpr std::uint32_t kNone = 0xFFFFFFFFu;

/// A parameter tensor (or a layer's group of them) whose gradient becomes ready at one op.
struct ParamGroup {
  double params = 0;
  std::int64_t key = -1;  ///< param_key(layer, part), or -1 embedding / -2 output layer
};

/// The weights of a transformer layer in backward order, the order in which Megatron-Core's
/// param-and-grad buffer assigns them to buckets (parameters in reverse registration order).
/// MoE layers: kFc2 / kFc1 are the shared experts', kExperts the routed experts (reduced over the
/// expert-data-parallel group), kRouter the gating weights. MLA: kQkv holds every projection
/// before core attention (down and up projections, latent norms).
enum LayerPart : std::int64_t {
  kFc2,
  kExperts,
  kFc1,
  kRouter,
  kPreMlpNorm,
  kOutProj,
  kQkv,
  kInputNorm,
  kParts
};
constexpr std::int64_t param_key(std::int64_t layer, std::int64_t part) {
  return layer * kParts + part;
}
constexpr std::int64_t layer_of_key(std::int64_t key) {
  return key < 0 ? key : key / kParts;
}

/// Builds the program of one pipeline stage (every rank of the stage runs the same program).
class StageBuilder {
 public:
  /// `ep_rank`: the expert-parallel rank whose expert load this program models, or −1 when every
  /// EP rank gets the same load (no skew: one program per stage).
  StageBuilder(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t, std::int64_t stage,
               std::int64_t ep_rank = -1)
      : m_(m), p_(p), t_(t), stage_(stage) {
    prog_.name = "pp_stage_" + std::to_string(stage);
    if (ep_rank >= 0) prog_.name += "_ep_" + std::to_string(ep_rank);
    first_ = stage == 0;
    last_ = stage == p.pp() - 1;
    layers_ = layers_on_stage(m, p, stage);
    for (std::int64_t c = 0; c < p.vpp(); ++c) {
      chunk_layers_.push_back(layers_in_chunk(m, p, stage, c));
      chunk_first_.push_back(p.first_layer_of_chunk(stage, c, m.num_layers));
    }
    // With context parallelism each rank holds s/c tokens of each sequence.
    cp_ = static_cast<double>(p.cp());
    tokens_ = static_cast<double>(m.seq_length * t.micro_batch_size) / cp_;
    seq_shard_ = p.sequence_parallel ? static_cast<double>(p.tp()) : 1.0;
    tp_ = static_cast<double>(p.tp());
    h_ = static_cast<double>(m.hidden_size);
    hidden_bytes_ = 2 * tokens_ * h_;  // S of TP collectives: the full [T, h] bf16 tensor
    num_mb_ = t.num_microbatches(p.dp());
    ub_ = p.tp_comm_overlap && p.sequence_parallel && p.tp() > 1;
    fp8_ = t.precision == Precision::Fp8;
    // ZeRO-3 / FSDP units: each transformer layer, and the root (embedding, final norm, output
    // layer), as fully_shard wraps them (MODELING §3.3).
    zero3_ = p.zero() >= 3 && p.zero_shard() > 1;
    layer_unit_ = layer_parameters_on_rank(m, p);
    // torchao's FSDP float8 all-gather (a captured model's fp8 with parallel.fp8_param_gather):
    // the layer units' linear weights move and stay gathered at 1 B a parameter.
    fp8_fsdp_gather_ =
        m.capture && p.zero() >= 3 && p.fp8_param_gather && t.precision == Precision::Fp8;
    if (fp8_fsdp_gather_)
      layer_linear_ = linear_parameters_on_rank(m, p, stage) / static_cast<double>(layers_);
    root_unit_ = parameters_on_rank(m, p, stage) - layer_unit_ * static_cast<double>(layers_);
    // Attention widths: scores over a·dqk, values and output a·dv; keys and values have g heads
    // (GQA), or a with MLA's per-head up-projected keys and values.
    const double a = static_cast<double>(m.num_attention_heads);
    qk_w_ = a * static_cast<double>(m.qk_dim());
    o_w_ = static_cast<double>(m.attn_out_width());
    k_w_ = m.multi_latent_attention ? qk_w_ : static_cast<double>(m.kv_width());
    v_w_ = m.multi_latent_attention ? o_w_ : static_cast<double>(m.kv_width());
    if (m.moe()) {
      // Each layer's MoE block sees the rank's SP share of its tokens (Megatron requires SP with
      // TP); the EP-rank program models its own experts' load, the balanced one EP rank 0's.
      load_ = moe_load(m, p, t, ep_rank < 0 ? 0 : ep_rank, tokens_ / seq_shard_);
      local_experts_ = static_cast<double>(m.num_experts / p.ep());
    }
    if (m.capture) {
      LowerOptions lo;
      lo.cp = p.cp();
      lo.cp_all_gather = p.cp_comm_type == CpCommType::AllGather;
      lo.ep = p.ep();
      lo.fp8 = t.precision == Precision::Fp8;
      lo.fp8_recast_weight = p.zero() >= 3;
      lo.async_tp = p.tp_comm_overlap;
      lo.sdpa_flash = m.capture_sdpa_flash;
      lo.fp8_fsdp_gather = fp8_fsdp_gather_;
      lo.fsdp_shard = static_cast<double>(p.zero_shard());
      lo.experts_replicated = m.moe() && p.etp() == 1 && p.tp() > 1;
      // Megatron's DDP / distributed optimizer accumulate weight gradients into main-grad buffers
      // (the builder's wgrad GEMMs pay it too); under ZeRO-3 (FSDP) autograd's gradient is
      // reduce-scattered as it is.
      lo.main_grad_bytes = p.zero() >= 3 ? 0.0 : p.grad_bytes();
      if (m.moe()) {
        // This EP rank's experts' loads (skew, capacity), relative to balanced routing; without
        // a skew every EP rank is EP rank 0.
        const double local = tokens_ / seq_shard_;
        const std::vector<double> copies = expert_copies(m, p, t, local);
        const double balanced = static_cast<double>(p.ep()) * local *
                                static_cast<double>(m.moe_router_topk) /
                                static_cast<double>(m.num_experts);
        const std::int64_t per_rank = m.num_experts / p.ep();
        for (std::int64_t j = 0; j < per_rank; ++j)
          lo.expert_tokens.push_back(
              copies[static_cast<std::size_t>(std::max<std::int64_t>(ep_rank, 0) * per_rank + j)] /
              balanced);
        lo.all_to_all_scale =
            load_.max_exchanged / (local * static_cast<double>(m.moe_router_topk));
      }
      check_tp_plan(*m.capture, m.capture_plan, p.tp(), m.capture_path);
      lowered_ = lower_block(*m.capture, m.capture_plan, p.tp(), p.sequence_parallel,
                             m.capture_compiled, lo);
      lo.ep = 1;  // the outer graph has no experts
      lo.expert_tokens.clear();
      lo.fp8 = false;  // and its output layer stays in bf16 (torchtitan, as Megatron)
      if (m.capture_outer)
        outer_ = lower_outer(*m.capture, m.capture_plan, p.tp(), p.sequence_parallel,
                             m.capture_outer_compiled, lo);
    }
  }

  graph::RankProgram build() {
    prog_.static_memory =
        static_memory_bytes(m_, p_, stage_) + fp8_weight_copy_bytes(m_, p_, t_, stage_);
    plan_buckets();
    if (p_.zero() >= 1 && p_.zero() <= 2 && p_.overlap_param_gather) {
      // Steady state: the parameter all-gather of the previous step's update overlaps this
      // iteration's first forward; each bucket's first layer waits for it (MODELING §3.1).
      // Issued in forward order: model chunk 0 first, each chunk's buckets last to first.
      for (std::int64_t c = 0; c < p_.vpp(); ++c)
        for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {
          if (it->chunk != c || !reduces(*it)) continue;
          std::uint32_t ag = add_free(
              bucket_collective(*it, OpKind::AllGather, Phase::Other, gather_bytes(*it)), {});
          for (std::int64_t key : it->keys) gather_of_[layer_of_key(key)].push_back(ag);
        }
    }
    if (p_.interleaved())
      interleaved();
    else if (p_.schedule == Schedule::GPipe)
      gpipe();
    else
      one_f_one_b();
    finish_iteration();
    issue_in_key_order();
    prog_.finalize();
    return std::move(prog_);
  }

 private:
  // ---- op construction --------------------------------------------------------------------
  Op base(OpKind kind, OpName name, Phase phase) const {
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
  Op gemm(OpName name, Phase phase, double m, double n, double k) const {
    Op op = base(OpKind::Gemm, name, phase);
    op.shape = {static_cast<std::uint32_t>(m), static_cast<std::uint32_t>(n),
                static_cast<std::uint32_t>(k)};
    op.flops = 2 * m * n * k;
    op.mem_bytes = 2 * (m * k + k * n + m * n);
    if (fp8_ && name != OpName::LogitsGemm && name != OpName::Router) {
      op.gemm_dtype = graph::GemmDtype::Fp8;
      op.mem_bytes = m * k + k * n + 2 * m * n;
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
  static constexpr std::uint8_t kDeepEpSms = 20;
  /// Transformer Engine's userbuffers (`tp_comm_overlap`, TE module/base.py defaults): the SP
  /// all-gather before a column-parallel GEMM runs as a ring exchange beside the GEMM (1 SM,
  /// TP splits), the reduce-scatter after a row-parallel GEMM is pipelined with it (16 SMs,
  /// 4 splits, the GEMM on the remaining SMs), and the backward's bulk all-gather / reduce-
  /// scatter beside the column-parallel dgrad / wgrad take 16 SMs. The chunks' fill and drain
  /// (a split of the shorter of the two) are not modelled.
  static constexpr std::uint8_t kRingExchangeSms = 1;
  static constexpr std::uint8_t kPipelineSms = 16;
  /// A TP collective run by userbuffers rather than NCCL: its kernel's SMs are charged on the
  /// GEMM beside it (that GEMM's comm_sms), not as an NCCL kernel's (Op::comm_sms).
  static Op userbuffers(Op comm, std::uint8_t sms) {
    comm.comm_sms = sms;
    return comm;
  }
  /// The SP all-gather before a column-parallel GEMM: beside the GEMM under userbuffers (returns
  /// the gather, which the op after the GEMM waits for), else blocking (returns kNone).
  std::uint32_t gather_beside_gemm(Phase phase, double bytes = -1) {
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
  void wait_for_overlapped(std::uint32_t comm) {
    if (comm != kNone) wait_for(comm);
  }
  /// A row-parallel GEMM and its TP reduction: pipelined chunk by chunk under userbuffers (the
  /// reduction starts with the GEMM, the op after both waits for both), else one after the other.
  void gemm_then_reduce(Op gemm_op, Phase phase) {
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
  /// Context parallelism's key/value exchange around a core attention op (Megatron
  /// AttnFuncWithCPAndKVP2P, MODELING §4.2): the c − 1 ring transfers of this rank's K and V
  /// block (2·b·(s/c)·kv/t bf16 values each) are an all-gather over the CP group of c blocks
  /// (a ring all-gather moves c − 1 of them per rank). With cp_comm_type p2p it runs beside the
  /// attention (each step computes on the block it has while the next one arrives) and the op
  /// after the attention waits for it; with all_gather it completes first. The backward ring
  /// also carries dK, dV back: a reduce-scatter of the same size.
  double kv_block_bytes() const { return 2 * tokens_ * (k_w_ + v_w_) / tp_; }
  void attention_with_cp(const Op& attn, bool backward) {
    if (cp_ <= 1) {
      chain(attn);
      return;
    }
    if (p_.cp_comm_type == CpCommType::A2a) {
      // Transformer Engine's AttnFuncWithCPAndQKVOA2A (DeepSpeed-Ulysses): all-to-alls over the
      // CP group turn this rank's s/c tokens of every head into all s tokens of 1/c of the
      // heads before the attention, and back after it; the backward does the same with dO
      // before and dQ, dK, dV after. Each moves this rank's tensors (bf16, nccl-tests' size);
      // (c − 1)/c of them leave the rank.
      const double qkv = 2 * tokens_ * (qk_w_ + k_w_ + v_w_) / tp_, out = 2 * tokens_ * o_w_ / tp_;
      chain(collective(OpKind::AllToAll, CommRole::Cp, OpName::CpKvExchange, attn.phase,
                       backward ? out : qkv));
      chain(attn);
      chain(collective(OpKind::AllToAll, CommRole::Cp, OpName::CpKvExchange, attn.phase,
                       backward ? qkv : out));
      return;
    }
    const double bytes = cp_ * kv_block_bytes();
    const Phase phase = attn.phase;
    Op gather = collective(OpKind::AllGather, CommRole::Cp, OpName::CpKvExchange, phase, bytes);
    Op reduce = collective(OpKind::ReduceScatter, CommRole::Cp, OpName::CpKvExchange, phase, bytes);
    if (p_.cp_comm_type == CpCommType::AllGather) {
      chain(gather);
      chain(attn);
      if (backward) chain(reduce);
      return;
    }
    const std::uint32_t kv = add_beside(gather);
    const std::uint32_t dkv = backward ? add_free(reduce, {kv}) : kNone;
    if (attn.attention_impl != graph::AttentionImpl::Unfused) {
      // The ring's c steps and its output / gradient corrections (Transformer Engine's).
      const RingTensors tensors{tokens_ * o_w_ / tp_, tokens_ * (k_w_ + v_w_) / tp_};
      for (const Op& op : ring_attention(attn, p_.cp(), RingImpl::TransformerEngine, tensors))
        chain(op);
    } else {
      chain(attn);
    }
    wait_for(kv);
    if (dkv != kNone) wait_for(dkv);
  }
  /// --qk-layernorm: a norm over each query and key head (Megatron's q_layernorm and
  /// k_layernorm, TENorm over head_dim) between the QKV GEMM and the rotary embedding: forward
  /// reads and writes the rank's [T, (q + kv)/t] (bf16), keeping its input for the backward,
  /// which reads the input and dY and writes dX, as the layer norms do.
  void qk_norm(Phase phase, bool keep, std::int64_t& attn_alloc) {
    if (!m_.qk_layernorm) return;
    const double dh = static_cast<double>(m_.head_dim());
    const double e = tokens_ * static_cast<double>(m_.query_width() + m_.kv_width()) / tp_;
    const bool bwd = phase == Phase::Backward;
    Op op = shaped(
        memory_bound(OpKind::Norm, OpName::QkNorm, phase, (bwd ? 6 : 4) * e, (bwd ? 10 : 8) * e),
        e / dh, dh, norm_kind());
    if (!bwd && keep) op.mem_alloc = static_cast<std::int64_t>(2 * e);
    attn_alloc += op.mem_alloc;
    chain(op);
  }
  /// Transformer Engine's cast of `elements` bf16 values to fp8 (read 2 B, write 1 B), under
  /// fp8 only: with delayed scaling the amax update fused in; tensorwise (current scaling) reads
  /// the tensor once more for its amax first; mxfp8 and blockwise write their scales too (one
  /// byte per 32 values, one fp32 per 128).
  void fp8_cast(Phase phase, double elements) {
    if (fp8_)
      chain(memory_bound(OpKind::Elementwise, OpName::Fp8Cast, phase,
                         (3 + fp8_recipe_bytes(false)) * elements));
  }
  /// A recipe's bytes per value beyond delayed scaling's: tensorwise reads the tensor (2 B) for
  /// its amax; mxfp8 writes a 1-byte scale per 32 values, blockwise an fp32 one per 128 (a
  /// weight's per 128 × 128 block), for each fp8 layout written (`weight`: both).
  double fp8_recipe_bytes(bool weight) const {
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
  /// The kernel shape of a memory-bound op (docs/kernels.md): rows × cols (× a third figure:
  /// the GLU factor of an activation, the vocabulary shard of an embedding, a rotary dim).
  /// Norm ops' third shape figure: 1 LayerNorm (models with biases, GPT), 0 RMSNorm.
  double norm_kind() const { return m_.add_bias_linear ? 1.0 : 0.0; }
  static Op shaped(Op op, double a, double b, double c = 0) {
    op.shape = {static_cast<std::uint32_t>(std::llround(a)),
                static_cast<std::uint32_t>(std::llround(b)),
                static_cast<std::uint32_t>(std::llround(c))};
    return op;
  }
  Op memory_bound(OpKind kind, OpName name, Phase phase, double bytes, double flops = 0) const {
    Op op = base(kind, name, phase);
    op.mem_bytes = bytes;
    op.flops = flops;
    return op;
  }
  Op collective(OpKind kind, CommRole role, OpName name, Phase phase, double bytes) const {
    Op op = base(kind, name, phase);
    op.role = role;
    op.stream = graph::stream_of(role);
    op.comm_bytes = bytes;
    return op;
  }
  /// Adds an op on the main chain: it depends on the previous chain op, and becomes the chain.
  /// It also takes the pending allocation (ZeRO-3's unsharded gradients of a unit).
  std::uint32_t chain(Op op, std::vector<std::uint32_t> extra = {}) {
    if (chain_ != kNone) extra.push_back(chain_);
    extra.insert(extra.end(), wait_next_.begin(), wait_next_.end());
    wait_next_.clear();
    op.mem_alloc += std::exchange(pending_alloc_, 0);
    chain_ = add_free(op, extra);
    return chain_;
  }
  /// Frees `bytes` when the chain's last op is issued (host order).
  void free_at_chain(double bytes) {
    prog_.ops[chain_].mem_free += static_cast<std::int64_t>(std::ceil(bytes));
  }
  std::uint32_t add_free(const Op& op, std::vector<std::uint32_t> deps) {
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    if (p_.moe_a2a_overlap)
      keys_.push_back((seg_ << 32) | (ovl_ ? static_cast<std::uint64_t>(ovl_slot_ * 16 + ovl_pos_)
                                           : std::uint64_t{0}));
    return prog_.add(op, deps);
  }

  // ---- EP overlap (Megatron's combined 1F1B, --overlap-moe-expert-parallel-comm) -------------
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
  void ovl_layer(std::int64_t index) {
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
  void ovl_ends(bool pre) {
    if (!ovl_) return;
    ovl_slot_ = pre ? 0 : ovl_nb_ + ovl_nf_ - ovl_pairs_ + 1;
    ovl_pos_ = ovl_fwd_ ? 0 : 1;
  }
  /// Moves the forward (f ≥ 0) or backward (b ≥ 0) context to a position of its layer pair.
  void ovl_stage(int f, int b) {
    if (!ovl_) return;
    const int pos = ovl_fwd_ ? f : b;
    if (pos >= 0) ovl_pos_ = pos;
  }
  /// One combined 1F1B step: `run_f` emits the forward of a chunk of nf layers, `run_b` the
  /// backward of one of nb layers, each on its own chain from the chain before the step; the
  /// step ends when both have.
  template <class RunF, class RunB>
  void combined(std::int64_t nf, std::int64_t nb, RunF&& run_f, RunB&& run_b) {
    ++seg_;
    ovl_ = true;
    ovl_nf_ = nf;
    ovl_nb_ = nb;
    ovl_pairs_ = std::min(nf, nb);
    const std::uint32_t start = chain_;
    const std::vector<std::uint32_t> waits = wait_next_;
    ovl_fwd_ = true;
    run_f();
    const std::uint32_t f_end = chain_;
    std::vector<std::uint32_t> f_waits = std::move(wait_next_);
    chain_ = start;
    wait_next_ = waits;
    ovl_fwd_ = false;
    run_b();
    wait_next_.insert(wait_next_.end(), f_waits.begin(), f_waits.end());
    if (f_end != kNone) wait_next_.push_back(f_end);
    ovl_ = false;
    ++seg_;
  }
  /// A weight-gradient GEMM: on the chain, or under delay_wgrad_compute beside it (nothing on
  /// the chain waits for it) at the backward's position 4.
  std::uint32_t wgrad(const Op& op) {
    if (!p_.delay_wgrad_compute) return chain(op);
    const int pos = ovl_pos_;
    ovl_stage(-1, 4);
    const std::uint32_t id = add_beside(op);
    ovl_pos_ = pos;
    return id;
  }
  /// Puts the program in the issue order the keys give (stable: ops of equal keys keep the
  /// order they were emitted in) and renumbers the dependencies.
  void issue_in_key_order() {
    if (keys_.empty()) return;
    SCALESCOPE_EXPECTS(keys_.size() == prog_.ops.size());
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
  /// Issues `op` beside the chain: it starts once the chain's last op and everything the next
  /// chained op waits for are done, and nothing on the chain waits for it unless told to.
  std::uint32_t add_beside(const Op& op) {
    std::vector<std::uint32_t> start = wait_next_;
    start.push_back(chain_);
    return add_free(op, start);
  }
  bool tp_comm() const { return p_.tp() > 1; }
  /// The sequence-parallel all-gather of [T, h] before a column-parallel GEMM (f operator).
  void sp_gather(Phase phase, double bytes = -1) {
    if (tp_comm() && p_.sequence_parallel)
      chain(collective(OpKind::AllGather, CommRole::Tp, OpName::TpAllGather, phase,
                       bytes < 0 ? hidden_bytes_ : bytes));
  }
  /// The TP reduction of [T, h] after a row-parallel GEMM (g operator): reduce-scatter with
  /// sequence parallelism, all-reduce without.
  Op tp_reduce(Phase phase, double bytes = -1) const {
    return collective(p_.sequence_parallel ? OpKind::ReduceScatter : OpKind::AllReduce,
                      CommRole::Tp,
                      p_.sequence_parallel ? OpName::TpReduceScatter : OpName::TpAllReduce, phase,
                      bytes < 0 ? hidden_bytes_ : bytes);
  }

  // ---- data-parallel buckets ----------------------------------------------------------------
  struct Bucket {
    double params = 0;
    double linear = 0;  ///< of which linear-layer weights (gathered in fp8 with fp8_param_gather)
    std::vector<std::int64_t> keys;  ///< param_key()s (−1 embedding, −2 output layer)
    std::int64_t chunk = 0;
    bool expert = false;  ///< routed-expert parameters (reduced over expert DP)
  };

  /// Gradient buckets, one DDP instance (param-and-grad buffer) per model chunk as Megatron
  /// wraps each chunk (megatron/training/training.py::get_model). Within a chunk, parameter
  /// groups in backward order: output layer, layers last to first, embedding.
  /// One layer's parameters on this rank by LayerPart: the linear layers from their shapes
  /// (column-parallel weights and biases split over TP, row-parallel biases and norms
  /// replicated), the rest of the attention (MLA's duplicated projections) under kQkv.
  std::array<double, kParts> layer_parts(std::int64_t l) const {
    const RankParameters r = layer_parameters_on_rank(m_, p_, l);
    const double bias = m_.add_bias_linear ? 1.0 : 0.0;
    const double glu = m_.gated_linear_unit ? 2.0 : 1.0;
    const double f =
        static_cast<double>(m_.is_moe_layer(l) ? m_.moe_shared_expert_intermediate_size : m_.ffn());
    std::array<double, kParts> part{};
    part[kInputNorm] = part[kPreMlpNorm] = h_ * (1 + bias);
    if (f > 0) {
      part[kFc2] = f * h_ / tp_ + bias * h_;
      part[kFc1] = h_ * f * glu / tp_ + bias * f * glu / tp_;
    }
    if (m_.is_moe_layer(l)) part[kRouter] = static_cast<double>(m_.num_experts) * h_;
    part[kExperts] = r.expert;
    part[kOutProj] = o_w_ * h_ / tp_ + bias * h_;
    part[kQkv] = r.dense - part[kInputNorm] - part[kPreMlpNorm] - part[kFc2] - part[kFc1] -
                 part[kRouter] - part[kOutProj];
    return part;
  }

  /// Gradient buckets, one DDP instance (param-and-grad buffer) per model chunk as Megatron
  /// wraps each chunk (megatron/training/training.py::get_model). Within a chunk, parameter
  /// groups in backward order: output layer, layers last to first, embedding. Expert parameters
  /// have buckets of their own, reduced over the expert-data-parallel group (Megatron's
  /// expert_parallel_buffers).
  void plan_buckets() {
    const double embedding = vocab_shard() + position_parameters(m_);
    const double bucket_size = p_.ddp_bucket_size > 0
                                   ? static_cast<double>(p_.ddp_bucket_size)
                                   : std::max(4e7, 1e6 * static_cast<double>(p_.dp_cp()));
    for (std::int64_t c = 0; c < p_.vpp(); ++c) {
      std::vector<ParamGroup> groups, expert_groups;
      if (last_ && c == p_.vpp() - 1 && head_params() > 0) groups.push_back({head_params(), -2});
      for (std::int64_t l = chunk_first_[c] + chunk_layers_[c] - 1; l >= chunk_first_[c]; --l) {
        const std::array<double, kParts> part = layer_parts(l);
        for (std::int64_t k = 0; k < kParts; ++k) {
          if (part[k] <= 0) continue;
          (k == kExperts ? expert_groups : groups).push_back({part[k], param_key(l, k)});
        }
      }
      if (first_ && c == 0) groups.push_back({embedding, -1});
      // Megatron DDP: a bucket closes once it holds ddp_bucket_size parameters or more (default
      // max(4e7, 1e6·DP)) when overlapping the reduction; one bucket otherwise, on pipeline
      // stages > 0 and for model chunks > 0 (distributed_data_parallel.py, training.py
      // disable_bucketing).
      const double bucket =
          (p_.overlap_grad_reduce && stage_ == 0 && c == 0) ? bucket_size : INFINITY;
      for (const bool expert : {false, true}) {
        Bucket cur;
        cur.chunk = c;
        cur.expert = expert;
        for (const ParamGroup& g : expert ? expert_groups : groups) {
          cur.params += g.params;
          if (g.key >= 0 && is_linear_part(g.key % kParts)) cur.linear += g.params;
          cur.keys.push_back(g.key);
          if (cur.params >= bucket) {
            buckets_.push_back(cur);
            cur = Bucket{};
            cur.chunk = c;
            cur.expert = expert;
          }
        }
        if (!cur.keys.empty()) buckets_.push_back(cur);
      }
    }
  }
  /// Layer parts holding linear-layer weights (fp8 GEMM operands).
  static bool is_linear_part(std::int64_t part) {
    return part == kQkv || part == kOutProj || part == kFc1 || part == kFc2 || part == kExperts;
  }
  /// Bytes of a bucket's parameter all-gather: bf16, the linear weights in fp8 with
  /// fp8_param_gather.
  double gather_bytes(const Bucket& b) const {
    return 2 * b.params - (p_.fp8_param_gather ? b.linear : 0.0);
  }
  /// Whether a bucket's reduction communicates: its group has more than one member.
  bool reduces(const Bucket& b) const { return b.expert ? p_.edp() > 1 : p_.dp_cp() > 1; }
  Op bucket_collective(const Bucket& b, OpKind kind, Phase phase, double bytes) const {
    const bool rs = kind == OpKind::ReduceScatter, ag = kind == OpKind::AllGather;
    const OpName name =
        b.expert
            ? (rs ? OpName::EdpReduceScatter : (ag ? OpName::EdpAllGather : OpName::EdpAllReduce))
            : (rs ? OpName::DpReduceScatter : (ag ? OpName::DpAllGather : OpName::DpAllReduce));
    return collective(kind, b.expert ? CommRole::Edp : CommRole::Dp, name, phase, bytes);
  }
  double vocab_shard() const { return static_cast<double>(m_.padded_vocab(p_.tp())) * h_ / tp_; }
  double head_params() const {
    double n = static_cast<double>(m_.hidden_size) * (m_.add_bias_linear ? 2.0 : 1.0);
    return n + last_stage_vocab_tables(m_, p_) * vocab_shard();
  }

  // ---- pipeline communication ---------------------------------------------------------------
  double p2p_bytes() const { return 2 * tokens_ * h_ / seq_shard_; }
  /// A batched send/recv (Megatron p2p_communication with batch_p2p_sync): blocking.
  void p2p(bool send, CommRole send_to, bool recv, CommRole recv_from, std::int64_t mb) {
    if (!send && !recv) return;
    cur_layer_ = -1;
    cur_mb_ = mb;
    Op op = base(OpKind::SendRecv,
                 send && recv ? OpName::PpSendRecv : (send ? OpName::PpSend : OpName::PpRecv),
                 Phase::Other);
    op.role = send ? send_to : CommRole::None;
    op.role2 = recv ? recv_from : CommRole::None;
    op.stream = graph::stream_of(send ? send_to : recv_from);
    op.comm_bytes = p2p_bytes();
    chain(op);
  }
  /// An asynchronous isend or irecv posted now (after the chain's last op) on its pair's
  /// stream; whoever waits for it depends on the returned op (Megatron p2p_communication with
  /// overlap_p2p_comm: torch.distributed.isend / irecv, waited on later).
  std::uint32_t post(bool send, CommRole role, std::int64_t mb) {
    cur_layer_ = -1;
    cur_mb_ = mb;
    Op op = base(OpKind::SendRecv, send ? OpName::PpSend : OpName::PpRecv, Phase::Other);
    (send ? op.role : op.role2) = role;
    op.stream = graph::stream_of(role);
    op.comm_bytes = p2p_bytes();
    std::vector<std::uint32_t> deps;
    if (chain_ != kNone) deps.push_back(chain_);
    return add_free(op, deps);
  }
  /// The next op on the chain waits for `op` (a request's wait()).
  void wait_for(std::uint32_t op) { wait_next_.push_back(op); }

  // ---- forward / backward of one micro-batch ------------------------------------------------
  /// Forward of micro-batch mb through model chunk `chunk` (the embedding runs in the first
  /// virtual stage, the head and loss in the last).
  /// Under ZeRO-3 / FSDP (pipeline parallelism is rejected with it, so one chunk holding the
  /// embedding and the head) each unit's parameters are all-gathered before use, one layer
  /// ahead (FSDP's prefetch: the gather of layer l + 1 is issued before layer l computes and
  /// after layer l − 1 is freed, so two layer units are gathered at most, limit_all_gathers).
  void forward(std::int64_t mb, std::int64_t chunk = 0) {
    cur_mb_ = mb;
    const std::int64_t first = chunk_first_[chunk];
    const std::int64_t end = first + chunk_layers_[chunk];
    std::uint32_t next = kNone;
    if (zero3_) {
      wait_for(unit_gather(-1, Phase::Forward));
      if (end > first) next = unit_gather(first, Phase::Forward);
    }
    ovl_ends(true);
    if (first_ && chunk == 0) embedding_forward();
    for (std::int64_t l = first; l < end; ++l) {
      ovl_layer(l - first);
      if (zero3_) {
        const std::uint32_t gathered = next;
        next = l + 1 < end ? unit_gather(l + 1, Phase::Forward) : kNone;
        wait_for(gathered);
      }
      // MTP modules after the decoder (GPTModel._postprocess: MTP, their losses, the main
      // logits and loss).
      if (m_.is_mtp_layer(l)) mtp_input_forward(l);
      layer_forward(l, Phase::Forward, mb == 0);
      if (m_.is_mtp_layer(l)) head_forward(l);
      if (zero3_ && p_.reshard_after_forward) free_at_chain(gathered_layer_bytes());
    }
    ovl_ends(false);
    if (last_ && chunk == p_.vpp() - 1) head_forward();
  }
  /// Under full recomputation, the checkpoint holding layer l: [first, last] of the layers run
  /// again together before the backward of the last (parallel_plan.hpp RecomputeMethod, within
  /// l's model chunk); an empty span (first > last) when l keeps its activations.
  std::pair<std::int64_t, std::int64_t> checkpoint_of(std::int64_t l) const {
    if (p_.recompute != Recompute::Full) return {1, 0};
    std::int64_t first = l, last = l;
    for (std::size_t c = 0; c < chunk_first_.size(); ++c)
      if (l >= chunk_first_[c] && l < chunk_first_[c] + chunk_layers_[c]) {
        first = chunk_first_[c];
        last = first + chunk_layers_[c] - 1;
      }
    const std::int64_t n = p_.recompute_num_layers;
    constexpr std::pair<std::int64_t, std::int64_t> kKept{1, 0};  // not checkpointed
    // An MTP module checkpoints its layer on its own under uniform (Megatron asserts
    // recompute_num_layers == 1 there) and not under block ("not supported for MTP yet").
    if (m_.is_mtp_layer(l))
      return p_.recompute_method == RecomputeMethod::Uniform ? std::pair{l, l} : kKept;
    if (p_.recompute_method == RecomputeMethod::Block)
      return l - first < n ? std::pair{l, l} : kKept;
    if (p_.recompute_method == RecomputeMethod::Interval)
      return (l - first + 1) % n == 0 ? std::pair{l, l} : kKept;
    const std::int64_t g = first + (l - first) / n * n;
    return {g, std::min(g + n - 1, last)};
  }
  bool checkpointed(std::int64_t l) const {
    const auto [first, last] = checkpoint_of(l);
    return first <= last;
  }
  /// ZeRO-3 / FSDP: the backward gathers each layer again (with reshard_after_forward), the
  /// gather of layer l − 1 issued before layer l's backward (BACKWARD_PRE prefetch); after a
  /// unit's backward its parameters are freed and its gradients reduce-scattered (on the last
  /// micro-batch only, unless fsdp_reduce_every_microbatch); the root (FSDP2 does not reshard
  /// it after the forward) after the embedding's backward.
  void backward(std::int64_t mb, std::int64_t chunk = 0) {
    cur_mb_ = mb;
    const bool reduce = mb == num_mb_ - 1 || p_.fsdp_reduce_every_microbatch;
    const bool alloc_grads = mb == 0 || p_.fsdp_reduce_every_microbatch;
    const double gb = p_.grad_bytes();
    const std::int64_t first = chunk_first_[chunk];
    const std::int64_t last = first + chunk_layers_[chunk] - 1;
    const bool regather = zero3_ && p_.reshard_after_forward;
    std::uint32_t next = kNone;
    if (regather && last >= first) next = unit_gather(last, Phase::Backward);
    if (zero3_ && alloc_grads) pending_alloc_ += static_cast<std::int64_t>(gb * root_unit_);
    ovl_ends(true);
    if (last_ && chunk == p_.vpp() - 1) head_backward();
    for (std::int64_t l = last; l >= first; --l) {
      ovl_layer(last - l);
      if (regather) {
        const std::uint32_t gathered = next;
        next = l > first ? unit_gather(l - 1, Phase::Backward) : kNone;
        wait_for(gathered);
      }
      cur_layer_ = l;
      if (zero3_ && alloc_grads) pending_alloc_ += static_cast<std::int64_t>(gb * layer_unit_);
      // The main loss's backward runs first (its logits were made last), then each MTP
      // module's, last to first.
      if (m_.is_mtp_layer(l)) head_backward(l);
      // Full recomputation: a checkpoint's layers run forward again before the backward of its
      // last one.
      if (const auto [g0, g1] = checkpoint_of(l); g0 <= g1 && l == g1)
        for (std::int64_t k = g0; k <= g1; ++k) layer_forward(k, Phase::Recompute, false);
      layer_backward(l, mb);
      if (m_.is_mtp_layer(l)) mtp_input_backward(l);
      if (zero3_) {
        free_at_chain(gathered_layer_bytes());
        if (reduce) unit_reduce(l, layer_unit_);
      }
    }
    ovl_ends(false);
    if (first_ && chunk == 0) embedding_backward();
    if (zero3_) {
      free_at_chain(2 * root_unit_);
      if (reduce) unit_reduce(-1, root_unit_);
    }
    // ZeRO-2: the gradients are sharded, so each micro-batch's are reduce-scattered into the
    // shard (DeepSpeed ZeRO-2); the last micro-batch's in finish_iteration.
    if (p_.zero() == 2 && p_.dp_cp() > 1 && mb != num_mb_ - 1) reduce_buckets(chunk, chain_);
  }
  /// ZeRO-3: all-gather of unit `layer`'s bf16 parameters (−1: the root unit) over DP × CP
  /// (S = 2 · unit parameters, the gathered tensor; gathered_layer_bytes for a layer) into a
  /// buffer allocated when it is issued; issued after the chain.
  std::uint32_t unit_gather(std::int64_t layer, Phase phase) {
    const std::int64_t saved = std::exchange(cur_layer_, layer);
    const double bytes = layer >= 0 ? gathered_layer_bytes() : 2 * root_unit_;
    Op op = collective(OpKind::AllGather, CommRole::Dp, OpName::DpAllGather, phase, bytes);
    op.mem_alloc = static_cast<std::int64_t>(std::ceil(bytes));
    cur_layer_ = saved;
    std::vector<std::uint32_t> deps;
    if (chain_ != kNone) deps.push_back(chain_);
    return add_free(op, deps);
  }
  /// A gathered layer unit's bytes: bf16, its linear weights in fp8 with fp8_fsdp_gather_.
  double gathered_layer_bytes() const { return 2 * layer_unit_ - layer_linear_; }
  /// ZeRO-3: reduce-scatter of a unit's gradients (S = grad bytes · unit parameters) once its
  /// backward is done, beside the next unit's backward; the unsharded gradients are freed.
  void unit_reduce(std::int64_t layer, double params) {
    const std::int64_t saved = std::exchange(cur_layer_, layer);
    Op op = collective(OpKind::ReduceScatter, CommRole::Dp, OpName::DpReduceScatter,
                       Phase::Backward, p_.grad_bytes() * params);
    op.mem_free = static_cast<std::int64_t>(p_.grad_bytes() * params);
    const std::uint32_t rs = add_free(op, {chain_});
    if (p_.zero_replicas() > 1) {
      // HSDP: the reduced shard is then all-reduced across the replicas (torchtitan's
      // dp_replicate dimension): S = grad bytes · unit parameters / shard size.
      zero3_reductions_.push_back(add_free(
          collective(OpKind::AllReduce, CommRole::DpReplicate, OpName::DpAllReduce, Phase::Backward,
                     p_.grad_bytes() * params / static_cast<double>(p_.zero_shard())),
          {rs}));
    } else {
      zero3_reductions_.push_back(rs);
    }
    cur_layer_ = saved;
  }

  /// A part of a captured model's outer graph (lower_outer's `pre` in place of the built-in
  /// embedding, `post` in place of the head and loss), under ready key -1 or -2: its saved
  /// activations allocated with its first op and freed after its backward; ZeRO-3's gathers of
  /// the unit waited for first.
  void captured_outer(const LoweredBlock& part, std::int64_t key, Phase phase,
                      std::int64_t& alloc) {
    if (phase == Phase::Forward) {
      if (cur_mb_ == 0 && gather_of_.count(key))
        for (std::uint32_t g : gather_of_.at(key)) wait_for(g);
      alloc = part.forward.empty() ? 0 : static_cast<std::int64_t>(part.saved_bytes);
      captured_pass(part.forward, part.forward_after, -1, cur_mb_, alloc, Phase::Forward);
      return;
    }
    captured_pass(part.backward, part.backward_after, -1, cur_mb_, 0, Phase::Backward);
    if (chain_ != kNone) free_at_chain(static_cast<double>(alloc));
    ready_[key] = chain_;
  }

  void embedding_forward() {
    cur_layer_ = -1;
    if (outer_.available) return captured_outer(outer_.pre, -1, Phase::Forward, emb_alloc_);
    std::vector<std::uint32_t> extra;
    if (cur_mb_ == 0 && gather_of_.count(-1)) extra = gather_of_.at(-1);
    emb_alloc_ = embedding_lookup(extra);
  }
  /// The word-embedding lookup of this micro-batch's tokens and its TP reduction; returns the
  /// bytes it keeps for the backward (the token ids, the dropout mask).
  std::int64_t embedding_lookup(std::vector<std::uint32_t> extra = {}) {
    const double local = tokens_ * h_ / seq_shard_;
    Op op =
        shaped(memory_bound(OpKind::Embedding, OpName::Embedding, Phase::Forward, 2 * tokens_ * h_),
               tokens_, h_, vocab_shard() / h_);
    op.mem_alloc = static_cast<std::int64_t>(8 * tokens_ +  // int64 token ids
                                             (m_.hidden_dropout > 0 ? local : 0));
    chain(op, std::move(extra));
    // Vocab-parallel lookup: AR of [T, h] (RS with SP) over TP (language_model_embedding.py).
    if (tp_comm()) chain(tp_reduce(Phase::Forward));
    return op.mem_alloc;
  }
  void embedding_backward() {
    cur_layer_ = -1;
    if (outer_.available) return captured_outer(outer_.pre, -1, Phase::Backward, emb_alloc_);
    ready_[-1] = embedding_grad(emb_alloc_);
  }
  /// The embedding's backward: the gradient gathered over SP, then scatter-added into the fp32
  /// [V/t, h] gradient (read grads, read-modify-write rows); frees `saved`.
  std::uint32_t embedding_grad(std::int64_t saved) {
    sp_gather(Phase::Backward);
    Op op = shaped(memory_bound(OpKind::Embedding, OpName::Embedding, Phase::Backward,
                                2 * tokens_ * h_ + 8 * tokens_ * h_),
                   tokens_, h_, vocab_shard() / h_);
    op.mem_free = saved;
    return chain(op);
  }

  // ---- multi-token prediction (multi_token_prediction.py MultiTokenPredictionLayer) ---------
  /// An MTP module's input before its layer `l`: the embedding of the tokens one further ahead
  /// (the shared word embedding, a copy on the last stage with PP > 1), enorm and hnorm over it
  /// and over the hidden states, their concatenation [T, 2h] through eh_proj (column-parallel,
  /// gather_output false), the output gathered over TP along h and, with SP, split along the
  /// sequence again (no communication). Kept for the backward: the token ids, both norms'
  /// inputs and eh_proj's input. The rolled ids' boundary exchange among CP ranks (one token per
  /// rank) is not charged.
  void mtp_input_forward(std::int64_t l) {
    cur_layer_ = l;
    const double T = tokens_, h = h_, local = T * h / seq_shard_;
    std::int64_t kept = embedding_lookup();
    Op norms = shaped(
        memory_bound(OpKind::Norm, OpName::MtpNorm, Phase::Forward, 2 * 4 * local, 2 * 8 * local),
        2 * local / h, h, norm_kind());
    norms.mem_alloc = static_cast<std::int64_t>(2 * 2 * local);
    chain(norms);
    Op cat = memory_bound(OpKind::Elementwise, OpName::MtpNorm, Phase::Forward, 2 * 4 * local);
    cat.mem_alloc = static_cast<std::int64_t>(2 * 2 * local);
    chain(cat);
    kept += norms.mem_alloc + cat.mem_alloc;
    mtp_alloc_ = kept;
    fp8_cast(Phase::Forward, 2 * local);
    sp_gather(Phase::Forward, 2 * hidden_bytes_);
    Op proj = gemm(OpName::MtpProjGemm, Phase::Forward, T, h / tp_, 2 * h);
    proj.mem_transient = static_cast<std::int64_t>(2 * T * h);
    chain(proj);
    if (tp_comm())
      chain(collective(OpKind::AllGather, CommRole::Tp, OpName::TpAllGather, Phase::Forward,
                       hidden_bytes_));
  }
  /// … and its backward after the layer's: the split's backward gathers the gradient over SP,
  /// eh_proj's dgrad and wgrad (column_backward: the input re-gathered, the [T, 2h] gradient
  /// reduced over TP), both norms' backward, and the embedding's scatter-add into the
  /// gradient of the embedding (the last stage's copy with PP > 1, reduced with the first
  /// stage's in finish_iteration).
  void mtp_input_backward(std::int64_t l) {
    cur_layer_ = l;
    const double T = tokens_, h = h_, local = T * h / seq_shard_;
    sp_gather(Phase::Backward);
    ready_[param_key(l, kQkv)] =
        column_backward(OpName::MtpProjGemm, T, h / tp_, 2 * h, 2 * hidden_bytes_);
    Op norms = shaped(
        memory_bound(OpKind::Norm, OpName::MtpNorm, Phase::Backward, 2 * 6 * local, 2 * 10 * local),
        2 * local / h, h, norm_kind());
    chain(norms, take_reduce());
    const std::uint32_t emb = embedding_grad(mtp_alloc_);
    ready_[p_.pp() > 1 ? -2 : -1] = emb;
  }

  /// A captured model's layer (docs/flint.md): the lowered block's forward ops in capture order
  /// on the chain, the saved activations allocated with the first and kept for the backward.
  /// Under full recomputation the first forward keeps only the layer input ([T, h] of this
  /// rank) and the recompute before the backward keeps the rest; under selective recomputation
  /// (compiled captures) the fused attention keeps no log-sum-exp and runs again before its
  /// backward, as the builder's.
  void captured_forward(std::int64_t l, Phase phase) {
    if (checkpointed(l) && phase == Phase::Forward) {
      const auto input = checkpoint_of(l).first == l
                             ? static_cast<std::int64_t>(2 * tokens_ * h_ / seq_shard_)
                             : std::int64_t{0};
      captured_pass(lowered_.forward, lowered_.forward_after, l, cur_mb_, input, phase);
      saved_input_[{l, cur_mb_}] = input;
      return;
    }
    const double saved =
        p_.recompute == Recompute::Op
            ? lowered_.op_sac_saved_bytes
            : lowered_.saved_bytes -
                  (p_.recompute == Recompute::Selective ? lowered_.attention_saved_bytes : 0.0);
    captured_pass(lowered_.forward, lowered_.forward_after, l, cur_mb_,
                  static_cast<std::int64_t>(saved), phase);
    layer_saved_[{l, cur_mb_}] = {static_cast<std::int64_t>(saved), 0};
  }
  /// Compute ops on the chain; a TP collective after the op producing its tensor, waited for by
  /// the next compute op (LoweredBlock::forward_after).
  void captured_pass(const std::vector<Op>& ops, const std::vector<std::int32_t>& after,
                     std::int64_t l, std::int64_t mb, std::int64_t alloc, Phase phase) {
    const std::uint32_t start = chain_;
    std::vector<std::uint32_t> ids, pending;
    std::size_t attention = 0;  // backward attention ops seen
    for (std::size_t k = 0; k < ops.size(); ++k) {
      Op op = ops[k];
      op.layer = static_cast<std::uint16_t>(l);
      op.microbatch = static_cast<std::uint16_t>(mb);
      if (op.phase == Phase::Forward) op.phase = phase;  // Recompute under full recomputation
      if (k == 0) op.mem_alloc = alloc;
      // Selective recomputation: an attention's forward kernels (CP's ring: its steps and
      // merges) again before its backward.
      if (op.kind == OpKind::Attention && op.phase == Phase::Backward &&
          p_.recompute == Recompute::Selective && attention < lowered_.attention_forward.size()) {
        for (const Op& kernel : lowered_.attention_forward[attention++]) {
          Op again = kernel;
          again.phase = Phase::Recompute;
          again.layer = op.layer;
          again.microbatch = op.microbatch;
          chain(again, std::exchange(pending, {}));
        }
      }
      if (after[k] == LoweredBlock::kChain) {
        ids.push_back(chain(op, std::exchange(pending, {})));
      } else if (after[k] == LoweredBlock::kChainOverlap) {
        ids.push_back(chain(op, {}));  // the pending collectives run beside it
      } else {
        const std::uint32_t from = after[k] >= 0 ? ids[static_cast<std::size_t>(after[k])]
                                                 : (start != kNone ? start : chain_);
        std::vector<std::uint32_t> deps;
        if (from != kNone) deps.push_back(from);
        ids.push_back(add_free(op, deps));
        pending.push_back(ids.back());
      }
    }
    for (std::uint32_t c : pending) wait_for(c);
  }
  /// Its backward: every gradient of the layer counts as ready at the layer's last op.
  void captured_backward(std::int64_t l, std::int64_t mb) {
    if (p_.recompute == Recompute::Op)  // per-op checkpointing: the GEMMs it did not keep
      captured_pass(lowered_.op_sac_recompute, lowered_.op_sac_recompute_after, l, mb, 0,
                    Phase::Recompute);
    captured_pass(lowered_.backward, lowered_.backward_after, l, mb, 0, Phase::Backward);
    const auto saved = layer_saved_.at({l, mb});
    std::int64_t input = 0;
    if (auto it = saved_input_.find({l, mb}); it != saved_input_.end()) input = it->second;
    free_at_chain(static_cast<double>(saved.first + saved.second + input));
    for (std::int64_t k = 0; k < kParts; ++k) ready_[param_key(l, k)] = chain_;
  }

  /// Forward of (global) layer l (also used to recompute it under full recomputation).
  void layer_forward(std::int64_t l, Phase phase, bool first_microbatch) {
    cur_layer_ = l;
    if (m_.capture) {
      captured_forward(l, phase);
      return;
    }
    const double T = tokens_, t = tp_, h = h_;
    const double q = static_cast<double>(m_.query_width());
    const double kv = static_cast<double>(m_.kv_width());
    const double f = static_cast<double>(m_.ffn());
    const double local = T * h / seq_shard_;  // elements of [T, h] held by this rank
    const bool keep = !checkpointed(l) || phase == Phase::Recompute;
    auto alloc = [&](double bytes) { return keep ? static_cast<std::int64_t>(bytes) : 0; };
    std::int64_t attn_alloc = 0, mlp_alloc = 0;

    std::vector<std::uint32_t> extra;
    if (first_microbatch && phase == Phase::Forward && gather_of_.count(l))
      extra = gather_of_.at(l);
    // Under fp8 TE's LayerNormLinear writes the norm output (the GEMM input) in fp8 and keeps it
    // for the wgrad: 1 byte per element instead of 2.
    const double out_bytes = gemm_input_bytes();
    // The first micro-batch casts the layer's linear weights to fp8 and their transposes
    // (read 2 B, write 1 + 1 B per weight); later micro-batches reuse the cached copies.
    if (fp8_ && first_microbatch && phase == Phase::Forward)
      chain(memory_bound(OpKind::Elementwise, OpName::Fp8Cast, phase,
                         (4 + fp8_recipe_bytes(true)) * linear_parameters_on_rank(m_, p_, stage_) /
                             static_cast<double>(layers_)));
    Op norm = layer_norm(OpName::InputNorm, phase);
    norm.mem_alloc = alloc((2 + out_bytes) * local);  // its input and its output (QKV input)
    if (discards_input_norm()) norm.mem_alloc = alloc(2 * local);  // the output is recomputed
    if (checkpointed(l) && phase == Phase::Forward)  // only the checkpoint's input is kept
      norm.mem_alloc = checkpoint_of(l).first == l ? static_cast<std::int64_t>(2 * local) : 0;
    attn_alloc += norm.mem_alloc;
    chain(norm, extra);
    if (m_.multi_latent_attention) {
      mla_projections_forward(phase, keep, attn_alloc);
    } else {
      const std::uint32_t qkv_gather = gather_beside_gemm(phase);
      Op qkv = gemm(OpName::QkvGemm, phase, T, (q + 2 * kv) / t, h);
      qkv.mem_alloc = alloc(2 * T * (q + 2 * kv) / t);
      attn_alloc += qkv.mem_alloc;
      chain(qkv);
      wait_for_overlapped(qkv_gather);
      qk_norm(phase, keep, attn_alloc);
      if (m_.position_embedding_type == PositionEmbedding::Rope)
        chain(shaped(
            memory_bound(OpKind::Elementwise, OpName::Rope, phase, 2 * 2 * T * (q + kv) / t), T,
            (q + kv) / t / static_cast<double>(m_.head_dim()), static_cast<double>(m_.head_dim())));
    }
    attention_with_cp(
        attention(phase, 1.0, keep ? attention_saved() + 2 * T * o_w_ / t : 0, attn_alloc), false);
    fp8_cast(phase, T * o_w_ / t);  // the attention output, input of the out-projection
    Op proj = gemm(OpName::OutProjGemm, phase, T, h, o_w_ / t);
    proj.mem_transient = static_cast<std::int64_t>(2 * T * h);
    gemm_then_reduce(proj, phase);
    Op bda = memory_bound(OpKind::Elementwise, OpName::BiasDropoutAdd, phase, 3 * 2 * local);
    bda.mem_alloc = alloc(m_.hidden_dropout > 0 ? local : 0);
    attn_alloc += bda.mem_alloc;
    chain(bda);

    Op norm2 = layer_norm(OpName::PreMlpNorm, phase);
    norm2.mem_alloc = alloc((2 + out_bytes) * local);
    // Output-discarding recompute of an unfused pre-MLP norm, or the checkpointed dense MLP
    // (whose fused norm is inside the checkpoint): only the input is kept.
    if (discards_pre_mlp_norm(l) || checkpoints_mlp(l)) norm2.mem_alloc = alloc(2 * local);
    mlp_alloc += norm2.mem_alloc;
    chain(norm2);
    if (m_.is_moe_layer(l)) {
      // A checkpointed MoE block keeps its input only (the pre-MLP norm's output), a
      // checkpointed shared MLP likewise.
      const bool whole = checkpoints_moe(l);
      moe_forward(phase, keep && !whole, out_bytes, mlp_alloc);
      if (m_.moe_shared_expert_intermediate_size > 0 && overlapped_shared() == 0)
        mlp_forward(static_cast<double>(m_.moe_shared_expert_intermediate_size), phase,
                    keep && !whole && !checkpoints_shared(l), out_bytes, mlp_alloc,
                    OpName::SharedFc1Gemm, OpName::SharedFc2Gemm);
    } else {
      ovl_stage(5, -1);
      mlp_forward(f, phase, keep && !checkpoints_mlp(l), out_bytes, mlp_alloc, OpName::Fc1Gemm,
                  OpName::Fc2Gemm);
    }
    ovl_stage(7, -1);
    Op bda2 = memory_bound(OpKind::Elementwise, OpName::BiasDropoutAdd, phase, 3 * 2 * local);
    bda2.mem_alloc = alloc(m_.hidden_dropout > 0 ? local : 0);
    mlp_alloc += bda2.mem_alloc;
    chain(bda2);
    if (checkpointed(l) && phase == Phase::Forward) {
      // Only the checkpoint's input stays until its recompute.
      saved_input_[{l, cur_mb_}] = norm.mem_alloc;
    } else {
      layer_saved_[{l, cur_mb_}] = {attn_alloc, mlp_alloc};
    }
  }

  /// A TP-split MLP of width f (the dense MLP, or the shared experts): FC1, activation, FC2 with
  /// the SP gather before and the TP reduction after.
  void mlp_forward(double f, Phase phase, bool keep, double out_bytes, std::int64_t& mlp_alloc,
                   OpName fc1_name, OpName fc2_name) {
    mlp_fc1(f, phase, keep, out_bytes, mlp_alloc, fc1_name);
    mlp_fc2(f, phase, fc2_name);
  }
  /// Its first half: the SP gather, FC1 and the activation (GELU / SwiGLU read [T, φ₁·f/t] and
  /// write [T, f/t], in fp8 under fp8: FC2's input).
  void mlp_fc1(double f, Phase phase, bool keep, double out_bytes, std::int64_t& mlp_alloc,
               OpName fc1_name) {
    const double T = tokens_, t = tp_, h = h_;
    const double glu = m_.gated_linear_unit ? 2.0 : 1.0;
    auto alloc = [&](double bytes) { return keep ? static_cast<std::int64_t>(bytes) : 0; };
    const std::uint32_t fc1_gather = gather_beside_gemm(phase);
    Op fc1 = gemm(fc1_name, phase, T, f * glu / t, h);
    fc1.mem_alloc = alloc(2 * T * f * glu / t);
    mlp_alloc += fc1.mem_alloc;
    chain(fc1);
    wait_for_overlapped(fc1_gather);
    Op act = shaped(memory_bound(OpKind::Elementwise, OpName::Activation, phase,
                                 2 * T * f / t * glu + out_bytes * T * f / t, 8 * T * f / t),
                    T, f / t, glu);
    act.mem_alloc = alloc(out_bytes * T * f / t);
    mlp_alloc += act.mem_alloc;
    chain(act);
  }
  /// … and its second: FC2 and the TP reduction.
  void mlp_fc2(double f, Phase phase, OpName fc2_name) {
    Op fc2 = gemm(fc2_name, phase, tokens_, h_, f / tp_);
    fc2.mem_transient = static_cast<std::int64_t>(2 * tokens_ * h_);
    gemm_then_reduce(fc2, phase);
  }
  /// Backward of mlp_forward; returns the ops that finished FC2's and FC1's weight gradients.
  std::pair<std::uint32_t, std::uint32_t> mlp_backward(double f, OpName fc1_name, OpName fc2_name) {
    const std::uint32_t fc2 = mlp_fc2_backward(f, fc2_name);
    return {fc2, mlp_fc1_backward(f, fc1_name)};
  }
  /// Its halves: FC2's backward and the activation's; FC1's backward. Each returns the op that
  /// finished its weight gradient.
  std::uint32_t mlp_fc2_backward(double f, OpName fc2_name) {
    const double T = tokens_, t = tp_;
    const double glu = m_.gated_linear_unit ? 2.0 : 1.0;
    const std::uint32_t fc2 = row_backward(fc2_name, T, h_, f / t);
    chain(shaped(memory_bound(OpKind::Elementwise, OpName::Activation, Phase::Backward,
                              2 * T * f / t * (glu + 2), 8 * T * f / t),
                 T, f / t, glu));
    return fc2;
  }
  std::uint32_t mlp_fc1_backward(double f, OpName fc1_name) {
    const double glu = m_.gated_linear_unit ? 2.0 : 1.0;
    return column_backward(fc1_name, tokens_, f * glu / tp_, h_);
  }

  /// MLA's projections before core attention (megatron/core/transformer/multi_latent_attention.py):
  /// TP-duplicated down projections on this rank's SP share of the tokens, RMSNorms on the
  /// latents, then column-parallel up projections whose SP all-gather moves the latents (not
  /// the hidden states), and RoPE on the rotary query and key parts.
  void mla_projections_forward(Phase phase, bool keep, std::int64_t& attn_alloc) {
    const double T = tokens_, t = tp_, h = h_, Tl = tokens_ / seq_shard_;
    const double a = static_cast<double>(m_.num_attention_heads);
    const double ql = static_cast<double>(m_.q_lora_rank);
    const double kvl = static_cast<double>(m_.kv_lora_rank);
    const double dpe = static_cast<double>(m_.qk_pos_emb_head_dim);
    auto alloc = [&](double bytes) { return keep ? static_cast<std::int64_t>(bytes) : 0; };
    const double latents = (ql + kvl) * Tl;
    if (ql > 0) chain(gemm(OpName::QDownGemm, phase, Tl, ql, h));
    chain(gemm(OpName::KvDownGemm, phase, Tl, kvl + dpe, h));
    Op norm =
        shaped(memory_bound(OpKind::Norm, OpName::LatentNorm, phase, 4 * latents, 8 * latents), Tl,
               ql + kvl);
    norm.mem_alloc = alloc(4 * latents);  // the latents and their normalised copies
    attn_alloc += norm.mem_alloc;
    chain(norm);
    // The query path: from the q latent, or straight from the hidden states without q LoRA.
    const std::uint32_t qg = gather_beside_gemm(phase, ql > 0 ? 2 * T * ql : -1);
    // Output-discarding recompute of the up projections (mla_up_proj): Q, K and V freed once
    // core attention has run, made again before its backward (mla_up_proj_rerun).
    if (p_.recomputes(kRecomputeMlaUpProj) && phase == Phase::Forward) keep = false;
    Op q = gemm(OpName::QUpGemm, phase, T, qk_w_ / t, ql > 0 ? ql : h);
    q.mem_alloc = alloc(2 * T * qk_w_ / t);
    attn_alloc += q.mem_alloc;
    chain(q);
    wait_for_overlapped(qg);
    const std::uint32_t kvg = gather_beside_gemm(phase, 2 * T * (kvl + dpe));
    Op kv = gemm(OpName::KvUpGemm, phase, T, (k_w_ - a * dpe + v_w_) / t, kvl);
    kv.mem_alloc = alloc(2 * T * (k_w_ + v_w_) / t);  // K (with the shared rotary part) and V
    attn_alloc += kv.mem_alloc;
    chain(kv);
    wait_for_overlapped(kvg);
    chain(shaped(
        memory_bound(OpKind::Elementwise, OpName::Rope, phase, 2 * 2 * T * (a / t + 1) * dpe), T,
        a / t + 1, dpe));
  }
  void mla_projections_backward(std::int64_t l) {
    const double T = tokens_, t = tp_, h = h_, Tl = tokens_ / seq_shard_;
    const double a = static_cast<double>(m_.num_attention_heads);
    const double ql = static_cast<double>(m_.q_lora_rank);
    const double kvl = static_cast<double>(m_.kv_lora_rank);
    const double dpe = static_cast<double>(m_.qk_pos_emb_head_dim);
    const double latents = (ql + kvl) * Tl;
    chain(shaped(memory_bound(OpKind::Elementwise, OpName::Rope, Phase::Backward,
                              2 * 2 * T * (a / t + 1) * dpe),
                 T, a / t + 1, dpe));
    column_backward(OpName::KvUpGemm, T, (k_w_ - a * dpe + v_w_) / t, kvl, 2 * T * (kvl + dpe));
    std::vector<std::uint32_t> reduces = take_reduce();
    column_backward(OpName::QUpGemm, T, qk_w_ / t, ql > 0 ? ql : h, ql > 0 ? 2 * T * ql : -1);
    for (std::uint32_t r : take_reduce()) reduces.push_back(r);
    chain(shaped(memory_bound(OpKind::Norm, OpName::LatentNorm, Phase::Backward, 6 * latents,
                              10 * latents),
                 Tl, ql + kvl, 0),
          reduces);
    // Duplicated down projections: dgrad and wgrad on the local tokens, no TP communication
    // (their weight gradients join the norms' all-reduce in finish_iteration).
    chain(gemm(OpName::KvDownGemm, Phase::Backward, Tl, h, kvl + dpe));
    Op wg = gemm(OpName::KvDownGemm, Phase::Backward, h, kvl + dpe, Tl);
    wg.mem_bytes += 2 * p_.grad_bytes() * h * (kvl + dpe);
    ready_[param_key(l, kQkv)] = chain(wg);
    if (ql > 0) {
      chain(gemm(OpName::QDownGemm, Phase::Backward, Tl, h, ql));
      Op qw = gemm(OpName::QDownGemm, Phase::Backward, h, ql, Tl);
      qw.mem_bytes += 2 * p_.grad_bytes() * h * ql;
      ready_[param_key(l, kQkv)] = chain(qw);
    }
  }

  bool ep_comm() const { return p_.ep() > 1; }
  /// The expert-TP gather / scatter around the experts: the all-to-all dispatcher's (the
  /// all-gather dispatcher's TP × EP gather already brings every token of the ETP group).
  bool etp_comm() const {
    return p_.etp() > 1 && p_.moe_token_dispatcher_type != MoeDispatcher::AllGather;
  }
  bool allgather_dispatch() const {
    return p_.moe_token_dispatcher_type == MoeDispatcher::AllGather && p_.etp() * p_.ep() > 1;
  }
  /// The grouped expert GEMM [N, k]×[k, n] of the rank's local experts: N token copies in all,
  /// N / E_local per expert (the shape the GEMM efficiency sees), one launch.
  Op grouped_gemm(OpName name, Phase phase, double tokens, double n, double k) const {
    Op op = gemm(name, phase, std::max(1.0, tokens / local_experts_), n, k);
    op.flops = 2 * tokens * n * k;
    const double weights = local_experts_ * k * n;
    op.mem_bytes =
        fp8_ ? tokens * k + weights + 2 * tokens * n : 2 * (tokens * k + weights + tokens * n);
    return op;
  }
  /// Dispatch (forward) or combine (backward of the combine: the same direction) of the token
  /// copies over EP, with the all-to-all dispatcher: S = 2·h·(the busiest member's copies), the
  /// send and receive buffers alive while it runs. The all-gather dispatcher gathers every
  /// token of the EP group (and its routing) instead, and reduce-scatters the outputs back.
  /// Returns kNone, or with `beside` the all-to-all issued beside the compute chain (the shared
  /// experts' overlap), for the caller to wait for.
  std::uint32_t ep_exchange(Phase phase, OpName name, bool towards_experts, bool beside = false) {
    const double h = h_;
    if (p_.moe_token_dispatcher_type == MoeDispatcher::AllGather) {
      // MoEAllGatherTokenDispatcher: hidden states [T_l, h] (and the routing) of the whole
      // ETP × EP group gathered, the experts' outputs reduce-scattered back over it.
      if (!allgather_dispatch()) return kNone;
      const double bytes = 2 * h * load_.local_tokens * static_cast<double>(p_.ep() * p_.etp());
      Op op = collective(towards_experts ? OpKind::AllGather : OpKind::ReduceScatter,
                         CommRole::TpEp, name, phase, bytes);
      op.mem_transient = static_cast<std::int64_t>(bytes);
      chain(op);
      return kNone;
    }
    if (!ep_comm()) return kNone;
    Op op = collective(OpKind::AllToAll, CommRole::Ep, name, phase, 2 * h * load_.max_exchanged);
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
  double overlapped_shared() const {
    return p_.moe_shared_expert_overlap
               ? static_cast<double>(m_.moe_shared_expert_intermediate_size)
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
  void sort_chunks(Phase phase, bool dispatch_side) {
    if (p_.moe_token_dispatcher_type != MoeDispatcher::AllToAll || local_experts_ <= 1) return;
    const double N = load_.computed;
    chain(memory_bound(OpKind::Elementwise, OpName::MoeSortChunks, phase,
                       4 * N * h_ + (dispatch_side ? 8 * N : 0.0)));
  }
  /// The MoE block's forward (Megatron MoELayer with MoEAlltoAllTokenDispatcher: router,
  /// permute → A2A(EP) → AG(ETP) → grouped FC1, activation, grouped FC2 → RS(ETP) → A2A(EP) →
  /// unpermute; token_dispatcher.py).
  void moe_forward(Phase phase, bool keep, double out_bytes, std::int64_t& mlp_alloc) {
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
    mlp_alloc += topk.mem_alloc;
    chain(topk);
    Op permute = memory_bound(OpKind::Elementwise, OpName::MoePermute, phase,
                              2 * Tl * h + 2 * load_.sent * h);
    // Megatron copies the tokens per expert to the host here (the dispatcher's split sizes, the
    // grouped GEMM's m_splits; DeepEP's dispatch waits for its receive counts): the host stops
    // issuing until the router and this permute ran (docs/model.md "Host issue").
    permute.host_sync = 1;
    chain(permute);
    const double shared = overlapped_shared();
    ovl_stage(3, -1);
    const std::uint32_t dispatch = ep_exchange(phase, OpName::EpDispatch, true, shared > 0);
    ovl_stage(5, -1);
    if (shared > 0) {
      mlp_fc1(shared, phase, keep, out_bytes, mlp_alloc, OpName::SharedFc1Gemm);
      wait_for_overlapped(dispatch);
    }
    if (etp_comm())
      chain(collective(OpKind::AllGather, CommRole::Etp, OpName::EtpAllGather, phase, 2 * h * N));
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
    mlp_alloc += unpermute.mem_alloc;
    chain(unpermute);
  }
  /// The MoE block's backward, the forward's collectives in reverse.
  void moe_backward(std::int64_t l) {
    const double h = h_, Tl = load_.local_tokens;
    const double E = static_cast<double>(m_.num_experts);
    const double glu = m_.gated_linear_unit ? 2.0 : 1.0;
    const double f = static_cast<double>(m_.expert_ffn()) / static_cast<double>(p_.etp());
    const double N = load_.computed;
    const Phase B = Phase::Backward;
    chain(memory_bound(OpKind::Elementwise, OpName::MoeUnpermute, B,
                       2 * Tl * h + 2 * 2 * load_.sent * h));
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
    chain(shaped(memory_bound(OpKind::Elementwise, OpName::ExpertActivation, B,
                              2 * N * f * (glu + 2), 8 * N * f),
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
    if (etp_comm())
      chain(
          collective(OpKind::ReduceScatter, CommRole::Etp, OpName::EtpReduceScatter, B, 2 * h * N));
    ovl_stage(-1, 4);
    const std::uint32_t dispatch = ep_exchange(B, OpName::EpDispatch, false, shared > 0);
    ovl_stage(-1, 6);
    if (shared > 0) {
      ready_[param_key(l, kFc1)] = mlp_fc1_backward(shared, OpName::SharedFc1Gemm);
      wait_for_overlapped(dispatch);
    }
    chain(
        memory_bound(OpKind::Elementwise, OpName::MoePermute, B, 2 * load_.sent * h + 2 * Tl * h));
    chain(memory_bound(OpKind::Elementwise, OpName::RouterTopk, B, 3 * 4 * Tl * E, 8 * Tl * E));
    chain(gemm(OpName::Router, B, Tl, h, E));
    Op rw = gemm(OpName::Router, B, h, E, Tl);
    rw.gemm_dtype = graph::GemmDtype::Bf16;
    rw.mem_bytes += 2 * p_.grad_bytes() * h * E;
    ready_[param_key(l, kRouter)] = chain(rw);
  }

  /// Bytes per element of a linear layer's input as a norm or activation writes it and the GEMM
  /// keeps it: fp8 under fp8 (Transformer Engine writes it cast), else bf16.
  double gemm_input_bytes() const { return fp8_ ? 1.0 : 2.0; }
  /// A layer's input or pre-MLP norm over this rank's [T, h]: reads its bf16 input, writes the
  /// next GEMM's input.
  Op layer_norm(OpName name, Phase phase) const {
    const double local = tokens_ * h_ / seq_shard_;
    return shaped(
        memory_bound(OpKind::Norm, name, phase, (2 + gemm_input_bytes()) * local, 8 * local),
        local / h_, h_, norm_kind());
  }
  /// The experts' activation over N rows of width f: reads FC1's output (φ₁·f), writes FC2's
  /// input.
  Op expert_activation(Phase phase, double N, double f) const {
    const double glu = m_.gated_linear_unit ? 2.0 : 1.0;
    return shaped(memory_bound(OpKind::Elementwise, OpName::ExpertActivation, phase,
                               2 * N * f * glu + gemm_input_bytes() * N * f, 8 * N * f),
                  N, f, glu);
  }
  /// Selective recomputation's output-discarding norms (Megatron's "layernorm" module) apply
  /// where the norm is a module of its own, not fused into the next linear layer (TE's
  /// LayerNormLinear): the input norm before MLA's down projections, the pre-MLP norm before
  /// an MoE router.
  bool discards_input_norm() const {
    return p_.recomputes(kRecomputeLayerNorm) && m_.multi_latent_attention;
  }
  bool discards_pre_mlp_norm(std::int64_t l) const {
    return p_.recomputes(kRecomputeLayerNorm) && m_.is_moe_layer(l);
  }
  /// The "moe" module: an MoE layer's whole block checkpointed; "shared_experts": its shared
  /// MLP (not with moe_shared_expert_overlap, whose halves run beside the all-to-alls).
  bool checkpoints_moe(std::int64_t l) const {
    return p_.recomputes(kRecomputeMoe) && m_.is_moe_layer(l);
  }
  bool checkpoints_shared(std::int64_t l) const {
    return p_.recomputes(kRecomputeSharedExperts) && m_.is_moe_layer(l) && overlapped_shared() == 0;
  }
  /// The "mlp" module: a dense layer's MLP, with its fused pre-MLP norm, checkpointed.
  bool checkpoints_mlp(std::int64_t l) const {
    return p_.recomputes(kRecomputeMlp) && !m_.is_moe_layer(l);
  }
  /// A norm of this rank's [T, h] run again before its consumer's backward; allocates its
  /// output, which the half-layer's closing norm frees (rerun_alloc_).
  void rerun_norm(OpName name) {
    Op norm = layer_norm(name, Phase::Recompute);
    norm.mem_alloc = static_cast<std::int64_t>(gemm_input_bytes() * tokens_ * h_ / seq_shard_);
    rerun_alloc_ += norm.mem_alloc;
    chain(norm);
  }
  /// mla_up_proj: the up projections and the rotary embedding again before core attention's
  /// backward, their Q, K, V allocated until the attention half-layer is done.
  void mla_up_proj_rerun() {
    const double T = tokens_, t = tp_, h = h_;
    const double a = static_cast<double>(m_.num_attention_heads);
    const double ql = static_cast<double>(m_.q_lora_rank);
    const double kvl = static_cast<double>(m_.kv_lora_rank);
    const double dpe = static_cast<double>(m_.qk_pos_emb_head_dim);
    const Phase R = Phase::Recompute;
    sp_gather(R, ql > 0 ? 2 * T * ql : -1);
    Op q = gemm(OpName::QUpGemm, R, T, qk_w_ / t, ql > 0 ? ql : h);
    q.mem_alloc = static_cast<std::int64_t>(2 * T * qk_w_ / t);
    sp_gather(R, 2 * T * (kvl + dpe));
    Op kv = gemm(OpName::KvUpGemm, R, T, (k_w_ - a * dpe + v_w_) / t, kvl);
    kv.mem_alloc = static_cast<std::int64_t>(2 * T * (k_w_ + v_w_) / t);
    rerun_alloc_ += q.mem_alloc + kv.mem_alloc;
    chain(q);
    chain(kv);
    chain(shaped(memory_bound(OpKind::Elementwise, OpName::Rope, R, 2 * 2 * T * (a / t + 1) * dpe),
                 T, a / t + 1, dpe));
  }

  /// Bytes core attention keeps for its backward beyond Q, K, V and its output.
  double attention_saved() const {
    if (p_.recomputes(kRecomputeCoreAttn)) return 0;  // recomputed in the backward
    const double a = static_cast<double>(m_.num_attention_heads) / tp_;
    const double s = static_cast<double>(m_.seq_length) / cp_;  // this rank's queries
    const double b = static_cast<double>(t_.micro_batch_size);
    if (t_.attention == AttentionBackend::Unfused)
      return (m_.attention_dropout > 0 ? 5.0 : 2.0) * a * s * s * b;  // Korthikanti §4.1
    return 4 * b * a * s;                                             // fp32 log-sum-exp
  }

  /// Core attention. Fused (flash): forward 4·b·s²·q/t FLOPs halved for the causal mask, the
  /// backward 2.5× the forward (flash-attention benchmarks, MODELING §1.1), one kernel each.
  /// Unfused (Megatron's CoreAttention): batched GEMMs over the whole s×s square (no causal
  /// skipping), forward QKᵀ and PV (4·b·s²·q/t), backward four GEMMs (twice that), and passes over
  /// the fp16/bf16 scores: forward softmax r+w (4 B/score) and dropout r + w + 1-byte mask (5),
  /// backward dropout (5) and softmax r dY, Y + w dX (6); the GEMMs read and write the scores
  /// (docs/cost-model.md §1.4). `factor` is the fused backward's 2.5.
  Op attention(Phase phase, double factor, double saved, std::int64_t& attn_alloc) const {
    Op op = base(OpKind::Attention, OpName::Attention, phase);
    const double s = static_cast<double>(m_.seq_length);
    const double b = static_cast<double>(t_.micro_batch_size);
    const double heads = static_cast<double>(m_.num_attention_heads) / tp_;
    const double dh = static_cast<double>(m_.qk_dim());
    op.shape = {static_cast<std::uint32_t>(b * heads), static_cast<std::uint32_t>(s),
                static_cast<std::uint32_t>(dh)};
    if (m_.v_dim() != m_.qk_dim()) op.value_dim = static_cast<std::uint16_t>(m_.v_dim());
    if (t_.attention == AttentionBackend::Unfused) {
      const bool bwd = phase == Phase::Backward;
      const double scores = b * heads * s * s;     // elements of one [b·a/t, s, s] tensor
      const double head = 2 * b * heads * s * dh;  // bytes of one [b·a/t, s, dh] tensor
      const double dropout = m_.attention_dropout > 0 ? 5 : 0;
      op.attention_impl = graph::AttentionImpl::Unfused;
      op.flops = (bwd ? 2 : 1) * 2 * b * s * s * (qk_w_ + o_w_) / tp_;
      // GEMMs: forward QKᵀ (Q, K → S) and PV (P, V → O); backward dP, dV, dQ, dK.
      const double gemm_bytes = bwd ? 4 * (2 * head + 2 * scores) : 2 * (2 * head + 2 * scores);
      op.mem_bytes = gemm_bytes + (bwd ? 6 + dropout : 4 + dropout) * scores;
    } else {
      // With context parallelism (causal, load-balanced DualChunkSwap) the rank's s/c queries
      // attend to keys of the whole sequence in c blocks of s/c: 1/c of the work, the kernel
      // running on blocks of s/c (the rate table's length), every key/value block read once.
      // With the all-to-all (Ulysses) the same work is 1/c of the heads over all s tokens.
      if (t_.attention == AttentionBackend::Flash2)
        op.attention_impl = graph::AttentionImpl::Flash2;
      const double local = s / cp_;
      const bool a2a = p_.cp_comm_type == CpCommType::A2a;
      op.shape[0] = static_cast<std::uint32_t>(b * heads / (a2a ? cp_ : 1.0));
      op.shape[1] = static_cast<std::uint32_t>(a2a ? s : local);
      // QKᵀ over a·dqk and PV over a·dv: 2·b·s·local·(qk + o) FLOPs, causal half.
      op.flops = factor * 0.5 * 2 * b * s * local * (qk_w_ + o_w_) / tp_;
      op.mem_bytes =
          factor * 2 * tokens_ * (qk_w_ + o_w_ + (k_w_ + v_w_) * (a2a ? 1.0 : cp_)) / tp_;
    }
    op.mem_alloc = static_cast<std::int64_t>(saved);
    attn_alloc += op.mem_alloc;
    return op;
  }

  /// Column-parallel linear backward (QKV, FC1): with SP the saved input shard is re-gathered
  /// asynchronously while dgrad runs, then the input-grad reduce-scatter overlaps wgrad; without
  /// SP the input-grad all-reduce overlaps wgrad (Megatron
  /// LinearWithGradAccumulationAndAsyncCommunication.backward, MODELING §1.3).
  std::uint32_t column_backward(OpName name, double m, double n, double k,
                                double input_bytes = -1) {
    const double bytes = input_bytes < 0 ? hidden_bytes_ : input_bytes;
    std::uint32_t before = chain_;
    std::uint32_t gather = kNone;
    if (tp_comm() && p_.sequence_parallel) {
      Op ag =
          collective(OpKind::AllGather, CommRole::Tp, OpName::TpAllGather, Phase::Backward, bytes);
      gather = add_free(ub_ ? userbuffers(ag, kPipelineSms) : ag, {before});
    }
    if (fp8_) {
      fp8_cast(Phase::Backward, m * n);  // the output gradient dY
      before = chain_;
    }
    Op dgrad = gemm(name, Phase::Backward, m, k, n);  // dX = dY·Wᵀ: [T, n]×[n, k]
    dgrad.mem_transient = static_cast<std::int64_t>(2 * m * k);
    if (ub_) dgrad.comm_sms = kPipelineSms;  // beside the bulk all-gather of the input
    std::uint32_t dg = add_free(dgrad, {before});
    std::vector<std::uint32_t> after_dg{dg};
    if (gather != kNone) after_dg.push_back(gather);
    std::uint32_t reduce = kNone;
    if (tp_comm()) {
      const Op r = tp_reduce(Phase::Backward, bytes);
      reduce = add_free(ub_ ? userbuffers(r, kPipelineSms) : r, after_dg);
    }
    Op wgrad = gemm(name, Phase::Backward, k, n, m);  // dW = Xᵀ·dY: [k, T]×[T, n]
    wgrad.mem_bytes += 2 * p_.grad_bytes() * k * n;   // main_grad accumulation (MODELING §1.1)
    if (ub_ && reduce != kNone) wgrad.comm_sms = kPipelineSms;  // beside the bulk reduce-scatter
    std::uint32_t wg = add_free(wgrad, after_dg);
    chain_ = wg;
    if (reduce != kNone) pending_reduce_ = reduce;
    return wg;
  }
  /// Row-parallel linear backward (out-proj, FC2): with SP the output grad is all-gathered first.
  std::uint32_t row_backward(OpName name, double m, double n, double k) {
    const std::uint32_t gathered = gather_beside_gemm(Phase::Backward);
    fp8_cast(Phase::Backward, m * n);  // the output gradient dY
    Op dgrad = gemm(name, Phase::Backward, m, k, n);
    dgrad.mem_transient = static_cast<std::int64_t>(2 * m * k);
    chain(dgrad);
    wait_for_overlapped(gathered);
    Op wgrad = gemm(name, Phase::Backward, k, n, m);
    wgrad.mem_bytes += 2 * p_.grad_bytes() * k * n;
    return chain(wgrad);
  }
  /// The next op on the chain also waits for the overlapped TP reduction, if any.
  std::vector<std::uint32_t> take_reduce() {
    std::vector<std::uint32_t> d;
    if (pending_reduce_ != kNone) d.push_back(pending_reduce_);
    pending_reduce_ = kNone;
    return d;
  }

  void layer_backward(std::int64_t l, std::int64_t mb) {
    cur_layer_ = l;
    cur_mb_ = mb;
    if (m_.capture) {
      captured_backward(l, mb);
      return;
    }
    const double T = tokens_, t = tp_, h = h_;
    const double q = static_cast<double>(m_.query_width());
    const double kv = static_cast<double>(m_.kv_width());
    const double local = T * h / seq_shard_;
    auto saved = layer_saved_.at({l, mb});
    std::int64_t input = 0;
    if (auto it = saved_input_.find({l, mb}); it != saved_input_.end()) input = it->second;

    chain(
        memory_bound(OpKind::Elementwise, OpName::BiasDropoutAdd, Phase::Backward, 3 * 2 * local));
    rerun_alloc_ = 0;
    if (discards_pre_mlp_norm(l)) rerun_norm(OpName::PreMlpNorm);
    if (checkpoints_mlp(l)) {
      // The checkpointed MLP runs forward again (its fused norm, FC1, activation, FC2 and the
      // TP reduction), keeping what its backward needs.
      const double out_bytes = gemm_input_bytes();
      rerun_norm(OpName::PreMlpNorm);
      mlp_forward(static_cast<double>(m_.ffn()), Phase::Recompute, true, out_bytes, rerun_alloc_,
                  OpName::Fc1Gemm, OpName::Fc2Gemm);
    }
    if (m_.is_moe_layer(l)) {
      const double out_bytes = gemm_input_bytes();
      const auto fs = static_cast<double>(m_.moe_shared_expert_intermediate_size);
      const bool shared = fs > 0 && overlapped_shared() == 0;
      // The checkpointed MoE block runs forward again, its collectives included (Megatron's
      // "moe" module); or only its shared experts ("shared_experts").
      if (checkpoints_moe(l)) moe_forward(Phase::Recompute, true, out_bytes, rerun_alloc_);
      if (shared && (checkpoints_moe(l) || checkpoints_shared(l)))
        mlp_forward(fs, Phase::Recompute, true, out_bytes, rerun_alloc_, OpName::SharedFc1Gemm,
                    OpName::SharedFc2Gemm);
      if (shared)
        std::tie(ready_[param_key(l, kFc2)], ready_[param_key(l, kFc1)]) =
            mlp_backward(fs, OpName::SharedFc1Gemm, OpName::SharedFc2Gemm);
      moe_backward(l);
    } else {
      ovl_stage(-1, 2);
      std::tie(ready_[param_key(l, kFc2)], ready_[param_key(l, kFc1)]) =
          mlp_backward(static_cast<double>(m_.ffn()), OpName::Fc1Gemm, OpName::Fc2Gemm);
    }
    ovl_stage(-1, 6);
    Op norm2 = shaped(
        memory_bound(OpKind::Norm, OpName::PreMlpNorm, Phase::Backward, 6 * local, 10 * local),
        local / h, h, norm_kind());
    norm2.mem_free = saved.second + std::exchange(rerun_alloc_, 0);
    ready_[param_key(l, kPreMlpNorm)] = chain(norm2, take_reduce());

    chain(
        memory_bound(OpKind::Elementwise, OpName::BiasDropoutAdd, Phase::Backward, 3 * 2 * local));
    ready_[param_key(l, kOutProj)] = row_backward(OpName::OutProjGemm, T, h, o_w_ / t);
    if (m_.multi_latent_attention && p_.recomputes(kRecomputeMlaUpProj)) mla_up_proj_rerun();
    if (p_.recomputes(kRecomputeCoreAttn)) {
      std::int64_t none = 0;
      attention_with_cp(attention(Phase::Recompute, 1.0, 0, none), false);
    }
    std::int64_t none = 0;
    attention_with_cp(attention(Phase::Backward, 2.5, 0, none), true);
    if (m_.multi_latent_attention) {
      if (discards_input_norm()) rerun_norm(OpName::InputNorm);
      mla_projections_backward(l);
    } else {
      if (m_.position_embedding_type == PositionEmbedding::Rope)
        chain(shaped(memory_bound(OpKind::Elementwise, OpName::Rope, Phase::Backward,
                                  2 * 2 * T * (q + kv) / t),
                     T, (q + kv) / t / static_cast<double>(m_.head_dim()),
                     static_cast<double>(m_.head_dim())));
      qk_norm(Phase::Backward, false, none);
      ready_[param_key(l, kQkv)] = column_backward(OpName::QkvGemm, T, (q + 2 * kv) / t, h);
    }
    Op norm = shaped(
        memory_bound(OpKind::Norm, OpName::InputNorm, Phase::Backward, 6 * local, 10 * local),
        local / h, h, norm_kind());
    norm.mem_free = saved.first + input + std::exchange(rerun_alloc_, 0);
    ready_[param_key(l, kInputNorm)] = chain(norm, take_reduce());
  }

  /// The final norm, the output layer and the loss; `layer` ≥ 0: an MTP module's (its final
  /// norm, the shared output layer, its own loss), whose buffers are the same sizes as the
  /// main head's.
  void head_forward(std::int64_t layer = -1) {
    cur_layer_ = layer;
    if (outer_.available) return captured_outer(outer_.post, -2, Phase::Forward, head_alloc_);
    const double T = tokens_, t = tp_, h = h_;
    const double V = static_cast<double>(m_.padded_vocab(p_.tp()));
    const double local = T * h / seq_shard_;
    Op norm =
        shaped(memory_bound(OpKind::Norm, OpName::FinalNorm, Phase::Forward, 4 * local, 8 * local),
               local / h, h, norm_kind());
    norm.mem_alloc = static_cast<std::int64_t>(4 * local);
    head_alloc_ = norm.mem_alloc;
    std::vector<std::uint32_t> extra;
    if (layer < 0 && cur_mb_ == 0 && gather_of_.count(-2)) extra = gather_of_.at(-2);
    chain(norm, extra);
    sp_gather(Phase::Forward);
    Op logits = gemm(OpName::LogitsGemm, Phase::Forward, T, V / t, h);
    logits.mem_transient = static_cast<std::int64_t>(2 * T * V / t);  // bf16 logits
    chain(logits);
    // Vocab-parallel cross-entropy: fp32 logits kept for the backward, three all-reduces of T
    // fp32 values (max, target logit, Σexp) over TP (core/tensor_parallel/cross_entropy.py).
    Op ce = shaped(memory_bound(OpKind::Loss, OpName::CrossEntropy, Phase::Forward,
                                (2 + 4 + 4) * T * V / t, 5 * T * V / t),
                   T, V / t);
    // The fp32 copy (exp-logits after the in-place softmax) is kept for the backward; the bf16
    // logits stay referenced (GPTModel.forward's `logits`) until the loss is computed.
    ce.mem_alloc = static_cast<std::int64_t>(4 * T * V / t);
    ce.mem_transient = static_cast<std::int64_t>(2 * T * V / t);
    ce_alloc_ = ce.mem_alloc;
    chain(ce);
    if (tp_comm())
      for (int i = 0; i < 3; ++i)
        chain(collective(OpKind::AllReduce, CommRole::Tp, OpName::CeAllReduce, Phase::Forward,
                         4 * T));
  }
  void head_backward(std::int64_t layer = -1) {
    cur_layer_ = layer;
    if (outer_.available) return captured_outer(outer_.post, -2, Phase::Backward, head_alloc_);
    const double T = tokens_, t = tp_, h = h_;
    const double V = static_cast<double>(m_.padded_vocab(p_.tp()));
    const double local = T * h / seq_shard_;
    // The gradient is computed in place in the fp32 buffer, then cast to a bf16 [T, V/t] gradient
    // (the backward of `.float()`), which the output layer's dgrad and wgrad read; the fp32
    // buffer is released after the cast.
    Op ce = shaped(memory_bound(OpKind::Loss, OpName::CrossEntropy, Phase::Backward,
                                (4 + 2) * T * V / t, 2 * T * V / t),
                   T, V / t);
    ce.mem_alloc = static_cast<std::int64_t>(2 * T * V / t);
    ce.mem_free = ce_alloc_;
    chain(ce);
    Op dgrad = gemm(OpName::LogitsGemm, Phase::Backward, T, h, V / t);
    chain(dgrad);
    Op wgrad = gemm(OpName::LogitsGemm, Phase::Backward, V / t, h, T);
    wgrad.mem_bytes += 2 * p_.grad_bytes() * V / t * h;
    wgrad.mem_free = ce.mem_alloc;
    chain(wgrad);
    if (tp_comm() && p_.sequence_parallel)
      chain(collective(OpKind::ReduceScatter, CommRole::Tp, OpName::TpReduceScatter,
                       Phase::Backward, hidden_bytes_));
    Op norm = shaped(
        memory_bound(OpKind::Norm, OpName::FinalNorm, Phase::Backward, 6 * local, 10 * local),
        local / h, h, norm_kind());
    norm.mem_free = head_alloc_;
    ready_[-2] = chain(norm);
  }

  // ---- schedules -------------------------------------------------------------------------
  /// Non-interleaved 1F1B exactly as Megatron's forward_backward_pipelining_without_interleaving
  /// (MODELING §2.1): warm-up forwards, steady 1F1B, cool-down backwards.
  void one_f_one_b() {
    const std::int64_t p = p_.pp(), m = num_mb_, r = stage_;
    if (p_.moe_a2a_overlap && p == 1) {
      // combined_1f1b_schedule_for_no_pipelining: F0 alone, then F(i + 1) with B(i), then the
      // last backward alone.
      const std::int64_t n = chunk_layers_[0];
      forward(0);
      for (std::int64_t i = 0; i + 1 < m; ++i)
        combined(
            n, n, [&] { forward(i + 1); }, [&] { backward(i); });
      backward(m - 1);
      return;
    }
    const std::int64_t w = std::min(p - r - 1, m);
    const bool prev = !first_, next = !last_;
    for (std::int64_t i = 0; i < w; ++i) {
      p2p(false, CommRole::None, prev, CommRole::PpPrev, i);
      forward(i);
      p2p(next, CommRole::PpNext, false, CommRole::None, i);
    }
    if (m > w) p2p(false, CommRole::None, prev, CommRole::PpPrev, w);
    for (std::int64_t i = 0; i < m - w; ++i) {
      const bool last_iteration = i == m - w - 1;
      forward(w + i);
      p2p(next, CommRole::PpNext, next, CommRole::PpNext, w + i);  // send_forward_recv_backward
      backward(i);
      if (last_iteration)
        p2p(prev, CommRole::PpPrev, false, CommRole::None, i);  // send_backward
      else
        p2p(prev, CommRole::PpPrev, prev, CommRole::PpPrev, i);  // send_backward_recv_forward
    }
    for (std::int64_t i = 0; i < w; ++i) {
      p2p(false, CommRole::None, next, CommRole::PpNext, m - w + i);
      backward(m - w + i);
      p2p(prev, CommRole::PpPrev, false, CommRole::None, m - w + i);
    }
  }
  /// GPipe: all forwards, then all backwards, each with its own blocking transfers.
  void gpipe() {
    const std::int64_t m = num_mb_;
    for (std::int64_t i = 0; i < m; ++i) {
      p2p(false, CommRole::None, !first_, CommRole::PpPrev, i);
      forward(i);
      p2p(!last_, CommRole::PpNext, false, CommRole::None, i);
    }
    for (std::int64_t i = 0; i < m; ++i) {
      p2p(false, CommRole::None, !last_, CommRole::PpNext, i);
      backward(i);
      p2p(!first_, CommRole::PpPrev, false, CommRole::None, i);
    }
  }

  /// Interleaved 1F1B as Megatron-Core's forward_backward_pipelining_with_interleaving runs it
  /// (MODELING §2.2): v model chunks per rank, virtual micro-batches in the order of
  /// get_schedule_table (groups of G micro-batches run chunk 0, then chunk 1, …; the backward
  /// takes the chunks in reverse), warm-up w = min(2·(p − r − 1) + (v − 1)·G, m·v) forwards,
  /// steady 1F1B, cool-down backwards. Transfers wrap around from the last rank to the first
  /// between chunks. With overlap_p2p_comm (the default) the steady state's transfers are
  /// asynchronous: each forward send is waited for at once (pp_post_forward, to free the output
  /// under deallocate_pipeline_outputs), each backward send one step later (pp_post_backward
  /// waits the previous step's send_prev handle after posting this step's transfers; the last
  /// one after the cool-down loop), each receive just before the forward or backward that needs
  /// it; warm-up and cool-down transfers block. Without it, each step's four transfers are
  /// posted together and waited for at once.
  void interleaved() {
    const std::int64_t p = p_.pp(), v = p_.vpp(), m = num_mb_, r = stage_;
    const std::int64_t G = p_.microbatch_group_size();
    const std::int64_t total = m * v;
    // get_schedule_table: (micro-batch, chunk) of each virtual micro-batch.
    std::vector<std::pair<std::int64_t, std::int64_t>> table;
    for (std::int64_t lo = 0; lo < m; lo += G) {
      const std::int64_t hi = lo + G >= m ? m : lo + G;
      for (std::int64_t c = 0; c < v; ++c)
        for (std::int64_t mb = lo; mb < hi; ++mb) table.emplace_back(mb, c);
    }
    auto chunk_of = [&](std::int64_t k, bool fwd) {
      const std::int64_t c = table[static_cast<std::size_t>(((k % total) + total) % total)].second;
      return fwd ? c : v - 1 - c;
    };
    auto mb_of = [&](std::int64_t k) { return table[static_cast<std::size_t>(k)].first; };
    // recv_tensor_from_previous_stage: whether the peer sends for virtual micro-batch k + 1.
    auto expects = [&](std::int64_t k, bool fwd) {
      const bool leading = fwd ? first_ : last_;
      if (!leading) return true;
      if (k < p - 1) return false;
      return chunk_of(k - (p - 1), fwd) != (fwd ? v - 1 : 0);
    };
    auto sends_forward = [&](std::int64_t k) { return !(last_ && chunk_of(k, true) == v - 1); };
    auto sends_backward = [&](std::int64_t k) { return !(first_ && chunk_of(k, false) == 0); };
    std::int64_t w = 2 * (p - r - 1) + (v - 1) * G;
    // EP overlap: one more warm-up forward, "to ensure the forward and backward computations
    // are independent in all 1f1b steps" (Megatron get_pp_rank_microbatches).
    if (p_.moe_a2a_overlap) ++w;
    const bool all_warmup = w >= total;
    if (all_warmup) w = total;
    const std::int64_t remaining = total - w;
    const bool overlap = p_.overlap_p2p_comm;
    std::deque<std::uint32_t> recv_prev, recv_next;  // posted receives not yet waited for

    // Blocking exchange: post every part, then wait for all (isend/irecv, then wait()).
    auto exchange = [&](bool send_next, bool recv_from_prev, bool send_prev, bool recv_from_next,
                        std::int64_t mb) {
      std::vector<std::uint32_t> posted;
      if (send_next) posted.push_back(post(true, CommRole::PpNext, mb));
      if (recv_from_prev) posted.push_back(post(false, CommRole::PpPrev, mb));
      if (send_prev) posted.push_back(post(true, CommRole::PpPrev, mb));
      if (recv_from_next) posted.push_back(post(false, CommRole::PpNext, mb));
      for (std::uint32_t op : posted) wait_for(op);
    };
    auto wait_front = [&](std::deque<std::uint32_t>& q) {
      if (q.empty()) return;
      wait_for(q.front());
      q.pop_front();
    };
    // pp_post_backward (schedules.py, Megatron-Core d98e8a6): post this step's send_prev and
    // recv_next, then wait the previous step's send_prev handle; this step's is waited one step
    // later (or after the cool-down loop).
    std::uint32_t send_prev_pending = kNone;
    auto post_backward = [&](std::int64_t k, bool recv_b) {
      const std::uint32_t send = sends_backward(k) ? post(true, CommRole::PpPrev, mb_of(k)) : kNone;
      if (recv_b) recv_next.push_back(post(false, CommRole::PpNext, mb_of(k)));
      wait_for_overlapped(std::exchange(send_prev_pending, send));
    };

    // recv_forward before the loop (nothing on the first virtual stage).
    if (!first_) exchange(false, true, false, false, 0);
    for (std::int64_t k = 0; k < w; ++k) {
      forward(mb_of(k), chunk_of(k, true));
      const bool recv = expects(k, true) && k != total - 1;
      if (k == w - 1 && !all_warmup && !overlap) {
        exchange(sends_forward(k), recv, false, !last_, mb_of(k));
      } else {
        exchange(sends_forward(k), recv, false, false, mb_of(k));
        if (k == w - 1 && !all_warmup && !last_)  // recv_backward posted asynchronously
          recv_next.push_back(post(false, CommRole::PpNext, mb_of(k)));
      }
    }
    for (std::int64_t k = 0; k < remaining; ++k) {
      const std::int64_t fk = w + k;
      const bool recv_f = expects(fk, true) && k != remaining - 1;
      const bool recv_b = expects(k, false);
      if (overlap && p_.moe_a2a_overlap) {
        // combined_1f1b_schedule_for_interleaved_pipelining: the step's forward and backward
        // together (each with its own transfers), layer by layer.
        combined(
            chunk_layers_[static_cast<std::size_t>(chunk_of(fk, true))],
            chunk_layers_[static_cast<std::size_t>(chunk_of(k, false))],
            [&] {
              if (!(first_ && chunk_of(fk, true) == 0)) wait_front(recv_prev);
              forward(mb_of(fk), chunk_of(fk, true));
              if (sends_forward(fk)) wait_for(post(true, CommRole::PpNext, mb_of(fk)));
              if (recv_f) recv_prev.push_back(post(false, CommRole::PpPrev, mb_of(fk)));
            },
            [&] {
              if (!(last_ && chunk_of(k, false) == v - 1)) wait_front(recv_next);
              backward(mb_of(k), chunk_of(k, false));
              post_backward(k, recv_b);
            });
      } else if (overlap) {
        if (!(first_ && chunk_of(fk, true) == 0)) wait_front(recv_prev);
        forward(mb_of(fk), chunk_of(fk, true));
        if (sends_forward(fk)) wait_for(post(true, CommRole::PpNext, mb_of(fk)));
        if (recv_f) recv_prev.push_back(post(false, CommRole::PpPrev, mb_of(fk)));
        if (!(last_ && chunk_of(k, false) == v - 1)) wait_front(recv_next);
        backward(mb_of(k), chunk_of(k, false));
        post_backward(k, recv_b);
      } else {
        forward(mb_of(fk), chunk_of(fk, true));
        backward(mb_of(k), chunk_of(k, false));
        exchange(sends_forward(fk), recv_f, sends_backward(k), recv_b, mb_of(k));
      }
    }
    // Cool-down: blocking exchanges; a receive still posted is waited for before the first
    // backward that needs an input gradient.
    if (all_warmup && !last_) exchange(false, false, false, true, 0);
    for (std::int64_t k = remaining; k < total; ++k) {
      if (!(last_ && chunk_of(k, false) == v - 1) && k != 0) wait_front(recv_next);
      backward(mb_of(k), chunk_of(k, false));
      const bool recv = expects(k, false) && k != total - 1;
      exchange(false, false, sends_backward(k), recv, mb_of(k));
    }
    wait_for_overlapped(send_prev_pending);  // after the cool-down loop (schedules.py)
    SCALESCOPE_EXPECTS(recv_prev.empty() && recv_next.empty());
  }

  /// The reductions of the buckets of model chunk `chunk` (−1: all): a bucket's starts when its
  /// gradients are ready (with overlap_grad_reduce, else at `end_of_backward`); the DP stream
  /// takes them in that order (with several model chunks, the last chunk's are ready first).
  std::vector<std::uint32_t> reduce_buckets(std::int64_t chunk, std::uint32_t end_of_backward) {
    const std::int64_t saved_layer = std::exchange(cur_layer_, -1);
    std::vector<std::uint32_t> reductions;
    std::vector<std::pair<std::uint32_t, std::size_t>> order;
    for (std::size_t k = 0; k < buckets_.size(); ++k) {
      if ((chunk >= 0 && buckets_[k].chunk != chunk) || !reduces(buckets_[k])) continue;
      std::uint32_t ready = end_of_backward;
      if (p_.overlap_grad_reduce) {
        ready = 0;
        for (std::int64_t key : buckets_[k].keys) ready = std::max(ready, ready_.at(key));
      }
      order.emplace_back(ready, k);
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [ready, k] : order) {
      const Bucket& b = buckets_[k];
      // fp32 gradients on the wire (accumulate_allreduce_grads_in_fp32, MODELING §3.1).
      const bool rs = p_.zero() >= 1;
      reductions.push_back(
          add_free(bucket_collective(b, rs ? OpKind::ReduceScatter : OpKind::AllReduce,
                                     Phase::Other, p_.grad_bytes() * b.params),
                   {ready}));
    }
    cur_layer_ = saved_layer;
    return reductions;
  }

  /// finalize_model_grads and the optimizer step (MODELING §1.3–1.4, §3.1).
  void finish_iteration() {
    cur_layer_ = -1;
    cur_mb_ = -1;
    const std::uint32_t end_of_backward = chain_;
    std::vector<std::uint32_t> reductions = zero3_reductions_;
    if (!zero3_) reductions = reduce_buckets(-1, end_of_backward);
    // The next op on the chain waits for every reduction (finish_grad_sync).
    std::vector<std::uint32_t> wait = reductions;
    // Sequence-parallel norm weights: all-reduced over TP once per iteration.
    // With MLA and MoE also the other TP-replicated weights: down projections, latent norms,
    // the router (tp_replicated_parameters).
    if (tp_comm() && p_.sequence_parallel) {
      double norms = 0;
      for (std::int64_t c = 0; c < p_.vpp(); ++c)
        for (std::int64_t l = chunk_first_[c]; l < chunk_first_[c] + chunk_layers_[c]; ++l)
          norms += tp_replicated_parameters(m_, l);
      chain(collective(OpKind::AllReduce, CommRole::Tp, OpName::NormAllReduce, Phase::Other,
                       4 * norms),
            std::exchange(wait, {}));
    }
    // Tied embeddings across the first and last stage, and the last stage's copy of the
    // embedding for MTP (finalize_model_grads._allreduce_word_embedding_grads).
    if (m_.embedding_copy_on_last_stage() && p_.pp() > 1 && (first_ || last_))
      chain(collective(OpKind::AllReduce, CommRole::Embedding, OpName::EmbAllReduce, Phase::Other,
                       4 * vocab_shard()),
            std::exchange(wait, {}));
    // The fp32 master shard: dense parameters over DP × CP, expert ones over expert DP.
    const RankParameters params = rank_parameters(m_, p_, stage_);
    const double shard = p_.zero() >= 1 ? params.dense / static_cast<double>(p_.zero_shard()) +
                                              params.expert / static_cast<double>(p_.edp())
                                        : params.total();
    if (t_.precision == Precision::Fp16) {
      // Mixed precision with loss scaling: unscale the main grads in place and look for inf/NaN
      // (torch._amp_foreach_non_finite_check_and_unscale_), then reduce the flag (MAX) over the
      // model-parallel ranks (Megatron optimizer.py _unscale_main_grads_and_check_for_nan). The
      // model has no TP×PP communicator: the flag is reduced over TP, a 4-byte all-reduce.
      chain(memory_bound(OpKind::Elementwise, OpName::GradUnscale, Phase::Optimizer,
                         2 * p_.grad_bytes() * shard, shard),
            std::exchange(wait, {}));
      if (tp_comm())
        chain(collective(OpKind::AllReduce, CommRole::Tp, OpName::FoundInfAllReduce,
                         Phase::Optimizer, 4));
    }
    // Adam on the fp32 master shard: read grad, master, m, v (12 B + grad bytes), write master,
    // m, v (12 B) and the bf16 weight (2 B); ~12 FLOPs per parameter.
    chain(shaped(memory_bound(OpKind::Optimizer, OpName::OptimizerStep, Phase::Optimizer,
                              (26 + p_.grad_bytes()) * shard, 12 * shard),
                 std::ceil(shard / 1024), 1024),
          std::exchange(wait, {}));
    if (p_.zero() >= 1 && p_.zero() <= 2 && !p_.overlap_param_gather) {
      const std::uint32_t step = chain_;
      for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it)
        if (reduces(*it))
          add_free(bucket_collective(*it, OpKind::AllGather, Phase::Other, gather_bytes(*it)),
                   {step});
    }
  }

  const ModelSpec& m_;
  const ParallelPlan& p_;
  const TrainingSpec& t_;
  std::int64_t stage_;
  graph::RankProgram prog_;
  bool first_ = false, last_ = false;
  std::int64_t layers_ = 0, num_mb_ = 0;
  std::vector<std::int64_t> chunk_layers_, chunk_first_;  ///< per model chunk
  std::vector<std::uint32_t> wait_next_;  ///< ops the next chained op also waits for
  double tokens_ = 0, seq_shard_ = 1, tp_ = 1, cp_ = 1, h_ = 0, hidden_bytes_ = 0;
  double qk_w_ = 0, o_w_ = 0, k_w_ = 0, v_w_ = 0;  ///< attention widths (all heads)
  MoeLoad load_;                                   ///< MoE: this rank's tokens per layer
  LoweredBlock lowered_;                           ///< captured models: the lowered block
  LoweredOuter outer_;  ///< captured models: embedding, head and loss, when the capture has them
  double local_experts_ = 0;

  std::uint32_t chain_ = kNone;
  std::uint32_t pending_reduce_ = kNone;
  // EP overlap: whether a combined step is being emitted, and which part; its chunks' layers;
  // the current slot and position; the step counter; each op's issue key (moe_a2a_overlap).
  bool ovl_ = false, ovl_fwd_ = false;
  std::int64_t ovl_nf_ = 0, ovl_nb_ = 0, ovl_pairs_ = 0, ovl_slot_ = 0;
  int ovl_pos_ = 0;
  std::uint64_t seg_ = 0;
  std::vector<std::uint64_t> keys_;
  std::int64_t cur_layer_ = -1, cur_mb_ = -1;
  std::int64_t emb_alloc_ = 0, head_alloc_ = 0, ce_alloc_ = 0, mtp_alloc_ = 0;
  bool fp8_ = false;
  bool zero3_ = false;                     ///< ZeRO-3 / FSDP with a DP × CP group to shard over
  double layer_unit_ = 0, root_unit_ = 0;  ///< parameters of a layer unit, of the root unit
  bool fp8_fsdp_gather_ = false;    ///< torchao's FSDP float8 all-gather (captured fp8 under FSDP)
  double layer_linear_ = 0;         ///< … the linear weights of a layer unit it gathers in fp8
  std::int64_t pending_alloc_ = 0;  ///< bytes the next chained op allocates
  std::int64_t rerun_alloc_ = 0;    ///< bytes the current half-layer's recompute ops hold
  std::vector<std::uint32_t> zero3_reductions_;
  bool ub_ = false;                  ///< TE userbuffers TP overlap (tp_comm_overlap)
  mutable std::uint8_t ub_sms_ = 0;  ///< SMs the next GEMM gives to an overlapped gather
  std::vector<Bucket> buckets_;
  /// Global layer (−1 embedding, −2 output layer) → the parameter gathers its first forward
  /// waits for.
  std::map<std::int64_t, std::vector<std::uint32_t>> gather_of_;
  /// param_key → the op that finished its gradient (the last micro-batch's, once built).
  std::map<std::int64_t, std::uint32_t> ready_;
  std::map<std::pair<std::int64_t, std::int64_t>, std::pair<std::int64_t, std::int64_t>>
      layer_saved_;
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> saved_input_;
};

}  // namespace

std::int64_t expert_load_classes(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t) {
  return m.moe() && p.ep() > 1 && t.moe_expert_load_skew > 0 ? p.ep() : 1;
}

graph::SlicedGraph build_graph(const ModelSpec& model, const ParallelPlan& plan,
                               const TrainingSpec& training, const std::string& config_text) {
  SCALESCOPE_EXPECTS(plan.tp() > 0 && plan.pp() > 0 && plan.dp() > 0);
  SCALESCOPE_EXPECTS(plan.total_layers(model.num_layers) == model.num_layers);
  SCALESCOPE_EXPECTS(training.num_microbatches(plan.dp()) > 0);
  const RankLayout lay = layout_of(plan);
  graph::SlicedGraph g;
  g.world_size = lay.world();
  g.config_text = config_text;
  // One program per pipeline stage; with a skewed MoE router one per (stage, EP rank), since
  // each EP rank's experts then receive their own number of tokens.
  const std::int64_t ep_classes = expert_load_classes(model, plan, training);
  for (std::int64_t s = 0; s < plan.pp(); ++s)
    for (std::int64_t e = 0; e < ep_classes; ++e)
      g.templates.push_back(
          StageBuilder(model, plan, training, s, ep_classes > 1 ? e : -1).build());
  g.rank_class.resize(g.world_size);
  g.rank_roles.assign(static_cast<std::size_t>(g.world_size) * graph::kNumRoles, graph::kNoComm);
  auto set_role = [&](std::uint32_t rank, CommRole role, std::uint32_t comm) {
    g.rank_roles[static_cast<std::size_t>(rank) * graph::kNumRoles + static_cast<int>(role)] =
        static_cast<std::int32_t>(comm);
  };
  for (std::uint32_t r = 0; r < g.world_size; ++r)
    g.rank_class[r] = static_cast<std::uint32_t>(lay.stage_of(r) * ep_classes +
                                                 (ep_classes > 1 ? lay.ep_rank_of(r) : 0));
  const std::int64_t T = plan.tp(), C = plan.cp(), D = plan.dp(), P = plan.pp();
  std::vector<std::uint32_t> members;
  auto group = [&](CommKind kind, CommRole role) {
    std::sort(members.begin(), members.end());
    auto c = g.comms.add(kind, members);
    for (auto r : members) set_role(r, role, c);
  };
  if (T > 1)
    for (std::int64_t pp = 0; pp < P; ++pp)
      for (std::int64_t dp = 0; dp < D; ++dp)
        for (std::int64_t cp = 0; cp < C; ++cp) {
          members.clear();
          for (std::int64_t tp = 0; tp < T; ++tp) members.push_back(lay.rank(tp, cp, dp, pp));
          group(CommKind::TpGroup, CommRole::Tp);
        }
  if (C > 1)
    for (std::int64_t pp = 0; pp < P; ++pp)
      for (std::int64_t dp = 0; dp < D; ++dp)
        for (std::int64_t tp = 0; tp < T; ++tp) {
          members.clear();
          for (std::int64_t cp = 0; cp < C; ++cp) members.push_back(lay.rank(tp, cp, dp, pp));
          group(CommKind::CpGroup, CommRole::Cp);
        }
  // Gradients reduce (and the distributed optimizer shards) over DP × CP; with HSDP the DP
  // role is the shard group (consecutive ranks of DP × CP, k = cp + CP·dp, in blocks of the
  // shard size) and the ranks holding the same shard form the replicate groups.
  const std::int64_t shard = plan.zero_shard(), replicas = plan.zero_replicas();
  auto rank_at = [&](std::int64_t tp, std::int64_t k, std::int64_t pp) {
    return lay.rank(tp, k % C, k / C, pp);
  };
  if (D * C > 1)
    for (std::int64_t pp = 0; pp < P; ++pp)
      for (std::int64_t tp = 0; tp < T; ++tp) {
        for (std::int64_t j = 0; j < replicas; ++j) {
          members.clear();
          for (std::int64_t k = j * shard; k < (j + 1) * shard; ++k)
            members.push_back(rank_at(tp, k, pp));
          if (members.size() > 1) group(CommKind::DpGroup, CommRole::Dp);
        }
        if (replicas > 1)
          for (std::int64_t i = 0; i < shard; ++i) {
            members.clear();
            for (std::int64_t j = 0; j < replicas; ++j)
              members.push_back(rank_at(tp, i + j * shard, pp));
            group(CommKind::DpReplicateGroup, CommRole::DpReplicate);
          }
      }
  // Expert groups (Megatron-Core's expert rank generator: etp-ep-edp within each stage).
  if (model.moe()) {
    const std::int64_t ET = plan.etp(), EP = plan.ep(), ED = plan.edp();
    for (std::int64_t pp = 0; pp < P; ++pp) {
      if (EP > 1)
        for (std::int64_t ed = 0; ed < ED; ++ed)
          for (std::int64_t et = 0; et < ET; ++et) {
            members.clear();
            for (std::int64_t e = 0; e < EP; ++e) members.push_back(lay.expert_rank(et, e, ed, pp));
            group(CommKind::EpGroup, CommRole::Ep);
          }
      if (ET > 1)
        for (std::int64_t ed = 0; ed < ED; ++ed)
          for (std::int64_t e = 0; e < EP; ++e) {
            members.clear();
            for (std::int64_t et = 0; et < ET; ++et)
              members.push_back(lay.expert_rank(et, e, ed, pp));
            group(CommKind::EtpGroup, CommRole::Etp);
          }
      if (plan.moe_token_dispatcher_type == MoeDispatcher::AllGather && ET * EP > 1)
        for (std::int64_t ed = 0; ed < ED; ++ed) {
          members.clear();
          for (std::int64_t e = 0; e < EP; ++e)
            for (std::int64_t et = 0; et < ET; ++et)
              members.push_back(lay.expert_rank(et, e, ed, pp));
          group(CommKind::TpEpGroup, CommRole::TpEp);
        }
      if (ED > 1)
        for (std::int64_t e = 0; e < EP; ++e)
          for (std::int64_t et = 0; et < ET; ++et) {
            members.clear();
            for (std::int64_t ed = 0; ed < ED; ++ed)
              members.push_back(lay.expert_rank(et, e, ed, pp));
            group(CommKind::EdpGroup, CommRole::Edp);
          }
    }
  }
  // Pipeline pairs, wrap-around pairs (interleaving: the last rank's chunk j feeds the first
  // rank's chunk j + 1) and tied-embedding pairs, in the order of the rank layout.
  for (std::int64_t pp = 0; pp + 1 < P; ++pp)
    for (std::int64_t dp = 0; dp < D; ++dp)
      for (std::int64_t cp = 0; cp < C; ++cp)
        for (std::int64_t tp = 0; tp < T; ++tp) {
          const auto up = lay.rank(tp, cp, dp, pp), down = lay.rank(tp, cp, dp, pp + 1);
          auto c = g.comms.add(CommKind::PpPair, {up, down});
          set_role(up, CommRole::PpNext, c);
          set_role(down, CommRole::PpPrev, c);
        }
  if (plan.interleaved() && P > 1)
    for (std::int64_t dp = 0; dp < D; ++dp)
      for (std::int64_t cp = 0; cp < C; ++cp)
        for (std::int64_t tp = 0; tp < T; ++tp) {
          const auto up = lay.rank(tp, cp, dp, P - 1), down = lay.rank(tp, cp, dp, 0);
          auto c = g.comms.add(CommKind::PpPair, {std::min(up, down), std::max(up, down)});
          set_role(up, CommRole::PpNext, c);
          set_role(down, CommRole::PpPrev, c);
        }
  if (model.embedding_copy_on_last_stage() && P > 1)
    for (std::int64_t dp = 0; dp < D; ++dp)
      for (std::int64_t cp = 0; cp < C; ++cp)
        for (std::int64_t tp = 0; tp < T; ++tp) {
          const auto a = lay.rank(tp, cp, dp, 0), b = lay.rank(tp, cp, dp, P - 1);
          auto c = g.comms.add(CommKind::EmbeddingGroup, {a, b});
          set_role(a, CommRole::Embedding, c);
          set_role(b, CommRole::Embedding, c);
        }
  graph::validate(g);
  return g;
}

}  // namespace scalescope::workload
