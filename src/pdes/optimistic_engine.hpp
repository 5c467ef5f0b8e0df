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
  SimTime end_time = 0;
  double wall_s = 0;
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
  OptimisticStats run(SimTime end = kTimeInfinity);
  /// `local` summed (counts) / maxed (times) over all processes. Collective.
  OptimisticStats total(const OptimisticStats& local) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace scalescope::pdes
