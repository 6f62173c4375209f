#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "nccl/nccl_abi.h"
#include "nccl/premul_scale.h"

namespace conccl::nccl {
namespace {

// The product rounded to T exactly as NCCL's FuncPreMulSum computes it (src/device/reduce_kernel.h, NCCL 2.28), with
// the same architecture conditions: fp16 with __hmul where NCCL uses it (sm_53 and up, not sm_61), else the fp32
// product rounded to fp16; bf16 with __hmul from sm_80, else the fp32 product rounded to bf16. __hmul rounds the exact
// product once (it is the correctly rounded product, which the CPU reference preMultiplyOnHost computes). Integers
// wrap; fp32 / fp64 are one IEEE multiplication, written with explicit rounding so that it is never contracted.
template <class T>
__device__ __forceinline__ T mul(T x, T s) {
  if constexpr (std::is_same_v<T, __half>) {
#if __CUDA_ARCH__ >= 530 && __CUDA_ARCH__ != 610
    return __hmul(x, s);
#else
    return __float2half(__half2float(x) * __half2float(s));
#endif
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
#if __CUDA_ARCH__ >= 800
    return __hmul(x, s);
#else
    return __float2bfloat16(__bfloat162float(x) * __bfloat162float(s));
#endif
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wraps like NCCL's integer multiply, without signed-overflow UB
    return static_cast<T>(static_cast<U>(static_cast<U>(x) * static_cast<U>(s)));
  } else if constexpr (std::is_same_v<T, double>) {
    return __dmul_rn(x, s);
  } else {
    return __fmul_rn(x, s);
  }
}

template <class T>
__global__ void preMultiplyKernel(T* out, const T* in, size_t count, T hostScalar, const T* devScalar) {
  const T s = devScalar != nullptr ? *devScalar : hostScalar;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    out[i] = mul(in[i], s);
  }
}

template <class T>
cudaError_t launch(void* out, const void* in, size_t count, uint64_t scalarBits, const void* devScalar,
                   cudaStream_t stream) {
  T s;
  std::memcpy(static_cast<void*>(&s), &scalarBits, sizeof(T));
  constexpr unsigned kThreads = 256;
  // Enough CTAs to fill the GPU, few enough that the loop amortises the scalar load; memory-bound either way.
  const size_t wanted = (count + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(wanted, 1024)));
  preMultiplyKernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(in), count, s,
                                                        static_cast<const T*>(devScalar));
  return cudaGetLastError();
}

}  // namespace

cudaError_t launchPreMultiply(void* out, const void* in, size_t count, int ncclType, uint64_t scalarBits,
                              const void* devScalar, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (ncclType) {
    case kInt8:
      return launch<int8_t>(out, in, count, scalarBits, devScalar, stream);
    case kUint8:
      return launch<uint8_t>(out, in, count, scalarBits, devScalar, stream);
    case kInt32:
      return launch<int32_t>(out, in, count, scalarBits, devScalar, stream);
    case kUint32:
      return launch<uint32_t>(out, in, count, scalarBits, devScalar, stream);
    case kInt64:
      return launch<int64_t>(out, in, count, scalarBits, devScalar, stream);
    case kUint64:
      return launch<uint64_t>(out, in, count, scalarBits, devScalar, stream);
    case kFloat16:
      return launch<__half>(out, in, count, scalarBits, devScalar, stream);
    case kBfloat16:
      return launch<__nv_bfloat16>(out, in, count, scalarBits, devScalar, stream);
    case kFloat32:
      return launch<float>(out, in, count, scalarBits, devScalar, stream);
    case kFloat64:
      return launch<double>(out, in, count, scalarBits, devScalar, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace conccl::nccl
