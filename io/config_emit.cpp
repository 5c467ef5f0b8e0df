// The resolved configuration: every key after merging and defaults, as YAML (graph.h5 and the
// outputs carry it, so a run can be replayed from it).
#include <sstream>

#include "io/config_internal.hpp"

namespace scalescope::io::detail {

namespace {

const char* name_of(workload::Recompute r) {
  switch (r) {
    case workload::Recompute::Selective:
      return "selective";
    case workload::Recompute::Full:
      return "full";
    case workload::Recompute::Op:
      return "op";
    default:
      return "none";
  }
}

}  // namespace

std::string emit(const ExperimentConfig& c, const ModelSources& sources) {
  // Doubles go out as their shortest round-trip text: yaml-cpp 0.7 would print 17 digits.
  const auto num = [](double x) { return detail::format_double(x); };
  YAML::Emitter out;
  out << YAML::BeginMap;
  const auto& m = c.model;
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << m.name;
  out << YAML::Key << "num_layers" << YAML::Value << m.num_layers;
  out << YAML::Key << "hidden_size" << YAML::Value << m.hidden_size;
  out << YAML::Key << "ffn_hidden_size" << YAML::Value << m.ffn_hidden_size;
  out << YAML::Key << "num_attention_heads" << YAML::Value << m.num_attention_heads;
  out << YAML::Key << "num_query_groups" << YAML::Value << m.num_query_groups;
  out << YAML::Key << "kv_channels" << YAML::Value << m.kv_channels;
  out << YAML::Key << "vocab_size" << YAML::Value << m.vocab_size;
  out << YAML::Key << "make_vocab_size_divisible_by" << YAML::Value
      << m.make_vocab_size_divisible_by;
  out << YAML::Key << "seq_length" << YAML::Value << m.seq_length;
  out << YAML::Key << "gated_linear_unit" << YAML::Value << m.gated_linear_unit;
  out << YAML::Key << "untie_embeddings" << YAML::Value << m.untie_embeddings;
  out << YAML::Key << "add_bias_linear" << YAML::Value << m.add_bias_linear;
  out << YAML::Key << "add_qkv_bias" << YAML::Value << m.add_qkv_bias;
  out << YAML::Key << "qk_layernorm" << YAML::Value << m.qk_layernorm;
  if (m.mtp_num_layers > 0) out << YAML::Key << "mtp_num_layers" << YAML::Value << m.mtp_num_layers;
  out << YAML::Key << "hidden_dropout" << YAML::Value << num(m.hidden_dropout);
  out << YAML::Key << "attention_dropout" << YAML::Value << num(m.attention_dropout);
  out << YAML::Key << "position_embedding_type" << YAML::Value
      << (m.position_embedding_type == workload::PositionEmbedding::Rope ? "rope"
                                                                         : "learned_absolute");
  if (m.capture) {
    out << YAML::Key << "source" << YAML::Value << m.capture_path;
    if (!m.capture->parallelized.empty()) {
      // PyTorch parallelized it: the capture holds the plan (nothing to write).
    } else if (!m.capture_plan_name.empty()) {
      out << YAML::Key << "tp_plan" << YAML::Value << m.capture_plan_name;
    } else {  // the plan itself, which reads back the same however it was found
      out << YAML::Key << "pytorch_tp_plan" << YAML::Value << YAML::BeginMap;
      for (const auto& [pattern, style] : m.capture_plan.rules)
        out << YAML::Key << pattern << YAML::Value
            << (style == "colwise"    ? "ColwiseParallel"
                : style == "rowwise"  ? "RowwiseParallel"
                : style == "sequence" ? "SequenceParallel"
                                      : "PrepareModuleInput");
      out << YAML::EndMap;
    }
    out << YAML::Key << "compile" << YAML::Value
        << (!m.capture_compiled        ? "eager"
            : m.capture_outer_compiled ? "inductor"
                                       : "blocks");
    out << YAML::Key << "outer" << YAML::Value << (m.capture_outer ? "captured" : "builder");
    out << YAML::Key << "sdpa" << YAML::Value << (m.capture_sdpa_flash ? "flash" : "cudnn");
    out << YAML::Key << "causal_mask" << YAML::Value
        << workload::causal_mask_name(m.capture_causal_mask);
    out << YAML::Key << "fusion" << YAML::Value
        << (m.capture_fusion_read ? "inductor" : "rederived");
  }
  if (m.moe()) {
    out << YAML::Key << "num_experts" << YAML::Value << m.num_experts;
    out << YAML::Key << "moe_router_topk" << YAML::Value << m.moe_router_topk;
    out << YAML::Key << "moe_ffn_hidden_size" << YAML::Value << m.moe_ffn_hidden_size;
    if (m.moe_router_num_groups > 0) {
      out << YAML::Key << "moe_router_num_groups" << YAML::Value << m.moe_router_num_groups;
      out << YAML::Key << "moe_router_group_topk" << YAML::Value << m.moe_router_group_topk;
    }
    out << YAML::Key << "moe_shared_expert_intermediate_size" << YAML::Value
        << m.moe_shared_expert_intermediate_size;
    std::vector<int> pattern(m.moe_layer_pattern.begin(), m.moe_layer_pattern.end());
    out << YAML::Key << "moe_layer_freq" << YAML::Value << YAML::Flow << pattern;
    out << YAML::Key << "moe_expert_capacity_factor" << YAML::Value
        << num(m.moe_expert_capacity_factor);
    out << YAML::Key << "moe_aux_loss_coeff" << YAML::Value << num(m.moe_aux_loss_coeff);
  }
  if (m.multi_latent_attention) {
    out << YAML::Key << "multi_latent_attention" << YAML::Value << true;
    out << YAML::Key << "q_lora_rank" << YAML::Value << m.q_lora_rank;
    out << YAML::Key << "kv_lora_rank" << YAML::Value << m.kv_lora_rank;
    out << YAML::Key << "qk_head_dim" << YAML::Value << m.qk_head_dim;
    out << YAML::Key << "qk_pos_emb_head_dim" << YAML::Value << m.qk_pos_emb_head_dim;
    out << YAML::Key << "v_head_dim" << YAML::Value << m.v_head_dim;
  }
  out << YAML::EndMap;

  const auto& p = c.parallel;
  out << YAML::Key << "parallel" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "tensor_model_parallel_size" << YAML::Value << p.tensor_model_parallel_size;
  out << YAML::Key << "pipeline_model_parallel_size" << YAML::Value
      << p.pipeline_model_parallel_size;
  out << YAML::Key << "data_parallel_size" << YAML::Value << p.data_parallel_size;
  if (p.cp() > 1) {
    out << YAML::Key << "context_parallel_size" << YAML::Value << p.cp();
    out << YAML::Key << "cp_comm_type" << YAML::Value
        << (p.cp_comm_type == workload::CpCommType::AllGather ? "all_gather"
            : p.cp_comm_type == workload::CpCommType::A2a     ? "a2a"
                                                              : "p2p");
  }
  out << YAML::Key << "sequence_parallel" << YAML::Value << p.sequence_parallel;
  out << YAML::Key << "recompute" << YAML::Value << name_of(p.recompute);
  if (p.recompute == workload::Recompute::Full) {
    out << YAML::Key << "recompute_method" << YAML::Value
        << (p.recompute_method == workload::RecomputeMethod::Block      ? "block"
            : p.recompute_method == workload::RecomputeMethod::Interval ? "interval"
                                                                        : "uniform");
    out << YAML::Key << "recompute_num_layers" << YAML::Value << p.recompute_num_layers;
  }
  if (p.recompute == workload::Recompute::Selective &&
      p.recompute_modules != workload::kRecomputeCoreAttn) {
    out << YAML::Key << "recompute_modules" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const auto& [bit, name] : kRecomputeModules)
      if ((p.recompute_modules & bit) != 0) out << std::string(name);
    out << YAML::EndSeq;
  }
  out << YAML::Key << "use_distributed_optimizer" << YAML::Value << p.use_distributed_optimizer;
  out << YAML::Key << "schedule" << YAML::Value
      << (p.schedule == workload::Schedule::GPipe       ? "gpipe"
          : p.schedule == workload::Schedule::LoopedBfs ? "looped_bfs"
          : p.schedule == workload::Schedule::Actions   ? "actions"
                                                        : "1f1b");
  if (p.schedule == workload::Schedule::Actions)
    out << YAML::Key << "pipeline_actions" << YAML::Value << p.pipeline_actions_path;
  out << YAML::Key << "overlap_grad_reduce" << YAML::Value << p.overlap_grad_reduce;
  out << YAML::Key << "overlap_param_gather" << YAML::Value << p.overlap_param_gather;
  out << YAML::Key << "fp8_param_gather" << YAML::Value << p.fp8_param_gather;
  if (p.zero_stage > 0) out << YAML::Key << "zero_stage" << YAML::Value << p.zero_stage;
  if (p.fsdp) out << YAML::Key << "fsdp" << YAML::Value << true;
  if (p.zero() >= 3) {
    out << YAML::Key << "reshard_after_forward" << YAML::Value << p.reshard_after_forward;
    out << YAML::Key << "fsdp_reduce_every_microbatch" << YAML::Value
        << p.fsdp_reduce_every_microbatch;
    if (p.fsdp_shard_size > 0)
      out << YAML::Key << "fsdp_shard_size" << YAML::Value << p.fsdp_shard_size;
  }
  if (p.decoder_first_pipeline_num_layers > 0)
    out << YAML::Key << "decoder_first_pipeline_num_layers" << YAML::Value
        << p.decoder_first_pipeline_num_layers;
  if (p.decoder_last_pipeline_num_layers > 0)
    out << YAML::Key << "decoder_last_pipeline_num_layers" << YAML::Value
        << p.decoder_last_pipeline_num_layers;
  if (p.account_for_embedding_in_pipeline_split)
    out << YAML::Key << "account_for_embedding_in_pipeline_split" << YAML::Value << true;
  if (!p.pipeline_layout.empty())
    out << YAML::Key << "pipeline_layout" << YAML::Value << p.pipeline_layout;
  if (p.account_for_loss_in_pipeline_split)
    out << YAML::Key << "account_for_loss_in_pipeline_split" << YAML::Value << true;
  if (p.interleaved()) {
    out << YAML::Key << "virtual_pipeline_model_parallel_size" << YAML::Value << p.vpp();
    out << YAML::Key << "microbatch_group_size_per_vp_stage" << YAML::Value
        << p.microbatch_group_size();
    out << YAML::Key << "overlap_p2p_comm" << YAML::Value << p.overlap_p2p_comm;
  }
  out << YAML::Key << "grad_reduce_in_fp32" << YAML::Value << p.grad_reduce_in_fp32;
  out << YAML::Key << "tp_comm_overlap" << YAML::Value << p.tp_comm_overlap;
  if (p.ddp_bucket_size > 0)
    out << YAML::Key << "ddp_bucket_size" << YAML::Value << p.ddp_bucket_size;
  if (p.ddp_first_bucket_size > 0)
    out << YAML::Key << "ddp_first_bucket_size" << YAML::Value << p.ddp_first_bucket_size;
  if (c.model.moe()) {
    out << YAML::Key << "expert_model_parallel_size" << YAML::Value << p.ep();
    out << YAML::Key << "expert_tensor_parallel_size" << YAML::Value << p.etp();
    out << YAML::Key << "moe_token_dispatcher_type" << YAML::Value
        << (p.moe_token_dispatcher_type == workload::MoeDispatcher::AllGather ? "allgather"
            : p.moe_token_dispatcher_type == workload::MoeDispatcher::Flex    ? "flex"
                                                                              : "alltoall");
    out << YAML::Key << "moe_shared_expert_overlap" << YAML::Value << p.moe_shared_expert_overlap;
    out << YAML::Key << "moe_a2a_overlap" << YAML::Value << p.moe_a2a_overlap;
    out << YAML::Key << "delay_wgrad_compute" << YAML::Value << p.delay_wgrad_compute;
    out << YAML::Key << "moe_router_fusion" << YAML::Value << p.moe_router_fusion;
    out << YAML::Key << "moe_permute_fusion" << YAML::Value << p.moe_permute_fusion;
  }
  if (p.cuda_graph_scope != 0) {
    out << YAML::Key << "cuda_graph_scope" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const auto& [bit, name] : kCudaGraphScopes)
      if ((p.cuda_graph_scope & bit) != 0) out << std::string(name);
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;

  const auto& t = c.training;
  out << YAML::Key << "training" << YAML::Value << YAML::BeginMap;
  if (!t.stack.empty()) out << YAML::Key << "stack" << YAML::Value << t.stack;
  out << YAML::Key << "micro_batch_size" << YAML::Value << t.micro_batch_size;
  out << YAML::Key << "global_batch_size" << YAML::Value << t.global_batch_size;
  out << YAML::Key << "precision" << YAML::Value
      << (t.precision == workload::Precision::Fp16    ? "fp16"
          : t.precision == workload::Precision::Fp8   ? "fp8"
          : t.precision == workload::Precision::Nvfp4 ? "nvfp4"
                                                      : "bf16");
  if (t.precision == workload::Precision::Fp8)
    out << YAML::Key << "fp8_recipe" << YAML::Value
        << (t.fp8_recipe == workload::Fp8Recipe::Tensorwise  ? "tensorwise"
            : t.fp8_recipe == workload::Fp8Recipe::Mxfp8     ? "mxfp8"
            : t.fp8_recipe == workload::Fp8Recipe::Blockwise ? "blockwise"
                                                             : "delayed");
  out << YAML::Key << "attention" << YAML::Value
      << (t.attention == workload::AttentionBackend::Unfused  ? "unfused"
          : t.attention == workload::AttentionBackend::Flash2 ? "flash2"
                                                              : "flash");
  if (t.gradient_accumulation_steps > 1)
    out << YAML::Key << "gradient_accumulation_steps" << YAML::Value
        << t.gradient_accumulation_steps;
  if (t.host_iteration_ms > 0)
    out << YAML::Key << "host_iteration_ms" << YAML::Value << num(t.host_iteration_ms);
  if (c.model.moe()) {
    out << YAML::Key << "moe_expert_load_skew" << YAML::Value << num(t.moe_expert_load_skew);
    out << YAML::Key << "moe_expert_load_seed" << YAML::Value << t.moe_expert_load_seed;
  }
  out << YAML::EndMap;

  const auto& cl = c.cluster;
  out << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "gpu" << YAML::Value << cl.gpu;
  out << YAML::Key << "gpus_per_node" << YAML::Value << cl.gpus_per_node;
  out << YAML::Key << "num_gpus" << YAML::Value << cl.num_gpus;
  out << YAML::Key << "nvlink_bandwidth_GBps" << YAML::Value << num(cl.nvlink_bandwidth_GBps);
  out << YAML::Key << "nvlink_latency_us" << YAML::Value << num(cl.nvlink_latency_us);
  out << YAML::Key << "nic_bandwidth_Gbps" << YAML::Value << num(cl.nic_bandwidth_Gbps);
  out << YAML::Key << "nics_per_node" << YAML::Value << cl.nics_per_node;
  out << YAML::Key << "nic_latency_us" << YAML::Value << num(cl.nic_latency_us);
  for (const auto& [key, v] :
       {std::pair{"kernel_overhead_us", cl.kernel_overhead_us},
        std::pair{"gemm_efficiency", cl.gemm_efficiency},
        std::pair{"attention_efficiency", cl.attention_efficiency},
        std::pair{"hbm_efficiency", cl.hbm_efficiency},
        std::pair{"norm_activation_efficiency", cl.norm_activation_efficiency},
        std::pair{"host_launch_us", cl.host_launch_us},
        std::pair{"nic_bus_efficiency", cl.nic_bus_efficiency}})
    if (v) out << YAML::Key << key << YAML::Value << num(*v);
  if (cl.nvls) out << YAML::Key << "nvls" << YAML::Value << *cl.nvls;
  if (cl.in_network_reduction) out << YAML::Key << "in_network_reduction" << YAML::Value << true;
  out << YAML::Key << "compute_efficiency" << YAML::Value << num(cl.compute_efficiency);
  if (cl.topology) {
    const cost::TopologySpec& tp = *cl.topology;
    out << YAML::Key << "topology" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "rail_optimized" << YAML::Value << tp.rail_optimized;
    out << YAML::Key << "nodes_per_leaf" << YAML::Value << tp.nodes_per_leaf;
    out << YAML::Key << "leaves_per_pod" << YAML::Value << tp.leaves_per_pod;
    out << YAML::Key << "spines_per_pod" << YAML::Value << tp.spines_per_pod;
    out << YAML::Key << "cores_per_plane" << YAML::Value << tp.cores_per_plane;
    out << YAML::Key << "leaf_oversubscription" << YAML::Value << num(tp.leaf_oversubscription);
    out << YAML::Key << "spine_oversubscription" << YAML::Value << num(tp.spine_oversubscription);
    out << YAML::Key << "spine_latency_us" << YAML::Value << num(tp.spine_latency_us);
    out << YAML::Key << "core_latency_us" << YAML::Value << num(tp.core_latency_us);
    out << YAML::Key << "routing" << YAML::Value
        << (tp.routing == cost::TopologySpec::Routing::DestMod ? "dest_mod" : "ecmp");
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  {
    const cost::NetworkOptions& nw = c.network;
    out << YAML::Key << "network" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "model" << YAML::Value << (nw.flow ? "flow" : "analytical");
    if (!nw.comm_kernel_sms) out << YAML::Key << "comm_kernel_sms" << YAML::Value << false;
    if (nw.filter.algo)
      out << YAML::Key << "nccl_algo" << YAML::Value
          << std::string(cost::nccl_algo_name(*nw.filter.algo));
    if (nw.filter.proto)
      out << YAML::Key << "nccl_proto" << YAML::Value
          << std::string(cost::nccl_proto_name(*nw.filter.proto));
    out << YAML::EndMap;
  }

  if (!c.cost.profile.empty()) {
    out << YAML::Key << "cost" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "profile" << YAML::Value << c.cost.profile;
    out << YAML::EndMap;
  }
  const auto& r = c.run;
  out << YAML::Key << "run" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "engine" << YAML::Value << r.engine;
  out << YAML::Key << "partition" << YAML::Value << r.partition;
  out << YAML::Key << "on_oom" << YAML::Value << r.on_oom;
  out << YAML::Key << "trace_ranks" << YAML::Value << YAML::Flow << r.trace_ranks;
  out << YAML::Key << "output" << YAML::Value << r.output;
  out << YAML::Key << "coalesce_local_ops" << YAML::Value << r.coalesce_local_ops;
  out << YAML::Key << "p2p" << YAML::Value << r.p2p;
  if (r.replicas != "all") out << YAML::Key << "replicas" << YAML::Value << r.replicas;
  if (r.optimism_window_us > 0)
    out << YAML::Key << "optimism_window_us" << YAML::Value << num(r.optimism_window_us);
  if (!r.sandbox_ranks.empty()) {
    out << YAML::Key << "sandbox_ranks" << YAML::Value << YAML::Flow << r.sandbox_ranks;
    out << YAML::Key << "sandbox_backend" << YAML::Value << r.sandbox_backend;
    out << YAML::Key << "sandbox_op_scale" << YAML::Value << num(r.sandbox_op_scale);
    out << YAML::Key << "calibrate_from_sandbox" << YAML::Value << r.calibrate_from_sandbox;
  }
  out << YAML::EndMap;
  out << YAML::EndMap;

  // Presets are merged in; they are named in the header only, so that the emitted file loads
  // back on its own, from any directory, to the same configuration.
  std::ostringstream header;
  header << "# scalescope resolved configuration of " << c.path << "\n";
  if (!sources.preset.empty()) header << "# model.preset: " << sources.preset << "\n";
  if (!sources.hf_config.empty()) header << "# model.hf_config: " << sources.hf_config << "\n";
  if (!c.cluster.preset.empty()) header << "# cluster.preset: " << c.cluster.preset << "\n";
  return header.str() + out.c_str() + "\n";
}

}  // namespace scalescope::io::detail
