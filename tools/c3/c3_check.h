// Error checks of conccl-c3's measuring code. CUDA runtime and driver calls use the library's CUDA_CHECK /
// CU_CHECK (src/exec/cuda/cuda_check.h); this adds the same for the other result types the tool meets
// (cuBLASLt, conccl's public API, NCCL). Each failure throws conccl::Error naming the call and file:line,
// which the runner turns into an "error: ..." row.
#pragma once

#include <conccl/conccl.h>
#include <cublasLt.h>

#include "base/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/raii.h"

#ifdef CONCCL_HAVE_NCCL
#include <nccl.h>
#endif

namespace conccl::c3 {

[[noreturn]] void throwCublasError(cublasStatus_t status, const char* call, const char* file, int line);
[[noreturn]] void throwConcclError(concclResult_t result, const char* call, const char* file, int line);
#ifdef CONCCL_HAVE_NCCL
[[noreturn]] void throwNcclError(ncclResult_t result, const char* call, const char* file, int line);
#endif

// Seconds between two recorded timing events (exec::Event::createForTiming).
double elapsedSeconds(const exec::Event& from, const exec::Event& to);

}  // namespace conccl::c3

#define C3_CUBLAS_CHECK(call)                                                       \
  do {                                                                              \
    const cublasStatus_t c3_status_ = (call);                                       \
    if (c3_status_ != CUBLAS_STATUS_SUCCESS) {                                      \
      ::conccl::c3::throwCublasError(c3_status_, #call, __FILE__, __LINE__);        \
    }                                                                               \
  } while (0)

#define C3_CONCCL_CHECK(call)                                                       \
  do {                                                                              \
    const concclResult_t c3_result_ = (call);                                       \
    if (c3_result_ != concclSuccess) {                                              \
      ::conccl::c3::throwConcclError(c3_result_, #call, __FILE__, __LINE__);        \
    }                                                                               \
  } while (0)

#define C3_NCCL_CHECK(call)                                                         \
  do {                                                                              \
    const ncclResult_t c3_nccl_result_ = (call);                                    \
    if (c3_nccl_result_ != ncclSuccess) {                                           \
      ::conccl::c3::throwNcclError(c3_nccl_result_, #call, __FILE__, __LINE__);     \
    }                                                                               \
  } while (0)
