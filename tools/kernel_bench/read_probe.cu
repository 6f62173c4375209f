// What one SM can read from HBM, by the way the loads are issued: the question behind the reduction kernel's
// shape (issue 11). Three families, each on 1, 4 and 8 CTAs (one CTA per SM: 1024 threads, or a bulk-copy CTA
// using most of the shared memory), reading a 1 GiB buffer once:
//   * registers: each thread keeps L 16-byte loads in flight (ld.global.cs), T threads per CTA;
//   * TMA bulk copies: one thread issues cp.async.bulk of C bytes into S shared-memory stages (mbarrier
//     completion), every thread then reads the stage from shared memory;
// Output: one table line and one "#json" line per configuration.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "check_cuda.h"
#include "kernel_bench.h"

namespace conccl::kbench {
namespace {

template <int Threads, int L>
__global__ void __launch_bounds__(Threads, 1) registerReadKernel(const uint4* in, size_t vectors, uint32_t* sink) {
  const size_t stride = static_cast<size_t>(gridDim.x) * Threads;
  const size_t first = static_cast<size_t>(blockIdx.x) * Threads + threadIdx.x;
  uint32_t acc = 0;
  const size_t group = stride * L;
  for (size_t base = 0; base + group <= vectors; base += group) {
    uint4 raw[L];
#pragma unroll
    for (int u = 0; u < L; ++u) raw[u] = __ldcs(in + base + first + u * stride);
#pragma unroll
    for (int u = 0; u < L; ++u) acc ^= raw[u].x ^ raw[u].y ^ raw[u].z ^ raw[u].w;
  }
  if (acc == 0x12345678u) sink[first] = acc;  // keeps the loads alive; practically never taken
}

// ---- TMA bulk copies ---------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbarrierInit(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smemAddress(bar)), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void mbarrierExpectBytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smemAddress(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrierWait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smemAddress(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulkLoad(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smemAddress(dst)),
      "l"(src), "r"(bytes), "r"(smemAddress(bar))
      : "memory");
}

constexpr int kBulkThreads = 512;

// Chunks of `chunk` bytes, CTA b takes chunks b, b + grid, ...; `stages` chunks in flight per CTA.
__global__ void __launch_bounds__(kBulkThreads, 1)
    bulkReadKernel(const char* in, size_t chunks, uint32_t chunk, int stages, uint32_t* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
  unsigned char* data = smem + 128;
  const size_t mine = chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  auto issue = [&](size_t i) {
    const int s = static_cast<int>(i % static_cast<size_t>(stages));
    mbarrierExpectBytes(&bars[s], chunk);
    bulkLoad(data + static_cast<size_t>(s) * chunk, in + (blockIdx.x + i * gridDim.x) * chunk, chunk, &bars[s]);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbarrierInit(&bars[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (size_t i = 0; i < std::min(mine, static_cast<size_t>(stages)); ++i) issue(i);
  }
  uint32_t acc = 0;
  for (size_t i = 0; i < mine; ++i) {
    const int s = static_cast<int>(i % static_cast<size_t>(stages));
    mbarrierWait(&bars[s], static_cast<uint32_t>((i / static_cast<size_t>(stages)) & 1));
    const uint4* v = reinterpret_cast<const uint4*>(data + static_cast<size_t>(s) * chunk);
    for (uint32_t j = threadIdx.x; j < chunk / 16; j += kBulkThreads) acc ^= v[j].x ^ v[j].w;
    __syncthreads();  // every thread is done with stage s before it is refilled
    if (threadIdx.x == 0 && i + stages < mine) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      issue(i + stages);
    }
  }
  if (acc == 0x12345678u) sink[threadIdx.x] = acc;
}

struct ProbeBuffers {
  char* in = nullptr;
  uint32_t* sink = nullptr;
  size_t bytes = 0;
};


void report(const char* family, int threads, int inflight, size_t inflightBytes, int ctas, double ms, size_t bytes) {
  const double gbs = static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  std::printf("%-9s %7d %9d %11zu %5d %9.3f %10.1f %10.1f\n", family, threads, inflight, inflightBytes >> 10, ctas, ms,
              gbs, gbs / ctas);
  std::printf(
      "#json {\"bench\":\"read_probe\",\"family\":\"%s\",\"threads\":%d,\"in_flight\":%d,\"in_flight_kib\":%zu,"
      "\"ctas\":%d,\"time_ms\":%.4f,\"read_gbps\":%.2f,\"read_gbps_per_sm\":%.2f}\n",
      family, threads, inflight, inflightBytes >> 10, ctas, ms, gbs, gbs / ctas);
}

template <int Threads, int L>
void probeRegisters(const ProbeBuffers& b, cudaStream_t stream, int runs) {
  const size_t vectors = b.bytes / 16;
  for (int ctas : {1, 4, 8}) {
    // Read only what whole groups cover, and count exactly that.
    const size_t group = static_cast<size_t>(ctas) * Threads * L;
    const size_t used = vectors / group * group;
    const double ms = timeMs(stream, runs, [&] {
      registerReadKernel<Threads, L>
          <<<ctas, Threads, 0, stream>>>(reinterpret_cast<const uint4*>(b.in), vectors, b.sink);
    });
    report("registers", Threads, L, static_cast<size_t>(Threads) * L * 16, ctas, ms, used * 16);
  }
}

void probeBulk(const ProbeBuffers& b, cudaStream_t stream, int runs, uint32_t chunk, int stages) {
  const size_t smem = 128 + static_cast<size_t>(chunk) * stages;
  CHECK_CUDA(cudaFuncSetAttribute(bulkReadKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const size_t chunks = b.bytes / chunk;
  for (int ctas : {1, 4, 8}) {
    const size_t used = chunks / static_cast<size_t>(ctas) * static_cast<size_t>(ctas);
    const double ms =
        timeMs(stream, runs, [&] { bulkReadKernel<<<ctas, kBulkThreads, smem, stream>>>(b.in, used, chunk, stages, b.sink); });
    report("tma-bulk", kBulkThreads, stages, static_cast<size_t>(chunk) * stages, ctas, ms, used * chunk);
  }
}

}  // namespace

void runReadProbe(int runs) {
  ProbeBuffers b;
  b.bytes = size_t{1} << 30;
  CHECK_CUDA(cudaMalloc(&b.in, b.bytes));
  CHECK_CUDA(cudaMalloc(&b.sink, 1 << 20));
  CHECK_CUDA(cudaMemset(b.in, 0x5a, b.bytes));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::printf("\n# read probe: one pass over 1 GiB, median of %d; per SM = total / CTAs (one CTA per SM)\n", runs);
  std::printf("%-9s %7s %9s %11s %5s %9s %10s %10s\n", "family", "threads", "in_flight", "flight_KiB", "CTAs",
              "time_ms", "GB/s", "GB/s/SM");
  probeRegisters<1024, 1>(b, stream, runs);
  probeRegisters<1024, 2>(b, stream, runs);
  probeRegisters<1024, 4>(b, stream, runs);
  probeRegisters<1024, 8>(b, stream, runs);
  probeRegisters<1024, 12>(b, stream, runs);
  probeRegisters<512, 8>(b, stream, runs);
  probeRegisters<512, 16>(b, stream, runs);
  probeRegisters<256, 32>(b, stream, runs);
  probeBulk(b, stream, runs, 16 << 10, 4);
  probeBulk(b, stream, runs, 16 << 10, 8);
  probeBulk(b, stream, runs, 32 << 10, 6);
  probeBulk(b, stream, runs, 64 << 10, 3);
  cudaStreamDestroy(stream);
  cudaFree(b.in);
  cudaFree(b.sink);
}

}  // namespace conccl::kbench
