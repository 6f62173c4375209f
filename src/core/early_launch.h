// Launching a rank's part of a call before its peers' arguments are known ("early"): the one mechanism both cliques
// use. LocalClique's staged thread-per-rank calls and ProcessClique's symmetric and staged calls build the call as if
// every peer called exactly like this rank (assembleSoloCall; ProcessClique's AllToAllv mirrors), launch this rank's
// program at once, and check the assumption once the peers' arguments are known. What a rank cannot know before its
// peers call, and what could make the real call give it another program, is the peers' in-place flags: an in-place
// peer changes its own program, and the path (the small-message kernel or the copy engines) follows from every rank's
// part of the call. So a rank launches early only where its part is the same whichever flags those peers pass
// (ignoresInPlaceOf), and a clique that learns the real arguments checks what the early ranks launched
// (checkLaunchedPart). Argument mismatches between ranks (count, type, op, root) are each clique's own check: the
// LocalClique compares the ranks' posts, the ProcessClique's watchdog the peers' published entries.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "core/clique.h"
#include "exec/executor.h"
#include "sched/schedule.h"

namespace conccl {

class EarlyLaunchCheck {
 public:
  // Both outlive the check (members of the same clique).
  EarlyLaunchCheck(ScheduleCache& schedules, const exec::Executor& executor)
      : schedules_(schedules), executor_(executor) {}

  // Whether rank `rank`'s part (program and path) of `schedule`, built from `call`, stays the same when peer `peer`
  // passes the other in-place flag, or with kEveryPeer every peer (all of them flipped: with both extremes alike, a
  // mix lies between them). Remembered per (schedule, rank, peer): schedule ids are never reused. Throws what
  // building a schedule throws.
  static constexpr int kEveryPeer = -1;
  bool ignoresInPlaceOf(const sched::Schedule& schedule, const sched::CollectiveCall& call, int rank, int peer);

  // Whether rank `rank` runs the same program on the same path in both schedules.
  static bool samePart(const sched::Schedule& a, const sched::Schedule& b, int rank, const exec::Executor& executor);

  // Throws concclInternalError unless `real`, the schedule of the call as every rank made it, gives rank `rank` the
  // part it launched from `launched`.
  static void checkLaunchedPart(const sched::Schedule& launched, const sched::Schedule& real, int rank,
                                const exec::Executor& executor);

 private:
  static constexpr size_t kMaxRemembered = 1024;  // bounded like the schedule cache
  ScheduleCache& schedules_;
  const exec::Executor& executor_;
  std::mutex mutex_;
  std::map<std::tuple<uint64_t, int, int>, bool> remembered_;  // (schedule id, rank, peer)
};

}  // namespace conccl
