// Chakra ET → ops: one file of a trace (ours or a foreign one) converted into a rank's ops and its
// communicator groups, which read_chakra (chakra_et_reader.cpp) then joins into a graph.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "io/chakra_et_internal.hpp"

namespace scalescope::io::detail {

using graph::CommRole;
using graph::OpKind;
using graph::Stream;

[[noreturn]] void node_error(const std::string& file, std::uint64_t id, std::int64_t rank,
                             const std::string& what) {
  throw InputError(fmt::format("{}: node {} (rank {}): {}", file, id, rank, what));
}

namespace {

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

}  // namespace

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

namespace {

/// The groups of a METADATA node: `inputs.values` minus two characters at each end is a JSON
/// list of {"pg_name": "<id>", "ranks": [...]} (ASTRA-sim's reading).
void read_metadata(Context& ctx, const EtNode& n, const std::string& file, std::int64_t rank) {
  const std::string& v = n.inputs_values;
  if (v.size() < 4) return;
  read_group_list(ctx, v.substr(2, v.size() - 4), file, rank, n.id);
}

}  // namespace

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

namespace {

/// An Op restored from our own attributes (ss_op, ss_fp), with range checks.
Op schema_op(const EtNode& n, const std::string& file, std::int64_t rank) {
  const EtAttr* ints = n.attr("ss_op");
  const EtAttr* fp = n.attr("ss_fp");
  if (ints == nullptr || fp == nullptr ||
      (ints->ints.size() != kOpInts && ints->ints.size() != kOpInts - 2 &&
       ints->ints.size() != kOpInts - 3) ||
      fp->reals.size() != 3)
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
  op.kernels = v.size() > 19 ? static_cast<std::uint16_t>(in(19, 0xFFFF)) : 0;
  op.cuda_graph = v.size() > 20 ? static_cast<std::uint8_t>(in(20, 2)) : 0;
  op.flops = fp->reals[0];
  op.mem_bytes = fp->reals[1];
  op.comm_bytes = fp->reals[2];
  for (double x : fp->reals)
    if (!std::isfinite(x) || x < 0) node_error(file, n.id, rank, "ss_fp holds a bad value");
  return op;
}

}  // namespace

namespace {

/// Kahn's topological order of f's nodes (their distinct parents as CSR; `indegree`, each
/// node's parent count, is consumed), the smallest ready node id first; `indegree` is left > 0
/// on the nodes of a cycle.
void kahn_order(const EtFile& f, const std::vector<std::uint32_t>& parents,
                const std::vector<std::uint32_t>& parent_offsets,
                std::vector<std::uint32_t>& indegree, std::vector<std::uint32_t>& order) {
  const std::size_t n = f.nodes.size();
  // The children lists (CSR): no allocation per node.
  std::vector<std::uint32_t> child_offsets(n + 1, 0), children(parents.size());
  for (const std::uint32_t p : parents) ++child_offsets[p + 1];
  for (std::size_t i = 0; i < n; ++i) child_offsets[i + 1] += child_offsets[i];
  std::vector<std::uint32_t> fill(child_offsets.begin(), child_offsets.end() - 1);
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t k = parent_offsets[i]; k < parent_offsets[i + 1]; ++k)
      children[fill[parents[k]]++] = i;
  using Item = std::pair<std::uint64_t, std::uint32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
  for (std::uint32_t i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.emplace(f.nodes[i].id, i);
  while (!ready.empty()) {
    const std::uint32_t i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (std::uint32_t k = child_offsets[i]; k < child_offsets[i + 1]; ++k)
      if (--indegree[children[k]] == 0) ready.emplace(f.nodes[children[k]].id, children[k]);
  }
}

}  // namespace

/// One file → the rank's ops in a topological order (ties: ascending node id, as ASTRA-sim
/// issues ready nodes), with dependencies as op indices.
RawRank convert_file(Context& ctx, const EtFile& f, const std::string& file, std::int64_t rank) {
  RawRank out;
  out.file = file;
  out.roles.fill(-1);
  const std::size_t n = f.nodes.size();
  // Node id → position: a table where the ids are dense (every writer we know numbers its
  // nodes from 0 or 1), else a hash map.
  constexpr std::uint32_t kAbsent = 0xFFFFFFFFu;
  std::uint64_t max_id = 0;
  for (const EtNode& node : f.nodes) max_id = std::max(max_id, node.id);
  const bool dense = max_id < 4 * static_cast<std::uint64_t>(n) + 1024;
  std::vector<std::uint32_t> table(dense ? max_id + 1 : 0, kAbsent);
  std::unordered_map<std::uint64_t, std::uint32_t> sparse;
  if (!dense) sparse.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    const bool fresh = dense ? std::exchange(table[f.nodes[i].id], i) == kAbsent
                             : sparse.emplace(f.nodes[i].id, i).second;
    if (!fresh) node_error(file, f.nodes[i].id, rank, "duplicate node id");
  }
  const auto position = [&](std::uint64_t id) {
    if (dense) return id <= max_id ? table[id] : kAbsent;
    const auto it = sparse.find(id);
    return it == sparse.end() ? kAbsent : it->second;
  };
  // Each node's distinct parents (CSR): no allocation per node, which a trace of 50,000 nodes
  // per rank and a thousand ranks would pay for in malloc.
  std::vector<std::uint32_t> parent_offsets(n + 1, 0), parents;
  std::vector<std::uint32_t> indegree(n, 0);
  // Whether the file is already in the order wanted: ids ascending and every node after its
  // parents (what our writer and the PyTorch converter produce).
  bool in_order = true;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (i > 0 && f.nodes[i].id <= f.nodes[i - 1].id) in_order = false;
    const EtNode& node = f.nodes[i];
    const std::size_t first = parents.size();
    for (const auto* list : {&node.data_deps, &node.ctrl_deps})
      for (std::uint64_t d : *list) {
        const std::uint32_t at = position(d);
        if (at == kAbsent)
          node_error(file, node.id, rank,
                     fmt::format("depends on node {}, which is not in the file", d));
        if (at == i) node_error(file, node.id, rank, "depends on itself (cycle)");
        if (at > i) in_order = false;
        parents.push_back(at);
      }
    const auto mine = parents.begin() + static_cast<std::ptrdiff_t>(first);
    std::sort(mine, parents.end());
    parents.erase(std::unique(mine, parents.end()), parents.end());
    parent_offsets[i + 1] = static_cast<std::uint32_t>(parents.size());
    indegree[i] = parent_offsets[i + 1] - parent_offsets[i];
  }
  // Kahn's order with the smallest ready id first (as ASTRA-sim issues ready nodes). A file in
  // order is its own answer: the smallest id not yet taken always has its parents taken (their
  // ids are smaller), so the order is the file's, without a cycle.
  std::vector<std::uint32_t> order;
  order.reserve(n);
  if (in_order) {
    for (std::uint32_t i = 0; i < n; ++i) order.push_back(i);
  } else {
    kahn_order(f, parents, parent_offsets, indegree, order);
    if (order.size() != n) {
      std::uint64_t id = std::numeric_limits<std::uint64_t>::max();
      for (std::uint32_t i = 0; i < n; ++i)
        if (indegree[i] > 0) id = std::min(id, f.nodes[i].id);
      node_error(file, id, rank, "dependency cycle");
    }
  }

  // What each node stands for among the ops: itself, or (a node that is not an op: METADATA,
  // INVALID, a skipped kind) the ops its own dependencies stand for.
  // An op node stands for one op (rep_op); the rare other nodes for a list (rep_many).
  constexpr std::uint32_t kNoOp = 0xFFFFFFFFu;
  std::vector<std::uint32_t> rep_op(n, kNoOp);
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> rep_many;
  std::vector<std::uint32_t> d;  // deps_of's scratch: one buffer for every node
  auto deps_of = [&](std::uint32_t i) -> const std::vector<std::uint32_t>& {
    d.clear();
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
        const std::uint32_t at =
            part->i < 0 ? kAbsent : position(static_cast<std::uint64_t>(part->i));
        if (at == kAbsent || rep_op[at] == kNoOp)
          node_error(file, node.id, rank, "ss_part_of names no send node");
        rep_op[i] = rep_op[at];
        RawOp& o = out.ops[rep_op[i]];
        o.peer2 = int_attr(node, "comm_src", file, rank).value_or(-1);
        o.tag2 = int_attr(node, "comm_tag", file, rank).value_or(-1);
        continue;
      }
    }
    RawOp o;
    o.node = node.id;
    const std::vector<std::uint32_t>& op_deps = deps_of(i);
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
    out.deps.insert(out.deps.end(), op_deps.begin(), op_deps.end());
    out.dep_offsets.push_back(static_cast<std::uint32_t>(out.deps.size()));
  }
  return out;
}

namespace {

/// Feeds `put` every value that identifies r's program (ops, dependencies, fixed durations,
/// static memory, template name), in order: what template sharing compares.
template <class Put>
void program_values(const RawRank& r, Put put) {
  put(r.static_memory);
  for (const char ch : r.template_name) put(ch);
  put(r.template_name.size());
  put(r.ops.size());
  for (std::size_t k = 0; k < r.ops.size(); ++k) {
    const RawOp& o = r.ops[k];
    const Op& op = o.op;
    for (const std::int64_t v : op_int_array(op)) put(v);
    put(op.flops);
    put(op.mem_bytes);
    put(op.comm_bytes);
    put(o.duration_ns);
    put(r.deps_of(k).size());
    for (const auto d : r.deps_of(k)) put(d);
  }
}

}  // namespace

std::uint64_t program_hash(const RawRank& r) {
  // A word at a time (equal hashes are compared in full by same_program).
  std::uint64_t h = 1469598103934665603ull;
  program_values(r, [&](const auto& v) {
    static_assert(sizeof(v) <= sizeof(std::uint64_t));
    std::uint64_t w = 0;
    std::memcpy(&w, &v, sizeof(v));
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  });
  return h;
}

bool same_program(const RawRank& a, const RawRank& b) {
  if (a.ops.size() != b.ops.size() || a.template_name != b.template_name ||
      a.static_memory != b.static_memory || a.dep_offsets != b.dep_offsets || a.deps != b.deps)
    return false;
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    const RawOp& x = a.ops[i];
    const RawOp& y = b.ops[i];
    if (op_int_array(x.op) != op_int_array(y.op) || x.op.flops != y.op.flops ||
        x.op.mem_bytes != y.op.mem_bytes || x.op.comm_bytes != y.op.comm_bytes ||
        x.duration_ns != y.duration_ns)
      return false;
  }
  return true;
}

std::int64_t ProgramIndex::find_or_add(const std::vector<RawRank>& ranks, const RawRank& r,
                                       std::size_t self) {
  std::vector<std::size_t>& same_hash = by_hash[program_hash(r)];
  for (const std::size_t k : same_hash)
    if (same_program(ranks[k], r)) return static_cast<std::int64_t>(k);
  same_hash.push_back(self);
  return -1;
}

}  // namespace scalescope::io::detail
