#include "emu/fabric_lp.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace scalescope::emu {

FabricLP::FabricLP(const ModelData& data, const cost::Fabric& fabric)
    : data_(&data), fabric_(&fabric), solver_(fabric.num_links()) {
  const std::uint32_t n = fabric.num_links();
  capacity_.resize(n);
  for (cost::LinkId l = 0; l < n; ++l) capacity_[l] = fabric.capacity(l) * 1e-9;  // bytes/ns
  users_.resize(n);
  load_.assign(n, 0);
  saturates_at_.resize(n);
  for (cost::LinkId l = 0; l < n; ++l) saturates_at_[l] = capacity_[l] * 1e6 * (1 + 1e-9);
  link_seen_.assign(n, 0);
  link_active_.assign(n, 0);
}

const cost::Demand& FabricLP::demand(const FlowMsg& m) {
  const auto pattern = static_cast<cost::FlowPattern>(m.pattern);
  const std::uint32_t src = pattern == cost::FlowPattern::P2P ? m.src_member : 0;
  const std::uint64_t key = (std::uint64_t{m.comm} << 8) | (std::uint64_t{m.pattern} << 1) | src;
  auto& slot = demands_[key];
  if (!slot) {
    const auto& comms = data_->graph->comms;
    slot = std::make_unique<cost::Demand>(cost::demand_of(
        *fabric_, pattern, comms.members_begin(m.comm), comms.num_members(m.comm), src));
  }
  return *slot;
}

void FabricLP::tree_update(std::uint32_t slot) {
  std::size_t cap = tree_.size() / 2;
  if (slot >= cap) {
    // Grow to the next power of two and rebuild: amortized O(1) per slot.
    std::size_t n = std::max<std::size_t>(64, cap);
    while (n <= slot) n *= 2;
    tree_.assign(2 * n, 0);
    for (std::size_t i = 0; i < n; ++i) tree_[n + i] = static_cast<std::uint32_t>(i);
    for (std::size_t i = n - 1; i >= 1; --i) {
      const std::uint32_t a = tree_[2 * i], b = tree_[2 * i + 1];
      tree_[i] = key(b) < key(a) ? b : a;
    }
    return;
  }
  std::size_t i = cap + slot;
  while (i > 1) {
    i /= 2;
    const std::uint32_t a = tree_[2 * i], b = tree_[2 * i + 1];
    tree_[i] = key(b) < key(a) ? b : a;
  }
}

void FabricLP::link_users_add(std::uint32_t slot) {
  const cost::MaxMinVar& v = flows_[slot].var;
  for (std::uint32_t i = 0; i < v.n; ++i) {
    auto& u = users_[v.links[i]];
    u.insert(std::upper_bound(u.begin(), u.end(), slot), slot);
    load_[v.links[i]] += flows_[slot].load * static_cast<std::int64_t>(v.weight[i]);
  }
}

void FabricLP::link_users_remove(std::uint32_t slot) {
  const cost::MaxMinVar& v = flows_[slot].var;
  for (std::uint32_t i = 0; i < v.n; ++i) {
    auto& u = users_[v.links[i]];
    u.erase(std::lower_bound(u.begin(), u.end(), slot));
    load_[v.links[i]] -= flows_[slot].load * static_cast<std::int64_t>(v.weight[i]);
  }
}

void FabricLP::forward(pdes::Event& e, pdes::Context& ctx) {
  const std::size_t logged = log_.size();
  const FlowMsg& m = e.as<FlowMsg>();
  if (m.kind == MsgKind::FlowStart) {
    start(m, ctx);
  } else {
    SCALESCOPE_EXPECTS(m.kind == MsgKind::FlowWake);
    if (m.tag == version_) wake(ctx);  // else stale: a later start or end rescheduled
  }
  marks_.push_back(static_cast<std::uint32_t>(log_.size() - logged));
}

void FabricLP::start(const FlowMsg& m, pdes::Context& ctx) {
  const cost::Demand& d = demand(m);
  std::uint32_t slot = 0;
  if (free_.empty()) {
    slot = static_cast<std::uint32_t>(flows_.size());
    flows_.emplace_back();
    in_comp_.push_back(0);
    log_.push_back(Undo{UndoKind::AddedFresh, slot, Flow{}});
  } else {
    slot = free_.back();
    free_.pop_back();
    log(UndoKind::Added, slot);
  }
  Flow& f = flows_[slot];
  f.var.links = d.links.data();
  f.var.weight = d.weight.data();
  f.var.n = static_cast<std::uint32_t>(d.links.size());
  f.var.bound = m.flow_bytes / std::max(m.alone_ns, 1e-9);
  f.load = std::llround(f.var.bound * 1e6);
  f.var.rate = 0;
  f.left = m.flow_bytes;
  f.t_upd = ctx.now();
  f.finish = kTimeInfinity;
  f.latency = std::max<SimTime>(1, std::llround(m.latency_ns + m.steps * d.extra_latency_ns));
  f.comm = m.comm;
  f.tag = m.tag;
  f.channel = m.channel;
  f.live = true;
  ++live_;
  link_users_add(slot);
  if (!try_add(slot, ctx.now())) {
    seed_links_.assign(d.links.begin(), d.links.end());
    rebalance(slot, seed_links_, ctx.now());  // the seed is in its component: its finish is set
  }
  tree_update(slot);
  schedule_wake(ctx);
}

void FabricLP::wake(pdes::Context& ctx) {
  const SimTime now = ctx.now();
  seed_links_.clear();
  // Flows whose data is through end now, earliest (then lowest slot) first; their links seed the
  // rebalance.
  for (std::uint32_t s = tree_min(); s != UINT32_MAX && key(s) <= now; s = tree_min()) {
    Flow& f = flows_[s];
    FlowMsg done;
    done.kind = MsgKind::FlowDone;
    done.channel = f.channel;
    done.comm = f.comm;
    done.tag = f.tag;
    ctx.send(data_->comm_lp(static_cast<std::int32_t>(f.comm)), now + f.latency, kPriorityFlowDone,
             done);
    log(UndoKind::Removed, s);
    link_users_remove(s);
    seed_links_.insert(seed_links_.end(), f.var.links, f.var.links + f.var.n);
    f.live = false;
    f.finish = kTimeInfinity;
    --live_;
    free_.push_back(s);
    tree_update(s);
  }
  // The others keep their rates when each user of an ended flow's links still has a bottleneck.
  bool keep = true;
  for (std::size_t i = 0; i < seed_links_.size() && keep; ++i)
    for (std::uint32_t u : users_[seed_links_[i]])
      if (!keeps_bottleneck(u)) {
        keep = false;
        break;
      }
  if (!keep) rebalance(UINT32_MAX, seed_links_, now);
  schedule_wake(ctx);
}

void FabricLP::rebalance(std::uint32_t seed, const std::vector<cost::LinkId>& seed_links,
                         SimTime now) {
  // The component: the seed flow, every user of a seed link, and, transitively, every user of a
  // link that can saturate (its users' bounds sum above its capacity). Links that cannot saturate
  // constrain nobody, so flows coupled only through them keep their rates.
  comp_.clear();
  links_todo_.clear();
  links_seen_list_.clear();
  auto add_flow = [&](std::uint32_t s) {
    if (in_comp_[s]) return;
    in_comp_[s] = 1;
    comp_.push_back(s);
    const cost::MaxMinVar& v = flows_[s].var;
    links_todo_.insert(links_todo_.end(), v.links, v.links + v.n);
  };
  auto saturable = [&](cost::LinkId l) { return static_cast<double>(load_[l]) > saturates_at_[l]; };
  if (seed != UINT32_MAX) add_flow(seed);
  for (cost::LinkId l : seed_links)
    for (std::uint32_t u : users_[l]) add_flow(u);
  while (!links_todo_.empty()) {
    const cost::LinkId l = links_todo_.back();
    links_todo_.pop_back();
    if (link_seen_[l]) continue;
    link_seen_[l] = 1;
    links_seen_list_.push_back(l);
    if (saturable(l)) {
      link_seen_[l] = 2;  // constrains the solve
      for (std::uint32_t u : users_[l]) add_flow(u);
    }
  }
  if (comp_.empty()) {
    for (cost::LinkId l : links_seen_list_) link_seen_[l] = 0;
    return;
  }
  std::sort(comp_.begin(), comp_.end());
  vars_.clear();
  old_rate_.clear();
  for (std::uint32_t s : comp_) {
    in_comp_[s] = 0;
    vars_.push_back(&flows_[s].var);
    old_rate_.push_back(flows_[s].var.rate);
  }
  if (vars_.size() == 1) {
    // Alone: its bound, or the tightest of its links for its flows there.
    cost::MaxMinVar& v = *vars_[0];
    v.rate = v.bound;
    for (std::uint32_t i = 0; i < v.n; ++i)
      v.rate = std::min(v.rate, capacity_[v.links[i]] / static_cast<double>(v.weight[i]));
  } else {
    // Only the links that can saturate constrain (link_seen_ 2); the others never bind.
    for (cost::LinkId l : links_seen_list_) link_active_[l] = link_seen_[l] == 2;
    solver_.solve(vars_.data(), vars_.size(), capacity_.data(), link_active_.data());
    for (cost::LinkId l : links_seen_list_) link_active_[l] = 0;
  }
  for (cost::LinkId l : links_seen_list_) link_seen_[l] = 0;
  // Only the flows whose rate changed move on to `now` (a flow that keeps its rate keeps its
  // finish, rounded once); the seed's finish is set here, its tree entry by the caller.
  for (std::size_t i = 0; i < comp_.size(); ++i) {
    const std::uint32_t s = comp_[i];
    Flow& f = flows_[s];
    if (s == seed) {
      set_finish(f, now);
      continue;
    }
    const double rate = f.var.rate;
    if (rate == old_rate_[i]) continue;
    f.var.rate = old_rate_[i];
    log(UndoKind::State, s);
    f.left = std::max(0.0, f.left - f.var.rate * static_cast<double>(now - f.t_upd));
    f.t_upd = now;
    f.var.rate = rate;
    set_finish(f, now);
    tree_update(s);
  }
}

FabricLP::LinkUse FabricLP::link_use(cost::LinkId l, std::uint32_t skip) const {
  LinkUse u;
  for (std::uint32_t s : users_[l]) {
    if (s == skip) continue;
    const cost::MaxMinVar& v = flows_[s].var;
    const auto* it = std::lower_bound(v.links, v.links + v.n, l);
    u.used += static_cast<double>(v.weight[it - v.links]) * v.rate;
    u.max_rate = std::max(u.max_rate, v.rate);
  }
  return u;
}

// Within this fraction a link counts as saturated and two rates as equal (the solver's rounding).
constexpr double kTolerance = 1e-9;

bool FabricLP::try_add(std::uint32_t slot, SimTime now) {
  Flow& f = flows_[slot];
  cost::MaxMinVar& v = f.var;
  double rate = v.bound;
  use_.clear();
  for (std::uint32_t i = 0; i < v.n; ++i) {
    const LinkUse u = use_.emplace_back(link_use(v.links[i], slot));
    const double cap = capacity_[v.links[i]];
    // A link already saturated: the new flow must take from its users.
    if (u.used >= cap * (1 - kTolerance)) return false;
    rate = std::min(rate, (cap - u.used) / static_cast<double>(v.weight[i]));
  }
  if (rate < v.bound * (1 - kTolerance)) {
    // Below its bound: it needs a link it saturates on which nobody is faster.
    bool bottleneck = false;
    for (std::uint32_t i = 0; i < v.n && !bottleneck; ++i) {
      const LinkUse& u = use_[i];
      const double cap = capacity_[v.links[i]];
      const double used = u.used + static_cast<double>(v.weight[i]) * rate;
      bottleneck = used >= cap * (1 - kTolerance) && rate >= u.max_rate * (1 - kTolerance);
    }
    if (!bottleneck) return false;
  }
  v.rate = rate;
  set_finish(f, now);
  return true;
}

bool FabricLP::keeps_bottleneck(std::uint32_t slot) const {
  const cost::MaxMinVar& v = flows_[slot].var;
  if (v.rate >= v.bound * (1 - kTolerance)) return true;
  for (std::uint32_t i = 0; i < v.n; ++i) {
    const LinkUse u = link_use(v.links[i], UINT32_MAX);
    if (u.used >= capacity_[v.links[i]] * (1 - kTolerance) &&
        v.rate >= u.max_rate * (1 - kTolerance))
      return true;
  }
  return false;
}

void FabricLP::schedule_wake(pdes::Context& ctx) {
  const std::uint32_t first = tree_min();
  const SimTime next = first == UINT32_MAX ? kTimeInfinity : key(first);
  log_.push_back(Undo{UndoKind::Version, version_, Flow{}});
  ++version_;
  if (next == kTimeInfinity) return;
  FlowMsg w;
  w.kind = MsgKind::FlowWake;
  w.tag = version_;
  ctx.send(ctx.self(), std::max(next, ctx.now()), kPriorityFlowWake, w);
}

void FabricLP::reverse(pdes::Event&, pdes::Context&) {
  std::uint32_t n = marks_.back();
  marks_.pop_back();
  for (; n > 0; --n) {
    Undo& u = log_.back();
    switch (u.kind) {
      case UndoKind::Version:
        version_ = u.slot;
        break;
      case UndoKind::State:
        flows_[u.slot] = u.saved;
        tree_update(u.slot);
        break;
      case UndoKind::Removed:
        free_.pop_back();
        flows_[u.slot] = u.saved;
        ++live_;
        link_users_add(u.slot);
        tree_update(u.slot);
        break;
      case UndoKind::Added:
      case UndoKind::AddedFresh:
        link_users_remove(u.slot);
        --live_;
        if (u.kind == UndoKind::AddedFresh) {
          flows_.pop_back();
          in_comp_.pop_back();
        } else {
          flows_[u.slot] = u.saved;
          free_.push_back(u.slot);
        }
        tree_update(u.slot);
        break;
    }
    log_.pop_back();
  }
}

void FabricLP::commit(const pdes::Event&) {
  const std::uint32_t n = marks_.front();
  marks_.pop_front();
  log_.erase(log_.begin(), log_.begin() + n);
}

bool FabricLP::save_state(std::vector<std::byte>& out) const {
  append_bytes(out, &version_, 1);
  append_bytes(out, &live_, 1);
  append_bytes(out, free_.data(), free_.size());
  for (const Flow& f : flows_) {
    append_bytes(out, &f.live, 1);
    if (!f.live) continue;
    append_bytes(out, &f.left, 1);
    append_bytes(out, &f.t_upd, 1);
    append_bytes(out, &f.finish, 1);
    append_bytes(out, &f.var.rate, 1);
    append_bytes(out, &f.comm, 1);
    append_bytes(out, &f.tag, 1);
  }
  for (const auto& u : users_) append_bytes(out, u.data(), u.size());
  return true;
}

}  // namespace scalescope::emu
