// Numerical checks of scalescope's CUDA kernels against plain CPU references on small shapes.
// A plain main (no GoogleTest on the device machines); exit 0 all passed, 1 a check failed,
// 77 no CUDA device visible (CTest SKIP_RETURN_CODE).
#include "kernels.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace scalescope::cuda;

namespace {

int g_failures = 0;
std::mt19937_64 g_rng(12345);

std::vector<float> rand_vec(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g_rng);
  return v;
}
// Rounds to bf16 (so that the reference sees exactly what the device sees).
std::vector<float> round_bf16(std::vector<float> v) {
  for (auto& x : v) x = __bfloat162float(__float2bfloat16(x));
  return v;
}

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    SCALESCOPE_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    SCALESCOPE_CUDA_CHECK(cudaMemset(p, 0, std::max<size_t>(n, 1) * sizeof(T)));
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
};

Dev<bf16>* up_bf16_raw(const std::vector<float>& v) {
  auto* d = new Dev<bf16>(v.size());
  std::vector<bf16> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = __float2bfloat16(v[i]);
  SCALESCOPE_CUDA_CHECK(
      cudaMemcpy(d->p, h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  return d;
}
std::unique_ptr<Dev<bf16>> up(const std::vector<float>& v) {
  return std::unique_ptr<Dev<bf16>>(up_bf16_raw(v));
}
std::unique_ptr<Dev<float>> upf(const std::vector<float>& v) {
  auto d = std::make_unique<Dev<float>>(v.size());
  SCALESCOPE_CUDA_CHECK(cudaMemcpy(d->p, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  return d;
}
std::unique_ptr<Dev<int32_t>> upi(const std::vector<int32_t>& v) {
  auto d = std::make_unique<Dev<int32_t>>(v.size());
  SCALESCOPE_CUDA_CHECK(cudaMemcpy(d->p, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  return d;
}
std::vector<float> down(const Dev<bf16>& d) {
  SCALESCOPE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<bf16> h(d.n);
  SCALESCOPE_CUDA_CHECK(cudaMemcpy(h.data(), d.p, d.n * sizeof(bf16), cudaMemcpyDeviceToHost));
  std::vector<float> v(d.n);
  for (size_t i = 0; i < d.n; ++i) v[i] = __bfloat162float(h[i]);
  return v;
}
std::vector<float> down(const Dev<float>& d) {
  SCALESCOPE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> v(d.n);
  SCALESCOPE_CUDA_CHECK(cudaMemcpy(v.data(), d.p, d.n * 4, cudaMemcpyDeviceToHost));
  return v;
}

// |got − want| <= atol + rtol·max|want| elementwise; reports the worst element.
void expect_close(const std::string& name, const std::vector<float>& got,
                  const std::vector<double>& want, double rtol, double atol) {
  double scale = 0, worst = 0;
  size_t at = 0;
  bool bad_size = got.size() != want.size();
  for (double w : want) scale = std::max(scale, std::fabs(w));
  const double tol = atol + rtol * scale;
  bool finite = true;
  for (size_t i = 0; !bad_size && i < got.size(); ++i) {
    if (!std::isfinite(got[i]) && std::isfinite(want[i])) finite = false;
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(e <= worst)) {
      worst = e;
      at = i;
    }
  }
  const bool ok = !bad_size && finite && worst <= tol;
  std::printf("%s %-44s max err %.3g (tol %.3g, max|ref| %.3g)%s\n", ok ? "ok  " : "FAIL",
              name.c_str(), worst, tol, scale, ok ? "" : (" at " + std::to_string(at)).c_str());
  if (!ok) ++g_failures;
}
std::vector<double> dbl(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

// ------------------------------------------------------------------------------------- GEMM

void test_gemm(int64_t m, int64_t n, int64_t k, bool f8) {
  const std::string name = std::string("gemm ") + (f8 ? "fp8" : "bf16") + " " + std::to_string(m) +
                           "x" + std::to_string(n) + "x" + std::to_string(k);
  if (!have_cublaslt()) {
    std::printf("skip %s: built without cuBLASLt\n", name.c_str());
    return;
  }
  std::vector<float> a = rand_vec(static_cast<size_t>(m * k), -1, 1),
                     b = rand_vec(static_cast<size_t>(k * n), -1, 1);
  std::vector<double> ref(static_cast<size_t>(m * n), 0.0);
  Dev<bf16> c(static_cast<size_t>(m * n));
  std::unique_ptr<LtGemm> g;
  try {
    g = std::make_unique<LtGemm>(m, n, k, f8);
  } catch (const Unsupported& e) {
    std::printf("FAIL %s: %s\n", name.c_str(), e.what());
    ++g_failures;
    return;
  }
  if (f8) {
    // b holds B stored transposed: [n, k]
    std::vector<fp8> ha(a.size()), hb(b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ha[i] = fp8(a[i]);
      a[i] = static_cast<float>(ha[i]);
    }
    for (size_t i = 0; i < b.size(); ++i) {
      hb[i] = fp8(b[i]);
      b[i] = static_cast<float>(hb[i]);
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l) s += double(a[i * k + l]) * b[j * k + l];
        ref[i * n + j] = s;
      }
    Dev<fp8> da(a.size()), db(b.size());
    SCALESCOPE_CUDA_CHECK(cudaMemcpy(da.p, ha.data(), ha.size(), cudaMemcpyHostToDevice));
    SCALESCOPE_CUDA_CHECK(cudaMemcpy(db.p, hb.data(), hb.size(), cudaMemcpyHostToDevice));
    g->run(da.p, db.p, c.p, nullptr);
    expect_close(name, down(c), ref, 1e-2, 1e-3);
  } else {
    a = round_bf16(a);
    b = round_bf16(b);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t l = 0; l < k; ++l)
        for (int64_t j = 0; j < n; ++j) ref[i * n + j] += double(a[i * k + l]) * b[l * n + j];
    auto da = up(a), db = up(b);
    g->run(da->p, db->p, c.p, nullptr);
    expect_close(name, down(c), ref, 1e-2, 1e-3);
  }
}

// -------------------------------------------------------------------------------- attention

void test_attention(int64_t bh, int64_t sq, int64_t sk, int64_t d, int64_t dv, bool causal) {
  const std::string tag = "bh=" + std::to_string(bh) + " sq=" + std::to_string(sq) +
                          " sk=" + std::to_string(sk) + " d=" + std::to_string(d) + "/" +
                          std::to_string(dv) + (causal ? " causal" : "");
  const auto q = round_bf16(rand_vec(static_cast<size_t>(bh * sq * d), -1, 1));
  const auto k = round_bf16(rand_vec(static_cast<size_t>(bh * sk * d), -1, 1));
  const auto v = round_bf16(rand_vec(static_cast<size_t>(bh * sk * dv), -1, 1));
  const auto dout = round_bf16(rand_vec(static_cast<size_t>(bh * sq * dv), -1, 1));
  const double scale = 1.0 / std::sqrt(double(d));
  const int64_t off = sk - sq;
  std::vector<double> o(static_cast<size_t>(bh * sq * dv), 0), lse(static_cast<size_t>(bh * sq), 0),
      dq(static_cast<size_t>(bh * sq * d), 0), dk(static_cast<size_t>(bh * sk * d), 0),
      dvr(static_cast<size_t>(bh * sk * dv), 0);
  std::vector<double> p(static_cast<size_t>(sk)), dp(static_cast<size_t>(sk));
  for (int64_t h = 0; h < bh; ++h)
    for (int64_t i = 0; i < sq; ++i) {
      const float* qi = &q[static_cast<size_t>((h * sq + i) * d)];
      double mx = -INFINITY;
      for (int64_t j = 0; j < sk; ++j) {
        if (causal && j > i + off) {
          p[j] = -INFINITY;
          continue;
        }
        double s = 0;
        for (int64_t c = 0; c < d; ++c)
          s += double(qi[c]) * k[static_cast<size_t>((h * sk + j) * d + c)];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < sk; ++j) {
        p[j] = p[j] == -INFINITY ? 0.0 : std::exp(p[j] - mx);
        sum += p[j];
      }
      lse[static_cast<size_t>(h * sq + i)] = sum > 0 ? mx + std::log(sum) : -INFINITY;
      for (int64_t j = 0; j < sk; ++j) p[j] = sum > 0 ? p[j] / sum : 0.0;
      double* oi = &o[static_cast<size_t>((h * sq + i) * dv)];
      for (int64_t j = 0; j < sk; ++j)
        for (int64_t c = 0; c < dv; ++c)
          oi[c] += p[j] * v[static_cast<size_t>((h * sk + j) * dv + c)];
      // backward for this row
      const float* doi = &dout[static_cast<size_t>((h * sq + i) * dv)];
      double delta = 0;
      for (int64_t c = 0; c < dv; ++c) delta += double(doi[c]) * oi[c];
      for (int64_t j = 0; j < sk; ++j) {
        double s = 0;
        for (int64_t c = 0; c < dv; ++c)
          s += double(doi[c]) * v[static_cast<size_t>((h * sk + j) * dv + c)];
        dp[j] = s;
      }
      for (int64_t j = 0; j < sk; ++j) {
        if (p[j] == 0) continue;
        const double ds = p[j] * (dp[j] - delta);
        for (int64_t c = 0; c < d; ++c) {
          dq[static_cast<size_t>((h * sq + i) * d + c)] +=
              scale * ds * k[static_cast<size_t>((h * sk + j) * d + c)];
          dk[static_cast<size_t>((h * sk + j) * d + c)] += scale * ds * qi[c];
        }
        for (int64_t c = 0; c < dv; ++c)
          dvr[static_cast<size_t>((h * sk + j) * dv + c)] += p[j] * doi[c];
      }
    }
  auto dq_ = up(q), dk_ = up(k), dv_ = up(v), ddo = up(dout);
  Dev<bf16> dO(o.size()), gq(dq.size()), gk(dk.size()), gv(dvr.size());
  Dev<float> dl(lse.size()), acc(dq.size()), delta(lse.size());
  attention_fwd(dq_->p, dk_->p, dv_->p, dO.p, dl.p, bh, sq, sk, d, dv, causal, nullptr);
  expect_close("attention fwd O   " + tag, down(dO), o, 1e-2, 1e-2);
  // LSE: compare where finite; both must agree on −inf rows
  {
    auto got = down(dl);
    std::vector<float> g2(got.size());
    std::vector<double> w2(lse.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const bool wi = std::isinf(lse[i]), gi = std::isinf(got[i]);
      g2[i] = wi && gi ? 0.f : (gi ? 1e30f : got[i]);
      w2[i] = wi ? 0.0 : lse[i];
    }
    expect_close("attention fwd LSE " + tag, g2, w2, 0.0, 1e-2);
  }
  attention_bwd(dq_->p, dk_->p, dv_->p, dO.p, ddo->p, dl.p, gq.p, gk.p, gv.p, acc.p, delta.p, bh,
                sq, sk, d, dv, causal, nullptr);
  expect_close("attention bwd dQ  " + tag, down(gq), dq, 2e-2, 1e-2);
  expect_close("attention bwd dK  " + tag, down(gk), dk, 2e-2, 1e-2);
  expect_close("attention bwd dV  " + tag, down(gv), dvr, 2e-2, 1e-2);
}

// ---------------------------------------------------------------------------------- norms

void test_rmsnorm(int64_t r, int64_t c) {
  const std::string tag = " " + std::to_string(r) + "x" + std::to_string(c);
  const auto x = round_bf16(rand_vec(static_cast<size_t>(r * c), -2, 2)),
             g = round_bf16(rand_vec(static_cast<size_t>(c), 0.5, 1.5)),
             dy = round_bf16(rand_vec(static_cast<size_t>(r * c), -1, 1));
  std::vector<double> y(x.size()), dx(x.size()), dg(static_cast<size_t>(c), 0),
      rs(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < c; ++j) ss += double(x[i * c + j]) * x[i * c + j];
    const double rr = 1.0 / std::sqrt(ss / c + 1e-5);
    rs[i] = rr;
    double dot = 0;
    for (int64_t j = 0; j < c; ++j) {
      y[i * c + j] = x[i * c + j] * rr * g[j];
      dot += double(dy[i * c + j]) * g[j] * x[i * c + j];
    }
    for (int64_t j = 0; j < c; ++j) {
      dx[i * c + j] = rr * g[j] * dy[i * c + j] - x[i * c + j] * rr * rr * rr * dot / c;
      dg[j] += dy[i * c + j] * x[i * c + j] * rr;
    }
  }
  auto dX = up(x), dG = up(g), dDY = up(dy);
  Dev<bf16> dY(y.size()), dDX(dx.size());
  Dev<float> dR(static_cast<size_t>(r)), dDG(static_cast<size_t>(c));
  rmsnorm_fwd(dX->p, dG->p, dY.p, dR.p, r, c, 1e-5f, nullptr);
  expect_close("rmsnorm fwd y" + tag, down(dY), y, 1e-2, 1e-3);
  expect_close("rmsnorm fwd rstd" + tag, down(dR), rs, 1e-4, 0);
  rmsnorm_bwd(dDY->p, dX->p, dG->p, dR.p, dDX.p, dDG.p, r, c, nullptr);
  expect_close("rmsnorm bwd dx" + tag, down(dDX), dx, 1e-2, 1e-3);
  expect_close("rmsnorm bwd dgamma" + tag, down(dDG), dg, 1e-4, 1e-4);
}

void test_layernorm(int64_t r, int64_t c) {
  const std::string tag = " " + std::to_string(r) + "x" + std::to_string(c);
  const auto x = round_bf16(rand_vec(static_cast<size_t>(r * c), -2, 2.5)),
             g = round_bf16(rand_vec(static_cast<size_t>(c), 0.5, 1.5)),
             b = round_bf16(rand_vec(static_cast<size_t>(c), -1, 1)),
             dy = round_bf16(rand_vec(static_cast<size_t>(r * c), -1, 1));
  std::vector<double> y(x.size()), dx(x.size()), dg(static_cast<size_t>(c), 0),
      db(static_cast<size_t>(c), 0);
  for (int64_t i = 0; i < r; ++i) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < c; ++j) mu += x[i * c + j];
    mu /= c;
    for (int64_t j = 0; j < c; ++j) var += (x[i * c + j] - mu) * (x[i * c + j] - mu);
    var /= c;
    const double rr = 1.0 / std::sqrt(var + 1e-5);
    double s1 = 0, s2 = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double xh = (x[i * c + j] - mu) * rr;
      y[i * c + j] = xh * g[j] + b[j];
      s1 += double(dy[i * c + j]) * g[j];
      s2 += double(dy[i * c + j]) * g[j] * xh;
    }
    s1 /= c;
    s2 /= c;
    for (int64_t j = 0; j < c; ++j) {
      const double xh = (x[i * c + j] - mu) * rr;
      dx[i * c + j] = rr * (dy[i * c + j] * g[j] - s1 - xh * s2);
      dg[j] += dy[i * c + j] * xh;
      db[j] += dy[i * c + j];
    }
  }
  auto dX = up(x), dG = up(g), dB = up(b), dDY = up(dy);
  Dev<bf16> dY(y.size()), dDX(dx.size());
  Dev<float> dM(static_cast<size_t>(r)), dR(static_cast<size_t>(r)), dDG(static_cast<size_t>(c)),
      dDB(static_cast<size_t>(c));
  layernorm_fwd(dX->p, dG->p, dB->p, dY.p, dM.p, dR.p, r, c, 1e-5f, nullptr);
  expect_close("layernorm fwd y" + tag, down(dY), y, 1e-2, 1e-3);
  layernorm_bwd(dDY->p, dX->p, dG->p, dM.p, dR.p, dDX.p, dDG.p, dDB.p, r, c, nullptr);
  expect_close("layernorm bwd dx" + tag, down(dDX), dx, 1e-2, 1e-3);
  expect_close("layernorm bwd dgamma" + tag, down(dDG), dg, 1e-3, 1e-4);
  expect_close("layernorm bwd dbeta" + tag, down(dDB), db, 1e-4, 1e-4);
}

// ---------------------------------------------------------------------------- activations

void test_swiglu(int64_t r, int64_t c) {
  const std::string tag = " " + std::to_string(r) + "x" + std::to_string(c);
  const auto in = round_bf16(rand_vec(static_cast<size_t>(2 * r * c), -3, 3)),
             dy = round_bf16(rand_vec(static_cast<size_t>(r * c), -1, 1));
  std::vector<double> y(static_cast<size_t>(r * c)), din(static_cast<size_t>(2 * r * c));
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const double a = in[i * 2 * c + j], b = in[i * 2 * c + c + j], d = dy[i * c + j];
      const double s = 1 / (1 + std::exp(-a));
      y[i * c + j] = a * s * b;
      din[i * 2 * c + j] = d * b * s * (1 + a * (1 - s));
      din[i * 2 * c + c + j] = d * a * s;
    }
  auto dIn = up(in), dDY = up(dy);
  Dev<bf16> dY(y.size()), dDin(din.size());
  swiglu_fwd(dIn->p, dY.p, r, c, nullptr);
  expect_close("swiglu fwd" + tag, down(dY), y, 1e-2, 1e-3);
  swiglu_bwd(dDY->p, dIn->p, dDin.p, r, c, nullptr);
  expect_close("swiglu bwd" + tag, down(dDin), din, 1e-2, 1e-3);
}

void test_gelu(int64_t n) {
  const std::string tag = " n=" + std::to_string(n);
  const auto x = round_bf16(rand_vec(static_cast<size_t>(n), -4, 4)),
             dy = round_bf16(rand_vec(static_cast<size_t>(n), -1, 1));
  std::vector<double> y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
  const double k0 = std::sqrt(2.0 / M_PI), k1 = 0.044715;
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i], t = std::tanh(k0 * (v + k1 * v * v * v));
    y[i] = 0.5 * v * (1 + t);
    dx[i] = dy[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k0 * (1 + 3 * k1 * v * v));
  }
  auto dX = up(x), dDY = up(dy);
  Dev<bf16> dY(y.size()), dDX(dx.size());
  gelu_fwd(dX->p, dY.p, n, nullptr);
  expect_close("gelu fwd" + tag, down(dY), y, 1e-2, 1e-3);
  gelu_bwd(dDY->p, dX->p, dDX.p, n, nullptr);
  expect_close("gelu bwd" + tag, down(dDX), dx, 1e-2, 1e-3);
}

void test_rope(int64_t r, int64_t h, int64_t d) {
  const std::string tag =
      " " + std::to_string(r) + "x" + std::to_string(h) + "x" + std::to_string(d);
  const auto x = round_bf16(rand_vec(static_cast<size_t>(r * h * d), -1, 1));
  std::vector<double> y(x.size());
  const int64_t half = d / 2;
  for (int64_t i = 0; i < r; ++i)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t j = 0; j < half; ++j) {
        const double th = double(i) * std::pow(10000.0, -double(j) / half);
        const size_t b = static_cast<size_t>((i * h + hh) * d);
        const double x1 = x[b + j], x2 = x[b + j + half];
        y[b + j] = x1 * std::cos(th) - x2 * std::sin(th);
        y[b + j + half] = x2 * std::cos(th) + x1 * std::sin(th);
      }
  auto dX = up(x);
  Dev<float2> cs(static_cast<size_t>(r * half));
  rope_table(cs.p, r, d, 10000.f, nullptr);
  rope(dX->p, cs.p, r, h, d, false, nullptr);
  expect_close("rope fwd" + tag, down(*dX), y, 1e-2, 1e-3);
  rope(dX->p, cs.p, r, h, d, true, nullptr);
  expect_close("rope bwd (inverse) round trip" + tag, down(*dX), dbl(x), 2e-2, 1e-3);
}

void test_add(int64_t n) {
  const auto a = round_bf16(rand_vec(static_cast<size_t>(n), -1, 1)),
             b = round_bf16(rand_vec(static_cast<size_t>(n), -1, 1));
  std::vector<double> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[i] = double(a[i]) + b[i];
  auto dA = up(a), dB = up(b);
  Dev<bf16> dY(y.size());
  add(dA->p, dB->p, dY.p, n, nullptr);
  expect_close("add n=" + std::to_string(n), down(dY), y, 1e-2, 1e-3);
}

void test_cross_entropy(int64_t r, int64_t v) {
  const std::string tag = " " + std::to_string(r) + "x" + std::to_string(v);
  const auto x = round_bf16(rand_vec(static_cast<size_t>(r * v), -6, 6));
  const auto dl = rand_vec(static_cast<size_t>(r), 0.5, 1.5);
  std::vector<int32_t> t(static_cast<size_t>(r));
  for (auto& e : t) e = static_cast<int32_t>(g_rng() % uint64_t(v));
  std::vector<double> loss(static_cast<size_t>(r)), lse(static_cast<size_t>(r)), dx(x.size());
  for (int64_t i = 0; i < r; ++i) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, double(x[i * v + j]));
    for (int64_t j = 0; j < v; ++j) s += std::exp(x[i * v + j] - mx);
    lse[i] = mx + std::log(s);
    loss[i] = lse[i] - x[i * v + t[i]];
    for (int64_t j = 0; j < v; ++j)
      dx[i * v + j] = (std::exp(x[i * v + j] - lse[i]) - (j == t[i] ? 1 : 0)) * dl[i];
  }
  auto dX = up(x);
  auto dDL = upf(dl);
  auto dT = upi(t);
  Dev<float> dLoss(static_cast<size_t>(r)), dLse(static_cast<size_t>(r));
  Dev<bf16> dDX(dx.size());
  cross_entropy_fwd(dX->p, dT->p, dLoss.p, dLse.p, r, v, nullptr);
  expect_close("cross_entropy fwd loss" + tag, down(dLoss), loss, 1e-4, 1e-3);
  cross_entropy_bwd(dX->p, dT->p, dLse.p, dDL->p, dDX.p, r, v, nullptr);
  expect_close("cross_entropy bwd" + tag, down(dDX), dx, 1e-2, 1e-3);
}

void test_adam(int64_t n) {
  const auto p0 = rand_vec(static_cast<size_t>(n), -1, 1),
             m0 = rand_vec(static_cast<size_t>(n), -0.1f, 0.1f),
             v0 = rand_vec(static_cast<size_t>(n), 0, 0.01f),
             g = rand_vec(static_cast<size_t>(n), -0.1f, 0.1f);
  AdamParams hp;
  hp.step = 3;
  std::vector<double> p(static_cast<size_t>(n)), m(static_cast<size_t>(n)),
      v(static_cast<size_t>(n));
  const double c1 = 1 / (1 - std::pow(double(hp.beta1), hp.step)),
               c2 = 1 / (1 - std::pow(double(hp.beta2), hp.step));
  for (int64_t i = 0; i < n; ++i) {
    m[i] = hp.beta1 * double(m0[i]) + (1 - double(hp.beta1)) * g[i];
    v[i] = hp.beta2 * double(v0[i]) + (1 - double(hp.beta2)) * double(g[i]) * g[i];
    p[i] = p0[i] - hp.lr * (m[i] * c1 / (std::sqrt(v[i] * c2) + hp.eps) + hp.weight_decay * p0[i]);
  }
  auto dP = upf(p0), dM = upf(m0), dV = upf(v0), dG = upf(g);
  Dev<bf16> dW(static_cast<size_t>(n));
  adam(dP->p, dM->p, dV->p, dG->p, dW.p, n, hp, nullptr);
  const std::string tag = " n=" + std::to_string(n);
  expect_close("adam param" + tag, down(*dP), p, 1e-6, 1e-6);
  expect_close("adam m" + tag, down(*dM), m, 1e-6, 1e-7);
  expect_close("adam v" + tag, down(*dV), v, 1e-6, 1e-8);
  expect_close("adam bf16 weight" + tag, down(dW), p, 1e-2, 0);
}

void test_embedding(int64_t r, int64_t c, int64_t vocab) {
  const std::string tag =
      " " + std::to_string(r) + "x" + std::to_string(c) + " vocab " + std::to_string(vocab);
  const auto table = round_bf16(rand_vec(static_cast<size_t>(vocab * c), -1, 1)),
             dout = round_bf16(rand_vec(static_cast<size_t>(r * c), -1, 1));
  std::vector<int32_t> ids(static_cast<size_t>(r));
  for (auto& e : ids) e = static_cast<int32_t>(g_rng() % uint64_t(vocab));  // repeats likely
  std::vector<double> out(static_cast<size_t>(r * c)), dt(static_cast<size_t>(vocab * c), 0);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      out[i * c + j] = table[ids[i] * c + j];
      dt[ids[i] * c + j] += dout[i * c + j];
    }
  auto dT = up(table), dDO = up(dout);
  auto dI = upi(ids);
  Dev<bf16> dOut(out.size());
  Dev<float> dDT(dt.size());
  embedding_fwd(dI->p, dT->p, dOut.p, r, c, nullptr);
  expect_close("embedding fwd" + tag, down(dOut), out, 0, 0);
  embedding_bwd(dI->p, dDO->p, dDT.p, r, c, nullptr);
  expect_close("embedding bwd" + tag, down(dDT), dt, 1e-5, 1e-5);
}

void test_copy(int64_t bytes, int64_t offset) {
  std::vector<unsigned char> h(static_cast<size_t>(bytes + offset));
  for (auto& b : h) b = static_cast<unsigned char>(g_rng());
  Dev<unsigned char> s(h.size()), d(h.size());
  SCALESCOPE_CUDA_CHECK(cudaMemcpy(s.p, h.data(), h.size(), cudaMemcpyHostToDevice));
  copy(s.p + offset, d.p + offset, bytes, nullptr);
  std::vector<unsigned char> got(h.size());
  SCALESCOPE_CUDA_CHECK(cudaDeviceSynchronize());
  SCALESCOPE_CUDA_CHECK(cudaMemcpy(got.data(), d.p, got.size(), cudaMemcpyDeviceToHost));
  const bool ok = std::equal(h.begin() + offset, h.end(), got.begin() + offset);
  std::printf("%s copy %lld bytes at offset %lld\n", ok ? "ok  " : "FAIL",
              static_cast<long long>(bytes), static_cast<long long>(offset));
  if (!ok) ++g_failures;
}

}  // namespace

int main() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::printf("cuda_kernels_test: no CUDA device visible (%s); skipped\n",
                e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
    return 77;
  }
  try {
    test_gemm(128, 192, 256, false);
    test_gemm(96, 80, 72, false);
    test_gemm(128, 192, 256, true);
    test_attention(2, 130, 130, 64, 64, false);
    test_attention(2, 130, 130, 64, 64, true);
    test_attention(2, 70, 200, 128, 128, true);
    test_attention(1, 200, 70, 128, 128, true);  // first rows see no key
    test_attention(2, 64, 128, 128, 128, false);
    test_attention(1, 100, 100, 192, 128, true);
    test_rmsnorm(5, 1024);
    test_rmsnorm(3, 37);
    test_rmsnorm(600, 64);  // more rows than the backward's grid
    test_layernorm(5, 1024);
    test_layernorm(3, 37);
    test_swiglu(4, 256);
    test_swiglu(3, 13);
    test_gelu(4096);
    test_gelu(1001);
    test_rope(6, 4, 128);
    test_rope(5, 3, 6);
    test_add(4096);
    test_add(999);
    test_cross_entropy(4, 5000);
    test_cross_entropy(3, 1001);
    test_adam(4096);
    test_adam(1003);
    test_embedding(64, 256, 50);
    test_embedding(17, 13, 5);
    test_copy(1 << 20, 0);
    test_copy(12345, 3);
  } catch (const std::exception& ex) {
    std::printf("FAIL exception: %s\n", ex.what());
    return 1;
  }
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_failures);
  return g_failures ? 1 : 0;
}
