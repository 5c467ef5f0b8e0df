#pragma once
/// The fabric between scale-up domains (docs/config.md "cluster.topology", docs/network.md): NICs,
/// leaf / spine / core switches of a folded Clos (fat-tree) with per-level oversubscription,
/// directed links with capacities, and a deterministic ECMP route between two NICs. The flow
/// model (cost/max_min.hpp, emu/fabric_lp.hpp) shares these links among concurrent transfers.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cost/cluster_spec.hpp"

namespace scalescope::cost {

enum class LinkLevel : std::uint8_t { NicUp, NicDown, LeafUp, SpineDown, SpineUp, CoreDown };
std::string_view link_level_name(LinkLevel l);

using LinkId = std::uint32_t;

/// How a transfer between scale-up domains spreads over the fabric (docs/network.md).
enum class FlowPattern : std::uint8_t {
  P2P,       ///< one flow, sender's NIC to receiver's NIC
  Ring,      ///< NCCL's ring: node i to node i+1, one channel per member of a node, on its rail
  Tree,      ///< NCCL's double binary tree over the nodes, both trees, both directions
  AllToAll,  ///< every member to every member on another node, through the NIC on the
             ///< receiver's rail (PXN)
};

/// An aggregated variable's use of the links: `weight[i]` of its flows cross `links[i]`.
struct Demand {
  std::vector<LinkId> links;  ///< sorted, distinct
  std::vector<float> weight;
  double extra_latency_ns = 0;  ///< the slowest route's switches above the leaves
};

class Fabric;
/// The links a transfer among `members` (sorted global ranks) uses under `pattern`; for P2P,
/// members[src] sends to the other one.
Demand demand_of(const Fabric& f, FlowPattern pattern, const std::uint32_t* members,
                 std::uint32_t n, std::uint32_t src);

/// The links of one cluster's fabric and the route between any two NICs. Immutable once built
/// (what-ifs are applied through the mutators before the run starts).
class Fabric {
 public:
  /// Throws InputError naming the `cluster.topology` key that is impossible for this cluster.
  Fabric(const ClusterSpec& cluster, const TopologySpec& topology, double nic_capacity_Bps);

  std::uint32_t nodes() const { return nodes_; }
  std::uint32_t nics_per_node() const { return nics_per_node_; }
  std::uint32_t num_links() const { return static_cast<std::uint32_t>(capacity_.size()); }
  double capacity(LinkId l) const { return capacity_[l]; }
  LinkLevel level(LinkId l) const;
  /// The NIC a GPU sends through: its node's NIC with index local · nics / gpus_per_node.
  std::uint32_t nic_of_gpu(std::uint32_t gpu) const;
  /// The NIC of `node` on the same rail as NIC `nic`.
  std::uint32_t nic_on_rail(std::uint32_t node, std::uint32_t nic) const {
    return node * nics_per_node_ + nic % nics_per_node_;
  }
  std::uint32_t node_of_nic(std::uint32_t nic) const { return nic / nics_per_node_; }

  /// The links from NIC `src` to NIC `dst` (src ≠ dst), in order, appended to `out`; ECMP picks
  /// the spine (and core) by a hash of the endpoints, skipping failed links. Returns the extra
  /// latency of the switches above the leaves, in ns. Throws InputError when failed links leave
  /// no path.
  double route(std::uint32_t src, std::uint32_t dst, std::vector<LinkId>& out) const;

  /// What-ifs: scales the capacity of both directions of every NIC of `node`; marks a
  /// leaf–spine or spine–core link (both directions) failed; adds latency to a level.
  void scale_node_nics(std::uint32_t node, double factor);
  void fail_link(LinkId l);
  /// The link ids of leaf `leaf`'s uplink to spine `k` of its pod (for what-ifs and tests).
  LinkId leaf_uplink(std::uint32_t leaf, std::uint32_t k) const;
  std::uint32_t leaf_of_nic(std::uint32_t nic) const;
  std::uint32_t num_leaves() const { return leaves_; }
  std::uint32_t spines_per_pod() const { return spines_; }
  void add_spine_latency_us(double us) { spine_latency_us_ += us; }
  void add_core_latency_us(double us) { core_latency_us_ += us; }

 private:
  std::uint32_t pod_of_leaf(std::uint32_t leaf) const { return leaf / leaves_per_pod_; }
  LinkId spine_down(std::uint32_t leaf, std::uint32_t k) const;
  LinkId spine_up(std::uint32_t pod, std::uint32_t k, std::uint32_t j) const;
  LinkId core_down(std::uint32_t pod, std::uint32_t k, std::uint32_t j) const;
  bool failed(LinkId l) const { return !failed_.empty() && failed_[l]; }

  std::uint32_t gpus_per_node_ = 8, nics_per_node_ = 8, nodes_ = 1, leaves_ = 1;
  std::uint32_t nodes_per_leaf_ = 1, leaves_per_pod_ = 1, pods_ = 1, spines_ = 1, cores_ = 1;
  bool rail_optimized_ = true;
  bool dest_mod_ = false;  ///< TopologySpec::Routing::DestMod
  double spine_latency_us_ = 0, core_latency_us_ = 0;
  // Link id ranges: NIC up, NIC down, leaf up, spine down, spine up, core down.
  std::uint32_t base_[7] = {};
  std::vector<double> capacity_;  ///< bytes/s, per direction
  std::vector<bool> failed_;
};

}  // namespace scalescope::cost
