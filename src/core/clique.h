// The clique: every rank of one communicator in this process and the state they share.
//
// A collective call is assembled from its ranks' arguments (RankArgs): ranks post them into a PendingCall
// matched by a per-rank sequence number; when the last rank has posted, the call is validated (counts,
// types, ops and roots must agree), its schedule is built once, and each rank launches its own program on
// the executor. Point-to-point calls are matched differently: each rank posts its group of Send/Recv ops,
// and a call closes when every rank one of its ops names has posted its group too.
#pragma once

#include <conccl/conccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "exec/executor.h"
#include "sched/schedule.h"

namespace conccl {

// What one rank passed to one call (validated locally by src/api before it is posted).
struct RankArgs {
  sched::CollKind kind = sched::CollKind::kAllGather;
  concclDataType_t dtype = concclFloat32;
  concclRedOp_t op = concclSum;
  int root = 0;
  size_t count = 0;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  bool inPlace = false;
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;  // AllToAllv
  std::vector<sched::P2POp> p2p;                                         // SendRecv
  std::vector<void*> p2pBuffers;                                         // SendRecv, per op
  cudaStream_t stream = nullptr;
  const char* apiName = "";  // for messages, e.g. "concclAllGather"
};

// One call of the clique, from first post to last launch.
struct PendingCall {
  uint64_t seq = 0;
  std::vector<std::optional<RankArgs>> args;  // [rank]
  int posted = 0;
  bool ready = false;  // all ranks posted and the schedule is built, or `error` is set
  std::optional<Error> error;
  sched::CollectiveCall call;
  sched::Schedule schedule;
  exec::CallBinding binding;
  int launched = 0;  // ranks that have taken their program (the call is forgotten when all have)
};

// A rank's handle on a call it posted.
struct CallTicket {
  std::shared_ptr<PendingCall> call;  // set when posted (collectives) or when the p2p group closes
  int rank = 0;
  std::string what;  // "concclAllGather #12" for messages
};

class Clique {
 public:
  Clique(Config config, std::vector<int> devices, std::unique_ptr<exec::Executor> executor);
  ~Clique();

  int nranks() const { return static_cast<int>(devices_.size()); }
  int device(int rank) const { return devices_[rank]; }
  const Config& config() const { return config_; }
  exec::Executor& executor() { return *executor_; }

  // Posts a rank's arguments; never blocks. Throws if the clique is in error.
  std::shared_ptr<CallTicket> post(int rank, RankArgs args);

  // Waits (bounded by the timeout) until the ticket's call is ready, then launches the rank's program.
  // A timeout or a launch failure puts the clique in error and aborts the executor, so no peer waits forever.
  void waitAndLaunch(CallTicket& ticket);

  // Puts the clique in error with `reason` and wakes every waiter (concclCommAbort, fatal failures).
  void fail(concclResult_t code, const std::string& reason);
  // The error that put the clique out of service, if any.
  std::optional<Error> asyncError() const;

  // A rank gives up a call it posted but will not launch (an earlier call of its group failed). Only forgets
  // the bookkeeping; every rank of such a call fails the same way, so no peer waits for it.
  void abandon(CallTicket& ticket);

  // Called by each rank's destroy/abort; the executor releases that rank. Calls of other ranks that are still
  // waiting for this rank to post fail at once (concclInvalidUsage) instead of waiting for the timeout.
  void releaseRank(int rank, bool graceful);

 private:
  void checkHealthyLocked() const;
  void finalizeLocked(PendingCall& call);
  void tryCloseP2PLocked(int rank);
  // The first released rank that the ticket's unfinished call still waits for, or -1.
  int departedPeerLocked(const CallTicket& ticket) const;

  Config config_;
  std::vector<int> devices_;
  std::unique_ptr<exec::Executor> executor_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<uint64_t> nextSeq_;                              // per rank, collectives
  std::map<uint64_t, std::shared_ptr<PendingCall>> collectives_;  // by seq, until every rank has launched
  std::vector<std::shared_ptr<CallTicket>> pendingP2P_;        // per rank: an open Send/Recv group
  std::vector<RankArgs> pendingP2PArgs_;
  uint64_t nextP2PSeq_ = 0;
  std::optional<Error> error_;
  std::vector<bool> departed_;  // per rank: destroyed or aborted (its handle is gone, it will never post again)
};

}  // namespace conccl
