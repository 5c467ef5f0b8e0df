#pragma once
/// graph.h5: the sliced execution graph on disk (layout in docs/formats.md).
#include <string>

#include "graph/sliced_graph.hpp"

namespace scalescope::io {

/// Writes to `path` + ".tmp" and renames on success, so a crash never leaves a valid-looking file.
void write_graph_h5(const graph::SlicedGraph& g, const std::string& path);
/// Reads and validates a graph file (RankProgram::finalize on every template, graph::validate).
/// Throws IoError naming the file (and dataset) when it is missing, truncated or corrupt.
graph::SlicedGraph read_graph_h5(const std::string& path);

}  // namespace scalescope::io
