// What the CUDA executor keeps per rank, and how a schedule Location becomes an address for one call.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "exec/cuda/graph_cache.h"
#include "exec/cuda/raii.h"
#include "exec/cuda/small_program_kernel.h"
#include "exec/executor.h"
#include "sched/schedule.h"

namespace conccl::exec {

// Everything one rank owns. Lives until releaseRank(rank). In a clique spread over processes, the peers' entries
// are not local: they only hold the addresses of the peer's flags and (mapped) scratch.
struct RankState {
  int rank = 0;
  int device = 0;
  bool local = true;
  void* scratchAddress = nullptr;  // this rank's scratch as this process addresses it (peers: an IPC mapping)
  std::vector<Stream> lanes;
  std::vector<Event> joinEvents;  // one per lane: "lane reached the end of the program"
  Event forkEvent;                // "M reached this point": lanes wait on it before their next op
  // Completion marker of eager launches, polled by synchronize(): launch k (counted in `launches`) ends with a
  // stream write of k into this pinned host word. It rides in the program's last memory-op batch, so it costs no
  // CUDA call of its own where an event record cost one (~3 us in our VM, docs/cuda-executor.md).
  PinnedBuffer doneCounter;
  CUdeviceptr doneCounterDevice = 0;
  // Eager launches so far (wraps; compared with wrap-safe arithmetic). Written by the launching thread under `mutex`;
  // atomic because HostGatedWork's busy probe (CudaExecutor::busy) reads it from the IPC closer's thread.
  std::atomic<uint32_t> launches{0};
  // Whether the GPU has written the done marker of every eager launch so far (wrap-safe).
  bool launchesDone() const {
    const uint32_t done = *static_cast<const volatile uint32_t*>(doneCounter.as<uint32_t>());
    return static_cast<int32_t>(done - launches.load(std::memory_order_acquire)) >= 0;
  }
  // cudaStreamGetId of the caller's stream of the last eager launch (meaningful once launches > 0): a call on another
  // stream first waits for that launch's done marker (CudaExecutor::orderAfterPreviousCall).
  unsigned long long lastStreamId = 0;
  // The last captured launch: its capture (cudaStreamGetCaptureInfo's id, unique in the process), its stream and the
  // graph nodes it ended with (none: no such launch to order after), on which a later call captured into the same
  // graph on another stream depends (CudaExecutor::orderAfterPreviousCapturedCall).
  struct CapturedCallEnd {
    unsigned long long id = 0;
    cudaStream_t stream = nullptr;
    std::vector<cudaGraphNode_t> endNodes;
  } lastCapture;
  // Written 1 by a small-message kernel whose wait timed out (see small_program_kernel.h); checked by launch and
  // synchronize, which report concclTimeout.
  PinnedBuffer smallKernelError;
  uint32_t* smallKernelErrorDevice = nullptr;
  SmallProgram smallProgram;  // reused by launch() (no allocation on the hot path)
  // slots x uint32 in pinned, mapped host memory. A Signal is then a stream memory operation (a 32-bit write into
  // host memory, ordered after the stream's earlier work with a memory barrier) instead of a 4-byte copy: it can
  // share one cuStreamBatchMemOp with the waits around it, which halves the CUDA calls of a small collective.
  // Remote cuStreamWriteValue32 into another GPU's memory is not supported from CUDA 13.1; host memory is local to
  // every GPU, so this works for ranks on different GPUs (and, through shared pinned memory, processes) alike.
  PinnedBuffer flags;
  DeviceBuffer scratch;  // config.scratchBytes (may be empty; local ranks only)
  // Cached CUDA graphs of repeated eager copy-engine calls (graph_cache.h); null when config.graphCacheEntries is 0.
  std::unique_ptr<RankGraphCache> graphs;

  // Per-launch bookkeeping, kept here so that launch() does not allocate.
  std::vector<int64_t> laneSyncedAt;  // M's op count when the lane last waited on M (-1: not this call)
  std::vector<bool> laneUsed;
  std::vector<CUstreamBatchMemOpParams> pendingWaits;

  std::mutex mutex;  // serialises launch / synchronize / release of this rank
  bool released = false;
};

// Addresses of one call's Locations in this process: every rank's call buffers (from the binding; a peer
// process's buffers as mapped here) and every rank's scratch.
class LocationResolver {
 public:
  LocationResolver(const std::vector<std::unique_ptr<RankState>>& ranks, const CallBinding& binding)
      : ranks_(ranks), binding_(binding) {}

  char* operator()(const sched::Location& loc) const {
    void* base = nullptr;
    if (loc.buffer == sched::kScratch) {
      base = ranks_[static_cast<size_t>(loc.rank)]->scratchAddress;
    } else {
      const std::vector<void*>& bufs = binding_.buffers[static_cast<size_t>(loc.rank)];
      CONCCL_ASSERT(loc.buffer >= 0 && loc.buffer < static_cast<int>(bufs.size()));
      base = bufs[static_cast<size_t>(loc.buffer)];
    }
    CONCCL_ASSERT(base != nullptr);
    return static_cast<char*>(base) + loc.offset;
  }

 private:
  const std::vector<std::unique_ptr<RankState>>& ranks_;
  const CallBinding& binding_;
};

}  // namespace conccl::exec
