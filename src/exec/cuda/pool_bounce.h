// The bounce regions of a communicator's local rank (CudaExecutor, several processes), on which its calls on
// cudaMallocAsync pool memory run (exec/pool_bounce_plan.h says why and what is copied).
//
// Each region is a VMM range created shareable (POSIX descriptors, as PyTorch's expandable segments), so the VMM export
// (vmm_export.h) shares it with the peers like any such memory; its address never changes, so the peers map it once and
// repeated calls replay cached graphs. A region reserves CONCCL_POOL_BOUNCE_MAX_BYTES of address space and maps memory
// at its end as calls need it, at least doubling each time (few pieces: a call checks each piece it uses). The memory
// stays mapped while calls keep using it (idle regions give it back: below).
//
// The copies are one kernel per side of the call (bounce_copy_kernel.h), launched around the call's program or, when
// the call replays a cached graph, as two kernel nodes of that graph set for each call; the copy out ends by writing
// the regions' use count into host memory. Ordering: a call's copies in, its program and its copies out run in the
// caller's stream order; the next call on the same stream follows them. A call on another stream first waits (a stream
// memory operation) for the previous call's use count: the executor's own order across streams
// (CudaExecutor::orderAfterPreviousCall) ends at the program's done marker, which an eager call writes before its copy
// out (a replayed graph's copy-out node writes the marker after the use count). The copies in are enqueued by the
// call's launch, or before the gate of a deferred call: they touch only the caller's buffers and the regions, which
// the wait above orders.
//
// Idle regions give their memory back (releaseIfIdle, from the communicator's housekeeping): their pieces are unmapped
// once no call used them for CONCCL_POOL_BOUNCE_IDLE_MS and the GPU is done with the last one; the VMM export's sweep
// then retires the units the peers mapped (vmm_export.h), and the next call maps the regions again.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "exec/cuda/bounce_copy_kernel.h"
#include "exec/cuda/raii.h"
#include "exec/pool_bounce_plan.h"

namespace conccl::exec {

class PoolBounceRegions {
 public:
  // `maxCtas`: the copy kernel's CTAs at most (the communicator's smBudget); `priority`: its launch priority (as the
  // reduce kernel's, launchKernel).
  PoolBounceRegions(int device, int rank, size_t maxRegionBytes, int maxCtas, int priority);
  ~PoolBounceRegions();  // frees only what release() left (nothing after a release that timed out: leaked)
  PoolBounceRegions(const PoolBounceRegions&) = delete;
  PoolBounceRegions& operator=(const PoolBounceRegions&) = delete;

  // Before the call, on the caller's thread: maps the regions as large as `plan` needs, orders `stream` after the
  // regions' previous use, and keeps the call's copies for its launch (below). Returns the regions' bases (null where
  // unused); nullopt, with the reason, when memory for them cannot be had (nothing was enqueued then).
  std::optional<std::array<void*, 2>> enter(cudaStream_t stream, const PoolBouncePlan& plan, std::string* whyNot);

  // The copies of the call between enter and leave. The copies in wait for the call's launch, which either enqueues
  // them on their own before the program (enqueueCopiesIn: an eager program, the gate of a deferred launch) or runs
  // both sides as kernel nodes of the call's cached graph (graphCopies, then copiesLaunchedInGraph): one launch for the
  // copies and the program instead of three (exec/cuda/graph_cache.h).
  struct CallCopies {
    BounceCopyArgs in;
    BounceCopyArgs out;  // ends by writing the use count of this call into the regions' mark
  };
  // Whether a call on `stream` is between enter and leave with its copies in not yet enqueued.
  bool copiesInPending(cudaStream_t stream);
  // Enqueues the call's copies in on its stream.
  void enqueueCopiesIn();
  // Both sides of the call, for the nodes of the graph launched next; copiesLaunchedInGraph() once it is launched.
  CallCopies graphCopies();
  void copiesLaunchedInGraph();
  // How the copy kernel is launched: its CTAs at most, its priority (launchBounceCopy, setBounceCopyNode).
  int maxCtas() const { return maxCtas_; }
  int priority() const { return priority_; }

  // After the call's launch (its program, or the wait for a deferred one, is on the call's stream): enqueues the
  // copies out (unless `copyOut` is false: the call failed; or they ran in the call's graph) and marks the regions'
  // use. A failed call whose copies in were never enqueued left nothing on the stream: no use is marked.
  void leave(bool copyOut);
  // At destroy, after the rank drained and the VMM exports were withdrawn: waits (bounded by `limit`) for the last use
  // on the GPU, then unmaps and frees. Returns false and leaks the memory when the GPU did not finish in time.
  bool release(std::chrono::milliseconds limit);
  // Unmaps the regions when no call has used them for `idle` and the GPU finished the last use; never blocks (a call
  // in progress keeps them). Returns whether memory was given back.
  bool releaseIfIdle(std::chrono::milliseconds idle);

  // Bytes of device memory mapped in both regions.
  size_t mappedBytes() const;

 private:
  struct Piece {
    CUmemGenericAllocationHandle handle = 0;
    size_t bytes = 0;
  };
  struct Region {
    CUdeviceptr base = 0;  // reserved on first use
    size_t reserved = 0;
    size_t mapped = 0;
    std::vector<Piece> pieces;
  };
  // The call between enter and leave.
  struct Call {
    cudaStream_t stream = nullptr;
    CallCopies copies;         // copies.out without its mark
    bool inEnqueued = false;   // the copies in are on the stream
    bool ranInGraph = false;   // both sides ran as nodes of the call's graph, which marked the use
  };
  // Whether a call is between enter and leave with neither its copies in enqueued nor its graph launched (mutex_ held).
  bool copiesPendingLocked() const { return call_ && !call_->inEnqueued && !call_->ranInGraph; }
  // The copy out of the current call writing use count uses_ + 1, or (`withCopies` false) only that mark.
  BounceCopyArgs copyOutMarked(bool withCopies) const;
  // Maps `r` to at least `bytes`; false with the reason when the driver refuses.
  bool grow(Region& r, size_t bytes, std::string* why);
  void freeRegions();
  // Whether the GPU finished the copies out of the last use (its count is in the mark).
  bool lastUseDone() const { return *static_cast<const volatile uint32_t*>(mark_.as<uint32_t>()) == uses_; }

  const int device_;
  const int rank_;
  const size_t maxRegionBytes_;
  size_t granule_ = 0;
  std::mutex mutex_;
  int maxCtas_ = 1;  // the copy kernel's CTAs at most: smBudget, at most the device's SMs
  int priority_ = 0;
  std::array<Region, 2> regions_;
  PinnedBuffer mark_;                    // uint32: the use count the last finished copy out wrote
  CUdeviceptr markDevice_ = 0;           // the same word as the device addresses it
  DeviceBuffer finishedCtas_;            // uint32: the copy kernel's count of finished CTAs (bounce_copy_kernel.h)
  uint32_t uses_ = 0;                    // calls that left the regions so far (the value their last copy out writes)
  unsigned long long lastStreamId_ = 0;  // cudaStreamGetId of the last use's stream
  std::chrono::steady_clock::time_point lastUseAt_{};
  std::optional<Call> call_;  // between enter and leave: a call is being matched on the regions
  bool leaked_ = false;
};

}  // namespace conccl::exec
