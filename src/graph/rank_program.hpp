#pragma once
/// The program of one class of ranks: ops in host issue order plus their dependency CSR.
/// Immutable once finalized and shared by every rank of the class.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/op.hpp"

namespace scalescope::graph {

struct RankProgram {
  std::string name;
  std::vector<Op> ops;
  /// Dependencies as CSR: deps of op i are deps[dep_offsets[i] .. dep_offsets[i+1]); every dep
  /// index is smaller than i (ops are stored in a topological order, so there are no cycles).
  std::vector<std::uint32_t> dep_offsets{0};
  std::vector<std::uint32_t> deps;
  /// Bytes allocated before the first op and kept all iteration: weights, gradient buffers and
  /// optimizer state of this rank's shard.
  std::int64_t static_memory = 0;

  // Derived by finalize(), not stored in graph.h5.
  std::array<std::vector<std::uint32_t>, kNumStreams> stream_ops;  ///< op indices per stream

  std::uint32_t size() const { return static_cast<std::uint32_t>(ops.size()); }
  std::uint32_t num_deps(std::uint32_t i) const { return dep_offsets[i + 1] - dep_offsets[i]; }
  const std::uint32_t* deps_begin(std::uint32_t i) const { return deps.data() + dep_offsets[i]; }
  const std::uint32_t* deps_end(std::uint32_t i) const { return deps.data() + dep_offsets[i + 1]; }

  /// Appends an op with its dependencies and returns its index.
  std::uint32_t add(const Op& op, std::initializer_list<std::uint32_t> op_deps);
  std::uint32_t add(const Op& op, const std::vector<std::uint32_t>& op_deps);

  /// Fills stream_ops and each op's instance numbers; checks the contracts of the layout.
  void finalize();
};

}  // namespace scalescope::graph
