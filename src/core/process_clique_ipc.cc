// ProcessClique (core/process_clique.h), part: IPC retirement: unmapping the peers' allocations they reported freed,
// and the background housekeeping of this rank's own exports (freed ones retired, retired VMM units let go).
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

#include "base/logging.h"
#include "base/types.h"

namespace conccl {

void ProcessClique::closePeerImport(int peer, uint64_t allocId) {
  for (const auto& [id, w] : windows_) {
    if (w.peerAllocIds[static_cast<size_t>(peer)] == allocId) return;  // a window keeps it until deregistered
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
    executor_->releaseRetiredExports(rank_, peersConsumedThrough());
  } catch (const std::exception& e) {
    // Not fatal: the next new export sweeps again, and destroy releases everything. Said once.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      CONCCL_WARN(rank_, device_, std::string("the background sweep of freed exports failed: ") + e.what());
    }
  }
}

}  // namespace conccl
