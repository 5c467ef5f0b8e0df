// The model: section model: after its preset, Hugging Face config and captured model are merged
// (docs/config.md); model.pytorch captures a PyTorch module on first use.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>

#include "core/error.hpp"
#include "io/capture_h5.hpp"
#include "io/config_internal.hpp"
#include "io/megatron_args.hpp"
#include "workload/accounting.hpp"

namespace scalescope::io::detail {

namespace {

/// Megatron's --moe-layer-freq: an int N (layer l is MoE when l % N == 0), a list of 0/1 per
/// layer, or Megatron's pattern string "([0]*3+[1]*58)". Absent: every layer.
std::vector<std::uint8_t> moe_layer_pattern(const Value* v, std::int64_t layers,
                                            const std::string& experiment) {
  const std::string key = "model.moe_layer_freq";
  std::vector<std::uint8_t> pattern;
  const auto n = static_cast<std::size_t>(layers);
  if (v == nullptr) return std::vector<std::uint8_t>(n, 1);
  const auto bit = [&](std::int64_t x) {
    if (x != 0 && x != 1) fail(*v, key, fmt::format("pattern entries must be 0 or 1, got {}", x));
    return static_cast<std::uint8_t>(x);
  };
  if (v->node.IsSequence()) {
    for (const auto& e : v->node)
      pattern.push_back(bit(detail::read_int(Value{e, v->origin}, key)));
  } else {
    const std::string text = detail::read_string(*v, key);
    if (text.find('[') == std::string::npos) {
      const std::int64_t freq = detail::read_positive_int(*v, key);
      for (std::int64_t l = 0; l < layers; ++l) pattern.push_back(l % freq == 0 ? 1 : 0);
      return pattern;
    }
    // "([a]*n+[b]*m+[c, d])": terms joined by '+', each a bracketed list times an optional count.
    std::string body;
    for (char c : text)
      if (c != ' ' && c != '(' && c != ')') body += c;
    std::size_t i = 0;
    while (i < body.size()) {
      if (body[i] != '[') fail(*v, key, fmt::format("cannot read pattern '{}'", text));
      const std::size_t close = body.find(']', i);
      if (close == std::string::npos) fail(*v, key, fmt::format("unclosed '[' in '{}'", text));
      std::vector<std::uint8_t> items;
      std::stringstream list(body.substr(i + 1, close - i - 1));
      for (std::string item; std::getline(list, item, ',');) {
        try {
          items.push_back(bit(std::stoll(item)));
        } catch (const std::logic_error&) {
          fail(*v, key, fmt::format("cannot read '{}' in pattern '{}'", item, text));
        }
      }
      i = close + 1;
      std::int64_t times = 1;
      if (i < body.size() && body[i] == '*') {
        std::size_t end = body.find('+', i);
        if (end == std::string::npos) end = body.size();
        try {
          times = std::stoll(body.substr(i + 1, end - i - 1));
        } catch (const std::logic_error&) {
          fail(*v, key, fmt::format("cannot read the repeat count in '{}'", text));
        }
        i = end;
      }
      for (std::int64_t r = 0; r < times; ++r)
        pattern.insert(pattern.end(), items.begin(), items.end());
      if (i < body.size()) {
        if (body[i] != '+') fail(*v, key, fmt::format("cannot read pattern '{}'", text));
        ++i;
      }
    }
  }
  if (pattern.size() != n)
    fail(*v, key,
         fmt::format("the pattern has {} entries, model.num_layers is {}", pattern.size(), layers));
  if (std::find(pattern.begin(), pattern.end(), 1) == pattern.end())
    throw_input("{}: {}: no layer is MoE", experiment, key);
  return pattern;
}

/// The model: `megatron_defaults` (a launch line was given) starts from Megatron-LM's defaults
/// where they differ from scalescope's; then the preset, the HF config, the inline keys.
/// model.pytorch: `file.py:Class` captured on first use (scripts/capture/capture.py) into the
/// user's cache, keyed by the module file, its arguments, the capture script and the shapes; the
/// path of the capture. The capture is written to a temporary name and renamed, so concurrent
/// first uses (every MPI rank) each find a whole file.
std::string pytorch_capture(const Section& inline_keys, const Value& v, const Section& merged,
                            std::int64_t micro_batch, bool factory) {
  const std::string key = factory ? "model.pytorch_factory" : "model.pytorch";
  const std::string spec = detail::read_string(v, key);
  const auto colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size())
    fail(v, key,
         factory ? "expected path/to/file.py:FUNCTION" : "expected path/to/file.py:ClassName");
  // The name goes into capture.py's command line: a Python name (dotted), nothing a shell reads.
  const std::string name = spec.substr(colon + 1);
  const bool identifier =
      std::all_of(name.begin(), name.end(),
                  [](unsigned char ch) { return std::isalnum(ch) || ch == '_' || ch == '.'; }) &&
      !std::isdigit(static_cast<unsigned char>(name.front()));
  if (!identifier)
    fail(v, key, fmt::format("'{}' is not a Python {} name", name, factory ? "function" : "class"));
  const fs::path file = fs::path(spec.substr(0, colon)).is_absolute()
                            ? fs::path(spec.substr(0, colon))
                            : base_dir(v) / spec.substr(0, colon);
  if (!detail::is_file(file)) fail(v, key, fmt::format("file {} not found", display(file)));
  std::string args;
  if (const Value* a = get(inline_keys, "pytorch_args")) {
    const std::string f = detail::read_string(*a, "model.pytorch_args");
    const fs::path p = fs::path(f).is_absolute() ? fs::path(f) : base_dir(*a) / f;
    if (!detail::is_file(p))
      fail(*a, "model.pytorch_args", fmt::format("file {} not found", display(p)));
    args = fs::absolute(p).string();
  }
  std::string blocks;  // empty: capture.py finds the block list in the module tree
  if (const Value* b = get(inline_keys, "pytorch_blocks"))
    blocks = detail::read_string(*b, "model.pytorch_blocks");
  const Value* seq = get(merged, "seq_length");
  if (seq == nullptr) fail(v, key, "needs model.seq_length (or a preset with one)");
  const std::int64_t s = detail::read_positive_int(*seq, "model.seq_length");
  const fs::path script = fs::path(SCALESCOPE_SOURCE_DIR) / "scripts" / "capture" / "capture.py";
  // FNV-1a over everything the capture depends on.
  std::uint64_t h = 1469598103934665603ull;
  const auto mix = [&](const std::string& bytes) {
    for (unsigned char ch : bytes) h = (h ^ ch) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  const auto contents = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  mix(contents(file));
  mix(args.empty() ? std::string() : contents(args));
  mix(contents(script));
  // The interpreter (scripts/capture/python: the pinned venv, or $SCALESCOPE_PYTHON).
  mix(contents(fs::path(SCALESCOPE_SOURCE_DIR) / "scripts" / "torch_venv.sh"));
  if (const char* py = std::getenv("SCALESCOPE_PYTHON")) mix(py);
  mix(fmt::format("{}|{}|{}|{}|{}", spec.substr(colon + 1), blocks, s, micro_batch, factory));
  const char* env = std::getenv("SCALESCOPE_CACHE");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path dir = env != nullptr ? fs::path(env)
                       : xdg != nullptr
                           ? fs::path(xdg) / "scalescope"
                           : fs::path(home != nullptr ? home : "/tmp") / ".cache" / "scalescope";
  const fs::path out = dir / "captures" / fmt::format("{:016x}.capture.h5", h);
  if (detail::is_file(out)) return out.string();
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  fail(v, key, "captures are not run in a fuzzing build");
#endif
  std::error_code ec;
  fs::create_directories(out.parent_path(), ec);
  const fs::path tmp = out.string() + fmt::format(".tmp{}", static_cast<long>(::getpid()));
  // Single-quoted for the shell, a quote inside written as '\''.
  const auto quoted = [](std::string text) {
    for (std::size_t at = 0; (at = text.find('\'', at)) != std::string::npos; at += 4)
      text.replace(at, 1, "'\\''");
    return "'" + text + "'";
  };
  const fs::path python = fs::path(SCALESCOPE_SOURCE_DIR) / "scripts" / "capture" / "python";
  std::string cmd = fmt::format("{} {} {}{} --seq {} --batch {} -o {} >&2", quoted(python.string()),
                                quoted(script.string()), factory ? "--factory " : "",
                                quoted(fs::absolute(file).string() + ":" + name), s, micro_batch,
                                quoted(tmp.string()));
  if (!blocks.empty()) cmd += " --blocks " + quoted(blocks);
  if (!args.empty()) cmd += " --args " + quoted(args);
  const int rc = std::system(cmd.c_str());
  if (rc != 0 || !detail::is_file(tmp)) {
    fs::remove(tmp, ec);
    fail(v, key,
         fmt::format("capturing {} failed (capture.py exit {})", spec,
                     WIFEXITED(rc) ? WEXITSTATUS(rc) : rc));
  }
  fs::rename(tmp, out, ec);
  if (ec && !detail::is_file(out))
    fail(v, key, fmt::format("cannot store the capture in {}", display(out)));
  return out.string();
}

}  // namespace

workload::ModelSpec build_model(const Section& inline_keys, const std::string& experiment,
                                ModelSources& sources, bool megatron_defaults,
                                std::int64_t micro_batch) {
  const fs::path experiment_dir = fs::path(experiment).parent_path();
  Section merged;
  if (megatron_defaults)
    for (const auto& kv : detail::megatron_model_defaults())
      merged.insert_or_assign(kv.first.Scalar(),
                              Value{kv.second, Origin{"(Megatron-LM default)", "", false}});
  if (const Value* v = get(inline_keys, "preset")) {
    const fs::path p = find_preset(*v, "model.preset", "models", experiment_dir);
    for (auto& [k, pv] : read_preset(p, "model", kModelShapeKeys)) merged.insert_or_assign(k, pv);
    sources.preset = v->node.Scalar();
  }
  if (const Value* v = get(inline_keys, "hf_config")) {
    const std::string file = detail::read_string(*v, "model.hf_config");
    const fs::path p = fs::path(file).is_absolute() ? fs::path(file) : base_dir(*v) / file;
    if (!detail::is_file(p))
      fail(*v, "model.hf_config", fmt::format("file {} not found", display(p)));
    sources.hf_config = display(p);
    const YAML::Node hf = detail::hf_model_keys(sources.hf_config);
    for (const auto& kv : hf)
      merged.insert_or_assign(kv.first.Scalar(),
                              Value{kv.second, Origin{sources.hf_config, "", false}});
  }
  for (const auto& [k, v] : inline_keys)
    if (k != "preset" && k != "hf_config" && k != "source" && k != "tp_plan" && k != "compile" &&
        k != "sdpa" && k != "causal_mask" && k != "fusion" && k != "outer" &&
        k.rfind("pytorch", 0) != 0)
      merged.insert_or_assign(k, v);

  // A captured model (docs/flint.md): its block replaces the built-in layer; the shape keys it
  // implies fill in what the preset / inline keys leave open, and must agree with them.
  std::shared_ptr<const workload::Capture> capture;
  std::string capture_layers_note;
  std::string capture_path;
  const Value* pytorch = get(inline_keys, "pytorch");
  const Value* factory = get(inline_keys, "pytorch_factory");
  if (pytorch != nullptr && factory != nullptr)
    fail(*factory, "model.pytorch_factory",
         "give model.pytorch or model.pytorch_factory, not both");
  if (pytorch == nullptr) pytorch = factory;
  if (pytorch != nullptr && get(inline_keys, "source") != nullptr)
    fail(*pytorch, "model.pytorch", "give model.source or model.pytorch, not both");
  for (const char* k : {"pytorch_args", "pytorch_blocks"})
    if (const Value* x = get(inline_keys, k); x != nullptr && pytorch == nullptr)
      fail(*x, std::string("model.") + k, "applies to model.pytorch only");
  if (const Value* x = get(inline_keys, "pytorch_args"); x != nullptr && factory != nullptr)
    fail(*x, "model.pytorch_args", "applies to model.pytorch (a class), not to a factory");
  if (pytorch != nullptr)
    capture_path = pytorch_capture(inline_keys, *pytorch, merged, micro_batch, pytorch == factory);
  if (const Value* v = get(inline_keys, "source")) {
    const std::string file = detail::read_string(*v, "model.source");
    const fs::path p = fs::path(file).is_absolute() ? fs::path(file) : base_dir(*v) / file;
    if (!detail::is_file(p))
      fail(*v, "model.source", fmt::format("capture {} not found", display(p)));
    capture_path = fs::absolute(p).lexically_normal().string();
  }
  if (!capture_path.empty()) {
    capture = std::make_shared<const workload::Capture>(io::read_capture_h5(capture_path));
    const Origin from{capture_path, "", false};
    // The shapes the capture shows (docs/flint.md "Shapes from the capture") fill what the
    // experiment leaves open and must agree with what it gives; num_layers may differ (the
    // captured block repeated another number of times, said in the output).
    workload::CaptureShapes shapes = workload::capture_shapes(*capture);
    if (!capture->parallelized.empty()) {
      // A DTensor capture's graph has this rank's shapes; the model's come from its config.
      const auto num = [&](const char* k) {
        const auto it = capture->shapes.find(k);
        return it == capture->shapes.end() ? std::int64_t{0} : std::stoll(it->second);
      };
      const auto flag = [&](const char* k) -> std::optional<bool> {
        const auto it = capture->shapes.find(k);
        if (it == capture->shapes.end()) return std::nullopt;
        return it->second == "true";
      };
      shapes = {};
      shapes.hidden = num("hidden_size");
      shapes.heads = num("num_attention_heads");
      shapes.head_dim = num("kv_channels");
      shapes.query_groups = num("num_query_groups");
      shapes.ffn = num("ffn_hidden_size");
      shapes.experts = num("num_experts");
      shapes.topk = num("moe_router_topk");
      shapes.expert_ffn = num("moe_ffn_hidden_size");
      shapes.shared_ffn = num("moe_shared_expert_intermediate_size");
      shapes.router_groups = num("moe_router_num_groups");
      shapes.router_group_topk = num("moe_router_group_topk");
      shapes.mla = flag("multi_latent_attention");
      shapes.q_lora_rank = num("q_lora_rank");
      shapes.kv_lora_rank = num("kv_lora_rank");
      shapes.qk_head_dim = num("qk_head_dim");
      shapes.qk_pos_emb_head_dim = num("qk_pos_emb_head_dim");
      shapes.v_head_dim = num("v_head_dim");
      shapes.gated = flag("gated_linear_unit");
      shapes.bias = flag("add_bias_linear");
      if (const auto it = capture->shapes.find("position_embedding_type");
          it != capture->shapes.end())
        shapes.learned_positions = it->second == "learned_absolute";
    }
    std::vector<std::pair<const char*, std::int64_t>> ints = {
        {"num_layers", capture->num_blocks},
        {"seq_length", capture->seq},
        {"vocab_size", capture->vocab_size},
        {"hidden_size", shapes.hidden},
        {"num_attention_heads", shapes.heads},
        {"kv_channels", shapes.head_dim},
        {"num_query_groups", shapes.query_groups},
        {"ffn_hidden_size", shapes.ffn},
        {"num_experts", shapes.experts},
        {"moe_router_topk", shapes.topk},
        {"moe_ffn_hidden_size", shapes.expert_ffn},
        {"moe_shared_expert_intermediate_size", shapes.shared_ffn},
        {"moe_router_num_groups", shapes.router_groups},
        {"moe_router_group_topk", shapes.router_group_topk},
        {"kv_lora_rank", shapes.kv_lora_rank},
        {"qk_head_dim", shapes.qk_head_dim},
        {"qk_pos_emb_head_dim", shapes.qk_pos_emb_head_dim},
        {"v_head_dim", shapes.v_head_dim}};
    // q_lora_rank 0 is a shape the capture shows (queries projected from the hidden states).
    const bool mla = shapes.mla.value_or(false);
    if (mla) ints.emplace_back("q_lora_rank", shapes.q_lora_rank);
    for (const auto& [key, value] : ints) {
      if (value < 0 || (value == 0 && !(mla && std::string_view(key) == "q_lora_rank")))
        continue;  // the capture cannot tell
      if (const Value* given = get(merged, key)) {
        const std::int64_t g = value == 0
                                   ? detail::read_int(*given, std::string("model.") + key)
                                   : detail::read_positive_int(*given, std::string("model.") + key);
        if (g == value) continue;
        if (std::string_view(key) == "num_layers") {
          capture_layers_note = fmt::format(
              "model.num_layers {} repeats the captured block of {} ({} blocks in the capture)", g,
              capture_path, value);
          continue;
        }
        fail(*given, std::string("model.") + key,
             fmt::format("disagrees with the capture {} ({})", capture_path, value));
      } else {
        merged.insert_or_assign(key, Value{YAML::Node(value), from});
      }
    }
    // Flags the capture determines must agree with the experiment's (a preset's included):
    // gated_linear_unit: false on a gated capture would cost a non-gated MLP.
    for (const auto& [key, value] :
         {std::pair{"gated_linear_unit", shapes.gated}, std::pair{"add_bias_linear", shapes.bias},
          std::pair{"multi_latent_attention", shapes.mla}}) {
      if (!value) continue;
      if (const Value* given = get(merged, key)) {
        if (detail::read_bool(*given, std::string("model.") + key) != *value)
          fail(*given, std::string("model.") + key,
               fmt::format("disagrees with the capture {} ({})", capture_path, *value));
        continue;
      }
      merged.insert_or_assign(key, Value{YAML::Node(*value), from});
    }
    if (shapes.learned_positions) {
      const std::string captured = *shapes.learned_positions ? "learned_absolute" : "rope";
      if (const Value* given = get(merged, "position_embedding_type")) {
        if (detail::read_string(*given, "model.position_embedding_type") != captured)
          fail(*given, "model.position_embedding_type",
               fmt::format("disagrees with the capture {} ({})", capture_path, captured));
      } else {
        merged.insert_or_assign("position_embedding_type", Value{YAML::Node(captured), from});
      }
    }
    // Tied or untied output layer, as the capture's outer graph has it (the tied embedding's
    // gradients are all-reduced between the first and last stage under PP).
    std::optional<bool> tied = workload::capture_ties_embeddings(*capture);
    if (const auto it = capture->shapes.find("untie_embeddings"); it != capture->shapes.end())
      tied = it->second != "true";  // a DTensor capture's config says
    if (tied) {
      if (const Value* given = get(merged, "untie_embeddings")) {
        if (detail::read_bool(*given, "model.untie_embeddings") == *tied)
          fail(*given, "model.untie_embeddings",
               fmt::format("disagrees with the capture {} (its output layer is {}tied to the "
                           "embedding)",
                           capture_path, *tied ? "" : "not "));
      } else {
        merged.insert_or_assign("untie_embeddings", Value{YAML::Node(!*tied), from});
      }
    }
  }

  workload::ModelSpec m;
  if (!sources.preset.empty()) m.name = sources.preset;
  if (capture) {
    // A captured model is named by what was captured (file.py:Class or the factory), not by a
    // preset that only fills the keys the capture cannot show.
    const std::string& spec = capture->model;
    const std::size_t colon = spec.rfind(':');
    m.name = colon == std::string::npos
                 ? fs::path(spec).filename().string()
                 : fs::path(spec.substr(0, colon)).filename().string() + spec.substr(colon);
    if (get(inline_keys, "name") == nullptr) merged.erase("name");  // a preset's name
  }
  const Reader r(merged, "model");
  r.text("name", m.name);
  r.positive("num_layers", m.num_layers);
  r.positive("hidden_size", m.hidden_size);
  r.positive("ffn_hidden_size", m.ffn_hidden_size);
  r.positive("num_attention_heads", m.num_attention_heads);
  r.positive("num_query_groups", m.num_query_groups);
  r.positive("kv_channels", m.kv_channels);
  r.positive("vocab_size", m.vocab_size);
  r.positive("make_vocab_size_divisible_by", m.make_vocab_size_divisible_by);
  r.positive("seq_length", m.seq_length);
  r.flag("gated_linear_unit", m.gated_linear_unit);
  r.flag("untie_embeddings", m.untie_embeddings);
  r.flag("add_bias_linear", m.add_bias_linear);
  r.flag("add_qkv_bias", m.add_qkv_bias);
  r.flag("qk_layernorm", m.qk_layernorm);
  if (const Value* v = r.find("mtp_num_layers")) {
    m.mtp_num_layers = detail::read_int(*v, r.key("mtp_num_layers"));
    if (m.mtp_num_layers < 0) fail(*v, r.key("mtp_num_layers"), "must be >= 0");
  }
  r.number("hidden_dropout", m.hidden_dropout, 0.0, false, 1.0);
  r.number("attention_dropout", m.attention_dropout, 0.0, false, 1.0);
  m.position_embedding_type =
      r.choice("position_embedding_type", {"rope", "learned_absolute"}, "rope") == "rope"
          ? workload::PositionEmbedding::Rope
          : workload::PositionEmbedding::LearnedAbsolute;
  r.positive("num_experts", m.num_experts);
  r.positive("moe_router_topk", m.moe_router_topk);
  r.positive("moe_ffn_hidden_size", m.moe_ffn_hidden_size);
  if (const Value* v = r.find("moe_shared_expert_intermediate_size"))
    m.moe_shared_expert_intermediate_size =
        detail::read_int(*v, r.key("moe_shared_expert_intermediate_size"));
  r.number("moe_expert_capacity_factor", m.moe_expert_capacity_factor, 0.0, false);
  r.positive("moe_router_num_groups", m.moe_router_num_groups);
  r.positive("moe_router_group_topk", m.moe_router_group_topk);
  r.number("moe_aux_loss_coeff", m.moe_aux_loss_coeff, 0.0, false, 1e6);
  r.flag("multi_latent_attention", m.multi_latent_attention);
  if (const Value* v = r.find("q_lora_rank"))
    m.q_lora_rank = detail::read_int(*v, r.key("q_lora_rank"));  // 0 = no query compression
  r.positive("kv_lora_rank", m.kv_lora_rank);
  r.positive("qk_head_dim", m.qk_head_dim);
  r.positive("qk_pos_emb_head_dim", m.qk_pos_emb_head_dim);
  r.positive("v_head_dim", m.v_head_dim);
  for (const char* k :
       {"moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
        "moe_layer_freq", "moe_expert_capacity_factor", "moe_router_num_groups",
        "moe_router_group_topk", "moe_aux_loss_coeff"})
    if (const Value* v = r.find(k); v && m.num_experts == 0)
      fail(*v, r.key(k), "applies to MoE models only (set model.num_experts)");
  for (const char* k :
       {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"})
    if (const Value* v = r.find(k); v && !m.multi_latent_attention)
      fail(*v, r.key(k),
           "applies to multi-latent attention only (set "
           "model.multi_latent_attention: true)");
  // Required after merging; checked after the reads so that a bad value is reported first.
  for (std::string_view k :
       {"num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length"})
    if (!r.find(k)) {
      // A launch line's tokenizer options are not read: the vocabulary must be given.
      const std::string option = k == "vocab_size"
                                     ? std::string("--vocab-size or --padded-vocab-size")
                                     : std::string(detail::megatron_option_for("model", k));
      throw_input(
          "{}: model.{} is required (set it inline, through model.preset or model.hf_config{})",
          experiment, k,
          megatron_defaults ? fmt::format(", or with {} on the launch line", option) : "");
    }
  // Megatron: with --swiglu and no --ffn-hidden-size, the MLP keeps ~8h/3 columns rounded down
  // to a multiple of 64, so that it has the parameters of a 4h GELU MLP.
  if (megatron_defaults && !r.find("ffn_hidden_size") && m.gated_linear_unit)
    m.ffn_hidden_size = detail::megatron_swiglu_ffn_hidden_size(m.hidden_size);

  // Megatron: kv_channels defaults to hidden_size // num_attention_heads and asserts that it
  // divides; GQA needs whole groups of query heads (arguments.py, TransformerConfig).
  if (m.kv_channels == 0 && m.hidden_size % m.num_attention_heads != 0)
    throw_input(
        "{}: model.num_attention_heads={} does not divide model.hidden_size={} (set "
        "model.kv_channels)",
        experiment, m.num_attention_heads, m.hidden_size);
  if (m.num_attention_heads % m.query_groups() != 0)
    throw_input("{}: model.num_query_groups={} does not divide model.num_attention_heads={}",
                experiment, m.query_groups(), m.num_attention_heads);
  if (m.moe()) {
    if (m.moe_router_topk > m.num_experts) {
      const std::string what =
          fmt::format("{} exceeds model.num_experts={}", m.moe_router_topk, m.num_experts);
      if (const Value* v = r.find("moe_router_topk")) fail(*v, r.key("moe_router_topk"), what);
      throw_input("{}: model.moe_router_topk={}", experiment, what);
    }
    if (m.moe_shared_expert_intermediate_size < 0)
      throw_input("{}: model.moe_shared_expert_intermediate_size must be >= 0", experiment);
    // Megatron's checks (router.py group_limited_topk): both or neither, whole groups, at most
    // all of them.
    if ((m.moe_router_num_groups > 0) != (m.moe_router_group_topk > 0))
      throw_input(
          "{}: model.moe_router_num_groups and model.moe_router_group_topk go together "
          "(group-limited routing)",
          experiment);
    if (m.moe_router_num_groups > 0 && (m.num_experts % m.moe_router_num_groups != 0 ||
                                        m.moe_router_group_topk > m.moe_router_num_groups))
      throw_input(
          "{}: model.moe_router_num_groups={} must divide model.num_experts={} and be at least "
          "model.moe_router_group_topk={}",
          experiment, m.moe_router_num_groups, m.num_experts, m.moe_router_group_topk);
    m.moe_layer_pattern = moe_layer_pattern(r.find("moe_layer_freq"), m.num_layers, experiment);
    m.moe_ffn_hidden_size = m.expert_ffn();
  }
  if (m.q_lora_rank < 0) throw_input("{}: model.q_lora_rank must be >= 0", experiment);
  if (capture) {
    // The weights the memory model charges come from the spec: they must be the capture's
    // (a 3-D expert weight or a key the capture cannot show would otherwise go uncounted).
    const double captured = capture->parallelized.empty()
                                ? workload::capture_block_parameters(*capture)
                                : capture->block_parameters;
    const double modelled = workload::layer_parameters(m, 0);
    if (captured > 0 && std::abs(modelled / captured - 1) > 0.02)
      throw_input(
          "{}: model: a layer here has {:.6g} parameters, the captured block of {} has {:.6g} "
          "({:+.1f} %); set the shape keys the capture cannot show (num_experts, "
          "moe_router_topk, moe_ffn_hidden_size, ...) to the model's",
          experiment, modelled, capture_path, captured, 100 * (modelled / captured - 1));
    m.capture = capture;
    m.capture_path = capture_path;
    m.capture_note = capture_layers_note;
    if (!capture->blocks_differ.empty())
      m.capture_note += fmt::format("{}the capture {} costs every block as its first: {}",
                                    m.capture_note.empty() ? "" : "; note: ", capture_path,
                                    capture->blocks_differ);
    // The tensor-parallel plan (docs/flint.md "Tensor-parallel plans"): model.pytorch_tp_plan
    // (parallelize_module styles by module pattern), a shipped plan by name (model.tp_plan), the
    // one the model file declares, else one inferred from the captured graph.
    const Value* plan = get(inline_keys, "tp_plan");
    const Value* torch_plan = get(inline_keys, "pytorch_tp_plan");
    if (plan != nullptr && torch_plan != nullptr)
      fail(*torch_plan, "model.pytorch_tp_plan",
           "give model.pytorch_tp_plan or model.tp_plan, not both");
    if (torch_plan != nullptr) {
      if (!torch_plan->node.IsMap() || torch_plan->node.size() == 0)
        fail(*torch_plan, "model.pytorch_tp_plan",
             "expected a mapping of module patterns to parallelize_module styles "
             "(ColwiseParallel, RowwiseParallel, SequenceParallel, PrepareModuleInput)");
      for (const auto& kv : torch_plan->node) {
        const std::string pattern = kv.first.as<std::string>();
        const std::string given = kv.second.IsScalar() ? kv.second.as<std::string>() : "";
        const std::string style = workload::tp_style(given);
        if (style.empty())
          fail(*torch_plan, "model.pytorch_tp_plan." + pattern,
               fmt::format("'{}' is not a parallelize_module style (ColwiseParallel, "
                           "RowwiseParallel, SequenceParallel, PrepareModuleInput)",
                           given));
        m.capture_plan.rules.emplace_back(pattern, style);
      }
      m.capture_plan.source = "model.pytorch_tp_plan";
    } else if (plan != nullptr) {
      const std::string name = detail::read_choice(*plan, "model.tp_plan", {"llama", "gpt"});
      m.capture_plan = name == "gpt" ? workload::gpt_tp_plan() : workload::llama_tp_plan();
      m.capture_plan.source = "model.tp_plan: " + name;
      m.capture_plan_name = name;
    } else if (!capture->parallelized.empty()) {
      m.capture_plan.source = "PyTorch's DTensor in the capture: " + capture->plan_source;
    } else {
      m.capture_plan = workload::capture_default_plan(*capture, capture_path);
    }
    if (const Value* mode = get(inline_keys, "compile")) {
      const std::string c =
          detail::read_choice(*mode, "model.compile", {"inductor", "eager", "blocks"});
      m.capture_compiled = c != "eager";
      m.capture_outer_compiled = c == "inductor";
    }
    if (const Value* fusion = get(inline_keys, "fusion"))
      m.capture_fusion_read =
          detail::read_choice(*fusion, "model.fusion", {"inductor", "rederived"}) == "inductor";
    if (m.capture_compiled && !m.capture_fusion_read)
      m.capture_note += fmt::format(
          "{}the compiled kernels are re-derived by the lowering's "
          "rules (model.fusion: rederived)",
          m.capture_note.empty() ? "" : "; note: ");
    else if (m.capture_compiled && capture->block_fusion.rfind("re-derived", 0) == 0)
      m.capture_note += fmt::format("{}the compiled block's kernels are {}",
                                    m.capture_note.empty() ? "" : "; note: ",
                                    workload::describe_fusion(capture->block_fusion));
    if (const Value* outer = get(inline_keys, "outer"))
      m.capture_outer =
          detail::read_choice(*outer, "model.outer", {"captured", "builder"}) == "captured";
    if (const Value* sdpa = get(inline_keys, "sdpa"))
      m.capture_sdpa_flash =
          detail::read_choice(*sdpa, "model.sdpa", {"flash", "cudnn"}) == "flash";
    if (const Value* mask = get(inline_keys, "causal_mask")) {
      const std::string c =
          detail::read_choice(*mask, "model.causal_mask", {"auto", "assume", "materialized"});
      m.capture_causal_mask = c == "auto"     ? workload::CausalMask::Auto
                              : c == "assume" ? workload::CausalMask::Assume
                                              : workload::CausalMask::Materialized;
    }
  } else if (const Value* mask = get(inline_keys, "causal_mask")) {
    fail(*mask, "model.causal_mask",
         "applies to a captured model only (set model.source or model.pytorch)");
  } else if (const Value* fusion = get(inline_keys, "fusion")) {
    fail(*fusion, "model.fusion",
         "applies to a captured model only (set model.source or model.pytorch)");
  } else if (const Value* sdpa = get(inline_keys, "sdpa")) {
    fail(*sdpa, "model.sdpa",
         "applies to a captured model only (set model.source or model.pytorch)");
  } else if (const Value* plan = get(inline_keys, "tp_plan")) {
    fail(*plan, "model.tp_plan",
         "applies to a captured model only (set model.source or model.pytorch)");
  } else if (const Value* mode = get(inline_keys, "compile")) {
    fail(*mode, "model.compile",
         "applies to a captured model only (set model.source or model.pytorch)");
  } else if (const Value* outer = get(inline_keys, "outer")) {
    fail(*outer, "model.outer",
         "applies to a captured model only (set model.source or model.pytorch)");
  }
  // Resolve the "0 → derived" defaults so the spec and the emitted YAML say the same.
  m.ffn_hidden_size = m.ffn();
  m.num_query_groups = m.query_groups();
  m.kv_channels = m.head_dim();
  return m;
}

}  // namespace scalescope::io::detail
