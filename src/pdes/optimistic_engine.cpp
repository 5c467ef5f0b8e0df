// Time Warp (Jefferson 1985) over MPI, in the style of ROSS: reverse computation with the undo
// state in the event, aggressive cancellation by anti-messages, an asynchronous GVT (Mattern's
// two-colour cut, one non-blocking reduction per attempt), fossil collection with commit, commit
// at execution below the model's lookahead bound, an optimism window and a memory throttle.
#include "pdes/optimistic_engine.hpp"

#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <deque>
#include <exception>
#include <string>

#include "core/error.hpp"
#include "pdes/event_queue.hpp"

namespace scalescope::pdes {

namespace {

enum class NodeState : std::uint8_t { Free, Pending, Processed, Cancelled, SentRemote };

/// Why an executed event is held as an error (see OptimisticEngine::run).
enum class Fault : std::uint8_t {
  None,
  Completed,  ///< forward returned (the engine refused one of its sends): reverse undoes it
  Threw,      ///< forward threw, leaving the state unchanged: nothing to reverse
};

/// An event plus the engine's bookkeeping, two cache lines. The bookkeeping and the key's time
/// share the first, so fossil collection, which runs long after an event was processed (its
/// lines cold at 16,384 LPs), touches one line per event.
struct alignas(64) Node {
  Node* caused_local = nullptr;   ///< events this one sent to local LPs (owned by their LPs)
  Node* caused_remote = nullptr;  ///< records of events this one sent to other processes (owned)
  /// In its sender's caused list; for an event received from another process (whose sender is
  /// elsewhere), the next node in its remote-index bucket.
  Node* next_caused = nullptr;
  Node* prev_processed = nullptr;  ///< Processed: neighbours in its LP's processed list
  Node* next_processed = nullptr;
  std::uint64_t saved_seq = 0;  ///< the LP's send counter before forward
  std::uint32_t dst_proc = 0;   ///< SentRemote: the process it went to
  NodeState state = NodeState::Free;
  bool from_remote = false;  ///< received from another process (in the remote index)
  Fault fault = Fault::None;
  Event ev;
};
static_assert(std::is_standard_layout_v<Node> && offsetof(Node, ev) == 56 && sizeof(Node) == 128);

/// An event on the wire. `anti` = 1 cancels the event with the same key; `colour` is the parity
/// of the sender's GVT epoch when it was sent (Mattern's colour).
struct Wire {
  EventKey key;
  std::uint32_t anti = 0;
  std::uint32_t colour = 0;
  std::array<std::byte, kPayloadBytes> payload{};
};

std::uint64_t key_hash(const EventKey& k) {
  std::uint64_t h = static_cast<std::uint64_t>(k.time) * 0x9E3779B97F4A7C15ull;
  h ^= (static_cast<std::uint64_t>(k.src) << 32 | k.dst) + 0x632BE59BD9B4E019ull + (h << 6) +
       (h >> 2);
  h ^= k.seq * 0xBF58476D1CE4E5B9ull + k.priority + (h << 6) + (h >> 2);
  return h ^ (h >> 29);
}

/// Events received from other processes, by key, so an anti-message finds its event: chained
/// through the nodes themselves (no allocation per event; the table doubles as it fills).
class RemoteIndex {
 public:
  void insert(Node* n) {
    if (count_ >= buckets_.size()) grow();
    Node*& head = buckets_[slot(n->ev.key)];
    n->next_caused = head;
    head = n;
    ++count_;
  }
  /// Removes and returns the event with `key`, or null.
  Node* take(const EventKey& key) {
    if (buckets_.empty()) return nullptr;
    for (Node** p = &buckets_[slot(key)]; *p != nullptr; p = &(*p)->next_caused)
      if ((*p)->ev.key == key) {
        Node* n = *p;
        *p = n->next_caused;
        n->next_caused = nullptr;
        --count_;
        return n;
      }
    return nullptr;
  }
  void erase(Node* n) { SCALESCOPE_EXPECTS(take(n->ev.key) == n); }

 private:
  std::size_t slot(const EventKey& k) const { return key_hash(k) & (buckets_.size() - 1); }
  void grow() {
    std::vector<Node*> old = std::move(buckets_);
    buckets_.assign(std::max<std::size_t>(1024, old.size() * 2), nullptr);
    for (Node* head : old)
      for (Node* n = head; n != nullptr;) {
        Node* next = n->next_caused;
        Node*& b = buckets_[slot(n->ev.key)];
        n->next_caused = b;
        b = n;
        n = next;
      }
  }
  std::vector<Node*> buckets_;
  std::size_t count_ = 0;
};

/// A local LP and its processed, not yet committed events: an intrusive list in key order
/// (oldest first), so the engine's per-LP state stays compact at 16,384+ LPs and fossil
/// collection stops at the first event it keeps.
struct LocalLp {
  LogicalProcess* lp = nullptr;
  Node* first = nullptr;
  Node* last = nullptr;
  std::uint64_t seq = 0;  ///< events sent so far (the key's sequence number)
  bool in_dirty = false;  ///< listed in Impl::dirty_
  bool commits = true;    ///< LogicalProcess::has_commit(), cached: skipping the call spares
                          ///< fossil collection a cold read of the LP
  bool blocked = false;   ///< holds a faulted event: its later events wait (Impl::parked_)
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

/// What one process brings to a GVT reduction; reduced field by field (two sums, then minima).
struct GvtVote {
  std::int64_t in_transit = 0;             ///< white events sent − white events received
  std::int64_t committed = 0;              ///< events committed so far
  SimTime min_time = kTimeInfinity;        ///< earliest pending (not held) or red event sent
  SimTime min_parked = kTimeInfinity;      ///< earliest pending event held behind a fault
  SimTime min_fault = kTimeInfinity;       ///< earliest faulted event
  SimTime min_red_sender = kTimeInfinity;  ///< earliest event that sent a red message
};
constexpr int kVoteFields = 6;
static_assert(sizeof(GvtVote) == kVoteFields * sizeof(std::int64_t));

void reduce_votes(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const GvtVote*>(in);
  auto* b = static_cast<GvtVote*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i].in_transit += a[i].in_transit;
    b[i].committed += a[i].committed;
    b[i].min_time = std::min(b[i].min_time, a[i].min_time);
    b[i].min_parked = std::min(b[i].min_parked, a[i].min_parked);
    b[i].min_fault = std::min(b[i].min_fault, a[i].min_fault);
    b[i].min_red_sender = std::min(b[i].min_red_sender, a[i].min_red_sender);
  }
}

/// The error types a held fault may carry, so every process rethrows the same one.
enum class ErrorKind : int { Input, Io, Contract, Other };

[[noreturn]] void throw_kind(ErrorKind kind, const std::string& what) {
  switch (kind) {
    case ErrorKind::Input:
      throw InputError(what);
    case ErrorKind::Io:
      throw IoError(what);
    case ErrorKind::Contract:
      throw ContractError(what);
    case ErrorKind::Other:
      break;
  }
  throw std::runtime_error(what);
}

constexpr int kTagEvents = 7;
constexpr int kPostedReceives = 4;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

class OptimisticEngine::Impl final : public Context {
 public:
  Impl(MPI_Comm comm, std::vector<std::uint32_t> owner,
       const std::function<LogicalProcess*(LpId)>& make_lp, OptimisticConfig config);
  ~Impl() override;

  OptimisticStats run(SimTime end);
  OptimisticStats total(const OptimisticStats& local) const;
  std::vector<OptimisticStats> gather(const OptimisticStats& local) const;
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
  /// Commits `n` (processed, final) and frees it with the records of its remote sends.
  void commit_node(LocalLp& lp, Node* n);
  /// Commits every processed event of `lp` (all final), oldest first.
  void commit_all(LocalLp& lp);
  void refuse_send(std::string why);
  void unblock(LocalLp& lp, LpId id);

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
  void start_round();
  void vote();
  /// Tests the open round; true once it completed (gvt_ holds the new GVT).
  bool round_done(bool wait);
  [[noreturn]] void report_fault();
  void drain();
  void report_progress();
  void fossil_collect(SimTime gvt);
  void idle_wait();

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
  /// Every processed key is below this (the largest key executed so far): a new event above it
  /// cannot be a straggler, so no LP need be looked at.
  EventKey high_water_{};
  bool executed_any_ = false;

  RemoteIndex remote_index_;
  Node* current_ = nullptr;      ///< event being executed (null in init)
  std::vector<Node*> outgoing_;  ///< remote sends of the current handler, to serialize
  Event scratch_event_{};        ///< a refused send's payload goes here
  std::string refused_;          ///< why the current handler's send was refused (empty: none)

  // Faults (see run): executed events held as errors, and the events of their LPs held back.
  struct Held {
    Node* node;
    ErrorKind kind;
    std::string what;
  };
  std::vector<Held> faults_;
  std::vector<Node*> parked_;

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
  bool discard_ = false;          ///< drain(): received events are counted, not delivered

  // GVT (Mattern 1993): epoch_ counts the rounds started; a message's colour is the parity of
  // its sender's epoch. Counts are cumulative per colour: every earlier message of a colour was
  // received before the round that reuses it began.
  std::uint32_t epoch_ = 0;
  std::array<std::int64_t, 2> sent_{}, received_{};
  SimTime red_min_ = kTimeInfinity;         ///< earliest event (or anti-message) sent this epoch
  SimTime red_sender_min_ = kTimeInfinity;  ///< earliest event that sent one this epoch
  bool round_open_ = false;
  MPI_Request gvt_req_ = MPI_REQUEST_NULL;
  GvtVote vote_out_, vote_in_;
  MPI_Datatype vote_type_ = MPI_DATATYPE_NULL;
  MPI_Op vote_op_ = MPI_OP_NULL;
  SimTime gvt_ = 0;              ///< the last GVT
  SimTime safe_ = 0;             ///< events below this are final when executed (see execute)
  std::uint64_t since_gvt_ = 0;  ///< events processed since the last round began

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
  SCALESCOPE_EXPECTS(config_.batch_events > 0 && config_.gvt_interval > 0 &&
                     config_.lookahead >= 0);
  local_index_.assign(owner_.size(), -1);
  for (LpId i = 0; i < owner_.size(); ++i) {
    SCALESCOPE_EXPECTS(owner_[i] < static_cast<std::uint32_t>(size_));
    if (!is_local(i)) continue;
    local_index_[i] = static_cast<std::int32_t>(lps_.size());
    LogicalProcess* lp = make_lp(i);
    SCALESCOPE_EXPECTS(lp != nullptr);
    lps_.push_back(LocalLp{lp, nullptr, nullptr, 0, false, lp->has_commit(), false});
  }
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
  if (remote && current_ && t - now_ < config_.lookahead) {
    refuse_send(
        fmt::format("LP {} at t={} sent an event to LP {} on another process at t={}, "
                    "closer than the model's lookahead of {} ns",
                    self_, now_, dst, t, config_.lookahead));
    return scratch_event_;
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
    if (!d.empty() && n->ev.key < d.last->ev.key) rollback_after(d, n->ev.key);
  }
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
    const ErrorKind kind = dynamic_cast<const InputError*>(&e)      ? ErrorKind::Input
                           : dynamic_cast<const IoError*>(&e)       ? ErrorKind::Io
                           : dynamic_cast<const ContractError*>(&e) ? ErrorKind::Contract
                                                                    : ErrorKind::Other;
    faults_.push_back(Held{n, kind, e.what()});
  }
  refused_.clear();
  current_ = nullptr;
  n->state = NodeState::Processed;
  ++stats_.events_processed;
  if (n->fault != Fault::None) {
    d.blocked = true;  // its later events wait until a rollback undoes this one, or GVT passes
  } else if (n->ev.key.time < safe_) {
    // Below the lookahead bound no straggler can reach this LP and no sender of this event can
    // be rolled back (see docs/engine.md): the event and the LP's earlier ones are final.
    for (Node* o : outgoing_) enqueue_wire(o->dst_proc, o, false);
    outgoing_.clear();
    commit_all(d);
    commit_node(d, n);
    ++stats_.committed_at_execution;
    return;
  }
  d.push_back(n);
  if (!d.in_dirty) {
    d.in_dirty = true;
    dirty_.push_back(index);
  }
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
  gvt_ = std::min(vote_in_.min_time, vote_in_.min_parked);
  // Every white event has arrived, and an event still to come is sent by an event not yet
  // processed (at or after GVT) or is a red one already sent, whose sender is at or after the
  // earliest red sender: every future arrival lies at or after that bound + lookahead, so an
  // event below it is final once executed (docs/engine.md derives this).
  if (config_.lookahead > 0 && size_ > 1) {
    const SimTime bound = std::min(gvt_, vote_in_.min_red_sender);
    safe_ = bound >= kTimeInfinity - config_.lookahead ? kTimeInfinity : bound + config_.lookahead;
  }
  round_open_ = false;
  fossil_collect(gvt_);
  report_progress();
  return true;
}

void OptimisticEngine::Impl::report_fault() {
  // The earliest final fault in key order, over all processes: the one the sequential engine
  // would have stopped at.
  struct Candidate {
    EventKey key;
    std::int32_t has = 0;
    std::int32_t kind = 0;
  } mine{};
  for (const Held& h : faults_)
    if (h.node->ev.key.time < vote_in_.min_time && (!mine.has || h.node->ev.key < mine.key)) {
      mine.key = h.node->ev.key;
      mine.has = 1;
      mine.kind = static_cast<std::int32_t>(h.kind);
    }
  std::vector<Candidate> all(static_cast<std::size_t>(size_));
  MPI_Allgather(&mine, sizeof(Candidate), MPI_BYTE, all.data(), sizeof(Candidate), MPI_BYTE, comm_);
  int from = -1;
  for (int p = 0; p < size_; ++p)
    if (all[static_cast<std::size_t>(p)].has &&
        (from < 0 ||
         all[static_cast<std::size_t>(p)].key < all[static_cast<std::size_t>(from)].key))
      from = p;
  SCALESCOPE_EXPECTS(from >= 0);
  std::string what;
  if (from == rank_)
    for (const Held& h : faults_)
      if (h.node->ev.key == mine.key) what = h.what;
  int length = static_cast<int>(what.size());
  MPI_Bcast(&length, 1, MPI_INT, from, comm_);
  what.resize(static_cast<std::size_t>(length));
  MPI_Bcast(what.data(), length, MPI_CHAR, from, comm_);
  drain();
  throw_kind(static_cast<ErrorKind>(all[static_cast<std::size_t>(from)].kind), what);
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
  std::size_t kept = 0;
  const std::size_t count = dirty_.size();
  for (std::size_t i = 0; i < count; ++i) {
    // The LPs' lines are cold by now: a pipeline of prefetches, as in execution (the engine
    // entry 8 ahead, its newest event and the LP object 4 ahead).
    if (i + 8 < count) __builtin_prefetch(&lps_[dirty_[i + 8]]);
    if (i + 4 < count) {
      const LocalLp& ahead = lps_[dirty_[i + 4]];
      __builtin_prefetch(ahead.first);
      if (ahead.commits) __builtin_prefetch(ahead.lp);
    }
    const std::uint32_t index = dirty_[i];
    LocalLp& lp = lps_[index];
    while (!lp.empty() && lp.first->ev.key.time < gvt) {
      Node* n = lp.pop_front();
      SCALESCOPE_EXPECTS(n->fault == Fault::None);  // a final fault was reported first
      commit_node(lp, n);
      --uncommitted_;
    }
    if (lp.empty())
      lp.in_dirty = false;
    else
      dirty_[kept++] = index;
  }
  dirty_.resize(kept);
}

void OptimisticEngine::Impl::idle_wait() {
  // Nothing may run here until a message arrives or the round completes: wait without taking a
  // core from the processes that have work (MPI's own waits spin).
  static constexpr timespec kNap{0, 20'000};
  nanosleep(&kNap, nullptr);
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
  safe_ = size_ == 1 ? kTimeInfinity : 0;
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

OptimisticStats OptimisticEngine::Impl::total(const OptimisticStats& s) const {
  std::array<std::uint64_t, 7> v{
      s.events_processed, s.events_committed, s.events_rolled_back,    s.rollbacks,
      s.remote_messages,  s.anti_messages,    s.committed_at_execution};
  std::array<std::uint64_t, 7> sum{};
  MPI_Allreduce(v.data(), sum.data(), 7, MPI_UINT64_T, MPI_SUM, comm_);
  OptimisticStats t;
  t.events_processed = sum[0];
  t.events_committed = sum[1];
  t.events_rolled_back = sum[2];
  t.rollbacks = sum[3];
  t.remote_messages = sum[4];
  t.anti_messages = sum[5];
  t.committed_at_execution = sum[6];
  t.gvt_rounds = s.gvt_rounds;  // every process takes part in every round
  MPI_Allreduce(&s.end_time, &t.end_time, 1, MPI_INT64_T, MPI_MAX, comm_);
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
