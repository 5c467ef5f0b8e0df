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

double attention_tflops(const GpuSpec& gpu, double seq) {
  const auto& t = gpu.attention_tflops;
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

double compute_seconds(const GpuSpec& gpu, const graph::Op& op) {
  SCALESCOPE_EXPECTS(!graph::is_communication(op.kind));
  SCALESCOPE_EXPECTS(op.flops >= 0 && op.mem_bytes >= 0);
  const double peak = gpu.peak_tflops_bf16 * 1e12;
  const double mem_s = op.mem_bytes / (kHbmEfficiency * gpu.hbm_bandwidth_TBps * 1e12);
  double flop_s = 0;
  switch (op.kind) {
    case graph::OpKind::Gemm:
      flop_s = op.flops / (peak * gemm_efficiency(gpu, op.shape[0], op.shape[1], op.shape[2]));
      break;
    case graph::OpKind::Attention:
      // The FA2 rate already includes the kernel's own memory traffic; the memory term only
      // matters for degenerate shapes.
      flop_s = op.flops / (attention_tflops(gpu, op.shape[1]) * 1e12);
      break;
    default:
      // Elementwise, norm, embedding, loss, optimizer: memory-bound in practice. The tensor-core
      // peak is an optimistic FLOP bound for them (they run on CUDA cores); it only guards against
      // an op that carries FLOPs but no bytes.
      flop_s = op.flops / peak;
      break;
  }
  return std::max(flop_s, mem_s) + kLaunchOverheadSeconds;
}

}  // namespace scalescope::cost
