// ProcessClique (core/process_clique.h), part: symmetric windows: registration, the fast path that launches
// without waiting for the peers, and its watchdog.
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
#include "base/scope_exit.h"
#include "base/types.h"

namespace conccl {

bool ProcessClique::bindSymmetric(PendingCall& pending, const WindowRef (&mine)[2],
                                  std::vector<Assumption>& assumed) const {
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    pending.binding.buffers[static_cast<size_t>(p)].assign(2, nullptr);
    pending.binding.streams[static_cast<size_t>(p)] = nullptr;
  }
  // Every peer location the program touches (copies, and reductions reading the peers in place) must follow from
  // this rank's own window offsets.
  bool bound = true;
  sched::forEachPeerLocation(
      pending.schedule->programs[static_cast<size_t>(rank_)], rank_, [&](const sched::Location& loc) {
        if (!bound || loc.buffer == sched::kScratch) return;
        CONCCL_ASSERT(loc.buffer >= 0 && loc.buffer < 2);
        void*& slot = pending.binding.buffers[static_cast<size_t>(loc.rank)][static_cast<size_t>(loc.buffer)];
        if (slot != nullptr) return;
        const WindowRef& ref = mine[loc.buffer];
        const size_t bytes = sched::bufferBytes(pending.call, loc.rank)[static_cast<size_t>(loc.buffer)];
        slot = ref.id == 0 ? nullptr : peerAddress(loc.rank, ref, bytes);
        if (slot == nullptr) {
          bound = false;
          return;
        }
        assumed.push_back(Assumption{loc.rank, loc.buffer, ref});
      });
  return bound;
}

ProcessClique::WindowRef ProcessClique::findWindow(const void* ptr, size_t bytes) const {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  for (const auto& [id, w] : windows_) {
    const auto base = reinterpret_cast<uintptr_t>(w.base);
    if (addr < base || addr - base >= w.bytes) continue;
    const uint64_t offset = addr - base;
    if (bytes > w.bytes - offset) continue;
    return WindowRef{id, offset};
  }
  return WindowRef{};
}

void* ProcessClique::peerAddress(int peer, const WindowRef& ref, size_t bytes) const {
  auto it = windows_.find(ref.id);
  if (it == windows_.end()) return nullptr;
  const Window& w = it->second;
  if (ref.offset >= w.bytes || bytes > w.bytes - ref.offset) return nullptr;
  return w.peerBase[static_cast<size_t>(peer)] + ref.offset;
}

void ProcessClique::startWatchdog() {
  if (watchdog_.joinable()) return;
  watchdog_ = std::thread([this] { watchdogLoop(); });
}

void ProcessClique::stopWatchdog() {
  {
    std::lock_guard<std::mutex> lock(matchMutex_);
    stopWatchdog_ = true;
  }
  matchCv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void ProcessClique::watchdogLoop() {
  std::unique_lock<std::mutex> lock(matchMutex_);
  auto nap = std::chrono::microseconds(20);
  auto nextLivenessCheck = Clock::now();
  bool cancelled = false;
  while (!stopWatchdog_) {
    if (unmatched_.empty() && unmatchedP2P_.empty()) {
      watchdogParked_ = true;
      matchCv_.wait(lock, [&] { return stopWatchdog_ || !unmatched_.empty() || !unmatchedP2P_.empty(); });
      watchdogParked_ = false;
      nap = std::chrono::microseconds(20);
      continue;
    }
    if (auto e = asyncError()) {
      // Failed here or in another process: open this rank's flags too, so that its streams drain.
      unmatched_.clear();
      unmatchedP2P_.clear();
      if (!cancelled) executor_->cancel();
      cancelled = true;
      continue;
    }
    const bool collectivesMatched = matchPublishedLocked();
    const bool p2pMatched = matchP2PLocked();
    if (collectivesMatched && p2pMatched) continue;
    // The oldest call still waiting for a peer: which peers, since when.
    std::vector<int> waitingFor;
    std::string what;
    Clock::time_point launched;
    if (!collectivesMatched) {
      const Unmatched& u = unmatched_.front();
      for (int p = 0; p < nranks_; ++p) {
        if (p != rank_ && layout_->entry(p, u.seq).published.load(std::memory_order_acquire) != u.seq + 1) {
          waitingFor.push_back(p);
        }
      }
      what = u.what;
      launched = u.launched;
    } else {
      const UnmatchedP2P& u = unmatchedP2P_.front();
      waitingFor.push_back(u.peer);
      what = u.describe(rank_);
      launched = u.launched;
    }
    const auto now = Clock::now();
    const bool checkLiveness = now >= nextLivenessCheck;
    if (checkLiveness) nextLivenessCheck = now + std::chrono::milliseconds(20);
    const Stall stall = stallOf(waitingFor, what, launched, now, checkLiveness);
    if (stall.code != concclSuccess) {
      unmatched_.clear();
      unmatchedP2P_.clear();
      fail(stall.code, stall.reason);
      cancelled = true;
      continue;
    }
    // Peers usually follow within microseconds; back off to 1 ms for a straggler. A call launched meanwhile does not
    // wake the nap (its entry waits for the next pass); stopWatchdog does.
    matchCv_.wait_for(lock, nap);
    if (nap < std::chrono::microseconds(1000)) nap *= 2;
  }
}

ProcessClique::Stall ProcessClique::stallOf(const std::vector<int>& waitingFor, const std::string& what,
                                            Clock::time_point launched, Clock::time_point now,
                                            bool checkLiveness) const {
  std::string missing;
  for (int p : waitingFor) {
    missing += (missing.empty() ? "" : ", ") + std::to_string(p);
    if (layout_->rank(p).departed.load(std::memory_order_acquire) != 0) {
      return {concclInvalidUsage, "rank " + std::to_string(p) + " was destroyed or aborted before it made " + what +
                                      ", which rank " + std::to_string(rank_) +
                                      " had launched (without waiting for its peers)"};
    }
    if (checkLiveness && !processAlive(pids_[static_cast<size_t>(p)])) {
      return {concclSystemError, "rank " + std::to_string(p) + " (pid " + std::to_string(pids_[static_cast<size_t>(p)]) +
                                     ") exited before it made " + what + ", which rank " + std::to_string(rank_) +
                                     " had launched (without waiting for its peers)"};
    }
  }
  if (now - launched >= std::chrono::milliseconds(config_.timeoutMs)) {
    return {concclTimeout, "rank " + std::to_string(rank_) + " launched " + what + " (without waiting for its peers) " +
                               std::to_string(config_.timeoutMs) + " ms ago and rank(s) " + missing +
                               " have not called it"};
  }
  return {};
}

std::vector<exec::BufferExport> ProcessClique::windowRendezvous(uint64_t seq, int32_t kind, uint64_t value,
                                                                const exec::BufferExport& mine,
                                                                const std::optional<Error>& ownError,
                                                                const std::string& what) {
  waitForFreeSlot(seq, what);
  MailboxEntry& out = layout_->entry(rank_, seq);
  out.kind = kind;
  out.dtype = 0;
  out.op = 0;
  out.root = 0;
  out.count = value;
  out.inPlace = 0;
  out.pushInputs = 0;
  out.errorCode = ownError ? static_cast<int32_t>(ownError->code()) : 0;
  copyMessage(out.error, ownError ? ownError->message() : std::string());
  out.buffers[0] = mine;
  out.buffers[1] = exec::BufferExport{};
  out.windowId[0] = out.windowId[1] = 0;
  out.windowOffset[0] = out.windowOffset[1] = 0;
  out.launchedEarly = 0;
  out.retiredCount = 0;  // retired allocations go out with the next collective
  raiseTo(publishedThrough_, seq + 1);  // a registration names an export (logIdleRetirements)
  markPublished(out, seq);

  waitForPeersOf(seq, what);
  std::vector<exec::BufferExport> exports(static_cast<size_t>(nranks_));
  std::optional<Error> firstError;
  std::string diverged;
  for (int p = 0; p < nranks_; ++p) {
    const MailboxEntry& e = layout_->entry(p, seq);
    if (e.kind != kind) {
      diverged = "rank " + std::to_string(p) + " called " + entryName(e.kind) + " where rank " + std::to_string(rank_) +
                 " called " + what + " (every rank must make the same calls in the same order)";
      break;
    }
    if (e.errorCode != 0 && !firstError) {
      firstError = Error(static_cast<concclResult_t>(e.errorCode), "rank " + std::to_string(p) + ": " + e.error);
    }
    if (!firstError && kind == kWindowRegisterKind && e.count != value) {
      firstError = Error(concclInvalidArgument,
                         "ranks disagree on the window size: rank " + std::to_string(rank_) + " registers " +
                             std::to_string(value) + " bytes, rank " + std::to_string(p) + " " +
                             std::to_string(e.count) + " (a symmetric window has one size on every rank)");
    }
    if (kind == kWindowDeregisterKind && e.count != value) {
      // As NCCL allows (PyTorch's deregister_mem_pool goes through a pool's segments in address order, which differs
      // between processes): each rank ends its own window; what the rendezvous guarantees (every rank's work done,
      // so no peer reads or writes any window any more) does not depend on which.
      CONCCL_TRACE(rank_, device_,
                   what + ": rank " + std::to_string(p) + " deregisters its window #" + std::to_string(e.count) +
                       " where this rank deregisters #" + std::to_string(value));
    }
    exports[static_cast<size_t>(p)] = e.buffers[0];
  }
  layout_->rank(rank_).consumed.store(seq + 1, std::memory_order_release);
  if (!diverged.empty()) {
    fail(concclInvalidUsage, diverged);
    CONCCL_THROW(concclInvalidUsage, diverged);
  }
  if (firstError) throw Error(*firstError).addContext(what);
  return exports;
}

uint64_t ProcessClique::registerWindow(int rank, void* ptr, size_t bytes) {
  CONCCL_ASSERT(rank == rank_);
  checkHealthy();
  // In call order, after the deferred calls (which read windows_ on the proxy's thread).
  waitForProxyIdle("concclCommWindowRegister");
  closeRetiredPeerImports();
  const uint64_t seq = nextSeq_++;
  const std::string what = "concclCommWindowRegister #" + std::to_string(seq);
  ScopeExit hostDone([&] { noteHostDone(seq); });  // its mappings are done when this returns
  exec::BufferExport mine{};
  std::optional<Error> ownError;
  try {
    mine = executor_->exportBuffer(rank_, ptr, bytes, "buff");
  } catch (const Error& e) {
    ownError = e;
  }
  const std::vector<exec::BufferExport> exports =
      windowRendezvous(seq, kWindowRegisterKind, bytes, mine, ownError, what);
  Window w;
  w.base = static_cast<char*>(ptr);
  w.bytes = bytes;
  w.peerBase.assign(static_cast<size_t>(nranks_), nullptr);
  w.peerAllocIds.assign(static_cast<size_t>(nranks_), 0);
  try {
    for (int p = 0; p < nranks_; ++p) {
      const exec::BufferExport& e = exports[static_cast<size_t>(p)];
      w.peerAllocIds[static_cast<size_t>(p)] = e.allocId;
      w.peerBase[static_cast<size_t>(p)] = p == rank_ ? w.base : static_cast<char*>(executor_->importBuffer(p, e));
    }
  } catch (Error& e) {
    // The peers consider the window registered: this rank cannot take part in calls on it.
    e.addContext(what + " on rank " + std::to_string(rank_));
    fail(e.code(), e.message());
    throw;
  }
  const uint64_t id = nextWindowId_++;
  std::lock_guard<std::mutex> lock(windowsMutex_);
  windows_.emplace(id, std::move(w));
  return id;
}

void ProcessClique::deregisterWindow(int rank, uint64_t id) {
  CONCCL_ASSERT(rank == rank_);
  checkHealthy();
  auto it = windows_.find(id);
  CONCCL_REQUIRE(it != windows_.end(), "window #" + std::to_string(id) + " is not registered on this communicator");
  waitForProxyIdle("concclCommWindowDeregister");  // as registerWindow
  // This rank's work on the window (and, through the flags, the peers' accesses to this rank's part that the
  // work waited for) ends first; the rendezvous then tells every rank that every rank has got that far.
  executor_->synchronize(rank_);
  const uint64_t seq = nextSeq_++;
  const std::string what = "concclCommWindowDeregister #" + std::to_string(seq);
  ScopeExit hostDone([&] { noteHostDone(seq); });
  windowRendezvous(seq, kWindowDeregisterKind, id, exec::BufferExport{}, std::nullopt, what);
  Window w;
  {
    std::lock_guard<std::mutex> lock(windowsMutex_);
    w = std::move(it->second);
    windows_.erase(it);
  }
  for (int p = 0; p < nranks_; ++p) {
    if (p != rank_) closePeerImport(p, w.peerAllocIds[static_cast<size_t>(p)]);
  }
}

}  // namespace conccl
