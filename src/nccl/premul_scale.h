// The GPU half of PreMulSum on conccl communicators (premul_ops.h says why the shim pre-multiplies): one small
// kernel on the caller's stream, out[i] = scalar * in[i] rounded to the datatype, as NCCL's own pre-op.
#ifndef CONCCL_NCCL_PREMUL_SCALE_H_
#define CONCCL_NCCL_PREMUL_SCALE_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace conccl::nccl {

// Enqueues the multiplication on `stream` (capturable). devScalar non-null: the scalar is read from there when
// the kernel runs (ncclScalarDevice); otherwise scalarBits holds it (ncclScalarHostImmediate). Types: the integer
// types, fp16, bf16, fp32, fp64; fp8 returns cudaErrorInvalidValue (conccl does not reduce fp8).
cudaError_t launchPreMultiply(void* out, const void* in, size_t count, int ncclType, uint64_t scalarBits,
                              const void* devScalar, cudaStream_t stream);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_PREMUL_SCALE_H_
