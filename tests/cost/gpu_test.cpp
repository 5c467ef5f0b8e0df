// Tests of the GPU table (src/cost/gpu.cpp). Expected values are the MODELING §6 numbers.
#include "cost/gpu.hpp"

#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"

namespace scalescope::cost {
namespace {

TEST(GpuTable, AliasesResolveCaseInsensitively) {
  EXPECT_EQ(find_gpu("A100").name, "A100-SXM4-80GB");
  EXPECT_EQ(find_gpu("A100-80GB").name, "A100-SXM4-80GB");
  EXPECT_EQ(find_gpu("a100-sxm4-80gb").name, "A100-SXM4-80GB");
  EXPECT_EQ(find_gpu("H100").name, "H100-SXM");
  EXPECT_EQ(find_gpu("h100-sxm").name, "H100-SXM");
  EXPECT_EQ(find_gpu("H100-SXM5-80GB").name, "H100-SXM");
  EXPECT_EQ(find_gpu("H200").name, "H200-SXM");
  EXPECT_EQ(find_gpu("b200").name, "B200");
  // A canonical name resolves to the same row as its aliases.
  EXPECT_EQ(&find_gpu("A100-SXM4-80GB"), &find_gpu("a100"));
}

TEST(GpuTable, UnknownGpuThrowsInputErrorListingKnownNames) {
  EXPECT_THROW(find_gpu("V100"), InputError);
  try {
    find_gpu("V100");
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown GPU 'V100'"), std::string::npos) << msg;
    for (const std::string& name : gpu_names()) EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
}

TEST(GpuTable, RowsCarryDatasheetAndMeasuredNumbers) {
  const GpuSpec& a100 = find_gpu("A100");
  EXPECT_DOUBLE_EQ(a100.peak_tflops_bf16, 312);  // datasheet, dense BF16
  EXPECT_DOUBLE_EQ(a100.hbm_bandwidth_TBps, 2.039);
  EXPECT_DOUBLE_EQ(a100.nvlink_bandwidth_GBps, 300);  // 600 bidirectional / 2
  EXPECT_EQ(a100.sms, 108);
  EXPECT_DOUBLE_EQ(a100.gemm_ceiling_tflops, 271.2);  // MAMF
  const GpuSpec& h100 = find_gpu("H100");
  EXPECT_DOUBLE_EQ(h100.peak_tflops_bf16, 989.4);
  EXPECT_DOUBLE_EQ(h100.nvlink_bandwidth_GBps, 450);  // 900 / 2
  EXPECT_EQ(h100.sms, 132);
  for (const std::string& name : gpu_names()) {
    const GpuSpec& g = find_gpu(name);
    SCOPED_TRACE(name);
    EXPECT_LT(g.gemm_ceiling_tflops, g.peak_tflops_bf16);  // a measured ceiling is below peak
    ASSERT_EQ(g.attention_tflops.size(), 6u);              // s = 512 … 16k
    for (std::size_t i = 1; i < g.attention_tflops.size(); ++i)
      EXPECT_GT(g.attention_tflops[i], g.attention_tflops[i - 1]);  // FA2 rises with s
    EXPECT_LT(g.attention_tflops.back(), g.peak_tflops_bf16);
    EXPECT_GT(g.hbm_bytes, 0);
    EXPECT_GT(gemm_ceiling_shape(g)[0], 0u);
  }
}

TEST(GpuTable, H200SharesH100ComputeWithMoreMemory) {
  const GpuSpec& h100 = find_gpu("H100");
  const GpuSpec& h200 = find_gpu("H200");
  EXPECT_EQ(h200.peak_tflops_bf16, h100.peak_tflops_bf16);  // same GH100 die
  EXPECT_EQ(h200.gemm_ceiling_tflops, h100.gemm_ceiling_tflops);
  EXPECT_EQ(h200.attention_tflops, h100.attention_tflops);
  EXPECT_DOUBLE_EQ(h200.hbm_bandwidth_TBps, 4.8);
  EXPECT_DOUBLE_EQ(h200.hbm_bytes, 141e9);
}

TEST(GpuTable, B200AttentionIsH100ScaledByTheMamfRatio) {
  // No FA2 figure on B200: H100's row × 1745 / 794.5 (ratio of MAMF GEMM ceilings), e.g. the 16k
  // point, PyTorch's flash backend measured on Hopper, 314.7 × 2.19635 = 691.2 TFLOP/s.
  const GpuSpec& h100 = find_gpu("H100");
  const GpuSpec& b200 = find_gpu("B200");
  ASSERT_EQ(b200.attention_tflops.size(), h100.attention_tflops.size());
  for (std::size_t i = 0; i < h100.attention_tflops.size(); ++i)
    EXPECT_DOUBLE_EQ(b200.attention_tflops[i], h100.attention_tflops[i] * 1745.0 / 794.5);
  EXPECT_NEAR(b200.attention_tflops.back(), 691.2, 0.1);
}

TEST(GpuTable, BlackwellRowsCarryTheirCitedMeasurements) {
  // cuDNN's SDPA training benchmark on GB200 / GB300 (NVIDIA/cudnn-frontend@3929da2, bf16,
  // causal, hd128) at s = 2k, 4k, 8k, 16k, table points 2…5.
  const GpuSpec& gb200 = find_gpu("GB200");
  const GpuSpec& gb300 = find_gpu("GB300");
  const std::vector<double> gb200_fwd{1097, 1408, 1574, 1708}, gb200_bwd{885, 1148, 1332, 1328};
  const std::vector<double> gb300_fwd{1373, 1703, 1856, 1915}, gb300_bwd{967, 1248, 1435, 1507};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(gb200.attention_fwd_tflops[i + 2], gb200_fwd[i]);
    EXPECT_DOUBLE_EQ(gb200.attention_bwd_tflops[i + 2], gb200_bwd[i]);
    EXPECT_DOUBLE_EQ(gb300.attention_fwd_tflops[i + 2], gb300_fwd[i]);
    EXPECT_DOUBLE_EQ(gb300.attention_bwd_tflops[i + 2], gb300_bwd[i]);
  }
  // s = 512 and 1k: FA4's B200 forward (500.6, 796.5 at 2k 1124.6) scaled by the 2k ratio:
  // GB200 forward 500.6 · 1097 / 1124.6 = 488.3.
  EXPECT_NEAR(gb200.attention_fwd_tflops[0], 488.3, 0.05);
  // B200: GB200's cuDNN × 2250 / 2500, e.g. 4k forward 1408 · 0.9 = 1267.2.
  EXPECT_DOUBLE_EQ(find_gpu("B200").attention_fwd_tflops[3], 1408 * 0.9);
  // Datasheet peaks and what the driver reports (nvidia-smi / CUDA-visible totals in MiB).
  EXPECT_DOUBLE_EQ(gb200.peak_tflops_bf16, 2500);
  EXPECT_DOUBLE_EQ(find_gpu("GB300").peak_tflops_fp8, 5000);
  EXPECT_DOUBLE_EQ(find_gpu("B300").gemm_ceiling_fp8_tflops, 3353.3);
  EXPECT_DOUBLE_EQ(find_gpu("B200").hbm_usable_bytes, 182642.0 * 1048576);
  EXPECT_DOUBLE_EQ(find_gpu("dgx-b300").hbm_usable_bytes, 275040.0 * 1048576);
  EXPECT_DOUBLE_EQ(gb300.hbm_usable_bytes, 284208.0 * 1048576);
}

}  // namespace
}  // namespace scalescope::cost
