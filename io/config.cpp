// Experiment configuration: YAML sections → ExperimentConfig. The keys, their defaults and the
// rules checked here are documented one by one in docs/config.md; names follow Megatron-LM's
// arguments (megatron/training/arguments.py), and so do the checks of the plan.
#include "io/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include <sys/wait.h>
#include <unistd.h>

#include "core/error.hpp"
#include "cost/gpu.hpp"
#include "io/capture_h5.hpp"
#include "io/megatron_args.hpp"
#include "io/yaml_util.hpp"

namespace scalescope::io {

namespace {

namespace fs = std::filesystem;
using detail::fail;
using detail::Origin;
using detail::Value;

/// Canonical key → value, for one section after merging.
using Section = std::map<std::string, Value, std::less<>>;
using Tree = std::map<std::string, Section, std::less<>>;

using Keys = std::vector<std::string_view>;

const Keys kSections = {"model", "parallel", "training", "cluster", "run", "cost", "network"};
/// parallel.recompute_modules: Megatron's submodule names.
constexpr std::pair<std::uint8_t, std::string_view> kRecomputeModules[] = {
    {workload::kRecomputeCoreAttn, "core_attn"},
    {workload::kRecomputeMoeAct, "moe_act"},
    {workload::kRecomputeLayerNorm, "layernorm"},
    {workload::kRecomputeMlaUpProj, "mla_up_proj"},
    {workload::kRecomputeMlp, "mlp"},
    {workload::kRecomputeMoe, "moe"},
    {workload::kRecomputeSharedExperts, "shared_experts"}};
/// The top-level key of an experiment file that holds a Megatron-LM launch line.
constexpr std::string_view kLaunchLineKey = "megatron_args";
/// The top-level `sweep:` section: read by `scalescope sweep` (read_sweep_spec), ignored by a run.
constexpr std::string_view kSweepKey = "sweep";
constexpr std::string_view kWhatifKey = "whatif";
/// The name of an experiment given without a file (a launch line and --set overrides only).
constexpr std::string_view kCommandLine = "(command line)";

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
                            "delay_wgrad_compute"};
const Keys kTrainingKeys = {"micro_batch_size",    "global_batch_size", "precision",
                            "fp8_recipe",          "attention",         "moe_expert_load_skew",
                            "moe_expert_load_seed"};
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
const Keys kRunKeys = {
    "engine", "trace_ranks",   "output",          "coalesce_local_ops", "partition",
    "on_oom", "sandbox_ranks", "sandbox_backend", "sandbox_op_scale",   "calibrate_from_sandbox",
    "p2p",    "replicas"};

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
                                    "sdpa", "pytorch", "pytorch_args", "pytorch_blocks",
                                    "pytorch_tp_plan", "pytorch_factory"});
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

std::string display(const fs::path& p) {
  return p.lexically_normal().string();
}

/// Parses a whole YAML file; `what` names it in messages ("experiment file", "model preset").
YAML::Node parse_file(const fs::path& p, std::string_view what) {
  std::ifstream in(p);
  if (!in) throw_input("{}: cannot open {}", display(p), what);
  try {
    return YAML::Load(in);
  } catch (const YAML::ParserException& e) {
    throw_input("{}:{}:{}: malformed YAML: {}", display(p), e.mark.line + 1, e.mark.column + 1,
                e.msg);
  }
}

/// Reads the mapping `map` as the keys of `section` (canonical names, null values dropped).
/// `preset` marks a preset file: a mapping of keys without a section header.
Section read_section(const YAML::Node& map, const Origin& origin, std::string_view section,
                     const Keys& allowed, bool preset) {
  Section s;
  if (map.IsNull()) return s;
  if (!map.IsMap())
    fail(Value{map, origin}, section,
         preset ? "a preset file must be a mapping of keys" : "expected a mapping of keys");
  Keys known = allowed;
  if (section == "parallel")
    for (const auto& [alias, name] : kParallelAliases) known.push_back(alias);
  for (const auto& kv : map) {
    const Value key_at{kv.first, origin};
    if (!kv.first.IsScalar()) fail(key_at, section, "keys must be plain names");
    const std::string& key = kv.first.Scalar();
    const std::string qualified = fmt::format("{}.{}", section, key);
    const std::string_view name = canonical(section, key, allowed);
    if (name.empty()) {
      std::string hint = detail::did_you_mean(key, known);
      if (preset && key == section)
        hint = " (a preset file holds the keys themselves, without a section header)";
      else if (preset && (key == "preset" || key == "hf_config"))
        hint = " (not allowed inside a preset file)";
      fail(key_at, qualified, "unknown key" + hint);
    }
    const std::string full = fmt::format("{}.{}", section, name);
    if (s.contains(name)) fail(key_at, full, "given twice");
    s.emplace(std::string(name), Value{kv.second, origin});
  }
  // A null value (`key:` or `key: ~`) means "not set": the default or the preset applies.
  std::erase_if(s, [](const auto& e) { return e.second.node.IsNull(); });
  return s;
}

/// Reads the experiment file into sections; its top-level `megatron_args:` string, if any, into
/// `launch_line`.
Tree read_experiment(const std::string& path, std::optional<Value>& launch_line) {
  if (!fs::is_regular_file(path)) throw_input("{}: experiment file not found", path);
  const YAML::Node root = parse_file(path, "experiment file");
  const Origin origin{path, "", true};
  Tree t;
  for (std::string_view s : kSections) t[std::string(s)];
  if (root.IsNull()) return t;
  if (!root.IsMap())
    fail(Value{root, origin}, "(top level)",
         "expected a mapping with sections model, parallel, training, cluster, run (and "
         "megatron_args)");
  std::map<std::string, bool, std::less<>> seen;
  for (const auto& kv : root) {
    const Value key_at{kv.first, origin};
    if (!kv.first.IsScalar()) fail(key_at, "(top level)", "section names must be plain names");
    const std::string& name = kv.first.Scalar();
    if (name == kLaunchLineKey) {
      if (seen[name]) fail(key_at, name, "given twice");
      if (!kv.second.IsNull()) launch_line = Value{kv.second, origin};
      seen[name] = true;
      continue;
    }
    if (name == kSweepKey || name == kWhatifKey) {
      if (seen[name]) fail(key_at, name, "given twice");
      seen[name] = true;
      continue;
    }
    if (std::find(kSections.begin(), kSections.end(), name) == kSections.end())
      fail(key_at, name,
           "unknown section" +
               detail::did_you_mean(name,
                                    concat(kSections, {kLaunchLineKey, kSweepKey, kWhatifKey})));
    if (seen[name]) fail(key_at, name, "section given twice");
    seen[name] = true;
    t[name] = read_section(kv.second, origin, name, section_keys(name), false);
  }
  return t;
}

/// One "section.key=value" override, checked: a known section and key (its canonical name) and
/// a value that parses as YAML (null: unset).
struct ParsedOverride {
  std::string section;
  std::string key;
  std::string subkey;  ///< cluster.topology.<subkey>: one key of that mapping
  YAML::Node value;
};

ParsedOverride parse_override(const std::string& text, const std::string& experiment) {
  const auto bad = [&](std::string_view what) {
    throw_input("{}: override '{}': {}", experiment, text, what);
  };
  const auto eq = text.find('=');
  if (eq == std::string::npos) bad("expected key.path=value");
  std::string path = text.substr(0, eq);
  path.erase(0, path.find_first_not_of(" \t"));
  path.erase(path.find_last_not_of(" \t") + 1);
  const auto dot = path.find('.');
  ParsedOverride o;
  // cluster.topology.<key>: one key of the topology mapping.
  constexpr std::string_view kTopologyPrefix = "cluster.topology.";
  if (path.rfind(kTopologyPrefix, 0) == 0) {
    o.subkey = path.substr(kTopologyPrefix.size());
    if (std::find(kTopologyKeys.begin(), kTopologyKeys.end(), o.subkey) == kTopologyKeys.end())
      bad(fmt::format("cluster.topology.{}: unknown key{}", o.subkey,
                      detail::did_you_mean(o.subkey, kTopologyKeys)));
    path.erase(path.size() - o.subkey.size() - 1);
  } else if (dot == std::string::npos || path.find('.', dot + 1) != std::string::npos) {
    bad(fmt::format("key '{}' must be section.key (e.g. parallel.tp=4)", path));
  }
  o.section = path.substr(0, dot);
  const std::string key = path.substr(dot + 1);
  if (std::find(kSections.begin(), kSections.end(), o.section) == kSections.end())
    bad(fmt::format("{}: unknown section{}", o.section,
                    detail::did_you_mean(o.section, kSections)));
  const Keys allowed = section_keys(o.section);
  const std::string_view name = canonical(o.section, key, allowed);
  if (name.empty()) {
    Keys known = allowed;
    if (o.section == "parallel")
      for (const auto& [alias, full] : kParallelAliases) known.push_back(alias);
    bad(fmt::format("{}.{}: unknown key{}", o.section, key, detail::did_you_mean(key, known)));
  }
  o.key = std::string(name);
  try {
    o.value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::ParserException& e) {
    bad(fmt::format("{}.{}: malformed YAML value: {}", o.section, o.key, e.msg));
  }
  return o;
}

/// Applies one "section.key=value" override; the value is parsed as YAML, empty means unset.
void apply_override(Tree& t, const std::string& text, const std::string& experiment) {
  ParsedOverride o = parse_override(text, experiment);
  Section& s = t[o.section];
  if (!o.subkey.empty()) {
    // One key of a mapping value: merged into what the file wrote (the preset's mapping is merged
    // under both in build_cluster).
    YAML::Node map(YAML::NodeType::Map);
    if (const auto it = s.find(o.key); it != s.end() && it->second.node.IsMap())
      map = YAML::Clone(it->second.node);
    if (o.value.IsNull())
      map.remove(o.subkey);
    else
      map[o.subkey] = o.value;
    s.insert_or_assign(o.key, Value{map, Origin{experiment, text, false}});
    return;
  }
  if (o.value.IsNull())
    s.erase(o.key);
  else
    s.insert_or_assign(o.key, Value{o.value, Origin{experiment, text, false}});
}

/// Directory against which a path written in `v` is resolved: the file's own directory, or the
/// current directory for a command-line override.
fs::path base_dir(const Value& v) {
  if (!v.origin.override_text.empty()) return fs::path{};
  return fs::path(v.origin.file).parent_path();
}

/// Finds preset `v` of `kind` ("models", "clusters"). A name is searched in
/// <experiment dir>/../<kind>/, <experiment dir>/, then the repository's inputs/<kind>/; a value
/// that looks like a path (has '/' or ends in .yaml/.yml) is taken as a file.
fs::path find_preset(const Value& v, std::string_view key, std::string_view kind,
                     const fs::path& experiment_dir) {
  const std::string name = detail::read_string(v, key);
  const fs::path as_path(name);
  const std::string ext = as_path.extension().string();
  if (name.find('/') != std::string::npos || ext == ".yaml" || ext == ".yml") {
    const fs::path p = as_path.is_absolute() ? as_path : base_dir(v) / as_path;
    if (!fs::is_regular_file(p)) fail(v, key, fmt::format("preset file {} not found", display(p)));
    return p;
  }
  std::vector<fs::path> candidates = {experiment_dir / ".." / kind / (name + ".yaml"),
                                      experiment_dir / (name + ".yaml")};
#ifdef SCALESCOPE_SOURCE_DIR
  candidates.push_back(fs::path(SCALESCOPE_SOURCE_DIR) / "inputs" / kind / (name + ".yaml"));
#endif
  std::vector<std::string> tried;
  for (const fs::path& c : candidates) {
    if (fs::is_regular_file(c)) return c;
    tried.push_back(display(c));
  }
  fail(v, key, fmt::format("no preset '{}' (looked for {})", name, fmt::join(tried, ", ")));
}

/// Reads a preset file of `section` (a mapping of the keys, without the section header).
Section read_preset(const fs::path& p, std::string_view section, const Keys& allowed) {
  const YAML::Node n = parse_file(p, fmt::format("{} preset", section));
  return read_section(n, Origin{display(p), "", true}, section, allowed, true);
}

const Value* get(const Section& s, std::string_view key) {
  const auto it = s.find(key);
  return it == s.end() ? nullptr : &it->second;
}

/// Reads merged section values with messages that name the key as "section.key".
class Reader {
 public:
  Reader(const Section& s, std::string_view section) : s_(s), section_(section) {}
  std::string key(std::string_view k) const { return fmt::format("{}.{}", section_, k); }
  const Value* find(std::string_view k) const { return get(s_, k); }
  void positive(std::string_view k, std::int64_t& out) const {
    if (const Value* v = find(k)) out = detail::read_positive_int(*v, key(k));
  }
  void flag(std::string_view k, bool& out) const {
    if (const Value* v = find(k)) out = detail::read_bool(*v, key(k));
  }
  void text(std::string_view k, std::string& out) const {
    if (const Value* v = find(k)) out = detail::read_string(*v, key(k));
  }
  /// A double ≥ lo (> lo when `strictly_above`), and < `hi_open` when given.
  void number(std::string_view k, double& out, double lo, bool strictly_above,
              std::optional<double> hi_open = std::nullopt) const {
    const Value* v = find(k);
    if (v == nullptr) return;
    const double x = detail::read_double(*v, key(k));
    if (strictly_above ? x <= lo : x < lo)
      fail(*v, key(k),
           fmt::format("must be {} {}, got {}", strictly_above ? ">" : ">=", lo, v->node.Scalar()));
    if (hi_open && x >= *hi_open)
      fail(*v, key(k), fmt::format("must be < {}, got {}", *hi_open, v->node.Scalar()));
    out = x;
  }
  std::string choice(std::string_view k, const Keys& allowed, std::string fallback) const {
    const Value* v = find(k);
    return v ? detail::read_choice(*v, key(k), allowed) : fallback;
  }

 private:
  const Section& s_;
  std::string_view section_;
};

/// Megatron's --moe-layer-freq: an int N (layer l is MoE when l % N == 0), a list of 0/1 per
/// layer, or Megatron's pattern string "([0]*3+[1]*58)". Absent: every layer.
std::vector<std::uint8_t> moe_layer_pattern(const Value* v, std::int64_t layers,
                                            const std::string& experiment) {
  const std::string key = "model.moe_layer_freq";
  std::vector<std::uint8_t> pattern;
  const auto n = static_cast<std::size_t>(layers);
  if (v == nullptr) return std::vector<std::uint8_t>(n, 1);
  const auto bit = [&](std::int64_t x) {
    if (x != 0 && x != 1) fail(*v, key, fmt::format("pattern entries must be 0 or 1, got {}", x));
    return static_cast<std::uint8_t>(x);
  };
  if (v->node.IsSequence()) {
    for (const auto& e : v->node)
      pattern.push_back(bit(detail::read_int(Value{e, v->origin}, key)));
  } else {
    const std::string text = detail::read_string(*v, key);
    if (text.find('[') == std::string::npos) {
      const std::int64_t freq = detail::read_positive_int(*v, key);
      for (std::int64_t l = 0; l < layers; ++l) pattern.push_back(l % freq == 0 ? 1 : 0);
      return pattern;
    }
    // "([a]*n+[b]*m+[c, d])": terms joined by '+', each a bracketed list times an optional count.
    std::string body;
    for (char c : text)
      if (c != ' ' && c != '(' && c != ')') body += c;
    std::size_t i = 0;
    while (i < body.size()) {
      if (body[i] != '[') fail(*v, key, fmt::format("cannot read pattern '{}'", text));
      const std::size_t close = body.find(']', i);
      if (close == std::string::npos) fail(*v, key, fmt::format("unclosed '[' in '{}'", text));
      std::vector<std::uint8_t> items;
      std::stringstream list(body.substr(i + 1, close - i - 1));
      for (std::string item; std::getline(list, item, ',');) {
        try {
          items.push_back(bit(std::stoll(item)));
        } catch (const std::logic_error&) {
          fail(*v, key, fmt::format("cannot read '{}' in pattern '{}'", item, text));
        }
      }
      i = close + 1;
      std::int64_t times = 1;
      if (i < body.size() && body[i] == '*') {
        std::size_t end = body.find('+', i);
        if (end == std::string::npos) end = body.size();
        try {
          times = std::stoll(body.substr(i + 1, end - i - 1));
        } catch (const std::logic_error&) {
          fail(*v, key, fmt::format("cannot read the repeat count in '{}'", text));
        }
        i = end;
      }
      for (std::int64_t r = 0; r < times; ++r)
        pattern.insert(pattern.end(), items.begin(), items.end());
      if (i < body.size()) {
        if (body[i] != '+') fail(*v, key, fmt::format("cannot read pattern '{}'", text));
        ++i;
      }
    }
  }
  if (pattern.size() != n)
    fail(*v, key,
         fmt::format("the pattern has {} entries, model.num_layers is {}", pattern.size(), layers));
  if (std::find(pattern.begin(), pattern.end(), 1) == pattern.end())
    throw_input("{}: {}: no layer is MoE", experiment, key);
  return pattern;
}

struct ModelSources {
  std::string preset;     ///< preset name, if any
  std::string hf_config;  ///< config.json path, if any
};

/// The model: `megatron_defaults` (a launch line was given) starts from Megatron-LM's defaults
/// where they differ from scalescope's; then the preset, the HF config, the inline keys.
/// model.pytorch: `file.py:Class` captured on first use (scripts/capture/capture.py) into the
/// user's cache, keyed by the module file, its arguments, the capture script and the shapes; the
/// path of the capture. The capture is written to a temporary name and renamed, so concurrent
/// first uses (every MPI rank) each find a whole file.
std::string pytorch_capture(const Section& inline_keys, const Value& v, const Section& merged,
                            std::int64_t micro_batch, bool factory) {
  const std::string key = factory ? "model.pytorch_factory" : "model.pytorch";
  const std::string spec = detail::read_string(v, key);
  const auto colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size())
    fail(v, key,
         factory ? "expected path/to/file.py:FUNCTION" : "expected path/to/file.py:ClassName");
  const fs::path file = fs::path(spec.substr(0, colon)).is_absolute()
                            ? fs::path(spec.substr(0, colon))
                            : base_dir(v) / spec.substr(0, colon);
  if (!fs::is_regular_file(file)) fail(v, key, fmt::format("file {} not found", display(file)));
  std::string args;
  if (const Value* a = get(inline_keys, "pytorch_args")) {
    const std::string f = detail::read_string(*a, "model.pytorch_args");
    const fs::path p = fs::path(f).is_absolute() ? fs::path(f) : base_dir(*a) / f;
    if (!fs::is_regular_file(p))
      fail(*a, "model.pytorch_args", fmt::format("file {} not found", display(p)));
    args = fs::absolute(p).string();
  }
  std::string blocks;  // empty: capture.py finds the block list in the module tree
  if (const Value* b = get(inline_keys, "pytorch_blocks"))
    blocks = detail::read_string(*b, "model.pytorch_blocks");
  const Value* seq = get(merged, "seq_length");
  if (seq == nullptr) fail(v, key, "needs model.seq_length (or a preset with one)");
  const std::int64_t s = detail::read_positive_int(*seq, "model.seq_length");
  const fs::path script = fs::path(SCALESCOPE_SOURCE_DIR) / "scripts" / "capture" / "capture.py";
  // FNV-1a over everything the capture depends on.
  std::uint64_t h = 1469598103934665603ull;
  const auto mix = [&](const std::string& bytes) {
    for (unsigned char ch : bytes) h = (h ^ ch) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  const auto contents = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  mix(contents(file));
  mix(args.empty() ? std::string() : contents(args));
  mix(contents(script));
  mix(fmt::format("{}|{}|{}|{}|{}", spec.substr(colon + 1), blocks, s, micro_batch, factory));
  const char* env = std::getenv("SCALESCOPE_CACHE");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path dir = env != nullptr ? fs::path(env)
                       : xdg != nullptr
                           ? fs::path(xdg) / "scalescope"
                           : fs::path(home != nullptr ? home : "/tmp") / ".cache" / "scalescope";
  const fs::path out = dir / "captures" / fmt::format("{:016x}.capture.h5", h);
  if (fs::is_regular_file(out)) return out.string();
  std::error_code ec;
  fs::create_directories(out.parent_path(), ec);
  const fs::path tmp = out.string() + fmt::format(".tmp{}", static_cast<long>(::getpid()));
  std::string cmd =
      fmt::format("/usr/bin/python3 '{}' {}'{}:{}' --seq {} --batch {} -o '{}' >&2",
                  script.string(), factory ? "--factory " : "", fs::absolute(file).string(),
                  spec.substr(colon + 1), s, micro_batch, tmp.string());
  if (!blocks.empty()) cmd += fmt::format(" --blocks '{}'", blocks);
  if (!args.empty()) cmd += fmt::format(" --args '{}'", args);
  const int rc = std::system(cmd.c_str());
  if (rc != 0 || !fs::is_regular_file(tmp)) {
    fs::remove(tmp, ec);
    fail(v, key,
         fmt::format("capturing {} failed (capture.py exit {})", spec,
                     WIFEXITED(rc) ? WEXITSTATUS(rc) : rc));
  }
  fs::rename(tmp, out, ec);
  if (ec && !fs::is_regular_file(out))
    fail(v, key, fmt::format("cannot store the capture in {}", display(out)));
  return out.string();
}

workload::ModelSpec build_model(const Section& inline_keys, const std::string& experiment,
                                ModelSources& sources, bool megatron_defaults,
                                std::int64_t micro_batch) {
  const fs::path experiment_dir = fs::path(experiment).parent_path();
  Section merged;
  if (megatron_defaults)
    for (const auto& kv : detail::megatron_model_defaults())
      merged.insert_or_assign(kv.first.Scalar(),
                              Value{kv.second, Origin{"(Megatron-LM default)", "", false}});
  if (const Value* v = get(inline_keys, "preset")) {
    const fs::path p = find_preset(*v, "model.preset", "models", experiment_dir);
    for (auto& [k, pv] : read_preset(p, "model", kModelShapeKeys)) merged.insert_or_assign(k, pv);
    sources.preset = v->node.Scalar();
  }
  if (const Value* v = get(inline_keys, "hf_config")) {
    const std::string file = detail::read_string(*v, "model.hf_config");
    const fs::path p = fs::path(file).is_absolute() ? fs::path(file) : base_dir(*v) / file;
    if (!fs::is_regular_file(p))
      fail(*v, "model.hf_config", fmt::format("file {} not found", display(p)));
    sources.hf_config = display(p);
    const YAML::Node hf = detail::hf_model_keys(sources.hf_config);
    for (const auto& kv : hf)
      merged.insert_or_assign(kv.first.Scalar(),
                              Value{kv.second, Origin{sources.hf_config, "", false}});
  }
  for (const auto& [k, v] : inline_keys)
    if (k != "preset" && k != "hf_config" && k != "source" && k != "tp_plan" && k != "compile" &&
        k != "sdpa" && k != "outer" && k.rfind("pytorch", 0) != 0)
      merged.insert_or_assign(k, v);

  // A captured model (docs/flint.md): its block replaces the built-in layer; the shape keys it
  // implies fill in what the preset / inline keys leave open, and must agree with them.
  std::shared_ptr<const workload::Capture> capture;
  std::string capture_layers_note;
  std::string capture_path;
  const Value* pytorch = get(inline_keys, "pytorch");
  const Value* factory = get(inline_keys, "pytorch_factory");
  if (pytorch != nullptr && factory != nullptr)
    fail(*factory, "model.pytorch_factory",
         "give model.pytorch or model.pytorch_factory, not both");
  if (pytorch == nullptr) pytorch = factory;
  if (pytorch != nullptr && get(inline_keys, "source") != nullptr)
    fail(*pytorch, "model.pytorch", "give model.source or model.pytorch, not both");
  for (const char* k : {"pytorch_args", "pytorch_blocks"})
    if (const Value* x = get(inline_keys, k); x != nullptr && pytorch == nullptr)
      fail(*x, std::string("model.") + k, "applies to model.pytorch only");
  if (const Value* x = get(inline_keys, "pytorch_args"); x != nullptr && factory != nullptr)
    fail(*x, "model.pytorch_args", "applies to model.pytorch (a class), not to a factory");
  if (pytorch != nullptr)
    capture_path = pytorch_capture(inline_keys, *pytorch, merged, micro_batch, pytorch == factory);
  if (const Value* v = get(inline_keys, "source")) {
    const std::string file = detail::read_string(*v, "model.source");
    const fs::path p = fs::path(file).is_absolute() ? fs::path(file) : base_dir(*v) / file;
    if (!fs::is_regular_file(p))
      fail(*v, "model.source", fmt::format("capture {} not found", display(p)));
    capture_path = fs::absolute(p).lexically_normal().string();
  }
  if (!capture_path.empty()) {
    capture = std::make_shared<const workload::Capture>(io::read_capture_h5(capture_path));
    const Origin from{capture_path, "", false};
    // The shapes the capture shows (docs/flint.md "Shapes from the capture") fill what the
    // experiment leaves open and must agree with what it gives; num_layers may differ (the
    // captured block repeated another number of times, said in the output).
    const workload::CaptureShapes shapes = workload::capture_shapes(*capture);
    std::vector<std::pair<const char*, std::int64_t>> ints = {
        {"num_layers", capture->num_blocks},       {"seq_length", capture->seq},
        {"vocab_size", capture->vocab_size},       {"hidden_size", shapes.hidden},
        {"num_attention_heads", shapes.heads},     {"kv_channels", shapes.head_dim},
        {"num_query_groups", shapes.query_groups}, {"ffn_hidden_size", shapes.ffn}};
    for (const auto& [key, value] : ints) {
      if (value <= 0) continue;  // the capture cannot tell
      if (const Value* given = get(merged, key)) {
        const std::int64_t g = detail::read_positive_int(*given, std::string("model.") + key);
        if (g == value) continue;
        if (std::string_view(key) == "num_layers") {
          capture_layers_note = fmt::format(
              "model.num_layers {} repeats the captured block of {} ({} blocks in the capture)", g,
              capture_path, value);
          continue;
        }
        fail(*given, std::string("model.") + key,
             fmt::format("disagrees with the capture {} ({})", capture_path, value));
      } else {
        merged.insert_or_assign(key, Value{YAML::Node(value), from});
      }
    }
    for (const auto& [key, value] : {std::pair{"gated_linear_unit", shapes.gated},
                                     std::pair{"add_bias_linear", shapes.bias}}) {
      if (!value || get(merged, key) != nullptr) continue;
      merged.insert_or_assign(key, Value{YAML::Node(*value), from});
    }
    if (shapes.learned_positions && get(merged, "position_embedding_type") == nullptr)
      merged.insert_or_assign(
          "position_embedding_type",
          Value{YAML::Node(*shapes.learned_positions ? "learned_absolute" : "rope"), from});
    // Tied or untied output layer, as the capture's outer graph has it (the tied embedding's
    // gradients are all-reduced between the first and last stage under PP).
    if (const std::optional<bool> tied = workload::capture_ties_embeddings(*capture)) {
      if (const Value* given = get(merged, "untie_embeddings")) {
        if (detail::read_bool(*given, "model.untie_embeddings") == *tied)
          fail(*given, "model.untie_embeddings",
               fmt::format("disagrees with the capture {} (its output layer is {}tied to the "
                           "embedding)",
                           capture_path, *tied ? "" : "not "));
      } else {
        merged.insert_or_assign("untie_embeddings", Value{YAML::Node(!*tied), from});
      }
    }
  }

  workload::ModelSpec m;
  if (!sources.preset.empty()) m.name = sources.preset;
  const Reader r(merged, "model");
  r.text("name", m.name);
  r.positive("num_layers", m.num_layers);
  r.positive("hidden_size", m.hidden_size);
  r.positive("ffn_hidden_size", m.ffn_hidden_size);
  r.positive("num_attention_heads", m.num_attention_heads);
  r.positive("num_query_groups", m.num_query_groups);
  r.positive("kv_channels", m.kv_channels);
  r.positive("vocab_size", m.vocab_size);
  r.positive("make_vocab_size_divisible_by", m.make_vocab_size_divisible_by);
  r.positive("seq_length", m.seq_length);
  r.flag("gated_linear_unit", m.gated_linear_unit);
  r.flag("untie_embeddings", m.untie_embeddings);
  r.flag("add_bias_linear", m.add_bias_linear);
  r.flag("add_qkv_bias", m.add_qkv_bias);
  r.flag("qk_layernorm", m.qk_layernorm);
  if (const Value* v = r.find("mtp_num_layers")) {
    m.mtp_num_layers = detail::read_int(*v, r.key("mtp_num_layers"));
    if (m.mtp_num_layers < 0) fail(*v, r.key("mtp_num_layers"), "must be >= 0");
  }
  r.number("hidden_dropout", m.hidden_dropout, 0.0, false, 1.0);
  r.number("attention_dropout", m.attention_dropout, 0.0, false, 1.0);
  m.position_embedding_type =
      r.choice("position_embedding_type", {"rope", "learned_absolute"}, "rope") == "rope"
          ? workload::PositionEmbedding::Rope
          : workload::PositionEmbedding::LearnedAbsolute;
  r.positive("num_experts", m.num_experts);
  r.positive("moe_router_topk", m.moe_router_topk);
  r.positive("moe_ffn_hidden_size", m.moe_ffn_hidden_size);
  if (const Value* v = r.find("moe_shared_expert_intermediate_size"))
    m.moe_shared_expert_intermediate_size =
        detail::read_int(*v, r.key("moe_shared_expert_intermediate_size"));
  r.number("moe_expert_capacity_factor", m.moe_expert_capacity_factor, 0.0, false);
  r.positive("moe_router_num_groups", m.moe_router_num_groups);
  r.positive("moe_router_group_topk", m.moe_router_group_topk);
  r.flag("multi_latent_attention", m.multi_latent_attention);
  if (const Value* v = r.find("q_lora_rank"))
    m.q_lora_rank = detail::read_int(*v, r.key("q_lora_rank"));  // 0 = no query compression
  r.positive("kv_lora_rank", m.kv_lora_rank);
  r.positive("qk_head_dim", m.qk_head_dim);
  r.positive("qk_pos_emb_head_dim", m.qk_pos_emb_head_dim);
  r.positive("v_head_dim", m.v_head_dim);
  for (const char* k :
       {"moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
        "moe_layer_freq", "moe_expert_capacity_factor", "moe_router_num_groups",
        "moe_router_group_topk"})
    if (const Value* v = r.find(k); v && m.num_experts == 0)
      fail(*v, r.key(k), "applies to MoE models only (set model.num_experts)");
  for (const char* k :
       {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"})
    if (const Value* v = r.find(k); v && !m.multi_latent_attention)
      fail(*v, r.key(k),
           "applies to multi-latent attention only (set "
           "model.multi_latent_attention: true)");
  // Required after merging; checked after the reads so that a bad value is reported first.
  for (std::string_view k :
       {"num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length"})
    if (!r.find(k)) {
      // A launch line's tokenizer options are not read: the vocabulary must be given.
      const std::string option = k == "vocab_size"
                                     ? std::string("--vocab-size or --padded-vocab-size")
                                     : std::string(detail::megatron_option_for("model", k));
      throw_input(
          "{}: model.{} is required (set it inline, through model.preset or model.hf_config{})",
          experiment, k,
          megatron_defaults ? fmt::format(", or with {} on the launch line", option) : "");
    }
  // Megatron: with --swiglu and no --ffn-hidden-size, the MLP keeps ~8h/3 columns rounded down
  // to a multiple of 64, so that it has the parameters of a 4h GELU MLP.
  if (megatron_defaults && !r.find("ffn_hidden_size") && m.gated_linear_unit)
    m.ffn_hidden_size = detail::megatron_swiglu_ffn_hidden_size(m.hidden_size);

  // Megatron: kv_channels defaults to hidden_size // num_attention_heads and asserts that it
  // divides; GQA needs whole groups of query heads (arguments.py, TransformerConfig).
  if (m.kv_channels == 0 && m.hidden_size % m.num_attention_heads != 0)
    throw_input(
        "{}: model.num_attention_heads={} does not divide model.hidden_size={} (set "
        "model.kv_channels)",
        experiment, m.num_attention_heads, m.hidden_size);
  if (m.num_attention_heads % m.query_groups() != 0)
    throw_input("{}: model.num_query_groups={} does not divide model.num_attention_heads={}",
                experiment, m.query_groups(), m.num_attention_heads);
  if (m.moe()) {
    if (m.moe_router_topk > m.num_experts) {
      const std::string what =
          fmt::format("{} exceeds model.num_experts={}", m.moe_router_topk, m.num_experts);
      if (const Value* v = r.find("moe_router_topk")) fail(*v, r.key("moe_router_topk"), what);
      throw_input("{}: model.moe_router_topk={}", experiment, what);
    }
    if (m.moe_shared_expert_intermediate_size < 0)
      throw_input("{}: model.moe_shared_expert_intermediate_size must be >= 0", experiment);
    // Megatron's checks (router.py group_limited_topk): both or neither, whole groups, at most
    // all of them.
    if ((m.moe_router_num_groups > 0) != (m.moe_router_group_topk > 0))
      throw_input(
          "{}: model.moe_router_num_groups and model.moe_router_group_topk go together "
          "(group-limited routing)",
          experiment);
    if (m.moe_router_num_groups > 0 && (m.num_experts % m.moe_router_num_groups != 0 ||
                                        m.moe_router_group_topk > m.moe_router_num_groups))
      throw_input(
          "{}: model.moe_router_num_groups={} must divide model.num_experts={} and be at least "
          "model.moe_router_group_topk={}",
          experiment, m.moe_router_num_groups, m.num_experts, m.moe_router_group_topk);
    m.moe_layer_pattern = moe_layer_pattern(r.find("moe_layer_freq"), m.num_layers, experiment);
    m.moe_ffn_hidden_size = m.expert_ffn();
  }
  if (m.q_lora_rank < 0) throw_input("{}: model.q_lora_rank must be >= 0", experiment);
  if (capture) {
    m.capture = capture;
    m.capture_path = capture_path;
    m.capture_note = capture_layers_note;
    // The tensor-parallel plan (docs/flint.md "Tensor-parallel plans"): model.pytorch_tp_plan
    // (parallelize_module styles by module pattern), a shipped plan by name (model.tp_plan), the
    // one the model file declares, else one inferred from the captured graph.
    const Value* plan = get(inline_keys, "tp_plan");
    const Value* torch_plan = get(inline_keys, "pytorch_tp_plan");
    if (plan != nullptr && torch_plan != nullptr)
      fail(*torch_plan, "model.pytorch_tp_plan",
           "give model.pytorch_tp_plan or model.tp_plan, not both");
    if (torch_plan != nullptr) {
      if (!torch_plan->node.IsMap() || torch_plan->node.size() == 0)
        fail(*torch_plan, "model.pytorch_tp_plan",
             "expected a mapping of module patterns to parallelize_module styles "
             "(ColwiseParallel, RowwiseParallel, SequenceParallel, PrepareModuleInput)");
      for (const auto& kv : torch_plan->node) {
        const std::string pattern = kv.first.as<std::string>();
        const std::string given = kv.second.IsScalar() ? kv.second.as<std::string>() : "";
        const std::string style = workload::tp_style(given);
        if (style.empty())
          fail(*torch_plan, "model.pytorch_tp_plan." + pattern,
               fmt::format("'{}' is not a parallelize_module style (ColwiseParallel, "
                           "RowwiseParallel, SequenceParallel, PrepareModuleInput)",
                           given));
        m.capture_plan.rules.emplace_back(pattern, style);
      }
      m.capture_plan.source = "model.pytorch_tp_plan";
    } else if (plan != nullptr) {
      const std::string name = detail::read_choice(*plan, "model.tp_plan", {"llama", "gpt"});
      m.capture_plan = name == "gpt" ? workload::gpt_tp_plan() : workload::llama_tp_plan();
      m.capture_plan.source = "model.tp_plan: " + name;
      m.capture_plan_name = name;
    } else {
      m.capture_plan = workload::capture_default_plan(*capture, capture_path);
    }
    if (const Value* mode = get(inline_keys, "compile")) {
      const std::string c =
          detail::read_choice(*mode, "model.compile", {"inductor", "eager", "blocks"});
      m.capture_compiled = c != "eager";
      m.capture_outer_compiled = c == "inductor";
    }
    if (const Value* outer = get(inline_keys, "outer"))
      m.capture_outer =
          detail::read_choice(*outer, "model.outer", {"captured", "builder"}) == "captured";
    if (const Value* sdpa = get(inline_keys, "sdpa"))
      m.capture_sdpa_flash =
          detail::read_choice(*sdpa, "model.sdpa", {"flash", "cudnn"}) == "flash";
  } else if (const Value* sdpa = get(inline_keys, "sdpa")) {
    fail(*sdpa, "model.sdpa",
         "applies to a captured model only (set model.source or model.pytorch)");
  } else if (const Value* plan = get(inline_keys, "tp_plan")) {
    fail(*plan, "model.tp_plan",
         "applies to a captured model only (set model.source or model.pytorch)");
  } else if (const Value* mode = get(inline_keys, "compile")) {
    fail(*mode, "model.compile",
         "applies to a captured model only (set model.source or model.pytorch)");
  } else if (const Value* outer = get(inline_keys, "outer")) {
    fail(*outer, "model.outer",
         "applies to a captured model only (set model.source or model.pytorch)");
  }
  // Resolve the "0 → derived" defaults so the spec and the emitted YAML say the same.
  m.ffn_hidden_size = m.ffn();
  m.num_query_groups = m.query_groups();
  m.kv_channels = m.head_dim();
  return m;
}

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
    if (!v->node.IsSequence())
      fail(*v, key, "expected a list of submodules, e.g. [core_attn, moe_act, layernorm]");
    p.recompute_modules = 0;
    for (const YAML::Node& e : v->node) {
      const std::string name = e.IsScalar() ? e.Scalar() : std::string();
      std::uint8_t bit = 0;
      for (const auto& [b, n] : kRecomputeModules)
        if (name == n) bit = b;
      if (bit == 0)
        fail(*v, key,
             fmt::format("'{}' is not a submodule (core_attn, moe_act, layernorm, mla_up_proj, "
                         "mlp, moe, shared_experts)",
                         name));
      p.recompute_modules |= bit;
    }
  }
  r.flag("use_distributed_optimizer", p.use_distributed_optimizer);
  p.schedule = r.choice("schedule", {"1f1b", "gpipe"}, "1f1b") == "gpipe"
                   ? workload::Schedule::GPipe
                   : workload::Schedule::OneFOneB;
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
  r.positive("fsdp_shard_size", p.fsdp_shard_size);
  r.positive("decoder_first_pipeline_num_layers", p.decoder_first_pipeline_num_layers);
  r.positive("decoder_last_pipeline_num_layers", p.decoder_last_pipeline_num_layers);
  r.positive("expert_model_parallel_size", p.expert_model_parallel_size);
  r.positive("expert_tensor_parallel_size", p.expert_tensor_parallel_size);
  r.flag("moe_shared_expert_overlap", p.moe_shared_expert_overlap);
  r.flag("moe_a2a_overlap", p.moe_a2a_overlap);
  r.flag("delay_wgrad_compute", p.delay_wgrad_compute);
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
  const std::string precision = r.choice("precision", {"bf16", "fp16", "fp8"}, "bf16");
  t.precision = precision == "fp16"  ? workload::Precision::Fp16
                : precision == "fp8" ? workload::Precision::Fp8
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
  if (const Value* v = r.find("moe_expert_load_seed"))
    t.moe_expert_load_seed = detail::read_int(*v, r.key("moe_expert_load_seed"));
  return t;
}

RunSpec build_run(const Section& s) {
  RunSpec run;
  const Reader r(s, "run");
  run.engine = r.choice("engine", {"sequential", "optimistic"}, run.engine);
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
  if (p.fp8_param_gather && (c.training.precision != workload::Precision::Fp8 ||
                             (m.capture ? p.zero() < 3 : (p.zero() < 1 || p.zero() > 2))))
    throw_input(
        "{}: parallel.fp8_param_gather needs training.precision: fp8, and the distributed "
        "optimizer on a built-in model (Megatron's --fp8-param-gather) or FSDP on a captured "
        "one (torchao's enable_fsdp_float8_all_gather)",
        f);
  if (p.zero() >= 3 && pp > 1)
    throw_input(
        "{}: parallel.zero_stage=3 / fsdp with pipeline_model_parallel_size > 1 is not modelled "
        "(Megatron-FSDP's pipeline variant); use pipeline_model_parallel_size: 1",
        f);
  if (p.zero() >= 3 && p.overlap_param_gather)
    throw_input(
        "{}: parallel.overlap_param_gather is the distributed optimizer's gather; ZeRO-3 / fsdp "
        "gathers per layer (omit overlap_param_gather)",
        f);
  if (p.overlap_param_gather && !p.overlap_grad_reduce)
    throw_input("{}: parallel.overlap_param_gather requires parallel.overlap_grad_reduce", f);
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
        "single partial node is allowed)",
        f, cl.num_gpus, cl.gpus_per_node);

  // Mixture of experts (Megatron arguments.py and parallel_state.py rules).
  const Tree::mapped_type& par = t.at("parallel");
  if (!m.moe()) {
    // Any of them on a dense model names itself, except an expert size of 1.
    for (const char* k :
         {"expert_model_parallel_size", "expert_tensor_parallel_size", "moe_token_dispatcher_type",
          "moe_shared_expert_overlap", "moe_a2a_overlap", "delay_wgrad_compute"}) {
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
    if (tp > 1 && !p.sequence_parallel)
      throw_input(
          "{}: MoE with tensor_model_parallel_size={} needs parallel.sequence_parallel: true "
          "(Megatron: 'When using MoE and tensor parallelism, sequence parallelism must be used')",
          f, tp);
    if (p.zero() >= 2)
      throw_input(
          "{}: parallel.zero_stage={} with MoE is not modelled (expert parameters shard over the "
          "expert-data-parallel group); use the distributed optimizer (ZeRO-1)",
          f, p.zero());
    // --overlap-moe-expert-parallel-comm: Megatron's TransformerConfig asserts, and what the
    // combined 1F1B schedule here covers (docs/model.md "EP overlap").
    if (const Value* v = get(par, "moe_a2a_overlap"); v && p.moe_a2a_overlap) {
      const auto need = [&](bool ok, const char* why) {
        if (!ok) fail(*v, "parallel.moe_a2a_overlap", why);
      };
      need(ep > 1, "needs expert_model_parallel_size > 1 (Megatron asserts)");
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
    refuse(m.multi_latent_attention, "MLA shape keys");
    if (m.moe()) {
      // The capture's experts are the model's: EP lowers them (balanced routing).
      const std::int64_t captured = workload::capture_experts(*m.capture);
      if (captured != m.num_experts)
        throw_input("{}: model.num_experts={} but the capture {} has {} experts", f, m.num_experts,
                    m.capture_path, captured);
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
  if (tr.precision == workload::Precision::Fp8 && cost::find_gpu(cl.gpu).peak_tflops_fp8 <= 0)
    throw_input("{}: training.precision=fp8 needs fp8 tensor cores, which cluster.gpu={} lacks", f,
                cl.gpu);
  // HSDP: the shard groups tile DP × CP.
  if (p.fsdp_shard_size > 0 && (p.dp_cp() % p.fsdp_shard_size != 0))
    throw_input(
        "{}: parallel.fsdp_shard_size={} does not divide data_parallel_size·"
        "context_parallel_size={}",
        f, p.fsdp_shard_size, p.dp_cp());
  // Megatron-Core's forward_backward_pipelining_with_interleaving rules.
  if (p.interleaved()) {
    const std::int64_t mbs = tr.num_microbatches(p.dp());
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
    if (!m.capture_plan_name.empty()) {
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
      << (p.schedule == workload::Schedule::GPipe ? "gpipe" : "1f1b");
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
  }
  out << YAML::EndMap;

  const auto& t = c.training;
  out << YAML::Key << "training" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "micro_batch_size" << YAML::Value << t.micro_batch_size;
  out << YAML::Key << "global_batch_size" << YAML::Value << t.global_batch_size;
  out << YAML::Key << "precision" << YAML::Value
      << (t.precision == workload::Precision::Fp16  ? "fp16"
          : t.precision == workload::Precision::Fp8 ? "fp8"
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

}  // namespace

ExperimentConfig load_experiment(const std::string& path, const std::vector<std::string>& overrides,
                                 const std::string& megatron_args) {
  const std::string name = path.empty() ? std::string(kCommandLine) : path;
  std::optional<Value> file_line;
  Tree t;
  if (path.empty())
    for (std::string_view s : kSections) t[std::string(s)];
  else
    t = read_experiment(path, file_line);

  // Megatron-LM launch lines: the file's own, then the command line's, each over what came
  // before it; each sets only the keys of the options it contains.
  std::vector<std::pair<std::string, std::string>> lines;  // (label, text)
  if (file_line)
    lines.emplace_back(detail::where(*file_line, kLaunchLineKey),
                       detail::read_string(*file_line, kLaunchLineKey));
  if (!megatron_args.empty())
    lines.emplace_back(path.empty() ? std::string("--megatron-args") : path + ": --megatron-args",
                       megatron_args);
  std::optional<std::pair<std::int64_t, std::string>> layers_per_vstage;
  std::string launch_header;  // the lines are named in the resolved configuration's header
  for (const auto& [label, text] : lines) {
    const detail::LaunchLine line = detail::parse_megatron_args(text, label);
    launch_header += fmt::format("# megatron_args ({}): {}\n", label, fmt::join(line.words, " "));
    for (const detail::LaunchSetting& s : line.settings) {
      t[s.section].insert_or_assign(
          s.key, Value{s.value, Origin{fmt::format("{} '{}'", label, s.option), "", false}});
      if (s.key == "virtual_pipeline_model_parallel_size") layers_per_vstage.reset();
    }
    if (line.layers_per_virtual_stage > 0) {
      layers_per_vstage.emplace(
          line.layers_per_virtual_stage,
          fmt::format("{} '{}'", label, line.layers_per_virtual_stage_option));
      t["parallel"].erase("virtual_pipeline_model_parallel_size");
    }
  }
  // Overrides go into the tree before presets are resolved, so `cluster.preset=…` picks
  // another preset file while the experiment's own inline keys still win over it.
  for (const std::string& o : overrides) apply_override(t, o, name);
  if (const Value* v = get(t.at("parallel"), "virtual_pipeline_model_parallel_size");
      v != nullptr && !v->origin.override_text.empty())
    layers_per_vstage.reset();  // --set wins over the launch line

  ExperimentConfig c;
  c.path = name;
  ModelSources sources;
  std::int64_t micro_batch = 1;
  if (const Value* mb = get(t.at("training"), "micro_batch_size"))
    micro_batch = detail::read_positive_int(*mb, "training.micro_batch_size");
  c.model = build_model(t.at("model"), name, sources, !lines.empty(), micro_batch);
  // Megatron-LM's --moe-token-dispatcher-type defaults to allgather (arguments.py); scalescope's
  // own default is alltoall, what large-EP recipes set.
  if (!lines.empty() && c.model.moe() &&
      get(t.at("parallel"), "moe_token_dispatcher_type") == nullptr)
    t["parallel"].insert_or_assign(
        "moe_token_dispatcher_type",
        Value{YAML::Node("allgather"), Origin{"(Megatron-LM default)", "", false}});
  c.parallel = build_parallel(t.at("parallel"));
  if (layers_per_vstage) {
    auto& p = c.parallel;
    if (!p.layout_layers.empty())
      throw_input(
          "{}: {} and parallel.pipeline_layout both give the virtual stages (Megatron-LM: give "
          "one)",
          name, layers_per_vstage->second);
    p.virtual_pipeline_model_parallel_size = detail::megatron_virtual_stages(
        c.model.num_layers, p.pp(), layers_per_vstage->first,
        p.account_for_embedding_in_pipeline_split, p.account_for_loss_in_pipeline_split,
        p.decoder_first_pipeline_num_layers > 0 || p.decoder_last_pipeline_num_layers > 0,
        layers_per_vstage->second);
  }
  c.training = build_training(t.at("training"));
  if (!lines.empty() && get(t.at("training"), "precision") == nullptr)
    throw_input(
        "{}: training.precision: a Megatron-LM launch line without --bf16 or --fp16 trains in "
        "fp32, which scalescope does not model (add --bf16 or --fp16, or set training.precision)",
        name);
  if (!lines.empty() && get(t.at("cluster"), "preset") == nullptr &&
      get(t.at("cluster"), "gpu") == nullptr)
    throw_input(
        "{}: cluster.preset is required: a Megatron-LM launch line has no cluster (add a "
        "cluster: section or --set cluster.preset=dgx-h100 --set cluster.num_gpus=N)",
        name);
  c.cluster = build_cluster(t.at("cluster"), name);
  c.run = build_run(t.at("run"));
  c.network = build_network(t.at("network"));
  if (c.network.flow && c.run.p2p == "eager")
    throw_input(
        "{}: network.model: flow models rendezvous transfers only; set run.p2p: rendezvous "
        "(eager sends under the flow model are not modelled yet)",
        name);
  if (c.run.replicas == "representative" && c.network.flow)
    throw_input(
        "{}: run.replicas: representative needs the analytical network (the flow model shares "
        "links between replicas, so they do not replay alike); use run.replicas: all",
        name);
  if (c.run.replicas == "representative" && !c.run.sandbox_ranks.empty())
    throw_input(
        "{}: run.replicas: representative replays one replica as modelled; sandbox ranks measure "
        "their own durations (use run.replicas: all)",
        name);
  if (const Value* v = get(t.at("cost"), "profile")) {
    const std::string file = detail::read_string(*v, "cost.profile");
    const fs::path p = fs::path(file).is_absolute() ? fs::path(file) : base_dir(*v) / file;
    if (!fs::is_regular_file(p))
      fail(*v, "cost.profile", fmt::format("profile {} not found", display(p)));
    c.cost.profile = fs::absolute(p).lexically_normal().string();
  }
  check_plan(c, t);
  c.resolved_yaml = emit(c, sources);
  // The launch lines are merged in; like the presets, they are named in the header only.
  c.resolved_yaml.insert(c.resolved_yaml.find('\n') + 1, launch_header);
  return c;
}

void check_override(const std::string& text, const std::string& experiment) {
  parse_override(text, experiment.empty() ? std::string(kCommandLine) : experiment);
}

namespace {

/// One what-if: a mapping with one key, the kind, whose value maps its parameters.
emu::WhatIf parse_whatif(const Value& item, const std::string& text) {
  using Kind = emu::WhatIf::Kind;
  const std::vector<std::pair<std::string_view, Kind>> kinds = {
      {"slow_gpu", Kind::SlowGpu},
      {"degraded_nic", Kind::DegradedNic},
      {"failed_link", Kind::FailedLink},
      {"extra_latency", Kind::ExtraLatency},
      {"slow_dataloader", Kind::SlowDataLoader}};
  Keys names;
  for (const auto& k : kinds) names.push_back(k.first);
  if (!item.node.IsMap() || item.node.size() != 1)
    fail(item, "whatif",
         "each what-if is a mapping with one key: slow_gpu, degraded_nic, failed_link, "
         "extra_latency or slow_dataloader");
  const auto kv = *item.node.begin();
  const std::string kind = kv.first.Scalar();
  const auto it =
      std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == kind; });
  if (it == kinds.end())
    fail(item, "whatif",
         fmt::format("unknown what-if '{}'{}", kind, detail::did_you_mean(kind, names)));
  emu::WhatIf w;
  w.kind = it->second;
  w.text = text;
  const std::string key = fmt::format("whatif.{}", kind);
  const Value params{kv.second, item.origin};
  if (!kv.second.IsMap()) fail(params, key, "expected a mapping of its parameters");
  const std::map<Kind, Keys> allowed = {
      {Kind::SlowGpu, {"ranks", "nodes", "fraction", "seed", "factor"}},
      {Kind::DegradedNic, {"nodes", "factor"}},
      {Kind::FailedLink, {"leaf", "spine"}},
      {Kind::ExtraLatency, {"level", "us"}},
      {Kind::SlowDataLoader, {"ranks", "delay_us"}}};
  Section p;
  for (const auto& e : kv.second) {
    const std::string k = e.first.Scalar();
    const Keys& ok = allowed.at(w.kind);
    if (std::find(ok.begin(), ok.end(), k) == ok.end())
      fail(params, key + "." + k, "unknown key" + detail::did_you_mean(k, ok));
    p.insert_or_assign(k, Value{e.second, item.origin});
  }
  const auto list = [&](std::string_view k, std::vector<std::uint32_t>& out) {
    const auto f = p.find(k);
    if (f == p.end()) return;
    const Value& v = f->second;
    const std::string name = fmt::format("{}.{}", key, k);
    if (v.node.IsScalar()) {
      out.push_back(static_cast<std::uint32_t>(detail::read_int(v, name)));
    } else if (v.node.IsSequence()) {
      for (const auto& x : v.node) {
        const std::int64_t r = detail::read_int(Value{x, v.origin}, name);
        if (r < 0 || r > 0x7FFFFFFF) fail(v, name, "must be >= 0");
        out.push_back(static_cast<std::uint32_t>(r));
      }
    } else {
      fail(v, name, "expected a number or a list of numbers");
    }
  };
  const auto number = [&](std::string_view k, double& out) -> bool {
    const auto f = p.find(k);
    if (f == p.end()) return false;
    out = detail::read_double(f->second, fmt::format("{}.{}", key, k));
    return true;
  };
  const auto need = [&](bool ok, std::string_view what) {
    if (!ok) fail(params, key, std::string(what));
  };
  switch (w.kind) {
    case Kind::SlowGpu: {
      list("ranks", w.ranks);
      list("nodes", w.nodes);
      number("fraction", w.fraction);
      double seed = 0;
      if (number("seed", seed)) w.seed = static_cast<std::uint64_t>(seed);
      need(number("factor", w.factor) && w.factor > 0, "needs factor > 0 (compute time ×)");
      need(!w.ranks.empty() || !w.nodes.empty() || (w.fraction > 0 && w.fraction <= 1),
           "needs ranks, nodes or a fraction in (0, 1]");
      break;
    }
    case Kind::DegradedNic:
      list("nodes", w.nodes);
      need(!w.nodes.empty(), "needs nodes");
      need(number("factor", w.factor) && w.factor > 0 && w.factor <= 1,
           "needs factor in (0, 1] (the bandwidth kept)");
      break;
    case Kind::FailedLink: {
      double leaf = -1, spine = -1;
      need(number("leaf", leaf) && number("spine", spine) && leaf >= 0 && spine >= 0,
           "needs leaf and spine (indices >= 0)");
      w.leaf = static_cast<std::uint32_t>(leaf);
      w.spine = static_cast<std::uint32_t>(spine);
      break;
    }
    case Kind::ExtraLatency: {
      const auto f = p.find("level");
      need(f != p.end(), "needs level (nic, spine or core)");
      w.level = detail::read_choice(f->second, key + ".level", {"nic", "spine", "core"});
      need(number("us", w.latency_us) && w.latency_us >= 0, "needs us >= 0");
      break;
    }
    case Kind::SlowDataLoader:
      list("ranks", w.ranks);
      need(!w.ranks.empty(), "needs ranks");
      need(number("delay_us", w.delay_us) && w.delay_us >= 0, "needs delay_us >= 0");
      break;
  }
  return w;
}

/// A YAML node as one line of flow-style text.
std::string one_line(const YAML::Node& n) {
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

}  // namespace

std::vector<emu::WhatIf> read_whatifs(const std::string& path,
                                      const std::vector<std::string>& command_line) {
  std::vector<emu::WhatIf> out;
  if (!path.empty()) {
    const YAML::Node root = parse_file(path, "experiment file");
    const std::string k(kWhatifKey);
    if (root.IsMap() && root[k] && !root[k].IsNull()) {
      const Origin origin{path, "", true};
      if (!root[k].IsSequence())
        fail(Value{root[k], origin}, kWhatifKey, "expected a list of what-ifs");
      for (const auto& item : root[k])
        out.push_back(parse_whatif(Value{item, origin}, one_line(item)));
    }
  }
  for (const std::string& text : command_line) {
    YAML::Node n;
    try {
      n = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      throw_input("--whatif '{}': malformed YAML: {}", text, e.msg);
    }
    out.push_back(parse_whatif(
        Value{n, Origin{std::string(kCommandLine), "--whatif " + text, false}}, one_line(n)));
  }
  return out;
}

SweepSpec read_sweep_spec(const std::string& path) {
  SweepSpec spec;
  const YAML::Node root = parse_file(path, "experiment file");
  const std::string sweep_key(kSweepKey);
  if (!root.IsMap() || !root[sweep_key]) return spec;
  const Origin origin{path, "", true};
  const YAML::Node sweep = root[sweep_key];
  if (sweep.IsNull()) return spec;
  if (!sweep.IsMap()) fail(Value{sweep, origin}, kSweepKey, "expected a mapping (vary, search)");
  for (const auto& kv : sweep) {
    const std::string key = kv.first.Scalar();
    const Value at{kv.second, origin};
    const std::string qualified = fmt::format("sweep.{}", key);
    if (key == "search") {
      spec.search = detail::read_string(at, qualified);
    } else if (key == "vary") {
      if (!kv.second.IsMap())
        fail(at, qualified, "expected a mapping of section.key to a list of values");
      for (const auto& axis : kv.second) {
        const std::string name = axis.first.Scalar();
        const Value values{axis.second, origin};
        const std::string where_axis = fmt::format("sweep.vary.{}", name);
        if (!axis.second.IsSequence() || axis.second.size() == 0)
          fail(values, where_axis, "expected a non-empty list of values");
        explore::Axis a;
        a.name = name;
        for (const YAML::Node& v : axis.second) {
          // The value as --set would read it: its YAML text in flow style (null: unset).
          std::string text;
          if (!v.IsNull()) {
            YAML::Emitter e;
            e << YAML::Flow << v;
            text = e.c_str();
          }
          const std::string o = name + "=" + text;
          try {
            check_override(o, path);
          } catch (const InputError& err) {
            // fail() names the file, line and key; the override's own message names the file
            // again ("PATH: override '…': …"), so that prefix goes.
            std::string what = err.what();
            if (const std::string prefix = path + ": "; what.rfind(prefix, 0) == 0)
              what.erase(0, prefix.size());
            fail(values, where_axis, what);
          }
          a.values.push_back({o});
        }
        spec.axes.push_back(std::move(a));
      }
    } else {
      fail(Value{kv.first, origin}, qualified,
           "unknown key" + detail::did_you_mean(key, Keys{"vary", "search"}));
    }
  }
  return spec;
}

}  // namespace scalescope::io
