// The reduction kernels themselves (device code), shared by reduce_kernel.cu (the library's instantiations and
// dispatch) and tools/kernel_bench (which instantiates other shapes to measure them against the chosen ones).
//
// Why two kernels: one SM reads only as fast as it has bytes in flight (Little's law: ~600-700 ns HBM latency x
// ~110 GB/s = ~70-90 KiB per SM). The generic kernel keeps one 16-byte load in flight per input per thread, so
// at fan-in 2 it had 32 KiB in flight and read ~52 GB/s per SM (FACTS.md, 2026-11-30), half of what fan-in 8 got.
// The fixed-fan-in kernel knows k at compile time and gives each thread U vectors of every input, with all
// k x U loads issued before the first one is used: k x U is kept near a constant (kLoadsInFlight), so every
// fan-in has the same bytes in flight, and no accumulator lives across input batches (registers stay within
// the 64 per thread that 1024-thread CTAs allow).
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/cuda/reduce_kernel.h"
#include "exec/cuda/reduce_ops.cuh"

namespace conccl::exec {

// ---- the generic kernel: any k <= kMaxReduceInputs, any alignment, every type ------------------------------
// Inputs are consumed in batches of kBatch: all loads of a batch are issued before any is used.
inline constexpr int kGenericBatch = 8;
static_assert(kMaxReduceInputs % kGenericBatch == 0);

template <typename T, typename Op>
__device__ __forceinline__ void reduceScalarRange(const ReduceArgs& args, size_t begin, size_t first, size_t stride) {
  using A = typename AccOf<T>::type;
  for (size_t i = begin + first; i < args.count; i += stride) {
    A acc = toAcc<A>(static_cast<const T*>(args.inputs[0])[i]);
#pragma unroll
    for (int j = 1; j < kMaxReduceInputs; ++j) {
      if (j < args.k) acc = Op::apply(acc, toAcc<A>(static_cast<const T*>(args.inputs[j])[i]));
    }
    static_cast<T*>(args.output)[i] = fromAcc<T>(finish<Op>(acc, args.k));
  }
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kReduceThreads, 1) reduceGenericKernel(ReduceArgs args, bool vectorized) {
  using A = typename AccOf<T>::type;
  constexpr int kVec = 16 / sizeof(T);  // elements per 16-byte vector
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int k = args.k;

  size_t done = 0;
  if (vectorized) {
    const size_t vectors = args.count / kVec;
    for (size_t v = first; v < vectors; v += stride) {
      A acc[kVec];
      // Both loops unroll completely, so every args.inputs[] index is a constant: the pointers stay in the
      // kernel parameter bank instead of being copied to local memory.
#pragma unroll
      for (int base = 0; base < kMaxReduceInputs; base += kGenericBatch) {
        if (base >= k) break;
        uint4 raw[kGenericBatch];
#pragma unroll
        for (int j = 0; j < kGenericBatch; ++j) {
          if (base + j < k) raw[j] = __ldcs(static_cast<const uint4*>(args.inputs[base + j]) + v);
        }
#pragma unroll
        for (int j = 0; j < kGenericBatch; ++j) {
          if (base + j < k) {
            const T* e = reinterpret_cast<const T*>(&raw[j]);
#pragma unroll
            for (int x = 0; x < kVec; ++x) {
              A value = toAcc<A>(e[x]);
              acc[x] = (base + j == 0) ? value : Op::apply(acc[x], value);
            }
          }
        }
      }
      uint4 out;
      T* o = reinterpret_cast<T*>(&out);
#pragma unroll
      for (int x = 0; x < kVec; ++x) o[x] = fromAcc<T>(finish<Op>(acc[x], k));
      __stcs(static_cast<uint4*>(args.output) + v, out);
    }
    done = vectors * kVec;
  }
  // Scalar path: the tail after the last full vector, or everything when a pointer is not 16-byte aligned.
  reduceScalarRange<T, Op>(args, done, first, stride);
}

// ---- the fixed-fan-in kernel: K inputs known at compile time, every pointer 16-byte aligned -----------------
// Each thread reduces U vectors per step, at v, v + stride, ..., v + (U-1) stride (every one of them coalesced
// across the warp), after issuing all K x U loads.
// How the fixed kernel stores its results (measured side by side in conccl-kernel-bench).
enum class StorePolicy { kStreaming, kDefault, kL2Only };

template <StorePolicy S>
__device__ __forceinline__ void storeVector(uint4* p, const uint4& v) {
  if constexpr (S == StorePolicy::kStreaming) {
    __stcs(p, v);
  } else if constexpr (S == StorePolicy::kL2Only) {
    __stcg(p, v);
  } else {
    *p = v;
  }
}

// One 16-byte vector of results from the same vector of each of the K inputs (raw[j]: input j's vector).
template <typename T, typename Op, int K>
__device__ __forceinline__ uint4 reduceVector(const uint4 (&raw)[K]) {
  using A = typename AccOf<T>::type;
  constexpr int kVec = 16 / sizeof(T);
  uint4 out;
  T* o = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int x = 0; x < kVec; ++x) {
    A acc = toAcc<A>(reinterpret_cast<const T*>(&raw[0])[x]);
#pragma unroll
    for (int j = 1; j < K; ++j) acc = Op::apply(acc, toAcc<A>(reinterpret_cast<const T*>(&raw[j])[x]));
    o[x] = fromAcc<T>(finish<Op>(acc, K));
  }
  return out;
}

template <typename T, typename Op, int K, int U, StorePolicy S = StorePolicy::kStreaming>
__device__ __forceinline__ void reduceVectorGroup(const ReduceArgs& args, size_t v, size_t stride) {
  uint4 raw[U][K];
#pragma unroll
  for (int j = 0; j < K; ++j) {
#pragma unroll
    for (int u = 0; u < U; ++u) raw[u][j] = __ldcs(static_cast<const uint4*>(args.inputs[j]) + v + u * stride);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    storeVector<S>(static_cast<uint4*>(args.output) + v + u * stride, reduceVector<T, Op, K>(raw[u]));
  }
}

template <typename T, typename Op, int K, int U, int Threads = kReduceThreads, StorePolicy S = StorePolicy::kStreaming>
__global__ void __launch_bounds__(Threads, 1) reduceFixedKernel(ReduceArgs args) {
  constexpr int kVec = 16 / sizeof(T);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t vectors = args.count / kVec;
  const size_t group = stride * U;  // vectors the whole grid reduces per step
  const size_t grouped = vectors / group * group;
  for (size_t base = 0; base < grouped; base += group) reduceVectorGroup<T, Op, K, U, S>(args, base + first, stride);
  for (size_t v = grouped + first; v < vectors; v += stride) reduceVectorGroup<T, Op, K, 1, S>(args, v, stride);
  reduceScalarRange<T, Op>(args, vectors * kVec, first, stride);
}

// U (vectors per input per step) for fan-in k, from conccl-kernel-bench's variants on an H200 (bf16 sum, 4 CTAs,
// 2026-11-30, docs/cuda-executor.md): k = 2 reads ~78 GB/s per SM with U = 4, 6 or 8 and with any store policy
// (its limit is the stores: one 16-byte store per two loads), k = 3 ~98 with U = 3, k = 4 ~116 with U = 3,
// k = 5 ~128 with U = 2, k = 8 ~139 with U = 2 (118 with U = 1); k = 6, 7 take U = 1 (~109-112; U = 2 spills).
inline constexpr int kMinFixedFanIn = 2;
inline constexpr int kMaxFixedFanIn = 8;
__host__ __device__ constexpr int fixedUnroll(int k) { return k == 2 ? 4 : k <= 4 ? 3 : (k == 5 || k == 8) ? 2 : 1; }

}  // namespace conccl::exec
