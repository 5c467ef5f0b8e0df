// Low-level launchers of scalescope's CUDA kernels (docs/kernels.md). Device pointers, row-major
// tensors, bf16 unless said; every launcher enqueues on `stream` and returns without waiting.
// Errors throw scalescope::cuda::CudaError; shapes a kernel does not support throw Unsupported.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace scalescope::cuda {

using bf16 = __nv_bfloat16;
using fp8 = __nv_fp8_e4m3;

struct CudaError : std::runtime_error {
  cudaError_t code;
  CudaError(cudaError_t c, const std::string& what) : std::runtime_error(what), code(c) {}
};
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(cudaError_t e, const char* what, const char* file, int line);
#define SCALESCOPE_CUDA_CHECK(expr) ::scalescope::cuda::check((expr), #expr, __FILE__, __LINE__)

// Multiprocessor count of the current device (cached).
int sm_count();

// ---- random operands (hash of index and seed; uniform in [-scale, scale)) ----
void fill_uniform(bf16* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
void fill_uniform(float* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
void fill_uniform(fp8* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);
void fill_index(int32_t* p, int64_t n, uint64_t seed, int32_t modulus, cudaStream_t stream);

// ---- GEMM through cuBLASLt: C[m,n] = A[m,k]·B[k,n], fp32 accumulate, bf16 C ----
// bf16: A [m,k], B [k,n] row-major. fp8 (e4m3, scales 1): A [m,k] and B stored TRANSPOSED as
// [n,k] row-major (cuBLASLt's fp8 kernels need the "TN" layout), i.e. C[i][j] = Σ A[i][l]·B[j][l].
bool have_cublaslt();
std::string cublaslt_version();  // "13.1.0", or "none" when built without cuBLASLt
class LtGemm {
 public:
  LtGemm(int64_t m, int64_t n, int64_t k, bool fp8);  // throws Unsupported without a heuristic
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  void run(const void* a, const void* b, bf16* c, cudaStream_t stream);
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- norms (fp32 statistics; one block per row) ----
void rmsnorm_fwd(const bf16* x, const bf16* gamma, bf16* y, float* rstd, int64_t rows, int64_t cols,
                 float eps, cudaStream_t stream);
// dx bf16; dgamma fp32 [cols] (zeroed here, then accumulated).
void rmsnorm_bwd(const bf16* dy, const bf16* x, const bf16* gamma, const float* rstd, bf16* dx,
                 float* dgamma, int64_t rows, int64_t cols, cudaStream_t stream);
void layernorm_fwd(const bf16* x, const bf16* gamma, const bf16* beta, bf16* y, float* mean,
                   float* rstd, int64_t rows, int64_t cols, float eps, cudaStream_t stream);
void layernorm_bwd(const bf16* dy, const bf16* x, const bf16* gamma, const float* mean,
                   const float* rstd, bf16* dx, float* dgamma, float* dbeta, int64_t rows,
                   int64_t cols, cudaStream_t stream);

// ---- activations ----
// in [rows, 2·cols] = [a ‖ b], y [rows, cols] = silu(a)·b; bwd: din [rows, 2·cols] = [da ‖ db].
void swiglu_fwd(const bf16* in, bf16* y, int64_t rows, int64_t cols, cudaStream_t stream);
void swiglu_bwd(const bf16* dy, const bf16* in, bf16* din, int64_t rows, int64_t cols,
                cudaStream_t stream);
void gelu_fwd(const bf16* x, bf16* y, int64_t n, cudaStream_t stream);  // tanh approximation
void gelu_bwd(const bf16* dy, const bf16* x, bf16* dx, int64_t n, cudaStream_t stream);

// ---- rotary embedding, in place on x [rows, heads, dim]; pairs (i, i + dim/2) ----
// cos_sin [rows, dim/2] holds (cos θ, sin θ) of row r and pair i; inverse rotates by −θ.
void rope_table(float2* cos_sin, int64_t rows, int64_t dim, float base, cudaStream_t stream);
void rope(bf16* x, const float2* cos_sin, int64_t rows, int64_t heads, int64_t dim, bool inverse,
          cudaStream_t stream);

void add(const bf16* a, const bf16* b, bf16* out, int64_t n, cudaStream_t stream);

// ---- cross entropy over [rows, vocab] bf16 logits, fp32 softmax ----
void cross_entropy_fwd(const bf16* logits, const int32_t* target, float* loss, float* lse,
                       int64_t rows, int64_t vocab, cudaStream_t stream);
// dlogits = (softmax − one-hot) · dloss[row]
void cross_entropy_bwd(const bf16* logits, const int32_t* target, const float* lse,
                       const float* dloss, bf16* dlogits, int64_t rows, int64_t vocab,
                       cudaStream_t stream);

// ---- Adam(W) on fp32 master, m, v with an fp32 grad; writes a bf16 weight copy ----
struct AdamParams {
  float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  int step = 1;
};
void adam(float* param, float* m, float* v, const float* grad, bf16* weight, int64_t n,
          const AdamParams& hp, cudaStream_t stream);

// ---- embedding: out[r] = table[ids[r]]; bwd scatter-adds dout rows into an fp32 table ----
void embedding_fwd(const int32_t* ids, const bf16* table, bf16* out, int64_t rows, int64_t cols,
                   cudaStream_t stream);
void embedding_bwd(const int32_t* ids, const bf16* dout, float* dtable, int64_t rows, int64_t cols,
                   cudaStream_t stream);

// copies `bytes` bytes (16-byte vectors where aligned)
void copy(const void* src, void* dst, int64_t bytes, cudaStream_t stream);

// ---- attention (FlashAttention-2 style) ----
// q [bh, sq, d], k [bh, sk, d], v [bh, sk, dv], o [bh, sq, dv], lse fp32 [bh, sq] (natural log;
// −inf for a query row with no visible key, whose o row is 0). Causal masks key j > i + sk − sq.
bool attention_supported(int64_t d, int64_t dv);
void attention_fwd(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, int64_t bh,
                   int64_t sq, int64_t sk, int64_t d, int64_t dv, bool causal, cudaStream_t stream);
// Workspace: dq_accum fp32 [bh, sq, d] and delta fp32 [bh, sq].
void attention_bwd(const bf16* q, const bf16* k, const bf16* v, const bf16* o, const bf16* dout,
                   const float* lse, bf16* dq, bf16* dk, bf16* dvv, float* dq_accum, float* delta,
                   int64_t bh, int64_t sq, int64_t sk, int64_t d, int64_t dv, bool causal,
                   cudaStream_t stream);

}  // namespace scalescope::cuda
