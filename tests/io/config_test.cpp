// Tests of io/config.cpp and io/hf_config.cpp: the shipped inputs load, presets and overrides
// merge in the documented order, and every bad input is a one-line InputError naming the file
// and the key. Expected values are the numbers written in the shipped files (and their sources).
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

namespace scalescope::io {
namespace {

namespace fs = std::filesystem;

const fs::path kRepo = SCALESCOPE_SOURCE_DIR;
std::string repo(const std::string& rel) {
  return (kRepo / rel).string();
}

fs::path scratch_root() {
  return fs::temp_directory_path() / ("scalescope_config_test_" + std::to_string(::getpid()));
}

/// Removes the test's scratch files at exit.
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override { fs::remove_all(scratch_root()); }
};
[[maybe_unused]] const ::testing::Environment* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

/// A fresh directory for the running test.
fs::path scratch() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = scratch_root() / (std::string(info->test_suite_name()) + "." + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

/// Writes `text` to `p` and returns the path, for load_experiment.
std::string put(const fs::path& p, const std::string& text) {
  write(p, text);
  return p.string();
}

/// A small valid experiment, as ordered (section, key, value) lines, that cases edit.
class Yaml {
 public:
  Yaml() {
    rows_ = {{"model", "num_layers", "4"},
             {"model", "hidden_size", "256"},
             {"model", "num_attention_heads", "8"},
             {"model", "vocab_size", "1000"},
             {"model", "seq_length", "128"},
             {"parallel", "tp", "2"},
             {"parallel", "pp", "2"},
             {"parallel", "dp", "2"},
             {"training", "micro_batch_size", "1"},
             {"training", "global_batch_size", "4"},
             {"cluster", "preset", "dgx-a100"},
             {"cluster", "num_gpus", "8"},
             {"run", "trace_ranks", "[0, 7]"}};
  }
  /// Sets (or adds) section.key.
  Yaml& set(const std::string& section, const std::string& key, const std::string& value) {
    for (auto& r : rows_)
      if (r[0] == section && r[1] == key) {
        r[2] = value;
        return *this;
      }
    rows_.push_back({section, key, value});
    return *this;
  }
  Yaml& drop(const std::string& section, const std::string& key) {
    std::erase_if(rows_, [&](const auto& r) { return r[0] == section && r[1] == key; });
    return *this;
  }
  std::string text() const {
    std::string out;
    for (const char* s : {"model", "parallel", "training", "cluster", "run"}) {
      out += std::string(s) + ":\n";
      for (const auto& r : rows_)
        if (r[0] == s) out += "  " + r[1] + ": " + r[2] + "\n";
    }
    return out;
  }

 private:
  std::vector<std::array<std::string, 3>> rows_;
};

/// Loads `text` from <dir>/<file> and returns the InputError message ("" if none was thrown).
std::string error_of(const fs::path& dir, const std::string& text,
                     const std::vector<std::string>& overrides = {},
                     const std::string& file = "case.yaml") {
  write(dir / file, text);
  try {
    load_experiment((dir / file).string(), overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

/// The message names the file and the key, and is one line.
void expect_names(const std::string& message, const std::string& file, const std::string& key) {
  EXPECT_NE(message, "") << "no InputError for " << key;
  EXPECT_NE(message.find(file), std::string::npos) << message;
  EXPECT_NE(message.find(key), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

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
  for (const char* m : {"gpt3-175b", "llama3-8b", "llama3-70b", "llama3-405b"})
    for (const char* c : {"dgx-a100", "dgx-h100", "dgx-h200"}) {
      SCOPED_TRACE(std::string(m) + " on " + c);
      write(dir / "x.yaml",
            fmt::format("model: {{preset: {}}}\ncluster: {{preset: {}, num_gpus: 8}}\n"
                        "parallel: {{tp: 8}}\n",
                        repo(std::string("inputs/models/") + m + ".yaml"),
                        repo(std::string("inputs/clusters/") + c + ".yaml")));
      EXPECT_NO_THROW(load_experiment((dir / "x.yaml").string()));
    }
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
  EXPECT_EQ(c.run.engine, "sequential");
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
  write(dir / "config.json", R"({"model_type": "toy", "hidden_size": 512, "intermediate_size": 1536,
    "num_hidden_layers": 6, "num_attention_heads": 8, "head_dim": 96, "vocab_size": 32000,
    "max_position_embeddings": 4096, "tie_word_embeddings": true, "attention_bias": true,
    "hidden_act": "gelu", "attention_dropout": 0.1, "rope_scaling": null})");
  const auto m = load_hf_config((dir / "config.json").string());
  EXPECT_EQ(m.name, "toy");
  EXPECT_EQ(m.num_query_groups, 8);  // no num_key_value_heads → MHA
  EXPECT_EQ(m.kv_channels, 96);
  EXPECT_FALSE(m.untie_embeddings);
  EXPECT_TRUE(m.add_bias_linear);
  EXPECT_FALSE(m.gated_linear_unit);
  EXPECT_DOUBLE_EQ(m.attention_dropout, 0.1);

  // Relative to the YAML file; inline keys win over the JSON (seq_length here).
  write(dir / "exp" / "e.yaml",
        "model:\n  hf_config: ../config.json\n  seq_length: 1024\n"
        "parallel: {tp: 8}\ncluster: {preset: dgx-h100, num_gpus: 8}\n");
  const auto c = load_experiment((dir / "exp" / "e.yaml").string());
  EXPECT_EQ(c.model.seq_length, 1024);
  EXPECT_EQ(c.model.kv_channels, 96);
  EXPECT_EQ(c.model.name, "toy");
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
  const std::string ok_tail = R"("num_attention_heads": 8, "vocab_size": 100})";
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
      {Yaml().set("parallel", "fsdp", "true"), "parallel.zero_stage=3"},
      {Yaml().set("parallel", "tensor_model_parallel_size", "2"),
       "parallel.tensor_model_parallel_size"},  // given twice (alias tp too)
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

// ---------------------------------------------------------------- Megatron-LM launch line

/// Llama 3 70B on 1,024 H100 written by hand as Megatron-LM options, key by key from
/// inputs/experiments/llama3-70b-1k.yaml and its preset inputs/models/llama3-70b.yaml
/// (80 layers, h 8192, FFN 28672, 64 heads, 8 KV groups, head dim 128, vocabulary 128256,
/// sequence 8192, SwiGLU, untied, no biases, no dropout, RoPE; TP 8, PP 4, SP, selective
/// recomputation, distributed optimizer, overlapped grad reduce / param gather; MBS 1, GBS 512,
/// bf16). DP 32 is not an option: Megatron derives it from the world size (cluster.num_gpus).
const std::string kLlama70bLine =
    "torchrun --nproc_per_node 8 pretrain_gpt.py "
    "--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 "
    "--group-query-attention --num-query-groups 8 --kv-channels 128 --vocab-size 128256 "
    "--make-vocab-size-divisible-by 128 --seq-length 8192 --max-position-embeddings 8192 "
    "--swiglu --untie-embeddings-and-output-weights --disable-bias-linear --hidden-dropout 0.0 "
    "--attention-dropout 0.0 --position-embedding-type rope --normalization RMSNorm "
    "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --sequence-parallel "
    "--recompute-activations --use-distributed-optimizer --overlap-grad-reduce "
    "--overlap-param-gather --tp-comm-overlap --micro-batch-size 1 --global-batch-size 512 --bf16 "
    "--transformer-impl transformer_engine --use-flash-attn --train-iters 100 --lr 1.5e-4 "
    "--data-path 0.5 /data/a_text_document 0.5 /data/b_text_document --split 99,1,0 "
    "--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-70B "
    "--save /ckpt --load /ckpt --log-interval 1 --log-throughput";
/// What the launch line cannot say: the cluster, the run section, and the label `name`.
const std::vector<std::string> kLlama70bRest = {
    "cluster.preset=dgx-h100", "cluster.num_gpus=1024", "run.trace_ranks=[0, 768]",
    "run.output=out/llama3-70b-1k", "model.name=llama3-70b"};

/// The resolved configuration without its comment header.
std::string body(const std::string& resolved) {
  return resolved.substr(resolved.find("\nmodel:"));
}

TEST(ConfigMegatron, LaunchLineLoadsToTheShippedExperiment) {
  const auto yaml = load_experiment(repo("inputs/experiments/llama3-70b-1k.yaml"));
  const auto line = load_experiment("", kLlama70bRest, kLlama70bLine);
  // Every resolved key (model, plan, training, cluster, run) is the same.
  EXPECT_EQ(body(line.resolved_yaml), body(yaml.resolved_yaml));
  EXPECT_EQ(line.parallel.dp(), 32);  // 1024 / (TP 8 · PP 4)
  EXPECT_EQ(line.model.num_query_groups, 8);
  EXPECT_EQ(line.parallel.recompute, workload::Recompute::Selective);
  EXPECT_TRUE(line.parallel.overlap_param_gather);
  EXPECT_EQ(line.training.precision, workload::Precision::Bf16);
  EXPECT_EQ(line.path, "(command line)");
  // The header names the launch line; the body stands alone (no megatron_args key).
  EXPECT_NE(line.resolved_yaml.find("# megatron_args (--megatron-args): --num-layers 80"),
            std::string::npos)
      << line.resolved_yaml;
  EXPECT_EQ(line.resolved_yaml.find("\nmegatron_args:"), std::string::npos);
  const fs::path dir = scratch();
  write(dir / "resolved.yaml", line.resolved_yaml);
  EXPECT_EQ(body(load_experiment((dir / "resolved.yaml").string()).resolved_yaml),
            body(yaml.resolved_yaml));

  // The same line as the file's `megatron_args:` key, a multi-line block with shell
  // continuations and a comment, beside the sections it cannot give.
  std::string block = kLlama70bLine;
  for (std::size_t at = 0; (at = block.find(" --", at)) != std::string::npos; at += 5)
    block.replace(at, 1, " \\\n  ");  // " --x" → " \⏎  --x"
  for (std::size_t at = 0; (at = block.find('\n', at)) != std::string::npos; at += 3)
    block.replace(at, 1, "\n  ");  // indent the continuation lines into the YAML block
  write(dir / "e.yaml", "megatron_args: |\n  # pasted from the job script\n  " + block +
                            "\ncluster: {preset: dgx-h100, num_gpus: 1024}\n"
                            "run: {trace_ranks: [0, 768], output: out/llama3-70b-1k}\n"
                            "model: {name: llama3-70b}\n");
  EXPECT_EQ(body(load_experiment((dir / "e.yaml").string()).resolved_yaml),
            body(yaml.resolved_yaml));
}

TEST(ConfigMegatron, EqualsFormAndShellQuoting) {
  const std::vector<std::string> cluster = {"cluster.preset=dgx-a100", "cluster.num_gpus=8"};
  // The Yaml() experiment's model and plan: 4 layers, h 256, 8 heads, vocab 1000, seq 128,
  // TP 2, PP 2 (DP 2 from 8 GPUs), MBS 1, GBS 4.
  const std::string plain =
      "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --vocab-size 1000 "
      "--seq-length 128 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
      "--micro-batch-size 1 --global-batch-size 4 --bf16";
  const std::string quoted =
      "--num-layers=4 '--hidden-size' \"256\" --num-attention-heads='8' \\\n"
      "  --vocab-size=\"1000\" --seq-length \\1\\28 # a comment --fp16\n"
      "--tensor-model-parallel-size=2 --pipeline-model-parallel-size '2' "
      "--micro-batch-size=1 --global-batch-size 4 --bf16";
  const auto a = load_experiment("", cluster, plain);
  const auto b = load_experiment("", cluster, quoted);
  EXPECT_EQ(body(a.resolved_yaml), body(b.resolved_yaml));
  EXPECT_EQ(b.model.seq_length, 128);
  EXPECT_EQ(b.parallel.dp(), 2);                               // 8 / (2·2)
  EXPECT_EQ(b.training.precision, workload::Precision::Bf16);  // "--fp16" was in the comment
  // A repeated option: the last one wins, as in argparse.
  EXPECT_EQ(load_experiment("", cluster, plain + " --num-layers 8").model.num_layers, 8);
}

TEST(ConfigMegatron, StoreTrueFlagsAndMegatronDefaults) {
  const std::vector<std::string> cluster = {"cluster.preset=dgx-h100", "cluster.num_gpus=8"};
  const std::string base =
      "--num-layers 8 --hidden-size 4096 --num-attention-heads 32 --vocab-size 32000 "
      "--seq-length 2048 --micro-batch-size 1 --global-batch-size 16 --fp16 "
      "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2";
  // Nothing but the shape: Megatron's defaults where scalescope's differ.
  const auto d = load_experiment("", cluster, base);
  EXPECT_DOUBLE_EQ(d.model.hidden_dropout, 0.1);
  EXPECT_DOUBLE_EQ(d.model.attention_dropout, 0.1);
  EXPECT_EQ(d.model.position_embedding_type, workload::PositionEmbedding::LearnedAbsolute);
  EXPECT_EQ(d.model.ffn_hidden_size, 4 * 4096);
  EXPECT_EQ(d.model.num_query_groups, 32);  // MHA
  EXPECT_TRUE(d.model.add_bias_linear);
  EXPECT_FALSE(d.model.untie_embeddings);
  EXPECT_FALSE(d.parallel.sequence_parallel);
  EXPECT_EQ(d.parallel.recompute, workload::Recompute::None);
  EXPECT_EQ(d.training.precision, workload::Precision::Fp16);

  const auto f = load_experiment(
      "", cluster,
      base +
          " --swiglu --untie-embeddings-and-output-weights --disable-bias-linear "
          "--group-query-attention --num-query-groups 4 --sequence-parallel "
          "--use-distributed-optimizer "
          "--overlap-grad-reduce --overlap-param-gather --recompute-granularity full "
          "--recompute-method uniform --recompute-num-layers 1 --attention-backend local "
          "--use-rotary-position-embeddings --num-layers-per-virtual-pipeline-stage 2 "
          "--no-overlap-p2p-communication --microbatch-group-size-per-virtual-pipeline-stage 2 "
          "--tp-comm-overlap --grad-reduce-in-bf16 --ddp-bucket-size 1000000");
  // Megatron's SwiGLU width: int((4·4096·2/3) / 64)·64 = int(170.67)·64 = 10880.
  EXPECT_EQ(f.model.ffn_hidden_size, 10880);
  EXPECT_TRUE(f.model.gated_linear_unit);
  EXPECT_TRUE(f.model.untie_embeddings);
  EXPECT_FALSE(f.model.add_bias_linear);
  EXPECT_EQ(f.model.num_query_groups, 4);
  EXPECT_EQ(f.model.position_embedding_type, workload::PositionEmbedding::Rope);
  EXPECT_TRUE(f.parallel.sequence_parallel);
  EXPECT_TRUE(f.parallel.use_distributed_optimizer);
  EXPECT_TRUE(f.parallel.overlap_grad_reduce);
  EXPECT_TRUE(f.parallel.overlap_param_gather);
  EXPECT_EQ(f.parallel.recompute, workload::Recompute::Full);
  EXPECT_EQ(f.training.attention, workload::AttentionBackend::Unfused);
  EXPECT_EQ(f.parallel.vpp(), 2);  // 8 layers / PP 2 = 4 per stage, 2 per virtual stage
  EXPECT_FALSE(f.parallel.overlap_p2p_comm);
  EXPECT_EQ(f.parallel.microbatch_group_size(), 2);
  EXPECT_TRUE(f.parallel.tp_comm_overlap);
  EXPECT_FALSE(f.parallel.grad_reduce_in_fp32);
  EXPECT_EQ(f.parallel.ddp_bucket_size, 1000000);

  // --use-torch-fsdp2: PyTorch FSDP2, fully sharded (ZeRO-3) layers.
  const auto fsdp2 = load_experiment("", {"cluster.preset=dgx-h100", "cluster.num_gpus=8"},
                                     base +
                                         " --use-torch-fsdp2 --tensor-model-parallel-size 1 "
                                         "--pipeline-model-parallel-size 1");
  EXPECT_TRUE(fsdp2.parallel.fsdp);
  EXPECT_EQ(fsdp2.parallel.zero_stage, 3);

  // --group-query-attention alone: Megatron's default of one group (MQA); TP 1 (the last
  // --tensor-model-parallel-size wins) so that TP divides the groups.
  const auto mqa =
      load_experiment("", {"cluster.preset=dgx-h100", "cluster.num_gpus=4"},
                      base + " --group-query-attention --tensor-model-parallel-size 1");
  EXPECT_EQ(mqa.model.num_query_groups, 1);

  // --recompute-activations is selective and wins over --recompute-granularity (arguments.py);
  // accounting the embedding and the loss: (8 + 2) / PP 2 = 5 per stage, 5 per virtual stage.
  std::string no_vocab = base;
  no_vocab.erase(no_vocab.find("--vocab-size 32000 "), 19);
  const auto g = load_experiment(
      "", cluster,
      no_vocab +
          " --recompute-activations --recompute-granularity full --padded-vocab-size 32768 "
          "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
          "--num-layers-per-virtual-pipeline-stage 5 --use-flash-attn");
  EXPECT_EQ(g.parallel.recompute, workload::Recompute::Selective);
  EXPECT_EQ(g.parallel.vpp(), 1);
  EXPECT_EQ(g.model.vocab_size, 32768);
  EXPECT_EQ(g.model.padded_vocab(2), 32768);  // already a multiple of TP 2: not padded again
  EXPECT_EQ(g.training.attention, workload::AttentionBackend::Flash);
}

TEST(ConfigMegatron, PrecedenceYamlThenLaunchLinesThenSet) {
  const fs::path dir = scratch();
  // The file: TP 2, PP 2, DP 2 (8 GPUs), hidden_dropout 0.2, and its own launch line TP 4 · PP 1.
  const std::string file = put(
      dir / "e.yaml", Yaml().drop("parallel", "dp").set("model", "hidden_dropout", "0.2").text() +
                          "megatron_args: --tensor-model-parallel-size 4 "
                          "--pipeline-model-parallel-size 1 --bf16\n");
  const auto a = load_experiment(file);
  EXPECT_EQ(a.parallel.tp(), 4);  // the file's launch line over its parallel: section
  EXPECT_EQ(a.parallel.pp(), 1);
  EXPECT_EQ(a.parallel.dp(), 2);                     // 8 / (4·1)
  EXPECT_DOUBLE_EQ(a.model.hidden_dropout, 0.2);     // set in the file: Megatron's 0.1 not applied
  EXPECT_DOUBLE_EQ(a.model.attention_dropout, 0.1);  // set nowhere: Megatron's default
  // The command line's launch line over the file's; --set over both.
  const auto b = load_experiment(file, {}, "--tensor-model-parallel-size 8");
  EXPECT_EQ(b.parallel.tp(), 8);
  EXPECT_EQ(b.parallel.pp(), 1);  // still the file's launch line
  const auto c = load_experiment(file, {"parallel.tp=2", "model.hidden_dropout=0"},
                                 "--tensor-model-parallel-size 8 --hidden-dropout 0.3");
  EXPECT_EQ(c.parallel.tp(), 2);
  EXPECT_DOUBLE_EQ(c.model.hidden_dropout, 0.0);
  // --set parallel.vpp wins over --num-layers-per-virtual-pipeline-stage.
  const auto v = load_experiment(file, {"parallel.vpp=2"},
                                 "--pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 "
                                 "--num-layers-per-virtual-pipeline-stage 2");
  EXPECT_EQ(v.parallel.vpp(), 2);  // not 4 layers / PP 2 / 2 = 1
}

TEST(ConfigMegatron, MegatronsOwnLlama3Fp8ExampleParses) {
  // The argument arrays of NVIDIA/Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh
  // (commit 157006d), mock-data branch, paths replaced: every option is read or knowingly
  // ignored. Megatron turns --sequence-parallel off at TP 1 (arguments.py), and
  // --fp8-param-gather keeps fp8 primary weights, gathered in fp8.
  const std::string line =
      "--use-mcore-models --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 "
      "--num-attention-heads 32 --group-query-attention --num-query-groups 8 --kv-channels 128 "
      "--seq-length 8192 --max-position-embeddings 8192 --position-embedding-type rope "
      "--rotary-base 1000000 --rotary-percent 1.0 --attention-dropout 0.0 --hidden-dropout 0.0 "
      "--swiglu --init-method-std 0.0134 --attention-backend fused --apply-layernorm-1p "
      "--untie-embeddings-and-output-weights --disable-bias-linear --micro-batch-size 1 "
      "--global-batch-size 128 --train-samples 1953125000 --lr-decay-samples 1949218748 "
      "--lr-warmup-samples 3906252 --lr 0.00015 --min-lr 0.00001 --decoupled-lr 5.0e-4 "
      "--decoupled-min-lr 4.5e-5 --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 "
      "--adam-beta1 0.9 --adam-beta2 0.95 --bf16 --grad-reduce-in-bf16 "
      "--cross-entropy-loss-fusion --calculate-per-token-loss --manual-gc "
      "--empty-unused-memory-level 1 --exit-duration-in-mins 235 --fp8-format hybrid "
      "--fp8-amax-history-len 1024 --fp8-amax-compute-algo max --fp8-param-gather "
      "--tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel "
      "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --mock-data "
      "--tokenizer-type NullTokenizer --vocab-size 128256 --data-cache-path /tmp/x "
      "--tiktoken-pattern v2 --split '99,1,0' --no-create-attention-mask-in-dataloader "
      "--no-mmap-bin-files --num-workers 1 --log-interval 1 --eval-iters 32 --eval-interval 100 "
      "--save-interval 1000 --log-throughput --profile --profile-step-start 4 "
      "--profile-step-end 6 --ckpt-format torch_dist --distributed-timeout-minutes 60 --save "
      "/tmp/ck --load /tmp/ck --tensorboard-dir /tmp/tb ";
  const ExperimentConfig c =
      load_experiment("", {"cluster.preset=dgx-h100", "cluster.num_gpus=8"}, line);
  EXPECT_EQ(c.model.num_layers, 32);
  EXPECT_EQ(c.model.num_query_groups, 8);
  EXPECT_EQ(c.training.precision, workload::Precision::Fp8);
  EXPECT_TRUE(c.parallel.fp8_param_gather);
  EXPECT_FALSE(c.parallel.sequence_parallel);
  EXPECT_EQ(c.parallel.tp(), 1);
  EXPECT_EQ(c.parallel.dp(), 8);
  EXPECT_TRUE(c.parallel.use_distributed_optimizer);
}

TEST(ConfigMegatron, MegatronsOwnGpt3Example175bParses) {
  // NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh (commit 157006d), paths
  // replaced. No --vocab-size: a --vocab-file with a --merge-file is GPT-2's BPE, 50,257
  // entries; --rampup-batch-size (3 values) only shapes the first iterations.
  const std::string line =
      "--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 "
      "--max-position-embeddings 2048 --attention-backend auto --micro-batch-size 1 "
      "--global-batch-size 1536 --rampup-batch-size 16 16 5859375 --train-iters 500000 "
      "--weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006 "
      "--clip-grad 1.0 --fp16 --lr 6.0e-5 --lr-decay-style cosine --min-lr 6.0e-6 "
      "--lr-warmup-fraction .001 --lr-decay-iters 430000 --tensor-model-parallel-size 8 "
      "--pipeline-model-parallel-size 16 --data-path /d/x_text_document --vocab-file "
      "/v/gpt2-vocab.json --merge-file /v/gpt2-merges.txt --split 949,50,1 --log-interval 100 "
      "--save-interval 10000 --eval-interval 1000 --save /c --load /c --eval-iters 10 "
      "--tensorboard-dir /t ";
  const ExperimentConfig c =
      load_experiment("", {"cluster.preset=dgx-a100", "cluster.num_gpus=1024"}, line);
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.model.num_layers, 96);
  EXPECT_EQ(c.training.precision, workload::Precision::Fp16);
  EXPECT_EQ(c.parallel.tp(), 8);
  EXPECT_EQ(c.parallel.pp(), 16);
  EXPECT_EQ(c.parallel.dp(), 8);
  EXPECT_EQ(c.training.global_batch_size, 1536);
}

TEST(ConfigMegatron, BadLaunchLinesAreOneLineErrorsNamingTheOption) {
  const std::vector<std::string> cluster = {"cluster.preset=dgx-a100", "cluster.num_gpus=8"};
  const std::string ok =
      "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --vocab-size 1000 "
      "--seq-length 128 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --bf16 ";
  const auto msg = [&](const std::string& line) {
    try {
      load_experiment("", cluster, line);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const auto expect = [&](const std::string& line, const std::string& a, const std::string& b) {
    SCOPED_TRACE(line);
    expect_names(msg(line), a, b);
  };
  expect(ok + "--num-layer 4", "--megatron-args", "unknown Megatron-LM option --num-layer");
  EXPECT_NE(msg(ok + "--num-layer 4").find("did you mean '--num-layers'"), std::string::npos);
  expect(ok + "--no-such-option", "--megatron-args", "--no-such-option");
  expect(ok + "--global-batch-size", "--megatron-args", "--global-batch-size expects a value");
  expect(ok + "--global-batch-size --fp16", "--megatron-args", "--global-batch-size expects");
  expect(ok + "--swiglu=true", "--megatron-args", "--swiglu is a flag");
  expect(ok + "--seq-length 'abc", "--megatron-args", "unterminated");
  expect(ok + "--hidden-size abc", "--hidden-size abc", "model.hidden_size");
  expect(ok + "$GPT_ARGS", "--megatron-args", "$GPT_ARGS");
  expect(ok + "80", "--megatron-args", "'80'");
  expect(ok + "--num-query-groups 2", "--num-query-groups 2", "--group-query-attention");
  // Expert options on a dense model name themselves and the missing model.num_experts.
  expect(ok + "--expert-tensor-parallel-size 2", "--expert-tensor-parallel-size 2",
         "applies to MoE models only");
  expect(ok + "--expert-model-parallel-size=4", "--expert-model-parallel-size=4",
         "applies to MoE models only");
  expect(ok + "--moe-router-topk 2", "--moe-router-topk", "applies to MoE models only");
  expect(ok + "--num-experts 8 --moe-router-topk 9", "--moe-router-topk", "exceeds");
  expect(ok + "--moe-expert-capacity-factor 1.5", "--moe-expert-capacity-factor",
         "applies to MoE models only");
  expect(ok + "--fp16", "--bf16 and --fp16", "cannot be combined");
  expect(ok + "--recompute-granularity full", "--recompute-granularity full",
         "--recompute-method (uniform or block)");
  expect(ok + "--recompute-granularity full --recompute-method random --recompute-num-layers 1",
         "--recompute-method random", "expected uniform or block");
  {
    const ExperimentConfig c = load_experiment("", cluster, ok + "--qk-layernorm --add-qkv-bias");
    EXPECT_TRUE(c.model.qk_layernorm);
    EXPECT_TRUE(c.model.add_qkv_bias);
  }
  {
    const ExperimentConfig c = load_experiment(
        "", cluster,
        ok + "--recompute-granularity full --recompute-method block --recompute-num-layers 3");
    EXPECT_EQ(c.parallel.recompute, workload::Recompute::Full);
    EXPECT_EQ(c.parallel.recompute_method, workload::RecomputeMethod::Block);
    EXPECT_EQ(c.parallel.recompute_num_layers, 3);
  }
  {
    // --recompute-modules takes a list (argparse nargs='*') up to the next option.
    const ExperimentConfig c = load_experiment(
        "", cluster,
        ok + "--recompute-granularity selective --recompute-modules moe_act layernorm "
             "--micro-batch-size 1");
    EXPECT_EQ(c.parallel.recompute, workload::Recompute::Selective);
    EXPECT_EQ(c.parallel.recompute_modules,
              workload::kRecomputeMoeAct | workload::kRecomputeLayerNorm);
  }
  expect(ok + "--recompute-granularity selective --recompute-modules attn",
         "parallel.recompute_modules", "'attn' is not a submodule");
  expect(ok + "--recompute-modules mlp", "parallel.recompute_modules",
         "applies to parallel.recompute: selective only");
  {
    // Multi-token prediction (DeepSeek-V3): a model key; Megatron's own checks refuse it with
    // learned absolute positions and with uniform recompute groups of more than one layer.
    const ExperimentConfig c =
        load_experiment("", cluster, ok + "--position-embedding-type rope --mtp-num-layers 1");
    EXPECT_EQ(c.model.mtp_num_layers, 1);
  }
  expect(ok + "--mtp-num-layers 1 --position-embedding-type learned_absolute",
         "model.mtp_num_layers=1", "MTP needs rope");
  expect(ok + "--position-embedding-type rope --mtp-num-layers 1 --recompute-granularity full "
              "--recompute-method uniform "
              "--recompute-num-layers 2",
         "model.mtp_num_layers=1", "recompute_num_layers == 1");
  expect(ok + "--num-layers-per-virtual-pipeline-stage 1 --pipeline-model-parallel-layout "
              "'Ett|ttL'",
         "--num-layers-per-virtual-pipeline-stage 1", "both give the virtual stages");
  expect(ok + "--num-layers-per-virtual-pipeline-stage 3", "--num-layers-per-virtual-pipeline",
         "2 layers per pipeline stage");  // 4 layers / PP 2 = 2, not a multiple of 3
  expect(ok + "--position-embedding-type mrope", "--position-embedding-type mrope",
         "model.position_embedding_type");
  // No --bf16 / --fp16: Megatron trains in fp32.
  std::string fp32 = ok;
  fp32.erase(fp32.find("--bf16"));
  expect(fp32, "(command line)", "fp32");
  // No vocabulary and a tokenizer whose size depends on its files (not GPT-2's or Llama 2's
  // fixed ones): the tokenizer is not read, the message says what to give.
  std::string no_vocab = ok;
  no_vocab.erase(no_vocab.find("--vocab-size 1000"), 18);
  expect(no_vocab + "--tokenizer-type HuggingFaceTokenizer", "model.vocab_size",
         "--vocab-size or --padded-vocab-size");
  // A launch line has no cluster: the preset must come from the file or --set.
  try {
    load_experiment("", {"cluster.num_gpus=8"}, ok);
    ADD_FAILURE() << "no error without a cluster";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cluster.preset"), std::string::npos) << e.what();
  }
  // The file's `megatron_args:` key names the file, line and column.
  const fs::path dir = scratch();
  const std::string m = error_of(dir, Yaml().text() + "megatron_args: --num-layerz 2\n");
  expect_names(m, "case.yaml:", "megatron_args: unknown Megatron-LM option --num-layerz");
  expect_names(error_of(dir, Yaml().text() + "megatron_arg: --num-layers 2\n"), "case.yaml",
               "did you mean 'megatron_args'");
}

}  // namespace
}  // namespace scalescope::io

namespace scalescope::io {
namespace {

/// The MoE presets and the models' own Hugging Face config.json give the same model.
void expect_hf_matches_preset(const std::string& experiment, const std::string& hf) {
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
  EXPECT_DOUBLE_EQ(workload::total_parameters(a), workload::total_parameters(b));
}

TEST(HfConfig, MoeConfigJsonsMatchPresets) {
  expect_hf_matches_preset("mixtral-8x7b-1k", "mixtral-8x7b-config.json");
  expect_hf_matches_preset("qwen3-235b-1k", "qwen3-235b-a22b-config.json");
  expect_hf_matches_preset("deepseek-v3-2k", "deepseek-v3-config.json");
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

TEST(ConfigMegatron, PipelineLayoutExpandsAsMegatronsParser) {
  // pipeline_parallel_layer_layout.py parse_str_to_list: its docstring's example
  // "Ettt|(tt|)*29,m|L" → [E t t t] + [t t]·29 + [m] + [L], 32 virtual stages; "x*n" repeats one
  // letter; commas are cosmetic.
  const auto a = detail::expand_pipeline_layout("Ettt|(tt|)*29,m|L", "x");
  ASSERT_EQ(a.size(), 32u);
  EXPECT_EQ(a.front(), "Ettt");
  for (std::size_t i = 1; i <= 29; ++i) EXPECT_EQ(a[i], "tt") << i;
  EXPECT_EQ(a[30], "m");
  EXPECT_EQ(a[31], "L");
  EXPECT_EQ(detail::expand_pipeline_layout("Et*3|t*2,|L", "x"),
            (std::vector<std::string>{"Ettt", "tt", "L"}));
  // "(t|)*2" unrolls to "t|t|": "E|t|t|L".
  EXPECT_EQ(detail::expand_pipeline_layout("E|(t|)*2L", "x"),
            (std::vector<std::string>{"E", "t", "t", "L"}));
  for (const char* bad : {"Ex|L", "E(tt|L", "E|(tt|)*|L", "*3|L"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(detail::expand_pipeline_layout(bad, "x"), InputError);
  }
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

TEST(ConfigMegatron, MoeLaunchLineTakesMegatronsDispatcherDefault) {
  const std::string line =
      "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --vocab-size 1000 "
      "--seq-length 256 --swiglu --bf16 --num-experts 8 --moe-router-topk 2 "
      "--moe-ffn-hidden-size 256 --expert-model-parallel-size 4";
  const std::vector<std::string> set = {"cluster.preset=dgx-h100", "cluster.num_gpus=8"};
  const auto c = load_experiment("", set, line);
  EXPECT_EQ(c.model.num_experts, 8);
  EXPECT_EQ(c.parallel.ep(), 4);
  EXPECT_EQ(c.parallel.moe_token_dispatcher_type, workload::MoeDispatcher::AllGather);
  const auto a2a = load_experiment("", set, line + " --moe-token-dispatcher-type alltoall");
  EXPECT_EQ(a2a.parallel.moe_token_dispatcher_type, workload::MoeDispatcher::AllToAll);
  // Group-limited routing: both options or neither, whole groups.
  const auto grouped =
      load_experiment("", set, line + " --moe-router-num-groups 4 --moe-router-group-topk 2");
  EXPECT_EQ(grouped.model.moe_router_num_groups, 4);
  EXPECT_EQ(grouped.model.moe_router_group_topk, 2);
  for (const char* bad : {" --moe-router-num-groups 4",
                          " --moe-router-num-groups 3 "
                          "--moe-router-group-topk 1"})
    EXPECT_THROW(load_experiment("", set, line + bad), InputError) << bad;
  // The flex dispatcher (DeepEP / HybridEP), by name or through the older --moe-enable-deepep.
  for (const char* flex : {" --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend "
                           "hybridep",
                           " --moe-enable-deepep"})
    EXPECT_EQ(load_experiment("", set, line + flex).parallel.moe_token_dispatcher_type,
              workload::MoeDispatcher::Flex)
        << flex;
}

TEST(ConfigMegatron, EpOverlapOptionsAndMegatronsRules) {
  // --overlap-moe-expert-parallel-comm and --delay-wgrad-compute, with the rules Megatron's
  // TransformerConfig asserts; each refusal names the key.
  const std::string line =
      "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --vocab-size 1000 "
      "--seq-length 256 --swiglu --bf16 --num-experts 8 --moe-router-topk 2 "
      "--moe-ffn-hidden-size 256 --expert-model-parallel-size 4 --moe-token-dispatcher-type flex";
  const std::vector<std::string> set = {"cluster.preset=dgx-h100", "cluster.num_gpus=8"};
  const auto c =
      load_experiment("", set, line + " --overlap-moe-expert-parallel-comm --delay-wgrad-compute");
  EXPECT_TRUE(c.parallel.moe_a2a_overlap);
  EXPECT_TRUE(c.parallel.delay_wgrad_compute);
  const auto error = [&](const std::string& extra, std::vector<std::string> more = {}) {
    std::vector<std::string> o = set;
    o.insert(o.end(), more.begin(), more.end());
    try {
      load_experiment("", o, line + " --overlap-moe-expert-parallel-comm" + extra);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(""), "");
  for (const auto& [extra, why] : std::vector<std::pair<std::string, std::string>>{
           {" --moe-token-dispatcher-type allgather", "alltoall or flex"},
           {" --expert-model-parallel-size 1", "expert_model_parallel_size > 1"},
           {" --pipeline-model-parallel-size 2", "virtual_pipeline_model_parallel_size"},
           {" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
            "recompute: full"},
           {" --recompute-granularity selective --recompute-modules moe", "moe"}}) {
    const std::string m = error(extra);
    EXPECT_NE(m.find("parallel.moe_a2a_overlap"), std::string::npos) << extra << ": " << m;
    EXPECT_NE(m.find(why), std::string::npos) << extra << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // --delay-wgrad-compute alone.
  EXPECT_THROW(load_experiment("", set, line + " --delay-wgrad-compute"), InputError);
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
  EXPECT_NE(error({"parallel.zero_stage=3"}).find("zero_stage=3"), std::string::npos);
  EXPECT_NE(error({"model.moe_router_topk=9"}).find("model.moe_router_topk: 9 exceeds"),
            std::string::npos);
}

}  // namespace
}  // namespace scalescope::io
