// The fabric's links and routes (docs/network.md "Topology").
#include "cost/topology.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/hash.hpp"

namespace scalescope::cost {
namespace {

std::uint32_t to_u32(std::int64_t v, const char* key) {
  if (v < 1 || v > (std::int64_t{1} << 30)) throw_input("cluster.topology.{} must be >= 1", key);
  return static_cast<std::uint32_t>(v);
}

}  // namespace

std::string_view link_level_name(LinkLevel l) {
  switch (l) {
    case LinkLevel::NicUp:
      return "nic_up";
    case LinkLevel::NicDown:
      return "nic_down";
    case LinkLevel::LeafUp:
      return "leaf_up";
    case LinkLevel::SpineDown:
      return "spine_down";
    case LinkLevel::SpineUp:
      return "spine_up";
    case LinkLevel::CoreDown:
      return "core_down";
  }
  return "?";
}

Fabric::Fabric(const ClusterSpec& c, const TopologySpec& t, double nic_capacity_Bps)
    : gpus_per_node_(to_u32(c.gpus_per_node, "gpus_per_node")),
      nics_per_node_(to_u32(c.nics_per_node, "nics_per_node")),
      rail_optimized_(t.rail_optimized),
      dest_mod_(t.routing == TopologySpec::Routing::DestMod),
      spine_latency_us_(t.spine_latency_us),
      core_latency_us_(t.core_latency_us) {
  if (!(nic_capacity_Bps > 0)) throw_input("cluster.nic_bandwidth_Gbps must be > 0");
  if (!(t.leaf_oversubscription >= 1) || !(t.spine_oversubscription >= 1))
    throw_input("cluster.topology: leaf_oversubscription and spine_oversubscription must be >= 1");
  if (!(t.spine_latency_us >= 0) || !(t.core_latency_us >= 0))
    throw_input("cluster.topology: spine_latency_us and core_latency_us must be >= 0");
  const std::int64_t gpus = std::max<std::int64_t>(c.num_gpus, c.gpus_per_node);
  nodes_ = to_u32((gpus + c.gpus_per_node - 1) / c.gpus_per_node, "num_gpus");
  nodes_per_leaf_ = to_u32(t.nodes_per_leaf, "nodes_per_leaf");
  const std::uint32_t groups = (nodes_ + nodes_per_leaf_ - 1) / nodes_per_leaf_;  // leaf groups
  const std::uint32_t rails = rail_optimized_ ? nics_per_node_ : 1;
  leaves_ = groups * rails;
  leaves_per_pod_ = t.leaves_per_pod == 0 ? leaves_ : to_u32(t.leaves_per_pod, "leaves_per_pod");
  if (rail_optimized_ && leaves_per_pod_ % rails != 0 && leaves_per_pod_ < leaves_)
    throw_input(
        "cluster.topology.leaves_per_pod ({}) must be a multiple of the rails ({} NICs per node) "
        "in a rail-optimised fabric",
        leaves_per_pod_, rails);
  pods_ = (leaves_ + leaves_per_pod_ - 1) / leaves_per_pod_;
  spines_ = to_u32(t.spines_per_pod, "spines_per_pod");
  cores_ = to_u32(t.cores_per_plane, "cores_per_plane");

  const std::uint32_t nics = nodes_ * nics_per_node_;
  const std::uint32_t leaf_links = leaves_ * spines_;
  const std::uint32_t spine_links = pods_ > 1 ? pods_ * spines_ * cores_ : 0;
  const std::uint32_t sizes[6] = {nics, nics, leaf_links, leaf_links, spine_links, spine_links};
  for (int i = 0; i < 6; ++i) base_[i + 1] = base_[i] + sizes[i];
  capacity_.assign(base_[6], nic_capacity_Bps);
  // A leaf's NIC-facing capacity over its oversubscription, spread over its spine uplinks.
  const double nics_per_leaf =
      rail_optimized_ ? nodes_per_leaf_ : double(nodes_per_leaf_) * nics_per_node_;
  const double leaf_up = nics_per_leaf * nic_capacity_Bps / t.leaf_oversubscription / spines_;
  std::fill(capacity_.begin() + base_[2], capacity_.begin() + base_[4], leaf_up);
  // A spine's leaf-facing capacity (one link to each leaf of its pod) over its oversubscription,
  // spread over the core switches of its plane.
  const double spine_up = leaves_per_pod_ * leaf_up / t.spine_oversubscription / cores_;
  std::fill(capacity_.begin() + base_[4], capacity_.end(), spine_up);
}

LinkLevel Fabric::level(LinkId l) const {
  int i = 0;
  while (i < 5 && l >= base_[i + 1]) ++i;
  return static_cast<LinkLevel>(i);
}

std::uint32_t Fabric::nic_of_gpu(std::uint32_t gpu) const {
  const std::uint32_t node = gpu / gpus_per_node_;
  const std::uint32_t local = gpu % gpus_per_node_;
  return node * nics_per_node_ +
         static_cast<std::uint32_t>(std::uint64_t{local} * nics_per_node_ / gpus_per_node_);
}

std::uint32_t Fabric::leaf_of_nic(std::uint32_t nic) const {
  const std::uint32_t group = node_of_nic(nic) / nodes_per_leaf_;
  return rail_optimized_ ? group * nics_per_node_ + nic % nics_per_node_ : group;
}

LinkId Fabric::leaf_uplink(std::uint32_t leaf, std::uint32_t k) const {
  return base_[2] + leaf * spines_ + k;
}
LinkId Fabric::spine_down(std::uint32_t leaf, std::uint32_t k) const {
  return base_[3] + leaf * spines_ + k;
}
LinkId Fabric::spine_up(std::uint32_t pod, std::uint32_t k, std::uint32_t j) const {
  return base_[4] + (pod * spines_ + k) * cores_ + j;
}
LinkId Fabric::core_down(std::uint32_t pod, std::uint32_t k, std::uint32_t j) const {
  return base_[5] + (pod * spines_ + k) * cores_ + j;
}

double Fabric::route(std::uint32_t src, std::uint32_t dst, std::vector<LinkId>& out) const {
  SCALESCOPE_EXPECTS(src != dst && src < base_[1] && dst < base_[1]);
  out.push_back(base_[0] + src);
  const std::uint32_t ls = leaf_of_nic(src), ld = leaf_of_nic(dst);
  double extra_us = 0;
  if (ls != ld) {
    // ECMP: a hash of the endpoints. D-mod-k: the destination's port under its leaf, so the
    // destinations of one leaf spread over the spines one by one (and over the cores next).
    const std::uint32_t node = node_of_nic(dst) % nodes_per_leaf_;
    const std::uint64_t port =
        rail_optimized_ ? node : std::uint64_t{node} * nics_per_node_ + dst % nics_per_node_;
    const std::uint64_t h = dest_mod_ ? port : splitmix64((std::uint64_t{src} << 32) | dst);
    const std::uint32_t ps = pod_of_leaf(ls), pd = pod_of_leaf(ld);
    // ECMP: the hashed spine plane, or the next one whose links on this path are up.
    bool found = false;
    for (std::uint32_t step = 0; step < spines_ && !found; ++step) {
      const auto k = static_cast<std::uint32_t>((h + step) % spines_);
      if (failed(leaf_uplink(ls, k)) || failed(spine_down(ld, k))) continue;
      if (ps == pd) {
        out.push_back(leaf_uplink(ls, k));
        out.push_back(spine_down(ld, k));
        extra_us = spine_latency_us_;
        found = true;
        break;
      }
      for (std::uint32_t jstep = 0; jstep < cores_; ++jstep) {
        const auto j = static_cast<std::uint32_t>(
            ((dest_mod_ ? node_of_nic(dst) / spines_ : splitmix64(h)) + jstep) % cores_);
        if (failed(spine_up(ps, k, j)) || failed(core_down(pd, k, j))) continue;
        out.push_back(leaf_uplink(ls, k));
        out.push_back(spine_up(ps, k, j));
        out.push_back(core_down(pd, k, j));
        out.push_back(spine_down(ld, k));
        extra_us = 2 * spine_latency_us_ + core_latency_us_;
        found = true;
        break;
      }
    }
    if (!found)
      throw_input(
          "whatif: the failed links leave no path from NIC {} (node {}) to NIC {} (node {})", src,
          node_of_nic(src), dst, node_of_nic(dst));
  }
  out.push_back(base_[1] + dst);
  return extra_us * 1e3;
}

void Fabric::scale_node_nics(std::uint32_t node, double factor) {
  SCALESCOPE_EXPECTS(node < nodes_ && factor > 0);
  for (std::uint32_t i = 0; i < nics_per_node_; ++i) {
    capacity_[base_[0] + node * nics_per_node_ + i] *= factor;
    capacity_[base_[1] + node * nics_per_node_ + i] *= factor;
  }
}

void Fabric::fail_link(LinkId l) {
  SCALESCOPE_EXPECTS(l >= base_[2] && l < base_[6]);
  if (failed_.empty()) failed_.assign(capacity_.size(), false);
  failed_[l] = true;
  // Both directions: leaf up ↔ spine down of the same (leaf, spine); spine up ↔ core down.
  const std::uint32_t span = base_[3] - base_[2];
  const std::uint32_t core_span = base_[5] - base_[4];
  if (l < base_[3])
    failed_[l + span] = true;
  else if (l < base_[4])
    failed_[l - span] = true;
  else if (l < base_[5])
    failed_[l + core_span] = true;
  else
    failed_[l - core_span] = true;
}

}  // namespace scalescope::cost

namespace scalescope::cost {
namespace {

/// NCCL's binary tree (src/graph/trees.cc ncclGetBtree): the parent of `rank` among `n`, or −1.
int btree_parent(int n, int rank) {
  if (rank == 0) return -1;
  int bit = 1;
  while (bit < n && !(bit & rank)) bit <<= 1;
  int up = (rank ^ bit) | (bit << 1);
  if (up >= n) up = rank ^ bit;
  return up;
}

}  // namespace

Demand demand_of(const Fabric& f, FlowPattern pattern, const std::uint32_t* members,
                 std::uint32_t n, std::uint32_t src) {
  SCALESCOPE_EXPECTS(n >= 2 && src < n);
  std::vector<LinkId> all;
  double extra = 0;
  auto add = [&](std::uint32_t a, std::uint32_t b) {
    if (a != b) extra = std::max(extra, f.route(a, b, all));
  };
  if (pattern == FlowPattern::P2P) {
    add(f.nic_of_gpu(members[src]), f.nic_of_gpu(members[src == 0 ? 1 : 0]));
  } else if (pattern == FlowPattern::AllToAll) {
    for (std::uint32_t i = 0; i < n; ++i)
      for (std::uint32_t j = 0; j < n; ++j) {
        const std::uint32_t si = f.node_of_nic(f.nic_of_gpu(members[i]));
        const std::uint32_t dj = f.nic_of_gpu(members[j]);
        if (si != f.node_of_nic(dj)) add(f.nic_on_rail(si, dj), dj);  // PXN: the receiver's rail
      }
  } else {
    // Per node (members sorted, so nodes ascend), the NICs of its members: one channel each.
    std::vector<std::uint32_t> node_start;
    std::vector<std::uint32_t> nics;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t nic = f.nic_of_gpu(members[i]);
      if (i == 0 || f.node_of_nic(nic) != f.node_of_nic(nics.back()))
        node_start.push_back(static_cast<std::uint32_t>(nics.size()));
      nics.push_back(nic);
    }
    node_start.push_back(static_cast<std::uint32_t>(nics.size()));
    const auto nodes = static_cast<std::uint32_t>(node_start.size() - 1);
    std::uint32_t channels = 0;
    for (std::uint32_t k = 0; k < nodes; ++k)
      channels = std::max(channels, node_start[k + 1] - node_start[k]);
    // Channel c of node k: its c-th member's NIC (wrapping on a node with fewer members).
    auto nic = [&](std::uint32_t k, std::uint32_t c) {
      const std::uint32_t size = node_start[k + 1] - node_start[k];
      return nics[node_start[k] + c % size];
    };
    for (std::uint32_t c = 0; c < channels; ++c) {
      if (pattern == FlowPattern::Ring) {
        if (nodes > 1)
          for (std::uint32_t k = 0; k < nodes; ++k) add(nic(k, c), nic((k + 1) % nodes, c));
      } else {
        // Double binary tree (trees.cc ncclGetDtree): tree 0 on node indices, tree 1 on indices
        // mirrored (even count) or shifted by one (odd count); every edge carries data both ways.
        const int N = static_cast<int>(nodes);
        for (int t = 0; t < 2; ++t)
          for (int k = 0; k < N; ++k) {
            const int idx = t == 0 ? k : (N % 2 == 0 ? N - 1 - k : (k - 1 + N) % N);
            const int pidx = btree_parent(N, idx);
            if (pidx < 0) continue;
            const int p = t == 0 ? pidx : (N % 2 == 0 ? N - 1 - pidx : (pidx + 1) % N);
            add(nic(static_cast<std::uint32_t>(k), c), nic(static_cast<std::uint32_t>(p), c));
            add(nic(static_cast<std::uint32_t>(p), c), nic(static_cast<std::uint32_t>(k), c));
          }
      }
    }
  }
  std::sort(all.begin(), all.end());
  Demand d;
  d.extra_latency_ns = extra;
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    while (j < all.size() && all[j] == all[i]) ++j;
    d.links.push_back(all[i]);
    d.weight.push_back(static_cast<float>(j - i));
    i = j;
  }
  return d;
}

}  // namespace scalescope::cost
