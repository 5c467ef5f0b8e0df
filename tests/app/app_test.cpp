// The commands of app/ called directly, without the driver: the shared pipeline (configuration,
// graph, memory check, replay) and `run` / `memory` on the quickstart.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "app/commands.hpp"
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
