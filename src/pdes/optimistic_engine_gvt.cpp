// The optimistic engine (pdes/optimistic_engine_impl.hpp): the exchange of events and
// anti-messages over MPI, Mattern's asynchronous GVT, fault reports, fossil collection, progress
// reports and the statistics' reductions over the processes.
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "pdes/optimistic_engine_impl.hpp"

namespace scalescope::pdes {

// ---- messages -------------------------------------------------------------------------------

void OptimisticEngine::Impl::enqueue_wire(std::uint32_t proc, const Node* n, bool anti) {
  auto& buf = out_[proc];
  Wire w;
  w.key = n->ev.key;
  w.anti = anti ? 1u : 0u;
  if (!anti) w.payload = n->ev.payload;
  red_min_ = std::min(red_min_, w.key.time);
  red_sender_min_ = std::min(red_sender_min_, now_);  // the sender (or the undone event)
  buf.push_back(w);
  if (buf.size() >= config_.batch_events) send_buffer(proc);
}

void OptimisticEngine::Impl::send_buffer(std::uint32_t proc) {
  auto& buf = out_[proc];
  if (buf.empty()) return;
  const std::uint32_t colour = epoch_ & 1u;
  for (Wire& w : buf) w.colour = colour;
  sent_[colour] += static_cast<std::int64_t>(buf.size());
  in_flight_.push_back(InFlight{MPI_REQUEST_NULL, std::move(buf)});
  InFlight& f = in_flight_.back();
  MPI_Isend(f.buf.data(), static_cast<int>(f.buf.size() * sizeof(Wire)), MPI_BYTE,
            static_cast<int>(proc), kTagEvents, comm_, &f.req);
  buf = std::vector<Wire>{};
  buf.reserve(config_.batch_events);
}

void OptimisticEngine::Impl::flush(bool force) {
  for (std::uint32_t p = 0; p < static_cast<std::uint32_t>(size_); ++p) {
    if (out_[p].empty()) continue;
    // Test hook: hold every n-th partial batch back for one round, so events arrive late.
    if (!force && config_.delay_every > 0 && ++flushes_[p] % config_.delay_every == 0) continue;
    send_buffer(p);
  }
  reap_sends(false);
}

void OptimisticEngine::Impl::reap_sends(bool wait) {
  while (!in_flight_.empty()) {
    int done = 0;
    if (wait)
      MPI_Wait(&in_flight_.front().req, MPI_STATUS_IGNORE), done = 1;
    else
      MPI_Test(&in_flight_.front().req, &done, MPI_STATUS_IGNORE);
    if (!done) break;
    in_flight_.pop_front();
  }
}

void OptimisticEngine::Impl::post_receive(int slot) {
  auto& buf = recv_buf_[static_cast<std::size_t>(slot)];
  buf.resize(config_.batch_events);
  recv_bytes_[static_cast<std::size_t>(slot)] = -1;
  MPI_Irecv(buf.data(), static_cast<int>(buf.size() * sizeof(Wire)), MPI_BYTE, MPI_ANY_SOURCE,
            kTagEvents, comm_, &recv_req_[static_cast<std::size_t>(slot)]);
  posted_order_.push_back(slot);
}

void OptimisticEngine::Impl::poll() {
  if (size_ == 1) return;
  std::array<int, kPostedReceives> index{};
  std::array<MPI_Status, kPostedReceives> status{};
  for (;;) {
    int count = 0;
    MPI_Testsome(kPostedReceives, recv_req_.data(), &count, index.data(), status.data());
    if (count == MPI_UNDEFINED || count == 0) return;
    for (int i = 0; i < count; ++i) {
      int bytes = 0;
      MPI_Get_count(&status[static_cast<std::size_t>(i)], MPI_BYTE, &bytes);
      recv_bytes_[static_cast<std::size_t>(index[static_cast<std::size_t>(i)])] = bytes;
    }
    // Receives from any source match messages in the order they were posted, and one source's
    // messages are non-overtaking, so delivering completed slots in posting order delivers each
    // source's events (and anti-messages) in the order they were sent.
    while (!posted_order_.empty() &&
           recv_bytes_[static_cast<std::size_t>(posted_order_.front())] >= 0) {
      const int slot = posted_order_.front();
      posted_order_.pop_front();
      const auto& buf = recv_buf_[static_cast<std::size_t>(slot)];
      const std::size_t n =
          static_cast<std::size_t>(recv_bytes_[static_cast<std::size_t>(slot)]) / sizeof(Wire);
      for (std::size_t k = 0; k < n; ++k) deliver(buf[k]);
      post_receive(slot);
    }
  }
}

void OptimisticEngine::Impl::deliver(const Wire& w) {
  ++received_[w.colour & 1u];
  if (discard_) return;
  if (!w.anti) {
    Node* n = alloc();
    n->ev.key = w.key;
    n->ev.payload = w.payload;
    n->from_remote = true;
    // A re-sent event (after its sender rolled back) has the key of the cancelled one; the
    // cancelled one's anti-message was delivered first, so the key is free again.
    remote_index_.insert(n);
    insert_pending(n);
    return;
  }
  Node* n = remote_index_.take(w.key);
  SCALESCOPE_EXPECTS(n != nullptr);  // a source's messages arrive in send order
  n->from_remote = false;
  cancel(n);
}

// ---- GVT, fossil collection -----------------------------------------------------------------

SimTime OptimisticEngine::Impl::local_min() {
  while (!heap_.empty() && heap_.top()->state == NodeState::Cancelled) release(heap_.pop());
  return heap_.empty() ? kTimeInfinity : heap_.top_key().time;
}

void OptimisticEngine::Impl::start_round() {
  // The cut: everything this process sent so far goes out in the old colour; from here on its
  // messages are red, and the round waits until every white one has been received.
  flush(true);
  ++epoch_;
  red_min_ = red_sender_min_ = kTimeInfinity;
  round_open_ = true;
  // One interval is this round's share; a lead beyond it is carried into the next round, so a
  // process cannot outrun the others by more than the bound in run() however often it starts.
  const std::uint64_t interval = config_.gvt_interval;
  since_gvt_ = since_gvt_ > interval ? since_gvt_ - interval : 0;
  ++stats_.gvt_rounds;
  vote();
}

void OptimisticEngine::Impl::vote() {
  poll();
  const std::uint32_t white = (epoch_ - 1) & 1u;
  vote_out_.in_transit = sent_[white] - received_[white];
  vote_out_.committed = static_cast<std::int64_t>(stats_.events_committed);
  vote_out_.min_time = std::min(local_min(), red_min_);
  vote_out_.min_red_sender = red_sender_min_;
  vote_out_.min_parked = kTimeInfinity;
  for (const Node* p : parked_)
    if (p->state != NodeState::Cancelled)
      vote_out_.min_parked = std::min(vote_out_.min_parked, p->ev.key.time);
  vote_out_.min_fault = kTimeInfinity;
  for (const Held& h : faults_)
    vote_out_.min_fault = std::min(vote_out_.min_fault, h.node->ev.key.time);
  MPI_Iallreduce(&vote_out_, &vote_in_, 1, vote_type_, vote_op_, comm_, &gvt_req_);
}

bool OptimisticEngine::Impl::round_done(bool wait) {
  int done = 0;
  if (wait)
    MPI_Wait(&gvt_req_, MPI_STATUS_IGNORE), done = 1;
  else
    MPI_Test(&gvt_req_, &done, MPI_STATUS_IGNORE);
  if (!done) return false;
  if (vote_in_.in_transit != 0) {
    // A white event is still on its way: vote again (the minimum may have dropped meanwhile).
    vote();
    return false;
  }
  // Every white event was received before each vote, and red ones are bounded by their
  // senders' red minima: nothing can ever arrive below the minimum. A held fault below every
  // event that is not itself held is final: no rollback can undo it any more.
  if (vote_in_.min_fault < vote_in_.min_time) report_fault();
  committed_everywhere_ = static_cast<std::uint64_t>(vote_in_.committed);
  // How far past GVT this process ran since the last round: GVT changes only here and never
  // falls, and high_water_ (the furthest event executed) never falls, so its gap to the GVT
  // ending now is the largest any event executed meanwhile had (and no more than an earlier
  // round's gap where the furthest event is older): the run-ahead, off the event loop.
  if (executed_any_) stats_.max_run_ahead = std::max(stats_.max_run_ahead, high_water_.time - gvt_);
  gvt_ = std::min(vote_in_.min_time, vote_in_.min_parked);
  // Every white event has arrived, and an event still to come is sent by an event not yet
  // processed (at or after GVT) or is a red one already sent, whose sender is at or after the
  // earliest red sender: every future arrival lies at or after that bound + lookahead, so an
  // event below it is final once executed (docs/engine.md derives this).
  if ((config_.lookahead > 0 || !lookahead_.empty()) && size_ > 1)
    bound_ = std::min(gvt_, vote_in_.min_red_sender);
  round_open_ = false;
  fossil_collect(gvt_);
  report_progress();
  return true;
}

void OptimisticEngine::Impl::report_fault() {
  // The earliest final fault in key order, over all processes: the one the sequential engine
  // would have stopped at.
  const Held* mine = nullptr;
  for (const Held& h : faults_)
    if (h.node->ev.key.time < vote_in_.min_time && (!mine || h.node->ev.key < mine->node->ev.key))
      mine = &h;
  const EventKey key = mine ? mine->node->ev.key : EventKey{};
  const ErrorKind kind = mine ? mine->kind : ErrorKind::Other;
  const std::string what = mine ? mine->what : std::string();
  drain();
  detail::throw_earliest(comm_, mine != nullptr, key, kind, what);
}

void OptimisticEngine::Impl::drain() {
  // Receives (and drops) every event still in transit, so no send is left unmatched when the
  // engine stops: blocking rounds of (all sent − all received) until it is zero.
  discard_ = true;
  for (;;) {
    flush(true);
    poll();
    std::int64_t mine = sent_[0] + sent_[1] - received_[0] - received_[1], sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT64_T, MPI_SUM, comm_);
    if (sum == 0) break;
  }
  reap_sends(true);
}

void OptimisticEngine::Impl::report_progress() {
  if (rank_ != 0 || !config_.progress.report || gvt_ == kTimeInfinity) return;
  const double wall = seconds_since(start_);
  if (wall - last_report_ < config_.progress.interval_s) return;
  last_report_ = wall;
  config_.progress.report(ProgressInfo{gvt_, committed_everywhere_, wall});
}

void OptimisticEngine::Impl::fossil_collect(SimTime gvt) {
  const std::size_t count = kept_.size();
  std::size_t i = kept_head_;
  for (; i < count; ++i) {
    // The nodes are cold by now: a pipeline of prefetches (the node 16 ahead, the LP's engine
    // entry of the node 8 ahead, whose line is there by then).
    if (i + 16 < count) __builtin_prefetch(kept_[i + 16].node);
    if (i + 8 < count) {
      const Node* ahead = kept_[i + 8].node;
      if (ahead->state == NodeState::Processed) __builtin_prefetch(&local(ahead->ev.key.dst));
    }
    const Kept& k = kept_[i];
    Node* n = k.node;
    if (n->state != NodeState::Processed || n->stamp != k.stamp) continue;  // see kept_
    if (n->ev.key.time >= gvt) break;
    LocalLp& lp = local(n->ev.key.dst);
    SCALESCOPE_EXPECTS(lp.first == n && n->fault == Fault::None);  // final faults reported first
    lp.pop_front();
    commit_node(lp, n);
    --uncommitted_;
  }
  stats_.fossil_visits += i - kept_head_;
  kept_head_ = i;
  if (kept_head_ == kept_.size()) {
    kept_.clear();
    kept_head_ = 0;
  } else if (kept_head_ >= 4096 && 2 * kept_head_ >= kept_.size()) {
    kept_.erase(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(kept_head_));
    kept_head_ = 0;
  }
}

void OptimisticEngine::Impl::idle_wait() {
  // Nothing may run here until a message arrives or the round completes: wait without taking a
  // core from the processes that have work (MPI's own waits spin).
  static constexpr timespec kNap{0, 20'000};
  nanosleep(&kNap, nullptr);
}
OptimisticStats OptimisticEngine::Impl::total(const OptimisticStats& s) const {
  std::array<std::uint64_t, 8> v{
      s.events_processed, s.events_committed, s.events_rolled_back,     s.rollbacks,
      s.remote_messages,  s.anti_messages,    s.committed_at_execution, s.fossil_visits};
  std::array<std::uint64_t, 8> sum{};
  MPI_Allreduce(v.data(), sum.data(), 8, MPI_UINT64_T, MPI_SUM, comm_);
  OptimisticStats t;
  t.events_processed = sum[0];
  t.events_committed = sum[1];
  t.events_rolled_back = sum[2];
  t.rollbacks = sum[3];
  t.remote_messages = sum[4];
  t.anti_messages = sum[5];
  t.committed_at_execution = sum[6];
  t.fossil_visits = sum[7];
  t.gvt_rounds = s.gvt_rounds;  // every process takes part in every round
  std::array<SimTime, 2> late{s.end_time, s.max_run_ahead}, latest{};
  MPI_Allreduce(late.data(), latest.data(), 2, MPI_INT64_T, MPI_MAX, comm_);
  t.end_time = latest[0];
  t.max_run_ahead = latest[1];
  std::array<double, 3> times{s.wall_s, s.gvt_s, s.idle_s}, most{};
  MPI_Allreduce(times.data(), most.data(), 3, MPI_DOUBLE, MPI_MAX, comm_);
  t.wall_s = most[0];
  t.gvt_s = most[1];
  t.idle_s = most[2];
  return t;
}

std::vector<OptimisticStats> OptimisticEngine::Impl::gather(const OptimisticStats& s) const {
  static_assert(std::is_trivially_copyable_v<OptimisticStats>);
  std::vector<OptimisticStats> all(static_cast<std::size_t>(size_));
  MPI_Allgather(&s, sizeof(OptimisticStats), MPI_BYTE, all.data(), sizeof(OptimisticStats),
                MPI_BYTE, comm_);
  return all;
}

}  // namespace scalescope::pdes
