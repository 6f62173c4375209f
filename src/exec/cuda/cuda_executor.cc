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
#include <string>
#include <thread>
#include <unistd.h>

#include <utility>
#include <variant>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/logging.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/queue_claim.h"
#include "exec/cuda/raii.h"
#include "exec/cuda/reduce_kernel.h"
#include "exec/cuda/small_program_kernel.h"
#include "exec/executor.h"
#include "exec/queue_budget.h"
#include "sched/schedule.h"

namespace conccl::exec {
namespace {

// Programs that copy at most this many bytes run all their ops on the caller's stream (see launch()).
constexpr size_t kSingleStreamProgramBytes = size_t{256} << 10;
// Operations per cuStreamBatchMemOp call (the driver bounds the count; 256 is the documented maximum).
constexpr size_t kMaxBatchMemOps = 128;

std::string describePointer(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}
std::string describeStream(cudaStream_t s) { return describePointer(static_cast<void*>(s)); }

// What the driver knows about a pointer, from one cuPointerGetAttributes call.
struct PointerInfo {
  unsigned int memoryType = 0;  // CUmemorytype; 0: not a CUDA pointer (plain host memory)
  int device = -1;
  unsigned int managed = 0;
  CUdeviceptr base = 0;  // allocation range (0 when the driver does not know it, e.g. some pool allocators)
  size_t size = 0;
  unsigned long long bufferId = 0;  // unique per allocation for the life of the process
};

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

// Process-wide table of the peer allocations this process has mapped with cudaIpcOpenMemHandle. Shared by every
// communicator of the process because CUDA refuses to open one handle twice in a process; reference counted.
class IpcImportTable {
 public:
  static IpcImportTable& instance() {
    static IpcImportTable* table = new IpcImportTable;  // never destroyed: process exit unmaps everything anyway
    return *table;
  }
  void* acquire(const BufferExport& b, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    Key key{b.pid, b.allocId, device};
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++it->second.refs;
      return it->second.base;
    }
    cudaIpcMemHandle_t handle;
    static_assert(sizeof(handle) <= sizeof(b.handle));
    std::memcpy(&handle, b.handle, sizeof(handle));
    DeviceGuard guard(device);
    void* base = nullptr;
    cudaError_t err = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      CONCCL_THROW(concclUnhandledCudaError,
                   std::string("cudaIpcOpenMemHandle failed: ") + cudaGetErrorName(err) + " (" +
                       cudaGetErrorString(err) + ") for allocation " + std::to_string(b.allocId) + " of pid " +
                       std::to_string(b.pid) + " (base " + describePointer(reinterpret_cast<void*>(b.base)) + ", " +
                       std::to_string(b.allocBytes) + " B); " + std::to_string(entries_.size()) +
                       " allocations of other processes mapped here");
    }
    entries_[key] = Entry{base, 1};
    return base;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }
  void release(int64_t pid, uint64_t allocId, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(Key{pid, allocId, device});
    if (it == entries_.end() || --it->second.refs > 0) return;
    DeviceGuard guard(device);
    cudaError_t err = cudaIpcCloseMemHandle(it->second.base);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      CONCCL_WARN(-1, device, std::string("cudaIpcCloseMemHandle failed: ") + cudaGetErrorString(err));
    }
    entries_.erase(it);
  }

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
  };
  std::mutex mutex_;
  std::map<Key, Entry> entries_;
};

// Everything one rank owns. Lives until releaseRank(rank). In a clique spread over processes, the peers' entries
// are not local: they only hold the addresses of the peer's flags and (mapped) scratch.
struct RankState {
  int rank = 0;
  int device = 0;
  bool local = true;
  void* scratchAddress = nullptr;  // this rank's scratch as this process addresses it (peers: an IPC mapping)
  std::vector<Stream> lanes;
  std::vector<Event> joinEvents;  // one per lane: "lane reached the end of the program"
  Event forkEvent;                // "M reached this point": lanes wait on it before their next op
  // Completion marker of eager launches, polled by synchronize(): launch k (counted in `launches`) ends with a
  // stream write of k into this pinned host word. It rides in the program's last memory-op batch, so it costs no
  // CUDA call of its own where an event record cost one (~3 us in our VM, docs/cuda-executor.md).
  PinnedBuffer doneCounter;
  CUdeviceptr doneCounterDevice = 0;
  uint32_t launches = 0;  // eager launches so far (wraps; compared with wrap-safe arithmetic)
  // Written 1 by a small-message kernel whose wait timed out (see small_program_kernel.h); checked by launch and
  // synchronize, which report concclTimeout.
  PinnedBuffer smallKernelError;
  uint32_t* smallKernelErrorDevice = nullptr;
  SmallProgram smallProgram;  // reused by launch() (no allocation on the hot path)
  // slots x uint32 in pinned, mapped host memory. A Signal is then a stream memory operation (a 32-bit write into
  // host memory, ordered after the stream's earlier work with a memory barrier) instead of a 4-byte copy: it can
  // share one cuStreamBatchMemOp with the waits around it, which halves the CUDA calls of a small collective.
  // Remote cuStreamWriteValue32 into another GPU's memory is not supported from CUDA 13.1; host memory is local to
  // every GPU, so this works for ranks on different GPUs (and, through shared pinned memory, processes) alike.
  PinnedBuffer flags;
  DeviceBuffer scratch;  // config.scratchBytes (may be empty; local ranks only)

  // Per-launch bookkeeping, kept here so that launch() does not allocate.
  std::vector<int64_t> laneSyncedAt;  // M's op count when the lane last waited on M (-1: not this call)
  std::vector<bool> laneUsed;
  std::vector<CUstreamBatchMemOpParams> pendingWaits;

  std::mutex mutex;  // serialises launch / synchronize / release of this rank
  bool released = false;
};

class CudaExecutor final : public Executor {
 public:
  CudaExecutor(const std::vector<int>& devices, const Config& config);
  CudaExecutor(const ProcessTopology& topology, const Config& config);
  ~CudaExecutor() override;

  sched::BuildOptions buildOptions() const override { return options_; }
  void checkBuffer(int rank, const void* ptr, size_t bytes, const char* what) const override;
  void launch(const sched::Schedule& schedule, const CallBinding& binding, int rank) override;
  void prepareCall(const CallBinding& binding, const std::vector<int>& ranks) override;
  bool gpuProgress(int rank, uint32_t* launched, uint32_t* completed) override;
  void synchronize(int rank) override;
  void cancel() override;
  void releaseRank(int rank) override;

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
  void enablePeerAccess(const std::vector<int>& unique);
  void initRank(RankState& state);
  void closeAllImports();
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
  PinnedBuffer abortWord_;  // set by cancel(): small-message kernels stop waiting
  const uint32_t* abortWordDevice_ = nullptr;

  // First use of every stream, one at a time (queue_claim.h; null when CONCCL_QUEUE_CLAIM=0). Local cliques only.
  std::unique_ptr<QueueClaimer> claimer_;
  std::atomic<bool> leakedRank_{false};  // a rank could not drain: nothing may be freed with a device-synchronising call

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
  options.pipelineDepth = 2;
  return options;
}

void CudaExecutor::initOptions(int n) {
  CONCCL_REQUIRE(n >= 1, "the CUDA executor needs at least one rank");
  CONCCL_REQUIRE(config_.lanes >= 1, "lanes = " + std::to_string(config_.lanes) + " must be at least 1");
  CONCCL_REQUIRE(config_.reduceCtas >= 1,
                 "reduceCtas = " + std::to_string(config_.reduceCtas) + " must be at least 1");
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
  // Peer access between every pair of distinct devices that supports it. Copies between devices without it
  // still work (the runtime stages them), only slower.
  std::vector<int> unique;
  for (int d : devices) {
    bool seen = false;
    for (int u : unique) seen = seen || u == d;
    if (!seen) unique.push_back(d);
  }
  enablePeerAccess(unique);
  // The small-message kernel dereferences peer pointers: every pair of devices needs peer access.
  smallBytes_ = config.engine == concclEngineCopy ? 0 : config.smallMessageBytes;
  for (int a : unique) {
    for (int b : unique) {
      int can = 1;
      if (a != b) CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) smallBytes_ = 0;
    }
  }

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

void CudaExecutor::prepareCall(const CallBinding& binding, const std::vector<int>& ranks) {
  if (!claimer_ || aborted_.load(std::memory_order_acquire)) return;
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
  smallBytes_ = config.engine == concclEngineCopy ? 0 : config.smallMessageBytes;
  for (int r = 0; r < n; ++r) {
    if (r == topo.localRank) continue;
    int can = 1;
    if (topo.devices[r] == device) {
      can = topo.pids[r] == topo.pids[topo.localRank] ? 1 : 0;
    } else {
      CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, topo.devices[r]));
    }
    if (!can) smallBytes_ = 0;
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
  std::string mine(sizeof(BufferExport) + sizeof(uint64_t), '\0');
  if (self.scratch) {
    BufferExport e = exportBuffer(localRank_, self.scratch.get(), self.scratch.bytes(), "scratch");
    std::memcpy(mine.data(), &e, sizeof(e));
  }
  const uint64_t localSmall = smallBytes_;
  std::memcpy(mine.data() + sizeof(BufferExport), &localSmall, sizeof(localSmall));
  std::vector<std::string> all = topo.allGather(mine);
  CONCCL_ASSERT(static_cast<int>(all.size()) == n);
  for (int r = 0; r < n; ++r) {
    CONCCL_ASSERT(all[static_cast<size_t>(r)].size() == mine.size());
    uint64_t small = 0;
    std::memcpy(&small, all[static_cast<size_t>(r)].data() + sizeof(BufferExport), sizeof(small));
    smallBytes_ = std::min<size_t>(smallBytes_, small);
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

void CudaExecutor::checkBuffer(int rank, const void* ptr, size_t bytes, const char* what) const {
  CONCCL_ASSERT(rank >= 0 && rank < static_cast<int>(devices_.size()));
  DeviceGuard guard(devices_[rank]);
  checkedPointer(rank, ptr, bytes, what);
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
                     "exportable). Allocate it with cudaMalloc or concclMemAlloc");
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
      CONCCL_THROW(concclInvalidArgument, std::string("cudaIpcGetMemHandle refused the allocation of a buffer (") +
                                              cudaGetErrorString(err) +
                                              "): only cudaMalloc memory can be shared with other processes");
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
  CONCCL_ASSERT(processMode_);
  std::lock_guard<std::mutex> lock(importMutex_);
  auto it = imports_.find(std::make_pair(owner, allocId));
  if (it == imports_.end()) return;
  const int64_t pid = pids_[static_cast<size_t>(owner)];
  if (pid != static_cast<int64_t>(::getpid())) {
    IpcImportTable::instance().release(pid, allocId, devices_[static_cast<size_t>(localRank_)]);
  }
  imports_.erase(it);
}

void CudaExecutor::closeAllImports() {
  std::vector<std::pair<int, uint64_t>> keys;
  {
    std::lock_guard<std::mutex> lock(importMutex_);
    for (const auto& [key, base] : imports_) keys.push_back(key);
  }
  for (const auto& [owner, allocId] : keys) closeImport(owner, allocId);
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
  const cudaStream_t main = binding.streams[rank];
  // Two ranks on one stream deadlock on the first handshake (each waits for a signal queued behind its own
  // wait): refuse instead of hanging.
  for (int p = 0; p < schedule.nranks; ++p) {
    if (p != rank && ranks_[p]->local && binding.streams[p] == main && schedule.nranks > 1) {
      CONCCL_THROW(concclInvalidUsage, "ranks " + std::to_string(rank) + " and " + std::to_string(p) +
                                           " were called with the same stream " + describeStream(main) +
                                           "; every rank needs its own stream");
    }
  }
  const DriverApi& cu = driverApi();
  DeviceGuard guard(s.device);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(main, &capture));

  const std::vector<void*>& myBuffers = binding.buffers[rank];
  auto resolve = [&](const sched::Location& loc) -> char* {
    void* base = nullptr;
    if (loc.buffer == sched::kScratch) {
      base = ranks_[loc.rank]->scratchAddress;
    } else {
      const std::vector<void*>& bufs = loc.rank == rank ? myBuffers : binding.buffers[loc.rank];
      CONCCL_ASSERT(loc.buffer >= 0 && loc.buffer < static_cast<int>(bufs.size()));
      base = bufs[loc.buffer];
    }
    CONCCL_ASSERT(base != nullptr);
    return static_cast<char*>(base) + loc.offset;
  };

  // Small programs run every op on M. Forking a lane off M and joining it back costs two CUDA calls each way
  // (~2-4 us apiece in our VM, docs/cuda-executor.md), far more than the parallel copy queues gain for a few
  // KiB. Putting lane ops on M only adds ordering (it is the host executor's sequential order), so it cannot
  // deadlock where the schedule does not.
  // Bytes each rank's program copies: from the schedule when the builder filled them in.
  // Bytes each rank's program copies, and whether it fits the small-message kernel's tables: from the schedule
  // when the builder filled them in (hand-made schedules: from the programs).
  const bool haveStats = schedule.copyBytes.size() == schedule.programs.size() &&
                         schedule.activeOps.size() == schedule.programs.size() &&
                         schedule.reduceInputs.size() == schedule.programs.size();
  auto copyBytesOf = [&](int r) {
    return haveStats ? schedule.copyBytes[static_cast<size_t>(r)]
                     : sched::programCopyBytes(schedule.programs[static_cast<size_t>(r)]);
  };
  // Every reduction has at most kSmallMaxPointers (< 256) inputs when their total is within it.
  auto fitsSmallKernel = [&](int r) {
    const sched::RankProgram& program = schedule.programs[static_cast<size_t>(r)];
    const size_t ops = haveStats ? schedule.activeOps[static_cast<size_t>(r)] : sched::programActiveOps(program);
    const size_t inputs =
        haveStats ? schedule.reduceInputs[static_cast<size_t>(r)] : sched::programReduceInputs(program);
    return ops <= static_cast<size_t>(kSmallMaxOps) && inputs <= static_cast<size_t>(kSmallMaxPointers);
  };
  const size_t programBytes = copyBytesOf(rank);
  const bool onlyMain = programBytes <= kSingleStreamProgramBytes;

  // Small-message path: the whole program as one 1-CTA kernel (small_program_kernel.h), when it fits its tables.
  // The choice is made for the whole call, from every rank's program (each rank has the full schedule), so all
  // ranks of a call take the same path. Mixing was measured unsafe: a kernel that read data right after a
  // copy-engine rank's flag (a stream write after its copy) saw stale data in graph replays on the H200.
  // The tables' limits are checked for every rank's program too: a rank whose program did not fit would
  // otherwise fall back to copy engines alone while its peers ran the kernel.
  bool smallCall = smallBytes_ > 0 && programBytes <= smallBytes_;
  for (int p = 0; smallCall && p < schedule.nranks; ++p) {
    smallCall = copyBytesOf(p) <= smallBytes_ && fitsSmallKernel(p);
  }
  if (smallCall) {
    checkSmallKernelError(s);
    SmallProgram& p = s.smallProgram;
    p.numOps = 0;
    p.dtype = concclUint8;
    p.op = concclSum;
    p.abortWord = abortWordDevice_;
    p.errorWord = s.smallKernelErrorDevice;
    p.timeoutNs = static_cast<uint64_t>(config_.timeoutMs) * 1000000ull;
    const bool eager = capture == cudaStreamCaptureStatusNone;
    p.doneCounter = eager ? reinterpret_cast<uint32_t*>(s.doneCounterDevice) : nullptr;
    p.doneValue = s.launches + 1;
    int pointers = 0;
    for (const sched::Op& op : schedule.programs[rank].ops) {
      if (const auto* copy = std::get_if<sched::Copy>(&op); copy != nullptr && copy->bytes == 0) continue;
      if (const auto* reduce = std::get_if<sched::Reduce>(&op); reduce != nullptr && reduce->count == 0) continue;
      CONCCL_ASSERT(p.numOps < kSmallMaxOps);  // fitsSmallKernel checked every rank above
      SmallOp& out = p.ops[p.numOps++];
      out = SmallOp{};
      if (const auto* copy = std::get_if<sched::Copy>(&op)) {
        out.kind = kSmallCopy;
        out.src = resolve(copy->src);
        out.dst = resolve(copy->dst);
        out.size = copy->bytes;
      } else if (const auto* signal = std::get_if<sched::Signal>(&op)) {
        out.kind = kSmallSignal;
        out.flag = reinterpret_cast<uint32_t*>(devFlagTable_[signal->peer] + sizeof(uint32_t) * signal->slot);
      } else if (const auto* wait = std::get_if<sched::Wait>(&op)) {
        out.kind = kSmallWait;
        out.flag = reinterpret_cast<uint32_t*>(devFlagTable_[rank] + sizeof(uint32_t) * wait->slot);
      } else if (const auto* reduce = std::get_if<sched::Reduce>(&op)) {
        CONCCL_ASSERT(pointers + static_cast<int>(reduce->inputs.size()) <= kSmallMaxPointers);
        out.kind = kSmallReduce;
        out.inputs = static_cast<uint8_t>(reduce->inputs.size());
        out.firstInput = static_cast<uint16_t>(pointers);
        for (const auto& in : reduce->inputs) p.pointers[pointers++] = resolve(in);
        out.dst = resolve(reduce->output);
        out.size = reduce->count;
        p.dtype = reduce->dtype;
        p.op = reduce->op;
      }
    }
    launchSmallProgram(p, main);
    if (eager) ++s.launches;
    return;
  }

  // The lane rule of the execution model: a lane op is ordered after every M op that precedes it. Track how
  // many ops M has received; a lane waits on M (through forkEvent) only when M moved since it last did.
  int64_t mainOps = 0;
  int64_t forkRecordedAt = -1;
  std::fill(s.laneSyncedAt.begin(), s.laneSyncedAt.end(), -1);
  std::fill(s.laneUsed.begin(), s.laneUsed.end(), false);
  auto streamFor = [&](int lane) -> cudaStream_t {
    if (lane == sched::kMainStream || onlyMain) {
      ++mainOps;
      return main;
    }
    CONCCL_ASSERT(lane >= 0 && lane < config_.lanes);
    const size_t l = static_cast<size_t>(lane);
    // laneSyncedAt starts at -1, so the first op of each lane in a call forks the lane off M: that is the
    // "program start" rule, and under capture it is what pulls the lane into the caller's graph.
    if (s.laneSyncedAt[l] != mainOps) {
      if (forkRecordedAt != mainOps) {
        CUDA_CHECK(cudaEventRecord(s.forkEvent.get(), main));
        forkRecordedAt = mainOps;
      }
      CUDA_CHECK(cudaStreamWaitEvent(s.lanes[l].get(), s.forkEvent.get(), 0));
      s.laneSyncedAt[l] = mainOps;
    }
    s.laneUsed[l] = true;
    return s.lanes[l].get();
  };

  // Consecutive memory operations on M (Waits, and Signals that run on M) are enqueued together: one
  // cuStreamBatchMemOp, executed in order. The batch is flushed before any other op, so the ordering rules of the
  // execution model are unchanged; only the number of CUDA calls drops (each costs ~3-4 us in our VM).
  std::vector<CUstreamBatchMemOpParams>& batch = s.pendingWaits;
  batch.clear();
  auto flushBatch = [&] {
    if (batch.empty()) return;
    streamFor(sched::kMainStream);
    for (size_t first = 0; first < batch.size(); first += kMaxBatchMemOps) {
      const auto count = static_cast<unsigned int>(std::min(kMaxBatchMemOps, batch.size() - first));
      CU_CHECK(cu.streamBatchMemOp(reinterpret_cast<CUstream>(main), count, batch.data() + first, 0));
    }
    batch.clear();
  };
  auto writeOp = [](CUdeviceptr address, uint32_t value) {
    CUstreamBatchMemOpParams op{};
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = address;
    op.writeValue.value = value;
    // The default (not NO_MEMORY_BARRIER): the stream's earlier writes are visible before the flag is.
    op.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
    return op;
  };
  auto onMain = [&](int lane) { return lane == sched::kMainStream || onlyMain; };

  for (const sched::Op& op : schedule.programs[rank].ops) {
    const auto* signalOp = std::get_if<sched::Signal>(&op);
    const bool batched = std::holds_alternative<sched::Wait>(op) || (signalOp != nullptr && onMain(signalOp->lane));
    if (!batched) flushBatch();
    if (const auto* copy = std::get_if<sched::Copy>(&op)) {
      if (copy->bytes == 0) continue;
      char* dst = resolve(copy->dst);
      const char* src = resolve(copy->src);
      cudaStream_t stream = streamFor(copy->lane);
      CUDA_CHECK(cudaMemcpyAsync(dst, src, copy->bytes, cudaMemcpyDefault, stream));
    } else if (signalOp != nullptr) {
      const sched::Signal& signal = *signalOp;
      CONCCL_ASSERT(signal.peer >= 0 && signal.peer < schedule.nranks && signal.slot >= 0 && signal.slot < slots_);
      const CUdeviceptr flag = devFlagTable_[signal.peer] + sizeof(uint32_t) * static_cast<size_t>(signal.slot);
      if (batched) {
        batch.push_back(writeOp(flag, 1));
      } else {
        cudaStream_t stream = streamFor(signal.lane);
        CU_CHECK(cu.streamWriteValue32(reinterpret_cast<CUstream>(stream), flag, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
      }
    } else if (const auto* wait = std::get_if<sched::Wait>(&op)) {
      CONCCL_ASSERT(wait->slot >= 0 && wait->slot < slots_);
      const CUdeviceptr flag = devFlagTable_[rank] + sizeof(uint32_t) * static_cast<size_t>(wait->slot);
      // Wait for the constant 1 and consume it by writing 0: no sequence numbers, so a captured graph
      // replays correctly any number of times.
      CUstreamBatchMemOpParams w{};
      w.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
      w.waitValue.address = flag;
      w.waitValue.value = 1;
      w.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
      batch.push_back(w);
      batch.push_back(writeOp(flag, 0));
    } else if (const auto* reduce = std::get_if<sched::Reduce>(&op)) {
      if (reduce->count == 0) continue;
      ReduceArgs args;
      if (reduce->inputs.size() > static_cast<size_t>(kMaxReduceInputs)) {
        CONCCL_THROW(concclNotSupported, "a reduction over " + std::to_string(reduce->inputs.size()) +
                                             " inputs exceeds the kernel's limit of " +
                                             std::to_string(kMaxReduceInputs));
      }
      args.k = static_cast<int>(reduce->inputs.size());
      for (int j = 0; j < args.k; ++j) args.inputs[j] = resolve(reduce->inputs[static_cast<size_t>(j)]);
      args.output = resolve(reduce->output);
      args.count = reduce->count;
      streamFor(sched::kMainStream);
      launchReduce(args, reduce->dtype, reduce->op, config_.reduceCtas, main);
    }
  }

  // A captured launch must not write the marker: its replays would write a stale count, and the graph's replays
  // are the caller's to synchronise. Eager launches write it after everything else on M (the write carries a
  // memory barrier), in the last batch when no lane must be joined first.
  const bool eager = capture == cudaStreamCaptureStatusNone;
  const bool lanesUsed = std::find(s.laneUsed.begin(), s.laneUsed.end(), true) != s.laneUsed.end();
  if (eager && !lanesUsed) batch.push_back(writeOp(s.doneCounterDevice, s.launches + 1));
  flushBatch();
  // Program end: M continues only after every lane used in this call has finished.
  for (size_t l = 0; l < s.laneUsed.size(); ++l) {
    if (!s.laneUsed[l]) continue;
    CUDA_CHECK(cudaEventRecord(s.joinEvents[l].get(), s.lanes[l].get()));
    CUDA_CHECK(cudaStreamWaitEvent(main, s.joinEvents[l].get(), 0));
  }
  if (eager && lanesUsed) {
    CU_CHECK(cu.streamWriteValue32(reinterpret_cast<CUstream>(main), s.doneCounterDevice, s.launches + 1,
                                   CU_STREAM_WRITE_VALUE_DEFAULT));
  }
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
    for (auto& l : s.lanes) l.leak();
    s.flags.leak();
    s.doneCounter.leak();  // the GPU may still write the marker
    s.smallKernelError.leak();
    s.scratch.leak();
    return;
  }
  // Peers may still hold this rank's flag address in their queued work only if they did not drain; with
  // every rank drained in turn (destroy), nothing references it any more.
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
