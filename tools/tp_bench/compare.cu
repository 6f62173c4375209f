#include <cuda_bf16.h>

#include "compare.h"

namespace conccl::tp {
namespace {

__device__ unsigned floatBits(float v) { return __float_as_uint(v); }

__device__ float warpMax(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// fmaxf drops NaN, so NaNs are counted apart and reported as a NaN difference.
__global__ void maxDiff(const __nv_bfloat16* __restrict__ got, const __nv_bfloat16* __restrict__ ref, size_t n,
                        unsigned* result) {
  float diff = 0.0f, mag = 0.0f;
  bool nan = false;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float g = __bfloat162float(got[i]);
    const float r = __bfloat162float(ref[i]);
    const float d = fabsf(g - r);
    nan = nan || isnan(d);
    diff = fmaxf(diff, d);
    mag = fmaxf(mag, fabsf(r));
  }
  diff = warpMax(diff);
  mag = warpMax(mag);
  const bool anyNan = __any_sync(0xffffffffu, nan);
  if ((threadIdx.x & 31) == 0) {
    atomicMax(&result[0], anyNan ? 0x7fc00000u : floatBits(diff));
    atomicMax(&result[1], floatBits(mag));
  }
}

}  // namespace

cudaError_t launchBf16MaxDiff(const void* got, const void* ref, size_t elems, unsigned* result, cudaStream_t stream) {
  constexpr int kThreads = 256;  // a multiple of the warp size: every warp is full
  constexpr int kBlocks = 1024;
  maxDiff<<<kBlocks, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(got),
                                            static_cast<const __nv_bfloat16*>(ref), elems, result);
  return cudaGetLastError();
}

}  // namespace conccl::tp
