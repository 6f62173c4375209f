// The CUDA executor: runs each rank's schedule program on copy-engine streams, ordering ranks with flags in
// pinned host memory (stream memory operations, no SM spins) and reducing with a small kernel. See
// docs/cuda-executor.md for the design; the execution model it implements is in src/sched/schedule.h.
//
// Per rank: its device; the caller's stream M (per call); `lanes` internal copy lanes; `slots` uint32 flags
// in pinned, mapped host memory; scratch; ordering events.
//
// launch() only enqueues; it never waits for the GPU, allocates nothing on the hot path (events are reused:
// cudaStreamWaitEvent captures the event's state when it is called, so re-recording right after is safe),
// and everything it enqueues is capturable in a CUDA graph (cuda_executor_launch.cc).
//
// This file: the executor's setup (options, devices and peer access, per-rank lanes, flags and scratch, both for
// one process and for one process per GPU) and its teardown (drain, cancel, release). cuda_executor.h lists the others.
#include "exec/cuda/cuda_executor.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "base/logging.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/graph_cache.h"
#include "exec/cuda/host_gated_work.h"
#include "exec/cuda/ipc_import_table.h"
#include "exec/cuda/queue_claim.h"
#include "exec/cuda/rank_state.h"
#include "exec/cuda/raii.h"
#include "exec/cuda/reduce_kernel.h"
#include "exec/cuda/small_program_kernel.h"
#include "exec/executor.h"
#include "exec/queue_budget.h"
#include "sched/schedule.h"

namespace conccl::exec {

sched::BuildOptions cudaBuildOptions(const Config& config) {
  sched::BuildOptions options;
  options.scratchBudget = config.scratchBytes;
  options.lanes = config.lanes;
  options.pipelineDepth = config.pipelineDepth;
  options.minChunkBytes = config.minChunkBytes;
  return options;
}

void CudaExecutor::initOptions(int n) {
  CONCCL_REQUIRE(n >= 1, "the CUDA executor needs at least one rank");
  CONCCL_REQUIRE(config_.lanes >= 1, "lanes = " + std::to_string(config_.lanes) + " must be at least 1");
  CONCCL_REQUIRE(config_.reduceCtas >= 0,
                 "reduceCtas = " + std::to_string(config_.reduceCtas) + " must be 0 (auto) or at least 1");
  CONCCL_REQUIRE(config_.smBudget >= 1 && config_.smBudget >= config_.reduceCtas,
                 "smBudget = " + std::to_string(config_.smBudget) + " must be at least 1 and reduceCtas");
  kernelPriority_.assign(static_cast<size_t>(n), 0);
  options_ = cudaBuildOptions(config_);
  slots_ = sched::maxSlots(n, options_);
  CONCCL_ASSERT(slots_ >= 0);
  driverApi();  // fail now, not in the middle of a launch, if the driver lacks stream memory operations
  abortWord_ = PinnedBuffer::allocate(sizeof(uint32_t));
  std::memset(abortWord_.get(), 0, sizeof(uint32_t));
  void* device = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&device, abortWord_.get(), 0));
  abortWordDevice_ = static_cast<const uint32_t*>(device);
}

CudaExecutor::CudaExecutor(const std::vector<int>& devices, const Config& config) : config_(config), devices_(devices) {
  initOptions(static_cast<int>(devices.size()));
  const int n = static_cast<int>(devices.size());
  refuseSharedHardwareQueues();
  sharedDevices_ = std::set<int>(devices.begin(), devices.end()).size() < devices.size();
  // Peer access between every pair of distinct devices that supports it. Copies between devices without it
  // still work (the runtime stages them), only slower.
  std::vector<int> unique;
  for (int d : devices) {
    bool seen = false;
    for (int u : unique) seen = seen || u == d;
    if (!seen) unique.push_back(d);
  }
  enablePeerAccess(unique);
  // The small-message kernel and reductions reading the peers' inputs dereference peer pointers: every pair of
  // devices needs peer access.
  bool allPeers = true;
  for (int a : unique) {
    for (int b : unique) {
      int can = 1;
      if (a != b) CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      allPeers = allPeers && can;
    }
  }
  smallBytes_ = config.engine == concclEngineCopy || !allPeers ? 0 : config.smallMessageBytes;
  options_.peerReads = allPeers && config.peerReduce;
  // engine = copy: a rank's own block through a peer. Ranks sharing a GPU gain nothing by it (both hops are
  // same-device copies) but get the same schedule, which lets one GPU test it.
  options_.ownBlockViaPeer = config.engine == concclEngineCopy && allPeers && devices.size() >= 2;

  for (int d : unique) {
    DeviceGuard guard(d);
    // Never let a launch load a module: see preloadReduceKernels (a lazy load can hang a one-thread group).
    preloadReduceKernels();
    if (smallBytes_ > 0) preloadSmallProgramKernels();
  }
  for (int r = 0; r < n; ++r) {
    auto state = std::make_unique<RankState>();
    state->rank = r;
    state->device = devices[r];
    state->flags = PinnedBuffer::allocate(sizeof(uint32_t) * static_cast<size_t>(slots_ > 0 ? slots_ : 1));
    // Zeroed by the CPU before any peer exists that could signal into them: no GPU work, no synchronisation.
    std::memset(state->flags.get(), 0, state->flags.bytes());
    initRank(*state);
    ranks_.push_back(std::move(state));
  }
  for (auto& s : ranks_) {
    flagTable_.push_back(s->flags.as<uint32_t>());
    void* dev = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&dev, s->flags.get(), 0));
    devFlagTable_.push_back(reinterpret_cast<CUdeviceptr>(dev));
  }
  if (config.queueClaim) {
    claimer_ = std::make_unique<QueueClaimer>(unique);
    std::vector<QueueClaimer::Target> lanes;
    for (auto& s : ranks_) {
      for (auto& l : s->lanes) lanes.push_back({l.get(), s->device});
    }
    claimer_->claim(lanes);
  }
  watchForIpcCloses();
}

bool CudaExecutor::gpuProgress(int rank, uint32_t* launched, uint32_t* completed) {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return false;
  RankState& s = *ranks_[static_cast<size_t>(rank)];
  std::unique_lock<std::mutex> lock(s.mutex, std::try_to_lock);
  if (!lock.owns_lock() || !s.local || s.released) return false;
  *launched = s.launches;
  *completed = *static_cast<const volatile uint32_t*>(s.doneCounter.as<uint32_t>());
  return true;
}

CudaExecutor::CudaExecutor(const ProcessTopology& topo, const Config& config)
    : config_(config), devices_(topo.devices), processMode_(true), localRank_(topo.localRank), pids_(topo.pids) {
  const int n = static_cast<int>(topo.devices.size());
  initOptions(n);
  CONCCL_ASSERT(topo.localRank >= 0 && topo.localRank < n && static_cast<int>(topo.pids.size()) == n);
  CONCCL_ASSERT(topo.flagStrideBytes >= sizeof(uint32_t) * static_cast<size_t>(slots_));
  CONCCL_ASSERT(topo.sharedFlagsBytes >= topo.flagStrideBytes * static_cast<size_t>(n) && topo.allGather);
  const int device = topo.devices[topo.localRank];
  // Small-message kernels poll flags: never across processes that share a GPU (their contexts time-slice, a
  // polling kernel would hold the GPU while its peer cannot run), and only with peer access to every GPU.
  // Reductions reading the peers' inputs need peer access to every other GPU (a peer process's buffer on this GPU
  // is an IPC mapping any kernel may read).
  smallBytes_ = config.engine == concclEngineCopy ? 0 : config.smallMessageBytes;
  bool allPeers = true;
  for (int r = 0; r < n; ++r) {
    if (r == topo.localRank) continue;
    int can = 1;
    if (topo.devices[r] != device) CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, topo.devices[r]));
    allPeers = allPeers && can;
    if (!can || (topo.devices[r] == device && topo.pids[r] != topo.pids[topo.localRank])) smallBytes_ = 0;
  }
  {
    DeviceGuard guard(device);
    preloadReduceKernels();
    if (smallBytes_ > 0) preloadSmallProgramKernels();
    // The flags of every rank live in one shared-memory region (created and zeroed by the process clique);
    // registering it makes it addressable by this process's GPU, like the pinned flags of a local clique.
    CUDA_CHECK(cudaHostRegister(topo.sharedFlags, topo.sharedFlagsBytes,
                                cudaHostRegisterMapped | cudaHostRegisterPortable));
    registeredFlags_ = topo.sharedFlags;
  }
  for (int r = 0; r < n; ++r) {
    auto state = std::make_unique<RankState>();
    state->rank = r;
    state->device = topo.devices[r];
    state->local = r == topo.localRank;
    if (state->local) initRank(*state);
    auto* hostFlags = reinterpret_cast<uint32_t*>(static_cast<char*>(topo.sharedFlags) +
                                                  topo.flagStrideBytes * static_cast<size_t>(r));
    flagTable_.push_back(hostFlags);
    void* dev = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&dev, hostFlags, 0));
    devFlagTable_.push_back(reinterpret_cast<CUdeviceptr>(dev));
    ranks_.push_back(std::move(state));
  }
  // The peer processes may ask this process's VMM handle server for the buffers it exports (vmm_export.h). Until
  // the constructor completes, a throw takes the allowance back (no destructor runs for a half-built executor).
  struct AllowedUntilBuilt {
    std::vector<int64_t> pids;
    bool built = false;
    ~AllowedUntilBuilt() {
      if (!built) VmmHandleServer::instance().disallowPeers(pids);
    }
  } allowance{otherProcesses()};
  VmmHandleServer::instance().allowPeers(allowance.pids);
  // Scratch: every rank exports its own, every process maps the others' (once, for the communicator's life).
  RankState& self = *ranks_[static_cast<size_t>(localRank_)];
  {
    std::vector<cudaStream_t> lanes;
    for (auto& l : self.lanes) lanes.push_back(l.get());
    deferred_ = std::make_unique<DeferredLaunches>(self.device, std::move(lanes));
  }
  // The same exchange settles the small-message threshold: every process must choose the same path for a call
  // (see launch), so all use the smallest one (0 when any process cannot use the kernel).
  // So does the reduction shape: schedules are built in every process and must agree, so peer reads are used only
  // when every process can use them.
  // So does the VMM export (every process must ask for it: its init probe below takes two all-gathers).
  std::string mine(sizeof(BufferExport) + 4 * sizeof(uint64_t), '\0');
  if (self.scratch) {
    BufferExport e = exportBuffer(localRank_, self.scratch.get(), self.scratch.bytes(), "scratch");
    std::memcpy(mine.data(), &e, sizeof(e));
  }
  // engine = copy routes own blocks through peers (every process must agree, as on the other choices).
  const uint64_t localChoice[4] = {smallBytes_, allPeers && config.peerReduce ? 1u : 0u,
                                   config.engine == concclEngineCopy && allPeers && n >= 2 ? 1u : 0u,
                                   config.exportVmm ? 1u : 0u};
  std::memcpy(mine.data() + sizeof(BufferExport), localChoice, sizeof(localChoice));
  std::vector<std::string> all = topo.allGather(mine);
  CONCCL_ASSERT(static_cast<int>(all.size()) == n);
  options_.peerReads = true;
  options_.ownBlockViaPeer = true;
  bool everyExportsVmm = true;
  for (int r = 0; r < n; ++r) {
    CONCCL_ASSERT(all[static_cast<size_t>(r)].size() == mine.size());
    uint64_t choice[4] = {0, 0, 0, 0};
    std::memcpy(choice, all[static_cast<size_t>(r)].data() + sizeof(BufferExport), sizeof(choice));
    smallBytes_ = std::min<size_t>(smallBytes_, choice[0]);
    options_.peerReads = options_.peerReads && choice[1] != 0;
    options_.ownBlockViaPeer = options_.ownBlockViaPeer && choice[2] != 0;
    everyExportsVmm = everyExportsVmm && choice[3] != 0;
    if (r == localRank_) continue;
    BufferExport e;
    std::memcpy(&e, all[static_cast<size_t>(r)].data(), sizeof(e));
    if (e.allocId != 0) ranks_[static_cast<size_t>(r)]->scratchAddress = importBuffer(r, e);
  }
  if (everyExportsVmm) {
    // Checked once here, on every process together, so that memory a peer cannot map is staged from the first call
    // instead of failing it.
    std::string why;
    exportVmm_ = probeVmmExport(localRank_, pids_, device, topo.allGather, &why);
    if (!exportVmm_) {
      CONCCL_WARN(localRank_, device, "CONCCL_VMM_EXPORT=1, but VMM memory cannot be shared between this "
                                      "communicator's processes, so calls on it are staged: " + why);
    }
  }
  watchForIpcCloses();
  allowance.built = peersAllowed_ = true;  // the destructor disallows them from now on
}

void CudaExecutor::watchForIpcCloses() {
  busyProbe_ = HostGatedWork::instance().addBusyProbe([this] { return busy(); });
  IpcImportTable::instance().setCloseQuiet(
      HostGatedWork::Quiet{std::chrono::microseconds(config_.unmapQuietUs),
                           std::chrono::milliseconds(config_.unmapQuietMaxMs)});
}

bool CudaExecutor::busy() const {
  // Called by HostGatedWork under its lock: atomics and the pinned done words only (no rank mutex). The probe is
  // removed before any rank's done word is freed (releaseRank).
  for (const auto& sp : ranks_) {
    if (sp->local && !sp->launchesDone()) return true;
  }
  return false;
}

void CudaExecutor::enablePeerAccess(const std::vector<int>& unique) {
  for (int a : unique) {
    DeviceGuard guard(a);
    for (int b : unique) {
      if (a == b) continue;
      int can = 0;
      CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) {
        CONCCL_WARN(-1, a,
                    "device " + std::to_string(a) + " cannot access device " + std::to_string(b) +
                        " directly: copies between them are staged through the host");
        continue;
      }
      cudaError_t err = cudaDeviceEnablePeerAccess(b, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();  // the runtime records it as the thread's last error: clear it
      } else {
        CUDA_CHECK(err);
      }
    }
  }
}

void CudaExecutor::initRank(RankState& s) {
  DeviceGuard guard(s.device);
  if (config_.highPriority) {
    // Numerically lowest = greatest; a device without priorities reports 0 and the launches carry no attribute.
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    kernelPriority_[static_cast<size_t>(s.rank)] = greatest;
  }
  for (int l = 0; l < config_.lanes; ++l) {
    s.lanes.push_back(Stream::createNonBlocking());
    s.joinEvents.push_back(Event::createForOrdering());
  }
  s.forkEvent = Event::createForOrdering();
  s.smallKernelError = PinnedBuffer::allocate(sizeof(uint32_t));
  std::memset(s.smallKernelError.get(), 0, sizeof(uint32_t));
  void* errorDevice = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&errorDevice, s.smallKernelError.get(), 0));
  s.smallKernelErrorDevice = static_cast<uint32_t*>(errorDevice);
  s.doneCounter = PinnedBuffer::allocate(sizeof(uint32_t));
  std::memset(s.doneCounter.get(), 0, sizeof(uint32_t));
  void* counterDevice = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&counterDevice, s.doneCounter.get(), 0));
  s.doneCounterDevice = reinterpret_cast<CUdeviceptr>(counterDevice);
  if (config_.scratchBytes > 0) s.scratch = DeviceBuffer::allocate(config_.scratchBytes);
  s.scratchAddress = s.scratch.get();
  if (config_.graphCacheEntries > 0) s.graphs = std::make_unique<RankGraphCache>(config_.graphCacheEntries);
  s.laneSyncedAt.assign(static_cast<size_t>(config_.lanes), -1);
  s.laneUsed.assign(static_cast<size_t>(config_.lanes), false);
  s.pendingWaits.reserve(3 * static_cast<size_t>(slots_ > 0 ? slots_ : 1));  // no allocation in launch()
}

CudaExecutor::~CudaExecutor() {
  HostGatedWork::instance().removeBusyProbe(busyProbe_);
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
    try {
      releaseRank(r);
    } catch (const Error& e) {
      CONCCL_WARN(r, devices_[r], std::string("releasing the rank failed: ") + e.what());
    }
  }
  if (leakedRank_ && claimer_) claimer_->leak();
  if (!processMode_) return;
  releaseVmmExports();
  if (poolBounce_ && (leakedRank_ || !poolBounce_->release(std::chrono::milliseconds(config_.timeoutMs)))) {
    (void)poolBounce_.release();  // leaked on purpose: a copy out may still run on the caller's stream
  }
  if (leakedRank_) {
    // The local rank's work is still queued (it could not drain): it may yet touch the peers' mapped buffers and
    // the registered flag area. Keep both, as releaseRank keeps the rank's own memory.
    CONCCL_WARN(localRank_, devices_[static_cast<size_t>(localRank_)],
                "GPU work still pending at destroy; keeping the peer mappings and the flag registration");
    return;
  }
  try {
    closeAllImports();
    if (registeredFlags_ != nullptr) {
      DeviceGuard guard(devices_[static_cast<size_t>(localRank_)]);
      if (cudaHostUnregister(registeredFlags_) != cudaSuccess) (void)cudaGetLastError();
    }
  } catch (const Error& e) {
    CONCCL_WARN(localRank_, devices_[static_cast<size_t>(localRank_)],
                std::string("unmapping peers failed: ") + e.what());
  }
}

bool CudaExecutor::drain(RankState& s, std::chrono::milliseconds limit, bool reportKernelTimeout) {
  if (reportKernelTimeout) checkSmallKernelError(s);
  if (s.launches == 0) return true;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto nap = std::chrono::microseconds(20);
  auto lastFlagWrite = std::chrono::steady_clock::time_point{};
  for (;;) {
    if (s.launchesDone()) {
      if (reportKernelTimeout) checkSmallKernelError(s);
      return true;
    }
    // A failed context (e.g. a fault in a kernel) never writes the marker: report its error instead of waiting
    // for the deadline. Querying one of our own lanes returns such sticky errors.
    if (!s.lanes.empty()) {
      cudaError_t status = cudaStreamQuery(s.lanes.front().get());
      if (status != cudaSuccess && status != cudaErrorNotReady) CUDA_CHECK(status);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    // After an abort, each Wait that passes consumes its flag again, so a stream with several calls queued
    // needs the flags re-opened until it has drained.
    if (aborted_.load(std::memory_order_acquire) && now - lastFlagWrite > std::chrono::milliseconds(1)) {
      std::lock_guard<std::mutex> lifetime(lifetimeMutex_);
      writeAllFlagsLocked();
      lastFlagWrite = now;
    }
    std::this_thread::sleep_for(nap);
    if (nap < std::chrono::milliseconds(1)) nap *= 2;
  }
}

void CudaExecutor::synchronize(int rank) {
  CONCCL_ASSERT(rank >= 0 && rank < static_cast<int>(ranks_.size()));
  RankState& s = *ranks_[rank];
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.released || !s.local) return;
  DeviceGuard guard(s.device);
  if (!drain(s, std::chrono::milliseconds(config_.timeoutMs), /*reportKernelTimeout=*/true)) {
    CONCCL_THROW(concclTimeout, "rank " + std::to_string(rank) + " (device " + std::to_string(s.device) +
                                    "): its GPU work did not finish within " + std::to_string(config_.timeoutMs) +
                                    " ms (a peer that never signalled? use concclCommAbort)");
  }
}

void CudaExecutor::writeAllFlagsLocked() {
  // The flags are host memory: plain CPU stores open every one of them, without queueing behind a stuck Wait and
  // without any CUDA call that could fail or block on a failure path. Volatile, so that the stores happen even
  // though the CPU never reads them; the fence publishes them before a later drain poll.
  // Across processes this opens the peers' flags too (they are in the shared region): a peer whose GPU waits for
  // this rank then drains instead of hanging, and learns of the failure from the shared error word.
  for (size_t r = 0; r < ranks_.size() && r < flagTable_.size(); ++r) {
    if (!ranks_[r] || (ranks_[r]->local && ranks_[r]->released && !processMode_)) continue;
    auto* flags = static_cast<volatile uint32_t*>(flagTable_[r]);
    for (int i = 0; i < slots_; ++i) flags[i] = 1;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void CudaExecutor::cancel() {
  aborted_.store(true, std::memory_order_release);
  *static_cast<volatile uint32_t*>(abortWord_.as<uint32_t>()) = 1;
  std::lock_guard<std::mutex> lifetime(lifetimeMutex_);
  writeAllFlagsLocked();
}

void CudaExecutor::refuseSharedHardwareQueues() const {
  // A Wait (semaphore acquire) blocks the hardware queue its stream is mapped to. Streams outnumbering the queues
  // (CUDA_DEVICE_MAX_CONNECTIONS, default 8) share them, and when several ranks share a GPU a Wait can then sit in
  // front of the very Signal it waits for: a deadlock CUDA cannot see. Refused, not warned (issue 13): the warning
  // was easy to miss and the hang that followed was silent. See exec/queue_budget.h.
  const int connections = deviceConnectionsFrom(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
  if (auto reason = hardwareQueueConflict(devices_, config_.lanes, connections)) {
    CONCCL_THROW(concclInvalidUsage, *reason);
  }
}

void CudaExecutor::releaseRank(int rank) {
  CONCCL_ASSERT(rank >= 0 && rank < static_cast<int>(ranks_.size()));
  RankState& s = *ranks_[rank];
  // No busy probe may read this rank's done word once it is freed below (a no-op after the first release).
  HostGatedWork::instance().removeBusyProbe(busyProbe_);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.released) return;
  if (!s.local) {
    s.released = true;
    return;
  }
  DeviceGuard guard(s.device);
  // cudaFree synchronises the device: freeing while a Wait of this rank still blocks its stream would hang
  // here. Drain first (re-opening flags if aborted); if that fails, leak rather than hang.
  bool drained = false;
  try {
    drained = drain(s, std::chrono::milliseconds(config_.timeoutMs), /*reportKernelTimeout=*/false);
  } catch (const Error& e) {
    CONCCL_WARN(rank, s.device, std::string("while releasing: ") + e.what());
  }
  std::lock_guard<std::mutex> lifetime(lifetimeMutex_);
  s.released = true;
  if (!drained) {
    CONCCL_WARN(rank, s.device, "GPU work still pending at release; leaking the rank's streams and memory");
    leakedRank_ = true;
    if (s.graphs) s.graphs->leak();
    for (auto& l : s.lanes) l.leak();
    s.flags.leak();
    s.doneCounter.leak();  // the GPU may still write the marker
    s.smallKernelError.leak();
    s.scratch.leak();
    return;
  }
  // Peers may still hold this rank's flag address in their queued work only if they did not drain; with
  // every rank drained in turn (destroy), nothing references it any more.
  if (s.rank == localRank_ && deferred_) {
    // Its launch stream ran every deferred program (they ended with done markers drain() waited for); what may
    // remain are gate writes, which wait for nothing.
    if (!deferred_->drain(std::chrono::milliseconds(config_.timeoutMs))) {
      CONCCL_WARN(rank, s.device, "deferred launches still pending at release; leaking their stream and gate");
      (void)deferred_.release();  // leaked on purpose: the GPU may still use it
    } else {
      deferred_.reset();
    }
  }
  s.graphs.reset();  // the rank drained: no cached graph is running
  s.lanes.clear();
  s.joinEvents.clear();
  s.forkEvent.reset();
  s.doneCounter.reset();
  s.smallKernelError.reset();
  s.flags.reset();
  s.scratch.reset();
}

bool cudaAvailable() { return cudaDeviceCount() > 0; }

int cudaDeviceCount() {
  int count = 0;
  // No driver, no device, or an incompatible driver: the CUDA backend is simply unavailable.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<Executor> makeCudaExecutor(const std::vector<int>& devices, const Config& config) {
  return std::make_unique<CudaExecutor>(devices, config);
}

size_t ipcImportCount() { return IpcImportTable::instance().size(); }
size_t vmmImportCount() { return IpcImportTable::instance().vmmCount(); }

int cudaFlagSlots(int nranks, const Config& config) { return sched::maxSlots(nranks, cudaBuildOptions(config)); }

std::unique_ptr<Executor> makeCudaProcessExecutor(const ProcessTopology& topology, const Config& config) {
  return std::make_unique<CudaExecutor>(topology, config);
}

}  // namespace conccl::exec
