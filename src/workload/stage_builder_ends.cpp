// StageBuilder: what sits around the decoder layers: the embedding, the output layer and loss,
// multi-token prediction modules, and a captured model's block and outer graph.
#include "workload/stage_builder.hpp"

#include <utility>
#include <vector>

namespace scalescope::workload::detail {

/// A part of a captured model's outer graph (lower_outer's `pre` in place of the built-in
/// embedding, `post` in place of the head and loss), under ready key -1 or -2: its saved
/// activations allocated with its first op and freed after its backward; ZeRO-3's gathers of
/// the unit waited for first.
void StageBuilder::captured_outer(const LoweredBlock& part, std::int64_t key, Phase phase,
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

void StageBuilder::embedding_forward() {
  cur_layer_ = -1;
  if (outer_.available) return captured_outer(outer_.pre, -1, Phase::Forward, emb_alloc_);
  std::vector<std::uint32_t> extra;
  if (cur_mb_ == 0 && gather_of_.count(-1)) extra = gather_of_.at(-1);
  emb_alloc_ = embedding_lookup(extra);
}

/// The word-embedding lookup of this micro-batch's tokens and its TP reduction; returns the
/// bytes it keeps for the backward (the token ids, the dropout mask).
std::int64_t StageBuilder::embedding_lookup(std::vector<std::uint32_t> extra) {
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

void StageBuilder::embedding_backward() {
  cur_layer_ = -1;
  if (outer_.available) return captured_outer(outer_.pre, -1, Phase::Backward, emb_alloc_);
  ready_[-1] = embedding_grad(emb_alloc_);
}

/// The embedding's backward: the gradient gathered over SP, then scatter-added into the fp32
/// [V/t, h] gradient (read grads, read-modify-write rows); frees `saved`.
std::uint32_t StageBuilder::embedding_grad(std::int64_t saved) {
  sp_gather(Phase::Backward);
  Op op = shaped(memory_bound(OpKind::Embedding, OpName::Embedding, Phase::Backward,
                              2 * tokens_ * h_ + 8 * tokens_ * h_),
                 tokens_, h_, vocab_shard() / h_);
  op.mem_free = saved;
  return chain(op);
}

/// An MTP module's input before its layer `l`: the embedding of the tokens one further ahead
/// (the shared word embedding, a copy on the last stage with PP > 1), enorm and hnorm over it
/// and over the hidden states, their concatenation [T, 2h] through eh_proj (column-parallel,
/// gather_output false), the output gathered over TP along h and, with SP, split along the
/// sequence again (no communication). Kept for the backward: the token ids, both norms'
/// inputs and eh_proj's input. The rolled ids' boundary exchange among CP ranks (one token per
/// rank) is not charged.
void StageBuilder::mtp_input_forward(std::int64_t l) {
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
void StageBuilder::mtp_input_backward(std::int64_t l) {
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
void StageBuilder::captured_forward(std::int64_t l, Phase phase) {
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
void StageBuilder::captured_pass(const std::vector<Op>& ops, const std::vector<std::int32_t>& after,
                                 std::int64_t l, std::int64_t mb, std::int64_t alloc, Phase phase) {
  const std::uint32_t start = chain_;
  std::vector<std::uint32_t> ids, pending;
  // What a collective produced by op k starts after: op k, or for a weight gradient deferred to
  // W (split backwards) the chain op before it, so that nothing at I waits for W.
  std::vector<std::uint32_t> anchor;
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
    if (defer_wgrad_ && &ops == &lowered_.backward && after[k] == LoweredBlock::kChain &&
        std::binary_search(lowered_.backward_weight_grads.begin(),
                           lowered_.backward_weight_grads.end(), static_cast<std::uint32_t>(k))) {
      // Zero bubble's I action: the weight gradient issues at W.
      anchor.push_back(chain_);
      ids.push_back(last_deferred_ = defer_weight_grad(op, pending));
      continue;
    }
    if (after[k] == LoweredBlock::kChain) {
      ids.push_back(chain(op, std::exchange(pending, {})));
    } else if (after[k] == LoweredBlock::kChainOverlap) {
      ids.push_back(chain(op, {}));  // the pending collectives run beside it
    } else {
      const std::uint32_t from = after[k] >= 0 ? anchor[static_cast<std::size_t>(after[k])]
                                               : (start != kNone ? start : chain_);
      std::vector<std::uint32_t> deps;
      if (from != kNone) deps.push_back(from);
      ids.push_back(add_free(op, deps));
      pending.push_back(ids.back());
    }
    anchor.push_back(ids.back());
  }
  for (std::uint32_t c : pending) wait_for(c);
}

/// Its backward: every gradient of the layer counts as ready at the layer's last op.
void StageBuilder::captured_backward(std::int64_t l, std::int64_t mb) {
  if (p_.recompute == Recompute::Op)  // per-op checkpointing: the GEMMs it did not keep
    captured_pass(lowered_.op_sac_recompute, lowered_.op_sac_recompute_after, l, mb, 0,
                  Phase::Recompute);
  captured_pass(lowered_.backward, lowered_.backward_after, l, mb, 0, Phase::Backward);
  const auto saved = layer_saved_.at({l, mb});
  std::int64_t input = 0;
  if (auto it = saved_input_.find({l, mb}); it != saved_input_.end()) input = it->second;
  free_at_chain(static_cast<double>(saved.first + saved.second + input));
  // Split: the gradients are ready once the layer's last deferred weight gradient ran.
  const std::uint32_t ready = defer_wgrad_ && last_deferred_ != kNone ? last_deferred_ : chain_;
  for (std::int64_t k = 0; k < kParts; ++k) ready_[param_key(l, k)] = ready;
  last_deferred_ = kNone;
}

/// The final norm, the output layer and the loss; `layer` ≥ 0: an MTP module's (its final
/// norm, the shared output layer, its own loss), whose buffers are the same sizes as the
/// main head's.
void StageBuilder::head_forward(std::int64_t layer) {
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
      chain(
          collective(OpKind::AllReduce, CommRole::Tp, OpName::CeAllReduce, Phase::Forward, 4 * T));
}

void StageBuilder::head_backward(std::int64_t layer) {
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
  wgrad.mem_free = ce.mem_alloc;  // the logits' gradient, held until it runs
  const std::uint32_t head_wgrad =
      defer_wgrad_ ? defer_weight_grad(wgrad, {}, 2 * T * h) : chain(wgrad);
  if (tp_comm() && p_.sequence_parallel)
    chain(collective(OpKind::ReduceScatter, CommRole::Tp, OpName::TpReduceScatter, Phase::Backward,
                     hidden_bytes_));
  Op norm =
      shaped(memory_bound(OpKind::Norm, OpName::FinalNorm, Phase::Backward, 6 * local, 10 * local),
             local / h, h, norm_kind());
  norm.mem_free = head_alloc_;
  ready_[-2] = chain(norm);
  // Split backwards: the output layer's gradient is made at W, after the norm's (in order).
  if (defer_wgrad_) ready_[-2] = head_wgrad;
}

}  // namespace scalescope::workload::detail
