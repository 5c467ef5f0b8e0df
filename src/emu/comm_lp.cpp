#include "emu/comm_lp.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace scalescope::emu {

CommLP::CommLP(std::uint32_t comm, const ModelData& data)
    : comm_(comm),
      data_(&data),
      members_(data.graph->comms.members_begin(comm)),
      size_(data.graph->comms.num_members(comm)),
      kind_(data.graph->comms.kind[comm]),
      shape_(data.cost->shape(members_, members_ + size_)),
      targets_(members_),
      num_targets_(size_) {
  if (data.active != nullptr) {
    for (std::uint32_t i = 0; i < size_; ++i)
      if ((*data.active)[members_[i]]) active_members_.push_back(members_[i]);
    if (active_members_.size() < size_) {
      SCALESCOPE_EXPECTS(kind_ != graph::CommKind::PpPair);  // a pair lies inside a replica
      targets_ = active_members_.data();
      num_targets_ = static_cast<std::uint32_t>(active_members_.size());
    }
  }
  needed_ = kind_ == graph::CommKind::PpPair ? 2 : num_targets_;
  // The stream each member's op waits on: a pipeline pair is its upstream member's PpComm
  // (role PpNext) and its downstream member's PpPrevComm.
  const graph::CommRole role = graph::role_of(kind_);
  for (std::uint32_t i = 0; i < size_ && i < stream_.size(); ++i) {
    const bool downstream = kind_ == graph::CommKind::PpPair &&
                            data.graph->comm_of(members_[i], graph::CommRole::PpNext) !=
                                static_cast<std::int32_t>(comm);
    const graph::Stream s = graph::stream_of(downstream ? graph::CommRole::PpPrev : role);
    stream_[i] = static_cast<std::uint8_t>(s);
    if (kind_ == graph::CommKind::PpPair && !downstream && i < 2)
      upstream_ = static_cast<std::uint8_t>(i);
  }
  flow_ = data.cost->fabric != nullptr && shape_.nodes > 1;
  if (flow_ && data.eager_p2p && kind_ == graph::CommKind::PpPair)
    throw_input(
        "network.model: flow models rendezvous transfers only; set run.p2p: rendezvous (eager "
        "sends under the flow model are not modelled yet)");
  eager_ = data.eager_p2p && kind_ == graph::CommKind::PpPair && size_ == 2;
  if (eager_) {
    // One delivery time per send of each member (its channel), sized from the members'
    // programs: no allocation per event.
    for (std::uint32_t i = 0; i < 2; ++i) {
      std::size_t sends = 0;
      for (const graph::Op& op : data.graph->program_of(members_[i]).ops)
        sends += op.kind == graph::OpKind::SendRecv && op.role != graph::CommRole::None &&
                 data.graph->comm_of(members_[i], op.role) == static_cast<std::int32_t>(comm);
      delivered_[i].resize(sends);
    }
  }
}

RoleOps role_ops(const ModelData& data) {
  const graph::SlicedGraph& g = *data.graph;
  RoleOps out(g.templates.size());
  for (std::size_t t = 0; t < g.templates.size(); ++t) {
    if (!g.is_loaded(t)) continue;
    for (const graph::Op& op : g.templates[t].ops)
      for (const graph::CommRole role : {op.role, op.role2}) {
        if (role == graph::CommRole::None) continue;
        auto& list = out[t][static_cast<std::size_t>(role)];
        const bool seen = std::any_of(list.begin(), list.end(), [&](const graph::Op* o) {
          return o->kind == op.kind && o->comm_bytes == op.comm_bytes && o->shape == op.shape;
        });
        if (!seen) list.push_back(&op);
      }
  }
  return out;
}

SimTime CommLP::least_gap(const RoleOps& ops) const {
  if (flow_) return 0;
  if (eager_) return 1;
  const graph::SlicedGraph& g = *data_->graph;
  SimTime least = kTimeInfinity;
  // Members alike in template and in the roles that reach this communicator run the same ops
  // on it: each such kind of member is priced once.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> priced;  // (template, role mask)
  for (std::uint32_t i = 0; i < size_; ++i) {
    const std::uint32_t m = members_[i];
    std::uint32_t mask = 0;
    for (int r = 1; r < graph::kNumRoles; ++r)
      if (g.comm_of(m, static_cast<graph::CommRole>(r)) == static_cast<std::int32_t>(comm_))
        mask |= 1u << r;
    const std::uint32_t t = g.rank_class[m];
    if (std::find(priced.begin(), priced.end(), std::pair{t, mask}) != priced.end()) continue;
    priced.emplace_back(t, mask);
    SCALESCOPE_EXPECTS(g.is_loaded(t));
    for (int r = 1; r < graph::kNumRoles; ++r)
      if (mask & (1u << r))
        for (const graph::Op* op : ops[t][static_cast<std::size_t>(r)])
          least = std::min(least, data_->cost->wire(*op, shape_));
  }
  return least;
}

SimTime CommLP::duration(const pdes::Event& arrival) const {
  const EmuMsg& m = arrival.as<EmuMsg>();
  const graph::Op& op = data_->graph->program_of(arrival.key.src).ops[m.op];
  for (const Memo& e : memo_)
    if (e.kind == op.kind && e.bytes == op.comm_bytes) return e.ns;
  Memo& e = memo_[memo_next_++ & 3u];
  e = Memo{op.comm_bytes, data_->cost->wire(op, shape_), op.kind};
  return e.ns;
}

void CommLP::start_flow(const graph::Op& op, std::uint8_t channel, std::uint32_t instance,
                        pdes::Context& ctx) const {
  const cost::FlowRequest r = data_->cost->flow(op, shape_);
  FlowMsg f;
  f.kind = MsgKind::FlowStart;
  f.channel = channel;
  // A pipeline pair's channel 0 carries the upstream member's sends.
  f.src_member = static_cast<std::uint8_t>(channel == kChannelDown ? upstream_ : 1 - upstream_);
  f.pattern = static_cast<std::uint8_t>(r.pattern);
  f.comm = comm_;
  f.tag = instance;
  f.steps = r.steps;
  f.flow_bytes = r.flow_bytes;
  f.alone_ns = r.alone_ns;
  f.latency_ns = r.latency_ns;
  ctx.send(data_->fabric_lp(), ctx.now(), kPriorityFlowStart, f);
}

std::uint32_t CommLP::eager_channel(const pdes::Event& e) const {
  // Each direction has its own counters, keyed by the sending member: also right for a pair that
  // is each rank's next and previous at once (a two-rank ring), where roles cannot tell them.
  const std::uint32_t me = members_[0] == e.key.src ? 0u : 1u;
  return e.as<EmuMsg>().recv ? 1u - me : me;
}

void CommLP::forward_eager(pdes::Event& e, pdes::Context& ctx) {
  EmuMsg& m = e.as<EmuMsg>();
  const std::uint32_t ch = eager_channel(e);  // = the sending member
  // Sends and receives each arrive in instance order in a consistent history (a stream issues
  // its next op after the last one completed); an out-of-order one belongs to a history about
  // to be rolled back and is ignored, as in forward().
  std::uint32_t& count = m.recv ? received_[ch] : expected_[ch];
  if (m.instance != count) {
    m.undo_completed = 2;
    return;
  }
  m.undo_completed = 0;
  ++count;
  const std::uint32_t k = m.instance;
  // The stream the arriving op waits on (a COMPLETE finishes the head op of that stream).
  const auto own_stream =
      static_cast<std::uint8_t>(data_->graph->program_of(e.key.src).ops[m.op].stream);
  EmuMsg done;
  done.kind = MsgKind::Complete;
  if (!m.recv) {
    // The data leaves now and is there after the transfer; the send is done then.
    const SimTime end = ctx.now() + duration(e);
    if (k >= delivered_[ch].size()) delivered_[ch].resize(k + 1);  // not sized: a foreign role
    delivered_[ch][k] = end;
    done.stream = own_stream;
    ctx.send(members_[ch], end, kPriorityComplete, done);
    if (received_[ch] > k) {  // the receive was posted first and waits
      done.stream = waiting_stream_[ch];
      ctx.send(members_[1 - ch], end, kPriorityComplete, done);
    }
  } else if (expected_[ch] > k) {
    // Sent before: done when the data is there, at least 1 ns after this ARRIVE (messages.hpp).
    done.stream = own_stream;
    ctx.send(members_[1 - ch], std::max(delivered_[ch][k], ctx.now() + 1), kPriorityComplete, done);
  } else {
    waiting_stream_[ch] = own_stream;  // completed by the send's arrival
  }
}

void CommLP::forward(pdes::Event& e, pdes::Context& ctx) {
  if (kind_of(e) == MsgKind::FlowDone) {
    // The fabric finished this communicator's transfer: it completes for every member now.
    EmuMsg done;
    done.kind = MsgKind::Complete;
    for (std::uint32_t i = 0; i < num_targets_; ++i) {
      done.stream = stream_[std::min<std::uint32_t>(i, 1)];
      ctx.send(targets_[i], ctx.now(), kPriorityComplete, done);
    }
    return;
  }
  EmuMsg& m = e.as<EmuMsg>();
  SCALESCOPE_EXPECTS(m.kind == MsgKind::Arrive && m.channel < 2);
  if (eager_) {
    forward_eager(e, ctx);
    return;
  }
  const int ch = m.channel;
  // Every member issues a communicator's instances in the same order (graph::validate), and a
  // stream waits for an instance to complete before it issues the next one, so in every
  // consistent history an arrival is for the awaited instance. Under Time Warp an arrival for a
  // later instance can be processed in a state that is about to be rolled back (a member acted
  // on a COMPLETE this LP has since cancelled, and the anti-message for its arrival has not
  // come yet): it is ignored, reversibly, and rolled back with that state. The sequential
  // engine never takes this path (a committed ignored arrival would leave the run unfinished,
  // which the emulation reports).
  if (m.instance != expected_[ch]) {
    m.undo_completed = 2;
    return;
  }
  m.undo_completed = 0;
  if (++arrived_[ch] < needed_) return;
  // Events arrive in timestamp order, so the last arrival is the latest: the instance starts now.
  const graph::Op* flow_op = flow_ ? &data_->graph->program_of(e.key.src).ops[m.op] : nullptr;
  if (flow_op != nullptr && flow_op->comm_bytes > 0) {
    start_flow(*flow_op, static_cast<std::uint8_t>(ch), expected_[ch], ctx);
  } else {
    // At least 1 ns, so COMPLETE sorts after this ARRIVE (see messages.hpp).
    const SimTime end = ctx.now() + duration(e);
    EmuMsg done;
    done.kind = MsgKind::Complete;
    for (std::uint32_t i = 0; i < num_targets_; ++i) {
      done.stream = stream_[std::min<std::uint32_t>(i, 1)];
      ctx.send(targets_[i], end, kPriorityComplete, done);
    }
  }
  arrived_[ch] = 0;
  ++expected_[ch];
  m.undo_completed = 1;
}

void CommLP::reverse(pdes::Event& e, pdes::Context&) {
  if (kind_of(e) == MsgKind::FlowDone) return;  // changed no state
  const EmuMsg& m = e.as<EmuMsg>();
  const int ch = m.channel;
  if (m.undo_completed == 2) return;  // ignored in forward
  if (eager_) {
    --(m.recv ? received_ : expected_)[eager_channel(e)];
    return;
  }
  if (m.undo_completed) {
    --expected_[ch];
    arrived_[ch] = needed_ - 1;
  } else {
    --arrived_[ch];
  }
}

bool CommLP::save_state(std::vector<std::byte>& out) const {
  append_bytes(out, expected_.data(), expected_.size());
  append_bytes(out, arrived_.data(), arrived_.size());
  append_bytes(out, received_.data(), received_.size());
  if (eager_)
    for (int ch = 0; ch < 2; ++ch) append_bytes(out, delivered_[ch].data(), expected_[ch]);
  return true;
}

}  // namespace scalescope::emu
