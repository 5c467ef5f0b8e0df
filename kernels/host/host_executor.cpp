// The host executor: runs each kernel class of docs/kernels.md with the Kokkos kernels of
// host_kernels.cpp on buffers sized by the (scaled) signature, and times it with a steady clock.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/executor.hpp"
#include "kernels/host/host_kernels.hpp"

namespace scalescope::kernels {

namespace {

using host::Vec;
using Ids = Kokkos::View<std::int64_t*, Kokkos::HostSpace>;

/// Kokkos is initialised once per process, on first use, and finalised at exit.
void ensure_kokkos() {
  if (!Kokkos::is_initialized()) {
    Kokkos::InitArguments args;
    args.disable_warnings = true;
    Kokkos::initialize(args);
    std::atexit([] {
      if (Kokkos::is_initialized()) Kokkos::finalize();
    });
  }
}

Vec filled(const std::string& name, std::int64_t n, float value) {
  Vec v(name, static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
  for (std::size_t i = 0; i < v.extent(0); ++i)
    v(i) = value * static_cast<float>(1 + (i * 7919) % 13) / 13.0f;
  return v;
}

class HostExecutor final : public Executor {
 public:
  HostExecutor(double scale, int reps) : scale_(scale), reps_(std::max(1, reps)) {
    ensure_kokkos();
  }
  std::string backend() const override { return "host"; }
  std::string device() const override { return "host (Kokkos Serial)"; }
  double op_scale() const override { return scale_; }
  std::string versions() const override {
    return "Kokkos " + std::to_string(KOKKOS_VERSION / 10000) + "." +
           std::to_string(KOKKOS_VERSION / 100 % 100) + "." + std::to_string(KOKKOS_VERSION % 100);
  }

  std::optional<Measurement> measure(const cost::KernelSig& sig) override {
    std::function<void()> run;
    std::int64_t floats = 0;
    if (!prepare(sig, run, floats)) return std::nullopt;
    run();  // warm-up
    std::vector<double> t;
    for (int i = 0; i < reps_; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      run();
      Kokkos::fence();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    Measurement m;
    m.median_s = t[t.size() / 2];
    m.p10_s = t[t.size() / 10];
    m.p90_s = t[(t.size() * 9) / 10];
    m.reps = reps_;
    m.bytes_held = 4 * floats;
    m.impl = "host-kokkos";
    return m;
  }

 private:
  std::int64_t dim(std::int64_t x) const {
    return std::max<std::int64_t>(
        1, static_cast<std::int64_t>(std::llround(static_cast<double>(x) * scale_)));
  }

  /// Builds the kernel's buffers and a closure that runs it once; false for KernelClass::None.
  bool prepare(const cost::KernelSig& sig, std::function<void()>& run, std::int64_t& floats) {
    const auto& d = sig.dims;
    const bool bwd = sig.backward;
    switch (sig.kernel) {
      case cost::KernelClass::Gemm: {
        const std::int64_t m = dim(d[0]), n = dim(d[1]), k = dim(d[2]);
        Vec a = filled("a", m * k, 1), b = filled("b", k * n, 1), c = filled("c", m * n, 0);
        floats = m * k + k * n + m * n;
        run = [=] { host::gemm(a, b, c, m, n, k); };
        return true;
      }
      case cost::KernelClass::Attention: {
        const std::int64_t bh = dim(d[0]), sq = dim(d[1]), sk = std::max(sq, dim(d[2]));
        const std::int64_t hd = d[3], dv = d[4];  // head dims are not scaled
        Vec q = filled("q", bh * sq * hd, 0.1f), k = filled("k", bh * sk * hd, 0.1f),
            v = filled("v", bh * sk * dv, 1), o = filled("o", bh * sq * dv, 0),
            lse = filled("lse", bh * sq, 0);
        floats = bh * (2 * sq * hd + sk * (hd + dv) + sq * dv);
        if (!bwd) {
          run = [=] { host::attention_fwd(q, k, v, o, lse, bh, sq, sk, hd, dv, sig.causal); };
          return true;
        }
        host::attention_fwd(q, k, v, o, lse, bh, sq, sk, hd, dv, sig.causal);
        Vec dout = filled("do", bh * sq * dv, 1), dq = filled("dq", bh * sq * hd, 0),
            dk = filled("dk", bh * sk * hd, 0), dvv = filled("dv", bh * sk * dv, 0);
        run = [=] {
          host::attention_bwd(q, k, v, o, lse, dout, dq, dk, dvv, bh, sq, sk, hd, dv, sig.causal);
        };
        return true;
      }
      case cost::KernelClass::RmsNorm:
      case cost::KernelClass::LayerNorm: {
        const std::int64_t rows = dim(d[0]), cols = d[1];
        Vec x = filled("x", rows * cols, 1), g = filled("g", cols, 1), b = filled("b", cols, 0),
            y = filled("y", rows * cols, 0), dg = filled("dg", cols, 0), db = filled("db", cols, 0);
        floats = 2 * rows * cols + 4 * cols;
        const bool ln = sig.kernel == cost::KernelClass::LayerNorm;
        if (!bwd)
          run = ln ? std::function<void()>([=] { host::layernorm_fwd(x, g, b, y, rows, cols); })
                   : std::function<void()>([=] { host::rmsnorm_fwd(x, g, y, rows, cols); });
        else
          run = ln ? std::function<void()>(
                         [=] { host::layernorm_bwd(x, g, x, y, dg, db, rows, cols); })
                   : std::function<void()>([=] { host::rmsnorm_bwd(x, g, x, y, dg, rows, cols); });
        return true;
      }
      case cost::KernelClass::SwiGlu: {
        const std::int64_t rows = dim(d[0]), cols = dim(d[1]);
        Vec in = filled("in", 2 * rows * cols, 1), y = filled("y", rows * cols, 0),
            din = filled("din", 2 * rows * cols, 0);
        floats = 5 * rows * cols;
        run = bwd ? std::function<void()>([=] { host::swiglu_bwd(in, y, din, rows, cols); })
                  : std::function<void()>([=] { host::swiglu_fwd(in, y, rows, cols); });
        return true;
      }
      case cost::KernelClass::Gelu: {
        const std::int64_t n = dim(d[0]) * dim(d[1]);
        Vec x = filled("x", n, 1), y = filled("y", n, 0), dx = filled("dx", n, 0);
        floats = 3 * n;
        run = bwd ? std::function<void()>([=] { host::gelu_bwd(x, y, dx, n); })
                  : std::function<void()>([=] { host::gelu_fwd(x, y, n); });
        return true;
      }
      case cost::KernelClass::Rope: {
        const std::int64_t rows = dim(d[0]), heads = d[1], hd = d[2];
        Vec x = filled("x", rows * heads * hd, 1);
        floats = rows * heads * hd;
        run = [=] { host::rope(x, rows, heads, hd, bwd); };
        return true;
      }
      case cost::KernelClass::CrossEntropy: {
        const std::int64_t rows = dim(d[0]), vocab = dim(d[1]);
        Vec logits = filled("logits", rows * vocab, 1), out = filled("out", rows * vocab, 0);
        Ids labels(std::string("labels"), static_cast<std::size_t>(rows));
        for (std::int64_t r = 0; r < rows; ++r) labels(r) = (r * 31) % vocab;
        floats = 2 * rows * vocab;
        run = bwd ? std::function<void()>(
                        [=] { host::cross_entropy_bwd(logits, labels, out, rows, vocab); })
                  : std::function<void()>(
                        [=] { host::cross_entropy_fwd(logits, labels, out, rows, vocab); });
        return true;
      }
      case cost::KernelClass::Adam: {
        const std::int64_t n = dim(d[0]);
        Vec w = filled("w", n, 1), g = filled("g", n, 0.01f), m = filled("m", n, 0),
            v = filled("v", n, 0);
        floats = 4 * n;
        run = [=] { host::adam(w, g, m, v, n, 1e-4f, 1); };
        return true;
      }
      case cost::KernelClass::Embedding: {
        const std::int64_t rows = dim(d[0]), cols = d[1],
                           vocab = std::max<std::int64_t>(1, dim(d[2]));
        Vec table = filled("table", vocab * cols, 1), out = filled("out", rows * cols, 0);
        Ids ids(std::string("ids"), static_cast<std::size_t>(rows));
        for (std::int64_t r = 0; r < rows; ++r) ids(r) = (r * 7) % vocab;
        floats = vocab * cols + rows * cols;
        run =
            bwd ? std::function<void()>([=] { host::embedding_bwd(out, ids, table, rows, cols); })
                : std::function<void()>([=] { host::embedding_fwd(table, ids, out, rows, cols); });
        return true;
      }
      case cost::KernelClass::Copy: {
        // bytes/2 read and bytes/2 written as fp32 elements; the byte count scales once.
        const std::int64_t n = std::max<std::int64_t>(1, dim(d[0]) / 8);
        Vec in = filled("in", n, 1), out = filled("out", n, 0);
        floats = 2 * n;
        run = [=] { host::copy(in, out, n); };
        return true;
      }
      case cost::KernelClass::None:
        break;
    }
    return false;
  }

  double scale_;
  int reps_;
};

}  // namespace

std::unique_ptr<Executor> make_host_executor(double op_scale, int reps) {
  return std::make_unique<HostExecutor>(op_scale, reps);
}

}  // namespace scalescope::kernels
