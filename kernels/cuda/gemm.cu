// GEMM through cuBLASLt (docs/kernels.md `gemm`): fp32 accumulate, bf16 C, a 32 MiB workspace and
// the heuristic's first algorithm. Without cuBLASLt at build time every LtGemm is Unsupported.
#include "kernels.cuh"

#include <cstdio>

#ifdef SCALESCOPE_HAVE_CUBLASLT
#include <cublasLt.h>
#endif

namespace scalescope::cuda {

#ifdef SCALESCOPE_HAVE_CUBLASLT

namespace {
void lt_check(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  char buf[256];
  std::snprintf(buf, sizeof buf, "cuBLASLt %s failed: status %d", what, static_cast<int>(st));
  // A refused layout or algorithm leaves the CUDA context intact: skip this signature only.
  throw Unsupported(buf);
}
}  // namespace

bool have_cublaslt() {
  return true;
}

std::string cublaslt_version() {
  const size_t v = cublasLtGetVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

struct LtGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void* workspace = nullptr;
  float* one = nullptr;  // device 1.0f: the fp8 per-tensor scales

  ~Impl() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    if (handle) cublasLtDestroy(handle);
    if (workspace) cudaFree(workspace);
    if (one) cudaFree(one);
  }
};

// Row-major C[m,n] = A[m,k]·B[k,n] is column-major Cᵀ[n,m] = Bᵀ·Aᵀ: cuBLASLt's "A" is our B and
// its "B" is our A. fp8 wants cuBLASLt's A transposed, so our B is then stored as [n,k].
LtGemm::LtGemm(int64_t m, int64_t n, int64_t k, bool is_fp8) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  if (is_fp8 && (m % 16 || n % 16 || k % 16))
    throw Unsupported("fp8 gemm needs m, n, k multiples of 16");
  lt_check(cublasLtCreate(&s.handle), "create");
  lt_check(cublasLtMatmulDescCreate(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  const auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  if (is_fp8) {
    const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    lt_check(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t),
             "transa");
    lt_check(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn),
             "transb");
    SCALESCOPE_CUDA_CHECK(cudaMalloc(&s.one, sizeof(float)));
    const float h_one = 1.0f;
    SCALESCOPE_CUDA_CHECK(cudaMemcpy(s.one, &h_one, sizeof h_one, cudaMemcpyHostToDevice));
    lt_check(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &s.one,
                                            sizeof s.one),
             "a scale");
    lt_check(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &s.one,
                                            sizeof s.one),
             "b scale");
    lt_check(cublasLtMatrixLayoutCreate(&s.la, CUDA_R_8F_E4M3, u(k), u(n), k), "layout a");
    lt_check(cublasLtMatrixLayoutCreate(&s.lb, CUDA_R_8F_E4M3, u(k), u(m), k), "layout b");
  } else {
    lt_check(cublasLtMatrixLayoutCreate(&s.la, CUDA_R_16BF, u(n), u(k), n), "layout a");
    lt_check(cublasLtMatrixLayoutCreate(&s.lb, CUDA_R_16BF, u(k), u(m), k), "layout b");
  }
  lt_check(cublasLtMatrixLayoutCreate(&s.lc, CUDA_R_16BF, u(n), u(m), n), "layout c");
  lt_check(cublasLtMatmulPreferenceCreate(&s.pref), "preference");
  size_t ws = kWorkspaceBytes;
  lt_check(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &ws, sizeof ws),
           "workspace pref");
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(s.handle, s.op, s.la, s.lb, s.lc, s.lc,
                                                           s.pref, 1, &res, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    throw Unsupported("cuBLASLt heuristic found no algorithm (status " +
                      std::to_string(static_cast<int>(st)) + ")");
  s.algo = res.algo;
  SCALESCOPE_CUDA_CHECK(cudaMalloc(&s.workspace, kWorkspaceBytes));
}

LtGemm::~LtGemm() = default;

void LtGemm::run(const void* a, const void* b, bf16* c, cudaStream_t stream) {
  Impl& s = *impl_;
  const float alpha = 1.0f, beta = 0.0f;
  lt_check(cublasLtMatmul(s.handle, s.op, &alpha, b, s.la, a, s.lb, &beta, c, s.lc, c, s.lc,
                          &s.algo, s.workspace, kWorkspaceBytes, stream),
           "matmul");
}

#else  // no cuBLASLt

bool have_cublaslt() {
  return false;
}
std::string cublaslt_version() {
  return "none";
}
struct LtGemm::Impl {};
LtGemm::LtGemm(int64_t, int64_t, int64_t, bool) {
  throw Unsupported("scalescope-kernels was built without cuBLASLt");
}
LtGemm::~LtGemm() = default;
void LtGemm::run(const void*, const void*, bf16*, cudaStream_t) {}

#endif

}  // namespace scalescope::cuda
