// Parallel HDF5 I/O at every process count ctest starts (1, 2, 4): the partial read of
// graph.h5 loads exactly the templates a process's LPs need, equal to the originals, and an
// emulation from it equals the sequential one; an error in one process's templates reaches every
// process; the collective results.h5 has the same content as the serial writer's.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "emu/emulation.hpp"
#include "io/graph_h5.hpp"
#include "io/results_h5.hpp"
#include "mpi_helpers.hpp"

namespace scalescope::emu {
namespace {

using namespace mpitest;

/// A path in the temporary directory, the same on every process (process 0's pid).
std::string shared_path(const std::string& name) {
  long pid = ::getpid();
  MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  return (std::filesystem::temp_directory_path() /
          ("scalescope_mpi_" + std::to_string(pid) + "_" + name))
      .string();
}

/// Process 0 writes the graph; every process waits for it.
void write_on_first(const graph::SlicedGraph& g, const std::string& path) {
  if (world_rank() == 0) io::write_graph_h5(g, path);
  MPI_Barrier(MPI_COMM_WORLD);
}

void remove_on_first(const std::string& path) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::remove(path.c_str());
}

/// The templates this process needs under block partitioning.
io::GraphPart block_part() {
  io::GraphPart part;
  part.needed = [](const graph::SlicedGraph& skeleton) {
    const auto owner = partition_lps(skeleton, static_cast<std::uint32_t>(world_size()), "block");
    return templates_needed(skeleton, owner, static_cast<std::uint32_t>(world_rank()));
  };
  return part;
}

void expect_same_template(const graph::RankProgram& a, const graph::RankProgram& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.static_memory, b.static_memory);
  EXPECT_EQ(a.dep_offsets, b.dep_offsets);
  EXPECT_EQ(a.deps, b.deps);
  EXPECT_EQ(a.stream_ops, b.stream_ops);
  ASSERT_EQ(a.ops.size(), b.ops.size());
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    const graph::Op &x = a.ops[i], &y = b.ops[i];
    const bool same = x.kind == y.kind && x.stream == y.stream && x.role == y.role &&
                      x.role2 == y.role2 && x.phase == y.phase && x.name == y.name &&
                      x.layer == y.layer && x.microbatch == y.microbatch && x.shape == y.shape &&
                      x.flops == y.flops && x.mem_bytes == y.mem_bytes &&
                      x.comm_bytes == y.comm_bytes && x.mem_alloc == y.mem_alloc &&
                      x.mem_free == y.mem_free && x.mem_transient == y.mem_transient &&
                      x.instance == y.instance && x.instance2 == y.instance2;
    EXPECT_TRUE(same) << "template '" << a.name << "' op " << i;
  }
}

TEST(PartialGraphRead, LoadsExactlyTheTemplatesOfTheLocalLps) {
  const graph::SlicedGraph g = mixed_graph(workload::Recompute::Selective, 4);
  ASSERT_EQ(g.templates.size(), 4u);
  const std::string path = shared_path("partial.h5");
  write_on_first(g, path);
  io::GraphReadStats stats;
  const graph::SlicedGraph r = io::read_graph_h5(path, MPI_COMM_WORLD, block_part(), &stats);
  remove_on_first(path);

  const auto owner = partition_lps(g, static_cast<std::uint32_t>(world_size()), "block");
  const auto needed = templates_needed(g, owner, static_cast<std::uint32_t>(world_rank()));
  EXPECT_EQ(r.world_size, g.world_size);
  EXPECT_EQ(r.config_text, g.config_text);
  EXPECT_EQ(r.rank_class, g.rank_class);
  EXPECT_EQ(r.rank_roles, g.rank_roles);
  EXPECT_EQ(r.comms.offsets, g.comms.offsets);
  EXPECT_EQ(r.comms.members, g.comms.members);
  ASSERT_EQ(r.templates.size(), g.templates.size());
  std::uint32_t loaded = 0;
  for (std::size_t k = 0; k < g.templates.size(); ++k) {
    EXPECT_EQ(r.is_loaded(k), needed[k]) << "template " << k;
    EXPECT_EQ(r.templates[k].name, g.templates[k].name);
    if (needed[k]) {
      ++loaded;
      expect_same_template(r.templates[k], g.templates[k]);
    } else {
      EXPECT_TRUE(r.templates[k].ops.empty());
      EXPECT_TRUE(r.templates[k].deps.empty());
      EXPECT_THROW(
          r.program_of(static_cast<std::uint32_t>(
              std::find(g.rank_class.begin(), g.rank_class.end(), k) - g.rank_class.begin())),
          ContractError);
    }
  }
  EXPECT_EQ(stats.templates_read, loaded);
  EXPECT_GT(stats.bytes_stored, 0u);
  // With four processes the last one holds the last stage's ranks and their DP groups only.
  if (world_size() == 4 && world_rank() == 3) {
    EXPECT_EQ(loaded, 1u);
  }
  if (world_size() == 1) {
    EXPECT_TRUE(r.fully_loaded());
  }

  // The partially loaded graph emulates exactly like the whole one on the sequential engine.
  EmulationOptions opt;
  opt.trace_ranks = {0, 7, 15};
  const RunResults seq = emulate(g, test_costs(), opt);
  opt.engine = EngineKind::Optimistic;
  opt.partition = "block";
  const RunResults par = emulate_parallel(r, test_costs(), opt, MPI_COMM_WORLD);
  if (world_rank() == 0) expect_identical(seq, par);
}

TEST(PartialGraphRead, AllTemplatesWithoutAPartEqualsTheSerialRead) {
  const graph::SlicedGraph g = mixed_graph(workload::Recompute::Full, 2);
  const std::string path = shared_path("whole.h5");
  write_on_first(g, path);
  const graph::SlicedGraph r = io::read_graph_h5(path, MPI_COMM_WORLD, io::GraphPart{});
  const graph::SlicedGraph s = io::read_graph_h5(path);
  remove_on_first(path);
  EXPECT_TRUE(r.fully_loaded());
  EXPECT_TRUE(r.loaded.empty());
  ASSERT_EQ(r.templates.size(), s.templates.size());
  for (std::size_t k = 0; k < s.templates.size(); ++k)
    expect_same_template(r.templates[k], s.templates[k]);
}

TEST(PartialGraphRead, ABadTemplateFailsOnEveryProcessWithOneMessage) {
  // Only the processes that own last-stage LPs read the bad template; the others must not hang
  // and must report the same error.
  graph::SlicedGraph g = mixed_graph(workload::Recompute::None, 4);
  g.templates.back().ops[3].kind = static_cast<graph::OpKind>(17);
  const std::string path = shared_path("bad.h5");
  write_on_first(g, path);
  std::string message;
  try {
    io::read_graph_h5(path, MPI_COMM_WORLD, block_part());
  } catch (const IoError& e) {
    message = e.what();
  }
  remove_on_first(path);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("/templates/3/kind: value 17 out of range"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
  // Every process holds the same line.
  unsigned long long length = message.size(), longest = 0;
  MPI_Allreduce(&length, &longest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(length, longest);

  // A template that reads but does not finalize: the same, from the validation step.
  graph::SlicedGraph h = mixed_graph(workload::Recompute::None, 4);
  for (graph::Op& op : h.templates.back().ops)
    if (!graph::is_communication(op.kind)) {
      op.stream = graph::Stream::DpComm;  // a compute op on a communication stream
      break;
    }
  write_on_first(h, path);
  message.clear();
  try {
    io::read_graph_h5(path, MPI_COMM_WORLD, block_part());
  } catch (const IoError& e) {
    message = e.what();
  }
  remove_on_first(path);
  EXPECT_NE(message.find(path + ": template '" + h.templates.back().name + "'"), std::string::npos)
      << "'" << message << "'";

  // A missing file: every process, at once.
  EXPECT_THROW(io::read_graph_h5(path + ".absent", MPI_COMM_WORLD, block_part()), IoError);
}

// ---------------------------------------------------------------------------------------------
// results.h5: collective writer vs serial writer, compared object by object with the C API.

struct Object {
  std::string kind;         // "group" or "dataset"
  std::vector<char> bytes;  // dataset: raw bytes in the stored type
  std::vector<hsize_t> dims;
  std::string type;  // the stored type, as text
  std::string layout;
  std::map<std::string, std::string> attributes;  // name → type text + value bytes / strings
};

std::string type_text(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  std::string s = std::to_string(static_cast<int>(cls)) + ":" + std::to_string(H5Tget_size(type));
  if (cls == H5T_INTEGER) s += H5Tget_sign(type) == H5T_SGN_2 ? "s" : "u";
  if (cls == H5T_INTEGER || cls == H5T_FLOAT) s += H5Tget_order(type) == H5T_ORDER_LE ? "le" : "be";
  if (cls == H5T_COMPOUND) {
    const int n = H5Tget_nmembers(type);
    for (int i = 0; i < n; ++i) {
      char* name = H5Tget_member_name(type, static_cast<unsigned>(i));
      const hid_t member = H5Tget_member_type(type, static_cast<unsigned>(i));
      s += std::string(" ") + name + "@" +
           std::to_string(H5Tget_member_offset(type, static_cast<unsigned>(i))) + "=" +
           type_text(member);
      H5Tclose(member);
      H5free_memory(name);
    }
  }
  if (cls == H5T_STRING) s += H5Tis_variable_str(type) > 0 ? "vlen" : "fixed";
  return s;
}

herr_t collect_attribute(hid_t loc, const char* name, const H5A_info_t*, void* data) {
  auto& out = *static_cast<std::map<std::string, std::string>*>(data);
  const hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
  const hid_t type = H5Aget_type(attr);
  const hid_t space = H5Aget_space(attr);
  const auto n = static_cast<std::size_t>(H5Sget_simple_extent_npoints(space));
  std::string value = type_text(type) + " n=" + std::to_string(n) + " ";
  if (H5Tget_class(type) == H5T_STRING) {
    std::vector<char*> texts(n, nullptr);
    H5Aread(attr, type, texts.data());
    for (char* t : texts) value += std::string(t != nullptr ? t : "") + "|";
    H5Dvlen_reclaim(type, space, H5P_DEFAULT, texts.data());
  } else {
    std::vector<char> bytes(n * H5Tget_size(type));
    H5Aread(attr, type, bytes.data());
    value.append(bytes.begin(), bytes.end());
  }
  H5Sclose(space);
  H5Tclose(type);
  H5Aclose(attr);
  out[name] = value;
  return 0;
}

herr_t collect_object(hid_t root, const char* name, const H5O_info_t* info, void* data) {
  auto& objects = *static_cast<std::map<std::string, Object>*>(data);
  Object o;
  const hid_t obj = H5Oopen(root, name, H5P_DEFAULT);
  if (info->type == H5O_TYPE_DATASET) {
    o.kind = "dataset";
    const hid_t type = H5Dget_type(obj);
    const hid_t space = H5Dget_space(obj);
    const int rank = H5Sget_simple_extent_ndims(space);
    o.dims.resize(static_cast<std::size_t>(rank));
    H5Sget_simple_extent_dims(space, o.dims.data(), nullptr);
    o.type = type_text(type);
    const auto n = static_cast<std::size_t>(H5Sget_simple_extent_npoints(space));
    o.bytes.resize(n * H5Tget_size(type));
    if (n > 0) H5Dread(obj, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, o.bytes.data());
    const hid_t dcpl = H5Dget_create_plist(obj);
    o.layout = std::to_string(static_cast<int>(H5Pget_layout(dcpl))) + " filters " +
               std::to_string(H5Pget_nfilters(dcpl));
    if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
      std::vector<hsize_t> chunk(static_cast<std::size_t>(rank));
      H5Pget_chunk(dcpl, rank, chunk.data());
      for (hsize_t c : chunk) o.layout += " " + std::to_string(c);
    }
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
  } else {
    o.kind = "group";
  }
  H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_attribute, &o.attributes);
  H5Oclose(obj);
  objects[name] = std::move(o);
  return 0;
}

std::map<std::string, Object> read_objects(const std::string& path) {
  std::map<std::string, Object> objects;
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0) << path;
  if (file < 0) return objects;
  H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, collect_object, &objects);
  H5Fclose(file);
  return objects;
}

/// Compares every object of two files; returns how many datasets are chunked (compressed).
int expect_same_file(const std::string& a, const std::string& b) {
  const auto x = read_objects(a), y = read_objects(b);
  EXPECT_FALSE(x.empty());
  EXPECT_EQ(x.size(), y.size());
  int chunked = 0;
  for (const auto& [name, o] : x) {
    if (!y.count(name)) {
      ADD_FAILURE() << name << " missing from " << b;
      continue;
    }
    const Object& p = y.at(name);
    chunked += o.layout.rfind(std::to_string(static_cast<int>(H5D_CHUNKED)) + " ", 0) == 0;
    EXPECT_EQ(o.kind, p.kind) << name;
    EXPECT_EQ(o.type, p.type) << name;
    EXPECT_EQ(o.dims, p.dims) << name;
    EXPECT_EQ(o.layout, p.layout) << name;
    EXPECT_TRUE(o.bytes == p.bytes) << name;
    EXPECT_EQ(o.attributes, p.attributes) << name;
  }
  return chunked;
}

class CollectiveResults : public ::testing::TestWithParam<std::string> {};

TEST_P(CollectiveResults, HaveTheSerialWritersContent) {
  // Large enough that the traced timelines and memory records are chunked and compressed
  // (over 64 KiB): tp 2 × pp 4 × dp 2, 16 layers, 16 micro-batches per replica.
  const graph::SlicedGraph g = mixed_graph(workload::Recompute::Full, 4, 16, 32);
  EmulationOptions opt;
  opt.trace_ranks = {1, 6, 9, 14};
  opt.engine = EngineKind::Optimistic;
  opt.partition = GetParam();
  DistributedResults d = emulate_distributed(g, test_costs(), opt, MPI_COMM_WORLD);
  d.local.summary.model_name = "mixed";
  d.local.summary.tokens_per_iteration = 2048;
  d.local.summary.model_flops_per_iteration = 1e15;
  d.local.summary.peak_memory_bytes_by_pp_stage = {1, 2, 3, 4};
  for (std::uint32_t r = 0; r < g.world_size; ++r) d.local.ranks[r].pp_stage = r / 4;

  const std::string collective = shared_path("collective.h5");
  const std::string serial = shared_path("serial.h5");
  io::write_results_h5(d, collective, MPI_COMM_WORLD);
  EXPECT_FALSE(std::filesystem::exists(collective + ".tmp"));
  const RunResults all = gather_results(d, MPI_COMM_WORLD);
  if (world_rank() == 0) {
    io::write_results_h5(all, serial);
    const int chunked = expect_same_file(collective, serial);
    EXPECT_GT(chunked, 0) << "no chunked, compressed dataset: the test covers too little";
    // The same run on the sequential engine (minus the engine statistics).
    EmulationOptions seq_opt = opt;
    seq_opt.engine = EngineKind::Sequential;
    expect_identical(emulate(g, test_costs(), seq_opt), all);
    std::remove(serial.c_str());
  }
  remove_on_first(collective);
}

TEST_P(CollectiveResults, AFailedWriteLeavesNothingAndFailsEverywhere) {
  const graph::SlicedGraph g = mixed_graph(workload::Recompute::None, 2);
  EmulationOptions opt;
  opt.engine = EngineKind::Optimistic;
  opt.partition = GetParam();
  opt.trace_ranks = {2};
  DistributedResults d = emulate_distributed(g, test_costs(), opt, MPI_COMM_WORLD);
  const std::string nowhere = shared_path("no-such-dir") + "/results.h5";
  EXPECT_THROW(io::write_results_h5(d, nowhere, MPI_COMM_WORLD), IoError);
  EXPECT_FALSE(std::filesystem::exists(nowhere + ".tmp"));
}

INSTANTIATE_TEST_SUITE_P(Partitions, CollectiveResults,
                         ::testing::Values(std::string("block"), std::string("metis")));

}  // namespace
}  // namespace scalescope::emu
