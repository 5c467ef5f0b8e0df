// Hybrid runs (app/sandbox.cpp; docs/kernels.md "Sandbox ranks"): the sandbox ranks' kernels
// measured or replayed before the replay, and the CUDA measuring tool shared with `profile`.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "cost/cost_model.hpp"
#include "cost/profile.hpp"
#include "emu/emulation.hpp"
#include "graph/sliced_graph.hpp"
#include "io/config.hpp"

namespace scalescope::app {

/// The CUDA executor: the standalone scalescope-kernels beside this binary.
std::filesystem::path kernels_tool();

/// Runs scalescope-kernels on `ops` and reads what it measured (`what` names the caller in
/// errors); the device is the node-local MPI rank's.
cost::Profile measure_with_cuda_tool(const std::filesystem::path& ops, const std::string& what);

/// A hybrid run's sandbox (docs/kernels.md "Sandbox ranks"): each sandbox rank's process runs
/// the kernels of its template's distinct signatures (memoized: once each, before the replay, so
/// no rollback re-runs one), every process receives all measurements, and the sandbox ranks —
/// or with run.calibrate_from_sandbox their whole classes — take the measured durations. With
/// `replayed` the measurements come from a previous run's results.h5 instead.
struct Sandbox {
  cost::Profile measured;
  bool replayed = false;
};

/// run.sandbox_backend resolved: auto = cuda where scalescope-kernels was built beside this
/// binary and `nvidia-smi -L` lists a GPU, else host.
std::string sandbox_backend_of(const io::ExperimentConfig& c);

/// Measures (or takes `replayed`) the sandbox ranks' kernels, gives every process all of them,
/// sets the sandbox ranks' (with run.calibrate_from_sandbox their classes') durations in `opt`
/// and the sandbox figures in `summary`. Collective over MPI_COMM_WORLD under the optimistic
/// engine. Refuses calibration from host measurements.
Sandbox prepare_sandbox(const io::ExperimentConfig& c, const graph::SlicedGraph& g,
                        const cost::CostModel& model, const emu::Costs& costs,
                        emu::EmulationOptions& opt, const std::optional<cost::Profile>& replayed,
                        int me, int size, emu::Summary& summary);

}  // namespace scalescope::app
