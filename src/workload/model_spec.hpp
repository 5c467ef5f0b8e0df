#pragma once
/// Dense decoder-only transformer description. Key names follow Megatron-LM's arguments.
#include <cstdint>
#include <string>

namespace scalescope::workload {

/// Megatron's --position-embedding-type: RoPE rotates q and k in every layer (Llama); learned
/// absolute embeddings are added once to the token embeddings (GPT-2/3), no per-layer op.
enum class PositionEmbedding : std::uint8_t { Rope, LearnedAbsolute };

struct ModelSpec {
  std::string name = "model";
  std::int64_t num_layers = 0;
  std::int64_t hidden_size = 0;
  std::int64_t ffn_hidden_size = 0;  ///< 0 → 4·hidden_size (Megatron's default)
  std::int64_t num_attention_heads = 0;
  std::int64_t num_query_groups = 0;  ///< 0 → num_attention_heads (MHA)
  std::int64_t kv_channels = 0;       ///< head dim; 0 → hidden_size / num_attention_heads
  std::int64_t vocab_size = 0;        ///< tokenizer vocabulary, padded as Megatron does
  std::int64_t make_vocab_size_divisible_by = 128;
  std::int64_t seq_length = 0;
  bool gated_linear_unit = false;  ///< SwiGLU (Llama) instead of GELU (GPT)
  bool untie_embeddings = false;   ///< Megatron's --untie-embeddings-and-output-weights
  bool add_bias_linear = true;     ///< GPT-3 has biases; Llama does not
  double hidden_dropout = 0.0;     ///< > 0 stores 1-byte dropout masks
  double attention_dropout = 0.0;
  /// Megatron's own default is learned_absolute; scalescope's is RoPE, what every model had
  /// before this key existed.
  PositionEmbedding position_embedding_type = PositionEmbedding::Rope;

  std::int64_t ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  std::int64_t query_groups() const {
    return num_query_groups > 0 ? num_query_groups : num_attention_heads;
  }
  std::int64_t head_dim() const {
    return kv_channels > 0 ? kv_channels : hidden_size / num_attention_heads;
  }
  std::int64_t query_width() const { return num_attention_heads * head_dim(); }  ///< q = a·dh
  std::int64_t kv_width() const { return query_groups() * head_dim(); }          ///< g·dh
  /// Vocabulary padded to a multiple of make_vocab_size_divisible_by·tp
  /// (megatron/training/tokenizer/tokenizer.py::_vocab_size_with_padding).
  std::int64_t padded_vocab(std::int64_t tp) const {
    const std::int64_t m = make_vocab_size_divisible_by * tp;
    return (vocab_size + m - 1) / m * m;
  }
};

}  // namespace scalescope::workload
