// Progressive filling (docs/network.md "Flow-level contention").
#include "cost/max_min.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"

namespace scalescope::cost {

void MaxMinSolver::resize(std::size_t num_links) {
  remaining_.assign(num_links, 0);
  weight_.assign(num_links, 0);
  seen_.assign(num_links, 0);
  touched_.clear();
}

void MaxMinSolver::solve(MaxMinVar* const* vars, std::size_t count, const double* capacity,
                         const std::uint8_t* active) {
  touched_.clear();
  for (std::size_t v = 0; v < count; ++v) {
    const MaxMinVar& x = *vars[v];
    SCALESCOPE_EXPECTS(x.bound > 0);
    for (std::uint32_t i = 0; i < x.n; ++i) {
      const std::uint32_t l = x.links[i];
      SCALESCOPE_EXPECTS(l < seen_.size() && x.weight[i] > 0);
      if (active != nullptr && !active[l]) continue;
      if (!seen_[l]) {
        seen_[l] = 1;
        touched_.push_back(l);
        remaining_[l] = capacity[l];
        weight_[l] = 0;
      }
      weight_[l] += x.weight[i];
    }
  }
  frozen_.assign(count, 0);
  std::size_t left = count;
  double level = 0;  // the per-flow rate every unfrozen variable has reached
  // A link counts as saturated when less than this fraction of its capacity is left: rounding in
  // the subtractions must not leave a link that carries its full load looking open.
  constexpr double kSaturated = 1e-12;
  while (left > 0) {
    double step = std::numeric_limits<double>::infinity();
    for (std::uint32_t l : touched_)
      if (weight_[l] > 0) step = std::min(step, remaining_[l] / weight_[l]);
    for (std::size_t v = 0; v < count; ++v)
      if (!frozen_[v]) step = std::min(step, vars[v]->bound - level);
    step = std::max(step, 0.0);
    level += step;
    for (std::uint32_t l : touched_)
      if (weight_[l] > 0) remaining_[l] -= step * weight_[l];
    // Freeze the variables at their bound or on a saturated link.
    for (std::size_t v = 0; v < count; ++v) {
      if (frozen_[v]) continue;
      MaxMinVar& x = *vars[v];
      bool stop = x.bound - level <= kSaturated * x.bound;
      for (std::uint32_t i = 0; i < x.n && !stop; ++i) {
        const std::uint32_t l = x.links[i];
        stop = seen_[l] && remaining_[l] <= kSaturated * capacity[l];
      }
      if (!stop) continue;
      frozen_[v] = 1;
      --left;
      x.rate = std::min(level, x.bound);
      for (std::uint32_t i = 0; i < x.n; ++i)
        if (seen_[x.links[i]]) weight_[x.links[i]] -= x.weight[i];
    }
  }
  for (std::uint32_t l : touched_) seen_[l] = 0;
}

}  // namespace scalescope::cost
