#pragma once
/// Immutable data every LP of an emulation reads: the graph, the cost model, each template's
/// op durations and memory profile.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
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
  std::int64_t peak_transient = 0;        ///< the transient workspace of the op at the peak
};

MemoryProfile memory_profile(const graph::RankProgram& p);

/// The cost functions an emulation asks; normally a cost::CostModel's, replaceable in tests
/// (zero-cost communication for the closed-form schedule checks).
struct Costs {
  std::function<SimTime(const graph::Op&)> compute;
  /// Host time to issue an op (docs/engine.md "Host issue"); empty: the host always runs ahead.
  std::function<SimTime(const graph::Op&)> host;
  std::function<SimTime(graph::OpKind, double, const cost::CommShape&)> collective;
  std::function<SimTime(double, bool)> p2p;
  std::function<cost::CommShape(const std::uint32_t*, const std::uint32_t*)> shape;
  /// An MoE all-to-all of the flex dispatcher (shape[0] copies per token of shape[1] experts);
  /// empty: such ops cost as `collective`'s all-to-all.
  std::function<SimTime(const graph::Op&, const cost::CommShape&)> ep_dispatch;
  /// The SMs a communication op's kernel holds while it runs, and how much longer a compute op
  /// takes beside kernels holding that many (docs/cost-model.md §1.7); both empty: not modelled.
  std::function<std::uint32_t(const graph::Op&, const cost::CommShape&)> comm_sms;
  std::function<double(const graph::Op&, std::uint32_t)> sm_factor;
  std::string gpu;
  double peak_flops = 0;  ///< per GPU, FLOP/s
  /// The flow model (network.model: flow): the fabric whose links transfers between nodes share,
  /// and what each such transfer asks of it. Both empty under the analytical model.
  const cost::Fabric* fabric = nullptr;
  std::function<cost::FlowRequest(const graph::Op&, const cost::CommShape&)> flow;

  /// A communication op's wire time on a communicator of this shape: a point-to-point transfer
  /// or a collective, at least 1 ns so that its completion follows its start.
  SimTime wire(const graph::Op& op, const cost::CommShape& s) const {
    const SimTime t = op.kind == graph::OpKind::SendRecv ? p2p(op.comm_bytes, s.nodes == 1)
                      : op.kind == graph::OpKind::AllToAll && op.shape[0] > 0 && ep_dispatch
                          ? ep_dispatch(op, s)
                          : collective(op.kind, op.comm_bytes, s);
    return t > 1 ? t : 1;
  }
};
Costs costs_of(const cost::CostModel& model);

/// Appends the bytes of trivially copyable values (for LogicalProcess::save_state).
template <class T>
void append_bytes(std::vector<std::byte>& out, const T* data, std::size_t count) {
  const auto* p = reinterpret_cast<const std::byte*>(data);
  out.insert(out.end(), p, p + count * sizeof(T));
}

/// Lists of op indices per op, as CSR.
struct OpLists {
  std::vector<std::uint32_t> offsets{0};
  std::vector<std::uint32_t> items;
  const std::uint32_t* begin(std::uint32_t i) const { return items.data() + offsets[i]; }
  const std::uint32_t* end(std::uint32_t i) const { return items.data() + offsets[i + 1]; }
};

/// The dependencies of each op that can delay it: those on another stream. A dependency on the
/// op's own stream is implied by stream order (ops on a stream run one after another, so an
/// earlier op there finishes no later than the op just before this one), so the replay never
/// needs to read it: skipping it keeps the replay's reads near the stream cursors.
struct WaitDeps {
  OpLists deps;   ///< per op: its dependencies on other streams
  OpLists wakes;  ///< per op: the ops on other streams that depend on it (the reverse lists)
  const std::uint32_t* begin(std::uint32_t i) const { return deps.begin(i); }
  const std::uint32_t* end(std::uint32_t i) const { return deps.end(i); }
};
WaitDeps wait_deps(const graph::RankProgram& p);

struct ModelData;
inline constexpr std::uint32_t kNoOp = 0xFFFFFFFFu;

/// What every rank of one class (template) reads: shared, immutable, hot in cache.
struct RankClass {
  const ModelData* data = nullptr;
  const graph::RankProgram* prog = nullptr;
  const SimTime* dur = nullptr;
  const MemoryProfile* mem = nullptr;
  const WaitDeps* waits = nullptr;
  /// Per op: a communication op's wire time (what the network model gives it on the class's
  /// first rank's communicators; 0 for compute), for the time breakdown.
  const SimTime* wire = nullptr;
  /// Per op: the op before it on its stream, or kNoOp.
  const std::uint32_t* prev_on_stream = nullptr;
  /// Host issue (docs/engine.md "Host issue"); both null when the host is not modelled. Per op:
  /// the host time spent issuing the program up to and including it, and the last op before it
  /// that the host synchronizes on (Op::host_sync), or kNoOp.
  const SimTime* host_prefix = nullptr;
  const std::uint32_t* last_sync = nullptr;
  /// Index of the first op of communication stream s among the template's communication ops.
  std::array<std::uint32_t, graph::kNumStreams> comm_base{};
  std::uint32_t comm_ops = 0;  ///< communication ops in the template
};

/// When the host has issued op i of a rank of class `rc` (docs/engine.md "Host issue"), given
/// the rank's op finish times: its issue time after the start, or after the host's last
/// synchronization once that op finished; kTimeUnknown while that op is unfinished; 0 when the
/// host is not modelled. The host issues in program order; after it waited for op s, it resumes
/// at s's finish, and op s started no earlier than its own issue time, so the last
/// synchronization alone sets the offset: issue(i) = H_i + finish(s) - H_s (H: the host's prefix
/// sum of issue times).
inline SimTime host_issue_time(const RankClass& rc, std::uint32_t i, const SimTime* finish) {
  if (rc.host_prefix == nullptr) return 0;
  const std::uint32_t s = rc.last_sync[i];
  if (s == kNoOp) return rc.host_prefix[i];
  const SimTime f = finish[s];
  return f == kTimeUnknown ? kTimeUnknown : rc.host_prefix[i] + (f - rc.host_prefix[s]);
}

struct ModelData {
  const graph::SlicedGraph* graph = nullptr;
  const Costs* cost = nullptr;
  /// Per template, per op; 0 for communication. Empty for a template that is not loaded. With
  /// Costs::comm_sms, a compute op's duration includes the SMs the communication kernels beside
  /// it take (emu/sm_contention.hpp).
  std::vector<std::vector<SimTime>> durations;
  std::vector<MemoryProfile> memory;       ///< per template; empty for a template not loaded
  std::vector<WaitDeps> waits;             ///< per template; empty for a template not loaded
  std::vector<std::vector<SimTime>> wire;  ///< per template (RankClass::wire)
  /// Per template: the lowest rank of its class (whose communicators `wire` is costed on), -1
  /// for a template of no rank.
  std::vector<std::int64_t> first_rank;
  std::vector<std::vector<std::uint32_t>> prev_on_stream;  ///< per template
  std::vector<std::vector<SimTime>> host_prefix;           ///< per template (RankClass)
  std::vector<std::vector<std::uint32_t>> last_sync;       ///< per template (RankClass)
  /// Per template (null fields for a template not loaded); points into the vectors above.
  std::vector<RankClass> classes;
  bool coalesce_local_ops = true;
  /// Pipeline-pair transfers are eager sends (EmulationOptions::eager_p2p), not rendezvous.
  bool eager_p2p = false;
  /// A representative replay (ReplicaMap::active): per LP whether it runs; null: every LP.
  const std::vector<std::uint8_t>* active = nullptr;

  /// `class_durations` / `rank_durations` (optional): per template / per rank, the op durations
  /// that replace the cost model's (hybrid runs: measured on a sandbox rank).
  ModelData(const graph::SlicedGraph& g, const Costs& c, bool coalesce,
            const std::map<std::uint32_t, std::vector<SimTime>>* class_durations = nullptr,
            const std::map<std::uint32_t, std::vector<SimTime>>* rank_durations = nullptr);
  ModelData(const ModelData&) = delete;  // `classes` points into this object
  ModelData& operator=(const ModelData&) = delete;
  /// Sandbox ranks with their own durations: a copy of their class pointing at them.
  std::map<std::uint32_t, RankClass> rank_classes;
  std::map<std::uint32_t, std::vector<SimTime>> rank_durations;
  const RankClass& class_of(std::uint32_t rank) const {
    if (!rank_classes.empty())
      if (const auto it = rank_classes.find(rank); it != rank_classes.end()) return it->second;
    return classes[graph->rank_class[rank]];
  }
  pdes::LpId comm_lp(std::int32_t comm) const;
  /// The flow model's fabric LP: after the ranks and the communicators.
  pdes::LpId fabric_lp() const;
};

}  // namespace scalescope::emu
