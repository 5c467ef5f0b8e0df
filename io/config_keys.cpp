// The experiment file's sections and keys: the key tables (docs/config.md documents them one
// by one; names follow Megatron-LM's arguments), the aliases of parallel:, and the lookups of a
// key in them.
#include <algorithm>

#include "io/config_internal.hpp"

namespace scalescope::io::detail {

const Keys kSections = {"model", "parallel", "training", "cluster", "run", "cost", "network"};

const Keys kModelShapeKeys = {"name",
                              "num_layers",
                              "hidden_size",
                              "ffn_hidden_size",
                              "num_attention_heads",
                              "num_query_groups",
                              "kv_channels",
                              "vocab_size",
                              "make_vocab_size_divisible_by",
                              "seq_length",
                              "gated_linear_unit",
                              "untie_embeddings",
                              "add_bias_linear",
                              "add_qkv_bias",
                              "qk_layernorm",
                              "mtp_num_layers",
                              "hidden_dropout",
                              "attention_dropout",
                              "position_embedding_type",
                              "num_experts",
                              "moe_router_topk",
                              "moe_ffn_hidden_size",
                              "moe_shared_expert_intermediate_size",
                              "moe_layer_freq",
                              "moe_expert_capacity_factor",
                              "moe_router_num_groups",
                              "moe_router_group_topk",
                              "moe_aux_loss_coeff",
                              "multi_latent_attention",
                              "q_lora_rank",
                              "kv_lora_rank",
                              "qk_head_dim",
                              "qk_pos_emb_head_dim",
                              "v_head_dim"};
const Keys kParallelKeys = {"tensor_model_parallel_size",
                            "pipeline_model_parallel_size",
                            "data_parallel_size",
                            "context_parallel_size",
                            "cp_comm_type",
                            "virtual_pipeline_model_parallel_size",
                            "sequence_parallel",
                            "recompute",
                            "recompute_method",
                            "recompute_num_layers",
                            "recompute_modules",
                            "use_distributed_optimizer",
                            "schedule",
                            "pipeline_actions",
                            "overlap_grad_reduce",
                            "overlap_param_gather",
                            "fp8_param_gather",
                            "decoder_first_pipeline_num_layers",
                            "decoder_last_pipeline_num_layers",
                            "account_for_embedding_in_pipeline_split",
                            "account_for_loss_in_pipeline_split",
                            "pipeline_layout",
                            "microbatch_group_size_per_vp_stage",
                            "overlap_p2p_comm",
                            "grad_reduce_in_fp32",
                            "tp_comm_overlap",
                            "ddp_bucket_size",
                            "ddp_first_bucket_size",
                            "zero_stage",
                            "fsdp",
                            "reshard_after_forward",
                            "fsdp_reduce_every_microbatch",
                            "fsdp_shard_size",
                            "expert_model_parallel_size",
                            "expert_tensor_parallel_size",
                            "moe_token_dispatcher_type",
                            "moe_shared_expert_overlap",
                            "moe_a2a_overlap",
                            "moe_router_fusion",
                            "moe_permute_fusion",
                            "cuda_graph_scope",
                            "delay_wgrad_compute"};
const Keys kTrainingKeys = {"micro_batch_size",
                            "global_batch_size",
                            "precision",
                            "fp8_recipe",
                            "attention",
                            "moe_expert_load_skew",
                            "moe_expert_load_seed",
                            "stack",
                            "host_iteration_ms",
                            "gradient_accumulation_steps"};
const Keys kClusterNetworkKeys = {"gpu",
                                  "gpus_per_node",
                                  "num_gpus",
                                  "nvlink_bandwidth_GBps",
                                  "nvlink_latency_us",
                                  "nic_bandwidth_Gbps",
                                  "nics_per_node",
                                  "nic_latency_us",
                                  "kernel_overhead_us",
                                  "gemm_efficiency",
                                  "attention_efficiency",
                                  "hbm_efficiency",
                                  "norm_activation_efficiency",
                                  "host_launch_us",
                                  "compute_efficiency",
                                  "nic_bus_efficiency",
                                  "nvls",
                                  "in_network_reduction",
                                  "gpus_per_scaleup_domain",
                                  "topology"};
const Keys kCostKeys = {"profile"};
const Keys kNetworkKeys = {"model", "nccl_algo", "nccl_proto", "comm_kernel_sms"};
/// The keys of `cluster.topology` (docs/config.md).
const Keys kTopologyKeys = {"rail_optimized",         "nodes_per_leaf",
                            "leaves_per_pod",         "spines_per_pod",
                            "cores_per_plane",        "leaf_oversubscription",
                            "spine_oversubscription", "spine_latency_us",
                            "core_latency_us",        "routing"};
const Keys kRunKeys = {"engine",
                       "trace_ranks",
                       "output",
                       "coalesce_local_ops",
                       "partition",
                       "on_oom",
                       "sandbox_ranks",
                       "sandbox_backend",
                       "sandbox_op_scale",
                       "calibrate_from_sandbox",
                       "p2p",
                       "replicas",
                       "optimism_window_us"};

/// Short names accepted in `parallel:` (Megatron's own --tp/--pp style abbreviations).
const std::vector<std::pair<std::string_view, std::string_view>> kParallelAliases = {
    {"tp", "tensor_model_parallel_size"},
    {"pp", "pipeline_model_parallel_size"},
    {"dp", "data_parallel_size"},
    {"cp", "context_parallel_size"},
    {"vpp", "virtual_pipeline_model_parallel_size"},
    {"ep", "expert_model_parallel_size"},
    {"etp", "expert_tensor_parallel_size"},
    {"accumulate_allreduce_grads_in_fp32", "grad_reduce_in_fp32"}};

Keys concat(Keys a, const Keys& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// The keys an experiment file may write in `section`.
Keys section_keys(std::string_view section) {
  if (section == "model")
    return concat(kModelShapeKeys, {"preset", "hf_config", "source", "tp_plan", "compile", "outer",
                                    "sdpa", "causal_mask", "fusion", "pytorch", "pytorch_args",
                                    "pytorch_blocks", "pytorch_tp_plan", "pytorch_factory"});
  if (section == "parallel") return kParallelKeys;
  if (section == "training") return kTrainingKeys;
  if (section == "cluster") return concat(kClusterNetworkKeys, {"preset"});
  if (section == "cost") return kCostKeys;
  if (section == "network") return kNetworkKeys;
  return kRunKeys;
}

/// `key` resolved through the aliases of `section`; empty when `key` is not allowed.
std::string_view canonical(std::string_view section, std::string_view key, const Keys& allowed) {
  if (section == "parallel")
    for (const auto& [alias, name] : kParallelAliases)
      if (key == alias) key = name;
  const auto it = std::find(allowed.begin(), allowed.end(), key);
  return it == allowed.end() ? std::string_view{} : *it;
}

}  // namespace scalescope::io::detail
