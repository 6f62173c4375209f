// One rank's cuBLASLt GEMM of conccl-tp-bench: C[m, n] = A[m, k] @ B[k, n], bf16 row-major, fp32 accumulation, the
// same layout and arithmetic as conccl::ops::AllGatherMatmul's shard GEMMs, so that the strategies differ only in
// how the GEMM and the collective are arranged. Plans (descriptors and the heuristic's algorithm) are cached per
// (m, n, k): the split strategies launch the same block shape many times.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "exec/cuda/raii.h"

namespace conccl::tp {

class RowMajorGemm {
 public:
  // The handle and a workspace on `device`. Throws conccl::Error naming the failing call.
  explicit RowMajorGemm(int device);
  ~RowMajorGemm();
  RowMajorGemm(const RowMajorGemm&) = delete;
  RowMajorGemm& operator=(const RowMajorGemm&) = delete;

  // Enqueues C = A @ B on `stream` (the rank's device must be current). Throws when cuBLASLt has no algorithm or
  // the launch fails.
  void enqueue(const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan(int64_t m, int64_t n, int64_t k);
  void buildPlan(Plan& p, int64_t m, int64_t n, int64_t k);  // fills p; the caller frees it if this throws

  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  cublasLtHandle_t handle_ = nullptr;
  exec::DeviceBuffer workspace_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Plan> plans_;
};

}  // namespace conccl::tp
