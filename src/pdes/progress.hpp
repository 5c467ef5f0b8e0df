#pragma once
/// Progress reports of a long run: called by an engine at most once per interval, on one process.
#include <cstdint>
#include <functional>

#include "core/sim_time.hpp"

namespace scalescope::pdes {

struct ProgressInfo {
  SimTime sim_time = 0;         ///< simulated time every committed event has reached (GVT)
  std::uint64_t committed = 0;  ///< events committed so far, all processes
  double wall_s = 0;            ///< since the run started
};

struct ProgressReporter {
  std::function<void(const ProgressInfo&)> report;  ///< empty: no reports
  double interval_s = 1.0;
};

}  // namespace scalescope::pdes
