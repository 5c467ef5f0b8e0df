// The sections cluster: (with its topology and preset), network:, parallel:, training: and run:.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "core/error.hpp"
#include "cost/gpu.hpp"
#include "io/config_internal.hpp"
#include "io/megatron_args.hpp"
#include "io/pipeline_actions.hpp"

namespace scalescope::io::detail {

namespace {

/// `cluster.topology`: a mapping of kTopologyKeys (docs/config.md).
cost::TopologySpec build_topology(const Value& v) {
  if (!v.node.IsMap())
    fail(v, "cluster.topology", "expected a mapping (rail_optimized, nodes_per_leaf, ...)");
  Section keys;
  for (const auto& kv : v.node) {
    const std::string k = kv.first.Scalar();
    if (std::find(kTopologyKeys.begin(), kTopologyKeys.end(), k) == kTopologyKeys.end())
      fail(Value{kv.first, v.origin}, "cluster.topology." + k,
           "unknown key" + detail::did_you_mean(k, kTopologyKeys));
    keys.insert_or_assign(k, Value{kv.second, v.origin});
  }
  cost::TopologySpec t;
  const Reader r(keys, "cluster.topology");
  r.flag("rail_optimized", t.rail_optimized);
  r.positive("nodes_per_leaf", t.nodes_per_leaf);
  if (const Value* x = r.find("leaves_per_pod")) {
    t.leaves_per_pod = detail::read_int(*x, "cluster.topology.leaves_per_pod");
    if (t.leaves_per_pod < 0) fail(*x, "cluster.topology.leaves_per_pod", "must be >= 0");
  }
  r.positive("spines_per_pod", t.spines_per_pod);
  r.positive("cores_per_plane", t.cores_per_plane);
  r.number("leaf_oversubscription", t.leaf_oversubscription, 1.0, false);
  r.number("spine_oversubscription", t.spine_oversubscription, 1.0, false);
  r.number("spine_latency_us", t.spine_latency_us, 0.0, false);
  r.number("core_latency_us", t.core_latency_us, 0.0, false);
  t.routing = r.choice("routing", {"ecmp", "dest_mod"}, "ecmp") == "dest_mod"
                  ? cost::TopologySpec::Routing::DestMod
                  : cost::TopologySpec::Routing::Ecmp;
  return t;
}

/// One of NCCL's names for an enum value (case-insensitive, as NCCL reads NCCL_ALGO and
/// NCCL_PROTO), looked up by `name_of` over `values`; fails naming `key` otherwise.
template <class E, class Values, class Name>
E read_nccl_name(const Value& v, const char* key, const Values& values, Name name_of,
                 std::string_view what) {
  auto lower = [](std::string x) {
    std::transform(x.begin(), x.end(), x.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    return x;
  };
  const std::string given = lower(detail::read_string(v, key));
  std::vector<std::string> names;
  for (E e : values) {
    names.emplace_back(name_of(e));
    if (lower(names.back()) == given) return e;
  }
  fail(v, key, fmt::format("'{}' is not {} ({})", v.node.Scalar(), what, fmt::join(names, ", ")));
}

/// A list of names from `table` (Megatron's --recompute-modules, --cuda-graph-scope) as a bit set;
/// not a list, or a name not in it, is a one-line error naming `key`.
template <std::size_t N>
std::uint8_t bit_list(const Value& v, const std::string& key,
                      const std::pair<std::uint8_t, std::string_view> (&table)[N],
                      std::string_view expected, std::string_view unknown) {
  if (!v.node.IsSequence()) fail(v, key, fmt::format("expected {}", expected));
  std::uint8_t bits = 0;
  for (const YAML::Node& e : v.node) {
    const std::string name = e.IsScalar() ? e.Scalar() : std::string();
    std::uint8_t bit = 0;
    for (const auto& [b, n] : table)
      if (name == n) bit = b;
    if (bit == 0) fail(v, key, fmt::format("'{}' {}", name, unknown));
    bits |= bit;
  }
  return bits;
}

}  // namespace

/// `network:` (docs/config.md): the network model and NCCL's forced choices.
cost::NetworkOptions build_network(const Section& s) {
  cost::NetworkOptions n;
  const Reader r(s, "network");
  n.flow = r.choice("model", {"analytical", "flow"}, "analytical") == "flow";
  r.flag("comm_kernel_sms", n.comm_kernel_sms);
  if (const Value* v = r.find("nccl_algo"))
    n.filter.algo =
        read_nccl_name<cost::NcclAlgo>(*v, "network.nccl_algo", cost::kNcclAlgos,
                                       cost::nccl_algo_name, "a modelled NCCL algorithm");
  if (const Value* v = r.find("nccl_proto"))
    n.filter.proto = read_nccl_name<cost::NcclProto>(*v, "network.nccl_proto", cost::kNcclProtos,
                                                     cost::nccl_proto_name, "an NCCL protocol");
  return n;
}

cost::ClusterSpec build_cluster(const Section& inline_keys, const std::string& experiment) {
  Section merged;
  cost::ClusterSpec c;
  if (const Value* v = get(inline_keys, "preset")) {
    const fs::path p =
        find_preset(*v, "cluster.preset", "clusters", fs::path(experiment).parent_path());
    merged = read_preset(p, "cluster", kClusterNetworkKeys);
    c.preset = v->node.Scalar();
  }
  for (const auto& [k, v] : inline_keys) {
    if (k == "preset") continue;
    const Value* base = get(merged, k);
    if (k == "topology" && base != nullptr && base->node.IsMap() && v.node.IsMap()) {
      // The experiment's topology keys over the preset's.
      YAML::Node map = YAML::Clone(base->node);
      for (const auto& kv : v.node) map[kv.first.Scalar()] = kv.second;
      merged.insert_or_assign(k, Value{map, v.origin});
      continue;
    }
    merged.insert_or_assign(k, v);
  }

  const Reader r(merged, "cluster");
  if (const Value* v = r.find("topology")) c.topology = build_topology(*v);
  if (const Value* gpu = r.find("gpu")) {
    const std::string gpu_name = detail::read_string(*gpu, "cluster.gpu");
    try {
      c.gpu = cost::find_gpu(gpu_name).name;
    } catch (const InputError& e) {
      fail(*gpu, "cluster.gpu", e.what());
    }
  }
  r.positive("gpus_per_node", c.gpus_per_node);
  r.positive("num_gpus", c.num_gpus);
  r.number("nvlink_bandwidth_GBps", c.nvlink_bandwidth_GBps, 0.0, true);
  r.number("nvlink_latency_us", c.nvlink_latency_us, 0.0, false);
  r.number("nic_bandwidth_Gbps", c.nic_bandwidth_Gbps, 0.0, true);
  r.positive("nics_per_node", c.nics_per_node);
  r.number("nic_latency_us", c.nic_latency_us, 0.0, false);
  r.number("compute_efficiency", c.compute_efficiency, 0.0, true, 1.0 + 1e-12);
  // The kernel model (docs/cost-model.md §1.3); absent keys keep the GPU table's defaults.
  const auto optional_number = [&](std::string_view k, std::optional<double>& out, bool positive,
                                   double max) {
    if (!r.find(k)) return;
    double v = 0;
    r.number(k, v, 0.0, positive, max);
    out = v;
  };
  optional_number("kernel_overhead_us", c.kernel_overhead_us, false, 1e6);
  optional_number("gemm_efficiency", c.gemm_efficiency, true, 1.0 + 1e-12);
  optional_number("attention_efficiency", c.attention_efficiency, true, 1.0 + 1e-12);
  optional_number("hbm_efficiency", c.hbm_efficiency, true, 1.0 + 1e-12);
  optional_number("norm_activation_efficiency", c.norm_activation_efficiency, true, 1.0 + 1e-12);
  optional_number("host_launch_us", c.host_launch_us, false, 1e6);
  optional_number("nic_bus_efficiency", c.nic_bus_efficiency, true, 1.0 + 1e-12);
  if (r.find("nvls")) {
    bool on = false;
    r.flag("nvls", on);
    c.nvls = on;
  }
  r.flag("in_network_reduction", c.in_network_reduction);
  // An NVLink domain of several servers (GB200 NVL72: 18 trays of 4 GPUs): the network model's
  // unit ("node": NVLink inside, NICs between) is the domain, so a server's GPUs and NICs are
  // counted per domain (docs/config.md).
  if (const Value* v = r.find("gpus_per_scaleup_domain")) {
    const std::int64_t domain = detail::read_positive_int(*v, "cluster.gpus_per_scaleup_domain");
    if (domain % c.gpus_per_node != 0)
      fail(*v, "cluster.gpus_per_scaleup_domain",
           fmt::format("{} is not a multiple of cluster.gpus_per_node={} (a domain joins whole "
                       "servers)",
                       domain, c.gpus_per_node));
    c.nics_per_node *= domain / c.gpus_per_node;
    c.gpus_per_node = domain;
  }
  for (std::string_view k : {"gpu", "nvlink_bandwidth_GBps", "nvlink_latency_us",
                             "nic_bandwidth_Gbps", "nics_per_node", "nic_latency_us"})
    if (!get(merged, k))
      throw_input("{}: cluster.{} is required (set it inline or through cluster.preset)",
                  experiment, k);
  return c;
}

workload::ParallelPlan build_parallel(const Section& s) {
  workload::ParallelPlan p;
  const Reader r(s, "parallel");
  r.positive("tensor_model_parallel_size", p.tensor_model_parallel_size);
  r.positive("pipeline_model_parallel_size", p.pipeline_model_parallel_size);
  r.positive("data_parallel_size", p.data_parallel_size);
  r.positive("context_parallel_size", p.context_parallel_size);
  if (const Value* v = r.find("cp_comm_type")) {
    const std::string type =
        r.choice("cp_comm_type", {"p2p", "all_gather", "a2a", "a2a+p2p"}, "p2p");
    if (type == "a2a+p2p")
      fail(*v, r.key("cp_comm_type"),
           "'a2a+p2p' (hierarchical all-to-all and ring) is not modelled yet; use p2p, all_gather "
           "or a2a");
    p.cp_comm_type = type == "all_gather" ? workload::CpCommType::AllGather
                     : type == "a2a"      ? workload::CpCommType::A2a
                                          : workload::CpCommType::P2p;
  }
  r.positive("virtual_pipeline_model_parallel_size", p.virtual_pipeline_model_parallel_size);
  if (const Value* v = r.find("pipeline_layout")) {
    // Megatron's --pipeline-model-parallel-layout: the decoder layers of each virtual stage; its
    // segments give PP × VP (check_plan checks it against the model).
    const std::string key = r.key("pipeline_layout");
    p.pipeline_layout = detail::read_string(*v, key);
    const std::vector<std::string> stages =
        detail::expand_pipeline_layout(p.pipeline_layout, detail::where(*v, key));
    const auto n = static_cast<std::int64_t>(stages.size());
    if (n % p.pp() != 0)
      fail(*v, key,
           fmt::format("{} virtual stages are not a multiple of pipeline_model_parallel_size={}", n,
                       p.pp()));
    if (const Value* given = r.find("virtual_pipeline_model_parallel_size");
        given && p.virtual_pipeline_model_parallel_size != n / p.pp())
      fail(*given, r.key("virtual_pipeline_model_parallel_size"),
           fmt::format("{} disagrees with parallel.pipeline_layout ({} virtual stages over {} "
                       "pipeline ranks)",
                       p.virtual_pipeline_model_parallel_size, n, p.pp()));
    p.virtual_pipeline_model_parallel_size = n / p.pp();
    for (const std::string& stage : stages)
      p.layout_layers.push_back(std::count(stage.begin(), stage.end(), 't'));
  }
  r.positive("microbatch_group_size_per_vp_stage", p.microbatch_group_size_per_vp_stage);
  r.flag("overlap_p2p_comm", p.overlap_p2p_comm);
  r.flag("grad_reduce_in_fp32", p.grad_reduce_in_fp32);
  r.flag("tp_comm_overlap", p.tp_comm_overlap);
  r.positive("ddp_bucket_size", p.ddp_bucket_size);
  r.positive("ddp_first_bucket_size", p.ddp_first_bucket_size);
  r.flag("account_for_embedding_in_pipeline_split", p.account_for_embedding_in_pipeline_split);
  r.flag("account_for_loss_in_pipeline_split", p.account_for_loss_in_pipeline_split);
  r.flag("sequence_parallel", p.sequence_parallel);
  const std::string recompute = r.choice("recompute", {"none", "selective", "full", "op"}, "none");
  p.recompute = recompute == "full"        ? workload::Recompute::Full
                : recompute == "selective" ? workload::Recompute::Selective
                : recompute == "op"        ? workload::Recompute::Op
                                           : workload::Recompute::None;
  // Which layers full recomputation checkpoints (Megatron's --recompute-method and
  // --recompute-num-layers); full recomputation only.
  for (std::string_view k : {"recompute_method", "recompute_num_layers"})
    if (const Value* v = r.find(k); v && p.recompute != workload::Recompute::Full)
      fail(*v, r.key(k), "applies to parallel.recompute: full only");
  const std::string method =
      r.choice("recompute_method", {"uniform", "block", "interval"}, "uniform");
  p.recompute_method = method == "block"      ? workload::RecomputeMethod::Block
                       : method == "interval" ? workload::RecomputeMethod::Interval
                                              : workload::RecomputeMethod::Uniform;
  r.positive("recompute_num_layers", p.recompute_num_layers);
  if (const Value* v = r.find("recompute_modules")) {
    // Megatron's --recompute-modules (TransformerConfig.recompute_modules).
    const std::string key = r.key("recompute_modules");
    if (p.recompute != workload::Recompute::Selective)
      fail(*v, key, "applies to parallel.recompute: selective only");
    p.recompute_modules = bit_list(
        *v, key, kRecomputeModules, "a list of submodules, e.g. [core_attn, moe_act, layernorm]",
        "is not a submodule (core_attn, moe_act, layernorm, mla_up_proj, "
        "mlp, moe, shared_experts)");
  }
  r.flag("use_distributed_optimizer", p.use_distributed_optimizer);
  if (const Value* v = r.find("schedule")) {
    // torch.distributed.pipelining's schedules beyond these (torchtitan's
    // pipeline_parallel_schedule names, lower-cased): said, not silently approximated.
    std::string name = detail::read_string(*v, r.key("schedule"));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    for (const char* torch_only :
         {"zbv", "zbvzerobubble", "schedulezbvzerobubble", "dualpipev", "scheduledualpipev"})
      if (name == torch_only)
        fail(*v, r.key("schedule"),
             fmt::format("'{}' (torch.distributed.pipelining) places two stages V-shaped on a "
                         "rank, which is not modelled: the schedules are 1f1b, gpipe, looped_bfs, "
                         "interleaved 1F1B (virtual_pipeline_model_parallel_size > 1) and "
                         "actions (a torch.distributed.pipelining action table)",
                         detail::read_string(*v, r.key("schedule"))));
    if (name == "interleavedzerobubble" || name == "scheduleinterleavedzerobubble")
      fail(*v, r.key("schedule"),
           fmt::format("'{}': give its action table, schedule: actions with pipeline_actions "
                       "(scripts/capture/pp_schedule.py InterleavedZeroBubble writes it)",
                       detail::read_string(*v, r.key("schedule"))));
  }
  {
    const std::string sched =
        r.choice("schedule", {"1f1b", "gpipe", "looped_bfs", "actions"}, "1f1b");
    p.schedule = sched == "gpipe"        ? workload::Schedule::GPipe
                 : sched == "looped_bfs" ? workload::Schedule::LoopedBfs
                 : sched == "actions"    ? workload::Schedule::Actions
                                         : workload::Schedule::OneFOneB;
  }
  // torch.distributed.pipelining's action table (schedule: actions): the file's syntax here,
  // its fit to the layout and batch in validate().
  if (const Value* v = r.find("pipeline_actions")) {
    if (p.schedule != workload::Schedule::Actions)
      fail(*v, r.key("pipeline_actions"), "applies to schedule: actions");
    const std::string file = detail::read_string(*v, r.key("pipeline_actions"));
    const fs::path path = fs::path(file).is_absolute() ? fs::path(file) : base_dir(*v) / file;
    if (!is_file(path))
      fail(*v, r.key("pipeline_actions"), fmt::format("file {} not found", display(path)));
    p.pipeline_actions_path = fs::absolute(path).lexically_normal().string();
    p.pipeline_actions = read_pipeline_actions(p.pipeline_actions_path);
  } else if (p.schedule == workload::Schedule::Actions) {
    fail(*r.find("schedule"), r.key("schedule"),
         "actions needs parallel.pipeline_actions (a torch.distributed.pipelining action "
         "table, compute-only CSV)");
  }
  r.flag("overlap_grad_reduce", p.overlap_grad_reduce);
  r.flag("overlap_param_gather", p.overlap_param_gather);
  r.flag("fp8_param_gather", p.fp8_param_gather);
  // ZeRO stages; use_distributed_optimizer is Megatron's name for stage 1 (and Megatron-FSDP
  // requires it beside its sharding), fsdp PyTorch FSDP2's = stage 3.
  if (const Value* v = r.find("zero_stage")) {
    p.zero_stage = std::stoll(r.choice("zero_stage", {"0", "1", "2", "3"}, "0"));
    if (p.zero_stage == 0 && p.use_distributed_optimizer)
      fail(*v, r.key("zero_stage"),
           "0 (plain DDP) contradicts parallel.use_distributed_optimizer: true (ZeRO-1)");
  }
  r.flag("fsdp", p.fsdp);
  if (p.fsdp) {
    if (const Value* v = r.find("zero_stage"); v && p.zero_stage != 3)
      fail(*v, r.key("zero_stage"), "parallel.fsdp: true is ZeRO-3; set zero_stage: 3 or omit it");
    p.zero_stage = 3;
  }
  if (p.zero_stage >= 1) p.use_distributed_optimizer = true;
  for (const char* k : {"reshard_after_forward", "fsdp_reduce_every_microbatch", "fsdp_shard_size"})
    if (const Value* v = r.find(k); v && p.zero() < 3)
      fail(*v, r.key(k), "applies to ZeRO-3 only (parallel.fsdp: true or zero_stage: 3)");
  if (const Value* v = r.find("recompute_num_layers");
      v && p.zero() >= 3 && p.recompute_method == workload::RecomputeMethod::Uniform &&
      p.recompute_num_layers > 1)
    fail(*v, r.key("recompute_num_layers"),
         "uniform groups of more than one layer under ZeRO-3 / FSDP are not modelled (FSDP "
         "gathers one layer's parameters per recompute); use 1 or recompute_method: block");
  r.flag("reshard_after_forward", p.reshard_after_forward);
  r.flag("fsdp_reduce_every_microbatch", p.fsdp_reduce_every_microbatch);
  if (p.zero() >= 3 && p.pp() > 1) {
    // FSDP under torch.distributed.pipelining, as torchtitan runs it: apply_fsdp's default
    // policy keeps the parameters gathered after the forward when PP is on ("to avoid
    // per-microbatch all-gathers", reshard_after_forward = not pp_enabled), and the stage
    // turns off resharding and gradient sync for every backward and reduces once, after the
    // stage's last backward (PipelineStage.backward_maybe_with_nosync / perform_reduce_grad).
    // fsdp_reduce_every_microbatch: true is FSDP2's own defaults where the stage's module is
    // not itself the FSDP module (NeMo AutoModel before 2025-10-08): reshard and reduce after
    // every backward. docs/config.md "FSDP with pipeline parallelism" cites the lines.
    const Value* every = r.find("fsdp_reduce_every_microbatch");
    if (every == nullptr) p.fsdp_reduce_every_microbatch = false;
    if (r.find("reshard_after_forward") == nullptr) p.reshard_after_forward = false;
    if (const Value* v = r.find("reshard_after_forward");
        v && p.reshard_after_forward && !p.fsdp_reduce_every_microbatch)
      fail(*v, r.key("reshard_after_forward"),
           "true with pipeline_model_parallel_size > 1 and the stage reducing once a step is "
           "not modelled (torchtitan keeps the parameters gathered across a step's "
           "micro-batches under PP); set fsdp_reduce_every_microbatch: true for FSDP2's "
           "per-micro-batch resharding");
  }
  r.positive("fsdp_shard_size", p.fsdp_shard_size);
  r.positive("decoder_first_pipeline_num_layers", p.decoder_first_pipeline_num_layers);
  r.positive("decoder_last_pipeline_num_layers", p.decoder_last_pipeline_num_layers);
  r.positive("expert_model_parallel_size", p.expert_model_parallel_size);
  r.positive("expert_tensor_parallel_size", p.expert_tensor_parallel_size);
  r.flag("moe_shared_expert_overlap", p.moe_shared_expert_overlap);
  r.flag("moe_a2a_overlap", p.moe_a2a_overlap);
  r.flag("delay_wgrad_compute", p.delay_wgrad_compute);
  r.flag("moe_router_fusion", p.moe_router_fusion);
  r.flag("moe_permute_fusion", p.moe_permute_fusion);
  if (const Value* v = r.find("cuda_graph_scope")) {
    // Megatron's --cuda-graph-scope with --cuda-graph-impl transformer_engine (per-layer graphs).
    p.cuda_graph_scope = bit_list(*v, r.key("cuda_graph_scope"), kCudaGraphScopes,
                                  "a list of scopes, e.g. [attn, moe_router, moe_preprocess]",
                                  "is not modelled (attn, moe_router, moe_preprocess are; "
                                  "full_iteration, mlp, moe and mamba graphs are not)");
  }
  const std::string dispatcher =
      r.choice("moe_token_dispatcher_type", {"alltoall", "allgather", "flex"}, "alltoall");
  p.moe_token_dispatcher_type = dispatcher == "allgather" ? workload::MoeDispatcher::AllGather
                                : dispatcher == "flex"    ? workload::MoeDispatcher::Flex
                                                          : workload::MoeDispatcher::AllToAll;
  return p;
}

workload::TrainingSpec build_training(const Section& s) {
  workload::TrainingSpec t;
  const Reader r(s, "training");
  r.positive("micro_batch_size", t.micro_batch_size);
  r.positive("global_batch_size", t.global_batch_size);
  const std::string precision = r.choice("precision", {"bf16", "fp16", "fp8", "nvfp4"}, "bf16");
  t.precision = precision == "fp16"    ? workload::Precision::Fp16
                : precision == "fp8"   ? workload::Precision::Fp8
                : precision == "nvfp4" ? workload::Precision::Nvfp4
                                       : workload::Precision::Bf16;
  if (const Value* v = r.find("fp8_recipe")) {
    if (t.precision != workload::Precision::Fp8)
      fail(*v, r.key("fp8_recipe"), "applies to training.precision: fp8 only");
    const std::string recipe =
        r.choice("fp8_recipe", {"delayed", "tensorwise", "mxfp8", "blockwise"}, "delayed");
    t.fp8_recipe = recipe == "tensorwise"  ? workload::Fp8Recipe::Tensorwise
                   : recipe == "mxfp8"     ? workload::Fp8Recipe::Mxfp8
                   : recipe == "blockwise" ? workload::Fp8Recipe::Blockwise
                                           : workload::Fp8Recipe::Delayed;
  }
  const std::string attention = r.choice("attention", {"flash", "unfused", "flash2"}, "flash");
  t.attention = attention == "unfused"  ? workload::AttentionBackend::Unfused
                : attention == "flash2" ? workload::AttentionBackend::Flash2
                                        : workload::AttentionBackend::Flash;
  r.number("moe_expert_load_skew", t.moe_expert_load_skew, 0.0, false, 20.0);
  r.number("host_iteration_ms", t.host_iteration_ms, 0.0, false, 3.6e6);
  r.positive("gradient_accumulation_steps", t.gradient_accumulation_steps);
  if (const Value* v = r.find("moe_expert_load_seed"))
    t.moe_expert_load_seed = detail::read_int(*v, r.key("moe_expert_load_seed"));
  return t;
}

RunSpec build_run(const Section& s) {
  RunSpec run;
  const Reader r(s, "run");
  run.engine = r.choice("engine", {"sequential", "optimistic", "conservative", "auto"}, run.engine);
  if (const Value* v = r.find("trace_ranks")) {
    const auto rank = [&](const YAML::Node& n) {
      const auto x = detail::read_int(Value{n, v->origin}, r.key("trace_ranks"));
      if (x < 0 || x > std::int64_t{UINT32_MAX})
        fail(Value{n, v->origin}, r.key("trace_ranks"), fmt::format("rank {} out of range", x));
      return static_cast<std::uint32_t>(x);
    };
    run.trace_ranks.clear();
    if (v->node.IsSequence()) {
      for (const auto& n : v->node) {
        const std::uint32_t x = rank(n);
        if (std::find(run.trace_ranks.begin(), run.trace_ranks.end(), x) == run.trace_ranks.end())
          run.trace_ranks.push_back(x);
      }
    } else {
      run.trace_ranks.push_back(rank(v->node));  // a single rank may be written bare
    }
  }
  r.text("output", run.output);
  r.flag("coalesce_local_ops", run.coalesce_local_ops);
  run.partition = r.choice("partition", {"block", "metis"}, run.partition);
  // Up to an hour of simulated time; a key the other engines would silently ignore is refused.
  r.number("optimism_window_us", run.optimism_window_us, 0.0, true, 3.6e9);
  if (run.optimism_window_us > 0 && run.engine != "optimistic")
    fail(*r.find("optimism_window_us"), r.key("optimism_window_us"),
         fmt::format("bounds the optimistic engine's run-ahead, but run.engine is {}", run.engine));
  run.on_oom = r.choice("on_oom", {"warn", "fail"}, run.on_oom);
  run.p2p = r.choice("p2p", {"rendezvous", "eager"}, run.p2p);
  run.replicas = r.choice("replicas", {"all", "representative"}, run.replicas);
  if (const Value* v = r.find("sandbox_ranks")) {
    const auto rank = [&](const YAML::Node& n) {
      const auto x = detail::read_int(Value{n, v->origin}, r.key("sandbox_ranks"));
      if (x < 0 || x > std::int64_t{UINT32_MAX})
        fail(Value{n, v->origin}, r.key("sandbox_ranks"), fmt::format("rank {} out of range", x));
      return static_cast<std::uint32_t>(x);
    };
    run.sandbox_ranks.clear();
    const auto add = [&](std::uint32_t x) {
      if (std::find(run.sandbox_ranks.begin(), run.sandbox_ranks.end(), x) ==
          run.sandbox_ranks.end())
        run.sandbox_ranks.push_back(x);
    };
    if (v->node.IsSequence())
      for (const auto& n : v->node) add(rank(n));
    else
      add(rank(v->node));
  }
  run.sandbox_backend = r.choice("sandbox_backend", {"auto", "host", "cuda"}, run.sandbox_backend);
  r.number("sandbox_op_scale", run.sandbox_op_scale, 0.0, true, 1.0 + 1e-12);
  r.flag("calibrate_from_sandbox", run.calibrate_from_sandbox);
  return run;
}

}  // namespace scalescope::io::detail
