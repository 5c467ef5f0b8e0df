#include "io/chakra_et.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <google/protobuf/stubs/logging.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "chakra/et_def.pb.h"
#include "core/error.hpp"
#include "graph/expand.hpp"
#include "io/graph_h5.hpp"
#include "io/h5.hpp"

namespace scalescope::io {

namespace fs = std::filesystem;
namespace pb = ChakraProtoMsg;
using graph::CommKind;
using graph::CommRole;
using graph::Op;
using graph::OpKind;
using graph::Stream;

namespace {

constexpr const char* kSchema = "scalescope-chakra-1";
constexpr const char* kVersion = "0.0.4";
constexpr std::uint64_t kMetadataNodeId = 0;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Plain attribute values

bool EtAttr::is_integer() const {
  return member == 7 || member == 9 || member == 11 || member == 13 || member == 15 ||
         member == 17 || member == 19 || member == 21 || member == 23 || member == 25 ||
         member == 27;
}
bool EtAttr::is_real() const {
  return member == 3 || member == 5;
}
bool EtAttr::is_string() const {
  return member == 29 || member == 31;
}

EtAttr EtAttr::int64(std::string name, std::int64_t v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 9;
  a.i = v;
  return a;
}
EtAttr EtAttr::uint64(std::string name, std::uint64_t v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 13;
  a.i = static_cast<std::int64_t>(v);
  a.u64_overflow = v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  return a;
}
EtAttr EtAttr::int32(std::string name, std::int32_t v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 7;
  a.i = v;
  return a;
}
EtAttr EtAttr::boolean(std::string name, bool v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 27;
  a.i = v ? 1 : 0;
  return a;
}
EtAttr EtAttr::real(std::string name, double v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 3;
  a.d = v;
  return a;
}
EtAttr EtAttr::string(std::string name, std::string v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 29;
  a.s = std::move(v);
  return a;
}
EtAttr EtAttr::int64_list(std::string name, std::vector<std::int64_t> v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 10;
  a.ints = std::move(v);
  return a;
}
EtAttr EtAttr::double_list(std::string name, std::vector<double> v) {
  EtAttr a;
  a.name = std::move(name);
  a.member = 4;
  a.reals = std::move(v);
  return a;
}

const EtAttr* EtNode::attr(const std::string& n) const {
  for (const EtAttr& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}
const EtAttr* EtFile::meta_attr(const std::string& n) const {
  for (const EtAttr& a : meta)
    if (a.name == n) return &a;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Protobuf: the only place that touches the generated classes.

namespace {

template <class List, class Out>
void copy_list(const List& l, Out& out) {
  for (const auto& v : l.values()) out.push_back(static_cast<typename Out::value_type>(v));
}

EtAttr from_proto(const pb::AttributeProto& p) {
  EtAttr a;
  a.name = p.name();
  a.member = static_cast<int>(p.value_case());
  using V = pb::AttributeProto;
  switch (p.value_case()) {
    case V::kDoubleVal:
      a.d = p.double_val();
      break;
    case V::kFloatVal:
      a.d = p.float_val();
      break;
    case V::kInt32Val:
      a.i = p.int32_val();
      break;
    case V::kInt64Val:
      a.i = p.int64_val();
      break;
    case V::kUint32Val:
      a.i = p.uint32_val();
      break;
    case V::kUint64Val:
      a = EtAttr::uint64(a.name, p.uint64_val());
      break;
    case V::kSint32Val:
      a.i = p.sint32_val();
      break;
    case V::kSint64Val:
      a.i = p.sint64_val();
      break;
    case V::kFixed32Val:
      a.i = p.fixed32_val();
      break;
    case V::kFixed64Val:
      a = EtAttr::uint64(a.name, p.fixed64_val());
      a.member = V::kFixed64Val;
      break;
    case V::kSfixed32Val:
      a.i = p.sfixed32_val();
      break;
    case V::kSfixed64Val:
      a.i = p.sfixed64_val();
      break;
    case V::kBoolVal:
      a.i = p.bool_val() ? 1 : 0;
      break;
    case V::kStringVal:
      a.s = p.string_val();
      break;
    case V::kBytesVal:
      a.s = p.bytes_val();
      break;
    case V::kDoubleList:
      copy_list(p.double_list(), a.reals);
      break;
    case V::kFloatList:
      copy_list(p.float_list(), a.reals);
      break;
    case V::kInt32List:
      copy_list(p.int32_list(), a.ints);
      break;
    case V::kInt64List:
      copy_list(p.int64_list(), a.ints);
      break;
    case V::kUint32List:
      copy_list(p.uint32_list(), a.ints);
      break;
    case V::kUint64List:
      copy_list(p.uint64_list(), a.ints);
      break;
    case V::kSint32List:
      copy_list(p.sint32_list(), a.ints);
      break;
    case V::kSint64List:
      copy_list(p.sint64_list(), a.ints);
      break;
    case V::kFixed32List:
      copy_list(p.fixed32_list(), a.ints);
      break;
    case V::kFixed64List:
      copy_list(p.fixed64_list(), a.ints);
      break;
    case V::kSfixed32List:
      copy_list(p.sfixed32_list(), a.ints);
      break;
    case V::kSfixed64List:
      copy_list(p.sfixed64_list(), a.ints);
      break;
    case V::kBoolList:
      for (bool b : p.bool_list().values()) a.ints.push_back(b ? 1 : 0);
      break;
    case V::kStringList:
      for (const auto& s : p.string_list().values()) a.strs.push_back(s);
      break;
    case V::kBytesList:
      for (const auto& s : p.bytes_list().values()) a.strs.push_back(s);
      break;
    case V::VALUE_NOT_SET:
      break;
  }
  return a;
}

void to_proto(const EtAttr& a, pb::AttributeProto& p) {
  p.set_name(a.name);
  switch (a.member) {
    case 3:
      p.set_double_val(a.d);
      break;
    case 4:
      for (double v : a.reals) p.mutable_double_list()->add_values(v);
      break;
    case 7:
      p.set_int32_val(static_cast<std::int32_t>(a.i));
      break;
    case 9:
      p.set_int64_val(a.i);
      break;
    case 10:
      for (std::int64_t v : a.ints) p.mutable_int64_list()->add_values(v);
      break;
    case 13:
      p.set_uint64_val(static_cast<std::uint64_t>(a.i));
      break;
    case 27:
      p.set_bool_val(a.i != 0);
      break;
    case 29:
      p.set_string_val(a.s);
      break;
    default:
      SCALESCOPE_EXPECTS(false && "EtAttr member the writer does not emit");
  }
}

void append_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void append_message(std::string& out, const google::protobuf::MessageLite& m) {
  std::string body;
  if (!m.SerializeToString(&body)) throw_io("Chakra ET: cannot serialize a message");
  SCALESCOPE_EXPECTS(body.size() < (std::uint64_t{1} << 32));
  append_varint(out, body.size());
  out += body;
}

}  // namespace

std::string encode_chakra(const EtFile& f) {
  std::string out;
  pb::GlobalMetadata meta;
  meta.set_version(f.version);
  for (const EtAttr& a : f.meta) to_proto(a, *meta.add_attr());
  append_message(out, meta);
  pb::Node p;  // reused: Clear keeps its buffers
  for (const EtNode& n : f.nodes) {
    p.Clear();
    p.set_id(n.id);
    p.set_name(n.name);
    p.set_type(static_cast<pb::NodeType>(n.type));
    for (auto d : n.ctrl_deps) p.add_ctrl_deps(d);
    for (auto d : n.data_deps) p.add_data_deps(d);
    if (n.start_time_micros) p.set_start_time_micros(n.start_time_micros);
    if (n.duration_micros) p.set_duration_micros(n.duration_micros);
    if (!n.inputs_values.empty()) p.mutable_inputs()->set_values(n.inputs_values);
    for (const EtAttr& a : n.attrs) to_proto(a, *p.add_attr());
    append_message(out, p);
  }
  return out;
}

EtFile decode_chakra(const std::string& bytes, const std::string& label) {
  // protobuf logs its own complaints (invalid UTF-8 in a string field, …) to stderr; a bad file
  // is reported by our one-line error alone.
  static const bool silenced = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)silenced;
  EtFile f;
  std::size_t pos = 0;
  bool have_meta = false;
  std::uint64_t last_id = 0;
  bool any_node = false;
  auto where = [&](std::size_t at) {
    std::string s = fmt::format("{}: byte offset {}", label, at);
    if (any_node) s += fmt::format(" (after node {})", last_id);
    return s;
  };
  pb::Node p;
  while (pos < bytes.size()) {
    const std::size_t start = pos;
    // Length: a base-128 varint of at most 5 bytes and 32 bits (feeder v3's limit).
    std::uint64_t len = 0;
    int shift = 0;
    for (;;) {
      if (pos >= bytes.size())
        throw_input("{}: truncated file: the length varint runs past the end", where(start));
      if (shift >= 35)
        throw_input("{}: length varint longer than 5 bytes (not a Chakra ET file?)", where(start));
      const auto c = static_cast<std::uint8_t>(bytes[pos++]);
      len |= static_cast<std::uint64_t>(c & 0x7F) << shift;
      shift += 7;
      if ((c & 0x80) == 0) break;
    }
    if (len > 0xFFFFFFFFull)
      throw_input("{}: message length {} exceeds 32 bits", where(start), len);
    if (len == 0 && have_meta) break;  // the Python decoder stops on a length of 0 as well
    if (len > bytes.size() - pos)
      throw_input("{}: truncated file: message of {} bytes but only {} remain", where(start), len,
                  bytes.size() - pos);
    const char* data = bytes.data() + pos;
    const int n = static_cast<int>(len);
    pos += static_cast<std::size_t>(len);
    if (!have_meta) {
      pb::GlobalMetadata m;
      if (!m.ParseFromArray(data, n))
        throw_input("{}: GlobalMetadata does not parse as protobuf", where(start));
      f.version = m.version();
      for (const auto& a : m.attr()) f.meta.push_back(from_proto(a));
      have_meta = true;
      continue;
    }
    if (!p.ParseFromArray(data, n))  // clears p first; its buffers are reused node to node
      throw_input("{}: node message does not parse as protobuf", where(start));
    EtNode node;
    node.id = p.id();
    node.name = p.name();
    node.type = static_cast<int>(p.type());
    node.ctrl_deps.assign(p.ctrl_deps().begin(), p.ctrl_deps().end());
    node.data_deps.assign(p.data_deps().begin(), p.data_deps().end());
    node.start_time_micros = p.start_time_micros();
    node.duration_micros = p.duration_micros();
    if (p.has_inputs()) node.inputs_values = p.inputs().values();
    node.attrs.reserve(static_cast<std::size_t>(p.attr_size()));
    for (const auto& a : p.attr()) node.attrs.push_back(from_proto(a));
    last_id = node.id;
    any_node = true;
    f.nodes.push_back(std::move(node));
  }
  if (!have_meta) throw_input("{}: empty file (no GlobalMetadata)", label);
  return f;
}

EtFile read_chakra_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_io("{}: cannot open", path);
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw_io("{}: read error", path);
  return decode_chakra(s.str(), path);
}

// ---------------------------------------------------------------------------------------------
// Graph → Chakra

namespace {

std::string rank_file(const std::string& prefix, std::uint32_t r) {
  return fmt::format("{}.{}.et", prefix, r);
}
std::string class_file(const std::string& prefix, std::uint32_t k) {
  return fmt::format("{}.class{}.et", prefix, k);
}
std::string classes_json(const std::string& prefix) {
  return prefix + ".classes.json";
}
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

std::vector<std::int64_t> op_ints(const Op& op) {
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
          op.host_sync};
}
/// Attributes in ss_op: 19 since host_sync was added (files of 18 have no host synchronization).
constexpr std::size_t kOpInts = 19;

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
  std::vector<std::string> written;
  auto put = [&](const std::string& path, const std::string& bytes) {
    write_bytes(path, bytes);
    written.push_back(path);
  };
  try {
    if (!opt.classes) {
      for (std::uint32_t r = 0; r < g.world_size; ++r) {
        EtFile f = program_file(g, templates[g.rank_class[r]], r, opt);
        f.meta.push_back(EtAttr::int64("ss_rank", r));
        put(rank_file(prefix, r), encode_chakra(f));
      }
      // ASTRA-sim's --comm-group-configuration: every group the files name.
      put(comm_groups_json(prefix), all_groups(g).dump() + "\n");
    } else {
      std::vector<std::int64_t> first(templates.size(), -1);
      for (std::uint32_t r = 0; r < g.world_size; ++r)
        if (first[g.rank_class[r]] < 0) first[g.rank_class[r]] = r;
      for (std::uint32_t k = 0; k < templates.size(); ++k) {
        if (first[k] < 0) continue;
        EtFile f = program_file(g, templates[k], static_cast<std::uint32_t>(first[k]), opt);
        f.meta.push_back(EtAttr::int64("ss_class", k));
        put(class_file(prefix, k), encode_chakra(f));
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
      put(classes_json(prefix), j.dump() + "\n");
    }
  } catch (...) {
    std::error_code ec;
    for (const auto& p : written) fs::remove(p, ec);
    throw;
  }
  return opt.classes ? written.size() : g.world_size;  // the ET files
}

// ---------------------------------------------------------------------------------------------
// Chakra → graph

namespace {

/// One op of a rank as read, before communicators are assigned.
struct RawOp {
  Op op;
  std::vector<std::uint32_t> deps;
  std::int64_t duration_ns = -1;
  std::uint64_t node = 0;              ///< node id (for errors)
  std::string group;                   ///< collectives (foreign traces): pg_name
  std::int64_t peer = -1;              ///< send/recv: the other rank
  std::int64_t tag = -1;               ///< send/recv
  std::int64_t peer2 = -1, tag2 = -1;  ///< the receive half of a batched send/recv (schema)
};

struct RawRank {
  std::string file;
  std::vector<RawOp> ops;
  std::array<std::int64_t, graph::kNumRoles> roles{};  ///< schema: pg id per role, -1 none
  std::string template_name;
  std::int64_t static_memory = 0;
  /// scalescope's files: the earlier rank whose program this one's equals (its compute ops are
  /// then dropped as soon as it is read, so that an import holds each distinct program once),
  /// or -1.
  std::int64_t same_as = -1;
};

/// Groups by pg_name; an empty list means all ranks.
using Groups = std::map<std::string, std::vector<std::uint32_t>>;

struct Context {
  const ChakraReadOptions* opt = nullptr;
  Groups groups;
  std::map<std::string, std::string> group_origin;  ///< pg_name → file that defined it
  /// METADATA texts already read: every file of a trace repeats the groups its rank is in, so a
  /// world-sized group would otherwise be parsed once per rank (quadratic in the world size).
  std::unordered_set<std::string> metadata_seen;
  bool schema = false;
};

[[noreturn]] void node_error(const std::string& file, std::uint64_t id, std::int64_t rank,
                             const std::string& what) {
  throw InputError(fmt::format("{}: node {} (rank {}): {}", file, id, rank, what));
}

std::optional<std::int64_t> int_attr(const EtNode& n, const char* name, const std::string& file,
                                     std::int64_t rank) {
  const EtAttr* a = n.attr(name);
  if (a == nullptr) return std::nullopt;
  if (!a->is_integer())
    node_error(file, n.id, rank,
               fmt::format("attribute '{}' is not an integer (oneof member {})", name, a->member));
  if (a->u64_overflow)
    node_error(file, n.id, rank, fmt::format("attribute '{}' is out of range", name));
  return a->i;
}

std::string pg_attr(const EtNode& n, const std::string& file, std::int64_t rank) {
  const EtAttr* a = n.attr("pg_name");
  if (a == nullptr) return "0";
  if (a->is_string()) return a->s.empty() ? "0" : a->s;
  if (a->is_integer()) return std::to_string(a->i);
  node_error(file, n.id, rank, "attribute 'pg_name' is neither a string nor an integer");
}

void add_group(Context& ctx, const std::string& pg, std::vector<std::uint32_t> ranks,
               const std::string& origin) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  auto [it, fresh] = ctx.groups.emplace(pg, ranks);
  if (!fresh && it->second != ranks)
    throw_input("{}: communicator group '{}' has other ranks than in {}", origin, pg,
                ctx.group_origin[pg]);
  if (fresh) ctx.group_origin[pg] = origin;
}

void read_group_list(Context& ctx, const std::string& text, const std::string& file,
                     std::int64_t rank, std::uint64_t node_id);

/// The groups of a METADATA node: `inputs.values` minus two characters at each end is a JSON
/// list of {"pg_name": "<id>", "ranks": [...]} (ASTRA-sim's reading).
void read_metadata(Context& ctx, const EtNode& n, const std::string& file, std::int64_t rank) {
  const std::string& v = n.inputs_values;
  if (v.size() < 4) return;
  read_group_list(ctx, v.substr(2, v.size() - 4), file, rank, n.id);
}

/// A JSON list of {"pg_name": "<id>", "ranks": [...]} (a METADATA node's, or the GlobalMetadata
/// attribute ss_comm_groups scalescope writes); errors name `node_id`.
void read_group_list(Context& ctx, const std::string& text, const std::string& file,
                     std::int64_t rank, std::uint64_t node_id) {
  if (!ctx.metadata_seen.insert(text).second) return;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array())
    node_error(file, node_id, rank, "METADATA inputs.values is not a JSON list of groups");
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("pg_name") || !e.contains("ranks") || !e["ranks"].is_array())
      node_error(file, node_id, rank, "METADATA group without pg_name and ranks");
    const auto& pgj = e["pg_name"];
    std::string pg;
    if (pgj.is_string())
      pg = pgj.get<std::string>();
    else if (pgj.is_number_integer())
      pg = std::to_string(pgj.get<std::int64_t>());
    else
      node_error(file, node_id, rank, "METADATA pg_name is neither a string nor an integer");
    std::vector<std::uint32_t> ranks;
    for (const auto& r : e["ranks"]) {
      if (!r.is_number_integer() || r.get<std::int64_t>() < 0 ||
          r.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max())
        node_error(file, node_id, rank, fmt::format("METADATA group '{}' has a bad rank", pg));
      ranks.push_back(r.get<std::uint32_t>());
    }
    add_group(ctx, pg, std::move(ranks), file);
  }
}

/// An Op restored from our own attributes (ss_op, ss_fp), with range checks.
Op schema_op(const EtNode& n, const std::string& file, std::int64_t rank) {
  const EtAttr* ints = n.attr("ss_op");
  const EtAttr* fp = n.attr("ss_fp");
  if (ints == nullptr || fp == nullptr ||
      (ints->ints.size() != kOpInts && ints->ints.size() != kOpInts - 1) || fp->reals.size() != 3)
    node_error(file, n.id, rank, "scalescope node without valid ss_op / ss_fp attributes");
  const auto& v = ints->ints;
  auto in = [&](std::size_t i, std::int64_t hi) {
    if (v[i] < 0 || v[i] > hi)
      node_error(file, n.id, rank, fmt::format("ss_op[{}] = {} out of range", i, v[i]));
    return v[i];
  };
  Op op;
  op.kind = static_cast<OpKind>(in(0, graph::kNumOpKinds - 1));
  op.stream = static_cast<Stream>(in(1, graph::kNumStreams - 1));
  op.role = static_cast<CommRole>(in(2, graph::kNumRoles - 1));
  op.role2 = static_cast<CommRole>(in(3, graph::kNumRoles - 1));
  op.phase = static_cast<graph::Phase>(in(4, static_cast<int>(graph::Phase::Other)));
  op.name = static_cast<graph::OpName>(in(5, static_cast<int>(graph::OpName::Count) - 1));
  op.layer = static_cast<std::uint16_t>(in(6, 0xFFFF));
  op.microbatch = static_cast<std::uint16_t>(in(7, 0xFFFF));
  op.attention_impl = static_cast<graph::AttentionImpl>(in(8, graph::kNumAttentionImpls - 1));
  op.gemm_dtype = static_cast<graph::GemmDtype>(in(9, graph::kNumGemmDtypes - 1));
  for (std::size_t k = 0; k < 3; ++k)
    op.shape[k] = static_cast<std::uint32_t>(in(10 + k, std::numeric_limits<std::uint32_t>::max()));
  op.mem_alloc = v[13];
  op.mem_free = v[14];
  op.mem_transient = v[15];
  op.comm_sms = static_cast<std::uint8_t>(in(16, 0xFF));
  op.value_dim = static_cast<std::uint16_t>(in(17, 0xFFFF));
  op.host_sync = v.size() > 18 ? static_cast<std::uint8_t>(in(18, 1)) : 0;
  op.flops = fp->reals[0];
  op.mem_bytes = fp->reals[1];
  op.comm_bytes = fp->reals[2];
  for (double x : fp->reals)
    if (!std::isfinite(x) || x < 0) node_error(file, n.id, rank, "ss_fp holds a bad value");
  return op;
}

/// One file → the rank's ops in a topological order (ties: ascending node id, as ASTRA-sim
/// issues ready nodes), with dependencies as op indices.
RawRank convert_file(Context& ctx, const EtFile& f, const std::string& file, std::int64_t rank) {
  RawRank out;
  out.file = file;
  out.roles.fill(-1);
  const std::size_t n = f.nodes.size();
  std::unordered_map<std::uint64_t, std::uint32_t> index;
  index.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i)
    if (!index.emplace(f.nodes[i].id, i).second)
      node_error(file, f.nodes[i].id, rank, "duplicate node id");
  // Each node's distinct parents (CSR), then the children lists (CSR): no allocation per node,
  // which a trace of 50,000 nodes per rank and a thousand ranks would pay for in malloc.
  std::vector<std::uint32_t> parent_offsets(n + 1, 0), parents;
  std::vector<std::uint32_t> indegree(n, 0), child_count(n, 0);
  for (std::uint32_t i = 0; i < n; ++i) {
    const EtNode& node = f.nodes[i];
    const std::size_t first = parents.size();
    for (const auto* list : {&node.data_deps, &node.ctrl_deps})
      for (std::uint64_t d : *list) {
        const auto it = index.find(d);
        if (it == index.end())
          node_error(file, node.id, rank,
                     fmt::format("depends on node {}, which is not in the file", d));
        if (it->second == i) node_error(file, node.id, rank, "depends on itself (cycle)");
        parents.push_back(it->second);
      }
    const auto mine = parents.begin() + static_cast<std::ptrdiff_t>(first);
    std::sort(mine, parents.end());
    parents.erase(std::unique(mine, parents.end()), parents.end());
    parent_offsets[i + 1] = static_cast<std::uint32_t>(parents.size());
    indegree[i] = parent_offsets[i + 1] - parent_offsets[i];
    for (std::size_t k = first; k < parents.size(); ++k) ++child_count[parents[k]];
  }
  std::vector<std::uint32_t> child_offsets(n + 1, 0), children(parents.size());
  for (std::uint32_t i = 0; i < n; ++i) child_offsets[i + 1] = child_offsets[i] + child_count[i];
  {
    std::vector<std::uint32_t> fill(child_offsets.begin(), child_offsets.end() - 1);
    for (std::uint32_t i = 0; i < n; ++i)
      for (std::uint32_t k = parent_offsets[i]; k < parent_offsets[i + 1]; ++k)
        children[fill[parents[k]]++] = i;
  }
  using Item = std::pair<std::uint64_t, std::uint32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
  for (std::uint32_t i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.emplace(f.nodes[i].id, i);
  std::vector<std::uint32_t> order;
  order.reserve(n);
  while (!ready.empty()) {
    const std::uint32_t i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (std::uint32_t k = child_offsets[i]; k < child_offsets[i + 1]; ++k)
      if (--indegree[children[k]] == 0) ready.emplace(f.nodes[children[k]].id, children[k]);
  }
  if (order.size() != n) {
    std::uint64_t id = std::numeric_limits<std::uint64_t>::max();
    for (std::uint32_t i = 0; i < n; ++i)
      if (indegree[i] > 0) id = std::min(id, f.nodes[i].id);
    node_error(file, id, rank, "dependency cycle");
  }

  // What each node stands for among the ops: itself, or (a node that is not an op: METADATA,
  // INVALID, a skipped kind) the ops its own dependencies stand for.
  // An op node stands for one op (rep_op); the rare other nodes for a list (rep_many).
  constexpr std::uint32_t kNoOp = 0xFFFFFFFFu;
  std::vector<std::uint32_t> rep_op(n, kNoOp);
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> rep_many;
  auto deps_of = [&](std::uint32_t i) {
    std::vector<std::uint32_t> d;
    for (std::uint32_t k = parent_offsets[i]; k < parent_offsets[i + 1]; ++k) {
      const std::uint32_t p = parents[k];
      if (rep_op[p] != kNoOp) {
        d.push_back(rep_op[p]);
      } else if (const auto it = rep_many.find(p); it != rep_many.end()) {
        d.insert(d.end(), it->second.begin(), it->second.end());
      }
    }
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
    return d;
  };
  for (std::uint32_t i : order) {
    const EtNode& node = f.nodes[i];
    const auto type = static_cast<EtNodeType>(node.type);
    if (node.type < 0 || node.type > 7)
      node_error(file, node.id, rank, fmt::format("unknown node type {}", node.type));
    if (type == EtNodeType::Metadata) {
      read_metadata(ctx, node, file, rank);
      rep_many[i] = deps_of(i);
      continue;
    }
    if (type == EtNodeType::Invalid) {
      rep_many[i] = deps_of(i);
      continue;
    }
    if (ctx.schema) {
      if (const EtAttr* part = node.attr("ss_part_of")) {
        // The receive half of a batched send/recv: the op of its send half.
        const auto it = index.find(static_cast<std::uint64_t>(part->i));
        if (it == index.end() || rep_op[it->second] == kNoOp)
          node_error(file, node.id, rank, "ss_part_of names no send node");
        rep_op[i] = rep_op[it->second];
        RawOp& o = out.ops[rep_op[i]];
        o.peer2 = int_attr(node, "comm_src", file, rank).value_or(-1);
        o.tag2 = int_attr(node, "comm_tag", file, rank).value_or(-1);
        continue;
      }
    }
    RawOp o;
    o.node = node.id;
    o.deps = deps_of(i);
    if (ctx.schema) {
      o.op = schema_op(node, file, rank);
      if (o.op.kind == OpKind::SendRecv) {
        const bool send = type == EtNodeType::CommSend;
        o.peer = int_attr(node, send ? "comm_dst" : "comm_src", file, rank).value_or(-1);
        o.tag = int_attr(node, "comm_tag", file, rank).value_or(-1);
        if (!send) {  // receive only: keep it in the receive slot
          o.peer2 = o.peer;
          o.tag2 = o.tag;
          o.peer = o.tag = -1;
        }
      }
    } else {
      Op& op = o.op;
      op.name = graph::OpName::BiasDropoutAdd;
      const auto size_attr = [&](const char* name) {
        const auto v = int_attr(node, name, file, rank);
        if (v && *v < 0)
          node_error(file, node.id, rank, fmt::format("attribute '{}' is negative", name));
        return v;
      };
      switch (type) {
        case EtNodeType::Comp:
        case EtNodeType::MemLoad:
        case EtNodeType::MemStore: {
          // Memory-bound by default; num_ops (FLOPs) and tensor_size (bytes) feed the roofline.
          op.kind = OpKind::Elementwise;
          if (type == EtNodeType::Comp)
            op.flops = static_cast<double>(size_attr("num_ops").value_or(0));
          op.mem_bytes = static_cast<double>(size_attr("tensor_size").value_or(0));
          if (node.duration_micros > 0) {
            if (node.duration_micros > std::numeric_limits<std::int64_t>::max() / 1000)
              node_error(file, node.id, rank, "duration_micros out of range");
            o.duration_ns = static_cast<std::int64_t>(node.duration_micros) * 1000;
          }
          break;
        }
        case EtNodeType::CommColl: {
          const auto t = int_attr(node, "comm_type", file, rank);
          if (!t) node_error(file, node.id, rank, "COMM_COLL node without comm_type");
          const auto size = size_attr("comm_size").value_or(0);
          o.group = pg_attr(node, file, rank);
          switch (static_cast<EtCollective>(*t)) {
            case EtCollective::AllReduce:
              op.kind = OpKind::AllReduce;
              break;
            case EtCollective::AllGather:
              op.kind = OpKind::AllGather;
              break;
            case EtCollective::ReduceScatter:
              op.kind = OpKind::ReduceScatter;
              break;
            case EtCollective::AllToAll:
              op.kind = OpKind::AllToAll;
              break;
            case EtCollective::Broadcast:
              // ASTRA-sim models a broadcast as a fixed delay of duration_micros only.
              op.kind = OpKind::Elementwise;
              o.duration_ns = static_cast<std::int64_t>(node.duration_micros) * 1000;
              o.group.clear();
              break;
            default:
              node_error(file, node.id, rank,
                         fmt::format("unsupported collective comm_type {} (ASTRA-sim runs "
                                     "all-reduce, all-gather, reduce-scatter, all-to-all)",
                                     *t));
          }
          op.comm_bytes = static_cast<double>(size);  // AllGather: × n once the group is known
          break;
        }
        case EtNodeType::CommSend:
        case EtNodeType::CommRecv: {
          const bool send = type == EtNodeType::CommSend;
          op.kind = OpKind::SendRecv;
          op.comm_bytes = static_cast<double>(size_attr("comm_size").value_or(0));
          const auto src = int_attr(node, "comm_src", file, rank);
          const auto dst = int_attr(node, "comm_dst", file, rank);
          const auto peer = send ? dst : src;
          if (peer) {
            o.peer = *peer;
          } else {
            // Converters (PyTorch's) leave the peer out: a two-member pg_name group names it.
            const std::string pg = pg_attr(node, file, rank);
            const auto g = ctx.groups.find(pg);
            if (pg == "0" || g == ctx.groups.end() || g->second.size() != 2 ||
                !std::binary_search(g->second.begin(), g->second.end(),
                                    static_cast<std::uint32_t>(rank)))
              node_error(
                  file, node.id, rank,
                  fmt::format("{} node without {} and no two-rank pg_name group to infer "
                              "it from",
                              send ? "COMM_SEND" : "COMM_RECV", send ? "comm_dst" : "comm_src"));
            o.peer = g->second[0] == static_cast<std::uint32_t>(rank) ? g->second[1] : g->second[0];
            if (ctx.opt->warn)
              ctx.opt->warn(fmt::format("{}: node {} (rank {}): {} inferred as {} from group {}",
                                        file, node.id, rank, send ? "comm_dst" : "comm_src", o.peer,
                                        pg));
          }
          o.tag = int_attr(node, "comm_tag", file, rank).value_or(-1);
          if (!send) {
            o.peer2 = o.peer;
            o.tag2 = o.tag;
            o.peer = o.tag = -1;
          }
          break;
        }
        default:
          break;
      }
    }
    rep_op[i] = static_cast<std::uint32_t>(out.ops.size());
    out.ops.push_back(std::move(o));
  }
  return out;
}

/// Bytes that identify a program (ops, dependencies, fixed durations) for template sharing.
std::string program_key(const RawRank& r) {
  std::string k;
  auto put = [&](const auto& v) { k.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(r.static_memory);
  k += r.template_name;
  k.push_back('\0');
  for (const RawOp& o : r.ops) {
    const Op& op = o.op;
    for (std::int64_t v : op_ints(op)) put(v);
    put(op.flops);
    put(op.mem_bytes);
    put(op.comm_bytes);
    put(o.duration_ns);
    put(o.deps.size());
    for (auto d : o.deps) put(d);
  }
  return k;
}

}  // namespace

ChakraImport read_chakra(const std::string& prefix, const ChakraReadOptions& opt) {
#if defined(__GLIBC__)
  // Each file is decoded into ~10 allocations per node and freed again, beside the ranks' kept
  // communication ops. glibc raises its mmap threshold to the largest block freed (a file's
  // bytes), after which those long-lived vectors come from the heap between the transients and
  // malloc slows as the import goes on (measured: 3.6 files/s at rank 300 of a 1,024-rank GPT-3
  // trace, 2 at rank 700). A fixed threshold keeps large blocks in their own mappings.
  static const bool fixed_threshold = [] { return mallopt(M_MMAP_THRESHOLD, 256 << 10) == 1; }();
  (void)fixed_threshold;
#endif
  ChakraImport result;
  Context ctx;
  ctx.opt = &opt;
  std::vector<RawRank> ranks;
  nlohmann::json classes;
  const bool class_layout = !fs::exists(rank_file(prefix, 0)) && fs::exists(classes_json(prefix));
  std::vector<std::string> files;
  if (class_layout) {
    std::ifstream in(classes_json(prefix));
    classes = nlohmann::json::parse(in, nullptr, false);
    if (classes.is_discarded() || !classes.is_object() ||
        classes.value("format", "") != "scalescope-chakra-classes-1" ||
        !classes.contains("num_classes"))
      throw_input("{}: not a scalescope Chakra class map", classes_json(prefix));
    const auto k = classes["num_classes"].get<std::uint32_t>();
    for (std::uint32_t i = 0; i < k; ++i) files.push_back(class_file(prefix, i));
  } else {
    for (std::uint32_t r = 0; fs::exists(rank_file(prefix, r)); ++r)
      files.push_back(rank_file(prefix, r));
  }
  if (files.empty())
    throw_input("{}: no Chakra ET files ({} does not exist)", prefix, rank_file(prefix, 0));
  if (!opt.comm_groups_path.empty()) {
    std::ifstream in(opt.comm_groups_path);
    if (!in) throw_input("{}: cannot open", opt.comm_groups_path);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_string() && j.get<std::string>() == "empty") {
    } else if (j.is_discarded() || !j.is_object()) {
      throw_input("{}: expected a JSON object {{\"<group id>\": [ranks...]}}",
                  opt.comm_groups_path);
    } else {
      for (const auto& [pg, list] : j.items()) {
        if (!list.is_array()) throw_input("{}: group '{}' is not a list", opt.comm_groups_path, pg);
        std::vector<std::uint32_t> members;
        for (const auto& r : list) {
          if (!r.is_number_unsigned())
            throw_input("{}: group '{}' has a bad rank", opt.comm_groups_path, pg);
          members.push_back(r.get<std::uint32_t>());
        }
        add_group(ctx, pg, std::move(members), opt.comm_groups_path);
      }
    }
  }

  std::unordered_map<std::string, std::size_t> interned;  // program key → first rank with it
  for (std::size_t i = 0; i < files.size(); ++i) {
    const EtFile f = read_chakra_file(files[i]);
    const EtAttr* schema = f.meta_attr("schema");
    const bool ours = schema != nullptr && schema->s == kSchema;
    if (i == 0) ctx.schema = ours;
    if (const EtAttr* config = f.meta_attr("ss_config"); ours && config != nullptr)
      result.source_config = config->s;
    if (ours != ctx.schema)
      throw_input("{}: written by {} but {} was {}", files[i], ours ? "scalescope" : "another tool",
                  files[0], ctx.schema ? "scalescope's" : "not");
    if (class_layout && !ours)
      throw_input("{}: the class layout is read only from files scalescope wrote", files[i]);
    result.nodes += f.nodes.size();
    // scalescope's files name their groups in GlobalMetadata (and, written with
    // --metadata-node, in a METADATA node too).
    if (const EtAttr* groups = f.meta_attr("ss_comm_groups"); ours && groups != nullptr)
      read_group_list(ctx, groups->s, files[i], static_cast<std::int64_t>(i), 0);
    RawRank r = convert_file(ctx, f, files[i], static_cast<std::int64_t>(i));
    if (ours) {
      const EtAttr* roles = f.meta_attr("ss_roles");
      const EtAttr* name = f.meta_attr("ss_template");
      const EtAttr* mem = f.meta_attr("ss_static_memory");
      if (roles == nullptr || roles->ints.size() != graph::kNumRoles || name == nullptr ||
          mem == nullptr)
        throw_input("{}: scalescope schema without ss_roles / ss_template / ss_static_memory",
                    files[i]);
      std::copy(roles->ints.begin(), roles->ints.end(), r.roles.begin());
      r.template_name = name->s;
      r.static_memory = mem->i;
      // Our files restore every op as it was, peers as roles: ranks of one template have equal
      // programs. Keep each distinct program once (a 1,024-rank GPT-3 trace is 1,024 copies of
      // 8 programs of ~50,000 ops; holding them all took more memory than the machine had).
      const auto [it, fresh] = interned.emplace(program_key(r), i);
      if (!fresh) {
        // Only what the checks below read stays: the communication ops (their peers are this
        // rank's), without dependencies.
        r.same_as = static_cast<std::int64_t>(it->second);
        std::erase_if(r.ops, [](const RawOp& o) { return !graph::is_communication(o.op.kind); });
        for (RawOp& o : r.ops) o.deps = {};
        r.ops.shrink_to_fit();
      }
    }
    ranks.push_back(std::move(r));
  }
  result.files = files.size();
  result.scalescope_schema = ctx.schema;

  graph::SlicedGraph& g = result.graph;
  // World, rank → program, rank → pg id per role.
  std::vector<std::uint32_t> program_of_rank;
  std::vector<std::array<std::int64_t, graph::kNumRoles>> roles;
  if (class_layout) {
    g.world_size = classes.at("world_size").get<std::uint32_t>();
    program_of_rank = classes.at("rank_class").get<std::vector<std::uint32_t>>();
    for (const auto& row : classes.at("roles")) {
      std::array<std::int64_t, graph::kNumRoles> a{};
      const auto v = row.get<std::vector<std::int64_t>>();
      if (v.size() != graph::kNumRoles) throw_input("{}: bad roles row", classes_json(prefix));
      std::copy(v.begin(), v.end(), a.begin());
      roles.push_back(a);
    }
    for (const auto& [pg, list] : classes.at("groups").items())
      add_group(ctx, pg, list.get<std::vector<std::uint32_t>>(), classes_json(prefix));
    if (program_of_rank.size() != g.world_size || roles.size() != g.world_size)
      throw_input("{}: rank_class / roles do not have world_size entries", classes_json(prefix));
    for (std::uint32_t k : program_of_rank)
      if (k >= ranks.size()) throw_input("{}: rank class {} has no file", classes_json(prefix), k);
  } else {
    g.world_size = static_cast<std::uint32_t>(ranks.size());
    for (std::uint32_t r = 0; r < g.world_size; ++r) program_of_rank.push_back(r);
  }
  const std::uint32_t world = g.world_size;
  // "" and "0" mean all ranks (unless a group "0" is defined), as does an empty member list.
  auto all_ranks = [&] {
    const auto it = ctx.groups.find("0");
    if (it != ctx.groups.end() && !it->second.empty()) return it->second;
    std::vector<std::uint32_t> all(world);
    for (std::uint32_t r = 0; r < world; ++r) all[r] = r;
    return all;
  };
  auto group_ranks = [&](const std::string& pg) -> std::vector<std::uint32_t> {
    if (pg == "0" || pg.empty()) return all_ranks();
    const auto it = ctx.groups.find(pg);
    if (it == ctx.groups.end()) return {};
    if (it->second.empty()) return all_ranks();
    return it->second;
  };

  g.rank_roles.assign(static_cast<std::size_t>(world) * graph::kNumRoles, graph::kNoComm);
  auto set_role = [&](std::uint32_t r, CommRole role, std::int32_t c) {
    g.rank_roles[static_cast<std::size_t>(r) * graph::kNumRoles + static_cast<std::size_t>(role)] =
        c;
  };

  if (ctx.schema) {
    // Communicators: every pg id a rank holds in a role, in id order; the kind follows the role.
    std::map<std::int64_t, std::pair<CommKind, std::int32_t>> comm_of_pg;
    const auto role_rows = class_layout ? roles : [&] {
      std::vector<std::array<std::int64_t, graph::kNumRoles>> v;
      for (const RawRank& r : ranks) v.push_back(r.roles);
      return v;
    }();
    for (std::uint32_t r = 0; r < world; ++r)
      for (int role = 1; role < graph::kNumRoles; ++role) {
        const std::int64_t pg = role_rows[r][static_cast<std::size_t>(role)];
        if (pg < 0) continue;
        CommKind kind = CommKind::PpPair;
        for (int k = 0; k <= static_cast<int>(CommKind::TpEpGroup); ++k)
          if (graph::role_of(static_cast<CommKind>(k)) == static_cast<CommRole>(role))
            kind = static_cast<CommKind>(k);
        comm_of_pg.emplace(pg, std::make_pair(kind, -1));
      }
    for (auto& [pg, kc] : comm_of_pg) {
      const auto members = group_ranks(std::to_string(pg));
      if (members.empty())
        throw_input("{}: communicator group {} is named in ss_roles but not defined", prefix, pg);
      for (std::uint32_t m : members)
        if (m >= world)
          throw_input("{}: communicator group {} names rank {} ≥ {} ranks", prefix, pg, m, world);
      kc.second = static_cast<std::int32_t>(g.comms.add(kc.first, members));
    }
    for (std::uint32_t r = 0; r < world; ++r)
      for (int role = 1; role < graph::kNumRoles; ++role) {
        const std::int64_t pg = role_rows[r][static_cast<std::size_t>(role)];
        if (pg >= 0) set_role(r, static_cast<CommRole>(role), comm_of_pg.at(pg).second);
      }
  } else {
    // Foreign trace: each pg group becomes a communicator whose kind (and so role and stream)
    // no member uses for another group (greedy, in order of first use); P2P peers become
    // pipeline pairs.
    const std::array<CommKind, 9> kinds{
        CommKind::DpGroup,        CommKind::TpGroup,          CommKind::CpGroup,
        CommKind::EpGroup,        CommKind::EtpGroup,         CommKind::TpEpGroup,
        CommKind::EmbeddingGroup, CommKind::DpReplicateGroup, CommKind::EdpGroup};
    std::map<std::string, std::int32_t> comm_of_group;
    std::vector<std::uint32_t> used(world, 0);  // bit k: kinds[k] taken by this rank
    for (std::uint32_t r = 0; r < world; ++r)
      for (RawOp& o : ranks[r].ops) {
        if (!graph::is_collective(o.op.kind)) continue;
        const auto members = group_ranks(o.group);
        if (members.empty())
          node_error(ranks[r].file, o.node, r,
                     fmt::format("communicator group '{}' not found (no METADATA node or "
                                 "--comm-groups entry defines it)",
                                 o.group));
        if (!std::binary_search(members.begin(), members.end(), r))
          node_error(ranks[r].file, o.node, r,
                     fmt::format("rank is not a member of its communicator group '{}'", o.group));
        for (std::uint32_t m : members)
          if (m >= world)
            node_error(
                ranks[r].file, o.node, r,
                fmt::format("group '{}' names rank {} but there are {} files", o.group, m, world));
        auto it = comm_of_group.find(o.group);
        if (it == comm_of_group.end()) {
          std::uint32_t taken = 0;
          for (std::uint32_t m : members) taken |= used[m];
          std::size_t k = 0;
          while (k < kinds.size() && (taken >> k) & 1u) ++k;
          if (k == kinds.size())
            node_error(ranks[r].file, o.node, r,
                       "a rank takes part in more than 9 communicator groups, more than "
                       "scalescope's role table holds");
          const auto c = static_cast<std::int32_t>(g.comms.add(kinds[k], members));
          for (std::uint32_t m : members) {
            used[m] |= 1u << k;
            set_role(m, graph::role_of(kinds[k]), c);
          }
          it = comm_of_group.emplace(o.group, c).first;
        }
        const CommKind kind = g.comms.kind[static_cast<std::uint32_t>(it->second)];
        o.op.role = graph::role_of(kind);
        o.op.stream = graph::stream_of(o.op.role);
        if (o.op.kind == OpKind::AllGather) o.op.comm_bytes *= static_cast<double>(members.size());
      }
    // Point-to-point: at most two peers per rank, oriented into pipeline pairs (next, prev).
    std::vector<std::set<std::uint32_t>> peers(world), sends_to(world);
    for (std::uint32_t r = 0; r < world; ++r)
      for (const RawOp& o : ranks[r].ops)
        for (std::int64_t p : {o.peer, o.peer2}) {
          if (o.op.kind != OpKind::SendRecv || p == -1) continue;
          if (p < 0 || p >= world || p == r)
            node_error(ranks[r].file, o.node, r,
                       fmt::format("send/recv peer {} is not another of the {} ranks", p, world));
          peers[r].insert(static_cast<std::uint32_t>(p));
          if (p == o.peer) sends_to[r].insert(static_cast<std::uint32_t>(p));
          peers[static_cast<std::size_t>(p)].insert(r);
        }
    for (std::uint32_t r = 0; r < world; ++r)
      if (peers[r].size() > 2)
        throw_input(
            "{}: rank {} exchanges point-to-point messages with {} ranks; scalescope models "
            "send/recv as pipeline pairs, at most a previous and a next peer per rank",
            ranks[r].file, r, peers[r].size());
    std::vector<std::int64_t> next(world, -1), prev(world, -1);
    std::vector<bool> seen(world, false);
    for (std::uint32_t s = 0; s < world; ++s) {
      if (seen[s] || peers[s].empty()) continue;
      // The component of s (a path or a cycle, every degree ≤ 2): walk it from one end (from s
      // if it is a cycle), each rank's next being the one after it.
      std::vector<std::uint32_t> comp{s}, stack{s};
      std::set<std::uint32_t> in_comp{s};
      while (!stack.empty()) {
        const std::uint32_t u = stack.back();
        stack.pop_back();
        for (std::uint32_t p : peers[u])
          if (in_comp.insert(p).second) {
            comp.push_back(p);
            stack.push_back(p);
          }
      }
      std::uint32_t start = s;
      for (std::uint32_t u : comp)
        if (peers[u].size() == 1) start = u;
      const bool cycle = peers[start].size() == 2;
      std::uint32_t cur = start;
      for (;;) {
        seen[cur] = true;
        std::int64_t step = -1;
        for (std::uint32_t p : peers[cur])  // downstream = where it sends, when it can
          if (!seen[p] && (step < 0 || sends_to[cur].count(p))) step = p;
        if (step < 0) {
          if (cycle && cur != start) {
            next[cur] = start;
            prev[start] = cur;
          }
          break;
        }
        next[cur] = step;
        prev[static_cast<std::size_t>(step)] = cur;
        cur = static_cast<std::uint32_t>(step);
      }
    }
    for (std::uint32_t r = 0; r < world; ++r)
      if (next[r] >= 0) {
        const auto n = static_cast<std::uint32_t>(next[r]);
        const auto c = static_cast<std::int32_t>(
            g.comms.add(CommKind::PpPair, {std::min(r, n), std::max(r, n)}));
        set_role(r, CommRole::PpNext, c);
        set_role(n, CommRole::PpPrev, c);
      }
    for (std::uint32_t r = 0; r < world; ++r) {
      std::map<std::int64_t, std::int64_t> sent, received;  // peer → count, for inferred tags
      bool warned = false;
      for (RawOp& o : ranks[r].ops) {
        if (o.op.kind != OpKind::SendRecv) continue;
        const bool send = o.peer >= 0;
        const std::int64_t p = send ? o.peer : o.peer2;
        const CommRole role = next[r] == p ? CommRole::PpNext : CommRole::PpPrev;
        (send ? o.op.role : o.op.role2) = role;
        o.op.stream = graph::stream_of(role);
        std::int64_t& tag = send ? o.tag : o.tag2;
        std::int64_t& count = (send ? sent : received)[p];
        if (tag < 0) {
          tag = count;
          if (!warned && opt.warn)
            opt.warn(
                fmt::format("{}: node {} (rank {}): comm_tag missing, inferred from the "
                            "order of the transfers with rank {}",
                            ranks[r].file, o.node, r, p));
          warned = true;
        }
        ++count;
      }
    }
  }

  // Collective order: every member of a communicator issues the same (kind, bytes) sequence.
  if (!class_layout) {
    struct Coll {
      OpKind kind;
      double bytes;
      std::uint64_t node;
    };
    std::vector<std::map<std::uint32_t, std::vector<Coll>>> seq(g.comms.size());
    for (std::uint32_t r = 0; r < world; ++r)
      for (const RawOp& o : ranks[r].ops)
        if (graph::is_collective(o.op.kind)) {
          const std::int32_t c = g.comm_of(r, o.op.role);
          if (c == graph::kNoComm)
            node_error(ranks[r].file, o.node, r, "collective on a role the rank has no group for");
          seq[static_cast<std::uint32_t>(c)][r].push_back({o.op.kind, o.op.comm_bytes, o.node});
        }
    for (std::uint32_t c = 0; c < g.comms.size(); ++c) {
      if (g.comms.kind[c] == CommKind::PpPair) continue;
      const std::uint32_t first = *g.comms.members_begin(c);
      const auto& a = seq[c][first];
      for (const std::uint32_t* m = g.comms.members_begin(c) + 1; m != g.comms.members_end(c);
           ++m) {
        const auto& b = seq[c][*m];
        for (std::size_t k = 0; k < std::max(a.size(), b.size()); ++k) {
          if (k < a.size() && k < b.size() && a[k].kind == b[k].kind && a[k].bytes == b[k].bytes)
            continue;
          const std::uint64_t node = k < b.size() ? b[k].node : (b.empty() ? 0 : b.back().node);
          node_error(ranks[*m].file, node, *m,
                     fmt::format(
                         "collective order disagrees with rank {} on communicator group "
                         "{} at its collective #{}: {} here, {} there",
                         first, c + 1, k,
                         k < b.size()
                             ? fmt::format("{} of {} B", graph::op_kind_name(b[k].kind), b[k].bytes)
                             : std::string("nothing"),
                         k < a.size()
                             ? fmt::format("{} of {} B", graph::op_kind_name(a[k].kind), a[k].bytes)
                             : std::string("nothing")));
        }
      }
    }
    // Point-to-point: our pairs are FIFO per direction, so the k-th send must meet the k-th
    // receive with the same tag and size.
    struct P2p {
      std::int64_t tag;
      double bytes;
      std::uint64_t node;
    };
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<P2p>> sends, recvs;
    for (std::uint32_t r = 0; r < world; ++r)
      for (const RawOp& o : ranks[r].ops) {
        if (o.op.kind != OpKind::SendRecv) continue;
        if (o.peer >= 0)
          sends[{r, static_cast<std::uint32_t>(o.peer)}].push_back(
              {o.tag, o.op.comm_bytes, o.node});
        if (o.peer2 >= 0)
          recvs[{static_cast<std::uint32_t>(o.peer2), r}].push_back(
              {o.tag2, o.op.comm_bytes, o.node});
      }
    auto check = [&](const auto& mine, const auto& theirs, bool mine_are_sends) {
      for (const auto& [pair, list] : mine) {
        const auto it = theirs.find(pair);
        const std::uint32_t here = mine_are_sends ? pair.first : pair.second;
        const std::uint32_t there = mine_are_sends ? pair.second : pair.first;
        const std::size_t other = it == theirs.end() ? 0 : it->second.size();
        for (std::size_t k = 0; k < list.size(); ++k) {
          if (k < other && it->second[k].tag == list[k].tag &&
              (it->second[k].bytes == list[k].bytes || !mine_are_sends || it->second[k].bytes == 0))
            continue;
          node_error(
              ranks[here].file, list[k].node, here,
              fmt::format("{} #{} {} rank {} (tag {}) has no matching {} in order on rank "
                          "{}",
                          mine_are_sends ? "send" : "receive", k, mine_are_sends ? "to" : "from",
                          there, list[k].tag, mine_are_sends ? "receive" : "send", there));
        }
      }
    };
    check(sends, recvs, true);
    check(recvs, sends, false);
    // A receive without a size takes its send's.
    for (std::uint32_t r = 0; r < world; ++r)
      for (RawOp& o : ranks[r].ops)
        if (o.op.kind == OpKind::SendRecv && o.peer < 0 && o.op.comm_bytes == 0) {
          // find the matching send: k-th receive from peer2
          std::size_t k = 0;
          for (const RawOp& x : ranks[r].ops) {
            if (&x == &o) break;
            if (x.op.kind == OpKind::SendRecv && x.peer2 == o.peer2) ++k;
          }
          o.op.comm_bytes = sends.at({static_cast<std::uint32_t>(o.peer2), r}).at(k).bytes;
        }
  }

  // Templates: identical programs are shared (the ring's ranks all look alike once peers are
  // roles); the class layout already is one program per class.
  std::unordered_map<std::string, std::uint32_t> template_of_key;
  std::vector<std::uint32_t> template_of_program(ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const RawRank& r = ranks[i];
    if (r.same_as >= 0) {
      template_of_program[i] = template_of_program[static_cast<std::size_t>(r.same_as)];
      continue;
    }
    const auto [it, fresh] =
        template_of_key.emplace(program_key(r), static_cast<std::uint32_t>(g.templates.size()));
    template_of_program[i] = it->second;
    if (!fresh) continue;
    graph::RankProgram p;
    p.name =
        r.template_name.empty() ? fmt::format("chakra_{}", g.templates.size()) : r.template_name;
    p.static_memory = r.static_memory;
    std::vector<std::int64_t> d;
    bool any = false;
    for (const RawOp& o : r.ops) {
      p.add(o.op, o.deps);
      d.push_back(o.duration_ns);
      any = any || o.duration_ns >= 0;
    }
    if (any) result.durations.emplace(it->second, std::move(d));
    g.templates.push_back(std::move(p));
  }
  g.rank_class.resize(world);
  for (std::uint32_t r = 0; r < world; ++r)
    g.rank_class[r] = template_of_program[program_of_rank[r]];
  try {
    for (auto& t : g.templates) t.finalize();
    graph::validate(g);
    if (opt.expand_dp > 1) g = graph::expand_replicas(g, opt.expand_dp);
  } catch (const InputError& e) {
    throw_input("{}: {}", prefix, e.what());
  }
  return result;
}

std::map<std::uint32_t, std::vector<SimTime>> resolve_durations(
    const graph::SlicedGraph& g, const std::map<std::uint32_t, std::vector<std::int64_t>>& d,
    const std::function<SimTime(const graph::Op&)>& compute) {
  std::map<std::uint32_t, std::vector<SimTime>> out;
  for (const auto& [k, v] : d) {
    const graph::RankProgram& p = g.templates.at(k);
    SCALESCOPE_EXPECTS(v.size() == p.size());
    std::vector<SimTime> t(p.size(), 0);
    for (std::uint32_t i = 0; i < p.size(); ++i)
      if (!graph::is_communication(p.ops[i].kind)) t[i] = v[i] >= 0 ? v[i] : compute(p.ops[i]);
    out.emplace(k, std::move(t));
  }
  return out;
}

void write_imported_graph_h5(const graph::SlicedGraph& g,
                             const std::map<std::uint32_t, std::vector<std::int64_t>>& durations,
                             const std::string& path) {
  write_via_temporary(path, [&](const std::string& tmp) {
    write_graph_h5(g, tmp);
    if (durations.empty()) return;
    h5::File f = h5::File::open(tmp, true);
    const h5::Group d = f.root().create_group("chakra_durations");
    for (const auto& [k, v] : durations) d.write(std::to_string(k), v);
  });
}

std::map<std::uint32_t, std::vector<std::int64_t>> read_graph_durations_h5(
    const std::string& graph_h5) {
  std::map<std::uint32_t, std::vector<std::int64_t>> out;
  h5::File f = h5::File::open(graph_h5);
  if (!f.root().exists("chakra_durations")) return out;
  const h5::Group g = f.root().open_group("chakra_durations");
  const std::uint32_t n = f.root().open_group("meta").attribute<std::uint32_t>("num_templates");
  for (std::uint32_t k = 0; k < n; ++k)
    if (g.exists(std::to_string(k))) out.emplace(k, g.read<std::int64_t>(std::to_string(k)));
  return out;
}

}  // namespace scalescope::io
