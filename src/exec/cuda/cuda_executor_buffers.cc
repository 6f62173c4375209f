// The CUDA executor's view of the caller's buffers (the class: cuda_executor.h): every call's pointers checked in
// one driver query (device memory of the rank's GPU, large enough), and across processes their export to the peers
// and the peers' imports, each cached per allocation because opening a CUDA IPC handle costs milliseconds; calls on
// pool memory moved onto the rank's bounce regions (pool_bounce.h).
// docs/multiprocess.md describes the protocol around it.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/logging.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_executor.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/graph_memory.h"
#include "exec/cuda/ipc_import_table.h"

namespace conccl::exec {


uint64_t CudaExecutor::checkBuffer(int rank, const void* ptr, size_t bytes, const char* what,
                                   cudaStream_t stream) const {
  CheckedRange range;
  return checkBufferIn(rank, ptr, bytes, what, stream, &range);
}

uint64_t CudaExecutor::checkBufferIn(int rank, const void* ptr, size_t bytes, const char* what, cudaStream_t stream,
                                     CheckedRange* range) const {
  CONCCL_ASSERT(rank >= 0 && rank < static_cast<int>(devices_.size()));
  DeviceGuard guard(devices_[rank]);
  const PointerInfo info = checkedPointer(rank, ptr, bytes, what, stream);
  *range = CheckedRange{static_cast<uintptr_t>(info.base), info.base != 0 ? info.size : 0};
  // Managed memory migrates, and an allocation the driver does not report has no id: neither is cached by shape.
  const bool named = info.bufferId != 0 && !info.managed && info.base != 0;
  return named ? static_cast<uint64_t>(info.bufferId) : kAllocationUnknown;
}

PointerInfo CudaExecutor::checkedPointer(int rank, const void* ptr, size_t bytes, const char* what,
                                         cudaStream_t stream) const {
  const int device = devices_[rank];
  // One driver call for everything below (it was three: the enqueue cost of a small collective, issue 3).
  PointerInfo info = queryPointer(ptr);
  if (!info.managed && info.memoryType == 0) {
    // Unknown to the driver: plain host memory, or a graph's memory allocated inside the capture on `stream`.
    if (std::optional<PointerInfo> captured = capturedAllocationOf(stream, ptr)) info = *captured;
  }
  if (!info.managed && (info.memoryType == 0 || info.memoryType == CU_MEMORYTYPE_HOST)) {
    CONCCL_THROW(concclInvalidArgument, std::string(what) + " is a host pointer, the CUDA backend needs device memory");
  }
  if (!info.managed && info.memoryType == CU_MEMORYTYPE_DEVICE && info.device != device) {
    CONCCL_THROW(concclInvalidArgument, std::string(what) + " is memory of device " + std::to_string(info.device) +
                                            " but the rank runs on device " + std::to_string(device));
  }
  // The whole range must lie inside one allocation: a copy past its end would fault the GPU (or silently
  // corrupt a neighbouring allocation), long after the call returned.
  if (info.base == 0 || info.size == 0) {
    // Some allocators' ranges are not known to this query (e.g. stream-ordered pools on older drivers): the
    // pointer is device memory of the right GPU, so accept it without the size check rather than refuse it.
    CONCCL_TRACE(rank, device, std::string(what) + ": allocation range unknown, size not checked");
    return info;
  }
  const size_t offset = reinterpret_cast<uintptr_t>(ptr) - static_cast<uintptr_t>(info.base);
  if (offset > info.size || bytes > info.size - offset) {
    CONCCL_THROW(concclInvalidArgument, std::string(what) + " is too small: the call needs " + std::to_string(bytes) +
                                            " bytes but its allocation has " + std::to_string(info.size - offset) +
                                            " bytes from that address");
  }
  return info;
}

BufferExport CudaExecutor::exportBuffer(int rank, const void* ptr, size_t bytes, const char* what) {
  std::optional<BufferExport> e = exportIfShareable(rank, ptr, bytes, what, nullptr);
  if (!e) {
    DeviceGuard guard(devices_[static_cast<size_t>(rank)]);
    if (!exportVmm_ && isShareableVmm(ptr)) {
      // PyTorch's expandable segments with CONCCL_VMM_EXPORT=0: say so rather than blame the allocator.
      CONCCL_THROW(concclInvalidArgument,
                   std::string(what) + " (" + describePointer(ptr) +
                       ") is VMM memory created shareable, but this communicator does not share VMM memory with its "
                       "peers (CONCCL_VMM_EXPORT=0, or the check at initialization found that its processes cannot: "
                       "docs/multiprocess.md). Leave CONCCL_VMM_EXPORT at its default, or allocate with cudaMalloc "
                       "or concclMemAlloc");
    }
    CONCCL_THROW(concclInvalidArgument,
                 std::string(what) + " (" + describePointer(ptr) +
                     ") cannot be shared with the other processes: CUDA IPC takes only cudaMalloc allocations (memory "
                     "from cudaMallocAsync pools, the VMM API or managed memory is not exportable). Allocate it with "
                     "cudaMalloc or concclMemAlloc");
  }
  return *e;
}

bool CudaExecutor::isPoolMemory(int rank, const void* ptr) const {
  // One attribute, asked on every deferrable call (ProcessClique::usesPoolMemory): not queryPointer's six.
  DeviceGuard guard(devices_[static_cast<size_t>(rank)]);
  CUpointer_attribute attribute = CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE;
  CUmemoryPool pool = nullptr;
  void* data[] = {&pool};
  CU_CHECK(driverApi().pointerGetAttributes(1, &attribute, data, reinterpret_cast<CUdeviceptr>(ptr)));
  return pool != nullptr;
}

std::optional<std::array<void*, 2>> CudaExecutor::enterPoolBounce(int rank, cudaStream_t stream,
                                                                  const PoolBouncePlan& plan, std::string* whyNot) {
  CONCCL_ASSERT(processMode_ && rank == localRank_);
  if (!exportVmm_) {
    *whyNot = "the communicator does not share VMM memory (CONCCL_VMM_EXPORT=0, or its check at init failed)";
    return std::nullopt;
  }
  DeviceGuard guard(devices_[static_cast<size_t>(rank)]);
  PoolBounceRegions* regions = nullptr;
  {
    std::lock_guard<std::mutex> lock(poolBounceMutex_);
    if (!poolBounce_) {
      poolBounce_ = std::make_unique<PoolBounceRegions>(devices_[static_cast<size_t>(rank)], rank,
                                                        config_.poolBounceMaxBytes, config_.smBudget,
                                                        kernelPriority_[static_cast<size_t>(rank)]);
    }
    regions = poolBounce_.get();
  }
  return regions->enter(stream, plan, whyNot);
}

void CudaExecutor::leavePoolBounce(int rank, bool copyOut) {
  CONCCL_ASSERT(processMode_ && rank == localRank_ && poolBounce_);
  DeviceGuard guard(devices_[static_cast<size_t>(rank)]);
  poolBounce_->leave(copyOut);
}

PoolBounceRegions* CudaExecutor::pendingPoolBounce(const CallBinding& binding, int rank, cudaStream_t stream) const {
  // Only the caller's thread enters and launches a call on the regions (the proxy launches other calls meanwhile, never
  // with poolBounce set), so the regions exist here whenever such a call is launched.
  if (!binding.poolBounce || !processMode_ || rank != localRank_ || !poolBounce_) return nullptr;
  return poolBounce_->copiesInPending(stream) ? poolBounce_.get() : nullptr;
}

std::optional<BufferExport> CudaExecutor::exportIfShareable(int rank, const void* ptr, size_t bytes, const char* what,
                                                            cudaStream_t stream) {
  CONCCL_ASSERT(processMode_ && rank == localRank_);
  DeviceGuard guard(devices_[static_cast<size_t>(rank)]);
  const PointerInfo info = checkedPointer(rank, ptr, bytes, what, stream);
  if (info.managed || info.memoryType != CU_MEMORYTYPE_DEVICE || info.graphMemory) return std::nullopt;
  std::lock_guard<std::mutex> lock(exportMutex_);
  auto it = info.bufferId == 0 ? exports_.end() : exports_.find(info.bufferId);
  if (it == exports_.end()) {
    // VMM memory (PyTorch's expandable segments) has no CUDA IPC handle; it is shared piece by piece when it was
    // created shareable: a unit made for an earlier call, or (one pointer query tells, before cudaIpcGetMemHandle is
    // tried and fails on every call) a new one.
    if (exportVmm_) {
      if (const VmmUnit* unit = cachedVmmUnitLocked(ptr, bytes)) return vmmExportOf(*unit, ptr);
      if (isShareableVmm(ptr)) return exportVmmLocked(ptr, bytes);
    }
    if (info.base == 0 || info.bufferId == 0) return std::nullopt;
    BufferExport e;
    e.allocId = info.bufferId;
    e.base = static_cast<uint64_t>(info.base);
    e.allocBytes = info.size;
    e.pid = static_cast<int64_t>(::getpid());
    cudaIpcMemHandle_t handle;
    cudaError_t err = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(info.base));
    if (err != cudaSuccess) {
      // Pools, and VMM memory not created shareable (or with CONCCL_VMM_EXPORT=0): valid device memory, no handle.
      (void)cudaGetLastError();
      return std::nullopt;
    }
    std::memcpy(e.handle, &handle, sizeof(handle));
    retireStaleExportsLocked();
    exportedAt_[info.base] = info.bufferId;
    it = exports_.emplace(info.bufferId, e).first;
    // A new allocation, possibly at the address of a freed one that a cached graph still names.
    mappingGeneration_.fetch_add(1, std::memory_order_release);
  }
  BufferExport out = it->second;
  out.offset = reinterpret_cast<uintptr_t>(ptr) - static_cast<uintptr_t>(info.base);
  return out;
}

const VmmUnit* CudaExecutor::cachedVmmUnitLocked(const void* ptr, size_t bytes) {
  // A unit made for an earlier call that covers this buffer, if its pieces are still the ones mapped there; a unit
  // whose pieces were replaced is retired on the way.
  for (auto unit = vmmUnits_.begin(); unit != vmmUnits_.end();) {
    auto next = std::next(unit);
    if (vmmUnitCovers(unit->second, ptr, bytes)) {
      if (vmmUnitStillMapped(unit->second, ptr, bytes)) {
        unit->second.lastUse = ++vmmClock_;
        return &unit->second;
      }
      // Not one the call being prepared uses for its other buffer (its peers would drop their mapping on reading
      // the entry, then map it again for the call): that one is swept later.
      if (!usedByCallBeingPrepared(unit->second)) retireVmmUnitLocked(unit);
    }
    unit = next;
  }
  return nullptr;
}

std::optional<BufferExport> CudaExecutor::exportVmmLocked(const void* ptr, size_t bytes) {
  const int device = devices_[static_cast<size_t>(localRank_)];
  std::string why;
  std::optional<VmmUnit> made = makeVmmUnit(ptr, bytes, device, &why);
  if (made && !VmmHandleServer::instance().serve(*made, device, &why)) {
    releaseVmmUnit(*made);
    made.reset();
  }
  if (!made) {
    // Staged instead: correct, an SM copy per received byte. Said once per process, not per call.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      CONCCL_WARN(localRank_, device,
                  "a VMM buffer (" + describePointer(ptr) + ") cannot be shared, so calls on it are staged: " + why);
    }
    return std::nullopt;
  }
  retireStaleExportsLocked();
  // Bounded: buffers at ever new places of a segment would otherwise add units without end (each retaining its
  // pieces, each swept on every new export). The least recently used goes; its peers unmap it.
  if (vmmUnits_.size() >= kMaxVmmUnits) {
    auto oldest = vmmUnits_.begin();
    for (auto u = vmmUnits_.begin(); u != vmmUnits_.end(); ++u) {
      if (u->second.lastUse < oldest->second.lastUse) oldest = u;
    }
    retireVmmUnitLocked(oldest);
  }
  CONCCL_TRACE(localRank_, device,
               "exporting VMM buffer " + describePointer(ptr) + ": " + std::to_string(made->pieces.size()) +
                   " piece(s), " + std::to_string(made->bytes) + " B");
  made->lastUse = ++vmmClock_;
  const uint64_t id = made->id;
  const VmmUnit& unit = vmmUnits_.emplace(id, std::move(*made)).first->second;
  mappingGeneration_.fetch_add(1, std::memory_order_release);
  return vmmExportOf(unit, ptr);
}

BufferExport CudaExecutor::vmmExportOf(const VmmUnit& unit, const void* ptr) {
  BufferExport e;
  e.kind = BufferExport::kVmm;
  e.allocId = unit.id;
  e.base = static_cast<uint64_t>(unit.base);
  e.allocBytes = unit.bytes;
  e.pid = static_cast<int64_t>(::getpid());
  e.offset = reinterpret_cast<uintptr_t>(ptr) - static_cast<uintptr_t>(unit.base);
  return e;
}

std::vector<int64_t> CudaExecutor::otherProcesses() const {
  std::vector<int64_t> others;
  for (int64_t pid : pids_) {
    if (pid != static_cast<int64_t>(::getpid())) others.push_back(pid);
  }
  return others;
}

void CudaExecutor::releaseVmmExports() {
  std::lock_guard<std::mutex> lock(exportMutex_);
  try {
    for (auto& [id, unit] : vmmUnits_) {
      VmmHandleServer::instance().withdraw(id);
      releaseVmmUnit(unit);
    }
    // Retired units still served: at destroy no peer maps anything of this communicator any more.
    releaseRetiringUnitsLocked(retiringGate_.takeAll());
  } catch (const Error& e) {
    CONCCL_WARN(localRank_, devices_[static_cast<size_t>(localRank_)],
                std::string("releasing the exported VMM buffers failed: ") + e.what());
  }
  vmmUnits_.clear();
  if (peersAllowed_) VmmHandleServer::instance().disallowPeers(otherProcesses());
  peersAllowed_ = false;
}

void* CudaExecutor::importBuffer(int owner, const BufferExport& b) {
  CONCCL_ASSERT(processMode_ && owner >= 0 && owner < static_cast<int>(ranks_.size()) && owner != localRank_);
  std::lock_guard<std::mutex> lock(importMutex_);
  auto key = std::make_pair(owner, b.allocId);
  auto it = imports_.find(key);
  if (it == imports_.end()) {
    void* base = nullptr;
    if (b.pid == static_cast<int64_t>(::getpid())) {
      base = reinterpret_cast<void*>(b.base);  // a peer rank in this very process: same address space
    } else {
      // The expensive step (milliseconds): once per allocation and peer, thanks to this cache.
      base = IpcImportTable::instance().acquire(b, devices_[static_cast<size_t>(localRank_)],
                                                std::chrono::milliseconds(config_.timeoutMs));
    }
    it = imports_.emplace(key, base).first;
    CONCCL_TRACE(localRank_, devices_[static_cast<size_t>(localRank_)],
                 "mapped allocation " + std::to_string(b.allocId) + " of rank " + std::to_string(owner) + " (" +
                     std::to_string(b.allocBytes) + " B)");
  }
  return static_cast<char*>(it->second) + b.offset;
}

void CudaExecutor::closeImport(int owner, uint64_t allocId) {
  // Called during a call (a peer retired the allocation): the unmapping waits for the device, so not on the caller's
  // thread.
  unmapImport(owner, allocId, /*inBackground=*/true);
}

void CudaExecutor::unmapImport(int owner, uint64_t allocId, bool inBackground) {
  CONCCL_ASSERT(processMode_);
  std::lock_guard<std::mutex> lock(importMutex_);
  auto it = imports_.find(std::make_pair(owner, allocId));
  if (it == imports_.end()) return;
  const int64_t pid = pids_[static_cast<size_t>(owner)];
  if (pid != static_cast<int64_t>(::getpid())) {
    IpcImportTable::instance().release(pid, allocId, devices_[static_cast<size_t>(localRank_)], inBackground);
  }
  imports_.erase(it);
  mappingGeneration_.fetch_add(1, std::memory_order_release);
}

void CudaExecutor::closeAllImports() {
  std::vector<std::pair<int, uint64_t>> keys;
  {
    std::lock_guard<std::mutex> lock(importMutex_);
    for (const auto& [key, base] : imports_) keys.push_back(key);
  }
  // At destroy the rank's work has drained: unmap here, and let the background closes of earlier calls finish too, so
  // that nothing of this communicator stays mapped after it is destroyed.
  for (const auto& [owner, allocId] : keys) unmapImport(owner, allocId, /*inBackground=*/false);
  if (!IpcImportTable::instance().waitForBackgroundCloses(std::chrono::milliseconds(config_.timeoutMs))) {
    CONCCL_WARN(localRank_, devices_[static_cast<size_t>(localRank_)],
                "unmapping retired peer allocations did not finish within timeoutMs; it goes on in the background");
  }
}

}  // namespace conccl::exec
