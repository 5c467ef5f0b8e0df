// A Megatron-LM launch line → configuration keys. Option names, their defaults and the checks
// made here follow megatron/training/arguments.py (argparse with allow_abbrev=False: no
// abbreviations; a repeated option, the last one wins) and megatron/core TransformerConfig.
#include "io/megatron_args.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include "core/error.hpp"
#include "io/yaml_util.hpp"

namespace scalescope::io::detail {

namespace {

enum class Kind : std::uint8_t {
  Value,        ///< --opt V sets section.key = V
  Flag,         ///< --opt sets section.key = value
  Special,      ///< --opt V, read below
  SpecialFlag,  ///< --opt, read below
  Ignored,      ///< --opt V: no effect on one iteration's performance
  IgnoredFlag,  ///< --opt
  IgnoredList,  ///< --opt V [V …] (argparse nargs='*')
  SpecialList,  ///< --opt V [V …], read below
  Unmodelled,   ///< --opt V: changes the iteration in a way scalescope does not model
  UnmodelledFlag
};

struct Option {
  std::string_view name;
  Kind kind;
  std::string_view section = {};
  std::string_view key = {};
  std::string_view value = {};  ///< Flag: the value it sets; Unmodelled*: why it is refused
};

// The order of this table is the order in which settings are applied; it does not matter, as
// no two rows set the same key.
constexpr Option kOptions[] = {
    // ---- model (docs/config.md `model:`)
    {"--num-layers", Kind::Value, "model", "num_layers"},
    {"--hidden-size", Kind::Value, "model", "hidden_size"},
    {"--ffn-hidden-size", Kind::Value, "model", "ffn_hidden_size"},
    {"--num-attention-heads", Kind::Value, "model", "num_attention_heads"},
    {"--kv-channels", Kind::Value, "model", "kv_channels"},
    {"--vocab-size", Kind::Value, "model", "vocab_size"},
    {"--make-vocab-size-divisible-by", Kind::Value, "model", "make_vocab_size_divisible_by"},
    {"--seq-length", Kind::Value, "model", "seq_length"},
    {"--hidden-dropout", Kind::Value, "model", "hidden_dropout"},
    {"--attention-dropout", Kind::Value, "model", "attention_dropout"},
    {"--position-embedding-type", Kind::Value, "model", "position_embedding_type"},
    {"--use-rotary-position-embeddings", Kind::Flag, "model", "position_embedding_type", "rope"},
    {"--swiglu", Kind::Flag, "model", "gated_linear_unit", "true"},
    {"--untie-embeddings-and-output-weights", Kind::Flag, "model", "untie_embeddings", "true"},
    {"--disable-bias-linear", Kind::Flag, "model", "add_bias_linear", "false"},
    {"--group-query-attention", Kind::SpecialFlag},
    {"--num-query-groups", Kind::Special},
    {"--padded-vocab-size", Kind::Special},
    // ---- parallel
    {"--tensor-model-parallel-size", Kind::Value, "parallel", "tensor_model_parallel_size"},
    {"--pipeline-model-parallel-size", Kind::Value, "parallel", "pipeline_model_parallel_size"},
    {"--virtual-pipeline-model-parallel-size", Kind::Value, "parallel",
     "virtual_pipeline_model_parallel_size"},
    {"--num-virtual-stages-per-pipeline-rank", Kind::Value, "parallel",
     "virtual_pipeline_model_parallel_size"},
    {"--num-layers-per-virtual-pipeline-stage", Kind::Special},
    {"--microbatch-group-size-per-virtual-pipeline-stage", Kind::Value, "parallel",
     "microbatch_group_size_per_vp_stage"},
    {"--no-overlap-p2p-communication", Kind::Flag, "parallel", "overlap_p2p_comm", "false"},
    {"--overlap-p2p-communication", Kind::Flag, "parallel", "overlap_p2p_comm", "true"},
    {"--decoder-first-pipeline-num-layers", Kind::Value, "parallel",
     "decoder_first_pipeline_num_layers"},
    {"--decoder-last-pipeline-num-layers", Kind::Value, "parallel",
     "decoder_last_pipeline_num_layers"},
    {"--pipeline-model-parallel-layout", Kind::Value, "parallel", "pipeline_layout"},
    {"--account-for-embedding-in-pipeline-split", Kind::Flag, "parallel",
     "account_for_embedding_in_pipeline_split", "true"},
    {"--account-for-loss-in-pipeline-split", Kind::Flag, "parallel",
     "account_for_loss_in_pipeline_split", "true"},
    {"--sequence-parallel", Kind::SpecialFlag},
    {"--fp8-param-gather", Kind::Flag, "parallel", "fp8_param_gather", "true"},
    // NVFP4 (Megatron's --fp4-format e2m1 --fp4-recipe nvfp4; its parameters gathered in NVFP4
    // with --fp4-param-gather, the same key as fp8's).
    {"--fp4-param-gather", Kind::Flag, "parallel", "fp8_param_gather", "true"},
    {"--fp4-format", Kind::Special},
    {"--fp4-recipe", Kind::Special},
    {"--fp8-recipe", Kind::Value, "training", "fp8_recipe"},
    {"--use-distributed-optimizer", Kind::Flag, "parallel", "use_distributed_optimizer", "true"},
    {"--overlap-grad-reduce", Kind::Flag, "parallel", "overlap_grad_reduce", "true"},
    {"--overlap-param-gather", Kind::Flag, "parallel", "overlap_param_gather", "true"},
    {"--tp-comm-overlap", Kind::Flag, "parallel", "tp_comm_overlap", "true"},
    {"--use-torch-fsdp2", Kind::SpecialFlag},
    {"--grad-reduce-in-bf16", Kind::Flag, "parallel", "grad_reduce_in_fp32", "false"},
    {"--ddp-bucket-size", Kind::Value, "parallel", "ddp_bucket_size"},
    {"--recompute-activations", Kind::SpecialFlag},
    {"--recompute-granularity", Kind::Special},
    {"--recompute-method", Kind::Special},
    {"--recompute-num-layers", Kind::Special},
    {"--recompute-modules", Kind::SpecialList},
    {"--context-parallel-size", Kind::Special},
    {"--cp-comm-type", Kind::Value, "parallel", "cp_comm_type"},
    {"--expert-model-parallel-size", Kind::Value, "parallel", "expert_model_parallel_size"},
    {"--expert-tensor-parallel-size", Kind::Value, "parallel", "expert_tensor_parallel_size"},
    {"--moe-token-dispatcher-type", Kind::Value, "parallel", "moe_token_dispatcher_type"},
    {"--moe-shared-expert-overlap", Kind::Flag, "parallel", "moe_shared_expert_overlap", "true"},
    {"--overlap-moe-expert-parallel-comm", Kind::Flag, "parallel", "moe_a2a_overlap", "true"},
    {"--delay-wgrad-compute", Kind::Flag, "parallel", "delay_wgrad_compute", "true"},
    {"--moe-permute-fusion", Kind::Flag, "parallel", "moe_permute_fusion", "true"},
    {"--moe-router-fusion", Kind::Flag, "parallel", "moe_router_fusion", "true"},
    // The older switch for the flex dispatcher with DeepEP; the backend (deepep, hybridep) is
    // not told apart (both send a token once per node).
    {"--moe-enable-deepep", Kind::Flag, "parallel", "moe_token_dispatcher_type", "flex"},
    {"--moe-flex-dispatcher-backend", Kind::Ignored},
    {"--mtp-num-layers", Kind::Value, "model", "mtp_num_layers"},
    {"--mtp-loss-scaling-factor", Kind::Ignored},  // scales a loss, not the work
    {"--num-experts", Kind::Value, "model", "num_experts"},
    {"--moe-router-topk", Kind::Value, "model", "moe_router_topk"},
    {"--moe-ffn-hidden-size", Kind::Value, "model", "moe_ffn_hidden_size"},
    {"--moe-shared-expert-intermediate-size", Kind::Value, "model",
     "moe_shared_expert_intermediate_size"},
    {"--moe-layer-freq", Kind::Value, "model", "moe_layer_freq"},
    {"--moe-expert-capacity-factor", Kind::Value, "model", "moe_expert_capacity_factor"},
    {"--multi-latent-attention", Kind::Flag, "model", "multi_latent_attention", "true"},
    {"--q-lora-rank", Kind::Value, "model", "q_lora_rank"},
    {"--kv-lora-rank", Kind::Value, "model", "kv_lora_rank"},
    {"--qk-head-dim", Kind::Value, "model", "qk_head_dim"},
    {"--qk-pos-emb-head-dim", Kind::Value, "model", "qk_pos_emb_head_dim"},
    {"--v-head-dim", Kind::Value, "model", "v_head_dim"},
    // ---- training
    {"--micro-batch-size", Kind::Value, "training", "micro_batch_size"},
    {"--global-batch-size", Kind::Value, "training", "global_batch_size"},
    {"--bf16", Kind::SpecialFlag},
    {"--fp16", Kind::SpecialFlag},
    {"--fp8-format", Kind::Special},
    {"--use-flash-attn", Kind::SpecialFlag},
    {"--attention-backend", Kind::Special},
    {"--optimizer", Kind::Special},
    // ---- accepted and ignored: no effect on one training iteration's time or memory
    // (docs/config.md lists them). Fusion switches are here too: scalescope models Megatron's
    // default fused kernels.
    {"--max-position-embeddings", Kind::Ignored},
    {"--apply-layernorm-1p", Kind::IgnoredFlag},  // zero-centred γ: the same kernels
    {"--decoupled-lr", Kind::Ignored},
    {"--decoupled-min-lr", Kind::Ignored},
    {"--calculate-per-token-loss", Kind::IgnoredFlag},
    {"--empty-unused-memory-level", Kind::Ignored},  // releases cached, not allocated, memory
    {"--fp8-amax-history-len", Kind::Ignored},
    {"--fp8-amax-compute-algo", Kind::Ignored},
    {"--tiktoken-pattern", Kind::Ignored},
    {"--profile", Kind::IgnoredFlag},
    {"--profile-step-start", Kind::Ignored},
    {"--profile-step-end", Kind::Ignored},
    {"--profile-ranks", Kind::IgnoredList},
    {"--transformer-impl", Kind::Ignored},
    {"--tokenizer-type", Kind::Special},
    {"--no-position-embedding", Kind::IgnoredFlag},  // legacy; --position-embedding-type rules
    {"--rampup-batch-size", Kind::IgnoredList},      // the steady state has the full batch
    {"--tokenizer-model", Kind::Ignored},
    {"--vocab-file", Kind::Ignored},
    {"--merge-file", Kind::Ignored},
    {"--train-iters", Kind::Ignored},
    {"--train-samples", Kind::Ignored},
    {"--exit-interval", Kind::Ignored},
    {"--exit-duration-in-mins", Kind::Ignored},
    {"--lr", Kind::Ignored},
    {"--min-lr", Kind::Ignored},
    {"--lr-decay-style", Kind::Ignored},
    {"--lr-decay-iters", Kind::Ignored},
    {"--lr-decay-samples", Kind::Ignored},
    {"--lr-warmup-iters", Kind::Ignored},
    {"--lr-warmup-samples", Kind::Ignored},
    {"--lr-warmup-fraction", Kind::Ignored},
    {"--lr-warmup-init", Kind::Ignored},
    {"--weight-decay", Kind::Ignored},
    {"--start-weight-decay", Kind::Ignored},
    {"--end-weight-decay", Kind::Ignored},
    {"--weight-decay-incr-style", Kind::Ignored},
    {"--clip-grad", Kind::Ignored},
    {"--adam-beta1", Kind::Ignored},
    {"--adam-beta2", Kind::Ignored},
    {"--adam-eps", Kind::Ignored},
    {"--init-method-std", Kind::Ignored},
    {"--seed", Kind::Ignored},
    {"--loss-scale", Kind::Ignored},
    {"--initial-loss-scale", Kind::Ignored},
    {"--min-loss-scale", Kind::Ignored},
    {"--loss-scale-window", Kind::Ignored},
    {"--hysteresis", Kind::Ignored},
    {"--rotary-base", Kind::Ignored},
    {"--rotary-percent", Kind::Ignored},
    {"--normalization", Kind::Ignored},
    {"--norm-epsilon", Kind::Ignored},
    {"--save", Kind::Ignored},
    {"--load", Kind::Ignored},
    {"--save-interval", Kind::Ignored},
    {"--ckpt-format", Kind::Ignored},
    {"--eval-interval", Kind::Ignored},
    {"--eval-iters", Kind::Ignored},
    {"--split", Kind::Ignored},
    {"--data-cache-path", Kind::Ignored},
    {"--num-workers", Kind::Ignored},
    {"--dataloader-type", Kind::Ignored},
    {"--log-interval", Kind::Ignored},
    {"--tensorboard-dir", Kind::Ignored},
    {"--tensorboard-log-interval", Kind::Ignored},
    {"--wandb-project", Kind::Ignored},
    {"--wandb-exp-name", Kind::Ignored},
    {"--wandb-save-dir", Kind::Ignored},
    {"--timing-log-level", Kind::Ignored},
    {"--timing-log-option", Kind::Ignored},
    {"--distributed-backend", Kind::Ignored},
    {"--distributed-timeout-minutes", Kind::Ignored},
    {"--manual-gc-interval", Kind::Ignored},
    {"--data-path", Kind::IgnoredList},
    {"--train-data-path", Kind::IgnoredList},
    {"--valid-data-path", Kind::IgnoredList},
    {"--test-data-path", Kind::IgnoredList},
    {"--mock-data", Kind::IgnoredFlag},
    {"--no-mmap-bin-files", Kind::IgnoredFlag},
    {"--eod-mask-loss", Kind::IgnoredFlag},
    {"--reset-position-ids", Kind::IgnoredFlag},
    {"--reset-attention-mask", Kind::IgnoredFlag},
    {"--no-create-attention-mask-in-dataloader", Kind::IgnoredFlag},
    {"--use-mcore-models", Kind::IgnoredFlag},
    {"--use-checkpoint-args", Kind::IgnoredFlag},
    {"--no-load-optim", Kind::IgnoredFlag},
    {"--no-load-rng", Kind::IgnoredFlag},
    {"--finetune", Kind::IgnoredFlag},
    {"--use-dist-ckpt", Kind::IgnoredFlag},
    {"--async-save", Kind::IgnoredFlag},
    {"--exit-signal-handler", Kind::IgnoredFlag},
    {"--manual-gc", Kind::IgnoredFlag},
    {"--use-cpu-initialization", Kind::IgnoredFlag},
    {"--check-for-nan-in-loss-and-grad", Kind::IgnoredFlag},
    {"--no-check-for-nan-in-loss-and-grad", Kind::IgnoredFlag},
    {"--log-throughput", Kind::IgnoredFlag},
    {"--log-progress", Kind::IgnoredFlag},
    {"--log-params-norm", Kind::IgnoredFlag},
    {"--log-num-zeros-in-grad", Kind::IgnoredFlag},
    {"--log-timers-to-tensorboard", Kind::IgnoredFlag},
    {"--log-validation-ppl-to-tensorboard", Kind::IgnoredFlag},
    {"--log-memory-to-tensorboard", Kind::IgnoredFlag},
    {"--init-method-xavier-uniform", Kind::IgnoredFlag},
    {"--apply-query-key-layer-scaling", Kind::IgnoredFlag},
    {"--attention-softmax-in-fp32", Kind::IgnoredFlag},
    {"--accumulate-allreduce-grads-in-fp32", Kind::IgnoredFlag},
    {"--fp16-lm-cross-entropy", Kind::IgnoredFlag},
    {"--no-masked-softmax-fusion", Kind::IgnoredFlag},
    {"--no-bias-gelu-fusion", Kind::IgnoredFlag},
    {"--no-bias-swiglu-fusion", Kind::IgnoredFlag},
    {"--no-bias-dropout-fusion", Kind::IgnoredFlag},
    {"--no-rope-fusion", Kind::IgnoredFlag},
    {"--no-gradient-accumulation-fusion", Kind::IgnoredFlag},
    {"--no-persist-layer-norm", Kind::IgnoredFlag},
    {"--cross-entropy-loss-fusion", Kind::IgnoredFlag},
    {"--moe-grouped-gemm", Kind::IgnoredFlag},
    {"--moe-router-enable-expert-bias", Kind::IgnoredFlag},
    {"--moe-router-load-balancing-type", Kind::Special},
    {"--moe-z-loss-coeff", Kind::Ignored},
    {"--moe-router-dtype", Kind::Ignored},
    {"--moe-router-score-function", Kind::Ignored},
    {"--moe-router-topk-scaling-factor", Kind::Ignored},
    {"--moe-router-bias-update-rate", Kind::Ignored},
    {"--moe-router-num-groups", Kind::Value, "model", "moe_router_num_groups"},
    {"--moe-router-group-topk", Kind::Value, "model", "moe_router_group_topk"},
    {"--moe-aux-loss-coeff", Kind::Special},
    // ---- refused: they change the iteration in ways scalescope does not model
    {"--qk-layernorm", Kind::Flag, "model", "qk_layernorm", "true"},
    {"--add-qkv-bias", Kind::Flag, "model", "add_qkv_bias", "true"},
    {"--cpu-offloading", Kind::UnmodelledFlag, {}, {}, "activation offloading to the CPU"},
};

const Option* find_option(std::string_view name) {
  for (const Option& o : kOptions)
    if (o.name == name) return &o;
  return nullptr;
}

bool takes_value(Kind k) {
  return k == Kind::Value || k == Kind::Special || k == Kind::Ignored || k == Kind::IgnoredList ||
         k == Kind::SpecialList || k == Kind::Unmodelled;
}

/// An option as given: its value ("" for a flag) and its text as written, for messages.
struct Given {
  std::string value;
  std::string text;
};

}  // namespace

std::vector<std::string> split_shell_words(std::string_view text, std::string_view label) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  std::size_t i = 0;
  const auto end_word = [&] {
    if (in_word) words.push_back(word);
    word.clear();
    in_word = false;
  };
  while (i < text.size()) {
    const char ch = text[i];
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
      end_word();
      ++i;
    } else if (ch == '#' && !in_word) {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (ch == '\\') {
      if (i + 1 < text.size() && text[i + 1] == '\n') {  // line continuation
        i += 2;
        continue;
      }
      if (i + 1 < text.size()) word += text[i + 1];
      in_word = true;
      i += 2;
    } else if (ch == '\'') {
      const std::size_t close = text.find('\'', i + 1);
      if (close == std::string_view::npos)
        throw_input("{}: unterminated ' quote in the launch line", label);
      word.append(text.substr(i + 1, close - i - 1));
      in_word = true;
      i = close + 1;
    } else if (ch == '"') {
      in_word = true;
      ++i;
      for (;;) {
        if (i >= text.size()) throw_input("{}: unterminated \" quote in the launch line", label);
        const char c = text[i];
        if (c == '"') {
          ++i;
          break;
        }
        if (c == '\\' && i + 1 < text.size() &&
            std::string_view("\"\\$`\n").find(text[i + 1]) != std::string_view::npos) {
          if (text[i + 1] != '\n') word += text[i + 1];
          i += 2;
          continue;
        }
        word += c;
        ++i;
      }
    } else {
      word += ch;
      in_word = true;
      ++i;
    }
  }
  end_word();
  return words;
}

LaunchLine parse_megatron_args(std::string_view text, std::string_view label) {
  std::vector<std::string> words = split_shell_words(text, label);
  // `torchrun … pretrain_gpt.py --num-layers …`: the arguments start after the script.
  const auto script = std::find_if(words.begin(), words.end(), [](const std::string& w) {
    return w.size() > 3 && w.ends_with(".py");
  });
  if (script != words.end()) words.erase(words.begin(), script + 1);

  std::map<std::string, Given, std::less<>> given;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w.find('$') != std::string::npos)
      throw_input("{}: '{}': shell variables are not expanded; paste their values", label, w);
    if (!w.starts_with("--") || w.size() == 2)
      throw_input("{}: unexpected argument '{}' (expected a Megatron-LM option --name)", label, w);
    const std::size_t eq = w.find('=');
    const std::string name = w.substr(0, eq);
    const Option* o = find_option(name);
    if (o == nullptr && name.starts_with("--moe-"))
      throw_input("{}: {}: not modelled by scalescope (mixture-of-experts layers)", label, name);
    if (o == nullptr) {
      std::vector<std::string_view> known;
      for (const Option& k : kOptions) known.push_back(k.name);
      throw_input("{}: unknown Megatron-LM option {}{}", label, name, did_you_mean(name, known));
    }
    Given g;
    if (takes_value(o->kind)) {
      if (eq != std::string::npos) {
        g.value = w.substr(eq + 1);
        g.text = w;
      } else {
        if (i + 1 >= words.size() || words[i + 1].starts_with("--"))
          throw_input("{}: {} expects a value after it", label, name);
        g.value = words[++i];
        g.text = name + " " + g.value;
        // nargs='*': every word up to the next option (kept, space-separated, for a list)
        if (o->kind == Kind::IgnoredList || o->kind == Kind::SpecialList)
          while (i + 1 < words.size() && !words[i + 1].starts_with("--")) {
            g.value += " " + words[++i];
            g.text += " " + words[i];
          }
      }
    } else {
      if (eq != std::string::npos)
        throw_input("{}: {} is a flag and takes no value (got '{}')", label, name, w);
      g.text = name;
    }
    if (o->kind == Kind::Unmodelled || o->kind == Kind::UnmodelledFlag)
      throw_input("{}: {}: not modelled by scalescope ({})", label, g.text, o->value);
    given.insert_or_assign(name, std::move(g));
  }

  LaunchLine line;
  line.words = std::move(words);
  const auto has = [&](std::string_view n) { return given.find(n) != given.end(); };
  const auto at = [&](std::string_view n) -> const Given& { return given.find(n)->second; };
  const auto set = [&](std::string_view section, std::string_view key, std::string_view value,
                       const Given& g) {
    line.settings.push_back(
        {std::string(section), std::string(key), YAML::Node(std::string(value)), g.text});
  };
  const auto refuse = [&](std::string_view n, std::string_view why) {
    throw_input("{}: {}: {}", label, at(n).text, why);
  };
  const auto both = [&](std::string_view a, std::string_view b, std::string_view why) {
    if (has(a) && has(b)) throw_input("{}: {} and {} cannot be combined ({})", label, a, b, why);
  };

  for (const Option& o : kOptions) {
    if (!has(o.name)) continue;
    if (o.kind == Kind::Value) set(o.section, o.key, at(o.name).value, at(o.name));
    if (o.kind == Kind::Flag) set(o.section, o.key, o.value, at(o.name));
  }

  // Grouped-query attention: Megatron reads --num-query-groups (default 1) only with
  // --group-query-attention; without it the model is MHA whatever --num-query-groups says.
  if (has("--group-query-attention"))
    set("model", "num_query_groups",
        has("--num-query-groups") ? at("--num-query-groups").value : "1",
        has("--num-query-groups") ? at("--num-query-groups") : at("--group-query-attention"));
  else if (has("--num-query-groups"))
    refuse("--num-query-groups",
           "needs --group-query-attention (without it Megatron-LM ignores it and builds MHA)");

  // A vocabulary already padded: no further rounding to make_vocab_size_divisible_by.
  both("--vocab-size", "--padded-vocab-size", "give the vocabulary once");
  both("--make-vocab-size-divisible-by", "--padded-vocab-size",
       "a padded vocabulary is not padded again");
  // Without a vocabulary size, Megatron takes the tokenizer's: the two fixed vocabularies of
  // its examples (megatron/training/tokenizer: GPT-2's BPE, a --vocab-file with a --merge-file,
  // has 50,257 entries, Llama 2's SentencePiece model 32,000); any other tokenizer needs
  // --vocab-size.
  if (!has("--vocab-size") && !has("--padded-vocab-size")) {
    const bool gpt2 = has("--tokenizer-type") ? at("--tokenizer-type").value == "GPT2BPETokenizer"
                                              : has("--merge-file");
    if (gpt2)
      set("model", "vocab_size", "50257",
          at(has("--tokenizer-type") ? "--tokenizer-type" : "--merge-file"));
    if (has("--tokenizer-type") && at("--tokenizer-type").value == "Llama2Tokenizer")
      set("model", "vocab_size", "32000", at("--tokenizer-type"));
  }
  if (has("--padded-vocab-size")) {
    set("model", "vocab_size", at("--padded-vocab-size").value, at("--padded-vocab-size"));
    set("model", "make_vocab_size_divisible_by", "1", at("--padded-vocab-size"));
  }

  both("--virtual-pipeline-model-parallel-size", "--num-virtual-stages-per-pipeline-rank",
       "both give the virtual pipeline size");
  both("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
       "Megatron-LM: they are mutually exclusive");
  both("--num-layers-per-virtual-pipeline-stage", "--virtual-pipeline-model-parallel-size",
       "both give the virtual pipeline size");
  if (has("--num-layers-per-virtual-pipeline-stage")) {
    const Given& g = at("--num-layers-per-virtual-pipeline-stage");
    std::int64_t n = 0;
    const auto r = std::from_chars(g.value.data(), g.value.data() + g.value.size(), n);
    if (r.ec != std::errc{} || r.ptr != g.value.data() + g.value.size() || n <= 0)
      refuse("--num-layers-per-virtual-pipeline-stage", "expected an integer > 0");
    line.layers_per_virtual_stage = n;
    line.layers_per_virtual_stage_option = g.text;
  }

  // Recomputation: --recompute-activations is selective recomputation and wins over
  // --recompute-granularity (arguments.py); full recomputation takes Megatron's method (uniform
  // groups or the first block of layers) and layer count (docs/model.md).
  if (has("--recompute-activations")) {
    set("parallel", "recompute", "selective", at("--recompute-activations"));
  } else if (has("--recompute-granularity")) {
    const Given& g = at("--recompute-granularity");
    if (g.value == "selective") {
      set("parallel", "recompute", "selective", g);
    } else if (g.value == "full") {
      if (!has("--recompute-method") || !has("--recompute-num-layers"))
        refuse("--recompute-granularity",
               "full recomputation needs --recompute-method (uniform or block) and "
               "--recompute-num-layers (Megatron-LM requires a method and a layer count)");
      if (at("--recompute-method").value != "uniform" && at("--recompute-method").value != "block")
        refuse("--recompute-method", "expected uniform or block");
      set("parallel", "recompute", "full", g);
      set("parallel", "recompute_method", at("--recompute-method").value, at("--recompute-method"));
      set("parallel", "recompute_num_layers", at("--recompute-num-layers").value,
          at("--recompute-num-layers"));
    } else {
      refuse("--recompute-granularity", "expected full or selective");
    }
  }

  // --recompute-modules a b …: the submodules selective recomputation reruns.
  if (has("--recompute-modules")) {
    YAML::Node list(YAML::NodeType::Sequence);
    for (const std::string& w : split_shell_words(at("--recompute-modules").value, label))
      list.push_back(w);
    line.settings.push_back(
        {"parallel", "recompute_modules", list, at("--recompute-modules").text});
  }

  // Sequence parallelism: Megatron turns it off, with a warning, without tensor parallelism
  // (arguments.py: "Disabling sequence parallelism because tensor model parallelism is
  // disabled").
  if (has("--sequence-parallel") &&
      (!has("--tensor-model-parallel-size") || at("--tensor-model-parallel-size").value != "1"))
    set("parallel", "sequence_parallel", "true", at("--sequence-parallel"));

  // PyTorch FSDP2 through Megatron: fully sharded (ZeRO-3) layers.
  if (has("--use-torch-fsdp2")) {
    set("parallel", "fsdp", "true", at("--use-torch-fsdp2"));
    set("parallel", "zero_stage", "3", at("--use-torch-fsdp2"));
  }
  if (has("--context-parallel-size"))
    set("parallel", "context_parallel_size", at("--context-parallel-size").value,
        at("--context-parallel-size"));

  // Precision: Megatron trains in fp32 without --bf16 or --fp16 (the loader refuses that when
  // nothing else sets training.precision); fp8 runs on top of bf16 / fp16.
  both("--bf16", "--fp16", "Megatron-LM: choose one");
  if (has("--bf16")) set("training", "precision", "bf16", at("--bf16"));
  if (has("--fp16")) set("training", "precision", "fp16", at("--fp16"));
  if (has("--fp8-format")) set("training", "precision", "fp8", at("--fp8-format"));
  both("--fp8-format", "--fp4-format", "Megatron-LM: fp8 and fp4 are mutually exclusive");

  // The router's aux-loss kernels run for a coefficient > 0 of a load-balancing type that has
  // one (aux_loss, Megatron's default, seq_aux_loss, global_aux_loss; router.py
  // is_aux_loss_enabled / get_aux_loss_coeff at d98e8a6): sinkhorn or none run none.
  if (has("--moe-aux-loss-coeff")) {
    const std::string& type = has("--moe-router-load-balancing-type")
                                  ? at("--moe-router-load-balancing-type").value
                                  : std::string("aux_loss");
    const bool aux = type.find("aux_loss") != std::string::npos;
    set("model", "moe_aux_loss_coeff", aux ? at("--moe-aux-loss-coeff").value : "0",
        at("--moe-aux-loss-coeff"));
  }
  if (has("--fp4-recipe") && at("--fp4-recipe").value != "nvfp4")
    throw_input("{}: --fp4-recipe {}: only nvfp4 is modelled", label, at("--fp4-recipe").value);
  if (has("--fp4-format")) {
    if (at("--fp4-format").value != "e2m1")
      throw_input("{}: --fp4-format {}: only e2m1 (NVFP4) is modelled", label,
                  at("--fp4-format").value);
    set("training", "precision", "nvfp4", at("--fp4-format"));
  }

  // Attention: Megatron-Core's backends flash and fused (cuDNN) are fused-attention kernels,
  // auto picks one of them on Ampere and Hopper; unfused and local (Megatron's own
  // DotProductAttention) materialise the score matrix.
  if (has("--attention-backend")) {
    const Given& g = at("--attention-backend");
    if (g.value == "flash" || g.value == "fused" || g.value == "auto")
      set("training", "attention", "flash", g);
    else if (g.value == "unfused" || g.value == "local")
      set("training", "attention", "unfused", g);
    else
      refuse("--attention-backend", "expected flash, fused, unfused, local or auto");
  } else if (has("--use-flash-attn")) {
    set("training", "attention", "flash", at("--use-flash-attn"));
  }

  if (has("--optimizer") && at("--optimizer").value != "adam")
    refuse("--optimizer", "not modelled by scalescope (its optimizer states are Adam's)");
  return line;
}

std::string_view megatron_option_for(std::string_view section, std::string_view key) {
  for (const Option& o : kOptions)
    if (o.kind == Kind::Value && o.section == section && o.key == key) return o.name;
  return {};
}

YAML::Node megatron_model_defaults() {
  YAML::Node n;
  n["hidden_dropout"] = "0.1";
  n["attention_dropout"] = "0.1";
  n["position_embedding_type"] = "learned_absolute";
  return n;
}

std::int64_t megatron_swiglu_ffn_hidden_size(std::int64_t hidden_size) {
  // int((4 * h * 2 / 3) / 64) * 64 in Python floating point; 8h/3 is exact enough in double
  // for any realistic h (< 2^50), and truncation matches int().
  return static_cast<std::int64_t>(static_cast<double>(4 * hidden_size) * 2 / 3 / 64) * 64;
}

std::int64_t megatron_virtual_stages(std::int64_t num_layers, std::int64_t pp,
                                     std::int64_t layers_per_virtual_stage, bool account_embedding,
                                     bool account_loss, bool uneven_end_stages,
                                     std::string_view label) {
  if (uneven_end_stages)
    throw_input(
        "{}: with decoder_first/last_pipeline_num_layers, give the virtual pipeline size with "
        "--num-virtual-stages-per-pipeline-rank (Megatron-LM)",
        label);
  const std::int64_t layers = num_layers + (account_embedding ? 1 : 0) + (account_loss ? 1 : 0);
  if (layers % pp != 0)
    throw_input("{}: pipeline_model_parallel_size={} does not divide the {} layers{}", label, pp,
                layers,
                account_embedding || account_loss ? " (counting the embedding / loss)" : "");
  const std::int64_t per_stage = layers / pp;
  if (per_stage % layers_per_virtual_stage != 0)
    throw_input("{}: the {} layers per pipeline stage are not a multiple of {}", label, per_stage,
                layers_per_virtual_stage);
  return per_stage / layers_per_virtual_stage;
}

std::vector<std::string> expand_pipeline_layout(std::string_view layout, std::string_view label) {
  std::string text;
  for (const char ch : layout)
    if (ch != ',' && ch != ' ') text += ch;  // commas are cosmetic
  // The count after a '*' at `star`; `end` receives the position after its digits.
  const auto count_at = [&](std::size_t star, std::size_t& end) {
    end = star + 1;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    std::int64_t n = 0;
    if (end == star + 1 || std::from_chars(&text[star + 1], &text[end], n).ec != std::errc() ||
        n > 100000)
      throw_input("{}: a repetition in pipeline layout '{}' needs a count after '*'", label,
                  layout);
    return n;
  };
  // "(…)*n" first (no nesting, as Megatron's pattern), then "x*n".
  for (std::size_t open = text.find('('); open != std::string::npos; open = text.find('(')) {
    const std::size_t close = text.find(')', open);
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != '*' ||
        text.find('(', open + 1) < close)
      throw_input("{}: pipeline layout '{}' has a '(' without its ')*n'", label, layout);
    std::size_t end = 0;
    const std::int64_t n = count_at(close + 1, end);
    std::string unrolled;
    for (std::int64_t i = 0; i < n; ++i) unrolled += text.substr(open + 1, close - open - 1);
    text = text.substr(0, open) + unrolled + text.substr(end);
  }
  for (std::size_t star = text.find('*'); star != std::string::npos; star = text.find('*')) {
    if (star == 0)
      throw_input("{}: pipeline layout '{}' has a '*' with nothing to repeat", label, layout);
    std::size_t end = 0;
    const std::int64_t n = count_at(star, end);
    text = text.substr(0, star - 1) + std::string(static_cast<std::size_t>(n), text[star - 1]) +
           text.substr(end);
  }
  std::vector<std::string> stages(1);
  for (const char ch : text) {
    if (ch == '|') {
      stages.emplace_back();
    } else if (ch == 'E' || ch == 't' || ch == 'm' || ch == 'L') {
      stages.back() += ch;
    } else {
      throw_input(
          "{}: pipeline layout '{}' has '{}', not a layer letter (E embedding, t decoder layer, "
          "m MTP module, L loss)",
          label, layout, ch);
    }
  }
  return stages;
}

}  // namespace scalescope::io::detail
