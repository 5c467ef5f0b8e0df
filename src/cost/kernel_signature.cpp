#include "cost/kernel_signature.hpp"

#include <fmt/format.h>

#include <cmath>

namespace scalescope::cost {

std::string_view kernel_class_name(KernelClass k) {
  switch (k) {
    case KernelClass::Gemm:
      return "gemm";
    case KernelClass::Attention:
      return "attention";
    case KernelClass::RmsNorm:
      return "rmsnorm";
    case KernelClass::LayerNorm:
      return "layernorm";
    case KernelClass::SwiGlu:
      return "swiglu";
    case KernelClass::Gelu:
      return "gelu";
    case KernelClass::Rope:
      return "rope";
    case KernelClass::CrossEntropy:
      return "cross_entropy";
    case KernelClass::Adam:
      return "adam";
    case KernelClass::Embedding:
      return "embedding";
    case KernelClass::Copy:
      return "copy";
    case KernelClass::None:
      break;
  }
  return "none";
}

namespace {
std::int64_t round_dim(double x) {
  return static_cast<std::int64_t>(std::llround(x));
}
KernelSig copy_of(const graph::Op& op) {
  KernelSig s;
  s.kernel = KernelClass::Copy;
  s.dims[0] = round_dim(op.mem_bytes);
  if (s.dims[0] <= 0) s.kernel = KernelClass::None;
  return s;
}
bool has_shape(const graph::Op& op) {
  return op.shape[0] > 0 && op.shape[1] > 0;
}
}  // namespace

KernelSig kernel_signature(const graph::Op& op) {
  KernelSig s;
  if (graph::is_communication(op.kind)) return s;
  // An op that stands for several kernels (Op::kernels: a Megatron MoE router's or permute's) is
  // not one measured kernel: it keeps the analytical time, which charges each kernel's overhead.
  if (op.kernels > 1) return s;
  s.backward = op.phase == graph::Phase::Backward;
  switch (op.kind) {
    case graph::OpKind::Gemm: {
      if (op.shape[0] == 0 || op.shape[1] == 0 || op.shape[2] == 0) return s;
      // Block-scaled GEMMs (MXFP8, NVFP4) are not measured (the kernel runner times bf16 and
      // per-tensor fp8): a per-tensor fp8 measurement of the same shape would stand in for them
      // without a word, so they keep the analytical rate.
      if (op.gemm_dtype == graph::GemmDtype::Mxfp8 || op.gemm_dtype == graph::GemmDtype::Nvfp4)
        return s;
      s.kernel = KernelClass::Gemm;
      s.backward = false;
      s.fp8 = op.gemm_dtype == graph::GemmDtype::Fp8;
      s.dims = {op.shape[0], op.shape[1], op.shape[2], 0, 0};
      const double one = 2.0 * op.shape[0] * op.shape[1] * op.shape[2];
      s.repeat = op.flops > 0 ? op.flops / one : 1.0;
      return s;
    }
    case graph::OpKind::Attention: {
      if (op.attention_impl != graph::AttentionImpl::Fused || !has_shape(op) || op.shape[2] == 0)
        return s;
      // Fused causal attention: FLOPs = factor · bh · sq · sk · (d + dv), factor 1 forward and
      // recompute, 2.5 backward (the builder's convention, MODELING §1.1).
      const double d = op.shape[2];
      const double dv = op.value_dim > 0 ? op.value_dim : d;
      const double factor = s.backward ? 2.5 : 1.0;
      s.kernel = KernelClass::Attention;
      s.dims = {op.shape[0], op.shape[1],
                round_dim(op.flops / (factor * op.shape[0] * op.shape[1] * (d + dv))), op.shape[2],
                round_dim(dv)};
      return s;
    }
    case graph::OpKind::Norm:
      if (!has_shape(op)) return copy_of(op);
      s.kernel = op.shape[2] == 1 ? KernelClass::LayerNorm : KernelClass::RmsNorm;
      s.dims = {op.shape[0], op.shape[1], 0, 0, 0};
      return s;
    case graph::OpKind::Loss:
      if (!has_shape(op)) return copy_of(op);
      s.kernel = KernelClass::CrossEntropy;
      s.dims = {op.shape[0], op.shape[1], 0, 0, 0};
      return s;
    case graph::OpKind::Optimizer:
      if (!has_shape(op)) return copy_of(op);
      s.kernel = KernelClass::Adam;
      s.backward = false;
      s.dims = {static_cast<std::int64_t>(op.shape[0]) * op.shape[1], 0, 0, 0, 0};
      return s;
    case graph::OpKind::Embedding:
      if (!has_shape(op)) return copy_of(op);
      s.kernel = KernelClass::Embedding;
      s.dims = {op.shape[0], op.shape[1], op.shape[2], 0, 0};
      return s;
    case graph::OpKind::Elementwise:
      if ((op.name == graph::OpName::Activation || op.name == graph::OpName::ExpertActivation) &&
          has_shape(op)) {
        s.kernel = op.shape[2] == 2 ? KernelClass::SwiGlu : KernelClass::Gelu;
        s.dims = {op.shape[0], op.shape[1], 0, 0, 0};
        return s;
      }
      if (op.name == graph::OpName::Rope && has_shape(op) && op.shape[2] > 0) {
        s.kernel = KernelClass::Rope;
        s.dims = {op.shape[0], op.shape[1], op.shape[2], 0, 0};
        return s;
      }
      return copy_of(op);
    default:
      return copy_of(op);
  }
}

std::string KernelSig::key() const {
  const std::string_view name = kernel_class_name(kernel);
  const char* pass = backward ? "bwd" : "fwd";
  switch (kernel) {
    case KernelClass::Gemm:
      return fmt::format("gemm:{}:m={}:n={}:k={}", fp8 ? "fp8" : "bf16", dims[0], dims[1], dims[2]);
    case KernelClass::Attention:
      return fmt::format("attention:{}:bh={}:sq={}:sk={}:d={}:dv={}:causal={}", pass, dims[0],
                         dims[1], dims[2], dims[3], dims[4], causal ? 1 : 0);
    case KernelClass::RmsNorm:
    case KernelClass::LayerNorm:
    case KernelClass::SwiGlu:
    case KernelClass::Gelu:
      return fmt::format("{}:{}:rows={}:cols={}", name, pass, dims[0], dims[1]);
    case KernelClass::CrossEntropy:
      return fmt::format("cross_entropy:{}:rows={}:vocab={}", pass, dims[0], dims[1]);
    case KernelClass::Rope:
      return fmt::format("rope:{}:rows={}:heads={}:dim={}", pass, dims[0], dims[1], dims[2]);
    case KernelClass::Adam:
      return fmt::format("adam:params={}", dims[0]);
    case KernelClass::Embedding:
      return fmt::format("embedding:{}:rows={}:cols={}:vocab={}", pass, dims[0], dims[1], dims[2]);
    case KernelClass::Copy:
      return fmt::format("copy:bytes={}", dims[0]);
    case KernelClass::None:
      break;
  }
  return "none";
}

double KernelSig::flops() const {
  const auto d = [&](int i) { return static_cast<double>(dims[static_cast<std::size_t>(i)]); };
  switch (kernel) {
    case KernelClass::Gemm:
      return 2 * d(0) * d(1) * d(2);
    case KernelClass::Attention:
      // FlashAttention's convention: 2·bh·sq·sk·(d + dv), halved for the causal mask, ×2.5
      // for the backward.
      return (backward ? 2.5 : 1.0) * (causal ? 0.5 : 1.0) * 2 * d(0) * d(1) * d(2) * (d(3) + d(4));
    default:
      return 0;
  }
}

}  // namespace scalescope::cost
