#pragma once
/// The optimistic engine: Time Warp over MPI, one scheduler per process. Produces the same
/// committed history as SequentialEngine for any number of processes and any partition.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "pdes/logical_process.hpp"
#include "pdes/progress.hpp"
#include "pdes/sequential_engine.hpp"

namespace scalescope::pdes {

struct OptimisticConfig {
  std::uint32_t gvt_interval = 4096;        ///< events processed between GVT rounds
  SimTime optimism_window = kTimeInfinity;  ///< never process beyond GVT + window
  std::uint32_t batch_events = 256;         ///< remote events per MPI message (at most)
  /// Memory-based optimism control: a process holding this many processed but uncommitted
  /// events stops and waits for GVT (each costs ~150 bytes until committed).
  std::uint64_t max_uncommitted = 1u << 19;
  /// Test hook: hold back every n-th remote batch for one GVT-free poll cycle, so that events
  /// arrive late and rollbacks and anti-messages are exercised (0 = off).
  std::uint32_t delay_every = 0;
  /// The model's lookahead: every event sent to an LP on another process is at least this much
  /// later than the event that sends it (0: none declared). The engine checks it on every remote
  /// send, and commits an event at once, as the sequential engine does, when it lies below the
  /// bound on any future straggler (GVT of the round before + lookahead).
  SimTime lookahead = 0;
  /// Per-LP lookahead (docs/engine.md "Commit at execution below the lookahead"): when set, the
  /// engine calls it once with a sink and it reports every edge of the model's LP graph,
  /// `edge(src, dst, gap)`: LP `src` may send events to LP `dst` (src ≠ dst), each at least
  /// `gap` ns after the event that sends it. From these the engine derives, per LP, how far
  /// below any straggler it can commit: for an LP fed only through edges of large gaps (a rank
  /// that hears from other processes only as COMPLETEs after a wire time) that is far more than
  /// the global minimum. A send off the declared graph, or closer than its bound, is refused.
  /// `lookahead` must then be 0. Called on every process (each keeps what concerns it).
  std::function<void(const std::function<void(LpId src, LpId dst, SimTime gap)>&)> lookahead_edges;
  /// With `lookahead_edges` and no `optimism_window`: the window is the largest finite per-LP
  /// lookahead over all processes (past it no event of an LP that another process can reach can
  /// commit at execution), where that is at least `least_default_window`; else none.
  bool window_at_lookahead = true;
  SimTime least_default_window = 1;  ///< the replay: 1 µs (a window of ns would be lockstep)
  /// Called on process 0 after a GVT round, at most once per interval.
  ProgressReporter progress;
};

/// Statistics of one process (and, from `total`, summed over processes).
struct OptimisticStats {
  std::uint64_t events_processed = 0;
  std::uint64_t events_committed = 0;
  std::uint64_t events_rolled_back = 0;
  std::uint64_t rollbacks = 0;
  std::uint64_t remote_messages = 0;  ///< remote events sent (not MPI messages)
  std::uint64_t anti_messages = 0;
  std::uint64_t gvt_rounds = 0;
  std::uint64_t committed_at_execution = 0;  ///< below the lookahead bound: never kept
  /// LPs fossil collection looked at (one per LP holding processed events, per round): its
  /// cost beside what it commits
  std::uint64_t fossil_visits = 0;
  /// The furthest past GVT (the last round's) that an event was executed, in simulated ns: the
  /// run-ahead that `optimism_window` bounds (largest over processes in `total`)
  SimTime max_run_ahead = 0;
  SimTime end_time = 0;
  double wall_s = 0;
  double gvt_s = 0;   ///< wall time in the GVT protocol and fossil collection
  double idle_s = 0;  ///< wall time with no event allowed to run (waiting for messages or GVT)
  double efficiency() const {
    return events_processed
               ? static_cast<double>(events_committed) / static_cast<double>(events_processed)
               : 1.0;
  }
};

class OptimisticEngine {
 public:
  /// `owner[i]` is the process that owns LP i (same vector on every process). `make_lp(i)` is
  /// called for each LP this process owns and returns it (not owned by the engine).
  OptimisticEngine(MPI_Comm comm, std::vector<std::uint32_t> owner,
                   const std::function<LogicalProcess*(LpId)>& make_lp,
                   OptimisticConfig config = {});
  ~OptimisticEngine();
  OptimisticEngine(const OptimisticEngine&) = delete;
  OptimisticEngine& operator=(const OptimisticEngine&) = delete;

  /// Runs until GVT passes `end` or no event is left anywhere. Collective over `comm`.
  ///
  /// An error raised while an event executes (an exception from the model's forward, which must
  /// then leave the LP's state unchanged, or a send that breaks the contract) may be an artefact
  /// of speculation: the LP is held until a rollback undoes the event, and the error is thrown,
  /// on every process with the same type and message, only once GVT passes the event (the
  /// earliest such event in key order, the one the sequential engine would have stopped at).
  OptimisticStats run(SimTime end = kTimeInfinity);
  /// `local` summed (counts) / maxed (times) over all processes. Collective.
  OptimisticStats total(const OptimisticStats& local) const;
  /// Every process's `local`, in process order, on every process. Collective.
  std::vector<OptimisticStats> gather(const OptimisticStats& local) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace scalescope::pdes
