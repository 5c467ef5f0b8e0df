#include "graph/sliced_graph.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.hpp"

namespace scalescope::graph {

std::uint32_t RankProgram::add(const Op& op, std::initializer_list<std::uint32_t> op_deps) {
  return add(op, std::vector<std::uint32_t>(op_deps));
}

std::uint32_t RankProgram::add(const Op& op, const std::vector<std::uint32_t>& op_deps) {
  auto index = static_cast<std::uint32_t>(ops.size());
  ops.push_back(op);
  for (std::uint32_t d : op_deps) {
    SCALESCOPE_EXPECTS(d < index);
    deps.push_back(d);
  }
  dep_offsets.push_back(static_cast<std::uint32_t>(deps.size()));
  return index;
}

void RankProgram::finalize() {
  for (auto& s : stream_ops) s.clear();
  std::array<std::uint32_t, kNumRoles> coll{}, sends{}, recvs{};
  for (std::uint32_t i = 0; i < size(); ++i) {
    Op& op = ops[i];
    stream_ops[static_cast<int>(op.stream)].push_back(i);
    const bool comm_stream = op.stream != Stream::Compute;
    if (comm_stream != is_communication(op.kind))
      throw_input("template '{}': op {} ({}) has kind {} on stream {}", name, i, op_name(op.name),
                  op_kind_name(op.kind), stream_name(op.stream));
    if (is_collective(op.kind)) {
      if (op.role == CommRole::None || op.role2 != CommRole::None ||
          stream_of(op.role) != op.stream)
        throw_input("template '{}': collective op {} has an invalid role/stream", name, i);
      op.instance = coll[static_cast<int>(op.role)]++;
    } else if (op.kind == OpKind::SendRecv) {
      if (op.role == CommRole::None && op.role2 == CommRole::None)
        throw_input("template '{}': send/recv op {} has neither a send nor a receive", name, i);
      for (CommRole r : {op.role, op.role2})
        if (r != CommRole::None && r != CommRole::PpPrev && r != CommRole::PpNext)
          throw_input("template '{}': send/recv op {} uses a non-pipeline role", name, i);
      // One op talks to one neighbour, on that pair's stream (graph/op.hpp).
      if (op.role != CommRole::None && op.role2 != CommRole::None && op.role != op.role2)
        throw_input("template '{}': send/recv op {} sends to one stage and receives from another",
                    name, i);
      const CommRole pair = op.role != CommRole::None ? op.role : op.role2;
      if (stream_of(pair) != op.stream)
        throw_input("template '{}': send/recv op {} is on stream {}, its pair's is {}", name, i,
                    stream_name(op.stream), stream_name(stream_of(pair)));
      if (op.role != CommRole::None) op.instance = sends[static_cast<int>(op.role)]++;
      if (op.role2 != CommRole::None) op.instance2 = recvs[static_cast<int>(op.role2)]++;
    } else if (op.role != CommRole::None || op.role2 != CommRole::None) {
      throw_input("template '{}': compute op {} has a communicator role", name, i);
    }
  }
  if (dep_offsets.size() != ops.size() + 1 || dep_offsets.back() != deps.size())
    throw_input("template '{}': dependency offsets do not match the ops", name);
  for (std::uint32_t i = 0; i < size(); ++i) {
    if (dep_offsets[i] > dep_offsets[i + 1])
      throw_input("template '{}': dependency offsets decrease at op {}", name, i);
    for (auto* d = deps_begin(i); d != deps_end(i); ++d)
      if (*d >= i)
        throw_input("template '{}': op {} depends on op {} which does not precede it (cycle)", name,
                    i, *d);
  }
}

std::string_view comm_kind_name(CommKind k) {
  switch (k) {
    case CommKind::TpGroup:
      return "tp";
    case CommKind::DpGroup:
      return "dp";
    case CommKind::PpPair:
      return "pp";
    case CommKind::EmbeddingGroup:
      return "embedding";
    case CommKind::CpGroup:
      return "cp";
    case CommKind::DpReplicateGroup:
      return "dp_replicate";
    case CommKind::EpGroup:
      return "ep";
    case CommKind::EtpGroup:
      return "etp";
    case CommKind::EdpGroup:
      return "edp";
    case CommKind::TpEpGroup:
      return "tp_ep";
  }
  return "?";
}

std::uint32_t CommTable::add(CommKind k, const std::vector<std::uint32_t>& ranks) {
  auto id = size();
  kind.push_back(k);
  members.insert(members.end(), ranks.begin(), ranks.end());
  offsets.push_back(static_cast<std::uint32_t>(members.size()));
  return id;
}

bool SlicedGraph::fully_loaded() const {
  return std::find(loaded.begin(), loaded.end(), false) == loaded.end();
}

std::uint32_t SlicedGraph::member_index(std::uint32_t c, std::uint32_t rank) const {
  auto* b = comms.members_begin(c);
  auto* e = comms.members_end(c);
  auto* it = std::lower_bound(b, e, rank);
  SCALESCOPE_EXPECTS(it != e && *it == rank);
  return static_cast<std::uint32_t>(it - b);
}

namespace {

/// (kind, bytes) sequence of the collectives, sends or receives of one role in a template.
using Signature = std::vector<std::pair<OpKind, double>>;
enum class Part { Collective, Send, Recv };

Signature signature(const RankProgram& p, CommRole role, Part part) {
  Signature s;
  for (const Op& op : p.ops) {
    if (part == Part::Collective && is_collective(op.kind) && op.role == role)
      s.emplace_back(op.kind, op.comm_bytes);
    if (part == Part::Send && op.kind == OpKind::SendRecv && op.role == role)
      s.emplace_back(op.kind, op.comm_bytes);
    if (part == Part::Recv && op.kind == OpKind::SendRecv && op.role2 == role)
      s.emplace_back(op.kind, op.comm_bytes);
  }
  return s;
}

}  // namespace

CommRole role_of(CommKind k) {
  switch (k) {
    case CommKind::TpGroup:
      return CommRole::Tp;
    case CommKind::DpGroup:
      return CommRole::Dp;
    case CommKind::EmbeddingGroup:
      return CommRole::Embedding;
    case CommKind::PpPair:
      return CommRole::PpNext;
    case CommKind::CpGroup:
      return CommRole::Cp;
    case CommKind::DpReplicateGroup:
      return CommRole::DpReplicate;
    case CommKind::EpGroup:
      return CommRole::Ep;
    case CommKind::EtpGroup:
      return CommRole::Etp;
    case CommKind::EdpGroup:
      return CommRole::Edp;
    case CommKind::TpEpGroup:
      return CommRole::TpEp;
  }
  return CommRole::None;
}

void validate(const SlicedGraph& g) {
  const auto world = g.world_size;
  if (world == 0) throw_input("graph: world size is 0");
  if (g.rank_class.size() != world)
    throw_input("graph: rank → class map has {} entries for world size {}", g.rank_class.size(),
                world);
  if (g.rank_roles.size() != static_cast<std::size_t>(world) * kNumRoles)
    throw_input("graph: rank → role map has {} entries, expected {}", g.rank_roles.size(),
                static_cast<std::size_t>(world) * kNumRoles);
  if (!g.loaded.empty() && g.loaded.size() != g.templates.size())
    throw_input("graph: {} loaded flags for {} templates", g.loaded.size(), g.templates.size());
  if (g.comms.offsets.size() != g.comms.kind.size() + 1 ||
      g.comms.offsets.back() != g.comms.members.size())
    throw_input("graph: communicator table offsets are inconsistent");
  for (std::uint32_t c = 0; c < g.comms.size(); ++c) {
    if (g.comms.offsets[c] > g.comms.offsets[c + 1])
      throw_input("graph: communicator {} has decreasing offsets", c);
    for (auto* m = g.comms.members_begin(c); m != g.comms.members_end(c); ++m) {
      if (*m >= world) throw_input("graph: communicator {} names rank {} ≥ world size", c, *m);
      if (m + 1 != g.comms.members_end(c) && m[1] <= m[0])
        throw_input("graph: communicator {} members are not sorted and unique", c);
    }
    if (g.comms.kind[c] == CommKind::PpPair && g.comms.num_members(c) != 2)
      throw_input("graph: pipeline communicator {} has {} members, expected 2", c,
                  g.comms.num_members(c));
  }

  // Roles each template uses (none known for a template that is not loaded).
  std::vector<std::array<bool, kNumRoles>> uses(g.templates.size());
  for (std::size_t t = 0; t < g.templates.size(); ++t) {
    uses[t].fill(false);
    if (!g.is_loaded(t)) continue;
    for (const Op& op : g.templates[t].ops) {
      uses[t][static_cast<int>(op.role)] = true;
      uses[t][static_cast<int>(op.role2)] = true;
    }
  }
  for (std::uint32_t r = 0; r < world; ++r) {
    auto cls = g.rank_class[r];
    if (cls >= g.templates.size())
      throw_input("graph: rank {} has class {} but there are {} templates", r, cls,
                  g.templates.size());
    for (int role = 1; role < kNumRoles; ++role) {
      auto c = g.rank_roles[static_cast<std::size_t>(r) * kNumRoles + role];
      if (c == kNoComm) {
        if (uses[cls][role])
          throw_input(
              "graph: rank {} (template '{}') communicates on role {} but has no "
              "communicator for it",
              r, g.templates[cls].name, role);
        continue;
      }
      if (static_cast<std::uint32_t>(c) >= g.comms.size())
        throw_input("graph: rank {} role {} names communicator {} which does not exist", r, role,
                    c);
      auto* b = g.comms.members_begin(static_cast<std::uint32_t>(c));
      auto* e = g.comms.members_end(static_cast<std::uint32_t>(c));
      if (!std::binary_search(b, e, r))
        throw_input("graph: rank {} is not a member of its role-{} communicator {}", r, role, c);
    }
  }

  // Collectives: every member must issue the same (kind, bytes) sequence. P2P: the upstream
  // rank's sends to its next stage must match the downstream rank's receives from its previous
  // stage, and vice versa. Signatures are compared per pair of classes, cached.
  std::map<std::tuple<std::uint32_t, int, int>, Signature> cache;
  auto sig = [&](std::uint32_t cls, CommRole role, Part part) -> const Signature& {
    auto key = std::make_tuple(cls, static_cast<int>(role), static_cast<int>(part));
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, signature(g.templates[cls], role, part)).first;
    return it->second;
  };
  for (std::uint32_t c = 0; c < g.comms.size(); ++c) {
    auto kind = g.comms.kind[c];
    auto* b = g.comms.members_begin(c);
    auto* e = g.comms.members_end(c);
    if (b == e) throw_input("graph: communicator {} has no members", c);
    if (kind == CommKind::PpPair) {
      std::uint32_t up = b[0], down = b[1];
      if (g.comm_of(up, CommRole::PpNext) != static_cast<std::int32_t>(c)) std::swap(up, down);
      if (g.comm_of(up, CommRole::PpNext) != static_cast<std::int32_t>(c) ||
          g.comm_of(down, CommRole::PpPrev) != static_cast<std::int32_t>(c))
        throw_input("graph: pipeline communicator {} is not (previous, next) of its members", c);
      if (!g.is_loaded(g.rank_class[up]) || !g.is_loaded(g.rank_class[down])) continue;
      if (sig(g.rank_class[up], CommRole::PpNext, Part::Send) !=
          sig(g.rank_class[down], CommRole::PpPrev, Part::Recv))
        throw_input(
            "graph: unmatched point-to-point: rank {} sends to rank {} do not match its "
            "receives",
            up, down);
      if (sig(g.rank_class[down], CommRole::PpPrev, Part::Send) !=
          sig(g.rank_class[up], CommRole::PpNext, Part::Recv))
        throw_input(
            "graph: unmatched point-to-point: rank {} sends to rank {} do not match its "
            "receives",
            down, up);
      continue;
    }
    CommRole role = role_of(kind);
    if (std::any_of(b, e, [&](std::uint32_t m) { return !g.is_loaded(g.rank_class[m]); })) continue;
    const Signature& first = sig(g.rank_class[*b], role, Part::Collective);
    for (auto* m = b + 1; m != e; ++m)
      if (g.rank_class[*m] != g.rank_class[*b] &&
          sig(g.rank_class[*m], role, Part::Collective) != first)
        throw_input(
            "graph: inconsistent collectives on {} communicator {}: ranks {} and {} "
            "issue different sequences",
            comm_kind_name(kind), c, *b, *m);
  }
}

}  // namespace scalescope::graph
