// ProcessClique (core/process_clique.h), part: deferred calls and the proxy thread that finishes them.
//
// NCCL's contract is that a call returns once its work is enqueued, whatever the peers are doing: PyTorch issues
// p2p and collectives on different communicators in different orders on different ranks (pipeline parallelism
// beside data parallelism), runs ahead of its peers on the CPU, and aborts from a watchdog thread. A call that
// waited on the host for its peers' buffer addresses broke all three. Here such a call is deferred instead:
//   - on the caller's thread, the executor records where the caller's stream reached the call and makes that stream
//     wait on the GPU for the call (exec::DeferredCall, exec/cuda/deferred_launch.h); the call's stream becomes the
//     executor's launch stream, and the ticket goes to the proxy queue; the caller returns;
//   - the proxy thread (one per communicator, started by the first deferred call) finishes the calls in order with
//     the blocking code (finishCall / finishRegular: the same rendezvous, checks and program), launching each on the
//     launch stream, and then releases the caller's stream. Data moves exactly as it would have: no SM is added.
// While anything is deferred, every later call of the rank is deferred too (calls launch in call order, they share
// the rank's flags and scratch). A call that cannot be deferred waits for the proxy to drain, then runs on its
// caller's thread. A failure found by the proxy cannot be returned by a call that has already returned: it puts the
// communicator out of service (concclCommGetAsyncError, and the next call), the caller's stream is released in
// order, and the later deferred calls fail at once.
#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "base/logging.h"
#include "base/scope_exit.h"
#include "core/process_clique.h"
#include "core/process_segment.h"

namespace conccl {

bool ProcessClique::deferrable(const RankArgs& mine) const {
  // Chunk and input events are recorded / waited on the program's stream between its ops: a caller that waits on
  // such an event before the proxy recorded it would not wait at all. Ranks that are threads of one process
  // (concclCommInitRank per thread, nccl-tests -t) share one CUDA context, so one rank's gate Wait can sit in the
  // hardware queue of another rank's launch stream, which the probe of this rank's own streams cannot see: they keep
  // the blocking form.
  return config_.deferCalls && !ranksShareProcess_ && mine.chunkEvents.empty() && mine.inputEvents.empty();
}

bool ProcessClique::usesPoolMemory(const RankArgs& mine) const {
  if (mine.kind == sched::CollKind::kSendRecv) {
    for (void* p : mine.p2pBuffers) {
      if (p != nullptr && executor_->isPoolMemory(rank_, p)) return true;
    }
    return false;
  }
  const PoolBuffers pool = poolBuffersOf(mine);
  return pool.send || pool.recv;
}

ProcessClique::PoolBuffers ProcessClique::poolBuffersOf(const RankArgs& mine) const {
  PoolBuffers pool;
  pool.send = mine.sendbuff != nullptr && executor_->isPoolMemory(rank_, mine.sendbuff);
  if (mine.recvbuff == mine.sendbuff) {
    pool.recv = pool.send;
  } else {
    pool.recv = mine.recvbuff != nullptr && executor_->isPoolMemory(rank_, mine.recvbuff);
  }
  return pool;
}

bool ProcessClique::proxyBusy() {
  std::lock_guard<std::mutex> lock(proxyMutex_);
  return proxyPending_ > 0;
}

bool ProcessClique::slotFreeNow(uint64_t seq) {
  if (seq < kRingEntries) return true;
  const uint64_t previous = seq - kRingEntries;
  {
    std::lock_guard<std::mutex> lock(matchMutex_);
    matchPublishedLocked();
    if (!unmatched_.empty() && unmatched_.front().seq <= previous) return false;
  }
  for (int p = 0; p < nranks_; ++p) {
    if (p != rank_ && layout_->rank(p).consumed.load(std::memory_order_acquire) <= previous) return false;
  }
  return true;
}

bool ProcessClique::peersPublished(uint64_t seq) const {
  for (int p = 0; p < nranks_; ++p) {
    if (p != rank_ && layout_->entry(p, seq).published.load(std::memory_order_acquire) != seq + 1) return false;
  }
  return true;
}

bool ProcessClique::deferToProxy(CallTicket& ticket, std::optional<OwnPart> own) {
  return enqueueDeferred(ticket, std::move(own), nullptr);
}

bool ProcessClique::deferEarlyLaunch(CallTicket& ticket, std::vector<Assumption>& assumed) {
  return enqueueDeferred(ticket, std::nullopt, &assumed);
}

bool ProcessClique::enqueueDeferred(CallTicket& ticket, std::optional<OwnPart> own,
                                    std::vector<Assumption>* earlyLaunch) {
  RankArgs& mine = *ticket.call->args[static_cast<size_t>(rank_)];
  std::string whyNot;
  std::optional<exec::DeferredCall> gate = executor_->deferCall(rank_, mine.stream, &whyNot);
  if (!gate) {
    if (whyNot != lastNoDeferReason_) {
      lastNoDeferReason_ = whyNot;
      CONCCL_INFO(rank_, device_, ticket.what + " is finished on the caller's thread (" +
                                      (earlyLaunch ? "launched there" : "waiting on the host for its peers") +
                                      "): " + whyNot);
    }
    return false;
  }
  CONCCL_TRACE(rank_, device_,
               "defer " + ticket.what + " (seq " + std::to_string(ticket.call->seq) + "): ticket " +
                   std::to_string(gate->ticket) + ", caller's stream " + addressText(mine.stream) + " gated" +
                   (earlyLaunch ? ", launched early by the proxy" : ""));
  mine.stream = gate->launchStream;  // the program runs there, as if it were the caller's stream
  mine.deferred = true;
  // A symmetric call is bound already (trySymmetric), with the caller's stream.
  if (earlyLaunch) ticket.call->binding.streams[static_cast<size_t>(rank_)] = gate->launchStream;
  std::string startFailure;
  {
    std::lock_guard<std::mutex> lock(proxyMutex_);
    // Moved only now: a call the executor refused to defer is launched by its caller with its assumptions whole.
    std::optional<std::vector<Assumption>> assumed;
    if (earlyLaunch) assumed = std::move(*earlyLaunch);
    proxyQueue_.push_back(DeferredItem{ticket, *gate, std::move(own), std::move(assumed), false});
    ++proxyPending_;
    if (!proxy_.joinable()) {
      stopProxy_ = false;
      try {
        proxy_ = std::thread([this] { proxyLoop(); });
      } catch (const std::system_error& e) {
        proxyQueue_.pop_back();
        --proxyPending_;
        startFailure = std::string("cannot start the proxy thread: ") + e.what();
      }
    }
  }
  if (!startFailure.empty()) {
    // The caller's stream already waits for this ticket: release it. The call may be published already (the peers
    // expect this rank's part), so the communicator cannot go on.
    executor_->endDeferred(rank_, *gate);
    fail(concclSystemError, startFailure);
    CONCCL_THROW(concclSystemError, startFailure);
  }
  proxyCv_.notify_all();
  return true;
}

void ProcessClique::waitForProxyIdle(const std::string& what) {
  std::unique_lock<std::mutex> lock(proxyMutex_);
  if (proxyPending_ == 0) return;
  // Each deferred call is bounded by the timeout, and once one fails the others fail at once: one timeout and a
  // margin bound the whole queue.
  const auto limit = std::chrono::milliseconds(config_.timeoutMs) + std::chrono::seconds(1);
  if (!proxyCv_.wait_for(lock, limit, [this] { return proxyPending_ == 0; })) {
    lock.unlock();
    const std::string reason = what + " on rank " + std::to_string(rank_) + " waited " +
                               std::to_string(limit.count()) + " ms for the deferred calls before it";
    fail(concclTimeout, reason);
    CONCCL_THROW(concclTimeout, reason);
  }
}

void ProcessClique::proxyLoop() {
  exec::relaxCaptureModeOfThisThread();  // its launches map peers' buffers: never inside a caller's global capture
  for (;;) {
    DeferredItem item;
    {
      std::unique_lock<std::mutex> lock(proxyMutex_);
      proxyCv_.wait(lock, [this] { return stopProxy_ || !proxyQueue_.empty(); });
      if (proxyQueue_.empty()) return;  // stopped, and nothing left
      item = std::move(proxyQueue_.front());
      proxyQueue_.pop_front();
    }
    runDeferred(item);
    {
      std::lock_guard<std::mutex> lock(proxyMutex_);
      --proxyPending_;
    }
    proxyCv_.notify_all();
  }
}

void ProcessClique::runDeferred(DeferredItem& item) {
  // Nothing may escape this thread (std::terminate): every failure becomes the communicator's error.
  auto failWith = [this, &item](concclResult_t code, const std::string& message) {
    CONCCL_WARN(rank_, device_, "deferred " + item.ticket.what + " failed: " + message);
    fail(code, message);
  };
  if (item.abandonOnly) {
    try {
      abandonNow(item.ticket);
    } catch (const Error& e) {
      failWith(e.code(), e.message());
    }
    return;
  }
  // The call's host part is over when this returns, whatever happened (its peers' retirement log records wait for it).
  ScopeExit hostDone([&] {
    if (item.ticket.call && item.ticket.call->args[static_cast<size_t>(rank_)]->kind != sched::CollKind::kSendRecv) {
      noteHostDone(item.ticket.call->seq);
    }
  });
  try {
    executor_->beginDeferred(rank_, item.gate);
    if (item.earlyLaunch) {
      checkHealthy();
      launchEarly(*item.ticket.call, item.ticket, std::move(*item.earlyLaunch));
    } else if (item.own) {
      checkHealthy();
      finishRegular(item.ticket, *item.own);
    } else {
      finishCall(item.ticket);
    }
  } catch (const Error& e) {
    failWith(e.code(), e.message());
  } catch (const std::exception& e) {
    failWith(concclInternalError, std::string("unexpected exception: ") + e.what());
  } catch (...) {
    failWith(concclInternalError, "unknown exception");
  }
  // In launch-stream order: after this call's program (if it was launched) and every earlier one.
  CONCCL_TRACE(rank_, device_, "open ticket " + std::to_string(item.gate.ticket) + " (" + item.ticket.what + ")");
  try {
    executor_->endDeferred(rank_, item.gate);
  } catch (const Error& e) {
    failWith(e.code(), e.message());
  }
}

void ProcessClique::stopProxy() {
  {
    std::lock_guard<std::mutex> lock(proxyMutex_);
    stopProxy_ = true;
  }
  proxyCv_.notify_all();
  if (proxy_.joinable()) proxy_.join();
}

}  // namespace conccl
