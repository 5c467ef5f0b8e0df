// The conservative engine (pdes/conservative_engine.hpp): synchronous windows of the model's
// lookahead over MPI, YAWNS-style. Per window: run every local event below T + lookahead in key
// order, then one all-to-all of the events sent to other processes (counts, then the events)
// and one reduction that agrees on the next T (the earliest pending event anywhere) and on
// whether a handler failed.
#include "pdes/conservative_engine.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "pdes/engine_error.hpp"
#include "pdes/event_pool.hpp"
#include "pdes/event_queue.hpp"

namespace scalescope::pdes {

class ConservativeEngine::Impl final : public Context {
 public:
  Impl(MPI_Comm comm, std::vector<std::uint32_t> owner,
       const std::function<LogicalProcess*(LpId)>& make_lp, ConservativeConfig config)
      : config_(std::move(config)), owner_(std::move(owner)) {
    if (config_.lookahead <= 0)
      throw ContractError(
          "conservative engine: the model declares no lookahead between processes (it must be "
          "> 0 ns); use the optimistic engine");
    MPI_Comm_dup(comm, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    SCALESCOPE_EXPECTS(config_.second_phase.empty() ||
                       config_.second_phase.size() == owner_.size());
    two_phase_ = std::any_of(config_.second_phase.begin(), config_.second_phase.end(),
                             [](std::uint8_t z) { return z != 0; });
    lps_.assign(owner_.size(), nullptr);
    next_seq_.assign(owner_.size(), 0);
    for (LpId i = 0; i < owner_.size(); ++i) {
      SCALESCOPE_EXPECTS(owner_[i] < static_cast<std::uint32_t>(size_));
      if (owner_[i] != static_cast<std::uint32_t>(rank_)) continue;
      lps_[i] = make_lp(i);
      SCALESCOPE_EXPECTS(lps_[i] != nullptr);
    }
    out_.resize(static_cast<std::size_t>(size_));
  }
  ~Impl() override { MPI_Comm_free(&comm_); }

  Event& schedule(LpId dst, SimTime t, std::uint32_t priority) override {
    SCALESCOPE_EXPECTS(dst < owner_.size());
    const EventKey key{t, priority, dst, self_, next_sequence(next_seq_[self_], self_)};
    if (current_ && !(*current_ < key))
      throw ContractError(
          fmt::format("LP {} at t={} sent an event (t={}, priority {}) that sorts "
                      "before the event it is handling",
                      self_, now_, t, priority));
    const bool remote = owner_[dst] != static_cast<std::uint32_t>(rank_);
    // What must land in a later window: everything a second-phase LP sends, and what goes to a
    // first-phase LP on another process.
    if (current_ && (second(self_) || (remote && !second(dst))) && t - now_ < config_.lookahead)
      throw ContractError(fmt::format(
          "LP {} at t={} sent an event to LP {}{} at t={}, closer than the model's lookahead of "
          "{} ns",
          self_, now_, dst, remote ? " on another process" : "", t, config_.lookahead));
    if (remote) {
      ++stats_.remote_messages;
      Event* e = pool_.allocate();  // stable until the exchange: the handler fills it later
      e->key = key;
      out_[owner_[dst]].push_back(e);
      return *e;
    }
    Event* e = pool_.allocate();
    e->key = key;
    queue_of(dst).push(e->key, e);
    return *e;
  }

  ConservativeStats run(SimTime end) {
    const auto t0 = std::chrono::steady_clock::now();
    now_ = 0;
    for (LpId i = 0; i < owner_.size(); ++i)
      if (lps_[i] != nullptr) {
        self_ = i;
        lps_[i]->init(*this);
      }
    double last_report = 0;
    for (;;) {
      const auto x0 = std::chrono::steady_clock::now();
      exchange();
      // The next window's start and whether any process failed, in one reduction.
      const SimTime mine = std::min(queue_.empty() ? kTimeInfinity : queue_.top_key().time,
                                    second_.empty() ? kTimeInfinity : second_.top_key().time);
      std::array<std::int64_t, 2> local{mine, failed_ ? 0 : 1}, global{};
      MPI_Allreduce(local.data(), global.data(), 2, MPI_INT64_T, MPI_MIN, comm_);
      stats_.exchange_s += seconds_since(x0);
      if (global[1] == 0)
        detail::throw_earliest(comm_, failed_, failed_key_, failed_kind_, failed_what_);
      const SimTime start = global[0];
      if (start >= kTimeInfinity || start > end) break;
      ++stats_.windows;
      stats_.end_time = start;
      // Every event below `limit` is here: one sent from another process to a first-phase LP,
      // or by a second-phase LP, lies at or after its sender + lookahead, and its sender ran in
      // an earlier window (at or after that window's start, below this one's).
      SimTime limit =
          start >= kTimeInfinity - config_.lookahead ? kTimeInfinity : start + config_.lookahead;
      if (end < kTimeInfinity) limit = std::min(limit, end + 1);  // nothing after `end` runs
      run_phase(queue_, limit);
      if (two_phase_) {
        // The second phase: every event sent to a second-phase LP below the window's end has
        // been sent (by first-phase LPs, in this window or before), here or elsewhere. After a
        // failure only the events before it in key order run (they cannot depend on it).
        const auto y0 = std::chrono::steady_clock::now();
        exchange();
        stats_.exchange_s += seconds_since(y0);
        run_phase(second_, limit);
      }
      if (rank_ == 0 && config_.progress.report) {
        const double wall = seconds_since(t0);
        if (wall - last_report >= config_.progress.interval_s) {
          last_report = wall;
          // Process 0's count times the processes: an estimate, for the fraction done and ETA.
          config_.progress.report(ProgressInfo{
              start, stats_.events_processed * static_cast<std::uint64_t>(size_), wall});
        }
      }
    }
    // Events beyond `end` stay unprocessed; free them.
    while (!queue_.empty()) pool_.release(queue_.pop());
    while (!second_.empty()) pool_.release(second_.pop());
    for (LogicalProcess* lp : lps_)
      if (lp != nullptr) lp->finalize();
    stats_.wall_s = seconds_since(t0);
    return stats_;
  }

  ConservativeStats total(const ConservativeStats& s) const {
    ConservativeStats t = s;
    std::array<std::uint64_t, 2> v{s.events_processed, s.remote_messages}, sum{};
    MPI_Allreduce(v.data(), sum.data(), 2, MPI_UINT64_T, MPI_SUM, comm_);
    t.events_processed = sum[0];
    t.remote_messages = sum[1];
    std::array<double, 2> times{s.wall_s, s.exchange_s}, most{};
    MPI_Allreduce(times.data(), most.data(), 2, MPI_DOUBLE, MPI_MAX, comm_);
    t.wall_s = most[0];
    t.exchange_s = most[1];
    return t;
  }

 private:
  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
  bool second(LpId id) const { return two_phase_ && config_.second_phase[id] != 0; }
  LadderQueue<Event>& queue_of(LpId id) { return second(id) ? second_ : queue_; }

  /// Runs the events of `queue` below `limit` in key order (and, after a failure, only those
  /// before the failed event in key order); a handler's error is kept for the window's end.
  void run_phase(LadderQueue<Event>& queue, SimTime limit) {
    while (!queue.empty() && queue.top_key().time < limit) {
      if (failed_ && !(queue.top_key() < failed_key_)) return;
      Event* e = queue.pop();
      if (const auto* far = queue.peek(8)) {
        prefetch_lines(far->item);
        __builtin_prefetch(lps_[far->key.dst]);
      }
      if (const auto* near = queue.peek(4)) lps_[near->key.dst]->prefetch(*near->item);
      now_ = e->key.time;
      self_ = e->key.dst;
      const EventKey key = e->key;
      current_ = &key;
      try {
        lps_[self_]->forward(*e, *this);
      } catch (const std::exception& x) {
        // Final (nothing here is speculative); thrown at the window's end on every process.
        failed_ = true;
        failed_key_ = key;
        failed_kind_ = detail::error_kind(x);
        failed_what_ = x.what();
        current_ = nullptr;
        pool_.release(e);
        return;
      }
      lps_[self_]->commit(*e);
      current_ = nullptr;
      ++stats_.events_processed;
      pool_.release(e);
    }
  }

  /// Sends every process the events sent to its LPs this window and queues those received.
  void exchange() {
    const auto size = static_cast<std::size_t>(size_);
    std::vector<int> send_bytes(size), recv_bytes(size), send_at(size), recv_at(size);
    std::size_t total_out = 0;
    for (std::size_t p = 0; p < size; ++p) {
      const std::size_t bytes = out_[p].size() * sizeof(Event);
      if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max() / 2))
        throw ContractError(fmt::format(
            "conservative engine: {} events for process {} in one window exceed one MPI message",
            out_[p].size(), p));
      send_bytes[p] = static_cast<int>(bytes);
      total_out += out_[p].size();
    }
    MPI_Alltoall(send_bytes.data(), 1, MPI_INT, recv_bytes.data(), 1, MPI_INT, comm_);
    send_buf_.clear();
    send_buf_.reserve(total_out);
    std::size_t in = 0;
    for (std::size_t p = 0; p < size; ++p) {
      send_at[p] = static_cast<int>(send_buf_.size() * sizeof(Event));
      for (Event* e : out_[p]) {
        send_buf_.push_back(*e);
        pool_.release(e);
      }
      out_[p].clear();
      recv_at[p] = static_cast<int>(in * sizeof(Event));
      in += static_cast<std::size_t>(recv_bytes[p]) / sizeof(Event);
    }
    recv_buf_.resize(in);
    MPI_Alltoallv(send_buf_.data(), send_bytes.data(), send_at.data(), MPI_BYTE, recv_buf_.data(),
                  recv_bytes.data(), recv_at.data(), MPI_BYTE, comm_);
    for (const Event& r : recv_buf_) {
      Event* e = pool_.allocate();
      *e = r;
      queue_of(e->key.dst).push(e->key, e);
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  ConservativeConfig config_;
  std::vector<std::uint32_t> owner_;
  std::vector<LogicalProcess*> lps_;     ///< by LP id; null where another process owns it
  std::vector<std::uint64_t> next_seq_;  ///< per source LP
  EventPool pool_;
  LadderQueue<Event> queue_;   ///< first-phase LPs' events
  LadderQueue<Event> second_;  ///< second-phase LPs' events
  bool two_phase_ = false;
  bool failed_ = false;  ///< a handler failed (at failed_key_): reported at the window's end
  EventKey failed_key_{};
  detail::ErrorKind failed_kind_ = detail::ErrorKind::Other;
  std::string failed_what_;
  std::vector<std::vector<Event*>> out_;  ///< per destination process, this window (pooled)
  std::vector<Event> send_buf_, recv_buf_;
  const EventKey* current_ = nullptr;
  ConservativeStats stats_;
};

ConservativeEngine::ConservativeEngine(MPI_Comm comm, std::vector<std::uint32_t> owner,
                                       const std::function<LogicalProcess*(LpId)>& make_lp,
                                       ConservativeConfig config)
    : impl_(std::make_unique<Impl>(comm, std::move(owner), make_lp, std::move(config))) {}
ConservativeEngine::~ConservativeEngine() = default;
ConservativeStats ConservativeEngine::run(SimTime end) {
  return impl_->run(end);
}
ConservativeStats ConservativeEngine::total(const ConservativeStats& local) const {
  return impl_->total(local);
}

}  // namespace scalescope::pdes
