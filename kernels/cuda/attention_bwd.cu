// Attention backward, FlashAttention-2 order: one block of 4 warps per 64-key tile of one head
// loops over the query tiles that see it, recomputes P = exp(S − LSE) from the forward's LSE,
// and forms dS = P∘(dP − Δ) with Δ = rowsum(dO∘O). dK, dV accumulate in registers (WMMA
// fragments, 16 keys per warp); dQ is added with fp32 atomics into a workspace, then converted.
// The GEMMs run on the tensor cores through WMMA from shared memory; correct, not the fastest.
#include "attention_common.cuh"

#include <mma.h>

namespace scalescope::cuda {

using namespace detail;
namespace wmma = nvcuda::wmma;

namespace {

constexpr int kB = 64, kThreads = 128, kLdS = kB + 4, kLdP = kB + 8;

__global__ void attn_bwd_delta_k(const bf16* __restrict__ O, const bf16* __restrict__ dO,
                                 float* __restrict__ delta, int64_t rows, int dv) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  float s = 0.f;
  for (int c = lane * 2; c < dv; c += 64) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(O + row * dv + c));
    const float2 b =
        __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dO + row * dv + c));
    s += a.x * b.x + a.y * b.y;
  }
  s = warp_sum(s);
  if (lane == 0) delta[row] = s;
}

__global__ void attn_bwd_dq_k(const float* __restrict__ acc, bf16* __restrict__ dq, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x)
    dq[e] = __float2bfloat16(acc[e]);
}

template <int D, int DV>
struct BwdSmem {
  static constexpr int LDK = D + 8, LDV = DV + 8;
  // offsets in bytes, each a multiple of 128
  static constexpr size_t kK = 0;
  static constexpr size_t kV = kK + size_t{kB} * LDK * 2;
  static constexpr size_t kQ = kV + size_t{kB} * LDV * 2;
  static constexpr size_t kDO = kQ + size_t{kB} * LDK * 2;
  static constexpr size_t kS = kDO + size_t{kB} * LDV * 2;
  static constexpr size_t kP = kS + size_t{kB} * kLdS * 4;
  static constexpr size_t kDS = kP + size_t{kB} * kLdP * 2;
  static constexpr size_t kLse = kDS + size_t{kB} * kLdP * 2;
  static constexpr size_t kDelta = kLse + kB * 4;
  static constexpr size_t kScratch = kDelta + kB * 4;
  static constexpr size_t kTotal = kScratch + 4 * 256 * 4;
};

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragAt = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <int D, int DV>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_k(const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V,
               const bf16* __restrict__ dO, const float* __restrict__ LSE,
               const float* __restrict__ Delta, float* __restrict__ dQacc, bf16* __restrict__ dK,
               bf16* __restrict__ dV, int64_t sq, int64_t sk, int causal, float scale) {
  using L = BwdSmem<D, DV>;
  constexpr int LDK = L::LDK, LDV = L::LDV;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* sV = reinterpret_cast<bf16*>(smem + L::kV);
  bf16* sQ = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* sdO = reinterpret_cast<bf16*>(smem + L::kDO);
  float* sS = reinterpret_cast<float*>(smem + L::kS);
  bf16* sP = reinterpret_cast<bf16*>(smem + L::kP);
  bf16* sdS = reinterpret_cast<bf16*>(smem + L::kDS);
  float* sLse = reinterpret_cast<float*>(smem + L::kLse);
  float* sDelta = reinterpret_cast<float*>(smem + L::kDelta);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* scratch = reinterpret_cast<float*>(smem + L::kScratch) + warp * 256;

  const int64_t bh = blockIdx.y;
  const int64_t k0 = int64_t{blockIdx.x} * kB;
  const bf16* Qh = Q + bh * sq * D;
  const bf16* dOh = dO + bh * sq * DV;
  const int64_t offset = sk - sq;
  const float scale_log2 = scale * kLog2e;

  load_tile<kB, D, LDK, kThreads>(sK, K + bh * sk * D, k0, sk);
  load_tile<kB, DV, LDV, kThreads>(sV, V + bh * sk * DV, k0, sk);

  FragC acc_dv[DV / 16], acc_dk[D / 16];
#pragma unroll
  for (int i = 0; i < DV / 16; ++i) wmma::fill_fragment(acc_dv[i], 0.f);
#pragma unroll
  for (int i = 0; i < D / 16; ++i) wmma::fill_fragment(acc_dk[i], 0.f);

  int64_t qstart = 0;
  if (causal) {
    qstart = k0 - offset;
    qstart = qstart < 0 ? 0 : qstart / kB * kB;
  }
  for (int64_t q0 = qstart; q0 < sq; q0 += kB) {
    __syncthreads();
    load_tile<kB, D, LDK, kThreads>(sQ, Qh, q0, sq);
    load_tile<kB, DV, LDV, kThreads>(sdO, dOh, q0, sq);
    for (int i = threadIdx.x; i < kB; i += kThreads) {
      const bool in = q0 + i < sq;
      const float lse = in ? LSE[bh * sq + q0 + i] : INFINITY;
      sLse[i] = lse * kLog2e;
      sDelta[i] = in ? Delta[bh * sq + q0 + i] : 0.f;
    }
    __syncthreads();

    // S = Q·Kᵀ for this warp's 16 query rows (all 64 keys)
    {
      FragA a;
      FragBt b;
      FragC c;
#pragma unroll
      for (int nc = 0; nc < kB / 16; ++nc) {
        wmma::fill_fragment(c, 0.f);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          wmma::load_matrix_sync(a, sQ + warp * 16 * LDK + kk * 16, LDK);
          wmma::load_matrix_sync(b, sK + nc * 16 * LDK + kk * 16, LDK);
          wmma::mma_sync(c, a, b, c);
        }
        wmma::store_matrix_sync(sS + warp * 16 * kLdS + nc * 16, c, kLdS, wmma::mem_row_major);
      }
    }
    __syncwarp();
    // P = exp(S·scale − LSE), masked
    for (int e = lane; e < 16 * kB; e += 32) {
      const int r = warp * 16 + e / kB, c = e % kB;
      const int64_t i = q0 + r, j = k0 + c;
      float p = 0.f;
      const float lse = sLse[r];
      if (i < sq && j < sk && !(causal && j > i + offset) && lse != -INFINITY)
        p = exp2f(sS[r * kLdS + c] * scale_log2 - lse);
      sP[r * kLdP + c] = __float2bfloat16(p);
    }
    __syncwarp();
    // dP = dO·Vᵀ
    {
      FragA a;
      FragBt b;
      FragC c;
#pragma unroll
      for (int nc = 0; nc < kB / 16; ++nc) {
        wmma::fill_fragment(c, 0.f);
#pragma unroll
        for (int kk = 0; kk < DV / 16; ++kk) {
          wmma::load_matrix_sync(a, sdO + warp * 16 * LDV + kk * 16, LDV);
          wmma::load_matrix_sync(b, sV + nc * 16 * LDV + kk * 16, LDV);
          wmma::mma_sync(c, a, b, c);
        }
        wmma::store_matrix_sync(sS + warp * 16 * kLdS + nc * 16, c, kLdS, wmma::mem_row_major);
      }
    }
    __syncwarp();
    // dS = P∘(dP − Δ)
    for (int e = lane; e < 16 * kB; e += 32) {
      const int r = warp * 16 + e / kB, c = e % kB;
      const float p = __bfloat162float(sP[r * kLdP + c]);
      sdS[r * kLdP + c] = __float2bfloat16(p * (sS[r * kLdS + c] - sDelta[r]));
    }
    __syncthreads();

    // dV += Pᵀ·dO and dK += dSᵀ·Q for this warp's 16 keys
    {
      FragAt a;
      FragB b;
#pragma unroll
      for (int qc = 0; qc < kB / 16; ++qc) {
        wmma::load_matrix_sync(a, sP + qc * 16 * kLdP + warp * 16, kLdP);
#pragma unroll
        for (int dt = 0; dt < DV / 16; ++dt) {
          wmma::load_matrix_sync(b, sdO + qc * 16 * LDV + dt * 16, LDV);
          wmma::mma_sync(acc_dv[dt], a, b, acc_dv[dt]);
        }
        wmma::load_matrix_sync(a, sdS + qc * 16 * kLdP + warp * 16, kLdP);
#pragma unroll
        for (int dt = 0; dt < D / 16; ++dt) {
          wmma::load_matrix_sync(b, sQ + qc * 16 * LDK + dt * 16, LDK);
          wmma::mma_sync(acc_dk[dt], a, b, acc_dk[dt]);
        }
      }
    }
    // dQ[this warp's 16 query rows] += scale · dS·K
    {
      FragA a;
      FragB b;
      FragC c;
      for (int dt = 0; dt < D / 16; ++dt) {
        wmma::fill_fragment(c, 0.f);
#pragma unroll
        for (int kc = 0; kc < kB / 16; ++kc) {
          wmma::load_matrix_sync(a, sdS + warp * 16 * kLdP + kc * 16, kLdP);
          wmma::load_matrix_sync(b, sK + kc * 16 * LDK + dt * 16, LDK);
          wmma::mma_sync(c, a, b, c);
        }
        wmma::store_matrix_sync(scratch, c, 16, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
          const int64_t i = q0 + warp * 16 + e / 16;
          if (i < sq) atomicAdd(dQacc + (bh * sq + i) * D + dt * 16 + e % 16, scratch[e] * scale);
        }
        __syncwarp();
      }
    }
  }

  // write dK (scaled) and dV for this warp's 16 keys
  const int64_t key0 = k0 + warp * 16;
#pragma unroll
  for (int dt = 0; dt < DV / 16; ++dt) {
    wmma::store_matrix_sync(scratch, acc_dv[dt], 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int64_t j = key0 + e / 16;
      if (j < sk) dV[(bh * sk + j) * DV + dt * 16 + e % 16] = __float2bfloat16(scratch[e]);
    }
    __syncwarp();
  }
#pragma unroll
  for (int dt = 0; dt < D / 16; ++dt) {
    wmma::store_matrix_sync(scratch, acc_dk[dt], 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int64_t j = key0 + e / 16;
      if (j < sk) dK[(bh * sk + j) * D + dt * 16 + e % 16] = __float2bfloat16(scratch[e] * scale);
    }
    __syncwarp();
  }
}

struct BwdLaunch {
  const bf16 *q, *k, *v, *dout;
  const float *lse, *delta;
  float* dq_accum;
  bf16 *dk, *dv;
  int64_t bh, sq, sk;
  bool causal;
  cudaStream_t stream;
  template <int D, int DV>
  void operator()() const {
    constexpr size_t smem = BwdSmem<D, DV>::kTotal;
    SCALESCOPE_CUDA_CHECK(cudaFuncSetAttribute(
        attn_bwd_k<D, DV>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const dim3 grid(static_cast<unsigned>(ceil_div(sk, kB)), static_cast<unsigned>(bh));
    const float scale = 1.f / sqrtf(static_cast<float>(D));
    attn_bwd_k<D, DV><<<grid, kThreads, smem, stream>>>(q, k, v, dout, lse, delta, dq_accum, dk, dv,
                                                        sq, sk, causal ? 1 : 0, scale);
    SCALESCOPE_CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace

void attention_bwd(const bf16* q, const bf16* k, const bf16* v, const bf16* o, const bf16* dout,
                   const float* lse, bf16* dq, bf16* dk, bf16* dvv, float* dq_accum, float* delta,
                   int64_t bh, int64_t sq, int64_t sk, int64_t d, int64_t dv, bool causal,
                   cudaStream_t stream) {
  if (!attention_supported(d, dv))
    throw Unsupported("attention: head dims (" + std::to_string(d) + ", " + std::to_string(dv) +
                      ") not compiled (64/64, 128/128, 192/128)");
  if (bh > 65535) throw Unsupported("attention: batch_heads > 65535");
  if (bh <= 0 || sk <= 0) return;
  const int64_t rows = bh * sq;
  SCALESCOPE_CUDA_CHECK(
      cudaMemsetAsync(dq_accum, 0, static_cast<size_t>(rows * d) * sizeof(float), stream));
  if (rows > 0) {
    attn_bwd_delta_k<<<static_cast<unsigned>(ceil_div(rows, 8)), 256, 0, stream>>>(
        o, dout, delta, rows, static_cast<int>(dv));
    SCALESCOPE_CUDA_CHECK(cudaGetLastError());
  }
  dispatch_head_dims(
      d, dv, BwdLaunch{q, k, v, dout, lse, delta, dq_accum, dk, dvv, bh, sq, sk, causal, stream});
  if (rows > 0) {
    attn_bwd_dq_k<<<grid_for(rows * d, 256), 256, 0, stream>>>(dq_accum, dq, rows * d);
    SCALESCOPE_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace scalescope::cuda
