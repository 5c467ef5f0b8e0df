#pragma once
/// The symmetry fast path (run.replicas: representative, docs/engine.md "Representative
/// replicas"): where the data-parallel replicas of a job are provably identical, the replay runs
/// one of them and the collectives that cross replicas, and every other rank takes the results
/// of its counterpart in the replayed replica.
#include <cstdint>
#include <string>
#include <vector>

#include "emu/emulation.hpp"
#include "emu/model_data.hpp"
#include "graph/sliced_graph.hpp"

namespace scalescope::emu {

/// Which ranks a representative replay runs. A *replica* is a connected component of the ranks
/// under every communicator except the data-parallel ones (DP, HSDP replicate, expert DP): a model
/// replica (TP · CP · PP ranks), or several when expert-parallel groups span data-parallel ranks.
struct ReplicaMap {
  std::uint32_t replicas = 1;  ///< components of the rank graph
  /// Per rank: its counterpart in the replayed replica (the one holding rank 0); the k-th lowest
  /// rank of every replica maps to the k-th lowest of the replayed one.
  std::vector<std::uint32_t> rep;
  /// Per LP (ranks, then communicators): whether the replay runs it; a communicator runs when it
  /// has a member in the replayed replica.
  std::vector<std::uint8_t> active;
  std::uint32_t active_ranks = 0;
  bool is_active(std::uint32_t lp) const {
    return active.empty() || lp >= active.size() || active[lp] != 0;  // beyond: the fabric
  }
};

/// The connected components of the ranks under the communicators whose kind `joins` accepts,
/// numbered in order of their lowest rank: `of_rank[r]` is rank r's component.
struct RankComponents {
  std::uint32_t count = 0;
  std::vector<std::uint32_t> of_rank;
};
RankComponents rank_components(const graph::SlicedGraph& g, bool (*joins)(graph::CommKind));

/// The replica map of `g` under `costs`, after proving that every replica replays identically to
/// the one that holds rank 0: same size, same template rank for rank, communicators inside a
/// replica that map member for member onto a communicator of the same kind and network shape,
/// and communicators across replicas (DP, HSDP replicate, expert DP) that match their
/// counterparts' in kind, network shape and the counterparts of their members, a replayed one
/// holding in replica 0 exactly the counterparts of all its members. Per-rank durations
/// (sandbox ranks, slow-GPU or data-loader what-ifs) and the flow network (which shares links
/// between replicas) break the symmetry. Throws InputError ("run.replicas: representative: …")
/// naming what is not symmetric.
ReplicaMap representative_replicas(const graph::SlicedGraph& g, const Costs& costs,
                                   bool per_rank_durations);
/// The same for a replay with `options` (its per-rank durations and dedicated sandbox ranks).
ReplicaMap representative_replicas(const graph::SlicedGraph& g, const Costs& costs,
                                   const EmulationOptions& options);

}  // namespace scalescope::emu
