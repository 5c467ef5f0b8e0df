#pragma once
/// The host backend's kernels (docs/kernels.md kernel classes), written with Kokkos (Debian's
/// Kokkos is Serial-only, ../shared/TOOLCHAIN.md). fp32 storage: the host backend exists so that
/// the whole measure → profile → replay path runs without a GPU, not for speed. Row-major.
#include <Kokkos_Core.hpp>
#include <cstdint>

namespace scalescope::kernels::host {

using Vec = Kokkos::View<float*, Kokkos::HostSpace>;

/// C[m,n] = A[m,k]·B[k,n].
void gemm(const Vec& a, const Vec& b, const Vec& c, std::int64_t m, std::int64_t n, std::int64_t k);
/// Causal (when `causal`) attention per head: Q [bh, sq, d], K [bh, sk, d], V [bh, sk, dv] →
/// O [bh, sq, dv] and the log-sum-exp [bh, sq]; query i sees keys j ≤ i + (sk − sq).
void attention_fwd(const Vec& q, const Vec& k, const Vec& v, const Vec& o, const Vec& lse,
                   std::int64_t bh, std::int64_t sq, std::int64_t sk, std::int64_t d,
                   std::int64_t dv, bool causal);
/// dQ, dK, dV from dO, O and the forward's LSE (recomputing P).
void attention_bwd(const Vec& q, const Vec& k, const Vec& v, const Vec& o, const Vec& lse,
                   const Vec& dout, const Vec& dq, const Vec& dk, const Vec& dv_out,
                   std::int64_t bh, std::int64_t sq, std::int64_t sk, std::int64_t d,
                   std::int64_t dv, bool causal);
/// RMSNorm over rows: y = x / sqrt(mean(x²) + eps) · g. Backward: dx (dg accumulated).
void rmsnorm_fwd(const Vec& x, const Vec& g, const Vec& y, std::int64_t rows, std::int64_t cols);
void rmsnorm_bwd(const Vec& x, const Vec& g, const Vec& dy, const Vec& dx, const Vec& dg,
                 std::int64_t rows, std::int64_t cols);
/// LayerNorm: y = (x − μ)/σ · g + b.
void layernorm_fwd(const Vec& x, const Vec& g, const Vec& b, const Vec& y, std::int64_t rows,
                   std::int64_t cols);
void layernorm_bwd(const Vec& x, const Vec& g, const Vec& dy, const Vec& dx, const Vec& dg,
                   const Vec& db, std::int64_t rows, std::int64_t cols);
/// SwiGLU: in [rows, 2·cols] = [a ‖ b], y = silu(a)·b. Backward: din [rows, 2·cols].
void swiglu_fwd(const Vec& in, const Vec& y, std::int64_t rows, std::int64_t cols);
void swiglu_bwd(const Vec& in, const Vec& dy, const Vec& din, std::int64_t rows, std::int64_t cols);
/// tanh-approximated GELU.
void gelu_fwd(const Vec& x, const Vec& y, std::int64_t n);
void gelu_bwd(const Vec& x, const Vec& dy, const Vec& dx, std::int64_t n);
/// Rotary embedding of x [rows, heads, dim] in place, position = row, base 10000; `inverse`
/// rotates back (the backward).
void rope(const Vec& x, std::int64_t rows, std::int64_t heads, std::int64_t dim, bool inverse);
/// Cross-entropy of logits [rows, vocab] against labels: loss [rows]; backward dlogits.
void cross_entropy_fwd(const Vec& logits,
                       const Kokkos::View<std::int64_t*, Kokkos::HostSpace>& labels,
                       const Vec& loss, std::int64_t rows, std::int64_t vocab);
void cross_entropy_bwd(const Vec& logits,
                       const Kokkos::View<std::int64_t*, Kokkos::HostSpace>& labels,
                       const Vec& dlogits, std::int64_t rows, std::int64_t vocab);
/// One Adam step (β1 0.9, β2 0.95, ε 1e-8, step t, learning rate lr): updates w, m, v.
void adam(const Vec& w, const Vec& grad, const Vec& m, const Vec& v, std::int64_t n, float lr,
          std::int64_t t);
/// Embedding gather (out[r] = table[ids[r]]) and its scatter-add backward.
void embedding_fwd(const Vec& table, const Kokkos::View<std::int64_t*, Kokkos::HostSpace>& ids,
                   const Vec& out, std::int64_t rows, std::int64_t cols);
void embedding_bwd(const Vec& dout, const Kokkos::View<std::int64_t*, Kokkos::HostSpace>& ids,
                   const Vec& dtable, std::int64_t rows, std::int64_t cols);
/// out = in (a memory-bound op without its own kernel).
void copy(const Vec& in, const Vec& out, std::int64_t n);

}  // namespace scalescope::kernels::host
