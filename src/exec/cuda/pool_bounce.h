// The bounce regions of a communicator's local rank (CudaExecutor, several processes), on which its calls on
// cudaMallocAsync pool memory run (exec/pool_bounce_plan.h says why and what is copied).
//
// Each region is a VMM range created shareable (POSIX descriptors, as PyTorch's expandable segments), so the VMM export
// (vmm_export.h) shares it with the peers like any such memory; its address never changes, so the peers map it once and
// repeated calls replay cached graphs. A region reserves CONCCL_POOL_BOUNCE_MAX_BYTES of address space and maps memory
// at its end as calls need it, at least doubling each time (few pieces: a call checks each piece it uses). The memory
// stays mapped until the communicator is destroyed.
//
// Ordering: a call's copies in, its program and its copies out run in the caller's stream order; the next call on the
// same stream follows them. A call on another stream first waits for an event recorded after the previous call's copies
// out (the executor's own order across streams, CudaExecutor::orderAfterPreviousCall, ends at the program's done marker,
// before those copies).
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

#include "exec/cuda/raii.h"
#include "exec/pool_bounce_plan.h"

namespace conccl::exec {

class PoolBounceRegions {
 public:
  PoolBounceRegions(int device, int rank, size_t maxRegionBytes);
  ~PoolBounceRegions();  // frees only what release() left (nothing after a release that timed out: leaked)
  PoolBounceRegions(const PoolBounceRegions&) = delete;
  PoolBounceRegions& operator=(const PoolBounceRegions&) = delete;

  // Before the call, on the caller's thread: maps the regions as large as `plan` needs, orders `stream` after the
  // regions' previous use, and enqueues the copies in. Returns the regions' bases (null where unused); nullopt, with
  // the reason, when memory for them cannot be had (nothing was enqueued then).
  std::optional<std::array<void*, 2>> enter(cudaStream_t stream, const PoolBouncePlan& plan, std::string* whyNot);
  // After the call's launch (its program, or the wait for a deferred one, is on `stream`): enqueues the copies out
  // (unless `copyOut` is false: the call failed) and marks the regions' use.
  void leave(cudaStream_t stream, const PoolBouncePlan& plan, const std::array<void*, 2>& regions, bool copyOut);
  // At destroy, after the rank drained and the VMM exports were withdrawn: waits (bounded by `limit`) for the last use
  // on the GPU, then unmaps and frees. Returns false and leaks the memory when the GPU did not finish in time.
  bool release(std::chrono::milliseconds limit);

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
  // Maps `r` to at least `bytes`; false with the reason when the driver refuses.
  bool grow(Region& r, size_t bytes, std::string* why);
  void freeRegions();

  const int device_;
  const int rank_;
  const size_t maxRegionBytes_;
  size_t granule_ = 0;
  std::mutex mutex_;
  std::array<Region, 2> regions_;
  Event lastUse_;  // recorded on the last user's stream after its copies out
  cudaStream_t lastStream_ = nullptr;
  bool used_ = false;
  bool leaked_ = false;
};

}  // namespace conccl::exec
