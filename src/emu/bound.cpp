#include "emu/bound.hpp"

#include <algorithm>
#include <map>

#include "graph/sliced_graph.hpp"

namespace scalescope::emu {

std::vector<AloneBound> alone_bounds(const ModelData& data) {
  const graph::SlicedGraph& g = *data.graph;
  const Costs& c = *data.cost;
  std::vector<AloneBound> out(g.templates.size());
  std::vector<SimTime> finish;
  for (std::size_t k = 0; k < g.templates.size(); ++k) {
    if (!g.is_loaded(k) || data.first_rank[k] < 0) continue;
    const RankClass& rc = data.classes[k];
    const graph::RankProgram& p = *rc.prog;
    const auto rank = static_cast<std::uint32_t>(data.first_rank[k]);
    // Per role: whether the flow model runs this rank's transfers there (across nodes).
    std::array<std::int8_t, graph::kNumRoles> flow{};
    flow.fill(-1);
    const auto by_flow = [&](graph::CommRole role) {
      std::int8_t& f = flow[static_cast<std::size_t>(role)];
      if (f < 0) {
        const std::int32_t comm = g.comm_of(rank, role);
        f = 0;
        if (c.fabric != nullptr && comm != graph::kNoComm) {
          const auto id = static_cast<std::uint32_t>(comm);
          f = c.shape(g.comms.members_begin(id), g.comms.members_end(id)).nodes > 1 ? 1 : 0;
        }
      }
      return f == 1;
    };
    finish.assign(p.size(), 0);
    std::map<std::uint16_t, SimTime> span;  // per micro-batch tag (a few dozen)
    SimTime end = 0, compute_free = 0;
    for (std::uint32_t i = 0; i < p.size(); ++i) {
      const graph::Op& op = p.ops[i];
      SimTime t = 0;
      for (const std::uint32_t* d = p.deps_begin(i); d != p.deps_end(i); ++d)
        t = std::max(t, finish[*d]);
      if (rc.prev_on_stream[i] != kNoOp) t = std::max(t, finish[rc.prev_on_stream[i]]);
      t = std::max(t, host_issue_time(rc, i, finish.data()));  // earlier ops all finished
      SimTime d = rc.dur[i];
      if (graph::is_collective(op.kind)) d = by_flow(op.role) ? 0 : rc.wire[i];
      if (op.kind == graph::OpKind::SendRecv) d = 0;
      finish[i] = t + d;
      end = std::max(end, finish[i]);
      if (op.stream == graph::Stream::Compute && !graph::is_communication(op.kind)) {
        if (op.microbatch != 0xFFFF) span[op.microbatch] += finish[i] - compute_free;
        compute_free = finish[i];
      }
    }
    AloneBound& b = out[k];
    b.finish = end;
    b.microbatches = static_cast<std::uint32_t>(span.size());
    if (!span.empty())
      b.min_microbatch_span =
          std::min_element(span.begin(), span.end(), [](const auto& x, const auto& y) {
            return x.second < y.second;
          })->second;
  }
  return out;
}

}  // namespace scalescope::emu
