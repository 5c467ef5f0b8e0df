// StageBuilder: one transformer layer's forward and backward: norms, attention (with context
// parallelism), MLA projections, the dense MLP, and recomputation.
#include "workload/stage_builder.hpp"

#include <utility>
#include <vector>

#include "workload/ring_attention.hpp"

namespace scalescope::workload::detail {

void StageBuilder::attention_with_cp(const Op& attn, bool backward) {
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
void StageBuilder::qk_norm(Phase phase, bool keep, std::int64_t& attn_alloc) {
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

/// Forward of (global) layer l (also used to recompute it under full recomputation).
void StageBuilder::layer_forward(std::int64_t l, Phase phase, bool first_microbatch) {
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
  if (first_microbatch && phase == Phase::Forward && gather_of_.count(l)) extra = gather_of_.at(l);
  // Under fp8 TE's LayerNormLinear writes the norm output (the GEMM input) in fp8 and keeps it
  // for the wgrad: 1 byte per element instead of 2.
  const double out_bytes = gemm_input_bytes();
  // The first micro-batch casts the layer's linear weights to fp8 (NVFP4) and their transposes
  // (read 2 B, write 1 + 1 B per weight in fp8); later micro-batches reuse the cached copies.
  if (fp8_ && first_microbatch && phase == Phase::Forward)
    chain(memory_bound(OpKind::Elementwise, OpName::Fp8Cast, phase,
                       (2 + 2 * gemm_input_bytes() + fp8_recipe_bytes(true)) *
                           linear_parameters_on_rank(m_, p_, stage_) /
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
      chain(shaped(memory_bound(OpKind::Elementwise, OpName::Rope, phase, 2 * 2 * T * (q + kv) / t),
                   T, (q + kv) / t / static_cast<double>(m_.head_dim()),
                   static_cast<double>(m_.head_dim())));
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
void StageBuilder::mlp_forward(double f, Phase phase, bool keep, double out_bytes,
                               std::int64_t& mlp_alloc, OpName fc1_name, OpName fc2_name) {
  mlp_fc1(f, phase, keep, out_bytes, mlp_alloc, fc1_name);
  mlp_fc2(f, phase, fc2_name);
}

/// Its first half: the SP gather, FC1 and the activation (GELU / SwiGLU read [T, φ₁·f/t] and
/// write [T, f/t], in fp8 under fp8: FC2's input).
void StageBuilder::mlp_fc1(double f, Phase phase, bool keep, double out_bytes,
                           std::int64_t& mlp_alloc, OpName fc1_name) {
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
void StageBuilder::mlp_fc2(double f, Phase phase, OpName fc2_name) {
  Op fc2 = gemm(fc2_name, phase, tokens_, h_, f / tp_);
  fc2.mem_transient = static_cast<std::int64_t>(2 * tokens_ * h_);
  gemm_then_reduce(fc2, phase);
}

/// Backward of mlp_forward; returns the ops that finished FC2's and FC1's weight gradients.
std::pair<std::uint32_t, std::uint32_t> StageBuilder::mlp_backward(double f, OpName fc1_name,
                                                                   OpName fc2_name) {
  const std::uint32_t fc2 = mlp_fc2_backward(f, fc2_name);
  return {fc2, mlp_fc1_backward(f, fc1_name)};
}

/// Its halves: FC2's backward and the activation's; FC1's backward. Each returns the op that
/// finished its weight gradient.
std::uint32_t StageBuilder::mlp_fc2_backward(double f, OpName fc2_name) {
  const double T = tokens_, t = tp_;
  const double glu = m_.gated_linear_unit ? 2.0 : 1.0;
  const std::uint32_t fc2 = row_backward(fc2_name, T, h_, f / t);
  chain(shaped(memory_bound(OpKind::Elementwise, OpName::Activation, Phase::Backward,
                            2 * T * f / t * (glu + 2), 8 * T * f / t),
               T, f / t, glu));
  return fc2;
}

std::uint32_t StageBuilder::mlp_fc1_backward(double f, OpName fc1_name) {
  const double glu = m_.gated_linear_unit ? 2.0 : 1.0;
  return column_backward(fc1_name, tokens_, f * glu / tp_, h_);
}

/// MLA's projections before core attention (megatron/core/transformer/multi_latent_attention.py):
/// TP-duplicated down projections on this rank's SP share of the tokens, RMSNorms on the
/// latents, then column-parallel up projections whose SP all-gather moves the latents (not
/// the hidden states), and RoPE on the rotary query and key parts.
void StageBuilder::mla_projections_forward(Phase phase, bool keep, std::int64_t& attn_alloc) {
  const double T = tokens_, t = tp_, h = h_, Tl = tokens_ / seq_shard_;
  const double a = static_cast<double>(m_.num_attention_heads);
  const double ql = static_cast<double>(m_.q_lora_rank);
  const double kvl = static_cast<double>(m_.kv_lora_rank);
  const double dpe = static_cast<double>(m_.qk_pos_emb_head_dim);
  auto alloc = [&](double bytes) { return keep ? static_cast<std::int64_t>(bytes) : 0; };
  const double latents = (ql + kvl) * Tl;
  if (ql > 0) chain(gemm(OpName::QDownGemm, phase, Tl, ql, h));
  chain(gemm(OpName::KvDownGemm, phase, Tl, kvl + dpe, h));
  Op norm = shaped(memory_bound(OpKind::Norm, OpName::LatentNorm, phase, 4 * latents, 8 * latents),
                   Tl, ql + kvl);
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
  chain(
      shaped(memory_bound(OpKind::Elementwise, OpName::Rope, phase, 2 * 2 * T * (a / t + 1) * dpe),
             T, a / t + 1, dpe));
}

void StageBuilder::mla_projections_backward(std::int64_t l) {
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
  ready_[param_key(l, kQkv)] = chain_weight_grad(wg);
  if (ql > 0) {
    chain(gemm(OpName::QDownGemm, Phase::Backward, Tl, h, ql));
    Op qw = gemm(OpName::QDownGemm, Phase::Backward, h, ql, Tl);
    qw.mem_bytes += 2 * p_.grad_bytes() * h * ql;
    ready_[param_key(l, kQkv)] = chain_weight_grad(qw);
  }
}

/// A layer's input or pre-MLP norm over this rank's [T, h]: reads its bf16 input, writes the
/// next GEMM's input.
Op StageBuilder::layer_norm(OpName name, Phase phase) const {
  const double local = tokens_ * h_ / seq_shard_;
  return shaped(
      memory_bound(OpKind::Norm, name, phase, (2 + gemm_input_bytes()) * local, 8 * local),
      local / h_, h_, norm_kind());
}

/// Selective recomputation's output-discarding norms (Megatron's "layernorm" module) apply
/// where the norm is a module of its own, not fused into the next linear layer (TE's
/// LayerNormLinear): the input norm before MLA's down projections, the pre-MLP norm before
/// an MoE router.
bool StageBuilder::discards_input_norm() const {
  return p_.recomputes(kRecomputeLayerNorm) && m_.multi_latent_attention;
}

bool StageBuilder::discards_pre_mlp_norm(std::int64_t l) const {
  return p_.recomputes(kRecomputeLayerNorm) && m_.is_moe_layer(l);
}

/// The "mlp" module: a dense layer's MLP, with its fused pre-MLP norm, checkpointed.
bool StageBuilder::checkpoints_mlp(std::int64_t l) const {
  return p_.recomputes(kRecomputeMlp) && !m_.is_moe_layer(l);
}

/// A norm of this rank's [T, h] run again before its consumer's backward; allocates its
/// output, which the half-layer's closing norm frees (rerun_alloc_).
void StageBuilder::rerun_norm(OpName name) {
  Op norm = layer_norm(name, Phase::Recompute);
  norm.mem_alloc = static_cast<std::int64_t>(gemm_input_bytes() * tokens_ * h_ / seq_shard_);
  rerun_alloc_ += norm.mem_alloc;
  chain(norm);
}

/// mla_up_proj: the up projections and the rotary embedding again before core attention's
/// backward, their Q, K, V allocated until the attention half-layer is done.
void StageBuilder::mla_up_proj_rerun() {
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
  chain(shaped(memory_bound(OpKind::Elementwise, OpName::Rope, R, 2 * 2 * T * (a / t + 1) * dpe), T,
               a / t + 1, dpe));
}

/// Bytes core attention keeps for its backward beyond Q, K, V and its output.
double StageBuilder::attention_saved() const {
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
Op StageBuilder::attention(Phase phase, double factor, double saved,
                           std::int64_t& attn_alloc) const {
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
    if (t_.attention == AttentionBackend::Flash2) op.attention_impl = graph::AttentionImpl::Flash2;
    const double local = s / cp_;
    const bool a2a = p_.cp_comm_type == CpCommType::A2a;
    op.shape[0] = static_cast<std::uint32_t>(b * heads / (a2a ? cp_ : 1.0));
    op.shape[1] = static_cast<std::uint32_t>(a2a ? s : local);
    // QKᵀ over a·dqk and PV over a·dv: 2·b·s·local·(qk + o) FLOPs, causal half.
    op.flops = factor * 0.5 * 2 * b * s * local * (qk_w_ + o_w_) / tp_;
    op.mem_bytes = factor * 2 * tokens_ * (qk_w_ + o_w_ + (k_w_ + v_w_) * (a2a ? 1.0 : cp_)) / tp_;
  }
  op.mem_alloc = static_cast<std::int64_t>(saved);
  attn_alloc += op.mem_alloc;
  return op;
}

/// Column-parallel linear backward (QKV, FC1): with SP the saved input shard is re-gathered
/// asynchronously while dgrad runs, then the input-grad reduce-scatter overlaps wgrad; without
/// SP the input-grad all-reduce overlaps wgrad (Megatron
/// LinearWithGradAccumulationAndAsyncCommunication.backward, MODELING §1.3).
std::uint32_t StageBuilder::column_backward(OpName name, double m, double n, double k,
                                            double input_bytes) {
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
  std::uint32_t wg = kNone;
  if (defer_wgrad_) {  // zero bubble: the chain goes on from the dgrad
    wg = defer_weight_grad(wgrad, after_dg);
    chain_ = dg;
  } else {
    wg = add_free(wgrad, after_dg);
    chain_ = wg;
  }
  if (reduce != kNone) pending_reduce_ = reduce;
  return wg;
}

/// Row-parallel linear backward (out-proj, FC2): with SP the output grad is all-gathered first.
std::uint32_t StageBuilder::row_backward(OpName name, double m, double n, double k) {
  const std::uint32_t gathered = gather_beside_gemm(Phase::Backward);
  fp8_cast(Phase::Backward, m * n);  // the output gradient dY
  Op dgrad = gemm(name, Phase::Backward, m, k, n);
  dgrad.mem_transient = static_cast<std::int64_t>(2 * m * k);
  chain(dgrad);
  wait_for_overlapped(gathered);
  Op wgrad = gemm(name, Phase::Backward, k, n, m);
  wgrad.mem_bytes += 2 * p_.grad_bytes() * k * n;
  // It reads the gathered output gradient (on the chain the gather is already waited for).
  return chain_weight_grad(wgrad, gathered != kNone ? std::vector<std::uint32_t>{gathered}
                                                    : std::vector<std::uint32_t>{});
}

/// The next op on the chain also waits for the overlapped TP reduction, if any.
std::vector<std::uint32_t> StageBuilder::take_reduce() {
  std::vector<std::uint32_t> d;
  if (pending_reduce_ != kNone) d.push_back(pending_reduce_);
  pending_reduce_ = kNone;
  return d;
}

void StageBuilder::layer_backward(std::int64_t l, std::int64_t mb) {
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

  chain(memory_bound(OpKind::Elementwise, OpName::BiasDropoutAdd, Phase::Backward, 3 * 2 * local));
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
  Op norm2 =
      shaped(memory_bound(OpKind::Norm, OpName::PreMlpNorm, Phase::Backward, 6 * local, 10 * local),
             local / h, h, norm_kind());
  norm2.mem_free = saved.second + std::exchange(rerun_alloc_, 0);
  ready_[param_key(l, kPreMlpNorm)] = chain(norm2, take_reduce());

  chain(memory_bound(OpKind::Elementwise, OpName::BiasDropoutAdd, Phase::Backward, 3 * 2 * local));
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
  Op norm =
      shaped(memory_bound(OpKind::Norm, OpName::InputNorm, Phase::Backward, 6 * local, 10 * local),
             local / h, h, norm_kind());
  norm.mem_free = saved.first + input + std::exchange(rerun_alloc_, 0);
  ready_[param_key(l, kInputNorm)] = chain(norm, take_reduce());
}

}  // namespace scalescope::workload::detail
