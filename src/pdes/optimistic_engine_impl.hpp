#pragma once
/// The optimistic engine's implementation (OptimisticEngine::Impl) and its event and message
/// records, shared by its source files. Not part of the public interface
/// (pdes/optimistic_engine.hpp).
///   optimistic_engine.cpp       node memory, sending, rollback, cancellation, commit,
///                               execution and the scheduling loop (run)
///   optimistic_engine_gvt.cpp   MPI message exchange, GVT rounds, fault reports, fossil
///                               collection, progress and the statistics' reductions
#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "pdes/engine_error.hpp"
#include "pdes/event_queue.hpp"
#include "pdes/optimistic_engine.hpp"

namespace scalescope::pdes {

namespace detail {

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
  union {
    std::uint32_t dst_proc = 0;  ///< SentRemote: the process it went to
    std::uint32_t stamp;         ///< Processed and kept: its execution's number (Impl::stamp_)
  };
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

inline std::uint64_t key_hash(const EventKey& k) {
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
/// (oldest first), so the engine's per-LP state stays compact at 16,384+ LPs and a rollback
/// undoes from the newest.
struct LocalLp {
  LogicalProcess* lp = nullptr;
  Node* first = nullptr;
  Node* last = nullptr;
  std::uint64_t seq = 0;  ///< events sent so far (the key's sequence number)
  bool commits = true;    ///< LogicalProcess::has_commit(), cached: skipping the call spares
                          ///< fossil collection a cold read of the LP
  bool blocked = false;   ///< holds a faulted event: its later events wait (Impl::parked_)
  /// The latest time of an event of this LP committed at execution: an event that reaches the
  /// LP earlier would have had to precede it, which the lookahead rules out (a contract error).
  SimTime final_until = 0;
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

inline void reduce_votes(void* in, void* inout, int* len, MPI_Datatype*) {
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

constexpr int kTagEvents = 7;
constexpr int kPostedReceives = 4;

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace detail

using detail::ErrorKind;
using detail::Fault;
using detail::GvtVote;
using detail::kPostedReceives;
using detail::kTagEvents;
using detail::kVoteFields;
using detail::LocalLp;
using detail::Node;
using detail::NodeState;
using detail::reduce_votes;
using detail::RemoteIndex;
using detail::seconds_since;
using detail::throw_kind;
using detail::Wire;

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
  /// Refuses the current handler's send to `dst` at `t` where it breaks the lookahead: closer
  /// than `dst`'s entry bound across processes, or, within this process, arriving where the
  /// local bound says nothing can arrive (see build_lookahead).
  void check_lookahead(LpId dst, SimTime t, bool remote);
  /// From OptimisticConfig::lookahead_edges: lookahead_ per LP.
  void build_lookahead();
  /// The lookahead of LP `id` (see lookahead_): per LP from the graph, else the global one.
  SimTime lookahead_of(LpId id) const {
    return lookahead_.empty() ? config_.lookahead : lookahead_[id];
  }
  /// Whether an event at `t` for local LP `dst` is final once executed: below the bound on any
  /// future arrival at it (bound_ + its lookahead; no overflow: t ≥ 0, lookahead ≤ infinity).
  bool final_at_execution(SimTime t, LpId dst) const { return t - lookahead_of(dst) < bound_; }
  [[noreturn]] void straggler_below_final(const Node* n, const LocalLp& d) const;
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
  /// The events processed and kept (not committed at execution), in execution order, as ROSS's
  /// kernel processes keep them: fossil collection commits from the front until an event at or
  /// after GVT, so a round touches what it commits and not every LP that holds processed events
  /// (61,000 LPs a round at 131,072 GPUs, 15 visits per committed event, before this). An LP's
  /// kept events enter in its key order (a straggler rolls its later ones back first), so the
  /// front's event is its LP's oldest. An entry whose node was since rolled back, committed with
  /// a later event of its LP, or reused carries a stamp the node no longer has: it is skipped.
  struct Kept {
    Node* node;
    std::uint32_t stamp;
  };
  std::vector<Kept> kept_;
  std::size_t kept_head_ = 0;  ///< entries before it are done
  std::uint32_t stamp_ = 0;    ///< executions kept so far (wraps; an entry lives far shorter)

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
  SimTime gvt_ = 0;  ///< the last GVT
  /// Every event that will still arrive from another process lies at or after bound_ + its
  /// receiver's entry lookahead, and every straggler or cancellation for a local LP at or after
  /// bound_ + that LP's lookahead (see execute): min(GVT, earliest red sender) of the last round
  /// with a lookahead, infinite on one process, below every time before the first round.
  SimTime bound_ = std::numeric_limits<SimTime>::min();
  /// Per LP (OptimisticConfig::lookahead_edges; empty: the global lookahead for all): for an LP
  /// on another process, the least gap of the declared edges into it from other processes
  /// (what a send to it must keep); for a local LP, the least gap from any future arrival
  /// from another process to an event reaching it along local edges (shortest paths from the
  /// entries; infinite where no such path exists).
  std::vector<SimTime> lookahead_;
  std::uint64_t since_gvt_ = 0;  ///< events processed since the last round began

  std::uint64_t committed_everywhere_ = 0;  ///< at the last GVT round
  std::uint64_t uncommitted_ = 0;           ///< processed, not yet committed, on this process
  std::chrono::steady_clock::time_point start_;
  double last_report_ = 0;
  OptimisticStats stats_;
};

}  // namespace scalescope::pdes
