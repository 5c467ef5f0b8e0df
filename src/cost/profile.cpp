#include "cost/profile.hpp"

#include <cmath>

namespace scalescope::cost {

std::optional<SimTime> Profile::duration(const graph::Op& op) const {
  const KernelSig s = kernel_signature(op);
  if (!s.measurable()) return std::nullopt;
  const ProfileEntry* e = find(s.key());
  if (e == nullptr) return std::nullopt;
  // A grouped expert GEMM runs the per-expert GEMM `repeat` times; at least 1 ns, like every
  // modelled compute op.
  const double ns = e->median_s * 1e9 * s.repeat;
  return std::max<SimTime>(1, static_cast<SimTime>(std::llround(ns)));
}

}  // namespace scalescope::cost
