// PoolBounceRegions (exec/cuda/pool_bounce.h).
#include "exec/cuda/pool_bounce.h"

#include <algorithm>
#include <thread>

#include "base/bytes_text.h"
#include "base/error.h"
#include "base/host_laps.h"
#include "base/logging.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/vmm_wire.h"

namespace conccl::exec {

namespace {

CUmemAllocationProp shareableProp(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  // What PyTorch's expandable segments ask for where the device has no fabric handles: the peers import it without an
  // IMEX channel.
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

size_t roundUp(size_t bytes, size_t granule) { return (bytes + granule - 1) / granule * granule; }

}  // namespace

PoolBounceRegions::PoolBounceRegions(int device, int rank, size_t maxRegionBytes)
    : device_(device), rank_(rank), maxRegionBytes_(maxRegionBytes) {
  const CUmemAllocationProp prop = shareableProp(device);
  CU_CHECK(driverApi().memGetAllocationGranularity(&granule_, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  lastUse_ = Event::createForOrdering();
}

PoolBounceRegions::~PoolBounceRegions() {
  if (!leaked_) freeRegions();
}

bool PoolBounceRegions::grow(Region& r, size_t bytes, std::string* why) {
  const DriverApi& api = driverApi();
  auto failed = [&](const char* call, CUresult res) {
    *why = std::string(call) + " for a bounce region refused: " + vmmwire::cuText(res);
    return false;
  };
  if (r.base == 0) {
    const size_t reserve = roundUp(maxRegionBytes_, granule_);
    if (const CUresult res = api.memAddressReserve(&r.base, reserve, 0, 0, 0); res != CUDA_SUCCESS) {
      r.base = 0;
      return failed("cuMemAddressReserve", res);
    }
    r.reserved = reserve;
  }
  // At least doubling, so that a region is a few pieces whatever the sizes that led to it.
  const size_t target = std::min(r.reserved, std::max(roundUp(bytes, granule_), 2 * r.mapped));
  const size_t add = target - r.mapped;
  const CUmemAllocationProp prop = shareableProp(device_);
  Piece piece;
  piece.bytes = add;
  if (const CUresult res = api.memCreate(&piece.handle, add, &prop, 0); res != CUDA_SUCCESS) {
    return failed("cuMemCreate", res);
  }
  const CUdeviceptr at = r.base + r.mapped;
  if (const CUresult res = api.memMap(at, add, 0, piece.handle, 0); res != CUDA_SUCCESS) {
    api.memRelease(piece.handle);
    return failed("cuMemMap", res);
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (const CUresult res = api.memSetAccess(at, add, &access, 1); res != CUDA_SUCCESS) {
    api.memUnmap(at, add);
    api.memRelease(piece.handle);
    return failed("cuMemSetAccess", res);
  }
  r.pieces.push_back(piece);
  r.mapped = target;
  CONCCL_INFO(rank_, device_,
              "calls on cudaMallocAsync pool memory run through bounce regions: " + bytesText(mappedBytes()) +
                  " of device memory held until the communicator is destroyed (CONCCL_POOL_BOUNCE_MAX_BYTES caps a "
                  "region; 0 stages such calls instead)");
  return true;
}

std::optional<std::array<void*, 2>> PoolBounceRegions::enter(cudaStream_t stream, const PoolBouncePlan& plan,
                                                             std::string* whyNot) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::array<void*, 2> bases{nullptr, nullptr};
  for (size_t i = 0; i < regions_.size(); ++i) {
    const size_t need = plan.spans[i].bytes;
    if (need == 0) continue;
    if (need > regions_[i].mapped && !grow(regions_[i], need, whyNot)) return std::nullopt;
    bases[i] = reinterpret_cast<void*>(regions_[i].base);
  }
  // A region's previous call ran on another stream: its copies out must be done before anything of this call
  // touches the region (this call's copies in, and the peers, who write into it once this rank's program started).
  if (used_ && stream != lastStream_) CUDA_CHECK(cudaStreamWaitEvent(stream, lastUse_.get(), 0));
  HostLaps::lap("pool bounce: regions");
  for (const BounceCopy& c : plan.copiesIn) {
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(bases[static_cast<size_t>(c.region)]) + c.offset,
                               reinterpret_cast<const void*>(c.user), c.bytes, cudaMemcpyDeviceToDevice, stream));
  }
  return bases;
}

void PoolBounceRegions::leave(cudaStream_t stream, const PoolBouncePlan& plan, const std::array<void*, 2>& regions,
                              bool copyOut) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (copyOut) {
    for (const BounceCopy& c : plan.copiesOut) {
      CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<void*>(c.user),
                                 static_cast<const char*>(regions[static_cast<size_t>(c.region)]) + c.offset, c.bytes,
                                 cudaMemcpyDeviceToDevice, stream));
    }
  }
  HostLaps::lap("pool bounce: copies out");
  CUDA_CHECK(cudaEventRecord(lastUse_.get(), stream));
  lastStream_ = stream;
  used_ = true;
}

bool PoolBounceRegions::release(std::chrono::milliseconds limit) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (used_) {
    // Bounded: the caller's stream may hold a copy out behind a wait that never ends (an aborted communicator whose
    // peer died); then the memory is leaked rather than unmapped under the copy.
    const auto until = std::chrono::steady_clock::now() + limit;
    cudaError_t e = cudaEventQuery(lastUse_.get());
    while (e == cudaErrorNotReady && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      e = cudaEventQuery(lastUse_.get());
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      leaked_ = true;
      lastUse_.leak();
      CONCCL_WARN(rank_, device_,
                  "the last call on the bounce regions had not finished on the GPU at destroy; leaking their " +
                      bytesText(mappedBytes()));
      return false;
    }
  }
  freeRegions();
  return true;
}

size_t PoolBounceRegions::mappedBytes() const { return regions_[0].mapped + regions_[1].mapped; }

void PoolBounceRegions::freeRegions() {
  const DriverApi& api = driverApi();
  for (Region& r : regions_) {
    size_t at = 0;
    for (const Piece& p : r.pieces) {
      api.memUnmap(r.base + at, p.bytes);
      api.memRelease(p.handle);
      at += p.bytes;
    }
    if (r.base != 0) api.memAddressFree(r.base, r.reserved);
    r = Region{};
  }
}

}  // namespace conccl::exec
