// The critical path walk (docs/engine.md "Critical path").
#include "emu/critical_path.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.hpp"

namespace scalescope::emu {

PathKind path_kind_of(graph::CommRole r) {
  using graph::CommRole;
  switch (r) {
    case CommRole::Tp:
    case CommRole::Etp:
      return PathKind::Tp;
    case CommRole::PpPrev:
    case CommRole::PpNext:
      return PathKind::Pp;
    case CommRole::Ep:
    case CommRole::TpEp:
      return PathKind::Ep;
    case CommRole::Cp:
      return PathKind::Cp;
    case CommRole::Embedding:
      return PathKind::Embedding;
    default:
      return PathKind::Dp;
  }
}

namespace {

using graph::CommRole;

/// Where the walk is: at the finish of op `op` of `rank` (time `t`), at the moment it became
/// ready, at a transfer whose last arrival is sought, or done.
enum class Mode : std::int32_t { AtFinish, AtReady, NeedArrival, Done };
struct Token {
  SimTime t = 0;
  std::uint32_t rank = 0;
  std::uint32_t op = 0;
  Mode mode = Mode::AtFinish;
};

/// A transfer's partner to look for: the member holding communicator `comm` under `role`, its
/// op on that role with this instance (a receive part when `recv`).
struct Partner {
  std::int32_t comm = -1;
  std::uint8_t role = 0;
  std::uint8_t recv = 0;
  std::uint32_t instance = 0;
};
struct Query {
  std::array<Partner, 2> parts;  // a collective uses parts[0]; a SendRecv one per part
  std::uint32_t self_rank = 0;   // the op's own rank and op: its own arrival is a candidate
  std::uint32_t self_op = 0;
  /// The kind of the transfer: its first part's role.
  PathKind kind() const {
    const Partner& p = parts[0].comm >= 0 ? parts[0] : parts[1];
    return path_kind_of(static_cast<CommRole>(p.role));
  }
};

/// A member's arrival at a transfer: candidates are compared by time, then the lower rank.
struct Arrival {
  SimTime t = -1;
  std::int64_t rank = -1;
  std::int64_t op = -1;
  bool better_than(const Arrival& o) const {
    return t != o.t ? t > o.t : (o.rank < 0 || (rank >= 0 && rank < o.rank));
  }
};

class Walker {
 public:
  Walker(const graph::SlicedGraph& g, const std::function<RankTimes(std::uint32_t)>& times)
      : g_(g), times_(times) {}

  struct Ready {
    SimTime t = 0;
    enum By : std::uint8_t { None, Stream, Dep, Host } by = None;
    std::uint32_t op = kNoOp;
  };

  /// When op i of rank r became ready, and what set that time (ties: the stream, then the
  /// dependencies in order, then the host).
  Ready ready(std::uint32_t r, std::uint32_t i) const {
    const RankTimes rt = times_(r);
    const RankClass& c = *rt.cls;
    Ready out;
    if (const std::uint32_t p = c.prev_on_stream[i]; p != kNoOp && rt.finish[p] > out.t)
      out = {rt.finish[p], Ready::Stream, p};
    for (const std::uint32_t* d = c.waits->begin(i); d != c.waits->end(i); ++d)
      if (rt.finish[*d] > out.t) out = {rt.finish[*d], Ready::Dep, *d};
    if (c.host_prefix != nullptr)
      if (const SimTime issue = host_issue_time(c, i, rt.finish); issue > out.t)
        out = {issue, Ready::Host, c.last_sync[i]};
    return out;
  }

  /// Advances from `tok` on rank `tok.rank` (which this process owns) until the walk ends or
  /// needs the arrivals of a transfer's other members (mode NeedArrival, query filled).
  Token local(Token tok, std::vector<PathSegment>& out, Query& q) {
    for (;;) {
      const RankTimes rt = times_(tok.rank);
      const graph::Op& op = rt.cls->prog->ops[tok.op];
      if (tok.mode == Mode::AtFinish) {
        if (graph::is_communication(op.kind)) {
          tok.mode = Mode::NeedArrival;
          q = query_of(tok.rank, op);
          q.self_rank = tok.rank;
          q.self_op = tok.op;
          return tok;
        }
        const SimTime start = tok.t - rt.cls->dur[tok.op];
        add(out, start, tok.t, tok.rank, tok.op, PathKind::Compute);
        tok = {start, tok.rank, tok.op, Mode::AtReady};
        continue;
      }
      // AtReady: what let the op start at tok.t.
      const Ready rd = ready(tok.rank, tok.op);
      if (rd.by == Ready::None) {
        tok.mode = Mode::Done;
        return tok;
      }
      if (rd.by == Ready::Host) {
        const SimTime from = rd.op == kNoOp ? 0 : rt.finish[rd.op];
        add(out, from, rd.t, tok.rank, tok.op, PathKind::Host);
        if (rd.op == kNoOp) {
          tok.mode = Mode::Done;
          return tok;
        }
        tok = {from, tok.rank, rd.op, Mode::AtFinish};
        continue;
      }
      tok = {rd.t, tok.rank, rd.op, Mode::AtFinish};
    }
  }

  /// The latest arrival among the partners of `q` this process owns (per `mine`), no later than
  /// `until` (an eager send can complete before its receive is posted).
  Arrival arrivals(const Query& q, SimTime until, const std::function<bool(std::uint32_t)>& mine) {
    Arrival best;
    if (mine(q.self_rank)) {
      const Arrival a{ready(q.self_rank, q.self_op).t, q.self_rank, q.self_op};
      if (a.t <= until) best = a;
    }
    for (const Partner& p : q.parts) {
      if (p.comm < 0) continue;
      const auto c = static_cast<std::uint32_t>(p.comm);
      for (const std::uint32_t* m = g_.comms.members_begin(c); m != g_.comms.members_end(c); ++m) {
        if (!mine(*m) || g_.comm_of(*m, static_cast<CommRole>(p.role)) != p.comm) continue;
        const std::uint32_t j = find_op(*m, p);
        if (j == kNoOp) continue;
        const Arrival a{ready(*m, j).t, *m, j};
        if (a.t <= until && a.better_than(best)) best = a;
      }
    }
    return best;
  }

  static void add(std::vector<PathSegment>& out, SimTime a, SimTime b, std::uint32_t rank,
                  std::uint32_t op, PathKind k) {
    if (b > a) out.push_back(PathSegment{a, b, rank, op, k});
  }

 private:
  /// The partners of a transfer op of rank r: a collective's members on its role; each part of
  /// a SendRecv's other member, under the role with which it holds the pair (the complementary
  /// pipeline role when it holds the pair under that one).
  Query query_of(std::uint32_t r, const graph::Op& op) const {
    Query q;
    if (graph::is_collective(op.kind)) {
      q.parts[0] = {g_.comm_of(r, op.role), static_cast<std::uint8_t>(op.role), 0, op.instance};
      return q;
    }
    const std::pair<CommRole, bool> parts[2] = {{op.role, false}, {op.role2, true}};
    for (int k = 0; k < 2; ++k) {
      const auto [role, is_recv] = parts[k];
      if (role == CommRole::None) continue;
      const std::int32_t c = g_.comm_of(r, role);
      // The other member: its role for this pair, and its op of the other kind (a send's
      // partner op is a receive, and the reverse).
      const auto cu = static_cast<std::uint32_t>(c);
      const std::uint32_t* m = g_.comms.members_begin(cu);
      const std::uint32_t other = m[0] == r ? m[1] : m[0];
      CommRole prole = role == CommRole::PpNext   ? CommRole::PpPrev
                       : role == CommRole::PpPrev ? CommRole::PpNext
                                                  : role;
      if (g_.comm_of(other, prole) != c) prole = role;
      q.parts[static_cast<std::size_t>(k)] = {c, static_cast<std::uint8_t>(prole),
                                              static_cast<std::uint8_t>(!is_recv),
                                              is_recv ? op.instance2 : op.instance};
    }
    return q;
  }

  /// Op of rank m on role p.role with that instance (a receive part when p.recv), or kNoOp.
  std::uint32_t find_op(std::uint32_t m, const Partner& p) {
    const RankClass* cls = times_(m).cls;
    auto& t = tables_[cls];
    if (t.empty()) {
      t.resize(2 * graph::kNumRoles);
      const auto& ops = cls->prog->ops;
      for (std::uint32_t i = 0; i < ops.size(); ++i) {
        if (ops[i].role != CommRole::None) t[static_cast<std::size_t>(ops[i].role)].push_back(i);
        if (ops[i].role2 != CommRole::None)
          t[graph::kNumRoles + static_cast<std::size_t>(ops[i].role2)].push_back(i);
      }
    }
    const auto& list = t[(p.recv ? graph::kNumRoles : 0) + p.role];
    return p.instance < list.size() ? list[p.instance] : kNoOp;
  }

  const graph::SlicedGraph& g_;
  const std::function<RankTimes(std::uint32_t)>& times_;
  /// Per class: op indices by role in instance order (sends and collectives, then receives).
  std::map<const RankClass*, std::vector<std::vector<std::uint32_t>>> tables_;
};

/// Keeps the walk finite. Time never increases along the walk, but at one instant it can circle:
/// an eager ring (MSCCL's custom all-reduce, with no host issue time) has every rank's transfer
/// arrive at the same time t as its partner's, so the walk could go round the ring forever at t.
/// A transfer's arrival that jumps to an op the walk already jumped to at this same instant is
/// replaced by the latest strictly earlier arrival (what was on the path before the circle);
/// none ends the walk. Each (rank, op) is a jump target at most once per instant and local
/// steps go to earlier ops of a rank, so the walk ends.
class CycleGuard {
 public:
  bool repeats(const Arrival& a) const {
    return a.t == t_ &&
           seen_.count({static_cast<std::uint32_t>(a.rank), static_cast<std::uint32_t>(a.op)}) != 0;
  }
  void record(const Arrival& a) {
    if (a.t != t_) {
      seen_.clear();
      t_ = a.t;
    }
    seen_.insert({static_cast<std::uint32_t>(a.rank), static_cast<std::uint32_t>(a.op)});
  }

 private:
  SimTime t_ = -1;
  std::set<std::pair<std::uint32_t, std::uint32_t>> seen_;
};

/// The op of rank r that finishes last (the lowest index on a tie).
Token last_op(std::uint32_t r, const RankTimes& rt) {
  Token tok{0, r, 0, Mode::AtFinish};
  for (std::uint32_t i = 0; i < rt.cls->prog->ops.size(); ++i)
    if (rt.finish[i] > tok.t) tok = {rt.finish[i], r, i, Mode::AtFinish};
  return tok;
}

CriticalPath finish(std::vector<PathSegment> segments) {
  CriticalPath p;
  std::sort(segments.begin(), segments.end(), [](const PathSegment& a, const PathSegment& b) {
    return a.start != b.start ? a.start < b.start : a.end < b.end;
  });
  p.segments = std::move(segments);
  for (const PathSegment& s : p.segments)
    p.totals[static_cast<std::size_t>(s.kind)] += s.end - s.start;
  return p;
}

}  // namespace

CriticalPath critical_path(const graph::SlicedGraph& g, std::uint32_t last_rank,
                           const std::function<RankTimes(std::uint32_t)>& times) {
  Walker w(g, times);
  std::vector<PathSegment> out;
  Token tok = last_op(last_rank, times(last_rank));
  const auto all = [](std::uint32_t) { return true; };
  CycleGuard guard;
  for (;;) {
    Query q;
    tok = w.local(tok, out, q);
    if (tok.mode == Mode::Done) break;
    Arrival a = w.arrivals(q, tok.t, all);
    SCALESCOPE_EXPECTS(a.rank >= 0);
    if (guard.repeats(a)) {
      a = w.arrivals(q, tok.t - 1, all);
      if (a.rank < 0) break;
    }
    guard.record(a);
    Walker::add(out, a.t, tok.t, tok.rank, tok.op, q.kind());
    tok = {a.t, static_cast<std::uint32_t>(a.rank), static_cast<std::uint32_t>(a.op),
           Mode::AtReady};
  }
  return finish(std::move(out));
}

CriticalPath critical_path(const graph::SlicedGraph& g, std::uint32_t last_rank,
                           const std::function<RankTimes(std::uint32_t)>& times,
                           const std::vector<std::uint32_t>& owner, MPI_Comm comm) {
  int me = 0, size = 1;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &size);
  const auto mine = [&](std::uint32_t r) { return owner[r] == static_cast<std::uint32_t>(me); };
  Walker w(g, times);
  std::vector<PathSegment> out;
  CycleGuard guard;
  Token tok;
  if (mine(last_rank)) tok = last_op(last_rank, times(last_rank));
  MPI_Bcast(&tok, sizeof tok, MPI_BYTE, static_cast<int>(owner[last_rank]), comm);
  for (;;) {
    // The owner of the token's rank walks; everyone learns where it stopped and why.
    Query q;
    const int root = static_cast<int>(owner[tok.rank]);
    if (me == root) tok = w.local(tok, out, q);
    MPI_Bcast(&tok, sizeof tok, MPI_BYTE, root, comm);
    if (tok.mode == Mode::Done) break;
    MPI_Bcast(&q, sizeof q, MPI_BYTE, root, comm);
    // Each process's latest arrival among the members it owns; the latest of all wins (every
    // process holds the same best, so the cycle guard decides alike everywhere).
    const auto latest = [&](SimTime until) {
      const Arrival local = w.arrivals(q, until, mine);
      std::vector<Arrival> all(static_cast<std::size_t>(size));
      MPI_Allgather(&local, sizeof local, MPI_BYTE, all.data(), sizeof local, MPI_BYTE, comm);
      Arrival best;
      for (const Arrival& a : all)
        if (a.rank >= 0 && a.better_than(best)) best = a;
      return best;
    };
    Arrival best = latest(tok.t);
    SCALESCOPE_EXPECTS(best.rank >= 0);
    if (guard.repeats(best)) {
      best = latest(tok.t - 1);
      if (best.rank < 0) break;
    }
    guard.record(best);
    if (me == root) Walker::add(out, best.t, tok.t, tok.rank, tok.op, q.kind());
    tok = {best.t, static_cast<std::uint32_t>(best.rank), static_cast<std::uint32_t>(best.op),
           Mode::AtReady};
  }
  // Everyone gets every segment.
  const int n = static_cast<int>(out.size() * sizeof(PathSegment));
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  int total = 0;
  for (int p = 0; p < size; ++p) {
    displs[static_cast<std::size_t>(p)] = total;
    total += counts[static_cast<std::size_t>(p)];
  }
  std::vector<PathSegment> segments(static_cast<std::size_t>(total) / sizeof(PathSegment));
  MPI_Allgatherv(out.data(), n, MPI_BYTE, segments.data(), counts.data(), displs.data(), MPI_BYTE,
                 comm);
  return finish(std::move(segments));
}

}  // namespace scalescope::emu
