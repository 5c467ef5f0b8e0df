// Time Warp (Jefferson 1985) over MPI, in the style of ROSS: reverse computation with the undo
// state in the event, aggressive cancellation by anti-messages, an asynchronous GVT (Mattern's
// two-colour cut, one non-blocking reduction per attempt), fossil collection with commit, commit
// at execution below the model's lookahead bound, an optimism window and a memory throttle.
// This file: node memory, sending, rollback, cancellation, commit, execution and the scheduling
// loop; messages, GVT and fossil collection in optimistic_engine_gvt.cpp
// (pdes/optimistic_engine_impl.hpp).
#include "pdes/optimistic_engine.hpp"

#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <queue>
#include <string>

#include "core/error.hpp"
#include "pdes/event_queue.hpp"
#include "pdes/optimistic_engine_impl.hpp"

namespace scalescope::pdes {

// ---------------------------------------------------------------------------------------------

OptimisticEngine::Impl::Impl(MPI_Comm comm, std::vector<std::uint32_t> owner,
                             const std::function<LogicalProcess*(LpId)>& make_lp,
                             OptimisticConfig config)
    : config_(config), owner_(std::move(owner)) {
  // A private communicator: messages of this engine can never be matched by another engine's
  // receives (a process that finishes first may already run the next engine on `comm`).
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  SCALESCOPE_EXPECTS(config_.batch_events > 0 && config_.gvt_interval > 0 &&
                     config_.lookahead >= 0 &&
                     (config_.lookahead == 0 || !config_.lookahead_edges));
  local_index_.assign(owner_.size(), -1);
  for (LpId i = 0; i < owner_.size(); ++i) {
    SCALESCOPE_EXPECTS(owner_[i] < static_cast<std::uint32_t>(size_));
    if (!is_local(i)) continue;
    local_index_[i] = static_cast<std::int32_t>(lps_.size());
    LogicalProcess* lp = make_lp(i);
    SCALESCOPE_EXPECTS(lp != nullptr);
    lps_.push_back(LocalLp{lp, nullptr, nullptr, 0, lp->has_commit(), false});
  }
  if (size_ > 1 && config_.lookahead_edges) build_lookahead();
  out_.resize(static_cast<std::size_t>(size_));
  flushes_.assign(static_cast<std::size_t>(size_), 0);
  recv_buf_.resize(kPostedReceives);
  recv_req_.assign(kPostedReceives, MPI_REQUEST_NULL);
  recv_bytes_.assign(kPostedReceives, -1);
  for (int s = 0; s < kPostedReceives; ++s) post_receive(s);
  MPI_Type_contiguous(kVoteFields, MPI_INT64_T, &vote_type_);
  MPI_Type_commit(&vote_type_);
  MPI_Op_create(&reduce_votes, 1, &vote_op_);
}

OptimisticEngine::Impl::~Impl() {
  if (gvt_req_ != MPI_REQUEST_NULL) MPI_Wait(&gvt_req_, MPI_STATUS_IGNORE);
  for (MPI_Request& r : recv_req_)
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
  reap_sends(true);
  MPI_Op_free(&vote_op_);
  MPI_Type_free(&vote_type_);
  MPI_Comm_free(&comm_);
}

void OptimisticEngine::Impl::build_lookahead() {
  // Any straggler or cancellation a local LP can see starts as an arrival from another process
  // (one process runs its events in key order) at or after bound_ + the entry gap of the LP it
  // reaches, and travels on along local edges, each adding at least its gap: the least such sum
  // (a shortest path from the entries, Dijkstra) bounds what can still reach the LP.
  const std::size_t n = owner_.size();
  lookahead_.assign(n, kTimeInfinity);
  struct Edge {
    std::uint32_t src, dst;  ///< src as its index in lps_, dst as an LP id
    SimTime gap;
  };
  std::vector<Edge> local_edges;
  config_.lookahead_edges([&](LpId src, LpId dst, SimTime gap) {
    if (src >= n || dst >= n || gap < 0)
      throw ContractError(fmt::format(
          "lookahead graph: edge {} -> {} (gap {} ns) names an LP outside the {} LPs or a "
          "negative gap",
          src, dst, gap, n));
    if (src == dst) return;  // an LP's own events need no bound: it runs them in order
    if (owner_[src] != owner_[dst])
      lookahead_[dst] = std::min(lookahead_[dst], gap);
    else if (is_local(src))
      local_edges.push_back(Edge{static_cast<std::uint32_t>(local_index_[src]), dst, gap});
  });
  std::sort(local_edges.begin(), local_edges.end(),
            [](const Edge& a, const Edge& b) { return a.src < b.src; });
  std::vector<std::size_t> first(lps_.size() + 1, 0);
  for (const Edge& e : local_edges) ++first[e.src + 1];
  for (std::size_t i = 0; i < lps_.size(); ++i) first[i + 1] += first[i];
  using Entry = std::pair<SimTime, LpId>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  for (LpId id = 0; id < n; ++id)
    if (is_local(id) && lookahead_[id] < kTimeInfinity) queue.emplace(lookahead_[id], id);
  while (!queue.empty()) {
    const auto [at, id] = queue.top();
    queue.pop();
    if (at > lookahead_[id]) continue;
    const auto i = static_cast<std::size_t>(local_index_[id]);
    for (std::size_t k = first[i]; k < first[i + 1]; ++k) {
      const Edge& e = local_edges[k];
      if (e.gap >= kTimeInfinity - at || at + e.gap >= lookahead_[e.dst]) continue;
      lookahead_[e.dst] = at + e.gap;
      queue.emplace(at + e.gap, e.dst);
    }
  }
  // The run-ahead bound in simulated time, unless one was given: an event commits at execution
  // only below bound_ + its LP's lookahead, and bound_ ≤ GVT, so past GVT + the largest finite
  // lookahead only the LPs no other process can reach (infinite bound) could; everything else
  // run there is Time Warp state and rollback risk (Llama 3 405B at 131,072 GPUs np 2: a 25 ms
  // window against drifts of 29-50 ms, the same wall time within the noise; docs/engine.md
  // "Issue 42"). Not below least_default_window: a window of a few ns would run in lockstep.
  if (config_.window_at_lookahead && config_.optimism_window == kTimeInfinity) {
    SimTime most = 0;
    for (LpId id = 0; id < n; ++id)
      if (is_local(id) && lookahead_[id] < kTimeInfinity) most = std::max(most, lookahead_[id]);
    MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT64_T, MPI_MAX, comm_);
    if (most >= std::max<SimTime>(1, config_.least_default_window)) config_.optimism_window = most;
  }
}

void OptimisticEngine::Impl::check_lookahead(LpId dst, SimTime t, bool remote) {
  const SimTime gap = t - now_;
  if (remote) {
    if (gap < lookahead_of(dst))
      refuse_send(fmt::format(
          "LP {} at t={} sent an event to LP {} on another process at t={}, closer than the "
          "model's lookahead of {} ns",
          self_, now_, dst, t, lookahead_of(dst)));
    return;
  }
  // Within the process: what reaches `dst` from an arrival must not come sooner than its bound
  // says (lookahead_[dst] ≤ lookahead_[self] + gap on every edge the model declared).
  if (lookahead_.empty()) return;
  const SimTime from = lookahead_[self_], to = lookahead_[dst];
  if (from < kTimeInfinity && (to >= kTimeInfinity || to - from > gap))
    refuse_send(fmt::format(
        "LP {} at t={} sent an event to LP {} at t={}, {} ns later, off the model's lookahead "
        "graph (it bounds arrivals at LP {} {} ns and at LP {} {} ns after the earliest one "
        "from another process)",
        self_, now_, dst, t, gap, self_, from, dst,
        to >= kTimeInfinity ? std::string("never") : std::to_string(to)));
}

Node* OptimisticEngine::Impl::alloc() {
  if (free_.empty()) {
    constexpr std::size_t kChunk = 4096;
    chunks_.push_back(std::make_unique<Node[]>(kChunk));
    Node* base = chunks_.back().get();
    for (std::size_t i = kChunk; i-- > 0;) free_.push_back(base + i);
  }
  Node* n = free_.back();
  free_.pop_back();
  // Freed nodes are cold (fossil collection released them a GVT round ago): fetch the next one's
  // two lines for writing now, so the next send does not stall on them (insert_pending's first
  // load of a reused node was a fifth of np 2's time on the 16k replay).
  if (!free_.empty()) {
    const auto* next = reinterpret_cast<const char*>(free_.back());
    __builtin_prefetch(next, 1);
    __builtin_prefetch(next + 64, 1);
  }
  n->caused_local = n->caused_remote = n->next_caused = nullptr;
  n->from_remote = false;
  n->fault = Fault::None;
  return n;
}

void OptimisticEngine::Impl::release(Node* n) {
  n->state = NodeState::Free;
  free_.push_back(n);
}

void OptimisticEngine::Impl::refuse_send(std::string why) {
  // Inside a handler the error may be speculation's: the event is held (see execute). Outside
  // one (init) it is final.
  if (!current_) throw ContractError(why);
  if (refused_.empty()) refused_ = std::move(why);
}

Event& OptimisticEngine::Impl::schedule(LpId dst, SimTime t, std::uint32_t priority) {
  SCALESCOPE_EXPECTS(dst < owner_.size());
  LocalLp& me = local(self_);
  const EventKey key{t, priority, dst, self_, next_sequence(me.seq, self_)};
  if (current_ && !(current_->ev.key < key)) {
    refuse_send(
        fmt::format("LP {} at t={} sent an event (t={}, priority {}) that sorts "
                    "before the event it is handling",
                    self_, now_, t, priority));
    return scratch_event_;
  }
  const bool remote = !is_local(dst);
  if (current_ && size_ > 1) {
    check_lookahead(dst, t, remote);
    if (!refused_.empty()) return scratch_event_;
  }
  Node* n = alloc();
  n->ev.key = key;
  if (!remote) {
    if (current_) {
      n->next_caused = current_->caused_local;
      current_->caused_local = n;
    }
    // A straggler for another LP rolls it back now; the payload is read only later.
    insert_pending(n);
  } else {
    n->state = NodeState::SentRemote;
    n->dst_proc = owner_[dst];
    if (current_) {
      n->next_caused = current_->caused_remote;
      current_->caused_remote = n;
    }
    outgoing_.push_back(n);  // serialized once the handler has filled the payload
    ++stats_.remote_messages;
  }
  return n->ev;
}

void OptimisticEngine::Impl::insert_pending(Node* n) {
  // Only a key below the high-water mark can sort before an LP's processed events.
  if (n->ev.key < high_water_ && executed_any_) {
    LocalLp& d = local(n->ev.key.dst);
    if (n->ev.key.time < d.final_until) straggler_below_final(n, d);
    if (!d.empty() && n->ev.key < d.last->ev.key) rollback_after(d, n->ev.key);
  }
  n->state = NodeState::Pending;
  heap_.push(n->ev.key, n);
}

void OptimisticEngine::Impl::straggler_below_final(const Node* n, const LocalLp& d) const {
  throw ContractError(fmt::format(
      "optimistic engine: an event for LP {} at t={} (from LP {}) arrived after the LP had "
      "committed an event at t={} at execution: the model's lookahead does not hold",
      n->ev.key.dst, n->ev.key.time, n->ev.key.src, d.final_until));
}

void OptimisticEngine::Impl::rollback_after(LocalLp& lp, const EventKey& key) {
  ++stats_.rollbacks;
  while (!lp.empty() && key < lp.last->ev.key) {
    Node* e = lp.pop_back();
    undo(lp, e);
    e->state = NodeState::Pending;
    heap_.push(e->ev.key, e);
  }
}

void OptimisticEngine::Impl::undo(LocalLp& lp, Node* n) {
  // Rollbacks can happen inside another LP's handler (a straggler it sends): keep its context.
  const SimTime now = now_;
  const LpId self = self_;
  Node* current = current_;
  now_ = n->ev.key.time;
  self_ = n->ev.key.dst;
  current_ = nullptr;
  if (n->fault != Fault::Threw) lp.lp->reverse(n->ev, *this);
  lp.seq = n->saved_seq;
  ++stats_.events_rolled_back;
  --uncommitted_;
  cancel_children(n);
  if (n->fault != Fault::None) {
    n->fault = Fault::None;
    unblock(lp, n->ev.key.dst);
  }
  now_ = now;
  self_ = self;
  current_ = current;
}

void OptimisticEngine::Impl::unblock(LocalLp& lp, LpId id) {
  lp.blocked = false;
  faults_.erase(std::remove_if(faults_.begin(), faults_.end(),
                               [&](const Held& h) { return h.node->ev.key.dst == id; }),
                faults_.end());
  std::size_t kept = 0;
  for (Node* p : parked_) {
    if (p->ev.key.dst == id)
      heap_.push(p->ev.key, p);
    else
      parked_[kept++] = p;
  }
  parked_.resize(kept);
}

void OptimisticEngine::Impl::cancel_children(Node* n) {
  for (Node* c = n->caused_remote; c != nullptr;) {
    Node* next = c->next_caused;
    enqueue_wire(c->dst_proc, c, true);
    ++stats_.anti_messages;
    release(c);
    c = next;
  }
  for (Node* c = n->caused_local; c != nullptr;) {
    Node* next = c->next_caused;
    cancel(c);
    c = next;
  }
  n->caused_local = n->caused_remote = nullptr;
}

/// Cancels an event that exists on this process (sent locally, or received).
void OptimisticEngine::Impl::cancel(Node* n) {
  if (n->state == NodeState::Pending) {
    n->state = NodeState::Cancelled;  // dropped when it reaches the top of the heap
    return;
  }
  SCALESCOPE_EXPECTS(n->state == NodeState::Processed);
  LocalLp& d = local(n->ev.key.dst);
  rollback_after(d, n->ev.key);
  SCALESCOPE_EXPECTS(!d.empty() && d.last == n);
  d.pop_back();
  undo(d, n);
  release(n);
}

void OptimisticEngine::Impl::commit_node(LocalLp& lp, Node* n) {
  if (lp.commits) lp.lp->commit(n->ev);
  ++stats_.events_committed;
  for (Node* c = n->caused_remote; c != nullptr;) {
    Node* next = c->next_caused;
    release(c);
    c = next;
  }
  if (n->from_remote) remote_index_.erase(n);
  release(n);
}

void OptimisticEngine::Impl::commit_all(LocalLp& lp) {
  while (!lp.empty()) {
    Node* n = lp.pop_front();
    SCALESCOPE_EXPECTS(n->fault == Fault::None);
    commit_node(lp, n);
    --uncommitted_;
  }
}

void OptimisticEngine::Impl::execute(Node* n) {
  const auto index = static_cast<std::uint32_t>(local_index_[n->ev.key.dst]);
  LocalLp& d = lps_[index];
  now_ = n->ev.key.time;
  self_ = n->ev.key.dst;
  current_ = n;
  if (high_water_ < n->ev.key || !executed_any_) high_water_ = n->ev.key;
  executed_any_ = true;
  n->saved_seq = d.seq;
  n->caused_local = n->caused_remote = nullptr;
  try {
    d.lp->forward(n->ev, *this);
    if (!refused_.empty()) {
      n->fault = Fault::Completed;
      faults_.push_back(Held{n, ErrorKind::Contract, std::move(refused_)});
    }
  } catch (const std::exception& e) {
    n->fault = Fault::Threw;
    faults_.push_back(Held{n, detail::error_kind(e), e.what()});
  }
  refused_.clear();
  current_ = nullptr;
  n->state = NodeState::Processed;
  ++stats_.events_processed;
  if (n->fault != Fault::None) {
    d.blocked = true;  // its later events wait until a rollback undoes this one, or GVT passes
  } else if (final_at_execution(n->ev.key.time, n->ev.key.dst)) {
    // Below the lookahead bound no straggler can reach this LP and no sender of this event can
    // be rolled back (see docs/engine.md): the event and the LP's earlier ones are final.
    for (Node* o : outgoing_) enqueue_wire(o->dst_proc, o, false);
    outgoing_.clear();
    commit_all(d);
    commit_node(d, n);
    d.final_until = n->ev.key.time;
    ++stats_.committed_at_execution;
    return;
  }
  d.push_back(n);
  n->stamp = ++stamp_;
  kept_.push_back(Kept{n, n->stamp});
  ++uncommitted_;
  for (Node* o : outgoing_) enqueue_wire(o->dst_proc, o, false);
  outgoing_.clear();
}

void OptimisticEngine::Impl::prefetch_ahead() {
  // A pipeline, so that no prefetch waits on a load: the event and its LP's engine entry 12
  // ahead, the LP object 8 ahead (its pointer is cached by then), the model's lines 4 ahead.
  if (const auto* far = heap_.peek(12)) {
    prefetch_lines(far->item);
    __builtin_prefetch(&lps_[static_cast<std::size_t>(local_index_[far->key.dst])]);
  }
  if (const auto* mid = heap_.peek(8)) __builtin_prefetch(local(mid->key.dst).lp);
  if (const auto* near = heap_.peek(4)) local(near->key.dst).lp->prefetch(near->item->ev);
}
OptimisticStats OptimisticEngine::Impl::run(SimTime end) {
  const auto t0 = std::chrono::steady_clock::now();
  start_ = t0;
  now_ = 0;
  current_ = nullptr;
  // One process: events run in key order from one queue and nothing can arrive from elsewhere,
  // so no straggler can ever come: every event is final once executed (the lookahead bound is
  // infinite). Time Warp's bookkeeping (processed lists, fossil collection) is skipped, as the
  // sequential engine skips it; a fault still blocks its LP and is reported at the next round.
  bound_ = size_ == 1 ? kTimeInfinity : std::numeric_limits<SimTime>::min();
  for (LpId id = 0; id < owner_.size(); ++id) {
    if (!is_local(id)) continue;
    self_ = id;
    local(id).lp->init(*this);
    for (Node* o : outgoing_) enqueue_wire(o->dst_proc, o, false);
    outgoing_.clear();
  }
  std::uint32_t idle_polls = 0;
  for (;;) {
    poll();
    bool progressed = false;
    const SimTime horizon = config_.optimism_window >= kTimeInfinity - gvt_
                                ? end
                                : std::min(end, gvt_ + config_.optimism_window);
    for (std::uint32_t k = 0; k < config_.batch_events && !heap_.empty(); ++k) {
      // The top's key, not its node (a cancelled event is dropped once popped): a cold node is
      // read only when it runs.
      const EventKey& top = heap_.top_key();
      if (top.time > horizon) break;
      // The memory throttle and the run-ahead bound hold back new speculation only: never the
      // event at GVT (final, and it lets GVT move), nor an event below the furthest one this
      // process has run (re-execution after a rollback, or an LP catching up), since GVT waits
      // for those; one instant per round would be all GVT could gain.
      if (top.time > gvt_ && !(top < high_water_)) {
        if (uncommitted_ >= config_.max_uncommitted) break;
        // Nor may a process run more than an interval past its share of an open round: without
        // this bound (the synchronous GVT was one) processes that are faster, or favoured by
        // the OS on an oversubscribed node, run away in simulated time until the memory
        // throttle stops them.
        if (round_open_ && since_gvt_ >= 2 * std::uint64_t{config_.gvt_interval}) break;
      }
      Node* n = heap_.pop();
      if (n->state == NodeState::Cancelled) {
        release(n);
        continue;
      }
      if (local(n->ev.key.dst).blocked) {
        parked_.push_back(n);
        continue;
      }
      execute(n);
      prefetch_ahead();
      progressed = true;
      ++since_gvt_;
    }
    flush(false);
    const auto g0 = std::chrono::steady_clock::now();
    bool completed = false;
    if (round_open_)
      completed = round_done(false);
    else if (since_gvt_ >= config_.gvt_interval || !progressed)
      start_round();
    if (completed && (gvt_ == kTimeInfinity || gvt_ > end)) {
      stats_.gvt_s += seconds_since(g0);
      break;
    }
    if (!progressed && !completed) {
      if (++idle_polls > 16) idle_wait();
      stats_.idle_s += seconds_since(g0);
    } else {
      idle_polls = 0;
      stats_.gvt_s += seconds_since(g0);
    }
  }
  drain();
  fossil_collect(kTimeInfinity);  // everything processed is ≤ end and final now
  // Events beyond `end` stay unprocessed; free them.
  heap_.drain([this](Node* n) { release(n); });
  for (Node* p : parked_) release(p);
  parked_.clear();
  for (LocalLp& lp : lps_) lp.lp->finalize();
  stats_.end_time = std::min(gvt_, end);
  stats_.wall_s = seconds_since(t0);
  return stats_;
}

// ---------------------------------------------------------------------------------------------

OptimisticEngine::OptimisticEngine(MPI_Comm comm, std::vector<std::uint32_t> owner,
                                   const std::function<LogicalProcess*(LpId)>& make_lp,
                                   OptimisticConfig config)
    : impl_(std::make_unique<Impl>(comm, std::move(owner), make_lp, config)) {}
OptimisticEngine::~OptimisticEngine() = default;
OptimisticStats OptimisticEngine::run(SimTime end) {
  return impl_->run(end);
}
OptimisticStats OptimisticEngine::total(const OptimisticStats& local) const {
  return impl_->total(local);
}
std::vector<OptimisticStats> OptimisticEngine::gather(const OptimisticStats& local) const {
  return impl_->gather(local);
}

}  // namespace scalescope::pdes
