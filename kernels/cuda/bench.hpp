// Measuring one op signature on the GPU (docs/kernels.md): plain C++ interface, no CUDA headers,
// so that the tool's main compiles with the host compiler alone.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace scalescope::cuda {

struct DeviceInfo {
  bool present = false;
  std::string error;  // why no device, when !present
  std::string name, compute_capability, driver, cuda_runtime, cublas, cudnn = "none";
  int64_t total_bytes = 0, free_bytes = 0;
  int sms = 0;
};
// Never throws: any cudaGetDeviceCount error means "no device".
DeviceInfo query_device();

// One signature: the kernel class, its pass / dtype and its integer dims (docs/kernels.md table).
struct OpSpec {
  std::string sig, kernel, pass, dtype;
  std::map<std::string, int64_t> dims;
  bool causal = false;
};

struct Measurement {
  double median_us = 0, p10_us = 0, p90_us = 0;
  int reps = 0;
  double tflops = 0, gbps = 0;
  std::string impl;
};

struct Outcome {
  enum class Kind { Measured, Skipped, Fatal } kind = Kind::Skipped;
  std::string why;  // Skipped, Fatal
  Measurement m;
};

// Allocates the op's buffers (random data), times it (3 warm-ups, then N repetitions with a
// 256 MiB L2 flush before each, N >= 5 chosen to take about `budget_s`), frees everything.
// Fatal: a CUDA error that leaves the context unusable.
Outcome measure(const OpSpec& spec, double budget_s);

// Kernel classes measure() knows.
bool known_kernel(const std::string& kernel);

}  // namespace scalescope::cuda
