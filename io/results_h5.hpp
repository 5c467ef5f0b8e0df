#pragma once
/// results.h5: per-rank table, traced-rank timelines and memory, engine statistics
/// (layout in docs/formats.md). Written to a temporary name and renamed when complete.
#include <mpi.h>

#include <string>

#include "emu/results.hpp"

namespace scalescope::io {

/// Serial writer: the complete results of a run (the sequential engine, or gathered ones).
void write_results_h5(const emu::RunResults& r, const std::string& path);

/// Collective writer: every process of `comm` passes its share of the same parallel run
/// (emu::emulate_distributed). The file is created through MPI-IO, every group, dataset and
/// attribute is created by all processes alike, each process writes the /ranks rows of its
/// ranks and the /timeline and /memory datasets of its traced ranks. Same content (datasets,
/// types, shapes, layouts, attributes) as the serial writer gives for the gathered results.
/// Written to `path` + ".tmp" and renamed by process 0 once all are done; an error is raised on
/// every process and removes the temporary.
void write_results_h5(const emu::DistributedResults& d, const std::string& path, MPI_Comm comm);

}  // namespace scalescope::io
