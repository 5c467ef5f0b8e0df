// `scalescope graph` (the sliced graph to graph.h5) and `scalescope memory` (each stage's
// memory at its peak, no replay).
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/memory_fixes.hpp"
#include "app/pipeline.hpp"
#include "io/graph_h5.hpp"

namespace scalescope::app {

int graph_command(const std::string& config_path, const std::string& out,
                  const std::vector<std::string>& overrides, const std::string& megatron_args) {
  io::ExperimentConfig c = io::load_experiment(config_path, overrides, megatron_args);
  graph::SlicedGraph g = build(c);
  io::write_graph_h5(g, out);
  std::size_t ops = 0;
  for (const auto& t : g.templates) ops += t.ops.size();
  std::cout << "wrote " << out << ": " << g.world_size << " ranks, " << g.templates.size()
            << " templates, " << ops << " template ops, " << g.comms.size() << " communicators\n";
  return 0;
}

/// `scalescope memory CONFIG`: each pipeline stage's memory classes at its peak and the capacity
/// check, from the graph's templates alone (no replay: memory is a property of the template).
int memory_command(const std::string& config_path, const std::vector<std::string>& overrides,
                   const std::string& megatron_args) {
  io::ExperimentConfig c = io::load_experiment(config_path, overrides, megatron_args);
  const emu::Summary s = template_memory(c, build(c));
  std::cout << fmt::format("memory at each pipeline stage's peak (GiB), {} ({:.2f} GiB usable)\n",
                           s.gpu, static_cast<double>(s.memory_capacity_bytes) / (1 << 30));
  std::cout << fmt::format("  {:<18}", "class");
  for (std::int64_t stage = 0; stage < c.parallel.pp(); ++stage)
    std::cout << fmt::format("{:>9}", fmt::format("stage {}", stage));
  std::cout << "\n";
  auto row = [&](const std::string& label, auto value) {
    std::cout << fmt::format("  {:<18}", label);
    for (std::size_t stage = 0; stage < s.memory_breakdown_by_pp_stage.size(); ++stage)
      std::cout << fmt::format("{:>9.2f}", static_cast<double>(value(stage)) / (1 << 30));
    std::cout << "\n";
  };
  for (std::size_t k = 0; k < s.memory_class_names.size(); ++k)
    row(s.memory_class_names[k],
        [&](std::size_t st) { return s.memory_breakdown_by_pp_stage[st][k]; });
  row("allocated", [&](std::size_t st) { return s.memory_allocated_bytes_by_pp_stage[st]; });
  row("reserved", [&](std::size_t st) { return s.memory_reserved_bytes_by_pp_stage[st]; });
  row("total (device)", [&](std::size_t st) { return s.memory_total_bytes_by_pp_stage[st]; });
  std::cout << fmt::format("fits: {} (tightest: rank {}, stage {}, largest class {})\n",
                           s.memory_fits ? "yes" : "NO", s.memory_tightest_rank,
                           s.memory_tightest_stage, s.memory_dominant_class);
  if (!s.memory_fits)
    std::cout << format_memory_fixes(s, memory_fixes(config_path, overrides, megatron_args, c));
  return 0;
}

}  // namespace scalescope::app
