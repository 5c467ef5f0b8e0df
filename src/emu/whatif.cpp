#include "emu/whatif.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.hpp"
#include "core/hash.hpp"

namespace scalescope::emu {

namespace {

/// The ⌈fraction · n⌉ of 0 … n−1 with the smallest SplitMix64 hash of (seed, i), appended.
void draw_fraction(double fraction, std::uint64_t seed, std::uint32_t n,
                   std::vector<std::uint32_t>& out) {
  if (fraction <= 0 || n == 0) return;
  const auto k = std::min<std::size_t>(n, static_cast<std::size_t>(std::ceil(fraction * n)));
  std::vector<std::pair<std::uint64_t, std::uint32_t>> keyed(n);
  for (std::uint32_t i = 0; i < n; ++i) keyed[i] = {splitmix64(seed ^ splitmix64(i)), i};
  std::partial_sort(keyed.begin(), keyed.begin() + static_cast<std::ptrdiff_t>(k), keyed.end());
  for (std::size_t i = 0; i < k; ++i) out.push_back(keyed[i].second);
}

}  // namespace

std::vector<std::uint32_t> degraded_nodes(const WhatIf& w, std::uint32_t nodes) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t n : w.nodes) {
    if (n >= nodes)
      throw_input("whatif '{}': node {} is outside the job's {} nodes", w.text, n, nodes);
    out.push_back(n);
  }
  draw_fraction(w.fraction, w.seed, nodes, out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::uint32_t> slow_ranks(const WhatIf& w, std::uint32_t world,
                                      std::int64_t gpus_per_node) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t r : w.ranks) {
    if (r >= world)
      throw_input("whatif '{}': rank {} is outside the job's {} ranks", w.text, r, world);
    out.push_back(r);
  }
  const auto nodes = static_cast<std::uint32_t>((world + gpus_per_node - 1) / gpus_per_node);
  for (std::uint32_t n : w.nodes) {
    if (n >= nodes)
      throw_input("whatif '{}': node {} is outside the job's {} nodes", w.text, n, nodes);
    for (std::int64_t i = 0; i < gpus_per_node; ++i) {
      const auto r = static_cast<std::uint32_t>(n * gpus_per_node + i);
      if (r < world) out.push_back(r);
    }
  }
  draw_fraction(w.fraction, w.seed, world, out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void apply_whatifs_to_cluster(const std::vector<WhatIf>& whatifs, cost::ClusterSpec& cluster) {
  for (const WhatIf& w : whatifs) {
    if (w.kind != WhatIf::Kind::ExtraLatency) continue;
    if (w.level == "nic") {
      cluster.nic_latency_us += w.latency_us;
      continue;
    }
    cost::TopologySpec t = cluster.topology.value_or(cost::TopologySpec{});
    (w.level == "spine" ? t.spine_latency_us : t.core_latency_us) += w.latency_us;
    cluster.topology = t;
  }
}

void apply_whatifs_to_fabric(const std::vector<WhatIf>& whatifs, cost::CostModel& model) {
  for (const WhatIf& w : whatifs) {
    const bool fabric_level = w.kind == WhatIf::Kind::DegradedNic ||
                              w.kind == WhatIf::Kind::FailedLink ||
                              (w.kind == WhatIf::Kind::ExtraLatency && w.level != "nic");
    if (!fabric_level) continue;
    cost::Fabric* f = model.mutable_fabric();
    if (f == nullptr)
      throw_input(
          "whatif '{}' changes the fabric, which only the flow model has: set "
          "network.model: flow",
          w.text);
    if (w.kind == WhatIf::Kind::DegradedNic) {
      // A bandwidth in Gb/s is the factor of the cluster's NIC bandwidth it leaves.
      double factor = w.factor;
      if (w.gbps > 0) {
        const double nominal = model.cluster().nic_bandwidth_Gbps;
        if (!(w.gbps <= nominal))
          throw_input("whatif '{}': gbps {} is not below the cluster's NIC bandwidth ({} Gb/s)",
                      w.text, w.gbps, nominal);
        factor = w.gbps / nominal;
      }
      for (std::uint32_t n : degraded_nodes(w, f->nodes())) f->scale_node_nics(n, factor);
    } else if (w.kind == WhatIf::Kind::FailedLink) {
      if (w.leaf >= f->num_leaves())
        throw_input("whatif '{}': leaf {} is outside the fabric's {} leaves", w.text, w.leaf,
                    f->num_leaves());
      if (w.spine >= f->spines_per_pod())
        throw_input("whatif '{}': spine {} is outside a pod's {} spines", w.text, w.spine,
                    f->spines_per_pod());
      f->fail_link(f->leaf_uplink(w.leaf, w.spine));
    }
  }
}

void apply_whatifs_to_ranks(const std::vector<WhatIf>& whatifs, const graph::SlicedGraph& g,
                            const Costs& costs, std::int64_t gpus_per_node,
                            EmulationOptions& options) {
  // The durations a rank has before these what-ifs: its own (a sandbox rank), its class's
  // replacement, or the cost model's.
  auto durations_of = [&](std::uint32_t r) -> std::vector<SimTime>& {
    auto [it, fresh] = options.rank_durations.try_emplace(r);
    if (!fresh) return it->second;
    const std::uint32_t cls = g.rank_class[r];
    if (const auto c = options.class_durations.find(cls); c != options.class_durations.end()) {
      it->second = c->second;
    } else {
      const graph::RankProgram& p = g.program_of(r);
      it->second.resize(p.ops.size());
      for (std::size_t i = 0; i < p.ops.size(); ++i)
        it->second[i] = graph::is_communication(p.ops[i].kind) ? 0 : costs.compute(p.ops[i]);
    }
    return it->second;
  };
  for (const WhatIf& w : whatifs) {
    if (w.kind == WhatIf::Kind::SlowGpu) {
      for (std::uint32_t r : slow_ranks(w, g.world_size, gpus_per_node)) {
        // A partially loaded graph (one process's templates): the rank's owner has its template.
        if (!g.is_loaded(g.rank_class[r])) continue;
        const graph::RankProgram& p = g.program_of(r);
        std::vector<SimTime>& d = durations_of(r);
        for (std::size_t i = 0; i < d.size(); ++i)
          if (!graph::is_communication(p.ops[i].kind) &&
              !ns_duration(static_cast<double>(d[i]) * w.factor, d[i]))
            throw_input(
                "whatif '{}': factor {} makes op {} of rank {} take {:.3g} s, beyond the "
                "{} s an op the model covers",
                w.text, w.factor, i, r, static_cast<double>(d[i]) * 1e-9 * w.factor,
                kMaxDurationSeconds);
      }
    } else if (w.kind == WhatIf::Kind::SlowDataLoader) {
      for (std::uint32_t r : w.ranks) {
        if (r >= g.world_size)
          throw_input("whatif '{}': rank {} is outside the job's {} ranks", w.text, r,
                      g.world_size);
        if (!g.is_loaded(g.rank_class[r])) continue;  // as above
        // The batch arrives late: the rank's first compute op starts `delay` later (it is the
        // first op of its compute stream, which everything else of the rank follows).
        const graph::RankProgram& p = g.program_of(r);
        std::vector<SimTime>& d = durations_of(r);
        for (std::size_t i = 0; i < d.size(); ++i)
          if (!graph::is_communication(p.ops[i].kind)) {
            SimTime delay = 0;
            if (!ns_duration(w.delay_us * 1e3, delay))
              throw_input("whatif '{}': delay_us={} is beyond the {} s the model covers", w.text,
                          w.delay_us, kMaxDurationSeconds);
            d[i] += delay;
            break;
          }
      }
    }
  }
}

}  // namespace scalescope::emu
