#include "graph/expand.hpp"

#include <limits>

namespace scalescope::graph {

SlicedGraph expand_replicas(const SlicedGraph& g, std::uint32_t replicas) {
  SCALESCOPE_EXPECTS(replicas >= 1);
  const std::uint64_t world = static_cast<std::uint64_t>(g.world_size) * replicas;
  if (world > std::numeric_limits<std::uint32_t>::max() / kNumRoles)
    throw_input("--expand dp={}: {} ranks × {} replicas is more than scalescope addresses",
                replicas, g.world_size, replicas);
  SlicedGraph out;
  out.world_size = static_cast<std::uint32_t>(world);
  out.config_text = g.config_text;
  out.templates = g.templates;
  out.loaded = g.loaded;
  out.rank_class.reserve(out.world_size);
  for (std::uint32_t d = 0; d < replicas; ++d)
    out.rank_class.insert(out.rank_class.end(), g.rank_class.begin(), g.rank_class.end());
  // Communicators: replica-major copies of the multi-member ones; one group across the replicas
  // for each single-member one, added with replica 0.
  const std::uint32_t comms = g.comms.size();
  std::vector<std::int32_t> copy(static_cast<std::size_t>(comms) * replicas, kNoComm);
  for (std::uint32_t d = 0; d < replicas; ++d)
    for (std::uint32_t c = 0; c < comms; ++c) {
      const std::uint32_t n = g.comms.num_members(c);
      const std::uint32_t* m = g.comms.members_begin(c);
      std::int32_t id = kNoComm;
      if (n == 1) {
        if (d == 0) {
          std::vector<std::uint32_t> across(replicas);
          for (std::uint32_t k = 0; k < replicas; ++k) across[k] = k * g.world_size + m[0];
          id = static_cast<std::int32_t>(out.comms.add(g.comms.kind[c], across));
        } else {
          id = copy[c];  // the group replica 0 added
        }
      } else {
        std::vector<std::uint32_t> shifted(m, m + n);
        for (std::uint32_t& r : shifted) r += d * g.world_size;
        id = static_cast<std::int32_t>(out.comms.add(g.comms.kind[c], shifted));
      }
      copy[static_cast<std::size_t>(d) * comms + c] = id;
    }
  out.rank_roles.resize(static_cast<std::size_t>(out.world_size) * kNumRoles, kNoComm);
  for (std::uint32_t d = 0; d < replicas; ++d)
    for (std::uint32_t r = 0; r < g.world_size; ++r)
      for (int role = 0; role < kNumRoles; ++role) {
        const std::int32_t c = g.comm_of(r, static_cast<CommRole>(role));
        if (c == kNoComm) continue;
        out.rank_roles[(static_cast<std::size_t>(d) * g.world_size + r) * kNumRoles +
                       static_cast<std::size_t>(role)] =
            copy[static_cast<std::size_t>(d) * comms + static_cast<std::uint32_t>(c)];
      }
  validate(out);
  return out;
}

}  // namespace scalescope::graph

namespace scalescope::graph {

Op world_collective(OpKind kind, double bytes) {
  SCALESCOPE_EXPECTS(is_collective(kind) && bytes >= 0);
  const bool a2a = kind == OpKind::AllToAll;
  Op op;
  op.kind = kind;
  op.role = role_of(a2a ? CommKind::EpGroup : CommKind::DpGroup);
  op.stream = stream_of(op.role);
  op.phase = Phase::Other;
  op.name = a2a                             ? OpName::EpDispatch
            : kind == OpKind::AllGather     ? OpName::DpAllGather
            : kind == OpKind::ReduceScatter ? OpName::DpReduceScatter
                                            : OpName::DpAllReduce;
  op.comm_bytes = bytes;
  return op;
}

SlicedGraph replicated_world(RankProgram program, std::uint32_t ranks) {
  SCALESCOPE_EXPECTS(ranks >= 1);
  std::vector<std::uint32_t> all(ranks);
  for (std::uint32_t r = 0; r < ranks; ++r) all[r] = r;
  std::map<CommRole, std::vector<std::vector<std::uint32_t>>> groups;
  for (const Op& op : program.ops)
    if (is_communication(op.kind)) groups[op.role] = {all};
  return replicated_world(std::move(program), ranks, groups);
}

CommKind comm_kind_of(CommRole role) {
  for (const CommKind k : {CommKind::TpGroup, CommKind::DpGroup, CommKind::EmbeddingGroup,
                           CommKind::CpGroup, CommKind::DpReplicateGroup, CommKind::EpGroup,
                           CommKind::EtpGroup, CommKind::EdpGroup, CommKind::TpEpGroup})
    if (role_of(k) == role) return k;
  throw ContractError(
      fmt::format("comm_kind_of: role {} is not a collective's", static_cast<int>(role)));
}

SlicedGraph replicated_world(
    RankProgram program, std::uint32_t ranks,
    const std::map<CommRole, std::vector<std::vector<std::uint32_t>>>& groups) {
  SCALESCOPE_EXPECTS(ranks >= 1);
  program.finalize();
  SlicedGraph g;
  g.world_size = ranks;
  g.rank_class.assign(ranks, 0);
  g.rank_roles.assign(static_cast<std::size_t>(ranks) * kNumRoles, kNoComm);
  for (const auto& [role, list] : groups) {
    const CommKind kind = comm_kind_of(role);
    for (const std::vector<std::uint32_t>& members : list) {
      const auto c = static_cast<std::int32_t>(g.comms.add(kind, members));
      for (const std::uint32_t r : members) {
        SCALESCOPE_EXPECTS(r < ranks);
        g.rank_roles[static_cast<std::size_t>(r) * kNumRoles + static_cast<std::size_t>(role)] = c;
      }
    }
  }
  g.templates.push_back(std::move(program));
  validate(g);
  return g;
}

std::vector<std::vector<std::uint32_t>> mesh_groups(const std::vector<std::uint32_t>& group,
                                                    std::uint32_t ranks) {
  if (group.empty()) return {};
  const std::uint64_t n = group.size();
  const std::uint64_t s = n > 1 ? group[1] - group[0] : 1;
  if (s == 0) return {};
  for (std::uint64_t k = 1; k < n; ++k)
    if (group[k] != group[0] + k * s) return {};
  if (ranks % (n * s) != 0 || (group[0] % (n * s)) >= s) return {};
  std::vector<std::vector<std::uint32_t>> out;
  for (std::uint64_t b = 0; b < ranks / (n * s); ++b)
    for (std::uint64_t o = 0; o < s; ++o) {
      std::vector<std::uint32_t> members(n);
      for (std::uint64_t k = 0; k < n; ++k)
        members[k] = static_cast<std::uint32_t>(b * n * s + o + k * s);
      out.push_back(std::move(members));
    }
  return out;
}

SlicedGraph collective_microbenchmark(OpKind kind, std::uint32_t ranks, double bytes) {
  RankProgram p;
  p.name = "microbenchmark";
  p.add(world_collective(kind, bytes), {});
  return replicated_world(std::move(p), ranks);
}

}  // namespace scalescope::graph
