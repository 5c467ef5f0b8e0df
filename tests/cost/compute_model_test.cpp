// Tests of the compute model (src/cost/compute_model.cpp). Each expected value is derived in a
// comment from the formulas of docs/cost-model.md §1.
#include "cost/compute_model.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/sim_time.hpp"

namespace scalescope::cost {
namespace {

graph::Op gemm(std::uint32_t m, std::uint32_t n, std::uint32_t k) {
  graph::Op op;
  op.kind = graph::OpKind::Gemm;
  op.shape = {m, n, k};
  op.flops = 2.0 * m * n * k;
  op.mem_bytes = 2.0 * (double(m) * k + double(k) * n + double(m) * n);  // bf16 A, B, C
  return op;
}

TEST(GemmEfficiency, ReproducesTheMamfCeilingAtItsBestShape) {
  // The efficiency is normalized to the MAMF measurement's own shape, so there it is exactly
  // ceiling / peak: A100 271.2 / 312 = 0.8692.
  const GpuSpec& a100 = find_gpu("A100");
  EXPECT_DOUBLE_EQ(gemm_efficiency(a100, 1024, 10240, 5120), 271.2 / 312);
  const GpuSpec& h100 = find_gpu("H100");
  EXPECT_DOUBLE_EQ(gemm_efficiency(h100, 2048, 2048, 13312), 794.5 / 989.4);
}

TEST(GemmEfficiency, MatchesTheTileAndWaveFormulaOnA100) {
  // 2048³ on A100 (108 SMs). Best tile 128×128: 16·16 = 256 tiles, no tile waste,
  // ceil(256/108) = 3 waves → 256/324; small-K factor 2048/(2048+128). MAMF shape
  // 1024×10240×5120: 320 (or 640) tiles in 3 (or 6) waves → 320/324, K factor 5120/5248.
  // eff = (271.2/312) · (256/324 · 2048/2176) / (320/324 · 5120/5248) = 0.6709.
  const GpuSpec& a100 = find_gpu("A100");
  const double expected =
      (271.2 / 312) * (256.0 / 324 * 2048.0 / 2176) / (320.0 / 324 * 5120.0 / 5248);
  EXPECT_NEAR(gemm_efficiency(a100, 2048, 2048, 2048), expected, 1e-12);
  EXPECT_NEAR(expected, 0.6709, 1e-4);
}

TEST(GemmEfficiency, StaysBelowTheCeilingAndRisesWithSize) {
  for (const char* name : {"A100", "H100", "B200"}) {
    const GpuSpec& g = find_gpu(name);
    SCOPED_TRACE(name);
    const double ceiling = g.gemm_ceiling_tflops / g.peak_tflops_bf16;
    double prev = 0;
    // Square GEMMs of powers of two: fewer partial waves and larger K as they grow.
    for (std::uint32_t s = 256; s <= 16384; s *= 2) {
      const double e = gemm_efficiency(g, s, s, s);
      EXPECT_LE(e, ceiling);
      EXPECT_GE(e, prev) << "s = " << s;
      prev = e;
    }
    EXPECT_LT(gemm_efficiency(g, 256, 256, 256), 0.1 * ceiling);  // 4 tiles on ≥ 108 SMs
    EXPECT_GT(prev, 0.95 * ceiling);                              // 16k³ is near the ceiling
    // Rising in K alone (the small-K factor K / (K + 128)), strictly until the shape quantizes
    // better than the MAMF shape and the efficiency sits at the ceiling (K ≳ 4k here).
    prev = 0;
    for (std::uint32_t k = 16; k <= 65536; k *= 2) {
      const double e = gemm_efficiency(g, 8192, 8192, k);
      if (k <= 1024) {
        EXPECT_GT(e, prev) << "k = " << k;
      }
      EXPECT_GE(e, prev) << "k = " << k;
      EXPECT_LE(e, ceiling);
      prev = e;
    }
    EXPECT_DOUBLE_EQ(prev, ceiling);
  }
}

TEST(GemmEfficiency, UnknownShapeGivesTheCeiling) {
  const GpuSpec& h100 = find_gpu("H100");
  EXPECT_DOUBLE_EQ(gemm_efficiency(h100, 0, 0, 0), 794.5 / 989.4);
}

TEST(AttentionRate, HitsTheTablePointsExactly) {
  for (const char* name : {"A100", "H100", "H200", "B200"}) {
    const GpuSpec& g = find_gpu(name);
    for (std::size_t i = 0; i < g.attention_tflops.size(); ++i)
      EXPECT_EQ(attention_tflops(g, 512.0 * double(1u << i)), g.attention_tflops[i]) << name << i;
  }
}

TEST(AttentionRate, InterpolatesInLog2AndClampsAtTheEnds) {
  const GpuSpec& a100 = find_gpu("A100");  // 99 / 133 / 155 / 173 / 182 / 189
  // s = 3072 lies log2(3072/2048) = 0.585 of the way from 2k (155) to 4k (173).
  EXPECT_NEAR(attention_tflops(a100, 3072), 155 + 18 * std::log2(1.5), 1e-12);
  EXPECT_NEAR(attention_tflops(a100, 3072), 165.53, 0.01);
  EXPECT_EQ(attention_tflops(a100, 128), 99);     // below 512: clamped
  EXPECT_EQ(attention_tflops(a100, 65536), 189);  // above 16k: clamped
  EXPECT_EQ(attention_tflops(a100, 0), 99);
}

TEST(ComputeSeconds, LargeGemmRunsAtTheMamfCeiling) {
  // A100, 1024×10240×5120: 2·m·n·k = 1.0737e11 FLOP at 271.2 TFLOP/s = 395.9 µs. Memory term:
  // 2·(mk + kn + mn) = 136.3 MB / (0.8 · 2.039 TB/s) = 83.6 µs, smaller. Plus 2 µs launch.
  const GpuSpec& a100 = find_gpu("A100");
  const graph::Op op = gemm(1024, 10240, 5120);
  const double expected = op.flops / 271.2e12 + 2e-6;
  EXPECT_NEAR(compute_seconds(a100, op), expected, 1e-15);
  EXPECT_NEAR(compute_seconds(a100, op), 397.9e-6, 0.1e-6);
}

TEST(ComputeSeconds, Fp8GemmRunsAtTheFp8MamfCeiling) {
  // H100, fp8 at the MAMF best shape 2048×2048×13312: 2·m·n·k = 1.1166e11 FLOP at the fp8 MAMF
  // ceiling 1402.6 TFLOP/s (ml-engineering, MODELING §6.2) = 79.6 µs; bf16 operands would take
  // 794.5 TFLOP/s = 140.5 µs. Memory: fp8 operands (mk + kn) + bf16 output 2·mn = 62.9 MB /
  // (0.8 · 3.35 TB/s) = 23.5 µs, smaller. Plus the 2 µs kernel overhead.
  const GpuSpec& h100 = find_gpu("H100");
  graph::Op op = gemm(2048, 2048, 13312);
  op.gemm_dtype = graph::GemmDtype::Fp8;
  op.mem_bytes = 2048.0 * 13312 * 2 + 2.0 * 2048 * 2048;
  EXPECT_NEAR(compute_seconds(h100, op), op.flops / 1402.6e12 + 2e-6, 1e-12);
  op.gemm_dtype = graph::GemmDtype::Bf16;
  EXPECT_NEAR(compute_seconds(h100, op), op.flops / 794.5e12 + 2e-6, 1e-12);
}

TEST(ComputeSeconds, BlackwellGemmsRunAtTheirMamfCeilings) {
  // Issue 36 item 3: a Blackwell GEMM rate from its cited table. ml-engineering's MAMF table
  // (compute/accelerator/README.md, stas00/ml-engineering@744d01e): B300 bf16 1769 TFLOP/s at
  // 12288×18432×1024, GB200 bf16 1822 at 4096×9728×2048 and fp8 3615.6. At those shapes the
  // model reproduces them: B300 2·12288·18432·1024 = 4.638e11 FLOP / 1769e12 = 262.2 µs; memory
  // 2·(mk + kn + mn) = 515.9 MB / (0.8 · 8 TB/s) = 80.6 µs, smaller. GB200 bf16:
  // 1.632e11 FLOP / 1822e12 = 89.6 µs (memory 2·(mk + kn + mn) = 136.3 MB → 21.3 µs); fp8 at
  // the same shape with the fp8 ceiling: 45.1 µs. Plus the 2 µs kernel overhead each.
  const GpuSpec& b300 = find_gpu("B300");
  const graph::Op big = gemm(12288, 18432, 1024);
  EXPECT_NEAR(compute_seconds(b300, big), 2.0 * 12288 * 18432 * 1024 / 1769e12 + 2e-6, 1e-12);
  EXPECT_NEAR(compute_seconds(b300, big), 264.2e-6, 0.1e-6);
  const GpuSpec& gb200 = find_gpu("GB200");
  graph::Op op = gemm(4096, 9728, 2048);
  EXPECT_NEAR(compute_seconds(gb200, op), 2.0 * 4096 * 9728 * 2048 / 1822e12 + 2e-6, 1e-12);
  op.gemm_dtype = graph::GemmDtype::Fp8;
  EXPECT_NEAR(compute_seconds(gb200, op), 2.0 * 4096 * 9728 * 2048 / 3615.6e12 + 2e-6, 1e-12);
  EXPECT_NEAR(compute_seconds(gb200, op), 47.1e-6, 0.1e-6);
  // MXFP8 at Transformer Engine's measured ratio to per-tensor fp8 on B300 (pre-quantized
  // GEMMs, gemm_profiling.rst): forward 2,702 / 2,961, backward the mean of dgrad 2,666 / 2,744
  // and wgrad 2,663 / 2,749.
  op.gemm_dtype = graph::GemmDtype::Mxfp8;
  const double fp8_rate = 3615.6e12;
  EXPECT_NEAR(compute_seconds(gb200, op), op.flops / (fp8_rate * 2702 / 2961) + 2e-6, 1e-12);
  op.phase = graph::Phase::Backward;
  EXPECT_NEAR(compute_seconds(gb200, op),
              op.flops / (fp8_rate * (2666.0 / 2744 + 2663.0 / 2749) / 2) + 2e-6, 1e-12);
  // NVFP4 at the same profile's per-layer GEMM times against per-tensor fp8 (pre-quantized,
  // B300): Fprop 2.158 ms fp8 / 1.254 ms NVFP4 = 1.721× the fp8 rate; backward the mean of
  // Dgrad 2.329 / 1.305 and Wgrad 2.325 / 1.205 = (1.785 + 1.929) / 2 = 1.857×. On B300 at its
  // MAMF shape (fp8 ceiling 3353.3): 4.638e11 FLOP / (3353.3 · 1.721) TFLOP/s = 80.37 µs forward,
  // + 2 µs. GB200 at the same ratios, at its MAMF shape: 1.632e11 / (3615.6 · 1.721) = 26.23 µs
  // forward and / (3615.6 · 1.857) = 24.31 µs backward, + 2 µs.
  // (Its operands at 0.5625 B a value, the bf16 output at 2: 470.7 MB, 73.5 µs at 0.8 · 8 TB/s,
  // under the FLOP time.)
  graph::Op b = big;
  b.gemm_dtype = graph::GemmDtype::Nvfp4;
  b.mem_bytes = 0.5625 * (12288.0 * 1024 + 1024.0 * 18432) + 2.0 * 12288 * 18432;
  EXPECT_NEAR(compute_seconds(b300, b), b.flops / (3353.3e12 * 2.158 / 1.254) + 2e-6, 1e-12);
  EXPECT_NEAR(compute_seconds(b300, b), 82.4e-6, 0.1e-6);
  op.gemm_dtype = graph::GemmDtype::Nvfp4;
  op.phase = graph::Phase::Forward;
  EXPECT_NEAR(compute_seconds(gb200, op), 28.2e-6, 0.1e-6);
  op.phase = graph::Phase::Backward;
  EXPECT_NEAR(compute_seconds(gb200, op), 26.3e-6, 0.1e-6);
}

TEST(ComputeSeconds, OverlappedCommunicationTakesSmsFromTheGemm) {
  // TE userbuffers' pipelined reduce-scatter takes 16 of the H100's 132 SMs (TE module/base.py
  // default num_sm, set_sm_margin): the GEMM runs at 116/132 of its rate. MAMF shape: 1.1166e11
  // FLOP / (794.5 TFLOP/s · 116/132) = 159.9 µs, plus the 2 µs kernel overhead.
  const GpuSpec& h100 = find_gpu("H100");
  graph::Op op = gemm(2048, 2048, 13312);
  op.comm_sms = 16;
  EXPECT_NEAR(compute_seconds(h100, op), op.flops / (794.5e12 * 116.0 / 132.0) + 2e-6, 1e-12);
}

TEST(SmContention, ACommunicationKernelsSmsAddAWaveToAOneWaveGemm) {
  // H100, 132 SMs. [1536 × 2816] in 128 × 256 tiles is 12 × 11 = 132 tiles: one full wave (the
  // other tiles tie and the first is kept). With 24 SMs held by an NCCL kernel the 132 CTAs need
  // ⌈132 / 108⌉ = 2 waves: 2× the time. (The NVIDIA developer forum's Nsight measurement of this
  // case, a 132-CTA GEMM beside a 24-CTA all-gather: MFU 80 % → 47 %, 1.7×.)
  const GpuSpec& h100 = find_gpu("H100");
  const graph::Op one_wave = gemm(1536, 2816, 8192);
  EXPECT_DOUBLE_EQ(sm_contention_factor(h100, one_wave, 24), 2.0);
  EXPECT_DOUBLE_EQ(sm_contention_factor(h100, one_wave, 0), 1.0);
  // 8192²: 64 × 32 = 2048 tiles of 128 × 256; ⌈2048 / 132⌉ = 16 waves, ⌈2048 / 108⌉ = 19.
  EXPECT_DOUBLE_EQ(sm_contention_factor(h100, gemm(8192, 8192, 8192), 24), 19.0 / 16.0);
  // A GEMM beside a userbuffers kernel (16 SMs) runs on 116: its 132 tiles already take 2 waves,
  // and on 116 − 24 = 92 SMs still 2: no further loss.
  graph::Op ub = one_wave;
  ub.comm_sms = 16;
  EXPECT_DOUBLE_EQ(sm_contention_factor(h100, ub, 24), 1.0);
  // Fused attention: (b·heads) × ⌈s / 128⌉ CTAs, 64 × 32 = 2048: 19 / 16 as above. Unfused:
  // the SMs' share, 132 / 108. Memory-bound kernels: not slowed.
  graph::Op attn;
  attn.kind = graph::OpKind::Attention;
  attn.shape = {64, 4096, 128};
  EXPECT_DOUBLE_EQ(sm_contention_factor(h100, attn, 24), 19.0 / 16.0);
  attn.attention_impl = graph::AttentionImpl::Unfused;
  EXPECT_DOUBLE_EQ(sm_contention_factor(h100, attn, 24), 132.0 / 108.0);
  graph::Op norm;
  norm.kind = graph::OpKind::Norm;
  EXPECT_DOUBLE_EQ(sm_contention_factor(h100, norm, 24), 1.0);
}

TEST(HostSeconds, OneLaunchPerKernelTheHostIssues) {
  // docs/cost-model.md §1.6: a grouped expert GEMM of 16 experts (FLOPs of 16 GEMMs of its
  // per-expert shape) is 16 cuBLAS launches; unfused attention 4 kernels forward, 6 backward;
  // any other op one. At 8.16 µs per launch: 130.56, 32.64, 48.96 and 8.16 µs. Off (0): 0.
  graph::Op grouped = gemm(512, 3072, 4096);
  grouped.flops *= 16;
  EXPECT_EQ(host_launches(grouped), 16);
  graph::Op attn;
  attn.kind = graph::OpKind::Attention;
  attn.attention_impl = graph::AttentionImpl::Unfused;
  attn.phase = graph::Phase::Forward;
  graph::Op attn_bwd = attn;
  attn_bwd.phase = graph::Phase::Backward;
  graph::Op ar;
  ar.kind = graph::OpKind::AllReduce;
  KernelCalibration cal;
  EXPECT_EQ(host_seconds(cal, grouped), 0.0);  // the default: host not modelled
  cal.host_launch_us = 8.16;
  EXPECT_NEAR(host_seconds(cal, grouped), 130.56e-6, 1e-15);
  EXPECT_NEAR(host_seconds(cal, attn), 32.64e-6, 1e-15);
  EXPECT_NEAR(host_seconds(cal, attn_bwd), 48.96e-6, 1e-15);
  EXPECT_NEAR(host_seconds(cal, ar), 8.16e-6, 1e-15);
  EXPECT_NEAR(host_seconds(cal, gemm(4096, 4096, 4096)), 8.16e-6, 1e-15);
  // An op with its kernel count set launches that many; inside a CUDA graph only the graph's
  // first op launches (the graph), once.
  graph::Op topk;
  topk.kind = graph::OpKind::Elementwise;
  topk.kernels = 6;
  EXPECT_NEAR(host_seconds(cal, topk), 6 * 8.16e-6, 1e-15);
  topk.cuda_graph = 2;
  EXPECT_NEAR(host_seconds(cal, topk), 8.16e-6, 1e-15);
  topk.cuda_graph = 1;
  EXPECT_EQ(host_seconds(cal, topk), 0.0);
}

TEST(HostSeconds, TransformerEnginesModuleCodeAroundALinearGemm) {
  // TE PR #3523's GB200 CPU times of the released Linear (bf16): 59.19 µs forward, 311.30 µs
  // forward + backward; a GB200 launch 8.16 · 37.08 / 13.48 = 22.446 µs (TE issue #2053). The
  // forward GEMM op: 59.19 / 22.446 = 2.6370 launches in all; each backward GEMM op (dgrad,
  // wgrad) (311.30 − 59.19) / 2 / 22.446 = 5.6159. At 8.16 µs: 21.518 and 45.826 µs. A grouped
  // GEMM of 16 experts: its 16 launches + 1.6370 = 17.637 → 143.92 µs forward. Not a TE module
  // (the logits GEMM, Megatron's own ColumnParallelLinear) or inside a graph: its launches only.
  KernelCalibration cal;
  cal.host_launch_us = 8.16;
  graph::Op qkv = gemm(4096, 6144, 4096);
  qkv.name = graph::OpName::QkvGemm;
  qkv.phase = graph::Phase::Forward;
  const double grace = 8.16 * 37.08 / 13.48;
  EXPECT_NEAR(host_seconds(cal, qkv), 59.19 / grace * 8.16e-6, 1e-12);
  EXPECT_NEAR(host_seconds(cal, qkv), 21.518e-6, 0.001e-6);
  qkv.phase = graph::Phase::Backward;
  EXPECT_NEAR(host_seconds(cal, qkv), 45.826e-6, 0.001e-6);
  graph::Op experts = gemm(512, 3072, 4096);
  experts.flops *= 16;
  experts.name = graph::OpName::ExpertFc1Gemm;
  experts.phase = graph::Phase::Forward;
  EXPECT_NEAR(host_seconds(cal, experts), (16 + 59.19 / grace - 1) * 8.16e-6, 1e-12);
  graph::Op logits = gemm(4096, 32000, 4096);
  logits.name = graph::OpName::LogitsGemm;
  EXPECT_NEAR(host_seconds(cal, logits), 8.16e-6, 1e-15);
  qkv.cuda_graph = 1;
  EXPECT_EQ(host_seconds(cal, qkv), 0.0);
}

TEST(ComputeSeconds, NormAndActivationCanHaveTheirOwnHbmEfficiency) {
  // An RMSNorm moving 1 GB on an H100 (3.35 TB/s): at the default η = 0.8 it takes
  // 1e9 / (0.8 · 3.35e12) = 373.1 µs; with norm_activation_efficiency 0.17 (eager PyTorch's
  // unfused norm and SwiGLU on our H200, docs/h200-measurements.md) 1e9 / (0.17 · 3.35e12) =
  // 1756 µs. Other memory-bound ops keep η.
  const GpuSpec& h100 = find_gpu("H100");
  KernelCalibration cal = h100.kernel;
  graph::Op norm;
  norm.kind = graph::OpKind::Norm;
  norm.mem_bytes = 1e9;
  graph::Op add = norm;
  add.kind = graph::OpKind::Elementwise;
  add.name = graph::OpName::BiasDropoutAdd;
  EXPECT_NEAR(compute_seconds(h100, cal, norm), 2e-6 + 1e9 / (0.8 * 3.35e12), 1e-12);
  cal.norm_activation_efficiency = 0.17;
  EXPECT_NEAR(compute_seconds(h100, cal, norm), 2e-6 + 1e9 / (0.17 * 3.35e12), 1e-12);
  EXPECT_NEAR(compute_seconds(h100, cal, add), 2e-6 + 1e9 / (0.8 * 3.35e12), 1e-12);
}

TEST(ComputeSeconds, SmallKGemmIsMemoryBound) {
  // A100, 16384×16384×16: 8.6e9 FLOP; efficiency ≈ 0.869 · (16/144) / 0.9636 = 0.100 → 275 µs.
  // Memory: 2·(16384·16·2 + 16384²) = 538 MB / (0.8 · 2.039e12) = 329.8 µs, which wins.
  const GpuSpec& a100 = find_gpu("A100");
  const graph::Op op = gemm(16384, 16384, 16);
  const double mem = op.mem_bytes / (0.8 * 2.039e12);
  const double flop = op.flops / (312e12 * gemm_efficiency(a100, 16384, 16384, 16));
  ASSERT_LT(flop, mem);
  EXPECT_NEAR(compute_seconds(a100, op), mem + 2e-6, 1e-15);
  EXPECT_NEAR(mem, 329.8e-6, 0.1e-6);
}

TEST(ComputeSeconds, ElementwiseIsMemoryBoundPlusLaunch) {
  // 1 GiB through HBM on A100: 2^30 / (0.8 · 2.039e12 B/s) = 658.3 µs, + 2 µs launch.
  graph::Op op;
  op.kind = graph::OpKind::Elementwise;
  op.mem_bytes = 1024.0 * 1024 * 1024;
  op.flops = 1024.0 * 1024 * 1024 / 2;  // one FLOP per bf16 element: far below the ridge
  const double s = compute_seconds(find_gpu("A100"), op);
  EXPECT_NEAR(s, op.mem_bytes / (0.8 * 2.039e12) + 2e-6, 1e-15);
  EXPECT_NEAR(s, 660.3e-6, 0.1e-6);
  // The same kernel on H200 (4.8 TB/s): 2^30 / 3.84e12 = 279.6 µs + 2 µs.
  EXPECT_NEAR(compute_seconds(find_gpu("H200"), op), 281.6e-6, 0.1e-6);
}

TEST(ComputeSeconds, FlopsBoundWhenAnOpCarriesNoBytes) {
  // An optimizer op with FLOPs but no bytes: 312e9 FLOP / 312e12 = 1 ms, + 2 µs.
  graph::Op op;
  op.kind = graph::OpKind::Optimizer;
  op.flops = 312e9;
  EXPECT_NEAR(compute_seconds(find_gpu("A100"), op), 1e-3 + 2e-6, 1e-15);
}

TEST(ComputeSeconds, AttentionUsesTheInterpolatedFa2Rate) {
  // 1e12 FLOP at s = 2048 on A100 (FA2 fwd+bwd 155 TFLOP/s, no per-pass table): 6.4516 ms + 2 µs;
  // memory term negligible. 128 × 2048 is the tables' benchmark shape (2,048 query tiles): the
  // wave factor is 1.
  graph::Op op;
  op.kind = graph::OpKind::Attention;
  op.shape = {128, 2048, 128};
  op.flops = 1e12;
  op.mem_bytes = 4.0 * 32 * 2048 * 128 * 2;
  EXPECT_NEAR(compute_seconds(find_gpu("A100"), op), 1e12 / 155e12 + 2e-6, 1e-15);
}

TEST(ComputeSeconds, FusedAttentionOnHopperUsesTheCudnnRatePerPass) {
  // H100 / H200 at s = 2048 and the benchmark shape: cuDNN's measured forward 520.6, backward
  // 419.7 TFLOP/s (gpu.cpp kCudnnFwdHopper / kCudnnBwdHopper, from h200_ops.csv: 2^37 FLOP in
  // 263.984 µs; 2.5 · 2^37 in 1082.656 − 263.984 µs). A recompute is a forward.
  graph::Op op;
  op.kind = graph::OpKind::Attention;
  op.shape = {128, 2048, 128};
  op.flops = 1e12;
  op.phase = graph::Phase::Forward;
  EXPECT_NEAR(compute_seconds(find_gpu("H100"), op), 1e12 / 520.6e12 + 2e-6, 1e-15);
  op.phase = graph::Phase::Recompute;
  EXPECT_NEAR(compute_seconds(find_gpu("H200"), op), 1e12 / 520.6e12 + 2e-6, 1e-15);
  op.phase = graph::Phase::Backward;
  EXPECT_NEAR(compute_seconds(find_gpu("H100"), op), 1e12 / 419.7e12 + 2e-6, 1e-15);
}

TEST(ComputeSeconds, FlashAttention2OnHopperUsesTheFa2TableInBothPasses) {
  // PyTorch's flash SDPA backend is FlashAttention-2: on H100 at s = 2048 its fwd+bwd rate
  // measured on our H200, 234.8 TFLOP/s (gpu.cpp kFlashHopper: 3.5 · 2^37 FLOP in 2049.008 µs),
  // forward and backward alike, not cuDNN's.
  graph::Op op;
  op.kind = graph::OpKind::Attention;
  op.attention_impl = graph::AttentionImpl::Flash2;
  op.shape = {128, 2048, 128};
  op.flops = 1e12;
  for (const graph::Phase phase : {graph::Phase::Forward, graph::Phase::Backward}) {
    op.phase = phase;
    EXPECT_NEAR(compute_seconds(find_gpu("H100"), op), 1e12 / 234.8e12 + 2e-6, 1e-15);
  }
}

TEST(AttentionWaveFactor, FewQueryTilesLeaveTheGpuUnderused) {
  // w₀ = 1.9 waves; the tables' shape has 2,048 query tiles: on 132 SMs its ramp is
  // 1 − e^(−2048/(132·1.9)) = 1 − e^(−8.16587) = 0.99971581.
  const GpuSpec& h100 = find_gpu("H100");
  // 8 heads, s = 4096: 8 · 32 = 256 tiles, 1.9394 waves: (1 − e^(−1.020734)) / 0.99971581
  // = 0.63966951 / 0.99971581 = 0.63985135.
  EXPECT_NEAR(attention_wave_factor(h100, {8, 4096, 128}), 0.63985135, 1e-8);
  // 12 heads, s = 2048 (GPT-3 175B at TP 8): 192 tiles, (1 − e^(−0.765550)) / 0.99971581
  // = 0.5350741.
  EXPECT_NEAR(attention_wave_factor(h100, {12, 2048, 128}), 0.5350741, 1e-7);
  // A100 (108 SMs), 32 heads, s = 2048: 512 tiles; ramp(512) = 1 − e^(−2.495127) = 0.9175457,
  // ramp(2048) = 1 − e^(−9.980507) = 0.9999538: 0.9175565.
  EXPECT_NEAR(attention_wave_factor(find_gpu("A100"), {32, 2048, 128}), 0.9175565, 1e-7);
  // The tables' own shape gives 1, larger ones stay at 1, a partial last tile counts whole
  // (s = 2049 → 17 tiles per head), an unknown shape gives 1.
  EXPECT_DOUBLE_EQ(attention_wave_factor(h100, {16, 16384, 128}), 1.0);
  EXPECT_DOUBLE_EQ(attention_wave_factor(h100, {64, 8192, 128}), 1.0);
  EXPECT_GT(attention_wave_factor(h100, {12, 2049, 128}),
            attention_wave_factor(h100, {12, 2048, 128}));
  EXPECT_DOUBLE_EQ(attention_wave_factor(h100, {0, 0, 0}), 1.0);
}

TEST(AttentionWaveFactor, FusedAttentionFollowsItsMeasurementsOnTheH200) {
  // Every SDPA row measured on our H200 (inputs/profiles/h200-torch/h200_ops.csv, causal, hd 128):
  // cuDNN's forward, and backward = fwd+bwd − fwd, and the flash backend's fwd+bwd; the model
  // (the measured table × wave factor) within 15 % of the measured time. w₀ was fitted to the four
  // per-rank shapes (exp:*), fitted on two of them it predicts the other two within +10 %
  // (docs/cost-model.md §1.5); the benchmark shapes (fa-bench, gqa) carry the tables themselves or,
  // for GQA 64/8, check them.
  std::ifstream in(SCALESCOPE_SOURCE_DIR "/inputs/profiles/h200-torch/h200_ops.csv");
  ASSERT_TRUE(in) << "inputs/profiles/h200-torch/h200_ops.csv is missing";
  std::string line;
  std::getline(in, line);
  // kind,dtype,m,n,k,batch_heads,seq,head_dim,causal,pass,bytes,flops,median_us,...,tag,note
  std::map<std::string, std::array<double, 4>> by_shape;  // bh, s, flops(fwd), t_fwd / t_fwdbwd
  std::map<std::string, double> fwd_bwd_us;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    if (f.size() < 19 || f[0] != "attention") continue;
    const std::string key = f[18] + "/" + f[5] + "/" + f[6];
    if (f[9] == "fwd")
      by_shape[key] = {std::stod(f[5]), std::stod(f[6]), std::stod(f[11]), std::stod(f[12])};
    else
      fwd_bwd_us[key] = std::stod(f[12]);
  }
  ASSERT_EQ(by_shape.size(), 24u);
  const GpuSpec& h200 = find_gpu("H200");
  for (const auto& [key, r] : by_shape) {
    graph::Op op;
    op.kind = graph::OpKind::Attention;
    op.shape = {static_cast<std::uint32_t>(r[0]), static_cast<std::uint32_t>(r[1]), 128};
    if (key.find("flash") != std::string::npos) {
      // FlashAttention-2 has one fwd+bwd rate: the pair of passes, 3.5 × the forward FLOPs.
      op.attention_impl = graph::AttentionImpl::Flash2;
      op.flops = 3.5 * r[2];
      EXPECT_NEAR(compute_seconds(h200, op) * 1e6 / fwd_bwd_us.at(key), 1.0, 0.15) << key;
      continue;
    }
    op.flops = r[2];
    op.phase = graph::Phase::Forward;
    const double fwd = compute_seconds(h200, op) * 1e6;
    EXPECT_NEAR(fwd / r[3], 1.0, 0.15) << key << " forward";
    op.flops = 2.5 * r[2];
    op.phase = graph::Phase::Backward;
    const double bwd = compute_seconds(h200, op) * 1e6;
    EXPECT_NEAR(bwd / (fwd_bwd_us.at(key) - r[3]), 1.0, 0.15) << key << " backward";
  }
}

TEST(UnfusedAttention, PassesDoTheBatchedGemmWork) {
  // B = 32 heads·batch, s = 2048, dh = 128. Forward: QKᵀ and PV, 2·B·s²·dh each, 4·B·s²·dh in
  // all; backward: dP, dV, dQ, dK, 8·B·s²·dh. Each GEMM moves one [B,s,s] tensor (2·B·s² bytes)
  // and two [B,s,dh] ones (2·2·B·s·dh); the rest of the op's bytes go to two memory passes.
  const std::array<std::uint32_t, 3> shape{32, 2048, 128};
  const double B = 32, s = 2048, dh = 128;
  const double gemm_bytes = 2 * B * s * s + 4 * B * s * dh;
  for (bool backward : {false, true}) {
    const double gemms = backward ? 4 : 2;
    const double total = gemms * gemm_bytes + 1e9;
    const auto passes = unfused_attention_passes(shape, backward, total);
    ASSERT_EQ(passes.size(), gemms + 2);
    double flops = 0, bytes = 0;
    for (const auto& p : passes) {
      flops += p.flops;
      bytes += p.bytes;
    }
    EXPECT_DOUBLE_EQ(flops, gemms * 2 * B * s * s * dh);
    EXPECT_DOUBLE_EQ(bytes, total);
    EXPECT_DOUBLE_EQ(passes[passes.size() - 1].bytes, 0.5e9);
    // The batch of B s×s×dh products tiles as one (B·s)×s×dh GEMM.
    EXPECT_EQ(passes[0].shape, (std::array<std::uint32_t, 3>{65536, 2048, 128}));
  }
}

TEST(ComputeSeconds, UnfusedAttentionForwardIsTheSumOfItsPasses) {
  // A100, B = 32, s = 2048, dh = 128, forward with dropout: bytes = 2 GEMMs · (2·B·s² + 4·B·s·dh)
  // + (4 softmax + 5 dropout)·B·s² = 604.0 MB + 1208.0 MB.
  // QKᵀ as (65536)×2048×128: 128×256 tiles → 512·8 = 4096 tiles in 38 waves of 108 (4096/4104),
  //   K factor 128/256; e = 0.8692 · 0.49903 / 0.96357 = 0.45017 → 140.45 TFLOP/s;
  //   3.436e10 FLOP → 244.6 µs > memory 302.0 MB / (0.8 · 2.039 TB/s) = 185.1 µs.
  // PV as 65536×128×2048: 128×128 tiles → 512 tiles in 5 waves (512/540), K 2048/2176;
  //   e = 0.8692 · 0.89237 / 0.96357 = 0.80499 → 251.2 TFLOP/s → 136.8 µs < memory 185.1 µs.
  // Softmax + dropout: 1208.0 MB / 1.6312 TB/s = 740.5 µs in two kernels.
  // Total = 244.6 + 185.1 + 740.5 µs + 4 kernels · 2 µs = 1178.3 µs.
  const double B = 32, s = 2048, dh = 128;
  graph::Op op;
  op.kind = graph::OpKind::Attention;
  op.attention_impl = graph::AttentionImpl::Unfused;
  op.phase = graph::Phase::Forward;
  op.shape = {32, 2048, 128};
  op.flops = 4 * B * s * s * dh;
  op.mem_bytes = 2 * (2 * B * s * s + 4 * B * s * dh) + 9 * B * s * s;
  const GpuSpec& a100 = find_gpu("A100");
  const double hbm = 0.8 * 2.039e12;
  const double qk = 2 * B * s * s * dh / (312e12 * gemm_efficiency(a100, 65536, 2048, 128));
  const double pv = (2 * B * s * s + 4 * B * s * dh) / hbm;
  const double rest = 9 * B * s * s / hbm;
  EXPECT_NEAR(compute_seconds(a100, op), qk + pv + rest + 4 * 2e-6, 1e-12);
  EXPECT_NEAR(compute_seconds(a100, op), 1178.3e-6, 0.1e-6);
  EXPECT_NEAR(gemm_efficiency(a100, 65536, 2048, 128), 0.45017, 1e-5);
}

TEST(ComputeSeconds, KernelCalibrationScalesEachClass) {
  // t0 = 5 µs, g = 0.5, η = 0.5. Large GEMM (MAMF shape, compute-bound even at g = 0.5:
  // 1.0737e11 / (0.5 · 271.2e12) = 791.8 µs vs 136.3 MB / (0.5 · 2.039e12) = 133.7 µs).
  // Elementwise 1 GiB: 2^30 / (0.5 · 2.039e12) = 1053.2 µs. Fused attention at e_a = 0.5 on
  // A100, s = 2048, the tables' shape (wave factor 1): 1e12 / (0.5 · 155e12) = 12.903 ms.
  const GpuSpec& a100 = find_gpu("A100");
  KernelCalibration cal;
  cal.kernel_overhead_us = 5;
  cal.gemm_efficiency = 0.5;
  cal.attention_efficiency = 0.5;
  cal.hbm_efficiency = 0.5;
  const graph::Op g = gemm(1024, 10240, 5120);
  EXPECT_NEAR(compute_seconds(a100, cal, g), g.flops / (0.5 * 271.2e12) + 5e-6, 1e-15);
  graph::Op e;
  e.kind = graph::OpKind::Elementwise;
  e.mem_bytes = 1024.0 * 1024 * 1024;
  EXPECT_NEAR(compute_seconds(a100, cal, e), e.mem_bytes / (0.5 * 2.039e12) + 5e-6, 1e-15);
  EXPECT_NEAR(compute_seconds(a100, cal, e), 1058.2e-6, 0.1e-6);
  graph::Op a;
  a.kind = graph::OpKind::Attention;
  a.shape = {128, 2048, 128};
  a.flops = 1e12;
  EXPECT_NEAR(compute_seconds(a100, cal, a), 1e12 / (0.5 * 155e12) + 5e-6, 1e-15);
}

TEST(ComputeSeconds, RejectsCommunicationOps) {
  graph::Op op;
  op.kind = graph::OpKind::AllReduce;
  EXPECT_THROW(compute_seconds(find_gpu("A100"), op), ContractError);
}

}  // namespace
}  // namespace scalescope::cost
