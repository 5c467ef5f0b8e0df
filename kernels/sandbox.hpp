#pragma once
/// Hybrid runs: the sandbox ranks' measured kernel times (memoized per signature), the op
/// durations they give a template, and PyTorch's caching allocator replayed over the template's
/// allocations (docs/kernels.md "Sandbox ranks").
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/sim_time.hpp"
#include "cost/profile.hpp"
#include "graph/rank_program.hpp"
#include "kernels/executor.hpp"

namespace scalescope::kernels {

struct SandboxMeasurements {
  std::string backend;
  std::string device;
  std::string versions;
  double op_scale = 1;
  std::map<std::string, Measurement, std::less<>> by_signature;
  /// Kernel executions so far (one per signature: the memo never runs a kernel twice).
  std::uint64_t executions = 0;
};

/// Measures with `exec` every distinct signature of `prog`'s compute ops that `m` does not hold
/// yet. Returns the number of kernels it ran.
std::uint64_t measure_template(const graph::RankProgram& prog, Executor& exec,
                               SandboxMeasurements& m);

/// The measurements as a profile (the form results.h5 /sandbox and cost.profile use).
cost::Profile as_profile(const SandboxMeasurements& m);

/// Per-op durations of `prog`: a compute op whose signature is in `measured` takes
/// cost::Profile::duration (the median times the grouped-GEMM repeat), any other compute op
/// `fallback(op)`, communication 0. `measured_ns` / `total_ns` (optional) receive the compute
/// time from measurements and in all.
std::vector<SimTime> sandbox_durations(const graph::RankProgram& prog,
                                       const cost::Profile& measured,
                                       const std::function<SimTime(const graph::Op&)>& fallback,
                                       double* measured_ns = nullptr, double* total_ns = nullptr);

/// PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp) as a model: requests
/// rounded to 512 B; ≤ 1 MiB from 2 MiB small-pool segments, larger ones from 20 MiB segments
/// (below 10 MiB) or their own 2 MiB-rounded segment; best-fit reuse of free blocks with
/// splitting (remainder ≥ 512 B small, > 1 MiB large) and merging of free neighbours; segments
/// are never released (no empty_cache).
class CachingAllocator {
 public:
  /// Returns a handle.
  std::uint64_t allocate(std::int64_t bytes);
  void release(std::uint64_t handle);
  std::int64_t allocated() const { return allocated_; }
  std::int64_t reserved() const { return reserved_; }
  std::int64_t peak_allocated() const { return peak_allocated_; }
  std::int64_t peak_reserved() const { return peak_reserved_; }

 private:
  struct Block {
    std::int64_t size = 0;
    std::int64_t segment = 0;
    std::int64_t offset = 0;
    bool free = true;
    bool small = false;
  };
  std::map<std::uint64_t, Block> blocks_;  ///< by handle
  /// Free blocks per pool: size → handles (best fit = lower_bound).
  std::multimap<std::int64_t, std::uint64_t> free_small_, free_large_;
  std::uint64_t next_ = 1;
  std::int64_t segments_ = 0;
  std::int64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;

  void insert_free(std::uint64_t h);
  void erase_free(std::uint64_t h);
};

struct AllocatorPeaks {
  std::int64_t allocated = 0;  ///< what torch.cuda.max_memory_allocated would report
  std::int64_t reserved = 0;   ///< max_memory_reserved: allocated plus the cache's fragmentation
};
/// Replays `prog`'s memory through a CachingAllocator: its static memory as one allocation, each
/// op's mem_alloc as one allocation when it is issued, its mem_transient for the op's duration,
/// and each mem_free as the release of the earliest run of consecutive live allocations whose
/// sizes add up to it (a layer's saved activations were allocated together), else of the oldest.
AllocatorPeaks replay_allocator(const graph::RankProgram& prog);

}  // namespace scalescope::kernels
