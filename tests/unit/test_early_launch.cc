// EarlyLaunchCheck (src/core/early_launch.h): what both cliques may assume when a rank launches its part of a call
// before its peers' arguments are known. Checked on the host executor's schedules against direct comparisons.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "core/clique.h"
#include "core/early_launch.h"
#include "exec/executor.h"
#include "test_sched_util.h"

namespace conccl {
namespace {

using sched::CollKind;

struct Fixture {
  explicit Fixture(int nranks) : executor(exec::makeHostExecutor(nranks, Config{})), schedules(executor->buildOptions()),
                                 check(schedules, *executor) {}
  std::unique_ptr<exec::Executor> executor;
  ScheduleCache schedules;
  EarlyLaunchCheck check;
};

// The call with the in-place flags of `peers` flipped, written out independently of the class.
sched::CollectiveCall flip(sched::CollectiveCall call, const std::vector<int>& peers) {
  for (int p : peers) call.inPlace[static_cast<size_t>(p)] = !call.inPlace[static_cast<size_t>(p)];
  return call;
}

TEST(EarlyLaunchCheck, AgreesWithADirectComparisonOfTheFlippedScheduleForEveryKindRankAndPeerSet) {
  constexpr int n = 3;
  Fixture f(n);
  int independent = 0;
  int dependent = 0;
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kBroadcast,
                        CollKind::kReduce, CollKind::kGather, CollKind::kScatter}) {
    for (bool staged : {false, true}) {
      for (int rank = 0; rank < n; ++rank) {
        sched::CollectiveCall call = sched::testing::makeCall(kind, n, 4096, concclFloat32, concclSum, /*root=*/1);
        call.peerScratchOnly = staged;
        const auto schedule = f.schedules.get(call);
        // One peer, the other one, and every peer (kEveryPeer: both, with 3 ranks).
        for (int peer : {(rank + 1) % n, (rank + 2) % n, EarlyLaunchCheck::kEveryPeer}) {
          const std::vector<int> peers = peer == EarlyLaunchCheck::kEveryPeer
                                             ? std::vector<int>{(rank + 1) % n, (rank + 2) % n}
                                             : std::vector<int>{peer};
          const auto flipped = f.schedules.get(flip(call, peers));
          const bool want = EarlyLaunchCheck::samePart(*schedule, *flipped, rank, *f.executor);
          EXPECT_EQ(f.check.ignoresInPlaceOf(*schedule, call, rank, peer), want)
              << sched::collKindName(kind) << (staged ? " staged" : "") << " rank " << rank << " peer " << peer;
          // Remembered: the same answer again.
          EXPECT_EQ(f.check.ignoresInPlaceOf(*schedule, call, rank, peer), want);
          (want ? independent : dependent) += 1;
        }
      }
    }
  }
  // Both answers occur: the check is not vacuous on these schedules.
  EXPECT_GT(independent, 0);
  EXPECT_GT(dependent, 0);
}

TEST(EarlyLaunchCheck, AllToAllHasNoInPlaceFormAndNeverDepends) {
  Fixture f(2);
  const sched::CollectiveCall call = sched::testing::makeCall(CollKind::kAllToAll, 2, 1024);
  const auto schedule = f.schedules.get(call);
  EXPECT_TRUE(f.check.ignoresInPlaceOf(*schedule, call, 0, 1));
}

TEST(EarlyLaunchCheck, ALaunchedPartTheRealCallDoesNotGiveTheRankIsAnInternalError) {
  Fixture f(2);
  const auto launched = f.schedules.get(sched::testing::makeCall(CollKind::kAllGather, 2, 1000));
  const auto same = f.schedules.get(sched::testing::makeCall(CollKind::kAllGather, 2, 1000));
  const auto other = f.schedules.get(sched::testing::makeCall(CollKind::kAllGather, 2, 2000));
  EXPECT_NO_THROW(EarlyLaunchCheck::checkLaunchedPart(*launched, *same, 0, *f.executor));
  try {
    EarlyLaunchCheck::checkLaunchedPart(*launched, *other, 1, *f.executor);
    FAIL() << "a different program was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclInternalError);
    EXPECT_NE(std::string(e.what()).find("rank 1 launched a call early"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace conccl
