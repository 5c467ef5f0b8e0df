#pragma once
/// Compute model: how long one kernel runs on one GPU. A roofline, max(FLOP time, HBM time), with a
/// size-dependent GEMM efficiency and a measured FlashAttention rate, plus a launch overhead.
/// Formulas and sources: docs/cost-model.md §1.
#include <cstdint>

#include "cost/gpu.hpp"
#include "graph/op.hpp"

namespace scalescope::cost {

/// Fraction of the HBM datasheet bandwidth that streaming kernels reach. An assumption: MODELING
/// §6.4 gives 0.8–0.9 as unverified and NVIDIA's A100 text claims 95 %; to be measured.
inline constexpr double kHbmEfficiency = 0.8;
/// Time added to every kernel for its launch. An assumption inside MODELING §6.4's 1–5 µs budget
/// (unverified), for eager PyTorch without CUDA graphs.
inline constexpr double kLaunchOverheadSeconds = 2e-6;
/// CTA output tiles the GEMM model may pick (NVIDIA "Matrix Multiplication Background User's
/// Guide" §2.2–3.2, via MODELING §6.2: tiles are "typically 256×128, 128×128, …"). The model takes
/// the one with the least quantization loss and assumes the same per-SM rate for all three.
inline constexpr std::uint32_t kGemmTiles[3][2] = {{128, 256}, {256, 128}, {128, 128}};
/// K at which the small-K factor K / (K + kGemmKHalf) is one half: each output tile pays a fixed
/// prologue (pipeline fill) and epilogue (writing the tile) worth about two 64-deep main-loop
/// steps. An assumption, to be calibrated.
inline constexpr double kGemmKHalf = 128;

/// Tile × wave quantization × small-K factor of an m×n×k GEMM, in (0, 1]; 1 is a perfectly
/// quantized shape with infinite K.
double gemm_quantization(const GpuSpec& gpu, std::uint32_t m, std::uint32_t n, std::uint32_t k);
/// Fraction of the dense BF16 peak an m×n×k GEMM reaches: (MAMF ceiling / peak) ×
/// quantization(shape) / quantization(MAMF best shape), capped at the ceiling. A zero dimension
/// means "shape unknown" and gives the ceiling.
double gemm_efficiency(const GpuSpec& gpu, std::uint32_t m, std::uint32_t n, std::uint32_t k);
/// FlashAttention-2 fwd+bwd rate in TFLOP/s at sequence length `seq`: linear in log2(seq) between
/// the table points s = 512·2^i, clamped at 512 and 16k.
double attention_tflops(const GpuSpec& gpu, double seq);
/// Duration in seconds of a compute op (any kind but a communication).
double compute_seconds(const GpuSpec& gpu, const graph::Op& op);

}  // namespace scalescope::cost
