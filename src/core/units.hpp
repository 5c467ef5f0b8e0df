#pragma once
/// Unit constants used at the edges (config and cost model). Bytes are exact integers.
#include <cstdint>

namespace scalescope::units {

inline constexpr double kKiB = 1024.0;
inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kGB = 1e9;  ///< decimal, as bandwidth datasheets use
inline constexpr double kTera = 1e12;
inline constexpr double kGbitToBytes = 1e9 / 8.0;  ///< 1 Gb/s = 125e6 B/s

}  // namespace scalescope::units
