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
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/logging.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/raii.h"
#include "exec/cuda/reduce_kernel.h"
#include "exec/executor.h"
#include "sched/schedule.h"

namespace conccl::exec {
namespace {

// Programs that copy at most this many bytes run all their ops on the caller's stream (see launch()).
constexpr size_t kSingleStreamProgramBytes = size_t{256} << 10;
// Operations per cuStreamBatchMemOp call (the driver bounds the count; 256 is the documented maximum).
constexpr size_t kMaxBatchMemOps = 128;

std::string describeStream(cudaStream_t s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", static_cast<void*>(s));
  return buf;
}

// Everything one rank owns. Lives until releaseRank(rank).
struct RankState {
  int rank = 0;
  int device = 0;
  std::vector<Stream> lanes;
  std::vector<Event> joinEvents;  // one per lane: "lane reached the end of the program"
  Event forkEvent;                // "M reached this point": lanes wait on it before their next op
  Event doneEvent;                // end of the last non-captured launch, polled by synchronize()
  bool doneRecorded = false;
  // slots x uint32 in pinned, mapped host memory. A Signal is then a stream memory operation (a 32-bit write into
  // host memory, ordered after the stream's earlier work with a memory barrier) instead of a 4-byte copy: it can
  // share one cuStreamBatchMemOp with the waits around it, which halves the CUDA calls of a small collective.
  // Remote cuStreamWriteValue32 into another GPU's memory is not supported from CUDA 13.1; host memory is local to
  // every GPU, so this works for ranks on different GPUs (and, through shared pinned memory, processes) alike.
  PinnedBuffer flags;
  DeviceBuffer scratch;  // config.scratchBytes (may be empty)

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
  ~CudaExecutor() override;

  sched::BuildOptions buildOptions() const override { return options_; }
  void checkBuffer(int rank, const void* ptr, size_t bytes, const char* what) const override;
  void launch(const sched::Schedule& schedule, const CallBinding& binding, int rank) override;
  void synchronize(int rank) override;
  void cancel() override;
  void releaseRank(int rank) override;

 private:
  void initRank(RankState& state);
  // Blocks until the rank's last launch finished, or the deadline; while aborted it keeps re-opening every
  // flag so that queued Waits drain. Returns false on timeout.
  bool drain(RankState& state, std::chrono::milliseconds limit);
  void writeAllFlagsLocked();
  void warnIfStreamsAlias(const std::vector<int>& unique) const;

  Config config_;
  sched::BuildOptions options_;
  std::vector<int> devices_;
  int slots_ = 0;
  std::vector<std::unique_ptr<RankState>> ranks_;
  std::vector<uint32_t*> flagTable_;     // [rank] -> flags (host address), fixed at init
  std::vector<CUdeviceptr> devFlagTable_;  // [rank] -> the same flags as the GPUs address them
  std::atomic<bool> aborted_{false};
  std::mutex lifetimeMutex_;  // cancel() vs releaseRank(): flags stay allocated while cancel writes them
};

CudaExecutor::CudaExecutor(const std::vector<int>& devices, const Config& config) : config_(config), devices_(devices) {
  CONCCL_REQUIRE(!devices.empty(), "the CUDA executor needs at least one rank");
  CONCCL_REQUIRE(config.lanes >= 1, "lanes = " + std::to_string(config.lanes) + " must be at least 1");
  CONCCL_REQUIRE(config.reduceCtas >= 1, "reduceCtas = " + std::to_string(config.reduceCtas) + " must be at least 1");
  options_.scratchBudget = config.scratchBytes;
  options_.lanes = config.lanes;
  options_.pipelineDepth = 2;
  const int n = static_cast<int>(devices.size());
  slots_ = sched::maxSlots(n, options_);
  CONCCL_ASSERT(slots_ >= 0);
  driverApi();  // fail now, not in the middle of a launch, if the driver lacks stream memory operations

  // Peer access between every pair of distinct devices that supports it. Copies between devices without it
  // still work (the runtime stages them), only slower.
  std::vector<int> unique;
  for (int d : devices) {
    bool seen = false;
    for (int u : unique) seen = seen || u == d;
    if (!seen) unique.push_back(d);
  }
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

  for (int d : unique) {
    DeviceGuard guard(d);
    // Never let a launch load a module: see preloadReduceKernels (a lazy load can hang a one-thread group).
    preloadReduceKernels();
  }
  warnIfStreamsAlias(unique);
  for (int r = 0; r < n; ++r) {
    auto state = std::make_unique<RankState>();
    state->rank = r;
    state->device = devices[r];
    initRank(*state);
    ranks_.push_back(std::move(state));
  }
  for (auto& s : ranks_) {
    flagTable_.push_back(s->flags.as<uint32_t>());
    void* dev = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&dev, s->flags.get(), 0));
    devFlagTable_.push_back(reinterpret_cast<CUdeviceptr>(dev));
  }
}

void CudaExecutor::initRank(RankState& s) {
  DeviceGuard guard(s.device);
  for (int l = 0; l < config_.lanes; ++l) {
    s.lanes.push_back(Stream::createNonBlocking());
    s.joinEvents.push_back(Event::createForOrdering());
  }
  s.forkEvent = Event::createForOrdering();
  s.doneEvent = Event::createForOrdering();
  s.flags = PinnedBuffer::allocate(sizeof(uint32_t) * static_cast<size_t>(slots_ > 0 ? slots_ : 1));
  // Zeroed by the CPU before any peer exists that could signal into them: no GPU work, no synchronisation.
  std::memset(s.flags.get(), 0, s.flags.bytes());
  if (config_.scratchBytes > 0) s.scratch = DeviceBuffer::allocate(config_.scratchBytes);
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
}

void CudaExecutor::checkBuffer(int rank, const void* ptr, size_t bytes, const char* what) const {
  CONCCL_ASSERT(rank >= 0 && rank < static_cast<int>(devices_.size()));
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err == cudaErrorInvalidValue) {
    // Older runtimes report unregistered host memory this way; clear the thread's last error.
    (void)cudaGetLastError();
    attr.type = cudaMemoryTypeUnregistered;
  } else {
    CUDA_CHECK(err);
  }
  const int device = devices_[rank];
  if (attr.type == cudaMemoryTypeUnregistered || attr.type == cudaMemoryTypeHost) {
    CONCCL_THROW(concclInvalidArgument, std::string(what) + " is a host pointer, the CUDA backend needs device memory");
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != device) {
    CONCCL_THROW(concclInvalidArgument, std::string(what) + " is memory of device " + std::to_string(attr.device) +
                                            " but the rank runs on device " + std::to_string(device));
  }
  // The whole range must lie inside one allocation: a copy past its end would fault the GPU (or silently
  // corrupt a neighbouring allocation), long after the call returned.
  DeviceGuard guard(device);
  CUdeviceptr base = 0;
  size_t size = 0;
  if (driverApi().memGetAddressRange(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) {
    // Some allocators' ranges are not known to this query (e.g. stream-ordered pools on older drivers): the
    // pointer is device memory of the right GPU, so accept it without the size check rather than refuse it.
    CONCCL_TRACE(rank, device, std::string(what) + ": cuMemGetAddressRange failed, size not checked");
    return;
  }
  const size_t offset = reinterpret_cast<uintptr_t>(ptr) - static_cast<uintptr_t>(base);
  if (offset > size || bytes > size - offset) {
    CONCCL_THROW(concclInvalidArgument, std::string(what) + " is too small: the call needs " + std::to_string(bytes) +
                                            " bytes but its allocation has " + std::to_string(size - offset) +
                                            " bytes from that address");
  }
}

void CudaExecutor::launch(const sched::Schedule& schedule, const CallBinding& binding, int rank) {
  if (aborted_.load(std::memory_order_acquire)) {
    CONCCL_THROW(concclInvalidUsage, "the communicator was aborted; no further calls can run");
  }
  CONCCL_ASSERT(rank >= 0 && rank < static_cast<int>(ranks_.size()));
  RankState& s = *ranks_[rank];
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.released) CONCCL_THROW(concclInvalidUsage, "rank " + std::to_string(rank) + " was already released");
  CONCCL_ASSERT(schedule.nranks == static_cast<int>(ranks_.size()));
  CONCCL_ASSERT(schedule.lanes <= config_.lanes && schedule.slots <= slots_);
  CONCCL_ASSERT(schedule.scratchBytes <= config_.scratchBytes);
  const cudaStream_t main = binding.streams[rank];
  // Two ranks on one stream deadlock on the first handshake (each waits for a signal queued behind its own
  // wait): refuse instead of hanging.
  for (int p = 0; p < schedule.nranks; ++p) {
    if (p != rank && binding.streams[p] == main && schedule.nranks > 1) {
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
      base = ranks_[loc.rank]->scratch.get();
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
  size_t programBytes = 0;
  for (const sched::Op& op : schedule.programs[rank].ops) {
    if (const auto* copy = std::get_if<sched::Copy>(&op)) programBytes += copy->bytes;
  }
  const bool onlyMain = programBytes <= kSingleStreamProgramBytes;

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

  flushBatch();
  // Program end: M continues only after every lane used in this call has finished.
  for (size_t l = 0; l < s.laneUsed.size(); ++l) {
    if (!s.laneUsed[l]) continue;
    CUDA_CHECK(cudaEventRecord(s.joinEvents[l].get(), s.lanes[l].get()));
    CUDA_CHECK(cudaStreamWaitEvent(main, s.joinEvents[l].get(), 0));
  }
  // An event recorded inside a capture cannot be polled later, and the graph's replays are the caller's to
  // synchronise: only eager launches update the "done" marker.
  if (capture == cudaStreamCaptureStatusNone) {
    CUDA_CHECK(cudaEventRecord(s.doneEvent.get(), main));
    s.doneRecorded = true;
  }
}

bool CudaExecutor::drain(RankState& s, std::chrono::milliseconds limit) {
  if (!s.doneRecorded) return true;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto nap = std::chrono::microseconds(20);
  auto lastFlagWrite = std::chrono::steady_clock::time_point{};
  for (;;) {
    cudaError_t status = cudaEventQuery(s.doneEvent.get());
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) CUDA_CHECK(status);
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
  if (s.released) return;
  DeviceGuard guard(s.device);
  if (!drain(s, std::chrono::milliseconds(config_.timeoutMs))) {
    CONCCL_THROW(concclTimeout, "rank " + std::to_string(rank) + " (device " + std::to_string(s.device) +
                                    "): its GPU work did not finish within " + std::to_string(config_.timeoutMs) +
                                    " ms (a peer that never signalled? use concclCommAbort)");
  }
}

void CudaExecutor::writeAllFlagsLocked() {
  // The flags are host memory: plain CPU stores open every one of them, without queueing behind a stuck Wait and
  // without any CUDA call that could fail or block on a failure path. Volatile, so that the stores happen even
  // though the CPU never reads them; the fence publishes them before a later drain poll.
  for (auto& state : ranks_) {
    if (!state || state->released) continue;
    auto* flags = static_cast<volatile uint32_t*>(state->flags.as<uint32_t>());
    const size_t n = state->flags.bytes() / sizeof(uint32_t);
    for (size_t i = 0; i < n; ++i) flags[i] = 1;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void CudaExecutor::cancel() {
  aborted_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lifetime(lifetimeMutex_);
  writeAllFlagsLocked();
}

void CudaExecutor::warnIfStreamsAlias(const std::vector<int>& unique) const {
  // A Wait (semaphore acquire) blocks the hardware queue its stream is mapped to. Streams outnumbering the
  // queues (CUDA_DEVICE_MAX_CONNECTIONS, default 8) share them, and when several ranks share a GPU a Wait can
  // then sit in front of the very Signal it waits for: a deadlock CUDA cannot see. Warn when that can happen.
  for (int d : unique) {
    int ranksHere = 0;
    for (int dev : devices_) ranksHere += dev == d ? 1 : 0;
    if (ranksHere < 2) continue;
    int connections = 8;
    if (const char* env = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS")) connections = std::atoi(env);
    const int streams = ranksHere * (config_.lanes + 1) + 1;
    if (streams > connections) {
      CONCCL_WARN(-1, d,
                  std::to_string(ranksHere) + " ranks share device " + std::to_string(d) + " with about " +
                      std::to_string(streams) + " streams but CUDA_DEVICE_MAX_CONNECTIONS is " +
                      std::to_string(connections) +
                      ": streams share hardware queues, so a rank's wait may block a peer's signal "
                      "(deadlock). Set CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts.");
    }
  }
}

void CudaExecutor::releaseRank(int rank) {
  CONCCL_ASSERT(rank >= 0 && rank < static_cast<int>(ranks_.size()));
  RankState& s = *ranks_[rank];
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.released) return;
  DeviceGuard guard(s.device);
  // cudaFree synchronises the device: freeing while a Wait of this rank still blocks its stream would hang
  // here. Drain first (re-opening flags if aborted); if that fails, leak rather than hang.
  bool drained = false;
  try {
    drained = drain(s, std::chrono::milliseconds(config_.timeoutMs));
  } catch (const Error& e) {
    CONCCL_WARN(rank, s.device, std::string("while releasing: ") + e.what());
  }
  std::lock_guard<std::mutex> lifetime(lifetimeMutex_);
  s.released = true;
  if (!drained) {
    CONCCL_WARN(rank, s.device, "GPU work still pending at release; leaking the rank's streams and memory");
    for (auto& l : s.lanes) l.leak();
    s.flags.leak();
    s.scratch.leak();
    return;
  }
  // Peers may still hold this rank's flag address in their queued work only if they did not drain; with
  // every rank drained in turn (destroy), nothing references it any more.
  s.lanes.clear();
  s.joinEvents.clear();
  s.forkEvent.reset();
  s.doneEvent.reset();
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

}  // namespace conccl::exec
