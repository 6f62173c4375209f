// ProcessClique (core/process_clique.h), part: lifecycle (init, destroy, abort), errors shared through the
// segment, and posting.
// The shared segment it works on is described in core/process_segment.h.
#include "core/process_clique.h"
#include "core/process_segment.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <thread>
#include <variant>

#include "base/host_laps.h"
#include "base/logging.h"
#include "core/tuned_defaults.h"
#include "base/types.h"

namespace conccl {

ProcessClique::ProcessClique(const Config& config, const UniqueIdData& id, int rank, int nranks, int device)
    : config_(config), rank_(rank), nranks_(nranks), device_(device), tag_(uniqueIdTag(id)) {
  CONCCL_REQUIRE(nranks >= 1, "nranks = " + std::to_string(nranks) + " must be at least 1");
  CONCCL_REQUIRE(rank >= 0 && rank < nranks,
                 "rank = " + std::to_string(rank) + " is not in [0, nranks = " + std::to_string(nranks) + ")");
  const auto timeout = std::chrono::milliseconds(config.timeoutMs);
  const int slots = exec::cudaFlagSlots(nranks, config);
  layout_ = std::make_unique<Layout>(nranks, slots);
  const std::string shmName = "/conccl-" + tag_;

  HelloPayload hello{device, config.lanes, config.scratchBytes, slots, config.stageLateCalls ? 1 : 0,
                     config.minChunkBytes, config.stagedMaxBytes};
  std::string payload(sizeof(hello), '\0');
  std::memcpy(payload.data(), &hello, sizeof(hello));
  auto boot = Bootstrap::connect(id, rank, nranks, payload, timeout);
  pids_ = boot->pids();
  ranksShareProcess_ = std::count(pids_.begin(), pids_.end(), pids_[static_cast<size_t>(rank)]) > 1;
  sendsPosted_.assign(static_cast<size_t>(nranks), 0);
  recvsPosted_.assign(static_cast<size_t>(nranks), 0);

  // Every process builds every schedule from the same arguments: the options that shape schedules must agree.
  std::vector<int> devices(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    HelloPayload h{};
    CONCCL_ASSERT(boot->payloads()[static_cast<size_t>(r)].size() == sizeof(h));
    std::memcpy(&h, boot->payloads()[static_cast<size_t>(r)].data(), sizeof(h));
    devices[static_cast<size_t>(r)] = h.device;
    if (h.lanes != hello.lanes || h.scratchBytes != hello.scratchBytes || h.pipelineSlots != hello.pipelineSlots ||
        h.minChunkBytes != hello.minChunkBytes || h.stagedMaxBytes != hello.stagedMaxBytes ||
        h.stageLateCalls != hello.stageLateCalls) {
      auto describe = [](int who, const HelloPayload& x) {
        return "rank " + std::to_string(who) + " has lanes " + std::to_string(x.lanes) + ", scratchBytes " +
               std::to_string(x.scratchBytes) + ", pipeline flags " + std::to_string(x.pipelineSlots) +
               ", minChunkBytes " + std::to_string(x.minChunkBytes) + ", stagedMaxBytes " +
               std::to_string(x.stagedMaxBytes) + ", stageLateCalls " + std::to_string(x.stageLateCalls);
      };
      CONCCL_THROW(concclInvalidUsage, "ranks disagree on the configuration: " + describe(rank, hello) + ", " +
                                           describe(r, h) +
                                           " (set CONCCL_LANES, CONCCL_SCRATCH_BYTES, CONCCL_PIPELINE_DEPTH, "
                                           "CONCCL_MIN_CHUNK_BYTES, CONCCL_STAGED_MAX_BYTES and CONCCL_STAGE_LATE_CALLS alike "
                                           "everywhere)");
    }
  }

  // Rank 0 creates the segment once the bootstrap has proven it is the only rank 0 (a second one fails there with
  // a clear message), the others open it after the barrier.
  if (rank == 0) {
    segment_ = SharedSegment::create(shmName, layout_->totalBytes);
    SegmentHeader& h = *reinterpret_cast<SegmentHeader*>(segment_.data());
    h.magic = kSegmentMagic;
    h.nranks = static_cast<uint32_t>(nranks);
    h.ringEntries = kRingEntries;
  }
  boot->barrier();
  if (rank != 0) segment_ = SharedSegment::open(shmName, layout_->totalBytes);
  layout_->base = static_cast<char*>(segment_.data());
  if (layout_->header().magic != kSegmentMagic || layout_->header().nranks != static_cast<uint32_t>(nranks)) {
    CONCCL_THROW(concclInternalError, "shared segment " + shmName + " does not belong to this communicator");
  }
  layout_->rank(rank).pid.store(static_cast<int64_t>(::getpid()), std::memory_order_release);

  // Every process knows every rank's device now, so all pick the same row of the per-GPU-count defaults. The flag
  // area above was sized with the lanes before this; a row never raises them (core/tuned_defaults.h).
  CONCCL_INFO(rank, device, applyTunedDefaults(config_, distinctGpuCount(devices)));

  exec::ProcessTopology topo;
  topo.localRank = rank;
  topo.devices = devices;
  topo.pids = pids_;
  topo.sharedFlags = layout_->base + layout_->flagsOffset;
  topo.sharedFlagsBytes = layout_->flagsBytes;
  topo.flagStrideBytes = layout_->flagStride;
  topo.allGather = [&boot](const std::string& mine) { return boot->allGather(mine); };
  executor_ = exec::makeCudaProcessExecutor(topo, config_);
  schedules_ = std::make_unique<ScheduleCache>(executor_->buildOptions());
  earlyCheck_ = std::make_unique<EarlyLaunchCheck>(*schedules_, *executor_);
  gpuWatchdog_ = std::make_unique<GpuWatchdog>(
      nranks, timeout,
      [this](int r, uint32_t* launched, uint32_t* completed) {
        return r == rank_ && executor_->gpuProgress(r, launched, completed);
      },
      [this](const std::string& reason) {
        CONCCL_WARN(rank_, device_, "watchdog: " + reason);
        fail(concclTimeout, reason);
      },
      /*startThread=*/true,
      // A peer killed while this rank's stream waits on the GPU for it: found within a polling period (<= 100 ms),
      // not at the timeout. A peer that destroyed its rank and exited is no failure.
      [this] {
        for (int p = 0; p < nranks_; ++p) {
          if (p == rank_ || layout_->rank(p).departed.load(std::memory_order_acquire) != 0) continue;
          const int64_t pid = pids_[static_cast<size_t>(p)];
          if (processAlive(pid)) continue;
          const std::string reason = "rank " + std::to_string(p) + " (pid " + std::to_string(pid) +
                                     ") exited while rank " + std::to_string(rank_) + " had GPU work waiting for it";
          CONCCL_WARN(rank_, device_, "watchdog: " + reason);
          fail(concclSystemError, reason);
          return true;
        }
        return false;
      },
      // After any failure (a dead peer, a disagreement found late, a timeout, an abort): keep this rank's flags open
      // until its launched programs drain, so that the caller's stream returns (GpuWatchdog::ReopenAfterFailure).
      [this] {
        if (!asyncError()) return false;
        executor_->cancel();
        return true;
      },
      // Memory freed since it was exported goes back without waiting for a new export (process_clique_ipc.cc).
      [this] { housekeeping(); });

  // The executor's all-gather above happened after every rank had mapped the segment: its name can go now, and
  // after the barrier (every rank has mapped the peers' scratch) the sockets too.
  if (rank == 0) segment_.unlink();
  boot->barrier();
  boot->close();
  CONCCL_INFO(rank, device,
              "rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " (pid " + std::to_string(::getpid()) +
                  ") joined communicator " + tag_ + ": " + std::to_string(layout_->totalBytes) + " B of shared memory");
}

ProcessClique::~ProcessClique() {
  if (HostLaps::tallying() && logLevel() != LogLevel::kNone) {
    // Asked for with CONCCL_HOST_LAPS=1, so logged at any level but NONE: the process's calls since the last report.
    for (const std::string& line : HostLaps::tallyLines()) {
      logMessage(LogLevel::kInfo, rank_, device_, "host laps of " + line);
    }
  }
  stopProxy();                             // it uses everything below
  if (gpuWatchdog_) gpuWatchdog_->stop();  // it uses the executor
  stopWatchdog();  // it uses the executor and the segment
  // The executor first: it unregisters the flag area that lives in the segment (destroyed after it).
  executor_.reset();
}

void ProcessClique::checkHealthy() const {
  if (auto e = asyncError()) {
    CONCCL_THROW(concclInvalidUsage,
                 "the communicator is out of service after an earlier error (abort or destroy "
                 "it): " +
                     e->message());
  }
}

std::optional<Error> ProcessClique::asyncError() const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) return error_;
  }
  const SegmentHeader& h = layout_->header();
  if (h.errorState.load(std::memory_order_acquire) == 2) {
    return Error(static_cast<concclResult_t>(h.errorCode),
                 "rank " + std::to_string(h.errorRank) + " failed: " + std::string(h.errorMessage));
  }
  return std::nullopt;
}

void ProcessClique::fail(concclResult_t code, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = Error(code, reason);
  }
  // Tell the other processes: the first failure wins, later ones keep theirs local.
  SegmentHeader& h = layout_->header();
  uint32_t expected = 0;
  if (h.errorState.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    h.errorCode = static_cast<int32_t>(code);
    h.errorRank = rank_;
    copyMessage(h.errorMessage, reason);
    h.errorState.store(2, std::memory_order_release);
  }
  executor_->cancel();
}

std::shared_ptr<CallTicket> ProcessClique::post(int rank, RankArgs args) {
  CONCCL_ASSERT(rank == rank_);
  checkHealthy();
  auto ticket = std::make_shared<CallTicket>();
  ticket->rank = rank;
  ticket->call = std::make_shared<PendingCall>();
  // Send/Recv groups are matched pair by pair (their own rings), outside the collectives' sequence: a rank that
  // takes no part in a group never hears of it.
  ticket->call->seq = args.kind == sched::CollKind::kSendRecv ? nextP2PGroup_++ : nextSeq_++;
  ticket->call->args.resize(static_cast<size_t>(nranks_));
  ticket->what = std::string(args.apiName) + " #" + std::to_string(ticket->call->seq);
  ticket->call->args[static_cast<size_t>(rank)] = std::move(args);
  return ticket;
}

void ProcessClique::abandon(CallTicket& ticket) {
  {
    // Behind deferred calls, the ring moves on only once they have been read: keep the order.
    std::lock_guard<std::mutex> lock(proxyMutex_);
    if (proxyPending_ > 0) {
      proxyQueue_.push_back(DeferredItem{ticket, {}, std::nullopt, std::nullopt, true});
      ++proxyPending_;
      proxyCv_.notify_all();
      return;
    }
  }
  abandonNow(ticket);
}

void ProcessClique::abandonNow(CallTicket& ticket) {
  // Every rank abandons the same calls (see Clique::abandon): keep the ring moving past this one. A Send/Recv
  // group published nothing (its partners then time out waiting for it, the group's earlier failure being theirs
  // too only where they shared it).
  if (!ticket.call) return;
  const auto& args = ticket.call->args[static_cast<size_t>(rank_)];
  if (args && args->kind == sched::CollKind::kSendRecv) return;
  noteHostDone(ticket.call->seq);  // it maps nothing
  std::lock_guard<std::mutex> lock(matchMutex_);
  if (unmatched_.empty()) {
    layout_->rank(rank_).consumed.store(ticket.call->seq + 1, std::memory_order_release);
  } else {
    unmatched_.push_back(Unmatched{ticket.call->seq, false, Clock::now(), ticket.what, {}});
  }
}

void ProcessClique::releaseRank(int rank, bool graceful) {
  CONCCL_ASSERT(rank == rank_);
  // Destroy first lets the deferred calls finish (bounded); abort has failed the communicator, so they fail at once.
  // Either way no deferred call is left unfinished when the rank departs, and the proxy is gone before the executor.
  std::optional<Error> proxyError;
  if (graceful) {
    try {
      waitForProxyIdle("concclCommDestroy");
    } catch (const Error& e) {
      proxyError = e;
    }
  }
  stopProxy();
  layout_->rank(rank_).departed.store(1, std::memory_order_release);
  // The watchdog keeps watching the unmatched calls while the streams drain: a peer that never makes one of
  // them ends this wait with the timeout instead of blocking it for ever.
  if (graceful) executor_->synchronize(rank_);
  stopWatchdog();
  executor_->releaseRank(rank_);
  if (proxyError) throw *proxyError;
}

}  // namespace conccl
