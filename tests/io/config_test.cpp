// Tests of io/config.cpp and io/hf_config.cpp: the shipped inputs load, presets and overrides
// merge in the documented order, and every bad input is a one-line InputError naming the file
// and the key. Expected values are the numbers written in the shipped files (and their sources).
// Bad experiments in config_error_test.cpp, Megatron-LM launch lines in config_megatron_test.cpp;
// helpers in config_test_util.hpp.
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

/// Removes the test's scratch files at exit.
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override { fs::remove_all(scratch_root()); }
};
[[maybe_unused]] const ::testing::Environment* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

// ---------------------------------------------------------------- shipped inputs

TEST(Config, LoadsEveryShippedExperiment) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kRepo / "inputs" / "experiments")) {
    if (e.path().extension() != ".yaml") continue;
    SCOPED_TRACE(e.path().string());
    ExperimentConfig c;
    EXPECT_NO_THROW(c = load_experiment(e.path().string()));
    EXPECT_EQ(c.parallel.world(), c.cluster.num_gpus);
    EXPECT_FALSE(c.resolved_yaml.empty());
    ++n;
  }
  EXPECT_GE(n, 3);
}

TEST(Config, CheckOverrideAsSetReadsIt) {
  // Known keys (aliases too), unset values and YAML lists pass; the plan is not checked.
  EXPECT_NO_THROW(check_override("parallel.tp=3", "x.yaml"));
  EXPECT_NO_THROW(check_override("parallel.dp=", "x.yaml"));
  EXPECT_NO_THROW(check_override("parallel.recompute_modules=[mlp, core_attn]", "x.yaml"));
  const auto message = [](const std::string& text) {
    try {
      check_override(text, "x.yaml");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("parallel.tpx=1"),
            "x.yaml: override 'parallel.tpx=1': parallel.tpx: unknown key (did you mean 'tp'?)");
  EXPECT_NE(message("paralel.tp=1").find("unknown section"), std::string::npos);
  EXPECT_NE(message("parallel.tp=[1").find("malformed YAML value"), std::string::npos);
  EXPECT_NE(message("tp=1").find("must be section.key"), std::string::npos);
  EXPECT_NE(message("parallel.tp").find("expected key.path=value"), std::string::npos);
}

TEST(Config, SweepSectionGivesAxesInFileOrder) {
  const fs::path dir = scratch();
  const std::string base =
      "model: {preset: llama3-8b, num_layers: 4}\ncluster: {preset: dgx-h100, num_gpus: 8}\n"
      "parallel: {tp: 2}\n";
  const std::string f = put(dir / "s.yaml", base + R"(sweep:
  search: parallel
  vary:
    training.micro_batch_size: [1, 2]
    parallel.recompute_modules: [[core_attn], [core_attn, mlp]]
    parallel.dp: [~, 4]
)");
  const SweepSpec spec = read_sweep_spec(f);
  EXPECT_EQ(spec.search, "parallel");
  ASSERT_EQ(spec.axes.size(), 3u);
  EXPECT_EQ(spec.axes[0].name, "training.micro_batch_size");
  EXPECT_EQ(spec.axes[0].values,
            (std::vector<std::vector<std::string>>{{"training.micro_batch_size=1"},
                                                   {"training.micro_batch_size=2"}}));
  EXPECT_EQ(spec.axes[1].values[1],
            std::vector<std::string>{"parallel.recompute_modules=[core_attn, mlp]"});
  EXPECT_EQ(spec.axes[2].values[0], std::vector<std::string>{"parallel.dp="});  // null: unset
  // A run reads the same file and ignores the section.
  EXPECT_EQ(load_experiment(f).parallel.tp(), 2);
  // No section: nothing to sweep.
  EXPECT_TRUE(read_sweep_spec(put(dir / "plain.yaml", base)).axes.empty());

  const auto message = [&](const std::string& sweep) {
    try {
      read_sweep_spec(put(dir / "bad.yaml", base + sweep));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string unknown = message("sweep:\n  vary:\n    parallel.tpx: [1, 2]\n");
  EXPECT_NE(unknown.find("parallel.tpx: unknown key"), std::string::npos);
  // The file is named once (its line and column), not again inside the override's message.
  const std::string file = (dir / "bad.yaml").string();
  EXPECT_EQ(unknown.find(file), 0u) << unknown;
  EXPECT_EQ(unknown.find(file, 1), std::string::npos) << unknown;
  EXPECT_NE(message("sweep:\n  vary:\n    parallel.tp: 4\n").find("bad.yaml:6:"),
            std::string::npos);  // names the line
  EXPECT_NE(message("sweep:\n  vary:\n    parallel.tp: []\n").find("non-empty list"),
            std::string::npos);
  EXPECT_NE(message("sweep:\n  varies: {}\n").find("sweep.varies: unknown key"), std::string::npos);
  EXPECT_NE(message("sweep: [1]\n").find("expected a mapping"), std::string::npos);
}

TEST(Config, ShippedSweepsLoad) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(repo("inputs/sweeps"))) {
    SCOPED_TRACE(e.path().string());
    EXPECT_NO_THROW(load_experiment(e.path().string()));
    EXPECT_FALSE(read_sweep_spec(e.path().string()).axes.empty());
    ++n;
  }
  EXPECT_GE(n, 1u);
}

TEST(Config, LoadsEveryShippedPreset) {
  // Each preset in a minimal experiment that names it by its path.
  const fs::path dir = scratch();
  std::vector<std::string> clusters;  // every shipped cluster preset
  for (const auto& e : fs::directory_iterator(repo("inputs/clusters")))
    if (e.path().extension() == ".yaml") clusters.push_back(e.path().stem().string());
  EXPECT_GE(clusters.size(), 9u);
  for (const char* m : {"gpt3-175b", "llama3-8b", "llama3-70b", "llama3-405b"})
    for (const std::string& c : clusters) {
      SCOPED_TRACE(std::string(m) + " on " + c);
      write(dir / "x.yaml",
            fmt::format("model: {{preset: {}}}\ncluster: {{preset: {}, num_gpus: 8}}\n"
                        "parallel: {{tp: 8}}\n",
                        repo(std::string("inputs/models/") + m + ".yaml"),
                        repo(std::string("inputs/clusters/") + c + ".yaml")));
      EXPECT_NO_THROW(load_experiment((dir / "x.yaml").string()));
    }
}

TEST(SoftwareStack, SuppliesTheReleasesDefaultsAndTheExperimentsKeysWin) {
  // nemo-24.07: the launcher's NVTE_FUSED_ATTN: 0 → FlashAttention-2; distributed_fused_adam's
  // overlapped gradient reduce and parameter gather; delayed fp8 scaling (io/config_stack.cpp).
  const fs::path dir = scratch();
  Yaml y;
  y.set("training", "stack", "nemo-24.07").set("training", "precision", "fp8");
  y.set("cluster", "preset", "dgx-h100");
  auto c = load_experiment(put(dir / "a.yaml", y.text()));
  EXPECT_EQ(c.training.stack, "nemo-24.07");
  EXPECT_EQ(c.training.attention, workload::AttentionBackend::Flash2);
  EXPECT_TRUE(c.parallel.overlap_grad_reduce);
  EXPECT_TRUE(c.parallel.use_distributed_optimizer);  // distributed_fused_adam
  EXPECT_TRUE(c.parallel.overlap_param_gather);
  EXPECT_EQ(c.training.fp8_recipe, workload::Fp8Recipe::Delayed);
  EXPECT_NE(c.resolved_yaml.find("stack: nemo-24.07"), std::string::npos) << c.resolved_yaml;
  // A key of the experiment's own (a run that set NVTE_FUSED_ATTN=1) wins over the stack.
  y.set("training", "attention", "flash").set("parallel", "overlap_grad_reduce", "false");
  c = load_experiment(put(dir / "b.yaml", y.text()));
  EXPECT_EQ(c.training.attention, workload::AttentionBackend::Flash);
  EXPECT_FALSE(c.parallel.overlap_grad_reduce);
  // --set wins too, and a later stack of the same launcher picks cuDNN.
  c = load_experiment(put(dir / "c.yaml", Yaml().text()), {"training.stack=nemo-24.12"});
  EXPECT_EQ(c.training.attention, workload::AttentionBackend::Flash);
  // Megatron-Bridge's perf recipes: bf16 gradient reduction, fp8 current scaling.
  y = Yaml();
  y.set("training", "stack", "megatron-bridge-26.04").set("training", "precision", "fp8");
  y.set("cluster", "preset", "dgx-h100");
  c = load_experiment(put(dir / "d.yaml", y.text()));
  EXPECT_FALSE(c.parallel.grad_reduce_in_fp32);
  EXPECT_EQ(c.training.fp8_recipe, workload::Fp8Recipe::Tensorwise);
}

TEST(SoftwareStack, SetsNothingAKeyWouldSilentlyNotApplyTo) {
  const fs::path dir = scratch();
  // bf16: the stack's fp8 recipe is not applied (training.fp8_recipe under bf16 is an error);
  // no distributed optimizer: nor is its overlapped parameter gather (refused without it).
  Yaml y;
  y.set("training", "stack", "megatron-bridge-26.04");
  EXPECT_FALSE(load_experiment(put(dir / "a.yaml", y.text())).parallel.overlap_param_gather);
  y.set("parallel", "use_distributed_optimizer", "true");
  EXPECT_TRUE(load_experiment(put(dir / "a2.yaml", y.text())).parallel.overlap_param_gather);
  y.drop("parallel", "use_distributed_optimizer");
  // FSDP: no distributed-optimizer parameter gather (refused with fsdp).
  y.set("parallel", "fsdp", "true")
      .set("parallel", "tp", "1")
      .set("parallel", "pp", "1")
      .set("parallel", "dp", "8")
      .set("training", "global_batch_size", "8");
  const auto c = load_experiment(put(dir / "b.yaml", y.text()));
  EXPECT_FALSE(c.parallel.overlap_param_gather);
  EXPECT_TRUE(c.parallel.overlap_grad_reduce);
}

TEST(SoftwareStack, AnUnknownStackNamesTheKeyAndTheKnownOnes) {
  const fs::path dir = scratch();
  Yaml y;
  y.set("training", "stack", "nemo-23.01");
  const std::string m = error_of(dir, y.text());
  expect_names(m, "case.yaml", "training.stack");
  EXPECT_NE(m.find("unknown software stack 'nemo-23.01'"), std::string::npos) << m;
  EXPECT_NE(m.find("megatron-bridge-26.04"), std::string::npos) << m;
}

TEST(Config, QuickstartMergesPresetsAndInlineKeysWin) {
  const auto c = load_experiment(repo("inputs/experiments/quickstart.yaml"));
  // Inline keys override inputs/models/llama3-8b.yaml …
  EXPECT_EQ(c.model.num_layers, 8);
  EXPECT_EQ(c.model.seq_length, 4096);
  // … the rest is the preset (Llama 3 paper Table 3 / HF config.json).
  EXPECT_EQ(c.model.name, "llama3-8b");
  EXPECT_EQ(c.model.hidden_size, 4096);
  EXPECT_EQ(c.model.ffn_hidden_size, 14336);
  EXPECT_EQ(c.model.num_attention_heads, 32);
  EXPECT_EQ(c.model.num_query_groups, 8);
  EXPECT_EQ(c.model.kv_channels, 128);
  EXPECT_EQ(c.model.vocab_size, 128256);
  EXPECT_TRUE(c.model.gated_linear_unit);
  EXPECT_TRUE(c.model.untie_embeddings);
  EXPECT_FALSE(c.model.add_bias_linear);
  // Aliases tp/pp/dp → canonical fields; 4·2·8 = 64 GPUs.
  EXPECT_EQ(c.parallel.tp(), 4);
  EXPECT_EQ(c.parallel.pp(), 2);
  EXPECT_EQ(c.parallel.dp(), 8);
  EXPECT_TRUE(c.parallel.sequence_parallel);
  EXPECT_TRUE(c.parallel.use_distributed_optimizer);
  EXPECT_EQ(c.training.num_microbatches(c.parallel.dp()), 8);  // 64 / (1·8)
  // inputs/clusters/dgx-h100.yaml (DGX H100 datasheet: 900 GB/s bidirectional, 8 × 400 Gb/s).
  EXPECT_EQ(c.cluster.preset, "dgx-h100");
  EXPECT_EQ(c.cluster.gpu, "H100-SXM");
  EXPECT_EQ(c.cluster.num_gpus, 64);
  EXPECT_EQ(c.cluster.gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(c.cluster.nvlink_bandwidth_GBps, 450);
  EXPECT_DOUBLE_EQ(c.cluster.nic_bandwidth_Gbps, 400);
  EXPECT_EQ(c.cluster.nics_per_node, 8);
  EXPECT_EQ(c.run.trace_ranks, (std::vector<std::uint32_t>{0, 32}));
  EXPECT_EQ(c.run.output, "out/quickstart");
}

TEST(Config, Gpt3OnThousandA100s) {
  const auto c = load_experiment(repo("inputs/experiments/gpt3-175b-1024.yaml"));
  // Brown et al. 2020, Table 2.1.
  EXPECT_EQ(c.model.num_layers, 96);
  EXPECT_EQ(c.model.hidden_size, 12288);
  EXPECT_EQ(c.model.ffn_hidden_size, 4 * 12288);
  EXPECT_EQ(c.model.num_attention_heads, 96);
  EXPECT_EQ(c.model.num_query_groups, 96);  // MHA
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.model.padded_vocab(8), 51200);  // next multiple of 128·8 = 1024
  EXPECT_EQ(c.model.seq_length, 2048);
  EXPECT_DOUBLE_EQ(c.model.hidden_dropout, 0.1);
  EXPECT_TRUE(c.model.add_bias_linear);
  EXPECT_FALSE(c.model.untie_embeddings);
  EXPECT_EQ(c.parallel.world(), 1024);  // 8·8·16
  EXPECT_EQ(c.parallel.recompute, workload::Recompute::Selective);
  EXPECT_TRUE(c.parallel.overlap_grad_reduce);
  EXPECT_EQ(c.training.num_microbatches(16), 96);  // 1536 / (1·16)
  EXPECT_EQ(c.cluster.gpu, "A100-SXM4-80GB");
  EXPECT_DOUBLE_EQ(c.cluster.nvlink_bandwidth_GBps, 300);
  EXPECT_DOUBLE_EQ(c.cluster.nic_bandwidth_Gbps, 200);
  EXPECT_EQ(c.run.trace_ranks, (std::vector<std::uint32_t>{0, 1016}));
}

// ---------------------------------------------------------------- presets and defaults

TEST(Config, PresetSearchOrder) {
  // <experiment dir>/../models/ first, then <experiment dir>/, then the repository's inputs/.
  const fs::path dir = scratch();
  const std::string exp =
      "model: {preset: llama3-8b}\nparallel: {tp: 8}\n"
      "cluster: {preset: dgx-a100, num_gpus: 8}\n";
  write(dir / "experiments" / "e.yaml", exp);
  const std::string file = (dir / "experiments" / "e.yaml").string();
  EXPECT_EQ(load_experiment(file).model.num_layers, 32);  // repository's inputs/models/
  write(dir / "experiments" / "llama3-8b.yaml",
        "num_layers: 2\nhidden_size: 64\nnum_attention_heads: 8\nvocab_size: 10\nseq_length: 8\n");
  EXPECT_EQ(load_experiment(file).model.num_layers, 2);  // beside the experiment
  write(dir / "models" / "llama3-8b.yaml",
        "num_layers: 3\nhidden_size: 64\nnum_attention_heads: 8\nvocab_size: 10\nseq_length: 8\n");
  const auto c = load_experiment(file);
  EXPECT_EQ(c.model.num_layers, 3);      // ../models/ wins
  EXPECT_EQ(c.model.name, "llama3-8b");  // a preset without `name` names the model
}

TEST(Config, InlineClusterKeysOverridePreset) {
  const fs::path dir = scratch();
  const auto c = load_experiment(
      put(dir / "e.yaml",
          Yaml().set("cluster", "nic_bandwidth_Gbps", "100").set("cluster", "gpu", "h100").text()));
  EXPECT_EQ(c.cluster.gpu, "H100-SXM");  // alias resolved to the canonical name
  EXPECT_DOUBLE_EQ(c.cluster.nic_bandwidth_Gbps, 100);
  EXPECT_DOUBLE_EQ(c.cluster.nvlink_bandwidth_GBps, 300);  // still dgx-a100's
  EXPECT_FALSE(c.cluster.host_launch_us);                  // dgx-a100 does not model the host
  const auto h = load_experiment(put(
      dir / "h.yaml",
      Yaml().set("cluster", "preset", "dgx-h100").set("cluster", "host_launch_us", "20").text()));
  ASSERT_TRUE(h.cluster.host_launch_us);
  EXPECT_DOUBLE_EQ(*h.cluster.host_launch_us, 20);  // inline wins over the preset's 8.16
}

TEST(Config, DefaultsAndDerivedSizes) {
  const fs::path dir = scratch();
  const auto c = load_experiment(
      put(dir / "e.yaml", Yaml().drop("parallel", "dp").drop("run", "trace_ranks").text()));
  EXPECT_EQ(c.parallel.dp(), 2);             // 8 GPUs / (TP 2 · PP 2)
  EXPECT_EQ(c.model.ffn_hidden_size, 1024);  // 4·256
  EXPECT_EQ(c.model.num_query_groups, 8);    // MHA
  EXPECT_EQ(c.model.kv_channels, 32);        // 256 / 8
  EXPECT_EQ(c.model.make_vocab_size_divisible_by, 128);
  EXPECT_EQ(c.model.name, "model");
  EXPECT_EQ(c.parallel.recompute, workload::Recompute::None);
  EXPECT_EQ(c.parallel.schedule, workload::Schedule::OneFOneB);
  EXPECT_EQ(c.training.precision, workload::Precision::Bf16);
  EXPECT_EQ(c.training.attention, workload::AttentionBackend::Flash);
  EXPECT_EQ(c.run.engine, "auto");
  EXPECT_EQ(
      load_experiment((dir / "e.yaml").string(), {"training.attention=flash2"}).training.attention,
      workload::AttentionBackend::Flash2);
  EXPECT_EQ(c.run.trace_ranks, (std::vector<std::uint32_t>{0}));
  EXPECT_TRUE(c.run.coalesce_local_ops);

  // num_gpus derived from TP·PP·DP; a partial node (4 < 8 GPUs per node) is allowed.
  const auto d = load_experiment(put(dir / "f.yaml", Yaml()
                                                         .drop("cluster", "num_gpus")
                                                         .set("parallel", "dp", "1")
                                                         .set("run", "trace_ranks", "3")
                                                         .text()));
  EXPECT_EQ(d.cluster.num_gpus, 4);
  // Megatron's default global batch is micro_batch_size · data_parallel_size.
  const auto g = load_experiment(put(dir / "g.yaml", Yaml()
                                                         .drop("training", "global_batch_size")
                                                         .set("training", "micro_batch_size", "2")
                                                         .text()));
  EXPECT_EQ(g.training.global_batch_size, 4);  // MBS 2 · DP 2
  EXPECT_EQ(d.run.trace_ranks, (std::vector<std::uint32_t>{3}));
}

TEST(Config, NullValueMeansUnset) {
  const fs::path dir = scratch();
  const auto c = load_experiment(put(
      dir / "e.yaml", Yaml().set("parallel", "dp", "~").set("model", "kv_channels", "").text()));
  EXPECT_EQ(c.parallel.dp(), 2);
  EXPECT_EQ(c.model.kv_channels, 32);
}

TEST(Config, ResolvedYamlIsCanonicalDeterministicAndLoadsBack) {
  const auto c = load_experiment(repo("inputs/experiments/quickstart.yaml"));
  EXPECT_EQ(c.resolved_yaml,
            load_experiment(repo("inputs/experiments/quickstart.yaml")).resolved_yaml);
  const std::string& y = c.resolved_yaml;
  EXPECT_NE(y.find("tensor_model_parallel_size: 4"), std::string::npos) << y;
  EXPECT_NE(y.find("data_parallel_size: 8"), std::string::npos) << y;
  EXPECT_NE(y.find("hidden_dropout: 0\n"), std::string::npos) << y;
  EXPECT_NE(y.find("nvlink_bandwidth_GBps: 450"), std::string::npos) << y;
  EXPECT_NE(y.find("trace_ranks: [0, 32]"), std::string::npos) << y;
  EXPECT_EQ(y.find("tp:"), std::string::npos) << y;
  // Sections in a fixed order.
  EXPECT_LT(y.find("model:"), y.find("parallel:"));
  EXPECT_LT(y.find("parallel:"), y.find("training:"));
  EXPECT_LT(y.find("training:"), y.find("cluster:"));
  EXPECT_LT(y.find("cluster:"), y.find("run:"));

  // The emitted file stands alone: loaded from elsewhere it gives the same configuration.
  const fs::path dir = scratch();
  write(dir / "resolved.yaml", y);
  const auto back = load_experiment((dir / "resolved.yaml").string());
  const auto body = [](const std::string& s) { return s.substr(s.find("\nmodel:")); };
  EXPECT_EQ(body(back.resolved_yaml), body(y));

  const auto g = load_experiment(repo("inputs/experiments/gpt3-175b-1024.yaml"));
  EXPECT_NE(g.resolved_yaml.find("hidden_dropout: 0.1\n"), std::string::npos) << g.resolved_yaml;

  // run.optimism_window_us is emitted where set (and read back: 2.5 ms past GVT, in ns).
  const auto w = load_experiment(repo("inputs/experiments/quickstart.yaml"),
                                 {"run.engine=optimistic", "run.optimism_window_us=2500"});
  EXPECT_DOUBLE_EQ(w.run.optimism_window_us, 2500);
  EXPECT_NE(w.resolved_yaml.find("optimism_window_us: 2500"), std::string::npos) << w.resolved_yaml;
  EXPECT_EQ(y.find("optimism_window_us"), std::string::npos) << y;
  write(dir / "window.yaml", w.resolved_yaml);
  EXPECT_DOUBLE_EQ(load_experiment((dir / "window.yaml").string()).run.optimism_window_us, 2500);
}

// ---------------------------------------------------------------- overrides

TEST(ConfigOverride, ClusterPresetSwitchKeepsInlineKeys) {
  const std::string gpt3 = repo("inputs/experiments/gpt3-175b-1024.yaml");
  const auto c = load_experiment(gpt3, {"cluster.preset=dgx-h100"});
  EXPECT_EQ(c.cluster.preset, "dgx-h100");
  EXPECT_EQ(c.cluster.gpu, "H100-SXM");
  EXPECT_DOUBLE_EQ(c.cluster.nvlink_bandwidth_GBps, 450);
  EXPECT_DOUBLE_EQ(c.cluster.nic_bandwidth_Gbps, 400);
  EXPECT_EQ(c.cluster.num_gpus, 1024);  // the experiment's inline key

  const fs::path dir = scratch();
  write(dir / "e.yaml", Yaml().set("cluster", "nic_bandwidth_Gbps", "100").text());
  const auto d = load_experiment((dir / "e.yaml").string(), {"cluster.preset=dgx-h200"});
  EXPECT_EQ(d.cluster.gpu, "H200-SXM");
  EXPECT_DOUBLE_EQ(d.cluster.nic_bandwidth_Gbps, 100);  // inline wins over the new preset
}

TEST(ConfigOverride, AScaleUpDomainOfSeveralServersIsTheNetworksNode) {
  // GB200 NVL72 (the gb200-nvl72 preset): trays of 4 GPUs and 4 NICs, 72 GPUs in one NVLink
  // domain. The network model's node is the domain: 72 GPUs, 18 trays × 4 = 72 NICs.
  const std::string e = repo("inputs/experiments/quickstart.yaml");  // 64 GPUs
  const auto c = load_experiment(e, {"cluster.preset=gb200-nvl72"});
  EXPECT_EQ(c.cluster.gpus_per_node, 72);
  EXPECT_EQ(c.cluster.nics_per_node, 72);
  // Servers of 8 with 8 NICs joined in pairs: 16 GPUs and 16 NICs a node.
  const auto d = load_experiment(e, {"cluster.gpus_per_scaleup_domain=16"});
  EXPECT_EQ(d.cluster.gpus_per_node, 16);
  EXPECT_EQ(d.cluster.nics_per_node, 16);
  // A domain must join whole servers.
  try {
    load_experiment(e, {"cluster.gpus_per_scaleup_domain=12"});
    FAIL() << "no InputError";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("cluster.gpus_per_scaleup_domain"), std::string::npos)
        << err.what();
  }
}

TEST(ConfigOverride, NumGpusWithMatchingDataParallel) {
  const std::string gpt3 = repo("inputs/experiments/gpt3-175b-1024.yaml");
  const auto c = load_experiment(gpt3, {"cluster.num_gpus=8192", "parallel.dp=128"});
  EXPECT_EQ(c.cluster.num_gpus, 8192);
  EXPECT_EQ(c.parallel.dp(), 128);                  // 8192 / (8·8)
  EXPECT_EQ(c.training.num_microbatches(128), 12);  // 1536 / 128
  // Unsetting dp derives it from the GPU count.
  EXPECT_EQ(load_experiment(gpt3, {"cluster.num_gpus=8192", "parallel.data_parallel_size="})
                .parallel.dp(),
            128);
  // Without a matching dp the plan is rejected.
  try {
    load_experiment(gpt3, {"cluster.num_gpus=8192"});
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    expect_names(e.what(), "gpt3-175b-1024.yaml", "cluster.num_gpus=8192");
  }
}

TEST(ConfigOverride, ValuesParsedAsYaml) {
  const std::string q = repo("inputs/experiments/quickstart.yaml");
  const auto c = load_experiment(
      q, {"run.trace_ranks=[0,8]", "parallel.tp=2", "parallel.dp=16", "model.preset=llama3-70b",
          "parallel.recompute=full", "run.output=/tmp/x y", "training.precision=fp16"});
  EXPECT_EQ(c.run.trace_ranks, (std::vector<std::uint32_t>{0, 8}));
  EXPECT_EQ(c.parallel.tp(), 2);  // the alias overrides the file's alias
  EXPECT_EQ(c.parallel.dp(), 16);
  EXPECT_EQ(c.model.hidden_size, 8192);  // llama3-70b …
  EXPECT_EQ(c.model.num_layers, 8);      // … with the experiment's inline keys on top
  EXPECT_EQ(c.parallel.recompute, workload::Recompute::Full);
  EXPECT_EQ(c.run.output, "/tmp/x y");
  EXPECT_EQ(c.training.precision, workload::Precision::Fp16);
}

TEST(ConfigOverride, BadOverridesNameFileAndKey) {
  const std::string q = repo("inputs/experiments/quickstart.yaml");
  const auto msg = [&](const std::string& o) {
    try {
      load_experiment(q, {o});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  expect_names(msg("model.num_layer=4"), "quickstart.yaml", "model.num_layer");
  EXPECT_NE(msg("model.num_layer=4").find("did you mean 'num_layers'"), std::string::npos);
  expect_names(msg("modle.num_layers=4"), "quickstart.yaml", "modle");
  expect_names(msg("model.num_layers"), "quickstart.yaml", "model.num_layers");
  expect_names(msg("num_layers=4"), "quickstart.yaml", "num_layers");
  expect_names(msg("model.hidden.size=4"), "quickstart.yaml", "model.hidden.size");
  expect_names(msg("run.trace_ranks=[0,"), "quickstart.yaml", "run.trace_ranks");
  expect_names(msg("model.num_layers=many"), "quickstart.yaml", "model.num_layers");
  expect_names(msg("cluster.preset=dgx-z100"), "quickstart.yaml", "cluster.preset");
}

// ---------------------------------------------------------------- Hugging Face config.json

TEST(HfConfig, Llama3ConfigJsonMatchesPreset) {
  const auto hf = load_hf_config(repo("inputs/hf/llama3-8b-config.json"));
  EXPECT_EQ(hf.name, "llama");  // model_type
  EXPECT_EQ(hf.num_layers, 32);
  EXPECT_EQ(hf.hidden_size, 4096);
  EXPECT_EQ(hf.ffn_hidden_size, 14336);
  EXPECT_EQ(hf.num_attention_heads, 32);
  EXPECT_EQ(hf.num_query_groups, 8);
  EXPECT_EQ(hf.kv_channels, 0);  // no head_dim in the file: hidden / heads
  EXPECT_EQ(hf.head_dim(), 128);
  EXPECT_EQ(hf.vocab_size, 128256);
  EXPECT_EQ(hf.seq_length, 8192);  // max_position_embeddings
  EXPECT_TRUE(hf.gated_linear_unit);
  EXPECT_TRUE(hf.untie_embeddings);
  EXPECT_FALSE(hf.add_bias_linear);
  EXPECT_DOUBLE_EQ(hf.attention_dropout, 0.0);

  // Through an experiment, every ModelSpec field equals inputs/models/llama3-8b.yaml's.
  const auto a = load_experiment(repo("inputs/experiments/llama3-8b-hf.yaml")).model;
  const auto b = load_experiment(repo("inputs/experiments/llama3-8b-hf.yaml"),
                                 {"model.hf_config=", "model.preset=llama3-8b"})
                     .model;
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.ffn_hidden_size, b.ffn_hidden_size);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_query_groups, b.num_query_groups);
  EXPECT_EQ(a.kv_channels, b.kv_channels);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.make_vocab_size_divisible_by, b.make_vocab_size_divisible_by);
  EXPECT_EQ(a.seq_length, b.seq_length);
  EXPECT_EQ(a.gated_linear_unit, b.gated_linear_unit);
  EXPECT_EQ(a.untie_embeddings, b.untie_embeddings);
  EXPECT_EQ(a.add_bias_linear, b.add_bias_linear);
  EXPECT_EQ(a.hidden_dropout, b.hidden_dropout);
  EXPECT_EQ(a.attention_dropout, b.attention_dropout);
}

TEST(HfConfig, MapsTiedBiasedGeluAndHeadDim) {
  const fs::path dir = scratch();
  write(dir / "config.json",
        R"({"model_type": "llama", "hidden_size": 512, "intermediate_size": 1536,
    "num_hidden_layers": 6, "num_attention_heads": 8, "head_dim": 96, "vocab_size": 32000,
    "max_position_embeddings": 4096, "tie_word_embeddings": true, "attention_bias": true,
    "hidden_act": "gelu", "attention_dropout": 0.1, "rope_scaling": null})");
  const auto m = load_hf_config((dir / "config.json").string());
  EXPECT_EQ(m.name, "llama");
  EXPECT_EQ(m.num_query_groups, 8);  // no num_key_value_heads → MHA
  EXPECT_EQ(m.kv_channels, 96);
  EXPECT_FALSE(m.untie_embeddings);
  EXPECT_TRUE(m.add_bias_linear);
  // Hugging Face's LlamaMLP is gated whatever hidden_act is: GeGLU here, the same GEMMs as
  // SwiGLU (it was read as an ungated MLP before, 12 % less time on a Llama config).
  EXPECT_TRUE(m.gated_linear_unit);
  EXPECT_DOUBLE_EQ(m.attention_dropout, 0.1);

  // Relative to the YAML file; inline keys win over the JSON (seq_length here).
  write(dir / "exp" / "e.yaml",
        "model:\n  hf_config: ../config.json\n  seq_length: 1024\n"
        "parallel: {tp: 8}\ncluster: {preset: dgx-h100, num_gpus: 8}\n");
  const auto c = load_experiment((dir / "exp" / "e.yaml").string());
  EXPECT_EQ(c.model.seq_length, 1024);
  EXPECT_EQ(c.model.kv_channels, 96);
  EXPECT_EQ(c.model.name, "llama");
}

TEST(HfConfig, BadConfigJsonNamesFileAndKey) {
  const fs::path dir = scratch();
  const auto msg = [&](const std::string& json) {
    write(dir / "config.json", json);
    try {
      load_hf_config((dir / "config.json").string());
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string bare_tail = R"("num_attention_heads": 8, "vocab_size": 100})";
  const std::string ok_tail = R"("model_type": "llama", )" + bare_tail;
  // Unknown and missing model types, sliding windows: one line naming the key (an unknown type
  // was read as Llama before).
  expect_names(
      msg(R"({"model_type": "gemma", "hidden_size": 64, "num_hidden_layers": 2, )" + bare_tail),
      "config.json", "model_type: 'gemma' is not a model type this reader knows");
  expect_names(
      msg(R"({"model_type": "gpt_neox", "hidden_size": 64, "num_hidden_layers": 2, )" + bare_tail),
      "config.json", "model_type");
  expect_names(msg(R"({"hidden_size": 64, "num_hidden_layers": 2, )" + bare_tail), "config.json",
               "model_type: missing");
  expect_names(msg(R"({"model_type": "mistral", "sliding_window": 4096, "hidden_size": 64, )"
                   R"("num_hidden_layers": 2, )" +
                   bare_tail),
               "config.json", "sliding_window");
  expect_names(msg(R"({"hidden_size": 64, )" + ok_tail), "config.json", "num_hidden_layers");
  expect_names(msg(R"({"hidden_size": "64", "num_hidden_layers": 2, )" + ok_tail), "config.json",
               "hidden_size");
  expect_names(
      msg(R"({"hidden_size": 64, "num_hidden_layers": 2, "tie_word_embeddings": 1, )" + ok_tail),
      "config.json", "tie_word_embeddings");
  expect_names(msg(R"({"hidden_size": 64,)"), "config.json", "malformed JSON");
  expect_names(msg("[1, 2]"), "config.json", "JSON object");
  try {
    load_hf_config((dir / "missing.json").string());
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    expect_names(e.what(), "missing.json", "not found");
  }
}

/// The MoE presets and the models' own Hugging Face config.json give the same model (and the
/// same aux-loss coefficient where config.json states one: router_aux_loss_coef).
void expect_hf_matches_preset(const std::string& experiment, const std::string& hf,
                              bool aux_in_config = true) {
  SCOPED_TRACE(hf);
  const std::string exp = repo("inputs/experiments/" + experiment + ".yaml");
  const auto a = load_experiment(exp).model;
  const auto b =
      load_experiment(exp, {"model.preset=", "model.hf_config=" + repo("inputs/hf/" + hf),
                            "model.seq_length=" + std::to_string(a.seq_length)})
          .model;
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_query_groups, b.num_query_groups);
  EXPECT_EQ(a.num_experts, b.num_experts);
  EXPECT_EQ(a.moe_router_topk, b.moe_router_topk);
  EXPECT_EQ(a.moe_ffn_hidden_size, b.moe_ffn_hidden_size);
  EXPECT_EQ(a.moe_shared_expert_intermediate_size, b.moe_shared_expert_intermediate_size);
  EXPECT_EQ(a.moe_layer_pattern, b.moe_layer_pattern);
  EXPECT_EQ(a.multi_latent_attention, b.multi_latent_attention);
  EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
  EXPECT_EQ(a.kv_lora_rank, b.kv_lora_rank);
  EXPECT_EQ(a.qk_dim(), b.qk_dim());
  EXPECT_EQ(a.v_dim(), b.v_dim());
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.untie_embeddings, b.untie_embeddings);
  EXPECT_EQ(a.qk_layernorm, b.qk_layernorm);
  EXPECT_EQ(a.add_qkv_bias, b.add_qkv_bias);
  EXPECT_EQ(a.moe_router_num_groups, b.moe_router_num_groups);
  EXPECT_EQ(a.moe_router_group_topk, b.moe_router_group_topk);
  if (aux_in_config) {
    EXPECT_EQ(a.moe_aux_loss_coeff, b.moe_aux_loss_coeff);
  }
  EXPECT_DOUBLE_EQ(workload::total_parameters(a), workload::total_parameters(b));
}

TEST(HfConfig, MoeConfigJsonsMatchPresets) {
  expect_hf_matches_preset("mixtral-8x7b-1k", "mixtral-8x7b-config.json");
  expect_hf_matches_preset("qwen3-235b-1k", "qwen3-235b-a22b-config.json");
  // DeepSeek-V3's config.json has no aux-loss coefficient (topk_method noaux_tc; the
  // sequence-wise α = 0.0001 is the paper's, §2.1.2).
  expect_hf_matches_preset("deepseek-v3-2k", "deepseek-v3-config.json", false);
  // DeepSeek: first_k_dense_replace 3 → layers 0–2 dense, the 58 others MoE.
  const auto d = load_hf_config(repo("inputs/hf/deepseek-v3-config.json"));
  ASSERT_EQ(d.moe_layer_pattern.size(), 61u);
  EXPECT_EQ(d.moe_layers(), 58);
  EXPECT_FALSE(d.is_moe_layer(2));
  EXPECT_TRUE(d.is_moe_layer(3));
  EXPECT_EQ(d.moe_shared_expert_intermediate_size, 2048);  // n_shared_experts · 2048
  EXPECT_EQ(d.moe_router_num_groups, 8);                   // n_group
  EXPECT_EQ(d.moe_router_group_topk, 4);                   // topk_group
}

TEST(Config, ResolvedYamlKeepsTheMoeAndPipelineKeys) {
  // MTP, a pipeline layout, recompute modules, the flex dispatcher and group-limited routing go
  // into the resolved YAML and load back to the same configuration.
  const fs::path dir = scratch();
  write(dir / "case.yaml", R"(model:
  preset: deepseek-v3
  mtp_num_layers: 1
parallel:
  tensor_model_parallel_size: 2
  sequence_parallel: true
  pipeline_model_parallel_size: 8
  pipeline_layout: "Et|(tt|)*30mL"
  expert_model_parallel_size: 64
  expert_tensor_parallel_size: 1
  moe_token_dispatcher_type: flex
  use_distributed_optimizer: true
  recompute: selective
  recompute_modules: [mla_up_proj, mlp, moe_act]
training:
  micro_batch_size: 1
  global_batch_size: 8192
  precision: bf16
cluster:
  preset: dgx-h100
  num_gpus: 1024
)");
  const auto c = load_experiment((dir / "case.yaml").string());
  const std::string& y = c.resolved_yaml;
  for (const char* key :
       {"mtp_num_layers: 1", "pipeline_layout: Et|(tt|)*30mL",
        "recompute_modules: [moe_act, mla_up_proj, mlp]", "moe_token_dispatcher_type: flex",
        "moe_router_num_groups: 8", "moe_router_group_topk: 4"})
    EXPECT_NE(y.find(key), std::string::npos) << key << "\n" << y;
  write(dir / "resolved.yaml", y);
  const auto back = load_experiment((dir / "resolved.yaml").string());
  const auto body = [](const std::string& s) { return s.substr(s.find("\nmodel:")); };
  EXPECT_EQ(body(back.resolved_yaml), body(y));
  EXPECT_EQ(back.parallel.layout_layers, c.parallel.layout_layers);
  EXPECT_EQ(back.parallel.recompute_modules, c.parallel.recompute_modules);
}

TEST(Config, PipelineLayoutSetsEachVirtualStagesLayers) {
  // 6 layers on PP 2 as "Et|tt|t|ttL": 4 virtual stages → VP 2; v = chunk·PP + stage: stage 0 holds
  // chunks "Et" (1 layer) and "t" (1), stage 1 "tt" (2) and "ttL" (2); layers 0 | 1–2 | 3 | 4–5.
  const fs::path dir = scratch();
  Yaml y;
  y.set("model", "num_layers", "6").set("parallel", "pipeline_layout", "\"Et|tt|t|ttL\"");
  write(dir / "case.yaml", y.text());
  const auto c = load_experiment((dir / "case.yaml").string());
  const auto& p = c.parallel;
  EXPECT_EQ(p.vpp(), 2);
  EXPECT_EQ(p.layers_in_chunk(0, 0, 6), 1);
  EXPECT_EQ(p.layers_in_chunk(1, 0, 6), 2);
  EXPECT_EQ(p.layers_in_chunk(0, 1, 6), 1);
  EXPECT_EQ(p.layers_in_chunk(1, 1, 6), 2);
  EXPECT_EQ(p.first_layer_of_chunk(0, 1, 6), 3);
  EXPECT_EQ(p.first_layer_of_chunk(1, 1, 6), 4);
  // Megatron's layout rules and scalescope's limits, one line each, naming the key.
  const auto bad = [&](const std::string& layout, const std::string& what,
                       std::vector<std::string> extra = {}) {
    SCOPED_TRACE(layout);
    Yaml b = y;
    b.set("parallel", "pipeline_layout", "\"" + layout + "\"");
    expect_names(error_of(dir, b.text(), extra), "case.yaml", "pipeline_layout");
    EXPECT_NE(error_of(dir, b.text(), extra).find(what), std::string::npos)
        << error_of(dir, b.text(), extra);
  };
  bad("Et|tt|t|tt|L", "not a multiple of pipeline_model_parallel_size=2");
  bad("Et|tt|t|tL", "has 5 decoder layers 't', model.num_layers is 6");
  bad("tE|tt|t|ttL", "must start with the embedding");
  bad("Et|tt|t|tLt", "must end with the loss");
  bad("Et|tt|t|ttmL", "has 1 MTP modules 'm', model.mtp_num_layers is 0");
  bad("Et|tt|t|ttL", "replaces decoder_first/last",
      {"parallel.account_for_loss_in_pipeline_split=true"});
  y.set("parallel", "virtual_pipeline_model_parallel_size", "3");
  write(dir / "case.yaml", y.text());
  expect_names(error_of(dir, y.text()), "case.yaml", "disagrees with parallel.pipeline_layout");
}

TEST(Config, MoeLayerFreqForms) {
  const std::string exp = repo("inputs/experiments/mixtral-8x7b-1k.yaml");
  const auto every_other = load_experiment(exp, {"model.moe_layer_freq=2"}).model;
  EXPECT_EQ(every_other.moe_layers(), 16);
  EXPECT_TRUE(every_other.is_moe_layer(0));
  EXPECT_FALSE(every_other.is_moe_layer(1));
  const auto pattern = load_experiment(exp, {"model.moe_layer_freq=([0]*2+[1]*29+[0])"}).model;
  EXPECT_EQ(pattern.moe_layers(), 29);
  EXPECT_FALSE(pattern.is_moe_layer(31));
  // Wrong length, bad entries and impossible expert layouts name the key.
  auto error = [&](std::vector<std::string> o) {
    try {
      load_experiment(exp, o);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error({"model.moe_layer_freq=([0]*2+[1]*20)"}).find("model.moe_layer_freq"),
            std::string::npos);
  EXPECT_NE(error({"model.moe_layer_freq=[0, 2]"}).find("model.moe_layer_freq"), std::string::npos);
  EXPECT_NE(error({"parallel.ep=3"}).find("expert_model_parallel_size=3"), std::string::npos);
  EXPECT_NE(error({"parallel.tp=2"}).find("sequence_parallel"), std::string::npos);
  // FSDP with experts and pipeline parallelism is modelled; HSDP with experts where the
  // replicas (here DP·CP / 2) do not divide expert DP into shards is refused.
  EXPECT_EQ(error({"parallel.zero_stage=3", "parallel.overlap_param_gather=false"}), "");
  EXPECT_NE(error({"parallel.zero_stage=3", "parallel.overlap_param_gather=false",
                   "parallel.fsdp_shard_size=2"})
                .find("parallel.fsdp_shard_size=2 (HSDP"),
            std::string::npos);
  EXPECT_NE(error({"model.moe_router_topk=9"}).find("model.moe_router_topk: 9 exceeds"),
            std::string::npos);
}

// What-ifs as users say them: ranges FIRST-LAST in rank and node lists, a degraded NIC in Gb/s
// or as a seeded fraction of the nodes; a malformed range, or both factor and gbps, refused.
TEST(Config, WhatIfRangesFractionsAndGbps) {
  const auto w = read_whatifs(
      "", {"slow_gpu: {ranks: ['0-3', 8], factor: 1.2}", "degraded_nic: {nodes: '2-4', gbps: 200}",
           "degraded_nic: {fraction: 0.5, seed: 3, factor: 0.5}"});
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].ranks, (std::vector<std::uint32_t>{0, 1, 2, 3, 8}));
  EXPECT_EQ(w[1].nodes, (std::vector<std::uint32_t>{2, 3, 4}));
  EXPECT_EQ(w[1].gbps, 200);
  EXPECT_EQ(w[2].fraction, 0.5);
  EXPECT_EQ(w[2].seed, 3u);
  for (const char* bad :
       {"slow_gpu: {ranks: '4-2', factor: 1.2}", "slow_gpu: {ranks: '1-x', factor: 1.2}",
        "slow_gpu: {ranks: '0-99999999', factor: 1.2}",
        "degraded_nic: {nodes: [1], factor: 0.5, gbps: 200}", "degraded_nic: {nodes: [1]}"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(read_whatifs("", {bad}), InputError);
  }
}

}  // namespace
}  // namespace scalescope::io
