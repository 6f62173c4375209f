#include "row_major_gemm.h"

#include "c3_check.h"

namespace conccl::tp {

RowMajorGemm::RowMajorGemm(int device) {
  exec::DeviceGuard guard(device);
  workspace_ = exec::DeviceBuffer::allocate(kWorkspaceBytes);
  C3_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

namespace {

template <typename Plan>
void destroyPlan(Plan& p) {
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
}

}  // namespace

RowMajorGemm::~RowMajorGemm() {
  for (auto& [key, p] : plans_) destroyPlan(p);
  if (handle_) cublasLtDestroy(handle_);
}

// Row-major C[m,n] = A[m,k] B[k,n] is, read column-major, C^T[n,m] = B^T[n,k] A^T[k,m]: cuBLASLt's "A" is our B
// (n x k, ld n), its "B" our A (k x m, ld k), its "C" our C (n x m, ld n); no transposition.
const RowMajorGemm::Plan& RowMajorGemm::plan(int64_t m, int64_t n, int64_t k) {
  const auto key = std::make_tuple(m, n, k);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  Plan stored;
  try {
    buildPlan(stored, m, n, k);
  } catch (...) {
    destroyPlan(stored);
    throw;
  }
  return plans_.emplace(key, stored).first->second;
}

void RowMajorGemm::buildPlan(Plan& stored, int64_t m, int64_t n, int64_t k) {
  C3_CUBLAS_CHECK(cublasLtMatmulDescCreate(&stored.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  C3_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&stored.a, CUDA_R_16BF, uint64_t(n), uint64_t(k), n));
  C3_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&stored.b, CUDA_R_16BF, uint64_t(k), uint64_t(m), k));
  C3_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&stored.c, CUDA_R_16BF, uint64_t(n), uint64_t(m), n));
  cublasLtMatmulPreference_t pref = nullptr;
  C3_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspaceBytes;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                           sizeof(ws));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(handle_, stored.desc, stored.a, stored.b, stored.c, stored.c, pref, 1,
                                        &heuristic, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  C3_CUBLAS_CHECK(st);
  if (found == 0) {
    CONCCL_THROW(concclUnhandledCudaError, "cuBLASLt has no bf16 algorithm for m=" + std::to_string(m) +
                                               " n=" + std::to_string(n) + " k=" + std::to_string(k));
  }
  stored.algo = heuristic.algo;
}

void RowMajorGemm::enqueue(const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k,
                           cudaStream_t stream) {
  const Plan& p = plan(m, n, k);
  const float alpha = 1.0f, beta = 0.0f;
  C3_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c, &p.algo,
                                 workspace_.get(), kWorkspaceBytes, stream));
}

}  // namespace conccl::tp
