#include "c3_check.h"

#include <string>

namespace conccl::c3 {

void throwCublasError(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(concclUnhandledCudaError, std::string(call) + ": cuBLAS status " + std::to_string(int(status)) +
                                            detail::formatLocation(file, line));
}

void throwConcclError(concclResult_t result, const char* call, const char* file, int line) {
  throw Error(result, std::string(call) + ": " + concclGetErrorString(result) + ": " + concclGetLastError(nullptr) +
                          detail::formatLocation(file, line));
}

#ifdef CONCCL_HAVE_NCCL
void throwNcclError(ncclResult_t result, const char* call, const char* file, int line) {
  throw Error(concclSystemError, std::string(call) + ": " + ncclGetErrorString(result) + ": " +
                                     ncclGetLastError(nullptr) + detail::formatLocation(file, line));
}
#endif

double elapsedSeconds(const exec::Event& from, const exec::Event& to) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, from.get(), to.get()));
  return double(ms) * 1e-3;
}

}  // namespace conccl::c3
