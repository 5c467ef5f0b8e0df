#pragma once
/// capture.h5, as scripts/capture/capture.py writes it (docs/flint.md).
#include <cstdint>
#include <string>

#include "workload/capture.hpp"

namespace scalescope::io {

/// Reads a capture; a bad file is an InputError naming it and the key.
workload::Capture read_capture_h5(const std::string& path);

/// What `scalescope capture --summary` prints (docs/flint.md "Checking a capture"): the block's
/// ops by class and GEMM FLOPs, the plan and the style it gives each linear layer, the TP
/// collectives it implies at degree `tp`, and the GEMM FLOPs of one micro-batch's iteration
/// against 6·N·tokens plus the attention term 12·L·s·h·tokens.
std::string format_capture_summary(const workload::Capture& c, const workload::TpPlan& plan,
                                   std::int64_t tp);

}  // namespace scalescope::io
