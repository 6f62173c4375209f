// LocalClique: every rank of the communicator lives in this process (concclCommInitAll; one thread driving all
// ranks inside a group, or one thread per rank).
//
// Ranks post their arguments into a PendingCall matched by a per-rank sequence number; when the last rank has
// posted, the call is validated, its schedule is built once, and each rank launches its own program on the
// shared executor. A rank driven by a thread of its own would wait there for its peers' threads: calls small enough
// to go through the peers' scratch (Config::threadStaged, stagedMaxBytes) are staged instead, each rank launching its
// program at once from its own arguments, and the last rank to post checks that every rank agreed.
// Point-to-point calls are matched differently: each rank posts its group of Send/Recv ops, and a call closes when
// every rank one of its ops names has posted its group too.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/clique.h"
#include "core/early_launch.h"
#include "core/gpu_watchdog.h"

namespace conccl {

class LocalClique final : public Clique {
 public:
  LocalClique(Config config, std::vector<int> devices, std::unique_ptr<exec::Executor> executor);
  ~LocalClique() override;

  int nranks() const override { return static_cast<int>(devices_.size()); }
  const Config& config() const override { return config_; }
  exec::Executor& executor() override { return *executor_; }

  std::shared_ptr<CallTicket> post(int rank, RankArgs args) override;
  void waitAndLaunch(CallTicket& ticket) override;
  void fail(concclResult_t code, const std::string& reason) override;
  std::optional<Error> asyncError() const override;
  void abandon(CallTicket& ticket) override;
  void releaseRank(int rank, bool graceful) override;
  uint64_t registerWindow(int rank, void* ptr, size_t bytes) override;
  void deregisterWindow(int rank, uint64_t id) override;

 private:
  // Spins (bounded) until the ticket's collective is ready, before waitAndLaunch takes the lock.
  void spinUntilReady(const CallTicket& ticket) const;
  void checkHealthyLocked() const;
  // The last rank has posted: validate, build the schedule, prepare the ranks that wait for it. For a staged call
  // that some ranks launched early, also check what they assumed (checkEarlyAssumptions); an error then must take the
  // clique out of service: returned, for the caller to raise (fail) once it has released the mutex.
  std::optional<Error> finalizeLocked(PendingCall& call);
  // Whether the first rank to post a call with these arguments stages it, for every rank of the call.
  bool stagesCall(const RankArgs& args) const;
  // A staged call's program for `rank` as if every peer called like it, with its own buffers checked, into the
  // ticket (earlySchedule, earlyBinding); false (nothing set) when that program or its path would depend on how
  // the peers call, or a check fails: the rank then waits for the real call, which reports any error to all.
  bool planEarlyLaunch(const RankArgs& mine, int rank, CallTicket& ticket);
  // Whether rank `rank`'s program and path in `schedule` (of `call`, every rank calling alike) stay the same when
  // the peers' in-place flags differ from its own (EarlyLaunchCheck::ignoresInPlaceOf, every peer).
  bool independentOfPeersInPlace(const sched::Schedule& schedule, const sched::CollectiveCall& call, int rank);
  // Throws unless every early rank's assumed program and path are the real call's.
  static void checkEarlyAssumptions(const PendingCall& call, const exec::Executor& executor);
  // A collective is forgotten once every rank has launched its part (or abandoned it).
  void countLaunchLocked(PendingCall& call);
  void tryCloseP2PLocked(int rank);
  // The first released rank that the ticket's unfinished call still waits for, or -1.
  int departedPeerLocked(const CallTicket& ticket) const;
  // waitAndLaunch's two steps: wait (bounded) until the ticket's call is ready, turning a timeout, the clique's
  // failure or a departed peer into the error this rank reports; then launch the rank's program, failing the clique
  // if that fails (the peers would otherwise wait for this rank's signals).
  std::shared_ptr<PendingCall> waitUntilReady(CallTicket& ticket);
  // Launches the rank's part of `schedule`; `prepare`: first prepare it (early launches; the others were prepared by
  // finalizeLocked).
  void launchRank(const sched::Schedule& schedule, const exec::CallBinding& binding, const CallTicket& ticket,
                  bool prepare);
  // The timeout message: which ranks never arrived. Needs mutex_.
  std::string timeoutReasonLocked(const CallTicket& ticket) const;

  Config config_;
  std::vector<int> devices_;
  std::unique_ptr<exec::Executor> executor_;
  ScheduleCache schedules_;
  EarlyLaunchCheck earlyCheck_;  // after schedules_ and executor_, which it uses

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<uint64_t> nextSeq_;                                 // per rank, collectives
  std::map<uint64_t, std::shared_ptr<PendingCall>> collectives_;  // by seq, until every rank has launched
  std::vector<std::shared_ptr<CallTicket>> pendingP2P_;           // per rank: an open Send/Recv group
  std::vector<RankArgs> pendingP2PArgs_;
  uint64_t nextP2PSeq_ = 0;
  std::optional<Error> error_;
  std::vector<bool> departed_;  // per rank: destroyed or aborted (its handle is gone, it will never post again)
  std::atomic<uint64_t> nextWindowId_{1};
  bool threadStaged_ = false;  // Config::threadStaged applies to this clique (backend, ranks, devices)
  bool sharedGpus_ = false;    // some ranks share a device: early launches run eagerly (CallBinding::eagerOnly)
  // GPU progress of every rank (CUDA backend only): GPU work that does not complete within timeoutMs becomes
  // concclTimeout on every rank (gpu_watchdog.h). Stopped first in the destructor, before the executor goes.
  std::unique_ptr<GpuWatchdog> watchdog_;
};

}  // namespace conccl
