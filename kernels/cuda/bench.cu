// measure(): builds one signature's operands on the GPU and times its kernel (docs/kernels.md).
#include "bench.hpp"
#include "kernels.cuh"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace scalescope::cuda {

namespace {

std::string version_string(int v) {  // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// The driver's own version ("580.65") from NVML, opened at run time so that nothing here links
// against a driver library (the binary must load on machines without one).
std::string nvml_driver_version() {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return {};
  using InitFn = int (*)();
  using VerFn = int (*)(char*, unsigned);
  auto init = reinterpret_cast<InitFn>(dlsym(h, "nvmlInit_v2"));
  auto ver = reinterpret_cast<VerFn>(dlsym(h, "nvmlSystemGetDriverVersion"));
  auto shut = reinterpret_cast<InitFn>(dlsym(h, "nvmlShutdown"));
  std::string out;
  if (init && ver && init() == 0) {
    char buf[96] = {};
    if (ver(buf, sizeof buf) == 0) out = buf;
    if (shut) shut();
  }
  dlclose(h);
  return out;
}

constexpr size_t kFlushBytes = size_t{256} << 20;
constexpr int64_t kMarginBytes = int64_t{256} << 20;

void* flush_buffer() {
  static void* p = [] {
    void* q = nullptr;
    SCALESCOPE_CUDA_CHECK(cudaMalloc(&q, kFlushBytes));
    return q;
  }();
  return p;
}

cudaStream_t the_stream() {
  static cudaStream_t s = [] {
    cudaStream_t t = nullptr;
    SCALESCOPE_CUDA_CHECK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    return t;
  }();
  return s;
}

struct Op {
  std::vector<void*> mem;
  std::function<void(cudaStream_t)> run;
  std::unique_ptr<LtGemm> gemm;
  double flops = 0, bytes = 0;
  std::string impl = "scalescope-cuda";
  Op() = default;
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;
  ~Op() {
    gemm.reset();
    for (void* p : mem) cudaFree(p);
  }
  template <typename T>
  T* alloc(int64_t n) {
    void* p = nullptr;
    SCALESCOPE_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T)));
    mem.push_back(p);
    return static_cast<T*>(p);
  }
};

int64_t dim(const OpSpec& s, const char* key) {
  const auto it = s.dims.find(key);
  if (it == s.dims.end()) throw Unsupported(std::string("missing dimension '") + key + "'");
  if (it->second <= 0) throw Unsupported(std::string("dimension '") + key + "' is not positive");
  return it->second;
}

void require_memory(int64_t need) {
  size_t free_b = 0, total_b = 0;
  SCALESCOPE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (need + kMarginBytes > static_cast<int64_t>(free_b)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "too big for device memory: needs %.2f GiB, %.2f GiB free",
                  static_cast<double>(need) / (1 << 30), static_cast<double>(free_b) / (1 << 30));
    throw Unsupported(buf);
  }
}

bool is_bwd(const OpSpec& s) {
  if (s.pass == "fwd") return false;
  if (s.pass == "bwd") return true;
  throw Unsupported("pass '" + s.pass + "' is neither fwd nor bwd");
}

uint64_t g_seed = 1;
uint64_t seed() {
  return g_seed++;
}

std::unique_ptr<Op> build(const OpSpec& s, cudaStream_t st) {
  auto op = std::make_unique<Op>();
  Op& o = *op;
  const std::string& k = s.kernel;
  if (k == "gemm") {
    const int64_t m = dim(s, "m"), n = dim(s, "n"), kk = dim(s, "k");
    bool f8 = false;
    if (s.dtype == "fp8")
      f8 = true;
    else if (s.dtype != "bf16")
      throw Unsupported("gemm dtype '" + s.dtype + "' (bf16 or fp8)");
    const int64_t elt = f8 ? 1 : 2;
    require_memory(elt * (m * kk + kk * n) + 2 * m * n + int64_t{LtGemm::kWorkspaceBytes});
    bf16* c = o.alloc<bf16>(m * n);
    void *a = nullptr, *b = nullptr;
    if (f8) {
      fp8* a8 = o.alloc<fp8>(m * kk);
      fp8* b8 = o.alloc<fp8>(kk * n);
      fill_uniform(a8, m * kk, seed(), 1.f, st);
      fill_uniform(b8, kk * n, seed(), 1.f, st);
      a = a8;
      b = b8;
    } else {
      bf16* a16 = o.alloc<bf16>(m * kk);
      bf16* b16 = o.alloc<bf16>(kk * n);
      fill_uniform(a16, m * kk, seed(), 1.f, st);
      fill_uniform(b16, kk * n, seed(), 1.f, st);
      a = a16;
      b = b16;
    }
    o.gemm = std::make_unique<LtGemm>(m, n, kk, f8);
    LtGemm* g = o.gemm.get();
    o.run = [=](cudaStream_t t) { g->run(a, b, c, t); };
    o.flops = 2.0 * m * n * kk;
    o.bytes = static_cast<double>(elt * (m * kk + kk * n) + 2 * m * n);
    o.impl = "cublasLt";
  } else if (k == "attention") {
    const int64_t bh = dim(s, "batch_heads"), sq = dim(s, "seq_q"), sk = dim(s, "seq_k"),
                  d = dim(s, "head_dim"), dv = dim(s, "head_dim_v");
    const bool causal = s.causal, bwd = is_bwd(s);
    if (!attention_supported(d, dv))
      throw Unsupported("attention head dims (" + std::to_string(d) + ", " + std::to_string(dv) +
                        ") not compiled (64/64, 128/128, 192/128)");
    const int64_t io = 2 * bh * (sq * d + sk * d + sk * dv + sq * dv) + 4 * bh * sq;
    require_memory(bwd ? io + 2 * bh * (sq * dv + sq * d + sk * d + sk * dv) + 4 * bh * sq * (d + 1)
                       : io);
    bf16* q = o.alloc<bf16>(bh * sq * d);
    bf16* kk = o.alloc<bf16>(bh * sk * d);
    bf16* v = o.alloc<bf16>(bh * sk * dv);
    bf16* out = o.alloc<bf16>(bh * sq * dv);
    float* lse = o.alloc<float>(bh * sq);
    fill_uniform(q, bh * sq * d, seed(), 1.f, st);
    fill_uniform(kk, bh * sk * d, seed(), 1.f, st);
    fill_uniform(v, bh * sk * dv, seed(), 1.f, st);
    const double fwd_flops = 2.0 * bh * sq * sk * (d + dv) * (causal ? 0.5 : 1.0);
    if (!bwd) {
      o.run = [=](cudaStream_t t) {
        attention_fwd(q, kk, v, out, lse, bh, sq, sk, d, dv, causal, t);
      };
      o.flops = fwd_flops;
      o.bytes = static_cast<double>(io);
      o.impl = "scalescope-flash2-mma";
    } else {
      attention_fwd(q, kk, v, out, lse, bh, sq, sk, d, dv, causal, st);
      bf16* dout = o.alloc<bf16>(bh * sq * dv);
      bf16* dq = o.alloc<bf16>(bh * sq * d);
      bf16* dk = o.alloc<bf16>(bh * sk * d);
      bf16* dvv = o.alloc<bf16>(bh * sk * dv);
      float* acc = o.alloc<float>(bh * sq * d);
      float* delta = o.alloc<float>(bh * sq);
      fill_uniform(dout, bh * sq * dv, seed(), 1.f, st);
      o.run = [=](cudaStream_t t) {
        attention_bwd(q, kk, v, out, dout, lse, dq, dk, dvv, acc, delta, bh, sq, sk, d, dv, causal,
                      t);
      };
      o.flops = 2.5 * fwd_flops;
      o.bytes = static_cast<double>(io + 2 * bh * (2 * sq * dv + sq * d + sk * d + sk * dv));
      o.impl = "scalescope-flash2-wmma-bwd";
    }
  } else if (k == "rmsnorm" || k == "layernorm") {
    const int64_t r = dim(s, "rows"), c = dim(s, "cols");
    const bool bwd = is_bwd(s), ln = k == "layernorm";
    require_memory(2 * r * c * (bwd ? 3 : 2) + 8 * r + 16 * c);
    bf16* x = o.alloc<bf16>(r * c);
    bf16* g = o.alloc<bf16>(c);
    bf16* b = o.alloc<bf16>(c);
    float* mean = o.alloc<float>(r);
    float* rstd = o.alloc<float>(r);
    bf16* y = o.alloc<bf16>(r * c);
    fill_uniform(x, r * c, seed(), 1.f, st);
    fill_uniform(g, c, seed(), 1.f, st);
    fill_uniform(b, c, seed(), 1.f, st);
    if (ln)
      layernorm_fwd(x, g, b, y, mean, rstd, r, c, 1e-5f, st);
    else
      rmsnorm_fwd(x, g, y, rstd, r, c, 1e-5f, st);
    if (!bwd) {
      if (ln)
        o.run = [=](cudaStream_t t) { layernorm_fwd(x, g, b, y, mean, rstd, r, c, 1e-5f, t); };
      else
        o.run = [=](cudaStream_t t) { rmsnorm_fwd(x, g, y, rstd, r, c, 1e-5f, t); };
      o.bytes = 4.0 * r * c + (ln ? 4.0 : 2.0) * c + (ln ? 8.0 : 4.0) * r;
    } else {
      bf16* dx = o.alloc<bf16>(r * c);
      float* dg = o.alloc<float>(c);
      float* db = o.alloc<float>(c);
      // y serves as dy
      if (ln)
        o.run = [=](cudaStream_t t) { layernorm_bwd(y, x, g, mean, rstd, dx, dg, db, r, c, t); };
      else
        o.run = [=](cudaStream_t t) { rmsnorm_bwd(y, x, g, rstd, dx, dg, r, c, t); };
      o.bytes = 6.0 * r * c + (ln ? 10.0 : 6.0) * c + (ln ? 8.0 : 4.0) * r;
    }
  } else if (k == "swiglu") {
    const int64_t r = dim(s, "rows"), c = dim(s, "cols");
    const bool bwd = is_bwd(s);
    require_memory(2 * r * c * (bwd ? 5 : 3));
    bf16* in = o.alloc<bf16>(2 * r * c);
    bf16* y = o.alloc<bf16>(r * c);
    fill_uniform(in, 2 * r * c, seed(), 2.f, st);
    fill_uniform(y, r * c, seed(), 1.f, st);
    if (!bwd) {
      o.run = [=](cudaStream_t t) { swiglu_fwd(in, y, r, c, t); };
      o.bytes = 6.0 * r * c;
    } else {
      bf16* din = o.alloc<bf16>(2 * r * c);
      o.run = [=](cudaStream_t t) { swiglu_bwd(y, in, din, r, c, t); };
      o.bytes = 10.0 * r * c;
    }
  } else if (k == "gelu") {
    const int64_t n = dim(s, "rows") * dim(s, "cols");
    const bool bwd = is_bwd(s);
    require_memory(2 * n * (bwd ? 3 : 2));
    bf16* x = o.alloc<bf16>(n);
    bf16* y = o.alloc<bf16>(n);
    fill_uniform(x, n, seed(), 3.f, st);
    fill_uniform(y, n, seed(), 1.f, st);
    if (!bwd) {
      o.run = [=](cudaStream_t t) { gelu_fwd(x, y, n, t); };
      o.bytes = 4.0 * n;
    } else {
      bf16* dx = o.alloc<bf16>(n);
      o.run = [=](cudaStream_t t) { gelu_bwd(y, x, dx, n, t); };
      o.bytes = 6.0 * n;
    }
  } else if (k == "rope") {
    const int64_t r = dim(s, "rows"), h = dim(s, "heads"), d = dim(s, "dim");
    const bool inv = is_bwd(s);
    if (d % 2) throw Unsupported("rope: odd dim");
    require_memory(2 * r * h * d + 4 * r * d);
    bf16* x = o.alloc<bf16>(r * h * d);
    float2* cs = o.alloc<float2>(r * d / 2);
    fill_uniform(x, r * h * d, seed(), 1.f, st);
    rope_table(cs, r, d, 10000.f, st);
    o.run = [=](cudaStream_t t) { rope(x, cs, r, h, d, inv, t); };
    o.bytes = 4.0 * r * h * d;
  } else if (k == "add") {
    const int64_t n = dim(s, "elements");
    require_memory(6 * n);
    bf16* a = o.alloc<bf16>(n);
    bf16* b = o.alloc<bf16>(n);
    bf16* c = o.alloc<bf16>(n);
    fill_uniform(a, n, seed(), 1.f, st);
    fill_uniform(b, n, seed(), 1.f, st);
    o.run = [=](cudaStream_t t) { add(a, b, c, n, t); };
    o.bytes = 6.0 * n;
  } else if (k == "cross_entropy") {
    const int64_t r = dim(s, "rows"), v = dim(s, "vocab");
    const bool bwd = is_bwd(s);
    if (v > INT32_MAX) throw Unsupported("cross_entropy: vocab > 2^31");
    require_memory(2 * r * v * (bwd ? 2 : 1) + 16 * r);
    bf16* logits = o.alloc<bf16>(r * v);
    int32_t* tgt = o.alloc<int32_t>(r);
    float* loss = o.alloc<float>(r);
    float* lse = o.alloc<float>(r);
    fill_uniform(logits, r * v, seed(), 4.f, st);
    fill_index(tgt, r, seed(), static_cast<int32_t>(v), st);
    if (!bwd) {
      o.run = [=](cudaStream_t t) { cross_entropy_fwd(logits, tgt, loss, lse, r, v, t); };
      o.bytes = 2.0 * r * v;
    } else {
      cross_entropy_fwd(logits, tgt, loss, lse, r, v, st);
      float* dloss = o.alloc<float>(r);
      fill_uniform(dloss, r, seed(), 1.f, st);
      bf16* dl = o.alloc<bf16>(r * v);
      o.run = [=](cudaStream_t t) { cross_entropy_bwd(logits, tgt, lse, dloss, dl, r, v, t); };
      o.bytes = 4.0 * r * v;
    }
  } else if (k == "adam") {
    const int64_t n = dim(s, "params");
    require_memory(18 * n);
    float* p = o.alloc<float>(n);
    float* m = o.alloc<float>(n);
    float* v = o.alloc<float>(n);
    float* g = o.alloc<float>(n);
    bf16* w = o.alloc<bf16>(n);
    fill_uniform(p, n, seed(), 1.f, st);
    fill_uniform(g, n, seed(), 1e-2f, st);
    SCALESCOPE_CUDA_CHECK(cudaMemsetAsync(m, 0, static_cast<size_t>(n) * 4, st));
    SCALESCOPE_CUDA_CHECK(cudaMemsetAsync(v, 0, static_cast<size_t>(n) * 4, st));
    o.run = [=](cudaStream_t t) { adam(p, m, v, g, w, n, AdamParams{}, t); };
    o.bytes = 30.0 * n;
  } else if (k == "embedding") {
    const int64_t r = dim(s, "rows"), c = dim(s, "cols"), v = dim(s, "vocab");
    const bool bwd = is_bwd(s);
    if (v > INT32_MAX) throw Unsupported("embedding: vocab > 2^31");
    require_memory(bwd ? 4 * v * c + 2 * r * c + 4 * r : 2 * v * c + 2 * r * c + 4 * r);
    int32_t* ids = o.alloc<int32_t>(r);
    fill_index(ids, r, seed(), static_cast<int32_t>(v), st);
    if (!bwd) {
      bf16* table = o.alloc<bf16>(v * c);
      bf16* out = o.alloc<bf16>(r * c);
      fill_uniform(table, v * c, seed(), 1.f, st);
      o.run = [=](cudaStream_t t) { embedding_fwd(ids, table, out, r, c, t); };
      o.bytes = 4.0 * r * c + 4.0 * r;
    } else {
      float* dt = o.alloc<float>(v * c);
      bf16* dout = o.alloc<bf16>(r * c);
      SCALESCOPE_CUDA_CHECK(cudaMemsetAsync(dt, 0, static_cast<size_t>(v * c) * 4, st));
      fill_uniform(dout, r * c, seed(), 1.f, st);
      o.run = [=](cudaStream_t t) { embedding_bwd(ids, dout, dt, r, c, t); };
      o.bytes = 10.0 * r * c + 4.0 * r;
    }
  } else if (k == "copy") {
    const int64_t b = dim(s, "bytes");
    const int64_t half = std::max<int64_t>(b / 2, 1);
    require_memory(2 * half);
    unsigned char* src = o.alloc<unsigned char>(half);
    unsigned char* dst = o.alloc<unsigned char>(half);
    SCALESCOPE_CUDA_CHECK(cudaMemsetAsync(src, 1, static_cast<size_t>(half), st));
    o.run = [=](cudaStream_t t) { copy(src, dst, half, t); };
    o.bytes = 2.0 * half;
  } else {
    throw Unsupported("unknown kernel '" + k + "'");
  }
  SCALESCOPE_CUDA_CHECK(cudaStreamSynchronize(st));
  return op;
}

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  SCALESCOPE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

struct Events {
  std::vector<cudaEvent_t> ev;
  explicit Events(size_t n) : ev(n, nullptr) {
    for (auto& e : ev) SCALESCOPE_CUDA_CHECK(cudaEventCreate(&e));
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  ~Events() {
    for (auto e : ev)
      if (e) cudaEventDestroy(e);
  }
};

Measurement time_op(Op& op, double budget_s, cudaStream_t st) {
  void* flush = flush_buffer();
  Events w(4);
  float est = 0, flush_ms = 0;
  for (int i = 0; i < 3; ++i) {  // warm-ups; the last one sizes N
    SCALESCOPE_CUDA_CHECK(cudaEventRecord(w.ev[2], st));
    SCALESCOPE_CUDA_CHECK(cudaMemsetAsync(flush, i, kFlushBytes, st));
    SCALESCOPE_CUDA_CHECK(cudaEventRecord(w.ev[0], st));
    op.run(st);
    SCALESCOPE_CUDA_CHECK(cudaEventRecord(w.ev[1], st));
    SCALESCOPE_CUDA_CHECK(cudaStreamSynchronize(st));
    est = elapsed_ms(w.ev[0], w.ev[1]);
    flush_ms = elapsed_ms(w.ev[2], w.ev[0]);
  }
  const double per_rep_ms = est + flush_ms + 0.02;
  const int reps = static_cast<int>(std::clamp(budget_s * 1e3 / per_rep_ms, 5.0, 200.0));
  Events e(2 * static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    SCALESCOPE_CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, kFlushBytes, st));
    SCALESCOPE_CUDA_CHECK(cudaEventRecord(e.ev[2 * i], st));
    op.run(st);
    SCALESCOPE_CUDA_CHECK(cudaEventRecord(e.ev[2 * i + 1], st));
  }
  SCALESCOPE_CUDA_CHECK(cudaStreamSynchronize(st));
  std::vector<double> us(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) us[i] = 1e3 * elapsed_ms(e.ev[2 * i], e.ev[2 * i + 1]);
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  Measurement m;
  m.median_us = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
  m.p10_us = us[static_cast<size_t>(std::floor(0.1 * static_cast<double>(n - 1)))];
  m.p90_us = us[static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n - 1)))];
  m.reps = reps;
  const double sec = m.median_us * 1e-6;
  if (sec > 0) {
    m.tflops = op.flops / sec / 1e12;
    m.gbps = op.bytes / sec / 1e9;
  }
  m.impl = op.impl;
  return m;
}

}  // namespace

bool known_kernel(const std::string& k) {
  static const char* const kKnown[] = {"gemm",          "attention", "rmsnorm",   "layernorm",
                                       "swiglu",        "gelu",      "rope",      "add",
                                       "cross_entropy", "adam",      "embedding", "copy"};
  return std::any_of(std::begin(kKnown), std::end(kKnown), [&](const char* s) { return k == s; });
}

DeviceInfo query_device() {
  DeviceInfo d;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    d.error = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" +
              cudaGetErrorString(e) + ")";
    cudaGetLastError();
    return d;
  }
  if (n <= 0) {
    d.error = "cudaGetDeviceCount found no device";
    return d;
  }
  try {
    cudaDeviceProp p{};
    SCALESCOPE_CUDA_CHECK(cudaSetDevice(0));
    SCALESCOPE_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    size_t free_b = 0, total_b = 0;
    SCALESCOPE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    int rt = 0, drv = 0;
    SCALESCOPE_CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    SCALESCOPE_CUDA_CHECK(cudaDriverGetVersion(&drv));
    d.name = p.name;
    d.compute_capability = std::to_string(p.major) + "." + std::to_string(p.minor);
    d.cuda_runtime = version_string(rt);
    d.driver = nvml_driver_version();
    if (d.driver.empty()) d.driver = "cuda " + version_string(drv);
    d.cublas = cublaslt_version();
    d.total_bytes = static_cast<int64_t>(total_b);
    d.free_bytes = static_cast<int64_t>(free_b);
    d.sms = p.multiProcessorCount;
    d.present = true;
  } catch (const std::exception& ex) {
    d.error = ex.what();
  }
  return d;
}

Outcome measure(const OpSpec& spec, double budget_s) {
  Outcome out;
  try {
    const cudaStream_t st = the_stream();
    flush_buffer();
    std::unique_ptr<Op> op = build(spec, st);
    out.m = time_op(*op, budget_s, st);
    out.kind = Outcome::Kind::Measured;
    return out;
  } catch (const Unsupported& ex) {
    out.why = ex.what();
  } catch (const CudaError& ex) {
    out.why = ex.what();
    if (ex.code == cudaErrorMemoryAllocation)
      out.why = "out of device memory: " + out.why;
    else
      out.kind = Outcome::Kind::Fatal;
  } catch (const std::exception& ex) {
    out.why = ex.what();
    out.kind = Outcome::Kind::Fatal;
  }
  cudaGetLastError();
  if (out.kind != Outcome::Kind::Fatal && cudaDeviceSynchronize() != cudaSuccess)
    out.kind = Outcome::Kind::Fatal;
  return out;
}

}  // namespace scalescope::cuda
