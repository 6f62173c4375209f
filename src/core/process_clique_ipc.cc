// ProcessClique (core/process_clique.h), part: IPC retirement: unmapping the peers' allocations they reported freed.
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

}  // namespace conccl
