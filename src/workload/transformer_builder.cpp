#include "workload/transformer_builder.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "workload/accounting.hpp"
#include "workload/moe.hpp"
#include "workload/stage_builder.hpp"

namespace scalescope::workload {

using graph::CommKind;
using graph::CommRole;

using detail::StageBuilder;

namespace detail {

StageBuilder::StageBuilder(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t,
                           std::int64_t stage, std::int64_t ep_rank)
    : m_(m), p_(p), t_(t), stage_(stage) {
  prog_.name = "pp_stage_" + std::to_string(stage);
  if (ep_rank >= 0) prog_.name += "_ep_" + std::to_string(ep_rank);
  first_ = stage == 0;
  last_ = stage == p.pp() - 1;
  keyed_ = p.moe_a2a_overlap || p.splits_backwards();
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
  num_mb_ = t.microbatches_per_run(p.dp());
  total_mb_ = t.num_microbatches(p.dp());
  ub_ = p.tp_comm_overlap && p.sequence_parallel && p.tp() > 1;
  fp8_ = t.quantized();  // fp8 or NVFP4: quantized GEMMs and TE's casts
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
  root_unit_ = root_unit_on_stage(m, p, stage);
  // FSDP under torch.distributed.pipelining's stage, which reduces once a step; with
  // fsdp_reduce_every_microbatch (FSDP wrapped inside the stage's module, FSDP2's defaults)
  // each backward reshards and reduces as without PP.
  pp_fsdp_ = zero3_ && p.pp() > 1 && !p.fsdp_reduce_every_microbatch;
  layers_gathered_.assign(static_cast<std::size_t>(p.vpp()), false);
  root_gathered_.assign(static_cast<std::size_t>(p.vpp()), false);
  chunk_backwards_.assign(static_cast<std::size_t>(p.vpp()), 0);
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
    moe_kernels_ = moe_kernels(m, p);
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
    lo.causal_mask = m.capture_causal_mask;
    lo.inductor_kernels = m.capture_fusion_read;
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
      lo.all_to_all_scale = load_.max_exchanged / (local * static_cast<double>(m.moe_router_topk));
    }
    if (!m.capture->parallelized.empty()) {
      // Parallelized by PyTorch itself (DTensor): this rank's shapes and PyTorch's own
      // collectives, lowered as they are (io/config checks TP and SP equal the capture's).
      // Its experts too (EP in the graph): the lowering adds no all-to-all and no routing share.
      lo.parallel_tp = m.capture->tp;
      lo.parallel_ep = m.capture->ep;
      lo.ep = 1;
      lo.expert_tokens.clear();
      lo.all_to_all_scale = 1;
      lo.experts_replicated = false;
      lowered_ = lower_block(*m.capture, TpPlan{}, 1, false, m.capture_compiled, lo);
    } else {
      check_tp_plan(*m.capture, m.capture_plan, p.tp(), m.capture_path);
      lowered_ = lower_block(*m.capture, m.capture_plan, p.tp(), p.sequence_parallel,
                             m.capture_compiled, lo);
    }
    lo.ep = 1;  // the outer graph has no experts
    lo.expert_tokens.clear();
    lo.fp8 = false;  // and its output layer stays in bf16 (torchtitan, as Megatron)
    if (m.capture_outer)
      outer_ = lower_outer(*m.capture, m.capture_plan, p.tp(), p.sequence_parallel,
                           m.capture_outer_compiled, lo);
  }
}

graph::RankProgram StageBuilder::build() {
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
  // One run of the schedule per gradient-accumulation step (PyTorch-native trainers), each on
  // its own micro-batches: the pipeline drains between runs.
  for (mb_base_ = 0; mb_base_ < total_mb_; mb_base_ += num_mb_) {
    std::fill(chunk_backwards_.begin(), chunk_backwards_.end(), 0);
    if (p_.schedule == Schedule::LoopedBfs)
      looped_bfs();
    else if (p_.schedule == Schedule::Actions)
      run_actions(p_.pipeline_actions[static_cast<std::size_t>(stage_)]);
    else if (p_.interleaved())
      interleaved();
    else if (p_.schedule == Schedule::GPipe)
      gpipe();
    else
      one_f_one_b();
  }
  finish_iteration();
  issue_in_key_order();
  mark_cuda_graphs();
  prog_.finalize();
  return std::move(prog_);
}

}  // namespace detail

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
      // Under HSDP the experts shard within a replica: the expert-DP ranks of one replica's
      // block (expert DP is the outermost expert dimension, so a replica's ranks are the same
      // contiguous block in both layouts).
      const std::int64_t ES = plan.expert_shard();
      if (ES > 1)
        for (std::int64_t j = 0; j < ED / ES; ++j)
          for (std::int64_t e = 0; e < EP; ++e)
            for (std::int64_t et = 0; et < ET; ++et) {
              members.clear();
              for (std::int64_t ed = j * ES; ed < (j + 1) * ES; ++ed)
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
