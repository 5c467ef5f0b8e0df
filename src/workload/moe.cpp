#include "workload/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "core/error.hpp"

namespace scalescope::workload {

std::vector<double> expert_load_shares(std::int64_t experts, double skew, std::int64_t seed) {
  SCALESCOPE_EXPECTS(experts > 0 && skew >= 0);
  const auto n = static_cast<std::size_t>(experts);
  std::vector<double> w(n, 1.0 / static_cast<double>(experts));
  if (skew == 0) return w;
  std::mt19937_64 gen(static_cast<std::uint64_t>(seed));
  // Uniform in (0, 1] from the top 53 bits; Box–Muller pairs.
  const auto uniform = [&] { return (static_cast<double>(gen() >> 11) + 1.0) * 0x1.0p-53; };
  double sum = 0;
  for (std::size_t e = 0; e < n; ++e) {
    const double u1 = uniform(), u2 = uniform();
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    w[e] = std::exp(skew * z);
    sum += w[e];
  }
  for (double& x : w) x /= sum;
  return w;
}

std::vector<double> expert_copies(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t,
                                  double local_tokens) {
  SCALESCOPE_EXPECTS(m.moe());
  std::vector<double> w =
      expert_load_shares(m.num_experts, t.moe_expert_load_skew, t.moe_expert_load_seed);
  const double copies = static_cast<double>(p.ep()) * local_tokens *
                        static_cast<double>(m.moe_router_topk);  // routed in the EP group
  const double cap = m.moe_expert_capacity_factor > 0 ? m.moe_expert_capacity_factor * copies /
                                                            static_cast<double>(m.num_experts)
                                                      : INFINITY;
  for (double& x : w) x = std::min(cap, x * copies);
  return w;
}

MoeLoad moe_load(const ModelSpec& m, const ParallelPlan& p, const TrainingSpec& t,
                 std::int64_t ep_rank, double local_tokens) {
  SCALESCOPE_EXPECTS(m.moe() && ep_rank >= 0 && ep_rank < p.ep());
  const double ep = static_cast<double>(p.ep());
  const std::vector<double> kept_by_expert = expert_copies(m, p, t, local_tokens);
  const std::int64_t per_rank = m.num_experts / p.ep();
  std::vector<double> received(static_cast<std::size_t>(p.ep()), 0.0);
  double kept = 0;
  for (std::int64_t e = 0; e < m.num_experts; ++e) {
    const double x = kept_by_expert[static_cast<std::size_t>(e)];
    received[static_cast<std::size_t>(e / per_rank)] += x;
    kept += x;
  }
  MoeLoad l;
  l.local_tokens = local_tokens;
  l.sent = kept / ep;  // every rank routes alike: the same share of its copies survives
  l.received = received[static_cast<std::size_t>(ep_rank)];
  l.computed = l.received * static_cast<double>(p.etp());
  l.max_exchanged = std::max(l.sent, *std::max_element(received.begin(), received.end()));
  return l;
}

}  // namespace scalescope::workload
