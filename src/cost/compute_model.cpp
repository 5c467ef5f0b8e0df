// Roofline with size-dependent efficiency (docs/cost-model.md §1).
#include "cost/compute_model.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace scalescope::cost {
namespace {

double ceil_div(double a, double b) {
  return std::ceil(a / b);
}

// Tile and wave quantization for one tile orientation (NVIDIA "Matrix Multiplication Background
// User's Guide" §2.2–3.2): the kernel computes ceil(m/tm)·ceil(n/tn) full tiles, and they run in
// ceil(tiles / SMs) waves of one CTA per SM. Useful work / work paid for.
double tile_wave(double m, double n, double tm, double tn, double sms) {
  const double tiles = ceil_div(m, tm) * ceil_div(n, tn);
  const double tile_eff = (m * n) / (tiles * tm * tn);
  const double wave_eff = tiles / (ceil_div(tiles, sms) * sms);
  return tile_eff * wave_eff;
}

/// Tiles of the GEMM tile the model picks for the whole GPU (gemm_quantization's choice).
double gemm_tiles(double m, double n, double sms) {
  double best = -1, tiles = 1;
  for (const auto& t : kGemmTiles) {
    const double tw = tile_wave(m, n, t[0], t[1], sms);
    if (tw > best) {
      best = tw;
      tiles = ceil_div(m, t[0]) * ceil_div(n, t[1]);
    }
  }
  return tiles;
}

}  // namespace

double gemm_quantization(const GpuSpec& gpu, std::uint32_t m, std::uint32_t n, std::uint32_t k) {
  SCALESCOPE_EXPECTS(m > 0 && n > 0 && k > 0 && gpu.sms > 0);
  const double dm = m, dn = n, dk = k, sms = gpu.sms;
  // cuBLAS's heuristics pick the tile per shape; the model picks the least wasteful one.
  double tw = 0;
  for (const auto& t : kGemmTiles) tw = std::max(tw, tile_wave(dm, dn, t[0], t[1], sms));
  const double k_factor = dk / (dk + kGemmKHalf);
  return tw * k_factor;
}

double gemm_efficiency(const GpuSpec& gpu, std::uint32_t m, std::uint32_t n, std::uint32_t k) {
  const double ceiling = gpu.gemm_ceiling_tflops / gpu.peak_tflops_bf16;
  if (m == 0 || n == 0 || k == 0) return ceiling;
  // The MAMF ceiling was itself measured at a shape with some quantization loss; dividing by the
  // model's quantization there makes the model reproduce the measurement at that shape.
  const auto best = gemm_ceiling_shape(gpu);
  const double q_best = best[0] > 0 ? gemm_quantization(gpu, best[0], best[1], best[2]) : 1.0;
  return ceiling * std::min(1.0, gemm_quantization(gpu, m, n, k) / q_best);
}

double table_tflops(const std::vector<double>& t, double seq) {
  SCALESCOPE_EXPECTS(!t.empty());
  // Table point i is s = 512·2^i (MODELING §6.3); x is the fractional index.
  const double x = seq > 0 ? std::log2(seq / 512.0) : 0.0;
  const double last = static_cast<double>(t.size() - 1);
  if (!(x > 0)) return t.front();
  if (x >= last) return t.back();
  const double lo = std::floor(x);
  const auto i = static_cast<std::size_t>(lo);
  const double frac = x - lo;
  return frac == 0 ? t[i] : t[i] + (t[i + 1] - t[i]) * frac;
}

double attention_tflops(const GpuSpec& gpu, double seq) {
  return table_tflops(gpu.attention_tflops, seq);
}

double attention_pass_tflops(const GpuSpec& gpu, double seq, bool backward) {
  const auto& pass = backward ? gpu.attention_bwd_tflops : gpu.attention_fwd_tflops;
  return pass.empty() ? attention_tflops(gpu, seq) : table_tflops(pass, seq);
}

double attention_wave_factor(const GpuSpec& gpu, const std::array<std::uint32_t, 3>& shape) {
  if (shape[0] == 0 || shape[1] == 0 || gpu.sms <= 0) return 1.0;
  const double sms = gpu.sms;
  const double tiles = shape[0] * std::ceil(shape[1] / kAttentionQueryTile);
  auto ramp = [&](double t) { return 1.0 - std::exp(-t / (sms * kAttentionWaveScale)); };
  return std::min(1.0, ramp(tiles) / ramp(kAttentionTableTiles));
}

std::vector<AttentionPass> unfused_attention_passes(const std::array<std::uint32_t, 3>& shape,
                                                    bool backward, double total_bytes) {
  const double B = shape[0], s = shape[1], dh = shape[2];
  SCALESCOPE_EXPECTS(B * s < 4294967296.0);
  const auto Bs = static_cast<std::uint32_t>(B * s);
  const auto S = shape[1], D = shape[2];
  const double flops = 2 * B * s * s * dh;  // one batched [s,·]×[·,·] product
  const double scores = 2 * B * s * s;      // one fp16/bf16 [B, s, s] tensor
  const double head = 2 * B * s * dh;       // one fp16/bf16 [B, s, dh] tensor
  std::vector<AttentionPass> p;
  // A batch of B m×n×k products has B·⌈m/tm⌉·⌈n/tn⌉ tiles, those of one (B·m)×n×k GEMM when m is
  // a multiple of the tile (s is), so the GEMM model's quantization applies unchanged.
  if (!backward) {
    p.push_back({{Bs, S, D}, flops, 2 * head + scores});  // scores = QKᵀ: read Q, K; write s²
    p.push_back({{Bs, D, S}, flops, scores + 2 * head});  // O = P·V: read P, V; write O
  } else {
    p.push_back({{Bs, S, D}, flops, 2 * head + scores});  // dP = dO·Vᵀ: read dO, V; write dP
    p.push_back({{Bs, D, S}, flops, scores + 2 * head});  // dV = Pᵀ·dO: read P, dO; write dV
    p.push_back({{Bs, D, S}, flops, scores + 2 * head});  // dQ = dS·K: read dS, K; write dQ
    p.push_back({{Bs, D, S}, flops, scores + 2 * head});  // dK = dSᵀ·Q: read dS, Q; write dK
  }
  double gemm_bytes = 0;
  for (const auto& x : p) gemm_bytes += x.bytes;
  // Softmax (scale + causal mask fused) and dropout, or their backwards: whatever the op moves
  // beyond the GEMMs, in two kernels.
  const double rest = std::max(0.0, total_bytes - gemm_bytes);
  p.push_back({{}, 0, rest / 2});
  p.push_back({{}, 0, rest / 2});
  return p;
}

namespace {

// One kernel: the fixed overhead plus max(FLOP time at `flop_rate`, HBM time).
double kernel_seconds(const GpuSpec& gpu, const KernelCalibration& cal, double flops,
                      double flop_rate, double bytes) {
  const double mem_s = bytes / (cal.hbm_efficiency * gpu.hbm_bandwidth_TBps * 1e12);
  return cal.kernel_overhead_us * 1e-6 + std::max(flops / flop_rate, mem_s);
}

// MXFP8's block-scaled GEMMs against per-tensor (current-scaling) fp8 on Blackwell, measured by
// Transformer Engine's GEMM profiler on a B300 with pre-quantized operands (GEMM kernels only;
// NVIDIA/TransformerEngine@d0067d0 docs/examples/gemm_profiling/gemm_profiling.rst, hidden 4096,
// FFN 16384, 15,872 tokens): per-layer Fprop 2.365 ms MXFP8 against 2.158 ms fp8 (= 2,702 vs
// 2,961 TFLOP/s), Dgrad 2,666 vs 2,744, Wgrad 2,663 vs 2,749 TFLOP/s.
constexpr double kMxfp8FwdRatio = 2702.0 / 2961.0;                          // 0.913
constexpr double kMxfp8BwdRatio = (2666.0 / 2744.0 + 2663.0 / 2749.0) / 2;  // 0.970
// NVFP4 against per-tensor fp8 in the same pre-quantized profile (per-layer GEMM times, B300):
// Fprop 1.254 ms NVFP4 against 2.158 ms fp8, Dgrad 1.305 against 2.329, Wgrad 1.205 against
// 2.325. The dynamic quantization (and NVFP4's Hadamard transforms) is charged by the casts.
constexpr double kNvfp4FwdRatio = 2.158 / 1.254;                        // 1.721
constexpr double kNvfp4BwdRatio = (2.329 / 1.305 + 2.325 / 1.205) / 2;  // 1.857

double gemm_rate(const GpuSpec& gpu, const KernelCalibration& cal,
                 const std::array<std::uint32_t, 3>& shape,
                 graph::GemmDtype dtype = graph::GemmDtype::Bf16, bool backward = false) {
  if (dtype == graph::GemmDtype::Mxfp8)
    return gemm_rate(gpu, cal, shape, graph::GemmDtype::Fp8) *
           (backward ? kMxfp8BwdRatio : kMxfp8FwdRatio);
  if (dtype == graph::GemmDtype::Nvfp4) {
    // Measured on B300 and applied to every Blackwell GPU. B300 reaches 39 % of its dense FP4
    // peak there (5,096 of 13,125 TFLOP/s), so its 2.92× FP4 / FP8 peak ratio against B200's 2×
    // does not bound the gain; scaling the gain by that ratio was tried (docs/cost-model.md
    // "Blackwell") and not kept.
    SCALESCOPE_EXPECTS(gpu.peak_tflops_fp4 > 0);
    return gemm_rate(gpu, cal, shape, graph::GemmDtype::Fp8) *
           (backward ? kNvfp4BwdRatio : kNvfp4FwdRatio);
  }
  if (dtype == graph::GemmDtype::Fp8) {
    // The fp8 ceiling (MAMF) with the same tile and wave quantization as bf16; the sustained
    // fraction of the bf16 kernels is assumed for fp8 too (no fp8 training data to fit it).
    SCALESCOPE_EXPECTS(gpu.peak_tflops_fp8 > 0 && gpu.gemm_ceiling_fp8_tflops > 0);
    return gpu.gemm_ceiling_fp8_tflops * 1e12 * cal.gemm_efficiency *
           gemm_efficiency(gpu, shape[0], shape[1], shape[2]) /
           (gpu.gemm_ceiling_tflops / gpu.peak_tflops_bf16);
  }
  return gpu.peak_tflops_bf16 * 1e12 * cal.gemm_efficiency *
         gemm_efficiency(gpu, shape[0], shape[1], shape[2]);
}

// A memory-bound op that stands for `kernels` > 1 launches (Op::kernels: a Megatron MoE
// router's top-k, aux-loss and bookkeeping kernels) pays the fixed per-kernel overhead for each:
// its bytes are streamed once, by whichever kernels move them, but every kernel has its own
// launch gap, ramp and tail.
double extra_kernels_seconds(const KernelCalibration& cal, const graph::Op& op) {
  return op.kernels > 1 ? (op.kernels - 1) * cal.kernel_overhead_us * 1e-6 : 0.0;
}

}  // namespace

double sm_contention_factor(const GpuSpec& gpu, const graph::Op& op, std::uint32_t taken) {
  if (taken == 0 || gpu.sms <= 1) return 1.0;
  // A GEMM beside TE userbuffers or DeepEP already runs on the SMs those leave (compute_seconds).
  const double own = op.kind == graph::OpKind::Gemm && op.comm_sms < gpu.sms ? op.comm_sms : 0;
  const double sms = gpu.sms - own;
  const double left = std::max(1.0, sms - static_cast<double>(taken));
  // Waves of `tiles` CTAs, one per SM, on the SMs left against on all of them.
  auto waves = [&](double tiles) { return ceil_div(tiles, left) / ceil_div(tiles, sms); };
  switch (op.kind) {
    case graph::OpKind::Gemm:
      if (op.shape[0] == 0 || op.shape[1] == 0) return sms / left;
      return waves(gemm_tiles(op.shape[0], op.shape[1], sms));
    case graph::OpKind::Attention:
      if (op.attention_impl == graph::AttentionImpl::Unfused || op.shape[0] == 0 ||
          op.shape[1] == 0)
        return sms / left;
      return waves(op.shape[0] * ceil_div(op.shape[1], kAttentionQueryTile));
    default:
      return 1.0;
  }
}

double compute_seconds(const GpuSpec& gpu, const KernelCalibration& cal, const graph::Op& op) {
  SCALESCOPE_EXPECTS(!graph::is_communication(op.kind));
  SCALESCOPE_EXPECTS(op.flops >= 0 && op.mem_bytes >= 0);
  SCALESCOPE_EXPECTS(cal.kernel_overhead_us >= 0 && cal.gemm_efficiency > 0 &&
                     cal.attention_efficiency > 0 && cal.hbm_efficiency > 0);
  const double peak = gpu.peak_tflops_bf16 * 1e12;
  switch (op.kind) {
    case graph::OpKind::Gemm: {
      // A communication kernel overlapped with the GEMM (TE userbuffers) takes comm_sms SMs; the
      // GEMM's rate scales with the SMs left (TE's set_sm_margin).
      const double sm_share =
          op.comm_sms > 0 && op.comm_sms < gpu.sms
              ? static_cast<double>(gpu.sms - op.comm_sms) / static_cast<double>(gpu.sms)
              : 1.0;
      return kernel_seconds(
          gpu, cal, op.flops,
          gemm_rate(gpu, cal, op.shape, op.gemm_dtype, op.phase == graph::Phase::Backward) *
              sm_share,
          op.mem_bytes);
    }
    case graph::OpKind::Attention: {
      const bool backward = op.phase == graph::Phase::Backward;
      if (op.attention_impl == graph::AttentionImpl::Unfused) {
        double t = 0;
        for (const AttentionPass& p : unfused_attention_passes(op.shape, backward, op.mem_bytes))
          t += p.shape[2] > 0
                   ? kernel_seconds(gpu, cal, p.flops, gemm_rate(gpu, cal, p.shape), p.bytes)
                   : kernel_seconds(gpu, cal, 0, peak, p.bytes);
        return t;
      }
      // One fused kernel at the measured rate, which already includes its own memory traffic;
      // the memory term only matters for degenerate shapes. FlashAttention-2 (PyTorch's flash
      // backend) at its fwd+bwd table in both passes. Both scaled by how many waves of query
      // tiles the shape fills.
      const double table = op.attention_impl == graph::AttentionImpl::Flash2
                               ? attention_tflops(gpu, op.shape[1])
                               : attention_pass_tflops(gpu, op.shape[1], backward);
      const double rate =
          table * 1e12 * attention_wave_factor(gpu, op.shape) * cal.attention_efficiency;
      return kernel_seconds(gpu, cal, op.flops, rate, op.mem_bytes);
    }
    case graph::OpKind::Norm:
    case graph::OpKind::Elementwise:
      if (cal.norm_activation_efficiency > 0 &&
          (op.kind == graph::OpKind::Norm || op.name == graph::OpName::Activation)) {
        KernelCalibration c = cal;
        c.hbm_efficiency = cal.norm_activation_efficiency;
        return kernel_seconds(gpu, c, op.flops, peak, op.mem_bytes) +
               extra_kernels_seconds(cal, op);
      }
      return kernel_seconds(gpu, cal, op.flops, peak, op.mem_bytes) +
             extra_kernels_seconds(cal, op);
    default:
      // Elementwise, norm, embedding, loss, optimizer: memory-bound in practice. The tensor-core
      // peak is an optimistic FLOP bound for them (they run on CUDA cores); it only guards against
      // an op that carries FLOPs but no bytes.
      return kernel_seconds(gpu, cal, op.flops, peak, op.mem_bytes) +
             extra_kernels_seconds(cal, op);
  }
}

double compute_seconds(const GpuSpec& gpu, const graph::Op& op) {
  return compute_seconds(gpu, gpu.kernel, op);
}

double host_launches(const graph::Op& op) {
  // Inside a CUDA graph the host launches the graph once, at its first op.
  if (op.cuda_graph != 0) return op.cuda_graph == 2 ? 1 : 0;
  if (op.kernels > 0) return op.kernels;
  if (op.kind == graph::OpKind::Gemm && op.shape[0] > 0 && op.shape[1] > 0 && op.shape[2] > 0) {
    const double one = 2.0 * op.shape[0] * op.shape[1] * op.shape[2];
    return std::max(1.0, std::round(op.flops / one));
  }
  if (op.kind == graph::OpKind::Attention && op.attention_impl == graph::AttentionImpl::Unfused)
    return op.phase == graph::Phase::Backward ? 6 : 4;
  return 1;
}

// Transformer Engine's Python module code around a linear layer's GEMM, measured as CPU time per
// call on GB200 (NVIDIA/TransformerEngine PR #3523, 2026-09-15, the released modules before it:
// Linear bf16 forward 59.19 µs, forward + backward 311.30 µs), in units of a GB200 launch (8.16 µs
// × 37.08 / 13.48 = 22.446 µs, the Grace host of cluster presets; TE issue #2053's torch Linear on
// GB200 against a DGX H100 host), so that it scales with the host like a launch does. The
// forward's GEMM op carries the forward, 59.19 / 22.446 = 2.637 launches; each of the backward's
// two GEMM ops (dgrad, wgrad) half the backward, (311.30 − 59.19) / 2 / 22.446 = 5.616. Beyond
// the op's own launches: 1.637 and 4.616. The quantization kernels of fp8 are the casts' own
// launches (MXFP8 Linear: 114.51 / 440.93 µs, about two and four launches more than bf16).
constexpr double kGraceLaunchUs = 8.16 * 37.08 / 13.48;
constexpr double kTeLinearFwdLaunches = 59.19 / kGraceLaunchUs;
constexpr double kTeLinearBwdLaunches = (311.30 - 59.19) / 2 / kGraceLaunchUs;

double host_module_launches(const graph::Op& op) {
  if (op.cuda_graph != 0 || op.kind != graph::OpKind::Gemm) return 0;
  switch (op.name) {
    // Megatron-Core's TE layer spec: TELayerNormColumnParallelLinear (QKV, FC1),
    // TERowParallelLinear (out-projection, FC2), TE linears of MLA and MTP, the experts'
    // TEGroupedLinear (one module call for the rank's experts) and the shared experts.
    case graph::OpName::QkvGemm:
    case graph::OpName::OutProjGemm:
    case graph::OpName::Fc1Gemm:
    case graph::OpName::Fc2Gemm:
    case graph::OpName::ExpertFc1Gemm:
    case graph::OpName::ExpertFc2Gemm:
    case graph::OpName::SharedFc1Gemm:
    case graph::OpName::SharedFc2Gemm:
    case graph::OpName::QDownGemm:
    case graph::OpName::KvDownGemm:
    case graph::OpName::QUpGemm:
    case graph::OpName::KvUpGemm:
    case graph::OpName::MtpProjGemm:
      return op.phase == graph::Phase::Backward ? kTeLinearBwdLaunches - 1
                                                : kTeLinearFwdLaunches - 1;
    default:
      return 0;
  }
}

double host_seconds(const KernelCalibration& cal, const graph::Op& op) {
  SCALESCOPE_EXPECTS(cal.host_launch_us >= 0);
  return cal.host_launch_us > 0
             ? (host_launches(op) + host_module_launches(op)) * cal.host_launch_us * 1e-6
             : 0.0;
}

}  // namespace scalescope::cost
