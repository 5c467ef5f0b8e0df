#include "emu/emulation.hpp"

#include <algorithm>
#include <memory>

#include "core/error.hpp"
#include "emu/comm_lp.hpp"
#include "emu/rank_lp.hpp"
#include "pdes/sequential_engine.hpp"

namespace scalescope::emu {

RunResults emulate(const graph::SlicedGraph& g, const cost::CostModel& cost,
                   const EmulationOptions& options) {
  return emulate(g, costs_of(cost), options);
}

RunResults emulate(const graph::SlicedGraph& g, const Costs& cost,
                   const EmulationOptions& options) {
  ModelData data(g, cost, options.coalesce_local_ops);
  RunResults out;
  out.config_text = g.config_text;
  out.ranks.resize(g.world_size);
  for (std::uint32_t r : options.trace_ranks) {
    if (r >= g.world_size)
      throw_input("run.trace_ranks: rank {} is outside the world of {} ranks", r, g.world_size);
    out.timelines[r];
    out.memory[r];
  }

  std::vector<RankLP> ranks;
  ranks.reserve(g.world_size);
  for (std::uint32_t r = 0; r < g.world_size; ++r) {
    RankRecorder rec{&out.ranks[r], nullptr, nullptr};
    if (auto it = out.timelines.find(r); it != out.timelines.end()) {
      rec.timeline = &it->second;
      rec.memory = &out.memory[r];
    }
    out.ranks[r].rank_class = g.rank_class[r];
    ranks.emplace_back(r, data, rec);
  }
  std::vector<CommLP> comms;
  comms.reserve(g.comms.size());
  for (std::uint32_t c = 0; c < g.comms.size(); ++c) comms.emplace_back(c, data);

  std::vector<pdes::LogicalProcess*> lps;
  lps.reserve(ranks.size() + comms.size());
  for (auto& r : ranks) lps.push_back(&r);
  for (auto& c : comms) lps.push_back(&c);

  pdes::SequentialEngine engine(std::move(lps));
  const pdes::EngineStats stats = engine.run();

  for (const RankLP& r : ranks)
    if (!r.done())
      throw ContractError(fmt::format("emulation deadlocked: rank {} did not finish its program "
                                      "(unmatched communication in the graph)", r.rank()));
  for (std::uint32_t c = 0; c < comms.size(); ++c)
    if (!comms[c].idle())
      throw ContractError(fmt::format("emulation: communicator {} has an incomplete instance", c));

  for (auto& [rank, mem] : out.memory)
    std::stable_sort(mem.begin(), mem.end(),
                     [](const MemoryRecord& a, const MemoryRecord& b) { return a.time < b.time; });
  for (auto& [rank, tl] : out.timelines)
    std::sort(tl.begin(), tl.end(), [](const TimelineRecord& a, const TimelineRecord& b) {
      return a.start != b.start ? a.start < b.start : a.op < b.op;
    });

  out.engine.kind = "sequential";
  out.engine.processes = 1;
  out.engine.events_processed = stats.events_processed;
  out.engine.events_committed = stats.events_committed;
  out.engine.wall_s = stats.wall_s;

  Summary& s = out.summary;
  s.world_size = g.world_size;
  for (const RankResult& r : out.ranks) {
    s.iteration_time = std::max(s.iteration_time, r.finish);
    s.peak_memory_bytes = std::max(s.peak_memory_bytes, r.peak_memory);
  }
  s.gpu = cost.gpu;
  s.peak_flops_per_gpu = cost.peak_flops;
  return out;
}

}  // namespace scalescope::emu
