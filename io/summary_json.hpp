#pragma once
/// summary.json (the headline figures for scripts) and the same figures as a text table for
/// stdout. Layout in docs/formats.md.
#include <cstdint>
#include <string>

#include "emu/results.hpp"

namespace scalescope::io {

/// Writes summary.json through a temporary name (renamed when complete). Keys in a fixed order.
void write_summary_json(const emu::RunResults& r, const std::string& path);

/// The headline figures, the time breakdown of the last rank to finish and the peak memory of
/// each pipeline stage, as an aligned text table ending in a newline.
std::string format_summary_table(const emu::RunResults& r);

/// The rank whose breakdown the summary reports: the one that finishes last, the lowest such
/// rank on a tie; 0 when there are no ranks.
std::uint32_t last_finishing_rank(const emu::RunResults& r);

}  // namespace scalescope::io
