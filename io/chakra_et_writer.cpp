// Graph → Chakra ET: one file per rank (or per program class), the communicator groups and the
// class map beside them (docs/architecture.md "Chakra ET in and out").
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "io/chakra_et.hpp"
#include "io/chakra_et_internal.hpp"
#include "io/h5.hpp"
#include "io/staging.hpp"

namespace scalescope::io {

namespace fs = std::filesystem;
using graph::CommKind;
using graph::CommRole;
using graph::Op;
using graph::OpKind;
using graph::Stream;

namespace detail {

std::string rank_file(const std::string& prefix, std::uint32_t r) {
  return fmt::format("{}.{}.et", prefix, r);
}
std::string class_file(const std::string& prefix, std::uint32_t k) {
  return fmt::format("{}.class{}.et", prefix, k);
}
std::string classes_json(const std::string& prefix) {
  return prefix + ".classes.json";
}

std::vector<std::int64_t> op_ints(const Op& op) {
  const auto a = op_int_array(op);
  return {a.begin(), a.end()};
}

std::array<std::int64_t, kOpInts> op_int_array(const Op& op) {
  static_assert(kOpInts == 21, "one initializer per ss_op attribute below");
  return {static_cast<std::int64_t>(op.kind),
          static_cast<std::int64_t>(op.stream),
          static_cast<std::int64_t>(op.role),
          static_cast<std::int64_t>(op.role2),
          static_cast<std::int64_t>(op.phase),
          static_cast<std::int64_t>(op.name),
          op.layer,
          op.microbatch,
          static_cast<std::int64_t>(op.attention_impl),
          static_cast<std::int64_t>(op.gemm_dtype),
          op.shape[0],
          op.shape[1],
          op.shape[2],
          op.mem_alloc,
          op.mem_free,
          op.mem_transient,
          op.comm_sms,
          op.value_dim,
          op.host_sync,
          op.kernels,
          op.cuda_graph};
}

}  // namespace detail

namespace {

using detail::class_file;
using detail::classes_json;
using detail::kSchema;
using detail::op_ints;
using detail::rank_file;

constexpr const char* kVersion = "0.0.4";
constexpr std::uint64_t kMetadataNodeId = 0;

std::string comm_groups_json(const std::string& prefix) {
  return prefix + ".comm_groups.json";
}

/// pg_name of communicator c: its index + 1, because "0" means all ranks to ASTRA-sim.
std::string pg_of(std::int32_t c) {
  return std::to_string(c + 1);
}

EtCollective chakra_collective(OpKind k) {
  switch (k) {
    case OpKind::AllReduce:
      return EtCollective::AllReduce;
    case OpKind::AllGather:
      return EtCollective::AllGather;
    case OpKind::ReduceScatter:
      return EtCollective::ReduceScatter;
    default:
      return EtCollective::AllToAll;
  }
}

/// Chakra's comm_size from our nccl-tests size S (chakra-et.md §7: ASTRA-sim's all-gather size
/// is the per-rank input, S / n; the others are the full buffer S).
std::int64_t comm_size_of(const Op& op, std::uint32_t members) {
  const double s = op.kind == OpKind::AllGather ? op.comm_bytes / members : op.comm_bytes;
  return std::llround(s);
}

/// The other member of a pipeline pair.
std::uint32_t peer_of(const graph::SlicedGraph& g, std::uint32_t rank, CommRole role) {
  const std::int32_t c = g.comm_of(rank, role);
  SCALESCOPE_EXPECTS(c != graph::kNoComm);
  const auto* b = g.comms.members_begin(static_cast<std::uint32_t>(c));
  return b[0] == rank ? b[1] : b[0];
}

/// Tags: the k-th send of a direction on a pair matches the k-th receive (our FIFO model); the
/// low bit separates the two directions of a pair (sent downstream: 0, upstream: 1).
std::int32_t send_tag(const Op& op) {
  return static_cast<std::int32_t>(2 * op.instance + (op.role == CommRole::PpNext ? 0 : 1));
}
std::int32_t recv_tag(const Op& op) {
  return static_cast<std::int32_t>(2 * op.instance2 + (op.role2 == CommRole::PpPrev ? 0 : 1));
}

/// Every communicator as {"<pg_name>": [ranks]} (ASTRA-sim's --comm-group-configuration).
nlohmann::json all_groups(const graph::SlicedGraph& g) {
  nlohmann::json groups = nlohmann::json::object();
  for (std::uint32_t c = 0; c < g.comms.size(); ++c)
    groups[pg_of(static_cast<std::int32_t>(c))] =
        std::vector<std::uint32_t>(g.comms.members_begin(c), g.comms.members_end(c));
  return groups;
}

/// The nodes of one rank's program (`rank`: whose peers and communicators rank-specific fields
/// name; for a class file, its first rank).
EtFile program_file(const graph::SlicedGraph& g, const graph::RankProgram& p, std::uint32_t rank,
                    const ChakraWriteOptions& opt) {
  EtFile f;
  f.version = kVersion;
  f.meta.push_back(EtAttr::string("schema", kSchema));
  f.meta.push_back(EtAttr::int64("ss_world_size", g.world_size));
  f.meta.push_back(EtAttr::string("ss_template", p.name));
  f.meta.push_back(EtAttr::int64("ss_static_memory", p.static_memory));
  std::vector<std::int64_t> roles(graph::kNumRoles, -1);
  std::set<std::int32_t> groups;
  for (int role = 1; role < graph::kNumRoles; ++role) {
    const std::int32_t c = g.comm_of(rank, static_cast<CommRole>(role));
    if (c == graph::kNoComm) continue;
    roles[static_cast<std::size_t>(role)] = c + 1;
    groups.insert(c);
  }
  f.meta.push_back(EtAttr::int64_list("ss_roles", roles));
  // The experiment's resolved configuration, so that a replay of the files runs on the cluster
  // the graph was built for (rank 0's file only: it is the same for every rank).
  if (rank == 0 && !g.config_text.empty())
    f.meta.push_back(EtAttr::string("ss_config", g.config_text));

  // The communicator groups this rank is in, a JSON list of {"pg_name", "ranks"}: by default in
  // a GlobalMetadata attribute (ASTRA-sim's feeder stops on a METADATA node; it takes the groups
  // from --comm-group-configuration, PREFIX.comm_groups.json); with `metadata_node` also as the
  // METADATA node the PyTorch converter writes (chakra-et.md §5: the two outer characters at
  // each end are stripped and the rest is the list).
  nlohmann::json list = nlohmann::json::array();
  for (std::int32_t c : groups) {
    const auto id = static_cast<std::uint32_t>(c);
    list.push_back({{"pg_name", pg_of(c)},
                    {"ranks", std::vector<std::uint32_t>(g.comms.members_begin(id),
                                                         g.comms.members_end(id))}});
  }
  f.meta.push_back(EtAttr::string("ss_comm_groups", list.dump()));
  if (opt.metadata_node) {
    EtNode meta;
    meta.id = kMetadataNodeId;
    meta.name = "process_group:init";
    meta.type = static_cast<int>(EtNodeType::Metadata);
    meta.inputs_values = "['" + list.dump() + "']";
    meta.attrs.push_back(EtAttr::boolean("is_cpu_op", false));
    f.nodes.push_back(std::move(meta));
  }

  auto node_id = [](std::uint32_t i) { return 2 * static_cast<std::uint64_t>(i) + 2; };
  auto two_sided = [&](std::uint32_t i) {
    return p.ops[i].kind == OpKind::SendRecv && p.ops[i].role != CommRole::None &&
           p.ops[i].role2 != CommRole::None;
  };
  for (std::uint32_t i = 0; i < p.size(); ++i) {
    const Op& op = p.ops[i];
    EtNode n;
    n.id = node_id(i);
    n.name = std::string(graph::op_name(op.name));
    for (auto* d = p.deps_begin(i); d != p.deps_end(i); ++d) {
      n.data_deps.push_back(node_id(*d));
      if (two_sided(*d)) n.data_deps.push_back(node_id(*d) + 1);
    }
    // Roots wait for the METADATA node, so the groups exist before any collective is issued.
    if (n.data_deps.empty() && opt.metadata_node) n.ctrl_deps.push_back(kMetadataNodeId);
    n.attrs.push_back(EtAttr::boolean("is_cpu_op", false));
    if (graph::is_collective(op.kind)) {
      const std::int32_t c = g.comm_of(rank, op.role);
      n.type = static_cast<int>(EtNodeType::CommColl);
      n.attrs.push_back(EtAttr::int64("comm_type", static_cast<int>(chakra_collective(op.kind))));
      n.attrs.push_back(EtAttr::int64(
          "comm_size", comm_size_of(op, g.comms.num_members(static_cast<std::uint32_t>(c)))));
      n.attrs.push_back(EtAttr::string("pg_name", pg_of(c)));
    } else if (op.kind == OpKind::SendRecv) {
      const bool send = op.role != CommRole::None;
      const CommRole role = send ? op.role : op.role2;
      const std::uint32_t peer = peer_of(g, rank, role);
      n.type = static_cast<int>(send ? EtNodeType::CommSend : EtNodeType::CommRecv);
      n.attrs.push_back(EtAttr::int64("comm_size", std::llround(op.comm_bytes)));
      n.attrs.push_back(EtAttr::int32("comm_src", static_cast<std::int32_t>(send ? rank : peer)));
      n.attrs.push_back(EtAttr::int32("comm_dst", static_cast<std::int32_t>(send ? peer : rank)));
      n.attrs.push_back(EtAttr::int32("comm_tag", send ? send_tag(op) : recv_tag(op)));
      n.attrs.push_back(EtAttr::string("pg_name", pg_of(g.comm_of(rank, role))));
    } else {
      n.type = static_cast<int>(EtNodeType::Comp);
      n.attrs.push_back(EtAttr::int64("num_ops", std::llround(op.flops)));
      n.attrs.push_back(
          EtAttr::uint64("tensor_size", static_cast<std::uint64_t>(std::llround(op.mem_bytes))));
      if (opt.duration) {
        const SimTime ns = opt.duration(op);
        n.duration_micros = static_cast<std::uint64_t>((std::max<SimTime>(ns, 0) + 999) / 1000);
      }
    }
    n.attrs.push_back(EtAttr::int64("stream", static_cast<std::int64_t>(op.stream)));
    n.attrs.push_back(EtAttr::int64_list("ss_op", op_ints(op)));
    n.attrs.push_back(EtAttr::double_list("ss_fp", {op.flops, op.mem_bytes, op.comm_bytes}));
    f.nodes.push_back(n);
    if (two_sided(i)) {
      // The receive half of a batched send/recv: its own RECV node, same dependencies.
      EtNode r;
      r.id = n.id + 1;
      r.name = n.name;
      r.type = static_cast<int>(EtNodeType::CommRecv);
      r.data_deps = n.data_deps;
      r.ctrl_deps = n.ctrl_deps;
      const std::uint32_t peer = peer_of(g, rank, op.role2);
      r.attrs.push_back(EtAttr::boolean("is_cpu_op", false));
      r.attrs.push_back(EtAttr::int64("comm_size", std::llround(op.comm_bytes)));
      r.attrs.push_back(EtAttr::int32("comm_src", static_cast<std::int32_t>(peer)));
      r.attrs.push_back(EtAttr::int32("comm_dst", static_cast<std::int32_t>(rank)));
      r.attrs.push_back(EtAttr::int32("comm_tag", recv_tag(op)));
      r.attrs.push_back(EtAttr::string("pg_name", pg_of(g.comm_of(rank, op.role2))));
      r.attrs.push_back(EtAttr::int64("stream", static_cast<std::int64_t>(op.stream)));
      r.attrs.push_back(EtAttr::uint64("ss_part_of", n.id));
      f.nodes.push_back(std::move(r));
    }
  }
  return f;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  write_via_temporary(path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw_io("{}: cannot open for writing", tmp);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) throw_io("{}: write failed", tmp);
  });
}

}  // namespace

std::size_t write_chakra(const graph::SlicedGraph& g, const std::string& prefix,
                         const ChakraWriteOptions& opt) {
  SCALESCOPE_EXPECTS(g.fully_loaded());
  // Instance numbers (the send/recv tags) come from finalize(); work on finalized copies.
  std::vector<graph::RankProgram> templates = g.templates;
  for (auto& t : templates) t.finalize();
  if (const fs::path dir = fs::path(prefix).parent_path(); !dir.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw_io("{}: cannot create the directory: {}", dir.string(), ec.message());
  }
  // Every file is written into PREFIX.partial-PID/ and moved beside PREFIX once all are there
  // (io/staging.hpp): a killed export leaves no rank files under their final names.
  remove_stale_staging(prefix);
  const fs::path stage = staging_dir(prefix, ::getpid());
  {
    std::error_code ec;
    fs::remove_all(stage, ec);
    fs::create_directories(stage, ec);
    if (ec) throw_io("{}: cannot create the staging directory: {}", stage.string(), ec.message());
  }
  const fs::path final_dir =
      fs::path(prefix).has_parent_path() ? fs::path(prefix).parent_path() : fs::path(".");
  const std::string staged = (stage / fs::path(prefix).filename()).string();
  std::vector<std::string> written;  // file names (in the stage, then beside PREFIX)
  auto put = [&](const std::string& path, const std::string& bytes) {
    write_bytes(path, bytes);
    written.push_back(fs::path(path).filename().string());
  };
  try {
    if (!opt.classes) {
      for (std::uint32_t r = 0; r < g.world_size; ++r) {
        EtFile f = program_file(g, templates[g.rank_class[r]], r, opt);
        f.meta.push_back(EtAttr::int64("ss_rank", r));
        put(rank_file(staged, r), encode_chakra(f));
        if (opt.progress) opt.progress(r + 1, g.world_size);
      }
      // ASTRA-sim's --comm-group-configuration: every group the files name.
      put(comm_groups_json(staged), all_groups(g).dump() + "\n");
    } else {
      std::vector<std::int64_t> first(templates.size(), -1);
      for (std::uint32_t r = 0; r < g.world_size; ++r)
        if (first[g.rank_class[r]] < 0) first[g.rank_class[r]] = r;
      for (std::uint32_t k = 0; k < templates.size(); ++k) {
        if (first[k] < 0) continue;
        EtFile f = program_file(g, templates[k], static_cast<std::uint32_t>(first[k]), opt);
        f.meta.push_back(EtAttr::int64("ss_class", k));
        put(class_file(staged, k), encode_chakra(f));
        if (opt.progress) opt.progress(k + 1, templates.size());
      }
      nlohmann::json j;
      j["format"] = "scalescope-chakra-classes-1";
      j["world_size"] = g.world_size;
      j["num_classes"] = templates.size();
      j["rank_class"] = g.rank_class;
      nlohmann::json roles = nlohmann::json::array();
      for (std::uint32_t r = 0; r < g.world_size; ++r) {
        std::vector<std::int64_t> row(graph::kNumRoles, -1);
        for (int role = 1; role < graph::kNumRoles; ++role) {
          const std::int32_t c = g.comm_of(r, static_cast<CommRole>(role));
          if (c != graph::kNoComm) row[static_cast<std::size_t>(role)] = c + 1;
        }
        roles.push_back(row);
      }
      j["roles"] = roles;
      j["groups"] = all_groups(g);
      put(classes_json(staged), j.dump() + "\n");
    }
    for (const std::string& name : written) fs::rename(stage / name, final_dir / name);
    fs::remove_all(stage);
  } catch (const fs::filesystem_error& e) {
    std::error_code ec;
    fs::remove_all(stage, ec);
    throw_io("{}: cannot move the exported files in: {}", prefix, e.what());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(stage, ec);
    throw;
  }
  return opt.classes ? written.size() : g.world_size;  // the ET files
}

}  // namespace scalescope::io
