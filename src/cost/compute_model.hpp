#pragma once
/// Compute model: how long one op's kernels run on one GPU. Each kernel pays a fixed overhead
/// plus its work at a sustained rate: max(FLOP time, HBM time) with a size-dependent GEMM
/// efficiency, a measured fused-attention rate, and the unfused attention path as the passes it
/// makes over the s² scores. Formulas and sources: docs/cost-model.md §1.
#include <array>
#include <cstdint>
#include <vector>

#include "cost/gpu.hpp"
#include "graph/op.hpp"

namespace scalescope::cost {

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
/// A rate table at s = 512·2^i read at sequence length `seq`: linear in log2(seq) between the
/// points, clamped at 512 and 16k.
double table_tflops(const std::vector<double>& table, double seq);
/// FlashAttention-2 fwd+bwd rate in TFLOP/s at sequence length `seq` (`table_tflops`).
double attention_tflops(const GpuSpec& gpu, double seq);
/// Fused-attention rate in TFLOP/s of one pass (forward or backward) at `seq`: the GPU's per-pass
/// table where it has one, else its fwd+bwd table.
double attention_pass_tflops(const GpuSpec& gpu, double seq, bool backward);

/// Query rows per CTA of the fused attention kernels (FlashAttention-2/3 and cuDNN's SDPA at
/// head dim 128 tile the queries by 128 rows; the grid is batch·heads × ⌈s / 128⌉).
inline constexpr double kAttentionQueryTile = 128;
/// Query tiles of the shapes the attention rate tables were measured at: FlashAttention's
/// benchmark, 16k tokens × 16 heads of 128 (batch·heads·s = 262,144, 2,048 tiles).
inline constexpr double kAttentionTableTiles = 2048;
/// Waves (query tiles / SMs) at which a fused attention kernel reaches 1 − 1/e of its rate:
/// fitted to cuDNN's SDPA forward and backward on our H200 at the four per-TP-rank shapes of the
/// shipped experiments (8–16 heads, batch 1, s = 2k–8k: 1.45 … 7.76 waves, 0.50 … 0.98 of the
/// table rate), docs/cost-model.md §1.5.
inline constexpr double kAttentionWaveScale = 1.9;
/// Fraction of its table rate a fused attention kernel of `shape` = {batch·heads, s, dh} reaches:
/// (1 − e^(−w/w₀)) / (1 − e^(−w_t/w₀)) with w its query tiles / SMs, w_t the tables' (so a table
/// shape gives 1), capped at 1. Few heads per rank and short sequences leave SMs idle and the
/// kernels' pipelines shallow. A zero dimension means "shape unknown" and gives 1.
double attention_wave_factor(const GpuSpec& gpu, const std::array<std::uint32_t, 3>& shape);

/// One kernel of the unfused attention path: a batched GEMM, given as the equivalent single GEMM
/// (batch·m)×n×k for tile counting, or (k = 0) a memory-bound pass over the scores.
struct AttentionPass {
  std::array<std::uint32_t, 3> shape{};  ///< GEMM m, n, k; zero for a memory-bound pass
  double flops = 0;
  double bytes = 0;
};
/// The kernels of Megatron's unfused core attention on `shape` = (batch·heads, s, head_dim), fp16
/// /bf16 (docs/cost-model.md §1.4). Forward: QKᵀ and PV batched GEMMs, then the softmax and
/// dropout passes; backward: dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q, then dropout and
/// softmax backward. `total_bytes` is the op's whole HBM traffic; what the GEMMs do not move is
/// split evenly over the two memory-bound passes.
std::vector<AttentionPass> unfused_attention_passes(const std::array<std::uint32_t, 3>& shape,
                                                    bool backward, double total_bytes);

/// Duration in seconds of a compute op (any kind but a communication) under `cal`.
double compute_seconds(const GpuSpec& gpu, const KernelCalibration& cal, const graph::Op& op);
/// The same under the GPU's physical defaults (`gpu.kernel`).
double compute_seconds(const GpuSpec& gpu, const graph::Op& op);

/// How much longer compute op `op` takes while communication kernels hold `taken` of the GPU's
/// SMs (docs/cost-model.md §1.7): its CTAs run in waves on the SMs left. A GEMM keeps the tile
/// cuBLAS picks for the whole GPU and runs ⌈T / (SMs − taken)⌉ waves instead of ⌈T / SMs⌉; a
/// fused attention kernel likewise over its (batch·heads) × query-tile CTAs; unfused attention
/// at the SMs' share. A GEMM that already shares its SMs (`op.comm_sms`: TE userbuffers, DeepEP)
/// counts from the SMs those leave it. 1 for memory-bound kinds (the HBM bandwidth the
/// communication kernels use is not modelled).
double sm_contention_factor(const GpuSpec& gpu, const graph::Op& op, std::uint32_t taken);

/// Kernels the host launches for op `op` (docs/cost-model.md §1.6): one per op, a grouped expert
/// GEMM one per expert (Transformer Engine's multi-stream cuBLAS grouped GEMM), unfused attention
/// one per pass, an op with `kernels` set that many; inside a CUDA graph one for the graph (at its
/// first op) and none for the rest.
double host_launches(const graph::Op& op);
/// Host time of Transformer Engine's module code around a linear layer's GEMM op beyond its
/// launches, in launches (its measured CPU time per call over a launch's, both on GB200): the
/// forward's op 1.637, each backward op (dgrad, wgrad) 4.616; 0 for other ops and inside a CUDA
/// graph.
double host_module_launches(const graph::Op& op);
/// Host time to issue op `op`: (host_launches + host_module_launches) · cal.host_launch_us.
double host_seconds(const KernelCalibration& cal, const graph::Op& op);

}  // namespace scalescope::cost
