#pragma once
/// Max-min fair sharing of links among flows (SimGrid's flow model, Velho et al., "On the
/// validity of flow-level TCP network models for grid and cloud simulations", ACM TOMACS 2013;
/// docs/network.md "Flow-level contention"). A variable stands for `weight[l]` equal flows on link
/// l (an aggregated collective: its flows all progress at one rate) and has an upper bound (what
/// it reaches alone: NCCL's algorithm bandwidth). Progressive filling: every unfrozen variable's
/// per-flow rate rises together until a link saturates or a variable reaches its bound; those
/// freeze; repeat. The result is the unique max-min fair allocation.
#include <cstdint>
#include <vector>

namespace scalescope::cost {

struct MaxMinVar {
  const std::uint32_t* links = nullptr;  ///< link ids, distinct
  const float* weight = nullptr;         ///< flows of this variable on each link (> 0)
  std::uint32_t n = 0;
  double bound = 0;  ///< largest per-flow rate, > 0
  double rate = 0;   ///< out: the per-flow rate
};

/// Reusable scratch of the solver, sized to the number of links: no allocation per solve once
/// warm.
class MaxMinSolver {
 public:
  explicit MaxMinSolver(std::size_t num_links = 0) { resize(num_links); }
  void resize(std::size_t num_links);

  /// Sets `rate` of every variable in [vars, vars + count) (any order; the result does not
  /// depend on it beyond rounding, and is bit-identical for the same order). `capacity[l]` is
  /// link l's capacity in the rates' unit. Links used by no variable are ignored.
  /// `active` (optional, per link): only links with a non-zero entry constrain — a caller that
  /// knows a link cannot saturate (its flows' bounds sum below its capacity) leaves it out.
  void solve(MaxMinVar* const* vars, std::size_t count, const double* capacity,
             const std::uint8_t* active = nullptr);

 private:
  std::vector<double> remaining_;   ///< per link: capacity not yet allocated
  std::vector<double> weight_;      ///< per link: flows of unfrozen variables on it
  std::vector<std::uint8_t> seen_;  ///< per link: listed in touched_
  std::vector<std::uint32_t> touched_;
  std::vector<std::uint8_t> frozen_;  ///< per variable of the current solve
};

}  // namespace scalescope::cost
