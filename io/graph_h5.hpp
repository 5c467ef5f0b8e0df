#pragma once
/// graph.h5: the sliced execution graph on disk (layout in docs/formats.md).
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "graph/sliced_graph.hpp"

namespace scalescope::io {

/// Writes to `path` + ".tmp" and renames on success, so a crash never leaves a valid-looking file.
void write_graph_h5(const graph::SlicedGraph& g, const std::string& path);
/// Reads and validates a graph file (RankProgram::finalize on every template, graph::validate).
/// Throws IoError naming the file (and dataset) when it is missing, truncated or corrupt.
graph::SlicedGraph read_graph_h5(const std::string& path);

/// The resolved configuration stored in a graph file (/meta config_text), read alone.
std::string read_graph_config_text(const std::string& path);

/// Which part of graph.h5 a process reads.
struct GraphPart {
  /// Given the graph without its templates (world size, configuration, rank → class and role
  /// maps, communicator table, all checked; each template holds only its name and
  /// static_memory), returns one flag per template: whether this process needs its ops.
  /// Unset: every template (e.g. for METIS, which weighs by every class's message counts).
  std::function<std::vector<bool>(const graph::SlicedGraph& skeleton)> needed;
};

/// What a partial read did on this process (for tests and measurements).
struct GraphReadStats {
  std::uint32_t templates_read = 0;  ///< templates whose ops were read
  std::uint64_t bytes_stored = 0;    ///< bytes of the datasets read, as stored (compressed)
};

/// Partial parallel read, collective over `comm`: every process opens the file through MPI-IO
/// and reads /meta, /comms, /ranks and each template's name and static_memory, then the ops of
/// only the templates `part.needed` asks for. The result has `loaded` set (the other templates
/// have no ops); finalize() runs on the loaded templates and graph::validate on what is loaded
/// (the full validation when everything is). Errors are raised on every process as the same
/// one-line IoError naming the file: a failure in the common part occurs everywhere alike, and
/// a failure in one process's templates is shared with the others before anyone throws.
graph::SlicedGraph read_graph_h5(const std::string& path, MPI_Comm comm, const GraphPart& part,
                                 GraphReadStats* stats = nullptr);

}  // namespace scalescope::io
