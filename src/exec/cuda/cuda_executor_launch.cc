// The CUDA executor's enqueue path (the class: cuda_executor.h). prepareCall runs once per call from the thread
// that completed the rendezvous: first use of new caller streams (queue_claim.h) and the graphs of repeated calls
// (graph_cache.h). launch() then enqueues one rank's program on the caller's stream: the small-message kernel, a
// cached graph, or the copy-engine program op by op (copy_engine_program.h), after the rank's previous call
// (call_order.cc). It never waits for the GPU, and an eager call allocates nothing.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/host_laps.h"
#include "exec/call_path.h"
#include "exec/call_shape_cache.h"
#include "exec/cuda/copy_engine_program.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_executor.h"
#include "exec/cuda/graph_cache.h"
#include "exec/cuda/host_gated_work.h"
#include "exec/cuda/small_program_kernel.h"
#include "exec/cuda/small_program_pack.h"

namespace conccl::exec {


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

namespace {
// Records each of the caller's chunk events (NULL entries skipped) on `stream`, where all blocks have landed.
void recordEach(const std::vector<cudaEvent_t>* events, cudaStream_t stream) {
  if (events == nullptr) return;
  for (cudaEvent_t e : *events) {
    if (e != nullptr) CUDA_CHECK(cudaEventRecord(e, stream));
  }
}
}  // namespace

void CudaExecutor::launch(const sched::Schedule& schedule, const CallBinding& binding, int rank) {
  if (aborted_.load(std::memory_order_acquire)) {
    CONCCL_THROW(concclInvalidUsage, "the communicator was aborted; no further calls can run");
  }
  CONCCL_ASSERT(rank >= 0 && rank < static_cast<int>(ranks_.size()));
  RankState& s = *ranks_[rank];
  CONCCL_ASSERT(s.local);
  // No IPC close starts while this enqueues: it would wait on the device for work that waits for the peers (this
  // call's, if they are late) and hold every CUDA call of the process meanwhile (host_gated_work.h). Taken before the
  // rank's mutex, which the busy probe never takes.
  HostGatedWork::instance().enter();
  struct LeaveGated {
    ~LeaveGated() { HostGatedWork::instance().leave(); }
  } leaveGated;
  // A lap of its own: enter() waits while this process's closer thread unmaps a peer's freed buffer (170-310 us for
  // a 64 MiB VMM unit on one H100), where the first calls on new buffers were seen off their CPU (host_gated_work.h).
  HostLaps::lap(kCloseWaitLap);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.released) CONCCL_THROW(concclInvalidUsage, "rank " + std::to_string(rank) + " was already released");
  CONCCL_ASSERT(schedule.nranks == static_cast<int>(ranks_.size()));
  CONCCL_ASSERT(schedule.lanes <= config_.lanes && schedule.slots <= slots_);
  CONCCL_ASSERT(schedule.scratchBytes <= config_.scratchBytes);
  refuseSharedStream(schedule, binding, rank);
  DeviceGuard guard(s.device);
  const cudaStream_t main = binding.streams[rank];
  const std::vector<cudaEvent_t>* chunks =
      static_cast<size_t>(rank) < binding.chunkEvents.size() && !binding.chunkEvents[static_cast<size_t>(rank)].empty()
          ? &binding.chunkEvents[static_cast<size_t>(rank)]
          : nullptr;
  if (launchesNothing(schedule, rank)) {
    // Nothing to move (exec/call_path.h): no launch, and no ordering after the previous call, which this one cannot
    // disturb. Its (empty) blocks count as landed where the caller's stream reaches the call.
    recordEach(chunks, main);
    return;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(main, &capture));
  const bool eager = capture == cudaStreamCaptureStatusNone;
  if (eager) {
    orderAfterPreviousCall(s, main);
  } else {
    orderAfterPreviousCapturedCall(s, main);
  }
  HostLaps::lap("executor entry");  // rank lock, device, capture query, order after the previous call
  enqueueProgram(s, schedule, binding, rank, main, chunks, eager);
  if (!eager) rememberCapturedCallEnd(s, main);
}

void CudaExecutor::enqueueProgram(RankState& s, const sched::Schedule& schedule, const CallBinding& binding, int rank,
                                  cudaStream_t main, const std::vector<cudaEvent_t>* chunks, bool eager) {
  const LocationResolver resolve(ranks_, binding);
  const sched::RankProgram& program = schedule.programs[static_cast<size_t>(rank)];

  // A call on the rank's bounce regions: its copies in go before the program, or into its cached graph with the
  // copies out (graph_cache.h); otherwise the copies out follow when the caller leaves the regions.
  PoolBounceRegions* bounce = pendingPoolBounce(binding, rank, main);
  const auto r = static_cast<size_t>(rank);
  const InputPieces* inputs =
      r < binding.inputPieces.size() && !binding.inputPieces[r].events.empty() ? &binding.inputPieces[r] : nullptr;
  if (takesSmallPath(schedule, rank)) {
    // One kernel reads every piece: it starts once all of them are ready.
    if (inputs != nullptr) {
      for (cudaEvent_t e : inputs->events) {
        if (e != nullptr) CUDA_CHECK(cudaStreamWaitEvent(main, e, 0));
      }
    }
    if (bounce != nullptr) bounce->enqueueCopiesIn();
    launchSmall(s, program, resolve, main, eager);
    recordEach(chunks, main);  // one kernel moves every block: they are all in place when it ends
    HostLaps::lap("small-program kernel");
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
    // Its laps (graph_cache.cc): "graph lookup" (or the capture of a new shape), "graph launch", "done marker".
    if (makeCallShape(schedule.id, rank, binding, shape) &&
        s.graphs->launch(s, shape, setup, resolve, program, bounce)) {
      return;
    }
  }
  if (bounce != nullptr) {
    bounce->enqueueCopiesIn();
    HostLaps::lap("pool bounce: copies in");
  }
  CopyEngineProgram(s, setup, resolve).enqueue(program);
  HostLaps::lap("eager enqueue");
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

std::optional<DeferredCall> CudaExecutor::deferCall(int rank, cudaStream_t caller, std::string* whyNot) {
  CONCCL_ASSERT(processMode_ && rank == localRank_);
  if (aborted_.load(std::memory_order_acquire)) {
    *whyNot = "the communicator was aborted";
    return std::nullopt;
  }
  if (!deferred_) {
    *whyNot = "the rank was released";
    return std::nullopt;
  }
  // A call on the bounce regions: its copies in go on the caller's stream before the gate the deferred launch waits
  // behind (the proxy launches the program alone, on its own stream).
  if (poolBounce_ && poolBounce_->copiesInPending(caller)) {
    DeviceGuard guard(devices_[static_cast<size_t>(rank)]);
    poolBounce_->enqueueCopiesIn();
  }
  return deferred_->defer(caller, whyNot);
}

void CudaExecutor::beginDeferred(int rank, const DeferredCall& call) {
  CONCCL_ASSERT(processMode_ && rank == localRank_ && deferred_);
  deferred_->begin(call);
}

void CudaExecutor::endDeferred(int rank, const DeferredCall& call) {
  CONCCL_ASSERT(processMode_ && rank == localRank_ && deferred_);
  try {
    deferred_->end(call);
  } catch (const Error&) {
    deferred_->openFromHost(call.ticket);  // a failed context: nothing more runs on the launch stream anyway
    throw;
  }
}

bool CudaExecutor::drainDeferred(int rank, std::chrono::milliseconds limit) {
  CONCCL_ASSERT(processMode_ && rank == localRank_);
  return !deferred_ || deferred_->drain(limit);
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

}  // namespace conccl::exec
