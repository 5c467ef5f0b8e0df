// The lowering of a captured graph (capture.h5) into a block's ops on one rank: TP / SP / CP / EP
// sharding, the collectives they need, fp8 casts, fusion into compiled kernels, recomputation and
// the memory each op holds (docs/flint.md). This file: the analysis of the graph the lowering
// starts from, tensor bytes, and the entry points (lower_block, lower_outer); the steps in
// capture_lower_*.cpp (workload/capture_lowering.hpp).
#include "workload/capture.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "workload/capture_internal.hpp"
#include "workload/capture_lowering.hpp"

namespace scalescope::workload {

namespace detail {

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

bool is_view_node(const CapturedNode& d) {
  return d.kind == "call_function" && aten_class(d.op) == AtenClass::View;
}

/// The tensor behind view-like ops (node `j` itself when it is not a view).
std::uint32_t view_root(const std::vector<CapturedNode>& nodes, std::uint32_t j) {
  while (is_view_node(nodes[j]) && !nodes[j].inputs.empty()) j = nodes[j].inputs.front();
  return j;
}

Lowering::Lowering(const std::vector<CapturedNode>& graph, const TpPlan& tp_plan,
                   std::int64_t tp_size, bool sequence_parallel, bool inductor,
                   const LowerOptions& options, const std::vector<std::uint32_t>& roots,
                   const std::vector<std::uint8_t>& parts)
    : nodes(graph),
      plan(tp_plan),
      tp(tp_size),
      sp(sequence_parallel),
      compiled(inductor),
      opt(options),
      part(parts) {
  std::int64_t experts3d = 0;  // experts as 3-D weights: their GEMMs get EP's all-to-alls
  if (opt.ep > 1) {
    std::set<std::string> names;
    const ExpertWeights ew = expert_weights_of(nodes);
    for (const auto& [name, shape] : ew.params) names.insert(name);
    expert3d_topk = ew.topk;
    experts3d = ew.experts;
    for (std::uint32_t i = 0; i < n; ++i)
      if (nodes[i].kind == "placeholder" && names.count(nodes[i].param)) expert3d_params.insert(i);
  }
  // The block's result: the first tensor the output node returns. Forward = its ancestors.
  std::int64_t output = -1;
  for (std::size_t i = 0; i < n; ++i)
    if (nodes[i].kind == "output") output = static_cast<std::int64_t>(i);
  if (output < 0 || nodes[static_cast<std::size_t>(output)].inputs.empty())
    throw_input("capture: the block graph has no output");
  // In-place ops (add_, copy_, …) write their first input: a later reader of that tensor (or of
  // a view of it) depends on them, though the traced graph has no edge (make_fx on 1.13 does
  // not functionalise). Such writes are found by the tensor behind the views.
  std::map<std::uint32_t, std::vector<std::uint32_t>> writers;  // tensor → in-place ops on it
  for (std::uint32_t i = 0; i < n; ++i) {
    // (c10d's own ops, `c10d.alltoall_base_.default`, write their first input too.)
    const std::string& op = nodes[i].op;
    const std::string b = op.rfind("c10d.", 0) == 0 ? base_op(op.substr(5)) : base_op(op);
    if (nodes[i].kind == "call_function" && b.size() > 1 && b.back() == '_' && b[0] != '_' &&
        !nodes[i].inputs.empty())
      writers[root(nodes[i].inputs.front())].push_back(i);
  }
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
  for (std::size_t i = 0; i < n; ++i)
    for (std::uint32_t j : nodes[i].inputs) consumers[j].push_back(static_cast<std::uint32_t>(i));
  // Expert parallelism: the capture's experts (E of them, balanced routing); this rank runs the
  // first E/ep on ep× their tokens, the others run elsewhere.
  const std::int64_t experts = experts_in(nodes);
  // Experts as 3-D weights (grouped or gathered GEMMs): every rank's GEMMs take the same k·T
  // token copies under balanced routing, on its E/ep experts' weights; EP adds the all-to-alls.
  if (experts3d > 0 && experts3d % opt.ep != 0)
    throw_input("capture: expert parallelism {} does not divide the {} experts (3-D weights)",
                opt.ep, experts3d);
  if (opt.ep > 1 && experts3d == 0 && (experts == 0 || experts % opt.ep != 0))
    throw_input(
        "capture: expert parallelism {} needs a block whose experts (modules "
        "experts.<i>, {} here) it divides",
        opt.ep, experts);
  local_experts = opt.ep > 1 ? experts / opt.ep : experts;
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
  // Sequence parallelism: activations outside the TP regions are split along the sequence
  // (the block's input first); a plan GEMM gathers such an operand (once per tensor and pass),
  // partial sums are reduce-scattered back, as Megatron's SP does.
  for (std::uint32_t x = 0; x < n && hidden_input == n; ++x)
    if (nodes[x].kind == "placeholder" && nodes[x].param.empty() && nodes[x].buffer.empty())
      hidden_input = x;
  if (sp && tp > 1 && hidden_input < n) st[hidden_input].seq = true;  // the hidden states
  // Context parallelism splits the tokens (b·s, from the hidden states [b, s, h]): the block's
  // inputs but the parameters, and what is computed from them with at least b·s elements, but
  // weight gradients.
  for (std::size_t i = 0; i < n; ++i)
    if (nodes[i].kind == "placeholder" && nodes[i].param.empty() && nodes[i].buffer.empty() &&
        !nodes[i].shapes.empty() && nodes[i].shapes[0].size() == 3) {
      tokens = static_cast<double>(nodes[i].shapes[0][0] * nodes[i].shapes[0][1]);
      break;
    }
  for (std::size_t i = 0; i < n; ++i)
    if (nodes[i].kind == "placeholder")  // inputs but parameters and buffers (a causal mask)
      st[i].tokens = nodes[i].param.empty() && nodes[i].buffer.empty();
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
}

std::uint32_t Lowering::root(std::uint32_t j) const {
  return view_root(nodes, j);
}

bool Lowering::expert3d_gemm(std::size_t i) const {
  if (expert3d_params.empty()) return false;
  const CapturedNode& d = nodes[i];
  if (base_op(d.op) == "_grouped_mm" && !d.shapes.empty() && d.shapes[0].size() == 3) return true;
  for (std::uint32_t j : d.inputs)
    if (expert3d_params.count(source_of(j))) return true;
  return false;
}

std::uint32_t Lowering::source_of(std::uint32_t j) const {
  for (int depth = 0; depth < 8; ++depth) {
    const std::uint32_t r = root(j);
    const std::string b = base_op(nodes[r].op);
    if (nodes[r].kind != "call_function" || nodes[r].inputs.empty() ||
        (b != "index" && b != "gather" && b != "index_select" && b != "_to_copy" && b != "clone"))
      return r;
    j = nodes[r].inputs[0];  // the gathered or cast tensor
  }
  return root(j);
}

bool Lowering::is_weight(std::uint32_t j) const {
  const CapturedNode& r = nodes[source_of(j)];
  return r.kind == "placeholder" && !r.param.empty();
}

bool Lowering::is_view(std::uint32_t i) const {
  return is_view_node(nodes[i]);
}

double Lowering::expert_factor(const std::string& module) const {
  const std::int64_t e = expert_of(module);
  const double share = e >= 0 && static_cast<std::size_t>(e) < opt.expert_tokens.size()
                           ? opt.expert_tokens[static_cast<std::size_t>(e)]
                           : 1.0;
  return static_cast<double>(opt.ep) * share;
}

bool Lowering::remote_expert(const std::string& module) const {
  return opt.ep > 1 && expert_of(module) >= local_experts;
}

// The tensor behind size-preserving views (an expert's token slice behind its reshapes and
// transposes).
std::uint32_t Lowering::slice_of(std::uint32_t j) const {
  while (is_view(j) && !nodes[j].inputs.empty() && !nodes[j].shapes.empty() &&
         !nodes[nodes[j].inputs.front()].shapes.empty() &&
         numel(nodes[nodes[j].inputs.front()].shapes[0]) == numel(nodes[j].shapes[0]))
    j = nodes[j].inputs.front();
  return j;
}

double Lowering::tensor_bytes(const CapturedNode& d) const {
  double b = 0;
  for (std::size_t k = 0; k < d.shapes.size(); ++k)
    b += numel(d.shapes[k]) * dtype_bytes(k < d.dtypes.size() ? d.dtypes[k] : "float32");
  return b;
}

// A tensor's bytes on this rank.
double Lowering::rank_bytes(std::uint32_t j) const {
  return st[j].scale * tensor_bytes(nodes[j]) / (st[j].sharded || st[j].seq ? t : 1.0) /
         (st[j].tokens ? cp : 1.0);
}

double Lowering::cp_bytes(std::uint32_t j) const {
  return st[j].scale * tensor_bytes(nodes[j]) / (st[j].tokens ? cp : 1.0);
}

LoweredBlock Lowering::run() {
  for (std::size_t i = 0; i < n; ++i) lower_node(i);
  ep_collectives();
  if (!compiled) {
    emit_eager();
  } else {
    emit_compiled();
  }
  if (!compiled) save_eager();
  op_sac();
  transient_memory();
  return std::move(out);
}

}  // namespace detail

namespace {

using detail::view_root;

/// lower_block's work on any captured graph. `roots`: nodes whose ancestors are forward besides
/// the result's (the outer graph's block marker); `part` (empty, or one entry per node): ops of
/// different parts never fuse, and each emitted op records its part (LoweredBlock::*_part).
LoweredBlock lower_nodes(const std::vector<CapturedNode>& nodes, const TpPlan& plan,
                         std::int64_t tp, bool sp, bool compiled, const LowerOptions& opt,
                         const std::vector<std::uint32_t>& roots,
                         const std::vector<std::uint8_t>& part) {
  detail::Lowering lowering(nodes, plan, tp, sp, compiled, opt, roots, part);
  return lowering.run();
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
