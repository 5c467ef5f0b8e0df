// The commands of app/ called directly, without the driver: the shared pipeline (configuration,
// graph, memory check, replay) and `run` / `memory` on the quickstart.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "app/commands.hpp"
#include "app/memory_fixes.hpp"
#include "app/pipeline.hpp"
#include "core/error.hpp"
#include "emu/emulation.hpp"

namespace scalescope::app {
namespace {

namespace fs = std::filesystem;

std::string repo(const std::string& path) {
  return std::string(SCALESCOPE_SOURCE_DIR) + "/" + path;
}

fs::path temp_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / fs::path("app-test-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(d);
  return d;
}

// `memory` computes each stage's peak from the templates alone; the documented claim is that the
// replay gives the same peaks, hence the same capacity check (docs/model.md "Memory capacity").
TEST(AppPipeline, TemplateMemoryIsTheReplaysMemoryCheck) {
  const io::ExperimentConfig c =
      load_config(repo("inputs/experiments/quickstart.yaml"), nullptr, {"model.num_layers=4"}, {});
  const graph::SlicedGraph g = build(c);
  const emu::Summary from_templates = template_memory(c, g);
  const ReplaySetup setup(c);
  emu::RunResults r = emu::emulate(g, setup.costs, setup.options);
  complete_summary(r, c);
  check_memory(r.summary, c);
  EXPECT_EQ(from_templates.peak_memory_bytes_by_pp_stage, r.summary.peak_memory_bytes_by_pp_stage);
  EXPECT_EQ(from_templates.memory_total_bytes_by_pp_stage,
            r.summary.memory_total_bytes_by_pp_stage);
  EXPECT_EQ(from_templates.memory_tightest_rank, r.summary.memory_tightest_rank);
  EXPECT_EQ(from_templates.memory_fits, r.summary.memory_fits);
  // Two pipeline stages (quickstart: PP 2), each with a positive peak.
  ASSERT_EQ(r.summary.peak_memory_bytes_by_pp_stage.size(), 2U);
  EXPECT_GT(r.summary.peak_memory_bytes_by_pp_stage[0], 0);
}

// Issue 36 item 4: training.host_iteration_ms is host work between iterations with every GPU
// idle: it adds exactly itself to the iteration, to each rank's finish and host wait (so each
// rank's parts still add up to its finish), and ends the critical path as host time.
TEST(AppPipeline, HostIterationWorkAddsItselfToEveryRankAndThePath) {
  const auto replay = [](const std::vector<std::string>& sets) {
    const io::ExperimentConfig c =
        load_config(repo("inputs/experiments/quickstart.yaml"), nullptr, sets, {});
    const ReplaySetup setup(c);
    emu::RunResults r = emu::emulate(build(c), setup.costs, setup.options);
    complete_summary(r, c);
    return r;
  };
  const emu::RunResults a = replay({"model.num_layers=2"});
  const emu::RunResults b = replay({"model.num_layers=2", "training.host_iteration_ms=5"});
  constexpr SimTime h = 5'000'000;  // 5 ms in ns
  EXPECT_EQ(b.summary.iteration_time, a.summary.iteration_time + h);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (std::size_t k = 0; k < a.ranks.size(); ++k) {
    const emu::RankResult &x = a.ranks[k], &y = b.ranks[k];
    EXPECT_EQ(y.finish, x.finish + h) << "rank " << k;
    EXPECT_EQ(y.host_wait, x.host_wait + h) << "rank " << k;
    EXPECT_EQ(y.compute + y.exposed_tp + y.exposed_pp + y.exposed_dp + y.exposed_embedding +
                  y.exposed_cp + y.exposed_ep + y.bubble + y.straggler_wait + y.host_wait +
                  y.other_wait,
              y.finish)
        << "rank " << k;
  }
  ASSERT_FALSE(b.critical_path.segments.empty());
  EXPECT_EQ(b.critical_path.segments.back().end, b.summary.iteration_time);
  EXPECT_EQ(b.critical_path.segments.back().kind, emu::PathKind::Host);
  const auto host = static_cast<std::size_t>(emu::PathKind::Host);
  EXPECT_EQ(b.critical_path.totals[host], a.critical_path.totals[host] + h);
}

TEST(AppPipeline, QuantizedJobsGetTheirMfuAgainstTheirFormatsPeak) {
  // MFU is taken against the dense bf16 peak; an fp8 job also against the dense fp8 peak, an
  // NVFP4 job against the dense fp4 peak: on B300 2,250, 4,500 and 13,125 TFLOP/s (GpuSpec), so
  // the second figure is the first × 2,250 / 4,500 or × 2,250 / 13,125.
  const auto summary = [](const std::vector<std::string>& sets) {
    std::vector<std::string> all = {"model.num_layers=2", "cluster.preset=dgx-b300"};
    all.insert(all.end(), sets.begin(), sets.end());
    const io::ExperimentConfig c =
        load_config(repo("inputs/experiments/quickstart.yaml"), nullptr, all, {});
    const ReplaySetup setup(c);
    emu::RunResults r = emu::emulate(build(c), setup.costs, setup.options);
    complete_summary(r, c);
    return r.summary;
  };
  const emu::Summary bf16 = summary({});
  EXPECT_EQ(bf16.peak_lowp_flops_per_gpu, 0);
  const emu::Summary fp8 = summary({"training.precision=fp8"});
  EXPECT_EQ(fp8.lowp_format, "fp8");
  EXPECT_NEAR(fp8.mfu_lowp(), fp8.mfu() * 2250.0 / 4500.0, 1e-12);
  const emu::Summary fp4 = summary({"training.precision=nvfp4"});
  EXPECT_EQ(fp4.lowp_format, "fp4");
  EXPECT_NEAR(fp4.mfu_lowp(), fp4.mfu() * 2250.0 / 13125.0, 1e-12);
}

// Issue 36 item 6: a job that does not fit gets the cheapest changes that make it fit, each
// checked by re-running the memory model. Llama 3 8B's layer (32 layers, s = 4096) at TP 2, DP 32,
// micro-batch 2, no distributed optimizer, no sequence parallelism: the 18 B per parameter of
// Megatron's replicated optimizer (MODELING §3.2) alone are ≈ 18 · 8.0e9 / 2 = 72 GB per GPU, so
// it does not fit an H100; sharding the optimizer over DP 32 leaves 2 + 4 + 12/32 B per parameter.
TEST(AppMemoryFixes, ADistributedOptimizerComesFirstAndEveryFixFits) {
  const std::string path = repo("inputs/experiments/quickstart.yaml");
  const std::vector<std::string> sets = {"parallel.use_distributed_optimizer=false",
                                         "parallel.tp=2",
                                         "parallel.pp=1",
                                         "parallel.dp=32",
                                         "parallel.sequence_parallel=false",
                                         "model.num_layers=32",
                                         "training.micro_batch_size=2",
                                         "training.global_batch_size=256"};
  const io::ExperimentConfig c = io::load_experiment(path, sets);
  const emu::Summary s = template_memory(c, build(c));
  ASSERT_FALSE(s.memory_fits);
  const std::vector<MemoryFix> fixes = memory_fixes(path, sets, {}, c);
  ASSERT_FALSE(fixes.empty());
  EXPECT_LE(fixes.size(), 3U);
  EXPECT_EQ(fixes.front().sets,
            std::vector<std::string>{"parallel.use_distributed_optimizer=true"});
  for (const MemoryFix& f : fixes) {
    // Independently: the changed job fits, with the total the fix reports.
    std::vector<std::string> changed = sets;
    changed.insert(changed.end(), f.sets.begin(), f.sets.end());
    const io::ExperimentConfig c2 = io::load_experiment(path, changed);
    const emu::Summary s2 = template_memory(c2, build(c2));
    EXPECT_TRUE(s2.memory_fits);
    EXPECT_EQ(s2.memory_total_bytes_by_pp_stage[s2.memory_tightest_stage], f.total_bytes);
    EXPECT_LT(f.total_bytes, s.memory_total_bytes_by_pp_stage[s.memory_tightest_stage]);
  }
  const std::string text = format_memory_fixes(s, fixes);
  EXPECT_NE(text.find("does not fit: stage 0 needs"), std::string::npos) << text;
  EXPECT_NE(text.find("--set parallel.use_distributed_optimizer=true"), std::string::npos);
}

// The shipped Llama 3 405B layout fits with Meta's memory settings (FSDP sharding of optimizer
// state and gradients, no activation checkpointing at 8K: Llama 3 paper §3.3.2); with Megatron's
// distributed optimizer instead (unsharded fp32 gradients) it does not, and recomputing each
// layer's forward is the change that makes it fit (docs/validation.md "Llama 3 405B memory").
TEST(AppMemoryFixes, TheShippedLlama3405bLayoutFitsAsMetaRanIt) {
  const std::string path = repo("inputs/experiments/llama3-405b-16k.yaml");
  const io::ExperimentConfig c = io::load_experiment(path);
  EXPECT_TRUE(template_memory(c, build(c)).memory_fits);
  const std::vector<std::string> megatron = {"parallel.zero_stage=1",
                                             "parallel.recompute=selective"};
  const io::ExperimentConfig m = io::load_experiment(path, megatron);
  const emu::Summary s = template_memory(m, build(m));
  ASSERT_FALSE(s.memory_fits);
  EXPECT_EQ(s.memory_dominant_class, "activations");
  const std::vector<MemoryFix> fixes = memory_fixes(path, megatron, {}, m);
  ASSERT_FALSE(fixes.empty());
  EXPECT_EQ(fixes.back().sets, std::vector<std::string>{"parallel.recompute=full"});
}

TEST(AppCommands, RunWritesItsThreeFilesAndRefusesBadPlansWithoutOutput) {
  const MpiWorld world;
  if (world.size() != 1) GTEST_SKIP() << "LOUD SKIP: this test runs the sequential engine (np 1)";
  const fs::path out = temp_dir("run");
  ASSERT_EQ(run_command(world, repo("inputs/experiments/quickstart.yaml"), {}, out.string(),
                        {"model.num_layers=2"}, {}, true, false, {}, {}, {}),
            0);
  for (const char* f : {"summary.json", "results.h5", "trace.json"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  const auto s = nlohmann::json::parse(std::ifstream(out / "summary.json"));
  EXPECT_EQ(s.at("world_size").get<int>(), 64);  // quickstart: 64 GPUs
  // TP 3 does not divide 32 heads: refused with a one-line error naming the key, nothing written.
  const fs::path bad = temp_dir("bad");
  try {
    run_command(world, repo("inputs/experiments/quickstart.yaml"), {}, bad.string(),
                {"parallel.tp=3", "parallel.dp=1"}, {}, true, false, {}, {}, {});
    ADD_FAILURE() << "an impossible plan was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(bad));
  fs::remove_all(out);
}

}  // namespace
}  // namespace scalescope::app
