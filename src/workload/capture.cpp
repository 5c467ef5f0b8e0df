#include "workload/capture.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "workload/capture_internal.hpp"
#include "workload/capture_lowering.hpp"

namespace scalescope::workload {

namespace {

/// Path components split on '.'.
std::vector<std::string> split_path(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, '.');) out.push_back(part);
  return out;
}

/// '*' matches one component; a pattern matches a path that ends with it.
bool matches(const std::string& pattern, const std::string& path) {
  const auto p = split_path(pattern), m = split_path(path);
  if (p.size() > m.size()) return false;
  const std::size_t off = m.size() - p.size();
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] != "*" && p[i] != m[off + i]) return false;
  return true;
}

}  // namespace

namespace detail {

/// A node's (first) result dtype; "" when it has none.
std::string dtype_of(const CapturedNode& d) {
  return d.dtypes.empty() ? std::string() : d.dtypes.front();
}

std::string base_op(const std::string& op) {
  return op.substr(0, op.find('.'));
}

/// A backward op (its base name ends in "_backward"): fused attention backward ops take the
/// output gradient before the query, key and value.
bool is_backward_op(const std::string& op) {
  const std::string b = base_op(op);
  constexpr std::string_view suffix = "_backward";
  return b.size() > suffix.size() &&
         b.compare(b.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The expert index of a module path ("layers.0.block_sparse_moe.experts.3.w1" → 3), or -1.
std::int64_t expert_of(const std::string& module) {
  const auto parts = split_path(module);
  for (std::size_t i = 0; i + 1 < parts.size(); ++i)
    if (parts[i] == "experts" && !parts[i + 1].empty() &&
        parts[i + 1].find_first_not_of("0123456789") == std::string::npos)
      return std::stoll(parts[i + 1]);
  return -1;
}

std::int64_t experts_in(const std::vector<CapturedNode>& nodes) {
  std::int64_t e = 0;
  for (const CapturedNode& d : nodes) e = std::max(e, expert_of(d.module) + 1);
  return e;
}

}  // namespace detail

namespace {

using detail::base_op;
using detail::dtype_of;
using detail::experts_in;
using detail::is_backward_op;
using detail::view_root;

}  // namespace

std::int64_t capture_experts(const Capture& c) {
  return std::max(experts_in(c.block), capture_expert_weights(c).experts);
}

const char* causal_mask_name(CausalMask m) {
  return m == CausalMask::Auto ? "auto" : m == CausalMask::Assume ? "assume" : "materialized";
}

std::string describe_fusion(const std::string& source) {
  if (source == "inductor") return "Inductor's own fusion (read from its scheduler)";
  constexpr std::string_view rederived = "re-derived: ";
  if (source.rfind(rederived, 0) == 0)
    return fmt::format("re-derived by the lowering's rules ({})", source.substr(rederived.size()));
  return "re-derived by the lowering's rules (the capture does not say: made before Inductor "
         "was read)";
}

bool costed_causal(CausalMask m, bool is_causal, bool tril_mask) {
  return m == CausalMask::Assume || is_causal || (m == CausalMask::Auto && tril_mask);
}

std::string describe_causal_attention(const Capture& c, CausalMask m) {
  // Forward attentions: fused SDPA ops, or eager softmaxes (each an attention when compiled).
  int flagged = 0, masked = 0, plain = 0, eager = 0, eager_masked = 0;
  for (const CapturedNode& d : c.block) {
    if (d.kind != "call_function" || is_backward_op(d.op)) continue;
    if (aten_class(d.op) == AtenClass::Attention) {
      (d.causal ? flagged : !d.mask.empty() ? masked : plain) += 1;
    } else if (base_op(d.op) == "_softmax" || base_op(d.op) == "_safe_softmax") {
      ++eager;
    }
  }
  for (const CapturedNode& d : c.block)
    eager_masked += (base_op(d.op) == "tril" || base_op(d.op) == "triu" || !d.mask.empty()) &&
                    aten_class(d.op) != AtenClass::Attention;
  std::string out = fmt::format("causal attention (model.causal_mask: {}): ", causal_mask_name(m));
  if (flagged + masked + plain > 0)
    out += fmt::format(
        "{} fused attention op(s) per block: {} with is_causal, {} reading a causal mask "
        "(tril/triu, or a Hugging Face attention's own){}, {} "
        "with neither{}",
        flagged + masked + plain, flagged, masked,
        masked > 0 ? (costed_causal(m, false, true) ? " (costed causal)" : " (costed full)") : "",
        plain, plain > 0 && m == CausalMask::Assume ? " (costed causal)" : "");
  else if (eager > 0)
    out += fmt::format("{} softmax(es) per block, {}", eager,
                       eager_masked > 0          ? (costed_causal(m, false, true)
                                                        ? "a tril/triu mask: costed causal when fused"
                                                        : "a tril/triu mask: costed full when fused")
                       : m == CausalMask::Assume ? "no mask found: costed causal when fused"
                                                 : "no mask found: costed full when fused");
  else
    out += "no attention in the block";
  return out;
}

ExpertWeights capture_expert_weights(const Capture& c) {
  return expert_weights_of(c.block, c.ep);
}

ExpertWeights expert_weights_of(const std::vector<CapturedNode>& nodes, std::int64_t ep) {
  ExpertWeights w;
  // Consumers, to follow a parameter through views and gathers to a batched GEMM.
  std::vector<std::vector<std::uint32_t>> consumers(nodes.size());
  for (std::uint32_t i = 0; i < nodes.size(); ++i)
    for (std::uint32_t j : nodes[i].inputs)
      if (j < nodes.size()) consumers[j].push_back(i);
  const auto reaches_batched_gemm = [&](std::uint32_t p) {
    std::vector<std::uint32_t> todo = {p};
    std::set<std::uint32_t> seen;
    while (!todo.empty()) {
      const std::uint32_t x = todo.back();
      todo.pop_back();
      for (std::uint32_t y : consumers[x]) {
        if (!seen.insert(y).second) continue;
        const std::string b = base_op(nodes[y].op);
        if (b == "bmm" || b == "baddbmm" || b == "_grouped_mm") return true;
        if (aten_class(nodes[y].op) == AtenClass::View || b == "index" || b == "gather" ||
            b == "index_select" || b == "embedding" || b == "_to_copy" || b == "clone")
          todo.push_back(y);
      }
    }
    return false;
  };
  for (std::uint32_t i = 0; i < nodes.size(); ++i) {
    const CapturedNode& d = nodes[i];
    if (d.kind != "placeholder" || d.param.empty() || d.shapes.empty() || d.shapes[0].size() != 3 ||
        d.shapes[0][0] * ep < 2 || !reaches_batched_gemm(i))
      continue;
    if (w.experts != 0 && w.experts != d.shapes[0][0]) continue;  // not the same experts
    w.experts = d.shapes[0][0];
    w.params.emplace_back(d.param, d.shapes[0]);
    w.weights_per_expert += static_cast<double>(d.shapes[0][1] * d.shapes[0][2]);
  }
  if (w.experts == 0) return w;
  // The routing's top-k: the one over the experts' dimension ([T, E] scores). Group-limited
  // routing (DeepSeek-V3's n_group / topk_group) first takes top-k's of each group's scores
  // ([T, g, E/g]) and then the best groups ([T, g]); those set the group keys, not the top-k.
  std::int64_t first = 0;
  const std::int64_t all = w.experts * ep;
  for (const CapturedNode& d : nodes) {
    if (d.kind != "call_function" || base_op(d.op) != "topk" || d.shapes.empty() ||
        d.shapes[0].empty() || d.inputs.empty() || nodes[d.inputs[0]].shapes.empty())
      continue;
    const std::vector<std::int64_t>& in = nodes[d.inputs[0]].shapes[0];
    const std::int64_t k = d.shapes[0].back();
    if (first == 0) first = k;
    if (in.empty()) continue;
    if (in.back() == all && w.topk == 0) {
      w.topk = k;
    } else if (in.size() >= 2 && in[in.size() - 2] > 1 && in[in.size() - 2] * in.back() == all) {
      w.groups = in[in.size() - 2];
    } else if (w.groups > 0 && in.back() == w.groups) {
      w.group_topk = k;
    }
  }
  if (w.topk == 0) w.topk = first;  // scores of another shape: the first top-k, as before
  if (w.group_topk == 0) w.groups = 0;
  return w;
}

double capture_block_parameters(const Capture& c) {
  double n = 0;
  std::set<std::string> seen;
  for (const CapturedNode& d : c.block)
    if (d.kind == "placeholder" && !d.param.empty() && !d.shapes.empty() &&
        seen.insert(d.param).second) {
      double e = 1;
      for (std::int64_t x : d.shapes[0]) e *= static_cast<double>(x);
      n += e;
    }
  return n;
}

bool capture_has_fused_attention(const Capture& c) {
  for (const CapturedNode& d : c.block) {
    const std::size_t q_at = is_backward_op(d.op) ? 1 : 0;
    if (aten_class(d.op) != AtenClass::Attention || d.inputs.size() <= q_at) continue;
    const CapturedNode& q = c.block[d.inputs[q_at]];
    if (!q.shapes.empty() && q.shapes[0].size() == 4) return true;
  }
  return false;
}

std::string TpPlan::style_of(const std::string& module) const {
  for (const auto& [pattern, style] : rules)
    if (matches(pattern, module))
      return style == "colwise" || style == "rowwise" ? style : std::string();
  return {};
}

bool TpPlan::shards() const {
  return std::any_of(rules.begin(), rules.end(),
                     [](const auto& r) { return r.second == "colwise" || r.second == "rowwise"; });
}

std::string tp_style(const std::string& name) {
  static const std::map<std::string, std::string> styles = {{"colwiseparallel", "colwise"},
                                                            {"float8colwiseparallel", "colwise"},
                                                            {"colwise", "colwise"},
                                                            {"rowwiseparallel", "rowwise"},
                                                            {"float8rowwiseparallel", "rowwise"},
                                                            {"rowwise", "rowwise"},
                                                            {"sequenceparallel", "sequence"},
                                                            {"sequence", "sequence"},
                                                            {"preparemoduleinput", "input"},
                                                            {"preparemoduleoutput", "input"},
                                                            {"preparefloat8moduleinput", "input"},
                                                            {"input", "input"}};
  std::string key = name.substr(0, name.find('('));  // "ColwiseParallel()" as written in Python
  std::erase_if(key, [](unsigned char ch) { return std::isspace(ch) != 0; });
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  const auto it = styles.find(key);
  return it == styles.end() ? std::string() : it->second;
}

std::string describe_tp_plan(const TpPlan& plan) {
  std::string out;
  std::size_t width = 0;
  for (const auto& r : plan.rules) width = std::max(width, r.first.size());
  for (const auto& [pattern, style] : plan.rules)
    out += fmt::format("  {:<{}}  {}\n", pattern, width, style);
  return out;
}

namespace {

/// The node of a graph's result (the output's first input): make_fx records the forward first,
/// so the forward's ops are the nodes up to it.
std::uint32_t result_of(const std::vector<CapturedNode>& nodes) {
  std::uint32_t result = static_cast<std::uint32_t>(nodes.size());
  for (const CapturedNode& d : nodes)
    if (d.kind == "output" && !d.inputs.empty()) result = d.inputs.front();
  return result;
}

/// Activations: where a column-parallel linear's output goes before the row-parallel one.
bool is_activation(const std::string& base) {
  static const std::set<std::string> act = {"gelu",       "silu",      "relu",          "sigmoid",
                                            "tanh",       "softplus",  "mish",          "elu",
                                            "leaky_relu", "hardswish", "hardsigmoid",   "glu",
                                            "_softmax",   "softmax",   "_safe_softmax", "relu_"};
  return act.count(base) > 0;
}

/// Reductions over the hidden dimension (norms): a tensor that reaches one is whole again.
bool is_norm_boundary(const std::string& base) {
  static const std::set<std::string> norm = {
      "native_layer_norm", "layer_norm", "rms_norm",          "_fused_rms_norm",  "mean",
      "var_mean",          "var",        "native_group_norm", "native_batch_norm"};
  return norm.count(base) > 0;
}

/// A module path with its numeric components (block and expert indices) as '*', relative to
/// the block list (`prefix`, e.g. "transformer.h.0."), so that one rule serves every block.
std::string rule_pattern(const std::string& module, const std::string& prefix) {
  std::string rel = module.rfind(prefix, 0) == 0 ? module.substr(prefix.size()) : module;
  std::string out;
  for (const std::string& part : split_path(rel)) {
    if (!out.empty()) out += '.';
    out += !part.empty() && part.find_first_not_of("0123456789") == std::string::npos ? "*" : part;
  }
  return out;
}

void add_rule(TpPlan& plan, const std::string& pattern, const std::string& style) {
  for (const auto& r : plan.rules)
    if (r.first == pattern) return;
  plan.rules.emplace_back(pattern, style);
}

/// The linears of a graph's forward: module path → its forward GEMM (the first GEMM reading one
/// of the module's 2-D parameters through views), in graph order.
std::vector<std::pair<std::string, std::uint32_t>> forward_linears(
    const std::vector<CapturedNode>& nodes) {
  std::vector<std::pair<std::string, std::uint32_t>> out;
  std::set<std::string> seen;
  const std::uint32_t result = result_of(nodes);
  for (std::uint32_t i = 0; i < nodes.size() && i <= result; ++i) {
    const CapturedNode& d = nodes[i];
    if (d.kind != "call_function" || aten_class(d.op) != AtenClass::Gemm) continue;
    for (std::uint32_t j : d.inputs) {
      const CapturedNode& w = nodes[view_root(nodes, j)];
      if (w.kind == "placeholder" && !w.param.empty() && !w.shapes.empty() &&
          w.shapes[0].size() == 2) {
        // A tied weight is read by another module's GEMM: name the GEMM's own module.
        const std::string module = d.module.empty() ? w.module : d.module;
        if (seen.insert(module).second) out.emplace_back(module, i);
        break;
      }
    }
  }
  return out;
}

/// Multi-latent attention's shapes (DeepSeek-V2/V3, `modeling_deepseek_v3.py`) from the
/// attention's column-wise up projections and its row-wise output projection: the query's
/// (heads × (qk_head_dim + rope) wide, from the query latent or the hidden states), the keys'
/// and values' (heads × (qk_head_dim + v_head_dim) wide, from the KV latent), the output's
/// (heads × v_head_dim in). Shapes that do not fit this leave the attention unread (mla
/// unknown): the keys the capture cannot tell are then the experiment's.
void mla_shapes(CaptureShapes& out, const std::vector<std::string>& up, const std::string& o_proj,
                std::map<std::string, std::int64_t>& in_dim,
                std::map<std::string, std::int64_t>& out_dim) {
  out.mla.reset();
  if (up.size() != 2 || in_dim[o_proj] % out.heads != 0) return;
  const std::int64_t q_head = out.head_dim;  // the scores' per-head width: nope + rope
  const std::int64_t v_head = in_dim[o_proj] / out.heads;
  const bool q_first = out_dim[up[0]] == out.heads * q_head;
  const std::string& q = q_first ? up[0] : up[1];
  const std::string& kv = q_first ? up[1] : up[0];
  if (out_dim[q] != out.heads * q_head || out_dim[kv] % out.heads != 0) return;
  const std::int64_t nope = out_dim[kv] / out.heads - v_head;
  if (nope <= 0 || nope > q_head || in_dim[kv] == out.hidden) return;
  out.mla = true;
  out.q_lora_rank = in_dim[q] == out.hidden ? 0 : in_dim[q];
  out.kv_lora_rank = in_dim[kv];
  out.qk_head_dim = nope;
  out.qk_pos_emb_head_dim = q_head - nope;
  out.v_head_dim = v_head;
  out.query_groups = out.heads;  // every head its own keys and values, up-projected
  out.head_dim = 0;              // kv_channels does not apply: the three widths above do
}

}  // namespace

CaptureShapes capture_shapes(const Capture& c) {
  CaptureShapes out;
  const std::vector<CapturedNode>& nodes = c.block;
  // The hidden states: the first input that is neither a parameter nor a buffer ([b, s, h], or
  // [tokens, h] where the forward takes one flattened sequence).
  for (const CapturedNode& n : nodes)
    if (n.kind == "placeholder" && n.param.empty() && n.buffer.empty() && !n.shapes.empty() &&
        n.shapes[0].size() >= 2) {
      out.hidden = n.shapes[0].back();
      break;
    }
  if (const ExpertWeights ew = capture_expert_weights(c); ew.experts > 0) {
    out.experts = ew.experts;
    out.topk = ew.topk;
    out.router_groups = ew.groups;
    out.router_group_topk = ew.group_topk;
    // The expert MLP's width: what the weight writing the hidden size reads ([E, h, f]); its
    // up projections ([E, ·, h]) are gated when they write twice that width.
    std::size_t down = ew.params.size();
    for (std::size_t i = 0; i < ew.params.size(); ++i) {
      const auto& shape = ew.params[i].second;
      if (shape[1] == out.hidden && (down == ew.params.size() || shape[2] != out.hidden)) down = i;
    }
    std::int64_t up = 0;
    for (std::size_t i = 0; i < ew.params.size(); ++i)
      if (i != down && ew.params[i].second[2] == out.hidden) up += ew.params[i].second[1];
    if (down < ew.params.size()) {
      out.expert_ffn = ew.params[down].second[2];
      if (up > 0) out.gated = up == 2 * out.expert_ffn;
    }
  }
  const std::uint32_t result = result_of(nodes);
  // Attention: the first forward score computation.
  for (std::uint32_t i = 0; i < nodes.size() && i <= result && out.heads == 0; ++i) {
    const CapturedNode& d = nodes[i];
    if (d.kind != "call_function" || d.inputs.empty()) continue;
    const std::string b = base_op(d.op);
    if (aten_class(d.op) == AtenClass::Attention && !is_backward_op(d.op)) {
      const auto& q = nodes[d.inputs[0]].shapes;
      if (!q.empty() && q[0].size() == 4) {
        out.heads = q[0][1];
        out.head_dim = q[0][3];
        if (d.inputs.size() > 1 && !nodes[d.inputs[1]].shapes.empty() &&
            nodes[d.inputs[1]].shapes[0].size() == 4)
          out.query_groups = nodes[d.inputs[1]].shapes[0][1];
      }
    } else if ((b == "bmm" || b == "baddbmm") && c.batch > 0 && d.inputs.size() >= 2) {
      const auto& a = nodes[d.inputs[d.inputs.size() - 2]].shapes;
      if (!a.empty() && a[0].size() == 3 && a[0][0] % c.batch == 0 && a[0][1] == c.seq) {
        out.heads = a[0][0] / c.batch;
        out.head_dim = a[0][2];
      }
    }
  }
  // The linears by the inferred plan: column-wise ones grouped by the row-wise one they feed.
  const TpPlan plan = infer_tp_plan(c);
  std::map<std::string, std::int64_t> out_dim, in_dim;
  std::map<std::string, bool> biased;
  const auto linears = forward_linears(nodes);
  for (const auto& [module, i] : linears) {
    for (std::uint32_t j : nodes[i].inputs) {
      const CapturedNode& w = nodes[view_root(nodes, j)];
      if (w.kind == "placeholder" && !w.param.empty() && w.shapes.size() == 1 &&
          w.shapes[0].size() == 2) {
        out_dim[module] = w.shapes[0][0];
        in_dim[module] = w.shapes[0][1];
      }
    }
    biased[module] = base_op(nodes[i].op) == "addmm" || base_op(nodes[i].op) == "baddbmm";
  }
  if (!linears.empty())
    out.bias = std::any_of(biased.begin(), biased.end(), [](const auto& b) { return b.second; });
  if (experts_in(nodes) == 0 && out.head_dim > 0) {
    // Column-wise linears in graph order up to each row-wise one: the attention's projections
    // before its output projection, the MLP's up projections before its down projection.
    std::int64_t sum = 0;
    int pair = 0;
    std::vector<std::string> up;  // the attention's column-wise projections
    for (const auto& [module, i] : linears) {
      const std::string style = plan.style_of(module);
      if (style == "colwise") {
        sum += out_dim[module];
        if (pair == 0) up.push_back(module);
      } else if (style == "rowwise") {
        if (pair == 0 && out.heads > 0) out.mla = false;
        if (pair == 0 && out.heads > 0 &&
            std::any_of(up.begin(), up.end(),
                        [&](const std::string& u) { return in_dim[u] != out.hidden; })) {
          // Up projections from latents: multi-latent attention.
          mla_shapes(out, up, module, in_dim, out_dim);
        } else if (pair == 0 && out.heads > 0 && sum > out.heads * out.head_dim) {
          // From the projections' widths, before the fused kernel's key heads: a model that
          // repeats its KV heads before scaled_dot_product_attention (gpt-fast's
          // repeat_interleave) hands the kernel as many key heads as query heads.
          out.query_groups = (sum / out.head_dim - out.heads) / 2;
        }
        if (pair == 1) {
          // Beside 3-D experts, a dense MLP is the shared experts' (DeepSeek's, Qwen2-MoE's).
          (out.experts > 0 ? out.shared_ffn : out.ffn) = in_dim[module];
          // Gated when the up projections write twice the down projection's input: w1 and w3
          // side by side, or one fused w13 (Megatron's layout) whose output is split.
          if (sum == 2 * in_dim[module])
            out.gated = true;
          else if (sum == in_dim[module])
            out.gated = false;
        }
        ++pair;
        sum = 0;
      }
    }
  }
  int lookups = 0;
  const std::uint32_t outer_result = result_of(c.outer);
  for (std::uint32_t i = 0; i < c.outer.size() && i <= outer_result; ++i)
    lookups += c.outer[i].kind == "call_function" && base_op(c.outer[i].op) == "embedding";
  if (!c.outer.empty()) out.learned_positions = lookups >= 2;
  return out;
}

TpPlan capture_default_plan(const Capture& c, const std::string& path) {
  if (c.file_tp_plan.empty()) return infer_tp_plan(c);
  TpPlan plan;
  for (const auto& [pattern, given] : c.file_tp_plan) {
    const std::string style = tp_style(given);
    if (style.empty())
      throw_input(
          "{}: the model file's tensor-parallel plan maps '{}' to '{}', not a "
          "parallelize_module style",
          path, pattern, given);
    plan.rules.emplace_back(pattern, style);
  }
  plan.source = "the model file";
  return plan;
}

std::vector<std::pair<std::string, std::string>> planned_linears(const Capture& c,
                                                                 const TpPlan& plan) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [module, i] : forward_linears(c.block))
    out.emplace_back(module, plan.style_of(module));
  return out;
}

void check_tp_plan(const Capture& c, const TpPlan& plan, std::int64_t tp,
                   const std::string& capture_path) {
  if (tp <= 1) return;
  const auto linears = planned_linears(c, plan);
  if (std::any_of(linears.begin(), linears.end(), [](const auto& l) { return !l.second.empty(); }))
    return;
  std::string names;
  for (std::size_t i = 0; i < linears.size() && i < 4; ++i)
    names += (i > 0 ? ", " : "") + linears[i].first;
  if (linears.size() > 4) names += ", ...";
  throw_input(
      "{}: tensor parallelism {} but the plan ({}) shards none of the block's {} linear layers "
      "({}); give model.pytorch_tp_plan (docs/flint.md \"Tensor-parallel plans\")",
      capture_path, tp, plan.source.empty() ? "given" : plan.source, linears.size(), names);
}

TpPlan infer_tp_plan(const Capture& c) {
  TpPlan plan;
  plan.source = "inferred from the capture";
  const std::vector<CapturedNode>& nodes = c.block;
  const std::string prefix = c.blocks_attr + ".0.";
  const auto linears = forward_linears(nodes);
  std::map<std::uint32_t, std::string> linear_at;  // forward GEMM node → module
  for (const auto& [module, i] : linears) linear_at.emplace(i, module);
  std::vector<std::vector<std::uint32_t>> consumers(nodes.size());
  for (std::uint32_t i = 0; i < nodes.size(); ++i)
    for (std::uint32_t j : nodes[i].inputs) consumers[j].push_back(i);
  const std::uint32_t result = result_of(nodes);
  std::map<std::string, std::string> style;
  std::map<std::string, std::set<std::string>> next_of;
  for (const auto& [module, g] : linears) {
    // From the linear's output through non-linear ops (not through a norm, an integer tensor —
    // routing indices — or the backward): the next linears, and whether an attention or an
    // activation lies on the way.
    bool nonlinear = false;
    std::set<std::string> next;
    std::vector<std::uint32_t> stack(consumers[g].begin(), consumers[g].end());
    std::set<std::uint32_t> visited;
    while (!stack.empty()) {
      const std::uint32_t i = stack.back();
      stack.pop_back();
      if (i > result || !visited.insert(i).second) continue;
      const CapturedNode& d = nodes[i];
      if (d.kind != "call_function") continue;
      if (const auto l = linear_at.find(i); l != linear_at.end()) {
        next.insert(l->second);
        continue;
      }
      const std::string b = base_op(d.op);
      const std::string dt = dtype_of(d);
      if (is_backward_op(d.op) || is_norm_boundary(b) ||
          (!dt.empty() && dt.find("float") == std::string::npos && dt != "half"))
        continue;
      if (is_activation(b) || aten_class(d.op) == AtenClass::Attention ||
          (aten_class(d.op) == AtenClass::Gemm && (b == "bmm" || b == "baddbmm")))
        nonlinear = true;
      for (std::uint32_t k : consumers[i]) stack.push_back(k);
    }
    next_of[module] = next;
    if (nonlinear && !next.empty() && !style.count(module)) {
      style[module] = "colwise";
      for (const std::string& r : next)
        if (!style.count(r)) style[r] = "rowwise";
    }
  }
  // Siblings: a linear whose next linears are all row-wise (a SwiGLU's up projection beside its
  // gate, k and v beside q) is column-wise too.
  for (const auto& [module, g] : linears) {
    const auto& next = next_of[module];
    if (style.count(module) || next.empty()) continue;
    if (std::all_of(next.begin(), next.end(), [&](const std::string& r) {
          const auto it = style.find(r);
          return it != style.end() && it->second == "rowwise";
        }))
      style[module] = "colwise";
  }
  for (const auto& [module, g] : linears)
    if (const auto it = style.find(module); it != style.end())
      add_rule(plan, rule_pattern(module, prefix), it->second);
  // The outer graph: the embedding vocabulary-parallel, the linear producing the logits
  // column-wise (loss parallelism), as torchtitan's plans do.
  for (const CapturedNode& d : c.outer)
    if (d.kind == "call_function" && base_op(d.op) == "embedding" && !d.inputs.empty()) {
      const CapturedNode& w = c.outer[view_root(c.outer, d.inputs.front())];
      if (w.kind == "placeholder" && !w.param.empty()) add_rule(plan, w.module, "rowwise");
      break;
    }
  const auto outer_linears = forward_linears(c.outer);
  if (!outer_linears.empty()) {
    // The last forward linear before the loss: the head.
    add_rule(plan, outer_linears.back().first, "colwise");
  }
  return plan;
}

TpPlan llama_tp_plan() {
  // torchtitan's Llama plan (parallelize_llama.py): q/k/v and w1/w3 column-wise, wo and w2
  // row-wise; Mixtral's experts likewise, the router replicated.
  TpPlan p;
  // The fused wqkv and w13 of `fused_projections` column-wise too.
  // The outer graph: torchtitan's vocabulary-parallel tok_embeddings (RowwiseParallel) and
  // output (ColwiseParallel, with loss parallelism).
  p.rules = {{"attention.wq", "colwise"},    {"attention.wk", "colwise"},
             {"attention.wv", "colwise"},    {"attention.wqkv", "colwise"},
             {"attention.wo", "rowwise"},    {"feed_forward.w1", "colwise"},
             {"feed_forward.w3", "colwise"}, {"feed_forward.w13", "colwise"},
             {"feed_forward.w2", "rowwise"}, {"experts.*.w1", "colwise"},
             {"experts.*.w3", "colwise"},    {"experts.*.w2", "rowwise"},
             {"tok_embeddings", "rowwise"},  {"output", "colwise"}};
  p.source = "model.tp_plan: llama";
  return p;
}

TpPlan gpt_tp_plan() {
  TpPlan p;
  p.rules = {{"attn.c_attn", "colwise"}, {"attn.c_proj", "rowwise"}, {"mlp.c_fc", "colwise"},
             {"mlp.c_proj", "rowwise"},  {"wte", "rowwise"},         {"lm_head", "colwise"}};
  p.source = "model.tp_plan: gpt";
  return p;
}

std::optional<graph::Op> eager_aten_op(const std::string& op, const std::vector<AtenTensor>& in,
                                       const std::vector<AtenTensor>& out, bool causal) {
  const AtenClass cls = aten_class(op);
  const std::string b = base_op(op);
  // (An op returning nothing still launches: _foreach_*_ and _fused_adamw_ update in place.)
  if (cls == AtenClass::View || cls == AtenClass::Collective || op.rfind("profiler.", 0) == 0 ||
      b == "_local_scalar_dense" || (in.empty() && out.empty()))
    return std::nullopt;
  const auto bytes = [&](const std::vector<AtenTensor>& ts) {
    double n = 0;
    for (const AtenTensor& t : ts) n += detail::numel(t.shape) * detail::dtype_bytes(t.dtype);
    return n;
  };
  graph::Op o;
  o.phase = graph::Phase::Forward;
  o.mem_bytes = bytes(in) + bytes(out);
  const auto dim = [](double x) { return static_cast<std::uint32_t>(std::max(1.0, x)); };
  if (cls == AtenClass::Gemm && in.size() >= 2 && !out.empty() && out[0].shape.size() >= 2) {
    // The row operand: addmm's and baddbmm's second input (after the bias), else the first
    // (mm, bmm, _scaled_mm's a before its scales, mm.out's before its out=, _grouped_mm's).
    const auto& a = in[b == "addmm" || b == "baddbmm" ? 1 : 0].shape;
    const auto& y = out[0].shape;
    double m = static_cast<double>(y[y.size() - 2]) *
               (y.size() == 3 && b != "_grouped_mm" ? static_cast<double>(y[0]) : 1.0);
    if (b == "_grouped_mm" && a.size() == 2) m = static_cast<double>(a[0]);
    const double n = static_cast<double>(y.back()),
                 k = a.empty() ? 1 : static_cast<double>(a.back());
    o.kind = graph::OpKind::Gemm;
    o.name = graph::OpName::AtenGemm;
    o.shape = {dim(m), dim(n), dim(k)};
    o.flops = 2 * m * n * k;
    return o;
  }
  const std::size_t q_at = cls == AtenClass::Attention && is_backward_op(op) ? 1 : 0;
  if (cls == AtenClass::Attention && in.size() > q_at && in[q_at].shape.size() == 4) {
    const auto& q = in[q_at].shape;
    const double sk = in.size() > q_at + 1 && in[q_at + 1].shape.size() == 4
                          ? static_cast<double>(in[q_at + 1].shape[2])
                          : static_cast<double>(q[2]);
    const double bh = static_cast<double>(q[0] * q[1]);
    o.kind = graph::OpKind::Attention;
    o.name = graph::OpName::Attention;
    o.shape = {dim(bh), dim(static_cast<double>(q[2])), dim(static_cast<double>(q[3]))};
    o.flops = (q_at == 1 ? 2.5 : 1.0) * (causal ? 0.5 : 1.0) * 4 * bh * static_cast<double>(q[2]) *
              sk * static_cast<double>(q[3]);
    return o;
  }
  o.kind = graph::OpKind::Elementwise;
  o.name = graph::OpName::AtenOp;
  return o;
}

AtenClass aten_class(const std::string& op) {
  if (op.rfind("_c10d_functional.", 0) == 0)
    return op.rfind("_c10d_functional.wait_tensor", 0) == 0 ? AtenClass::View
                                                            : AtenClass::Collective;
  // transformers' AllToAllEP exchanges its token counts with an in-place c10d all-to-all.
  if (op.rfind("c10d.alltoall_base_", 0) == 0) return AtenClass::Collective;
  static const std::set<std::string> gemm = {"mm",         "addmm",  "bmm",        "baddbmm",
                                             "_scaled_mm", "matmul", "_grouped_mm"};
  static const std::set<std::string> attention = {
      "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
      "_scaled_dot_product_cudnn_attention", "_flash_attention_forward",
      "_flash_attention_backward", "_scaled_dot_product_flash_attention_backward",
      "_scaled_dot_product_efficient_attention_backward",
      "_scaled_dot_product_cudnn_attention_backward",
      // PyTorch ≥ 2.2 on CPU tensors (what a capture traces with): the flash branch's own ops.
      "_scaled_dot_product_flash_attention_for_cpu",
      "_scaled_dot_product_flash_attention_for_cpu_backward",
      "_scaled_dot_product_fused_attention_overrideable",
      "_scaled_dot_product_fused_attention_overrideable_backward"};
  static const std::set<std::string> view = {"t",
                                             "view",
                                             "_reshape_alias",
                                             "_unsafe_view",
                                             "transpose",
                                             "expand",
                                             "permute",
                                             "detach",
                                             "slice",
                                             "unsqueeze",
                                             "squeeze",
                                             "alias",
                                             "select",
                                             "split",
                                             "split_with_sizes",
                                             "chunk",
                                             "reshape",
                                             "unbind",
                                             "as_strided",
                                             "lift_fresh_copy",
                                             "getitem",
                                             "<built-in function getitem>",
                                             "view_as",
                                             "expand_as",
                                             "_to_copy_view",
                                             "is_same_size",
                                             "sym_size",
                                             "sym_numel",
                                             "size"};
  static const std::set<std::string> memory = {"add",
                                               "sub",
                                               "mul",
                                               "div",
                                               "pow",
                                               "rsqrt",
                                               "sqrt",
                                               "exp",
                                               "log",
                                               "neg",
                                               "tanh",
                                               "sigmoid",
                                               "silu",
                                               "gelu",
                                               "relu",
                                               "mean",
                                               "sum",
                                               "amax",
                                               "max",
                                               "min",
                                               "_softmax",
                                               "_safe_softmax",  // SDPA's math path, 2.5+
                                               "bernoulli",
                                               "_log_softmax",
                                               "_softmax_backward_data",
                                               "_log_softmax_backward_data",
                                               "native_layer_norm",
                                               "native_layer_norm_backward",
                                               "nll_loss_forward",
                                               "nll_loss_backward",
                                               "embedding",
                                               "embedding_dense_backward",
                                               "cat",
                                               "clone",
                                               "copy_",
                                               "_to_copy",
                                               "zeros_like",
                                               "ones_like",
                                               "full",
                                               "zeros",
                                               "ones",
                                               "empty",
                                               "new_zeros",
                                               "new_empty",
                                               "fill_",
                                               "masked_fill",
                                               "where",
                                               "gelu_backward",
                                               "silu_backward",
                                               "tanh_backward",
                                               "sigmoid_backward",
                                               "threshold_backward",
                                               "slice_backward",
                                               "select_backward",
                                               "cos",
                                               "sin",
                                               "arange",
                                               "reciprocal",
                                               "triu",
                                               "tril",
                                               "topk",
                                               "index",
                                               "index_put",
                                               "scatter",
                                               "gather",
                                               "scatter_add",
                                               "eq",
                                               "ne",
                                               "lt",
                                               "gt",
                                               "bitwise_not",
                                               "logical_not",
                                               "rsub",
                                               "outer",
                                               "sort",
                                               "cumsum",
                                               "var_mean",
                                               "rand_like",
                                               "native_dropout",
                                               "native_dropout_backward",
                                               "pow_",
                                               "add_",
                                               "mul_",
                                               "div_",
                                               "new_ones",
                                               "scalar_tensor",
                                               "_unsafe_index",
                                               "index_select",
                                               "masked_fill_",
                                               "expand_copy",
                                               "constant_pad_nd",
                                               "fill",
                                               "zero_",
                                               "empty_like",
                                               "empty_strided",
                                               "new_empty_strided",
                                               "full_like",
                                               "rand",
                                               "randn"};
  const std::string b = base_op(op);
  if (gemm.count(b)) return AtenClass::Gemm;
  if (attention.count(b)) return AtenClass::Attention;
  if (view.count(b) || view.count(op)) return AtenClass::View;
  if (memory.count(b)) return AtenClass::MemoryBound;
  // In-place variants (add_, sub_, …) of the memory-bound ops.
  if (b.size() > 1 && b.back() == '_' && memory.count(b.substr(0, b.size() - 1)))
    return AtenClass::MemoryBound;
  return AtenClass::Unknown;
}

std::optional<bool> capture_ties_embeddings(const Capture& c) {
  const std::vector<CapturedNode>& nodes = c.outer;
  std::set<std::uint32_t> tables;  // parameters an embedding lookup reads as its table
  for (const CapturedNode& d : nodes)
    if (d.kind == "call_function" && base_op(d.op) == "embedding" && !d.inputs.empty() &&
        d.inputs.front() < nodes.size() && !nodes[d.inputs.front()].param.empty())
      tables.insert(d.inputs.front());
  if (tables.empty()) return std::nullopt;
  for (const CapturedNode& d : nodes) {
    if (d.kind != "call_function" || aten_class(d.op) != AtenClass::Gemm) continue;
    for (std::uint32_t j : d.inputs)
      if (j < nodes.size() && tables.count(view_root(nodes, j))) return true;
  }
  return false;
}

}  // namespace scalescope::workload
