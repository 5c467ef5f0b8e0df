#pragma once
/// results.h5: per-rank table, traced-rank timelines and memory, engine statistics
/// (layout in docs/formats.md). Written to a temporary name and renamed when complete.
#include <string>

#include "emu/results.hpp"

namespace scalescope::io {

void write_results_h5(const emu::RunResults& r, const std::string& path);

}  // namespace scalescope::io
