// StageBuilder: data-parallel gradient buckets, ZeRO-3 / FSDP parameter units, and the end of
// the iteration (bucket reductions, the optimizer step).
#include "workload/stage_builder.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace scalescope::workload::detail {

/// Gradient buckets, one DDP instance (param-and-grad buffer) per model chunk as Megatron
/// wraps each chunk (megatron/training/training.py::get_model). Within a chunk, parameter
/// groups in backward order: output layer, layers last to first, embedding.
/// One layer's parameters on this rank by LayerPart: the linear layers from their shapes
/// (column-parallel weights and biases split over TP, row-parallel biases and norms
/// replicated), the rest of the attention (MLA's duplicated projections) under kQkv.
std::array<double, kParts> StageBuilder::layer_parts(std::int64_t l) const {
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
void StageBuilder::plan_buckets() {
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
    // PyTorch DDP (torch/nn/parallel/distributed.py at v2.11.0, _ddp_init_helper and the
    // Reducer's rebuilt buckets): the same rule with a smaller first bucket
    // (ddp_first_bucket_size: dist._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB of gradients, then
    // bucket_cap_mb = 25 MiB), in the order the gradients become ready.
    const bool overlap = p_.overlap_grad_reduce && stage_ == 0 && c == 0;
    for (const bool expert : {false, true}) {
      Bucket cur;
      cur.chunk = c;
      cur.expert = expert;
      double bucket = !overlap                       ? INFINITY
                      : p_.ddp_first_bucket_size > 0 ? static_cast<double>(p_.ddp_first_bucket_size)
                                                     : bucket_size;
      for (const ParamGroup& g : expert ? expert_groups : groups) {
        cur.params += g.params;
        if (g.key >= 0 && is_linear_part(g.key % kParts)) cur.linear += g.params;
        cur.keys.push_back(g.key);
        if (cur.params >= bucket) {
          if (overlap) bucket = bucket_size;
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
bool StageBuilder::is_linear_part(std::int64_t part) {
  return part == kQkv || part == kOutProj || part == kFc1 || part == kFc2 || part == kExperts;
}

/// Bytes of a bucket's parameter all-gather: bf16, the linear weights in fp8 with
/// fp8_param_gather.
double StageBuilder::gather_bytes(const Bucket& b) const {
  return 2 * b.params - (p_.fp8_param_gather ? (2 - t_.gemm_operand_bytes()) * b.linear : 0.0);
}

Op StageBuilder::bucket_collective(const Bucket& b, OpKind kind, Phase phase, double bytes) const {
  const bool rs = kind == OpKind::ReduceScatter, ag = kind == OpKind::AllGather;
  const OpName name =
      b.expert
          ? (rs ? OpName::EdpReduceScatter : (ag ? OpName::EdpAllGather : OpName::EdpAllReduce))
          : (rs ? OpName::DpReduceScatter : (ag ? OpName::DpAllGather : OpName::DpAllReduce));
  return collective(kind, b.expert ? CommRole::Edp : CommRole::Dp, name, phase, bytes);
}

double StageBuilder::head_params() const {
  double n = static_cast<double>(m_.hidden_size) * (m_.add_bias_linear ? 2.0 : 1.0);
  return n + last_stage_vocab_tables(m_, p_) * vocab_shard();
}

StageBuilder::Unit StageBuilder::unit_of(std::int64_t layer, std::int64_t chunk) const {
  if (layer < 0) {
    // The root unit; with model chunks (FSDP under PP wraps each chunk as its own root) the
    // embedding's part in the first chunk, the output layer's in the last.
    double root = root_unit_;
    if (p_.vpp() > 1) {
      const double head = last_ ? std::min(root_unit_, head_params()) : 0.0;
      root = chunk == p_.vpp() - 1 ? head : (chunk == 0 ? root_unit_ - head : 0.0);
    }
    return {std::max(0.0, root), 0.0};
  }
  if (!m_.moe()) return {layer_unit_, 0.0};
  const RankParameters r = layer_parameters_on_rank(m_, p_, layer);
  return {r.dense, p_.expert_shard() > 1 ? r.expert : 0.0};
}

/// ZeRO-3: all-gather of unit `layer`'s bf16 parameters (−1: chunk `chunk`'s root unit) over
/// DP × CP (S = 2 · unit parameters, the gathered tensor; gathered_dense_bytes), its
/// experts' over expert DP after it, into buffers allocated when they are issued; issued after
/// the chain. Returns the last gather.
std::uint32_t StageBuilder::unit_gather(std::int64_t layer, Phase phase, std::int64_t chunk) {
  const std::int64_t saved = std::exchange(cur_layer_, layer);
  const Unit u = unit_of(layer, chunk);
  const double bytes = gathered_dense_bytes(layer, u);
  Op op = collective(OpKind::AllGather, CommRole::Dp, OpName::DpAllGather, phase, bytes);
  op.mem_alloc = static_cast<std::int64_t>(std::ceil(bytes));
  std::vector<std::uint32_t> deps;
  if (chain_ != kNone) deps.push_back(chain_);
  std::uint32_t last = add_free(op, deps);
  if (u.expert > 0) {
    Op e = collective(OpKind::AllGather, CommRole::Edp, OpName::EdpAllGather, phase, 2 * u.expert);
    e.mem_alloc = static_cast<std::int64_t>(std::ceil(2 * u.expert));
    deps.push_back(last);
    last = add_free(e, deps);
  }
  cur_layer_ = saved;
  return last;
}

/// Frees what unit_gather allocated for the unit, when the chain's last op is issued.
void StageBuilder::free_unit(std::int64_t layer, std::int64_t chunk) {
  const Unit u = unit_of(layer, chunk);
  free_at_chain(gathered_dense_bytes(layer, u));
  if (u.expert > 0) free_at_chain(2 * u.expert);
}

/// The unsharded gradients of a unit, allocated at its first backward of a reduction window.
std::int64_t StageBuilder::unit_grad_bytes(const Unit& u) const {
  return static_cast<std::int64_t>(p_.grad_bytes() * u.dense) +
         static_cast<std::int64_t>(p_.grad_bytes() * u.expert);
}

/// ZeRO-3: reduce-scatter of a unit's gradients (S = grad bytes · unit parameters; the experts'
/// over expert DP) once its backward is done, beside the next unit's backward; the unsharded
/// gradients are freed.
void StageBuilder::unit_reduce(std::int64_t layer, const Unit& u) {
  const std::int64_t saved = std::exchange(cur_layer_, layer);
  Op op = collective(OpKind::ReduceScatter, CommRole::Dp, OpName::DpReduceScatter, Phase::Backward,
                     p_.grad_bytes() * u.dense);
  op.mem_free = static_cast<std::int64_t>(p_.grad_bytes() * u.dense);
  const std::uint32_t rs = add_free(op, {chain_});
  if (p_.zero_replicas() > 1) {
    // HSDP: the reduced shard is then all-reduced across the replicas (torchtitan's
    // dp_replicate dimension): S = grad bytes · unit parameters / shard size.
    zero3_reductions_.push_back(add_free(
        collective(OpKind::AllReduce, CommRole::DpReplicate, OpName::DpAllReduce, Phase::Backward,
                   p_.grad_bytes() * u.dense / static_cast<double>(p_.zero_shard())),
        {rs}));
  } else {
    zero3_reductions_.push_back(rs);
  }
  if (u.expert > 0) {
    Op e = collective(OpKind::ReduceScatter, CommRole::Edp, OpName::EdpReduceScatter,
                      Phase::Backward, p_.grad_bytes() * u.expert);
    e.mem_free = static_cast<std::int64_t>(p_.grad_bytes() * u.expert);
    const std::uint32_t ers = add_free(e, {chain_, rs});
    // HSDP: the experts' reduced shard across the replicas too; their replicate group is the
    // dense one (a replica is the same block of ranks in both layouts).
    zero3_reductions_.push_back(
        p_.zero_replicas() > 1 ? add_free(collective(OpKind::AllReduce, CommRole::DpReplicate,
                                                     OpName::DpAllReduce, Phase::Backward,
                                                     p_.grad_bytes() * u.expert /
                                                         static_cast<double>(p_.expert_shard())),
                                          {ers})
                               : ers);
  }
  cur_layer_ = saved;
}

/// FSDP under pipeline parallelism, after chunk `chunk`'s last backward of the step: the
/// stage's REDUCE_GRAD (PipelineStage.perform_reduce_grad: set_requires_gradient_sync(True),
/// then every FSDP state's post_backward): each unit's accumulated gradients reduce-scattered,
/// its parameters resharded (freed), the root first, then the layers in forward order
/// (the states' registration order).
void StageBuilder::pp_fsdp_reduce(std::int64_t chunk) {
  const std::int64_t first = chunk_first_[chunk];
  const std::int64_t end = first + chunk_layers_[chunk];
  const auto c = static_cast<std::size_t>(chunk);
  if (root_gathered_[c]) {
    free_unit(-1, chunk);
    unit_reduce(-1, unit_of(-1, chunk));
  }
  for (std::int64_t l = first; l < end; ++l) {
    free_unit(l, chunk);
    unit_reduce(l, unit_of(l, chunk));
  }
  root_gathered_[c] = layers_gathered_[c] = false;
}

/// The reductions of the buckets of model chunk `chunk` (−1: all): a bucket's starts when its
/// gradients are ready (with overlap_grad_reduce, else at `end_of_backward`); the DP stream
/// takes them in that order (with several model chunks, the last chunk's are ready first).
std::vector<std::uint32_t> StageBuilder::reduce_buckets(std::int64_t chunk,
                                                        std::uint32_t end_of_backward) {
  const std::int64_t saved_layer = std::exchange(cur_layer_, -1);
  std::vector<std::uint32_t> reductions;
  std::vector<std::pair<std::uint32_t, std::size_t>> order;
  std::vector<std::vector<std::uint32_t>> deps(buckets_.size());
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    if ((chunk >= 0 && buckets_[k].chunk != chunk) || !reduces(buckets_[k])) continue;
    std::uint32_t ready = end_of_backward;
    if (p_.overlap_grad_reduce) {
      // Each of its gradients: with split backwards (zero bubble) the weight gradients come
      // later than their emission order says.
      ready = 0;
      for (std::int64_t key : buckets_[k].keys) {
        ready = std::max(ready, ready_.at(key));
        deps[k].push_back(ready_.at(key));
      }
    } else {
      deps[k] = deferred_;  // split backwards' weight gradients, issued after end_of_backward
      deps[k].push_back(end_of_backward);
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
        add_free(bucket_collective(b, rs ? OpKind::ReduceScatter : OpKind::AllReduce, Phase::Other,
                                   p_.grad_bytes() * b.params),
                 deps[k]));
  }
  cur_layer_ = saved_layer;
  return reductions;
}

/// finalize_model_grads and the optimizer step (MODELING §1.3–1.4, §3.1).
void StageBuilder::finish_iteration() {
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
    chain(
        collective(OpKind::AllReduce, CommRole::Tp, OpName::NormAllReduce, Phase::Other, 4 * norms),
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
      chain(collective(OpKind::AllReduce, CommRole::Tp, OpName::FoundInfAllReduce, Phase::Optimizer,
                       4));
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

}  // namespace scalescope::workload::detail
