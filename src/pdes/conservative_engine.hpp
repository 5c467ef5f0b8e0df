#pragma once
/// The conservative engine: synchronous windows over MPI (YAWNS, Nicol 1993) for models whose
/// events cross processes at least a positive lookahead after their senders. Each window starts
/// at the earliest pending event anywhere, T, and runs every event below T + lookahead on every
/// process in key order (an event sent to another process inside the window lands at or after
/// its end, so none can arrive late); then the processes exchange what they sent and agree on
/// the next T. No speculation: the sequential engine's pooled 64-byte events, no processed
/// lists, no fossil collection, no rollback. Produces the sequential engine's history exactly.
///
/// Two phases per window where some LPs hear from other processes with no lookahead (the
/// replay's data-parallel communicators receive each ARRIVE at its sender's instant): those
/// *second-phase* LPs run their events of the window only after every first-phase LP has run
/// its own and the processes have exchanged what they sent; everything a second-phase LP sends
/// is at least the lookahead later, so it belongs to a later window. Models where some edge out
/// of such an LP, or between first-phase LPs of different processes, has no lookahead need the
/// optimistic engine.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "pdes/logical_process.hpp"
#include "pdes/progress.hpp"

namespace scalescope::pdes {

struct ConservativeConfig {
  /// Every event sent to an LP on another process, and every event a second-phase LP sends, is
  /// at least this much later than the event that sends it (> 0; events sent to a second-phase
  /// LP are exempt). The engine refuses a send that breaks it (ContractError).
  SimTime lookahead = 0;
  /// Per LP id: 1 for a second-phase LP (see above). Empty: none (one phase per window). The
  /// same vector on every process.
  std::vector<std::uint8_t> second_phase;
  /// Called on process 0 after a window, at most once per interval.
  ProgressReporter progress;
};

struct ConservativeStats {
  std::uint64_t events_processed = 0;  ///< all committed: nothing is speculative
  std::uint64_t remote_messages = 0;   ///< events sent to other processes
  std::uint64_t windows = 0;           ///< synchronous windows (two collectives each)
  SimTime end_time = 0;                ///< the last window's start
  double wall_s = 0;
  double exchange_s = 0;  ///< wall time in the exchange and the window agreement
};

class ConservativeEngine {
 public:
  /// `owner[i]` is the process that owns LP i (same vector on every process). `make_lp(i)` is
  /// called for each LP this process owns (not owned by the engine).
  ConservativeEngine(MPI_Comm comm, std::vector<std::uint32_t> owner,
                     const std::function<LogicalProcess*(LpId)>& make_lp,
                     ConservativeConfig config);
  ~ConservativeEngine();
  ConservativeEngine(const ConservativeEngine&) = delete;
  ConservativeEngine& operator=(const ConservativeEngine&) = delete;

  /// Runs until no event is left anywhere or the next one is later than `end`. Collective over
  /// `comm`. An error from a handler (or a send the engine refuses) is thrown on every process,
  /// with its type and message, at the end of its window: the earliest in key order over the
  /// processes, the one the sequential engine stops at.
  ConservativeStats run(SimTime end = kTimeInfinity);
  /// `local` summed (counts) / maxed (times) over all processes. Collective.
  ConservativeStats total(const ConservativeStats& local) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace scalescope::pdes
