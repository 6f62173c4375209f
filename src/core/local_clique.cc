#include "core/local_clique.h"

#include <chrono>
#include <set>
#include <sstream>

#include "core/logging.h"
#include "core/types.h"

namespace conccl {

namespace {

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

LocalClique::LocalClique(Config config, std::vector<int> devices, std::unique_ptr<exec::Executor> executor)
    : config_(config),
      devices_(std::move(devices)),
      executor_(std::move(executor)),
      schedules_(executor_->buildOptions()) {
  nextSeq_.assign(devices_.size(), 0);
  pendingP2P_.resize(devices_.size());
  pendingP2PArgs_.resize(devices_.size());
  departed_.assign(devices_.size(), false);
  if (config_.backend == concclBackendCuda) {
    exec::Executor* ex = executor_.get();
    watchdog_ = std::make_unique<GpuWatchdog>(
        nranks(), std::chrono::milliseconds(config_.timeoutMs),
        [ex](int rank, uint32_t* launched, uint32_t* completed) {
          return ex->gpuProgress(rank, launched, completed);
        },
        [this](const std::string& reason) {
          CONCCL_WARN(-1, -1, "watchdog: " + reason);
          fail(concclTimeout, reason);
        });
  }
}

LocalClique::~LocalClique() {
  if (watchdog_) watchdog_->stop();
}

void LocalClique::checkHealthyLocked() const {
  if (error_) {
    CONCCL_THROW(concclInvalidUsage,
                 "the communicator is out of service after an earlier error (abort or destroy "
                 "it): " +
                     error_->message());
  }
}

std::optional<Error> LocalClique::asyncError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void LocalClique::fail(concclResult_t code, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = Error(code, reason);
  }
  cv_.notify_all();
  executor_->cancel();
}

std::shared_ptr<CallTicket> LocalClique::post(int rank, RankArgs args) {
  auto ticket = std::make_shared<CallTicket>();
  ticket->rank = rank;
  std::unique_lock<std::mutex> lock(mutex_);
  checkHealthyLocked();

  if (args.kind == sched::CollKind::kSendRecv) {
    CONCCL_ASSERT(!pendingP2P_[rank]);  // a rank's thread posts its next group only after launching the last
    ticket->what = std::string(args.apiName) + " group";
    pendingP2P_[rank] = ticket;
    pendingP2PArgs_[rank] = std::move(args);
    tryCloseP2PLocked(rank);
    lock.unlock();
    cv_.notify_all();
    return ticket;
  }

  uint64_t seq = nextSeq_[rank]++;
  auto& slot = collectives_[seq];
  if (!slot) {
    slot = std::make_shared<PendingCall>();
    slot->seq = seq;
    slot->args.resize(devices_.size());
  }
  ticket->call = slot;
  ticket->collective = true;
  ticket->what = std::string(args.apiName) + " #" + std::to_string(seq);
  slot->args[rank] = std::move(args);
  if (++slot->posted == nranks()) finalizeLocked(*slot);
  lock.unlock();
  cv_.notify_all();
  return ticket;
}

// A Send/Recv group closes when every rank named by an op of the groups collected so far has posted a group.
void LocalClique::tryCloseP2PLocked(int rank) {
  std::set<int> members{rank};
  std::vector<int> todo{rank};
  while (!todo.empty()) {
    int m = todo.back();
    todo.pop_back();
    for (const auto& op : pendingP2PArgs_[m].p2p) {
      if (members.count(op.peer)) continue;
      if (!pendingP2P_[op.peer]) return;  // a partner has not posted yet
      members.insert(op.peer);
      todo.push_back(op.peer);
    }
  }
  auto call = std::make_shared<PendingCall>();
  call->seq = nextP2PSeq_++;
  call->args.resize(devices_.size());
  for (int m : members) {
    call->args[m] = std::move(pendingP2PArgs_[m]);
    pendingP2PArgs_[m] = RankArgs{};
    pendingP2P_[m]->call = call;
    pendingP2P_[m].reset();
    ++call->posted;
  }
  finalizeLocked(*call);
}

// All participants posted: validate agreement, build the schedule and the binding. Errors are stored in the
// call so that every participating rank reports the same one.
void LocalClique::finalizeLocked(PendingCall& pending) {
  const int n = nranks();
  try {
    assembleCall(pending, n);
    // Every buffer the schedule will touch must be usable by the backend and large enough. What the check learns of
    // each buffer's allocation goes into the binding (CallBinding::bufferIds: the key of the executor's graph cache).
    pending.binding.bufferIds.assign(static_cast<size_t>(n), {});
    for (int r = 0; r < n; ++r) {
      if (!pending.args[r]) continue;
      std::vector<uint64_t>& ids = pending.binding.bufferIds[static_cast<size_t>(r)];
      ids.assign(pending.binding.buffers[static_cast<size_t>(r)].size(), exec::kBufferNotUsed);
      forEachUsedBuffer(pending.call, pending.binding, r, [&](int b, void* ptr, size_t bytes, const std::string& what) {
        const uint64_t id = executor_->checkBuffer(r, ptr, bytes, what.c_str());
        if (static_cast<size_t>(b) < ids.size()) ids[static_cast<size_t>(b)] = id;
      });
    }
    pending.schedule = schedules_.get(pending.call);
    // Before any rank launches (they wait for `ready`): first use of new streams, see Executor::prepareCall.
    std::vector<int> taking;
    for (int r = 0; r < n; ++r) {
      if (pending.args[r]) taking.push_back(r);
    }
    executor_->prepareCall(*pending.schedule, pending.binding, taking);
    CONCCL_TRACE(-1, -1,
                 std::string(sched::collKindName(pending.call.kind)) + " seq " + std::to_string(pending.seq) + ": " +
                     pending.schedule->algorithm);
  } catch (const Error& e) {
    pending.error = e;
  } catch (const std::exception& e) {
    pending.error = Error(concclInternalError, e.what());
  }
  pending.ready = true;
  pending.readyPublished.store(true, std::memory_order_release);
}

int LocalClique::departedPeerLocked(const CallTicket& ticket) const {
  if (ticket.call) {
    if (ticket.call->ready) return -1;
    for (int r = 0; r < nranks(); ++r) {
      if (departed_[r] && !ticket.call->args[r]) return r;  // a collective needs every rank
    }
    return -1;
  }
  // An open Send/Recv group: every rank its closure names must still be able to post.
  std::set<int> seen{ticket.rank};
  std::vector<int> todo{ticket.rank};
  while (!todo.empty()) {
    int m = todo.back();
    todo.pop_back();
    for (const auto& op : pendingP2PArgs_[m].p2p) {
      if (!seen.insert(op.peer).second) continue;
      if (departed_[op.peer]) return op.peer;
      if (pendingP2P_[op.peer]) todo.push_back(op.peer);
    }
  }
  return -1;
}

// With a thread per rank the last rank to call finishes the call (finalizeLocked) while the others wait. Waking a
// thread blocked on the condition variable costs a futex round trip, tens of microseconds in a VM, on every call;
// a waiter that spins a little first sees `ready` within a microsecond of it being set. The spin is bounded by
// config.rendezvousSpinUs and then the waiter blocks as before (an idle peer costs one core that long, no more).
void LocalClique::spinUntilReady(const CallTicket& ticket) const {
  // Send/Recv tickets get their call from another thread: they wait on the condition variable only.
  if (!ticket.collective || ticket.call->readyPublished.load(std::memory_order_acquire)) return;
  if (config_.rendezvousSpinUs <= 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(config_.rendezvousSpinUs);
  do {
    for (int i = 0; i < 64; ++i) {
      if (ticket.call->readyPublished.load(std::memory_order_acquire)) return;
      cpuRelax();
    }
  } while (std::chrono::steady_clock::now() < until);
}

void LocalClique::waitAndLaunch(CallTicket& ticket) {
  spinUntilReady(ticket);
  std::shared_ptr<PendingCall> call = waitUntilReady(ticket);
  launchReady(*call, ticket);
}

std::shared_ptr<PendingCall> LocalClique::waitUntilReady(CallTicket& ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.timeoutMs);
  int departed = -1;
  bool ok = cv_.wait_until(lock, deadline, [&] {
    if (error_ || (ticket.call && ticket.call->ready)) return true;
    departed = departedPeerLocked(ticket);
    return departed >= 0;
  });
  if (!ok) {
    const std::string reason = timeoutReasonLocked(ticket);
    lock.unlock();
    fail(concclTimeout, reason);
    CONCCL_THROW(concclTimeout, reason);
  }
  if (error_ && !(ticket.call && ticket.call->ready)) {
    // Woken by the clique's failure while waiting for peers: this call is a victim of that failure, so it
    // reports the same code (conccl.h: a rank that never arrives makes *the others* fail with concclTimeout;
    // an abort makes waiting calls fail with concclInvalidUsage, which is the abort's code). Throwing
    // concclInvalidUsage here made the result depend on which waiter's deadline expired first.
    throw Error(error_->code(), "rank " + std::to_string(ticket.rank) + " stopped waiting in " + ticket.what + ": " +
                                    error_->message());
  }
  if (departed >= 0 && !(ticket.call && ticket.call->ready)) {
    // A peer this call needs was destroyed or aborted: it can never complete. Only this call fails (other ranks
    // may still exchange Send/Recv); an open Send/Recv group is withdrawn so that the rank can post again.
    if (!ticket.call && pendingP2P_[ticket.rank].get() == &ticket) {
      pendingP2P_[ticket.rank].reset();
      pendingP2PArgs_[ticket.rank] = RankArgs{};
    }
    CONCCL_THROW(concclInvalidUsage, ticket.what + " on rank " + std::to_string(ticket.rank) + ": rank " +
                                         std::to_string(departed) +
                                         " was destroyed or aborted before it made this call");
  }
  std::shared_ptr<PendingCall> call = ticket.call;
  if (++call->launched == call->posted && call->call.kind != sched::CollKind::kSendRecv) collectives_.erase(call->seq);
  if (call->error) throw Error(*call->error).addContext(ticket.what);
  checkHealthyLocked();
  return call;
}

std::string LocalClique::timeoutReasonLocked(const CallTicket& ticket) const {
  // Name the ranks that never arrived: the most useful line of a hang report.
  std::string missing;
  if (ticket.call) {
    for (int r = 0; r < nranks(); ++r) {
      if (!ticket.call->args[r]) missing += (missing.empty() ? "" : ",") + std::to_string(r);
    }
  } else {
    missing = "the partners of its Send/Recv ops";
  }
  return "rank " + std::to_string(ticket.rank) + " waited " + std::to_string(config_.timeoutMs) + " ms in " +
         ticket.what + " for rank(s) " + missing + " to call it";
}

void LocalClique::launchReady(PendingCall& call, const CallTicket& ticket) {
  try {
    executor_->launch(*call.schedule, call.binding, ticket.rank);
    if (watchdog_) watchdog_->launched(ticket.rank, ticket.what);
  } catch (Error& e) {
    e.addContext(ticket.what + " on rank " + std::to_string(ticket.rank));
    // A rank that could not run its part would leave its peers waiting for its signals: take the clique out of
    // service so that they fail instead of hanging.
    fail(e.code(), e.message());
    throw;
  } catch (const std::bad_alloc&) {
    // Same for failures that are not conccl::Error (e.g. scratch that does not fit in host memory): without
    // this the peers would wait for this rank's signals until the timeout.
    std::string reason = ticket.what + " on rank " + std::to_string(ticket.rank) + ": out of host memory";
    fail(concclSystemError, reason);
    CONCCL_THROW(concclSystemError, reason);
  } catch (const std::exception& e) {
    std::string reason = ticket.what + " on rank " + std::to_string(ticket.rank) + ": " + e.what();
    fail(concclInternalError, reason);
    CONCCL_THROW(concclInternalError, reason);
  }
}

void LocalClique::abandon(CallTicket& ticket) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ticket.call) {
    if (pendingP2P_[ticket.rank].get() == &ticket) {
      pendingP2P_[ticket.rank].reset();
      pendingP2PArgs_[ticket.rank] = RankArgs{};
    }
    return;
  }
  PendingCall& call = *ticket.call;
  if (call.ready && ++call.launched == call.posted && call.call.kind != sched::CollKind::kSendRecv) {
    collectives_.erase(call.seq);
  }
}

void LocalClique::releaseRank(int rank, bool graceful) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    departed_[rank] = true;
  }
  cv_.notify_all();  // peers waiting for this rank to post fail now (see waitAndLaunch)
  if (graceful) {
    executor_->synchronize(rank);
  }
  executor_->releaseRank(rank);
}

uint64_t LocalClique::registerWindow(int rank, void* ptr, size_t bytes) {
  // Every rank of a local clique is in this process: its calls find the peers' pointers in their posted
  // arguments, so a window saves nothing. Validate it as a collective's buffer would be.
  if (config_.backend == concclBackendCuda) executor_->checkBuffer(rank, ptr, bytes, "buff");
  return nextWindowId_.fetch_add(1);
}

void LocalClique::deregisterWindow(int rank, uint64_t /*id*/) {
  // The promise of deregister: the memory may be freed once it returns.
  if (config_.backend == concclBackendCuda) executor_->synchronize(rank);
}

}  // namespace conccl
