#include "pdes/partitioner.hpp"

#include <metis.h>

#include <algorithm>
#include <tuple>

#include "core/error.hpp"

namespace scalescope::pdes {

namespace {

/// METIS sums weights in idx_t (32-bit here); keep every total below 2^30 so no sum overflows.
constexpr std::uint64_t kMaxWeightTotal = std::uint64_t{1} << 30;

/// Weights scaled down by a common factor when their total would overflow idx_t, each kept ≥ 1
/// (METIS wants positive edge weights, and an all-zero vertex weight vector has no balance).
std::vector<idx_t> scaled_weights(const std::vector<std::uint32_t>& w) {
  std::uint64_t total = 0;
  for (std::uint32_t x : w) total += x;
  const std::uint64_t divisor = total > kMaxWeightTotal ? total / kMaxWeightTotal + 1 : 1;
  std::vector<idx_t> out(w.size());
  for (std::size_t i = 0; i < w.size(); ++i)
    out[i] = static_cast<idx_t>(std::max<std::uint64_t>(1, w[i] / divisor));
  return out;
}

/// The METIS form of an LpGraph: symmetric, without self-loops (METIS requires both). An edge
/// listed in both directions keeps its weight (the larger one if the two lists disagree).
struct MetisGraph {
  std::vector<idx_t> xadj, adjncy, adjwgt;
};

MetisGraph to_metis(const LpGraph& g) {
  struct Arc {
    LpId from, to;
    std::uint32_t weight;
  };
  std::vector<Arc> arcs;
  arcs.reserve(2 * g.neighbours.size());
  const std::uint32_t n = g.num_lps();
  for (LpId u = 0; u < n; ++u)
    for (std::uint32_t k = g.offsets[u]; k < g.offsets[u + 1]; ++k) {
      const LpId v = g.neighbours[k];
      SCALESCOPE_EXPECTS(v < n);
      if (v == u) continue;
      const std::uint32_t w = k < g.weights.size() ? g.weights[k] : 1;
      arcs.push_back({u, v, w});
      arcs.push_back({v, u, w});
    }
  std::sort(arcs.begin(), arcs.end(), [](const Arc& a, const Arc& b) {
    return std::tie(a.from, a.to, b.weight) < std::tie(b.from, b.to, a.weight);
  });
  // After the sort the heaviest copy of each arc comes first; keep only that one.
  std::vector<std::uint32_t> weights;
  MetisGraph m;
  m.xadj.assign(n + 1, 0);
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    if (i > 0 && arcs[i].from == arcs[i - 1].from && arcs[i].to == arcs[i - 1].to) continue;
    m.adjncy.push_back(static_cast<idx_t>(arcs[i].to));
    weights.push_back(arcs[i].weight);
    ++m.xadj[arcs[i].from + 1];
  }
  for (std::uint32_t u = 0; u < n; ++u) m.xadj[u + 1] += m.xadj[u];
  m.adjwgt = scaled_weights(weights);
  return m;
}

}  // namespace

std::vector<std::uint32_t> BlockPartitioner::assign(std::uint32_t num_lps, std::uint32_t processes,
                                                    const LpGraph* graph) const {
  (void)graph;
  SCALESCOPE_EXPECTS(processes > 0);
  // The first num_lps % processes blocks hold one LP more than the others.
  const std::uint32_t base = num_lps / processes;
  const std::uint32_t larger = num_lps % processes;
  std::vector<std::uint32_t> owner(num_lps);
  LpId lp = 0;
  for (std::uint32_t p = 0; p < processes; ++p) {
    const std::uint32_t size = base + (p < larger ? 1 : 0);
    for (std::uint32_t k = 0; k < size; ++k) owner[lp++] = p;
  }
  return owner;
}

std::vector<std::uint32_t> MetisPartitioner::assign(std::uint32_t num_lps, std::uint32_t processes,
                                                    const LpGraph* graph) const {
  SCALESCOPE_EXPECTS(processes > 0);
  if (processes == 1) return std::vector<std::uint32_t>(num_lps, 0);
  if (graph == nullptr || num_lps < processes)
    return BlockPartitioner{}.assign(num_lps, processes, graph);
  SCALESCOPE_EXPECTS(graph->num_lps() == num_lps);
  SCALESCOPE_EXPECTS(graph->neighbours.size() == graph->offsets.back());
  SCALESCOPE_EXPECTS(graph->vertex_weights.empty() || graph->vertex_weights.size() == num_lps);
  MetisGraph m = to_metis(*graph);
  if (m.adjncy.empty()) return BlockPartitioner{}.assign(num_lps, processes, graph);

  std::vector<idx_t> vwgt;
  if (!graph->vertex_weights.empty()) vwgt = scaled_weights(graph->vertex_weights);
  idx_t nvtxs = static_cast<idx_t>(num_lps);
  idx_t ncon = 1;
  idx_t nparts = static_cast<idx_t>(processes);
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  // Every process partitions on its own and all must agree: fix METIS's random seed, and the
  // allowed imbalance (1.03, METIS's k-way default, stated so a library update cannot move it).
  options[METIS_OPTION_SEED] = 12345;
  options[METIS_OPTION_UFACTOR] = 30;
  options[METIS_OPTION_NUMBERING] = 0;
  idx_t edge_cut = 0;
  std::vector<idx_t> part(num_lps, 0);
  const int rc = METIS_PartGraphKway(&nvtxs, &ncon, m.xadj.data(), m.adjncy.data(),
                                     vwgt.empty() ? nullptr : vwgt.data(), nullptr, m.adjwgt.data(),
                                     &nparts, nullptr, nullptr, options, &edge_cut, part.data());
  if (rc != METIS_OK)
    throw ContractError(fmt::format("METIS_PartGraphKway failed (code {}) on {} LPs into {} parts",
                                    rc, num_lps, processes));
  std::vector<std::uint32_t> owner(num_lps);
  for (std::uint32_t i = 0; i < num_lps; ++i) {
    SCALESCOPE_EXPECTS(part[i] >= 0 && part[i] < nparts);
    owner[i] = static_cast<std::uint32_t>(part[i]);
  }
  return owner;
}

std::unique_ptr<Partitioner> make_partitioner(const std::string& name) {
  if (name == "block") return std::make_unique<BlockPartitioner>();
  if (name == "metis") return std::make_unique<MetisPartitioner>();
  throw_input("unknown partition '{}' (use block or metis)", name);
}

}  // namespace scalescope::pdes
