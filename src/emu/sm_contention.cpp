#include "emu/sm_contention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace scalescope::emu {

std::vector<SimTime> with_comm_kernel_sms(const graph::RankProgram& p,
                                          const std::vector<SimTime>& dur,
                                          const std::vector<SimTime>& wire,
                                          const std::vector<std::uint32_t>& sms,
                                          const SmContentionFactor& factor) {
  const std::uint32_t n = p.size();
  SCALESCOPE_EXPECTS(dur.size() == n && wire.size() == n && sms.size() == n);
  std::vector<SimTime> out = dur;
  if (std::none_of(sms.begin(), sms.end(), [](std::uint32_t k) { return k > 0; })) return out;

  constexpr double kUnset = -1;
  constexpr std::uint32_t kIdle = 0xFFFFFFFFu;
  std::vector<double> start(n, kUnset), finish(n, kUnset);
  std::array<std::size_t, graph::kNumStreams> cursor{};
  std::array<std::uint32_t, graph::kNumStreams> running;
  running.fill(kIdle);
  // A running compute op: the work it has left, in nanoseconds alone; a running communication
  // op: when it ends.
  std::array<double, graph::kNumStreams> left{}, ends{};
  auto ready = [&](std::uint32_t i) {
    for (const std::uint32_t* d = p.deps_begin(i); d != p.deps_end(i); ++d)
      if (finish[*d] == kUnset) return false;
    return true;
  };
  double now = 0;
  bool slowed = false;
  for (;;) {
    // Start every stream's head op that can start now (a zero-length compute op ends at once and
    // frees its stream for the next).
    for (bool started = true; started;) {
      started = false;
      for (int s = 0; s < graph::kNumStreams; ++s) {
        if (running[s] != kIdle || cursor[s] == p.stream_ops[s].size()) continue;
        const std::uint32_t i = p.stream_ops[s][cursor[s]];
        if (!ready(i)) continue;
        ++cursor[s];
        start[i] = now;
        started = true;
        if (graph::is_communication(p.ops[i].kind)) {
          running[s] = i;
          ends[s] = now + static_cast<double>(std::max<SimTime>(wire[i], 1));
        } else if (dur[i] > 0) {
          running[s] = i;
          left[s] = static_cast<double>(dur[i]);
        } else {
          finish[i] = now;
        }
      }
    }
    std::uint32_t taken = 0;
    bool any = false;
    for (int s = 0; s < graph::kNumStreams; ++s)
      if (running[s] != kIdle) {
        any = true;
        if (graph::is_communication(p.ops[running[s]].kind)) taken += sms[running[s]];
      }
    if (!any) break;
    // The next end: a communication op's, or a compute op's at its present rate.
    std::array<double, graph::kNumStreams> rate{};
    double next = std::numeric_limits<double>::infinity();
    for (int s = 0; s < graph::kNumStreams; ++s) {
      if (running[s] == kIdle) continue;
      const graph::Op& op = p.ops[running[s]];
      if (graph::is_communication(op.kind)) {
        next = std::min(next, ends[s]);
      } else {
        const double f = taken > 0 ? factor(op, taken) : 1.0;
        SCALESCOPE_EXPECTS(f >= 1.0);
        if (f > 1.0) slowed = true;
        rate[s] = 1.0 / f;
        ends[s] = now + left[s] * f;
        next = std::min(next, ends[s]);
      }
    }
    for (int s = 0; s < graph::kNumStreams; ++s) {
      const std::uint32_t i = running[s];
      if (i == kIdle) continue;
      if (ends[s] <= next) {
        finish[i] = next;
        running[s] = kIdle;
      } else if (!graph::is_communication(p.ops[i].kind)) {
        left[s] -= (next - now) * rate[s];
      }
    }
    now = next;
  }
  if (!slowed) return out;
  for (int s = 0; s < graph::kNumStreams; ++s)
    if (cursor[s] != p.stream_ops[s].size()) return out;  // not a schedule the replay could run
  for (std::uint32_t i = 0; i < n; ++i)
    if (!graph::is_communication(p.ops[i].kind) && dur[i] > 0)
      out[i] = std::max(dur[i], static_cast<SimTime>(std::llround(finish[i] - start[i])));
  return out;
}

}  // namespace scalescope::emu
