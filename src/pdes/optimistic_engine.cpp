// Time Warp (Jefferson 1985) over MPI, in the style of ROSS: reverse computation with the undo
// state in the event, aggressive cancellation by anti-messages, synchronous GVT by a
// message-counting reduction, fossil collection with commit, an optimism window.
#include "pdes/optimistic_engine.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "core/error.hpp"
#include "pdes/event_queue.hpp"

namespace scalescope::pdes {

namespace {

enum class NodeState : std::uint8_t { Free, Pending, Processed, Cancelled, SentRemote };

/// An event plus the engine's bookkeeping, two cache lines. The bookkeeping and the key's time
/// share the first, so fossil collection, which runs long after an event was processed (its
/// lines cold at 16,384 LPs), touches one line per event.
struct alignas(64) Node {
  Node* caused_local = nullptr;   ///< events this one sent to local LPs (owned by their LPs)
  Node* caused_remote = nullptr;  ///< records of events this one sent to other processes (owned)
  Node* next_caused = nullptr;
  Node* prev_processed = nullptr;  ///< Processed: neighbours in its LP's processed list
  Node* next_processed = nullptr;
  std::uint64_t saved_seq = 0;  ///< the LP's send counter before forward
  std::uint32_t dst_proc = 0;   ///< SentRemote: the process it went to
  NodeState state = NodeState::Free;
  bool from_remote = false;  ///< received from another process (indexed by key)
  Event ev;
};
static_assert(std::is_standard_layout_v<Node> && offsetof(Node, ev) == 56 && sizeof(Node) == 128);

/// An event on the wire. `anti` = 1 cancels the event with the same key.
struct Wire {
  EventKey key;
  std::uint32_t anti = 0;
  std::uint32_t pad = 0;
  std::array<std::byte, kPayloadBytes> payload{};
};

struct KeyHash {
  std::size_t operator()(const EventKey& k) const {
    std::uint64_t h = static_cast<std::uint64_t>(k.time) * 0x9E3779B97F4A7C15ull;
    h ^= (static_cast<std::uint64_t>(k.src) << 32 | k.dst) + 0x632BE59BD9B4E019ull + (h << 6) +
         (h >> 2);
    h ^= k.seq * 0xBF58476D1CE4E5B9ull + k.priority + (h << 6) + (h >> 2);
    return static_cast<std::size_t>(h);
  }
};

/// A local LP and its processed, not yet committed events: an intrusive list in key order
/// (oldest first), so the engine's per-LP state stays compact at 16,384+ LPs.
struct LocalLp {
  LogicalProcess* lp = nullptr;
  Node* first = nullptr;
  Node* last = nullptr;
  std::uint64_t seq = 0;  ///< events sent so far (the key's sequence number)
  bool in_dirty = false;  ///< listed in Impl::dirty_
  bool commits = true;    ///< LogicalProcess::has_commit(), cached: skipping the call spares
                          ///< fossil collection a cold read of the LP
  bool empty() const { return last == nullptr; }
  void push_back(Node* n) {
    n->prev_processed = last;
    n->next_processed = nullptr;
    (last ? last->next_processed : first) = n;
    last = n;
  }
  Node* pop_back() {
    Node* n = last;
    last = n->prev_processed;
    (last ? last->next_processed : first) = nullptr;
    return n;
  }
  Node* pop_front() {
    Node* n = first;
    first = n->next_processed;
    (first ? first->prev_processed : last) = nullptr;
    return n;
  }
};

constexpr int kTagEvents = 7;
constexpr int kPostedReceives = 4;

}  // namespace

class OptimisticEngine::Impl final : public Context {
 public:
  Impl(MPI_Comm comm, std::vector<std::uint32_t> owner,
       const std::function<LogicalProcess*(LpId)>& make_lp, OptimisticConfig config);
  ~Impl() override;

  OptimisticStats run(SimTime end);
  OptimisticStats total(const OptimisticStats& local) const;
  Event& schedule(LpId dst, SimTime t, std::uint32_t priority) override;

 private:
  // Node memory.
  Node* alloc();
  void release(Node* n);

  LocalLp& local(LpId id) { return lps_[static_cast<std::size_t>(local_index_[id])]; }
  bool is_local(LpId id) const { return owner_[id] == static_cast<std::uint32_t>(rank_); }

  // Time Warp mechanics.
  void execute(Node* n);
  /// Hides memory latency at scale (see SequentialEngine::run).
  void prefetch_ahead();
  void insert_pending(Node* n);
  void rollback_after(LocalLp& lp, const EventKey& key);
  void undo(LocalLp& lp, Node* n);
  void cancel(Node* n);
  void cancel_children(Node* n);

  // Messages.
  void enqueue_wire(std::uint32_t proc, const Node* n, bool anti);
  void send_buffer(std::uint32_t proc);
  void flush(bool force);
  void post_receive(int slot);
  void poll();
  void deliver(const Wire& w);
  void reap_sends(bool wait);

  // GVT.
  SimTime local_min();
  SimTime gvt_round();
  void report_progress(SimTime gvt);
  void fossil_collect(SimTime gvt);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  OptimisticConfig config_;
  std::vector<std::uint32_t> owner_;
  std::vector<std::int32_t> local_index_;
  std::vector<LocalLp> lps_;
  /// Local LPs (indices in lps_) that may hold processed events: fossil collection visits these
  /// only, so a GVT round costs what was processed since, not the number of LPs.
  std::vector<std::uint32_t> dirty_;

  std::vector<std::unique_ptr<Node[]>> chunks_;
  std::vector<Node*> free_;

  LadderQueue<Node> heap_;

  std::unordered_map<EventKey, Node*, KeyHash> remote_index_;
  Node* current_ = nullptr;      ///< event being executed (null in init)
  std::vector<Node*> outgoing_;  ///< remote sends of the current handler, to serialize

  std::vector<std::vector<Wire>> out_;  ///< per destination process
  std::vector<std::uint32_t> flushes_;  ///< per destination, for the delay hook
  struct InFlight {
    MPI_Request req;
    std::vector<Wire> buf;
  };
  std::deque<InFlight> in_flight_;
  std::vector<std::vector<Wire>> recv_buf_;
  std::vector<MPI_Request> recv_req_;
  std::vector<int> recv_bytes_;   ///< per slot: bytes received, −1 while pending
  std::deque<int> posted_order_;  ///< slots in the order their receives were posted

  std::int64_t sent_ = 0, received_ = 0;
  std::uint64_t committed_everywhere_ = 0;  ///< at the last GVT round
  std::uint64_t uncommitted_ = 0;           ///< processed, not yet committed, on this process
  std::chrono::steady_clock::time_point start_;
  double last_report_ = 0;
  OptimisticStats stats_;
};

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
  SCALESCOPE_EXPECTS(config_.batch_events > 0 && config_.gvt_interval > 0);
  local_index_.assign(owner_.size(), -1);
  for (LpId i = 0; i < owner_.size(); ++i) {
    SCALESCOPE_EXPECTS(owner_[i] < static_cast<std::uint32_t>(size_));
    if (!is_local(i)) continue;
    local_index_[i] = static_cast<std::int32_t>(lps_.size());
    LogicalProcess* lp = make_lp(i);
    SCALESCOPE_EXPECTS(lp != nullptr);
    lps_.push_back(LocalLp{lp, nullptr, nullptr, 0, false, lp->has_commit()});
  }
  out_.resize(static_cast<std::size_t>(size_));
  flushes_.assign(static_cast<std::size_t>(size_), 0);
  recv_buf_.resize(kPostedReceives);
  recv_req_.assign(kPostedReceives, MPI_REQUEST_NULL);
  recv_bytes_.assign(kPostedReceives, -1);
  for (int s = 0; s < kPostedReceives; ++s) post_receive(s);
}

OptimisticEngine::Impl::~Impl() {
  for (MPI_Request& r : recv_req_)
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
  reap_sends(true);
  MPI_Comm_free(&comm_);
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
  n->caused_local = n->caused_remote = n->next_caused = nullptr;
  n->from_remote = false;
  return n;
}

void OptimisticEngine::Impl::release(Node* n) {
  n->state = NodeState::Free;
  free_.push_back(n);
}

Event& OptimisticEngine::Impl::schedule(LpId dst, SimTime t, std::uint32_t priority) {
  SCALESCOPE_EXPECTS(dst < owner_.size());
  LocalLp& me = local(self_);
  Node* n = alloc();
  n->ev.key = EventKey{t, priority, dst, self_, next_sequence(me.seq, self_)};
  if (current_ && !(current_->ev.key < n->ev.key))
    throw ContractError(
        fmt::format("LP {} at t={} sent an event (t={}, priority {}) that sorts "
                    "before the event it is handling",
                    self_, now_, t, priority));
  if (is_local(dst)) {
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
  LocalLp& d = local(n->ev.key.dst);
  if (!d.empty() && n->ev.key < d.last->ev.key) rollback_after(d, n->ev.key);
  n->state = NodeState::Pending;
  heap_.push(n->ev.key, n);
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
  lp.lp->reverse(n->ev, *this);
  lp.seq = n->saved_seq;
  ++stats_.events_rolled_back;
  --uncommitted_;
  cancel_children(n);
  now_ = now;
  self_ = self;
  current_ = current;
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

void OptimisticEngine::Impl::execute(Node* n) {
  const auto index = static_cast<std::uint32_t>(local_index_[n->ev.key.dst]);
  LocalLp& d = lps_[index];
  now_ = n->ev.key.time;
  self_ = n->ev.key.dst;
  current_ = n;
  n->saved_seq = d.seq;
  n->caused_local = n->caused_remote = nullptr;
  d.lp->forward(n->ev, *this);
  current_ = nullptr;
  n->state = NodeState::Processed;
  d.push_back(n);
  if (!d.in_dirty) {
    d.in_dirty = true;
    dirty_.push_back(index);
  }
  ++stats_.events_processed;
  ++uncommitted_;
  for (Node* o : outgoing_) enqueue_wire(o->dst_proc, o, false);
  outgoing_.clear();
}

void OptimisticEngine::Impl::prefetch_ahead() {
  if (const auto* far = heap_.peek(8)) {
    prefetch_lines(far->item);
    __builtin_prefetch(local(far->key.dst).lp);
  }
  if (const auto* near = heap_.peek(4)) local(near->key.dst).lp->prefetch(near->item->ev);
}

// ---- messages -------------------------------------------------------------------------------

void OptimisticEngine::Impl::enqueue_wire(std::uint32_t proc, const Node* n, bool anti) {
  auto& buf = out_[proc];
  Wire w;
  w.key = n->ev.key;
  w.anti = anti ? 1u : 0u;
  if (!anti) w.payload = n->ev.payload;
  buf.push_back(w);
  if (buf.size() >= config_.batch_events) send_buffer(proc);
}

void OptimisticEngine::Impl::send_buffer(std::uint32_t proc) {
  auto& buf = out_[proc];
  if (buf.empty()) return;
  sent_ += static_cast<std::int64_t>(buf.size());
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
  ++received_;
  if (!w.anti) {
    Node* n = alloc();
    n->ev.key = w.key;
    n->ev.payload = w.payload;
    n->from_remote = true;
    // A re-sent event (after its sender rolled back) has the key of the cancelled one; the
    // cancelled one's anti-message was delivered first, so the key is free again.
    const bool fresh = remote_index_.emplace(w.key, n).second;
    SCALESCOPE_EXPECTS(fresh);
    insert_pending(n);
    return;
  }
  auto it = remote_index_.find(w.key);
  SCALESCOPE_EXPECTS(it != remote_index_.end());  // a source's messages arrive in send order
  Node* n = it->second;
  remote_index_.erase(it);
  n->from_remote = false;
  cancel(n);
}

// ---- GVT, fossil collection -----------------------------------------------------------------

SimTime OptimisticEngine::Impl::local_min() {
  while (!heap_.empty() && heap_.top()->state == NodeState::Cancelled) release(heap_.pop());
  return heap_.empty() ? kTimeInfinity : heap_.top_key().time;
}

SimTime OptimisticEngine::Impl::gvt_round() {
  ++stats_.gvt_rounds;
  for (;;) {
    flush(true);
    poll();
    flush(true);
    // Summed: events in transit, and events committed so far (for progress reports).
    std::array<std::int64_t, 2> counts{sent_ - received_,
                                       static_cast<std::int64_t>(stats_.events_committed)};
    std::array<std::int64_t, 2> sums{};
    SimTime mine = local_min(), gvt = 0;
    MPI_Allreduce(counts.data(), sums.data(), 2, MPI_INT64_T, MPI_SUM, comm_);
    const std::int64_t total = sums[0];
    committed_everywhere_ = static_cast<std::uint64_t>(sums[1]);
    MPI_Allreduce(&mine, &gvt, 1, MPI_INT64_T, MPI_MIN, comm_);
    // No event in transit anywhere (every event sent was delivered), so the earliest pending
    // event bounds every future rollback: that is GVT.
    if (total == 0) return gvt;
  }
}

void OptimisticEngine::Impl::report_progress(SimTime gvt) {
  if (rank_ != 0 || !config_.progress.report || gvt == kTimeInfinity) return;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (wall - last_report_ < config_.progress.interval_s) return;
  last_report_ = wall;
  config_.progress.report(ProgressInfo{gvt, committed_everywhere_, wall});
}

void OptimisticEngine::Impl::fossil_collect(SimTime gvt) {
  std::size_t kept = 0;
  for (const std::uint32_t index : dirty_) {
    LocalLp& lp = lps_[index];
    while (!lp.empty() && lp.first->ev.key.time < gvt) {
      Node* n = lp.pop_front();
      if (lp.commits) lp.lp->commit(n->ev);
      ++stats_.events_committed;
      --uncommitted_;
      for (Node* c = n->caused_remote; c != nullptr;) {
        Node* next = c->next_caused;
        release(c);
        c = next;
      }
      if (n->from_remote) remote_index_.erase(n->ev.key);
      release(n);
    }
    if (lp.empty())
      lp.in_dirty = false;
    else
      dirty_[kept++] = index;
  }
  dirty_.resize(kept);
}

OptimisticStats OptimisticEngine::Impl::run(SimTime end) {
  const auto t0 = std::chrono::steady_clock::now();
  start_ = t0;
  now_ = 0;
  current_ = nullptr;
  for (LpId id = 0; id < owner_.size(); ++id) {
    if (!is_local(id)) continue;
    self_ = id;
    local(id).lp->init(*this);
    for (Node* o : outgoing_) enqueue_wire(o->dst_proc, o, false);
    outgoing_.clear();
  }
  SimTime gvt = 0;
  std::uint64_t since_gvt = 0;
  for (;;) {
    poll();
    bool progressed = false;
    const SimTime horizon = config_.optimism_window >= kTimeInfinity - gvt
                                ? end
                                : std::min(end, gvt + config_.optimism_window);
    for (std::uint32_t k = 0; k < config_.batch_events; ++k) {
      if (local_min() > horizon || heap_.empty() || uncommitted_ >= config_.max_uncommitted) break;
      execute(heap_.pop());
      prefetch_ahead();
      progressed = true;
      ++since_gvt;
    }
    flush(false);
    if (since_gvt >= config_.gvt_interval || !progressed) {
      gvt = gvt_round();
      since_gvt = 0;
      fossil_collect(gvt);
      report_progress(gvt);
      if (gvt == kTimeInfinity || gvt > end) break;
    }
  }
  fossil_collect(kTimeInfinity);  // everything processed is ≤ end and final now
  // Events beyond `end` stay unprocessed; free them.
  heap_.drain([this](Node* n) { release(n); });
  for (LocalLp& lp : lps_) lp.lp->finalize();
  stats_.end_time = std::min(gvt, end);
  stats_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats_;
}

OptimisticStats OptimisticEngine::Impl::total(const OptimisticStats& s) const {
  std::array<std::uint64_t, 7> v{s.events_processed, s.events_committed, s.events_rolled_back,
                                 s.rollbacks,        s.remote_messages,  s.anti_messages,
                                 s.gvt_rounds};
  std::array<std::uint64_t, 7> sum{};
  MPI_Allreduce(v.data(), sum.data(), 7, MPI_UINT64_T, MPI_SUM, comm_);
  OptimisticStats t;
  t.events_processed = sum[0];
  t.events_committed = sum[1];
  t.events_rolled_back = sum[2];
  t.rollbacks = sum[3];
  t.remote_messages = sum[4];
  t.anti_messages = sum[5];
  t.gvt_rounds = s.gvt_rounds;  // every process takes part in every round
  MPI_Allreduce(&s.end_time, &t.end_time, 1, MPI_INT64_T, MPI_MAX, comm_);
  MPI_Allreduce(&s.wall_s, &t.wall_s, 1, MPI_DOUBLE, MPI_MAX, comm_);
  return t;
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

}  // namespace scalescope::pdes
