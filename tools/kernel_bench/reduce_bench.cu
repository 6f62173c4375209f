// conccl-kernel-bench, part 1: the reduction kernel alone, timed with CUDA events (median of --runs).
//   * The library's dispatch (exec::launchReduce): sum of k inputs, k = 2..8, fp32 / bf16 / fp16, on 1, 4 and 8
//     CTAs, plus max / avg / prod at k = 2 on 4 CTAs: GB/s of input read, in total and per SM.
//   * The fixed-fan-in kernel's shapes beside the library's choice (bf16 sum, k = 2, 4, 8, 4 CTAs): one vector
//     per input per thread (what the generic kernel does), the chosen unroll, and 512-thread CTAs with twice the
//     loads in flight.
#include <conccl/conccl.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "check_cuda.h"
#include "base/types.h"
#include "exec/cuda/reduce_kernel.h"
#include "exec/cuda/reduce_kernel_impl.cuh"
#include "bulk_store_reduce.cuh"
#include "kernel_bench.h"

namespace conccl::kbench {
namespace {

// Non-zero pseudo-random values in [-1, 1) (timing zeros can flatter a kernel).
template <typename T>
__global__ void fillKernel(T* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    const float f = (static_cast<float>(x & 0xffffff) / 16777216.0f) * 2.0f - 1.0f + 1e-3f;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      p[i] = __float2bfloat16_rn(f);
    } else if constexpr (std::is_same_v<T, __half>) {
      p[i] = __float2half_rn(f);
    } else {
      p[i] = f;
    }
  }
}

struct Inputs {
  std::vector<void*> in;
  void* out = nullptr;
  size_t bytes = 0;
};

void fill(const Inputs& b, concclDataType_t dtype, cudaStream_t stream) {
  for (size_t j = 0; j < b.in.size(); ++j) {
    const uint32_t seed = 17u * static_cast<uint32_t>(j) + 1;
    switch (dtype) {
      case concclBfloat16:
        fillKernel<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(b.in[j]), b.bytes / 2, seed);
        break;
      case concclFloat16:
        fillKernel<<<1024, 256, 0, stream>>>(static_cast<__half*>(b.in[j]), b.bytes / 2, seed);
        break;
      default:
        fillKernel<<<1024, 256, 0, stream>>>(static_cast<float*>(b.in[j]), b.bytes / 4, seed);
        break;
    }
  }
  CHECK_CUDA(cudaGetLastError());
}

void report(const char* kernel, concclDataType_t dtype, concclRedOp_t op, int k, int ctas, size_t bytes, double ms) {
  const double gbs = static_cast<double>(k) * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  std::printf("%-16s %-8s %-4s %6d %5d %10.3f %11.1f %10.1f\n", kernel, conccl::typeName(dtype), conccl::opName(op), k,
              ctas, ms, gbs, gbs / ctas);
  std::printf(
      "#json {\"bench\":\"reduce\",\"kernel\":\"%s\",\"dtype\":\"%s\",\"op\":\"%s\",\"inputs\":%d,"
      "\"input_bytes\":%zu,\"ctas\":%d,\"time_ms\":%.4f,\"read_gbps\":%.2f,\"read_gbps_per_sm\":%.2f}\n",
      kernel, conccl::typeName(dtype), conccl::opName(op), k, bytes, ctas, ms, gbs, gbs / ctas);
}

exec::ReduceArgs argsFor(const Inputs& b, int k, size_t elemBytes) {
  exec::ReduceArgs args;
  args.k = k;
  args.count = b.bytes / elemBytes;
  args.output = b.out;
  for (int j = 0; j < k; ++j) args.inputs[j] = b.in[static_cast<size_t>(j)];
  return args;
}

// One shape of the fixed kernel, bf16 sum, launched directly.
template <int K, int U, int Threads, exec::StorePolicy S = exec::StorePolicy::kStreaming>
void variant(const char* name, const Inputs& b, int ctas, cudaStream_t stream, int runs) {
  exec::ReduceArgs args = argsFor(b, K, 2);
  const double ms = timeMs(stream, runs, [&] {
    exec::reduceFixedKernel<__nv_bfloat16, exec::OpSum, K, U, Threads, S><<<ctas, Threads, 0, stream>>>(args);
  });
  report(name, concclBfloat16, concclSum, K, ctas, b.bytes, ms);
}

// The TMA bulk-store kernel (reduce_bulk_store.cuh), sum, launched directly.
template <typename T, int K, int U, int Threads>
void bulkVariant(const char* name, concclDataType_t dtype, const Inputs& b, int ctas, cudaStream_t stream, int runs) {
  exec::ReduceArgs args = argsFor(b, K, sizeof(T));
  const size_t smem = bulkStoreSmemBytes(Threads, U);
  auto kernel = reduceBulkStoreKernel<T, exec::OpSum, K, U, Threads>;
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const double ms = timeMs(stream, runs, [&] { kernel<<<ctas, Threads, smem, stream>>>(args); });
  report(name, dtype, concclSum, K, ctas, b.bytes, ms);
}

template <int K>
void bulkVariants(const Inputs& b, cudaStream_t stream, int runs) {
  for (int ctas : {4, 8}) {
    bulkVariant<__nv_bfloat16, K, 2, 1024>("bulk-u2-t1024", concclBfloat16, b, ctas, stream, runs);
    bulkVariant<__nv_bfloat16, K, 4, 1024>("bulk-u4-t1024", concclBfloat16, b, ctas, stream, runs);
    bulkVariant<__nv_bfloat16, K, 8, 512>("bulk-u8-t512", concclBfloat16, b, ctas, stream, runs);
  }
}

template <int K>
void variants(const Inputs& b, cudaStream_t stream, int runs) {
  constexpr int u = exec::fixedUnroll(K);
  variant<K, 1, 1024>("fixed-u1-t1024", b, 4, stream, runs);
  variant<K, u, 1024>("fixed-chosen", b, 4, stream, runs);
  variant<K, 2 * u, 512>("fixed-2u-t512", b, 4, stream, runs);
  variant<K, u, 1024, exec::StorePolicy::kDefault>("fixed-st-default", b, 4, stream, runs);
  variant<K, u, 1024, exec::StorePolicy::kL2Only>("fixed-st-cg", b, 4, stream, runs);
  variant<K, (3 * u + 1) / 2, 1024>("fixed-1.5u-t1024", b, 4, stream, runs);
  variant<K, 2 * u, 768>("fixed-2u-t768", b, 4, stream, runs);
}

}  // namespace

void runReduceBench(size_t inputMiB, int runs) {
  int device = 0, sms = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  std::printf("# reduction kernel: k inputs x %zu MiB, %d threads/CTA, device %d (%s, %d SMs), median of %d\n",
              inputMiB, exec::kReduceThreads, device, prop.name, sms, runs);
  std::printf("%-16s %-8s %-4s %6s %5s %10s %11s %10s\n", "kernel", "dtype", "op", "inputs", "CTAs", "time_ms",
              "read_GB/s", "GB/s/SM");
  Inputs b;
  b.bytes = inputMiB << 20;
  b.in.resize(exec::kMaxFixedFanIn);
  for (auto& p : b.in) CHECK_CUDA(cudaMalloc(&p, b.bytes));
  CHECK_CUDA(cudaMalloc(&b.out, b.bytes));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (concclDataType_t dtype : {concclFloat32, concclBfloat16, concclFloat16}) {
    fill(b, dtype, stream);
    const size_t es = dtype == concclFloat32 ? 4 : 2;
    for (int k = exec::kMinFixedFanIn; k <= exec::kMaxFixedFanIn; ++k) {
      for (int ctas : {1, 4, 8}) {
        const exec::ReduceArgs args = argsFor(b, k, es);
        const double ms = timeMs(stream, runs, [&] { exec::launchReduce(args, dtype, concclSum, ctas, 0, stream); });
        report("library", dtype, concclSum, k, ctas, b.bytes, ms);
      }
    }
    for (concclRedOp_t op : {concclMax, concclAvg, concclProd}) {
      const exec::ReduceArgs args = argsFor(b, 2, es);
      const double ms = timeMs(stream, runs, [&] { exec::launchReduce(args, dtype, op, 4, 0, stream); });
      report("library", dtype, op, 2, 4, b.bytes, ms);
    }
  }
  fill(b, concclBfloat16, stream);
  bulkVariants<2>(b, stream, runs);
  bulkVariants<3>(b, stream, runs);
  bulkVariants<4>(b, stream, runs);
  bulkVariants<8>(b, stream, runs);
  variants<2>(b, stream, runs);
  variants<3>(b, stream, runs);
  variants<4>(b, stream, runs);
  variants<5>(b, stream, runs);
  variants<8>(b, stream, runs);
  for (auto p : b.in) cudaFree(p);
  cudaFree(b.out);
  cudaStreamDestroy(stream);
}

}  // namespace conccl::kbench
