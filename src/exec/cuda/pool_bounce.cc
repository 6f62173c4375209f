// PoolBounceRegions (exec/cuda/pool_bounce.h).
#include "exec/cuda/pool_bounce.h"

#include <algorithm>
#include <thread>

#include "base/bytes_text.h"
#include "base/error.h"
#include "base/host_laps.h"
#include "base/logging.h"
#include "exec/cuda/bounce_copy_kernel.h"
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

PoolBounceRegions::PoolBounceRegions(int device, int rank, size_t maxRegionBytes, int maxCtas, int priority)
    : device_(device), rank_(rank), maxRegionBytes_(maxRegionBytes), priority_(priority) {
  const CUmemAllocationProp prop = shareableProp(device);
  CU_CHECK(driverApi().memGetAllocationGranularity(&granule_, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  int sms = 1;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  maxCtas_ = std::max(1, std::min(maxCtas, sms));
  mark_ = PinnedBuffer::allocate(sizeof(uint32_t));
  *mark_.as<uint32_t>() = 0;
  void* markDevice = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&markDevice, mark_.get(), 0));
  markDevice_ = reinterpret_cast<CUdeviceptr>(markDevice);
  finishedCtas_ = DeviceBuffer::allocate(sizeof(uint32_t));
  CUDA_CHECK(cudaMemset(finishedCtas_.get(), 0, sizeof(uint32_t)));
  preloadBounceCopyKernel();
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
                  " of device memory, given back once unused for CONCCL_POOL_BOUNCE_IDLE_MS "
                  "(CONCCL_POOL_BOUNCE_MAX_BYTES caps a region; 0 stages such calls instead)");
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
  // The regions' previous call ran on another stream: its copy out must be done before anything of this call
  // touches the regions (this call's copy in, and the peers, who write into them once this rank's program started).
  unsigned long long streamId = 0;
  CUDA_CHECK(cudaStreamGetId(stream, &streamId));
  if (uses_ > 0 && streamId != lastStreamId_) {
    CU_CHECK(
        driverApi().streamWaitValue32(reinterpret_cast<CUstream>(stream), markDevice_, uses_, CU_STREAM_WAIT_VALUE_EQ));
  }
  HostLaps::lap("pool bounce: regions");
  Call call;
  call.stream = stream;
  for (const BounceCopy& c : plan.copiesIn) {
    call.copies.in.add(reinterpret_cast<const void*>(c.user),
                       static_cast<char*>(bases[static_cast<size_t>(c.region)]) + c.offset, c.bytes);
  }
  for (const BounceCopy& c : plan.copiesOut) {
    call.copies.out.add(static_cast<const char*>(bases[static_cast<size_t>(c.region)]) + c.offset,
                        reinterpret_cast<void*>(c.user), c.bytes);
  }
  call_ = call;
  lastStreamId_ = streamId;
  return bases;
}

bool PoolBounceRegions::copiesInPending(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  return copiesPendingLocked() && call_->stream == stream;
}

void PoolBounceRegions::enqueueCopiesIn() {
  std::lock_guard<std::mutex> lock(mutex_);
  CONCCL_ASSERT(copiesPendingLocked());
  launchBounceCopy(call_->copies.in, maxCtas_, priority_, call_->stream);
  call_->inEnqueued = true;
}

BounceCopyArgs PoolBounceRegions::copyOutMarked(bool withCopies) const {
  BounceCopyArgs out = withCopies ? call_->copies.out : BounceCopyArgs{};
  out.mark = reinterpret_cast<volatile uint32_t*>(markDevice_);
  out.markValue = uses_ + 1;
  out.finished = finishedCtas_.as<unsigned>();
  return out;
}

PoolBounceRegions::CallCopies PoolBounceRegions::graphCopies() {
  std::lock_guard<std::mutex> lock(mutex_);
  CONCCL_ASSERT(copiesPendingLocked());
  return CallCopies{call_->copies.in, copyOutMarked(/*withCopies=*/true)};
}

void PoolBounceRegions::copiesLaunchedInGraph() {
  std::lock_guard<std::mutex> lock(mutex_);
  CONCCL_ASSERT(copiesPendingLocked());
  call_->ranInGraph = true;
  ++uses_;  // the graph's copy out writes this count
}

void PoolBounceRegions::leave(bool copyOut) {
  std::lock_guard<std::mutex> lock(mutex_);
  CONCCL_ASSERT(call_);
  lastUseAt_ = std::chrono::steady_clock::now();
  const Call call = *call_;
  call_.reset();
  if (call.ranInGraph) return;                // the graph copied out and marked the use
  if (!call.inEnqueued && !copyOut) return;   // a failed call that enqueued nothing of its own
  // A launched call whose launch enqueued nothing (no op for this rank) still has its copies in pending: they go first.
  if (!call.inEnqueued) launchBounceCopy(call.copies.in, maxCtas_, priority_, call.stream);
  // A failed call still writes its mark (no copies): the next call on another stream waits for exactly that count.
  launchBounceCopy(copyOutMarked(copyOut), maxCtas_, priority_, call.stream);
  ++uses_;
}

bool PoolBounceRegions::release(std::chrono::milliseconds limit) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Bounded: the caller's stream may hold a copy out behind a wait that never ends (an aborted communicator whose
  // peer died); then the memory is leaked rather than unmapped under the copy.
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!lastUseDone() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!lastUseDone()) {
    leaked_ = true;
    mark_.leak();  // the GPU may still write it
    finishedCtas_.leak();
    CONCCL_WARN(rank_, device_,
                "the last call on the bounce regions had not finished on the GPU at destroy; leaking their " +
                    bytesText(mappedBytes()));
    return false;
  }
  freeRegions();
  return true;
}

bool PoolBounceRegions::releaseIfIdle(std::chrono::milliseconds idle) {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || call_ || mappedBytes() == 0) return false;  // a call is on the regions: not idle
  if (std::chrono::steady_clock::now() - lastUseAt_ < idle || !lastUseDone()) return false;
  const size_t bytes = mappedBytes();
  freeRegions();
  CONCCL_INFO(rank_, device_,
              "bounce regions unused for " + std::to_string(idle.count()) + " ms: " + bytesText(bytes) + " given back");
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
