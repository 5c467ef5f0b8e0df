// The host backend's kernels against plain loops on small shapes (issue 10: each kernel checked
// numerically against a simple reference), and the host executor on every kernel class.
#include "kernels/host/host_kernels.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/executor.hpp"

namespace scalescope::kernels {
namespace {

using host::Vec;
using Ids = Kokkos::View<std::int64_t*, Kokkos::HostSpace>;

/// Kokkos for the whole test program (the executor would also initialise it on first use).
class KokkosEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!Kokkos::is_initialized()) Kokkos::initialize();
  }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new KokkosEnv);

Vec make(std::int64_t n, std::uint32_t seed) {
  Vec v(std::string("v"), static_cast<std::size_t>(n));
  std::uint32_t x = seed;
  for (std::int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;  // Numerical Recipes LCG: values in [−1, 1)
    v(i) = static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return v;
}
Vec zeros(std::int64_t n) {
  return Vec(std::string("z"), static_cast<std::size_t>(n));
}

TEST(HostKernels, GemmMatchesTripleLoop) {
  const std::int64_t m = 5, n = 7, k = 3;
  Vec a = make(m * k, 1), b = make(k * n, 2), c = zeros(m * n);
  host::gemm(a, b, c, m, n, k);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (std::int64_t p = 0; p < k; ++p) ref += a(i * k + p) * b(p * n + j);
      EXPECT_NEAR(c(i * n + j), ref, 1e-5);
    }
}

/// softmax(QKᵀ/√d)·V with the causal mask, in double.
std::vector<double> reference_attention(const Vec& q, const Vec& k, const Vec& v, std::int64_t bh,
                                        std::int64_t sq, std::int64_t sk, std::int64_t d,
                                        std::int64_t dv, bool causal) {
  std::vector<double> o(static_cast<std::size_t>(bh * sq * dv), 0);
  for (std::int64_t h = 0; h < bh; ++h)
    for (std::int64_t i = 0; i < sq; ++i) {
      std::vector<double> p(static_cast<std::size_t>(sk), 0);
      double mx = -1e300, sum = 0;
      for (std::int64_t j = 0; j < sk; ++j) {
        if (causal && j > i + (sk - sq)) continue;
        double s = 0;
        for (std::int64_t x = 0; x < d; ++x) s += q((h * sq + i) * d + x) * k((h * sk + j) * d + x);
        p[j] = s / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, p[j]);
      }
      for (std::int64_t j = 0; j < sk; ++j) {
        if (causal && j > i + (sk - sq)) continue;
        p[j] = std::exp(p[j] - mx);
        sum += p[j];
      }
      for (std::int64_t j = 0; j < sk; ++j) {
        if (causal && j > i + (sk - sq)) continue;
        for (std::int64_t e = 0; e < dv; ++e)
          o[(h * sq + i) * dv + e] += p[j] / sum * v((h * sk + j) * dv + e);
      }
    }
  return o;
}

TEST(HostKernels, AttentionForwardMatchesSoftmaxReference) {
  for (const bool causal : {true, false}) {
    const std::int64_t bh = 2, sq = 5, sk = 7, d = 4, dv = 3;  // sq < sk: a CP-like block
    Vec q = make(bh * sq * d, 3), k = make(bh * sk * d, 4), v = make(bh * sk * dv, 5),
        o = zeros(bh * sq * dv), lse = zeros(bh * sq);
    host::attention_fwd(q, k, v, o, lse, bh, sq, sk, d, dv, causal);
    const auto ref = reference_attention(q, k, v, bh, sq, sk, d, dv, causal);
    for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(o(i), ref[i], 1e-5) << causal;
  }
}

TEST(HostKernels, AttentionBackwardMatchesFiniteDifferences) {
  // L = Σ dO ⊙ O; dL/dQ, dL/dK, dL/dV by central differences of the forward.
  const std::int64_t bh = 1, sq = 3, sk = 4, d = 2, dv = 2;
  Vec q = make(bh * sq * d, 6), k = make(bh * sk * d, 7), v = make(bh * sk * dv, 8),
      dout = make(bh * sq * dv, 9), o = zeros(bh * sq * dv), lse = zeros(bh * sq);
  host::attention_fwd(q, k, v, o, lse, bh, sq, sk, d, dv, true);
  Vec dq = zeros(bh * sq * d), dk = zeros(bh * sk * d), dvv = zeros(bh * sk * dv);
  host::attention_bwd(q, k, v, o, lse, dout, dq, dk, dvv, bh, sq, sk, d, dv, true);
  const auto loss = [&] {
    const auto out = reference_attention(q, k, v, bh, sq, sk, d, dv, true);
    double l = 0;
    for (std::size_t i = 0; i < out.size(); ++i) l += out[i] * dout(i);
    return l;
  };
  const auto check = [&](Vec& x, const Vec& grad, const char* what) {
    for (std::size_t i = 0; i < x.extent(0); ++i) {
      const float keep = x(i), eps = 1e-2f;
      x(i) = keep + eps;
      const double up = loss();
      x(i) = keep - eps;
      const double down = loss();
      x(i) = keep;
      EXPECT_NEAR(grad(i), (up - down) / (2 * eps), 2e-3) << what << " " << i;
    }
  };
  check(q, dq, "dQ");
  check(k, dk, "dK");
  check(v, dvv, "dV");
}

TEST(HostKernels, NormsMatchTheirDefinitions) {
  const std::int64_t rows = 3, cols = 8;
  Vec x = make(rows * cols, 10), g = make(cols, 11), b = make(cols, 12), y = zeros(rows * cols);
  host::rmsnorm_fwd(x, g, y, rows, cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::int64_t c = 0; c < cols; ++c) ss += x(r * cols + c) * x(r * cols + c);
    const double inv = 1 / std::sqrt(ss / cols + 1e-5);
    for (std::int64_t c = 0; c < cols; ++c)
      EXPECT_NEAR(y(r * cols + c), x(r * cols + c) * inv * g(c), 1e-5);
  }
  host::layernorm_fwd(x, g, b, y, rows, cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (std::int64_t c = 0; c < cols; ++c) mu += x(r * cols + c) / cols;
    for (std::int64_t c = 0; c < cols; ++c) var += std::pow(x(r * cols + c) - mu, 2) / cols;
    for (std::int64_t c = 0; c < cols; ++c)
      EXPECT_NEAR(y(r * cols + c), (x(r * cols + c) - mu) / std::sqrt(var + 1e-5) * g(c) + b(c),
                  1e-4);
  }
}

TEST(HostKernels, NormBackwardsMatchFiniteDifferences) {
  const std::int64_t rows = 2, cols = 5;
  Vec x = make(rows * cols, 13), g = make(cols, 14), b = make(cols, 15), dy = make(rows * cols, 16);
  for (const bool ln : {false, true}) {
    Vec dx = zeros(rows * cols), dg = zeros(cols), db = zeros(cols), y = zeros(rows * cols);
    if (ln)
      host::layernorm_bwd(x, g, dy, dx, dg, db, rows, cols);
    else
      host::rmsnorm_bwd(x, g, dy, dx, dg, rows, cols);
    const auto loss = [&] {
      if (ln)
        host::layernorm_fwd(x, g, b, y, rows, cols);
      else
        host::rmsnorm_fwd(x, g, y, rows, cols);
      double l = 0;
      for (std::int64_t i = 0; i < rows * cols; ++i) l += static_cast<double>(y(i)) * dy(i);
      return l;
    };
    for (std::int64_t i = 0; i < rows * cols; ++i) {
      const float keep = x(i), eps = 1e-2f;
      x(i) = keep + eps;
      const double up = loss();
      x(i) = keep - eps;
      const double down = loss();
      x(i) = keep;
      EXPECT_NEAR(dx(i), (up - down) / (2 * eps), 3e-3) << (ln ? "layernorm " : "rmsnorm ") << i;
    }
  }
}

TEST(HostKernels, ActivationsRopeLossAdamEmbeddingCopy) {
  const std::int64_t rows = 2, cols = 3;
  Vec in = make(2 * rows * cols, 17), y = zeros(rows * cols);
  host::swiglu_fwd(in, y, rows, cols);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const double a = in(r * 2 * cols + c), bb = in(r * 2 * cols + cols + c);
      EXPECT_NEAR(y(r * cols + c), a / (1 + std::exp(-a)) * bb, 1e-6);
    }
  Vec dy = make(rows * cols, 18), din = zeros(2 * rows * cols);
  host::swiglu_bwd(in, dy, din, rows, cols);
  for (std::int64_t i = 0; i < 2 * rows * cols; ++i) {  // finite differences of Σ dy ⊙ y
    const float keep = in(i), eps = 1e-3f;
    auto loss = [&] {
      host::swiglu_fwd(in, y, rows, cols);
      double l = 0;
      for (std::int64_t j = 0; j < rows * cols; ++j) l += static_cast<double>(y(j)) * dy(j);
      return l;
    };
    in(i) = keep + eps;
    const double up = loss();
    in(i) = keep - eps;
    const double down = loss();
    in(i) = keep;
    EXPECT_NEAR(din(i), (up - down) / (2 * eps), 1e-3);
  }
  Vec x = make(6, 19), gy = zeros(6);
  host::gelu_fwd(x, gy, 6);
  for (std::int64_t i = 0; i < 6; ++i) {
    const double v = x(i);
    EXPECT_NEAR(gy(i), 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))),
                1e-6);
  }
  // RoPE: a rotation keeps each pair's norm; the inverse restores the input.
  Vec r = make(2 * 1 * 4, 20), r0 = make(2 * 1 * 4, 20);
  host::rope(r, 2, 1, 4, false);
  EXPECT_NEAR(r(4) * r(4) + r(6) * r(6), r0(4) * r0(4) + r0(6) * r0(6), 1e-5);
  EXPECT_NEAR(r(4), r0(4) * std::cos(1.0) - r0(6) * std::sin(1.0), 1e-5);  // position 1, pair 0
  host::rope(r, 2, 1, 4, true);
  for (std::int64_t i = 0; i < 8; ++i) EXPECT_NEAR(r(i), r0(i), 1e-5);
  // Cross-entropy: loss = logsumexp − logit of the label; gradient rows sum to 0.
  Vec logits = make(2 * 5, 21), loss = zeros(2), dl = zeros(10);
  Ids labels(std::string("l"), 2);
  labels(0) = 3;
  labels(1) = 0;
  host::cross_entropy_fwd(logits, labels, loss, 2, 5);
  host::cross_entropy_bwd(logits, labels, dl, 2, 5);
  for (std::int64_t rr = 0; rr < 2; ++rr) {
    double sum = 0, gsum = 0;
    for (std::int64_t c = 0; c < 5; ++c) {
      sum += std::exp(logits(rr * 5 + c));
      gsum += dl(rr * 5 + c);
    }
    EXPECT_NEAR(loss(rr), std::log(sum) - logits(rr * 5 + labels(rr)), 1e-5);
    EXPECT_NEAR(gsum, 0, 1e-6);
  }
  // Adam step 1 from m = v = 0: w −= lr · g / (|g| + ε) = lr · sign(g) (bias-corrected).
  Vec w = make(4, 22), g = make(4, 23), m = zeros(4), vv = zeros(4), w0 = make(4, 22);
  host::adam(w, g, m, vv, 4, 0.1f, 1);
  for (std::int64_t i = 0; i < 4; ++i) EXPECT_NEAR(w(i), w0(i) - 0.1 * (g(i) > 0 ? 1 : -1), 1e-5);
  // Embedding: gather, then scatter-add of the same rows back.
  Vec table = make(3 * 2, 24), out = zeros(4 * 2), dtable = zeros(3 * 2);
  Ids ids(std::string("ids"), 4);
  for (std::int64_t i = 0; i < 4; ++i) ids(i) = i % 3;
  host::embedding_fwd(table, ids, out, 4, 2);
  EXPECT_EQ(out(3 * 2 + 1), table(0 * 2 + 1));  // row 3 took id 0
  host::embedding_bwd(out, ids, dtable, 4, 2);
  EXPECT_NEAR(dtable(0), 2 * table(0), 1e-6);  // id 0 appears twice
  Vec src = make(5, 25), dst = zeros(5);
  host::copy(src, dst, 5);
  for (std::int64_t i = 0; i < 5; ++i) EXPECT_EQ(dst(i), src(i));
}

TEST(HostExecutor, MeasuresEveryKernelClass) {
  auto exec = make_host_executor(0.01, 2);
  EXPECT_EQ(exec->backend(), "host");
  EXPECT_DOUBLE_EQ(exec->op_scale(), 0.01);
  cost::KernelSig s;
  const std::vector<std::pair<cost::KernelClass, std::array<std::int64_t, 5>>> cases = {
      {cost::KernelClass::Gemm, {1024, 1024, 1024, 0, 0}},
      {cost::KernelClass::Attention, {8, 1024, 1024, 64, 64}},
      {cost::KernelClass::RmsNorm, {1024, 512, 0, 0, 0}},
      {cost::KernelClass::LayerNorm, {1024, 512, 0, 0, 0}},
      {cost::KernelClass::SwiGlu, {1024, 1024, 0, 0, 0}},
      {cost::KernelClass::Gelu, {1024, 1024, 0, 0, 0}},
      {cost::KernelClass::Rope, {1024, 8, 64, 0, 0}},
      {cost::KernelClass::CrossEntropy, {1024, 32000, 0, 0, 0}},
      {cost::KernelClass::Adam, {1 << 20, 0, 0, 0, 0}},
      {cost::KernelClass::Embedding, {1024, 512, 32000, 0, 0}},
      {cost::KernelClass::Copy, {1 << 24, 0, 0, 0, 0}}};
  for (const bool bwd : {false, true})
    for (const auto& [kernel, dims] : cases) {
      s.kernel = kernel;
      s.dims = dims;
      s.backward = bwd;
      const auto m = exec->measure(s);
      ASSERT_TRUE(m) << s.key();
      EXPECT_GT(m->median_s, 0) << s.key();
      EXPECT_LE(m->p10_s, m->median_s);
      EXPECT_GE(m->p90_s, m->median_s);
      EXPECT_GT(m->bytes_held, 0);
    }
  s.kernel = cost::KernelClass::None;
  EXPECT_FALSE(exec->measure(s));
}

}  // namespace
}  // namespace scalescope::kernels
