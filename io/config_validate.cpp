// The rules across keys: impossible parallel plans, as Megatron-LM's arguments.py and
// parallel_state.py refuse them, and what the model and the cluster must agree on.
#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"
#include "io/config_internal.hpp"
#include "io/megatron_args.hpp"
#include "io/pipeline_actions.hpp"

namespace scalescope::io::detail {

namespace {

/// Cross-key rules of the plan (Megatron's arguments.py / parallel_state.py checks).
/// parallel.pipeline_layout against the model, as Megatron's validate_layer_layout: the
/// embedding first and the loss last, each once, num_layers decoder layers, mtp_num_layers MTP
/// modules after every decoder layer; scalescope also needs the modules in the last virtual
/// stage (beside the loss) and no other split option.
void check_layout(const ExperimentConfig& c, const Tree& t) {
  const auto& p = c.parallel;
  const Value& v = *get(t.at("parallel"), "pipeline_layout");
  const std::string key = "parallel.pipeline_layout";
  const std::vector<std::string> stages =
      detail::expand_pipeline_layout(p.pipeline_layout, detail::where(v, key));
  std::string flat;
  for (const std::string& s : stages) flat += s;
  const auto count = [&](char ch) { return std::count(flat.begin(), flat.end(), ch); };
  if (flat.empty() || flat.front() != 'E' || count('E') != 1)
    fail(v, key, "must start with the embedding 'E', given once (Megatron's layout rules)");
  if (flat.back() != 'L' || count('L') != 1)
    fail(v, key, "must end with the loss 'L', given once (Megatron's layout rules)");
  if (count('t') != c.model.num_layers)
    fail(v, key,
         fmt::format("has {} decoder layers 't', model.num_layers is {}", count('t'),
                     c.model.num_layers));
  if (count('m') != c.model.mtp_num_layers)
    fail(v, key,
         fmt::format("has {} MTP modules 'm', model.mtp_num_layers is {}", count('m'),
                     c.model.mtp_num_layers));
  if (const auto first_m = flat.find('m'); first_m != std::string::npos) {
    if (flat.find('t', first_m) != std::string::npos)
      fail(v, key, "places a decoder layer after an MTP module (Megatron: decoder layers first)");
    if (std::count(stages.back().begin(), stages.back().end(), 'm') != c.model.mtp_num_layers)
      fail(v, key,
           "places MTP modules outside the last virtual stage (a standalone MTP stage is not "
           "modelled)");
  }
  if (p.decoder_first_pipeline_num_layers > 0 || p.decoder_last_pipeline_num_layers > 0 ||
      p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split)
    fail(v, key,
         "replaces decoder_first/last_pipeline_num_layers and account_for_embedding/"
         "loss_in_pipeline_split (give one or the other)");
}

}  // namespace

void check_plan(ExperimentConfig& c, const Tree& t) {
  const std::string& f = c.path;
  auto& p = c.parallel;
  auto& m = c.model;
  auto& cl = c.cluster;
  const std::int64_t tp = p.tp();
  const std::int64_t pp = p.pp();
  // "<what>=<d> does not divide <of>=<n>", the form of Megatron's divisibility asserts.
  const auto must_divide = [&](std::string_view what, std::int64_t d, std::string_view of,
                               std::int64_t n) {
    if (n % d != 0) throw_input("{}: {}={} does not divide {}={}", f, what, d, of, n);
  };

  if (p.sequence_parallel && tp == 1)
    throw_input("{}: parallel.sequence_parallel requires parallel.tensor_model_parallel_size > 1",
                f);
  if (p.sequence_parallel && m.seq_length % tp != 0)
    throw_input(
        "{}: parallel.tensor_model_parallel_size={} does not divide model.seq_length={} "
        "(required by sequence_parallel)",
        f, tp, m.seq_length);
  if (p.tp_comm_overlap && !p.sequence_parallel)
    throw_input(
        "{}: parallel.tp_comm_overlap requires parallel.sequence_parallel (Megatron: TP "
        "communication/GEMM overlap happens only with sequence parallelism)",
        f);
  if (p.overlap_param_gather && !p.use_distributed_optimizer)
    throw_input("{}: parallel.overlap_param_gather requires parallel.use_distributed_optimizer", f);
  if (p.fp8_param_gather &&
      (!c.training.quantized() || (m.capture ? p.zero() < 3 : (p.zero() < 1 || p.zero() > 2))))
    throw_input(
        "{}: parallel.fp8_param_gather needs training.precision: fp8 or nvfp4 (Megatron's "
        "--fp8-param-gather / --fp4-param-gather), and the distributed optimizer on a built-in "
        "model or FSDP on a captured one (torchao's enable_fsdp_float8_all_gather)",
        f);
  if (m.capture && c.training.precision == workload::Precision::Nvfp4)
    throw_input(
        "{}: training.precision: nvfp4 with a captured model (model.source) is not modelled "
        "(torchao's low-precision training of a capture is fp8)",
        f);
  if (p.zero() >= 3 && p.overlap_param_gather)
    throw_input(
        "{}: parallel.overlap_param_gather is the distributed optimizer's gather; ZeRO-3 / fsdp "
        "gathers per layer (omit overlap_param_gather)",
        f);
  if (p.overlap_param_gather && !p.overlap_grad_reduce)
    throw_input("{}: parallel.overlap_param_gather requires parallel.overlap_grad_reduce", f);
  // Buckets close only where the reduction overlaps the backward; ZeRO-3 / FSDP reduces per unit.
  if (p.ddp_first_bucket_size > 0 && (!p.overlap_grad_reduce || p.zero() >= 3))
    throw_input(
        "{}: parallel.ddp_first_bucket_size applies to gradient buckets, which exist with "
        "parallel.overlap_grad_reduce and zero_stage < 3",
        f);
  must_divide("parallel.tensor_model_parallel_size", tp, "model.num_attention_heads",
              m.num_attention_heads);
  must_divide("parallel.tensor_model_parallel_size", tp, "model.num_query_groups",
              m.num_query_groups);
  must_divide("parallel.tensor_model_parallel_size", tp, "model.ffn_hidden_size",
              m.ffn_hidden_size);
  if (!p.pipeline_layout.empty()) check_layout(c, t);
  const std::int64_t pinned =
      p.decoder_first_pipeline_num_layers + p.decoder_last_pipeline_num_layers;
  const bool accounted =
      p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split;
  const std::int64_t vpp = p.vpp();
  if (pinned > 0 && pp == 1)
    throw_input(
        "{}: parallel.decoder_first/last_pipeline_num_layers need "
        "pipeline_model_parallel_size > 1",
        f);
  if (pinned > 0 && accounted)
    throw_input(
        "{}: parallel.account_for_embedding/loss_in_pipeline_split cannot be combined with "
        "decoder_first/last_pipeline_num_layers (Megatron: 'Does not support standalone "
        "embedding stage and standalone loss stage with uneven pp')",
        f);
  if (vpp > 1 && pp == 1)
    throw_input(
        "{}: parallel.virtual_pipeline_model_parallel_size={} needs "
        "pipeline_model_parallel_size > 1 (the interleaved schedule splits a pipeline)",
        f, vpp);
  if (vpp > 1 && p.schedule == workload::Schedule::GPipe)
    throw_input(
        "{}: parallel.schedule=gpipe has no interleaved form (omit "
        "virtual_pipeline_model_parallel_size or use schedule: 1f1b)",
        f);
  if (pinned == 0 && p.layout_layers.empty()) {
    const std::int64_t split = m.num_layers + (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                               (p.account_for_loss_in_pipeline_split ? 1 : 0);
    if (split % pp != 0)
      throw_input(
          "{}: parallel.pipeline_model_parallel_size={} does not divide model.num_layers={}{}", f,
          pp, split, accounted ? " (counting the embedding / loss as layers)" : "");
  }
  if (pinned > 0) {
    const std::int64_t rest = m.num_layers - pinned;
    const std::int64_t middle = p.middle_stages();
    if (rest < 0 || (middle == 0 ? rest != 0 : rest % middle != 0 || rest == 0))
      throw_input(
          "{}: model.num_layers={} minus the first/last stage layers ({}) does not split "
          "evenly over the other {} pipeline stages",
          f, m.num_layers, pinned, middle);
  }
  // Megatron's get_num_layers_to_build: each rank's layers split evenly over its chunks.
  for (std::int64_t stage = 0; stage < pp && p.layout_layers.empty(); ++stage) {
    const std::int64_t n = p.split_layers_on_stage(stage, m.num_layers);
    if (n % vpp != 0)
      throw_input(
          "{}: pipeline stage {} has {} layers, not divisible by "
          "parallel.virtual_pipeline_model_parallel_size={}",
          f, stage, n, vpp);
    for (std::int64_t chunk = 0; chunk < vpp; ++chunk)
      if (p.layers_in_chunk(stage, chunk, m.num_layers) < 0)
        throw_input("{}: not enough layers in the {} virtual pipeline stage for the {}", f,
                    stage == 0 ? "first" : "last", stage == 0 ? "embedding" : "loss");
  }

  // Context parallelism (Megatron attn_forward_func_with_cp / DualChunkSwap): the sequence
  // splits into 2·CP chunks, each rank's share (s/CP) further by TP with SP; fused attention only.
  const std::int64_t cp = p.cp();
  if (cp > 1) {
    if (m.seq_length % (2 * cp) != 0)
      throw_input(
          "{}: parallel.context_parallel_size={} needs model.seq_length={} divisible by "
          "2·context_parallel_size (load-balanced causal chunks)",
          f, cp, m.seq_length);
    if (p.sequence_parallel && (m.seq_length / cp) % tp != 0)
      throw_input(
          "{}: parallel.tensor_model_parallel_size={} does not divide the context-parallel "
          "share model.seq_length/context_parallel_size={} (required by sequence_parallel)",
          f, tp, m.seq_length / cp);
    if (c.training.attention == workload::AttentionBackend::Unfused)
      throw_input(
          "{}: parallel.context_parallel_size={} needs fused attention (training.attention: "
          "flash or flash2), as Megatron's context parallelism does",
          f, cp);
    if (p.cp_comm_type == workload::CpCommType::A2a) {
      // Transformer Engine's all-to-all splits each TP rank's query and key/value heads over CP.
      if ((m.num_attention_heads / tp) % cp != 0 || (m.query_groups() / tp) % cp != 0)
        throw_input(
            "{}: parallel.cp_comm_type: a2a needs parallel.context_parallel_size={} to divide the "
            "attention heads and key/value groups per TP rank ({} and {})",
            f, cp, m.num_attention_heads / tp, m.query_groups() / tp);
      if (m.capture)
        throw_input(
            "{}: model.source (a captured model) with parallel.cp_comm_type: a2a is not "
            "modelled yet (captures run PyTorch's ring: p2p or all_gather)",
            f);
    }
  }

  // World size: DP is derived from the GPU count when omitted, the GPU count from TP·CP·PP·DP.
  // Bounded by kMaxWorld, checked before any product (ranks are 32-bit in the graph; past 2^31
  // the rank tables alone would not fit a machine: a 2^32-GPU world segfaulted, 2^31 ended in
  // bad_alloc).
  if (cl.num_gpus > kMaxWorld)
    throw_input(
        "{}: cluster.num_gpus={} exceeds the largest world scalescope models ({} = 2^24 "
        "GPUs)",
        f, cl.num_gpus, kMaxWorld);
  for (const auto& [key, v] :
       {std::pair<const char*, std::int64_t>{"tensor_model_parallel_size", tp},
        {"context_parallel_size", cp},
        {"pipeline_model_parallel_size", pp},
        {"data_parallel_size", p.dp()}})
    if (v > kMaxWorld)
      throw_input("{}: parallel.{}={} exceeds the largest world scalescope models ({} GPUs)", f,
                  key, v, kMaxWorld);
  if (tp * cp > kMaxWorld || tp * cp * pp > kMaxWorld || tp * cp * pp * p.dp() > kMaxWorld)
    throw_input(
        "{}: parallel.tensor_model_parallel_size·context_parallel_size·"
        "pipeline_model_parallel_size·data_parallel_size exceeds the largest world "
        "scalescope models ({} GPUs)",
        f, kMaxWorld);
  const bool has_dp = get(t.at("parallel"), "data_parallel_size") != nullptr;
  const bool has_gpus = cl.num_gpus > 0;
  if (!has_dp && !has_gpus)
    throw_input("{}: cluster.num_gpus or parallel.data_parallel_size is required", f);
  if (!has_dp) {
    if (cl.num_gpus % (tp * cp * pp) != 0)
      throw_input(
          "{}: cluster.num_gpus={} is not a multiple of parallel.tensor_model_parallel_size·"
          "context_parallel_size·pipeline_model_parallel_size={}",
          f, cl.num_gpus, tp * cp * pp);
    p.data_parallel_size = cl.num_gpus / (tp * cp * pp);
  }
  if (!has_gpus) cl.num_gpus = p.world();
  if (p.world() != cl.num_gpus)
    throw_input(
        "{}: parallel.tensor_model_parallel_size·context_parallel_size·"
        "pipeline_model_parallel_size·data_parallel_size={}·{}·{}·{}={} differs from "
        "cluster.num_gpus={}",
        f, tp, cp, pp, p.dp(), p.world(), cl.num_gpus);
  if (cl.num_gpus % cl.gpus_per_node != 0 && cl.num_gpus > cl.gpus_per_node)
    throw_input(
        "{}: cluster.num_gpus={} is not a multiple of cluster.gpus_per_node={} (only a "
        "single partial node is allowed){}",
        f, cl.num_gpus, cl.gpus_per_node,
        cl.gpus_per_node > 8
            ? "; a job on part of each NVLink domain sets cluster.gpus_per_scaleup_domain to the "
              "GPUs it uses per domain (Megatron-Bridge's launcher asks Slurm for segments of "
              "the largest tray count <= 18 that divides the job's: 256 GPUs = 4 x 64)"
            : "");

  // Mixture of experts (Megatron arguments.py and parallel_state.py rules).
  const Tree::mapped_type& par = t.at("parallel");
  if (!m.moe()) {
    // Any of them on a dense model names itself, except an expert size of 1.
    for (const char* k :
         {"expert_model_parallel_size", "expert_tensor_parallel_size", "moe_token_dispatcher_type",
          "moe_shared_expert_overlap", "moe_a2a_overlap", "delay_wgrad_compute",
          "moe_router_fusion", "moe_permute_fusion"}) {
      const bool size = std::string_view(k) == "expert_model_parallel_size" ||
                        std::string_view(k) == "expert_tensor_parallel_size";
      if (const Value* v = get(par, k); v && !(size && v->node.Scalar() == "1"))
        fail(*v, std::string("parallel.") + k,
             "applies to MoE models only (set model.num_experts)");
    }
    for (const char* k : {"moe_expert_load_skew", "moe_expert_load_seed"})
      if (const Value* v = get(t.at("training"), k))
        fail(*v, std::string("training.") + k,
             "applies to MoE models only (set model.num_experts)");
  } else {
    const std::int64_t ep = p.ep(), etp = p.etp();
    if (const Value* v = get(par, "moe_shared_expert_overlap");
        v && p.moe_shared_expert_overlap &&
        (m.moe_shared_expert_intermediate_size <= 0 ||
         p.moe_token_dispatcher_type == workload::MoeDispatcher::AllGather))
      fail(*v, "parallel.moe_shared_expert_overlap",
           "needs shared experts (model.moe_shared_expert_intermediate_size) and the all-to-all "
           "or flex dispatcher, as Megatron asserts");
    must_divide("parallel.expert_model_parallel_size", ep, "model.num_experts", m.num_experts);
    if ((tp * cp * p.dp()) % (etp * ep) != 0)
      throw_input(
          "{}: parallel.expert_tensor_parallel_size·expert_model_parallel_size={}·{} does not "
          "divide tensor_model_parallel_size·context_parallel_size·data_parallel_size={} (the "
          "ranks of a pipeline stage)",
          f, etp, ep, tp * cp * p.dp());
    must_divide("parallel.expert_tensor_parallel_size", etp, "model.moe_ffn_hidden_size",
                m.moe_ffn_hidden_size);
    must_divide("parallel.tensor_model_parallel_size", tp,
                "model.moe_shared_expert_intermediate_size", m.moe_shared_expert_intermediate_size);
    // (Megatron's rule; a capture PyTorch parallelized runs transformers' layout as it is.)
    if (tp > 1 && !p.sequence_parallel && !(m.capture && !m.capture->parallelized.empty()))
      throw_input(
          "{}: MoE with tensor_model_parallel_size={} needs parallel.sequence_parallel: true "
          "(Megatron: 'When using MoE and tensor parallelism, sequence parallelism must be used')",
          f, tp);
    // ZeRO-2 / 3 with experts: dense parameters shard over DP × CP, expert ones over the
    // expert-data-parallel group (torchtitan's dp_shard_mod_ep, Megatron-FSDP's expert group).
    if (p.zero() >= 2 && m.capture)
      throw_input(
          "{}: parallel.zero_stage={} with a captured MoE model is not modelled (the capture's "
          "FSDP units are whole layers); use the distributed optimizer (ZeRO-1)",
          f, p.zero());
    if (p.zero() >= 2 && p.dp_cp() == 1 && p.edp() > 1)
      throw_input(
          "{}: parallel.zero_stage={} with data_parallel_size·context_parallel_size = 1 shards "
          "only the experts (expert DP {}), which is not modelled; use zero_stage 0 or 1",
          f, p.zero(), p.edp());
    if (p.zero() >= 3 && p.zero_replicas() > 1 &&
        (p.edp() % p.zero_replicas() != 0 || p.edp() / p.zero_replicas() < 2))
      throw_input(
          "{}: parallel.fsdp_shard_size={} (HSDP, {} replicas) with MoE needs the replicas to "
          "divide expert DP ({}) into shards of 2 or more ranks (experts replicated but not "
          "sharded are not modelled)",
          f, p.fsdp_shard_size, p.zero_replicas(), p.edp());
    // --overlap-moe-expert-parallel-comm: Megatron's TransformerConfig asserts, and what the
    // combined 1F1B schedule here covers (docs/model.md "EP overlap").
    if (const Value* v = get(par, "moe_a2a_overlap"); v && p.moe_a2a_overlap) {
      const auto need = [&](bool ok, const char* why) {
        if (!ok) fail(*v, "parallel.moe_a2a_overlap", why);
      };
      need(ep > 1, "needs expert_model_parallel_size > 1 (Megatron asserts)");
      need(p.schedule == workload::Schedule::OneFOneB,
           "needs schedule: 1f1b (Megatron's combined 1F1B schedules)");
      need(p.moe_token_dispatcher_type != workload::MoeDispatcher::AllGather,
           "needs moe_token_dispatcher_type alltoall or flex (Megatron asserts)");
      need(p.pp() == 1 || p.interleaved(),
           "with pipeline_model_parallel_size > 1 needs virtual_pipeline_model_parallel_size > 1 "
           "(Megatron asserts)");
      need(p.pp() == 1 || p.overlap_p2p_comm,
           "with pipeline parallelism is modelled with overlap_p2p_comm only");
      need(p.recompute != workload::Recompute::Full,
           "with recompute: full is not modelled (Megatron asserts recompute_method is None)");
      need(!p.recomputes(workload::kRecomputeMoe),
           "with recompute_modules moe is not supported (Megatron asserts)");
      need(!p.moe_shared_expert_overlap,
           "with moe_shared_expert_overlap is not supported (Megatron asserts)");
      need(m.mtp_num_layers <= 1,
           "with more than one MTP layer is not supported (Megatron asserts)");
      need(p.zero() < 3, "with ZeRO-3 / FSDP is not modelled");
      need(!m.capture, "with a captured model (model.source) is not modelled");
    }
    if (const Value* v = get(par, "delay_wgrad_compute");
        v && p.delay_wgrad_compute && !p.moe_a2a_overlap)
      fail(*v, "parallel.delay_wgrad_compute",
           "needs parallel.moe_a2a_overlap (Megatron asserts overlap_moe_expert_parallel_comm)");
  }
  if (const Value* v = get(par, "cuda_graph_scope"); v && p.cuda_graph_scope != 0) {
    // Megatron's per-layer graphs of its own modules: a captured model's ops are not those.
    if (m.capture)
      fail(*v, "parallel.cuda_graph_scope",
           "applies to Megatron's modules, not to a captured model (model.source)");
    if (!m.moe() && (p.cuda_graph_scope & ~workload::kCudaGraphAttn) != 0)
      fail(*v, "parallel.cuda_graph_scope",
           "moe_router and moe_preprocess apply to MoE models only (set model.num_experts)");
    // Megatron-LM transformer_config.py l.2824 at d98e8a6.
    if ((p.cuda_graph_scope & workload::kCudaGraphMoePreprocess) != 0 &&
        (p.cuda_graph_scope & workload::kCudaGraphMoeRouter) == 0)
      fail(*v, "parallel.cuda_graph_scope",
           "moe_preprocess needs moe_router too ('moe_preprocess cuda graph is only supported "
           "with moe_router cuda graph', Megatron-LM)");
  }
  // Megatron's and Transformer Engine's MoE kernels: a captured model's router and permutation
  // are its own code, captured.
  for (const char* k : {"moe_router_fusion", "moe_permute_fusion"})
    if (const Value* v = get(par, k); v && m.capture)
      fail(*v, std::string("parallel.") + k,
           "applies to Megatron's MoE layers, not to a captured model (model.source), whose "
           "router and permutation are its own captured ops");
  if (m.capture) {
    // What the lowering of a captured block covers (docs/flint.md "Not yet").
    const auto refuse = [&](bool cond, const char* what) {
      if (cond)
        throw_input("{}: model.source (a captured model) with {} is not modelled yet", f, what);
    };
    refuse(p.tp_comm_overlap && !m.capture_compiled,
           "parallel.tp_comm_overlap and model.compile: eager (a captured model's TP overlap is "
           "Inductor's micro-pipeline TP; torchtitan too: 'Async TP requires torch.compile')");
    refuse(cp > 1 && !m.capture_compiled && !workload::capture_has_fused_attention(*m.capture),
           "parallel.context_parallel_size > 1 and model.compile: eager on a matmul-softmax "
           "attention (CP needs a fused attention: scaled_dot_product_attention in the capture, "
           "or model.compile: inductor)");
    if (!m.capture->parallelized.empty()) {
      // PyTorch parallelized it: the layout is the capture's.
      if (p.tp() != m.capture->tp || p.sequence_parallel != m.capture->sp)
        throw_input(
            "{}: parallel.tp={}{} but the capture {} was parallelized by DTensor at TP {}{} "
            "(capture it again at this layout)",
            f, p.tp(), p.sequence_parallel ? " with SP" : "", m.capture_path, m.capture->tp,
            m.capture->sp ? " with SP" : "");
      if (p.world() != m.capture->world)
        throw_input("{}: the cluster has {} GPUs but the capture {} was made in a world of {}", f,
                    p.world(), m.capture_path, m.capture->world);
      refuse(cp > 1 || p.tp_comm_overlap, "a DTensor capture and CP or TP overlap");
      // Its experts as PyTorch's plan sharded them (transformers' EP: whole experts, ETP 1).
      if (p.ep() != m.capture->ep)
        throw_input(
            "{}: parallel.expert_model_parallel_size={} but the capture {} was parallelized with "
            "EP {} (capture it again at this layout)",
            f, p.ep(), m.capture_path, m.capture->ep);
      if (m.moe() && p.tp() > 1 && p.etp() != 1)
        throw_input(
            "{}: parallel.expert_tensor_parallel_size={} but the capture {} keeps whole experts "
            "on every rank (transformers' EP plan: expert_tensor_parallel_size: 1)",
            f, p.etp(), m.capture_path);
      // FSDP2 as the capture applied it (its FSDPParamGroup): the experiment's must be the same.
      if (m.capture->fsdp_shard > 0 && (!p.fsdp || p.zero_shard() != m.capture->fsdp_shard ||
                                        p.reshard_after_forward != m.capture->fsdp_reshard))
        throw_input(
            "{}: the capture {} applied FSDP2 over {} ranks (reshard_after_forward {}); set "
            "parallel.fsdp: true with that shard and reshard_after_forward",
            f, m.capture_path, m.capture->fsdp_shard, m.capture->fsdp_reshard);
      if (m.capture->fsdp_shard == 0 && p.fsdp)
        throw_input(
            "{}: parallel.fsdp with the capture {}, made without FSDP2: capture it with --fsdp "
            "(FSDP2's parameter groups are read from PyTorch)",
            f, m.capture_path);
    }
    if (m.moe()) {
      // The capture's experts are the model's: EP lowers them (balanced routing).
      // (A DTensor capture's 3-D weights are this rank's E/ep.)
      const std::int64_t captured = workload::capture_experts(*m.capture) * m.capture->ep;
      if (captured != m.num_experts)
        throw_input("{}: model.num_experts={} but the capture {} has {} experts", f, m.num_experts,
                    m.capture_path, captured);
      const workload::ExpertWeights ew = workload::capture_expert_weights(*m.capture);
      if (!ew.params.empty() &&
          (p.etp() > 1 || c.training.moe_expert_load_skew > 0 || m.moe_expert_capacity_factor > 0))
        throw_input(
            "{}: the capture {} holds its experts as 3-D weights ({} {}x{}x{}, gathered or "
            "grouped): their tensor parallelism (expert_tensor_parallel_size > 1), load skew "
            "and capacity are not lowered yet (expert parallelism is, and TP with "
            "expert_tensor_parallel_size: 1, torchtitan's default)",
            f, m.capture_path, ew.params.front().first, ew.params.front().second[0],
            ew.params.front().second[1], ew.params.front().second[2]);
      refuse(p.moe_token_dispatcher_type == workload::MoeDispatcher::AllGather,
             "parallel.moe_token_dispatcher_type: allgather");
      refuse(p.etp() != p.tp() && p.etp() != 1,
             "parallel.expert_tensor_parallel_size other than 1 or TP");
    }
    refuse(p.recompute == workload::Recompute::Selective && !m.capture_compiled,
           "parallel.recompute: selective and model.compile: eager (selective recomputes the "
           "fused attention)");
    if (c.training.micro_batch_size != m.capture->batch)
      throw_input("{}: training.micro_batch_size={} differs from the capture's batch {} ({})", f,
                  c.training.micro_batch_size, m.capture->batch, m.capture_path);
  }
  if ((p.recompute_modules & workload::kRecomputeSharedExperts) != 0 &&
      p.recompute == workload::Recompute::Selective && p.moe_shared_expert_overlap)
    throw_input(
        "{}: parallel.recompute_modules shared_experts with parallel.moe_shared_expert_overlap "
        "is not modelled (the overlapped halves run beside the all-to-alls)",
        f);
  if (m.capture && p.recompute == workload::Recompute::Selective &&
      p.recompute_modules != workload::kRecomputeCoreAttn)
    throw_input(
        "{}: model.source (a captured model) with parallel.recompute_modules other than "
        "[core_attn] is not modelled yet",
        f);
  if (!m.capture && p.recompute == workload::Recompute::Op)
    throw_input(
        "{}: parallel.recompute: op (torchtitan's per-op checkpointing) applies to a captured "
        "model (model.source or model.pytorch); Megatron's are selective and full",
        f);
  if (m.multi_latent_attention && m.position_embedding_type != workload::PositionEmbedding::Rope)
    throw_input("{}: model.multi_latent_attention needs position_embedding_type: rope", f);
  if (m.mtp_num_layers > 0) {
    // Megatron's checks (arguments.py, multi_token_prediction.py) and what is modelled.
    const auto refuse = [&](bool cond, std::string_view what) {
      if (cond) throw_input("{}: model.mtp_num_layers={} with {}", f, m.mtp_num_layers, what);
    };
    refuse(m.capture != nullptr, "a captured model is not modelled (the capture has no MTP)");
    refuse(m.position_embedding_type != workload::PositionEmbedding::Rope,
           "position_embedding_type: learned_absolute (Megatron: MTP needs rope)");
    refuse(p.zero() >= 3, "ZeRO-3 / fsdp is not modelled");
    refuse(p.recompute == workload::Recompute::Full &&
               p.recompute_method == workload::RecomputeMethod::Uniform &&
               p.recompute_num_layers > 1,
           "recompute_method: uniform and recompute_num_layers > 1 (Megatron asserts "
           "recompute_num_layers == 1 for MTP)");
  }

  // Megatron: global_batch_size defaults to micro_batch_size · data_parallel_size.
  auto& tr = c.training;
  if (get(t.at("training"), "global_batch_size") == nullptr)
    tr.global_batch_size = tr.micro_batch_size * p.dp();
  if (tr.global_batch_size % (tr.micro_batch_size * p.dp()) != 0)
    throw_input(
        "{}: training.global_batch_size={} is not divisible by "
        "training.micro_batch_size·parallel.data_parallel_size={}·{}={}",
        f, tr.global_batch_size, tr.micro_batch_size, p.dp(), tr.micro_batch_size * p.dp());
  if (tr.precision == workload::Precision::Fp8 && tr.fp8_recipe == workload::Fp8Recipe::Mxfp8 &&
      cl.gpu.rfind("B", 0) != 0 && cl.gpu.rfind("GB", 0) != 0)
    throw_input(
        "{}: training.fp8_recipe: mxfp8 needs a Blackwell GPU (Transformer Engine's MXFP8 "
        "recipe), not cluster.gpu={}",
        f, cl.gpu);
  if (tr.precision == workload::Precision::Nvfp4 && cost::find_gpu(cl.gpu).peak_tflops_fp4 <= 0)
    throw_input(
        "{}: training.precision: nvfp4 needs a Blackwell GPU with FP4 tensor cores (Transformer "
        "Engine's NVFP4BlockScaling), not cluster.gpu={}",
        f, cl.gpu);
  if (tr.precision == workload::Precision::Fp8 && cost::find_gpu(cl.gpu).peak_tflops_fp8 <= 0)
    throw_input("{}: training.precision=fp8 needs fp8 tensor cores, which cluster.gpu={} lacks", f,
                cl.gpu);
  // HSDP: the shard groups tile DP × CP.
  if (p.fsdp_shard_size > 0 && (p.dp_cp() % p.fsdp_shard_size != 0))
    throw_input(
        "{}: parallel.fsdp_shard_size={} does not divide data_parallel_size·"
        "context_parallel_size={}",
        f, p.fsdp_shard_size, p.dp_cp());
  if (tr.gradient_accumulation_steps > 1) {
    const Value* v = get(t.at("training"), "gradient_accumulation_steps");
    if (pp == 1)
      fail(*v, "training.gradient_accumulation_steps",
           "applies with pipeline_model_parallel_size > 1 only (without a pipeline the "
           "micro-batches already run one after another)");
    if (tr.num_microbatches(p.dp()) % tr.gradient_accumulation_steps != 0)
      fail(*v, "training.gradient_accumulation_steps",
           fmt::format("{} does not divide the {} micro-batches per pipeline "
                       "(global_batch_size / (micro_batch_size·DP))",
                       tr.gradient_accumulation_steps, tr.num_microbatches(p.dp())));
  }
  // Megatron-Core's forward_backward_pipelining_with_interleaving rules (on each run of the
  // schedule).
  // torch.distributed.pipelining's action table: checked against the layout and batch, and
  // lowered with its transfers as PyTorch's runtime runs it (idempotent: a lowered table is
  // kept as it is).
  if (p.schedule == workload::Schedule::Actions) {
    p.pipeline_actions = lower_pipeline_actions(
        p.pipeline_actions, pp, p.vpp(), tr.microbatches_per_run(p.dp()), p.pipeline_actions_path);
    // Split backwards (zero bubble): the builder's layers defer their weight-gradient GEMMs;
    // what else would have to move with them is refused, not approximated.
    const bool split = p.splits_backwards();
    const auto refuse_split = [&](bool cond, const char* what) {
      if (split && cond)
        throw_input(
            "{}: the pipeline action table {} splits backwards (I / W) and {}: not "
            "modelled yet",
            f, p.pipeline_actions_path, what);
    };
    refuse_split(p.zero() >= 3, "ZeRO-3 / FSDP reduces each layer after its backward");
    refuse_split(p.zero() == 2, "ZeRO-2 reduces each micro-batch's gradients after its backward");
    refuse_split(p.delay_wgrad_compute, "parallel.delay_wgrad_compute defers the same GEMMs");
  }
  if (p.interleaved() && p.schedule != workload::Schedule::LoopedBfs &&
      p.schedule != workload::Schedule::Actions) {
    const std::int64_t mbs = tr.microbatches_per_run(p.dp());
    const std::int64_t group = p.microbatch_group_size();
    if (group > mbs || group < pp)
      throw_input(
          "{}: parallel.microbatch_group_size_per_vp_stage={} must lie in [PP={}, M={}] (M = "
          "micro-batches per pipeline, global_batch_size / (micro_batch_size·DP)) for the "
          "interleaved schedule",
          f, group, pp, mbs);
    const std::int64_t last_group = mbs % group;
    if (last_group > 0 && last_group < pp)
      throw_input(
          "{}: the last micro-batch group has M mod microbatch_group_size_per_vp_stage = {} mod "
          "{} = {} micro-batches, which must be 0 or ≥ PP={} (Megatron rejects it: dependency "
          "bubbles)",
          f, mbs, group, last_group, pp);
  }

  for (const std::uint32_t rank : c.run.trace_ranks)
    if (rank >= cl.num_gpus)
      throw_input("{}: run.trace_ranks has rank {} but cluster.num_gpus={}", f, rank, cl.num_gpus);
  for (const std::uint32_t rank : c.run.sandbox_ranks)
    if (rank >= cl.num_gpus)
      throw_input("{}: run.sandbox_ranks has rank {} but cluster.num_gpus={}", f, rank,
                  cl.num_gpus);
}

}  // namespace scalescope::io::detail
