// The sweep's result table: rows through JSON and back exactly, CSV quoting, the files written.
#include "io/sweep_table.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "temp_dir_test.hpp"

namespace scalescope::io {
namespace {

explore::Row sample() {
  explore::Row r;
  r.index = 7;
  r.overrides = {"parallel.tp=4", "parallel.recompute_modules=[mlp,core_attn]"};
  r.status = explore::Status::DoesNotFit;
  r.message = "rank 0 (pipeline stage 0) needs 90.5 GiB, \"tight\"";
  r.replayed = true;
  r.num_gpus = 64;
  r.tp = 4;
  r.pp = 2;
  r.dp = 8;
  r.cp = 1;
  r.ep = 1;
  r.vpp = 1;
  r.micro_batch = 2;
  r.iteration_time_s = 0.1 + 0.2;  // 0.30000000000000004: must survive the text round trip
  r.tokens_per_s = 1.0 / 3.0;
  r.model_tflops_per_gpu = 412.5;
  r.mfu = 0.41708;
  r.compute_s = 0.25;
  r.exposed_comm_s = 1e-9;
  r.bubble_s = 0.03;
  r.straggler_wait_s = 0.005;
  r.host_wait_s = 0;
  r.peak_memory_bytes = 97'174'016'000;
  r.memory_capacity_bytes = 85'899'345'920;
  return r;
}

TEST(SweepTable, RowsRoundTripThroughJsonExactly) {
  const explore::Row r = sample();
  const explore::Row back =
      sweep_row_from_json(nlohmann::ordered_json::parse(sweep_row_json(r).dump()));
  EXPECT_EQ(back.index, r.index);
  EXPECT_EQ(back.overrides, r.overrides);
  EXPECT_EQ(back.status, r.status);
  EXPECT_EQ(back.message, r.message);
  EXPECT_EQ(back.iteration_time_s, r.iteration_time_s);  // bit for bit
  EXPECT_EQ(back.tokens_per_s, r.tokens_per_s);
  EXPECT_EQ(back.exposed_comm_s, r.exposed_comm_s);
  EXPECT_EQ(back.peak_memory_bytes, r.peak_memory_bytes);
  EXPECT_EQ(back.micro_batch, 2);
  auto bad = sweep_row_json(r);
  bad["status"] = "maybe";
  EXPECT_THROW(sweep_row_from_json(bad), IoError);
  bad.erase("status");
  EXPECT_THROW(sweep_row_from_json(bad), IoError);
}

TEST(SweepTable, CsvQuotesFieldsWithCommasAndQuotes) {
  const std::vector<explore::Row> rows = {sample()};
  const std::string csv = sweep_csv(rows, {0});
  std::istringstream in(csv);
  std::string header, line, extra;
  std::getline(in, header);
  std::getline(in, line);
  EXPECT_FALSE(std::getline(in, extra));  // one row
  EXPECT_EQ(header.substr(0, 29), "rank,index,status,iteration_t");
  EXPECT_EQ(line.substr(0, 19), "1,7,does_not_fit,0.");
  // The overrides hold a comma: quoted. The message holds a comma and quotes: quoted, doubled.
  EXPECT_NE(line.find(",\"parallel.tp=4 parallel.recompute_modules=[mlp,core_attn]\","),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("\"rank 0 (pipeline stage 0) needs 90.5 GiB, \"\"tight\"\"\""),
            std::string::npos)
      << line;
}

class SweepFiles : public TempDirTest {};

TEST_F(SweepFiles, WritesTheTableInRankOrder) {
  explore::Row a = sample(), b = sample();
  a.index = 0;
  b.index = 1;
  b.status = explore::Status::Ok;
  const std::vector<explore::Axis> axes = {explore::parse_vary("parallel.tp=2,4")};
  write_sweep(file("out"), "exp.yaml", axes, {a, b}, {1, 0});
  const auto j = nlohmann::ordered_json::parse(std::ifstream(file("out/sweep.json")));
  EXPECT_EQ(j["experiment"], "exp.yaml");
  EXPECT_EQ(j["configurations"], 2);
  EXPECT_EQ(j["axes"][0]["name"], "parallel.tp");
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["index"], 1);  // the order given, not the index order
  std::ifstream csv(file("out/sweep.csv"));
  std::string header, first;
  std::getline(csv, header);
  std::getline(csv, first);
  EXPECT_EQ(first.substr(0, 7), "1,1,ok,");
  // No temporaries are left behind.
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(file("out"))) ++entries;
  EXPECT_EQ(entries, 2u);
}

}  // namespace
}  // namespace scalescope::io
