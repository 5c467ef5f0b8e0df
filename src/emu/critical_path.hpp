#pragma once
/// The critical path of a replayed iteration (docs/engine.md "Critical path"): from the op that
/// finishes last, backwards through whatever let each op start — the op before it on its stream,
/// a dependency on another stream, the host's issue, or, for a transfer, the member that arrived
/// last — to time 0. Its segments tile [0, iteration time] exactly, so their totals per kind add
/// up to the iteration time.
#include <mpi.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "core/sim_time.hpp"
#include "emu/model_data.hpp"
#include "emu/results.hpp"
#include "graph/sliced_graph.hpp"

namespace scalescope::emu {

/// The kind of a transfer on role `r`.
PathKind path_kind_of(graph::CommRole r);

/// What the walk reads of a rank: its class and its ops' finish times (the RankLP's arena).
struct RankTimes {
  const RankClass* cls = nullptr;
  const SimTime* finish = nullptr;
};

/// The path ending at op `last_op` of rank `last_rank` on one process: `times(r)` for every rank.
CriticalPath critical_path(const graph::SlicedGraph& g, std::uint32_t last_rank,
                           const std::function<RankTimes(std::uint32_t)>& times);

/// The same over the processes of `comm` (collective; identical result on every process):
/// `times(r)` is called only for the ranks `owner[r]` == this process.
CriticalPath critical_path(const graph::SlicedGraph& g, std::uint32_t last_rank,
                           const std::function<RankTimes(std::uint32_t)>& times,
                           const std::vector<std::uint32_t>& owner, MPI_Comm comm);

}  // namespace scalescope::emu
