#include "kernels/host/host_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace scalescope::kernels::host {

namespace {
using Policy = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>;
using std::int64_t;
constexpr float kEps = 1e-5f;

Policy range(int64_t n) {
  return Policy(0, n);
}
float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
}  // namespace

void gemm(const Vec& a, const Vec& b, const Vec& c, int64_t m, int64_t n, int64_t k) {
  Kokkos::parallel_for("gemm", range(m), [=](int64_t i) {
    for (int64_t j = 0; j < n; ++j) c(i * n + j) = 0;
    for (int64_t p = 0; p < k; ++p) {
      const float av = a(i * k + p);
      for (int64_t j = 0; j < n; ++j) c(i * n + j) += av * b(p * n + j);
    }
  });
}

void attention_fwd(const Vec& q, const Vec& k, const Vec& v, const Vec& o, const Vec& lse,
                   int64_t bh, int64_t sq, int64_t sk, int64_t d, int64_t dv, bool causal) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Kokkos::parallel_for("attention_fwd", range(bh * sq), [=](int64_t row) {
    const int64_t h = row / sq, i = row % sq;
    const int64_t last = causal ? std::min(sk - 1, i + (sk - sq)) : sk - 1;
    // Online softmax (the FlashAttention recurrence) over the visible keys.
    float mx = -std::numeric_limits<float>::infinity(), sum = 0;
    for (int64_t e = 0; e < dv; ++e) o(row * dv + e) = 0;
    for (int64_t j = 0; j <= last; ++j) {
      float s = 0;
      for (int64_t x = 0; x < d; ++x) s += q(row * d + x) * k((h * sk + j) * d + x);
      s *= scale;
      const float nmx = std::max(mx, s);
      const float corr = std::exp(mx - nmx), p = std::exp(s - nmx);
      sum = sum * corr + p;
      for (int64_t e = 0; e < dv; ++e)
        o(row * dv + e) = o(row * dv + e) * corr + p * v((h * sk + j) * dv + e);
      mx = nmx;
    }
    for (int64_t e = 0; e < dv; ++e) o(row * dv + e) /= sum;
    lse(row) = mx + std::log(sum);
  });
}

void attention_bwd(const Vec& q, const Vec& k, const Vec& v, const Vec& o, const Vec& lse,
                   const Vec& dout, const Vec& dq, const Vec& dk, const Vec& dv_out, int64_t bh,
                   int64_t sq, int64_t sk, int64_t d, int64_t dv, bool causal) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Kokkos::parallel_for("attention_bwd_zero", range(bh * sk), [=](int64_t r) {
    for (int64_t x = 0; x < d; ++x) dk(r * d + x) = 0;
    for (int64_t e = 0; e < dv; ++e) dv_out(r * dv + e) = 0;
  });
  // One head at a time (the key-side gradients accumulate over the head's queries).
  Kokkos::parallel_for("attention_bwd", range(bh), [=](int64_t hh) {
    const int64_t h = hh;
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t row = h * sq + i;
      const int64_t last = causal ? std::min(sk - 1, i + (sk - sq)) : sk - 1;
      float delta = 0;  // D_i = dO_i · O_i
      for (int64_t e = 0; e < dv; ++e) delta += dout(row * dv + e) * o(row * dv + e);
      for (int64_t x = 0; x < d; ++x) dq(row * d + x) = 0;
      for (int64_t j = 0; j <= last; ++j) {
        const int64_t kr = h * sk + j;
        float s = 0;
        for (int64_t x = 0; x < d; ++x) s += q(row * d + x) * k(kr * d + x);
        const float p = std::exp(s * scale - lse(row));
        float dp = 0;
        for (int64_t e = 0; e < dv; ++e) {
          dv_out(kr * dv + e) += p * dout(row * dv + e);
          dp += dout(row * dv + e) * v(kr * dv + e);
        }
        const float ds = p * (dp - delta) * scale;
        for (int64_t x = 0; x < d; ++x) {
          dq(row * d + x) += ds * k(kr * d + x);
          dk(kr * d + x) += ds * q(row * d + x);
        }
      }
    }
  });
}

void rmsnorm_fwd(const Vec& x, const Vec& g, const Vec& y, int64_t rows, int64_t cols) {
  Kokkos::parallel_for("rmsnorm_fwd", range(rows), [=](int64_t r) {
    float ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += x(r * cols + c) * x(r * cols + c);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(cols) + kEps);
    for (int64_t c = 0; c < cols; ++c) y(r * cols + c) = x(r * cols + c) * inv * g(c);
  });
}

void rmsnorm_bwd(const Vec& x, const Vec& g, const Vec& dy, const Vec& dx, const Vec& dg,
                 int64_t rows, int64_t cols) {
  Kokkos::parallel_for("rmsnorm_bwd_zero", range(cols), [=](int64_t c) { dg(c) = 0; });
  Kokkos::parallel_for("rmsnorm_bwd", range(rows), [=](int64_t r) {
    float ss = 0, dot = 0;
    for (int64_t c = 0; c < cols; ++c) {
      ss += x(r * cols + c) * x(r * cols + c);
      dot += dy(r * cols + c) * g(c) * x(r * cols + c);
    }
    const float n = static_cast<float>(cols);
    const float inv = 1.0f / std::sqrt(ss / n + kEps);
    for (int64_t c = 0; c < cols; ++c) {
      dx(r * cols + c) = inv * (dy(r * cols + c) * g(c) - x(r * cols + c) * inv * inv * dot / n);
      dg(c) += dy(r * cols + c) * x(r * cols + c) * inv;
    }
  });
}

void layernorm_fwd(const Vec& x, const Vec& g, const Vec& b, const Vec& y, int64_t rows,
                   int64_t cols) {
  Kokkos::parallel_for("layernorm_fwd", range(rows), [=](int64_t r) {
    const float n = static_cast<float>(cols);
    float mu = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mu += x(r * cols + c);
    mu /= n;
    for (int64_t c = 0; c < cols; ++c) var += (x(r * cols + c) - mu) * (x(r * cols + c) - mu);
    const float inv = 1.0f / std::sqrt(var / n + kEps);
    for (int64_t c = 0; c < cols; ++c) y(r * cols + c) = (x(r * cols + c) - mu) * inv * g(c) + b(c);
  });
}

void layernorm_bwd(const Vec& x, const Vec& g, const Vec& dy, const Vec& dx, const Vec& dg,
                   const Vec& db, int64_t rows, int64_t cols) {
  Kokkos::parallel_for("layernorm_bwd_zero", range(cols), [=](int64_t c) {
    dg(c) = 0;
    db(c) = 0;
  });
  Kokkos::parallel_for("layernorm_bwd", range(rows), [=](int64_t r) {
    const float n = static_cast<float>(cols);
    float mu = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mu += x(r * cols + c);
    mu /= n;
    for (int64_t c = 0; c < cols; ++c) var += (x(r * cols + c) - mu) * (x(r * cols + c) - mu);
    const float inv = 1.0f / std::sqrt(var / n + kEps);
    float sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = (x(r * cols + c) - mu) * inv;
      const float dxhat = dy(r * cols + c) * g(c);
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
      dg(c) += dy(r * cols + c) * xhat;
      db(c) += dy(r * cols + c);
    }
    for (int64_t c = 0; c < cols; ++c) {
      const float xhat = (x(r * cols + c) - mu) * inv;
      const float dxhat = dy(r * cols + c) * g(c);
      dx(r * cols + c) = inv * (dxhat - sum_dxhat / n - xhat * sum_dxhat_xhat / n);
    }
  });
}

void swiglu_fwd(const Vec& in, const Vec& y, int64_t rows, int64_t cols) {
  Kokkos::parallel_for("swiglu_fwd", range(rows * cols), [=](int64_t i) {
    const int64_t r = i / cols, c = i % cols;
    const float a = in(r * 2 * cols + c), b = in(r * 2 * cols + cols + c);
    y(i) = a * sigmoid(a) * b;
  });
}

void swiglu_bwd(const Vec& in, const Vec& dy, const Vec& din, int64_t rows, int64_t cols) {
  Kokkos::parallel_for("swiglu_bwd", range(rows * cols), [=](int64_t i) {
    const int64_t r = i / cols, c = i % cols;
    const float a = in(r * 2 * cols + c), b = in(r * 2 * cols + cols + c);
    const float s = sigmoid(a);
    din(r * 2 * cols + c) = dy(i) * b * (s + a * s * (1 - s));
    din(r * 2 * cols + cols + c) = dy(i) * a * s;
  });
}

namespace {
constexpr float kGeluC = 0.7978845608f;  // sqrt(2/π)
}
void gelu_fwd(const Vec& x, const Vec& y, int64_t n) {
  Kokkos::parallel_for("gelu_fwd", range(n), [=](int64_t i) {
    const float v = x(i);
    y(i) = 0.5f * v * (1 + std::tanh(kGeluC * (v + 0.044715f * v * v * v)));
  });
}
void gelu_bwd(const Vec& x, const Vec& dy, const Vec& dx, int64_t n) {
  Kokkos::parallel_for("gelu_bwd", range(n), [=](int64_t i) {
    const float v = x(i);
    const float u = kGeluC * (v + 0.044715f * v * v * v);
    const float t = std::tanh(u);
    const float du = kGeluC * (1 + 3 * 0.044715f * v * v);
    dx(i) = dy(i) * (0.5f * (1 + t) + 0.5f * v * (1 - t * t) * du);
  });
}

void rope(const Vec& x, int64_t rows, int64_t heads, int64_t dim, bool inverse) {
  const int64_t half = dim / 2;
  Kokkos::parallel_for("rope", range(rows * heads), [=](int64_t i) {
    const int64_t pos = i / heads;
    for (int64_t p = 0; p < half; ++p) {
      const double theta =
          static_cast<double>(pos) *
          std::pow(10000.0, -2.0 * static_cast<double>(p) / static_cast<double>(dim));
      const float c = static_cast<float>(std::cos(theta));
      const float s = static_cast<float>(inverse ? -std::sin(theta) : std::sin(theta));
      const float a = x(i * dim + p), b = x(i * dim + p + half);
      x(i * dim + p) = a * c - b * s;
      x(i * dim + p + half) = a * s + b * c;
    }
  });
}

void cross_entropy_fwd(const Vec& logits, const Kokkos::View<int64_t*, Kokkos::HostSpace>& labels,
                       const Vec& loss, int64_t rows, int64_t vocab) {
  Kokkos::parallel_for("cross_entropy_fwd", range(rows), [=](int64_t r) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < vocab; ++c) mx = std::max(mx, logits(r * vocab + c));
    float sum = 0;
    for (int64_t c = 0; c < vocab; ++c) sum += std::exp(logits(r * vocab + c) - mx);
    loss(r) = mx + std::log(sum) - logits(r * vocab + labels(r));
  });
}

void cross_entropy_bwd(const Vec& logits, const Kokkos::View<int64_t*, Kokkos::HostSpace>& labels,
                       const Vec& dlogits, int64_t rows, int64_t vocab) {
  Kokkos::parallel_for("cross_entropy_bwd", range(rows), [=](int64_t r) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < vocab; ++c) mx = std::max(mx, logits(r * vocab + c));
    float sum = 0;
    for (int64_t c = 0; c < vocab; ++c) sum += std::exp(logits(r * vocab + c) - mx);
    for (int64_t c = 0; c < vocab; ++c)
      dlogits(r * vocab + c) =
          std::exp(logits(r * vocab + c) - mx) / sum - (c == labels(r) ? 1.0f : 0.0f);
  });
}

void adam(const Vec& w, const Vec& grad, const Vec& m, const Vec& v, int64_t n, float lr,
          int64_t t) {
  const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  const float c1 = 1 - std::pow(b1, static_cast<float>(t));
  const float c2 = 1 - std::pow(b2, static_cast<float>(t));
  Kokkos::parallel_for("adam", range(n), [=](int64_t i) {
    m(i) = b1 * m(i) + (1 - b1) * grad(i);
    v(i) = b2 * v(i) + (1 - b2) * grad(i) * grad(i);
    w(i) -= lr * (m(i) / c1) / (std::sqrt(v(i) / c2) + eps);
  });
}

void embedding_fwd(const Vec& table, const Kokkos::View<int64_t*, Kokkos::HostSpace>& ids,
                   const Vec& out, int64_t rows, int64_t cols) {
  Kokkos::parallel_for("embedding_fwd", range(rows), [=](int64_t r) {
    for (int64_t c = 0; c < cols; ++c) out(r * cols + c) = table(ids(r) * cols + c);
  });
}

void embedding_bwd(const Vec& dout, const Kokkos::View<int64_t*, Kokkos::HostSpace>& ids,
                   const Vec& dtable, int64_t rows, int64_t cols) {
  // Serial order: rows with the same id accumulate without races.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dtable(ids(r) * cols + c) += dout(r * cols + c);
}

void copy(const Vec& in, const Vec& out, int64_t n) {
  Kokkos::parallel_for("copy", range(n), [=](int64_t i) { out(i) = in(i); });
}

}  // namespace scalescope::kernels::host
