// profile.h5 and measured.json (docs/kernels.md): round trip, the import of a measuring tool's
// output, and one-line errors for bad files.
#include "io/profile_io.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "core/error.hpp"
#include "temp_dir_test.hpp"

namespace scalescope::io {
namespace {

class ProfileIo : public TempDirTest {};

TEST_F(ProfileIo, H5RoundTripKeepsEveryField) {
  cost::Profile p;
  p.device = "NVIDIA H200";
  p.backend = "cuda";
  p.versions = "driver 580";
  p.source = "x.yaml";
  p.op_scale = 1;
  p.entries["gemm:bf16:m=8:n=8:k=8"] = {1e-6, 0.9e-6, 1.1e-6, 20, "cublasLt"};
  p.entries["copy:bytes=64"] = {2e-6, 2e-6, 2e-6, 5, "own"};
  const std::string path = file("profile.h5");
  write_profile_h5(p, path);
  const cost::Profile q = read_profile_h5(path);
  EXPECT_EQ(q.device, p.device);
  EXPECT_EQ(q.backend, p.backend);
  EXPECT_EQ(q.versions, p.versions);
  EXPECT_EQ(q.source, p.source);
  ASSERT_EQ(q.entries.size(), 2u);
  const auto* e = q.find("gemm:bf16:m=8:n=8:k=8");
  ASSERT_NE(e, nullptr);
  EXPECT_DOUBLE_EQ(e->median_s, 1e-6);
  EXPECT_DOUBLE_EQ(e->p90_s, 1.1e-6);
  EXPECT_EQ(e->reps, 20);
  EXPECT_EQ(e->impl, "cublasLt");
}

TEST_F(ProfileIo, MeasuredJsonImportsAndBadFilesNameTheKey) {
  const std::string good = file("measured.json");
  std::ofstream(good) << R"({"format": "scalescope-measured/1", "device": "NVIDIA H200",
    "compute_capability": "9.0", "driver": "580.1", "cuda_runtime": "13.0", "cublas": "13.1",
    "cudnn": "none", "tool": "scalescope-kernels 0.1",
    "results": [{"sig": "gemm:bf16:m=8:n=8:k=8", "median_us": 3.5, "p10_us": 3.4,
                 "p90_us": 3.9, "reps": 50, "tflops": 0.0003, "impl": "cublasLt"}]})";
  const cost::Profile p = read_measured_json(good);
  EXPECT_EQ(p.device, "NVIDIA H200");
  ASSERT_NE(p.find("gemm:bf16:m=8:n=8:k=8"), nullptr);
  EXPECT_DOUBLE_EQ(p.find("gemm:bf16:m=8:n=8:k=8")->median_s, 3.5e-6);
  const auto error = [&](const std::string& text) {
    const std::string path = file("bad.json");
    std::ofstream(path) << text;
    try {
      read_measured_json(path);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("{").find("malformed JSON"), std::string::npos);
  EXPECT_NE(error(R"({"format": "other"})").find("format"), std::string::npos);
  EXPECT_NE(error(R"({"format": "scalescope-measured/1", "results": [{"sig": "x"}]})")
                .find("results[0].median_us"),
            std::string::npos);
  EXPECT_NE(error(R"({"format": "scalescope-measured/1", "results": [{"sig": "x",
      "median_us": 0, "p10_us": 0, "p90_us": 0}]})")
                .find("must be > 0"),
            std::string::npos);
}

}  // namespace
}  // namespace scalescope::io
