#pragma once
/// Assignment of logical processes to MPI processes. Alternatives sit side by side behind one
/// interface and are chosen at run time (--partition block|metis).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pdes/event.hpp"

namespace scalescope::pdes {

/// Who talks to whom, for partitioners that care: an undirected weighted graph as CSR over LPs
/// (weight = expected messages per run; any positive scale).
struct LpGraph {
  std::vector<std::uint32_t> offsets{0};
  std::vector<LpId> neighbours;
  std::vector<std::uint32_t> weights;
  std::vector<std::uint32_t>
      vertex_weights;  ///< expected events processed by each LP; may be empty
  std::uint32_t num_lps() const { return static_cast<std::uint32_t>(offsets.size() - 1); }
};

class Partitioner {
 public:
  virtual ~Partitioner() = default;
  /// Owner process of each LP, in [0, processes). Must be deterministic: every process calls it
  /// with the same arguments and must get the same answer.
  virtual std::vector<std::uint32_t> assign(std::uint32_t num_lps, std::uint32_t processes,
                                            const LpGraph* graph) const = 0;
  virtual std::string name() const = 0;
};

/// Contiguous blocks of LP ids, sizes differing by at most one. Models number their LPs so that
/// neighbours are close (a node's ranks are consecutive), so blocks keep them together.
class BlockPartitioner final : public Partitioner {
 public:
  std::vector<std::uint32_t> assign(std::uint32_t num_lps, std::uint32_t processes,
                                    const LpGraph* graph) const override;
  std::string name() const override { return "block"; }
};

/// METIS k-way partition of the weighted LP graph (falls back to blocks for one process).
class MetisPartitioner final : public Partitioner {
 public:
  std::vector<std::uint32_t> assign(std::uint32_t num_lps, std::uint32_t processes,
                                    const LpGraph* graph) const override;
  std::string name() const override { return "metis"; }
};

/// "block" or "metis"; throws InputError naming the value otherwise.
std::unique_ptr<Partitioner> make_partitioner(const std::string& name);

}  // namespace scalescope::pdes
