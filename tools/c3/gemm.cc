#include "gemm.h"

#include <algorithm>
#include <string>

#include "c3_check.h"
#include "kernels.h"

namespace conccl::c3 {
namespace {

int fillKind(Dtype d) { return d == Dtype::kBf16 ? 0 : d == Dtype::kFp16 ? 1 : d == Dtype::kFp8E4M3 ? 2 : 3; }

cudaDataType_t cudaType(Dtype d) {
  switch (d) {
    case Dtype::kBf16:
      return CUDA_R_16BF;
    case Dtype::kFp16:
      return CUDA_R_16F;
    case Dtype::kFp8E4M3:
      return CUDA_R_8F_E4M3;
    case Dtype::kFp32:
      return CUDA_R_32F;
  }
  return CUDA_R_16BF;
}

exec::DeviceBuffer allocate(size_t bytes) { return exec::DeviceBuffer::allocate(std::max<size_t>(bytes, 256)); }

}  // namespace

Gemm::Gemm(int device, const GemmShape& shape, int smTarget) : device_(device) {
  exec::DeviceGuard guard(device);
  const size_t in = dtypeSize(shape.dtype);
  a_ = allocate(size_t(shape.m) * size_t(shape.k) * in);
  b_ = allocate(size_t(shape.k) * size_t(shape.n) * in);
  d_ = allocate(size_t(shape.m) * size_t(shape.n) * gemmOutputSize(shape.dtype));
  workspace_ = allocate(kWorkspace);
  CUDA_CHECK(launchFillRandom(a_.get(), size_t(shape.m) * size_t(shape.k), fillKind(shape.dtype), 1, nullptr));
  CUDA_CHECK(launchFillRandom(b_.get(), size_t(shape.k) * size_t(shape.n), fillKind(shape.dtype), 2, nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());

  const cudaDataType_t inType = cudaType(shape.dtype);
  const cudaDataType_t outType = shape.dtype == Dtype::kFp8E4M3 ? CUDA_R_16BF : inType;
  const cublasComputeType_t compute = shape.dtype == Dtype::kFp32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  C3_CUBLAS_CHECK(cublasLtCreate(&handle_));
  C3_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F));
  const cublasOperation_t transA = CUBLAS_OP_T;
  const cublasOperation_t transB = CUBLAS_OP_N;
  C3_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &transA, sizeof(transA)));
  C3_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &transB, sizeof(transB)));
  if (smTarget > 0) {
    const int32_t target = smTarget;
    C3_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &target, sizeof(target)));
  }
  C3_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&aLayout_, inType, uint64_t(shape.k), uint64_t(shape.m), shape.k));
  C3_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&bLayout_, inType, uint64_t(shape.k), uint64_t(shape.n), shape.k));
  C3_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&dLayout_, outType, uint64_t(shape.m), uint64_t(shape.n), shape.m));
  cublasLtMatmulPreference_t pref;
  C3_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspace;
  const cublasStatus_t set =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  int found = 0;
  const cublasStatus_t st = set != CUBLAS_STATUS_SUCCESS
                                ? set
                                : cublasLtMatmulAlgoGetHeuristic(handle_, desc_, aLayout_, bLayout_, dLayout_,
                                                                 dLayout_, pref, 1, &heuristic_, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  C3_CUBLAS_CHECK(st);
  CONCCL_REQUIRE(found > 0,
                 std::string("cuBLASLt has no kernel for this GEMM (") + dtypeName(shape.dtype) + " on this GPU?)");
}

Gemm::~Gemm() {
  if (dLayout_) cublasLtMatrixLayoutDestroy(dLayout_);
  if (bLayout_) cublasLtMatrixLayoutDestroy(bLayout_);
  if (aLayout_) cublasLtMatrixLayoutDestroy(aLayout_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  if (handle_) cublasLtDestroy(handle_);
}

void Gemm::enqueue(cudaStream_t stream) const {
  const float alpha = 1.0f;
  const float beta = 0.0f;
  C3_CUBLAS_CHECK(cublasLtMatmul(handle_, desc_, &alpha, a_.get(), aLayout_, b_.get(), bLayout_, &beta, d_.get(),
                                 dLayout_, d_.get(), dLayout_, &heuristic_.algo, workspace_.get(), kWorkspace, stream));
}

}  // namespace conccl::c3
