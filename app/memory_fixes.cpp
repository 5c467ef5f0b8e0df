// When a job does not fit: the single changes Megatron users reach for, cheapest first, each
// checked by building the changed configuration's graph and re-running the memory model
// (docs/model.md "Memory capacity", "When a job does not fit").
#include "app/memory_fixes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "core/error.hpp"

namespace scalescope::app {
namespace {

struct Candidate {
  std::vector<std::string> sets;
  std::string cost;      ///< what the change costs, in words
  bool partial = false;  ///< one of the partial-recompute steps: only the first that fits counts
};

/// The candidates for configuration `c`, in the order of what they are expected to cost in
/// iteration time: sharding that moves the same bytes, then recomputing a little, smaller
/// micro-batches, a deeper pipeline, more tensor parallelism, recomputing everything.
std::vector<Candidate> candidates(const io::ExperimentConfig& c) {
  const auto& p = c.parallel;
  const std::int64_t tp = p.tp(), pp = p.pp(), dp = p.dp();
  std::vector<Candidate> out;
  if (!p.use_distributed_optimizer && p.zero() == 0 && dp * p.cp() > 1)
    out.push_back({{"parallel.use_distributed_optimizer=true"},
                   "shards the optimizer state over data parallelism; the gradients move as a "
                   "reduce-scatter and the parameters as an all-gather, the bytes of the "
                   "all-reduce"});
  if (tp > 1 && !p.sequence_parallel)
    out.push_back({{"parallel.sequence_parallel=true"},
                   "shards the norm and dropout activations over TP; TP's all-reduces become "
                   "reduce-scatter + all-gather pairs of the same bytes"});
  if (p.recompute == workload::Recompute::None)
    out.push_back({{"parallel.recompute=selective"},
                   "recomputes core attention in the backward (a few % more compute)"});
  if (c.training.micro_batch_size % 2 == 0)
    out.push_back({{fmt::format("training.micro_batch_size={}", c.training.micro_batch_size / 2)},
                   "halves each micro-batch's activations; twice the micro-batches, each less "
                   "efficient"});
  if (dp % 2 == 0)
    out.push_back({{fmt::format("parallel.pipeline_model_parallel_size={}", 2 * pp),
                    fmt::format("parallel.data_parallel_size={}", dp / 2)},
                   "halves the layers per stage; a deeper pipeline (a larger bubble, more "
                   "micro-batches in flight on the first stage)"});
  if (dp % 2 == 0 && 2 * tp <= c.cluster.gpus_per_node)
    out.push_back({{fmt::format("parallel.tensor_model_parallel_size={}", 2 * tp),
                    fmt::format("parallel.data_parallel_size={}", dp / 2)},
                   "halves weights and most activations per GPU; more TP communication and "
                   "smaller GEMMs"});
  if (p.recompute != workload::Recompute::Full) {
    // Megatron's partial recomputation (--recompute-method block --recompute-num-layers N: the
    // first N layers of each model chunk), fewest layers first, before recomputing them all.
    const std::int64_t chunk_layers =
        c.model.num_layers / (pp * std::max<std::int64_t>(1, p.vpp()));
    for (std::int64_t n = 1; n < std::min<std::int64_t>(chunk_layers, 9); ++n)
      out.push_back({{"parallel.recompute=full", "parallel.recompute_method=block",
                      fmt::format("parallel.recompute_num_layers={}", n)},
                     fmt::format("recomputes the forward of the first {} layer{} of each model "
                                 "chunk in the backward",
                                 n, n == 1 ? "" : "s"),
                     true});
    out.push_back({{"parallel.recompute=full"},
                   "keeps only each layer's input and recomputes its forward in the backward "
                   "(about a third more compute)"});
  }
  return out;
}

}  // namespace

std::vector<MemoryFix> memory_fixes(const std::string& config_path,
                                    const std::vector<std::string>& overrides,
                                    const std::string& megatron_args, const io::ExperimentConfig& c,
                                    std::size_t max_fixes) {
  std::vector<MemoryFix> out;
  bool partial_found = false;
  for (const Candidate& k : candidates(c)) {
    if (out.size() >= max_fixes) break;
    if (k.partial && partial_found) continue;
    std::vector<std::string> sets = overrides;
    sets.insert(sets.end(), k.sets.begin(), k.sets.end());
    try {
      const io::ExperimentConfig changed = io::load_experiment(config_path, sets, megatron_args);
      const emu::Summary s = template_memory(changed, build(changed));
      if (!s.memory_fits) continue;
      partial_found = partial_found || k.partial;
      out.push_back({k.sets, k.cost, s.memory_total_bytes_by_pp_stage[s.memory_tightest_stage],
                     s.memory_tightest_stage});
    } catch (const InputError&) {
      // The change makes a plan Megatron refuses (layers, heads or batch do not divide): not
      // a suggestion.
    }
  }
  return out;
}

void add_memory_fixes(emu::Summary& s, const std::string& config_path,
                      const std::vector<std::string>& overrides, const std::string& megatron_args,
                      const io::ExperimentConfig& c, bool quiet) {
  if (s.memory_fits) return;
  std::vector<MemoryFix> fixes;
  if (config_path.empty() && megatron_args.empty()) {
    // A run from graph.h5 alone: the changes are tried on the configuration that ran (the
    // graph's own, with the run's keys).
    with_config_file(c.resolved_yaml,
                     [&](const std::string& path) { fixes = memory_fixes(path, {}, {}, c); });
  } else {
    fixes = memory_fixes(config_path, overrides, megatron_args, c);
  }
  for (const MemoryFix& f : fixes) {
    s.memory_fix_sets.push_back(f.sets);
    s.memory_fix_total_bytes.push_back(f.total_bytes);
  }
  if (!quiet) std::cerr << format_memory_fixes(s, fixes);
}

std::string format_memory_fixes(const emu::Summary& s, const std::vector<MemoryFix>& fixes) {
  const auto gib = [](std::int64_t b) { return static_cast<double>(b) / (1 << 30); };
  const std::size_t st = s.memory_tightest_stage;
  const std::int64_t total = s.memory_total_bytes_by_pp_stage[st];
  std::string out = fmt::format(
      "does not fit: stage {} needs {:.2f} GiB on the device, {:.2f} GiB over the {:.2f} GiB "
      "usable (largest class: {}, {:.2f} GiB; allocated {:.2f}, reserved {:.2f})\n",
      st, gib(total), gib(total - s.memory_capacity_bytes), gib(s.memory_capacity_bytes),
      s.memory_dominant_class,
      gib(s.memory_breakdown_by_pp_stage[st][static_cast<std::size_t>(
          std::find(s.memory_class_names.begin(), s.memory_class_names.end(),
                    s.memory_dominant_class) -
          s.memory_class_names.begin())]),
      gib(s.memory_allocated_bytes_by_pp_stage[st]), gib(s.memory_reserved_bytes_by_pp_stage[st]));
  if (fixes.empty()) {
    out +=
        "no single change of distributed optimizer, sequence parallelism, recomputation, "
        "micro-batch, PP or TP makes it fit\n";
    return out;
  }
  out += "changes that fit, cheapest first (each checked by re-running the memory model):\n";
  for (const MemoryFix& f : fixes) {
    std::string sets;
    for (const std::string& x : f.sets) sets += " --set " + x;
    out += fmt::format("  {} → {:.2f} GiB at its tightest stage ({}): {}\n", sets.substr(1),
                       gib(f.total_bytes), f.stage, f.cost);
  }
  return out;
}

}  // namespace scalescope::app
