// ProcessClique (core/process_clique.h), part: calls on cudaMallocAsync pool memory moved onto the executor's bounce
// regions (exec/pool_bounce_plan.h says why; exec/cuda/pool_bounce.h holds the regions).
//
// Only this rank's pointers change: its peers see memory they can map (or their own bounce regions) and route the
// call as any other. Not moved: calls staged by size anyway (a few ops), calls captured into a graph (their launch is
// the graph's, and a graph's replays would share the regions with eager calls outside the stream order it captured),
// calls with chunk or input events (their events mark progress in the caller's own buffers), and Send/Recv groups
// (always staged through the receiver's scratch).
#include <algorithm>
#include <string>

#include "base/host_laps.h"
#include "base/logging.h"
#include "core/process_clique.h"

namespace conccl {

bool ProcessClique::enterPoolBounce(RankArgs& mine, bool* poolMemory) {
  if (config_.poolBounceMaxBytes == 0 || mine.kind == sched::CollKind::kSendRecv || !mine.chunkEvents.empty() ||
      !mine.inputEvents.empty() || mine.pushInputs) {
    *poolMemory = usesPoolMemory(mine);
    return false;
  }
  // The queries usesPoolMemory makes, one a pointer: a call on ordinary memory (every call of most jobs) pays nothing
  // more on its enqueue path. Sizes, checks and the plan only for a call on pool memory.
  const PoolBuffers pool = poolBuffersOf(mine);
  *poolMemory = pool.send || pool.recv;
  if (!*poolMemory || stagesThroughScratch(mine)) return false;
  std::vector<size_t> bytes;
  try {
    bytes = sched::bufferBytes(soloCallOf(mine), rank_);
  } catch (const Error&) {
    return false;  // sizes that overflow: the regular path reports them
  }
  CONCCL_ASSERT(bytes.size() == 2);
  // What the call uses decides: the caller may free those buffers right after the call, which is what pool memory
  // changes.
  const exec::BounceBufferArg send{mine.sendbuff, bytes[0], pool.send && bytes[0] > 0};
  const exec::BounceBufferArg recv{mine.recvbuff, bytes[1], pool.recv && bytes[1] > 0};
  *poolMemory = send.pool || recv.pool;
  if (!*poolMemory) return false;
  // The bounce copies read and write the caller's pool buffers, which the call itself then never sees: they are
  // checked here as the regular path checks its buffers (this GPU's memory, large enough). A bad one is not bounced:
  // the call goes on with it, and the regular path reports it on every rank.
  try {
    if (send.pool && send.ptr == recv.ptr) {  // in place: one query for both
      executor_->checkBuffer(rank_, send.ptr, std::max(send.bytes, recv.bytes), "sendbuff", mine.stream);
    } else {
      if (send.pool) executor_->checkBuffer(rank_, send.ptr, send.bytes, "sendbuff", mine.stream);
      if (recv.pool) executor_->checkBuffer(rank_, recv.ptr, recv.bytes, "recvbuff", mine.stream);
    }
  } catch (const Error&) {
    return false;
  }
  HostLaps::lap("pool bounce: pool memory?");
  std::string why;
  std::optional<exec::PoolBouncePlan> plan = exec::planPoolBounce(
      send, recv, /*keepRecvGaps=*/mine.kind == sched::CollKind::kAllToAllv, config_.poolBounceMaxBytes, &why);
  if (!plan) {
    if (logLevel() >= LogLevel::kTrace) CONCCL_TRACE(rank_, device_, std::string(mine.apiName) + " is staged: " + why);
    return false;
  }
  std::optional<std::array<void*, 2>> regions = executor_->enterPoolBounce(rank_, mine.stream, *plan, &why);
  if (!regions) {
    if (!poolBounceRefusalLogged_) {
      poolBounceRefusalLogged_ = true;
      CONCCL_INFO(rank_, device_,
                  "calls on cudaMallocAsync pool memory above CONCCL_STAGED_MAX_BYTES are staged through the peers' "
                  "scratch (their host time grows with their size): no bounce regions: " +
                      why);
    }
    return false;
  }
  mine.sendbuff = plan->place(0, mine.sendbuff, *regions);
  mine.recvbuff = plan->place(1, mine.recvbuff, *regions);
  mine.onBounceRegions = true;
  *poolMemory = false;  // the call now runs on the regions
  return true;
}

void ProcessClique::leavePoolBounce(bool copyOut) {
  executor_->leavePoolBounce(rank_, copyOut);
  HostLaps::lap("pool bounce: left");
}

}  // namespace conccl
