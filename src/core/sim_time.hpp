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

/// The longest one op or transfer may take (10^6 s, 11.6 days) and the latest simulated time
/// (2^62 ns, 146 years). Past them a duration or a clock would wrap or saturate int64 and give a
/// silent wrong answer (an efficiency of 1e-15 once reported 92 % MFU): they are the consequence
/// of cost inputs outside what the model covers, and the callers refuse them as input errors
/// naming those inputs (cost::CostModel, emu::RankLP, the what-ifs, the fabric).
inline constexpr double kMaxDurationSeconds = 1e6;
inline constexpr SimTime kTimeLimit = SimTime{1} << 62;

/// A duration given in (fractional) nanoseconds, rounded as seconds_to_ns rounds, or false when
/// it is not a finite value in [0, kMaxDurationSeconds].
inline bool ns_duration(double ns, SimTime& out) {
  if (!(ns >= 0 && ns <= kMaxDurationSeconds * 1e9)) return false;
  out = static_cast<SimTime>(std::llround(ns));
  return true;
}

/// A duration in seconds as nanoseconds (seconds_to_ns), or false as ns_duration.
inline bool duration_ns(double seconds, SimTime& out) {
  return ns_duration(seconds * 1e9, out);
}

}  // namespace scalescope
