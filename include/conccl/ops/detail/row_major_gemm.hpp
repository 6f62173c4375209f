// conccl::ops::detail::RowMajorGemm: out[m, n] = a[m, k] @ b (row-major, leading dimensions given) with cuBLASLt,
// fp32 accumulation. b is [k, n], or [n, k] ("transposed", the layout nn.Linear keeps its weight in). Inputs bf16 or
// fp16 (out the same type), or fp8 e4m3 (out bf16; unit scales: pre-scale the inputs). The fused ops
// (all_gather_matmul.hpp, matmul_reduce_scatter.hpp) run one per shard or piece; the layouts and the algorithm are
// kept per shape, so that a repeated call costs one cublasLtMatmul.
//
// Row-major out = a @ b is, in cuBLASLt's column-major terms, out^T[n, m] = b^T[n, k] x a^T[k, m], where each
// transposed matrix is the row-major one read column-major. With b [k, n] no operand is transposed; with b [n, k] the
// first operand is (TRANSA = T), which is the "TN" form cuBLASLt's fp8 kernels require.
#pragma once

#include <conccl/conccl.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

namespace conccl::ops::detail {

// The element type of a GEMM's output for inputs of `type`: fp8 products come out in bf16.
inline concclDataType_t gemmOutputType(concclDataType_t type) {
  return type == concclFloat8e4m3 ? concclBfloat16 : type;
}

// Whether RowMajorGemm takes inputs of `type` with b in the given layout (fp8 needs b as [n, k]).
inline bool gemmSupports(concclDataType_t type, bool bTransposed) {
  if (type == concclBfloat16 || type == concclFloat16) return true;
  return type == concclFloat8e4m3 && bTransposed;
}

class RowMajorGemm {
 public:
  // Creates the handle and the workspace on the current device; ok() says whether that worked.
  explicit RowMajorGemm(size_t workspaceBytes) : workspaceBytes_(workspaceBytes) {
    ok_ = cublasLtCreate(&lt_) == CUBLAS_STATUS_SUCCESS &&
          (workspaceBytes == 0 || cudaMalloc(&workspace_, workspaceBytes) == cudaSuccess);
  }
  ~RowMajorGemm() {
    for (auto& [key, plan] : plans_) plan.destroy();
    if (lt_ != nullptr) cublasLtDestroy(lt_);
    if (workspace_ != nullptr) cudaFree(workspace_);
  }
  RowMajorGemm(const RowMajorGemm&) = delete;
  RowMajorGemm& operator=(const RowMajorGemm&) = delete;

  bool ok() const { return ok_; }

  // Enqueues out = a @ b on `stream` (b [n, k] when bTransposed, else [k, n]). lda, ldb, ldOut: row strides in
  // elements. False with *why on failure.
  bool run(concclDataType_t type, bool bTransposed, const void* a, int64_t lda, const void* b, int64_t ldb, void* out,
           int64_t ldOut, int64_t m, int64_t n, int64_t k, cudaStream_t stream, std::string* why) {
    if (m == 0 || n == 0) return true;
    if (!gemmSupports(type, bTransposed)) {
      *why = "the GEMM takes bf16 or fp16, or fp8 e4m3 with b given as [n, k]";
      return false;
    }
    const Plan* plan = planFor(type, bTransposed, m, n, k, lda, ldb, ldOut, why);
    if (plan == nullptr) return false;
    const float alpha = 1.0f, beta = 0.0f;
    if (cublasLtMatmul(lt_, plan->op, &alpha, b, plan->lb, a, plan->la, &beta, out, plan->lc, out, plan->lc,
                       &plan->algo, workspace_, workspaceBytes_, stream) != CUBLAS_STATUS_SUCCESS) {
      *why = "cublasLtMatmul failed (m " + std::to_string(m) + ", n " + std::to_string(n) + ", k " +
             std::to_string(k) + ")";
      return false;
    }
    return true;
  }

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo{};
    void destroy() {
      if (lc != nullptr) cublasLtMatrixLayoutDestroy(lc);
      if (lb != nullptr) cublasLtMatrixLayoutDestroy(lb);
      if (la != nullptr) cublasLtMatrixLayoutDestroy(la);
      if (op != nullptr) cublasLtMatmulDescDestroy(op);
    }
  };
  using Key = std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

  static cudaDataType_t cudaType(concclDataType_t type) {
    if (type == concclFloat8e4m3) return CUDA_R_8F_E4M3;
    return type == concclBfloat16 ? CUDA_R_16BF : CUDA_R_16F;
  }

  const Plan* planFor(concclDataType_t type, bool bTransposed, int64_t m, int64_t n, int64_t k, int64_t lda,
                      int64_t ldb, int64_t ldOut, std::string* why) {
    const Key key{static_cast<int>(type), bTransposed, m, n, k, lda, ldb, ldOut};
    if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
    const cudaDataType_t in = cudaType(type), out = cudaType(gemmOutputType(type));
    const cublasOperation_t transA = bTransposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    Plan p;
    cublasLtMatmulPreference_t pref = nullptr;
    auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    bool good = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &transA, sizeof(transA)) ==
                    CUBLAS_STATUS_SUCCESS &&
                // Column-major views: b^T [n, k] (ld ldb; stored [k, n] and transposed when bTransposed), a^T [k, m]
                // (ld lda), out^T [n, m] (ld ldOut).
                (bTransposed ? cublasLtMatrixLayoutCreate(&p.lb, in, u(k), u(n), ldb)
                             : cublasLtMatrixLayoutCreate(&p.lb, in, u(n), u(k), ldb)) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatrixLayoutCreate(&p.la, in, u(k), u(m), lda) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatrixLayoutCreate(&p.lc, out, u(n), u(m), ldOut) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
                cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes_,
                                                     sizeof(workspaceBytes_)) == CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    good = good &&
           cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.lb, p.la, p.lc, p.lc, pref, 1, &heuristic, &found) ==
               CUBLAS_STATUS_SUCCESS &&
           found > 0;
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (!good) {
      p.destroy();
      *why = "cuBLASLt found no algorithm for m " + std::to_string(m) + ", n " + std::to_string(n) + ", k " +
             std::to_string(k);
      return nullptr;
    }
    p.algo = heuristic.algo;
    return &plans_.emplace(key, p).first->second;
  }

  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspaceBytes_ = 0;
  bool ok_ = false;
  std::map<Key, Plan> plans_;
};

}  // namespace conccl::ops::detail
