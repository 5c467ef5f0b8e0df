#pragma once
/// The sequential engine: one event list in key order; every event is committed as soon as it
/// is processed. The reference every other engine must match bit for bit.
#include <cstdint>
#include <vector>

#include "pdes/event_pool.hpp"
#include "pdes/event_queue.hpp"
#include "pdes/logical_process.hpp"
#include "pdes/progress.hpp"

namespace scalescope::pdes {

struct EngineStats {
  std::uint64_t events_processed = 0;
  std::uint64_t events_committed = 0;
  SimTime end_time = 0;  ///< time of the last committed event
  double wall_s = 0;
};

class SequentialEngine final : private Context {
 public:
  /// `lps[i]` is LP id i; the engine does not own them.
  explicit SequentialEngine(std::vector<LogicalProcess*> lps);

  /// Runs until no event is left or the next one is later than `end`. With `rollback_check`
  /// (ROSS's check mode) every event is first executed forward, reversed, and the LP's state
  /// compared byte for byte with the state before (LogicalProcess::save_state); a difference
  /// throws ContractError naming the LP and the event. Then it is executed for real.
  EngineStats run(SimTime end = kTimeInfinity, bool rollback_check = false);
  /// Reports progress at most once per `reporter.interval_s` of wall time.
  void set_progress(ProgressReporter reporter) { progress_ = std::move(reporter); }

 private:
  Event& schedule(LpId dst, SimTime t, std::uint32_t priority) override;
  void check_reversible(Event& e);

  std::vector<LogicalProcess*> lps_;
  std::vector<std::uint64_t> next_seq_;  ///< per source LP
  EventPool pool_;
  LadderQueue<Event> queue_;
  std::vector<Event*>* capture_ = nullptr;
  const EventKey* current_ = nullptr;  ///< event being handled; null during init
  ProgressReporter progress_;          ///< rollback
                                       ///< check: sends go here, not to the queue
};

}  // namespace scalescope::pdes
