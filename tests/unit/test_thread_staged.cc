// Thread-per-rank calls of a local clique that launch without waiting for the peers' threads (LocalClique::post,
// Config::threadStaged): which calls do, what an early rank launches (a staged program with no peer buffer), that a
// disagreement found when the last rank posts takes the clique out of service, and, end to end on the host backend,
// that every collective still gives the reference's result.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/host_driver.h"
#include "core/config.h"
#include "core/local_clique.h"
#include "exec/executor.h"

namespace conccl {
namespace {

// Records what launch() received.
class RecordingExecutor final : public exec::Executor {
 public:
  struct Launch {
    int rank = 0;
    bool peerScratchOnly = false;  // the program of a staged schedule: every transfer between ranks via scratch
    exec::CallBinding binding;
  };

  sched::BuildOptions buildOptions() const override { return {}; }
  uint64_t checkBuffer(int, const void*, size_t, const char*, cudaStream_t) const override {
    return exec::kAllocationUnknown;
  }
  void prepareCall(const sched::Schedule&, const exec::CallBinding&, const std::vector<int>& ranks) override {
    std::lock_guard<std::mutex> lock(mutex);
    prepared.push_back(ranks);
  }
  void launch(const sched::Schedule& schedule, const exec::CallBinding& binding, int rank) override {
    std::lock_guard<std::mutex> lock(mutex);
    launches.push_back({rank, stagedProgram(schedule, rank), binding});
  }
  void synchronize(int) override {}
  void cancel() override { ++cancels; }
  void releaseRank(int) override {}

  // A staged program copies only between its own buffers and scratch (its own, or a peer's scratch it pushes to).
  static bool stagedProgram(const sched::Schedule& schedule, int rank) {
    for (const sched::Op& op : schedule.programs[static_cast<size_t>(rank)].ops) {
      if (const auto* c = std::get_if<sched::Copy>(&op)) {
        for (const sched::Location* loc : {&c->src, &c->dst}) {
          if (loc->rank != rank && loc->buffer != sched::kScratch) return false;
        }
      }
    }
    return true;
  }

  std::mutex mutex;
  std::vector<std::vector<int>> prepared;
  std::vector<Launch> launches;
  int cancels = 0;
};

struct Fixture {
  RecordingExecutor* executor = nullptr;
  std::unique_ptr<LocalClique> clique;
  float memory[4][64] = {};

  explicit Fixture(int threadStaged, size_t stagedMaxBytes = size_t{8} << 20, int ranks = 2) {
    auto owned = std::make_unique<RecordingExecutor>();
    executor = owned.get();
    Config config;
    config.backend = concclBackendHost;  // no GPU watchdog; the host backend stages only with threadStaged 2
    config.threadStaged = threadStaged;
    config.stagedMaxBytes = stagedMaxBytes;
    config.timeoutMs = 2000;
    clique = std::make_unique<LocalClique>(config, std::vector<int>(static_cast<size_t>(ranks), 0), std::move(owned));
  }

  RankArgs allReduce(int rank, size_t count, bool sole) {
    RankArgs a;
    a.kind = sched::CollKind::kAllReduce;
    a.count = count;
    a.sendbuff = memory[2 * rank];
    a.recvbuff = memory[2 * rank + 1];
    a.soleRankInGroup = sole;
    a.apiName = "concclAllReduce";
    return a;
  }
};

TEST(ThreadStaged, SoleRankLaunchesBeforeItsPeerPosts) {
  Fixture f(2);
  auto t0 = f.clique->post(0, f.allReduce(0, 16, /*sole=*/true));
  ASSERT_TRUE(t0->earlySchedule);
  f.clique->waitAndLaunch(*t0);  // returns although rank 1 has not called
  ASSERT_EQ(f.executor->launches.size(), 1u);
  const auto& first = f.executor->launches[0];
  EXPECT_EQ(first.rank, 0);
  EXPECT_TRUE(first.peerScratchOnly);
  ASSERT_EQ(first.binding.buffers.size(), 2u);
  for (void* p : first.binding.buffers[1]) EXPECT_EQ(p, nullptr) << "no peer buffer in an early launch";
  EXPECT_NE(first.binding.buffers[0][0], nullptr);
  ASSERT_EQ(f.executor->prepared.size(), 1u);
  EXPECT_EQ(f.executor->prepared[0], std::vector<int>{0}) << "an early rank prepares its own part only";

  auto t1 = f.clique->post(1, f.allReduce(1, 16, true));
  f.clique->waitAndLaunch(*t1);
  ASSERT_EQ(f.executor->launches.size(), 2u);
  EXPECT_TRUE(f.executor->launches[1].peerScratchOnly);
  EXPECT_FALSE(f.clique->asyncError());
  EXPECT_EQ(f.executor->prepared.size(), 2u) << "nothing left for the last poster to prepare";
}

TEST(ThreadStaged, GroupedCallsTakeTheRegularPath) {
  Fixture f(2);
  auto t0 = f.clique->post(0, f.allReduce(0, 16, /*sole=*/false));
  auto t1 = f.clique->post(1, f.allReduce(1, 16, false));
  EXPECT_FALSE(t0->earlySchedule);
  f.clique->waitAndLaunch(*t0);
  f.clique->waitAndLaunch(*t1);
  ASSERT_EQ(f.executor->launches.size(), 2u);
  EXPECT_NE(f.executor->launches[0].binding.buffers[1][0], nullptr) << "the regular path knows the peers' buffers";
}

TEST(ThreadStaged, OffLargeOrCudaWithSharedGpusWaits) {
  {
    Fixture off(0);
    EXPECT_FALSE(off.clique->post(0, off.allReduce(0, 16, true))->earlySchedule);
  }
  {
    Fixture host(1);  // 1 = CUDA backend with a GPU per rank only
    EXPECT_FALSE(host.clique->post(0, host.allReduce(0, 16, true))->earlySchedule);
  }
  {
    Fixture small(2, /*stagedMaxBytes=*/32);  // 16 floats = 64 bytes > 32
    EXPECT_FALSE(small.clique->post(0, small.allReduce(0, 16, true))->earlySchedule);
  }
}

TEST(ThreadStaged, FirstPosterDecidesForEveryRank) {
  Fixture f(2);
  auto t0 = f.clique->post(0, f.allReduce(0, 16, /*sole=*/false));  // decides: regular
  auto t1 = f.clique->post(1, f.allReduce(1, 16, /*sole=*/true));
  EXPECT_FALSE(t1->earlySchedule) << "follows the call's first poster";
  f.clique->waitAndLaunch(*t0);
  f.clique->waitAndLaunch(*t1);
  EXPECT_FALSE(f.executor->launches[1].peerScratchOnly);
}

TEST(ThreadStaged, DisagreementFoundLateTakesTheCliqueOutOfService) {
  Fixture f(2);
  auto t0 = f.clique->post(0, f.allReduce(0, 16, true));
  f.clique->waitAndLaunch(*t0);
  auto t1 = f.clique->post(1, f.allReduce(1, 8, true));  // another count: found when rank 1 posts
  try {
    f.clique->waitAndLaunch(*t1);
    FAIL() << "rank 1's call should fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclInvalidUsage);
    EXPECT_NE(std::string(e.message()).find("count"), std::string::npos) << e.message();
  }
  const std::optional<Error> async = f.clique->asyncError();
  ASSERT_TRUE(async);
  EXPECT_EQ(async->code(), concclInvalidUsage);
  EXPECT_NE(async->message().find("out of service"), std::string::npos) << async->message();
  EXPECT_GE(f.executor->cancels, 1) << "rank 0's waits on the GPU are released";
  EXPECT_EQ(f.executor->launches.size(), 1u);
}

TEST(ThreadStaged, MixedInPlaceRanksBothLaunchEarly) {
  // A rank's staged program does not depend on whether its peers run in place (the recording executor has no
  // small-message path to differ either), so an out-of-place and an in-place rank both launch early, and the real
  // call agrees with what both assumed.
  Fixture f(2);
  RankArgs a0 = f.allReduce(0, 16, true);
  RankArgs a1 = f.allReduce(1, 16, true);
  a1.recvbuff = const_cast<void*>(a1.sendbuff);
  a1.inPlace = true;
  auto t0 = f.clique->post(0, std::move(a0));
  auto t1 = f.clique->post(1, std::move(a1));
  EXPECT_TRUE(t0->earlySchedule);
  EXPECT_TRUE(t1->earlySchedule);
  f.clique->waitAndLaunch(*t0);
  f.clique->waitAndLaunch(*t1);
  EXPECT_FALSE(f.clique->asyncError());
}

TEST(ThreadStaged, FitsStagingByTheCallsLargestBuffer) {
  RankArgs a;
  a.kind = sched::CollKind::kAllGather;
  a.dtype = concclFloat32;
  a.count = 1024;  // recvbuff 4 ranks x 4 KiB = 16 KiB: the largest buffer
  EXPECT_TRUE(fitsStaging(a, 4, 16 << 10));
  EXPECT_FALSE(fitsStaging(a, 4, (16 << 10) - 1));
  EXPECT_FALSE(fitsStaging(a, 1, 16 << 10)) << "one rank has nothing to stage";
  EXPECT_FALSE(fitsStaging(a, 4, 0)) << "0 turns staging off";
  a.kind = sched::CollKind::kGather;  // the root's recvbuff counts, on every rank alike
  a.root = 3;
  EXPECT_TRUE(fitsStaging(a, 4, 16 << 10));
  EXPECT_FALSE(fitsStaging(a, 4, 8 << 10));
  a.kind = sched::CollKind::kAllToAllv;
  EXPECT_FALSE(fitsStaging(a, 4, size_t{1} << 40)) << "a rank does not know its peers' counts";
  a.kind = sched::CollKind::kSendRecv;
  EXPECT_FALSE(fitsStaging(a, 4, size_t{1} << 40));
  a.kind = sched::CollKind::kAllGather;
  a.count = ~size_t{0} / 2;  // sizes that overflow: the regular path reports them
  EXPECT_FALSE(fitsStaging(a, 4, ~size_t{0}));
}

TEST(ThreadStaged, SoloCallMirrorsTheRankWithoutPeerBuffers) {
  float own[2][8] = {};
  RankArgs mine;
  mine.kind = sched::CollKind::kReduceScatter;
  mine.count = 2;
  mine.sendbuff = own[0];
  mine.recvbuff = own[1];
  mine.stream = reinterpret_cast<cudaStream_t>(0x1234);
  PendingCall solo;
  assembleSoloCall(solo, mine, 1, 3);
  EXPECT_EQ(solo.call.kind, sched::CollKind::kReduceScatter);
  EXPECT_EQ(solo.call.count, 2u);
  ASSERT_EQ(solo.binding.buffers.size(), 3u);
  for (int p = 0; p < 3; ++p) {
    const auto& bufs = solo.binding.buffers[static_cast<size_t>(p)];
    ASSERT_EQ(bufs.size(), 2u);
    if (p == 1) {
      EXPECT_EQ(bufs[0], static_cast<void*>(own[0]));
      EXPECT_EQ(bufs[1], static_cast<void*>(own[1]));
      EXPECT_EQ(solo.binding.streams[1], mine.stream);
    } else {
      EXPECT_EQ(bufs[0], nullptr) << "peer " << p;
      EXPECT_EQ(bufs[1], nullptr) << "peer " << p;
      EXPECT_EQ(solo.binding.streams[static_cast<size_t>(p)], nullptr);
    }
  }
  for (bool inPlace : solo.call.inPlace) EXPECT_FALSE(inPlace);
}

// End to end on the host backend: one thread per rank, every collective with a staged form, ranks in and out of
// place, results against the reference.
TEST(ThreadStaged, EveryCollectiveMatchesTheReferenceThreadPerRank) {
  ConfigTestHook hook([](Config& config) { config.threadStaged = 2; });
  using test::Coll;
  const Coll colls[] = {Coll::kAllGather, Coll::kReduceScatter, Coll::kAllReduce, Coll::kBroadcast,
                        Coll::kReduce,    Coll::kAllToAll,      Coll::kGather,    Coll::kScatter};
  for (int n : {2, 3, 4}) {
    auto comms = test::makeHostComms(n, 20000, size_t{64} << 10);  // small scratch: several chunks per peer
    for (Coll c : colls) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{20000}}) {
        for (int pattern = 0; pattern < 3; ++pattern) {
          if (c == Coll::kAllToAll && pattern != 2) continue;  // no in-place form
          std::vector<bool> inPlace(static_cast<size_t>(n));
          for (int r = 0; r < n; ++r) inPlace[static_cast<size_t>(r)] = pattern < 2 && (r % 2) == pattern;
          for (int root : {0, n - 1}) {
            if (!sched::isRooted(c) && root != 0) continue;
            EXPECT_EQ(test::runAndCheck(c, comms, count, concclFloat32, concclSum, root, inPlace, test::Drive::kThreads,
                                        count * 131 + static_cast<uint64_t>(n) * 7 + static_cast<uint64_t>(pattern)),
                      0u)
                << collKindName(c) << " n=" << n << " count=" << count << " pattern=" << pattern << " root=" << root;
          }
        }
      }
    }
    for (concclComm_t comm : comms) EXPECT_EQ(concclCommDestroy(comm), concclSuccess);
  }
}

// The same on the host backend end to end: ranks that disagree on the count are caught when the last one posts, after
// the first launched, so the communicator goes out of service (the regular path would return concclInvalidArgument
// on both ranks and stay usable).
TEST(ThreadStaged, HostBackendDisagreementIsFoundLate) {
  std::vector<concclComm_t> comms;
  {
    ConfigTestHook hook([](Config& config) { config.threadStaged = 2; });
    comms = test::makeHostComms(2, 5000);
  }
  std::vector<float> send(16, 1.0f), recv0(16), recv1(8);
  concclResult_t results[2] = {concclSuccess, concclSuccess};
  std::thread first([&] { results[0] = concclAllReduce(send.data(), recv0.data(), 16, concclFloat32, concclSum,
                                                       comms[0], nullptr); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 has launched
  results[1] = concclAllReduce(send.data(), recv1.data(), 8, concclFloat32, concclSum, comms[1], nullptr);
  first.join();
  EXPECT_EQ(results[1], concclInvalidUsage) << concclGetLastError(comms[1]);
  for (int r = 0; r < 2; ++r) {
    concclResult_t async = concclSuccess;
    EXPECT_EQ(concclCommGetAsyncError(comms[static_cast<size_t>(r)], &async), concclSuccess);
    EXPECT_EQ(async, concclInvalidUsage) << "rank " << r;
  }
  EXPECT_NE(std::string(concclGetLastError(comms[1])).find("staged thread-per-rank"), std::string::npos)
      << concclGetLastError(comms[1]);
  for (concclComm_t comm : comms) concclCommAbort(comm);
}

}  // namespace
}  // namespace conccl
