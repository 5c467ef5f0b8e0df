#include "io/graph_h5.hpp"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/h5.hpp"

namespace scalescope::io {

namespace {

using graph::Op;
using graph::RankProgram;

constexpr std::uint32_t kFormatVersion = 3;  // 2: per-pair pipeline streams, CP role; 3: EP roles
constexpr std::size_t kAnySize = std::numeric_limits<std::size_t>::max();
constexpr std::uint64_t kNoLimit = std::numeric_limits<std::uint64_t>::max();
constexpr int kNumPhases = static_cast<int>(graph::Phase::Other) + 1;
constexpr int kNumCommKinds = static_cast<int>(graph::CommKind::TpEpGroup) + 1;

// ---------------------------------------------------------------------------------------------
// Writing

template <class T, class Get>
std::vector<T> column(const RankProgram& p, Get get) {
  std::vector<T> out;
  out.reserve(p.ops.size());
  for (const Op& op : p.ops) out.push_back(static_cast<T>(get(op)));
  return out;
}

void write_template(const h5::Group& templates, std::size_t k, const RankProgram& p) {
  const h5::Group t = templates.create_group(std::to_string(k));
  t.set_attribute("name", p.name);
  t.set_attribute("static_memory", p.static_memory);
  t.write("kind", column<std::uint8_t>(p, [](const Op& o) { return o.kind; }));
  t.write("stream", column<std::uint8_t>(p, [](const Op& o) { return o.stream; }));
  t.write("role", column<std::uint8_t>(p, [](const Op& o) { return o.role; }));
  t.write("role2", column<std::uint8_t>(p, [](const Op& o) { return o.role2; }));
  t.write("phase", column<std::uint8_t>(p, [](const Op& o) { return o.phase; }));
  t.write("name", column<std::uint8_t>(p, [](const Op& o) { return o.name; }));
  t.write("layer", column<std::uint16_t>(p, [](const Op& o) { return o.layer; }));
  t.write("microbatch", column<std::uint16_t>(p, [](const Op& o) { return o.microbatch; }));
  t.write("attention_impl", column<std::uint8_t>(p, [](const Op& o) { return o.attention_impl; }));
  t.write("gemm_dtype", column<std::uint8_t>(p, [](const Op& o) { return o.gemm_dtype; }));
  t.write("comm_sms", column<std::uint8_t>(p, [](const Op& o) { return o.comm_sms; }));
  t.write("value_dim", column<std::uint16_t>(p, [](const Op& o) { return o.value_dim; }));
  t.write("host_sync", column<std::uint8_t>(p, [](const Op& o) { return o.host_sync; }));
  t.write("kernels", column<std::uint16_t>(p, [](const Op& o) { return o.kernels; }));
  t.write("cuda_graph", column<std::uint8_t>(p, [](const Op& o) { return o.cuda_graph; }));
  std::vector<std::uint32_t> shape;
  shape.reserve(p.ops.size() * 3);
  for (const Op& op : p.ops) shape.insert(shape.end(), op.shape.begin(), op.shape.end());
  t.write("shape", shape, {static_cast<hsize_t>(p.ops.size()), 3});
  t.write("flops", column<double>(p, [](const Op& o) { return o.flops; }));
  t.write("mem_bytes", column<double>(p, [](const Op& o) { return o.mem_bytes; }));
  t.write("comm_bytes", column<double>(p, [](const Op& o) { return o.comm_bytes; }));
  t.write("mem_alloc", column<std::int64_t>(p, [](const Op& o) { return o.mem_alloc; }));
  t.write("mem_free", column<std::int64_t>(p, [](const Op& o) { return o.mem_free; }));
  t.write("mem_transient", column<std::int64_t>(p, [](const Op& o) { return o.mem_transient; }));
  t.write("dep_offsets", p.dep_offsets);
  t.write("deps", p.deps);
}

// ---------------------------------------------------------------------------------------------
// Reading: every dataset is checked for presence, type, shape and value range before use.

[[noreturn]] void fail_at(const h5::Group& g, const std::string& name, const std::string& what) {
  const std::string object = g.path() == "/" ? "/" + name : g.path() + "/" + name;
  throw IoError(g.file() + ": " + object + ": " + what);
}

std::string shape_text(const std::vector<hsize_t>& dims) {
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

/// A 1-D dataset of `expected` elements (any length when kAnySize) whose values are all below
/// `limit` (enum columns).
/// Bytes (as stored) of the datasets read, while a partial read counts them.
thread_local std::uint64_t* g_tally = nullptr;

void count_bytes(const h5::DataSet& ds) {
  if (g_tally != nullptr) *g_tally += ds.storage_size();
}

template <class T>
std::vector<T> read_1d(const h5::Group& g, const std::string& name, std::size_t expected = kAnySize,
                       std::uint64_t limit = kNoLimit) {
  const h5::DataSet ds = g.open_dataset(name);
  count_bytes(ds);
  const auto dims = ds.dims();
  if (dims.size() != 1 || (expected != kAnySize && dims[0] != expected))
    ds.fail(fmt::format("shape {}, expected ({})", shape_text(dims),
                        expected == kAnySize ? std::string("n") : std::to_string(expected)));
  std::vector<T> values = ds.read<T>();
  if (limit != kNoLimit)
    for (std::size_t i = 0; i < values.size(); ++i)
      if (static_cast<std::uint64_t>(values[i]) >= limit)
        ds.fail(fmt::format("value {} out of range (row {}, must be below {})",
                            static_cast<std::uint64_t>(values[i]), i, limit));
  return values;
}

template <class T>
std::vector<T> read_2d(const h5::Group& g, const std::string& name, std::size_t rows,
                       std::size_t cols) {
  const h5::DataSet ds = g.open_dataset(name);
  count_bytes(ds);
  const auto dims = ds.dims();
  if (dims.size() != 2 || dims[0] != rows || dims[1] != cols)
    ds.fail(fmt::format("shape {}, expected ({}, {})", shape_text(dims), rows, cols));
  return ds.read<T>();
}

/// CSR offsets: start at 0, never decrease, end at the number of values.
void check_offsets(const h5::Group& g, const std::string& name,
                   const std::vector<std::uint32_t>& offsets, std::size_t num_values) {
  if (offsets.empty() || offsets.front() != 0) fail_at(g, name, "does not start at 0");
  for (std::size_t i = 1; i < offsets.size(); ++i)
    if (offsets[i] < offsets[i - 1]) fail_at(g, name, fmt::format("decreases at row {}", i));
  if (offsets.back() != num_values)
    fail_at(g, name, fmt::format("ends at {} but there are {} values", offsets.back(), num_values));
}

/// The largest byte count a graph value may hold (2^50 B, 1 PiB): a value past it is a corrupt
/// or hand-edited file, and sums of such values could wrap int64 (an 8 EiB peak was once
/// reported with fits: true).
constexpr std::int64_t kMaxBytes = std::int64_t{1} << 50;

/// A template's attributes (name, static memory), without its ops.
void read_template_header(const h5::Group& t, RankProgram& p) {
  p.name = t.string_attribute("name");
  p.static_memory = t.attribute<std::int64_t>("static_memory");
  if (p.static_memory < 0 || p.static_memory > kMaxBytes)
    fail_at(
        t, "static_memory",
        fmt::format("{} is outside [0, 2^50] bytes (the memory a rank holds)", p.static_memory));
}

/// Every FLOP and byte count finite and ≥ 0; memory deltas within [0, 2^50] B, and the live
/// memory they add up to never negative nor past 2^50 B in issue order.
void check_values(const h5::Group& t, const RankProgram& p) {
  std::int64_t live = p.static_memory;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    for (const auto& [name, v] :
         {std::pair{"flops", op.flops}, std::pair{"mem_bytes", op.mem_bytes},
          std::pair{"comm_bytes", op.comm_bytes}})
      if (!(v >= 0 && v < 1e30))
        fail_at(t, name, fmt::format("row {} is {}, not a finite count ≥ 0", i, v));
    for (const auto& [name, v] :
         {std::pair{"mem_alloc", op.mem_alloc}, std::pair{"mem_free", op.mem_free},
          std::pair{"mem_transient", op.mem_transient}})
      if (v < 0 || v > kMaxBytes)
        fail_at(t, name, fmt::format("row {} is {}, outside [0, 2^50] bytes", i, v));
    live += op.mem_alloc;
    if (live + op.mem_transient > kMaxBytes)
      fail_at(t, "mem_alloc",
              fmt::format("the live memory passes 2^50 bytes at row {} (a corrupt graph)", i));
    live -= op.mem_free;
    if (live < 0) fail_at(t, "mem_free", fmt::format("row {} frees more than is allocated", i));
  }
}

/// A template's ops and dependencies.
void read_template_ops(const h5::Group& t, RankProgram& p) {
  const auto kind = read_1d<std::uint8_t>(t, "kind", kAnySize, graph::kNumOpKinds);
  const std::size_t n = kind.size();
  const auto stream = read_1d<std::uint8_t>(t, "stream", n, graph::kNumStreams);
  const auto role = read_1d<std::uint8_t>(t, "role", n, graph::kNumRoles);
  const auto role2 = read_1d<std::uint8_t>(t, "role2", n, graph::kNumRoles);
  const auto phase = read_1d<std::uint8_t>(t, "phase", n, kNumPhases);
  const auto name =
      read_1d<std::uint8_t>(t, "name", n, static_cast<std::uint64_t>(graph::OpName::Count));
  const auto layer = read_1d<std::uint16_t>(t, "layer", n);
  const auto microbatch = read_1d<std::uint16_t>(t, "microbatch", n);
  // Graphs written before attention_impl existed have fused attention only.
  const auto attention_impl =
      t.exists("attention_impl")
          ? read_1d<std::uint8_t>(t, "attention_impl", n, graph::kNumAttentionImpls)
          : std::vector<std::uint8_t>(n, 0);
  // Graphs written before gemm_dtype existed have bf16 GEMMs only.
  const auto gemm_dtype = t.exists("gemm_dtype")
                              ? read_1d<std::uint8_t>(t, "gemm_dtype", n, graph::kNumGemmDtypes)
                              : std::vector<std::uint8_t>(n, 0);
  // Graphs written before comm_sms existed overlap no TP communication with their GEMMs.
  const auto comm_sms = t.exists("comm_sms") ? read_1d<std::uint8_t>(t, "comm_sms", n)
                                             : std::vector<std::uint8_t>(n, 0);
  // Graphs written before host_sync existed have no host synchronization.
  const auto host_sync = t.exists("host_sync") ? read_1d<std::uint8_t>(t, "host_sync", n, 2)
                                               : std::vector<std::uint8_t>(n, 0);
  // Graphs written before kernels / cuda_graph existed launch one kernel per op, eagerly.
  const auto kernels = t.exists("kernels") ? read_1d<std::uint16_t>(t, "kernels", n)
                                           : std::vector<std::uint16_t>(n, 0);
  const auto cuda_graph = t.exists("cuda_graph") ? read_1d<std::uint8_t>(t, "cuda_graph", n, 3)
                                                 : std::vector<std::uint8_t>(n, 0);
  // Graphs written before value_dim existed hold no attention with a distinct value width.
  const auto value_dim = t.exists("value_dim") ? read_1d<std::uint16_t>(t, "value_dim", n)
                                               : std::vector<std::uint16_t>(n, 0);
  const auto shape = read_2d<std::uint32_t>(t, "shape", n, 3);
  const auto flops = read_1d<double>(t, "flops", n);
  const auto mem_bytes = read_1d<double>(t, "mem_bytes", n);
  const auto comm_bytes = read_1d<double>(t, "comm_bytes", n);
  const auto mem_alloc = read_1d<std::int64_t>(t, "mem_alloc", n);
  const auto mem_free = read_1d<std::int64_t>(t, "mem_free", n);
  const auto mem_transient = read_1d<std::int64_t>(t, "mem_transient", n);
  auto dep_offsets = read_1d<std::uint32_t>(t, "dep_offsets", n + 1);
  auto deps = read_1d<std::uint32_t>(t, "deps");
  check_offsets(t, "dep_offsets", dep_offsets, deps.size());

  p.ops.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    Op& op = p.ops[i];
    op.kind = static_cast<graph::OpKind>(kind[i]);
    op.stream = static_cast<graph::Stream>(stream[i]);
    op.role = static_cast<graph::CommRole>(role[i]);
    op.role2 = static_cast<graph::CommRole>(role2[i]);
    op.phase = static_cast<graph::Phase>(phase[i]);
    op.name = static_cast<graph::OpName>(name[i]);
    op.layer = layer[i];
    op.microbatch = microbatch[i];
    op.attention_impl = static_cast<graph::AttentionImpl>(attention_impl[i]);
    op.gemm_dtype = static_cast<graph::GemmDtype>(gemm_dtype[i]);
    op.comm_sms = comm_sms[i];
    op.value_dim = value_dim[i];
    op.host_sync = host_sync[i];
    op.kernels = kernels[i];
    op.cuda_graph = cuda_graph[i];
    op.shape = {shape[3 * i], shape[3 * i + 1], shape[3 * i + 2]};
    op.flops = flops[i];
    op.mem_bytes = mem_bytes[i];
    op.comm_bytes = comm_bytes[i];
    op.mem_alloc = mem_alloc[i];
    op.mem_free = mem_free[i];
    op.mem_transient = mem_transient[i];
  }
  p.dep_offsets = std::move(dep_offsets);
  p.deps = std::move(deps);
  check_values(t, p);
}

RankProgram read_template(const h5::Group& templates, std::uint32_t k) {
  const h5::Group t = templates.open_group(std::to_string(k));
  RankProgram p;
  read_template_header(t, p);
  read_template_ops(t, p);
  return p;
}

/// /meta: checks the version, fills world size and configuration, returns the template count.
std::uint32_t read_meta(const h5::Group& root, graph::SlicedGraph& g) {
  const h5::Group meta = root.open_group("meta");
  const auto version = meta.attribute<std::uint32_t>("format_version");
  if (version != kFormatVersion)
    meta.fail(fmt::format("format_version {} is not supported (this build reads {})", version,
                          kFormatVersion));
  g.world_size = meta.attribute<std::uint32_t>("world_size");
  g.config_text = meta.string_attribute("config_text");
  return meta.attribute<std::uint32_t>("num_templates");
}

void read_comms(const h5::Group& root, graph::SlicedGraph& g) {
  const h5::Group comms = root.open_group("comms");
  const auto kinds = read_1d<std::uint8_t>(comms, "kind", kAnySize, kNumCommKinds);
  g.comms.kind.clear();
  for (auto k : kinds) g.comms.kind.push_back(static_cast<graph::CommKind>(k));
  g.comms.offsets = read_1d<std::uint32_t>(comms, "offsets", kinds.size() + 1);
  g.comms.members = read_1d<std::uint32_t>(comms, "members");
  check_offsets(comms, "offsets", g.comms.offsets, g.comms.members.size());
}

void read_ranks(const h5::Group& root, graph::SlicedGraph& g) {
  const h5::Group ranks = root.open_group("ranks");
  g.rank_class = read_1d<std::uint32_t>(ranks, "class", g.world_size);
  g.rank_roles = read_2d<std::int32_t>(ranks, "roles", g.world_size, graph::kNumRoles);
}

/// finalize() on the loaded templates, then graph::validate; errors name the file.
void finalize_and_validate(graph::SlicedGraph& g, const std::string& path) {
  try {
    for (std::size_t k = 0; k < g.templates.size(); ++k)
      if (g.is_loaded(k)) g.templates[k].finalize();
    graph::validate(g);
  } catch (const InputError& e) {
    throw IoError(path + ": " + e.what());
  }
}

}  // namespace

void write_graph_h5(const graph::SlicedGraph& g, const std::string& path) {
  SCALESCOPE_EXPECTS(g.rank_roles.size() % graph::kNumRoles == 0);
  write_via_temporary(path, [&](const std::string& tmp) {
    h5::File file = h5::File::create(tmp, path);
    {
      const h5::Group root = file.root();
      const h5::Group meta = root.create_group("meta");
      meta.set_attribute("format_version", kFormatVersion);
      meta.set_attribute("world_size", g.world_size);
      meta.set_attribute("config_text", g.config_text);
      meta.set_attribute("num_templates", static_cast<std::uint32_t>(g.templates.size()));

      const h5::Group comms = root.create_group("comms");
      std::vector<std::uint8_t> kinds;
      kinds.reserve(g.comms.kind.size());
      for (auto k : g.comms.kind) kinds.push_back(static_cast<std::uint8_t>(k));
      comms.write("kind", kinds);
      comms.write("offsets", g.comms.offsets);
      comms.write("members", g.comms.members);

      const h5::Group templates = root.create_group("templates");
      for (std::size_t k = 0; k < g.templates.size(); ++k)
        write_template(templates, k, g.templates[k]);

      const h5::Group ranks = root.create_group("ranks");
      ranks.write("class", g.rank_class);
      ranks.write("roles", g.rank_roles,
                  {static_cast<hsize_t>(g.rank_roles.size() / graph::kNumRoles),
                   static_cast<hsize_t>(graph::kNumRoles)});
    }
    file.close();
  });
}

graph::SlicedGraph read_graph_h5(const std::string& path) {
  graph::SlicedGraph g;
  {
    h5::File file = h5::File::open(path);
    {
      const h5::Group root = file.root();
      const std::uint32_t num_templates = read_meta(root, g);
      read_comms(root, g);
      {
        const h5::Group templates = root.open_group("templates");
        for (std::uint32_t k = 0; k < num_templates; ++k)
          g.templates.push_back(read_template(templates, k));
      }
      read_ranks(root, g);
    }
    file.close();
  }
  finalize_and_validate(g, path);
  return g;
}

std::string read_graph_config_text(const std::string& path) {
  h5::File file = h5::File::open(path);
  std::string text;
  {
    const h5::Group meta = file.root().open_group("meta");
    text = meta.string_attribute("config_text");
  }
  file.close();
  return text;
}

graph::SlicedGraph read_graph_h5(const std::string& path, MPI_Comm comm, const GraphPart& part,
                                 GraphReadStats* stats) {
  graph::SlicedGraph g;
  std::uint64_t bytes = 0;
  std::uint32_t templates_read = 0;
  std::string error;  // a failure in this process's templates, shared before anyone throws
  {
    // Opening, the common part and the skeleton checks fail alike on every process (they read
    // the same bytes), so an error there is thrown at once everywhere; the file is closed
    // (collectively) by every process on the way out.
    h5::File file = h5::File::open(path, false, comm);
    {
      const h5::Group root = file.root();
      const std::uint32_t num_templates = read_meta(root, g);
      g_tally = &bytes;
      struct Untally {
        ~Untally() { g_tally = nullptr; }
      } untally;
      read_comms(root, g);
      read_ranks(root, g);
      const h5::Group templates = root.open_group("templates");
      g.templates.resize(num_templates);
      for (std::uint32_t k = 0; k < num_templates; ++k)
        read_template_header(templates.open_group(std::to_string(k)), g.templates[k]);
      // The skeleton: rank map and communicator table checked before anyone indexes them.
      g.loaded.assign(num_templates, false);
      finalize_and_validate(g, path);
      std::vector<bool> needed =
          part.needed ? part.needed(g) : std::vector<bool>(num_templates, true);
      if (needed.size() != num_templates)
        throw ContractError(fmt::format("read_graph_h5: {} template flags for {} templates",
                                        needed.size(), num_templates));
      try {
        for (std::uint32_t k = 0; k < num_templates; ++k)
          if (needed[k]) {
            read_template_ops(templates.open_group(std::to_string(k)), g.templates[k]);
            g.loaded[k] = true;
            ++templates_read;
          }
      } catch (const IoError& e) {
        error = e.what();
      } catch (const std::exception& e) {  // e.g. an allocation for absurd sizes
        error = path + ": " + e.what();
      }
    }
    try {
      file.close();
    } catch (const IoError& e) {
      if (error.empty()) error = e.what();
    }
  }
  if (error.empty()) {
    try {
      finalize_and_validate(g, path);
    } catch (const IoError& e) {
      error = e.what();
    }
  }
  raise_if_failed_anywhere(comm, error);
  if (g.fully_loaded()) g.loaded.clear();
  if (stats != nullptr) *stats = {templates_read, bytes};
  return g;
}

}  // namespace scalescope::io
