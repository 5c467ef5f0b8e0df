#pragma once
/// The lowering of a captured graph into a block's ops (lower_nodes, workload/capture_lower.cpp):
/// its state per run and its steps, shared by its source files. Not part of the public interface
/// (workload/capture.hpp).
///   capture_lower.cpp           the analysis of the graph (forward, consumers, experts, tokens,
///                               the plan GEMMs), tensor bytes; lower_block, lower_outer
///   capture_lower_nodes.cpp     each node's op: TP / SP / CP / EP sharding, GEMMs, attention,
///                               the collectives they wait for, fp8 casts; EP's all-to-alls
///   capture_lower_fusion.cpp    torch.compile: fused attention, point-wise fusion, what the
///                               partitioner keeps, each kernel's bytes, the emission order
///   capture_lower_emit.cpp      emission onto the passes, what the backward keeps, per-op
///                               activation checkpointing, transient memory
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graph/op.hpp"
#include "workload/capture.hpp"

namespace scalescope::workload::detail {

double dtype_bytes(const std::string& t);
double numel(const std::vector<std::int64_t>& shape);

/// A collective of the lowering, on `role`'s stream.
graph::Op collective_op(graph::OpKind kind, graph::CommRole role, graph::OpName name,
                        graph::Phase phase, double bytes);

/// The lowering's state per captured node (one pass in capture order, which is topological).
struct NodeState {
  bool tokens = false;   ///< has the token dimension: split over CP
  bool sharded = false;  ///< split over TP (heads, or a column-parallel output)
  bool partial = false;  ///< a partial sum not yet reduced over TP
  bool seq = false;      ///< split along the sequence (SP)
  bool reduced = false;  ///< read through a TP collective: nothing fuses with its producer
  double scale = 1;      ///< under EP: ep× the captured tokens (a local expert's tensors)
  bool remote = false;   ///< under EP: computed by another rank's experts only
};

/// Union-find over node indices: the kernels of a compiled block (docs/flint.md §2).
struct Units {
  std::vector<std::uint32_t> parent;
  std::vector<std::vector<std::uint32_t>> members;
  explicit Units(std::size_t n) : parent(n), members(n) {
    for (std::uint32_t i = 0; i < n; ++i) {
      parent[i] = i;
      members[i] = {i};
    }
  }
  std::uint32_t find(std::uint32_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  }
  std::uint32_t unite(std::uint32_t a, std::uint32_t b) {
    a = find(a);
    b = find(b);
    if (a == b) return a;
    if (b < a) std::swap(a, b);  // the smaller index names the unit (its place in the order)
    parent[b] = a;
    members[a].insert(members[a].end(), members[b].begin(), members[b].end());
    members[b].clear();
    return a;
  }
};

/// lower_block's work on any captured graph (lower_nodes): one object per run. The constructor
/// analyses the graph; run() lowers each node, emits the passes and their memory.
class Lowering {
 public:
  /// `roots`: nodes whose ancestors are forward besides the result's (the outer graph's block
  /// marker); `part` (empty, or one entry per node): ops of different parts never fuse, and each
  /// emitted op records its part (LoweredBlock::*_part).
  Lowering(const std::vector<CapturedNode>& nodes, const TpPlan& plan, std::int64_t tp, bool sp,
           bool compiled, const LowerOptions& opt, const std::vector<std::uint32_t>& roots,
           const std::vector<std::uint8_t>& part);
  LoweredBlock run();

 private:
  // capture_lower.cpp: the graph and tensors.
  std::uint32_t root(std::uint32_t j) const;
  /// Whether operand j is a parameter: through views, and through gathers and casts of it (an
  /// expert weight picked by the router's indices, a weight cast to the compute dtype).
  bool is_weight(std::uint32_t j) const;
  /// The tensor behind operand j: through views, gathers (index, gather, index_select) and
  /// casts (_to_copy, clone) of their first input.
  std::uint32_t source_of(std::uint32_t j) const;
  bool is_view(std::uint32_t i) const;
  double expert_factor(const std::string& module) const;
  bool remote_expert(const std::string& module) const;
  std::uint32_t slice_of(std::uint32_t j) const;
  double tensor_bytes(const CapturedNode& d) const;
  double rank_bytes(std::uint32_t j) const;
  double cp_bytes(std::uint32_t j) const;

  // capture_lower_nodes.cpp: each node's op and the collectives it waits for.
  void lower_node(std::size_t i);
  void lower_gemm(std::size_t i, const CapturedNode& d, bool fwd, graph::Phase phase,
                  bool any_sharded, graph::Op& op);
  void cp_exchange(std::uint32_t x, graph::Phase phase, double kv, std::uint32_t k_root);
  double kv_tensor_bytes(std::uint32_t j) const;
  double kv_bytes(std::uint32_t k, std::uint32_t v) const;
  void ep_collectives();

  // capture_lower_emit.cpp: emission, saved tensors, recomputation, transient memory.
  bool read_by_backward(std::uint32_t j, int depth) const;
  void record_part(bool f, std::uint32_t x);
  bool overlaps_gather(std::uint32_t x) const;
  std::int32_t emit_compute(bool f, const graph::Op& o, std::uint32_t x, std::int32_t follows);
  void emit_collectives(std::uint32_t x);
  void emit_own(const graph::Op& o, bool f, const std::vector<std::uint32_t>& ms);
  void emit_eager();
  void save_eager();
  void op_sac();
  std::int64_t last_use(std::uint32_t y, bool f) const;
  void transient_memory();

  // capture_lower_fusion.cpp: torch.compile (Inductor).
  void emit_compiled();
  bool batched_gemm(std::uint32_t i) const;
  bool pointwise(std::uint32_t i) const;
  std::set<std::uint32_t> expand(std::uint32_t seed) const;
  std::vector<std::uint32_t> gemms_in(const std::set<std::uint32_t>& r) const;
  /// The (QKᵀ, PV) batched GEMMs around softmax `s` in region `r` when they have attention's
  /// structure, else nullopt (a router's softmax beside expert GEMMs).
  std::optional<std::pair<std::uint32_t, std::uint32_t>> attention_gemms(
      std::uint32_t s, const std::set<std::uint32_t>& r) const;
  void fuse_attention();
  std::uint32_t unit_of(std::uint32_t i);
  bool indirect(std::uint32_t a, std::uint32_t b);
  double out_numel(std::uint32_t i) const;
  void fuse_pointwise();
  void fuse_as_inductor();  // the kernels Inductor's scheduler made (CapturedNode::kernel)
  bool reads_reduced(std::uint32_t a, std::uint32_t b);  // unit b reads a's TP-reduced output
  bool backward_readers_fusible(std::uint32_t x) const;
  void partition();
  void unit_ops();
  void schedule();

  const std::vector<CapturedNode>& nodes;
  const TpPlan& plan;
  const std::int64_t tp;
  const bool sp;
  const bool compiled;
  const LowerOptions& opt;
  const std::vector<std::uint8_t>& part;
  const std::size_t n = nodes.size();
  const double t = static_cast<double>(tp);
  const double cp = static_cast<double>(opt.cp);
  LoweredBlock out;
  std::vector<bool> forward = std::vector<bool>(n, false);
  std::vector<std::vector<std::uint32_t>> consumers = std::vector<std::vector<std::uint32_t>>(n);
  std::int64_t local_experts = 0;
  // Token copies of a local expert relative to the capture's (balanced, one rank's): the ep
  // ranks' copies, times its routing share relative to balanced (LowerOptions::expert_tokens).
  const bool moe_scaled = opt.ep > 1 || !opt.expert_tokens.empty();
  std::vector<NodeState> st = std::vector<NodeState>(n);
  std::uint32_t hidden_input = static_cast<std::uint32_t>(n);  // the first non-parameter input
  double tokens = 0;
  std::set<std::pair<std::uint32_t, bool>> gathered;
  // Forward plan GEMMs by the parameter they read and by their activation input.
  std::map<std::uint32_t, std::uint32_t> gemm_of_weight, gemm_of_input, weight_of_gemm;
  // The fused attention's kernel: PyTorch's SDPA backend.
  const graph::AttentionImpl sdpa_impl =
      opt.sdpa_flash ? graph::AttentionImpl::Flash2 : graph::AttentionImpl::Fused;
  // Per node: the collectives it waits for (issued just before it) and its own op.
  std::vector<std::vector<std::pair<graph::Op, std::uint32_t>>> pre =
      std::vector<std::vector<std::pair<graph::Op, std::uint32_t>>>(n);  // + producing node
  std::vector<std::optional<graph::Op>> own = std::vector<std::optional<graph::Op>>(n);
  // fp8: the casts a GEMM waits for, in order
  std::vector<std::vector<graph::Op>> casts = std::vector<std::vector<graph::Op>>(n);
  std::set<std::pair<std::uint32_t, bool>> cast_done;  // (tensor, forward) cast to fp8 once
  // Async TP: (tensor, forward) all-gathered as a plan GEMM's row operand; the plan GEMMs.
  std::set<std::pair<std::uint32_t, bool>> row_gathers;
  std::vector<bool> plan_gemm = std::vector<bool>(n, false);
  std::vector<bool> weight_grad_node = std::vector<bool>(n, false);  ///< a weight's gradient GEMM
  // async TP: a GEMM's last chunk
  std::vector<std::optional<graph::Op>> tail = std::vector<std::optional<graph::Op>>(n);
  std::set<std::uint32_t> scattered;  // partial sums reduce-scattered (SP): the scatter's result
  // fp8: casts before an fp8 all-gather
  std::vector<std::vector<graph::Op>> pre_casts = std::vector<std::vector<graph::Op>>(n);
  std::vector<std::uint32_t> ep_gemms;  // the local experts' GEMMs, in capture order
  std::array<int, 2> captured_a2a{};    // PyTorch's EP all-to-alls so far, per pass
  /// Experts held as 3-D weights (expert_weights_of): their placeholders, and whether a GEMM
  /// reads one (through a gather) or makes one's gradient (a grouped GEMM's [E, k, n] output).
  std::set<std::uint32_t> expert3d_params;
  std::int64_t expert3d_topk = 0;
  bool expert3d_gemm(std::size_t i) const;
  // Collectives issued beside a node's op (CP's key/value exchange around attention): the first
  // starts with the op before it (cp p2p) or after it (the backward reduce-scatter under
  // cp all_gather), each further one after the previous; the compute op after waits for them.
  std::vector<std::vector<std::pair<graph::Op, bool>>> beside =
      std::vector<std::vector<std::pair<graph::Op, bool>>>(n);  // + starts before the op
  // Eager loss parallelism (DTensor's loss_parallel): results that alias their input.
  std::vector<bool> alias = std::vector<bool>(n, false);
  // Context parallelism around an attention op (cp_exchange): the ring attention's further
  // steps and merges after the node's op.
  std::vector<std::vector<graph::Op>> ring_rest = std::vector<std::vector<graph::Op>>(n);
  // not materialised (inside a fused attention kernel)
  std::vector<bool> dropped = std::vector<bool>(n, false);
  std::vector<bool> saved = std::vector<bool>(n, false);  // kept for the backward (saved_bytes)
  std::set<std::uint32_t> fused_attention_output;         // the output of each fused attention
  // Gathered copies (TP all-gathers): (pass, op index, tensor gathered, bytes of the copy).
  struct Gathered {
    bool forward;
    std::int32_t at;
    std::uint32_t tensor;
    double bytes;
  };
  std::vector<Gathered> gathered_copies;
  std::map<std::uint32_t, std::vector<std::uint32_t>> recompute;  // kept → recomputed from
  // node → index of its op in its pass's list
  std::vector<std::int64_t> at = std::vector<std::int64_t>(n, -1);
  // Async TP (compiled, SP): a plan GEMM reading a row-gathered operand does not wait for the
  // gather; a reduce-scatter of a plan GEMM's result starts with that GEMM: after the compute op
  // before it (`before[x]`, per node, or the pass start).
  const bool async_tp = opt.async_tp && compiled && sp && tp > 1;
  std::vector<std::int32_t> before = std::vector<std::int32_t>(n, LoweredBlock::kPassStart);
  std::array<std::int32_t, 2> last_compute{LoweredBlock::kPassStart, LoweredBlock::kPassStart};
  // Compiled (emit_compiled): the kernels, the nodes inside a fused attention, the point-wise
  // nodes that may fuse.
  Units units{0};
  std::vector<bool> in_attention;
  std::vector<bool> fusible;
};

}  // namespace scalescope::workload::detail
