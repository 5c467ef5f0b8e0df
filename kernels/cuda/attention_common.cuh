// Shared pieces of the attention kernels: which head dims are compiled, tile loads, mma.sync.
#pragma once

#include "common.cuh"

namespace scalescope::cuda::detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Calls f.template operator()<D, DV>() for the compiled (d, dv) pairs; false when none matches.
template <typename F>
bool dispatch_head_dims(int64_t d, int64_t dv, F&& f) {
  if (d == 64 && dv == 64) return f.template operator()<64, 64>(), true;
  if (d == 128 && dv == 128) return f.template operator()<128, 128>(), true;
  if (d == 192 && dv == 128) return f.template operator()<192, 128>(), true;
  return false;
}

// Copies rows [row0, row0 + ROWS) of a [nrows, COLS] bf16 matrix into shared memory with row
// stride LD (zero rows past nrows); 16-byte accesses.
template <int ROWS, int COLS, int LD, int THREADS>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, int64_t row0, int64_t nrows) {
  constexpr int kVecPerRow = COLS / 8;
  for (int v = threadIdx.x; v < ROWS * kVecPerRow; v += THREADS) {
    const int r = v / kVecPerRow, c = (v % kVecPerRow) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (row0 + r < nrows) val = *reinterpret_cast<const uint4*>(src + (row0 + r) * COLS + c);
    *reinterpret_cast<uint4*>(dst + r * LD + c) = val;
  }
}

__device__ __forceinline__ uint32_t lds32(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack_bf16(bf16 lo, bf16 hi) {
  __nv_bfloat162 h;
  h.x = lo;
  h.y = hi;
  return *reinterpret_cast<uint32_t*>(&h);
}

// D (16x8 fp32) += A (16x16 bf16, row) · B (16x8 bf16, col)
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace scalescope::cuda::detail
