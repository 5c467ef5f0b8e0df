// Memory-bound kernels: norms, activations, rope, add, cross entropy, Adam, embedding, copy, and
// the random fills. Rows whose width is a multiple of 8 use 16-byte accesses.
#include "common.cuh"

#include <cmath>
#include <type_traits>

#include <cstdio>

namespace scalescope::cuda {

void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s failed at %s:%d: %s (%s)", what, file, line,
                cudaGetErrorString(e), cudaGetErrorName(e));
  throw CudaError(e, buf);
}

int sm_count() {
  static int cached = [] {
    int dev = 0, n = 0;
    SCALESCOPE_CUDA_CHECK(cudaGetDevice(&dev));
    SCALESCOPE_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  return cached;
}

using namespace detail;

namespace {

constexpr int kThreads = 256;

#define LAUNCH_CHECK() SCALESCOPE_CUDA_CHECK(cudaGetLastError())

__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}
__device__ __forceinline__ float uniform(int64_t i, uint64_t seed) {  // [-1, 1)
  const uint64_t h = mix(static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ULL + seed);
  return static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

template <typename T>
__global__ void fill_k(T* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float f = scale * uniform(i, seed);
    if constexpr (std::is_same_v<T, float>)
      p[i] = f;
    else
      p[i] = T(f);
  }
}
__global__ void fill_index_k(int32_t* p, int64_t n, uint64_t seed, int32_t modulus) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<int32_t>(mix(static_cast<uint64_t>(i) + seed * 0x9e3779b97f4a7c15ULL) %
                                static_cast<uint64_t>(modulus));
}

// ------------------------------------------------------------------------------------ norms

template <int V>
__global__ void rmsnorm_fwd_k(const bf16* __restrict__ x, const bf16* __restrict__ g,
                              bf16* __restrict__ y, float* __restrict__ rstd, int64_t cols,
                              float eps) {
  __shared__ float sh[32];
  const int64_t row = blockIdx.x;
  const bf16* xr = x + row * cols;
  bf16* yr = y + row * cols;
  float ss = 0.f;
  for (int64_t c = int64_t{threadIdx.x} * V; c < cols; c += int64_t{blockDim.x} * V) {
    float f[V];
    loadv<V>(xr + c, f);
#pragma unroll
    for (int i = 0; i < V; ++i) ss += f[i] * f[i];
  }
  ss = block_sum(ss, sh);
  const float r = rsqrtf(ss / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  for (int64_t c = int64_t{threadIdx.x} * V; c < cols; c += int64_t{blockDim.x} * V) {
    float f[V], w[V];
    loadv<V>(xr + c, f);
    loadv<V>(g + c, w);
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = f[i] * r * w[i];
    storev<V>(yr + c, f);
  }
}

// Each block takes rows blockIdx.x, +gridDim.x, ...; a thread always owns the same columns, so
// its dγ partial sums live in shared memory without atomics until the final flush.
template <int V>
__global__ void rmsnorm_bwd_k(const bf16* __restrict__ dy, const bf16* __restrict__ x,
                              const bf16* __restrict__ g, const float* __restrict__ rstd,
                              bf16* __restrict__ dx, float* __restrict__ dg, int64_t rows,
                              int64_t cols) {
  extern __shared__ float part[];
  __shared__ float sh[32];
  for (int64_t c = int64_t{threadIdx.x} * V; c < cols; c += int64_t{blockDim.x} * V)
#pragma unroll
    for (int i = 0; i < V; ++i) part[c + i] = 0.f;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float r = rstd[row];
    const bf16* dyr = dy + row * cols;
    const bf16* xr = x + row * cols;
    float dot = 0.f;
    for (int64_t c = int64_t{threadIdx.x} * V; c < cols; c += int64_t{blockDim.x} * V) {
      float a[V], b[V], w[V];
      loadv<V>(dyr + c, a);
      loadv<V>(xr + c, b);
      loadv<V>(g + c, w);
#pragma unroll
      for (int i = 0; i < V; ++i) dot += a[i] * w[i] * b[i];
    }
    dot = block_sum(dot, sh);
    const float kx = dot * r * r * r / static_cast<float>(cols);
    for (int64_t c = int64_t{threadIdx.x} * V; c < cols; c += int64_t{blockDim.x} * V) {
      float a[V], b[V], w[V], o[V];
      loadv<V>(dyr + c, a);
      loadv<V>(xr + c, b);
      loadv<V>(g + c, w);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        o[i] = r * w[i] * a[i] - b[i] * kx;
        part[c + i] += a[i] * b[i] * r;
      }
      storev<V>(dx + row * cols + c, o);
    }
  }
  for (int64_t c = int64_t{threadIdx.x} * V; c < cols; c += int64_t{blockDim.x} * V)
#pragma unroll
    for (int i = 0; i < V; ++i) atomicAdd(dg + c + i, part[c + i]);
}

template <int V>
__global__ void layernorm_fwd_k(const bf16* __restrict__ x, const bf16* __restrict__ g,
                                const bf16* __restrict__ b, bf16* __restrict__ y,
                                float* __restrict__ mean, float* __restrict__ rstd, int64_t cols,
                                float eps) {
  __shared__ float sh[32];
  const int64_t row = blockIdx.x;
  const bf16* xr = x + row * cols;
  float s = 0.f, ss = 0.f;
  for (int64_t c = int64_t{threadIdx.x} * V; c < cols; c += int64_t{blockDim.x} * V) {
    float f[V];
    loadv<V>(xr + c, f);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      s += f[i];
      ss += f[i] * f[i];
    }
  }
  const float n = static_cast<float>(cols);
  const float mu = block_sum(s, sh) / n;
  const float var = fmaxf(block_sum(ss, sh) / n - mu * mu, 0.f);
  const float r = rsqrtf(var + eps);
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
  for (int64_t c = int64_t{threadIdx.x} * V; c < cols; c += int64_t{blockDim.x} * V) {
    float f[V], w[V], bb[V];
    loadv<V>(xr + c, f);
    loadv<V>(g + c, w);
    loadv<V>(b + c, bb);
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = (f[i] - mu) * r * w[i] + bb[i];
    storev<V>(y + row * cols + c, f);
  }
}

template <int V>
__global__ void layernorm_bwd_k(const bf16* __restrict__ dy, const bf16* __restrict__ x,
                                const bf16* __restrict__ g, const float* __restrict__ mean,
                                const float* __restrict__ rstd, bf16* __restrict__ dx,
                                float* __restrict__ dg, float* __restrict__ db, int64_t rows,
                                int64_t cols) {
  extern __shared__ float part[];  // [cols] dγ, then [cols] dβ
  __shared__ float sh[32];
  float* pg = part;
  float* pb = part + cols;
  for (int64_t c = int64_t{threadIdx.x} * V; c < cols; c += int64_t{blockDim.x} * V)
#pragma unroll
    for (int i = 0; i < V; ++i) pg[c + i] = pb[c + i] = 0.f;
  const float n = static_cast<float>(cols);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float mu = mean[row], r = rstd[row];
    const bf16* dyr = dy + row * cols;
    const bf16* xr = x + row * cols;
    float s1 = 0.f, s2 = 0.f;  // Σ dŷ, Σ dŷ·x̂ with dŷ = dy·γ
    for (int64_t c = int64_t{threadIdx.x} * V; c < cols; c += int64_t{blockDim.x} * V) {
      float a[V], b[V], w[V];
      loadv<V>(dyr + c, a);
      loadv<V>(xr + c, b);
      loadv<V>(g + c, w);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float d = a[i] * w[i];
        s1 += d;
        s2 += d * (b[i] - mu) * r;
      }
    }
    s1 = block_sum(s1, sh) / n;
    s2 = block_sum(s2, sh) / n;
    for (int64_t c = int64_t{threadIdx.x} * V; c < cols; c += int64_t{blockDim.x} * V) {
      float a[V], b[V], w[V], o[V];
      loadv<V>(dyr + c, a);
      loadv<V>(xr + c, b);
      loadv<V>(g + c, w);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float xh = (b[i] - mu) * r;
        o[i] = r * (a[i] * w[i] - s1 - xh * s2);
        pg[c + i] += a[i] * xh;
        pb[c + i] += a[i];
      }
      storev<V>(dx + row * cols + c, o);
    }
  }
  for (int64_t c = int64_t{threadIdx.x} * V; c < cols; c += int64_t{blockDim.x} * V)
#pragma unroll
    for (int i = 0; i < V; ++i) {
      atomicAdd(dg + c + i, pg[c + i]);
      atomicAdd(db + c + i, pb[c + i]);
    }
}

// ------------------------------------------------------------------------------ activations

__device__ __forceinline__ float sigmoid(float a) {
  return 1.f / (1.f + __expf(-a));
}

template <int V>
__global__ void swiglu_fwd_k(const bf16* __restrict__ in, bf16* __restrict__ y, int64_t rows,
                             int64_t cols) {
  const int64_t nv = rows * cols / V;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < nv;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e * V / cols, c = e * V % cols;
    float a[V], b[V];
    loadv<V>(in + r * 2 * cols + c, a);
    loadv<V>(in + r * 2 * cols + cols + c, b);
#pragma unroll
    for (int i = 0; i < V; ++i) a[i] = a[i] * sigmoid(a[i]) * b[i];
    storev<V>(y + r * cols + c, a);
  }
}

template <int V>
__global__ void swiglu_bwd_k(const bf16* __restrict__ dy, const bf16* __restrict__ in,
                             bf16* __restrict__ din, int64_t rows, int64_t cols) {
  const int64_t nv = rows * cols / V;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < nv;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e * V / cols, c = e * V % cols;
    float d[V], a[V], b[V];
    loadv<V>(dy + r * cols + c, d);
    loadv<V>(in + r * 2 * cols + c, a);
    loadv<V>(in + r * 2 * cols + cols + c, b);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float s = sigmoid(a[i]);
      const float silu = a[i] * s;
      const float da = d[i] * b[i] * s * (1.f + a[i] * (1.f - s));
      b[i] = d[i] * silu;
      a[i] = da;
    }
    storev<V>(din + r * 2 * cols + c, a);
    storev<V>(din + r * 2 * cols + cols + c, b);
  }
}

constexpr float kGeluK0 = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kGeluK1 = 0.044715f;

template <int V>
__global__ void gelu_fwd_k(const bf16* __restrict__ x, bf16* __restrict__ y, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n / V;
       e += int64_t{gridDim.x} * blockDim.x) {
    float f[V];
    loadv<V>(x + e * V, f);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float u = kGeluK0 * (f[i] + kGeluK1 * f[i] * f[i] * f[i]);
      f[i] = 0.5f * f[i] * (1.f + tanhf(u));
    }
    storev<V>(y + e * V, f);
  }
}

template <int V>
__global__ void gelu_bwd_k(const bf16* __restrict__ dy, const bf16* __restrict__ x,
                           bf16* __restrict__ dx, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n / V;
       e += int64_t{gridDim.x} * blockDim.x) {
    float d[V], f[V];
    loadv<V>(dy + e * V, d);
    loadv<V>(x + e * V, f);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float xv = f[i];
      const float t = tanhf(kGeluK0 * (xv + kGeluK1 * xv * xv * xv));
      const float grad =
          0.5f * (1.f + t) + 0.5f * xv * (1.f - t * t) * kGeluK0 * (1.f + 3.f * kGeluK1 * xv * xv);
      d[i] *= grad;
    }
    storev<V>(dx + e * V, d);
  }
}

// --------------------------------------------------------------------------------------- rope

__global__ void rope_table_k(float2* cs, int64_t rows, int64_t half, float base) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < rows * half;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / half, i = e % half;
    const double theta =
        static_cast<double>(r) * pow(static_cast<double>(base), -static_cast<double>(i) / half);
    cs[e] = make_float2(static_cast<float>(cos(theta)), static_cast<float>(sin(theta)));
  }
}

template <int V>
__global__ void rope_k(bf16* __restrict__ x, const float2* __restrict__ cs, int64_t rows,
                       int64_t heads, int64_t dim, float sign) {
  const int64_t half = dim / 2;
  const int64_t nv = rows * heads * half / V;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < nv;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e * V % half, rh = e * V / half, r = rh / heads;
    bf16* p = x + rh * dim + i;
    float a[V], b[V];
    loadv<V>(p, a);
    loadv<V>(p + half, b);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float2 t = cs[r * half + i + j];
      const float s = sign * t.y;
      const float x1 = a[j], x2 = b[j];
      a[j] = x1 * t.x - x2 * s;
      b[j] = x2 * t.x + x1 * s;
    }
    storev<V>(p, a);
    storev<V>(p + half, b);
  }
}

template <int V>
__global__ void add_k(const bf16* __restrict__ a, const bf16* __restrict__ b, bf16* __restrict__ o,
                      int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n / V;
       e += int64_t{gridDim.x} * blockDim.x) {
    float f[V], g[V];
    loadv<V>(a + e * V, f);
    loadv<V>(b + e * V, g);
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] += g[i];
    storev<V>(o + e * V, f);
  }
}

// ----------------------------------------------------------------------------- cross entropy

constexpr int kCeThreads = 512;

template <int V>
__global__ void __launch_bounds__(kCeThreads)
    ce_fwd_k(const bf16* __restrict__ logits, const int32_t* __restrict__ target,
             float* __restrict__ loss, float* __restrict__ lse, int64_t vocab) {
  __shared__ float sh[32];
  const int64_t row = blockIdx.x;
  const bf16* lr = logits + row * vocab;
  float m = -INFINITY, s = 0.f;
  for (int64_t c = int64_t{threadIdx.x} * V; c < vocab; c += int64_t{blockDim.x} * V) {
    float f[V];
    loadv<V>(lr + c, f);
    float mx = f[0];
#pragma unroll
    for (int i = 1; i < V; ++i) mx = fmaxf(mx, f[i]);
    if (mx > m) {
      s *= __expf(m - mx);
      m = mx;
    }
#pragma unroll
    for (int i = 0; i < V; ++i) s += __expf(f[i] - m);
  }
  const float M = block_max(m, sh);
  const float S = block_sum(m == -INFINITY ? 0.f : s * __expf(m - M), sh);
  if (threadIdx.x == 0) {
    const float l = M + logf(S);
    lse[row] = l;
    loss[row] = l - __bfloat162float(lr[target[row]]);
  }
}

template <int V>
__global__ void ce_bwd_k(const bf16* __restrict__ logits, const int32_t* __restrict__ target,
                         const float* __restrict__ lse, const float* __restrict__ dloss,
                         bf16* __restrict__ dlogits, int64_t vocab) {
  const int64_t row = blockIdx.x;
  const float l = lse[row], d = dloss[row];
  const int64_t t = target[row];
  for (int64_t c = int64_t{threadIdx.x} * V; c < vocab; c += int64_t{blockDim.x} * V) {
    float f[V];
    loadv<V>(logits + row * vocab + c, f);
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = (__expf(f[i] - l) - (c + i == t ? 1.f : 0.f)) * d;
    storev<V>(dlogits + row * vocab + c, f);
  }
}

// ---------------------------------------------------------------------------------------- adam

struct AdamK {
  float lr, b1, b2, eps, wd, c1, c2;  // c1 = 1/(1-β1^t), c2 = 1/(1-β2^t)
};

__device__ __forceinline__ void adam_one(float& p, float& m, float& v, float g, const AdamK& k) {
  m = k.b1 * m + (1.f - k.b1) * g;
  v = k.b2 * v + (1.f - k.b2) * g * g;
  const float mh = m * k.c1, vh = v * k.c2;
  p -= k.lr * (mh / (sqrtf(vh) + k.eps) + k.wd * p);
}

__global__ void adam4_k(float4* p, float4* m, float4* v, const float4* g, __nv_bfloat162* w,
                        int64_t n4, AdamK k) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n4;
       e += int64_t{gridDim.x} * blockDim.x) {
    float4 pp = p[e], mm = m[e], vv = v[e];
    const float4 gg = g[e];
    adam_one(pp.x, mm.x, vv.x, gg.x, k);
    adam_one(pp.y, mm.y, vv.y, gg.y, k);
    adam_one(pp.z, mm.z, vv.z, gg.z, k);
    adam_one(pp.w, mm.w, vv.w, gg.w, k);
    p[e] = pp;
    m[e] = mm;
    v[e] = vv;
    w[2 * e] = __floats2bfloat162_rn(pp.x, pp.y);
    w[2 * e + 1] = __floats2bfloat162_rn(pp.z, pp.w);
  }
}
__global__ void adam1_k(float* p, float* m, float* v, const float* g, bf16* w, int64_t n, AdamK k) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    adam_one(p[e], m[e], v[e], g[e], k);
    w[e] = __float2bfloat16(p[e]);
  }
}

// ----------------------------------------------------------------------------------- embedding

template <int V>
__global__ void embedding_fwd_k(const int32_t* __restrict__ ids, const bf16* __restrict__ table,
                                bf16* __restrict__ out, int64_t rows, int64_t cols) {
  const int64_t nv = rows * cols / V;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < nv;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e * V / cols, c = e * V % cols;
    float f[V];
    loadv<V>(table + int64_t{ids[r]} * cols + c, f);
    storev<V>(out + r * cols + c, f);
  }
}

template <int V>
__global__ void embedding_bwd_k(const int32_t* __restrict__ ids, const bf16* __restrict__ dout,
                                float* __restrict__ dtable, int64_t rows, int64_t cols) {
  const int64_t nv = rows * cols / V;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < nv;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e * V / cols, c = e * V % cols;
    float f[V];
    loadv<V>(dout + r * cols + c, f);
    float* t = dtable + int64_t{ids[r]} * cols + c;
#pragma unroll
    for (int i = 0; i < V; ++i) atomicAdd(t + i, f[i]);
  }
}

// ---------------------------------------------------------------------------------------- copy

__global__ void copy16_k(const uint4* __restrict__ s, uint4* __restrict__ d, int64_t n16) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n16;
       e += int64_t{gridDim.x} * blockDim.x)
    d[e] = s[e];
}
__global__ void copy1_k(const unsigned char* __restrict__ s, unsigned char* __restrict__ d,
                        int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x)
    d[e] = s[e];
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Dynamic shared memory for the norms' per-block parameter-gradient partials.
template <typename Kernel>
void raise_smem(Kernel k, size_t bytes) {
  static constexpr size_t kDefault = 48 * 1024;
  // The kernels' static shared memory (a few hundred bytes) counts against the same limit.
  if (bytes + 1024 <= kDefault) return;
  int dev = 0, optin = 0;
  SCALESCOPE_CUDA_CHECK(cudaGetDevice(&dev));
  SCALESCOPE_CUDA_CHECK(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (bytes + 1024 > static_cast<size_t>(optin))
    throw Unsupported("norm backward: cols too large for the shared-memory partials");
  SCALESCOPE_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes)));
}

unsigned norm_bwd_grid(int64_t rows) {
  const int64_t g = int64_t{sm_count()} * 2;
  return static_cast<unsigned>(rows < g ? rows : g);
}

}  // namespace

// ------------------------------------------------------------------------------ host wrappers

void fill_uniform(bf16* p, int64_t n, uint64_t seed, float scale, cudaStream_t s) {
  fill_k<<<grid_for(n, kThreads), kThreads, 0, s>>>(p, n, seed, scale);
  LAUNCH_CHECK();
}
void fill_uniform(float* p, int64_t n, uint64_t seed, float scale, cudaStream_t s) {
  fill_k<<<grid_for(n, kThreads), kThreads, 0, s>>>(p, n, seed, scale);
  LAUNCH_CHECK();
}
void fill_uniform(fp8* p, int64_t n, uint64_t seed, float scale, cudaStream_t s) {
  fill_k<<<grid_for(n, kThreads), kThreads, 0, s>>>(p, n, seed, scale);
  LAUNCH_CHECK();
}
void fill_index(int32_t* p, int64_t n, uint64_t seed, int32_t modulus, cudaStream_t s) {
  fill_index_k<<<grid_for(n, kThreads), kThreads, 0, s>>>(p, n, seed, modulus);
  LAUNCH_CHECK();
}

void rmsnorm_fwd(const bf16* x, const bf16* g, bf16* y, float* rstd, int64_t rows, int64_t cols,
                 float eps, cudaStream_t s) {
  if (rows <= 0) return;
  const unsigned grid = static_cast<unsigned>(rows);
  if (cols % 8 == 0)
    rmsnorm_fwd_k<8><<<grid, kThreads, 0, s>>>(x, g, y, rstd, cols, eps);
  else
    rmsnorm_fwd_k<1><<<grid, kThreads, 0, s>>>(x, g, y, rstd, cols, eps);
  LAUNCH_CHECK();
}

void rmsnorm_bwd(const bf16* dy, const bf16* x, const bf16* g, const float* rstd, bf16* dx,
                 float* dg, int64_t rows, int64_t cols, cudaStream_t s) {
  SCALESCOPE_CUDA_CHECK(cudaMemsetAsync(dg, 0, static_cast<size_t>(cols) * sizeof(float), s));
  if (rows <= 0) return;
  const size_t smem = static_cast<size_t>(cols) * sizeof(float);
  const unsigned grid = norm_bwd_grid(rows);
  if (cols % 8 == 0) {
    raise_smem(rmsnorm_bwd_k<8>, smem);
    rmsnorm_bwd_k<8><<<grid, kThreads, smem, s>>>(dy, x, g, rstd, dx, dg, rows, cols);
  } else {
    raise_smem(rmsnorm_bwd_k<1>, smem);
    rmsnorm_bwd_k<1><<<grid, kThreads, smem, s>>>(dy, x, g, rstd, dx, dg, rows, cols);
  }
  LAUNCH_CHECK();
}

void layernorm_fwd(const bf16* x, const bf16* g, const bf16* b, bf16* y, float* mean, float* rstd,
                   int64_t rows, int64_t cols, float eps, cudaStream_t s) {
  if (rows <= 0) return;
  const unsigned grid = static_cast<unsigned>(rows);
  if (cols % 8 == 0)
    layernorm_fwd_k<8><<<grid, kThreads, 0, s>>>(x, g, b, y, mean, rstd, cols, eps);
  else
    layernorm_fwd_k<1><<<grid, kThreads, 0, s>>>(x, g, b, y, mean, rstd, cols, eps);
  LAUNCH_CHECK();
}

void layernorm_bwd(const bf16* dy, const bf16* x, const bf16* g, const float* mean,
                   const float* rstd, bf16* dx, float* dg, float* db, int64_t rows, int64_t cols,
                   cudaStream_t s) {
  SCALESCOPE_CUDA_CHECK(cudaMemsetAsync(dg, 0, static_cast<size_t>(cols) * sizeof(float), s));
  SCALESCOPE_CUDA_CHECK(cudaMemsetAsync(db, 0, static_cast<size_t>(cols) * sizeof(float), s));
  if (rows <= 0) return;
  const size_t smem = 2 * static_cast<size_t>(cols) * sizeof(float);
  const unsigned grid = norm_bwd_grid(rows);
  if (cols % 8 == 0) {
    raise_smem(layernorm_bwd_k<8>, smem);
    layernorm_bwd_k<8><<<grid, kThreads, smem, s>>>(dy, x, g, mean, rstd, dx, dg, db, rows, cols);
  } else {
    raise_smem(layernorm_bwd_k<1>, smem);
    layernorm_bwd_k<1><<<grid, kThreads, smem, s>>>(dy, x, g, mean, rstd, dx, dg, db, rows, cols);
  }
  LAUNCH_CHECK();
}

void swiglu_fwd(const bf16* in, bf16* y, int64_t rows, int64_t cols, cudaStream_t s) {
  const int v = cols % 8 == 0 ? 8 : 1;
  const unsigned grid = grid_for(rows * cols / v, kThreads);
  if (v == 8)
    swiglu_fwd_k<8><<<grid, kThreads, 0, s>>>(in, y, rows, cols);
  else
    swiglu_fwd_k<1><<<grid, kThreads, 0, s>>>(in, y, rows, cols);
  LAUNCH_CHECK();
}
void swiglu_bwd(const bf16* dy, const bf16* in, bf16* din, int64_t rows, int64_t cols,
                cudaStream_t s) {
  const int v = cols % 8 == 0 ? 8 : 1;
  const unsigned grid = grid_for(rows * cols / v, kThreads);
  if (v == 8)
    swiglu_bwd_k<8><<<grid, kThreads, 0, s>>>(dy, in, din, rows, cols);
  else
    swiglu_bwd_k<1><<<grid, kThreads, 0, s>>>(dy, in, din, rows, cols);
  LAUNCH_CHECK();
}

void gelu_fwd(const bf16* x, bf16* y, int64_t n, cudaStream_t s) {
  const int v = n % 8 == 0 ? 8 : 1;
  if (v == 8)
    gelu_fwd_k<8><<<grid_for(n / 8, kThreads), kThreads, 0, s>>>(x, y, n);
  else
    gelu_fwd_k<1><<<grid_for(n, kThreads), kThreads, 0, s>>>(x, y, n);
  LAUNCH_CHECK();
}
void gelu_bwd(const bf16* dy, const bf16* x, bf16* dx, int64_t n, cudaStream_t s) {
  const int v = n % 8 == 0 ? 8 : 1;
  if (v == 8)
    gelu_bwd_k<8><<<grid_for(n / 8, kThreads), kThreads, 0, s>>>(dy, x, dx, n);
  else
    gelu_bwd_k<1><<<grid_for(n, kThreads), kThreads, 0, s>>>(dy, x, dx, n);
  LAUNCH_CHECK();
}

void rope_table(float2* cs, int64_t rows, int64_t dim, float base, cudaStream_t s) {
  rope_table_k<<<grid_for(rows * (dim / 2), kThreads), kThreads, 0, s>>>(cs, rows, dim / 2, base);
  LAUNCH_CHECK();
}
void rope(bf16* x, const float2* cs, int64_t rows, int64_t heads, int64_t dim, bool inverse,
          cudaStream_t s) {
  if (dim % 2 != 0) throw Unsupported("rope: odd dim");
  const int64_t half = dim / 2;
  const float sign = inverse ? -1.f : 1.f;
  if (half % 8 == 0)
    rope_k<8><<<grid_for(rows * heads * half / 8, kThreads), kThreads, 0, s>>>(x, cs, rows, heads,
                                                                               dim, sign);
  else
    rope_k<1><<<grid_for(rows * heads * half, kThreads), kThreads, 0, s>>>(x, cs, rows, heads, dim,
                                                                           sign);
  LAUNCH_CHECK();
}

void add(const bf16* a, const bf16* b, bf16* out, int64_t n, cudaStream_t s) {
  if (n % 8 == 0)
    add_k<8><<<grid_for(n / 8, kThreads), kThreads, 0, s>>>(a, b, out, n);
  else
    add_k<1><<<grid_for(n, kThreads), kThreads, 0, s>>>(a, b, out, n);
  LAUNCH_CHECK();
}

void cross_entropy_fwd(const bf16* logits, const int32_t* target, float* loss, float* lse,
                       int64_t rows, int64_t vocab, cudaStream_t s) {
  if (rows <= 0) return;
  const unsigned grid = static_cast<unsigned>(rows);
  if (vocab % 8 == 0)
    ce_fwd_k<8><<<grid, kCeThreads, 0, s>>>(logits, target, loss, lse, vocab);
  else
    ce_fwd_k<1><<<grid, kCeThreads, 0, s>>>(logits, target, loss, lse, vocab);
  LAUNCH_CHECK();
}
void cross_entropy_bwd(const bf16* logits, const int32_t* target, const float* lse,
                       const float* dloss, bf16* dlogits, int64_t rows, int64_t vocab,
                       cudaStream_t s) {
  if (rows <= 0) return;
  const unsigned grid = static_cast<unsigned>(rows);
  if (vocab % 8 == 0)
    ce_bwd_k<8><<<grid, kCeThreads, 0, s>>>(logits, target, lse, dloss, dlogits, vocab);
  else
    ce_bwd_k<1><<<grid, kCeThreads, 0, s>>>(logits, target, lse, dloss, dlogits, vocab);
  LAUNCH_CHECK();
}

void adam(float* p, float* m, float* v, const float* g, bf16* w, int64_t n, const AdamParams& hp,
          cudaStream_t s) {
  AdamK k{hp.lr,
          hp.beta1,
          hp.beta2,
          hp.eps,
          hp.weight_decay,
          static_cast<float>(1.0 / (1.0 - std::pow(double{hp.beta1}, hp.step))),
          static_cast<float>(1.0 / (1.0 - std::pow(double{hp.beta2}, hp.step)))};
  const bool vec = n % 4 == 0 && aligned16(p) && aligned16(m) && aligned16(v) && aligned16(g) &&
                   (reinterpret_cast<uintptr_t>(w) & 7u) == 0;
  if (vec)
    adam4_k<<<grid_for(n / 4, kThreads), kThreads, 0, s>>>(
        reinterpret_cast<float4*>(p), reinterpret_cast<float4*>(m), reinterpret_cast<float4*>(v),
        reinterpret_cast<const float4*>(g), reinterpret_cast<__nv_bfloat162*>(w), n / 4, k);
  else
    adam1_k<<<grid_for(n, kThreads), kThreads, 0, s>>>(p, m, v, g, w, n, k);
  LAUNCH_CHECK();
}

void embedding_fwd(const int32_t* ids, const bf16* table, bf16* out, int64_t rows, int64_t cols,
                   cudaStream_t s) {
  if (cols % 8 == 0)
    embedding_fwd_k<8>
        <<<grid_for(rows * cols / 8, kThreads), kThreads, 0, s>>>(ids, table, out, rows, cols);
  else
    embedding_fwd_k<1>
        <<<grid_for(rows * cols, kThreads), kThreads, 0, s>>>(ids, table, out, rows, cols);
  LAUNCH_CHECK();
}
void embedding_bwd(const int32_t* ids, const bf16* dout, float* dtable, int64_t rows, int64_t cols,
                   cudaStream_t s) {
  if (cols % 8 == 0)
    embedding_bwd_k<8>
        <<<grid_for(rows * cols / 8, kThreads), kThreads, 0, s>>>(ids, dout, dtable, rows, cols);
  else
    embedding_bwd_k<1>
        <<<grid_for(rows * cols, kThreads), kThreads, 0, s>>>(ids, dout, dtable, rows, cols);
  LAUNCH_CHECK();
}

void copy(const void* src, void* dst, int64_t bytes, cudaStream_t s) {
  if (bytes <= 0) return;
  int64_t done = 0;
  if (aligned16(src) && aligned16(dst)) {
    const int64_t n16 = bytes / 16;
    if (n16 > 0)
      copy16_k<<<grid_for(n16, kThreads), kThreads, 0, s>>>(static_cast<const uint4*>(src),
                                                            static_cast<uint4*>(dst), n16);
    done = n16 * 16;
  }
  if (done < bytes)
    copy1_k<<<grid_for(bytes - done, kThreads), kThreads, 0, s>>>(
        static_cast<const unsigned char*>(src) + done, static_cast<unsigned char*>(dst) + done,
        bytes - done);
  LAUNCH_CHECK();
}

}  // namespace scalescope::cuda
