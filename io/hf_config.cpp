// Hugging Face config.json (LlamaConfig, MistralConfig, Qwen2Config) → model keys.
// Field meanings: transformers/models/{llama,mistral,qwen2}/configuration_*.py; the Megatron
// equivalents follow Megatron-LM's tools/checkpoint/loader_llama_mistral.py.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

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
  if (!std::filesystem::is_regular_file(path))
    throw_input("{}: Hugging Face config not found", path);
  std::ifstream in(path);
  if (!in) throw_input("{}: cannot open Hugging Face config", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw_input("{}: malformed JSON at byte {}: {}", path, e.byte, e.what());
  }
  if (!j.is_object()) throw_input("{}: expected a JSON object", path);

  YAML::Node m(YAML::NodeType::Map);
  if (auto name = get_string(j, path, "model_type")) m["name"] = *name;
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
  // The three families use a gated MLP, act_fn(gate(x)) * up(x); with SiLU that is SwiGLU,
  // Megatron's --swiglu. Any other activation is read as the plain (GPT) MLP.
  const std::string act = get_string(j, path, "hidden_act").value_or("silu");
  m["gated_linear_unit"] = act == "silu" || act == "swish";
  // attention_bias / mlp_bias (Llama) put biases on the linear layers. Qwen2's QKV-only bias
  // is not represented (Megatron's --add-qkv-bias); it changes no FLOP or memory term that
  // matters at this scale.
  m["add_bias_linear"] = get_bool(j, path, "attention_bias").value_or(false) ||
                         get_bool(j, path, "mlp_bias").value_or(false);
  // Llama-family models train without hidden-state dropout; attention dropout is a key.
  m["hidden_dropout"] = 0.0;
  m["attention_dropout"] = get_double(j, path, "attention_dropout").value_or(0.0);
  // Llama, Mistral and Qwen2 all apply rotary embeddings to q and k (rope_theta).
  m["position_embedding_type"] = "rope";
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
  m.hidden_dropout = n["hidden_dropout"].as<double>();
  m.attention_dropout = n["attention_dropout"].as<double>();
  m.position_embedding_type = workload::PositionEmbedding::Rope;
  return m;
}

}  // namespace scalescope::io
