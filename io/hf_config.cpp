// Hugging Face config.json (LlamaConfig, MistralConfig, Qwen2Config, MixtralConfig,
// Qwen3MoeConfig, DeepseekV3Config) → model keys. Field meanings:
// transformers/models/{llama,mistral,qwen2,mixtral,qwen3_moe,deepseek_v3}/configuration_*.py;
// the Megatron equivalents follow Megatron-LM's tools/checkpoint/loader_llama_mistral.py and
// Megatron-Bridge's DeepSeek / Qwen3 / Mixtral providers.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "core/error.hpp"
#include "io/config.hpp"
#include "io/yaml_util.hpp"

namespace scalescope::io {

namespace {

using nlohmann::json;

/// The value of `key`, or nullptr when it is absent or null (HF writes "head_dim": null).
const json* find(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::optional<std::int64_t> get_int(const json& j, const std::string& file, const char* key) {
  const json* v = find(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer())
    throw_input("{}: {}: expected an integer, got {}", file, key, v->dump());
  const auto x = v->get<std::int64_t>();
  if (x <= 0) throw_input("{}: {}: must be > 0, got {}", file, key, x);
  return x;
}

std::optional<bool> get_bool(const json& j, const std::string& file, const char* key) {
  const json* v = find(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) throw_input("{}: {}: expected true or false, got {}", file, key, v->dump());
  return v->get<bool>();
}

std::optional<double> get_double(const json& j, const std::string& file, const char* key) {
  const json* v = find(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) throw_input("{}: {}: expected a number, got {}", file, key, v->dump());
  return v->get<double>();
}

std::optional<std::string> get_string(const json& j, const std::string& file, const char* key) {
  const json* v = find(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) throw_input("{}: {}: expected a string, got {}", file, key, v->dump());
  return v->get<std::string>();
}

std::int64_t require_int(const json& j, const std::string& file, const char* key) {
  const auto x = get_int(j, file, key);
  if (!x) throw_input("{}: {}: missing (required for the model shape)", file, key);
  return *x;
}

}  // namespace

namespace detail {

YAML::Node hf_model_keys(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw_input("{}: Hugging Face config not found", path);
  std::ifstream in(path);
  if (!in) throw_input("{}: cannot open Hugging Face config", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw_input("{}: malformed JSON at byte {}: {}", path, e.byte, e.what());
  } catch (const json::exception& e) {  // e.g. a number beyond double's range
    throw_input("{}: unreadable JSON: {}", path, e.what());
  }
  if (!j.is_object()) throw_input("{}: expected a JSON object", path);

  // The model types whose modeling file this reader follows; any other architecture (Gemma's
  // norms and embeddings scaling, GPT-NeoX's parallel residual, ...) would be read as Llama
  // without a word.
  static constexpr std::array<std::string_view, 9> kKnown = {
      "llama", "mistral",   "mixtral",     "qwen2",      "qwen2_moe",
      "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3"};
  const std::optional<std::string> type_of = get_string(j, path, "model_type");
  if (!type_of) throw_input("{}: model_type: missing (known: {})", path, fmt::join(kKnown, ", "));
  if (std::find(kKnown.begin(), kKnown.end(), *type_of) == kKnown.end())
    throw_input(
        "{}: model_type: '{}' is not a model type this reader knows ({}); describe the "
        "model with model: keys instead",
        path, *type_of, fmt::join(kKnown, ", "));
  // Sliding-window attention (Mistral 7B v0.1's sliding_window: 4096; Qwen's use_sliding_window)
  // is not modelled: every layer attends to the whole sequence here.
  const json* window = find(j, "sliding_window");
  const bool windowed = (window != nullptr && !window->is_null() &&
                         (*type_of == "mistral" || *type_of == "mixtral")) ||
                        get_bool(j, path, "use_sliding_window").value_or(false);
  if (windowed)
    throw_input(
        "{}: sliding_window: sliding-window attention is not modelled (every layer would "
        "attend to the whole sequence)",
        path);

  YAML::Node m(YAML::NodeType::Map);
  m["name"] = *type_of;
  m["num_layers"] = require_int(j, path, "num_hidden_layers");
  m["hidden_size"] = require_int(j, path, "hidden_size");
  if (auto ffn = get_int(j, path, "intermediate_size")) m["ffn_hidden_size"] = *ffn;
  const std::int64_t heads = require_int(j, path, "num_attention_heads");
  m["num_attention_heads"] = heads;
  // HF: num_key_value_heads absent → MHA (configuration_llama.py).
  m["num_query_groups"] = get_int(j, path, "num_key_value_heads").value_or(heads);
  if (auto dh = get_int(j, path, "head_dim")) m["kv_channels"] = *dh;
  m["vocab_size"] = require_int(j, path, "vocab_size");
  if (auto s = get_int(j, path, "max_position_embeddings")) m["seq_length"] = *s;
  // LlamaConfig / MistralConfig / Qwen2Config all default tie_word_embeddings to false.
  m["untie_embeddings"] = !get_bool(j, path, "tie_word_embeddings").value_or(false);
  // Every known family's MLP is gated whatever hidden_act is: LlamaMLP.forward is
  // down_proj(act_fn(gate_proj(x)) * up_proj(x)) (huggingface/transformers@0022728
  // src/transformers/models/llama/modeling_llama.py), and MistralMLP, MixtralBlockSparseTop2MLP
  // (w2(act(w1(x)) * w3(x))), Qwen2MLP, Qwen3MLP and DeepseekV3MLP have the same form. With SiLU
  // it is SwiGLU (Megatron's --swiglu); another activation has the same GEMMs.
  m["gated_linear_unit"] = true;
  // attention_bias / mlp_bias (Llama) put biases on the linear layers. Qwen2 and Qwen2-MoE have
  // a bias on Q, K and V only (modeling_qwen2.py: q/k/v_proj bias=True, o_proj bias=False;
  // Megatron's --add-qkv-bias); Qwen3 and Qwen3-MoE none, but an RMSNorm over each query and
  // key head (modeling_qwen3.py q_norm, k_norm over head_dim; Megatron's --qk-layernorm).
  const std::string& type = *type_of;
  m["add_bias_linear"] = get_bool(j, path, "attention_bias").value_or(false) ||
                         get_bool(j, path, "mlp_bias").value_or(false);
  m["add_qkv_bias"] = type == "qwen2" || type == "qwen2_moe";
  m["qk_layernorm"] = type == "qwen3" || type == "qwen3_moe";
  // Llama-family models train without hidden-state dropout; attention dropout is a key.
  m["hidden_dropout"] = 0.0;
  m["attention_dropout"] = get_double(j, path, "attention_dropout").value_or(0.0);
  // Llama, Mistral and Qwen2 all apply rotary embeddings to q and k (rope_theta).
  m["position_embedding_type"] = "rope";

  // Mixture of experts. Mixtral: num_local_experts, every layer sparse. Qwen2/3-MoE: num_experts,
  // moe_intermediate_size, layers sparse every decoder_sparse_step except mlp_only_layers, an
  // optional shared_expert_intermediate_size. DeepSeek-V2/V3: n_routed_experts,
  // n_shared_experts × moe_intermediate_size shared, the first first_k_dense_replace layers
  // dense, then every moe_layer_freq-th.
  const std::int64_t layers = m["num_layers"].as<std::int64_t>();
  std::optional<std::int64_t> experts = get_int(j, path, "num_local_experts");
  if (!experts) experts = get_int(j, path, "n_routed_experts");
  if (!experts) experts = get_int(j, path, "num_experts");
  if (experts) {
    m["num_experts"] = *experts;
    m["moe_router_topk"] = require_int(j, path, "num_experts_per_tok");
    const auto moe_ffn = get_int(j, path, "moe_intermediate_size");
    if (moe_ffn) m["moe_ffn_hidden_size"] = *moe_ffn;
    if (auto shared = get_int(j, path, "n_shared_experts")) {
      if (!moe_ffn) throw_input("{}: n_shared_experts needs moe_intermediate_size", path);
      m["moe_shared_expert_intermediate_size"] = *shared * *moe_ffn;
    }
    if (auto shared = get_int(j, path, "shared_expert_intermediate_size"))
      m["moe_shared_expert_intermediate_size"] = *shared;
    // The router's load-balancing loss (Mixtral, Qwen-MoE: router_aux_loss_coef), which sets
    // whether the aux-loss kernels run (workload::moe_kernels).
    if (auto aux = get_double(j, path, "router_aux_loss_coef")) m["moe_aux_loss_coeff"] = *aux;
    // DeepSeek-V3's group-limited routing: n_group groups, the top topk_group of them.
    const auto groups = get_int(j, path, "n_group");
    const auto group_topk = get_int(j, path, "topk_group");
    if (groups && group_topk && *groups > 1) {
      m["moe_router_num_groups"] = *groups;
      m["moe_router_group_topk"] = *group_topk;
    }
    std::vector<int> pattern(static_cast<std::size_t>(layers), 1);
    const std::int64_t first_dense = [&]() -> std::int64_t {
      const json* v = find(j, "first_k_dense_replace");
      if (v == nullptr) return 0;
      if (!v->is_number_integer() || v->get<std::int64_t>() < 0)
        throw_input("{}: first_k_dense_replace: expected an integer >= 0, got {}", path, v->dump());
      return v->get<std::int64_t>();
    }();
    const std::int64_t step = get_int(j, path, "decoder_sparse_step")
                                  .value_or(get_int(j, path, "moe_layer_freq").value_or(1));
    for (std::int64_t l = 0; l < layers; ++l) {
      // DeepSeek: layer_idx >= first_k_dense_replace and layer_idx % moe_layer_freq == 0;
      // Qwen-MoE: (layer_idx + 1) % decoder_sparse_step == 0 (modeling_*.py).
      const bool deepseek = find(j, "n_routed_experts") != nullptr;
      const bool sparse = l >= first_dense && (deepseek ? l % step == 0 : (l + 1) % step == 0);
      pattern[static_cast<std::size_t>(l)] = sparse ? 1 : 0;
    }
    if (const json* only = find(j, "mlp_only_layers")) {
      if (!only->is_array()) throw_input("{}: mlp_only_layers: expected a list", path);
      for (const json& x : *only) {
        if (!x.is_number_integer() || x.get<std::int64_t>() < 0 || x.get<std::int64_t>() >= layers)
          throw_input("{}: mlp_only_layers: {} is not a layer index", path, x.dump());
        pattern[static_cast<std::size_t>(x.get<std::int64_t>())] = 0;
      }
    }
    YAML::Node list(YAML::NodeType::Sequence);
    for (int x : pattern) list.push_back(x);
    m["moe_layer_freq"] = list;
  }
  // Multi-latent attention (DeepSeek-V2/V3): kv_lora_rank marks it; q_lora_rank null means
  // queries projected directly.
  if (auto kvl = get_int(j, path, "kv_lora_rank")) {
    m["multi_latent_attention"] = true;
    m["kv_lora_rank"] = *kvl;
    m["q_lora_rank"] = get_int(j, path, "q_lora_rank").value_or(0);
    m["qk_head_dim"] = require_int(j, path, "qk_nope_head_dim");
    m["qk_pos_emb_head_dim"] = require_int(j, path, "qk_rope_head_dim");
    m["v_head_dim"] = require_int(j, path, "v_head_dim");
    m.remove("kv_channels");
  }
  return m;
}

}  // namespace detail

workload::ModelSpec load_hf_config(const std::string& path) {
  const YAML::Node n = detail::hf_model_keys(path);
  workload::ModelSpec m;
  const auto set_int = [&](const char* key, std::int64_t& out) {
    if (n[key]) out = n[key].as<std::int64_t>();
  };
  if (n["name"]) m.name = n["name"].as<std::string>();
  set_int("num_layers", m.num_layers);
  set_int("hidden_size", m.hidden_size);
  set_int("ffn_hidden_size", m.ffn_hidden_size);
  set_int("num_attention_heads", m.num_attention_heads);
  set_int("num_query_groups", m.num_query_groups);
  set_int("kv_channels", m.kv_channels);
  set_int("vocab_size", m.vocab_size);
  set_int("seq_length", m.seq_length);
  m.untie_embeddings = n["untie_embeddings"].as<bool>();
  m.gated_linear_unit = n["gated_linear_unit"].as<bool>();
  m.add_bias_linear = n["add_bias_linear"].as<bool>();
  m.add_qkv_bias = n["add_qkv_bias"].as<bool>();
  m.qk_layernorm = n["qk_layernorm"].as<bool>();
  m.hidden_dropout = n["hidden_dropout"].as<double>();
  m.attention_dropout = n["attention_dropout"].as<double>();
  m.position_embedding_type = workload::PositionEmbedding::Rope;
  set_int("num_experts", m.num_experts);
  set_int("moe_router_topk", m.moe_router_topk);
  set_int("moe_ffn_hidden_size", m.moe_ffn_hidden_size);
  set_int("moe_shared_expert_intermediate_size", m.moe_shared_expert_intermediate_size);
  set_int("moe_router_num_groups", m.moe_router_num_groups);
  set_int("moe_router_group_topk", m.moe_router_group_topk);
  if (n["moe_layer_freq"])
    for (const auto& x : n["moe_layer_freq"])
      m.moe_layer_pattern.push_back(static_cast<std::uint8_t>(x.as<int>()));
  if (n["multi_latent_attention"]) {
    m.multi_latent_attention = true;
    set_int("q_lora_rank", m.q_lora_rank);
    set_int("kv_lora_rank", m.kv_lora_rank);
    set_int("qk_head_dim", m.qk_head_dim);
    set_int("qk_pos_emb_head_dim", m.qk_pos_emb_head_dim);
    set_int("v_head_dim", m.v_head_dim);
  }
  return m;
}

}  // namespace scalescope::io
