// Experiment configuration: YAML sections → ExperimentConfig. The keys, their defaults and the
// rules checked here are documented one by one in docs/config.md; names follow Megatron-LM's
// arguments (megatron/training/arguments.py), and so do the checks of the plan.
#include "io/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <utility>

#include "core/error.hpp"
#include "io/config_internal.hpp"
#include "io/megatron_args.hpp"
#include "io/yaml_util.hpp"

namespace scalescope::io {

namespace detail {

std::string display(const fs::path& p) {
  return p.lexically_normal().string();
}

bool is_file(const fs::path& p) noexcept {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
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

const Value* get(const Section& s, std::string_view key) {
  const auto it = s.find(key);
  return it == s.end() ? nullptr : &it->second;
}

namespace {

/// Reads the experiment file into sections; its top-level `megatron_args:` string, if any, into
/// `launch_line`.
Tree read_experiment(const std::string& path, std::optional<Value>& launch_line) {
  if (!detail::is_file(path)) throw_input("{}: experiment file not found", path);
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

}  // namespace

}  // namespace detail

namespace {

namespace fs = std::filesystem;
using detail::apply_override;
using detail::base_dir;
using detail::build_cluster;
using detail::build_model;
using detail::build_network;
using detail::build_parallel;
using detail::build_run;
using detail::build_training;
using detail::check_plan;
using detail::display;
using detail::emit;
using detail::fail;
using detail::get;
using detail::kCommandLine;
using detail::kLaunchLineKey;
using detail::kSections;
using detail::ModelSources;
using detail::Origin;
using detail::read_experiment;
using detail::Tree;
using detail::Value;

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
  // The software stack's defaults go in last: every key given above wins over them.
  const std::string stack = detail::apply_stack(t);
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
  c.training.stack = stack;
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
    if (!detail::is_file(p))
      fail(*v, "cost.profile", fmt::format("profile {} not found", display(p)));
    c.cost.profile = fs::absolute(p).lexically_normal().string();
  }
  check_plan(c, t);
  // Last, after every other check: a launch line without --global-batch-size (and no
  // training.global_batch_size elsewhere): Megatron-LM would default it to micro_batch_size·DP, one
  // micro-batch per pipeline, which a line copied from a real job almost never meant.
  if (!lines.empty() && get(t.at("training"), "global_batch_size") == nullptr)
    throw_input(
        "{}: no --global-batch-size (nor training.global_batch_size): give it (Megatron-LM's "
        "default, micro_batch_size·data_parallel_size, is one micro-batch per pipeline)",
        lines.back().first);
  c.resolved_yaml = emit(c, sources);
  // The launch lines are merged in; like the presets, they are named in the header only.
  c.resolved_yaml.insert(c.resolved_yaml.find('\n') + 1, launch_header);
  return c;
}

}  // namespace scalescope::io
