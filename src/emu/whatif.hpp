#pragma once
/// What-ifs (docs/config.md "What-if"): changes to the machine a run is compared under — slow
/// GPUs, degraded NICs, a failed link, extra latency on a level, a straggling data loader. The
/// driver replays the job with and without them and reports both.
#include <cstdint>
#include <string>
#include <vector>

#include "cost/cost_model.hpp"
#include "emu/emulation.hpp"
#include "emu/model_data.hpp"
#include "graph/sliced_graph.hpp"

namespace scalescope::emu {

struct WhatIf {
  enum class Kind : std::uint8_t { SlowGpu, DegradedNic, FailedLink, ExtraLatency, SlowDataLoader };
  Kind kind = Kind::SlowGpu;
  std::vector<std::uint32_t> ranks;  ///< slow_gpu, slow_dataloader
  std::vector<std::uint32_t> nodes;  ///< slow_gpu, degraded_nic
  /// slow_gpu: this fraction of all ranks, degraded_nic of all nodes, drawn by `seed`
  double fraction = 0;
  std::uint64_t seed = 0;
  /// slow_gpu: every compute op takes `factor` times as long (> 0); degraded_nic: the node's
  /// NICs keep `factor` of their bandwidth (0 < factor ≤ 1).
  double factor = 1;
  double gbps = 0;  ///< degraded_nic: each NIC left with this bandwidth (Gb/s), instead of factor
  std::uint32_t leaf = 0, spine = 0;  ///< failed_link: leaf `leaf`'s link to spine `spine`
  std::string level;                  ///< extra_latency: nic | spine | core
  double latency_us = 0;              ///< extra_latency
  double delay_us = 0;                ///< slow_dataloader: the rank starts this much later
  std::string text;                   ///< as the user wrote it, for the report
};

/// The ranks a slow_gpu what-if names (its ranks, the GPUs of its nodes, or its seeded random
/// fraction: the ⌈fraction · world⌉ ranks with the smallest SplitMix64 hash of (seed, rank)),
/// sorted. Throws InputError for a rank or node outside the job.
std::vector<std::uint32_t> slow_ranks(const WhatIf& w, std::uint32_t world,
                                      std::int64_t gpus_per_node);

/// The nodes a degraded_nic what-if names (its nodes and its seeded random fraction of the job's
/// `nodes`: the ⌈fraction · nodes⌉ with the smallest SplitMix64 hash of (seed, node)), sorted.
/// Throws InputError for a node outside the job.
std::vector<std::uint32_t> degraded_nodes(const WhatIf& w, std::uint32_t nodes);

/// Latency what-ifs change the cluster before the cost model is built.
void apply_whatifs_to_cluster(const std::vector<WhatIf>& whatifs, cost::ClusterSpec& cluster);

/// Degraded NICs and failed links change the flow model's fabric; InputError when the model has
/// none (they need network.model: flow) or a node / leaf / spine does not exist.
void apply_whatifs_to_fabric(const std::vector<WhatIf>& whatifs, cost::CostModel& model);

/// Slow GPUs and data-loader stragglers: per-rank durations in options.rank_durations (a rank's
/// class durations — the cost model's, or options.class_durations' — scaled, or delayed at its
/// first op).
void apply_whatifs_to_ranks(const std::vector<WhatIf>& whatifs, const graph::SlicedGraph& g,
                            const Costs& costs, std::int64_t gpus_per_node,
                            EmulationOptions& options);

}  // namespace scalescope::emu
