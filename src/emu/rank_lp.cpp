#include "emu/rank_lp.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace scalescope::emu {

using graph::Stream;

namespace {
/// Adds compute-stream idle time to the bucket of the stream it waited for.
void charge_wait(RankResult& r, Stream waited_for, SimTime t) {
  switch (waited_for) {
    case Stream::TpComm:
      r.exposed_tp += t;
      break;
    case Stream::PpComm:
      r.exposed_pp += t;
      break;
    case Stream::DpComm:
      r.exposed_dp += t;
      break;
    default:
      r.other_wait += t;
      break;
  }
}
}  // namespace

RankLP::RankLP(std::uint32_t rank, const ModelData& data, RankRecorder recorder)
    : rank_(rank),
      data_(&data),
      prog_(&data.graph->program_of(rank)),
      dur_(data.durations[data.graph->rank_class[rank]].data()),
      mem_(&data.memory[data.graph->rank_class[rank]]),
      rec_(recorder),
      finish_(prog_->size(), kTimeUnknown) {
  std::uint32_t slots = 0;
  for (int s = 1; s < graph::kNumStreams; ++s) {
    comm_base_[s] = slots;
    slots += static_cast<std::uint32_t>(prog_->stream_ops[s].size());
  }
  comm_start_.assign(slots, kTimeUnknown);
}

void RankLP::init(pdes::Context& ctx) {
  EmuMsg m;
  m.kind = MsgKind::Start;
  ctx.send(ctx.self(), 0, kPriorityStart, m);
}

SimTime RankLP::stream_free(int s) const {
  std::uint32_t c = cursor_[s];
  return c == 0 ? 0 : finish_[prog_->stream_ops[s][c - 1]];
}

SimTime RankLP::deps_ready(std::uint32_t i) const {
  SimTime t = 0;
  for (const std::uint32_t* d = prog_->deps_begin(i); d != prog_->deps_end(i); ++d) {
    SimTime f = finish_[*d];
    if (f == kTimeUnknown) return kTimeUnknown;
    t = std::max(t, f);
  }
  return t;
}

void RankLP::issue_comm(std::uint32_t i, int s, SimTime t, pdes::Context& ctx) {
  const graph::Op& op = prog_->ops[i];
  const graph::SlicedGraph& g = *data_->graph;
  EmuMsg m;
  m.kind = MsgKind::Arrive;
  m.op = i;
  std::uint8_t parts = 0;
  if (graph::is_collective(op.kind)) {
    m.channel = 0;
    m.instance = op.instance;
    ctx.send(data_->comm_lp(g.comm_of(rank_, op.role)), t, kPriorityArrive, m);
    parts = 1;
  } else {
    if (op.role != graph::CommRole::None) {  // the send part
      m.channel = op.role == graph::CommRole::PpNext ? kChannelDown : kChannelUp;
      m.instance = op.instance;
      ctx.send(data_->comm_lp(g.comm_of(rank_, op.role)), t, kPriorityArrive, m);
      ++parts;
    }
    if (op.role2 != graph::CommRole::None) {  // the receive part
      m.channel = op.role2 == graph::CommRole::PpPrev ? kChannelDown : kChannelUp;
      m.instance = op.instance2;
      ctx.send(data_->comm_lp(g.comm_of(rank_, op.role2)), t, kPriorityArrive, m);
      ++parts;
    }
  }
  outstanding_[s] = parts;
  issued_ |= static_cast<std::uint8_t>(1u << s);
}

void RankLP::advance(pdes::Context& ctx) {
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < graph::kNumStreams; ++s) {
      const auto& list = prog_->stream_ops[s];
      while (cursor_[s] < list.size() && !(issued_ & (1u << s))) {
        const std::uint32_t i = list[cursor_[s]];
        const SimTime ready = deps_ready(i);
        if (ready == kTimeUnknown) break;
        const SimTime t = std::max(ready, stream_free(s));
        if (s != 0) {
          comm_start_[comm_slot(s, cursor_[s])] = t;
          issue_comm(i, s, t, ctx);
        } else if (data_->coalesce_local_ops) {
          finish_[i] = t + dur_[i];
          ++cursor_[s];
          progress = true;
        } else {
          EmuMsg m;
          m.kind = MsgKind::OpDone;
          m.stream = static_cast<std::uint8_t>(s);
          ctx.send(ctx.self(), t + dur_[i], kPriorityOpDone, m);
          outstanding_[s] = 1;
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
  if (m.kind == MsgKind::Complete || m.kind == MsgKind::OpDone) {
    const int s = m.stream;
    SCALESCOPE_EXPECTS((issued_ & (1u << s)) && outstanding_[s] > 0);
    if (--outstanding_[s] == 0) {
      finish_[prog_->stream_ops[s][cursor_[s]]] = ctx.now();
      ++cursor_[s];
      issued_ &= static_cast<std::uint8_t>(~(1u << s));
    }
  }
  advance(ctx);
  for (int s = 0; s < graph::kNumStreams; ++s)
    m.done[s] = static_cast<std::uint16_t>(cursor_[s] - m.undo_cursor[s]);
}

void RankLP::reverse(pdes::Event& e, pdes::Context&) {
  const EmuMsg& m = e.as<EmuMsg>();
  for (int s = 0; s < graph::kNumStreams; ++s) {
    const auto& list = prog_->stream_ops[s];
    const bool head_was_issued = m.undo_issued & (1u << s);
    for (std::uint32_t c = m.undo_cursor[s]; c < cursor_[s]; ++c) {
      finish_[list[c]] = kTimeUnknown;
      if (s != 0 && !(c == m.undo_cursor[s] && head_was_issued))
        comm_start_[comm_slot(s, c)] = kTimeUnknown;
    }
    // A head op issued by this event (not before it) is un-issued.
    if ((issued_ & (1u << s)) && !(head_was_issued && cursor_[s] == m.undo_cursor[s]))
      if (s != 0) comm_start_[comm_slot(s, cursor_[s])] = kTimeUnknown;
  }
  cursor_ = m.undo_cursor;
  outstanding_ = m.undo_outstanding;
  issued_ = m.undo_issued;
}

void RankLP::record(int s, std::uint32_t c) {
  const std::uint32_t i = prog_->stream_ops[s][c];
  const SimTime start = s == 0 ? finish_[i] - dur_[i] : comm_start_[comm_slot(s, c)];
  const graph::Op& op = prog_->ops[i];
  RankResult& r = *rec_.result;
  if (finish_[i] > last_finish_ || (finish_[i] == last_finish_ && i < last_op_)) {
    last_finish_ = finish_[i];
    last_op_ = i;
  }
  if (op.stream == Stream::Compute) {
    // Idle time before this op is blamed on the stream of the dependency it waited for last.
    r.compute += finish_[i] - start;
    const SimTime prev = c == 0 ? 0 : finish_[prog_->stream_ops[0][c - 1]];
    const SimTime gap = start - prev;
    if (gap > 0) {
      std::uint32_t blame = i;
      SimTime latest = kTimeUnknown;
      for (const std::uint32_t* d = prog_->deps_begin(i); d != prog_->deps_end(i); ++d)
        if (finish_[*d] > latest) latest = finish_[*d], blame = *d;
      charge_wait(r, blame == i ? Stream::Compute : prog_->ops[blame].stream, gap);
    }
  }
  if (rec_.timeline)
    rec_.timeline->push_back(
        TimelineRecord{start, finish_[i], i, static_cast<std::uint8_t>(op.stream),
                       static_cast<std::uint8_t>(op.kind), static_cast<std::uint8_t>(op.phase),
                       static_cast<std::uint8_t>(op.name), op.layer, op.microbatch});
  if (rec_.memory && (op.mem_alloc != 0 || op.mem_free != 0)) {
    rec_.memory->push_back(MemoryRecord{start, mem_->after_alloc[i]});
    rec_.memory->push_back(MemoryRecord{finish_[i], mem_->after_free[i]});
  }
}

void RankLP::commit(const pdes::Event& e) {
  const EmuMsg& m = e.as<EmuMsg>();
  for (int s = 0; s < graph::kNumStreams; ++s)
    for (std::uint32_t c = m.undo_cursor[s]; c < m.undo_cursor[s] + m.done[s]; ++c) record(s, c);
}

void RankLP::finalize() {
  RankResult& r = *rec_.result;
  r.finish = last_finish_;
  r.peak_memory = mem_->peak;
  r.static_memory = prog_->static_memory;
  // The tail after the last compute op is blamed on the stream of the op that ends the rank.
  const auto& compute = prog_->stream_ops[0];
  const SimTime last_compute = compute.empty() ? 0 : finish_[compute.back()];
  const SimTime tail = last_finish_ - last_compute;
  if (tail > 0) {
    charge_wait(r, prog_->ops[last_op_].stream, tail);
  }
}

bool RankLP::save_state(std::vector<std::byte>& out) const {
  append_bytes(out, comm_start_.data(), comm_start_.size());
  append_bytes(out, finish_.data(), finish_.size());
  append_bytes(out, cursor_.data(), cursor_.size());
  append_bytes(out, outstanding_.data(), outstanding_.size());
  append_bytes(out, &issued_, 1);
  return true;
}

bool RankLP::done() const {
  for (int s = 0; s < graph::kNumStreams; ++s)
    if (cursor_[s] != prog_->stream_ops[s].size()) return false;
  return true;
}

}  // namespace scalescope::emu
