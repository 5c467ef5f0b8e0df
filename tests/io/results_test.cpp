// results.h5, summary.json and trace.json: written through a temporary, read back with the
// HDF5 C API and nlohmann::json.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "graph/op.hpp"
#include "io/chrome_trace.hpp"
#include "io/results_h5.hpp"
#include "io/summary_json.hpp"

#include "temp_dir_test.hpp"

namespace scalescope::io {
namespace {

class OutputDir : public TempDirTest {};

class Results : public OutputDir {};
class Summary : public OutputDir {};
class Trace : public OutputDir {};

emu::TimelineRecord record(SimTime start, SimTime end, std::uint32_t op, graph::Stream stream,
                           graph::OpKind kind, graph::Phase phase, graph::OpName name,
                           std::uint16_t layer, std::uint16_t microbatch) {
  emu::TimelineRecord r;
  r.start = start;
  r.end = end;
  r.op = op;
  r.stream = static_cast<std::uint8_t>(stream);
  r.kind = static_cast<std::uint8_t>(kind);
  r.phase = static_cast<std::uint8_t>(phase);
  r.name = static_cast<std::uint8_t>(name);
  r.layer = layer;
  r.microbatch = microbatch;
  return r;
}

/// Four ranks on two pipeline stages; ranks 1 and 3 tie for the last finish (rank 1 is
/// reported); ranks 0 and 2 are traced.
emu::RunResults make_results() {
  emu::RunResults r;
  r.config_text = "model: {preset: tiny}\n";
  auto& s = r.summary;
  s.world_size = 4;
  s.iteration_time = 2'000'000'000;  // 2 s
  s.tokens_per_iteration = 1 << 20;
  s.model_flops_per_iteration = 4e15;
  s.peak_flops_per_gpu = 1e15;
  s.peak_memory_bytes = std::int64_t{60} << 30;
  s.peak_memory_bytes_by_pp_stage = {std::int64_t{60} << 30, std::int64_t{45} << 30};
  s.model_name = "tiny";
  s.gpu = "H100-SXM";
  for (std::uint32_t i = 0; i < 4; ++i) {
    emu::RankResult rr;
    rr.finish = i % 2 == 1 ? 2'000'000'000 : 1'900'000'000;
    rr.compute = 1'500'000'000 + i;
    rr.exposed_tp = 100'000'000;
    rr.exposed_pp = 250'000'000;
    rr.exposed_dp = 50'000'000;
    rr.other_wait = rr.finish - rr.compute - 400'000'000;
    rr.peak_memory = (std::int64_t{60} << 30) - i;
    rr.static_memory = std::int64_t{20} << 30;
    rr.pp_stage = i / 2;
    rr.rank_class = i / 2;
    r.ranks.push_back(rr);
  }
  using graph::OpKind, graph::OpName, graph::Phase, graph::Stream;
  r.timelines[0] = {
      record(1500, 4250, 2, Stream::Compute, OpKind::Gemm, Phase::Forward, OpName::QkvGemm, 3, 1),
      record(4250, 9000, 3, Stream::TpComm, OpKind::AllReduce, Phase::Forward, OpName::TpAllReduce,
             3, 1),
      record(9000, 10001, 40, Stream::Compute, OpKind::Optimizer, Phase::Optimizer,
             OpName::OptimizerStep, 0xFFFF, 0xFFFF)};
  r.timelines[2] = {
      record(0, 7, 0, Stream::PpComm, OpKind::SendRecv, Phase::Forward, OpName::PpRecv, 0xFFFF, 0),
      record(7, 70, 1, Stream::Compute, OpKind::Loss, Phase::Forward, OpName::CrossEntropy, 0xFFFF,
             0)};
  r.memory[0] = {
      {0, 100}, {1500, std::int64_t{1} << 30}, {4250, std::int64_t{3} << 29}, {10001, 0}};
  r.memory[2] = {{0, 5}, {70, 6}};
  r.engine.kind = "optimistic";
  r.engine.processes = 2;
  r.engine.events_processed = 1000;
  r.engine.events_committed = 800;
  r.engine.events_rolled_back = 200;
  r.engine.remote_messages = 33;
  r.engine.gvt_rounds = 4;
  r.engine.wall_s = 0.5;
  return r;
}

template <class T>
T read_attr(hid_t loc, const char* object, const char* name, hid_t type) {
  T value{};
  hid_t a = H5Aopen_by_name(loc, object, name, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(a, 0) << object << " " << name;
  EXPECT_GE(H5Aread(a, type, &value), 0);
  H5Aclose(a);
  return value;
}

std::string read_string_attr(hid_t loc, const char* object, const char* name) {
  hid_t a = H5Aopen_by_name(loc, object, name, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(a, 0) << object << " " << name;
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  char* text = nullptr;
  EXPECT_GE(H5Aread(a, t, &text), 0);
  std::string out = text != nullptr ? text : "";
  H5free_memory(text);
  H5Tclose(t);
  H5Aclose(a);
  return out;
}

template <class T>
std::vector<T> read_dataset(hid_t file, const char* name, hid_t type) {
  hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
  EXPECT_GE(d, 0) << name;
  hid_t s = H5Dget_space(d);
  std::vector<T> out(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
  if (!out.empty()) {
    EXPECT_GE(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), 0);
  }
  H5Sclose(s);
  H5Dclose(d);
  return out;
}

/// The reader's own view of a timeline row, independent of emu::TimelineRecord's layout.
struct Row {
  std::int64_t start_ns;
  std::int64_t end_ns;
  std::uint32_t op;
  std::uint8_t stream, kind, phase, name;
  std::uint16_t layer, microbatch;
};

std::vector<Row> read_timeline(hid_t file, const char* name) {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(Row));
  H5Tinsert(t, "start_ns", HOFFSET(Row, start_ns), H5T_NATIVE_INT64);
  H5Tinsert(t, "end_ns", HOFFSET(Row, end_ns), H5T_NATIVE_INT64);
  H5Tinsert(t, "op", HOFFSET(Row, op), H5T_NATIVE_UINT32);
  H5Tinsert(t, "stream", HOFFSET(Row, stream), H5T_NATIVE_UINT8);
  H5Tinsert(t, "kind", HOFFSET(Row, kind), H5T_NATIVE_UINT8);
  H5Tinsert(t, "phase", HOFFSET(Row, phase), H5T_NATIVE_UINT8);
  H5Tinsert(t, "name", HOFFSET(Row, name), H5T_NATIVE_UINT8);
  H5Tinsert(t, "layer", HOFFSET(Row, layer), H5T_NATIVE_UINT16);
  H5Tinsert(t, "microbatch", HOFFSET(Row, microbatch), H5T_NATIVE_UINT16);
  auto rows = read_dataset<Row>(file, name, t);
  H5Tclose(t);
  return rows;
}

TEST_F(Results, H5ReadsBackWithTheCApi) {
  const emu::RunResults r = make_results();
  const std::string path = file("results.h5");
  write_results_h5(r, path);
  EXPECT_EQ(listing(), std::vector<std::string>{"results.h5"});

  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_EQ(read_attr<std::uint32_t>(f, "/meta", "format_version", H5T_NATIVE_UINT32), 1u);
  EXPECT_EQ(read_string_attr(f, "/meta", "config_text"), r.config_text);
  EXPECT_EQ(read_attr<std::uint32_t>(f, "/summary", "world_size", H5T_NATIVE_UINT32), 4u);
  EXPECT_EQ(read_attr<std::int64_t>(f, "/summary", "iteration_time_ns", H5T_NATIVE_INT64),
            2'000'000'000);
  EXPECT_EQ(read_attr<double>(f, "/summary", "iteration_time_s", H5T_NATIVE_DOUBLE), 2.0);
  // 4e15 flop / 2 s / 4 GPUs = 0.5 PFLOP/s per GPU = 500 TFLOP/s, half of the 1e15 peak.
  EXPECT_DOUBLE_EQ(read_attr<double>(f, "/summary", "model_tflops_per_gpu", H5T_NATIVE_DOUBLE),
                   500.0);
  EXPECT_DOUBLE_EQ(read_attr<double>(f, "/summary", "mfu", H5T_NATIVE_DOUBLE), 0.5);
  EXPECT_DOUBLE_EQ(read_attr<double>(f, "/summary", "tokens_per_s", H5T_NATIVE_DOUBLE),
                   (1 << 20) / 2.0);
  EXPECT_EQ(read_attr<std::int64_t>(f, "/summary", "peak_memory_bytes", H5T_NATIVE_INT64),
            std::int64_t{60} << 30);
  EXPECT_EQ(read_string_attr(f, "/summary", "model"), "tiny");
  EXPECT_EQ(read_string_attr(f, "/summary", "gpu"), "H100-SXM");
  EXPECT_EQ(
      read_dataset<std::int64_t>(f, "/summary/peak_memory_bytes_by_pp_stage", H5T_NATIVE_INT64),
      r.summary.peak_memory_bytes_by_pp_stage);

  const auto finish = read_dataset<std::int64_t>(f, "/ranks/finish_ns", H5T_NATIVE_INT64);
  ASSERT_EQ(finish.size(), 4u);
  EXPECT_EQ(finish[1], 2'000'000'000);
  EXPECT_EQ(read_dataset<std::int64_t>(f, "/ranks/compute_ns", H5T_NATIVE_INT64)[3], 1'500'000'003);
  EXPECT_EQ(read_dataset<std::int64_t>(f, "/ranks/other_wait_ns", H5T_NATIVE_INT64)[0],
            r.ranks[0].other_wait);
  EXPECT_EQ(read_dataset<std::int64_t>(f, "/ranks/peak_memory_bytes", H5T_NATIVE_INT64)[2],
            r.ranks[2].peak_memory);
  EXPECT_EQ(read_dataset<std::uint32_t>(f, "/ranks/pp_stage", H5T_NATIVE_UINT32),
            (std::vector<std::uint32_t>{0, 0, 1, 1}));
  EXPECT_EQ(read_dataset<std::uint32_t>(f, "/ranks/class", H5T_NATIVE_UINT32),
            (std::vector<std::uint32_t>{0, 0, 1, 1}));
  for (const char* column :
       {"exposed_tp_ns", "exposed_pp_ns", "exposed_dp_ns", "static_memory_bytes"})
    EXPECT_EQ(H5Lexists(f, (std::string("/ranks/") + column).c_str(), H5P_DEFAULT), 1) << column;

  // Compound timeline: the members in their documented order, values exact.
  hid_t d = H5Dopen2(f, "/timeline/0", H5P_DEFAULT);
  ASSERT_GE(d, 0);
  hid_t stored = H5Dget_type(d);
  const std::vector<std::string> fields = {"start_ns", "end_ns", "op",    "stream",    "kind",
                                           "phase",    "name",   "layer", "microbatch"};
  ASSERT_EQ(H5Tget_nmembers(stored), static_cast<int>(fields.size()));
  for (unsigned i = 0; i < fields.size(); ++i) {
    char* member = H5Tget_member_name(stored, i);
    EXPECT_EQ(fields[i], member);
    H5free_memory(member);
  }
  H5Tclose(stored);
  H5Dclose(d);
  const auto rows = read_timeline(f, "/timeline/0");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].start_ns, 1500);
  EXPECT_EQ(rows[0].end_ns, 4250);
  EXPECT_EQ(rows[0].op, 2u);
  EXPECT_EQ(rows[0].kind, static_cast<std::uint8_t>(graph::OpKind::Gemm));
  EXPECT_EQ(rows[0].name, static_cast<std::uint8_t>(graph::OpName::QkvGemm));
  EXPECT_EQ(rows[0].layer, 3);
  EXPECT_EQ(rows[0].microbatch, 1);
  EXPECT_EQ(rows[1].stream, static_cast<std::uint8_t>(graph::Stream::TpComm));
  EXPECT_EQ(rows[2].phase, static_cast<std::uint8_t>(graph::Phase::Optimizer));
  EXPECT_EQ(rows[2].layer, 0xFFFF);
  EXPECT_EQ(read_timeline(f, "/timeline/2").size(), 2u);

  // Decoding tables: the names of graph/op.hpp, indexed by the stored values.
  hid_t a = H5Aopen_by_name(f, "/timeline", "op_names", H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(a, 0);
  hid_t space = H5Aget_space(a);
  const auto count = static_cast<std::size_t>(H5Sget_simple_extent_npoints(space));
  ASSERT_EQ(count, static_cast<std::size_t>(graph::OpName::Count));
  hid_t vl = H5Tcopy(H5T_C_S1);
  H5Tset_size(vl, H5T_VARIABLE);
  H5Tset_cset(vl, H5T_CSET_UTF8);
  std::vector<char*> names(count);
  ASSERT_GE(H5Aread(a, vl, names.data()), 0);
  EXPECT_STREQ(names[rows[0].name], "qkv_gemm");
  for (char* n : names) H5free_memory(n);
  H5Tclose(vl);
  H5Sclose(space);
  H5Aclose(a);
  for (const char* table : {"stream_names", "kind_names", "phase_names"})
    EXPECT_EQ(H5Aexists_by_name(f, "/timeline", table, H5P_DEFAULT), 1) << table;

  struct Mem {
    std::int64_t time_ns, live_bytes;
  };
  hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(Mem));
  H5Tinsert(mt, "time_ns", HOFFSET(Mem, time_ns), H5T_NATIVE_INT64);
  H5Tinsert(mt, "live_bytes", HOFFSET(Mem, live_bytes), H5T_NATIVE_INT64);
  const auto mem = read_dataset<Mem>(f, "/memory/0", mt);
  H5Tclose(mt);
  ASSERT_EQ(mem.size(), 4u);
  EXPECT_EQ(mem[1].time_ns, 1500);
  EXPECT_EQ(mem[1].live_bytes, std::int64_t{1} << 30);

  EXPECT_EQ(read_string_attr(f, "/engine", "kind"), "optimistic");
  EXPECT_EQ(read_attr<std::uint32_t>(f, "/engine", "processes", H5T_NATIVE_UINT32), 2u);
  EXPECT_EQ(read_attr<std::uint64_t>(f, "/engine", "events_committed", H5T_NATIVE_UINT64), 800u);
  EXPECT_EQ(read_attr<std::uint64_t>(f, "/engine", "gvt_rounds", H5T_NATIVE_UINT64), 4u);
  EXPECT_EQ(read_attr<double>(f, "/engine", "wall_s", H5T_NATIVE_DOUBLE), 0.5);
  ASSERT_GE(H5Fclose(f), 0);
}

TEST_F(Results, LargeTimelineIsCompressedAndExact) {
  emu::RunResults r = make_results();
  auto& big = r.timelines[0];
  big.clear();
  for (std::uint32_t i = 0; i < 100'000; ++i)
    big.push_back(record(10 * SimTime{i}, 10 * SimTime{i} + 7, i, graph::Stream::Compute,
                         graph::OpKind::Gemm, graph::Phase::Backward, graph::OpName::Fc1Gemm,
                         static_cast<std::uint16_t>(i % 80), static_cast<std::uint16_t>(i % 16)));
  const std::string path = file("results.h5");
  write_results_h5(r, path);
  // 100 000 rows of 24 packed bytes would be 2.4 MB uncompressed.
  EXPECT_LT(std::filesystem::file_size(path), 1'000'000u);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const auto rows = read_timeline(f, "/timeline/0");
  ASSERT_EQ(rows.size(), big.size());
  for (std::size_t i = 0; i < rows.size(); i += 997) {
    EXPECT_EQ(rows[i].start_ns, big[i].start);
    EXPECT_EQ(rows[i].end_ns, big[i].end);
    EXPECT_EQ(rows[i].op, big[i].op);
    EXPECT_EQ(rows[i].layer, big[i].layer);
    EXPECT_EQ(rows[i].microbatch, big[i].microbatch);
  }
  ASSERT_GE(H5Fclose(f), 0);
}

TEST_F(Summary, JsonHasTheKeysInOrder) {
  const std::string path = file("summary.json");
  write_summary_json(make_results(), path);
  EXPECT_EQ(listing(), std::vector<std::string>{"summary.json"});
  std::ifstream in(path);
  const auto j = nlohmann::ordered_json::parse(in);
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"world_size", "iteration_time_s", "tokens_per_s",
                                            "model_tflops_per_gpu", "mfu", "mfu_peak_tflops",
                                            "host_wait_fraction", "host_bound", "peak_memory_bytes",
                                            "peak_memory_bytes_by_pp_stage", "model", "gpu",
                                            "time_breakdown_rank", "time_breakdown_s", "engine"}));
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["iteration_time_s"], 2.0);
  EXPECT_DOUBLE_EQ(j["mfu"].get<double>(), 0.5);
  EXPECT_EQ(j["peak_memory_bytes_by_pp_stage"][1], std::int64_t{45} << 30);
  EXPECT_EQ(j["model"], "tiny");
  // Ranks 1 and 3 both finish at 2 s; the lowest, rank 1, is reported.
  EXPECT_EQ(j["time_breakdown_rank"], 1);
  const auto& b = j["time_breakdown_s"];
  EXPECT_DOUBLE_EQ(b["compute"].get<double>(), 1.500000001);
  EXPECT_DOUBLE_EQ(b["exposed_tp"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(b["exposed_pp"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(b["exposed_dp"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(b["other_wait"].get<double>(), 0.099999999);
  const auto& e = j["engine"];
  EXPECT_EQ(e["kind"], "optimistic");
  EXPECT_DOUBLE_EQ(e["efficiency"].get<double>(), 0.8);                 // 800 of 1000 committed
  EXPECT_DOUBLE_EQ(e["committed_events_per_s"].get<double>(), 1600.0);  // 800 in 0.5 s
  for (const char* key : {"processes", "events_processed", "events_committed", "events_rolled_back",
                          "remote_messages", "gvt_rounds", "wall_s"})
    EXPECT_TRUE(e.contains(key)) << key;
}

TEST_F(Summary, TableShowsHeadlineFiguresAndBreakdown) {
  const std::string table = format_summary_table(make_results());
  EXPECT_NE(table.find("iteration time"), std::string::npos) << table;
  EXPECT_NE(table.find("2.000000 s"), std::string::npos) << table;
  EXPECT_NE(table.find("50.00 %"), std::string::npos) << table;  // MFU
  EXPECT_NE(table.find("time breakdown of rank 1"), std::string::npos) << table;
  EXPECT_NE(table.find("exposed PP"), std::string::npos) << table;
  EXPECT_NE(table.find("stage 1"), std::string::npos) << table;
  EXPECT_NE(table.find("45.00"), std::string::npos) << table;  // stage 1 peak in GiB
}

TEST_F(Trace, JsonParsesWithOneEventPerRecord) {
  const emu::RunResults r = make_results();
  const std::string path = file("trace.json");
  write_chrome_trace(r, path);
  EXPECT_EQ(listing(), std::vector<std::string>{"trace.json"});
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["displayTimeUnit"], "ns");
  const auto& events = j["traceEvents"];
  // Per traced rank: process_name + 6 thread_name metadata events (one per stream); then one
  // "X" per timeline record and one "C" per memory record: 2·7 + (3 + 2) + (4 + 2) = 25.
  ASSERT_EQ(events.size(), 25u);
  std::size_t complete = 0, counters = 0, metadata = 0;
  for (const auto& e : events) {
    const std::string ph = e["ph"];
    complete += ph == "X";
    counters += ph == "C";
    metadata += ph == "M";
  }
  EXPECT_EQ(complete, 5u);
  EXPECT_EQ(counters, 6u);
  EXPECT_EQ(metadata, 14u);

  EXPECT_EQ(events[0]["name"], "process_name");
  EXPECT_EQ(events[0]["args"]["name"], "rank 0");
  EXPECT_EQ(events[2]["args"]["name"], "tp_comm");
  const auto& x = events[7];  // first op of rank 0: 1500 ns → 4250 ns
  EXPECT_EQ(x["ph"], "X");
  EXPECT_EQ(x["name"], "qkv_gemm L3 mb1");
  EXPECT_EQ(x["cat"], "fwd");
  EXPECT_EQ(x["pid"], 0);
  EXPECT_EQ(x["tid"], 0);
  EXPECT_DOUBLE_EQ(x["ts"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(x["dur"].get<double>(), 2.75);
  EXPECT_EQ(x["args"]["op"], 2);
  EXPECT_EQ(x["args"]["kind"], "gemm");
  EXPECT_EQ(events[8]["tid"], 1);                           // the all-reduce on tp_comm
  EXPECT_EQ(events[9]["name"], "optimizer_step");           // no layer, no micro-batch
  EXPECT_DOUBLE_EQ(events[9]["dur"].get<double>(), 1.001);  // 1001 ns
  const auto& c = events[11];                               // memory of rank 0 at 1500 ns
  EXPECT_EQ(c["ph"], "C");
  EXPECT_EQ(c["name"], "memory_GiB");
  EXPECT_DOUBLE_EQ(c["args"]["live"].get<double>(), 1.0);
  EXPECT_EQ(events[14]["args"]["name"], "rank 2");
  EXPECT_EQ(events[21]["name"], "pp_recv mb0");
}

TEST_F(Trace, LargeTraceStreams) {
  emu::RunResults r = make_results();
  auto& big = r.timelines[0];
  for (std::uint32_t i = 0; i < 100'000; ++i)
    big.push_back(record(10 * SimTime{i}, 10 * SimTime{i} + 7, i, graph::Stream::Compute,
                         graph::OpKind::Gemm, graph::Phase::Backward, graph::OpName::Fc1Gemm,
                         static_cast<std::uint16_t>(i % 80), static_cast<std::uint16_t>(i % 16)));
  const std::string path = file("trace.json");
  write_chrome_trace(r, path);
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["traceEvents"].size(), 25u + 100'000u);
}

TEST_F(Trace, UnwritablePathIsIoError) {
  EXPECT_THROW(write_chrome_trace(make_results(), file("missing/dir/trace.json")), IoError);
  EXPECT_THROW(write_summary_json(make_results(), file("missing/dir/summary.json")), IoError);
  EXPECT_THROW(write_results_h5(make_results(), file("missing/dir/results.h5")), IoError);
  EXPECT_TRUE(listing().empty());
}

}  // namespace
}  // namespace scalescope::io
