#pragma once
/// An executor runs the real kernel of an op signature (docs/kernels.md) and times it. Backends:
/// host (Kokkos, always built; kernels/host) and CUDA (the standalone scalescope-kernels tool,
/// kernels/cuda, which reads the same signatures from ops.json).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cost/kernel_signature.hpp"

namespace scalescope::kernels {

struct Measurement {
  double median_s = 0;
  double p10_s = 0;
  double p90_s = 0;
  std::int64_t reps = 0;
  std::int64_t bytes_held = 0;  ///< the buffers the kernel's operands and outputs occupy
  std::string impl;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string backend() const = 0;
  virtual std::string device() const = 0;
  /// Library versions, as the backend knows them.
  virtual std::string versions() const = 0;
  /// The factor every dimension was multiplied by before running (host: < 1 shrinks the shapes
  /// for a CPU; 1 on a device).
  virtual double op_scale() const = 0;
  /// Allocates the kernel's buffers, runs it after a warm-up and returns the median of the
  /// timed repetitions; nothing for a class the backend cannot run.
  virtual std::optional<Measurement> measure(const cost::KernelSig& sig) = 0;
};

/// The host backend: Kokkos kernels on fp32 buffers, each dimension scaled by `op_scale`
/// (at least 1), `reps` timed repetitions after one warm-up.
std::unique_ptr<Executor> make_host_executor(double op_scale, int reps = 3);

}  // namespace scalescope::kernels
