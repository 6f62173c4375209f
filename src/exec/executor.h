// The interface between the communicator (src/core) and the executors (src/exec/host, src/exec/cuda).
// Executors decide *how* a schedule's ops run, never *what* moves (that is src/sched's job).
#pragma once

#include <conccl/conccl.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "exec/pool_bounce_plan.h"
#include "sched/schedule.h"

namespace conccl::exec {

// When the pieces of one rank's sendbuff become readable (concclReduceScatterChunked): block q (blockBytes at
// q * blockBytes) is cut into piecesPerBlock pieces of pieceBytes (the last shorter), and piece j of block q may be
// read once events[q * piecesPerBlock + j] has completed (a null event: at once).
struct InputPieces {
  std::vector<cudaEvent_t> events;
  size_t blockBytes = 0;
  size_t pieceBytes = 0;
  int piecesPerBlock = 0;
};

// The pointers of one call, for every rank of the clique.
struct CallBinding {
  // [rank][buffer index] -> address (nullptr where the rank does not use that buffer). Indices as in
  // sched::bufferBytes(call, rank).
  std::vector<std::vector<void*>> buffers;
  // [rank] -> the stream the rank called with (host backend: null).
  std::vector<cudaStream_t> streams;
  // [rank][buffer index] -> the identity of the allocation holding buffers[rank][buffer] (Executor::checkBuffer's
  // result), kBufferNotUsed where the rank's program does not touch the buffer (e.g. an in-place rank's alias).
  // Filled by a clique that checks every rank's buffers (LocalClique); empty otherwise. An address alone does not
  // name memory: a freed buffer's address may be handed out again, so work an executor caches per call shape
  // (exec/call_shape_cache.h) is keyed on both.
  std::vector<std::vector<uint64_t>> bufferIds;
  // [rank] -> concclAllGatherChunked's events, one per block (null entries skipped); empty for every other call.
  // Only the calling process's ranks have them. The executor records each non-null event once per launch.
  std::vector<std::vector<cudaEvent_t>> chunkEvents;
  // [rank] -> concclReduceScatterChunked's input pieces (InputPieces::events empty: the rank's sendbuff is ready at
  // the call); empty for every other call. The executor makes every op that reads a piece wait for its event.
  std::vector<InputPieces> inputPieces;
  // Run eagerly: neither prepare nor replay a cached graph for this call. Set for a rank that launches without
  // waiting for its peers on a GPU it shares with them (LocalClique, Config::threadStaged 2): capturing and
  // instantiating there can wait for the device, whose queues then hold a peer's Wait for this very rank (seen on one
  // H200, 2026-12-01).
  bool eagerOnly = false;
  // The calling process's rank runs this call on its bounce regions and launches it on its caller's stream
  // (Executor::enterPoolBounce): the launch enqueues the copies in before the program, or replays a cached graph that
  // holds both sides of the copies (exec/cuda/graph_cache.h).
  bool poolBounce = false;
};

// CallBinding::bufferIds values that are not allocation ids.
inline constexpr uint64_t kBufferNotUsed = 0;
inline constexpr uint64_t kAllocationUnknown = ~uint64_t{0};  // checked, but the backend cannot name its allocation

// How one rank's buffer is described to peer processes: the allocation that contains it (CUDA IPC handle of the
// allocation base, because IPC handles only exist for whole allocations) and the offset into it. Plain bytes
// of fixed size, copied through shared memory as they are.
struct BufferExport {
  uint64_t allocId = 0;     // unique id of the allocation in its process (never reused; 0 = none)
  uint64_t base = 0;        // base address of the allocation in the owner's address space
  uint64_t allocBytes = 0;  // size of the allocation
  uint64_t offset = 0;      // of the exported pointer from base
  int64_t pid = 0;          // owner process
  unsigned char handle[64] = {};  // kCudaIpc: cudaIpcMemHandle_t of the allocation base
  // How a peer maps it: kCudaIpc opens `handle`; kVmm asks the owner's handle server for the pieces of VMM unit
  // `allocId` (exec/cuda/vmm_export.h).
  enum Kind : uint32_t { kCudaIpc = 0, kVmm = 1 };
  uint32_t kind = kCudaIpc;
  uint32_t reserved = 0;
};

// A call launched later by another thread than its caller's (exec/cuda/deferred_launch.h): the caller's stream waits
// on the GPU for it; the program runs on `launchStream` as if that were the caller's stream.
struct DeferredCall {
  uint32_t ticket = 0;
  cudaEvent_t reached = nullptr;        // recorded on the caller's stream at the call
  cudaStream_t launchStream = nullptr;  // launch the call's program here (CallBinding::streams[rank])
};

// One executor serves the ranks of a clique that live in this process: every rank (LocalClique), or one rank of
// a clique spread over processes (ProcessClique), which then addresses its peers' memory through imports.
class Executor {
 public:
  virtual ~Executor() = default;

  // Options the schedule builders must use for this executor (scratch budget, lanes, depth). Stable for
  // the executor's life: flags and scratch are sized from them once.
  virtual sched::BuildOptions buildOptions() const = 0;

  // Checks that `ptr` (`bytes` long, bytes > 0) can be used by `rank` with this backend: e.g. device memory
  // of the rank's GPU on CUDA. Throws Error(concclInvalidArgument) naming `what` otherwise. Returns the identity of
  // the allocation holding `ptr` (CUDA: the driver's buffer id, never reused within a process), kAllocationUnknown
  // when the backend cannot name it (the host backend; memory whose allocation the driver does not report).
  // `stream`: the call's stream on this rank (null where there is none: registrations). Memory that a stream-ordered
  // allocation made inside the capture on that stream (CUDA: a graph's memory, mapped only when the graph runs; what
  // PyTorch's cudaMallocAsync backend hands out while capturing) is accepted as device memory no peer can map.
  virtual uint64_t checkBuffer(int rank, const void* ptr, size_t bytes, const char* what,
                               cudaStream_t stream) const = 0;
  // checkBuffer that also tells the allocation it found `ptr` in: [base, base + size) (size 0: the backend cannot
  // tell). A call with many buffers in one allocation (an AllToAll's slices as grouped Sends and Recvs) then checks
  // each allocation once (CheckedAllocations): one driver query instead of one per buffer (an all_to_all_single's own
  // checks took 6 us against an isend's 2 us, one H100, 2026-12-06, docs/results/2026-12-06-h100-1gpu-whole/ call 7).
  struct CheckedRange {
    uintptr_t base = 0;
    size_t size = 0;
    bool covers(const void* ptr, size_t bytes) const {
      const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
      return size != 0 && p >= base && p - base <= size && bytes <= size - (p - base);
    }
  };
  virtual uint64_t checkBufferIn(int rank, const void* ptr, size_t bytes, const char* what, cudaStream_t stream,
                                 CheckedRange* range) const {
    *range = CheckedRange{};
    return checkBuffer(rank, ptr, bytes, what, stream);
  }
  // The allocations one call's buffers were checked in: check() asks the executor only about a buffer none of them
  // covers. For one call only (between calls an allocation may be freed and its place reused). Keeps the last few
  // without allocating (the enqueue path): one it dropped is only checked again.
  class CheckedAllocations {
   public:
    void check(const Executor& executor, int rank, const void* ptr, size_t bytes, const char* what,
               cudaStream_t stream) {
      for (const CheckedRange& r : ranges_) {
        if (r.covers(ptr, bytes)) return;
      }
      CheckedRange range;
      executor.checkBufferIn(rank, ptr, bytes, what, stream, &range);
      if (range.size != 0) ranges_[next_++ % ranges_.size()] = range;
    }

   private:
    std::array<CheckedRange, 4> ranges_{};
    size_t next_ = 0;
  };

  // Runs (host) or enqueues on binding.streams[rank] (CUDA) rank `rank`'s program. Called exactly once per
  // rank per call, possibly concurrently from one thread per rank, in the same call order on every rank.
  // Never blocks longer than the configured timeout; throws conccl::Error on failure.
  virtual void launch(const sched::Schedule& schedule, const CallBinding& binding, int rank) = 0;

  // Called once per call, before any rank launches it, by the one thread that completed the rendezvous (every rank
  // of the call has launched all its earlier calls by then). Work that must not happen inside launch() -- while a
  // peer's stream may already wait on the GPU -- happens here (CUDA: first use of a caller's stream, see
  // docs/cuda-executor.md, Hazards; and capturing a repeated call's graph, see exec/cuda/graph_cache.h). `ranks`: the
  // ranks taking part (all for a collective). Throws conccl::Error; the call then fails on every rank.
  virtual void prepareCall(const sched::Schedule& /*schedule*/, const CallBinding& /*binding*/,
                           const std::vector<int>& /*ranks*/) {}

  // GPU progress of `rank`, for the communicator's watchdog: eager launches issued so far and how many of them the
  // GPU has completed (both wrap at 2^32). Returns false when there is nothing to watch (a host executor, a
  // released or remote rank) or the rank is busy (then the watchdog asks again later). Never blocks.
  virtual bool gpuProgress(int /*rank*/, uint32_t* /*launched*/, uint32_t* /*completed*/) { return false; }

  // What rank `rank`'s part of `schedule` would occupy if launched now (concclCallResources): the same path and CTA
  // decisions launch() makes. Pure: touches no GPU. The host executor runs no kernels (concclPathHost).
  virtual concclCallResources_t callResources(const sched::Schedule& /*schedule*/, int /*rank*/) const {
    concclCallResources_t out{};
    out.path = concclPathHost;
    return out;
  }

  // Blocks until all work launched for `rank` has finished (used by destroy). Bounded by the timeout.
  virtual void synchronize(int rank) = 0;

  // Makes every current and future wait fail promptly (concclCommAbort, or a peer's fatal error).
  virtual void cancel() = 0;

  // Frees `rank`'s resources (called by destroy/abort of that rank; the executor itself goes with the
  // last rank).
  virtual void releaseRank(int rank) = 0;

  // --- Several processes (only executors made by makeCudaProcessExecutor; the others throw NotSupported) ---

  // Checks `ptr` (`bytes` long, a buffer of local rank `rank`) as checkBuffer does, then describes the allocation
  // containing it for the peers. Cached per allocation: the IPC handle is created once. Throws
  // concclInvalidArgument naming `what` for a bad buffer or memory that cannot be shared.
  virtual BufferExport exportBuffer(int rank, const void* ptr, size_t bytes, const char* what);
  // Forgets the export of the allocation containing `ptr` (concclCommDeregister); its id is then handed out by
  // takeRetiredExports so that the peers unmap it.
  virtual void retireExport(int rank, const void* ptr);
  // Allocation ids whose mappings the peers may drop (replaced at the same address, or deregistered); each id
  // is returned once, for the mailbox entry of call `carryingSeq` (exec/retire_after_peers.h: a retired VMM unit stays
  // served until the peers have read past that call).
  virtual std::vector<uint64_t> takeRetiredExports(int rank, uint64_t carryingSeq);
  // Gives back ids taken but not yet sent (they are returned again by the next takeRetiredExports).
  virtual void requeueRetiredExports(int rank, const std::vector<uint64_t>& ids);
  // Hands the retired exports no entry has carried yet to `append` (the communicator's retirement log,
  // core/retire_log.h: it made no call for a while); the ids it takes (the first ones: it returns how many, and the
  // index of the first's record in *firstIndex) are no longer carried by a call's entry. Returns how many it took.
  using RetireLogAppend = std::function<size_t(const std::vector<uint64_t>& ids, uint64_t* firstIndex)>;
  virtual size_t logRetiredExports(int /*rank*/, const RetireLogAppend& /*append*/) { return 0; }
  // Lets go of the retired exports no peer can map any more, given the least call count (`consumed`) the peers have
  // read and the least count of retirement log records they have read (exec/retire_after_peers.h). Cheap when nothing
  // waits.
  virtual void releaseRetiredExports(int /*rank*/, uint64_t /*peersConsumed*/, uint64_t /*peersLogRead*/) {}
  // Retires the exports whose memory was freed (or whose VMM pieces were unmapped) since they were made, without
  // waiting for a new export to sweep them: called in the background (the GPU watchdog's housekeeping), so that the
  // peers drop their mappings at the next call, whatever memory it uses.
  virtual void sweepFreedExports(int /*rank*/) {}
  // The address, in this process, of the buffer `owner` exported: maps the allocation the first time (cached
  // by (owner, allocId)).
  virtual void* importBuffer(int owner, const BufferExport& buffer);
  // Drops the mapping of (owner, allocId) if there is one.
  virtual void closeImport(int owner, uint64_t allocId);
  // Like exportBuffer, but memory that is valid for this rank and yet cannot be shared with CUDA IPC (the VMM API:
  // PyTorch's expandable segments; cudaMallocAsync pools) gives nullopt instead of an error: the call then goes
  // through the peers' scratch (ProcessClique). Bad buffers still throw concclInvalidArgument. `stream`: as for
  // checkBuffer.
  virtual std::optional<BufferExport> exportIfShareable(int rank, const void* ptr, size_t bytes, const char* what,
                                                        cudaStream_t stream);
  // Whether `ptr` is memory of a cudaMallocAsync pool (the caller may cudaFreeAsync it right after a call; CUDA then
  // refuses the pointer in later API calls, whatever the stream order).
  virtual bool isPoolMemory(int /*rank*/, const void* /*ptr*/) const { return false; }
  // A call on pool memory run on the rank's bounce regions instead (exec/pool_bounce_plan.h, exec/cuda/pool_bounce.h;
  // several processes, with the VMM export on). Before the call: maps the regions `plan` needs and orders `stream`
  // after their previous use; returns the regions' bases, or nullopt with the reason in *whyNot (the call then runs on
  // the caller's buffers). The copies in are enqueued by the call's launch (CallBinding::poolBounce) or its deferral.
  // After the call was launched (or failed: `copyOut` false): the copies out on `stream` unless the launch ran them,
  // and the regions' use is marked.
  virtual std::optional<std::array<void*, 2>> enterPoolBounce(int /*rank*/, cudaStream_t /*stream*/,
                                                              const PoolBouncePlan& /*plan*/, std::string* whyNot) {
    *whyNot = "not supported by this executor";
    return std::nullopt;
  }
  virtual void leavePoolBounce(int /*rank*/, bool /*copyOut*/) {}

  // --- Deferred launches (several processes; exec/cuda/deferred_launch.h; the others answer "not supported") ---

  // On the caller's thread: the caller's stream waits for the deferred call; nullopt (reason in *whyNot) when this
  // stream cannot be deferred (captured, hardware queue shared, CUDA_DEVICE_MAX_CONNECTIONS=1).
  virtual std::optional<DeferredCall> deferCall(int rank, cudaStream_t caller, std::string* whyNot);
  // On the launching thread, before the program: its launch stream waits for the caller's stream to reach the call.
  virtual void beginDeferred(int rank, const DeferredCall& call);
  // After the program, or instead of it when the call failed: releases the caller's stream (in launch-stream order;
  // from the host if the launch stream cannot be used).
  virtual void endDeferred(int rank, const DeferredCall& call);
  // Bounded wait for the deferred launches enqueued so far; false on timeout.
  virtual bool drainDeferred(int rank, std::chrono::milliseconds limit);
};

std::unique_ptr<Executor> makeHostExecutor(int nranks, const Config& config);

// True when this build has the CUDA executor and at least one CUDA device is visible.
bool cudaAvailable();
// Number of visible CUDA devices (0 without CUDA).
int cudaDeviceCount();
// Throws Error(concclNotSupported) when built without CUDA.
std::unique_ptr<Executor> makeCudaExecutor(const std::vector<int>& devices, const Config& config);

// A clique spread over processes, as seen from one of them.
struct ProcessTopology {
  int localRank = 0;
  std::vector<int> devices;   // [rank] -> CUDA device (of the rank's own process)
  std::vector<int64_t> pids;  // [rank] -> process (ranks of this process are reached without IPC)
  // Flags of every rank in one host memory region shared by the processes: rank r's flags start at
  // sharedFlags + r * flagStrideBytes. Must stay mapped until the executor is destroyed.
  void* sharedFlags = nullptr;
  size_t sharedFlagsBytes = 0;
  size_t flagStrideBytes = 0;
  // All-gather of one blob per rank among the processes (the bootstrap), used while constructing only.
  std::function<std::vector<std::string>(const std::string&)> allGather;
};
// The calling thread's current CUDA device. Throws concclNotSupported without CUDA.
int cudaCurrentDevice();
// For conccl's own background threads, first thing: their CUDA calls (unmapping a peer's buffer, launching a
// deferred call) must neither fail nor invalidate a graph another thread captures in cudaStreamCaptureModeGlobal
// (PyTorch's torch.cuda.graph), since nothing they do belongs in it. Sets the calling thread's capture interaction
// mode to relaxed. Nothing without CUDA. Relaxed mode does not cover everything: a device-wide wait
// (cudaDeviceSynchronize) from any thread invalidates another thread's global capture (tests/gpu/
// test_gpu_capture_mode.cc), so no background thread of conccl ever makes one.
void relaxCaptureModeOfThisThread();
enum class CaptureStatus { kNone, kActive, kInvalidated };
// The capture status of `stream` now (kNone without CUDA or when CUDA cannot say).
CaptureStatus captureStatusOf(cudaStream_t stream);
// For the length of a call on a stream being captured (`active`): the calling thread's capture mode is relaxed, so
// that what the call does beside its captured work (mapping a peer's buffer with CUDA IPC, allocating scratch) is
// neither refused nor invalidates the caller's capture, as in global mode (PyTorch's) it would. The caller's mode is
// restored at the end. Nothing when not `active` or without CUDA.
class RelaxedCaptureScope {
 public:
  explicit RelaxedCaptureScope(bool active);
  ~RelaxedCaptureScope();
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  bool active_;
  int previousMode_ = 0;  // cudaStreamCaptureMode
};
// concclMemAlloc / concclMemFree: cudaMalloc'd memory on the current device (exportable with CUDA IPC).
void* cudaAllocate(size_t bytes);
void cudaRelease(void* ptr);

// Peer allocations this process has mapped right now (all communicators): tests check that destroy and abort leave
// none behind. Of those, peers' VMM buffers (exec/cuda/vmm_export.h): tests check that calls on VMM memory went
// through them rather than through the staged path.
size_t ipcImportCount();
size_t vmmImportCount();

// Eager calls this process ran as a replay of a cached CUDA graph (all communicators; exec/cuda/graph_cache.h):
// tests check that the cache was used, or not.
size_t graphCacheReplays();
// Of those, replays of programs that use lanes (parallel graph branches): never where ranks share a GPU
// (CudaExecutor::graphCacheable).
size_t graphCacheLaneReplays();
// Of those, replays that ran a call's bounce copies as nodes of the graph (exec/cuda/graph_cache.h; for tests).
size_t graphCacheBounceReplays();

// Number of flags (uint32) per rank a CUDA executor needs for an n-rank clique with this config.
int cudaFlagSlots(int nranks, const Config& config);
// Throws Error(concclNotSupported) when built without CUDA.
std::unique_ptr<Executor> makeCudaProcessExecutor(const ProcessTopology& topology, const Config& config);

}  // namespace conccl::exec
