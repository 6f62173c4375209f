#include "core/early_launch.h"

#include <memory>
#include <string>

#include "base/error.h"

namespace conccl {

bool EarlyLaunchCheck::ignoresInPlaceOf(const sched::Schedule& schedule, const sched::CollectiveCall& call, int rank,
                                        int peer) {
  // No in-place form.
  if (call.kind == sched::CollKind::kAllToAll || call.kind == sched::CollKind::kAllToAllv) return true;
  const auto key = std::make_tuple(schedule.id, rank, peer);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = remembered_.find(key);
    if (it != remembered_.end()) return it->second;
  }
  sched::CollectiveCall flipped = call;
  for (int p = 0; p < call.nranks; ++p) {
    if (p != rank && (peer == kEveryPeer || p == peer)) {
      flipped.inPlace[static_cast<size_t>(p)] = !flipped.inPlace[static_cast<size_t>(p)];
    }
  }
  const std::shared_ptr<const sched::Schedule> other = schedules_.get(flipped);
  const bool same = samePart(*other, schedule, rank, executor_);
  std::lock_guard<std::mutex> lock(mutex_);
  if (remembered_.size() >= kMaxRemembered) remembered_.clear();
  remembered_[key] = same;
  return same;
}

bool EarlyLaunchCheck::samePart(const sched::Schedule& a, const sched::Schedule& b, int rank,
                                const exec::Executor& executor) {
  const auto r = static_cast<size_t>(rank);
  return a.programs[r] == b.programs[r] && executor.callResources(a, rank).path == executor.callResources(b, rank).path;
}

void EarlyLaunchCheck::checkLaunchedPart(const sched::Schedule& launched, const sched::Schedule& real, int rank,
                                         const exec::Executor& executor) {
  if (!samePart(launched, real, rank, executor)) {
    CONCCL_THROW(concclInternalError, "rank " + std::to_string(rank) +
                                          " launched a call early with a program the real call does not give it");
  }
}

}  // namespace conccl
