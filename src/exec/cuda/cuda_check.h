// Error checks for CUDA runtime and driver calls inside the CUDA executor.
//
// CUDA_CHECK(call) / CU_CHECK(call) throw conccl::Error(concclUnhandledCudaError) whose message names the
// failing call as written, the error's name and description, and file:line, e.g.
//   "cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream) failed: cudaErrorInvalidValue (invalid
//    argument) (src/exec/cuda/cuda_executor.cc:120)".
// The library never prints or exits on a CUDA failure; the API layer turns the exception into a result code.
#pragma once

#include <cuda.h>  // types only (CUresult): the driver is reached through driver_api.h, never linked
#include <cuda_runtime_api.h>

#include "base/error.h"

namespace conccl::exec::detail {

[[noreturn]] void throwCudaError(cudaError_t error, const char* call, const char* file, int line);
[[noreturn]] void throwCuError(CUresult error, const char* call, const char* file, int line);

}  // namespace conccl::exec::detail

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    const cudaError_t conccl_cuda_err_ = (call);                                           \
    if (conccl_cuda_err_ != cudaSuccess) {                                                 \
      ::conccl::exec::detail::throwCudaError(conccl_cuda_err_, #call, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

#define CU_CHECK(call)                                                                 \
  do {                                                                                 \
    const CUresult conccl_cu_err_ = (call);                                            \
    if (conccl_cu_err_ != CUDA_SUCCESS) {                                              \
      ::conccl::exec::detail::throwCuError(conccl_cu_err_, #call, __FILE__, __LINE__); \
    }                                                                                  \
  } while (0)
