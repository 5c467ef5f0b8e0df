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
  std::int64_t etp = 1, ep = 1;  ///< expert tensor / expert model parallel sizes
  /// Megatron-Core's default order tp-cp-dp-pp: TP fastest, then CP, then DP, then PP.
  std::uint32_t rank(std::int64_t tp_rank, std::int64_t cp_rank, std::int64_t dp_rank,
                     std::int64_t pp_rank) const {
    return static_cast<std::uint32_t>(tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)));
  }
  std::uint32_t stage_of(std::uint32_t rank) const {
    return static_cast<std::uint32_t>(rank / (tp * cp * dp));
  }
  std::uint32_t world() const { return static_cast<std::uint32_t>(tp * cp * dp * pp); }
  /// The expert layout of a stage's tp·cp·dp ranks: ETP fastest, then EP, then expert DP
  /// (Megatron-Core's expert RankGenerator with the order tp-cp-ep-dp-pp and cp = 1).
  std::uint32_t expert_rank(std::int64_t etp_rank, std::int64_t ep_rank, std::int64_t edp_rank,
                            std::int64_t pp_rank) const {
    return static_cast<std::uint32_t>(etp_rank + etp * (ep_rank + ep * edp_rank) +
                                      tp * cp * dp * pp_rank);
  }
  std::int64_t ep_rank_of(std::uint32_t rank) const {
    return (static_cast<std::int64_t>(rank) % (tp * cp * dp)) / etp % ep;
  }
};
inline RankLayout layout_of(const ParallelPlan& p) {
  return {p.tp(), p.cp(), p.dp(), p.pp(), p.etp(), p.ep()};
}

/// Programs per pipeline stage: EP when a skewed MoE router gives each EP rank its own load
/// (template stage·EP + ep_rank), else 1.
std::int64_t expert_load_classes(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t);

/// Builds, finalizes and validates the graph of one training iteration. The plan must be
/// checked already (io::load_experiment does): TP divides heads, PP divides layers, etc.
graph::SlicedGraph build_graph(const ModelSpec& model, const ParallelPlan& plan,
                               const TrainingSpec& training, const std::string& config_text = {});

}  // namespace scalescope::workload
