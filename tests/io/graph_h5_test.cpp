// graph.h5: exact round trip of a hand-built sliced graph, and one-line IoErrors for missing,
// truncated and corrupted files.
#include <gtest/gtest.h>

#include <hdf5.h>
#include <unistd.h>
#include <cmath>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "graph/sliced_graph.hpp"
#include "io/graph_h5.hpp"

#include "temp_dir_test.hpp"

namespace scalescope::io {
namespace {

using graph::CommKind;
using graph::CommRole;
using graph::Op;
using graph::OpKind;
using graph::OpName;
using graph::Phase;
using graph::Stream;

/// A directory of its own per test, removed afterwards.
class GraphH5 : public TempDirTest {};

Op make_op(OpKind kind, Stream stream, OpName name, Phase phase, std::uint16_t layer = 0xFFFF,
           std::uint16_t microbatch = 0xFFFF) {
  Op op;
  op.kind = kind;
  op.stream = stream;
  op.name = name;
  op.phase = phase;
  op.layer = layer;
  op.microbatch = microbatch;
  return op;
}

/// TP = 2, PP = 2 on 4 ranks: ranks 0, 1 run template "stage0", ranks 2, 3 "stage1". Each stage
/// all-reduces on its TP group; stage 0 sends activations to stage 1 and receives gradients back
/// on the pipeline pairs (0, 2) and (1, 3). Values are chosen to exercise every column: a
/// non-representable double (1/3), 64-bit byte counts, layers and micro-batches both set and
/// unset.
graph::SlicedGraph make_graph() {
  graph::SlicedGraph g;
  g.world_size = 4;
  g.config_text = "model:\n  preset: tiny  # ünïcode\nparallel: {tp: 2, pp: 2}\n";

  graph::RankProgram s0;
  s0.name = "stage0";
  s0.static_memory = 123456789012;
  Op qkv = make_op(OpKind::Gemm, Stream::Compute, OpName::QkvGemm, Phase::Forward, 0, 0);
  qkv.shape = {4096, 1536, 2048};
  qkv.flops = 2.0 * 4096 * 1536 * 2048;
  qkv.mem_bytes = 1e6 / 3.0;
  qkv.mem_alloc = std::int64_t{3} << 40;
  qkv.mem_transient = 1 << 20;
  s0.add(qkv, {});
  Op ar = make_op(OpKind::AllReduce, Stream::TpComm, OpName::TpAllReduce, Phase::Forward, 0, 0);
  ar.role = CommRole::Tp;
  ar.comm_bytes = 8388608;
  s0.add(ar, {0});
  Op send = make_op(OpKind::SendRecv, Stream::PpComm, OpName::PpSend, Phase::Forward, 0xFFFF, 0);
  send.role = CommRole::PpNext;
  send.comm_bytes = 4194304;
  s0.add(send, {1});
  Op recv = make_op(OpKind::SendRecv, Stream::PpComm, OpName::PpRecv, Phase::Backward, 0xFFFF, 0);
  recv.role2 = CommRole::PpNext;
  recv.comm_bytes = 4194304;
  s0.add(recv, {});
  Op fc2 = make_op(OpKind::Gemm, Stream::Compute, OpName::Fc2Gemm, Phase::Backward, 0, 0);
  fc2.shape = {4096, 2048, 5632};
  fc2.flops = 4.0 * 4096 * 2048 * 5632;
  fc2.mem_free = std::int64_t{3} << 40;
  s0.add(fc2, {3, 0});
  Op adam = make_op(OpKind::Optimizer, Stream::Compute, OpName::OptimizerStep, Phase::Optimizer);
  adam.mem_bytes = 1e9;
  adam.flops = 0.1;
  adam.mem_transient = 7;
  s0.add(adam, {4});
  s0.finalize();

  graph::RankProgram s1;
  s1.name = "stage1";
  s1.static_memory = 987654321;
  Op recv1 =
      make_op(OpKind::SendRecv, Stream::PpPrevComm, OpName::PpRecv, Phase::Forward, 0xFFFF, 0);
  recv1.role2 = CommRole::PpPrev;
  recv1.comm_bytes = 4194304;
  s1.add(recv1, {});
  Op logits = make_op(OpKind::Gemm, Stream::Compute, OpName::LogitsGemm, Phase::Forward, 1, 0);
  logits.shape = {4096, 16000, 2048};
  logits.flops = 2.0 * 4096 * 16000 * 2048;
  s1.add(logits, {0});
  Op ce_ar = make_op(OpKind::AllReduce, Stream::TpComm, OpName::CeAllReduce, Phase::Forward);
  ce_ar.role = CommRole::Tp;
  ce_ar.comm_bytes = 32768;
  s1.add(ce_ar, {1});
  Op loss = make_op(OpKind::Loss, Stream::Compute, OpName::CrossEntropy, Phase::Forward);
  loss.host_sync = 1;  // any op may carry it; one does here so the round trip checks it
  loss.kernels = 7;    // likewise a kernel count and a CUDA graph mark
  loss.cuda_graph = 2;
  s1.add(loss, {2});
  Op send1 =
      make_op(OpKind::SendRecv, Stream::PpPrevComm, OpName::PpSend, Phase::Backward, 0xFFFF, 0);
  send1.role = CommRole::PpPrev;
  send1.comm_bytes = 4194304;
  s1.add(send1, {3});
  s1.add(make_op(OpKind::Optimizer, Stream::Compute, OpName::OptimizerStep, Phase::Optimizer),
         {4, 1});
  s1.finalize();

  g.templates = {s0, s1};
  g.rank_class = {0, 0, 1, 1};
  const auto tp0 = g.comms.add(CommKind::TpGroup, {0, 1});
  const auto tp1 = g.comms.add(CommKind::TpGroup, {2, 3});
  const auto pp0 = g.comms.add(CommKind::PpPair, {0, 2});
  const auto pp1 = g.comms.add(CommKind::PpPair, {1, 3});
  g.rank_roles.assign(4 * graph::kNumRoles, graph::kNoComm);
  auto set = [&](std::uint32_t rank, CommRole role, std::uint32_t comm) {
    g.rank_roles[rank * graph::kNumRoles + static_cast<int>(role)] =
        static_cast<std::int32_t>(comm);
  };
  set(0, CommRole::Tp, tp0);
  set(1, CommRole::Tp, tp0);
  set(2, CommRole::Tp, tp1);
  set(3, CommRole::Tp, tp1);
  set(0, CommRole::PpNext, pp0);
  set(2, CommRole::PpPrev, pp0);
  set(1, CommRole::PpNext, pp1);
  set(3, CommRole::PpPrev, pp1);
  graph::validate(g);
  return g;
}

void expect_same_op(const Op& a, const Op& b, const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.stream, b.stream);
  EXPECT_EQ(a.role, b.role);
  EXPECT_EQ(a.role2, b.role2);
  EXPECT_EQ(a.phase, b.phase);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.layer, b.layer);
  EXPECT_EQ(a.microbatch, b.microbatch);
  EXPECT_EQ(a.attention_impl, b.attention_impl);
  EXPECT_EQ(a.shape, b.shape);
  // Exact: doubles are stored as f64 and must come back bit for bit.
  EXPECT_EQ(a.flops, b.flops);
  EXPECT_EQ(a.mem_bytes, b.mem_bytes);
  EXPECT_EQ(a.comm_bytes, b.comm_bytes);
  EXPECT_EQ(a.mem_alloc, b.mem_alloc);
  EXPECT_EQ(a.mem_free, b.mem_free);
  EXPECT_EQ(a.mem_transient, b.mem_transient);
  EXPECT_EQ(a.instance, b.instance);
  EXPECT_EQ(a.instance2, b.instance2);
  EXPECT_EQ(a.host_sync, b.host_sync);
  EXPECT_EQ(a.kernels, b.kernels);
  EXPECT_EQ(a.cuda_graph, b.cuda_graph);
}

/// Overwrites element `index` of a 1-D dataset through the HDF5 C API.
template <class T>
void overwrite(const std::string& path, const char* dataset, hsize_t index, T value, hid_t type) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  hid_t fs = H5Dget_space(d);
  const hsize_t count = 1;
  ASSERT_GE(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &index, nullptr, &count, nullptr), 0);
  hid_t ms = H5Screate_simple(1, &count, nullptr);
  ASSERT_GE(H5Dwrite(d, type, ms, fs, H5P_DEFAULT, &value), 0);
  H5Sclose(ms);
  H5Sclose(fs);
  H5Dclose(d);
  ASSERT_GE(H5Fclose(f), 0);
}

/// The IoError message of reading `path`, or "" when it reads fine.
std::string read_error(const std::string& path) {
  try {
    read_graph_h5(path);
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

TEST_F(GraphH5, RoundTripIsExact) {
  const graph::SlicedGraph g = make_graph();
  const std::string path = file("graph.h5");
  write_graph_h5(g, path);
  EXPECT_EQ(listing(), std::vector<std::string>{"graph.h5"});  // no .tmp left behind

  const graph::SlicedGraph r = read_graph_h5(path);
  EXPECT_EQ(r.world_size, g.world_size);
  EXPECT_EQ(r.config_text, g.config_text);
  EXPECT_EQ(r.rank_class, g.rank_class);
  EXPECT_EQ(r.rank_roles, g.rank_roles);
  EXPECT_EQ(r.comms.kind, g.comms.kind);
  EXPECT_EQ(r.comms.offsets, g.comms.offsets);
  EXPECT_EQ(r.comms.members, g.comms.members);
  ASSERT_EQ(r.templates.size(), g.templates.size());
  for (std::size_t t = 0; t < g.templates.size(); ++t) {
    const auto& a = g.templates[t];
    const auto& b = r.templates[t];
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.static_memory, a.static_memory);
    EXPECT_EQ(b.dep_offsets, a.dep_offsets);
    EXPECT_EQ(b.deps, a.deps);
    EXPECT_EQ(b.stream_ops, a.stream_ops);  // derived again by finalize()
    ASSERT_EQ(b.ops.size(), a.ops.size());
    for (std::size_t i = 0; i < a.ops.size(); ++i)
      expect_same_op(a.ops[i], b.ops[i],
                     "template " + std::to_string(t) + " op " + std::to_string(i));
  }
  // Instances are derived, not stored: the receive of stage 0 is its first receive.
  EXPECT_EQ(r.templates[0].ops[3].instance2, 0u);
}

TEST_F(GraphH5, SameGraphGivesSameBytes) {
  const graph::SlicedGraph g = make_graph();
  write_graph_h5(g, file("a.h5"));
  write_graph_h5(g, file("b.h5"));
  auto bytes = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(file("a.h5")), bytes(file("b.h5")));
}

TEST_F(GraphH5, MissingFileIsIoErrorNamingIt) {
  const std::string path = file("absent.h5");
  const std::string msg = read_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;
}

TEST_F(GraphH5, TruncatedFileIsOneLineIoError) {
  const std::string path = file("graph.h5");
  write_graph_h5(make_graph(), path);
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
  const std::string msg = read_error(path);
  ASSERT_FALSE(msg.empty());
  EXPECT_EQ(msg.rfind(path, 0), 0u) << msg;  // starts with the path
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST_F(GraphH5, NonHdf5FileIsIoError) {
  const std::string path = file("graph.h5");
  std::ofstream(path) << "not an HDF5 file\n";
  const std::string msg = read_error(path);
  EXPECT_EQ(msg.rfind(path, 0), 0u) << msg;
}

TEST_F(GraphH5, OutOfRangeEnumNamesDatasetAndValue) {
  const std::string path = file("graph.h5");
  write_graph_h5(make_graph(), path);
  overwrite<std::uint8_t>(path, "/templates/1/kind", 2, 17, H5T_NATIVE_UINT8);
  const std::string msg = read_error(path);
  EXPECT_NE(msg.find(path + ": /templates/1/kind: value 17 out of range"), std::string::npos)
      << msg;
}

TEST_F(GraphH5, EveryEnumColumnIsRangeChecked) {
  for (const char* column : {"stream", "role", "role2", "phase", "name"}) {
    const std::string path = file(std::string(column) + ".h5");
    write_graph_h5(make_graph(), path);
    const std::string dataset = std::string("/templates/0/") + column;
    overwrite<std::uint8_t>(path, dataset.c_str(), 0, 200, H5T_NATIVE_UINT8);
    const std::string msg = read_error(path);
    EXPECT_NE(msg.find(dataset + ": value 200 out of range"), std::string::npos) << msg;
  }
  const std::string path = file("comms.h5");
  write_graph_h5(make_graph(), path);
  overwrite<std::uint8_t>(path, "/comms/kind", 1, 10, H5T_NATIVE_UINT8);  // 10 kinds: 0..9
  EXPECT_NE(read_error(path).find("/comms/kind: value 10 out of range"), std::string::npos);
}

TEST_F(GraphH5, MissingDatasetIsNamed) {
  const std::string path = file("graph.h5");
  write_graph_h5(make_graph(), path);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Ldelete(f, "/templates/0/flops", H5P_DEFAULT), 0);
  ASSERT_GE(H5Fclose(f), 0);
  const std::string msg = read_error(path);
  EXPECT_NE(msg.find(path + ": /templates/0/flops: missing dataset"), std::string::npos) << msg;
}

TEST_F(GraphH5, WrongStoredTypeIsRejected) {
  const std::string path = file("graph.h5");
  write_graph_h5(make_graph(), path);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Ldelete(f, "/ranks/class", H5P_DEFAULT), 0);
  const hsize_t n = 4;
  const double values[4] = {0, 0, 1, 1};
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5Dcreate2(f, "/ranks/class", H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), 0);
  H5Dclose(d);
  H5Sclose(s);
  ASSERT_GE(H5Fclose(f), 0);
  const std::string msg = read_error(path);
  EXPECT_NE(msg.find("/ranks/class: stored as f64, expected u32"), std::string::npos) << msg;
}

TEST_F(GraphH5, InconsistentSizesAreRejected) {
  const std::string path = file("graph.h5");
  write_graph_h5(make_graph(), path);
  overwrite<std::uint32_t>(path, "/templates/0/dep_offsets", 6, 99, H5T_NATIVE_UINT32);
  const std::string msg = read_error(path);
  EXPECT_NE(msg.find("/templates/0/dep_offsets: ends at 99"), std::string::npos) << msg;
}

TEST_F(GraphH5, ValuesOutsideTheirRangeAreRejected) {
  // Issue 38: an 8 EiB allocation was replayed and reported with fits: true, NaN FLOPs reached
  // the cost model. Each is now an IoError naming the dataset and row.
  const auto bad = [&](const char* dataset, auto value, hid_t type, const char* want) {
    const std::string path = file("graph.h5");
    write_graph_h5(make_graph(), path);
    overwrite(path, dataset, 0, value, type);
    const std::string msg = read_error(path);
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  };
  bad("/templates/0/mem_alloc", std::int64_t{1} << 62, H5T_NATIVE_INT64,
      "/templates/0/mem_alloc: row 0 is 4611686018427387904, outside [0, 2^50] bytes");
  bad("/templates/0/mem_alloc", std::int64_t{-5}, H5T_NATIVE_INT64,
      "/templates/0/mem_alloc: row 0 is -5, outside [0, 2^50] bytes");
  bad("/templates/0/flops", std::nan(""), H5T_NATIVE_DOUBLE,
      "/templates/0/flops: row 0 is nan, not a finite count");
  bad("/templates/0/comm_bytes", -1.0, H5T_NATIVE_DOUBLE, "/templates/0/comm_bytes: row 0 is -1");
}

TEST_F(GraphH5, UnsupportedFormatVersionIsRejected) {
  const std::string path = file("graph.h5");
  write_graph_h5(make_graph(), path);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  // Through the group: HDF5 1.10's H5Awrite fails on an attribute from H5Aopen_by_name.
  hid_t g = H5Gopen2(f, "/meta", H5P_DEFAULT);
  hid_t a = H5Aopen(g, "format_version", H5P_DEFAULT);
  const std::uint32_t version = 1;  // before per-pair pipeline streams and the CP role
  ASSERT_GE(H5Awrite(a, H5T_NATIVE_UINT32, &version), 0);
  H5Aclose(a);
  H5Gclose(g);
  ASSERT_GE(H5Fclose(f), 0);
  const std::string msg = read_error(path);
  EXPECT_NE(msg.find("/meta: format_version 1 is not supported"), std::string::npos) << msg;
}

TEST_F(GraphH5, StructuralErrorsBecomeIoErrorsNamingTheFile) {
  // A dependency on a later op: RankProgram::finalize rejects it.
  const std::string cycle = file("cycle.h5");
  write_graph_h5(make_graph(), cycle);
  overwrite<std::uint32_t>(cycle, "/templates/0/deps", 0, 5, H5T_NATIVE_UINT32);
  std::string msg = read_error(cycle);
  EXPECT_EQ(msg.rfind(cycle + ": template 'stage0'", 0), 0u) << msg;

  // Rank 3 runs stage 0's program but has no next-stage communicator: graph::validate rejects it.
  const std::string roles = file("roles.h5");
  write_graph_h5(make_graph(), roles);
  overwrite<std::uint32_t>(roles, "/ranks/class", 3, 0, H5T_NATIVE_UINT32);
  msg = read_error(roles);
  EXPECT_EQ(msg.rfind(roles + ": graph: rank 3", 0), 0u) << msg;
}

TEST_F(GraphH5, FailedWriteLeavesNoFile) {
  const std::string nowhere = file("no/such/dir/graph.h5");
  EXPECT_THROW(write_graph_h5(make_graph(), nowhere), IoError);
  // The target is a non-empty directory: the rename fails and the temporary is removed.
  std::filesystem::create_directories(dir_ / "taken" / "x");
  const std::string taken = file("taken");
  EXPECT_THROW(write_graph_h5(make_graph(), taken), IoError);
  EXPECT_EQ(listing(), std::vector<std::string>{"taken"});
}

TEST_F(GraphH5, ConfigTextReadsAlone) {
  const std::string path = file("graph.h5");
  write_graph_h5(make_graph(), path);
  EXPECT_EQ(read_graph_config_text(path), make_graph().config_text);
  EXPECT_THROW(read_graph_config_text(file("absent.h5")), IoError);
}

TEST_F(GraphH5, PartialReadLoadsOnlyTheTemplatesAskedFor) {
  const graph::SlicedGraph g = make_graph();
  const std::string path = file("graph.h5");
  write_graph_h5(g, path);
  GraphPart part;
  part.needed = [](const graph::SlicedGraph& skeleton) {
    // The skeleton: maps and table complete, templates named but empty.
    EXPECT_EQ(skeleton.rank_class, make_graph().rank_class);
    EXPECT_EQ(skeleton.templates.at(1).name, "stage1");
    EXPECT_TRUE(skeleton.templates.at(0).ops.empty());
    return std::vector<bool>{true, false};
  };
  GraphReadStats stats;
  const graph::SlicedGraph r = read_graph_h5(path, MPI_COMM_SELF, part, &stats);
  EXPECT_EQ(stats.templates_read, 1u);
  EXPECT_TRUE(r.is_loaded(0));
  EXPECT_FALSE(r.is_loaded(1));
  EXPECT_FALSE(r.fully_loaded());
  EXPECT_EQ(r.templates[0].ops.size(), g.templates[0].ops.size());
  EXPECT_EQ(r.templates[0].stream_ops, g.templates[0].stream_ops);
  EXPECT_EQ(r.templates[1].name, "stage1");
  EXPECT_EQ(r.templates[1].static_memory, g.templates[1].static_memory);
  EXPECT_TRUE(r.templates[1].ops.empty());
  EXPECT_NO_THROW(r.program_of(0));
  EXPECT_THROW(r.program_of(2), ContractError);  // rank 2 runs the template not loaded

  // Without a part, every template: the same graph as the serial read.
  const graph::SlicedGraph all = read_graph_h5(path, MPI_COMM_SELF, GraphPart{});
  EXPECT_TRUE(all.fully_loaded());
  ASSERT_EQ(all.templates.size(), g.templates.size());
  for (std::size_t t = 0; t < g.templates.size(); ++t)
    EXPECT_EQ(all.templates[t].deps, g.templates[t].deps);
}

TEST_F(GraphH5, PartialReadOfATruncatedFileIsOneLineIoError) {
  const std::string path = file("graph.h5");
  write_graph_h5(make_graph(), path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  std::string msg;
  try {
    read_graph_h5(path, MPI_COMM_SELF, GraphPart{});
  } catch (const IoError& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty());
  EXPECT_EQ(msg.rfind(path, 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

}  // namespace
}  // namespace scalescope::io
