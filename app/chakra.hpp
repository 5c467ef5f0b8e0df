// Chakra imports as `run` needs them (app/chakra_commands.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "app/session.hpp"
#include "graph/sliced_graph.hpp"
#include "io/chakra_et.hpp"
#include "io/config.hpp"

namespace scalescope::app {

/// Whether a graph's configuration text is that of a Chakra import.
bool is_chakra_config(const std::string& config_text);

/// The configuration of a Chakra import of `ranks` rank files (placeholder model, parallel and
/// training sections; the cluster from `source`, scalescope's own ss_config, when given);
/// `foreign`: another tool's trace, replayed with eager sends.
io::ExperimentConfig chakra_config(const std::string& prefix, std::uint32_t ranks, bool foreign,
                                   const std::vector<std::string>& overrides,
                                   const std::string& source = {});

/// Reads PREFIX.<rank>.et (`expand`: "dp=N" or empty); `report` prints the reader's warnings and,
/// unless `quiet`, a progress line (core::Progress) while the files are read.
io::ChakraImport import_chakra(const std::string& prefix, const std::string& comm_groups,
                               const std::string& expand, bool report, bool quiet = false);

/// `scalescope run` of an imported trace, with the trace's durations where it has them.
int run_chakra(const MpiWorld& mpi, const graph::SlicedGraph& g,
               const std::map<std::uint32_t, std::vector<std::int64_t>>& durations,
               io::ExperimentConfig& c, const std::string& out_override, bool quiet);

}  // namespace scalescope::app
