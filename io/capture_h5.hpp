#pragma once
/// capture.h5, as scripts/capture/capture.py writes it (docs/flint.md).
#include <string>

#include "workload/capture.hpp"

namespace scalescope::io {

/// Reads a capture; a bad file is an InputError naming it and the key.
workload::Capture read_capture_h5(const std::string& path);

}  // namespace scalescope::io
