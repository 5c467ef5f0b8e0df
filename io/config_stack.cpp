// Software stacks (`training.stack`): what a framework release decides for the user — the
// attention kernel Transformer Engine or PyTorch picks, the overlaps and gradient precision its
// recipes default to, the fp8 recipe its performance tables use. A stack only supplies defaults:
// a key the experiment, a launch line or --set gives wins, and the resolved configuration names
// each key a stack set. docs/config.md "Software stacks" lists every value and its source.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/error.hpp"
#include "io/config_internal.hpp"

namespace scalescope::io::detail {
namespace {

/// Where a stack's default applies: everywhere; only under training.precision: fp8 (the fp8
/// recipe is refused under another precision); only without ZeRO-3 / FSDP (which shard by
/// themselves); only with the distributed optimizer and an overlapped gradient reduce (what
/// parallel.overlap_param_gather requires, as in Megatron). Conditions read the tree as the earlier
/// defaults left it.
enum class When : std::uint8_t { Always, Fp8, NotFsdp, DistOpt };

struct StackDefault {
  std::string_view section, key, value;
  When when = When::Always;
};

struct Stack {
  std::string_view name;
  std::vector<std::string_view> aliases;
  std::vector<StackDefault> defaults;
};

// Attention on H100 / Blackwell through Transformer Engine: with NVTE_FLASH_ATTN and
// NVTE_FUSED_ATTN both at their default 1, TE prefers cuDNN's fused attention over flash-attn
// on sm90 and newer in every release from v1.2 to v2.14 (TE v1.4 attention.py:2834-2839; v1.8
// attention.py:5158-5169; v2.2 dot_product_attention/utils.py:901-902; v2.14 utils.py:1168-1169):
// scalescope's `flash` (cuDNN's SDPA rates). NeMo-Framework-Launcher set NVTE_FUSED_ATTN: 0
// ("Disable cudnn FA until we've tested it more") in launcher_scripts/conf/config.yaml at tags
// 24.03.01 (l.68), 24.05 (l.70, default container nemo:24.03.01) and 24.07 (l.72), and on main
// until commit 04b8d098 (2024-08-29): TE then runs flash-attn's FlashAttention-2, `flash2`.
// The launcher's training yamls run distributed_fused_adam with overlap_grad_sync and
// overlap_param_sync true (e.g. conf/training/gpt3/5b.yaml:167-171 at NeMo-Framework-Launcher
// 48f0049: the distributed optimizer, its gradient reduce and parameter gather overlapped) and fp8
// as delayed scaling (fp8_hybrid, amax history 1024, max; gpt3/5b.yaml:143-147).
const std::vector<StackDefault> kNemoLauncherCommon = {
    {"parallel", "use_distributed_optimizer", "true", When::NotFsdp},
    {"parallel", "overlap_grad_reduce", "true"},
    {"parallel", "overlap_param_gather", "true", When::DistOpt},
    {"training", "fp8_recipe", "delayed", When::Fp8},
};
std::vector<StackDefault> with(std::vector<StackDefault> base,
                               std::initializer_list<StackDefault> more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

// Megatron-Bridge's performance recipes (NVIDIA-NeMo/Megatron-Bridge@067f987
// src/megatron/bridge/perf_recipes/_common.py:72-74, _perf_precision :99-123): bf16 gradient
// reduction for every precision, overlapped gradient reduce-scatter and parameter all-gather;
// the published fp8 rows are "FP8-CS", current (tensorwise) scaling. TE picks cuDNN attention
// (the perf executor sets NVTE_FLASH_ATTN=1, NVTE_FUSED_ATTN=1 in 25.09,
// scripts/performance/utils/executors.py:43-44 at v0.1.0rc3; later releases leave TE's default).
// CUDA graphs are off in every H100 pretraining preset (not modelled either way). Releases and
// their libraries (docs/releases/software-versions.md @e49e451): 25.09 TE 2.7.0, cuDNN 9.11;
// 25.11 TE 2.9, cuDNN 9.13.1; 26.02 TE 2.12, cuDNN 9.18; 26.04 TE 2.14, cuDNN 9.20.
const std::vector<StackDefault> kMegatronBridge = {
    {"training", "attention", "flash"},
    {"parallel", "grad_reduce_in_fp32", "false"},
    {"parallel", "overlap_grad_reduce", "true"},
    {"parallel", "overlap_param_gather", "true", When::DistOpt},
    {"training", "fp8_recipe", "tensorwise", When::Fp8},
};

const std::vector<Stack>& stacks() {
  static const std::vector<Stack> s = {
      // Container 24.03.01 with the launcher of tag 24.05 (its default container): flash-attn.
      {"nemo-24.03",
       {"nemo-24.03.01"},
       with(kNemoLauncherCommon, {{"training", "attention", "flash2"}})},
      // Container 24.05 with the launcher of tag 24.07 (config.yaml:72): flash-attn.
      {"nemo-24.05", {}, with(kNemoLauncherCommon, {{"training", "attention", "flash2"}})},
      // Container 24.07 (TE 1.8.0.dev0, Megatron-Core 0.8; NeMo 24.09 user guide's component
      // page) with the launcher's main of 2024-07-31 … 2024-08-29 (d56f885 config.yaml:72,
      // NVTE_FUSED_ATTN: 0): flash-attn, except where a run set NVTE_FUSED_ATTN=1 itself.
      {"nemo-24.07", {}, with(kNemoLauncherCommon, {{"training", "attention", "flash2"}})},
      // The launcher from 2024-08-30 on (tags 24.09, 24.12) has no override: cuDNN.
      {"nemo-24.09", {}, with(kNemoLauncherCommon, {{"training", "attention", "flash"}})},
      {"nemo-24.12", {}, with(kNemoLauncherCommon, {{"training", "attention", "flash"}})},
      // NeMo 2.0's performance scripts set NVTE_FUSED_ATTN=1 and NVTE_FLASH_ATTN=1
      // (scripts/llm/performance/utils.py:67-68 at NeMo v2.2.0): cuDNN.
      {"nemo-25.02", {"nemo-25.04", "nemo-25.07"}, {{"training", "attention", "flash"}}},
      {"megatron-bridge-25.09", {}, kMegatronBridge},
      {"megatron-bridge-25.11", {}, kMegatronBridge},
      {"megatron-bridge-26.02", {}, kMegatronBridge},
      {"megatron-bridge-26.04", {"megatron-bridge-26.04.01"}, kMegatronBridge},
      // Megatron-LM's own scripts (examples/, the functional tests, the MoE Model Zoo): TE's
      // default, cuDNN; its determinism filter (NVTE_ALLOW_NONDETERMINISTIC_ALGO=0) disables
      // cuDNN's arbitrary-seqlen backend only off sm90 (TE v1.4 attention.py:2828-2832).
      {"megatron-lm", {}, {{"training", "attention", "flash"}}},
      // Megatron-LM's functional tests (tests/functional_tests/test_cases/*/model_config.yaml):
      // TE's default attention, and the per-iteration host work of a run that logs every
      // iteration (--log-interval 1, --log-params-norm, --log-num-zeros-in-grad,
      // --log-timers-to-tensorboard): 93.1 ms, FITTED on the four 64 M-parameter tests of
      // inputs/validation/h100_megatron_throughput.csv (scripts/validate/fit_host_iteration.py,
      // refitted 2026-12-05 with the TE module host term; the two 7B tests held out).
      // docs/cost-model.md §1.6.
      {"megatron-lm-ci",
       {},
       {{"training", "attention", "flash"}, {"training", "host_iteration_ms", "93.1"}}},
      // torchtitan up to v0.1.0 runs PyTorch's FLASH_ATTENTION (FlashAttention-2) first on H100
      // (torchtitan/models/attention.py:201-207 at v0.1.0; cuDNN first only on sm100); the
      // Dec-2024 H100 benchmark ran plain SDPA on a PyTorch nightly after pytorch#138522 made
      // cuDNN attention opt-in. From v0.2.0 cuDNN comes first (attention.py:89-92 at v0.2.0).
      {"torchtitan-0.1", {"torchtitan-2024.12"}, {{"training", "attention", "flash2"}}},
      {"torchtitan-0.2", {}, {{"training", "attention", "flash"}}},
  };
  return s;
}

const Stack* find_stack(std::string_view name) {
  for (const Stack& s : stacks())
    if (s.name == name || std::find(s.aliases.begin(), s.aliases.end(), name) != s.aliases.end())
      return &s;
  return nullptr;
}

}  // namespace

std::vector<std::string> stack_names() {
  std::vector<std::string> out;
  for (const Stack& s : stacks()) {
    out.emplace_back(s.name);
    for (std::string_view a : s.aliases) out.emplace_back(a);
  }
  return out;
}

std::string apply_stack(Tree& t) {
  const Value* v = get(t.at("training"), "stack");
  if (v == nullptr) return {};
  const std::string name = read_string(*v, "training.stack");
  const Stack* s = find_stack(name);
  if (s == nullptr)
    fail(*v, "training.stack",
         fmt::format("unknown software stack '{}' (known: {})", name,
                     fmt::join(stack_names(), ", ")));
  const auto flag = [&](std::string_view section, std::string_view key) {
    const Value* x = get(t.at(std::string(section)), key);
    return x != nullptr && read_bool(*x, fmt::format("{}.{}", section, key));
  };
  const auto applies = [&](When when) {
    const Value* z = get(t.at("parallel"), "zero_stage");
    const bool fsdp =
        flag("parallel", "fsdp") || (z != nullptr && read_int(*z, "parallel.zero_stage") == 3);
    const Value* p = get(t.at("training"), "precision");
    switch (when) {
      case When::Fp8:
        return p != nullptr && read_string(*p, "training.precision") == "fp8";
      case When::NotFsdp:
        return !fsdp;
      case When::DistOpt:  // what Megatron's overlap_param_gather requires
        return !fsdp && flag("parallel", "use_distributed_optimizer") &&
               flag("parallel", "overlap_grad_reduce");
      case When::Always:
        return true;
    }
    return true;
  };
  for (const StackDefault& d : s->defaults) {
    if (!applies(d.when)) continue;
    Section& sec = t[std::string(d.section)];
    if (sec.contains(d.key)) continue;  // the experiment's own value wins
    sec.emplace(std::string(d.key),
                Value{YAML::Load(std::string(d.value)),
                      Origin{fmt::format("(training.stack {})", s->name), "", false}});
  }
  return std::string(s->name);
}

}  // namespace scalescope::io::detail
