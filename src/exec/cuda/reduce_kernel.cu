#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/reduce_kernel.h"
#include "exec/cuda/reduce_ops.cuh"

namespace conccl::exec {
namespace {

// Inputs are consumed in batches of kBatch: all loads of a batch are issued before any is used, so each
// thread keeps kBatch 16-byte loads in flight. With 1024 threads that is 128 KiB per SM for k = 8, about what
// Little's law asks to read ~100 GB/s per SM at HBM latency.
constexpr int kBatch = 8;
static_assert(kMaxReduceInputs % kBatch == 0);

// ---- the kernel ----------------------------------------------------------------------------------------
template <typename T, typename Op>
__global__ void __launch_bounds__(kReduceThreads, 1) reduceKernel(ReduceArgs args, bool vectorized) {
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
      for (int base = 0; base < kMaxReduceInputs; base += kBatch) {
        if (base >= k) break;
        uint4 raw[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          if (base + j < k) raw[j] = __ldcs(static_cast<const uint4*>(args.inputs[base + j]) + v);
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
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
  for (size_t i = done + first; i < args.count; i += stride) {
    A acc = toAcc<A>(static_cast<const T*>(args.inputs[0])[i]);
#pragma unroll
    for (int j = 1; j < kMaxReduceInputs; ++j) {
      if (j < k) acc = Op::apply(acc, toAcc<A>(static_cast<const T*>(args.inputs[j])[i]));
    }
    static_cast<T*>(args.output)[i] = fromAcc<T>(finish<Op>(acc, k));
  }
}

template <typename T, typename Op>
void launchTyped(const ReduceArgs& args, int ctas, cudaStream_t stream) {
  constexpr size_t kVec = 16 / sizeof(T);
  bool aligned = reinterpret_cast<uintptr_t>(args.output) % 16 == 0;
  for (int j = 0; j < args.k; ++j) aligned = aligned && reinterpret_cast<uintptr_t>(args.inputs[j]) % 16 == 0;
  // Never launch more CTAs than there is work for: small reductions then cost one short CTA, not reduceCtas.
  const size_t units = aligned ? args.count / kVec + args.count % kVec : args.count;
  const size_t needed = (units + kReduceThreads - 1) / kReduceThreads;
  const unsigned grid = static_cast<unsigned>(needed < static_cast<size_t>(ctas) ? needed : ctas);
  ReduceArgs a = args;
  bool vectorized = aligned;
  void* params[] = {&a, &vectorized};
  CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(&reduceKernel<T, Op>), dim3(grid), dim3(kReduceThreads),
                              params, 0, stream));
}

}  // namespace

void preloadReduceKernels() {
  forEachReduceTypeAndOp([](auto type, auto op) {
    cudaFuncAttributes attr{};
    // cudaFuncGetAttributes forces the lazy loader to load the function (and its module) now.
    using T = typename decltype(type)::type;
    using Op = typename decltype(op)::type;
    CUDA_CHECK(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&reduceKernel<T, Op>)));
  });
}

bool reduceSupported(concclDataType_t dtype, concclRedOp_t op) {
  if (op < concclSum || op >= concclNumOps) return false;
  return visitReduceType(dtype, [](auto) {});
}

void launchReduce(const ReduceArgs& args, concclDataType_t dtype, concclRedOp_t op, int ctas, cudaStream_t stream) {
  CONCCL_REQUIRE(args.k >= 1, "a reduction needs at least one input (k = " + std::to_string(args.k) + ")");
  if (args.k > kMaxReduceInputs) {
    CONCCL_THROW(concclNotSupported, "the CUDA reduction kernel takes at most " + std::to_string(kMaxReduceInputs) +
                                         " inputs, the schedule asked for " + std::to_string(args.k));
  }
  CONCCL_REQUIRE(ctas >= 1, "reduceCtas = " + std::to_string(ctas) + " must be at least 1");
  if (!reduceSupported(dtype, op)) {
    CONCCL_THROW(concclNotSupported, "the CUDA reduction kernel does not support datatype " +
                                         std::to_string(static_cast<int>(dtype)) + " with op " +
                                         std::to_string(static_cast<int>(op)));
  }
  if (args.count == 0) return;
  const bool known = visitReduceType(dtype, [&](auto type) {
    visitReduceOp(op, [&](auto fn) {
      launchTyped<typename decltype(type)::type, typename decltype(fn)::type>(args, ctas, stream);
    });
  });
  if (known) return;
  CONCCL_ASSERT(false);
}

}  // namespace conccl::exec
