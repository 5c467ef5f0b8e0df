// Hybrid runs (app/sandbox.cpp; docs/kernels.md "Sandbox ranks"): the sandbox ranks' kernels
// measured or replayed before the replay, and the CUDA measuring tool shared with `profile`.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

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

/// The user's program as a sandbox rank (app/sandbox_program.cpp, docs/sandbox-program.md): its
/// record (scripts/sandbox/run_program.py's report), read by every process, and what the replay
/// made of it.
struct SandboxProgram {
  std::uint32_t rank = 0;
  std::string command;
  nlohmann::json report;  ///< sandbox-program.json as the runner wrote it
  nlohmann::json last;    ///< its last iteration: ATen ops and {"call": seq} collectives
  std::uint32_t iterations = 0;
  double peak_bytes = 0;        ///< its own allocations' peak in the last iteration
  double start_live_bytes = 0;  ///< live when the last iteration began (the step before's end)
  /// Per op of the program's template in the replay: its kernels' time measured on a GPU (the
  /// record's "gpu_ns"), −1 where none was (costed by the model).
  std::vector<std::int64_t> measured_ns;
  /// Set by embed_program: whether rank `rank` runs the program in the replay, else why not.
  bool in_replay = false;
  std::string not_in_replay;
  /// Kept by run_command for the report: the experiment's graph, and with the program in it.
  std::optional<graph::SlicedGraph> pure, hybrid;
};

/// Reads `report` (sandbox-program.json) for rank `rank`.
SandboxProgram read_sandbox_program(const std::filesystem::path& report, std::uint32_t rank,
                                    const std::string& command);

/// Replaces rank p.rank's template in `g` by the program's last iteration when each of its
/// collectives is that rank's next one on the same group in the graph (kind and bytes; a group
/// is the communicator with the recorded global ranks) and none is left over: the program's
/// ATen ops one kernel each on the compute stream, its collectives the graph's ops (the other
/// members' counterparts), its memory from its own allocations. Else leaves `g` as it is and
/// says why in p.not_in_replay. Validates the result.
bool embed_program(graph::SlicedGraph& g, SandboxProgram& p);

/// The durations of template `t`'s ops where some were measured (`measured_ns`, −1: not):
/// the measured ones, the cost model's for the other compute ops, 0 for communication;
/// empty when none was measured (the cost model's throughout).
std::vector<SimTime> measured_durations(const graph::RankProgram& t,
                                        const std::vector<std::int64_t>& measured_ns,
                                        const emu::Costs& costs);

}  // namespace scalescope::app
