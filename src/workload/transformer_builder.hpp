#pragma once
/// Megatron-style dense decoder training iteration → sliced execution graph: one template per
/// pipeline stage, the rank → stage map and the communicator table.
#include <cstdint>
#include <string>

#include "graph/sliced_graph.hpp"
#include "workload/model_spec.hpp"
#include "workload/parallel_plan.hpp"

namespace scalescope::workload {

/// Megatron's default rank order "tp-cp-ep-dp-pp": TP fastest, then DP, then PP
/// (megatron/core/parallel_state.py, RankGenerator).
struct RankLayout {
  std::int64_t tp = 1, cp = 1, dp = 1, pp = 1;
  /// Megatron-Core's default order tp-cp-dp-pp: TP fastest, then CP, then DP, then PP.
  std::uint32_t rank(std::int64_t tp_rank, std::int64_t cp_rank, std::int64_t dp_rank,
                     std::int64_t pp_rank) const {
    return static_cast<std::uint32_t>(tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)));
  }
  std::uint32_t stage_of(std::uint32_t rank) const {
    return static_cast<std::uint32_t>(rank / (tp * cp * dp));
  }
  std::uint32_t world() const { return static_cast<std::uint32_t>(tp * cp * dp * pp); }
};
inline RankLayout layout_of(const ParallelPlan& p) {
  return {p.tp(), p.cp(), p.dp(), p.pp()};
}

/// Builds, finalizes and validates the graph of one training iteration. The plan must be
/// checked already (io::load_experiment does): TP divides heads, PP divides layers, etc.
graph::SlicedGraph build_graph(const ModelSpec& model, const ParallelPlan& plan,
                               const TrainingSpec& training, const std::string& config_text = {});

}  // namespace scalescope::workload
