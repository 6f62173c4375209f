// ProcessClique (core/process_clique.h), part: IPC retirement: unmapping the peers' allocations they reported freed
// (in a call's entry, or in their retirement logs when their calls stopped: core/retire_log.h), and the background
// housekeeping of this rank's own exports (freed ones retired, logged when no call carries them, retired VMM units let
// go). The shared segment it works on is described in core/process_segment.h.
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

#include "base/logging.h"
#include "base/types.h"

namespace conccl {

void ProcessClique::closePeerImport(int peer, uint64_t allocId) {
  {
    std::lock_guard<std::mutex> lock(windowsMutex_);
    for (const auto& [id, w] : windows_) {
      if (w.peerAllocIds[static_cast<size_t>(peer)] == allocId) return;  // a window keeps it until deregistered
    }
  }
  executor_->closeImport(peer, allocId);
}

void ProcessClique::closeRetiredPeerImports() {
  std::vector<std::pair<int, uint64_t>> retired;
  {
    std::lock_guard<std::mutex> lock(matchMutex_);
    retired.swap(retiredFromPeers_);
  }
  for (const auto& [peer, allocId] : retired) closePeerImport(peer, allocId);
  applyPeerRetirementLogs();
}

void ProcessClique::logIdleRetirements() {
  // While calls go on, their entries carry the retirements (MailboxEntry::retired); the log is for a communicator
  // whose calls stopped: none published since the last housekeeping period.
  const uint64_t published = publishedThrough_.load(std::memory_order_acquire);
  const bool idle = published == publishedAtLastHousekeeping_;
  publishedAtLastHousekeeping_ = published;
  if (!idle) return;
  const size_t logged = executor_->logRetiredExports(rank_, [&](const std::vector<uint64_t>& ids, uint64_t* first) {
    // Read under the executor's export lock, after the retirements: a call published since may name none of them,
    // and a call that took this rank's retirements before them raised publishedThrough_ first (publish()).
    const uint64_t beforeSeq = publishedThrough_.load(std::memory_order_acquire);
    return appendRetirements(layout_->retireLog(rank_), peersLogReadThrough(), ids, beforeSeq, first);
  });
  if (logged > 0) {
    CONCCL_TRACE(rank_, device_,
                 "logged " + std::to_string(logged) + " retired export(s) for the peers (no call for " +
                     std::to_string(GpuWatchdog::kHousekeepingPeriod.count()) + " ms to carry them)");
  }
}

bool ProcessClique::peerLogsHaveNews() const {
  for (int p = 0; p < nranks_; ++p) {
    if (p != rank_ && layout_->retireLog(p).written.load(std::memory_order_acquire) !=
                          layout_->retireRead(rank_, p).load(std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

void ProcessClique::applyPeerRetirementLogs() {
  if (!peerLogsHaveNews()) return;  // the usual case, at the start of every call: one load per peer
  // Records of calls this rank has not finished wait (a call of its own may still map the export for one of them).
  const uint64_t done = hostDoneThrough_.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lock(retireLogMutex_);
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    std::atomic<uint64_t>& cursor = layout_->retireRead(rank_, p);
    const uint64_t from = cursor.load(std::memory_order_relaxed);
    if (layout_->retireLog(p).written.load(std::memory_order_acquire) == from) continue;
    // A close that throws leaves the cursor where it was: the records are applied again later (closing twice is a
    // no-op).
    const uint64_t to = readRetirements(layout_->retireLog(p), from, done, [&](uint64_t id) { closePeerImport(p, id); });
    cursor.store(to, std::memory_order_release);
  }
}

uint64_t ProcessClique::peersLogReadThrough() const {
  uint64_t least = std::numeric_limits<uint64_t>::max();
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || layout_->rank(p).departed.load(std::memory_order_acquire) != 0) continue;  // reads nothing now
    least = std::min(least, layout_->retireRead(p, rank_).load(std::memory_order_acquire));
  }
  return least;
}

uint64_t ProcessClique::peersConsumedThrough() const {
  uint64_t least = std::numeric_limits<uint64_t>::max();
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || layout_->rank(p).departed.load(std::memory_order_acquire) != 0) continue;  // maps nothing now
    least = std::min(least, layout_->rank(p).consumed.load(std::memory_order_acquire));
  }
  return least;
}

void ProcessClique::housekeeping() {
  if (asyncError()) return;  // out of service: destroy or abort releases everything
  try {
    executor_->sweepFreedExports(rank_);
    logIdleRetirements();
    applyPeerRetirementLogs();
    executor_->releaseRetiredExports(rank_, peersConsumedThrough(), peersLogReadThrough());
  } catch (const std::exception& e) {
    // Not fatal: the next new export sweeps again, and destroy releases everything. Said once.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      CONCCL_WARN(rank_, device_, std::string("the background sweep of freed exports failed: ") + e.what());
    }
  }
}

}  // namespace conccl
