// launchBounceCopy (exec/cuda/bounce_copy_kernel.h).
#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "exec/cuda/bounce_copy_kernel.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/reduce_kernel.h"  // launchKernel

namespace conccl::exec {

namespace {

// One copy's share of this CTA, in words of type W (the widest both addresses and the size allow), grid-stride.
template <typename W>
__device__ void copyWords(const void* src, void* dst, size_t bytes) {
  const W* s = static_cast<const W*>(src);
  W* d = static_cast<W*>(dst);
  const size_t words = bytes / sizeof(W);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) {
    d[i] = __ldcs(s + i);  // streaming: touched once, kept out of L2 (a GEMM beside it keeps its working set)
  }
}

__device__ void copyBytes(const char* src, char* dst, size_t bytes) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes; i += stride) dst[i] = src[i];
}

// Words of type W, then the tail that is less than one word, byte by byte.
template <typename W>
__device__ void copyWordsAndTail(const void* src, void* dst, size_t bytes) {
  copyWords<W>(src, dst, bytes);
  const size_t done = bytes / sizeof(W) * sizeof(W);
  copyBytes(static_cast<const char*>(src) + done, static_cast<char*>(dst) + done, bytes - done);
}

__device__ void copyOne(const void* src, void* dst, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst);
  if (a % 16 == 0) {
    copyWordsAndTail<uint4>(src, dst, bytes);
  } else if (a % 4 == 0) {
    copyWordsAndTail<uint32_t>(src, dst, bytes);
  } else {
    copyBytes(static_cast<const char*>(src), static_cast<char*>(dst), bytes);
  }
}

__global__ void bounceCopyKernel(BounceCopyArgs args) {
  for (int j = 0; j < args.jobs; ++j) copyOne(args.src[j], args.dst[j], args.bytes[j]);
  if (args.mark == nullptr) return;
  // The last CTA writes the mark once every CTA's copies are visible (the common fence-and-count pattern).
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    last = atomicAdd(args.finished, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    *args.finished = 0;  // for the next launch with a mark, which starts only after the mark below was seen
    __threadfence_system();
    *args.mark = args.markValue;
    if (args.done != nullptr) *args.done = args.doneValue;
  }
}

// A CTA for every 1 MiB (2 KiB a thread), up to maxCtas; 0 when there is nothing to launch.
unsigned bounceCopyCtas(const BounceCopyArgs& args, int maxCtas) {
  CONCCL_ASSERT(args.jobs >= 0 && args.jobs <= kBounceCopyMaxJobs && maxCtas > 0);
  size_t total = 0;
  for (int j = 0; j < args.jobs; ++j) total += args.bytes[j];
  if (total == 0 && args.mark == nullptr) return 0;
  const size_t wanted = std::max<size_t>(1, (total + (size_t{1} << 20) - 1) >> 20);
  return static_cast<unsigned>(std::min<size_t>(wanted, static_cast<size_t>(maxCtas)));
}

}  // namespace

void BounceCopyArgs::add(const void* from, void* to, size_t n) {
  CONCCL_ASSERT(jobs < kBounceCopyMaxJobs);
  src[jobs] = from;
  dst[jobs] = to;
  bytes[jobs++] = n;
}

void preloadBounceCopyKernel() {
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&bounceCopyKernel)));
}

bool launchBounceCopy(const BounceCopyArgs& args, int maxCtas, int priority, cudaStream_t stream) {
  const unsigned ctas = bounceCopyCtas(args, maxCtas);
  if (ctas == 0) return false;
  BounceCopyArgs copy = args;
  void* params[] = {&copy};
  launchKernel(reinterpret_cast<const void*>(&bounceCopyKernel), ctas, kBounceCopyThreads, params, priority, stream);
  return true;
}

void setBounceCopyNode(cudaGraphExec_t exec, cudaGraphNode_t node, const BounceCopyArgs& args, int maxCtas) {
  const unsigned ctas = bounceCopyCtas(args, maxCtas);
  CONCCL_ASSERT(ctas > 0);  // the node was captured from a launch of the same shape, which had something to do
  BounceCopyArgs copy = args;
  void* params[] = {&copy};
  cudaKernelNodeParams nodeParams{};
  nodeParams.func = reinterpret_cast<void*>(&bounceCopyKernel);
  nodeParams.gridDim = dim3(ctas);
  nodeParams.blockDim = dim3(kBounceCopyThreads);
  nodeParams.kernelParams = params;  // copied by the call: `copy` may go once it returns
  CUDA_CHECK(cudaGraphExecKernelNodeSetParams(exec, node, &nodeParams));
}

}  // namespace conccl::exec
