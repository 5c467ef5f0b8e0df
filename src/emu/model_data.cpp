#include "emu/model_data.hpp"

#include <algorithm>
#include <array>
#include <optional>

#include "core/error.hpp"
#include "cost/compute_model.hpp"
#include "emu/sm_contention.hpp"

namespace scalescope::emu {

MemoryProfile memory_profile(const graph::RankProgram& p) {
  MemoryProfile m;
  m.after_alloc.resize(p.size());
  m.after_free.resize(p.size());
  std::int64_t live = p.static_memory;
  m.peak = live;
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    const graph::Op& op = p.ops[i];
    live += op.mem_alloc;
    m.after_alloc[i] = live;
    if (live + op.mem_transient > m.peak) {
      m.peak = live + op.mem_transient;
      m.peak_transient = op.mem_transient;
    }
    live -= op.mem_free;
    m.after_free[i] = live;
  }
  return m;
}

WaitDeps wait_deps(const graph::RankProgram& p) {
  WaitDeps w;
  std::vector<std::uint32_t> wakes(p.size(), 0);
  w.deps.offsets.reserve(p.size() + 1);
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    for (const std::uint32_t* d = p.deps_begin(i); d != p.deps_end(i); ++d)
      if (p.ops[*d].stream != p.ops[i].stream) {
        w.deps.items.push_back(*d);
        ++wakes[*d];
      }
    w.deps.offsets.push_back(static_cast<std::uint32_t>(w.deps.items.size()));
  }
  w.wakes.offsets.resize(p.size() + 1, 0);
  for (std::uint32_t i = 0; i < p.size(); ++i)
    w.wakes.offsets[i + 1] = w.wakes.offsets[i] + wakes[i];
  w.wakes.items.resize(w.deps.items.size());
  std::vector<std::uint32_t> fill(w.wakes.offsets.begin(), w.wakes.offsets.end() - 1);
  for (std::uint32_t i = 0; i < p.size(); ++i)
    for (const std::uint32_t* d = w.deps.begin(i); d != w.deps.end(i); ++d)
      w.wakes.items[fill[*d]++] = i;
  return w;
}

ModelData::ModelData(const graph::SlicedGraph& g, const Costs& c, bool coalesce,
                     const std::map<std::uint32_t, std::vector<SimTime>>* class_durations,
                     const std::map<std::uint32_t, std::vector<SimTime>>* rank_durations_in)
    : graph(&g), cost(&c), coalesce_local_ops(coalesce) {
  durations.reserve(g.templates.size());
  memory.reserve(g.templates.size());
  waits.reserve(g.templates.size());
  for (std::size_t k = 0; k < g.templates.size(); ++k) {
    const graph::RankProgram& p = g.templates[k];
    if (!g.is_loaded(k)) {  // a partial read: no process-local LP uses this template
      durations.emplace_back();
      memory.emplace_back();
      waits.emplace_back();
      continue;
    }
    std::vector<SimTime> d(p.size(), 0);
    const auto given = class_durations != nullptr
                           ? class_durations->find(static_cast<std::uint32_t>(k))
                           : std::map<std::uint32_t, std::vector<SimTime>>::const_iterator{};
    if (class_durations != nullptr && given != class_durations->end()) {
      SCALESCOPE_EXPECTS(given->second.size() == p.size());
      d = given->second;
    } else {
      for (std::uint32_t i = 0; i < p.size(); ++i)
        if (!graph::is_communication(p.ops[i].kind)) d[i] = c.compute(p.ops[i]);
    }
    durations.push_back(std::move(d));
    memory.push_back(memory_profile(p));
    waits.push_back(wait_deps(p));
  }
  // Wire times of each template's communication ops on the communicators of the first rank of
  // its class (ranks of one class have communicators of the same shape in every layout built
  // here; the breakdown is the only reader).
  first_rank.assign(g.templates.size(), -1);
  for (std::uint32_t r = 0; r < g.world_size; ++r)
    if (first_rank[g.rank_class[r]] < 0) first_rank[g.rank_class[r]] = r;
  wire.resize(g.templates.size());
  prev_on_stream.resize(g.templates.size());
  std::vector<std::vector<std::uint32_t>> comm_sms(g.templates.size());
  for (std::size_t k = 0; k < g.templates.size(); ++k) {
    if (!g.is_loaded(k) || first_rank[k] < 0) continue;
    const graph::RankProgram& p = g.templates[k];
    const auto rank = static_cast<std::uint32_t>(first_rank[k]);
    // The shape of each of the rank's communicators, once (a template has many ops per role).
    std::array<std::optional<cost::CommShape>, graph::kNumRoles> shapes;
    std::vector<SimTime>& w = wire[k];
    w.assign(p.size(), 0);
    std::vector<std::uint32_t>& sms = comm_sms[k];  // SMs each communication op's kernel holds
    sms.assign(p.size(), 0);
    for (std::uint32_t i = 0; i < p.size(); ++i) {
      const graph::Op& op = p.ops[i];
      if (!graph::is_communication(op.kind)) continue;
      const graph::CommRole role = op.role != graph::CommRole::None ? op.role : op.role2;
      const std::int32_t comm = g.comm_of(rank, role);
      if (comm == graph::kNoComm) continue;
      std::optional<cost::CommShape>& shape = shapes[static_cast<std::size_t>(role)];
      if (!shape) {
        const auto id = static_cast<std::uint32_t>(comm);
        shape = c.shape(g.comms.members_begin(id), g.comms.members_end(id));
      }
      w[i] = c.wire(op, *shape);
      if (c.comm_sms) sms[i] = c.comm_sms(op, *shape);
    }
    if (c.sm_factor) durations[k] = with_comm_kernel_sms(p, durations[k], w, sms, c.sm_factor);
    std::vector<std::uint32_t>& prev = prev_on_stream[k];
    prev.assign(p.size(), kNoOp);
    for (const auto& list : p.stream_ops)
      for (std::size_t c2 = 1; c2 < list.size(); ++c2) prev[list[c2]] = list[c2 - 1];
  }
  // Host issue: the program in order, each op costing the host its issue time; a host_sync op
  // makes the host wait for it (RankLP::issue_time).
  if (c.host) {
    host_prefix.resize(g.templates.size());
    last_sync.resize(g.templates.size());
    for (std::size_t k = 0; k < g.templates.size(); ++k) {
      if (!g.is_loaded(k)) continue;
      const graph::RankProgram& p = g.templates[k];
      std::vector<SimTime>& h = host_prefix[k];
      std::vector<std::uint32_t>& ls = last_sync[k];
      h.resize(p.size());
      ls.resize(p.size());
      SimTime sum = 0;
      std::uint32_t last = kNoOp;
      for (std::uint32_t i = 0; i < p.size(); ++i) {
        sum += c.host(p.ops[i]);
        h[i] = sum;
        ls[i] = last;
        if (p.ops[i].host_sync) last = i;
      }
    }
  }
  classes.resize(g.templates.size());
  for (std::size_t k = 0; k < g.templates.size(); ++k) {
    RankClass& rc = classes[k];
    rc.data = this;
    if (!g.is_loaded(k)) continue;
    const graph::RankProgram& p = g.templates[k];
    rc.prog = &p;
    rc.dur = durations[k].data();
    rc.mem = &memory[k];
    rc.waits = &waits[k];
    rc.wire = wire[k].data();
    rc.prev_on_stream = prev_on_stream[k].data();
    if (!host_prefix.empty()) {
      rc.host_prefix = host_prefix[k].data();
      rc.last_sync = last_sync[k].data();
    }
    for (int s = 1; s < graph::kNumStreams; ++s) {
      rc.comm_base[s] = rc.comm_ops;
      rc.comm_ops += static_cast<std::uint32_t>(p.stream_ops[s].size());
    }
  }
  if (rank_durations_in != nullptr)
    for (const auto& [rank, d] : *rank_durations_in) {
      SCALESCOPE_EXPECTS(rank < g.world_size);
      const std::uint32_t k = g.rank_class[rank];
      if (!g.is_loaded(k)) continue;
      SCALESCOPE_EXPECTS(d.size() == g.templates[k].size());
      rank_durations.emplace(
          rank, c.sm_factor && !comm_sms[k].empty()
                    ? with_comm_kernel_sms(g.templates[k], d, wire[k], comm_sms[k], c.sm_factor)
                    : d);
    }
  // After the map stops changing: the copies point at its vectors.
  for (const auto& [rank, d] : rank_durations) {
    RankClass rc = classes[g.rank_class[rank]];
    rc.dur = d.data();
    rank_classes.emplace(rank, rc);
  }
}

Costs costs_of(const cost::CostModel& model) {
  Costs c;
  c.compute = [&model](const graph::Op& op) { return model.compute_ns(op); };
  if (model.kernel().host_launch_us > 0)
    c.host = [&model](const graph::Op& op) { return model.host_ns(op); };
  c.collective = [&model](graph::OpKind k, double bytes, const cost::CommShape& s) {
    return model.collective_ns(k, bytes, s);
  };
  c.p2p = [&model](double bytes, bool same_node) { return model.p2p_ns(bytes, same_node); };
  c.ep_dispatch = [&model](const graph::Op& op, const cost::CommShape& s) {
    return model.ep_dispatch_ns(op.comm_bytes, op.shape[0], op.shape[1], s, op.shape[2]);
  };
  c.shape = [&model](const std::uint32_t* b, const std::uint32_t* e) {
    return model.shape_of(b, e);
  };
  if (model.fabric() != nullptr) {
    c.fabric = model.fabric();
    c.flow = [&model](const graph::Op& op, const cost::CommShape& s) {
      return model.flow_request(op, s);
    };
  }
  if (model.network().comm_kernel_sms) {
    c.comm_sms = [&model](const graph::Op& op, const cost::CommShape& s) {
      return model.comm_kernel_sms(op, s);
    };
    c.sm_factor = [&model](const graph::Op& op, std::uint32_t taken) {
      return cost::sm_contention_factor(model.gpu(), op, taken);
    };
  }
  c.gpu = model.gpu().name;
  c.peak_flops = model.gpu().peak_tflops_bf16 * 1e12;
  return c;
}

pdes::LpId ModelData::fabric_lp() const {
  return graph->world_size + static_cast<pdes::LpId>(graph->comms.size());
}

pdes::LpId ModelData::comm_lp(std::int32_t comm) const {
  return graph->world_size + static_cast<pdes::LpId>(comm);
}

}  // namespace scalescope::emu
