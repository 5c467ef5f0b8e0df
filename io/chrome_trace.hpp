#pragma once
/// trace.json: the timelines of the traced ranks as Chrome trace events, for Perfetto
/// (ui.perfetto.dev) and chrome://tracing. Layout in docs/formats.md.
#include <string>

#include "emu/results.hpp"

namespace scalescope::io {

/// Writes the trace through a temporary name (renamed when complete): one process per traced
/// rank ("rank N"), one thread per stream, an "X" event per executed op and a "memory_GiB"
/// counter from the memory records. Streamed as text, so 10^5–10^6 events stay cheap.
void write_chrome_trace(const emu::RunResults& r, const std::string& path);

}  // namespace scalescope::io
