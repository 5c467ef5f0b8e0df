#pragma once
/// Runs one training iteration of a sliced graph: one RankLP per rank, one CommLP per
/// communicator, on the sequential engine.
#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cost/cost_model.hpp"
#include "emu/model_data.hpp"
#include "emu/results.hpp"
#include "graph/sliced_graph.hpp"
#include "pdes/optimistic_engine.hpp"
#include "pdes/progress.hpp"

namespace scalescope::emu {

/// Sequential: one process. Optimistic: Time Warp with per-LP lookahead over MPI. Conservative:
/// synchronous windows over MPI (pdes::ConservativeEngine), where the communicators that span
/// processes complete at least a microsecond after their last arrival (else an InputError).
/// Auto: conservative where it is allowed, optimistic elsewhere.
enum class EngineKind : std::uint8_t { Sequential, Optimistic, Conservative, Auto };
/// The engine a `run.engine` value names (io/config_sections.cpp admits only these) at
/// `processes` MPI processes: `auto` (the default) is the sequential engine on one process,
/// where nothing can be gained from windows or speculation, and Auto over several.
inline EngineKind engine_kind(const std::string& run_engine, int processes) {
  return run_engine == "optimistic"     ? EngineKind::Optimistic
         : run_engine == "conservative" ? EngineKind::Conservative
         : run_engine == "auto" ? (processes > 1 ? EngineKind::Auto : EngineKind::Sequential)
                                : EngineKind::Sequential;
}

struct EmulationOptions {
  bool coalesce_local_ops = true;          ///< false: one event per compute op (reference)
  std::vector<std::uint32_t> trace_ranks;  ///< ranks whose timeline and memory are recorded
  EngineKind engine = EngineKind::Sequential;
  std::string partition = "block";    ///< optimistic: block | metis
  pdes::OptimisticConfig optimistic;  ///< optimistic: GVT interval, window, batching
  bool rollback_check = false;        ///< sequential: forward → reverse → compare per event
  /// Send/recv semantics (run.p2p): false = rendezvous, a transfer starts when both ends are
  /// posted (NCCL's P2P); true = eager, a send completes after its transfer whether or not the
  /// receive is posted, which completes once the data is there (ASTRA-sim's).
  bool eager_p2p = false;
  pdes::ProgressReporter progress;  ///< called on process 0 at most once per interval
  /// Hybrid runs (sandbox ranks): per rank, the durations of every op of its template that
  /// replace the cost model's (0 for communication ops); ranks not named keep their class's.
  std::map<std::uint32_t, std::vector<SimTime>> rank_durations;
  /// The same per template (run.calibrate_from_sandbox: a class takes a sandbox rank's).
  std::map<std::uint32_t, std::vector<SimTime>> class_durations;
  /// run.replicas: representative (emu/replicas.hpp): replay the replica holding rank 0 and the
  /// collectives across replicas; every other rank takes its counterpart's results. InputError
  /// where the replicas are not provably identical.
  bool representative_replicas = false;
  /// The same where the replicas are provably identical, and every rank replayed where they are
  /// not (no error): what a sweep's replays use (the same results either way, fewer events).
  bool representative_where_provable = false;
  /// Ranks that each get an MPI process of their own when there are enough processes (the
  /// last ones; the sandbox), whatever the partition.
  std::vector<std::uint32_t> dedicated_ranks;
};

/// The exact number of events a run commits: per rank one START, per collective one ARRIVE and
/// one COMPLETE, per point-to-point part one ARRIVE and one COMPLETE, plus one OP_DONE per
/// compute op when local ops are not coalesced. For progress reports (fraction done, ETA).
/// With `gpus_per_node` > 0 (the flow model) it adds the fabric's events of each transfer between
/// nodes: FLOW_START, FLOW_DONE and one FLOW_WAKE, a lower bound (a wake made stale by another
/// start or end is not counted), so the total is an estimate there.
/// With `active` (a representative replay's ReplicaMap::active), only the ranks it marks count.
std::uint64_t expected_events(const graph::SlicedGraph& g, bool coalesce_local_ops,
                              std::int64_t gpus_per_node = 0,
                              const std::vector<std::uint8_t>* active = nullptr);

/// Replays the graph. Fills RunResults::ranks (finish, breakdown, memory), timelines and memory
/// of the traced ranks, engine statistics and summary.iteration_time / peak memory; the caller
/// adds the workload figures (FLOPs, tokens, stages). Throws ContractError if a rank never
/// finishes (a deadlocked graph).
RunResults emulate(const graph::SlicedGraph& g, const cost::CostModel& cost,
                   const EmulationOptions& options);
RunResults emulate(const graph::SlicedGraph& g, const Costs& costs,
                   const EmulationOptions& options);

/// The same on the optimistic engine over the processes of `comm` (collective: every process
/// calls it with the same graph and options). The complete results are returned on process 0;
/// other processes get their engine statistics only. Bit-identical to the sequential engine.
/// `g` may be partially loaded (io::read_graph_h5 with a GraphPart) as long as every template
/// this process needs (templates_needed) is; the sequential `emulate` needs all of them.
RunResults emulate_parallel(const graph::SlicedGraph& g, const Costs& costs,
                            const EmulationOptions& options, MPI_Comm comm);

/// emulate_parallel without gathering: every process keeps the results of its own LPs (see
/// DistributedResults); the summary (iteration time = max finish, peak memory = max), engine
/// statistics and the last-finishing rank's row are reduced onto every process. Collective.
/// For io::write_results_h5(DistributedResults, path, comm), which writes results.h5 in parallel.
DistributedResults emulate_distributed(const graph::SlicedGraph& g, const Costs& costs,
                                       const EmulationOptions& options, MPI_Comm comm);

/// Sends the timelines and memory records of every traced rank to process 0 (for trace.json):
/// afterwards process 0's d.local.timelines / memory hold all traced ranks. Collective.
void gather_traces(DistributedResults& d, MPI_Comm comm);

/// Gathers a distributed result onto process 0 (the complete RunResults of emulate_parallel);
/// other processes get the global summary and engine statistics only. Collective.
RunResults gather_results(DistributedResults d, MPI_Comm comm);

/// Owner process of every LP of the emulation (ranks 0..W−1, then one per communicator):
/// "block" gives each process a contiguous block of ranks and each communicator to the owner of
/// its first member; "metis" partitions the rank–communicator graph weighted by the number of
/// messages each pair exchanges.
/// "block" uses only the rank count and the communicator table, so it works on a graph whose
/// templates are not loaded yet; "metis" weighs edges by each class's message counts and needs
/// every template (a ContractError otherwise).
std::vector<std::uint32_t> partition_lps(const graph::SlicedGraph& g, std::uint32_t processes,
                                         const std::string& partition,
                                         const std::vector<std::uint32_t>& dedicated = {});

/// The templates `process` needs under the LP assignment `owner`: the class of every rank it
/// owns, and the class of every member of every communicator it owns (a CommLP reads the op of
/// whichever member arrives last). Uses only the rank map and the communicator table.
std::vector<bool> templates_needed(const graph::SlicedGraph& g,
                                   const std::vector<std::uint32_t>& owner, std::uint32_t process);

}  // namespace scalescope::emu
