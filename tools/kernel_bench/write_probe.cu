// What one SM can write to HBM, by the way the stores are issued: the other half of the reduction kernel's
// question (issue 11). A fan-in-2 reduction stores one 16-byte vector per two loads and read only ~78 GB/s per SM
// whatever its loads in flight, so the stores are suspected. Two families, each on 1, 4 and 8 CTAs (one CTA per
// SM), writing a 1 GiB buffer once:
//   * registers: each thread issues L 16-byte stores (st.global.cs) per step, 1024 threads per CTA;
//   * TMA bulk stores: every warp hands chunks of 32 x U vectors from shared memory to the TMA
//     (cp.async.bulk.global.shared::cta), double-buffered, as reduceBulkStoreKernel does.
// Output: one table line and one "#json" line per configuration.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>

#include "check_cuda.h"
#include "bulk_store_reduce.cuh"
#include "kernel_bench.h"

namespace conccl::kbench {
namespace {

template <int Threads, int L>
__global__ void __launch_bounds__(Threads, 1) registerWriteKernel(uint4* out, size_t vectors) {
  const size_t stride = static_cast<size_t>(gridDim.x) * Threads;
  const size_t first = static_cast<size_t>(blockIdx.x) * Threads + threadIdx.x;
  const size_t group = stride * L;
  for (size_t base = 0; base + group <= vectors; base += group) {
#pragma unroll
    for (int u = 0; u < L; ++u) {
      const uint32_t x = static_cast<uint32_t>(base + u) ^ threadIdx.x;
      __stcs(out + base + first + u * stride, make_uint4(x, x + 1, x + 2, x + 3));
    }
  }
}

template <int Threads, int U>
__global__ void __launch_bounds__(Threads, 1) bulkWriteKernel(uint4* out, size_t vectors) {
  namespace d = bulk_store_detail;
  constexpr int kChunk = 32 * U;
  extern __shared__ __align__(128) uint4 staging[];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  uint4* mine = staging + static_cast<size_t>(warp) * kBulkStoreStages * kChunk;
  const size_t chunks = vectors / kChunk;
  const size_t warps = static_cast<size_t>(gridDim.x) * (Threads / 32);
  int stage = 0;
  for (size_t c = static_cast<size_t>(blockIdx.x) * (Threads / 32) + warp; c < chunks; c += warps) {
    if (lane == 0) d::waitBulkReads<kBulkStoreStages - 1>();
    __syncwarp();
    uint4* buffer = mine + stage * kChunk;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t x = static_cast<uint32_t>(c + u) ^ lane;
      buffer[u * 32 + lane] = make_uint4(x, x + 1, x + 2, x + 3);
    }
    d::fenceSharedForAsyncProxy();
    __syncwarp();
    if (lane == 0) d::bulkStore(out + c * kChunk, buffer, kChunk * 16);
    stage = (stage + 1) % kBulkStoreStages;
  }
  if (lane == 0) d::waitBulkWrites();
}

void report(const char* family, int threads, int perStep, int ctas, double ms, size_t bytes) {
  const double gbs = static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  std::printf("%-9s %7d %9d %5d %9.3f %10.1f %10.1f\n", family, threads, perStep, ctas, ms, gbs, gbs / ctas);
  std::printf(
      "#json {\"bench\":\"write_probe\",\"family\":\"%s\",\"threads\":%d,\"per_step\":%d,\"ctas\":%d,"
      "\"time_ms\":%.4f,\"write_gbps\":%.2f,\"write_gbps_per_sm\":%.2f}\n",
      family, threads, perStep, ctas, ms, gbs, gbs / ctas);
}

template <int Threads, int L>
void probeRegisters(uint4* out, size_t vectors, cudaStream_t stream, int runs) {
  for (int ctas : {1, 4, 8}) {
    const size_t group = static_cast<size_t>(ctas) * Threads * L;
    const size_t used = vectors / group * group;
    const double ms = timeMs(stream, runs, [&] { registerWriteKernel<Threads, L><<<ctas, Threads, 0, stream>>>(out, used); });
    report("registers", Threads, L, ctas, ms, used * 16);
  }
}

template <int Threads, int U>
void probeBulk(uint4* out, size_t vectors, cudaStream_t stream, int runs) {
  const size_t smem = bulkStoreSmemBytes(Threads, U);
  CHECK_CUDA(cudaFuncSetAttribute(bulkWriteKernel<Threads, U>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  for (int ctas : {1, 4, 8}) {
    const size_t used = vectors / (32 * U) * (32 * U);
    const double ms =
        timeMs(stream, runs, [&] { bulkWriteKernel<Threads, U><<<ctas, Threads, smem, stream>>>(out, used); });
    report("tma-store", Threads, U, ctas, ms, used * 16);
  }
}

}  // namespace

void runWriteProbe(int runs) {
  const size_t bytes = size_t{1} << 30;
  uint4* out = nullptr;
  CHECK_CUDA(cudaMalloc(&out, bytes));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::printf("\n# write probe: one pass over 1 GiB, median of %d; per SM = total / CTAs (one CTA per SM)\n", runs);
  std::printf("%-9s %7s %9s %5s %9s %10s %10s\n", "family", "threads", "per_step", "CTAs", "time_ms", "GB/s",
              "GB/s/SM");
  const size_t vectors = bytes / 16;
  probeRegisters<1024, 1>(out, vectors, stream, runs);
  probeRegisters<1024, 2>(out, vectors, stream, runs);
  probeRegisters<1024, 4>(out, vectors, stream, runs);
  probeRegisters<1024, 8>(out, vectors, stream, runs);
  probeBulk<1024, 1>(out, vectors, stream, runs);
  probeBulk<1024, 2>(out, vectors, stream, runs);
  probeBulk<1024, 4>(out, vectors, stream, runs);
  probeBulk<512, 8>(out, vectors, stream, runs);
  cudaStreamDestroy(stream);
  cudaFree(out);
}

}  // namespace conccl::kbench
