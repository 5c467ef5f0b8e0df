#pragma once
/// A profile database: measured kernel times by signature (docs/kernels.md). The cost model uses
/// a measurement wherever the op's signature is found and the roofline model elsewhere.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "core/sim_time.hpp"
#include "cost/kernel_signature.hpp"
#include "graph/op.hpp"

namespace scalescope::cost {

struct ProfileEntry {
  double median_s = 0;
  double p10_s = 0;
  double p90_s = 0;
  std::int64_t reps = 0;
  std::string impl;  ///< which implementation ran it (cublasLt, own kernel, host, …)
};

struct Profile {
  std::string device;    ///< e.g. "NVIDIA H200", or "host (Kokkos Serial)"
  std::string backend;   ///< cuda | host | imported
  std::string versions;  ///< driver / runtime / library versions as the measuring tool gave them
  std::string source;    ///< the experiment or ops.json it was measured for
  double op_scale = 1;   ///< host backend: dimensions were scaled by this before running
  std::map<std::string, ProfileEntry, std::less<>> entries;

  const ProfileEntry* find(std::string_view sig) const {
    const auto it = entries.find(sig);
    return it == entries.end() ? nullptr : &it->second;
  }
  /// The measured duration of `op`, or nothing when its signature is not in the profile.
  std::optional<SimTime> duration(const graph::Op& op) const;
};

}  // namespace scalescope::cost
