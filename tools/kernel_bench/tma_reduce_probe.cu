// Can a fan-in-2 reduction read >= 100 GB/s of input per SM if the SM never holds the data in registers? (issue 11,
// item 1; docs/cuda-executor.md, "The reduction kernel".)
//
// The library's kernel loads both inputs into registers and stores the result: on an H200 one SM then moves
// read / 240 + written / 63 <= ~0.94 of its time (write_probe.cu), which caps fan-in 2 at ~83 GB/s of input. Here the
// other input is assumed already in the output (a copy engine can put it there: the peer's share, copied over
// NVLink), and the SM only streams its own input through shared memory with the Tensor Memory Accelerator: a bulk
// load (cp.async.bulk, global -> shared) and a bulk reduction into the output (cp.reduce.async.bulk .add: L2 adds,
// the SM's registers never see the data). Three kernels, each on 1, 4 and 8 CTAs (one per SM), 1-8 issuing threads
// (a lane 0 per warp, each with its own ring of stages in shared memory):
//   * tma-load:        bulk loads only (what one SM reads this way);
//   * tma-reduce:      bulk reductions only, from a fixed shared buffer (what one SM reduce-writes);
//   * tma-load-reduce: the fan-in-2 design; "input per SM" counts both inputs (2 x bytes / time / CTAs), of which the
//                      SM read one; the copy engine's copy of the other is timed separately ("ce-copy").
// The load-reduce result is checked against the host sum (fp32 adds are exact to compare: one rounding each).
// Output: a table and one "#json" line per configuration.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "check_cuda.h"
#include "kernel_bench.h"

namespace conccl::kbench {
namespace {

constexpr int kStages = 4;     // shared-memory slots per issuing thread
constexpr int kLoadsAhead = 2;  // loads in flight ahead of the reduction that consumes them (< kStages)

__device__ __forceinline__ uint32_t sharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void barrierInit(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sharedAddress(bar)) : "memory");
}
// The barrier completes its phase when this thread has arrived and `bytes` have landed.
__device__ __forceinline__ void barrierExpect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sharedAddress(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void barrierWait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(sharedAddress(bar)), "r"(parity)
        : "memory");
  } while (done == 0);
}
__device__ __forceinline__ void bulkLoad(void* shared, const void* global, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   sharedAddress(shared)),
               "l"(global), "r"(bytes), "r"(sharedAddress(bar))
               : "memory");
}
template <typename T>
__device__ __forceinline__ void bulkReduceAdd(void* global, const void* shared, uint32_t bytes);
template <>
__device__ __forceinline__ void bulkReduceAdd<float>(void* global, const void* shared, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(global),
               "r"(sharedAddress(shared)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
template <>
__device__ __forceinline__ void bulkReduceAdd<__nv_bfloat16>(void* global, const void* shared, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [%0], [%1], %2;" ::"l"(global),
               "r"(sharedAddress(shared)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void waitBulkReads() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void waitBulkDone() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

enum class Mode { kLoad, kReduce, kLoadReduce };

// Lane 0 of every warp streams the chunks c = first, first + warps, ... of `bytes` through its kStages slots.
template <typename T, Mode M>
__global__ void tmaProbeKernel(const unsigned char* in, unsigned char* out, size_t bytes, uint32_t chunk) {
  extern __shared__ __align__(128) unsigned char slots[];
  __shared__ uint64_t bars[32][kStages];
  const int warp = threadIdx.x / 32;
  if constexpr (M == Mode::kReduce) {  // reduces a zeroed buffer: adds nothing, moves the same bytes
    const size_t words = static_cast<size_t>(blockDim.x / 32) * kStages * chunk / 4;
    for (size_t w = threadIdx.x; w < words; w += blockDim.x) reinterpret_cast<uint32_t*>(slots)[w] = 0;
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores, before the TMA reads them
  }
  if (threadIdx.x % 32 != 0) return;
  unsigned char* mine = slots + static_cast<size_t>(warp) * kStages * chunk;
  uint64_t* bar = bars[warp];
  for (int s = 0; s < kStages; ++s) barrierInit(&bar[s]);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the inits, before the TMA uses the barriers
  const size_t warps = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  const size_t first = static_cast<size_t>(blockIdx.x) * (blockDim.x / 32) + warp;
  const size_t chunks = bytes / chunk;
  const size_t count = first < chunks ? (chunks - first + warps - 1) / warps : 0;
  auto at = [&](size_t i) { return (first + i * warps) * chunk; };
  auto slot = [&](size_t i) { return mine + (i % kStages) * chunk; };

  if constexpr (M == Mode::kReduce) {
    for (size_t i = 0; i < count; ++i) {
      waitBulkReads<kStages - 1>();
      bulkReduceAdd<T>(out + at(i), slot(i), chunk);
    }
    waitBulkDone();
    return;
  }
  auto load = [&](size_t i) {
    barrierExpect(&bar[i % kStages], chunk);
    bulkLoad(slot(i), in + at(i), chunk, &bar[i % kStages]);
  };
  for (size_t i = 0; i < kLoadsAhead && i < count; ++i) load(i);
  for (size_t i = 0; i < count; ++i) {
    const size_t next = i + kLoadsAhead;
    if (next < count) {
      // `next` reuses the slot of chunk next - kStages, whose reduction must have read it: of the reductions issued
      // so far (chunks < i), at most kStages - kLoadsAhead - 1 may still be reading.
      if constexpr (M == Mode::kLoadReduce) {
        if (next >= kStages) waitBulkReads<kStages - kLoadsAhead - 1>();
      }
      load(next);
    }
    barrierWait(&bar[i % kStages], static_cast<uint32_t>((i / kStages) & 1));
    if constexpr (M == Mode::kLoadReduce) bulkReduceAdd<T>(out + at(i), slot(i), chunk);
  }
  waitBulkDone();
}

const char* modeName(Mode m) {
  return m == Mode::kLoad ? "tma-load" : m == Mode::kReduce ? "tma-reduce" : "tma-load-reduce";
}

template <typename T>
const char* typeName() {
  return sizeof(T) == 4 ? "fp32" : "bf16";
}

template <typename T, Mode M>
void probe(const unsigned char* in, unsigned char* out, size_t bytes, cudaStream_t stream, int runs) {
  struct Shape {
    int warps;
    uint32_t chunk;
  };
  for (Shape shape : {Shape{1, 16384}, Shape{2, 16384}, Shape{4, 8192}, Shape{8, 4096}}) {
    const size_t smem = static_cast<size_t>(shape.warps) * kStages * shape.chunk;
    CHECK_CUDA(cudaFuncSetAttribute(tmaProbeKernel<T, M>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    for (int ctas : {1, 4, 8}) {
      const size_t used = bytes / (static_cast<size_t>(ctas) * shape.warps * shape.chunk) *
                          (static_cast<size_t>(ctas) * shape.warps * shape.chunk);
      const double ms = timeMs(stream, runs, [&] {
        tmaProbeKernel<T, M><<<ctas, shape.warps * 32, smem, stream>>>(in, out, used, shape.chunk);
      });
      const double gbs = static_cast<double>(used) / (ms * 1e-3) / 1e9;  // what the SMs moved, each direction
      const double inputPerSm = (M == Mode::kLoadReduce ? 2 : 1) * gbs / ctas;
      std::printf("%-16s %4s %5d %6d %7u %9.3f %9.1f %12.1f\n", modeName(M), typeName<T>(), ctas, shape.warps,
                  shape.chunk, ms, gbs / ctas, inputPerSm);
      std::printf(
          "#json {\"bench\":\"tma_reduce_probe\",\"mode\":\"%s\",\"dtype\":\"%s\",\"ctas\":%d,\"warps\":%d,"
          "\"chunk\":%u,\"time_ms\":%.4f,\"sm_gbps_per_sm\":%.2f,\"input_gbps_per_sm\":%.2f}\n",
          modeName(M), typeName<T>(), ctas, shape.warps, shape.chunk, ms, gbs / ctas, inputPerSm);
    }
  }
}

// out = b, then one load-reduce pass of a: out must equal a + b exactly (fp32, one rounding per element).
bool checkLoadReduce(cudaStream_t stream) {
  const size_t n = size_t{1} << 22;  // 16 MiB of floats
  std::vector<float> a(n), b(n), got(n);
  std::mt19937 gen(12345);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  for (size_t i = 0; i < n; ++i) {
    a[i] = dist(gen);
    b[i] = dist(gen);
  }
  float *da = nullptr, *dout = nullptr;
  CHECK_CUDA(cudaMalloc(&da, n * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dout, n * sizeof(float)));
  CHECK_CUDA(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dout, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  const uint32_t chunk = 16384;
  const size_t smem = size_t{2} * kStages * chunk;
  CHECK_CUDA(cudaFuncSetAttribute(tmaProbeKernel<float, Mode::kLoadReduce>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  tmaProbeKernel<float, Mode::kLoadReduce><<<4, 64, smem, stream>>>(reinterpret_cast<const unsigned char*>(da),
                                                                   reinterpret_cast<unsigned char*>(dout),
                                                                   n * sizeof(float), chunk);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaMemcpy(got.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += got[i] != a[i] + b[i];
  cudaFree(da);
  cudaFree(dout);
  std::printf("# tma-load-reduce check: %zu of %zu elements differ from a + b\n", wrong, n);
  std::printf("#json {\"bench\":\"tma_reduce_probe\",\"mode\":\"check\",\"wrong\":%zu,\"elements\":%zu}\n", wrong, n);
  return wrong == 0;
}

}  // namespace

bool runTmaReduceProbe(int runs) {
  const size_t bytes = size_t{256} << 20;
  unsigned char *in = nullptr, *out = nullptr;
  CHECK_CUDA(cudaMalloc(&in, bytes));
  CHECK_CUDA(cudaMalloc(&out, bytes));
  CHECK_CUDA(cudaMemset(in, 0, bytes));
  CHECK_CUDA(cudaMemset(out, 0, bytes));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const bool correct = checkLoadReduce(stream);
  std::printf("\n# TMA reduce probe: 256 MiB per pass, median of %d; one CTA per SM; SM GB/s = bytes the SMs moved per"
              " direction / time / CTAs; input GB/s per SM counts both inputs of load-reduce\n",
              runs);
  std::printf("%-16s %4s %5s %6s %7s %9s %9s %12s\n", "mode", "type", "CTAs", "warps", "chunk", "time_ms", "SM GB/s",
              "input/SM");
  probe<float, Mode::kLoad>(in, out, bytes, stream, runs);
  probe<float, Mode::kReduce>(in, out, bytes, stream, runs);
  probe<float, Mode::kLoadReduce>(in, out, bytes, stream, runs);
  probe<__nv_bfloat16, Mode::kLoadReduce>(in, out, bytes, stream, runs);
  // What the copy engine's half costs: the same bytes copied into the output (on one GPU a same-device copy runs on
  // SMs, so this is an upper bound of nothing; across GPUs it is the peer copy the design relies on).
  const double ms = timeMs(stream, runs, [&] {
    CHECK_CUDA(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  std::printf("%-16s %4s %5s %6s %7s %9.3f %9s %12s\n", "ce-copy", "-", "-", "-", "-", ms, "-", "-");
  std::printf("#json {\"bench\":\"tma_reduce_probe\",\"mode\":\"ce-copy\",\"time_ms\":%.4f}\n", ms);
  cudaStreamDestroy(stream);
  cudaFree(in);
  cudaFree(out);
  return correct;
}

}  // namespace conccl::kbench
