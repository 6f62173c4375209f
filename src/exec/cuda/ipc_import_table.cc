// See ipc_import_table.h.
#include "exec/cuda/ipc_import_table.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <thread>

#include "base/error.h"
#include "base/logging.h"
#include "base/scope_exit.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/host_gated_work.h"
#include "exec/executor.h"
#include "exec/cuda/raii.h"

namespace conccl::exec {
namespace {
// Bounds one request to a peer's VMM handle server (it answers from its own thread, in milliseconds).
constexpr auto kVmmImportTimeout = std::chrono::seconds(10);

template <typename Key>
bool contains(const std::vector<Key>& keys, const Key& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}
// Erases one occurrence of `key` (a key may be closed by the foreground and the background thread in turn).
template <typename Key>
void erase(std::vector<Key>& keys, const Key& key) {
  auto it = std::find(keys.begin(), keys.end(), key);
  if (it != keys.end()) keys.erase(it);
}

std::string describeKey(int64_t pid, uint64_t allocId) {
  return "allocation " + std::to_string(allocId & ~kVmmUnitIdBit) + ((allocId & kVmmUnitIdBit) ? " (VMM)" : "") +
         " of pid " + std::to_string(pid);
}
}  // namespace

std::string describePointer(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}
std::string describeStream(cudaStream_t s) { return describePointer(static_cast<void*>(s)); }

PointerInfo queryPointer(const void* ptr) {
  PointerInfo info;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                      CU_POINTER_ATTRIBUTE_IS_MANAGED,  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                      CU_POINTER_ATTRIBUTE_RANGE_SIZE,  CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void* data[] = {&info.memoryType, &info.device, &info.managed, &info.base, &info.size, &info.bufferId};
  // Unlike cuPointerGetAttribute, this does not fail for a pointer CUDA does not know: it leaves the values 0.
  CU_CHECK(driverApi().pointerGetAttributes(static_cast<unsigned int>(std::size(attributes)), attributes, data,
                                            reinterpret_cast<CUdeviceptr>(ptr)));
  return info;
}

IpcImportTable& IpcImportTable::instance() {
  static IpcImportTable* table = new IpcImportTable;  // never destroyed: process exit unmaps everything anyway
  return *table;
}

void* IpcImportTable::acquire(const BufferExport& b, int device, std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mutex_);
  const Key key{b.pid, b.allocId, device};
  const bool vmmUnit = b.kind == BufferExport::kVmm;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++it->second.refs;
      return it->second.base;
    }
    for (auto p = pendingCloses_.begin(); p != pendingCloses_.end(); ++p) {
      if (!(p->key == key)) continue;
      Entry revived{p->base, 1, p->vmm};  // released but not closed yet: keep the mapping
      pendingCloses_.erase(p);
      entries_[key] = revived;
      return revived.base;
    }
    // Being opened by another thread: wait for it, then look again. Being closed: CUDA refuses to open an IPC handle
    // that is still mapped, so wait for that too; a VMM unit may be imported again while its old import is unmapped
    // (each import is its own reservation and handles).
    const bool opening = contains(opening_, key);
    const bool closing = !vmmUnit && contains(closing_, key);
    if (!opening && !closing) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      CONCCL_THROW(concclUnhandledCudaError,
                   "mapping allocation " + std::to_string(b.allocId) + " of pid " + std::to_string(b.pid) + ": " +
                       (opening ? "another thread's mapping of it" : "the close of its earlier mapping here") +
                       " did not finish within " + std::to_string(limit.count()) + " ms");
    }
    HostGatedWork::Hurry hurry;  // the close must not wait for a quiet moment while this caller waits for it
    settled_.wait_until(lock, deadline);
  }
  if (vmmUnit) return acquireVmm(lock, key, b, std::min<std::chrono::milliseconds>(limit, kVmmImportTimeout));
  // Marked as being opened, so that an acquire of the same allocation while this one waits below (with the lock
  // released) waits for it instead of opening the handle a second time.
  opening_.push_back(key);
  ScopeExit opened([&] {
    erase(opening_, key);
    settled_.notify_all();
  });
  cudaIpcMemHandle_t handle;
  static_assert(sizeof(handle) <= sizeof(b.handle));
  std::memcpy(&handle, b.handle, sizeof(handle));
  DeviceGuard guard(device);
  void* base = nullptr;
  cudaError_t err = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
  if (err == cudaErrorAlreadyMapped) {
    // The peer freed an allocation this process still maps, and its new allocation reuses that memory: CUDA refuses
    // to map it twice. The old mapping is either waiting to be closed already (the peer retired it), or still held
    // by a communicator that has not heard of the retirement yet (idle since: its log is read within a housekeeping
    // period); the owner's allocations never overlap while they live, so one that overlaps the new one is gone and
    // its close is queued now. Only then does a call wait for the background closes (those of that peer process on
    // this device: only they can hold its memory).
    (void)cudaGetLastError();
    closeSuperseded(b, device);
    if (closePendingFor(b.pid, device)) {
      HostGatedWork::Hurry hurry;
      if (!settled_.wait_until(lock, deadline, [&] { return !closePendingFor(b.pid, device); })) {
        CONCCL_THROW(concclUnhandledCudaError,
                     "mapping allocation " + std::to_string(b.allocId) + " of pid " + std::to_string(b.pid) +
                         ": CUDA refused it while earlier mappings of that process wait to be closed here, and they " +
                         "were not closed within " + std::to_string(limit.count()) + " ms (closes run only while " +
                         "no GPU work of this process waits for another process)");
      }
      err = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
    }
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    CONCCL_THROW(concclUnhandledCudaError,
                 std::string("cudaIpcOpenMemHandle failed: ") + cudaGetErrorName(err) + " (" +
                     cudaGetErrorString(err) + ") for allocation " + std::to_string(b.allocId) + " of pid " +
                     std::to_string(b.pid) + " (base " + describePointer(reinterpret_cast<void*>(b.base)) + ", " +
                     std::to_string(b.allocBytes) + " B); " + std::to_string(entries_.size()) +
                     " allocations of other processes mapped here");
  }
  entries_[key] = Entry{base, 1, nullptr, b.base, b.allocBytes};
  return base;
}

void IpcImportTable::closeSuperseded(const BufferExport& b, int device) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    const Key& k = it->first;
    const Entry& e = it->second;
    const bool overlaps = e.peerBase < b.base + b.allocBytes && b.base < e.peerBase + e.peerBytes;
    if (k.pid != b.pid || k.device != device || k.allocId == b.allocId || e.vmm || !overlaps) {
      ++it;
      continue;
    }
    // Its holders' later releases find no entry and do nothing; none of them can name it in a call again (its owner
    // freed it, and allocation ids are never reused).
    CONCCL_TRACE(-1, device,
                 describeKey(k.pid, k.allocId) + " is superseded by " + describeKey(b.pid, b.allocId) +
                     " at the same place: its mapping here is closed although " + std::to_string(e.refs) +
                     " communicator(s) of this process have not heard of its retirement yet");
    queueClose(PendingClose{k, e.base, nullptr});
    it = entries_.erase(it);
  }
}

void IpcImportTable::queueClose(PendingClose close) {
  pendingCloses_.push_back(std::move(close));
  if (!closerStarted_) {
    // Detached: the table lives until the process ends (instance()), and so does the thread, idle between closes.
    std::thread([this] { closeLoop(); }).detach();
    closerStarted_ = true;
  }
  closeWork_.notify_one();
}

bool IpcImportTable::closePendingFor(int64_t pid, int device) const {
  auto same = [&](const Key& k) { return k.pid == pid && k.device == device; };
  const bool waiting =
      std::any_of(pendingCloses_.begin(), pendingCloses_.end(), [&](const PendingClose& p) { return same(p.key); });
  return waiting || std::any_of(closing_.begin(), closing_.end(), same);
}

void* IpcImportTable::acquireVmm(std::unique_lock<std::mutex>& lock, const Key& key, const BufferExport& b,
                                 std::chrono::milliseconds limit) {
  // The owner's handle server answers from its own thread, whatever the owner's callers are doing: a round trip to
  // another process (milliseconds; at most `limit`), so not under the table's lock, which every import and
  // close of this process takes. Another acquire of the same unit meanwhile waits for this one (opening_).
  opening_.push_back(key);
  ScopeExit opened([&] {  // with the lock held again, on every way out
    erase(opening_, key);
    settled_.notify_all();
  });
  lock.unlock();
  std::shared_ptr<VmmImport> vmm;
  try {
    vmm = std::make_shared<VmmImport>(importVmmUnit(b.pid, b.allocId, b.allocBytes, key.device, limit));
  } catch (...) {
    lock.lock();
    throw;
  }
  lock.lock();
  void* base = reinterpret_cast<void*>(vmm->base);
  entries_[key] = Entry{base, 1, std::move(vmm)};
  return base;
}

size_t IpcImportTable::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size() + pendingCloses_.size() + closing_.size();
}

size_t IpcImportTable::vmmCount() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const auto& [key, entry] : entries_) n += entry.vmm ? 1 : 0;
  return n;
}

namespace {
// How long a close waits for a moment without pending deferred-call gates before it gives up and leaves the mapping
// in place (a leak of address space, not of correctness).
constexpr auto kUngatedWait = std::chrono::seconds(300);

void closeMapping(void* base, const std::shared_ptr<VmmImport>& vmm, int device, const std::string& what,
                  HostGatedWork::Quiet quiet) {
  // cudaIpcCloseMemHandle waits for the device holding a driver lock (cuMemUnmap may too; nothing documents either
  // way): never while a deferred call's gate is pending in this process (host_gated_work.h). Neither is relied on to
  // order the unmap after GPU work: an owner retires an allocation once it freed it, after its own calls on it
  // completed, and those wait for every peer copy that touches its buffers. A background close also waits for
  // `quiet`: a launch that comes while it runs waits for it.
  cudaError_t err = cudaSuccess;
  const auto t0 = std::chrono::steady_clock::now();
  auto unmapStart = t0;
  const bool ran = HostGatedWork::instance().runUngated(
      [&] {
        unmapStart = std::chrono::steady_clock::now();
        DeviceGuard guard(device);
        if (vmm) {
          unmapVmmImport(*vmm);
        } else {
          err = cudaIpcCloseMemHandle(base);
        }
      },
      std::chrono::duration_cast<std::chrono::milliseconds>(kUngatedWait), quiet);
  if (!ran) {
    CONCCL_WARN(-1, device, "an IPC mapping of a peer's buffer was left open: deferred calls were pending for " +
                                std::to_string(kUngatedWait.count()) + " s");
    return;
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    CONCCL_WARN(-1, device, std::string("cudaIpcCloseMemHandle failed: ") + cudaGetErrorString(err));
    return;
  }
  // Where memory a peer freed goes back (or why it does not yet): the wait is for a moment without conccl GPU work
  // of this process that waits for a peer (and, in the background, without launches for a while); the unmap's own
  // time is what a launch meanwhile waits.
  using std::chrono::duration_cast;
  CONCCL_TRACE(-1, device,
               "unmapped " + what + " in " +
                   std::to_string(duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                            unmapStart)
                                      .count()) +
                   " us (waited " + std::to_string(duration_cast<std::chrono::milliseconds>(unmapStart - t0).count()) +
                   " ms for a moment without GPU work waiting for a peer" +
                   (quiet.interval.count() > 0 ? " and a quiet interval" : "") + ")");
}

}  // namespace

void IpcImportTable::release(int64_t pid, uint64_t allocId, int device, bool inBackground) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = entries_.find(Key{pid, allocId, device});
  if (it == entries_.end()) return;
  if (--it->second.refs > 0) {
    // Mapped for another communicator of this process too: it stays until that one's owner retires it as well.
    CONCCL_TRACE(-1, device,
                 describeKey(pid, allocId) + " stays mapped: " + std::to_string(it->second.refs) +
                     " other communicator(s) of this process map it");
    return;
  }
  void* base = it->second.base;
  std::shared_ptr<VmmImport> vmm = std::move(it->second.vmm);
  const Key key = it->first;
  entries_.erase(it);
  if (!inBackground) {
    // Marked as being closed, so that an acquire of the same allocation meanwhile waits instead of opening it again;
    // unmarked on every way out (closeMapping can throw: a failing cudaSetDevice, say).
    closing_.push_back(key);
    ScopeExit closed([&] {
      lock.lock();
      erase(closing_, key);
      settled_.notify_all();
    });
    lock.unlock();
    closeMapping(base, vmm, device, describeKey(pid, allocId), HostGatedWork::Quiet{});  // the caller waits for it
    return;
  }
  queueClose(PendingClose{key, base, std::move(vmm)});
}

void IpcImportTable::closeLoop() {
  // Relaxed: this thread's calls belong to no capture, and in the default mode CUDA would refuse them during another
  // thread's global-mode capture (and invalidate it); an unmapping from a relaxed thread leaves the capture valid
  // (test_gpu_capture_ipc). It never waits for the device (cudaDeviceSynchronize) before it unmaps: such a wait
  // invalidates any global capture another thread has begun meanwhile, whatever this thread's mode, and no check
  // can rule that out (a caller begins its capture unseen by conccl). The unmap's own wait for the device is short:
  // closeMapping runs it only while none of conccl's GPU work that waits for a peer is pending.
  relaxCaptureModeOfThisThread();
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    closeWork_.wait(lock, [this] { return !pendingCloses_.empty(); });
    std::vector<PendingClose> batch;
    batch.swap(pendingCloses_);
    for (const PendingClose& p : batch) closing_.push_back(p.key);
    const HostGatedWork::Quiet quiet = closeQuiet_;
    // Each key is unmarked as soon as its own close ran, so that an acquire waiting for it does not wait for the
    // rest of the batch (each close may wait for a moment without GPU work that waits for a peer).
    for (const PendingClose& p : batch) {
      lock.unlock();
      try {
        closeMapping(p.base, p.vmm, p.key.device, describeKey(p.key.pid, p.key.allocId), quiet);
      } catch (const std::exception& e) {
        CONCCL_WARN(-1, p.key.device, std::string("closing a peer's mapping failed: ") + e.what());
      }
      lock.lock();
      erase(closing_, p.key);
      settled_.notify_all();
    }
  }
}

bool IpcImportTable::waitForBackgroundCloses(std::chrono::milliseconds limit) {
  HostGatedWork::Hurry hurry;
  std::unique_lock<std::mutex> lock(mutex_);
  return settled_.wait_for(lock, limit, [this] { return pendingCloses_.empty() && closing_.empty(); });
}

void IpcImportTable::setCloseQuiet(HostGatedWork::Quiet quiet) {
  std::lock_guard<std::mutex> lock(mutex_);
  closeQuiet_ = quiet;
}

}  // namespace conccl::exec
