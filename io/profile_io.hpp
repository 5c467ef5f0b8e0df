#pragma once
/// Profile databases and signature lists (docs/kernels.md): ops.json out, measured.json in,
/// profile.h5 in and out.
#include <cstdint>
#include <string>
#include <vector>

#include "cost/cost_model.hpp"
#include "cost/profile.hpp"
#include "graph/sliced_graph.hpp"

namespace scalescope::io {

/// Every distinct measurable kernel signature of `g`'s templates, with its count over the
/// templates and the roofline model's time on `model`'s GPU (format scalescope-ops/1).
void write_ops_json(const graph::SlicedGraph& g, const cost::CostModel& model,
                    const std::string& experiment, const std::string& path);
/// The same for a list of programs (a sandbox rank's template).
void write_ops_json(const std::vector<const graph::RankProgram*>& programs,
                    const cost::CostModel& model, const std::string& experiment,
                    const std::string& path);

/// Reads a scalescope-measured/1 file (what scalescope-kernels writes) into a profile.
cost::Profile read_measured_json(const std::string& path);

/// profile.h5: /profile/signatures (the keys, '\n'-separated, u8), median_s, p10_s, p90_s (f64),
/// reps (i64), impl (as signatures); attributes format_version, device, backend, versions,
/// source, op_scale. Written through a temporary name.
void write_profile_h5(const cost::Profile& p, const std::string& path);
cost::Profile read_profile_h5(const std::string& path);

/// results.h5 of a hybrid run: /sandbox holds the sandbox ranks' measurements in profile.h5's
/// layout plus `ranks` (u32); added to a finished results.h5 (opened read-write).
void write_sandbox_group(const std::string& results_h5, const cost::Profile& measured,
                         const std::vector<std::uint32_t>& ranks);
/// The measurements of a hybrid run's results.h5 (--replay-measurements).
cost::Profile read_sandbox_group(const std::string& results_h5,
                                 std::vector<std::uint32_t>* ranks = nullptr);

}  // namespace scalescope::io
