// The CUDA executor's class, shared by its three files (private to src/exec/cuda):
//   cuda_executor.cc          setup and teardown: devices, peer access, flags, lanes; drain, cancel, release
//   cuda_executor_launch.cc   the enqueue path of a call: prepareCall (stream claims, cached graphs) and launch
//   cuda_executor_buffers.cc  the caller's buffers: checks, and across processes their export / import (CUDA IPC)
//                             and the bounce regions of calls on pool memory
// Everything else reaches it through exec/executor.h (makeCudaExecutor, makeCudaProcessExecutor).
#pragma once

#include <conccl/conccl.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "base/config.h"
#include "exec/cuda/copy_engine_program.h"
#include "exec/cuda/deferred_launch.h"
#include "exec/cuda/ipc_import_table.h"
#include "exec/cuda/pool_bounce.h"
#include "exec/cuda/queue_claim.h"
#include "exec/cuda/rank_state.h"
#include "exec/cuda/raii.h"
#include "exec/cuda/vmm_export.h"
#include "exec/executor.h"
#include "exec/retire_after_peers.h"
#include "sched/schedule.h"

namespace conccl::exec {

// The executor's build options for `config` (also what cudaFlagSlots sizes the flags by).
sched::BuildOptions cudaBuildOptions(const Config& config);

class CudaExecutor final : public Executor {
 public:
  CudaExecutor(const std::vector<int>& devices, const Config& config);
  CudaExecutor(const ProcessTopology& topology, const Config& config);
  ~CudaExecutor() override;

  sched::BuildOptions buildOptions() const override { return options_; }
  uint64_t checkBuffer(int rank, const void* ptr, size_t bytes, const char* what, cudaStream_t stream) const override;
  uint64_t checkBufferIn(int rank, const void* ptr, size_t bytes, const char* what, cudaStream_t stream,
                         CheckedRange* range) const override;
  void launch(const sched::Schedule& schedule, const CallBinding& binding, int rank) override;
  void prepareCall(const sched::Schedule& schedule, const CallBinding& binding, const std::vector<int>& ranks) override;
  bool gpuProgress(int rank, uint32_t* launched, uint32_t* completed) override;
  void synchronize(int rank) override;
  void cancel() override;
  void releaseRank(int rank) override;
  concclCallResources_t callResources(const sched::Schedule& schedule, int rank) const override;

  BufferExport exportBuffer(int rank, const void* ptr, size_t bytes, const char* what) override;
  void retireExport(int rank, const void* ptr) override;
  std::vector<uint64_t> takeRetiredExports(int rank, uint64_t carryingSeq) override;
  void requeueRetiredExports(int rank, const std::vector<uint64_t>& ids) override;
  size_t logRetiredExports(int rank, const RetireLogAppend& append) override;
  void releaseRetiredExports(int rank, uint64_t peersConsumed, uint64_t peersLogRead) override;
  void sweepFreedExports(int rank) override;
  void* importBuffer(int owner, const BufferExport& buffer) override;
  void closeImport(int owner, uint64_t allocId) override;
  std::optional<BufferExport> exportIfShareable(int rank, const void* ptr, size_t bytes, const char* what,
                                                cudaStream_t stream) override;
  bool isPoolMemory(int rank, const void* ptr) const override;
  std::optional<std::array<void*, 2>> enterPoolBounce(int rank, cudaStream_t stream, const PoolBouncePlan& plan,
                                                      std::string* whyNot) override;
  void leavePoolBounce(int rank, bool copyOut) override;

  std::optional<DeferredCall> deferCall(int rank, cudaStream_t caller, std::string* whyNot) override;
  void beginDeferred(int rank, const DeferredCall& call) override;
  void endDeferred(int rank, const DeferredCall& call) override;
  bool drainDeferred(int rank, std::chrono::milliseconds limit) override;

 private:
  void initOptions(int nranks);
  // checkBuffer's checks (the caller makes the rank's device current); returns what the driver said of `ptr` (or,
  // for a graph's memory of the capture on `stream`, what its allocation node says: graph_memory.h).
  PointerInfo checkedPointer(int rank, const void* ptr, size_t bytes, const char* what, cudaStream_t stream) const;
  // Throws concclTimeout if a small-message kernel of the rank gave up waiting (small_program_kernel.h).
  void checkSmallKernelError(const RankState& s) const;
  // launch()'s parts: concclInvalidUsage when two local ranks share the caller's stream; whether every rank of the
  // call runs the small-message kernel; that path's launch.
  void refuseSharedStream(const sched::Schedule& schedule, const CallBinding& binding, int rank) const;
  bool takesSmallPath(const sched::Schedule& schedule, int rank) const;
  // Whether rank `rank`'s copy-engine program of an eager call may run as a cached graph (graph_cache.h).
  bool graphCacheable(const sched::Schedule& schedule, int rank) const;
  // An eager call on another stream than the rank's previous eager call waits on the GPU for that call to end; a
  // captured call on another stream of the same capture depends on the nodes that call ended with (call_order.cc).
  void orderAfterPreviousCall(RankState& s, cudaStream_t main);
  void orderAfterPreviousCapturedCall(RankState& s, cudaStream_t main);
  void rememberCapturedCallEnd(RankState& s, cudaStream_t main);
  // The bounce regions when `binding` is this process's rank's call on them with its copies in still to enqueue on
  // `stream` (CallBinding::poolBounce); null otherwise.
  PoolBounceRegions* pendingPoolBounce(const CallBinding& binding, int rank, cudaStream_t stream) const;
  // launch()'s second half: rank `rank`'s program on `main` (small-message kernel, cached graph or op by op).
  void enqueueProgram(RankState& s, const sched::Schedule& schedule, const CallBinding& binding, int rank,
                      cudaStream_t main, const std::vector<cudaEvent_t>* chunks, bool eager);
  // How rank `rank`'s copy-engine program is enqueued on `main` (the same for an eager enqueue and a graph capture).
  CopyEngineSetup copyEngineSetup(const sched::Schedule& schedule, int rank, cudaStream_t main, bool eager) const;
  // prepareCall's parts: the first use of new caller streams (queue_claim.h); the graphs of repeated calls.
  void claimNewStreams(const CallBinding& binding, const std::vector<int>& ranks);
  void prepareGraphs(const sched::Schedule& schedule, const CallBinding& binding, const std::vector<int>& ranks);
  void launchSmall(RankState& s, const sched::RankProgram& program, const LocationResolver& resolve,
                   cudaStream_t main, bool eager);
  void enablePeerAccess(const std::vector<int>& unique);
  void initRank(RankState& state);
  void closeAllImports();
  // closeImport's work; `inBackground`: see IpcImportTable::release.
  void unmapImport(int owner, uint64_t allocId, bool inBackground);
  // Blocks until the rank's last launch finished, or the deadline; while aborted it keeps re-opening every
  // flag so that queued Waits drain. Returns false on timeout.
  // With reportKernelTimeout, a small-message kernel that gave up waiting is reported (concclTimeout) even though
  // its stream finished.
  bool drain(RankState& state, std::chrono::milliseconds limit, bool reportKernelTimeout);
  void writeAllFlagsLocked();
  void refuseSharedHardwareQueues() const;

  Config config_;
  sched::BuildOptions options_;
  std::vector<int> devices_;
  int slots_ = 0;
  std::vector<std::unique_ptr<RankState>> ranks_;
  std::vector<uint32_t*> flagTable_;     // [rank] -> flags (host address), fixed at init
  std::vector<CUdeviceptr> devFlagTable_;  // [rank] -> the same flags as the GPUs address them
  std::atomic<bool> aborted_{false};
  std::mutex lifetimeMutex_;  // cancel() vs releaseRank(): flags stay allocated while cancel writes them

  // Small-message path: programs copying at most smallBytes_ run as one kernel; 0 = off (see the constructors).
  size_t smallBytes_ = 0;
  // Launch priority of conccl's kernels per rank (config.highPriority: the device's greatest, else 0 = the stream's).
  std::vector<int> kernelPriority_;
  PinnedBuffer abortWord_;  // set by cancel(): small-message kernels stop waiting
  const uint32_t* abortWordDevice_ = nullptr;

  // Some local ranks share a device (graphCacheable: their lane programs are not cached).
  bool sharedDevices_ = false;
  // First use of every stream, one at a time (queue_claim.h; null when Config::queueClaim is false). Local cliques only.
  std::unique_ptr<QueueClaimer> claimer_;
  std::atomic<bool> leakedRank_{false};  // a rank could not drain: nothing may be freed with a device-synchronising call
  // Peer mappings closed and allocations newly exported or retired so far (several processes): an address in a
  // cached graph's shape may name other memory after either, so every rank's graph cache starts over when it moves.
  std::atomic<uint64_t> mappingGeneration_{0};

  // Whether a rank's GPU work has not completed (HostGatedWork's busy probe, registered by watchForIpcCloses at the end
  // of each constructor): an IPC close must not run meanwhile (host_gated_work.h).
  void watchForIpcCloses();
  bool busy() const;
  uint64_t busyProbe_ = 0;

  // Several processes only.
  bool processMode_ = false;
  int localRank_ = -1;
  std::vector<int64_t> pids_;
  void* registeredFlags_ = nullptr;  // the shared flags region, registered with cudaHostRegister
  std::mutex exportMutex_;
  std::map<uint64_t, BufferExport> exports_;        // by allocation id
  std::map<CUdeviceptr, uint64_t> exportedAt_;      // allocation base -> id of the allocation last exported there
  std::vector<uint64_t> retiredExports_;            // ids the peers may unmap (handed out once)
  // Of those, allocations deregistered while their memory lived (id -> base): logged only once found freed too.
  std::map<uint64_t, CUdeviceptr> deregistered_;
  // VMM buffers exported (Config::exportVmm, asked by every process and checked at init: probeVmmExport), by unit
  // id, with the pieces they retain (vmm_export.h).
  bool exportVmm_ = false;
  std::map<uint64_t, VmmUnit> vmmUnits_;
  static constexpr size_t kMaxVmmUnits = 256;
  uint64_t vmmClock_ = 0;  // VmmUnit::lastUse
  // vmmClock_ at the last takeRetiredExports: a unit used since is used by the call being prepared, which a sweep must
  // not retire (its peers would drop their mapping on reading the entry, then map it again for the call itself).
  uint64_t vmmClockAtLastEntry_ = 0;
  bool usedByCallBeingPrepared(const VmmUnit& u) const { return u.lastUse > vmmClockAtLastEntry_; }
  // Retired units still served to the peers until none can map them (exec/retire_after_peers.h), by id.
  std::map<uint64_t, VmmUnit> retiringVmm_;
  RetireAfterPeers retiringGate_;
  std::atomic<bool> anyRetiring_{false};  // releaseRetiredExports is a load when nothing waits
  void releaseRetiringUnitsLocked(const std::vector<uint64_t>& ids);
  // The background sweep's place among the units (sweepFreedExports), and its work per pass.
  uint64_t sweepCursor_ = 0;
  static constexpr size_t kSweepPiecesPerPass = 256;
  const VmmUnit* cachedVmmUnitLocked(const void* ptr, size_t bytes);
  std::optional<BufferExport> exportVmmLocked(const void* ptr, size_t bytes);  // a new unit (nullopt: staged)
  static BufferExport vmmExportOf(const VmmUnit& unit, const void* ptr);
  void retireVmmUnitLocked(std::map<uint64_t, VmmUnit>::iterator it);
  // An allocation export ends: its memory was freed (`freed`), or it was deregistered while it lives (deregistered_).
  void retireAllocationLocked(std::map<uint64_t, BufferExport>::iterator cached, bool freed = true);
  void retireStaleExportsLocked();
  bool peersAllowed_ = false;  // this executor's peers are allowed to ask the VMM handle server
  std::vector<int64_t> otherProcesses() const;  // the peers' pids, without this process's
  void releaseVmmExports();                     // at destroy
  std::mutex importMutex_;
  std::map<std::pair<int, uint64_t>, void*> imports_;  // (owner rank, allocation id) -> base in this process
  // The local rank's deferred launches (made at init; released with the rank, after they drained).
  std::unique_ptr<DeferredLaunches> deferred_;
  // The local rank's bounce regions for calls on pool memory (pool_bounce.h), made at the first such call; freed at
  // destroy after the rank drained and the VMM exports were withdrawn.
  std::mutex poolBounceMutex_;
  std::unique_ptr<PoolBounceRegions> poolBounce_;
};

}  // namespace conccl::exec
