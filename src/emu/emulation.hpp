#pragma once
/// Runs one training iteration of a sliced graph: one RankLP per rank, one CommLP per
/// communicator, on the sequential engine.
#include <cstdint>
#include <vector>

#include "cost/cost_model.hpp"
#include "emu/model_data.hpp"
#include "emu/results.hpp"
#include "graph/sliced_graph.hpp"

namespace scalescope::emu {

struct EmulationOptions {
  bool coalesce_local_ops = true;           ///< false: one event per compute op (reference)
  std::vector<std::uint32_t> trace_ranks;   ///< ranks whose timeline and memory are recorded
};

/// Replays the graph. Fills RunResults::ranks (finish, breakdown, memory), timelines and memory
/// of the traced ranks, engine statistics and summary.iteration_time / peak memory; the caller
/// adds the workload figures (FLOPs, tokens, stages). Throws ContractError if a rank never
/// finishes (a deadlocked graph).
RunResults emulate(const graph::SlicedGraph& g, const cost::CostModel& cost,
                   const EmulationOptions& options);
RunResults emulate(const graph::SlicedGraph& g, const Costs& costs, const EmulationOptions& options);

}  // namespace scalescope::emu
