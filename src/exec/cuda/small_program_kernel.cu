#include "exec/cuda/small_program_kernel.h"

#include <cstdint>
#include <string>

#include "base/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/reduce_kernel.h"
#include "exec/cuda/reduce_ops.cuh"

namespace conccl::exec {
namespace {

__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Loads bypass L1 (ld.cg): the data was written by a peer (another SM, GPU or copy engine) after this kernel
// may have cached an older line of it.
__device__ void copyBytes(void* dst, const void* src, uint64_t bytes) {
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  uint64_t done = 0;
  if (((d | s) & 15) == 0) {
    const uint64_t vectors = bytes / 16;
    for (uint64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
      static_cast<uint4*>(dst)[i] = __ldcg(static_cast<const uint4*>(src) + i);
    }
    done = vectors * 16;
  }
  for (uint64_t i = done + threadIdx.x; i < bytes; i += blockDim.x) {
    static_cast<unsigned char*>(dst)[i] = __ldcg(static_cast<const unsigned char*>(src) + i);
  }
}

template <typename T, typename Op>
__device__ void reduceElements(const SmallProgram& p, const SmallOp& op) {
  using A = typename AccOf<T>::type;
  const int k = op.inputs;
  T* out = static_cast<T*>(op.dst);
  for (uint64_t i = threadIdx.x; i < op.size; i += blockDim.x) {
    A acc = toAcc<A>(__ldcg(static_cast<const T*>(p.pointers[op.firstInput]) + i));
    for (int j = 1; j < k; ++j) {
      acc = Op::apply(acc, toAcc<A>(__ldcg(static_cast<const T*>(p.pointers[op.firstInput + j]) + i)));
    }
    out[i] = fromAcc<T>(finish<Op>(acc, k));
  }
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kSmallThreads, 1) smallProgramKernel(const SmallProgram p) {
  __shared__ int stop;
  if (threadIdx.x == 0) stop = 0;
  __syncthreads();
  // After an abort or a timed-out wait the remaining ops are skipped (the results are undefined, the host reports
  // the error), but the done marker is still written: the rank's work is over.
  for (int i = 0; i < p.numOps && stop == 0; ++i) {
    const SmallOp& op = p.ops[i];
    switch (op.kind) {
      // A barrier after every copy and reduction: the next op may read what other threads of the CTA just wrote
      // (e.g. the all-gather copy of a reduced chunk; threads split copies and reductions differently).
      case kSmallCopy:
        copyBytes(op.dst, op.src, op.size);
        __syncthreads();
        break;
      case kSmallReduce:
        reduceElements<T, Op>(p, op);
        __syncthreads();
        break;
      case kSmallSignal:
        // Every thread's earlier stores happen before the flag (barrier + a cumulative system-scope fence).
        __syncthreads();
        if (threadIdx.x == 0) {
          __threadfence_system();
          *reinterpret_cast<volatile uint32_t*>(op.flag) = 1;
        }
        break;
      case kSmallWait:
        __syncthreads();
        if (threadIdx.x == 0) {
          const uint64_t start = globalTimerNs();
          auto* flag = reinterpret_cast<volatile uint32_t*>(op.flag);
          while (*flag == 0) {
            if (*p.abortWord != 0) {
              stop = 1;
              break;
            }
            if (globalTimerNs() - start > p.timeoutNs) {
              *reinterpret_cast<volatile uint32_t*>(p.errorWord) = 1;
              stop = 1;
              break;
            }
            __nanosleep(200);
          }
          if (stop == 0) {
            *flag = 0;  // consume it, as the copy-engine path does
            __threadfence_system();
          }
        }
        __syncthreads();
        break;
      default:
        break;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && p.doneCounter != nullptr) {
    __threadfence_system();
    *reinterpret_cast<volatile uint32_t*>(p.doneCounter) = p.doneValue;
  }
}

template <typename T, typename Op>
void launchTyped(const SmallProgram& program, int priority, cudaStream_t stream) {
  void* params[] = {const_cast<SmallProgram*>(&program)};
  launchKernel(reinterpret_cast<const void*>(&smallProgramKernel<T, Op>), kSmallKernelCtas, kSmallThreads, params,
               priority, stream);
}

}  // namespace

void preloadSmallProgramKernels() {
  forEachReduceTypeAndOp([](auto type, auto op) {
    cudaFuncAttributes attr{};
    using T = typename decltype(type)::type;
    using Op = typename decltype(op)::type;
    CUDA_CHECK(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&smallProgramKernel<T, Op>)));
  });
}

void launchSmallProgram(const SmallProgram& program, int priority, cudaStream_t stream) {
  bool launched = false;
  visitReduceType(program.dtype, [&](auto type) {
    launched = visitReduceOp(program.op, [&](auto op) {
      launchTyped<typename decltype(type)::type, typename decltype(op)::type>(program, priority, stream);
    });
  });
  if (!launched) {
    CONCCL_THROW(concclNotSupported, "the small-message kernel cannot reduce datatype " +
                                         std::to_string(static_cast<int>(program.dtype)) + " with op " +
                                         std::to_string(static_cast<int>(program.op)));
  }
}

}  // namespace conccl::exec
