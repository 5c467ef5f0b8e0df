#pragma once
/// A progress line for long work that is not an engine run (export, import, sweep): at most one
/// line per interval on stderr — what, how much of how much, the rate, the ETA — and none when
/// disabled (--quiet) or when the work ends within the first interval. SCALESCOPE_PROGRESS_
/// INTERVAL (seconds) overrides the default of 1 s; 0 reports every step (tests).
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

#include <fmt/format.h>

namespace scalescope::core {

/// Seconds between two progress lines: 1, or SCALESCOPE_PROGRESS_INTERVAL (0: every step). The
/// engines' reports (app::progress_reporter) and core::Progress both take it.
inline double progress_interval_s() {
  const char* e = std::getenv("SCALESCOPE_PROGRESS_INTERVAL");
  return e != nullptr && *e != '\0' ? std::strtod(e, nullptr) : 1.0;
}

class Progress {
 public:
  /// `what`: the work ("export-chakra"); `unit`: what is counted ("ranks"); `total`: how many,
  /// 0 when unknown.
  Progress(std::string what, std::string unit, std::uint64_t total, bool enabled)
      : what_(std::move(what)), unit_(std::move(unit)), total_(total), enabled_(enabled) {}

  /// `done` units finished so far.
  void update(std::uint64_t done) {
    if (!enabled_) return;
    const double t = elapsed();
    if (t - last_ < interval_s_ && !(interval_s_ <= 0)) return;
    last_ = t;
    const double rate = t > 0 ? static_cast<double>(done) / t : 0;
    if (total_ > 0) {
      const double eta = rate > 0 ? static_cast<double>(total_ - std::min(total_, done)) / rate : 0;
      std::cerr << fmt::format("{}: {:5.1f} % ({} of {} {}) | {:.3g} {}/s | ETA {:.0f} s\n", what_,
                               100.0 * static_cast<double>(done) / static_cast<double>(total_),
                               done, total_, unit_, rate, unit_, eta);
    } else {
      std::cerr << fmt::format("{}: {} {} | {:.3g} {}/s\n", what_, done, unit_, rate, unit_);
    }
  }

 private:
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  std::string what_, unit_;
  std::uint64_t total_;
  bool enabled_;
  double interval_s_ = progress_interval_s();
  double last_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace scalescope::core
