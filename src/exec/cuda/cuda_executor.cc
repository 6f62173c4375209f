// The CUDA executor: runs each rank's schedule program on copy-engine streams, ordering ranks with flags in
// pinned host memory (stream memory operations, no SM spins) and reducing with a small kernel. See
// docs/cuda-executor.md for the design; the execution model it implements is in src/sched/schedule.h.
//
// Per rank: its device; the caller's stream M (per call); `lanes` internal copy lanes; `slots` uint32 flags
// in pinned, mapped host memory; scratch; ordering events.
//
// launch() only enqueues; it never waits for the GPU, allocates nothing on the hot path (events are reused:
// cudaStreamWaitEvent captures the event's state when it is called, so re-recording right after is safe),
// and everything it enqueues is capturable in a CUDA graph.
#include <conccl/conccl.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>

#include <utility>
#include <variant>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/logging.h"
#include "exec/call_path.h"
#include "exec/call_shape_cache.h"
#include "exec/cuda/copy_engine_program.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/graph_cache.h"
#include "exec/cuda/ipc_import_table.h"
#include "exec/cuda/queue_claim.h"
#include "exec/cuda/rank_state.h"
#include "exec/cuda/raii.h"
#include "exec/cuda/reduce_kernel.h"
#include "exec/cuda/small_program_kernel.h"
#include "exec/cuda/small_program_pack.h"
#include "exec/executor.h"
#include "exec/queue_budget.h"
#include "sched/schedule.h"

namespace conccl::exec {
namespace {

class CudaExecutor final : public Executor {
 public:
  CudaExecutor(const std::vector<int>& devices, const Config& config);
  CudaExecutor(const ProcessTopology& topology, const Config& config);
  ~CudaExecutor() override;

  sched::BuildOptions buildOptions() const override { return options_; }
  uint64_t checkBuffer(int rank, const void* ptr, size_t bytes, const char* what) const override;
  void launch(const sched::Schedule& schedule, const CallBinding& binding, int rank) override;
  void prepareCall(const sched::Schedule& schedule, const CallBinding& binding, const std::vector<int>& ranks) override;
  bool gpuProgress(int rank, uint32_t* launched, uint32_t* completed) override;
  void synchronize(int rank) override;
  void cancel() override;
  void releaseRank(int rank) override;
  concclCallResources_t callResources(const sched::Schedule& schedule, int rank) const override;

  BufferExport exportBuffer(int rank, const void* ptr, size_t bytes, const char* what) override;
  void retireExport(int rank, const void* ptr) override;
  std::vector<uint64_t> takeRetiredExports(int rank) override;
  void requeueRetiredExports(int rank, const std::vector<uint64_t>& ids) override;
  void* importBuffer(int owner, const BufferExport& buffer) override;
  void closeImport(int owner, uint64_t allocId) override;

 private:
  void initOptions(int nranks);
  // checkBuffer's checks (the caller makes the rank's device current); returns what the driver said of `ptr`.
  PointerInfo checkedPointer(int rank, const void* ptr, size_t bytes, const char* what) const;
  // Throws concclTimeout if a small-message kernel of the rank gave up waiting (small_program_kernel.h).
  void checkSmallKernelError(const RankState& s) const;
  // launch()'s parts: concclInvalidUsage when two local ranks share the caller's stream; whether every rank of the
  // call runs the small-message kernel; that path's launch.
  void refuseSharedStream(const sched::Schedule& schedule, const CallBinding& binding, int rank) const;
  bool takesSmallPath(const sched::Schedule& schedule, int rank) const;
  // Whether rank `rank`'s copy-engine program of an eager call may run as a cached graph (graph_cache.h).
  bool graphCacheable(const sched::Schedule& schedule, int rank) const;
  // An eager call on another stream than the rank's previous eager call waits on the GPU for that call to end.
  void orderAfterPreviousCall(RankState& s, cudaStream_t main);
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
  // First use of every stream, one at a time (queue_claim.h; null when CONCCL_QUEUE_CLAIM=0). Local cliques only.
  std::unique_ptr<QueueClaimer> claimer_;
  std::atomic<bool> leakedRank_{false};  // a rank could not drain: nothing may be freed with a device-synchronising call
  // Peer mappings closed and allocations newly exported or retired so far (several processes): an address in a
  // cached graph's shape may name other memory after either, so every rank's graph cache starts over when it moves.
  std::atomic<uint64_t> mappingGeneration_{0};

  // Several processes only.
  bool processMode_ = false;
  int localRank_ = -1;
  std::vector<int64_t> pids_;
  void* registeredFlags_ = nullptr;  // the shared flags region, registered with cudaHostRegister
  std::mutex exportMutex_;
  std::map<uint64_t, BufferExport> exports_;        // by allocation id
  std::map<CUdeviceptr, uint64_t> exportedAt_;      // allocation base -> id of the allocation last exported there
  std::vector<uint64_t> retiredExports_;            // ids the peers may unmap (handed out once)
  std::mutex importMutex_;
  std::map<std::pair<int, uint64_t>, void*> imports_;  // (owner rank, allocation id) -> base in this process
};

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
  if (queueClaimEnabled()) {
    claimer_ = std::make_unique<QueueClaimer>(unique);
    std::vector<QueueClaimer::Target> lanes;
    for (auto& s : ranks_) {
      for (auto& l : s->lanes) lanes.push_back({l.get(), s->device});
    }
    claimer_->claim(lanes);
  }
}

void CudaExecutor::prepareCall(const sched::Schedule& schedule, const CallBinding& binding,
                               const std::vector<int>& ranks) {
  if (aborted_.load(std::memory_order_acquire)) return;
  claimNewStreams(binding, ranks);
  prepareGraphs(schedule, binding, ranks);
}

void CudaExecutor::prepareGraphs(const sched::Schedule& schedule, const CallBinding& binding,
                                 const std::vector<int>& ranks) {
  // The graph of a repeated call is captured here rather than in launch(): no rank of this call has launched yet,
  // so nothing of it waits on the GPU while the driver instantiates (graph_cache.h, prepare). A rank's earlier calls
  // are either launched (their GPU work needs nothing more from the host) or, in the same group, not enqueued yet.
  if (config_.graphCacheEntries == 0 || binding.eagerOnly) return;
  for (int rank : ranks) {
    if (rank < 0 || rank >= static_cast<int>(ranks_.size())) continue;
    RankState& s = *ranks_[static_cast<size_t>(rank)];
    if (!s.local || !s.graphs) continue;
    const sched::RankProgram& program = schedule.programs[static_cast<size_t>(rank)];
    if (takesSmallPath(schedule, rank) || !graphCacheable(schedule, rank)) continue;
    // Calls with chunk events always run eagerly (launch()): nothing to prepare.
    const size_t r = static_cast<size_t>(rank);
    if (r < binding.chunkEvents.size() && !binding.chunkEvents[r].empty()) continue;
    if (r < binding.inputPieces.size() && !binding.inputPieces[r].events.empty()) continue;
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.released) continue;
    DeviceGuard guard(s.device);
    const cudaStream_t main = binding.streams[static_cast<size_t>(rank)];
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(main, &capture));
    if (capture != cudaStreamCaptureStatusNone) continue;  // launch() leaves captured calls alone too
    s.graphs->dropIfStale(mappingGeneration_.load(std::memory_order_acquire));
    CallShape& shape = s.graphs->scratchShape();
    if (!makeCallShape(schedule.id, rank, binding, shape)) continue;
    const LocationResolver resolve(ranks_, binding);
    s.graphs->prepare(s, shape, copyEngineSetup(schedule, rank, main, /*eager=*/true), resolve, program);
  }
}

void CudaExecutor::claimNewStreams(const CallBinding& binding, const std::vector<int>& ranks) {
  if (!claimer_) return;
  // A caller's stream seen for the first time is claimed here, from the one thread that completed the rendezvous,
  // before any rank launches: never inside launch(), where another rank's stream may already wait on the GPU. The
  // lanes of every rank are claimed again with it (their queues are busy while the new streams are bound).
  // Each rank's mutex keeps releaseRank from freeing its lanes meanwhile. A rank taking part in the call is waited
  // for (its thread is in this call's rendezvous, so only a watchdog poll can hold it, for microseconds); another
  // rank busy elsewhere (e.g. being released) is left out rather than waited for: its lanes are only re-gated.
  std::vector<std::unique_lock<std::mutex>> locks;
  std::vector<RankState*> held;
  for (auto& s : ranks_) {
    if (!s->local) continue;
    const bool taking = std::find(ranks.begin(), ranks.end(), s->rank) != ranks.end();
    std::unique_lock<std::mutex> lock(s->mutex, std::defer_lock);
    if (taking) {
      lock.lock();
    } else if (!lock.try_lock()) {
      continue;
    }
    if (s->released) continue;
    locks.push_back(std::move(lock));
    held.push_back(s.get());
  }
  std::vector<QueueClaimer::Target> fresh;
  for (RankState* s : held) {
    const auto r = static_cast<size_t>(s->rank);
    if (r >= binding.streams.size() || std::find(ranks.begin(), ranks.end(), s->rank) == ranks.end()) continue;
    if (claimer_->isNewStream(s->rank, binding.streams[r], s->device)) fresh.push_back({binding.streams[r], s->device});
  }
  if (fresh.empty()) return;
  std::vector<QueueClaimer::Target> targets;
  for (RankState* s : held) {
    DeviceGuard guard(s->device);
    for (auto& l : s->lanes) {
      // A lane pulled into another thread's capture must not get these ops as graph nodes: leave it out.
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      CUDA_CHECK(cudaStreamIsCapturing(l.get(), &capture));
      if (capture == cudaStreamCaptureStatusNone) targets.push_back({l.get(), s->device});
    }
  }
  targets.insert(targets.end(), fresh.begin(), fresh.end());
  claimer_->claim(targets);
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
  // Scratch: every rank exports its own, every process maps the others' (once, for the communicator's life).
  RankState& self = *ranks_[static_cast<size_t>(localRank_)];
  // The same exchange settles the small-message threshold: every process must choose the same path for a call
  // (see launch), so all use the smallest one (0 when any process cannot use the kernel).
  // So does the reduction shape: schedules are built in every process and must agree, so peer reads are used only
  // when every process can use them.
  std::string mine(sizeof(BufferExport) + 3 * sizeof(uint64_t), '\0');
  if (self.scratch) {
    BufferExport e = exportBuffer(localRank_, self.scratch.get(), self.scratch.bytes(), "scratch");
    std::memcpy(mine.data(), &e, sizeof(e));
  }
  // engine = copy routes own blocks through peers (every process must agree, as on the other choices).
  const uint64_t localChoice[3] = {smallBytes_, allPeers && config.peerReduce ? 1u : 0u,
                                   config.engine == concclEngineCopy && allPeers && n >= 2 ? 1u : 0u};
  std::memcpy(mine.data() + sizeof(BufferExport), localChoice, sizeof(localChoice));
  std::vector<std::string> all = topo.allGather(mine);
  CONCCL_ASSERT(static_cast<int>(all.size()) == n);
  options_.peerReads = true;
  options_.ownBlockViaPeer = true;
  for (int r = 0; r < n; ++r) {
    CONCCL_ASSERT(all[static_cast<size_t>(r)].size() == mine.size());
    uint64_t choice[3] = {0, 0, 0};
    std::memcpy(choice, all[static_cast<size_t>(r)].data() + sizeof(BufferExport), sizeof(choice));
    smallBytes_ = std::min<size_t>(smallBytes_, choice[0]);
    options_.peerReads = options_.peerReads && choice[1] != 0;
    options_.ownBlockViaPeer = options_.ownBlockViaPeer && choice[2] != 0;
    if (r == localRank_) continue;
    BufferExport e;
    std::memcpy(&e, all[static_cast<size_t>(r)].data(), sizeof(e));
    if (e.allocId != 0) ranks_[static_cast<size_t>(r)]->scratchAddress = importBuffer(r, e);
  }
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
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
    try {
      releaseRank(r);
    } catch (const Error& e) {
      CONCCL_WARN(r, devices_[r], std::string("releasing the rank failed: ") + e.what());
    }
  }
  if (leakedRank_ && claimer_) claimer_->leak();
  if (!processMode_) return;
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

uint64_t CudaExecutor::checkBuffer(int rank, const void* ptr, size_t bytes, const char* what) const {
  CONCCL_ASSERT(rank >= 0 && rank < static_cast<int>(devices_.size()));
  DeviceGuard guard(devices_[rank]);
  const PointerInfo info = checkedPointer(rank, ptr, bytes, what);
  // Managed memory migrates, and an allocation the driver does not report has no id: neither is cached by shape.
  const bool named = info.bufferId != 0 && !info.managed && info.base != 0;
  return named ? static_cast<uint64_t>(info.bufferId) : kAllocationUnknown;
}

PointerInfo CudaExecutor::checkedPointer(int rank, const void* ptr, size_t bytes, const char* what) const {
  const int device = devices_[rank];
  // One driver call for everything below (it was three: the enqueue cost of a small collective, issue 3).
  const PointerInfo info = queryPointer(ptr);
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
  CONCCL_ASSERT(processMode_ && rank == localRank_);
  DeviceGuard guard(devices_[static_cast<size_t>(rank)]);
  const PointerInfo info = checkedPointer(rank, ptr, bytes, what);
  if (info.base == 0 || info.bufferId == 0 || info.managed || info.memoryType != CU_MEMORYTYPE_DEVICE) {
    CONCCL_THROW(concclInvalidArgument,
                 std::string(what) + " (" + describePointer(ptr) +
                     ") cannot be shared with the other processes: it is not a cudaMalloc allocation (CUDA IPC "
                     "needs one; memory from cudaMallocAsync pools, the VMM API, managed or host memory is not "
                     "exportable). Allocate it with cudaMalloc or concclMemAlloc, or stage the call "
                     "(CONCCL_STAGED_MAX_BYTES)");
  }
  std::lock_guard<std::mutex> lock(exportMutex_);
  auto it = exports_.find(info.bufferId);
  if (it == exports_.end()) {
    BufferExport e;
    e.allocId = info.bufferId;
    e.base = static_cast<uint64_t>(info.base);
    e.allocBytes = info.size;
    e.pid = static_cast<int64_t>(::getpid());
    cudaIpcMemHandle_t handle;
    cudaError_t err = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(info.base));
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      CONCCL_THROW(concclInvalidArgument, std::string(what) + " (" + describePointer(ptr) +
                                              ") cannot be shared with the other processes: cudaIpcGetMemHandle "
                                              "refused its allocation (" + cudaGetErrorString(err) +
                                              "); only cudaMalloc memory can be shared (or stage the call: "
                                              "CONCCL_STAGED_MAX_BYTES)");
    }
    std::memcpy(e.handle, &handle, sizeof(handle));
    // A new allocation: sweep the cache for allocations that were freed since (their address no longer carries
    // their id) and hand their ids to the peers to unmap. This is not only tidiness: a peer maps our small
    // allocations at our own addresses, so a stale mapping of freed memory would make the mapping of a new
    // allocation at the same place fail (cudaErrorAlreadyMapped). The peers' work on a freed allocation is
    // complete: it came before the done signal our stream waited for, and cudaFree waited for our stream.
    // One driver call per cached allocation, on this path only (a new allocation costs milliseconds anyway).
    for (auto cached = exports_.begin(); cached != exports_.end();) {
      const PointerInfo now = queryPointer(reinterpret_cast<void*>(cached->second.base));
      if (now.bufferId == cached->first) {
        ++cached;
        continue;
      }
      retiredExports_.push_back(cached->first);
      auto at = exportedAt_.find(static_cast<CUdeviceptr>(cached->second.base));
      if (at != exportedAt_.end() && at->second == cached->first) exportedAt_.erase(at);
      cached = exports_.erase(cached);
    }
    exportedAt_[info.base] = info.bufferId;
    it = exports_.emplace(info.bufferId, e).first;
    // A new allocation, possibly at the address of a freed one that a cached graph still names.
    mappingGeneration_.fetch_add(1, std::memory_order_release);
  }
  BufferExport out = it->second;
  out.offset = reinterpret_cast<uintptr_t>(ptr) - static_cast<uintptr_t>(info.base);
  return out;
}

void CudaExecutor::retireExport(int rank, const void* ptr) {
  CONCCL_ASSERT(processMode_ && rank == localRank_);
  DeviceGuard guard(devices_[static_cast<size_t>(rank)]);
  const PointerInfo info = queryPointer(ptr);
  std::lock_guard<std::mutex> lock(exportMutex_);
  if (info.bufferId == 0 || exports_.erase(info.bufferId) == 0) return;
  exportedAt_.erase(info.base);
  retiredExports_.push_back(info.bufferId);
  mappingGeneration_.fetch_add(1, std::memory_order_release);
}

std::vector<uint64_t> CudaExecutor::takeRetiredExports(int rank) {
  CONCCL_ASSERT(processMode_ && rank == localRank_);
  std::lock_guard<std::mutex> lock(exportMutex_);
  return std::exchange(retiredExports_, {});
}

void CudaExecutor::requeueRetiredExports(int rank, const std::vector<uint64_t>& ids) {
  CONCCL_ASSERT(processMode_ && rank == localRank_);
  std::lock_guard<std::mutex> lock(exportMutex_);
  retiredExports_.insert(retiredExports_.begin(), ids.begin(), ids.end());
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
      base = IpcImportTable::instance().acquire(b, devices_[static_cast<size_t>(localRank_)]);
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

void CudaExecutor::launch(const sched::Schedule& schedule, const CallBinding& binding, int rank) {
  if (aborted_.load(std::memory_order_acquire)) {
    CONCCL_THROW(concclInvalidUsage, "the communicator was aborted; no further calls can run");
  }
  CONCCL_ASSERT(rank >= 0 && rank < static_cast<int>(ranks_.size()));
  RankState& s = *ranks_[rank];
  CONCCL_ASSERT(s.local);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.released) CONCCL_THROW(concclInvalidUsage, "rank " + std::to_string(rank) + " was already released");
  CONCCL_ASSERT(schedule.nranks == static_cast<int>(ranks_.size()));
  CONCCL_ASSERT(schedule.lanes <= config_.lanes && schedule.slots <= slots_);
  CONCCL_ASSERT(schedule.scratchBytes <= config_.scratchBytes);
  refuseSharedStream(schedule, binding, rank);
  DeviceGuard guard(s.device);
  const cudaStream_t main = binding.streams[rank];
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(main, &capture));
  const bool eager = capture == cudaStreamCaptureStatusNone;
  if (eager) orderAfterPreviousCall(s, main);
  const LocationResolver resolve(ranks_, binding);
  const sched::RankProgram& program = schedule.programs[static_cast<size_t>(rank)];

  const std::vector<cudaEvent_t>* chunks =
      static_cast<size_t>(rank) < binding.chunkEvents.size() && !binding.chunkEvents[static_cast<size_t>(rank)].empty()
          ? &binding.chunkEvents[static_cast<size_t>(rank)]
          : nullptr;
  const InputPieces* inputs =
      static_cast<size_t>(rank) < binding.inputPieces.size() && !binding.inputPieces[static_cast<size_t>(rank)].events.empty()
          ? &binding.inputPieces[static_cast<size_t>(rank)]
          : nullptr;
  if (takesSmallPath(schedule, rank)) {
    // One kernel reads every piece: it starts once all of them are ready.
    if (inputs != nullptr) {
      for (cudaEvent_t e : inputs->events) {
        if (e != nullptr) CUDA_CHECK(cudaStreamWaitEvent(main, e, 0));
      }
    }
    launchSmall(s, program, resolve, main, eager);
    // One kernel moves every block: they are all in place when it ends.
    if (chunks != nullptr) {
      for (cudaEvent_t e : *chunks) {
        if (e != nullptr) CUDA_CHECK(cudaEventRecord(e, main));
      }
    }
    return;
  }
  CopyEngineSetup setup = copyEngineSetup(schedule, rank, main, eager);
  setup.chunkEvents = chunks;
  setup.inputPieces = inputs;
  // A repeated eager call replays its cached graph: one launch instead of every op's CUDA call (graph_cache.h).
  // Captured calls are left alone: they become part of the caller's graph, whose replays are the caller's.
  // Calls with chunk events record them between the program's ops, and calls with input pieces wait for them there:
  // they run eagerly, never from a cached graph.
  if (eager && !binding.eagerOnly && chunks == nullptr && inputs == nullptr && s.graphs &&
      graphCacheable(schedule, rank)) {
    s.graphs->dropIfStale(mappingGeneration_.load(std::memory_order_acquire));
    CallShape& shape = s.graphs->scratchShape();
    if (makeCallShape(schedule.id, rank, binding, shape) && s.graphs->launch(s, shape, setup, resolve, program)) return;
  }
  CopyEngineProgram(s, setup, resolve).enqueue(program);
}

namespace {
// CONCCL_CALL_ORDER=0 turns orderAfterPreviousCall off, only to reproduce what it prevents (test_gpu_call_order.cc).
bool callOrderEnabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("CONCCL_CALL_ORDER");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return enabled;
}
}  // namespace

void CudaExecutor::orderAfterPreviousCall(RankState& s, cudaStream_t main) {
  // The calls of a rank run on the GPU in the order they were made, whatever streams they were made on (NCCL's rule,
  // which PyTorch relies on: FSDP2 all-gathers on one stream and reduce-scatters on another). Every call of a rank
  // uses the rank's one set of flags and its scratch, so two calls running at once would take each other's signals
  // and overwrite each other's chunks: a GPU deadlock (FSDP2 through the NCCL drop-in, 2026-12-01) or wrong data.
  // Calls on the same stream are ordered by the stream; a call on another stream waits for the done marker of the
  // previous launch (GEQ is a wrap-safe comparison). One memory operation, only when the stream changes.
  if (!callOrderEnabled()) return;
  unsigned long long id = 0;
  CUDA_CHECK(cudaStreamGetId(main, &id));
  if (s.launches > 0 && id != s.lastStreamId) {
    CU_CHECK(driverApi().streamWaitValue32(reinterpret_cast<CUstream>(main), s.doneCounterDevice, s.launches,
                                           CU_STREAM_WAIT_VALUE_GEQ));
  }
  s.lastStreamId = id;
}

bool CudaExecutor::graphCacheable(const sched::Schedule& schedule, int rank) const {
  if (schedule.programs[static_cast<size_t>(rank)].ops.empty()) return false;  // nothing to replay
  const size_t work = rankWorkBytes(schedule, rank);
  // A replayed graph runs its parallel branches (the lanes) on streams the driver picks, which the queue claim
  // (Hazard 4) cannot claim: where ranks share a GPU, one of them can land behind a peer's Wait for this very rank.
  // Seen on one H200 (2026-12-01, fifth session, GraphCache.ThreadPerRankOnOneGpu: AllGather of 6 MB on 3 ranks,
  // thread per rank, stuck at its first replay). There only single-stream programs (one chain on the caller's
  // stream) are cached; ranks sharing a GPU are a correctness setup, not a performance one (FACTS.md).
  if (sharedDevices_ && work > config_.singleStreamBytes) return false;
  return config_.graphCacheMaxBytes == 0 || work <= config_.graphCacheMaxBytes;
}

CopyEngineSetup CudaExecutor::copyEngineSetup(const sched::Schedule& schedule, int rank, cudaStream_t main,
                                              bool eager) const {
  CopyEngineSetup setup;
  setup.main = main;
  setup.eager = eager;
  // Small programs run every op on M. Forking a lane off M and joining it back costs two CUDA calls each way
  // (~2-4 us apiece in our VM, docs/cuda-executor.md), far more than the parallel copy queues gain for a few
  // KiB. Putting lane ops on M only adds ordering (it is the host executor's sequential order), so it cannot
  // deadlock where the schedule does not.
  setup.singleStream = rankWorkBytes(schedule, rank) <= config_.singleStreamBytes;
  setup.reduceCtas = config_.reduceCtas;
  setup.smBudget = config_.smBudget;
  setup.kernelPriority = kernelPriority_[static_cast<size_t>(rank)];
  setup.slots = slots_;
  setup.flagTable = &devFlagTable_;
  return setup;
}

void CudaExecutor::refuseSharedStream(const sched::Schedule& schedule, const CallBinding& binding, int rank) const {
  // Two ranks on one stream deadlock on the first handshake (each waits for a signal queued behind its own
  // wait): refuse instead of hanging.
  const cudaStream_t main = binding.streams[rank];
  for (int p = 0; p < schedule.nranks; ++p) {
    if (p != rank && ranks_[p]->local && binding.streams[p] == main && schedule.nranks > 1) {
      CONCCL_THROW(concclInvalidUsage, "ranks " + std::to_string(rank) + " and " + std::to_string(p) +
                                           " were called with the same stream " + describeStream(main) +
                                           "; every rank needs its own stream");
    }
  }
}

bool CudaExecutor::takesSmallPath(const sched::Schedule& schedule, int rank) const {
  return exec::takesSmallPath(schedule, rank, smallBytes_);  // exec/call_path.h: the rules and why
}

concclCallResources_t CudaExecutor::callResources(const sched::Schedule& schedule, int rank) const {
  PathLimits limits;
  limits.smallBytes = smallBytes_;
  limits.reduceCtas = config_.reduceCtas;
  limits.smBudget = config_.smBudget;
  limits.highPriority = config_.highPriority;
  return exec::callResources(schedule, rank, limits, devices_);
}

void CudaExecutor::launchSmall(RankState& s, const sched::RankProgram& program, const LocationResolver& resolve,
                               cudaStream_t main, bool eager) {
  checkSmallKernelError(s);
  SmallProgram& p = s.smallProgram;
  packSmallProgram(program, s.rank, resolve, devFlagTable_, p);
  p.abortWord = abortWordDevice_;
  p.errorWord = s.smallKernelErrorDevice;
  p.timeoutNs = static_cast<uint64_t>(config_.timeoutMs) * 1000000ull;
  p.doneCounter = eager ? reinterpret_cast<uint32_t*>(s.doneCounterDevice) : nullptr;
  p.doneValue = s.launches + 1;
  launchSmallProgram(p, kernelPriority_[static_cast<size_t>(s.rank)], main);
  if (eager) ++s.launches;
}

void CudaExecutor::checkSmallKernelError(const RankState& s) const {
  if (*static_cast<const volatile uint32_t*>(s.smallKernelError.as<uint32_t>()) == 0) return;
  CONCCL_THROW(concclTimeout, "rank " + std::to_string(s.rank) + ": a small-message kernel waited more than " +
                                  std::to_string(config_.timeoutMs) +
                                  " ms for a peer's signal and gave up (a peer that never made the call?)");
}

bool CudaExecutor::drain(RankState& s, std::chrono::milliseconds limit, bool reportKernelTimeout) {
  if (reportKernelTimeout) checkSmallKernelError(s);
  if (s.launches == 0) return true;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto nap = std::chrono::microseconds(20);
  auto lastFlagWrite = std::chrono::steady_clock::time_point{};
  const auto* counter = static_cast<const volatile uint32_t*>(s.doneCounter.as<uint32_t>());
  for (;;) {
    if (static_cast<int32_t>(*counter - s.launches) >= 0) {
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
  s.graphs.reset();  // the rank drained: no cached graph is running
  s.lanes.clear();
  s.joinEvents.clear();
  s.forkEvent.reset();
  s.doneCounter.reset();
  s.smallKernelError.reset();
  s.flags.reset();
  s.scratch.reset();
}

}  // namespace

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

int cudaFlagSlots(int nranks, const Config& config) { return sched::maxSlots(nranks, cudaBuildOptions(config)); }

std::unique_ptr<Executor> makeCudaProcessExecutor(const ProcessTopology& topology, const Config& config) {
  return std::make_unique<CudaExecutor>(topology, config);
}

}  // namespace conccl::exec
