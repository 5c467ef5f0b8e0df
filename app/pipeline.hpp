// What every command that builds or replays a graph shares (app/pipeline.cpp): loading the
// configuration, building the graph, completing and checking the summary, the replay setup and
// writing the result files. No command logic: each command is a file of its own in app/.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cost/cost_model.hpp"
#include "cost/profile.hpp"
#include "emu/emulation.hpp"
#include "graph/sliced_graph.hpp"
#include "io/config.hpp"
#include "io/profile_io.hpp"
#include "pdes/progress.hpp"

namespace scalescope::app {

/// The configuration a run uses: from CONFIG, or the one embedded in graph.h5 (`g`), which
/// messages and ExperimentConfig::path name as `label` (the graph file or trace).
io::ExperimentConfig load_config(const std::string& config_path, const graph::SlicedGraph* g,
                                 const std::vector<std::string>& overrides,
                                 const std::string& megatron_args, const std::string& label = {});

/// Runs `body` with the path of a private temporary file (TMPDIR/scalescope-config-PID.yaml)
/// holding the configuration `text`; the file is removed afterwards, also when body throws.
void with_config_file(const std::string& text,
                      const std::function<void(const std::string& path)>& body);

/// A stored graph replays with the model, parallel and training keys it was built with: refuses
/// (one line naming each key, its value and the graph's) a configuration `c` whose resolved keys
/// there differ from the graph's stored configuration, training.host_iteration_ms aside (applied
/// after the replay).
void check_graph_config(const io::ExperimentConfig& c, const std::string& graph_config,
                        const std::string& graph_path);

/// A Chakra trace holds the programs: refuses a `--set` of a model, parallel or training key.
void refuse_program_overrides(const std::vector<std::string>& overrides, const std::string& what);

/// The sliced execution graph of a configuration.
graph::SlicedGraph build(const io::ExperimentConfig& c);

/// Adds the workload's figures (tokens, model FLOPs, pipeline stages) to the engine's results.
void complete_summary(emu::RunResults& r, const io::ExperimentConfig& c);
/// The same for a distributed run, collective over `comm` (per-stage peaks reduced).
void complete_summary(emu::DistributedResults& d, const io::ExperimentConfig& c, MPI_Comm comm);

/// The capacity check (docs/model.md "Memory capacity"): each stage's breakdown at its peak,
/// the tightest stage's first rank, and whether peak total memory fits the GPU's usable HBM.
void check_memory(emu::Summary& s, const io::ExperimentConfig& c);
/// "rank R (pipeline stage S) needs X GiB, the GPU has Y GiB (largest class: C)".
std::string memory_verdict(const emu::Summary& s);
/// What run.on_oom asks for when the check fails: a warning (`report`: printed by this process),
/// or a one-line error (no outputs).
void act_on_memory(const emu::Summary& s, const io::ExperimentConfig& c, bool report);
/// Each pipeline stage's memory at its peak and the capacity check, from the graph's templates
/// alone (memory is a property of the template; the replay gives the same peaks).
emu::Summary template_memory(const io::ExperimentConfig& c, const graph::SlicedGraph& g);

/// cost.profile: the cost functions use the profile's measurement wherever an op's kernel
/// signature is in it, the roofline model elsewhere.
emu::Costs costs_with_profile(emu::Costs costs, const cost::Profile* profile);

/// The engine run.engine asks for at `processes` MPI processes (emu::engine_kind); the
/// sequential engine under mpirun is a one-line error naming the configuration.
emu::EngineKind engine_for(const io::ExperimentConfig& c, int processes);

/// The emulation options every replay takes from the run keys (coalescing, partition, the
/// optimism window, send/recv semantics); engine, traced ranks and replicas are the caller's.
emu::EmulationOptions run_options(const io::RunSpec& r);

/// What a replay of configuration `c` takes: its cost model, cost.profile's measurements (if
/// any) over it, and the emulation options the run keys ask for (engine and traced ranks are
/// the caller's). Not copyable: `costs` refers to the model and the profile.
struct ReplaySetup {
  explicit ReplaySetup(const io::ExperimentConfig& c)
      : model(c.cluster, c.network),
        profile(c.cost.profile.empty() ? std::nullopt
                                       : std::optional(io::read_profile_h5(c.cost.profile))),
        costs(costs_with_profile(emu::costs_of(model), profile ? &*profile : nullptr)) {
    options = run_options(c.run);
    options.representative_replicas = c.run.replicas == "representative";
  }
  ReplaySetup(const ReplaySetup&) = delete;
  ReplaySetup& operator=(const ReplaySetup&) = delete;

  cost::CostModel model;
  std::optional<cost::Profile> profile;
  emu::Costs costs;
  emu::EmulationOptions options;
};

/// The profile's share of compute time over the ranks this process owns (all of them for a
/// sequential run; summed over processes with `comm`), and its distinct signatures found.
void summarize_profile(emu::Summary& s, const io::ExperimentConfig& c, const cost::Profile& p,
                       const graph::SlicedGraph& g, const emu::Costs& costs,
                       const std::vector<std::uint32_t>* owner, std::uint32_t me, MPI_Comm comm);

/// Adds to a written results.h5 before it moves into place (a hybrid run's /sandbox).
using ResultsExtra = std::function<void(const std::string& results_h5)>;

/// Writes the three result files into a staging directory beside DIR, then moves them in, so
/// DIR never holds a mix of old and new or half-written files.
/// Before any work: DIR (run.output) can be written (its staging directory beside it is
/// created and removed again), and staging directories of dead processes beside it are
/// removed; otherwise a one-line input error naming DIR.
void check_output_dir(const std::filesystem::path& dir);

void write_outputs(const emu::RunResults& r, const std::filesystem::path& dir,
                   const ResultsExtra& extra = {});
/// write_outputs for a distributed run, collective over `comm`: results.h5 is written by every
/// process (each its own rows and traced ranks); process 0 then gathers the traced ranks and
/// writes summary.json and trace.json, and moves the three files in.
void write_outputs(emu::DistributedResults& d, const std::filesystem::path& dir, MPI_Comm comm,
                   const ResultsExtra& extra = {});

/// One progress line on stderr at most once per second (events, simulated time, rate, ETA).
/// `flow_gpus_per_node`: 0, or the cluster's GPUs per node under the flow model; `active`: the
/// replayed ranks of a representative replay.
pdes::ProgressReporter progress_reporter(const graph::SlicedGraph& g, bool coalesce,
                                         std::int64_t flow_gpus_per_node,
                                         const std::vector<std::uint8_t>* active = nullptr);

}  // namespace scalescope::app
