#include "emu/model_data.hpp"

#include <algorithm>

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
    m.peak = std::max(m.peak, live + op.mem_transient);
    live -= op.mem_free;
    m.after_free[i] = live;
  }
  return m;
}

ModelData::ModelData(const graph::SlicedGraph& g, const Costs& c, bool coalesce)
    : graph(&g), cost(&c), coalesce_local_ops(coalesce) {
  durations.reserve(g.templates.size());
  memory.reserve(g.templates.size());
  for (std::size_t k = 0; k < g.templates.size(); ++k) {
    const graph::RankProgram& p = g.templates[k];
    if (!g.is_loaded(k)) {  // a partial read: no process-local LP uses this template
      durations.emplace_back();
      memory.emplace_back();
      continue;
    }
    std::vector<SimTime> d(p.size(), 0);
    for (std::uint32_t i = 0; i < p.size(); ++i)
      if (!graph::is_communication(p.ops[i].kind)) d[i] = c.compute(p.ops[i]);
    durations.push_back(std::move(d));
    memory.push_back(memory_profile(p));
  }
}

Costs costs_of(const cost::CostModel& model) {
  Costs c;
  c.compute = [&model](const graph::Op& op) { return model.compute_ns(op); };
  c.collective = [&model](graph::OpKind k, double bytes, const cost::CommShape& s) {
    return model.collective_ns(k, bytes, s);
  };
  c.p2p = [&model](double bytes, bool same_node) { return model.p2p_ns(bytes, same_node); };
  c.shape = [&model](const std::uint32_t* b, const std::uint32_t* e) {
    return model.shape_of(b, e);
  };
  c.gpu = model.gpu().name;
  c.peak_flops = model.gpu().peak_tflops_bf16 * 1e12;
  return c;
}

pdes::LpId ModelData::comm_lp(std::int32_t comm) const {
  return graph->world_size + static_cast<pdes::LpId>(comm);
}

}  // namespace scalescope::emu
