#include "emu/replicas.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"

namespace scalescope::emu {

namespace {

bool crosses_replicas(graph::CommKind k) {
  return k == graph::CommKind::DpGroup || k == graph::CommKind::DpReplicateGroup ||
         k == graph::CommKind::EdpGroup;
}
bool inside_replica(graph::CommKind k) {
  return !crosses_replicas(k);
}

bool same_shape(const cost::CommShape& a, const cost::CommShape& b) {
  return a.ranks == b.ranks && a.nodes == b.nodes && a.ranks_per_node == b.ranks_per_node;
}

}  // namespace

RankComponents rank_components(const graph::SlicedGraph& g, bool (*joins)(graph::CommKind)) {
  const std::uint32_t world = g.world_size;
  std::vector<std::uint32_t> parent(world);
  std::iota(parent.begin(), parent.end(), 0u);
  auto find = [&](std::uint32_t r) {
    while (parent[r] != r) r = parent[r] = parent[parent[r]];
    return r;
  };
  for (std::uint32_t c = 0; c < g.comms.size(); ++c) {
    if (!joins(g.comms.kind[c])) continue;
    const std::uint32_t first = find(*g.comms.members_begin(c));
    for (const std::uint32_t* m = g.comms.members_begin(c); m != g.comms.members_end(c); ++m)
      parent[find(*m)] = first;
  }
  RankComponents out;
  std::vector<std::uint32_t> of_root(world, UINT32_MAX);
  out.of_rank.resize(world);
  for (std::uint32_t r = 0; r < world; ++r) {
    const std::uint32_t root = find(r);
    if (of_root[root] == UINT32_MAX) of_root[root] = out.count++;
    out.of_rank[r] = of_root[root];
  }
  return out;
}

ReplicaMap representative_replicas(const graph::SlicedGraph& g, const Costs& costs,
                                   const EmulationOptions& options) {
  return representative_replicas(
      g, costs, !options.rank_durations.empty() || !options.dedicated_ranks.empty());
}

ReplicaMap representative_replicas(const graph::SlicedGraph& g, const Costs& costs,
                                   bool per_rank_durations) {
  constexpr const char* kWhy = "run.replicas: representative";
  if (costs.fabric != nullptr)
    throw_input(
        "{}: the flow network (network.model: flow) shares links between replicas, so "
        "they do not replay alike; use run.replicas: all",
        kWhy);
  if (per_rank_durations)
    throw_input(
        "{}: ranks with their own durations (sandbox ranks, slow_gpu or slow_dataloader "
        "what-ifs) make replicas differ; use run.replicas: all",
        kWhy);
  const std::uint32_t world = g.world_size;
  const std::uint32_t comms = g.comms.size();
  // Replicas (components under every communicator that does not cross replicas), numbered by
  // their lowest rank; each rank's position in its replica (ranks ascend).
  const RankComponents components = rank_components(g, inside_replica);
  const std::vector<std::uint32_t>& replica = components.of_rank;
  std::vector<std::uint32_t> sizes(components.count, 0), position(world);
  for (std::uint32_t r = 0; r < world; ++r) position[r] = sizes[replica[r]]++;
  ReplicaMap map;
  map.replicas = components.count;
  for (std::uint32_t k = 1; k < map.replicas; ++k)
    if (sizes[k] != sizes[0])
      throw_input("{}: replica {} has {} ranks, replica 0 has {}", kWhy, k, sizes[k], sizes[0]);
  std::vector<std::uint32_t> first_replica;  // position → rank of replica 0
  first_replica.reserve(world > 0 ? sizes[0] : 0);
  for (std::uint32_t r = 0; r < world; ++r)
    if (replica[r] == 0) first_replica.push_back(r);
  map.rep.resize(world);
  for (std::uint32_t r = 0; r < world; ++r) map.rep[r] = first_replica[position[r]];

  // Per communicator across replicas: the counterparts of its members, sorted, without repeats.
  OpLists cross;  // CSR, as the op lists are
  for (std::uint32_t c = 0; c < comms; ++c) {
    const auto from = static_cast<std::ptrdiff_t>(cross.items.size());
    if (crosses_replicas(g.comms.kind[c]))
      for (const std::uint32_t* m = g.comms.members_begin(c); m != g.comms.members_end(c); ++m)
        cross.items.push_back(map.rep[*m]);
    std::sort(cross.items.begin() + from, cross.items.end());
    cross.items.erase(std::unique(cross.items.begin() + from, cross.items.end()),
                      cross.items.end());
    cross.offsets.push_back(static_cast<std::uint32_t>(cross.items.size()));
  }

  // Every rank against its counterpart: template, and each role's communicator.
  std::vector<std::uint32_t> mapped;
  for (std::uint32_t r = 0; r < world; ++r) {
    const std::uint32_t p = map.rep[r];
    if (r == p) continue;
    if (g.rank_class[r] != g.rank_class[p])
      throw_input("{}: rank {} runs template {} but its counterpart rank {} in replica 0 runs {}",
                  kWhy, r, g.rank_class[r], p, g.rank_class[p]);
    for (int role = 1; role < graph::kNumRoles; ++role) {
      const std::int32_t c = g.comm_of(r, static_cast<graph::CommRole>(role));
      const std::int32_t c0 = g.comm_of(p, static_cast<graph::CommRole>(role));
      if ((c == graph::kNoComm) != (c0 == graph::kNoComm))
        throw_input("{}: rank {} and its counterpart rank {} differ in their communicators", kWhy,
                    r, p);
      if (c == graph::kNoComm) continue;
      const auto cu = static_cast<std::uint32_t>(c), c0u = static_cast<std::uint32_t>(c0);
      if (crosses_replicas(g.comms.kind[cu])) {
        // Its members arrive when their counterparts do: the same counterparts, the same
        // network shape, the same completion.
        if (c != c0 &&
            (g.comms.kind[cu] != g.comms.kind[c0u] ||
             !std::equal(cross.begin(cu), cross.end(cu), cross.begin(c0u), cross.end(c0u)) ||
             !same_shape(costs.shape(g.comms.members_begin(cu), g.comms.members_end(cu)),
                         costs.shape(g.comms.members_begin(c0u), g.comms.members_end(c0u)))))
          throw_input("{}: the {} group of rank {} does not match its counterpart rank {}'s", kWhy,
                      graph::comm_kind_name(g.comms.kind[cu]), r, p);
        continue;
      }
      if (g.comms.kind[cu] != g.comms.kind[c0u] ||
          g.comms.num_members(cu) != g.comms.num_members(c0u))
        throw_input("{}: communicator {} of rank {} does not match communicator {} of rank {}",
                    kWhy, cu, r, c0u, p);
      mapped.clear();
      for (const std::uint32_t* m = g.comms.members_begin(cu); m != g.comms.members_end(cu); ++m)
        mapped.push_back(map.rep[*m]);
      if (!std::equal(mapped.begin(), mapped.end(), g.comms.members_begin(c0u)))
        throw_input(
            "{}: communicator {} of rank {} does not map member for member onto "
            "communicator {} of rank {}",
            kWhy, cu, r, c0u, p);
      if (!same_shape(costs.shape(g.comms.members_begin(cu), g.comms.members_end(cu)),
                      costs.shape(g.comms.members_begin(c0u), g.comms.members_end(c0u))))
        throw_input(
            "{}: communicator {} of rank {} spans the nodes differently from communicator "
            "{} of rank {}",
            kWhy, cu, r, c0u, p);
    }
  }
  // A replayed communicator across replicas waits for its members in replica 0 only: they must
  // be the counterparts of all its members (whose arrivals then coincide with theirs).
  map.active.assign(world + comms, 0);
  for (std::uint32_t r = 0; r < world; ++r)
    if (replica[r] == 0) {
      map.active[r] = 1;
      ++map.active_ranks;
    }
  for (std::uint32_t c = 0; c < comms; ++c) {
    std::uint32_t in_first = 0;
    for (const std::uint32_t* m = g.comms.members_begin(c); m != g.comms.members_end(c); ++m)
      in_first += replica[*m] == 0;
    map.active[world + c] = in_first > 0;
    if (in_first > 0 && crosses_replicas(g.comms.kind[c])) {
      bool same = cross.end(c) - cross.begin(c) == in_first;
      for (const std::uint32_t* m = cross.begin(c); same && m != cross.end(c); ++m)
        same = replica[*m] == 0 &&
               g.comm_of(*m, graph::role_of(g.comms.kind[c])) == static_cast<std::int32_t>(c);
      if (!same)
        throw_input(
            "{}: the members of {} group {} in replica 0 are not the counterparts of all "
            "its members",
            kWhy, graph::comm_kind_name(g.comms.kind[c]), c);
    }
  }
  return map;
}

}  // namespace scalescope::emu
