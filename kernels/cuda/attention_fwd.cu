// FlashAttention-2-style forward: one block of 4 warps per 64 query rows of one head, 64-key
// tiles, S = Q·Kᵀ and O += P·V on the tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate),
// online softmax in registers, O and the log-sum-exp written at the end.
#include "attention_common.cuh"

namespace scalescope::cuda {

using namespace detail;

namespace {

constexpr int kBr = 64, kBc = 64, kThreads = 128;

template <int D, int DV>
__global__ void __launch_bounds__(kThreads)
    attn_fwd_k(const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V,
               bf16* __restrict__ O, float* __restrict__ LSE, int64_t sq, int64_t sk, int causal,
               float scale_log2) {
  constexpr int LDK = D + 8, LDV = DV + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);  // [kBc][LDK]; holds the Q tile first
  bf16* sV = sK + kBc * LDK;                     // [kBc][LDV]

  const int64_t bh = blockIdx.y;
  const int64_t q0 = int64_t{gridDim.x - 1 - blockIdx.x} * kBr;  // heavy causal blocks first
  const bf16* Qh = Q + bh * sq * D;
  const bf16* Kh = K + bh * sk * D;
  const bf16* Vh = V + bh * sk * DV;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

  load_tile<kBr, D, LDK, kThreads>(sK, Qh, q0, sq);
  __syncthreads();
  uint32_t qf[D / 16][4];
  const int r0 = warp * 16 + g;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    qf[kk][0] = lds32(sK + r0 * LDK + kk * 16 + t * 2);
    qf[kk][1] = lds32(sK + (r0 + 8) * LDK + kk * 16 + t * 2);
    qf[kk][2] = lds32(sK + r0 * LDK + kk * 16 + t * 2 + 8);
    qf[kk][3] = lds32(sK + (r0 + 8) * LDK + kk * 16 + t * 2 + 8);
  }

  float o[DV / 8][4];
#pragma unroll
  for (int i = 0; i < DV / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  const int64_t offset = sk - sq;
  const int64_t qi[2] = {q0 + r0, q0 + r0 + 8};
  int64_t kend = sk;
  if (causal) kend = min(sk, q0 + kBr + offset);

  for (int64_t k0 = 0; k0 < kend; k0 += kBc) {
    __syncthreads();
    load_tile<kBc, D, LDK, kThreads>(sK, Kh, k0, sk);
    load_tile<kBc, DV, LDV, kThreads>(sV, Vh, k0, sk);
    __syncthreads();

    float s[kBc / 8][4];
#pragma unroll
    for (int nt = 0; nt < kBc / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      const bf16* kr = sK + (nt * 8 + g) * LDK + t * 2;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        mma16816(s[nt], qf[kk], lds32(kr + kk * 16), lds32(kr + kk * 16 + 8));
    }

    const bool need_mask = k0 + kBc > sk || (causal && k0 + kBc - 1 > q0 + offset);
#pragma unroll
    for (int nt = 0; nt < kBc / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[nt][e] * scale_log2;
        if (need_mask) {
          const int64_t j = k0 + nt * 8 + t * 2 + (e & 1);
          const int64_t i = qi[e >> 1];
          if (j >= sk || (causal && j > i + offset)) v = -INFINITY;
        }
        s[nt][e] = v;
      }

    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nt = 0; nt < kBc / 8; ++nt) {
      mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
    }
    float alpha[2], ms[2], ls[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      ms[r] = mx[r] == -INFINITY ? 0.f : mx[r];
      alpha[r] = exp2f(m[r] - ms[r]);
      m[r] = mx[r];
    }
#pragma unroll
    for (int nt = 0; nt < kBc / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - ms[e >> 1]);
        ls[e >> 1] += s[nt][e];
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      ls[r] += __shfl_xor_sync(0xffffffffu, ls[r], 1);
      ls[r] += __shfl_xor_sync(0xffffffffu, ls[r], 2);
      l[r] = l[r] * alpha[r] + ls[r];
    }
#pragma unroll
    for (int dt = 0; dt < DV / 8; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }

#pragma unroll
    for (int kc = 0; kc < kBc / 16; ++kc) {
      const uint32_t a[4] = {pack_bf16(s[2 * kc][0], s[2 * kc][1]),
                             pack_bf16(s[2 * kc][2], s[2 * kc][3]),
                             pack_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                             pack_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3])};
      const bf16* vr = sV + (kc * 16 + t * 2) * LDV + g;
#pragma unroll
      for (int dt = 0; dt < DV / 8; ++dt) {
        const bf16* p = vr + dt * 8;
        mma16816(o[dt], a, pack_bf16(p[0], p[LDV]), pack_bf16(p[8 * LDV], p[9 * LDV]));
      }
    }
  }

  bf16* Oh = O + bh * sq * DV;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = qi[r];
    if (i >= sq) continue;
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
#pragma unroll
    for (int dt = 0; dt < DV / 8; ++dt)
      *reinterpret_cast<__nv_bfloat162*>(Oh + i * DV + dt * 8 + t * 2) =
          __floats2bfloat162_rn(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
    if (t == 0) LSE[bh * sq + i] = l[r] > 0.f ? (m[r] + log2f(l[r])) * kLn2 : -INFINITY;
  }
}

struct FwdLaunch {
  const bf16 *q, *k, *v;
  bf16* o;
  float* lse;
  int64_t bh, sq, sk;
  bool causal;
  cudaStream_t stream;
  template <int D, int DV>
  void operator()() const {
    const size_t smem = size_t{kBc} * ((D + 8) + (DV + 8)) * sizeof(bf16);
    const dim3 grid(static_cast<unsigned>(ceil_div(sq, kBr)), static_cast<unsigned>(bh));
    const float scale_log2 = kLog2e / sqrtf(static_cast<float>(D));
    attn_fwd_k<D, DV>
        <<<grid, kThreads, smem, stream>>>(q, k, v, o, lse, sq, sk, causal ? 1 : 0, scale_log2);
    SCALESCOPE_CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace

namespace {
struct Nop {
  template <int, int>
  void operator()() const {}
};
}  // namespace

bool attention_supported(int64_t d, int64_t dv) {
  return dispatch_head_dims(d, dv, Nop{});
}

void attention_fwd(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int64_t bh,
                   int64_t sq, int64_t sk, int64_t d, int64_t dv, bool causal,
                   cudaStream_t stream) {
  if (bh <= 0 || sq <= 0) return;
  if (bh > 65535) throw Unsupported("attention: batch_heads > 65535");
  if (!dispatch_head_dims(d, dv, FwdLaunch{q, k, v, o, lse, bh, sq, sk, causal, stream}))
    throw Unsupported("attention: head dims (" + std::to_string(d) + ", " + std::to_string(dv) +
                      ") not compiled (64/64, 128/128, 192/128)");
}

}  // namespace scalescope::cuda
