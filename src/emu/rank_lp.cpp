#include "emu/rank_lp.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace scalescope::emu {

using graph::Stream;

namespace {
/// The exposed-communication bucket of a communication op.
SimTime& exposed_bucket(RankResult& r, const graph::Op& op) {
  if (op.role == graph::CommRole::Embedding) return r.exposed_embedding;
  if (op.role == graph::CommRole::Cp) return r.exposed_cp;
  if (op.role == graph::CommRole::Ep || op.role == graph::CommRole::Etp ||
      op.role == graph::CommRole::TpEp)
    return r.exposed_ep;
  switch (op.stream) {
    case Stream::TpComm:
      return r.exposed_tp;
    case Stream::EpComm:
      return r.exposed_ep;
    case Stream::PpComm:
    case Stream::PpPrevComm:
      return r.exposed_pp;
    default:
      return r.exposed_dp;
  }
}
}  // namespace

RankLP::RankLP(std::uint32_t rank, const ModelData& data, const RankRecorder* recorder,
               SimTime* times)
    : cls_(&data.class_of(rank)),
      rec_(recorder),
      time_(times),
      traced_(recorder->traced()),
      rank_(rank) {
  SCALESCOPE_EXPECTS(cls_->prog != nullptr);
  std::fill(time_, time_ + slots(*cls_, traced_), kTimeUnknown);
}

void RankLP::init(pdes::Context& ctx) {
  EmuMsg m;
  m.kind = MsgKind::Start;
  ctx.send(ctx.self(), 0, kPriorityStart, m);
}

SimTime RankLP::stream_free(int s) const {
  std::uint32_t c = cursor_[s];
  return c == 0 ? 0 : time_[cls_->prog->stream_ops[s][c - 1]];
}

SimTime RankLP::deps_ready(std::uint32_t i) const {
  SimTime t = 0;
  for (const std::uint32_t* d = cls_->waits->begin(i); d != cls_->waits->end(i); ++d) {
    SimTime f = time_[*d];
    if (f == kTimeUnknown) return kTimeUnknown;
    t = std::max(t, f);
  }
  return t;
}

SimTime RankLP::issue_time(std::uint32_t i) const {
  return host_issue_time(*cls_, i, time_);
}

void RankLP::issue_comm(std::uint32_t i, int s, SimTime t, pdes::Context& ctx) {
  const graph::Op& op = cls_->prog->ops[i];
  const ModelData& data = *cls_->data;
  const graph::SlicedGraph& g = *data.graph;
  EmuMsg m;
  m.kind = MsgKind::Arrive;
  m.op = i;
  std::uint8_t parts = 0;
  if (graph::is_collective(op.kind)) {
    m.channel = 0;
    m.instance = op.instance;
    ctx.send(data.comm_lp(g.comm_of(rank_, op.role)), t, kPriorityArrive, m);
    parts = 1;
  } else {
    if (op.role != graph::CommRole::None) {  // the send part
      m.channel = op.role == graph::CommRole::PpNext ? kChannelDown : kChannelUp;
      m.instance = op.instance;
      ctx.send(data.comm_lp(g.comm_of(rank_, op.role)), t, kPriorityArrive, m);
      ++parts;
    }
    if (op.role2 != graph::CommRole::None) {  // the receive part
      m.channel = op.role2 == graph::CommRole::PpPrev ? kChannelDown : kChannelUp;
      m.instance = op.instance2;
      m.recv = 1;
      ctx.send(data.comm_lp(g.comm_of(rank_, op.role2)), t, kPriorityArrive, m);
      ++parts;
    }
  }
  set_outstanding(s, parts);
  issued_ |= static_cast<std::uint8_t>(1u << s);
}

unsigned RankLP::wake(std::uint32_t i) const {
  // A waiting op can start only once it heads its stream: flag its stream if it does.
  const graph::RankProgram& prog = *cls_->prog;
  unsigned streams = 0;
  for (const std::uint32_t* c = cls_->waits->wakes.begin(i); c != cls_->waits->wakes.end(i); ++c) {
    const auto s = static_cast<unsigned>(prog.ops[*c].stream);
    if (cursor_[s] < prog.stream_ops[s].size() && prog.stream_ops[s][cursor_[s]] == *c)
      streams |= 1u << s;
  }
  return streams;
}

void RankLP::advance(unsigned check, pdes::Context& ctx) {
  // Only the streams in `check` can have a head that became ready: the stream's previous op or
  // a dependency of its head finished in this event. Reading the others' dependencies would
  // touch cold memory for nothing (a pipeline or data-parallel head waits for ops far ahead).
  const graph::RankProgram& prog = *cls_->prog;
  const bool coalesce = cls_->data->coalesce_local_ops;
  while (check != 0) {
    for (int s = 0; s < graph::kNumStreams; ++s) {
      if (!(check & (1u << s))) continue;
      check &= ~(1u << s);
      const auto& list = prog.stream_ops[s];
      while (cursor_[s] < list.size() && !(issued_ & (1u << s))) {
        const std::uint32_t i = list[cursor_[s]];
        const SimTime ready = deps_ready(i);
        if (ready == kTimeUnknown) break;
        const SimTime issued = issue_time(i);
        if (issued == kTimeUnknown) break;
        const SimTime t = std::max({ready, stream_free(s), issued});
        // Durations are at most kMaxDurationSeconds each (cost::CostModel); a clock past
        // kTimeLimit would wrap int64 a few thousand such ops later.
        if (t > kTimeLimit) [[unlikely]]
          throw_input(
              "rank {}: simulated time passed {:.3g} s at op {}: the cost inputs make the "
              "iteration longer than the model covers (2^62 ns)",
              rank_, ns_to_seconds(t), i);
        if (s != 0) {
          if (traced_) time_[start_slot(s, cursor_[s])] = t;
          issue_comm(i, s, t, ctx);
        } else if (coalesce) {
          time_[i] = t + cls_->dur[i];
          ++cursor_[s];
          check |= wake(i) | host_wake(i);
        } else {
          EmuMsg m;
          m.kind = MsgKind::OpDone;
          m.stream = static_cast<std::uint8_t>(s);
          ctx.send(ctx.self(), t + cls_->dur[i], kPriorityOpDone, m);
          set_outstanding(s, 1);
          issued_ |= static_cast<std::uint8_t>(1u << s);
        }
      }
    }
  }
}

void RankLP::forward(pdes::Event& e, pdes::Context& ctx) {
  EmuMsg& m = e.as<EmuMsg>();
  m.undo_cursor = cursor_;
  m.undo_outstanding = outstanding_;
  m.undo_issued = issued_;
  unsigned check = 0;
  if (m.kind == MsgKind::Start) {
    check = (1u << graph::kNumStreams) - 1;
  } else if (m.kind == MsgKind::Complete || m.kind == MsgKind::OpDone) {
    const int s = m.stream;
    // A completion for a stream with nothing issued belongs to a history that is being rolled
    // back (its CommLP cancelled the op it completes, see CommLP::forward): ignore it; reverse
    // then restores the unchanged state. It never happens in a consistent history.
    if (!(issued_ & (1u << s)) || outstanding(s) == 0) return;
    set_outstanding(s, outstanding(s) - 1);
    if (outstanding(s) == 0) {
      const std::uint32_t i = cls_->prog->stream_ops[s][cursor_[s]];
      time_[i] = ctx.now();
      ++cursor_[s];
      issued_ &= static_cast<std::uint8_t>(~(1u << s));
      check = (1u << s) | wake(i) | host_wake(i);
    }
  }
  advance(check, ctx);
}

void RankLP::reverse(pdes::Event& e, pdes::Context&) {
  const EmuMsg& m = e.as<EmuMsg>();
  for (int s = 0; s < graph::kNumStreams; ++s) {
    const auto& list = cls_->prog->stream_ops[s];
    const bool head_was_issued = m.undo_issued & (1u << s);
    for (std::uint32_t c = m.undo_cursor[s]; c < cursor_[s]; ++c) {
      time_[list[c]] = kTimeUnknown;
      if (traced_ && s != 0 && !(c == m.undo_cursor[s] && head_was_issued))
        time_[start_slot(s, c)] = kTimeUnknown;
    }
    // A head op issued by this event (not before it) is un-issued.
    if (traced_ && s != 0 && (issued_ & (1u << s)) &&
        !(head_was_issued && cursor_[s] == m.undo_cursor[s]))
      time_[start_slot(s, cursor_[s])] = kTimeUnknown;
  }
  cursor_ = m.undo_cursor;
  outstanding_ = m.undo_outstanding;
  issued_ = m.undo_issued;
}

void RankLP::prefetch(const pdes::Event& e) const {
  // The times the event reads and writes lie near two stream heads: those of the stream whose
  // op it completes and of the compute stream, which then advances. Per head: the head op's
  // finish and its dependencies (a few ops before it in program order: this line or the one
  // before), the finish of the op before it on its stream (stream_free), and for the compute
  // stream the line after, where a chain of compute ops continues. Measured at 16,384 ranks:
  // advance() went from 34 to 12 ns per event when these lines, not only the heads', were
  // prefetched. The other streams' heads are not touched (their lines would cost bandwidth).
  const graph::RankProgram& prog = *cls_->prog;
  const EmuMsg& m = e.as<EmuMsg>();
  auto lines = [&](int s, bool chain) {
    const auto& list = prog.stream_ops[s];
    if (cursor_[s] > 0) __builtin_prefetch(&time_[list[cursor_[s] - 1]]);
    if (cursor_[s] == list.size()) return;
    const SimTime* head = &time_[list[cursor_[s]]];
    __builtin_prefetch(head);
    if (list[cursor_[s]] >= 8) __builtin_prefetch(head - 8);
    if (chain) __builtin_prefetch(head + 8);
  };
  lines(0, true);
  if (m.kind != MsgKind::Start && m.stream != 0) lines(m.stream, false);
  // The rank's communicators, in case the event issues a communication op.
  __builtin_prefetch(&cls_->data->graph->rank_roles[std::size_t{rank_} * graph::kNumRoles]);
}

SimTime RankLP::start_of(int s, std::uint32_t c) const {
  const std::uint32_t i = cls_->prog->stream_ops[s][c];
  return s == 0 ? time_[i] - cls_->dur[i] : time_[start_slot(s, c)];
}

void RankLP::finalize() {
  // Every op has finished (or the run deadlocked, which done() reports): the rank's results
  // are a pass over its finish times.
  if (!done()) return;
  const graph::RankProgram& prog = *cls_->prog;
  RankResult& r = *rec_->result;
  r.peak_memory = cls_->mem->peak;
  r.peak_transient = cls_->mem->peak_transient;
  r.static_memory = prog.static_memory;
  // The op that ends the rank: the latest finish, the first in program order among equals.
  std::uint32_t last_op = 0;
  SimTime last_finish = 0;
  for (std::uint32_t i = 0; i < prog.size(); ++i)
    if (time_[i] > last_finish) last_finish = time_[i], last_op = i;
  r.finish = last_finish;
  // Compute-stream idle time before an op is blamed on the dependency it waited for last (only
  // another stream's op can be that one: see WaitDeps) and split along that op's life: while it
  // moved data (its wire time: its category), while it was issued but waited for its peers
  // (bubble), and before it was issued, which is blamed in turn on the op that held it back
  // (the op before it on its stream, or its latest dependency), and so on back to the gap's start.
  const auto& compute = prog.stream_ops[0];
  auto charge = [&](std::uint32_t d, SimTime from, SimTime to) {
    while (to > from) {
      if (d == kNoOp || !graph::is_communication(prog.ops[d].kind)) {
        r.other_wait += to - from;
        return;
      }
      std::uint32_t by = cls_->prev_on_stream[d];
      SimTime issued = by == kNoOp ? 0 : time_[by];
      for (const std::uint32_t* w = cls_->waits->begin(d); w != cls_->waits->end(d); ++w)
        if (time_[*w] > issued) issued = time_[*w], by = *w;
      const SimTime moving = std::max(issued, time_[d] - cls_->wire[d]);
      const SimTime wire = to - std::max(from, std::min(moving, to));
      const SimTime peers = std::max<SimTime>(0, std::min(moving, to) - std::max(issued, from));
      exposed_bucket(r, prog.ops[d]) += wire;
      const bool pipeline = prog.ops[d].kind == graph::OpKind::SendRecv ||
                            prog.ops[d].role == graph::CommRole::Embedding;
      (pipeline ? r.bubble : r.straggler_wait) += peers;
      to = std::min(to, std::max(issued, from));
      d = by;
    }
  };
  SimTime prev = 0;
  for (std::uint32_t c = 0; c < compute.size(); ++c) {
    const std::uint32_t i = compute[c];
    const SimTime start = time_[i] - cls_->dur[i];
    r.compute += cls_->dur[i];
    if (start > prev) {
      std::uint32_t blame = kNoOp;
      SimTime latest = kTimeUnknown;
      for (const std::uint32_t* d = cls_->waits->begin(i); d != cls_->waits->end(i); ++d)
        if (time_[*d] > latest) latest = time_[*d], blame = *d;
      // The host issued the op after its dependencies finished: the end of the gap is the
      // host's (host-bound issue), the rest is blamed as before.
      SimTime until = start;
      const SimTime issued = issue_time(i);
      if (issued > std::max(prev, latest == kTimeUnknown ? SimTime{0} : latest)) {
        until = std::max(prev, latest == kTimeUnknown ? SimTime{0} : latest);
        r.host_wait += start - until;
      }
      charge(blame, prev, until);
    }
    prev = time_[i];
  }
  // The tail after the last compute op is blamed on the op that ends the rank.
  if (last_finish > prev)
    charge(graph::is_communication(prog.ops[last_op].kind) ? last_op : kNoOp, prev, last_finish);
  if (traced_) record_trace();
}

void RankLP::record_trace() const {
  const graph::RankProgram& prog = *cls_->prog;
  // Ops in program (host issue) order; the emulation sorts the records by time afterwards.
  std::array<std::uint32_t, graph::kNumStreams> pos{};
  for (std::uint32_t i = 0; i < prog.size(); ++i) {
    const graph::Op& op = prog.ops[i];
    const int s = static_cast<int>(op.stream);
    const SimTime start = start_of(s, pos[s]++);
    if (rec_->timeline)
      rec_->timeline->push_back(
          TimelineRecord{start, time_[i], i, static_cast<std::uint8_t>(op.stream),
                         static_cast<std::uint8_t>(op.kind), static_cast<std::uint8_t>(op.phase),
                         static_cast<std::uint8_t>(op.name), op.layer, op.microbatch});
    if (rec_->memory && (op.mem_alloc != 0 || op.mem_free != 0)) {
      rec_->memory->push_back(MemoryRecord{start, cls_->mem->after_alloc[i]});
      rec_->memory->push_back(MemoryRecord{time_[i], cls_->mem->after_free[i]});
    }
  }
}

bool RankLP::save_state(std::vector<std::byte>& out) const {
  append_bytes(out, time_, slots(*cls_, traced_));
  append_bytes(out, cursor_.data(), cursor_.size());
  append_bytes(out, &outstanding_, 1);
  append_bytes(out, &issued_, 1);
  return true;
}

bool RankLP::done() const {
  for (int s = 0; s < graph::kNumStreams; ++s)
    if (cursor_[s] != cls_->prog->stream_ops[s].size()) return false;
  return true;
}

}  // namespace scalescope::emu
