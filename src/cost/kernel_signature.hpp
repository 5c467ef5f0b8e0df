#pragma once
/// The measurable kernel behind a graph op: its class, dimensions and canonical signature string
/// (docs/kernels.md). Equal signatures are one measurement, whatever op or rank they come from.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "graph/op.hpp"

namespace scalescope::cost {

enum class KernelClass : std::uint8_t {
  None,  ///< not measurable (communication, unfused attention): the roofline model stays
  Gemm,
  Attention,
  RmsNorm,
  LayerNorm,
  SwiGlu,
  Gelu,
  Rope,
  CrossEntropy,
  Adam,
  Embedding,
  Copy,
};
std::string_view kernel_class_name(KernelClass k);

struct KernelSig {
  KernelClass kernel = KernelClass::None;
  bool backward = false;
  bool fp8 = false;    ///< GEMM: e4m3 operands
  bool causal = true;  ///< attention
  /// gemm m, n, k; attention bh, sq, sk, d, dv; norms / activations / cross-entropy rows, cols;
  /// rope rows, heads, dim; adam params; embedding rows, cols, vocab; copy bytes.
  std::array<std::int64_t, 5> dims{};
  /// How many times the kernel runs for the op: a grouped expert GEMM is E_local GEMMs of the
  /// per-expert shape (op FLOPs / 2·m·n·k); 1 otherwise.
  double repeat = 1;

  bool measurable() const { return kernel != KernelClass::None; }
  /// The canonical string, e.g. "gemm:bf16:m=4096:n=1280:k=8192".
  std::string key() const;
  /// FLOPs and bytes of one run (for TFLOP/s and GB/s of a measurement).
  double flops() const;
};

/// The kernel of a compute op (communication ops give KernelClass::None).
KernelSig kernel_signature(const graph::Op& op);

}  // namespace scalescope::cost
