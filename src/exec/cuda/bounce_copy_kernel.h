// The copies of a call on pool memory into and out of its rank's bounce regions (pool_bounce.h), as one kernel per
// side of the call.
//
// Why a kernel of our own: a copy inside one GPU's memory runs on SMs on our driver whichever way it is enqueued
// (FACTS.md), and cudaMemcpyAsync cost the caller 5 us for 64 MiB and 9 us for 1 GiB to enqueue (one H100, 2026-12-06,
// docs/results/2026-12-06-h100-1gpu-pool-bounce/, run 2), against 3-4 us for one kernel launch whatever the size
// (run 3). The kernel takes both copies of a side in one launch, and the copy out ends by writing the regions' use
// count into host memory, which a call on another stream waits for (a stream memory operation) instead of an event
// recorded after the copy. A repeated call runs both sides as kernel nodes of its cached graph, set for each call
// (graph_cache.h): in the launch-forms probe (docs/results/2026-12-06-h100-1gpu-launch-forms/) memcpy nodes set per
// call cost the caller 0.5-0.7 us more than kernel nodes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace conccl::exec {

inline constexpr int kBounceCopyMaxJobs = 2;
inline constexpr int kBounceCopyThreads = 512;

struct BounceCopyArgs {
  const void* src[kBounceCopyMaxJobs] = {};
  void* dst[kBounceCopyMaxJobs] = {};
  size_t bytes[kBounceCopyMaxJobs] = {};
  int jobs = 0;
  // After every byte is copied, the last CTA to finish writes `markValue` into `mark` (host memory mapped for the
  // device; null: no mark). `finished` counts the CTAs that are done: a device word set to 0 before the launch.
  volatile uint32_t* mark = nullptr;
  uint32_t markValue = 0;
  unsigned* finished = nullptr;
  // With a mark: also writes `doneValue` into `done` after it (the executor's done marker, when the copy out ends a
  // replayed graph: graph_cache.h); null: no second word.
  volatile uint32_t* done = nullptr;
  uint32_t doneValue = 0;

  // Appends one copy (at most kBounceCopyMaxJobs).
  void add(const void* from, void* to, size_t n);
};

// Loads the kernel into the current device's context now (see preloadReduceKernels: the lazy loader's first launch
// waits for the device).
void preloadBounceCopyKernel();

// Enqueues the copies on `stream` with at most `maxCtas` CTAs (fewer for small copies), at `priority` (launchKernel,
// reduce_kernel.h). Returns false, having launched nothing, when there is nothing to copy and no mark to write. Throws
// Error(concclUnhandledCudaError) when the launch fails. On a capturing stream it adds the kernel node that
// setBounceCopyNode later sets.
bool launchBounceCopy(const BounceCopyArgs& args, int maxCtas, int priority, cudaStream_t stream);

// Points `node` of `exec` (a node captured from launchBounceCopy) at the copies of `args` for the launches of `exec`
// from now on (cudaGraphExecKernelNodeSetParams: launches already enqueued keep what they had). `args` must have
// something to do, as the captured launch had.
void setBounceCopyNode(cudaGraphExec_t exec, cudaGraphNode_t node, const BounceCopyArgs& args, int maxCtas);

}  // namespace conccl::exec
