#include "io/capture_h5.hpp"

#include <fmt/format.h>

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/h5.hpp"

namespace scalescope::io {

namespace {

/// Bounds on what a capture holds (issue 38): a tensor dimension at most 2^40 and a tensor at
/// most 2^50 elements (io/graph_h5.cpp's bound on bytes); the sizes in /meta as below.
constexpr std::int64_t kMaxDim = std::int64_t{1} << 40;
constexpr double kMaxElements = 1125899906842624.0;  // 2^50

/// A /meta count, in [1, `max`].
std::int64_t meta_count(const h5::Group& meta, const char* key, std::int64_t max) {
  const auto v = meta.attribute<std::int64_t>(key);
  if (v < 1 || v > max) meta.fail(fmt::format("{} = {} is outside [1, {}]", key, v, max));
  return v;
}

std::vector<workload::CapturedNode> read_nodes(const h5::Group& g, const std::string& path) {
  const std::vector<std::uint8_t> bytes = g.read<std::uint8_t>("nodes_json");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::exception& e) {
    throw_input("{}: {}/nodes_json: malformed JSON: {}", path, g.path(), e.what());
  }
  if (!j.is_array()) throw_input("{}: {}/nodes_json: expected a list of nodes", path, g.path());
  std::vector<workload::CapturedNode> out;
  out.reserve(j.size());
  try {
    for (const auto& n : j) {
      workload::CapturedNode d;
      d.name = n.at("name").get<std::string>();
      d.kind = n.at("kind").get<std::string>();
      d.op = n.at("op").get<std::string>();
      d.inputs = n.at("inputs").get<std::vector<std::uint32_t>>();
      d.shapes = n.at("shapes").get<std::vector<std::vector<std::int64_t>>>();
      for (const auto& shape : d.shapes) {
        double numel = 1;
        for (std::int64_t x : shape) {
          if (x < 0 || x > kMaxDim)
            throw_input("{}: {}/nodes_json: node {} ('{}'): dimension {} is outside [0, 2^40]",
                        path, g.path(), out.size(), d.name, x);
          numel *= static_cast<double>(x);
        }
        if (numel > kMaxElements)
          throw_input("{}: {}/nodes_json: node {} ('{}'): {:.3g} elements is beyond 2^50", path,
                      g.path(), out.size(), d.name, numel);
      }
      d.dtypes = n.at("dtypes").get<std::vector<std::string>>();
      d.module = n.value("module", std::string());
      d.param = n.value("param", std::string());
      d.buffer = n.value("buffer", std::string());
      d.mask = n.value("mask", std::string());
      d.causal = n.value("causal", false);
      d.group_size = n.value("group_size", std::int64_t{0});
      d.kernel = n.value("kernel", workload::CapturedNode::kKernelUnread);
      if (n.contains("kernel") &&
          (d.kernel < workload::CapturedNode::kNoKernel || d.kernel > (std::int64_t{1} << 31)))
        throw_input("{}: {}/nodes_json: node {} ('{}'): kernel {} is outside [-1, 2^31]", path,
                    g.path(), out.size(), d.name, d.kernel);
      if (d.group_size < 0 || d.group_size > (std::int64_t{1} << 24))
        throw_input("{}: {}/nodes_json: node {} ('{}'): group_size {} is outside [0, 2^24]", path,
                    g.path(), out.size(), d.name, d.group_size);
      for (std::uint32_t i : d.inputs)
        if (i >= out.size())
          throw_input("{}: {}/nodes_json: node {} ('{}') reads node {}, which does not precede it",
                      path, g.path(), out.size(), d.name, i);
      out.push_back(std::move(d));
    }
  } catch (const nlohmann::json::exception& e) {
    throw_input("{}: {}/nodes_json: node {}: {}", path, g.path(), out.size(), e.what());
  }
  return out;
}

}  // namespace

workload::Capture read_capture_h5(const std::string& path) {
  h5::silence_errors();
  const h5::File file = h5::File::open(path);
  const h5::Group root = file.root();
  const h5::Group meta = root.open_group("meta");
  if (meta.attribute<std::int64_t>("format_version") != 1)
    meta.fail("format_version is not 1 (this build reads capture format 1)");
  workload::Capture c;
  c.model = meta.string_attribute("model");
  c.num_blocks = meta_count(meta, "num_blocks", 1 << 16);
  c.batch = meta_count(meta, "batch", 1 << 20);
  c.seq = meta_count(meta, "seq", 1 << 24);
  c.vocab_size = meta_count(meta, "vocab_size", std::int64_t{1} << 31);
  c.dtype = meta.string_attribute("dtype");
  c.torch_version = meta.string_attribute("torch_version");
  c.blocks_attr = meta.string_attribute("blocks_attr");
  if (meta.has_attribute("blocks_differ")) c.blocks_differ = meta.string_attribute("blocks_differ");
  if (meta.has_attribute("loss")) c.loss = meta.string_attribute("loss");
  if (meta.has_attribute("fusion_json")) {
    // {"block": {"source": "inductor", "kernels": [f, b]} or {"source": "re-derived", "why":
    // ...}, "outer": ...} (capture.py's inductor_kernels).
    nlohmann::json f;
    try {
      f = nlohmann::json::parse(meta.string_attribute("fusion_json"));
    } catch (const nlohmann::json::exception& e) {
      throw_input("{}: /meta fusion_json: malformed JSON: {}", path, e.what());
    }
    const auto said = [&](const char* graph) -> std::string {
      if (!f.is_object() || !f.contains(graph)) return "";
      const auto& g = f.at(graph);
      const std::string source = g.is_object() ? g.value("source", std::string()) : "";
      if (source == "inductor") return "inductor";
      if (source == "re-derived") return "re-derived: " + g.value("why", std::string());
      throw_input("{}: /meta fusion_json: {}.source '{}' is not inductor or re-derived", path,
                  graph, source);
    };
    c.block_fusion = said("block");
    c.outer_fusion = said("outer");
  }
  if (meta.has_attribute("parallelized")) {
    c.parallelized = meta.string_attribute("parallelized");
    if (c.parallelized != "dtensor")
      throw_input("{}: /meta parallelized '{}' is not 'dtensor'", path, c.parallelized);
    c.tp = meta_count(meta, "tp", 1 << 16);
    if (meta.has_attribute("tp_plan_source"))
      c.plan_source = meta.string_attribute("tp_plan_source");
    c.world = meta_count(meta, "world", std::int64_t{1} << 24);
    c.sp = meta.attribute<std::int64_t>("sp") != 0;
    if (meta.has_attribute("ep")) c.ep = meta_count(meta, "ep", 1 << 16);
    if (c.world % c.tp != 0 || c.world % c.ep != 0 || (c.ep > 1 && c.ep % c.tp != 0))
      throw_input(
          "{}: /meta world {}, tp {} and ep {} do not nest (ep a multiple of tp, both "
          "dividing world)",
          path, c.world, c.tp, c.ep);
    c.block_parameters = static_cast<double>(meta.attribute<std::int64_t>("block_parameters"));
    if (c.block_parameters <= 0 || c.block_parameters > 1e15)
      throw_input("{}: /meta block_parameters out of range", path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(meta.string_attribute("shapes_json"));
    } catch (const nlohmann::json::exception& e) {
      throw_input("{}: /meta shapes_json: malformed JSON: {}", path, e.what());
    }
    if (!j.is_object()) throw_input("{}: /meta shapes_json: expected a mapping", path);
    // The model keys a DTensor capture's config gives (io/config reads them as these types).
    static const std::set<std::string> counts = {"hidden_size",
                                                 "num_attention_heads",
                                                 "num_query_groups",
                                                 "kv_channels",
                                                 "ffn_hidden_size",
                                                 "num_layers",
                                                 "vocab_size",
                                                 "seq_length",
                                                 "num_experts",
                                                 "moe_router_topk",
                                                 "moe_ffn_hidden_size",
                                                 "moe_shared_expert_intermediate_size",
                                                 "moe_router_num_groups",
                                                 "moe_router_group_topk",
                                                 "kv_lora_rank",
                                                 "qk_head_dim",
                                                 "qk_pos_emb_head_dim",
                                                 "v_head_dim"};
    static const std::set<std::string> flags = {"gated_linear_unit", "add_bias_linear",
                                                "untie_embeddings", "multi_latent_attention"};
    for (const auto& [key, value] : j.items()) {
      if (counts.count(key)) {
        if (!value.is_number_integer() || value.get<std::int64_t>() < 1 ||
            value.get<std::int64_t>() > kMaxDim)
          throw_input("{}: /meta shapes_json: '{}' is {}, not an integer in [1, 2^40]", path, key,
                      value.dump());
      } else if (key == "q_lora_rank") {  // 0: queries straight from the hidden states
        if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
            value.get<std::int64_t>() > kMaxDim)
          throw_input("{}: /meta shapes_json: 'q_lora_rank' is {}, not an integer in [0, 2^40]",
                      path, value.dump());
      } else if (flags.count(key)) {
        if (!value.is_boolean())
          throw_input("{}: /meta shapes_json: '{}' is {}, not true or false", path, key,
                      value.dump());
      } else if (key == "position_embedding_type") {
        if (value != "rope" && value != "learned_absolute")
          throw_input(
              "{}: /meta shapes_json: position_embedding_type {} is not rope or "
              "learned_absolute",
              path, value.dump());
      } else {
        throw_input("{}: /meta shapes_json: unknown key '{}'", path, key);
      }
      c.shapes[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
    if (meta.has_attribute("fsdp_json")) {
      try {
        const auto f = nlohmann::json::parse(meta.string_attribute("fsdp_json"));
        c.fsdp_shard = f.at("shard").get<std::int64_t>();
        c.fsdp_reshard = f.at("reshard_after_forward").get<bool>();
        c.fsdp_all_gather_bytes = f.at("all_gather_bytes").get<double>();
        c.fsdp_reduce_scatter_bytes = f.at("reduce_scatter_bytes").get<double>();
      } catch (const nlohmann::json::exception& e) {
        throw_input("{}: /meta fsdp_json: {}", path, e.what());
      }
      if (c.fsdp_shard < 1 || c.fsdp_shard > c.world || c.fsdp_all_gather_bytes <= 0 ||
          c.fsdp_all_gather_bytes > 1e15 || c.fsdp_reduce_scatter_bytes <= 0 ||
          c.fsdp_reduce_scatter_bytes > 1e15)
        throw_input("{}: /meta fsdp_json: out of range", path);
    }
  }
  // A plan the model file declares (capture.py: a dict of parallelize_module styles).
  if (meta.has_attribute("tp_plan")) {
    const std::string text = meta.string_attribute("tp_plan");
    nlohmann::ordered_json j;  // in the file's order: the first rule that matches applies
    try {
      j = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw_input("{}: /meta tp_plan: malformed JSON: {}", path, e.what());
    }
    if (!j.is_object()) throw_input("{}: /meta tp_plan: expected a mapping", path);
    for (const auto& [pattern, style] : j.items()) {
      if (!style.is_string())
        throw_input("{}: /meta tp_plan: '{}': expected a style name", path, pattern);
      c.file_tp_plan.emplace_back(pattern, style.get<std::string>());
    }
  }
  c.block = read_nodes(root.open_group("block"), path);
  c.outer = read_nodes(root.open_group("outer"), path);
  return c;
}

namespace {

/// GEMM FLOPs of a captured graph's mm / addmm / bmm / baddbmm nodes: 2 · numel(A) · n, with A
/// [..., m, k] and B [..., k, n] (the last two inputs; addmm's first is the bias).
double gemm_flops(const std::vector<workload::CapturedNode>& nodes) {
  double total = 0;
  for (const workload::CapturedNode& d : nodes) {
    if (d.kind != "call_function" || d.inputs.size() < 2) continue;
    const std::string b = d.op.substr(0, d.op.find('.'));
    const bool grouped = b == "_grouped_mm";  // (a, b, offsets)
    if (b != "mm" && b != "addmm" && b != "bmm" && b != "baddbmm" && !grouped) continue;
    const auto& a = nodes[d.inputs[grouped ? 0 : d.inputs.size() - 2]].shapes;
    const auto& w = nodes[d.inputs[grouped ? 1 : d.inputs.size() - 1]].shapes;
    if (a.empty() || w.empty() || w[0].empty()) continue;
    double numel = 1;
    for (std::int64_t x : a[0]) numel *= static_cast<double>(x);
    total += 2 * numel * static_cast<double>(w[0].back());
  }
  return total;
}

/// Parameters read by GEMMs (through views and casts: DeepSeek's router runs in fp32): the N
/// of 6·N·tokens, each counted once.
double gemm_weights(const std::vector<workload::CapturedNode>& nodes) {
  std::set<std::uint32_t> seen;
  double n = 0;
  for (const workload::CapturedNode& d : nodes) {
    if (d.kind != "call_function" || workload::aten_class(d.op) != workload::AtenClass::Gemm)
      continue;
    for (std::uint32_t j : d.inputs) {
      while ((workload::aten_class(nodes[j].op) == workload::AtenClass::View ||
              nodes[j].op.rfind("_to_copy", 0) == 0) &&
             nodes[j].kind == "call_function" && !nodes[j].inputs.empty())
        j = nodes[j].inputs.front();
      const workload::CapturedNode& p = nodes[j];
      if (p.kind == "placeholder" && !p.param.empty() && !p.shapes.empty() &&
          p.shapes[0].size() == 2 && seen.insert(j).second)
        n += static_cast<double>(p.shapes[0][0] * p.shapes[0][1]);
    }
  }
  return n;
}

}  // namespace

std::string format_capture_summary(const workload::Capture& c, const workload::TpPlan& plan,
                                   std::int64_t tp) {
  std::string out;
  const double tokens = static_cast<double>(c.batch * c.seq);
  const workload::CaptureShapes shapes = workload::capture_shapes(c);
  const std::int64_t hidden = shapes.hidden;
  out += fmt::format(
      "capture of {}: {} blocks ({}), micro-batch {} × {} tokens, hidden {}, "
      "vocabulary {}, PyTorch {}\n",
      c.model, c.num_blocks, c.blocks_attr, c.batch, c.seq, hidden, c.vocab_size, c.torch_version);
  if (!c.blocks_differ.empty())
    out += fmt::format("warning: {}; every block is costed as the first (--same-blocks)\n",
                       c.blocks_differ);
  // The block's ops by how they are costed.
  std::map<workload::AtenClass, int> classes;
  int calls = 0;
  for (const workload::CapturedNode& d : c.block)
    if (d.kind == "call_function") {
      ++classes[workload::aten_class(d.op)];
      ++calls;
    }
  const double block_flops = gemm_flops(c.block);
  out += fmt::format(
      "block (forward + backward): {} ops: {} GEMM, {} attention, {} memory-bound, {} views, "
      "{} unknown; GEMM FLOPs {:.4g}\n",
      calls, classes[workload::AtenClass::Gemm], classes[workload::AtenClass::Attention],
      classes[workload::AtenClass::MemoryBound], classes[workload::AtenClass::View],
      classes[workload::AtenClass::Unknown], block_flops);
  out += workload::describe_causal_attention(c, workload::CausalMask::Auto) + "\n";
  out +=
      fmt::format("compiled kernels (model.compile: inductor): block {}{}\n",
                  workload::describe_fusion(c.block_fusion),
                  c.outer.empty() ? std::string()
                                  : ", outer graph " + workload::describe_fusion(c.outer_fusion));
  if (!c.parallelized.empty()) {
    out += fmt::format("tensor parallelism: PyTorch's DTensor at TP {}{}{} in a world of {} ({})\n",
                       c.tp, c.sp ? " with SP" : "",
                       c.ep > 1 ? fmt::format(", EP {}", c.ep) : std::string(), c.world,
                       c.plan_source);
    if (c.fsdp_shard > 0)
      out += fmt::format(
          "FSDP2 per layer (PyTorch's FSDPParamGroup, over {} ranks): all-gather {:.4g} MiB "
          "forward{}, reduce-scatter {:.4g} MiB backward (run with parallel.fsdp: true)\n",
          c.fsdp_shard, c.fsdp_all_gather_bytes / (1 << 20),
          c.fsdp_reshard ? " and again backward" : "", c.fsdp_reduce_scatter_bytes / (1 << 20));
  } else {
    out += fmt::format("tensor-parallel plan ({}):\n{}", plan.source,
                       workload::describe_tp_plan(plan));
    out += "block linear layers:\n";
    for (const auto& [module, style] : workload::planned_linears(c, plan))
      out += fmt::format("  {:<40}  {}\n", module, style.empty() ? "replicated" : style);
  }
  if (tp > 1 || !c.parallelized.empty()) {
    workload::LoweredBlock b;
    if (c.parallelized.empty()) {
      workload::check_tp_plan(c, plan, tp, c.model);
      b = workload::lower_block(c, plan, tp);
    } else {  // PyTorch's own collectives, at the capture's layout
      workload::LowerOptions o;
      o.parallel_tp = c.tp;
      o.parallel_ep = c.ep;
      tp = c.tp;
      b = workload::lower_block(c, workload::TpPlan{}, 1, false, false, o);
    }
    for (const auto* pass : {&b.forward, &b.backward}) {
      std::map<std::string, std::pair<int, double>> comms;
      for (const graph::Op& op : *pass)
        if (graph::is_communication(op.kind)) {
          auto& [count, bytes] = comms[std::string(graph::op_kind_name(op.kind))];
          ++count;
          bytes += op.comm_bytes;
        }
      std::string list;
      for (const auto& [kind, cb] : comms)
        list += fmt::format("{}{} × {} ({:.3g} MiB in all)", list.empty() ? "" : ", ", cb.first,
                            kind, cb.second / (1 << 20));
      out += fmt::format("TP {}{}{} collectives per block, {}: {}\n", tp,
                         c.ep > 1 ? fmt::format(" · EP {}", c.ep) : std::string(),
                         c.parallelized.empty() ? ""
                         : c.sp                 ? " + SP (PyTorch's)"
                                                : " (PyTorch's)",
                         pass == &b.forward ? "forward" : "backward", list.empty() ? "none" : list);
    }
  }
  // One micro-batch's iteration against the closed form (Narayanan et al. 2021, eq. 3 without
  // recomputation): 6·N·T for the weights N that GEMMs read, 12·L·s·h·T for attention's
  // score and value GEMMs over the whole s × s matrix (what an eager capture computes; a fused
  // attention kernel's FLOPs are not GEMM nodes and are not counted on either side).
  const bool fused = workload::capture_has_fused_attention(c);
  const double captured = static_cast<double>(c.num_blocks) * block_flops + gemm_flops(c.outer);
  // Experts held as 3-D weights: a token goes through top-k of the E experts, so k experts'
  // weights count once per token.
  // A DTensor capture at EP: this rank's E/ep experts take the TP group's k·T copies split over
  // its TP ranks (transformers' AllToAllEP), as the other weights are split.
  const workload::ExpertWeights ew = workload::capture_expert_weights(c);
  const double expert_n = static_cast<double>(ew.topk) * ew.weights_per_expert /
                          static_cast<double>(c.parallelized.empty() || c.ep == 1 ? 1 : c.tp);
  const double n = static_cast<double>(c.num_blocks) * (gemm_weights(c.block) + expert_n) +
                   gemm_weights(c.outer);
  if (!ew.params.empty()) {
    out +=
        fmt::format("block expert weights (3-D, {} experts{}, top-{}):\n", ew.experts,
                    c.ep > 1 ? fmt::format(" on this rank of {} (EP {})", ew.experts * c.ep, c.ep)
                             : std::string(),
                    ew.topk);
    for (const auto& [name, shape] : ew.params)
      out +=
          fmt::format("  {:<40}  {}x{}x{}  {}\n", name, shape[0], shape[1], shape[2],
                      tp > 1 ? "whole on every TP rank (ETP 1); ETP > 1 is not lowered yet" : "");
  }
  // The scores' and values' widths: h each, or with multi-latent attention a·(d_qk + d_rope)
  // and a·d_v (DeepSeek-V3: 128·192 and 128·128 against h 7168).
  const bool mla = shapes.mla.value_or(false);
  const double width =
      mla ? static_cast<double>(shapes.heads * (shapes.qk_head_dim + shapes.qk_pos_emb_head_dim +
                                                shapes.v_head_dim))
          : 2.0 * static_cast<double>(hidden);
  const double attention =
      fused ? 0.0
            : 6.0 * static_cast<double>(c.num_blocks) * static_cast<double>(c.seq) * width * tokens;
  const double expected = 6 * n * tokens + attention;
  out += fmt::format(
      "iteration GEMM FLOPs per micro-batch: captured {:.4g}; 6·N·T {:.4g} (N = {:.4g} GEMM "
      "weights{}, T = {} tokens){}; captured / expected = {:.4f}\n",
      captured, 6 * n * tokens, n,
      ew.params.empty() ? ""
                        : fmt::format(", experts' at top-{} of {}", ew.topk, ew.experts * c.ep),
      tokens,
      fused ? std::string(" (attention fused: not in either)")
      : mla ? fmt::format(" + attention 6·L·s·a·(d_qk + d_rope + d_v)·T {:.4g}", attention)
            : fmt::format(" + attention 12·L·s·h·T {:.4g}", attention),
      expected > 0 ? captured / expected : 0.0);
  return out;
}

}  // namespace scalescope::io
