#include "pdes/sequential_engine.hpp"

#include <chrono>

#include "core/error.hpp"

namespace scalescope::pdes {

SequentialEngine::SequentialEngine(std::vector<LogicalProcess*> lps)
    : lps_(std::move(lps)), next_seq_(lps_.size(), 0) {}

Event& SequentialEngine::schedule(LpId dst, SimTime t, std::uint32_t priority) {
  SCALESCOPE_EXPECTS(dst < lps_.size());
  Event* e = pool_.allocate();
  e->key = EventKey{t, priority, dst, self_, next_sequence(next_seq_[self_], self_)};
  if (current_ && !(*current_ < e->key))
    throw ContractError(
        fmt::format("LP {} at t={} sent an event (t={}, priority {}) that sorts "
                    "before the event it is handling",
                    self_, now_, t, priority));
  if (capture_)
    capture_->push_back(e);
  else
    queue_.push(e->key, e);
  return *e;
}

void SequentialEngine::check_reversible(Event& e) {
  LogicalProcess* lp = lps_[self_];
  std::vector<std::byte> before, after;
  if (!lp->save_state(before))
    throw ContractError(fmt::format("rollback check: LP {} does not support save_state", self_));
  const Event original = e;
  const std::uint64_t seq = next_seq_[self_];
  std::vector<Event*> sent;
  capture_ = &sent;
  lp->forward(e, *this);
  capture_ = nullptr;
  lp->reverse(e, *this);
  lp->save_state(after);
  for (Event* s : sent) pool_.release(s);
  next_seq_[self_] = seq;
  if (before != after)
    throw ContractError(
        fmt::format("rollback check: LP {} state differs after forward + reverse "
                    "of the event at t={} ns (priority {}, from LP {}, seq {})",
                    self_, e.key.time, e.key.priority, e.key.src, e.key.seq));
  e = original;
}

EngineStats SequentialEngine::run(SimTime end, bool rollback_check) {
  const auto t0 = std::chrono::steady_clock::now();
  EngineStats stats;
  double last_report = 0;
  now_ = 0;
  for (LpId i = 0; i < lps_.size(); ++i) {
    self_ = i;
    lps_[i]->init(*this);
  }
  while (!queue_.empty() && queue_.top_key().time <= end) {
    Event* e = queue_.pop();
    // Hide memory latency at scale: the state of LPs a few events ahead is fetched while this
    // one runs (an LP's own lines at distance 4, the LP object and the event at distance 8).
    if (const auto* far = queue_.peek(8)) {
      prefetch_lines(far->item);  // one line: pooled events are line-aligned
      __builtin_prefetch(lps_[far->key.dst]);
      __builtin_prefetch(&next_seq_[far->key.dst]);
    }
    if (const auto* near = queue_.peek(4)) lps_[near->key.dst]->prefetch(*near->item);
    now_ = e->key.time;
    self_ = e->key.dst;
    LogicalProcess* lp = lps_[self_];
    const EventKey key = e->key;
    current_ = &key;
    if (rollback_check) check_reversible(*e);
    lp->forward(*e, *this);
    lp->commit(*e);
    stats.end_time = now_;
    ++stats.events_processed;
    // The clock is read every 2^16 events only: the check costs nothing per event.
    if (progress_.report && (stats.events_processed & 0xFFFF) == 0) {
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (wall - last_report >= progress_.interval_s) {
        last_report = wall;
        progress_.report(ProgressInfo{now_, stats.events_processed, wall});
      }
    }
    pool_.release(e);
  }
  current_ = nullptr;
  for (LogicalProcess* lp : lps_) lp->finalize();
  stats.events_committed = stats.events_processed;
  stats.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

}  // namespace scalescope::pdes
