#include "core/group.h"

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "base/error.h"
#include "base/host_laps.h"
#include "base/logging.h"

namespace conccl {
namespace {

struct RecordedCall {
  concclComm* comm;
  RankArgs args;
};

struct GroupState {
  int depth = 0;
  std::vector<RecordedCall> calls;
};

thread_local GroupState tGroup;

void setCommError(concclComm* comm, const std::string& message) {
  std::lock_guard<std::mutex> lock(comm->lastErrorMutex);
  comm->lastError = message;
}

// Send/Recv calls of one communicator inside a group are fused into one point-to-point group, placed after all
// collectives of the group; collectives keep their order.
//
// Why after (and not where the first Send/Recv was recorded): with one thread per rank, each rank launches its
// calls in this order, and every schedule uses the same ready/done flags. If rank 0 recorded {Send, AllReduce}
// and rank 1 {AllReduce, Recv}, launching in record order would make rank 1's AllReduce consume the ready signal
// of rank 0's Send program (and vice versa): data written into the wrong call's buffers, and flags left out of
// step for later calls. Inside a group the order of a rank's calls carries no meaning (they run together), and
// all ranks call the collectives in the same order, so "collectives in order, then Send/Recv" gives every rank
// the same launch order.
std::vector<RecordedCall> fuseP2P(std::vector<RecordedCall> calls) {
  std::vector<RecordedCall> fused;
  fused.reserve(calls.size());
  std::vector<RecordedCall> p2p;  // one per communicator, in first-use order (a group holds a few: searched in turn)
  for (auto& c : calls) {
    if (c.args.kind != sched::CollKind::kSendRecv) {
      fused.push_back(std::move(c));
      continue;
    }
    auto it = std::find_if(p2p.begin(), p2p.end(), [&](const RecordedCall& f) { return f.comm == c.comm; });
    if (it == p2p.end()) {
      p2p.push_back(std::move(c));
      continue;
    }
    RankArgs& into = it->args;
    for (size_t i = 0; i < c.args.p2p.size(); ++i) {
      sched::P2POp op = c.args.p2p[i];
      op.buffer = static_cast<int>(into.p2pBuffers.size());
      into.p2p.push_back(op);
      into.p2pBuffers.push_back(c.args.p2pBuffers[i]);
    }
  }
  for (auto& c : p2p) fused.push_back(std::move(c));
  return fused;
}

Error toError(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e;
  } catch (const std::bad_alloc&) {
    return Error(concclSystemError, "out of host memory");
  } catch (const std::exception& e) {
    return Error(concclInternalError, std::string("unexpected exception: ") + e.what());
  } catch (...) {
    return Error(concclInternalError, "unknown exception");
  }
}

// Launches one rank's posted calls in order and returns the first failure; nothing escapes (GroupRun runs this on
// std::threads, where an escaping exception would terminate the process). Later calls of the rank cannot run once one
// has failed (an earlier call's output may be a later call's input): they are forgotten. A failure that lets this
// rank skip a call is one that every other rank of that call sees too (agreement errors are reported to all, anything
// else puts the clique out of service).
std::optional<Error> launchInOrder(concclComm* comm, const std::vector<std::shared_ptr<CallTicket>>& tickets) {
  for (size_t i = 0; i < tickets.size(); ++i) {
    try {
      comm->clique->waitAndLaunch(*tickets[i]);
    } catch (...) {
      Error failure = toError(std::current_exception());
      for (size_t j = i + 1; j < tickets.size(); ++j) comm->clique->abandon(*tickets[j]);
      return failure;
    }
  }
  return std::nullopt;
}

// One concclGroupEnd (or one call outside a group): posts every call, then launches each rank's calls in order.
// Host ranks run their programs synchronously, so when one thread drives several host ranks each rank gets a thread
// of its own for the launch. The first failure is rethrown at the end; every failure is recorded on its communicator.
class GroupRun {
 public:
  explicit GroupRun(std::vector<RecordedCall> recorded) : calls_(fuseP2P(std::move(recorded))) {}

  void run() {
    // Every communicator of the group stays allocated until the run ends (a destroy or abort on another thread
    // waits for it); one already destroyed takes no use and is never dereferenced.
    for (const auto& c : calls_) {
      if (!uses_.count(c.comm)) uses_.emplace(c.comm, std::make_unique<CommUse>(c.comm));
    }
    postAll();
    if (order_.size() > 1 && hostBackend()) {
      launchInThreads();
    } else {
      for (auto* comm : order_) launchAll(comm);
    }
    if (firstError_) throw *firstError_;
  }

 private:
  void recordFailure(concclComm* comm, const Error& e) {
    std::lock_guard<std::mutex> lock(errorMutex_);
    setCommError(comm, e.message());
    if (!firstError_) firstError_ = e;
  }

  // Every call posted to its clique, in order; a communicator that fails to post skips its later calls.
  void postAll() {
    // The ranks of each clique that this group posts: a rank posted alone is driven by a thread of its own
    // (RankArgs::soleRankInGroup).
    std::map<const Clique*, std::set<int>> groupRanks;
    for (const auto& c : calls_) {
      if (held(c.comm)) groupRanks[c.comm->clique.get()].insert(c.comm->rank);
    }
    std::set<concclComm*> failed;
    for (auto& c : calls_) {
      if (!perComm_.count(c.comm)) order_.push_back(c.comm);
      auto& tickets = perComm_[c.comm];
      if (failed.count(c.comm)) continue;
      // A communicator destroyed after its call was recorded (by this thread: groupForgetComm removed its calls,
      // so this is another thread's destroy) must not be dereferenced.
      if (!held(c.comm)) {
        failed.insert(c.comm);
        dead_.insert(c.comm);
        std::lock_guard<std::mutex> lock(errorMutex_);
        if (!firstError_) {
          firstError_ =
              Error(concclInvalidUsage, "a communicator used in this group was destroyed before concclGroupEnd");
        }
        continue;
      }
      c.args.soleRankInGroup = groupRanks[c.comm->clique.get()].size() == 1;
      try {
        tickets.push_back(c.comm->clique->post(c.comm->rank, std::move(c.args)));
      } catch (...) {
        // Posting fails when the communicator is out of service. The calls already posted (possibly on other,
        // healthy communicators, whose peers in other threads have posted theirs and now wait for ours) must
        // still be launched: abandoning them would leave those peers blocked until the timeout and then take
        // their communicators out of service too.
        failed.insert(c.comm);
        recordFailure(c.comm, toError(std::current_exception()));
      }
    }
  }

  bool held(concclComm* comm) const { return uses_.at(comm)->taken(); }

  // enqueueCall refuses groups that mix backends, so the first live communicator tells the backend.
  bool hostBackend() const {
    for (auto* comm : order_) {
      if (!dead_.count(comm)) return comm->clique->config().backend == concclBackendHost;
    }
    return false;
  }

  // One rank's posted calls, launched in order (launchInOrder).
  void launchAll(concclComm* comm) {
    auto& tickets = perComm_[comm];
    if (tickets.empty()) return;  // nothing posted (e.g. a destroyed communicator: do not touch it)
    if (std::optional<Error> failure = launchInOrder(comm, tickets)) recordFailure(comm, *failure);
  }

  void launchInThreads() {
    std::vector<std::thread> threads;
    threads.reserve(order_.size());
    for (auto* comm : order_) {
      try {
        threads.emplace_back([this, comm] { launchAll(comm); });
      } catch (const std::system_error& e) {
        // Out of threads: this rank cannot run its part. Take its communicator out of service so that its peers
        // (running in the threads already started) fail promptly instead of waiting for the timeout, and never
        // let the exception unwind past joinable threads (std::terminate).
        Error error(concclSystemError, std::string("cannot start a thread for a host rank: ") + e.what());
        comm->clique->fail(error.code(), error.message());
        recordFailure(comm, error);
        for (auto& ticket : perComm_[comm]) comm->clique->abandon(*ticket);
      }
    }
    for (auto& t : threads) t.join();
  }

  std::vector<RecordedCall> calls_;
  std::map<concclComm*, std::unique_ptr<CommUse>> uses_;
  std::vector<concclComm*> order_;                                           // comms in first-use order
  std::map<concclComm*, std::vector<std::shared_ptr<CallTicket>>> perComm_;  // tickets per rank, in call order
  std::set<concclComm*> dead_;                                               // never dereferenced
  std::optional<Error> firstError_;
  std::mutex errorMutex_;
};

// A group whose calls are all on one communicator (PyTorch's batched Send/Recv, the 2n Send/Recv calls of an uneven
// all_to_all_single, coalesced collectives) runs as GroupRun would run it (post every call, then launch them in
// order; a failure recorded on the communicator, the calls after it abandoned, the first failure thrown) without its
// maps of uses, tickets and ranks, which cost about a microsecond of allocation per group.
void runOnOneComm(std::vector<RecordedCall> recorded) {
  concclComm* comm = recorded.front().comm;
  const CommUse use(comm);  // held until the run ends, as GroupRun holds each communicator's
  // Destroyed by another thread after its calls were recorded: never dereferenced.
  if (!use.taken()) {
    CONCCL_THROW(concclInvalidUsage, "a communicator used in this group was destroyed before concclGroupEnd");
  }
  std::vector<RecordedCall> calls = fuseP2P(std::move(recorded));
  std::vector<std::shared_ptr<CallTicket>> tickets;
  tickets.reserve(calls.size());
  std::optional<Error> firstError;
  for (auto& c : calls) {
    c.args.soleRankInGroup = true;  // the group holds this rank alone of its clique
    try {
      tickets.push_back(comm->clique->post(comm->rank, std::move(c.args)));
    } catch (...) {
      // Out of service: the calls already posted still launch (their peers wait for them), the rest never run.
      firstError = toError(std::current_exception());
      setCommError(comm, firstError->message());
      break;
    }
  }
  if (std::optional<Error> failure = launchInOrder(comm, tickets)) {
    setCommError(comm, failure->message());
    if (!firstError) firstError = failure;
  }
  if (firstError) throw *firstError;
}

void runCalls(std::vector<RecordedCall> recorded) {
  if (recorded.empty()) return;
  const concclComm* first = recorded.front().comm;
  const bool oneComm =
      std::all_of(recorded.begin(), recorded.end(), [&](const RecordedCall& c) { return c.comm == first; });
  if (oneComm) return runOnOneComm(std::move(recorded));
  GroupRun(std::move(recorded)).run();
}

// A call outside a group, the common case, as a group of one would run it (GroupRun: post, then launch; the error
// recorded on the communicator and thrown) without a group run's bookkeeping: its maps of uses, tickets and ranks cost
// microseconds of allocation on every call. The caller (the API guard) holds the communicator's use.
void runAlone(concclComm* comm, RankArgs args) {
  args.soleRankInGroup = true;
  try {
    const std::shared_ptr<CallTicket> ticket = comm->clique->post(comm->rank, std::move(args));
    comm->clique->waitAndLaunch(*ticket);
  } catch (...) {
    Error e = toError(std::current_exception());
    setCommError(comm, e.message());
    throw e;
  }
}

}  // namespace

void groupStart() {
  HostLaps::joinGroup(tGroup.depth == 0);  // its time counts in the group end's laps (base/host_laps.h)
  ++tGroup.depth;
}

bool inGroup() { return tGroup.depth > 0; }

void groupEnd() {
  if (tGroup.depth == 0) CONCCL_THROW(concclInvalidUsage, "concclGroupEnd without a matching concclGroupStart");
  if (--tGroup.depth > 0) {
    HostLaps::joinGroup(false);
    return;
  }
  HostLaps::endGroup();
  std::vector<RecordedCall> calls = std::move(tGroup.calls);
  tGroup.calls.clear();
  runCalls(std::move(calls));
}

size_t groupDiscard() {
  if (tGroup.depth == 0) CONCCL_THROW(concclInvalidUsage, "concclGroupDiscard without a matching concclGroupStart");
  if (--tGroup.depth > 0) return 0;
  // Recorded calls hold no resource (plain arguments; tickets, uses and events are taken at launch), so dropping
  // them leaves nothing behind.
  const size_t dropped = tGroup.calls.size();
  tGroup.calls.clear();
  return dropped;
}

size_t groupForgetComm(concclComm* comm) {
  auto& calls = tGroup.calls;
  size_t before = calls.size();
  std::erase_if(calls, [&](const RecordedCall& c) { return c.comm == comm; });
  return before - calls.size();
}

void enqueueCall(concclComm* comm, RankArgs args) {
  if (tGroup.depth > 0) {
    // A host rank launches synchronously; mixing backends in one group would serialise host ranks behind a
    // thread that is waiting for them.
    if (!tGroup.calls.empty()) {
      CONCCL_REQUIRE(tGroup.calls.front().comm->clique->config().backend == comm->clique->config().backend,
                     "a group cannot mix communicators of the host and CUDA backends");
    }
    tGroup.calls.push_back(RecordedCall{comm, std::move(args)});
    HostLaps::joinGroup(false);
    return;
  }
  runAlone(comm, std::move(args));
}

}  // namespace conccl
