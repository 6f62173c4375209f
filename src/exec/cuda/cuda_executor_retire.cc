// The CUDA executor's retirement of its exports (several processes; the class: cuda_executor.h): finding the
// allocations that were freed (or whose VMM pieces were replaced) since they were exported, handing their ids to the
// peers with the next call (or through the retirement log when no call comes: core/retire_log.h) so that they unmap
// them, and letting go of a retired VMM unit once no peer can map it any more (exec/retire_after_peers.h). The exports
// themselves: cuda_executor_buffers.cc.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/logging.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_executor.h"
#include "exec/cuda/ipc_import_table.h"

namespace conccl::exec {

void CudaExecutor::retireAllocationLocked(std::map<uint64_t, BufferExport>::iterator cached, bool freed) {
  retiredExports_.push_back(cached->first);
  if (!freed) deregistered_[cached->first] = static_cast<CUdeviceptr>(cached->second.base);
  auto at = exportedAt_.find(static_cast<CUdeviceptr>(cached->second.base));
  if (at != exportedAt_.end() && at->second == cached->first) exportedAt_.erase(at);
  exports_.erase(cached);
  mappingGeneration_.fetch_add(1, std::memory_order_release);
}

void CudaExecutor::retireStaleExportsLocked() {
  // A new export: sweep the cache for allocations that were freed since (their address no longer carries their id;
  // a VMM unit whose pieces were unmapped) and hand their ids to the peers to unmap. This is not only tidiness: a
  // peer maps our small allocations at our own addresses, so a stale mapping of freed memory would make the mapping
  // of a new allocation at the same place fail (cudaErrorAlreadyMapped); and a VMM unit retains its pieces, which
  // keeps their memory allocated until it is released. The peers' work on a freed allocation is complete: it came
  // before the done signal our stream waited for, and the free waited for our stream. A VMM unit's pieces may be
  // unmapped while a call still names it (a later buffer inside the unit, on pieces still mapped), so a retired unit
  // stays served until the peers read past the call carrying its id (releaseRetiredExports). One driver call per
  // cached allocation (two per VMM piece), on this path and in the background sweep (sweepFreedExports).
  for (auto cached = exports_.begin(); cached != exports_.end();) {
    auto next = std::next(cached);
    if (queryPointer(reinterpret_cast<void*>(cached->second.base)).bufferId != cached->first) {
      retireAllocationLocked(cached);
    }
    cached = next;
  }
  for (auto unit = vmmUnits_.begin(); unit != vmmUnits_.end();) {
    auto next = std::next(unit);
    if (!usedByCallBeingPrepared(unit->second) && !vmmUnitStillMapped(unit->second)) retireVmmUnitLocked(unit);
    unit = next;
  }
}

void CudaExecutor::retireVmmUnitLocked(std::map<uint64_t, VmmUnit>::iterator it) {
  // No longer used for new calls; still served (exec/retire_after_peers.h).
  const uint64_t id = it->first;
  retiredExports_.push_back(id);
  retiringGate_.retired(id);
  retiringVmm_.emplace(id, std::move(it->second));
  anyRetiring_.store(true, std::memory_order_release);
  vmmUnits_.erase(it);
  mappingGeneration_.fetch_add(1, std::memory_order_release);
}

void CudaExecutor::releaseRetiringUnitsLocked(const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids) {
    auto it = retiringVmm_.find(id);
    if (it == retiringVmm_.end()) continue;
    VmmHandleServer::instance().withdraw(id);
    releaseVmmUnit(it->second);
    retiringVmm_.erase(it);
  }
  anyRetiring_.store(!retiringGate_.empty(), std::memory_order_release);
}

void CudaExecutor::retireExport(int rank, const void* ptr) {
  CONCCL_ASSERT(processMode_ && rank == localRank_);
  DeviceGuard guard(devices_[static_cast<size_t>(rank)]);
  const PointerInfo info = queryPointer(ptr);
  std::lock_guard<std::mutex> lock(exportMutex_);
  for (auto unit = vmmUnits_.begin(); unit != vmmUnits_.end();) {
    auto next = std::next(unit);
    if (vmmUnitCovers(unit->second, ptr, 1)) retireVmmUnitLocked(unit);
    unit = next;
  }
  if (info.bufferId == 0) return;
  if (auto cached = exports_.find(info.bufferId); cached != exports_.end()) {
    retireAllocationLocked(cached, /*freed=*/false);
  }
}

std::vector<uint64_t> CudaExecutor::takeRetiredExports(int rank, uint64_t carryingSeq) {
  CONCCL_ASSERT(processMode_ && rank == localRank_);
  std::lock_guard<std::mutex> lock(exportMutex_);
  retiringGate_.carriedBy(carryingSeq);
  vmmClockAtLastEntry_ = vmmClock_;  // the call being prepared is published: its units may be swept from now on
  return std::exchange(retiredExports_, {});  // deregistered_ keeps their marks: some may be handed back
}

void CudaExecutor::requeueRetiredExports(int rank, const std::vector<uint64_t>& ids) {
  CONCCL_ASSERT(processMode_ && rank == localRank_);
  std::lock_guard<std::mutex> lock(exportMutex_);
  retiredExports_.insert(retiredExports_.begin(), ids.begin(), ids.end());
  retiringGate_.notCarried(ids);
}

size_t CudaExecutor::logRetiredExports(int rank, const RetireLogAppend& append) {
  if (!processMode_ || rank != localRank_) return 0;
  std::lock_guard<std::mutex> lock(exportMutex_);
  if (retiredExports_.empty()) return 0;
  const RelaxedCaptureScope relaxed(true);  // the watchdog's thread, beside a caller's global-mode capture
  DeviceGuard guard(devices_[static_cast<size_t>(rank)]);
  // Not an allocation deregistered while its memory lives: a later call may export it again under the same id, which
  // a peer applying the record late would then unmap under that call. Such an id waits for a call's entry (read before
  // the peer maps anything of that call), or until its memory is freed too (PyTorch's registration hook deregisters a
  // segment right before it frees it): one driver query each, only here, while no call comes.
  auto waiting = [&](uint64_t id) {
    return std::find(retiredExports_.begin(), retiredExports_.end(), id) != retiredExports_.end();
  };
  std::erase_if(deregistered_, [&](const auto& d) {
    return !waiting(d.first) || queryPointer(reinterpret_cast<void*>(d.second)).bufferId != d.first;
  });
  std::vector<uint64_t> loggable;
  for (uint64_t id : retiredExports_) {
    if (!deregistered_.contains(id)) loggable.push_back(id);
  }
  if (loggable.empty()) return 0;
  uint64_t firstIndex = 0;
  const size_t n = std::min(append(loggable, &firstIndex), loggable.size());
  loggable.resize(n);
  retiringGate_.logged(loggable, firstIndex);
  std::erase_if(retiredExports_, [&](uint64_t id) {
    return std::find(loggable.begin(), loggable.end(), id) != loggable.end();
  });
  return n;
}

void CudaExecutor::releaseRetiredExports(int rank, uint64_t peersConsumed, uint64_t peersLogRead) {
  if (!processMode_ || rank != localRank_ || !anyRetiring_.load(std::memory_order_acquire)) return;
  // Also on the watchdog's thread, while the caller may be capturing in global mode (PyTorch's), where the releases
  // would otherwise be refused or invalidate its capture (docs/multiprocess.md, "CUDA graph capture").
  const RelaxedCaptureScope relaxed(true);
  DeviceGuard guard(devices_[static_cast<size_t>(rank)]);
  std::lock_guard<std::mutex> lock(exportMutex_);
  releaseRetiringUnitsLocked(retiringGate_.releasable(peersConsumed, peersLogRead));
}

void CudaExecutor::sweepFreedExports(int rank) {
  if (!processMode_ || rank != localRank_) return;
  const RelaxedCaptureScope relaxed(true);  // the watchdog's thread, beside a caller's global-mode capture
  DeviceGuard guard(devices_[static_cast<size_t>(rank)]);
  {
    // Idle bounce regions give their memory back first: the sweep below then finds their units unmapped and retires
    // them, so that the peers let go of their mappings too (pool_bounce.h).
    std::lock_guard<std::mutex> lock(poolBounceMutex_);
    if (poolBounce_) poolBounce_->releaseIfIdle(std::chrono::milliseconds(config_.poolBounceIdleMs));
  }
  // What to look at, under the lock; the driver queries (one per allocation, two per VMM piece) outside it, so that a
  // call exporting meanwhile does not wait for them; then, under the lock again, the retirement of what is still
  // cached as it was.
  std::vector<std::pair<uint64_t, CUdeviceptr>> allocations;
  std::vector<VmmUnit> units;
  {
    std::lock_guard<std::mutex> lock(exportMutex_);
    for (const auto& [id, e] : exports_) allocations.emplace_back(id, static_cast<CUdeviceptr>(e.base));
    // Round robin from where the last sweep stopped, up to kSweepPiecesPerPass pieces (two driver calls each): a
    // job with hundreds of many-piece units spreads them over several passes.
    size_t pieces = 0;
    auto unit = vmmUnits_.lower_bound(sweepCursor_);
    for (size_t seen = 0; seen < vmmUnits_.size() && pieces < kSweepPiecesPerPass; ++seen, ++unit) {
      if (unit == vmmUnits_.end()) unit = vmmUnits_.begin();
      if (usedByCallBeingPrepared(unit->second)) continue;
      units.push_back(unit->second);  // a copy: its handles are compared, not used
      pieces += unit->second.pieces.size();
    }
    sweepCursor_ = unit == vmmUnits_.end() ? 0 : unit->first;
  }
  std::vector<uint64_t> freed, stale;
  for (const auto& [id, base] : allocations) {
    if (queryPointer(reinterpret_cast<void*>(base)).bufferId != id) freed.push_back(id);
  }
  for (const VmmUnit& u : units) {
    if (!vmmUnitStillMapped(u)) stale.push_back(u.id);
  }
  if (freed.empty() && stale.empty()) return;
  std::lock_guard<std::mutex> lock(exportMutex_);
  for (uint64_t id : freed) {
    if (auto cached = exports_.find(id); cached != exports_.end()) retireAllocationLocked(cached);
  }
  for (uint64_t id : stale) {
    auto unit = vmmUnits_.find(id);
    if (unit != vmmUnits_.end() && !usedByCallBeingPrepared(unit->second)) retireVmmUnitLocked(unit);
  }
  CONCCL_TRACE(localRank_, devices_[static_cast<size_t>(localRank_)],
               "swept " + std::to_string(freed.size()) + " freed allocation(s) and " + std::to_string(stale.size()) +
                   " VMM unit(s) whose pieces were unmapped: their ids go to the peers with the next call");
}

}  // namespace conccl::exec
