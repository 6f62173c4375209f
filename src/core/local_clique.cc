#include "core/local_clique.h"

#include <chrono>
#include <set>
#include <sstream>

#include "base/logging.h"
#include "base/types.h"

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
      schedules_(executor_->buildOptions()),
      earlyCheck_(schedules_, *executor_) {
  nextSeq_.assign(devices_.size(), 0);
  pendingP2P_.resize(devices_.size());
  pendingP2PArgs_.resize(devices_.size());
  departed_.assign(devices_.size(), false);
  const bool ownGpus = std::set<int>(devices_.begin(), devices_.end()).size() == devices_.size();
  sharedGpus_ = !ownGpus;
  // The host backend (ranks are threads, programs run in launch()) stages only with threadStaged 2, which only tests
  // set (ConfigTestHook): how the CPU tests exercise this path.
  const bool cuda = config_.backend == concclBackendCuda;
  threadStaged_ = nranks() >= 2 && config_.stagedMaxBytes > 0 &&
                  (config_.threadStaged == 2 || (config_.threadStaged == 1 && cuda && ownGpus));
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
        },
        /*startThread=*/true, GpuWatchdog::CheckPeers{},
        // After a failure: keep the flags open until the ranks' programs drain (GpuWatchdog::ReopenAfterFailure).
        [this, ex] {
          {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!error_) return false;
          }
          ex->cancel();
          return true;
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

  // A rank posted alone plans its early launch before taking the lock (schedule lookups, its buffer checks); whether
  // it is used depends on the call's first poster.
  const bool staging = stagesCall(args);
  bool planned = false;
  if (staging) {
    lock.unlock();
    planned = planEarlyLaunch(args, rank, *ticket);
    lock.lock();
    checkHealthyLocked();
  }

  uint64_t seq = nextSeq_[rank]++;
  auto& slot = collectives_[seq];
  if (!slot) {
    slot = std::make_shared<PendingCall>();
    slot->seq = seq;
    slot->args.resize(devices_.size());
    // The first rank to post decides for every rank of the call: the ranks' groups are alike (one thread per rank,
    // or one group posting them all), and a rank whose arguments differ is caught by finalizeLocked, not by deciding
    // again.
    slot->staged = staging;
    slot->earlySchedules.resize(devices_.size());
  }
  ticket->call = slot;
  ticket->collective = true;
  ticket->what = std::string(args.apiName) + " #" + std::to_string(seq);
  if (slot->staged && planned) {
    slot->earlySchedules[static_cast<size_t>(rank)] = ticket->earlySchedule;
  } else {
    ticket->earlySchedule.reset();  // waits for the real call (finalizeLocked)
  }
  slot->args[rank] = std::move(args);
  std::optional<Error> failClique;
  if (++slot->posted == nranks()) failClique = finalizeLocked(*slot);
  lock.unlock();
  if (failClique) fail(failClique->code(), failClique->message());
  cv_.notify_all();
  return ticket;
}

bool LocalClique::stagesCall(const RankArgs& args) const {
  // Chunked calls record or wait for events between their program's ops: they keep the regular path.
  return threadStaged_ && args.soleRankInGroup && args.chunkEvents.empty() && args.inputEvents.empty() &&
         !args.pushInputs && fitsStaging(args, nranks(), config_.stagedMaxBytes);
}

bool LocalClique::planEarlyLaunch(const RankArgs& mine, int rank, CallTicket& ticket) {
  const int n = nranks();
  try {
    PendingCall solo;
    assembleSoloCall(solo, mine, rank, n);
    solo.call.peerScratchOnly = true;
    std::shared_ptr<const sched::Schedule> schedule = schedules_.get(solo.call);
    if (!independentOfPeersInPlace(*schedule, solo.call, rank)) return false;
    const auto r = static_cast<size_t>(rank);
    solo.binding.eagerOnly = sharedGpus_;
    solo.binding.bufferIds.assign(static_cast<size_t>(n), {});
    std::vector<uint64_t>& ids = solo.binding.bufferIds[r];
    ids.assign(solo.binding.buffers[r].size(), exec::kBufferNotUsed);
    forEachUsedBuffer(solo.call, solo.binding, rank, [&](int b, void* ptr, size_t bytes, const std::string& what) {
      const uint64_t id = executor_->checkBuffer(rank, ptr, bytes, what.c_str(), mine.stream);
      if (static_cast<size_t>(b) < ids.size()) ids[static_cast<size_t>(b)] = id;
    });
    ticket.earlySchedule = std::move(schedule);
    ticket.earlyBinding = std::move(solo.binding);
    return true;
  } catch (const Error&) {
    return false;  // the real call finds the same problem and reports it on every rank
  }
}

bool LocalClique::independentOfPeersInPlace(const sched::Schedule& schedule, const sched::CollectiveCall& call,
                                            int rank) {
  return earlyCheck_.ignoresInPlaceOf(schedule, call, rank, EarlyLaunchCheck::kEveryPeer);
}

void LocalClique::checkEarlyAssumptions(const PendingCall& pending, const exec::Executor& executor) {
  for (size_t r = 0; r < pending.earlySchedules.size(); ++r) {
    if (pending.earlySchedules[r]) {
      EarlyLaunchCheck::checkLaunchedPart(*pending.earlySchedules[r], *pending.schedule, static_cast<int>(r), executor);
    }
  }
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
  finalizeLocked(*call);  // never staged: no early rank to stop
}

// All participants posted: validate agreement, build the schedule and the binding. Errors are stored in the
// call so that every participating rank reports the same one.
std::optional<Error> LocalClique::finalizeLocked(PendingCall& pending) {
  const int n = nranks();
  auto launchedEarly = [&](int r) {
    return static_cast<size_t>(r) < pending.earlySchedules.size() && pending.earlySchedules[static_cast<size_t>(r)];
  };
  try {
    assembleCall(pending, n);
    pending.call.peerScratchOnly = pending.staged;
    // Every buffer the schedule will touch must be usable by the backend and large enough. What the check learns of
    // each buffer's allocation goes into the binding (CallBinding::bufferIds: the key of the executor's graph cache).
    pending.binding.bufferIds.assign(static_cast<size_t>(n), {});
    for (int r = 0; r < n; ++r) {
      if (!pending.args[r] || launchedEarly(r)) continue;  // an early rank checked its own
      std::vector<uint64_t>& ids = pending.binding.bufferIds[static_cast<size_t>(r)];
      ids.assign(pending.binding.buffers[static_cast<size_t>(r)].size(), exec::kBufferNotUsed);
      forEachUsedBuffer(pending.call, pending.binding, r, [&](int b, void* ptr, size_t bytes, const std::string& what) {
        const uint64_t id = executor_->checkBuffer(r, ptr, bytes, what.c_str(), pending.args[r]->stream);
        if (static_cast<size_t>(b) < ids.size()) ids[static_cast<size_t>(b)] = id;
      });
    }
    pending.schedule = schedules_.get(pending.call);
    checkEarlyAssumptions(pending, *executor_);
    // Before any waiting rank launches: first use of new streams, see Executor::prepareCall. (Early ranks prepared
    // their own part.)
    std::vector<int> taking;
    for (int r = 0; r < n; ++r) {
      if (pending.args[r] && !launchedEarly(r)) taking.push_back(r);
    }
    if (!taking.empty()) executor_->prepareCall(*pending.schedule, pending.binding, taking);
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
  bool anyEarly = false;
  for (int r = 0; r < n; ++r) anyEarly = anyEarly || launchedEarly(r);
  if (!pending.error || !anyEarly) return std::nullopt;
  // Ranks already run their part and wait on the GPU for peers that will not come: only taking the clique out of
  // service (which re-opens their waits) ends them.
  return Error(concclInvalidUsage, pending.error->message() +
                                       " (found after ranks had launched this staged thread-per-rank call; the "
                                       "communicator is out of service)");
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
  if (ticket.earlySchedule) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error_) {
        countLaunchLocked(*ticket.call);
        checkHealthyLocked();
      }
    }
    launchRank(*ticket.earlySchedule, ticket.earlyBinding, ticket, /*prepare=*/true);
    std::lock_guard<std::mutex> lock(mutex_);
    countLaunchLocked(*ticket.call);
    return;
  }
  spinUntilReady(ticket);
  std::shared_ptr<PendingCall> call = waitUntilReady(ticket);
  launchRank(*call->schedule, call->binding, ticket, /*prepare=*/false);
}

void LocalClique::countLaunchLocked(PendingCall& call) {
  // A collective is done with when every rank has taken its part; an early rank may take it before the others post.
  if (++call.launched == nranks()) collectives_.erase(call.seq);
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
  if (ticket.collective) {
    countLaunchLocked(*call);
  } else {
    ++call->launched;
  }
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

void LocalClique::launchRank(const sched::Schedule& schedule, const exec::CallBinding& binding,
                             const CallTicket& ticket, bool prepare) {
  try {
    if (prepare) executor_->prepareCall(schedule, binding, {ticket.rank});
    executor_->launch(schedule, binding, ticket.rank);
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
  if (ticket.collective && (call.ready || ticket.earlySchedule)) countLaunchLocked(call);
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
  if (config_.backend == concclBackendCuda) executor_->checkBuffer(rank, ptr, bytes, "buff", nullptr);
  return nextWindowId_.fetch_add(1);
}

void LocalClique::deregisterWindow(int rank, uint64_t /*id*/) {
  // The promise of deregister: the memory may be freed once it returns.
  if (config_.backend == concclBackendCuda) executor_->synchronize(rank);
}

}  // namespace conccl
