// The lowering of a captured graph (capture.h5) into a block's ops on one rank: TP / SP / CP / EP
// sharding, the collectives they need, fp8 casts, fusion into compiled kernels, recomputation and
// the memory each op holds (docs/flint.md).
#include "workload/capture.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "core/error.hpp"
#include "workload/capture_internal.hpp"
#include "workload/ring_attention.hpp"

namespace scalescope::workload {

namespace {

double dtype_bytes(const std::string& t) {
  if (t == "bfloat16" || t == "float16" || t == "half") return 2;
  if (t == "float32" || t == "float" || t == "int32") return 4;
  if (t == "float64" || t == "int64" || t == "long") return 8;
  if (t == "bool" || t == "uint8" || t == "int8" || t.rfind("float8", 0) == 0) return 1;
  return 4;
}

double numel(const std::vector<std::int64_t>& shape) {
  double n = 1;
  for (std::int64_t d : shape) n *= static_cast<double>(d);
  return n;
}

/// A collective of the lowering, on `role`'s stream.
graph::Op collective_op(graph::OpKind kind, graph::CommRole role, graph::OpName name,
                        graph::Phase phase, double bytes) {
  graph::Op o;
  o.kind = kind;
  o.role = role;
  o.stream = graph::stream_of(role);
  o.name = name;
  o.phase = phase;
  o.layer = 0;
  o.comm_bytes = bytes;
  return o;
}

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

}  // namespace

namespace detail {

bool is_view_node(const CapturedNode& d) {
  return d.kind == "call_function" && aten_class(d.op) == AtenClass::View;
}

/// The tensor behind view-like ops (node `j` itself when it is not a view).
std::uint32_t view_root(const std::vector<CapturedNode>& nodes, std::uint32_t j) {
  while (is_view_node(nodes[j]) && !nodes[j].inputs.empty()) j = nodes[j].inputs.front();
  return j;
}

}  // namespace detail

namespace {

using detail::base_op;
using detail::dtype_of;
using detail::expert_of;
using detail::experts_in;
using detail::is_backward_op;
using detail::is_view_node;
using detail::view_root;

/// lower_block's work on any captured graph. `roots`: nodes whose ancestors are forward besides
/// the result's (the outer graph's block marker); `part` (empty, or one entry per node): ops of
/// different parts never fuse, and each emitted op records its part (LoweredBlock::*_part).
LoweredBlock lower_nodes(const std::vector<CapturedNode>& nodes, const TpPlan& plan,
                         std::int64_t tp, bool sp, bool compiled, const LowerOptions& opt,
                         const std::vector<std::uint32_t>& roots,
                         const std::vector<std::uint8_t>& part) {
  const std::size_t n = nodes.size();
  const double t = static_cast<double>(tp);
  const double cp = static_cast<double>(opt.cp);
  LoweredBlock out;
  // The block's result: the first tensor the output node returns. Forward = its ancestors.
  std::int64_t output = -1;
  for (std::size_t i = 0; i < n; ++i)
    if (nodes[i].kind == "output") output = static_cast<std::int64_t>(i);
  if (output < 0 || nodes[static_cast<std::size_t>(output)].inputs.empty())
    throw_input("capture: the block graph has no output");
  // In-place ops (add_, copy_, …) write their first input: a later reader of that tensor (or of
  // a view of it) depends on them, though the traced graph has no edge (make_fx on 1.13 does
  // not functionalise). Such writes are found by the tensor behind the views.
  const auto root = [&](std::uint32_t j) { return view_root(nodes, j); };
  std::map<std::uint32_t, std::vector<std::uint32_t>> writers;  // tensor → in-place ops on it
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::string b = base_op(nodes[i].op);
    if (nodes[i].kind == "call_function" && b.size() > 1 && b.back() == '_' && b[0] != '_' &&
        !nodes[i].inputs.empty())
      writers[root(nodes[i].inputs.front())].push_back(i);
  }
  std::vector<bool> forward(n, false);
  std::vector<std::uint32_t> stack = {nodes[static_cast<std::size_t>(output)].inputs.front()};
  stack.insert(stack.end(), roots.begin(), roots.end());
  while (!stack.empty()) {
    const std::uint32_t i = stack.back();
    stack.pop_back();
    if (forward[i]) continue;
    forward[i] = true;
    for (std::uint32_t j : nodes[i].inputs) stack.push_back(j);
    if (const auto w = writers.find(root(i)); w != writers.end())
      for (std::uint32_t m : w->second)
        if (m < i) stack.push_back(m);
  }
  std::vector<std::vector<std::uint32_t>> consumers(n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::uint32_t j : nodes[i].inputs) consumers[j].push_back(static_cast<std::uint32_t>(i));
  const auto is_view = [&](std::uint32_t i) { return is_view_node(nodes[i]); };
  // Expert parallelism: the capture's experts (E of them, balanced routing); this rank runs the
  // first E/ep on ep× their tokens, the others run elsewhere.
  const std::int64_t experts = experts_in(nodes);
  if (opt.ep > 1 && (experts == 0 || experts % opt.ep != 0))
    throw_input(
        "capture: expert parallelism {} needs a block whose experts (modules "
        "experts.<i>, {} here) it divides",
        opt.ep, experts);
  const std::int64_t local_experts = opt.ep > 1 ? experts / opt.ep : experts;
  // Token copies of a local expert relative to the capture's (balanced, one rank's): the ep
  // ranks' copies, times its routing share relative to balanced (LowerOptions::expert_tokens).
  const bool moe_scaled = opt.ep > 1 || !opt.expert_tokens.empty();
  const auto expert_factor = [&](const std::string& module) {
    const std::int64_t e = expert_of(module);
    const double share = e >= 0 && static_cast<std::size_t>(e) < opt.expert_tokens.size()
                             ? opt.expert_tokens[static_cast<std::size_t>(e)]
                             : 1.0;
    return static_cast<double>(opt.ep) * share;
  };
  const auto remote_expert = [&](const std::string& module) {
    return opt.ep > 1 && expert_of(module) >= local_experts;
  };
  out.experts = experts;
  // Parameters (their module's TP style).
  for (std::size_t i = 0; i < n; ++i) {
    const CapturedNode& d = nodes[i];
    if (d.kind == "placeholder" && !d.param.empty() && !remote_expert(d.module)) {
      const std::string style = plan.style_of(d.module);
      double p = d.shapes.empty() ? 0 : numel(d.shapes[0]);
      const bool weight = d.param.size() >= 6 && d.param.substr(d.param.size() - 6) == "weight";
      if (style == "colwise" || (style == "rowwise" && weight)) p /= t;
      out.params_on_rank += p;
    }
  }
  std::vector<NodeState> st(n);
  // Sequence parallelism: activations outside the TP regions are split along the sequence
  // (the block's input first); a plan GEMM gathers such an operand (once per tensor and pass),
  // partial sums are reduce-scattered back, as Megatron's SP does.
  std::uint32_t hidden_input = static_cast<std::uint32_t>(n);  // the first non-parameter input
  for (std::uint32_t x = 0; x < n && hidden_input == n; ++x)
    if (nodes[x].kind == "placeholder" && nodes[x].param.empty() && nodes[x].buffer.empty())
      hidden_input = x;
  if (sp && tp > 1 && hidden_input < n) st[hidden_input].seq = true;  // the hidden states
  // Context parallelism splits the tokens (b·s, from the hidden states [b, s, h]): the block's
  // inputs but the parameters, and what is computed from them with at least b·s elements, but
  // weight gradients.
  double tokens = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (nodes[i].kind == "placeholder" && nodes[i].param.empty() && nodes[i].buffer.empty() &&
        !nodes[i].shapes.empty() && nodes[i].shapes[0].size() == 3) {
      tokens = static_cast<double>(nodes[i].shapes[0][0] * nodes[i].shapes[0][1]);
      break;
    }
  for (std::size_t i = 0; i < n; ++i)
    if (nodes[i].kind == "placeholder")  // inputs but parameters and buffers (a causal mask)
      st[i].tokens = nodes[i].param.empty() && nodes[i].buffer.empty();
  std::set<std::pair<std::uint32_t, bool>> gathered;
  // The tensor behind size-preserving views (an expert's token slice behind its reshapes and
  // transposes).
  const auto slice_of = [&](std::uint32_t j) {
    while (is_view(j) && !nodes[j].inputs.empty() && !nodes[j].shapes.empty() &&
           !nodes[nodes[j].inputs.front()].shapes.empty() &&
           numel(nodes[nodes[j].inputs.front()].shapes[0]) == numel(nodes[j].shapes[0]))
      j = nodes[j].inputs.front();
    return j;
  };
  auto tensor_bytes = [&](const CapturedNode& d) {
    double b = 0;
    for (std::size_t k = 0; k < d.shapes.size(); ++k)
      b += numel(d.shapes[k]) * dtype_bytes(k < d.dtypes.size() ? d.dtypes[k] : "float32");
    return b;
  };
  // A tensor's bytes on this rank.
  const auto rank_bytes = [&](std::uint32_t j) {
    return st[j].scale * tensor_bytes(nodes[j]) / (st[j].sharded || st[j].seq ? t : 1.0) /
           (st[j].tokens ? cp : 1.0);
  };
  const auto cp_bytes = [&](std::uint32_t j) {
    return st[j].scale * tensor_bytes(nodes[j]) / (st[j].tokens ? cp : 1.0);
  };
  // Forward plan GEMMs by the parameter they read and by their activation input.
  std::map<std::uint32_t, std::uint32_t> gemm_of_weight, gemm_of_input, weight_of_gemm;
  for (std::uint32_t i = 0; i < n; ++i) {
    const CapturedNode& d = nodes[i];
    if (!forward[i] || d.kind != "call_function" || aten_class(d.op) != AtenClass::Gemm ||
        plan.style_of(d.module).empty())
      continue;
    for (std::uint32_t j : d.inputs) {
      const std::uint32_t r = root(j);
      if (nodes[r].kind == "placeholder" && !nodes[r].param.empty() && !nodes[r].shapes.empty()) {
        gemm_of_weight.emplace(r, i);
        weight_of_gemm.emplace(i, r);
      } else {
        gemm_of_input.emplace(r, i);
      }
    }
  }
  // The fused attention's kernel: PyTorch's SDPA backend.
  const graph::AttentionImpl sdpa_impl =
      opt.sdpa_flash ? graph::AttentionImpl::Flash2 : graph::AttentionImpl::Fused;
  // Per node: the collectives it waits for (issued just before it) and its own op.
  std::vector<std::vector<std::pair<graph::Op, std::uint32_t>>> pre(n);  // + producing node
  std::vector<std::optional<graph::Op>> own(n);
  std::vector<std::vector<graph::Op>> casts(n);        // fp8: the casts a GEMM waits for, in order
  std::set<std::pair<std::uint32_t, bool>> cast_done;  // (tensor, forward) cast to fp8 once
  // Async TP: (tensor, forward) all-gathered as a plan GEMM's row operand; the plan GEMMs.
  std::set<std::pair<std::uint32_t, bool>> row_gathers;
  std::vector<bool> plan_gemm(n, false);
  std::vector<std::optional<graph::Op>> tail(n);  // async TP: a GEMM's last chunk
  std::set<std::uint32_t> scattered;  // partial sums reduce-scattered (SP): the scatter's result
  std::vector<std::vector<graph::Op>> pre_casts(n);  // fp8: casts before an fp8 all-gather
  std::vector<std::uint32_t> ep_gemms;               // the local experts' GEMMs, in capture order
  // Collectives issued beside a node's op (CP's key/value exchange around attention): the first
  // starts with the op before it (cp p2p) or after it (the backward reduce-scatter under
  // cp all_gather), each further one after the previous; the compute op after waits for them.
  std::vector<std::vector<std::pair<graph::Op, bool>>> beside(n);  // + starts before the op
  // Eager loss parallelism (DTensor's loss_parallel): results that alias their input.
  std::vector<bool> alias(n, false);
  // Context parallelism around an attention op at node x (Megatron's AttnFuncWithCPAndKVP2P, as
  // the builder models it): K and V of the whole sequence, `kv` bytes on this rank, gathered
  // over the CP group (a ring passing c − 1 blocks); the backward sends dK, dV back the same way.
  // With the ring (cp_comm_type p2p), the attention op itself becomes PyTorch's ring attention
  // (ring_attention.hpp): its first step stays the node's op, the further steps and merges run
  // after it (`ring_rest`), the dK, dV blocks travel in fp32 (twice the bytes).
  std::vector<std::vector<graph::Op>> ring_rest(n);
  const auto cp_exchange = [&](std::uint32_t x, graph::Phase phase, double kv,
                               std::uint32_t k_root) {
    if (opt.cp <= 1) return;
    graph::Op gather = collective_op(graph::OpKind::AllGather, graph::CommRole::Cp,
                                     graph::OpName::CpKvExchange, phase, kv);
    graph::Op reduce = gather;
    reduce.kind = graph::OpKind::ReduceScatter;
    if (opt.cp_all_gather) {
      pre[x].push_back({gather, k_root});
    } else {
      beside[x].push_back({gather, true});
      reduce.comm_bytes *= 2;
      const graph::Op& whole = *own[x];
      // Elements of this rank's attention output and of one K plus V block (bf16 K and V).
      const RingTensors tensors{static_cast<double>(whole.shape[0]) * whole.shape[1] *
                                    (whole.value_dim > 0 ? whole.value_dim : whole.shape[2]),
                                kv / static_cast<double>(opt.cp) / 2};
      std::vector<graph::Op> ring = ring_attention(whole, opt.cp, RingImpl::PyTorch, tensors);
      if (phase == graph::Phase::Forward) out.attention_forward.back() = ring;
      own[x] = ring.front();
      ring_rest[x].assign(ring.begin() + 1, ring.end());
    }
    if (phase == graph::Phase::Backward) beside[x].push_back({reduce, opt.cp_all_gather});
  };
  // The bytes on this rank of the K or V an attention op reads, before GQA's repeat and for the
  // whole sequence: the smallest tensor on the way back through views and copies (the repeat
  // makes larger ones; a split of a fused QKV projection's output is where it starts).
  const auto kv_tensor_bytes = [&](std::uint32_t j) {
    double b = std::numeric_limits<double>::infinity();
    for (int depth = 0; depth < 32; ++depth) {
      if (!nodes[j].shapes.empty())
        b = std::min(b, tensor_bytes(nodes[j]) / (st[j].sharded ? t : 1.0));
      const bool pass = is_view(j) || base_op(nodes[j].op) == "clone" ||
                        base_op(nodes[j].op) == "_unsafe_view" || base_op(nodes[j].op) == "expand";
      if (!pass || nodes[j].inputs.empty()) break;
      j = nodes[j].inputs.front();
    }
    return std::isfinite(b) ? b : 0.0;
  };
  const auto kv_bytes = [&](std::uint32_t k, std::uint32_t v) {
    return kv_tensor_bytes(k) + kv_tensor_bytes(v);
  };
  for (std::size_t i = 0; i < n; ++i) {
    const CapturedNode& d = nodes[i];
    if (d.kind != "call_function") continue;
    for (std::uint32_t j : d.inputs) st[i].tokens = st[i].tokens || st[j].tokens;
    if (moe_scaled) {
      // Another rank's expert (its module, or only its tensors as inputs): nothing runs here.
      // A local expert's tensors carry the token copies of all ep ranks.
      bool all_remote = false;
      for (std::uint32_t j : d.inputs) {
        if (nodes[j].kind == "get_attr" ||
            (nodes[j].kind == "placeholder" && !nodes[j].param.empty()))
          continue;
        all_remote = st[j].remote;
        if (!all_remote) break;
      }
      // Scaled: same-sized results of a local expert's tensors (its activation, the routing
      // weights' product, their gradients); the scatter into all tokens is not.
      for (std::uint32_t j : d.inputs)
        if (!d.shapes.empty() && !nodes[j].shapes.empty() &&
            numel(d.shapes[0]) == numel(nodes[j].shapes[0]))
          st[i].scale = std::max(st[i].scale, st[j].scale);
      st[i].remote = remote_expert(d.module) || all_remote;
      if (st[i].remote) continue;
      if (expert_of(d.module) >= 0 && aten_class(d.op) != AtenClass::Gemm)
        st[i].scale = expert_factor(d.module);
    }
    st[i].tokens = st[i].tokens && (d.shapes.empty() || numel(d.shapes[0]) >= tokens);
    const bool fwd = forward[i];
    const graph::Phase phase = fwd ? graph::Phase::Forward : graph::Phase::Backward;
    bool any_sharded = false;
    for (std::uint32_t j : d.inputs) any_sharded = any_sharded || st[j].sharded;
    const AtenClass cls = aten_class(d.op);
    graph::Op op;
    op.phase = phase;
    op.layer = 0;
    if (cls == AtenClass::View) {
      st[i].sharded = any_sharded;
      if (!d.inputs.empty()) st[i].scale = st[d.inputs.front()].scale;
      for (std::uint32_t j : d.inputs) {
        st[i].partial = st[i].partial || st[j].partial;
        st[i].seq = st[i].seq || st[j].seq;
      }
      continue;
    }
    // Partial sums (a row-parallel output, a column-parallel input gradient) are all-reduced
    // over TP where something other than a sum of partials first reads them: the q, k, v input
    // gradients add up before one all-reduce, as DTensor's Replicate input does.
    bool all_partial = !d.inputs.empty(), any_partial = false;
    for (std::uint32_t j : d.inputs) {
      all_partial = all_partial && st[j].partial;
      any_partial = any_partial || st[j].partial;
    }
    if (any_partial && base_op(d.op) == "add" && all_partial) {
      st[i].partial = true;  // a sum of partial sums stays one
    } else if (any_partial) {
      for (std::uint32_t j : d.inputs) {
        if (!st[j].partial) continue;
        const graph::Op ar = collective_op(
            sp ? graph::OpKind::ReduceScatter : graph::OpKind::AllReduce, graph::CommRole::Tp,
            sp ? graph::OpName::TpReduceScatter : graph::OpName::TpAllReduce,
            forward[j] ? graph::Phase::Forward : graph::Phase::Backward, cp_bytes(j));
        if (tp > 1) pre[i].push_back({ar, root(j)});
        if (tp > 1 && sp) scattered.insert(root(j));
        if (tail[root(j)] && sp) {
          // fused_matmul_reduce_scatter sums the t partial sums it received in one kernel: it
          // reads all of them ([m, n] bf16) and writes this rank's [m/t, n].
          graph::Op sum;
          sum.kind = graph::OpKind::Elementwise;
          sum.name = graph::OpName::AtenOp;
          sum.phase = forward[j] ? graph::Phase::Forward : graph::Phase::Backward;
          sum.layer = 0;
          sum.mem_bytes = cp_bytes(j) * (1 + 1 / t);
          casts[i].push_back(sum);
        }
        st[j].partial = false;
        st[j].seq = sp && tp > 1;
        st[root(j)].reduced = tp > 1;
      }
    }
    if (cls == AtenClass::Gemm) {
      // Operands: the last two inputs ([b,] m × k and [b,] k × n); addmm's first is the bias.
      if (d.inputs.size() < 2 || d.shapes.empty()) continue;
      const auto& a = nodes[d.inputs[d.inputs.size() - 2]].shapes;
      const auto& o = d.shapes[0];
      if (a.empty() || o.size() < 2) continue;
      double m = static_cast<double>(o[o.size() - 2]), nn = static_cast<double>(o.back());
      double k = static_cast<double>(a[0].back());
      const double batch = o.size() == 3 ? static_cast<double>(o[0]) : 1.0;
      m *= batch;
      // The forward GEMM of the same Linear: this one, or for a backward GEMM the one reading
      // the same weight (a dgrad) or the same saved input (a wgrad). A tied weight (GPT's head
      // sharing the embedding) gives its backward GEMMs the other module's path, or none.
      std::int64_t owner = -1;
      if (!plan.style_of(d.module).empty() && fwd) owner = static_cast<std::int64_t>(i);
      if (owner < 0 && !fwd)
        for (std::uint32_t j : d.inputs) {
          const std::uint32_t r = root(j);
          if (const auto w = gemm_of_weight.find(r); w != gemm_of_weight.end())
            owner = w->second;
          else if (const auto in = gemm_of_input.find(r);
                   owner < 0 && in != gemm_of_input.end() && d.module.empty())
            owner = in->second;  // a wgrad without a module path (a tied weight's second use)
        }
      const std::string style = owner >= 0
                                    ? plan.style_of(nodes[static_cast<std::size_t>(owner)].module)
                                    : plan.style_of(d.module);
      bool reduce = false;
      bool weight_gradient = false;
      bool data_gradient = false;
      double weight_elements = 0;  // fp8: the rank's share of the layer's weight
      if (!style.empty())
        for (std::uint32_t j : d.inputs)
          // An expert's backward reads the token copies its forward gathered and kept (as
          // Megatron's grouped GEMMs do); only other tensors are gathered.
          if (st[j].seq && !(expert_of(d.module) >= 0 && !fwd && forward[root(j)]) &&
              gathered.insert({expert_of(d.module) >= 0 ? slice_of(j) : root(j), fwd}).second) {
            // The sequence-split operand, gathered over TP before the GEMM (S = its full size);
            // one gather serves every view of the tensor in a pass. An expert gathers its own
            // token copies (Megatron's ETP all-gather after the dispatch), ep× them under EP.
            graph::Op ag = collective_op(
                graph::OpKind::AllGather, graph::CommRole::Tp, graph::OpName::TpAllGather, phase,
                cp_bytes(j) *
                    (expert_of(d.module) >= 0 && moe_scaled ? expert_factor(d.module) : 1.0));
            pre[i].push_back({ag, root(j)});
            st[root(j)].reduced = true;
            if (j == d.inputs[d.inputs.size() - 2]) row_gathers.insert({root(j), fwd});
          }
      if (!style.empty()) {
        // nn.Linear's weight [out, in]: what its forward GEMM reads, else among the module's
        // parameters.
        std::int64_t out_dim = 0, in_dim = 0;
        if (owner >= 0)
          if (const auto w = weight_of_gemm.find(static_cast<std::uint32_t>(owner));
              w != weight_of_gemm.end() && nodes[w->second].shapes[0].size() == 2) {
            out_dim = nodes[w->second].shapes[0][0];
            in_dim = nodes[w->second].shapes[0][1];
          }
        for (const CapturedNode& p : nodes)
          if (out_dim == 0 && p.kind == "placeholder" && p.module == d.module &&
              !p.shapes.empty() && p.shapes[0].size() == 2) {
            out_dim = p.shapes[0][0];
            in_dim = p.shapes[0][1];
          }
        // Backward: dgrad reads the weight (through views), wgrad produces its gradient (shapes
        // alone cannot tell them apart when tokens = a weight dimension).
        bool reads_weight = false;
        for (std::uint32_t j : d.inputs) {
          const CapturedNode& r = nodes[root(j)];
          reads_weight = reads_weight || (r.kind == "placeholder" && !r.param.empty());
        }
        const bool wgrad = !fwd && !reads_weight;
        if (wgrad) st[i].tokens = false;  // a weight's gradient: tokens summed out
        weight_gradient = wgrad;
        data_gradient = !fwd && reads_weight;
        weight_elements = static_cast<double>(out_dim) * static_cast<double>(in_dim) / t;
        if (style == "colwise") {
          if (fwd) {
            nn /= t;
            st[i].sharded = true;
          } else if (wgrad) {
            (o[0] == out_dim ? m : nn) /= t;
          } else {
            k /= t;
            reduce = true;  // partial sums of the input gradient
          }
        } else {  // rowwise
          if (fwd) {
            k /= t;
            reduce = true;  // partial sums of the output
          } else if (wgrad) {
            (o[0] == in_dim ? m : nn) /= t;
          } else {
            nn /= t;
            st[i].sharded = true;
          }
        }
      } else if (any_sharded) {
        m /= t;  // per-head batched GEMMs on this rank's heads
        st[i].sharded = true;
      } else {
        bool any_seq = false, reads_weight = false;
        for (std::uint32_t j : d.inputs) {
          any_seq = any_seq || st[j].seq;
          const CapturedNode& r = nodes[root(j)];
          reads_weight = reads_weight || (r.kind == "placeholder" && !r.param.empty());
        }
        // A replicated GEMM (a router; experts at ETP 1) on this rank's part of the sequence:
        // its rows, or for a weight gradient the tokens it sums over.
        if (any_seq && !fwd && !reads_weight) {
          k /= t;
          weight_gradient = true;
          st[i].tokens = false;
        } else if (any_seq) {
          m /= t;
          st[i].seq = true;
        }
      }
      if (opt.cp > 1) {
        // This rank's tokens: the rows of a forward or dgrad GEMM (and of attention's batched
        // GEMMs: its queries), the reduction of a wgrad, whose output has no token dimension.
        bool in_tokens = false;
        for (std::uint32_t j : d.inputs) in_tokens = in_tokens || st[j].tokens;
        if (st[i].tokens)
          m /= cp;
        else if (in_tokens)
          k /= cp;
      }
      const bool expert = moe_scaled && expert_of(d.module) >= 0;
      if (expert) {
        // A local expert receives the token copies of all ep ranks of its group.
        const double e = expert_factor(d.module);
        (weight_gradient ? k : m) *= e;
        st[i].scale = weight_gradient ? 1.0 : e;
        ep_gemms.push_back(static_cast<std::uint32_t>(i));
      }
      plan_gemm[i] = !style.empty();
      op.kind = graph::OpKind::Gemm;
      op.name = graph::OpName::AtenGemm;
      op.shape = {static_cast<std::uint32_t>(std::max(1.0, m)),
                  static_cast<std::uint32_t>(std::max(1.0, nn)),
                  static_cast<std::uint32_t>(std::max(1.0, k))};
      op.flops = 2 * m * nn * k;
      // A weight gradient accumulated into the fp32 (or bf16) main-grad buffer the builder's DP
      // machinery reduces: its read and write, as the builder charges its wgrad GEMMs
      // (Megatron's gradient_accumulation_fusion).
      const double main_grad = weight_gradient ? 2 * opt.main_grad_bytes * m * nn : 0.0;
      op.mem_bytes = 2 * (m * k + k * nn + m * nn) + main_grad;
      if (opt.fp8 && !style.empty()) {
        // torchao's Float8Linear (roofline_utils.py): fp8 operands, a bf16 result.
        op.gemm_dtype = graph::GemmDtype::Fp8;
        op.mem_bytes = m * k + k * nn + 2 * m * nn + main_grad;
        const auto cast = [&](double elements, double bytes_per_element) {
          graph::Op c;
          c.kind = graph::OpKind::Elementwise;
          c.name = graph::OpName::Fp8Cast;
          c.phase = phase;
          c.layer = 0;
          c.mem_bytes = bytes_per_element * elements;
          casts[i].push_back(c);
        };
        const auto amax_second_stage = [&] { cast(1, 4); };  // one fp32 scale
        const std::uint32_t x = root(d.inputs[d.inputs.size() - 2]);
        if ((fwd || data_gradient) && cast_done.insert({x, fwd}).second) {
          amax_second_stage();
          cast(m * k, 4);  // the input (forward) or the output gradient (dgrad)
          // Gathered over TP: torchao's Float8ColwiseParallel / Float8RowwiseParallel cast the
          // sequence shard and all-gather it in fp8 (torchtitan's default with float8 and TP).
          for (auto& [g, of] : pre[i])
            if (g.kind == graph::OpKind::AllGather && g.role == graph::CommRole::Tp && of == x &&
                casts[i].size() >= 2) {
              g.comm_bytes /= 2;
              casts[i][casts[i].size() - 1].mem_bytes /= t;
              pre_casts[i].assign(casts[i].end() - 2, casts[i].end());
              casts[i].resize(casts[i].size() - 2);
            }
        }
        if (opt.fp8_fsdp_gather) {
          // The shard's cast (read 2 B, write 1 B) before each fp8 all-gather; the dgrad's
          // transposed copy of the gathered fp8 weight (read and write 1 B).
          if (fwd || data_gradient) cast(weight_elements / opt.fsdp_shard, 3);
          if (data_gradient) cast(weight_elements, 2);
        } else if (fwd || (data_gradient && opt.fp8_recast_weight)) {
          cast(weight_elements, 2);  // the weight's amax
          amax_second_stage();
          cast(weight_elements, 4);
          if (!opt.fp8_recast_weight) out.saved_bytes += weight_elements;  // kept for the dgrad
        }
      }
      own[i] = op;
      const bool row_gathered = row_gathers.count({root(d.inputs[d.inputs.size() - 2]), fwd}) > 0;
      if (opt.async_tp && compiled && sp && tp > 1 && !style.empty() && (row_gathered || reduce)) {
        // Micro-pipeline TP runs the GEMM as t chunks of m/t rows (symmetric memory's
        // _pipelined_all_gather_and_consume / _pipelined_produce_and_all2all): the first t − 1
        // here, the last as `tail`, which waits for the whole gather (or after which the last
        // chunk's partial sums leave). Each chunk reads the whole weight.
        graph::Op chunk = op;
        chunk.shape[0] = static_cast<std::uint32_t>(std::max(1.0, m / t));
        chunk.flops = op.flops / t;
        chunk.mem_bytes = op.gemm_dtype == graph::GemmDtype::Fp8
                              ? m / t * k + k * nn + 2 * m / t * nn
                              : 2 * (m / t * k + k * nn + m / t * nn);
        graph::Op first = chunk;
        first.flops *= t - 1;
        first.mem_bytes *= t - 1;
        own[i] = first;
        tail[i] = chunk;
      }
      if (style.empty())
        out.other_gemm_flops += op.flops;
      else
        out.linear_gemm_flops += op.flops;
      st[i].partial = reduce && tp > 1;
      continue;
    }
    double bytes = cp_bytes(static_cast<std::uint32_t>(i));
    for (std::uint32_t j : d.inputs)
      if (nodes[j].kind != "get_attr") bytes += cp_bytes(j);
    if (cls == AtenClass::Unknown) ++out.unknown_ops[base_op(d.op)];
    st[i].sharded = any_sharded;
    bool any_seq = false;
    for (std::uint32_t j : d.inputs) any_seq = any_seq || st[j].seq;
    st[i].seq = any_seq && !any_sharded;
    // A fused SDPA kernel's query, key and value inputs: the first three, after the output
    // gradient for a backward op (its schema: grad_out, query, key, value, out, logsumexp, …).
    const std::size_t q_at = cls == AtenClass::Attention && is_backward_op(d.op) ? 1 : 0;
    if (cls == AtenClass::Attention && d.inputs.size() > q_at &&
        !nodes[d.inputs[q_at]].shapes.empty() && nodes[d.inputs[q_at]].shapes[0].size() == 4) {
      // A fused SDPA kernel (PyTorch 2.x): q [b, h, s, dh], k [b, h, sk, dh]; forward
      // 4·b·h·s·sk·dh FLOPs, half of it under a causal mask, the backward 2.5× the forward (the
      // builder's fused-attention model, MODELING §1.1).
      const auto& q = nodes[d.inputs[q_at]].shapes[0];
      const double sk = d.inputs.size() > q_at + 1 && !nodes[d.inputs[q_at + 1]].shapes.empty() &&
                                nodes[d.inputs[q_at + 1]].shapes[0].size() == 4
                            ? static_cast<double>(nodes[d.inputs[q_at + 1]].shapes[0][2])
                            : static_cast<double>(q[2]);
      const double heads = static_cast<double>(q[1]) / (any_sharded ? t : 1.0);
      const double bh = static_cast<double>(q[0]) * heads;
      op.kind = graph::OpKind::Attention;
      op.attention_impl = sdpa_impl;
      op.name = graph::OpName::Attention;
      // With CP: this rank's s/c queries against the whole sequence, 1/c of the work, the
      // kernel running on blocks of s/c.
      op.shape = {static_cast<std::uint32_t>(std::max(1.0, bh)),
                  static_cast<std::uint32_t>(static_cast<double>(q[2]) / cp),
                  static_cast<std::uint32_t>(q[3])};
      op.flops = (fwd ? 1.0 : 2.5) * (d.causal ? 0.5 : 1.0) * 4 * bh * static_cast<double>(q[2]) *
                 sk * static_cast<double>(q[3]) / cp;
      op.mem_bytes = any_sharded ? bytes / t : bytes;
      own[i] = op;
      if (fwd) out.attention_forward.push_back({op});
      if (d.inputs.size() >= q_at + 3)
        cp_exchange(static_cast<std::uint32_t>(i), phase,
                    kv_bytes(d.inputs[q_at + 1], d.inputs[q_at + 2]), root(d.inputs[q_at + 1]));
      continue;
    }
    op.kind = cls == AtenClass::Attention ? graph::OpKind::Attention : graph::OpKind::Elementwise;
    op.name = cls == AtenClass::Attention ? graph::OpName::Attention : graph::OpName::AtenOp;
    op.mem_bytes = any_sharded || st[i].seq ? bytes / t : bytes;
    // The outer graph's vocabulary-parallel ops (a rowwise nn.Embedding, a colwise output layer):
    // PyTorch's RowwiseParallel embedding and loss_parallel, as Megatron's
    // VocabParallelEmbedding and vocab-parallel cross-entropy.
    const std::string bop = base_op(d.op);
    const auto weight_style = [&](std::uint32_t j) {
      const CapturedNode& w = nodes[root(j)];
      return w.kind == "placeholder" && !w.param.empty() ? plan.style_of(w.module) : std::string();
    };
    if (bop == "embedding" && d.inputs.size() >= 2) {
      // A lookup reads the rows it returns and the token ids, not the table: 2 · out + ids.
      op.mem_bytes = 2 * cp_bytes(static_cast<std::uint32_t>(i)) + cp_bytes(d.inputs[1]);
      st[i].sharded = false;
      st[i].seq = false;
      // Each rank looks up its vocabulary shard: partial sums, reduced (scattered with SP).
      if (weight_style(d.inputs[0]) == "rowwise") st[i].partial = tp > 1;
    } else if (bop == "embedding_dense_backward" && d.inputs.size() >= 2) {
      // Scatter-add of the gradient rows into the rank's [V/t, h] table gradient; vocabulary-
      // parallel when the lookup with the same ids was (a tied table's module path may be
      // another's).
      bool vocab_parallel = plan.style_of(d.module) == "rowwise";
      for (std::uint32_t e = 0; e < n && !vocab_parallel; ++e)
        if (forward[e] && base_op(nodes[e].op) == "embedding" && nodes[e].inputs.size() >= 2 &&
            root(nodes[e].inputs[1]) == root(d.inputs[1]))
          vocab_parallel = weight_style(nodes[e].inputs[0]) == "rowwise";
      if (vocab_parallel && st[d.inputs[0]].seq && tp > 1) {
        graph::Op ag = collective_op(
            graph::OpKind::AllGather, graph::CommRole::Tp, graph::OpName::TpAllGather, phase,
            cp_bytes(d.inputs[0]));  // with SP the output gradient is gathered first
        pre[i].push_back({ag, root(d.inputs[0])});
      }
      op.mem_bytes = cp_bytes(static_cast<std::uint32_t>(i)) / (vocab_parallel ? t : 1.0) +
                     2 * cp_bytes(d.inputs[0]) + cp_bytes(d.inputs[1]);
      st[i].sharded = vocab_parallel && tp > 1;
      st[i].seq = false;
    } else if ((bop == "_log_softmax" || bop == "nll_loss_forward") && any_sharded && tp > 1) {
      // Loss parallelism: the softmax's max and sum, the target logit, each an all-reduce of
      // one fp32 per row over TP.
      const auto& in = nodes[d.inputs.front()].shapes;
      const double rows =
          in.empty() || in[0].empty() ? 1.0 : numel(in[0]) / static_cast<double>(in[0].back());
      graph::Op ar = collective_op(graph::OpKind::AllReduce, graph::CommRole::Tp,
                                   graph::OpName::CeAllReduce, phase, 4 * rows / cp);
      for (int k = 0; k < (bop == "_log_softmax" ? 2 : 1); ++k) beside[i].push_back({ar, false});
      if (bop == "nll_loss_forward") st[i].sharded = false;  // the loss is whole on every rank
      if (bop == "_log_softmax" && !compiled) {
        // Eager, loss_parallel's _log_softmax runs torch._decomp's decomposition on the local
        // shard B (fp32): amax (reads B), shifted = x − max (B → B), exp (B → B), sum (reads
        // B), result = shifted − log(sum) (B → B): 7·B, and `shifted` is alive beside exp's
        // output and then beside the result (one B besides input and output). A low-precision
        // input is first copied to fp32, a low-precision result cast back.
        // The intermediates are the op's own transient, beside what the liveness pass adds.
        const auto y = static_cast<std::uint32_t>(i);
        const double b32 = rank_bytes(y) * 4 / dtype_bytes(dtype_of(d));
        op.mem_bytes = 7 * b32;
        double intermediates = b32;
        if (dtype_of(d) != "float32") op.mem_bytes += b32 + rank_bytes(y);
        if (dtype_of(nodes[d.inputs.front()]) != "float32") {
          op.mem_bytes += b32 + rank_bytes(d.inputs.front());
          intermediates += b32;
        }
        op.mem_transient = static_cast<std::int64_t>(intermediates);
      }
    } else if (bop == "nll_loss_backward" && any_sharded && tp > 1 && !compiled &&
               !d.shapes.empty()) {
      // Eager loss_parallel fuses the log-softmax backward into this op (no all-gather of the
      // gradient): (zeros_like(x) with −1 scattered at the targets + exp(x)) · grad, on the
      // local shard B: zeros (writes B), exp (B → B), add (2·B → B), mul (B → B): 8·B; at
      // the add, the zeros, exp(x) and their sum are alive, two B besides the output.
      const double b = rank_bytes(static_cast<std::uint32_t>(i));
      op.mem_bytes = 8 * b;
      op.mem_transient = static_cast<std::int64_t>(2 * b);
    } else if (bop == "_log_softmax_backward_data" && any_sharded && tp > 1 && !compiled &&
               !d.shapes.empty() && !d.inputs.empty() &&
               dtype_of(nodes[d.inputs.front()]) == dtype_of(d)) {
      // ... and this one only returns its gradient, converted to the input's dtype: no kernel
      // and no copy when it already is one.
      alias[i] = true;
      continue;
    }
    own[i] = op;
  }

  // EP: per pass, the all-to-all dispatch before the local experts' first GEMM and the combine
  // after their last (Megatron's MoEAlltoAllTokenDispatcher), each moving this rank's token
  // copies: the experts' inputs of the capture, k·T_l·h bf16 summed over all E experts.
  if (opt.ep > 1 && !ep_gemms.empty()) {
    std::map<std::int64_t, double> input_of_expert;  // its first column-parallel GEMM's input
    for (std::size_t i = 0; i < n; ++i) {
      const CapturedNode& d = nodes[i];
      // Node order: an expert's first GEMM reads its input (w1's).
      if (!forward[i] || expert_of(d.module) < 0 || aten_class(d.op) != AtenClass::Gemm ||
          d.inputs.size() < 2)
        continue;
      const std::uint32_t x = d.inputs[d.inputs.size() - 2];
      input_of_expert.emplace(expert_of(d.module),
                              tensor_bytes(nodes[x]) / (st[x].seq ? t : 1.0) / cp);
    }
    double copies = 0;
    for (const auto& [e, b] : input_of_expert) copies += b;
    copies *= opt.all_to_all_scale;
    for (const bool fwd : {true, false}) {
      std::vector<std::uint32_t> g;
      for (std::uint32_t i : ep_gemms)
        if (forward[i] == fwd) g.push_back(i);
      if (g.empty()) continue;
      graph::Op a2a = collective_op(graph::OpKind::AllToAll, graph::CommRole::Ep,
                                    fwd ? graph::OpName::EpDispatch : graph::OpName::EpCombine,
                                    fwd ? graph::Phase::Forward : graph::Phase::Backward, copies);
      const std::uint32_t first = g.front();
      pre[first].push_back({a2a, root(nodes[first].inputs[nodes[first].inputs.size() - 2])});
      a2a.name = fwd ? graph::OpName::EpCombine : graph::OpName::EpDispatch;
      beside[g.back()].push_back({a2a, false});
    }
  }

  // Forward outputs (not views) that a backward op reads: what autograd keeps.
  const std::function<bool(std::uint32_t, int)> read_by_backward = [&](std::uint32_t j, int depth) {
    for (std::uint32_t c2 : consumers[j]) {
      if (!forward[c2]) return true;
      if (depth < 4 && is_view(c2) && read_by_backward(c2, depth + 1)) return true;
    }
    return false;
  };
  std::vector<bool> dropped(n, false);  // not materialised (inside a fused attention kernel)
  std::vector<bool> saved(n, false);    // kept for the backward (saved_bytes)
  std::set<std::uint32_t> fused_attention_output;  // the output of each fused attention
  // Gathered copies (TP all-gathers): (pass, op index, tensor gathered, bytes of the copy).
  struct Gathered {
    bool forward;
    std::int32_t at;
    std::uint32_t tensor;
    double bytes;
  };
  std::vector<Gathered> gathered_copies;
  std::map<std::uint32_t, std::vector<std::uint32_t>> recompute;  // kept → recomputed from

  // Emission. A collective starts once the op producing its tensor is done (or at the start of
  // its pass if that op belongs to the other pass) and the compute op after it waits for it:
  // independent compute (a wgrad GEMM) overlaps it, as with functional collectives waited at
  // their first use.
  std::vector<std::int64_t> at(n, -1);  // node → index of its op in its pass's list
  const auto record_part = [&](bool f, std::uint32_t x) {
    if (!part.empty()) (f ? out.forward_part : out.backward_part).push_back(part[x]);
  };
  // Async TP (compiled, SP): a plan GEMM reading a row-gathered operand does not wait for the
  // gather; a reduce-scatter of a plan GEMM's result starts with that GEMM: after the compute op
  // before it (`before[x]`, per node, or the pass start).
  const bool async_tp = opt.async_tp && compiled && sp && tp > 1;
  const auto overlaps_gather = [&](std::uint32_t x) {
    const CapturedNode& d = nodes[x];
    return async_tp && plan_gemm[x] && d.inputs.size() >= 2 &&
           row_gathers.count({root(d.inputs[d.inputs.size() - 2]), forward[x]}) > 0;
  };
  std::vector<std::int32_t> before(n, LoweredBlock::kPassStart);
  std::array<std::int32_t, 2> last_compute{LoweredBlock::kPassStart, LoweredBlock::kPassStart};
  // A compute op of node x's part on its pass's chain (`follows`: kChain or kChainOverlap);
  // returns its index.
  const auto emit_compute = [&](bool f, const graph::Op& o, std::uint32_t x, std::int32_t follows) {
    record_part(f, x);
    (f ? out.forward : out.backward).push_back(o);
    (f ? out.forward_after : out.backward_after).push_back(follows);
    return last_compute[f] = static_cast<std::int32_t>((f ? out.forward : out.backward).size()) - 1;
  };
  const auto emit_collectives = [&](std::uint32_t x) {
    // fp8 with TP: the casts of an operand gathered in fp8 run before its gather, which waits
    // for them.
    std::int32_t cast_at = -1;
    for (const graph::Op& c : pre_casts[x])
      cast_at = emit_compute(c.phase == graph::Phase::Forward, c, x, LoweredBlock::kChain);
    for (const auto& [o, producer] : pre[x]) {
      const bool f = o.phase == graph::Phase::Forward;
      auto& list = f ? out.forward : out.backward;
      auto& after = f ? out.forward_after : out.backward_after;
      if (o.kind == graph::OpKind::AllGather)
        gathered_copies.push_back(
            {f, static_cast<std::int32_t>(list.size()), producer, o.comm_bytes});
      if (o.kind == graph::OpKind::AllGather && cast_at >= 0) {
        record_part(f, x);
        list.push_back(o);
        after.push_back(cast_at);
        continue;
      }
      // A reduction belongs where its partial sums are made (the embedding's, before the
      // blocks, not with the head that reads it); a gather where its result is read.
      const std::uint32_t owner =
          o.kind != graph::OpKind::AllGather && nodes[producer].kind == "call_function" ? producer
                                                                                        : x;
      record_part(f, owner);
      list.push_back(o);
      const bool same_pass = at[producer] >= 0 && forward[producer] == f;
      if (async_tp && same_pass && o.kind == graph::OpKind::ReduceScatter && tail[producer]) {
        // The partial sums of the GEMM's first t − 1 chunks leave beside them, the last
        // chunk's after it.
        graph::Op last = o;
        list.back().comm_bytes = o.comm_bytes * (t - 1) / t;
        last.comm_bytes = o.comm_bytes / t;
        after.push_back(before[producer]);
        record_part(f, owner);
        list.push_back(last);
        after.push_back(static_cast<std::int32_t>(at[producer]) + 1);
      } else
        after.push_back(same_pass ? static_cast<std::int32_t>(at[producer])
                                  : LoweredBlock::kPassStart);
    }
  };
  const auto emit_own = [&](const graph::Op& o, bool f, const std::vector<std::uint32_t>& ms) {
    auto& list = f ? out.forward : out.backward;
    auto& after = f ? out.forward_after : out.backward_after;
    // fp8: the GEMM's casts, just before it (an overlapped gather waits beside them too).
    bool overlap = false;
    for (std::uint32_t m : ms) overlap = overlap || overlaps_gather(m);
    const std::int32_t follows = overlap ? LoweredBlock::kChainOverlap : LoweredBlock::kChain;
    for (std::uint32_t m : ms)
      for (const graph::Op& c : casts[m]) emit_compute(f, c, m, follows);
    after.push_back(follows);
    const auto self = static_cast<std::int32_t>(list.size());
    for (std::uint32_t m : ms) {
      at[m] = self;
      before[m] = last_compute[f];
    }
    last_compute[f] = self;
    record_part(f, ms.front());
    list.push_back(o);
    for (std::uint32_t m : ms)
      if (tail[m]) emit_compute(f, *tail[m], m, LoweredBlock::kChain);  // at at[m] + 1
    const std::int32_t done = last_compute[f];  // the op itself, or its last chunk
    for (std::uint32_t m : ms) {
      // A ring's further steps wait for its key/value gather (the first collective beside it);
      // its dK, dV exchange starts after the first step and is waited for after the last.
      const bool ring = !ring_rest[m].empty();
      for (std::size_t k = 0; k < beside[m].size(); ++k) {
        const auto& [comm, starts_before] = beside[m][k];
        record_part(f, m);
        list.push_back(comm);
        after.push_back(k > 0 ? (ring ? done : static_cast<std::int32_t>(list.size()) - 2)
                        : !starts_before ? done
                        : self > 0       ? self - 1
                                         : LoweredBlock::kPassStart);
        if (ring && k == 0)
          for (const graph::Op& r : ring_rest[m]) emit_compute(f, r, m, LoweredBlock::kChain);
      }
    }
  };
  if (!compiled) {
    for (std::uint32_t i = 0; i < n; ++i) {
      emit_collectives(i);
      if (own[i]) emit_own(*own[i], forward[i], {i});
    }
  } else {
    // torch.compile (Inductor), docs/flint.md §2: the eager attention pattern (batched QKᵀ,
    // scale, mask, softmax, batched PV) becomes one fused attention kernel per pass, as
    // Inductor's fuse_attention pass rewrites it to SDPA; point-wise ops and reductions fuse into
    // one kernel per connected group that reads its inputs and writes its outputs once.
    Units units(n);
    for (std::uint32_t i = 0; i < n; ++i)
      if (is_view(i) && nodes[i].inputs.size() == 1) units.unite(root(i), i);
    const auto batched_gemm = [&](std::uint32_t i) {
      return nodes[i].kind == "call_function" && aten_class(nodes[i].op) == AtenClass::Gemm &&
             plan.style_of(nodes[i].module).empty() && !nodes[i].shapes.empty() &&
             nodes[i].shapes[0].size() == 3;
    };
    const auto pointwise = [&](std::uint32_t i) {
      if (nodes[i].kind != "call_function") return false;
      const AtenClass k = aten_class(nodes[i].op);
      return k == AtenClass::MemoryBound || k == AtenClass::Unknown;
    };
    // The region around a softmax (or its backward): point-wise and view ops of the same pass,
    // bounded by batched GEMMs (included, not crossed), plan GEMMs and placeholders.
    const auto expand = [&](std::uint32_t seed) {
      std::set<std::uint32_t> region;
      std::vector<std::uint32_t> todo = {seed};
      while (!todo.empty()) {
        const std::uint32_t x = todo.back();
        todo.pop_back();
        if (!region.insert(x).second) continue;
        if (batched_gemm(x)) continue;
        std::vector<std::uint32_t> next = nodes[x].inputs;
        next.insert(next.end(), consumers[x].begin(), consumers[x].end());
        for (std::uint32_t y : next)
          if (forward[y] == forward[seed] && (batched_gemm(y) || pointwise(y) || is_view(y)))
            todo.push_back(y);
      }
      return region;
    };
    const auto gemms_in = [&](const std::set<std::uint32_t>& r) {
      std::vector<std::uint32_t> g;
      for (std::uint32_t x : r)
        if (batched_gemm(x)) g.push_back(x);
      return g;
    };
    std::vector<bool> in_attention(n, false);
    for (std::uint32_t s = 0; s < n; ++s) {
      if (!forward[s] || nodes[s].kind != "call_function" ||
          (base_op(nodes[s].op) != "_softmax" && base_op(nodes[s].op) != "_safe_softmax") ||
          in_attention[s])
        continue;
      const std::set<std::uint32_t> fr = expand(s);
      const std::vector<std::uint32_t> fg = gemms_in(fr);
      if (fg.size() < 2) continue;  // a softmax without attention's GEMMs (a router)
      // Interior: region tensors no forward op outside the region reads (the scores and
      // probabilities, which the fused kernel never writes).
      std::vector<std::uint32_t> interior;
      for (std::uint32_t x : fr) {
        bool outside = false;
        const std::function<void(std::uint32_t)> visit = [&](std::uint32_t y) {
          for (std::uint32_t z : consumers[y])
            if (is_view(z) && !fr.count(z))
              visit(z);
            else if (forward[z] && !fr.count(z))
              outside = true;
        };
        visit(x);
        if (!outside) interior.push_back(x);
      }
      // Backward: the ops reading the interior (softmax backward, dV), grown like the forward.
      std::set<std::uint32_t> br;
      const std::function<void(std::uint32_t)> seed_from = [&](std::uint32_t y) {
        for (std::uint32_t z : consumers[y]) {
          if (forward[z]) continue;
          if (is_view(z)) {
            seed_from(z);
          } else if (!br.count(z) && (batched_gemm(z) || pointwise(z))) {
            const std::set<std::uint32_t> r = expand(z);
            br.insert(r.begin(), r.end());
          }
        }
      };
      for (std::uint32_t x : interior) seed_from(x);
      const std::vector<std::uint32_t> bg = gemms_in(br);
      // Causal: the region makes a triangular mask, or reads a buffer made by tril / triu
      // (nanoGPT's registered `bias`).
      bool causal = false;
      for (std::uint32_t x : fr) {
        const std::string b = base_op(nodes[x].op);
        causal = causal || b == "triu" || b == "tril";
        for (std::uint32_t j : nodes[x].inputs) {
          const CapturedNode& r = nodes[root(j)];
          causal = causal || (r.kind == "placeholder" && !r.mask.empty());
        }
      }
      // Shape from QKᵀ (the region's first GEMM): [b·h, s, sk] from q [b·h, s, dh].
      const std::uint32_t qk = *std::min_element(fg.begin(), fg.end());
      const auto& so = nodes[qk].shapes[0];
      const auto& qs = nodes[nodes[qk].inputs[nodes[qk].inputs.size() - 2]].shapes;
      const double bh = static_cast<double>(so[0]) / (st[qk].sharded ? t : 1.0);
      const std::uint32_t pv = *std::max_element(fg.begin(), fg.end());
      double matrix_flops = 0;
      for (std::uint32_t g : fg) matrix_flops += own[g] ? own[g]->flops : 0;
      // What a region reads from outside (the fused kernel's inputs) and what outside reads.
      const auto io_bytes = [&](const std::set<std::uint32_t>& r, bool skip_forward) {
        double b = 0;
        std::set<std::uint32_t> seen;
        for (std::uint32_t x : r) {
          if (is_view(x)) continue;
          for (std::uint32_t j : nodes[x].inputs) {
            const std::uint32_t p = root(j);
            if (r.count(p) || r.count(j) || nodes[p].kind == "get_attr") continue;
            if (skip_forward && fr.count(p)) continue;  // recomputed, never stored
            if (seen.insert(p).second) b += rank_bytes(p);
          }
        }
        return b;
      };
      graph::Op fa;
      fa.kind = graph::OpKind::Attention;
      fa.attention_impl = sdpa_impl;
      fa.name = graph::OpName::Attention;
      fa.layer = 0;
      fa.shape = {static_cast<std::uint32_t>(std::max(1.0, bh)),
                  static_cast<std::uint32_t>(static_cast<double>(so[1]) / cp),
                  static_cast<std::uint32_t>(qs.empty() ? 1 : qs[0].back())};
      const auto& vs = nodes[nodes[pv].inputs.back()].shapes;
      if (!vs.empty() && vs[0].back() != static_cast<std::int64_t>(fa.shape[2]))
        fa.value_dim = static_cast<std::uint16_t>(vs[0].back());
      // Forward: the eager GEMMs' FLOPs, half of them under a causal mask (flash attention
      // skips the masked blocks); backward 2.5× that (FlashAttention-2's backward recomputes
      // the scores: five GEMMs against two), the builder's fused model (MODELING §1.1).
      const double causal_share = causal ? 0.5 : 1.0;
      fa.phase = graph::Phase::Forward;
      fa.flops = causal_share * matrix_flops;
      fa.mem_bytes = io_bytes(fr, false) + rank_bytes(pv);
      own[pv] = fa;
      for (std::uint32_t x : fr) {
        in_attention[x] = true;
        if (x != pv) own[x].reset();
        if (!is_view(x)) units.unite(qk, x);  // a view stays with the tensor it shows
      }
      for (std::uint32_t x : interior) dropped[x] = x != pv;
      fused_attention_output.insert(pv);
      // Log-sum-exp, fp32 per query row: what the fused kernel keeps for its backward.
      out.saved_bytes += 4 * bh * static_cast<double>(so[1]) / cp;
      out.attention_saved_bytes += 4 * bh * static_cast<double>(so[1]) / cp;
      out.attention_forward.push_back({fa});
      const std::uint32_t k_root = root(nodes[qk].inputs.back());
      const double kv = kv_bytes(nodes[qk].inputs.back(), nodes[pv].inputs.back());
      cp_exchange(pv, graph::Phase::Forward, kv, k_root);
      if (bg.empty()) continue;
      graph::Op fb = fa;
      fb.phase = graph::Phase::Backward;
      fb.flops = 2.5 * fa.flops;
      double written = 0;
      for (std::uint32_t g : bg) written += rank_bytes(g);
      fb.mem_bytes = io_bytes(br, true) + written;
      const std::uint32_t last = *std::max_element(br.begin(), br.end());
      for (std::uint32_t x : br) {
        in_attention[x] = true;
        own[x].reset();
        if (!is_view(x)) units.unite(last, x);
      }
      own[last] = fb;
      cp_exchange(last, graph::Phase::Backward, kv, k_root);
    }
    // Point-wise fusion: a point-wise op joins the kernel of a point-wise producer of the same
    // pass unless the producer's output goes through a TP collective first, or the merged
    // kernel would have to run both before and after some other kernel (a cycle).
    std::vector<bool> fusible(n, false);
    // Lookups and their scatter-add stay kernels of their own (their bytes are the rows they
    // touch, not the table).
    for (std::uint32_t i = 0; i < n; ++i)
      fusible[i] = pointwise(i) && !in_attention[i] && !st[i].remote &&
                   base_op(nodes[i].op) != "embedding" &&
                   base_op(nodes[i].op) != "embedding_dense_backward";
    const auto unit_of = [&](std::uint32_t i) { return units.find(i); };
    // Is there a path from unit a to unit b through some third unit?
    const auto indirect = [&](std::uint32_t a, std::uint32_t b) {
      std::vector<bool> seen(n, false);
      std::vector<std::uint32_t> todo;
      for (std::uint32_t x : units.members[a])
        for (std::uint32_t y : consumers[x]) {
          const std::uint32_t u = unit_of(y);
          if (u != a && u != b && !seen[u]) {
            seen[u] = true;
            todo.push_back(u);
          }
        }
      while (!todo.empty()) {
        const std::uint32_t u = todo.back();
        todo.pop_back();
        for (std::uint32_t x : units.members[u])
          for (std::uint32_t y : consumers[x]) {
            const std::uint32_t w = unit_of(y);
            if (w == b) return true;
            if (w != a && !seen[w]) {
              seen[w] = true;
              todo.push_back(w);
            }
          }
      }
      return false;
    };
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!fusible[i]) continue;
      for (std::uint32_t j : nodes[i].inputs) {
        const std::uint32_t p = root(j);
        if (!fusible[p] || forward[p] != forward[i] || st[p].reduced) continue;
        if (!part.empty() && part[p] != part[i]) continue;
        const std::uint32_t a = unit_of(p), b = unit_of(i);
        if (a == b || indirect(a, b) || indirect(b, a)) continue;
        units.unite(a, b);
      }
    }
    // Horizontal fusion: point-wise kernels of one pass over the same iteration space that read
    // the same tensor become one kernel, which reads it once (Inductor's scheduler fuses by
    // shared reads).
    const auto out_numel = [&](std::uint32_t i) {
      return nodes[i].shapes.empty() ? 0.0 : numel(nodes[i].shapes[0]);
    };
    for (std::uint32_t p = 0; p < n; ++p) {
      if (is_view(p)) continue;
      std::vector<std::uint32_t> readers;
      const std::function<void(std::uint32_t)> collect = [&](std::uint32_t y) {
        for (std::uint32_t z : consumers[y])
          if (is_view(z))
            collect(z);
          else if (fusible[z])
            readers.push_back(z);
      };
      collect(p);
      for (std::size_t a = 0; a < readers.size(); ++a)
        for (std::size_t b2 = a + 1; b2 < readers.size(); ++b2) {
          const std::uint32_t x = readers[a], y = readers[b2];
          if (forward[x] != forward[y] || out_numel(x) != out_numel(y)) continue;
          if (!part.empty() && part[x] != part[y]) continue;
          const std::uint32_t ux = unit_of(x), uy = unit_of(y);
          if (ux == uy || indirect(ux, uy) || indirect(uy, ux)) continue;
          bool direct = false;  // an edge between them is a vertical fusion the rules refused
          for (std::uint32_t m : units.members[ux])
            for (std::uint32_t c2 : consumers[m]) direct = direct || unit_of(c2) == uy;
          for (std::uint32_t m : units.members[uy])
            for (std::uint32_t c2 : consumers[m]) direct = direct || unit_of(c2) == ux;
          if (!direct) units.unite(ux, uy);
        }
    }
    // What the backward keeps, as Inductor's min-cut partitioner decides it: a point-wise forward
    // tensor that only point-wise backward kernels read is recomputed there from its nearest
    // non-point-wise ancestors when those cost no more to keep than it (the fp32 upcasts of a
    // norm, a cast copy), else kept.
    std::set<std::uint32_t> kept;
    std::vector<std::uint32_t> candidates;
    const auto backward_readers_fusible = [&](std::uint32_t x) {
      bool ok = true;
      const std::function<void(std::uint32_t)> visit = [&](std::uint32_t y) {
        for (std::uint32_t z : consumers[y]) {
          if (forward[z]) continue;
          if (is_view(z))
            visit(z);
          else
            ok = ok && fusible[z];
        }
      };
      visit(x);
      return ok;
    };
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!forward[i] || is_view(i) || dropped[i] || st[i].remote || !read_by_backward(i, 0))
        continue;
      if (nodes[i].kind == "placeholder" && (!nodes[i].param.empty() || !nodes[i].buffer.empty()))
        continue;  // the module's state, not an activation
      if (fusible[i] && backward_readers_fusible(i))
        candidates.push_back(i);
      else
        kept.insert(i);
    }
    for (std::uint32_t x : candidates) {
      std::set<std::uint32_t> frontier;
      const std::function<void(std::uint32_t)> up = [&](std::uint32_t y) {
        for (std::uint32_t j : nodes[y].inputs) {
          const std::uint32_t r = root(j);
          if (nodes[r].kind == "get_attr" ||
              (nodes[r].kind == "placeholder" &&
               (!nodes[r].param.empty() || !nodes[r].buffer.empty())))
            continue;
          if (fusible[r] && forward[r])
            up(r);
          else
            frontier.insert(r);
        }
      };
      up(x);
      double extra = 0;
      for (std::uint32_t f : frontier)
        if (!kept.count(f)) extra += rank_bytes(f);
      if (extra <= rank_bytes(x)) {
        recompute[x] = std::vector<std::uint32_t>(frontier.begin(), frontier.end());
        kept.insert(frontier.begin(), frontier.end());
      } else {
        kept.insert(x);
      }
    }
    for (std::uint32_t x : kept) {
      saved[x] = true;
      out.saved_bytes += rank_bytes(x);
      if (!part.empty()) out.saved_by_part[part[x]] += rank_bytes(x);
    }
    // Each unit's op: fused point-wise kernels by their bytes in and out.
    for (std::uint32_t u = 0; u < n; ++u) {
      if (units.find(u) != u) continue;
      std::vector<std::uint32_t> pw;
      for (std::uint32_t x : units.members[u])
        if (fusible[x]) pw.push_back(x);
      if (pw.empty()) continue;
      double b = 0;
      std::set<std::uint32_t> seen;
      for (std::uint32_t x : pw)
        for (std::uint32_t j : nodes[x].inputs) {
          const std::uint32_t p = root(j);
          if (unit_of(p) == u || nodes[p].kind == "get_attr") continue;
          if (const auto r = recompute.find(p); r != recompute.end() && !forward[x]) {
            for (std::uint32_t f : r->second)
              if (seen.insert(f).second) b += rank_bytes(f);
          } else if (seen.insert(p).second) {
            b += std::min(rank_bytes(p), rank_bytes(j));
          }
        }
      // Written: outputs read by another kernel; a forward tensor the backward recomputes is
      // written only if a forward kernel reads it.
      const std::function<bool(std::uint32_t, bool)> read_outside = [&](std::uint32_t x,
                                                                        bool forward_only) {
        for (std::uint32_t y : consumers[x]) {
          if (forward_only && !forward[y]) continue;
          if (is_view(y) ? read_outside(y, forward_only) : unit_of(y) != u) return true;
        }
        return false;
      };
      for (std::uint32_t x : pw)
        if (read_outside(x, recompute.count(x) > 0)) b += rank_bytes(x);
      graph::Op op = *own[pw.front()];
      op.mem_bytes = b;
      for (std::uint32_t x : pw) own[x].reset();
      own[pw.back()] = op;
    }
    // Emission: units in topological order; among the ready ones, first one whose result a TP
    // collective reduces (so the collective starts as early as its inputs allow and the
    // independent kernels after it, a wgrad GEMM, overlap it: Inductor's raise_comms /
    // reorder_compute_for_overlap passes), then capture order. Each unit's collectives first,
    // then its kernel.
    std::vector<bool> feeds_collective(n, false);
    for (std::uint32_t x = 0; x < n; ++x)
      for (const auto& [o, producer] : pre[x])
        if (o.kind != graph::OpKind::AllGather) feeds_collective[unit_of(producer)] = true;
    // … and the kernels feeding such a unit through point-wise kernels only (the q, k and v
    // dgrads whose sum is reduced).
    for (bool changed = true; changed;) {
      changed = false;
      for (auto i = static_cast<std::uint32_t>(n); i-- > 0;) {
        const std::uint32_t u = unit_of(i);
        if (!feeds_collective[u] || !fusible[i]) continue;
        for (std::uint32_t j : nodes[i].inputs) {
          const std::uint32_t v = unit_of(root(j));
          if (v != u && forward[root(j)] == forward[i] && !feeds_collective[v] &&
              nodes[root(j)].kind == "call_function") {
            feeds_collective[v] = true;
            changed = true;
          }
        }
      }
    }
    std::vector<int> indegree(n, 0);
    std::vector<std::vector<std::uint32_t>> succ(n);
    for (std::uint32_t i = 0; i < n; ++i)
      for (std::uint32_t j : nodes[i].inputs) {
        const std::uint32_t a = unit_of(j), b = unit_of(i);
        if (a != b) {
          succ[a].push_back(b);
          ++indegree[b];
        }
      }
    std::set<std::pair<bool, std::uint32_t>> ready;  // (not feeding a collective, unit)
    const auto make_ready = [&](std::uint32_t u) { ready.insert({!feeds_collective[u], u}); };
    for (std::uint32_t u = 0; u < n; ++u)
      if (unit_of(u) == u && indegree[u] == 0) make_ready(u);
    std::size_t emitted = 0;
    while (!ready.empty()) {
      const std::uint32_t u = ready.begin()->second;
      ready.erase(ready.begin());
      ++emitted;
      std::vector<std::uint32_t> ms = units.members[u];
      std::sort(ms.begin(), ms.end());
      for (std::uint32_t x : ms) emit_collectives(x);
      for (std::uint32_t x : ms)
        if (own[x]) emit_own(*own[x], forward[x], ms);
      for (std::uint32_t v : succ[u])
        if (--indegree[v] == 0) make_ready(v);
    }
    std::size_t unit_count = 0;
    for (std::uint32_t u = 0; u < n; ++u) unit_count += unit_of(u) == u;
    SCALESCOPE_EXPECTS(emitted == unit_count);
  }
  if (!compiled)
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!forward[i] || nodes[i].kind != "call_function" || is_view(i) || st[i].remote) continue;
      if (read_by_backward(i, 0)) {
        saved[i] = true;
        out.saved_bytes += rank_bytes(i);
        if (!part.empty()) out.saved_by_part[part[i]] += rank_bytes(i);
      }
    }
  // Per-op selective activation checkpointing (torchtitan's `selective_ac_option: op`,
  // compiled): what the backward needs is kept where the policy saves it (every odd-numbered
  // mm of the forward, attention outputs, reduce-scatter results) and recomputed otherwise, from
  // its inputs, back to saved tensors and the block input. The recomputed GEMMs (and the
  // all-gathers of their operands) run again before the backward; recomputed point-wise ops
  // fuse into the backward's kernels, as the partitioner places them.
  std::vector<bool> must_save(n, false);  // the policy's save list
  std::vector<bool> cached(n, false);     // … its ops proper: odd-numbered mms and SDPA
  int mm_count = 0;
  for (std::uint32_t x = 0; x < n; ++x) {
    if (!forward[x] || nodes[x].kind != "call_function" || st[x].remote) continue;
    if (base_op(nodes[x].op) == "mm" && ++mm_count % 2 == 1) cached[x] = true;
    if (own[x] && own[x]->kind == graph::OpKind::Attention) cached[x] = true;  // SDPA
    must_save[x] = cached[x] || fused_attention_output.count(x) || scattered.count(x);
  }
  if (!compiled) {
    // Eager (torch.utils.checkpoint, non-reentrant, with the policy's context): the forward
    // caches the output of every op on the save list, the block input stays, and the recompute
    // before the backward runs the block's forward again, each op on the list returning its
    // cached output instead, every other op and collective running again (all-gathers, casts)
    // but the reduce-scatters, whose shards are cached too. An odd-numbered reduce-scattered mm
    // keeps both its [m, n] partial sums and the shard.
    if (hidden_input < n) out.op_sac_saved_bytes += rank_bytes(hidden_input);
    for (std::uint32_t x = 0; x < n; ++x) {
      if (!forward[x]) continue;
      if (cached[x]) out.op_sac_saved_bytes += rank_bytes(x);
      if (scattered.count(x)) out.op_sac_saved_bytes += rank_bytes(x) / t;
    }
    std::map<std::uint32_t, std::int32_t> again;  // node → index of its recomputed op
    const auto push = [&](const graph::Op& o, std::int32_t after) {
      out.op_sac_recompute.push_back(o);
      out.op_sac_recompute_after.push_back(after);
      return static_cast<std::int32_t>(out.op_sac_recompute.size()) - 1;
    };
    for (std::uint32_t x = 0; x < n; ++x) {
      if (!forward[x] || !own[x]) continue;
      for (const auto& [o, producer] : pre[x]) {
        if (o.kind == graph::OpKind::ReduceScatter) continue;  // its shard is cached
        const auto from = again.find(producer);
        push(o, from != again.end() ? from->second : LoweredBlock::kPassStart);
      }
      for (const auto* list : {&pre_casts[x], &casts[x]})
        for (const graph::Op& c : *list) push(c, LoweredBlock::kChain);
      if (!cached[x]) again[x] = push(*own[x], LoweredBlock::kChain);
      // Collectives beside the op (MoE's combine all-to-all after the last expert GEMM) run
      // again after it.
      const auto self = again.find(x);
      for (const auto& [comm, starts_before] : beside[x])
        push(comm, self != again.end() ? self->second : LoweredBlock::kPassStart);
    }
  } else {
    std::vector<bool> visited(n, false);
    std::vector<std::uint32_t> todo;
    for (std::uint32_t x = 0; x < n; ++x)
      if (forward[x] && !dropped[x] && !st[x].remote && read_by_backward(x, 0)) todo.push_back(x);
    std::vector<std::uint32_t> again;  // recomputed GEMMs
    while (!todo.empty()) {
      const std::uint32_t y = todo.back();
      todo.pop_back();
      if (visited[y] || !forward[y]) continue;
      visited[y] = true;
      const CapturedNode& d = nodes[y];
      if (d.kind == "placeholder") {
        if (y == hidden_input) out.op_sac_saved_bytes += rank_bytes(y);  // the block input
        continue;
      }
      if (d.kind != "call_function") continue;
      if (!is_view(y) && must_save[y]) {
        out.op_sac_saved_bytes += scattered.count(y) ? rank_bytes(y) / t : rank_bytes(y);
        continue;
      }
      if (!is_view(y) && own[y] && own[y]->kind == graph::OpKind::Gemm) again.push_back(y);
      for (std::uint32_t j : d.inputs) todo.push_back(j);
    }
    out.op_sac_saved_bytes += out.attention_saved_bytes;  // the log-sum-exps
    std::sort(again.begin(), again.end(),
              [&](std::uint32_t a, std::uint32_t b2) { return at[a] < at[b2]; });
    // The forward's gathers by the tensor they gather: a recomputed GEMM gathers its operand
    // again (the gathered copy is not kept), once per tensor.
    std::map<std::uint32_t, graph::Op> forward_gather;
    for (std::uint32_t x = 0; x < n; ++x)
      for (const auto& [o, producer] : pre[x])
        if (o.kind == graph::OpKind::AllGather && forward[x]) forward_gather.emplace(producer, o);
    std::set<std::uint32_t> regathered;
    for (std::uint32_t y : again) {
      for (std::uint32_t j : nodes[y].inputs)
        if (const auto g = forward_gather.find(root(j));
            g != forward_gather.end() && regathered.insert(root(j)).second) {
          out.op_sac_recompute.push_back(g->second);
          out.op_sac_recompute_after.push_back(LoweredBlock::kPassStart);
        }
      for (const auto* list : {&pre_casts[y], &casts[y]})
        for (const graph::Op& c : *list) {
          out.op_sac_recompute.push_back(c);
          out.op_sac_recompute_after.push_back(LoweredBlock::kChain);
        }
      out.op_sac_recompute.push_back(*own[y]);
      out.op_sac_recompute_after.push_back(LoweredBlock::kChain);
      if (tail[y]) {
        out.op_sac_recompute.push_back(*tail[y]);
        out.op_sac_recompute_after.push_back(LoweredBlock::kChain);
      }
    }
  }
  // Transient memory: what the caching allocator holds besides the saved tensors while an op
  // runs. A tensor the backward does not keep lives from the op that writes it to the last op
  // of its pass that reads it (through views); compiled, a tensor read only inside its own
  // kernel is never written. A gathered copy lives from its all-gather to the last op reading
  // the tensor. Each op's mem_transient is the sum alive while it runs.
  const std::function<std::int64_t(std::uint32_t, bool)> last_use = [&](std::uint32_t y, bool f) {
    std::int64_t last = -1;
    for (std::uint32_t c : consumers[y]) {
      if (is_view(c) || alias[c]) last = std::max(last, last_use(c, f));
      if (!is_view(c) && at[c] >= 0 && forward[c] == f) last = std::max(last, at[c]);
    }
    return last;
  };
  for (const bool f : {true, false}) {
    auto& list = f ? out.forward : out.backward;
    std::vector<double> delta(list.size() + 1, 0.0);
    const auto live = [&](std::int64_t from, std::int64_t to, double bytes) {
      if (from < 0 || bytes <= 0) return;
      to = std::min<std::int64_t>(std::max(from, to), static_cast<std::int64_t>(list.size()) - 1);
      delta[static_cast<std::size_t>(from)] += bytes;
      delta[static_cast<std::size_t>(to) + 1] -= bytes;
    };
    for (std::uint32_t x = 0; x < n; ++x) {
      if (nodes[x].kind != "call_function" || is_view(x) || at[x] < 0 || forward[x] != f ||
          saved[x] || dropped[x] || st[x].remote || alias[x])
        continue;
      const std::int64_t last = last_use(x, f);
      if (compiled && last <= at[x]) continue;  // never leaves its kernel
      live(at[x], last, rank_bytes(x));
    }
    for (const Gathered& g : gathered_copies)
      if (g.forward == f) live(g.at, last_use(g.tensor, f), g.bytes);
    double alive = 0;
    for (std::size_t k = 0; k < list.size(); ++k) {
      alive += delta[k];
      if (!graph::is_communication(list[k].kind))
        list[k].mem_transient += static_cast<std::int64_t>(alive);  // on top of its own
    }
  }
  return out;
}

}  // namespace

LoweredBlock lower_block(const Capture& c, const TpPlan& plan, std::int64_t tp, bool sp,
                         bool compiled, const LowerOptions& opt) {
  // (The outer graph has no attention: an eager one splits its tokens over CP all the same.)
  if (opt.cp > 1 && !compiled && !capture_has_fused_attention(c))
    throw_input(
        "capture: context parallelism needs a fused attention (scaled_dot_product_attention in "
        "the capture, or model.compile: inductor)");
  if (!opt.experts_replicated) return lower_nodes(c.block, plan, tp, sp, compiled, opt, {}, {});
  // ETP 1: the experts' linear layers keep whole weights on every TP rank (the first rule that
  // matches a path decides its style).
  TpPlan whole = plan;
  whole.rules.insert(whole.rules.begin(), {"experts.*.*", ""});
  return lower_nodes(c.block, whole, tp, sp, compiled, opt, {}, {});
}

LoweredOuter lower_outer(const Capture& c, const TpPlan& plan, std::int64_t tp, bool sp,
                         bool compiled, const LowerOptions& opt) {
  LoweredOuter out;
  const auto& nodes = c.outer;
  const std::size_t n = nodes.size();
  // The block marker capture.py puts where the blocks run: B, its input, is the boundary.
  std::int64_t marker = -1, output = -1;
  for (std::size_t i = 0; i < n; ++i) {
    if (nodes[i].kind == "call_function" && nodes[i].module == c.blocks_attr + ".0" &&
        !nodes[i].inputs.empty())
      marker = static_cast<std::int64_t>(i);
    if (nodes[i].kind == "output") output = static_cast<std::int64_t>(i);
  }
  if (marker < 0 || output < 0 || nodes[static_cast<std::size_t>(output)].inputs.empty())
    return out;  // a capture from before the marker: the builder's embedding and head stand in
  const auto m = static_cast<std::uint32_t>(marker);
  const std::uint32_t b = nodes[m].inputs.front();
  const auto ancestors = [&](std::uint32_t from) {
    std::vector<bool> seen(n, false);
    std::vector<std::uint32_t> todo = {from};
    while (!todo.empty()) {
      const std::uint32_t x = todo.back();
      todo.pop_back();
      if (seen[x]) continue;
      seen[x] = true;
      for (std::uint32_t j : nodes[x].inputs) todo.push_back(j);
    }
    return seen;
  };
  // Before the blocks: the marker's ancestors. After: the rest of the forward. The backward of
  // what runs before: ops reading an activation from before the blocks other than B (token ids,
  // positions, dropout masks; not parameters, which the head may share), and what they feed.
  const std::vector<bool> pre = ancestors(m);
  std::vector<std::uint8_t> part(n, 1);
  for (std::size_t i = 0; i < n; ++i)
    if (pre[i] && i != m) part[i] = 0;
  const std::vector<bool> fwd = ancestors(nodes[static_cast<std::size_t>(output)].inputs.front());
  const auto root = [&](std::uint32_t j) { return view_root(nodes, j); };
  for (std::size_t i = 0; i < n; ++i) {
    if (fwd[i] || pre[i] || nodes[i].kind != "call_function") continue;
    bool seed = false;
    for (std::uint32_t j : nodes[i].inputs) {
      const std::uint32_t r = root(j);
      const bool param = nodes[r].kind == "placeholder" && !nodes[r].param.empty();
      seed = seed || (part[j] == 0 && !fwd[j]) ||  // a backward op of the part before
             (pre[r] && r != b && r != m && !param && fwd[r] == pre[r]);
    }
    if (seed) part[i] = 0;
  }
  const LoweredBlock all = lower_nodes(nodes, plan, tp, sp, compiled, opt, {m}, part);
  // Split each pass by part; a collective whose producer went to the other part starts with
  // its pass.
  const auto split = [&](const std::vector<graph::Op>& ops, const std::vector<std::int32_t>& after,
                         const std::vector<std::uint8_t>& parts, bool forward_pass) {
    std::vector<std::int32_t> index(ops.size(), -1);
    for (std::size_t k = 0; k < ops.size(); ++k) {
      LoweredBlock& dst = parts[k] == 0 ? out.pre : out.post;
      auto& list = forward_pass ? dst.forward : dst.backward;
      auto& dst_after = forward_pass ? dst.forward_after : dst.backward_after;
      index[k] = static_cast<std::int32_t>(list.size());
      list.push_back(ops[k]);
      std::int32_t a = after[k];
      if (a >= 0)
        a = parts[static_cast<std::size_t>(a)] == parts[k] ? index[static_cast<std::size_t>(a)]
                                                           : LoweredBlock::kPassStart;
      dst_after.push_back(a);
    }
  };
  split(all.forward, all.forward_after, all.forward_part, true);
  split(all.backward, all.backward_after, all.backward_part, false);
  out.pre.saved_bytes = all.saved_by_part[0];
  out.post.saved_bytes = all.saved_by_part[1];
  out.unknown_ops = all.unknown_ops;
  out.available = true;
  return out;
}

}  // namespace scalescope::workload
