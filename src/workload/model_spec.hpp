#pragma once
/// Dense decoder-only transformer description. Key names follow Megatron-LM's arguments.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "workload/capture.hpp"

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
  bool add_qkv_bias = false;       ///< a bias on Q, K and V only (Qwen2; --add-qkv-bias)
  /// A norm over each query and key head before rotary embedding (Qwen3, OLMo 2; --qk-layernorm),
  /// LayerNorm or RMSNorm as the model's other norms, weights of head_dim shared by the heads.
  bool qk_layernorm = false;
  double hidden_dropout = 0.0;  ///< > 0 stores 1-byte dropout masks
  double attention_dropout = 0.0;
  /// Megatron's own default is learned_absolute; scalescope's is RoPE, what every model had
  /// before this key existed.
  PositionEmbedding position_embedding_type = PositionEmbedding::Rope;

  /// Multi-token prediction (DeepSeek-V3; Megatron's --mtp-num-layers): D modules on the last
  /// pipeline stage after the decoder, each an embedding of the tokens one further ahead, two
  /// norms, a [2h → h] projection, one transformer layer built like the decoder's last, a norm
  /// and the shared output layer with its own loss
  /// (megatron/core/transformer/multi_token_prediction.py). Their layers are numbered
  /// num_layers … num_layers + D − 1. 0 = none.
  std::int64_t mtp_num_layers = 0;

  // ---- mixture of experts (Megatron-Core TransformerConfig names) ----
  std::int64_t num_experts = 0;          ///< routed experts per MoE layer; 0 = a dense model
  std::int64_t moe_router_topk = 2;      ///< experts each token is routed to
  std::int64_t moe_ffn_hidden_size = 0;  ///< one routed expert's FFN width; 0 → ffn_hidden_size
  /// Width of the shared experts (all of them together, DeepSeek's n_shared_experts ×
  /// moe_intermediate_size); 0 = none.
  std::int64_t moe_shared_expert_intermediate_size = 0;
  /// Which layers are MoE, one entry per layer (1 = MoE), resolved from Megatron's
  /// --moe-layer-freq (an int N: every N-th layer from layer 0; or a pattern list). Empty with a
  /// dense model, or before resolution (then every layer is MoE).
  std::vector<std::uint8_t> moe_layer_pattern;
  /// Megatron's --moe-expert-capacity-factor: each expert takes at most factor × T·k/E tokens
  /// and drops the rest; 0 = dropless (the default).
  double moe_expert_capacity_factor = 0;
  /// Group-limited routing (DeepSeek-V3's node-limited routing; Megatron's
  /// --moe-router-num-groups, --moe-router-group-topk): the experts form num_groups groups of
  /// consecutive experts, and a token's top-k experts come from its group_topk best groups. 0 =
  /// no limit. Only the flex dispatcher's cost reads it (the nodes a token reaches).
  std::int64_t moe_router_num_groups = 0;
  std::int64_t moe_router_group_topk = 0;
  /// The router's load-balancing loss coefficient (Megatron's --moe-aux-loss-coeff; 0, its
  /// default, runs no aux-loss kernels). Only the router's kernel count reads it
  /// (workload/moe_kernels.hpp); the loss itself does not change the work.
  double moe_aux_loss_coeff = 0;

  // ---- multi-latent attention (DeepSeek-V2/V3; Megatron's MLATransformerConfig names) ----
  bool multi_latent_attention = false;
  std::int64_t q_lora_rank = 0;  ///< 0 = queries projected directly (no low-rank compression)
  std::int64_t kv_lora_rank = 512;
  std::int64_t qk_head_dim = 128;         ///< the non-rotary part of a query/key head
  std::int64_t qk_pos_emb_head_dim = 64;  ///< the rotary part (one key shared by all heads)
  std::int64_t v_head_dim = 128;

  /// A captured model (model.source: capture.h5, docs/flint.md): its lowered block replaces the
  /// built-in transformer layer; the shape keys above still size the embedding, the head and the
  /// parameter accounting (they must agree with the capture).
  std::shared_ptr<const Capture> capture;
  TpPlan capture_plan;
  std::string capture_path;
  /// What the output says about the capture's use (num_layers repeating the captured block
  /// another number of times); empty: nothing.
  std::string capture_note;
  std::string capture_plan_name;  ///< llama | gpt (model.tp_plan); empty for any other plan
  /// model.compile: inductor (default; torch.compile's fused attention and point-wise kernels)
  /// or eager (one kernel per ATen op) for the blocks, and for the outer graph (embedding, head,
  /// loss) as well but with `blocks` (torchtitan's per-block compile), where it runs eager.
  bool capture_compiled = true;
  bool capture_outer_compiled = true;
  /// model.sdpa: the backend PyTorch's scaled_dot_product_attention runs for the captured model:
  /// flash (default; FlashAttention-2, PyTorch's default on Hopper until cuDNN ≥ 9.15 and what
  /// torchtitan pins on H100) or cudnn (cuDNN's fused attention, FlashAttention-3's rates).
  bool capture_sdpa_flash = true;
  /// model.fusion: inductor (default: Inductor's own kernels where the capture read them,
  /// CapturedNode::kernel) or rederived (the lowering's fusion rules, docs/flint.md §2).
  bool capture_fusion_read = true;
  /// model.causal_mask: when a captured attention is costed as causal (half the square).
  CausalMask capture_causal_mask = CausalMask::Auto;
  /// model.outer: captured (default; the capture's embedding, head and loss, where it has them)
  /// or builder (the built-in ones).
  bool capture_outer = true;

  bool moe() const { return num_experts > 0; }
  /// With PP > 1 the last stage holds a copy of the word embedding whose gradient is all-reduced
  /// with the first stage's: a tied output layer, or MTP's embedding lookups
  /// (finalize_model_grads._allreduce_word_embedding_grads).
  bool embedding_copy_on_last_stage() const { return !untie_embeddings || mtp_num_layers > 0; }
  /// Layer `layer` is an MTP module's (numbered after the decoder's).
  bool is_mtp_layer(std::int64_t layer) const { return layer >= num_layers; }
  /// An MTP module's layer is built like the decoder's last (Megatron's get_gpt_mtp_block_spec
  /// takes the last layer spec; training.py counts it so).
  bool is_moe_layer(std::int64_t layer) const {
    if (!moe()) return false;
    if (moe_layer_pattern.empty()) return true;
    if (is_mtp_layer(layer)) layer = num_layers - 1;
    return moe_layer_pattern[static_cast<std::size_t>(layer)] != 0;
  }
  std::int64_t moe_layers() const {
    std::int64_t n = 0;
    for (std::int64_t l = 0; l < num_layers; ++l) n += is_moe_layer(l) ? 1 : 0;
    return n;
  }
  std::int64_t expert_ffn() const { return moe_ffn_hidden_size > 0 ? moe_ffn_hidden_size : ffn(); }
  /// Width of a query / key head as attention's scores see it, and of a value head.
  std::int64_t qk_dim() const {
    return multi_latent_attention ? qk_head_dim + qk_pos_emb_head_dim : head_dim();
  }
  std::int64_t v_dim() const { return multi_latent_attention ? v_head_dim : head_dim(); }
  /// Attention's value / output width a·dv (the out-projection's input).
  std::int64_t attn_out_width() const { return num_attention_heads * v_dim(); }

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
