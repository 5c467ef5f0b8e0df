#pragma once
/// Simulated time: an integer count of nanoseconds. Floating point never enters a timestamp;
/// units are converted only at the edges (cost model outputs, result files).
#include <cmath>
#include <cstdint>
#include <limits>

namespace scalescope {

using SimTime = std::int64_t;

inline constexpr SimTime kTimeUnknown = std::numeric_limits<SimTime>::min();
inline constexpr SimTime kTimeInfinity = std::numeric_limits<SimTime>::max();

/// Seconds (a cost-model output) to nanoseconds, rounded half away from zero; deterministic
/// for a given double on every platform that implements IEEE-754 (all we target).
inline SimTime seconds_to_ns(double seconds) {
  return static_cast<SimTime>(std::llround(seconds * 1e9));
}

inline double ns_to_seconds(SimTime t) {
  return static_cast<double>(t) * 1e-9;
}

}  // namespace scalescope
