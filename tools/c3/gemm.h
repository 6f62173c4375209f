// The GEMM side of conccl-c3: one cuBLASLt GEMM D[M,N] = A[M,K] B[K,N] on one device, random inputs,
// optionally limited to an SM count (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "c3/workload.h"
#include "exec/cuda/raii.h"

namespace conccl::c3 {

// Layout "TN" (A stored K x M and transposed), because that is the layout cuBLASLt's fp8 kernels require;
// bf16/fp16 use it too so that the dtypes are comparable.
class Gemm {
 public:
  // smTarget 0: the whole GPU. Throws conccl::Error when cuBLASLt has no kernel (e.g. fp8 on an old GPU).
  Gemm(int device, const GemmShape& shape, int smTarget);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  int device() const { return device_; }
  void enqueue(cudaStream_t stream) const;

 private:
  static constexpr size_t kWorkspace = size_t(32) << 20;
  int device_;
  exec::DeviceBuffer a_, b_, d_, workspace_;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t aLayout_ = nullptr, bLayout_ = nullptr, dLayout_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
};

}  // namespace conccl::c3
