#include "core/group.h"

#include <map>
#include <thread>

#include "core/error.h"
#include "core/logging.h"

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

// Send/Recv calls of one communicator inside a group are fused into one point-to-point group, placed where the
// first of them was recorded; collectives keep their order.
std::vector<RecordedCall> fuseP2P(std::vector<RecordedCall> calls) {
  std::vector<RecordedCall> fused;
  std::map<concclComm*, size_t> p2pEntry;
  for (auto& c : calls) {
    if (c.args.kind != sched::CollKind::kSendRecv) {
      fused.push_back(std::move(c));
      continue;
    }
    auto it = p2pEntry.find(c.comm);
    if (it == p2pEntry.end()) {
      p2pEntry[c.comm] = fused.size();
      fused.push_back(std::move(c));
      continue;
    }
    RankArgs& into = fused[it->second].args;
    for (size_t i = 0; i < c.args.p2p.size(); ++i) {
      sched::P2POp op = c.args.p2p[i];
      op.buffer = static_cast<int>(into.p2pBuffers.size());
      into.p2p.push_back(op);
      into.p2pBuffers.push_back(c.args.p2pBuffers[i]);
    }
  }
  return fused;
}

// Posts every call, then launches each rank's calls in order. Host ranks run their programs synchronously, so
// when one thread drives several host ranks each rank gets a thread of its own for the launch.
void runCalls(std::vector<RecordedCall> recorded) {
  std::vector<RecordedCall> calls = fuseP2P(std::move(recorded));
  std::vector<concclComm*> order;                                           // comms in first-use order
  std::map<concclComm*, std::vector<std::shared_ptr<CallTicket>>> perComm;  // tickets per rank, in call order
  std::map<concclComm*, std::string> errors;

  for (auto& c : calls) {
    if (!perComm.count(c.comm)) order.push_back(c.comm);
    auto& tickets = perComm[c.comm];
    if (errors.count(c.comm)) continue;
    try {
      tickets.push_back(c.comm->clique->post(c.comm->rank, std::move(c.args)));
    } catch (const Error& e) {
      errors[c.comm] = e.message();
      throw;  // posting fails only when the clique is out of service: nothing of this group can run
    }
  }

  std::optional<Error> firstError;
  std::mutex errorMutex;
  auto launchAll = [&](concclComm* comm) {
    for (auto& ticket : perComm[comm]) {
      try {
        comm->clique->waitAndLaunch(*ticket);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(errorMutex);
        setCommError(comm, e.message());
        if (!firstError) firstError = e;
        return;  // later calls of this rank cannot run once one has failed
      }
    }
  };

  bool threaded = order.size() > 1 && order.front()->clique->config().backend == concclBackendHost;
  if (threaded) {
    std::vector<std::thread> threads;
    threads.reserve(order.size());
    for (auto* comm : order) threads.emplace_back(launchAll, comm);
    for (auto& t : threads) t.join();
  } else {
    for (auto* comm : order) launchAll(comm);
  }
  if (firstError) throw *firstError;
}

}  // namespace

void groupStart() { ++tGroup.depth; }

bool inGroup() { return tGroup.depth > 0; }

void groupEnd() {
  if (tGroup.depth == 0) CONCCL_THROW(concclInvalidUsage, "concclGroupEnd without a matching concclGroupStart");
  if (--tGroup.depth > 0) return;
  std::vector<RecordedCall> calls = std::move(tGroup.calls);
  tGroup.calls.clear();
  runCalls(std::move(calls));
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
    return;
  }
  std::vector<RecordedCall> one;
  one.push_back(RecordedCall{comm, std::move(args)});
  runCalls(std::move(one));
}

}  // namespace conccl
