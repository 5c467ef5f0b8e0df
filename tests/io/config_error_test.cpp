// Tests of io/config.cpp: every bad experiment (a value, a key, a section, a file, a preset
// file) is a one-line InputError naming the file and the key, with its position and hints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "io/config.hpp"
#include "io/megatron_args.hpp"
#include "workload/accounting.hpp"

#include "config_test_util.hpp"

namespace scalescope::io {
namespace {

using namespace config_test;

// ---------------------------------------------------------------- bad experiments

TEST(ConfigError, EveryBadInputNamesFileAndKey) {
  const fs::path dir = scratch();
  struct Case {
    Yaml yaml;
    std::string key;  ///< expected in the message
  };
  const std::vector<Case> cases = {
      {Yaml().set("model", "num_layer", "4"), "model.num_layer"},
      {Yaml().set("parallel", "tensor_parallel_size", "2"), "parallel.tensor_parallel_size"},
      {Yaml().set("model", "hidden_size", "abc"), "model.hidden_size"},
      {Yaml().set("model", "hidden_size", "256.5"), "model.hidden_size"},
      {Yaml().set("model", "hidden_size", "[256]"), "model.hidden_size"},
      {Yaml().set("parallel", "sequence_parallel", "maybe"), "parallel.sequence_parallel"},
      {Yaml().set("model", "hidden_dropout", "1.5"), "model.hidden_dropout"},
      {Yaml().set("model", "attention_dropout", "-0.1"), "model.attention_dropout"},
      {Yaml().drop("model", "vocab_size"), "model.vocab_size"},
      {Yaml().drop("model", "num_layers"), "model.num_layers"},
      {Yaml().set("model", "preset", "no-such-model"), "model.preset"},
      {Yaml().set("model", "hf_config", "missing/config.json"), "model.hf_config"},
      {Yaml().set("cluster", "preset", "dgx-z100"), "cluster.preset"},
      {Yaml().set("model", "num_layers", "0"), "model.num_layers"},
      {Yaml().set("model", "seq_length", "-8"), "model.seq_length"},
      {Yaml().set("parallel", "tp", "0"), "parallel.tensor_model_parallel_size"},
      {Yaml().set("training", "micro_batch_size", "-1"), "training.micro_batch_size"},
      {Yaml().set("cluster", "nvlink_bandwidth_GBps", "0"), "cluster.nvlink_bandwidth_GBps"},
      {Yaml().set("cluster", "nic_latency_us", "-1"), "cluster.nic_latency_us"},
      {Yaml().set("cluster", "gpus_per_node", "0"), "cluster.gpus_per_node"},
      {Yaml().set("cluster", "host_launch_us", "-2"), "cluster.host_launch_us"},
      // TP 3 does not divide 8 heads (Megatron: heads are split across TP ranks).
      {Yaml().set("parallel", "tp", "3").drop("cluster", "num_gpus"),
       "parallel.tensor_model_parallel_size=3 does not divide model.num_attention_heads=8"},
      // 2 KV groups on TP 4.
      {Yaml()
           .set("model", "num_query_groups", "2")
           .set("parallel", "tp", "4")
           .drop("cluster", "num_gpus"),
       "parallel.tensor_model_parallel_size=4 does not divide model.num_query_groups=2"},
      {Yaml().set("model", "num_query_groups", "3"), "model.num_query_groups=3"},
      {Yaml().set("model", "ffn_hidden_size", "1001"), "model.ffn_hidden_size=1001"},
      {Yaml().set("model", "hidden_size", "250"), "model.hidden_size=250"},
      // 2·2·2 = 8 ≠ 16.
      {Yaml().set("cluster", "num_gpus", "16"), "cluster.num_gpus=16"},
      // 2·1·6 = 12 GPUs: one and a half 8-GPU nodes.
      {Yaml().set("parallel", "pp", "1").set("parallel", "dp", "6").drop("cluster", "num_gpus"),
       "cluster.gpus_per_node=8"},
      {Yaml().drop("parallel", "dp").drop("cluster", "num_gpus"), "cluster.num_gpus"},
      {Yaml().drop("parallel", "dp").set("cluster", "num_gpus", "6"), "cluster.num_gpus=6"},
      {Yaml().set("model", "num_layers", "5"), "model.num_layers=5"},
      // 3 sequences cannot be split into micro-batches of 1 over 2 replicas.
      {Yaml().set("training", "global_batch_size", "3"), "training.global_batch_size=3"},
      {Yaml().set("cluster", "gpu", "Z100"), "cluster.gpu"},
      {Yaml()
           .set("parallel", "tp", "1")
           .set("parallel", "dp", "4")
           .set("parallel", "sequence_parallel", "true"),
       "parallel.sequence_parallel"},
      {Yaml().set("parallel", "sequence_parallel", "true").set("model", "seq_length", "127"),
       "model.seq_length=127"},
      // 2 layers per stage do not split into 4 model chunks.
      {Yaml().set("parallel", "vpp", "4"), "parallel.virtual_pipeline_model_parallel_size"},
      // m = 4 / (1·2) = 2 micro-batches: a group of 3 lies outside [PP = 2, M = 2].
      {Yaml()
           .set("parallel", "vpp", "2")
           .set("parallel", "microbatch_group_size_per_vp_stage", "3"),
       "parallel.microbatch_group_size_per_vp_stage"},
      {Yaml()
           .set("parallel", "decoder_first_pipeline_num_layers", "1")
           .set("parallel", "account_for_embedding_in_pipeline_split", "true"),
       "parallel.account_for_embedding/loss_in_pipeline_split"},
      {Yaml().set("parallel", "recompute", "some"), "parallel.recompute"},
      // DP · CP = 2 · 1 does not split into shard groups of 3.
      {Yaml()
           .set("parallel", "fsdp", "true")
           .set("parallel", "pp", "1")
           .set("parallel", "tp", "4")
           .set("parallel", "fsdp_shard_size", "3"),
       "parallel.fsdp_shard_size"},
      {Yaml().set("parallel", "tp_comm_overlap", "true"), "parallel.tp_comm_overlap"},
      {Yaml().set("parallel", "schedule", "interleaved"), "parallel.schedule"},
      {Yaml().set("training", "precision", "fp4"), "training.precision"},
      // The dgx-a100 preset's A100 has no fp8 tensor cores.
      {Yaml().set("training", "precision", "fp8"), "training.precision=fp8"},
      {Yaml().set("training", "attention", "sdpa"), "training.attention"},
      {Yaml().set("run", "engine", "parallel"), "run.engine"},
      // The window bounds the optimistic engine only (auto, the default, may run windows), and
      // is a positive time.
      {Yaml().set("run", "optimism_window_us", "100"), "run.optimism_window_us"},
      {Yaml().set("run", "engine", "optimistic").set("run", "optimism_window_us", "0"),
       "run.optimism_window_us"},
      {Yaml().set("run", "trace_ranks", "[0, 8]"), "run.trace_ranks"},
      {Yaml().set("run", "trace_ranks", "[-1]"), "run.trace_ranks"},
      {Yaml().set("run", "trace_ranks", "{a: 1}"), "run.trace_ranks"},
      {Yaml().set("run", "coalesce_local_ops", "2"), "run.coalesce_local_ops"},
      {Yaml().set("parallel", "overlap_param_gather", "true"), "parallel.overlap_param_gather"},
      // ZeRO: a stage other than 0–3, stage 0 beside the distributed optimizer (stage 1), fsdp with
      // another stage, FSDP options without ZeRO-3, ZeRO-3 with pipeline parallelism (PP 2 here).
      {Yaml().set("parallel", "zero_stage", "4"), "parallel.zero_stage"},
      {Yaml()
           .set("parallel", "use_distributed_optimizer", "true")
           .set("parallel", "zero_stage", "0"),
       "parallel.zero_stage"},
      {Yaml().set("parallel", "fsdp", "true").set("parallel", "zero_stage", "2"),
       "parallel.zero_stage"},
      {Yaml().set("parallel", "reshard_after_forward", "false"), "parallel.reshard_after_forward"},
      // FSDP under PP follows torch.distributed.pipelining: no per-micro-batch resharding or
      // reduction.
      {Yaml().set("parallel", "fsdp", "true").set("parallel", "reshard_after_forward", "true"),
       "parallel.reshard_after_forward"},
      {Yaml().set("parallel", "schedule", "ZBVZeroBubble"), "parallel.schedule"},
      // A torch.distributed.pipelining action table: needed by schedule: actions, and only there.
      {Yaml().set("parallel", "schedule", "actions"), "actions needs parallel.pipeline_actions"},
      {Yaml().set("parallel", "pipeline_actions", "table.csv"),
       "parallel.pipeline_actions: applies to schedule: actions"},
      {Yaml()
           .set("parallel", "schedule", "actions")
           .set("parallel", "pipeline_actions", "missing/table.csv"),
       "parallel.pipeline_actions: file"},
      // Worlds past 2^24 GPUs (2^32 segfaulted, 2^31 ended in bad_alloc).
      {Yaml().set("cluster", "num_gpus", "4294967296").drop("parallel", "dp"),
       "cluster.num_gpus=4294967296 exceeds"},
      {Yaml().set("parallel", "dp", "9223372036854775807"), "parallel.data_parallel_size"},
      // Gradient-accumulation runs of the schedule: m = 4 / (1 · 2) = 2 micro-batches.
      {Yaml().set("training", "gradient_accumulation_steps", "3"),
       "training.gradient_accumulation_steps"},
      {Yaml()
           .set("parallel", "pp", "1")
           .set("parallel", "dp", "4")
           .set("training", "gradient_accumulation_steps", "2"),
       "training.gradient_accumulation_steps"},
      {Yaml().set("parallel", "tensor_model_parallel_size", "2"),
       "parallel.tensor_model_parallel_size"},  // given twice (alias tp too)
      // MoE kernel keys on a dense model, and CUDA graphs the model does not tell apart.
      {Yaml().set("parallel", "moe_router_fusion", "true"), "parallel.moe_router_fusion"},
      {Yaml().set("parallel", "moe_permute_fusion", "true"), "parallel.moe_permute_fusion"},
      {Yaml().set("model", "moe_aux_loss_coeff", "0.001"), "model.moe_aux_loss_coeff"},
      {Yaml().set("parallel", "cuda_graph_scope", "[moe_router]"), "parallel.cuda_graph_scope"},
      {Yaml().set("parallel", "cuda_graph_scope", "[full_iteration]"), "parallel.cuda_graph_scope"},
      {Yaml().set("parallel", "cuda_graph_scope", "attn"), "parallel.cuda_graph_scope"},
      {Yaml()
           .set("model", "preset", "mixtral-8x7b")
           .set("model", "num_layers", "4")
           .set("parallel", "sequence_parallel", "true")
           .set("parallel", "cuda_graph_scope", "[moe_preprocess]"),
       "moe_preprocess needs moe_router"},
      // NVFP4 needs Blackwell and has no fp8 recipe.
      {Yaml().set("training", "precision", "nvfp4"), "nvfp4 needs a Blackwell GPU"},
      {Yaml()
           .set("cluster", "preset", "dgx-b200")
           .set("training", "precision", "nvfp4")
           .set("training", "fp8_recipe", "mxfp8"),
       "training.fp8_recipe"},
  };
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    const std::string file = "case" + std::to_string(i++) + ".yaml";
    expect_names(error_of(dir, c.yaml.text(), {}, file), file, c.key);
  }
  // The reference experiment itself is valid, and so is the vpp value 1.
  EXPECT_EQ(error_of(dir, Yaml().text()), "");
  EXPECT_EQ(error_of(dir, Yaml().set("parallel", "vpp", "1").text()), "");
  EXPECT_EQ(error_of(dir, Yaml().set("training", "gradient_accumulation_steps", "2").text()), "");
  EXPECT_EQ(error_of(dir, Yaml().set("parallel", "cuda_graph_scope", "[attn]").text()), "");
  EXPECT_EQ(
      error_of(
          dir,
          Yaml().set("cluster", "preset", "dgx-b200").set("training", "precision", "nvfp4").text()),
      "");
  // FSDP without pipeline parallelism is valid.
  EXPECT_EQ(error_of(dir, Yaml()
                              .set("parallel", "pp", "1")
                              .set("parallel", "dp", "4")
                              .set("parallel", "fsdp", "true")
                              .set("parallel", "reshard_after_forward", "false")
                              .text()),
            "");
}

TEST(ConfigError, MessagesCarryPositionAndHints) {
  const fs::path dir = scratch();
  const std::string bad_type = error_of(dir, Yaml().set("model", "hidden_size", "abc").text());
  EXPECT_NE(bad_type.find("case.yaml:3:16: model.hidden_size: expected an integer, got 'abc'"),
            std::string::npos)
      << bad_type;
  const std::string typo = error_of(dir, Yaml().set("model", "num_layer", "4").text());
  EXPECT_NE(typo.find("did you mean 'num_layers'"), std::string::npos) << typo;
  const std::string vpp = error_of(dir, Yaml().set("parallel", "vpp", "4").text());
  EXPECT_NE(vpp.find("pipeline stage 0 has 2 layers, not divisible by "
                     "parallel.virtual_pipeline_model_parallel_size=4"),
            std::string::npos)
      << vpp;
  const std::string heads =
      error_of(dir, Yaml().set("parallel", "tp", "3").drop("cluster", "num_gpus").text());
  EXPECT_NE(heads.find("case.yaml: parallel.tensor_model_parallel_size=3 does not divide "
                       "model.num_attention_heads=8"),
            std::string::npos)
      << heads;
}

TEST(ConfigError, MalformedFilesAndSections) {
  const fs::path dir = scratch();
  // Malformed YAML: yaml-cpp's position (line 2, column 1 here) is in the message.
  const std::string m = error_of(dir, "model: [1,\n", {}, "broken.yaml");
  expect_names(m, "broken.yaml:2:1", "malformed YAML");
  expect_names(error_of(dir, "modle: {num_layers: 2}\n", {}, "s.yaml"), "s.yaml", "modle");
  expect_names(error_of(dir, "model: 3\n", {}, "t.yaml"), "t.yaml", "model");
  expect_names(error_of(dir, "- 1\n- 2\n", {}, "u.yaml"), "u.yaml", "top level");
  expect_names(error_of(dir, Yaml().text() + "model: {}\n", {}, "v.yaml"), "v.yaml", "model");
  try {
    load_experiment((dir / "missing.yaml").string());
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    expect_names(e.what(), "missing.yaml", "experiment file");
  }
}

TEST(ConfigError, BadPresetFilesNameThePresetFile) {
  const fs::path dir = scratch();
  write(dir / "models" / "typo.yaml", "num_layer: 3\n");
  write(dir / "models" / "header.yaml", "model:\n  num_layers: 3\n");
  write(dir / "models" / "broken.yaml", "num_layers: [3\n");
  write(dir / "models" / "wrong.yaml", "ffn_hidden_size: three\n");
  write(dir / "clusters" / "slow.yaml", "gpu: A100\nnvlink_bandwidth_GBps: -1\n");
  const auto msg = [&](const std::string& section, const std::string& preset) {
    return error_of(dir / "experiments", Yaml().set(section, "preset", preset).text());
  };
  expect_names(msg("model", "typo"), "typo.yaml", "model.num_layer");
  expect_names(msg("model", "header"), "header.yaml", "section header");
  expect_names(msg("model", "broken"), "broken.yaml", "malformed YAML");
  expect_names(msg("model", "wrong"), "wrong.yaml:1:18", "model.ffn_hidden_size");
  expect_names(msg("cluster", "slow"), "slow.yaml", "cluster.nvlink_bandwidth_GBps");
}

}  // namespace
}  // namespace scalescope::io
