// When a job does not fit in memory: the cheapest single changes that make it fit, each checked
// by re-running the memory model on the changed configuration (app/memory_fixes.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/pipeline.hpp"

namespace scalescope::app {

struct MemoryFix {
  std::vector<std::string> sets;  ///< the --set overrides of the change
  std::string cost;               ///< what it costs, in words
  std::int64_t total_bytes = 0;   ///< the changed job's device total at its tightest stage
  std::uint32_t stage = 0;        ///< that stage
};

/// Up to `max_fixes` changes of `c` (loaded from `config_path` with `overrides` and
/// `megatron_args`) that fit, cheapest first.
std::vector<MemoryFix> memory_fixes(const std::string& config_path,
                                    const std::vector<std::string>& overrides,
                                    const std::string& megatron_args, const io::ExperimentConfig& c,
                                    std::size_t max_fixes = 3);

/// When `s` does not fit and the run has a configuration to reload (a file or a launch line),
/// puts memory_fixes() into `s` (summary.json's memory.fixes) and, unless `quiet`, prints them to
/// standard error under the run's "does not fit" warning.
void add_memory_fixes(emu::Summary& s, const std::string& config_path,
                      const std::vector<std::string>& overrides, const std::string& megatron_args,
                      const io::ExperimentConfig& c, bool quiet);

/// "does not fit: …" and the changes, one per line.
std::string format_memory_fixes(const emu::Summary& s, const std::vector<MemoryFix>& fixes);

}  // namespace scalescope::app
