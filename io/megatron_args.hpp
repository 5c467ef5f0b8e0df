#pragma once
/// Internal to the configuration loader (io/config.cpp): a Megatron-LM `pretrain_gpt.py` launch
/// line (`--megatron-args "…"`, or `megatron_args:` in an experiment file) read into the
/// configuration keys it sets. The option → key table is documented in docs/config.md
/// ("Megatron-LM launch line").
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace scalescope::io::detail {

/// One configuration key set by a launch-line option.
struct LaunchSetting {
  std::string section;  ///< "model", "parallel", "training"
  std::string key;      ///< canonical key name
  YAML::Node value;     ///< a scalar, read by the loader like a YAML value
  std::string option;   ///< the option as written ("--num-layers 80"), for messages
};

/// What a launch line sets, in the order written (a repeated option: the last one wins, as in
/// argparse).
struct LaunchLine {
  std::vector<std::string> words;  ///< the arguments read (after the script name, if any)
  std::vector<LaunchSetting> settings;
  /// --num-layers-per-virtual-pipeline-stage N (0: absent). The loader derives
  /// virtual_pipeline_model_parallel_size from it once num_layers and PP are known.
  std::int64_t layers_per_virtual_stage = 0;
  std::string layers_per_virtual_stage_option;
};

/// Splits `text` into words as a POSIX shell does: blanks separate words; '…' is literal; "…"
/// keeps blanks and honours \" \\ \$ \`; a backslash outside quotes escapes the next character,
/// and a backslash-newline joins lines; '#' at the start of a word comments out the rest of the
/// line. `label` names the text in messages. Throws InputError on an unterminated quote.
std::vector<std::string> split_shell_words(std::string_view text, std::string_view label);

/// Reads a launch line. Words before the first one ending in ".py" (`torchrun … pretrain_gpt.py`)
/// are skipped. Throws InputError "<label>: …" naming the option for an unknown option (with a
/// did-you-mean hint), a missing value, a value given to a flag, an option scalescope does not
/// model, or contradicting options.
LaunchLine parse_megatron_args(std::string_view text, std::string_view label);

/// The launch-line option that sets `section.key` ("" when none does), for messages.
std::string_view megatron_option_for(std::string_view section, std::string_view key);

/// Megatron-LM's defaults for the model keys where scalescope's own default differs
/// (hidden_dropout and attention_dropout 0.1, position_embedding_type learned_absolute), as a
/// mapping of canonical keys: with a launch line, a key set nowhere takes Megatron's default.
YAML::Node megatron_model_defaults();

/// Megatron-LM's ffn_hidden_size when --swiglu is given without --ffn-hidden-size:
/// int((4·h·2/3) / 64)·64 (megatron/training/arguments.py, validate_args).
std::int64_t megatron_swiglu_ffn_hidden_size(std::int64_t hidden_size);

/// Megatron-LM's virtual_pipeline_model_parallel_size from --num-layers-per-virtual-pipeline-stage
/// (arguments.py, validate_args): the layers per pipeline stage (counting the embedding / loss
/// when accounted for in the split) divided by the layers per virtual stage, both divisions
/// exact. Throws InputError "<label>: …" otherwise, and with uneven first/last stages (Megatron
/// then requires --num-virtual-stages-per-pipeline-rank).
std::int64_t megatron_virtual_stages(std::int64_t num_layers, std::int64_t pp,
                                     std::int64_t layers_per_virtual_stage, bool account_embedding,
                                     bool account_loss, bool uneven_end_stages,
                                     std::string_view label);

/// Megatron-LM's --pipeline-model-parallel-layout, expanded as its parse_str_to_list does
/// (megatron/core/transformer/pipeline_parallel_layer_layout.py): commas dropped, "(…)*n" then
/// "x*n" unrolled, '|' between virtual stages; E embedding, t decoder layer, m MTP module, L
/// loss. Returns each virtual stage's letters, in virtual-stage order (v = chunk·PP + stage).
/// Throws InputError "<label>: …" naming an unknown letter or a malformed repetition.
std::vector<std::string> expand_pipeline_layout(std::string_view layout, std::string_view label);

}  // namespace scalescope::io::detail
