// The GPU table. Every number names its source; section numbers refer to shared/MODELING.md,
// which records where and when each source was read.
#include "cost/gpu.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "core/error.hpp"

namespace scalescope::cost {
namespace {

struct Row {
  GpuSpec spec;
  std::array<std::uint32_t, 3> ceiling_shape;  ///< shape at which gemm_ceiling_tflops was measured
  std::vector<std::string_view> aliases;       ///< upper-case, canonical name included
};

// FlashAttention-2 fwd+bwd, hd128, causal, at s = 512 / 1k / 2k / 4k / 8k / 16k: the FA2 paper
// figures shipped as flash-attention/assets/*.png and tabulated in MODELING §6.3 (A100; the H100
// figure, 163 / 221 / 265 / 294 / 308 / 328, is replaced by our measurement below).
const std::vector<double> kFa2A100{99, 133, 155, 173, 182, 189};
// Hopper's fused attention per pass, hd128, causal, at the same points: cuDNN's SDPA (what
// Transformer Engine runs on Hopper) measured on our H200 at FlashAttention's benchmark shapes
// (16k tokens × 16 heads: batch·heads·s = 262,144, 2,048 query tiles, 15.5 waves on 132 SMs),
// PyTorch 2.11 / cuDNN 9.19 (inputs/profiles/h200-torch/h200_ops.csv rows fa-bench:cudnn,
// docs/h200-measurements.md §3): forward = its FLOPs / its median time; backward = 2.5 × the
// forward FLOPs / (fwd+bwd − fwd). The H100 has the same GH100 compute (132 SMs, 1,980 MHz);
// attention is compute-bound. The forward equals FlashAttention-3's paper figure within −3 …
// +13 % (MODELING §6.3: 292 … 616); the backward is 0.68 … 0.96 of FA3's (316 … 561).
const std::vector<double> kCudnnFwdHopper{330.1, 435.2, 520.6, 582.6, 618.7, 611.0};
const std::vector<double> kCudnnBwdHopper{214.5, 321.1, 419.7, 492.6, 515.8, 541.1};
// PyTorch's flash SDPA backend (FlashAttention-2) fwd+bwd on Hopper, measured the same way
// (h200_ops.csv rows fa-bench:flash, fwd+bwd: 3.5 × the forward FLOPs / its median time):
// 0.80 … 0.96 of the FA2 paper's H100 figure.
const std::vector<double> kFlashHopper{130.0, 186.1, 234.8, 267.2, 292.4, 314.7};

// No FA2 measurement on B200 was found: B200's row is H100's scaled by the ratio of their measured
// GEMM ceilings (MAMF, MODELING §6.2), 1745 / 794.5 = 2.196. An estimate, to be replaced by a
// measurement.
std::vector<double> scaled(const std::vector<double>& v, double factor) {
  std::vector<double> out;
  out.reserve(v.size());
  for (double x : v) out.push_back(x * factor);
  return out;
}

const std::vector<Row>& table() {
  static const std::vector<Row> rows = [] {
    std::vector<Row> r;
    {
      GpuSpec g;
      g.name = "A100-SXM4-80GB";
      g.peak_tflops_bf16 = 312;                  // A100 datasheet, dense BF16 (MODELING §6.1)
      g.hbm_bytes = 80e9;                        // A100 datasheet "80GB HBM2e", decimal (§6.1)
      g.hbm_usable_bytes = 81920.0 * (1 << 20);  // nvidia-smi memory.total 81920 MiB (A100 80GB)
      g.hbm_bandwidth_TBps = 2.039;              // A100 80GB SXM datasheet (§6.1)
      g.nvlink_bandwidth_GBps = 300;  // 600 GB/s bidirectional (12 x NVLink3) / 2 (§6.1)
      g.sms = 108;                    // Ampere GA100 whitepaper, A100 config (§6.1)
      g.gemm_ceiling_tflops = 271.2;  // ml-engineering MAMF table, 86.9 % of peak (§6.2)
      g.attention_tflops = kFa2A100;  // FA2 paper figure, A100-80GB SXM (§6.3)
      r.push_back({g,
                   {1024, 10240, 5120},  // MAMF best shape M x N x K (§6.2)
                   {"A100-SXM4-80GB", "A100", "A100-80GB", "A100-SXM", "A100-SXM4"}});
    }
    {
      GpuSpec g;
      g.name = "H100-SXM";
      g.peak_tflops_bf16 = 989.4;  // H100 whitepaper / hpctech table, dense BF16 (§6.1)
      g.hbm_bytes = 80e9;          // H100 SXM5 "80 GB HBM3", decimal (§6.1)
      g.hbm_usable_bytes = 81559.0 * (1 << 20);  // nvidia-smi memory.total 81559 MiB (79.6 GiB)
      g.hbm_bandwidth_TBps = 3.35;               // H100 SXM5 datasheet (§6.1)
      g.nvlink_bandwidth_GBps = 450;       // 900 GB/s bidirectional (18 x NVLink4) / 2 (§6.1)
      g.sms = 132;                         // H100 whitepaper, SXM5 config (§6.1)
      g.gemm_ceiling_tflops = 794.5;       // ml-engineering MAMF table, 80.3 % of peak (§6.2)
      g.peak_tflops_fp8 = 1978.9;          // H100 SXM5 dense FP8 (MODELING §6.1)
      g.gemm_ceiling_fp8_tflops = 1402.6;  // ml-engineering MAMF table, FP8 (MODELING §6.2)
      g.attention_tflops = kFlashHopper;   // measured, see kFlashHopper
      g.attention_fwd_tflops = kCudnnFwdHopper;  // cuDNN measured, see kCudnnFwdHopper
      g.attention_bwd_tflops = kCudnnBwdHopper;
      r.push_back({g,
                   {2048, 2048, 13312},  // MAMF best shape (§6.2)
                   {"H100-SXM", "H100", "H100-SXM5", "H100-SXM5-80GB", "H100-80GB"}});
    }
    {
      GpuSpec g;
      g.name = "H200-SXM";
      g.peak_tflops_bf16 = 989.4;  // same GH100 die as H100 (H200 spec pages, §6.1)
      g.hbm_bytes = 141e9;         // H200 spec pages "141 GB HBM3e" (§6.1)
      // torch.cuda.get_device_properties total_memory on our H200 (inputs/profiles/h200-torch).
      g.hbm_usable_bytes = 150109880320.0;
      g.hbm_bandwidth_TBps = 4.8;          // H200 spec pages (§6.1)
      g.nvlink_bandwidth_GBps = 450;       // 900 GB/s bidirectional / 2 (§6.1)
      g.sms = 132;                         // same GH100 configuration as H100 SXM5 (§6.1)
      g.gemm_ceiling_tflops = 794.5;       // MAMF table: H200 "same as H100" (§6.2)
      g.peak_tflops_fp8 = 1978.9;          // same GH100 die (MODELING §6.1)
      g.gemm_ceiling_fp8_tflops = 1453.4;  // ml-engineering MAMF table, H200 FP8 (MODELING §6.2)
      g.attention_tflops = kFlashHopper;   // measured on this GPU, see kFlashHopper
      g.attention_fwd_tflops = kCudnnFwdHopper;  // measured on this GPU, see kCudnnFwdHopper
      g.attention_bwd_tflops = kCudnnBwdHopper;
      r.push_back({g,
                   {2048, 2048, 13312},  // H100's MAMF best shape (§6.2)
                   {"H200-SXM", "H200", "H200-SXM-141GB", "H200-141GB"}});
    }
    {
      GpuSpec g;
      g.name = "B200";
      g.peak_tflops_bf16 = 2250;      // glennklockwood.com B200 HGX table, 1000 W, dense (§6.1)
      g.hbm_bytes = 180e9;            // 192 GB HBM3e, ~180 GB usable on HGX/DGX; vultr: 179 GB
      g.hbm_usable_bytes = 179e9;     // vultr HGX B200 page: 179 GB visible (§6.1)
                                      // visible (§6.1). The usable figure, since it bounds memory.
      g.hbm_bandwidth_TBps = 8.0;     // glennklockwood.com B200 HGX table (§6.1)
      g.nvlink_bandwidth_GBps = 900;  // 1.8 TB/s bidirectional NVLink5 / 2 (§6.1)
      // Chips and Cheese, "Nvidia's B200: Keeping the CUDA Juggernaut Rolling" (2025): 74 SMs
      // enabled on each of the 2 dies. §6.1 marks the SM reports as conflicting.
      g.sms = 148;
      g.gemm_ceiling_tflops = 1745;        // ml-engineering MAMF table, 77.6 % of peak (§6.2)
      g.peak_tflops_fp8 = 4500;            // HGX B200 dense FP8 (MODELING §6.1)
      g.gemm_ceiling_fp8_tflops = 3432.5;  // ml-engineering MAMF table, B200 FP8 (MODELING §6.2)
      g.attention_tflops = scaled(kFlashHopper, 1745.0 / 794.5);  // estimate, see scaled()
      r.push_back({g,
                   {1792, 16128, 3072},  // MAMF best shape (§6.2)
                   {"B200", "B200-SXM", "HGX-B200", "DGX-B200"}});
    }
    return r;
  }();
  return rows;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

const Row* find_row(std::string_view name) {
  const std::string key = upper(name);
  for (const Row& row : table())
    if (std::find(row.aliases.begin(), row.aliases.end(), key) != row.aliases.end()) return &row;
  return nullptr;
}

}  // namespace

const GpuSpec& find_gpu(std::string_view name) {
  if (const Row* row = find_row(name)) return row->spec;
  std::vector<std::string> known;
  for (const Row& row : table())
    for (std::string_view alias : row.aliases) known.emplace_back(alias);
  throw_input("unknown GPU '{}' (known: {})", name, fmt::join(known, ", "));
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> names;
  for (const Row& row : table()) names.push_back(row.spec.name);
  return names;
}

std::array<std::uint32_t, 3> gemm_ceiling_shape(const GpuSpec& gpu) {
  if (const Row* row = find_row(gpu.name)) return row->ceiling_shape;
  return {0, 0, 0};
}

}  // namespace scalescope::cost
