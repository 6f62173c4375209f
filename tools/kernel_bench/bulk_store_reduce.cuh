// A variant of the fixed-fan-in reduction whose results are written by the Tensor Memory Accelerator (TMA bulk
// stores from shared memory) instead of per-thread 16-byte stores, measured by conccl-kernel-bench beside the
// library's kernel (issue 11, item 1). It is not the library's kernel: it did not read faster.
//
// The question it answered: one SM's fan-in-2 reduction read ~78 GB/s whatever its loads in flight and store cache
// policy (fan-in 3 ~100, 4 ~116, 8 ~151). Could asynchronous TMA stores free the SM's memory pipeline? No: on an H200
// (2026-12-01, docs/results/2026-12-01-h200-1gpu-write-probe-nosm-shim/) one SM writes at most ~63 GB/s (32 B per
// clock) with register stores and 59-62 GB/s with TMA bulk stores (write_probe.cu), and this kernel read 78-80 GB/s at
// fan-in 2, 100 at fan-in 3, the same as the library's. The SM's port to L2 writes 32 B/clk whatever issues the store.
//
// Shape: every warp owns whole chunks of 32 x U vectors (lane l takes vectors l, l + 32, ...: every load is
// coalesced), double-buffered in shared memory so that the TMA drains one chunk while the warp reduces the
// next. Chunks that do not fill a warp's step, and the scalar tail, go through the plain per-thread path.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/cuda/reduce_kernel.h"
#include "exec/cuda/reduce_kernel_impl.cuh"
#include "exec/cuda/reduce_ops.cuh"

namespace conccl::kbench {
using exec::ReduceArgs;
using exec::kReduceThreads;
using exec::reduceScalarRange;
using exec::reduceVectorGroup;

inline constexpr int kBulkStoreStages = 2;  // chunks per warp in shared memory: one filling, one draining

// Dynamic shared memory a CTA of `threads` threads needs with U vectors per lane per chunk.
__host__ __device__ constexpr size_t bulkStoreSmemBytes(int threads, int u) {
  return static_cast<size_t>(threads / 32) * kBulkStoreStages * 32 * static_cast<size_t>(u) * 16;
}

namespace bulk_store_detail {

__device__ __forceinline__ uint32_t sharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// The threads' st.shared writes of a chunk become visible to the TMA (the async proxy) before it reads them.
__device__ __forceinline__ void fenceSharedForAsyncProxy() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void bulkStore(void* global, const void* shared, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(global), "r"(sharedAddress(shared)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's bulk stores still read shared memory (their buffers are reusable).
template <int N>
__device__ __forceinline__ void waitBulkReads() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// Waits until every bulk store of this thread has written global memory.
__device__ __forceinline__ void waitBulkWrites() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

}  // namespace bulk_store_detail

template <typename T, typename Op, int K, int U, int Threads = kReduceThreads>
__global__ void __launch_bounds__(Threads, 1) reduceBulkStoreKernel(ReduceArgs args) {
  namespace d = bulk_store_detail;
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kChunk = 32 * U;  // vectors per warp chunk
  extern __shared__ __align__(128) uint4 staging[];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  uint4* mine = staging + static_cast<size_t>(warp) * kBulkStoreStages * kChunk;

  const size_t vectors = args.count / kVec;
  const size_t chunks = vectors / kChunk;
  const size_t warps = static_cast<size_t>(gridDim.x) * (Threads / 32);
  const size_t globalWarp = static_cast<size_t>(blockIdx.x) * (Threads / 32) + warp;
  const uint4* in[K];
#pragma unroll
  for (int j = 0; j < K; ++j) in[j] = static_cast<const uint4*>(args.inputs[j]);
  uint4* out = static_cast<uint4*>(args.output);

  int stage = 0;
  for (size_t c = globalWarp; c < chunks; c += warps) {
    const size_t base = c * kChunk + lane;
    uint4 raw[U][K];
#pragma unroll
    for (int j = 0; j < K; ++j) {
#pragma unroll
      for (int u = 0; u < U; ++u) raw[u][j] = __ldcs(in[j] + base + u * 32);
    }
    // The buffer this chunk goes to was handed to the TMA two chunks ago: wait until it has been read.
    if (lane == 0) d::waitBulkReads<kBulkStoreStages - 1>();
    __syncwarp();
    uint4* buffer = mine + stage * kChunk;
#pragma unroll
    for (int u = 0; u < U; ++u) buffer[u * 32 + lane] = exec::reduceVector<T, Op, K>(raw[u]);
    d::fenceSharedForAsyncProxy();
    __syncwarp();
    if (lane == 0) d::bulkStore(out + c * kChunk, buffer, kChunk * 16);
    stage = (stage + 1) % kBulkStoreStages;
  }
  if (lane == 0) d::waitBulkWrites();

  // What whole chunks did not cover: per-thread vectors, then the scalar tail.
  const size_t stride = static_cast<size_t>(gridDim.x) * Threads;
  const size_t first = static_cast<size_t>(blockIdx.x) * Threads + threadIdx.x;
  for (size_t v = chunks * kChunk + first; v < vectors; v += stride) reduceVectorGroup<T, Op, K, 1>(args, v, stride);
  reduceScalarRange<T, Op>(args, vectors * kVec, first, stride);
}

}  // namespace conccl::kbench
