// The element-wise reduction kernel: the only SM work of the CUDA executor.
//
//   output[i] = op(inputs[0][i], ..., inputs[k-1][i])   for i < count
//
// fp16/bf16/fp32 accumulate in fp32 (rounded once), fp64 in fp64, integers wrap like their C type and
// concclAvg divides the wrapped sum by k: the same semantics as the host reference. Launched with a fixed,
// small grid (config.reduceCtas CTAs of kReduceThreads threads, grid-stride loop) so that it leaves the rest
// of the GPU to a concurrent GEMM. Loads and stores use the streaming cache hint: the data is touched once,
// and keeping it out of L2 spares the GEMM's working set.
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace conccl::exec {

inline constexpr int kMaxReduceInputs = 16;
inline constexpr int kReduceThreads = 1024;

struct ReduceArgs {
  const void* inputs[kMaxReduceInputs] = {};
  void* output = nullptr;  // may equal one input exactly (element-wise in place)
  size_t count = 0;        // elements
  int k = 0;               // number of inputs, 1..kMaxReduceInputs
};

// Loads every instantiation of the kernel into the current device's context now. Required before the first
// launch: with CUDA's lazy module loading (the default since 12.2) the first launch of a kernel loads its
// module, which waits for the device's outstanding work; if a stream of the device is blocked in a Wait whose
// Signal this thread has not enqueued yet (one thread driving several ranks), that launch never returns.
void preloadReduceKernels();

// True for the types the kernel reduces (everything but fp8).
bool reduceSupported(concclDataType_t dtype, concclRedOp_t op);

// Launches `kernel` with `grid` CTAs of `threads` threads on `stream`. `priority` != 0: with that priority as a launch
// attribute (cudaLaunchAttributePriority: the block scheduler starts this grid's CTAs before those of lower-priority
// grids already queued, e.g. a GEMM's remaining CTAs); 0: the stream's own priority. Same stream order and graph
// capture either way. Throws Error(concclUnhandledCudaError) when the launch fails.
void launchKernel(const void* kernel, unsigned grid, unsigned threads, void** params, int priority, cudaStream_t stream);

// Enqueues the reduction on `stream` with `ctas` CTAs (fewer when count is small; nothing when count == 0), at
// `priority` (see launchKernel).
// Throws Error(concclNotSupported) for an unsupported type/op or k > kMaxReduceInputs,
// Error(concclInvalidArgument) for k < 1, Error(concclUnhandledCudaError) when the launch fails.
void launchReduce(const ReduceArgs& args, concclDataType_t dtype, concclRedOp_t op, int ctas, int priority,
                  cudaStream_t stream);

}  // namespace conccl::exec
