#pragma once
/// Internal pieces of the experiment-configuration loader shared by its source files
/// (io/config*.cpp): merged sections, the key tables, the section readers, the plan checks and
/// the resolved-configuration writer. Not part of the public interface (io/config.hpp).
#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/config.hpp"
#include "io/yaml_util.hpp"

namespace scalescope::io::detail {

namespace fs = std::filesystem;

/// Canonical key → value, for one section after merging.
using Section = std::map<std::string, Value, std::less<>>;
using Tree = std::map<std::string, Section, std::less<>>;

using Keys = std::vector<std::string_view>;

extern const Keys kSections;
/// parallel.recompute_modules: Megatron's submodule names.
inline constexpr std::pair<std::uint8_t, std::string_view> kRecomputeModules[] = {
    {workload::kRecomputeCoreAttn, "core_attn"},
    {workload::kRecomputeMoeAct, "moe_act"},
    {workload::kRecomputeLayerNorm, "layernorm"},
    {workload::kRecomputeMlaUpProj, "mla_up_proj"},
    {workload::kRecomputeMlp, "mlp"},
    {workload::kRecomputeMoe, "moe"},
    {workload::kRecomputeSharedExperts, "shared_experts"}};
/// parallel.cuda_graph_scope: Megatron's --cuda-graph-scope names that the model tells apart.
inline constexpr std::pair<std::uint8_t, std::string_view> kCudaGraphScopes[] = {
    {workload::kCudaGraphAttn, "attn"},
    {workload::kCudaGraphMoeRouter, "moe_router"},
    {workload::kCudaGraphMoePreprocess, "moe_preprocess"}};
/// The top-level key of an experiment file that holds a Megatron-LM launch line.
inline constexpr std::string_view kLaunchLineKey = "megatron_args";
/// The top-level `sweep:` section: read by `scalescope sweep` (read_sweep_spec), ignored by a run.
inline constexpr std::string_view kSweepKey = "sweep";
inline constexpr std::string_view kWhatifKey = "whatif";
/// The name of an experiment given without a file (a launch line and --set overrides only).
inline constexpr std::string_view kCommandLine = "(command line)";

extern const Keys kModelShapeKeys;
extern const Keys kClusterNetworkKeys;
/// The keys of `cluster.topology` (docs/config.md).
extern const Keys kTopologyKeys;
/// Short names accepted in `parallel:` (Megatron's own --tp/--pp style abbreviations).
extern const std::vector<std::pair<std::string_view, std::string_view>> kParallelAliases;

// config_keys.cpp
Keys concat(Keys a, const Keys& b);
/// The keys an experiment file may write in `section`.
Keys section_keys(std::string_view section);
/// `key` resolved through the aliases of `section`; empty when `key` is not allowed.
std::string_view canonical(std::string_view section, std::string_view key, const Keys& allowed);

// config.cpp
std::string display(const fs::path& p);
/// Whether `p` names a regular file; false (not an exception) for a name the system cannot
/// look up (too long, a loop of links, no permission).
bool is_file(const fs::path& p) noexcept;
/// Parses a whole YAML file; `what` names it in messages ("experiment file", "model preset").
YAML::Node parse_file(const fs::path& p, std::string_view what);
/// Reads the mapping `map` as the keys of `section` (canonical names, null values dropped).
/// `preset` marks a preset file: a mapping of keys without a section header.
Section read_section(const YAML::Node& map, const Origin& origin, std::string_view section,
                     const Keys& allowed, bool preset);
const Value* get(const Section& s, std::string_view key);

// config_overrides.cpp
/// Applies one "section.key=value" override; the value is parsed as YAML, empty means unset.
void apply_override(Tree& t, const std::string& text, const std::string& experiment);

// config_stack.cpp
/// Names (and aliases) of the known software stacks (training.stack).
std::vector<std::string> stack_names();
/// Inserts the defaults of the tree's training.stack, if any, where the tree has no value of its
/// own; returns the stack's canonical name ("" without one). Unknown names are input errors.
std::string apply_stack(Tree& t);

// config_presets.cpp
/// Directory against which a path written in `v` is resolved: the file's own directory, or the
/// current directory for a command-line override.
fs::path base_dir(const Value& v);
/// Finds preset `v` of `kind` ("models", "clusters"). A name is searched in
/// <experiment dir>/../<kind>/, <experiment dir>/, then the repository's inputs/<kind>/; a value
/// that looks like a path (has '/' or ends in .yaml/.yml) is taken as a file.
fs::path find_preset(const Value& v, std::string_view key, std::string_view kind,
                     const fs::path& experiment_dir);
/// Reads a preset file of `section` (a mapping of the keys, without the section header).
Section read_preset(const fs::path& p, std::string_view section, const Keys& allowed);

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

struct ModelSources {
  std::string preset;     ///< preset name, if any
  std::string hf_config;  ///< config.json path, if any
};

// config_model.cpp
/// The model: `megatron_defaults` (a launch line was given) starts from Megatron-LM's defaults
/// where they differ from scalescope's; then the preset, the HF config, the inline keys.
workload::ModelSpec build_model(const Section& inline_keys, const std::string& experiment,
                                ModelSources& sources, bool megatron_defaults,
                                std::int64_t micro_batch);

// config_sections.cpp
/// `network:` (docs/config.md): the network model and NCCL's forced choices.
cost::NetworkOptions build_network(const Section& s);
cost::ClusterSpec build_cluster(const Section& inline_keys, const std::string& experiment);
workload::ParallelPlan build_parallel(const Section& s);
workload::TrainingSpec build_training(const Section& s);
RunSpec build_run(const Section& s);

// config_validate.cpp
/// Cross-key rules of the plan (Megatron's arguments.py / parallel_state.py checks).
void check_plan(ExperimentConfig& c, const Tree& t);

// config_emit.cpp
/// The resolved configuration as YAML, with a header naming the presets.
std::string emit(const ExperimentConfig& c, const ModelSources& sources);

}  // namespace scalescope::io::detail
