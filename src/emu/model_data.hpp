#pragma once
/// Immutable data every LP of an emulation reads: the graph, the cost model, each template's
/// op durations and memory profile.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/sim_time.hpp"
#include "cost/cost_model.hpp"
#include "graph/sliced_graph.hpp"
#include "pdes/event.hpp"

namespace scalescope::emu {

/// Memory of one template in host issue order (what PyTorch's allocator sees).
struct MemoryProfile {
  std::vector<std::int64_t> after_alloc;  ///< live bytes once op i has allocated
  std::vector<std::int64_t> after_free;   ///< live bytes once op i has released
  std::int64_t peak = 0;                  ///< max over ops of live + transient workspace
};

MemoryProfile memory_profile(const graph::RankProgram& p);

/// The cost functions an emulation asks; normally a cost::CostModel's, replaceable in tests
/// (zero-cost communication for the closed-form schedule checks).
struct Costs {
  std::function<SimTime(const graph::Op&)> compute;
  std::function<SimTime(graph::OpKind, double, const cost::CommShape&)> collective;
  std::function<SimTime(double, bool)> p2p;
  std::function<cost::CommShape(const std::uint32_t*, const std::uint32_t*)> shape;
  std::string gpu;
  double peak_flops = 0;  ///< per GPU, FLOP/s
};
Costs costs_of(const cost::CostModel& model);

/// Appends the bytes of trivially copyable values (for LogicalProcess::save_state).
template <class T>
void append_bytes(std::vector<std::byte>& out, const T* data, std::size_t count) {
  const auto* p = reinterpret_cast<const std::byte*>(data);
  out.insert(out.end(), p, p + count * sizeof(T));
}

struct ModelData {
  const graph::SlicedGraph* graph = nullptr;
  const Costs* cost = nullptr;
  /// Per template, per op; 0 for communication. Empty for a template that is not loaded.
  std::vector<std::vector<SimTime>> durations;
  std::vector<MemoryProfile> memory;  ///< per template; empty for a template not loaded
  bool coalesce_local_ops = true;

  ModelData(const graph::SlicedGraph& g, const Costs& c, bool coalesce);
  pdes::LpId comm_lp(std::int32_t comm) const;
};

}  // namespace scalescope::emu
