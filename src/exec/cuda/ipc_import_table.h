// Process-wide table of the peer allocations this process has mapped (cudaIpcOpenMemHandle, or a peer's VMM unit
// through its handle server: vmm_export.h), and what the driver says about a pointer (one cuPointerGetAttributes
// call): the CUDA executor's view of buffers.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec/cuda/host_gated_work.h"
#include "exec/cuda/vmm_export.h"
#include "exec/executor.h"

namespace conccl::exec {

std::string describePointer(const void* p);
std::string describeStream(cudaStream_t s);

// What the driver knows about a pointer, from one cuPointerGetAttributes call.
struct PointerInfo {
  unsigned int memoryType = 0;  // CUmemorytype; 0: not a CUDA pointer (plain host memory)
  int device = -1;
  unsigned int managed = 0;
  CUdeviceptr base = 0;  // allocation range (0 when the driver does not know it, e.g. some pool allocators)
  size_t size = 0;
  unsigned long long bufferId = 0;  // unique per allocation for the life of the process
  bool graphMemory = false;  // a graph's memory allocated inside a capture (graph_memory.h), not the driver's query
};

PointerInfo queryPointer(const void* ptr);

// Shared by every communicator of the process because CUDA refuses to open one handle twice in a process;
// reference counted.
class IpcImportTable {
 public:
  static IpcImportTable& instance();
  // Maps (or finds) the allocation `b` of another process on `device`; returns its base here. Waits at most `limit`
  // for another thread's mapping of it, or for the close of an earlier mapping CUDA will not map twice; then throws
  // Error(concclUnhandledCudaError). An earlier allocation of the same owner whose place `b` now takes is closed
  // first, even while communicators still hold it: its owner freed it (they learn of it later, and their releases of
  // it then do nothing).
  void* acquire(const BufferExport& b, int device, std::chrono::milliseconds limit);
  // Mappings held, including those whose close is still pending in the background.
  size_t size();
  // Of those, peers' VMM units (mapped now, not waiting to be closed).
  size_t vmmCount();
  // Drops one reference; the last one unmaps the allocation. cudaIpcCloseMemHandle waits for the whole device, so
  // a close during a call (a peer retired the allocation) runs on a background thread (`inBackground`): the calling
  // thread must not wait for GPU work it enqueued itself, or that a producer the caller releases only after the call
  // returns has yet to finish (a hidden host sync; with such a producer, a deadlock). acquire() waits for the
  // background closes (of that peer process, at most its limit) only when CUDA refuses to map a peer's new
  // allocation because it reuses memory whose mapping is still waiting to be closed.
  void release(int64_t pid, uint64_t allocId, int device, bool inBackground);
  // Waits, at most `limit`, until every background close has run; false on timeout.
  bool waitForBackgroundCloses(std::chrono::milliseconds limit);
  // The quiet moment a background close waits for before it unmaps (host_gated_work.h; CONCCL_UNMAP_QUIET_US and
  // CONCCL_UNMAP_QUIET_MAX_MS, set by every communicator as it is made: the process's last setting holds). Closes
  // that a thread waits for do not wait for it.
  void setCloseQuiet(HostGatedWork::Quiet quiet);

 private:
  struct Key {
    int64_t pid;
    uint64_t allocId;
    int device;
    auto operator<=>(const Key&) const = default;
  };
  struct Entry {
    void* base;
    int refs;
    std::shared_ptr<VmmImport> vmm;  // a peer's VMM unit (BufferExport::kVmm); null: a CUDA IPC mapping
    uint64_t peerBase = 0;           // a CUDA IPC mapping's range in its owner's address space (closeSuperseded)
    uint64_t peerBytes = 0;
  };
  struct PendingClose {
    Key key;
    void* base;
    std::shared_ptr<VmmImport> vmm;
  };
  void closeLoop();
  // Queues the close of every CUDA IPC mapping of `b`'s owner on `device` whose memory `b` now occupies in the owner's
  // address space (lock held): the owner freed those, though communicators here may not have heard of it yet.
  void closeSuperseded(const BufferExport& b, int device);
  // Hands a close to the background thread, started at the first (lock held).
  void queueClose(PendingClose close);
  // A close of a mapping of process `pid` on `device` is waiting or running (lock held).
  bool closePendingFor(int64_t pid, int device) const;
  // Imports a peer's VMM unit with the lock released (acquire's tail for BufferExport::kVmm).
  void* acquireVmm(std::unique_lock<std::mutex>& lock, const Key& key, const BufferExport& b,
                   std::chrono::milliseconds limit);
  std::mutex mutex_;
  std::map<Key, Entry> entries_;
  // Mappings released in the background: waiting for the thread, and being closed (by it or by a foreground release).
  // An allocation can be wanted again meanwhile (a window deregistered while its memory lives on): acquire() revives
  // a waiting one, and waits for one being closed (CUDA refuses to open an IPC handle that is still mapped; a VMM unit
  // is imported again instead).
  std::vector<PendingClose> pendingCloses_;
  std::vector<Key> closing_;
  // Allocations being mapped: VMM units imported without the lock (acquireVmm), and IPC handles whose open waits for
  // closes (the lock released): a second acquire of one waits for the first.
  std::vector<Key> opening_;
  bool closerStarted_ = false;
  HostGatedWork::Quiet closeQuiet_;
  // closeWork_: closes to run; settled_: a close or an import finished (waiters look again).
  std::condition_variable closeWork_, settled_;
};

}  // namespace conccl::exec
