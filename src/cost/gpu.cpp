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

// No FA2 measurement on B200 was found: B200's FA2 row is H100's scaled by the ratio of their
// measured GEMM ceilings (MAMF, MODELING §6.2), 1745 / 794.5 = 2.196. An estimate, used only where
// training.attention is flash2 on Blackwell.
std::vector<double> scaled(const std::vector<double>& v, double factor) {
  std::vector<double> out;
  out.reserve(v.size());
  for (double x : v) out.push_back(x * factor);
  return out;
}

// Blackwell's fused attention per pass, hd128, causal, bf16, at the FA benchmark points
// (s = 512 … 16k, batch·s = 16k, 16 heads; FLOPs 4·b·h·s²·d/2 forward, 2.5× that backward).
// FlashAttention-4 forward measured on B200 at exactly those shapes (Dao-AILab/flash-attention
// commit cbbab839, PR #2642, 2026-06-16, median of 300 iterations); its backward is not
// published at those shapes, so it is the forward × 0.852, FA4's measured causal bwd/fwd at
// s = 8k (1208.6 / 1418.1, 2-CTA backward, PR #2280). Transformer Engine runs cuDNN's SDPA, not
// FA4, on Blackwell; FA4 gives the shape of the short-sequence points below and a cross-check
// (the FA4 paper, arXiv 2603.05451: "up to 1.3× over cuDNN 9.13 … on B200").
const std::vector<double> kFa4FwdB200{500.6, 796.5, 1124.6, 1407.9, 1604.1, 1683.7};
const std::vector<double> kFa4BwdB200 = scaled(kFa4FwdB200, 1208.6 / 1418.1);
// GB200 / GB300: cuDNN's SDPA training benchmark (NVIDIA/cudnn-frontend@3929da2
// benchmark/sdpa_benchmark_training/results/llama3.1/{gb200,gb300}/*.csv, cuDNN backend 92200,
// bf16, causal top_left, b = 2, 64 query heads, hd128: b·h = 128, the FA grid's at s = 2k) at
// s = 2k, 4k, 8k, 16k; s = 512 and 1k are not measured there and are FA4's B200 points scaled
// by the GPU's 2k ratio to them (GB200 fwd 1097 / 1124.6, bwd 885 / (1124.6 · 0.852); GB300
// likewise): the short-sequence fall-off of one Blackwell kernel applied to the other.
std::vector<double> with_short_points(std::vector<double> measured_2k_to_16k,
                                      const std::vector<double>& b200, double b200_2k) {
  const double r = measured_2k_to_16k.front() / b200_2k;
  measured_2k_to_16k.insert(measured_2k_to_16k.begin(), {b200[0] * r, b200[1] * r});
  return measured_2k_to_16k;
}
const std::vector<double> kCudnnFwdGb200 =
    with_short_points({1097, 1408, 1574, 1708}, kFa4FwdB200, kFa4FwdB200[2]);
const std::vector<double> kCudnnBwdGb200 =
    with_short_points({885, 1148, 1332, 1328}, kFa4BwdB200, kFa4BwdB200[2]);
const std::vector<double> kCudnnFwdGb300 =
    with_short_points({1373, 1703, 1856, 1915}, kFa4FwdB200, kFa4FwdB200[2]);
const std::vector<double> kCudnnBwdGb300 =
    with_short_points({967, 1248, 1435, 1507}, kFa4BwdB200, kFa4BwdB200[2]);

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
      g.peak_tflops_bf16 = 2250;  // glennklockwood.com B200 HGX table, 1000 W, dense (§6.1)
      g.hbm_bytes = 192e9;        // 192 GB HBM3e in 8 stacks (glennklockwood.com B200 page)
      // CUDA-visible total 182,642 MiB (a B200 device dump beside nvidia-smi's 183,359 MiB;
      // pytorch/ao PR #4002's device query: 178.35 GiB). NVIDIA's "180 GB" label is GiB.
      g.hbm_usable_bytes = 182642.0 * (1 << 20);
      g.hbm_bandwidth_TBps = 8.0;     // glennklockwood.com B200 HGX table (§6.1)
      g.nvlink_bandwidth_GBps = 900;  // 1.8 TB/s bidirectional NVLink5 / 2 (§6.1)
      // Chips and Cheese, "Nvidia's B200: Keeping the CUDA Juggernaut Rolling" (2025): 74 SMs
      // on each of the 2 dies; pytorch/ao PR #4002's device query: 148 SMs.
      g.sms = 148;
      g.gemm_ceiling_tflops = 1745;        // ml-engineering MAMF table, 77.6 % of peak (§6.2)
      g.peak_tflops_fp8 = 4500;            // HGX B200 dense FP8 (MODELING §6.1)
      g.peak_tflops_fp4 = 9000;            // glennklockwood.com B200 page, HGX table, FP4 dense
      g.gemm_ceiling_fp8_tflops = 3432.5;  // ml-engineering MAMF table, B200 FP8 (MODELING §6.2)
      g.attention_tflops = scaled(kFlashHopper, 1745.0 / 794.5);  // FA2 estimate, see scaled()
      // No cuDNN measurement on HGX B200: GB200's (the same die) × the ratio of dense peaks,
      // 2250 / 2500 (1000 W against 1200 W). An estimate; FA4 measured on B200 is 1.14× it at 2k.
      g.attention_fwd_tflops = scaled(kCudnnFwdGb200, 2250.0 / 2500.0);
      g.attention_bwd_tflops = scaled(kCudnnBwdGb200, 2250.0 / 2500.0);
      r.push_back({g,
                   {1792, 16128, 3072},  // MAMF best shape (§6.2)
                   {"B200", "B200-SXM", "HGX-B200", "DGX-B200", "B200-SXM-180GB"}});
    }
    {
      // Blackwell Ultra in an 8-GPU HGX/DGX B300 board.
      GpuSpec g;
      g.name = "B300";
      g.peak_tflops_bf16 = 2250;  // glennklockwood.com B300 HGX table; ml-engineering (§6.1)
      g.peak_tflops_fp8 = 4500;   // the same tables
      // glennklockwood.com B300 page, HGX table, FP4 13,125 ("Dense FP4 performance is up (13 PF
      // on B300 vs. 9.0 PF on B200)").
      g.peak_tflops_fp4 = 13125;
      g.hbm_bytes = 288e9;  // NVIDIA "Inside Blackwell Ultra": eight 12-Hi HBM3e stacks
      // nvidia-smi memory.total 275,040 MiB ("NVIDIA B300 SXM6 AC"); no CUDA-visible figure was
      // found, which on B200 / H200 is 0.4 % below nvidia-smi's.
      g.hbm_usable_bytes = 275040.0 * (1 << 20);
      g.hbm_bandwidth_TBps = 8.0;     // "Inside Blackwell Ultra": 8 TB/s
      g.nvlink_bandwidth_GBps = 900;  // NVLink 5, 18 links × 100 GB/s bidirectional / 2
      g.sms = 148;  // B300 SXM6 AC microbenchmark reports (third party; the full die has 160)
      g.gemm_ceiling_tflops = 1769;        // ml-engineering MAMF table, B300 (78.6 %)
      g.gemm_ceiling_fp8_tflops = 3353.3;  // ml-engineering MAMF table, B300 FP8
      g.attention_tflops = scaled(kFlashHopper, 1769.0 / 794.5);  // FA2 estimate, as B200's
      // No B300 attention measurement: GB300's cuDNN rates (the same Blackwell Ultra SM) × the
      // ratio of dense peaks, 2250 / 2500 (B300 runs at 1000 W, GB300 at 1400 W). An estimate.
      g.attention_fwd_tflops = scaled(kCudnnFwdGb300, 2250.0 / 2500.0);
      g.attention_bwd_tflops = scaled(kCudnnBwdGb300, 2250.0 / 2500.0);
      r.push_back({g,
                   {12288, 18432, 1024},  // MAMF best shape
                   {"B300", "B300-SXM", "B300-SXM6", "HGX-B300", "DGX-B300", "B300-SXM-270GB"}});
    }
    {
      // The Blackwell GPU of a GB200 superchip (NVL72), 1200 W: a faster clock than HGX B200.
      GpuSpec g;
      g.name = "GB200";
      g.peak_tflops_bf16 = 2500;  // glennklockwood.com B200 page, "GB200 variant … 1,200 W"
      g.peak_tflops_fp8 = 5000;   // the same
      g.peak_tflops_fp4 = 10000;  // the same (FP4 dense)
      g.hbm_bytes = 192e9;        // the B200 die's 8 HBM3e stacks; NVIDIA's label 186 GB (GiB)
      // nvidia-smi memory.total 189,471 MiB (TACC Vista's GB200 nodes, and device fixtures).
      g.hbm_usable_bytes = 189471.0 * (1 << 20);
      g.hbm_bandwidth_TBps = 8.0;     // ml-engineering memory table (GB200 186 GB, 8 TB/s)
      g.nvlink_bandwidth_GBps = 900;  // NVLink 5 (§6.1)
      g.sms = 148;  // not published: 148 × 8192 FLOP/clk × 2.062 GHz = the 2.5 PF datasheet
      g.gemm_ceiling_tflops = 1822;        // ml-engineering MAMF table, GB200 (72.9 %)
      g.gemm_ceiling_fp8_tflops = 3615.6;  // ml-engineering MAMF table, GB200 FP8
      g.attention_tflops = scaled(kFlashHopper, 1822.0 / 794.5);  // FA2 estimate, as B200's
      g.attention_fwd_tflops = kCudnnFwdGb200;  // cuDNN measured, see kCudnnFwdGb200
      g.attention_bwd_tflops = kCudnnBwdGb200;
      r.push_back({g,
                   {4096, 9728, 2048},  // MAMF best shape
                   {"GB200", "GB200-NVL72", "GB200-186GB"}});
    }
    {
      // Blackwell Ultra in a GB300 superchip (NVL72), 1400 W.
      GpuSpec g;
      g.name = "GB300";
      g.peak_tflops_bf16 = 2500;       // ml-engineering dense table; verda.com GB300 table
      g.peak_tflops_fp8 = 5000;        // the same; glennklockwood GB300 NVL72: 360 PF FP8 / 72
      g.peak_tflops_fp4 = 1.1e6 / 72;  // glennklockwood GB300 NVL72: "1.1 EF dense FP4" / 72
      g.hbm_bytes = 288e9;             // "Inside Blackwell Ultra": 288 GB HBM3e
      g.hbm_usable_bytes = 284208.0 * (1 << 20);  // nvidia-smi memory.total 284,208 MiB
      g.hbm_bandwidth_TBps = 8.0;                 // "Inside Blackwell Ultra": 8 TB/s
      g.nvlink_bandwidth_GBps = 900;              // NVLink 5
      g.sms = 148;  // kernel-tuning comments "GB300 (148 SMs)" (third party, weak)
      // No MAMF entry for GB300: GB200's measured ceilings (the same dense peaks). An estimate.
      g.gemm_ceiling_tflops = 1822;
      g.gemm_ceiling_fp8_tflops = 3615.6;
      g.attention_tflops = scaled(kFlashHopper, 1822.0 / 794.5);  // FA2 estimate
      g.attention_fwd_tflops = kCudnnFwdGb300;  // cuDNN measured, see kCudnnFwdGb200
      g.attention_bwd_tflops = kCudnnBwdGb300;
      r.push_back({g,
                   {4096, 9728, 2048},  // GB200's MAMF best shape (the ceiling's)
                   {"GB300", "GB300-NVL72", "GB300-279GB"}});
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
